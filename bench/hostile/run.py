#!/usr/bin/env python3
"""The hostile generator: every category's cases run against lintloop, each in a fresh sandbox.

    python3 bench/hostile/run.py [--quick] [--category NAME,...] [--lintloop CMD] [--keep DIR] [--json FILE]

Prints, per category, how many cases ran and which failed (with what), and exits 1 if any failed.
`--quick` runs each category's short list (what tests/test_hostile.py runs); the default runs the
long one. `--lintloop "CMD"` runs another lintloop command (default: this interpreter's `-m lintloop`,
the checkout's own where it is not installed). What each invariant means: harness.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import LINTLOOP, all_cases, categories, run_case  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="each category's short list")
    parser.add_argument("--category", default="", help="comma-separated categories (default: all)")
    parser.add_argument("--lintloop", help="the lintloop command to run (default: %(default)s)")
    parser.add_argument("--keep", type=Path, help="keep each case's sandbox under this folder")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    command = shlex.split(args.lintloop) if args.lintloop else LINTLOOP
    if not args.lintloop:  # a checkout that is not installed: run its own code
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    wanted = [name for name in args.category.split(",") if name]
    unknown = set(wanted) - set(categories())
    if unknown:
        parser.error(f"unknown categories {sorted(unknown)} (known: {', '.join(categories())})")
    results: dict[str, list[dict]] = {}
    started = time.monotonic()
    for case in all_cases(args.quick, wanted):
        keep = None
        if args.keep is not None:
            keep = args.keep / case.category / case.name
            keep.mkdir(parents=True, exist_ok=True)
        outcome = run_case(case, command, keep)
        failures = outcome.failures()
        results.setdefault(case.category, []).append(
            {"case": case.name, "exit": outcome.exit_code, "seconds": round(outcome.seconds, 2),
             "max_rss_mib": round(outcome.max_rss_mib, 1), "failures": failures})
        print(f"{'FAIL' if failures else 'ok  '} {case.id} ({outcome.seconds:.1f} s)" +
              "".join(f"\n       {failure}" for failure in failures), flush=True)
    print(f"\n{'category':<12} {'cases':>6} {'failed':>7}   ({time.monotonic() - started:.0f} s)")
    for category, rows in results.items():
        print(f"{category:<12} {len(rows):>6} {sum(1 for row in rows if row['failures']):>7}   "
              f"{categories()[category].DESCRIPTION}")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
    return 1 if any(row["failures"] for rows in results.values() for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
