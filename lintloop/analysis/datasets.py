"""tf.data pipelines: every dataset a file consumes, returns or leaves unused, as the ordered
operations that built it (source first), followed through method chains, re-bindings, `if`
branches, parameters and same-file functions that build and return it; and what the functions
handed to `Dataset.map` do (random ops, stateful ops).

A pipeline is one path: where a name may hold several datasets (a re-binding inside an `if`),
each reaching binding gives its own pipeline, so a rule can ask whether a condition holds on
every path through an operation.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from lintloop.analysis.base import Analysis, computed
from lintloop.analysis.index import Binding
from lintloop.analysis.nodes import argument, call_name, children, dotted, keyword_arg, positional_args, read_name, walk

if TYPE_CHECKING:
    from lintloop.analysis.context import FileContext

# `Dataset` methods that return a new dataset: the operations a pipeline is made of.
DATASET_METHODS = frozenset({
    "map", "batch", "padded_batch", "ragged_batch", "rebatch", "bucket_by_sequence_length", "unbatch",
    "shuffle", "prefetch", "cache", "repeat", "take", "skip", "filter", "flat_map", "interleave", "apply",
    "with_options", "shard", "window", "enumerate", "concatenate", "take_while", "unique", "ignore_errors",
    "snapshot", "group_by_window", "scan", "map_with_legacy_function", "assert_cardinality", "rejection_resample",
})
# Operations after which each element is a batch of the elements before.
BATCHING = frozenset({"batch", "padded_batch", "ragged_batch", "rebatch", "bucket_by_sequence_length"})
# Operations whose output elements we cannot relate to their input's (they may unbatch).
REGROUPING = frozenset({"unbatch", "flat_map", "interleave", "window", "group_by_window"})

# Sources that batch (unless `batch_size=None`) and prefetch internally.
_BATCHED_SOURCES = frozenset({
    "keras.utils.image_dataset_from_directory", "keras.utils.text_dataset_from_directory",
    "keras.utils.audio_dataset_from_directory", "keras.utils.timeseries_dataset_from_array",
    "keras.preprocessing.image_dataset_from_directory", "keras.preprocessing.text_dataset_from_directory",
    "keras.preprocessing.timeseries_dataset_from_array",
    "tensorflow.data.experimental.make_csv_dataset", "tensorflow.data.experimental.make_batched_features_dataset",
})
_TF_DATA_CLASSES = frozenset({"TFRecordDataset", "TextLineDataset", "FixedLengthRecordDataset", "Dataset"})

# Keras random preprocessing layers (any spelling, Keras 2 and 3; keras_cv): active outside `fit` too
# (their `call` defaults to `training=True`).
_RANDOM_LAYER = re.compile(r"^(Random[A-Z]\w*|RandAugment|AugMix|CutMix|MixUp|FourierMix|GridMask)$")
_SEQUENTIAL = {"keras.Sequential", "keras.models.Sequential"}
# `tf.random` functions that draw nothing (seeding, key handling) and Generator construction.
_NOT_DRAWS = {"set_seed", "get_seed", "fold_in", "split", "create_rng_state", "Generator", "get_global_generator",
              "set_global_generator", "Algorithm", "experimental"}
_GENERATOR_DRAWS = {"make_seeds", "uniform_full_int", "normal", "uniform", "truncated_normal", "binomial"}
_STATEFUL_CALLS = {"tensorflow.py_function", "tensorflow.numpy_function", "tensorflow.compat.v1.py_func",
                   "tensorflow.print"}
# Options that turn off the optimizations TF applies by default (TF 2.9+: prefetch injection after
# a final synchronous transformation; map parallelization of stateless functions).
_OPTION_OFF = {
    "autotune.enabled": "autotune",
    "experimental_optimization.autotune": "autotune",
    "experimental_optimization.apply_default_optimizations": "default_optimizations",
    "experimental_optimization.inject_prefetch": "inject_prefetch",
    "experimental_optimization.map_parallelization": "map_parallelization",
}
# How many alternative paths one expression may have before we stop enumerating them.
_MAX_PATHS = 16

# Screen tokens of a file that can build a pipeline: every source the analysis knows is spelled
# through `tf.data`, `Dataset`, `tfds`, `AUTOTUNE` or a `*_dataset...` helper (Keras utils, `to_tf_dataset`).
SOURCE_TOKENS = ("name:data", "name:Dataset", "name:tfds", "name:AUTOTUNE", "text:_dataset")


@dataclass(frozen=True)
class Op:
    """One step of a pipeline: a `Dataset` method call (`name` is the method), its `source`
    (`name` "source", `qualname` what was called), or a root we cannot see (`name` "unknown")."""

    name: str
    call: cst.Call | None = None
    qualname: str | None = None

    @property
    def batches(self) -> bool:
        if self.name == "source":
            return self.qualname in _BATCHED_SOURCES and not _is_none(keyword_arg(self.call, "batch_size")) \
                or (self.qualname == "tensorflow_datasets.load" and _batch_size_given(self.call)) \
                or self.qualname == "to_tf_dataset"
        if self.name == "apply":
            return _mentions(self.call, ("bucket_by_sequence_length", "dense_to_ragged_batch", "padded_batch"))
        return self.name in BATCHING

    @property
    def prefetches(self) -> bool:
        if self.name == "source":
            return self.batches and self.qualname != "tensorflow_datasets.load"
        if self.name == "apply":
            return _mentions(self.call, ("prefetch_to_device", "copy_to_device"))
        return self.name == "prefetch"


@dataclass(frozen=True)
class Consumer:
    """What iterates a pipeline: `kind` fit / evaluate / for / iter / distribute; `role` train,
    eval, shown (a loop that only prints the elements: `lintloop.analysis.intent`), or unknown (a loop
    that trains nothing we can see)."""

    kind: str
    node: cst.CSTNode
    role: str


@dataclass(frozen=True)
class Pipeline:
    ops: tuple[Op, ...]
    consumer: Consumer | None
    # Handed to code this file does not show: returned from a function no same-file code calls,
    # or built and never consumed here.
    escapes: bool

    def index(self, call: cst.Call) -> int | None:
        return next((i for i, op in enumerate(self.ops) if op.call is call), None)

    @property
    def training(self) -> bool:
        return self.consumer is not None and self.consumer.role == "train"


class Datasets(Analysis):
    asks = frozenset({"calls", "definitions", "flow", "intent", "training"})

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._paths: dict[cst.CSTNode, list[tuple[Op, ...]]] = {}
        self._active: set[cst.CSTNode] = set()

    # ----- pipelines ---------------------------------------------------------------------------
    @computed
    def pipelines(self) -> list[Pipeline]:
        found: list[Pipeline] = []
        for consumer, expr in self.consumers:
            found.extend(Pipeline(path, consumer, False) for path in self.paths(expr) if self.is_dataset(path))
        ctx = self.ctx
        for ret in ctx.nodes(cst.Return):
            scope = ctx.scope_of(ret)
            if ret.value is not None and isinstance(scope, cst.FunctionDef) and not ctx.calls.call_sites.get(scope):
                found.extend(Pipeline(p, None, True) for p in self.paths(ret.value) if self.is_dataset(p))
        # Built and not consumed where we can see it: the longest chains not already found.
        seen = {op.call for p in found for op in p.ops}
        loose = [c for c in ctx.nodes(cst.Call) if c not in seen and self._is_op_call(c)]
        inner = {op.call for c in loose for p in self.paths(c) for op in p[:-1]}
        for call in loose:
            if call not in inner:
                found.extend(Pipeline(p, None, True) for p in self.paths(call) if self.is_dataset(p))
        return found

    def through(self, call: cst.Call) -> list[Pipeline]:
        """The pipelines that `call` (a dataset operation) is a step of."""
        return list(self._pipelines_through.get(call, ()))

    def through_outside_evaluation(self, call: cst.Call) -> list[Pipeline]:
        """The pipelines through `call` that are not consumed for evaluation, nor only to print their
        elements (a guide showing the order a pipeline gives). A helper that builds both the training and
        the validation dataset (`train_ds = make(train)`, `val_ds = make(val)`) gives one pipeline per
        call site: its steps are judged by the training use, and by none when every use evaluates."""
        return [p for p in self.through(call) if p.consumer is None or p.consumer.role not in ("eval", "shown")]

    @computed
    def _pipelines_through(self) -> dict[cst.Call, list[Pipeline]]:
        found: dict[cst.Call, list[Pipeline]] = defaultdict(list)
        for pipeline in self.pipelines:
            for call in dict.fromkeys(op.call for op in pipeline.ops if op.call is not None):
                found[call].append(pipeline)
        return found

    def is_dataset(self, path: tuple[Op, ...]) -> bool:
        """A path rooted in a tf.data source, or whose operations name `tf.data` (`AUTOTUNE`), or a
        parameter annotated `tf.data.Dataset`."""
        if path[0].name in ("source", "param"):
            return True
        return any(op.call is not None and _mentions_tf_data(self.ctx, op.call) for op in path[1:])

    @computed
    def consumers(self) -> list[tuple[Consumer, cst.BaseExpression]]:
        ctx = self.ctx
        found: list[tuple[Consumer, cst.BaseExpression]] = []
        for call in ctx.nodes(cst.Call):
            name = call_name(call)
            method = isinstance(call.func, cst.Attribute)
            if name == "fit" and method:
                x = argument(call, 0, "x")
                if x is not None:
                    found.append((Consumer("fit", call, "train"), x))
                validation = keyword_arg(call, "validation_data")
                if validation is not None:
                    found.append((Consumer("fit", call, "eval"), validation))
            elif name in ("evaluate", "predict") and method and argument(call, 0, "x") is not None:
                found.append((Consumer(name, call, "eval"), argument(call, 0, "x")))
            elif name == "experimental_distribute_dataset" and method and argument(call, 0, "dataset") is not None:
                found.append((Consumer("distribute", call, "train"), argument(call, 0, "dataset")))
            elif name == "distribute_datasets_from_function" and method:
                fn = argument(call, 0, "dataset_fn")
                for value in self._returned_values(fn) if fn is not None else []:
                    found.append((Consumer("distribute", call, "train"), value))
            elif ctx.names.is_builtin(call.func, "iter") and call.args:
                role = "train" if self._in_training_code(call) else "unknown"
                found.append((Consumer("iter", call, role), call.args[0].value))
        for loop in ctx.nodes(cst.For):
            role = "train" if ctx.training.is_training_loop(loop) else "shown" if ctx.intent.only_shows(loop) \
                else "unknown"
            found.append((Consumer("for", loop, role), self._iterated(loop.iter)))
        return found

    def _in_training_code(self, node: cst.CSTNode) -> bool:
        scope = self.ctx.scope_of(node)
        loops = self.ctx.nodes_in_scope((cst.For, cst.While), scope).nodes
        return scope in self.ctx.training.functions or any(self.ctx.training.is_training_loop(l) for l in loops)

    def _iterated(self, expr: cst.BaseExpression) -> cst.BaseExpression:
        """The dataset a `for` iterates: `enumerate(ds)`, `tqdm(ds)`, `ds.as_numpy_iterator()` unwrapped."""
        while isinstance(expr, cst.Call):
            name = call_name(expr)
            if name in ("as_numpy_iterator", "__iter__") and isinstance(expr.func, cst.Attribute):
                expr = expr.func.value
            elif (self.ctx.names.is_builtin(expr.func, "enumerate") or name in ("tqdm", "trange")) and expr.args:
                expr = expr.args[0].value
            else:
                break
        return expr

    # ----- paths: the operations that built a value ----------------------------------------------
    def paths(self, expr: cst.BaseExpression) -> list[tuple[Op, ...]]:
        """Every sequence of operations (source first) that may have built the value of `expr`."""
        if expr in self._paths:
            return self._paths[expr]
        if expr in self._active:  # recursion through same-file functions
            return [(Op("unknown"),)]
        self._active.add(expr)
        try:
            result = self._compute_paths(expr)[:_MAX_PATHS] or [(Op("unknown"),)]
        finally:
            self._active.discard(expr)
        self._paths[expr] = result
        return result

    def _is_op_call(self, call: cst.Call) -> bool:
        return call_name(call) in DATASET_METHODS and isinstance(call.func, cst.Attribute)

    def _compute_paths(self, expr: cst.BaseExpression) -> list[tuple[Op, ...]]:
        if isinstance(expr, cst.Call):
            source = self._source(expr)
            if source is not None:
                return [(Op("source", expr, source),)]
            if self._is_op_call(expr):
                op = Op(call_name(expr), expr)
                return [p + (op,) for p in self.paths(expr.func.value)]
            return [p for value in self._returned_values(expr.func) for p in self.paths(value)]
        if isinstance(expr, cst.IfExp):
            return self.paths(expr.body) + self.paths(expr.orelse)
        name = read_name(expr)
        if name is not None:
            return [p for b in self._reaching(name, expr) for p in self._binding_paths(b)]
        return []

    def _returned_values(self, func: cst.BaseExpression) -> list[cst.BaseExpression]:
        """What a same-file function (or lambda) that `func` names returns."""
        if isinstance(func, cst.Lambda):
            return [func.body]
        ctx = self.ctx
        return [r.value for fn in ctx.calls.local_functions(func) if self._visible(fn, func)
                for r in ctx.returns_of(fn) if r.value is not None]

    def _visible(self, fn: cst.FunctionDef, at: cst.CSTNode) -> bool:
        """A function nested in another is only callable there (same-named helpers of two test methods)."""
        outer = next((a for a in self.ctx.ancestors(fn) if isinstance(a, cst.FunctionDef)), None)
        return outer is None or self.ctx.is_inside(at, outer)

    def _binding_paths(self, binding: Binding) -> list[tuple[Op, ...]]:
        node = binding.node
        if isinstance(node, cst.Param):
            return self._param_paths(node)
        if binding.augmented:
            return []
        if binding.value is not None:
            return self.paths(binding.value)
        # `train_ds, test_ds = tfds.load(..., split=["train", "test"])`
        if isinstance(node, cst.Assign) and isinstance(node.value, cst.Call):
            source = self._source(node.value)
            if source is not None:
                return [(Op("source", node.value, source),)]
        return []

    def _param_paths(self, param: cst.Param) -> list[tuple[Op, ...]]:
        ctx = self.ctx
        fn = next((a for a in ctx.ancestors(param) if isinstance(a, (cst.FunctionDef, cst.Lambda))), None)
        if not isinstance(fn, cst.FunctionDef):
            return []
        sites = [site for site in ctx.calls.call_sites.get(fn, []) if self._visible(fn, site)]
        annotation = param.annotation
        if not sites:
            if annotation is not None and (ctx.names.qualname(annotation.annotation) or "").startswith("tensorflow.data."):
                return [(Op("param"),)]
            return []
        positional = list(fn.params.params)
        position = positional.index(param) if param in positional else None
        found = []
        for site in sites:
            shift = 1 if positional and positional[0].name.value in ("self", "cls") and isinstance(site.func, cst.Attribute) else 0
            value = keyword_arg(site, param.name.value)
            if value is None and position is not None and position - shift >= 0:
                args = positional_args(site)
                value = args[position - shift] if position - shift < len(args) else None
            if value is not None:
                found.extend(self.paths(value))
        return found

    def _source(self, call: cst.Call) -> str | None:
        """The qualified name of a call that creates a tf.data dataset, else None."""
        qualname = self.ctx.names.callee(call) or ""
        if qualname.startswith("tensorflow.compat.v1.data."):
            qualname = "tensorflow.data." + qualname[len("tensorflow.compat.v1.data."):]
        parts = qualname.split(".")
        if qualname.startswith("tensorflow.data.") and len(parts) >= 3:
            if parts[2] in _TF_DATA_CLASSES and (parts[2] != "Dataset" or len(parts) == 4):
                return qualname
            if parts[2] == "experimental" and len(parts) == 4 and (parts[3].endswith("Dataset")
                                                                 or qualname in _BATCHED_SOURCES):
                return qualname
        if qualname in _BATCHED_SOURCES or qualname == "tensorflow_datasets.load":
            return qualname
        if call_name(call) == "to_tf_dataset" and isinstance(call.func, cst.Attribute):
            return "to_tf_dataset"  # a Hugging Face dataset's tf.data view: batched and prefetched
        return None

    def _reaching(self, name: str, read: cst.BaseExpression) -> list[Binding]:
        """The bindings of `name` that may reach its `read`: the last one before it, and earlier ones
        while the later are conditional (in an `if` branch, a loop or `try` that `read` is not in)."""
        ctx = self.ctx
        result: list[Binding] = []
        at: cst.CSTNode | None = None
        for binding in ctx.flow.bindings_latest_first(name, read):
            if not result:  # the bindings a name sees are all of one scope
                at = read if ctx.scope_of(binding.node) is ctx.scope_of(read) else None
            placement = self._placement(binding.node, at)
            if placement == "excluded":
                continue
            result.append(binding)
            if placement == "always":
                break
        return result

    def _placement(self, node: cst.CSTNode, at: cst.CSTNode | None) -> str:
        """"always" when a binding at `node` runs whenever `at` runs after it, "excluded" when it
        is in the other branch of an `if` than `at`, else "maybe"."""
        ctx = self.ctx
        placement = "always"
        for ancestor in ctx.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.Module)):
                break
            if isinstance(ancestor, (cst.With, cst.IndentedBlock, cst.SimpleStatementLine, cst.Else)) \
                    or not isinstance(ancestor, cst.BaseCompoundStatement):
                continue
            if at is not None and ctx.is_inside(at, ancestor):
                if isinstance(ancestor, cst.If) and ctx.is_inside(node, ancestor.body) != ctx.is_inside(at, ancestor.body):
                    return "excluded"
                continue
            placement = "maybe"
        return placement

    # ----- options -----------------------------------------------------------------------------
    def disabled_optimizations(self, pipeline: Pipeline) -> set[str]:
        """What the pipeline's `with_options(options)` turn off: "autotune", "default_optimizations",
        "inject_prefetch", "map_parallelization" (attributes of an `Options` set to `False`)."""
        off: set[str] = set()
        for op in pipeline.ops:
            if op.name != "with_options" or op.call is None:
                continue
            options = read_name(argument(op.call, 0, "options"))
            if options is None:
                continue
            for attribute, what in _OPTION_OFF.items():
                for binding in self.ctx.flow.bindings_of(f"{options}.{attribute}", op.call, before=False):
                    if isinstance(binding.value, cst.Name) and binding.value.value == "False":
                        off.add(what)
        return off

    # ----- mapped functions ----------------------------------------------------------------------
    def mapped_function_calls(self, map_call: cst.Call) -> list[cst.Call] | None:
        """The calls a `map` call's function makes (through same-file helpers); None when the
        function is not one this file defines (a library function, an object we cannot see).

        The function may be a lambda, a same-file function or method, or a callable instance of a
        same-file class (`Preprocess(train=True)`: its `__call__`); in that class's methods, a branch
        on a flag the instance was built with (`if self.train:` for `train=False`) does not run."""
        fn = argument(map_call, 0, "map_func")
        if isinstance(fn, cst.Call) and self.ctx.names.callee(fn) == "functools.partial" and fn.args:
            fn = fn.args[0].value
        roots = self._callables(fn, map_call) if fn is not None else []
        if not roots:
            return None
        calls: dict[cst.Call, None] = {}
        seen: set[cst.CSTNode] = set()
        work = list(roots)
        while work:
            body, instance = work.pop()
            if body in seen:
                continue
            seen.add(body)
            for call in self._live_calls(body, instance):
                calls.setdefault(call)
                for target, built in self._callables(call.func, call):
                    # `self.helper(x)` in a method runs on the same instance: its flags still hold.
                    same_class = built is None and instance is not None and self._class_of(target) is self._class_of(body)
                    work.append((target, instance if same_class else built))
        return list(calls)

    def _callables(self, expr: cst.BaseExpression, at: cst.CSTNode) -> list[tuple[cst.CSTNode, cst.Call | None]]:
        """What calling `expr` runs: a lambda, same-file functions, or the `__call__` of an instance of a
        same-file class (with the call that built the instance)."""
        if isinstance(expr, cst.Lambda):
            return [(expr, None)]
        ctx = self.ctx
        functions = ctx.calls.local_functions(expr)
        if functions:
            return [(fn, None) for fn in functions if self._visible(fn, at)]
        built = expr if isinstance(expr, cst.Call) else ctx.flow.resolve_value(expr, at)
        cls = ctx.definitions.local_class(built.func) if isinstance(built, cst.Call) else None
        method = _method(cls, "__call__") if cls is not None else None
        return [(method, built)] if method is not None else []

    def _class_of(self, node: cst.CSTNode) -> cst.ClassDef | None:
        parent = self.ctx.parents.get(self.ctx.parents.get(node))  # a method: FunctionDef <- IndentedBlock <- ClassDef
        return parent if isinstance(node, cst.FunctionDef) and isinstance(parent, cst.ClassDef) else None

    def _live_calls(self, body: cst.CSTNode, instance: cst.Call | None) -> list[cst.Call]:
        """The calls in `body`, less those in branches that the instance's construction turns off."""
        cls = self._class_of(body) if instance is not None else None
        dead = self._dead_branches(body, cls, instance) if cls is not None else set()
        found: list[cst.Call] = []
        stack: list[cst.CSTNode] = [body]
        while stack:
            node = stack.pop()
            if node in dead:
                continue
            if isinstance(node, cst.Call):
                found.append(node)
            stack.extend(reversed(children(node)))
        return found

    def _dead_branches(self, body: cst.CSTNode, cls: cst.ClassDef, instance: cst.Call) -> set[cst.CSTNode]:
        """The branches of `if self.flag:` / `... if not self.flag else ...` in `body` that cannot run for an
        instance built with a literal `True` / `False` (or left at such a default) for the `__init__`
        parameter that `self.flag` holds; and the statements after an `if` whose running branch returns
        (`if not self.train: return image, label`)."""
        dead: set[cst.CSTNode] = set()
        for node in walk(body):
            if not isinstance(node, (cst.If, cst.IfExp)):
                continue
            test, negated = node.test, False
            if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
                test, negated = test.expression, True
            value = self._flag_value(test, cls, instance)
            if value is None:
                continue
            runs = node.body if value != negated else node.orelse
            dead.add(node.orelse if value != negated else node.body)
            block = self.ctx.parents.get(node)
            if isinstance(node, cst.If) and isinstance(runs, cst.IndentedBlock) and _ends_in_exit(runs) \
                    and isinstance(block, cst.IndentedBlock):
                dead.update(block.body[block.body.index(node) + 1:])
        return dead - {None}

    def _flag_value(self, test: cst.BaseExpression, cls: cst.ClassDef, instance: cst.Call) -> bool | None:
        """`self.flag` as the instance was built: the literal bool given for (or defaulted to) the `__init__`
        parameter assigned to it (`self.flag = flag`); None when unknown."""
        label = dotted(test) if isinstance(test, cst.Attribute) else None
        init = _method(cls, "__init__")
        if label is None or not label.startswith("self.") or init is None:
            return None
        assigned = next((a.value for a in walk(init) if isinstance(a, cst.Assign) and isinstance(a.value, cst.Name)
                         and any(dotted(t.target) == label for t in a.targets)), None)
        positional = list(init.params.params)
        param = next((p for p in (*positional, *init.params.kwonly_params)
                      if assigned is not None and p.name.value == assigned.value), None)
        if param is None:
            return None
        given = keyword_arg(instance, param.name.value)
        position = positional.index(param) - 1 if param in positional else -1  # `self` is not passed
        args = positional_args(instance)
        if given is None and 0 <= position < len(args):
            given = args[position]
        value = self.ctx.flow.resolve_value(given, instance) if given is not None else param.default
        return value.value == "True" if isinstance(value, cst.Name) and value.value in ("True", "False") else None

    def random_call(self, call: cst.Call) -> str | None:
        """What random op `call` is (`tf.image.random_flip_left_right`, a `RandomFlip` layer), else None.
        Stateless ops (`tf.random.stateless_*`, `tf.image.stateless_random_*`) are not: the same
        seed gives the same values in every epoch."""
        names, ctx = self.ctx.names, self.ctx
        qualname = names.callee(call) or ""
        parts = qualname.split(".")
        last = parts[-1]
        spelled = ctx.snippet(call.func)
        if parts[0] == "tensorflow":
            if ("random" in parts[1:-1] and last not in _NOT_DRAWS and not last.startswith("stateless")
                    and not set(parts) & _NOT_DRAWS) or last.startswith("random_"):
                return spelled
            if qualname == "tensorflow.nn.dropout":
                return spelled
        if qualname.startswith("keras.random.") and last != "SeedGenerator":
            return spelled
        if call_name(call) in _GENERATOR_DRAWS and isinstance(call.func, cst.Attribute):
            made = ctx.flow.constructed_by(call.func.value, call)
            if made is not None and made[1].startswith(("tensorflow.random.Generator", "tensorflow.random.get_global_generator")):
                return f"tf.random.Generator.{call_name(call)}"
        # Calling a random layer: `layers.RandomFlip()(x)`, `augment(x)` with `augment = Sequential([RandomFlip(), ...])`
        layer = call.func if isinstance(call.func, cst.Call) else ctx.flow.resolve_value(call.func, call)
        training = keyword_arg(call, "training")
        if isinstance(layer, cst.Call) and not (isinstance(training, cst.Name) and training.value == "False"):
            return self._random_layer(layer)
        return None

    def _random_layer(self, constructor: cst.Call) -> str | None:
        qualname = self.ctx.names.callee(constructor) or ""
        if _is_random_layer(qualname):
            return self.ctx.snippet(constructor.func)
        if qualname in _SEQUENTIAL:
            for node in walk(constructor):
                if isinstance(node, cst.Call) and _is_random_layer(self.ctx.names.callee(node) or ""):
                    return self.ctx.snippet(node.func)
        return None

    def stateful_call(self, call: cst.Call) -> str | None:
        """A call that makes a mapped function stateful (TF then runs the map sequentially):
        random ops, `tf.py_function`, `tf.numpy_function` (unless `stateful=False`), `tf.print`."""
        qualname = self.ctx.names.callee(call) or ""
        if qualname in _STATEFUL_CALLS:
            stateful = keyword_arg(call, "stateful")
            if qualname == "tensorflow.numpy_function" and isinstance(stateful, cst.Name) and stateful.value == "False":
                return None
            return self.ctx.snippet(call.func)
        return self.random_call(call)


