"""The test-code policy (README "Test code"): in a test module only the rules of the kinds in
`test-code-kinds` run (default: none), the engine's own codes always; a test module is named
`test_*.py`, `*_test.py` or `conftest.py` (or `.ipynb`), or lies below a `tests` or `test` folder of
its configuration's directory."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lintloop.cache import ResultCache
from lintloop.config import Settings
from lintloop.rule_examples import example_text

PERF, BUG, HYGIENE = "LL204", "LL701", "LL603"  # tf-function-in-loop, missing-zero-grad, deprecated-cuda-amp
EVERY_KIND = {PERF, BUG, HYGIENE}
# The three rules' shipped examples in one program: each flags its own rule (the control, `train.py`).
PROGRAM = example_text(PERF) + example_text(BUG) + example_text(HYGIENE)
FINDING = re.compile(r"^(.+?):(?:cell \d+:)?\d+:\d+: (LL\d{3}) ", re.MULTILINE)

TEST_MODULES = ["test_train.py", "train_test.py", "conftest.py", "test_train.ipynb", "train_test.ipynb",
                "conftest.ipynb", "tests/train.py", "test/train.py", "src/pkg/tests/unit/train.py",
                "tests/train.ipynb", "test_.py"]
NOT_TEST_MODULES = ["train.py", "contest.py", "testing.py", "test.py", "tests.py", "latest.py", "test_train.txt",
                    "mytests/train.py", "attest/train.py", "testdata/train.py", "tests_old/train.py",
                    "train.ipynb"]


def notebook(source: str) -> str:
    return json.dumps({"cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                                  "source": source}],
                       "metadata": {"kernelspec": {"name": "python3", "language": "python",
                                                   "display_name": "Python 3"}},
                       "nbformat": 4, "nbformat_minor": 4})


def place(root: Path, relative: str, text: str = PROGRAM) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(notebook(text) if relative.endswith(".ipynb") else text, encoding="utf-8")
    return path


def codes_by_file(run_cli, root: Path, *args: str, cache: bool = False) -> dict[str, set[str]]:
    """`lintloop check .` run in `root`: each file's codes (files without findings absent)."""
    code, out, err = run_cli("check", ".", "--format", "concise", *args, *([] if cache else ["--no-cache"]), cwd=root)
    assert code in (0, 1), err
    found: dict[str, set[str]] = {}
    for path, rule in FINDING.findall(out):
        found.setdefault(Path(path).as_posix(), set()).add(rule)
    return found


@pytest.mark.parametrize("relative", TEST_MODULES)
def test_test_module_spellings(tmp_path, relative):
    assert Settings(root=tmp_path).is_test_module(tmp_path / relative)


@pytest.mark.parametrize("relative", NOT_TEST_MODULES)
def test_other_files_are_no_test_modules(tmp_path, relative):
    assert not Settings(root=tmp_path).is_test_module(tmp_path / relative)


def test_folders_count_relative_to_the_configuration_directory(tmp_path):
    """A project that itself lies in a folder named `tests` is not all tests: only the parts below its root count."""
    project = tmp_path / "tests" / "project"
    assert not Settings(root=project).is_test_module(project / "src" / "train.py")
    assert Settings(root=project).is_test_module(project / "test" / "train.py")
    assert Settings(root=tmp_path).is_test_module(project / "src" / "train.py")


OUTSIDE = ["train.py", "contest.py", "notebooks/train.ipynb", "src/testing/train.py"]
INSIDE = ["tests/train.py", "test/train.py", "test_train.py", "train_test.py", "conftest.py",
          "notebooks/test_train.ipynb", "src/pkg/tests/train.py"]


def test_by_default_no_rule_runs_in_test_modules(run_cli, tmp_path):
    (tmp_path / "lintloop.toml").write_text("")
    for relative in OUTSIDE + INSIDE:
        place(tmp_path, relative)
    assert codes_by_file(run_cli, tmp_path) == {r: EVERY_KIND for r in OUTSIDE}


