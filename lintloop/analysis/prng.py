"""JAX PRNG key flow: which key value each sampling call consumes, and where one value is consumed twice.

A key *value* is what a binding holds: `key = jax.random.PRNGKey(0)` makes one, `key, sub =
jax.random.split(key)` makes two new ones (the old one is used up), `keys[0]` / unpacking picks one
out of a split. A value is *drawn from* by a sampler (`jax.random.normal`, ...), by flax's
`apply(..., rngs=...)` / `init(key, ...)`, haiku's `init(key, ...)` / `apply(params, key, ...)`,
`nnx.Rngs(key)`, `hk.PRNGSequence(key)`, a `jax.nn.initializers` initializer, or a same-file
helper that draws from its parameter. Drawing twice from one value gives the same numbers:

- *pairs*: two draws from one value on every path (an `if`/`else` drawing on exclusive paths is
  fine; a draw on only some paths does not count). Only samplers, initializers, `apply(rngs=...)`
  and helpers that draw from their parameter itself count in pairs (see `Draw.pairable`);
- *loops*: a draw inside a loop (or a comprehension) from a value that is the same on every
  iteration: made before the loop and never re-bound in it, re-made from a constant seed in it, or
  split / folded from such a value with loop-invariant data. A loop whose body always leaves
  (`return`, `break`) is not a repetition.

The flow is followed per function (and module code) through assignments, tuple unpacking,
constant indexes, branches, loops (twice round: the second pass sees values coming back), early
exits, calls of same-file helpers (also through `step = jax.jit(train_step)`), and nested functions
and lambdas that read a key of the function around them (counted where they are defined: a
`loss_fn` closing over `dropout_rng`). Keys in attributes, dicts and containers (`self.rng`,
`state.key`, `rngs["dropout"]`), globals read inside functions, and keys passed to functions the
file does not define are not followed: such draws are not judged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import libcst as cst

from lintloop.analysis.base import Analysis, computed
from lintloop.analysis.index import Scope
from lintloop.analysis.nodes import (argument, call_name, children, dotted, keyword_arg, names_in, positional_args,
                                      receiver, walk)

if TYPE_CHECKING:
    from lintloop.analysis.context import FileContext, SourceOrdered

# Every `jax.random` function that draws numbers from the key it is given (jax 0.10).
SAMPLERS = frozenset({
    "ball", "bernoulli", "beta", "binomial", "bits", "categorical", "cauchy", "chisquare", "choice",
    "dirichlet", "double_sided_maxwell", "exponential", "f", "gamma", "generalized_normal", "geometric",
    "gumbel", "laplace", "loggamma", "logistic", "lognormal", "maxwell", "multinomial",
    "multivariate_normal", "normal", "orthogonal", "pareto", "permutation", "poisson", "rademacher",
    "randint", "rayleigh", "shuffle", "t", "triangular", "truncated_normal", "uniform", "wald",
    "weibull_min",
})
# Calls that make a key from a seed, and calls that derive new keys from a key.
KEY_MAKERS = frozenset({"jax.random.PRNGKey", "jax.random.key", "jax.random.wrap_key_data"})
DERIVERS = frozenset({"jax.random.split", "jax.random.fold_in", "jax.random.clone"})
# Objects that draw from the key they are built with.
KEY_STREAMS = frozenset({"flax.nnx.Rngs", "flax.nnx.rnglib.Rngs", "haiku.PRNGSequence"})
INITIALIZER_MODULES = ("jax.nn.initializers.", "flax.linen.initializers.", "flax.nnx.initializers.")
# Wrappers whose result runs the function passed first.
JIT_WRAPPERS = frozenset({"jax.jit", "jax.pmap", "flax.nnx.jit", "equinox.filter_jit", "jax.checkpoint",
                          "jax.remat"})
# ... and pass their arguments to it unchanged (`jax.value_and_grad(loss_fn)(params, x, key)`).
ARGUMENT_PRESERVING = JIT_WRAPPERS | {"jax.grad", "jax.value_and_grad", "flax.nnx.grad", "flax.nnx.value_and_grad",
                                      "equinox.filter_grad", "equinox.filter_value_and_grad"}
# Screen tokens of the calls that draw directly (the rule's `needs`).
DRAW_CALL_NAMES = tuple(sorted(SAMPLERS | {"apply", "apply_fn", "init", "init_with_output", "Rngs", "PRNGSequence"}))
# ... and of the calls that make keys, and the usual names of a key (not `split`: every `str.split` would
# make a unit worth parsing, measured 1.5x the parse time on a JAX corpus; a unit that only splits a key
# usually names it by one of these names).
KEY_CALL_NAMES = ("PRNGKey", "key", "fold_in")
KEY_PARAMETER_NAMES = ("key", "rng", "rngs", "prng", "rng_key", "prng_key", "dropout_rng", "subkey", "sub_key")
# How many same-file calls deep a helper's draws are followed.
_HELPER_DEPTH = 3
_KEYISH = ("key", "rng")

# A key value: the node that made it (a call, an assignment, a parameter, a `for`) and the
# indexes that pick it out of a split (`k1, k2 = split(key)`: (call, 0) and (call, 1)).
Value = tuple


@dataclass
class Definition:
    """How a value was made: `maker` (from a seed), `derive` (split / fold_in of `inputs`), `param`,
    or `other` (anything else: not followed further)."""

    node: cst.CSTNode
    kind: str
    call: cst.Call | None = None
    inputs: set = field(default_factory=set)  # key values a derive reads, over every pass
    data: tuple = ()  # seed / fold_in data expressions
    data_values: dict = field(default_factory=dict)  # name in `data` -> its values, over every pass


@dataclass
class Draw:
    """A call that draws from the key `key` (an expression) holds: the values it may hold there."""

    call: cst.Call
    key: cst.BaseExpression
    what: str  # for messages: "`jax.random.normal`", "`model.apply(rngs=...)`", "`train_step`"
    direct: bool  # a jax.random sampler, apply/init, Rngs/PRNGSequence (not a helper or initializer)
    # Judged in pairs (else only in loops): samplers, initializers, flax `apply(rngs=...)`, and helpers
    # that draw from their parameter itself with one of those. Not `init`, `nnx.Rngs`, `hk.PRNGSequence`,
    # haiku's `apply(params, rng)`: one key for `init` and `apply`, or two `init`s, is the usual way to
    # get identical parameters on purpose; nor a helper that draws from a split of its key (`split` then
    # a draw of the same key is not judged).
    pairable: bool
    at: cst.CSTNode  # where it runs in its flow: the call, or the nested function that makes it
    values: set = field(default_factory=set)


@dataclass
class Reuse:
    """A draw from a value already drawn from (`first`), or drawn from on every iteration of `loop`
    though it does not change there (`root`: the statement that makes it inside the loop, if any)."""

    draw: Draw
    first: Draw | None = None
    loop: cst.For | cst.While | None = None
    root: cst.CSTNode | None = None


class _Layers:
    """A mapping shared between the states of a flow: frozen layers (dicts, oldest first, each at most
    half the size of the one below it) and this state's own changes. Forking a state at a branch
    costs its changes, not the mapping, and merging branches reads only what they changed since
    they forked (a script of 1,000 loops forks at each, with thousands of names bound)."""

    __slots__ = ("frozen", "own")

    def __init__(self, frozen: tuple = (), own: dict | None = None) -> None:
        self.frozen = frozen
        self.own = {} if own is None else own

    def get(self, key, default=None):
        if key in self.own:
            return self.own[key]
        for layer in reversed(self.frozen):
            if key in layer:
                return layer[key]
        return default

    def __contains__(self, key) -> bool:
        return key in self.own or any(key in layer for layer in self.frozen)

    def __getitem__(self, key):
        found = self.get(key, _MISSING)
        if found is _MISSING:
            raise KeyError(key)
        return found

    def __setitem__(self, key, value) -> None:
        self.own[key] = value

    def setdefault(self, key, value):
        found = self.get(key, _MISSING)
        if found is _MISSING:
            self.own[key] = found = value
        return found

    def fork(self) -> _Layers:
        """A copy: this state's changes become a layer both share."""
        if self.own:
            layers = [*self.frozen, self.own]
            while len(layers) > 1 and 2 * len(layers[-1]) >= len(layers[-2]):  # keep the sizes halving
                newer = layers.pop()
                layers[-1] = {**layers[-1], **newer}
            self.frozen, self.own = tuple(layers), {}
        return _Layers(self.frozen)


