"""`LinePattern` finds what `^` in MULTILINE mode finds, in the same order, by a faster search."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lintloop.analysis.project import _RELATIVE_IMPORT
from lintloop.line_pattern import LinePattern
from lintloop.project_view import _FROM_IMPORT, _IMPORT_STATEMENT, _TOP_LEVEL_ASSIGNED_CALL, _TOP_LEVEL_RUN

BODIES = [
    _IMPORT_STATEMENT._body.pattern, _TOP_LEVEL_RUN._body.pattern, _TOP_LEVEL_ASSIGNED_CALL._body.pattern,
    _RELATIVE_IMPORT._body.pattern,
    r"a\n",  # a match that ends by taking the line break before the next line start
    r"(?:x|\n)+",  # matches that run over line starts
]
PIECES = ["from a import b", "from . import (\n c,\n d)", "import os", "x = f(1)", "  from .m import n", "for i in y:",
          "if __name__ == '__main__':", "a", "x", "\n", "\r\n", "\n\n", " ", "#", "(", ")", "train(", "s = jit(f)"]


def _expected(body: str, text: str) -> list[tuple[int, int, tuple]]:
    return [(m.start(), m.end(), m.groups()) for m in re.compile("^" + body, re.M).finditer(text)]


@pytest.mark.parametrize("body", BODIES)
@given(st.lists(st.sampled_from(PIECES), max_size=12))
def test_the_matches_are_those_of_a_multiline_caret(body, pieces):
    text = "".join(pieces)
    pattern = LinePattern(body)
    expected = _expected(body, text)
    assert [(m.start(), m.end(), m.groups()) for m in pattern.finditer(text)] == expected
    assert pattern.findall(text) == re.compile("^" + body, re.M).findall(text)
    first = pattern.search(text)
    assert (first.span() if first else None) == (expected[0][:2] if expected else None)


def test_bytes_and_the_start_of_the_text():
    text = b"from a import b\nx = 1\nfrom c.d import e\n"
    assert _FROM_IMPORT.findall(text) == [b"a", b"c.d"]
    assert _TOP_LEVEL_RUN.search("train(model)\n") is not None
    assert _TOP_LEVEL_RUN.search("def f():\n    train(model)\n") is None
