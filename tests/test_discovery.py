"""Matching .gitignore patterns (lintloop.config.GitignoreSpec): the same answers as pathspec's
GitIgnoreSpec, which it asks only for the paths its joined expression says some pattern may match."""

import pathspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lintloop.config import DEFAULT_EXCLUDE, GitignoreSpec

_PARTS = ["a", "b", "build", "*.py", "*", "**", "x?", "[ab]", ".git", "tests", "__pycache__", "c.d"]
_PATTERNS = st.lists(st.builds(lambda neg, lead, parts, trail: ("!" if neg else "") + ("/" if lead else "")
                               + "/".join(parts) + ("/" if trail else ""),
                               st.booleans(), st.booleans(), st.lists(st.sampled_from(_PARTS), min_size=1, max_size=3),
                               st.booleans()), max_size=6)
_PATHS = st.builds(lambda parts, directory: "/".join(parts) + ("/" if directory else ""),
                   st.lists(st.sampled_from(["a", "b", "build", "m.py", "x1", "tests", ".git", "c.d", "__pycache__"]),
                            min_size=1, max_size=4), st.booleans())


@settings(max_examples=300, deadline=None)
@given(_PATTERNS, st.lists(_PATHS, min_size=1, max_size=8))
def test_the_same_answers_as_pathspec(patterns, paths):
    try:
        expected = pathspec.GitIgnoreSpec.from_lines(patterns)
    except Exception:  # a pattern pathspec refuses is refused alike
        with pytest.raises(Exception):
            GitignoreSpec(patterns)
        return
    ours = GitignoreSpec(patterns)
    assert [ours.match_file(p) for p in paths] == [expected.match_file(p) for p in paths]


@pytest.mark.parametrize("path", [".git/", "src/.git/", "pkg/__pycache__/", "a/build/", "node_modules/", "x/m.py",
                                  "build.py", "venv.py", "src/venv/", ".ipynb_checkpoints/"])
def test_the_default_excludes(path):
    assert GitignoreSpec(list(DEFAULT_EXCLUDE)).match_file(path) \
        == pathspec.GitIgnoreSpec.from_lines(DEFAULT_EXCLUDE).match_file(path)
