"""JSON decoded within bounds (lintloop.bounded_json): the verdict is the depth and size of the JSON
itself, whatever its strings hold and however deep the caller's stack is."""

from __future__ import annotations

import json
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lintloop.bounded_json import MAX_DEPTH, JSONBoundsError, check_bounds, loads

# Strings made of what the scan must not take for structure: brackets, commas, quotes and backslashes.
TRICKY_TEXT = st.text(alphabet='[]{},"\\ a\n\u00e9\U0001f600', max_size=12)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | TRICKY_TEXT,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(TRICKY_TEXT, children, max_size=4),
    max_leaves=40)


def depth(value: object) -> int:
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES, st.integers(min_value=0, max_value=6), st.booleans())
def test_the_verdict_is_the_depth_of_the_json_whatever_its_strings_hold(value, max_depth, indent):
    text = json.dumps(value, indent=1 if indent else None, ensure_ascii=False)
    if depth(value) > max_depth:
        with pytest.raises(JSONBoundsError, match=f"nested more than {max_depth} deep"):
            loads(text, max_depth)
    else:
        assert loads(text, max_depth) == value


@pytest.mark.parametrize("opener, closer", [("[", "]"), ('{"k":', "}")])
def test_the_bound_is_exact_and_far_deeper_json_costs_no_recursion(opener, closer):
    at_bound = opener * MAX_DEPTH + "0" + closer * MAX_DEPTH
    assert depth(loads(at_bound)) == MAX_DEPTH
    for too_deep in (MAX_DEPTH + 1, 100_000):
        with pytest.raises(JSONBoundsError):
            loads(opener * too_deep + "0" + closer * too_deep)
    # A caller whose stack is almost full decodes as deep as any other.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(MAX_DEPTH * 2)
    try:
        with pytest.raises(JSONBoundsError):
            check_bounds(opener * 10**6)
    finally:
        sys.setrecursionlimit(limit)


@pytest.mark.parametrize("text", [
    '"' + "[" * 1000 + '"',  # brackets in a string
    '["\\"' + "[" * 1000 + '"]',  # after an escaped quote, still in the string
    '["\\\\\\\\", ' + '"' + "{" * 1000 + '"]',  # escaped backslashes end before the quote: a new string
])
def test_brackets_in_strings_are_no_nesting(text):
    assert loads(text) is not None


def test_an_escaped_backslash_before_a_quote_ends_the_string():
    # `"\\"` is a string of one backslash: the brackets after it are structure.
    with pytest.raises(JSONBoundsError):
        check_bounds('["\\\\", ' + "[" * 300 + "]" * 300 + "]")


@pytest.mark.parametrize("text", ['"' + "[" * 1000, '"\\"' * 1000, '[' * 150 + '"\\'])
def test_text_that_is_no_json_is_left_to_the_decoder(text):
    check_bounds(text)  # an unterminated string runs to the end: nothing after it counts
    with pytest.raises(json.JSONDecodeError):
        loads(text)


def test_values_are_bounded_outside_strings():
    assert loads("[" + ",".join(["0"] * 99) + "]", max_values=101) == [0] * 99
    with pytest.raises(JSONBoundsError, match="more than 100 values"):
        loads("[" + ",".join(["{}"] * 100) + "]", max_values=100)
    assert loads(json.dumps(["," * 10_000]), max_values=3) == ["," * 10_000]
