"""LL004 not-analysed: the rule, its documentation and its examples."""

from __future__ import annotations

from lintloop.rule import Rule


class NotAnalysedRule(Rule):
    code = "LL004"
    name = "not-analysed"
    description = "a file whose analysis ran out of time or memory, or crashed"
    kind = "bug"
    summary = ("The file's analysis was stopped or crashed (over the `file-timeout` or `file-memory-limit`, or a "
               "crash of the parser on a pathological input): no rule checked it; the other files are unaffected.")
    why = ("Each file is analysed in a worker process within a time and memory bound, so that one pathological file "
           "(generated code, a huge data literal, thousands of nested parentheses) cannot stall or crash a whole run. "
           "When a file's analysis goes over a bound or dies, that file alone is reported, with the cause, and every "
           "other file's findings are still printed; `fix` leaves such a file unchanged.")
    remedy = ("Raise `file-timeout` (seconds, default 120) or `file-memory-limit` (MiB, default 4096) in `[tool.lintloop]` "
              "or on the command line (`--file-timeout`, `--file-memory-limit`; 0 means no bound), or exclude the file.")
