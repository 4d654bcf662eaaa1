"""LL301 loss-tensor-accumulation: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.nodes import call_name, dotted, keyword_arg, positional_args, receiver
from lintloop.analysis.loop_values import FEW_ITERATIONS
from lintloop.analysis.training import CALL_DEPTH, TRAINING_CALL_TOKENS
from lintloop.rule import Example, FixSpec, Replacement, Rule
from lintloop.screen import Needs


# Calls and attributes that turn a tensor into a value that holds no graph / no tensor.
_CONVERTING_METHODS = {"item", "detach", "numpy", "tolist", "detach_"}


_CONVERTING_BUILTINS = ("float", "int")


def _framework(call: cst.Call) -> str:
    """'pt' for `backward()` / torch.autograd, 'tf' for `tape.gradient`."""
    return "tf" if call_name(call) == "gradient" else "pt"


def _root(expr: cst.BaseExpression) -> str | None:
    """The variable an accumulator lives in: `history` for `history["loss"]`, `self.losses` for itself."""
    while isinstance(expr, cst.Subscript):
        expr = expr.value
    return dotted(expr)



class LossTensorAccumulation(Rule):
    code = "LL301"
    name = "loss-tensor-accumulation"
    description = "a loss tensor kept across steps (autograd graph kept alive)"
    frameworks = ("tf", "pt")
    # The accumulation may sit in a train-step function without a loop of its own: the screen selects
    # the loop that calls it along with it.
    needs = Needs(file=(TRAINING_CALL_TOKENS, ("loop",)),
                  statement=(("augassign", "call:append"),))
    fix_kind = "safe (`.detach()`, PyTorch) / unsafe (`.numpy()`, TensorFlow)"
    probe = "mem"
    summary = ("In a training loop, or a train-step function called from one, a loss tensor (the value a "
               "gradient is taken of, or the result of a train-step function returning it, also as an element of a "
               "returned tuple: `loss, logits = train_step(...)`) is appended to a list "
               "or `+=`-accumulated into a variable, container entry or attribute (`total`, `history[\"loss\"]`, "
               "`self.losses`) that outlives the iteration, without `.item()`, `.detach()`, `.numpy()` or `float()`. "
               "PyTorch graphs are reported whatever the model's size, also when the accumulator is re-created for "
               "every pass over the data: what a step keeps grows with its graph, and how many steps a pass "
               "has is not known from the code. Not flagged: TensorFlow eager scalars in an accumulator re-created "
               "every pass (bounded and small), and an accumulator that provably holds a few steps (its loops run "
               "`range(10)` fake batches).")
    why = ("PyTorch: each loss tensor references the autograd graph of its step, so every step's graph stays "
           "alive as long as the accumulator does: its nodes once `backward()` has freed the activations they "
           "saved, and those activations too (batch x layer widths) where the loss is not backpropagated or "
           "`retain_graph=True` keeps them. TensorFlow: each eager loss tensor stays alive (on a GPU, in device "
           "memory).")
    symptom = ("In LL301_bad.py, after 300 steps `total_loss` is still a tensor with "
               "`grad_fn=AddBackward0`, chained to every step's graph. "
               "Memory grows every step by what the step saved: measured about +10 KiB per step for a tiny PyTorch "
               "loop, ~25 KiB per step for a 4-layer MLP GAN keeping `errG` in a run-long list (50 MB after 25 "
               "epochs, without bound), MiBs per step when the loss was computed without `no_grad` in evaluation; "
               "about +0.6 KiB per step for TensorFlow eager scalars on CPU.")
    remedy = ("Keep a tensor without its graph, `total += loss.detach()`, or a Python number, `total += loss.item()` "
              "(PyTorch; `.item()` waits for the device); `losses.append(float(loss))` (TensorFlow).")
    fix_safety = ("PyTorch: `.detach()` is safe where nothing later differentiates the accumulator (it keeps a "
                  "tensor, so later tensor uses still work: `.item()`, `torch.stack`, arithmetic), unsafe where the "
                  "accumulator is differentiated later (it would no longer carry gradients). TensorFlow: "
                  "`.numpy()` is unsafe: the accumulator then holds NumPy values, not tensors.")
    flagged = (
        Example("""
