"""LL1xx: autodiff correctness — values that silently leave the gradient computation."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis import (WithContext, argument, call_name, calls_within, dotted, keyword_arg, names_in,
                               positional_args, receiver, walk)
from lintloop.rule import Example, Rule

_NOT_TENSOR_CALLS = {"len", "int", "float", "bool", "range", "str", "round", "min", "max", "abs", "sum"}
# Attributes that hold a model's trainable variables.
_VARIABLE_ATTRIBUTES = {"kernel", "bias", "trainable_variables", "trainable_weights", "weights", "variables",
                        "embeddings"}
_SHAPE_QUERIES = {"tensorflow.shape", "tensorflow.size", "tensorflow.rank", "keras.ops.shape"}


def _shape_only(expr: cst.BaseExpression, ctx) -> bool:
    """A shape, size or length: `tf.shape(x)[0]`, `x.shape[1]`, `len(x)`."""
    while isinstance(expr, cst.Subscript):
        expr = expr.value
    if isinstance(expr, cst.Attribute):
        return expr.attr.value in ("shape", "ndim")
    if isinstance(expr, cst.Call):
        if any(ctx.is_builtin(expr.func, b) for b in ("int", "float")) and expr.args:
            return _shape_only(expr.args[0].value, ctx)
        return ctx.callee(expr) in _SHAPE_QUERIES or ctx.is_builtin(expr.func, "len")
    return False


class NumpyInGradientTape(Rule):
    code = "LL101"
    name = "numpy-in-gradient-tape"
    frameworks = ("tf",)
    requires = (("GradientTape",), ("numpy", "np.", "float(", "int(", "bool(", "make_ndarray"))
    probe = "grad"
    summary = ("Inside `with tf.GradientTape() as t:`, a value that reaches the target of a later "
               "`t.gradient(...)` goes through `.numpy()`, a NumPy function, `float()`/`int()`/`bool()` "
               "of a tensor, or `tf.make_ndarray`.")
    why = ("The tape records TensorFlow operations only. A NumPy array or Python number is a constant to "
           "it, so everything computed before the conversion is cut off from the loss and its gradient "
           "is None.")
    symptom = ("Running tests/fixtures/LL101_bad.py (TF 2.21, Keras 3): `tape.gradient` returned None for "
               "4 of 4 variables, then `optimizer.apply_gradients` raised `ValueError: No gradients provided "
               "for any variable.` When only some gradients are None, Keras 3 only warns. Inside "
               "`tf.function` it fails at trace time: `Cannot convert a symbolic tf.Tensor to a numpy array`.")
    remedy = ("Keep the computation in TensorFlow ops (`tf.reduce_mean`, `tf.math.*`) inside the tape; "
              "call `.numpy()` after the `with` block, for logging only.")
    flagged = (
        Example("""
import tensorflow as tf
import numpy as np
with tf.GradientTape() as tape:
    pred = model(x)
    loss = loss_fn(y, pred.numpy())
grads = tape.gradient(loss, model.trainable_variables)
"""),
        Example("""
import tensorflow as tf
import numpy as onp
def step(x, y):
    with tf.GradientTape() as t:
        logits = model(x)
        probs = onp.exp(logits)
        loss = tf.reduce_mean((probs - y) ** 2)
    return t.gradient(loss, model.trainable_variables)
"""),
        Example("""
import tensorflow as tf
import numpy as np
gen_tape = tf.GradientTape()
with gen_tape, tf.GradientTape() as disc_tape:
    g_loss = -tf.reduce_mean(np.tanh(generator(z).numpy()))
    d_loss = disc_loss(real, fake)
g_grads = gen_tape.gradient(g_loss, generator.trainable_variables)
d_grads = disc_tape.gradient(d_loss, discriminator.trainable_variables)
"""),
        Example("""
import tensorflow as tf
from tensorflow import GradientTape
with GradientTape() as tape:
    out = model(x)
    loss = tf.square(float(tf.reduce_mean(out)) - 1.0)
grads = tape.gradient(loss, model.trainable_variables)
"""),
    )
    not_flagged = (
        Example("""
import tensorflow as tf
import numpy as np
with tf.GradientTape() as tape:
    pred = model(x)
    loss = loss_fn(y, pred)
    acc = np.mean(np.argmax(pred.numpy(), axis=1) == y)
