"""Where lintloop's time goes on a set of files: `python -m lintloop.profiling [--json] PATH ...`.

Lints in this process with one job, no cache and the configured (default) rules, and reports the
exclusive seconds of each stage — read, screen, syntax check, CST, index, each analysis, each rule,
positions, suppressions, report — so every rule and analysis shows what it costs
(`bench/run.py` prints this beside the side-by-side timings).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time

from lintloop.config import load_settings
from lintloop.discovery import discover
from lintloop.isolation import gc_paused
from lintloop.linter import lint_bytes
from lintloop.reporters import render
from lintloop.timing import StageTimer


def profile(paths: list[str], select: list[str] | None = None) -> dict:
    settings = load_settings()
    if select is not None:
        settings.select = select
    ruleset = settings.ruleset()
    files, missing = discover(paths, settings)
    if missing:
        raise SystemExit("; ".join(missing))
    timer = StageTimer()
    findings = []
    lines = 0
    sources: dict[str, str] = {}
    start = time.perf_counter()
    for file in files:
        with timer.stage("read"):
            data = file.path.read_bytes()
            lines += data.count(b"\n")
        with gc_paused():  # as in a worker (lintloop.isolation): a collection per file, not during it
            found = lint_bytes(file.display, data, ruleset, timer, path=file.path, explicit=file.explicit).findings
        if found:
            sources[file.display] = data.decode("utf-8", "replace")  # the report quotes their lines
        findings.extend(found)
    with timer.stage("report"):
        render(findings, "text", io.StringIO(), sources=sources, statistics=False, quiet=False,
               unsafe_fixes=False, is_file=True)
    seconds = time.perf_counter() - start
    stages = {name: s for name, s in timer.totals.items() if ":" not in name}
    return {
        "files": len(files), "lines": lines, "findings": len(findings), "seconds": seconds,
        "stages": dict(sorted(stages.items(), key=lambda kv: -kv[1])),
        "analyses": _group(timer.totals, "analysis:"),
        "rules": _group(timer.totals, "rule:"),
    }


def _group(totals: dict[str, float], prefix: str) -> dict[str, float]:
    return dict(sorted(((k[len(prefix):], v) for k, v in totals.items() if k.startswith(prefix)),
                       key=lambda kv: -kv[1]))


def format_profile(report: dict) -> str:
    total = report["seconds"]
    out = [f"{report['files']} files, {report['lines']:,} lines, {report['findings']} findings, "
           f"{total:.2f} s in one process"]
    for title, table in (("stage", report["stages"]), ("analysis", report["analyses"]), ("rule", report["rules"])):
        out.append(f"\n| {title} | seconds | % of total |\n|---|---:|---:|")
        out += [f"| {name} | {seconds:.3f} | {100 * seconds / total:.1f} |" for name, seconds in table.items()]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lintloop.profiling", description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--select", help="comma-separated codes instead of the configured rules")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = parser.parse_args(argv)
    report = profile(args.paths, args.select.split(",") if args.select else None)
    print(json.dumps(report, indent=2) if args.json else format_profile(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
