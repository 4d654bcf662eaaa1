"""Fuzz lintloop with generated programs and mutated training scripts (issue 14, part 2).

    python bench/fuzz.py [--examples 10000] [--seed 0]
    python bench/fuzz.py --profile scaling [--examples 200] [--seed 0] [--out DIR]

Inputs: programs generated from Python's grammar by hypothesmith (alone, and after framework
imports so that the rules engage), and our own training scripts (the rule fixtures and the rules'
examples) mutated: imports aliased, top-level statements shuffled, blocks nested or dedented,
tokens deleted; and notebooks made of such code cut into cells. Every rule is selected.

Properties, checked on every input (`check_module`, `check_notebook`):
- lintloop never raises and reports no internal error;
- every finding (and every edit of its fix) lies inside the file, or inside its cell;
- a file that does not parse is exactly one LL001 finding, and `fix` leaves it as it is; in a
  notebook, each code cell that does not parse is one LL001 in that cell;
- `fix --unsafe-fixes` output parses, and fixing it again changes nothing;
- the findings are the same with the screen on and off.

The long profile runs the examples across the strategies without stopping at a failure, and
prints each distinct failure with its shortest input; it exits 1 if there was any.
tests/test_fuzz.py runs a quick, derandomized profile of the same properties.

The scaling profile (issue 22) hunts inputs whose cost grows faster than they do: a fragment (a
training script, a mutated one, a generated program after framework imports) is grown n-fold —
repeated in one module, repeated with its names renamed apart, repeated in one function, nested
in a staircase of `if` blocks, repeated as notebook cells — to a base size worth measuring (n
doubled until linting costs 0.2 s) and to 10n; each is linted in a forked process (CPU time and
memory growth, a runaway stopped at 48 times the base cost). A fragment whose cost grows more than
×12 is measured again, and reported with its text (`--out DIR` writes it to a file, ready to become
a test); the exit status is 1 if there was any. tests/test_scaling.py counts the work of
bench/scaling.py's shapes instead, which does not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import ast
import functools
import gc
import io
import multiprocessing
import os
import re
import resource
import sys
import textwrap
import time
import tokenize
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

import hypothesmith
import libcst as cst
import nbformat
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from lintloop.finding import Finding
from lintloop.linter import fix_notebook, fix_text, lint_notebook, lint_text
from lintloop.notebook import Notebook
from lintloop.rule import RuleSet
from lintloop.rules import ALL_RULES

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
EVERY_RULE = RuleSet(list(ALL_RULES), {})
EVERY_RULE_UNSCREENED = RuleSet(list(ALL_RULES), {}, screen=False)
# Generated programs rarely name a framework: after these imports the rules look at them.
FRAMEWORK_IMPORTS = "import torch\nimport tensorflow as tf\nimport jax\nfrom torch import nn\n"
# The names the aliasing mutation renames, and the aliases it may give them.
ALIASABLE = ("torch", "tf", "tensorflow", "jax", "nn", "np", "optax", "keras", "F", "jnp", "optim")
ALIASES = ("t", "N", "T", "_fw", "mod", "torch2", "x")
BLOCK_HEADERS = ("def _fuzzed():", "async def _fuzzed():", "if flag:", "for _ in range(2):", "while running:",
                 "with context:", "class _Fuzzed:", "try:")
NO_FIX = "—"  # a rule's `fix_kind` when it has no fix
# The screen comparison lints the file a second time with every statement parsed: on the smaller inputs.
SCREEN_COMPARISON_MAX_CHARS = 20_000


# ----- the corpus of training scripts ----------------------------------------------------------


def training_scripts(fixable_only: bool = False) -> list[str]:
    """Our fixtures (bad and good) and every rule's flagged and not-flagged examples; or only the
    bad fixtures and flagged examples of the rules that have a fix (a tenth of the scripts)."""
    rules = [r for r in ALL_RULES if r.fix_kind != NO_FIX] if fixable_only else ALL_RULES
    names = ("_*bad.py",) if fixable_only else ("_*bad.py", "_*good.py")  # LL102_bad.py, LL102_torch_bad.py
    files = sorted({path for rule in rules for name in names for path in FIXTURES.glob(rule.code + name)})
    scripts = [path.read_text(encoding="utf-8") for path in files]
    scripts += [textwrap.dedent(example.code).lstrip() for rule in rules
                for example in (*rule.flagged, *(() if fixable_only else rule.not_flagged))]
    return scripts


# ----- mutations (each takes parsable text; the result may not parse) ---------------------------


class _Aliasing(cst.CSTTransformer):
    """`import torch` -> `import torch as t`, `from torch import nn` -> `... nn as N`, and every use
    of the name renamed (attributes after a dot and keyword names are other names: kept)."""

    def __init__(self, aliases: dict[str, str]) -> None:
        self.aliases = aliases

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def leave_Import(self, original: cst.Import, updated: cst.Import) -> cst.Import:
        return updated.with_changes(names=[self._aliased(a) for a in updated.names])

    def leave_ImportFrom(self, original: cst.ImportFrom, updated: cst.ImportFrom) -> cst.ImportFrom:
        if isinstance(updated.names, cst.ImportStar):
            return updated
        return updated.with_changes(names=[self._aliased(a) for a in updated.names])

    def _aliased(self, alias: cst.ImportAlias) -> cst.ImportAlias:
        if alias.asname is not None:
            bound = alias.asname.name
            if isinstance(bound, cst.Name) and bound.value in self.aliases:
                return alias.with_changes(asname=cst.AsName(cst.Name(self.aliases[bound.value])))
            return alias
        if isinstance(alias.name, cst.Name) and alias.name.value in self.aliases:
            return alias.with_changes(asname=cst.AsName(cst.Name(self.aliases[alias.name.value])))
        return alias

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        return updated.with_changes(value=self.aliases.get(updated.value, updated.value))

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.Attribute:
        return updated.with_changes(attr=original.attr)

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
        return updated.with_changes(keyword=original.keyword)


def aliased(text: str, aliases: dict[str, str]) -> str:
    return cst.parse_module(text).visit(_Aliasing(aliases)).code


def _segments(text: str) -> tuple[str, list[str]]:
    """The text before the first top-level statement, and each top-level statement's lines (with the
    comments and blank lines above it, decorators included)."""
    lines = text.splitlines(keepends=True)
    starts = sorted({min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
                     for node in ast.parse(text).body})
    if not starts:
        return text, []
    bounds = [1, *starts[1:], len(lines) + 1]
    header = "".join(lines[:starts[0] - 1])
    pieces = ["".join(lines[max(start, starts[0]) - 1:end - 1]) for start, end in zip(bounds, bounds[1:])]
    return header, [p if p.endswith("\n") else p + "\n" for p in pieces]


def shuffled(text: str, order: list[int]) -> str:
    """The top-level statements in the order `order` gives (indices taken modulo their count)."""
    header, pieces = _segments(text)
    if len(pieces) < 2:
        return text
    picked = [i % len(pieces) for i in order]
    rest = [i for i in range(len(pieces)) if i not in picked]
    return header + "".join(pieces[i] for i in dict.fromkeys([*picked, *rest]))


def nested(text: str, first: int, count: int, header: str) -> str:
    """Top-level statements `first`.. (`count` of them) indented into a block under `header`."""
    head, pieces = _segments(text)
    if not pieces:
        return text
    first %= len(pieces)
    inside = "".join(pieces[first:first + max(1, count)])
    block = header + "\n" + textwrap.indent(inside, "    ")
    if header == "try:":
        block += "finally:\n    pass\n"
    return head + "".join(pieces[:first]) + block + "".join(pieces[first + max(1, count):])


def dedented(text: str, first_line: int, count: int) -> str:
    """Up to four spaces of indentation taken from `count` lines from `first_line` (modulo the line count)."""
    lines = text.splitlines(keepends=True)
    if not lines:
        return text
    first_line %= len(lines)
    for n in range(first_line, min(len(lines), first_line + count)):
        lines[n] = re.sub(r"^ {1,4}", "", lines[n])
    return "".join(lines)


def tokens_deleted(text: str, picks: list[int]) -> str:
    """The text with the tokens `picks` names (indices modulo the token count) cut out."""
    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(text).readline)
                  if t.type not in (tokenize.ENDMARKER, tokenize.DEDENT) and t.start != t.end]
    except (tokenize.TokenError, SyntaxError):
        return text
    if not tokens:
        return text
    line_starts = [0]
    for line in text.splitlines(keepends=True):
        line_starts.append(line_starts[-1] + len(line))

    def offset(position: tuple[int, int]) -> int:
        return line_starts[position[0] - 1] + position[1]

    spans = sorted({(offset(tokens[i % len(tokens)].start), offset(tokens[i % len(tokens)].end)) for i in picks},
                   reverse=True)
    for start, end in spans:
        text = text[:start] + text[end:]
    return text


# ----- strategies -------------------------------------------------------------------------------


@st.composite
def mutated_scripts(draw: st.DrawFn, scripts: list[str], fixable: list[str]) -> str:
    """A script (half the time one with a fix, so that `fix` gets to work) mutated."""
    text = draw(st.one_of(st.sampled_from(scripts), st.sampled_from(fixable)))
    if draw(st.booleans()):
        names = draw(st.lists(st.sampled_from(ALIASABLE), min_size=1, max_size=3, unique=True))
        text = aliased(text, {name: draw(st.sampled_from(ALIASES)) for name in names})
    if draw(st.booleans()):
        text = shuffled(text, draw(st.lists(st.integers(0, 200), max_size=8)))
    for _ in range(draw(st.integers(0, 2))):
        text = nested(text, draw(st.integers(0, 200)), draw(st.integers(1, 6)), draw(st.sampled_from(BLOCK_HEADERS)))
    if draw(st.integers(0, 4)) == 0:
        text = dedented(text, draw(st.integers(0, 500)), draw(st.integers(1, 8)))
    if draw(st.integers(0, 3)) == 0:
        text = tokens_deleted(text, draw(st.lists(st.integers(0, 5000), min_size=1, max_size=3)))
    return text


@functools.cache
def grammar_programs() -> st.SearchStrategy[str]:
    # Built once: hypothesmith compiles Python's grammar (seconds) each time it is asked.
    return hypothesmith.from_grammar()


def generated_programs() -> st.SearchStrategy[str]:
    """hypothesmith's programs from the grammar and from libcst's node types, alone or after imports."""
    program = st.one_of(grammar_programs(), hypothesmith.from_node())
    return st.one_of(program, program.map(lambda code: FRAMEWORK_IMPORTS + code))


@st.composite
def notebooks(draw: st.DrawFn, scripts: list[str], fixable: list[str]) -> list[tuple[str, str]]:
    """(cell type, source) pairs: a script, mutated or generated, cut into code cells at top-level
    statements, with markdown cells and IPython syntax around them."""
    text = draw(st.one_of(mutated_scripts(scripts, fixable), grammar_programs()))
    try:
        head, pieces = _segments(text)
        pieces[:1] = [head + pieces[0]] if pieces else [head]
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pieces = [text]
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(pieces) - 1)), max_size=6))))
    bounds = [0, *cuts, len(pieces)]
    cells = [("code", "".join(pieces[a:b]).rstrip("\n")) for a, b in zip(bounds, bounds[1:]) if a < b]
    extras = [("markdown", "# Training\nSome *notes*."), ("code", "%matplotlib inline\n!pip install -q tqdm"),
              ("code", "%%bash\necho hi"), ("code", "%%time\nx = 1"), ("code", "    indented = 1\n    more = 2")]
    for extra in draw(st.lists(st.sampled_from(extras), max_size=3)):
        cells.insert(draw(st.integers(0, len(cells))), extra)
    return cells


def notebook_text(cells: list[tuple[str, str]]) -> str:
    new = {"code": nbformat.v4.new_code_cell, "markdown": nbformat.v4.new_markdown_cell}
    notebook = nbformat.v4.new_notebook(cells=[new[kind](source) for kind, source in cells])
    notebook.metadata["kernelspec"] = {"name": "python3", "language": "python", "display_name": "Python 3"}
    return nbformat.writes(notebook)


# ----- properties -------------------------------------------------------------------------------


def physical_lines(text: str) -> list[str]:
    """The file's lines as Python's tokenizer counts them (\\n, \\r\\n and \\r end a line)."""
    lines = re.split(r"\r\n|\r|\n", text)
    return lines[:-1] if lines and lines[-1] == "" else lines


def _position_inside(line: int, column: int, lines: list[str]) -> bool:
    width = len(lines[line - 1]) if 1 <= line <= len(lines) else 0
    return 1 <= line <= len(lines) + 1 and 1 <= column <= width + 1


def check_location(finding: Finding, lines: list[str]) -> None:
    """The finding's range (and each edit of its fix) lies inside `lines`, its end not before its start."""
    ranges = [(finding.line, finding.column, finding.end_line, finding.end_column)]
    if finding.fix is not None:
        ranges += [(e.line, e.column, e.end_line, e.end_column) for e in finding.fix.edits]
    for line, column, end_line, end_column in ranges:
        assert _position_inside(line, column, lines) and _position_inside(end_line, end_column, lines), (
            f"{finding.code} at {line}:{column}-{end_line}:{end_column} is outside the file ({len(lines)} lines)")
        assert (line, column) <= (end_line, end_column), f"{finding.code} ends before it starts"


