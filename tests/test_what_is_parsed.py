"""docs/architecture.md, "What is parsed": a file found by walking a directory is parsed only if it can hold a
finding (the screen); the others are counted in the summary, listed by `--verbose`, never reported,
never changed. A file named explicitly is always parsed, so its syntax errors are always reported.
Passing a file over loses no finding: every rule example and every fixture program gives the same
findings found in a directory as named."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from conftest import FIXTURES
from lintloop.linter import lint_bytes, lint_text
from lintloop.rule import RuleSet
from lintloop.rules import ALL_RULES

EVERY_RULE = RuleSet(list(ALL_RULES))
BROKEN_PLAIN = "def f(:\n    return 1\n"  # no framework: nothing a rule could flag
BROKEN_TRAINING = "import torch\nfor x in loader:\n    loss = model(x)\n    loss.backward()\n    total += loss\ndef f(:\n"


def _notebook(*cells: str) -> str:
    return json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "source": cell, "outputs": [],
                                  "execution_count": None} for cell in cells],
                       "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
                       "nbformat": 4, "nbformat_minor": 5})


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "lintloop.toml").write_text("")
    src = tmp_path / "src"
    src.mkdir()
    (src / "broken_plain.py").write_text(BROKEN_PLAIN)
    (src / "utils.py").write_text("import torch\n\ndef ones(n):\n    return torch.ones(n)\n")  # no training shape
    (src / "undecodable.py").write_bytes(b"x = '\xff\xfe'\n")
    (src / "plain.ipynb").write_text(_notebook("x = (\n", "print(1)\n"))
    (src / "train.py").write_text((FIXTURES / "LL301_bad.py").read_text())
    return tmp_path


PASSED_OVER = ["src/broken_plain.py", "src/plain.ipynb", "src/undecodable.py", "src/utils.py"]


def test_files_found_without_deep_learning_code_are_counted_not_parsed(project, run_cli):
    code, out, err = run_cli("check", "src", cwd=project)
    assert code == 1 and err == ""
    assert "src/train.py" in out and "LL301" in out
    assert "LL001" not in out and not any(path in out for path in PASSED_OVER)
    assert out.rstrip().endswith("4 files without deep-learning code were not parsed (`--verbose` lists them).")


def test_verbose_lists_the_files_passed_over(project, run_cli):
    _, _, err = run_cli("check", "--verbose", "src", cwd=project)
    assert err.splitlines() == [f"lintloop: not parsed (no deep-learning code): {path}" for path in PASSED_OVER]


@pytest.mark.parametrize("name", ["broken_plain.py", "undecodable.py", "plain.ipynb"])
def test_a_file_named_on_the_command_line_is_always_parsed(project, run_cli, name):
    code, out, _ = run_cli("check", f"src/{name}", cwd=project)
    assert code == 1 and "LL001" in out and "not parsed" not in out


def test_named_and_found_in_a_directory_is_named(project, run_cli):
    code, out, _ = run_cli("check", "src", "src/broken_plain.py", cwd=project)
    assert "src/broken_plain.py" in out and "LL001" in out
    assert "3 files without deep-learning code" in out


def test_a_broken_file_that_can_hold_a_finding_is_reported_where_found(project, run_cli):
    (project / "src" / "broken_train.py").write_text(BROKEN_TRAINING)
    code, out, _ = run_cli("check", "src", cwd=project)
    assert "src/broken_train.py" in out and "LL001" in out


def test_a_suppression_comment_is_read_wherever_it_is(project, run_cli):
    """A lintloop comment can be reported by itself (LL002), framework or not."""
    (project / "src" / "noted.py").write_text("x = 1  # noqa: LL9999\n")
    code, out, _ = run_cli("check", "src", cwd=project)
    assert "src/noted.py" in out and "LL002" in out


def test_everything_passed_over_is_all_checks_passed_with_the_count(project, run_cli):
    (project / "src" / "train.py").unlink()
    code, out, _ = run_cli("check", "src", cwd=project)
    assert code == 0
    assert out.strip() == ("All checks passed. 4 files without deep-learning code were not parsed "
                           "(`--verbose` lists them).")


def test_the_cache_and_the_workers_give_the_same_report(project, run_cli):
    runs = [run_cli("check", *options, "src", cwd=project)
            for options in (["--no-cache", "--jobs", "1"], ["--jobs", "2"], ["--jobs", "2"], ["--no-cache", "-j", "2"])]
    assert all(run == runs[0] for run in runs)


def test_fix_leaves_the_files_passed_over_as_they_are(project, run_cli):
    before = {p: p.read_bytes() for p in (project / "src").iterdir()}
    code, out, err = run_cli("fix", "--unsafe-fixes", "src", cwd=project)
    after = {p: p.read_bytes() for p in (project / "src").iterdir()}
    assert {p for p in before if before[p] != after[p]} == {project / "src" / "train.py"}
    assert "4 files without deep-learning code were not parsed" in out


def _agree(display: str, code: str) -> None:
    """Found in a directory, a text gives what it gives named (bar a syntax error of a file passed over)."""
    named = lint_text(display, code, EVERY_RULE)
    found = lint_text(display, code, EVERY_RULE, explicit=False)
    if found.passed_over:
        assert [f.code for f in named.findings] in ([], ["LL001"]), (display, named.findings)
    else:
        assert found.findings == named.findings, display


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_no_finding_of_an_example_is_lost_where_it_is_found(rule):
    for kind, examples in (("flagged", rule.flagged), ("not_flagged", rule.not_flagged)):
        for number, example in enumerate(examples):
            code = textwrap.dedent(example.code).lstrip()
            _agree(f"{rule.code}_{kind}_{number}.py", code)
            if kind == "flagged":
                assert not lint_text("x.py", code, EVERY_RULE, explicit=False).passed_over, (rule.code, number)


@pytest.mark.parametrize("path", sorted(FIXTURES.rglob("*.py")) + sorted(FIXTURES.rglob("*.ipynb")),
                         ids=lambda p: str(p.relative_to(FIXTURES)))
def test_no_finding_of_a_fixture_program_is_lost_where_it_is_found(path):
    data = path.read_bytes()
    named = lint_bytes(path.name, data, EVERY_RULE, path=path)
    found = lint_bytes(path.name, data, EVERY_RULE, path=path, explicit=False)
    assert found.findings == (named.findings if not found.passed_over else [])
    assert not found.passed_over or named.findings == []
