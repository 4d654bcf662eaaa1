"""The project view of a module: its text with the definitions it imports from other modules of its
project written in where it imports them, so that every rule sees a program the same however its
author split it into modules (the model in `models.py`, the loop in `train.py`, the loss in
`losses.py`).

`from .helpers import train` in the linted module is followed by `train`'s definition, read from
`helpers.py`, and by what that definition reads there (its imports, the functions, classes and
values it uses, through further project imports up to `MAX_HOPS`): the program the interpreter runs,
minus the other modules' unrelated code. Rules then follow a parameter to the caller's argument, a
model to its class, a loss to its model, across the split as within one file.

Each inserted statement keeps its origin, and a finding on it is reported where that statement is,
in the other module (without a fix: only the linted file's own text is rewritten, and the other
module's own lint gives the same finding its fix; the run reports a finding once). A module is not
viewed so when a name the definitions bring in would clash with one the linted module uses
otherwise, when a statement to bring in shares its line with another, or when the linted module
has no project import at the top level; a definition is not brought in when it is long or its
module large (a library's), or when the module only derives from it, decorates or annotates with it
(`_runs`). Which modules are viewed at all is the linter's call (lintloop.linter: those some rule
may fire on, by their own text or, for a program, with `imported_definitions`).

The other direction: `importers` finds the modules beside a module whose views bring its
definitions in, so that a finding in a function they call is judged with their arguments (`decides`).
"""

from __future__ import annotations

import ast
import bisect
import hashlib
import os
import re
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from lintloop.analysis.project import MAX_HOPS, imports_of, in_project, module_files, project_root
from lintloop.cache import dependency_digest, once_per_run, read_module
from lintloop.digests import ABSENT
from lintloop.finding import Finding
from lintloop.line_pattern import LinePattern

LineLabel = Callable[[int], str]


# A `from X import` statement at the start of a line: the cheap test for a module that may import
# from its project (most modules import nothing but libraries, and are not parsed again here).
_FROM_IMPORT = LinePattern(rb"from[ \t]+([\w.]+)[ \t]+import\b")
# The most lines the definitions brought into one module may add, and one definition may have: the
# model classes, loops and helpers a script splits off are short; a library's base classes are not
# (and what a rule asks of a model, such a class does not answer).
MAX_ADDED_LINES = 800
MAX_DEFINITION_LINES = 250
# The largest module definitions are brought in from: a script's models, loops and helpers live in
# modules of a few thousand lines; larger ones are a library's.
MAX_MODULE_BYTES = 100 * 1024
# `ProjectView.label`'s placeholder for a line of the linted module in a message.
_OWN_LINE = re.compile("\x01(\\d+)\x01")
DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass(frozen=True)
class Segment:
    """Lines `first`..`first + count - 1` of the view are lines `line`.. of the module at `path`."""

    first: int
    count: int
    path: str
    line: int


@dataclass
class ProjectView:
    text: str
    segments: list[Segment]  # in order of `first`
    dependencies: dict[str, str] = field(default_factory=dict)  # path -> content digest (`ABSENT`)

    def origin(self, line: int) -> tuple[str | None, int]:
        """Where a view line comes from: (None, its line in the linted module), or (the other module's
        absolute path, its line there)."""
        index = bisect.bisect_right([s.first for s in self.segments], line) - 1
        if index >= 0 and line < self.segments[index].first + self.segments[index].count:
            segment = self.segments[index]
            return segment.path, segment.line + line - segment.first
        return None, line - sum(s.count for s in self.segments[:index + 1])

    def located(self, finding: Finding, display: str, linted_path: str, line_label: LineLabel) -> Finding | None:
        """`finding` (on the view, its message's line references made by `label`) where it is: on the
        linted module's own lines, or in the other module, without a fix; None for an engine finding
        about the other module's text (its syntax, its suppression comments: that module's own lint
        reports them)."""
        path, line = self.origin(finding.line)
        end_path, end_line = self.origin(finding.end_line)
        lines = tuple(n for p, n in map(self.origin, finding.suppression_lines) if p == path)
        end_line = end_line if end_path == path else line
        if path is not None and finding.code < "LL100":
            return None
        # A line of the linted module named in a finding on another module says which file it is in.
        own = line_label if path is None else (lambda n: f"{line_label(n)} of {os.path.basename(display)}")
        message, help, note = (_OWN_LINE.sub(lambda m: own(int(m.group(1))), text)
                               for text in (finding.message, finding.help, finding.note))
        if path is None:
            fix = finding.fix
            if fix is not None and any(self.origin(e.line)[0] or self.origin(e.end_line)[0] for e in fix.edits):
                fix = None  # it would rewrite a definition brought in from another module
            elif fix is not None:
                fix = replace(fix, edits=tuple(replace(e, line=self.origin(e.line)[1], end_line=self.origin(e.end_line)[1])
                                               for e in fix.edits))
            return replace(finding, line=line, end_line=end_line, message=message, help=help, note=note, fix=fix,
                           suppression_lines=lines)
        other = os.path.join(os.path.dirname(display), os.path.relpath(path, os.path.dirname(linted_path)))
        return replace(finding, path=os.path.normpath(other), line=line, end_line=end_line, message=message, help=help, note=note, fix=None,
                       suppression_lines=lines)

    def label(self, line: int) -> str:
        """How a message names a view line: a line of another module as `N of file`; one of the linted
        module by a placeholder `located` replaces (its label depends on where the finding is)."""
        path, number = self.origin(line)
        return f"\x01{number}\x01" if path is None else f"{number} of {os.path.basename(path)}"


