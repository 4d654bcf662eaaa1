"""The progress bar of long runs: on a terminal only, after a delay, never with --quiet, on stderr."""

from __future__ import annotations

import io
import re
import time

from conftest import TORCH_LEAK
from rich.console import Console

from lintloop import progress as progress_module
from lintloop.progress import ProgressBar, progress_bar
from lintloop.runner import Job, chunk_size, run_jobs


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def plain_text(stream) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stream.getvalue())


def make_jobs(tmp_path, count=6):
    jobs = []
    for i in range(count):
        path = tmp_path / f"m{i}.py"
        path.write_text(TORCH_LEAK if i % 2 else "x = 1\n")
        jobs.append(Job(str(path), path.name, ("LL001", "LL301"), "{}", "check"))
    return jobs


def slowly(callback, seconds=0.02):
    def on_result(result):
        time.sleep(seconds)
        callback(result)
    return on_result


def test_a_long_run_on_a_terminal_shows_files_and_findings(tmp_path):
    stream = io.StringIO()
    bar = ProgressBar(6, Console(file=stream, force_terminal=True, width=100), delay=0.05)
    try:
        run_jobs(make_jobs(tmp_path), 1, on_result=slowly(bar))
        assert bar.shown
    finally:
        bar.close()
    text = plain_text(stream)
    assert "Linting" in text and "files" in text
    assert "6/6 files · 3 findings" in text


def test_a_short_run_shows_nothing(tmp_path):
    stream = io.StringIO()
    bar = ProgressBar(6, Console(file=stream, force_terminal=True), delay=30)
    run_jobs(make_jobs(tmp_path), 1, on_result=bar)
    bar.close()
    assert not bar.shown and stream.getvalue() == ""
    assert (bar.done, bar.findings) == (6, 3)


def test_no_bar_off_a_terminal_or_with_quiet():
    assert progress_bar(10, quiet=False, stream=io.StringIO()) is None
    assert progress_bar(10, quiet=True, stream=FakeTTY()) is None
    assert isinstance(progress_bar(10, quiet=False, stream=FakeTTY()), ProgressBar)


def test_cli_shows_the_bar_on_a_terminal_stderr_only(run_cli, write, tmp_path, monkeypatch):
    for i in range(3):
        write(f"m{i}.py", TORCH_LEAK)
    monkeypatch.setattr(progress_module, "DEFAULT_DELAY_S", 0.0)
    args = ["check", ".", "--format", "concise", "--no-cache", "--jobs", "1"]
    plain = run_cli(*args, cwd=tmp_path)
    assert plain[0] == 1 and "Linting" not in plain[2]  # stderr is not a terminal: no bar
    for quiet in (False, True):
        tty = FakeTTY()
        monkeypatch.setattr("sys.stderr", tty)
        code, out, _ = run_cli(*args, *(["--quiet"] if quiet else []), cwd=tmp_path)
        if quiet:
            assert tty.getvalue() == ""
        else:
            assert (code, out) == plain[:2]  # stdout untouched
            text = plain_text(tty)
            assert "Linting" in text and "3/3 files · 3 findings" in text


def test_output_order_is_the_same_with_and_without_the_callback(tmp_path):
    jobs = make_jobs(tmp_path, 24)
    seen = []
    plain = run_jobs(jobs, 2)
    streamed = run_jobs(jobs, 2, on_result=seen.append)
    serial = run_jobs(jobs, 1, on_result=seen.append)
    assert [r.display for r in plain] == [r.display for r in streamed] == [r.display for r in serial]
    assert [r.findings for r in plain] == [r.findings for r in streamed] == [r.findings for r in serial]
    assert sorted(r.display for r in seen) == sorted([r.display for r in plain] * 2)


def test_chunks_are_coarse_but_bounded():
    assert chunk_size(7000, 2) == 64 and chunk_size(7000, 16) == 27 and chunk_size(10, 4) == 1
