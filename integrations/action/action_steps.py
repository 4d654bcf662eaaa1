"""The run steps of lintloop's GitHub Action (`action.yml` at the repository root).

`install`: lintloop into a fresh virtual environment under $RUNNER_TEMP, so that the job's own
Python environment stays as it was; output `lintloop`, the path of its console script.

`check`: `lintloop check --format github` (the annotations), then the SARIF report from a second
run (lintloop writes one format per run; the result cache makes the second run nearly free);
outputs `exit-code` and `sarif-file`, a summary of the findings for the job's page, and exits with
lintloop's status.

The inputs arrive in the environment (the steps' `env:`), never as text pasted into a shell
command. Standard library only: this runs under whatever Python the runner has.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from pathlib import Path

# A version as pip spells it (`0.1.0`, `1.0rc1`, `0.2.*`), or as a release tag does (`v0.1.0`).
_VERSION = re.compile(r"v?(\d[0-9A-Za-z.+!*-]*)")
# Comma-separated version specifiers (`>=0.1`, `~=0.1.0`, `>=0.1, <0.3`): an operator first, then
# nothing that could make the requirement more than a version range (no `;` marker, `@` URL, newline).
_SPECIFIERS = re.compile(r"[<>=!~][0-9A-Za-z.+!*<>=~, -]*")
# `::error file=...,title=LL301::message [rule-name]`: properties have `:` and `,` escaped.
_ANNOTATION = re.compile(rb"::(?:error|warning) [^:]*\btitle=([^,:]+)::.*\[([\w-]+)\]\r?\n?")


def requirement(version: str, action_path: str) -> str:
    """What pip installs for the action's `version` input."""
    version = version.strip()
    if not version:
        return action_path  # the action's own checkout: the ref that pins the action pins lintloop
    if version == "latest":
        return "lintloop"
    if bare := _VERSION.fullmatch(version):
        return f"lintloop=={bare[1]}"
    if _SPECIFIERS.fullmatch(version):
        return f"lintloop{version}"
    raise ValueError(f"version: {version!r} is none of: empty (the action's own lintloop), `latest`, "
                     "a version (`0.1.0`), a version specifier (`>=0.1,<0.3`)")


def _words(name: str, value: str) -> list[str]:
    try:
        return shlex.split(value)
    except ValueError as error:  # "No closing quotation"
        raise ValueError(f"{name}: {error}: {value!r}") from None


def _boolean(name: str, value: str) -> bool:
    if value.strip().lower() not in ("true", "false"):
        raise ValueError(f"{name}: {value!r} is neither `true` nor `false`")
    return value.strip().lower() == "true"


def _error(message: str) -> None:
    """An error annotation (the job's page shows it), escaped as a workflow command's message."""
    escaped = message.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    print(f"::error title=lintloop action::{escaped}", flush=True)


def _set_output(name: str, value: str) -> None:
    # The delimited form, with a delimiter no value contains: a value cannot inject another output.
    delimiter = f"lintloop-{uuid.uuid4().hex}"
    with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as outputs:
        outputs.write(f"{name}<<{delimiter}\n{value}\n{delimiter}\n")


def install() -> int:
    try:
        wanted = requirement(os.environ.get("LINTLOOP_VERSION", ""), os.environ["GITHUB_ACTION_PATH"])
    except ValueError as error:
        _error(str(error))
        return 2
    venv = Path(tempfile.mkdtemp(prefix="lintloop-venv-", dir=os.environ.get("RUNNER_TEMP")))
    scripts = venv / ("Scripts" if os.name == "nt" else "bin")
    print(f"::group::Install {wanted} into {venv}", flush=True)
    status = (subprocess.run([sys.executable, "-m", "venv", str(venv)], check=False).returncode
              or subprocess.run([str(scripts / "python"), "-m", "pip", "install", "--disable-pip-version-check",
                                 "--progress-bar", "off", wanted], check=False).returncode)
    print("::endgroup::", flush=True)
    if status:
        _error(f"installing {wanted} failed (exit {status}); the log of this step says why")
        return status
    lintloop = scripts / "lintloop"
    _set_output("lintloop", str(lintloop))
    return subprocess.run([str(lintloop), "--version"], check=False).returncode


def _annotate(argv: list[str]) -> tuple[int, Counter[tuple[str, str]], str]:
    """Run lintloop with `--format github`, its output passed on to the log as it comes: its exit
    status, the count of annotations per (code, name), and the last other line (an error's message)."""
    counts: Counter[tuple[str, str]] = Counter()
    last_line = b""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as process:
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.buffer.write(line)
            if annotation := _ANNOTATION.fullmatch(line):
                counts[annotation[1].decode(), annotation[2].decode()] += 1
            elif line.strip():
                last_line = line.strip()
    sys.stdout.flush()
    return process.returncode, counts, last_line.decode(errors="replace")


def _finish(status: int, counts: Counter[tuple[str, str]], problem: str = "") -> int:
    """Output `exit-code` and the job summary (with `problem`, why lintloop could not check the
    code, also as an error annotation); `status` is the step's exit status."""
    if problem:
        _error(problem)
        text = f"lintloop could not check the code:\n\n    {problem}\n"
    elif not counts:
        text = "No findings.\n"
    else:
        rows = "".join(f"| {code} | `{name}` | {count} |\n" for (code, name), count in sorted(counts.items()))
        total = sum(counts.values())
        text = (f"{total} finding{'' if total == 1 else 's'} (`lintloop rule CODE` explains each rule):\n\n"
                f"| code | rule | findings |\n|---|---|---|\n{rows}")
    with open(os.environ["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as summary:
        summary.write(f"### lintloop\n\n{text}\n")
    _set_output("exit-code", str(status))
    return status


def check() -> int:
    try:
        paths = _words("paths", os.environ.get("LINTLOOP_PATHS", ""))
        args = _words("args", os.environ.get("LINTLOOP_ARGS", ""))
        sarif = _boolean("sarif", os.environ.get("LINTLOOP_SARIF", "true"))
    except ValueError as error:
        return _finish(2, Counter(), str(error))
    lintloop = os.environ["LINTLOOP"]
    # `--` ends the options: a path is never read as one.
    status, counts, last_line = _annotate([lintloop, "check", *args, "--format", "github", "--", *paths])
    if status not in (0, 1):  # 2: a usage, configuration or I/O error, which the SARIF run would repeat
        return _finish(status, counts, f"lintloop check exited with {status}: {last_line}")
    if sarif:
        report = Path(tempfile.mkdtemp(prefix="lintloop-sarif-", dir=os.environ.get("RUNNER_TEMP"))) / "lintloop.sarif"
        written = subprocess.run([lintloop, "check", *args, "--format", "sarif", "--output", str(report),
                                  "--exit-zero", "--", *paths], check=False).returncode
        if written:
            return _finish(written, counts, f"writing the SARIF report failed (exit {written}): see the log")
        _set_output("sarif-file", str(report))
    return _finish(status, counts)


if __name__ == "__main__":
    sys.exit({"install": install, "check": check}[sys.argv[1]]())
