"""`ctx.modules.mode_dependence` / `same_in_both_modes`: whether a module behaves differently in training
and evaluation mode (Dropout, BatchNorm / InstanceNorm with running statistics, `nn.RReLU`, code reading
`self.training`), that nothing in it does, or unknown (a part the file does not show)."""

import textwrap

import libcst as cst
import pytest

from lintloop.analysis import FileContext

HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"


def mode_of(code: str):
    """The file and the mode dependence of what it passes to `use(...)`."""
    ctx = FileContext(cst.parse_module(HEADER + textwrap.dedent(code)))
    used = next(c.args[0].value for c in ctx.nodes(cst.Call) if ctx.snippet(c.func) == "use")
    return ctx, ctx.modules.mode_dependence(used)


SAME = [
    # torch layers without mode-dependent behaviour, directly and in containers
    "model = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1)).to('cpu')\nuse(model)",
    "model = nn.Sequential(OrderedDict([('fc', nn.Linear(2, 2)), ('act', nn.Tanh())]))\nuse(model)",
    "model = nn.ModuleList([nn.Conv2d(1, 4, 3), nn.MaxPool2d(2)])\nuse(model)",
    "model = nn.BatchNorm1d(8, track_running_stats=False)\nuse(model)",
    "model = nn.InstanceNorm2d(8)\nuse(model)",
    "model = nn.LSTM(4, 8, 2)\nuse(model)",
    "model = nn.TransformerEncoderLayer(16, 2, dropout=0.0)\nuse(model)",
    "model = torch.compile(nn.Linear(2, 2))\nuse(model)",
    # a same-file class: layers in __init__, plain data beside them, a parameter every call site passes
    """
    class Net(nn.Module):
        def __init__(self, hidden, scale=2.0):
            super().__init__()
            self.hidden = hidden
            self.scale = scale * hidden ** -0.5
            self.weight = nn.Parameter(torch.zeros(hidden))
            self.block = nn.Sequential(nn.Linear(2, hidden), nn.ReLU())
            self.head = nn.Linear(hidden, 1)
        def forward(self, x):
            return self.head(self.block(x)) * self.scale
    model = Net(hidden=16).to('cpu')
    use(model)
    """,
    # submodules of same-file classes, a ModuleList filled in __init__, a helper called from forward
    """
    class Block(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.fc = nn.Linear(width, width)
        def forward(self, x):
            return self._act(self.fc(x))
        def _act(self, x):
            return F.relu(x)
    class Net(nn.Module):
        def __init__(self, depth):
            super().__init__()
            self.blocks = nn.ModuleList()
            for _ in range(depth):
                self.blocks.append(Block(8))
        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return x
    model = Net(3)
    use(model)
    """,
    # a model passed as a parameter: every call site passes such a module
    """
    def fit(model, loader):
        use(model)
    fit(nn.Linear(2, 2), loader)
    fit(nn.Sequential(nn.Linear(2, 2)), loader)
    """,
    # a buffer and a parameter registered by name, a torch layer as the base class
    """
    class Masked(nn.Module):
        def __init__(self, size):
            super().__init__()
            self.register_buffer("mask", torch.tril(torch.ones(size, size)))
            self.register_parameter("gain", nn.Parameter(torch.ones(size)))
            self.proj = nn.Linear(size, size)
        def forward(self, x):
            return self.proj(x).masked_fill(self.mask == 0, 0.0) * self.gain
    class Tied(nn.Linear):
        def forward(self, x):
            return x @ self.weight.t()
    model = nn.Sequential(Masked(4), Tied(4, 4))
    use(model)
    """,
    # an `__init__` parameter holds what the call building this instance passes, not what other calls do
    """
    class Wrapper(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner
        def forward(self, x):
            return self.inner(x)
    regularised = Wrapper(nn.Dropout())
    model = Wrapper(nn.Linear(2, 2))
    use(model)
    """,
    # always-on functional dropout does not depend on the mode
    """
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)
        def forward(self, x):
            return F.dropout(self.fc(x), p=0.1)
    model = Net()
    use(model)
    """,
]

