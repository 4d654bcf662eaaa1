"""`initialize` answered before pygls is imported (lintloop.server.handshake): only where pygls would
read the request without error, and with the very result pygls builds; the server's own reply to it
withheld. Checked on the capabilities real clients send (pytest-lsp's recordings) and on random
changes of them."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lsprotocol import types
from pygls.protocol import default_converter

from lintloop.server import handshake
from lintloop.server.app import LintloopServer, create_server

import lsp_initialize_schema
from test_server_faults import RawSession

CLIENTS = sorted((Path(pytest_lsp.__file__).parent / "clients").glob("*.json"))
CONVERTER = default_converter()


def client_params(recording: Path) -> dict[str, Any]:
    return {"processId": 4242, "rootUri": "file:///work", **json.loads(recording.read_text())}


def request(params: Any, request_id: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": params}


@pytest.fixture(scope="module")
def server() -> Iterator[LintloopServer]:
    made = create_server()
    yield made
    made.analyses.shutdown()


def pygls_result(server: LintloopServer, message: dict[str, Any]) -> Any:
    """What pygls answers `message` with: its result as JSON (raises where it would answer an error)."""
    parsed = CONVERTER.structure(message, types.InitializeRequest)
    steps = server.protocol.lsp_initialize(parsed.params)
    handler, args, _ = next(steps)  # lintloop's own `initialize` handler
    handler(*args)
    try:
        steps.send(None)
    except StopIteration as done:
        return CONVERTER.unstructure(done.value)
    raise AssertionError("lsp_initialize yielded twice")


def test_the_schema_is_lsprotocols():
    """initialize_params.json is what tests/lsp_initialize_schema.py writes from the installed lsprotocol."""
    assert lsp_initialize_schema.SCHEMA_PATH.read_text() == lsp_initialize_schema.rendered(), \
        "run `python tests/lsp_initialize_schema.py`"


# Clients whose capabilities do not fit LSP: pygls reads them anyway, the handshake leaves them to it.
MISFITS = {"neovim_v0.9.1": "a list where textDocument.callHierarchy's object belongs"}


@pytest.mark.parametrize("recording", CLIENTS, ids=lambda path: path.stem)
def test_a_real_clients_initialize_is_answered_early_with_pyglss_result(server, recording):
    message = request(client_params(recording))
    early = handshake.initialize_result(message)
    if recording.stem in MISFITS:
        assert early is None
    else:
        assert early == pygls_result(server, message)


@pytest.mark.parametrize("capabilities", [
    {},
    {"general": {"positionEncodings": ["utf-8", "utf-32"]}},
    {"general": {"positionEncodings": ["utf-8"]}},
    {"general": {"positionEncodings": []}},
    {"general": None},
    {"notebookDocument": {"synchronization": {"dynamicRegistration": True}}},
    {"textDocument": {"synchronization": {"willSave": True, "willSaveWaitUntil": False}}},
    {"textDocument": {"synchronization": {"willSave": None}}},
    {"workspace": {"fileOperations": {"didCreate": True, "willRename": True}}},
], ids=repr)
def test_each_capability_the_result_depends_on(server, capabilities):
    message = request({"processId": None, "rootUri": None, "capabilities": capabilities})
    assert handshake.initialize_result(message) == pygls_result(server, message)


@pytest.mark.parametrize("message", [
    request({"processId": None, "rootUri": None, "capabilities": {}, "trace": "loud"}),  # no TraceValue
    request({"processId": "12", "rootUri": None, "capabilities": {}}),  # pygls reads "12"; we leave it to pygls
    request({"processId": None, "rootUri": None, "capabilities": {"textDocument": {"hover": {"contentFormat": ["x"]}}}}),
    request({"processId": None, "rootUri": None}),  # no capabilities
    request(None),
    request({"processId": None, "rootUri": None, "capabilities": {}}, request_id=True),
    request({"processId": None, "rootUri": None, "capabilities": {}}, request_id=None),
    {"jsonrpc": "2.0", "method": "initialize", "params": {"processId": None, "capabilities": {}}},  # a notification
    {"jsonrpc": "1.0", "id": 1, "method": "initialize", "params": {"processId": None, "capabilities": {}}},
    {"jsonrpc": "2.0", "id": 1, "method": "shutdown"},
    [request({"processId": None, "capabilities": {}})],
], ids=lambda message: json.dumps(message)[:70])
def test_what_is_not_surely_a_good_initialize_is_left_to_pygls(message):
    assert handshake.initialize_result(message) is None


JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False)
                    | st.sampled_from(["", "utf-32", "utf-16", "markdown", "plaintext", "off", "verbose", "quickfix",
                                       "file:///x", "relative"]),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=8)


def paths(value: Any, prefix: tuple = ()) -> Iterator[tuple]:
    """Every place in a JSON value (keys and indexes from the root)."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from paths(item, (*prefix, index))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_changed_initialize_is_answered_early_only_where_pygls_reads_it(server, data):
    """Soundness: a value replaced, added or removed anywhere in a real client's params; where the
    handshake answers, pygls reads the request and builds the same result."""
    params = client_params(data.draw(st.sampled_from(CLIENTS), label="client"))
    for _ in range(data.draw(st.integers(1, 3), label="changes")):
        path = data.draw(st.sampled_from(sorted(paths(params), key=repr)), label="path")
        if not path:
            continue
        parent = params
        for step in path[:-1]:
            parent = parent[step]
        change = data.draw(st.sampled_from(["replace", "remove", "add"]), label="change")
        if change == "remove":
            parent.pop(path[-1])  # a key, or an index
        elif change == "add" and isinstance(parent[path[-1]], dict):
            parent[path[-1]][data.draw(st.sampled_from(["valueSet", "dynamicRegistration", "x", "synchronization"]))] = \
                data.draw(JSON, label="added")
        else:
            parent[path[-1]] = data.draw(JSON, label="value")
    message = request(params)
    early = handshake.initialize_result(copy.deepcopy(message))
    if early is not None:
        assert early == pygls_result(server, message)


def test_the_server_sends_one_reply_to_initialize_and_takes_it_as_any_other(tmp_path):
    session = RawSession(tmp_path, initialize=False)
    try:
        params = client_params(CLIENTS[-1])
        reply = session.request("initialize", params)
        assert reply["result"] == handshake.initialize_result(request(params))
        session.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        session.answers_requests()  # the server took `initialize`: it answers requests
        assert [m.get("id") for m in session.received if "method" not in m].count(1) == 1
        assert session.logs(0) == []  # pygls's own result agreed with the early one
        # A second `initialize` reaches pygls, which refuses it (the handshake reads the first message only).
        assert session.request("initialize", params)["error"]["code"] == -32600
    finally:
        session.close()


def test_an_initialize_the_handshake_leaves_gets_pyglss_answer(tmp_path):
    session = RawSession(tmp_path, initialize=False)
    try:
        reply = session.request("initialize", {"processId": None, "rootUri": None, "capabilities": {},
                                               "trace": "loud"})
        assert reply["error"]["code"] == -32602 and "trace" in reply["error"]["message"]
        session.initialize()  # a good one is then answered, by pygls
        session.answers_requests()
    finally:
        session.close()
