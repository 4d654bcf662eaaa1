"""LL602 custom-loop-without-loss-scaling: the rule, its documentation and its examples."""

from __future__ import annotations

from functools import cached_property

import libcst as cst

from lintloop.analysis.nodes import call_name, dotted, receiver
from lintloop.rule import Example, Rule
from lintloop.screen import Needs


class CustomLoopWithoutLossScaling(Rule):
    code = "LL602"
    name = "custom-loop-without-loss-scaling"
    description = "a custom loop under `mixed_float16` without loss scaling"
    frameworks = ("tf",)
    probe = "grad"
    needs = Needs(file=(("text:float16",),), statement=(("call:apply_gradients",), ("call:gradient",)))
    summary = ("A global Keras policy `mixed_float16` (any spelling, Keras 2 or 3) is set where a custom training "
               "step runs (in module code, in the function holding the step, in one that calls it, or in one that "
               "constructs the model class whose `train_step` it is; not in an unrelated function such as another "
               "test case), and the step — `tape.gradient(...)` then `optimizer.apply_gradients(...)` in one function, or a "
               "`train_step` override — does not scale its loss: (1) the optimizer is a plain Keras optimizer "
               "constructed in the file, not a `LossScaleOptimizer`; or (2) it is a `LossScaleOptimizer` (or the "
               "one `compile` wraps around `self.optimizer` in a `train_step` override) and the loss never goes "
               "through `optimizer.scale_loss(...)` (Keras 3) / `get_scaled_loss(...)` (Keras 2). Not flagged: "
               "`mixed_bfloat16`, `model.fit` with the default `train_step`, optimizers built elsewhere "
               "(arguments, project helpers), policies not written as a literal (`set_global_policy(config.dtype)`).")
    why = ("Under `mixed_float16` the forward and backward passes compute in float16, whose smallest value is "
           "6e-8: small gradients flush to zero. Loss scaling multiplies the loss (Keras 3: by 32,768, dynamic) "
           "before `tape.gradient` and divides the gradients by the same factor in `apply_gradients`. `fit` does "
           "both (`compile` wraps the optimizer in a `LossScaleOptimizer` itself); a custom loop must call "
           "`optimizer.scale_loss(loss)` inside the tape. A Keras 3 `LossScaleOptimizer` always divides: without "
           "`scale_loss` every update is 32,768 times too small. Keras 2's `get_scaled_loss` / "
           "`get_unscaled_gradients` do not exist in Keras 3.")
    symptom = ("No error and no warning. Measured (TF 2.21, Keras 3.15, CPU): with a plain SGD, 12,917 of 214,016 "
               "gradient entries were exactly zero against 958 in float32 or `mixed_bfloat16` (11,959 underflowed); "
               "with a `LossScaleOptimizer` and no `scale_loss` the bias update was 2.1e-06 instead of 0.069 — "
               "exactly 32,768 times smaller — the same in a `train_step` override under `compile`, while `fit` "
               "with the default `train_step` updated correctly. Keras 2 (tf-keras 2.21): a LossScaleOptimizer "
               "without `get_scaled_loss` applies the unscaled gradients unchanged (no scaling) and warns 'You "
               "forgot to call LossScaleOptimizer.get_scaled_loss() and LossScaleOptimizer.get_unscaled_gradients() "
               "before calling LossScaleOptimizer.apply_gradients()'; `compile` wraps the optimizer there too. LL602_bad.py prints 'step 1: loss "
               "1.006e-06, gradient entries exactly zero: 12917 of 214016' (LL602_good.py: 958); LL602_lso_bad.py "
               "'output-bias update / SGD update: 3.052e-05' (LL602_lso_good.py: 1). The probe reports 'tape.gradient "
               "returned 11959 of 214016 gradient entries as exactly 0 that are nonzero with the loss scaled by "
               "32,768' and 'LossScaleOptimizer.apply_gradients ran 59 times on gradients of tape.gradient; in 59 of "
               "them the loss had not gone through scale_loss'.")
    remedy = ("Keras 3: wrap the optimizer (`keras.mixed_precision.LossScaleOptimizer(opt)`) and differentiate "
              "`optimizer.scale_loss(loss)`, computed inside the tape; `apply_gradients` unscales. Keras 2: "
              "`scaled = opt.get_scaled_loss(loss)`, then `opt.get_unscaled_gradients(tape.gradient(scaled, vars))`. "
              "Or use `mixed_bfloat16`, which needs no scaling.")
    flagged = (
        Example("""
import tensorflow as tf
from tensorflow import keras
def main(args):
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = build_model(args)
    optimizer = keras.optimizers.Adam(1e-3)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for x, y in dataset:
        train_step(x, y)
""", expect="""
13:9-13:73 `optimizer` in this custom float16 training step is not a LossScaleOptimizer
    help: wrap it in `keras.mixed_precision.LossScaleOptimizer` and differentiate
        `optimizer.scale_loss(loss)`
    note: under the "mixed_float16" policy set at line 4, gradients computed in float16 underflow to
        zero (values below 6e-8) with no warning
"""),
        Example("""
import keras
import tensorflow as tf
def train(model, dataset):
    keras.mixed_precision.set_global_policy(keras.mixed_precision.Policy("mixed_float16"))
    opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))
    for x, y in dataset:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
""", expect="""
10:9-10:67 custom training step never scales the loss for LossScaleOptimizer `opt`
    help: differentiate `opt.scale_loss(loss)`, computed inside the tape
    note: under the "mixed_float16" policy set at line 4: a Keras 3 LossScaleOptimizer divides the
        gradients by the loss scale (32,768) in `apply_gradients` anyway, so every update is 32,768
        times too small, with no warning
"""),
        Example("""
import tensorflow as tf
import tf_keras
def run(model, dataset, steps):
    tf_keras.mixed_precision.set_global_policy("mixed_float16")
    opt = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.Adam())
    for step, (x, y) in enumerate(dataset.take(steps)):
        with tf.GradientTape() as tape:
            loss = tf_keras.losses.sparse_categorical_crossentropy(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
""", expect="""
10:9-10:67 custom training step never scales the loss for LossScaleOptimizer `opt`
    help: differentiate `opt.get_scaled_loss(loss)` and pass the gradients through
        `opt.get_unscaled_gradients(...)`
    note: under the "mixed_float16" policy set at line 4: the gradients are not scaled, so small ones
        underflow to zero in float16 as without loss scaling (Keras 2 warns 'You forgot to call
        LossScaleOptimizer.get_scaled_loss()')
"""),
    )
    not_flagged = (
        Example("""
import keras
import tensorflow as tf
keras.mixed_precision.set_global_policy("mixed_float16")
opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam())
for x, y in dataset:
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x))
        scaled_loss = opt.scale_loss(loss)
    grads = tape.gradient(scaled_loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
"""),
        Example("""
import tensorflow as tf
tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
optimizer = tf.keras.optimizers.Adam()
for x, y in dataset:
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
"""),
        Example("""
import tensorflow as tf
from tensorflow.keras import mixed_precision
mixed_precision.set_global_policy("mixed_float16")
model = build_model()
model.compile(optimizer=tf.keras.optimizers.Adam(), loss="sparse_categorical_crossentropy")
model.fit(train_ds, epochs=3)
"""),
        Example("""
import tf_keras
import tensorflow as tf
tf_keras.mixed_precision.set_global_policy("mixed_float16")
opt = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD())
@tf.function
def step(x):
    with tf.GradientTape() as tape:
        loss = model(x)
        scaled = opt.get_scaled_loss(loss)
    grads = opt.get_unscaled_gradients(tape.gradient(scaled, model.trainable_variables))
    opt.apply_gradients(zip(grads, model.trainable_variables))
"""),
        Example("""
import tensorflow as tf
tf.keras.mixed_precision.set_global_policy("mixed_float16")
def train(model, optimizer, dataset):
    for x, y in dataset:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
"""),
        Example("""
import tensorflow as tf
class BlockTest(tf.test.TestCase):
    def test_float16_output(self):
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        layer = Block(8)
        self.assertEqual(layer(tf.ones((2, 8))).dtype, tf.float16)
    def test_training_step(self):
        layer = Block(8)
        optimizer = tf.keras.optimizers.SGD(0.01)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(tf.ones((2, 8))))
        grads = tape.gradient(loss, layer.trainable_variables)
        optimizer.apply_gradients(zip(grads, layer.trainable_variables))
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if ctx.mixed_precision.float16_policy is None or call_name(node) != "apply_gradients" \
                or receiver(node) is None:
            return
        policy = ctx.mixed_precision.float16_policy_for(node)
        if policy is None:
            return
        scope = ctx.scope_of(node)
        if scope not in self._gradient_scopes:
            return  # not a GradientTape step
        optimizer = receiver(node)
        scales = ctx.mixed_precision.optimizer_scales_loss(optimizer, node)
        if scales is None and self._compiled_optimizer(optimizer, scope):
            scales = True  # `compile` wrapped it in a LossScaleOptimizer
        if scales is None or scales and ctx.mixed_precision.scales_loss(node):
            return
        name, short = ctx.snippet(optimizer, 40), ctx.snippet(optimizer, 30)
        where = f"the {policy.label} policy set at line {ctx.line_of(policy.call)}"
        built = ctx.flow.constructed_by(optimizer, node)
        major = ctx.tf.keras_major(built[0]) if built else policy.keras_major
        if not scales:
            scaled = (f"`{name}.scale_loss(loss)`" if major >= 3 else
                      "`opt.get_scaled_loss(loss)`, then unscale with `opt.get_unscaled_gradients(grads)`")
            self.report(node, f"`{short}` in this custom float16 training step is not a LossScaleOptimizer",
                        help=f"wrap it in `keras.mixed_precision.LossScaleOptimizer` and differentiate {scaled}",
                        note=f"under {where}, gradients computed in float16 underflow to zero (values below 6e-8) "
                             "with no warning")
            return
        if major >= 3:
            consequence = ("a Keras 3 LossScaleOptimizer divides the gradients by the loss scale (32,768) in "
                           "`apply_gradients` anyway, so every update is 32,768 times too small, with no warning")
            fix = f"differentiate `{name}.scale_loss(loss)`, computed inside the tape"
        else:
            consequence = ("the gradients are not scaled, so small ones underflow to zero in float16 as without "
                           "loss scaling (Keras 2 warns 'You forgot to call LossScaleOptimizer.get_scaled_loss()')")
            fix = (f"differentiate `{name}.get_scaled_loss(loss)` and pass the gradients through "
                   f"`{name}.get_unscaled_gradients(...)`")
        wrapped = "wrapped by `compile` " if built is None else ""
        self.report(node, f"custom training step never scales the loss for LossScaleOptimizer `{short}`",
                    help=fix, note=f"{wrapped}under {where}: {consequence}")

    @cached_property
    def _gradient_scopes(self) -> set[cst.CSTNode]:
        """The scopes that take a tape's `gradient`."""
        return {self.ctx.scope_of(call) for call, _ in self.ctx.tf.gradient_calls}

    def _compiled_optimizer(self, optimizer: cst.BaseExpression, scope: cst.CSTNode) -> bool:
        """`self.optimizer` in a `train_step` override, never assigned in the file: the optimizer
        `compile` set, which it wraps in a LossScaleOptimizer under `mixed_float16`."""
        return (isinstance(scope, cst.FunctionDef) and scope.name.value == "train_step"
                and dotted(optimizer) == "self.optimizer"
                and not self.ctx.bindings_anywhere("self.optimizer"))