@dataclass
class _Module:
    path: str
    lines: list[str]
    tree: ast.Module
    imports: dict[str, str]  # local name -> qualified name
    top: dict[str, list[ast.stmt]]  # name -> the top-level statements binding it
    _reads: dict[int, set[str]] = field(default_factory=dict)

    def reads(self, statement: ast.stmt) -> set[str]:
        """`_reads(statement)`, once per statement of a module parsed once per process."""
        found = self._reads.get(statement.lineno)
        if found is None:
            found = self._reads[statement.lineno] = _reads(statement)
        return found


# path -> (digest, module): each parsed once per process while it is unchanged, the most recently used
# kept (their trees are large: a worker keeps a few dozen, not a library's every module).
_MODULES: OrderedDict[str, tuple[str, _Module | None]] = OrderedDict()
MAX_CACHED_MODULES = 32


def project_view(text: str, path: str, tree: ast.Module, shallow: bool = False) -> ProjectView | None:
    """The view of the module `text` (at absolute `path`; `tree`: CPython's tree of it), or None where
    it imports nothing it could bring in, or bringing it in would not keep the module's meaning.
    `shallow`: the imported definitions and the functions, classes and library imports of their own
    modules they read, not what those modules import from the project."""
    root, parts = project_root(path)
    if not any(module.startswith(b".") or in_project(root, module.decode()) for module in
               set(_FROM_IMPORT.findall(text.encode("utf-8", "surrogatepass")))):
        return None
    package = parts if os.path.basename(path) == "__init__.py" else parts[:-1]
    try:
        return _Builder(root, path, text, tree, package, shallow).build()
    except _TooLarge:
        return None


class _TooLarge(Exception):
    """The definitions to bring in exceed MAX_ADDED_LINES: the module is linted as written."""


