"""`lintloop server` driven as an editor drives it: a real server process, spoken to over LSP (pytest-lsp).

Expected positions, codes and fixed texts come from the CLI on the same files, never written here.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import textwrap
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import pytest_asyncio
from lsprotocol import types
from pygls.protocol import default_converter
from pygls.uris import to_fs_path
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features

from lintloop import __version__
from lintloop.finding import Edit, Finding
from lintloop.linter import apply_edits, lint_text
from lintloop.rule import RuleSet
from lintloop.rules import BY_CODE
from lintloop.runtime_probe import store as probe_store
from lintloop.runtime_probe.verdicts import describe
from lintloop.server.actions import comment_line, suppression_edit
from lintloop.server.documents import DocumentLint, Snapshot
from lintloop.server.scheduling import LintScheduler
from lintloop.suppression import Suppressions

from conftest import FIXTURES

# The async tests share the module's event loop, where the module's server lives.
on_module_loop = pytest.mark.asyncio(loop_scope="module")

SERVER_COMMAND = [sys.executable, "-m", "lintloop", "server"]
TIMEOUT_S = 30.0
# A line whose flagged call comes after a character outside the Basic Multilingual Plane.
NON_BMP_LINE = '    emoji = "\U0001F600"; print("loss", loss)\n'


class RecordingClient(LanguageClient):
    """pytest-lsp's client, also keeping every diagnostics notification (in order) and registration."""

    def __init__(self) -> None:
        super().__init__(converter_factory=default_converter)
        self.published: list[types.PublishDiagnosticsParams] = []
        self.registrations: list[types.Registration] = []


def _on_publish(client: RecordingClient, params: types.PublishDiagnosticsParams) -> None:
    client.published.append(params)
    client.diagnostics[params.uri] = params.diagnostics


def _on_register(client: RecordingClient, params: types.RegistrationParams) -> None:
    client.registrations.extend(params.registrations)


def recording_client() -> RecordingClient:
    client = RecordingClient()
    register_lsp_features(client, {**DEFAULT_CLIENT_FEATURES, types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS: _on_publish,
                                   types.CLIENT_REGISTER_CAPABILITY: _on_register})
    return client


async def start_server(workspace: Path, capabilities: types.ClientCapabilities,
                       initialization_options: dict | None = None, command: list[str] = SERVER_COMMAND
                       ) -> tuple[RecordingClient, types.InitializeResult]:
    env = dict(os.environ, XDG_CACHE_HOME=str(workspace / ".xdg-cache"))
    client = await ClientServerConfig(server_command=command, client_factory=recording_client,
                                      server_env=env).start()
    result = await client.initialize_session(types.InitializeParams(
        capabilities=capabilities, root_uri=workspace.as_uri(), initialization_options=initialization_options,
        workspace_folders=[types.WorkspaceFolder(uri=workspace.as_uri(), name=workspace.name)]))
    return client, result


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("workspace")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(workspace: Path):
    """One server for the module, talking to a client with VS Code's capabilities (UTF-16 positions,
    versioned document edits, dynamic registration of file watchers)."""
    client, _ = await start_server(workspace, client_capabilities("visual-studio-code"))
    yield client
    await client.shutdown_session()
    await client.stop()


def copy_fixture(name: str, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(FIXTURES / name, directory / name))


def cli_findings(run_cli, path: Path) -> list[dict]:
    _, out, _ = run_cli("check", "--format", "json", "--no-cache", path.name, cwd=path.parent)
    return json.loads(out)


