"""`lintloop server` on Jupyter notebooks, driven as VS Code drives it: notebook document sync, with a
text document per cell (`vscode-notebook-cell:` URIs), diagnostics published per cell.

Expected positions, codes and fixed cell texts come from the CLI on the notebook's file, never written here.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import pytest_asyncio
from lsprotocol import types
from pytest_lsp import client_capabilities

from lintloop.finding import Edit
from lintloop.linter import apply_edits

from conftest import FIXTURES
from test_server import (RecordingClient, cli_findings, code_actions, diagnostic_text, next_publish, on_module_loop,
                         settled, start_server)

NOTEBOOKS = FIXTURES / "notebooks"


@dataclass
class OpenNotebook:
    """A notebook as the client has it open: its cells' URIs and texts, and the versions it sent."""

    uri: str
    cells: list[types.NotebookCell]
    texts: dict[str, str]  # by cell URI
    cell_versions: dict[str, int] = field(default_factory=dict)
    version: int = 1

    def cell_uri(self, place: int) -> str:
        """The URI of the cell at 1-based `place` (markdown cells counted, as a finding's `cell`)."""
        return self.cells[place - 1].document

    @property
    def code_cells(self) -> list[str]:
        return [cell.document for cell in self.cells if cell.kind == types.NotebookCellKind.Code]


def cell_uri(path: Path, handle: int) -> str:
    """A cell URI as VS Code makes it: the notebook's path, and a fragment naming the cell."""
    return f"vscode-notebook-cell:{path.as_posix()}#W{handle}sZmlsZQ%3D%3D"


def copy_notebook(name: str, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(NOTEBOOKS / name, directory / name))


def cell_sources(path: Path) -> list[str]:
    return ["".join(cell["source"]) for cell in json.loads(path.read_text())["cells"]]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def session(tmp_path_factory):
    """One server for the module, and its answer to `initialize`; the client has VS Code's capabilities
    and syncs notebooks."""
    capabilities = client_capabilities("visual-studio-code")
    capabilities.notebook_document = types.NotebookDocumentClientCapabilities(
        synchronization=types.NotebookDocumentSyncClientCapabilities(dynamic_registration=True))
    client, result = await start_server(tmp_path_factory.mktemp("notebooks"), capabilities)
    yield client, result
    await client.shutdown_session()
    await client.stop()


@pytest.fixture(scope="module")
def client(session) -> RecordingClient:
    return session[0]


async def open_notebook(client: RecordingClient, path: Path) -> OpenNotebook:
    """Open the notebook file's cells as VS Code does, and wait for the diagnostics of every code cell."""
    data = json.loads(path.read_text())
    cells, documents = [], []
    for handle, cell in enumerate(data["cells"]):
        code = cell["cell_type"] == "code"
        uri = cell_uri(path, handle)
        cells.append(types.NotebookCell(kind=types.NotebookCellKind.Code if code else types.NotebookCellKind.Markup,
                                        document=uri))
        documents.append(types.TextDocumentItem(uri=uri, language_id="python" if code else "markdown", version=1,
                                                text="".join(cell["source"])))
    notebook = OpenNotebook(path.as_uri(), cells, {d.uri: d.text for d in documents},
                            {d.uri: d.version for d in documents})
    seen = len(client.published)
    client.notebook_document_did_open(types.DidOpenNotebookDocumentParams(
        types.NotebookDocument(uri=notebook.uri, notebook_type="jupyter-notebook", version=1, cells=cells),
        documents))
    await published_for(client, notebook.code_cells, seen)
    return notebook


async def published_for(client: RecordingClient, uris: list[str], after: int) -> None:
    await settled(lambda: all(any(p.uri == uri for p in client.published[after:]) for uri in uris))


def change_notebook(client: RecordingClient, notebook: OpenNotebook, cells: types.NotebookDocumentCellChanges) -> None:
    notebook.version += 1
    client.notebook_document_did_change(types.DidChangeNotebookDocumentParams(
        types.VersionedNotebookDocumentIdentifier(version=notebook.version, uri=notebook.uri),
        types.NotebookDocumentChangeEvent(cells=cells)))


def change_structure(client: RecordingClient, notebook: OpenNotebook,
                     structure: types.NotebookDocumentCellChangeStructure) -> None:
    change_notebook(client, notebook, types.NotebookDocumentCellChanges(structure=structure))


def edit_cell(client: RecordingClient, notebook: OpenNotebook, uri: str, text: str) -> None:
    notebook.cell_versions[uri] += 1
    notebook.texts[uri] = text
    change_notebook(client, notebook, types.NotebookDocumentCellChanges(text_content=[
        types.NotebookDocumentCellContentChanges(
            types.VersionedTextDocumentIdentifier(uri=uri, version=notebook.cell_versions[uri]),
            [types.TextDocumentContentChangeWholeDocument(text=text)])]))


