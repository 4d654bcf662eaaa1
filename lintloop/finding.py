"""What a rule reports: findings and their fixes, in the shape the output formats need."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from lintloop.rule import Rule

Applicability = Literal["safe", "unsafe"]


@dataclass(frozen=True)
class Edit:
    """Replace the text from (line, column) to (end_line, end_column) with `content` (1-based columns)."""

    line: int
    column: int
    end_line: int
    end_column: int
    content: str
    cell: int | None = None  # in a notebook: the cell the positions are in (1-based)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if self.cell is None:
            del data["cell"]
        return data


@dataclass(frozen=True)
class Fix:
    applicability: Applicability
    edits: tuple[Edit, ...]
    description: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"applicability": self.applicability, "edits": [e.to_json() for e in self.edits]}


@dataclass
class Finding:
    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    code: str
    name: str
    message: str
    kind: str
    severity: str
    fix: Fix | None = None
    probe: dict[str, Any] | None = None
    # Lines on which a suppression comment applies: the reported line and, for a finding in
    # a multi-line statement, that statement's first and last line.
    suppression_lines: tuple[int, ...] = field(default=(), compare=False)
    # In a notebook: the cell (1-based place among all cells) that `line`..`end_column` are in.
    cell: int | None = None
    # Under the headline (`message`): the remedy, and why it matters here and how much ("" where none).
    help: str = ""
    note: str = ""

    def sort_key(self) -> tuple[str, int, int, int, str]:
        return (self.path, self.cell or 0, self.line, self.column, self.code)

    @property
    def where(self) -> str:
        """`line:column`, or `cell N:line:column` in a notebook."""
        position = f"{self.line}:{self.column}"
        return position if self.cell is None else f"cell {self.cell}:{position}"

    @property
    def detailed(self) -> str:
        """The headline, then its note and help on lines of their own (an editor's diagnostic text)."""
        return "\n".join([self.message, *(f"{label}: {text}" for label, text in (("note", self.note),
                                                                                  ("help", self.help)) if text)])

    def to_json(self) -> dict[str, Any]:
        data = {
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
            "code": self.code,
            "name": self.name,
            "message": self.message,
            "kind": self.kind,
            "severity": self.severity,
            "help": self.help or None,
            "note": self.note or None,
            "fix": self.fix.to_json() if self.fix else None,
            "probe": self.probe,
        }
        if self.cell is not None:
            data["cell"] = self.cell
        return data


def unique(findings: list[Finding]) -> list[Finding]:
    """`findings` (sorted) without repeats: a finding in a module of the project is found by the lint
    of each module that imports what it is in (lintloop.project_view), and reported once."""
    seen: set[tuple] = set()
    kept = []
    for finding in findings:
        key = (finding.path, finding.cell, finding.line, finding.column, finding.end_line, finding.end_column, finding.code)
        if key not in seen:
            seen.add(key)
            kept.append(finding)
    return kept


def engine_finding(display: str, rule: type[Rule], message: str, line: int = 1, column: int = 1,
                   end_line: int | None = None, end_column: int | None = None, *, help: str = "",
                   note: str = "") -> Finding:
    """A finding the engine itself reports (LL0xx): about the input, not about a rule's visit."""
    return Finding(display, line, column, end_line or line, end_column or column, rule.code, rule.name,
                   message, rule.kind, rule.severity(), suppression_lines=(line,), help=help, note=note)
