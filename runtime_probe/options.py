"""The probe's command-line options: `lintloop probe` and `check --probe` (imported by every command's
parser, so it loads nothing the probe runs with)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from lintloop import terminal


def add_probe_options(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """Options shared by `probe` and `check --probe` (with `prefix` "probe-" on check)."""
    parser.add_argument(f"--{prefix}steps", type=int, default=None, metavar="N",
                        help="stop the program after N training steps (default: 100)")
    parser.add_argument(f"--{prefix}timeout", type=float, default=300, metavar="S",
                        help="kill the program after S seconds (default: 300)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="cpu hides GPUs; auto and cuda leave them visible (default: auto)")
    parser.add_argument("--python", metavar="PATH", help="interpreter to run the program with (needs the frameworks)")
    parser.add_argument("--memory-limit", type=int, default=8192, metavar="MB",
                        help="kill the program when its processes use more than MB (default: 8192)")


def build_probe_parser(commands: Any) -> None:
    probe = commands.add_parser("probe", help="run a script under the runtime probe (this runs your code)",
                                description="Run FILE as __main__ under the runtime probe, for a bounded number "
                                "of training steps, and report None gradients, memory growth per step, "
                                "tf.function traces, and framework errors. This executes FILE. A notebook "
                                "(.ipynb) runs as its code cells' program in its directory, magics and shell "
                                "escapes left out. Arguments after `--` are passed to it.")
    probe.add_argument("file", metavar="FILE", help="the training script (.py) or notebook (.ipynb) to run")
    probe.add_argument("--format", choices=("text", "json"), default="text",
                       help="text: the verdicts and what the program did, for a person; json: every event, "
                       "for a tool (default: text)")
    probe.add_argument("--output", metavar="FILE", help="write the report to FILE")
    probe.add_argument("--report", type=Path, metavar="DIR",
                       help="also write an HTML page of the run (memory per step, traces, gradient norms) into DIR")
    terminal.add_color_option(probe)
    add_probe_options(probe)
