"""LL402 loss-reduction-under-strategy: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.nodes import argument, call_name, dotted, dotted_names_in, keyword_arg, names_in, receiver, string_value
from lintloop.analysis.losses import is_loss_function
from lintloop.rule import Example, Rule, RuleOption
from lintloop.screen import Needs


def _reduction(ctor: cst.Call) -> str:
    """A Keras loss object's reduction, lower-cased: 'default', 'none', 'sum', 'auto', 'sum_over_batch_size'."""
    value = keyword_arg(ctor, "reduction")
    if value is None:
        return "default"
    text = string_value(value) or (dotted(value) or "").rsplit(".", 1)[-1]
    return text.lower() or "unknown"


def _reciprocal_of(expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """`d` for `1 / d` or `1.0 / d`."""
    if (isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Divide)
            and isinstance(expr.left, (cst.Integer, cst.Float)) and float(expr.left.value) == 1.0):
        return expr.right
    return None


def _divisor_of(node: cst.CSTNode | None, is_value) -> list[cst.BaseExpression]:
    """The divisor, if `node` divides the value (`value / d`, `value * (1 / d)`, `value /= d`, `value *= 1/d`)."""
    if isinstance(node, cst.BinaryOperation) and is_value(node.left):
        if isinstance(node.operator, cst.Divide):
            return [node.right]
        if isinstance(node.operator, cst.Multiply) and _reciprocal_of(node.right) is not None:
            return [_reciprocal_of(node.right)]
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply) and is_value(node.right):
        return [d] if (d := _reciprocal_of(node.left)) is not None else []
    if isinstance(node, cst.AugAssign) and is_value(node.target):
        if isinstance(node.operator, cst.DivideAssign):
            return [node.value]
        if isinstance(node.operator, cst.MultiplyAssign) and _reciprocal_of(node.value) is not None:
            return [_reciprocal_of(node.value)]
    return []


def _mentions_replicas(expr: cst.CSTNode) -> bool:
    return any(name.endswith("num_replicas_in_sync") for name in dotted_names_in(expr))



# The remedy for a loss object whose reduction does not work under a strategy.
_PER_EXAMPLE_REMEDY = "use reduction `none` + `tf.nn.compute_average_loss`"


