"""Where a command's report goes: standard output, or the `--output` file, and what it takes to write it
there safely: a report that cannot be written is one line (OutputError), and a link a working tree put
in the report's place is not followed."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO

from lintloop.config import ConfigError


class OutputError(Exception):
    """The report (or a command's output) cannot be written: one line, exit 2."""


def write_report(write: Callable[[IO[str]], object], output: str | None = None, root: Path | None = None) -> None:
    """Run `write` on the `--output` file (opened by `output_target`'s rules), or on stdout; a report
    that cannot be written (no room, a closed device) is an OutputError, not a traceback."""
    where = output or "standard output"
    try:
        if output is None:
            write(sys.stdout)
            sys.stdout.flush()
            return
        assert root is not None
        fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | output_target(output, root), 0o666)
        with open(fd, "w", encoding="utf-8", errors="backslashreplace") as stream:
            write(stream)
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise OutputError(f"cannot write the report to {where}: {exc.strerror or exc}") from None


def output_target(output: str, root: Path) -> int:
    """Whether the report may be written to `output`, checked before the run and when it is opened: its
    folder exists, it is no folder, and it is no symbolic link in the project (where a cloned repository
    could have put one that leads anywhere: not followed, as `fix` follows none out). The flag to open it
    with: O_NOFOLLOW, except for a link outside the project that the user named (`/dev/stdout`)."""
    try:
        status = os.lstat(output)
    except FileNotFoundError:
        folder = os.path.dirname(os.path.abspath(output))
        if not os.path.isdir(folder):
            raise ConfigError(f"--output {output}: no such folder: {folder}") from None
        return getattr(os, "O_NOFOLLOW", 0)
    except OSError as exc:
        raise ConfigError(f"--output {output}: cannot write: {exc.strerror or exc}") from None
    if stat.S_ISDIR(status.st_mode):
        raise ConfigError(f"--output {output}: a folder, not a file")
    if stat.S_ISLNK(status.st_mode):
        folder = os.path.realpath(os.path.dirname(os.path.abspath(output)))
        if folder == str(root) or folder.startswith(str(root) + os.sep):
            raise ConfigError(f"--output {output}: a symbolic link in the project (to {os.readlink(output)}), "
                              "not followed: name the file itself")
        return 0
    return getattr(os, "O_NOFOLLOW", 0)