_MISSING = object()


def _since_fork(maps: list[_Layers]) -> tuple[tuple, list[dict]]:
    """The layers all `maps` share, and what each has on top of them (newer entries winning)."""
    shared = len(maps[0].frozen)
    for other in maps[1:]:
        shared = min(shared, len(other.frozen))
        shared = next((i for i in range(shared) if other.frozen[i] is not maps[0].frozen[i]), shared)
    tops = []
    for layers in maps:
        top: dict = {}
        for layer in layers.frozen[shared:]:
            top.update(layer)
        top.update(layers.own)
        tops.append(top)
    return maps[0].frozen[:shared], tops


class _Union:
    """The values a name may hold where paths meet, read only when asked for: a name re-bound in each of
    1,000 loops may hold the value of any of them after the last, and uniting those sets at each loop's
    exit would cost the square of the loops."""

    __slots__ = ("parts", "_values")

    def __init__(self, parts: tuple) -> None:
        self.parts = parts
        self._values: frozenset | None = None

    def __iter__(self):
        if self._values is None:
            values: set = set()
            pending = list(self.parts)
            seen: set[int] = set()
            while pending:
                part = pending.pop()
                if id(part) in seen:
                    continue
                seen.add(id(part))
                if isinstance(part, _Union):
                    if part._values is not None:
                        values |= part._values
                    else:
                        pending.extend(part.parts)
                else:
                    values |= part
            self._values = frozenset(values)
            self.parts = ()  # read once: what it was made of may go
        return iter(self._values)


@dataclass
class _State:
    env: _Layers  # name -> the Values it may hold (a frozenset, or a _Union of them)
    drawn: _Layers  # Value -> the Draw that drew from it first, on every path here (never re-bound)

    def copy(self) -> _State:
        return _State(self.env.fork(), self.drawn.fork())


def _merge(states: list) -> _State | None:
    states = [s for s in states if s is not None]
    if not states:
        return None
    shared, tops = _since_fork([s.env for s in states])
    before = _Layers(shared)
    env: dict = {}
    for name in {name for top in tops for name in top}:
        parts = []
        for top in tops:
            values = top.get(name, _MISSING)
            if values is _MISSING:
                values = before.get(name)
            if values is not None and not any(values is part for part in parts):
                parts.append(values)
        env[name] = parts[0] if len(parts) == 1 else _Union(tuple(parts)) if parts else frozenset()
    # A value drawn from before the fork is drawn from on every path; one drawn from since, if on all.
    shared_drawn, drawn_tops = _since_fork([s.drawn for s in states])
    drawn = {v: d for v, d in drawn_tops[0].items() if all(v in top for top in drawn_tops[1:])}
    return _State(_Layers(shared, env), _Layers(shared_drawn, drawn))


