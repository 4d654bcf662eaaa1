"""A module text's syntax, decided once and the same on every supported Python, in linear time.

A text is a syntax error (LL001) where no CPython 3.10-3.13 compiles it. Where this interpreter's
parser reads it, its tree is kept for the screen, and its compiler decides the rest (compile-time
errors: lintloop.cpython_verdict). A text it rejects (a real error, a syntax newer than the host, or
nesting deeper than the host's parser takes) is measured by `lintloop.nesting`, whose verdicts do not
depend on the host: the limits of CPython's tokenizer and a depth no CPython compiles are LL001;
statements too deep to analyse are masked; then libcst's parser, which knows every grammar up to the
newest, reads it, and what CPython checks past libcst's grammar is checked as the newest CPython
checks it (lintloop.cpython_verdict). A text CPython parses is measured too, where it matters: where
this host's compiler stops at its own depth, its statements long enough to be that deep (LL001 where
no CPython compiles one; else left out of the compiler's check, which no host's limit may decide).

Where this host's parser is lenient (3.10/3.11 accept a line continuation into the end of the file
after CRLF, which 3.12+ and libcst refuse), its "valid" is not trusted: the text takes libcst's path,
libcst given the backslash as a space (`_as_libcst_reads`): some CPython compiles it.

libcst's tree for the analyses (`parse_cst`) is parsed in chunks where the text is long, the tree of
one parse either way: where the statements start comes from CPython's tree, or from the scanner.
"""

from __future__ import annotations

import ast
import bisect
import contextlib
import enum
import itertools
import re
import sys
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import libcst as cst

from lintloop import pieces
from lintloop.cpython_verdict import DEPTH_FAILURES, TOP_LEVEL_AWAIT, CPythonError, compile_error, error_past_grammar
from lintloop.finding import Finding, Fix, engine_finding
from lintloop.nesting import ANALYSIS_DEPTH, PARSER_STACK, Nesting, TooDeep, mask, scan
from lintloop.rules import BY_CODE
from lintloop.source import source_lines

_LENIENT_HOST = sys.version_info < (3, 12)
_HOST_FAILURES = (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError)


def host_verdict_holds(text: str) -> bool:
    """Whether this interpreter accepting `text` means libcst accepts it too."""
    return not (_LENIENT_HOST and "\\\r" in text)


class Checks(enum.Enum):
    """What of CPython's verdict a text gets: its compiler's too, as `python` compiles a file or IPython
    a notebook's cell (allowing `await` outside a function), or its grammar alone (a notebook's cells
    as one module, each cell checked by itself; a module with definitions of others brought in)."""

    FILE = enum.auto()
    CELL = enum.auto()
    GRAMMAR = enum.auto()

    @property
    def flags(self) -> int:
        """CPython's compile flags."""
        return TOP_LEVEL_AWAIT if self is Checks.CELL else 0 if self is Checks.FILE else ast.PyCF_ONLY_AST


def syntax_error(display: str, text: str, checks: Checks = Checks.FILE) -> Finding | None:
    """The text's LL001, if it has one (no tree is kept: where this host compiles the text, it has none)."""
    if host_verdict_holds(text):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                compile(text, "<lintloop>", "exec", flags=checks.flags, dont_inherit=True)
            return None
        except _HOST_FAILURES:
            pass
    return ModuleSyntax.read(display, text, checks).error


