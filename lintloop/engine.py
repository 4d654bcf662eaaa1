"""Importing this module loads the whole engine: the analyses, libcst and every rule (~0.13 s).

The language server's fork server imports it (lintloop.server.workers), so that each worker it forks
starts with the engine loaded. Everything else imports the engine's parts where they are used (a
`check` worker, when it has a file to analyse).
"""

from lintloop.linter import lint_bytes
from lintloop.rules import ALL_RULES

__all__ = ["ALL_RULES", "lint_bytes"]
