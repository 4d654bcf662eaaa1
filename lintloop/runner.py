"""Running lint / fix over many files: per-file cache and parallel workers, results in a stable order.

Importing this module loads no analysis: a small run whose files are all in the result cache is
answered here without libcst or a rule (`answered_here`), and a worker imports the engine
(`lintloop.linter`, the rule classes: ~0.13 s) only when it has a file to analyse: files passed over
(no framework named) and files found in the cache need neither.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lintloop.cache import ResultCache, read_once_per_run
from lintloop.discovery import SourceFile
from lintloop.finding import Finding
from lintloop.frameworks import framework_evidence, framework_names, names_nothing
from lintloop.isolation import AnalysisError, AnalysisFailed, Limits, WorkerPool, uninterruptible
from lintloop.notebook import is_notebook
from lintloop.rules.index import ENTRIES
from lintloop.source import SourceText, UndecodableSource, outside_reason, settled_for_reading, write_in_place

if TYPE_CHECKING:
    from lintloop.rule import RuleSet


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
    explicit: bool = True  # named, not found in a directory (lintloop.discovery.SourceFile)
    modified_ns: int = 0  # the file's st_mtime_ns when found: the most recent is the likeliest cache miss
    # The resolved folders `fix` may write the file in (its project's root, the folder it was named in or
    # found below); empty: anywhere (`--write-outside-project`).
    write_within: tuple[str, ...] = ()
    # For a file found in a directory whose rules are all switched off for it (the test-code policy,
    # per-file-ignores): the framework names that still make it deep-learning code, checked for syntax
    # (LL001 is never switched off by them).
    syntax_check_names: tuple[bytes, ...] = ()


@dataclass
class JobResult:
    display: str
    findings: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    fixed: int = 0
    diff: str = ""
    messages: list[str] = field(default_factory=list)
    tracebacks: list[str] = field(default_factory=list)  # of internal errors, shown with --verbose
    passed_over: bool = False  # no deep-learning code: not parsed (lintloop.linter.FileResult)
    cache_written: bool = False  # a new cache entry was written (the parent then prunes the cache)


# Files per task sent to a worker: coarse (most files take under a millisecond, so per-file tasks
# would cost more in inter-process traffic than the linting), yet small enough that results stream
# back for the progress display and the last tasks balance across the workers.
NOT_ANALYSED = "LL004"
SYNTAX_ERROR = "LL001"

MAX_CHUNK = 64
CHUNKS_PER_WORKER = 16


def chunk_size(jobs: int, workers: int) -> int:
    return max(1, min(MAX_CHUNK, jobs // (workers * CHUNKS_PER_WORKER)))


def started_workers(workers: int, limits: Limits) -> WorkerPool:
    """A pool for `run_jobs` whose workers start now and import the engine (libcst, the rules) while
    this process finds the files: a run over directories then starts linting at once. The caller closes it."""
    pool = WorkerPool(workers, limits, initializer=_start_engine)
    pool.start()
    return pool


def _start_engine() -> None:
    read_once_per_run()
    import lintloop.linter  # noqa: F401 - imported for the worker's first file


def run_jobs(jobs: list[Job], workers: int, on_result: Callable[[JobResult], None] | None = None,
             limits: Limits = Limits(), pool: WorkerPool | None = None) -> list[JobResult]:
    """Run the jobs on up to `workers` worker processes, each file within `limits` (lintloop.isolation):
    a file whose analysis crashes, overruns or exhausts its worker is reported as not analysed (LL004)
    and costs no other file. `on_result` (in this process) sees each result as it completes, in
    completion order. `pool`: workers started already (`started_workers`), used instead of new ones.
    Returns the results sorted by display path."""
    results: list[tuple[int, JobResult]] = []  # with the job's index: ties in display keep the job order

    def finish(index: int, result: JobResult) -> None:
        results.append((index, result))
        if on_result is not None:
            on_result(result)

    pending = list(range(len(jobs)))
    if len(jobs) <= MAX_CHUNK:
        # A small run (a pre-commit hook, one file): the files passed over or found in the result cache
        # are answered here, which costs less than starting a worker to find them so.
        pending = []
        for index, job in enumerate(jobs):
            found = answered_here(job)
            if found is None:
                pending.append(index)
            else:
                finish(index, found)
    if pending:
        # A check takes the most recently modified first: in a warm run they are the files to analyse,
        # which then start at once while the other workers answer the rest from the cache. (fix, diff
        # and a check without a cache go in the order of the paths: a package's modules together, in
        # the chunks of one worker, which then parses the modules they import once.)
        pending.sort(key=lambda index: -jobs[index].modified_ns
                     if jobs[index].mode == "check" and jobs[index].cache_dir is not None else 0)
        todo = [jobs[index] for index in pending]
        workers = min(workers, len(todo)) if len(todo) > 4 else 1
        # A worker serves this run alone: what the project's files are is read once in it.
        with contextlib.nullcontext(pool) if pool is not None else WorkerPool(workers, limits, initializer=read_once_per_run) \
                as running:
            try:
                running.run(run_job, todo, chunk_size(len(todo), workers),
                            lambda index, outcome: finish(pending[index], _job_result(todo[index], outcome)), limits)
            except BaseException:
                # Ctrl-C or a broken pool: stop now (the workers hold nothing worth keeping).
                running.close()
                raise
    results.sort(key=lambda item: (item[1].display, item[0]))
    return [result for _, result in results]


def answered_here(job: Job) -> JobResult | None:
    """A `check` job's result where it needs no analysis (`_answered_without_engine`), in this process;
    None: a worker has to run it."""
    if job.mode != "check":
        return None
    try:
        data, _ = read_regular_file(job.path)
    except OSError:
        return None  # the worker reports it
    return _answered_without_engine(job, data)


def _answered_without_engine(job: Job, data: bytes) -> JobResult | None:
    """A check's result without libcst or a rule: a file found in a directory that names no framework
    is passed over (before its bytes are hashed), then the result cache is asked; None: a miss."""
    if not job.explicit and names_nothing(data, _framework_names(job.codes) or job.syntax_check_names,
                                          _framework_evidence(job.codes)):
        return JobResult(job.display, passed_over=True)
    if job.cache_dir is None:
        return None
    cache, key = _cache_entry(job, data)
    cached = cache.get(key)
    return None if cached is None else JobResult(job.display, cached.findings, passed_over=cached.passed_over)


def _cache_entry(job: Job, data: bytes) -> tuple[ResultCache, str]:
    assert job.cache_dir is not None
    cache = _result_cache(job.cache_dir)
    return cache, cache.key(job.display, job.codes, job.options, data, job.mode, job.explicit)


@functools.lru_cache(maxsize=4)
def _result_cache(directory: str) -> ResultCache:
    return ResultCache(directory)  # one per process and directory: thousands of files ask it


def _job_result(job: Job, outcome: object) -> JobResult:
    """A worker's outcome for one job as its result: a file whose analysis failed gets an LL004
    finding (where enabled), or an internal error."""
    if isinstance(outcome, JobResult):
        return outcome
    result = JobResult(job.display)
    if isinstance(outcome, AnalysisFailed):
        from lintloop.linter import not_analysed_finding

        if NOT_ANALYSED in job.codes:
            result.findings.append(not_analysed_finding(job.display, outcome.cause, unchanged=job.mode == "fix"))
    elif isinstance(outcome, AnalysisError):
        result.errors.append(f"{job.display}: internal error: {outcome.message}")
        result.tracebacks.append(outcome.details)
    return result


# A file rewritten by another process between this run's read and its write (a second `fix` run, an
# editor) is fixed afresh from its new content, this many times at most, so that nothing it wrote is lost.
FIX_ATTEMPTS = 3


def run_job(job: Job) -> JobResult:
    path = Path(job.path)
    for _ in range(FIX_ATTEMPTS if job.mode == "fix" else 1):
        result = JobResult(job.display)
        try:
            with _settled(path) if job.mode == "fix" else contextlib.nullcontext():
                data, status = read_regular_file(path)
        except OSError as exc:
            result.errors.append(f"{job.display}: cannot read: {exc.strerror or exc}")
            return result
        if job.mode == "check":
            return _checked(job, data)
        if _fix(job, path, data, status, _ruleset(job), result):
            return result
    result = JobResult(job.display)
    result.errors.append(f"{job.display}: not fixed: another process kept changing it while it was being fixed; "
                         "left as that process wrote it")
    return result


@contextlib.contextmanager
def _settled(path: Path) -> Iterator[None]:
    """Before `fix` reads a file: a write of another lintloop still going on is waited for, one a killed
    lintloop left unfinished is finished (lintloop.source.settled_for_reading); not stopped half-way."""
    with uninterruptible(), settled_for_reading(path):
        yield


def read_regular_file(path: str | os.PathLike[str]) -> tuple[bytes, os.stat_result]:
    """The file's bytes and its status when read. Opened without blocking, so that a FIFO (or a device)
    named like a source file, or put in a file's place after discovery, is refused, never waited on."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as handle:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        return handle.read(), status


