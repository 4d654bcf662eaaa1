"""libcst's tree of a deep or wide text, built from pieces (lintloop.pieces): the tree of one parse,
and bounded work however deep its brackets nest (issue 36: 190 levels of lists, 50 kB, 3.9 GB)."""

from __future__ import annotations

import itertools

import libcst as cst
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lintloop import pieces
from lintloop.source import source_lines


def nested(opening: str, closing: str, depth: int, core: str = "1") -> str:
    return opening * depth + core + closing * depth


SHAPES = {
    "lists": "x = " + nested("[", "]", 60) + "\n",
    "calls": "x = " + nested("f(", ")", 60) + "\n",
    "subscripts": "x = " + nested("a[", "]", 60) + "\n",
    "dicts": "x = " + nested("{1: ", "}", 60) + "\n",
    "sets and tuples": "x = " + nested("{(", ",)}", 40) + "\n",
    "parentheses": "x = " + nested("(", ")", 190, "a") + "\n",
    "spaced parentheses": "x = f(" + nested("( ", " )", 100, "a + b") + ", " + nested("(\n", ")", 40, "[1]") + ")\n",
    "parentheses around calls": "x = [" + nested("(((g(", "))))", 40) + "]\n",
    "mixed": "x = " + nested("f([{1: a[", "]}])", 15, "0") + "\n",
    "comments between": "x = [\n" + "".join(f"  [ # c{i}\n" for i in range(40)) + "1" + "\n ]" * 40 + "\n]\n",
    "in an f-string": 'x = f"{' + nested("[", "]", 60) + '}" f"{' + nested("g(", ")", 30) + '!r:>{w}}"\n',
    "lambdas": "x = [" + nested("lambda: [", "]", 30) + "]\n",
    # Not screened (a chain is as deep as its operators, not its brackets: nesting.ANALYSIS_DEPTH bounds
    # it), but cut where it is in a deep text.
    "operators in brackets": "x = [" + nested("[", "]", 30) + ", " + " + ".join(f"a{i}" for i in range(300)) + "]\n",
    "keywords and stars": "x = " + nested("f(*a, k=[", "], **b)", 40) + "\n",
    "CRLF": "x = [\r\n" + "[\r\n" * 40 + "1" + "]" * 40 + "\r\n]\r\n",
    "non-ASCII": "x = ['é', " + nested("[ 'ü', ", "]", 40, "'模'") + "]\n",
    "indented": "def f():\n    if x:\n        y = " + nested("[", "]", 50) + "  # end\n    return y\n",
    "one line of pairs": "data = [" + ", ".join(f"[{i}, {i + 1}]" for i in range(5000)) + "]\n",
    "a call of many arguments": "f(" + ", ".join(f"a{i}" for i in range(1500)) + ", *rest, "
                                + ",\n  ".join(f"k{i}=[{i}]" for i in range(1500)) + ", **kw  # c\n)\n",
    "a trailing comma": "f(" + ", ".join(f"a{i}" for i in range(2500)) + " , )\n",
    "a dict with unpacking": "d = {" + ", ".join(f"'k{i}': [{i}]" if i % 7 != 1 else f"**m{i}" for i in range(3000))
                             + ",  # end\n}\n",
    "a set over lines": "s = {" + ",\n ".join(f"({i}, 'x')" for i in range(3000)) + "}\n",
    "long elements": "x = [" + ", ".join("'" + "y" * 20_000 + "'" for _ in range(5)) + "]\n",
}


@pytest.mark.parametrize("name", SHAPES)
def test_a_deep_or_wide_text_parsed_in_pieces_is_the_tree_of_one_parse(name):
    text = SHAPES[name]
    built = pieces._in_pieces(text, source_lines(text))
    assert built is not None, "not parsed in pieces"
    assert built.deep_equals(cst.parse_module(text))
    assert built.code == text