async def next_publish(client: RecordingClient, uri: str, after: int,
                       accept: Callable[[types.PublishDiagnosticsParams], bool] = lambda _: True
                       ) -> types.PublishDiagnosticsParams:
    """The first diagnostics notification for `uri` received after the `after` first ones that `accept`s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT_S
    while loop.time() < deadline:
        for params in client.published[after:]:
            if params.uri == uri and accept(params):
                return params
        await asyncio.sleep(0.02)
    raise AssertionError(f"no diagnostics published for {uri}")


async def settled(condition: Callable[[], bool]) -> None:
    """Wait until `condition()` holds (a test failure after TIMEOUT_S)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT_S
    while not condition():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def open_document(client: RecordingClient, uri: str, text: str) -> types.PublishDiagnosticsParams:
    seen = len(client.published)
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    return await next_publish(client, uri, seen)


async def change_document(client: RecordingClient, uri: str, version: int, text: str) -> None:
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        [types.TextDocumentContentChangeWholeDocument(text=text)]))


async def code_actions(client: RecordingClient, uri: str, where: types.Range,
                       only: list[str] | None = None) -> list[types.CodeAction]:
    context = types.CodeActionContext(diagnostics=list(client.diagnostics.get(uri, [])), only=only)
    answer = await client.text_document_code_action_async(types.CodeActionParams(
        types.TextDocumentIdentifier(uri), where, context))
    return [a for a in answer or [] if isinstance(a, types.CodeAction)]


def applied(text: str, edit: types.WorkspaceEdit, uri: str, version: int) -> str:
    """`text` with the workspace edit's edits for `uri` applied (as an editor does: all at once)."""
    assert edit.document_changes, "a client supporting documentChanges gets versioned edits"
    edits = []
    for change in edit.document_changes:
        assert isinstance(change, types.TextDocumentEdit)
        assert (change.text_document.uri, change.text_document.version) == (uri, version)
        # Lines and UTF-16 columns of an ASCII line are lintloop's lines and columns less one.
        edits += [Edit(e.range.start.line + 1, e.range.start.character + 1, e.range.end.line + 1,
                       e.range.end.character + 1, e.new_text) for e in change.edits]
    return apply_edits(text, edits)


def spans(diagnostics) -> list[tuple]:
    return sorted((d.code, d.range.start.line + 1, d.range.start.character + 1, d.range.end.line + 1,
                   d.range.end.character + 1) for d in diagnostics)


def diagnostic_text(finding: dict) -> str:
    """What an editor shows for a CLI finding: its headline and rule name, then its note and help."""
    return "\n".join([f"{finding['message']} [{finding['name']}]",
                      *(f"{label}: {finding[label]}" for label in ("note", "help") if finding[label])])


def cli_spans(findings: list[dict]) -> list[tuple]:
    return sorted((f["code"], f["line"], f["column"], f["end_line"], f["end_column"]) for f in findings)


@on_module_loop
async def test_diagnostics_are_the_cli_findings(client, workspace, run_cli):
    path = copy_fixture("LL201_bad.py", workspace / "diagnostics")
    expected = cli_findings(run_cli, path)
    assert expected, "the fixture must have findings"

    published = await open_document(client, path.as_uri(), path.read_text())

    assert published.version == 1
    assert spans(published.diagnostics) == cli_spans(expected)
    by_code = {f["code"]: f for f in expected}
    for diagnostic in published.diagnostics:
        finding = by_code[diagnostic.code]
        assert diagnostic.source == "lintloop"
        assert diagnostic.message == diagnostic_text(finding)
        assert diagnostic.severity == {"error": types.DiagnosticSeverity.Error,
                                       "warning": types.DiagnosticSeverity.Warning}[finding["severity"]]
        docs = Path(to_fs_path(diagnostic.code_description.href))
        assert docs == workspace / ".xdg-cache" / "lintloop" / "docs" / __version__ / f"{diagnostic.code}.md"
        assert finding["name"] in docs.read_text()
        assert diagnostic.data["version"] == 1