import torch
from torch import nn
class SmallNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
    def forward(self, x):
        return self.layers(x)
def train_one_epoch(model, loader, optimizer, criterion):
    running = 0
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        running += loss
    return running / len(loader)
net = SmallNet()
for epoch in range(epochs):
    print(epoch, train_one_epoch(net, train_loader, optimizer, nn.CrossEntropyLoss()))
""", expect="""
16:9-16:24 [safe fix] loss tensor `loss` added to `running` with its autograd graph
    help: use `loss.detach()`
    note: each step's autograd graph stays alive for a whole pass over the data: backward freed its
        saved activations, not its nodes (measured: ~10 KiB a step for a small model, ~25 KiB for a
        4-layer MLP GAN)
""", fix_diff="""
@@ -16 +16 @@
-        running += loss
+        running += loss.detach()
"""),
        Example("""
import torch
import torch.nn as nn
model = nn.Sequential(nn.Linear(20, 32), nn.Tanh(), nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters())
for epoch in range(num_epochs):
    epoch_losses = []
    for xb, yb in train_dl:
        pred = model(xb)
        loss = nn.functional.mse_loss(pred, yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        epoch_losses.append(loss)
    print(f"epoch {epoch}: {sum(l.item() for l in epoch_losses) / len(epoch_losses):.4f}")
""", expect="""
13:9-13:34 [safe fix] loss tensor `loss` appended to `epoch_losses` with its autograd graph
    help: use `loss.detach()`
    note: each step's autograd graph stays alive for a whole pass over the data: backward freed its
        saved activations, not its nodes (measured: ~10 KiB a step for a small model, ~25 KiB for a
        4-layer MLP GAN)
""", fix_diff="""
@@ -13 +13 @@
-        epoch_losses.append(loss)
+        epoch_losses.append(loss.detach())
"""),
        Example("""
import torch
from torch import nn
G = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 784), nn.Tanh())
D = nn.Sequential(nn.Linear(784, 128), nn.LeakyReLU(0.2), nn.Linear(128, 1), nn.Sigmoid())
bce = nn.BCELoss()
opt_g = torch.optim.Adam(G.parameters(), lr=2e-4)
g_losses = []
for epoch in range(200):
    for real, _ in loader:
        z = torch.randn(real.size(0), 64)
        opt_g.zero_grad()
        g_loss = bce(D(G(z)), torch.ones(real.size(0), 1))
        g_loss.backward()
        opt_g.step()
        g_losses.append(g_loss)
plot_curve(g_losses)
""", expect="""
15:9-15:32 [safe fix] loss tensor `g_loss` appended to `g_losses` with its autograd graph
    help: use `g_loss.detach()`
    note: each step's autograd graph stays alive for the whole run: backward freed its saved
        activations, not its nodes (measured: ~10 KiB a step for a small model, ~25 KiB for a 4-layer
        MLP GAN)
""", fix_diff="""
@@ -15 +15 @@
-        g_losses.append(g_loss)
+        g_losses.append(g_loss.detach())
"""),
        Example("""
import torch
history = []
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward(retain_graph=True)
    optimizer.step()
    history.append(loss)
penalty = torch.stack(history).var()
penalty.backward()
""", expect="""
8:5-8:25 [unsafe fix] loss tensor `loss` appended to `history` with its autograd graph
    help: use `loss.detach()` (unsafe: `history` is differentiated later)
    note: each step's autograd graph and saved activations (batch x widths) stay alive for the whole run
""", fix_diff="""
@@ -8 +8 @@
-    history.append(loss)
+    history.append(loss.detach())
"""),
        Example("""
import torch
total_loss = 0
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    total_loss += loss
""", expect="""
8:5-8:23 [safe fix] loss tensor `loss` added to `total_loss` with its autograd graph
    help: use `loss.detach()`
    note: each step's autograd graph stays alive for the whole run: backward freed its saved
        activations, not its nodes (measured: ~10 KiB a step for a small model, ~25 KiB for a 4-layer
        MLP GAN)
