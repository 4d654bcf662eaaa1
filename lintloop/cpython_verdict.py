"""What CPython refuses past the grammar, decided the same on every host Python 3.10-3.13.

A text is valid if some CPython 3.10-3.13 compiles it (`python -m py_compile`). Each newer version
reads all the older ones do, save a few corners (`_RELAXED`, and what the scanner of lintloop.nesting
decides: depth), so where this host's parser reads the text, its compiler decides (`compile_error`):
`compile()` of the tree finds what the parser alone does not ('return' outside function, a duplicate
argument, `nonlocal` without a binding, a late `from __future__` import, `*a = b`, ...: CPython's
symbol table and code generator).

Where it does not (syntax newer than the host, or an error libcst's parser takes), `error_past_grammar`
decides, on libcst's tree where the text may hold syntax newer than the host: it checks what CPython's
parser checks and libcst's does not (string literals' escapes, bytes' characters, an f-string field's
star), the compile-time errors of the constructs newer than 3.10 (`except*`, type parameters), and
has the host compile the text with those constructs rewritten into what every host reads, column for
column (`_Rewrite`): f-strings as calls of their fields, type parameters as the parameters' parenthesis,
`type X[T] = v` as `X=()= v`, `except*` as `except`, `a[*b]` as `a[ b]`.

The errors are CPython 3.13's, its message at its position (1-based columns, in characters); where an
older host says it otherwise, `_as_3_13` and `_string_error_as_3_13` say it as 3.13 does.
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from lintloop.isolation import deep_recursion
from lintloop.source import source_lines

TOP_LEVEL_AWAIT = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT  # IPython compiles a notebook's cells with it
_HOST = sys.version_info[:2]
DEPTH_FAILURES = (RecursionError, MemoryError)  # this host's limits, not the text's: lintloop.nesting decides


@dataclass(frozen=True)
class CPythonError:
    """A syntax error as CPython 3.13 reports it: where (1-based line and column, in characters) and
    what. `parsing`: its parser's (which reports one before any of its compiler's)."""

    parsing: bool
    line: int
    column: int
    message: str

    @property
    def first(self) -> tuple[bool, int, int]:
        """The order in which CPython finds errors: its parser's first, then in the text's order."""
        return not self.parsing, self.line, self.column


# ----- the host's compiler -----------------------------------------------------------------------


def compile_error(tree: ast.Module, lines: list[str], flags: int = 0) -> CPythonError | None:
    """The compile-time error CPython finds in `tree`, parsed by this host from the text of `lines`;
    `flags`: `TOP_LEVEL_AWAIT` for a notebook's cell, whose top-level statements are then compiled one
    by one, as IPython runs a cell (a `from __future__` import is no error anywhere in it). Raises
    RecursionError or MemoryError where this host's compiler stops at its own depth."""
    try:
        _compiled(tree, flags)
        return None
    except SyntaxError as exc:
        error = _reported(exc, lines, tree, parsing=False)
    if error.message not in _RELAXED:
        return error
    # An error newer versions no longer raise: the statements that hold what they accept are left out.
    relaxed = _relaxed_statements(tree)
    kept = ast.Module(body=[statement for statement in tree.body if statement not in relaxed], type_ignores=[])
    try:
        _compiled(kept, flags)
    except SyntaxError as exc:
        return _reported(exc, lines, kept, parsing=False)
    return None


