"""The PyTorch iteration model: for every loop, the ordered events of one iteration.

An event is a call that matters to a training step — `zero_grad`, `backward` (plain,
`scaler.scale(loss).backward()`, `accelerator.backward(loss)`), an optimizer `step` (plain or
`scaler.step(opt)`), `scaler.update()` / `unscale_`, a scheduler step, gradient clipping,
`model.train()` / `model.eval()`, `sampler.set_epoch(...)`, a module's forward pass, a loss
computation, a `for` over a loader — with the `if`s around it, the loops between the iteration's
loop and it, and the same-file calls that lead to it. Calls of same-file functions and methods are followed (`train_one_epoch(model, loader, opt)`
from the epoch loop; `self.optimizer` in a Trainer), with their parameters renamed to the
caller's arguments, so a rule sees `optimizer.step()` inside `train_one_epoch` as a step of the
caller's `opt`. Rules ask this model; none walks a loop itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import libcst as cst

from lintloop.analysis.base import Analysis, computed
from lintloop.analysis.datasets import literal_int
from lintloop.analysis.nodes import (argument, call_name, children, dotted, names_a_scaler, names_an_optimizer,
                                      positional_args, receiver, walk)
from lintloop.analysis.training import CALL_DEPTH

if TYPE_CHECKING:
    from lintloop.analysis.context import FileContext

Loop = cst.For | cst.While
# (an `if`, True in its `else`/`elif` branch) or (a `try`, True in its `except` handlers)
Guard = tuple[cst.If | cst.Try, bool]

# Calls that hand the gradients' owner a chance to zero, step or scale: a `closure` passed to
# `optimizer.step(closure)` runs inside the step (LBFGS).
_CLIP_FUNCTIONS = {"torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_value_",
                   "torch.nn.utils.clip_grad.clip_grad_norm_", "torch.nn.utils.clip_grad.clip_grad_value_",
                   "torch.nn.utils.clip_grad_norm", "torch.nn.utils.clip_grad_value"}
_SCALERS = {"torch.amp.GradScaler", "torch.cuda.amp.GradScaler", "torch.cpu.amp.GradScaler",
            "torch.amp.grad_scaler.GradScaler", "torch.cuda.amp.grad_scaler.GradScaler", "torch.GradScaler"}
# Objects whose `backward(loss)` backpropagates a loss (and, for Accelerate, divides it by the
# accumulation steps itself).
_BACKWARD_OWNERS = {"accelerate.Accelerator": "accelerator", "lightning.fabric.Fabric": "fabric",
                    "lightning.Fabric": "fabric", "lightning_fabric.Fabric": "fabric"}
# `trange(n)`: a progress bar over `range(n)`.
_RANGES = {"tqdm.trange", "tqdm.auto.trange", "tqdm.notebook.trange"}
# Engines that call a step function once per iteration: `Engine(process_function)`.
_ENGINES = {"ignite.engine.Engine", "ignite.engine.engine.Engine"}
# In-place tensor methods that, given a gradient, update a parameter by hand: `p.data.add_(p.grad, alpha=-lr)`.
_IN_PLACE_UPDATES = {"add_", "sub_", "copy_", "addcdiv_", "addcmul_"}


@dataclass(frozen=True, eq=False)
class Event:
    """One thing an iteration does, where it does it, and to which object."""

    kind: str  # zero_grad | backward | step | scaler_step | scaler_update | unscale | scheduler_step
    #            | clip | train_mode | eval_mode | set_epoch | loss | forward (a module's)
    #            | iterate (a `for` over `target`) | update (a parameter changed by hand from its
    #            gradient: `p -= lr * p.grad`, `p.data.add_(p.grad, alpha=-lr)`)
    node: cst.CSTNode  # the call (or `p.grad = None` assignment) in the source
    target: str | None  # the object acted on, in the iteration's own names: `opt`, `self.scaler`, `model`
    argument: str | None = None  # `scaler.step(opt)` / `unscale_(opt)`: `opt`; `set_epoch(e)`: `e`
    argument_node: cst.BaseExpression | None = None
    scaled_by: str | None = None  # `scaler.scale(loss).backward()`: `scaler`
    via: str | None = None  # a backward through `accelerator` / `fabric` / Lightning's `manual_backward`
    guards: tuple[Guard, ...] = ()
    loops: tuple[Loop, ...] = ()  # loops between the iteration's loop and the event, outermost first
    path: tuple[cst.Call, ...] = ()  # same-file calls from the iteration's body to the event's function

    @property
    def site(self) -> cst.CSTNode:
        """Where the iteration itself does this: the outermost call leading to it, or the event."""
        return self.path[0] if self.path else self.node

    def is_exclusive_with(self, other: Event) -> bool:
        """Are the two in different branches of one `if` (never both in one iteration)?"""
        mine = dict((id(g), branch) for g, branch in self.guards)
        return any(id(g) in mine and mine[id(g)] != branch for g, branch in other.guards)


@dataclass(frozen=True, eq=False)
class Iteration:
    loop: Loop | cst.FunctionDef  # the loop; or the step function an engine runs once per iteration
    events: tuple[Event, ...]
    engine: cst.Call | None = None  # for a step function: the engine it is given to, `Engine(update_fn)`

    def of(self, *kinds: str, nested: bool = True) -> list[Event]:
        return [e for e in self.events if e.kind in kinds and (nested or not e.loops)]

    @property
    def updates_parameters(self) -> bool:
        """Does an iteration change the parameters: an optimizer step, or an update by hand? (A backward
        alone only computes gradients, to look at them.)"""
        return any(e.kind in ("step", "scaler_step", "update") for e in self.events)


class Iterations(Analysis):
    """Every loop's iteration (`ctx.iteration.of(loop)`), and the training loops among them."""

    asks = frozenset({"calls", "flow", "losses", "modules", "training"})

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._by_loop: dict[Loop, Iteration] = {}
        # A function's events in its own names; None while it is being walked (recursion).
        self._function_events: dict[cst.FunctionDef, tuple[Event, ...] | None] = {}

    def of(self, loop: Loop) -> Iteration:
        cached = self._by_loop.get(loop)
        if cached is None:
            cached = self._by_loop[loop] = self._iteration(loop)
        return cached

    @computed
    def training_loops(self) -> list[Iteration]:
        """The iterations of the training loops (`Training.is_training_loop`)."""
        loops = (*self.ctx.nodes(cst.For), *self.ctx.nodes(cst.While))
        return sorted((self.of(loop) for loop in loops if self.ctx.training.is_training_loop(loop)),
                      key=lambda it: self.ctx.order[it.loop])

    def engine_step(self, call: cst.Call) -> Iteration | None:
        """One iteration of an engine `call` builds: pytorch-ignite's `Engine(update_fn)` calls
        `update_fn(engine, batch)` once per batch, so the body of the same-file `update_fn` is the body of
        a training loop the file does not spell."""
        if self.ctx.names.callee(call) not in _ENGINES:
            return None
        step = argument(call, 0, "process_function")
        functions = self.ctx.calls.local_functions(step) if step is not None else []
        if len(functions) != 1:
            return None
        return Iteration(functions[0], self._events_of_body(functions[0]), engine=call)

    def count(self, loop: Loop) -> int | None:
        """How many times `loop` runs at most, where its text says: a `for` over `range(...)` with integer
        bounds (literal, or a name assigned one), over a literal list, tuple, set or dict, or over a slice
        with literal bounds of anything (`series[:12]`) (or a name assigned one of those), also through
        `enumerate`, `zip`, `tqdm`, `sorted`, `.items()`; at most once where its body ends in an
        unconditional `break` (a look at the first batch). None for anything else (a loader, a dataset, a
        `while`). (`ctx.loop_values.few_iterations` asks a narrower question: literal bounds only.)"""
        length = self._length(loop.iter, loop) if isinstance(loop, cst.For) else None
        if _runs_once(loop):
            return 1 if length is None else min(length, 1)
        return length

    def _length(self, expr: cst.BaseExpression, at: cst.CSTNode) -> int | None:
        value = self.ctx.flow.resolve_value(expr, at)
        if isinstance(value, (cst.List, cst.Tuple, cst.Set, cst.Dict)):
            starred = (cst.StarredElement, cst.StarredDictElement)
            return None if any(isinstance(e, starred) for e in value.elements) else len(value.elements)
        if isinstance(value, cst.Subscript):
            return _slice_length(value)
        if not isinstance(value, cst.Call) or any(a.star for a in value.args):
            return None
        args = positional_args(value)
        callee = self.ctx.names.callee(value) or ""
        if callee in _RANGES or self.ctx.names.is_builtin(value.func, "range"):
            bounds = [literal_int(self.ctx.flow.resolve_value(a, at)) for a in args]
            known = 1 <= len(bounds) <= 3 and None not in bounds and bounds[2:] != [0]
            return len(range(*bounds)) if known else None
        if callee.rsplit(".", 1)[-1] == "tqdm" or any(self.ctx.names.is_builtin(value.func, name)
                                                    for name in ("enumerate", "reversed", "sorted", "list", "tuple")):
            return self._length(args[0], at) if args else None
        if self.ctx.names.is_builtin(value.func, "zip") and args:
            lengths = [self._length(a, at) for a in args]
            return None if None in lengths else min(lengths)
        if call_name(value) in ("items", "keys", "values") and receiver(value) is not None and not value.args:
            return self._length(receiver(value), at)
        return None

    def ends_iteration(self, event: Event, iteration: Iteration) -> bool:
        """Is `event` on a path that leaves the iteration: a block ending in `break`, `continue`, `raise`
        (or `return` in the loop's own function) between it and the loop, so nothing after it runs?"""
        if event.loops:
            return False
        chain = [(event.node, True)] if not event.path else [(event.node, False), *((c, False) for c in event.path[1:]),
                                                              (event.path[0], True)]
        for node, own_scope in chain:
            for ancestor in self.ctx.ancestors(node):
                if ancestor is iteration.loop or isinstance(ancestor, (cst.FunctionDef, cst.For, cst.While)):
                    break
                if isinstance(ancestor, cst.IndentedBlock) and ancestor.body and _jumps(ancestor.body[-1], own_scope):
                    return True
        return False

    # ----- building ----------------------------------------------------------------------------
    def _iteration(self, loop: Loop) -> Iteration:
        return Iteration(loop, self._events_of_body(loop))

    def _events_of_body(self, owner: Loop | cst.FunctionDef) -> tuple[Event, ...]:
        events: list[Event] = []
        self._walk(owner.body, {}, (), (), 0, events)
        return tuple(events)

    def _events_of_function(self, fn: cst.FunctionDef, depth: int) -> tuple[Event, ...]:
        """The events of a call of `fn`, in its own names (memoised; a recursive call sees none)."""
        table = self._function_events
        if fn in table:
            return table[fn] or ()
        table[fn] = None
        events: list[Event] = []
        if depth <= CALL_DEPTH:  # the loop's body is depth 0: its calls followed as deep as Training follows them
            self._walk(fn.body, {}, (), (), depth, events)
        table[fn] = tuple(events)
        return table[fn]

    def _walk(self, node: cst.CSTNode, renames: dict[str, str], guards: tuple[Guard, ...],
              loops: tuple[Loop, ...], depth: int, out: list[Event]) -> None:
        """Append the events of executing `node`, in evaluation order."""
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return  # defined here, run only when called
        if isinstance(node, cst.If):
            self._walk(node.test, renames, guards, loops, depth, out)
            self._walk(node.body, renames, guards + ((node, False),), loops, depth, out)
            if node.orelse is not None:
                branch = node.orelse if isinstance(node.orelse, cst.If) else node.orelse.body
                self._walk(branch, renames, guards + ((node, True),), loops, depth, out)
            return
        if isinstance(node, cst.Try):  # a handler runs instead of the rest of the body
            self._walk(node.body, renames, guards + ((node, False),), loops, depth, out)
            for handler in node.handlers:
                self._walk(handler, renames, guards + ((node, True),), loops, depth, out)
            for rest in (node.orelse, node.finalbody):
                if rest is not None:
                    self._walk(rest, renames, guards + ((node, False),) if rest is node.orelse else guards,
                               loops, depth, out)
            return
        if isinstance(node, (cst.For, cst.While)):
            header = node.iter if isinstance(node, cst.For) else node.test
            self._walk(header, renames, guards, loops, depth, out)
            if isinstance(node, cst.For):
                iterated = _iterated(node.iter)
                if iterated is not None:
                    out.append(Event("iterate", node, _renamed(iterated, renames), guards=guards, loops=loops))
            self._walk(node.body, renames, guards, loops + (node,), depth, out)
            return
        if isinstance(node, cst.Call):
            for child in children(node):
                self._walk(child, renames, guards, loops, depth, out)
            self._call(node, renames, guards, loops, depth, out)
            return
        if isinstance(node, cst.Assign) and self._clears_grad(node):
            out.append(Event("zero_grad", node, None, guards=guards, loops=loops))
        elif isinstance(node, (cst.Assign, cst.AugAssign)) and _updates_from_gradient(node):
            target = node.target if isinstance(node, cst.AugAssign) else node.targets[0].target
            out.append(Event("update", node, _renamed(dotted(target), renames), guards=guards, loops=loops))
        for child in children(node):
            self._walk(child, renames, guards, loops, depth, out)

    def _call(self, call: cst.Call, renames: dict[str, str], guards: tuple[Guard, ...],
              loops: tuple[Loop, ...], depth: int, out: list[Event]) -> None:
        name = call_name(call)
        owner = receiver(call)
        if name == "step" and owner is not None and positional_args(call):
            closure = self._local_function(positional_args(call)[0], call)
            if closure is not None:  # `optimizer.step(closure)`: the closure runs inside the step
                self._inline(call, closure, renames, guards, loops, depth, out)
        event = self._classify(call, name, owner)
        if event is not None:
            out.append(replace(event, target=_renamed(event.target, renames),
                               argument=_renamed(event.argument, renames), scaled_by=_renamed(event.scaled_by, renames),
                               guards=guards, loops=loops))
            return
        targets = self.ctx.calls.targets(call)
        fn = self._pick(call, targets)
        if fn is not None:
            self._inline(call, fn, renames, guards, loops, depth, out)

    def _inline(self, call: cst.Call, fn: cst.FunctionDef, renames: dict[str, str], guards: tuple[Guard, ...],
                loops: tuple[Loop, ...], depth: int, out: list[Event]) -> None:
        inner_renames = self._parameter_renames(call, fn, renames)
        for event in self._events_of_function(fn, depth + 1):
            out.append(replace(
                event, target=_renamed(event.target, inner_renames), argument=_renamed(event.argument, inner_renames),
                scaled_by=_renamed(event.scaled_by, inner_renames), guards=guards + event.guards,
                loops=loops + event.loops, path=(call, *event.path)))

    def _pick(self, call: cst.Call, targets: list[cst.FunctionDef]) -> cst.FunctionDef | None:
        """The one same-file function a call runs: `self.m()` prefers the caller's own class."""
        if len(targets) == 1:
            return targets[0]
        if targets and isinstance(call.func, cst.Attribute) and dotted(call.func.value) == "self":
            own = self._class_of(call)
            mine = [fn for fn in targets if self._class_of(fn) is own]
            if len(mine) == 1:
                return mine[0]
        return None

    def _class_of(self, node: cst.CSTNode) -> cst.ClassDef | None:
        return next((a for a in self.ctx.ancestors(node) if isinstance(a, cst.ClassDef)), None)

    def _local_function(self, expr: cst.BaseExpression, at: cst.CSTNode) -> cst.FunctionDef | None:
        found = self.ctx.calls.local_functions(expr)
        return found[0] if len(found) == 1 else None

    def _parameter_renames(self, call: cst.Call, fn: cst.FunctionDef, outer: dict[str, str]) -> dict[str, str]:
        """`def train(model, opt)` called as `train(net, optimizer)`: model -> net, opt -> optimizer;
        `self` -> the receiver of `trainer.fit()` (kept as `self` for `self.fit()`)."""
        params = [p.name.value for p in (*fn.params.posonly_params, *fn.params.params)]
        args = list(call.args)
        renames: dict[str, str] = {}
        if params and params[0] in ("self", "cls") and isinstance(call.func, cst.Attribute):
            owner = dotted(call.func.value)
            if owner is not None:
                renames[params[0]] = _renamed(owner, outer) or owner
            params = params[1:]
        keyword_params = {p.name.value for p in fn.params.kwonly_params} | set(params)
        for index, arg in enumerate(args):
            if arg.star:
                break
            if arg.keyword is not None:
                param = arg.keyword.value if arg.keyword.value in keyword_params else None
            else:
                param = params[index] if index < len(params) else None
            text = dotted(arg.value)
            if param is not None and text is not None:
                renames[param] = _renamed(text, outer) or text
        return renames

    # ----- what a call is ------------------------------------------------------------------------
    def _classify(self, call: cst.Call, name: str | None, owner: cst.BaseExpression | None) -> Event | None:
        callee = self.ctx.names.callee(call)
        if callee in _CLIP_FUNCTIONS:
            return Event("clip", call, None)
        if callee == "torch.autograd.backward":
            return Event("backward", call, None)
        if owner is None or name is None:
            return self._forward(call)
        if callee is not None and name in ("backward", "step"):
            return None  # a module's function, e.g. `torch.distributed.autograd.backward(context_id, [loss])`
        target = dotted(_module_of_chain(owner))
        if name == "zero_grad" or name in ("zero_", "detach_") and target is not None and ".grad" in f"{target}.":
            return Event("zero_grad", call, target if name == "zero_grad" else None)
        if name in _IN_PLACE_UPDATES and _without_data(dotted(owner)) in set().union(
                *(_gradient_owners(arg.value) for arg in call.args)):
            return Event("update", call, target)  # `p.data.add_(p.grad, alpha=-lr)`
        if name == "backward":
            return self._backward(call, owner, target)
        if name == "manual_backward" and target == "self":  # Lightning manual optimization
            return Event("backward", call, None, via="lightning")
        if name in ("clip_grad_norm_", "clip_grad_value_") and self._backward_owner(owner, call):
            return Event("clip", call, None, via=self._backward_owner(owner, call))
        if target is None:
            return None
        first = positional_args(call)[0] if positional_args(call) else None
        role = self.role(owner, call)
        if name == "step":
            if role == "scaler":
                return Event("scaler_step", call, target, argument=dotted(first) if first is not None else None)
            if role in ("optimizer", "scheduler"):
                return Event("step" if role == "optimizer" else "scheduler_step", call, target)
            return None
        if role == "scaler" and name in ("update", "unscale_"):
            return Event("scaler_update" if name == "update" else "unscale", call, target,
                         argument=dotted(first) if first is not None else None)
        if name in ("train", "eval"):
            return self._mode(call, target, name)
        if name == "set_epoch" and first is not None:
            return Event("set_epoch", call, target, argument=self.ctx.snippet(first), argument_node=first)
        if self.ctx.losses.prediction(call) is not None:
            return Event("loss", call, None)
        return self._forward(call)

    def _forward(self, call: cst.Call) -> Event | None:
        """`model(x)` / `model.forward(x)` on a known `nn.Module`: a forward pass."""
        if self.ctx.modules.forward_of(call) is None:
            return None
        owner = call.func.value if isinstance(call.func, cst.Attribute) and call.func.attr.value == "forward" \
            else call.func
        return Event("forward", call, dotted(owner))

    def _backward(self, call: cst.Call, owner: cst.BaseExpression, target: str | None) -> Event:
        if isinstance(owner, cst.Call) and call_name(owner) == "scale" and receiver(owner) is not None:
            scaler = receiver(owner)
            if self.role(scaler, call) == "scaler":
                return Event("backward", call, None, scaled_by=dotted(scaler))
        via = self._backward_owner(owner, call)
        return Event("backward", call, None, via=via)

    def _backward_owner(self, owner: cst.BaseExpression, at: cst.CSTNode) -> str | None:
        """'accelerator' / 'fabric' when `owner` is an Accelerate `Accelerator` / Lightning `Fabric`."""
        made = self.ctx.flow.constructed_by(owner, at)
        if made is not None and made[1] in _BACKWARD_OWNERS:
            return _BACKWARD_OWNERS[made[1]]
        last = (dotted(owner) or "").rsplit(".", 1)[-1].lower()
        return last if last in ("accelerator", "fabric") else None

    def _mode(self, call: cst.Call, target: str, name: str) -> Event | None:
        args = list(call.args)
        if not args:
            return Event("train_mode" if name == "train" else "eval_mode", call, target)
        if name == "train" and len(args) == 1 and isinstance(args[0].value, cst.Name) \
                and args[0].value.value in ("True", "False"):
            return Event("train_mode" if args[0].value.value == "True" else "eval_mode", call, target)
        return None  # `model.train(mode)`: unknown

    def role(self, expr: cst.BaseExpression, at: cst.CSTNode) -> str | None:
        """'optimizer' | 'scheduler' | 'scaler' for an object, from its constructor when the file shows
        it, else from its name (`optimizer`, `opt_g`, `self.lr_scheduler`, `scaler`)."""
        made = self.ctx.flow.constructed_by(expr, at)
        if made is not None:
            qualname = made[1]
            if qualname in _SCALERS:
                return "scaler"
            if qualname.startswith("torch.optim.lr_scheduler.") or (
                    qualname.startswith("transformers.") and "schedule" in qualname):
                return "scheduler"
            if qualname.startswith("torch.optim."):
                return "optimizer"
        return self.role_of_name(dotted(expr))

    @staticmethod
    def role_of_name(name: str | None) -> str | None:
        """The role an object's name says it has, when nothing shows how it was built."""
        if names_a_scaler(name):
            return "scaler"
        if "sched" in (name or "").rsplit(".", 1)[-1].lower():
            return "scheduler"
        return "optimizer" if names_an_optimizer(name) else None

    def constructor(self, target: str | None, at: cst.CSTNode) -> tuple[cst.Call, str] | None:
        """Where an event's object was built (`torch.optim.lr_scheduler.StepLR(...)`), when the file shows it."""
        if target is None:
            return None
        try:
            expr = cst.parse_expression(target)
        except cst.ParserSyntaxError:
            return None
        return self.ctx.flow.constructed_by(expr, at)

    def _clears_grad(self, node: cst.Assign) -> bool:
        """`p.grad = None`: a manual zero_grad."""
        return (isinstance(node.value, cst.Name) and node.value.value == "None"
                and any(isinstance(t.target, cst.Attribute) and t.target.attr.value == "grad" for t in node.targets))