def parses(text: str) -> bool:
    """Whether the text is valid, that is, some CPython 3.10-3.13 compiles it: where this interpreter's
    parser reads it, its compiler decides (a compile-time error, `return` outside a function, is
    LL001: issue 36); else the newest grammar (libcst's parser) does."""
    if sys.version_info >= (3, 12) and text.endswith("\\\r\n"):
        # 3.10 and 3.11 read a backslash continuing the last line into the end of the file after CRLF
        # as nothing: some CPython compiles it, so it is valid on every host (3.12+ refuse it).
        text = text[:-3] + " \r\n"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        try:
            cst.parse_module(text)
        except Exception:  # libcst's errors for input it cannot handle are not all ParserSyntaxError
            return False
        return True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(tree, "fuzzed.py", "exec", dont_inherit=True)
    except SyntaxError:
        return False
    except (ValueError, MemoryError, RecursionError):  # this host's limits: lintloop.nesting decides
        pass
    return True


def check_module(text: str) -> None:
    result = lint_text("fuzzed.py", text, EVERY_RULE)
    assert not result.errors, result.errors
    lines = physical_lines(text)
    for finding in result.findings:
        check_location(finding, lines)
    parsable = parses(text)
    syntax_errors = [f for f in result.findings if f.code == "LL001"]
    if parsable:
        assert not syntax_errors, f"LL001 on a file that parses: {syntax_errors[0].message}"
    else:
        assert [f.code for f in result.findings] == ["LL001"], (
            f"a file that does not parse: {[f.code for f in result.findings]}, not one LL001")
    if len(text) <= SCREEN_COMPARISON_MAX_CHARS:
        unscreened = lint_text("fuzzed.py", text, EVERY_RULE_UNSCREENED)
        assert [f.to_json() for f in result.findings] == [f.to_json() for f in unscreened.findings], (
            "different findings with the screen off")
    fixed = fix_text("fuzzed.py", text, EVERY_RULE, unsafe=True)
    assert not fixed.remaining.errors, fixed.remaining.errors
    if not parsable:
        assert fixed.text == text, "fix changed a file that does not parse"
    elif fixed.text != text:
        assert parses(fixed.text), "fix output does not parse"
    again = fix_text("fuzzed.py", fixed.text, EVERY_RULE, unsafe=True)
    assert again.text == fixed.text, "a second fix changed the file"


