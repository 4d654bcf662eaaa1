#!/usr/bin/env python3
"""lintloop on millions of lines of real deep-learning code, every rule enabled:

    python3 bench/scale.py lint [--cache DIR] [--venv DIR] [--jobs N] [--json FILE]
    python3 bench/scale.py fix  [--cache DIR] [--venv DIR] [--jobs N] [--json FILE]

The corpus is the benchmark's (bench/corpus.tsv) plus bench/scale_extra.tsv, built by bench/run.py's
corpus builder under the same cache. `lint` runs `check --select ALL` per package and reports
files, lines, seconds, findings per rule and every internal error with its file. `fix` runs
`fix --unsafe-fixes --select ALL` twice over a copy of the corpus and checks every file's bytes
and stat: changed files parse (libcst and ast), the second run changes nothing, files without a
fix keep their bytes, inode and mtime, every file keeps its mode, encoding, BOM and line endings.
Exit status 1 if any of that fails (or an internal error), 2 if the corpus could not be built.
See bench/README.md.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tokenize
from collections import Counter
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run  # noqa: E402 - the benchmark's corpus builder, imported as a sibling module

SCALE_EXTRA_TSV = run.BENCH_DIR / "scale_extra.tsv"
PARSE_CHECK = "parse-check"  # the internal subcommand run under the lintloop venv's Python (it has libcst)


@dataclass(frozen=True)
class Snapshot:
    """What `fix` must keep of a file it leaves alone, and the mode of one it rewrites."""
    content: bytes
    mode: int
    inode: int
    mtime_ns: int


@dataclass
class LintRun:
    """One lintloop process over one package."""
    package: str
    files: int
    lines: int
    seconds: float
    exit_status: int
    findings: Counter[str] = field(default_factory=Counter)
    internal_errors: list[str] = field(default_factory=list)  # "file: message"


def snapshot_tree(root: Path) -> dict[str, Snapshot]:
    snapshots = {}
    for path in sorted(root.rglob("*.py")):
        stat = path.lstat()
        snapshots[path.relative_to(root).as_posix()] = Snapshot(path.read_bytes(), stat.st_mode, stat.st_ino,
                                                                stat.st_mtime_ns)
    return snapshots


def line_endings(content: bytes) -> set[bytes]:
    crlf = content.count(b"\r\n")
    kinds = set()
    if crlf:
        kinds.add(b"\r\n")
    if content.count(b"\n") > crlf:
        kinds.add(b"\n")
    if content.replace(b"\r\n", b"").count(b"\r"):
        kinds.add(b"\r")
    return kinds


def source_encoding(content: bytes) -> str:
    """The encoding Python reads the file with ('utf-8-sig' when it starts with a BOM)."""
    try:
        return tokenize.detect_encoding(BytesIO(content).readline)[0]
    except SyntaxError as exc:  # an unknown or conflicting coding cookie
        return f"invalid ({exc.msg})"


def kept_format(before: bytes, after: bytes) -> list[str]:
    """How a rewritten file's format differs from the original's: encoding, BOM, line endings."""
    problems = []
    if source_encoding(before) != source_encoding(after):
        problems.append(f"encoding {source_encoding(before)} became {source_encoding(after)}")
    if before.startswith(b"\xef\xbb\xbf") != after.startswith(b"\xef\xbb\xbf"):
        problems.append("BOM added" if after.startswith(b"\xef\xbb\xbf") else "BOM lost")
    if line_endings(after) - line_endings(before):
        problems.append(f"line endings {sorted(line_endings(before))} became {sorted(line_endings(after))}")
    return problems


def compare_trees(before: dict[str, Snapshot], after: dict[str, Snapshot],
                  may_change: set[str]) -> tuple[list[str], list[str]]:
    """(changed files, problems): every file is still there with its mode; a file outside
    `may_change` kept its bytes, inode and mtime (it was not even rewritten); a changed one kept
    its encoding, BOM and line endings."""
    changed, problems = [], []
    for name in sorted(set(before) | set(after)):
        if name not in after:
            problems.append(f"{name}: deleted")
            continue
        if name not in before:
            problems.append(f"{name}: created")
            continue
        old, new = before[name], after[name]
        if old.mode != new.mode:
            problems.append(f"{name}: mode {oct(old.mode)} became {oct(new.mode)}")
        if old.content != new.content:
            changed.append(name)
            if name not in may_change:
                problems.append(f"{name}: changed, but had no fixable finding")
            problems.extend(f"{name}: {problem}" for problem in kept_format(old.content, new.content))
        elif name not in may_change and (old.inode, old.mtime_ns) != (new.inode, new.mtime_ns):
            problems.append(f"{name}: rewritten with the same bytes, but had no fixable finding")
    return changed, problems


# ---------------------------------------------------------------------------------------------
# Parse check: runs under the lintloop venv's Python, which has libcst


def parse_problems(paths: list[str]) -> dict[str, str]:
    """path -> why it does not parse, for those files among `paths` that libcst or the host
    Python's `ast` rejects (the host may not know the newest grammar: compare with the original)."""
    import libcst

    problems = {}
    for path in paths:
        content = Path(path).read_bytes()
        try:
            libcst.parse_module(content)  # bytes: libcst honours the BOM and coding cookie itself
        except Exception as exc:  # noqa: BLE001 - libcst raises more than ParserSyntaxError on bad input
            problems[path] = f"libcst: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            continue
        try:
            ast.parse(content)
        except (SyntaxError, ValueError) as exc:
            problems[path] = f"ast: {type(exc).__name__}: {exc}"
    return problems


