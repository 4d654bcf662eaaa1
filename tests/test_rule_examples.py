"""Every rule's own flagged / not-flagged examples, run as tests."""

import pytest

from example_expectations import difference, example_source, expected, findings, fix_diff, rendered
from lintloop.rules import ALL_RULES

VISITOR_RULES = [r for r in ALL_RULES if r.has_visitor()]


@pytest.mark.parametrize("rule", VISITOR_RULES, ids=lambda r: r.code)
def test_every_rule_has_enough_examples(rule):
    assert len(rule.flagged) >= 3 and len(rule.not_flagged) >= 3


@pytest.mark.parametrize(
    "rule,index", [(r, i) for r in VISITOR_RULES for i in range(len(r.flagged))],
    ids=lambda v: v.code if hasattr(v, "code") else str(v))
def test_flagged_example(rule, index):
    """Each finding where the example says, with its message and fix's safety; and what its fixes change."""
    example = rule.flagged[index]
    source = example_source(example)
    found = findings(rule, source)
    assert found and all(f.name == rule.name for f in found)
    want_findings, want_fix = expected(example)
    assert want_findings is not None, "a flagged example states what it gives: run tests/example_expectations.py"
    diff = difference("findings", want_findings, rendered(found)) + difference(
        "fix", want_fix, fix_diff(rule, source, found))
    assert not diff, "\n" + diff


@pytest.mark.parametrize(
    "rule,index", [(r, i) for r in VISITOR_RULES for i in range(len(r.not_flagged))],
    ids=lambda v: v.code if hasattr(v, "code") else str(v))
def test_not_flagged_example(rule, index):
    example = rule.not_flagged[index]
    assert example.expect is None and example.fix_diff is None
    found = findings(rule, example_source(example))
    assert found == [], [f"{f.line}:{f.column} {f.message}" for f in found]
