"""LL103 unwatched-tape-source: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.nodes import argument, call_name, dotted, keyword_arg, names_in, receiver
from lintloop.analysis.with_blocks import WithContext
from lintloop.rule import Example, Rule
from lintloop.screen import Needs


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
    description = "a tape gradient taken of a tensor the tape never watched"
    frameworks = ("tf",)
    needs = Needs(file=(("text:GradientTape",),), statement=(("call:gradient",),))
    probe = "grad"
    summary = ("`t.gradient(target, sources)` where a source is a constant or tensor (`tf.constant`, "
               "`tf.convert_to_tensor`, an op result) or a `tf.Variable(..., trainable=False)` that is "
               "never passed to `t.watch(...)` inside the tape. Not a gradient only shown (printed, or displayed as a "
               "notebook expression, itself or the name it is assigned to: `grads = t.gradient(z, [x1, x2])` then "
               "`grads`): a guide showing its None on purpose, where the reader sees it.")
    why = ("A tape records operations on trainable variables automatically — they never need "
           "`watch` — but not on tensors or non-trainable variables. Without `t.watch(x)` the tape has "
           "no path from the target to `x`.")
    symptom = ("LL103_bad.py: `tape.gradient(loss, x)` for `x = tf.constant(...)` returned None "
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
""", expect="""
5:26-5:27 `x` is never `tape.watch()`ed, so `tape.gradient` returns None for it
    help: call `tape.watch(x)` inside the `with` block, before `x` is used
    note: `x` is a tensor made by `tf.constant`, not a variable: the tape records operations on it only
        when it is watched
"""),
        Example("""
import tensorflow as tf
scale = tf.Variable(2.0, trainable=False)
with tf.GradientTape() as g:
    loss = tf.reduce_sum(scale * w)
grads = g.gradient(loss, [w, scale])
""", expect="""
5:30-5:35 `scale` is never `g.watch()`ed, so `g.gradient` returns None for it
    help: call `g.watch(scale)` inside the `with` block, before `scale` is used
    note: `scale` is a non-trainable `tf.Variable`: the tape records operations on it only when it is
        watched
"""),
        Example("""
import tensorflow as tf
images = tf.convert_to_tensor(batch)
with tf.GradientTape() as tape:
    loss = loss_fn(labels, model(images))
saliency = tape.gradient(loss, images)
""", expect="""
5:32-5:38 `images` is never `tape.watch()`ed, so `tape.gradient` returns None for it
    help: call `tape.watch(images)` inside the `with` block, before `images` is used
    note: `images` is a tensor made by `tf.convert_to_tensor`, not a variable: the tape records
        operations on it only when it is watched
"""),
        Example("""
import tensorflow as tf
saliency = tf.convert_to_tensor(batch)
with tf.GradientTape() as tape:
    loss = loss_fn(labels, model(saliency))
grads = tape.gradient(loss, saliency)
grads
heatmap = tf.reduce_max(tf.abs(grads), axis=-1)
""", expect="""
5:29-5:37 `saliency` is never `tape.watch()`ed, so `tape.gradient` returns None for it
    help: call `tape.watch(saliency)` inside the `with` block, before `saliency` is used
    note: `saliency` is a tensor made by `tf.convert_to_tensor`, not a variable: the tape records
        operations on it only when it is watched
"""),
    )
    not_flagged = (
        Example("""
import tensorflow as tf
c = tf.constant(2.0)
with tf.GradientTape() as tape:
    y = c * c
print("gradient of a constant:", tape.gradient(y, c))
"""),
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
        Example("""
import tensorflow as tf
x1 = tf.constant(2.0)  # <= not a Variable
x2 = tf.constant(3.0)
with tf.GradientTape() as tape:
    z = x1 * x2
grads = tape.gradient(z, [x1, x2])
grads
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        tape = self.ctx.tf.tape_of_gradient(node)
        sources = argument(node, 1, "sources")
        if tape is None or sources is None or self.ctx.intent.result_only_shown(node):
            return  # a gradient only shown: a guide showing its None on purpose
        elements = ([e.value for e in sources.elements] if isinstance(sources, (cst.List, cst.Tuple))
                    else [sources])
        watches_all = self._watches_accessed_variables(tape)
        for source in elements:
            reason = self._why_unwatched(source, tape, node, watches_all)
            if reason and not self._watched(source, tape):
                name = self.ctx.snippet(source, 30)
                self.report(source, f"`{name}` is never `{tape.alias}.watch()`ed, so `{tape.alias}.gradient` returns "
                                    "None for it",
                            help=f"call `{tape.alias}.watch({name})` inside the `with` block, before `{name}` is used",
                            note=f"`{name}` is {reason}: the tape records operations on it only when it is watched")

    def _why_unwatched(self, source: cst.BaseExpression, tape: WithContext, at: cst.CSTNode,
                       watches_all: bool) -> str | None:
        if dotted(source) is None:
            return None
        made = self.ctx.flow.constructed_by(source, at)
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
        binding = self.ctx.flow.last_binding(dotted(source), at)
        if _tensor_op(name) and binding and not self.ctx.is_inside(binding.node, tape.block):
            return f"a tensor computed by `{name.replace('tensorflow.', 'tf.')}` outside the tape"
        return None

    def _watches_accessed_variables(self, tape: WithContext) -> bool:
        flag = keyword_arg(tape.item.item, "watch_accessed_variables") if isinstance(tape.item.item, cst.Call) else None
        return not (isinstance(flag, cst.Name) and flag.value == "False")

    def _watched(self, source: cst.BaseExpression, tape: WithContext) -> bool:
        wanted = dotted(source)
        for call in self.ctx.definitions.calls_in(tape.block):
            owner = receiver(call)
            if call_name(call) == "watch" and isinstance(owner, cst.Name) and owner.value == tape.alias:
                watched = argument(call, 0, "tensor")
                if watched is not None and (wanted in names_in(watched) or
                                            any(dotted(e.value) == wanted for e in getattr(watched, "elements", ()))
                                            or dotted(watched) == wanted):
                    return True
        return False
