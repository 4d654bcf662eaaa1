"""LL002 invalid-suppression: the rule, its documentation and its examples."""

from __future__ import annotations

from lintloop.rule import Rule


class InvalidSuppressionRule(Rule):
    code = "LL002"
    name = "invalid-suppression"
    description = "a suppression comment naming an unknown rule"
    kind = "hygiene"
    summary = "A `# lintloop: ignore[...]` or `# noqa:` comment names a code or rule name that does not exist."
    why = "A misspelt suppression suppresses nothing, so the finding it was meant to hide is still reported — or, worse, a later real finding is not hidden where the author believes it is."
    remedy = "Use a code or name listed by `lintloop rules`."