def _renamed(text: str | None, renames: dict[str, str]) -> str | None:
    """`opt.param_groups` with opt -> self.optimizer: `self.optimizer.param_groups`."""
    if text is None or not renames:
        return text
    head, dot, rest = text.partition(".")
    return renames[head] + dot + rest if head in renames else text


def loop_header(ctx: FileContext, loop: Loop) -> str:
    """`for x, y in loader` / `while step < total`: how messages name a loop."""
    if isinstance(loop, cst.For):
        return f"for {ctx.snippet(loop.target, 30)} in {ctx.snippet(loop.iter, 40)}"
    return f"while {ctx.snippet(loop.test, 40)}"


# nn.Module methods that return the module itself: `model.to(device).train()` trains `model`.
_RETURNS_MODULE = {"to", "cpu", "cuda", "float", "half", "double", "bfloat16", "train", "eval", "requires_grad_",
                   "to_empty", "xpu"}


def _module_of_chain(expr: cst.BaseExpression) -> cst.BaseExpression:
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _RETURNS_MODULE:
        expr = expr.func.value
    return expr


def _jumps(statement: cst.BaseStatement, own_scope: bool) -> bool:
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    jumps = (cst.Break, cst.Continue, cst.Raise, cst.Return) if own_scope else (cst.Raise,)
    return any(isinstance(small, jumps) for small in statement.body)


