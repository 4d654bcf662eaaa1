"""Linting one open document the way `lintloop check` lints the file: its nearest configuration,
per-file-ignores, rule options and suppressions; plus the probe verdicts `check --probe` recorded.
An open notebook is linted as `lintloop check` lints its `.ipynb` file."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from lintloop.cache import CACHE_DIR_NAME
from lintloop.config import ConfigError, Settings, load_settings
from lintloop.finding import Finding
from lintloop.linter import fix_notebook, fix_text, lint_notebook, lint_text
from lintloop.rule import RuleSet
from lintloop.runtime_probe import store as probe_store
from lintloop.runtime_probe.verdicts import describe

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


def ruleset_for(settings: Settings, path: Path | None) -> RuleSet:
    """The rule set for a document (an unsaved one has no per-file-ignores)."""
    return settings.ruleset() if path is None else settings.ruleset_for(path)


def lint_document(snapshot: Snapshot, settings_cache: SettingsCache) -> DocumentLint:
    """Lint a snapshot (raises DocumentConfigError when its configuration is broken)."""
    settings = settings_cache.settings_for(snapshot.path)
    ruleset = ruleset_for(settings, snapshot.path)
    if snapshot.cells is not None:  # probe verdicts are recorded for scripts, not notebooks
        result = lint_notebook(snapshot.display, snapshot.text, ruleset, path=snapshot.path)
        return DocumentLint(snapshot, result.findings, result.errors)
    result = lint_text(snapshot.display, snapshot.text, ruleset, path=snapshot.path)
    if snapshot.path is not None:
        _attach_verdicts(result.findings, settings.root / CACHE_DIR_NAME, snapshot)
    return DocumentLint(snapshot, result.findings, result.errors)


def _attach_verdicts(findings: list[Finding], cache_dir: Path, snapshot: Snapshot) -> None:
    assert snapshot.path is not None
    verdicts = probe_store.recorded(cache_dir, snapshot.path, snapshot.text)
    for finding in findings:
        verdict = verdicts.get((finding.code, finding.line, finding.column))
        if verdict is not None:
            finding.probe = verdict
            finding.message = f"{finding.message} ({describe(verdict)})"


def safe_fix_changes(snapshot: Snapshot, settings_cache: SettingsCache) -> dict[int | None, tuple[str, str]]:
    """What every safe fix changes (what `lintloop fix` would write): (old, new) text of the document
    (under None), or of each changed cell of a notebook (under its 1-based place)."""
    settings = settings_cache.settings_for(snapshot.path)
    ruleset = ruleset_for(settings, snapshot.path)
    if snapshot.cells is not None:
        return dict(fix_notebook(snapshot.display, snapshot.text, ruleset, unsafe=False,
                                 path=snapshot.path).changed_cells)
    fixed = fix_text(snapshot.display, snapshot.text, ruleset, unsafe=False, path=snapshot.path).text
    return {None: (snapshot.text, fixed)} if fixed != snapshot.text else {}


def is_config_file(path: Path | None) -> bool:
    return path is not None and path.name in CONFIG_FILE_NAMES