DIFFERS = [
    ("model = nn.Sequential(nn.Linear(2, 8), nn.Dropout(p=0.5))\nuse(model)", "nn.Dropout(p=0.5)", "dropout"),
    ("model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4))\nuse(model)", "nn.BatchNorm2d(4)", "batch_norm"),
    ("model = nn.InstanceNorm1d(4, track_running_stats=True)\nuse(model)",
     "nn.InstanceNorm1d(4, track_running_stats=True)", "batch_norm"),
    ("model = nn.TransformerEncoderLayer(16, 2)\nuse(model)", "nn.TransformerEncoderLayer(16, 2)", "dropout"),
    ("model = nn.Sequential(nn.Linear(2, 2), nn.RReLU())\nuse(model)", "nn.RReLU()", "random_activation"),
    ("""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)
        def forward(self, x):
            return F.dropout(self.fc(x), 0.2, training=self.training)
    model = Net()
    use(model)
    """, "F.dropout(self.fc(x), 0.2, training=self.training)", "training_flag"),
    ("""
    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = nn.AlphaDropout(0.1)
        def forward(self, x):
            return self.drop(x)
    class Net(nn.Module):
        def __init__(self, head):
            super().__init__()
            self.head = head
        def forward(self, x):
            return self.head(x)
    model = Net(Head())
    use(model)
    """, "nn.AlphaDropout(0.1)", "dropout"),
    # a parameter: one call site passes a model with dropout
    ("""
    def fit(model, loader):
        use(model)
    fit(nn.Linear(2, 2), loader)
    fit(nn.Sequential(nn.Linear(2, 2), nn.Dropout()), loader)
    """, "nn.Dropout()", "dropout"),
    # layers stored by tuple assignment, a ModuleList extended with a literal list
    ("""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.drop = nn.Linear(4, 4), nn.Dropout2d(0.1)
        def forward(self, x):
            return self.drop(self.fc(x))
    model = Net()
    use(model)
    """, "nn.Dropout2d(0.1)", "dropout"),
    ("""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList()
            self.layers.extend([nn.Linear(4, 4), nn.BatchNorm1d(4)])
        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x
    model = Net()
    use(model)
    """, "nn.BatchNorm1d(4)", "batch_norm"),
    # a trainer holding the model
    ("""
    class Trainer:
        def __init__(self, model):
            self.model = model
        def fit(self):
            use(self.model)
    Trainer(nn.Sequential(nn.SyncBatchNorm(8)))
    """, "nn.SyncBatchNorm(8)", "batch_norm"),
]

UNKNOWN = [
    "import torchvision\nmodel = torchvision.models.resnet18()\nuse(model)",
    "from mylib import build_model\nmodel = build_model()\nuse(model)",
    "model = nn.Sequential(*layers)\nuse(model)",
    "model = nn.Sequential()\nmodel.add_module('drop', nn.Dropout())\nuse(model)",
    "model = nn.LSTM(4, 8, 2, dropout=rate)\nuse(model)",
    # an attribute `__init__` does not set, an imported base, a value the file cannot follow
    """
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)
        def forward(self, x):
            return self.head(self.fc(x))
    model = Net()
    use(model)
    """,
    """
    from mylib import Backbone
    class Net(Backbone):
        def forward(self, x):
            return x
    model = Net()
    use(model)
    """,
    """
    class Net(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.encoder = config.encoder
        def forward(self, x):
            return self.encoder(x)
    model = Net(config)
    use(model)
    """,
    # a parameter without a call site
    "def fit(model, loader):\n    use(model)",
    # attributes `forward` runs that `__init__` does not set: through a method, iterated
    """
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
        def forward(self, x):
            return self.encoder.encode(x)
    model = Net()
    use(model)
    """,
    """
    class Net(nn.Module):
        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return x
    model = Net()
    use(model)
    """,
    # a base's `__init__` parameter, given through `super().__init__(...)`
    """
    class Base(nn.Module):
        def __init__(self, head):
            super().__init__()
            self.head = head
        def forward(self, x):
            return self.head(x)
    class Net(Base):
        def __init__(self):
            super().__init__(nn.Linear(2, 2))
    model = Net()
    use(model)
    """,
    # what torch cannot say from the text: a loaded model, quantization-aware layers, a model without `forward`
    "model = torch.load('model.pt')\nuse(model)",
    "model = nn.qat.Linear(2, 2, qconfig=qconfig)\nuse(model)",
    """
    import lightning as L
    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)
        def training_step(self, batch, batch_idx):
            return self.fc(batch).sum()
    model = Module()
    use(model)
    """,
]


