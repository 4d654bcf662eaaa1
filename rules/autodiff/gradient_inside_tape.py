"""LL104 gradient-inside-tape: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.with_blocks import WithContext
from lintloop.analysis.nodes import call_name, keyword_arg, receiver
from lintloop.rule import Example, Rule
from lintloop.screen import Needs


class GradientInsideTape(Rule):
    code = "LL104"
    name = "gradient-inside-tape"
    description = "a gradient taken inside a persistent tape's `with` block"
    frameworks = ("tf",)
    kind = "perf"
    needs = Needs(file=(("text:GradientTape",),), statement=(("call:gradient",),))
    summary = ("`t.gradient(...)` called inside the `with` block of a persistent tape `t` "
               "(`tf.GradientTape(persistent=True)`), or while another tape opened around it is still "
               "recording (`with tf.GradientTape() as g, tf.GradientTape() as d:` then `d.gradient(...)` in "
               "the block), when no higher-order gradient is taken of its result. Not flagged: a "
               "non-persistent tape's own `gradient` in its block with no other tape recording, nested "
               "tapes that differentiate the inner gradient on purpose (gradient penalty, Hessian-vector "
               "products, Hessians: a tape's `gradient`, `jacobian` or `batch_jacobian` of the result, also "
               "through a tuple unpack or a comprehension over the gradients), and calls under "
               "`with t.stop_recording():`.")
    why = ("A recording tape records every operation run in its block, the gradient computation "
           "included. A non-persistent tape stops recording when its own `gradient` is called, so nothing "
           "extra is kept; a persistent tape keeps recording, and so does any other tape still open around "
           "the call: the backward pass is recorded as forward ops, with the intermediate tensors it needs "
           "kept alive until that tape is released. That is only useful to differentiate the gradient "
           "again.")
    symptom = ("No wrong result, only extra work. Running LL104_bad.py (a persistent tape, two "
               "heads) TF 2.21 logs twice in 60 steps (not once per step): `WARNING:tensorflow:"
               "Calling GradientTape.gradient on a persistent tape inside its context is significantly less "
               "efficient than calling it outside the context (it causes the gradient ops to be recorded on "
               "the tape, leading to increased CPU and memory usage). Only call GradientTape.gradient inside "
               "the context if you actually want to trace the gradient in order to compute higher order "
               "derivatives.` LL104_good.py (the calls after the block) prints the same losses and no warning. Another "
               "tape recording the computation warns nothing (measured: the outer tape records the inner "
               "gradient and can differentiate it, 6.0 for d(d(w*w*x)/dw)/dw at x=3).")
    remedy = ("Dedent the `gradient` calls out of the `with` block (`with tf.GradientTape() as g, "
              "tf.GradientTape() as d: ...` then `g.gradient(...)` and `d.gradient(...)` after it), or wrap "
              "the call in `with t.stop_recording():` when it must stay inside.")
    flagged = (
        Example("""
import tensorflow as tf
def train_step(model, optimizer, x, y):
    with tf.GradientTape(persistent=True) as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
""", expect="""
5:17-5:63 `tape.gradient(...)` runs inside the `with` block of persistent tape `tape`, which records it
    help: call it after the `with` block, or under `with tape.stop_recording():`
    note: the tape records the whole gradient computation (TensorFlow warns: more CPU and memory), and
        no higher-order gradient is taken of it
"""),
        Example("""
import tensorflow as tf
@tf.function
def train_step(images):
    noise = tf.random.normal([BATCH_SIZE, noise_dim])
    with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
        generated_images = generator(noise, training=True)
        real_output = discriminator(images, training=True)
        fake_output = discriminator(generated_images, training=True)
        gen_loss = generator_loss(fake_output)
        disc_loss = discriminator_loss(real_output, fake_output)
        gradients_of_generator = gen_tape.gradient(gen_loss, generator.trainable_variables)
        gradients_of_discriminator = disc_tape.gradient(disc_loss, discriminator.trainable_variables)
    generator_optimizer.apply_gradients(zip(gradients_of_generator, generator.trainable_variables))
    discriminator_optimizer.apply_gradients(zip(gradients_of_discriminator, discriminator.trainable_variables))
