"""`FileContext`: one parsed file, its tree index, and the analyses rules ask, each built on first use."""

from __future__ import annotations

from functools import cached_property
from typing import Iterator

import libcst as cst

from lintloop.analysis.calls import CallGraph
from lintloop.analysis.dataflow import DataFlow
from lintloop.analysis.datasets import Datasets
from lintloop.analysis.distribution import Strategies
from lintloop.analysis.index import Binding, Scope, TreeIndex
from lintloop.analysis.iteration import Iterations
from lintloop.analysis.jax import Jax
from lintloop.analysis.keras_models import KerasModels
from lintloop.analysis.loop_values import LoopValues
from lintloop.analysis.losses import Losses
from lintloop.analysis.mixed_precision import MixedPrecision
from lintloop.analysis.modules import TorchModules
from lintloop.analysis.names import Names
from lintloop.analysis.optimizer_state import OptimizerStates
from lintloop.analysis.outer_state import OuterState
from lintloop.analysis.project import LintedFile, Project
from lintloop.analysis.prng import Prng
from lintloop.analysis.pytorch import PyTorch
from lintloop.analysis.tensorflow import TensorFlow
from lintloop.analysis.training import Training
from lintloop.timing import NO_TIMER, StageTimer

# Brackets a `line_of` placeholder in a message; never in source text a message quotes.
LINE_REF = "\x00"


class FileContext:
    """Everything rules may ask about one parsed file.

    Tree questions (parents, scopes, statements) are answered here; every other concern lives in
    its own analysis, reached as an attribute (`ctx.flow`, `ctx.calls`, `ctx.training`, `ctx.tf`,
    `ctx.jax` (what JAX traces), `ctx.strategies`, `ctx.datasets` (tf.data pipelines),
    `ctx.mixed_precision`, `ctx.keras` (Keras models), `ctx.torch`, `ctx.losses`, `ctx.modules`,
    `ctx.iteration`, `ctx.loop_values`, `ctx.outer_state`, `ctx.prng` (JAX PRNG keys),
    `ctx.optimizer_state` (optax / flax), `ctx.project` (the other modules of the linted project))
    and built the first time a rule asks.
    """

    def __init__(self, module: cst.Module, timer: StageTimer | None = None, names: Names | None = None,
                 file: LintedFile | None = None) -> None:
        """`names`: the whole file's imports and bound names, when `module` holds only part of the file;
        `file`: where the file is on disk and its whole text (None for text without a file)."""
        self.module = module
        self.file = file
        self.timer = timer or NO_TIMER
        with self.timer.stage("index"):
            index = TreeIndex(module)
        self.parents = index.parents
        self.order = index.order
        self.by_type = index.by_type
        self.bindings = index.bindings
        self.names = names or Names(index.imports, index.bound_names)
        self.line_refs: list[cst.CSTNode] = []

    # ----- the analyses, by concern --------------------------------------------------------
    @cached_property
    def flow(self) -> DataFlow:
        return DataFlow(self)

    @cached_property
    def project(self) -> Project:
        return Project(self)

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
        return node is container or any(a is container for a in self.ancestors(node))

    def scope_of(self, node: cst.CSTNode) -> Scope:
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, cst.FunctionDef) and node is not ancestor.name:
                return ancestor
        return self.module

    def enclosing_scopes(self, node: cst.CSTNode) -> list[Scope]:
        scopes: list[Scope] = [a for a in self.ancestors(node) if isinstance(a, cst.FunctionDef)]
        return scopes + [self.module]

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