grads = tape.gradient(loss, model.trainable_variables)
print(loss.numpy())
"""),
        Example("""
import tensorflow as tf
import numpy as np
with tf.GradientTape() as tape:
    loss = loss_fn(y, model(x)) * np.float32(0.5)
grads = tape.gradient(loss, model.trainable_variables)
"""),
        Example("""
import tensorflow as tf
def train_step(x, y):
    with tf.GradientTape() as tape:
        labels = y.numpy().astype("int64")
        loss = tf.reduce_sum(loss_fn(labels, model(x))) / int(tf.shape(x)[0])
    return tape.gradient(loss, model.trainable_variables)
"""),
        Example("""
import tensorflow as tf
import numpy as np
with tf.GradientTape() as tape:
    y = np.asarray(y, dtype=np.float32)
    loss = tf.reduce_mean(tf.square(y - model(x)))
    n = int(x.shape[0])
    loss = loss / float(n)
grads = tape.gradient(loss, model.trainable_variables)
"""),
        Example("""
import numpy as np
class GradientTape:
    pass
with GradientTape() as tape:
    loss = np.mean(model(x).numpy())
grads = tape.gradient(loss, params)
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        tapes = self.ctx.enclosing_contexts(node, "tape")
        if not tapes or not self._leaves_tensorflow(node, tapes[0]):
            return
        if any(inner is not node and self._leaves_tensorflow(inner, tapes[0]) for inner in calls_within(node)):
            return  # `np.sum(x.numpy())`: reported once, where the tensor leaves TensorFlow
        for call, tape in self.ctx.gradient_calls:
            target = argument(call, 0, "target")
            if tape in tapes and target is not None and self.ctx.flows_into(node, target, call):
                what = self._describe(node)
                self.report(node, f"{what} inside `GradientTape` `{tape.alias}` turns a tensor into a "
                                  f"NumPy/Python value that reaches `{tape.alias}.gradient(...)`: the tape "
                                  "cannot differentiate through it, so the gradients are None")
                return

    def _leaves_tensorflow(self, node: cst.Call, tape: WithContext) -> bool:
        """Does this call turn a value that depends on the model into NumPy / Python?"""
        name = self.ctx.callee(node)
        if call_name(node) == "numpy" and receiver(node) is not None and not node.args and name is None:
            converted = [receiver(node)]
        elif name == "tensorflow.make_ndarray":
            converted = positional_args(node)[:1]
        elif (name and name.split(".")[0] == "numpy") or any(
                self.ctx.is_builtin(node.func, b) for b in ("float", "int", "bool")):
            converted = positional_args(node)
        else:
            return False
        return any(self._model_dependent(arg, tape) for arg in converted)

    def _model_dependent(self, expr: cst.BaseExpression, tape: WithContext, depth: int = 0) -> bool:
        """Computed in the tape (a call, or a name bound inside it from one), or a variable's attribute.

        Inputs, labels and shapes converted to NumPy do not cut a gradient path, so they are
        not reported: `y.numpy()` of labels, `int(tf.shape(x)[0])`, `np.float32(0.5)`.
        """
        if _shape_only(expr, self.ctx) or depth > 4:
            return False
        for call in calls_within(expr):
            if not any(self.ctx.is_builtin(call.func, b) for b in _NOT_TENSOR_CALLS) and not _shape_only(call, self.ctx):
                return True
        if any(isinstance(n, cst.Attribute) and n.attr.value in _VARIABLE_ATTRIBUTES for n in walk(expr)):
            return True
        return any(binding.value is not None and self.ctx.is_inside(binding.node, tape.block.body)
                   and self._model_dependent(binding.value, tape, depth + 1)
                   for name in names_in(expr) for binding in self.ctx.bindings_of(name, expr))

    def _describe(self, node: cst.Call) -> str:
        if call_name(node) == "numpy" and receiver(node) is not None:
            return "`.numpy()`"
        return f"`{dotted(node.func) or call_name(node)}(...)`"


