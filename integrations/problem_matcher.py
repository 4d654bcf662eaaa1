"""Build the VS Code problem matcher for `lintloop check --format concise` from the rule catalog.

A concise line (`path:line:col: CODE message [name]`) carries no severity, and severity is a
property of each rule, so the matcher is a list with one matcher per severity whose regexp
accepts exactly that severity's codes. Regenerate the shipped file after adding a rule:

    python integrations/problem_matcher.py > integrations/vscode-problem-matcher.json
"""

from __future__ import annotations

import json
import sys
from typing import Any

from lintloop.rules import ALL_RULES

# Groups: 1 path (any characters, spaces and a Windows drive included: the shortest prefix
# followed by `:line:col: CODE `), 2 line, 3 column, 4 code, 5 message, 6 the rule's name. In a
# notebook the position is `cell N:line:col` (the line in the cell): matched, the cell not captured,
# since a problem matcher has no cell to point at (the language server shows notebook diagnostics in their cells).
_LINE_PATTERN = r"^(.+?):(?:cell \d+:)?(\d+):(\d+): ({codes}) (.*) \[([a-z0-9-]+)\]$"


def problem_matchers() -> list[dict[str, Any]]:
    """One VS Code problem matcher per rule severity, each matching exactly that severity's codes."""
    by_severity: dict[str, list[str]] = {}
    for rule in ALL_RULES:
        by_severity.setdefault(rule.severity(), []).append(rule.code)
    return [{
        "owner": "lintloop",
        "source": "lintloop",
        # Paths are printed as given on the command line: relative to the workspace, or absolute.
        "fileLocation": ["autoDetect", "${workspaceFolder}"],
        "severity": severity,
        "pattern": {
            "regexp": _LINE_PATTERN.format(codes="|".join(sorted(codes))),
            "file": 1,
            "line": 2,
            "column": 3,
            "code": 4,
            "message": 5,
        },
    } for severity, codes in sorted(by_severity.items())]


def render() -> str:
    """The shipped file's text."""
    return json.dumps(problem_matchers(), indent=2) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
