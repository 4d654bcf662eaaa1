"""Per-file facts that rules ask about: names, scopes, contexts, data flow, training loops.

One pass over the CST (`_Indexer`) records parents, source order, imports and bindings;
every higher analysis is a cached property computed on first use, so a file pays only for
the questions its enabled rules ask.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from typing import Iterator

import libcst as cst

Scope = cst.Module | cst.FunctionDef

# Spellings of one API that rules should treat as one name.
_CANONICAL_PREFIXES = (
    ("tensorflow.python.keras.", "keras."),
    ("tensorflow.keras.", "keras."),
    ("tf_keras.", "keras."),
    ("keras.src.", "keras."),
    ("tensorflow.compat.v2.", "tensorflow."),
    ("tensorflow.losses.", "keras.losses."),
    ("tensorflow.metrics.", "keras.metrics."),
    ("tensorflow.optimizers.", "keras.optimizers."),
)
_CANONICAL_EXACT = {"tensorflow.keras": "keras", "tf_keras": "keras", "tensorflow.python.keras": "keras"}

FRAMEWORK_ROOTS = {
    "tf": ("tensorflow", "keras", "tf_keras"),
    "pt": ("torch",),
    "jax": ("jax", "flax", "optax"),
}


def canonical(qualname: str) -> str:
    if qualname in _CANONICAL_EXACT:
        return _CANONICAL_EXACT[qualname]
    for prefix, replacement in _CANONICAL_PREFIXES:
        if qualname.startswith(prefix):
            return replacement + qualname[len(prefix):]
    return qualname


@dataclass(frozen=True)
class Binding:
    """`name` bound at source position `order` to `value` (None when not an expression we can follow)."""

    name: str
    order: int
    value: cst.BaseExpression | None
    node: cst.CSTNode
    augmented: bool = False


@dataclass(frozen=True)
class WithContext:
    kind: str  # "tape" | "strategy_scope" | "no_grad"
    block: cst.With
    item: cst.WithItem
    alias: str | None


def dotted(expr: cst.BaseExpression) -> str | None:
    """`a.b.c` for a Name/Attribute chain, else None."""
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        base = dotted(expr.value)
        return f"{base}.{expr.attr.value}" if base else None
    return None


def call_name(call: cst.Call) -> str | None:
    """The called attribute or function's last name: `x.numpy()` -> 'numpy', `f(x)` -> 'f'."""
    if isinstance(call.func, cst.Attribute):
        return call.func.attr.value
    if isinstance(call.func, cst.Name):
        return call.func.value
    return None


def receiver(call: cst.Call) -> cst.BaseExpression | None:
    return call.func.value if isinstance(call.func, cst.Attribute) else None


def positional_args(call: cst.Call) -> list[cst.BaseExpression]:
    return [a.value for a in call.args if a.keyword is None and not a.star]


def keyword_arg(call: cst.Call, name: str) -> cst.BaseExpression | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg.value
    return None


def argument(call: cst.Call, position: int, name: str) -> cst.BaseExpression | None:
    """The argument passed at `position` or as keyword `name`."""
    value = keyword_arg(call, name)
    if value is not None:
        return value
    positional = positional_args(call)
    return positional[position] if position < len(positional) else None


def names_in(expr: cst.CSTNode) -> set[str]:
    """Names read by an expression (not attribute names, not keyword names, not inside lambdas)."""
    found: set[str] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Name):
            found.add(node.value)
        elif isinstance(node, (cst.Attribute, cst.Arg)):
            stack.append(node.value)
        elif not isinstance(node, cst.Lambda):
            stack.extend(children(node))
    return found


def calls_within(expr: cst.CSTNode) -> list[cst.Call]:
    return [node for node in walk(expr) if isinstance(node, cst.Call)]


