"""Importing this module loads the whole engine: the analyses, libcst and every rule (~0.13 s).

A process that is about to analyse files imports it once before it forks workers (lintloop.runner),
or has its fork server import it (lintloop.server.workers), so that each worker starts with the
engine loaded. Everything else imports the engine's parts lazily, where they are used.
"""

from lintloop.linter import lint_bytes
from lintloop.rules import ALL_RULES

__all__ = ["ALL_RULES", "lint_bytes"]
