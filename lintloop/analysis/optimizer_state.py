"""Optimizer state flow (optax, flax `TrainState`): which optimizer a `tx.update(...)` belongs to, and
whether what it and `optax.apply_updates` / `state.apply_gradients` return is fed back to the next step.

optax is functional: `updates, new_state = tx.update(grads, opt_state, params)` returns the next
state, and `optax.apply_updates(params, updates)` the next parameters; nothing changes in place. A
result is *fed back* when the name the next step reads is re-bound from it — in the loop that repeats
the step, or, for a step function, by the callers' loops that pass it in and re-bind what it returns;
threaded through a `lax.scan` / `fori_loop` carry or stored in `self.` it is out of sight and taken as
fed back. It is *lost* when dropped (`updates, _ = ...`, `tx.update(...)[0]`, an expression
statement, a name never read) or when the loop that repeats the step never re-binds the name it
passes in. Losing it costs what the optimizer keeps in its state (measured, optax 0.2.8, CPU:
FRAMEWORK_FACTS row 23).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from lintloop.analysis.base import Analysis, computed
from lintloop.analysis.calls import CallChain
from lintloop.analysis.nodes import (argument, call_name, dotted, keyword_arg, parameter_names, positional_args,
                                      receiver)

if TYPE_CHECKING:
    from lintloop.analysis.context import FileContext, SourceOrdered

Loop = cst.For | cst.While

# optax optimizers whose state holds a step count used for Adam's bias correction.
_ADAM_LIKE = {"adam", "adamw", "nadam", "nadamw", "amsgrad", "adamax", "adamaxw", "radam", "lamb", "adabelief",
              "yogi", "novograd", "adan", "scale_by_adam", "scale_by_amsgrad", "scale_by_adamax",
              "scale_by_radam", "scale_by_belief", "scale_by_yogi", "scale_by_novograd", "scale_by_adan"}
# Optimizers that keep momentum (a trace of past updates) and no step count.
_MOMENTUM = {"trace", "lars", "lion", "scale_by_lion"}
# Optimizers with other running statistics in their state.
_ACCUMULATING = {"rmsprop", "adagrad", "adadelta", "adafactor", "sm3", "fromage", "lamb", "noisy_sgd",
                 "scale_by_rms", "scale_by_stddev", "scale_by_factored_rms", "ema", "sm3"}
# Transforms with an empty state: losing it changes nothing.
_STATELESS = {"identity", "scale", "clip", "clip_by_global_norm", "clip_by_block_rms", "set_to_zero",
              "keep_params_nonnegative", "scale_by_trust_ratio", "adaptive_grad_clip", "per_example_global_norm_clip",
              "add_decayed_weights", "scale_by_param_block_norm", "scale_by_param_block_rms", "centralize",
              "normalize_by_update_norm", "stateless", "stateless_with_tree_map"}
# Optimizers that take a learning rate (a number or a schedule) as first argument / `learning_rate=`.
_SCHEDULE_FUNCTIONS = {"constant_schedule", "linear_schedule", "cosine_decay_schedule", "exponential_decay",
                       "warmup_cosine_decay_schedule", "warmup_exponential_decay_schedule",
                       "piecewise_constant_schedule", "piecewise_interpolate_schedule", "join_schedules",
                       "polynomial_schedule", "cosine_onecycle_schedule", "linear_onecycle_schedule",
                       "sgdr_schedule", "warmup_constant_schedule"}
# Loop primitives whose body's returned carry is the next iteration's input.
_CARRY_LOOPS = {"scan", "fori_loop", "while_loop", "nnx.scan", "nnx.fori_loop", "nnx.while_loop", "hk.scan",
                "hk.fori_loop", "hk.while_loop"}
# Names that say a receiver is an optax optimizer when the file does not show how it was built.
_OPTIMIZER_NAMES = {"tx", "optimizer", "opt", "optim", "optax_optimizer", "opt_fn", "optimiser", "inner_opt",
                    "outer_opt", "inner_optimizer", "outer_optimizer"}
_APPLY_UPDATES = {"optax.apply_updates", "optax._src.update.apply_updates"}
_IN_PLACE_OPTIMIZERS = {"flax.nnx.Optimizer", "flax.nnx.ModelAndOptimizer", "flax.nnx.optimizer.Optimizer"}
_DEPTH = 3


@dataclass(frozen=True)
class Optimizer:
    """What a `tx.update` call's optimizer is, as far as the file shows."""

    label: str  # "optax.adam", "optax.sgd (momentum)", "optax.chain(...)"; "" when unknown
    cost: str  # what losing its state costs, one clause for a message
    stateless: bool = False

    @property
    def known(self) -> bool:
        return bool(self.label)


