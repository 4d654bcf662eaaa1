"""LL001 syntax-error: the rule, its documentation and its examples."""

from __future__ import annotations

from lintloop.rule import Rule


class SyntaxErrorRule(Rule):
    code = "LL001"
    name = "syntax-error"
    description = "a file no supported Python can read or compile"
    kind = "bug"
    summary = ("The file could not be read, or no CPython 3.10-3.13 compiles it (syntax or compile-time error, "
               "undecodable bytes, binary file); other files are still linted.")
    why = ("No rule can check a file that does not parse, and a file CPython's compiler refuses (`return` outside "
           "a function, a duplicate argument) does not run; the location and message are CPython 3.13's, "
           "whichever Python runs lintloop. A file "
           "found in a directory is parsed only if it can hold a finding (it names a framework and has what "
           "a rule looks for, or a lintloop comment): a file without deep-learning code is counted, not "
           "parsed, so its syntax errors are left to Python and your general linter. A file named on the "
           "command line, by pre-commit or by an editor is always parsed.")
    remedy = "Fix the syntax error or the encoding, or exclude the file."
