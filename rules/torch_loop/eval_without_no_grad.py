"""LL703 eval-without-no-grad: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.iteration import loop_header
from lintloop.analysis.pytorch import NO_GRAD_CALLS
from lintloop.analysis.syntax import call_name, dotted, receiver
from lintloop.rule import Example, Rule
from lintloop.screen import Needs

# Contexts and decorators under which autograd records nothing (or, for `set_grad_enabled(cond)`,
# records only when the code says so).
_GRAD_OFF = NO_GRAD_CALLS | {"torch.set_grad_enabled", "torch.autograd.set_grad_enabled"}

# Decorators known not to change autograd's mode.
_PLAIN_DECORATORS = {"staticmethod", "classmethod", "property", "functools.wraps", "functools.cache",
                     "functools.lru_cache", "abc.abstractmethod", "typing.override", "torch.compile",
                     "torch.jit.script", "torch.jit.unused", "torch.jit.ignore", "contextlib.contextmanager"}


class EvalWithoutNoGrad(Rule):
    code = "LL703"
    name = "eval-without-no-grad"
    frameworks = ("pt",)
    kind = "perf"
    needs = Needs(file=(("call:eval",),), statement=(("loop",), ("call:eval", "name:eval")))
    probe = "mem"
    summary = ("A loop after `model.eval()` calls the model (or a submodule of it the file shows, "
               "`model.decoder(x)`) without `torch.no_grad()` / `torch.inference_mode()` "
               "(as a context or a decorator) and without any backward: autograd records the graph of every "
               "evaluation forward pass for nothing.")
    why = ("`eval()` only changes dropout and batch norm; it does not turn autograd off. Every forward pass still "
           "saves its activations for a backward that never comes: more memory and time per batch, and every "
           "output kept (predictions collected for a metric) keeps its whole graph alive.")
    symptom = ("LL703_bad.py: the evaluation loop's outputs carry `grad_fn`, and collecting them "
               "grows memory by the activations of every batch (measured in torch 2.13: about 6.5 MiB per batch for "
               "a small MLP); with `torch.no_grad()` the same loop holds only the outputs.")
    remedy = "Wrap evaluation in `with torch.no_grad():` (or `torch.inference_mode()`), or decorate the evaluation function with `@torch.no_grad()`."
    flagged = (
        Example("""
import torch
def evaluate(model, loader):
    model.eval()
    correct = 0
    for x, y in loader:
        correct += (model(x).argmax(1) == y).sum().item()
    return correct
"""),
        Example("""
import torch
model.eval()
preds = []
for batch in test_loader:
    logits = model(batch["input_ids"])
    preds.append(logits.argmax(-1))
"""),
        Example("""
import torch
class Evaluator:
    def run(self):
        self.model.eval()
        total = 0.0
        for x, y in self.loader:
            total += self.criterion(self.model(x), y).item()
        return total
"""),
        Example("""
import torch
from torch import nn
class AutoEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(784, 64), nn.ReLU())
        self.decoder = nn.Sequential(nn.Linear(64, 784), nn.Sigmoid())
    def forward(self, x):
        return self.decoder(self.encoder(x))
net = AutoEncoder()
net.eval()
samples = []
for z in latents:
    samples.append(net.decoder(z))
"""),
    )
    not_flagged = (
        Example("""
import torch
from torch import nn
class AutoEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(784, 64), nn.ReLU())
        self.decoder = nn.Sequential(nn.Linear(64, 784), nn.Sigmoid())
    def forward(self, x):
        return self.decoder(self.encoder(x))
    def sample_count(self):
        return 16
net = AutoEncoder()
net.eval()
for name, param in net.named_parameters():
    print(name, net.sample_count(), param.shape)
"""),
        Example("""
import torch
@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    return [model(x) for x, _ in loader]

def evaluate_loop(model, loader):
    model.eval()
    with torch.inference_mode():
        for x, y in loader:
            model(x)
"""),
        Example("""
import torch
def evaluate(model, loader):
    model.eval()
    for x, y in loader:
        x.requires_grad_(True)
        loss = criterion(model(x), y)
        loss.backward()
        adversarial.append(x.grad.sign())
