"""Colour on the terminal: `--color auto|always|never`, `NO_COLOR` and `FORCE_COLOR`.

`--color` decides when given as `always` or `never`. With `auto` (the default), output into a
file or a pipe is plain; on a terminal `NO_COLOR` (https://no-color.org: set and not empty)
turns colour off and `FORCE_COLOR` turns it on for output that is not a terminal (CI logs),
`NO_COLOR` winning when both are set. The choice is the command line's, made once per process.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import IO, TYPE_CHECKING, Callable

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


# SGR codes of the styles a report uses.
_SGR = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}


def painter(stream: IO[str], is_file: bool = False) -> Callable[[str, str], str]:
    """`paint(text, "bold red")`: `text` in those styles where output to `stream` is coloured, else as it
    is. The check report is written with it rather than rich (~20 ms to import, more than a cached
    check of one file takes otherwise)."""
    if not color_enabled(stream, is_file):
        return lambda text, style: text

    def paint(text: str, style: str) -> str:
        return f"\x1b[{';'.join(_SGR[name] for name in style.split())}m{text}\x1b[0m"

    return paint


def console(stream: IO[str], is_file: bool = False) -> Console:
    """A rich console for a report on `stream`, coloured or plain as chosen; never wrapped."""
    from rich.console import Console  # ~20 ms: only for a command that prints a report

    colour = color_enabled(stream, is_file)
    # rich reads NO_COLOR / FORCE_COLOR itself; they are decided above, so its own reading is overridden.
    return Console(file=stream, force_terminal=colour, no_color=not colour, color_system="auto" if colour else None,
                   highlight=False, soft_wrap=True)


# What a terminal would act on rather than show: C0 controls but tab (ESC starts the sequences that set a
# window's title or clear the screen; a newline would split a one-line report), DEL, C1 controls (U+009B
# is CSI to some terminals), the bidirectional controls that make text read other than it runs
# ("Trojan Source"), and lone surrogates (a file name's undecodable byte, or text no encoding can write).
_BEYOND_C0 = "\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
UNPRINTABLE = re.compile(f"[\x00-\x08\x0a-\x1f{_BEYOND_C0}]")
UNPRINTABLE_BEYOND_C0 = re.compile(f"[{_BEYOND_C0}]")  # what JSON text may hold unescaped (json escapes C0)


def printable(text: str) -> str:
    """`text` as it may be printed: each UNPRINTABLE character written as an escape (`\\x1b`, `\\u202e`;
    a file name's undecodable byte, which Python holds as a surrogate, as the byte: `\\xff`)."""
    return UNPRINTABLE.sub(_escape, text) if UNPRINTABLE.search(text) else text


def printable_lines(text: str) -> str:
    """`printable`, line by line: the line breaks (\\n, \\r\\n) stay."""
    if not UNPRINTABLE.search(text):
        return text
    return "".join(printable(body) + end for body, end in _LINE.findall(text))


_LINE = re.compile(r"([^\n]*?)(\r?\n|$)")


def _escape(match: re.Match[str]) -> str:
    code = ord(match[0])
    if 0xDC80 <= code <= 0xDCFF:  # os.fsdecode's stand-in for an undecodable byte
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def add_color_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--color", choices=COLOR_CHOICES, default="auto",
                        help="colour the report: auto (on a terminal, unless NO_COLOR is set; FORCE_COLOR forces it), "
                             "always, never (default: auto)")