# Ops whose output has no gradient with respect to their input.
_NON_DIFFERENTIABLE = {
    f"{prefix}.{op}"
    for prefix in ("tensorflow", "tensorflow.math", "torch", "keras.ops")
    for op in ("argmax", "argmin", "round", "floor", "ceil", "sign", "equal", "not_equal", "greater",
               "greater_equal", "less", "less_equal", "eq", "ne", "gt", "ge", "lt", "le")
}
_NON_DIFFERENTIABLE_METHODS = {"argmax", "argmin", "round", "floor", "ceil", "sign", "long", "int", "bool",
                               "eq", "ne", "gt", "ge", "lt", "le"}
# Calls that pass their first argument's (non-)differentiability through unchanged.
_PASS_THROUGH = {"tensorflow.cast", "tensorflow.one_hot", "tensorflow.reshape", "tensorflow.squeeze",
                 "tensorflow.expand_dims", "tensorflow.identity", "torch.reshape", "torch.squeeze",
                 "torch.unsqueeze", "torch.nn.functional.one_hot", "keras.utils.to_categorical",
                 "keras.ops.cast", "keras.ops.one_hot"}
_PASS_THROUGH_METHODS = {"float", "double", "half", "to", "view", "reshape", "squeeze", "unsqueeze",
                         "type", "flatten", "contiguous"}
_INTEGER_DTYPES = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool", "long"}