def cell_spans(client: RecordingClient, notebook: OpenNotebook) -> list[tuple]:
    return sorted((uri, d.code, d.range.start.line + 1, d.range.start.character + 1, d.range.end.line + 1,
                   d.range.end.character + 1) for uri in notebook.code_cells for d in client.diagnostics[uri])


def cli_cell_spans(findings: list[dict], notebook: OpenNotebook) -> list[tuple]:
    return sorted((notebook.cell_uri(f["cell"]), f["code"], f["line"], f["column"], f["end_line"], f["end_column"])
                  for f in findings)


def applied_to_cells(notebook: OpenNotebook, edit: types.WorkspaceEdit) -> dict[str, str]:
    """The cells' texts with the workspace edit applied (versioned edits, as VS Code is sent)."""
    texts = dict(notebook.texts)
    assert edit.document_changes, "a client supporting documentChanges gets versioned edits"
    for change in edit.document_changes:
        assert isinstance(change, types.TextDocumentEdit)
        uri = change.text_document.uri
        assert change.text_document.version == notebook.cell_versions[uri]
        # Lines and UTF-16 columns of ASCII lines are lintloop's lines and columns less one.
        texts[uri] = apply_edits(texts[uri], [Edit(e.range.start.line + 1, e.range.start.character + 1,
                                                   e.range.end.line + 1, e.range.end.character + 1, e.new_text)
                                              for e in change.edits])
    return texts


def flagged_cell(client: RecordingClient, notebook: OpenNotebook, code: str) -> tuple[str, types.Diagnostic]:
    return next((uri, d) for uri in notebook.code_cells for d in client.diagnostics[uri] if d.code == code)


@on_module_loop
async def test_notebook_sync_is_advertised_for_python_and_markdown_cells_of_jupyter_notebooks(session):
    _, result = session
    sync = result.capabilities.notebook_document_sync
    assert sync.save
    [selector] = sync.notebook_selector
    assert selector.notebook == "jupyter-notebook"
    assert [cell.language for cell in selector.cells] == ["python", "markdown"]


@on_module_loop
async def test_diagnostics_are_the_cli_findings_on_their_cells(client, tmp_path, run_cli):
    path = copy_notebook("LL301_bad.ipynb", tmp_path)
    expected = cli_findings(run_cli, path)
    assert expected, "the fixture must have findings"

    notebook = await open_notebook(client, path)

    assert cell_spans(client, notebook) == cli_cell_spans(expected, notebook)
    uri, diagnostic = flagged_cell(client, notebook, "LL301")
    assert diagnostic.message == diagnostic_text(expected[0])
    assert diagnostic.source == "lintloop" and diagnostic.data["version"] == 1
    # IPython syntax (`%matplotlib`, `!pip`, `x = !cmd`, a `%%bash` cell) is no syntax error.
    sources = cell_sources(path)
    ipython_cells = [notebook.cell_uri(place) for place, source in enumerate(sources, 1)
                     if source.startswith(("%%bash", "%matplotlib"))]
    assert len(ipython_cells) == 2 and not any(client.diagnostics[uri] for uri in ipython_cells)

    hover = await client.text_document_hover_async(types.HoverParams(
        types.TextDocumentIdentifier(uri), diagnostic.range.start))
    assert "LL301" in hover.contents.value and hover.range == diagnostic.range


@on_module_loop
async def test_editing_the_flagged_cell_clears_it_and_stale_versions_are_never_published(client, tmp_path):
    path = copy_notebook("LL301_bad.ipynb", tmp_path)
    notebook = await open_notebook(client, path)
    uri, _ = flagged_cell(client, notebook, "LL301")
    fixed = notebook.texts[uri].replace("total_loss += loss\n", "total_loss += loss.detach()\n")
    assert fixed != notebook.texts[uri]
    seen = len(client.published)

    edit_cell(client, notebook, uri, fixed + "\n")  # superseded before its debounce ends
    edit_cell(client, notebook, uri, fixed)
    assert await code_actions(client, uri, types.Range(types.Position(0, 0), types.Position(30, 0))) == []
    latest = await next_publish(client, uri, seen)
    await asyncio.sleep(0.5)  # longer than the debounce: a late result for the first edit would arrive now

    assert not latest.diagnostics and latest.version == 3
    assert [p.version for p in client.published[seen:] if p.uri == uri] == [3]


