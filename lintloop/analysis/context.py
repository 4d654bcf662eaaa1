"""`FileContext`: one parsed file, its tree index, and the analyses rules ask, each built on first use."""

from __future__ import annotations

import graphlib
import typing
from bisect import bisect_right
from collections import defaultdict
from functools import cached_property
from typing import Iterator

import libcst as cst

from lintloop.analysis.base import Analysis
from lintloop.analysis.calls import CallGraph
from lintloop.analysis.checkpoints import TFCheckpoints
from lintloop.analysis.dataflow import DataFlow
from lintloop.analysis.datasets import Datasets
from lintloop.analysis.definitions import Definitions
from lintloop.analysis.distribution import Strategies
from lintloop.analysis.index import Binding, Scope, TreeIndex
from lintloop.analysis.intent import Intent
from lintloop.analysis.iteration import Iterations
from lintloop.analysis.jax import Jax
from lintloop.analysis.keras_models import KerasModels
from lintloop.analysis.loop_values import LoopValues
from lintloop.analysis.losses import Losses
from lintloop.analysis.mixed_precision import MixedPrecision
from lintloop.analysis.modules import TorchModules
from lintloop.analysis.names import Names
from lintloop.analysis.nodes import dotted
from lintloop.analysis.optimizer_state import OptimizerStates
from lintloop.analysis.outer_state import OuterState
from lintloop.analysis.project import LintedFile, Project
from lintloop.analysis.prng import Prng
from lintloop.analysis.pytorch import PyTorch
from lintloop.analysis.tensorflow import TensorFlow
from lintloop.analysis.training import Training
from lintloop.timing import NO_TIMER, StageTimer

# A node type, or several (`(cst.For, cst.While)`: the loops).
NodeKinds = type | tuple[type, ...]
# Brackets a `line_of` placeholder in a message; never in source text a message quotes.
LINE_REF = "\x00"


