"""TensorFlow contexts: gradient tapes and their `gradient` calls, `tf.function`-traced code, Keras versions."""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from lintloop.analysis.base import Analysis, computed
from lintloop.analysis.calls import CallChain
from lintloop.analysis.with_blocks import WithBlocks, WithContext
from lintloop.analysis.index import Scope
from lintloop.analysis.nodes import (argument, call_name, keyword_arg, names_in, parameter_names, positional_args,
                                      read_name, receiver, string_value)

if TYPE_CHECKING:
    from lintloop.analysis.context import FileContext

_TAPES = {"tensorflow.GradientTape", "tensorflow.autodiff.GradientTape"}
# Tape methods that differentiate their first argument, `target`.
_DIFFERENTIATING_METHODS = {"gradient", "jacobian", "batch_jacobian"}
_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
# Functions handed to these run eagerly, even when called from a graph.
_EAGER_WRAPPERS = {"tensorflow.py_function", "tensorflow.numpy_function", "tensorflow.compat.v1.py_func"}
# How many wrappers deep `function_wrapper` follows (a wrapper of a partial of tf.function ...).
_WRAPPER_DEPTH = 4
# The methods Keras' `fit` / `evaluate` / `predict` trace inside the tf.function they build.
_KERAS_STEPS = {"train_step", "test_step", "predict_step"}
_KERAS_MODEL_CLASSES = {"keras.Model", "keras.models.Model", "keras.Sequential", "keras.models.Sequential"}
# Keywords of `tf.function` that turn XLA on (`experimental_compile` is the pre-2.5 name).
_JIT_KEYWORDS = ("jit_compile", "experimental_compile")


def _true(expr: cst.BaseExpression | None) -> bool | None:
    """The value of a literal `True` / `False`, else None."""
    if isinstance(expr, cst.Name) and expr.value in ("True", "False"):
        return expr.value == "True"
    return None


def _methods(cls: cst.ClassDef) -> list[cst.FunctionDef]:
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
    return [s for s in body if isinstance(s, cst.FunctionDef)]


@dataclass(frozen=True)
class Compilation:
    """How a tf.function compiles: with XLA (`jit_compile=True`), with an `input_signature`."""

    jit: bool = False
    input_signature: bool = False

    def with_options(self, call: cst.Call) -> Compilation:
        """These options as overridden by the keywords of `call` (`tf.function(f, jit_compile=True)`,
        `partial(tf.function, input_signature=[...])`, `common.function(f, jit_compile=False)`)."""
        jit = next((v for v in (_true(keyword_arg(call, k)) for k in _JIT_KEYWORDS) if v is not None), self.jit)
        signature = keyword_arg(call, "input_signature")
        has_signature = self.input_signature if signature is None else not (
            isinstance(signature, cst.Name) and signature.value == "None")
        return Compilation(jit, has_signature)

    def merge(self, other: Compilation | None) -> Compilation:
        """One function compiled twice (decorated and wrapped): XLA if either is."""
        if other is None:
            return self
        return Compilation(self.jit or other.jit, self.input_signature and other.input_signature)


