"""Linear time (issue 22): when a file grows ×10, the work of linting it grows at most ×12.

The work is counted, not timed: the Python calls one lint makes (cProfile's count), which neither
the machine's speed nor its load changes. The inputs are bench/scaling.py's shapes, scaled down to
the smallest sizes at which each quadratic analysis this guards against showed (×16 to ×31 before
the fixes); `python3 bench/scaling.py` times them at full size, in whole processes."""

import cProfile
import importlib.util
import pstats
import sys
from pathlib import Path

import pytest

from lintloop.isolation import with_big_stack
from lintloop.linter import lint_notebook, lint_text
from lintloop.rule import RuleSet
from lintloop.rules import ALL_RULES

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("bench_scaling", ROOT / "bench" / "scaling.py")
scaling = sys.modules["bench_scaling"] = importlib.util.module_from_spec(_spec)  # its dataclasses look it up
_spec.loader.exec_module(scaling)

EVERY_RULE = RuleSet(list(ALL_RULES), {})
SHAPES = {shape.name: shape for shape in scaling.SHAPES}


def calls_made(text: str, suffix: str = ".py") -> int:
    """The Python calls linting `text` makes, every rule selected."""
    lint = lint_notebook if suffix == ".ipynb" else lint_text
    profile = cProfile.Profile()

    def lint_once() -> None:
        profile.enable()
        try:
            lint(f"scaled{suffix}", text, EVERY_RULE)
        finally:
            profile.disable()

    with_big_stack(lint_once)  # the lint runs on this thread, where the profile sees it
    return pstats.Stats(profile).total_calls


@pytest.mark.parametrize("shape_name, size, guards", [
    ("loops-torch", 3, "LL105 and LL703 reading every call of the file for each loop, LL301 every differentiated value"),
    ("loops-tf", 3, "is_differentiated following every earlier binding of `loss` back from each use"),
    ("loops-in-function", 4, "LL105 reading every call of the file for each loop"),
    ("notebook-cells", 15, "LL105 per loop; the last binding of a name rebound in every cell found by reading them all"),
    ("helper-star", 20, "LL301's loss names and LL706's step events computed again for each train-step call"),
    ("elif-chain", 15, "calls and scopes found by walking every node's ancestors through a deep chain"),
    ("statements-one-line", 300, "the screen reading a line's unit again for each of its statements, and the "
                                 "syntax stage scanning the whole line for each (×100 for ×10)"),
])
def test_work_grows_linearly(shape_name, size, guards):
    shape = SHAPES[shape_name]
    small, big = (calls_made(shape.generate(n), shape.suffix) for n in (size, 10 * size))
    assert big <= scaling.MAX_GROWTH * small, (
        f"{shape_name}: ×10 the input made ×{big / small:.1f} the calls ({small:,} -> {big:,}); was: {guards}")


def test_a_script_repeated_whole_grows_linearly():
    """Each copy defines `main` and calls it, and a call names every `main`: their call sites and the
    training loops reached through them were found again for each (×14.5; bench/fuzz.py's scaling
    profile found it)."""
    script = (ROOT / "tests" / "fixtures" / "LL802_good.py").read_text(encoding="utf-8")
    small, big = calls_made(script * 5), calls_made(script * 50)
    assert big <= scaling.MAX_GROWTH * small, f"×{big / small:.1f} the calls ({small:,} -> {big:,})"