def check_parses(python: Path, root: Path, names: list[str]) -> dict[str, str]:
    if not names:
        return {}
    proc = subprocess.run([str(python), __file__, PARSE_CHECK], input="\n".join(str(root / n) for n in names),
                          text=True, capture_output=True)
    if proc.returncode != 0:
        raise run.BenchError(f"the parse check failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return {Path(path).relative_to(root).as_posix(): why for path, why in json.loads(proc.stdout).items()}


# ---------------------------------------------------------------------------------------------
# Running lintloop


def lintloop_command(venv: Path, command: str, jobs: int, output: Path) -> list[str]:
    argv = [str(venv / "bin" / "lintloop"), command, "--select", "ALL", "--no-cache", "--exit-zero",
            "--format", "json", "--output", str(output), "--jobs", str(jobs)]
    return argv + (["--unsafe-fixes"] if command == "fix" else [])


def internal_errors(stderr: str) -> list[str]:
    """The stderr lines that report an internal error: a crashing rule names its file
    ("lintloop: error: <file>: internal error in LLxxx ..."); a crash of the whole run does not."""
    return [line.removeprefix("lintloop: error: ") for line in stderr.splitlines() if "internal error" in line]


def crashing_file(argv: list[str], files: list[Path], cwd: Path) -> Path | None:
    """Bisect `files` for one whose run alone makes `argv` exit 2 (a crash outside a rule stops the
    whole run without naming the file)."""
    def crashes(subset: list[Path]) -> bool:
        return subprocess.run(argv + [str(f) for f in subset], cwd=cwd, capture_output=True).returncode == 2

    if not crashes(files):
        return None
    while len(files) > 1:
        first, second = files[:len(files) // 2], files[len(files) // 2:]
        if crashes(first):
            files = first
        elif crashes(second):
            files = second
        else:
            return None  # only files of both halves together crash it
    return files[0]


def run_lintloop(argv: list[str], package_dir: Path, cwd: Path, output: Path) -> tuple[int, str, float, list[dict]]:
    started = time.perf_counter()
    proc = subprocess.run(argv + [str(package_dir)], cwd=cwd, text=True, capture_output=True)
    seconds = time.perf_counter() - started
    findings = json.loads(output.read_text()) if output.is_file() and output.stat().st_size else []
    output.unlink(missing_ok=True)
    return proc.returncode, proc.stderr, seconds, findings


def lint_package(venv: Path, jobs: int, corpus: Path, entry: run.CorpusEntry, work: Path) -> LintRun:
    output = work / "findings.json"
    argv = lintloop_command(venv, "check", jobs, output)
    status, stderr, seconds, findings = run_lintloop(argv, corpus / entry.package, work, output)
    result = LintRun(entry.package, entry.py_files, entry.lines, seconds, status,
                     Counter(f["code"] for f in findings), internal_errors(stderr))
    if status not in (0, 1) and not any(": internal error in " in e for e in result.internal_errors):
        culprit = crashing_file(argv, sorted((corpus / entry.package).rglob("*.py")), work)
        where = culprit.relative_to(corpus).as_posix() if culprit else "(no single file reproduces it)"
        result.internal_errors.append(f"{where}: exit {status}: {stderr.strip()[-500:]}")
    return result


# ---------------------------------------------------------------------------------------------
# Commands


def lint_command(args: argparse.Namespace, venv: Path, corpus: Path, entries: list[run.CorpusEntry],
                 work: Path) -> tuple[bool, dict]:
    runs = []
    run.log("\n| package | files | lines | seconds | findings | internal errors |\n|---|---:|---:|---:|---:|---:|")
    for entry in entries:
        result = lint_package(venv, args.jobs, corpus, entry, work)
        runs.append(result)
        run.log(f"| {entry.package} | {result.files:,} | {result.lines:,} | {result.seconds:.1f} | "
                f"{sum(result.findings.values()):,} | {len(result.internal_errors)} |")
    per_rule = sum((r.findings for r in runs), Counter())
    errors = [e for r in runs for e in r.internal_errors]
    files, lines, seconds = sum(r.files for r in runs), sum(r.lines for r in runs), sum(r.seconds for r in runs)
    run.log(f"| **total** | {files:,} | {lines:,} | {seconds:.1f} | {sum(per_rule.values()):,} | {len(errors)} |")
    run.log("\nfindings per rule: " + (", ".join(f"{code} {n:,}" for code, n in sorted(per_rule.items())) or "none"))
    run.log(f"internal errors: {len(errors)}")
    for error in errors:
        run.log(f"  {error}")
    return not errors, {"files": files, "lines": lines, "seconds": round(seconds, 2), "findings_per_rule": per_rule,
                        "internal_errors": errors, "packages": [vars(r) for r in runs]}


def fix_command(args: argparse.Namespace, venv: Path, corpus: Path, entries: list[run.CorpusEntry],
                work: Path) -> tuple[bool, dict]:
    copy = work / "fix-copy"
    shutil.rmtree(copy, ignore_errors=True)
    for entry in entries:
        shutil.copytree(corpus / entry.package, copy / entry.package)  # copy2: modes and times too
    output = work / "findings.json"
    status, stderr, _, before_findings = run_lintloop(lintloop_command(venv, "check", args.jobs, output), copy, work,
                                                      output)
    if status not in (0, 1):
        raise run.BenchError(f"check on the copy exited {status}: {stderr.strip()[-1000:]}")
    fixable = {(work / f["path"]).resolve().relative_to(copy.resolve()).as_posix() for f in before_findings if f["fix"]}
    before = snapshot_tree(copy)

    started = time.perf_counter()
    status, stderr, _, remaining = run_lintloop(lintloop_command(venv, "fix", args.jobs, output), copy, work, output)
    seconds = time.perf_counter() - started
    errors = internal_errors(stderr) + ([f"fix exited {status}"] if status not in (0, 1) else [])
    summary = next((line for line in stderr.splitlines() if line.startswith("Fixed ")), "(no summary line)")
    # Not failures, but worth reading: e.g. a pass of fixes refused because its result would not parse.
    notes = [line for line in stderr.splitlines() if line.strip() and line != summary and "internal error" not in line]
    after = snapshot_tree(copy)
    changed, problems = compare_trees(before, after, fixable)
    originals = work / "originals"
    for name in changed:
        (originals / name).parent.mkdir(parents=True, exist_ok=True)
        (originals / name).write_bytes(before[name].content)
    python = venv / "bin" / "python"
    parsed_before = check_parses(python, originals, changed)
    unparsable = {name: why for name, why in check_parses(python, copy, changed).items() if name not in parsed_before}

    status, stderr, _, _ = run_lintloop(lintloop_command(venv, "fix", args.jobs, output), copy, work, output)
    errors += internal_errors(stderr) + ([f"second fix exited {status}"] if status not in (0, 1) else [])
    non_idempotent, second_problems = compare_trees(after, snapshot_tree(copy), set())
    problems += [p for p in second_problems if "had no fixable finding" not in p]

    before_per_rule = Counter(f["code"] for f in before_findings)
    after_per_rule = Counter(f["code"] for f in remaining)
    fixed_per_rule = {code: before_per_rule[code] - after_per_rule[code] for code in sorted(before_per_rule)
                      if before_per_rule[code] != after_per_rule[code]}
    lines = sum(e.lines for e in entries)
    run.log(f"\nfix --unsafe-fixes --select ALL over a copy of {len(before):,} files, {lines:,} lines: "
            f"{seconds:.1f} s; lintloop says: {summary}")
    run.log("| | |\n|---|---:|")
    for label, value in (("files with a fixable finding", len(fixable)),
                         ("files fixed (bytes changed)", len(changed)),
                         ("unparsable after fix", len(unparsable)),
                         ("changed again by a second fix", len(non_idempotent)),
                         ("other problems (mode, untouched files, format)", len(problems)),
                         ("internal errors", len(errors)),
                         ("other messages of the first fix", len(notes))):
        run.log(f"| {label} | {value:,} |")
    run.log("findings removed per rule (before − after): "
            + (", ".join(f"{code} {n:,}" for code, n in fixed_per_rule.items()) or "none"))
    for name, why in unparsable.items():
        run.log(f"  unparsable: {name}: {why}")
    for name in non_idempotent:
        run.log(f"  changed by the second fix: {name}")
    for line in problems + errors + notes:
        run.log(f"  {line}")
    ok = not (unparsable or non_idempotent or problems or errors)
    return ok, {"files": len(before), "lines": lines, "seconds": round(seconds, 2), "summary": summary,
                "files_fixable": len(fixable), "files_fixed": changed, "unparsable": unparsable,
                "non_idempotent": non_idempotent, "problems": problems, "internal_errors": errors, "messages": notes,
                "fixed_per_rule": fixed_per_rule}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["lint", "fix"])
    parser.add_argument("--cache", type=Path, help="cache directory, as bench/run.py's (default $LINTLOOP_BENCH_CACHE "
                                                   "or ~/.cache/lintloop-bench)")
    parser.add_argument("--venv", type=Path, help="a venv with lintloop installed to run instead of installing "
                                                  "this checkout into <cache>/lintloop-venv")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="lintloop's --jobs (default: all cores)")
    parser.add_argument("--base-only", action="store_true", help="only the benchmark's corpus (bench/corpus.tsv)")
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    if (argv if argv is not None else sys.argv[1:]) == [PARSE_CHECK]:
        print(json.dumps(parse_problems(sys.stdin.read().splitlines())))
        return 0
    args = parse_args(argv)
    cache = (args.cache or Path(os.environ.get("LINTLOOP_BENCH_CACHE", run.DEFAULT_CACHE))).resolve()
    try:
        entries = run.read_corpus_tsv(run.CORPUS_TSV) + ([] if args.base_only else run.read_corpus_tsv(SCALE_EXTRA_TSV))
        # A folder of its own: the benchmark times its tools on the whole of `corpus/`.
        corpus, _, _ = run.build_corpus(entries, cache, run.pip_python(cache), folder="scale-corpus")
        venv = args.venv.resolve() if args.venv else run.install_lintloop(cache).parent.parent
        (cache / "scale").mkdir(exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="run-", dir=cache / "scale") as scratch:
            work = Path(scratch)
            # Only --select ALL decides, and no folder is skipped (a package may ship a `build/`).
            (work / "lintloop.toml").write_text("exclude = []\n")
            command = lint_command if args.command == "lint" else fix_command
            ok, figures = command(args, venv, corpus, entries, work)
    except run.BenchError as exc:
        print(f"scale: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, default=list) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
