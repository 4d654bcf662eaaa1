"""`ctx.modules`: which expressions hold an nn.Module, the calls that run a forward, last layers."""

import textwrap

import libcst as cst
import pytest

from lintloop.analysis import FileContext


def context(code: str) -> FileContext:
    return FileContext(cst.parse_module(textwrap.dedent(code)))


def last_call(ctx: FileContext) -> cst.Call:
    """The outermost call of the file's last statement."""
    statement = ctx.module.body[-1]
    return next(n for n in ctx.nodes(cst.Call) if ctx.statement_of(n) is statement
                and not isinstance(ctx.parents[n], (cst.Call, cst.Arg, cst.Attribute)))


def forward_module(code: str):
    ctx = context(code)
    return ctx.modules.forward_of(last_call(ctx))


@pytest.mark.parametrize("code", [
    # a same-file subclass, through another same-file class, any import spelling
    "import torch\nclass Net(torch.nn.Module): pass\nmodel = Net()\nmodel(x)",
    "from torch import nn as N\nclass Base(N.Module): pass\nclass Net(Base): pass\nmodel = Net().to(dev)\nmodel(x)",
    "from torch.nn import Module\nclass Net(Module): pass\ndef build():\n    return Net()\nmodel = build()\nmodel(x)",
    # torch layers and containers, torchvision, timm, transformers
    "import torch.nn as nn\nmodel = nn.Sequential(nn.Linear(2, 2))\nmodel(x)",
    "import torch.nn as nn\nnn.Softmax(dim=1)(x)",
    "import torchvision\nmodel = torchvision.models.resnet18(weights=None)\nmodel(x)",
    "import timm\nmodel = timm.create_model('resnet50', pretrained=False)\nmodel.cuda()\nmodel(x)",
    "from transformers import AutoModelForSequenceClassification as A\nmodel = A.from_pretrained('bert')\nmodel(**batch)",
    # wrappers and what they wrap
    "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(torch.nn.Linear(2, 2))\n"
    "model.module(x)",
    "import torch\nmodel = torch.compile(torch.nn.Linear(2, 2))\nmodel(x)",
    "import copy, torch\nq = torch.nn.Linear(2, 2)\ntarget = copy.deepcopy(q)\ntarget(x)",
    "import torch\nfrom accelerate import Accelerator\nacc = Accelerator()\nmodel = torch.nn.Linear(2, 2)\n"
    "model, opt = acc.prepare(model, opt)\nmodel(x)",
    # attributes assigned in __init__, `self` inside the class, parameters
    "import torch.nn as nn\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    "        self.backbone = nn.Sequential(nn.Linear(2, 2))\n    def forward(self, x):\n        return self.backbone(x)",
    "import torch.nn as nn\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    "        self.fc = nn.Linear(2, 2)\nnet = Net()\nnet.fc(x)",
    "import torch.nn as nn\ndef train(model, x):\n    return model(x)\ntrain(nn.Linear(2, 2), x)\ntrain(net := nn.Linear(3, 3), x)",
    "import torch.nn as nn\ndef step(model: nn.Module, x):\n    model(x)",
])
def test_module_values_are_recognised(code):
    ctx = context(code)
    model_call = next(c for c in ctx.nodes(cst.Call) if ctx.snippet(c.func) in ("model", "target", "self.backbone",
                                                                              "net.fc", "model.module")
                      or ctx.snippet(c).startswith("nn.Softmax(dim=1)("))
    assert ctx.modules.forward_of(model_call) is not None


@pytest.mark.parametrize("code", [
    "import torch\nclass Op:\n    def forward(self, x):\n        return x\nop = Op()\nop(x)",
    "import torch\nclass F(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x):\n        return x\nF.apply(x)",
    "import torch\ntorch.randn(3)",
    "import torch.nn.functional as F\nF.relu(x)",
    "import torch\nfrom transformers import AutoTokenizer\ntok = AutoTokenizer.from_pretrained('bert')\ntok(text)",
    "import torch.nn as nn\ndef step(model, x):\n    return model(x)\nstep(lambda v: v, x)",
    "import torch.nn as nn\ndef step(model, x):\n    return model(x)\nstep(nn.Linear(2, 2), x)\nstep(make(), x)",
    "import torch.nn as nn\ndef step(model, x):\n    return model(x)",
    "import torch\nfrom transformers import DataCollatorForLanguageModeling as C\ncollate = C(tok)\ncollate(rows)",
    "import torch.nn as nn\nlayer = nn.Linear(2, 2)\nlayer = make()\nlayer(x)",
])
def test_non_modules_are_not(code):
    ctx = context(code)
    assert [c for c in ctx.nodes(cst.Call) if ctx.modules.forward_of(c) is not None] == []


