"""LL101 numpy-in-gradient-tape: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.syntax import argument, call_name, calls_within, dotted, names_in, positional_args, receiver, walk
from lintloop.analysis.contexts import WithContext
from lintloop.rule import Example, Rule
from lintloop.screen import Needs


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
        if any(ctx.names.is_builtin(expr.func, b) for b in ("int", "float")) and expr.args:
            return _shape_only(expr.args[0].value, ctx)
        return ctx.names.callee(expr) in _SHAPE_QUERIES or ctx.names.is_builtin(expr.func, "len")
    return False



class NumpyInGradientTape(Rule):
    code = "LL101"
    name = "numpy-in-gradient-tape"
    frameworks = ("tf",)
    needs = Needs(file=(("text:GradientTape",),),
                  statement=(("call:gradient",), ("call:numpy", "call:float", "call:int", "call:bool",
                                                  "call:make_ndarray", "name:numpy")))
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
        tapes = self.ctx.tf.tapes.enclosing(node)
        if not tapes or not self._leaves_tensorflow(node, tapes[0]):
            return
        if any(inner is not node and self._leaves_tensorflow(inner, tapes[0]) for inner in calls_within(node)):
            return  # `np.sum(x.numpy())`: reported once, where the tensor leaves TensorFlow
        for call, tape in self.ctx.tf.gradient_calls:
            target = argument(call, 0, "target")
            if tape in tapes and target is not None and self.ctx.flow.flows_into(node, target, call):
                what = self._describe(node)
                self.report(node, f"{what} inside `GradientTape` `{tape.alias}` turns a tensor into a "
                                  f"NumPy/Python value that reaches `{tape.alias}.gradient(...)`: the tape "
                                  "cannot differentiate through it, so the gradients are None")
                return

    def _leaves_tensorflow(self, node: cst.Call, tape: WithContext) -> bool:
        """Does this call turn a value that depends on the model into NumPy / Python?"""
        name = self.ctx.names.callee(node)
        if call_name(node) == "numpy" and receiver(node) is not None and not node.args and name is None:
            converted = [receiver(node)]
        elif name == "tensorflow.make_ndarray":
            converted = positional_args(node)[:1]
        elif (name and name.split(".")[0] == "numpy") or any(
                self.ctx.names.is_builtin(node.func, b) for b in ("float", "int", "bool")):
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
            if not any(self.ctx.names.is_builtin(call.func, b) for b in _NOT_TENSOR_CALLS) and not _shape_only(call, self.ctx):
                return True
        if any(isinstance(n, cst.Attribute) and n.attr.value in _VARIABLE_ATTRIBUTES for n in walk(expr)):
            return True
        return any(binding.value is not None and self.ctx.is_inside(binding.node, tape.block.body)
                   and self._model_dependent(binding.value, tape, depth + 1)
                   for name in names_in(expr) for binding in self.ctx.flow.bindings_of(name, expr))

    def _describe(self, node: cst.Call) -> str:
        if call_name(node) == "numpy" and receiver(node) is not None:
            return "`.numpy()`"
        return f"`{dotted(node.func) or call_name(node)}(...)`"