""", expect="""
11:34-11:92 `gen_tape.gradient(...)` runs while tape `disc_tape` (opened at line 5) is still recording
    help: call it after the `with` block
    note: `disc_tape` records the whole gradient computation and keeps its tensors alive, and no
        higher-order gradient is taken of it
"""),
        Example("""
from tensorflow import GradientTape
class Trainer:
    def step(self, batch):
        tape = GradientTape(persistent=True)
        with tape:
            actor_loss = self.actor_loss(batch)
            critic_loss = self.critic_loss(batch)
            actor_grads = tape.gradient(actor_loss, self.actor.trainable_variables)
            critic_grads = tape.gradient(critic_loss, self.critic.trainable_variables)
        del tape
        self.actor_opt.apply_gradients(zip(actor_grads, self.actor.trainable_variables))
        self.critic_opt.apply_gradients(zip(critic_grads, self.critic.trainable_variables))
""", expect="""
8:27-8:84 `tape.gradient(...)` runs inside the `with` block of persistent tape `tape`, which records it
    help: call it after the `with` block, or under `with tape.stop_recording():`
    note: the tape records the whole gradient computation (TensorFlow warns: more CPU and memory), and
        no higher-order gradient is taken of it
9:28-9:87 `tape.gradient(...)` runs inside the `with` block of persistent tape `tape`, which records it
    help: call it after the `with` block, or under `with tape.stop_recording():`
    note: the tape records the whole gradient computation (TensorFlow warns: more CPU and memory), and
        no higher-order gradient is taken of it
"""),
        Example("""
import tensorflow as tf
with tf.GradientTape() as outer:
    with tf.GradientTape() as inner:
        logits = model(x)
        loss = loss_fn(y, logits)
    grads = inner.gradient(loss, model.trainable_variables)
    aux_loss = regularizer(model)
outer_grads = outer.gradient(aux_loss, model.trainable_variables)
""", expect="""
6:13-6:60 `inner.gradient(...)` runs while tape `outer` (opened at line 2) is still recording
    help: call it after the `with` block
    note: `outer` records the whole gradient computation and keeps its tensors alive, and no
        higher-order gradient is taken of it
"""),
    )
    not_flagged = (
        Example("""
