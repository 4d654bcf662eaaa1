"""The runnable example programs of the rules, shipped with lintloop: for each rule a flagged
program (`LL301_bad.py`) and its fixed version (`LL301_good.py`), sometimes variants
(`LL102_torch_bad.py`). They are the test suite's fixture programs (tests/fixtures/, installed as
`lintloop/example_programs/`); each runs in seconds on a CPU and prints what the rule's symptom says,
so `lintloop rule LL301 --example > train.py && lintloop probe train.py` shows the mistake happen.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

PACKAGE = "lintloop.example_programs"


@functools.cache
def examples_directory() -> Path | None:
    """Where the examples are: in the installed package, or tests/fixtures/ of a source checkout."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    checkout = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
    return checkout if checkout.is_dir() else None


def example_names(code: str) -> list[str]:
    """A rule's example files: the flagged program first, then its fixed version, then variants."""
    directory = examples_directory()
    if directory is None:
        return []
    names = [path.name for path in directory.glob(f"{code}_*.py")]
    main = {f"{code}_bad.py": 0, f"{code}_good.py": 1}
    return sorted(names, key=lambda name: (main.get(name, 2), name))


def example_text(code: str, name: str | None = None) -> str:
    """The source of one of `code`'s examples (`name`: default its flagged program). KeyError names
    the examples there are."""
    names = example_names(code)
    chosen = name or (names[0] if names else None)
    if chosen not in names:
        raise KeyError(f"{code} has no example {chosen!r}" if chosen else f"{code} has no runnable example",
                       names)
    directory = examples_directory()
    assert directory is not None
    return (directory / chosen).read_text(encoding="utf-8")
