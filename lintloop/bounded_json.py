"""JSON from outside lintloop (an editor's messages, a notebook file, a record in the working tree) decoded
within bounds of depth and size, the same verdict on every host.

The standard library's decoder recurses once per level of nesting: JSON nested a thousand deep raises
RecursionError, or decodes, depending on the Python version and the caller's stack (the deepest arrays
it decodes: 994 levels on 3.10 and 3.11 from a shallow stack, fewer from a deeper one; 1,497 on 3.12;
9,998 on 3.13); what reads the decoded value afterwards (an LSP library structuring a message,
nbformat converting a notebook) recurses again. And it allocates per value: 64 MB of `{},` are 21
million dicts, over a gigabyte. So before decoding, the text's shape is measured with no recursion, in
time linear in its length: its brackets and commas counted, and where that many could exceed a bound,
counted again outside its strings (a 70 MB document's text in a message: 0.2 s, half of what decoding
it takes), and the depth followed bracket by bracket. The standard library then decodes what is within
bounds (its decoder is in C; one without recursion in Python would cost ten times as much on every
message).
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

# Deeper than any JSON an editor sends or a notebook tool writes (LSP messages nest below 15 levels;
# a notebook's outputs embed the JSON of plots and widgets, below 30), and shallow enough that what
# walks the decoded value recursively (nbformat: two frames a level; cattrs, unstructuring: three)
# stays far from Python's default recursion limit of 1,000 wherever it is called.
MAX_DEPTH = 200

# A string, once its escapes are gone; an unterminated one runs to the end of the text (so that no string
# is scanned again from each of its quotes).
_STRING = re.compile(r'"[^"]*"?')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class JSONBoundsError(ValueError):
    """JSON nested deeper, or holding more values, than its reader allows; the message says which."""


def check_bounds(text: str, max_depth: int = MAX_DEPTH, max_values: int | None = None) -> None:
    """Raise JSONBoundsError if `text`, read as JSON, nests arrays and objects more than `max_depth`
    deep or holds more than `max_values` values (None: any number; an empty array or object counts as
    two). Text that is no JSON passes unless its brackets and commas outside strings exceed the bounds:
    the decoder then says what it is."""
    if _within(text, max_depth, max_values):  # counting brackets in strings too: most texts stop here
        return
    # Outside strings (a backslash is found only in a string, where it escapes the character after it;
    # escaped backslashes go first, so that `\\"` ends its string).
    skeleton = _STRING.sub("", text.replace("\\\\", "").replace('\\"', ""))
    if max_values is not None and _values(skeleton) > max_values:
        raise JSONBoundsError(f"more than {max_values:,} values")
    if _opened(skeleton) > max_depth:  # else it cannot nest that deep
        brackets = _NOT_BRACKET.sub("", skeleton)
        if max(accumulate(map(_STEP.__getitem__, brackets))) > max_depth:
            raise JSONBoundsError(f"arrays and objects nested more than {max_depth} deep")


def _within(text: str, max_depth: int, max_values: int | None) -> bool:
    """Whether the text's brackets and commas, wherever they are, are too few to exceed the bounds."""
    return _opened(text) <= max_depth and (max_values is None or _values(text) <= max_values)


def _opened(text: str) -> int:
    return text.count("[") + text.count("{")


def _values(text: str) -> int:
    """How many values JSON text holds (its strings removed): each but the first follows a comma or an
    opening bracket."""
    return _opened(text) + text.count(",") + 1


def loads(text: str, max_depth: int = MAX_DEPTH, max_values: int | None = None) -> Any:
    """`json.loads(text)` within the bounds of `check_bounds` (raises JSONBoundsError beyond them,
    and json.JSONDecodeError, a ValueError too, for text that is no JSON)."""
    check_bounds(text, max_depth, max_values)
    return json.loads(text)
