"""LL105 detached-before-loss: the rule, its documentation and its examples."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import libcst as cst

from lintloop.analysis.nodes import call_name, children, dotted, keyword_arg, positional_args, receiver
from lintloop.rule import Example, Rule
from lintloop.screen import Needs

# Calls and attributes whose result holds the values of a tensor but not its graph.
_DETACHING_METHODS = {"detach", "detach_", "item", "numpy", "tolist"}
_DETACHING_FUNCTIONS = {"torch.tensor", "torch.Tensor", "torch.FloatTensor", "torch.LongTensor", "torch.from_numpy"}
_DETACHING_BUILTINS = ("float", "int")
# Builtins that return (containers of) their arguments' values.
_PASSING_BUILTINS = ("sum", "max", "min", "abs", "list", "tuple", "zip", "enumerate", "sorted", "reversed", "len",
                     "range", "round", "pow", "dict", "map", "iter", "next")
# Tensor (and container) methods whose result depends only on the tensor and the arguments: any other
# method may read trainable state (`agent.log_prob(s, a)`), so its result counts as live.
_TENSOR_METHODS = {
    "mean", "sum", "prod", "pow", "sqrt", "exp", "log", "log1p", "abs", "neg", "square", "clamp", "clip", "gather",
    "max", "min", "amax", "amin", "argmax", "argmin", "topk", "sort", "cumsum", "logsumexp", "norm", "std", "var",
    "view", "view_as", "reshape", "reshape_as", "squeeze", "unsqueeze", "flatten", "permute", "transpose", "t",
    "expand", "expand_as", "repeat", "index_select", "masked_fill", "masked_select", "split", "chunk", "narrow",
    "float", "double", "half", "bfloat16", "long", "int", "bool", "to", "cpu", "cuda", "type", "type_as",
    "contiguous", "clone", "softmax", "log_softmax", "sigmoid", "tanh", "relu", "mul", "add", "sub", "div",
    "matmul", "mm", "bmm", "dot", "scale", "get", "values", "keys", "items", "copy",
}
_PARAMETER_METHODS = {"parameters", "named_parameters"}
_APPENDING_METHODS = {"append", "extend", "insert"}
# Objects whose `backward(loss)` backpropagates the loss passed to it.
_BACKWARD_OWNERS = ("accelerate.Accelerator", "lightning.fabric.Fabric", "lightning.Fabric", "lightning_fabric.Fabric")
_MAX_DEPTH = 40


@dataclass
class _Paths:
    """What reaches a differentiated value: model outputs only through a detaching op, or a live path."""

    cut: list[tuple[cst.Call, cst.CSTNode]] = field(default_factory=list)  # (model output, the op detaching it)
    live: bool = False  # some path may carry a gradient from a trainable parameter
    revived: bool = False  # a detached value made a leaf again with `requires_grad=True`
    seen: set[tuple[cst.CSTNode, cst.CSTNode, cst.CSTNode | None]] = field(default_factory=set)


class DetachedBeforeLoss(Rule):
    code = "LL105"
    name = "detached-before-loss"
    description = "the model output detached before it reaches the loss"
    frameworks = ("pt",)
    needs = Needs(file=(("call:detach", "call:detach_", "call:item", "call:numpy", "call:tolist", "name:data",
                         "call:tensor", "call:Tensor", "call:FloatTensor", "call:LongTensor", "call:from_numpy",
                         "call:float", "call:int"),),
                  statement=(("call:backward", "call:manual_backward", "call:grad"),))
    probe = "grad/error"
    summary = ("The model output reaches a loss that is `.backward()`-ed only through `.detach()`, `.item()`, "
               "`.numpy()`, `.tolist()`, `.data`, `torch.tensor(t)` / `torch.tensor(list_of_outputs)` or "
               "`torch.from_numpy`, so no differentiable path from a trainable parameter reaches the loss.")
    why = ("These ops return the values of a tensor without its autograd graph. A loss built from them is "
           "a constant as far as autograd knows: nothing upstream — the model's parameters — gets a gradient.")
    symptom = ("LL105_bad.py (`criterion(logits.detach(), yb)`) stops at its first "
               "`loss.backward()`. Measured with torch 2.13: `loss.backward()` raises `RuntimeError: element 0 "
               "of tensors does not require grad and does not have a grad_fn` (for `.detach()`, `.data`, "
               "`torch.tensor(out)`, "
               "`torch.tensor([l.item() ...])`, `torch.from_numpy(...)`); `.numpy()` on the live output raises "
               "first: `Can't call numpy() on Tensor that requires grad`. Wrapped back with "
               "`torch.tensor(..., requires_grad=True)` it is worse: `backward()` runs, every parameter's "
               "`.grad` stays None, and the optimizer silently changes nothing.")
    remedy = ("Compute the loss from the model output itself, with torch ops. Detach only what must not be "
              "trained through: targets (TD targets, teacher outputs), logged copies (`loss.item()` after "
              "`backward()`).")
    flagged = (
        Example("""
