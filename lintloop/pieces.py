"""libcst's tree of a text its native parser would build in super-linear time and memory, built from
pieces of the text, each shallow and small, and joined into the tree one parse gives.

libcst's parser memoizes the result of a dozen expression rules at each position and keeps a copy of
the subtree each built until the parse ends: a subtree `d` levels deep is copied at each of its
levels, so nested brackets cost time and memory quadratic in their depth (a statement of 190 nested
lists: 0.15 s and 30 MB for 400 bytes; a 50 kB file of them, 26 s and 3.9 GB), and one parse of a
display of 100,000 elements on one line grows faster than its length. CPython's parser has neither
cost, and its tree says where each subexpression lies. So where the text is deep or wide (`screened`:
its brackets nest more than SCREEN_DEPTH levels, or it holds a very long line or many characters),
a subexpression nested MAX_DEPTH levels below its piece's root is cut out (a placeholder name takes
its place) and parsed alone, and a display or call of more than MAX_ELEMENTS elements (or
MAX_PIECE_CHARS characters) is cut into groups of them, each parsed alone; then the placeholders are
replaced by the trees of what they stand for, each keeping the parentheses around it. Only complete
subexpressions are cut, in brackets (where a placeholder parses as they do), never a starred
element, a slice or a bare tuple (whose trees differ from a name's): each piece parses alone as it
does in place, and the joined tree is the whole parse's (tests/test_pieces.py compares them).
"""

from __future__ import annotations

import ast
import bisect
import dataclasses
import itertools
import re
import warnings
from dataclasses import dataclass, field

import libcst as cst

MAX_DEPTH = 8  # expression levels below a piece's root: deeper subexpressions are pieces of their own
# ... unless they are shorter than this: a short one adds at most its length to its piece's depth, and
# cutting it would cost more than parsing it in place (real code nests 8 levels in short calls often).
MIN_CUT_CHARS = 64
MAX_ELEMENTS = 1_000  # elements of a display or call parsed in one piece
MAX_PIECE_CHARS = 32_768  # characters of a display or call parsed in one piece (where it has several elements)
# What sends a text to CPython's parser first: brackets nesting deeper (on the text alone, strings and
# comments included: a rough upper bound of the depth), a line or a text this long.
SCREEN_DEPTH = 24
SCREEN_LINE_CHARS = MAX_PIECE_CHARS
SCREEN_CHARS = 512 * 1024

_NOT_BRACKETS = re.compile(r"[^()\[\]{}]+")
_STEP = {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}
_SPACE = frozenset(" \t\f\r\n")
_MAX_SPACE = 64  # between parentheses: a longer run ends the search (its cost stays bounded)


