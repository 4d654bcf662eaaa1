"""LL303 retain-graph-in-loop: the rule, its documentation and its examples."""

from __future__ import annotations

import builtins

import libcst as cst

from lintloop.analysis.nodes import argument, call_name, calls_within, dotted, keyword_arg, names_in, receiver
from lintloop.analysis.training import StepSite
from lintloop.rule import Example, Rule
from lintloop.screen import Needs

# Where each gradient call takes `retain_graph` and `create_graph` positionally.
_TORCH_GRADIENT_CALLS = {"torch.autograd.backward": (2, 3), "torch.autograd.grad": (3, 4)}
_BACKWARD_POSITIONS = (1, 2)  # Tensor.backward(gradient, retain_graph, create_graph)
# Objects whose `backward(loss, **kwargs)` calls `loss.backward(**kwargs)`.
_BACKWARD_OWNERS = ("accelerator", "fabric")
# Methods that keep, or derive from, the tensor they are called on: no new forward pass.
_TENSOR_METHODS = {"to", "cuda", "cpu", "float", "double", "half", "bfloat16", "long", "int", "view", "reshape",
                   "detach", "clone", "contiguous", "squeeze", "unsqueeze", "permute", "transpose", "flatten",
                   "sum", "mean", "item", "numpy", "tolist", "requires_grad_", "size", "dim", "parameters",
                   "named_parameters", "state_dict", "train", "eval", "zero_grad", "expand", "repeat", "split",
                   "chunk", "unbind", "t", "norm", "pow", "abs", "exp", "log", "sqrt"}
# A differentiated value that is one of these of an earlier value is that earlier value's graph.
_SAME_GRAPH_METHODS = {"sum", "mean", "squeeze", "view", "reshape", "flatten", "float", "double"}
_BUILTINS = frozenset(dir(builtins))
# Libraries whose objects' methods run no forward pass of a model.
_NOT_MODELS = ("accelerate.", "lightning.fabric.", "lightning.Fabric", "lightning_fabric.", "torch.utils.",
               "torch.optim.", "torch.amp.", "torch.cuda.amp.", "numpy.", "random.")
_MAX_DEPTH = 4


def _literal(expr: cst.BaseExpression | None) -> str | None:
    return expr.value if isinstance(expr, cst.Name) and expr.value in ("True", "False", "None") else None


