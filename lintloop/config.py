"""Configuration: `[tool.lintloop]` in the nearest pyproject.toml, or lintloop.toml; rule selection."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pathspec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

from lintloop.rule import Rule, RuleSet
from lintloop.rules import ALL_RULES, lookup

DEFAULT_EXCLUDE = (".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", ".eggs", "__pycache__",
                   "build", "dist", "node_modules", "site-packages", ".mypy_cache", ".ruff_cache",
                   ".pytest_cache", ".lintloop_cache")
# Files that directories are searched for (gitignore-style patterns, as `exclude`).
DEFAULT_INCLUDE = ("*.py", "*.pyi", "*.ipynb")
_LIST_KEYS = ("select", "ignore", "extend-select", "exclude", "extend-exclude", "include", "extend-include")
KNOWN_KEYS = set(_LIST_KEYS) | {"per-file-ignores", "unsafe-fixes", "jobs", "rules"}


class ConfigError(Exception):
    """A usage or configuration error: reported in one line, exit code 2."""


@dataclass
class Settings:
    root: Path
    config_path: Path | None = None
    select: list[str] | None = None
    ignore: list[str] = field(default_factory=list)
    extend_select: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=lambda: list(DEFAULT_EXCLUDE))
    include: list[str] = field(default_factory=lambda: list(DEFAULT_INCLUDE))
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    unsafe_fixes: bool = False
    jobs: int | None = None
    rule_options: dict[str, dict[str, Any]] = field(default_factory=dict)

    def ruleset(self) -> RuleSet:
        if self.select is not None:
            enabled = _resolve_all(self.select, "select")
        else:
            enabled = {r for r in ALL_RULES if r.default_on}
        enabled |= _resolve_all(self.extend_select, "extend-select")
        enabled -= _resolve_all(self.ignore, "ignore")
        return RuleSet(sorted(enabled, key=lambda r: r.code), dict(self.rule_options))

    def ruleset_for(self, path: Path) -> RuleSet:
        """The rule set for one file: `ruleset()` less the codes its per-file-ignores switch off."""
        ruleset = self.ruleset()
        if not self.per_file_ignores:
            return ruleset
        try:
            relative = os.path.relpath(path.resolve(), self.root)
        except ValueError:  # another drive (Windows): no pattern can match
            return ruleset
        ignored = self.ignored_for(relative)
        return RuleSet([r for r in ruleset.rules if r.code not in ignored], ruleset.settings)

    def ignored_for(self, relative_path: str) -> set[str]:
        """Codes that per-file-ignores switch off for this path (relative to the config root)."""
        codes: set[str] = set()
        for pattern, selectors in self.per_file_ignores.items():
            if pathspec.GitIgnoreSpec.from_lines([pattern]).match_file(relative_path):
                codes |= {r.code for r in _resolve_all(selectors, f"per-file-ignores[{pattern!r}]")}
        return codes


def resolve_selector(selector: str) -> set[type[Rule]]:
    """A code (`LL101`), a prefix (`LL1`, `LL`), a name (`numpy-in-gradient-tape`) or `ALL`."""
    text = selector.strip()
    if text.upper() == "ALL":
        return set(ALL_RULES)
    exact = lookup(text)
    if exact is not None:
        return {exact}
    by_prefix = {r for r in ALL_RULES if r.code.startswith(text.upper())} if text.upper().startswith("LL") else set()
    if not by_prefix:
        raise ConfigError(f"unknown rule code or name: {selector!r} (see `lintloop rules`)")
    return by_prefix


def _resolve_all(selectors: list[str], where: str) -> set[type[Rule]]:
    rules: set[type[Rule]] = set()
    for selector in selectors:
        try:
            rules |= resolve_selector(selector)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return rules


def find_config(start: Path) -> Path | None:
    """The nearest lintloop.toml, or pyproject.toml with a [tool.lintloop] table, at or above `start`."""
    for directory in [start, *start.parents]:
        candidate = directory / "lintloop.toml"
        if candidate.is_file():
            return candidate
        candidate = directory / "pyproject.toml"
        if candidate.is_file() and "lintloop" in _read_toml(candidate).get("tool", {}):
            return candidate
    return None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read configuration: {exc}") from None


def load_settings(config_file: Path | None = None, start: Path | None = None) -> Settings:
    path = config_file or find_config((start or Path.cwd()).resolve())
    if path is None:
        return Settings(root=(start or Path.cwd()).resolve())
    if not path.is_file():
        raise ConfigError(f"configuration file not found: {path}")
    data = _read_toml(path)
    table = data.get("tool", {}).get("lintloop", {}) if path.name == "pyproject.toml" else data
    return settings_from_table(table, path)


def settings_from_table(table: dict[str, Any], path: Path) -> Settings:
    where = f"{path}: [tool.lintloop]" if path.name == "pyproject.toml" else str(path)
    unknown = sorted(set(table) - KNOWN_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(KNOWN_KEYS))})")
    settings = Settings(root=path.parent.resolve(), config_path=path)
    for key in _LIST_KEYS:
        if key in table:
            value = table[key]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{where}: {key!r} must be a list of strings")
    if "select" in table:
        settings.select = table["select"]
    settings.ignore = table.get("ignore", [])
    settings.extend_select = table.get("extend-select", [])
    settings.exclude = table.get("exclude", list(DEFAULT_EXCLUDE)) + table.get("extend-exclude", [])
    settings.include = table.get("include", list(DEFAULT_INCLUDE)) + table.get("extend-include", [])
    pfi = table.get("per-file-ignores", {})
    if not isinstance(pfi, dict) or not all(
            isinstance(v, list) and all(isinstance(c, str) for c in v) for v in pfi.values()):
        raise ConfigError(f"{where}: 'per-file-ignores' must map glob patterns to lists of codes")
    settings.per_file_ignores = pfi
    settings.unsafe_fixes = _typed(table, "unsafe-fixes", bool, False, where)
    settings.jobs = _typed(table, "jobs", int, None, where)
    settings.rule_options = _rule_options(table.get("rules", {}), where)
    # Validate every code now, so a typo fails the run instead of silently selecting nothing.
    settings.ruleset()
    for selectors in pfi.values():
        _resolve_all(selectors, f"{where}: per-file-ignores")
    return settings


def _typed(table: dict[str, Any], key: str, kind: type, default: Any, where: str) -> Any:
    value = table.get(key, default)
    if value is not default and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
        raise ConfigError(f"{where}: {key!r} must be {kind.__name__}")
    return value


def _rule_options(table: Any, where: str) -> dict[str, dict[str, Any]]:
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: 'rules' must be a table of per-rule tables")
    options: dict[str, dict[str, Any]] = {}
    for key, values in table.items():
        rule = lookup(key)
        if rule is None:
            raise ConfigError(f"{where}: rules.{key}: unknown rule code or name")
        if not isinstance(values, dict):
            raise ConfigError(f"{where}: rules.{key} must be a table")
        for option, value in values.items():
            spec = rule.options.get(option)
            if spec is None:
                known = ", ".join(rule.options) or "none"
                raise ConfigError(f"{where}: rules.{key}: unknown option {option!r} (known: {known})")
            if spec.choices and value not in spec.choices:
                raise ConfigError(f"{where}: rules.{key}.{option} must be one of "
                                  f"{', '.join(repr(c) for c in spec.choices if c is not None)}")
        options.setdefault(rule.code, {}).update(values)
    return options
