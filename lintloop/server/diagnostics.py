"""Findings as LSP diagnostics."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lsprotocol import types
from pygls.workspace.position_codec import PositionCodec

from lintloop.finding import Finding
from lintloop import rules  # the rule classes are imported at the first use
from lintloop.server.positions import finding_range
from lintloop.server.ruledocs import RuleDocs

SOURCE = "lintloop"
_SEVERITY = {"error": types.DiagnosticSeverity.Error, "warning": types.DiagnosticSeverity.Warning}


def diagnostic(finding: Finding, codec: PositionCodec, lines: Sequence[str], docs: RuleDocs,
               version: int | None) -> types.Diagnostic:
    href = docs.href(rules.BY_CODE[finding.code])
    return types.Diagnostic(
        range=finding_range(codec, lines, finding),
        severity=_SEVERITY[finding.severity],
        code=finding.code,
        code_description=types.CodeDescription(href=href) if href is not None else None,
        source=SOURCE,
        message=f"{finding.message} [{finding.name}]" + finding.detailed[len(finding.message):],
        data=diagnostic_data(finding, version),
    )


def diagnostic_data(finding: Finding, version: int | None) -> dict[str, Any]:
    """What the code actions for this diagnostic are made of: the document version it belongs to,
    the finding's start (1-based code points: the reported line takes a suppression comment) and
    its fix (edits in the same positions, valid for that version only)."""
    return {
        "version": version,
        "line": finding.line,
        "column": finding.column,
        "fix": None if finding.fix is None else dict(finding.fix.to_json(), description=finding.fix.description),
    }
