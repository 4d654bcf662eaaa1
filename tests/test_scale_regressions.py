"""Regressions found by bench/scale.py (every rule over 4.8 M lines of real deep-learning code), and
the quick version of its fix-safety check, run on the rule fixtures."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lintloop.config import Settings
from lintloop.linter import lint_text
from lintloop.rules import ALL_RULES

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"


def load_scale():
    spec = importlib.util.spec_from_file_location("bench_scale", REPO / "bench" / "scale.py")
    module = sys.modules["bench_scale"] = importlib.util.module_from_spec(spec)  # its dataclasses look it up there
    spec.loader.exec_module(module)
    return module


scale = load_scale()


def lint_all(tmp_path: Path, text: str):
    return lint_text("step.py", text, Settings(root=tmp_path, select=["ALL"]).ruleset())


# jax 0.10.2's lax.py, orbax-checkpoint's structure_utils.py and 18 more: LL902 asked whether a jitted
# function declares a name global, walked its statements and met a `match` (no `body`, only cases).
GLOBAL_IN_MATCH_CASE = """\
import jax

calls = 0


@jax.jit
def step(x, mode):
    match mode:
        case "train":
            global calls
            calls = calls + 1
        case _:
            scale = 2
    return x
"""

LOCAL_IN_MATCH_CASE = """\
import jax


@jax.jit
def step(x, mode):
    match mode:
        case "train":
            calls = 1
        case _:
            calls = 2
    return x * calls
"""

GLOBAL_IN_EXCEPT_STAR = """\
import jax

failures = 0


@jax.jit
def step(x):
    try:
        y = x + 1
    except* ValueError:
        global failures
        failures = failures + 1
    return x
