"""The grouped summary: a text or concise report of more than 20 findings ends with the rules and the
folders with the most findings; `--statistics` gives both tables in full, for any number of findings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import TF_LEAK

from lintloop.finding import Finding
from lintloop.reporters import grouped_summary


def summary_line(n: int) -> str:
    return (f"Found {n} findings in 3 files. [*] {n - 1} fixable with `lintloop fix`. "
            "1 has an unsafe fix (`lintloop fix --unsafe-fixes` applies it).")


def tf_prints(count: int) -> str:
    """A tf.function with `count` builtin prints: `count` LL201 findings (safe fixes)."""
    return "import tensorflow as tf\n\n@tf.function\ndef step(x):\n" + "    print('x', x)\n" * count + "    return x\n"


def project(root: Path, models: int, scripts: int) -> Path:
    """`models` LL201 findings in src/models/deep/net.py, `scripts` in scripts/run.py, and one LL301
    (an unsafe fix) in scripts/train.py, under a configuration."""
    (root / "lintloop.toml").write_text("")
    for relative, text in (("src/models/deep/net.py", tf_prints(models)), ("scripts/run.py", tf_prints(scripts)),
                           ("scripts/train.py", TF_LEAK)):
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root


GROUPED_21 = ("Rules with the most findings:\n"
              "   20  LL201  [*] print-in-tf-function\n"
              "    1  LL301      loss-tensor-accumulation\n"
              "Folders with the most findings:\n"
              "   11  src/models/\n"
              "   10  scripts/\n")


def test_a_text_report_of_more_than_20_findings_ends_with_the_grouped_summary(run_cli, tmp_path):
    code, out, _ = run_cli("check", ".", "--no-cache", cwd=project(tmp_path, 11, 9))
    assert code == 1 and out.count(" LL201 [*] builtin") == 20 and out.count(" LL301 loss tensor") == 1
    # After the findings, before the summary line, which is as it was.
    assert out.endswith("\n\n" + GROUPED_21 + "\n" + summary_line(21) + "\n")


def test_a_report_of_20_findings_has_no_grouped_summary(run_cli, tmp_path):
    code, out, err = run_cli("check", ".", "--no-cache", cwd=project(tmp_path, 10, 9))
    assert code == 1 and out.count(" LL201 [*] builtin") == 19 and "most findings" not in out
    assert out.endswith("\n\n" + summary_line(20) + "\n")
    code, out, err = run_cli("check", ".", "--no-cache", "--format", "concise", cwd=tmp_path)
    assert len(out.splitlines()) == 20 and err == ""


def test_the_concise_report_stays_one_line_per_finding_and_the_summary_goes_to_stderr(run_cli, tmp_path):
    code, out, err = run_cli("check", ".", "--no-cache", "--format", "concise", cwd=project(tmp_path, 11, 9))
    assert code == 1 and len(out.splitlines()) == 21 and all(": LL" in line for line in out.splitlines())
    assert err == "\n" + GROUPED_21


@pytest.mark.parametrize("fmt", ["text", "concise"])
def test_quiet_prints_no_summary(run_cli, tmp_path, fmt):
    code, out, err = run_cli("check", ".", "--no-cache", "--quiet", "--format", fmt, cwd=project(tmp_path, 11, 9))
    assert code == 1 and out.count(" LL201 ") == 20
    assert "most findings" not in out + err and "Found 21" not in out


def test_the_other_formats_are_unchanged(run_cli, tmp_path):
    project(tmp_path, 11, 9)
    reports = {}
    for fmt in ("json", "sarif", "github"):
        code, reports[fmt], err = run_cli("check", ".", "--no-cache", "--format", fmt, cwd=tmp_path)
        assert code == 1 and err == "" and "most findings" not in reports[fmt]
    assert len(json.loads(reports["json"])) == 21
    assert len(json.loads(reports["sarif"])["runs"][0]["results"]) == 21
    assert [line[:8] for line in reports["github"].splitlines()] == ["::error "] * 21


def test_a_table_of_one_row_is_left_out(run_cli, tmp_path):
    """21 findings of one rule in one file: nothing to group. In two folders: the folder table alone."""
    (tmp_path / "lintloop.toml").write_text("")
    (tmp_path / "step.py").write_text(tf_prints(21))
    code, out, _ = run_cli("check", ".", "--no-cache", cwd=tmp_path)
    assert code == 1 and "most findings" not in out and out.endswith("\n\nFound 21 findings in 1 file. "
                                                                      "[*] 21 fixable with `lintloop fix`.\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "step.py").write_text(tf_prints(1))
    code, out, err = run_cli("check", ".", "--no-cache", "--format", "concise", cwd=tmp_path)
    assert err == "\nFolders with the most findings:\n   21  ./\n    1  sub/\n"


def test_statistics_gives_the_rule_and_folder_tables_for_any_number_of_findings(run_cli, tmp_path):
    project(tmp_path, 2, 1)
    (tmp_path / "train.py").write_text(TF_LEAK)
    code, out, err = run_cli("check", ".", "--no-cache", "--statistics", cwd=tmp_path)
    assert (code, err) == (1, "")
    assert out == ("    3  LL201  [*] print-in-tf-function\n"
                   "    2  LL301      loss-tensor-accumulation\n"
                   "\n"
                   "    2  scripts/\n"
                   "    2  src/models/\n"
                   "    1  ./\n")


def test_statistics_of_one_folder_is_the_rule_table_alone(run_cli, tmp_path):
    (tmp_path / "step.py").write_text(tf_prints(2))
    out = run_cli("check", ".", "--no-cache", "--statistics", cwd=tmp_path)[1]
    assert out == "    2  LL201  [*] print-in-tf-function\n"


def test_folders_are_relative_to_the_run_root(run_cli, tmp_path):
    """From a sub-folder of the project, the folders are still the project's (the configuration's directory)."""
    project(tmp_path, 11, 9)
    code, out, _ = run_cli("check", ".", "../../scripts", "--no-cache", "--statistics", cwd=tmp_path / "src" / "models")
    assert code == 1 and out.splitlines()[-2:] == ["   11  src/models/", "   10  scripts/"]


def finding(path: str, code: str) -> Finding:
    return Finding(path, 1, 1, 1, 2, code, f"rule-{code.lower()}", "message", "bug", "error")


def test_at_most_ten_rows_each_most_findings_first_then_by_name(tmp_path):
    findings = [finding(f"pkg{i % 12}/sub/deeper/f.py", f"LL{100 + i % 12}") for i in range(36)]
    findings += [finding("zeta/a.py", "LL111")] * 2 + [finding("alpha/a.py", "LL100")]
    lines = grouped_summary(findings, unsafe_fixes=False, root=str(tmp_path))
    rules, folders = lines[1:12], lines[13:]
    assert lines[0] == "Rules with the most findings:" and lines[12] == "Folders with the most findings:"
    assert rules == ["    5  LL111      rule-ll111", "    4  LL100      rule-ll100",
                     *[f"    3  LL{100 + i}      rule-ll{100 + i}" for i in range(1, 9)],
                     "  ... 2 more rules (`--statistics` lists them all)"]
    assert folders == [*[f"    3  pkg{i}/sub/" for i in (0, 1, 10, 11, 2, 3, 4, 5, 6, 7)],
                       "  ... 4 more folders (`--statistics` lists them all)"]
    assert grouped_summary(findings[:20], unsafe_fixes=False, root=str(tmp_path)) == []
