"""LL704 missing-train-mode: the rule, its documentation and its examples."""

from __future__ import annotations

from functools import cached_property

import libcst as cst

from lintloop.analysis.iteration import Event, Iteration, loop_header
from lintloop.analysis.modules import UNKNOWN_MODE_DEPENDENCE, ModeDependence
from lintloop.analysis.nodes import call_name, dotted, receiver, walk
from lintloop.rule import Example, LoopRule
from lintloop.screen import Needs


# What evaluation mode does to each kind of mode-dependent part, for the message.
_EVAL_EFFECTS = {
    "dropout": "stays off",
    "batch_norm": "normalises with its running statistics and stops updating them",
    "random_activation": "stops sampling its random slopes",
    "training_flag": "sees `self.training == False`",
}


class MissingTrainMode(LoopRule):
    code = "LL704"
    name = "missing-train-mode"
    description = "training continues after `model.eval()` without `model.train()`"
    frameworks = ("pt",)
    needs = Needs(file=(("call:eval",), ("call:backward", "call:manual_backward")), statement=(("loop",),))
    probe = "effect"
    summary = ("A training loop in which `model.eval()` runs (directly or in a same-file helper) and a later "
               "training step (a backward and an optimizer step or update by hand) can run before `model.train()`: "
               "validation inside the epoch loop with no `train()` in it, or validation every N steps while "
               "`train()` is only called at the epoch's start. Not reported when the file shows the model has "
               "nothing the mode changes (no Dropout, no BatchNorm or InstanceNorm with running statistics, no code "
               "reading `self.training`); the message names the layer that the mode changes where it knows it.")
    why = ("`eval()` switches dropout off and makes batch norm use (and stop updating) its running statistics. "
           "Training steps after it, until `train()`, train a different network: no dropout regularisation, "
           "frozen batch-norm statistics.")
    symptom = ("LL704_bad.py: after the first validation, every training forward runs with its "
               "Dropout and BatchNorm modules in eval mode (the probe sees `training == False` during steps); "
               "nothing warns, the model just generalises worse.")
    remedy = "Call `model.train()` after each evaluation, before the next training step (or at the top of the epoch's training function)."
    flagged = (
        Example("""
import torch
model.train()
for epoch in range(epochs):
    for x, y in train_loader:
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        val_loss = sum(criterion(model(x), y).item() for x, y in val_loader)
""", expect="""
8:5-8:17 `model.eval()` leaves `model` in eval mode for the next training step
    help: call `model.train()` after evaluating, before the next training step
    note: the next training step (`criterion(model(x), y).backward()`) in `for epoch in range(epochs)`
        can run before any `model.train()`: dropout stays off and batch norm stops updating its
        statistics
"""),
        Example("""
import torch
def evaluate(model, loader):
    model.eval()
    with torch.no_grad():
        return sum(criterion(model(x), y).item() for x, y in loader)

for epoch in range(epochs):
    net.train()
    for step, (x, y) in enumerate(train_loader):
        optimizer.zero_grad()
        criterion(net(x), y).backward()
        optimizer.step()
        if step % 500 == 0:
            evaluate(net, val_loader)
""", expect="""
14:13-14:38 `evaluate(net, val_loader)` leaves `net` in eval mode for the next training step
    help: call `net.train()` after evaluating, before the next training step
    note: it calls `model.eval()`, and the next training step (`criterion(net(x), y).backward()`) in
        `for step, (x, y) in enumerate(train_loader)` can run before any `net.train()`: dropout stays
        off and batch norm stops updating its statistics
"""),
        Example("""
import torch
class Trainer:
    def validate(self):
        self.model.eval()
        with torch.no_grad():
            for batch in self.val_loader:
                self.model(batch)

    def fit(self):
        self.model.train()
        for epoch in range(self.epochs):
            for batch in self.train_loader:
                self.optimizer.zero_grad()
                self.model(batch).loss.backward()
                self.optimizer.step()
            self.validate()
""", expect="""
16:13-16:28 `self.validate()` leaves `self.model` in eval mode for the next training step
    help: call `self.model.train()` after evaluating, before the next training step
    note: it calls `self.model.eval()`, and the next training step (`self.model(batch).loss.backward()`)
        in `for epoch in range(self.epochs)` can run before any `self.model.train()`: dropout stays off
        and batch norm stops updating its statistics
"""),
        Example("""
import torch
from torch import nn
class Regressor(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Dropout(p=0.2))
        self.out = nn.Linear(width, 1)
    def forward(self, x):
        return self.out(self.body(x))

net = Regressor(width=32)
opt = torch.optim.Adam(net.parameters())
for epoch in range(20):
    pred = net(x_train)
    loss = nn.functional.mse_loss(pred, y_train)
    opt.zero_grad()
    loss.backward()
    opt.step()
    net.eval()
    with torch.inference_mode():
        val = nn.functional.mse_loss(net(x_val), y_val)
""", expect="""
19:5-19:15 `net.eval()` leaves `net` in eval mode for the next training step
    help: call `net.train()` after evaluating, before the next training step
    note: the next training step (`loss.backward()`) in `for epoch in range(20)` can run before any
        `net.train()`: `nn.Dropout(p=0.2)` at line 6 stays off
"""),
        Example("""
import torch
import torch.nn.functional as F
class Tagger(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 4)
    def forward(self, x):
        return self.proj(F.dropout(x, p=0.3, training=self.training))

def check(model, batch):
    model.eval()
    with torch.no_grad():
        return model(batch).argmax(-1)

tagger = Tagger()
tagger.train()
for step, (x, y) in enumerate(loader):
    loss = F.cross_entropy(tagger(x), y)
    loss.backward()
    with torch.no_grad():
        for p in tagger.parameters():
            p -= 0.01 * p.grad
            p.grad = None
    if step % 100 == 0:
        check(tagger, x)
""", expect="""
25:9-25:25 `check(tagger, x)` leaves `tagger` in eval mode for the next training step
    help: call `tagger.train()` after evaluating, before the next training step
    note: it calls `model.eval()`, and the next training step (`loss.backward()`) in `for step, (x, y)
        in enumerate(loader)` can run before any `tagger.train()`: `F.dropout(x, p=0.3,
        training=self.training)` at line 8 sees `self.training == False`
"""),
    )
    not_flagged = (
        Example("""
import torch
from torch import nn
class TwoLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(2, 16)
        self.act = nn.ReLU()
        self.out = nn.Linear(16, 1)
    def forward(self, x):
        return self.out(self.act(self.hidden(x)))

clf = TwoLayer().to(device)
opt = torch.optim.SGD(clf.parameters(), lr=0.1)
for epoch in range(100):
    loss = nn.functional.binary_cross_entropy_with_logits(clf(features).squeeze(), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
    clf.eval()
    with torch.inference_mode():
        held_out = clf(test_features)
"""),
        Example("""
import torch
from torch import nn
class SmallCNN(nn.Module):
    def __init__(self, channels, classes):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, channels, 3), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Sequential(nn.Flatten(), nn.LazyLinear(classes))
    def forward(self, x):
        return self.head(self.features(x))

def fit_epoch(model, loader, optimizer):
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

def score(model, loader):
    model.eval()
    with torch.no_grad():
        return sum((model(x).argmax(1) == y).sum().item() for x, y in loader)

cnn = SmallCNN(channels=8, classes=10)
optimizer = torch.optim.Adam(cnn.parameters())
for epoch in range(5):
    fit_epoch(model=cnn, loader=train_loader, optimizer=optimizer)
    score(model=cnn, loader=test_loader)
"""),
        Example("""
import torch
import torch.nn.functional as F
def plot_gradients(net, batch):
    net.eval()
    net.zero_grad()
    F.cross_entropy(net(batch[0]), batch[1]).backward()
    return {name: p.grad.norm().item() for name, p in net.named_parameters()}

for name, activation in activations.items():
    net = build_network(activation)
    net.train()
    show(plot_gradients(net, sample_batch))
"""),
        Example("""
import torch
for epoch in range(epochs):
    model.train()
    for x, y in train_loader:
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        val_loss = sum(criterion(model(x), y).item() for x, y in val_loader)
"""),
        Example("""
import torch
def evaluate(model, loader):
    model.eval()
    with torch.no_grad():
        total = sum(criterion(model(x), y).item() for x, y in loader)
    model.train()
    return total

for epoch in range(epochs):
    for step, (x, y) in enumerate(train_loader):
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
        if step % 500 == 0:
            evaluate(model, val_loader)
"""),
        Example("""
import torch
for epoch in range(epochs):
    for phase in ["train", "val"]:
        if phase == "train":
            model.train()
        else:
            model.eval()
        for x, y in loaders[phase]:
            optimizer.zero_grad()
            with torch.set_grad_enabled(phase == "train"):
                loss = criterion(model(x), y)
                if phase == "train":
                    loss.backward()
                    optimizer.step()
"""),
        Example("""
import torch
teacher.eval()
for epoch in range(epochs):
    for x, y in loader:
        teacher.eval()
        with torch.no_grad():
            soft = teacher(x)
        optimizer.zero_grad()
        distill_loss(student(x), soft).backward()
        optimizer.step()
"""),
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._reported: set[int] = set()

    def check_iteration(self, iteration: Iteration) -> None:
        events = iteration.events
        modes = [e for e in events if e.kind in ("train_mode", "eval_mode")]
        if not any(e.kind == "eval_mode" for e in modes) or not any(e.kind == "backward" for e in events) \
                or not iteration.updates_parameters:  # a backward only to look at gradients trains nothing
            return
        trained = self._trained_models
        # Two passes: the second is the next iteration, which starts in the mode the first left.
        in_eval: dict[str, tuple[Event, ModeDependence]] = {}
        for event in (*events, *events):
            if event.kind in ("train_mode", "eval_mode") and event.target in trained:
                if event.kind == "train_mode" or self._paired(event, modes):
                    in_eval.pop(event.target, None)
                    continue
                mode = self._mode_dependence(event)
                if mode.differs is not False:  # eval() cannot change a model with no Dropout or BatchNorm
                    in_eval[event.target] = (event, mode)
            elif event.kind == "backward" and in_eval:
                target, (evaluation, mode) = next(iter(in_eval.items()))
                self._report(evaluation, event, target, mode, iteration)
                return

    def _mode_dependence(self, evaluation: Event) -> ModeDependence:
        """How the model `eval()` switches behaves in the two modes, seen from the loop's own call."""
        try:
            model = cst.parse_expression(evaluation.target)
        except cst.ParserSyntaxError:
            return UNKNOWN_MODE_DEPENDENCE
        return self.ctx.modules.mode_dependence(model, evaluation.site)

    def _paired(self, event: Event, modes: list[Event]) -> bool:
        """`if phase == "train": model.train() else: model.eval()`: the mode follows a condition."""
        return any(other.kind == "train_mode" and other.target == event.target and other.is_exclusive_with(event)
                   for other in modes)

    @cached_property
    def _trained_models(self) -> set[str]:
        """Objects this file switches to training mode, or whose parameters an optimizer gets."""
        found = set()
        for call in self.ctx.nodes(cst.Call):
            owner = receiver(call)
            if call_name(call) == "train" and not call.args and owner is not None:
                found.add(dotted(owner))
            elif (self.ctx.names.callee(call) or "").startswith("torch.optim."):
                found.update(dotted(receiver(inner)) for inner in walk(call) if isinstance(inner, cst.Call)
                             and call_name(inner) in ("parameters", "named_parameters") and receiver(inner) is not None)
        for iteration in self.ctx.iteration.training_loops:
            found.update(e.target for e in iteration.events if e.kind == "train_mode")
        found.discard(None)
        return found

    def _report(self, evaluation: Event, backward: Event, target: str, mode: ModeDependence,
                iteration: Iteration) -> None:
        site = evaluation.site  # the call in this loop that leads to `eval()`
        if id(site) in self._reported:
            return
        self._reported.add(id(site))
        through = f"it calls `{self.ctx.snippet(evaluation.node, 40)}`, and " if site is not evaluation.node else ""
        if mode.differs and mode.part is not None:
            effect = (f"`{self.ctx.snippet(mode.part, 50)}` at line {self.ctx.line_of(mode.part)} "
                      f"{_EVAL_EFFECTS[mode.kind]}")
        else:
            effect = "dropout stays off and batch norm stops updating its statistics"
        self.report(site, f"`{self.ctx.snippet(site, 40)}` leaves `{target}` in eval mode for the next training step",
                    help=f"call `{target}.train()` after evaluating, before the next training step",
                    note=f"{through}the next training step (`{self.ctx.snippet(backward.node, 40)}`) in "
                         f"`{loop_header(self.ctx, iteration.loop)}` can run before any `{target}.train()`: {effect}")
