"""The pygls wiring: document events to lint runs, results to diagnostics, requests to answers; the
client's messages read within bounds and every malformed one answered or logged; every analysis of a
document in a worker process, whose failure is the document's LL004."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import traceback
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from cattrs import Converter, transform_error
from cattrs.errors import ClassValidationError
from lsprotocol import types
from pygls.exceptions import (FeatureRequestError, JsonRpcException, JsonRpcInternalError, JsonRpcInvalidParams,
                              JsonRpcInvalidRequest, JsonRpcMethodNotFound, JsonRpcParseError,
                              JsonRpcServerNotInitialized)
from pygls.io_ import StdoutWriter
from pygls.lsp.server import LanguageServer
from pygls.protocol import JsonRPCProtocol, LanguageServerProtocol
from pygls.protocol.json_rpc import RPCRequest
from pygls.protocol.language_server import lsp_method
from pygls.uris import to_fs_path
from pygls.workspace import TextDocument

from lintloop import __version__
from lintloop.config import ConfigError
from lintloop.finding import Finding
from lintloop.isolation import AnalysisError, AnalysisFailed, Limits
from lintloop.server import actions
from lintloop.server.diagnostics import diagnostic
from lintloop.server.handshake import Opening, open_session
from lintloop.server.documents import (CONFIG_FILE_NAMES, Analysis, DocumentConfigError, DocumentLint,
                                       SettingsCache, Snapshot, analysis_of, is_config_file, lint_analysis,
                                       not_analysed, safe_fix_changes)
from lintloop.server.notebooks import (NOTEBOOK_SYNC, CellsTarget, cell_place, findings_by_cell, notebook_snapshot,
                                       open_document)
from lintloop.server.hover import hover
from lintloop.server.positions import lintloop_position, overlaps
from lintloop.server.ruledocs import RuleDocs, url_template_problem
from lintloop.server.scheduling import CHANGE_DELAY_S, LintScheduler
from lintloop.server.transport import Refused, decode
from lintloop.server.workers import IsolatedExecutor, worker_context
from lintloop.suppression import Suppressions
from lintloop.terminal import printable

if TYPE_CHECKING:
    from lintloop.linter import FileResult

WATCH_REGISTRATION_ID = "lintloop-config-files"
# Findings no comment can suppress: a syntax error, and a file not analysed (its comments were not read).
UNSUPPRESSIBLE = ("LL001", "LL004")

Result = TypeVar("Result")
# The longest line of a library's log on stderr (a record may quote a whole message's params).
MAX_LOG_LINE = 500


class LintloopProtocol(LanguageServerProtocol):
    _server: LintloopServer

    def __init__(self, server: LintloopServer, converter: Converter) -> None:
        super().__init__(server, converter)
        self.initialize_received = False  # a valid `initialize` request came: the lifecycle has begun
        self.initialized_received = False
        self.answered_early: Opening | None = None  # whose `initialize` handshake answered before pygls loaded

    def receive(self, body: bytes) -> None:
        """Handle one message's body. Every request is answered: a malformed one with its JSON-RPC error
        (not JSON, or beyond the bounds of transport.decode: ParseError; no JSON-RPC request:
        InvalidRequest; params that do not fit its method: InvalidParams), one out of the lifecycle's
        order with the error LSP gives it (see `checked_message`); a malformed notification or response
        is logged and dropped."""
        try:
            data = decode(body)
        except ValueError as exc:
            self.reply_error(None, JsonRpcParseError(f"Parse Error: {exc}"))
            return
        is_dict = isinstance(data, dict)
        msg_id = data.get("id") if is_dict else None
        valid_id = isinstance(msg_id, (int, str)) and not isinstance(msg_id, bool)
        is_notification = is_dict and "method" in data and "id" not in data
        is_response = is_dict and "method" not in data and ("result" in data or "error" in data)
        answered = not (is_notification or is_response)  # a request, or what is no message at all
        try:
            message = self.checked_message(data, valid_id, answered)
            if isinstance(message, types.InitializeRequest):
                self.initialize_received = True
            elif isinstance(message, types.InitializedNotification):
                self.initialized_received = True
            if message is not None:
                self.handle_message(message)
        except JsonRpcException as problem:
            if answered:
                self.reply_error(msg_id if valid_id else None, problem)
            else:
                kind = "notification" if is_notification else "response"
                self._server.log(types.MessageType.Warning, f"lintloop: ignored a malformed {kind}: {problem.message}")
        except Exception:  # noqa: BLE001 - pygls failing on a message (hashing a $/cancelRequest's id) costs it alone
            error = JsonRpcInternalError.of(sys.exc_info())
            if answered:
                self.reply_error(msg_id if valid_id else None, error)
            self._server.log(types.MessageType.Error, f"lintloop: internal error on a message: {error.message}")

    def checked_message(self, data: Any, valid_id: bool, answered: bool) -> Any | None:
        """The message `data` as pygls's structure of it; None for a notification to drop. Raises a
        JsonRpcException where it is none, or comes out of order (LSP 3.17, "Lifecycle Messages"): a
        request before `initialize` is ServerNotInitialized (a notification is dropped, but `exit`),
        a second `initialize` and any request after `shutdown` an InvalidRequest; a request for a method
        the server does not serve is MethodNotFound, before its params are read (a notification of one
        is dropped). `answered`: it is to be answered as a request."""
        _check_envelope(data, valid_id, answered)
        if "method" in data and (problem := self._out_of_order(data["method"], answered)) is not None:
            if answered:
                raise problem
            return None
        try:
            message = self.structure_message(data)
        except JsonRpcInvalidParams as exc:
            cause = exc.__cause__
            if isinstance(cause, ClassValidationError):  # say which fields are wrong
                raise JsonRpcInvalidParams(f"Invalid Params: {'; '.join(transform_error(cause))}") from cause
            raise
        if answered and not isinstance(message, RPCRequest):
            raise JsonRpcInvalidRequest(f"Invalid Request: {data['method']} is a notification")
        return message

    def _out_of_order(self, method: str, answered: bool) -> JsonRpcException | None:
        """Why a request (`answered`) or notification for `method` is refused now: the error a request
        gets (a refused notification is dropped); None if it is taken."""
        if not self.initialize_received and method != (types.INITIALIZE if answered else types.EXIT):
            return JsonRpcServerNotInitialized("Server Not Initialized: the first request is initialize")
        if self._shutdown and method != types.EXIT:
            return JsonRpcInvalidRequest("Invalid Request: the server is shutting down")
        if answered and method == types.INITIALIZE and self.initialize_received:
            return JsonRpcInvalidRequest("Invalid Request: the server is initialized already")
        if not answered and method == types.INITIALIZED and self.initialized_received:
            return JsonRpcInvalidRequest("Invalid Request: the server was told it is initialized already")
        if method not in self.fm.features and method not in self.fm.builtin_features and method != types.CANCEL_REQUEST:
            return JsonRpcMethodNotFound.of(method)
        return None

    def _send_response(self, msg_id: Any, result: Any | None = None, error: Any | None = None) -> None:
        """pygls's, but for the reply to an `initialize` the handshake answered already: withheld, and
        logged should it differ from the one sent (handshake.initialize_result is out of step)."""
        opening = self.answered_early
        if opening is None or opening.answered_id is None or msg_id != opening.answered_id:
            super()._send_response(msg_id, result, error)
            return
        self.answered_early = None
        own = self._converter.unstructure(result) if error is None else None
        if own != opening.answer:
            problem = error.message if error is not None else f"its result would be {own}"
            self._server.log(types.MessageType.Error, "lintloop: internal error: `initialize` was answered before "
                             f"the LSP library loaded, and the server does not agree: {problem}")

    def reply_error(self, msg_id: int | str | None, error: JsonRpcException) -> None:
        # pygls's converter leaves out an id of None; JSON-RPC wants it, as null, where the request's id is unknown.
        response = self._converter.unstructure(types.ResponseErrorMessage(id=msg_id, error=error.to_response_error()))
        self._send_data({**response, "id": msg_id})

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


def _check_envelope(data: Any, valid_id: bool, answered: bool) -> None:
    """Raise JsonRpcInvalidRequest if `data` is no JSON-RPC 2.0 message (its params aside)."""
    if not isinstance(data, dict):
        raise JsonRpcInvalidRequest(f"Invalid Request: a message is a JSON object, not {type(data).__name__}")
    if data.get("jsonrpc") != JsonRPCProtocol.VERSION:
        raise JsonRpcInvalidRequest(f'Invalid Request: "jsonrpc" must be "{JsonRPCProtocol.VERSION}"')
    if "id" in data and not valid_id:
        raise JsonRpcInvalidRequest("Invalid Request: an id is an integer or a string")
    if "method" in data and not isinstance(data["method"], str):
        raise JsonRpcInvalidRequest("Invalid Request: a method is a string")
    if answered and "method" not in data:
        raise JsonRpcInvalidRequest("Invalid Request: a request has a method")


def file_path(uri: str) -> Path | None:
    """The file a `file:` URI names; None for other schemes (an unsaved `untitled:` buffer), and for a
    name no file has (a NUL, a lone surrogate: the document is then linted as an unsaved one)."""
    path = to_fs_path(uri) if uri.startswith("file:") else None
    if not path or "\0" in path:
        return None
    try:
        os.fsencode(path)
    except UnicodeEncodeError:
        return None
    return Path(path)


@dataclass(frozen=True)
class OpenFindings:
    """The findings in one editor document (a text document, or a notebook's cell) as it is now."""

    lint: DocumentLint  # of the document, or of the cell's notebook
    document: TextDocument
    findings: list[Finding]
    target: actions.EditTarget  # this document, for edits of its own (a suppression comment)
    fixes: actions.EditsTarget  # where the fixes' edits go: this document, or the notebook's cells


class LintloopServer(LanguageServer):
    def __init__(self, limits: Limits = Limits(), lint: Callable[[Analysis], FileResult] = lint_analysis) -> None:
        """`limits`: each analysis's time and memory (lintloop.isolation); `lint`: what lints an Analysis
        in the worker (a module-level function: it is pickled)."""
        super().__init__("lintloop", __version__, protocol_cls=LintloopProtocol, notebook_document_sync=NOTEBOOK_SYNC)
        self.settings_cache = SettingsCache()
        self.lints: dict[str, DocumentLint] = {}  # the last delivered lint of each open document and notebook
        # One worker process, for every analysis of a document's text: a crash or a runaway costs that
        # analysis, never the server. Runs of a document are serial, and a run that went stale meanwhile is
        # dropped, not published.
        self.analyses = IsolatedExecutor(limits, worker_context())
        self.lint_in_worker = lint
        self.scheduler = LintScheduler(self.lint, self.snapshot, self.publish, self.report_failure)
        self.docs = RuleDocs()
        self.shutdown_requested = False

    def start_io(self, opening: Opening) -> None:  # type: ignore[override]
        """pygls's start_io on the session `opening` (its messages read within bounds by
        transport.read_messages), each message answered or logged however malformed
        (LintloopProtocol.receive)."""
        self.protocol.set_writer(StdoutWriter(opening.client_out))
        self.protocol.answered_early = opening
        try:
            asyncio.run(self.receive_all(opening.messages))
        except (BrokenPipeError, KeyboardInterrupt, SystemExit):
            pass  # the client has gone, or an `exit` notification ended the server
        finally:
            self.shutdown()

    async def receive_all(self, messages: Iterator[bytes | Refused]) -> None:
        """Handle the client's messages until its stream ends (or an `exit` notification)."""
        loop = asyncio.get_running_loop()
        while (message := await loop.run_in_executor(self.thread_pool, next, messages, None)) is not None:
            if isinstance(message, Refused):
                self.log(types.MessageType.Error, f"lintloop: {message.reason}")
            else:
                self.protocol.receive(message)

    # ----- analyses ------------------------------------------------------------------------
    async def analysed(self, limits: Limits | None, function: Callable[..., Result], *args: Any) -> Result:
        """`function(*args)` run in the worker process within `limits` (None: the server's; raises
        AnalysisFailed, AnalysisError)."""
        return await asyncio.wrap_future(self.analyses.submit_within(limits, function, *args))

    async def lint(self, snapshot: Snapshot) -> DocumentLint:
        """The lint of a snapshot; of one whose analysis failed, its LL004 (raises DocumentConfigError
        for a broken configuration, AnalysisError for a bug)."""
        analysis = await asyncio.to_thread(analysis_of, snapshot, self.settings_cache)
        try:
            result = await self.analysed(analysis.limits, self.lint_in_worker, analysis)
        except AnalysisFailed as failure:
            return not_analysed(analysis, failure.cause)
        return DocumentLint(snapshot, result.findings, result.errors)

    async def safe_fixes(self, snapshot: Snapshot) -> dict[int | None, tuple[str, str]]:
        """What all safe fixes change (see documents.safe_fix_changes); nothing when the configuration
        broke since the lint (the next lint shows its error) or the fixing failed (logged)."""
        try:
            analysis = await asyncio.to_thread(analysis_of, snapshot, self.settings_cache)
            return await self.analysed(analysis.limits, safe_fix_changes, analysis)
        except ConfigError:
            return {}
        except (AnalysisFailed, AnalysisError) as failure:
            self.log_failure(f"fixing {snapshot.display}", failure)
            return {}

    async def suppressions(self, document: TextDocument) -> Suppressions | None:
        """The suppression comments in a document (None if they could not be read: logged). Read in the
        worker: finding comments takes tokenizing, or where the host cannot, parsing."""
        try:
            return await self.analysed(None, Suppressions.scan, document.source)
        except (AnalysisFailed, AnalysisError) as failure:
            self.log_failure(f"reading the comments of {document.uri}", failure)
            return None

    # ----- documents ---------------------------------------------------------------------
    def snapshot(self, uri: str) -> Snapshot | None:
        """The open document or notebook `uri` as it is now (None once closed, and for a notebook's
        cell: cells are linted with their notebook)."""
        notebook = notebook_snapshot(self.workspace, uri, file_path(uri))
        if notebook is not None:
            return notebook
        document = open_document(self.workspace, uri)
        if document is None or cell_place(self.workspace, uri) is not None:
            return None
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
                   if (cell_text := open_document(self.workspace, cell.uri)) is not None}
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
                document = open_document(self.workspace, cell.uri)
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
        self.log_failure(f"linting {snapshot.display}", error)

    def log_failure(self, doing: str, error: Exception) -> None:
        """Tell the client that `doing` ("linting x.py") failed: stopped within its limits, or a bug."""
        if isinstance(error, AnalysisFailed):
            self.log(types.MessageType.Warning, f"lintloop: {doing} stopped: its analysis {error.cause}")
            return
        # A worker's exception comes with the worker's traceback: the one raised here says nothing.
        details = error.details if isinstance(error, AnalysisError) else "".join(traceback.format_exception(error))
        self.log(types.MessageType.Error, f"lintloop: internal error while {doing}:\n{details}")

    def report_server_error(self, error: Exception, source: type[Exception]) -> None:
        """A failure pygls caught outside a request (a notification's handler, sending a message) is
        logged, not shown in a popup as pygls would: most come of a client's notification out of step (a
        change to a notebook never opened); a request's failure is in its answer."""
        if source is not FeatureRequestError:  # pygls wraps a handler's exception: its message names the type
            what = error.message if isinstance(error, JsonRpcException) else f"{type(error).__name__}: {error}"
            self.log(types.MessageType.Error, f"lintloop: a notification failed: {what}")

    def log(self, level: types.MessageType, message: str) -> None:
        self.window_log_message(types.LogMessageParams(type=level, message=message))

    def configuration_changed(self) -> None:
        self.settings_cache.clear()
        notebooks = [notebook.uri for notebook in self.workspace.notebook_documents.values()]
        for uri in [*(document.uri for document in self.workspace.text_documents.values()), *notebooks]:
            self.scheduler.request(uri)  # a cell's request does nothing: it is linted with its notebook

    def edit_target(self, uri: str, version: int | None, document: TextDocument) -> actions.EditTarget:
        capabilities = self.client_capabilities.workspace
        document_changes = bool(capabilities and capabilities.workspace_edit
                                and capabilities.workspace_edit.document_changes)
        return actions.EditTarget(uri, version, document.lines, self.workspace.position_codec, document_changes)