def _fix(job: Job, path: Path, data: bytes, status: os.stat_result, ruleset: RuleSet, result: JobResult) -> bool:
    """Fix one file read as `data` (or diff it); False if it changed on disk since it was read (nothing written)."""
    from lintloop.linter import fix_notebook, fix_text, lint_bytes, without_framework_names

    if not job.explicit and without_framework_names(data, ruleset):
        result.passed_over = True
        return True
    try:
        source = SourceText.from_bytes(data)
    except UndecodableSource:
        lint = lint_bytes(job.display, data, ruleset, path=job.path)  # LL001; such a file is never touched
        result.findings, result.errors = lint.findings, lint.errors
        return True
    try:
        outside = outside_reason(path, job.write_within) if job.write_within else None
    except OSError:
        outside = None  # gone or unreadable since it was read: the write reports it
    if outside is not None:
        lint = lint_bytes(job.display, data, ruleset, path=job.path, explicit=job.explicit)
        result.findings, result.errors, result.passed_over = lint.findings, lint.errors, lint.passed_over
        if lint.findings:
            result.messages = [f"{job.display}: not fixed: {outside}; `--write-outside-project` fixes it there"]
        return True
    notebook = is_notebook(job.path)
    fixer = fix_notebook if notebook else fix_text
    outcome = fixer(job.display, source.text, ruleset, job.unsafe_fixes, path=job.path, explicit=job.explicit)
    result.findings, result.errors = outcome.remaining.findings, outcome.remaining.errors
    result.passed_over = outcome.remaining.passed_over
    result.messages = outcome.refused
    if not outcome.applied or outcome.text == source.text:
        return True
    result.fixed = outcome.applied
    if job.mode == "diff":
        result.diff = _notebook_diff(job.display, outcome.changed_cells) if notebook else _unified_diff(
            source.text.splitlines(keepends=True), outcome.text.splitlines(keepends=True), job.display)
        return True
    try:
        with uninterruptible():
            return write_in_place(path, source.encode(outcome.text), unchanged_since=status,
                                  within=job.write_within or None)
    except OSError as exc:
        # Read-only file or directory, full disk, ...: the file is as it was, so are its findings.
        lint = lint_bytes(job.display, data, ruleset, path=job.path)
        result.fixed = 0
        result.findings = lint.findings
        result.errors = lint.errors + [f"{job.display}: cannot write the fixes: {exc.strerror or exc}; "
                                       "the file is unchanged"]
        return True


