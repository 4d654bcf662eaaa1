"""LL705 direct-forward-call: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.rule import Example, FixSpec, Replacement, Rule
from lintloop.screen import Needs


class DirectForwardCall(Rule):
    code = "LL705"
    name = "direct-forward-call"
    description = "`model.forward(x)` called directly (skips hooks)"
    frameworks = ("pt",)
    kind = "hygiene"
    fix_kind = "unsafe"
    needs = Needs(file=(("text:.forward",),), statement=(("outside_call:forward",),))  # not `self.forward(x)`
    summary = ("`model.forward(x)` on an `nn.Module` from outside its own class: the call skips the "
               "module's hooks. A receiver is a module when it is an instance of a class deriving from "
               "`nn.Module` (a LightningModule is one, however imported; an instance is also what "
               "`Cls.load_from_checkpoint(...)` / `Cls.from_pretrained(...)` gives), built by torch or a known "
               "model library, a module attribute assigned in `__init__`, a parameter every same-file call site "
               "passes a module, or a module a same-file function returns (alone or in a tuple it is unpacked "
               "from).")
    why = ("`nn.Module.__call__` runs the forward pre-hooks and hooks, and the backward hooks, around "
           "`forward`. Calling `forward` directly skips all of them: hooks registered by the user, and "
           "those that tools install (DistributedDataParallel's gradient synchronisation when called on "
           "the wrapper's `.module`, FSDP's parameter gathering, quantization observers, "
           "`torch.utils.hooks`-based profilers and feature extractors, pruning masks).")
    symptom = ("Nothing fails and the output is the same; the hooks just do not run. LL705_bad.py "
               "registers a forward hook on the model that records the logits' scale, then trains with "
               "`model.forward(xb)`: it prints `hook calls: 0 of 3 steps` (`3 of 3` with `model(xb)`).")
    remedy = "Call the module: `model(x)`."
    fix_safety = ("Unsafe: hooks registered on the module start running, which changes behaviour when a "
                  "hook has side effects or modifies the output.")
    flagged = (
        Example("""
import torch.nn as nn
model = nn.Sequential(nn.Linear(10, 2))
for x, y in loader:
    out = model.forward(x)
    loss = criterion(out, y)
    loss.backward()
""", expect="""
4:11-4:27 [unsafe fix] `model.forward(...)` skips the module's hooks
    help: call `model(...)`
    note: no forward or backward hook runs: neither the user's nor those that DDP, FSDP, quantization
        and profilers install
""", fix_diff="""
@@ -4 +4 @@
-    out = model.forward(x)
+    out = model(x)
"""),
        Example("""
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
class Net(torch.nn.Module):
    def forward(self, x):
        return x
model = DDP(Net().to(device))
logits = model.module.forward(images)
""", expect="""
7:10-7:38 [unsafe fix] `model.module.forward(...)` skips the module's hooks
    help: call `model.module(...)`
    note: no forward or backward hook runs: neither the user's nor those that DDP, FSDP, quantization
        and profilers install
""", fix_diff="""
@@ -7 +7 @@
-logits = model.module.forward(images)
+logits = model.module(images)
"""),
        Example("""
import pytorch_lightning as pl
import timm
import torch
class Classifier(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.backbone = timm.create_model("resnet18", num_classes=10)
    def forward(self, x):
        return self.backbone.forward(x)
""", expect="""
9:16-9:40 [unsafe fix] `self.backbone.forward(...)` skips the module's hooks
    help: call `self.backbone(...)`
    note: no forward or backward hook runs: neither the user's nor those that DDP, FSDP, quantization
        and profilers install
""", fix_diff="""
@@ -9 +9 @@
-        return self.backbone.forward(x)
+        return self.backbone(x)
"""),
        Example("""
import torch.nn as nn
def evaluate(model, loader):
    return [model.forward(x) for x, _ in loader]
evaluate(nn.Linear(4, 2), val_loader)
""", expect="""
3:13-3:29 [unsafe fix] `model.forward(...)` skips the module's hooks
    help: call `model(...)`
    note: no forward or backward hook runs: neither the user's nor those that DDP, FSDP, quantization
        and profilers install
""", fix_diff="""
@@ -3 +3 @@
-    return [model.forward(x) for x, _ in loader]
+    return [model(x) for x, _ in loader]
"""),
        Example("""
import lightning as L
import torch
class Segmenter(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.head = torch.nn.Conv2d(3, 2, kernel_size=1)
    def forward(self, x):
        return self.head(x)

segmenter = Segmenter.load_from_checkpoint("best.ckpt")
masks = segmenter.forward(images)
""", expect="""
11:9-11:34 [unsafe fix] `segmenter.forward(...)` skips the module's hooks
    help: call `segmenter(...)`
    note: no forward or backward hook runs: neither the user's nor those that DDP, FSDP, quantization
        and profilers install
""", fix_diff="""
@@ -11 +11 @@
-masks = segmenter.forward(images)
+masks = segmenter(images)
"""),
        Example("""
import pytorch_lightning as pl
import torch
class SetScorer(pl.LightningModule):
    def forward(self, x, mask=None):
        return x.sum(dim=1)

def fit_scorer(**hparams):
    model = SetScorer(**hparams)
    trainer.fit(model, loaders)
    model = model.to("cuda")
    return model, trainer.test(model)

scorer, metrics = fit_scorer(lr=1e-3)
scores = scorer.forward(sets, mask=None)
""", expect="""
14:10-14:41 [unsafe fix] `scorer.forward(...)` skips the module's hooks
    help: call `scorer(...)`
    note: no forward or backward hook runs: neither the user's nor those that DDP, FSDP, quantization
        and profilers install
""", fix_diff="""
@@ -14 +14 @@
-scores = scorer.forward(sets, mask=None)
+scores = scorer(sets, mask=None)
"""),
    )
    not_flagged = (
        Example("""
import torch
class TextPipeline:
    @classmethod
    def from_pretrained(cls, path):
        return cls()
    def forward(self, text):
        return text.lower()

pipeline = TextPipeline.from_pretrained("tokenizer/")
tokens = pipeline.forward("Hello")
"""),
        Example("""
import torch.nn as nn
class Block(nn.Linear):
    def forward(self, x):
        return super().forward(x).relu()
    def run(self, x):
        return self.forward(x)
"""),
        Example("""
import torch
class Clamp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clamp(0, 1)
y = Clamp.forward(None, x)
"""),
        Example("""
import torch
class Scaler:
    def forward(self, x):
        return x * 2
op = Scaler()
out = op.forward(torch.ones(3))
"""),
        Example("""
import torch.nn as nn
class Net(nn.Module):
    def forward(self, x):
        return x
model = Net()
out = model(x)
handle = model.forward
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "forward"):
            return
        owner = func.value
        if isinstance(owner, cst.Name) and owner.value == "self":
            return  # `self.forward(x)` inside the class: its own business
        if self.ctx.modules.forward_of(node) is None:
            return
        code = self.ctx.snippet(owner, 50)
        self.report(node, f"`{code}.forward(...)` skips the module's hooks",
                    help=f"call `{code}(...)`",
                    note="no forward or backward hook runs: neither the user's nor those that DDP, FSDP, "
                         "quantization and profilers install",
                    fix=FixSpec("unsafe", [Replacement(func, self.ctx.module.code_for_node(owner))],
                                f"call `{code}(...)`"))
