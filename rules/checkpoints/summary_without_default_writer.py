"""LL802 summary-without-default-writer: the rule, its documentation and its examples."""

from __future__ import annotations

from functools import cached_property

import libcst as cst

from lintloop.analysis.nodes import call_name, dotted, receiver
from lintloop.rule import Example, Rule
from lintloop.screen import Needs

# The TF 2 summary ops that write to the default writer and do nothing (return False) without one.
# `tensorflow.compat.v2.summary.*` is canonicalised to these; `tf.compat.v1.summary.*` (graph-mode
# summary protos) is a different API and not listed.
_SUMMARY_OPS = {f"tensorflow.summary.{op}" for op in ("scalar", "histogram", "image", "text", "audio", "write")}
# `.as_default()` of these is a graph or a session, not a summary writer.
_NOT_WRITERS = {"tensorflow.Graph", "tensorflow.compat.v1.Graph", "tensorflow.compat.v1.get_default_graph",
                "tensorflow.compat.v1.Session", "tensorflow.compat.v1.InteractiveSession", "tensorflow.get_default_graph"}
# Names TF 2 does not have (AttributeError there): a file calling them is TF 1.x code, whose `tf.summary.scalar`
# builds a graph-mode summary proto that `Session.run` fetches and a `FileWriter.add_summary` writes; no default
# writer exists in TF 1. (`tf.compat.v1.summary.merge_all` is not listed: TF 2's `tf.summary.*` ops in a
# compat.v1 graph still need a default writer; measured, TF 2.21: `merge_all()` is None, the op returns False.)
_TF1_ONLY = {"tensorflow.summary.merge_all", "tensorflow.summary.merge", "tensorflow.summary.FileWriter",
             "tensorflow.summary.FileWriterCache", "tensorflow.Session", "tensorflow.InteractiveSession"}


