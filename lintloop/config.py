"""Configuration: `[tool.lintloop]` in a pyproject.toml, or lintloop.toml; rule selection.

Hierarchical, as in ruff: each file gets the closest configuration at or above it (`SettingsResolver`),
unmerged. An error names the file, the line and the key."""

from __future__ import annotations

import functools
import json
import os
import re
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any


if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

from lintloop.isolation import DEFAULT_MEMORY_MIB, DEFAULT_SECONDS
from lintloop.rules.index import ENTRIES, KINDS

if TYPE_CHECKING:
    from lintloop.rule import RuleSet

DEFAULT_EXCLUDE = (".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", ".eggs", "__pycache__",
                   "build", "dist", "node_modules", "site-packages", ".mypy_cache", ".ruff_cache",
                   ".pytest_cache", ".lintloop_cache", ".ipynb_checkpoints")
# Files that directories are searched for (gitignore-style patterns, as `exclude`).
DEFAULT_INCLUDE = ("*.py", "*.pyi", "*.ipynb")
_LIST_KEYS = ("select", "ignore", "extend-select", "exclude", "extend-exclude", "include", "extend-include",
              "test-code-kinds")
_PATTERN_KEYS = ("exclude", "extend-exclude", "include", "extend-include")  # gitignore-style patterns
_SHOWN_CHARS = 60  # a longer value is cut short in a message: an error is one readable line
# The kinds of rules that run in test modules (README "Test code"): none by default. Tests build the
# pitfalls on purpose (a trace counter asserted, one key drawn twice to make fake data or to compare two
# computations, a deprecated spelling to test a fallback) and run a handful of steps; measured on the
# test suites of bench/realworld.tsv, every finding there was of that kind.
DEFAULT_TEST_CODE_KINDS: tuple[str, ...] = ()
# A test module: a file named so, or one below a folder named so (relative to its configuration's directory).
_TEST_FILE_NAME = re.compile(r"(?:test_.*|.*_test|conftest)\.(?:py|ipynb)")
_TEST_FOLDERS = frozenset({"tests", "test"})
KNOWN_KEYS = set(_LIST_KEYS) | {"per-file-ignores", "unsafe-fixes", "jobs", "file-timeout", "file-memory-limit", "rules"}


class ConfigError(Exception):
    """A usage or configuration error: reported in one line, exit code 2."""


class GitignoreSpec:
    """.gitignore lines, matched as pathspec's `GitIgnoreSpec` matches them. pathspec tries each pattern
    in turn (a directory walk asks thousands of paths, most of which no pattern matches): all the
    patterns joined in one expression first tell which paths none matches, and pathspec decides the
    rest (negations, the priority of a directory's match)."""

    def __init__(self, patterns: list[str]) -> None:
        import pathspec  # ~15 ms: loaded by the first run that matches a pattern (a named file matches none)

        self.spec = pathspec.GitIgnoreSpec.from_lines(patterns)
        expressions = [_unnamed_groups(p.regex.pattern) for p in self.spec.patterns
                       if p.include is not None and isinstance(getattr(p, "regex", None), re.Pattern)]
        flags = {p.regex.flags for p in self.spec.patterns if p.include is not None}
        self._any = re.compile("|".join(f"(?:{e})" for e in expressions), flags.pop()) \
            if len(flags) == 1 and len(expressions) == sum(p.include is not None for p in self.spec.patterns) else None
        self._none = all(p.include is None for p in self.spec.patterns)  # blank lines and comments only

    def match_file(self, path: str) -> bool:
        if self._none or self._any is not None and self._any.search(path) is None:
            return False
        return self.spec.match_file(path)


def _unnamed_groups(expression: str) -> str:
    """`(?P<ps_d>/)` as `(?:/)`: one expression joining several may not repeat a group's name."""
    return re.sub(r"\(\?P<\w+>", "(?:", expression)