@on_module_loop
async def test_added_ipython_cells_are_no_syntax_error_and_a_removed_cell_is_cleared(client, tmp_path):
    path = copy_notebook("LL301_bad.ipynb", tmp_path)
    notebook = await open_notebook(client, path)
    added = {cell_uri(path, 100): "%%bash\npip list | grep torch\n",
             cell_uri(path, 101): "!pip install -q torch\nfiles = !ls\nimport os\nprint(os.getcwd())\n",
             cell_uri(path, 102): "def broken(:\n"}
    cells = [types.NotebookCell(kind=types.NotebookCellKind.Code, document=uri) for uri in added]
    seen = len(client.published)
    change_structure(client, notebook, types.NotebookDocumentCellChangeStructure(
        types.NotebookCellArrayChange(start=1, delete_count=0, cells=cells),
        did_open=[types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
                  for uri, text in added.items()]))
    notebook.cells[1:1] = cells
    notebook.texts.update(added)
    notebook.cell_versions.update(dict.fromkeys(added, 1))
    await published_for(client, list(added), seen)

    bash, shell, broken = added
    assert not client.diagnostics[bash] and not client.diagnostics[shell]
    assert [d.code for d in client.diagnostics[broken]] == ["LL001"]
    assert [uri for uri in notebook.code_cells if any(d.code == "LL001" for d in client.diagnostics[uri])] == [broken]

    seen = len(client.published)
    change_structure(client, notebook, types.NotebookDocumentCellChangeStructure(
        types.NotebookCellArrayChange(start=3, delete_count=1), did_close=[types.TextDocumentIdentifier(uri=broken)]))
    cleared = await next_publish(client, broken, seen)
    assert not cleared.diagnostics


@on_module_loop
async def test_quick_fix_on_a_cell_gives_what_lintloop_fix_writes(client, tmp_path, run_cli):
    path = copy_notebook("LL301_bad.ipynb", tmp_path / "edited")
    reference = copy_notebook("LL301_bad.ipynb", tmp_path / "reference")
    run_cli("fix", "--unsafe-fixes", reference.name, cwd=reference.parent)
    notebook = await open_notebook(client, path)
    uri, diagnostic = flagged_cell(client, notebook, "LL301")

    actions = await code_actions(client, uri, diagnostic.range)

    fix = next(a for a in actions if a.title.startswith("Fix LL301: "))
    assert not fix.title.endswith("(unsafe)") and fix.is_preferred  # `.detach()`: a safe fix
    fixed = applied_to_cells(notebook, fix.edit)
    expected = dict(zip((cell.document for cell in notebook.cells), cell_sources(reference)))
    assert fixed[uri] != notebook.texts[uri]
    assert fixed == expected


@on_module_loop
async def test_fix_all_on_a_cell_gives_what_lintloop_fix_writes(client, tmp_path, run_cli):
    path = copy_notebook("LL201_bad.ipynb", tmp_path / "edited")
    reference = copy_notebook("LL201_bad.ipynb", tmp_path / "reference")
    run_cli("fix", reference.name, cwd=reference.parent)
    notebook = await open_notebook(client, path)
    uri, _ = flagged_cell(client, notebook, "LL201")

    fix_all = await code_actions(client, uri, types.Range(types.Position(0, 0), types.Position(0, 0)),
                                 only=[types.CodeActionKind.SourceFixAll])

    assert [a.kind for a in fix_all] == ["source.fixAll.lintloop"]
    expected = dict(zip((cell.document for cell in notebook.cells), cell_sources(reference)))
    assert expected != notebook.texts
    assert applied_to_cells(notebook, fix_all[0].edit) == expected


@on_module_loop
async def test_suppressing_in_a_cell_silences_the_finding_and_closing_clears_the_cells(client, tmp_path):
    path = copy_notebook("LL301_bad.ipynb", tmp_path)
    notebook = await open_notebook(client, path)
    uri, diagnostic = flagged_cell(client, notebook, "LL301")
    actions = await code_actions(client, uri, diagnostic.range)
    suppress = next(a for a in actions if a.title == "Suppress LL301 on this line")
    suppressed = applied_to_cells(notebook, suppress.edit)
    assert [u for u in suppressed if suppressed[u] != notebook.texts[u]] == [uri]
    assert suppressed[uri].splitlines()[diagnostic.range.start.line].endswith("  # lintloop: ignore[LL301]")

    seen = len(client.published)
    edit_cell(client, notebook, uri, suppressed[uri])
    assert not (await next_publish(client, uri, seen)).diagnostics

    edit_cell(client, notebook, uri, notebook.texts[uri].replace("  # lintloop: ignore[LL301]", ""))
    await settled(lambda: bool(client.diagnostics[uri]))
    client.notebook_document_did_close(types.DidCloseNotebookDocumentParams(
        types.NotebookDocumentIdentifier(notebook.uri),
        [types.TextDocumentIdentifier(cell.document) for cell in notebook.cells]))
    await settled(lambda: not client.diagnostics[uri])