def test_bug_rules_only_run_in_test_modules_and_perf_and_hygiene_ones_do_not(run_cli, tmp_path):
    (tmp_path / "lintloop.toml").write_text('test-code-kinds = ["bug"]\n')
    for relative in OUTSIDE + INSIDE:
        place(tmp_path, relative)
    assert codes_by_file(run_cli, tmp_path) == {**{r: EVERY_KIND for r in OUTSIDE}, **{r: {BUG} for r in INSIDE}}


def test_an_empty_list_lints_no_rule_in_tests_but_the_engine_codes_still_report(run_cli, tmp_path):
    (tmp_path / "lintloop.toml").write_text("test-code-kinds = []\n")
    place(tmp_path, "train.py")
    place(tmp_path, "tests/train.py")
    place(tmp_path, "tests/broken.py", "import torch\nx = (\n")
    place(tmp_path, "tests/suppressed.py", "import torch\nx = torch.ones(3)  # lintloop: ignore[LL999]\n")  # LL002
    place(tmp_path, "tests/helpers.py", "x = (\n")  # no deep-learning code: passed over, as anywhere
    # A test module with deep-learning code is still checked for syntax: LL001 is not a rule of a kind.
    assert codes_by_file(run_cli, tmp_path) == {"train.py": EVERY_KIND, "tests/suppressed.py": {"LL002"},
                                                "tests/broken.py": {"LL001"}}
    _, _, err = run_cli("check", ".", "--no-cache", "--verbose", cwd=tmp_path)
    assert "not parsed (no deep-learning code): tests/helpers.py" in err
    assert "tests/train.py" not in err and "tests/suppressed.py" not in err


@pytest.mark.parametrize("config,table", [("lintloop.toml", ""), ("pyproject.toml", "[tool.lintloop]\n")])
def test_every_kind_lints_tests_like_other_code(run_cli, tmp_path, config, table):
    (tmp_path / config).write_text(table + 'test-code-kinds = ["bug", "perf", "hygiene"]\n')
    place(tmp_path, "tests/train.py")
    place(tmp_path, "test_train.py")
    assert codes_by_file(run_cli, tmp_path) == {"tests/train.py": EVERY_KIND, "test_train.py": EVERY_KIND}


def test_the_command_line_option_applies_on_top_of_the_configuration(run_cli, tmp_path):
    (tmp_path / "lintloop.toml").write_text("test-code-kinds = []\n")
    place(tmp_path, "tests/train.py")
    place(tmp_path, "train.py")
    assert codes_by_file(run_cli, tmp_path, "--test-code-kinds", "perf") == {"tests/train.py": {PERF},
                                                                             "train.py": EVERY_KIND}
    assert codes_by_file(run_cli, tmp_path, "--test-code-kinds", "bug,hygiene")["tests/train.py"] == {BUG, HYGIENE}
    (tmp_path / "lintloop.toml").write_text("")
    assert "tests/train.py" not in codes_by_file(run_cli, tmp_path, "--test-code-kinds=")


def test_each_configuration_applies_its_own_policy_below_its_own_directory(run_cli, tmp_path):
    (tmp_path / "lintloop.toml").write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "lintloop.toml").write_text('test-code-kinds = ["perf"]\n')
    (tmp_path / "tests" / "project").mkdir(parents=True)
    (tmp_path / "tests" / "project" / "lintloop.toml").write_text("")
    for relative in ("tests/train.py", "sub/tests/train.py", "tests/project/train.py", "tests/project/tests/train.py"):
        place(tmp_path, relative)
    assert codes_by_file(run_cli, tmp_path) == {
        "sub/tests/train.py": {PERF},
        "tests/project/train.py": EVERY_KIND}  # below its own configuration, no `tests` folder