def gitignore_spec(patterns: list[str]) -> GitignoreSpec:
    """`patterns` compiled as .gitignore lines (`GitignoreSpec`)."""
    return GitignoreSpec(patterns)


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
    # Each file's bounds (lintloop.isolation): seconds and MiB, 0 for none, None for the default.
    file_timeout: float | None = None
    file_memory_limit: int | None = None
    rule_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    test_code_kinds: list[str] = field(default_factory=lambda: list(DEFAULT_TEST_CODE_KINDS))

    def codes(self) -> tuple[str, ...]:
        """The codes of the rules enabled, sorted (from the rule index: no rule is imported)."""
        if self.select is not None:
            enabled = _resolve_all(self.select, "select")
        else:
            enabled = {entry.code for entry in ENTRIES if entry.default_on}
        enabled |= _resolve_all(self.extend_select, "extend-select")
        enabled -= _resolve_all(self.ignore, "ignore")
        return tuple(sorted(enabled))

    def codes_for(self, path: Path | None) -> tuple[str, ...]:
        """The codes enabled for one file (None: an unsaved document): `codes()` less `skipped_for(path)`."""
        codes = self.codes()
        skipped = self.skipped_for(path) if path is not None else set()
        return tuple(code for code in codes if code not in skipped) if skipped else codes

    def skipped_for(self, path: Path, resolved: bool = False) -> set[str]:
        """The codes switched off for one file: those its per-file-ignores name, and in a test module
        those of the kinds `test-code-kinds` leaves out. `resolved`: the path's folder is known to be
        its real one (a file found by walking a directory, whose symbolic links are not followed)."""
        skipped: set[str] = set()
        if self.per_file_ignores:  # else no path to resolve (~50 µs a file)
            try:
                skipped |= self.ignored_for(os.path.relpath(path.resolve(), self.root))
            except ValueError:  # another drive (Windows): no pattern can match
                pass
        if self.is_test_module(path, resolved):
            skipped |= _skipped_in_tests(frozenset(self.test_code_kinds))
        return skipped

    def is_test_module(self, path: Path, resolved: bool = False) -> bool:
        """`test_*.py`, `*_test.py`, `conftest.py` (or `.ipynb`), or a file below a `tests` or `test`
        folder of this configuration's directory (its folder's resolved path relative to it, as
        per-file-ignores match paths; `resolved`: as for `skipped_for`)."""
        return _TEST_FILE_NAME.fullmatch(path.name) is not None \
            or _in_test_folder(os.path.abspath(os.path.dirname(path)), str(self.root), resolved)

    def ruleset(self) -> RuleSet:
        return self.ruleset_for(None)

    def ruleset_for(self, path: Path | None) -> RuleSet:
        """The rule classes of `codes_for(path)`, with their options (imports the rules)."""
        from lintloop.rule import RuleSet
        from lintloop.rules import BY_CODE

        return RuleSet([BY_CODE[code] for code in self.codes_for(path)], dict(self.rule_options))

    @functools.cached_property
    def _exclude_spec(self) -> GitignoreSpec:
        return gitignore_spec(self.exclude)

    @functools.cached_property
    def _per_file_ignore_specs(self) -> list[tuple[GitignoreSpec, list[str], str]]:
        """(compiled glob, codes, glob) of each per-file-ignores entry, compiled once."""
        return [(gitignore_spec([pattern]), selectors, pattern)
                for pattern, selectors in self.per_file_ignores.items()]

    def excludes(self, path: Path) -> bool:
        """Whether `exclude` matches a file: its path relative to this configuration's directory,
        or its bare name (as discovery matches each file and directory it walks)."""
        spec = self._exclude_spec
        try:
            relative = path.resolve().relative_to(self.root).as_posix()
        except ValueError:  # outside this configuration's directory: its name alone
            relative = None
        return spec.match_file(path.name) or (relative is not None and spec.match_file(relative))

    def ignored_for(self, relative_path: str) -> set[str]:
        """Codes that per-file-ignores switch off for this path (relative to the config root)."""
        codes: set[str] = set()
        for spec, selectors, pattern in self._per_file_ignore_specs:
            if spec.match_file(relative_path):
                codes |= _resolve_all(selectors, f"per-file-ignores[{_shown(pattern)}]")
        return codes