def _parentheses(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """The spans of the grouping parentheses around text[start:end], innermost first: `(` before it and
    `)` after it, the `(` after no operand (`f(x)` is a call's)."""
    found: list[tuple[int, int]] = []
    while True:
        before, after = _back(text, start), _forward(text, end)
        if before < 0 or after < 0 or text[before] != "(" or text[after] != ")":
            return found
        previous = _back(text, before)
        if previous >= 0 and (text[previous].isalnum() or text[previous] in "_)]}'\"." or text[previous] > "\x7f"):
            return found
        start, end = before, after + 1
        found.append((start, end))


def _back(text: str, position: int) -> int:
    """The offset of the last character before `position` that is not white space (-1: none near)."""
    index = position - 1
    while index >= 0 and text[index] in _SPACE:
        index -= 1
        if position - index > _MAX_SPACE:
            return -1
    return index


def _forward(text: str, position: int) -> int:
    """The offset of the first character from `position` on that is not white space (-1: none near)."""
    index = position
    while index < len(text) and text[index] in _SPACE:
        index += 1
        if index - position > _MAX_SPACE:
            return -1
    return index if index < len(text) else -1


def _short(statement: ast.stmt, offsets: _Offsets) -> bool:
    """Whether a statement is too short to hold a piece: on one line, shorter than MIN_CUT_CHARS."""
    return statement.lineno == statement.end_lineno and statement.end_col_offset - statement.col_offset < MIN_CUT_CHARS


class _ParenthesizedTuple:
    """A tuple in parentheses of its own: cut and read as a display (a bare one's tree is no name's)."""


# Subexpressions a placeholder name may stand for: in brackets, a name parses where they do.
_CUTTABLE = frozenset({_ParenthesizedTuple, ast.List, ast.Set, ast.Dict, ast.ListComp, ast.SetComp, ast.DictComp,
                       ast.Call, ast.Subscript,
                       ast.Attribute, ast.BinOp, ast.BoolOp, ast.Compare, ast.UnaryOp, ast.IfExp, ast.Lambda,
                       ast.NamedExpr, ast.Await})
# Nodes whose children (but a call's function and a subscript's value) are in brackets.
_BRACKETING = frozenset({_ParenthesizedTuple, ast.List, ast.Set, ast.Dict, ast.ListComp, ast.SetComp, ast.DictComp,
                         ast.GeneratorExp, ast.Call, ast.Subscript, ast.JoinedStr, ast.FormattedValue})
_GROUP_BRACKETS = {"list": ("[", "]"), "dict": ("{", "}"), "call": ("_(", ")")}
_PARSE_FAILURES = (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError)


def screened(text: str, lines: list[str]) -> bool:
    """Whether `text` (whose lines are `lines`) may be deep or wide enough to be parsed in pieces."""
    if len(text) > SCREEN_CHARS or max(map(len, lines), default=0) > SCREEN_LINE_CHARS:
        return True
    if text.count("(") + text.count("[") + text.count("{") <= SCREEN_DEPTH:
        return False
    # The largest rise of the bracket count: closing brackets in strings and comments lower what follows.
    depths = list(itertools.accumulate(map(_STEP.__getitem__, _NOT_BRACKETS.sub("", text)), initial=0))
    lowest = itertools.accumulate(depths, min)
    return max(depth - low for depth, low in zip(depths, lowest)) > SCREEN_DEPTH


def parse_module(text: str, lines: list[str]) -> cst.Module:
    """libcst's tree of `text` (whose lines are `lines`), in pieces where it is deep or wide; raises
    ParserSyntaxError as `cst.parse_module` does."""
    if screened(text, lines):
        built = _in_pieces(text, lines)
        if built is not None:
            return built
    return cst.parse_module(text)


@dataclass
class _Piece:
    kind: str  # "module", "depth" (a subexpression), "list", "dict" or "call" (a group of elements)
    start: int
    end: int  # offsets in the text
    cuts: list[_Piece] = field(default_factory=list)
    name: str = ""  # its placeholder
    last: bool = False  # a group ending its display (no comma after it)
    statements: list[int] = field(default_factory=list)  # a module's: where each line of statements starts

    def cut(self, kind: str, start: int, end: int, last: bool = False) -> _Piece:
        piece = _Piece(kind, start, end, last=last)
        self.cuts.append(piece)
        return piece


class _Offsets:
    """Offsets in a text of CPython's positions (a line, and a column in UTF-8 bytes)."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.starts = list(itertools.accumulate(map(len, lines), initial=0))
        self.characters: dict[int, list[int]] = {}  # a non-ASCII line: the character of each byte

    def __call__(self, line: int, column: int) -> int:
        text = self.lines[line - 1]
        if text.isascii():
            return self.starts[line - 1] + column
        characters = self.characters.get(line)
        if characters is None:
            characters = self.characters[line] = [index for index, char in enumerate(text)
                                                  for _ in range(len(char.encode("utf-8", "surrogatepass")))]
            characters.append(len(text))
        return self.starts[line - 1] + characters[column]

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self(node.lineno, node.col_offset), self(node.end_lineno, node.end_col_offset)


class _Mismatch(Exception):
    """A piece did not parse into what it stands for: the text is parsed whole."""


def _in_pieces(text: str, lines: list[str]) -> cst.Module | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text)
    except _PARSE_FAILURES:
        return None  # newer syntax than this host reads, or an error: libcst parses it whole
    root = _plan(tree, text, _Offsets(lines))
    if not root.cuts:
        return None
    prefix = "_lintloop_piece"
    while prefix in text:
        prefix += "_"
    names = itertools.count()
    try:
        return _built(root, text, lambda: f"{prefix}{next(names)}")
    except (_Mismatch, cst.ParserSyntaxError, RecursionError):
        return None  # a piece that does not parse alone as it does in place, or a tree too deep to walk here


def _plan(tree: ast.Module, text: str, offsets: _Offsets) -> _Piece:
    """The pieces: every subexpression in brackets MAX_DEPTH levels below its piece's root (a piece of
    its own, whose root it is), and the groups of each wide display or call."""
    root = _Piece("module", 0, offsets.starts[-1])
    last_line = 0  # libcst's module holds a line of statements (`a = 1; b = 2`) as one: where each starts
    for statement in tree.body:
        first = min([statement.lineno, *(d.lineno for d in getattr(statement, "decorator_list", ()))])
        if first > last_line:
            root.statements.append(offsets.starts[first - 1])
        last_line = max(last_line, statement.end_lineno)
    # (node, expression levels below its piece's root, in brackets, its piece)
    stack: list[tuple[ast.AST, int, bool, _Piece]] = [(node, 0, False, root) for node in reversed(tree.body)]
    while stack:
        node, depth, bracketed, owner = stack.pop()
        kind = type(node)
        if isinstance(node, ast.pattern):
            continue  # a match statement's pattern: no expression of it is cut
        if isinstance(node, ast.stmt) and _short(node, offsets):
            continue  # no piece fits in it (many short statements on one long line: none is walked)
        if kind is ast.Tuple and _parenthesized(node, text, offsets):
            kind = _ParenthesizedTuple
        if isinstance(node, ast.expr):
            start, end = offsets.span(node)
            parentheses = _parentheses(text, start, end)
            if end - start < MIN_CUT_CHARS and len(parentheses) < MAX_DEPTH:
                continue  # nor in it
            if len(parentheses) >= MAX_DEPTH:  # `((((x))))`: every MAX_DEPTH of them a piece
                for level in range(len(parentheses) // MAX_DEPTH * MAX_DEPTH, 0, -MAX_DEPTH):
                    owner = owner.cut("depth", *parentheses[level - 1])
                depth, bracketed = 0, True
            elif bracketed and depth >= MAX_DEPTH and kind in _CUTTABLE and end - start >= MIN_CUT_CHARS:
                owner, depth = owner.cut("depth", start, end), 0
            depth += len(parentheses) % MAX_DEPTH
            groups = _groups(node, offsets)
            if groups is not None:
                group_kind, spans = groups
                for number, (start, end, elements) in enumerate(spans):
                    group = owner.cut(group_kind, start, end, last=number == len(spans) - 1)
                    stack.extend((element, 1, True, group) for element in reversed(elements))
                if kind is ast.Call:
                    stack.append((node.func, depth + 1, bracketed, owner))
                continue
            depth += 1
        inside = bracketed or kind in _BRACKETING
        for child in reversed(list(ast.iter_child_nodes(node))):
            outside = (kind is ast.Call and child is node.func) or (kind is ast.Subscript and child is node.value)
            stack.append((child, depth, bracketed if outside else inside, owner))
    return root


def _parenthesized(node: ast.Tuple, text: str, offsets: _Offsets) -> bool:
    """Whether the tuple's text opens and closes with its own parentheses (`(a), (b)` seems to: its
    piece then does not parse as one, and the text is parsed whole)."""
    start, end = offsets.span(node)
    return text.startswith("(", start) and text.endswith(")", 0, end) and bool(node.elts) and \
        offsets.span(node.elts[0])[0] > start


def _groups(node: ast.expr, offsets: _Offsets) -> tuple[str, list[tuple[int, int, list[ast.AST]]]] | None:
    """A wide display's or call's groups of elements: (their kind, [(start, end, the elements' nodes)]),
    each group but the last running to the next one's first element (its commas and comments); None
    for a narrow one, or one that is not split (a bare tuple, a dict starting with `**`)."""
    kind = type(node)
    if kind is ast.List or kind is ast.Set:
        items = [(element, [element]) for element in node.elts]
        group_kind = "list"
    elif kind is ast.Dict:
        # `**m`: no key, no split before it
        items = [(key, [key, value] if key is not None else [value]) for key, value in zip(node.keys, node.values)]
        group_kind = "dict"
    elif kind is ast.Call:
        arguments = sorted([*node.args, *node.keywords], key=lambda a: (a.lineno, a.col_offset))
        items = [(argument, [argument]) for argument in arguments]
        group_kind = "call"
    else:
        return None
    if len(items) < 2 or items[0][0] is None:
        return None
    node_start, node_end = offsets.span(node)
    if len(items) <= MAX_ELEMENTS and node_end - node_start <= MAX_PIECE_CHARS:
        return None
    groups: list[tuple[int, int, list[ast.AST]]] = []
    current: list[ast.AST] = []
    current_start = offsets.span(items[0][0])[0]
    count = 0
    for head, nodes in items:
        start = offsets.span(head)[0] if head is not None else None
        if count and start is not None and (count >= MAX_ELEMENTS or start - current_start >= MAX_PIECE_CHARS):
            groups.append((current_start, start, current))
            current, current_start, count = [], start, 0
        current.extend(nodes)
        count += 1
    groups.append((current_start, offsets.span(items[-1][1][-1])[1], current))
    return (group_kind, groups) if len(groups) > 1 else None


def _built(piece: _Piece, text: str, new_name) -> object:
    """The tree of `piece`: a module, an expression, or a group's elements (a list of nodes)."""
    parts, cursor, built = [], piece.start, {}
    for cut in sorted(piece.cuts, key=lambda c: c.start):
        cut.name = new_name()
        built[cut.name] = _built(cut, text, new_name)
        parts += [text[cursor:cut.start], _placeholder(cut)]
        cursor = cut.end
    parts.append(text[cursor:piece.end])
    own = "".join(parts)
    if piece.kind == "module":
        tree: cst.CSTNode = cst.parse_module(own)
    elif piece.kind == "depth":
        tree = cst.parse_expression(f"({own})")
        if not tree.lpar or not tree.rpar:
            raise _Mismatch(own)
        tree = tree.with_changes(lpar=tree.lpar[1:], rpar=tree.rpar[:-1])
        if isinstance(tree, cst.Tuple) and not tree.lpar:
            raise _Mismatch(own)  # `(a), (b)`: no tuple of its own parentheses
    else:
        opening, closing = _GROUP_BRACKETS[piece.kind]
        tree = cst.parse_expression(opening + own + closing)
    if built:
        graft = _Graft(built)
        if isinstance(tree, cst.Module) and len(tree.body) == len(piece.statements):
            # Only the statements holding a cut are walked (a module of 12,000 lines holding one wide
            # display: 7.3 s walking all of it, against 4.5 s for the whole parse).
            holding = {index for cut in piece.cuts
                       for index in [bisect.bisect_right(piece.statements, cut.start) - 1] if index >= 0}
            tree = tree.with_changes(body=[graft(statement) if index in holding else statement
                                           for index, statement in enumerate(tree.body)])
        else:
            tree = graft(tree)
        if graft.used != len(built):
            raise _Mismatch(own)
    if piece.kind in ("module", "depth"):
        return tree
    return _elements(piece, tree)


def _placeholder(piece: _Piece) -> str:
    if piece.kind == "depth":
        return piece.name
    element = f"{piece.name}: 0" if piece.kind == "dict" else piece.name
    return element if piece.last else element + ", "


def _elements(piece: _Piece, tree: cst.CSTNode) -> list[cst.CSTNode]:
    """A group's elements as they stand in the whole display: in a group the display goes on after, the
    line break and comments after its last comma are that comma's (here, the closing bracket's)."""
    expected = cst.Call if piece.kind == "call" else cst.Dict if piece.kind == "dict" else cst.List
    if not isinstance(tree, expected):
        raise _Mismatch(piece.kind)
    elements = list(tree.args if isinstance(tree, cst.Call) else tree.elements)
    comma = elements[-1].comma
    if piece.last:
        if isinstance(comma, cst.Comma):
            raise _Mismatch(piece.kind)
    elif not isinstance(comma, cst.Comma):
        raise _Mismatch(piece.kind)
    elif not isinstance(tree, cst.Call):
        closing = tree.rbrace if isinstance(tree, cst.Dict) else tree.rbracket
        elements[-1] = elements[-1].with_changes(comma=comma.with_changes(whitespace_after=closing.whitespace_before))
    return elements


class _Graft:
    """Each placeholder replaced by the tree it stands for: a subexpression (with the parentheses
    around the placeholder), or a group's elements (the last with the placeholder's comma). A walk of
    the dataclass fields, not libcst's visitor (which cost 60 % of a deep text's time in pieces)."""

    def __init__(self, built: dict[str, object]) -> None:
        self.built = built
        self.used = 0

    def __call__(self, node: cst.CSTNode) -> cst.CSTNode:
        kind = type(node)
        if kind is cst.Name:
            found = self.built.get(node.value)
            if not isinstance(found, cst.BaseExpression):
                return node
            self.used += 1
            return found.with_changes(lpar=[*node.lpar, *found.lpar], rpar=[*found.rpar, *node.rpar])
        changes = {}
        for name in _node_fields(kind):
            value = getattr(node, name)
            if isinstance(value, cst.CSTNode):
                new = self(value)
                if new is not value:
                    changes[name] = new
            elif type(value) in (tuple, list) and value:
                items = self._items(value)
                if items is not None:
                    changes[name] = items
        return node.with_changes(**changes) if changes else node

    def _items(self, values: tuple | list) -> list | None:
        """The sequence with its placeholders replaced (a group's elements spliced in); None: unchanged."""
        out: list = []
        changed = False
        for value in values:
            if not isinstance(value, cst.CSTNode):
                return None
            group = self._group(value)
            if group is None:
                new = self(value)
                changed = changed or new is not value
                out.append(new)
                continue
            changed = True
            self.used += 1
            group = list(group)
            if not isinstance(group[-1].comma, cst.Comma):  # the display's last group: the placeholder's comma ends it
                changes = {"comma": value.comma}
                if isinstance(value, cst.Arg):
                    changes["whitespace_after_arg"] = value.whitespace_after_arg
                group[-1] = group[-1].with_changes(**changes)
            out += group
        return out if changed else None

    def _group(self, element: cst.CSTNode) -> list | None:
        """The elements a group's placeholder element stands for, if it is one."""
        if not isinstance(element, (cst.Element, cst.DictElement, cst.Arg)):
            return None
        placeholder = element.key if isinstance(element, cst.DictElement) else element.value
        group = self.built.get(placeholder.value) if type(placeholder) is cst.Name else None
        return group if isinstance(group, list) else None


_FIELDS: dict[type, tuple[str, ...]] = {}


def _node_fields(kind: type) -> tuple[str, ...]:
    names = _FIELDS.get(kind)
    if names is None:
        names = _FIELDS[kind] = tuple(field.name for field in dataclasses.fields(kind))
    return names
