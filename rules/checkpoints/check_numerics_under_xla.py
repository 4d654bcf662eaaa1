"""LL803 check-numerics-under-xla: the rule, its documentation and its examples."""

from __future__ import annotations

from functools import cached_property

import libcst as cst

from lintloop.rule import Example, Rule
from lintloop.screen import Needs

_CHECKS = {"tensorflow.debugging.check_numerics", "tensorflow.check_numerics",
           "tensorflow.compat.v1.check_numerics", "tensorflow.compat.v1.debugging.check_numerics",
           "tensorflow.debugging.assert_all_finite", "tensorflow.compat.v1.debugging.assert_all_finite",
           "tensorflow.compat.v1.verify_tensor_all_finite", "tensorflow.verify_tensor_all_finite"}
_SESSIONS = {"tensorflow.Session", "tensorflow.compat.v1.Session", "tensorflow.compat.v1.InteractiveSession",
             "tensorflow.InteractiveSession", "tensorflow.compat.v1.train.MonitoredTrainingSession",
             "tensorflow.train.MonitoredTrainingSession", "tensorflow.compat.v1.train.MonitoredSession",
             "tensorflow.compat.v1.train.SingularMonitoredSession"}
_CONTROL_DEPENDENCIES = {"tensorflow.control_dependencies", "tensorflow.compat.v1.control_dependencies"}


