"""Precision report: what lintloop flags on real, published training code.

lintloop must not cry wolf: its users turn a linter off after its second false alarm. This script
runs the installed `lintloop check` CLI (as a subprocess, exactly as a user would) on every
package folder of a corpus, such as the ones bench/README.md ("Precision corpus") says how to
build in /tmp/ptcorpus and /tmp/tfcorpus/src, and prints per package: the files and non-blank
lines lintloop lints, its findings (total, per code, per 1,000 lines), its LL001 syntax errors, and its internal errors (a
crashed rule, a traceback on stderr, an exit status other than 0/1, an LL001 on a file Python
itself parses). Every finding is written, with its source line, to the --out JSON for a person to
review: each one is either a true positive or a precision bug.

    python bench/precision.py /tmp/ptcorpus [--select ALL] [--only timm,trl] [--out findings.json]

Exit status: 0 when lintloop ran cleanly on every package, 1 when it failed on one (internal
error, crash, LL001 on a parseable file) or a package named with --only is missing, 2 on a usage
error. Findings alone never make it fail: judging them is the point of the report.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from lintloop.config import load_settings
from lintloop.discovery import discover

SYNTAX_ERROR = "LL001"


@dataclass
class PackageReport:
    name: str
    files: int = 0
    lines: int = 0
    seconds: float = 0.0
    exit_code: int | None = None
    by_code: Counter[str] = field(default_factory=Counter)
    # LL001 on a file that Python itself parses: the tool failed, not the file.
    unparsed_but_valid: list[str] = field(default_factory=list)
    internal_errors: list[str] = field(default_factory=list)
    stderr: str = ""
    missing: bool = False

    @property
    def findings(self) -> int:
        """Findings other than LL001, which says a file could not be read, not that its code is wrong."""
        return sum(n for code, n in self.by_code.items() if code != SYNTAX_ERROR)

    @property
    def failed(self) -> bool:
        return self.missing or bool(self.internal_errors) or bool(self.unparsed_but_valid)


def lintloop_command(explicit: str | None) -> list[str]:
    """The CLI to measure: --lintloop, else the `lintloop` script of this interpreter's environment."""
    if explicit:
        return explicit.split()
    beside = Path(sys.executable).parent / "lintloop"
    if beside.is_file():
        return [str(beside)]
    on_path = shutil.which("lintloop")
    return [on_path] if on_path else [sys.executable, "-m", "lintloop"]


def count_lines(path: Path) -> int:
    text = path.read_bytes().decode("utf-8", errors="replace")
    return sum(1 for line in text.splitlines() if line.strip())


def parses(path: Path) -> bool:
    """Whether this interpreter compiles the file (a compile-time error is LL001 too: issue 36);
    warnings (invalid escapes...) are not failures."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    return True


def source_line(path: Path, line: int, cache: dict[Path, list[str]]) -> str:
    if path not in cache:
        try:
            cache[path] = path.read_bytes().decode("utf-8", errors="replace").splitlines()
        except OSError:
            cache[path] = []
    lines = cache[path]
    return lines[line - 1].strip() if 1 <= line <= len(lines) else ""


def stderr_problems(stderr: str) -> list[str]:
    """Lines of lintloop's stderr that say it failed: a crashed rule, a crash, a traceback."""
    problems = [line for line in stderr.splitlines() if "internal error" in line]
    if "Traceback (most recent call last)" in stderr:
        problems.append("traceback on stderr")
    return problems


def lint_package(name: str, folder: Path, command: list[str], select: str | None, config: Path,
                 workdir: Path, findings_out: list[dict[str, Any]]) -> PackageReport:
    report = PackageReport(name)
    if not folder.is_dir():
        report.missing = True
        return report
    files, _ = discover([str(folder)], load_settings(config_file=config))
    report.files = len(files)
    report.lines = sum(count_lines(f.path) for f in files)

    argv = [*command, "check", "--format", "json", "--no-cache", "--verbose", "--config", str(config)]
    if select:
        argv += ["--select", select]
    started = time.perf_counter()
    # Run from an empty folder so that no lintloop.toml / pyproject.toml around cwd changes the rules.
    proc = subprocess.run([*argv, str(folder)], cwd=workdir, capture_output=True, text=True)
    report.seconds = time.perf_counter() - started
    report.exit_code = proc.returncode
    report.stderr = proc.stderr
    report.internal_errors = stderr_problems(proc.stderr)
    if proc.returncode not in (0, 1):  # 1: findings; anything else is a failure of the tool
        report.internal_errors.append(f"exit status {proc.returncode}: {proc.stderr.strip()[-500:]}")
    try:
        findings = json.loads(proc.stdout) if proc.stdout.strip() else []
    except json.JSONDecodeError as exc:
        report.internal_errors.append(f"stdout is not JSON ({exc})")
        findings = []

    sources: dict[Path, list[str]] = {}
    for finding in findings:
        path = Path(finding["path"])
        report.by_code[finding["code"]] += 1
        if finding["code"] == SYNTAX_ERROR and parses(path):
            report.unparsed_but_valid.append(f"{finding['path']}: {finding['message']}")
        findings_out.append({
            "package": name,
            "path": os.path.relpath(path, folder),
            "line": finding["line"],
            "column": finding["column"],
            "code": finding["code"],
            "name": finding["name"],
            "message": finding["message"],
            "source": source_line(path, finding["line"], sources),
        })
    return report


