"""Source ranges of the nodes a finding names, computed only for the statements that hold them.

libcst's PositionProvider regenerates the code of the whole tree it is given, recording every node's
range (seconds for a large module). Instead each statement holding a wanted node is located alone: a
top-level statement in a module of its own, or, in a class, the one member statement (a method, an
assignment) inside its class header. Each is then shifted by its first line in the file, which
CPython's tree gives cheaply (or for a selection, the outline of it that `selection_outline` gives).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Sequence

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

Parent = Callable[[cst.CSTNode], "cst.CSTNode | None"]


def node_positions(module: cst.Module, text: str, tree: ast.Module | None, parent_of: Parent,
                   nodes: Iterable[cst.CSTNode]) -> dict[cst.CSTNode, CodeRange]:
    """The ranges of `nodes` in `module`, parsed from `text`; `tree`: CPython's tree of `text` or its
    outline, where parsed already; `parent_of`: each node's parent in `module`."""
    if tree is None:
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return _all_positions(module)
    tops = _tree_statements(module.body, tree.body)
    if tops is None:
        return _all_positions(module)
    held: dict[tuple[cst.CSTNode, cst.CSTNode | None], list[cst.CSTNode]] = {}
    for node in nodes:
        path = _path_to_module(node, parent_of)
        if path is None:  # a module-level node outside any statement
            return _all_positions(module)
        held.setdefault((path[0], _class_member(path)), []).append(node)
    result: dict[cst.CSTNode, CodeRange] = {}
    members: dict[cst.CSTNode, dict[cst.CSTNode, ast.stmt] | None] = {}
    for (top, member), wanted in held.items():
        if member is not None:
            assert isinstance(top, cst.ClassDef) and isinstance(top.body, cst.IndentedBlock)
            if top not in members:
                members[top] = _tree_statements(top.body.body, getattr(tops[top], "body", None) or [])
            in_tree = members[top]
            if in_tree is not None:
                alone = top.with_changes(body=top.body.with_changes(body=[member]))
                result.update(_located(module.with_changes(body=[alone], header=(), footer=()), member,
                                       in_tree[member].lineno, wanted))
                continue
        result.update(_located(module.with_changes(body=[top], header=(), footer=()), top, tops[top].lineno, wanted))
    return result


def _all_positions(module: cst.Module) -> dict[cst.CSTNode, CodeRange]:
    return dict(MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider))


def _located(alone: cst.Module, anchor: cst.CSTNode, line: int, nodes: list[cst.CSTNode]) -> dict[cst.CSTNode, CodeRange]:
    """The ranges of `nodes` in `alone`, shifted so that `anchor` starts on `line`."""
    local = MetadataWrapper(alone, unsafe_skip_copy=True).resolve(PositionProvider)
    shift = line - local[anchor].start.line
    return {node: CodeRange((local[node].start.line + shift, local[node].start.column),
                            (local[node].end.line + shift, local[node].end.column)) for node in nodes}


def _path_to_module(node: cst.CSTNode, parent_of: Parent) -> list[cst.CSTNode] | None:
    """`node`'s ancestors from its top-level statement down, `node` last; None outside any statement."""
    path = [node]
    parent = parent_of(node)
    while parent is not None and not isinstance(parent, cst.Module):
        path.append(parent)
        parent = parent_of(parent)
    return path[::-1] if isinstance(parent, cst.Module) else None


def _class_member(path: list[cst.CSTNode]) -> cst.CSTNode | None:
    """The statement of a top-level class's body that holds the last node of `path` (a top-level
    statement first); None outside such a class's body (its header, its decorators)."""
    top = path[0]
    if isinstance(top, cst.ClassDef) and len(path) > 2 and path[1] is top.body and isinstance(path[2], cst.BaseStatement):
        return path[2]
    return None  # (or the whitespace after the class's colon, or blank lines after its last member)


def _tree_statements(statements: Sequence[cst.BaseStatement],
                     tree_statements: Sequence[ast.stmt]) -> dict[cst.CSTNode, ast.stmt] | None:
    """Each libcst statement's first CPython statement, of the same code (`a = 1; b = 2` is one line of
    libcst's and two statements of CPython's): its `lineno` is where the libcst statement starts (a
    decorated definition's `def` or `class` line, as in libcst's ranges); None where they do not pair up."""
    paired: dict[cst.CSTNode, ast.stmt] = {}
    index = 0
    for statement in statements:
        if index >= len(tree_statements):
            return None
        paired[statement] = tree_statements[index]
        index += len(statement.body) if isinstance(statement, cst.SimpleStatementLine) else 1
    return paired if index == len(tree_statements) else None