@dataclass
class ModuleSyntax:
    """A module text's syntax: its LL001 (if any), CPython's tree of it (where this host reads it), and
    the statements too deep to analyse, which `analysable` masks. `lines` are the text's as libcst is
    given them: `column_shifts` says how many characters of a line's indentation they left out."""

    display: str
    text: str
    error: Finding | None = None
    tree: ast.Module | None = None
    lines: list[str] = field(default_factory=list)
    column_shifts: dict[int, int] = field(default_factory=dict)
    nesting: Nesting | None = None  # the whole text measured (when CPython did not read it)
    deep: _Deep | None = None  # its statements measured (when this host's compiler stopped at its depth)

    @classmethod
    def read(cls, display: str, text: str, checks: Checks = Checks.FILE) -> ModuleSyntax:
        lines = source_lines(text)
        cst_lines, shifts = _as_libcst_reads(text, lines)
        syntax = cls(display, text, lines=cst_lines, column_shifts=shifts)
        if host_verdict_holds(text):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    syntax.tree = ast.parse(text)
            except _HOST_FAILURES:
                pass
        if syntax.tree is None:
            measured = _measured(display, text, syntax.lines, shifts, checks)
            syntax.error, syntax.nesting = measured.error, measured.nesting
            return syntax
        if checks is not Checks.GRAMMAR:
            syntax.error = syntax._compile_error(lines, checks.flags)
        return syntax

    def analysable(self, within: set[int] | None = None) -> tuple[str, list[tuple[int, int]]]:
        """The text with each statement too deep to analyse replaced by `pass` (lines kept), and the
        line ranges replaced; `within`: only statements starting on these lines matter."""
        if self.nesting is not None:
            ranges = self.nesting.masked_ranges()
        elif self.deep is not None:
            ranges = [(first, last) for first, last in self.deep.ranges
                      if within is None or any(line in within for line in range(first, last + 1))]
        else:
            ranges = self._deep_statements(within).ranges
        return (mask(self.lines, ranges) if ranges else "".join(self.lines)), ranges

    def _deep_statements(self, within: set[int] | None) -> _Deep:
        """The statements CPython parsed that are too deep to analyse (only statements of ANALYSIS_DEPTH
        characters can be that deep; `within`: only those starting on these lines), and the first that
        no CPython compiles (3.10's parser takes deeper chains than any compiler), if one is."""
        ranges: list[tuple[int, int]] = []
        too_deep: list[TooDeep] = []
        for first, last in self._long_statements(ANALYSIS_DEPTH, within):
            nesting = scan(self._text_of(first, last), first)
            ranges += nesting.masked_ranges()
            too_deep += filter(None, [nesting.too_deep()])
        return _Deep(_outermost(ranges), min(too_deep, default=None))

    def _compile_error(self, lines: list[str], flags: int) -> Finding | None:
        """The compile-time error CPython finds in the text. Where this host's compiler stops at its own
        depth, the scanner decides the statements too deep to analyse (LL001 where no CPython compiles
        one), and the rest is compiled without them (no host's limit decides a verdict)."""
        assert self.tree is not None
        try:
            error = compile_error(self.tree, lines, flags)
        except DEPTH_FAILURES:
            self.deep = deep = self._deep_statements(None)
            if deep.too_deep is not None:
                return _too_deep_finding(self.display, deep.too_deep)
            lines = source_lines(mask(lines, deep.ranges)) if deep.ranges else lines
            try:
                error = compile_error(ast.parse("".join(lines)), lines, flags)
            except (*DEPTH_FAILURES, SyntaxError, ValueError):
                return None
        return _cpython_finding(self.display, error, {}) if error is not None else None

    def _text_of(self, first: int, last: int) -> str:
        return "".join(self.lines[first - 1:last])

    def _long_statements(self, longer_than: int, within: set[int] | None) -> Iterator[tuple[int, int]]:
        """The logical lines (first and last line) of the statements and compound statements' headers
        that span more than `longer_than` characters (a statement nests at most as deep as it has
        characters); compound statements are entered only where they are that long. A header is read
        with whole compound statement: a deep header masks its statement whole. Statements within lines
        given already are not given again (10,000 statements on one 139 kB line: each was scanned whole)."""
        assert self.tree is not None
        offsets = self._offsets
        stack: list[tuple[ast.stmt, bool]] = [(node, False) for node in reversed(self.tree.body)]
        given_to = 0  # the last line given so far (statements come in the order of their lines)
        while stack:
            node, is_elif = stack.pop()
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
            if offsets[node.end_lineno] - offsets[first - 1] <= longer_than or node.end_lineno <= given_to:
                continue
            if within is not None and not any(line in within for line in range(first, node.end_lineno + 1)):
                continue
            children = _child_statements(node)
            if not children:
                given_to = node.end_lineno
                yield first, node.end_lineno
                continue
            header_end = max(node.lineno, children[0].lineno - 1)
            if offsets[header_end] - offsets[first - 1] > longer_than or (
                    not is_elif and _elif_chain(node) > longer_than):
                given_to = node.end_lineno
                yield first, node.end_lineno  # scanned whole: its header or its elifs decide for all of it
                continue
            elif_ = _elif_of(node)
            stack.extend((child, child is elif_) for child in reversed(children))

    @property
    def _offsets(self) -> list[int]:
        offsets = getattr(self, "_line_offsets", None)
        if offsets is None:
            offsets = self._line_offsets = list(itertools.accumulate(map(len, self.lines), initial=0))
        return offsets