import tensorflow as tf
def train_step(model, optimizer, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
"""),
        Example("""
import tensorflow as tf
def gradient_penalty(critic, real, fake):
    alpha = tf.random.uniform([tf.shape(real)[0], 1, 1, 1])
    interpolated = real + alpha * (fake - real)
    with tf.GradientTape() as gp_tape:
        gp_tape.watch(interpolated)
        pred = critic(interpolated, training=True)
    grads = gp_tape.gradient(pred, [interpolated])[0]
    norm = tf.sqrt(tf.reduce_sum(tf.square(grads), axis=[1, 2, 3]))
    return tf.reduce_mean((norm - 1.0) ** 2)
def train_critic(critic, opt, real, fake):
    with tf.GradientTape() as tape:
        gp = gradient_penalty(critic, real, fake)
        loss = tf.reduce_mean(critic(fake)) - tf.reduce_mean(critic(real)) + 10.0 * gp
    opt.apply_gradients(zip(tape.gradient(loss, critic.trainable_variables), critic.trainable_variables))
"""),
        Example("""
import tensorflow as tf
def hessian_vector_product(loss_fn, variables, vector):
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            loss = loss_fn()
        grads = inner.gradient(loss, variables)
        dot = tf.add_n([tf.reduce_sum(g * v) for g, v in zip(grads, vector)])
    return outer.gradient(dot, variables)
"""),
        Example("""
import tensorflow as tf
with tf.GradientTape(persistent=True) as tape:
    y = f(x)
    dy = tape.gradient(y, x)
d2y = tape.gradient(dy, x)
"""),
        Example("""
import tensorflow as tf
x, y = tf.Variable(3.0), tf.Variable(4.0)
with tf.GradientTape(persistent=True) as tape:
    f = x * x * y
    df_dx, df_dy = tape.gradient(f, [x, y])
d2f_dx2, _ = tape.gradient(df_dx, [x, y])
del tape
"""),
        Example("""
import tensorflow as tf
with tf.GradientTape(persistent=True) as outer:
    with tf.GradientTape() as inner:
        z = w1 * w1 * w2
    jacobians = inner.gradient(z, [w1, w2])
hessians = [outer.gradient(j, [w1, w2]) for j in jacobians]
del outer
"""),
        Example("""
import tensorflow as tf
with tf.GradientTape() as t2:
    with tf.GradientTape() as t1:
        loss = tf.reduce_mean(layer(x) ** 2)
    g = t1.gradient(loss, layer.kernel)
h = t2.jacobian(g, layer.kernel)
"""),
        Example("""
import tensorflow as tf
with tf.GradientTape(persistent=True) as tape:
    loss = compute_loss(model, x)
    with tape.stop_recording():
        grads = tape.gradient(loss, model.trainable_variables)
"""),
        Example("""
import tensorflow as tf
with tf.GradientTape(persistent=True) as tape:
    loss_a = head_a(x)
    loss_b = head_b(x)
grads_a = tape.gradient(loss_a, model.trainable_variables)
grads_b = tape.gradient(loss_b, model.trainable_variables)
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        if call_name(node) != "gradient":
            return
        tape = self.ctx.tf.tape_of_gradient(node)
        if tape is None:
            return
        open_tapes = [t for t in self.ctx.tf.tapes.enclosing(node)
                      if self.ctx.scope_of(t.block) is self.ctx.scope_of(node)]
        recording = [t for t in open_tapes if not self._recording_stopped(node, t)
                     and (self._persistent(t) or t is not tape and not self._gradient_taken_before(t, node))]
        if not recording or self.ctx.training.is_differentiated(node) or self.ctx.tf.differentiated_again(node):
            return
        if recording[0] is tape:
            self.report(node, f"`{tape.alias}.gradient(...)` runs inside the `with` block of persistent tape "
                              f"`{tape.alias}`, which records it",
                        help=f"call it after the `with` block, or under `with {tape.alias}.stop_recording():`",
                        note="the tape records the whole gradient computation (TensorFlow warns: more CPU and "
                             "memory), and no higher-order gradient is taken of it")
            return
        other = recording[0]
        label = f"`{other.alias}`" if other.alias else "another tape"
        self.report(node, f"`{tape.alias}.gradient(...)` runs while tape {label} (opened at line "
                          f"{self.ctx.line_of(other.block)}) is still recording",
                    help="call it after the `with` block",
                    note=f"{label} records the whole gradient computation and keeps its tensors alive, and no "
                         "higher-order gradient is taken of it")

    def _persistent(self, tape: WithContext) -> bool:
        manager = tape.item.item
        if isinstance(manager, cst.Name):
            made = self.ctx.flow.constructed_by(manager, tape.item)
            manager = made[0] if made else manager
        flag = keyword_arg(manager, "persistent") if isinstance(manager, cst.Call) else None
        return isinstance(flag, cst.Name) and flag.value == "True"

    def _recording_stopped(self, node: cst.Call, tape: WithContext) -> bool:
        """Under `with <tape>.stop_recording():` inside the tape's block."""
        for ancestor in self.ctx.ancestors(node):
            if ancestor is tape.block:
                return False
            if isinstance(ancestor, cst.With):
                for item in ancestor.items:
                    call = item.item
                    if (isinstance(call, cst.Call) and call_name(call) == "stop_recording"
                            and isinstance(receiver(call), cst.Name) and receiver(call).value == tape.alias):
                        return True
        return False

    def _gradient_taken_before(self, tape: WithContext, node: cst.Call) -> bool:
        """A non-persistent tape stops recording at its own first `gradient` call."""
        order = self.ctx.order
        return any(order[call] < order[node] for call, _ in self.ctx.tf.gradient_calls_of([tape]))