""", fix_diff="""
@@ -8 +8 @@
-    total_loss += loss
+    total_loss += loss.detach()
"""),
        Example("""
import tensorflow as tf
losses = []
for x, y in dataset:
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    losses.append(loss)
""", expect="""
8:5-8:24 [unsafe fix] loss tensor `loss` appended to `losses` as an eager tensor
    help: use `loss.numpy()`
    note: an eager tensor per step stays alive for the whole run (~0.6 KiB on CPU, device memory on GPU)
""", fix_diff="""
@@ -8 +8 @@
-    losses.append(loss)
+    losses.append(loss.numpy())
"""),
        Example("""
import torch
def train_step(batch):
    loss = model(batch).mean()
    loss.backward()
    opt.step()
    return loss
history = []
for epoch in range(3):
    for batch in loader:
        step_loss = train_step(batch)
        history.append(step_loss)
""", expect="""
11:9-11:34 [safe fix] loss tensor `step_loss` appended to `history` with its autograd graph
    help: use `step_loss.detach()`
    note: each step's autograd graph stays alive for the whole run: backward freed its saved
        activations, not its nodes (measured: ~10 KiB a step for a small model, ~25 KiB for a 4-layer
        MLP GAN)
""", fix_diff="""
@@ -11 +11 @@
-        history.append(step_loss)
+        history.append(step_loss.detach())
"""),
        Example("""
import torch.nn.functional as F
def train_step(model, opt, x, y):
    opt.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss
total = 0
history = {"loss": []}
for x, y in loader:
    total += train_step(model, opt, x, y)
    loss = F.mse_loss(model(x), y)
    loss.backward()
    history["loss"].append(loss)
""", expect="""
11:5-11:42 [safe fix] loss tensor `train_step(model, opt, x…` added to `total` with its autograd graph
    help: use `train_step(model, opt, x, y).detach()`
    note: `train_step(model, opt, x, y)` returns the loss tensor; each step's autograd graph stays alive
        for the whole run: backward freed its saved activations, not its nodes (measured: ~10 KiB a step
        for a small model, ~25 KiB for a 4-layer MLP GAN)
14:5-14:33 [safe fix] loss tensor `loss` appended to `history["loss"]` with its autograd graph
    help: use `loss.detach()`
    note: each step's autograd graph stays alive for the whole run: backward freed its saved
        activations, not its nodes (measured: ~10 KiB a step for a small model, ~25 KiB for a 4-layer
        MLP GAN)
""", fix_diff="""
@@ -11 +11 @@
-    total += train_step(model, opt, x, y)
+    total += train_step(model, opt, x, y).detach()
@@ -14 +14 @@
-    history["loss"].append(loss)
+    history["loss"].append(loss.detach())
"""),
        Example("""