@functools.lru_cache(maxsize=4096)
def _in_test_folder(directory: str, root: str, resolved: bool) -> bool:
    """Whether the folder `directory` (absolute) is or is below a folder named `tests` or `test`, in its
    resolved path relative to `root` (`resolved`: `directory` is already). Once per folder, not per file:
    resolving a path costs a system call per part, and a run asks for every file."""
    try:
        relative = os.path.relpath(directory if resolved else os.path.realpath(directory), root)
    except ValueError:  # another drive (Windows): not below the root
        return False
    return not _TEST_FOLDERS.isdisjoint(Path(relative).parts)


@functools.cache
def _skipped_in_tests(kinds: frozenset[str]) -> frozenset[str]:
    """The codes not run in test modules when `test-code-kinds` is `kinds`: every rule of another kind,
    never the engine's own codes (a syntax error or a bad suppression comment is one in a test too)."""
    return frozenset(entry.code for entry in ENTRIES if entry.kind not in kinds and entry.family != "engine")


def _check_kind(kind: str) -> None:
    """A kind of rule (`lintloop rules`, column `kind`), or a ConfigError."""
    if kind not in KINDS:
        raise ConfigError(f"unknown kind {_shown(kind)} (known: {', '.join(KINDS)})")


def resolve_selector(selector: str) -> set[str]:
    """The codes a code (`LL101`), a prefix (`LL1`, `LL`), a name (`numpy-in-gradient-tape`) or `ALL` selects."""
    text = selector.strip()
    if text.upper() == "ALL":
        return {entry.code for entry in ENTRIES}
    exact = {entry.code for entry in ENTRIES if entry.code == text.upper() or entry.name == text.lower()}
    if exact:
        return exact
    by_prefix = {entry.code for entry in ENTRIES if entry.code.startswith(text.upper())} \
        if text.upper().startswith("LL") else set()
    if not by_prefix:
        raise ConfigError(f"unknown rule code or name: {_shown(selector)} (see `lintloop rules`)")
    return by_prefix


def _resolve_all(selectors: list[str], where: str) -> set[str]:
    rules: set[str] = set()
    for selector in selectors:
        try:
            rules |= resolve_selector(selector)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return rules


def find_config(start: Path) -> Path | None:
    """The nearest lintloop.toml, or pyproject.toml with a [tool.lintloop] table, at or above `start`."""
    for directory in [start, *start.parents]:
        found = _config_in(directory)
        if found is not None:
            return found
    return None


def _is_file(path: Path) -> bool:
    """Is there a file at `path`? A directory above that cannot be searched (permissions) means no."""
    try:
        return path.is_file()
    except OSError:
        return False


def _config_in(directory: Path) -> Path | None:
    """This directory's configuration file: lintloop.toml first, as ruff prefers ruff.toml to pyproject.toml."""
    candidate = directory / "lintloop.toml"
    if _is_file(candidate):
        return candidate
    candidate = directory / "pyproject.toml"
    if _is_file(candidate):
        raw = _read_bytes(candidate)
        # One that never names lintloop is another tool's, and not parsed: a broken pyproject.toml
        # among a project's test data stops no run (ruff, which parses each one, stops there).
        if b"lintloop" in raw:
            tool = _parse_toml(candidate, raw).data.get("tool")
            if isinstance(tool, dict) and "lintloop" in tool:
                return candidate
    return None


@dataclass(frozen=True)
class _Toml:
    """A configuration file's parsed content, and its text (to find a bad key's line)."""

    path: Path
    text: str
    data: dict[str, Any]


