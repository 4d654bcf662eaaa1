"""`lintloop server` survives any message and any document (issue 22): a malformed request gets its
JSON-RPC error, a malformed notification is logged and dropped, a broken or oversized frame is refused
without being held and the messages after it are read; a document whose analysis crashes or never ends
gets an LL004 diagnostic, and the next one is linted by a fresh worker.

Malformed messages are sent as raw bytes to a real server process (no LSP client library sends them);
crashes and runaways are injected by a server whose lint fails as the document's text asks
(`serve_with_faults`, which the worker processes import from this module).
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from lsprotocol import types
from pytest_lsp import client_capabilities

from lintloop.isolation import Limits
from lintloop.linter import FileResult
from lintloop.server.app import create_server, serve
from lintloop.server.documents import Analysis, lint_analysis
from lintloop.server.ruledocs import url_template_problem
from lintloop.bounded_json import MAX_DEPTH
from lintloop.server.transport import (MAX_HEADER_LINE_BYTES, MAX_MESSAGE_BYTES, MAX_MESSAGE_VALUES, Refused,
                                       read_messages)
from lintloop.server.workers import ENGINE_MODULES

from conftest import FIXTURES
from test_server import (SERVER_COMMAND, TIMEOUT_S, change_document, code_actions, next_publish, on_module_loop,
                         open_document, settled, start_server)
from test_server_notebooks import edit_cell, open_notebook, published_for

HOVER_NOWHERE = {"textDocument": {"uri": "untitled:nothing-open"}, "position": {"line": 0, "character": 0}}


# ----- the reader, on byte strings ------------------------------------------------------------------


def frame(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def read_all(data: bytes, max_message_bytes: int = MAX_MESSAGE_BYTES) -> list[bytes | Refused]:
    return list(read_messages(io.BytesIO(data), max_message_bytes))


def test_messages_are_read_with_any_header_order_and_case():
    data = (frame(b'{"a": 1}') + b"content-type: application/vscode-jsonrpc; charset=utf-8\r\n"
            + b"CONTENT-LENGTH: 8\r\n\r\n" + b'{"b": 2}' + b"\r\n" + frame(b"{}"))
    assert read_all(data) == [b'{"a": 1}', b'{"b": 2}', b"{}"]  # a stray blank line between messages is no fault


@pytest.mark.parametrize("fault, reason", [
    (b"Content-Length: -5\r\n\r\n{}", "refused a message whose Content-Length is '-5': not a number of bytes"),
    (b"Content-Length: lots\r\n\r\n{}", "refused a message whose Content-Length is 'lots': not a number of bytes"),
    (b"Content-Length: " + b"9" * 30 + b"\r\n\r\n{}", "more bytes than any stream carries"),
    (b"Content-Type: text/plain\r\n\r\n{}", "refused a message without a Content-Length header"),
    (b"Content-Length: 21\r\n\r\n" + b"x" * 21, "refused a message of 21 bytes, over the maximum of 20 bytes"),
    (b"X-Padding: " + b"x" * (3 * MAX_HEADER_LINE_BYTES) + b"\r\n\r\n{}", "refused a header line longer than 8 KiB"),
])
def test_a_faulty_frame_is_refused_once_and_the_next_message_is_read(fault, reason):
    # The next message's header follows the refused body on the same line, as it would on the wire.
    messages = read_all(fault + frame(b'{"next": true}') + frame(b"{}"), max_message_bytes=20)
    assert len(messages) == 3 and isinstance(messages[0], Refused), messages
    assert reason in messages[0].reason
    assert messages[1:] == [b'{"next": true}', b"{}"]


def test_skipping_a_refused_json_body_never_takes_its_text_for_a_header():
    # Pretty-printed JSON: raw line ends and blank lines between tokens, "Content-Length: 12" in strings.
    refused_body = json.dumps({"text": "Content-Length: 12", "Content-Length: 3": ["\r\n\r\n"]}, indent=1)
    refused_body = refused_body.replace("\n", "\r\n\r\n").encode()
    assert b"\r\n\r\n" in refused_body
    messages = read_all(b"Content-Length: %d\r\n\r\n" % len(refused_body) + refused_body + frame(b"{}"),
                        max_message_bytes=len(refused_body) - 1)
    assert len(messages) == 2 and isinstance(messages[0], Refused) and messages[1] == b"{}"


def test_the_stream_ending_inside_a_message_ends_the_messages():
    assert read_all(frame(b"{}") + b"Content-Length: 10\r\n\r\n{") == [b"{}"]
    assert read_all(b"Content-Length: 10\r\n") == []


# ----- a real server, spoken to in raw bytes ----------------------------------------------------------


INITIALIZE_PARAMS = {"capabilities": {}, "processId": None, "rootUri": None}


class RawSession:
    """A server process sent raw bytes; every message it sends back is kept, in order."""

    def __init__(self, workspace: Path, initialize: bool = True, command: list[str] = SERVER_COMMAND) -> None:
        env = dict(os.environ, XDG_CACHE_HOME=str(workspace / ".xdg-cache"))
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, env=env, cwd=workspace)
        self.received: list[dict] = []
        self._last_id = 0
        threading.Thread(target=self._read, daemon=True).start()
        if initialize:
            self.initialize()

    def initialize(self) -> None:
        assert "result" in self.request("initialize", INITIALIZE_PARAMS)
        self.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})

    def _read(self) -> None:
        stream = self.process.stdout
        while True:
            headers = dict(line.split(b": ", 1) for line in iter(lambda: stream.readline().rstrip(b"\r\n"), b""))
            if not headers:
                return
            self.received.append(json.loads(stream.read(int(headers[b"Content-Length"]))))

    def send_bytes(self, data: bytes) -> None:
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def send(self, message: dict) -> None:
        self.send_bytes(frame(json.dumps(message).encode()))

    def next_id(self) -> int:
        self._last_id += 1
        return self._last_id

    def request(self, method: str, params: object = None) -> dict:
        """The server's response to a well-formed request."""
        msg_id = self.next_id()
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return self.response(msg_id)

    def response(self, msg_id: int | None, after: int = 0) -> dict:
        return self.wait_for(lambda m: "method" not in m and m.get("id") == msg_id, after)

    def wait_for(self, accept: Callable[[dict], bool], after: int = 0) -> dict:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            found = next((m for m in self.received[after:] if accept(m)), None)
            if found is not None:
                return found
            assert self.process.poll() is None, f"the server ended, with {self.process.returncode}"
            time.sleep(0.01)
        raise AssertionError("no such message from the server")

    def logs(self, after: int) -> list[str]:
        return [m["params"]["message"] for m in self.received[after:] if m.get("method") == "window/logMessage"]

    def answers_requests(self) -> None:
        assert self.request("textDocument/hover", HOVER_NOWHERE) == {"jsonrpc": "2.0", "id": self._last_id,
                                                                     "result": None}

    def resident_mib(self) -> float:
        with open(f"/proc/{self.process.pid}/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Iterator[RawSession]:
    """One server for all the faults: each test goes on talking to the server the others left."""
    session = RawSession(tmp_path_factory.mktemp("raw"))
    yield session
    session.close()


def message(**members: object) -> bytes:
    return json.dumps({"jsonrpc": "2.0", **members}).encode()


ID = 1000  # the id of each malformed request (where it has one)


def message_nested(depth: int, opener: str) -> bytes:
    """A hover request (of id ID) whose JSON nests arrays or objects `depth` deep: its params hold a
    member nested `depth - 2` deep. `opener` is "[" or '{"a":'."""
    closer = "]" if opener == "[" else "}"
    inner = depth - 2
    head = message(id=ID, method="textDocument/hover", params=HOVER_NOWHERE)[:-2]  # open: the params, the message
    return head + b', "deep": ' + (opener * inner + "0" + closer * inner).encode() + b"}}"


MALFORMED_REQUESTS = {
    "hover without a position": (message(id=ID, method="textDocument/hover",
                                         params={"textDocument": {"uri": "untitled:x"}}), -32602, ID),
    "code action params of the wrong types": (message(id=ID, method="textDocument/codeAction",
                                                      params={"textDocument": 5, "range": "all", "context": []}),
                                              -32602, ID),
    "hover at a negative line": (message(id=ID, method="textDocument/hover", params={
        "textDocument": {"uri": "untitled:x"}, "position": {"line": -1, "character": 0}}), -32602, ID),
    "params that are no object": (message(id=ID, method="textDocument/hover", params=[1, 2]), -32602, ID),
    "an unknown method": (message(id=ID, method="lintloop/unknown", params={}), -32601, ID),
    "an id that is an object": (message(id={"nested": 1}, method="textDocument/hover", params=HOVER_NOWHERE),
                                -32600, None),
    "an id that is a boolean": (message(id=True, method="shutdown"), -32600, None),
    "a method that is a number": (message(id=ID, method=7), -32600, ID),
    "no method": (message(id=ID, params={}), -32600, ID),
    "no jsonrpc version": (json.dumps({"id": ID, "method": "textDocument/hover", "params": HOVER_NOWHERE}).encode(),
                           -32600, ID),
    "a notification's method": (message(id=ID, method="textDocument/didSave",
                                        params={"textDocument": {"uri": "untitled:x"}}), -32600, ID),
    "a body that is no JSON": (b'{"jsonrpc": "2.0", "id": 1000, "method": ', -32700, None),
    "a body that is no UTF-8": (b'{"jsonrpc": "2.0", "id": "\xff"}', -32700, None),
    "JSON that is an array": (b'[{"jsonrpc": "2.0", "id": 1000, "method": "shutdown"}]', -32600, None),
    "JSON that is a number": (b"42", -32600, None),
    "an encoded surrogate, which is no UTF-8": (b'{"jsonrpc": "2.0", "id": 1, "method": "\xed\xa0\x80"}', -32700, None),
    "params nested 1,000 deep": (message_nested(1000, "["), -32700, None),
    "params nested 100,000 deep in objects": (message_nested(100_000, '{"a":'), -32700, None),
    "JSON one level deeper than the bound": (message_nested(MAX_DEPTH + 1, "["), -32700, None),
    "more values than a message holds": (message(id=ID, method="textDocument/hover", params={
        **HOVER_NOWHERE, "padding": [0] * MAX_MESSAGE_VALUES}), -32700, None),
    "an unknown method without params": (message(id=ID, method="lintloop/unknown"), -32601, ID),
    "a $/ request": (message(id=ID, method="$/lintloop"), -32601, ID),
    "a second initialize": (message(id=ID, method="initialize", params=INITIALIZE_PARAMS), -32600, ID),
    "an id that is a float": (message(id=1.5, method="textDocument/hover", params=HOVER_NOWHERE), -32600, None),
    "an id that is null": (message(id=None, method="textDocument/hover", params=HOVER_NOWHERE), -32600, None),
}


@pytest.mark.parametrize("body, code, reply_id", MALFORMED_REQUESTS.values(), ids=MALFORMED_REQUESTS.keys())
def test_a_malformed_request_gets_its_error_and_the_server_goes_on(raw, body, code, reply_id):
    seen = len(raw.received)
    raw.send_bytes(frame(body))
    answer = raw.response(reply_id, seen)
    assert answer["error"]["code"] == code and "id" in answer, answer
    raw.answers_requests()


def test_a_message_as_deep_as_the_bound_is_served(raw):
    seen = len(raw.received)
    for opener in ("[", '{"a":'):
        body = message_nested(MAX_DEPTH, opener)
        assert json.loads(body)["id"] == ID
        raw.send_bytes(frame(body))
        assert raw.response(ID, seen) == {"jsonrpc": "2.0", "id": ID, "result": None}
        seen = len(raw.received)


MALFORMED_NOTIFICATIONS = {
    "didOpen without its document": message(method="textDocument/didOpen", params={}),
    "didSave with params of the wrong type": message(method="textDocument/didSave", params=5),
    "didChange of a document never opened": message(method="textDocument/didChange", params={
        "textDocument": {"uri": "file:///nowhere/never-opened.py", "version": 2},
        "contentChanges": [{"range": {"start": {"line": 3, "character": 0}, "end": {"line": 4, "character": 0}},
                            "text": "x"}]}),
    "a cancellation naming no id": message(method="$/cancelRequest", params={"id": {"nested": 1}}),
    "an unknown notification": message(method="lintloop/unknown", params={}),
    "a response to no request": message(id=424242, result={"anything": 1}),
    "an error response that is malformed": message(id=424243, error="no object"),
    "a change to a notebook never opened": message(method="notebookDocument/didChange", params={
        "notebookDocument": {"uri": "file:///nowhere/never.ipynb", "version": 2}, "change": {}}),
    "a progress cancel naming an object": message(method="window/workDoneProgress/cancel", params={"token": {"x": 1}}),
}


@pytest.mark.parametrize("body", MALFORMED_NOTIFICATIONS.values(), ids=MALFORMED_NOTIFICATIONS.keys())
def test_a_malformed_notification_or_response_is_dropped_and_the_server_goes_on(raw, body):
    seen = len(raw.received)
    raw.send_bytes(frame(body))
    raw.answers_requests()
    assert not any("method" not in m for m in raw.received[seen:-1]), "nothing answers a notification"
    assert not any(m.get("method") == "window/showMessage" for m in raw.received[seen:]), "a client's fault: no popup"


def test_a_malformed_notification_is_logged(raw):
    seen = len(raw.received)
    raw.send_bytes(frame(MALFORMED_NOTIFICATIONS["didOpen without its document"]))
    raw.answers_requests()
    logs = raw.logs(seen)
    assert len(logs) == 1 and logs[0].startswith("lintloop: ignored a malformed notification: Invalid Params: ")


FRAMING_FAULTS = {
    "a negative Content-Length": (b"Content-Length: -1\r\n\r\n{}", "'-1': not a number of bytes"),
    "a Content-Length that is no number": (b"Content-Length: 12abc\r\n\r\n{}", "'12abc': not a number of bytes"),
    "no Content-Length": (b"Content-Type: application/vscode-jsonrpc\r\n\r\n" + message(id=ID, method="shutdown"),
                          "a message without a Content-Length header"),
    "a Content-Length of 99999999999": (b"Content-Length: 99999999999\r\n\r\n{}",
                                        "a message of 99999999999 bytes, over the maximum of 64 MiB"),
    "a header line of a megabyte": (b"X-Padding: " + b"x" * 2**20 + b"\r\n\r\n", "a header line longer than 8 KiB"),
}


@pytest.mark.parametrize("fault, reason", FRAMING_FAULTS.values(), ids=FRAMING_FAULTS.keys())
def test_a_faulty_frame_is_refused_logged_once_and_later_messages_are_answered(raw, fault, reason):
    seen = len(raw.received)
    raw.send_bytes(fault)
    raw.answers_requests()
    logs = raw.logs(seen)
    assert len(logs) == 1 and logs[0].startswith("lintloop: refused ") and reason in logs[0], logs


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the resident memory is read from /proc")
def test_an_endless_body_is_skipped_in_bounded_memory(raw):
    seen = len(raw.received)
    before = raw.resident_mib()
    raw.send_bytes(b"Content-Length: 99999999999\r\n\r\n")
    peak = before
    for _ in range(256):  # 256 MiB, while the server skips it
        raw.send_bytes(b"x" * 2**20)
        peak = max(peak, raw.resident_mib())
    raw.answers_requests()  # its header follows the skipped bytes: found, read, answered
    assert peak - before < 32, f"the server grew from {before:.0f} to {peak:.0f} MiB"
    assert len(raw.logs(seen)) == 1


def test_a_message_over_the_maximum_is_skipped_and_the_next_is_answered(raw):
    seen = len(raw.received)
    oversized = message(method="textDocument/didOpen", params={"textDocument": {
        "uri": "untitled:huge", "languageId": "python", "version": 1, "text": "x" * MAX_MESSAGE_BYTES}})
    raw.send_bytes(frame(oversized))
    raw.answers_requests()
    assert raw.logs(seen) == [f"lintloop: refused a message of {len(oversized)} bytes, over the maximum of 64 MiB"]


def test_after_shutdown_a_request_gets_an_error_and_exit_ends_the_server(tmp_path):
    session = RawSession(tmp_path)
    try:
        assert session.request("shutdown")["result"] is None
        refused = session.request("textDocument/hover", HOVER_NOWHERE)
        assert refused["error"] == {"code": -32600, "message": "Invalid Request: the server is shutting down"}
        session.send({"jsonrpc": "2.0", "method": "exit"})
        assert session.process.wait(TIMEOUT_S) == 0
    finally:
        session.close()


def published(session: RawSession, uri: str, after: int) -> list[dict]:
    return session.wait_for(lambda m: m.get("method") == "textDocument/publishDiagnostics"
                            and m["params"]["uri"] == uri, after)["params"]["diagnostics"]


def test_before_initialize_a_request_gets_server_not_initialized_and_a_notification_is_dropped(tmp_path):
    # LSP 3.17, "Initialize Request": a request before `initialize` gets -32002; a notification is dropped.
    session = RawSession(tmp_path, initialize=False)
    try:
        assert session.request("textDocument/hover", HOVER_NOWHERE)["error"]["code"] == -32002
        assert session.request("shutdown")["error"]["code"] == -32002
        assert session.request("lintloop/unknown")["error"]["code"] == -32002
        session.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": "untitled:early", "languageId": "python", "version": 1, "text": "import torch\n"}}})
        session.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        session.initialize()
        seen = len(session.received)
        session.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": "untitled:later", "languageId": "python", "version": 1, "text": "import torch\n"}}})
        assert published(session, "untitled:later", seen) == []
        # The dropped didOpen was never linted (its lint would have come first), and nothing was logged.
        assert [m["params"]["uri"] for m in session.received if "method" in m] == ["untitled:later"]
    finally:
        session.close()


def test_exit_before_initialize_ends_the_server_with_1(tmp_path):
    session = RawSession(tmp_path, initialize=False)
    try:
        assert session.request("shutdown")["error"]["code"] == -32002  # a request like any other: refused
        session.send({"jsonrpc": "2.0", "method": "exit"})
        assert session.process.wait(TIMEOUT_S) == 1  # exit without a shutdown
    finally:
        session.close()


def test_after_shutdown_a_notification_is_dropped_and_a_second_shutdown_refused(tmp_path):
    session = RawSession(tmp_path)
    try:
        assert session.request("shutdown")["result"] is None
        assert session.request("shutdown")["error"]["code"] == -32600
        seen = len(session.received)
        session.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": "untitled:late", "languageId": "python", "version": 1, "text": "import torch\n"}}})
        session.send({"jsonrpc": "2.0", "method": "lintloop/unknown", "params": {}})
        assert session.request("textDocument/hover", HOVER_NOWHERE)["error"]["code"] == -32600
        assert not [m for m in session.received[seen:] if "method" in m]
        session.send({"jsonrpc": "2.0", "method": "exit"})
        assert session.process.wait(TIMEOUT_S) == 0
    finally:
        session.close()


@pytest.mark.parametrize("template, problem", [
    ("https://example.org/{code}-{name}.html", None),
    ("https://example.org/{{braces}}/{code}", None),
    ("https://example.org/{code:>999999999}", "no other field such as {code:>999999999}"),
    ("https://example.org/{code.__class__}", "no other field such as {code.__class__}"),
    ("https://example.org/{code!r}", "no other field such as {code!r}"),
    ("https://example.org/{0}", "no other field such as {0}"),
    ("https://example.org/{code", "expected '}' before end of string"),
    ("x" * 2001, "of at most 2,000 characters"),
    (["https://example.org/{code}"], "not list"),
])
def test_a_docs_url_template_has_code_and_name_fields_alone(template, problem):
    found = url_template_problem(template)
    assert found == problem if problem is None else problem in found


def test_an_unusable_docs_url_is_ignored_with_a_warning(tmp_path):
    session = RawSession(tmp_path, initialize=False)
    try:
        options = {"docsUrl": "https://example.org/{code:>999999999}"}
        assert "result" in session.request("initialize", {**INITIALIZE_PARAMS, "initializationOptions": options})
        # Told once the server has read the request: the reply to it may come first (lintloop.server.handshake).
        session.wait_for(lambda message: message.get("method") == "window/logMessage")
        assert session.logs(0) == [("lintloop: docsUrl ignored: a string where {code} and {name} are replaced, "
                                    "no other field such as {code:>999999999}")]
        seen = len(session.received)
        session.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": "untitled:linked", "languageId": "python", "version": 1,
            "text": (FIXTURES / "LL201_bad.py").read_text()}}})
        linked = next(d for d in published(session, "untitled:linked", seen) if d["code"] == "LL201")
        assert linked["codeDescription"]["href"].startswith("file:")  # the rule's documentation file
    finally:
        session.close()