@on_module_loop
async def test_safe_fix_and_fix_all_give_what_lintloop_fix_writes(client, workspace, run_cli):
    path = copy_fixture("LL201_bad.py", workspace / "fix")
    text = path.read_text()
    published = await open_document(client, path.as_uri(), text)
    reference = copy_fixture("LL201_bad.py", workspace / "fix-reference")
    run_cli("fix", reference.name, cwd=reference.parent)
    fixed = reference.read_text()
    assert fixed != text
    fixable = [d for d in published.diagnostics if d.data["fix"]]

    actions = await code_actions(client, path.as_uri(), fixable[0].range)
    fix = next(a for a in actions if a.title.startswith(f"Fix {fixable[0].code}: "))
    assert fix.kind == types.CodeActionKind.QuickFix and fix.is_preferred
    assert "(unsafe)" not in fix.title
    assert applied(text, fix.edit, path.as_uri(), 1) == fixed

    whole_file = types.Range(types.Position(0, 0), types.Position(0, 0))
    fix_all = await code_actions(client, path.as_uri(), whole_file, only=[types.CodeActionKind.SourceFixAll])
    assert [a.kind for a in fix_all] == ["source.fixAll.lintloop"]
    assert applied(text, fix_all[0].edit, path.as_uri(), 1) == fixed


@on_module_loop
async def test_unsafe_fix_is_marked_and_not_preferred(client, workspace, run_cli):
    path = copy_fixture("LL301_tf_bad.py", workspace / "unsafe")
    unsafe = [f for f in cli_findings(run_cli, path) if f["fix"] and f["fix"]["applicability"] == "unsafe"]
    assert unsafe, "the fixture must have an unsafe fix"
    published = await open_document(client, path.as_uri(), path.read_text())
    diagnostic = next(d for d in published.diagnostics if d.code == unsafe[0]["code"])

    actions = await code_actions(client, path.as_uri(), diagnostic.range)

    fix = next(a for a in actions if a.title.startswith(f"Fix {diagnostic.code}: "))
    assert fix.title.endswith("(unsafe)")
    assert not fix.is_preferred


@on_module_loop
async def test_suppress_action_silences_the_finding(client, workspace):
    path = copy_fixture("LL201_bad.py", workspace / "suppress")
    text = path.read_text()
    published = await open_document(client, path.as_uri(), text)
    diagnostic = next(d for d in published.diagnostics if d.code == "LL201")
    actions = await code_actions(client, path.as_uri(), diagnostic.range)
    suppress = next(a for a in actions if a.title == "Suppress LL201 on this line")
    suppressed = applied(text, suppress.edit, path.as_uri(), 1)
    assert suppressed.splitlines()[diagnostic.range.start.line].endswith("  # lintloop: ignore[LL201]")

    seen = len(client.published)
    await change_document(client, path.as_uri(), 2, suppressed)
    after = await next_publish(client, path.as_uri(), seen)

    assert after.version == 2
    assert [d.code for d in after.diagnostics] == [d.code for d in published.diagnostics if d.code != "LL201"]


def test_suppression_joins_an_existing_ignore_comment():
    text = "print(x)  # lintloop: ignore[LL101]\n"
    edit = suppression_edit("LL201", 1, text.splitlines(keepends=True), Suppressions.scan(text))
    assert apply_edits(text, [edit]) == "print(x)  # lintloop: ignore[LL101, LL201]\n"


def test_a_suppression_after_a_backslash_continuation_goes_on_the_statement_s_last_line():
    text = textwrap.dedent("""\
        import tensorflow as tf

        @tf.function
        def step(x):
            y = print(x) or \\
                x
            return y
        """)
    (finding,) = [f for f in lint_text("t.py", text, RuleSet([BY_CODE["LL201"]], {})).findings]
    lines = text.splitlines(keepends=True)
    line = comment_line(finding, lines)
    assert (finding.line, line) == (5, 6)
    fixed = apply_edits(text, [suppression_edit("LL201", line, lines, Suppressions.scan(text))])
    assert lint_text("t.py", fixed, RuleSet([BY_CODE["LL201"]], {})).findings == []