class _Builder:
    def __init__(self, root: str, path: str, text: str, tree: ast.Module, package: list[str], shallow: bool) -> None:
        self.root, self.path, self.text, self.tree, self.package = root, path, text, tree, package
        self.shallow = shallow
        self.dependencies: dict[str, str] = {}
        self.added = 0  # lines brought in so far
        self.heads: dict[str, bool] = {}  # first name of an import -> whether it is the project's
        self.loaded: dict[str, _Module | None] = {}
        self.own_imports = imports_of(_top_imports(tree), package)
        self.bound: dict[str, object] = {}  # name -> what binds it in the view (a statement key or a qualified import)
        self.taken: set[tuple[str, int]] = set()  # (path, line) of the statements brought in
        self.uses: dict[str, bool] = {}  # name -> `_uses(name)`

    def build(self) -> ProjectView | None:
        lines = self.text.splitlines(keepends=True)
        if lines and not lines[-1].endswith(("\n", "\r")):
            lines[-1] += "\n"
        insertions: list[tuple[ast.ImportFrom, list[tuple[_Module, ast.stmt]]]] = []
        body = self.tree.body
        for index, statement in enumerate(body):
            if not isinstance(statement, ast.ImportFrom) or statement.col_offset or (
                    index + 1 < len(body) and body[index + 1].lineno == statement.end_lineno):
                continue  # an import sharing a line with another statement keeps its line as written
            brought: list[tuple[_Module, ast.stmt]] = []
            for alias in statement.names:
                local = alias.asname or alias.name
                qualified = self.own_imports.get(local)
                if alias.name != "*" and qualified is not None and self._in_project(qualified) and _runs(self.text, local) \
                        and self._definition(qualified, MAX_HOPS, brought, local) is False:
                    return None
            if brought:
                insertions.append((statement, brought))
        if not insertions:
            return None
        pieces: list[str] = []
        segments: list[Segment] = []
        added, cursor = 0, 0
        for statement, brought in insertions:
            pieces.extend(lines[cursor:statement.lineno - 1])
            kept = [a for a in statement.names if self.bound.get(a.asname or a.name, ("",))[0] != "definition"]
            # The import no longer binds what its definitions now bind (a name imported and defined
            # would read as the import); its lines stay, so that the module's own lines keep their numbers.
            rest = ast.unparse(ast.ImportFrom(statement.module, kept, statement.level)) if kept else ""
            pieces.append(rest + "\n" * (statement.end_lineno - statement.lineno + 1))
            after = cursor = statement.end_lineno
            for module, definition in brought:
                first = _first_line(definition)
                text = module.lines[first - 1:definition.end_lineno]
                segments.append(Segment(after + added + 1, len(text), module.path, first))
                pieces.extend(text if text[-1].endswith(("\n", "\r")) else [*text[:-1], text[-1] + "\n"])
                added += len(text)
        pieces.extend(lines[cursor:])
        return ProjectView("".join(pieces), segments, self.dependencies)

    def _definition(self, qualified: str, hops: int, brought: list[tuple[_Module, ast.stmt]],
                    local: str | None = None) -> bool | None:
        """Bring in the project definition that `qualified` names, with what it reads there. `local`:
        the linted module's own name for it (its import binds it), None for a name another definition
        reads. True: brought in (or already there); None: not a definition that can be brought in (the
        name stays as the import binds it, or unbound); False: bringing it in would change the
        program's meaning."""
        module_parts, _, name = qualified.rpartition(".")
        if hops < 0 or not module_parts:
            return None
        module = self._module(module_parts.split("."))
        if module is None:
            return None
        statements = module.top.get(name, [])
        if len(statements) != 1:
            return None  # bound more than once, or conditionally: which one runs is not known here
        statement = statements[0]
        if isinstance(statement, ast.ImportFrom):  # a re-export (`from .core import train` in `__init__.py`)
            target = module.imports.get(name)
            return self._definition(target, hops - 1, brought, local) if target and self._in_project(target) else None
        if not isinstance(statement, (*DEFINITIONS, ast.Assign, ast.AnnAssign)) or local not in (None, name):
            return None  # `from .a import f as g`: `g` would need a binding of its own
        key = (module.path, statement.lineno)
        if key in self.taken:
            return True
        # The linted module's import binds the name to this very definition: as its own.
        own = local is not None or self.own_imports.get(name) == qualified
        if self._shares_line(module, statement) or not self._binds(name, ("definition", *key), own=own):
            return False
        if statement.end_lineno - _first_line(statement) >= MAX_DEFINITION_LINES:
            return None
        self.taken.add(key)
        self._count(statement)  # before its dependencies: a view too large is given up on early
        for read in sorted(module.reads(statement) & set(module.top)):
            if self.shallow and not self._in_module_alone(module, read):
                continue  # shallow: no other module of the project is read
            if self._dependency(module, module_parts, read, hops, brought) is False:
                return False
        brought.append((module, statement))
        return True

    def _in_module_alone(self, module: _Module, name: str) -> bool:
        """Is `name` bound in `module` by one function or class, or by an import of a library (what a
        shallow view brings in with a definition that reads it: `prepare` calling the `@tf.function
        augment` beside it, `from jax import random`), not by another module of the project?"""
        statements = module.top[name]
        if len(statements) != 1:
            return False
        statement = statements[0]
        if isinstance(statement, ast.Import) or isinstance(statement, ast.ImportFrom) and not statement.level:
            qualified = module.imports.get(name)
            return qualified is not None and not self._in_project(qualified)
        return isinstance(statement, DEFINITIONS)

    def _count(self, statement: ast.stmt) -> None:
        self.added += statement.end_lineno - _first_line(statement) + 1
        if self.added > MAX_ADDED_LINES:
            raise _TooLarge

    def _dependency(self, module: _Module, module_parts: str, name: str, hops: int,
                    brought: list[tuple[_Module, ast.stmt]]) -> bool | None:
        """Bring in what `name` is in `module`, for a definition brought in that reads it."""
        statements = module.top[name]
        if len(statements) != 1:
            return False
        statement = statements[0]
        qualified = module.imports.get(name, "")
        if isinstance(statement, (ast.Import, ast.ImportFrom)) and (statement.level if isinstance(
                statement, ast.ImportFrom) else False) or (qualified and self._in_project(qualified)):
            return self._definition(qualified, hops - 1, brought, None) if qualified else None
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            key = (module.path, statement.lineno)
            if key in self.taken:
                return True
            if self._shares_line(module, statement) or not all(
                    self._binds(bound, ("import", module.imports.get(bound))) for bound in _top_bindings(statement)):
                return False
            self.taken.add(key)
            self._count(statement)
            brought.append((module, statement))
            return True
        return self._definition(f"{module_parts}.{name}", hops - 1, brought, None)

    def _uses(self, name: str) -> bool:
        """Whether the linted module may use or bind `name` (a word of its text not after a dot: its
        strings' and comments' words too, which only rejects more): a definition brought in may
        bind it only as the module's own import of it does. Searched name by name: a view asks of
        a few names, and a module has thousands."""
        found = self.uses.get(name)
        if found is None:
            found = self.uses[name] = _names(self.text, name)
        return found

    def _binds(self, name: str, key: object, own: bool = False) -> bool:
        """Record that the view binds `name` by `key`; False where the linted module, or another
        statement brought in, binds or reads it otherwise. `own`: the linted module's import of the
        name is what this binding stands for."""
        if name in self.bound:
            return self.bound[name] == key
        imported_alike = isinstance(key, tuple) and key[0] == "import" and self.own_imports.get(name) == key[1]
        if not own and not imported_alike and self._uses(name):
            return False
        self.bound[name] = key
        return True

    def _shares_line(self, module: _Module, statement: ast.stmt) -> bool:
        index = module.tree.body.index(statement)
        before = module.tree.body[index - 1] if index else None
        after = module.tree.body[index + 1] if index + 1 < len(module.tree.body) else None
        return (before is not None and before.end_lineno == _first_line(statement)) or (
            after is not None and _first_line(after) == statement.end_lineno)

    def _in_project(self, qualified: str) -> bool:
        head = qualified.split(".")[0]
        if head not in self.heads:
            self.heads[head] = in_project(self.root, head)
        return self.heads[head]

    def _module(self, parts: list[str]) -> _Module | None:
        for path, package in module_files(self.root, parts):
            if os.path.abspath(path) == self.path:
                return None
            module = self._load(path, package)
            if module is not None:
                return module
        return None

    def _load(self, path: str, package: list[str]) -> _Module | None:
        """The module at `path` (read once per view; parsed once per process while it is unchanged)."""
        if path not in self.loaded:
            self.loaded[path] = self._read(path, package)
        return self.loaded[path]

    def _read(self, path: str, package: list[str]) -> _Module | None:
        data = read_module(path, MAX_MODULE_BYTES)
        if data is None:  # absent, too large, or no regular file (a FIFO named `models.py` is never read)
            self.dependencies[path] = dependency_digest(path) if os.path.lexists(path) else ABSENT
            return None
        digest = hashlib.sha256(data).hexdigest()
        self.dependencies[path] = digest
        cached = _MODULES.get(path)
        if cached is not None and cached[0] == digest:
            _MODULES.move_to_end(path)
            return cached[1]
        module = _parse(path, data, package)
        _MODULES[path] = (digest, module)
        if len(_MODULES) > MAX_CACHED_MODULES:
            _MODULES.popitem(last=False)
        return module