@dataclass(frozen=True)
class _Deep:
    ranges: list[tuple[int, int]]  # the statements too deep to analyse (first and last line), outermost
    too_deep: TooDeep | None  # the first no CPython compiles


# A line whose indentation holds a form feed before its first token (not a blank or comment line).
_FORM_FEED_INDENTATION = re.compile(r"(?:^|[\r\n])[ \t\f]*\f[ \t\f]*[^ \t\f\r\n#]")


def _as_libcst_reads(text: str, lines: list[str]) -> tuple[list[str], dict[int, int]]:
    """The lines as libcst is given them, and the characters left out of each changed line's start:
    where CPython's tokenizer reads the text as libcst's does not.

    CPython's tokenizer resets a line's indentation at a form feed: the whitespace up to the last form
    feed of a statement's indentation counts for nothing. libcst keeps one indentation per block,
    taken from its first line with the form feed: a block nesting another fails to parse (`def f():
    \\f    for x in y:` ... : "no matching outer block for dedent") and its other lines would be
    regenerated without their own (positions and fixes off by their width). So that whitespace is left
    out of the statements' lines libcst reads; `shifted` puts positions back where they are.

    CPython 3.10 and 3.11 read a backslash continuing the last line into the end of the file after
    CRLF (3.12+ refuse it): libcst is given a space for it."""
    if text.endswith("\\\r\n"):
        lines = [*lines[:-1], lines[-1][:-3] + " \r\n"]
    if "\f" not in text or not _FORM_FEED_INDENTATION.search(text):
        return lines, {}
    lines = list(lines)
    shifts: dict[int, int] = {}
    for line in scan(text).lines:
        head = lines[line.first - 1]
        cut = head.rfind("\f", 0, line.column - 1) + 1
        if cut:
            lines[line.first - 1] = head[cut:]
            shifts[line.first] = cut
    return lines, shifts


def shifted(finding: Finding, shifts: dict[int, int]) -> Finding:
    """`finding`, found in a text whose lines `shifts` shortened, at its place in the text (its fix's
    edits too)."""
    if not shifts:
        return finding
    fix = finding.fix
    if fix is not None:
        fix = Fix(fix.applicability, tuple(replace(edit, column=edit.column + shifts.get(edit.line, 0),
                                                   end_column=edit.end_column + shifts.get(edit.end_line, 0))
                                           for edit in fix.edits), fix.description)
    return replace(finding, column=finding.column + shifts.get(finding.line, 0),
                   end_column=finding.end_column + shifts.get(finding.end_line, 0), fix=fix)


def _cpython_finding(display: str, error: CPythonError, shifts: dict[int, int]) -> Finding:
    return shifted(engine_finding(display, BY_CODE["LL001"], f"syntax error: {error.message}", error.line,
                                  error.column), shifts)


def _elif_of(node: ast.stmt) -> ast.stmt | None:
    """The `elif` after an `if` (nested in its `orelse`, at its column), if it has one."""
    if isinstance(node, ast.If) and len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If) \
            and node.orelse[0].col_offset == node.col_offset and node.orelse[0].lineno > node.lineno:
        return node.orelse[0]
    return None


def _elif_chain(node: ast.stmt) -> int:
    """How many `elif`s follow an `if`."""
    elifs = 0
    while (node := _elif_of(node)) is not None:
        elifs += 1
    return elifs


def _child_statements(node: ast.stmt) -> list[ast.stmt]:
    children: list[ast.stmt] = []
    for name in ("body", "orelse", "finalbody"):
        value = getattr(node, name, None)
        if isinstance(value, list):
            children += [child for child in value if isinstance(child, ast.stmt)]
    for clause in [*getattr(node, "handlers", ()), *getattr(node, "cases", ())]:
        children += clause.body
    return sorted(children, key=lambda child: child.lineno)


