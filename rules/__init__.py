"""The rule catalog: one module per rule, in one folder per family (`rules/<family>/<rule_name>.py`).

Rules are discovered, not listed: every module of a family folder holds exactly one `Rule`
subclass, named by the rule's name (`numpy-in-gradient-tape` -> `numpy_in_gradient_tape.py`), so
adding a rule adds one file and touches no list.

The rule classes (`ALL_RULES`, `BY_CODE`, `BY_NAME`, `lookup`) are imported on first use: importing
them loads libcst and every rule module (~0.13 s), which a run served from the result cache, or
`lintloop --version`, never needs. What selecting rules needs (codes, names, defaults) is in
`lintloop.rules.index`, generated from the classes and kept equal to them by a test.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lintloop.rule import Rule

    ALL_RULES: tuple[type[Rule], ...]
    BY_CODE: dict[str, type[Rule]]
    BY_NAME: dict[str, type[Rule]]


class CatalogError(Exception):
    """A rule module that breaks the one-module-per-rule layout."""


def _discover() -> tuple[type[Rule], ...]:
    from lintloop.rule import Rule

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


def lookup(code_or_name: str) -> type[Rule] | None:
    by_code, by_name = __getattr__("BY_CODE"), __getattr__("BY_NAME")
    return by_code.get(code_or_name.upper()) or by_name.get(code_or_name.lower())


def __getattr__(name: str) -> Any:
    # PEP 562: the catalog is discovered the first time one of its tables is asked for, then kept.
    if name not in ("ALL_RULES", "BY_CODE", "BY_NAME"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if "ALL_RULES" not in globals():
        rules = _discover()
        globals().update(ALL_RULES=rules, BY_CODE={rule.code: rule for rule in rules},
                         BY_NAME={rule.name: rule for rule in rules})
    return globals()[name]