def _display(path: Path) -> str:
    """A configuration file as an error names it: relative to the current directory where below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)


def _read_toml(path: Path) -> _Toml:
    return _parse_toml(path, _read_bytes(path))


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{_display(path)}: cannot read configuration: {exc.strerror or exc}") from None
    except MemoryError:
        raise ConfigError(f"{_display(path)}: cannot read configuration: too large") from None


def _parse_toml(path: Path, raw: bytes) -> _Toml:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ConfigError(f"{_display(path)}:{line}: cannot read configuration: not UTF-8 text") from None
    too_deep = _too_deep_line(text)
    if too_deep is not None:
        raise ConfigError(f"{_display(path)}:{too_deep}: cannot read configuration: invalid TOML: "
                          f"arrays or inline tables nested more than {MAX_TOML_DEPTH} deep")
    try:
        return _Toml(path, text, tomllib.loads(text))
    except RecursionError:  # tomllib's parser recurses per level: only where the stack was all but full
        raise ConfigError(f"{_display(path)}: cannot read configuration: invalid TOML: "
                          "arrays or inline tables nested too deeply for the stack left") from None
    except MemoryError:
        raise ConfigError(f"{_display(path)}: cannot read configuration: too large") from None
    except tomllib.TOMLDecodeError as exc:
        # tomllib ends its message with "(at line L, column C)" (3.11-3.13; 3.14 adds attributes).
        message = str(exc)
        where = re.search(r"\s*\(at (?:line (\d+), column (\d+)|end of document)\)$", message)
        if where is None:
            raise ConfigError(f"{_display(path)}: cannot read configuration: invalid TOML: {message}") from None
        if where[1] is None:  # the end of the document: its last position
            line, column = text.count("\n") + 1, len(text) - text.rfind("\n")
        else:
            line, column = int(where[1]), int(where[2])
        raise ConfigError(f"{_display(path)}:{line}:{column}: cannot read configuration: invalid TOML: "
                          f"{message[:where.start()]}") from None
    except ValueError as exc:  # not TOMLDecodeError: an integer of more digits than Python converts
        raise ConfigError(f"{_display(path)}: cannot read configuration: invalid TOML: "
                          f"{str(exc).split(';')[0]}") from None


# A token of TOML text for `_too_deep_line`: a string (whose brackets do not count), a comment, a bracket.
_TOML_TOKEN = re.compile(r'"""(?:[^\\]|\\.)*?"""' r"|'''.*?'''" r'|"(?:[^"\\\n]|\\.)*"' r"|'[^'\n]*'|#[^\n]*|[\[\]{}]",
                         re.DOTALL)


# Deeper than any configuration is written, and shallow enough for tomllib's parser (which recurses per
# level of arrays and inline tables) wherever it is called: the verdict is the same on every host and
# stack, where tomllib's own limit is not (3.11-3.13 from a shallow stack: 496 levels of arrays, 330 of
# inline tables; fewer from a deeper one).
MAX_TOML_DEPTH = 100


def _too_deep_line(text: str) -> int | None:
    """The line where arrays and inline tables first nest more than MAX_TOML_DEPTH deep; None if they
    never do."""
    if text.count("[") + text.count("{") <= MAX_TOML_DEPTH:  # most texts: no scan
        return None
    depth = 0
    for token in _TOML_TOKEN.finditer(text):
        if token[0] in ("[", "{"):
            depth += 1
            if depth > MAX_TOML_DEPTH:
                return text.count("\n", 0, token.start()) + 1
        elif token[0] in ("]", "}"):
            depth -= 1
    return None


def load_settings(config_file: Path | None = None, start: Path | None = None) -> Settings:
    """The settings of `config_file`, or of the nearest configuration at or above `start` (default:
    the current directory); the defaults, rooted at `start`, where there is none."""
    path = config_file or find_config((start or Path.cwd()).resolve())
    if path is None:
        return Settings(root=(start or Path.cwd()).resolve())
    _check_regular_file(path)
    return _settings_from_file(_read_toml(path))


def _check_regular_file(path: Path) -> None:
    """A configuration file is a (link to a) regular file: a FIFO would block the run, a device
    (`/dev/zero`) never end it, and a directory is no file."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise ConfigError(f"configuration file not found: {path}") from None
    except OSError as exc:  # a directory above that cannot be searched, a loop of links
        raise ConfigError(f"{_display(path)}: cannot read configuration: {exc.strerror or exc}") from None
    if stat.S_ISDIR(mode):
        raise ConfigError(f"{_display(path)}: cannot read configuration: a directory, not a file")
    if not stat.S_ISREG(mode):
        raise ConfigError(f"{_display(path)}: cannot read configuration: not a regular file (a FIFO, socket or device)")