class SummaryWithoutDefaultWriter(Rule):
    code = "LL802"
    name = "summary-without-default-writer"
    description = "a tf.summary call without a default writer (records nothing)"
    frameworks = ("tf",)
    probe = "effect"
    # A finding is a call of one of `_SUMMARY_OPS`.
    needs = Needs(file=(("text:summary",), tuple(f"callee:{op}" for op in sorted(_SUMMARY_OPS))),
                  # `set_as_default()` and `as_default()` anywhere in the file clear findings: their units are parsed.
                  statement=(("name:summary", "call:scalar", "call:histogram", "call:set_as_default",
                              "call:as_default", "call:Session", "call:InteractiveSession"),))
    summary = ("`tf.summary.scalar/histogram/image/text/audio/write(...)` (any spelling, `tf.compat.v2.summary` "
               "too) that runs with no default summary writer: no `with writer.as_default():` around it, "
               "lexically or around a call of its function in the same file (no visible call path has one), "
               "and no `writer.set_as_default()` in the file. A function with no call site in the file (a "
               "Keras callback method, a helper called from another module) is not flagged: its caller may "
               "hold the writer; nor is a file that enters a writer some other way (`stack.enter_context("
               "writer.as_default())`). Every visible call path must lack the writer (a helper called under a "
               "writer from one place is not flagged for another call). TF 1.x code (a file calling "
               "`tf.summary.merge_all/merge/FileWriter` or `tf.Session`, names TF 2 lacks) is not flagged: its "
               "summary ops are fetched by `Session.run` and written by `FileWriter.add_summary`.")
    why = ("TF 2 summary ops write to the thread's default writer. Creating a writer with "
           "`tf.summary.create_file_writer(logdir)` does not make it the default: without "
           "`writer.as_default()` (or `set_as_default()`) every summary op is a no-op that returns False.")
    symptom = ("Nothing fails and nothing is logged: no warning, an empty event file, an empty TensorBoard. "
               "LL802_bad.py creates a file writer and logs its loss every step with "
               "`tf.summary.write`: `summary values written: 0` after 20 steps (each call returned False); "
               "LL802_good.py, inside `with writer.as_default():`, writes 20. (The fixtures call `tf.summary.write`, the "
               "op `scalar`/`histogram`/... end in: those need TensorBoard, which tensorflow-cpu 2.21 does not "
               "install, and raise `TBNotInstalledError` without it.)")
    remedy = ("Wrap the logging code (or the training loop that calls it) in `with writer.as_default():` "
              "(`with writer.as_default(step=step):` sets the default step too), or call "
              "`writer.set_as_default()` once.")
    flagged = (
        Example("""
import tensorflow as tf
writer = tf.summary.create_file_writer("logs")
for step, (x, y) in enumerate(dataset):
    loss = train_step(x, y)
    tf.summary.scalar("loss", loss, step=step)
""", expect="""
5:5-5:47 `tf.summary.scalar(...)` runs with no default summary writer
    help: wrap the logging (or the loop that calls it) in `with writer.as_default():`
    note: no `with writer.as_default():` around it and no `set_as_default()` in the file: it writes
        nothing and returns False
"""),
        Example("""
import tensorflow as tf
def log_metrics(metrics, step):
    for name, value in metrics.items():
        tf.summary.scalar(name, value, step=step)
def train(model, dataset, epochs):
    summary_writer = tf.summary.create_file_writer("logs/train")
    for epoch in range(epochs):
        metrics = run_epoch(model, dataset)
        log_metrics(metrics, epoch)
train(model, dataset, 10)
""", expect="""
4:9-4:50 `tf.summary.scalar(...)` in `log_metrics` runs with no default summary writer
    help: wrap the logging (or the loop that calls it) in `with writer.as_default():`
    note: `log_metrics` is called from `train` at line 9, called from module code at line 10; no `with
        writer.as_default():` is around it or these calls and no `set_as_default()` in the file: it
        writes nothing and returns False
"""),
        Example("""
import tensorflow.compat.v2 as tf
from tensorflow import summary
def train(steps):
    for step in range(steps):
        images, loss = train_step()
        summary.image("samples", images, step=step, max_outputs=4)
        tf.summary.histogram("loss", loss, step=step)
if __name__ == "__main__":
    train(1000)
""", expect="""
6:9-6:67 `summary.image(...)` in `train` runs with no default summary writer
    help: wrap the logging (or the loop that calls it) in `with writer.as_default():`
    note: `train` is called from module code at line 9; no `with writer.as_default():` is around it or
        these calls and no `set_as_default()` in the file: it writes nothing and returns False
7:9-7:54 `tf.summary.histogram(...)` in `train` runs with no default summary writer
    help: wrap the logging (or the loop that calls it) in `with writer.as_default():`
    note: `train` is called from module code at line 9; no `with writer.as_default():` is around it or
        these calls and no `set_as_default()` in the file: it writes nothing and returns False
"""),
        Example("""
import tensorflow as tf
tf.compat.v1.disable_eager_execution()
x = tf.compat.v1.placeholder(tf.float32, [])
tf.summary.scalar("loss", x, step=0)
merged = tf.compat.v1.summary.merge_all()
with tf.compat.v1.Session() as sess:
    writer = tf.compat.v1.summary.FileWriter("logs")
    writer.add_summary(sess.run(merged, {x: 1.0}), 0)
""", expect="""
4:1-4:37 `tf.summary.scalar(...)` runs with no default summary writer
    help: wrap the logging (or the loop that calls it) in `with writer.as_default():`
    note: no `with writer.as_default():` around it and no `set_as_default()` in the file: it writes
        nothing and returns False
"""),
    )
    not_flagged = (
        Example("""
import tensorflow as tf
writer = tf.summary.create_file_writer("logs")
with writer.as_default():
    for step, (x, y) in enumerate(dataset):
        loss = train_step(x, y)
        tf.summary.scalar("loss", loss, step=step)
"""),
        Example("""
import tensorflow as tf
def log_metrics(metrics, step):
    for name, value in metrics.items():
        tf.summary.scalar(name, value, step=step)
def train(model, dataset, epochs):
    summary_writer = tf.summary.create_file_writer("logs/train")
    with summary_writer.as_default(), tf.summary.record_if(True):
        for epoch in range(epochs):
            log_metrics(run_epoch(model, dataset), epoch)
"""),
        Example("""
import tensorflow as tf
class SampleLogger(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        tf.summary.image("samples", self.model(self.noise), step=epoch)
"""),
        Example("""
import tensorflow as tf
file_writer = tf.summary.create_file_writer(logdir + "/metrics")
file_writer.set_as_default()
def lr_schedule(epoch):
    lr = 0.2 if epoch < 10 else 0.02
    tf.summary.scalar("learning rate", data=lr, step=epoch)
    return lr
for epoch in range(20):
    lr_schedule(epoch)
"""),
        Example("""
import tensorflow as tf
def train(steps, logdir):
    with tf.summary.create_file_writer(logdir).as_default(step=0):
        for step in range(steps):
            tf.summary.scalar("loss", train_step(), step=step)
"""),
        Example("""
import tensorflow as tf
def summarize(name, value, step):
    tf.summary.scalar(name, value, step=step)
"""),
        Example("""
import contextlib
import tensorflow as tf
def train(steps, logdir):
    with contextlib.ExitStack() as stack:
        stack.enter_context(tf.summary.create_file_writer(logdir).as_default())
        for step in range(steps):
            tf.summary.scalar("loss", train_step(), step=step)
train(100, "logs")
"""),
        Example("""
import tensorflow as tf
x = tf.placeholder(tf.float32, [None, 1])
loss = tf.reduce_mean(x ** 2)
train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
tf.summary.scalar("loss", loss)
merged = tf.summary.merge_all()
with tf.Session() as sess:
    writer = tf.summary.FileWriter("/tmp/logs", graph=tf.get_default_graph())
    for step in range(100):
        _, s = sess.run([train_op, merged], feed_dict={x: [[1.0]]})
        writer.add_summary(s, step)
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.names.callee(node) not in _SUMMARY_OPS or self._writer_set_elsewhere or self._tf1_code:
            return
        calls = self.ctx.calls
        if calls.through_callers(node, self._writer_or_unseen_caller, every=False) is not None:
            return  # some path runs it under a writer, or reaches code whose callers are not in this file
        chain = calls.through_callers(node, lambda n: self._function_of(n) is None, every=False)
        op = f"`{self.ctx.snippet(node.func, 30)}(...)`"
        wrap = "wrap the logging (or the loop that calls it) in `with writer.as_default():`"
        if chain:
            function = self._function_of(node).name.value
            self.report(node, f"{op} in `{function}` runs with no default summary writer", help=wrap,
                        note=f"`{function}` is {calls.describe_chain(chain, 'module code').removeprefix(', ')}; "
                             "no `with writer.as_default():` is around it or these calls and no `set_as_default()` "
                             "in the file: it writes nothing and returns False")
            return
        self.report(node, f"{op} runs with no default summary writer", help=wrap,
                    note="no `with writer.as_default():` around it and no `set_as_default()` in the file: it writes "
                         "nothing and returns False")

    def _function_of(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        return next((a for a in self.ctx.ancestors(node) if isinstance(a, cst.FunctionDef)), None)

    def _writer_or_unseen_caller(self, node: cst.CSTNode) -> bool:
        """Under `with <writer>.as_default():`, or in a function this file never calls."""
        function = self._function_of(node)
        if function is not None and not self.ctx.calls.call_sites.get(function):
            return True
        return any(self._is_writer_default(item.item) for block in self.ctx.ancestors(node)
                   if isinstance(block, cst.With) and self.ctx.is_inside(node, block.body) for item in block.items)

    def _is_writer_default(self, expr: cst.BaseExpression) -> bool:
        """`writer.as_default(...)` of anything that is not a graph or a session."""
        if not (isinstance(expr, cst.Call) and call_name(expr) == "as_default" and receiver(expr) is not None):
            return False
        owner = receiver(expr)
        made = self.ctx.flow.constructed_by(owner, expr)
        callee = made[1] if made else self.ctx.names.callee(owner) if isinstance(owner, cst.Call) else None
        label = (dotted(owner) or "").lower()
        return callee not in _NOT_WRITERS and "graph" not in label and "sess" not in label

    @cached_property
    def _tf1_code(self) -> bool:
        """The file calls a TF 1.x-only name: its `tf.summary.*` are TF 1 graph ops, not TF 2 writer ops."""
        return any(self.ctx.names.callee(call) in _TF1_ONLY for call in self.ctx.nodes(cst.Call))

    @cached_property
    def _writer_set_elsewhere(self) -> bool:
        """`writer.set_as_default()`, or a writer's `as_default()` entered some other way than a `with`
        (`stack.enter_context(writer.as_default())`): the default writer is not a lexical question then."""
        for call in self.ctx.nodes(cst.Call):
            if call_name(call) == "set_as_default":
                return True
            if self._is_writer_default(call) and not isinstance(self.ctx.parents.get(call), cst.WithItem):
                return True
        return False