def _word_starts(text: str, name: str) -> Iterator[int]:
    """Where `name` stands in `text` as a word of its own, not after a dot."""
    start = text.find(name)
    while start != -1:
        end = start + len(name)
        if not (start and (text[start - 1].isalnum() or text[start - 1] in "._")) and \
                not (end < len(text) and (text[end].isalnum() or text[end] == "_")):
            yield start
        start = text.find(name, end)


def _names(text: str, name: str) -> bool:
    """`name` is a word of `text`, not after a dot."""
    return next(_word_starts(text, name), None) is not None


def _runs(text: str, name: str) -> bool:
    """Whether the module runs with `name`: calls it (`train(...)`, `Net()`) or passes or assigns it
    (`strategy.run(step, ...)`, `step = make_step`), on a line that is no class header (`class
    A(Base):` derives from it) or decorator. What a module only derives from, decorates with or
    annotates with is not brought in: a library's base classes and typing names are most of what its
    modules import from each other."""
    for start in _word_starts(text, name):
        end = start + len(name)
        line_start = text.rfind("\n", 0, start) + 1
        header = text[line_start:start].lstrip()
        if not header.startswith(("class ", "class\t", "@")):
            following = text[end:end + 40].lstrip(" \t")
            preceding = header.rstrip()
            if following.startswith("(") or (preceding.endswith(("(", ",", "=")) and not following.startswith((".", "["))):
                return True
    return False


