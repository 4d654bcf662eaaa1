"""The one walk over a file's CST: parents, source order, nodes by type, imports and bindings per scope."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Callable

import libcst as cst

from lintloop.analysis.nodes import children, dotted
from lintloop.frameworks import public_path

Scope = cst.Module | cst.FunctionDef


@dataclass(frozen=True)
class Binding:
    """`name` bound at source position `order` to `value` (None when not an expression we can follow)."""

    name: str
    order: int
    value: cst.BaseExpression | None
    node: cst.CSTNode
    augmented: bool = False


def _element_values(target: cst.Tuple | cst.List, value: cst.BaseExpression | None) -> list[cst.BaseExpression | None]:
    """What each element of an unpacking target is bound to: `a, b = x, y` element by element; an
    unpacked value (`a, b = pair`) or a starred element binds nothing we follow."""
    if isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(target.elements) and not any(
            isinstance(e, cst.StarredElement) for e in (*value.elements, *target.elements)):
        return [e.value for e in value.elements]
    return [None] * len(target.elements)


class TreeIndex:
    """Everything one pre-order walk records; the analyses are built on it."""

    def __init__(self, module: cst.Module) -> None:
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        self.order: dict[cst.CSTNode, int] = {}
        # The order of the last node of each node's subtree: a subtree is the range
        # order[node]..subtree_end[node], so "is X inside Y" and "the calls inside Y" need no walk.
        self.subtree_end: dict[cst.CSTNode, int] = {}
        self.by_type: dict[type, list[cst.CSTNode]] = defaultdict(list)
        self.imports: dict[str, str] = {}
        self.bound_names: set[str] = set()
        self.bindings: dict[Scope, dict[str, list[Binding]]] = defaultdict(lambda: defaultdict(list))
        self._scope: Scope = module
        parents, order, by_type = self.parents, self.order, self.by_type
        handlers: dict[type, Callable[[cst.CSTNode], None] | None] = {}  # per node type, looked up once
        stack: list[tuple[cst.CSTNode, cst.CSTNode | None, Scope]] = [(module, None, module)]
        while stack:
            node, parent, scope = stack.pop()
            kind = type(node)
            if parent is not None:
                parents[node] = parent
            order[node] = len(order)
            by_type[kind].append(node)
            if kind in handlers:
                handler = handlers[kind]
            else:
                handler = handlers[kind] = getattr(self, f"_index_{kind.__name__}", None)
            if handler is not None:
                self._scope = scope
                handler(node)
            inner = node if kind is cst.FunctionDef else scope
            stack.extend([(child, node, inner) for child in reversed(children(node))])
        ends, parents = self.subtree_end, self.parents
        for node, order in reversed(self.order.items()):  # children before their parent
            end = ends.setdefault(node, order)  # a leaf ends its own subtree
            parent = parents.get(node)
            if parent is not None and parent not in ends:  # its last child, seen first, ends the parent's
                ends[parent] = end

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression | None, node: cst.CSTNode,
              augmented: bool = False) -> None:
        if isinstance(target, cst.Name):
            self.bound_names.add(target.value)
            self.bindings[self._scope][target.value].append(
                Binding(target.value, self.order[node], value, node, augmented))
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element, element_value in zip(target.elements, _element_values(target, value)):
                self._bind(element.value, element_value, node)
        elif isinstance(target, cst.StarredElement):
            self._bind(target.value, None, node)
        elif isinstance(target, cst.Attribute) and dotted(target):
            name = dotted(target)
            self.bindings[self._scope][name].append(Binding(name, self.order[node], value, node, augmented))

    def _import(self, local: str, full: str, node: cst.Import | cst.ImportFrom) -> None:
        """Record `local` as `full`, unless `node` is the fallback of an import made already: under
        `except` (`try: from torch.amp import GradScaler` / `except ImportError: from torch.cuda.amp
        import GradScaler`), where the name means what the `try` imports wherever that exists."""
        if local in self.imports and self._in_except_handler(node):
            return
        self.imports[local] = public_path(full)

    def _in_except_handler(self, node: cst.CSTNode) -> bool:
        parent = self.parents.get(node)
        while parent is not None:
            if isinstance(parent, (cst.ExceptHandler, cst.ExceptStarHandler)):
                return True
            parent = self.parents.get(parent)
        return False

    def _index_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = dotted(alias.name)
            if not full:
                continue
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self._import(alias.asname.name.value, full, node)
            else:
                head = full.split(".")[0]
                self._import(head, head, node)

    def _index_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            return
        module = dotted(node.module)
        for alias in node.names:
            name = dotted(alias.name)
            if not module or not name:
                continue
            local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else name
            self._import(local, f"{module}.{name}", node)

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
