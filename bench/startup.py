"""Start-up latency: what a user waits for on the smallest invocations, side by side with `python -c pass`.

    python3 bench/startup.py [--runs 10] [--lintloop PATH] [--ruff PATH] [--json FILE]

Each row is the median (and min–max) wall-clock time of `--runs` whole processes: `python -c pass`
with the interpreter lintloop runs on (the floor no Python tool goes below), `lintloop --version`,
`lintloop check one.py` on a one-file project (warm: its result cached by an untimed first run;
cold: `--no-cache`, answered by the warm engine the first run started, as on a user's machine, and
again with it switched off: the first run, or CI), `lintloop rule LL101`, and the time from starting
`lintloop server` to its reply to `initialize` (what an editor waits for before it can show anything). ruff's `--version` and
`check` are timed beside them when ruff is found. The one file is `examples/train_torch.py`.
Needs only the standard library.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
SAMPLE = REPOSITORY / "examples" / "train_torch.py"
# The targets of the first-contact issue, in seconds (a row without one is context).
TARGETS = {"lintloop --version": 0.08, "lintloop check one.py (warm)": 0.08, "lintloop check one.py (cold)": 0.25,
           "lintloop server: initialize": 0.15}
COLD_WITHOUT_WARM_ENGINE = "lintloop check one.py (cold, no warm engine)"


# As an installed tool runs: its modules byte-compiled (pip compiles a wheel's at install; a source
# checkout's are compiled by the untimed first run). PYTHONDONTWRITEBYTECODE would time the compiler.
# The warm engine on (as on a user's machine, whatever CI says), its own for this benchmark: in a folder
# of its own (short: a socket's path must be), removed at the end (the engine then ends when idle).
RUNTIME = tempfile.mkdtemp(prefix="ll-")
ENVIRONMENT = {**{name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"},
               "XDG_RUNTIME_DIR": RUNTIME, "LINTLOOP_WARM_ENGINE": "1", "LINTLOOP_WARM_ENGINE_IDLE": "30"}
WITHOUT_WARM_ENGINE = {**ENVIRONMENT, "LINTLOOP_WARM_ENGINE": "0"}


def _timed(command: list[str], cwd: Path, environment: dict[str, str] = ENVIRONMENT) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                   env=environment)
    return time.perf_counter() - started


def _end_warm_engines() -> None:
    """Remove the benchmark's folder of warm engines: unreachable from then on, each ends when idle
    (`LINTLOOP_WARM_ENGINE_IDLE`)."""
    shutil.rmtree(RUNTIME, ignore_errors=True)


def _initialize_reply(command: list[str], cwd: Path) -> float:
    """Seconds from starting the server to the end of its reply to `initialize`; then shut it down."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                       "params": {"processId": os.getpid(), "rootUri": cwd.as_uri(), "capabilities": {}}}).encode()
    started = time.perf_counter()
    server = subprocess.Popen(command, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, env=ENVIRONMENT)
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    server.stdin.flush()
    length = 0
    while (line := server.stdout.readline().strip()):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    reply = server.stdout.read(length)
    elapsed = time.perf_counter() - started
    if b'"capabilities"' not in reply:
        raise RuntimeError(f"no initialize reply: {reply[:200]!r}")
    for message in ({"jsonrpc": "2.0", "id": 2, "method": "shutdown"}, {"jsonrpc": "2.0", "method": "exit"}):
        data = json.dumps(message).encode()
        server.stdin.write(b"Content-Length: %d\r\n\r\n" % len(data) + data)
    server.stdin.close()
    server.wait(timeout=30)
    return elapsed


def _row(name: str, samples: list[float], floor: float | None) -> dict[str, object]:
    median = statistics.median(samples)
    return {"scenario": name, "median_s": round(median, 4), "min_s": round(min(samples), 4),
            "max_s": round(max(samples), 4), "minus_python_s": None if floor is None else round(median - floor, 4),
            "target_s": TARGETS.get(name)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--lintloop", default=shutil.which("lintloop"), help="the lintloop executable to time")
    parser.add_argument("--ruff", default=shutil.which("ruff"), help="a ruff executable to time beside it")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = parser.parse_args(argv)
    if not args.lintloop:
        parser.error("no lintloop on PATH: pass --lintloop")
    try:
        return _measure(args)
    finally:
        _end_warm_engines()


def _measure(args: argparse.Namespace) -> int:
    # The commands run in a temporary project: a relative executable is resolved here first.
    lintloop = [os.path.abspath(args.lintloop)]
    ruff = os.path.abspath(args.ruff) if args.ruff else None
    # The interpreter of lintloop's console script: its `python -c pass` is the floor.
    shebang = Path(lintloop[0]).read_bytes().split(b"\n", 1)[0]
    python = shebang[2:].decode().strip() if shebang.startswith(b"#!") else sys.executable
    with tempfile.TemporaryDirectory(prefix="lintloop-startup-") as directory:
        project = Path(directory)
        (project / "lintloop.toml").write_text("")  # the default rules, whatever encloses the folder
        shutil.copy(SAMPLE, project / "one.py")
        scenarios: list[tuple[str, list[str] | None]] = [
            ("python -c pass", [python, "-c", "pass"]),
            ("lintloop --version", [*lintloop, "--version"]),
            ("lintloop check one.py (warm)", [*lintloop, "check", "one.py"]),
            ("lintloop check one.py (cold)", [*lintloop, "check", "--no-cache", "one.py"]),
            (COLD_WITHOUT_WARM_ENGINE, [*lintloop, "check", "--no-cache", "one.py"]),
            ("lintloop rule LL101", [*lintloop, "rule", "LL101"]),
            ("lintloop server: initialize", None),
        ]
        if ruff:
            scenarios += [("ruff --version", [ruff, "--version"]),
                          ("ruff check one.py", [ruff, "check", "--no-cache", "--isolated", "one.py"])]
        for warm_up in ([*lintloop, "check", "one.py"], [*lintloop, "rule", "LL101"]):
            _timed(warm_up, project)  # fills the cache, compiles the modules, warms the file system
        # The first check started the warm engine: the cold rows start once it listens.
        deadline = time.monotonic() + 30
        while not any(Path(RUNTIME, "lintloop").glob("*.sock")) and time.monotonic() < deadline:
            time.sleep(0.05)
        _initialize_reply([*lintloop, "server"], project)
        rows = []
        floor = None
        for name, command in scenarios:
            if command is None:
                samples = [_initialize_reply([*lintloop, "server"], project) for _ in range(args.runs)]
            else:
                environment = WITHOUT_WARM_ENGINE if name == COLD_WITHOUT_WARM_ENGINE else ENVIRONMENT
                samples = [_timed(command, project, environment) for _ in range(args.runs)]
            rows.append(_row(name, samples, floor))
            if floor is None:
                floor = statistics.median(samples)
    print(f"{'scenario':44s} {'median ms':>10s} {'min–max ms':>14s} {'− python ms':>12s} {'target ms':>10s}")
    for row in rows:
        over = row["minus_python_s"]
        target = row["target_s"]
        print(f"{row['scenario']:44s} {row['median_s'] * 1000:10.0f} "
              f"{row['min_s'] * 1000:6.0f}–{row['max_s'] * 1000:<7.0f} "
              f"{'' if over is None else f'{over * 1000:12.0f}':>12s} "
              f"{'' if target is None else f'{target * 1000:.0f}':>10s}"
              f"{'  MISSED' if target is not None and row['median_s'] > target else ''}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