class CheckNumericsUnderXla(Rule):
    code = "LL803"
    name = "check-numerics-under-xla"
    description = "`check_numerics` in code compiled with XLA"
    frameworks = ("tf",)
    # `call:compile` / sessions: the units that say `jit_compile=True` or run a TF1 graph.
    needs = Needs(file=(("call:check_numerics", "call:assert_all_finite", "call:verify_tensor_all_finite"),),
                  statement=(("call:check_numerics", "call:assert_all_finite", "call:verify_tensor_all_finite",
                              "call:compile", "call:Session", "call:InteractiveSession",
                              "call:MonitoredTrainingSession", "call:MonitoredSession",
                              "call:SingularMonitoredSession"),))
    probe = "effect"
    summary = ("`tf.debugging.check_numerics` (or `assert_all_finite`, `tf.compat.v1.check_numerics`) inside a "
               "function compiled with XLA — a tf.function or wrapper with `jit_compile=True`, a Keras "
               "`train_step`/`test_step` of a model compiled with `compile(..., jit_compile=True)` in the "
               "file, or a same-file helper called only from them; or, in TF1 graph code run through a "
               "`Session`, a check whose result is discarded (outside `tf.control_dependencies`).")
    why = ("XLA compiles the check to nothing on CPU (TF 2.21, measured): it returns its input unchanged and "
           "never raises, so a NaN or Inf it was meant to stop passes silently into the loss and the "
           "weights. In a TF1 graph, a check whose output nothing uses is pruned from the `Session.run` "
           "and never runs. (Keras 3's default `jit_compile=\"auto\"` XLA-compiles `train_step` only on a "
           "machine with a GPU, outside a distribution strategy; it is not flagged, since what runs depends "
           "on the machine. Recent TensorFlow sources lower the check to a device assert on XLA:GPU; "
           "not measured here.)")
    symptom = ("LL803_bad.py feeds a NaN label into its `@tf.function(jit_compile=True)` train "
               "step, which checks the loss with `tf.debugging.check_numerics`: nothing raises, and it prints "
               "`loss nan at step 3; check_numerics raised nothing; final loss nan`. The same program without "
               "`jit_compile` stops at step 3 with `InvalidArgumentError`: `loss : Tensor had NaN values`.")
    remedy = ("Check outside the XLA-compiled function: on its result in the eager caller "
              "(`tf.debugging.check_numerics(train_step(x, y), \"loss\")`), or in a plain `tf.function` "
              "that calls the XLA one. In TF1 graphs, use the check's result (or put the computation under "
              "`tf.control_dependencies([check])`).")
    flagged = (
        Example("""
import tensorflow as tf
@tf.function(jit_compile=True)
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x))
    loss = tf.debugging.check_numerics(loss, "loss")
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss
""", expect="""
6:12-6:53 `tf.debugging.check_numerics` does nothing under XLA in `train_step`
    help: check the result outside the XLA-compiled `train_step` (in the eager caller or a plain
        tf.function)
    note: it runs inside the XLA-compiled tf.function `train_step`: XLA compiles the check away, so a
        NaN/Inf passes silently
"""),
        Example("""
import tensorflow as tf
class Net(tf.keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(x, y, self(x, training=True))
        tf.debugging.check_numerics(loss, "loss")
        self.optimizer.apply_gradients(zip(tape.gradient(loss, self.trainable_variables), self.trainable_variables))
        return {"loss": loss}
model = Net()
model.compile(optimizer="adam", loss="mse", jit_compile=True)
""", expect="""
7:9-7:50 `tf.debugging.check_numerics` does nothing under XLA in `train_step`
    help: check the result outside the XLA-compiled `train_step` (in the eager caller or a plain
        tf.function)
    note: it runs inside the Keras `train_step` (compiled with XLA by `fit`:
        `compile(jit_compile=True)`): XLA compiles the check away, so a NaN/Inf passes silently
"""),
        Example("""
import functools
import tensorflow as tf
xla = functools.partial(tf.function, jit_compile=True)
def finite(t):
    return tf.debugging.assert_all_finite(t, "non-finite activations")
@xla
def forward(x):
    return finite(model(x))
""", expect="""
5:12-5:71 `tf.debugging.assert_all_finite` does nothing under XLA in `finite`
    help: check the result outside the XLA-compiled `forward` (in the eager caller or a plain
        tf.function)
    note: it runs inside `finite`, called from the XLA-compiled tf.function `forward` at line 8: XLA
        compiles the check away, so a NaN/Inf passes silently
"""),
        Example("""
import tensorflow as tf
tf.compat.v1.disable_eager_execution()
x = tf.compat.v1.placeholder(tf.float32, [None])
y = tf.math.log(x)
tf.compat.v1.check_numerics(y, "log")
with tf.compat.v1.Session() as sess:
    sess.run(y, feed_dict={x: [0.0]})
""", expect="""
5:1-5:38 the result of `tf.compat.v1.check_numerics` is discarded in `Session` graph code
    help: use its result, or wrap the computation in `tf.control_dependencies([check])`
    note: nothing fetches the check, so `Session.run` prunes it and it never runs
"""),
    )
    not_flagged = (
        Example("""
import tensorflow as tf
@tf.function
def train_step(x, y):
    loss = loss_fn(y, model(x))
    tf.debugging.check_numerics(loss, "loss")
    return loss
"""),
        Example("""
import tensorflow as tf
@tf.function(jit_compile=True)
def train_step(x, y):
    return loss_fn(y, model(x))
for x, y in dataset:
    loss = tf.debugging.check_numerics(train_step(x, y), "loss")
"""),
        Example("""
import tensorflow as tf
class Net(tf.keras.Model):
    def train_step(self, data):
        x, y = data
        loss = self.compute_loss(x, y, self(x, training=True))
        tf.debugging.check_numerics(loss, "loss")
        return {"loss": loss}
model = Net()
model.compile(optimizer="adam", loss="mse")
"""),
        Example("""
import tensorflow as tf
tf.compat.v1.disable_eager_execution()
x = tf.compat.v1.placeholder(tf.float32, [None])
y = tf.compat.v1.check_numerics(tf.math.log(x), "log")
with tf.compat.v1.Session() as sess:
    sess.run(y, feed_dict={x: [1.0]})
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.names.callee(node) not in _CHECKS:
            return
        tf = self.ctx.tf
        traced = tf.traced_chain(node, xla=True)
        check = self.ctx.snippet(node.func, 40)
        if traced is not None:
            _, compiled = traced
            inside = next((a for a in self.ctx.ancestors(node) if isinstance(a, cst.FunctionDef)), compiled)
            self.report(node, f"`{check}` does nothing under XLA in `{inside.name.value}`",
                        help=f"check the result outside the XLA-compiled `{compiled.name.value}` (in the eager "
                             "caller or a plain tf.function)",
                        note=f"it runs inside {tf.where(node, traced)}: XLA compiles the check away, so a NaN/Inf "
                             "passes silently")
        elif self._pruned_in_session(node):
            self.report(node, f"the result of `{check}` is discarded in `Session` graph code",
                        help="use its result, or wrap the computation in `tf.control_dependencies([check])`",
                        note="nothing fetches the check, so `Session.run` prunes it and it never runs")

    def _pruned_in_session(self, node: cst.Call) -> bool:
        ctx = self.ctx
        statement = ctx.parents.get(ctx.parents.get(node))
        discarded = isinstance(ctx.parents.get(node), cst.Expr) and isinstance(statement, cst.SimpleStatementLine)
        if not discarded or ctx.tf.traced_function_of(node) is not None:
            return False
        if any(isinstance(a, cst.With) and any(isinstance(i.item, cst.Call) and ctx.names.callee(i.item)
                                               in _CONTROL_DEPENDENCIES for i in a.items)
               for a in ctx.ancestors(node)):
            return False
        return self._runs_sessions

    @cached_property
    def _runs_sessions(self) -> bool:
        """The file makes a TF 1 `Session`."""
        return any(self.ctx.names.callee(c) in _SESSIONS for c in self.ctx.nodes(cst.Call))