def _broken_cells(cells: list[tuple[str, str]]) -> set[int]:
    """The code cells without IPython syntax that do not parse (as IPython runs them: dedented)."""
    return {index for index, (kind, source) in enumerate(cells, 1)
            if kind == "code" and not _has_ipython_syntax(source) and not parses(textwrap.dedent(source))}


def _has_ipython_syntax(source: str) -> bool:
    return any(line.lstrip().startswith(("%", "!")) for line in source.splitlines())


def check_notebook(cells: list[tuple[str, str]]) -> None:
    text = notebook_text(cells)
    result = lint_notebook("fuzzed.ipynb", text, EVERY_RULE)
    assert not result.errors, result.errors
    for finding in result.findings:
        assert finding.cell is not None and 1 <= finding.cell <= len(cells), f"{finding.code} in cell {finding.cell}"
        kind, source = cells[finding.cell - 1]
        assert kind == "code", f"{finding.code} in markdown cell {finding.cell}"
        check_location(finding, physical_lines(source))
        for edit in finding.fix.edits if finding.fix else ():
            assert edit.cell == finding.cell, f"a fix of {finding.code} edits cell {edit.cell}, not {finding.cell}"
    broken = _broken_cells(cells)
    reported = sorted(f.cell for f in result.findings if f.cell in broken or (
        f.code == "LL001" and not _has_ipython_syntax(cells[f.cell - 1][1])))
    assert reported == sorted(broken) and all(f.code == "LL001" for f in result.findings if f.cell in broken), (
        f"cells that do not parse: {sorted(broken)}, reported in cells {reported}")
    fixed = fix_notebook("fuzzed.ipynb", text, EVERY_RULE, unsafe=True)
    assert not fixed.remaining.errors, fixed.remaining.errors
    if fixed.text != text:
        module = Notebook.parse(fixed.text).module(leave_out=frozenset(broken))
        assert parses(module.text), "fixed notebook's code does not parse"
    again = fix_notebook("fuzzed.ipynb", fixed.text, EVERY_RULE, unsafe=True)
    assert again.text == fixed.text, "a second fix changed the notebook"


