"""The pygls wiring: document events to lint runs, results to diagnostics, requests to answers."""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method
from pygls.uris import to_fs_path
from pygls.workspace import TextDocument

from lintloop import __version__
from lintloop.config import ConfigError
from lintloop.finding import Finding
from lintloop.server import actions
from lintloop.server.diagnostics import diagnostic
from lintloop.server.documents import (CONFIG_FILE_NAMES, DocumentConfigError, DocumentLint, SettingsCache,
                                       Snapshot, is_config_file, lint_document, safe_fix_changes)
from lintloop.server.notebooks import (NOTEBOOK_SYNC, CellsTarget, cell_document, cell_place, findings_by_cell,
                                       notebook_snapshot)
from lintloop.server.hover import hover
from lintloop.server.positions import lintloop_position, overlaps
from lintloop.server.ruledocs import RuleDocs
from lintloop.server.scheduling import CHANGE_DELAY_S, LintScheduler
from lintloop.suppression import Suppressions

WATCH_REGISTRATION_ID = "lintloop-config-files"


class LintloopProtocol(LanguageServerProtocol):
    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams) -> Generator[Any, Any, types.InitializeResult]:
        # lintloop's columns are code points: UTF-32 needs no conversion, so it is chosen whenever the
        # client offers it, whatever its order of preference; otherwise UTF-16, which every client takes.
        general = params.capabilities.general
        if general is not None and general.position_encodings:
            utf32 = types.PositionEncodingKind.Utf32
            general.position_encodings = [utf32 if utf32 in general.position_encodings
                                          else types.PositionEncodingKind.Utf16]
        return (yield from super().lsp_initialize(params))


def file_path(uri: str) -> Path | None:
    """The file a `file:` URI names; None for other schemes (an unsaved `untitled:` buffer)."""
    path = to_fs_path(uri) if uri.startswith("file:") else None
    return Path(path) if path else None


@dataclass(frozen=True)
class OpenFindings:
    """The findings in one editor document (a text document, or a notebook's cell) as it is now."""

    lint: DocumentLint  # of the document, or of the cell's notebook
    document: TextDocument
    findings: list[Finding]
    target: actions.EditTarget  # this document, for edits of its own (a suppression comment)
    fixes: actions.EditsTarget  # where the fixes' edits go: this document, or the notebook's cells


class LintloopServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("lintloop", __version__, protocol_cls=LintloopProtocol, notebook_document_sync=NOTEBOOK_SYNC)
        self.settings_cache = SettingsCache()
        self.lints: dict[str, DocumentLint] = {}  # the last delivered lint of each open document and notebook
        # One worker: runs of a document are serial, and a run that went stale meanwhile is dropped, not published.
        self.lint_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lintloop-lint")
        self.scheduler = LintScheduler(self.lint_executor, lambda s: lint_document(s, self.settings_cache),
                                       self.snapshot, self.publish, self.report_failure)
        self.docs = RuleDocs()
        self.shutdown_requested = False

    # ----- documents ---------------------------------------------------------------------
    def snapshot(self, uri: str) -> Snapshot | None:
        """The open document or notebook `uri` as it is now (None once closed, and for a notebook's
        cell: cells are linted with their notebook)."""
        notebook = notebook_snapshot(self.workspace, uri, file_path(uri))
        if notebook is not None:
            return notebook
        if uri not in self.workspace.text_documents or cell_place(self.workspace, uri) is not None:
            return None
        document = self.workspace.get_text_document(uri)
        return Snapshot(uri, document.version, document.source, file_path(uri))

    def current_findings(self, uri: str) -> OpenFindings | None:
        """The findings in the document or cell `uri` as it is now (None while the last lint of it,
        or of its notebook, is of an older version)."""
        place = cell_place(self.workspace, uri)
        linted_uri = uri if place is None else place.notebook_uri
        lint = self.lints.get(linted_uri)
        if lint is None or lint.snapshot != self.snapshot(linted_uri):
            return None
        if place is None and lint.snapshot.cells is not None:
            return None  # requests name a notebook's cells, never the notebook itself
        document = self.workspace.get_text_document(uri)
        if place is None or lint.snapshot.cells is None:
            target = self.edit_target(uri, lint.snapshot.version, document)
            return OpenFindings(lint, document, lint.findings, target, target)
        cells = lint.snapshot.cells
        targets = {index: self.edit_target(cell.uri, cell.version, cell_text)
                   for index, cell in enumerate(cells, 1)
                   if (cell_text := cell_document(self.workspace, cell.uri)) is not None}
        return OpenFindings(lint, document, findings_by_cell(lint.findings, len(cells))[place.cell - 1],
                            targets[place.cell], CellsTarget(targets))

    def publish(self, lint: DocumentLint) -> None:
        snapshot = lint.snapshot
        previous = self.lints.get(snapshot.uri)
        self.lints[snapshot.uri] = lint
        if snapshot.cells is None:
            document = self.workspace.get_text_document(snapshot.uri)
            self.send_diagnostics(snapshot.uri, snapshot.version, document.lines, lint.findings)
        else:
            # Every cell gets its list, empty ones included: the client drops what a cell showed before.
            for cell, findings in zip(snapshot.cells, findings_by_cell(lint.findings, len(snapshot.cells))):
                document = cell_document(self.workspace, cell.uri)
                self.send_diagnostics(cell.uri, cell.version, document.lines if document else [], findings)
            self.clear_documents(self.published_uris(previous) - self.published_uris(lint))  # removed cells
        for error in lint.errors:
            self.log(types.MessageType.Error, f"lintloop: {error}")

    def send_diagnostics(self, uri: str, version: int | None, lines: list[str], findings: list[Finding]) -> None:
        codec = self.workspace.position_codec
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
            uri=uri, diagnostics=[diagnostic(f, codec, lines, self.docs, version) for f in findings], version=version))

    @staticmethod
    def published_uris(lint: DocumentLint | None) -> set[str]:
        """The documents a lint's diagnostics went to: the document, or the notebook's cells."""
        if lint is None:
            return set()
        if lint.snapshot.cells is None:
            return {lint.snapshot.uri}
        return {cell.uri for cell in lint.snapshot.cells}

    def clear(self, uri: str) -> None:
        """Withdraw the diagnostics of the document or notebook `uri` (of each of its cells)."""
        lint = self.lints.pop(uri, None)
        self.clear_documents(self.published_uris(lint) if lint is not None else {uri})

    def clear_documents(self, uris: set[str]) -> None:
        for uri in sorted(uris):
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    def report_failure(self, snapshot: Snapshot, error: Exception) -> None:
        self.clear(snapshot.uri)
        if isinstance(error, DocumentConfigError):
            if error.first_seen:  # once per broken configuration, not once per keystroke
                self.window_show_message(types.ShowMessageParams(
                    type=types.MessageType.Error, message=f"lintloop: configuration error: {error}"))
            return
        details = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        self.log(types.MessageType.Error, f"lintloop: internal error while linting {snapshot.display}:\n{details}")

    def log(self, level: types.MessageType, message: str) -> None:
        self.window_log_message(types.LogMessageParams(type=level, message=message))

    def configuration_changed(self) -> None:
        self.settings_cache.clear()
        notebooks = [notebook.uri for notebook in self.workspace.notebook_documents.values()]
        for uri in [*self.workspace.text_documents, *notebooks]:
            self.scheduler.request(uri)  # a cell's request does nothing: it is linted with its notebook

    def edit_target(self, uri: str, version: int | None, document: TextDocument) -> actions.EditTarget:
        capabilities = self.client_capabilities.workspace
        document_changes = bool(capabilities and capabilities.workspace_edit
                                and capabilities.workspace_edit.document_changes)
        return actions.EditTarget(uri, version, document.lines, self.workspace.position_codec, document_changes)


