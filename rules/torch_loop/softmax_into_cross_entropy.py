"""LL708 softmax-into-cross-entropy: the rule, its documentation and its examples.

The PyTorch side: `CrossEntropyLoss` / `F.cross_entropy` on softmax output. The Keras side
(`*CategoricalCrossentropy(from_logits=True)` on a softmax output) is not written yet: `frameworks` says
"pt" until it is; it adds its loss spellings to `_cross_entropy_input` and its softmax sources
(a Keras model's last layer) to `_softmax_source`.
"""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.modules import Activation
from lintloop.analysis.syntax import argument
from lintloop.rule import Example, Rule
from lintloop.screen import Needs

_TORCH_CROSS_ENTROPY_FUNCTIONS = {"torch.nn.functional.cross_entropy"}
_TORCH_CROSS_ENTROPY_CLASSES = {"torch.nn.CrossEntropyLoss", "torch.nn.modules.loss.CrossEntropyLoss"}


class SoftmaxIntoCrossEntropy(Rule):
    code = "LL708"
    name = "softmax-into-cross-entropy"
    frameworks = ("pt",)
    # The unit computing the loss (a model's `forward` and `__init__` come with its class: lintloop.screen).
    # Only files that train (a backward, an optimizer step, a Lightning `training_step`): model libraries
    # compute a loss beside every attention softmax, and parsing all of them cost more than the rest of
    # the catalog together (bench/README.md).
    needs = Needs(file=(("text:softmax", "text:Softmax"), ("call:cross_entropy", "name:CrossEntropyLoss"),
                        ("call:backward", "call:manual_backward", "call:step", "name:training_step")),
                  statement=(("call:cross_entropy", "name:CrossEntropyLoss", "call:backward", "name:criterion",
                              "name:loss_fn"),))
    probe = "effect"
    summary = ("`nn.CrossEntropyLoss` / `F.cross_entropy` (any spelling) applied to softmax output: a "
               "`softmax` call (`F.softmax`, `torch.softmax`, `x.softmax(dim)`, `nn.Softmax()(x)`) whose "
               "result is the loss's input, or the output of a model whose last layer is `nn.Softmax` or "
               "whose `forward` returns a softmax (same file), in a file that trains (a backward, an optimizer "
               "step or a Lightning `training_step`).")
    why = ("`CrossEntropyLoss` expects logits: it applies `log_softmax` itself. Given probabilities, it "
           "computes the cross-entropy of softmax(softmax(logits)): the inputs lie in [0, 1], so the "
           "loss can never get near 0 and its gradients are squashed.")
    symptom = ("No error. Measured on a 4-class problem (torch 2.13, SGD, 200 steps): the loss cannot go "
               "below 0.744 (its floor for 4 classes: -log(e / (e + 3))) and stalled at 0.80, against 0.05 "
               "with logits; the first step's gradient norm was 0.12 against 0.58. Accuracy still rises, "
               "more slowly, which hides the bug. tests/fixtures/LL708_bad.py (5 classes) prints a first-layer "
               "gradient norm of 0.053 at step 1 (0.251 with logits) and `step 60: loss 1.5762, batch accuracy "
               "0.422` (good: `loss 0.9767, batch accuracy 0.734`).")
    remedy = ("Pass the logits: remove the final `nn.Softmax` / `softmax` (apply softmax only where "
              "probabilities are needed, at inference). To keep a probability output, end the model in "
              "`nn.LogSoftmax(dim=1)` and use `nn.NLLLoss`.")
    flagged = (
        Example("""
import torch.nn as nn
model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10), nn.Softmax(dim=1))
criterion = nn.CrossEntropyLoss()
for images, labels in train_loader:
    loss = criterion(model(images), labels)
    loss.backward()
"""),
        Example("""
import torch
import torch.nn.functional as F
logits = model(x)
probs = F.softmax(logits, dim=-1)
loss = F.cross_entropy(probs, y)
loss.backward()
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
"""),
        Example("""
import torch
from torch.nn.functional import cross_entropy
loss = cross_entropy(torch.nn.Softmax(dim=1)(model(x)), y) + cross_entropy(logits.softmax(1), y)
loss.backward()
""", count=2),
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
    )

    def visit_Call(self, node: cst.Call) -> None:
        prediction = self._cross_entropy_input(node)
        if prediction is None:
            return
        softmax = self._softmax_source(prediction, node)
        if softmax is None:
            return
        where = self.ctx.snippet(softmax.node, 40)
        self.report(prediction, f"cross-entropy applied to softmax output (from `{where}`): "
                                f"`CrossEntropyLoss` applies log_softmax itself, so this computes the loss of "
                                f"softmax(softmax(logits)) — it cannot approach 0 and its gradients are squashed; "
                                f"pass the logits")

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