@pytest.mark.parametrize("code", SAME)
def test_modules_known_to_behave_the_same_in_both_modes(code):
    ctx, mode = mode_of(code)
    assert mode.differs is False, (ctx.snippet(mode.part) if mode.part is not None else None, mode)


@pytest.mark.parametrize("code, part, kind", DIFFERS)
def test_the_part_that_depends_on_the_mode_is_named(code, part, kind):
    ctx, mode = mode_of(code)
    assert mode.differs is True
    assert (ctx.snippet(mode.part, 200), mode.kind) == (part, kind)


@pytest.mark.parametrize("code", UNKNOWN)
def test_parts_the_file_does_not_show_make_it_unknown(code):
    ctx, mode = mode_of(code)
    assert mode.differs is None, (ctx.snippet(mode.part) if mode.part is not None else None, mode)


def test_a_class_redefined_in_a_notebook_counts_every_definition():
    _, mode = mode_of("""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)
        def forward(self, x):
            return self.fc(x)
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.3))
        def forward(self, x):
            return self.fc(x)
    model = Net()
    use(model)
    """)
    assert mode.differs is True and mode.kind == "dropout"


def test_same_in_both_modes_is_the_known_answer_only():
    ctx, _ = mode_of("model = nn.Linear(2, 2)\nuse(model)")
    used = next(c.args[0].value for c in ctx.nodes(cst.Call) if ctx.snippet(c.func) == "use")
    assert ctx.modules.same_in_both_modes(used)
    ctx, _ = mode_of("from mylib import Net\nmodel = Net()\nuse(model)")
    used = next(c.args[0].value for c in ctx.nodes(cst.Call) if ctx.snippet(c.func) == "use")
    assert not ctx.modules.same_in_both_modes(used)


@pytest.mark.parametrize("code", [
    # a Lightning class method that builds an instance
    "import lightning as L\nclass Net(L.LightningModule):\n    pass\n"
    "model = Net.load_from_checkpoint('a.ckpt')\nuse(model)",
    # a module a same-file function returns in a tuple, unpacked
    "class Net(nn.Module):\n    pass\ndef train():\n    net = Net().to('cpu')\n    return net, {'acc': 1.0}\n"
    "model, result = train()\nuse(model)",
])
def test_more_module_values(code):
    ctx, _ = mode_of(code)
    used = next(c.args[0].value for c in ctx.nodes(cst.Call) if ctx.snippet(c.func) == "use")
    assert ctx.modules.value(used) is not None


@pytest.mark.parametrize("code", [
    # a class method of a class that is no module; a tuple whose place holds something else
    "class Pipeline:\n    pass\nmodel = Pipeline.from_pretrained('x')\nuse(model)",
    "class Net(nn.Module):\n    pass\ndef train():\n    return {'acc': 1.0}, Net()\n"
    "model, result = train()\nuse(model)",
])
def test_values_that_are_no_modules(code):
    ctx, _ = mode_of(code)
    used = next(c.args[0].value for c in ctx.nodes(cst.Call) if ctx.snippet(c.func) == "use")
    assert ctx.modules.value(used) is None
