"""LL003 unused-suppression: the rule, its documentation and its examples."""

from __future__ import annotations

from lintloop.rule import Rule


class UnusedSuppressionRule(Rule):
    code = "LL003"
    name = "unused-suppression"
    description = "a suppression comment that suppresses nothing"
    kind = "hygiene"
    default_on = False
    summary = "(opt-in) A `# lintloop: ignore` comment that suppressed no finding."
    why = "Stale suppressions hide future findings on that line."
    remedy = "Delete the comment."
