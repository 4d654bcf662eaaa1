"""The fixture pairs the device run probes: every `tests/fixtures/<stem>_bad.py` with a `<stem>_good.py`
that imports torch or jax and whose rule has a probe column (`lintloop rules`). The PyTorch ones are
tests/test_probe_gpu.py's CASES; the JAX ones have no GPU test, so this run is their only CUDA check.

`python3 bench/gpu/fixture_pairs.py` prints one `STEM FRAMEWORK PROBE-COLUMN` line per pair (read by run.sh).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import NamedTuple

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures"
FRAMEWORKS = ("torch", "jax")


class Pair(NamedTuple):
    code: str
    stem: str
    framework: str
    probe: str  # the rule's probe column


def framework_of(path: Path) -> str | None:
    """The framework a fixture imports, as tests/conftest.py's fixture_framework reads it."""
    imported = re.findall(r"^\s*(?:import|from)\s+(\w+)", path.read_text(), re.MULTILINE)
    return next((name for name in FRAMEWORKS if name in imported), None)


def pairs() -> list[Pair]:
    from lintloop.rules import lookup  # the catalog: only where lintloop is importable

    found = []
    for bad in sorted(FIXTURES.glob("LL*_bad.py")):
        stem = bad.name[: -len("_bad.py")]
        rule, framework = lookup(stem[:5]), framework_of(bad)
        if (FIXTURES / f"{stem}_good.py").exists() and framework and rule is not None and rule.probe != "—":
            found.append(Pair(stem[:5], stem, framework, rule.probe))
    return found


if __name__ == "__main__":
    sys.stdout.write("".join(f"{p.stem} {p.framework} {p.probe}\n" for p in pairs()))