import torch
import torch.nn.functional as F
class Trainer:
    def __init__(self, model, loader):
        self.model = model
        self.loader = loader
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
        self.losses = []
        self.total_loss = 0.0
    def train_step(self, x, y):
        self.optimizer.zero_grad()
        loss = F.cross_entropy(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        self.losses.append(loss)
        self.total_loss += loss
    def fit(self, epochs):
        for epoch in range(epochs):
            for x, y in self.loader:
                self.train_step(x, y)
""", expect="""
15:9-15:33 [safe fix] loss tensor `loss` appended to `self.losses` with its autograd graph
    help: use `loss.detach()`
    note: each step's autograd graph stays alive for the whole run: backward freed its saved
        activations, not its nodes (measured: ~10 KiB a step for a small model, ~25 KiB for a 4-layer
        MLP GAN)
16:9-16:32 [safe fix] loss tensor `loss` added to `self.total_loss` with its autograd graph
    help: use `loss.detach()`
    note: each step's autograd graph stays alive for the whole run: backward freed its saved
        activations, not its nodes (measured: ~10 KiB a step for a small model, ~25 KiB for a 4-layer
        MLP GAN)
""", fix_diff="""
@@ -15,2 +15,2 @@
-        self.losses.append(loss)
-        self.total_loss += loss
+        self.losses.append(loss.detach())
+        self.total_loss += loss.detach()
"""),
        Example("""
import torch
from collections import defaultdict
def fit(model, loader, optimizer, criterion, epochs):
    history = defaultdict(list)
    metrics = {"loss": 0.0}
    for epoch in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            history["train_loss"].append(loss)
            metrics["loss"] += loss
    return history, metrics
""", expect="""
12:13-12:47 [safe fix] loss tensor `loss` appended to `history["train_loss"]` with its autograd graph
    help: use `loss.detach()`
    note: each step's autograd graph stays alive for the whole run: backward freed its saved
        activations, not its nodes (measured: ~10 KiB a step for a small model, ~25 KiB for a 4-layer
        MLP GAN)
13:13-13:36 [safe fix] loss tensor `loss` added to `metrics["loss"]` with its autograd graph
    help: use `loss.detach()`
    note: each step's autograd graph stays alive for the whole run: backward freed its saved
        activations, not its nodes (measured: ~10 KiB a step for a small model, ~25 KiB for a 4-layer
        MLP GAN)
""", fix_diff="""
@@ -12,2 +12,2 @@
-            history["train_loss"].append(loss)
-            metrics["loss"] += loss
+            history["train_loss"].append(loss.detach())
+            metrics["loss"] += loss.detach()
"""),
        Example("""
import torch
import torch.nn.functional as F
def train_step(model, optimizer, x, y):
    optimizer.zero_grad()
    logits = model(x)
    loss = F.cross_entropy(logits, y)
    loss.backward()
    optimizer.step()
    return loss, logits
history = []
for epoch in range(epochs):
    for x, y in train_loader:
        loss, logits = train_step(model, optimizer, x, y)
        history.append(loss)
""", expect="""
14:9-14:29 [safe fix] loss tensor `loss` appended to `history` with its autograd graph
    help: use `loss.detach()`
    note: each step's autograd graph stays alive for the whole run: backward freed its saved
        activations, not its nodes (measured: ~10 KiB a step for a small model, ~25 KiB for a 4-layer
        MLP GAN)
""", fix_diff="""
@@ -14 +14 @@
-        history.append(loss)
+        history.append(loss.detach())
"""),
        Example("""
import torch
import torchvision
def train_one_epoch(model, loader, optimizer, criterion):
    model.train()
    running = 0
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        running += loss
    return running / len(loader)
model = torchvision.models.resnet50(num_classes=100)
for epoch in range(epochs):
    print(epoch, train_one_epoch(model, train_loader, optimizer, torch.nn.CrossEntropyLoss()))
""", expect="""
11:9-11:24 [safe fix] loss tensor `loss` added to `running` with its autograd graph
    help: use `loss.detach()`
    note: each step's autograd graph stays alive for a whole pass over the data: backward freed its
        saved activations, not its nodes (measured: ~10 KiB a step for a small model, ~25 KiB for a
        4-layer MLP GAN)
""", fix_diff="""
@@ -11 +11 @@
-        running += loss
+        running += loss.detach()
"""),
    )
    not_flagged = (
        Example("""
import torch
warmup_losses = []
for _ in range(10):
    x, y = torch.randn(32, 16), torch.randn(32, 1)
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    warmup_losses.append(loss)
print(torch.stack(warmup_losses).mean())
"""),
        Example("""
import tensorflow as tf
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    epoch_losses.append(loss)
for epoch in range(epochs):
    epoch_losses = []
    for x, y in train_ds:
        train_step(x, y)
    print(epoch, tf.reduce_mean(epoch_losses))
"""),
        Example("""
import tensorflow as tf
for epoch in range(epochs):
    epoch_losses = []
    for x, y in train_ds:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        epoch_losses.append(loss)
    print(epoch, tf.reduce_mean(epoch_losses))
"""),
        Example("""
import torch
import torch.nn.functional as F
def train_step(model, optimizer, x, y):
    optimizer.zero_grad()
    logits = model(x)
    loss = F.cross_entropy(logits, y)
    loss.backward()
    optimizer.step()
    return loss.item(), (logits.argmax(1) == y).float().mean().item()
history = []
for epoch in range(epochs):
    for x, y in train_loader:
        loss, accuracy = train_step(model, optimizer, x, y)
        history.append(loss)
"""),
        Example("""
import torch
running_loss = 0
for idx, batch in enumerate(dataloader):
    current_loss = loss_step(batch) * num_tokens
    running_loss += current_loss
    current_loss.backward()
    if (idx + 1) % gradient_accumulation_steps == 0:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        log(running_loss.item())
        running_loss = 0
"""),
        Example("""
import torch
total_loss = 0.0
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    total_loss += loss.item()
"""),
        Example("""
import tensorflow as tf
@tf.function
def train(dataset):
    total = tf.constant(0.0)
    for x, y in dataset:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        total += loss
    return total
"""),
        Example("""
import torch
for epoch in range(10):
    for x, y in train_loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    val_loss = 0
    with torch.no_grad():
        for x, y in val_loader:
            loss = criterion(model(x), y)
            val_loss += loss
"""),
        Example("""
import torch
for x, y in loader:
    batch_losses = []
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    batch_losses.append(loss)
    losses.append(loss.detach())
"""),
        Example("""
import torch
class Trainer:
    def __init__(self, model):
        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        self.losses = []
    def train_step(self, x, y):
        parts = []
        self.optimizer.zero_grad()
        loss = self.model.loss(x, y)
        loss.backward()
        self.optimizer.step()
        parts.append(loss)
        self.losses.append(loss.item())
        return sum(parts)
    def fit(self, loader):
        for x, y in loader:
            self.train_step(x, y)
"""),
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # A train-step function: the framework of the loss tensor it returns, and where in a returned
        # tuple (`return loss, logits`: 0), None for the whole value.
        self._returns_loss: dict[cst.FunctionDef, tuple[str, int | None] | None] = {}
        self._loss_names_by_region: dict[cst.CSTNode, dict[str, str]] = {}
        self._loss_names_asked: set[cst.CSTNode] = set()

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if isinstance(node.operator, cst.AddAssign):
            self._check(node, node.target, node.value)

    def visit_Call(self, node: cst.Call) -> None:
        owner = receiver(node)
        if call_name(node) == "append" and owner is not None and len(positional_args(node)) == 1:
            self._check(node, owner, positional_args(node)[0])

    def _check(self, node: cst.CSTNode, accumulator: cst.BaseExpression, value: cst.BaseExpression) -> None:
        if not self.ctx.training.loops_running(node) or self.ctx.tf.compiled_function_of(node) is not None:
            return  # e.g. a validation loop nested in the epoch loop; a graph-mode loop
        # The code one training step runs: the loop's body, or a train-step function called from the loop.
        region = self.ctx.innermost_loop(node) or self.ctx.scope_of(node)
        found = self._unconverted(value, self._loss_names(region), node)
        root = _root(accumulator)
        if found is None or root is None or self._fresh_in_iteration(root, region, node):
            return
        held, framework = found
        steps = self._steps_kept(root, node)
        if steps is not None and steps <= FEW_ITERATIONS:
            return  # `for _ in range(10)` fake batches: a few steps' graphs or scalars, freed with the accumulator
        per_epoch = self._reset_each_pass(root, node)
        if per_epoch and framework == "tf":
            return  # a pass of eager scalars (about 0.6 KiB each), freed when the accumulator is re-created
        code = self.ctx.snippet(held)
        target = self.ctx.snippet(accumulator)
        life = "for a whole pass over the data" if per_epoch else "for the whole run"
        # The headline: `loss tensor `loss` appended to `history` with its autograd graph`.
        action = "appended to" if isinstance(node, cst.Call) else "added to"
        headline = f"loss tensor `{self.ctx.snippet(held, 25)}` {action} `{self.ctx.snippet(accumulator, 23)}`"
        returned = "" if isinstance(held, cst.Name) else f"`{code}` returns the loss tensor; "
        if framework == "pt":
            converted = code + ".detach()"
            unsafe = self._differentiated_later(root, node)
            message = f"{headline} with its autograd graph"
            remedy = f"use `{converted}`" + (f" (unsafe: `{target}` is differentiated later)" if unsafe else "")
            note = f"{returned}{self._kept_per_step(held, region, life)}"
            fix = FixSpec("unsafe" if unsafe else "safe", [Replacement(held, self.ctx.module.code_for_node(held)
                                                                       + ".detach()")],
                          f"`{converted}`: the same values, without their graphs")
        else:
            converted = code + ".numpy()"
            message = f"{headline} as an eager tensor"
            remedy = f"use `{converted}`"
            note = f"{returned}an eager tensor per step stays alive {life} (~0.6 KiB on CPU, device memory on GPU)"
            fix = FixSpec("unsafe", [Replacement(held, self.ctx.module.code_for_node(held) + ".numpy()")],
                          f"`{converted}`: NumPy values instead of tensors")
        self.report(node, message, fix=fix, help=remedy, note=note)

    def _kept_per_step(self, held: cst.BaseExpression, region: cst.CSTNode, life: str) -> str:
        """What each kept PyTorch loss holds (FRAMEWORK_FACTS #5): once backpropagated, its graph's nodes
        (backward frees the saved activations, unless `retain_graph=True` keeps them); else the graph
        with every activation it saved."""
        calls = self._backpropagating_calls(held, region)
        retained = any(isinstance(keyword_arg(call, "retain_graph"), cst.Name)
                       and keyword_arg(call, "retain_graph").value == "True" for call in calls)
        if calls and not retained:
            return (f"each step's autograd graph stays alive {life}: backward freed its saved activations, not "
                    "its nodes (measured: ~10 KiB a step for a small model, ~25 KiB for a 4-layer MLP GAN)")
        return f"each step's autograd graph and saved activations (batch x widths) stay alive {life}"

    def _backpropagating_calls(self, value: cst.BaseExpression, region: cst.CSTNode, depth: int = 0) -> list[cst.Call]:
        """The calls that backpropagate the loss `value` holds: through the name it is bound to, into the
        train-step function that returns it (`step_loss = train_step(batch)`); none where it is not."""
        ctx = self.ctx
        if isinstance(value, cst.Name) and depth < CALL_DEPTH:
            binding = ctx.flow.last_binding(value.value, value)
            held = None if binding is None else binding.value if binding.value is not None else \
                binding.node.value if isinstance(binding.node, cst.Assign) else None  # `loss, logits = step(...)`
            return [] if held is None else self._backpropagating_calls(held, region, depth + 1)
        steps = ctx.calls.targets(value) if isinstance(value, cst.Call) else []
        if steps:
            return [call for fn in steps for _, call in ctx.training.differentiated_within(fn)]
        return [call for _, call in ctx.training.differentiated_within(region)] \
            if ctx.training.is_differentiated(value) else []

    def _steps_kept(self, name: str, at: cst.CSTNode) -> int | None:
        """How many steps the accumulator `name` holds at most, where the file says it: the iterations of the
        loops around `at` inside the accumulator's life (through the one call site of a step function),
        None where one of them runs an unknown number of times (a loader, a `while`)."""
        ctx = self.ctx
        steps, depth = 1, 0
        while True:
            for loop in ctx.loop_values.loops_around(at):
                if any(not b.augmented and not isinstance(b.node, cst.Param) and ctx.is_inside(b.node, loop.body)
                       and not ctx.is_inside(at, b.node) for b in ctx.flow.bindings_within(name, at, loop)):
                    return steps  # re-created in this loop's body: its life is one of this loop's iterations
                count = ctx.iteration.count(loop)
                if count is None:
                    return None
                steps *= count
            scope = ctx.scope_of(at)
            if not isinstance(scope, cst.FunctionDef):
                return steps  # module level: every loop around it was counted
            if "." not in name and name not in self._declared_outer(scope) and any(
                    not isinstance(b.node, cst.Param) for b in ctx.bindings_in(scope, name)):
                return steps  # a local: its life is one call
            sites = ctx.calls.call_sites.get(scope, [])
            if len(sites) != 1 or depth >= CALL_DEPTH:
                return None  # the caller's variable, called from places the file does not pin down
            at, depth = sites[0], depth + 1

    def _differentiated_later(self, name: str, at: cst.CSTNode) -> bool:
        """Does the accumulator's value reach something differentiated (`total.backward()`,
        `torch.stack(losses).var().backward()`)? Then detaching what it holds changes the gradients."""
        binding = self.ctx.flow.last_binding(name, at)
        held = binding.value if binding is not None and binding.value is not None else None
        return any(self.ctx.training.is_differentiated(node) for node in (at, *((held,) if held is not None else ())))

    def _loss_names(self, region: cst.CSTNode) -> dict[str, str]:
        """Names holding a loss tensor in one step (`region`), with the framework that computed it.

        A loop of 1,000 accumulations asks 1,000 times: the answer is kept from the second time on.
        Not the first: `_returned_loss_framework` answers a call of a name defined twice by the first
        definition it has seen, so the first answer may differ from all later ones, which agree."""
        names = self._loss_names_by_region.get(region)
        if names is None:
            names = self._find_loss_names(region)
            if region in self._loss_names_asked:
                self._loss_names_by_region[region] = names
            self._loss_names_asked.add(region)
        return names

    def _find_loss_names(self, region: cst.CSTNode) -> dict[str, str]:
        names: dict[str, str] = {}
        for target, call in self.ctx.training.differentiated_within(region):
            if isinstance(target, cst.Name):
                names[target.value] = _framework(call)
        for call in self.ctx.definitions.calls_in(region):
            returned = self._returned_loss(call)
            assign = self.ctx.parents.get(call)
            if returned is None or not isinstance(assign, cst.Assign):
                continue
            framework, index = returned
            for target in assign.targets:
                if index is None and isinstance(target.target, cst.Name):
                    names[target.target.value] = framework
                elif index is not None and isinstance(target.target, (cst.Tuple, cst.List)):
                    # `loss, logits = train_step(...)`: the name in the loss's place
                    elements = target.target.elements
                    if index < len(elements) and not any(isinstance(e, cst.StarredElement) for e in elements) \
                            and isinstance(elements[index].value, cst.Name):
                        names[elements[index].value.value] = framework
        return names

    def _returned_loss(self, call: cst.Call) -> tuple[str, int | None] | None:
        """('pt'/'tf', position) when `call` calls a same-file function that returns, unconverted, a tensor it
        differentiates: as its value (position None) or as an element of a returned tuple."""
        for fn in self.ctx.calls.local_functions(call.func):
            if fn in self._returns_loss:
                return self._returns_loss[fn]
            self._returns_loss[fn] = None  # guards recursion
            inner = {t.value: _framework(c) for t, c in self.ctx.training.differentiated_in_scope(fn)
                     if isinstance(t, cst.Name)}
            for ret in self.ctx.returns_of(fn):
                if ret.value is None:
                    continue
                found = self._unconverted(ret.value, inner, ret)
                if found is not None:
                    self._returns_loss[fn] = (found[1], None)
                    return self._returns_loss[fn]
                if isinstance(ret.value, cst.Tuple):
                    for index, element in enumerate(ret.value.elements):
                        found = self._unconverted(element.value, inner, ret) \
                            if not isinstance(element, cst.StarredElement) else None
                        if found is not None:
                            self._returns_loss[fn] = (found[1], index)
                            return self._returns_loss[fn]
        return None

    def _unconverted(self, value: cst.BaseExpression, losses: dict[str, str],
                     at: cst.CSTNode) -> tuple[cst.BaseExpression, str] | None:
        """A loss tensor in `value` not wrapped in a conversion: a loss name, or a train-step call."""
        if isinstance(value, cst.Name):
            if value.value not in losses:
                return None
            binding = self.ctx.flow.last_binding(value.value, at)
            if binding is not None and (binding.value is not None and self._converts(binding.value)
                                        or self.ctx.torch.no_grad.enclosing(binding.node)):
                return None  # `loss = loss.item()`, or computed under no_grad: no graph is held
            return value, losses[value.value]
        if isinstance(value, cst.Call) and not self._converts(value):
            returned = self._returned_loss(value)
            return (value, returned[0]) if returned is not None and returned[1] is None else None
        if isinstance(value, cst.BinaryOperation):
            return self._unconverted(value.left, losses, at) or self._unconverted(value.right, losses, at)
        return None  # `x.data`, `x[0]`, conversions: not a plain loss tensor

    def _converts(self, expr: cst.BaseExpression) -> bool:
        if isinstance(expr, cst.Call):
            return call_name(expr) in _CONVERTING_METHODS and receiver(expr) is not None or any(
                self.ctx.names.is_builtin(expr.func, b) for b in _CONVERTING_BUILTINS)
        return isinstance(expr, cst.Attribute) and expr.attr.value == "data"

    def _reset_each_pass(self, name: str, at: cst.CSTNode) -> bool:
        """Is the accumulator re-created for every pass over the data, so that it holds one pass of steps:
        bound in the loop around the step loop (each epoch), or a local of the function whose outermost
        loop is the step loop and that is called in a loop (each call a pass: `def train_one_epoch(...)`)? In
        a step function the loop calls, asked of the caller's variable: one it reads, or the one it threads
        through a parameter (`loss, running = step(x, running)`)."""
        ctx = self.ctx
        step_loop = ctx.innermost_loop(at)
        if step_loop is None:  # in a train-step function: the accumulator is the caller's
            unit = ctx.loop_values.iteration_unit(at)
            if not isinstance(unit, cst.FunctionDef) or "." in name:
                return False
            bindings = ctx.bindings_in(unit, name)
            if not bindings:  # a variable of the caller's scope
                return self._reset_each_pass(name, ctx.calls.call_sites[unit][0])
            sites = ctx.calls.call_sites.get(unit, [])
            passed = ctx.definitions.argument_for(sites[0], unit, bindings[0].node) \
                if len(sites) == 1 and isinstance(bindings[0].node, cst.Param) else None
            # Threaded through the step (`running = step(x, running)`): the caller's variable.
            return isinstance(passed, cst.Name) and self._reset_each_pass(passed.value, sites[0])
        epoch_loop = ctx.innermost_loop(step_loop)
        if epoch_loop is not None:
            return any(not b.augmented and not isinstance(b.node, cst.Param)
                       and not ctx.is_inside(b.node, step_loop)
                       for b in ctx.flow.bindings_within(name, at, epoch_loop))
        scope = ctx.scope_of(step_loop)
        if not isinstance(scope, cst.FunctionDef) or "." in name or name in self._declared_outer(scope):
            return False
        # A function called once (`main()`) runs the whole training: one called in a loop, a pass of it.
        if not any(ctx.loop_values.iteration_unit(site) is not None for site in ctx.calls.call_sites.get(scope, [])):
            return False
        bindings = ctx.flow.scope_bindings_within(scope, name, scope)
        return bool(bindings) and not any(isinstance(b.node, cst.Param) for b in bindings)

    def _declared_outer(self, fn: cst.FunctionDef) -> set[str]:
        """Names `fn` declares `global` or `nonlocal`: bound there, they live on after a call."""
        return {n.name.value for node in self.ctx.nodes_within((cst.Global, cst.Nonlocal), fn) for n in node.names}

    def _fresh_in_iteration(self, name: str, region: cst.CSTNode, at: cst.CSTNode) -> bool:
        """Is the accumulator re-created in this step (so it holds at most the graphs of the steps since:
        `running_loss = 0` after each accumulated optimizer step keeps a bounded few)? A parameter of a
        train-step function is the caller's: it outlives the call."""
        return any(not b.augmented and not isinstance(b.node, cst.Param)
                   for b in self.ctx.flow.bindings_within(name, at, region))