def _outermost(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    kept: list[tuple[int, int]] = []
    for first, last in sorted(ranges):
        if kept and first <= kept[-1][1]:
            kept[-1] = (kept[-1][0], max(kept[-1][1], last))
        else:
            kept.append((first, last))
    return kept


# CPython reads source as UTF-8: a text holding a surrogate code point cannot be encoded for it (3.10-3.13:
# `compile` raises UnicodeEncodeError on such a str, SyntaxError on such bytes of a `raw_unicode_escape` file).
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass
class _Measured:
    error: Finding | None
    nesting: Nesting


def _measured(display: str, text: str, lines: list[str], shifts: dict[int, int], checks: Checks) -> _Measured:
    """The verdict on a text CPython did not read (`lines`: as libcst is given them): the scanner's
    limits first, then libcst's parser on the text with its too-deep statements masked (its depth is
    then bounded); then what CPython checks past libcst's grammar (lintloop.cpython_verdict)."""
    nesting = scan(text)
    if _LONE_SURROGATE.search(text):  # text decoded from a notebook's or an editor's JSON escapes ("\ud800")
        return _Measured(shifted(_surrogate_finding(display, lines), shifts), nesting)
    if nesting.limit_error is not None:
        line, column, message = nesting.limit_error
        return _Measured(engine_finding(display, BY_CODE["LL001"], f"syntax error: {message}", line, column), nesting)
    deep = nesting.too_deep()
    if deep is not None:
        return _Measured(_too_deep_finding(display, deep), nesting)
    ranges = nesting.masked_ranges()
    parsed = source_lines(mask(lines, ranges)) if ranges else lines
    chunks = list(_chunks(nesting, len(parsed)))
    for first, last in chunks:
        chunk = "".join(parsed[first - 1:last])
        try:
            with _unvalidated():
                cst.parse_module(chunk)
        except cst.ParserSyntaxError as exc:
            finding = libcst_syntax_finding(display, chunk, exc)
            line = finding.line + first - 1
            finding = replace(finding, line=line, end_line=line, suppression_lines=(line,))
            return _Measured(shifted(finding, shifts), nesting)
    if checks is Checks.GRAMMAR:
        return _Measured(None, nesting)

    def trees() -> Iterator[tuple[int, cst.Module]]:
        """Each chunk's tree, parsed again (one is dropped once read), unvalidated while it is read."""
        for first, last in chunks:
            with _unvalidated():
                yield first, cst.parse_module("".join(parsed[first - 1:last]))

    error = error_past_grammar(parsed, checks.flags, trees)
    return _Measured(_cpython_finding(display, error, shifts) if error is not None else None, nesting)


# libcst's parser is super-linear in the size of what it parses (10,000 statements: 1.0 s, 100,000:
# 15.7 s; a 5 MB list literal: 31 s, in pieces 8.6 s) and costs about 500 bytes of memory per byte of
# text while it works: a large text is parsed in chunks of whole top-level statements (100,000
# statements: 7.6 s), each as valid or not alone as within the text, and a long display in pieces.
CHUNK_LINES = 1_000


def _chunks(nesting: Nesting, line_count: int) -> Iterator[tuple[int, int]]:
    """Line ranges of at least CHUNK_LINES lines (the last one shorter) that start where a top-level
    statement starts: its logical lines, and a compound statement's clauses, are never split."""
    return _grouped([line.first for line in nesting.lines if line.indent == 0 and (
        line.owner is None or nesting.compounds[line.owner][0] == line.first)], line_count)


def _grouped(starts: list[int], line_count: int, apart: set[int] | frozenset[int] = frozenset()) -> Iterator[tuple[int, int]]:
    """Ranges of lines that start at `starts` and span at least CHUNK_LINES, or end before a start in `apart`."""
    first = 1
    for start in starts:
        if start > first and (start - first >= CHUNK_LINES or start in apart):
            yield first, start - 1
            first = start
    yield first, max(first, line_count)


def _after_each(long_ones: list[int], statements: dict[int, ast.stmt | None]) -> set[int]:
    """The starts of the long statements and of the statements after them: each long one is a chunk alone."""
    starts = list(statements)
    following = {start: after for start, after in zip(starts, starts[1:])}
    return {*long_ones, *(following[start] for start in long_ones if start in following)}


# libcst checks each node as it is constructed (`CSTNode.__post_init__` calls `_validate`). The nodes its
# parser builds, and the modules `parse_cst` joins from them, are valid by construction (what CPython
# refuses past libcst's grammar, `"a" b"b"` among it, is decided by `_measured` and CPython), and checking
# them costs a tenth of the parse; libcst's own comment there suggests validating elsewhere. The check
# is skipped for what this thread's parses build (`_unvalidated`), and kept for every other node (a fix's).
_parsing = threading.local()
_validated_post_init = cst.CSTNode.__post_init__


def _post_init(node: cst.CSTNode) -> None:
    if not getattr(_parsing, "active", False):
        _validated_post_init(node)


cst.CSTNode.__post_init__ = _post_init  # type: ignore[method-assign]


@contextlib.contextmanager
def _unvalidated() -> Iterator[None]:
    outer = getattr(_parsing, "active", False)
    _parsing.active = True
    try:
        yield
    finally:
        _parsing.active = outer


def _with_identity_hash(node_type: type, python_hash: object) -> None:
    """libcst hashes a node by identity in Python (`return id(self)`, given to every node class); the
    analyses key dicts by nodes millions of times. `object.__hash__` is the same identity hash, in C."""
    if node_type.__dict__.get("__hash__") is python_hash:
        node_type.__hash__ = object.__hash__  # type: ignore[method-assign]
    for subclass in node_type.__subclasses__():
        _with_identity_hash(subclass, python_hash)


_with_identity_hash(cst.CSTNode, cst.CSTNode.__dict__["__hash__"])


def selection_outline(tree: ast.Module, line_map: list[int]) -> ast.Module | None:
    """CPython's tree of a selection of a file's top-level statements and methods (`line_map`: the line
    in the file of each of its lines, `tree`: the file's tree) as far as `parse_cst` and the positions
    read it, without parsing the selection again: one placeholder per top-level statement with lines in
    it, numbered as in the selection (`lineno` its `def` or `class` line, `decorator_list` its decorators'
    lines, `end_lineno` its last selected line; a class whose methods are selected in part ends with the
    last selected one, and its `body` holds a placeholder per selected statement of its body, `lineno`
    its `def` or first line). None where a statement that may be a long display is selected
    (`parse_cst` splits one by its elements, which the placeholder does not give)."""
    in_selection = {line: index for index, line in enumerate(line_map, start=1)}
    body: list[ast.stmt] = []
    for statement in tree.body:
        decorators = getattr(statement, "decorator_list", [])
        first = min([statement.lineno, *(d.lineno for d in decorators)])
        selected = [in_selection[line] for line in range(first, statement.end_lineno + 1) if line in in_selection]
        if not selected:
            continue
        if statement.lineno not in in_selection or selected[-1] - selected[0] >= CHUNK_LINES and \
                isinstance(statement, (ast.Assign, ast.AnnAssign, ast.Expr)):
            return None
        placeholder = ast.Pass(lineno=in_selection[statement.lineno], end_lineno=selected[-1], col_offset=0,
                               end_col_offset=0)
        placeholder.decorator_list = [ast.Pass(lineno=in_selection[d.lineno]) for d in decorators if d.lineno in in_selection]
        if isinstance(statement, ast.ClassDef):
            placeholder.body = [ast.Pass(lineno=in_selection[member.lineno]) for member in statement.body
                                if member.lineno in in_selection]
        body.append(placeholder)
    return ast.Module(body=body, type_ignores=[])


def parse_cst(text: str, lines: list[str], tree: ast.Module | None) -> cst.Module:
    """libcst's tree of `text` (whose `lines` and, where this host reads it, CPython's `tree` are
    given), parsed in chunks of top-level statements where it is long, and a long display (a list,
    dict, set or tuple of thousands of lines) in pieces of its elements. The tree is the one a single
    parse gives, comments and blank lines at the seams included (tests/test_nesting.py)."""
    with _unvalidated():
        return _parse_cst(text, lines, tree)


def _parse_cst(text: str, lines: list[str], tree: ast.Module | None) -> cst.Module:
    if len(lines) <= CHUNK_LINES:
        return pieces.parse_module(text, lines)
    statements: dict[int, ast.stmt | None] = {}  # by first line; None: several statements start there
    if tree is not None:
        previous_end = 0
        for node in tree.body:
            start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
            if start <= previous_end:  # `]; y = 1`: it shares a line with the one before
                statements[max(statements)] = None
            else:
                statements[start] = node
            previous_end = node.end_lineno
        long_ones = [start for start, node in statements.items()
                     if node is not None and node.end_lineno - node.lineno >= CHUNK_LINES]
        chunks = list(_grouped(list(statements), len(lines), _after_each(long_ones, statements)))
    else:
        chunks = list(_chunks(scan(text), len(lines)))
    starts = sorted(statements)
    try:
        modules = []
        for first, last in chunks:
            inside = starts[bisect.bisect_left(starts, first):bisect.bisect_right(starts, last)]
            modules.append(_parsed_chunk(lines, first, last, statements[inside[0]] if len(inside) == 1 else None))
    except cst.ParserSyntaxError:
        return cst.parse_module(text)  # raises the error where the whole text has it
    return modules[0] if len(modules) == 1 else _joined(modules)


def _parsed_chunk(lines: list[str], first: int, last: int, statement: ast.stmt | None) -> cst.Module:
    """The module of lines `first`..`last`; `statement`: the only statement among them, when known."""
    if statement is not None and statement.end_lineno - statement.lineno >= CHUNK_LINES:
        in_pieces = _display_in_pieces(lines, first, last, statement)
        if in_pieces is not None:
            return in_pieces
    return pieces.parse_module("".join(lines[first - 1:last]), lines[first - 1:last])


_DISPLAYS = {ast.List: cst.List, ast.Tuple: cst.Tuple, ast.Set: cst.Set, ast.Dict: cst.Dict}
_CLOSING = {"[": "]", "(": ")", "{": "}"}


def _display_in_pieces(lines: list[str], first: int, last: int, statement: ast.stmt) -> cst.Module | None:
    """The module of lines `first`..`last`, which hold one statement (`x = [...]`, `x: T = {...}` or
    an expression) whose value is a display spanning thousands of lines: its elements are parsed in
    pieces of about CHUNK_LINES lines, each piece split where an element starts a line, and joined into
    the tree of one parse. None where the statement is not of that form (or a piece does not parse
    alone): then the caller parses it whole."""
    display = getattr(statement, "value", None) if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.Expr)) else None
    if type(display) not in _DISPLAYS or display.lineno != statement.lineno or statement.col_offset:
        return None  # (a top-level statement after a form feed: its line is given to libcst without it)
    head = lines[display.lineno - 1]
    encoded = head.encode("utf-8")
    opener = encoded[display.col_offset:display.col_offset + 1].decode("ascii", "replace")
    if opener not in _CLOSING or encoded[display.col_offset + 1:].strip():
        return None  # the display's first element, or a comment, on its first line
    splits = _element_lines(lines, display)
    if not splits:
        return None
    newline = head[len(head.rstrip("\r\n")):]
    prefix, suffix = f"_ = {opener}{newline}", f"{_CLOSING[opener]}{newline}"
    bounds = [first, *splits, last + 1]
    texts = ["".join(lines[first - 1:bounds[1] - 1]) + suffix]
    texts += [prefix + "".join(lines[start - 1:end - 1]) + suffix for start, end in zip(bounds[1:-2], bounds[2:-1])]
    texts.append(prefix + "".join(lines[bounds[-2] - 1:last]))
    try:
        modules = [cst.parse_module(piece) for piece in texts]
    except cst.ParserSyntaxError:
        return None
    kind = _DISPLAYS[type(display)]
    statements = [module.body[0] for module in modules]
    if any(len(module.body) != 1 or not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1
           or not isinstance(getattr(line.body[0], "value", None), kind) for module, line in zip(modules, statements)) or \
            len({(module.default_newline, module.default_indent) for module in modules}) != 1:
        return None
    displays = [line.body[0].value for line in statements]
    elements: list[cst.CSTNode] = []
    for display_piece, following in zip(displays, [*displays[1:], None]):
        piece_elements = list(display_piece.elements)
        if following is not None:
            # The seam: the line break after the piece's last comma is its closing bracket's here, and
            # runs to the next element's indentation (the next piece's after its opening bracket).
            comma, closing = piece_elements[-1].comma, _closing(display_piece).whitespace_before
            indentation = _opening(following).whitespace_after
            if not (isinstance(comma, cst.Comma) and comma.whitespace_after.deep_equals(cst.SimpleWhitespace(""))
                    and isinstance(closing, cst.ParenthesizedWhitespace)
                    and isinstance(indentation, cst.ParenthesizedWhitespace)):
                return None
            piece_elements[-1] = piece_elements[-1].with_changes(comma=comma.with_changes(
                whitespace_after=closing.with_changes(last_line=indentation.last_line)))
        elements += piece_elements
    joined = displays[-1].with_changes(elements=elements, **_opening_field(displays[0]))
    small_last = statements[-1].body[0]
    small = statements[0].body[0].with_changes(value=joined, semicolon=small_last.semicolon)
    line = statements[0].with_changes(body=[small], trailing_whitespace=statements[-1].trailing_whitespace)
    return modules[0].with_changes(body=[line], footer=modules[-1].footer,
                                   has_trailing_newline=modules[-1].has_trailing_newline)