def test_a_second_initialized_notification_is_dropped(raw):
    seen = len(raw.received)
    raw.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
    raw.answers_requests()
    assert not [m for m in raw.received[seen:] if "method" in m], "no second registration, no log"


def test_a_document_holding_a_lone_surrogate_is_LL001_at_it(raw):
    # No UTF-8 file holds U+D800, and CPython reads no source that does; JSON's "\ud800" escape carries it.
    seen = len(raw.received)
    raw.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": "untitled:surrogate", "languageId": "python", "version": 1, "text": "import torch\nx = '\ud800'\n"}}})
    (diagnostic,) = published(raw, "untitled:surrogate", seen)
    assert diagnostic["code"] == "LL001" and "lone surrogate (U+D800)" in diagnostic["message"]
    assert diagnostic["range"]["start"] == {"line": 1, "character": 5}
    assert not raw.logs(seen)


def test_a_notebook_cell_holding_a_lone_surrogate_is_LL001_in_that_cell(raw):
    cells = ["import torch\n", "x = '\ud800'\n"]
    uris = [f"vscode-notebook-cell:/surrogate.ipynb#c{index}" for index in range(len(cells))]
    seen = len(raw.received)
    raw.send({"jsonrpc": "2.0", "method": "notebookDocument/didOpen", "params": {
        "notebookDocument": {"uri": "untitled:surrogate.ipynb", "notebookType": "jupyter-notebook", "version": 1,
                             "cells": [{"kind": 2, "document": uri} for uri in uris]},
        "cellTextDocuments": [{"uri": uri, "languageId": "python", "version": 1, "text": text}
                              for uri, text in zip(uris, cells)]}})
    (diagnostic,) = published(raw, uris[1], seen)
    assert diagnostic["code"] == "LL001" and "lone surrogate (U+D800)" in diagnostic["message"]
    assert diagnostic["range"]["start"] == {"line": 0, "character": 5} and published(raw, uris[0], seen) == []
    assert not raw.logs(seen)


