"""LL302 host-sync-every-step: the rule, its documentation and its examples."""

from __future__ import annotations

import builtins
from functools import cached_property

import libcst as cst

from lintloop.analysis.nodes import call_name, dotted, positional_args, receiver
from lintloop.analysis.training import TRAINING_CALL_TOKENS, StepSite
from lintloop.rule import Example, Rule
from lintloop.screen import Needs

# Tensor methods that copy a value to the host (and so wait for the device to finish).
_TRANSFERS = {"item", "numpy", "cpu", "tolist"}
_BUILTIN_CONVERSIONS = ("float", "int")
# Methods of a tensor that give a tensor (on the same device): a transfer after them is one sync.
_TENSOR_RESULTS = {"detach", "float", "double", "half", "mean", "sum", "max", "min", "norm", "abs", "argmax",
                   "argmin", "clone", "squeeze", "view", "reshape", "flatten", "eq", "ne", "gt", "lt", "ge", "le",
                   "pow", "sqrt", "exp", "log", "softmax", "sigmoid", "long", "int", "to", "std", "var", "round"}
_TRAINING_CALLS = ("apply_gradients", "minimize")
_FRAMEWORK_PREFIXES = ("torch.", "tensorflow.", "keras.")
_BUILTINS = frozenset(dir(builtins))
_MAX_DEPTH = 4