def _element_lines(lines: list[str], display: ast.expr) -> list[int]:
    """Lines where a piece of `display`'s elements may start (about CHUNK_LINES apart): an element that
    starts its line, the one before it (and its comma) ended on an earlier line."""
    starts = display.keys if isinstance(display, ast.Dict) else display.elts
    splits: list[int] = []
    previous_end = display.lineno
    for element in starts:
        if element is None:  # `**mapping`: not a place to split
            continue
        line = element.lineno
        if (line > previous_end and line - (splits[-1] if splits else display.lineno) >= CHUNK_LINES
                and line < display.end_lineno and not lines[line - 1].encode("utf-8")[:element.col_offset].strip()):
            splits.append(line)
        previous_end = max(previous_end, element.end_lineno)
    return splits


def _opening(display: cst.BaseExpression) -> cst.CSTNode:
    """A display's opening bracket."""
    return display.lpar[0] if isinstance(display, cst.Tuple) else getattr(display, "lbracket", None) or display.lbrace


def _closing(display: cst.BaseExpression) -> cst.CSTNode:
    """A display's closing bracket."""
    return display.rpar[-1] if isinstance(display, cst.Tuple) else getattr(display, "rbracket", None) or display.rbrace


def _opening_field(display: cst.BaseExpression) -> dict[str, object]:
    """The field that holds a display's opening bracket, with it."""
    if isinstance(display, cst.Tuple):
        return {"lpar": display.lpar}
    return {"lbracket": display.lbracket} if isinstance(display, cst.List) else {"lbrace": display.lbrace}


