"""Code actions: a finding's fix, a suppression comment, and all safe fixes of the document."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from lsprotocol import types
from pygls.workspace.position_codec import PositionCodec

from lintloop.finding import Edit, Finding
from lintloop.server.positions import edit_range, offset_position
from lintloop.suppression import Suppressions

FIX_ALL_KIND = "source.fixAll.lintloop"
PROVIDED_KINDS = (types.CodeActionKind.QuickFix, FIX_ALL_KIND)


@dataclass(frozen=True)
class EditTarget:
    """The document version the edits apply to, and how the client takes edits."""

    uri: str
    version: int | None
    lines: Sequence[str]
    codec: PositionCodec
    document_changes: bool  # the client supports versioned TextDocumentEdits

    def workspace_edit(self, edits: list[Edit]) -> types.WorkspaceEdit:
        return combined_edit([(self, edits)])

    def text_edits(self, edits: list[Edit]) -> list[types.TextEdit]:
        return [types.TextEdit(range=edit_range(self.codec, self.lines, e), new_text=e.content) for e in edits]


class EditsTarget(Protocol):
    """Where a fix's edits go: one document, or the cells of a notebook (by each edit's `cell`)."""

    def workspace_edit(self, edits: list[Edit]) -> types.WorkspaceEdit: ...


def combined_edit(parts: Sequence[tuple[EditTarget, list[Edit]]]) -> types.WorkspaceEdit:
    """One workspace edit making the edits of each part in its document (all targets of one client)."""
    if all(target.document_changes for target, _ in parts):
        return types.WorkspaceEdit(document_changes=[
            types.TextDocumentEdit(types.OptionalVersionedTextDocumentIdentifier(target.uri, target.version),
                                   target.text_edits(edits)) for target, edits in parts])
    return types.WorkspaceEdit(changes={target.uri: target.text_edits(edits) for target, edits in parts})


def requested(kind: str, only: Sequence[str] | None) -> bool:
    """Does the client's `only` filter ask for actions of `kind` (a kind covers its sub-kinds)?"""
    return only is None or any(kind == wanted or kind.startswith(f"{wanted}.") for wanted in only)


def fix_action(finding: Finding, target: EditsTarget, diagnostic: types.Diagnostic) -> types.CodeAction:
    assert finding.fix is not None
    safe = finding.fix.applicability == "safe"
    description = finding.fix.description or f"apply the fix for {finding.name}"
    return types.CodeAction(
        title=f"Fix {finding.code}: {description}" + ("" if safe else " (unsafe)"),
        kind=types.CodeActionKind.QuickFix,
        diagnostics=[diagnostic],
        is_preferred=safe,
        edit=target.workspace_edit(list(finding.fix.edits)),
    )


def suppress_action(finding: Finding, target: EditTarget, suppressions: Suppressions,
                    diagnostic: types.Diagnostic) -> types.CodeAction:
    return types.CodeAction(
        title=f"Suppress {finding.code} on this line",
        kind=types.CodeActionKind.QuickFix,
        diagnostics=[diagnostic],
        edit=target.workspace_edit([suppression_edit(finding.code, comment_line(finding, target.lines),
                                                     target.lines, suppressions)]),
    )


def comment_line(finding: Finding, lines: Sequence[str]) -> int:
    """The line to put the suppression on: the reported line, unless it continues with a backslash
    (a comment there would end the statement): then the statement's last line, where it also counts."""
    def continued(line: int) -> bool:
        return line <= len(lines) and lines[line - 1].rstrip("\r\n").endswith("\\")

    if not continued(finding.line):
        return finding.line
    return next((line for line in sorted(finding.suppression_lines, reverse=True) if not continued(line)),
                finding.line)


def suppression_edit(code: str, line: int, lines: Sequence[str], suppressions: Suppressions) -> Edit:
    """Add `code` to the line's `# lintloop: ignore[...]` comment, or end the line with a new one."""
    for entry in suppressions.entries:
        if entry.line == line and entry.selectors and not entry.file_level and not entry.from_noqa:
            bracket = entry.end_column - 1  # the entry's span ends with its closing `]`
            return Edit(line, bracket, line, bracket, f", {code}")
    end = len(lines[line - 1].rstrip("\r\n")) + 1 if line <= len(lines) else 1
    return Edit(line, end, line, end, f"  # lintloop: ignore[{code}]")


def fix_all_action(changes: dict[int | None, tuple[str, str]], target: EditsTarget) -> types.CodeAction | None:
    """All safe fixes as one edit per changed text, replacing its changed part; `changes` are the
    (old, new) texts of the document (under None) or of a notebook's cells (by place). None if no change."""
    edits = [replace(replacement(old, new), cell=cell) for cell, (old, new) in changes.items() if new != old]
    if not edits:
        return None
    return types.CodeAction(
        title="Fix all safe lintloop fixes",
        kind=FIX_ALL_KIND,
        edit=target.workspace_edit(edits),
    )


def replacement(old_text: str, new_text: str) -> Edit:
    """One edit turning `old_text` into `new_text`: the span between their common prefix and suffix."""
    prefix = len(os.path.commonprefix([old_text, new_text]))
    suffix = 0
    room = min(len(old_text), len(new_text)) - prefix
    while suffix < room and old_text[-1 - suffix] == new_text[-1 - suffix]:
        suffix += 1
    (line, column), (end_line, end_column) = (offset_position(old_text, prefix),
                                              offset_position(old_text, len(old_text) - suffix))
    return Edit(line, column, end_line, end_column, new_text[prefix:len(new_text) - suffix])