_GENERIC_COST = ("its state (moment estimates, step count, schedule position) restarts from its initial value "
                 "every step")


@dataclass(frozen=True)
class LostResult:
    """An update's result (new optimizer state, new parameters, new TrainState) that the next step never sees."""

    call: cst.Call  # the `tx.update` / `apply_updates` / `apply_gradients` call
    what: str  # "state" | "params" | "train_state"
    how: str  # "discarded (`_`)", "bound to `new_state`, never read", "never re-bound ..."
    chain: CallChain  # call sites from the call's function out to the loop, innermost first
    loop: cst.CSTNode  # the loop (or scan/fori_loop call) that repeats the step
    certain: bool  # dropped outright, as opposed to a name the loop never re-binds


class OptimizerStates(Analysis):
    """`ctx.optimizer_state`: optax `update` calls, their optimizers, and lost update results."""

    asks = frozenset({"calls", "definitions", "flow", "jax"})

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._optimizers: dict[cst.Call, Optimizer] = {}

    # ----- what the calls are ------------------------------------------------------------------
    @computed
    def update_calls(self) -> list[cst.Call]:
        """`tx.update(grads, opt_state[, params])` calls of optax optimizers (or of receivers named like one)."""
        return [c for c in self.ctx.nodes(cst.Call) if self._is_optax_update(c)]

    @computed
    def apply_calls(self) -> list[cst.Call]:
        """`optax.apply_updates(params, updates)` and flax `state.apply_gradients(grads=...)` calls."""
        return [c for c in self.ctx.nodes(cst.Call) if self._applied_input(c) is not None]

    def is_update_call(self, call: cst.Call) -> bool:
        """One of `update_calls`."""
        return call in self._update_call_set

    def is_apply_call(self, call: cst.Call) -> bool:
        """One of `apply_calls`."""
        return call in self._apply_call_set

    @computed
    def _update_call_set(self) -> set[cst.Call]:
        return set(self.update_calls)

    @computed
    def _apply_call_set(self) -> set[cst.Call]:
        return set(self.apply_calls)

    def _is_optax_update(self, call: cst.Call) -> bool:
        owner = receiver(call)
        # `(updates, state[, params], **extra_args)`: `dict.update` takes one positional argument.
        if call_name(call) != "update" or owner is None or not 2 <= len(positional_args(call)) <= 3:
            return False
        made = self._construction(owner, call)
        if made is not None and made.startswith("optax."):
            return True
        if made in _IN_PLACE_OPTIMIZERS or not self.ctx.names.uses_framework("jax"):
            return False
        label = (dotted(owner) or "").rsplit(".", 1)[-1].lower()
        return label in _OPTIMIZER_NAMES or label.endswith("_tx") or label.endswith("_optimizer")

    def _construction(self, expr: cst.BaseExpression, at: cst.CSTNode) -> str | None:
        """The qualified name of what built `expr` (`optax.adam`; `optax.inject_hyperparams(optax.adam)(...)`
        gives the factory's name, `optax.adam`), or None when the file does not show it."""
        value = self.ctx.flow.resolve_value(expr, at)
        if not isinstance(value, cst.Call):
            return None
        if isinstance(value.func, cst.Call) and self.ctx.names.callee(value.func) in (
                "optax.inject_hyperparams", "optax.inject_stateful_hyperparams"):
            inner = argument(value.func, 0, "inner_factory")
            return self.ctx.names.qualname(inner) if inner is not None else "optax.inject_hyperparams"
        return self.ctx.names.callee(value)

    def _applied_input(self, call: cst.Call) -> cst.BaseExpression | None:
        """What an apply call turns into its result: `params` of `apply_updates(params, updates)`, `state`
        of flax's `state.apply_gradients(grads=...)` (keyword-only there; Keras' takes pairs positionally)."""
        if self.ctx.names.callee(call) in _APPLY_UPDATES:
            return argument(call, 0, "params")
        if call_name(call) == "apply_gradients" and receiver(call) is not None and not positional_args(call) \
                and keyword_arg(call, "grads") is not None and self.ctx.names.uses_framework("jax"):
            return receiver(call)
        return None

    # ----- which optimizer -----------------------------------------------------------------------
    def optimizer_of(self, update: cst.Call) -> Optimizer:
        cached = self._optimizers.get(update)
        if cached is None:
            owner = receiver(update)
            cached = self._optimizers[update] = self._optimizer(owner, update, 0) if owner is not None \
                else Optimizer("", _GENERIC_COST)
        return cached

    def _optimizer(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int) -> Optimizer:
        ctx = self.ctx
        value = ctx.flow.resolve_value(expr, at)
        if isinstance(value, cst.Call):
            if isinstance(value.func, cst.Call) and ctx.names.callee(value.func) in (
                    "optax.inject_hyperparams", "optax.inject_stateful_hyperparams"):
                inner = argument(value.func, 0, "inner_factory")
                name = ctx.names.qualname(inner) if inner is not None else None
                return self._describe(name, value) if name else Optimizer("optax.inject_hyperparams", _GENERIC_COST)
            name = ctx.names.callee(value)
            if name is not None and name.startswith("optax."):
                return self._describe(name, value)
            return Optimizer("", _GENERIC_COST)
        text = dotted(value) or ""
        if text.endswith(".tx"):  # flax `state.tx` / `self.tx`: the `tx=` given to `TrainState.create`
            given = self._given_tx
            if len(given) == 1 and depth < _DEPTH:
                return self._optimizer(given[0], given[0], depth + 1)
        if isinstance(value, cst.Name) and depth < _DEPTH:  # a parameter: what every caller passes
            passed = [a for a in self._arguments_for(value, at) if a is not None]
            found = {self._optimizer(a, a, depth + 1) for a in passed}
            if len(found) == 1 and passed:
                return found.pop()
        return Optimizer("", _GENERIC_COST)

    def _describe(self, name: str, call: cst.Call) -> Optimizer:
        short = name.rsplit(".", 1)[-1]
        if short == "chain":
            parts = [self._optimizer(a.value, call, _DEPTH) for a in call.args if not a.star]
            if any(not p.known for p in parts) or any(a.star for a in call.args):
                return Optimizer(f"{name}(...)", _GENERIC_COST)
            stateful = [p for p in parts if not p.stateless]
            if not stateful:
                return Optimizer(f"{name}(...)", "", stateless=True)
            return Optimizer(f"{name}(...)", "; ".join(dict.fromkeys(p.cost for p in stateful)))
        learning_rate = argument(call, 0, "learning_rate")
        scheduled = learning_rate is not None and self._is_schedule(learning_rate, call)
        costs = []
        if short in _ADAM_LIKE:
            costs.append("the step count stays 0, so every step is the first: bias correction makes each update "
                         "`lr·sign(g)`, with no averaging of past gradients")
        elif short == "sgd":
            momentum = argument(call, 1, "momentum")
            if momentum is not None and not (isinstance(momentum, cst.Name) and momentum.value == "None"):
                costs.append("momentum is silently off: each step is plain SGD")
        elif short in _MOMENTUM:
            costs.append("momentum is silently off: the trace of past updates restarts from zero each step")
        elif short in _ACCUMULATING:
            costs.append("its running statistics restart from their initial value every step")
        elif short in _STATELESS:
            pass
        else:
            costs.append(_GENERIC_COST)
        if scheduled:
            costs.append("the learning-rate schedule is frozen at its step-0 value (a warm-up from 0 stays 0: "
                         "the parameters never move)")
        label = name + (" (momentum)" if short == "sgd" and costs and not scheduled else "")
        if not costs:
            return Optimizer(label, "", stateless=True)
        return Optimizer(label, "; ".join(costs))

    def _is_schedule(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        value = self.ctx.flow.resolve_value(expr, at)
        if isinstance(value, cst.Lambda):
            return True
        if isinstance(value, cst.Call):
            name = self.ctx.names.callee(value) or ""
            return name.startswith("optax.") and (name.rsplit(".", 1)[-1] in _SCHEDULE_FUNCTIONS or
                                                  ".schedules." in name)
        return bool(self.ctx.calls.local_functions(value)) if isinstance(value, cst.Name) else False

    # ----- where the results go -------------------------------------------------------------------
    def lost_state(self, update: cst.Call) -> LostResult | None:
        """The new optimizer state of a `tx.update` call repeated by a loop, when the next update never sees it."""
        if self._constructed_in_place(update):
            return None
        optimizer = self.optimizer_of(update)
        if optimizer.stateless:
            return None
        state = argument(update, 1, "state")
        # `tx.update(g, tx.init(params))`, `clipper.update(g, None, params)`: nothing carried between calls.
        if isinstance(state, cst.Call) or (isinstance(state, cst.Name) and state.value == "None"):
            return None
        dropped = self._dropped(update, part=1)
        if dropped is not None:
            return self._certain_loss(update, "state", dropped, state)
        target = self._unpacked_target(update, 1)
        if not optimizer.known or state is None or target is None or dotted(target) == dotted(state):
            return None
        return self._never_fed_back(update, "state", state)

    def lost_result(self, apply: cst.Call) -> LostResult | None:
        """The result of an apply call repeated by a loop, when the next step never sees it."""
        applied = self._applied_input(apply)
        if applied is None:
            return None
        what = "params" if self.ctx.names.callee(apply) in _APPLY_UPDATES else "train_state"
        dropped = self._dropped(apply, part=None)
        if dropped is not None:
            return self._certain_loss(apply, what, dropped, applied)
        target = self._assigned_name(apply)
        if target is None or target == dotted(applied):
            return None
        return self._never_fed_back(apply, what, applied)

    def _constructed_in_place(self, update: cst.Call) -> bool:
        """flax `nnx.Optimizer(...).update(model, grads)` updates itself."""
        owner = receiver(update)
        return owner is not None and self._construction(owner, update) in _IN_PLACE_OPTIMIZERS

    def _certain_loss(self, call: cst.Call, what: str, how: str, fed: cst.BaseExpression | None) -> LostResult | None:
        repeated = self._repetition(call, 0)
        if repeated is None:
            return None
        chain, loop = repeated
        repeated_body = self._function_of(call) if chain else loop  # the step function a loop calls, or the loop
        if any(self._made_each_iteration(e, repeated_body, fed) for e in (fed, receiver(call)) if e is not None):
            return None
        return LostResult(call, what, how, chain, loop, certain=True)

    def _made_each_iteration(self, expr: cst.BaseExpression, repeated: cst.CSTNode | None,
                             fed: cst.BaseExpression) -> bool:
        """Is the state an update reads, or its optimizer, built afresh each iteration of the loop (or call
        of the step function) `repeated` (`state = opt.init(p)`, `clipper = optax.clip(c)`, the loop's own
        target: one optimizer per item), so that nothing carried over is lost?"""
        head = (dotted(expr) or "").split(".", 1)[0]
        if not head or not isinstance(repeated, (cst.For, cst.While, cst.FunctionDef)):
            return False
        scope = repeated if isinstance(repeated, cst.FunctionDef) else self.ctx.scope_of(repeated.body)
        # Only a binding by the loop itself or in its body counts: those made inside the loop.
        for binding in self.ctx.flow.scope_bindings_within(scope, head, repeated):
            if isinstance(repeated, cst.For) and binding.node is repeated:
                return True
            value = self.ctx.flow.source_value(binding)
            if self.ctx.is_inside(binding.node, repeated.body) and isinstance(value, cst.Call) \
                    and (call_name(value) == "init" or expr is not fed):
                return True
        return False

    def _never_fed_back(self, call: cst.Call, what: str, fed: cst.BaseExpression) -> LostResult | None:
        found = self._fed_back(fed, call, 0)
        if not isinstance(found, tuple):
            return None
        chain, loop, name = found
        return LostResult(call, what, f"`{name}` is never re-bound", chain, loop, certain=False)

    def _dropped(self, call: cst.Call, part: int | None) -> str | None:
        """How a call's result (or element `part` of it) is dropped: never bound, `_`, a name never read."""
        ctx = self.ctx
        parent = ctx.parents.get(call)
        if isinstance(parent, cst.Expr):
            # optax's update returns (updates, state): a bare call drops both; other `update`s return None.
            if part is not None and self._construction(receiver(call), call) is None:
                return None
            return "dropped (the call's result is never bound)"
        if part is not None and isinstance(parent, cst.Subscript) and parent.value is call \
                and len(parent.slice) == 1 and isinstance(parent.slice[0].slice, cst.Index):
            index = parent.slice[0].slice.value
            if isinstance(index, cst.Integer) and index.value == "0":
                return "discarded (only `[0]`, the updates, is kept)"
            return None
        if part is None:
            name = self._assigned_name(call)
        else:
            target = self._unpacked_target(call, part)
            name = target.value if isinstance(target, cst.Name) else None
        if name is None or "." in name:
            return None
        if name == "_":
            return "discarded (`_`)"
        return None if self._is_read(name, call) else f"bound to `{name}`, which is never read"

    def _unpacked_target(self, call: cst.Call, part: int) -> cst.BaseExpression | None:
        """`a, b = call`: the target at `part`."""
        parent = self.ctx.parents.get(call)
        if isinstance(parent, cst.Assign) and parent.value is call and len(parent.targets) == 1:
            target = parent.targets[0].target
            if isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == 2 \
                    and not any(isinstance(e, cst.StarredElement) for e in target.elements):
                return target.elements[part].value
        return None

    def _assigned_name(self, call: cst.Call) -> str | None:
        parent = self.ctx.parents.get(call)
        if isinstance(parent, cst.Assign) and parent.value is call and len(parent.targets) == 1:
            return dotted(parent.targets[0].target)
        if isinstance(parent, cst.AnnAssign) and parent.value is call:
            return dotted(parent.target)
        return None

    def _is_read(self, name: str, at: cst.CSTNode) -> bool:
        """Is `name` read anywhere in the scope that binds it at `at` (nested functions included)?"""
        occurrences = self._names.get(name)
        if occurrences is not None and any(not self._is_target(node) for node in occurrences.within(self.ctx.scope_of(at))):
            return True
        return name in self._declared_global

    @computed
    def _names(self) -> dict[str, SourceOrdered]:
        """The `Name` nodes of each identifier, in source order."""
        grouped: dict[str, list[cst.Name]] = defaultdict(list)
        for node in self.ctx.nodes(cst.Name):
            grouped[node.value].append(node)
        return {value: self.ctx.in_order(nodes) for value, nodes in grouped.items()}

    def _is_target(self, name: cst.Name) -> bool:
        node: cst.CSTNode = name
        for ancestor in self.ctx.ancestors(name):
            if isinstance(ancestor, cst.AssignTarget) or (isinstance(ancestor, cst.For) and ancestor.target is node):
                return True
            if isinstance(ancestor, (cst.Param, cst.FunctionDef)):
                return isinstance(ancestor, cst.Param)
            if not isinstance(ancestor, (cst.Tuple, cst.List, cst.Element, cst.StarredElement)):
                return False
            node = ancestor
        return False

    # ----- repetition and feeding back ---------------------------------------------------------------
    def _repetition(self, node: cst.CSTNode, depth: int) -> tuple[CallChain, cst.CSTNode] | None:
        """The loop that runs `node` each iteration — in its function, as a `lax.scan`/`fori_loop` body, or
        around a same-file call of its function (jitted or not) — and the call sites out to it."""
        ctx = self.ctx
        loop = ctx.innermost_loop(node)
        if loop is not None:
            return (), loop
        function = self._function_of(node)
        if function is None or depth >= _DEPTH:
            return None
        body_of = ctx.jax.traced_bodies.get(function)
        if body_of is not None and body_of.kind in _CARRY_LOOPS:
            return (), body_of.site
        for site in self._call_sites(function):
            outer = self._repetition(site, depth + 1)
            if outer is not None:
                return (site, *outer[0]), outer[1]
        return None

    def _fed_back(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int
                  ) -> bool | None | tuple[CallChain, Loop, str]:
        """Is the name passed as `expr` (`opt_state`, `state.opt_state`) re-bound by the loop that repeats
        `at`? True: yes, at some call site; (chain, loop, name): no loop that repeats it does; None: unknown
        (an attribute of `self`, a carry, a local taken from elsewhere, no visible loop)."""
        text = dotted(expr)
        if text is None:
            return None
        head = text.split(".", 1)[0]
        if head == "self" or head in self._declared_global:
            return None
        ctx = self.ctx
        loop = ctx.innermost_loop(at)
        if loop is not None:
            scope = ctx.scope_of(at)
            rebound = any(ctx.is_inside(b.node, loop.body) or (isinstance(loop, cst.For) and b.node is loop)
                          for b in ctx.bindings_in(scope, head))
            return True if rebound else ((), loop, head)
        function = self._function_of(at)
        if function is None or depth >= _DEPTH or head not in parameter_names(function):
            return None
        body_of = self.ctx.jax.traced_bodies.get(function)
        if body_of is not None and body_of.kind in _CARRY_LOOPS:
            return None  # a scan/fori_loop body: its parameters are the carry
        answers = []
        for site in self._call_sites(function):
            passed = self._argument(site, function, head)
            if passed is None:
                answers.append(None)
                continue
            rest = text[len(head):]
            outer = self._fed_back(_parse(dotted(passed) + rest) if dotted(passed) else passed, site, depth + 1)
            if isinstance(outer, tuple):
                outer = ((site, *outer[0]), outer[1], outer[2])
            answers.append(outer)
        if not answers or any(a is True for a in answers) or any(a is None for a in answers):
            return True if any(a is True for a in answers) else None
        return min(answers, key=lambda a: len(a[0]))

    @computed
    def _declared_global(self) -> set[str]:
        """Names some function declares `global` / `nonlocal`: re-bound out of sight."""
        return {item.name.value for node in (*self.ctx.nodes(cst.Global), *self.ctx.nodes(cst.Nonlocal))
                for item in node.names}

    def _function_of(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        for ancestor in self.ctx.ancestors(node):
            if isinstance(ancestor, cst.Lambda):
                return None
            if isinstance(ancestor, cst.FunctionDef):
                return ancestor
        return None

    @computed
    def _given_tx(self) -> list[cst.BaseExpression]:
        """The `tx=` of every `create(...)` call (flax `TrainState.create(..., tx=...)`)."""
        return [keyword_arg(c, "tx") for c in self.ctx.definitions.named("create").nodes
                if keyword_arg(c, "tx") is not None]

    @computed
    def _jitted_call_sites(self) -> dict[cst.FunctionDef, list[cst.Call]]:
        """Calls of a jitted alias of a same-file def (`step = jax.jit(train_step)`; `step(...)`)."""
        table: dict[cst.FunctionDef, list[cst.Call]] = {}
        for call in self.ctx.nodes(cst.Call):
            found = self.ctx.jax.compiled_callee(call)
            if found is not None and isinstance(found[0], cst.FunctionDef):
                table.setdefault(found[0], []).append(call)
        return table

    def _call_sites(self, function: cst.FunctionDef) -> list[cst.Call]:
        sites = list(self.ctx.calls.call_sites.get(function, ()))
        extra = [*self._jitted_call_sites.get(function, ()), *self._instance_call_sites.get(function, ())]
        return sites + [c for c in extra if c not in sites]

    @computed
    def _instance_call_sites(self) -> dict[cst.FunctionDef, list[cst.Call]]:
        """`gan.update(...)` on an instance of a same-file class (`gan = GAN(...)`): calls of its method."""
        table: dict[cst.FunctionDef, list[cst.Call]] = {}
        for call in self.ctx.nodes(cst.Call):
            owner = receiver(call)
            if owner is None or dotted(owner) in (None, "self"):
                continue
            made = self.ctx.flow.resolve_value(owner, call)
            cls = self.ctx.definitions.local_class(made.func) if isinstance(made, cst.Call) else None
            if cls is None:
                continue
            for statement in cls.body.body:
                if isinstance(statement, cst.FunctionDef) and statement.name.value == call_name(call):
                    table.setdefault(statement, []).append(call)
        return table

    def _argument(self, site: cst.Call, function: cst.FunctionDef, param: str) -> cst.BaseExpression | None:
        params = [p.name.value for p in (*function.params.posonly_params, *function.params.params)]
        if params and params[0] in ("self", "cls") and isinstance(site.func, cst.Attribute):
            params = params[1:]
        by_keyword = keyword_arg(site, param)
        if by_keyword is not None:
            return by_keyword
        if any(a.star for a in site.args):
            return None
        positional = positional_args(site)
        index = params.index(param) if param in params else -1
        return positional[index] if 0 <= index < len(positional) else None

    def _arguments_for(self, name: cst.Name, at: cst.CSTNode) -> list[cst.BaseExpression | None]:
        function = self._function_of(at)
        if function is None or name.value not in parameter_names(function):
            return []
        return [self._argument(site, function, name.value) for site in self._call_sites(function)]


def _parse(text: str) -> cst.BaseExpression:
    return cst.parse_expression(text)
