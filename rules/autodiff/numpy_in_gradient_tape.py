"""LL101 numpy-in-gradient-tape: the rule, its documentation and its examples."""

from __future__ import annotations

from typing import Callable

import libcst as cst

from lintloop.analysis.nodes import argument, call_name, calls_within, dotted, names_in, positional_args, receiver, walk
from lintloop.analysis.with_blocks import WithContext
from lintloop.rule import Example, Rule
from lintloop.screen import Needs


_NOT_TENSOR_CALLS = {"len", "int", "float", "bool", "range", "str", "round", "min", "max", "abs", "sum"}


# Attributes that hold a model's trainable variables.
_VARIABLE_ATTRIBUTES = {"kernel", "bias", "trainable_variables", "trainable_weights", "weights", "variables",
                        "embeddings"}


_SHAPE_QUERIES = {"tensorflow.shape", "tensorflow.size", "tensorflow.rank", "keras.ops.shape"}
# A tensor's metadata, not its values: converting it cuts no gradient path.
_METADATA_ATTRIBUTES = {"shape", "ndim", "dtype"}

# How many same-file helpers of helpers a tape's call is followed into.
HELPER_DEPTH = 2


def _shape_only(expr: cst.BaseExpression, ctx) -> bool:
    """A shape, size, length or dtype: `tf.shape(x)[0]`, `x.shape[1]`, `len(x)`, `x.dtype.as_numpy_dtype`."""
    while isinstance(expr, (cst.Subscript, cst.Attribute)):
        if isinstance(expr, cst.Attribute) and expr.attr.value in _METADATA_ATTRIBUTES:
            return True
        expr = expr.value
    if isinstance(expr, cst.Call):
        if any(ctx.names.is_builtin(expr.func, b) for b in ("int", "float")) and expr.args:
            return _shape_only(expr.args[0].value, ctx)
        return ctx.names.callee(expr) in _SHAPE_QUERIES or ctx.names.is_builtin(expr.func, "len")
    return False



