"""LL801 checkpoint-without-optimizer: the rule, its documentation and its examples."""

from __future__ import annotations

import re
from functools import cached_property

import libcst as cst

from lintloop.analysis.checkpoints import CHECKPOINTS, last_name
from lintloop.analysis.nodes import (argument, call_name, dotted, keyword_arg, names_an_optimizer, positional_args, receiver,
                                     string_value, walk)
from lintloop.analysis.training import CALL_DEPTH
from lintloop.rule import Example, Rule
from lintloop.screen import Needs

# Calls that save a full training state, optimizer included (Accelerate, DeepSpeed, Lightning's Trainer).
_FULL_STATE_SAVES = {"save_state", "save_checkpoint"}
# Importing these means a trainer writes resumable checkpoints (with optimizer state) itself.
_TRAINER_PACKAGES = ("pytorch_lightning", "lightning")
# Command-line options (argparse, absl flags) whose name or help offers to resume a run.
_OPTION_CALLS = frozenset({"add_argument", "DEFINE_string", "DEFINE_bool", "DEFINE_boolean", "DEFINE_integer"})
_RESUME_TEXT = re.compile(r"\bresum|\bcontinu\w*\s+(?:the\s+)?training|\brestart\w*\s+training", re.IGNORECASE)
# Names that hold a way to resume (`args.resume`, `resume_from_checkpoint`).
_RESUME_NAMES = frozenset({"resume", "resume_from", "resume_path", "resume_from_checkpoint", "resume_training",
                           "continue_training"})
_ORDERINGS = (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual)


def _model_label(expr: cst.BaseExpression | None) -> str:
    """`model.module` -> `model`: the name a model goes by (a DDP / DataParallel wrapper's `.module` is it)."""
    return ((dotted(expr) or "") if expr is not None else "").removesuffix(".module")


def _names_any(node: cst.CSTNode, labels: set[str]) -> bool:
    """`node` mentions one of `labels` (`model`, `self.net`) as a name or attribute."""
    return any(isinstance(n, (cst.Name, cst.Attribute)) and dotted(n) in labels for n in walk(node))


def _given(call: cst.Call, labels: set[str]) -> bool:
    """`call` is given one of `labels`: as an argument, or as (an attribute of) its receiver (`trainer.fit()`
    runs on `trainer.model`)."""
    owner = dotted(call.func.value) if isinstance(call.func, cst.Attribute) else None
    return any(_names_any(a.value, labels) for a in call.args) or owner is not None and any(
        label == owner or label.startswith(owner + ".") for label in labels)


def _compares_with_best(test: cst.BaseExpression) -> bool:
    """`val_loss < best_val_loss`, `acc > self.best_acc`, `x > scores[best_epoch]`."""
    return any(isinstance(n, cst.Comparison) and any(isinstance(c.operator, _ORDERINGS) for c in n.comparisons)
               and any(isinstance(m, cst.Name) and "best" in m.value.lower() for m in walk(n)) for n in walk(test))


def _is_optimizer(expr: cst.BaseExpression | None) -> bool:
    return expr is not None and names_an_optimizer(dotted(expr))


def _holds_state_dict(node: cst.CSTNode) -> bool:
    return any(isinstance(n, cst.Call) and call_name(n) == "state_dict" for n in walk(node))


def _literal_zero_or_absent(expr: cst.BaseExpression | None) -> bool:
    return expr is None or isinstance(expr, (cst.Integer, cst.Float)) and float(expr.value) == 0


def _is_auxiliary(expr: cst.BaseExpression | None) -> bool:
    """A learning-rate scheduler or a GradScaler: its state is not the model's."""
    last = (dotted(expr) or "").lower().rsplit(".", 1)[-1] if expr is not None else ""
    return "sched" in last or "scaler" in last


