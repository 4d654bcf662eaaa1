"""Prove that lintloop's speed-ups change no result: the same findings with the screen on and off,
with 1 and N worker processes, with and without the cache.

    python bench/compare_modes.py [--select ALL] [--jobs N] [--inject] PATH ...

`--inject` also lints, for every flagged example of every rule, a copy of each linted file with
the example appended (so the rules fire inside real code) — with the screen on and off;
`--hosts K` appends each example to K of the files only (in rotation). Prints
the differences and exits 1 if there are any. tests/test_screen.py runs it on a sample of the
installed PyTorch and TensorFlow sources; run it by hand on the benchmark corpus.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from lintloop.linter import lint_bytes
from lintloop.rule import RuleSet
from lintloop.config import resolve_selector
from lintloop.rules import BY_CODE


def python_files(paths: list[Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        found.extend(sorted(path.resolve().rglob("*.py")) if path.is_dir() else [path.resolve()])
    return found


def findings_in_process(display: str, data: bytes, ruleset: RuleSet) -> list[dict]:
    result = lint_bytes(display, data, ruleset)
    if result.errors:
        raise RuntimeError("; ".join(result.errors))
    return [f.to_json() for f in result.findings]


def screen_differences(files: list[Path], rules: list, inject: bool, hosts: int | None = None) -> list[str]:
    """Files whose findings differ between the screen on and off, each also with flagged examples appended.

    `hosts`: append each example to only that many of the files (a rotation: every file gets its
    share, every example lands in different code) instead of to every file; the work then grows
    with the catalog, not with catalog x files."""
    screened, unscreened = RuleSet(rules), RuleSet(rules, screen=False)
    examples = [(r.code, i, textwrap.dedent(e.code).lstrip()) for r in rules for i, e in enumerate(r.flagged)]
    data = {path: path.read_bytes() for path in files}
    variants = [(str(path), data[path]) for path in files]
    if inject:
        for k, (code, i, code_text) in enumerate(examples):
            count = len(files) if hosts is None else min(hosts, len(files))
            for j in range(count):
                path = files[(k * count + j) % len(files)]
                variants.append((f"{path}+{code}[{i}]", data[path].rstrip(b"\n") + b"\n\n" + code_text.encode()))
    differences = []
    for display, variant in variants:
        on, off = findings_in_process(display, variant, screened), findings_in_process(display, variant, unscreened)
        if on != off:
            differences.append(f"{display}: screen on {_codes(on)} != off {_codes(off)}")
    return differences


def cli_findings(files: list[Path], select: str, *extra: str) -> list[dict]:
    with tempfile.TemporaryDirectory() as work:  # the cache lives in the working directory
        command = [sys.executable, "-m", "lintloop", "check", "--format", "json", "--exit-zero", "--select", select,
                   *extra, *map(str, files)]
        for _ in range(1 + ("--no-cache" not in extra)):  # with the cache: fill it, then read it
            out = subprocess.run(command, capture_output=True, text=True, cwd=work, check=True).stdout
    return json.loads(out)


def run_differences(files: list[Path], select: str, jobs: int) -> list[str]:
    baseline = cli_findings(files, select, "--no-cache", "--jobs", "1")
    differences = []
    for label, extra in ((f"--jobs {jobs}", ("--no-cache", "--jobs", str(jobs))),
                         ("cache (second run)", ("--jobs", str(jobs)))):
        found = cli_findings(files, select, *extra)
        if found != baseline:
            differences.append(f"{label}: {_codes(found)} != --jobs 1 --no-cache: {_codes(baseline)}")
    return differences


def _codes(findings: list[dict]) -> str:
    return ", ".join(f"{f['code']}@{Path(f['path']).name}:{f['line']}" for f in findings) or "nothing"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--select", default="ALL")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--inject", action="store_true")
    parser.add_argument("--hosts", type=int, help="with --inject: append each example to this many files, not all")
    args = parser.parse_args(argv)
    files = python_files(args.paths)
    codes = sorted({code for selector in args.select.split(",") for code in resolve_selector(selector)})
    rules = [BY_CODE[code] for code in codes]
    differences = screen_differences(files, rules, args.inject, args.hosts) + run_differences(files, args.select, args.jobs)
    print("\n".join(differences) or f"identical: {len(files)} files, screen on/off, jobs 1/{args.jobs}, cache on/off")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
