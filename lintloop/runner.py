"""Running lint / fix over many files: per-file cache and parallel workers, results in a stable order."""

from __future__ import annotations

import difflib
import hashlib
import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from lintloop import __version__
from lintloop.discovery import SourceFile
from lintloop.finding import Finding
from lintloop.linter import FileResult, fix_text, lint_bytes
from lintloop.rule import RuleSet
from lintloop.rules import BY_CODE
from lintloop.source import SourceText, UndecodableSource, write_atomically


@dataclass(frozen=True)
class Job:
    """What a worker needs for one file (picklable: codes, not classes)."""

    path: str
    display: str
    codes: tuple[str, ...]
    options: str  # JSON of per-rule options
    mode: str  # "check" | "fix" | "diff"
    unsafe_fixes: bool = False
    cache_dir: str | None = None


@dataclass
class JobResult:
    display: str
    findings: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    fixed: int = 0
    diff: str = ""
    messages: list[str] = field(default_factory=list)


def run_jobs(jobs: list[Job], workers: int) -> list[JobResult]:
    if workers > 1 and len(jobs) > 4:
        # fork: workers inherit the imported engine instead of re-importing it.
        context = multiprocessing.get_context("fork") if os.name == "posix" else None
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            results = list(pool.map(run_job, jobs, chunksize=max(1, len(jobs) // (workers * 8))))
    else:
        results = [run_job(job) for job in jobs]
    return sorted(results, key=lambda r: r.display)


def run_job(job: Job) -> JobResult:
    ruleset = RuleSet([BY_CODE[c] for c in job.codes], json.loads(job.options))
    result = JobResult(job.display)
    path = Path(job.path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        result.errors.append(f"{job.display}: cannot read: {exc.strerror or exc}")
        return result
    if job.mode == "check":
        lint = _cached_lint(job, data, ruleset)
        result.findings, result.errors = lint.findings, lint.errors
        return result
    try:
        source = SourceText.from_bytes(data)
    except UndecodableSource:
        lint = lint_bytes(job.display, data, ruleset)  # LL001; such a file is never touched
        result.findings, result.errors = lint.findings, lint.errors
        return result
    outcome = fix_text(job.display, source.text, ruleset, job.unsafe_fixes)
    result.findings, result.errors = outcome.remaining.findings, outcome.remaining.errors
    result.messages = outcome.refused
    if outcome.applied and outcome.text != source.text:
        result.fixed = outcome.applied
        if job.mode == "diff":
            result.diff = "".join(difflib.unified_diff(
                source.text.splitlines(keepends=True), outcome.text.splitlines(keepends=True),
                fromfile=f"a/{job.display}", tofile=f"b/{job.display}"))
        else:
            write_atomically(path, source.encode(outcome.text))
    return result


def _cached_lint(job: Job, data: bytes, ruleset: RuleSet) -> FileResult:
    if job.cache_dir is None:
        return lint_bytes(job.display, data, ruleset)
    key = hashlib.sha256("\0".join((__version__, job.display, ",".join(job.codes), job.options)).encode()
                         + b"\0" + data).hexdigest()
    entry = Path(job.cache_dir) / key[:2] / f"{key}.json"
    try:
        return FileResult([Finding.from_json(f) for f in json.loads(entry.read_text())])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    result = lint_bytes(job.display, data, ruleset)
    if not result.errors:
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            payload = [dict(f.to_json(), suppression_lines=list(f.suppression_lines)) for f in result.findings]
            tmp = entry.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(payload))
            os.replace(tmp, entry)
        except OSError:
            pass  # a read-only tree just runs uncached
    return result


def make_jobs(files: list[SourceFile], ruleset: RuleSet, mode: str, *, per_file_ignores, unsafe_fixes: bool,
              cache_dir: str | None) -> list[Job]:
    jobs = []
    options = json.dumps(ruleset.settings, sort_keys=True)
    for file in files:
        codes = tuple(sorted(ruleset.codes - per_file_ignores(file)))
        jobs.append(Job(str(file.path), file.display, codes, options, mode, unsafe_fixes, cache_dir))
    return jobs
