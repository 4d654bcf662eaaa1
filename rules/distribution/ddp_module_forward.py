"""LL404 ddp-module-forward: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.rule import Example, FixSpec, Replacement, Rule
from lintloop.screen import Needs


class DdpModuleForward(Rule):
    code = "LL404"
    name = "ddp-module-forward"
    description = "a forward pass through `ddp_model.module` (skips DDP's sync)"
    frameworks = ("pt",)
    fix_kind = "unsafe"
    probe = "effect"
    # The forward pass past the wrapper is in the unit (`ddp.module(x)`, `ddp.module.forward(x)`); the
    # backward that makes it a training forward may be in a caller, which the screen selects.
    needs = Needs(file=(("name:DistributedDataParallel",),),
                  statement=(("name:module",), ("call:module", "outside_call:forward")))
    summary = ("In training (a training loop or a train-step function), the forward pass runs through "
               "`ddp_model.module(x)` or `ddp_model.module.forward(x)` on a `DistributedDataParallel` "
               "wrapper instead of `ddp_model(x)`.")
    why = ("DistributedDataParallel synchronises gradients only for a forward that goes through the wrapper: "
           "`DDP.forward` prepares the reducer for the backward pass, and its autograd hooks then all-reduce "
           "the gradients. Through `.module` the reducer is never armed, so each process steps on its own "
           "local gradients and the replicas drift apart.")
    symptom = ("No error, no warning. LL404_bad.py (2 gloo processes on CPU, same initial "
               "weights, each rank its own data shard) prints `after 20 steps on 2 ranks: largest parameter "
               "difference between ranks 0.121444`; through the wrapper (LL404_good.py) it is `0.000000`.")
    remedy = ("Call the wrapper: `ddp_model(x)`. Keep `.module` for what is not a training forward: "
              "`ddp_model.module.state_dict()`, saving, attribute access, evaluation under `torch.no_grad()`.")
    fix_safety = ("Unsafe: the forward then runs through DDP, which all-reduces gradients and may need "
                  "`find_unused_parameters=True` when part of the model is unused.")
    flagged = (
        Example("""
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
model = DDP(Net().to(rank), device_ids=[rank])
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model.module(x), y)
    loss.backward()
    optimizer.step()
""", expect="""
6:22-6:37 [unsafe fix] `model.module(...)` runs the forward pass past the DistributedDataParallel
    wrapper
    help: call the wrapper: `model(...)`
    note: its gradients are not all-reduced, so each process trains its own copy and the replicas
        diverge
""", fix_diff="""
@@ -6 +6 @@
-    loss = criterion(model.module(x), y)
+    loss = criterion(model(x), y)
"""),
        Example("""
import torch
import torch.nn.functional as F
def train_step(model, batch, optimizer):
    out = model.module.forward(batch["x"])
    loss = F.cross_entropy(out, batch["y"])
    loss.backward()
    optimizer.step()
ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))
for batch in loader:
    train_step(ddp, batch, opt)
""", expect="""
4:11-4:43 [unsafe fix] `model.module.forward(...)` runs the forward pass past the
    DistributedDataParallel wrapper
    help: call the wrapper: `model(...)`
    note: its gradients are not all-reduced, so each process trains its own copy and the replicas
        diverge
""", fix_diff="""
@@ -4 +4 @@
-    out = model.module.forward(batch["x"])
+    out = model(batch["x"])
"""),
        Example("""
import torch.nn as nn
from torch.nn.parallel.distributed import DistributedDataParallel
net = DistributedDataParallel(nn.Sequential(nn.Linear(4, 4)).cuda())
step = 0
while step < 100:
    outputs = net.module(inputs)
    loss = outputs.pow(2).mean()
    loss.backward()
    opt.step()
    step += 1
""", expect="""
6:15-6:33 [unsafe fix] `net.module(...)` runs the forward pass past the DistributedDataParallel wrapper
    help: call the wrapper: `net(...)`
    note: its gradients are not all-reduced, so each process trains its own copy and the replicas
        diverge
""", fix_diff="""
@@ -6 +6 @@
-    outputs = net.module(inputs)
+    outputs = net(inputs)
"""),
    )
    not_flagged = (
        Example("""
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
model = DDP(Net().to(rank), device_ids=[rank])
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    torch.save(model.module.state_dict(), "ckpt.pt")
    print(model.module.fc.weight.norm())
"""),
        Example("""
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
model = DDP(Net())
for epoch in range(3):
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        for x, y in val_loader:
            acc = (model.module(x).argmax(1) == y).float().mean()
"""),
        Example("""
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
model = DDP(Net())
@torch.no_grad()
def evaluate(loader):
    return [model.module(x) for x, _ in loader]
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    evaluate(val_loader)
"""),
        Example("""
import torch
model = torch.nn.DataParallel(Net())
for x, y in loader:
    loss = criterion(model.module(x), y)
    loss.backward()
    optimizer.step()
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        wrapper = self._wrapper(node.func)
        if wrapper is None or not self._in_training(node):
            return
        code = self.ctx.snippet(wrapper)
        self.report(node, f"`{self.ctx.snippet(node.func, 30)}(...)` runs the forward pass past the "
                          "DistributedDataParallel wrapper",
                    help=f"call the wrapper: `{code}(...)`",
                    note="its gradients are not all-reduced, so each process trains its own copy and the replicas "
                         "diverge",
                    fix=FixSpec("unsafe", [Replacement(node.func, self.ctx.module.code_for_node(wrapper))],
                                f"call `{code}(...)`"))

    def _wrapper(self, func: cst.BaseExpression) -> cst.BaseExpression | None:
        """The DDP wrapper in `ddp.module` / `ddp.module.forward`, when `func` is one of those."""
        if isinstance(func, cst.Attribute) and func.attr.value == "forward":
            func = func.value
        if not (isinstance(func, cst.Attribute) and func.attr.value == "module"):
            return None
        value = self.ctx.modules.value(func.value, func)
        return func.value if value is not None and value.is_ddp else None

    def _in_training(self, call: cst.Call) -> bool:
        ctx = self.ctx
        if ctx.modules.in_no_grad(call):
            return False
        loop = ctx.innermost_loop(call)
        function = ctx.scope_of(call)
        training = (loop is not None and ctx.training.is_training_loop(loop)) or function in ctx.training.functions
        return training and ctx.training.is_differentiated(call)
