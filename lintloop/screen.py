"""Deciding cheaply what needs a CST: bytes first, then CPython's `ast`, then a CST of only what matters.

Each rule declares its `Needs` in tokens this module understands:

- `call:NAME`  a call of something whose last name is NAME (`x.backward()`, `tf.function(f)`, or an
               imported alias of it: `from tensorflow import function as tfn; tfn(f)`)
- `name:NAME`  an identifier NAME: a name, an attribute, or a part of an imported name
               (`from tensorflow.distribute import MirroredStrategy` gives `distribute`)
- `loop`, `augassign`, `return`: a `for`/`while` loop, an augmented assignment, a return statement
- `text:TEXT`  TEXT appears anywhere in the file (file needs only: a loose, cheap pre-condition)

`Needs.file` groups must each be matched somewhere in the file; `Needs.statement` groups must all
be matched in one top-level statement (function, class, or module-level statement): the seeds.
A CST is built only of the seeds and what the analyses may consult about them: the top-level
statements that define a name a selected statement reads (functions it calls, values it uses,
`self.x` it reads), and those that refer to a function defined in a selected statement (its call
sites, `tf.function(f)`). The file's imports and bound names come from the whole file. So the
analyses answer as on the whole file, and the findings are the same (tests/test_screen.py).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import lru_cache

from lintloop.analysis.names import Names

STRUCTURAL_TOKENS = frozenset({"loop", "augassign", "return"})
# A string whose presence in a statement changes what Keras version the analyses assume.
_LEGACY_KERAS = "TF_USE_LEGACY_KERAS"


@dataclass(frozen=True)
class Needs:
    """What must be in a file, and in the top-level statement a finding is in, for a rule to fire."""

    file: tuple[tuple[str, ...], ...] = ()
    statement: tuple[tuple[str, ...], ...] = ()

    def tokens(self) -> set[str]:
        return {token for group in (*self.file, *self.statement) for token in group}

    def possible_in(self, text: SourceScreen) -> bool:
        """Cheap text test: False when no statement of the file can hold these tokens."""
        return all(any(text.may_hold(t) for t in group) for group in (*self.file, *self.statement))


# What the source text of each structural token must contain.
_STRUCTURAL_TEXT = {
    "loop": re.compile(r"\b(?:for|while)\b"),
    "augassign": re.compile(r"(?:[-+*/%&|^@]|//|\*\*|>>|<<)="),
    "return": re.compile(r"\breturn\b"),
}
# Patterns start with a literal, which the regex engine scans for quickly (a leading `\b` defeats
# that); the word boundary before a match is checked by hand.
_IMPORT_STATEMENTS = re.compile(r"import\b(?:[ \t]*\([^)]*\)|[^\n]*)")


@lru_cache(maxsize=None)
def _word(word: str) -> re.Pattern[str]:
    return re.compile(rf"{word}\b")


@lru_cache(maxsize=None)
def _call(word: str) -> re.Pattern[str]:
    return re.compile(rf"{word}\s*\(")


def _found(pattern: re.Pattern[str], text: str) -> bool:
    """A match of `pattern` that does not continue an identifier on its left."""
    return any(m.start() == 0 or not (text[m.start() - 1].isalnum() or text[m.start() - 1] == "_")
               for m in pattern.finditer(text))


class SourceScreen:
    """A file's text, and the cheap test whether it can hold a token (before any parse)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._imports: str | None = None

    def may_hold(self, token: str) -> bool:
        kind, _, word = token.partition(":")
        text = self.text
        if kind == "text":
            return word in text
        if not word:
            return bool(_STRUCTURAL_TEXT[token].search(text))
        if word not in text:
            return False
        if kind == "name":
            return _found(_word(word), text)
        # A call spells `word(`, or calls an alias of `word`, which an import statement spells.
        return _found(_call(word), text) or _found(_word(word), self.imports)

    @property
    def imports(self) -> str:
        if self._imports is None:
            self._imports = "\n".join(_IMPORT_STATEMENTS.findall(self.text))
        return self._imports


def valid_token(token: str, in_file_needs: bool) -> bool:
    kind, _, word = token.partition(":")
    return (token in STRUCTURAL_TOKENS or (kind in ("call", "name") and word.isidentifier())
            or (kind == "text" and bool(word) and in_file_needs))


