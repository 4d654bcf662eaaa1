"""LL708 softmax-into-cross-entropy: the rule, its documentation and its examples.

The PyTorch side: `CrossEntropyLoss` / `F.cross_entropy` on softmax output. The Keras side:
`*CategoricalCrossentropy(from_logits=True)` (class, function or `compile` loss) on a softmax output, as
`ctx.keras` sees it (a model ending in softmax, `tf.nn.softmax(...)`).
"""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.keras_models import LossUse
from lintloop.analysis.modules import Activation
from lintloop.analysis.nodes import argument
from lintloop.rule import Example, Rule
from lintloop.screen import Needs

_TORCH_CROSS_ENTROPY_FUNCTIONS = {"torch.nn.functional.cross_entropy"}
_TORCH_CROSS_ENTROPY_CLASSES = {"torch.nn.CrossEntropyLoss", "torch.nn.modules.loss.CrossEntropyLoss"}


class SoftmaxIntoCrossEntropy(Rule):
    code = "LL708"
    name = "softmax-into-cross-entropy"
    description = "softmax output given to a cross-entropy loss"
    frameworks = ("pt", "tf")
    # The unit computing the loss (a model's `forward` and `__init__` come with its class: lintloop.screen).
    # Only files that train (a backward, an optimizer step, a Lightning `training_step`): model libraries
    # compute a loss beside every attention softmax, and parsing all of them cost more than the rest of
    # the catalog together (bench/README.md).
    # Keras: a file that trains (`compile`/`fit`, a tape), whose unit holding the finding names the loss
    # (or a `compile` call); a subclassed model's `call` comes with its class.
    needs = Needs(file=(("text:softmax", "text:Softmax"),
                        ("call:cross_entropy", "name:CrossEntropyLoss", "text:ategoricalCrossentropy",
                         "text:ategorical_crossentropy"),
                        ("call:backward", "call:manual_backward", "call:step", "name:training_step",
                         "call:compile", "call:gradient")),
                  statement=(("call:cross_entropy", "name:CrossEntropyLoss", "call:backward", "name:criterion",
                              "name:loss_fn", "call:compile", "name:CategoricalCrossentropy",
                              "name:SparseCategoricalCrossentropy", "name:categorical_crossentropy",
                              "name:sparse_categorical_crossentropy", "name:CategoricalFocalCrossentropy",
                              "name:categorical_focal_crossentropy"),))
    probe = "effect (Keras: warning)"
    summary = ("PyTorch: `nn.CrossEntropyLoss` / `F.cross_entropy` (any spelling) applied to softmax output: a "
               "`softmax` call (`F.softmax`, `torch.softmax`, `x.softmax(dim)`, `nn.Softmax()(x)`) whose "
               "result is the loss's input, or the output of a model whose last layer is `nn.Softmax` or "
               "whose `forward` returns a softmax (same file), in a file that trains (a backward, an optimizer "
               "step or a Lightning `training_step`). Keras (2 and 3): `CategoricalCrossentropy` / "
               "`SparseCategoricalCrossentropy` (also the focal one; class, function or `compile` loss) with "
               "`from_logits=True` applied to a softmax output: a model ending in `activation=\"softmax\"`, "
               "`Softmax()` or `Activation(\"softmax\")` (as `ctx.keras` sees it), or `tf.nn.softmax(...)` / "
               "`keras.activations.softmax(...)` passed as the prediction.")
    why = ("`CrossEntropyLoss` expects logits: it applies `log_softmax` itself. Given probabilities, it "
           "computes the cross-entropy of softmax(softmax(logits)): the inputs lie in [0, 1], so the "
           "loss can never get near 0 and its gradients are squashed. Keras `from_logits=True` says the same "
           "thing. Keras 3 on the TensorFlow backend often notices: when the prediction carries a Keras "
           "softmax's logits (a layer's `activation=\"softmax\"`, `Softmax()`, `keras.activations.softmax`) or "
           "is a `Softmax` op of a traced graph (`fit`, `tf.function`), it warns and computes the loss from "
           "the softmax's input instead, so the loss is right — but the code says the opposite of what the "
           "model does, and the rescue is gone where the softmax is not visible: `tf.nn.softmax` in eager code "
           "(measured: loss 0.802 instead of 0.417, no warning), a prediction cast or copied first, the JAX "
           "and PyTorch backends (their cross-entropies have no such check; read in Keras 3.15's source). Keras 2 "
           "(`tf_keras`, not installed here: not run) has the same rescue and warning in its backend; run logs "
           "of Keras 2.6-2.9 show the older wording \"... produced by a sigmoid or softmax activation ...\".")
    symptom = ("No error. Measured on a 4-class problem (torch 2.13, SGD, 200 steps): the loss cannot go "
               "below 0.744 (its floor for 4 classes: -log(e / (e + 3))) and stalled at 0.80, against 0.05 "
               "with logits; the first step's gradient norm was 0.12 against 0.58. Accuracy still rises, "
               "more slowly, which hides the bug. LL708_bad.py (5 classes) prints a first-layer "
               "gradient norm of 0.053 at step 1 (0.251 with logits) and `step 60: loss 1.5762, batch accuracy "
               "0.422` (good: `loss 0.9767, batch accuracy 0.734`). Keras 3.15 (TensorFlow 2.21) warns once per "
               "call site, as a UserWarning: \"`sparse_categorical_crossentropy` received `from_logits=True`, "
               "but the `output` argument was produced by a Softmax activation and thus does not represent "
               "logits. Was this intended?\" (`categorical_crossentropy` likewise); "
               "LL708_keras_bad.py shows it.")
    remedy = ("Pass the logits: remove the final `nn.Softmax` / `softmax` (apply softmax only where "
              "probabilities are needed, at inference). To keep a probability output, end the model in "
              "`nn.LogSoftmax(dim=1)` and use `nn.NLLLoss`. Keras: either drop the final softmax (keep "
              "`from_logits=True`) or keep it and drop `from_logits=True`.")
    flagged = (
        Example("""
import torch
import torch.nn as nn
import torch.nn.functional as F
class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(784, 256), nn.ReLU())
        self.head = nn.Linear(256, 10)
    def forward(self, x):
        features = self.encoder(x)
        return F.softmax(self.head(features), dim=-1), features
net = Classifier()
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam(net.parameters())
for x, y in train_loader:
    probs, _ = net(x)
    loss = criterion(probs, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
""", expect="""
17:22-17:27 cross-entropy applied to softmax output (from `F.softmax(self.head(features), dim=-1)`)
    help: pass the logits, not the output of `F.softmax(self.head(features), dim=-1)`
    note: `CrossEntropyLoss` applies log_softmax itself, so this computes the loss of
        softmax(softmax(logits)): it cannot approach 0 and its gradients are squashed
"""),
        Example("""
import keras
import tensorflow as tf
class Classifier(keras.Model):
    def __init__(self, num_classes):
        super().__init__()
        self.hidden = keras.layers.Dense(128, activation="relu")
        self.head = keras.layers.Dense(num_classes)
    def call(self, x):
        return tf.nn.softmax(self.head(self.hidden(x)))
class Trainer:
    def __init__(self):
        self.model = Classifier(10)
        self.loss_fn = keras.losses.CategoricalCrossentropy(from_logits=True)
    def fit(self, dataset):
        for x, y in dataset:
            with tf.GradientTape() as tape:
                loss = self.loss_fn(y, self.model(x, training=True))
            grads = tape.gradient(loss, self.model.trainable_variables)
""", expect="""
13:24-13:78 `CategoricalCrossentropy(from_logits=True)` applied to softmax output
    help: drop the softmax (`tf.nn.softmax(self.head(self.hidden(x)))`) or `from_logits=True`
    note: `self.model(x, training=True)` at line 17 comes out of that softmax. Keras on TensorFlow (3,
        and 2) warns and uses its input where it can see it; where it cannot (eager `tf.nn.softmax`, a
        cast prediction, the JAX/PyTorch backends) softmax is applied twice
"""),
        Example("""
import torch.nn as nn
model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10), nn.Softmax(dim=1))
criterion = nn.CrossEntropyLoss()
for images, labels in train_loader:
    loss = criterion(model(images), labels)
    loss.backward()
""", expect="""
5:22-5:35 cross-entropy applied to softmax output (from `nn.Softmax(dim=1)`)
    help: pass the logits, not the output of `nn.Softmax(dim=1)`
    note: `CrossEntropyLoss` applies log_softmax itself, so this computes the loss of
        softmax(softmax(logits)): it cannot approach 0 and its gradients are squashed
"""),
        Example("""
import torch
import torch.nn.functional as F
logits = model(x)
probs = F.softmax(logits, dim=-1)
loss = F.cross_entropy(probs, y)
loss.backward()
""", expect="""
5:24-5:29 cross-entropy applied to softmax output (from `F.softmax(logits, dim=-1)`)
    help: pass the logits, not the output of `F.softmax(logits, dim=-1)`
    note: `CrossEntropyLoss` applies log_softmax itself, so this computes the loss of
        softmax(softmax(logits)): it cannot approach 0 and its gradients are squashed
"""),
        Example("""
import torch
from torch import nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 3)
    def forward(self, x):
        return torch.softmax(self.fc(x), dim=1)
net = Net().to(device)
loss_fn = torch.nn.modules.loss.CrossEntropyLoss()
out = net(inputs)
loss = loss_fn(out.view(-1, 3), targets)
loss.backward()
optimizer.step()
""", expect="""
12:16-12:31 cross-entropy applied to softmax output (from `torch.softmax(self.fc(x), dim=1)`)
    help: pass the logits, not the output of `torch.softmax(self.fc(x), dim=1)`
    note: `CrossEntropyLoss` applies log_softmax itself, so this computes the loss of
        softmax(softmax(logits)): it cannot approach 0 and its gradients are squashed
"""),
        Example("""
import torch
from torch.nn.functional import cross_entropy
loss = cross_entropy(torch.nn.Softmax(dim=1)(model(x)), y) + cross_entropy(logits.softmax(1), y)
loss.backward()
""", expect="""
3:22-3:55 cross-entropy applied to softmax output (from `torch.nn.Softmax(dim=1)`)
    help: pass the logits, not the output of `torch.nn.Softmax(dim=1)`
    note: `CrossEntropyLoss` applies log_softmax itself, so this computes the loss of
        softmax(softmax(logits)): it cannot approach 0 and its gradients are squashed
3:76-3:93 cross-entropy applied to softmax output (from `logits.softmax(1)`)
    help: pass the logits, not the output of `logits.softmax(1)`
    note: `CrossEntropyLoss` applies log_softmax itself, so this computes the loss of
        softmax(softmax(logits)): it cannot approach 0 and its gradients are squashed
"""),
        Example("""
import torch
from torch import nn

class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 3), nn.Softmax(dim=-1))

    def forward(self, x):
        return self.net(x)

def train(loader):
    model = Classifier()
    criterion = nn.CrossEntropyLoss()
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
""", expect="""
16:26-16:34 cross-entropy applied to softmax output (from `nn.Softmax(dim=-1)`)
    help: pass the logits, not the output of `nn.Softmax(dim=-1)`
    note: `CrossEntropyLoss` applies log_softmax itself, so this computes the loss of
        softmax(softmax(logits)): it cannot approach 0 and its gradients are squashed
"""),
        Example("""
import tensorflow as tf
model = tf.keras.Sequential([
    tf.keras.layers.Dense(64, activation="relu"),
    tf.keras.layers.Dense(10, activation="softmax"),
])
model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
model.fit(x_train, y_train, epochs=5)
""", expect="""
6:38-6:101 `SparseCategoricalCrossentropy(from_logits=True)` applied to softmax output
    help: drop the softmax (`tf.keras.layers.Dense(10, activation="softmax")`) or `from_logits=True`
    note: the model compiled at line 6 comes out of that softmax. Keras on TensorFlow (3, and 2) warns
        and uses its input where it can see it; where it cannot (eager `tf.nn.softmax`, a cast
        prediction, the JAX/PyTorch backends) softmax is applied twice
"""),
        Example("""
import keras
import tensorflow as tf
class Classifier(keras.Model):
    def __init__(self, num_classes):
        super().__init__()
        self.hidden = keras.layers.Dense(128, activation="relu")
        self.logits = keras.layers.Dense(num_classes)
    def call(self, x):
        return tf.nn.softmax(self.logits(self.hidden(x)))
model = Classifier(10)
loss_fn = keras.losses.CategoricalCrossentropy(from_logits=True)
optimizer = keras.optimizers.Adam()
for x, y in dataset:
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
""", expect="""
11:11-11:65 `CategoricalCrossentropy(from_logits=True)` applied to softmax output
    help: drop the softmax (`tf.nn.softmax(self.logits(self.hidden(x)))`) or `from_logits=True`
    note: `model(x, training=True)` at line 15 comes out of that softmax. Keras on TensorFlow (3, and 2)
        warns and uses its input where it can see it; where it cannot (eager `tf.nn.softmax`, a cast
        prediction, the JAX/PyTorch backends) softmax is applied twice
"""),
        Example("""
import tensorflow as tf
from tensorflow.keras import layers
inputs = tf.keras.Input(shape=(32,))
x = layers.Dense(64, activation="relu")(inputs)
x = layers.Dense(5)(x)
outputs = layers.Activation("softmax")(x)
model = tf.keras.Model(inputs, outputs)
@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        per_example = tf.keras.losses.sparse_categorical_crossentropy(y, model(x), from_logits=True)
        loss = tf.reduce_mean(per_example)
    return tape.gradient(loss, model.trainable_variables)
""", expect="""
11:23-11:101 `sparse_categorical_crossentropy(from_logits=True)` applied to softmax output
    help: drop the softmax (`layers.Activation("softmax")`) or `from_logits=True`
    note: `model(x)` at line 11 comes out of that softmax. Keras on TensorFlow (3, and 2) warns and uses
        its input where it can see it; where it cannot (eager `tf.nn.softmax`, a cast prediction, the
        JAX/PyTorch backends) softmax is applied twice
"""),
    )
    not_flagged = (
        Example("""
import torch.nn as nn
import torch.nn.functional as F
model = nn.Sequential(nn.Linear(784, 10), nn.LogSoftmax(dim=1))
loss = F.nll_loss(model(x), y)
probs = F.softmax(model(x), dim=1)
"""),
        Example("""
import torch
import torch.nn.functional as F
with torch.no_grad():
    pseudo = F.softmax(teacher(x_unlabeled), dim=1).argmax(dim=1)
loss = F.cross_entropy(student(x_unlabeled), pseudo)
"""),
        Example("""
import torch
import torch.nn.functional as F
soft_targets = torch.softmax(teacher_logits / T, dim=1)
loss = F.cross_entropy(student_logits, soft_targets)
accuracy = (F.softmax(student_logits, 1).argmax(1) == y).float().mean()
"""),
        Example("""
import torch
import torch.nn.functional as F
probs = F.softmax(logits, dim=1)
loss = F.cross_entropy(torch.log(probs + 1e-8), y)
"""),
        Example("""
import tensorflow as tf
model = tf.keras.Sequential([tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(10)])
model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x_train, y_train)
probability_model = tf.keras.Sequential([model, tf.keras.layers.Softmax()])
probability_model.compile(loss="sparse_categorical_crossentropy")
"""),
        Example("""
import tensorflow as tf
import keras
teacher = keras.Sequential([keras.layers.Dense(10)])
student = keras.Sequential([keras.layers.Dense(10)])
loss_fn = keras.losses.CategoricalCrossentropy(from_logits=True)
with tf.GradientTape() as tape:
    soft_targets = tf.nn.softmax(teacher(x) / temperature)
    loss = loss_fn(soft_targets, student(x))
    probs = tf.nn.softmax(student(x))
    confidence = tf.reduce_max(probs, axis=-1)
"""),
    )

    def visit_Module(self, node: cst.Module) -> None:
        seen: set[cst.CSTNode] = set()
        for use in self.ctx.keras.loss_uses:
            loss = use.loss
            if (loss.from_logits is not True or loss.kind == "binary" or use.output.activation != "softmax"
                    or loss.node in seen):
                continue
            seen.add(loss.node)
            self._report_keras(use)

    def _report_keras(self, use: LossUse) -> None:
        ctx = self.ctx
        applied = (f"the model compiled at line {ctx.line_of(use.site)}" if use.prediction is None else
                   f"`{ctx.snippet(use.prediction, 30)}` at line {ctx.line_of(use.site)}")
        self.report(use.loss.node, f"`{use.loss.name}(from_logits=True)` applied to softmax output",
                    help=f"drop the softmax (`{ctx.snippet(use.output.node, 50)}`) or `from_logits=True`",
                    note=f"{applied} comes out of that softmax. Keras on TensorFlow (3, and 2) warns and uses its "
                         "input where it can see it; where it cannot (eager `tf.nn.softmax`, a cast prediction, the "
                         "JAX/PyTorch backends) softmax is applied twice")

    def visit_Call(self, node: cst.Call) -> None:
        prediction = self._cross_entropy_input(node)
        if prediction is None:
            return
        softmax = self._softmax_source(prediction, node)
        if softmax is None:
            return
        where = self.ctx.snippet(softmax.node, 40)
        self.report(prediction, f"cross-entropy applied to softmax output (from `{where}`)",
                    help=f"pass the logits, not the output of `{where}`",
                    note="`CrossEntropyLoss` applies log_softmax itself, so this computes the loss of "
                         "softmax(softmax(logits)): it cannot approach 0 and its gradients are squashed")

    def _cross_entropy_input(self, call: cst.Call) -> cst.BaseExpression | None:
        """The input (prediction) of a torch cross-entropy loss computed by `call`: `F.cross_entropy(...)`,
        or a `CrossEntropyLoss` module called (a loss object is a module, also when passed as a parameter)."""
        if self.ctx.names.callee(call) in _TORCH_CROSS_ENTROPY_FUNCTIONS:
            return argument(call, 0, "input")
        module = self.ctx.modules.forward_of(call)
        if module is not None and module.qualname in _TORCH_CROSS_ENTROPY_CLASSES:
            return argument(call, 0, "input")
        return None

    def _softmax_source(self, prediction: cst.BaseExpression, at: cst.CSTNode) -> Activation | None:
        activation = self.ctx.modules.activation_of(prediction, at)
        return activation if activation is not None and activation.kind == "softmax" else None