def _settings_from_file(toml: _Toml) -> Settings:
    if toml.path.name != "pyproject.toml":
        return settings_from_table(toml.data, toml.path, _KeyLocator(toml, ()))
    tool = toml.data.get("tool", {})
    table = tool.get("lintloop", {}) if isinstance(tool, dict) else None
    if not isinstance(table, dict):
        locator = _KeyLocator(toml, ())
        raise ConfigError(locator.error(("tool", "lintloop") if isinstance(tool, dict) else ("tool",),
                                        "must be a table"))
    return settings_from_table(table, toml.path, _KeyLocator(toml, ("tool", "lintloop")))


@dataclass(frozen=True)
class Overrides:
    """Command-line settings, applied on top of every configuration file (as ruff does)."""

    select: list[str] | None = None
    extend_select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    unsafe_fixes: bool = False
    jobs: int | None = None
    file_timeout: float | None = None
    file_memory_limit: int | None = None
    test_code_kinds: list[str] | None = None

    def validate(self) -> None:
        for option, selectors in (("--select", self.select or []), ("--extend-select", self.extend_select),
                                  ("--ignore", self.ignore)):
            _resolve_all(selectors, option)
        for kind in self.test_code_kinds or []:
            try:
                _check_kind(kind)
            except ConfigError as exc:
                raise ConfigError(f"--test-code-kinds: {exc}") from None
        if self.jobs is not None and self.jobs < 1:
            raise ConfigError("--jobs must be at least 1")

    def apply(self, settings: Settings) -> Settings:
        if self.select is not None:
            settings.select = list(self.select)
        settings.extend_select = settings.extend_select + self.extend_select
        settings.ignore = settings.ignore + self.ignore
        settings.unsafe_fixes = settings.unsafe_fixes or self.unsafe_fixes
        for name in ("jobs", "file_timeout", "file_memory_limit", "test_code_kinds"):
            if getattr(self, name) is not None:
                setattr(settings, name, getattr(self, name))
        return settings


class SettingsResolver:
    """Hierarchical configuration, as ruff has it: each file gets the settings of the closest
    configuration file at or above its directory (paths in it relative to that file's directory),
    with no merging across files; `forced` (`--config`) applies one file to every path instead.
    Each configuration file is read once; directories are looked up once."""

    def __init__(self, overrides: Overrides | None = None, forced: Path | None = None) -> None:
        self.overrides = overrides or Overrides()
        self.overrides.validate()
        self._default_root = Path.cwd().resolve()  # where no configuration file applies
        self._forced = self.overrides.apply(load_settings(forced)) if forced is not None else None
        self._by_config: dict[Path | None, Settings] = {}
        self._config_of_directory: dict[Path, Path | None] = {}
        self._settings_of_directory: dict[Path, Settings] = {}
        self._settings_of_folder: dict[str, Settings] = {}

    def for_directory(self, directory: Path) -> Settings:
        if self._forced is not None:
            return self._forced
        settings = self._settings_of_directory.get(directory)  # as given: no path to resolve (most files)
        if settings is None:
            config = self._closest_config(directory.resolve())
            settings = self._by_config.get(config)
            if settings is None:
                base = Settings(root=self._default_root) if config is None else _settings_from_file(_read_toml(config))
                settings = self._by_config[config] = self.overrides.apply(base)
            self._settings_of_directory[directory] = settings
        return settings

    def for_file(self, path: Path) -> Settings:
        # By the directory's name as a string: a run asks for every file, most in a few directories.
        folder = os.path.dirname(path)
        settings = self._settings_of_folder.get(folder)
        if settings is None:
            settings = self._settings_of_folder[folder] = self.for_directory(path.parent)
        return settings

    def for_path(self, path: Path) -> Settings:
        """The settings of a file (its directory's), or of a directory itself."""
        return self.for_directory(path) if path.is_dir() else self.for_file(path)

    def _closest_config(self, directory: Path) -> Path | None:
        unresolved = []
        found: Path | None = None
        for candidate in [directory, *directory.parents]:
            if candidate in self._config_of_directory:
                found = self._config_of_directory[candidate]
                break
            unresolved.append(candidate)
            found = _config_in(candidate)
            if found is not None:
                break
        for seen in unresolved:
            self._config_of_directory[seen] = found
        return found


