"""Deciding cheaply what needs a CST: bytes first, then CPython's `ast`, then a CST of only what matters.

Each rule declares its `Needs` in tokens this module understands:

- `call:NAME`  a call of something whose last name is NAME (`x.backward()`, `tf.function(f)`, or an
               imported alias of it: `from tensorflow import function as tfn; tfn(f)`), not a
               `super().NAME(...)` call (a class extending its base's method)
- `outside_call:NAME`  a call `x.NAME(...)` of a method on something other than `self` (or
               `super()`): a method called from outside its class (`model.forward(x)`); not on a
               name the file imports or defines a class by, nor an attribute of one
               (`Base.forward(self, x)`, `nn.LayerNorm.forward(self, x)`: no instance)
- `callee:QUALNAME`  a call of QUALNAME (`tensorflow.summary.scalar`) as the analyses' `Names.callee`
               resolves one through the file's imports (`tf.summary.scalar(...)`, `from tensorflow.summary
               import scalar as log; log(...)`); to the text screen, a call of its last name
- `name:NAME`  an identifier NAME: a name, an attribute, or a part of an imported name
               (`from tensorflow.distribute import MirroredStrategy` gives `distribute`)
- `loop`, `augassign`, `global`: a `for`/`while` loop, an augmented assignment, a `global`/`nonlocal`
               declaration
- `repeated`   a function called in a loop's body (or by such a function), which may run once per
               iteration: for the rules that ask `LoopValues.iteration_unit`
- `calls_loop` a unit that calls a function of the file holding a loop (by its last name): the loop
               runs there, after what the unit did before the call (`model.eval()`)
- `jax_traced` a name or attribute the file's imports resolve to a JAX transform that traces a function
               (`jax.jit`, `lax.scan`, `nnx.cond`, ... `TRACING_TRANSFORMS`): what traced code needs
- `runs_evaluated`  a unit calling `X.eval()` (no arguments) where X may run afterwards: the unit, or
               a function it names, runs X (`X(...)`, or `X.sub(...)` with `sub` an attribute the file
               assigns, or `module`); or the unit passes X to a call and some call of the file runs a
               parameter (by its name); module code is one unit here too
- `text:TEXT`  TEXT appears anywhere in the file (file needs only: a loose, cheap pre-condition)
- a shape a rule declares in its own module, its token `shape:NAME`: a `CallShape`, a call
               `x.METHOD(...)` of the shape its predicate says (`ds.map(fn)` passing no
               `num_parallel_calls`); a `UnitShape`, a unit naming one of its words whose nodes its
               predicate accepts (a Keras cross-entropy not given `from_logits=True`)

`Needs.file` groups must each be matched somewhere in the file; `Needs.statement` groups must all
be matched in one unit: a top-level function, a method, a class without its methods, or the
module's other statements together (they share one scope). Those units are the seeds. A CST is
built only of the seeds and what the analyses may consult about them: the units that define a
name a selected unit reads (functions it calls, values it uses, `self.x` it reads; a module
statement calling a method of it, `model.eval()`, which changes it for what runs after), those that
refer to a function defined in a selected unit (its call sites, `tf.function(f)`) or to a name bound
to a call of one (`step = jax.jit(train_step)`: its call sites), those that read an attribute a
seed assigns (`model.evaluate(self.test_ds)` for `self.test_ds = ...`), a selected
method's class, and a selected callable class's `__init__`, `build`, `forward`/`call` and `__call__`
(a torch module, a Keras model, any class with `__call__`: calling an instance, `net(x)` or a
`dataset.map(Preprocess())`, runs them without naming them). The file's
imports and bound names come from the whole file. So the analyses answer as on the whole file,
and the findings are the same (tests/test_screen.py, bench/compare_modes.py).

Before any parse, `SourceScreen` asks the same of the text, never saying no where the tree would say
yes: a word counts where it starts a word on a line that is not a comment line (a comment, or a
string's text: the tree holds neither), a call where `NAME(` follows no `def`, and an outside call where
a `.` (or a line break that may continue a chain) comes before it.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

from lintloop.analysis.calls import REPEAT_DEPTH
from lintloop.analysis.jax import TRACING_TRANSFORMS
from lintloop.analysis.names import Names
from lintloop.frameworks import FRAMEWORK_ROOTS, public_path, shows_framework

STRUCTURAL_TOKENS = frozenset({"loop", "repeated", "calls_loop", "runs_evaluated", "jax_traced", "augassign",
                               "global"})
# Statements holding a fact about the whole file that the analyses may need wherever a rule reports:
# the Keras version (TF_USE_LEGACY_KERAS) and a global mixed-precision policy (set at module level,
# or by a setup function, while the training step is elsewhere).
_FILE_FACT_STRINGS = frozenset({"TF_USE_LEGACY_KERAS", "mixed_float16"})
_FILE_FACT_CALLS = frozenset({"set_global_policy", "set_dtype_policy", "set_policy"})
# What calling an instance of a model class runs (torch `forward`, Keras `build`/`call`).
_INSTANCE_CALL_PATH = frozenset({"__init__", "build", "forward", "call", "__call__"})


# The method names some rule asks `outside_call:NAME` of (registered by `Needs`): only their calls get
# the token, not every method call of a file.
_OUTSIDE_CALLS: set[str] = set()
# The qualified names some rule asks `callee:QUALNAME` of (registered by `Needs`), and their last names.
_CALLEES: set[str] = set()
_CALLEE_LAST_NAMES: set[str] = set()


@dataclass(frozen=True)
class Shape:
    """A token a rule declares in its own module, `shape:NAME` (`CallShape`, `UnitShape`)."""

    name: str

    @property
    def token(self) -> str:
        return "shape:" + self.name


@dataclass(frozen=True)
class CallShape(Shape):
    """A call `x.METHOD(...)` whose tree `matches` (given the `ast.Call`); to the text screen, the word
    METHOD."""

    method: str
    matches: Callable[[ast.Call], bool]


@dataclass(frozen=True)
class UnitShape(Shape):
    """A unit naming one of `words` (a name or an attribute) whose `ast` nodes `matches`; to the text
    screen, one of `words`."""

    words: frozenset[str]
    matches: Callable[[list[ast.AST]], bool]


# The shapes the rules declare (registered by `Needs`): by token; the call shapes by method name.
_SHAPES: dict[str, CallShape | UnitShape] = {}
_SHAPES_BY_METHOD: dict[str, list[CallShape]] = defaultdict(list)
_UNIT_SHAPES: list[UnitShape] = []


@dataclass(frozen=True)
class Needs:
    """What must be in a file, and in the unit a finding is in, for a rule to fire: groups of tokens,
    each a string of this module's language or a rule's `Shape` (kept as its token)."""

    file: tuple[tuple[str | Shape, ...], ...] = ()
    statement: tuple[tuple[str | Shape, ...], ...] = ()

    def __post_init__(self) -> None:
        for shape in (t for group in (*self.file, *self.statement) for t in group if isinstance(t, Shape)):
            if shape.token not in _SHAPES:
                _SHAPES[shape.token] = shape
                if isinstance(shape, CallShape):
                    _SHAPES_BY_METHOD[shape.method].append(shape)
                else:
                    _UNIT_SHAPES.append(shape)
            elif _SHAPES[shape.token] is not shape:
                raise ValueError(f"two shapes named {shape.name!r}")
        as_tokens = lambda groups: tuple(tuple(t.token if isinstance(t, Shape) else t for t in group)  # noqa: E731
                                         for group in groups)
        object.__setattr__(self, "file", as_tokens(self.file))
        object.__setattr__(self, "statement", as_tokens(self.statement))
        tokens = [t for group in (*self.file, *self.statement) for t in group]
        _OUTSIDE_CALLS.update(t.partition(":")[2] for t in tokens if t.startswith("outside_call:"))
        callees = [t.partition(":")[2] for t in tokens if t.startswith("callee:")]
        _CALLEES.update(callees)
        _CALLEE_LAST_NAMES.update(callee.rsplit(".", 1)[-1] for callee in callees)

    def possible_in(self, text: SourceScreen) -> bool:
        """Cheap text test: False when no statement of the file can hold these tokens. (Plain loops:
        asked of every rule for every file, where generators cost as much as the cached answers.)"""
        may_hold = text.may_hold
        for groups in (self.file, self.statement):
            for group in groups:
                for token in group:
                    if may_hold(token):
                        break
                else:
                    return False
        return True


# What the source text of each structural token must contain.
_STRUCTURAL_TEXT = {
    "loop": re.compile(r"\b(?:for|while)\b"),
    "repeated": re.compile(r"\b(?:for|while)\b"),  # a function called in a loop: the file holds a loop
    "calls_loop": re.compile(r"\b(?:for|while)\b"),  # a call of a function holding a loop: likewise
    "runs_evaluated": re.compile(r"\beval\b"),  # an `X.eval()` call
    # A transform's name: in the reference itself, or in the import of an alias of it.
    "jax_traced": re.compile(r"\b(?:%s)\b" % "|".join(sorted({q.rsplit(".", 1)[1] for q in TRACING_TRANSFORMS}))),
    "augassign": re.compile(r"(?:[-+*/%&|^@]|//|\*\*|>>|<<)="),
    "global": re.compile(r"\b(?:global|nonlocal)\b"),
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
    """A match of `pattern` that starts a word of code (`_code_word`)."""
    return any(_code_word(text, m.start()) for m in pattern.finditer(text))


def _code_word(text: str, start: int) -> bool:
    """The match at `start` does not continue an identifier on its left, and is not on a comment line
    (a line whose text starts with `#`, which is a comment or a string's text, never code: the tree
    holds neither; unless a `{` before it on the line may open an f-string's expression)."""
    if start and (text[start - 1].isalnum() or text[start - 1] == "_"):
        return False
    line = max(text.rfind("\n", 0, start), text.rfind("\r", 0, start)) + 1
    head = text[line:start]
    return not head.lstrip(" \t").startswith("#") or "{" in head


_IMPORT_WORD = re.compile(r"\b(?:import|from)\b")


def _on_import_line(text: str, position: int) -> bool:
    start = text.rfind("\n", 0, position) + 1
    end = text.find("\n", position)
    if _IMPORT_WORD.search(text, start, len(text) if end == -1 else end):
        return True
    last = start - 2  # the line before's last character, before its line break
    if last >= 0 and text[last] == "\r":
        last -= 1
    return last >= 0 and text[last] == "\\"


# Before `name(`, what makes it no call the facts record: a definition's header (`def forward(`, in
# every torch module) or a call of the base's method (`super().forward(`, see `FileFacts._walk`).
_DEFINITION_OR_BASE_CALL = r"(?<![\w.])def[ \t]+|super\(\)\."
_NOT_A_CALL_BEFORE = re.compile(rf"(?:{_DEFINITION_OR_BASE_CALL})$")


# And before a method's `name(`, its own class's call of it (`self.forward(`).
_NOT_AN_OUTSIDE_CALL_BEFORE = re.compile(rf"(?:{_DEFINITION_OR_BASE_CALL}|(?<![\w.])self\.)$")


def _found_call(word: str, text: str, before: re.Pattern[str] = _NOT_A_CALL_BEFORE, method: bool = False) -> bool:
    """`text` may call `word`: it spells `word(` other than after what `before` matches (`def`,
    `super().`); `method`: only as an attribute (`_after_a_dot`)."""
    return any(_code_word(text, m.start()) and not before.search(text, max(0, m.start() - 12), m.start())
               and (not method or _after_a_dot(text, m.start())) for m in _call(word).finditer(text))


def _after_a_dot(text: str, start: int) -> bool:
    """The word at `start` may be an attribute's name: a `.` before it (spaces aside), or a line break,
    which may continue a chain (`model\n    .forward(x)`, even with a comment between). Not the word
    of a comment or docstring's prose (`in forward() so`, `feed-forward (MLP)`)."""
    index = start - 1
    while index >= 0 and text[index] in " \t":
        index -= 1
    return index >= 0 and text[index] in ".\n\r\\"


# Every byte but an ASCII letter, digit or `_` as a space: `bytes.split` then gives the text's words.
_WORD_BYTES = bytes(c if chr(c).isascii() and (chr(c).isalnum() or c == ord("_")) else ord(" ") for c in range(256))


class SourceScreen:
    """A file's text, and the cheap test whether it can hold a token (before any parse)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._imports: str | None = None
        # Rules share tokens and framework names: each is searched for once per file.
        self._held: dict[str, bool] = {}
        self._contained: dict[str, bool] = {}
        self._words: frozenset[bytes] | None = None
        self.firing: tuple[object, list] | None = None  # (a RuleSet, the rules that may fire): RuleSet.may_fire

    def contains(self, word: str) -> bool:
        """`word` appears anywhere in the text."""
        found = self._contained.get(word)
        if found is None:
            found = self._contained[word] = word in self.text
        return found

    def has_word(self, word: str) -> bool:
        """`word` (an identifier) may appear as a whole word: what a search for it as a name, a call or
        an import needs first. The text's words are split out once (at every character that is not an
        ASCII letter, digit or `_`: a word next to a non-ASCII letter is split off too, which only
        keeps more), where each word searched for would cost a scan of the whole text."""
        if not word.isascii():
            return self.contains(word)
        if self._words is None:
            self._words = frozenset(self.text.encode("utf-8", "surrogatepass").translate(_WORD_BYTES).split())
        return word.encode() in self._words

    def may_use(self, framework: str) -> bool:
        """The text may import `framework` (one of its packages), or shows its training shape
        (lintloop.frameworks.shows_framework): what `Names.uses_framework` asks of the tree."""
        key = "uses:" + framework
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = any(self.imports_framework(root) for root in FRAMEWORK_ROOTS[framework]) \
                or shows_framework(self.text, framework)
        return held

    def imports_framework(self, root: str) -> bool:
        """The text may import the package `root` (`torch`, `tensorflow`): it is a word on a line that
        says `import` or `from`, or continues one (after a backslash) - the imports
        `Names.uses_framework` reads from the tree. A root named only in strings and comments
        (`is_tf_available()`, "ported from jax") does not count."""
        key = "import:" + root
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = self.has_word(root) and any(
                _code_word(self.text, m.start()) and _on_import_line(self.text, m.start())
                for m in _word(root).finditer(self.text))
        return held

    def may_hold(self, token: str) -> bool:
        held = self._held.get(token)
        if held is None:
            held = self._held[token] = self._may_hold(token)
        return held

    def _may_hold(self, token: str) -> bool:
        kind, _, word = token.partition(":")
        text = self.text
        if kind == "callee":  # to the text, a call of its last name
            kind, word = "call", word.rsplit(".", 1)[-1]
        if kind == "text":
            return self.contains(word)
        if kind == "shape":
            shape = _SHAPES[token]
            words = (shape.method,) if isinstance(shape, CallShape) else shape.words
            return any(self.has_word(word) for word in words)
        if not word:
            return bool(_STRUCTURAL_TEXT[token].search(text))
        if not self.has_word(word):
            return False
        if kind == "name":
            return _found(_word(word), text)
        if kind == "outside_call":
            return _found_call(word, text, _NOT_AN_OUTSIDE_CALL_BEFORE, method=True)
        # A call spells `word(`, or calls an alias of `word`, which an import statement spells.
        return _found_call(word, text) or _found(_word(word), self.imports)

    @property
    def imports(self) -> str:
        if self._imports is None:
            self._imports = "\n".join(_IMPORT_STATEMENTS.findall(self.text))
        return self._imports


def valid_token(token: str, in_file_needs: bool) -> bool:
    kind, _, word = token.partition(":")
    return (token in STRUCTURAL_TOKENS or (kind in ("call", "outside_call", "name") and word.isidentifier())
            or (kind == "callee" and all(part.isidentifier() for part in word.split(".")))
            or (kind == "text" and bool(word) and in_file_needs) or token in _SHAPES)


@dataclass
class Unit:
    """Facts about one unit of a file that the screen selects or not: a top-level statement (or
    several on one line, `import a; import b`), or, in a class with methods, one method, or the
    class without its methods (its header and other statements)."""

    starts: list[int]  # first lines of its pieces of source
    tokens: set[str] = field(default_factory=set)
    reads: set[str] = field(default_factory=set)  # names and attribute names it mentions
    defines: set[str] = field(default_factory=set)  # names, attributes, functions and classes it binds
    attributes: set[str] = field(default_factory=set)  # the attributes it assigns (`self.test_ds = ...`)
    loop_calls: set[str] = field(default_factory=set)  # the last names of what it calls in a loop's body
    functions: set[str] = field(default_factory=set)  # functions defined in it, at any depth
    # Names bound to a call's result, with the names that call reads: `step = jax.jit(train_step)`,
    # `self.step = jax.jit(self._step)` (calling `step` runs `train_step`, like calling it by name).
    aliases: dict[str, set[str]] = field(default_factory=dict)
    always: bool = False  # holds a fact every analysis may need (_FILE_FACT_STRINGS, _FILE_FACT_CALLS)
    definition: bool = False  # a function, class or method (a scope of its own), not module code
    shell: int | None = None  # a method: the index of its class's unit
    methods: list[int] = field(default_factory=list)  # a class: the indexes of its methods' units
    # A class with a `forward` (torch module), `call` (Keras model) or `__call__`: its `__init__`, `build`,
    # `forward`/`call` and `__call__`, selected with the class, since calling an instance (`net(x)`,
    # `ds.map(Preprocess())`) runs them without naming them.
    call_path: list[int] = field(default_factory=list)
    empty_alone: bool = False  # a class whose body is only methods: it parses only with one of them
    evaluated: set[str] = field(default_factory=set)  # X of each `X.eval()` call (a dotted name)
    calls: list[ast.Call] = field(default_factory=list)  # its calls, for `_mark_evaluated_runs`
    roots: list[ast.AST] = field(default_factory=list)  # the module-scope nodes it was walked from

    @property
    def first_line(self) -> int:
        return self.starts[0]


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
# Where `FileFacts._walk` is: in a function's body, in a loop's body (flags).
_IN_FUNCTION, _IN_LOOP = 1, 2
_TRY_STAR = getattr(ast, "TryStar", ast.Try)  # `try: ... except* E:` (Python 3.11+)
# Fields that never hold a node worth visiting; per type, the rest (computed once).
_LEAF_FIELDS = {"ctx", "type_comment", "kind", "id", "attr", "arg", "module", "level", "asname", "conversion"}
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {ast.Constant: ()}


def _child_fields(node_type: type) -> tuple[str, ...]:
    fields = _CHILD_FIELDS.get(node_type)
    if fields is None:
        fields = _CHILD_FIELDS[node_type] = tuple(f for f in node_type._fields if f not in _LEAF_FIELDS)
    return fields


class FileFacts:
    """One walk over CPython's tree of a file: facts per unit, and whole-file names."""

    def __init__(self, tree: ast.Module) -> None:
        self.imports: dict[str, str] = {}
        self.bound_names: set[str] = set()
        self.parameters: set[str] = set()  # the names of every function's (and lambda's) parameters
        self.classes: set[str] = set()  # the names of the file's classes (at any depth)
        # (unit, method, name) of each outside call on a name or attribute chain (`model.`, `nn.LayerNorm.`,
        # not `self.`): a token unless the name is a class or an import, known once the file is walked.
        self._named_outside_calls: list[tuple[Unit, str, str]] = []
        self.units: list[Unit] = []
        self._fallback_imports: set[ast.Import | ast.ImportFrom] = set()  # under an `except` handler
        imports: list[ast.Import | ast.ImportFrom] = []
        called: list[tuple[Unit, set[str]]] = []  # per unit: names called as plain names
        by_line: dict[int, Unit] = {}
        for node in tree.body:
            first = _first_line(node)
            if isinstance(node, ast.ClassDef) and _splittable(node):
                called += self._split_class(node, imports)
                continue
            unit = by_line.get(first)
            if unit is None:
                unit = by_line[first] = self._unit(first)
            unit.definition = isinstance(node, _DEFINITIONS)
            called.append((unit, self._walk(unit, [node], imports)))
            changed = _changed_by_method_call(node)
            if changed is not None:
                unit.defines.add(changed)
        for node in sorted(imports, key=lambda n: (n.lineno, n.col_offset)):
            self._record_import(node)
        for unit, method, name in self._named_outside_calls:
            if name not in self.classes and name not in self.imports:
                unit.tokens.add("outside_call:" + method)
        # Statements sharing a line share a unit: each unit once, with all their calls (10,000 statements
        # on one line read the unit's growing names 10,000 times).
        by_unit: dict[int, tuple[Unit, set[str]]] = {}
        for unit, plain_calls in called:
            by_unit.setdefault(id(unit), (unit, set()))[1].update(plain_calls)
        for unit, plain_calls in by_unit.values():  # what imported aliases stand for, now that imports are known
            tokens = unit.tokens
            for name in unit.reads & self.imports.keys():
                tokens.update("name:" + part for part in self.imports[name].split("."))
            for name in plain_calls & self.imports.keys():
                tokens.add("call:" + self.imports[name].rsplit(".", 1)[-1])
            tokens.update("name:" + name for name in unit.reads)
        self.names = Names(self.imports, self.bound_names)
        self._mark_repeated()
        self._mark_loop_callers()
        self._mark_evaluated_runs()
        self._mark_jax_transforms()
        self._mark_unit_shapes()
        self._mark_callees()
        self.tokens = set().union(*(s.tokens for s in self.units)) if self.units else set()
        self._starts = sorted(start for s in self.units for start in s.starts)

    def _mark_repeated(self) -> None:
        """A function called by name in a loop's body may run once per iteration of it (a step function the
        training loop calls): it gets the `repeated` token, as the analyses' iteration units see it
        (LoopValues.iteration_unit), and so do the functions it calls, `REPEAT_DEPTH` deep."""
        by_function: dict[str, list[Unit]] = defaultdict(list)
        for unit in self.units:
            if unit.definition:
                for name in unit.functions:
                    by_function[name].append(unit)
        called = set().union(*(unit.loop_calls for unit in self.units))
        for _ in range(REPEAT_DEPTH):
            repeated = [unit for name in called for unit in by_function.get(name, ()) if "repeated" not in unit.tokens]
            for unit in repeated:
                unit.tokens.add("repeated")
            called = {token[5:] for unit in repeated for token in unit.tokens if token.startswith("call:")}

    def _mark_loop_callers(self) -> None:
        """A unit calling a function whose unit holds a loop gets `calls_loop`."""
        looping = {name for unit in self.units if unit.definition and "loop" in unit.tokens for name in unit.functions}
        for unit in self.units:
            if any(token.startswith("call:") and token[5:] in looping for token in unit.tokens):
                unit.tokens.add("calls_loop")

    def _unit(self, first_line: int) -> Unit:
        unit = Unit([first_line])
        self.units.append(unit)
        return unit

    def _mark_evaluated_runs(self) -> None:
        """`runs_evaluated` for a unit (or the module code together) calling `X.eval()` where X may run
        after it, as EvalWithoutNoGrad follows it: run (`X(x)`, or `X.decoder(x)`: a module only where
        the file assigns the attribute `decoder`, or `X.module` of a wrapper) in the unit, or in a
        function the unit names (one its loop calls, reading X from around); or passed to one of the
        unit's calls where some call of the file runs a parameter (`evaluate(model, loader)` and
        `def evaluate(net, loader): ... net(x)`; by name, as the rule follows a name into the functions
        a loop calls). Nothing else can be a forward pass after it."""
        if not any(unit.evaluated for unit in self.units):
            return
        assigned = set().union(*(unit.attributes for unit in self.units)) | {"module"}
        receivers = set().union(*(unit.evaluated for unit in self.units))
        # Per receiver X: the units running it, and the names they define (a unit reading one may call them).
        runners: dict[str, set[int]] = defaultdict(set)
        runner_names: dict[str, set[str]] = defaultdict(set)
        run_parameters = False
        for i, unit in enumerate(self.units):
            runs = _runs(unit.calls, assigned)
            run_parameters = run_parameters or not runs.isdisjoint(self.parameters)
            for receiver in runs & receivers:
                runners[receiver].add(i)
                runner_names[receiver].update(unit.defines)
        module_code = [i for i, unit in enumerate(self.units) if not unit.definition]
        groups = [[i] for i, unit in enumerate(self.units) if unit.definition and unit.evaluated] + [module_code]
        for group in groups:
            units = [self.units[i] for i in group]
            evaluated = set().union(*(unit.evaluated for unit in units))
            reads = set().union(*(unit.reads for unit in units))
            if any(not runners[x].isdisjoint(group) or not runner_names[x].isdisjoint(reads) for x in evaluated) \
                    or run_parameters and evaluated & {_dotted(value) for unit in units for call in unit.calls
                                                       for value in _argument_values(call)}:
                for unit in units:
                    unit.tokens.add("runs_evaluated")

    def _imports_from(self, qualnames: set[str] | frozenset[str]) -> bool:
        """Does the file import from a package one of `qualnames` is in? (Else none can resolve.)"""
        roots = {qualname.split(".")[0] for qualname in qualnames}
        return any(qualified.split(".")[0] in roots for qualified in self.imports.values())

    def _qualname(self, node: ast.expr) -> str | None:
        """What a name or attribute chain stands for through the file's imports (`Names.qualname`)."""
        path = _dotted(node)
        return self.names.qualified(path) if path else None

    def _mark_callees(self) -> None:
        """`callee:QUALNAME` for each call of a registered qualified name, resolved as `Names.callee` does:
        a name or attribute chain whose head the file imports, canonical spelling."""
        if not self._imports_from(_CALLEES):
            return
        for unit in self.units:
            for call in unit.calls:
                func = call.func
                if type(func) is ast.Attribute and func.attr in _CALLEE_LAST_NAMES or \
                        type(func) is ast.Name and func.id in self.imports:
                    qualified = self._qualname(func)
                    if qualified in _CALLEES:
                        unit.tokens.add("callee:" + qualified)

    def _mark_unit_shapes(self) -> None:
        """Each `UnitShape`'s token for each unit naming one of its words whose nodes it accepts."""
        for unit in self.units:
            nodes = None  # walked once per unit, for every shape
            for shape in _UNIT_SHAPES:
                if unit.reads.isdisjoint(shape.words):
                    continue
                nodes = nodes if nodes is not None else [node for root in unit.roots for node in ast.walk(root)]
                if shape.matches(nodes):
                    unit.tokens.add(shape.token)

    def _mark_jax_transforms(self) -> None:
        """`jax_traced` for each unit naming a JAX tracing transform as the analyses resolve one (`Names`:
        the file's imports, at a name or an attribute chain's head). Walked again only in a file that
        imports from a package such a transform is in (a torch module importing `jax.numpy` for a
        checkpoint holds none)."""
        if not self._imports_from(TRACING_TRANSFORMS):
            return
        for unit in self.units:
            if any(self._qualname(node) in TRACING_TRANSFORMS
                   for root in unit.roots for node in ast.walk(root) if type(node) in (ast.Name, ast.Attribute)):
                unit.tokens.add("jax_traced")

    def _split_class(self, node: ast.ClassDef, imports: list) -> list[tuple[Unit, set[str]]]:
        """A class with methods is screened method by method: a 5,000-line trainer class whose
        `training_step` holds a `backward()` needs only that method (and what it uses) in a CST."""
        shell_index = len(self.units)
        shell = self._unit(_first_line(node))
        shell.definition = True
        shell.defines.add(node.name)
        self.bound_names.add(node.name)
        self.classes.add(node.name)
        own: list[ast.AST] = [*node.decorator_list, *node.bases, *node.keywords]
        called = [(shell, set())]
        for child in node.body:
            if isinstance(child, _FUNCTIONS):
                method = self._unit(_first_line(child))
                method.definition = True
                method.shell = shell_index
                shell.methods.append(len(self.units) - 1)
                if child.name in _INSTANCE_CALL_PATH:
                    shell.call_path.append(len(self.units) - 1)
                called.append((method, self._walk(method, [child], imports)))
            else:
                own.append(child)
                if _first_line(child) not in shell.starts:
                    shell.starts.append(_first_line(child))
        shell.empty_alone = len(shell.starts) == 1
        if not any(isinstance(c, _FUNCTIONS) and c.name in ("forward", "call", "__call__") for c in node.body):
            shell.call_path = []
        if any(isinstance(c, _FUNCTIONS) and c.name == "__call__" for c in node.body):
            # Its instances are called like functions (`ds.map(Augment(0.1))`): a name bound from a call
            # reading it is followed to its readers, as one bound from a function (`Unit.aliases`).
            shell.functions.add(node.name)
        called[0][1].update(self._walk(shell, own, imports))
        return called

    def _walk(self, unit: Unit, roots: list[ast.AST], imports: list) -> set[str]:
        """Record the facts of `roots` (module-scope nodes) into `unit`; return the names it
        calls as plain names."""
        tokens, reads, defines, bound = unit.tokens, unit.reads, unit.defines, self.bound_names
        unit.roots.extend(roots)
        plain_calls: set[str] = set()
        loop_calls = unit.loop_calls
        # (node, where: _IN_FUNCTION (in a function's body) | _IN_LOOP (in a loop's body))
        stack: list[tuple[ast.AST, int]] = [(root, 0) for root in roots]
        while stack:
            node, where = stack.pop()
            in_function = where & _IN_FUNCTION
            kind = type(node)
            if kind is ast.Name:
                reads.add(node.id)
                continue
            if kind is ast.Attribute:
                reads.add(node.attr)
            elif kind is ast.Call:
                unit.calls.append(node)
                func = node.func
                if type(func) is ast.Attribute:
                    value = func.value
                    if func.attr == "eval" and not node.args and not node.keywords:
                        evaluated = _dotted(value)
                        if evaluated is not None:
                            unit.evaluated.add(evaluated)
                    elif func.attr in _SHAPES_BY_METHOD:
                        tokens.update(shape.token for shape in _SHAPES_BY_METHOD[func.attr] if shape.matches(node))
                    if not (type(value) is ast.Call and type(value.func) is ast.Name and value.func.id == "super"):
                        tokens.add("call:" + func.attr)
                        if func.attr in _OUTSIDE_CALLS and not (type(value) is ast.Name and value.id == "self"):
                            head = value
                            while type(head) is ast.Attribute:
                                head = head.value
                            if type(head) is ast.Name and head.id != "self":
                                self._named_outside_calls.append((unit, func.attr, head.id))
                            else:
                                tokens.add("outside_call:" + func.attr)
                    if func.attr in _FILE_FACT_CALLS:
                        unit.always = True
                    if where & _IN_LOOP:
                        loop_calls.add(func.attr)
                elif type(func) is ast.Name:
                    tokens.add("call:" + func.id)
                    plain_calls.add(func.id)
                    if func.id in _FILE_FACT_CALLS:
                        unit.always = True
                    if where & _IN_LOOP:
                        loop_calls.add(func.id)
            elif kind is ast.Constant:
                if node.value in _FILE_FACT_STRINGS:
                    unit.always = True
                continue
            elif kind is ast.arg:
                bound.add(node.arg)
                self.parameters.add(node.arg)
                if not in_function:
                    defines.add(node.arg)  # a lambda's parameters bind in the enclosing scope, as in the index
            elif kind is ast.Assign:
                self._bind(node.targets, unit, in_function)
                if type(node.value) is ast.Call and len(node.targets) == 1:
                    target = node.targets[0]
                    alias = target.attr if type(target) is ast.Attribute else \
                        target.id if type(target) is ast.Name and not in_function else None
                    if alias is not None:
                        unit.aliases[alias] = {n.id if type(n) is ast.Name else n.attr for n in ast.walk(node.value)
                                               if type(n) is ast.Name or type(n) is ast.Attribute}
            elif kind in _LOOPS:
                tokens.add("loop")
                if kind is ast.While:
                    stack.append((node.test, where | _IN_LOOP))  # evaluated on every iteration
                else:
                    self._bind([node.target], unit, in_function)
                    stack.append((node.target, where))
                    stack.append((node.iter, where))
                stack.extend((child, where | _IN_LOOP) for child in node.body)
                stack.extend((child, where) for child in node.orelse)
                continue
            elif kind in (ast.AnnAssign, ast.AugAssign, ast.NamedExpr):
                if kind is ast.AugAssign:
                    tokens.add("augassign")
                self._bind([node.target], unit, in_function)
            elif kind is ast.withitem:
                if node.optional_vars is not None:
                    self._bind([node.optional_vars], unit, in_function)
            elif kind is ast.Global or kind is ast.Nonlocal:
                tokens.add("global")
                continue
            elif kind in _DEFINITIONS:
                bound.add(node.name)
                defines.add(node.name)
                if kind is ast.ClassDef:
                    self.classes.add(node.name)
                else:
                    unit.functions.add(node.name)
                    if not in_function:  # its name and decorators belong to the enclosing scope
                        stack.extend((d, where) for d in node.decorator_list)
                        stack.extend((child, _IN_FUNCTION) for f in ("args", "body", "returns")
                                     for child in _as_list(getattr(node, f)))
                        continue
            elif kind is ast.Import or kind is ast.ImportFrom:
                imports.append(node)
                continue
            elif kind is ast.Try or kind is _TRY_STAR:
                self._fallback_imports.update(n for h in node.handlers for n in ast.walk(h)
                                              if type(n) is ast.Import or type(n) is ast.ImportFrom)
            for name in _child_fields(kind):
                value = getattr(node, name)
                if type(value) is list:
                    stack.extend((child, where) for child in value if isinstance(child, ast.AST))
                elif isinstance(value, ast.AST):
                    stack.append((value, where))
        return plain_calls

    def _record_import(self, node: ast.Import | ast.ImportFrom) -> None:
        """As the CST index records imports (lintloop.analysis.index): the same table from either tree,
        a fallback import under `except` not replacing the name the `try` imported."""
        fallback = node in self._fallback_imports
        recorded: list[tuple[str, str]] = []
        if isinstance(node, ast.Import):
            for alias in node.names:
                head = alias.name.split(".")[0]
                recorded.append((alias.asname, alias.name) if alias.asname else (head, head))
        elif not node.level and node.module and node.names[0].name != "*":
            recorded = [(alias.asname or alias.name, f"{node.module}.{alias.name}") for alias in node.names]
        for local, full in recorded:
            if not (fallback and local in self.imports):
                self.imports[local] = public_path(full)

    def _bind(self, targets: list[ast.AST], unit: Unit, in_function: bool) -> None:
        """Names bound by an assignment's targets, as the CST index binds them
        (lintloop.analysis.index.TreeIndex). The unit's `defines` gets what another statement may look
        up: module-scope names (a function's locals are invisible outside it; class bodies and lambdas
        bind in the enclosing scope, as in the index) and attributes (`self.x` is looked up across
        the file), also kept apart in `attributes`. The targets are still walked as any node (their reads)."""
        defines = unit.defines
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
                unit.attributes.add(target.attr)

    # ----- selection ---------------------------------------------------------------------------
    def seeds(self, needs: Needs, text: str) -> list[int]:
        """Indexes of the units where a rule with these needs may report, [] if none.

        A function, class or method is matched alone; the module's other statements together,
        since they share one scope (a tape opened in one statement, its `gradient` taken in the next)."""
        if not all(any(t in self.tokens or (t.startswith("text:") and t[5:] in text) for t in group)
                   for group in needs.file):
            return []
        matches = lambda tokens: all(any(t in tokens for t in group) for group in needs.statement)  # noqa: E731
        found = [i for i, s in enumerate(self.units) if s.definition and matches(s.tokens)]
        if self._module_code and matches(self._module_tokens):
            found += self._module_code
        return found

    @cached_property
    def _module_code(self) -> list[int]:
        """The units of module code (not definitions)."""
        return [i for i, s in enumerate(self.units) if not s.definition]

    @cached_property
    def _module_tokens(self) -> set[str]:
        return set().union(*(self.units[i].tokens for i in self._module_code))

    def closure(self, seeds: set[int]) -> set[int]:
        """The seeds, and every unit the analyses may consult about them (see the module docstring);
        with a method, its class (header and other statements).

        Selected in rounds: each adds the units that define a name a selected unit reads, or read a
        function (or an alias of one) a selected unit defines; and first, the units that read an attribute
        a seed assigns. A round looks only at what the one
        before it added, through indexes by name: a chain of 5,000 helpers takes 5,000 short rounds."""
        units = self.units
        definers, readers, alias_users = self._by_name
        selected: set[int] = set()
        reads: set[str] = set()
        functions: set[str] = set()
        unseen_aliases: set[str] = set()  # aliases the last round added, not yet looked up by an alias
        shells: set[int] = set()  # selected classes of only methods (each parses only with one of them)
        fresh = set(seeds) | {i for i, s in enumerate(units) if s.always}
        # `self.test_ds = ...batch().shuffle()` in `__init__`, `model.evaluate(self.test_ds)` in `fit`: what
        # reads an attribute a seed assigns may decide (an evaluation pipeline). One hop, from the seeds.
        fresh |= {i for name in set().union(*(units[i].attributes for i in seeds)) for i in readers.get(name, ())}
        while fresh:
            fresh |= {units[i].shell for i in fresh if units[i].shell is not None} - selected
            fresh |= {m for i in fresh for m in units[i].call_path} - selected
            selected |= fresh
            shells |= {i for i in fresh if units[i].empty_alone}
            new_reads = set().union(*(units[i].reads for i in fresh)) - reads
            new_functions = set().union(*(units[i].functions for i in fresh)) - functions
            reads |= new_reads
            functions |= new_functions
            # `step = jax.jit(train_step)`: calling `step` runs a selected function. An alias found in
            # this round counts from the next one, for other aliases too.
            aliases = {alias for name in new_functions | unseen_aliases
                       for i, alias in alias_users.get(name, ()) if i in selected}
            aliases |= {alias for i in fresh for alias, used in units[i].aliases.items() if used & functions}
            unseen_aliases = aliases - functions
            functions |= unseen_aliases
            fresh = {i for name in new_reads for i in definers.get(name, ()) if i not in selected}
            fresh |= {i for name in new_functions | unseen_aliases for i in readers.get(name, ()) if i not in selected}
            if not fresh:  # a class of only methods, none selected, needs one of them to parse
                shells = {i for i in shells if not selected.intersection(units[i].methods)}
                fresh = {units[i].methods[0] for i in shells}
        return selected

    @cached_property
    def _by_name(self) -> tuple[dict[str, list[int]], dict[str, list[int]], dict[str, list[tuple[int, str]]]]:
        """The units that define each name, those that read it, and the aliases bound from a call reading it."""
        definers: dict[str, list[int]] = defaultdict(list)
        readers: dict[str, list[int]] = defaultdict(list)
        alias_users: dict[str, list[tuple[int, str]]] = defaultdict(list)
        for i, unit in enumerate(self.units):
            for name in unit.defines:
                definers[name].append(i)
            for name in unit.reads:
                readers[name].append(i)
            for alias, used in unit.aliases.items():
                for name in used:
                    alias_users[name].append((i, alias))
        return definers, readers, alias_users

    def source_of(self, lines: list[str], selected: set[int]) -> tuple[str, list[int]]:
        """The text of the selected units, and for each of its lines the line in the file (1-based)."""
        ends = dict(zip(self._starts, self._starts[1:] + [len(lines) + 1]))
        pieces: list[str] = []
        line_map: list[int] = []
        for start in sorted(start for i in selected for start in self.units[i].starts):
            for line in range(start, ends[start]):
                pieces.append(lines[line - 1])
                line_map.append(line)
        if pieces and not pieces[-1].endswith(("\n", "\r")):
            pieces[-1] += "\n"
        return "".join(pieces), line_map