class TensorFlow(Analysis):
    asks = frozenset({"calls", "definitions", "flow", "project"})

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._wrappers: dict[cst.FunctionDef, Compilation | None] = {}  # same-file decorators, decided once

    # ----- tapes -----------------------------------------------------------------------------
    @computed
    def tapes(self) -> WithBlocks:
        return WithBlocks(self.ctx, "tape", lambda call: self.ctx.names.callee(call) in _TAPES)

    def tape_of(self, name: str, at: cst.CSTNode) -> WithContext | None:
        """The `with tf.GradientTape() as name:` (or `with name:`) block that `name` refers to at `at`:
        the last one opened before `at` in the same function."""
        ctx = self.ctx
        candidates = self._tapes_by_name.get((ctx.scope_of(at), name))
        if candidates is None:
            return None
        orders, contexts = candidates
        before = bisect_left(orders, ctx.order[at])
        # The last block opened before `at`; of several contexts of one block, the first.
        return contexts[bisect_left(orders, orders[before - 1])] if before else None

    @computed
    def _tapes_by_name(self) -> dict[tuple[Scope, str | None], tuple[list[int], list[WithContext]]]:
        """Per scope and alias, the tape contexts in the order their blocks open, and those orders."""
        ctx = self.ctx
        grouped: dict[tuple[Scope, str | None], list[WithContext]] = defaultdict(list)
        for context in self.tapes.contexts:
            grouped[(ctx.scope_of(context.block), context.alias)].append(context)
        table = {}
        for key, contexts in grouped.items():
            contexts.sort(key=lambda c: ctx.order[c.block])  # stable: one block's contexts keep their order
            table[key] = ([ctx.order[c.block] for c in contexts], contexts)
        return table

    @computed
    def differentiating_calls(self) -> list[tuple[cst.Call, WithContext]]:
        """`tape.gradient` / `tape.jacobian` / `tape.batch_jacobian(target, sources)` calls with the tape
        block they belong to."""
        found = []
        for call in self.ctx.nodes(cst.Call):
            tape_name = read_name(receiver(call)) if call_name(call) in _DIFFERENTIATING_METHODS else None
            if tape_name is not None:
                tape = self.tape_of(tape_name, call)
                if tape is not None:
                    found.append((call, tape))
        return found

    @computed
    def gradient_calls(self) -> list[tuple[cst.Call, WithContext]]:
        """`tape.gradient(target, sources)` calls with the tape block they belong to."""
        return [(call, tape) for call, tape in self.differentiating_calls if call_name(call) == "gradient"]

    def tape_of_gradient(self, call: cst.Call) -> WithContext | None:
        """The tape whose `gradient` `call` is (the first, in `gradient_calls`), or None."""
        return self._tape_by_gradient.get(call)

    @computed
    def _tape_by_gradient(self) -> dict[cst.Call, WithContext]:
        found: dict[cst.Call, WithContext] = {}
        for call, tape in self.gradient_calls:
            found.setdefault(call, tape)
        return found

    def gradient_calls_of(self, tapes: list[WithContext]) -> list[tuple[cst.Call, WithContext]]:
        """Those of `gradient_calls` that belong to one of `tapes`, in the same order."""
        places = self._gradient_places
        return [self.gradient_calls[p] for p in sorted({p for tape in tapes for p in places.get(tape, ())})]

    @computed
    def _gradient_places(self) -> dict[WithContext, list[int]]:
        """Where each tape's calls are in `gradient_calls`."""
        places: dict[WithContext, list[int]] = defaultdict(list)
        for place, (_, tape) in enumerate(self.gradient_calls):
            places[tape].append(place)
        return places

    def differentiated_again(self, call: cst.Call) -> bool:
        """Is the result of `call` (a tape's `gradient`) differentiated by a tape's `gradient` / `jacobian` /
        `batch_jacobian` in the same function: a higher-order derivative? The result may reach that target
        through assignments, a tuple unpack (`dx, dy = t.gradient(f, [x, y])`), or a `for` loop or a
        comprehension over the gradients (`[t2.gradient(g, w) for g in grads]`)."""
        scope = self.ctx.scope_of(call)
        for other, _ in self.differentiating_calls:
            target = argument(other, 0, "target")
            if other is not call and target is not None and self.ctx.scope_of(other) is scope \
                    and self._reaches(call, target, other):
                return True
        return False

    def _reaches(self, node: cst.CSTNode, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Does the value computed at `node` reach `expr` (evaluated at `at`) through the bindings before
        `at`, following unpacked tuples and `for` / comprehension targets to what they iterate?"""
        flow = self.ctx.flow
        seen: set[str] = set()
        work = [expr]
        while work:
            current = work.pop()
            if self.ctx.is_inside(node, current):
                return True
            for name in names_in(current) - seen:
                seen.add(name)
                work.extend(self._comprehension_iterables(name, at))
                sources = (flow.source_value(b) for b in flow.bindings_of(name, at))
                work.extend(source for source in sources if source is not None)
        return False

    def _comprehension_iterables(self, name: str, at: cst.CSTNode) -> list[cst.BaseExpression]:
        """What `name` iterates over when it is a target of a comprehension around `at`."""
        found = []
        for ancestor in self.ctx.ancestors(at):
            if isinstance(ancestor, _COMPREHENSIONS):
                clause: cst.CompFor | None = ancestor.for_in
                while clause is not None:
                    if name in names_in(clause.target):
                        found.append(clause.iter)
                    clause = clause.inner_for_in
        return found

    # ----- traced code -------------------------------------------------------------------------
    def function_wrapper(self, expr: cst.BaseExpression, depth: int = 0) -> Compilation | None:
        """Is `expr` (a decorator, or the callee of a wrapping call `expr(f)`) `tf.function` or a
        wrapper of it, and how does it compile? `tf.function`, `tf.function(jit_compile=True)`,
        `functools.partial(tf.function, ...)`, a name bound to one of those, or a same-file function
        whose body returns `tf.function(...)` of its parameter, of a function it defines, or of no
        function at all (a decorator factory) — tf_agents' `common.function` shape.

        The one place that decides what a tf.function wrapper is: resolve cross-module wrappers here."""
        if depth > _WRAPPER_DEPTH:
            return None
        names = self.ctx.names
        if names.qualname(expr) == "tensorflow.function":
            return Compilation()
        if isinstance(expr, cst.Call):
            callee = names.callee(expr)
            if callee == "functools.partial" and expr.args:
                inner = self.function_wrapper(expr.args[0].value, depth + 1)
                given = len(positional_args(expr)) > 1 or keyword_arg(expr, "func") is not None
                return inner.with_options(expr) if inner is not None and not given else None
            if argument(expr, 0, "func") is not None or any(a.star == "*" for a in expr.args):
                return None  # `tf.function(f)` is a compiled function, not a decorator
            if callee == "tensorflow.function":  # `@tf.function(jit_compile=True)`: the decorator it returns
                return Compilation().with_options(expr)
            inner = self.function_wrapper(expr.func, depth + 1)  # `@common.function(autograph=True)`
            return inner.with_options(expr) if inner is not None else None
        if isinstance(expr, cst.Name):
            local = self.ctx.definitions.functions.get(expr.value)
            if local:
                return self._local_wrapper(local[-1], depth)
            if expr.value in self.ctx.names.bound_names:
                value = self.ctx.flow.resolve_value(expr)
                if isinstance(value, cst.Call):
                    return self.function_wrapper(value, depth + 1)
        if isinstance(expr, (cst.Name, cst.Attribute)) and self.ctx.project.wraps_tf_function(expr):
            return Compilation()  # another module's wrapper: `from tf_agents.utils import common` -> `@common.function`
        return None

    def _local_wrapper(self, fn: cst.FunctionDef, depth: int) -> Compilation | None:
        if fn in self._wrappers:
            return self._wrappers[fn]
        self._wrappers[fn] = None  # a recursive wrapper is none
        params = parameter_names(fn)
        params.update(p.name.value for p in (fn.params.star_arg, fn.params.star_kwarg) if isinstance(p, cst.Param))
        inner_defs = {d.name.value for d in self.ctx.nodes_in_scope(cst.FunctionDef, fn).nodes}
        for ret in self._returns.get(fn, ()):
            value = ret.value
            if not isinstance(value, cst.Call):
                continue
            compiled = self.function_wrapper(value.func, depth + 1)
            if compiled is None:
                continue
            star = next((a.value for a in value.args if a.star == "*"), None)
            subject = argument(value, 0, "func") or star
            if subject is None or (isinstance(subject, cst.Name) and subject.value in params | inner_defs):
                self._wrappers[fn] = compiled.with_options(value)
                break
        return self._wrappers[fn]

    @computed
    def _returns(self) -> dict[cst.FunctionDef, list[cst.Return]]:
        by_scope: dict[cst.FunctionDef, list[cst.Return]] = defaultdict(list)
        for ret in self.ctx.nodes(cst.Return):
            scope = self.ctx.scope_of(ret)
            if isinstance(scope, cst.FunctionDef):
                by_scope[scope].append(ret)
        return by_scope

    @computed
    def compilations(self) -> dict[cst.FunctionDef, Compilation]:
        """Functions TensorFlow traces as a tf.function (decorated, or wrapped as `f = tf.function(g)`
        by any wrapper `function_wrapper` knows), with how each is compiled."""
        found: dict[cst.FunctionDef, Compilation] = {}
        for fn in self.ctx.nodes(cst.FunctionDef):
            for decorator in fn.decorators:
                compiled = self.function_wrapper(decorator.decorator)
                if compiled is not None:
                    found[fn] = compiled.merge(found.get(fn))
        for call in self.ctx.nodes(cst.Call):
            compiled = self.wrapping(call)
            if compiled is not None:
                for fn in self.ctx.calls.local_functions(argument(call, 0, "func")):
                    found[fn] = compiled.merge(found.get(fn))
        return found

    def wrapping(self, call: cst.Call) -> Compilation | None:
        """Is `call` a wrapper applied to a function (`tf.function(f, jit_compile=True)`,
        `common.function(f)`): how it compiles `f`, else None."""
        if argument(call, 0, "func") is None:
            return None
        head = call.func  # a cheap test first: only imported or assigned names can be a wrapper
        while isinstance(head, (cst.Attribute, cst.Call)):
            head = head.value if isinstance(head, cst.Attribute) else head.func
        if not (isinstance(head, cst.Name) and (head.value in self.ctx.names.imports
                                                or head.value in self.ctx.names.bound_names)):
            return None
        compiled = self.function_wrapper(call.func)
        return compiled.with_options(call) if compiled is not None else None

    @computed
    def compiled_functions(self) -> set[cst.FunctionDef]:
        """Functions that TensorFlow traces as a tf.function (see `compilations`)."""
        return set(self.compilations)

    @computed
    def eager_callbacks(self) -> set[cst.FunctionDef]:
        """Functions handed to `tf.py_function` / `tf.numpy_function`, or decorated by them
        (`@tf.py_function(Tout=tf.float32)`): they run eagerly, at every call, even in a graph."""
        eager: set[cst.FunctionDef] = set()
        for call in self.ctx.nodes(cst.Call):
            if self.ctx.names.callee(call) in _EAGER_WRAPPERS:
                func = argument(call, 0, "func")
                if func is not None:
                    eager.update(self.ctx.calls.local_functions(func))
        for fn in self.ctx.nodes(cst.FunctionDef):
            if any(isinstance(d.decorator, cst.Call) and self.ctx.names.callee(d.decorator) in _EAGER_WRAPPERS
                   for d in fn.decorators):
                eager.add(fn)
        return eager

    def _in_eager_callback(self, node: cst.CSTNode) -> bool:
        return any(ancestor in self.eager_callbacks for ancestor in self.ctx.ancestors(node))

    def compiled_function_of(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        """The tf.function that traces `node`, if any (nested defs inside one are traced too)."""
        return self.traced_function_of(node, keras_steps=False)

    def traced_function_of(self, node: cst.CSTNode, keras_steps: bool = True) -> cst.FunctionDef | None:
        """The function whose trace runs `node`: a tf.function around it, or (with `keras_steps`) the
        Keras `train_step`/`test_step`/`predict_step` override that `fit`/`evaluate`/`predict` trace."""
        for ancestor in self.ctx.ancestors(node):
            if ancestor in self.eager_callbacks:
                return None
            if ancestor in self.compilations or (keras_steps and ancestor in self.keras_steps):
                return ancestor
        return None

    def is_xla(self, fn: cst.FunctionDef) -> bool:
        """Is this traced function compiled with XLA (`jit_compile=True` on its tf.function or wrapper,
        or a Keras step of a model compiled with `jit_compile=True` in this file)?"""
        compiled = self.compilations.get(fn)
        return (compiled is not None and compiled.jit) or fn in self.xla_keras_steps

    def traced_chain(self, node: cst.CSTNode, keras_steps: bool = True,
                     xla: bool = False) -> tuple[CallChain, cst.FunctionDef] | None:
        """Is `node` traced: inside a traced function (`traced_function_of`; with `xla`, an
        XLA-compiled one), or in a same-file helper called only from such functions, transitively?
        Returns the call sites leading out to it (innermost first; `()` when `node` is inside it)
        and the traced function, else None."""
        def holds(n: cst.CSTNode) -> bool:
            fn = self.traced_function_of(n, keras_steps)
            return fn is not None and (not xla or self.is_xla(fn))

        chain = self.ctx.calls.through_callers(node, holds)
        # A call of an eager callback (`py_plus(x)` of a `@tf.py_function` def) runs its body eagerly.
        if chain is None or (chain and any(self._in_eager_callback(n) for n in (node, *chain[:-1]))):
            return None
        traced = self.traced_function_of(chain[-1] if chain else node, keras_steps)
        return (chain, traced) if traced is not None else None

    def describe(self, fn: cst.FunctionDef) -> str:
        """How a message names a traced function: "the tf.function `step`", "the Keras `train_step`
        (traced by `fit`)"."""
        if fn in self.keras_steps and fn not in self.compilations:
            if fn in self.xla_keras_steps:
                return f"the Keras `{fn.name.value}` (compiled with XLA by `fit`: `compile(jit_compile=True)`)"
            return f"the Keras `{fn.name.value}` (traced by `fit`/`evaluate`/`predict`)"
        return f"the {'XLA-compiled ' if self.is_xla(fn) else ''}tf.function `{fn.name.value}`"

    def where(self, node: cst.CSTNode, traced: tuple[CallChain, cst.FunctionDef]) -> str:
        """"the tf.function `step`", or for a helper "`log` (called from the tf.function `step` at line 12)"."""
        chain, fn = traced
        if not chain:
            return self.describe(fn)
        helper = next(a for a in self.ctx.ancestors(node) if isinstance(a, cst.FunctionDef))
        return f"`{helper.name.value}`{self.ctx.calls.describe_chain(chain, self.describe(fn))}"

    # ----- calls of compiled functions ---------------------------------------------------------
    def compiled_callee(self, call: cst.Call) -> tuple[cst.FunctionDef, Compilation] | None:
        """The same-file tf.function a call runs (`step(x)`, `self.step(x)`, `fast(x)` after
        `fast = tf.function(step)` or any wrapper `function_wrapper` knows), with its compilation."""
        func = call.func
        candidates = self.ctx.calls.local_functions(func)
        assigned = isinstance(func, cst.Attribute) or (isinstance(func, cst.Name)
                                                      and func.value in self.ctx.names.bound_names)
        if not candidates and assigned:
            value = self.ctx.flow.resolve_value(func, call)  # `fast = tf.function(step)`, `self.step = ...`
            wrapped = self.wrapping(value) if isinstance(value, cst.Call) else None
            if wrapped is not None:
                candidates = self.ctx.calls.local_functions(argument(value, 0, "func"))
                compiled = [fn for fn in candidates if fn in self.compilations]
                return (compiled[0], wrapped) if compiled else None
        compiled = [fn for fn in candidates if fn in self.compilations]
        return (compiled[0], self.compilations[compiled[0]]) if len(compiled) == 1 else None

    # ----- Keras steps -----------------------------------------------------------------------------
    @computed
    def keras_steps(self) -> set[cst.FunctionDef]:
        """`train_step` / `test_step` / `predict_step` overrides of Keras models: `fit`, `evaluate` and
        `predict` call them inside a tf.function they build (Keras 2 and 3), unless the file compiles
        with `run_eagerly=True`. (`call` is not one: it also runs eagerly when the model is called.)"""
        if any(isinstance(c.value, cst.Name) and c.value.value == "True" and c.keyword is not None
               and c.keyword.value == "run_eagerly" for c in self.ctx.nodes(cst.Arg)):
            return set()
        return {fn for cls in self.keras_models for fn in _methods(cls) if fn.name.value in _KERAS_STEPS}

    @computed
    def keras_models(self) -> list[cst.ClassDef]:
        """Classes of this file that derive from a Keras `Model` (directly or through a class here)."""
        found: list[cst.ClassDef] = []
        classes = self.ctx.nodes(cst.ClassDef)
        changed = True
        while changed:
            changed = False
            for cls in classes:
                if cls not in found and any(self._is_keras_model_base(b.value, found) for b in cls.bases):
                    found.append(cls)
                    changed = True
        return found

    def _is_keras_model_base(self, base: cst.BaseExpression, models: list[cst.ClassDef]) -> bool:
        if isinstance(base, cst.Name) and any(m.name.value == base.value for m in models):
            return True
        return self.ctx.names.qualname(base) in _KERAS_MODEL_CLASSES

    @computed
    def xla_keras_steps(self) -> set[cst.FunctionDef]:
        """Keras steps of models compiled with `compile(..., jit_compile=True)` in this file.

        Only an explicit True: Keras 3's default `jit_compile="auto"` resolves to False on a
        machine without GPU and under a distribution strategy, and to XLA on a GPU when every layer
        supports it (keras/src/trainers/trainer.py `_resolve_auto_jit_compile`, Keras 3.15) —
        what runs depends on the machine, not the code. Keras 2's default is no XLA."""
        steps: set[cst.FunctionDef] = set()
        models = self.keras_models
        for call in self.ctx.nodes(cst.Call):
            if call_name(call) != "compile" or _true(keyword_arg(call, "jit_compile")) is not True:
                continue
            model = self._compiled_model(call, models)
            if model is not None:
                steps.update(fn for fn in _methods(model) if fn in self.keras_steps)
        return steps

    def _compiled_model(self, call: cst.Call, models: list[cst.ClassDef]) -> cst.ClassDef | None:
        """The model class of this file whose instance `call` (`model.compile(...)`) compiles."""
        owner = receiver(call)
        if owner is None:
            return None
        if isinstance(owner, cst.Name) and owner.value == "self":
            return next((c for c in self.ctx.ancestors(call) if isinstance(c, cst.ClassDef) and c in models), None)
        value = self.ctx.flow.resolve_value(owner, call)
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Name):
            return next((m for m in models if m.name.value == value.func.value), None)
        with_steps = [m for m in models if any(fn in self.keras_steps for fn in _methods(m))]
        return with_steps[0] if len(with_steps) == 1 else None  # `model = build_model()`: the only candidate

    # ----- Keras versions ------------------------------------------------------------------------
    def keras_major(self, constructor: cst.Call) -> int:
        """2 for a Keras object built from `tf_keras`, or from `tf.keras` in a file that sets
        TF_USE_LEGACY_KERAS (tf.keras is then Keras 2); else 3 (TF 2.16+)."""
        raw = self.ctx.names.raw_qualname(constructor.func) or ""
        if raw.startswith("tf_keras."):
            return 2
        if raw.startswith("tensorflow.") and self.sets_legacy_keras:
            return 2
        return 3

    @computed
    def sets_legacy_keras(self) -> bool:
        return any(string_value(s) == "TF_USE_LEGACY_KERAS" for s in self.ctx.nodes(cst.SimpleString))