def _parse(path: str, data: bytes, package: list[str]) -> _Module | None:
    try:
        text = data.decode("utf-8-sig")
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError, UnicodeDecodeError):
        return None
    top: dict[str, list[ast.stmt]] = {}
    for statement in tree.body:
        for name in _top_bindings(statement):
            top.setdefault(name, []).append(statement)
    return _Module(path, text.splitlines(keepends=True), tree, imports_of(_top_imports(tree), package), top)


def _top_imports(tree: ast.Module) -> ast.Module:
    """The module's top-level imports alone: what binds the names its definitions read (an import
    inside a function is that function's own)."""
    return ast.Module(body=[s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))], type_ignores=[])


def _top_bindings(statement: ast.stmt) -> set[str]:
    """Names a top-level statement binds in the module's namespace."""
    if isinstance(statement, DEFINITIONS):
        return {statement.name}
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        return {a.asname or a.name.split(".")[0] for a in statement.names if a.name != "*"}
    names = set()
    for node in ast.walk(statement):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, DEFINITIONS) and node is not statement:
            names.add(node.name)
    return names


_FUNCTION_NODES = (ast.FunctionDef, ast.AsyncFunctionDef)


def _reads(statement: ast.stmt) -> set[str]:
    """The names the statement reads from its module: those loaded anywhere in it that none of its
    functions binds as a parameter or local (a superset where a name is both, which only brings in
    more). One walk: a name stored in a function's body, at any depth, is that function's local."""
    loads: set[str] = set()
    local: set[str] = set()
    stack: list[tuple[ast.AST, bool]] = [(statement, False)]  # (node, inside a function's body)
    while stack:
        node, in_body = stack.pop()
        kind = type(node)
        if kind is ast.Name:
            if type(node.ctx) is ast.Load:
                loads.add(node.id)
            elif in_body and type(node.ctx) is ast.Store:
                local.add(node.id)
            continue
        if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef or kind is ast.Lambda:
            arguments = node.args
            local.update(a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                                         arguments.vararg, arguments.kwarg] if a is not None)
        elif kind is ast.comprehension:
            local.update(n.id for n in ast.walk(node.target) if isinstance(n, ast.Name))
        for field in node._fields:
            value = getattr(node, field, None)
            inside = in_body or (field == "body" and kind in _FUNCTION_NODES)
            if isinstance(value, list):
                stack.extend((child, inside) for child in value if isinstance(child, ast.AST))
            elif isinstance(value, ast.AST):
                stack.append((value, inside))
    return loads - local


def _first_line(statement: ast.stmt) -> int:
    decorators = getattr(statement, "decorator_list", [])
    return min([statement.lineno, *(d.lineno for d in decorators)])


# ----- a program's definitions, before it is parsed ----------------------------------------------

# A top-level import statement: `from X import names` (one line, or parenthesized over several),
# `import X as y`.
_IMPORT_STATEMENT = LinePattern(r"(?:from[ \t]+[\w.]+[ \t]+import[ \t]*(?:\([^)]*\)|[^\n#;]*)|import[ \t]+[^\n#;]*)")
# What a program runs at its top level: a loop, a `with`, the main guard, a bare call statement. A
# library module defines (functions, classes, constants) and runs nothing there.
_TOP_LEVEL_RUN = LinePattern(r"(?:if[ \t]+__name__\b|for\b|while\b|with\b|async[ \t]+(?:for|with)\b|[A-Za-z_][\w.]*\("
                             # `fast_step = tf.function(step)`: a compiled function of an imported one
                             r"|[A-Za-z_]\w*[ \t]*=[ \t]*[\w.]*(?:function|jit|pmap|compile)\()")