# ----- the long profile -------------------------------------------------------------------------


@dataclass
class Tally:
    """Examples run and distinct failures (keyed by their message's first line, numbers left out),
    each with its shortest input."""

    examples: int = 0
    failures: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def run(self, check: Callable[[object], None], example: object) -> None:
        self.examples += 1
        try:
            check(example)
        except Exception as exc:  # every failure is recorded; the run goes on
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            key = re.sub(r"\d+", "N", detail.splitlines()[0])[:200]  # positions apart, the same failure
            self.counts[key] = self.counts.get(key, 0) + 1
            if key not in self.failures or len(repr(example)) < len(repr(self.failures[key])):
                self.failures[key] = example


def run_profile(examples: int, random_seed: int) -> Tally:
    scripts, fixable = training_scripts(), training_scripts(fixable_only=True)
    # The share of the examples each strategy gets: mutated scripts find the most (the rules fire).
    plan = [("mutated training scripts", mutated_scripts(scripts, fixable), check_module, 0.45),
            ("generated programs", generated_programs(), check_module, 0.35),
            ("notebooks", notebooks(scripts, fixable), check_notebook, 0.20)]
    tally = Tally()
    for name, strategy, check, share in plan:
        before, started = tally.examples, time.perf_counter()

        @settings(max_examples=max(1, round(examples * share)), deadline=None, database=None, 
                  suppress_health_check=list(HealthCheck), phases=("generate",))
        @seed(random_seed)  # the same examples on every run with the same arguments
        @given(strategy)
        def profile(example: object) -> None:
            tally.run(check, example)

        profile()
        print(f"{name}: {tally.examples - before} examples, {time.perf_counter() - started:.0f} s", flush=True)
    return tally