def _gradient_owners(expr: cst.CSTNode) -> set[str]:
    """Whose `.grad` `expr` reads, without `.data`: `p` for `p.grad`, `p.data.grad` and `p.grad.data`."""
    return {_without_data(dotted(node.value)) for node in walk(expr)
            if isinstance(node, cst.Attribute) and node.attr.value == "grad" and dotted(node.value)}


def _without_data(label: str | None) -> str | None:
    return label[:-len(".data")] if label is not None and label.endswith(".data") else label


def _updates_from_gradient(node: cst.Assign | cst.AugAssign) -> bool:
    """`p -= lr * p.grad`, `w.data = w.data - lr * w.grad`: a parameter changed by hand from its gradient
    (not the gradient itself, `p.grad += noise`, nor a copy of it, `g = p.grad.clone()`)."""
    if isinstance(node, cst.AugAssign):
        label = dotted(node.target)
        return label is not None and ".grad." not in f"{label}." and bool(_gradient_owners(node.value))
    return len(node.targets) == 1 and _without_data(dotted(node.targets[0].target)) in _gradient_owners(node.value)


def _iterated(expr: cst.BaseExpression) -> str | None:
    """The object a `for` walks: `loader` in `enumerate(tqdm(loader))`."""
    while isinstance(expr, cst.Call) and positional_args(expr):
        expr = positional_args(expr)[0]
    return dotted(expr)


