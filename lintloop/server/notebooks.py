"""Jupyter notebooks open in the editor (LSP notebook document sync).

The notebook's cells are put together as `.ipynb` JSON, in their order in the editor, markdown cells
included so that a finding's `cell` is the place of its cell in the notebook document; that text is
linted as `lintloop check` lints the notebook's file. Findings, and their fixes' edits, are then given
back to the text documents of their cells.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from lsprotocol import types
from pygls.protocol import default_converter
from pygls.workspace import TextDocument, Workspace

from lintloop.finding import Edit, Finding
from lintloop.server import handshake
from lintloop.server.actions import EditTarget, combined_edit
from lintloop.server.documents import CellVersion, Snapshot

# What the server syncs, as the early reply to `initialize` (handshake) announces it.
NOTEBOOK_SYNC = default_converter().structure(handshake.NOTEBOOK_SYNC, types.NotebookDocumentSyncOptions)


def open_document(workspace: Workspace, uri: str) -> TextDocument | None:
    """The open text document `uri` (None where none is: a cell the client does not sync, e.g. markdown)."""
    # pygls keys documents by unquoted URI (`file:///my%20file.py` under `file:///my file.py`);
    # `get_text_document` would read a missing one from disk.
    return workspace.text_documents.get(unquote(uri))


def ipynb_text(cells: Sequence[types.NotebookCell], documents: Sequence[TextDocument | None]) -> str:
    """The notebook as nbformat 4 JSON: Python code cells as code, other cells kept in place (markdown,
    or raw for code in another language) so that cells are numbered as in the editor."""
    entries = []
    for cell, document in zip(cells, documents):
        source = document.source if document is not None else ""
        if cell.kind != types.NotebookCellKind.Code:
            entries.append({"cell_type": "markdown", "metadata": {}, "source": source})
        elif document is not None and document.language_id == handshake.CELL_LANGUAGE:
            entries.append({"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                            "source": source})
        else:
            entries.append({"cell_type": "raw", "metadata": {}, "source": source})
    return json.dumps({"cells": entries, "metadata": {}, "nbformat": 4, "nbformat_minor": 4}, indent=1)


def notebook_snapshot(workspace: Workspace, uri: str, path: Path | None) -> Snapshot | None:
    """The open notebook `uri` as it is now (None once closed)."""
    notebook = workspace.get_notebook_document(notebook_uri=uri)
    if notebook is None:
        return None
    documents = [open_document(workspace, cell.document) for cell in notebook.cells]
    cells = tuple(CellVersion(cell.document, document.version if document is not None else None)
                  for cell, document in zip(notebook.cells, documents))
    return Snapshot(uri, notebook.version, ipynb_text(notebook.cells, documents), path, cells)


@dataclass(frozen=True)
class CellPlace:
    notebook_uri: str
    cell: int  # 1-based place in the notebook, as a finding's `cell`


def cell_place(workspace: Workspace, uri: str) -> CellPlace | None:
    """Which notebook, and which of its cells, the text document `uri` is (None if it is no cell)."""
    notebook = workspace.get_notebook_document(cell_uri=uri)
    if notebook is None:
        return None
    wanted = unquote(uri)
    return next((CellPlace(notebook.uri, index) for index, cell in enumerate(notebook.cells, 1)
                 if unquote(cell.document) == wanted), None)


def findings_by_cell(findings: Sequence[Finding], cell_count: int) -> list[list[Finding]]:
    """The findings of each cell, in cell order."""
    by_cell: list[list[Finding]] = [[] for _ in range(cell_count)]
    for finding in findings:
        if finding.cell is not None and 1 <= finding.cell <= cell_count:
            by_cell[finding.cell - 1].append(finding)
    return by_cell


@dataclass(frozen=True)
class CellsTarget:
    """A notebook's cells as the target of a fix: each edit goes to the cell its `cell` names."""

    cells: dict[int, EditTarget]  # by 1-based cell place

    def workspace_edit(self, edits: list[Edit]) -> types.WorkspaceEdit:
        by_cell: dict[int, list[Edit]] = {}
        for edit in edits:
            assert edit.cell is not None, "the edits of a notebook's findings are placed in cells"
            by_cell.setdefault(edit.cell, []).append(edit)
        return combined_edit([(self.cells[cell], cell_edits) for cell, cell_edits in by_cell.items()])