def _compiled(tree: ast.Module, flags: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if not flags & TOP_LEVEL_AWAIT:
            compile(tree, "<lintloop>", "exec", flags=flags, dont_inherit=True)
            return
        for statement in tree.body:  # a cell: IPython compiles (and runs) its statements one by one
            compile(ast.Module(body=[statement], type_ignores=[]), "<lintloop>", "exec", flags=flags,
                    dont_inherit=True)


# Errors an older host raises where a newer CPython compiles: 3.10-3.12 allow 20 nested blocks (loops,
# `try`, `with`), 3.13 21; 3.10 refuses an asynchronous comprehension in a comprehension of an `async
# def` (3.11 allows it).
_NESTED_BLOCKS = "too many statically nested blocks"
_ASYNC_COMPREHENSION = "asynchronous comprehension outside of an asynchronous function"
_RELAXED = frozenset(message for message, newest in ((_NESTED_BLOCKS, (3, 13)), (_ASYNC_COMPREHENSION, (3, 11)))
                     if _HOST < newest)
_BLOCKS = (ast.For, ast.AsyncFor, ast.While, ast.Try, ast.With, ast.AsyncWith, *(
    [ast.TryStar] if hasattr(ast, "TryStar") else []))
_NEWEST_MAX_BLOCKS = 21
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _relaxed_statements(tree: ast.Module) -> set[ast.stmt]:
    """The top-level statements holding what 3.13 compiles and this host does not: 21 nested blocks;
    (3.10) an asynchronous comprehension in a comprehension of an `async def`."""
    found = set()
    for top in tree.body:
        deepest, nested_async = 0, False
        stack: list[tuple[ast.AST, int, bool, bool]] = [(top, 0, False, False)]  # blocks, in async def, in comprehension
        while stack:
            node, blocks, in_async, in_comprehension = stack.pop()
            if isinstance(node, _BLOCKS):
                blocks += 1
                deepest = max(deepest, blocks)
            elif isinstance(node, _SCOPES):
                blocks, in_async, in_comprehension = 0, isinstance(node, ast.AsyncFunctionDef), False
            elif isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                nested_async |= in_async and in_comprehension and (
                    any(generator.is_async for generator in node.generators)
                    or any(isinstance(child, ast.Await) for child in ast.walk(node)))
                in_comprehension = True
            stack.extend((child, blocks, in_async, in_comprehension) for child in ast.iter_child_nodes(node))
        if (_NESTED_BLOCKS in _RELAXED and deepest == _NEWEST_MAX_BLOCKS) or (
                _ASYNC_COMPREHENSION in _RELAXED and nested_async):
            found.add(top)
    return found


def _reported(exc: SyntaxError, lines: list[str], tree: ast.Module | None, parsing: bool) -> CPythonError:
    """`exc` as CPython 3.13 reports it. A compile-time error's offset counts UTF-8 bytes (the
    parser's counts characters)."""
    line = exc.lineno or 1
    column = exc.offset or 1
    if not parsing:
        column = _in_characters(lines, line, column)
    error = CPythonError(parsing, line, max(column, 1), exc.msg)
    return _as_3_13(error, tree, lines) if tree is not None and _HOST < (3, 13) else error


def _in_characters(lines: list[str], line: int, byte_column: int) -> int:
    if not 1 <= line <= len(lines):
        return byte_column
    return len(lines[line - 1].encode("utf-8")[:byte_column - 1].decode("utf-8", "replace")) + 1


def _start(node: ast.AST, lines: list[str]) -> tuple[int, int]:
    return node.lineno, _in_characters(lines, node.lineno, node.col_offset + 1)


def _as_3_13(error: CPythonError, tree: ast.Module, lines: list[str]) -> CPythonError:
    """An older host's report of an error where (and as) 3.13 reports it."""
    where = (error.line, error.column)
    if error.message == "cannot assign to __debug__" and _HOST < (3, 12):
        # 3.10 and 3.11 point at the definition, lambda or call; 3.12+ at the parameter or keyword
        for node in ast.walk(tree):
            if hasattr(node, "lineno") and _start(node, lines) == where:
                for named in _debug_names(node):
                    return CPythonError(error.parsing, *_start(named, lines), error.message)
    elif error.message == "alternative patterns bind different names" and _HOST < (3, 12):
        # 3.10 and 3.11 point at a name the alternative binds; 3.12+ at the whole or-pattern
        for node in ast.walk(tree):
            if isinstance(node, ast.MatchOr) and any(_start(inner, lines) == where for inner in ast.walk(node)):
                return CPythonError(error.parsing, *_start(node, lines), error.message)
    elif error.message == _NESTED_BLOCKS:
        # the older hosts stop at the 21st block, 3.13 at the 22nd: its loop's statement, or its `with` item
        for node in ast.walk(tree):
            if isinstance(node, _BLOCKS) and _start(node, lines) == where:
                inner = _first_block_in(node)
                if inner is not None:
                    at = inner.items[0].context_expr if isinstance(inner, (ast.With, ast.AsyncWith)) else inner
                    return CPythonError(error.parsing, *_start(at, lines), error.message)
    elif error.message.endswith("within a TypeVar bound"):
        for node in ast.walk(tree):  # 3.12 calls a constraint (`T: (int, str)`) a bound
            if type(node).__name__ == "TypeVar" and isinstance(node.bound, ast.Tuple) and any(
                    _start(child, lines) == where for child in ast.walk(node.bound) if hasattr(child, "lineno")):
                return CPythonError(error.parsing, *where, error.message.removesuffix("bound") + "constraint")
    return error


def _first_block_in(block: ast.stmt) -> ast.stmt | None:
    """The first block statement nested in `block` (in a function or class of its own: none), in order."""
    for child in ast.iter_child_nodes(block):
        if isinstance(child, _BLOCKS):
            return child
        if not isinstance(child, _SCOPES):
            found = _first_block_in(child)
            if found is not None:
                return found
    return None


def _debug_names(node: ast.AST) -> Iterator[ast.AST]:
    """The parameters and keywords named `__debug__` of a definition, lambda or call."""
    arguments = getattr(node, "args", None)
    if isinstance(arguments, ast.arguments):
        for arg in [*arguments.posonlyargs, *arguments.args, arguments.vararg, *arguments.kwonlyargs,
                    arguments.kwarg]:
            if arg is not None and arg.arg == "__debug__":
                yield arg
    for keyword in getattr(node, "keywords", ()):
        if keyword.arg == "__debug__":
            yield keyword


# ----- libcst's tree of a text this host's parser does not read ----------------------------------


def error_past_grammar(lines: list[str], flags: int,
                       trees: Callable[[], Iterable[tuple[int, cst.Module]]]) -> CPythonError | None:
    """The first error CPython finds in the text of `lines`, which libcst's parser read and this host's
    did not, or None if some CPython compiles it; `trees()`: libcst's trees of the text, each with the
    line it starts on (parsed again only where the host's verdict needs them); `flags`: CPython's
    compile flags. Where no syntax newer than this host can be in the text, the host decides alone."""
    text = "".join(lines)
    errors = _host_errors(text, flags)
    if not errors or not errors[0].parsing or not _may_be_newer(text, errors[0]):
        return _string_error_as_3_13(errors[0], text) if errors else None
    rewritten, errors = rewritten_as_3_10(lines, trees())
    errors += _host_errors(rewritten, flags)
    return min(errors, key=lambda error: error.first) if errors else None


def rewritten_as_3_10(lines: list[str], trees: Iterable[tuple[int, cst.Module]]) -> tuple[str, list[CPythonError]]:
    """The text of `lines` with its syntax newer than CPython 3.10 rewritten into what 3.10 reads, line
    for line and column for column, and the errors CPython 3.13 finds in what was rewritten and in
    what libcst's parser takes and CPython's does not; `trees`: libcst's trees of the text (with the
    line each starts on)."""
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    rewrite = _Rewrite("".join(lines), starts)
    errors: list[CPythonError] = []
    for first_line, module in trees:
        checks = _Checks(first_line, rewrite)
        with deep_recursion():  # libcst's visitors recurse (its parser took statements ANALYSIS_DEPTH deep)
            MetadataWrapper(module, unsafe_skip_copy=True).visit(checks)
        errors += checks.errors
    return rewrite.text(), errors


# What may be syntax newer than this host, by the version it came in: type parameters and `type`
# aliases (3.12; their defaults 3.13), f-strings (3.12 reads them as 3.10 did not), `except*` and
# starred subscripts and annotations (3.11).
_NEWER = [pattern for pattern, version in (
    (r"\b(?:def|class)\s+\w+\s*\[|(?:^|[\r\n;])[ \t\f]*type\s+\w", (3, 13)),
    (r"(?<![\w.])(?:[fF]|[rR][fF]|[fF][rR])['\"]", (3, 12)),
    (r"\bexcept\s*\*|\*", (3, 11))) if _HOST < version]
_MAY_BE_NEWER = re.compile("|".join(_NEWER)) if _NEWER else None


def _may_be_newer(text: str, error: CPythonError) -> bool:
    """Whether this host's parser may refuse `text` for syntax another CPython reads: newer syntax, or
    on 3.12+ an f-string 3.10 and 3.11 read (`f"{x for x in y}"`) or one whose format spec 3.12+
    fail to decode (a UnicodeDecodeError, no SyntaxError)."""
    if _HOST >= (3, 12) and error.message.startswith(("f-string", _UNDECODED)):
        return True
    return _MAY_BE_NEWER is not None and _MAY_BE_NEWER.search(text) is not None


_UNDECODED = "(unicode error)"
_STRING_ERRORS = (_UNDECODED, "(value error)", "bytes can only contain ASCII literal characters")


def _string_error_as_3_13(error: CPythonError, text: str) -> CPythonError:
    """A string literal's error where 3.12+ report it (its string's start; an f-string's closing
    quote), not after the string, where 3.10 and 3.11 do."""
    if _HOST >= (3, 12) or not error.parsing or not error.message.startswith(_STRING_ERRORS):
        return error
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.STRING and token.end == (error.line, error.column - 1):
                prefix = token.string[:len(token.string) - len(token.string.lstrip("bBrRuUfF"))]
                if "f" in prefix.lower():
                    quote = token.string[len(prefix):len(prefix) + 3]
                    quote = quote if quote in ('"""', "'''") else quote[0]
                    return CPythonError(True, token.end[0], token.end[1] - len(quote) + 1, error.message)
                return CPythonError(True, token.start[0], token.start[1] + 1, error.message)
            if token.start[0] > error.line:
                break
    except (tokenize.TokenError, SyntaxError):
        pass
    return error


def _host_errors(text: str, flags: int) -> list[CPythonError]:
    """What this host's parser and compiler report of `text` (rewritten into what every host reads)."""
    lines = source_lines(text)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text)
    except SyntaxError as exc:
        if exc.msg == "too many nested parentheses":  # the text's brackets were counted (lintloop.nesting)
            return []
        return [_reported(exc, lines, None, parsing=True)]
    except UnicodeDecodeError as exc:  # 3.12+ decoding an f-string's format spec, as no SyntaxError
        return [CPythonError(True, 1, 1, f"{_UNDECODED} {exc}")]
    except (*DEPTH_FAILURES, ValueError):
        return []
    try:
        error = compile_error(tree, lines, flags)
    except DEPTH_FAILURES:
        return []
    return [error] if error is not None else []


