#!/usr/bin/env python3
"""lintloop's speed benchmark, side by side with its peers, from a fresh clone in one command:

    python3 bench/run.py [--runs N] [--quick] [--only SCENARIO,...] [--json FILE] [--no-profile]

Builds the pinned real-code corpus (bench/corpus.tsv), a venv with the pinned peers
(bench/peers.txt) and a venv with the lintloop of this checkout, all under the cache directory
(default ~/.cache/lintloop-bench; --cache DIR or $LINTLOOP_BENCH_CACHE), then times every
scenario as whole processes and prints a markdown table, the speed targets, and lintloop's
per-stage profile. The driver uses the standard library only. See bench/README.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
CORPUS_TSV = BENCH_DIR / "corpus.tsv"
PEERS_TXT = BENCH_DIR / "peers.txt"
DEFAULT_CACHE = Path.home() / ".cache" / "lintloop-bench"

# The file the "one file edited" scenario appends to: lintloop analyses it fully (a real
# training loop), so the rerun after the edit costs what an edit in real work costs.
EDITED_FILE = "transformers/transformers/trainer.py"
SAMPLE_TARGET_LINES = 25_000  # the slow peers (TorchFix, Fixit) only run on a sample this big
GNU_TIME = Path("/usr/bin/time")

# Targets from the project's speed goals; ratios are of median wall seconds.
TARGET_COLD_VS_RUFF = 5.0
TARGET_WARM_VS_RUFF = 0.5
TARGET_EDIT_VS_WARM = 1.5
TARGET_RSS_MIB = 300.0

# Used only where GNU time is missing: a fresh process whose RUSAGE_CHILDREN then covers
# exactly the one command (the driver's own RUSAGE_CHILDREN accumulates over every run).
RSS_LAUNCHER = """\
import resource, subprocess, sys
code = subprocess.call(sys.argv[2:])
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(sys.argv[1], "w") as out:
    out.write(f"{usage.ru_maxrss} {usage.ru_utime} {usage.ru_stime}")