def settings_from_table(table: dict[str, Any], path: Path, locator: _KeyLocator | None = None) -> Settings:
    """Settings from a `[tool.lintloop]` table (or a lintloop.toml's top level); every value is checked,
    and an error names the file, the line and the key."""
    where = locator or _KeyLocator(_Toml(path, "", {}), ())
    unknown = sorted(set(table) - KNOWN_KEYS)
    if unknown:
        raise ConfigError(where.error((unknown[0],), f"unknown key {_shown(unknown[0])} (known: {_known_keys()})",
                                      show_key=False))
    settings = Settings(root=path.parent.resolve(), config_path=path)
    for key in _LIST_KEYS:
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(where.error((key,), "must be a list of strings"))
    for key in ("select", "extend-select", "ignore"):
        _check_selectors(table.get(key, []), (key,), where)
    for key in _PATTERN_KEYS:
        for pattern in table.get(key, []):
            _check_pattern(pattern, (key,), where, in_list=True)
    if "select" in table:
        settings.select = table["select"]
    settings.ignore = table.get("ignore", [])
    settings.extend_select = table.get("extend-select", [])
    settings.exclude = table.get("exclude", list(DEFAULT_EXCLUDE)) + table.get("extend-exclude", [])
    settings.include = table.get("include", list(DEFAULT_INCLUDE)) + table.get("extend-include", [])
    pfi = table.get("per-file-ignores", {})
    if not isinstance(pfi, dict):
        raise ConfigError(where.error(("per-file-ignores",), "must be a table of glob pattern = [codes]"))
    for pattern, selectors in pfi.items():
        _check_pattern(pattern, ("per-file-ignores", pattern), where)
        if not isinstance(selectors, list) or not all(isinstance(c, str) for c in selectors):
            raise ConfigError(where.error(("per-file-ignores", pattern), "must be a list of codes"))
        _check_selectors(selectors, ("per-file-ignores", pattern), where)
    settings.per_file_ignores = pfi
    for kind in table.get("test-code-kinds", []):
        try:
            _check_kind(kind)
        except ConfigError as exc:
            raise ConfigError(where.error(("test-code-kinds",), str(exc), value=kind)) from None
    settings.test_code_kinds = table.get("test-code-kinds", list(DEFAULT_TEST_CODE_KINDS))
    settings.unsafe_fixes = _typed(table, "unsafe-fixes", bool, False, where)
    settings.jobs = _typed(table, "jobs", int, None, where)
    if settings.jobs is not None and settings.jobs < 1:
        raise ConfigError(where.error(("jobs",), "must be at least 1"))
    settings.file_timeout = _typed(table, "file-timeout", (int, float), None, where)
    settings.file_memory_limit = _typed(table, "file-memory-limit", int, None, where)
    for key, value in (("file-timeout", settings.file_timeout), ("file-memory-limit", settings.file_memory_limit)):
        if value is not None and not value >= 0:  # also refuses nan
            raise ConfigError(where.error((key,), "must be 0 (no limit) or more"))
    # A configuration file comes with the project (a clone, a pull request): it may tighten the limits of
    # a file's analysis, never lift them past the defaults (0, no limit, included); the command line may.
    settings.file_timeout = _tightened(settings.file_timeout, DEFAULT_SECONDS)
    settings.file_memory_limit = _tightened(settings.file_memory_limit, DEFAULT_MEMORY_MIB)
    settings.rule_options = _rule_options(table.get("rules", {}), where)
    return settings


