"""The notebook fixtures (tests/fixtures/notebooks/*.ipynb): rule fixtures cut into cells, as a
notebook author would write them, with IPython syntax around the code.

Each notebook is made from a `.py` fixture: imports in one cell, each function or class in a cell
of its own, the other top-level statements grouped, a markdown cell before every code cell; a
first cell with a line magic and shell escapes, a `%%bash` cell, and a `%%time` cell magic
on the cell that starts the run. `CELLS` says where each `.py` line went, so that a test can
compare the notebook's findings with the `.py` file's. Regenerate after changing a rule fixture:

    python tests/notebook_fixtures.py
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
NOTEBOOKS = FIXTURES / "notebooks"
# Rule fixtures across the three frameworks and the families that matter in notebooks.
NOTEBOOK_FIXTURES = ("LL101", "LL201", "LL301", "LL401", "LL701", "LL703", "LL902", "LL904")
SETUP_CELL = ("%matplotlib inline\n", "!pip install -q tqdm\n", "gpus = !nvidia-smi -L\n")
BASH_CELL = "%%bash\necho \"training on $(hostname)\"\n"


@dataclass(frozen=True)
class CodeCell:
    index: int  # 1-based place in the notebook, markdown cells counted
    first_line: int  # the `.py` line that is the cell's first line of code
    offset: int  # lines of IPython syntax before that line in the cell (a cell magic)
    source: str


def _groups(text: str) -> list[tuple[int, int]]:
    """(first, last) `.py` lines of each cell: imports, each definition, runs of other statements."""
    tree = ast.parse(text)
    groups: list[tuple[int, int, str]] = []
    for node in tree.body:
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        kind = ("import" if isinstance(node, (ast.Import, ast.ImportFrom)) else
                "definition" if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else "code")
        if groups and kind != "definition" and groups[-1][2] == kind:
            groups[-1] = (groups[-1][0], node.end_lineno, kind)
        else:
            groups.append((first, node.end_lineno, kind))
    return [(first, last) for first, last, _ in groups]


def code_cells(stem: str) -> list[CodeCell]:
    text = (FIXTURES / f"{stem}.py").read_text()
    lines = text.splitlines(keepends=True)
    cells = []
    index = 2  # cell 1 is the title
    groups = _groups(text)
    for number, (first, last) in enumerate(groups):
        # Comments and blank lines above a statement belong to its cell (the file's header to the first).
        start = 1 if number == 0 else groups[number - 1][1] + 1
        body = "".join(lines[start - 1:last]).strip("\n")
        magic = "%%time\n" if number == len(groups) - 1 else ""
        if number == 0:
            cells.append(CodeCell(index + 1, 0, 0, "".join(SETUP_CELL).rstrip("\n")))
            index += 2
        if number == 1:
            cells.append(CodeCell(index + 1, 0, 0, BASH_CELL.rstrip("\n")))
            index += 2
        leading = len(lines[start - 1:last]) - len("".join(lines[start - 1:last]).lstrip("\n").splitlines())
        cells.append(CodeCell(index + 1, start + leading, len(magic.splitlines()), magic + body))
        index += 2
    return cells


def notebook(stem: str) -> str:
    """The notebook file's text, as Jupyter writes it (nbformat 4.5, one-space indent, sorted keys)."""
    cells = [{"cell_type": "markdown", "id": f"{stem.lower()}-title", "metadata": {},
              "source": [f"# {stem}: a training notebook\n", "The code of the rule's fixture, cut into cells."]}]
    for cell in code_cells(stem):
        cells.append({"cell_type": "markdown", "id": f"{stem.lower()}-md-{cell.index - 1}", "metadata": {},
                      "source": [f"Cell {cell.index}."]})
        cells.append({"cell_type": "code", "execution_count": None, "id": f"{stem.lower()}-code-{cell.index}",
                      "metadata": {}, "outputs": [], "source": cell.source.splitlines(keepends=True)})
    document = {"cells": cells, "metadata": {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python", "version": "3.11.7"}}, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(document, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def paths(stem: str) -> tuple[Path, Path]:
    """The `.py` fixture and its notebook."""
    return FIXTURES / f"{stem}.py", NOTEBOOKS / f"{stem}.ipynb"


def stems() -> list[str]:
    return [f"{code}_{kind}" for code in NOTEBOOK_FIXTURES for kind in ("bad", "good")]


if __name__ == "__main__":
    NOTEBOOKS.mkdir(exist_ok=True)
    for name in stems():
        paths(name)[1].write_text(notebook(name), encoding="utf-8")
