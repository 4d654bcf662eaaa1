"""LL301 loss-tensor-accumulation: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.nodes import call_name, dotted, positional_args, receiver
from lintloop.analysis.training import TRAINING_CALL_TOKENS
from lintloop.rule import Example, FixSpec, Replacement, Rule
from lintloop.screen import Needs


# Calls and attributes that turn a tensor into a value that holds no graph / no tensor.
_CONVERTING_METHODS = {"item", "detach", "numpy", "tolist", "detach_"}


_CONVERTING_BUILTINS = ("float", "int")
# A model the file shows whole with at most this many torch layers, none of these kinds, keeps a few KiB of
# graph per step: a pass of them (an accumulator re-created every epoch) is bounded and small.
_SMALL_MODEL_LAYERS = 16
_LARGE_LAYERS = ("RNN", "LSTM", "GRU", "Transformer", "Attention", "Embedding", "Conv3d")
_CONTAINERS = ("Sequential", "ModuleList", "ModuleDict")  # hold layers, add none


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
    frameworks = ("tf", "pt")
    # The accumulation may sit in a train-step function without a loop of its own: the screen selects
    # the loop that calls it along with it.
    needs = Needs(file=(TRAINING_CALL_TOKENS, ("loop",)),
                  statement=(("augassign", "call:append"),))
    fix_kind = "unsafe"
    probe = "mem"
    summary = ("In a training loop, or a train-step function called from one, a loss tensor (the value a "
               "gradient is taken of, or the result of a train-step function returning it, also as an element of a "
               "returned tuple: `loss, logits = train_step(...)`) is appended to a list "
               "or `+=`-accumulated into a variable, container entry or attribute (`total`, `history[\"loss\"]`, "
               "`self.losses`) that outlives the iteration, without `.item()`, `.detach()`, `.numpy()` or `float()`. Not flagged when the accumulator is re-created for every pass over the data (in the epoch loop, or "
               "a local of a function called once per epoch) and what it holds is bounded and small: TensorFlow eager "
               "scalars, or the graphs of a small model the file shows whole (at most 16 torch layers, none "
               "recurrent or attention); for another model the message says the bound.")
    why = ("PyTorch: each loss tensor references the autograd graph of its step, so every step's graph "
           "stays alive as long as the accumulator does. TensorFlow: each eager loss tensor stays alive "
           "(on a GPU, in device memory).")
    symptom = ("In LL301_bad.py, after 300 steps `total_loss` is still a tensor with "
               "`grad_fn=AddBackward0`, chained to every step's graph. "
               "Memory grows every step: measured about +10 KiB per step for a small PyTorch training loop "
               "(MiBs per step when the loss was computed without `no_grad`), about +0.6 KiB per step for "
               "TensorFlow eager scalars on CPU — until the process runs out of memory on long runs.")
    remedy = "Accumulate a Python number: `total += loss.item()` (PyTorch) or `losses.append(float(loss))` (TensorFlow)."
    fix_safety = ("Unsafe: the accumulator then holds Python floats / NumPy scalars instead of tensors, "
                  "which changes code that later calls tensor methods on it.")
    flagged = (
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
8:5-8:23 [unsafe fix] `+=`-accumulating the loss tensor `loss` into `total_loss`, which outlives the
    iteration, keeps each step's autograd graph alive (about 10 KiB per step, more for bigger graphs);
    use `loss.item()`
""", fix_diff="""
@@ -8 +8 @@
-    total_loss += loss
+    total_loss += loss.item()
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
8:5-8:24 [unsafe fix] appending the loss tensor `loss` into `losses`, which outlives the iteration,
    keeps a TensorFlow tensor alive for every step (about 0.6 KiB per step on CPU, device memory on
    GPU); use `loss.numpy()`
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
11:9-11:34 [unsafe fix] appending the loss tensor `step_loss` into `history`, which outlives the
    iteration, keeps each step's autograd graph alive (about 10 KiB per step, more for bigger graphs);
    use `step_loss.item()`
""", fix_diff="""
@@ -11 +11 @@
-        history.append(step_loss)
+        history.append(step_loss.item())
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
11:5-11:42 [unsafe fix] `+=`-accumulating the loss tensor returned by `train_step(model, opt, x, y)`
    into `total`, which outlives the iteration, keeps each step's autograd graph alive (about 10 KiB per
    step, more for bigger graphs); use `train_step(model, opt, x, y).item()`
14:5-14:33 [unsafe fix] appending the loss tensor `loss` into `history["loss"]`, which outlives the
    iteration, keeps each step's autograd graph alive (about 10 KiB per step, more for bigger graphs);
    use `loss.item()`
""", fix_diff="""
@@ -11 +11 @@
-    total += train_step(model, opt, x, y)
+    total += train_step(model, opt, x, y).item()
@@ -14 +14 @@
-    history["loss"].append(loss)
+    history["loss"].append(loss.item())
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
15:9-15:33 [unsafe fix] appending the loss tensor `loss` into `self.losses`, which outlives the
    iteration, keeps each step's autograd graph alive (about 10 KiB per step, more for bigger graphs);
    use `loss.item()`
16:9-16:32 [unsafe fix] `+=`-accumulating the loss tensor `loss` into `self.total_loss`, which outlives
    the iteration, keeps each step's autograd graph alive (about 10 KiB per step, more for bigger
    graphs); use `loss.item()`
""", fix_diff="""
@@ -15,2 +15,2 @@
-        self.losses.append(loss)
-        self.total_loss += loss
+        self.losses.append(loss.item())
+        self.total_loss += loss.item()
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
12:13-12:47 [unsafe fix] appending the loss tensor `loss` into `history["train_loss"]`, which outlives
    the iteration, keeps each step's autograd graph alive (about 10 KiB per step, more for bigger
    graphs); use `loss.item()`
13:13-13:36 [unsafe fix] `+=`-accumulating the loss tensor `loss` into `metrics["loss"]`, which outlives
    the iteration, keeps each step's autograd graph alive (about 10 KiB per step, more for bigger
    graphs); use `loss.item()`
""", fix_diff="""
@@ -12,2 +12,2 @@
-            history["train_loss"].append(loss)
-            metrics["loss"] += loss
+            history["train_loss"].append(loss.item())
+            metrics["loss"] += loss.item()
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
14:9-14:29 [unsafe fix] appending the loss tensor `loss` into `history`, which outlives the iteration,
    keeps each step's autograd graph alive (about 10 KiB per step, more for bigger graphs); use
    `loss.item()`
""", fix_diff="""
@@ -14 +14 @@
-        history.append(loss)
+        history.append(loss.item())
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
11:9-11:24 [unsafe fix] `+=`-accumulating the loss tensor `loss` into `running`, which outlives the
    iteration, keeps each step's autograd graph alive (about 10 KiB per step, more for bigger graphs)
    until it is re-created for the next pass over the data: a pass of graphs at a time (measured, torch
    2.13 on CPU: 5 KiB per step for a two-layer MLP, 460 KiB for a 12-layer Transformer encoder); use
    `loss.item()`
""", fix_diff="""
@@ -11 +11 @@
-        running += loss
+        running += loss.item()
"""),
    )
    not_flagged = (
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
        per_epoch = self._reset_each_pass(root, node)
        if per_epoch and (framework == "tf" or self._small_models(region)):
            # A pass of eager scalars (about 0.6 KiB each), or of a small model's graphs (a few KiB each),
            # freed when the accumulator is re-created: bounded and small.
            return
        code = self.ctx.snippet(held)
        if framework == "pt":
            cost = "keeps each step's autograd graph alive (about 10 KiB per step, more for bigger graphs)"
            if per_epoch:
                cost += (" until it is re-created for the next pass over the data: a pass of graphs at a time "
                         "(measured, torch 2.13 on CPU: 5 KiB per step for a two-layer MLP, 460 KiB for a "
                         "12-layer Transformer encoder)")
            method = ".item()"
        else:
            cost = "keeps a TensorFlow tensor alive for every step (about 0.6 KiB per step on CPU, device memory on GPU)"
            method = ".numpy()"
        converted = code + method
        action = "appending" if isinstance(node, cst.Call) else "`+=`-accumulating"
        what = f"the loss tensor `{code}`" if isinstance(held, cst.Name) else f"the loss tensor returned by `{code}`"
        self.report(node, f"{action} {what} into `{self.ctx.snippet(accumulator)}`, which outlives "
                          f"the iteration, {cost}; use `{converted}`",
                    fix=FixSpec("unsafe", [Replacement(held, self.ctx.module.code_for_node(held) + method)],
                                f"use `{converted}`"))

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

    def _small_models(self, region: cst.CSTNode) -> bool:
        """Are the models the step runs all small ones the file shows whole: same-file classes or
        `nn.Sequential(...)` of at most `_SMALL_MODEL_LAYERS` torch layers, none recurrent or attention
        (measured: about 5 KiB of graph per step for a two-layer MLP, against 460 KiB for a 12-layer
        Transformer encoder)?"""
        models = []
        for call in self.ctx.definitions.calls_in(region):
            model = self.ctx.modules.forward_of(call)
            if model is not None and model.kind == "unknown" and isinstance(model.origin, cst.Param):
                passed = self._passed_models(call, region)
                models += passed if passed else [model]
            elif model is not None:
                models.append(model)
        models = [m.unwrapped() for m in models if not m.unwrapped().parameterless]  # a loss adds a few nodes
        return bool(models) and all(
            (self._layer_count(m.cls or m.origin, frozenset()) or _SMALL_MODEL_LAYERS + 1) <= _SMALL_MODEL_LAYERS
            for m in models)

    def _passed_models(self, call: cst.Call, region: cst.CSTNode) -> list:
        """`model(x)` on a parameter of the step function that its call sites give different models (one
        `train_step` for each model of a notebook): each model given, where every call site gives one."""
        ctx = self.ctx
        fn = ctx.scope_of(region) if not isinstance(region, cst.FunctionDef) else region
        if not isinstance(call.func, cst.Name) or not isinstance(fn, cst.FunctionDef):
            return []
        param = next((p for p in (*fn.params.posonly_params, *fn.params.params) if p.name.value == call.func.value),
                     None)
        if param is None:
            return []
        given = []
        for site in ctx.calls.call_sites.get(fn, []):
            arg = ctx.definitions.argument_for(site, fn, param)
            model = ctx.modules.value(arg, site) if arg is not None else None
            if model is None:
                return []
            given.append(model)
        return given

    def _layer_count(self, node: cst.CSTNode, seen: frozenset) -> int | None:
        """The torch layers a same-file module class (its bases included) or a constructor call builds,
        through the same-file module classes it builds; None where something is unknown or large."""
        ctx = self.ctx
        if isinstance(node, cst.ClassDef):
            if node in seen:
                return None
            seen |= {node}
            count = 0
            for base in node.bases:
                local = ctx.definitions.local_class(base.value)
                inner = self._layer_count(local, seen) if local is not None else (
                    0 if ctx.names.qualname(base.value) == "torch.nn.Module" else None)
                if inner is None:
                    return None
                count += inner
        elif isinstance(node, cst.Call) and (ctx.names.callee(node) or "").startswith("torch.nn."):
            count = 0
        else:
            return None
        for call in ctx.nodes_within(cst.Call, node):
            qualname = ctx.names.callee(call) or ""
            local = ctx.definitions.local_class(call.func)
            if local is not None and local is not node:
                inner = self._layer_count(local, seen)
                if inner is None:
                    return None
                count += inner
            elif qualname.startswith("torch.nn.") and qualname.rsplit(".", 1)[-1][:1].isupper():
                if any(large in qualname for large in _LARGE_LAYERS):
                    return None
                count += qualname.rsplit(".", 1)[-1] not in _CONTAINERS
        return count

    def _declared_outer(self, fn: cst.FunctionDef) -> set[str]:
        """Names `fn` declares `global` or `nonlocal`: bound there, they live on after a call."""
        return {n.name.value for node in self.ctx.nodes_within((cst.Global, cst.Nonlocal), fn) for n in node.names}

    def _fresh_in_iteration(self, name: str, region: cst.CSTNode, at: cst.CSTNode) -> bool:
        """Is the accumulator re-created in this step (so it holds at most the graphs of the steps since:
        `running_loss = 0` after each accumulated optimizer step keeps a bounded few)? A parameter of a
        train-step function is the caller's: it outlives the call."""
        return any(not b.augmented and not isinstance(b.node, cst.Param)
                   for b in self.ctx.flow.bindings_within(name, at, region))