class NumpyInGradientTape(Rule):
    code = "LL101"
    name = "numpy-in-gradient-tape"
    description = "`.numpy()` or NumPy math on a value a GradientTape differentiates"
    frameworks = ("tf",)
    # The unit with the tape needs only its `gradient` call: the conversion may be in a helper it
    # calls (selected with it), or in another module of the project (no token of it in this file).
    needs = Needs(file=(("text:GradientTape",),), statement=(("call:gradient",),))
    probe = "grad"
    summary = ("Inside `with tf.GradientTape() as t:`, a value that reaches the target of a later "
               "`t.gradient(...)` goes through `.numpy()`, a NumPy function, `float()`/`int()`/`bool()` "
               "of a tensor, or `tf.make_ndarray` — in the tape's block, or in a helper called there with "
               "a tensor of the tape and returning the converted value (a function of the same file, "
               "followed two helpers deep, or one imported from another module of the project). Not a gradient only shown (printed, or displayed as a notebook expression): a guide showing "
               "its None on purpose, where the reader sees it.")
    why = ("The tape records TensorFlow operations only. A NumPy array or Python number is a constant to "
           "it, so everything computed before the conversion is cut off from the loss and its gradient "
           "is None.")
    symptom = ("Running LL101_bad.py (TF 2.21, Keras 3): `tape.gradient` returned None for "
               "4 of 4 variables, then `optimizer.apply_gradients` raised `ValueError: No gradients provided "
               "for any variable.` A training script whose loss function, imported from its `losses.py`, "
               "calls `.numpy()` prints `step 0: loss=... None gradients: 4/4` and fails the same way. "
               "When only some gradients are None, Keras 3 only warns. Inside "
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
""", expect="""
5:23-5:35 `.numpy()` inside `GradientTape` `tape` turns a tensor into a NumPy/Python value
    help: keep the computation in TensorFlow ops (`tf.math.*`, `tf.reduce_mean`) instead of `.numpy()`;
        convert after the `with` block, for logging only
    note: the value reaches `tape.gradient(...)`, and the tape cannot differentiate through it, so the
        gradients are None
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
""", expect="""
6:17-6:32 `onp.exp(...)` inside `GradientTape` `t` turns a tensor into a NumPy/Python value
    help: keep the computation in TensorFlow ops (`tf.math.*`, `tf.reduce_mean`) instead of
        `onp.exp(...)`; convert after the `with` block, for logging only
    note: the value reaches `t.gradient(...)`, and the tape cannot differentiate through it, so the
        gradients are None
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
""", expect="""
5:38-5:58 `.numpy()` inside `GradientTape` `gen_tape` turns a tensor into a NumPy/Python value
    help: keep the computation in TensorFlow ops (`tf.math.*`, `tf.reduce_mean`) instead of `.numpy()`;
        convert after the `with` block, for logging only
    note: the value reaches `gen_tape.gradient(...)`, and the tape cannot differentiate through it, so
        the gradients are None
"""),
        Example("""
import tensorflow as tf
from tensorflow import GradientTape
with GradientTape() as tape:
    out = model(x)
    loss = tf.square(float(tf.reduce_mean(out)) - 1.0)
grads = tape.gradient(loss, model.trainable_variables)
""", expect="""
5:22-5:48 `float(...)` inside `GradientTape` `tape` turns a tensor into a NumPy/Python value
    help: keep the computation in TensorFlow ops (`tf.math.*`, `tf.reduce_mean`) instead of
        `float(...)`; convert after the `with` block, for logging only
    note: the value reaches `tape.gradient(...)`, and the tape cannot differentiate through it, so the
        gradients are None
"""),
        Example("""
import tensorflow as tf
import numpy as np
def to_probabilities(logits):
    return np.exp(logits.numpy())
def compute_loss(labels, logits):
    probs = to_probabilities(logits)
    return tf.reduce_mean(tf.square(probs - labels))
def train_step(model, optimizer, x, y):
    with tf.GradientTape() as tape:
        loss = compute_loss(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
""", expect="""
4:19-4:33 `.numpy()` in `to_probabilities` turns a tensor into a NumPy/Python value that it returns
    help: keep `to_probabilities` in TensorFlow ops (`tf.math.*`, `tf.reduce_mean`) instead of
        `.numpy()`
    note: `to_probabilities` is called from `compute_loss` at line 6, called from inside `GradientTape`
        `tape` at line 10; its result reaches `tape.gradient(...)`, and the tape cannot differentiate
        through it, so the gradients are None
"""),
        Example("""
import tensorflow as tf
class Trainer:
    def _loss(self, labels, predictions):
        return tf.reduce_mean(tf.square(labels - float(tf.reduce_mean(predictions))))
    def step(self, x, y):
        with tf.GradientTape() as tape:
            loss = self._loss(y, self.model(x))
        return tape.gradient(loss, self.model.trainable_variables)
""", expect="""
4:50-4:84 `float(...)` in `_loss` turns a tensor into a NumPy/Python value that it returns
    help: keep `_loss` in TensorFlow ops (`tf.math.*`, `tf.reduce_mean`) instead of `float(...)`
    note: `_loss` is called from inside `GradientTape` `tape` at line 7; its result reaches
        `tape.gradient(...)`, and the tape cannot differentiate through it, so the gradients are None
"""),
    )
    not_flagged = (
        Example("""
import tensorflow as tf
with tf.GradientTape() as tape:
    pred = model(x)
    loss = tf.reduce_mean((y - pred.numpy()) ** 2)
print("the gradients are None:", tape.gradient(loss, model.trainable_variables))
"""),
        Example("""
import tensorflow as tf
import numpy as np
def standardize(values):
    mean, var = tf.nn.moments(x=values, axes=[0], keepdims=True)
    epsilon = np.finfo(values.dtype.as_numpy_dtype).eps
    return (values - mean) / (tf.sqrt(var) + epsilon)
def train_step(model, x, y):
    with tf.GradientTape() as tape:
        advantages = standardize(model(x))
        loss = -tf.reduce_mean(advantages * y)
    return tape.gradient(loss, model.trainable_variables)
"""),
        Example("""
import tensorflow as tf
import numpy as np
def batch_accuracy(labels, logits):
    return float(np.mean(np.argmax(logits.numpy(), axis=-1) == labels.numpy()))
def train_step(model, x, y):
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True))
        accuracy = batch_accuracy(y, logits)
    return tape.gradient(loss, model.trainable_variables), accuracy