class NonDifferentiableBeforeLoss(Rule):
    code = "LL102"
    name = "non-differentiable-before-loss"
    frameworks = ("tf", "pt")
    requires = (("backward", "gradient", "grad("), ("loss", "Loss", "entropy", "kl_div"))
    probe = "grad/error"
    summary = ("The result of argmax/argmin/round/floor/ceil/sign, a cast to an integer type or a "
               "comparison is passed as the prediction to a loss (Keras loss object or function, "
               "`torch.nn.functional` loss, an `nn.*Loss` instance) whose result is differentiated.")
    why = ("These ops are piecewise constant: they have no gradient (TensorFlow registers none) or a zero "
           "one, so nothing upstream of them learns.")
    symptom = ("tests/fixtures/LL102_bad.py (TensorFlow): `tape.gradient` returned None for 4 of 4 variables "
               "and `apply_gradients` raised `ValueError: No gradients provided for any variable.` "
               "tests/fixtures/LL102_torch_bad.py (PyTorch): `loss.backward()` raised `RuntimeError: element "
               "0 of tensors does not require grad and does not have a grad_fn`. `torch.round` gives an "
               "all-zero gradient instead, and training silently stalls. When the loss has another, "
               "differentiable term, nothing fails: this term just trains nothing.")
    remedy = ("Pass the logits or probabilities to the loss (e.g. `CrossEntropyLoss` on logits, "
              "`SparseCategoricalCrossentropy(from_logits=True)`); use argmax only for metrics.")
    flagged = (
        Example("""
import tensorflow as tf
loss_fn = tf.keras.losses.MeanSquaredError()
with tf.GradientTape() as tape:
    pred = tf.cast(tf.argmax(model(x), axis=1), tf.float32)
    loss = loss_fn(y, pred)
grads = tape.gradient(loss, model.trainable_variables)
"""),
        Example("""
import torch.nn.functional as F
out = model(x)
loss = F.mse_loss(out.argmax(dim=1).float(), y)
loss.backward()
"""),
        Example("""
import torch
from torch import nn
criterion = nn.L1Loss()
def train_step(x, y):
    pred = torch.round(model(x))
    loss = criterion(pred, y)
    loss.backward()
"""),
    )
    not_flagged = (
        Example("""
import torch.nn.functional as F
out = model(x)
loss = F.cross_entropy(out, y)
loss.backward()
acc = (out.argmax(dim=1) == y).float().mean()
"""),
        Example("""
import torch.nn.functional as F
out = model(x)
loss = F.cross_entropy(out, onehot.argmax(dim=1))
loss.backward()
"""),
        Example("""
import tensorflow as tf
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
logits = model(x)
pred = tf.argmax(logits, axis=1)
loss = loss_fn(tf.argmax(y, axis=1), logits)
print(loss_fn(y, tf.cast(pred, tf.float32)))
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        found = self.ctx.loss_prediction(node)
        if found is None:
            return
        prediction, framework = found
        op = self._non_differentiable(prediction, node, depth=0)
        if op is None or not self.ctx.is_differentiated(node):
            return
        consequence = ("`tape.gradient` returns None when it is the only term" if framework == "tf" else
                       "`backward()` raises 'element 0 of tensors does not require grad' when it is the "
                       "only term; round/floor give all-zero gradients")
        self.report(prediction, f"the prediction passed to this loss comes from `{op}`, which has no "
                                f"gradient, so this loss trains nothing ({consequence})")

    def _non_differentiable(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int) -> str | None:
        if depth > 6:
            return None
        if isinstance(expr, cst.Comparison):
            return "a comparison"
        if isinstance(expr, cst.Name):
            binding = self.ctx.last_binding(expr.value, at)
            if binding is None or binding.value is None or binding.augmented:
                return None
            return self._non_differentiable(binding.value, binding.node, depth + 1)
        if not isinstance(expr, cst.Call):
            return None
        name = self.ctx.callee(expr)
        if name in _NON_DIFFERENTIABLE:
            return name.replace("tensorflow.", "tf.")
        if name in ("tensorflow.cast", "keras.ops.cast") and self._integer_dtype(argument(expr, 1, "dtype")):
            return "a cast to an integer type"
        if name in _PASS_THROUGH:
            inner = argument(expr, 0, "x")
            return self._non_differentiable(inner, at, depth + 1) if inner is not None else None
        method = call_name(expr)
        owner = receiver(expr)
        if name is None and owner is not None:
            if method in _NON_DIFFERENTIABLE_METHODS:
                return f".{method}()"
            if method in ("to", "type") and self._integer_dtype(argument(expr, 0, "dtype")):
                return "a cast to an integer type"
            if method in _PASS_THROUGH_METHODS:
                return self._non_differentiable(owner, at, depth + 1)
        return None

    def _integer_dtype(self, expr: cst.BaseExpression | None) -> bool:
        if expr is None:
            return False
        text = dotted(expr) or ""
        if isinstance(expr, cst.SimpleString):
            text = str(expr.evaluated_value)
        return text.rsplit(".", 1)[-1] in _INTEGER_DTYPES


# TensorFlow calls that create a tensor that no tape watches unless told to.
_CREATION_OPS = {"tensorflow.constant", "tensorflow.convert_to_tensor", "tensorflow.ones", "tensorflow.zeros",
                 "tensorflow.fill", "tensorflow.range", "tensorflow.linspace", "tensorflow.eye",
                 "tensorflow.random.normal", "tensorflow.random.uniform", "tensorflow.random.truncated_normal"}


_TENSOR_OP_NAMESPACES = ("tensorflow.math.", "tensorflow.linalg.", "tensorflow.nn.", "tensorflow.image.",
                         "tensorflow.random.", "tensorflow.signal.")
_NOT_TENSOR_OPS = {"Variable", "function", "GradientTape", "Module", "py_function", "numpy_function", "print",
                   "identity_n", "group", "no_op", "get_static_value"}


def _tensor_op(name: str) -> bool:
    """An op returning a new tensor (`tf.square`, `tf.math.exp`), not a structure helper like `tf.nest.*`."""
    parts = name.split(".")
    if name.startswith(_TENSOR_OP_NAMESPACES):
        return True
    return len(parts) == 2 and parts[0] == "tensorflow" and parts[1][:1].islower() and parts[1] not in _NOT_TENSOR_OPS


class UnwatchedTapeSource(Rule):
    code = "LL103"
    name = "unwatched-tape-source"
    frameworks = ("tf",)
    requires = (("GradientTape",), (".gradient(",))
    probe = "grad"
    summary = ("`t.gradient(target, sources)` where a source is a constant or tensor (`tf.constant`, "
               "`tf.convert_to_tensor`, an op result) or a `tf.Variable(..., trainable=False)` that is "
               "never passed to `t.watch(...)` inside the tape.")
    why = ("A tape records operations on trainable variables automatically — they never need "
           "`watch` — but not on tensors or non-trainable variables. Without `t.watch(x)` the tape has "
           "no path from the target to `x`.")
    symptom = ("tests/fixtures/LL103_bad.py: `tape.gradient(loss, x)` for `x = tf.constant(...)` returned None "
               "silently (the program only failed on its next line, which used the gradient: `ValueError: "
               "Attempt to convert a value (None) with an unsupported type (<class 'NoneType'>) to a "
               "Tensor.`). A trainable `tf.Variable` in the same tape, never watched, got its gradient.")
    remedy = "Call `tape.watch(x)` inside the `with` block before `x` is used, or make `x` a trainable `tf.Variable`."
    flagged = (
        Example("""
import tensorflow as tf
x = tf.constant(3.0)
with tf.GradientTape() as tape:
    y = x * x
dy_dx = tape.gradient(y, x)
"""),
        Example("""
import tensorflow as tf
scale = tf.Variable(2.0, trainable=False)
with tf.GradientTape() as g:
    loss = tf.reduce_sum(scale * w)
grads = g.gradient(loss, [w, scale])
"""),
        Example("""
import tensorflow as tf
images = tf.convert_to_tensor(batch)
with tf.GradientTape() as tape:
    loss = loss_fn(labels, model(images))
saliency = tape.gradient(loss, images)
"""),
    )
    not_flagged = (
        Example("""
import tensorflow as tf
x = tf.constant(3.0)
with tf.GradientTape() as tape:
    tape.watch(x)
    y = x * x
dy_dx = tape.gradient(y, x)
"""),
        Example("""
import tensorflow as tf
w = tf.Variable(2.0)
with tf.GradientTape() as tape:
    loss = w * w
grad = tape.gradient(loss, w)
"""),
        Example("""
import tensorflow as tf
with tf.GradientTape() as tape:
    loss = loss_fn(y, model(x))
variables = tf.nest.flatten(model.trainable_variables)
grads = tape.gradient(loss, variables)
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        tape = next((t for c, t in self.ctx.gradient_calls if c is node), None)
        sources = argument(node, 1, "sources")
        if tape is None or sources is None:
            return
        elements = ([e.value for e in sources.elements] if isinstance(sources, (cst.List, cst.Tuple))
                    else [sources])
        watches_all = self._watches_accessed_variables(tape)
        for source in elements:
            reason = self._why_unwatched(source, tape, node, watches_all)
            if reason and not self._watched(source, tape):
                self.report(source, f"`{dotted(source)}` is {reason}, and is never `{tape.alias}.watch()`ed "
                                    f"inside the tape: `{tape.alias}.gradient` returns None for it")

    def _why_unwatched(self, source: cst.BaseExpression, tape: WithContext, at: cst.CSTNode,
                       watches_all: bool) -> str | None:
        if dotted(source) is None:
            return None
        made = self.ctx.constructed_by(source, at)
        if made is None:
            return None if watches_all else "read on a tape created with `watch_accessed_variables=False`"
        call, name = made
        if name == "tensorflow.Variable":
            trainable = keyword_arg(call, "trainable")
            if isinstance(trainable, cst.Name) and trainable.value == "False":
                return "a non-trainable `tf.Variable`"
            return None if watches_all else "a variable on a tape with `watch_accessed_variables=False`"
        if name in _CREATION_OPS:
            return f"a tensor made by `{name.replace('tensorflow.', 'tf.')}`, not a variable"
        binding = self.ctx.last_binding(dotted(source), at)
        if _tensor_op(name) and binding and not self.ctx.is_inside(binding.node, tape.block):
            return f"a tensor computed by `{name.replace('tensorflow.', 'tf.')}` outside the tape"
        return None

    def _watches_accessed_variables(self, tape: WithContext) -> bool:
        flag = keyword_arg(tape.item.item, "watch_accessed_variables") if isinstance(tape.item.item, cst.Call) else None
        return not (isinstance(flag, cst.Name) and flag.value == "False")

    def _watched(self, source: cst.BaseExpression, tape: WithContext) -> bool:
        wanted = dotted(source)
        for call in self.ctx.calls_in(tape.block):
            owner = receiver(call)
            if call_name(call) == "watch" and isinstance(owner, cst.Name) and owner.value == tape.alias:
                watched = argument(call, 0, "tensor")
                if watched is not None and (wanted in names_in(watched) or
                                            any(dotted(e.value) == wanted for e in getattr(watched, "elements", ()))
                                            or dotted(watched) == wanted):
                    return True
        return False