@pytest.mark.parametrize("config,text,line", [
    ("lintloop.toml", 'test-code-kinds = ["bug", "speed"]\n', "lintloop.toml:1: test-code-kinds"),
    ("pyproject.toml", '[tool.lintloop]\ntest-code-kinds = [\n  "bug",\n  "speed",\n]\n',
     "pyproject.toml:4: [tool.lintloop] test-code-kinds"),
])
def test_an_unknown_kind_is_a_configuration_error(run_cli, tmp_path, config, text, line):
    (tmp_path / config).write_text(text)
    place(tmp_path, "train.py")
    code, out, err = run_cli("check", ".", "--no-cache", cwd=tmp_path)
    assert (code, out) == (2, "")
    assert err == f"lintloop: error: {line}: unknown kind 'speed' (known: bug, perf, hygiene)\n"


def test_a_kind_of_the_wrong_type_or_on_the_command_line_is_an_error_too(run_cli, tmp_path):
    place(tmp_path, "train.py")
    (tmp_path / "lintloop.toml").write_text('test-code-kinds = "bug"\n')
    code, _, err = run_cli("check", ".", "--no-cache", cwd=tmp_path)
    assert code == 2 and err == "lintloop: error: lintloop.toml:1: test-code-kinds: must be a list of strings\n"
    (tmp_path / "lintloop.toml").write_text("")
    code, _, err = run_cli("check", ".", "--no-cache", "--test-code-kinds", "bug,Perf", cwd=tmp_path)
    assert code == 2 and err == "lintloop: error: --test-code-kinds: unknown kind 'Perf' (known: bug, perf, hygiene)\n"


def test_a_warm_run_after_the_policy_changed_gives_the_new_result(run_cli, tmp_path):
    config = tmp_path / "lintloop.toml"
    config.write_text("")
    place(tmp_path, "train.py")
    place(tmp_path, "tests/train.py")
    entries = lambda: len(ResultCache(tmp_path / ".lintloop_cache").entries())
    expected = {"train.py": EVERY_KIND}
    assert codes_by_file(run_cli, tmp_path, cache=True) == expected
    assert entries() == 2  # the test module's: checked for syntax only
    assert codes_by_file(run_cli, tmp_path, cache=True) == expected and entries() == 2  # answered from the cache
    config.write_text('test-code-kinds = ["bug", "perf", "hygiene"]\n')
    assert codes_by_file(run_cli, tmp_path, cache=True) == {"train.py": EVERY_KIND, "tests/train.py": EVERY_KIND}
    assert entries() == 3, "a new entry for the test module alone: the other file's rules are the same"
    config.write_text("")
    assert codes_by_file(run_cli, tmp_path, cache=True) == expected
    assert codes_by_file(run_cli, tmp_path, "--test-code-kinds", "hygiene", cache=True)["tests/train.py"] == {HYGIENE}


def test_fix_leaves_the_fixes_of_other_kinds_out_of_test_modules(run_cli, tmp_path):
    (tmp_path / "lintloop.toml").write_text("")
    in_tests = place(tmp_path, "tests/amp.py", example_text(HYGIENE))
    outside = place(tmp_path, "amp.py", example_text(HYGIENE))
    run_cli("fix", "tests/amp.py", "amp.py", cwd=tmp_path)
    assert in_tests.read_text() == example_text(HYGIENE)
    assert outside.read_text() != example_text(HYGIENE) and "torch.amp.GradScaler(" in outside.read_text()


def test_the_language_server_settings_apply_the_policy(tmp_path):
    """The server lints a document with `Settings.codes_for(path)`: the same policy as `check`."""
    settings = Settings(root=tmp_path)
    in_tests = set(settings.codes_for(tmp_path / "tests" / "train.py"))
    assert {"LL001", "LL002", "LL004"} <= in_tests and not {BUG, PERF, HYGIENE} & in_tests
    settings.test_code_kinds = ["bug"]
    in_tests = set(settings.codes_for(tmp_path / "tests" / "train.py"))
    assert BUG in in_tests and not {PERF, HYGIENE} & in_tests
    assert set(settings.codes_for(tmp_path / "train.py")) == set(settings.codes()) == set(settings.codes_for(None))
    settings.test_code_kinds = []
    assert {c for c in settings.codes_for(tmp_path / "conftest.py") if not c.startswith("LL0")} == set()