"""),
        Example("""
import tensorflow as tf
import numpy as np
def smooth_labels(labels, classes):
    return labels.numpy() * 0.9 + 0.1 / classes
def train_step(model, x, y):
    with tf.GradientTape() as tape:
        targets = smooth_labels(y, 10)
        loss = tf.reduce_mean(tf.square(targets - model(x)))
    return tape.gradient(loss, model.trainable_variables)
"""),
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
        if not tapes:
            return
        tape = tapes[0]
        if self._converts(node, lambda arg: self._model_dependent(arg, tape)):
            if any(inner is not node and self._converts(inner, lambda arg: self._model_dependent(arg, tape))
                   for inner in calls_within(node)):
                return  # `np.sum(x.numpy())`: reported once, where the tensor leaves TensorFlow
            gradient = self._gradient_reached(node, tapes)
            if gradient is not None:
                what = self._describe(node)
                self.report(node, f"{what} inside `GradientTape` `{gradient.alias}` turns a tensor into a "
                                  "NumPy/Python value",
                            help="keep the computation in TensorFlow ops (`tf.math.*`, `tf.reduce_mean`) instead "
                                 f"of {what}; convert after the `with` block, for logging only",
                            note=f"the value reaches `{gradient.alias}.gradient(...)`, and the tape cannot "
                                 "differentiate through it, so the gradients are None")
            return
        self._through_helper(node, tapes)

    def _through_helper(self, call: cst.Call, tapes: list[WithContext]) -> None:
        """A helper called in the tape, with a tensor of the tape, returns a value that went through a
        conversion: a same-file helper (reported at the conversion, with the chain of calls) or one
        imported from another module of the project (reported here, naming the module and line)."""
        local = self.ctx.calls.local_functions(call.func)
        imported = None if local else self.ctx.project.function_of(call.func)
        if not local and imported is None:
            return
        tensors = [arg for arg in call.args if self._model_dependent(arg.value, tapes[0])]
        if not tensors:
            return
        found = None
        for function in local:
            found = self._numpy_into_return(function, self._parameters_receiving(function, call, tensors),
                                            (call,), HELPER_DEPTH)
            if found is not None:
                break
        if imported is not None:
            parameters = imported.parameters
            passed = {parameters[i] for i, arg in enumerate(call.args) if arg.keyword is None and not arg.star
                      and i < len(parameters) and arg in tensors}
            passed |= {arg.keyword.value for arg in tensors if arg.keyword is not None}
            remote = self.ctx.project.numpy_into_return(imported, passed) if passed else None
            if remote is None:
                return
            tape = self._gradient_reached(call, tapes)
            if tape is not None:
                conversion, holder = remote
                where = f"{holder.module.path.rsplit('/', 1)[-1]}:{conversion.lineno}"
                converted = conversion.as_string()[:50]
                self.report(call, f"`{imported.name}` turns a tensor into a NumPy/Python value that it returns",
                            help=f"keep `{imported.name}` in TensorFlow ops (`tf.math.*`, `tf.reduce_mean`) "
                                 f"instead of `{converted}`",
                            note=f"`{imported.name}` ({imported.where}) returns a value that went through "
                                 f"`{converted}` at {where}; called inside `GradientTape` "
                                 f"`{tape.alias}`, its result reaches `{tape.alias}.gradient(...)`, and the tape "
                                 "cannot differentiate through it, so the gradients are None")
            return
        if found is None:
            return
        conversion, chain = found
        tape = self._gradient_reached(call, tapes)
        if tape is not None and not any(r.node is conversion for r in self.reports):  # one report per helper
            function = next(a for a in self.ctx.ancestors(conversion) if isinstance(a, cst.FunctionDef))
            described = self.ctx.calls.describe_chain(chain, f"inside `GradientTape` `{tape.alias}`")
            what = self._describe(conversion)
            self.report(conversion, f"{what} in `{function.name.value}` turns a tensor into a NumPy/Python value "
                                    "that it returns",
                        help=f"keep `{function.name.value}` in TensorFlow ops (`tf.math.*`, `tf.reduce_mean`) "
                             f"instead of {what}",
                        note=f"`{function.name.value}` is {described.removeprefix(', ')}; its result reaches "
                             f"`{tape.alias}.gradient(...)`, and the tape cannot differentiate through it, so the "
                             "gradients are None")

    def _numpy_into_return(self, function: cst.FunctionDef, parameters: set[str], chain: tuple[cst.Call, ...],
                           depth: int) -> tuple[cst.Call, tuple[cst.Call, ...]] | None:
        """A conversion, in `function` or a same-file helper it calls, of a value computed from
        `parameters`, whose result `function` returns; with the call sites (innermost first)."""
        if not parameters:
            return None
        returns = [r for r in self.ctx.returns_of(function) if r.value is not None]
        tainted = lambda expr: self._reads_parameters(expr, function, parameters)  # noqa: E731
        for ret in returns:
            values = [ret.value] + [b.value for b in self.ctx.flow.feeding_bindings(ret.value, ret)
                                    if b.value is not None and self.ctx.is_inside(b.node, function)]
            for value in values:
                for call in calls_within(value):
                    if self._converts(call, tainted):
                        inner = [c for c in calls_within(call) if c is not call and self._converts(c, tainted)]
                        return (inner[-1] if inner else call), chain  # where the tensor leaves TensorFlow
                    if depth > 0:
                        for inner in self.ctx.calls.local_functions(call.func):
                            if inner is function:
                                continue
                            tensors = [a for a in call.args if tainted(a.value)]
                            found = self._numpy_into_return(inner, self._parameters_receiving(inner, call, tensors),
                                                            (call, *chain), depth - 1)
                            if found is not None:
                                return found
        return None

    def _reads_parameters(self, expr: cst.BaseExpression, function: cst.FunctionDef, parameters: set[str]) -> bool:
        """`expr` is computed (in `function`) from one of its `parameters`; a shape is not."""
        if _shape_only(expr, self.ctx):
            return False
        if names_in(expr) & parameters:
            return True
        return any(isinstance(b.node, cst.Param) and b.name in parameters
                   for b in self.ctx.flow.feeding_bindings(expr) if self.ctx.is_inside(b.node, function))

    @staticmethod
    def _parameters_receiving(function: cst.FunctionDef, call: cst.Call, passed: list[cst.Arg]) -> set[str]:
        """The names of `function`'s parameters that the arguments `passed` at `call` bind."""
        params = [p.name.value for p in (*function.params.posonly_params, *function.params.params)]
        if params[:1] == ["self"] and isinstance(call.func, cst.Attribute):
            params = params[1:]
        names = set()
        for i, arg in enumerate(call.args):
            if arg in passed:
                if arg.keyword is not None:
                    names.add(arg.keyword.value)
                elif not arg.star and i < len(params):
                    names.add(params[i])
        return names

    def _gradient_reached(self, node: cst.Call, tapes: list[WithContext]) -> WithContext | None:
        """The tape (of those open around `node`) whose `gradient(...)` target `node`'s value reaches
        (not a gradient only shown: a guide showing its None on purpose)."""
        flow = self.ctx.flow
        for call, tape in self.ctx.tf.gradient_calls_of(tapes):
            target = argument(call, 0, "target")
            if target is not None and not self.ctx.intent.only_shown(call) \
                    and flow.reaches(node, flow.uses([(target, call)])):
                return tape
        return None

    def _converts(self, node: cst.Call, tensor: Callable[[cst.BaseExpression], bool]) -> bool:
        """Does this call turn a value for which `tensor` holds into NumPy / Python?"""
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
        return any(tensor(arg) for arg in converted)

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
        return any(binding.value is not None and self._model_dependent(binding.value, tape, depth + 1)
                   for name in names_in(expr)
                   for binding in self.ctx.flow.bindings_within(name, expr, tape.block.body, before=True))

    def _describe(self, node: cst.Call) -> str:
        if call_name(node) == "numpy" and receiver(node) is not None:
            return "`.numpy()`"
        return f"`{dotted(node.func) or call_name(node)}(...)`"