@pytest.mark.parametrize("name", ["a%00b.py", "%ED%A0%80.py", "\ud800.py"])
def test_a_document_whose_uri_names_no_possible_file_is_linted_as_unsaved(raw, tmp_path, name):
    uri = tmp_path.as_uri() + "/" + name
    seen = len(raw.received)
    raw.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": uri, "languageId": "python", "version": 1, "text": (FIXTURES / "LL201_bad.py").read_text()}}})
    assert "LL201" in [d["code"] for d in published(raw, uri, seen)]
    assert not raw.logs(seen)


# ----- documents whose analysis fails ---------------------------------------------------------------

CRASH = "# test: the worker crashes here"
HANG = "# test: the analysis never ends"
BUG = "# test: the analysis raises"
HOG = "# test: the analysis takes all the memory it can"
FAULT_LIMITS = Limits(seconds=2, memory_mib=None)  # short, for the runaway


def faulty_lint(analysis: Analysis) -> FileResult:
    """lint_analysis, failing as the document's text asks (runs in the worker process)."""
    text = analysis.snapshot.text
    if CRASH in text:
        os.kill(os.getpid(), signal.SIGSEGV)
    if HANG in text:
        while True:
            pass
    if BUG in text:
        raise RuntimeError("a rule's bug")
    if HOG in text:  # as a huge document's CST would (7.6 GB for 20 MB, before the limit)
        hoard = []
        while True:
            hoard.append(bytearray(16 * 1024 * 1024))
            hoard[-1][::4096] = b"x" * (16 * 1024 * 1024 // 4096)
    return lint_analysis(analysis)


def serve_with_faults() -> int:
    # A worker imports this module to unpickle faulty_lint: the fork server (which the server starts as
    # it is made) imports it first, on its main thread (lintloop.cli, imported with it, sets a signal
    # handler: a worker's serving thread cannot), and finds it on PYTHONPATH (the fork server of Python
    # 3.10-3.13 leaves out the sys.path it is given).
    ENGINE_MODULES.append(__name__)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")]))
    return serve(create_server(FAULT_LIMITS, faulty_lint))


TESTS = str(Path(__file__).parent)
FAULTY_SERVER = [sys.executable, "-c", f"import sys; sys.path.insert(0, {TESTS!r}); "
                                       "import test_server_faults; sys.exit(test_server_faults.serve_with_faults())"]


def test_a_request_cancelled_while_it_waits_gets_request_cancelled(tmp_path):
    # A code action offering a suppression waits for the worker to read the document's comments; the
    # worker is busy with a runaway analysis meanwhile. Cancelled then, the request's answer is -32800.
    session = RawSession(tmp_path, command=FAULTY_SERVER)
    try:
        seen = len(session.received)
        text = (FIXTURES / "LL201_bad.py").read_text()
        session.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": "untitled:flagged", "languageId": "python", "version": 1, "text": text}}})
        flagged = next(d for d in published(session, "untitled:flagged", seen) if d["code"] == "LL201")
        session.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": "untitled:runaway", "languageId": "python", "version": 1, "text": f"{HANG}\n{text}"}}})
        time.sleep(0.5)  # its analysis is in the worker now, for FAULT_LIMITS.seconds
        msg_id = session.next_id()
        session.send({"jsonrpc": "2.0", "id": msg_id, "method": "textDocument/codeAction", "params": {
            "textDocument": {"uri": "untitled:flagged"}, "range": flagged["range"],
            "context": {"diagnostics": [flagged], "only": ["quickfix"]}}})
        session.send({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": msg_id}})
        assert session.response(msg_id)["error"]["code"] == -32800
        session.answers_requests()
        assert not session.logs(seen)
    finally:
        session.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def faulty(tmp_path_factory):
    capabilities = client_capabilities("visual-studio-code")
    capabilities.notebook_document = types.NotebookDocumentClientCapabilities(
        synchronization=types.NotebookDocumentSyncClientCapabilities(dynamic_registration=True))
    client, _ = await start_server(tmp_path_factory.mktemp("faulty"), capabilities, command=FAULTY_SERVER)
    yield client
    await client.shutdown_session()
    await client.stop()


def not_analysed(diagnostic: types.Diagnostic, cause: str) -> bool:
    return (diagnostic.code == "LL004" and diagnostic.message == f"not analysed: its analysis {cause} [not-analysed]"
            and diagnostic.severity == types.DiagnosticSeverity.Error and diagnostic.source == "lintloop"
            and diagnostic.range == types.Range(types.Position(0, 0), types.Position(0, 0)))


def flagged_script(tmp_path: Path) -> tuple[str, str]:
    """The URI and text of a script with a finding (LL201)."""
    path = tmp_path / "train.py"
    text = (FIXTURES / "LL201_bad.py").read_text()
    path.write_text(text)
    return path.as_uri(), text


@on_module_loop
async def test_a_crashing_analysis_is_LL004_and_the_next_version_is_linted_by_a_fresh_worker(faulty, tmp_path):
    uri, text = flagged_script(tmp_path)
    crashed = await open_document(faulty, uri, f"{CRASH}\n{text}")

    assert len(crashed.diagnostics) == 1
    assert not_analysed(crashed.diagnostics[0], "crashed with SIGSEGV (segmentation fault)"), crashed.diagnostics
    actions = await code_actions(faulty, uri, crashed.diagnostics[0].range)
    assert actions == [], "a file not analysed has no comment that could suppress its LL004"

    seen = len(faulty.published)
    await change_document(faulty, uri, 2, text)
    relinted = await next_publish(faulty, uri, seen)
    assert relinted.version == 2 and [d.code for d in relinted.diagnostics] == ["LL201"]


@on_module_loop
async def test_a_runaway_analysis_is_stopped_at_the_time_limit(faulty, tmp_path):
    uri, text = flagged_script(tmp_path)
    started = time.monotonic()
    stopped = await open_document(faulty, uri, f"{HANG}\n{text}")
    assert time.monotonic() - started < FAULT_LIMITS.seconds + 5
    assert [not_analysed(d, "took longer than 2 s (the file-timeout setting)") for d in stopped.diagnostics] == [True]

    other = await open_document(faulty, "untitled:after-the-runaway", text)
    assert [d.code for d in other.diagnostics] == ["LL201"]


@on_module_loop
async def test_the_time_limit_is_the_document_s_configured_file_timeout(faulty, tmp_path):
    (tmp_path / "lintloop.toml").write_text("file-timeout = 0.5\n")
    uri, text = flagged_script(tmp_path)
    stopped = await open_document(faulty, uri, f"{HANG}\n{text}")
    assert [not_analysed(d, "took longer than 0.5 s (the file-timeout setting)") for d in stopped.diagnostics] == [True]


@on_module_loop
async def test_an_analysis_over_the_memory_limit_is_stopped_and_the_next_document_is_linted(faulty, tmp_path):
    (tmp_path / "lintloop.toml").write_text("file-memory-limit = 400\n")
    uri, text = flagged_script(tmp_path)
    stopped = await open_document(faulty, uri, f"{HOG}\n{text}")
    assert [not_analysed(d, "used more than 400 MiB of memory (the file-memory-limit setting)")
            for d in stopped.diagnostics] == [True]
    other = await open_document(faulty, "untitled:after-the-hog", text)
    assert [d.code for d in other.diagnostics] == ["LL201"]


@on_module_loop
async def test_a_bug_in_an_analysis_is_logged_with_the_worker_s_traceback(faulty):
    seen = len(faulty.log_messages)
    uri = "untitled:buggy"
    faulty.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri=uri, language_id="python", version=1, text=f"{BUG}\nx = 1\n")))
    await settled(lambda: len(faulty.log_messages) > seen)
    (logged,) = faulty.log_messages[seen:]
    assert logged.type == types.MessageType.Error
    assert logged.message.startswith("lintloop: internal error while linting untitled:buggy:\nTraceback")
    assert "RuntimeError: a rule's bug" in logged.message and "faulty_lint" in logged.message
    assert not faulty.diagnostics.get(uri)


@on_module_loop
async def test_a_notebook_whose_analysis_crashes_gets_LL004_on_its_first_cell(faulty, tmp_path):
    path = tmp_path / "crash.ipynb"
    cells = [{"cell_type": "markdown", "metadata": {}, "source": "# Training"},
             {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
              "source": f"{CRASH}\nimport torch\n"}]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    notebook = await open_notebook(faulty, path)

    first, code = notebook.cell_uri(1), notebook.cell_uri(2)
    assert [not_analysed(d, "crashed with SIGSEGV (segmentation fault)") for d in faulty.diagnostics[first]] == [True]
    assert not faulty.diagnostics[code]

    seen = len(faulty.published)
    edit_cell(faulty, notebook, code, "import torch\n")
    await published_for(faulty, [first, code], seen)
    assert not faulty.diagnostics[first] and not faulty.diagnostics[code]