def test_scheduler_drops_stale_results_reports_failures_and_debounces():
    uri = "untitled:scheduled"
    document: dict[str, Snapshot] = {}
    linted: list[Snapshot] = []
    delivered: list[DocumentLint] = []
    failed: list[tuple[Snapshot, Exception]] = []

    def lint(snapshot: Snapshot) -> DocumentLint:
        linted.append(snapshot)
        if snapshot.text == "crash":
            raise RuntimeError("a rule crashed")
        if snapshot.text == "edited while linting":
            document[uri] = Snapshot(uri, snapshot.version + 1, "newer", None)
        return DocumentLint(snapshot)

    async def scenario() -> None:
        with ThreadPoolExecutor(max_workers=1) as executor:
            async def lint_off_the_loop(snapshot: Snapshot) -> DocumentLint:
                return await asyncio.get_running_loop().run_in_executor(executor, lint, snapshot)

            scheduler = LintScheduler(lint_off_the_loop, document.get, delivered.append,
                                      lambda snapshot, error: failed.append((snapshot, error)))
            document[uri] = Snapshot(uri, 1, "edited while linting", None)
            scheduler.request(uri)
            await settled(lambda: len(linted) == 1)
            document[uri] = Snapshot(uri, 3, "crash", None)
            scheduler.request(uri)
            await settled(lambda: len(failed) == 1)
            document[uri] = Snapshot(uri, 4, "typed", None)
            scheduler.request(uri, delay=0.1)
            scheduler.request(uri, delay=0.1)  # a newer change cancels the pending run
            await settled(lambda: len(delivered) == 1)
            await asyncio.sleep(0.3)  # a run that was not cancelled would have come by now

    asyncio.run(scenario())

    assert [s.text for s in linted] == ["edited while linting", "crash", "typed"]
    assert [d.snapshot.version for d in delivered] == [4]  # the first result was stale when it came
    assert [(s.text, str(e)) for s, e in failed] == [("crash", "a rule crashed")]


@on_module_loop
async def test_changes_relint_and_a_stale_version_is_never_published(client, workspace):
    path = copy_fixture("LL201_bad.py", workspace / "change")
    text = path.read_text()
    await open_document(client, path.as_uri(), text)
    fixed = text.replace('    print("loss", loss)', '    tf.print("loss", loss)')
    seen = len(client.published)

    await change_document(client, path.as_uri(), 2, fixed)  # superseded before its debounce ends
    await change_document(client, path.as_uri(), 3, fixed + "\n")
    whole_file = types.Range(types.Position(0, 0), types.Position(len(text.splitlines()), 0))
    assert await code_actions(client, path.as_uri(), whole_file) == []  # positions of version 1 are stale
    latest = await next_publish(client, path.as_uri(), seen)
    await asyncio.sleep(0.5)  # longer than the debounce: a late result for version 2 would arrive now

    assert latest.version == 3
    assert "LL201" not in [d.code for d in latest.diagnostics]
    assert [p.version for p in client.published[seen:] if p.uri == path.as_uri()] == [3]


@on_module_loop
async def test_syntax_error_gives_LL001_and_the_server_goes_on(client, workspace, run_cli):
    path = workspace / "syntax" / "half_typed.py"
    path.parent.mkdir()
    path.write_text("import torch\n\ndef train(model:\n")
    published = await open_document(client, path.as_uri(), path.read_text())

    assert spans(published.diagnostics) == cli_spans(cli_findings(run_cli, path))
    assert [d.code for d in published.diagnostics] == ["LL001"]
    answer = await client.text_document_hover_async(types.HoverParams(
        types.TextDocumentIdentifier(path.as_uri()), published.diagnostics[0].range.start))
    assert "LL001" in answer.contents.value