# ----- the scaling profile (issue 22): inputs whose cost grows faster than they do ---------------

MAX_GROWTH = 12.0  # allowed growth of CPU time and of memory when an input grows ×10
BASE_SECONDS = 0.2  # a base input is grown until linting it costs this much (fixed costs hide growth) ...
BASE_MAX_CHARS = 300_000  # ... or holds this much text
MEMORY_FLOOR_MIB = 8.0  # memory growth below this is the allocator's noise, not the input's
STAIRCASE_DEPTH = 8  # a staircase of 8 and of 80 levels (CPython takes 100 levels of indentation)
# As `lintloop check` runs (lintloop/cli.py): the cyclic GC's threshold changes how time grows with the heap.
GC_THRESHOLDS = (50_000, 20, 100)


def _repeated(fragment: str, n: int) -> str:
    """The fragment n times in one module (a script of many training loops, rebinding its names)."""
    return _ended(fragment) * n


def _renamed(fragment: str, n: int) -> str:
    """n copies, each with the module-level names it binds renamed apart (`train_step_3`, `model_3`)."""
    bound = _module_bindings(fragment)
    template = aliased(fragment, {name: f"{name}__copy__" for name in bound}) if bound else fragment
    return "".join(_ended(template).replace("__copy__", f"_{i}") for i in range(n))