def _runs_once(loop: Loop) -> bool:
    """Does the loop's body end in an unconditional `break`, with no `continue` of its own before it?"""
    body = loop.body.body if isinstance(loop.body, cst.IndentedBlock) else ()
    last = body[-1] if body else None
    if not (isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[-1], cst.Break)):
        return False
    return not any(isinstance(node, cst.Continue) for node in _own_statements(loop.body))


def _own_statements(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The nodes of a loop's body outside the loops and functions nested in it."""
    for child in node.children:
        yield child
        if not isinstance(child, (cst.For, cst.While, cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            yield from _own_statements(child)


def _slice_length(subscript: cst.Subscript) -> int | None:
    """The most elements a slice with literal bounds takes of any sequence: `x[:12]`, `x[2:10]`, `x[-5:]`."""
    if len(subscript.slice) != 1 or not isinstance(subscript.slice[0].slice, cst.Slice):
        return None
    bounds = subscript.slice[0].slice
    if bounds.step is not None and literal_int(bounds.step) != 1:
        return None
    lower = 0 if bounds.lower is None else literal_int(bounds.lower)
    upper = None if bounds.upper is None else literal_int(bounds.upper)
    if lower is None:
        return None
    if upper is None:
        return -lower if lower < 0 else None
    return max(upper - lower, 0) if upper >= 0 and lower >= 0 else None