class _Rewrite:
    """The text with the constructs newer than CPython 3.10 rewritten, character for character (lines
    and columns kept): spaces over a range (its line ends kept), then what an edit puts."""

    def __init__(self, text: str, starts: list[int]) -> None:
        self.chars = list(text)
        self.starts = starts

    def offset(self, line: int, column: int) -> int:
        return self.starts[line - 1] + column

    def blank(self, start: int, end: int, continued: bool = False) -> None:
        """Spaces over `start`..`end`, its line ends kept; `continued`: each line end continued by a
        backslash (the range is in no bracket: a statement must go on over it)."""
        chars = self.chars
        for index in range(start, end):
            if chars[index] not in "\r\n":
                chars[index] = " "
            elif continued and chars[index - 1] not in "\r\n":
                chars[index - 1] = "\\"

    def put(self, offset: int, text: str) -> None:
        self.chars[offset:offset + len(text)] = text

    def find(self, char: str, offset: int, step: int = 1) -> int:
        """The offset of the first `char` from `offset` on (or back, `step` -1)."""
        chars = self.chars
        while chars[offset] != char:
            offset += step
        return offset

    def text(self) -> str:
        return "".join(self.chars)


# What a `break`, `continue` or `return` is in, innermost last: a loop, an except* handler, a scope.
_LOOP, _HANDLER, _SCOPE = "loop", "except*", "scope"


