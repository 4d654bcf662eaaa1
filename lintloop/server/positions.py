"""Positions: lintloop's (1-based line, 1-based code-point column) and LSP's (0-based line, column in
the negotiated encoding: UTF-16 code units unless the client accepts UTF-32)."""

from __future__ import annotations

from collections.abc import Sequence

from lsprotocol import types
from pygls.workspace.position_codec import PositionCodec, ServerTextPosition, ServerTextRange

from lintloop.finding import Edit, Finding


def lsp_range(codec: PositionCodec, lines: Sequence[str], line: int, column: int, end_line: int,
              end_column: int) -> types.Range:
    """The LSP range of a lintloop span (of a finding or an edit) in a document of `lines`."""
    span = ServerTextRange(ServerTextPosition(line - 1, column - 1), ServerTextPosition(end_line - 1, end_column - 1))
    return codec.range_to_client_units(lines, span)


def finding_range(codec: PositionCodec, lines: Sequence[str], finding: Finding) -> types.Range:
    return lsp_range(codec, lines, finding.line, finding.column, finding.end_line, finding.end_column)


def edit_range(codec: PositionCodec, lines: Sequence[str], edit: Edit) -> types.Range:
    return lsp_range(codec, lines, edit.line, edit.column, edit.end_line, edit.end_column)


def lintloop_position(codec: PositionCodec, lines: Sequence[str], position: types.Position) -> tuple[int, int]:
    """(line, column), 1-based in code points, of an LSP position."""
    # The codec clamps a position past the end of its line (and may adjust its argument): pass a copy.
    server = codec.position_from_client_units(lines, types.Position(position.line, position.character))
    return server.line + 1, server.character + 1


def offset_position(text: str, offset: int) -> tuple[int, int]:
    """(line, column), 1-based in code points, of a character offset into `text`."""
    line_start = text.rfind("\n", 0, offset) + 1
    return text.count("\n", 0, offset) + 1, offset - line_start + 1


def overlaps(finding: Finding, start: tuple[int, int], end: tuple[int, int]) -> bool:
    """Does the finding's span touch the lintloop span start..end (both inclusive: an empty
    range, the cursor, at either end of a finding counts)?"""
    return (finding.line, finding.column) <= end and start <= (finding.end_line, finding.end_column)