def create_server(limits: Limits = Limits(), lint: Callable[[Analysis], FileResult] = lint_analysis) -> LintloopServer:
    """The server, its features registered (`limits`, `lint`: see LintloopServer)."""
    server = LintloopServer(limits, lint)

    @server.feature(types.INITIALIZE)
    def initialize(ls: LintloopServer, params: types.InitializeParams) -> None:
        options = params.initialization_options
        template = options.get("docsUrl") if isinstance(options, dict) else None
        if template is None:
            return
        problem = url_template_problem(template)
        if problem is not None:
            ls.log(types.MessageType.Warning, f"lintloop: docsUrl ignored: {problem}")
        else:
            ls.docs = RuleDocs(url_template=template)

    @server.feature(types.INITIALIZED)
    async def initialized(ls: LintloopServer, params: types.InitializedParams) -> None:
        # The fork server (importing the engine) and a first worker start now, in the background, once
        # `initialize` is answered: the handshake is as fast as before, and the first lint waits only for
        # what is left of their start.
        ls.analyses.submit(os.getpid)
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
            touched = [finding for finding in current.findings if overlaps(finding, start, end)]
            suppressible = any(finding.code not in UNSUPPRESSIBLE for finding in touched)
            suppressions = await ls.suppressions(current.document) if suppressible else None
            for finding in touched:
                linked = diagnostic(finding, codec, lines, ls.docs, target.version)
                if finding.fix is not None:
                    found.append(actions.fix_action(finding, current.fixes, linked))
                if suppressions is not None and finding.code not in UNSUPPRESSIBLE:
                    found.append(actions.suppress_action(finding, target, suppressions, linked))
        # Fixing all is offered on any of a notebook's cells: the fixes of one cell may need another's code.
        if actions.requested(actions.FIX_ALL_KIND, only) and any(
                f.fix is not None and f.fix.applicability == "safe" for f in lint.findings):
            fix_all = actions.fix_all_action(await ls.safe_fixes(lint.snapshot), current.fixes)
            if fix_all is not None:
                found.append(fix_all)
        # Edits are of the linted version: none are offered for a document that changed while they were made.
        return found if ls.snapshot(lint.snapshot.uri) == lint.snapshot else None

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def on_hover(ls: LintloopServer, params: types.HoverParams) -> types.Hover | None:
        current = ls.current_findings(params.text_document.uri)
        if current is None:
            return None
        codec, lines = ls.workspace.position_codec, current.document.lines
        at = lintloop_position(codec, lines, params.position)
        return hover([f for f in current.findings if overlaps(f, at, at)], codec, lines)

    return server


