"""Hover over a flagged range: the documentation of the rules that flagged it."""

from __future__ import annotations

from collections.abc import Sequence

from lsprotocol import types
from pygls.workspace.position_codec import PositionCodec

from lintloop.finding import Finding
from lintloop import rules  # the rule classes are imported at the first use
from lintloop.server.positions import finding_range
from lintloop.server.ruledocs import rule_markdown


def hover(findings: Sequence[Finding], codec: PositionCodec, lines: Sequence[str]) -> types.Hover | None:
    """The hover for the findings under the cursor (None when there are none)."""
    if not findings:
        return None
    codes = sorted({f.code for f in findings})
    contents = "\n\n---\n\n".join(rule_markdown(rules.BY_CODE[code]) for code in codes)
    return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=contents),
                       range=finding_range(codec, lines, findings[0]))