# Fields that hold only layout (whitespace, commas, parentheses, operators): never walked.
_LAYOUT_SUBSTRINGS = ("whitespace", "lpar", "rpar", "leading_lines", "lines_after_decorators")
_LAYOUT_FIELDS = {"comma", "semicolon", "header", "footer", "newline", "dot", "equal", "colon", "operator",
                  "asynchronous", "lbracket", "rbracket", "lbrace", "rbrace", "star", "relative"}
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The syntactic children of a node in field order, without layout nodes.

    Reading dataclass fields directly is an order of magnitude faster than libcst's visitor,
    which rebuilds every node it visits.
    """
    fields = _CHILD_FIELDS.get(type(node))
    if fields is None:
        fields = tuple(f.name for f in dataclasses.fields(node)
                       if f.name not in _LAYOUT_FIELDS and not any(w in f.name for w in _LAYOUT_SUBSTRINGS))
        _CHILD_FIELDS[type(node)] = fields
    result: list[cst.CSTNode] = []
    for name in fields:
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            result.append(value)
        elif isinstance(value, (tuple, list)):
            result.extend(v for v in value if isinstance(v, cst.CSTNode))
    return result


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Pre-order traversal (iterative: deeply nested expressions do not hit the recursion limit)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(children(current)))


def is_loss_function(name: str) -> bool:
    """`keras.losses.mse`, `keras.losses.MSE` (aliases) are functions; `MeanSquaredError` is a class."""
    return name[:1].islower() or name.isupper()


def dotted_names_in(node: cst.CSTNode) -> set[str]:
    """Names and `a.b` attribute chains read in `node` (`self.model` as well as `self`)."""
    return names_in(node) | {d for n in walk(node) if isinstance(n, cst.Attribute) and (d := dotted(n))}


def string_value(expr: cst.BaseExpression | None) -> str | None:
    if isinstance(expr, cst.SimpleString):
        return expr.evaluated_value if isinstance(expr.evaluated_value, str) else None
    return None


class _Indexer:
    """The one walk over a file: parents, preorder position, nodes by type, imports, bindings."""

    def __init__(self, module: cst.Module) -> None:
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        self.order: dict[cst.CSTNode, int] = {}
        self.by_type: dict[type, list[cst.CSTNode]] = defaultdict(list)
        self.imports: dict[str, str] = {}
        self.bound_names: set[str] = set()
        self.bindings: dict[Scope, dict[str, list[Binding]]] = defaultdict(lambda: defaultdict(list))
        self._scope: Scope = module
        stack: list[tuple[cst.CSTNode, cst.CSTNode | None, Scope]] = [(module, None, module)]
        while stack:
            node, parent, scope = stack.pop()
            if parent is not None:
                self.parents[node] = parent
            self.order[node] = len(self.order)
            self.by_type[type(node)].append(node)
            self._scope = scope
            handler = getattr(self, f"_index_{type(node).__name__}", None)
            if handler is not None:
                handler(node)
            inner = node if isinstance(node, cst.FunctionDef) else scope
            stack.extend((child, node, inner) for child in reversed(children(node)))

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression | None, node: cst.CSTNode,
              augmented: bool = False) -> None:
        if isinstance(target, cst.Name):
            self.bound_names.add(target.value)
            scope = self._scope
            self.bindings[scope][target.value].append(
                Binding(target.value, self.order[node], value, node, augmented))
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._bind(element.value, None, node)
        elif isinstance(target, cst.StarredElement):
            self._bind(target.value, None, node)
        elif isinstance(target, cst.Attribute) and dotted(target):
            scope = self._scope
            name = dotted(target)
            self.bindings[scope][name].append(Binding(name, self.order[node], value, node, augmented))

    def _index_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = dotted(alias.name)
            if not full:
                continue
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self.imports[alias.asname.name.value] = full
            else:
                head = full.split(".")[0]
                self.imports[head] = head

    def _index_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            return
        module = dotted(node.module)
        for alias in node.names:
            name = dotted(alias.name)
            if not module or not name:
                continue
            local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else name
            self.imports[local] = f"{module}.{name}"

    def _index_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind(target.target, node.value, node)

    def _index_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bind(node.target, node.value, node)

    def _index_AugAssign(self, node: cst.AugAssign) -> None:
        self._bind(node.target, node.value, node, augmented=True)

    def _index_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bind(node.target, node.value, node)

    def _index_For(self, node: cst.For) -> None:
        self._bind(node.target, None, node)

    def _index_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._bind(node.asname.name, node.item, node)

    def _index_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.bound_names.add(node.name.value)
        self.bindings[self._scope][node.name.value].append(
            Binding(node.name.value, self.order[node], None, node))

    def _index_ClassDef(self, node: cst.ClassDef) -> None:
        self.bound_names.add(node.name.value)

    def _index_Param(self, node: cst.Param) -> None:
        self._bind(node.name, None, node)


class FileContext:
    """Everything rules may ask about one parsed file."""

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        index = _Indexer(module)
        self.parents = index.parents
        self.order = index.order
        self.by_type = index.by_type
        self.imports = index.imports
        self.bound_names = index.bound_names
        self.bindings = index.bindings

    # ----- names -------------------------------------------------------------------------
    def qualname(self, expr: cst.BaseExpression) -> str | None:
        """Fully qualified, canonical name of an imported thing however it is spelled."""
        raw = self.raw_qualname(expr)
        return canonical(raw) if raw else None

    def snippet(self, node: cst.CSTNode, limit: int = 60) -> str:
        """`node`'s code on one line, for messages: whitespace collapsed, shortened past `limit`."""
        text = " ".join(self.module.code_for_node(node).split())
        return text if len(text) <= limit else text[: limit - 1] + "…"

    def raw_qualname(self, expr: cst.BaseExpression) -> str | None:
        """Like `qualname`, without merging spellings (`tf_keras.X` stays `tf_keras.X`)."""
        head = expr
        while isinstance(head, cst.Attribute):
            head = head.value
        if not isinstance(head, cst.Name) or head.value not in self.imports:
            return None
        path = dotted(expr)
        return self.imports[head.value] + path[len(head.value):] if path else None

    def callee(self, call: cst.Call) -> str | None:
        return self.qualname(call.func)

    def is_builtin(self, expr: cst.BaseExpression, name: str) -> bool:
        """`expr` is the builtin `name`, not rebound anywhere in the file."""
        return (isinstance(expr, cst.Name) and expr.value == name
                and name not in self.bound_names and name not in self.imports)

    def uses_framework(self, framework: str) -> bool:
        roots = FRAMEWORK_ROOTS[framework]
        return any(q.split(".")[0] in roots for q in self.imports.values())

    def keras_major(self, constructor: cst.Call) -> int:
        """2 for a Keras object built from `tf_keras`, or from `tf.keras` in a file that sets
        TF_USE_LEGACY_KERAS (tf.keras is then Keras 2); else 3 (TF 2.16+)."""
        raw = self.raw_qualname(constructor.func) or ""
        if raw.startswith("tf_keras."):
            return 2
        if raw.startswith("tensorflow.") and self._sets_legacy_keras:
            return 2
        return 3

    @cached_property
    def _sets_legacy_keras(self) -> bool:
        return any(string_value(s) == "TF_USE_LEGACY_KERAS" for s in self.nodes(cst.SimpleString))

    # ----- tree --------------------------------------------------------------------------
    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        parent = self.parents.get(node)
        while parent is not None:
            yield parent
            parent = self.parents.get(parent)

    def is_inside(self, node: cst.CSTNode, container: cst.CSTNode) -> bool:
        return node is container or any(a is container for a in self.ancestors(node))

    def nodes(self, node_type: type) -> list:
        return self.by_type.get(node_type, [])

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

    # ----- bindings and data flow ---------------------------------------------------------
    def bindings_of(self, name: str, at: cst.CSTNode, before: bool = True) -> list[Binding]:
        """Bindings of `name` visible from `at`: innermost scope that binds it; earlier ones if `before`."""
        scopes = self.enclosing_scopes(at)
        for scope in scopes:
            found = self.bindings.get(scope, {}).get(name)
            if found:
                if scope is not scopes[0] or not before:
                    return list(found)
                # `y = f(y)`: while evaluating the right side, the new `y` is not bound yet.
                return [b for b in found if b.order < self.order[at]
                        and not (b.value is not None and self.is_inside(at, b.value))]
        return []

    def last_binding(self, name: str, at: cst.CSTNode) -> Binding | None:
        found = self.bindings_of(name, at)
        return max(found, key=lambda b: b.order) if found else None

    def feeding_bindings(self, expr: cst.CSTNode, at: cst.CSTNode | None = None) -> list[Binding]:
        """Every binding whose value can reach `expr` through assignments before `at` (default: expr)."""
        at = at if at is not None else expr
        seen: set[str] = set()
        result: list[Binding] = []
        work = list(names_in(expr))
        while work:
            name = work.pop()
            if name in seen:
                continue
            seen.add(name)
            for binding in self.bindings_of(name, at):
                result.append(binding)
                if binding.value is not None:
                    work.extend(names_in(binding.value))
                if binding.augmented:
                    work.append(name)
        return result

    def flows_into(self, node: cst.CSTNode, target: cst.BaseExpression, at: cst.CSTNode | None = None) -> bool:
        """Does the value computed at `node` reach `target` (directly or through earlier assignments)?"""
        if self.is_inside(node, target):
            return True
        return any(b.value is not None and self.is_inside(node, b.value)
                   for b in self.feeding_bindings(target, at))

    def resolve_value(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None) -> cst.BaseExpression:
        """Follow a plain name to the value of its last assignment before `at` (one hop at a time)."""
        at = at if at is not None else expr
        for _ in range(8):
            if isinstance(expr, cst.Attribute) and (dotted(expr) or "").startswith("self."):
                return self._attribute_value(dotted(expr)) or expr
            if not isinstance(expr, cst.Name):
                return expr
            binding = self.last_binding(expr.value, at)
            if binding is None or binding.value is None or binding.augmented:
                return expr
            at, expr = binding.node, binding.value
        return expr

    def _attribute_value(self, name: str) -> cst.BaseExpression | None:
        """The value assigned to `self.x` in this file, when every assignment agrees on what it calls."""
        values = [b.value for bindings in self.bindings.values() for b in bindings.get(name, ())
                  if b.value is not None]
        callees = {self.callee(v) if isinstance(v, cst.Call) else None for v in values}
        return values[0] if len(callees) == 1 and None not in callees else None

    def constructed_by(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None) -> tuple[cst.Call, str] | None:
        """(call, qualified callee) when `expr` is, or names, the result of calling an imported thing."""
        value = self.resolve_value(expr, at)
        if isinstance(value, cst.Call):
            name = self.callee(value)
            if name:
                return value, name
        return None

    # ----- functions and calls ------------------------------------------------------------
    @cached_property
    def functions(self) -> dict[str, list[cst.FunctionDef]]:
        table: dict[str, list[cst.FunctionDef]] = defaultdict(list)
        for fn in self.nodes(cst.FunctionDef):
            table[fn.name.value].append(fn)
        return table

    def local_class(self, expr: cst.BaseExpression) -> cst.ClassDef | None:
        """The class defined in this file that a plain name refers to."""
        if isinstance(expr, cst.Name):
            return next((c for c in self.nodes(cst.ClassDef) if c.name.value == expr.value), None)
        return None

    def local_functions(self, expr: cst.BaseExpression) -> list[cst.FunctionDef]:
        """Functions defined in this file that `expr` (`f`, `self.f`, `tf.function(f)`) refers to."""
        if isinstance(expr, cst.Call) and self.callee(expr) == "tensorflow.function":
            inner = argument(expr, 0, "func")
            return self.local_functions(inner) if inner is not None else []
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self":
            return self.functions.get(expr.attr.value, [])
        if isinstance(expr, cst.Name):
            defined = self.functions.get(expr.value, [])
            if defined:
                return defined
            value = self.resolve_value(expr)
            if value is not expr:
                return self.local_functions(value)
        return []

    def calls_in(self, node: cst.CSTNode, into_nested_defs: bool = False) -> Iterator[cst.Call]:
        for call in self._calls_by_container.get(node, ()):
            if into_nested_defs or not any(
                isinstance(a, (cst.FunctionDef, cst.Lambda)) and a is not node
                for a in self._ancestors_until(call, node)
            ):
                yield call

    def _ancestors_until(self, node: cst.CSTNode, stop: cst.CSTNode) -> Iterator[cst.CSTNode]:
        for ancestor in self.ancestors(node):
            if ancestor is stop:
                return
            yield ancestor

    @cached_property
    def _calls_by_container(self) -> dict[cst.CSTNode, list[cst.Call]]:
        """For each loop, function and with-block: the calls inside it."""
        containers = (cst.For, cst.While, cst.FunctionDef, cst.With)
        table: dict[cst.CSTNode, list[cst.Call]] = defaultdict(list)
        for call in self.nodes(cst.Call):
            for ancestor in self.ancestors(call):
                if isinstance(ancestor, containers):
                    table[ancestor].append(call)
        return table

    def called_functions(self, node: cst.CSTNode) -> set[cst.FunctionDef]:
        """Same-file functions called (transitively) from `node`'s body."""
        found: set[cst.FunctionDef] = set()
        work = [node]
        while work:
            current = work.pop()
            for call in self.calls_in(current):
                for fn in self._call_targets(call):
                    if fn not in found:
                        found.add(fn)
                        work.append(fn)
        return found

    # ----- compiled functions ---------------------------------------------------------------
    @cached_property
    def compiled_functions(self) -> set[cst.FunctionDef]:
        """Functions that TensorFlow traces: `@tf.function` (any spelling) or wrapped by `tf.function(f)`."""
        compiled: set[cst.FunctionDef] = set()
        for fn in self.nodes(cst.FunctionDef):
            for decorator in fn.decorators:
                target = decorator.decorator
                if isinstance(target, cst.Call) and self.callee(target) == "functools.partial" and target.args:
                    target = target.args[0].value  # @functools.partial(tf.function, jit_compile=True)
                target = target.func if isinstance(target, cst.Call) else target
                if self.qualname(target) == "tensorflow.function":
                    compiled.add(fn)
        for call in self.nodes(cst.Call):
            if self.callee(call) == "tensorflow.function":
                compiled.update(self.local_functions(call))
        return compiled

    @cached_property
    def eager_callbacks(self) -> set[cst.FunctionDef]:
        """Functions handed to `tf.py_function` / `tf.numpy_function`: they run eagerly even in a graph."""
        eager: set[cst.FunctionDef] = set()
        for call in self.nodes(cst.Call):
            if self.callee(call) in ("tensorflow.py_function", "tensorflow.numpy_function",
                                     "tensorflow.compat.v1.py_func"):
                func = argument(call, 0, "func")
                if func is not None:
                    eager.update(self.local_functions(func))
        return eager

    def compiled_function_of(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        """The tf.function that traces `node`, if any (nested defs inside one are traced too)."""
        for ancestor in self.ancestors(node):
            if ancestor in self.eager_callbacks:
                return None
            if ancestor in self.compiled_functions:
                return ancestor
        return None

    # ----- with-contexts --------------------------------------------------------------------
    def _classify_with_item(self, item: cst.WithItem) -> str | None:
        expr = item.item
        if isinstance(expr, cst.Name):  # `tape = tf.GradientTape(); with tape:`
            made = self.constructed_by(expr, item)
            expr = made[0] if made else expr
        if not isinstance(expr, cst.Call):
            return None
        name = self.callee(expr)
        if name in ("tensorflow.GradientTape", "tensorflow.autodiff.GradientTape"):
            return "tape"
        if name in ("torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad"):
            return "no_grad"
        if call_name(expr) == "scope" and receiver(expr) is not None and self.is_strategy(receiver(expr), expr):
            return "strategy_scope"
        return None

    @cached_property
    def with_contexts(self) -> list[WithContext]:
        contexts = []
        for block in self.nodes(cst.With):
            for item in block.items:
                kind = self._classify_with_item(item)
                if kind:
                    alias = item.asname.name.value if item.asname and isinstance(item.asname.name, cst.Name) else (
                        item.item.value if isinstance(item.item, cst.Name) else None)
                    contexts.append(WithContext(kind, block, item, alias))
        return contexts

    @cached_property
    def _with_blocks(self) -> dict[str, dict[int, list[WithContext]]]:
        table: dict[str, dict[int, list[WithContext]]] = defaultdict(lambda: defaultdict(list))
        for context in self.with_contexts:
            table[context.kind][id(context.block)].append(context)
        return table

    def enclosing_contexts(self, node: cst.CSTNode, kind: str) -> list[WithContext]:
        """With-blocks of `kind` whose body lexically contains `node`, innermost first."""
        blocks = self._with_blocks[kind]
        result = []
        previous = node
        for ancestor in self.ancestors(node):
            if id(ancestor) in blocks and previous is ancestor.body:
                result.extend(blocks[id(ancestor)])
            previous = ancestor
        return result

    # ----- tapes and gradients ----------------------------------------------------------------
    def tape_of(self, name: str, at: cst.CSTNode) -> WithContext | None:
        """The `with tf.GradientTape() as name:` (or `with name:`) block that `name` refers to at `at`:
        the last one opened before `at` in the same function."""
        scope = self.scope_of(at)
        candidates = [c for c in self.with_contexts if c.kind == "tape" and c.alias == name
                      and self.scope_of(c.block) is scope and self.order[c.block] < self.order[at]]
        return max(candidates, key=lambda c: self.order[c.block]) if candidates else None

    @cached_property
    def gradient_calls(self) -> list[tuple[cst.Call, WithContext]]:
        """`tape.gradient(target, sources)` calls with the tape block they belong to."""
        found = []
        for call in self.nodes(cst.Call):
            tape_name = receiver(call)
            if call_name(call) == "gradient" and isinstance(tape_name, cst.Name):
                tape = self.tape_of(tape_name.value, call)
                if tape is not None:
                    found.append((call, tape))
        return found

    @cached_property
    def differentiated(self) -> list[tuple[cst.BaseExpression, cst.Call]]:
        """(expression, call) for every value that is differentiated: tape targets and backward()ed tensors."""
        found: list[tuple[cst.BaseExpression, cst.Call]] = []
        for call, _ in self.gradient_calls:
            target = argument(call, 0, "target")
            if target is not None:
                found.append((target, call))
        for call in self.nodes(cst.Call):
            if call_name(call) == "backward" and isinstance(call.func, cst.Attribute):
                found.append((call.func.value, call))
                found.extend((arg, call) for arg in positional_args(call)[:1])
            elif self.callee(call) in ("torch.autograd.backward", "torch.autograd.grad"):
                found.extend((arg, call) for arg in positional_args(call)[:1])
        return found

    def is_differentiated(self, node: cst.CSTNode, depth: int = 0) -> bool:
        """Does the value computed at `node` reach something that is differentiated — in the same
        function, or returned by its function to a caller in this file that differentiates it?"""
        scope = self.scope_of(node)
        if any(self.scope_of(call) is scope and self.flows_into(node, target, call)
               for target, call in self.differentiated):
            return True
        if depth >= 3 or not isinstance(scope, cst.FunctionDef):
            return False
        returned = any(r.value is not None and self.scope_of(r) is scope and self.flows_into(node, r.value, r)
                       for r in self.nodes(cst.Return))
        return returned and any(self.is_differentiated(call, depth + 1) for call in self.nodes(cst.Call)
                                if scope in self.local_functions(call.func))

    # ----- training loops -------------------------------------------------------------------------
    def _is_training_call(self, call: cst.Call) -> bool:
        name = call_name(call)
        if name in ("backward", "apply_gradients", "minimize"):
            return True
        if name == "gradient" and any(c is call for c, _ in self.gradient_calls):
            return True
        if name == "step":
            owner = receiver(call)
            label = (dotted(owner) or "").lower() if owner is not None else ""
            return "optim" in label or label.split(".")[-1] in ("opt", "optimizer") or "scaler" in label
        qualified = self.callee(call)
        return qualified in ("jax.grad", "jax.value_and_grad", "torch.autograd.grad")

    @cached_property
    def training_functions(self) -> set[cst.FunctionDef]:
        """Functions that compute gradients or step an optimizer, directly or through same-file calls."""
        result = {fn for fn in self.nodes(cst.FunctionDef)
                  if any(self._is_training_call(c) for c in self.calls_in(fn))}
        changed = True
        while changed:
            changed = False
            for fn in self.nodes(cst.FunctionDef):
                if fn not in result and any(
                    t in result for c in self.calls_in(fn) for t in self._call_targets(c)
                ):
                    result.add(fn)
                    changed = True
        return result

    def _call_targets(self, call: cst.Call) -> list[cst.FunctionDef]:
        """Same-file functions a call runs: the callee, and `fn` in `strategy.run(fn, ...)`."""
        targets = self.local_functions(call.func)
        if call_name(call) == "run" and positional_args(call):
            targets = targets + self.local_functions(positional_args(call)[0])
        return targets

    def is_training_loop(self, loop: cst.For | cst.While) -> bool:
        return any(
            self._is_training_call(call) or any(t in self.training_functions for t in self._call_targets(call))
            for call in self.calls_in(loop)
        )

    def innermost_loop(self, node: cst.CSTNode) -> cst.For | cst.While | None:
        """The loop whose body holds `node`, within the same function."""
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return None
            if isinstance(ancestor, (cst.For, cst.While)) and self.is_inside(node, ancestor.body):
                return ancestor
        return None

    # ----- distribution strategies -------------------------------------------------------------------
    def is_strategy(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        made = self.constructed_by(expr, at)
        if made is None:
            return False
        # Not `tf.distribute.get_strategy()`: outside a scope it is the default (no-op) strategy,
        # and inside one everything built in that dynamic extent is in scope anyway.
        return made[1].startswith("tensorflow.distribute.") and made[1].endswith("Strategy")

    @cached_property
    def strategy_runs(self) -> list[cst.Call]:
        """`strategy.run(fn, ...)` calls on a strategy built in this file."""
        return [call for call in self.nodes(cst.Call)
                if call_name(call) == "run" and receiver(call) is not None
                and self.is_strategy(receiver(call), call)]

    @cached_property
    def uses_strategy(self) -> bool:
        users = ("run", "experimental_distribute_dataset", "distribute_datasets_from_function")
        return any(call_name(c) in users and receiver(c) is not None and self.is_strategy(receiver(c), c)
                   for c in self.nodes(cst.Call))

    @cached_property
    def distributed_step_functions(self) -> set[cst.FunctionDef]:
        """Functions passed to `strategy.run` and the same-file functions they call."""
        steps: set[cst.FunctionDef] = set()
        for call in self.strategy_runs:
            fn_expr = argument(call, 0, "fn")
            for fn in self.local_functions(fn_expr) if fn_expr is not None else []:
                steps.add(fn)
                steps.update(self.called_functions(fn))
        return steps

    @cached_property
    def _scoped_functions(self) -> set[cst.FunctionDef]:
        """Functions every same-file call of which happens inside a strategy scope."""
        call_sites: dict[cst.FunctionDef, list[cst.Call]] = defaultdict(list)
        for call in self.nodes(cst.Call):
            for fn in self.local_functions(call.func):
                call_sites[fn].append(call)
        scoped: set[cst.FunctionDef] = set()
        changed = True
        while changed:
            changed = False
            for fn, sites in call_sites.items():
                if fn not in scoped and all(self._lexically_scoped(s, scoped) for s in sites):
                    scoped.add(fn)
                    changed = True
        return scoped

    def _lexically_scoped(self, node: cst.CSTNode, scoped_functions: set[cst.FunctionDef]) -> bool:
        if self.enclosing_contexts(node, "strategy_scope"):
            return True
        return any(a in scoped_functions for a in self.ancestors(node) if isinstance(a, cst.FunctionDef))

    def in_strategy_scope(self, node: cst.CSTNode) -> bool:
        """Inside `with strategy.scope():`, lexically or in a function only called from inside one."""
        return self._lexically_scoped(node, self._scoped_functions)

    # ----- losses -------------------------------------------------------------------------------------
    def loss_object(self, expr: cst.BaseExpression, at: cst.CSTNode) -> tuple[cst.Call, str] | None:
        """(constructor call, class) when `expr` holds a Keras loss object or a torch `nn.*Loss` instance."""
        made = self.constructed_by(expr, at)
        if made is None:
            return None
        last = made[1].rsplit(".", 1)[-1]
        if made[1].startswith("keras.losses.") and not is_loss_function(last) and last != "Reduction":
            return made
        if made[1].startswith("torch.nn.") and last.endswith("Loss"):
            return made
        return None

    def loss_prediction(self, call: cst.Call) -> tuple[cst.BaseExpression, str] | None:
        """For a call that computes a loss: (its prediction argument, 'tf' or 'pt')."""
        name = self.callee(call)
        if name is not None:
            last = name.rsplit(".", 1)[-1]
            if name.startswith("keras.losses.") and is_loss_function(last):
                arg = argument(call, 1, "y_pred")
                return (arg, "tf") if arg is not None else None
            if name in _TF_LOGITS_LOSSES:
                arg = argument(call, 1, "logits")
                return (arg, "tf") if arg is not None else None
            if name.startswith("torch.nn.functional.") and ("loss" in last or "entropy" in last or last == "kl_div"):
                arg = argument(call, 0, "input")
                return (arg, "pt") if arg is not None else None
            return None
        made = self.loss_object(call.func, call)
        if made is None:
            return None
        if made[1].startswith("keras."):
            arg = argument(call, 1, "y_pred")
            return (arg, "tf") if arg is not None else None
        arg = argument(call, 0, "input")
        return (arg, "pt") if arg is not None else None


_TF_LOGITS_LOSSES = {
    "tensorflow.nn.softmax_cross_entropy_with_logits",
    "tensorflow.nn.sparse_softmax_cross_entropy_with_logits",
    "tensorflow.nn.sigmoid_cross_entropy_with_logits",
}