def serve(server: LintloopServer | None = None, opening: Opening | None = None) -> int:
    """Serve the client on stdin/stdout until it exits (`create_server()` unless `server` is given;
    `opening`: the session as handshake.open_session took it over, else taken over here)."""
    opening = opening or open_session()  # before the fork server starts: it is not to hold the client's pipes
    server = server or create_server()
    _log_in_one_line()
    try:
        server.start_io(opening)
    finally:
        server.analyses.shutdown(wait=False, cancel_futures=True)
    return 0 if server.shutdown_requested else 1


class _OneLineFormatter(logging.Formatter):
    """A log record (pygls's, asyncio's) as one line of stderr, its control characters escaped: the
    first line of its message, and of an exception its type and message. pygls logs each malformed
    message with a traceback; the client is told of each in its own log, or in the request's error."""

    def format(self, record: logging.LogRecord) -> str:
        text = _first_line(record.getMessage())
        if record.exc_info and record.exc_info[1] is not None:
            text += f" ({type(record.exc_info[1]).__name__}: {_first_line(str(record.exc_info[1]))})"
        if len(text) > MAX_LOG_LINE:
            text = text[:MAX_LOG_LINE] + "..."
        text = printable(text)
        return f"lintloop server: {record.levelname.lower()}: {record.name}: {text}"


def _first_line(text: str) -> str:
    return text.split("\n", 1)[0]


def _log_in_one_line() -> None:
    """Warnings and errors of the libraries to stderr, one line each (_OneLineFormatter)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLineFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