def create_server() -> LintloopServer:
    server = LintloopServer()

    @server.feature(types.INITIALIZE)
    def initialize(ls: LintloopServer, params: types.InitializeParams) -> None:
        options = params.initialization_options
        template = options.get("docsUrl") if isinstance(options, dict) else None
        if template is None:
            return
        try:
            str(template).format(code="LL000", name="rule-name")
        except (KeyError, IndexError, ValueError) as exc:
            ls.log(types.MessageType.Warning, f"lintloop: docsUrl ignored: a template with {{code}} and {{name}} "
                                              f"is expected ({type(exc).__name__}: {exc})")
        else:
            ls.docs = RuleDocs(url_template=str(template))

    @server.feature(types.INITIALIZED)
    async def initialized(ls: LintloopServer, params: types.InitializedParams) -> None:
        workspace = ls.client_capabilities.workspace
        watched = workspace.did_change_watched_files if workspace else None
        if not (watched and watched.dynamic_registration):
            return
        watchers = [types.FileSystemWatcher(glob_pattern=f"**/{name}") for name in CONFIG_FILE_NAMES]
        registration = types.Registration(id=WATCH_REGISTRATION_ID, method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                                          register_options=types.DidChangeWatchedFilesRegistrationOptions(watchers))
        try:
            await ls.client_register_capability_async(types.RegistrationParams(registrations=[registration]))
        except Exception as exc:  # noqa: BLE001 - without the watch, saving a config in the editor still re-lints
            ls.log(types.MessageType.Warning, f"lintloop: cannot watch configuration files: {exc}")

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: LintloopServer, params: None) -> None:
        ls.shutdown_requested = True

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: LintloopServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.scheduler.request(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: LintloopServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.scheduler.request(params.text_document.uri, CHANGE_DELAY_S)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: LintloopServer, params: types.DidSaveTextDocumentParams) -> None:
        if is_config_file(file_path(params.text_document.uri)):
            ls.configuration_changed()
        else:
            ls.scheduler.request(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: LintloopServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.scheduler.cancel(params.text_document.uri)
        ls.clear(params.text_document.uri)

    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def did_change_watched_files(ls: LintloopServer, params: types.DidChangeWatchedFilesParams) -> None:
        if any(is_config_file(file_path(change.uri)) for change in params.changes):
            ls.configuration_changed()

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    def notebook_did_open(ls: LintloopServer, params: types.DidOpenNotebookDocumentParams) -> None:
        ls.scheduler.request(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def notebook_did_change(ls: LintloopServer, params: types.DidChangeNotebookDocumentParams) -> None:
        ls.scheduler.request(params.notebook_document.uri, CHANGE_DELAY_S)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
    def notebook_did_save(ls: LintloopServer, params: types.DidSaveNotebookDocumentParams) -> None:
        ls.scheduler.request(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def notebook_did_close(ls: LintloopServer, params: types.DidCloseNotebookDocumentParams) -> None:
        ls.scheduler.cancel(params.notebook_document.uri)
        ls.clear(params.notebook_document.uri)

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION,
                    types.CodeActionOptions(code_action_kinds=list(actions.PROVIDED_KINDS)))
    async def code_action(ls: LintloopServer, params: types.CodeActionParams) -> list[types.CodeAction] | None:
        current = ls.current_findings(params.text_document.uri)
        if current is None:  # the document changed since its last lint: nothing offered for stale positions
            return None
        lint, target = current.lint, current.target
        codec, lines = target.codec, target.lines
        start = lintloop_position(codec, lines, params.range.start)
        end = lintloop_position(codec, lines, params.range.end)
        only = params.context.only
        found: list[types.CodeAction] = []
        if actions.requested(types.CodeActionKind.QuickFix, only):
            suppressions = Suppressions.scan(current.document.source)
            for finding in current.findings:
                if not overlaps(finding, start, end):
                    continue
                linked = diagnostic(finding, codec, lines, ls.docs, target.version)
                if finding.fix is not None:
                    found.append(actions.fix_action(finding, current.fixes, linked))
                if finding.code != "LL001":  # a syntax error cannot be suppressed
                    found.append(actions.suppress_action(finding, target, suppressions, linked))
        # Fixing all is offered on any of a notebook's cells: the fixes of one cell may need another's code.
        if actions.requested(actions.FIX_ALL_KIND, only) and any(
                f.fix is not None and f.fix.applicability == "safe" for f in lint.findings):
            try:
                changes = await asyncio.get_running_loop().run_in_executor(
                    ls.lint_executor, safe_fix_changes, lint.snapshot, ls.settings_cache)
            except ConfigError:  # the configuration broke since the lint: its error is shown by the next lint
                changes = {}
            fix_all = actions.fix_all_action(changes, current.fixes)
            if fix_all is not None and ls.snapshot(lint.snapshot.uri) == lint.snapshot:
                found.append(fix_all)
        return found

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def on_hover(ls: LintloopServer, params: types.HoverParams) -> types.Hover | None:
        current = ls.current_findings(params.text_document.uri)
        if current is None:
            return None
        codec, lines = ls.workspace.position_codec, current.document.lines
        at = lintloop_position(codec, lines, params.position)
        return hover([f for f in current.findings if overlaps(f, at, at)], codec, lines)

    return server


def serve() -> int:
    server = create_server()
    try:
        server.start_io()
    finally:
        server.lint_executor.shutdown(wait=False, cancel_futures=True)
    return 0 if server.shutdown_requested else 1
