"""The rule catalog: one module per family (see RULES.md)."""

from __future__ import annotations

from lintloop.rule import Rule
from lintloop.rules.autodiff import NonDifferentiableBeforeLoss, NumpyInGradientTape, UnwatchedTapeSource
from lintloop.rules.compiled import PrintInTfFunction
from lintloop.rules.distribution import LossReductionUnderStrategy, VariableOutsideStrategyScope
from lintloop.rules.engine import InvalidSuppressionRule, SyntaxErrorRule, UnusedSuppressionRule
from lintloop.rules.memory import LossTensorAccumulation

ALL_RULES: tuple[type[Rule], ...] = tuple(sorted((
    SyntaxErrorRule,
    InvalidSuppressionRule,
    UnusedSuppressionRule,
    NumpyInGradientTape,
    NonDifferentiableBeforeLoss,
    UnwatchedTapeSource,
    PrintInTfFunction,
    LossTensorAccumulation,
    VariableOutsideStrategyScope,
    LossReductionUnderStrategy,
), key=lambda rule: rule.code))

BY_CODE: dict[str, type[Rule]] = {rule.code: rule for rule in ALL_RULES}
BY_NAME: dict[str, type[Rule]] = {rule.name: rule for rule in ALL_RULES}


def lookup(code_or_name: str) -> type[Rule] | None:
    return BY_CODE.get(code_or_name.upper()) or BY_NAME.get(code_or_name.lower())