@on_module_loop
async def test_hover_on_a_finding_shows_the_rule_documentation(client, workspace):
    path = copy_fixture("LL201_bad.py", workspace / "hover")
    published = await open_document(client, path.as_uri(), path.read_text())
    diagnostic = next(d for d in published.diagnostics if d.code == "LL201")

    answer = await client.text_document_hover_async(types.HoverParams(
        types.TextDocumentIdentifier(path.as_uri()), diagnostic.range.start))
    elsewhere = await client.text_document_hover_async(types.HoverParams(
        types.TextDocumentIdentifier(path.as_uri()), types.Position(0, 0)))

    assert answer.contents.kind == types.MarkupKind.Markdown
    assert "LL201" in answer.contents.value and "print-in-tf-function" in answer.contents.value
    assert "**Why it is wrong**" in answer.contents.value and "**How to fix it**" in answer.contents.value
    assert answer.range == diagnostic.range
    assert elsewhere is None


@on_module_loop
async def test_configuration_is_honoured_and_its_changes_relint(client, workspace):
    directory = workspace / "configured"
    path = copy_fixture("LL201_bad.py", directory)
    config = directory / "pyproject.toml"
    config.write_text('[tool.lintloop]\nignore = ["LL201"]\n')
    uri = path.as_uri()
    watched = [r for r in client.registrations if r.method == types.WORKSPACE_DID_CHANGE_WATCHED_FILES]
    assert watched, "the server watches configuration files when the client can register watchers"

    published = await open_document(client, uri, path.read_text())
    assert "LL201" not in [d.code for d in published.diagnostics]

    async def config_changes(content: str) -> types.PublishDiagnosticsParams:
        config.write_text(content)
        seen = len(client.published)
        client.workspace_did_change_watched_files(types.DidChangeWatchedFilesParams(
            [types.FileEvent(uri=config.as_uri(), type=types.FileChangeType.Changed)]))
        return await next_publish(client, uri, seen)

    assert "LL201" in [d.code for d in (await config_changes("[tool.lintloop]\nignore = []\n")).diagnostics]

    shown = len(client.messages)
    broken = await config_changes('[tool.lintloop]\nignroe = ["LL201"]\n')
    assert not broken.diagnostics
    await asyncio.sleep(0.1)
    errors = [m for m in client.messages[shown:] if m.type == types.MessageType.Error]
    assert len(errors) == 1 and "'ignroe'" in errors[0].message

    per_file = await config_changes('[tool.lintloop]\nper-file-ignores = {"LL201_*.py" = ["LL201"]}\n')
    assert "LL201" not in [d.code for d in per_file.diagnostics]


@on_module_loop
async def test_recorded_probe_verdict_is_in_the_message(client, workspace, run_cli):
    path = copy_fixture("LL201_bad.py", workspace / "probed")
    (path.parent / "lintloop.toml").write_text("")  # the project root, where `check --probe` keeps its cache
    finding = next(f for f in cli_findings(run_cli, path) if f["code"] == "LL201")
    verdict = {"status": "confirmed",
               "evidence": {"signal": "trace_print", "prints": 1, "function": "train_step", "calls": 6}}
    probed = Finding(str(path), finding["line"], finding["column"], finding["end_line"], finding["end_column"],
                     finding["code"], finding["name"], finding["message"], finding["kind"], finding["severity"],
                     probe=verdict)
    assert probe_store.record(path.parent / ".lintloop_cache", path, path.read_text(), [probed])

    published = await open_document(client, path.as_uri(), path.read_text())

    diagnostic = next(d for d in published.diagnostics if d.code == "LL201")
    assert describe(verdict) in diagnostic.message


@on_module_loop
async def test_untitled_document_is_linted_with_defaults(client):
    text = (FIXTURES / "LL201_bad.py").read_text()
    published = await open_document(client, "untitled:Untitled-1", text)
    assert "LL201" in [d.code for d in published.diagnostics]