# A training step or loop in a module that runs nothing at its top level (`def train(loader)` with the
# model imported from `models.py`): what it trains decides as a program's would. Searched as plain
# text, which costs a fraction of a regular expression's scan of every module.
_TRAINING_WORDS = (".backward(", ".apply_gradients(", "GradientTape", "value_and_grad")
# A top-level assignment of a call's result (`train_x = augment(train_x)`), with the function called: a
# program where that function is one the module imports by name and the module defines no class (a
# library module, which assigns from its package's helpers too, `logger = get_logger(__name__)`,
# defines classes; a script's own definitions are functions).
_TOP_LEVEL_ASSIGNED_CALL = LinePattern(r"[A-Za-z_]\w*[ \t]*=[ \t]*([A-Za-z_]\w*)\(")


def imported_definitions(text: str, path: str) -> str | None:
    """For a program (code run at its top level: a script, a notebook's module; or a module that trains),
    its text with the definitions it imports from its project (shallow: with only the functions, classes
    and library imports of their own modules they read), found from its imports read alone (each at its
    own lines; the rest of it is not parsed); None for a library module, or a program that imports none.
    What decides whether a program no rule may fire on by itself may hold a finding once its imports'
    definitions are brought in."""
    runs = _TOP_LEVEL_RUN.search(text) is not None or any(word in text for word in _TRAINING_WORDS)
    defines_class = text.startswith("class ") or "\nclass " in text
    assigned_from = set() if runs or defines_class else set(_TOP_LEVEL_ASSIGNED_CALL.findall(text))
    if not runs and not assigned_from:
        return None
    kept = [False] * (text.count("\n") + 1)
    first, counted_to = 0, 0  # the line breaks before `counted_to`: counted once, match by match
    for match in _IMPORT_STATEMENT.finditer(text):
        first += text.count("\n", counted_to, match.start())
        counted_to = match.start()
        for line in range(first, first + match.group(0).count("\n") + 1):
            kept[line] = True
    imports_only = "\n".join(line if keep else "" for line, keep in zip(text.split("\n"), kept))
    try:
        tree = ast.parse(imports_only)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # an import-like line inside a string: not worth a parse of the whole module
    if not runs and not assigned_from & {alias.asname or alias.name for node in tree.body
                                         if isinstance(node, ast.ImportFrom) for alias in node.names}:
        return None
    view = project_view(text, path, tree, shallow=True)
    return None if view is None else view.text


# ----- the other direction: the modules that import a module's functions ---------------------------

@dataclass
class Importer:
    """A module beside the linted one that brings some of its definitions into its own view."""

    path: str
    text: str
    view: ProjectView
    covered: list[tuple[int, int]]  # the linted module's line ranges its view holds


