"""How deeply a program nests, read from its tokens alone: the same answer on every Python, in time
linear in the text, with no recursion.

The parsers lintloop relies on are bounded by depth: CPython's parser and compiler give up at limits
that differ between versions (about 3,000 levels on 3.10-3.12, 6,000-10,000 on 3.13; 3.10's
`ast.parse` can even overflow the C stack), and libcst's native parser overflows its stack and is
quadratic in a long operator chain. So where their verdicts could differ, this scanner measures:

- the limits of CPython's tokenizer, the same on 3.10-3.13: more than 200 nested brackets ("too many
  nested parentheses") and 100 levels of indentation ("too many levels of indentation");
- the limits of the f-strings of CPython 3.12's tokenizer (the first to read nested f-strings): 150
  f-strings nested in each other ("too many nested f-strings") and a format spec in a replacement
  field nested in two format specs ("f-string: expressions nested too deeply");
- per logical line, the nesting depth of its expressions as a tree has it: in libcst's tree (where
  boolean operators and implicit string concatenation nest) and in CPython's (where they are flat,
  as comparisons are in both). The Python depth is never more than CPython's real depth: a statement
  deeper than `COMPILE_DEPTH` (or an `elif` chain longer) is compiled by no supported CPython. A
  statement whose libcst depth exceeds `ANALYSIS_DEPTH` is left out of the analysis: `mask` replaces
  it by `pass` (a compound statement whole, when one of its headers is that deep);
- per logical line, the frames CPython's parser stacks to read it: its PEG parser gives up past
  `PARSER_STACK` frames ("Parser stack overflowed", a MemoryError) on every version, and a statement
  takes a frame per unary operator, two per `lambda` or `**`, 22 to 31 per bracket (`PARSER_FRAMES`,
  measured on 3.10-3.13: the same counts on each, 3.12+ one frame more per statement). A frame count
  is never more than the real one: what no version parses is LL001.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_BRACKET_LEVEL = 200  # CPython's MAXLEVEL: the 201st open bracket is an error
MAX_INDENT_LEVEL = 99  # CPython's MAXINDENT is 100: the 100th indentation is an error
# No CPython 3.10-3.13 compiles a statement this deep: 3.13's C recursion limit (10,000 levels, the
# module, its blocks and the statement included: `compile_depth`) bounds every shape, and 3.10-3.12
# stop near 3,000.
COMPILE_DEPTH = 10_000
# The levels of CPython's tree above a statement's expressions: the module, the statement, its target
# or value (a definition's header: the Python depth measured there exceeds the real one by up to 2).
STATEMENT_DEPTH = 3
DEFINITION_DEPTH = 1
# Statements nested deeper than this (in libcst's tree) are not analysed: libcst parses a chain in time
# quadratic in its length (1,000 levels: 0.1-0.4 s, 20,000: minutes) and the rules walk it recursively.
# Real code stays far below (long generated sums are the deepest seen). A statement this deep is at
# least this many characters long: only those are measured (0.3 % of the time on transformers; at 200
# levels, 1.5 %).
ANALYSIS_DEPTH = 1_000
# CPython's PEG parser (Parser/parser.c, MAXSTACK) fails past 6,000 frames of its rules on 3.10-3.13.
PARSER_STACK = 6_000
# The frames a statement's parse starts with (`x = ...` at module level, 3.12+): a simple statement
# at module level, and one indentation level more (a block: `block`, `statements`, `statement`, ...).
# 3.10 and 3.11 take one frame less, but compile no statement this deep (`OLD_COMPILE_DEPTH`).
STATEMENT_FRAMES = 34
BLOCK_FRAMES = 6
OLD_COMPILE_DEPTH = 2_990  # the deepest statement CPython 3.10 and 3.11 compile (`compile_depth`, default recursion limit)
# A statement's kind changes where its expression starts: an expression statement two frames sooner,
# an `if`/`while`/`assert`/`elif` condition three, `with` two (the least of each kind: never more).
_KEYWORD_FRAMES = {"if": -3, "while": -3, "assert": -3, "elif": -3, "with": -2, "return": 0, "del": 0}
ELIF_FRAMES = 38  # an `if` at module level and its first `elif` (each `elif` one more: right-recursive)
# The frames each construct adds around what it holds: a unary operator or `not` 1, `lambda` and the
# right operand of `**` 2 (power, factor), the `else` of a conditional 1. A bracket's: (where it is
# a statement's own, where it is inside another bracket); the least measured (by bisection on CPython
# 3.10-3.13, bench/hostile/syntax.py) of a call's or a subscript's, a parenthesized expression's or
# tuple's, a list's, set's or dict's, an f-string replacement field's (an operand's costs more).
PARSER_FRAMES = {"prefix": 1, "lambda": 2, "**": 2, "else": 1}
BRACKET_FRAMES = {"call": (5, 24), "(": (10, 28), "[": (11, 29), "{": (11, 29), "field": (15, 33)}
MAX_FSTRING_LEVEL = 150  # CPython 3.12+'s tokenizer: the 150th nested f-string is an error
MAX_FORMAT_SPEC_LEVEL = 2  # 3.12+: a format spec in a field nested in two format specs is an error

_COMPOUND = frozenset({"if", "while", "for", "with", "try", "def", "class", "async", "@"})
_SOFT_COMPOUND = frozenset({"match", "case"})  # compound only when the line holds a top-level `:`
_CLAUSES = frozenset({"elif", "else", "except", "finally"})
_DECORATED = frozenset({"def", "class", "async", "@"})
_STATEMENT_KEYWORDS = frozenset({"if", "elif", "else", "while", "for", "with", "try", "except", "finally", "def",
                                 "class", "async", "return", "del", "assert", "raise", "import", "from", "global",
                                 "nonlocal", "pass", "break", "continue"})
_SEPARATOR_WORDS = frozenset({"for", "async", "as", "from", "import"}) | _STATEMENT_KEYWORDS
_SEPARATOR_OPS = frozenset({",", ";", "=", "->", "+=", "-=", "*=", "/=", "//=", "%=", "@=", "&=", "|=", "^=",
                            ">>=", "<<=", "**=", "!"})

# Binary operators: precedence (higher binds tighter), right-associative, and how libcst's and
# CPython's trees hold a chain of them ("nest": a level each; "flat": one node; "ternary": the
# `body if test` half of a conditional, whose `else` makes the node).
_BINARY: dict[str, tuple[int, bool, str, str]] = {
    ":=": (1, True, "nest", "nest"),
    "if": (2, True, "ternary", "ternary"), "else": (2, True, "nest", "nest"),
    "or": (3, False, "nest", "flat"), "and": (4, False, "nest", "flat"),
    **{op: (6, False, "flat", "flat") for op in ("<", ">", "==", ">=", "<=", "!=", "<>", "in", "not in", "is",
                                                 "is not")},
    "|": (7, False, "nest", "nest"), "^": (8, False, "nest", "nest"), "&": (9, False, "nest", "nest"),
    "<<": (10, False, "nest", "nest"), ">>": (10, False, "nest", "nest"),
    "+": (11, False, "nest", "nest"), "-": (11, False, "nest", "nest"),
    **{op: (12, False, "nest", "nest") for op in ("*", "/", "//", "%", "@")},
    "**": (14, True, "nest", "nest"),
    "concat": (16, True, "nest", "flat"),
}
# Prefix operators: precedence, and the levels they add in libcst's and CPython's trees (a star has no
# node of its own in a dict display: counted as none in CPython's, so that its depth is never too high).
_PREFIX = {"lambda": (0, 1, 1), "yield": (0, 1, 1), "not": (5, 1, 1), "*": (6, 1, 0), "**": (6, 1, 0),
           "-": (13, 1, 1), "+": (13, 1, 1), "~": (13, 1, 1), "await": (15, 1, 1)}

_TOKEN = re.compile(r"""
    (?P<space>[ \t\f]+)
  | (?P<comment>\#[^\r\n]*)
  | (?P<continuation>\\(?:\r\n|\r|\n))
  | (?P<newline>\r\n|\r|\n)
  | (?P<string>(?:[rRbBuUfFtT]{1,3})?(?:'''|\"\"\"|'|"))
  | (?P<number>0[xXoObB][0-9a-fA-F_]*[jJ]?|(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)(?:[eE][+-]?[\d_]+)?[jJ]?)
  | (?P<name>[^\W\d]\w*)
  | (?P<op>\*\*=|//=|>>=|<<=|\.\.\.|->|:=|\*\*|//|>>|<<|<=|>=|==|!=|<>|[-+*/%@&|^]=|[-+*/%@&|^~<>()\[\]{},:;.=!])
  | (?P<other>.)
""", re.VERBOSE | re.DOTALL)
_STRING_BODY = {quote: re.compile(pattern, re.DOTALL) for quote, pattern in (
    ("'", r"(?:[^'\\\r\n]|\\.|\\\r\n)*'"), ('"', r'(?:[^"\\\r\n]|\\.|\\\r\n)*"'),
    ("'''", r"(?:[^'\\]|\\.|'(?!''))*'''"), ('"""', r'(?:[^"\\]|\\.|"(?!""))*"""'))}
# The literal part of an f-string: up to its end, a replacement field, or a stray brace.
_FSTRING_LITERAL = {quote: re.compile(pattern, re.DOTALL) for quote, pattern in (
    ("'", r"(?:[^'\\\r\n{}]|\\.|\{\{|\}\})*"), ('"', r'(?:[^"\\\r\n{}]|\\.|\{\{|\}\})*'),
    ("'''", r"(?:[^'\\{}]|\\.|\{\{|\}\}|'(?!''))*"), ('"""', r'(?:[^"\\{}]|\\.|\{\{|\}\}|"(?!""))*'))}
_FORMAT_SPEC = re.compile(r"[^{}\r\n]*")


@dataclass
class Line:
    """A logical line: its lines in the file (1-based, inclusive), where it starts, and how deep it nests."""

    first: int
    last: int
    column: int  # 1-based, of its first token
    indent: int  # as CPython measures it (tabs to multiples of 8)
    keyword: str = ""  # its first token, when that is a statement keyword, `match`/`case` or `@`
    depth: int = 0  # in libcst's tree
    python_depth: int = 0  # in CPython's tree (never more than the real depth)
    parser_frames: int = 0  # CPython's parser stack at its deepest reading it (never more than the real one)
    owner: int | None = None  # a compound statement's header: its index in `Nesting.compounds`
    blocks: int = 0  # the indented blocks it is in
    assigns: bool = False  # a `=` or an augmented assignment at its top level


@dataclass
class Nesting:
    lines: list[Line] = field(default_factory=list)
    compounds: list[list[int]] = field(default_factory=list)  # [first line (its first decorator's), last line]
    # The first limit of CPython's tokenizer the text exceeds: (line, column (1-based), message).
    limit_error: tuple[int, int, str] | None = None
    # The first `if` whose `elif` chain no CPython compiles (its depth: its `elif`s).
    long_elif_chain: TooDeep | None = None
    comments: list[tuple[int, int, str]] = field(default_factory=list)  # (line, 0-based column, text)
    long_if_chains: list[int] = field(default_factory=list)  # `if`s with over ANALYSIS_DEPTH `elif`s: their compounds

    def too_deep(self) -> TooDeep | None:
        """Where the first statement that no CPython can compile starts, and how: nested deeper than
        any compiles, or more frames than any parser stacks."""
        found = [TooDeep(line.first, line.column, depth, frames) for line in self.lines
                 if not compiled_by_some(depth := compile_depth(line), frames := line.parser_frames + statement_frames(line))]
        if self.long_elif_chain is not None:
            found.append(self.long_elif_chain)
        return min(found) if found else None

    def masked_ranges(self) -> list[tuple[int, int]]:
        """The line ranges `mask` replaces: each statement nested deeper than ANALYSIS_DEPTH (a compound
        statement whole when one of its headers is, or when its `elif`s, each nested in the one before,
        are more), outermost ones only, in order."""
        ranges = sorted({(line.first, line.last) if line.owner is None else tuple(self.compounds[line.owner])
                         for line in self.lines if line.depth > ANALYSIS_DEPTH}
                        | {tuple(self.compounds[index]) for index in self.long_if_chains})
        kept: list[tuple[int, int]] = []
        for first, last in ranges:
            if kept and first <= kept[-1][1]:
                kept[-1] = (kept[-1][0], max(kept[-1][1], last))
            else:
                kept.append((first, last))
        return kept


@dataclass(frozen=True, order=True)
class TooDeep:
    """A statement no CPython compiles: where it starts, how deep it nests in CPython's tree, and how
    many frames CPython's parser would stack to read it."""

    line: int
    column: int
    depth: int
    parser_frames: int

    @property
    def too_complex_to_parse(self) -> bool:
        """Whether the parser's stack fails first (else the compiler's depth)."""
        return self.depth < COMPILE_DEPTH


def compile_depth(line: Line) -> int:
    """How deep CPython's compiler recurses into `line` (never deeper than it does)."""
    above = DEFINITION_DEPTH if line.keyword in _DECORATED else STATEMENT_DEPTH
    return line.python_depth + above + line.blocks


def statement_frames(line: Line) -> int:
    """The frames CPython's parser has stacked where `line`'s expressions start (never more)."""
    if line.keyword:
        kind = _KEYWORD_FRAMES.get(line.keyword, -3)
    else:
        kind = 0 if line.assigns else -2
    return STATEMENT_FRAMES + BLOCK_FRAMES * line.blocks + kind


def compiled_by_some(depth: int, parser_frames: int) -> bool:
    """Whether some CPython 3.10-3.13 compiles a statement of this depth and parser frames: 3.13 within
    its compiler's depth, or 3.10/3.11 (a parser frame fewer) within theirs."""
    return (parser_frames <= PARSER_STACK and depth < COMPILE_DEPTH) or (
        parser_frames - 1 <= PARSER_STACK and depth <= OLD_COMPILE_DEPTH)


def mask(lines: list[str], ranges: list[tuple[int, int]]) -> str:
    """The text of `lines` (each with its ending) with every statement in `ranges` replaced by `pass`
    at its first line's indentation and empty lines after it: every other line stays where it was."""
    out = list(lines)
    for first, last in ranges:
        head = out[first - 1]
        body = head.rstrip("\r\n")
        out[first - 1] = body[:len(body) - len(body.lstrip(" \t\f"))] + "pass" + head[len(body):]
        for number in range(first, last):
            line = out[number]
            out[number] = line[len(line.rstrip("\r\n")):]
    return "".join(out)


def scan(text: str, first_line: int = 1) -> Nesting:
    """Measure `text`: whole logical lines, the first being line `first_line` of the file."""
    return _Scanner(text, first_line).run()


# ----- depth of an expression ----------------------------------------------------------------------

Depth = tuple[int, int, int, str]  # (libcst depth, Python depth, parser frames, the operator of a flat chain it ends)
Measure = tuple[int, int, int]  # (libcst depth, Python depth, parser frames)


class _Frame:
    """A bracket's content (or a line's top level), reduced by operator precedence into depths."""

    __slots__ = ("operands", "operators", "best", "expect_operand", "lambdas", "separated", "field", "for_target")

    def __init__(self, field: bool = False) -> None:
        self.operands: list[Depth] = []
        self.operators: list[tuple[int, bool, str, str, str]] = []  # precedence, right, cst kind, py kind, name
        self.best: Measure = (0, 0, 0)
        self.expect_operand = True
        self.lambdas = 0  # lambda parameter lists not yet ended by their `:`
        self.separated = False  # a comma or clause in it: a tuple, not a parenthesized expression
        self.field = field  # an f-string's replacement field
        self.for_target = False  # after `for`: its `in` ends the target, it compares nothing

    def operand(self, depth: Depth) -> None:
        if self.lambdas:
            return  # a parameter or a default value: no part of the lambda's depth
        if not self.expect_operand:  # operands side by side (`match x`, a soft keyword): a new expression
            self.end_expression()
        self.operands.append(depth)
        self.expect_operand = False

    def binary(self, name: str) -> None:
        if self.lambdas:
            return
        if self.expect_operand:  # where an operand belongs: broken code, no depth
            self.end_expression()
            return
        precedence, right, _, _ = _BINARY[name]
        while self.operators and (self.operators[-1][0] > precedence
                                  or (self.operators[-1][0] == precedence and not right)):
            self._reduce()
        self.operators.append((precedence, right, *_BINARY[name][2:], name))
        self.expect_operand = True

    def prefix(self, name: str) -> None:
        if self.lambdas and name != "lambda":
            return  # `lambda *args: ...`: a parameter
        if not self.expect_operand:
            self.end_expression()
        self.operators.append((_PREFIX[name][0], True, "prefix", "prefix", name))
        if name == "lambda":
            self.lambdas += 1

    def colon(self) -> None:
        if self.lambdas:  # the end of a lambda's parameters: its body follows
            self.lambdas -= 1
        else:
            self.end_expression(separates=True)

    def _reduce(self) -> None:
        _, _, cst_kind, py_kind, name = self.operators.pop()
        if not self.operands:
            return
        right = self.operands.pop()
        if cst_kind == "prefix":
            _, cst_levels, py_levels = _PREFIX[name]
            frames = PARSER_FRAMES["lambda" if name == "lambda" else "prefix"]
            self.operands.append((right[0] + cst_levels, right[1] + py_levels, right[2] + frames, ""))
            return
        left = self.operands.pop() if self.operands else (0, 0, 0, "")
        chained = left[3] == name or (left[3] in _COMPARISONS and name in _COMPARISONS) or (
            name == "concat" and left[3] == "string")
        # A left operand is read in its rule's loop: only a right-recursive operator stacks its right one.
        frames = max(left[2], right[2] + PARSER_FRAMES.get(name, 0))
        self.operands.append((_combine(left[0], right[0], cst_kind, chained),
                              _combine(left[1], right[1], py_kind, chained), frames, name))

    def end_expression(self, separates: bool = False) -> None:
        """End the current expression (at a comma, `=`, `:`, ...): its depth joins the frame's best.
        In a lambda's parameters, commas and `=` separate parameters: the lambda goes on."""
        if self.lambdas:
            return
        while self.operators:
            self._reduce()
        for depth in self.operands:
            self.absorb(depth[:3])
        self.operands.clear()
        self.expect_operand = True
        self.separated = self.separated or separates

    def absorb(self, depth: Measure) -> None:
        """A nested structure that is no operand (a lambda's default value, an f-string field)."""
        best = self.best
        self.best = (max(best[0], depth[0]), max(best[1], depth[1]), max(best[2], depth[2]))

    def result(self) -> Measure:
        self.lambdas = 0  # a lambda never ended by its `:`: broken code
        self.end_expression()
        return self.best


_OPENING = {")": "(", "]": "[", "}": "{"}
_COMPARISONS = frozenset(name for name, (precedence, *_) in _BINARY.items() if precedence == 6)


def _combine(left: int, right: int, kind: str, chained: bool) -> int:
    if kind == "ternary" or (kind == "flat" and chained):
        return max(left, right)
    return max(left, right) + 1


def _indent_width(text: str) -> int:
    """A line's indentation as CPython's tokenizer measures it (tabs to multiples of 8)."""
    column = 0
    for char in text:
        if char == " ":
            column += 1
        elif char == "\t":
            column = (column // 8 + 1) * 8
        elif char == "\f":
            column = 0
        else:
            break
    return column


# ----- the scanner ---------------------------------------------------------------------------------


class _Scanner:
    def __init__(self, text: str, first_line: int) -> None:
        self.text = text
        self.line = first_line
        self.line_start = 0  # offset of the current physical line
        self.result = Nesting()
        self.frames: list[_Frame] = [_Frame()]
        self.current: Line | None = None  # the logical line being read
        self.top_colon = False  # the current line has a `:` at its top level (a soft keyword's header)
        self.after_is = False  # the previous token was `is` (of `is not`)
        self.after_not = False  # the previous token was the `not` of `not in`
        self.after_dot = False  # the previous token was a `.`: this name is an attribute
        self.indents = [0]
        self.open_compounds: list[tuple[int, int]] = []  # (indentation, index in result.compounds)
        self.decorated = False  # the previous logical line was a decorator
        self.elif_chains: dict[int, tuple[Line, int]] = {}  # indentation -> (the `if`, its elifs so far)
        self.fstring_level = 0  # the f-strings the scanner is in

    def run(self) -> Nesting:
        text, position, end = self.text, 0, len(self.text)
        match = _TOKEN.match
        while position < end:
            token = match(text, position)
            kind = token.lastgroup
            if kind == "newline":
                if len(self.frames) == 1:
                    self._end_of_line()
                self._next_line(token.end())
            elif kind == "continuation":
                self._next_line(token.end())
            elif kind == "string":
                self._begin(position, "")
                position = self._string(token.group(), token.end())
                continue
            elif kind == "comment":
                self.result.comments.append((self.line, position - self.line_start, token.group()))
            elif kind != "space":
                value = token.group()
                self._begin(position, value)
                self._token(kind, value, position)
            position = token.end()
        self._end_of_line()
        self._close_compounds(-1, "")
        return self.result

    # ----- tokens ---------------------------------------------------------------------------------
    def _next_line(self, start: int) -> None:
        self.line += 1
        self.line_start = start

    def _skip_lines(self, start: int, end: int) -> None:
        """Count the line ends inside text[start:end] (a string's): \\n, \\r\\n or \\r each."""
        piece = self.text[start:end]
        breaks = piece.count("\n") + piece.count("\r") - piece.count("\r\n")
        if breaks:
            self.line += breaks
            self.line_start = start + max(piece.rfind("\n"), piece.rfind("\r")) + 1

    def _begin(self, position: int, value: str) -> None:
        """A token `value` starts at `position`: at the start of a logical line, open the line."""
        if self.current is not None:
            return
        indent = _indent_width(self.text[self.line_start:position])
        line = self.current = Line(self.line, self.line, position - self.line_start + 1, indent)
        if value in _STATEMENT_KEYWORDS or value in _SOFT_COMPOUND or value == "@":
            line.keyword = value
        if indent > self.indents[-1]:
            self.indents.append(indent)
            if len(self.indents) - 1 > MAX_INDENT_LEVEL and self.result.limit_error is None:
                self.result.limit_error = (self.line, 1, "too many levels of indentation")
        else:
            while len(self.indents) > 1 and self.indents[-1] > indent:
                self.indents.pop()
        line.blocks = len(self.indents) - 1

    def _token(self, kind: str, value: str, position: int) -> None:
        frame = self.frames[-1]
        assert self.current is not None
        self.current.last = self.line
        after_is, after_not, after_dot = self.after_is, self.after_not, self.after_dot
        self.after_is = self.after_not = self.after_dot = False
        if kind == "name":
            if after_dot:
                return  # the attribute's name: its level was counted at the `.`
            if value == "not" and after_is:
                return  # `is not`: one comparison
            if value == "in" and after_not:
                return  # `not in`: one comparison
            self._name(frame, value)
        elif kind == "op":
            self._operator(frame, value, position)
        else:  # a number, or a character Python has no token for
            frame.operand((1, 1, 0, ""))

    def _name(self, frame: _Frame, value: str) -> None:
        if value == "in" and frame.for_target:
            frame.for_target = False
            frame.end_expression(separates=True)
        elif value in ("and", "or", "is", "in"):
            frame.binary(value)
            self.after_is = value == "is"
        elif value == "not":
            if frame.expect_operand:
                frame.prefix("not")
            else:
                frame.binary("not in")
                self.after_not = True
        elif value in ("if", "else") and not frame.expect_operand:
            frame.binary(value)
        elif value in ("lambda", "await", "yield"):
            frame.prefix(value)
        elif value in _SEPARATOR_WORDS or value in ("if", "else"):
            frame.end_expression(separates=True)
            frame.for_target = value == "for"
        else:
            frame.operand((1, 1, 0, ""))

    def _operator(self, frame: _Frame, value: str, position: int) -> None:
        if value in "([{":
            if len(self.frames) > MAX_BRACKET_LEVEL and self.result.limit_error is None:
                self.result.limit_error = (self.line, position - self.line_start + 1, "too many nested parentheses")
            self.frames.append(_Frame())
        elif value in ")]}":
            self._close_frame(value)
        elif value == ".":
            if not frame.expect_operand and frame.operands and self.current_keyword not in ("import", "from"):
                cst, py, frames, _ = frame.operands.pop()
                frame.operands.append((cst + 1, py + 1, frames, ""))
                self.after_dot = True
        elif value == ":":
            frame.colon()
            if len(self.frames) == 1:
                self.top_colon = True
        elif value == "...":
            frame.operand((1, 1, 0, ""))
        elif value in _SEPARATOR_OPS:
            if value[-1] == "=" and len(self.frames) == 1 and not frame.lambdas and self.current is not None:
                self.current.assigns = True  # `=`, `+=`, ...: an assignment statement
            frame.end_expression(separates=True)
        elif frame.expect_operand and value in _PREFIX:
            frame.prefix(value)
        elif value in _BINARY:
            frame.binary(value)

    @property
    def current_keyword(self) -> str:
        return self.current.keyword if self.current is not None else ""

    def _close_frame(self, closing: str) -> None:
        if len(self.frames) == 1:
            return  # an unbalanced closing bracket: broken code, the parser will say so
        inner_frame = self.frames.pop()
        inner = inner_frame.result()
        frame = self.frames[-1]
        if frame.lambdas:
            frame.absorb(inner)
        elif closing != "}" and not frame.expect_operand and frame.operands:  # a call or subscript
            cst, py, frames, _ = frame.operands.pop()
            frame.operands.append((max(cst, inner[0] + 1) + 1, max(py, inner[1]) + 1,
                                   max(frames, inner[2] + self._bracket_frames("call")), ""))
        elif (closing == ")" and not inner_frame.separated and inner[:2] != (0, 0)) or self.current_keyword in (
                "import", "from"):  # a parenthesized expression, or the names an import lists
            frame.operand((inner[0], inner[1], inner[2] + self._bracket_frames("("), ""))
        else:  # a tuple, list, set, dict or comprehension
            frame.operand((inner[0] + 1, inner[1] + 1, inner[2] + self._bracket_frames(_OPENING[closing]), ""))

    def _bracket_frames(self, kind: str) -> int:
        """What a bracket of `kind` just closed adds to the parser's frames, where it is."""
        return BRACKET_FRAMES[kind][len(self.frames) > 1]

    # ----- strings ---------------------------------------------------------------------------------
    def _string(self, opening: str, position: int) -> int:
        """Read the string opened by `opening` (prefix and quote), whose body starts at `position`; return
        the offset after it. An f-string's replacement fields are read as code (PEP 701)."""
        prefix = opening.rstrip("'\"")
        quote = opening[len(prefix):]
        frame = self.frames[-1]
        assert self.current is not None
        self.after_is = self.after_not = self.after_dot = False
        if not frame.expect_operand and frame.operands and frame.operands[-1][3] in ("string", "concat"):
            frame.binary("concat")
        if "f" in prefix or "F" in prefix or "t" in prefix or "T" in prefix:
            self.fstring_level += 1
            if self.fstring_level >= MAX_FSTRING_LEVEL and self.result.limit_error is None:
                self.result.limit_error = (self.line, position - len(quote) - self.line_start + 1,
                                           "too many nested f-strings")
            end = self._fstring(quote, position)
            self.fstring_level -= 1
        else:
            body = _STRING_BODY[quote].match(self.text, position)
            end = body.end() if body else len(self.text)  # unterminated: the rest is the string
            self._skip_lines(position, end)
        self.frames[-1].operand((1, 1, 0, "string"))
        self.current.last = self.line
        return end

    def _fstring(self, quote: str, position: int) -> int:
        text = self.text
        literal_part = _FSTRING_LITERAL[quote].match
        while True:
            literal = literal_part(text, position)
            self._skip_lines(position, literal.end())
            position = literal.end()
            if text.startswith(quote, position):
                return position + len(quote)
            if position >= len(text) or text[position] in "\r\n":
                return position  # unterminated: the tokenizer's error, the parser reports it
            if text[position] == "}":  # a lone `}`: broken, read on
                position += 1
                continue
            position = self._replacement_field(quote, position + 1)

    def _replacement_field(self, quote: str, position: int, in_specs: int = 0) -> int:
        """Read a replacement field's code from `position` (after its `{`) to its `}`; return the offset
        after that. Its format spec may hold fields of its own; `in_specs`: the format specs it is in."""
        text = self.text
        level = len(self.frames)
        if level > MAX_BRACKET_LEVEL and self.result.limit_error is None:
            self.result.limit_error = (self.line, position - self.line_start, "too many nested parentheses")
        field_frame = _Frame(field=True)
        self.frames.append(field_frame)
        match = _TOKEN.match
        while position < len(text):
            if len(self.frames) == level + 1:
                if text.startswith(quote, position):
                    break  # the f-string ends inside its field: broken code
                char = text[position]
                if char == "}":
                    position += 1
                    break
                if char == ":" and not field_frame.lambdas:
                    if in_specs >= MAX_FORMAT_SPEC_LEVEL and self.result.limit_error is None:
                        self.result.limit_error = (self.line, position - self.line_start + 1,
                                                   "f-string: expressions nested too deeply")
                    position = _FORMAT_SPEC.match(text, position + 1).end()
                    while text.startswith("{", position):
                        end = self._replacement_field(quote, position + 1, in_specs + 1)
                        position = _FORMAT_SPEC.match(text, end).end()
                    continue
            token = match(text, position)
            kind = token.lastgroup
            if kind == "newline" or kind == "continuation":
                self._next_line(token.end())
            elif kind == "string":
                position = self._string(token.group(), token.end())
                continue
            elif kind == "comment":
                self.result.comments.append((self.line, position - self.line_start, token.group()))
            elif kind != "space":
                self._token(kind, token.group(), position)
            position = token.end()
        while len(self.frames) > level + 1:
            self._close_frame(")")
        inner = self.frames.pop().result()
        self.frames[-1].absorb((inner[0] + 1, inner[1] + 1, inner[2] + self._bracket_frames("field")))
        return position

    # ----- logical lines and statements -----------------------------------------------------------
    def _end_of_line(self) -> None:
        line = self.current
        if line is None:
            return
        while len(self.frames) > 1:  # unclosed brackets at the end of the text
            self._close_frame(")")
        line.depth, line.python_depth, line.parser_frames = self.frames[0].result()
        self.frames = [_Frame()]
        self.current = None
        self.after_is = self.after_not = self.after_dot = False
        keyword = line.keyword
        if keyword in _SOFT_COMPOUND and not self.top_colon:
            keyword = ""  # `match = 1`, `case(x)`: a simple statement
        self.top_colon = False
        self._statement(line, keyword)
        self.result.lines.append(line)

    def _statement(self, line: Line, keyword: str) -> None:
        """Place `line` among the compound statements: a clause or decorated definition continues the
        statement at its indentation; a compound keyword opens one; any line closes deeper ones."""
        continues = keyword in _CLAUSES or (self.decorated and keyword in _DECORATED)
        self._close_compounds(line.indent, keyword if continues else "")
        open_here = self.open_compounds and self.open_compounds[-1][0] == line.indent
        if continues and open_here:
            line.owner = self.open_compounds[-1][1]
        elif keyword in _COMPOUND or keyword in _SOFT_COMPOUND:
            self.result.compounds.append([line.first, line.last])
            self.open_compounds.append((line.indent, len(self.result.compounds) - 1))
            line.owner = len(self.result.compounds) - 1
        self.decorated = keyword == "@"
        for _, index in self.open_compounds:
            self.result.compounds[index][1] = line.last
        self._count_elif(line, keyword)

    def _close_compounds(self, indent: int, clause: str) -> None:
        """Close the compound statements that a line at `indent` ends (all of them at -1); a clause
        (`else`, ...) or a decorated definition keeps the one at its own indentation open."""
        while self.open_compounds and (self.open_compounds[-1][0] > indent
                                       or (self.open_compounds[-1][0] == indent and not clause)):
            self.open_compounds.pop()

    def _count_elif(self, line: Line, keyword: str) -> None:
        """Both trees nest each `elif` in the `if` before it, and CPython's parser reads it recursively
        (a frame each): a chain longer than ANALYSIS_DEPTH is not analysed, and one that no CPython
        parses and compiles is LL001."""
        for indent in [i for i in self.elif_chains if i > line.indent or (i == line.indent and keyword != "elif")]:
            del self.elif_chains[indent]
        if keyword == "if":
            self.elif_chains[line.indent] = (line, 0)
        elif keyword == "elif" and line.indent in self.elif_chains:
            head, elifs = self.elif_chains[line.indent]
            elifs += 1
            self.elif_chains[line.indent] = (head, elifs)
            if elifs == ANALYSIS_DEPTH + 1 and head.owner is not None:
                self.result.long_if_chains.append(head.owner)
            frames = ELIF_FRAMES + BLOCK_FRAMES * head.blocks + elifs
            if self.result.long_elif_chain is None and not compiled_by_some(elifs, frames):
                self.result.long_elif_chain = TooDeep(head.first, head.column, elifs, frames)