def _ends_in_exit(block: cst.IndentedBlock) -> bool:
    """The block's last statement is a `return` or `raise`: nothing after the compound statement holding it runs."""
    last = block.body[-1] if block.body else None
    return isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[-1], (cst.Return, cst.Raise))


def _method(cls: cst.ClassDef, name: str) -> cst.FunctionDef | None:
    """The method `name` defined in a class's own body."""
    return next((s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == name), None)


def _is_random_layer(qualname: str) -> bool:
    parts = qualname.split(".")
    return parts[0] in ("keras", "keras_cv", "keras_hub") and "layers" in parts and bool(_RANDOM_LAYER.match(parts[-1]))


def _is_none(expr: cst.BaseExpression | None) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "None"


def _batch_size_given(call: cst.Call) -> bool:
    size = keyword_arg(call, "batch_size")
    return size is not None and not _is_none(size) and literal_int(size) != -1


def _mentions(call: cst.Call | None, words: tuple[str, ...]) -> bool:
    if call is None:
        return False
    return any(isinstance(n, cst.Name) and n.value in words for a in call.args for n in walk(a.value))


def _mentions_tf_data(ctx: FileContext, call: cst.Call) -> bool:
    """An argument names something of `tf.data` (`tf.data.AUTOTUNE`, `tf.data.experimental.…`)."""
    for arg in call.args:
        for node in walk(arg.value):
            if isinstance(node, (cst.Attribute, cst.Name)):
                qualname = ctx.names.qualname(node) or ""
                if qualname.startswith("tensorflow.data."):
                    return True
    return False


def literal_int(expr: cst.BaseExpression | None) -> int | None:
    """The value of an integer literal (`32`, `-1`), else None."""
    if isinstance(expr, cst.Integer):
        return int(expr.evaluated_value)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus) and isinstance(expr.expression, cst.Integer):
        return -int(expr.expression.evaluated_value)
    return None