import torch
import torch.nn.functional as F
class Trainer:
    def __init__(self, loader):
        self.model = torch.nn.Linear(10, 3)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.loader = loader
    def fit(self):
        for x, y in self.loader:
            loss = F.cross_entropy(self.model(x).detach(), y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
""", expect="""
10:36-10:58 the model output `self.model(x)` reaches the loss only through `.detach()`
    help: compute the loss from `self.model(x)` itself, without `.detach()`
    note: `.detach()` drops the autograd graph, so the loss differentiated by `loss.backward()` sends no
        gradient to the model's parameters: `backward()` raises `RuntimeError: element 0 of tensors does
        not require grad and does not have a grad_fn`
"""),
        Example("""
import torch
import torch.nn.functional as F
model = torch.nn.Linear(10, 3)
for x, y in loader:
    out = model(x).detach()
    loss = F.cross_entropy(out, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
""", expect="""
5:11-5:28 the model output `model(x)` reaches the loss only through `.detach()`
    help: compute the loss from `model(x)` itself, without `.detach()`
    note: `.detach()` drops the autograd graph, so the loss differentiated by `loss.backward()` sends no
        gradient to the model's parameters: `backward()` raises `RuntimeError: element 0 of tensors does
        not require grad and does not have a grad_fn`
"""),
        Example("""
import torch
from torch import nn
class Net(nn.Module):
    def forward(self, x):
        return x
def train_step(net, batch, opt):
    losses = [criterion(net(x), y).item() for x, y in batch]
    loss = torch.tensor(losses, requires_grad=True).mean()
    loss.backward()
    opt.step()
train_step(Net(), batch, opt)
""", expect="""
7:15-7:42 the model output `net(x)` reaches the loss only through `.item()`
    help: compute the loss from `net(x)` itself, without `.item()`
    note: `.item()` drops the autograd graph, so the loss differentiated by `loss.backward()` sends no
        gradient to the model's parameters: `backward()` runs on a fresh leaf made with
        `requires_grad=True`, but every parameter's `.grad` stays None and the optimizer changes nothing
"""),
        Example("""
import numpy as np
import torch
model = torch.nn.Sequential(torch.nn.Linear(4, 1))
criterion = torch.nn.MSELoss()
pred = model(x).data
loss = criterion(pred, y)
loss.backward()
""", expect="""
5:8-5:21 the model output `model(x)` reaches the loss only through `.data`
    help: compute the loss from `model(x)` itself, without `.data`
    note: `.data` drops the autograd graph, so the loss differentiated by `loss.backward()` sends no
        gradient to the model's parameters: `backward()` raises `RuntimeError: element 0 of tensors does
        not require grad and does not have a grad_fn`
"""),
        Example("""
import torch
net = torch.nn.Linear(4, 2)
scores = net(x).detach().cpu().numpy()
loss = torch.from_numpy(scores).pow(2).mean()
scaler.scale(loss).backward()
""", expect="""
3:10-3:25 the model output `net(x)` reaches the loss only through `.detach()`
    help: compute the loss from `net(x)` itself, without `.detach()`
    note: `.detach()` drops the autograd graph, so the loss differentiated by
        `scaler.scale(loss).backward()` sends no gradient to the model's parameters: `backward()` raises
        `RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn`
"""),
    )
    not_flagged = (
        Example("""
import numpy as np
import torch
from torch import nn
class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.log_alpha = torch.tensor(np.log(0.01))
        self.log_alpha.requires_grad = True
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=1e-3)

    def train_net(self, s):
        log_prob = self.fc(s).log_softmax(-1)[:, 0]
        self.alpha_optimizer.zero_grad()
        alpha_loss = -(self.log_alpha.exp() * (log_prob + target_entropy).detach()).mean()
        alpha_loss.backward()
        self.alpha_optimizer.step()
"""),
        Example("""
import torch
import torch.nn.functional as F
q_net = torch.nn.Linear(4, 2)
target_net = torch.nn.Linear(4, 2)
q = q_net(s).gather(1, a)
q_target = r + gamma * target_net(s2).max(1)[0].detach()
loss = F.mse_loss(q, q_target)
loss.backward()
"""),
        Example("""
import torch
import torch.nn.functional as F
student = torch.nn.Linear(8, 4)
teacher = torch.nn.Linear(8, 4)
for x, y in loader:
    loss = F.kl_div(F.log_softmax(student(x), 1), F.softmax(teacher(x).detach(), 1)) + F.cross_entropy(student(x), y)
    loss.backward()
    running += loss.item()
    history.append(loss.detach())
"""),
        Example("""
import torch
from torch import nn
G = nn.Sequential(nn.Linear(2, 2))
D = nn.Sequential(nn.Linear(2, 1))
criterion = nn.BCEWithLogitsLoss()
fake = G(z)
loss_d = criterion(D(real), ones) + criterion(D(fake.detach()), zeros)
loss_d.backward()
"""),
        Example("""
import torch
model = torch.nn.Linear(4, 2)
with torch.no_grad():
    target = model(x2).detach()
pred = model(x)
loss = (pred - target).pow(2).mean()
loss.backward()
"""),
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._reported: set[cst.CSTNode] = set()
        self._appends: dict[tuple[cst.CSTNode, str], list[cst.BaseExpression]] | None = None

    def visit_Call(self, node: cst.Call) -> None:
        target = self._differentiated(node)
        if target is None or self.ctx.modules.in_no_grad(node):
            return
        paths = _Paths()
        self._trace(target, node, None, paths, 0)
        if not paths.cut or paths.live:
            return
        output, cutter = paths.cut[0]
        if cutter in self._reported:
            return
        self._reported.add(cutter)
        if paths.revived:
            consequence = ("`backward()` runs on a fresh leaf made with `requires_grad=True`, but every parameter's "
                           "`.grad` stays None and the optimizer changes nothing")
        elif isinstance(cutter, cst.Call) and call_name(cutter) == "numpy" and receiver(cutter) is not None:
            consequence = "`.numpy()` on the output raises `Can't call numpy() on Tensor that requires grad`"
        else:
            consequence = ("`backward()` raises `RuntimeError: element 0 of tensors does not require grad and does "
                           "not have a grad_fn`")
        op = self._op(cutter)
        self.report(cutter, f"the model output `{self.ctx.snippet(output, 30)}` reaches the loss only through "
                            f"`{op}`",
                    help=f"compute the loss from `{self.ctx.snippet(output, 40)}` itself, without `{op}`",
                    note=f"`{op}` drops the autograd graph, so the loss differentiated by "
                         f"`{self.ctx.snippet(node, 40)}` sends no gradient to the model's parameters: {consequence}")

    def _differentiated(self, call: cst.Call) -> cst.BaseExpression | None:
        """The tensor a `backward` / `autograd.grad` call differentiates."""
        name = call_name(call)
        owner = receiver(call)
        if self.ctx.names.callee(call) in ("torch.autograd.backward", "torch.autograd.grad"):
            return positional_args(call)[0] if positional_args(call) else None
        if owner is None or name not in ("backward", "manual_backward"):
            return None
        made = self.ctx.flow.constructed_by(owner, call)
        label = (dotted(owner) or "").rsplit(".", 1)[-1]
        if name == "manual_backward" or (made is not None and made[1] in _BACKWARD_OWNERS) or label in (
                "accelerator", "fabric"):
            return positional_args(call)[0] if positional_args(call) else None
        return owner

    def _op(self, cutter: cst.CSTNode) -> str:
        if isinstance(cutter, cst.Attribute):
            return ".data"
        if isinstance(cutter, cst.Call) and receiver(cutter) is not None and self.ctx.names.callee(cutter) is None:
            return f".{call_name(cutter)}()"
        return self.ctx.snippet(cutter.func) + "(...)" if isinstance(cutter, cst.Call) else self.ctx.snippet(cutter)

    # ----- tracing what reaches the differentiated value ------------------------------------
    def _trace(self, expr: cst.CSTNode, at: cst.CSTNode, cutter: cst.CSTNode | None, paths: _Paths,
               depth: int) -> None:
        """Record into `paths` the model outputs reaching `expr` (through `cutter`, when a detaching op lies on
        the way) and whether a live path does."""
        if depth > _MAX_DEPTH:
            paths.live = paths.live or cutter is None
            return
        if (expr, at, cutter) in paths.seen:
            return  # `y = x + x`: each part once
        paths.seen.add((expr, at, cutter))
        if isinstance(expr, cst.Name):
            self._trace_name(expr, at, cutter, paths, depth)
        elif isinstance(expr, cst.Attribute):
            self._trace_attribute(expr, at, cutter, paths, depth)
        elif isinstance(expr, cst.Call):
            self._trace_call(expr, at, cutter, paths, depth)
        elif isinstance(expr, (cst.Comparison, cst.Lambda, cst.BaseString, cst.Integer, cst.Float)):
            return  # no gradient flows through a comparison; literals hold none
        else:  # arithmetic, subscripts, containers, comprehensions: their parts
            for child in children(expr):
                if isinstance(child, (cst.BaseExpression, cst.Arg, cst.BaseElement, cst.BaseDictElement,
                                      cst.CompFor, cst.SubscriptElement, cst.Index, cst.Slice)):
                    self._trace(child.value if isinstance(child, cst.Arg) else child, at, cutter, paths, depth + 1)

    def _trainable(self, name: str) -> bool:
        """Is `name` made a trainable leaf where it is not created: `x.requires_grad = True`,
        `x.requires_grad_()` (a temperature `log_alpha` of SAC, a Lagrange multiplier)?"""
        return True in self.ctx.torch.requires_grad_set.get(name, ())

    def _trace_name(self, expr: cst.Name, at: cst.CSTNode, cutter: cst.CSTNode | None, paths: _Paths,
                    depth: int) -> None:
        if cutter is None and self._trainable(expr.value):
            paths.live = True
            return
        binding = self.ctx.flow.last_binding(expr.value, at)
        if binding is None:
            return  # a builtin, an import, or data bound where we cannot see (a comprehension's variable)
        if binding.augmented:  # `loss += term`: the term, and what `loss` held before
            self._trace(expr, binding.node, cutter, paths, depth + 1)
        node = binding.node
        if binding.value is not None and not isinstance(node, cst.WithItem):
            self._trace(binding.value, node, cutter, paths, depth + 1)
        elif isinstance(node, cst.Assign):  # `out, hidden = model(x)`
            self._trace(node.value, node, cutter, paths, depth + 1)
        elif isinstance(node, cst.For) and cutter is None and any(
                call_name(c) in _PARAMETER_METHODS for c in self.ctx.nodes_within(cst.Call, node.iter)):
            paths.live = True  # `for p in model.parameters(): reg += p.norm()`
        # parameters, loop variables over data, `with` targets: data, not trainable
        for item in self._appended(expr.value, at):  # `outputs = []` then `outputs.append(model(x))`
            self._trace(item, item, cutter, paths, depth + 1)

    def _appended(self, name: str, at: cst.CSTNode) -> list[cst.BaseExpression]:
        """What `name.append(...)` / `extend` / `insert` calls put into the list `name`, in `at`'s scope."""
        if self._appends is None:
            self._appends = defaultdict(list)
            for call in self.ctx.nodes(cst.Call):
                owner = receiver(call)
                if call_name(call) in _APPENDING_METHODS and positional_args(call) and isinstance(owner, cst.Name):
                    self._appends[(self.ctx.scope_of(call), owner.value)].append(positional_args(call)[-1])
        return self._appends.get((self.ctx.scope_of(at), name), [])

    def _trace_attribute(self, expr: cst.Attribute, at: cst.CSTNode, cutter: cst.CSTNode | None, paths: _Paths,
                         depth: int) -> None:
        if expr.attr.value == "data":
            self._trace(expr.value, at, expr, paths, depth + 1)
            return
        if self.ctx.names.qualname(expr) is not None or self.ctx.modules.is_module(expr, at):
            return  # `torch.float32`; a module object (its calls are what counts)
        name = dotted(expr) or ""
        if cutter is None and name and self._trainable(name):
            paths.live = True
            return
        if name.startswith("self."):
            binding = self.ctx.flow.last_binding(name, at)
            if binding is not None and binding.value is not None:
                self._trace(binding.value, binding.node, cutter, paths, depth + 1)
            elif cutter is None:
                paths.live = True  # `self.weight`: may be a trainable parameter
            return
        self._trace(expr.value, at, cutter, paths, depth + 1)  # `outputs.loss`, `x.T`

    def _trace_call(self, call: cst.Call, at: cst.CSTNode, cutter: cst.CSTNode | None, paths: _Paths,
                    depth: int) -> None:
        ctx = self.ctx
        qualname = ctx.names.callee(call)
        owner = receiver(call)
        arguments = [a.value for a in call.args]
        if (qualname is None and owner is not None and call_name(call) in _DETACHING_METHODS
                or qualname in _DETACHING_FUNCTIONS
                or any(ctx.names.is_builtin(call.func, b) for b in _DETACHING_BUILTINS)):
            grad_leaf = keyword_arg(call, "requires_grad")
            revived = isinstance(grad_leaf, cst.Name) and grad_leaf.value == "True"
            found = _Paths(seen=paths.seen)
            for part in ([owner] if owner is not None and qualname is None else positional_args(call)[:1]):
                self._trace(part, at, call, found, depth + 1)  # the innermost op is the one to name
            paths.cut += found.cut
            paths.revived = paths.revived or (revived and bool(found.cut))
            paths.live = paths.live or (revived and not found.cut and cutter is None)
            return
        module = ctx.modules.forward_of(call)
        if module is not None and not module.parameterless:
            if ctx.modules.in_no_grad(call):
                return  # computed without a graph: nothing to detach
            if cutter is None:
                paths.live = True
            else:
                paths.cut.append((call, cutter))
            return  # what a model does with its inputs (`D(fake.detach())`) does not cut its own parameters
        if owner is not None and qualname is None and ctx.modules.is_module(owner, at):
            if cutter is None:  # `model.compute_loss(x)`, `model.parameters()`
                paths.live = True
            else:
                paths.cut.append((call, cutter))
            return
        if qualname is not None and (qualname.startswith("numpy.") or qualname.startswith("math.")):
            for part in arguments:
                self._trace(part, at, cutter or call, paths, depth + 1)
            return
        pure = (module is not None or (qualname or "").startswith("torch.") or ctx.losses.loss_object(call.func, call)
                or any(ctx.names.is_builtin(call.func, b) for b in _PASSING_BUILTINS)
                or (owner is not None and qualname is None and call_name(call) in _TENSOR_METHODS))
        if qualname in ("torch.nn.Parameter", "torch.nn.parameter.Parameter") or (
                pure and isinstance(keyword_arg(call, "requires_grad"), cst.Name)
                and keyword_arg(call, "requires_grad").value == "True"):
            paths.live = paths.live or cutter is None  # a trainable leaf
        if not pure:
            paths.live = paths.live or cutter is None  # an unknown function: it may use trainable parameters
        for part in ([owner] if owner is not None and qualname is None else []) + arguments:
            self._trace(part, at, cutter, paths, depth + 1)
