"""`initialize` answered before the LSP library is imported.

An editor shows nothing until the server answers `initialize`, and importing pygls takes ~0.4 s
(lsprotocol defines some 800 classes). The answer depends on four of the client's capabilities only,
so the first message is read here, with the standard library: where it is an `initialize` request
whose params lsprotocol reads without error, its result is sent at once. The server then handles the
same request as any other, and its own reply to it is withheld (and compared: app.LintloopProtocol).
Anything else, a malformed `initialize` included, is handled by the server as before.

"Reads without error" is decided by initialize_params.json, the shape of the params as lsprotocol
defines them, written by tests/lsp_initialize_schema.py and stricter than lsprotocol's converter (no
"12" for 12): tests/test_server_handshake.py checks that what it accepts the converter reads, and that
the result sent here is pygls's, on real clients' capabilities and on random changes of them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any, BinaryIO

from lintloop import __version__
from lintloop.server.transport import Refused, decode, read_messages

NOTEBOOK_TYPE = "jupyter-notebook"
CELL_LANGUAGE = "python"
# Markdown cells are synced too: a client may send only the cells its selector names, and a
# finding's `cell` counts every cell of the notebook, as `lintloop check` does.
NOTEBOOK_SYNC = {"notebookSelector": [{"notebook": NOTEBOOK_TYPE,
                                       "cells": [{"language": CELL_LANGUAGE}, {"language": "markdown"}]}],
                 "save": True}
INCREMENTAL_SYNC = 2  # TextDocumentSyncKind.Incremental, pygls's default
_SCHEMA_PATH = Path(__file__).with_name("initialize_params.json")
_INT32 = range(-2**31, 2**31)
_UINT31 = range(2**31)


@dataclass
class Opening:
    """The client's session as the server takes it over: its messages (the first one included), where
    replies go, and the id of the `initialize` request answered here (None if none was)."""

    messages: Iterator[bytes | Refused]
    client_out: BinaryIO
    answered_id: int | str | None = None
    answer: dict[str, Any] | None = None  # the result sent for it


def open_session() -> Opening:
    """Take over the client's streams (see `client_streams`), read its first message, and answer it
    here if it is an `initialize` request this module can answer."""
    client_in, client_out = client_streams()
    messages = read_messages(client_in)
    first = next(messages, None)
    if first is None:
        return Opening(messages, client_out)
    opening = Opening(chain([first], messages), client_out)
    if isinstance(first, bytes):
        try:
            request = decode(first)
        except ValueError:
            return opening  # the server answers with its parse error
        answer = initialize_result(request)
        if answer is not None:
            body = json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": answer}).encode()
            try:
                client_out.write(b"Content-Length: %d\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8"
                                 b"\r\n\r\n" % len(body) + body)
                client_out.flush()
            except OSError:
                return opening  # the client has gone: the server finds so as it would have
            opening.answered_id, opening.answer = request["id"], answer
    return opening


def client_streams() -> tuple[BinaryIO, BinaryIO]:
    """The client's stdin and stdout, moved to descriptors of their own; descriptors 0 and 1 then read
    nothing and write to stderr. So no stray print (of a library, of the engine) corrupts the protocol,
    and the worker processes, which inherit 0-2, neither write into the client's pipes nor hold them open."""
    client_in, client_out = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
    with open(os.devnull, "rb") as nothing:
        os.dup2(nothing.fileno(), 0)
    os.dup2(2, 1)
    return client_in, client_out


def initialize_result(message: Any) -> dict[str, Any] | None:
    """The result of the `initialize` request `message` (a decoded JSON-RPC message), as pygls builds it
    for lintloop's server; None where `message` is no such request, or its params may not be read."""
    if not (isinstance(message, dict) and message.get("jsonrpc") == "2.0" and message.get("method") == "initialize"):
        return None
    request_id, params = message.get("id"), message.get("params")
    if isinstance(request_id, bool) or not isinstance(request_id, (int, str)) or not _valid_params(params):
        return None
    capabilities = params["capabilities"]
    encodings = (capabilities.get("general") or {}).get("positionEncodings")
    sync = {"openClose": True, "change": INCREMENTAL_SYNC, "save": True}
    text_sync = (capabilities.get("textDocument") or {}).get("synchronization") or {}
    for will in ("willSave", "willSaveWaitUntil"):  # pygls: the client's flag `and` a feature lintloop has not
        if text_sync.get(will) is not None:
            sync[will] = False
    server: dict[str, Any] = {
        # lintloop's columns are code points: UTF-32 whenever the client offers it (app.LintloopProtocol).
        "positionEncoding": "utf-32" if encodings and "utf-32" in encodings else "utf-16",
        "textDocumentSync": sync,
        "hoverProvider": True,
        "codeActionProvider": {"codeActionKinds": ["quickfix", "source.fixAll.lintloop"]},
        "executeCommandProvider": {"commands": []},
        "workspace": {"workspaceFolders": {"supported": True, "changeNotifications": True}, "fileOperations": {}},
    }
    if capabilities.get("notebookDocument") is not None:
        server["notebookDocumentSync"] = NOTEBOOK_SYNC
    return {"capabilities": server, "serverInfo": {"name": "lintloop", "version": __version__}}


def _valid_params(params: Any) -> bool:
    schema = json.loads(_SCHEMA_PATH.read_text(encoding="utf-8"))
    return _fits(params, {"ref": schema["root"]}, schema["classes"])


def _fits(value: Any, kind: Any, classes: dict[str, Any]) -> bool:
    """Whether the JSON `value` has the shape `kind` (see tests/lsp_initialize_schema.py)."""
    if kind == "any":
        return True
    if kind == "bool":
        return isinstance(value, bool)
    if kind in ("int", "uint"):
        return isinstance(value, int) and not isinstance(value, bool) and value in (_INT32 if kind == "int" else _UINT31)
    if kind == "str":
        return isinstance(value, str)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if "enum" in kind:
        return any(type(value) is type(allowed) and value == allowed for allowed in kind["enum"])
    if "list" in kind:
        return isinstance(value, list) and all(_fits(item, kind["list"], classes) for item in value)
    if "map" in kind:
        return isinstance(value, dict) and all(_fits(item, kind["map"], classes) for item in value.values())
    if "union" in kind:
        return any(_fits(value, member, classes) for member in kind["union"])
    fields = classes[kind["ref"]]
    if not isinstance(value, dict):
        return False
    for name, (required, nullable, field_kind) in fields.items():
        if name not in value:
            if required:
                return False
        elif not (value[name] is None and nullable) and not _fits(value[name], field_kind, classes):
            return False
    return True