def test_wrapper_kind_and_unwrapping():
    ctx = context("import torch\nimport torch.nn.parallel as par\nnet = torch.nn.Linear(2, 2)\n"
                  "ddp = par.DistributedDataParallel(net.to(0), device_ids=[0])\nddp(x)\nddp.module(x)")
    first, second = [c for c in ctx.nodes(cst.Call) if ctx.modules.forward_of(c) is not None]
    wrapper = ctx.modules.forward_of(first)
    assert wrapper.is_ddp and wrapper.unwrapped().qualname == "torch.nn.Linear"
    assert ctx.modules.forward_of(second).qualname == "torch.nn.Linear"


def test_dataparallel_is_a_wrapper_but_not_ddp():
    ctx = context("import torch\nmodel = torch.nn.DataParallel(torch.nn.Linear(2, 2))\nmodel(x)")
    value = ctx.modules.forward_of(last_call(ctx))
    assert value.kind == "wrapper" and not value.is_ddp


def test_super_forward_is_not_a_forward_of_a_known_module():
    ctx = context("import torch.nn as nn\nclass A(nn.Linear):\n    def forward(self, x):\n"
                  "        return super().forward(x)")
    assert ctx.modules.forward_calls == []


def test_forward_calls_lists_model_outputs_only():
    ctx = context("import torch\nmodel = torch.nn.Linear(2, 2)\nout = model(x)\nloss = out.sum()\n"
                  "y = model.forward(x)")
    assert [ctx.snippet(c) for c in ctx.modules.forward_calls] == ["model(x)", "model.forward(x)"]


@pytest.mark.parametrize("code,expected", [
    ("import torch.nn as nn\nmodel = nn.Sequential(nn.Linear(2, 2), nn.Softmax(dim=1))\nmodel(x)", "softmax"),
    ("import torch.nn as nn\nhead = nn.Sequential(nn.Linear(2, 2), nn.LogSoftmax(dim=1))\n"
     "model = nn.Sequential(nn.Flatten(), head).to(dev)\nmodel(x)", "log_softmax"),
    ("import torch.nn as nn\nimport torch.nn.functional as F\nclass Net(nn.Module):\n"
     "    def forward(self, x):\n        x = self.fc(x)\n        return F.softmax(x, dim=1)\nNet()(x)", "softmax"),
    ("import torch\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        return self.fc(x).softmax(-1)\n"
     "model = Net()\nmodel(x)", "softmax"),
    ("import torch\nclass Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.out = torch.nn.Softmax(dim=1)\n    def forward(self, x):\n        return self.out(self.fc(x))\n"
     "model = Net()\nmodel(x)", "softmax"),
    ("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
     "model = DDP(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Sigmoid()))\nmodel(x)", "sigmoid"),
    ("import torch.nn as nn\nmodel = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2))\nmodel(x)", None),
    ("import torch.nn as nn\nimport torch.nn.functional as F\nclass Net(nn.Module):\n    def forward(self, x):\n"
     "        if self.training:\n            return self.fc(x)\n        return F.softmax(self.fc(x), 1)\nNet()(x)", None),
    ("import timm\nmodel = timm.create_model('resnet18')\nmodel(x)", None),
])
def test_last_layer_where_visible(code, expected):
    ctx = context(code)
    module = ctx.modules.forward_of(last_call(ctx))
    assert module is not None
    layer = ctx.modules.last_layer(module)
    assert (layer.kind if layer else None) == expected


@pytest.mark.parametrize("code,expected", [
    ("import torch.nn.functional as F\np = F.softmax(logits, dim=1)\nq = p.view(-1, 4)\nf(q)", "softmax"),
    ("import torch\np = torch.softmax(logits, 1)\nf(p)", "softmax"),
    ("import torch\np = logits.softmax(dim=-1).float()\nf(p)", "softmax"),
    ("import torch\nfrom torch import nn\np = nn.Softmax(dim=1)(logits)\nf(p)", "softmax"),
    ("import torch.nn.functional as F\np = F.log_softmax(logits, dim=1)\nf(p)", "log_softmax"),
    ("import torch\np = torch.log(logits.softmax(1))\nf(p)", None),
    ("def softmax(x):\n    return x\np = softmax(logits)\nf(p)", None),
])
def test_activation_of_a_value(code, expected):
    ctx = context(code)
    value = positional = last_call(ctx).args[0].value
    found = ctx.modules.activation_of(positional, value)
    assert (found.kind if found else None) == expected


def test_no_grad_code_by_block_or_decorator():
    ctx = context("import torch\nmodel = torch.nn.Linear(2, 2)\nwith torch.no_grad():\n    a = model(x)\n"
                  "@torch.inference_mode()\ndef evaluate():\n    return model(x)\nb = model(x)")
    flags = [ctx.modules.in_no_grad(c) for c in ctx.modules.forward_calls]
    assert flags == [True, True, False]


def test_losses_and_activations_are_parameterless_modules():
    ctx = context("import torch.nn as nn\ncrit = nn.CrossEntropyLoss()\nnet = nn.Linear(2, 2)\nloss = crit(net(x), y)")
    crit_call, net_call = ctx.modules.forward_calls
    assert ctx.modules.forward_of(crit_call).parameterless
    assert not ctx.modules.forward_of(net_call).parameterless