def _joined(modules: list[cst.Module]) -> cst.Module:
    """One module of the chunks' statements: the blank lines and comments between two chunks (the
    first one's footer, the next one's header) lead the next chunk's first statement, as in one parse;
    a chunk whose own default indentation or line end is not the module's is written out explicitly."""
    indented = next((module for module in modules if any(
        isinstance(getattr(statement, "body", None), cst.IndentedBlock) for statement in module.body)), modules[0])
    indent, newline = indented.default_indent, modules[0].default_newline
    body: list[cst.BaseStatement] = []
    between: tuple[cst.EmptyLine, ...] = ()
    for number, module in enumerate(modules):
        if (module.default_indent, module.default_newline) != (indent, newline):
            module = module.visit(_Defaults(module, indent, newline))
        statements = list(module.body)
        leading = (*between, *module.header) if number else ()
        if statements and leading:
            statements[0] = statements[0].with_changes(leading_lines=(*leading, *statements[0].leading_lines))
            leading = ()
        between = (*leading, *module.footer)
        body += statements
    return modules[0].with_changes(body=body, footer=between, default_indent=indent,
                                   has_trailing_newline=modules[-1].has_trailing_newline)


class _Defaults(cst.CSTTransformer):
    """A chunk's blocks and line ends as the whole module holds them: libcst leaves the indentation
    (and line end) that equals its module's default out of a node (None), writing the others."""

    def __init__(self, chunk: cst.Module, indent: str, newline: str) -> None:
        super().__init__()
        self.chunk, self.indent, self.newline = chunk, indent, newline

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        own = self.chunk.default_indent if updated.indent is None else updated.indent
        return updated.with_changes(indent=None if own == self.indent else own)

    def leave_Newline(self, original: cst.Newline, updated: cst.Newline) -> cst.Newline:
        own = self.chunk.default_newline if updated.value is None else updated.value
        return updated.with_changes(value=None if own == self.newline else own)


