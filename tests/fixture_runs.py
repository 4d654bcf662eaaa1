"""Each fixture program runs once per argv for the whole test session, under the probe.

The test of what a fixture prints and the tests of the probe's verdicts on it read the same run
(running every framework program twice cost minutes of the suite); so the output tests also
check, for every fixture, what the probe promises: it changes nothing a program prints or
returns. pytest-xdist's workers share the runs through files in the session's temporary
folder, one lock per run.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from conftest import FIXTURES
from lintloop.runtime_probe.runner import run_probe
from lintloop.runtime_probe.verdicts import Summary

# The pipes keep at most 256 KiB; the tests look for lines anywhere in the output.
_OUTPUT_CHARS = 256 * 1024


@dataclass
class FixtureRun:
    returncode: int | None
    timed_out: bool
    stdout: str
    stderr: str
    events: list[dict]

    @property
    def summary(self) -> Summary:
        return Summary.from_events(self.events, self.returncode, self.timed_out)

    def describe(self) -> str:
        return (f"exit {self.returncode}{' (timed out)' if self.timed_out else ''}\n"
                f"--- stdout ---\n{self.stdout[-3000:]}\n--- stderr ---\n{self.stderr[-3000:]}")


def fixture_run(name: str, argv: list[str], folder: Path, steps: int = 0) -> FixtureRun:
    """`tests/fixtures/<name>.py ARGV` run under the probe (CPU; `steps`: the probe's step cap, 0 for
    none), once per session."""
    script = FIXTURES / f"{name}.py"
    key = hashlib.sha256(script.read_bytes() + json.dumps([argv, steps]).encode()).hexdigest()[:16]
    result = folder / f"{name}-{key}.json"
    with open(folder / f"{name}-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be running it: wait for its result
        if result.exists():
            return FixtureRun(**json.loads(result.read_text()))
        run = run_probe(script, argv, steps=steps, device="cpu", timeout=300, cwd=FIXTURES,
                        tail_chars=_OUTPUT_CHARS)
        outcome = FixtureRun(run.returncode, run.timed_out, run.stdout_tail, run.stderr_tail, run.events)
        partial = result.with_suffix(".partial")
        partial.write_text(json.dumps(asdict(outcome)))
        partial.replace(result)
        return outcome
