"""What each rule's flagged example must produce, written in the example itself, as ruff's snapshots are:
`Example.expect` holds every finding's range, its fix's safety and its message; `Example.fix_diff` what the
rule's fixes (unsafe ones too) make of the example, where it has a fix: the changed lines, as a diff.

    python tests/example_expectations.py [CODE ...]

writes what the rules produce now into their examples (every rule, or those named); review the
change to rules/ as a snapshot's, then commit it. tests/test_rule_examples.py compares, and shows a
diff where an expectation and the rule part.
"""

from __future__ import annotations

import difflib
import importlib
import sys
import textwrap
from pathlib import Path

import libcst as cst

from lintloop.finding import Finding
from lintloop.linter import fix_text, lint_text
from lintloop.rule import Example, Rule, RuleSet

# A message is wrapped to this width in an expectation, its later lines indented: a rule file stays readable.
WIDTH = 104
_CONTINUED = "    "


def example_source(example: Example) -> str:
    """The program an example stands for: its text dedented, without the leading blank line."""
    return textwrap.dedent(example.code).lstrip()


def findings(rule: type[Rule], source: str) -> list[Finding]:
    result = lint_text("example.py", source, RuleSet([rule]))
    assert not result.errors, result.errors
    return [f for f in result.findings if f.code == rule.code]


def rendered(found: list[Finding]) -> str:
    """The findings as an expectation states them: `line:column-end_line:end_column [safe fix] headline`,
    then its `help:` and `note:` lines."""
    lines = []
    for finding in found:
        head = f"{finding.line}:{finding.column}-{finding.end_line}:{finding.end_column}"
        if finding.fix is not None:
            head += f" [{finding.fix.applicability} fix]"
        for text, indent in ((f"{head} {finding.message}", ""), (finding.help and f"help: {finding.help}", _CONTINUED),
                             (finding.note and f"note: {finding.note}", _CONTINUED)):
            if text:
                lines += textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent + _CONTINUED,
                                       break_long_words=False, break_on_hyphens=False)
    return "\n".join(lines)


def fix_diff(rule: type[Rule], source: str, found: list[Finding]) -> str | None:
    """What the rule's fixes make of `source`, as a diff without context (`@@ -6 +6 @@`, `-` and `+`
    lines); None where no finding has a fix."""
    if not any(f.fix is not None for f in found):
        return None
    fixed = fix_text("example.py", source, RuleSet([rule]), unsafe=True).text
    lines = difflib.unified_diff(source.splitlines(), fixed.splitlines(), n=0, lineterm="")
    return "\n".join(line for line in lines if not line.startswith(("---", "+++")))


def expected(example: Example) -> tuple[str | None, str | None]:
    """(`expect`, `fix_diff`) as written in the example, in the form `rendered` and `fix_diff` give."""
    return tuple(text.strip("\n") if text is not None else None  # type: ignore[return-value]
                 for text in (example.expect, example.fix_diff))


def difference(label: str, want: str | None, got: str | None) -> str:
    """A unified diff of an expectation and what the rule gives ("" when they agree)."""
    if want == got:
        return ""
    lines = difflib.unified_diff((want or "").splitlines(), (got or "").splitlines(),
                                 f"{label} (the example)", f"{label} (the rule now)", lineterm="")
    return "\n".join(lines) + ("\n(run `python tests/example_expectations.py CODE` to take the rule's)"
                               if want is not None or got is not None else "")


# ----- writing the expectations into the rule modules -----------------------------------------------


def _literal(text: str) -> cst.SimpleString:
    """A triple-quoted literal of `text` after a line break, as the examples' code is written."""
    if any(not (c.isprintable() or c == "\n") for c in text):
        return cst.SimpleString(repr("\n" + text))
    escaped = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    if escaped.endswith('"'):
        escaped = escaped[:-1] + '\\"'
    return cst.SimpleString(f'"""\n{escaped}"""')


def _keyword(name: str, text: str) -> cst.Arg:
    return cst.Arg(keyword=cst.Name(name), value=_literal(text),
                   equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                         whitespace_after=cst.SimpleWhitespace("")))


class _Expectations(cst.CSTTransformer):
    """Sets `expect=` and `fix_diff=` on each `Example(...)` of a rule class's `flagged` tuple."""

    def __init__(self, rules: dict[str, type[Rule]]) -> None:
        self.rules = rules
        self.rule: type[Rule] | None = None
        self.place = -1

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.rule = self.rules.get(node.name.value)

    def visit_Assign(self, node: cst.Assign) -> None:
        target = node.targets[0].target
        self.place = 0 if isinstance(target, cst.Name) and target.value == "flagged" else -1

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        self.place = -1
        return updated

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if self.rule is None or self.place < 0 or not (isinstance(original.func, cst.Name)
                                                        and original.func.value == "Example"):
            return updated
        example = self.rule.flagged[self.place]
        self.place += 1
        source = example_source(example)
        found = findings(self.rule, source)
        args = [a for a in updated.args if a.keyword is None or a.keyword.value not in ("expect", "fix_diff")]
        args.append(_keyword("expect", rendered(found) + "\n"))
        diff = fix_diff(self.rule, source, found)
        if diff is not None:
            args.append(_keyword("fix_diff", diff + "\n"))
        spaced = [a.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
                  for a in args[:-1]] + [args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)]
        return updated.with_changes(args=spaced)


def write_expectations(rules: list[type[Rule]]) -> list[Path]:
    """Rewrite the modules of `rules` with what each flagged example gives now; the files changed."""
    changed = []
    for module_name in sorted({rule.__module__ for rule in rules}):
        module = importlib.import_module(module_name)
        path = Path(module.__file__)
        here = {rule.__name__: rule for rule in rules if rule.__module__ == module_name}
        before = path.read_text(encoding="utf-8")
        after = cst.parse_module(before).visit(_Expectations(here)).code
        if after != before:
            path.write_text(after, encoding="utf-8")
            changed.append(path)
    return changed


def main(argv: list[str]) -> int:
    from lintloop.rules import ALL_RULES

    chosen = [r for r in ALL_RULES if r.has_visitor() and (not argv or r.code in argv)]
    unknown = set(argv) - {r.code for r in chosen}
    if unknown:
        print(f"no rule with examples: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    for path in write_expectations(chosen):
        print(f"updated {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
