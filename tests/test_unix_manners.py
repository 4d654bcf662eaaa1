"""How the command behaves as a Unix program: a closed pipe, Ctrl-C, and colour choices."""

import os
import pty
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FIXTURES

ANSI = "\x1b["
LINTLOOP = [sys.executable, "-m", "lintloop"]


@pytest.fixture(scope="module")
def many_findings(tmp_path_factory) -> Path:
    """A tree whose report is far larger than a pipe's buffer (64 KiB) and takes seconds to lint."""
    root = tmp_path_factory.mktemp("many")
    text = (FIXTURES / "LL301_bad.py").read_text()
    for package in range(12):
        folder = root / f"pkg{package}"
        folder.mkdir()
        for module in range(40):
            (folder / f"train_{module}.py").write_text(text)
    return root


def _lintloop(*args: str, env: dict[str, str] | None = None, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([*LINTLOOP, *args], env={**os.environ, **(env or {})}, **kwargs)


def test_a_reader_that_goes_away_ends_the_run_quietly(many_findings):
    proc = _lintloop("check", "--no-cache", "--jobs", "1", str(many_findings),
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()  # what `| head -1` reads, then it exits
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 1
    assert first.strip() and err == ""  # no "internal error: BrokenPipeError", no "Exception ignored"


def test_a_closed_pipe_in_the_json_format_is_quiet_too(many_findings):
    proc = _lintloop("check", "--no-cache", "--format", "json", str(many_findings / "pkg0"),
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(10)
    proc.stdout.close()
    assert proc.wait(timeout=120) == 1 and proc.stderr.read() == b""


def _interrupt(args: list[str], when: str) -> tuple[int, str, float]:
    """Run lintloop in a process group of its own and send Ctrl-C's signal to the whole group (as a
    terminal does) `when` it is "importing" the engine (just after `lintloop.entry` is imported:
    `-X importtime` tells when, whatever the machine's load) or "linting" (1.5 s in); return (exit
    code, stderr without the import timings, seconds it took to end)."""
    proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "lintloop", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    if when == "importing":
        for line in proc.stderr:
            if line.rstrip().endswith(b"| lintloop.entry"):
                break
    else:
        time.sleep(1.5)
    sent = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    took = time.monotonic() - sent
    # No worker outlives the run.
    leftover = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout
    assert leftover == "", leftover
    output = "\n".join(line for line in err.decode().splitlines() if not line.startswith("import time:"))
    return proc.returncode, output, took


@pytest.mark.parametrize("when", ["importing", "linting"])
def test_ctrl_c_ends_with_130_and_no_traceback(many_findings, when):
    if shutil.which("pgrep") is None:
        pytest.skip("pgrep (procps) is not installed")
    code, err, took = _interrupt(["check", "--no-cache", "--select", "ALL", "--jobs", "2", str(many_findings)], when)
    assert code == 130
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert took < 5  # the workers are stopped, not left to finish the chunks handed to them


def _check_output(*args: str, env: dict[str, str] | None = None) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    done = subprocess.run([*LINTLOOP, "check", "--no-cache", *args, str(FIXTURES / "LL301_bad.py")],
                          env={**clean, **(env or {})}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    return done.stdout


@pytest.mark.parametrize(("args", "env", "coloured"), [
    ([], {}, False),  # a pipe: plain
    ([], {"FORCE_COLOR": "1"}, True),  # CI logs that render colour
    ([], {"FORCE_COLOR": "1", "NO_COLOR": "1"}, False),  # NO_COLOR wins
    ([], {"NO_COLOR": ""}, False),  # empty NO_COLOR means unset, and this is a pipe
    (["--color", "always"], {}, True),
    (["--color", "always"], {"NO_COLOR": "1"}, True),  # the command line wins over the environment
    (["--color", "never"], {"FORCE_COLOR": "1"}, False),
    (["--color", "auto"], {"FORCE_COLOR": "1"}, True),
])
def test_colour_choices_into_a_pipe(args, env, coloured):
    out = _check_output(*args, env=env)
    assert (ANSI in out) is coloured
    assert "LL301" in out


def _on_a_terminal(*args: str, env: dict[str, str]) -> str:
    """stdout of `lintloop check ARGS LL301_bad.py` run on a pseudo-terminal."""
    controller, terminal = pty.openpty()
    clean = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    proc = subprocess.Popen([*LINTLOOP, "check", "--no-cache", "--quiet", *args, str(FIXTURES / "LL301_bad.py")],
                            stdin=subprocess.DEVNULL, stdout=terminal, stderr=subprocess.DEVNULL,
                            env={**clean, "TERM": "xterm-256color", **env})
    os.close(terminal)
    chunks = []
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # EIO: the program closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(controller)
    assert proc.wait(timeout=120) == 1
    return b"".join(chunks).decode()


@pytest.mark.parametrize(("args", "env", "coloured"), [
    ([], {}, True),
    ([], {"NO_COLOR": "1"}, False),
    (["--color", "never"], {}, False),
    ([], {"TERM": "dumb"}, False),
])
def test_colour_choices_on_a_terminal(args, env, coloured):
    out = _on_a_terminal(*args, env=env)
    assert "LL301" in out
    assert (ANSI in out) is coloured


def test_the_rules_table_and_the_probe_report_take_the_colour_option(tmp_path):
    done = subprocess.run([*LINTLOOP, "rules", "--color", "always"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and ANSI in done.stdout
    done = subprocess.run([*LINTLOOP, "rules"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and ANSI not in done.stdout


def test_an_unknown_colour_choice_is_a_usage_error():
    done = subprocess.run([*LINTLOOP, "check", "--color", "sometimes", str(FIXTURES)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "--color" in done.stderr and "Traceback" not in done.stderr


def test_report_without_probe_is_a_usage_error(run_cli, tmp_path):
    code, _, err = run_cli("check", "--report", tmp_path / "pages", FIXTURES / "LL301_bad.py")
    assert code == 2 and "--report needs --probe" in err
    assert not (tmp_path / "pages").exists()


def test_the_linted_code_s_own_syntax_warnings_are_not_printed(tmp_path):
    """Python 3.12+ warns about invalid escape sequences when parsing: that is the linted file's
    business, never lintloop's output (its findings are)."""
    (tmp_path / "train.py").write_text('import re\nimport torch\npattern = re.compile("\\d+")\nvalue = 5(3)\n')
    done = subprocess.run([*LINTLOOP, "check", "--no-cache", "--select", "ALL", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == ""
