"""Jupyter notebooks: their code cells as one Python module, and fixed code written back into the cells.

A notebook's code cells, in order, are one program (a model defined in cell 3 and trained in cell
7): lintloop lints them as one module. IPython syntax that is not Python (line magics, shell
escapes, `?` help, a cell magic's first line) is masked line by line, so that it is neither a
syntax error nor hides the code around it; cells in another language (`%%bash`) are left out.
Every cell is preceded in the module by a marker comment line, so that fixed module text can be
cut back into cells, and every masked line carries a marker comment, so that it is restored
exactly. Positions are mapped back to (cell, line in the cell): cells are numbered from 1 by
their place in the notebook, markdown cells included, as the notebook's editor shows them.

Reading uses nbformat (its reader: JSON, the format version, conversion of old versions), on JSON
nested no deeper than lintloop.bounded_json allows;
writing replaces only the text of the changed cells' `source` values in the file, so outputs,
execution counts, metadata, key order, indentation and the final newline stay byte for byte.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass, field

from lintloop.bounded_json import JSONBoundsError, check_bounds
from lintloop.source import source_lines

NOTEBOOK_SUFFIX = ".ipynb"

# Cell magics whose body is Python run in the kernel: their first line is masked, the body linted.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug", "memit", "mprun"})
CELL_MARKER = "# lintloop-cell "
# IPython removes the indentation a cell starts with before running it; an indented cell is linted as
# the body of an `if True:` on its marker line, so that its columns stay the cell's.
INDENTED_CELL_MARKER = "if True:  " + CELL_MARKER
_CELL_MARKER_LINE = re.compile(r"(?:if True:  )?# lintloop-cell (\d+)\r?\n?")
MASK_MARKER = "# lintloop-masked "
# IPython's automagics and shell aliases: a one-line cell `ls data` or `timeit f()` runs as `%ls data`.
AUTOMAGICS = frozenset({
    "alias", "autoreload", "cat", "cd", "clear", "conda", "config", "cp", "debug", "env", "history", "less",
    "load", "load_ext", "ls", "matplotlib", "mkdir", "mv", "pdb", "pip", "prun", "pwd", "reset", "rm", "rmdir",
    "run", "save", "store", "sx", "system", "tensorboard", "time", "timeit", "who", "whos", "xmode"})
_CELL_MAGIC = re.compile(r"%%(\w+)")
# IPython's `%%writefile [-a] PATH` (`%%file` is the same magic): a file written, not code run in the kernel.
WRITEFILE_MAGICS = frozenset({"writefile", "file"})
APPEND_FLAGS = frozenset({"-a", "--append"})
# `name?`, `name??`, `?name`, `??name` (dotted names, `*` wildcards): IPython's help, not Python.
_HELP = re.compile(r"(\?{1,2}[\w.*]*(?:\(\))?|[\w.*]+(?:\(\))?\?{1,2})\s*(#.*)?")
# A cell pasted from a console: `>>> x = 1` / `... ` or `In [3]: x = 1` / `   ...: ` (IPython strips them).
_CLASSIC_PROMPT = re.compile(r"(>>>|\.\.\.)( |$)")
_IPYTHON_PROMPT = re.compile(r"(In \[\d+\]: |\s*\.\.\.+: )")
# `files = !ls`, `out = %sx ls`, `x = %time f()`: IPython assigns the output of a command or magic.
_ASSIGNED_ESCAPE = re.compile(r"([\w.\[\]\s,()*]+?=\s*)[!%]")
_MARKER_SUFFIX = re.compile(r"  # lintloop-masked (\d+)$")


class NotebookError(Exception):
    """Not a notebook: invalid JSON, or JSON that is not a Jupyter notebook. The message says which."""


def _opening_comments(source: str) -> str:
    """The text of the comment lines a cell opens with, before its first line of code."""
    opening = []
    for line in source.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break
        opening.append(stripped.lstrip("#").strip())
    return "\n".join(filter(None, opening))


def is_notebook(path: str) -> bool:
    return path.endswith(NOTEBOOK_SUFFIX)


@dataclass(frozen=True)
class CodeCell:
    index: int  # 1-based place of the cell in the notebook, markdown cells counted
    source: str
    # What a reader reads as what the code shows: the markdown cell just before it, and the comments
    # the cell opens with ("# WARNING: a new Python value traces the function again").
    prose: str = ""


@dataclass
class CellPosition:
    cell: int
    line: int  # 1-based line in the cell


@dataclass
class NotebookModule:
    """The code cells as one module: its text, and for each of its lines the cell line it is."""

    text: str
    lines: list[CellPosition | None]  # None: a marker line between cells
    masked: dict[int, str] = field(default_factory=dict)  # mask number -> the original line
    # Cells pasted from a console: their text with the prompts blanked (such cells are not fixed).
    unprompted: dict[int, str] = field(default_factory=dict)
    written: str | None = None  # the path a `%%writefile` module is written to; None: the kernel's module
    prose: dict[int, str] = field(default_factory=dict)  # cell -> its prose (CodeCell.prose)

    def cell_texts(self) -> dict[int, str]:
        """Each cell's part of the module, its marker line first (so that it parses alone)."""
        parts: dict[int, list[str]] = {}
        current: list[str] = []
        for text_line, where in zip(source_lines(self.text), self.lines):
            if where is None:
                current = []
                parts[int(_CELL_MARKER_LINE.fullmatch(text_line).group(1))] = current  # type: ignore[union-attr]
            current.append(text_line)
        return {cell: "".join(lines) for cell, lines in parts.items()}

    @property
    def cells(self) -> list[int]:
        """The cells in the module (code cells in Python, and not left out as unparsable)."""
        return sorted({where.cell for where in self.lines if where is not None} | set(self.cell_texts()))

    def file_path(self, notebook_path: str | os.PathLike[str] | None) -> str | None:
        """Where the module's code lives on disk, for questions about the other modules of its project:
        the notebook for the kernel's module; for a written one, where a relative `%%writefile` puts it
        (the kernel's working directory: the notebook's). An absolute or `~` path names a file of the
        machine the notebook ran on (`/content/train.py`): taken as beside the notebook, never read here."""
        if notebook_path is None or self.written is None:
            return None if notebook_path is None else os.fspath(notebook_path)
        written = self.written
        if os.path.isabs(written) or written.startswith("~"):
            written = os.path.basename(written)
        return os.path.join(os.path.dirname(notebook_path), written)

    def line_label(self, line: int) -> str:
        """How a message names a module line: "3 of cell 5" (as in "called at line 3 of cell 5")."""
        where = self.position(line)
        return f"{where.line} of cell {where.cell}"

    def position(self, line: int) -> CellPosition:
        """The cell position of a module line (a line past the end: the last cell's last line + n)."""
        if 1 <= line <= len(self.lines) and self.lines[line - 1] is not None:
            return self.lines[line - 1]  # type: ignore[return-value]
        before = next((p for p in reversed(self.lines[:max(0, line - 1)]) if p is not None), None)
        if before is None:
            return CellPosition(1, 1)
        return CellPosition(before.cell, before.line + 1)


