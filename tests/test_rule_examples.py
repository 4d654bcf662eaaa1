"""Every rule's own flagged / not-flagged examples, run as tests."""

import textwrap

import pytest

from lintloop.linter import lint_text
from lintloop.rule import RuleSet
from lintloop.rules import ALL_RULES

VISITOR_RULES = [r for r in ALL_RULES if r.has_visitor()]


def _findings(rule, code):
    result = lint_text("example.py", textwrap.dedent(code).lstrip(), RuleSet([rule]))
    assert not result.errors
    return [f for f in result.findings if f.code == rule.code]


@pytest.mark.parametrize("rule", VISITOR_RULES, ids=lambda r: r.code)
def test_every_rule_has_enough_examples(rule):
    assert len(rule.flagged) >= 3 and len(rule.not_flagged) >= 3


@pytest.mark.parametrize(
    "rule,index", [(r, i) for r in VISITOR_RULES for i in range(len(r.flagged))],
    ids=lambda v: v.code if hasattr(v, "code") else str(v))
def test_flagged_example(rule, index):
    example = rule.flagged[index]
    found = _findings(rule, example.code)
    assert len(found) == example.count, [f.message for f in found]
    for finding in found:
        assert finding.message and finding.name == rule.name


@pytest.mark.parametrize(
    "rule,index", [(r, i) for r in VISITOR_RULES for i in range(len(r.not_flagged))],
    ids=lambda v: v.code if hasattr(v, "code") else str(v))
def test_not_flagged_example(rule, index):
    found = _findings(rule, rule.not_flagged[index].code)
    assert found == [], [f"{f.line}:{f.column} {f.message}" for f in found]
