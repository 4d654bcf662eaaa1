"""The rule catalog: one module per rule, in one folder per family (`rules/<family>/<rule_name>.py`).

Rules are discovered, not listed: every module of a family folder holds exactly one `Rule`
subclass, named by the rule's name (`numpy-in-gradient-tape` -> `numpy_in_gradient_tape.py`), so
adding a rule adds one file and touches no list.
"""

from __future__ import annotations

import importlib
import pkgutil

from lintloop.rule import Rule


class CatalogError(Exception):
    """A rule module that breaks the one-module-per-rule layout."""


def _discover() -> tuple[type[Rule], ...]:
    found: list[type[Rule]] = []
    for family in pkgutil.iter_modules(__path__):
        if not family.ispkg:
            continue
        package = importlib.import_module(f"{__name__}.{family.name}")
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            rules = [v for v in vars(module).values()
                     if isinstance(v, type) and issubclass(v, Rule) and v.__module__ == module.__name__]
            if len(rules) != 1 or rules[0].name.replace("-", "_") != info.name:
                raise CatalogError(f"{module.__name__} must define exactly one rule, named "
                                   f"{info.name.replace('_', '-')!r}; it defines {[r.name for r in rules]}")
            found.append(rules[0])
    return tuple(sorted(found, key=lambda rule: rule.code))


ALL_RULES: tuple[type[Rule], ...] = _discover()
BY_CODE: dict[str, type[Rule]] = {rule.code: rule for rule in ALL_RULES}
BY_NAME: dict[str, type[Rule]] = {rule.name: rule for rule in ALL_RULES}


def lookup(code_or_name: str) -> type[Rule] | None:
    return BY_CODE.get(code_or_name.upper()) or BY_NAME.get(code_or_name.lower())