class SourceOrdered:
    """Nodes of the file in source order, and their positions in it: those inside a subtree, or
    between two points, are a slice found by bisection (asking for every loop costs no walk of the file)."""

    def __init__(self, ctx: FileContext, nodes: list) -> None:
        self.nodes = nodes
        self._ctx = ctx
        self._orders = [ctx.order[n] for n in nodes]

    def within(self, container: cst.CSTNode) -> list:
        """Those inside `container`, itself included."""
        return self.between(self._ctx.order[container] - 1, self._ctx.subtree_end[container])

    def between(self, after: int, up_to: int) -> list:
        """Those whose position (`ctx.order`) is in after < position <= up_to."""
        return self.nodes[bisect_right(self._orders, after):bisect_right(self._orders, up_to)]

    def after(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        """Those after `node` in source order (its own subtree included), lazily: a search that stops
        at the first one it needs costs no more."""
        nodes = self.nodes
        return (nodes[i] for i in range(bisect_right(self._orders, self._ctx.order[node]), len(nodes)))


class FileContext:
    """Everything rules may ask about one parsed file.

    Tree questions (parents, scopes, statements) are answered here; every other concern lives in
    its own analysis, reached as an attribute (`ctx.training`, `ctx.flow`, ...: `analyses()` lists
    them) and built the first time a rule asks.
    """

    def __init__(self, module: cst.Module, timer: StageTimer | None = None, names: Names | None = None,
                 file: LintedFile | None = None, evidenced: frozenset[str] = frozenset()) -> None:
        """`names`: the whole file's imports and bound names, when `module` holds only part of the file;
        `file`: where the file is on disk and its whole text (None for text without a file); `evidenced`:
        the frameworks the whole file shows by its training shape (`Names.evidenced`)."""
        self.module = module
        self.file = file
        self.timer = timer or NO_TIMER
        with self.timer.stage("index"):
            index = TreeIndex(module)
        self.parents = index.parents
        self.order = index.order
        self.subtree_end = index.subtree_end
        self.by_type = index.by_type
        self.bindings = index.bindings
        self.names = names or Names(index.imports, index.bound_names, evidenced)
        self.line_refs: list[cst.CSTNode] = []
        self._merged: dict[tuple[type, ...], list[cst.CSTNode]] = {}
        self._in_order: dict[NodeKinds, SourceOrdered] = {}
        self._by_scope: dict[NodeKinds, dict[Scope, SourceOrdered]] = {}
        self._functions_around: dict[cst.CSTNode, cst.FunctionDef | None] = {}

    @classmethod
    def analyses(cls) -> dict[str, type[Analysis]]:
        """Each analysis a rule reaches as `ctx.<attribute>`, by that attribute: each after those it asks."""
        found = {}
        for name, member in vars(cls).items():
            if isinstance(member, cached_property):
                built = typing.get_type_hints(member.func)["return"]
                if isinstance(built, type) and issubclass(built, Analysis):
                    found[name] = built
        order = graphlib.TopologicalSorter({name: built.asks for name, built in found.items()}).static_order()
        return {name: found[name] for name in order}

    def close(self) -> None:
        """Let go of everything: each analysis holds the context, so a context holding its analyses is a
        reference cycle only the cyclic GC frees, which would traverse the whole CST and its indexes
        first. Cleared, they are freed as soon as the file is done. The context is unusable after."""
        self.__dict__.clear()

    # ----- the analyses, by concern --------------------------------------------------------
    @cached_property
    def flow(self) -> DataFlow:
        return DataFlow(self)

    @cached_property
    def project(self) -> Project:
        return Project(self)

    @cached_property
    def definitions(self) -> Definitions:
        return Definitions(self)

    @cached_property
    def calls(self) -> CallGraph:
        return CallGraph(self)

    @cached_property
    def datasets(self) -> Datasets:
        return Datasets(self)

    @cached_property
    def training(self) -> Training:
        return Training(self)

    @cached_property
    def tf(self) -> TensorFlow:
        return TensorFlow(self)

    @cached_property
    def jax(self) -> Jax:
        return Jax(self)

    @cached_property
    def strategies(self) -> Strategies:
        return Strategies(self)

    @cached_property
    def torch(self) -> PyTorch:
        return PyTorch(self)

    @cached_property
    def losses(self) -> Losses:
        return Losses(self)

    @cached_property
    def mixed_precision(self) -> MixedPrecision:
        return MixedPrecision(self)

    @cached_property
    def keras(self) -> KerasModels:
        return KerasModels(self)

    @cached_property
    def modules(self) -> TorchModules:
        return TorchModules(self)

    @cached_property
    def iteration(self) -> Iterations:
        return Iterations(self)

    @cached_property
    def tf_checkpoints(self) -> TFCheckpoints:
        """What each `tf.train.Checkpoint` holds and saves, and the optimizers trained around it."""
        return TFCheckpoints(self)

    @cached_property
    def optimizer_state(self) -> OptimizerStates:
        """Where optax / flax optimizer states and updated parameters go (re-bound, returned, lost)."""
        return OptimizerStates(self)

    @cached_property
    def outer_state(self) -> OuterState:
        """Python state a function changes outside itself (lists, global/nonlocal variables)."""
        return OuterState(self)

    @cached_property
    def prng(self) -> Prng:
        """Which JAX PRNG key value each draw consumes."""
        return Prng(self)

    @cached_property
    def intent(self) -> Intent:
        """Code that shows tracing on purpose: prints that announce it, trace counters read to count traces."""
        return Intent(self)

    @cached_property
    def loop_values(self) -> LoopValues:
        """Values that change on every iteration of a loop (indices, counters, numbers computed from them)."""
        return LoopValues(self)

    # ----- the tree --------------------------------------------------------------------------
    def nodes(self, node_type: type) -> list:
        return self.by_type.get(node_type, [])

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        parent = self.parents.get(node)
        while parent is not None:
            yield parent
            parent = self.parents.get(parent)

    def is_inside(self, node: cst.CSTNode, container: cst.CSTNode) -> bool:
        start, at = self.order.get(container), self.order.get(node)
        if start is None or at is None:  # a node the index does not hold (built by a rule)
            return node is container or any(a is container for a in self.ancestors(node))
        return start <= at <= self.subtree_end[container]

    def in_order(self, nodes: list) -> SourceOrdered:
        """`nodes` (in source order), ready for questions about where they lie."""
        return SourceOrdered(self, nodes)

    def nodes_of(self, kinds: NodeKinds) -> list:
        """The nodes of a type, or of several types (`(cst.For, cst.While)`), in source order."""
        if isinstance(kinds, type):
            return self.nodes(kinds)
        merged = self._merged.get(kinds)
        if merged is None:
            merged = self._merged[kinds] = sorted((n for kind in kinds for n in self.nodes(kind)),
                                                  key=self.order.__getitem__)
        return merged

    def nodes_within(self, kinds: NodeKinds, container: cst.CSTNode) -> list:
        """The nodes of `kinds` inside `container` (itself included), in source order."""
        ordered = self._in_order.get(kinds)
        if ordered is None:
            ordered = self._in_order[kinds] = SourceOrdered(self, self.nodes_of(kinds))
        return ordered.within(container)

    def nodes_in_scope(self, kinds: NodeKinds, scope: Scope) -> SourceOrdered:
        """The nodes of `kinds` whose scope (`scope_of`) is `scope`, in source order (one table per kind)."""
        table = self._by_scope.get(kinds)
        if table is None:
            grouped: dict[Scope, list[cst.CSTNode]] = defaultdict(list)
            for node in self.nodes_of(kinds):
                grouped[self.scope_of(node)].append(node)
            table = self._by_scope[kinds] = {scope: SourceOrdered(self, nodes) for scope, nodes in grouped.items()}
        return table.get(scope) or self.in_order([])

    def returns_of(self, function: cst.FunctionDef) -> list[cst.Return]:
        """`function`'s own `return` statements (not those of functions nested in it), in source order."""
        return self.nodes_in_scope(cst.Return, function).nodes

    def scope_of(self, node: cst.CSTNode) -> Scope:
        function = self._function_around(node)
        if function is not None and node is function.name:  # a def's name is bound around it
            function = self._function_around(function)
        return function or self.module

    def enclosing_scopes(self, node: cst.CSTNode) -> list[Scope]:
        scopes: list[Scope] = []
        function = self._function_around(node)
        while function is not None:
            scopes.append(function)
            function = self._function_around(function)
        return scopes + [self.module]

    def _function_around(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        """The innermost function strictly around `node` (None at module level). Remembered for the
        nodes walked through on the way up, so that asking about every node of a deep nest (a chain of
        1,000 `elif`s) walks each level once."""
        known = self._functions_around
        passed: list[cst.CSTNode] = []
        current = node
        while True:
            if current in known:
                found = known[current]
                break
            parent = self.parents.get(current)
            passed.append(current)
            if parent is None or isinstance(parent, cst.FunctionDef):
                found = parent
                break
            current = parent
        for walked in passed:
            known[walked] = found
        return found

    def exclusive(self, node: cst.CSTNode, other: cst.CSTNode) -> bool:
        """Whether `node` and `other` never both run in one pass through their scope: they lie in opposite
        branches of one `if`, or of two `if`s of that scope testing one name or attribute chain (`if
        use_amp:` twice, or `if not use_amp:`) that nothing binds from the first test to the second."""
        theirs = self._conditions(other)
        for guard, key, holds in self._conditions(node):
            for other_guard, other_key, other_holds in theirs:
                if guard is other_guard:
                    if holds != other_holds:
                        return True
                elif key is not None and key == other_key and holds != other_holds \
                        and self._unbound_between(key, guard, other_guard):
                    return True
        return False

    def _conditions(self, node: cst.CSTNode) -> list[tuple[cst.If, str | None, bool]]:
        """The `if`s of `node`'s scope whose branches hold it: each with its test's name or attribute chain
        (None for another test) and the test's truth where `node` runs."""
        found: list[tuple[cst.If, str | None, bool]] = []
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                break
            if not isinstance(ancestor, cst.If) or self.is_inside(node, ancestor.test):
                continue
            test, truth = ancestor.test, self.is_inside(node, ancestor.body)
            while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
                test, truth = test.expression, not truth
            found.append((ancestor, dotted(test), truth))
        return found

    def _unbound_between(self, key: str, first: cst.If, second: cst.If) -> bool:
        scope = self.scope_of(first)
        if self.scope_of(second) is not scope:
            return False
        start, end = sorted((self.order[first], self.order[second]))
        return not any(start <= binding.order <= end for binding in self.bindings_in(scope, key))

    def statement_of(self, node: cst.CSTNode) -> cst.CSTNode:
        """The simple statement line, or compound statement, that holds `node`."""
        current = node
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                return ancestor
            current = ancestor
        return current

    def innermost_loop(self, node: cst.CSTNode) -> cst.For | cst.While | None:
        """The loop whose body holds `node`, within the same function."""
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return None
            if isinstance(ancestor, (cst.For, cst.While)) and self.is_inside(node, ancestor.body):
                return ancestor
        return None

    def snippet(self, node: cst.CSTNode, limit: int = 60) -> str:
        """`node`'s code on one line, for messages: whitespace collapsed, shortened past `limit`."""
        text = " ".join(self.module.code_for_node(node).split())
        return text if len(text) <= limit else text[: limit - 1] + "…"

    def line_of(self, node: cst.CSTNode) -> str:
        """A placeholder for `node`'s line number in the file, for messages ("called at line 40"):
        the linter replaces it once positions are known (the parsed module may be a selection)."""
        self.line_refs.append(node)
        return f"{LINE_REF}{len(self.line_refs) - 1}{LINE_REF}"

    def bindings_in(self, scope: Scope, name: str) -> list[Binding]:
        return self.bindings.get(scope, {}).get(name, [])

    def bindings_anywhere(self, name: str) -> list[Binding]:
        """The bindings of `name` in every scope (scope by scope, in the order of `bindings`)."""
        return self._bindings_by_name.get(name, [])

    @cached_property
    def _bindings_by_name(self) -> dict[str, list[Binding]]:
        table: dict[str, list[Binding]] = defaultdict(list)
        for scope_bindings in self.bindings.values():
            for name, bindings in scope_bindings.items():
                table[name].extend(bindings)
        return table