@dataclass
class Notebook:
    text: str
    cells: list[CodeCell]
    # (start, end) of each cell's `source` value in `text`, by cell index; only where it could be located.
    source_spans: dict[int, tuple[int, int]]
    python: bool  # the kernel is Python (or says nothing)

    @classmethod
    def parse(cls, text: str) -> Notebook:
        import nbformat  # ~200 ms: imported only when a notebook is linted
        from nbformat.reader import NotJSONError, reads

        if not text.strip():
            raise NotebookError("not a notebook: the file is empty")
        try:
            # nbformat's reader recurses once or twice per level: JSON deeper than the bound would fail
            # there, or not, depending on the host and the caller's stack.
            check_bounds(text)
        except JSONBoundsError as exc:
            raise NotebookError(f"not a notebook: its JSON has {exc}") from None
        try:
            node = reads(text)
            major = node.get("nbformat")
            if major != 4:
                node = nbformat.convert(node, 4)
        except NotJSONError:
            raise NotebookError("not a notebook: the file is not valid JSON") from None
        except Exception as exc:  # nbformat's errors for JSON that is no notebook are of several kinds
            raise NotebookError(f"not a notebook: {exc}") from None
        raw_cells = node.get("cells")
        if not isinstance(raw_cells, list):
            raise NotebookError("not a notebook: no list of cells")
        cells = []
        prose = ""
        for index, cell in enumerate(raw_cells, 1):
            if not isinstance(cell, dict):
                raise NotebookError(f"not a notebook: cell {index} is not an object")
            source = cell.get("source", "")
            if isinstance(source, list):
                source = "".join(s for s in source if isinstance(s, str))
            if cell.get("cell_type") != "code":
                prose = source if cell.get("cell_type") == "markdown" and isinstance(source, str) else ""
                continue
            if not isinstance(source, str):
                raise NotebookError(f"not a notebook: cell {index} has no text source")
            cells.append(CodeCell(index, source, "\n".join(filter(None, (prose, _opening_comments(source))))))
            prose = ""
        spans = _source_spans(text) if major == 4 else {}
        return cls(text, cells, spans, _python_kernel(node.get("metadata")))

    def module(self, leave_out: frozenset[int] = frozenset()) -> NotebookModule:
        """The code cells as one module (other-language cells and the cells `leave_out` names left
        out, IPython syntax masked)."""
        pieces: list[tuple[int, list[str]]] = []
        masked: dict[int, str] = {}
        unprompted: dict[int, str] = {}
        for cell in self.cells:
            source = _without_prompts(cell.source)
            if source != cell.source:
                unprompted[cell.index] = source
            cell_lines = masked_lines(source, masked) if cell.index not in leave_out else None
            if cell_lines is not None:  # else %%bash and the like
                pieces.append((cell.index, cell_lines))
        module = _joined(pieces, masked, unprompted)
        module.prose = {cell.index: cell.prose for cell in self.cells if cell.prose}
        return module

    def written_modules(self) -> list[NotebookModule]:
        """The Python files the notebook's `%%writefile NAME.py` cells write, each as a module of its
        own (another program, run in another process, with its own imports), in the order first written.

        Each is the file as it is after the notebook's last write to it: the file the workers run
        (`!torchrun train.py` runs whatever the cells above it wrote; a later plain `%%writefile` of
        the same path replaces it, a `-a` cell appends to it). A cell's lines up to its magic line
        are kept as comments (they are not written, and so that positions stay the cell's lines)."""
        writes: dict[str, list[tuple[int, list[str]]]] = {}
        masked_by_path: dict[str, dict[int, str]] = {}
        for cell in self.cells:
            lines = source_lines(cell.source)
            first_code = _first_code(lines)
            written = written_file(lines[first_code]) if first_code is not None else None
            if written is None:
                continue
            path, append = written
            key = os.path.normpath(path)
            if not append or key not in writes:
                writes[key], masked_by_path[key] = [], {}
            masked = masked_by_path[key]
            # The magic line masked as a comment at column 0, not as `pass`: an appended cell may go on
            # with an indented block the cell before opened, and a comment does not end it.
            writes[key].append((cell.index, [*lines[:first_code], _mask(lines[first_code], "#", masked),
                                             *lines[first_code + 1:]]))
        return [_joined(pieces, masked_by_path[key], written=key) for key, pieces in writes.items()]

    def cell_sources(self, module_text: str, module: NotebookModule) -> dict[int, str]:
        """Cut fixed module text back into cell sources (masked lines restored); raises
        NotebookError when the fixed text no longer has the shape of the cells."""
        original = {c.index: c.source for c in self.cells}
        sources: dict[int, str] = {}
        current: int | None = None
        collected: list[str] = []
        restored: list[int] = []
        for line in source_lines(module_text):
            marker = _CELL_MARKER_LINE.fullmatch(line)
            if marker is not None:
                if current is not None:
                    sources[current] = "".join(collected)
                current, collected = int(marker.group(1)), []
                continue
            if current is None:
                raise NotebookError("the fixed code does not start with a cell")
            collected.append(_unmask(line, module.masked, restored))
        if sorted(restored) != sorted(module.masked):
            raise NotebookError("a fix changed a line of IPython syntax")
        if current is not None:
            sources[current] = "".join(collected)
        for index, source in sources.items():
            if not original[index].endswith("\n") and source.endswith("\n"):
                source = sources[index] = source[:-1]  # the newline the module added after the cell's last line
            if index in module.unprompted:
                if source != module.unprompted[index]:
                    raise NotebookError(f"cell {index} holds console prompts (`>>>`): it is not fixed")
                sources[index] = original[index]
        if set(sources) != set(module.cells):
            raise NotebookError("a fix moved code across cells")
        return {i: s for i, s in sources.items() if s != original[i]}

    def with_sources(self, sources: dict[int, str]) -> str:
        """The file's text with these cells' sources replaced, every other byte kept."""
        missing = sorted(set(sources) - set(self.source_spans))
        if missing:
            raise NotebookError(f"cannot locate the source of cell {missing[0]} in the file")
        pieces, cursor = [], 0
        for index in sorted(sources, key=lambda i: self.source_spans[i][0]):
            start, end = self.source_spans[index]
            pieces.append(self.text[cursor:start])
            pieces.append(_encode_source(sources[index], self.text[start:end], self.text, start))
            cursor = end
        pieces.append(self.text[cursor:])
        return "".join(pieces)