def _in_function(fragment: str, n: int) -> str:
    """n copies as the body of one function (one long `main` of many loops)."""
    return "def main():\n" + textwrap.indent(_ended(fragment), "    ") * n


def _staircase(fragment: str, n: int) -> str:
    """The fragment at every level of n nested `if` blocks: n copies, n levels deep."""
    levels = []
    for depth in range(n):
        levels.append(textwrap.indent(f"if flag_{depth}:\n", "    " * depth))
        levels.append(textwrap.indent(_ended(fragment), "    " * (depth + 1)))
    return "".join(levels)


def _cells(fragment: str, n: int) -> str:
    """A notebook of n cells, each the fragment."""
    return notebook_text([("code", fragment)] * n)


def _ended(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


def _module_bindings(text: str) -> set[str]:
    """Names the module's own statements bind: functions, classes, assignment and loop targets."""
    bound: set[str] = set()
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AugAssign, ast.AnnAssign, ast.For)) else []
        bound.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return bound


@dataclass(frozen=True)
class Growth:
    name: str
    build: Callable[[str, int], str]
    notebook: bool = False
    fixed: int | None = None  # the base n, where the shape allows no other (a staircase's depth)


GROWTHS = (Growth("repeated", _repeated), Growth("renamed", _renamed), Growth("in-function", _in_function),
           Growth("staircase", _staircase, fixed=STAIRCASE_DEPTH), Growth("cells", _cells, notebook=True))


@dataclass
class Cost:
    """Linting an input once: CPU seconds and memory growth (MiB), or None past its time limit."""

    seconds: float
    mib: float


def lint_cost(text: str, notebook: bool, timeout: float) -> Cost | None:
    """The cost of linting `text`, in a forked process (so that a runaway input is killed and each
    measurement starts from the same heap)."""
    context = multiprocessing.get_context("fork")
    receiving, sending = context.Pipe(duplex=False)
    child = context.Process(target=_lint_and_send, args=(sending, text, notebook), daemon=True)
    child.start()
    sending.close()
    try:
        return receiving.recv() if receiving.poll(timeout) else None
    except EOFError:  # the child died (out of memory, a crash): no cost to compare
        return None
    finally:
        child.kill()
        child.join()


def _lint_and_send(connection: Connection, text: str, notebook: bool) -> None:
    gc.set_threshold(*GC_THRESHOLDS)
    with open("/proc/self/statm") as statm:
        resident = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    started = time.process_time()
    if notebook:
        lint_notebook("scaled.ipynb", text, EVERY_RULE)
    else:
        lint_text("scaled.py", text, EVERY_RULE)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    connection.send(Cost(time.process_time() - started, peak - resident))


@dataclass
class Scaled:
    """A fragment grown to n and to 10n copies: the costs, and how much more the bigger one costs."""

    fragment: str
    growth: Growth
    n: int
    chars: tuple[int, int]
    costs: tuple[Cost, Cost | None]

    @property
    def time_growth(self) -> float:
        small, big = self.costs
        return big.seconds / max(small.seconds, 1e-3) if big is not None else float("inf")

    @property
    def memory_growth(self) -> float:
        small, big = self.costs
        return max(big.mib, MEMORY_FLOOR_MIB) / max(small.mib, MEMORY_FLOOR_MIB) if big is not None else float("inf")

    @property
    def allowed_growth(self) -> float:
        """×12, or as much more as the text grew more than ×10 (a staircase ten times deeper is indented
        ten times more on every line)."""
        return MAX_GROWTH * max(1.0, self.chars[1] / self.chars[0] / 10)

    @property
    def linear(self) -> bool:
        return self.time_growth <= self.allowed_growth and self.memory_growth <= self.allowed_growth

    def describe(self) -> str:
        small, big = self.costs
        bigger = f"{big.seconds:.2f} s, {big.mib:.0f} MiB" if big is not None else "over its time limit"
        return (f"{self.growth.name} ×{self.n} ({self.chars[0]:,} chars): {small.seconds:.2f} s, {small.mib:.0f} MiB; "
                f"×{10 * self.n} ({self.chars[1]:,} chars): {bigger}; growth: time ×{self.time_growth:.1f}, "
                f"memory ×{self.memory_growth:.1f} (allowed ×{self.allowed_growth:.1f})")