class _ScopeFlow:
    """The key flow of one function body (or the module's code)."""

    def __init__(self, prng: Prng, scope: cst.Module | cst.FunctionDef, depth: int) -> None:
        self.prng = prng
        self.ctx = prng.ctx
        self.scope = scope
        self.depth = depth
        self.definitions: dict = {}
        self.draws: dict = {}  # (call, key expression) -> Draw
        self.pairs: dict = {}  # (call, key) -> Reuse (pairs)
        self._loop_exits: list = []  # per enclosing loop: [continue states, break states]
        self._lambdas: list = []  # lambdas met while reading an expression
        self._comprehensions: list = []  # comprehensions met while reading an expression
        self._repeating: set = set()  # loops whose body can reach its next iteration
        state = _State(_Layers(), _Layers())
        if isinstance(scope, cst.FunctionDef):
            for param in _params(scope):
                self.definitions[param] = Definition(param, "param")
                state.env[param.name.value] = frozenset({(param,)})
            body = scope.body.body if isinstance(scope.body, cst.IndentedBlock) else ()
        else:
            body = scope.body
        self._block(body, state)

    # ----- statements ------------------------------------------------------------------------
    def _block(self, statements, state: _State | None) -> _State | None:
        for statement in statements:
            if state is None:
                return None
            state = self._statement(statement, state)
        return state

    def _suite(self, suite: cst.BaseSuite, state: _State | None) -> _State | None:
        if isinstance(suite, cst.IndentedBlock):
            return self._block(suite.body, state)
        return self._block(suite.body, state) if isinstance(suite, cst.SimpleStatementSuite) else state

    def _statement(self, node: cst.CSTNode, state: _State) -> _State | None:
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                state = self._small(small, state)
                if state is None:
                    return None
            return state
        if isinstance(node, cst.If):
            self._draws_in(node.test, state)
            branches = [self._suite(node.body, state.copy())]
            orelse = node.orelse
            if isinstance(orelse, cst.If):
                branches.append(self._statement(orelse, state.copy()))
            elif isinstance(orelse, cst.Else):
                branches.append(self._suite(orelse.body, state.copy()))
            else:
                branches.append(state)
            return _merge(branches)
        if isinstance(node, (cst.For, cst.While)):
            return self._loop(node, state)
        if isinstance(node, cst.With):
            for item in node.items:
                self._draws_in(item.item, state)
                if item.asname is not None:
                    self._bind_other(item.asname.name, node, state)
            return self._suite(node.body, state)
        if isinstance(node, cst.Try):
            after_body = self._suite(node.body, state.copy())
            if node.orelse is not None:
                after_body = self._suite(node.orelse.body, after_body)
            ends = [after_body] + [self._suite(h.body, _merge([state, after_body]) or state.copy())
                                   for h in node.handlers]
            merged = _merge(ends)
            if node.finalbody is not None and merged is not None:
                merged = self._suite(node.finalbody.body, merged)
            return merged
        if isinstance(node, cst.Match):
            self._draws_in(node.subject, state)
            return _merge([state] + [self._suite(case.body, state.copy()) for case in node.cases])
        if isinstance(node, cst.FunctionDef) and isinstance(self.scope, cst.FunctionDef):
            self._closure_draws(node, state)
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            self._bind_other(node.name, node, state)
        return state

    def _small(self, node: cst.BaseSmallStatement, state: _State) -> _State | None:
        if isinstance(node, (cst.Return, cst.Raise)):
            for part in (getattr(node, "value", None), getattr(node, "exc", None)):
                if part is not None:
                    self._draws_in(part, state)
            return None
        if isinstance(node, (cst.Continue, cst.Break)):
            if self._loop_exits:
                self._loop_exits[-1][0 if isinstance(node, cst.Continue) else 1].append(state.copy())
            return None
        if isinstance(node, cst.Assign):
            self._draws_in(node.value, state)
            for target in node.targets:
                self._bind(target.target, node.value, node, state)
            return state
        if isinstance(node, cst.AnnAssign):
            if node.value is not None:
                self._draws_in(node.value, state)
                self._bind(node.target, node.value, node, state)
            return state
        if isinstance(node, cst.AugAssign):
            self._draws_in(node.value, state)
            self._bind_other(node.target, node, state)
            return state
        if isinstance(node, cst.Expr):
            self._draws_in(node.value, state)
        return state

    def _loop(self, node: cst.For | cst.While, entry: _State) -> _State | None:
        head = node.iter if isinstance(node, cst.For) else node.test
        self._draws_in(head, entry)
        ends = []
        state = entry.copy()
        for _ in range(2):  # the second pass sees the values the first sends round the loop
            if isinstance(node, cst.For):
                self._bind_other(node.target, node, state)
            self._loop_exits.append([[], []])
            end = self._suite(node.body, state)
            continues, breaks = self._loop_exits.pop()
            if end is not None or continues:
                self._repeating.add(node)
            ends = [end, *breaks]
            back = _merge([entry, end, *continues])
            # Draws of one iteration and the next are judged by the loop test, not as pairs.
            state = _State(back.env if back else entry.env.fork(), entry.drawn.fork())
        forever = isinstance(node, cst.While) and isinstance(node.test, cst.Name) and node.test.value == "True"
        after = _merge(ends if forever else [entry.copy(), *ends])
        if after is not None and node.orelse is not None:
            after = self._suite(node.orelse.body, after)
        return after

    # ----- bindings --------------------------------------------------------------------------
    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression, node: cst.CSTNode,
              state: _State) -> None:
        values = self.key_values(value, state)
        if isinstance(target, cst.Name):
            if values is None:
                self._bind_other(target, node, state)
            else:
                state.env[target.value] = frozenset(values)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for index, element in enumerate(target.elements):
                if isinstance(element, cst.StarredElement) or values is None:
                    self._bind_other(element.value, node, state, index)
                else:
                    self._bind(element.value, _Picked(values, index), node, state)

    def _bind_other(self, target: cst.CSTNode, node: cst.CSTNode, state: _State, index: int | None = None) -> None:
        """Names bound to something that is not a followed key: a fresh value made at `node`."""
        if isinstance(target, cst.Name):
            self.definitions.setdefault(node, Definition(node, "other"))
            state.env[target.value] = frozenset({(node,) if index is None else (node, index)})
        elif isinstance(target, (cst.Tuple, cst.List)):
            for i, element in enumerate(target.elements):
                self._bind_other(element.value, node, state, i)
        elif isinstance(target, cst.StarredElement):
            self._bind_other(target.value, node, state, index)

    # ----- expressions -----------------------------------------------------------------------
    def key_values(self, expr, state: _State) -> set | None:
        """The values a key expression may hold, or None when it is not followed."""
        if isinstance(expr, _Picked):
            return {v + (expr.index,) for v in expr.values}
        if isinstance(expr, cst.Name):
            found = state.env.get(expr.value)
            if found is None and isinstance(self.scope, cst.FunctionDef):
                made = self._made_once(expr.value, enclosing=True)
                if made is not None:
                    self._define(made, self.ctx.names.callee(made), state)  # type: ignore[arg-type]
                    return {(made,)}
            return set(found) if found is not None else None
        if isinstance(expr, cst.Subscript):
            index = _constant_index(expr)
            base = self.key_values(expr.value, state) if index is not None else None
            return {v + (index,) for v in base} if base is not None else None
        if isinstance(expr, cst.Call):
            name = self.ctx.names.callee(expr)
            if name in KEY_MAKERS or name in DERIVERS:
                self._define(expr, name, state)
                return {(expr,)}
        if isinstance(expr, cst.Attribute):
            name = dotted(expr)
            made = self._made_once(name) if name and name.startswith("self.") and name.count(".") == 1 else None
            if made is not None:
                self._define(made, self.ctx.names.callee(made), state)  # type: ignore[arg-type]
                return {(made,)}
        return None

    def _made_once(self, name: str, enclosing: bool = False) -> cst.Call | None:
        """The new key a variable of an enclosing scope (`key = jax.random.PRNGKey(0)` in module code, or in
        the function a step closure is defined in; `enclosing`), or an attribute set in another method
        (`self.key = ...` in `__init__`), holds when that is its only binding in the file: the same key on
        every read from this function."""
        ctx = self.ctx
        bindings = ctx.bindings_anywhere(name)
        if len(bindings) != 1 or bindings[0].augmented or ctx.is_inside(bindings[0].node, self.scope) \
                or (enclosing and ctx.scope_of(bindings[0].node) not in ctx.enclosing_scopes(self.scope)):
            return None
        value = bindings[0].value
        return value if isinstance(value, cst.Call) and ctx.names.callee(value) in KEY_MAKERS else None

    def _define(self, call: cst.Call, name: str, state: _State) -> None:
        definition = self.definitions.get(call)
        if definition is None:
            if name in KEY_MAKERS:
                data = tuple(a.value for a in call.args[:1])
                definition = Definition(call, "maker", call, data=data)
            else:
                data = (argument(call, 1, "data"),) if name == "jax.random.fold_in" else ()
                definition = Definition(call, "derive", call, data=tuple(d for d in data if d is not None))
            self.definitions[call] = definition
        if definition.kind == "derive":
            source = argument(call, 0, "key")
            found = self.key_values(source, state) if source is not None else None
            # An unfollowed source (an attribute, a free variable) may change: never invariant.
            definition.inputs |= found if found is not None else {("unfollowed",)}
        for expr in definition.data:
            for name_node in names_in(expr):
                values = state.env.get(name_node)
                if values is not None:
                    definition.data_values.setdefault(name_node, set()).update(values)

    def _draws_in(self, expr: cst.CSTNode, state: _State) -> None:
        """Record the draws in an expression (in source order), and pairs among them."""
        self._lambdas, self._comprehensions = [], []
        for call in self._calls(expr):
            name = self.ctx.names.callee(call)
            if name in KEY_MAKERS or name in DERIVERS:
                self.key_values(call, state)
                continue
            for key, what, direct, pairable in self.prng.drawn_keys(call, name, self.depth):
                self._draw(call, key, what, direct, pairable, state)
        for fn in self._lambdas:
            self._closure_draws(fn, state)
        for comprehension in self._comprehensions:
            self._comprehension_draws(comprehension, state)

    def _comprehension_draws(self, comprehension: cst.BaseComp, state: _State) -> None:
        """Draws in a comprehension from a key that is not one of its `for` targets: one per element
        (`[jax.random.normal(key, s) for s in shapes]` draws the same numbers for every element)."""
        targets: set[str] = set()
        clause = comprehension.for_in
        while clause is not None:
            targets |= names_in(clause.target)
            clause = clause.inner_for_in
        for call in _walk_calls(comprehension):
            if any(isinstance(a, (cst.Lambda, cst.FunctionDef)) for a in self._ancestors_until(call, comprehension)):
                continue
            for key, what, direct, pairable in self.prng.drawn_keys(call, self.ctx.names.callee(call), self.depth):
                if not names_in(key) & targets:
                    self._draw(call, key, what, direct, pairable, state)

    def _ancestors_until(self, node: cst.CSTNode, stop: cst.CSTNode):
        for ancestor in self.ctx.ancestors(node):
            if ancestor is stop:
                return
            yield ancestor

    def _closure_draws(self, fn: cst.FunctionDef | cst.Lambda, state: _State) -> None:
        """Draws a nested function or lambda makes from a key of this function it reads (`loss_fn` in a
        train step, closing over `dropout_rng`): counted where it is defined, where it is usually
        called once (`jax.grad(loss_fn)(params)`)."""
        local = {p.name.value for p in _params(fn)} | (set(self.ctx.bindings.get(fn, {})) if isinstance(
            fn, cst.FunctionDef) else set())
        body = fn.body
        for call in (n for n in _walk_calls(body)):
            name = self.ctx.names.callee(call)
            if name in KEY_MAKERS or name in DERIVERS:
                continue
            for key, what, direct, pairable in self.prng.drawn_keys(call, name, self.depth):
                root = key.value if isinstance(key, cst.Subscript) else key
                if isinstance(root, cst.Name) and root.value not in local:
                    self._draw(call, key, what, direct, pairable, state, at=fn)

    def _calls(self, expr: cst.CSTNode) -> list[cst.Call]:
        """Calls evaluated by `expr`, not inside lambdas, comprehensions or nested definitions,
        innermost first (arguments are evaluated before the call)."""
        found: list[cst.Call] = []
        stack: list = [(expr, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                found.append(node)
                continue
            if isinstance(node, cst.Lambda) and isinstance(self.scope, cst.FunctionDef):
                self._lambdas.append(node)
            if isinstance(node, _COMPREHENSIONS):
                self._comprehensions.append(node)
            if isinstance(node, (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp,
                                 cst.FunctionDef, cst.ClassDef)):
                continue
            if isinstance(node, cst.Call):
                stack.append((node, True))
            stack.extend((child, False) for child in reversed(children(node)))
        return found  # post-order: a call's arguments before the call

    def _draw(self, call: cst.Call, key: cst.BaseExpression, what: str, direct: bool, pairable: bool,
              state: _State, at: cst.CSTNode | None = None) -> None:
        values = self.key_values(key, state)
        if not values:
            return
        draw = self.draws.get((call, key))
        if draw is None:
            draw = self.draws[(call, key)] = Draw(call, key, what, direct, pairable, at or call)
        draw.values |= values
        if not pairable:
            return
        earlier = [state.drawn[v] for v in values if v in state.drawn]
        if len(earlier) == len(values) and (call, key) not in self.pairs:
            first = earlier[0]
            if first.call is not call or first.key is not key:
                self.pairs[(call, key)] = Reuse(draw, first=first)
        for v in values:
            state.drawn.setdefault(v, draw)

    # ----- loop invariance -------------------------------------------------------------------
    def invariant(self, value: Value, loop: cst.CSTNode, seen: frozenset = frozenset()) -> bool:
        """Is `value` the same on every iteration of `loop`?"""
        base = value[0]
        if not isinstance(base, cst.CSTNode):
            return False
        if not self.ctx.is_inside(base, loop):
            return True
        definition = self.definitions.get(base)
        if definition is None or base in seen or definition.kind not in ("maker", "derive"):
            return False
        seen = seen | {base}
        if definition.kind == "derive" and not (definition.inputs and all(
                self.invariant(v, loop, seen) for v in definition.inputs)):
            return False
        return all(self._invariant_data(e, definition, loop, seen) for e in definition.data)

    def _invariant_data(self, expr: cst.BaseExpression, definition: Definition, loop: cst.CSTNode,
                        seen: frozenset) -> bool:
        if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString)):
            return True
        if isinstance(expr, (cst.UnaryOperation,)):
            return self._invariant_data(expr.expression, definition, loop, seen)
        if isinstance(expr, cst.BinaryOperation):
            return all(self._invariant_data(e, definition, loop, seen) for e in (expr.left, expr.right))
        if isinstance(expr, cst.Name):
            values = definition.data_values.get(expr.value)
            if values is None:  # not bound in this function: a global or a builtin
                return True
            return all(self.invariant(v, loop, seen) for v in values)
        if isinstance(expr, cst.Attribute) and dotted(expr):
            root = dotted(expr).split(".")[0]
            assigned = self.prng.assigned_attributes(loop)
            return dotted(expr) not in assigned and self._invariant_data(cst.Name(root), definition, loop, seen)
        return False

    def loop_reuses(self) -> list[Reuse]:
        """Draws inside a loop from a value that does not change across its iterations."""
        found: list[Reuse] = []
        for draw in self.draws.values():
            # The loops of this scope; else, in a step function a loop calls, each call is an iteration.
            repeated = [(loop, loop) for loop in self._loops_around(draw.at)] or self._calling_loop(draw.at)
            for loop, body in repeated:
                if all(self.invariant(v, body) for v in draw.values):
                    root = next((v[0] for v in draw.values if self.ctx.is_inside(v[0], body)), None)
                    found.append(Reuse(draw, loop=loop, root=root))
                    break
        return found

    def _calling_loop(self, node: cst.CSTNode) -> list[tuple[cst.For | cst.While, cst.FunctionDef]]:
        """[(the loop that calls this function on every iteration, the function)] when `node` runs once per
        call of it (`LoopValues.iteration_unit`), else []."""
        if not isinstance(self.scope, cst.FunctionDef) or self.ctx.loop_values.iteration_unit(node) is not self.scope:
            return []
        loop = self.ctx.loop_values.calling_loop(self.scope)
        return [(loop, self.scope)] if loop is not None else []

    def _loops_around(self, node: cst.CSTNode) -> list:
        """The loops of this scope that run `node` on each iteration, innermost first (a comprehension
        counts for what it computes per element)."""
        loops = []
        for ancestor in self.ctx.ancestors(node):
            if ancestor is self.scope or isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                break
            if isinstance(ancestor, (cst.For, cst.While)) and self.ctx.is_inside(node, ancestor.body) \
                    and ancestor in self._repeating:
                loops.append(ancestor)
            elif isinstance(ancestor, _COMPREHENSIONS) and not self.ctx.is_inside(node, _first_iterable(ancestor)):
                loops.append(ancestor)
        return loops

    # ----- helpers -------------------------------------------------------------------------
    def param_drawn_from(self, value: Value, seen: frozenset = frozenset()) -> cst.Param | None:
        """The parameter a value is purely derived from (split, constant index, constant fold_in)."""
        base = value[0]
        if isinstance(base, cst.Param):
            return base
        definition = self.definitions.get(base)
        if definition is None or definition.kind != "derive" or base in seen or not definition.inputs:
            return None
        if any(not isinstance(e, (cst.Integer, cst.SimpleString)) for e in definition.data):
            return None
        params = {self.param_drawn_from(v, seen | {base}) for v in definition.inputs}
        return params.pop() if len(params) == 1 else None