def _joined(pieces: list[tuple[int, list[str]]], masked: dict[int, str],
            unprompted: dict[int, str] | None = None, written: str | None = None) -> NotebookModule:
    """A module of these cells' (masked) lines, each cell after its marker line."""
    text: list[str] = []
    lines: list[CellPosition | None] = []
    for index, cell_lines in pieces:
        text.append(f"{INDENTED_CELL_MARKER if _indented(cell_lines) else CELL_MARKER}{index}\n")
        lines.append(None)
        for number, line in enumerate(cell_lines, 1):
            text.append(line if line.endswith("\n") else line + "\n")
            lines.append(CellPosition(index, number))
    return NotebookModule("".join(text), lines, masked, unprompted or {}, written)


def _without_prompts(source: str) -> str:
    """The cell with console prompts blanked (columns kept), if its first line of code has one."""
    lines = source_lines(source)
    first = next((line for line in lines if line.strip()), "")
    prompt = next((p for p in (_CLASSIC_PROMPT, _IPYTHON_PROMPT) if p.match(first) and not first.startswith("...")),
                  None)
    if prompt is None:
        return source
    blanked = []
    for line in lines:
        found = prompt.match(line)
        blanked.append(" " * found.end() + line[found.end():] if found else line)
    return "".join(blanked)