def _tightened(limit: float | None, default: float) -> float | None:
    return None if limit is None or limit == 0 or limit > default else limit


def _known_keys() -> str:
    """The known keys as an error lists them, `select` and `extend-select` as `[extend-]select`: the
    list grows with every key, and the message must stay one short line."""
    extended = {key for key in KNOWN_KEYS if f"extend-{key}" in KNOWN_KEYS}
    shown = [f"[extend-]{key}" if key in extended else key for key in KNOWN_KEYS
             if not (key.startswith("extend-") and key.removeprefix("extend-") in extended)]
    return ", ".join(sorted(shown, key=lambda key: key.removeprefix("[extend-]")))


def _check_selectors(selectors: list[str], key: tuple[str, ...], where: _KeyLocator) -> None:
    """Every code now, so that a typo fails the run instead of silently selecting nothing."""
    for selector in selectors:
        try:
            resolve_selector(selector)
        except ConfigError as exc:
            raise ConfigError(where.error(key, str(exc), value=selector)) from None


def _check_pattern(pattern: str, key: tuple[str, ...], where: _KeyLocator, in_list: bool = False) -> None:
    """A gitignore-style pattern must compile now: else the first file matched against it would
    fail the run with an internal error. `in_list`: the pattern is an item of the key's list (and is
    quoted in the message), not the key itself."""
    try:
        gitignore_spec([pattern])
    except re.error as exc:  # pathspec's regular expression for it does not compile: `[z-a]`
        reason = exc.msg
    except ValueError:  # pathspec's GitIgnorePatternError: a lone `!`, a trailing backslash
        reason = "not gitignore syntax"
    else:
        return
    problem = f"invalid pattern {_shown(pattern)}: {reason}" if in_list else f"invalid pattern: {reason}"
    raise ConfigError(where.error(key, problem, value=pattern if in_list else None))


def _shown(value: str) -> str:
    """A value as a message quotes it: cut short if long, so that a bad value is still one short line."""
    if len(value) <= _SHOWN_CHARS:
        return repr(value)
    return f"{value[:_SHOWN_CHARS]!r}... ({len(value)} characters)"


_KIND_NAMES = {int: "an integer", bool: "true or false", (int, float): "a number"}


def _typed(table: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any, where: _KeyLocator) -> Any:
    value = table.get(key, default)
    if value is not default and (not isinstance(value, kind) or (kind is not bool and isinstance(value, bool))):
        raise ConfigError(where.error((key,), f"must be {_KIND_NAMES[kind]}"))
    return value


def _rule_options(table: Any, where: _KeyLocator) -> dict[str, dict[str, Any]]:
    if not isinstance(table, dict):
        raise ConfigError(where.error(("rules",), "must be a table of per-rule tables"))
    from lintloop.rules import lookup  # the option specs are the rule classes' (a file that sets options)

    options: dict[str, dict[str, Any]] = {}
    for key, values in table.items():
        rule = lookup(key)
        if rule is None:
            raise ConfigError(where.error(("rules", key), "unknown rule code or name (see `lintloop rules`)"))
        if not isinstance(values, dict):
            raise ConfigError(where.error(("rules", key), "must be a table"))
        for option, value in values.items():
            spec = rule.options.get(option)
            if spec is None:
                known = ", ".join(rule.options) or "none"
                raise ConfigError(where.error(("rules", key, option),
                                              f"unknown option {_shown(option)} (known: {known})"))
            # Same type as well as equal: `true` is not the Keras version 1, nor 1 `true`.
            if spec.choices and not any(type(value) is type(c) and value == c for c in spec.choices):
                raise ConfigError(where.error(("rules", key, option), "must be one of " + ", ".join(
                    json.dumps(c) for c in spec.choices if c is not None)))
        options.setdefault(rule.code, {}).update(values)
    return options