@dataclass
class _Picked:
    """The element `index` of an unpacked key value (`k1, k2 = split(key)`)."""

    values: set
    index: int


def _params(fn: cst.FunctionDef) -> list[cst.Param]:
    p = fn.params
    return [*p.posonly_params, *p.params, *p.kwonly_params]


_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


def _first_iterable(comprehension: cst.BaseComp) -> cst.BaseExpression:
    """The iterable of a comprehension's first `for`: evaluated once, outside its loop."""
    return comprehension.for_in.iter


def _walk_calls(node: cst.CSTNode) -> list[cst.Call]:
    return [n for n in walk(node) if isinstance(n, cst.Call)]


def _constant_index(node: cst.Subscript) -> int | None:
    if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
        return None
    value = node.slice[0].slice.value
    if isinstance(value, cst.Integer):
        return int(value.value)
    if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus) \
            and isinstance(value.expression, cst.Integer):
        return -int(value.expression.value)
    return None


class Prng(Analysis):
    """The key flow of every function of the file and its module code (see the module docstring)."""

    asks = frozenset({"calls", "flow", "intent", "loop_values"})

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._comparing: dict[Scope, SourceOrdered] = {}  # per scope: `_comparing_nodes`

    @computed
    def flows(self) -> list[_ScopeFlow]:
        return [_ScopeFlow(self, scope, 0) for scope in (self.ctx.module, *self.ctx.nodes(cst.FunctionDef))]

    @computed
    def reuses(self) -> list[Reuse]:
        """Every draw from a value already drawn from, and every loop draw from an unchanging value.
        A draw is reported once (a pair first); a loop's unchanging key once, at its first draw."""
        found: list[Reuse] = []
        reported: set = set()
        for flow in self.flows:
            for reuse in flow.pairs.values():
                if (reuse.draw.direct or reuse.first.direct) and not self._on_purpose(reuse):
                    found.append(reuse)
                    reported.add(reuse.draw.call)
            roots: set = set()
            for reuse in sorted(flow.loop_reuses(), key=lambda r: self.ctx.order[r.draw.call]):
                root = (reuse.loop, reuse.root if reuse.root is not None else frozenset(
                    v[0] for v in reuse.draw.values))
                if reuse.draw.call in reported or root in roots:
                    continue
                roots.add(root)
                found.append(reuse)
        return sorted(found, key=lambda r: self.ctx.order[r.draw.call])

    def _on_purpose(self, pair: Reuse) -> bool:
        """A pair of draws from one key that is no bug: the numbers shown (a draw as a bare expression, a
        notebook displaying it, or printed: the determinism demonstration), or compared with each other
        (`assert (a == b).all()`, `np.testing.assert_allclose(a, b)`: a key reused to compare two
        computations); or flax `apply(rngs=...)` of two different modules (flax folds each module's path
        into its keys)."""
        first, second = pair.first.call, pair.draw.call
        if any(self.ctx.intent.only_shown(c) for c in (first, second)):
            return True  # `random.normal(key, (1,))` displayed, or `print(random.normal(key, (1,)))`
        modules = {self._applied_module(first), self._applied_module(second)}
        if None not in modules and len(modules) == 2:
            return True
        results = [self._bound_name(c) for c in (first, second)]
        if None in results:
            return False
        if any(self._drives_nothing(name, call) for name, call in zip(results, (first, second))):
            return True
        compared = set(results)
        return any(compared <= names_in(node) for node in self._comparing_nodes(self.ctx.scope_of(second)).after(second))

    def _comparing_nodes(self, scope: Scope) -> SourceOrdered:
        """The comparisons and assert-like calls of `scope` (not of scopes nested in it), found once per
        scope: every pair of draws there asks for those after it."""
        found = self._comparing.get(scope)
        if found is None:
            found = self._comparing[scope] = self.ctx.in_order([
                node for node in self.ctx.nodes_in_scope((cst.Comparison, cst.Call), scope).nodes
                if isinstance(node, cst.Comparison) or (call_name(node) or "").startswith("assert")
                or call_name(node) in _COMPARISONS])
        return found

    def _applied_module(self, call: cst.Call, depth: int = _HELPER_DEPTH) -> str | None:
        """The flax module whose `apply(rngs=...)` draws, directly or in a same-file helper (`vae_encode(x,
        rng)` calling `vae.apply(..., rngs=...)`); None when another kind of draw or unknown."""
        if _flax_apply(call):
            return dotted(receiver(call)) if receiver(call) is not None else None
        if depth == 0:
            return None
        found = {self._applied_module(inner.call, depth - 1) for fn in self._targets(call)
                 for inner, _ in self.params_drawn(fn, 1).values()}
        return found.pop() if len(found) == 1 else None

    def _drives_nothing(self, name: str, draw: cst.Call) -> bool:
        """Is the draw's result read, and only as an input to compile or time (`jax.jit(f).lower(x)`,
        `f(x).block_until_ready()`, `x.shape`): fake inputs, whose numbers nothing depends on? (A result
        read nowhere here, as under a notebook's `%timeit f(x)`, is not known to be one.)"""
        scope = self.ctx.scope_of(draw)
        after = self.ctx.order[draw]
        if any(n.value == name and self.ctx.scope_of(n) is not scope and _is_read(n, self.ctx.parents.get(n))
               and not self.ctx.bindings_in(self.ctx.scope_of(n), name) for n in self.ctx.nodes_within(cst.Name, scope)):
            return False  # read by a function nested in the scope: its uses are not followed here
        reads = [n for n in self.ctx.nodes_in_scope(cst.Name, scope).nodes
                 if n.value == name and self.ctx.order[n] > after and _is_read(n, self.ctx.parents.get(n))]
        fed = False
        for read in reads:
            binding = self.ctx.flow.last_binding(name, read)
            if binding is None or binding.node is not self.ctx.parents.get(draw):
                continue  # a later value of the name
            if not any(isinstance(a, cst.Call) and call_name(a) in _NOT_COMPUTED_WITH
                       or isinstance(a, cst.Attribute) and a.attr.value in ("shape", "dtype", "ndim")
                       and a.value is read for a in self.ctx.ancestors(read)
                       if not isinstance(a, (cst.BaseStatement, cst.BaseSuite))):
                return False
            fed = True
        return fed

    def _bound_name(self, call: cst.Call) -> str | None:
        """The name a draw's result is assigned to (`a = jax.random.normal(key, ...)`), else None."""
        assign = self.ctx.parents.get(call)
        if isinstance(assign, cst.Assign) and len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name):
            return assign.targets[0].target.value
        return None

    def drawn_keys(self, call: cst.Call, name: str | None, depth: int = 0) -> list[tuple]:
        """(key expression, description, direct, pairable) for each key `call` draws from (see `Draw`)."""
        if name is not None and name.startswith("jax.random.") and name.rsplit(".", 1)[1] in SAMPLERS:
            key = argument(call, 0, "key")
            return [(key, f"`{name}`", True, True)] if key is not None else []
        if name in KEY_STREAMS:
            return [(a.value, f"`{self.ctx.snippet(call.func)}`", True, False) for a in call.args
                    if not isinstance(a.value, (cst.Integer, cst.SimpleString))]
        method = call_name(call)
        if isinstance(call.func, cst.Attribute) and name is None:
            if method in ("apply", "apply_fn"):  # flax `apply`, a TrainState's `apply_fn`
                rngs = keyword_arg(call, "rngs")
                if rngs is not None:
                    # `apply(..., mutable=["params"])` initialises, as `init` does: not judged in pairs.
                    pairable = not _initialises(call)
                    return [(k, f"`{self.ctx.snippet(call.func)}(rngs=...)`", True, pairable)
                            for k in _dict_values(rngs)]
                args = positional_args(call)
                if len(args) > 1 and self._keyish(args[1]):  # haiku: apply(params, rng, ...)
                    return [(args[1], f"`{self.ctx.snippet(call.func)}`", True, False)]
                return []
            if method in ("init", "init_with_output"):
                args = positional_args(call)
                if args and (self._keyish(args[0]) or isinstance(args[0], cst.Dict)):
                    return [(k, f"`{self.ctx.snippet(call.func)}`", True, False) for k in _dict_values(args[0])]
                return []
        initializer = self.ctx.flow.constructed_by(call.func) if isinstance(call.func, (cst.Name, cst.Call)) else None
        if initializer is not None and initializer[1].startswith(INITIALIZER_MODULES):
            key = argument(call, 0, "key")
            return [(key, f"the initializer `{self.ctx.snippet(call.func)}`", False, True)] if key is not None else []
        if depth < _HELPER_DEPTH:
            return self._helper_draws(call, depth)
        return []

    def _helper_draws(self, call: cst.Call, depth: int) -> list[tuple]:
        found = []
        for fn in self._targets(call):
            drawn = self.params_drawn(fn, depth + 1)
            for param, (inner, itself) in drawn.items():
                arg = self._passed(call, fn, param)
                if arg is not None:
                    found.append((arg, f"`{fn.name.value}` (which draws from it with {inner.what} at line "
                                       f"{self.ctx.line_of(inner.call)})", False, itself and inner.pairable))
        return found

    def _passed(self, call: cst.Call, fn: cst.FunctionDef, param: cst.Param) -> cst.BaseExpression | None:
        """The argument `call` (a call of `fn`) passes for `param`, None where it leaves it out."""
        params = _params(fn)
        shift = 1 if isinstance(call.func, cst.Attribute) and params and params[0].name.value in ("self", "cls") \
            and not self.ctx.names.qualname(call.func) else 0
        arg = keyword_arg(call, param.name.value)
        positional = positional_args(call)
        index = params.index(param) - shift
        if arg is None and 0 <= index < len(positional) and param not in fn.params.kwonly_params:
            arg = positional[index]
        return arg

    @computed
    def default_keys(self) -> list[tuple[cst.FunctionDef, cst.Param, Draw, cst.Call]]:
        """Parameters whose default value makes a key (`key=jax.random.PRNGKey(0)`, `key=get_key()`) that the function
        draws from with a sampler, and a same-file call that leaves the parameter out and runs more than
        once (in a loop, in a function called from one, or one of several such calls): the default is
        evaluated once, when the `def` runs, so those calls draw the same numbers. A default key used by
        a call that runs once is a fixed seed on purpose (reproducible data); `init` from a default key
        gives the same parameters on purpose, as in `Draw.pairable`."""
        found = []
        for fn in self.ctx.nodes(cst.FunctionDef):
            # Any call: the function draws from the parameter, so what the default makes is a key
            # (`jax.random.PRNGKey(0)`, a helper's `d2l.get_key()`), made once.
            defaulted = [p for p in _params(fn) if isinstance(p.default, cst.Call)]
            if not defaulted:
                continue
            drawn = self.params_drawn(fn, 0)
            calls = self._callers.get(fn, [])
            for param in defaulted:
                if param not in drawn or not drawn[param][0].pairable:
                    continue
                leaving_out = [c for c in calls if self._passed(c, fn, param) is None]
                repeated = next((c for c in leaving_out if self._repeated(c, _HELPER_DEPTH)), None)
                if repeated is None and len(leaving_out) > 1:
                    repeated = leaving_out[1]
                if repeated is not None:
                    found.append((fn, param, drawn[param][0], repeated))
        return found

    def _repeated(self, call: cst.Call, depth: int) -> bool:
        """`call` runs more than once: in a loop or comprehension, or in a function called from one
        (through `jax.grad(f)(...)`, `jax.jit(f)` and the like, `depth` callers deep)."""
        for ancestor in self.ctx.ancestors(call):
            if isinstance(ancestor, (cst.For, cst.While, *_COMPREHENSIONS)):
                return True
            if isinstance(ancestor, cst.FunctionDef):
                return depth > 0 and any(self._repeated(site, depth - 1) for site in self._callers.get(ancestor, []))
        return False

    @computed
    def _callers(self) -> dict[cst.FunctionDef, list[cst.Call]]:
        """The same-file calls that run each function (as `_targets` resolves them)."""
        found: dict[cst.FunctionDef, list[cst.Call]] = {}
        for call in self.ctx.nodes(cst.Call):
            for fn in self._targets(call):
                found.setdefault(fn, []).append(call)
        return found

    def _keyish(self, expr: cst.BaseExpression) -> bool:
        """A key by its name (`rng`, `init_key`, `dropout_rng`) or by what makes it (`jax.random.PRNGKey(0)`,
        `jax.random.split(key)[0]`): the argument of an `init` / haiku `apply` that is a key."""
        if isinstance(expr, cst.Subscript):
            expr = expr.value
        if isinstance(expr, cst.Call):
            name = self.ctx.names.callee(expr)
            return name in KEY_MAKERS or name in DERIVERS
        return isinstance(expr, cst.Name) and any(part in expr.value.lower() for part in _KEYISH)

    def _targets(self, call: cst.Call) -> list[cst.FunctionDef]:
        targets = self.ctx.calls.targets(call)
        if isinstance(call.func, cst.Call) and self.ctx.names.callee(call.func) in ARGUMENT_PRESERVING:
            inner = argument(call.func, 0, "fun")
            return self.ctx.calls.local_functions(inner) if inner is not None else []
        if targets or not isinstance(call.func, cst.Name):
            return targets
        made = self.ctx.flow.constructed_by(call.func)
        if made is not None and made[1] in JIT_WRAPPERS:
            inner = argument(made[0], 0, "fun")
            return self.ctx.calls.local_functions(inner) if inner is not None else []
        return []

    def params_drawn(self, fn: cst.FunctionDef, depth: int) -> dict:
        """The parameters of `fn` it draws from (through keys purely derived from them):
        param -> (a Draw, whether it draws from the parameter itself, not from a split of it)."""
        cache = self._params_cache
        if fn in cache:
            return cache[fn] or {}
        cache[fn] = None
        flow = _ScopeFlow(self, fn, depth)
        drawn: dict = {}
        for draw in flow.draws.values():
            params = {flow.param_drawn_from(v) for v in draw.values}
            if len(params) == 1 and None not in params:
                param = params.pop()
                itself = all(v == (param,) for v in draw.values)
                if param not in drawn or (itself and draw.pairable and not drawn[param][1]):
                    drawn[param] = (draw, itself)
        cache[fn] = drawn
        return drawn

    @computed
    def _params_cache(self) -> dict:
        return {}

    def assigned_attributes(self, loop: cst.CSTNode) -> set[str]:
        """Dotted attributes (`self.seed`) assigned inside `loop`."""
        cache = self._assigned_cache
        if loop not in cache:
            found = set()
            for kind in (cst.AssignTarget, cst.AugAssign, cst.AnnAssign):
                for node in self.ctx.nodes(kind):
                    target = node.target
                    if isinstance(target, cst.Attribute) and dotted(target) and self.ctx.is_inside(node, loop):
                        found.add(dotted(target))
            cache[loop] = found
        return cache[loop]

    @computed
    def _assigned_cache(self) -> dict:
        return {}