def scaled(fragment: str, growth: Growth) -> Scaled | None:
    """The fragment grown by `growth` to a base size worth measuring and to ten times that, with both
    costs (the smaller of two runs each where the growth looks super-linear); None for a fragment that
    does not parse or that costs too much at its base."""
    try:
        ast.parse(fragment)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # a file that does not parse is one syntax check: nothing grows
    n = growth.fixed or 1
    while True:
        text = growth.build(fragment, n)
        small = lint_cost(text, growth.notebook, timeout=60)
        if small is None:
            return None
        if growth.fixed or small.seconds >= BASE_SECONDS or len(text) >= BASE_MAX_CHARS:
            break
        n *= 2
    big_text = growth.build(fragment, 10 * n)
    limit = max(10.0, 4 * MAX_GROWTH * small.seconds)  # a runaway input is stopped, and reported
    big = lint_cost(big_text, growth.notebook, limit)
    result = Scaled(fragment, growth, n, (len(text), len(big_text)), (small, big))
    if not result.linear and result.costs[1] is not None:  # confirm: the least of two runs of each
        again = (lint_cost(text, growth.notebook, 60), lint_cost(big_text, growth.notebook, limit))
        if again[0] is not None and again[1] is not None:
            result.costs = tuple(Cost(min(a.seconds, b.seconds), min(a.mib, b.mib))
                                 for a, b in zip(result.costs, again))
    return result


def run_scaling_profile(examples: int, random_seed: int) -> list[Scaled]:
    """Fragments (our training scripts, mutated ones, generated programs after framework imports)
    grown each way; those that grow faster than ×12 per ×10."""
    scripts, fixable = training_scripts(), training_scripts(fixable_only=True)
    fragments = st.one_of(st.sampled_from(scripts), mutated_scripts(scripts, fixable),
                          grammar_programs().map(lambda code: FRAMEWORK_IMPORTS + code))
    found: list[Scaled] = []
    measured = 0

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck),
              phases=("generate",))
    @seed(random_seed)
    @given(fragments, st.sampled_from(GROWTHS))
    def profile(fragment: str, growth: Growth) -> None:
        nonlocal measured
        result = scaled(fragment, growth)
        if result is None:
            return
        measured += 1
        print(f"{measured:4d}  {result.describe()}", flush=True)
        if not result.linear:
            found.append(result)

    profile()
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", choices=("properties", "scaling"), default="properties",
                        help="the properties every input must have (default), or inputs whose cost is super-linear")
    parser.add_argument("--examples", type=int, default=None,
                        help="examples across all strategies (default 10,000; for the scaling profile 200)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="scaling profile: write each super-linear fragment into this folder")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if args.profile == "scaling":
        return report_scaling(run_scaling_profile(args.examples or 200, args.seed), args.out, started)
    tally = run_profile(args.examples or 10_000, args.seed)
    print(f"{tally.examples} examples, {len(tally.failures)} distinct failures "
          f"({sum(tally.counts.values())} failing examples), {time.perf_counter() - started:.0f} s")
    for key, example in tally.failures.items():
        print(f"\n{key}  (x{tally.counts[key]})\nshortest input: {example!r}")
    return 1 if tally.failures else 0


def report_scaling(found: list[Scaled], out: Path | None, started: float) -> int:
    print(f"\n{len(found)} super-linear (growth over ×{MAX_GROWTH:g} per ×10 of the text), "
          f"{time.perf_counter() - started:.0f} s")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    for index, result in enumerate(found, 1):
        print(f"\n{result.describe()}\nfragment: {result.fragment!r}")
        if out is not None:
            (out / f"superlinear-{index}-{result.growth.name}.py").write_text(result.fragment, encoding="utf-8")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