class HostSyncEveryStep(Rule):
    code = "LL302"
    name = "host-sync-every-step"
    description = "a host sync (`.item()`, `.cpu()`) on every training step"
    frameworks = ("tf", "pt")
    kind = "perf"
    default_on = False
    needs = Needs(file=(TRAINING_CALL_TOKENS,),
                  statement=(("call:item", "call:numpy", "call:cpu", "call:tolist", "call:float", "call:int",
                              "call:print"),))
    summary = ("`.item()`, `.numpy()`, `.cpu()`, `.tolist()`, `float(t)` / `int(t)` of a tensor, or `print` of a "
               "tensor, on every iteration of a training loop (directly, or in a train-step function it calls), "
               "not under a `% N` logging condition (`if step % 100 == 0:`). Only loops whose iterations are "
               "training steps count: conversions in evaluation loops (no backward, no optimizer step) — even "
               "nested in the epoch loop —, once per epoch in the epoch loop, or after the loop are not flagged, "
               "nor values known to be Python or NumPy numbers (`len(x)`, `float(step)`, `np.mean(...).item()`). "
               "TensorFlow: `.numpy()` / `float()` / `print` of the loss, of what a tf.function or train-step "
               "function returns, or of a Keras metric's `result()`; not `.numpy()` of input batches (host "
               "tensors from tf.data: nothing on the device to wait for).")
    why = ("Copying a value to the host (PyTorch `.item()`, TensorFlow `.numpy()`) makes the CPU wait until "
           "the device has finished every operation queued "
           "before it. Without it, the CPU queues the next step's kernels while the GPU still runs this one; "
           "with it, each step starts on an idle GPU. On a CPU-only run it costs nothing, which is why it goes "
           "unnoticed (and why this rule is off by default).")
    symptom = ("Nothing fails and the numbers are right: LL302_bad.py prints the same "
               "`step 100: mean loss 0.4763, accuracy 0.859` as LL302_good.py; LL302_tf_bad.py (a loop calling a "
               "tf.function train step) the same `step 200: loss 0.0960` as LL302_tf_good.py, with "
               "'200 host copies of the loss' against 4. The cost is only on an accelerator: "
               "each `.item()` blocks until the step's kernels finish, so the GPU idles while Python prepares the "
               "next step (gaps between steps in a profiler trace, lower utilisation). On CUDA, "
               "`torch.cuda.set_sync_debug_mode(\"warn\")` warns at each synchronizing call (PyTorch marks the "
               "mode experimental: not every sync is covered).")
    remedy = ("Keep running values on the device (`running_loss += loss.detach()`) and convert them only when "
              "logging, under `if step % log_every == 0:`.")
    flagged = (
        Example("""
import torch
running_loss = 0.0
for step, (x, y) in enumerate(train_loader):
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    running_loss += loss.item()
""", expect="""
8:21-8:32 `loss.item()` copies a tensor to the host on every training step
    help: keep running values on the device (`total += loss.detach()`) and convert them under `if step %
        N == 0:`
    note: on a GPU it waits for the device to finish all queued work (a host sync), so the next step
        cannot be queued ahead
"""),
        Example("""
import tensorflow as tf
for x, y in dataset:
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    history.append(float(loss))
""", expect="""
7:20-7:31 `float(loss)` copies a tensor to the host on every training step
    help: keep running values as tensors (a `tf.keras.metrics.Mean`) and convert them under `if step % N
        == 0:`
    note: on a GPU it waits for the device to finish all queued work (a host sync), so the next step
        cannot be queued ahead
"""),
        Example("""
import torch.nn.functional as F
def train_step(model, opt, x, y):
    opt.zero_grad()
    out = model(x)
    loss = F.cross_entropy(out, y)
    loss.backward()
    opt.step()
    acc = (out.argmax(1) == y).float().mean()
    print(f"loss {loss:.4f} acc {acc:.3f}")
    return loss.detach().cpu().numpy()
for epoch in range(epochs):
    for x, y in loader:
        train_step(model, opt, x, y)
""", expect="""
9:5-9:44 printing the tensor `loss` copies it to the host on every training step
    help: keep running values on the device (`total += loss.detach()`) and convert them under `if step %
        N == 0:`
    note: on a GPU it waits for the device to finish all queued work (a host sync), so the next step
        cannot be queued ahead; run every step through `train_step(model, opt, x, y)`
10:12-10:39 `loss.detach().cpu().numpy()` copies a tensor to the host on every training step
    help: keep running values on the device (`total += loss.detach()`) and convert them under `if step %
        N == 0:`
    note: on a GPU it waits for the device to finish all queued work (a host sync), so the next step
        cannot be queued ahead; run every step through `train_step(model, opt, x, y)`
"""),
        Example("""
import tensorflow as tf
train_loss = tf.keras.metrics.Mean()
@tf.function
def train_step(images, labels):
    with tf.GradientTape() as tape:
        loss = loss_object(labels, model(images, training=True))
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    return loss
for epoch in range(EPOCHS):
    for step, (images, labels) in enumerate(train_ds):
        loss = train_step(images, labels)
        train_loss(loss)
        progress.set_postfix(loss=float(loss), mean=train_loss.result().numpy())
""", expect="""
14:35-14:46 `float(loss)` copies a tensor to the host on every training step
    help: keep running values as tensors (a `tf.keras.metrics.Mean`) and convert them under `if step % N
        == 0:`
    note: on a GPU it waits for the device to finish all queued work (a host sync), so the next step
        cannot be queued ahead
14:53-14:80 `train_loss.result().numpy()` copies a tensor to the host on every training step
    help: keep running values as tensors (a `tf.keras.metrics.Mean`) and convert them under `if step % N
        == 0:`
    note: on a GPU it waits for the device to finish all queued work (a host sync), so the next step
        cannot be queued ahead
"""),
    )
    not_flagged = (
        Example("""
import tensorflow as tf
@tf.function
def train_step(images, labels):
    with tf.GradientTape() as tape:
        loss = loss_object(labels, model(images, training=True))
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    return loss
for step, (images, labels) in enumerate(train_ds):
    seen_labels.update(labels.numpy().tolist())
    loss = train_step(images, labels)
    if step % 100 == 0:
        print(f"step {step}: loss {float(loss):.4f}")
"""),
        Example("""
import torch
for batch_idx, (data, target) in enumerate(train_loader):
    optimizer.zero_grad()
    loss = F.nll_loss(model(data), target)
    loss.backward()
    optimizer.step()
    if batch_idx % args.log_interval == 0:
        print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)}]\\tLoss: {loss.item():.6f}")
"""),
        Example("""
import torch
total_loss = 0
for step, batch in enumerate(train_dataloader):
    outputs = model(**batch)
    loss = outputs.loss
    total_loss += loss.detach().float()
    accelerator.backward(loss)
    optimizer.step()
    print(step, len(batch), lr_scheduler.get_last_lr())
print(f"epoch loss {total_loss.item() / len(train_dataloader)}")
"""),
        Example("""
import torch
for epoch in range(args.epochs):
    for x, y in train_loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    correct = 0
    with torch.no_grad():
        for x, y in val_loader:
            correct += (model(x).argmax(1) == y).sum().item()
    print(f"epoch {epoch}: accuracy {correct / len(val_loader.dataset):.3f}")
"""),
        Example("""
import numpy as np
import torch
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    lr = float(np.cos(i / n * np.pi))
    steps = int(i * world_size)
    if (i + 1) % 50 == 0:
        losses.append(loss.item())
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        if not self._may_transfer(node) or self.ctx.tf.compiled_function_of(node) is not None:
            return
        site = next((s for s in self.ctx.training.loops_running(node)
                     if s.loop in self._step_loops and self._every_iteration(node, s)), None)
        described = self._transfer(node) if site is not None else None
        if described is None:
            return
        where = f"; run every step through `{self.ctx.snippet(site.path[0], 40)}`" if site.path else ""
        keep = ("keep running values on the device (`total += loss.detach()`)" if self.ctx.names.uses_framework("pt")
                else "keep running values as tensors (a `tf.keras.metrics.Mean`)")
        self.report(node, f"{described} on every training step",
                    help=f"{keep} and convert them under `if step % N == 0:`",
                    note="on a GPU it waits for the device to finish all queued work (a host sync), so the next "
                         f"step cannot be queued ahead{where}")

    # ----- what is a transfer of a tensor ---------------------------------------------------------
    def _may_transfer(self, call: cst.Call) -> bool:
        """Cheap: a call spelled like a transfer (what it is applied to is checked later)."""
        if receiver(call) is not None:
            return call_name(call) in _TRANSFERS
        return any(self.ctx.names.is_builtin(call.func, b) for b in (*_BUILTIN_CONVERSIONS, "print"))

    def _transfer(self, call: cst.Call) -> str | None:
        """How `call` copies a tensor to the host, for the message; None when it does not (or when an
        enclosing call of the same chain is reported instead)."""
        name = call_name(call)
        owner = receiver(call)
        if owner is not None and name in _TRANSFERS and not self._feeds_transfer(call):
            # `.cpu()` and `.tolist()` also exist on modules and NumPy arrays: only on a known tensor.
            if name in ("cpu", "tolist") and not self._is_tensor(owner, call, 0) \
                    or name == "item" and self._is_numpy(owner):
                return None
            # TensorFlow: `.numpy()` of an input batch (a host tensor from tf.data) waits for nothing
            # on the device; only values the step computed (the loss, a metric's result) sync.
            if name == "numpy" and not self.ctx.names.uses_framework("pt") and not self._is_tensor(owner, call, 0):
                return None
            return f"`{self.ctx.snippet(call, 40)}` copies a tensor to the host"
        if owner is None and len(call.args) == 1 and positional_args(call) and any(
                self.ctx.names.is_builtin(call.func, b) for b in _BUILTIN_CONVERSIONS):
            return f"`{self.ctx.snippet(call, 40)}` copies a tensor to the host" if self._is_tensor(
                positional_args(call)[0], call, 0) else None
        if self.ctx.names.is_builtin(call.func, "print"):
            shown = next((e for arg in call.args for e in self._shown(arg.value) if self._is_tensor(e, call, 0)), None)
            if shown is not None:
                return f"printing the tensor `{self.ctx.snippet(shown, 28)}` copies it to the host"
        return None

    def _feeds_transfer(self, call: cst.Call) -> bool:
        """`x.cpu().numpy()`: the `.cpu()` is part of the `.numpy()` transfer (reported once)."""
        node: cst.CSTNode = call
        while True:
            attribute = self.ctx.parents.get(node)
            outer = self.ctx.parents.get(attribute) if isinstance(attribute, cst.Attribute) else None
            if not isinstance(outer, cst.Call) or outer.func is not attribute:
                return False
            if call_name(outer) in _TRANSFERS:
                return True
            if call_name(outer) not in _TENSOR_RESULTS:
                return False
            node = outer

    def _shown(self, expr: cst.BaseExpression) -> list[cst.BaseExpression]:
        """The values a printed argument formats: itself, an f-string's expressions, `%` arguments."""
        if isinstance(expr, cst.FormattedString):
            return [part.expression for part in expr.parts if isinstance(part, cst.FormattedStringExpression)]
        if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Modulo) \
                and isinstance(expr.left, (cst.SimpleString, cst.ConcatenatedString)):
            right = expr.right
            return [e.value for e in right.elements] if isinstance(right, cst.Tuple) else [right]
        return [expr]

    def _is_tensor(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int) -> bool:
        """Known to hold a tensor: a differentiated value, a loss, or tensor arithmetic / methods of one."""
        if depth > _MAX_DEPTH:
            return False
        if self.ctx.scope_of(at) in self._differentiated.get(self.ctx.module.code_for_node(expr), ()):
            return True
        if isinstance(expr, cst.Name):
            if expr.value in self._called_names:
                return False  # `model(x)` somewhere: a module or function, not a tensor
            binding = self.ctx.flow.last_binding(expr.value, at)
            return binding is not None and binding.value is not None and not binding.augmented \
                and self._is_tensor(binding.value, binding.node, depth + 1)
        if isinstance(expr, cst.Call):
            if self.ctx.losses.prediction(expr) is not None or self._step_result(expr, depth):
                return True
            owner = receiver(expr)
            if owner is not None and call_name(expr) in _TENSOR_RESULTS:
                return self._is_tensor(owner, at, depth + 1)
            # A forward pass or framework op whose result reaches the differentiated loss (`out = model(x)`);
            # not builtins or `math` functions, whose Python numbers may scale a loss too.
            callee = self.ctx.names.callee(expr)
            if (dotted(expr.func) or "_").rsplit(".", 1)[-1][0].isupper():
                return False  # a constructor (`Net()`, `nn.Linear(...)`): an object, not a tensor
            builtin = isinstance(expr.func, cst.Name) and expr.func.value in _BUILTINS \
                and self.ctx.names.is_builtin(expr.func, expr.func.value)
            framework_op = callee is None and not builtin or (callee or "").startswith(_FRAMEWORK_PREFIXES)
            return framework_op and self.ctx.training.is_differentiated(expr)
        if isinstance(expr, cst.BinaryOperation):
            return self._is_tensor(expr.left, at, depth + 1) or self._is_tensor(expr.right, at, depth + 1)
        if isinstance(expr, cst.Comparison):
            return self._is_tensor(expr.left, at, depth + 1)
        if isinstance(expr, (cst.UnaryOperation, cst.Subscript)):
            inner = expr.expression if isinstance(expr, cst.UnaryOperation) else expr.value
            return self._is_tensor(inner, at, depth + 1)
        return False

    def _step_result(self, call: cst.Call, depth: int) -> bool:
        """A tensor the training step produced: a Keras metric's `result()`, or what a same-file
        tf.function (which returns tensors) or a train-step function returning its loss gives back."""
        ctx = self.ctx
        owner = receiver(call)
        if owner is not None and call_name(call) == "result":
            made = ctx.flow.constructed_by(owner, call)
            return made is not None and made[1].startswith("keras.metrics.")
        for fn in ctx.calls.local_functions(call.func):
            returns = [r.value for r in ctx.returns_of(fn) if r.value is not None]
            if fn in ctx.tf.compiled_functions and returns:
                return True
            if fn in ctx.training.functions and any(self._is_tensor(v, v, depth + 1) for v in returns):
                return True
        return False

    def _is_numpy(self, expr: cst.BaseExpression) -> bool:
        value = self.ctx.flow.resolve_value(expr)
        return isinstance(value, cst.Call) and (self.ctx.names.callee(value) or "").startswith("numpy.")

    @cached_property
    def _called_names(self) -> set[str]:
        return {call.func.value for call in self.ctx.nodes(cst.Call) if isinstance(call.func, cst.Name)}

    @cached_property
    def _differentiated(self) -> dict[str, set[cst.CSTNode]]:
        """The code of each differentiated value (`loss`, `outputs.loss`), with the scopes differentiating it."""
        found: dict[str, set[cst.CSTNode]] = {}
        for target, call in self.ctx.training.differentiated:
            found.setdefault(self.ctx.module.code_for_node(target), set()).add(self.ctx.scope_of(call))
        return found

    # ----- once per training step --------------------------------------------------------------

    @cached_property
    def _step_loops(self) -> set[cst.CSTNode]:
        """Loops whose every iteration is a training step: a backward / gradient / optimizer update runs
        in the iteration itself, not in a loop nested in it (an epoch loop runs whole epochs)."""
        updates = [call for _, call in self.ctx.training.differentiated] + [
            call for call in self.ctx.nodes(cst.Call) if call_name(call) in _TRAINING_CALLS]
        return {site.loop for call in updates for site in self.ctx.training.loops_running(call)}

    def _every_iteration(self, node: cst.CSTNode, site: StepSite) -> bool:
        """Not under a `% N` condition, neither around `node` nor around a call leading to it."""
        return not any(self.ctx.loop_values.under_periodic_guard(anchor) for anchor in (node, *site.path))