sys.exit(code if code >= 0 else 128 - code)
"""


class BenchError(Exception):
    """A problem that stops the benchmark: printed as one clear line, exit status 2."""


def log(message: str = "") -> None:
    print(message, flush=True)


def run_checked(argv: list[str], what: str, cwd: Path | None = None, quiet: bool = True) -> str:
    """Run a setup command; on failure raise BenchError with the tail of its output."""
    proc = subprocess.run(argv, cwd=cwd, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.strip().splitlines()[-15:])
        raise BenchError(f"{what} failed (exit {proc.returncode}): {shlex.join(argv)}\n{tail}")
    if not quiet:
        log(proc.stdout.rstrip())
    return proc.stdout


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------
# Corpus


@dataclass(frozen=True)
class CorpusEntry:
    package: str
    version: str
    archive: str
    sha256: str
    py_files: int
    lines: int


@dataclass
class CorpusFile:
    relative: str  # posix path below the corpus root, e.g. "d2l/d2l/torch.py"
    lines: int


def read_corpus_tsv(path: Path) -> list[CorpusEntry]:
    rows = [line.rstrip("\n").split("\t") for line in path.read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    header, body = rows[0], rows[1:]
    expected = ["package", "version", "archive", "sha256", "py_files", "lines"]
    if header != expected:
        raise BenchError(f"{path}: header is {header}, expected {expected}")
    return [CorpusEntry(r[0], r[1], r[2], r[3], int(r[4]), int(r[5])) for r in body]


def download_archive(entry: CorpusEntry, archives: Path, pip_python: str) -> Path:
    """The verified archive, downloaded with pip unless it is already there with the right hash."""
    target = archives / entry.archive
    if target.is_file() and sha256_of(target) == entry.sha256:
        return target
    target.unlink(missing_ok=True)  # a stale or truncated copy: pip would happily reuse it
    is_wheel = entry.archive.endswith(".whl")
    # Wheels for one fixed platform/Python, so every machine gets byte-identical archives.
    binary = (["--only-binary=:all:", "--python-version", "3.11",
               "--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_17_x86_64"]
              if is_wheel else ["--no-binary=:all:"])
    log(f"  downloading {entry.package}=={entry.version} ...")
    run_checked([pip_python, "-m", "pip", "download", "--no-deps", "--quiet", *binary,
                 f"{entry.package}=={entry.version}", "-d", str(archives)],
                f"pip download {entry.package}=={entry.version}")
    if not target.is_file():
        present = ", ".join(sorted(p.name for p in archives.iterdir()))
        raise BenchError(f"pip download of {entry.package}=={entry.version} did not produce "
                         f"{entry.archive} (the archives folder holds: {present})")
    actual = sha256_of(target)
    if actual != entry.sha256:
        raise BenchError(f"sha256 mismatch for {target}: got {actual}, bench/corpus.tsv says "
                         f"{entry.sha256}; the index serves a different file than the corpus was pinned to")
    return target


def archive_members(archive: Path) -> Iterator[tuple[str, bytes]]:
    """(name, content) of every *.py file in a wheel/zip or tar archive."""
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as zipped:
            for info in zipped.infolist():
                if not info.is_dir() and info.filename.endswith(".py"):
                    yield info.filename, zipped.read(info)
    else:
        with tarfile.open(archive) as tarred:
            for member in tarred.getmembers():
                if member.isfile() and member.name.endswith(".py"):
                    extracted = tarred.extractfile(member)
                    assert extracted is not None
                    yield member.name, extracted.read()


def unpack(archive: Path, destination: Path) -> None:
    shutil.rmtree(destination, ignore_errors=True)
    destination.mkdir(parents=True)
    root = destination.resolve()
    for name, content in archive_members(archive):
        path = (destination / name).resolve()
        if root not in path.parents:  # never write outside the package folder
            raise BenchError(f"{archive.name}: refusing member with unsafe path {name!r}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


def count_lines(data: bytes) -> int:
    """Newlines, plus one for a last line without one: the definition corpus.tsv was counted with
    (12 of timm's files end without a newline, so a bare count of b"\n" is 12 short there)."""
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def scan_package(directory: Path, corpus_root: Path) -> list[CorpusFile]:
    found = []
    for path in directory.rglob("*.py"):
        if path.is_file():
            found.append(CorpusFile(path.relative_to(corpus_root).as_posix(), count_lines(path.read_bytes())))
    return found


def build_corpus(entries: list[CorpusEntry], cache: Path, pip_python: str,
                 folder: str = "corpus") -> tuple[Path, list[CorpusFile], list[dict]]:
    """Download, verify and unpack every package into `cache/folder`; verify file and line counts
    against the TSV.

    Counts are checked on every run, and a package whose files differ (say an edit left behind by
    a killed run) is unpacked again from its verified archive. A folder of a package the entries do
    not list is removed: the tools are run on the whole corpus folder, so it would be timed too.
    """
    archives = cache / "archives"
    corpus = cache / folder
    archives.mkdir(parents=True, exist_ok=True)
    corpus.mkdir(parents=True, exist_ok=True)
    files: list[CorpusFile] = []
    report = []
    log("| package | version | py files | lines | matches corpus.tsv |\n|---|---|---:|---:|---|")
    for entry in entries:
        package_dir = corpus / entry.package
        scanned = scan_package(package_dir, corpus) if package_dir.is_dir() else []
        if (len(scanned), sum(f.lines for f in scanned)) != (entry.py_files, entry.lines):
            unpack(download_archive(entry, archives, pip_python), package_dir)
            scanned = scan_package(package_dir, corpus)
        count, lines = len(scanned), sum(f.lines for f in scanned)
        matches = (count, lines) == (entry.py_files, entry.lines)
        log(f"| {entry.package} | {entry.version} | {count} | {lines:,} | "
            f"{'yes' if matches else f'NO (expected {entry.py_files} files, {entry.lines:,} lines)'} |")
        if not matches:
            raise BenchError(f"{entry.package}: unpacked {count} files / {lines} lines, "
                             f"bench/corpus.tsv says {entry.py_files} / {entry.lines}")
        files.extend(scanned)
        report.append({"package": entry.package, "version": entry.version, "files": count, "lines": lines})
    listed = {entry.package for entry in entries}
    for stray in sorted(p for p in corpus.iterdir() if p.name not in listed):
        log(f"removing {stray}: not a package of this corpus")
        shutil.rmtree(stray) if stray.is_dir() and not stray.is_symlink() else stray.unlink()
    files.sort(key=lambda f: f.relative)
    log(f"| **total** | | {len(files)} | {sum(f.lines for f in files):,} | |")
    return corpus, files, report


def sample_step(files: list[CorpusFile], target_lines: int) -> int:
    """The largest k for which every k-th file of the corpus adds up to `target_lines`."""
    step = max(1, sum(f.lines for f in files) // target_lines)
    while step > 1 and sum(f.lines for f in files[::step]) < target_lines:
        step -= 1
    return step


def fixed_sample(files: list[CorpusFile], target_lines: int) -> list[CorpusFile]:
    """Every k-th file of the sorted corpus until `target_lines`: deterministic, and spread
    over all packages rather than the first few."""
    sample: list[CorpusFile] = []
    for file in files[::sample_step(files, target_lines)]:
        if sum(f.lines for f in sample) >= target_lines:
            break
        sample.append(file)
    return sample


# ---------------------------------------------------------------------------------------------
# Environments


def create_venv(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if not python.exists():
        shutil.rmtree(venv, ignore_errors=True)
        run_checked([sys.executable, "-m", "venv", str(venv)], f"creating venv {venv}")
    return python


def pip_python(cache: Path) -> str:
    """A Python with pip for `pip download`: this one, or (a distribution's python3 without pip)
    the peers venv's, which venv's ensurepip gives one."""
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode == 0:
        return sys.executable
    return str(create_venv(cache / "peers-venv"))


def repo_state() -> str:
    """A hash of what `pip install <repo>` would install: HEAD plus the uncommitted changes."""
    digest = hashlib.sha256()
    try:
        for argv in (["git", "rev-parse", "HEAD"], ["git", "status", "--porcelain"], ["git", "diff", "HEAD"]):
            digest.update(subprocess.run(argv, cwd=REPO_DIR, check=True, capture_output=True).stdout)
        untracked = subprocess.run(["git", "ls-files", "-o", "--exclude-standard", "-z"], cwd=REPO_DIR,
                                   check=True, capture_output=True).stdout
        for name in sorted(n for n in untracked.decode().split("\0") if n):  # their content too
            if (REPO_DIR / name).is_file():
                digest.update(name.encode() + (REPO_DIR / name).read_bytes())
    except (OSError, subprocess.CalledProcessError):
        for path in sorted(REPO_DIR.rglob("*")):  # not a git checkout: hash every file
            if path.is_file() and ".git" not in path.parts:
                digest.update(str(path.relative_to(REPO_DIR)).encode() + path.read_bytes())
    return digest.hexdigest()


def tracked_and_untracked_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO_DIR,
                            check=True, capture_output=True).stdout
    return [name for name in listed.decode().split("\0") if name and (REPO_DIR / name).is_file()]


def stage_checkout(destination: Path) -> None:
    """Copy the checkout's files (tracked and untracked, not ignored) to a clean folder: building
    in the repo would reuse its ignored build/ folder, which keeps modules long deleted."""
    try:
        names = tracked_and_untracked_files()
    except (OSError, subprocess.CalledProcessError):
        shutil.copytree(REPO_DIR, destination, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__", ".venv"))
        return
    for name in names:
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_DIR / name, target)


def install_lintloop(cache: Path) -> Path:
    """<cache>/lintloop-venv with this checkout installed (core dependencies only); reinstalled
    when HEAD or the working tree changed since the last install."""
    venv = cache / "lintloop-venv"
    python = create_venv(venv)
    stamp = venv / "bench-installed-state"
    state = repo_state()
    if stamp.is_file() and stamp.read_text() == state and (venv / "bin" / "lintloop").exists():
        log(f"lintloop: {venv} is up to date with the checkout")
        return venv / "bin" / "lintloop"
    log(f"lintloop: installing the checkout into {venv} ...")
    stamp.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="lintloop-bench-src-") as staging:
        stage_checkout(Path(staging))
        # Uninstall first: pip may keep an installed 0.1.0 of the same version as it is.
        subprocess.run([str(python), "-m", "pip", "uninstall", "--quiet", "-y", "lintloop"], capture_output=True)
        run_checked([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", staging],
                    "pip install of the lintloop checkout")
    stamp.write_text(state)
    return venv / "bin" / "lintloop"


@dataclass
class Peers:
    venv: Path
    binaries: dict[str, Path] = field(default_factory=dict)  # tool -> executable
    versions: dict[str, str] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)  # tool -> why it is unavailable
    freeze: list[str] = field(default_factory=list)


def peer_pins() -> list[str]:
    return [line.split("#")[0].strip() for line in PEERS_TXT.read_text().splitlines()
            if line.split("#")[0].strip()]


def install_peers(cache: Path) -> Peers:
    """<cache>/peers-venv with bench/peers.txt; a peer that cannot be installed is reported, not fatal."""
    venv = cache / "peers-venv"
    peers = Peers(venv)
    try:
        python = create_venv(venv)
    except BenchError as error:
        peers.problems = {name: f"no venv: {error}".splitlines()[0] for name in ("ruff", "torchfix", "fixit")}
        return peers
    pins = peer_pins()
    stamp = venv / "bench-installed-pins"
    wanted = "\n".join(pins) + f"\n{sys.version}"
    install_errors: dict[str, str] = {}
    if not (stamp.is_file() and stamp.read_text() == wanted):
        log(f"peers: installing {', '.join(pins)} into {venv} ...")
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        if subprocess.run([*pip, *pins], capture_output=True).returncode != 0:
            for pin in pins:  # one at a time, so one broken peer does not take the others down
                proc = subprocess.run([*pip, pin], capture_output=True, text=True)
                if proc.returncode != 0:
                    install_errors[re.split(r"[=<>!~ ]", pin)[0].lower()] = (
                        (proc.stderr.strip().splitlines() or ["pip install failed"])[-1])
        if not install_errors:
            stamp.write_text(wanted)
    for pin in pins:
        name = re.split(r"[=<>!~ ]", pin)[0].lower()
        binary = venv / "bin" / name
        if name in install_errors:
            peers.problems[name] = f"not installed: {install_errors[name]}"
            continue
        proc = subprocess.run([str(binary), "--version"], capture_output=True, text=True) if binary.exists() else None
        if proc is None or proc.returncode != 0:
            peers.problems[name] = f"not runnable: {binary} --version failed"
            continue
        peers.binaries[name] = binary
        reported = (proc.stdout.strip() or proc.stderr.strip()).splitlines()[0]
        version = re.search(r"\d+(\.\d+)+\S*", reported)  # "ruff 0.17.6", "0.7.0", "fixit, version 2.2.1"
        peers.versions[name] = version.group(0) if version else reported
    peers.freeze = subprocess.run([str(python), "-m", "pip", "freeze"], capture_output=True, text=True).stdout.split()
    return peers


# ---------------------------------------------------------------------------------------------
# Measuring


@dataclass
class Run:
    seconds: float
    rss_kib: int | None
    exit_code: int
    cpu_seconds: float | None = None  # user + system of the whole process tree
    report_bytes: int = 0  # what the tool wrote on stdout (its report), read through a pipe


@dataclass
class Scenario:
    key: str                      # the name --only selects
    label: str
    argv: list[str]
    files: int
    lines: int
    ok_exit_codes: frozenset[int]
    # A line stderr must match on success, for tools whose exit status alone cannot tell a crash
    # from "findings" or "a file did not parse" (their closing summary proves they ran to the end).
    success_marker: str | None = None
    on_sample: bool = False       # compared with ruff default on the same sample, not the corpus
    slow_peer: bool = False       # skipped by --quick
    before_all: Callable[[], None] | None = None
    before_each: Callable[[], None] | None = None
    after_each: Callable[[], None] | None = None
    unavailable: str | None = None  # why it cannot run (a peer that did not install)
    runs: list[Run] = field(default_factory=list)
    failure: str | None = None
    stderr_notes: list[str] = field(default_factory=list)

    def median(self) -> float | None:
        return statistics.median(r.seconds for r in self.runs) if self.runs and not self.failure else None

    def peak_rss_mib(self) -> float | None:
        values = [r.rss_kib for r in self.runs if r.rss_kib is not None]
        return max(values) / 1024 if values and not self.failure else None


def measure_once(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[Run, str]:
    """One whole-process run: wall seconds, CPU seconds and peak RSS of the largest process of its tree,
    exit status. The report the tool writes on stdout is read through a pipe, to its end, as a user's
    terminal or CI log would take it: writing its report is part of what a tool costs."""
    with tempfile.TemporaryDirectory(prefix="lintloop-bench-run-") as scratch:
        usage_file = Path(scratch) / "usage"
        stderr_file = Path(scratch) / "stderr"
        if GNU_TIME.exists():
            # -o keeps time's report apart from the command's own stderr.
            command = [str(GNU_TIME), "-o", str(usage_file), "-f", "%M %U %S", *argv]
        else:
            command = [sys.executable, "-c", RSS_LAUNCHER, str(usage_file), *argv]
        report_bytes = 0
        with stderr_file.open("wb") as stderr:
            start = time.perf_counter()
            # A session of its own, so that an interrupted benchmark kills the whole tree (time,
            # the tool, its workers) before restoring the edited file.
            proc = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=stderr, start_new_session=True)
            try:
                assert proc.stdout is not None
                while block := proc.stdout.read1(1 << 16):
                    report_bytes += len(block)
                exit_code = proc.wait()
            except BaseException:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise
            seconds = time.perf_counter() - start
        rss_kib = cpu_seconds = None
        if usage_file.is_file():  # GNU time puts "Command exited with non-zero status N" first
            fields = (usage_file.read_text().strip().splitlines() or [""])[-1].split()
            if len(fields) == 3 and fields[0].isdigit():
                rss_kib, cpu_seconds = int(fields[0]), float(fields[1]) + float(fields[2])
        return Run(seconds, rss_kib, exit_code, cpu_seconds, report_bytes), stderr_file.read_text(errors="replace")


def run_scenario(scenario: Scenario, runs: int, cwd: Path, env: dict[str, str]) -> None:
    log(f"\n{scenario.label}: {shlex.join(scenario.argv) if len(scenario.argv) < 12 else shlex.join(scenario.argv[:10]) + f' ... ({len(scenario.argv) - 10} more)'}")
    if scenario.before_all:
        try:
            scenario.before_all()
        except BenchError as error:
            scenario.failure = "setup failed"
            scenario.stderr_notes.append(str(error))
            log(f"  FAILED: {error}")
            return
    for index in range(runs):
        if scenario.before_each:
            scenario.before_each()
        try:
            run, stderr = measure_once(scenario.argv, cwd, env)
        finally:
            if scenario.after_each:
                scenario.after_each()
        crashed = run.exit_code not in scenario.ok_exit_codes
        if not crashed and scenario.success_marker and not re.search(scenario.success_marker, stderr):
            crashed = True
        if crashed:
            # A crash is never timed as a success: the scenario is reported as failed.
            tail = " | ".join(stderr.strip().splitlines()[-5:])
            scenario.failure = f"exit {run.exit_code}" + (
                "" if run.exit_code not in scenario.ok_exit_codes else ", no closing summary on stderr")
            scenario.stderr_notes.append(tail)
            log(f"  run {index + 1}/{runs}: FAILED with exit {run.exit_code} after {run.seconds:.2f} s: {tail}")
            return
        scenario.runs.append(run)
        notes = [line for line in stderr.strip().splitlines() if line.strip()]
        if notes and not scenario.stderr_notes:
            scenario.stderr_notes = notes[-3:]
        rss = f", peak RSS {run.rss_kib / 1024:.0f} MiB" if run.rss_kib else ""
        log(f"  run {index + 1}/{runs}: {run.seconds:.2f} s{rss}")


# ---------------------------------------------------------------------------------------------
# Reporting


def table_cell(text: str, limit: int = 160, escape: bool = True) -> str:
    """One line, no column breaks: tools' error messages go into markdown cells."""
    flat = " ".join(text.split())
    flat = flat.replace("|", "\\|") if escape else flat
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def format_failures(scenarios: list[Scenario]) -> str:
    failed = [s for s in scenarios if s.failure]
    if not failed:
        return ""
    lines = ["\nFailed scenarios (never timed as successes):"]
    for s in failed:
        lines.append(f"- {s.label}: {s.failure}: {table_cell(' / '.join(s.stderr_notes), 600, escape=False)}")
    return "\n".join(lines)


def format_table(scenarios: list[Scenario], rss_note: str) -> str:
    ruff = {s.on_sample: s.median() for s in scenarios if s.key in ("ruff-default", "sample-ruff-default")}
    rows = [f"| scenario | files | lines | wall s median (min–max) | CPU s median | lines/s | report | "
            f"peak RSS MiB ({rss_note}) | × ruff default cold (same run, same files) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in scenarios:
        if s.unavailable or s.failure:
            why = table_cell(s.unavailable or f"FAILED ({s.failure}), see below")
            rows.append(f"| {s.label} | {s.files} | {s.lines:,} | {why} | – | – | – | – | – |")
            continue
        median = s.median()
        assert median is not None
        seconds = [r.seconds for r in s.runs]
        spread = f" ({min(seconds):.2f}–{max(seconds):.2f})" if len(seconds) > 1 else ""
        cpu = [r.cpu_seconds for r in s.runs if r.cpu_seconds is not None]
        rss = s.peak_rss_mib()
        base = ruff.get(s.on_sample)
        ratio = f"{median / base:.2f}×" if base else "–"
        rows.append(f"| {s.label} | {s.files} | {s.lines:,} | {median:.2f}{spread} | "
                    f"{f'{statistics.median(cpu):.2f}' if cpu else '–'} | {s.lines / median:,.0f} | "
                    f"{_size(statistics.median(r.report_bytes for r in s.runs))} | "
                    f"{f'{rss:.0f}' if rss is not None else '–'} | {ratio} |")
    return "\n".join(rows)


def _size(count: float) -> str:
    for unit in ("B", "KB", "MB"):
        if count < 1000 or unit == "MB":
            return f"{count:,.0f} {unit}" if unit == "B" else f"{count:,.1f} {unit}"
        count /= 1000
    raise AssertionError("unreachable")


def format_extrapolation(scenarios: list[Scenario], corpus_lines: int) -> str:
    sample_rows = [s for s in scenarios if s.on_sample and s.median()]
    if not any(s.slow_peer for s in sample_rows):
        return ""
    out = [f"\nEXTRAPOLATED, not measured: whole-corpus seconds ({corpus_lines:,} lines) at the lines/s each "
           "tool reached on the sample.\n",
           "| tool (on the sample) | lines/s on the sample | extrapolated whole-corpus s | files it reported checking |",
           "|---|---:|---:|---|"]
    for s in sample_rows:
        rate = s.lines / s.median()  # type: ignore[operator]
        checked = next((n for n in s.stderr_notes if "checked" in n.lower() or "checking" in n.lower()), "")
        out.append(f"| {s.label} | {rate:,.0f} | ~{corpus_lines / rate:,.0f} | {checked} |")
    return "\n".join(out)


def evaluate_targets(scenarios: list[Scenario]) -> list[dict]:
    by_key = {s.key: s for s in scenarios}

    def median(key: str) -> float | None:
        scenario = by_key.get(key)
        return scenario.median() if scenario else None

    def crashed(*keys: str) -> bool:  # a lintloop scenario that failed misses its target
        return any(key in by_key and by_key[key].failure for key in keys if key.startswith("lintloop"))

    def ratio_target(name: str, numerator: str, denominator: str, limit: float) -> dict:
        top, bottom = median(numerator), median(denominator)
        value = top / bottom if top is not None and bottom else None
        if value is None:
            status = "FAIL (lintloop failed)" if crashed(numerator, denominator) else "n/a (not measured)"
        else:
            status = "PASS" if value <= limit else "FAIL"
        return {"target": name, "value": value, "limit": limit, "unit": "×", "status": status}

    lintloop_rows = [s for s in scenarios if s.key.startswith(("lintloop", "sample-lintloop"))]
    known_rss = [r for r in (s.peak_rss_mib() for s in lintloop_rows) if r is not None]
    peak = max(known_rss) if known_rss else None
    if peak is not None:
        rss_status = "PASS" if peak <= TARGET_RSS_MIB else "FAIL"
    else:
        rss_status = "FAIL (lintloop failed)" if any(s.failure for s in lintloop_rows) else "n/a (not measured)"
    return [
        ratio_target(f"lintloop cold (all cores) ≤ {TARGET_COLD_VS_RUFF:g}× ruff default cold",
                     "lintloop-cold-all", "ruff-default", TARGET_COLD_VS_RUFF),
        ratio_target(f"lintloop warm ≤ {TARGET_WARM_VS_RUFF:g}× ruff default cold",
                     "lintloop-warm", "ruff-default", TARGET_WARM_VS_RUFF),
        ratio_target(f"lintloop one file edited ≤ {TARGET_EDIT_VS_WARM:g}× lintloop warm",
                     "lintloop-edit", "lintloop-warm", TARGET_EDIT_VS_WARM),
        {"target": f"lintloop peak RSS per process ≤ {TARGET_RSS_MIB:g} MiB (largest process, all lintloop rows)",
         "value": peak, "limit": TARGET_RSS_MIB, "unit": " MiB",
         "status": rss_status},
    ]


def format_targets(targets: list[dict]) -> str:
    rows = ["| target | measured | result |", "|---|---:|---|"]
    for t in targets:
        value = "–" if t["value"] is None else (f"{t['value']:.2f}×" if t["unit"] == "×" else f"{t['value']:.0f} MiB")
        rows.append(f"| {t['target']} | {value} | {t['status']} |")
    return "\n".join(rows)


def run_profile(python: Path, corpus: Path, work: Path, env: dict[str, str]) -> dict | None:
    log(f"\n## Per-stage profile: {python} -m lintloop.profiling --json {corpus}")
    proc = subprocess.run([str(python), "-m", "lintloop.profiling", "--json", str(corpus)], cwd=work, env=env,
                          capture_output=True, text=True)
    if re.search(r"No module named '?lintloop\.profiling", proc.stderr):
        log("(this lintloop has no lintloop.profiling module yet: profile skipped)")
        return None
    if proc.returncode != 0:
        log(f"profile FAILED (exit {proc.returncode}): {' | '.join(proc.stderr.strip().splitlines()[-5:])}")
        return None
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        log(f"profile printed no JSON: {proc.stdout[:500]}")
        return None
    # The tables are lintloop's own formatting of the same numbers (the driver imports no lintloop).
    tables = subprocess.run([str(python), "-c", "import json, sys; from lintloop.profiling import format_profile; "
                             "print(format_profile(json.load(sys.stdin)))"], input=proc.stdout, cwd=work, env=env,
                            capture_output=True, text=True)
    log(tables.stdout if tables.returncode == 0 else f"profile tables FAILED: {tables.stderr.strip()[-300:]}")
    return report


# ---------------------------------------------------------------------------------------------
# Scenarios


class EditedFile:
    """Appends a fresh comment line to one corpus file before each run and always restores it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.original = path.read_bytes()
        self.counter = 0

    def edit(self) -> None:
        self.counter += 1
        suffix = b"" if self.original.endswith(b"\n") else b"\n"
        self.path.write_bytes(self.original + suffix + f"# lintloop-bench edit {self.counter} {time.time_ns()}\n".encode())

    def restore(self) -> None:
        self.path.write_bytes(self.original)


SCENARIO_KEYS = ["ruff-default", "ruff-all", "lintloop-cold-1", "lintloop-cold-all", "lintloop-warm",
                 "lintloop-edit", "sample-ruff-default", "sample-lintloop-cold-all", "sample-torchfix", "sample-fixit"]


def build_scenarios(lintloop: list[str], peers: Peers, corpus: Path, files: list[CorpusFile],
                    sample: list[CorpusFile], work: Path, edited: EditedFile, env: dict[str, str]) -> list[Scenario]:
    cores = os.cpu_count() or 1
    corpus_files, corpus_lines = len(files), sum(f.lines for f in files)
    sample_paths = [str(corpus / f.relative) for f in sample]
    sample_files, sample_lines = len(sample), sum(f.lines for f in sample)
    ruff = str(peers.binaries.get("ruff", "ruff"))
    # Like for like: both print one line per finding (concise) and no summary, and ruff reads no
    # configuration of the corpus's packages (their own rule sets) and no cache.
    ruff_check = [ruff, "check", "--no-cache", "--isolated", "--exit-zero", "--quiet", "--output-format", "concise"]
    lintloop_check = [*lintloop, "check", "--exit-zero", "--quiet", "--format", "concise"]
    cache_dir = work / ".lintloop_cache"

    def fill_cache() -> None:
        # Warm means: the cache of an earlier run over the same, unchanged files.
        shutil.rmtree(cache_dir, ignore_errors=True)
        log("  (untimed run to fill .lintloop_cache)")
        run, stderr = measure_once([*lintloop_check, "--jobs", str(cores), str(corpus)], work, env)
        if run.exit_code != 0:
            raise BenchError(f"lintloop cache-filling run failed with exit {run.exit_code}: {stderr.strip()[-500:]}")

    def ensure_cache() -> None:
        if not cache_dir.is_dir():
            fill_cache()

    def peer(name: str) -> str | None:
        return peers.problems.get(name) if name not in peers.binaries else None

    return [
        Scenario("ruff-default", "ruff default, cold", [*ruff_check, str(corpus)], corpus_files, corpus_lines,
                 frozenset({0}), unavailable=peer("ruff")),
        Scenario("ruff-all", "ruff --select ALL, cold", [*ruff_check, "--select", "ALL", str(corpus)],
                 corpus_files, corpus_lines, frozenset({0}), unavailable=peer("ruff")),
        Scenario("lintloop-cold-1", "lintloop cold, 1 job", [*lintloop_check, "--no-cache", "--jobs", "1", str(corpus)],
                 corpus_files, corpus_lines, frozenset({0})),
        Scenario("lintloop-cold-all", f"lintloop cold, {cores} jobs (all cores)",
                 [*lintloop_check, "--no-cache", "--jobs", str(cores), str(corpus)], corpus_files, corpus_lines,
                 frozenset({0})),
        Scenario("lintloop-warm", f"lintloop warm (nothing changed), {cores} jobs",
                 [*lintloop_check, "--jobs", str(cores), str(corpus)], corpus_files, corpus_lines, frozenset({0}),
                 before_all=fill_cache),
        Scenario("lintloop-edit", f"lintloop warm, one file edited, {cores} jobs",
                 [*lintloop_check, "--jobs", str(cores), str(corpus)], corpus_files, corpus_lines, frozenset({0}),
                 before_all=ensure_cache, before_each=edited.edit, after_each=edited.restore),
        Scenario("sample-ruff-default", "sample: ruff default, cold", [*ruff_check, *sample_paths],
                 sample_files, sample_lines, frozenset({0}), on_sample=True, unavailable=peer("ruff")),
        Scenario("sample-lintloop-cold-all", f"sample: lintloop cold, {cores} jobs",
                 [*lintloop_check, "--no-cache", "--jobs", str(cores), *sample_paths], sample_files, sample_lines,
                 frozenset({0}), on_sample=True),
        # TorchFix (a libcst codemod, all cores) exits 1 when it failed on some file, 0 otherwise; it
        # only checks files that mention "torch". Its "Finished checking N files." proves no crash.
        Scenario("sample-torchfix", "sample: TorchFix (default rules)",
                 [str(peers.binaries.get("torchfix", "torchfix")), *sample_paths], sample_files, sample_lines,
                 frozenset({0, 1}), success_marker=r"Finished checking \d+ files", on_sample=True, slow_peer=True,
                 unavailable=peer("torchfix")),
        # Fixit's exit status is a bit set: 1 findings, 2 a file it could not parse. Its closing
        # "N files checked" summary proves no crash.
        Scenario("sample-fixit", "sample: Fixit lint (default rules)",
                 [str(peers.binaries.get("fixit", "fixit")), "lint", *sample_paths], sample_files, sample_lines,
                 frozenset({0, 1, 2, 3}), success_marker=r"\d+ files? checked", on_sample=True, slow_peer=True,
                 unavailable=peer("fixit")),
    ]


# ---------------------------------------------------------------------------------------------
# Main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="scenarios: " + ", ".join(SCENARIO_KEYS))
    parser.add_argument("--runs", type=int, default=3, help="timed runs per scenario (default 3)")
    parser.add_argument("--quick", action="store_true", help="1 run each, skip the sample and its slow peers")
    parser.add_argument("--only", help="comma-separated scenarios to run (see below)")
    parser.add_argument("--json", type=Path, help="write every raw number to this file")
    parser.add_argument("--no-profile", action="store_true", help="skip lintloop's per-stage profile")
    parser.add_argument("--cache", type=Path, help="cache directory (default $LINTLOOP_BENCH_CACHE or ~/.cache/lintloop-bench)")
    parser.add_argument("--lintloop", help="command to run as lintloop instead of installing this checkout")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.only:
        unknown = set(args.only.split(",")) - set(SCENARIO_KEYS)
        if unknown:
            parser.error(f"unknown scenario(s) {', '.join(sorted(unknown))}; choose from {', '.join(SCENARIO_KEYS)}")
    return args


def interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cache = (args.cache or Path(os.environ.get("LINTLOOP_BENCH_CACHE") or DEFAULT_CACHE)).expanduser().resolve()
    if cache == REPO_DIR or REPO_DIR in cache.parents:
        raise BenchError(f"the cache {cache} must be outside the repository (lintloop would lint its own cache)")
    runs = 1 if args.quick else args.runs
    selected = args.only.split(",") if args.only else [
        k for k in SCENARIO_KEYS if not (args.quick and k.startswith("sample-"))]
    # SIGTERM unwinds like Ctrl-C, so the edited corpus file is always restored.
    signal.signal(signal.SIGTERM, interrupt)
    cache.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    log(f"# lintloop benchmark\n\ncache: {cache}\nhost: {platform.platform()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}\n")
    wants_peers = any(not k.startswith(("lintloop", "sample-lintloop")) for k in selected)
    peers = install_peers(cache) if wants_peers else Peers(cache / "peers-venv")
    if args.lintloop:
        lintloop = shlex.split(args.lintloop)
        sibling = Path(shutil.which(lintloop[0]) or lintloop[0]).parent / "python"
        profile_python = sibling if sibling.exists() else None
    else:
        lintloop_binary = install_lintloop(cache)
        lintloop = [str(lintloop_binary)]
        profile_python = lintloop_binary.parent / "python"
    for name, problem in peers.problems.items():
        log(f"peers: {name}: {problem}")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_DIR, capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain"], cwd=REPO_DIR, capture_output=True, text=True).stdout.strip())
    lintloop_version = subprocess.run([*lintloop, "--version"], capture_output=True, text=True).stdout.strip()
    log(f"lintloop under test: {shlex.join(lintloop)} ({lintloop_version or 'version unknown'}; checkout {commit or '?'}"
        f"{' + uncommitted changes' if dirty else ''})")
    log("peers: " + (", ".join(f"{name} {version}" for name, version in peers.versions.items()) or "none"))

    log("\n## Corpus\n")
    corpus, files, corpus_report = build_corpus(read_corpus_tsv(CORPUS_TSV), cache, pip_python(cache))
    sample = fixed_sample(files, SAMPLE_TARGET_LINES)
    corpus_lines = sum(f.lines for f in files)
    log(f"\nsample for the slow peers: every k-th file (k = {sample_step(files, SAMPLE_TARGET_LINES)}) of the "
        f"sorted corpus up to {SAMPLE_TARGET_LINES:,} lines: {len(sample)} files, {sum(f.lines for f in sample):,} lines")

    # lintloop reads its config and writes .lintloop_cache/ in its cwd: a folder of the cache, with an
    # empty lintloop.toml so that no pyproject.toml above it changes the rules.
    work = cache / "work"
    work.mkdir(exist_ok=True)
    (work / "lintloop.toml").write_text("")
    # Every lintloop run is its own process tree, as in CI: a warm engine (lintloop.warm_engine) would run
    # the check in a process outside it, whose time and memory no row would count (bench/startup.py
    # times the warm engine).
    env = {**os.environ, "NO_COLOR": "1", "LINTLOOP_WARM_ENGINE": "0"}
    edited_path = corpus / EDITED_FILE
    if not edited_path.is_file():
        raise BenchError(f"{edited_path} is not in the corpus; update EDITED_FILE in bench/run.py")
    edited = EditedFile(edited_path)
    scenarios = [s for s in build_scenarios(lintloop, peers, corpus, files, sample, work, edited, env)
                 if s.key in selected]

    gnu = GNU_TIME.exists()
    rss_note = "largest process, GNU time %M" if gnu else "largest process, getrusage(RUSAGE_CHILDREN)"
    log(f"\n## Timing: {runs} run(s) each, wall seconds of the whole process; peak RSS of the largest process "
        f"of each command's tree ({'GNU time' if gnu else 'python getrusage launcher'})")
    try:
        for scenario in scenarios:
            if scenario.unavailable:
                log(f"\n{scenario.label}: skipped, {scenario.unavailable}")
                continue
            run_scenario(scenario, runs, work, env)
    finally:
        edited.restore()

    log("\n## Results\n")
    sample_note = (f"; sample rows: {len(sample)} files, {sum(f.lines for f in sample):,} lines, compared with "
                   "ruff default on the same sample" if any(s.on_sample for s in scenarios) else "")
    log(f"Corpus: {len(files)} files, {corpus_lines:,} lines{sample_note}. {runs} run(s) each; "
        f"cores: {os.cpu_count()}.\n")
    log(format_table(scenarios, "largest process"))
    failures = format_failures(scenarios)
    if failures:
        log(failures)
    extrapolation = format_extrapolation(scenarios, corpus_lines)
    if extrapolation:
        log(extrapolation)
    targets = evaluate_targets(scenarios)
    log("\n## Targets\n")
    log(format_targets(targets))

    profile = None
    if not args.no_profile:
        if profile_python is None:
            log("\nprofile skipped: no python next to the --lintloop command to run lintloop.profiling with")
        else:
            profile = run_profile(profile_python, corpus, work, env)

    failed = [s.key for s in scenarios if s.failure]
    elapsed = time.perf_counter() - started
    log(f"\nbenchmark took {elapsed:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({
            "host": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "python": sys.version},
            "lintloop": {"command": lintloop, "version": lintloop_version, "commit": commit, "dirty": dirty},
            "peers": {"versions": peers.versions, "problems": peers.problems, "freeze": peers.freeze},
            "rss_method": rss_note, "runs": runs,
            "corpus": {"root": str(corpus), "files": len(files), "lines": corpus_lines, "packages": corpus_report},
            "sample": {"files": len(sample), "lines": sum(f.lines for f in sample),
                       "paths": [f.relative for f in sample]},
            "scenarios": [{"key": s.key, "label": s.label, "argv": s.argv if not s.on_sample else s.argv[:8],
                           "files": s.files, "lines": s.lines, "unavailable": s.unavailable, "failure": s.failure,
                           "stderr": s.stderr_notes,
                           "runs": [{"seconds": r.seconds, "peak_rss_kib": r.rss_kib, "exit_code": r.exit_code}
                                    for r in s.runs],
                           "median_seconds": s.median(), "peak_rss_mib": s.peak_rss_mib()} for s in scenarios],
            "targets": targets, "profile": profile, "elapsed_seconds": elapsed,
        }, indent=2) + "\n")
        log(f"raw numbers: {args.json}")
    # A crashed scenario makes the benchmark fail; a missed target does not (timings depend on the machine).
    if failed:
        log(f"failed scenarios: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as error:
        print(f"bench/run.py: error: {error}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("bench/run.py: interrupted", file=sys.stderr)
        sys.exit(130)