def _notebook_diff(display: str, changed_cells: dict[int, tuple[str, str]]) -> str:
    """One diff per changed cell, named by the cell (as positions are in the reports)."""
    return "".join(_unified_diff(_diff_lines(old), _diff_lines(new), f"{display}:cell {cell}")
                   for cell, (old, new) in changed_cells.items())


def _unified_diff(old: list[str], new: list[str], name: str) -> str:
    import difflib  # by `fix --diff` alone: off the start-up path of every other run

    return "".join(difflib.unified_diff(old, new, fromfile=f"a/{name}", tofile=f"b/{name}"))


def _diff_lines(cell_source: str) -> list[str]:
    """A cell's lines for a diff: a cell's last line has no newline in the file, a diff line needs one."""
    return (cell_source + "\n" if cell_source and not cell_source.endswith("\n") else cell_source).splitlines(True)


def _ruleset(job: Job) -> RuleSet:
    """The job's rules: imports the engine (in a worker: the first file it has to analyse)."""
    from lintloop.rule import RuleSet
    from lintloop.rules import BY_CODE

    return RuleSet([BY_CODE[c] for c in job.codes], json.loads(job.options))


@functools.cache
def _framework_names(codes: tuple[str, ...]) -> tuple[bytes, ...]:
    """What `RuleSet.framework_roots` gives for these codes, from the rule index."""
    return framework_names(_frameworks(codes))


@functools.cache
def _framework_evidence(codes: tuple[str, ...]) -> tuple[tuple[bytes, ...], ...]:
    """What `RuleSet.framework_evidence` gives for these codes, from the rule index."""
    return framework_evidence(_frameworks(codes))


def _frameworks(codes: tuple[str, ...]) -> frozenset[str]:
    return frozenset(framework for entry in ENTRIES if entry.code in codes for framework in entry.frameworks)


def _checked(job: Job, data: bytes) -> JobResult:
    """A check: answered without the engine where it can be, else analysed (and cached)."""
    answered = _answered_without_engine(job, data)
    if answered is not None:
        return answered
    from lintloop.linter import lint_bytes

    # A file checked for syntax alone names a framework (the screen above): parsed as if named.
    explicit = job.explicit or bool(job.syntax_check_names)
    lint = lint_bytes(job.display, data, _ruleset(job), path=job.path, explicit=explicit)
    result = JobResult(job.display, lint.findings, lint.errors, passed_over=lint.passed_over)
    if job.cache_dir is not None and not lint.errors:  # a crashed rule is reported again next time, not cached away
        cache, key = _cache_entry(job, data)  # the key again: a hash of the file, next to its analysis
        result.cache_written = cache.put(key, lint.findings, lint.dependencies, lint.passed_over)
    return result


def make_jobs(files: list[SourceFile], codes: tuple[str, ...], rule_options: dict[str, dict], mode: str, *,
              per_file_ignores, unsafe_fixes: bool, cache_dir: str | None, write_root: str | None = None) -> list[Job]:
    """One job per file. `write_root`: the resolved project root that `fix` writes within (with the
    folder each file was named in or found below); None: it may write anywhere."""
    jobs = []
    options = json.dumps(rule_options, sort_keys=True)
    checked = _framework_names(codes)
    for file in files:
        ignored = per_file_ignores(file)
        file_codes = tuple(code for code in codes if code not in ignored) if ignored else codes
        syntax_check = checked if (not file.explicit and SYNTAX_ERROR in file_codes
                                   and not _framework_names(file_codes)) else ()
        within = () if write_root is None or mode == "check" else tuple(dict.fromkeys((write_root, file.anchor)))
        jobs.append(Job(str(file.path), file.display, file_codes, options, mode, unsafe_fixes, cache_dir,
                        file.explicit, file.modified_ns, within, syntax_check))
    return jobs