def _indented(lines: list[str]) -> bool:
    """Does the cell start indented? IPython's `leading_indent` then removes it: up to IPython 8 (Colab's)
    the first line's indentation from every line that starts with it, leaving the others (a closing
    `}` at the margin); from IPython 9 the indentation common to all lines. The body of an `if True:`
    reads a cell as either does, where it runs at all. Its first statement must be indented too: a
    comment alone is no block (`if True:` with no statement would not parse)."""
    code = [line for line in lines if line.strip()]
    statements = [line for line in code if not line.lstrip().startswith("#")]
    return bool(statements) and code[0][:1] in " \t" and statements[0][:1] in " \t"


def _python_kernel(metadata: object) -> bool:
    """Whether the kernel is Python, or unknown. A `kernelspec` or `language_info` that is not an
    object (a string, a list, null: hand-edited or generated JSON) says nothing, as if absent."""
    language = (_member(_member(metadata, "kernelspec"), "language")
                or _member(_member(metadata, "language_info"), "name"))
    return not isinstance(language, str) or language.lower() in ("python", "python3", "ipython", "")


def _member(node: object, key: str) -> object:
    """`node[key]` if `node` is a JSON object that has it, else None."""
    return node.get(key) if isinstance(node, dict) else None


# ----- masking IPython syntax ----------------------------------------------------------------