@dataclass
class Statement:
    """Facts about one top-level statement (or several on one line, `import a; import b`)."""

    first_line: int
    tokens: set[str] = field(default_factory=set)
    reads: set[str] = field(default_factory=set)  # names and attribute names it mentions
    defines: set[str] = field(default_factory=set)  # names, attributes, functions and classes it binds
    functions: set[str] = field(default_factory=set)  # functions defined in it, at any depth
    always: bool = False  # holds a fact every analysis may need (TF_USE_LEGACY_KERAS)
    definition: bool = False  # a function or class definition (its own scope), not module code


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
# Fields that never hold a node worth visiting; per type, the rest (computed once).
_LEAF_FIELDS = {"ctx", "type_comment", "kind", "id", "attr", "arg", "module", "level", "asname", "conversion"}
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {ast.Constant: ()}


def _child_fields(node_type: type) -> tuple[str, ...]:
    fields = _CHILD_FIELDS.get(node_type)
    if fields is None:
        fields = _CHILD_FIELDS[node_type] = tuple(f for f in node_type._fields if f not in _LEAF_FIELDS)
    return fields


class FileFacts:
    """One walk over CPython's tree of a file: per top-level statement facts, and whole-file names."""

    def __init__(self, tree: ast.Module) -> None:
        self.imports: dict[str, str] = {}
        self.bound_names: set[str] = set()
        self.statements: list[Statement] = []
        imports: list[ast.Import | ast.ImportFrom] = []
        called: list[tuple[Statement, set[str]]] = []  # per statement: names called as plain names
        by_line: dict[int, Statement] = {}
        for node in tree.body:
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
            statement = by_line.get(first)
            if statement is None:
                statement = by_line[first] = Statement(first)
                self.statements.append(statement)
            statement.definition = isinstance(node, _DEFINITIONS)
            called.append((statement, self._walk(statement, node, imports)))
        for node in sorted(imports, key=lambda n: (n.lineno, n.col_offset)):
            self._record_import(node)
        for statement, plain_calls in called:  # what imported aliases stand for, now that imports are known
            tokens = statement.tokens
            for name in statement.reads & self.imports.keys():
                tokens.update("name:" + part for part in self.imports[name].split("."))
            for name in plain_calls & self.imports.keys():
                tokens.add("call:" + self.imports[name].rsplit(".", 1)[-1])
            tokens.update("name:" + name for name in statement.reads)
        self.tokens = set().union(*(s.tokens for s in self.statements)) if self.statements else set()

    def _walk(self, statement: Statement, root: ast.stmt, imports: list) -> set[str]:
        """Record `root`'s facts into `statement`; return the names it calls as plain names."""
        tokens, reads, defines, bound = statement.tokens, statement.reads, statement.defines, self.bound_names
        plain_calls: set[str] = set()
        stack: list[tuple[ast.AST, bool]] = [(root, False)]  # (node, inside a function's body or parameters)
        while stack:
            node, in_function = stack.pop()
            kind = type(node)
            if kind is ast.Name:
                reads.add(node.id)
                continue
            if kind is ast.Attribute:
                reads.add(node.attr)
            elif kind is ast.Call:
                func = node.func
                if type(func) is ast.Attribute:
                    tokens.add("call:" + func.attr)
                elif type(func) is ast.Name:
                    tokens.add("call:" + func.id)
                    plain_calls.add(func.id)
            elif kind is ast.Constant:
                if node.value == _LEGACY_KERAS:
                    statement.always = True
                continue
            elif kind is ast.arg:
                bound.add(node.arg)
                if not in_function:
                    defines.add(node.arg)  # a lambda's parameters bind in the enclosing scope, as in the index
            elif kind is ast.Assign:
                self._bind(node.targets, defines, in_function)
            elif kind in (ast.AnnAssign, ast.AugAssign, ast.NamedExpr) or kind in _LOOPS:
                if kind is ast.AugAssign:
                    tokens.add("augassign")
                elif kind in _LOOPS:
                    tokens.add("loop")
                if kind is not ast.While:
                    self._bind([node.target], defines, in_function)
            elif kind is ast.withitem:
                if node.optional_vars is not None:
                    self._bind([node.optional_vars], defines, in_function)
            elif kind is ast.Return:
                tokens.add("return")
            elif kind in _DEFINITIONS:
                bound.add(node.name)
                defines.add(node.name)
                if kind is not ast.ClassDef:
                    statement.functions.add(node.name)
                    if not in_function:  # its name and decorators belong to the enclosing scope
                        stack.extend((d, False) for d in node.decorator_list)
                        stack.extend((child, True) for f in ("args", "body", "returns")
                                     for child in _as_list(getattr(node, f)))
                        continue
            elif kind is ast.Import or kind is ast.ImportFrom:
                imports.append(node)
                continue
            for name in _child_fields(kind):
                value = getattr(node, name)
                if type(value) is list:
                    stack.extend((child, in_function) for child in value if isinstance(child, ast.AST))
                elif isinstance(value, ast.AST):
                    stack.append((value, in_function))
        return plain_calls

    def _record_import(self, node: ast.Import | ast.ImportFrom) -> None:
        """As the CST index records imports (lintloop.analysis.index): the same table from either tree."""
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    self.imports[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    self.imports[head] = head
        elif not node.level and node.module and node.names[0].name != "*":
            for alias in node.names:
                self.imports[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def _bind(self, targets: list[ast.AST], defines: set[str], in_function: bool) -> None:
        """Names bound by an assignment's targets, as the CST index binds them
        (lintloop.analysis.index.TreeIndex). `defines` gets what another statement may look up:
        module-scope names (a function's locals are invisible outside it; class bodies and lambdas
        bind in the enclosing scope, as in the index) and attributes (`self.x` is looked up across
        the file). The targets are still walked as any node (their reads)."""
        targets = list(targets)
        while targets:
            target = targets.pop()
            kind = type(target)
            if kind is ast.Name:
                self.bound_names.add(target.id)
                if not in_function:
                    defines.add(target.id)
            elif kind is ast.Tuple or kind is ast.List:
                targets.extend(target.elts)
            elif kind is ast.Starred:
                targets.append(target.value)
            elif kind is ast.Attribute:
                defines.add(target.attr)

    def uses_framework(self, framework: str) -> bool:
        return Names(self.imports, self.bound_names).uses_framework(framework)

    # ----- selection ---------------------------------------------------------------------------
    def seeds(self, needs: Needs, text: str) -> list[int]:
        """Indexes of the statements where a rule with these needs may report, [] if none.

        A function or class is matched alone; the module's other statements together, since
        they share one scope (a tape opened in one statement, its `gradient` taken in the next)."""
        if not all(any(t in self.tokens or (t.startswith("text:") and t[5:] in text) for t in group)
                   for group in needs.file):
            return []
        matches = lambda tokens: all(any(t in tokens for t in group) for group in needs.statement)  # noqa: E731
        found = [i for i, s in enumerate(self.statements) if s.definition and matches(s.tokens)]
        module_code = [i for i, s in enumerate(self.statements) if not s.definition]
        if module_code and matches(set().union(*(self.statements[i].tokens for i in module_code))):
            found += module_code
        return found

    def closure(self, seeds: set[int]) -> set[int]:
        """The seeds, and every statement the analyses may consult about them (see the module docstring)."""
        selected = set(seeds) | {i for i, s in enumerate(self.statements) if s.always}
        reads: set[str] = set()
        functions: set[str] = set()
        fresh = set(selected)
        while fresh:
            for i in fresh:
                reads |= self.statements[i].reads
                functions |= self.statements[i].functions
            fresh = {i for i, s in enumerate(self.statements) if i not in selected
                     and (s.defines & reads or s.reads & functions)}
            selected |= fresh
        return selected

    def source_of(self, lines: list[str], selected: set[int]) -> tuple[str, list[int]]:
        """The text of the selected statements, and for each of its lines the line in the file (1-based)."""
        starts = [s.first_line for s in self.statements] + [len(lines) + 1]
        pieces: list[str] = []
        line_map: list[int] = []
        for i in sorted(selected):
            for line in range(starts[i], starts[i + 1]):
                pieces.append(lines[line - 1])
                line_map.append(line)
        if pieces and not pieces[-1].endswith(("\n", "\r")):
            pieces[-1] += "\n"
        return "".join(pieces), line_map


def _as_list(value: object) -> list:
    return value if isinstance(value, list) else [value] if isinstance(value, ast.AST) else []