@on_module_loop
async def test_a_document_under_a_percent_encoded_uri_is_linted_and_relinted_under_it(client, workspace):
    # Editors encode a space or a non-ASCII letter of a file's name in its URI; pygls keeps the document
    # under the decoded one, and the diagnostics must go to the URI the editor sent.
    path = copy_fixture("LL201_bad.py", workspace / "a folder é")
    uri = path.as_uri()
    assert "%20" in uri and "%C3%A9" in uri
    published = await open_document(client, uri, path.read_text())
    assert "LL201" in [d.code for d in published.diagnostics]

    (path.parent / "lintloop.toml").write_text('ignore = ["LL201"]\n')
    seen = len(client.published)
    client.workspace_did_change_watched_files(types.DidChangeWatchedFilesParams(
        [types.FileEvent(uri=(path.parent / "lintloop.toml").as_uri(), type=types.FileChangeType.Created)]))
    relinted = await next_publish(client, uri, seen)
    assert "LL201" not in [d.code for d in relinted.diagnostics]


def non_bmp_case(directory: Path, run_cli) -> tuple[Path, str, dict]:
    """LL201_bad.py with a non-BMP character before the flagged `print` on its line, and the CLI's finding."""
    path = copy_fixture("LL201_bad.py", directory)
    path.write_text(path.read_text(encoding="utf-8").replace('    print("loss", loss)\n', NON_BMP_LINE),
                    encoding="utf-8")
    finding = next(f for f in cli_findings(run_cli, path) if f["code"] == "LL201")
    return path, path.read_text(encoding="utf-8").splitlines()[finding["line"] - 1], finding


@on_module_loop
async def test_non_bmp_line_in_utf16_columns(client, workspace, run_cli):
    path, line, finding = non_bmp_case(workspace / "utf16", run_cli)
    published = await open_document(client, path.as_uri(), path.read_text(encoding="utf-8"))
    diagnostic = next(d for d in published.diagnostics if d.code == "LL201")

    def utf16(column: int) -> int:
        return len(line[:column - 1].encode("utf-16-le")) // 2

    assert diagnostic.range.start == types.Position(finding["line"] - 1, utf16(finding["column"]))
    assert diagnostic.range.end == types.Position(finding["end_line"] - 1, utf16(finding["end_column"]))
    assert diagnostic.range.start.character == finding["column"]  # the emoji takes two UTF-16 code units


@on_module_loop
async def test_utf32_docs_url_and_clean_exit(tmp_path, run_cli):
    capabilities = types.ClientCapabilities(general=types.GeneralClientCapabilities(position_encodings=[
        types.PositionEncodingKind.Utf8, types.PositionEncodingKind.Utf16, types.PositionEncodingKind.Utf32]))
    client, result = await start_server(tmp_path, capabilities,
                                        {"docsUrl": "https://example.org/rules/{code}-{name}.html"})
    try:
        assert result.capabilities.position_encoding == types.PositionEncodingKind.Utf32
        path, _, finding = non_bmp_case(tmp_path / "utf32", run_cli)
        published = await open_document(client, path.as_uri(), path.read_text(encoding="utf-8"))
        diagnostic = next(d for d in published.diagnostics if d.code == "LL201")
        assert diagnostic.range.start == types.Position(finding["line"] - 1, finding["column"] - 1)
        assert diagnostic.range.end == types.Position(finding["end_line"] - 1, finding["end_column"] - 1)
        assert diagnostic.code_description.href == "https://example.org/rules/LL201-print-in-tf-function.html"
    finally:
        await client.shutdown_session()
        await client.stop()
    # pytest-lsp keeps the server process in `_server` (no public accessor).
    assert client._server.returncode == 0  # shutdown, then exit: the process has ended, with 0


@on_module_loop
async def test_exit_without_shutdown_ends_with_1(tmp_path):
    client, _ = await start_server(tmp_path, types.ClientCapabilities())
    client.exit(None)
    process = client._server
    assert await asyncio.wait_for(process.wait(), TIMEOUT_S) == 1
    await client.stop()