class LossReductionUnderStrategy(Rule):
    code = "LL402"
    name = "loss-reduction-under-strategy"
    description = "a per-replica mean loss under a distribution strategy"
    frameworks = ("tf",)
    # The step functions, and what they use, are selected with the `strategy.run` call.
    needs = Needs(file=(("text:Strategy",),), statement=(("call:run",),))
    probe = "effect/error"
    summary = ("Inside the function passed to `strategy.run`: `tf.reduce_mean` of per-example losses (a loss "
               "object with reduction `none`, or a `keras.losses.*` function) — gradients scaled by the "
               "number of replicas; a loss object with reduction `sum` whose result is not divided by the "
               "global batch size; an explicit `AUTO` reduction; on Keras 2 (`tf_keras`, "
               "`TF_USE_LEGACY_KERAS`, or option `keras = 2`) a loss object with the default / `AUTO` / "
               "`SUM_OVER_BATCH_SIZE` reduction.")
    why = ("Each replica sees 1/N of the global batch and the strategy sums the replicas' gradients. A "
           "per-replica mean therefore gives N times the gradient of the global mean. Keras 3 loss objects "
           "with the default (`sum_over_batch_size`) reduction already divide by the replica count — they "
           "are correct and not flagged; Keras 2 refuses them.")
    symptom = ("LL402_bad.py (2 replicas, SGD): the first update is 2.00 times the "
               "single-device update over the same global batch (the fixed program: 1.00). "
               "With 2 replicas the gradients are 2x too large (`reduce_mean` of per-example losses, or "
               "reduction none + `reduce_mean`); with `reduction=\"sum\"` undivided, batch-size times too large. "
               "Keras 2 raises `Please use tf.keras.losses.Reduction.SUM or tf.keras.losses.Reduction.NONE ...` "
               "for the default reduction under a strategy.")
    remedy = ("Use reduction `none` and `tf.nn.compute_average_loss(per_example_loss, "
              "global_batch_size=GLOBAL_BATCH_SIZE)`, or (Keras 3) the default reduction.")
    options = {"keras": RuleOption(None, (None, 2, 3), "Keras major version; default: detected per file (3 unless tf_keras / TF_USE_LEGACY_KERAS)")}
    flagged = (
        Example("""
import tensorflow as tf
def replica_step(model, optimizer, images, labels):
    with tf.GradientTape() as tape:
        logits = model(images, training=True)
        loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss
@tf.function
def run_step(strategy, model, optimizer, images, labels):
    return strategy.run(replica_step, args=(model, optimizer, images, labels))
def fit(strategy, model, optimizer, dataset, epochs):
    for _ in range(epochs):
        for images, labels in strategy.experimental_distribute_dataset(dataset):
            run_step(strategy, model, optimizer, images, labels)
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = build_model()
    optimizer = tf.keras.optimizers.Adam()
fit(strategy, model, optimizer, train_ds, 5)
""", expect="""
5:16-5:113 per-replica mean of per-example losses inside `strategy.run`
    help: use `tf.nn.compute_average_loss(per_example_loss, global_batch_size=...)`
    note: the strategy sums the replicas' gradients, so they come out N times too large (N = replicas)
"""),
        Example("""
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    loss_object = tf.keras.losses.SparseCategoricalCrossentropy(reduction="none")
def step(x, y):
    with tf.GradientTape() as tape:
        per_example = loss_object(y, model(x))
        loss = tf.reduce_mean(per_example)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
strategy.run(step, args=(x, y))
""", expect="""
8:16-8:43 per-replica mean of per-example losses inside `strategy.run`
    help: use `tf.nn.compute_average_loss(per_example_loss, global_batch_size=...)`
    note: the strategy sums the replicas' gradients, so they come out N times too large (N = replicas)
"""),
        Example("""
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
def compute_loss(y, pred):
    return tf.reduce_mean(tf.keras.losses.MSE(y, pred))
def step(x, y):
    with tf.GradientTape() as tape:
        loss = compute_loss(y, model(x))
    grads = tape.gradient(loss, model.trainable_variables)
strategy.run(step, args=(x, y))
""", expect="""
4:12-4:56 per-replica mean of per-example losses inside `strategy.run`
    help: use `tf.nn.compute_average_loss(per_example_loss, global_batch_size=...)`
    note: the strategy sums the replicas' gradients, so they come out N times too large (N = replicas)
"""),
        Example("""
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
loss_fn = tf.keras.losses.MeanSquaredError(reduction=tf.keras.losses.Reduction.SUM)
def step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x))
    return tape.gradient(loss, model.trainable_variables)
strategy.run(step, args=(x, y))
""", expect="""
6:16-6:36 loss object with reduction `sum` inside `strategy.run`, not divided by the global batch size
    help: divide the result by the global batch size, or use reduction `none` +
        `tf.nn.compute_average_loss`
    note: gradients are batch-size times too large
"""),
        Example("""
import os
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()
def step(x, y):
    return loss_fn(y, model(x))
strategy.run(step, args=(x, y))
""", expect="""
7:12-7:32 Keras 2 loss object with the default (`SUM_OVER_BATCH_SIZE`) reduction inside `strategy.run`
    help: use reduction `none` + `tf.nn.compute_average_loss`
    note: Keras 2 raises 'Please use Reduction.SUM or Reduction.NONE' under a strategy
"""),
    )
    not_flagged = (
        Example("""
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
loss_object = tf.keras.losses.SparseCategoricalCrossentropy(reduction="none")
def step(x, y):
    per_example = loss_object(y, model(x))
    return tf.nn.compute_average_loss(per_example, global_batch_size=64)
strategy.run(step, args=(x, y))
"""),
        Example("""
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()
def step(x, y):
    return loss_fn(y, model(x))
strategy.run(step, args=(x, y))
"""),
        Example("""
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
loss_fn = tf.keras.losses.MeanSquaredError(reduction="sum")
def step(x, y):
    loss = loss_fn(y, model(x)) / GLOBAL_BATCH_SIZE
    return loss
strategy.run(step, args=(x, y))
"""),
        Example("""
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
def step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.keras.losses.mse(y, model(x)))
        scaled = loss / strategy.num_replicas_in_sync
    return tape.gradient(scaled, model.trainable_variables)
def evaluate(x, y):
    return tf.reduce_mean(tf.keras.losses.MSE(y, model(x)))
strategy.run(step, args=(x, y))
strategy.run(evaluate, args=(x, y))
"""),
        Example("""
import tensorflow as tf
import tf_keras
strategy = tf.distribute.MirroredStrategy()
loss_fn = tf.keras.losses.MeanSquaredError()
summed = tf.keras.losses.MeanSquaredError(reduction="sum")
def step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x))
        total = summed(y, model(x))
        total *= (1.0 / GLOBAL_BATCH_SIZE)
    return tape.gradient(loss + total, model.trainable_variables)
strategy.run(step, args=(x, y))
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        steps = self.ctx.strategies.step_functions
        if not steps or not any(a in steps for a in self.ctx.ancestors(node)):
            return
        name = self.ctx.names.callee(node)
        if name in ("tensorflow.reduce_mean", "tensorflow.math.reduce_mean", "keras.ops.mean") or (
                name is None and call_name(node) == "mean" and receiver(node) is not None):
            averaged = argument(node, 0, "input_tensor") if name else receiver(node)
            if (averaged is not None and self._per_example(averaged, node) and self.ctx.training.is_differentiated(node)
                    and not any(_mentions_replicas(d) for d in self._divisors(node))):
                self.report(node, "per-replica mean of per-example losses inside `strategy.run`",
                            help="use `tf.nn.compute_average_loss(per_example_loss, global_batch_size=...)`",
                            note="the strategy sums the replicas' gradients, so they come out N times too large "
                                 "(N = replicas)")
            return
        made = self.ctx.losses.loss_object(node.func, node)
        if made is None or not made[1].startswith("keras."):
            return
        reduction = _reduction(made[0])
        if reduction == "auto":
            self.report(node, "loss object with an explicit `AUTO` reduction called inside `strategy.run`",
                        help=_PER_EXAMPLE_REMEDY,
                        note="Keras 2 raises under a strategy and Keras 3 rejects the value")
        elif reduction == "sum" and self.ctx.training.is_differentiated(node) and not self._divisors(node):
            self.report(node, "loss object with reduction `sum` inside `strategy.run`, not divided by the global "
                              "batch size",
                        help="divide the result by the global batch size, or " + _PER_EXAMPLE_REMEDY,
                        note="gradients are batch-size times too large")
        elif reduction in ("default", "sum_over_batch_size") and self._keras_major(made[0]) == 2:
            self.report(node, "Keras 2 loss object with the default (`SUM_OVER_BATCH_SIZE`) reduction inside "
                              "`strategy.run`",
                        help=_PER_EXAMPLE_REMEDY,
                        note="Keras 2 raises 'Please use Reduction.SUM or Reduction.NONE' under a strategy")

    def _keras_major(self, constructor: cst.Call) -> int:
        return self.settings["keras"] or self.ctx.tf.keras_major(constructor)

    def _per_example(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        value = self.ctx.flow.resolve_value(expr, at)
        if not isinstance(value, cst.Call):
            return False
        name = self.ctx.names.callee(value)
        if name and name.startswith("keras.losses.") and is_loss_function(name.rsplit(".", 1)[-1]):
            return True
        made = self.ctx.losses.loss_object(value.func, value)
        return made is not None and made[1].startswith("keras.") and _reduction(made[0]) == "none"

    def _divisors(self, call: cst.Call) -> list[cst.BaseExpression]:
        """What the value of `call` is divided by in its function: `x / d`, `x * (1 / d)`, `x /= d`,
        `x *= 1 / d`, `compute_average_loss(x, ...)`."""
        divisors = []
        parent = self.ctx.parents.get(call)
        divisors += _divisor_of(parent, lambda e: e is call)
        holder = dotted(parent.targets[0].target) if isinstance(parent, cst.Assign) else None
        function = self.ctx.scope_of(call)
        if holder is None or not isinstance(function, cst.FunctionDef):
            return divisors
        is_holder = lambda e: dotted(e) == holder  # noqa: E731
        for node in (*self.ctx.nodes_in_scope(cst.BinaryOperation, function).nodes,
                     *self.ctx.nodes_in_scope(cst.AugAssign, function).nodes):
            divisors += _divisor_of(node, is_holder)
        divisors += [c for c in self.ctx.definitions.calls_in(function)
                     if self.ctx.names.callee(c) == "tensorflow.nn.compute_average_loss" and holder in names_in(c)]
        return divisors