def _too_deep_finding(display: str, deep: TooDeep) -> Finding:
    if deep.too_complex_to_parse:
        return engine_finding(display, BY_CODE["LL001"], "syntax error: too complex to parse", deep.line, deep.column,
                              note=f"CPython's parser would need more than the {PARSER_STACK:,} frames of its stack "
                                   "(\"Parser stack overflowed\" on every version)")
    return engine_finding(display, BY_CODE["LL001"], f"syntax error: nested {deep.depth:,} levels deep, deeper than any "
                          "Python compiles", deep.line, deep.column,
                          note="CPython 3.10-3.12 stop near 3,000 levels, 3.13 near 10,000")


def _surrogate_finding(display: str, lines: list[str]) -> Finding:
    """LL001 at the first lone surrogate of a text (`lines`: its lines)."""
    line, found = next((number, surrogate) for number, text in enumerate(lines, 1)
                       if (surrogate := _LONE_SURROGATE.search(text)) is not None)
    return engine_finding(display, BY_CODE["LL001"], f"syntax error: a lone surrogate (U+{ord(found[0]):04X}), which "
                          "no UTF-8 source can hold", line, found.start() + 1)


_LIBCST_ERROR_AT = re.compile(r"^parser error: error at (\d+):(\d+): ")
_NEW_STATEMENT = re.compile(r"\b(?:EOF|DEDENT)\b")