def _dotted(node: ast.expr) -> str | None:
    """`a.b.c` for a name/attribute chain, else None, as the analyses' `dotted` reads the CST (where
    `True`, `False` and `None` are names too)."""
    parts = []
    while type(node) is ast.Attribute:
        parts.append(node.attr)
        node = node.value
    if type(node) is ast.Name:
        parts.append(node.id)
    elif type(node) is ast.Constant and (node.value is True or node.value is False or node.value is None):
        parts.append(str(node.value))
    else:
        return None
    return ".".join(reversed(parts))


def _runs(calls: list[ast.Call], assigned: set[str]) -> set[str]:
    """What `calls` may run as a model (the analyses' dotted names): `X` of `X(...)`, and of
    `X.sub(...)` where `sub` is an attribute the file assigns (or `module`)."""
    found = set()
    for call in calls:
        func = call.func
        if type(func) is ast.Attribute and func.attr in assigned:
            found.add(_dotted(func.value))
        found.add(_dotted(func))
    found.discard(None)
    return found


def _argument_values(call: ast.Call) -> Iterator[ast.expr]:
    """What a call passes: its arguments' values (starred ones' too) and its keywords' values."""
    for argument in call.args:
        yield argument.value if type(argument) is ast.Starred else argument
    for keyword in call.keywords:
        yield keyword.value


def _changed_by_method_call(node: ast.stmt) -> str | None:
    """The name whose object a module-level statement calls a method of (`model.eval()`,
    `model.module.to(device)`): module code shares one scope, and such a call changes what the name
    holds for the statements after it (its mode, device, gradients), as an assignment would."""
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute)):
        return None
    owner = node.value.func.value
    while isinstance(owner, ast.Attribute):
        owner = owner.value
    return owner.id if isinstance(owner, ast.Name) else None


def _first_line(node: ast.stmt) -> int:
    """Where a statement's source starts: its first decorator, if any."""
    return min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])


def _splittable(node: ast.ClassDef) -> bool:
    """A class with methods, and no body statement on its header's line (`class A: x = 1; y = 2`).
    (A selection that does not parse alone makes the linter take the whole file.)"""
    return any(isinstance(child, _FUNCTIONS) for child in node.body) and all(
        _first_line(child) > node.lineno for child in node.body)


def _as_list(value: object) -> list:
    return value if isinstance(value, list) else [value] if isinstance(value, ast.AST) else []
