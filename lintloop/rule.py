"""The declarative shape of a rule: metadata, examples, docs, and a visitor over shared analyses."""

from __future__ import annotations

import functools
import textwrap
from dataclasses import dataclass, field
from typing import Any, ClassVar

import libcst as cst

from lintloop.analysis import FileContext
from lintloop.analysis.iteration import Iteration
from lintloop.finding import Applicability
from lintloop.frameworks import FRAMEWORK_LABELS, framework_evidence, framework_names
from lintloop.rule_examples import example_names
from lintloop.screen import Needs, SourceScreen



@dataclass
class Replacement:
    """Replace `node`'s source text with `code`."""

    node: cst.CSTNode
    code: str


@dataclass
class FixSpec:
    applicability: Applicability
    replacements: list[Replacement]
    description: str = ""


# A finding's headline fits one line of a terminal beside its position and code (ruff's are shorter still).
HEADLINE_LIMIT = 100
DESCRIPTION_LIMIT = 72


@dataclass
class Report:
    node: cst.CSTNode
    message: str
    fix: FixSpec | None = None
    help: str = ""
    note: str = ""


@dataclass(frozen=True)
class Example:
    """A program the rule flags, or must not. A flagged one states what it gives, as a snapshot does:
    `expect`, each finding's range, its fix's safety and its message; `fix_diff`, what its fixes change
    (where it has one), as a diff. tests/example_expectations.py writes them; tests/test_rule_examples.py
    compares."""

    code: str
    expect: str | None = None
    fix_diff: str | None = None


@dataclass
class RuleOption:
    default: Any
    choices: tuple[Any, ...] = ()
    help: str = ""


class Rule:
    """Subclass, set the metadata, and define `visit_<CSTNodeType>(node)` methods.

    Visitors receive every node of that type in the file (from the engine's single walk)
    and ask `self.ctx` (a `FileContext`) the questions that need more than the node.
    """

    code: ClassVar[str]
    name: ClassVar[str]
    frameworks: ClassVar[tuple[str, ...]] = ()
    kind: ClassVar[str] = "bug"
    default_on: ClassVar[bool] = True
    fix_kind: ClassVar[str] = "—"
    probe: ClassVar[str] = "—"
    # A topic of lintloop.analysis.intent.PROSE_TOPICS: in a notebook, a finding in a cell whose markdown
    # just before speaks of it shows the pitfall on purpose (a guide's demonstration) and is not reported.
    shown_in_prose: ClassVar[str | None] = None
    # One line for `lintloop rules` and the README's table (at most DESCRIPTION_LIMIT characters).
    description: ClassVar[str]
    summary: ClassVar[str]
    # Documentation printed by `lintloop rule`: each a paragraph.
    why: ClassVar[str] = ""
    symptom: ClassVar[str] = ""
    remedy: ClassVar[str] = ""
    fix_safety: ClassVar[str] = "No automatic fix."
    flagged: ClassVar[tuple[Example, ...]] = ()
    not_flagged: ClassVar[tuple[Example, ...]] = ()
    options: ClassVar[dict[str, RuleOption]] = {}
    # What a file, and the unit (function, method, class header, module code) holding a finding,
    # must contain for the rule to fire, in the screen's tokens (lintloop.screen). Files and units
    # where no enabled rule may fire are never parsed into a CST: a token missing here is a missed finding.
    needs: ClassVar[Needs] = Needs()

    def __init__(self, ctx: FileContext, settings: dict[str, Any] | None = None) -> None:
        self.ctx = ctx
        self.settings = {key: opt.default for key, opt in self.options.items()}
        self.settings.update(settings or {})
        self.reports: list[Report] = []

    # ----- metadata ---------------------------------------------------------------------
    @classmethod
    def severity(cls) -> str:
        return "error" if cls.kind == "bug" else "warning"

    @classmethod
    def has_visitor(cls) -> bool:
        return _has_visitor(cls)

    @classmethod
    def may_fire(cls, source: SourceScreen) -> bool:
        """Cheap text test: False when this rule cannot fire on a file (so it needs no parse)."""
        for framework in cls.frameworks:
            if source.may_use(framework):
                return cls.needs.possible_in(source)
        return False

    @classmethod
    def metadata(cls) -> dict[str, Any]:
        return {
            "code": cls.code,
            "name": cls.name,
            "description": cls.description,
            "summary": cls.summary,
            "frameworks": list(cls.frameworks),
            "kind": cls.kind,
            "severity": cls.severity(),
            "default": "on" if cls.default_on else "off",
            "fix": cls.fix_kind,
            "probe": cls.probe,
            "options": {k: {"default": o.default, "choices": list(o.choices), "help": o.help}
                        for k, o in cls.options.items()},
        }

    @classmethod
    def documentation(cls) -> str:
        frameworks = ", ".join(FRAMEWORK_LABELS[f] for f in cls.frameworks) or "—"
        parts = [
            f"{cls.code} {cls.name}",
            f"framework: {frameworks} · kind: {cls.kind} · default: {'on' if cls.default_on else 'off'}"
            f" · fix: {cls.fix_kind} · probe: {cls.probe}",
            "What it flags\n" + _indent(cls.summary),
        ]
        for title, text in (("Why it is wrong", cls.why), ("What you see when it happens", cls.symptom),
                            ("How to fix it", cls.remedy), ("Fix safety", cls.fix_safety)):
            if text:
                parts.append(f"{title}\n{_indent(text)}")
        if cls.flagged:
            parts.append("Example (flagged)\n" + _indent(cls.flagged[0].code, 4))
        if cls.not_flagged:
            parts.append("Not flagged\n" + _indent(cls.not_flagged[0].code, 4))
        examples = example_names(cls.code)
        if examples:
            parts.append("Runnable examples (the programs the symptom was measured on)\n" + _indent(
                ", ".join(examples) + f"\n`lintloop rule {cls.code} --example [NAME]` prints one (default: "
                f"{examples[0]}); `lintloop probe FILE` runs it and reports what happened."))
        if cls.options:
            parts.append("Options ([tool.lintloop.rules." + cls.code + "])\n" + "\n".join(
                f"  {k} = {o.default!r}  {o.help}" for k, o in cls.options.items()))
        return "\n\n".join(parts) + "\n"

    # ----- running ----------------------------------------------------------------------
    def run(self) -> list[Report]:
        for attr, node_type in _visitors(type(self)):
            visit = getattr(self, attr)
            for node in self.ctx.nodes(node_type):
                visit(node)
        return self.reports

    def report(self, node: cst.CSTNode, message: str, fix: FixSpec | None = None, *, help: str = "",
               note: str = "") -> None:
        """Report `node`. `message` is the headline a person reads in one glance (what, and the code it is
        about; at most HEADLINE_LIMIT characters); `help` the remedy; `note` why it matters here and how
        much (the magnitude, the call that runs it every step): the full text format shows both under
        the code frame, JSON carries them, and `lintloop rule CODE` explains the rest."""
        self.reports.append(Report(node, message, fix, help, note))