def libcst_syntax_finding(display: str, text: str, exc: cst.ParserSyntaxError) -> Finding:
    """LL001 from libcst's error, the same on every interpreter: its parser names the position
    ("error at 3:8: expected one of ..."); its tokenizer does not, so a tokenizer error
    ("unterminated string literal") is located by libcst's pure-Python tokenizer."""
    message = exc.message
    at = _LIBCST_ERROR_AT.match(message)
    if at is not None:
        message = message[at.end():]
        line, column = int(at.group(1)), int(at.group(2))
        # A parser ready for a new statement (EOF or DEDENT would do) stopped at the line's first
        # token itself (an unexpected indent); else at the token after where the statement stopped.
        line, column = (line, column + 1) if _NEW_STATEMENT.search(message) else _after_last_token(text, line, column)
    else:
        message = message.removeprefix("tokenizer error: ")
        line, column = _tokenizer_error_position(text) or (
            _after_last_token(text, sys.maxsize, 0) if "end of file" in message else (exc.raw_line, exc.raw_column + 1))
    return engine_finding(display, BY_CODE["LL001"], f"syntax error: {message}", line, column)


def _after_last_token(text: str, line: int, column: int) -> tuple[int, int]:
    """The 1-based position of a parser error libcst names at `line`, 0-based `column`: the token it
    could not take. Where that token starts a later line (the `:` missing after `if x`, or the end
    of the file), the error is reported where the statement stopped: the end of the line before."""
    lines = source_lines(text)
    if line > len(lines):
        line, column = len(lines) + 1, 0
    offset = sum(len(text) for text in lines[:line - 1]) + column
    before = text[:offset]
    stripped = _without_trailing_comment_lines(before.rstrip(" \t\f\r\n"))
    if "\n" not in before[len(stripped):] and "\r" not in before[len(stripped):] or not stripped:
        return max(line, 1), column + 1
    last_line = [line.rstrip("\r\n") for line in source_lines(stripped)]
    return len(last_line), len(last_line[-1]) + 1


def _without_trailing_comment_lines(text: str) -> str:
    """`text` without the comment-only lines at its end (libcst reads the comments between an unfinished
    `loss =` and the next statement before it fails; CPython points at the statement)."""
    while True:
        start = max(text.rfind("\n"), text.rfind("\r")) + 1
        if not text[start:].lstrip(" \t\f").startswith("#"):
            return text
        text = text[:start].rstrip(" \t\f\r\n")


def _tokenizer_error_position(text: str) -> tuple[int, int] | None:
    """Line and 1-based column of the first token libcst's pure-Python tokenizer cannot read."""
    try:
        from libcst._parser.parso.python.tokenize import tokenize
        from libcst._parser.parso.utils import parse_version_string
    except ImportError:  # a libcst without it: the native error's own position
        return None
    try:
        for token in tokenize(text, parse_version_string("3.8")):
            if token.type.name in ("ERRORTOKEN", "ERROR_DEDENT"):
                return token.start_pos[0], token.start_pos[1] + 1
    except Exception:  # a locator only: any failure leaves the native error's position
        return None
    return None
