"""The hostile generator's quick lists (bench/hostile/): each case is lintloop run as a new process in a
sandbox, checked for the invariants every run keeps (no signal, no internal error, no control character
printed, nothing written outside the project, no process left, bounded memory) and for what the case
itself expects. `python3 bench/hostile/run.py` runs the long lists."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench" / "hostile"))

from harness import all_cases, run_case  # noqa: E402

CASES = all_cases(quick=True)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_hostile_case(case):
    outcome = run_case(case)
    assert not outcome.failures(), (outcome.failures(), outcome.out[-2000:], outcome.err[-2000:])