"""


def test_global_declared_in_a_match_case_is_found_without_crashing(tmp_path: Path) -> None:
    result = lint_all(tmp_path, GLOBAL_IN_MATCH_CASE)
    assert result.errors == []
    assert [(f.code, f.line) for f in result.findings] == [("LL902", 11)]
    assert "global variable `calls`" in result.findings[0].detailed


def test_local_assigned_in_match_cases_is_not_flagged(tmp_path: Path) -> None:
    result = lint_all(tmp_path, LOCAL_IN_MATCH_CASE)
    assert result.errors == []
    assert [f.code for f in result.findings] == []


def test_global_declared_in_an_except_star_handler_is_found(tmp_path: Path) -> None:
    result = lint_all(tmp_path, GLOBAL_IN_EXCEPT_STAR)
    assert result.errors == []
    assert [(f.code, f.line) for f in result.findings] == [("LL902", 12)]


# --- bench/scale.py's checks catch what they must ------------------------------------------------


def tree(tmp_path: Path, files: dict[str, bytes]) -> Path:
    root = tmp_path / "tree"
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(content)
    return root


def test_compare_trees_reports_each_kind_of_damage(tmp_path: Path) -> None:
    root = tree(tmp_path, {"crlf.py": b"x = 1\r\ny = 2\r\n", "bom.py": b"\xef\xbb\xbfx = 1\n",
                           "latin.py": b"# -*- coding: latin-1 -*-\nname = '\xe9'\n", "mode.py": b"x = 1\n",
                           "untouched.py": b"x = 1\n", "same.py": b"x = 1\n", "gone.py": b"x = 1\n"})
    before = scale.snapshot_tree(root)
    (root / "crlf.py").write_bytes(b"x = 1\r\ny = 3\n")
    (root / "bom.py").write_bytes(b"x = 2\n")
    (root / "latin.py").write_bytes("name = 'é'\n".encode())
    (root / "mode.py").chmod(0o755)
    (root / "untouched.py").write_bytes(b"x = 9\n")
    (root / "same.py").unlink()
    (root / "same.py").write_bytes(b"x = 1\n")  # same bytes, but a new file: it was rewritten
    (root / "gone.py").unlink()
    (root / "new.py").write_bytes(b"x = 1\n")
    changed, problems = scale.compare_trees(before, scale.snapshot_tree(root),
                                            {"crlf.py", "bom.py", "latin.py", "mode.py"})
    assert changed == ["bom.py", "crlf.py", "latin.py", "untouched.py"]
    assert problems == [
        "bom.py: encoding utf-8-sig became utf-8", "bom.py: BOM lost",
        "crlf.py: line endings [b'\\r\\n'] became [b'\\n', b'\\r\\n']",
        "gone.py: deleted",
        "latin.py: encoding iso-8859-1 became utf-8",
        "mode.py: mode 0o100644 became 0o100755",
        "new.py: created",
        "same.py: rewritten with the same bytes, but had no fixable finding",
        "untouched.py: changed, but had no fixable finding",
    ]


def test_parse_problems_names_files_that_do_not_parse(tmp_path: Path) -> None:
    root = tree(tmp_path, {"ok.py": b"\xef\xbb\xbfvec: list[float] = []\n", "broken.py": b"def f(:\n"})
    problems = scale.parse_problems([str(root / "ok.py"), str(root / "broken.py")])
    assert list(problems) == [str(root / "broken.py")]
    assert problems[str(root / "broken.py")].startswith("libcst: ParserSyntaxError")


def test_crashing_file_bisects_to_the_file_that_crashes_the_run_alone(tmp_path: Path) -> None:
    files = [tmp_path / f"m{i}.py" for i in range(7)]

    def run_crashing_on(*names: str) -> list[str]:  # a stand-in for lintloop: exit 2 when all `names` are given
        return [sys.executable, "-c", f"import sys; sys.exit(2 if all(any(a.endswith(n) for a in sys.argv) "
                                      f"for n in {names!r}) else 0)"]

    assert scale.crashing_file(run_crashing_on("m5.py"), files, tmp_path) == files[5]
    assert scale.crashing_file(run_crashing_on("m1.py", "m5.py"), files, tmp_path) is None
    assert scale.crashing_file(run_crashing_on("m9.py"), files, tmp_path) is None


# --- the quick version of `bench/scale.py fix`, on the fixtures ------------------------------------


def lintloop(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lintloop", *args], cwd=cwd, text=True, capture_output=True,
                          env={**os.environ, "NO_COLOR": "1"})


def fixtures_of_fixable_rules() -> list[Path]:
    """The bad and good fixtures of every rule with a fix: what a fix may touch, and what it must not."""
    fixable = [r.code for r in ALL_RULES if r.fix_kind != "—"]
    return sorted(p for p in FIXTURES.glob("LL*.py") if p.name.split("_")[0] in fixable)


@pytest.fixture(scope="module")
def fixed_fixtures(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[str], dict, dict]:
    """Those fixtures, plus fixable ones saved with CRLF + BOM, latin-1 and an executable mode, fixed
    once with every rule and unsafe fixes: (root, the files with a fix, snapshots before and after)."""
    root = tmp_path_factory.mktemp("scale-fix")
    (root / "lintloop.toml").write_text("")
    (root / "src").mkdir()
    for fixture in fixtures_of_fixable_rules():
        shutil.copy2(fixture, root / "src" / fixture.name)
    fixable = (FIXTURES / "LL603_bad.py").read_text()
    (root / "src" / "crlf_bom.py").write_bytes(b"\xef\xbb\xbf" + fixable.replace("\n", "\r\n").encode())
    (root / "src" / "latin1.py").write_bytes(b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + fixable.encode())
    (root / "src" / "executable.py").write_text(fixable)
    (root / "src" / "executable.py").chmod(0o755)
    proc = lintloop("check", "--select", "ALL", "--no-cache", "--exit-zero", "--format", "json", "src", cwd=root)
    assert proc.returncode == 0, proc.stderr
    fixable = {Path(f["path"]).relative_to("src").as_posix() for f in json.loads(proc.stdout) if f["fix"]}
    before = scale.snapshot_tree(root / "src")
    proc = lintloop("fix", "--unsafe-fixes", "--select", "ALL", "--no-cache", "--exit-zero", "--quiet", "src",
                    cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert "internal error" not in proc.stderr
    return root, fixable, before, scale.snapshot_tree(root / "src")


def test_fix_keeps_format_and_leaves_files_without_fixes_alone(fixed_fixtures) -> None:
    root, fixable, before, after = fixed_fixtures
    changed, problems = scale.compare_trees(before, after, fixable)
    assert problems == []
    assert {"crlf_bom.py", "latin1.py", "executable.py", "LL603_bad.py"} <= set(changed)
    assert scale.parse_problems([str(root / "src" / name) for name in changed]) == {}


def test_a_second_fix_changes_nothing(fixed_fixtures) -> None:
    root, _, _, after = fixed_fixtures
    proc = lintloop("fix", "--unsafe-fixes", "--select", "ALL", "--no-cache", "--exit-zero", "--quiet", "src",
                    cwd=root)
    assert proc.returncode == 0, proc.stderr
    changed, problems = scale.compare_trees(after, scale.snapshot_tree(root / "src"), may_change=set())
    assert (changed, problems) == ([], [])
