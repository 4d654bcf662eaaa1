"""A finding is read in one glance: a headline of at most 100 characters (what, and the code it is
about), then `help:` (the remedy) and, where it says more, `note:` (why it matters here, how much)."""

from __future__ import annotations

import pytest

from example_expectations import example_source, findings
from lintloop.rule import DESCRIPTION_LIMIT, HEADLINE_LIMIT
from lintloop.rules import ALL_RULES

VISITING_RULES = [rule for rule in ALL_RULES if rule.has_visitor()]


@pytest.mark.parametrize("rule", VISITING_RULES, ids=lambda rule: rule.code)
def test_every_finding_of_the_examples_has_a_short_headline_and_a_remedy(rule):
    found = [finding for example in rule.flagged for finding in findings(rule, example_source(example))]
    assert found, f"{rule.code}: its flagged examples gave no finding"
    for finding in found:
        assert len(finding.message) <= HEADLINE_LIMIT, f"{rule.code} headline of {len(finding.message)}: {finding.message}"
        assert "\n" not in finding.message and finding.message == finding.message.strip()
        assert not finding.message.endswith("."), finding.message
        # The remedy is under the headline, not at its end.
        assert "; use " not in finding.message and "; drop " not in finding.message, finding.message
        assert finding.help, f"{rule.code}: no help for {finding.message}"
        assert len(finding.help) <= 2 * HEADLINE_LIMIT, f"{rule.code} help of {len(finding.help)}: {finding.help}"


def test_the_longest_headline_of_any_rule_fits():
    longest = max((finding.message for rule in VISITING_RULES for example in rule.flagged
                   for finding in findings(rule, example_source(example))), key=len)
    assert len(longest) <= HEADLINE_LIMIT, longest


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda rule: rule.code)
def test_every_rule_has_a_one_line_description(rule):
    assert 0 < len(rule.description) <= DESCRIPTION_LIMIT, rule.description
    assert rule.description[0].islower() or rule.description[0] == "`", rule.description
    assert not rule.description.endswith(".") and "\n" not in rule.description


def test_rules_lists_each_rule_with_its_description(run_cli):
    code, out, _ = run_cli("rules")
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split()[-1] == "description"
    for rule in ALL_RULES:
        [row] = [row for row in rows if row.startswith(rule.code + " ")]
        assert row.endswith(rule.description)
