"""LL001 syntax-error: the rule, its documentation and its examples."""

from __future__ import annotations

from lintloop.rule import Rule


class SyntaxErrorRule(Rule):
    code = "LL001"
    name = "syntax-error"
    kind = "bug"
    summary = "The file could not be read or parsed (syntax error, undecodable bytes, binary file); other files are still linted."
    why = ("No rule can check a file that does not parse; the location points at the parser's error. A file "
           "found in a directory is parsed only if it can hold a finding (it names a framework and has what "
           "a rule looks for, or a lintloop comment): a file without deep-learning code is counted, not "
           "parsed, so its syntax errors are left to Python and your general linter. A file named on the "
           "command line, by pre-commit or by an editor is always parsed.")
    remedy = "Fix the syntax error or the encoding, or exclude the file."
