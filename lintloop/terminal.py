"""Colour on the terminal: `--color auto|always|never`, `NO_COLOR` and `FORCE_COLOR`.

`--color` decides when given as `always` or `never`. With `auto` (the default), output into a
file or a pipe is plain; on a terminal `NO_COLOR` (https://no-color.org: set and not empty)
turns colour off and `FORCE_COLOR` turns it on for output that is not a terminal (CI logs),
`NO_COLOR` winning when both are set. The choice is the command line's, made once per process.
"""

from __future__ import annotations

import argparse
import os
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

COLOR_CHOICES = ("auto", "always", "never")
_choice = "auto"


def set_color_choice(choice: str) -> None:
    global _choice
    if choice not in COLOR_CHOICES:
        raise ValueError(f"--color must be one of {', '.join(COLOR_CHOICES)}")
    _choice = choice


def _env_set(name: str) -> bool:
    return os.environ.get(name, "") != ""


def color_enabled(stream: IO[str], is_file: bool = False) -> bool:
    """Whether output to `stream` gets colour (`is_file`: an `--output` file, never coloured by `auto`)."""
    if _choice != "auto":
        return _choice == "always"
    if _env_set("NO_COLOR") or is_file:
        return False
    if _env_set("FORCE_COLOR"):
        return True
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False


def console(stream: IO[str], is_file: bool = False) -> Console:
    """A rich console for a report on `stream`, coloured or plain as chosen; never wrapped."""
    from rich.console import Console  # ~20 ms: only for a command that prints a report

    colour = color_enabled(stream, is_file)
    # rich reads NO_COLOR / FORCE_COLOR itself; they are decided above, so its own reading is overridden.
    return Console(file=stream, force_terminal=colour, no_color=not colour, color_system="auto" if colour else None,
                   highlight=False, soft_wrap=True)


def add_color_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--color", choices=COLOR_CHOICES, default="auto",
                        help="colour the report: auto (on a terminal, unless NO_COLOR is set; FORCE_COLOR forces it), "
                             "always, never (default: auto)")