def masked_lines(source: str, masked: dict[int, str]) -> list[str] | None:
    """The cell's lines with IPython-only syntax masked (each masked line recorded in `masked`
    under a new number); None for a cell in another language (a cell magic such as `%%bash`)."""
    lines = source_lines(source)
    first_code = _first_code(lines)
    if first_code is None:
        return lines
    magic = _CELL_MAGIC.match(lines[first_code].lstrip())
    if magic is not None and magic.group(1) not in PYTHON_CELL_MAGICS:
        return None
    if _automagic(lines, first_code):
        return [*lines[:first_code], _mask(lines[first_code], "pass", masked), *lines[first_code + 1:]]
    out: list[str] = []
    scanner = _LogicalLines()
    continued = False  # inside a masked line's backslash continuation
    for number, line in enumerate(lines):
        body = line.rstrip("\r\n")
        stripped = body.lstrip()
        indent = body[:len(body) - len(stripped)]
        if continued:
            out.append(_mask(line, indent + "#", masked))
            continued = body.endswith("\\")
            continue
        if scanner.at_statement_start and _is_ipython(stripped, number == first_code):
            if number == first_code and magic is not None:
                # IPython strips an indented first line's indent before it reads a cell magic (its body
                # keeps its own): the masked line takes the indent of the code after it.
                following = _first_code(lines[number + 1:])
                after = lines[number + 1 + following] if following is not None else ""
                indent = after[:len(after) - len(after.lstrip())]
            assigned = _ASSIGNED_ESCAPE.match(stripped)
            if assigned is not None and not stripped.startswith(("%", "!")):
                out.append(_mask(line, indent + assigned.group(1) + "None", masked))
            else:
                out.append(_mask(line, indent + "pass", masked))
            continued = body.endswith("\\")
            continue
        scanner.feed(line)
        out.append(line)
    return out


# The placeholders course notebooks leave for the student to fill (`tfds.load( # YOUR CODE HERE )`,
# `### START CODE HERE ###`, a value written `'''TODO'''` or `[TODO the output layer]`): a cell holding
# one is incomplete on purpose.
_EXERCISE_PLACEHOLDER = re.compile(
    r"(?i)\byour code here\b|\b(?:start|end) code here\b|#\s*fill (?:me|this|in)\b"
    r"|(?P<quote>'''|\"\"\"|'|\")\s*(?-i:TODO)\b[^'\"\r\n]*(?P=quote)|\[\s*(?-i:TODO)\b[^\]\r\n]*\]")
_COMPOUND_HEADER = re.compile(
    r"\s*(?:async\s+)?(?:def|class|if|elif|else|for|while|with|try|except|finally|match|case)\b")
_NOT_ASSIGNMENT = ("==", "!=", "<=", ">=")
_PLACEHOLDER_VALUE = re.compile(r"\?+|\.{4,}")  # no Python token: a value left for the reader
# A value or statement the reader writes, described in angle brackets (`loss = <YOUR CODE>`,
# `<define the network here>`, `sess.run(<how to run your graph?>)`, `<symbol -> its index>`, even left
# open to the end of the line: `loss = < your code`): where a value or a statement starts, Python has
# no `<` (it is an operator only), so these spans are never code. Replaced before the line is
# scanned: a hint's apostrophe (`<don't forget the sign>`) opens no string.
_ANGLE_PLACEHOLDER = re.compile(r"((?:^|[=(\[{,:])\s*|^\s*(?:return|yield)\s+)<(?:->|[^<>\r\n])+(?:>|(?=[\r\n]|$))")


def exercise_placeholder(text: str) -> bool:
    """Does a cell's text hold a placeholder of the exercise conventions left for the reader?"""
    return _EXERCISE_PLACEHOLDER.search(text) is not None


def blanks_filled(text: str) -> str:
    """The cell's text with each blank a reader is left to fill given `...`: an assignment with no
    value (`loss =`, `lr=  # try 0.01`), a block whose body is only comments, the reader's instruction
    (`def train():` then `# TODO: your loop`), a question mark or a run of dots where a value
    belongs (`attack(x, eps, ?)`, `norm = ....`), and a description in angle brackets where a value or a
    statement belongs (`a = <YOUR CODE: sample an action>`, `return <student.implement_me()>`). Where the
    text with them filled parses, the cell is an exercise: its only gaps are the blanks (a typo or a
    broken bracket is not one, and stays unparsable).
    (Filled inside a string too: a string parses either way.)"""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    scanner = _LogicalLines()
    header_indent: int | None = None  # a block header's, while its body has no code yet
    instructed = False  # a comment in that empty body: the instruction to the reader
    first = ""  # the first physical line of the statement being read
    for line in lines:
        line = _ANGLE_PLACEHOLDER.sub(r"\1...", line)
        body = line.rstrip("\r\n")
        starts = scanner.at_statement_start
        if starts and body.lstrip().startswith("#"):
            instructed = True
        elif starts and body.strip():
            indent = len(body) - len(body.lstrip())
            if header_indent is not None and indent <= header_indent and instructed:
                out.append(" " * (header_indent + 4) + "...\n")
            header_indent = None
            first = body
        code_end = scanner.feed(line)
        filled = _PLACEHOLDER_VALUE.sub("...", body[:code_end])
        if filled != body[:code_end]:
            body, line = filled + body[code_end:], filled + line[code_end:]
            code_end = len(filled)
        code = body[:code_end].rstrip()
        if scanner.at_statement_start and code:
            if code.endswith("=") and not code.endswith(_NOT_ASSIGNMENT):
                line = code + " ..." + body[len(code):] + line[len(body):]
            elif code.endswith(":") and _COMPOUND_HEADER.match(first):
                header_indent, instructed = len(first) - len(first.lstrip()), False
        out.append(line)
    if header_indent is not None and instructed:
        out.append(("\n" if out and not out[-1].endswith("\n") else "") + " " * (header_indent + 4) + "...\n")
    return "".join(out)


