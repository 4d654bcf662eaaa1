"""Decoders: what lintloop reads as JSON or TOML from outside it. The language server's messages (nested
deep, holding millions of values, ids of every JSON type, broken frames, bytes that are no UTF-8, every
order of the lifecycle) and the notebooks and configurations of a working tree (nested deep, huge,
holding lone surrogates).

A server case is `lintloop server` given a byte stream on stdin: `initialize` (unless the case is about
what comes before it), the hostile part, then a hover request (the server still answers), `shutdown` and
`exit`. Its expectations name the answer each request gets (a result, or an error code), and that the
server shows no popup and writes one escaped line per log record on stderr. A file case is `check`,
`fix` or `fix --diff` on a notebook or under a configuration: one LL001 or one configuration error, the
other cells linted, nothing written that is not the fixed cells.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from harness import Case, Outcome

CATEGORY = "decoders"
DESCRIPTION = "JSON and TOML from outside: LSP messages, lifecycle orders, notebooks, configurations"

MAX_DEPTH = 200  # lintloop.bounded_json.MAX_DEPTH, as the server and the notebook reader take it
MAX_VALUES = 1_000_000  # lintloop.server.transport.MAX_MESSAGE_VALUES
MAX_TOML_DEPTH = 100  # lintloop.config.MAX_TOML_DEPTH

PROBE_ID, SHUTDOWN_ID = 900_001, 900_002  # the requests after the hostile part
HOVER_PARAMS = {"textDocument": {"uri": "untitled:nothing-open"}, "position": {"line": 0, "character": 0}}
INITIALIZE_PARAMS = {"processId": None, "rootUri": None, "capabilities": {}}
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
NOT_INITIALIZED = -32002
RESULT = "result"  # an expected answer that is a result, not an error

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]")

# ----- LSP byte streams -------------------------------------------------------------------------------


def frame(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def message(**members: object) -> bytes:
    return json.dumps({"jsonrpc": "2.0", **members}).encode()


def request(msg_id: object, method: str, params: object = None) -> bytes:
    return message(id=msg_id, method=method, **({} if params is None else {"params": params}))


def notification(method: str, params: object = None) -> bytes:
    return message(method=method, **({} if params is None else {"params": params}))


def hover_nested(msg_id: int, depth: int, opener: str) -> bytes:
    """A hover request whose JSON nests `depth` deep (its params hold a member `depth - 2` deep)."""
    inner = depth - 2
    closer = "]" if opener == "[" else "}"
    head = request(msg_id, "textDocument/hover", HOVER_PARAMS)[:-2]
    return head + b', "deep": ' + (opener * inner + "0" + closer * inner).encode() + b"}}"


INITIALIZE = frame(request(1, "initialize", INITIALIZE_PARAMS))
TAIL = (frame(request(PROBE_ID, "textDocument/hover", HOVER_PARAMS)) + frame(request(SHUTDOWN_ID, "shutdown"))
        + frame(notification("exit")))


def server_messages(stdout: bytes) -> list[dict]:
    """The messages the server wrote, in order (a frame that does not decode is a failure of its own)."""
    found, rest = [], stdout
    while rest:
        head, separator, rest = rest.partition(b"\r\n\r\n")
        if not separator:
            raise ValueError(f"bytes after the last message: {head[:80]!r}")
        length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")))
        found.append(json.loads(rest[:length]))
        rest = rest[length:]
    return found


def answers(expected: dict[object, object], logged: tuple[str, ...] = (), exit_code: int = 0
            ) -> Callable[[Outcome], str | None]:
    """The check of a server case: each id of `expected` answered as it says (RESULT, or an error code;
    `None` as an id: answered with id null) and no other, the exit code, what the log says (`logged`:
    substrings, in order), no popup, and stderr one escaped line per record."""

    def check(outcome: Outcome) -> str | None:
        if outcome.exit_code != exit_code:
            return f"exit {outcome.exit_code}, expected {exit_code}"
        try:
            sent = server_messages(outcome.stdout)
        except (ValueError, IndexError) as exc:
            return f"the server's output is no LSP stream: {exc}"
        responses = [m for m in sent if "method" not in m]
        for msg_id, answer in expected.items():
            matching = [m for m in responses if m.get("id") == msg_id and (msg_id is not None or "id" in m)]
            if not matching:
                return f"no answer to id {msg_id!r}"
            got = RESULT if "result" in matching[0] else matching[0].get("error", {}).get("code")
            if got != answer:
                return f"id {msg_id!r} answered {json.dumps(matching[0])[:200]}, expected {answer}"
        unexpected = [m for m in responses if m.get("id") not in expected]
        if unexpected:
            return f"an answer to no request expected: {json.dumps(unexpected[0])[:200]}"
        if any(m.get("method") == "window/showMessage" for m in sent):
            return "a popup: " + json.dumps(next(m for m in sent if m.get("method") == "window/showMessage"))[:200]
        logs = [m["params"]["message"] for m in sent if m.get("method") == "window/logMessage"]
        at = 0
        for part in logged:
            at = next((i + 1 for i in range(at, len(logs)) if part in logs[i]), -1)
            if at < 0:
                return f"no log saying {part!r}: {logs}"
        for line in outcome.err.splitlines():
            if not line.startswith("lintloop server: ") or _CONTROL.search(line):
                return f"stderr is not one escaped line per record: {line[:200]!r}"
        return None

    return check


def server_case(name: str, stream: bytes, expected: dict[object, object], *, initialize: bool = True,
                tail: bool = True, logged: tuple[str, ...] = (), exit_code: int = 0,
                max_rss_mib: float = 400) -> Case:
    stdin = (INITIALIZE if initialize else b"") + stream + (TAIL if tail else b"")
    expected = {**({1: RESULT} if initialize else {}), **expected,
                **({PROBE_ID: RESULT, SHUTDOWN_ID: RESULT} if tail else {})}
    # Content-Length headers end in CR LF: stdout is checked by `answers`, stderr line by line there.
    return Case(CATEGORY, f"server-{name}", {}, ["server"], exits=frozenset({exit_code}), stdin=stdin,
                expect=answers(expected, logged, exit_code), plain_output=False, max_rss_mib=max_rss_mib,
                timeout=120)


def _depth_cases() -> list[Case]:
    cases = []
    for opener, shape in (("[", "arrays"), ('{"a":', "objects")):
        for depth in (MAX_DEPTH, MAX_DEPTH + 1, 1_000, 100_000):
            answer = RESULT if depth <= MAX_DEPTH else PARSE_ERROR
            msg_id = 7 if depth <= MAX_DEPTH else None  # refused unread: answered with id null
            cases.append(server_case(f"{shape}-{depth}-deep", frame(hover_nested(7, depth, opener)), {msg_id: answer}))
    deep = ("[" * 1_000 + "]" * 1_000).encode()
    did_open = notification("textDocument/didOpen", {"textDocument": {
        "uri": "untitled:x", "languageId": "python", "version": 1, "text": "x = 1\n"}, "deep": "DEEP"})
    # A message too deep to read is answered with id null, whatever it was.
    cases.append(server_case("1000-deep-notification", frame(did_open.replace(b'"DEEP"', deep)), {None: PARSE_ERROR}))
    response = message(id=424242, result={"deep": "DEEP"})
    cases.append(server_case("1000-deep-response", frame(response.replace(b'"DEEP"', deep)), {None: PARSE_ERROR}))
    # A refused initialize leaves the server uninitialized: the next one is taken.
    options = request(1, "initialize", {**INITIALIZE_PARAMS, "initializationOptions": "DEEP"})
    cases.append(server_case("1000-deep-initialization-options", frame(options.replace(b'"DEEP"', deep)) + INITIALIZE,
                             {None: PARSE_ERROR, 1: RESULT}, initialize=False))
    return cases


def _size_cases() -> list[Case]:
    def padded(values: list) -> bytes:
        return frame(request(7, "textDocument/hover", {**HOVER_PARAMS, "p": values}))

    return [
        server_case("values-at-the-bound", padded([0] * (MAX_VALUES - 20)), {7: RESULT}),  # 20: the envelope's
        server_case("values-past-the-bound", padded([0] * MAX_VALUES), {None: PARSE_ERROR}),
        server_case("two-million-objects", padded([{}] * 2_000_000), {None: PARSE_ERROR}),
        server_case("ten-megabyte-document", frame(notification("textDocument/didOpen", {"textDocument": {
            "uri": "untitled:big", "languageId": "python", "version": 1, "text": "x = [1, {2: (3,)}]\n" * 500_000}})),
                    {}),
    ]


def _id_cases() -> list[Case]:
    cases = []
    for name, msg_id in (("int", 7), ("negative", -7), ("huge-int", 10**30), ("string", "seven"), ("empty-string", ""),
                         ("megabyte-string", "x" * 2**20)):
        cases.append(server_case(f"id-{name}", frame(request(msg_id, "textDocument/hover", HOVER_PARAMS)),
                                 {msg_id: RESULT}))
    for name, msg_id in (("float", 7.5), ("true", True), ("null", None), ("object", {"id": 7}), ("array", [7])):
        cases.append(server_case(f"id-{name}", frame(request(msg_id, "textDocument/hover", HOVER_PARAMS)),
                                 {None: INVALID_REQUEST}))
    cases.append(server_case("id-nan", frame(b'{"jsonrpc": "2.0", "id": NaN, "method": "shutdown"}'),
                             {None: INVALID_REQUEST}))
    return cases


def _framing_cases() -> list[Case]:
    body = request(7, "textDocument/hover", HOVER_PARAMS)
    refused = "lintloop: refused "
    return [
        server_case("length-huge", b"Content-Length: 99999999999\r\n\r\n{}", {}, logged=(refused,)),
        server_case("length-30-digits", b"Content-Length: " + b"9" * 30 + b"\r\n\r\n{}", {}, logged=(refused,)),
        server_case("length-negative", b"Content-Length: -5\r\n\r\n{}", {}, logged=(refused,)),
        server_case("length-not-a-number", b"Content-Length: twelve\r\n\r\n{}", {}, logged=(refused,)),
        server_case("length-missing", b"Content-Type: application/vscode-jsonrpc\r\n\r\n" + body, {},
                    logged=(refused,)),
        server_case("length-short", b"Content-Length: %d\r\n\r\n" % (len(body) - 5) + body, {None: PARSE_ERROR}),
        server_case("length-zero", b"Content-Length: 0\r\n\r\n", {None: PARSE_ERROR}),
        server_case("header-line-of-a-megabyte", b"X-Padding: " + b"x" * 2**20 + b"\r\n\r\n", {}, logged=(refused,)),
        server_case("lf-line-ends", b"Content-Length: %d\n\n" % len(body) + body, {7: RESULT}),
        # The stream ends inside a body: the server ends as the client is gone, after what came before.
        server_case("truncated-body", frame(body) + b"Content-Length: 1000\r\n\r\n{\"jsonrpc\"", {7: RESULT},
                    tail=False, exit_code=1),
    ]


def _encoding_cases() -> list[Case]:
    hover = request(7, "textDocument/hover", HOVER_PARAMS)
    return [
        server_case("invalid-utf8", frame(hover.replace(b"nothing-open", b"nothing\xff")), {None: PARSE_ERROR}),
        server_case("encoded-surrogate", frame(hover.replace(b"nothing-open", b"\xed\xa0\x80")), {None: PARSE_ERROR}),
        server_case("overlong-utf8", frame(hover.replace(b"nothing-open", b"\xc0\xaf")), {None: PARSE_ERROR}),
        server_case("utf8-bom", frame(b"\xef\xbb\xbf" + hover), {None: PARSE_ERROR}),
        server_case("not-json", frame(b'{"jsonrpc": "2.0", "id": 7, "method": '), {None: PARSE_ERROR}),
        server_case("batch-array", frame(b"[" + hover + b"]"), {None: INVALID_REQUEST}),
        server_case("number", frame(b"42"), {None: INVALID_REQUEST}),
        server_case("5000-digit-number", frame(hover.replace(b'"line": 0', b'"line": ' + b"9" * 5000)),
                    {None: PARSE_ERROR}),
        server_case("infinite-line", frame(hover.replace(b'"line": 0', b'"line": Infinity')), {7: INVALID_PARAMS}),
        server_case("lone-surrogate-escapes", frame(request(7, "textDocument/hover", {
            "textDocument": {"uri": "untitled:\ud800"}, "position": {"line": 0, "character": 0}})) + frame(
            request(8, "lintloop/\udc80")), {7: RESULT, 8: METHOD_NOT_FOUND}),
        server_case("lone-surrogate-document", frame(notification("textDocument/didOpen", {"textDocument": {
            "uri": "file:///nowhere/\ud800.py", "languageId": "python", "version": 1,
            "text": "import torch\nx = '\ud800'\n"}})), {}),
        server_case("nul-in-strings", frame(request(7, "textDocument/hover", {
            "textDocument": {"uri": "file:///a\u0000b.py"}, "position": {"line": 0, "character": 0}})), {7: RESULT}),
        server_case("control-characters-in-method", frame(request(7, "lintloop/\x1b]0;title\x07")),
                    {7: METHOD_NOT_FOUND}),
    ]


def _lifecycle_cases() -> list[Case]:
    hover = frame(request(7, "textDocument/hover", HOVER_PARAMS))
    did_open = frame(notification("textDocument/didOpen", {"textDocument": {
        "uri": "untitled:early", "languageId": "python", "version": 1, "text": "import torch\n"}}))
    shutdown = frame(request(5, "shutdown"))
    exit_ = frame(notification("exit"))
    return [
        server_case("request-before-initialize", hover + INITIALIZE, {7: NOT_INITIALIZED, 1: RESULT}, initialize=False),
        server_case("notification-before-initialize", did_open + frame(notification("initialized", {})) + INITIALIZE,
                    {1: RESULT}, initialize=False),
        server_case("shutdown-before-initialize", shutdown + exit_, {5: NOT_INITIALIZED}, initialize=False,
                    tail=False, exit_code=1),
        server_case("exit-before-initialize", exit_ + hover, {}, initialize=False, tail=False, exit_code=1),
        server_case("unknown-request-before-initialize", frame(request(7, "$/lintloop")) + INITIALIZE,
                    {7: NOT_INITIALIZED, 1: RESULT}, initialize=False),
        server_case("second-initialize", frame(request(2, "initialize", INITIALIZE_PARAMS)), {2: INVALID_REQUEST}),
        server_case("initialized-twice", frame(notification("initialized", {})) * 2, {}),
        server_case("request-after-shutdown", shutdown + hover + did_open + exit_, {5: RESULT, 7: INVALID_REQUEST},
                    tail=False),
        server_case("shutdown-twice", shutdown + frame(request(6, "shutdown")) + exit_, {5: RESULT, 6: INVALID_REQUEST},
                    tail=False),
        server_case("end-of-stream-after-shutdown", shutdown, {5: RESULT}, tail=False),
        server_case("end-of-stream-without-shutdown", hover, {7: RESULT}, tail=False, exit_code=1),
        server_case("exit-without-shutdown", exit_ + hover, {}, tail=False, exit_code=1),
        server_case("exit-as-a-request", frame(request(7, "exit")), {7: INVALID_REQUEST}),
        server_case("unknown-methods", frame(request(7, "lintloop/unknown")) + frame(request(8, "$/unknown"))
                    + frame(notification("lintloop/unknown")) + frame(notification("$/unknown", {"x": 1})),
                    {7: METHOD_NOT_FOUND, 8: METHOD_NOT_FOUND}),
        server_case("cancel-of-nothing", frame(notification("$/cancelRequest", {"id": 12345}))
                    + frame(notification("$/cancelRequest", {"id": {"nested": 1}})), {}),
        # Notifications out of step with what the client opened: pygls's handlers fail; logged, no popup.
        server_case("notebook-change-never-opened", frame(notification("notebookDocument/didChange", {
            "notebookDocument": {"uri": "file:///nowhere/never.ipynb", "version": 2}, "change": {}})), {},
                    logged=("a notification failed: KeyError",)),
        server_case("progress-cancel-of-an-object", frame(notification("window/workDoneProgress/cancel",
                                                                       {"token": {"x": 1}})), {},
                    logged=("a notification failed: TypeError",)),
        server_case("docs-url-template", frame(request(2, "initialize", {**INITIALIZE_PARAMS, "initializationOptions": {
            "docsUrl": "https://example.org/{code:>999999999}"}})), {2: RESULT}, initialize=False,
                    logged=("docsUrl ignored",)),
    ]


# ----- notebooks and configurations ------------------------------------------------------------------

SETUP = ("import torch\nmodel = torch.nn.Linear(3, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
         "loader = [(torch.randn(4, 3), torch.randn(4, 1))] * 64\n")
LEAKY_LOOP = ("total = 0\nfor x, y in loader:\n    loss = ((model(x) - y) ** 2).mean()\n    loss.backward()\n"
              "    optimizer.step()\n    optimizer.zero_grad()\n    total += loss\n")  # LL301 (a safe fix: `.detach()`)


CHECK_NOTEBOOK = ["check", "--no-cache", "--format", "concise", "nb.ipynb"]


def notebook(*sources: str, **extra: object) -> dict:
    cells = [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}
             for source in sources]
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5, **extra}


def nested_notebook(depth: int, where: str) -> str:
    """A notebook of SETUP and LEAKY_LOOP whose JSON nests `depth` deep in the notebook's metadata, a
    cell's, or an output's data."""
    document = notebook(SETUP, LEAKY_LOOP)
    if where == "notebook":
        holder, above = document["metadata"], 2
    elif where == "cell":
        holder, above = document["cells"][1]["metadata"], 4
    else:
        document["cells"][1]["outputs"] = [{"output_type": "display_data", "metadata": {}, "data": {}}]
        holder, above = document["cells"][1]["outputs"][0]["data"], 6
    holder["application/json" if where == "output" else "deep"] = "NESTED"
    inner = depth - above
    return json.dumps(document).replace('"NESTED"', "[" * inner + "0" + "]" * inner)


def findings(codes: list[str], *, message: str = "", unchanged: bool = True) -> Callable[[Outcome], str | None]:
    """The check of a file case: the codes reported (concise format, in order), `message` among them."""

    def check(outcome: Outcome) -> str | None:
        reported = re.findall(r": (LL\d{3}) ", outcome.out)
        if reported != codes:
            return f"reported {reported}, expected {codes}: {outcome.out[-400:]!r}"
        if message and message not in outcome.out:
            return f"no {message!r} in {outcome.out[-400:]!r}"
        return None

    return check


def _notebook_cases() -> list[Case]:
    cases = []
    for where in ("notebook", "cell", "output"):
        for depth in (MAX_DEPTH, MAX_DEPTH + 1, 100_000):
            deep = depth > MAX_DEPTH
            expected = ["LL001"] if deep else ["LL301"]
            cases.append(Case(CATEGORY, f"notebook-{depth}-deep-in-{where}",
                              {"project/nb.ipynb": nested_notebook(depth, where)}, CHECK_NOTEBOOK, exits=frozenset({1}),
                              expect=findings(expected, message=f"nested more than {MAX_DEPTH} deep" if deep else "")))
    # Huge: a million empty objects in an output (3 MB; memory stays linear, within the bound).
    wide = notebook(SETUP, LEAKY_LOOP)
    wide["cells"][1]["outputs"] = [{"output_type": "display_data", "metadata": {},
                                    "data": {"application/json": "WIDE"}}]
    wide_text = json.dumps(wide).replace('"WIDE"', "[" + "{}," * 1_000_000 + "{}]")
    cases.append(Case(CATEGORY, "notebook-a-million-objects", {"project/nb.ipynb": wide_text},
                      CHECK_NOTEBOOK, exits=frozenset({1}),
                      expect=findings(["LL301"]), max_rss_mib=1024, timeout=120))
    surrogate = json.dumps(notebook(SETUP, "s = '\ud800'\n", LEAKY_LOOP, metadata={"title": "\udc80"}))
    assert "\\ud800" in surrogate  # JSON's escape: the file itself is ASCII
    for fmt in ("text", "concise", "json", "sarif", "github"):
        cases.append(Case(CATEGORY, f"notebook-lone-surrogate-{fmt}", {"project/nb.ipynb": surrogate},
                          ["check", "--no-cache", "--format", fmt, "nb.ipynb"], exits=frozenset({1}),
                          expect=_mentions("lone surrogate (U+D800)", "LL301")))
    for name, argv in (("fix", ["fix", "--unsafe-fixes", "nb.ipynb"]),
                       ("fix-diff", ["fix", "--diff", "--unsafe-fixes", "nb.ipynb"])):
        cases.append(Case(CATEGORY, f"notebook-lone-surrogate-{name}", {"project/nb.ipynb": surrogate}, argv,
                          exits=frozenset({1}), writes=("project/nb.ipynb",) if name == "fix" else (),
                          expect=_fixed_around_the_surrogate if name == "fix" else None))
    valid = json.dumps(notebook(SETUP, LEAKY_LOOP))
    for name, content, expected in (
            ("invalid-utf8", valid.encode().replace(b"torch", b"t\xffrch", 1), "LL001"),
            ("bom", b"\xef\xbb\xbf" + valid.encode(), "LL301"),  # read as Python source is: the BOM left out
            ("nan", valid.replace('"nbformat_minor": 5', '"nbformat_minor": 5, "x": NaN'), "LL301"),
            ("5000-digit-number", valid.replace('"nbformat_minor": 5', '"nbformat_minor": 5, "y": 1' + "0" * 5000),
             "LL001"),
            ("top-level-array", "[" + valid + "]", "LL001"),
            ("truncated", valid[:-20], "LL001")):
        cases.append(Case(CATEGORY, f"notebook-{name}", {"project/nb.ipynb": content},
                          CHECK_NOTEBOOK, exits=frozenset({1}),
                          expect=findings([expected])))
    return cases


def _mentions(*parts: str) -> Callable[[Outcome], str | None]:
    def check(outcome: Outcome) -> str | None:
        missing = [part for part in parts if part not in outcome.out]
        return f"no {missing} in {outcome.out[-400:]!r}" if missing else None

    return check


def _fixed_around_the_surrogate(outcome: Outcome) -> str | None:
    """`fix` fixed the loop's cell, left the surrogate's as it was (an escape, the file still ASCII)."""
    text = outcome.written.get("project/nb.ipynb", b"")
    if not text.isascii() or b"\\ud800" not in text:
        return "the notebook's surrogate escape was not kept as it was"
    if b"total += loss.detach()" not in text:
        return "the loop's cell was not fixed"
    return None


def _config_cases() -> list[Case]:
    cases = []
    shapes = {"arrays": ("[", "]", ""), "inline-tables": ("{a = ", "}", "1"), "mixed": ("[{a = ", "}]", "1")}
    for shape, (opener, closer, core) in shapes.items():
        per_level = 2 if shape == "mixed" else 1
        for depth in (MAX_TOML_DEPTH, MAX_TOML_DEPTH + 1, 100_000):
            count = depth // per_level + (depth % per_level)
            value = opener * count + core + closer * count
            for name in ("pyproject.toml", "lintloop.toml"):
                text = ('[tool.lintloop]\nselect = ["LL301"]\n[tool.other]\n' if name == "pyproject.toml" else
                        'select = ["LL301"]\n') + f"x = {value}\n"
                too_deep = depth > MAX_TOML_DEPTH
                if name == "lintloop.toml" and not too_deep:
                    continue  # an unknown key there: the deep value would be refused for its name
                cases.append(Case(CATEGORY, f"config-{name}-{shape}-{depth}-deep", {
                    f"project/{name}": text, "project/train.py": SETUP + LEAKY_LOOP},
                    ["check", "--no-cache", "--format", "concise", "train.py"],
                    exits=frozenset({2} if too_deep else {1}),
                    expect=(_config_refused(f"nested more than {MAX_TOML_DEPTH} deep") if too_deep
                            else findings(["LL301"]))))
    for name, content in (("invalid-utf8", b'[tool.lintloop]\nselect = ["LL301"]  # caf\xe9\n'),
                          ("surrogate-escape", b'[tool.lintloop]\nselect = ["LL301"]\nx = "\\ud800"\n'),
                          ("huge-integer", b"[tool.lintloop]\njobs = " + b"9" * 5000 + b"\n"),
                          ("nul", b'[tool.lintloop]\nselect = ["LL\x00301"]\n')):
        cases.append(Case(CATEGORY, f"config-{name}", {"project/pyproject.toml": content,
                                                          "project/train.py": SETUP + LEAKY_LOOP},
                          ["check", "--no-cache", "train.py"], exits=frozenset({2}),
                          expect=_config_refused("cannot read configuration")))
    return cases


def _config_refused(part: str) -> Callable[[Outcome], str | None]:
    def check(outcome: Outcome) -> str | None:
        lines = outcome.err.strip().splitlines()
        if len(lines) != 1 or part not in lines[0]:
            return f"not one line saying {part!r}: {outcome.err[-400:]!r}"
        return None

    return check


def cases(quick: bool) -> list[Case]:
    every = [*_depth_cases(), *_size_cases(), *_id_cases(), *_framing_cases(), *_encoding_cases(),
             *_lifecycle_cases(), *_notebook_cases(), *_config_cases()]
    if not quick:
        return every
    # A cross-section (each server case costs a server's start): tests/test_server_faults.py has the rest.
    chosen = ("server-arrays-1000-deep", "server-values-past-the-bound", "server-length-huge",
              "server-request-before-initialize", "server-request-after-shutdown",
              "notebook-100000-deep-in-output", "notebook-lone-surrogate-fix",
              "config-pyproject.toml-inline-tables-100000-deep")
    by_name = {case.name: case for case in every}
    return [by_name[name] for name in chosen]