# -- where a key is, for error messages ---------------------------------------------------------

_BARE_KEY = r"[A-Za-z0-9_-]+"
_KEY_PART = rf"(?:{_BARE_KEY}|\"(?:[^\"\\]|\\.)*\"|'[^']*')"
_DOTTED_KEY = rf"{_KEY_PART}(?:\s*\.\s*{_KEY_PART})*"
_HEADER = re.compile(rf"^\s*\[\[?\s*({_DOTTED_KEY})\s*\]\]?\s*(?:#.*)?$")
_ASSIGNMENT = re.compile(rf"^\s*({_DOTTED_KEY})\s*=")
_PART = re.compile(_KEY_PART)


def _key_parts(dotted: str) -> tuple[str, ...]:
    parts = []
    for match in _PART.finditer(dotted):
        text = match[0]
        if text.startswith('"'):
            text = json.loads(text)  # a TOML basic string's escapes are JSON's (bar \UXXXXXXXX)
        elif text.startswith("'"):
            text = text[1:-1]
        parts.append(text)
    return tuple(parts)


class _KeyLocator:
    """Finds the line of a key in a TOML file's text for an error message. tomllib keeps no
    positions, so the text is scanned: table headers and `key =` lines, dotted or quoted keys;
    a key inside an inline table is reported at the line of the table that holds it."""

    def __init__(self, toml: _Toml, prefix: tuple[str, ...]) -> None:
        self.toml = toml
        self.prefix = prefix

    def error(self, key: tuple[str, ...], problem: str, value: str | None = None, show_key: bool = True) -> str:
        """`FILE:LINE: [table] key: problem` (no line where the key cannot be found in the text)."""
        line = self.line_of(self.prefix + key, value)
        location = _display(self.toml.path) + (f":{line}" if line else "")
        named = [f"[{'.'.join(self.prefix)}]"] if self.prefix else []
        if show_key:
            named.append(".".join(_quote_key(k) for k in key))
        return f"{location}: {' '.join(named)}{': ' if named else ''}{problem}"

    def line_of(self, key: tuple[str, ...], value: str | None = None) -> int | None:
        defined: list[tuple[int, tuple[str, ...]]] = []
        table: tuple[str, ...] = ()
        for number, text in enumerate(self.toml.text.splitlines(), 1):
            header = _HEADER.match(text)
            if header:
                table = _key_parts(header[1])
                defined.append((number, table))
                continue
            assignment = _ASSIGNMENT.match(text)
            if assignment:
                defined.append((number, table + _key_parts(assignment[1])))
        # The key itself, else the first key below it (its table's header), else the nearest key above it.
        line = next((n for n, path in defined if path == key), None)
        line = line or next((n for n, path in defined if path[:len(key)] == key), None)
        if line is None:
            holders = [(len(path), n) for n, path in defined if key[:len(path)] == path]
            line = max(holders)[1] if holders else None
        if line is not None and value is not None:
            line = self._value_line(line, value)
        return line

    def _value_line(self, key_line: int, value: str) -> int:
        """The line of a bad value in a list that spans lines (the key's line if not found)."""
        lines = self.toml.text.splitlines()
        # As written: a literal string, a basic string without escapes, or one with JSON's escapes.
        written = (f"'{value}'", f'"{value}"', json.dumps(value), json.dumps(value, ensure_ascii=False))
        for number in range(key_line, len(lines) + 1):
            text = lines[number - 1]
            if any(form in text for form in written):
                return number
            if "]" in text.split("#")[0]:
                break
        return key_line


def _quote_key(key: str) -> str:
    shown = key if len(key) <= _SHOWN_CHARS else key[:_SHOWN_CHARS]
    quoted = shown if re.fullmatch(_BARE_KEY, shown) else json.dumps(shown)
    return quoted if shown == key else f"{quoted}... ({len(key)} characters)"
