"""Repeat the probe on the memory fixtures and report the margin of the memory verdicts (not a test).

    python benchmarks/probe_memory_margins.py [--runs 5] [--steps 100]

For each fixture: min/max over the runs of the statistics the LL301 verdict uses (median
per-step increase, fraction of positive increases, worst 25-sample window, live-tensor growth)
and how often the verdict was `confirmed`. Bad fixtures must be confirmed every time and good
ones never, with room to spare against the thresholds in runtime_probe/verdicts.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lintloop.runtime_probe.runner import run_probe
from lintloop.runtime_probe.verdicts import Summary, verdict

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
CASES = ["LL301_bad.py", "LL301_good.py", "LL301_tf_bad.py", "LL301_tf_good.py", "LL101_good.py", "LL201_good.py"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    print(f"{'fixture':18} {'confirmed':>9} {'median B/step':>16} {'positive':>13} {'worst-window median':>20} "
          f"{'worst-window pos':>17} {'live tensors':>14}")
    for name in CASES:
        rows = []
        for _ in range(args.runs):
            run = run_probe(FIXTURES / name, [], steps=args.steps, device="cpu", timeout=600)
            summary = Summary.from_events(run.events, run.returncode, run.timed_out)
            rows.append((summary, verdict("LL301", summary)["status"] == "confirmed"))
        mems = [s.memory for s, _ in rows if s.memory]
        lives = [s.live_tensor_growth() for s, _ in rows if s.live_tensor_growth()]

        def span(values, fmt):
            return f"{fmt.format(min(values))}..{fmt.format(max(values))}" if values else "-"

        print(f"{name:18} {sum(c for _, c in rows):>4}/{len(rows):<4} "
              f"{span([m.median_increase for m in mems], '{:.0f}'):>16} "
              f"{span([m.positive_fraction for m in mems], '{:.2f}'):>13} "
              f"{span([m.worst_window_median for m in mems], '{:.0f}'):>20} "
              f"{span([m.worst_window_positive for m in mems], '{:.2f}'):>17} "
              f"{span([live[0] for live in lives], '{:d}'):>14}", flush=True)


if __name__ == "__main__":
    main()