def importers(path: str) -> list[Importer]:
    """The modules in the linted module's directory whose views bring in its definitions: the
    callers whose arguments decide what its functions are given."""
    directory, filename = os.path.split(path)
    stem = os.path.splitext(filename)[0]
    if not stem.isidentifier():
        return []  # no import names it (`my-utils.py`, undecodable bytes): no view brings its definitions in
    mentions = _mentions(directory)
    if mentions is None:
        return []  # a module a notebook's cell writes, in a folder not made yet
    if stem.encode() not in mentions.stems:  # made after the run first listed its directory
        mentions = _read_mentions(directory) or mentions
    escaped = re.escape(stem.encode())
    mention = LinePattern(rb"from[ \t]+(?:[\w.]*\b" + escaped + rb"[ \t]+import\b|\.[ \t]+import\b[^\n]*\b" + escaped
                          + rb")")
    found = []
    for name in mentions.by_stem.get(stem.encode(), ()):
        other = os.path.join(directory, name)
        if other == path:
            continue
        data = read_module(other, MAX_MODULE_BYTES)
        if data is None or not mention.search(data):  # as it is now, where the index was read earlier
            continue
        try:
            text = data.decode("utf-8-sig")
            tree = ast.parse(text)
        except (UnicodeDecodeError, SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        view = project_view(text, other, tree)
        covered = [] if view is None else [(s.line, s.line + s.count - 1) for s in view.segments if s.path == path]
        if covered:
            found.append(Importer(other, text, view, covered))
    return found


@dataclass(frozen=True)
class _Mentions:
    """Which modules of a directory name which: for each module stem that is an identifier (what an
    import can name), the modules (file names, in order) with a line that imports from it as `mention`
    in `importers` matches it (`from .train import`, `from pkg.train import`, `from . import train`)."""

    stems: frozenset[bytes]
    by_stem: dict[bytes, list[str]]


# A line that imports from a module: the module's dotted name (a superset of the bytes an identifier's
# UTF-8 has) and what follows `import`.
_FROM_LINE = LinePattern(rb"from[ \t]+([\w.\x80-\xff]+)[ \t]+import\b([^\n]*)")
_IDENTIFIER_RUN = re.compile(rb"[\w\x80-\xff]+")
_WORD_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")  # `\w` of a bytes pattern
_MAX_STEM_BYTES = 255  # a file name's bound (NAME_MAX)


def _mentions(directory: str) -> _Mentions | None:
    """The directory's index, read once per run (lintloop.cache.once_per_run): asking each module of
    a directory of thousands, for each of them, made a run quadratic (1,000 modules: 0.93 M reads)."""
    return once_per_run("mentions", directory, lambda: _read_mentions(directory))


def _read_mentions(directory: str) -> _Mentions | None:
    try:
        names = sorted(name for name in os.listdir(directory) if name.endswith(".py"))
    except OSError:
        return None
    stems = frozenset(name[:-3].encode() for name in names if name[:-3].isidentifier())
    prefixes = {stem[:length] for stem in stems for length in range(1, len(stem) + 1)}
    by_stem: dict[bytes, list[str]] = {}
    for name in names:
        data = read_module(os.path.join(directory, name), MAX_MODULE_BYTES)
        for stem in sorted(_named_modules(data, stems, prefixes)) if data is not None else ():
            by_stem.setdefault(stem, []).append(name)
    return _Mentions(stems, by_stem)


def _named_modules(data: bytes, stems: frozenset[bytes], prefixes: set[bytes]) -> set[bytes]:
    """The `stems` the module `data` names as `mention` in `importers` would find each: a module name
    ending with `\b<stem>` before `import`, or `\b<stem>` anywhere after `from . import` (its prefixes
    too: `from . import train_utils` names `train`)."""
    named = set()
    for line in _FROM_LINE.finditer(data):
        module, rest = line.group(1), line.group(2)
        ascii_end = next((index for index, byte in enumerate(module) if byte >= 0x80), len(module))
        for start in range(max(0, len(module) - _MAX_STEM_BYTES), min(ascii_end, len(module) - 1) + 1):
            before = module[start - 1] if start else 0x20  # `[\w.]*` up to `start`, then `\b`
            if ((before in _WORD_BYTES) != (module[start] in _WORD_BYTES)) and module[start:] in stems:
                named.add(module[start:])
        if module != b".":
            continue
        for run in _IDENTIFIER_RUN.finditer(rest):
            for start in range(run.start(), run.end()):
                before = rest[start - 1] if start else 0x74  # the `t` of `import`
                if (before in _WORD_BYTES) == (rest[start] in _WORD_BYTES):
                    continue  # no `\b` here
                for end in range(start + 1, min(run.end(), start + _MAX_STEM_BYTES) + 1):
                    piece = rest[start:end]
                    if piece not in prefixes:
                        break
                    if piece in stems:
                        named.add(piece)
    return named


def decides(importer: Importer, tree: ast.Module, line: int) -> bool:
    """Whether `importer`'s view holds every context of the linted module's `line`: the top-level
    definition holding it, and every top-level statement of its module that names that definition
    (its own callers there). Then what the importer's view reports there is the verdict; a line of
    module code, or of a definition used by code the view leaves out, stays its module's to decide."""
    holder = next((s for s in tree.body if isinstance(s, DEFINITIONS) and _first_line(s) <= line <= s.end_lineno), None)
    if holder is None:
        return False
    users = [s for s in tree.body if s is not holder and any(
        isinstance(n, ast.Name) and n.id == holder.name for n in ast.walk(s))]
    return all(any(first <= _first_line(s) and s.end_lineno <= last for first, last in importer.covered)
               for s in [holder, *users])