class RetainGraphInLoop(Rule):
    code = "LL303"
    name = "retain-graph-in-loop"
    description = "`retain_graph=True` with no second backward"
    frameworks = ("pt",)
    kind = "perf"
    needs = Needs(file=(("text:retain_graph",),), statement=(("call:backward", "call:grad"),))
    probe = "mem"
    summary = ("`.backward(retain_graph=True)` (or `torch.autograd.backward` / `torch.autograd.grad` with "
               "`retain_graph=True`) in a training loop (one that updates parameters: an optimizer step or an update "
               "by hand; a `.backward()` only to look at gradients is not training) — or a train-step function "
               "called from one — where no "
               "second backward through the same graph follows in the iteration. Not flagged: any later "
               "backward / `autograd.grad` in the iteration (also through a same-file call), `create_graph=True` "
               "(higher-order gradients), a non-literal `retain_graph=` (`retain_graph=i < n - 1`), and graphs "
               "built before the loop that each iteration backpropagates through again (per-task losses of one "
               "forward, rows of a Jacobian).")
    why = ("`retain_graph=True` tells autograd to keep the graph and every activation it saved after the "
           "backward pass, for a second backward through it. When none follows, that memory is only released "
           "when the next iteration rebinds the loss: each step's peak holds the previous step's graph and "
           "activations as well as its own.")
    symptom = ("No error and no growth by itself. The probe on LL303_bad.py reports: "
               "'backward(retain_graph=True) ran 8 times; in the 5 checked calls no later backward went through "
               "the retained graph (15 nodes, 1413.0 KiB of saved tensors) before the line ran again, and 5 of them "
               "were freed only after the next optimizer step: one extra step of graph and activations held at "
               "peak (not growth)'. "
               "Measured with glibc's allocator counters (torch 2.13, CPU): +3.9 MiB held between steps for an "
               "MLP on a 512-row batch, no growth over 200 steps. Memory grows every step when a value carried "
               "between iterations (an undetached RNN hidden state) or kept across steps (`total += loss`, "
               "LL301) still references the retained graphs (measured: +7 KiB/step and quadratic time for an "
               "RNN cell; with an optimizer step in between, the next backward raises 'one of the variables "
               "needed for gradient computation has been modified by an inplace operation'). "
               "`retain_graph=True` is often added to silence 'Trying to backward through the graph a second "
               "time', whose real fix is detaching the carried value.")
    remedy = ("Drop `retain_graph=True`. Keep it only on the first of two backward passes through one graph "
              "(two losses from one forward, a GAN generator step reusing the discriminator's forward). If it "
              "was added to silence 'Trying to backward through the graph a second time', detach the value "
              "carried between iterations (`hidden = hidden.detach()`) instead.")
    flagged = (
        Example("""
import torch
import torch.nn.functional as F
for epoch in range(args.epochs):
    for x, y in train_loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward(retain_graph=True)
        optimizer.step()
""", expect="""
7:9-7:41 `retain_graph=True` with no second backward through this graph in the iteration
    help: drop `retain_graph=True`
    note: the graph and its saved activations stay alive until the next iteration replaces them: peak
        memory holds one extra step (no growth by itself)
"""),
        Example("""
import torch
from torch import nn
class Trainer:
    def __init__(self, model):
        self.model = model
        self.criterion = nn.MSELoss()
        self.optimizer = torch.optim.Adam(model.parameters())
    def train_step(self, x, y):
        self.optimizer.zero_grad()
        loss = self.criterion(self.model(x), y)
        loss.backward(retain_graph=True)
        self.optimizer.step()
        return loss.item()
    def fit(self, loader):
        for x, y in loader:
            self.train_step(x, y)
""", expect="""
11:9-11:41 `retain_graph=True` with no second backward through this graph in the iteration
    help: drop `retain_graph=True`
    note: the graph and its saved activations stay alive until the next iteration replaces them: peak
        memory holds one extra step (no growth by itself); run every iteration through
        `self.train_step(x, y)`
"""),
        Example("""
import torch
hidden = model.init_hidden(batch_size)
for inputs, targets in batches:
    output, hidden = model(inputs, hidden)
    loss = criterion(output.view(-1, ntokens), targets)
    opt.zero_grad()
    torch.autograd.backward(loss, retain_graph=True)
    opt.step()
""", expect="""
7:5-7:53 `retain_graph=True` while `hidden` carries this graph into the next iteration
    help: detach the carried value at the start of the iteration (`hidden = hidden.detach()`) and drop
        `retain_graph=True`
    note: each backward runs through every earlier step (memory and time grow each step), or raises
        'modified by an inplace operation' once the optimizer has updated the weights it saved
"""),
        Example("""
import torch
from torch.autograd import grad
params = list(model.parameters())
for x, y in loader:
    loss = loss_fn(model(x), y)
    grads = grad(loss, params, retain_graph=True)
    with torch.no_grad():
        for p, g in zip(params, grads):
            p -= lr * g
""", expect="""
6:13-6:50 `retain_graph=True` with no second backward through this graph in the iteration
    help: drop `retain_graph=True`
    note: the graph and its saved activations stay alive until the next iteration replaces them: peak
        memory holds one extra step (no growth by itself)
"""),
    )
    not_flagged = (
        Example("""
import torch
image = torch.zeros(1, 3, 32, 32, requires_grad=True)
features = image
maps = []
for block in net.blocks:
    features = block(features)
    features[0, :, 16, 16].sum().backward(retain_graph=True)
    maps.append(image.grad.abs().sum(1))
    image.grad = None
"""),
        Example("""
import torch
for x, y in loader:
    optimizer.zero_grad()
    out1, out2 = model(x)
    loss1 = criterion(out1, y)
    loss2 = criterion(out2, y)
    loss1.backward(retain_graph=True)
    loss2.backward()
    optimizer.step()
"""),
        Example("""
import torch
for real, _ in loader:
    fake = G(torch.randn(real.size(0), nz))
    opt_d.zero_grad()
    d_loss = bce(D(real), ones) + bce(D(fake), zeros)
    d_loss.backward(retain_graph=True)
    opt_d.step()
    opt_g.zero_grad()
    g_loss = bce(D(fake), ones)
    g_loss.backward()
    opt_g.step()
"""),
        Example("""
import torch
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward(retain_graph=False)
    optimizer.step()
loss = criterion(model(x), y)
loss.backward(retain_graph=True)
"""),
        Example("""
import torch
for x, y in loader:
    losses = [crit(head(model.body(x)), y) for head in model.heads]
    grads = []
    for task_loss in losses:
        optimizer.zero_grad()
        task_loss.backward(retain_graph=True)
        grads.append([p.grad.clone() for p in shared_params])
    optimizer.step()
"""),
        Example("""
import torch
out = model(x)
for i in range(out.shape[0]):
    row = torch.autograd.grad(out[i].sum(), x, retain_graph=True)[0]
    jacobian.append(row)
"""),
        Example("""
import torch
for real in loader:
    opt_d.zero_grad()
    interp = alpha * real + (1 - alpha) * fake
    score = D(interp)
    gp = torch.autograd.grad(score.sum(), interp, create_graph=True, retain_graph=True)[0]
    loss = D(fake).mean() - D(real).mean() + 10 * ((gp.norm(2, dim=1) - 1) ** 2).mean()
    loss.backward()
    opt_d.step()
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        differentiated = self._retaining(node)
        if differentiated is None:
            return
        # A loop that updates parameters: a `.backward()` alone (gradients looked at, a saliency map) trains
        # nothing; `torch.autograd.grad` returns gradients for the code to apply.
        sites = [site for site in self.ctx.training.loops_running(node)
                 if call_name(node) != "backward" or self.ctx.iteration.of(site.loop).updates_parameters]
        region = self.ctx.innermost_loop(node) or self.ctx.scope_of(node)
        if not sites or any(self._later_backward(node, site) for site in sites) \
                or self._from_earlier(differentiated, region, node):
            return
        carried = self._carried(differentiated, region, node)
        where = f"; run every iteration through `{self.ctx.snippet(sites[0].path[0], 40)}`" if sites[0].path else ""
        if carried:
            self.report(node, f"`retain_graph=True` while `{carried}` carries this graph into the next iteration",
                        help=f"detach the carried value at the start of the iteration (`{carried} = {carried}.detach()`)"
                             " and drop `retain_graph=True`",
                        note="each backward runs through every earlier step (memory and time grow each step), or "
                             "raises 'modified by an inplace operation' once the optimizer has updated the weights it "
                             f"saved{where}")
            return
        self.report(node, "`retain_graph=True` with no second backward through this graph in the iteration",
                    help="drop `retain_graph=True`",
                    note="the graph and its saved activations stay alive until the next iteration replaces them: "
                         f"peak memory holds one extra step (no growth by itself){where}")

    def _retaining(self, call: cst.Call) -> cst.BaseExpression | None:
        """The differentiated value of a gradient call that passes `retain_graph=True` without `create_graph`."""
        qualname = self.ctx.names.callee(call)
        if qualname in _TORCH_GRADIENT_CALLS:
            retain_at, create_at = _TORCH_GRADIENT_CALLS[qualname]
            target = argument(call, 0, "tensors" if qualname.endswith("backward") else "outputs")
        elif call_name(call) == "backward" and qualname is None and receiver(call) is not None:
            owner = receiver(call)
            if (dotted(owner) or "").rsplit(".", 1)[-1].lower() in _BACKWARD_OWNERS:
                retain_at, create_at = -1, -1  # keywords only, forwarded to `loss.backward`
                target = argument(call, 0, "loss")
            else:
                (retain_at, create_at), target = _BACKWARD_POSITIONS, owner
        else:
            return None
        retain = argument(call, retain_at, "retain_graph") if retain_at >= 0 else keyword_arg(call, "retain_graph")
        create = argument(call, create_at, "create_graph") if create_at >= 0 else keyword_arg(call, "create_graph")
        if _literal(retain) != "True" or (create is not None and _literal(create) != "False"):
            return None  # `create_graph=True`: a higher-order gradient that is differentiated again
        return target

    # ----- a later backward through the graph -----------------------------------------------------
    def _later_backward(self, node: cst.Call, site: StepSite) -> bool:
        """Does a gradient call follow `node` in the same iteration (after it in any loop around it in
        its function, or after the call that leads to it in the training loop)?"""
        anchors: list[tuple[cst.CSTNode, cst.CSTNode]] = []
        if self.ctx.innermost_loop(node) is None:
            anchors.append((node, self.ctx.scope_of(node)))
        anchors.extend((node, loop) for loop in self._loops_around(node))
        for call in site.path:
            anchors.extend((call, loop) for loop in self._loops_around(call))
            if self.ctx.innermost_loop(call) is None:
                anchors.append((call, self.ctx.scope_of(call)))
        return any(self._gradient_after(anchor, container, node) for anchor, container in anchors)

    def _loops_around(self, node: cst.CSTNode) -> list[cst.CSTNode]:
        loops = []
        for ancestor in self.ctx.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                break
            if isinstance(ancestor, (cst.For, cst.While)):
                loops.append(ancestor)
        return loops

    def _gradient_after(self, anchor: cst.CSTNode, container: cst.CSTNode, node: cst.Call) -> bool:
        order = self.ctx.order
        for call in self.ctx.definitions.calls_in(container):
            if call is node or order[call] <= order[anchor]:
                continue
            if self._is_gradient_call(call) or any(
                    any(self._is_gradient_call(c) for c in self.ctx.definitions.calls_in(fn))
                    for fn in {*self.ctx.calls.targets(call), *self._called(call)}):
                return True
        return False

    def _called(self, call: cst.Call) -> set[cst.FunctionDef]:
        found: set[cst.FunctionDef] = set()
        for fn in self.ctx.calls.targets(call):
            found |= self.ctx.calls.called_functions(fn)
        return found

    def _is_gradient_call(self, call: cst.Call) -> bool:
        return (call_name(call) in ("backward", "manual_backward")
                or self.ctx.names.callee(call) in _TORCH_GRADIENT_CALLS)

    # ----- a graph built before the iteration -----------------------------------------------------
    def _from_earlier(self, expr: cst.BaseExpression, region: cst.CSTNode, at: cst.CSTNode) -> bool:
        """Was the graph being differentiated (or part of it) built before this iteration — the value
        itself (`for task_loss in losses`, `out[i]` of an output computed before the loop), or a
        forward result computed before the loop that it is computed from? Then the next iteration
        backpropagates through it again and needs it retained."""
        flow = self.ctx.flow
        current, position = expr, at
        for _ in range(_MAX_DEPTH):  # the differentiated value itself, through copies and reductions
            if isinstance(current, cst.Subscript):
                current = current.value
            elif isinstance(current, cst.Call) and call_name(current) in _SAME_GRAPH_METHODS and receiver(current):
                current = receiver(current)
            elif isinstance(current, cst.Name):
                binding = flow.last_binding(current.value, position)
                if binding is None or not self._inside(binding.node, region):
                    return True
                current, position = flow.source_value(binding), binding.node
                if current is None:
                    return False
            elif isinstance(current, cst.Attribute) and (dotted(current) or "").startswith("self."):
                # `self.out` set outside this iteration (a Trainer's `__init__`): built before it.
                bindings = self.ctx.bindings_anywhere(dotted(current))  # type: ignore[arg-type]
                if bindings and not any(self._inside(b.node, region) for b in bindings):
                    return True
                break
            else:
                break
        work: list[tuple[cst.BaseExpression, cst.CSTNode]] = [(expr, at)]
        seen: set[str] = set()
        while work:
            value, position = work.pop()
            for name in names_in(value) - seen:
                seen.add(name)
                if any(self._inside(b.node, region) for b in flow.bindings_of(name, position, before=False)):
                    # Computed in the iteration (or carried between iterations: `_carried`'s concern).
                    work.extend((source, b.node) for b in flow.bindings_of(name, position)
                                if self._inside(b.node, region) and (source := flow.source_value(b)) is not None)
                    continue
                if any((source := flow.source_value(b)) is not None and self._may_hold_graph(source, b.node, 0)
                       for b in flow.bindings_of(name, position)):
                    return True
        return False

    def _inside(self, node: cst.CSTNode, region: cst.CSTNode) -> bool:
        """Bound anew in each iteration: inside the region, but not the region loop's own target (its
        elements come from an iterable evaluated before the iterations)."""
        return node is not region and self.ctx.is_inside(node, region)

    def _may_hold_graph(self, value: cst.BaseExpression, at: cst.CSTNode, depth: int) -> bool:
        """Can `value` reference an autograd graph: does it come from a forward pass (a call of a model
        or another object, not of an imported function, a class or a tensor method)?"""
        if any(self._is_forward(call, depth) for call in calls_within(value)):
            return True
        if depth >= _MAX_DEPTH:
            return False
        return any(source is not None and self._may_hold_graph(source, binding.node, depth + 1)
                   for name in names_in(value)
                   for binding in self.ctx.flow.bindings_of(name, at)
                   for source in (self.ctx.flow.source_value(binding),))

    def _is_forward(self, call: cst.Call, depth: int) -> bool:
        ctx = self.ctx
        if ctx.names.callee(call) is not None or ctx.definitions.local_class(call.func) is not None:
            return False
        if (dotted(call.func) or "_").rsplit(".", 1)[-1][0].isupper():
            return False  # a constructor (`Net()`): builds an object, runs no forward
        if isinstance(call.func, cst.Name) and call.func.value in _BUILTINS \
                and ctx.names.is_builtin(call.func, call.func.value):
            return False
        if isinstance(call.func, cst.Attribute):
            made = ctx.flow.constructed_by(call.func.value, call)
            if made is not None and made[1].startswith(_NOT_MODELS):
                return False  # `accelerator.prepare(...)`, `loader.dataset`: tools, not models
        functions = ctx.calls.local_functions(call.func)
        if functions:  # a helper: a forward when its body calls a model
            return depth < _MAX_DEPTH and any(self._is_forward(c, depth + 1)
                                              for fn in functions for c in ctx.definitions.calls_in(fn))
        return not (isinstance(call.func, cst.Attribute) and call.func.attr.value in _TENSOR_METHODS)

    def _carried(self, expr: cst.BaseExpression, region: cst.CSTNode, at: cst.CSTNode) -> str | None:
        """A name the differentiated value is computed from that is bound both before the iteration and
        in it by a forward pass (`output, hidden = model(x, hidden)`): state carried between iterations."""
        flow = self.ctx.flow
        work: list[tuple[cst.BaseExpression, cst.CSTNode]] = [(expr, at)]
        seen: set[str] = set()
        while work:
            value, position = work.pop()
            for name in sorted(names_in(value) - seen):
                seen.add(name)
                every = flow.bindings_of(name, position, before=False)
                inside = [b for b in every if self._inside(b.node, region)]
                if len(inside) < len(every) and any(
                        (source := flow.source_value(b)) is not None and self._may_hold_graph(source, b.node, 0)
                        for b in inside):
                    return name
                for binding in inside:
                    source = flow.source_value(binding)
                    if source is not None and self.ctx.order[binding.node] < self.ctx.order[at]:
                        work.append((source, binding.node))
        return None

