"""JAX: which code JAX traces — jitted functions, loop and branch bodies, and the helpers they call.

A traced function's Python body runs while JAX traces it (its first call, and again for each new
input shape, dtype or static value), not on every call: `jax.jit` / `pmap` cache the compiled
function by the function object's identity; `lax.scan` / `fori_loop` / `while_loop` / `cond` trace
their bodies once per call of the primitive, even without jit (measured, jax 0.10.2).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
import libcst as cst

from lintloop.analysis.base import Analysis, computed
from lintloop.analysis.calls import CallChain
from lintloop.analysis.nodes import argument, keyword_arg, positional_args

# Transforms that compile a function and cache it: applied as a decorator or as `g = jax.jit(f)`.
_COMPILERS = {
    "jax.jit": "jit",
    "jax.pmap": "pmap",
    "jax.pjit": "pjit",
    "jax.experimental.pjit.pjit": "pjit",
    "flax.nnx.jit": "nnx.jit",
    "flax.nnx.pmap": "nnx.pmap",
    "equinox.filter_jit": "eqx.filter_jit",
    "equinox.filter_pmap": "eqx.filter_pmap",
}
# Transforms that trace the function they wrap with scan semantics and may decorate it (`@nnx.scan(...)`).
_DECORATING_LOOPS = {"flax.nnx.scan": "nnx.scan"}
# Control-flow primitives that trace the functions passed at these (position, keyword) slots once per
# call of the primitive, jitted or not.
_TRACED_BODIES: dict[str, tuple[str, tuple[tuple[int, str], ...]]] = {
    "jax.lax.scan": ("scan", ((0, "f"),)),
    "jax.lax.map": ("map", ((0, "f"),)),
    "jax.lax.fori_loop": ("fori_loop", ((2, "body_fun"),)),
    "jax.lax.while_loop": ("while_loop", ((0, "cond_fun"), (1, "body_fun"))),
    "jax.lax.cond": ("cond", ((1, "true_fun"), (2, "false_fun"))),
    "jax.lax.switch": ("switch", ((1, "branches"),)),
    "flax.nnx.scan": ("nnx.scan", ((0, "f"),)),
    "flax.nnx.fori_loop": ("nnx.fori_loop", ((2, "body_fun"),)),
    "flax.nnx.while_loop": ("nnx.while_loop", ((0, "cond_fun"), (1, "body_fun"))),
    "flax.nnx.cond": ("nnx.cond", ((1, "true_fun"), (2, "false_fun"))),
    "flax.nnx.switch": ("nnx.switch", ((1, "branches"),)),
    "haiku.scan": ("hk.scan", ((0, "f"),)),
    "haiku.fori_loop": ("hk.fori_loop", ((2, "body_fun"),)),
    "haiku.while_loop": ("hk.while_loop", ((0, "cond_fun"), (1, "body_fun"))),
    "haiku.cond": ("hk.cond", ((1, "true_fun"), (2, "false_fun"))),
    "haiku.switch": ("hk.switch", ((1, "branches"),)),
    "haiku.map": ("hk.map", ((0, "f"),)),
}
# Every transform that makes JAX trace a function: a file that names none of them (through its imports)
# has no traced code (`FileFacts`' `jax_traced`).
TRACING_TRANSFORMS = frozenset({*_COMPILERS, *_DECORATING_LOOPS, *_TRACED_BODIES})
# Transforms whose result calls the function they wrap: `jax.jit(jax.grad(loss))` traces `loss`.
_PASS_THROUGH = {
    "jax.grad", "jax.value_and_grad", "jax.vmap", "jax.jacfwd", "jax.jacrev", "jax.hessian", "jax.checkpoint",
    "jax.remat", "jax.named_call", "functools.partial", "flax.nnx.grad", "flax.nnx.value_and_grad",
    "flax.nnx.vmap", "flax.nnx.remat", "equinox.filter_grad", "equinox.filter_value_and_grad",
    "equinox.filter_vmap",
}
# Functions handed to these run in Python at run time, on values, even from traced code.
_HOST_CALLBACKS = {
    "jax.pure_callback", "jax.debug.callback", "jax.experimental.io_callback", "jax.experimental.host_callback.call",
    "jax.experimental.host_callback.id_tap", "jax.experimental.host_callback.id_print",
}
# What JAX knows about an array while tracing it (`x.sharding` raises on a tracer, `jax.typeof(x).sharding`
# does not): reading these gives plain values, not tracers.
_STATIC_ATTRIBUTES = {"shape", "dtype", "ndim", "size", "sharding", "aval", "weak_type"}
# Calls that return trace-time type information: the abstract value (shape, dtype, sharding), the mesh.
_STATIC_INFO_CALLS = {"jax.typeof", "jax.sharding.get_abstract_mesh"}
# Builtins whose answer about a traced value is a plain Python value at trace time (`len(x)` is its
# leading dimension; `type(x)` its tracer class).
_STATIC_BUILTINS = ("isinstance", "type", "len", "callable", "id")
# Annotations of Python configuration values (`def __init__(self, dim: int)`).
_PYTHON_TYPES = ("int", "float", "bool", "str")
# Functions that give a value's static information, passed by name to a tree map (`jax.tree.map(jnp.shape, p)`).
_STATIC_INFO_FUNCTIONS = {"jax.typeof", "jax.numpy.shape", "jax.numpy.ndim", "numpy.shape", "numpy.ndim"}
# Literals a tuple of static information may hold (`(x.shape, "bf16")`).
_LITERALS = (cst.SimpleString, cst.ConcatenatedString, cst.Integer, cst.Float)
# Tree maps: `jax.tree.map(lambda x: x.shape, params)` is a tree of shapes.
_TREE_MAPS = {"jax.tree.map", "jax.tree_util.tree_map", "jax.tree_map", "tree.map_structure"}
# How many names, partials and wrappers deep `transform_of` follows.
_DEPTH = 4

# Screen tokens (a rule's `Needs.file` groups) of a file where JAX may trace a function: a JAX import, a
# tracing transform its imports resolve (`jax_traced`), and that transform's name (a compile or a
# traced control-flow body) for the text screen.
TRACING_FILE_NEEDS = (("name:jax", "name:nnx", "name:equinox"), ("jax_traced",),
                      ("name:jit", "name:pmap", "name:pjit", "name:filter_jit", "name:filter_pmap", "name:scan",
                       "name:fori_loop", "name:while_loop", "name:cond", "name:switch", "name:map"))

TracedNode = cst.FunctionDef | cst.Lambda


@dataclass(frozen=True)
class JaxTransform:
    """One application of a JAX compile or traced-body transform."""

    kind: str  # "jit", "pmap", "pjit", "nnx.jit", "scan", "fori_loop", "while_loop", "cond", ...
    static_argnums: tuple[int, ...]
    static_argnames: tuple[str, ...]
    site: cst.CSTNode  # the decorator expression or the call that applied it

    @property
    def compiles(self) -> bool:
        """A cached compilation (`jit`, `pmap`, ...), as opposed to a loop or branch body traced per call."""
        return self.kind in _COMPILERS.values()

    def with_options(self, call: cst.Call) -> JaxTransform:
        """These static arguments as extended by the keywords of `call` (`partial(jax.jit, static_argnums=1)`)."""
        nums = _ints(keyword_arg(call, "static_argnums"))
        if nums is None:
            nums = _ints(keyword_arg(call, "static_broadcasted_argnums"))
        names = _strings(keyword_arg(call, "static_argnames"))
        return JaxTransform(self.kind, self.static_argnums if nums is None else nums,
                            self.static_argnames if names is None else names, self.site)


def _ints(expr: cst.BaseExpression | None) -> tuple[int, ...] | None:
    """`1`, `(0, 2)`, `[1]` as a tuple of ints; None when absent or not literal."""
    if expr is None:
        return None
    items = [e.value for e in expr.elements] if isinstance(expr, (cst.Tuple, cst.List)) else [expr]
    if all(isinstance(i, cst.Integer) for i in items):
        return tuple(int(i.value, 0) for i in items)
    return None


def _strings(expr: cst.BaseExpression | None) -> tuple[str, ...] | None:
    """`"n"`, `("n", "train")` as a tuple of str; None when absent or not literal."""
    if expr is None:
        return None
    items = [e.value for e in expr.elements] if isinstance(expr, (cst.Tuple, cst.List)) else [expr]
    if all(isinstance(i, cst.SimpleString) and isinstance(i.evaluated_value, str) for i in items):
        return tuple(i.evaluated_value for i in items)  # type: ignore[union-attr]
    return None


class Jax(Analysis):
    asks = frozenset({"calls", "definitions", "flow"})

    # ----- what applies a transform ------------------------------------------------------------
    def transform_of(self, expr: cst.BaseExpression, depth: int = 0) -> JaxTransform | None:
        """Is `expr` a JAX compile (or `nnx.scan`) as a decorator or applied to a function, and with which
        static arguments? `jax.jit`, `jax.jit(f, static_argnums=1)`, `jax.jit(static_argnames="n")`,
        `functools.partial(jax.jit, ...)` and `partial(jax.jit, ...)(f)`, `nnx.jit(...)`, `jax.pmap(f,
        static_broadcasted_argnums=...)`, or a name bound to one of these.

        The one place that decides what a JAX compile is."""
        if depth > _DEPTH:
            return None
        names = self.ctx.names
        qualname = names.qualname(expr)
        if qualname in _COMPILERS or qualname in _DECORATING_LOOPS:
            return JaxTransform(_COMPILERS.get(qualname) or _DECORATING_LOOPS[qualname], (), (), expr)
        if isinstance(expr, cst.Call):
            callee = names.callee(expr)
            if callee in _COMPILERS or callee in _DECORATING_LOOPS:
                kind = _COMPILERS.get(callee) or _DECORATING_LOOPS[callee]
                return JaxTransform(kind, (), (), expr).with_options(expr)
            if callee == "functools.partial" and expr.args:
                inner = self.transform_of(expr.args[0].value, depth + 1)
                if inner is not None and len(positional_args(expr)) == 1:
                    return JaxTransform(inner.kind, inner.static_argnums, inner.static_argnames,
                                        expr).with_options(expr)
                return None
            # `partial(jax.jit, ...)(f)`, `jax.jit(static_argnums=1)(f)`; not `jax.jit(f)(x)`, a call of the compiled f.
            factory = expr.func
            inner = self.transform_of(factory, depth + 1)
            if inner is not None and self.applied_function(expr) is not None \
                    and not (isinstance(factory, cst.Call) and self.applied_function(factory) is not None):
                return JaxTransform(inner.kind, inner.static_argnums, inner.static_argnames, expr).with_options(expr)
            return None
        if isinstance(expr, cst.IfExp):  # `nnx.jit if use_nnx else jax.jit`
            both = (self.transform_of(expr.body, depth + 1), self.transform_of(expr.orelse, depth + 1))
            return both[0] if None not in both else None
        if isinstance(expr, cst.Name) and expr.value in names.bound_names:
            value = self.ctx.flow.resolve_value(expr)
            if value is not expr and isinstance(value, (cst.Call, cst.Attribute, cst.IfExp)):
                found = self.transform_of(value, depth + 1)
                # `jit_step = partial(jax.jit, donate_argnums=0)` decorates; `fast = jax.jit(f)` is compiled.
                if found is not None and not (isinstance(value, cst.Call) and self.applied_function(value)):
                    return found
        return None

    def applied_function(self, call: cst.Call) -> cst.BaseExpression | None:
        """The function a transform call is applied to: `f` in `jax.jit(f, ...)`, `partial(jax.jit, ...)(f)`;
        None for a decorator factory (`jax.jit(static_argnames="n")`, `partial(jax.jit, ...)`)."""
        callee = self.ctx.names.callee(call)
        if callee == "functools.partial":
            return None
        if callee in _COMPILERS or callee in _DECORATING_LOOPS:
            return argument(call, 0, "fun") or argument(call, 0, "f")
        return positional_args(call)[0] if positional_args(call) else None

    def wrapped_functions(self, expr: cst.BaseExpression | None, depth: int = 0) -> list[TracedNode]:
        """Same-file functions (or a lambda) that calling `expr` runs: `f`, `self.f`, `jax.grad(f)`,
        `partial(f, model)`, `jax.vmap(jax.value_and_grad(loss))`."""
        if expr is None or depth > _DEPTH:
            return []
        if isinstance(expr, cst.Lambda):
            return [expr]
        if isinstance(expr, cst.IfExp):
            return self.wrapped_functions(expr.body, depth + 1) + self.wrapped_functions(expr.orelse, depth + 1)
        if isinstance(expr, cst.Call):
            if self.ctx.names.callee(expr) in _PASS_THROUGH and expr.args:
                return self.wrapped_functions(expr.args[0].value, depth + 1)
            return [inner for factory in self.ctx.calls.local_functions(expr.func)
                    for inner in self._returned_functions(factory)]
        if isinstance(expr, cst.Name) and not self.ctx.definitions.functions.get(expr.value):
            value = self.ctx.flow.resolve_value(expr)
            if value is not expr and isinstance(value, (cst.Call, cst.Lambda, cst.IfExp)):
                return self.wrapped_functions(value, depth + 1)
        found = list(self.ctx.calls.local_functions(expr))
        if isinstance(expr, cst.Attribute) and len(found) > 1:  # `self.step`: the method of this class
            owner = next((a for a in self.ctx.ancestors(expr) if isinstance(a, cst.ClassDef)), None)
            mine = [fn for fn in found if next((a for a in self.ctx.ancestors(fn) if isinstance(a, cst.ClassDef)),
                                                None) is owner]
            return mine or found
        return found

    def _returned_functions(self, factory: cst.FunctionDef) -> list[TracedNode]:
        """The defs and lambdas a same-file factory returns: `def make_step(model): def step(...): ...;
        return step` (so `jax.jit(make_step(model))` traces `step`)."""
        found: list[TracedNode] = []
        for ret in self.ctx.returns_of(factory):
            if ret.value is None:
                continue
            if isinstance(ret.value, cst.Lambda):
                found.append(ret.value)
            elif isinstance(ret.value, cst.Name):
                found.extend(fn for fn in self.ctx.definitions.functions.get(ret.value.value, ())
                             if self.ctx.scope_of(fn) is factory)
        return found

    # ----- what is traced ----------------------------------------------------------------------
    @computed
    def compiled_functions(self) -> dict[TracedNode, JaxTransform]:
        """Same-file functions that a JAX compile traces: decorated (`@jax.jit`, `@partial(jax.jit, ...)`,
        `@nnx.jit`, `@nnx.scan(...)`), or wrapped (`step = jax.jit(train_step)`, `self.f = jax.jit(self.g)`,
        `jax.jit(jax.grad(loss))`, `jax.pmap(partial(step, model))`), with the transform that does it."""
        found: dict[TracedNode, JaxTransform] = {}
        for fn in self.ctx.nodes(cst.FunctionDef):
            for decorator in fn.decorators:
                transform = self.transform_of(decorator.decorator)
                if transform is not None:
                    found.setdefault(fn, replace(transform, site=decorator.decorator))
        for call in self._candidate_calls:
            transform = self.wrapping(call)
            if transform is not None:
                for fn in self.wrapped_functions(self.applied_function(call)):
                    found.setdefault(fn, transform)
        return found

    def wrapping(self, call: cst.Call) -> JaxTransform | None:
        """Is `call` a JAX compile applied to a function (`jax.jit(f, static_argnums=1)`,
        `partial(jax.jit, donate_argnums=0)(f)`, `nnx.scan(f, ...)`): the transform, else None."""
        if self.applied_function(call) is None:
            return None
        return self.transform_of(call)

    @computed
    def _candidate_calls(self) -> list[cst.Call]:
        """Calls whose head is an imported or assigned name: only those can apply a JAX transform."""
        found = []
        names = self.ctx.names
        for call in self.ctx.nodes(cst.Call):
            head = call.func
            while isinstance(head, (cst.Attribute, cst.Call)):
                head = head.value if isinstance(head, cst.Attribute) else head.func
            if isinstance(head, cst.Name) and (head.value in names.imports or head.value in names.bound_names):
                found.append(call)
        return found

    @computed
    def traced_bodies(self) -> dict[TracedNode, JaxTransform]:
        """Functions and lambdas passed as bodies, conditions or branches to `lax.scan` / `map` /
        `fori_loop` / `while_loop` / `cond` / `switch` (and their flax nnx and haiku spellings): traced
        once per call of the primitive, even outside jit."""
        found: dict[TracedNode, JaxTransform] = {}
        names = self.ctx.names
        for call in self._candidate_calls:
            primitive = _TRACED_BODIES.get(names.callee(call) or "")
            if primitive is None:
                continue
            kind, slots = primitive
            for position, keyword in slots:
                value = argument(call, position, keyword)
                bodies = value.elements if isinstance(value, (cst.List, cst.Tuple)) else (
                    [cst.Element(value)] if value is not None else [])
                for element in bodies:
                    for fn in self.wrapped_functions(element.value):
                        found.setdefault(fn, JaxTransform(kind, (), (), call))
        return found

    @computed
    def host_callbacks(self) -> set[TracedNode]:
        """Functions handed to `jax.pure_callback` / `jax.debug.callback` / `io_callback`: they run on
        values at run time, even when called from traced code."""
        found: set[TracedNode] = set()
        for call in self._candidate_calls:
            if self.ctx.names.callee(call) in _HOST_CALLBACKS and call.args:
                found.update(self.wrapped_functions(call.args[0].value))
        return found

    def transform_around(self, node: cst.CSTNode) -> tuple[TracedNode, JaxTransform] | None:
        """The innermost function or lambda around `node` that JAX traces (a nested def inside one is
        traced with it), with its transform; None inside a host callback."""
        for ancestor in self.ctx.ancestors(node):
            if ancestor in self.host_callbacks:
                return None
            transform = self.compiled_functions.get(ancestor) or self.traced_bodies.get(ancestor)
            if transform is not None:
                return ancestor, transform
        return None

    def traced_chain(self, node: cst.CSTNode) -> tuple[CallChain, TracedNode] | None:
        """Does `node` run at trace time: inside a traced function (`transform_around`), or in a same-file
        helper called only from traced code, transitively (as LL201 decides for tf.function: a helper
        also called eagerly is not)? Returns the call sites leading out to the traced function
        (innermost first; `()` when `node` is inside it) and that function, else None."""
        chain = self.ctx.calls.through_callers(node, lambda n: self.transform_around(n) is not None)
        if chain is None:
            return None
        found = self.transform_around(chain[-1] if chain else node)
        return (chain, found[0]) if found is not None else None

    @computed
    def _python_attributes(self) -> frozenset[str]:
        """Attributes that same-file classes set, in `__init__`, only to Python configuration: a number,
        string or bool literal, or an `__init__` parameter annotated `int`, `float`, `bool` or `str`
        (`self.dim = dim`, `self.num_heads = 8`). A module's such attribute is not traced."""
        python, other = set(), set()
        for cls in self.ctx.nodes(cst.ClassDef):
            for init in self.ctx.definitions.methods_named(cls, "__init__"):
                annotated = {p.name.value for p in (*init.params.params, *init.params.kwonly_params)
                             if p.annotation is not None and isinstance(p.annotation.annotation, cst.Name)
                             and p.annotation.annotation.value in _PYTHON_TYPES}
                for assign in self.ctx.nodes_within(cst.Assign, init):
                    for target in assign.targets:
                        name = target.target
                        if not (isinstance(name, cst.Attribute) and isinstance(name.value, cst.Name)
                                and name.value.value == "self"):
                            continue
                        value = assign.value
                        plain = isinstance(value, (cst.Integer, cst.Float, cst.SimpleString)) or \
                            isinstance(value, cst.Name) and (value.value in annotated or value.value in ("True", "False"))
                        (python if plain else other).add(name.attr.value)
        return frozenset(python - other)

    def is_static_info(self, expr: cst.BaseExpression, depth: int = 0) -> bool:
        """Is `expr` type information JAX knows while tracing: `jax.typeof(x)`, `x.shape`, `x.dtype`, `x.ndim`,
        `jax.sharding.get_abstract_mesh()`, or a part of one (`x.shape[0]`, `jax.typeof(x).sharding.spec`);
        an identity test (`a is b`) or a builtin that answers in Python (`len(x)`, `isinstance(x, T)`);
        a tree map of a function giving one (`jax.tree.map(lambda x: x.shape, params)`), or a call of a
        same-file function that returns only such values (`def tree_shape(xs): return jax.tree.map(...)`)?
        At trace time it is a plain value, not a tracer (printing it is JAX's documented way to inspect
        shardings; `jax.debug.print` cannot format `jax.typeof(x)`: measured, jax 0.10.2)."""
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) \
                and expr.attr.value in self._python_attributes:
            return True  # `model.dim`: a module's configuration, a Python value while tracing
        while isinstance(expr, (cst.Attribute, cst.Subscript)):
            if isinstance(expr, cst.Attribute) and expr.attr.value in _STATIC_ATTRIBUTES:
                return True
            expr = expr.value
        if isinstance(expr, cst.Comparison) and all(isinstance(c.operator, (cst.Is, cst.IsNot))
                                                    for c in expr.comparisons):
            return True  # identity (`m.left is m.right`) is a Python fact, settled while tracing
        if not isinstance(expr, cst.Call) or depth > _DEPTH:
            return False
        if any(self.ctx.names.is_builtin(expr.func, name) for name in _STATIC_BUILTINS):
            return True
        callee = self.ctx.names.callee(expr)
        if callee in _STATIC_INFO_CALLS:
            return True
        if callee in _TREE_MAPS:
            mapped = argument(expr, 0, "f")
            return mapped is not None and self._gives_static_info(mapped, depth + 1)
        helpers = self.ctx.calls.local_functions(expr.func) if isinstance(expr.func, cst.Name) else []
        return len(helpers) == 1 and self._returns_static_info(helpers[0], depth + 1)

    def _gives_static_info(self, fn: cst.BaseExpression, depth: int) -> bool:
        """Does calling `fn` give static information: `lambda x: x.shape`, `jnp.shape`, a same-file def?"""
        if isinstance(fn, cst.Lambda):
            return self._static_value(fn.body, depth)
        if self.ctx.names.qualname(fn) in _STATIC_INFO_FUNCTIONS:
            return True
        helpers = self.ctx.calls.local_functions(fn) if isinstance(fn, cst.Name) else []
        return len(helpers) == 1 and self._returns_static_info(helpers[0], depth)

    def _returns_static_info(self, fn: cst.FunctionDef, depth: int) -> bool:
        """Does every `return` of `fn` give static information (or a tuple of it: `return x.shape, x.dtype`)?"""
        returns = self.ctx.returns_of(fn)
        return bool(returns) and all(r.value is not None and self._static_value(r.value, depth) for r in returns)

    def _static_value(self, expr: cst.BaseExpression, depth: int) -> bool:
        """Static information, or a tuple / list of it and literals (`(x.shape, "f32")`)."""
        if isinstance(expr, (cst.Tuple, cst.List)):
            parts = [e.value for e in expr.elements]
            return all(isinstance(p, _LITERALS) or self.is_static_info(p, depth) for p in parts) \
                and any(not isinstance(p, _LITERALS) for p in parts)
        return self.is_static_info(expr, depth)

    def describe(self, fn: TracedNode) -> str:
        """How a message names a traced function: "the jitted `train_step`", "the `lax.scan` body `step`"."""
        name = fn.name.value if isinstance(fn, cst.FunctionDef) else None
        transform = self.compiled_functions.get(fn) or self.traced_bodies.get(fn)
        kind = transform.kind if transform is not None else "jit"
        if transform is not None and not transform.compiles and kind != "nnx.scan":
            return f"the `{kind}` body `{name}`" if name else f"a lambda traced by `{kind}`"
        label = {"jit": "jitted", "pjit": "pjit-compiled", "pmap": "pmapped"}.get(kind, f"`{kind}`-compiled")
        if kind == "nnx.scan":
            label = "`nnx.scan`-traced"
        return f"the {label} `{name}`" if name else f"a lambda {label}"

    def where(self, node: cst.CSTNode, traced: tuple[CallChain, TracedNode]) -> str:
        """"the jitted `step`", or for a helper "`log` (, called from the jitted `step` at line 12)"."""
        chain, fn = traced
        if not chain:
            return self.describe(fn)
        helper = next(a for a in self.ctx.ancestors(node) if isinstance(a, cst.FunctionDef))
        return f"`{helper.name.value}`{self.ctx.calls.describe_chain(chain, self.describe(fn))}"

    # ----- calls of compiled functions ---------------------------------------------------------
    def compiled_callee(self, call: cst.Call) -> tuple[TracedNode | None, JaxTransform] | None:
        """Does `call` invoke a jitted callable — a decorated def (`step(x)`, `self.step(x)`), a name or
        `self.` attribute bound to `jax.jit(f, ...)`, or `jax.jit(f)(x)` itself? Returns the wrapped
        same-file def or lambda (None when it is not in this file: an import, a method of another
        object) and the transform."""
        func = call.func
        if isinstance(func, cst.Call):
            transform = self.wrapping(func)
            if transform is None or not transform.compiles:
                return None
            wrapped = self.wrapped_functions(self.applied_function(func))
            return (wrapped[0] if len(wrapped) == 1 else None), transform
        if not isinstance(func, (cst.Name, cst.Attribute)):
            return None
        value = self.ctx.flow.resolve_value(func, call)  # `fast = jax.jit(step)`, `self.step = jax.jit(...)`
        if isinstance(value, cst.Call):
            transform = self.wrapping(value)
            if transform is None or not transform.compiles:
                return None
            wrapped = self.wrapped_functions(self.applied_function(value))
            return (wrapped[0] if len(wrapped) == 1 else None), transform
        candidates = self.ctx.calls.local_functions(func)
        decorated = [fn for fn in candidates if self._decorated_compile(fn) is not None]
        if len(decorated) == 1 and len(candidates) == 1:
            return decorated[0], self._decorated_compile(decorated[0])
        return None

    def _decorated_compile(self, fn: cst.FunctionDef) -> JaxTransform | None:
        """The compile a def's own decorator applies (calling the def's name runs the compiled function)."""
        transform = self.compiled_functions.get(fn)
        if transform is not None and transform.compiles and any(d.decorator is transform.site for d in fn.decorators):
            return transform
        return None