def _first_code(lines: list[str]) -> int | None:
    """The index of the cell's first line of code: neither blank nor a comment. Colab runs a cell
    magic, or a one-line automagic, below comment lines (`#@title` forms): the notebooks that do so
    ran with it (their outputs show it)."""
    return next((i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#")), None)


def written_file(line: str) -> tuple[str, bool] | None:
    """(path, appends) for a `%%writefile [-a|--append] PATH.py` line (`%%file` alike, the path maybe
    quoted); None for any other line, and for a file of another suffix (a shell script, a config: no
    Python) or arguments IPython would refuse (the cell then writes nothing)."""
    magic = _CELL_MAGIC.match(line.lstrip())
    if magic is None or magic.group(1) not in WRITEFILE_MAGICS:
        return None
    try:
        words = shlex.split(line.lstrip()[magic.end():])  # as IPython's argument parser splits, quotes removed
    except ValueError:
        return None  # an unclosed quote
    paths = [w for w in words if w not in APPEND_FLAGS]
    if len(paths) != 1 or paths[0].startswith("-") or not paths[0].endswith(".py"):
        return None
    return paths[0], len(paths) < len(words)


def _automagic(lines: list[str], first_code: int) -> bool:
    """A one-line cell that IPython runs as a magic without its `%` (`ls data`, `timeit f()`): the
    first word names a magic, and the line is not Python."""
    if any(line.strip() for line in lines[first_code + 1:]):
        return False
    line = lines[first_code].strip()
    if line.split(maxsplit=1)[0] not in AUTOMAGICS or " " not in line:
        return False
    try:
        compile(line, "<cell>", "exec", dont_inherit=True)
    except SyntaxError:
        return True
    return False


def _is_ipython(stripped: str, first_line: bool) -> bool:
    if not stripped or stripped.startswith("#"):
        return False
    if stripped.startswith("%%") and first_line:
        return True  # a cell magic (masked_lines has decided its cell is Python)
    if stripped[0] in "%!":  # `%%time` below the first line is IPython's line magic `%time` of `%`
        return not stripped.startswith("!=")
    if _HELP.fullmatch(stripped):
        return True
    assigned = _ASSIGNED_ESCAPE.match(stripped)
    return assigned is not None and not stripped[assigned.end() - 1:].startswith(("!=", "%="))


def _mask(line: str, replacement: str, masked: dict[int, str]) -> str:
    number = len(masked) + 1
    masked[number] = line.rstrip("\r\n")
    ending = line[len(line.rstrip("\r\n")):]
    return f"{replacement}  {MASK_MARKER.strip()} {number}{ending}"


def _unmask(line: str, masked: dict[int, str], restored: list[int]) -> str:
    """The original of a masked line (its number added to `restored`); other lines as they are."""
    body = line.rstrip("\r\n")
    match = _MARKER_SUFFIX.search(body)
    if match is None or int(match.group(1)) not in masked:
        return line
    restored.append(int(match.group(1)))
    return masked[int(match.group(1))] + line[len(body):]


class _LogicalLines:
    """Whether the next physical line starts a statement: not inside brackets, a string that spans
    lines, or a backslash continuation. Enough of Python's tokenizer for that, and no more."""

    def __init__(self) -> None:
        self.depth = 0
        self.open_string: str | None = None  # the closing quotes of a string spanning lines
        self.backslash = False

    @property
    def at_statement_start(self) -> bool:
        return self.depth == 0 and self.open_string is None and not self.backslash

    def feed(self, line: str) -> int:
        """Read one physical line; return where its code ends (its comment's `#`, or its length)."""
        text = line.rstrip("\r\n")
        i, n = 0, len(text)
        self.backslash = False
        while i < n:
            if self.open_string is not None:
                close = self.open_string
                j = i
                while j < n:
                    if text[j] == "\\":
                        j += 2
                        continue
                    if text.startswith(close, j):
                        break
                    j += 1
                if j >= n:
                    # A triple-quoted string goes on; a one-quote string only after a backslash
                    # (else it is a syntax error, which the parser reports).
                    if len(close) == 1 and not text.endswith("\\"):
                        self.open_string = None
                    return n
                i = j + len(close)
                self.open_string = None
                continue
            char = text[i]
            if char == "#":
                return i
            if char in "([{":
                self.depth += 1
            elif char in ")]}":
                self.depth = max(0, self.depth - 1)
            elif char in "'\"":
                self.open_string = char * 3 if text.startswith(char * 3, i) else char
                i += len(self.open_string)
                continue
            elif char == "\\" and i == n - 1:
                self.backslash = True
            i += 1
        return n


# ----- writing sources back ------------------------------------------------------------------


def _source_spans(text: str) -> dict[int, tuple[int, int]]:
    """Where each cell's `source` value lies in the file's text, by 1-based cell index."""
    decoder = json.JSONDecoder()
    spans: dict[int, tuple[int, int]] = {}

    def members(start: int):
        """(key, value start, value end) of the object at `start`."""
        i = _skip(text, start + 1)
        while i < len(text) and text[i] != "}":
            key, i = json.decoder.scanstring(text, i + 1)
            i = _skip(text, _skip(text, i) + 1)  # past ':'
            _, end = decoder.raw_decode(text, i)
            yield key, i, end
            i = _skip(text, end)
            if i < len(text) and text[i] == ",":
                i = _skip(text, i + 1)

    try:
        top = _skip(text, 0)
        for key, start, _ in members(top):
            if key != "cells":
                continue
            i = _skip(text, start + 1)
            index = 0
            while text[i] != "]":
                index += 1
                _, end = decoder.raw_decode(text, i)
                for cell_key, value_start, value_end in members(i):
                    if cell_key == "source":
                        spans[index] = (value_start, value_end)
                i = _skip(text, end)
                if text[i] == ",":
                    i = _skip(text, i + 1)
    except (ValueError, IndexError, StopIteration):
        return {}
    return spans


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def _encode_source(source: str, old: str, text: str, at: int) -> str:
    """`source` as a JSON value written the way the old value was: a string, or a list of lines
    with the old list's indentation; `\\u` escapes only if the file uses them."""
    ascii_only = bool(re.search(r"\\u[0-9a-fA-F]{4}", text)) and not any(ord(c) > 127 for c in text)
    if old.startswith('"'):
        return json.dumps(source, ensure_ascii=ascii_only)
    lines = source.splitlines(keepends=True)  # how nbformat splits a source into its JSON list
    if not lines:
        return "[]"
    line_start = text.rfind("\n", 0, at) + 1
    key_indent = re.match(r"[ \t]*", text[line_start:at]).group(0)
    item = re.match(r"\[(\r?\n)([ \t]*)", old)
    close = re.search(r"(\r?\n)([ \t]*)\]$", old)
    if item is None or close is None:  # `[]` or a one-line list: the file's own indentation unit
        newline = "\r\n" if "\r\n" in text else "\n"
        unit = re.match(r"\{\r?\n([ \t]*)", text)
        step = unit.group(1) if unit else " "
        item_indent, close_indent = key_indent + step, key_indent
    else:
        newline, item_indent, close_indent = item.group(1), item.group(2), close.group(2)
    items = f",{newline}".join(item_indent + json.dumps(line, ensure_ascii=ascii_only) for line in lines)
    return f"[{newline}{items}{newline}{close_indent}]"
