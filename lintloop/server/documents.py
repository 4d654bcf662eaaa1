"""Linting one open document the way `lintloop check` lints the file: its nearest configuration,
per-file-ignores, rule options and suppressions; plus the probe verdicts `check --probe` recorded.
An open notebook is linted as `lintloop check` lints its `.ipynb` file.

The settings are read in the server process; the analysis (`lint_analysis`, `safe_fix_changes`) runs
in a worker process, on an `Analysis`: plain data, pickled to the worker."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lintloop.cache import CACHE_DIR_NAME
from lintloop.config import ConfigError, Settings, load_settings
from lintloop.finding import Finding
from lintloop.isolation import Limits
from lintloop.runner import NOT_ANALYSED

if TYPE_CHECKING:
    from lintloop.linter import FileResult
    from lintloop.rule import RuleSet

CONFIG_FILE_NAMES = ("pyproject.toml", "lintloop.toml")


@dataclass(frozen=True)
class CellVersion:
    """A notebook cell's text document, at the version a notebook snapshot holds."""

    uri: str
    version: int | None


@dataclass(frozen=True)
class Snapshot:
    """A document's text at one version. `path` is None for an unsaved (non-file) document.
    For a notebook, `cells` are its cells in order and `text` is the notebook as `.ipynb` JSON."""

    uri: str
    version: int | None
    text: str
    path: Path | None
    cells: tuple[CellVersion, ...] | None = None

    @property
    def display(self) -> str:
        return str(self.path) if self.path is not None else self.uri


@dataclass
class DocumentLint:
    """The findings of one snapshot (messages carry recorded probe verdicts)."""

    snapshot: Snapshot
    findings: list[Finding] = field(default_factory=list)
    # Internal errors (a rule crashed): logged to the client, the other findings are shown.
    errors: list[str] = field(default_factory=list)


class SettingsCache:
    """Settings per directory (the nearest config of a file is that of its directory), kept until a
    configuration file changes. Shared by the worker threads, hence the lock."""

    def __init__(self) -> None:
        self._by_directory: dict[Path, Settings | ConfigError] = {}
        self._lock = threading.Lock()

    def settings_for(self, path: Path | None) -> Settings:
        """The settings of a file at `path` (the defaults for an unsaved document). Raises
        DocumentConfigError for a broken configuration."""
        if path is None:
            return Settings(root=Path.cwd().resolve())
        directory = path.parent
        with self._lock:
            cached = self._by_directory.get(directory)
            fresh = cached is None
            if fresh:
                try:
                    cached = load_settings(start=directory)
                except ConfigError as exc:
                    cached = exc
                self._by_directory[directory] = cached
        if isinstance(cached, ConfigError):
            raise DocumentConfigError(str(cached), first_seen=fresh)
        return cached

    def clear(self) -> None:
        with self._lock:
            self._by_directory.clear()


class DocumentConfigError(ConfigError):
    """A broken configuration, and whether it was read just now (to be shown to the user) or is the
    cached error of an earlier read (shown then: not repeated on every keystroke)."""

    def __init__(self, message: str, first_seen: bool) -> None:
        super().__init__(message)
        self.first_seen = first_seen


@dataclass(frozen=True)
class Analysis:
    """A snapshot and the rules to check it with: what a worker process analyses."""

    snapshot: Snapshot
    codes: tuple[str, ...]  # the enabled rules
    options: dict[str, dict[str, Any]]  # their options
    verdicts_dir: Path | None  # where `check --probe` recorded verdicts for this script (None: none read)
    # Its time and memory: the settings' file-timeout and file-memory-limit (None: neither set, the server's).
    limits: Limits | None = None

    def ruleset(self) -> RuleSet:
        from lintloop.rule import RuleSet
        from lintloop.rules import BY_CODE

        return RuleSet([BY_CODE[code] for code in self.codes], self.options)


def analysis_of(snapshot: Snapshot, settings_cache: SettingsCache) -> Analysis:
    """A snapshot with the rules its settings enable (an unsaved document: the defaults, without
    per-file-ignores). Raises DocumentConfigError when its configuration is broken."""
    settings = settings_cache.settings_for(snapshot.path)
    # Probe verdicts are recorded for saved scripts, not notebooks.
    verdicts_dir = settings.root / CACHE_DIR_NAME if snapshot.path is not None and snapshot.cells is None else None
    limits = None if settings.file_timeout is None and settings.file_memory_limit is None else \
        Limits.configured(settings.file_timeout, settings.file_memory_limit)
    return Analysis(snapshot, settings.codes_for(snapshot.path), dict(settings.rule_options), verdicts_dir, limits)


def lint_analysis(analysis: Analysis) -> FileResult:
    """The findings of a snapshot (messages carry recorded probe verdicts). Runs in a worker process."""
    from lintloop.linter import lint_notebook, lint_text

    snapshot = analysis.snapshot
    if snapshot.cells is not None:
        result = lint_notebook(snapshot.display, snapshot.text, analysis.ruleset(), path=snapshot.path)
    else:
        result = lint_text(snapshot.display, snapshot.text, analysis.ruleset(), path=snapshot.path)
    # A finding the document's imports bring to light in another module (lintloop.project_view) is
    # that module's to show; the editor shows this document's own.
    result.findings = [f for f in result.findings if f.path == snapshot.display]
    if analysis.verdicts_dir is not None:
        _attach_verdicts(result.findings, analysis.verdicts_dir, snapshot)
    return result


def _attach_verdicts(findings: list[Finding], cache_dir: Path, snapshot: Snapshot) -> None:
    from lintloop.runtime_probe import store as probe_store
    from lintloop.runtime_probe.verdicts import describe

    assert snapshot.path is not None
    verdicts = probe_store.recorded(cache_dir, snapshot.path, snapshot.text)
    for finding in findings:
        verdict = verdicts.get((finding.code, finding.line, finding.column))
        if verdict is not None:
            finding.probe = verdict
            finding.message = f"{finding.message} ({describe(verdict)})"


def safe_fix_changes(analysis: Analysis) -> dict[int | None, tuple[str, str]]:
    """What every safe fix changes (what `lintloop fix` would write): (old, new) text of the document
    (under None), or of each changed cell of a notebook (under its 1-based place). Runs in a worker process."""
    from lintloop.linter import fix_notebook, fix_text

    snapshot = analysis.snapshot
    if snapshot.cells is not None:
        return dict(fix_notebook(snapshot.display, snapshot.text, analysis.ruleset(), unsafe=False,
                                 path=snapshot.path).changed_cells)
    fixed = fix_text(snapshot.display, snapshot.text, analysis.ruleset(), unsafe=False, path=snapshot.path).text
    return {None: (snapshot.text, fixed)} if fixed != snapshot.text else {}


def not_analysed(analysis: Analysis, cause: str) -> DocumentLint:
    """The lint of a snapshot whose analysis failed (`cause`: how, from lintloop.isolation): the LL004
    finding `lintloop check` reports for the file, where that rule is enabled."""
    from lintloop.linter import not_analysed_finding

    if NOT_ANALYSED not in analysis.codes:
        return DocumentLint(analysis.snapshot)
    finding = not_analysed_finding(analysis.snapshot.display, cause)
    if analysis.snapshot.cells is not None:
        finding.cell = 1  # a notebook's findings are shown in their cells: the file's start is the first's
    return DocumentLint(analysis.snapshot, [finding])


def is_config_file(path: Path | None) -> bool:
    return path is not None and path.name in CONFIG_FILE_NAMES