class _Checks(cst.CSTVisitor):
    """One chunk's checks and rewrites (the chunk starts on line `first_line` of the text)."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, first_line: int, rewrite: _Rewrite) -> None:
        super().__init__()
        self.shift = first_line - 1
        self.rewrite = rewrite
        self.errors: list[CPythonError] = []
        self.around: list[str] = []  # _LOOP, _HANDLER or _SCOPE: what encloses the node visited
        self.grouped: set[cst.CSTNode] = set()  # strings rewritten with the concatenation they are in

    # ----- positions ---------------------------------------------------------------------------
    def _start(self, node: cst.CSTNode) -> tuple[int, int]:
        where = self.get_metadata(PositionProvider, node).start
        return where.line + self.shift, where.column + 1

    def _offsets(self, node: cst.CSTNode) -> tuple[int, int]:
        where = self.get_metadata(PositionProvider, node)
        return (self.rewrite.offset(where.start.line + self.shift, where.start.column),
                self.rewrite.offset(where.end.line + self.shift, where.end.column))

    def _parenthesized(self, node: cst.CSTNode) -> tuple[int, int]:
        """The offsets of an expression with its parentheses (libcst's positions leave them out)."""
        start, end = self._offsets(node)
        lpar, rpar = getattr(node, "lpar", ()), getattr(node, "rpar", ())
        return (self._offsets(lpar[0])[0] if lpar else start), (self._offsets(rpar[-1])[1] if rpar else end)

    def _error(self, node: cst.CSTNode, message: str, parsing: bool = False) -> None:
        self.errors.append(CPythonError(parsing, *self._start(node), message))

    # ----- string literals (CPython's parser decodes each; libcst's does not) ---------------------
    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        value = node.value
        prefix = value[:len(value) - len(value.lstrip("bBrRuU"))].lower()
        if "\\" in value and "r" not in prefix or "b" in prefix and not value.isascii():
            message = _literal_error(value)
            if message is not None:
                self._error(node, message, parsing=True)

    def visit_FormattedString(self, node: cst.FormattedString) -> None:
        if "r" not in node.prefix.lower():
            quote = node.end
            for text in _literal_parts(node.parts):
                odd_backslashes = (len(text.value) - len(text.value.rstrip("\\"))) % 2
                message = _literal_error(quote + text.value + " " * odd_backslashes + quote) \
                    if "\\" in text.value else None
                if message is not None:  # 3.12+ report it at the f-string's closing quote
                    end = self.get_metadata(PositionProvider, node).end
                    self.errors.append(CPythonError(True, end.line + self.shift, end.column - len(quote) + 1, message))
                    break
        if node not in self.grouped:
            self._rewrite_strings(node, [node])

    def visit_FormattedStringExpression(self, node: cst.FormattedStringExpression) -> None:
        if isinstance(node.expression, cst.StarredElement):
            self._error(node.expression, "can't use starred expression here")

    def visit_ConcatenatedString(self, node: cst.ConcatenatedString) -> None:
        if node in self.grouped:
            return
        members = list(_concatenated(node, self.grouped))
        if any(isinstance(member, cst.FormattedString) for member in members):
            if any(isinstance(member, cst.SimpleString) and "b" in member.prefix.lower() for member in members):
                end = self.get_metadata(PositionProvider, node).end  # where every version reports it
                self.errors.append(CPythonError(True, end.line + self.shift, end.column + 1,
                                                "cannot mix bytes and nonbytes literals"))
            self._rewrite_strings(node, members)

    def _rewrite_strings(self, group: cst.CSTNode, members: list[cst.CSTNode]) -> None:
        """An f-string, or an implicit concatenation holding one, as its replacement fields' expressions,
        spaces for the rest: one field as `(x)`, several as calls of an empty string, `""(x)(y)`, in
        parentheses where they span lines (compiled as the fields are; 3.12+ count a field as a
        bracket too). A field's `yield` left bare in a call is left out (`f(yield)` is no call)."""
        rewrite = self.rewrite
        start, end = self._offsets(group)
        fields = [field for member in members if isinstance(member, cst.FormattedString)
                  for field in _fields(member.parts)]
        if not fields:
            return  # what every version reads
        cursor = start
        for first, last in sorted(self._parenthesized(field.expression) for field in fields):
            rewrite.blank(cursor, first)
            cursor = max(cursor, last)
        rewrite.blank(cursor, end)
        outer = [part for member in members if isinstance(member, cst.FormattedString) for part in member.parts
                 if isinstance(part, cst.FormattedStringExpression)]
        called = fields if len(outer) > 1 else [field for field in fields if field is not outer[0]]
        for field in called:
            first, last = self._offsets(field)
            rewrite.put(first, "(")
            rewrite.put(last - 1, ")")
            expression = field.expression
            if isinstance(expression, cst.Yield) and not expression.lpar:
                rewrite.blank(self._offsets(expression)[0], self._offsets(expression)[0] + len("yield"))
        for field in fields:
            if isinstance(field.expression, cst.StarredElement):  # reported above; `(*x)` is another error
                rewrite.put(self._offsets(field.expression)[0], " ")
        if len(outer) == 1 or any(char in "\r\n" for char in rewrite.chars[start:end]):
            rewrite.put(start, "(")
            rewrite.put(end - 1, ")")
        else:  # (a string starts with two characters before any field: its prefix and quote, or quotes)
            rewrite.put(start, '""')

    # ----- except* (3.11): `except`, and no break, continue or return out of its handler ------------
    def visit_ExceptStarHandler(self, node: cst.ExceptStarHandler) -> None:
        start, _ = self._offsets(node)
        self.rewrite.put(self.rewrite.find("*", start + len("except")), " ")
        self.around.append(_HANDLER)

    def leave_ExceptStarHandler(self, original_node: cst.ExceptStarHandler) -> None:
        self.around.pop()

    def visit_For(self, node: cst.For) -> None:
        self.around.append(_LOOP)

    def leave_For(self, original_node: cst.For) -> None:
        self.around.pop()

    def visit_While(self, node: cst.While) -> None:
        self.around.append(_LOOP)

    def leave_While(self, original_node: cst.While) -> None:
        self.around.pop()

    # A loop's `else` is outside the loop.
    def visit_For_orelse(self, node: cst.For) -> None:
        self.around.pop()

    def leave_For_orelse(self, node: cst.For) -> None:
        self.around.append(_LOOP)

    def visit_While_orelse(self, node: cst.While) -> None:
        self.around.pop()

    def leave_While_orelse(self, node: cst.While) -> None:
        self.around.append(_LOOP)

    def visit_Break(self, node: cst.Break) -> None:
        self._in_handler(node, _LOOP)

    def visit_Continue(self, node: cst.Continue) -> None:
        self._in_handler(node, _LOOP)

    def visit_Return(self, node: cst.Return) -> None:
        self._in_handler(node, _SCOPE)

    def _in_handler(self, node: cst.CSTNode, target: str) -> None:
        for around in reversed(self.around):
            if around == _HANDLER:
                self._error(node, "'break', 'continue' and 'return' cannot appear in an except* block")
            if around in (_HANDLER, _SCOPE, target):
                return

    def visit_Lambda(self, node: cst.Lambda) -> None:
        self.around.append(_SCOPE)

    def leave_Lambda(self, original_node: cst.Lambda) -> None:
        self.around.pop()

    # ----- starred subscripts and annotations (3.11): `a[*b]` -> `a[ b]`, `*args: *Ts` -> `*args:  Ts` ---
    def visit_Index(self, node: cst.Index) -> None:
        if node.star is not None:
            self.rewrite.put(self._offsets(node)[0], " ")

    def visit_Annotation(self, node: cst.Annotation) -> None:
        if isinstance(node.annotation, cst.StarredElement):
            self.rewrite.put(self._offsets(node.annotation)[0], " ")

    # ----- type parameters (3.12; defaults 3.13) and `type` aliases (3.12) --------------------------
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.around.append(_SCOPE)
        if node.type_parameters is not None:
            self._type_parameters(node.type_parameters)
            annotations = [param.annotation for param in _parameters(node.params) if param.annotation is not None]
            for annotation in [*annotations, *([node.returns] if node.returns is not None else [])]:
                self._in_annotation_scope(annotation, "the definition of a generic")
            self._without_brackets(node.type_parameters, parenthesized=True)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.around.pop()

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.around.append(_SCOPE)
        if node.type_parameters is not None:
            self._type_parameters(node.type_parameters)
            for argument in [*node.bases, *node.keywords]:
                self._in_annotation_scope(argument, "the definition of a generic")
            self._without_brackets(node.type_parameters, parenthesized=bool(node.bases or node.keywords)
                                   or isinstance(node.lpar, cst.LeftParen))

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.around.pop()

    def _without_brackets(self, parameters: cst.TypeParameters, parenthesized: bool) -> None:
        """`def f[T](x)` -> `def f(   x)`, `class C[T]:` -> `class C( ):` (spaces, so that lines stay)."""
        start, end = self._offsets(parameters)
        if parenthesized:  # the parameters' or bases' parenthesis moves to the type parameters' bracket
            end = self.rewrite.find("(", end) + 1
            self.rewrite.blank(start, end)
            self.rewrite.put(start, "(")
        else:
            self.rewrite.blank(start, end)
            self.rewrite.put(start, "(")
            self.rewrite.put(end - 1, ")")

    def visit_TypeAlias(self, node: cst.TypeAlias) -> None:
        """`type X[T] = v` -> `X=(    )= v` (a binding of X, and an empty tuple target), `type X = v` -> `X = v`."""
        start, _ = self._offsets(node)
        equal = self.rewrite.find("=", self._offsets(node.value)[0] - 1, step=-1)
        name = node.name.value
        if node.type_parameters is not None:
            self._type_parameters(node.type_parameters)
            self.rewrite.blank(start, equal)
            self.rewrite.put(start, name + "=(")
            self.rewrite.put(equal - 1, ")")
        else:
            self.rewrite.blank(start, equal, continued=True)
            self.rewrite.put(start, name)
        self._in_annotation_scope(node.value, "a type alias")

    def visit_TypeParameters(self, node: cst.TypeParameters) -> bool:
        return False  # checked by `_type_parameters`, then rewritten into spaces

    def _type_parameters(self, parameters: cst.TypeParameters) -> None:
        """CPython 3.13's checks of type parameters, whose brackets are rewritten away."""
        names: set[str] = set()
        defaulted = False
        for parameter in parameters.params:
            kind = parameter.param
            name = kind.name.value
            if name == "__debug__":
                self._error(kind.name, "cannot assign to __debug__")
            if name in names:
                self._error(parameter, f"duplicate type parameter '{name}'")
            names.add(name)
            if parameter.default is not None:
                defaulted = True
                self._in_annotation_scope(parameter.default, f"a {type(kind).__name__} default")
            elif defaulted:
                self._error(parameter, f"non-default type parameter '{name}' follows default type parameter",
                            parsing=True)
            bound = getattr(kind, "bound", None)
            if bound is not None:
                self._in_annotation_scope(bound, "a TypeVar constraint" if isinstance(bound, cst.Tuple)
                                          else "a TypeVar bound")

    def _in_annotation_scope(self, node: cst.CSTNode, scope: str) -> None:
        """Yield, await and := inside `node` are errors: CPython evaluates it in an annotation scope."""
        node.visit(_InAnnotationScope(self, scope))


def _parameters(parameters: cst.Parameters) -> list[cst.Param]:
    star = [parameters.star_arg] if isinstance(parameters.star_arg, cst.Param) else []
    star_star = [parameters.star_kwarg] if parameters.star_kwarg is not None else []
    return [*parameters.posonly_params, *parameters.params, *star, *parameters.kwonly_params, *star_star]


class _InAnnotationScope(cst.CSTVisitor):
    def __init__(self, checks: _Checks, scope: str) -> None:
        super().__init__()
        self.checks, self.scope = checks, scope

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False  # a function of its own

    def _found(self, node: cst.CSTNode, what: str) -> None:
        self.checks._error(node, f"{what} expression cannot be used within {self.scope}")

    def visit_Yield(self, node: cst.Yield) -> None:
        self._found(node, "yield")

    def visit_Await(self, node: cst.Await) -> None:
        self._found(node, "await")

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._found(node, "named")


def _concatenated(node: cst.ConcatenatedString, grouped: set[cst.CSTNode]) -> Iterator[cst.CSTNode]:
    """The strings of an implicit concatenation, each (and each concatenation in it) added to `grouped`."""
    for side in (node.left, node.right):
        grouped.add(side)
        if isinstance(side, cst.ConcatenatedString):
            yield from _concatenated(side, grouped)
        else:
            yield side


def _fields(parts: object) -> Iterator[cst.FormattedStringExpression]:
    """An f-string's replacement fields, those of their format specs included."""
    for part in parts:  # type: ignore[attr-defined]
        if isinstance(part, cst.FormattedStringExpression):
            yield part
            if part.format_spec:
                yield from _fields(part.format_spec)


def _literal_parts(parts: object) -> Iterator[cst.FormattedStringText]:
    """An f-string's literal text, its format specs' included."""
    for part in parts:  # type: ignore[attr-defined]
        if isinstance(part, cst.FormattedStringText):
            yield part
        elif isinstance(part, cst.FormattedStringExpression) and part.format_spec:
            yield from _literal_parts(part.format_spec)


def _literal_error(literal: str) -> str | None:
    """CPython's error decoding the string literal `literal` (prefix and quotes), if it has one."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.literal_eval(literal)
    except SyntaxError as exc:
        return exc.msg
    except (ValueError, MemoryError):
        return None
    return None