# Calls whose inputs are compiled or timed, not computed with: fake inputs of a benchmark; and a model's
# `init(rng, x)` (flax, haiku), which reads only the shapes of its sample input (the key makes the values).
_NOT_COMPUTED_WITH = frozenset({"block_until_ready", "lower", "make_jaxpr", "eval_shape", "timeit", "init"})
# Calls that compare their arguments (besides `assert*` methods and functions).
_COMPARISONS = frozenset({"allclose", "array_equal", "array_equiv", "isclose", "equal", "not_equal"})


def _flax_apply(call: cst.Call) -> bool:
    return call_name(call) in ("apply", "apply_fn") and keyword_arg(call, "rngs") is not None


def _initialises(call: cst.Call) -> bool:
    """A flax `apply` whose `mutable` names the `params` collection: it makes parameters."""
    mutable = keyword_arg(call, "mutable")
    return mutable is not None and any(isinstance(n, cst.SimpleString) and n.evaluated_value == "params"
                                       for n in walk(mutable))


def _dict_values(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(expr, cst.Dict):
        return [e.value for e in expr.elements if isinstance(e, cst.DictElement)]
    return [expr]


def _is_read(name: cst.Name, parent: cst.CSTNode | None) -> bool:
    """A name read, not bound (`x = ...`, a parameter, an import) nor an attribute's or keyword's name."""
    if isinstance(parent, (cst.AssignTarget, cst.Param, cst.AsName, cst.ImportAlias, cst.For, cst.AugAssign)):
        return not (getattr(parent, "target", None) is name or getattr(parent, "name", None) is name)
    if isinstance(parent, cst.Attribute):
        return parent.attr is not name
    if isinstance(parent, cst.Arg):
        return parent.keyword is not name
    return True