"""),
        Example("""
import torch
def evaluate(model, loader):
    model.eval()
    for x, y in loader:
        yield model(x)

with torch.no_grad():
    for out in evaluate(net, val_loader):
        pass
"""),
        Example("""
import torch
model.eval()
model.train()
for x, y in loader:
    out = model(x)
"""),
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._reported: set[int] = set()

    def visit_Call(self, node: cst.Call) -> None:
        if call_name(node) != "eval" or node.args or receiver(node) is None:
            return
        model = dotted(receiver(node))
        scope = self.ctx.scope_of(node)
        if model is None or self._grad_off(node) or (
                isinstance(scope, cst.FunctionDef) and self._only_called_without_grad(scope)):
            return
        for loop in self.ctx.nodes_in_scope((cst.For, cst.While), scope).after(node):
            if self._switched_back(model, node, loop) or self.ctx.iteration.of(loop).of("backward"):
                return
            forward = next((c for c in self.ctx.calls.calls_in(loop) if self._runs(c, model)
                            and not self._grad_off(c)), None)
            if forward is not None and id(loop) not in self._reported:
                self._reported.add(id(loop))
                self.report(forward, f"`{self.ctx.snippet(forward)}` in `{loop_header(self.ctx, loop)}` runs after "
                                     f"`{self.ctx.snippet(node)}` with autograd on: every batch records a graph and "
                                     "keeps its activations for a backward that never comes; wrap the loop in "
                                     "`with torch.no_grad():` (or `torch.inference_mode()`)")
                return

    def _runs(self, call: cst.Call, model: str) -> bool:
        """`call` runs the model (`model(x)`) or a submodule of it (`model.decoder(x)`, where the file shows
        `decoder` is a module: eval mode reached it too)."""
        func = call.func
        if dotted(func) == model:
            return True
        return isinstance(func, cst.Attribute) and dotted(func.value) == model and \
            self.ctx.modules.value(func, call) is not None

    def _grad_off(self, node: cst.CSTNode) -> bool:
        """Under a no_grad-like `with`, or in a function decorated with one."""
        for ancestor in self.ctx.ancestors(node):
            if isinstance(ancestor, cst.With) and any(self._turns_grad_off(item.item) for item in ancestor.items):
                return True
            if isinstance(ancestor, cst.FunctionDef) and any(self._may_turn_grad_off(d.decorator)
                                                             for d in ancestor.decorators):
                return True
        return False

    def _turns_grad_off(self, expr: cst.BaseExpression) -> bool:
        target = expr.func if isinstance(expr, cst.Call) else expr
        return self.ctx.names.qualname(target) in _GRAD_OFF

    def _may_turn_grad_off(self, decorator: cst.BaseExpression) -> bool:
        """A grad-off decorator, or one this file cannot see into (a project's `@smart_inference_mode()`)."""
        target = decorator.func if isinstance(decorator, cst.Call) else decorator
        return self._turns_grad_off(decorator) or (self.ctx.names.qualname(target) or dotted(target) or "") \
            not in _PLAIN_DECORATORS

    def _only_called_without_grad(self, fn: cst.FunctionDef) -> bool:
        sites = self.ctx.calls.call_sites.get(fn, [])
        return bool(sites) and all(self._grad_off(site) or self._consumed_without_grad(site) for site in sites)

    def _consumed_without_grad(self, site: cst.Call) -> bool:
        """A generator's call whose loop runs under no_grad: `with no_grad(): for out in evaluate(...)`."""
        loop = self.ctx.parents.get(site)
        return isinstance(loop, cst.For) and loop.iter is site and self._grad_off(loop)

    def _switched_back(self, model: str, evaluation: cst.Call, loop: cst.CSTNode) -> bool:
        """`model.train()` between the `eval()` and the loop, or inside the loop."""
        # From the `eval()` to the loop's end: the calls between them, and those inside the loop.
        return any(receiver(c) is not None and dotted(receiver(c)) == model
                   for c in self.ctx.calls.named("train").between(self.ctx.order[evaluation], self.ctx.subtree_end[loop]))