def per_kloc(findings: int, lines: int) -> str:
    return f"{1000 * findings / lines:.3f}" if lines else "-"


def render_table(reports: list[PackageReport]) -> str:
    codes = sorted({c for r in reports for c in r.by_code if c != SYNTAX_ERROR})
    header = ["package", "files", "lines", "findings", "/kloc", *codes, SYNTAX_ERROR, "internal", "s"]
    rows: list[list[str]] = []
    for r in reports:
        if r.missing:
            rows.append([r.name, "missing", *[""] * (len(header) - 2)])
            continue
        rows.append([r.name, str(r.files), str(r.lines), str(r.findings), per_kloc(r.findings, r.lines),
                     *[str(r.by_code[c]) for c in codes], str(r.by_code[SYNTAX_ERROR]),
                     str(len(r.internal_errors) + len(r.unparsed_but_valid)), f"{r.seconds:.1f}"])
    present = [r for r in reports if not r.missing]
    total_findings = sum(r.findings for r in present)
    total_lines = sum(r.lines for r in present)
    rows.append(["TOTAL", str(sum(r.files for r in present)), str(total_lines), str(total_findings),
                 per_kloc(total_findings, total_lines), *[str(sum(r.by_code[c] for r in present)) for c in codes],
                 str(sum(r.by_code[SYNTAX_ERROR] for r in present)),
                 str(sum(len(r.internal_errors) + len(r.unparsed_but_valid) for r in present)),
                 f"{sum(r.seconds for r in present):.1f}"])
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *map(line, rows[:-1]), rule, line(rows[-1])])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path, help="folder with one subfolder per package")
    parser.add_argument("--select", help="passed to `lintloop check --select` (default: the default rules)")
    parser.add_argument("--only", help="comma-separated package folders to lint (default: every subfolder)")
    parser.add_argument("--out", type=Path, help="write every finding, with its source line, to this JSON file")
    parser.add_argument("--lintloop", help="the lintloop command to run (default: the installed `lintloop`)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.corpus.is_dir():
        print(f"precision: {args.corpus}: not a directory", file=sys.stderr)
        return 2
    corpus = args.corpus.resolve()
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
    else:
        names = sorted(p.name for p in corpus.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not names:
        print(f"precision: {corpus}: no package folders", file=sys.stderr)
        return 2
    command = lintloop_command(args.lintloop)
    version = subprocess.run([*command, "--version"], capture_output=True, text=True).stdout.strip()

    findings: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="lintloop-precision-") as tmp:
        workdir = Path(tmp)
        config = workdir / "lintloop.toml"
        config.write_text("")  # empty: the defaults, or exactly what --select says
        reports = [lint_package(name, corpus / name, command, args.select, config, workdir, findings)
                   for name in names]

    print(f"{version or ' '.join(command)} on {corpus}, rules: {args.select or 'default'}\n")
    print(render_table(reports))
    totals = Counter[str]()
    for r in reports:
        totals.update(r.by_code)
    print("\nfindings per code: " + (", ".join(f"{c} {n}" for c, n in sorted(totals.items())) or "none"))
    for r in reports:
        for problem in [*r.internal_errors, *(f"LL001 on a file Python parses: {u}" for u in r.unparsed_but_valid)]:
            print(f"{r.name}: {problem}", file=sys.stderr)
        if r.missing:
            print(f"{r.name}: no such package folder in {corpus}", file=sys.stderr)

    if args.out:
        packages = [{**{f.name: getattr(r, f.name) for f in fields(r)}, "by_code": dict(sorted(r.by_code.items())),
                     "findings": r.findings} for r in reports]
        args.out.write_text(json.dumps({"lintloop": version, "corpus": str(corpus), "select": args.select,
                                        "packages": packages, "findings": findings}, indent=2, ensure_ascii=False))
    return 1 if any(r.failed for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