class LoopRule(Rule):
    """A rule that judges each `for` / `while` loop by what one iteration of it does (the PyTorch
    iteration model, `ctx.iteration.of`): subclasses define `check_iteration`."""

    def visit_For(self, node: cst.For) -> None:
        self.check_iteration(self.ctx.iteration.of(node))

    def visit_While(self, node: cst.While) -> None:
        self.check_iteration(self.ctx.iteration.of(node))

    def check_iteration(self, iteration: Iteration) -> None:
        raise NotImplementedError

def _indent(text: str, width: int = 2) -> str:
    return textwrap.indent(textwrap.dedent(text).strip("\n"), " " * width)


@dataclass
class RuleSet:
    """The rules enabled for a run, with their options."""

    rules: list[type[Rule]]
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Off (every file and statement parsed into a CST) only to prove that the screen changes no
    # result: tests/test_screen.py, bench/compare_modes.py.
    screen: bool = True

    @property
    def codes(self) -> set[str]:
        return {r.code for r in self.rules}

    def may_fire(self, source: SourceScreen) -> list[type[Rule]]:
        """The rules with a visitor that may fire in the text (each rule's screen), decided once per text:
        the linter asks whether any may, then which."""
        if source.firing is None or source.firing[0] is not self:
            source.firing = (self, [rule for rule in self.rules if rule.has_visitor() and rule.may_fire(source)])
        return source.firing[1]

    @property
    def framework_roots(self) -> tuple[bytes, ...]:
        """The framework names (`torch`, `tensorflow`, ...) some enabled rule needs in a file's text."""
        return _framework_roots(tuple(self.rules))

    @property
    def framework_evidence(self) -> tuple[tuple[bytes, ...], ...]:
        """The training shapes that stand for those frameworks in a file that does not name them."""
        return framework_evidence(frozenset(fw for rule in self.rules if rule.has_visitor() for fw in rule.frameworks))


@functools.cache
def _framework_roots(rules: tuple[type[Rule], ...]) -> tuple[bytes, ...]:
    """Asked for every file a worker reads: computed once per rule selection."""
    return framework_names(frozenset(framework for rule in rules if rule.has_visitor() for framework in rule.frameworks))


@functools.cache
def _has_visitor(rule: type[Rule]) -> bool:
    return bool(_visitors(rule))


@functools.cache
def _visitors(rule: type[Rule]) -> tuple[tuple[str, type[cst.CSTNode]], ...]:
    """The rule's `visit_<NodeType>` methods, with their node types. Asked for every rule of every
    linted file: `dir` of a rule class costs ~16 µs."""
    return tuple((attr, getattr(cst, attr[len("visit_"):])) for attr in dir(rule) if attr.startswith("visit_"))