class CheckpointWithoutOptimizer(Rule):
    code = "LL801"
    name = "checkpoint-without-optimizer"
    description = "a checkpoint that saves the model but not the optimizer"
    # PyTorch: `torch.save` of state dicts; TensorFlow: `tf.train.Checkpoint(...)`, both from `visit_Call`.
    frameworks = ("pt", "tf")
    # Every unit that may save an optimizer's state is selected too: one anywhere in the file clears every finding.
    # PyTorch: `save` and `state_dict` in a loop that steps an optimizer (`.step()`); TensorFlow: a `Checkpoint`
    # and an optimizer it may miss (`apply_gradients` / `minimize`). In CNF, "save, state_dict, step and a loop,
    # or Checkpoint and apply_gradients or minimize", less the groups that rule out nothing.
    needs = Needs(file=(("call:save", "call:Checkpoint"), ("call:state_dict", "call:Checkpoint"),
                        ("call:step", "call:apply_gradients", "call:minimize"), ("loop", "call:Checkpoint")),
                  # Every unit that may save an optimizer's state, build, step or compile with an optimizer is
                  # parsed: those are file-wide questions. So is every unit that may offer to resume training
                  # (a load, an option, a name for it, an interrupt handler) or train a model after a load.
                  statement=(("call:save", "call:state_dict", "call:save_state", "call:save_checkpoint",
                              "name:optim", "name:SGD", "call:Checkpoint", "call:CheckpointManager", "call:write",
                              "call:apply_gradients", "call:minimize", "call:compile", "call:step",
                              "call:load_state_dict", *(f"call:{c}" for c in sorted(_OPTION_CALLS)),
                              *(f"name:{n}" for n in sorted(_RESUME_NAMES)), "name:KeyboardInterrupt"),))
    summary = ("PyTorch: `torch.save(model.state_dict(), ...)` — or a dict of state dicts without the optimizer's "
               "— inside a training loop that steps an optimizer (or a function called from one), when nothing "
               "in the file saves the optimizer's state (`optimizer.state_dict()`, `accelerator.save_state`, "
               "a Lightning Trainer, ...), unless the file shows that nothing resumes from it: it offers no "
               "resumption (no `load_state_dict` into a model it then trains — followed through same-file "
               "helpers and their callers, a constructor's load counting for the methods that train —, no "
               "option or name for resuming such as `--resume` or \"to continue training\", no checkpoint written "
               "on `KeyboardInterrupt`) and either every model it loads weights into is only evaluated or run "
               "for inference, or the save runs only when a metric beats its best value (a best-validation "
               "snapshot), or just before a `break` that ends training (`if solved: save(); break`). A load from a "
               "file named by another string than the save's (a learning-rate finder's reset to `init_params.pt`) "
               "resumes nothing from it. A model no optimizer takes (`self.actor_target` where every optimizer is "
               "built from another attribute's `.parameters()`: a target network, an EMA copy) has no optimizer "
               "state to lose. Where the file shows none of these, the save is flagged and the message says what a "
               "resumed run would lose. TensorFlow: a `tf.train.Checkpoint(...)` this file saves (`.save` / `.write` of it, "
               "or a `tf.train.CheckpointManager` built on it) that does not hold one of the optimizers the code "
               "around it trains with (`opt.apply_gradients` / `opt.minimize` in the module for a module-level "
               "checkpoint, in the class for one kept as `self.x`, else in its function, and in the functions "
               "these call; with two optimizers, a GAN's, each must be saved), when no other `tf.train.Checkpoint` "
               "in the file holds them all. An optimizer counts as held when it is an item (or an attribute "
               "assigned to the checkpoint), or is the optimizer a held Keras model was `compile`d with (measured "
               "on Keras 3: saved and restored through `model.optimizer`). Not flagged: code that trains with no "
               "optimizer (inference, export), checkpoints only restored (pretrained weights), `**items` "
               "checkpoints, optimizers held as `self.x` by a class with a base (a Keras model or `tf.Module` "
               "tracks them). `model.save_weights` is not checked; a `CheckpointManager` saves what its Checkpoint holds.")
    why = ("A checkpoint written during training is what a run resumes from. Without the optimizer's state "
           "(Adam's moment estimates and step counts, SGD momentum buffers), a resumed run restarts the "
           "optimizer from zero: Adam's bias correction starts over, momentum is lost, and learning-rate "
           "warm-up logic keyed on the optimizer's step restarts, so the loss jumps after every resume and the "
           "run is not the run it continues.")
    symptom = ("Nothing fails. LL801_bad.py trains 4 epochs of Adam steps saving "
               "`model.state_dict()` each epoch, then resumes from the epoch-1 checkpoint and trains epochs 2-3 "
               "again on the same batches: final loss 0.31793 instead of 0.36810, parameters off by up to "
               "1.33e-01. LL801_good.py saves and reloads the optimizer's state too: the same loss, parameter "
               "difference 0.00e+00. TensorFlow (TF 2.21, Keras 3): LL801_tf_bad.py saves "
               "`tf.train.Checkpoint(model=model)` each epoch of a custom Adam loop; resumed from the epoch-1 "
               "checkpoint, the optimizer's `iterations` is 0 (40 with the optimizer saved), final loss 0.07640 "
               "instead of 0.09836, parameters off by up to 1.75e-01; LL801_tf_good.py adds `optimizer=optimizer`: "
               "identical. A Keras 3 model `compile`d with its optimizer saves it through `model.optimizer` "
               "(measured: `iterations` and slots restored into a fresh compiled model, difference 0.0); a model "
               "trained by a custom loop has no `model.optimizer` and the checkpoint holds no optimizer variable. "
               "Keras 3 `model.save_weights` never saves the optimizer (not checked: it is as often a best-weights "
               "export); `model.save` does.")
    remedy = ("TensorFlow: `tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)` (every optimizer "
              "of a GAN: `generator_optimizer=..., discriminator_optimizer=...`), or `model.compile(optimizer=...)` "
              "first and save the model. PyTorch: save `{\"model\": model.state_dict(), \"optimizer\": optimizer.state_dict(), \"epoch\": epoch}` (and "
              "the LR scheduler's and GradScaler's state dicts when used), and load them all when resuming. A "
              "best-weights snapshot beside such a resume checkpoint is fine.")
    flagged = (
        Example("""
import torch
for epoch in range(epochs):
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    torch.save(model.state_dict(), f"ckpt_{epoch}.pt")
""", expect="""
7:5-7:55 this checkpoint saves `model.state_dict()` but not the optimizer's state
    help: save `optimizer.state_dict()` with it (or, for a weights-only export, save after training)
    note: it is written in a training loop and nothing in this file saves the optimizer's state: a run
        resumed from it restarts the optimizer's state (Adam moments, momentum buffers, step counts)
        from zero, so its loss jumps
"""),
        Example("""
import torch
def save_checkpoint(model, epoch, path):
    torch.save({"epoch": epoch, "model_state_dict": model.state_dict()}, path)
def train(model, opt, loader, epochs):
    for epoch in range(epochs):
        for batch in loader:
            loss = model(batch).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
        save_checkpoint(model, epoch, "last.pt")
""", expect="""
3:5-3:79 this checkpoint saves `model.state_dict()` but not the optimizer's state
    help: save `optimizer.state_dict()` with it (or, for a weights-only export, save after training)
    note: it is written in a training loop and nothing in this file saves the optimizer's state: a run
        resumed from it restarts the optimizer's state (Adam moments, momentum buffers, step counts)
        from zero, so its loss jumps
"""),
        Example("""
import torch as th
from torch import save
class Trainer:
    def fit(self, loader):
        for step, batch in enumerate(loader):
            self.optimizer.zero_grad()
            self.model(batch).loss.backward()
            self.optimizer.step()
            if step % 1000 == 0:
                state = {"model": self.model.module.state_dict(), "scheduler": self.scheduler.state_dict()}
                save(state, self.ckpt_path)
""", expect="""
11:17-11:44 this checkpoint saves `self.model.module.state_dict()` but not the optimizer's state
    help: save `optimizer.state_dict()` with it (or, for a weights-only export, save after training)
    note: it is written in a training loop and nothing in this file saves the optimizer's state: a run
        resumed from it restarts the optimizer's state (Adam moments, momentum buffers, step counts)
        from zero, so its loss jumps
"""),
        Example("""
import argparse
import torch
parser = argparse.ArgumentParser()
parser.add_argument("--init-weights", default="", help="weights to continue training from")
args = parser.parse_args()
encoder = Encoder()
if args.init_weights:
    encoder.load_state_dict(torch.load(args.init_weights))
opt = torch.optim.Adam(encoder.parameters(), lr=2e-4)
for epoch in range(20):
    for batch in loader:
        opt.zero_grad()
        encoder(batch).loss.backward()
        opt.step()
    torch.save(encoder.state_dict(), f"encoder_{epoch}.pt")
""", expect="""
15:5-15:60 this checkpoint saves `encoder.state_dict()` but not the optimizer's state
    help: save `optimizer.state_dict()` with it and load it when resuming
    note: it is written in a training loop and nothing in this file saves the optimizer's state; this
        file offers to resume training (line 8 loads `encoder`'s weights before training it), and a
        resumed run restarts the optimizer's state (Adam moments, momentum buffers, step counts) from
        zero
"""),
        Example("""
import torch
def restore(net, path):
    net.load_state_dict(torch.load(path))
def evaluate_best(net, path):
    restore(net, path)
    return accuracy(net, test_loader)
def run(net, opt, start_from=None):
    if start_from:
        restore(net, start_from)
    best = 0.0
    for epoch in range(50):
        for x, y in train_loader:
            opt.zero_grad()
            criterion(net(x), y).backward()
            opt.step()
        acc = accuracy(net, val_loader)
        if acc > best:
            best = acc
            torch.save(net.state_dict(), "best.pt")
    return evaluate_best(net, "best.pt")
""", expect="""
19:13-19:52 this checkpoint saves `net.state_dict()` but not the optimizer's state
    help: save `optimizer.state_dict()` with it and load it when resuming
    note: it is written in a training loop and nothing in this file saves the optimizer's state; this
        file offers to resume training (line 3 loads `net`'s weights before training it), and a resumed
        run restarts the optimizer's state (Adam moments, momentum buffers, step counts) from zero
"""),
        Example("""
import torch
def pretrain(model, optimizer, batches, every):
    step = 0
    try:
        for tokens in batches:
            optimizer.zero_grad()
            model(tokens).loss.backward()
            optimizer.step()
            step += 1
            if step % every == 0:
                torch.save(model.state_dict(), f"step_{step}.pth")
    except KeyboardInterrupt:
        torch.save(model.state_dict(), f"step_{step}_interrupted.pth")
""", expect="""
11:17-11:67 this checkpoint saves `model.state_dict()` but not the optimizer's state
    help: save `optimizer.state_dict()` with it and load it when resuming
    note: it is written in a training loop and nothing in this file saves the optimizer's state; this
        file offers to resume training (line 12 saves a checkpoint when training is interrupted), and a
        resumed run restarts the optimizer's state (Adam moments, momentum buffers, step counts) from
        zero
"""),
        Example("""
import os
import torch
class Runner:
    def __init__(self, model, snapshot):
        self.model = model
        self.opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
        self.snapshot = snapshot
        if os.path.exists(snapshot):
            self.model.load_state_dict(torch.load(snapshot))
    def fit(self, loader, epochs):
        for epoch in range(epochs):
            for x, y in loader:
                self.opt.zero_grad()
                self.model(x, y).backward()
                self.opt.step()
            torch.save(self.model.state_dict(), self.snapshot)
""", expect="""
16:13-16:63 this checkpoint saves `self.model.state_dict()` but not the optimizer's state
    help: save `optimizer.state_dict()` with it and load it when resuming
    note: it is written in a training loop and nothing in this file saves the optimizer's state; this
        file offers to resume training (line 9 loads `self.model`'s weights before training it), and a
        resumed run restarts the optimizer's state (Adam moments, momentum buffers, step counts) from
        zero
"""),
        Example("""
import tensorflow as tf
model = build_model()
optimizer = tf.keras.optimizers.Adam(1e-3)
checkpoint = tf.train.Checkpoint(step=tf.Variable(0), model=model)
manager = tf.train.CheckpointManager(checkpoint, "ckpts", max_to_keep=3)
checkpoint.restore(manager.latest_checkpoint)
for x, y in dataset:
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    checkpoint.step.assign_add(1)
    if int(checkpoint.step) % 100 == 0:
        manager.save()
""", expect="""
4:14-4:67 this `tf.train.Checkpoint` does not hold the optimizer `optimizer`
    help: add it to the checkpoint: `optimizer=optimizer`
    note: it is saved in this file, the code around it trains with `optimizer` (`apply_gradients` at
        line 10), and no other `tf.train.Checkpoint` here holds it: a run restored from it restarts that
        optimizer's state (Adam moments, `iterations`) from zero
"""),
        Example("""
import tensorflow as tf
generator_optimizer = tf.keras.optimizers.Adam(1e-4)
discriminator_optimizer = tf.keras.optimizers.Adam(1e-4)
checkpoint = tf.train.Checkpoint(generator_optimizer=generator_optimizer,
                                 generator=generator, discriminator=discriminator)
@tf.function
def train_step(images):
    with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
        gen_loss, disc_loss = losses(images)
    generator_optimizer.apply_gradients(zip(gen_tape.gradient(gen_loss, generator.trainable_variables),
                                            generator.trainable_variables))
    discriminator_optimizer.apply_gradients(zip(disc_tape.gradient(disc_loss, discriminator.trainable_variables),
                                                discriminator.trainable_variables))
def train(dataset, epochs):
    for epoch in range(epochs):
        for image_batch in dataset:
            train_step(image_batch)
        checkpoint.save(file_prefix=checkpoint_prefix)
""", expect="""
4:14-5:83 this `tf.train.Checkpoint` does not hold the optimizer `discriminator_optimizer`
    help: add it to the checkpoint: `discriminator_optimizer=discriminator_optimizer`
    note: it is saved in this file, the code around it trains with `discriminator_optimizer`
        (`apply_gradients` at line 12), and no other `tf.train.Checkpoint` here holds it: a run restored
        from it restarts that optimizer's state (Adam moments, `iterations`) from zero
"""),
        Example("""
import tensorflow as tf
from tensorflow import keras
class Trainer:
    def __init__(self, model):
        self.model = model
        self.opt = keras.optimizers.SGD(0.1, momentum=0.9)
        self.ckpt = tf.train.Checkpoint(model=self.model)
    def step(self, x, y):
        with tf.GradientTape() as tape:
            loss = self.model.compute_loss(x, y)
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.opt.apply_gradients(zip(grads, self.model.trainable_variables))
    def save(self, path):
        self.ckpt.write(path)
""", expect="""
7:21-7:58 this `tf.train.Checkpoint` does not hold the optimizer `self.opt`
    help: add it to the checkpoint: `opt=self.opt`
    note: it is saved in this file, the code around it trains with `self.opt` (`apply_gradients` at line
        12), and no other `tf.train.Checkpoint` here holds it: a run restored from it restarts that
        optimizer's state (Adam moments, `iterations`) from zero
"""),
        Example("""
import tensorflow as tf
def _save_checkpoint(strategy, checkpoint, model_dir, prefix):
    checkpoint.save(os.path.join(model_dir, prefix))
def run_customized_training_loop(strategy, model, optimizer, train_iterator, steps, model_dir):
    checkpoint = tf.train.Checkpoint(model=model, global_step=optimizer.iterations)
    for step in range(steps):
        with tf.GradientTape() as tape:
            loss = model.loss_fn(next(train_iterator))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    _save_checkpoint(strategy, checkpoint, model_dir, "ctl_step_{}.ckpt".format(steps))
""", expect="""
5:18-5:84 this `tf.train.Checkpoint` does not hold the optimizer `optimizer`
    help: add it to the checkpoint: `optimizer=optimizer`
    note: it is saved in this file, the code around it trains with `optimizer` (`apply_gradients` at
        line 9), and no other `tf.train.Checkpoint` here holds it: a run restored from it restarts that
        optimizer's state (Adam moments, `iterations`) from zero
"""),
        Example("""
import torch
from torch import optim
class Agent:
    def __init__(self):
        self.actor, self.actor_target = Actor(), Actor()
        self.critic, self.critic_target = Critic(), Critic()
        self.actor_optimizer = optim.Adam(self.actor.parameters(), lr=1e-4)
        self.critic_optimizer = optim.Adam(self.critic.parameters(), lr=1e-3)
    def update(self, batch):
        self.critic_optimizer.zero_grad()
        self.critic(batch).mean().backward()
        self.critic_optimizer.step()
    def save(self):
        torch.save(self.critic_target.state_dict(), "critic_target.pth")
        torch.save(self.critic.state_dict(), "critic.pth")
agent = Agent()
for episode in range(1000):
    for step in range(200):
        agent.update(step)
    if episode % 50 == 0:
        agent.save()
""", expect="""
15:9-15:59 this checkpoint saves `self.critic.state_dict()` but not the optimizer's state
    help: save `optimizer.state_dict()` with it (or, for a weights-only export, save after training)
    note: it is written in a training loop and nothing in this file saves the optimizer's state: a run
        resumed from it restarts the optimizer's state (Adam moments, momentum buffers, step counts)
        from zero, so its loss jumps
"""),
    )
    not_flagged = (
        Example("""
import torch
def find_lr(model, optimizer, batches):
    torch.save(model.state_dict(), "init_params.pt")
    for lr, (x, y) in zip(torch.logspace(-7, 1, 100), batches):
        optimizer.param_groups[0]["lr"] = lr.item()
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
    model.load_state_dict(torch.load("init_params.pt"))
optimizer = torch.optim.Adam(model.parameters())
find_lr(model, optimizer, train_batches)
best = float("inf")
for epoch in range(25):
    for x, y in train_loader:
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
    valid_loss = evaluate(model, valid_loader)
    if valid_loss < best:
        best = valid_loss
        torch.save(model.state_dict(), "best-model.pt")
"""),
        Example("""
import torch
from torch import optim
net = Net()
opt = optim.Adam(net.parameters())
running = 0.0
for episode in range(1000):
    for batch in loader:
        opt.zero_grad()
        net(batch).mean().backward()
        opt.step()
    running = 0.9 * running + 0.1 * evaluate(net)
    if running > 195:
        print("solved")
        torch.save(net.state_dict(), "solved.pth")
        break
"""),
        Example("""
import torch
policy_net = DQN()
target_net = DQN()
target_net.load_state_dict(policy_net.state_dict())
optimizer = torch.optim.Adam(policy_net.parameters(), lr=1e-4)
best_return = float("-inf")
for episode in range(num_episodes):
    episode_return = run_episode(env, policy_net)
    for t in range(updates_per_episode):
        loss = td_loss(policy_net, target_net, replay.sample(64))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    if episode % target_update == 0:
        target_net.load_state_dict(policy_net.state_dict())
    if episode_return > best_return:
        best_return = episode_return
        torch.save(policy_net.state_dict(), "best_policy.pt")
"""),
        Example("""
import tensorflow as tf
def make_checkpoint():
    return tf.train.Checkpoint()
optimizer = tf.keras.optimizers.Adam(1e-3)
ckpt = make_checkpoint()
ckpt.model = model
ckpt.optimizer = optimizer
for x, y in dataset:
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    ckpt.write("ckpt")
"""),
        Example("""
import torch
model = build_model()
model.load_state_dict(torch.load("trained.pt"))
model.eval()
for name, quantized in variants(model):
    torch.save(quantized.state_dict(), f"{name}.pt")
"""),
        Example("""
import torch
for epoch in range(epochs):
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    if val_acc > best:
        torch.save(model.state_dict(), "best.pt")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, "last.pt")
"""),
        Example("""
import torch
for epoch in range(epochs):
    train_one_epoch(model, optimizer, loader)
    for x, y in loader:
        loss_fn(model(x), y).backward()
        optimizer.step()
    accelerator.save_state(output_dir)
    torch.save(model.state_dict(), "weights.pt")
"""),
        Example("""
import torch
for epoch in range(epochs):
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
torch.save(model.state_dict(), "final.pt")
"""),
        Example("""
import torch
class Trainer:
    def __init__(self, model):
        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

    def train(self, loader, epochs):
        for epoch in range(epochs):
            for x, y in loader:
                self.optimizer.zero_grad()
                torch.nn.functional.mse_loss(self.model(x), y).backward()
                self.optimizer.step()
            torch.save({"MODEL_STATE": self.model.state_dict(), "EPOCHS_RUN": epoch}, "snapshot.pt")
"""),
        Example("""
import torch
def store(net, path):
    torch.save(net.state_dict(), path)
def load(net, path):
    net.load_state_dict(torch.load(path))
    return net
def fit(net, epochs, path):
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    best = None
    for epoch in range(epochs):
        for x, y in train_loader:
            opt.zero_grad()
            loss_fn(net(x), y).backward()
            opt.step()
        score = evaluate(net, val_loader)
        if best is None or score > best:
            best = score
            store(net, path)
    load(net, path)
    return evaluate(net, test_loader)
"""),
        Example("""
import torch
def train(args):
    painter = Painter()
    optimizer = torch.optim.Adam(painter.parameters(), args.lr)
    for epoch in range(args.epochs):
        for i, images in enumerate(loader):
            optimizer.zero_grad()
            painter_loss(painter(images), images).backward()
            optimizer.step()
            if (i + 1) % args.snapshot_every == 0:
                torch.save(painter.state_dict(), f"{args.out}/painter_{epoch}_{i + 1}.pth")
def paint(args):
    painter = Painter()
    painter.load_state_dict(torch.load(args.weights))
    painter.eval()
    with torch.no_grad():
        return painter(read_image(args.image))
if __name__ == "__main__":
    args = parse()
    if args.command == "train":
        train(args)
    else:
        paint(args)
"""),
        Example("""
import torch
def main(opts):
    model = Seq2Seq()
    optim = torch.optim.Adam(model.parameters(), lr=opts.lr)
    for epoch in range(opts.epochs):
        train_epoch(model, optim, train_dl)
        log(epoch, validate(model, valid_dl))
        torch.save(model.state_dict(), opts.out + "last.pt")
def translate(opts):
    model = Seq2Seq()
    model.load_state_dict(torch.load(opts.model_path))
    model.eval()
    return decode(model, opts.sentence)
def train_epoch(model, optim, loader):
    for src, tgt in loader:
        optim.zero_grad()
        model(src, tgt).backward()
        optim.step()
if __name__ == "__main__":
    opts = parse()
    translate(opts) if opts.inference else main(opts)
"""),
        Example("""
import torch
best_acc = 0.0
for epoch in range(epochs):
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    acc = evaluate(model, val_loader)
    if acc > best_acc:
        best_acc = acc
        torch.save(model.state_dict(), "best_model.pt")
"""),
        Example("""
import tensorflow as tf
model = build_model()
model.compile(optimizer=tf.keras.optimizers.Adam(1e-3), loss="mse")
checkpoint = tf.train.Checkpoint(model=model)
model.fit(dataset, epochs=5)
checkpoint.save("ckpts/model")
"""),
        Example("""
import tensorflow as tf
model = build_model()
checkpoint = tf.train.Checkpoint(model=model)
checkpoint.restore(args.checkpoint).expect_partial()
tf.saved_model.save(model, args.export_dir)
"""),
        Example("""
import tensorflow as tf
optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(1e-3))
ckpt = tf.train.Checkpoint()
ckpt.model = model
ckpt.optimizer = optimizer
for x, y in dataset:
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
best = tf.train.Checkpoint(model=model)
best.write("best")
"""),
        Example("""
import tensorflow as tf
import scipy.optimize
weights_ckpt = tf.train.Checkpoint(encoder=encoder)
result = scipy.optimize.minimize(objective, x0)
"""),
        Example("""
import tensorflow as tf
class GAN(tf.keras.Model):
    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
    def train_step(self, real_images):
        with tf.GradientTape() as tape:
            d_loss = self.discriminator_loss(real_images)
        grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
        self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_weights))
gan = GAN(discriminator, generator)
checkpoint = tf.train.Checkpoint(gan=gan)
"""),
        Example("""
import tensorflow as tf
class ClassificationTask:
    def initialize(self, model):
        ckpt = tf.train.Checkpoint(backbone=model.backbone)
        ckpt.read(self.init_checkpoint).expect_partial()
    def train_step(self, inputs, model, optimizer):
        with tf.GradientTape() as tape:
            loss = self.build_losses(inputs, model(inputs["image"], training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
"""),
        Example("""
import tensorflow as tf
class OptimizerTest(tf.test.TestCase):
    def test_apply(self):
        for _ in range(3):
            composite.apply_gradients(grads_and_vars)
            first.apply_gradients(grads_and_vars[:1])
    def test_checkpoint_restores_slots(self):
        model = get_compiled_model()
        model.fit(dataset, epochs=1)
        checkpoint = tf.train.Checkpoint(model=model)
        checkpoint.write(self.get_temp_dir())
        restored = get_compiled_model()
        checkpoint = tf.train.Checkpoint(model=restored)
        checkpoint.read(self.get_temp_dir()).assert_consumed()
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        callee = self.ctx.names.callee(node)
        if callee == "torch.save":
            self._check_torch_save(node)
        elif callee in CHECKPOINTS:
            self._check_tf_checkpoint(node)

    # ----- TensorFlow -------------------------------------------------------------------------
    def _check_tf_checkpoint(self, checkpoint: cst.Call) -> None:
        checkpoints = self.ctx.tf_checkpoints
        items = checkpoints.items(checkpoint)
        trained = checkpoints.trained_near(checkpoint)
        if items is None or not trained or not checkpoints.saved_here(checkpoint):
            return
        missing = [step for step in trained if not checkpoints.holds_optimizer(items, receiver(step), checkpoint, trained)]
        if not missing or any(checkpoints.holds_all(other, trained) for other in checkpoints.checkpoints
                              if other is not checkpoint):
            return
        names = ", ".join(f"`{dotted(receiver(step))}` (`{call_name(step)}` at line {self.ctx.line_of(step)})"
                          for step in missing)
        optimizers = list(dict.fromkeys(dotted(receiver(step)) for step in missing))
        one = len(optimizers) == 1
        label = ", ".join(f"`{name}`" for name in optimizers)
        if len(label) > 44:  # the headline within 100 characters
            label = f"{'an optimizer' if one else f'{len(optimizers)} optimizers'} the code around it trains with"
        else:
            label = f"the optimizer {label}" if one else f"the optimizers {label}"
        entries = ", ".join(f"`{last_name(receiver(step))}={dotted(receiver(step))}`"
                            for step in {dotted(receiver(step)): step for step in missing}.values())
        self.report(checkpoint, f"this `tf.train.Checkpoint` does not hold {label}",
                    help=f"add {'it' if one else 'them'} to the checkpoint: {entries}",
                    note=f"it is saved in this file, the code around it trains with {names}, and no other "
                         f"`tf.train.Checkpoint` here holds {'it' if one else 'them'}: a run restored from it "
                         f"restarts {'that optimizer' if one else 'each optimizer'}'s state (Adam moments, "
                         "`iterations`) from zero")

    # ----- PyTorch ------------------------------------------------------------------------------

    def _check_torch_save(self, call: cst.Call) -> None:
        saved = argument(call, 0, "obj")
        if saved is None:
            return
        value = self.ctx.flow.resolve_value(saved, call)
        states = [c for c in walk(value) if isinstance(c, cst.Call) and call_name(c) == "state_dict"]
        if not states or any(_is_optimizer(receiver(c)) for c in states):
            return
        model_states = [c for c in states if not _is_auxiliary(receiver(c))]
        chains = [(call, *chain) for chain in self.ctx.training.optimizer_chains(call)]
        if not model_states or not chains:
            return
        if self._optimizer_state_saved or self._optimizers_keep_no_state or not any(
                self._optimized(_model_label(receiver(c))) for c in model_states):
            return
        resumptions = [r for r in self._resumptions if not self._loads_another_file(r[0], call)]
        if not resumptions and (self._loads_only_for_inference or all(
                self._best_guarded(chain) or self._saved_as_training_ends(chain) for chain in chains)):
            # Weights exported for evaluation or inference, a best-validation snapshot, or the weights a
            # finished run ends with: nothing resumes from them.
            return
        model = _model_label(receiver(model_states[0]))
        headline = f"this checkpoint saves `{self.ctx.snippet(model_states[0], 35)}` but not the optimizer's state"
        written = "it is written in a training loop and nothing in this file saves the optimizer's state"
        loses = "restarts the optimizer's state (Adam moments, momentum buffers, step counts) from zero"
        if resumptions:
            # The evidence about this model first: its own load before training.
            _, how = next((r for r in resumptions if _names_any(r[0], {model})), resumptions[0])
            self.report(call, headline,
                        help="save `optimizer.state_dict()` with it and load it when resuming",
                        note=f"{written}; this file offers to resume training ({how}), and a resumed run {loses}")
        else:
            self.report(call, headline,
                        help="save `optimizer.state_dict()` with it (or, for a weights-only export, save after "
                             "training)",
                        note=f"{written}: a run resumed from it {loses}, so its loss jumps")

    def _best_guarded(self, chain: tuple[cst.CSTNode, ...]) -> bool:
        """The save, or a call on its way from the training loop, runs only under a comparison with a best
        value (`if val_loss < best_val_loss:`): a best-validation snapshot, kept to pick weights."""
        for node in chain:
            for ancestor in self.ctx.ancestors(node):
                if isinstance(ancestor, (cst.FunctionDef, cst.For, cst.While)):
                    break
                if isinstance(ancestor, cst.If) and _compares_with_best(ancestor.test):
                    return True
        return False

    def _loads_another_file(self, node: cst.CSTNode, save: cst.Call) -> bool:
        """`node` loads weights from a file named by a string other than the one `save` writes
        (`model.load_state_dict(torch.load("init_params.pt"))` beside `torch.save(..., "best.pt")`: a
        reset to the initial weights, not a resumption from this checkpoint)."""
        if not isinstance(node, cst.Call) or call_name(node) != "load_state_dict":
            return False
        given = argument(node, 0, "state_dict")
        loaded = self.ctx.flow.resolve_value(given, node) if given is not None else None
        if not isinstance(loaded, cst.Call) or self.ctx.names.callee(loaded) != "torch.load":
            return False
        read, written = (string_value(self.ctx.flow.resolve_value(path, at)) if path is not None else None
                         for path, at in ((argument(loaded, 0, "f"), loaded), (argument(save, 1, "f"), save)))
        return read is not None and written is not None and read != written

    def _saved_as_training_ends(self, chain: tuple[cst.CSTNode, ...]) -> bool:
        """The save, or the call leading to it from the training loop, is followed in its block by a
        `break` out of the outermost loop of its function (`if solved: agent.save(); break`): the weights
        a finished run ends with."""
        node = chain[-1]
        loops = []
        for ancestor in self.ctx.ancestors(node):
            if isinstance(ancestor, cst.FunctionDef):
                break
            if isinstance(ancestor, (cst.For, cst.While)):
                loops.append(ancestor)
        if len(loops) != 1:
            return False  # a `break` here would leave an inner loop only
        statement = next(a for a in (node, *self.ctx.ancestors(node))
                         if isinstance(self.ctx.parents.get(a), (cst.IndentedBlock, cst.Module)))
        body = self.ctx.parents[statement].body
        return any(isinstance(later, cst.SimpleStatementLine) and any(isinstance(s, cst.Break) for s in later.body)
                   for later in body[body.index(statement) + 1:])

    def _optimized(self, model: str) -> bool:
        """Is `model` (or a module inside it, or one holding it) given to an optimizer here, or may it be?
        Only an attribute of `self` beside optimizers all built from other attributes of `self` is known not
        to be (`self.actor_target` where the optimizers take `self.actor.parameters()`): a target network,
        an EMA copy or a frozen teacher has no optimizer state to lose. A name may be another's alias."""
        optimized = self._optimized_models
        if optimized is None or not model.startswith("self.") or not all(m.startswith("self.") for m in optimized):
            return True
        return any(model == label or label.startswith(model + ".") or model.startswith(label + ".")
                   for label in optimized)

    @cached_property
    def _optimized_models(self) -> set[str] | None:
        """The models whose parameters the file's optimizers are built from (`Adam(self.actor.parameters())`),
        or None where an optimizer's parameters are not named that way (or no optimizer is built here)."""
        found: set[str] = set()
        callees = ((c, self.ctx.names.callee(c) or "") for c in self.ctx.nodes(cst.Call))
        optimizers = [c for c, callee in callees
                      if callee.startswith("torch.optim.") and not callee.startswith("torch.optim.lr_scheduler.")]
        for optimizer in optimizers:
            params = argument(optimizer, 0, "params")
            value = self.ctx.flow.resolve_value(params, optimizer) if params is not None else None
            sources = [receiver(c) for c in walk(value) if isinstance(c, cst.Call)
                       and call_name(c) in ("parameters", "named_parameters")] if value is not None else []
            if not sources or any(s is None or not dotted(s) for s in sources):
                return None
            found |= {_model_label(s) for s in sources}
        return found or None

    @cached_property
    def _resumptions(self) -> list[tuple[cst.CSTNode, str]]:
        """Where this file offers to resume training from a checkpoint, and how (for a message): weights
        loaded into a model trained after it, a command-line option (`--resume`, "path to netG (to continue
        training)"), a name for it (`args.resume`), a checkpoint written when training is interrupted."""
        ctx = self.ctx
        found = [(load, f"line {ctx.line_of(load)} loads `{_model_label(receiver(load))}`'s weights before training it")
                 for load, trains in self._model_loads if trains]
        found += [(call, f"the option `{ctx.snippet(call.args[0].value, 40)}` at line {ctx.line_of(call)}")
                  for call in ctx.nodes(cst.Call) if call_name(call) in _OPTION_CALLS
                  and any(_RESUME_TEXT.search(string_value(a.value) or "") for a in call.args)]
        found += [(name, f"`{name.value}` at line {ctx.line_of(name)}")
                  for name in ctx.nodes(cst.Name) if name.value in _RESUME_NAMES and self._is_read(name)][:1]
        found += [(handler, f"line {ctx.line_of(handler)} saves a checkpoint when training is interrupted")
                  for handler in ctx.nodes(cst.ExceptHandler)
                  if handler.type is not None and dotted(handler.type) == "KeyboardInterrupt"
                  and any(ctx.names.callee(c) == "torch.save" for c in ctx.nodes_within(cst.Call, handler))]
        return found

    def _is_read(self, name: cst.Name) -> bool:
        """A name read (`args.resume`, `if resume:`), not one a parameter, keyword, def or import introduces."""
        parent = self.ctx.parents.get(name)
        return not (isinstance(parent, (cst.Param, cst.FunctionDef, cst.ClassDef, cst.ImportAlias))
                    or isinstance(parent, cst.Arg) and parent.keyword is name)

    @cached_property
    def _loads_only_for_inference(self) -> bool:
        """The file loads model weights, each time into a model it does not train afterwards: its checkpoints
        are for evaluation or inference."""
        return bool(self._model_loads) and all(trains is False for _, trains in self._model_loads)

    @cached_property
    def _model_loads(self) -> list[tuple[cst.Call, bool | None]]:
        """Each `x.load_state_dict(...)` into a model (not an optimizer, scheduler or scaler), and whether
        the model is trained after it (None: it runs in a function this file never calls)."""
        loads = [c for c in self.ctx.definitions.named("load_state_dict").nodes if isinstance(c.func, cst.Attribute)
                 and not _is_optimizer(receiver(c)) and not _is_auxiliary(receiver(c)) and not self._copies_weights(c)]
        return [(load, self._trained_after(load, {_model_label(receiver(load))}, 0)) for load in loads]

    def _copies_weights(self, load: cst.Call) -> bool:
        """`target_net.load_state_dict(policy_net.state_dict())`, or a snapshot kept in memory
        (`best = copy.deepcopy(model.state_dict())`): weights copied between models of this run, not read
        from a checkpoint, so not a resumption."""
        given = argument(load, 0, "state_dict")
        if given is None:
            return False
        value = self.ctx.flow.resolve_value(given, load)
        calls = [c for c in walk(value) if isinstance(c, cst.Call)]
        return any(call_name(c) == "state_dict" for c in calls) and not any(
            (call_name(c) or "").startswith("load") for c in calls)

    def _trained_after(self, node: cst.CSTNode, models: set[str], depth: int) -> bool | None:
        """Is one of `models` (dotted names) trained after `node` runs: by a later loop of its scope that
        steps an optimizer and names it, or a later call, given it, of a function that steps one; or,
        through the callers of the function around `node`, after those calls? None when that function
        has no caller here (or for `__init__`: no training method of its class names the model)."""
        ctx = self.ctx
        scope = ctx.scope_of(node)
        end = ctx.subtree_end[node]
        for later in ctx.nodes_in_scope((cst.For, cst.While), scope).between(end, len(ctx.order)):
            if _names_any(later, models) and ctx.training.steps_optimizer(later):
                return True
        for later in ctx.nodes_in_scope(cst.Call, scope).between(end, len(ctx.order)):
            if _given(later, models) and any(
                    ctx.training.steps_optimizer(fn) for fn in ctx.calls.local_functions(later.func)):
                return True
        if not isinstance(scope, cst.FunctionDef):
            return False
        if scope.name.value == "__init__":
            # Built before any method runs: a model it loads is trained by a training method naming it.
            cls = next((a for a in ctx.ancestors(scope) if isinstance(a, cst.ClassDef)), None)
            own = {m for m in models if m.startswith("self.")}
            methods = ctx.nodes_within(cst.FunctionDef, cls) if cls is not None and own else []
            return True if any(_names_any(m, own) and ctx.training.steps_optimizer(m) for m in methods) else None
        sites = ctx.calls.call_sites.get(scope, [])
        if not sites or depth >= CALL_DEPTH:
            return None
        found = [self._trained_after(site, self._models_at(site, scope, models), depth + 1) for site in sites]
        return True if True in found else None if None in found else False

    def _models_at(self, site: cst.Call, function: cst.FunctionDef, models: set[str]) -> set[str]:
        """What `models`, named inside `function`, are called at one of its call sites: a parameter's
        argument, `self.x` on the same object, a module-level name itself, and what the call's result is
        bound to when the function returns something."""
        ctx = self.ctx
        params = [p.name.value for p in function.params.params]
        shift = 1 if params and params[0] in ("self", "cls") and isinstance(site.func, cst.Attribute) else 0
        found: set[str] = set()
        for model in models:
            root = model.split(".")[0]
            if root == "self":  # `trainer.restore(p)` loads `self.model`: `trainer.model` at the call site
                owner = dotted(site.func.value) if isinstance(site.func, cst.Attribute) else None
                if owner:
                    found.add(owner + model[len(root):])
            elif root in params:
                given = keyword_arg(site, root)
                position = params.index(root) - shift
                args = positional_args(site)
                if given is None and 0 <= position < len(args):
                    given = args[position]
                label = dotted(given) if given is not None else None
                if label:
                    found.add(label + model[len(root):])
            elif not ctx.bindings_in(function, root):
                found.add(model)  # a module-level name
        statement = ctx.parents.get(site)
        if isinstance(statement, cst.Assign) and any(r.value is not None for r in ctx.returns_of(function)):
            found |= {label for t in statement.targets for n in walk(t.target)
                      if isinstance(n, (cst.Name, cst.Attribute)) and (label := dotted(n))}
        return found

    @cached_property
    def _optimizers_keep_no_state(self) -> bool:
        """Every optimizer the file builds is plain SGD (no momentum) and no scheduler is built: resuming
        from the model alone loses nothing (the ddp-tutorial-series `SGD(params, lr=1e-3)`)."""
        built = [self.ctx.names.callee(c) or "" for c in self.ctx.nodes(cst.Call)]
        optimizers = [(c, name) for c, name in zip(self.ctx.nodes(cst.Call), built) if name.startswith("torch.optim.")]
        if not optimizers or any(name.startswith("torch.optim.lr_scheduler.") for _, name in optimizers):
            return False
        return all(name == "torch.optim.SGD" and len(positional_args(c)) <= 2 and _literal_zero_or_absent(
            keyword_arg(c, "momentum")) for c, name in optimizers)

    @cached_property
    def _optimizer_state_saved(self) -> bool:
        """Anywhere in the file: an optimizer's `state_dict()`, a full-state save, a trainer that checkpoints,
        or a state dict stored under an `"optimizer..."` key (`{"optim": opt_state.state_dict()}`,
        `ckpt["optimizer"] = o.state_dict()`)."""
        if any(module.split(".")[0] in _TRAINER_PACKAGES for module in self.ctx.names.imports.values()):
            return True
        for call in self.ctx.nodes(cst.Call):
            name = call_name(call)
            if name == "state_dict" and _is_optimizer(receiver(call)) or name in _FULL_STATE_SAVES and (
                    not self.ctx.calls.local_functions(call.func)):
                return True
        keys = [e.key for d in self.ctx.nodes(cst.Dict) if _holds_state_dict(d)
                for e in d.elements if isinstance(e, cst.DictElement)]
        keys += [t.target.slice[0].slice.value for assign in self.ctx.nodes(cst.Assign)
                 if _holds_state_dict(assign.value) for t in assign.targets
                 if isinstance(t.target, cst.Subscript) and isinstance(t.target.slice[0].slice, cst.Index)]
        return any("optim" in (string_value(k) or "").lower() for k in keys)
