"""LL0xx: findings about the input and the suppression comments, reported by the engine itself."""

from lintloop.rule import Rule


class SyntaxErrorRule(Rule):
    code = "LL001"
    name = "syntax-error"
    kind = "bug"
    summary = "The file could not be read or parsed (syntax error, undecodable bytes, binary file); other files are still linted."
    why = "No rule can check a file that does not parse; the location points at the parser's error."
    remedy = "Fix the syntax error or the encoding, or exclude the file."


class InvalidSuppressionRule(Rule):
    code = "LL002"
    name = "invalid-suppression"
    kind = "hygiene"
    summary = "A `# lintloop: ignore[...]` or `# noqa:` comment names a code or rule name that does not exist."
    why = "A misspelt suppression suppresses nothing, so the finding it was meant to hide is still reported — or, worse, a later real finding is not hidden where the author believes it is."
    remedy = "Use a code or name listed by `lintloop rules`."


class UnusedSuppressionRule(Rule):
    code = "LL003"
    name = "unused-suppression"
    kind = "hygiene"
    default_on = False
    summary = "(opt-in) A `# lintloop: ignore` comment that suppressed no finding."
    why = "Stale suppressions hide future findings on that line."
    remedy = "Delete the comment."