def test_a_text_the_host_cannot_read_or_libcst_rejects_is_parsed_whole():
    with pytest.raises(cst.ParserSyntaxError):
        pieces.parse_module("x = " + nested("[", "]", 60) + "]\n", ["x"])
    # A bare tuple whose text starts and ends with parentheses of its elements: no piece of its own.
    text = "x = " + nested("x[(a), (", ")]", 30, "b") + "\n"
    assert pieces._in_pieces(text, source_lines(text)) is None
    assert pieces.parse_module(text, source_lines(text)).deep_equals(cst.parse_module(text))


@pytest.mark.parametrize("text", [
    "x = " + nested("[", "]", 30) + "\n",
    "x = [" + "[1, 2], " * 40_000 + "]\n",  # one line of 320 kB
    "x = [\n" + "    [1, 2],\n" * 50_000 + "]\n",  # 600 kB
])
def test_deep_or_wide_texts_are_read_by_cpython_first(text):
    assert pieces.screened(text, source_lines(text))


def test_ordinary_code_is_not_sent_to_cpython_first():
    text = "import torch\n\nfor x, y in loader:\n    loss = F.cross_entropy(model(x), y)\n    loss.backward()\n" * 200
    assert not pieces.screened(text, source_lines(text))
    # Closing brackets in strings and comments do not hide the depth after them.
    text = "s = ')))))))))))))))))))))))))))))))'\nx = " + nested("[", "]", 30) + "\n"
    assert pieces.screened(text, source_lines(text))


def _native_work(monkeypatch, text: str) -> int:
    """What libcst's parser spends on `text` in the model of its memoization (each character costs as
    many copies as brackets hold it): the characters of each text it is given times their depth."""
    work = []
    for name in ("parse_module", "parse_expression"):
        parse = getattr(cst, name)

        def counted(piece: str, parse=parse):
            depths = list(itertools.accumulate(pieces._STEP.get(char, 0) for char in piece))
            work.append(len(piece) * (1 + max(depths, default=0)))
            return parse(piece)

        monkeypatch.setattr(cst, name, counted)
    pieces.parse_module(text, source_lines(text))
    monkeypatch.undo()
    return sum(work)


@pytest.mark.parametrize("opening, closing, depth", [("[", "]", 19), ("f(", ")", 19), ("{1: ", "}", 19), ("(", ")", 19),
                                                     ("a[(", ")]", 9)])
def test_the_work_grows_with_the_depth_not_its_square(monkeypatch, opening, closing, depth):
    """20 statements nested `depth`, then ×10 levels deep (190 brackets: CPython's tokenizer takes 200):
    ×10 the text, at most ×12 the work (parsed whole, ×50 to ×100: 3.9 GB for 120 such statements)."""
    def text(levels: int) -> str:
        return "".join(f"x{i} = {nested(opening, closing, levels)}\n" for i in range(20))

    small, big = _native_work(monkeypatch, text(depth)), _native_work(monkeypatch, text(10 * depth))
    assert big <= 12 * small, (small, big)


@settings(max_examples=60, deadline=None)
@given(st.recursive(st.sampled_from(["1", "a", "'s'", "f'{a}'", "x.y", "-a"]), lambda inner: st.one_of(
    st.builds("[{}]".format, inner), st.builds("({})".format, inner), st.builds("f({})".format, inner),
    st.builds("a[{}]".format, inner), st.builds("{{1: {}}}".format, inner), st.builds("({},)".format, inner),
    st.builds("[{}, {}]".format, inner, inner), st.builds("({} + {})".format, inner, inner),
    st.builds("[\n  {}  # c\n]".format, inner), st.builds("f(k={}, *{})".format, inner, inner),
    st.builds("(lambda: {})".format, inner), st.builds("f'{{ {}!r}}'".format, inner)), max_leaves=60))
def test_any_nesting_parsed_in_pieces_is_the_tree_of_one_parse(expression):
    text = "x = [[[[[[[[[[[[[[[[[[[[[[[[[" + expression + "]]]]]]]]]]]]]]]]]]]]]]]]]\n"
    built = pieces._in_pieces(text, source_lines(text))
    whole = cst.parse_module(text)
    assert built is None or built.deep_equals(whole)
