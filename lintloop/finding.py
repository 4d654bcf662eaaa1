"""What a rule reports: findings and their fixes, in the shape the output formats need."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Applicability = Literal["safe", "unsafe"]


@dataclass(frozen=True)
class Edit:
    """Replace the text from (line, column) to (end_line, end_column) with `content` (1-based columns)."""

    line: int
    column: int
    end_line: int
    end_column: int
    content: str


@dataclass(frozen=True)
class Fix:
    applicability: Applicability
    edits: tuple[Edit, ...]
    description: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"applicability": self.applicability, "edits": [asdict(e) for e in self.edits]}


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

    def sort_key(self) -> tuple[str, int, int, str]:
        return (self.path, self.line, self.column, self.code)

    def to_json(self) -> dict[str, Any]:
        return {
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
            "fix": self.fix.to_json() if self.fix else None,
            "probe": self.probe,
        }
