"""The shipped integrations, each driven by what reads it: the pre-commit hooks by the real
pre-commit, the VS Code problem matcher's regexps and the GitHub workflow commands on real
output, and the example workflow by lintloop's own argument parser."""

from __future__ import annotations

import argparse
import fcntl
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from conftest import FIXTURES, TF_PRINT, TORCH_LEAK
from module_files import load_module
from lintloop.cli import build_parser, main
from lintloop.config import load_settings
from lintloop.finding import Finding
from lintloop.linter import lint_bytes, lint_text
from lintloop.reporters import REPORTERS
from lintloop.rules import ALL_RULES

CHECKOUT = Path(__file__).resolve().parent.parent
INTEGRATIONS = CHECKOUT / "integrations"


# --- what lintloop reports on real fixtures, in every machine-read format -----------------------------

# A headline with `%` (LL302's "`(loss % 7).item()`") in files whose paths hold a space,
# and `,` `:` `%` (GitHub escapes those in properties); the suppression names an unknown code (LL002).
_AWKWARD_FILES = {
    "runs 50%, v1:2/train step.py": (FIXTURES / "LL604_bad.py").read_text(),
    "runs 50%, v1:2/sync step.py": ("import torch\nfor x, y in loader:\n    optimizer.zero_grad()\n"
                                    "    loss = criterion(model(x), y)\n    loss.backward()\n    optimizer.step()\n"
                                    "    print((loss % 7).item())\n"),
    "runs 50%, v1:2/suppressed.py": "import torch\nx = torch.ones(3)  # lintloop: ignore[LL999]\n",
    "broken.py": "def step(:\n",  # LL001 (named on the command line: no deep-learning code)
}


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """`lintloop check --select ALL` on the fixtures and the awkward files, once per format."""
    base = tmp_path_factory.mktemp("reports")
    for relative, text in _AWKWARD_FILES.items():
        (base / relative).parent.mkdir(parents=True, exist_ok=True)
        (base / relative).write_text(text)
    out = {}
    for fmt in ("json", "concise", "github"):
        report = base / f"report.{fmt}"
        code = main(["check", str(FIXTURES), str(base), str(base / "broken.py"), "--select", "ALL", "--no-cache",
                     "--format", fmt, "--output", str(report)])
        assert code == 1
        out[fmt] = report.read_text(encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def findings(reports: dict[str, str]) -> list[dict[str, Any]]:
    """The JSON report, which the other formats are read back against; it holds what is hard for them."""
    every = json.loads(reports["json"])
    assert {"error", "warning"} <= {f["severity"] for f in every}
    assert any(f["line"] != f["end_line"] for f in every) and any("%" in f["message"] for f in every)
    assert {"LL001", "LL002"} <= {f["code"] for f in every}
    return every


# --- VS Code problem matcher --------------------------------------------------------------------------

def _generator() -> ModuleType:
    return load_module(INTEGRATIONS / "problem_matcher.py", "problem_matcher")


def _shipped_matchers() -> list[dict[str, Any]]:
    return json.loads((INTEGRATIONS / "vscode-problem-matcher.json").read_text())


def _match(matchers: list[dict[str, Any]], line: str) -> dict[str, Any]:
    """What VS Code reads from one output line: the one matcher whose regexp matches it, applied."""
    hits = [(m, re.match(m["pattern"]["regexp"], line)) for m in matchers]
    hits = [(m, hit) for m, hit in hits if hit]
    assert len(hits) == 1, f"{len(hits)} matchers match {line!r}"
    [(matcher, hit)] = hits
    pattern = matcher["pattern"]
    return {"path": hit[pattern["file"]], "line": int(hit[pattern["line"]]), "column": int(hit[pattern["column"]]),
            "code": hit[pattern["code"]], "message": hit[pattern["message"]], "severity": matcher["severity"]}


def test_problem_matcher_file_is_generated_from_the_catalog():
    shipped = (INTEGRATIONS / "vscode-problem-matcher.json").read_text()
    assert shipped == _generator().render(), (
        "integrations/vscode-problem-matcher.json is stale: run "
        "`python integrations/problem_matcher.py > integrations/vscode-problem-matcher.json`")


def test_problem_matcher_has_vscode_shape_and_one_matcher_per_code():
    # The keys VS Code's tasks.json schema allows for a problem matcher and its pattern.
    matcher_keys = {"base", "owner", "source", "severity", "fileLocation", "pattern", "background", "applyTo"}
    pattern_keys = {"regexp", "kind", "file", "location", "line", "column", "endLine", "endColumn", "severity",
                    "code", "message", "loop"}
    matchers = _shipped_matchers()
    assert isinstance(matchers, list) and len(matchers) == len({r.severity() for r in ALL_RULES})
    for matcher in matchers:
        assert set(matcher) <= matcher_keys and matcher["owner"] == "lintloop"
        assert matcher["severity"] in ("error", "warning", "info")
        kind, folder = matcher["fileLocation"]
        assert kind in ("absolute", "relative", "autoDetect", "search") and folder == "${workspaceFolder}"
        pattern = matcher["pattern"]
        assert set(pattern) <= pattern_keys
        groups = re.compile(pattern["regexp"]).groups
        for key in ("file", "line", "column", "code", "message"):
            assert isinstance(pattern[key], int) and 1 <= pattern[key] <= groups, key
    for rule in ALL_RULES:  # disjoint and complete: each code is read by its own severity's matcher only
        line = f"train.py:3:5: {rule.code} a message [{rule.name}]"
        assert _match(matchers, line)["severity"] == rule.severity(), rule.code


def test_problem_matcher_reads_every_finding(reports, findings):
    lines = reports["concise"].splitlines()
    assert len(lines) == len(findings)
    matchers = _shipped_matchers()
    keys = ("path", "line", "column", "code", "message", "severity")
    assert [_match(matchers, line) for line in lines] == [{k: f[k] for k in keys} for f in findings]


def test_problem_matcher_reads_a_windows_path():
    finding = Finding(r"C:\Users\me\my project\train.py", 12, 9, 12, 20, "LL301", "loss-tensor-accumulation",
                      "`total += loss` keeps every step's graph: 3: alive", "bug", "error")
    stream = io.StringIO()
    REPORTERS["concise"]([finding], stream)
    read = _match(_shipped_matchers(), stream.getvalue().rstrip("\n"))
    assert read == {"path": finding.path, "line": 12, "column": 9, "code": "LL301", "message": finding.message,
                    "severity": "error"}


# --- GitHub workflow commands -------------------------------------------------------------------------

# `::command key=value,key=value::message`: the syntax the Actions runner parses.
_WORKFLOW_COMMAND = re.compile(r"::(error|warning|notice) ([^:\r\n]*)::([^\r\n]*)")
_MESSAGE_ESCAPES = {"%25": "%", "%0D": "\r", "%0A": "\n"}
_PROPERTY_ESCAPES = {**_MESSAGE_ESCAPES, "%3A": ":", "%2C": ","}


def _unescape(text: str, escapes: dict[str, str]) -> str:
    return re.sub("|".join(escapes), lambda m: escapes[m[0]], text)


def _parse_workflow_command(line: str) -> tuple[str, dict[str, str], str]:
    parsed = _WORKFLOW_COMMAND.fullmatch(line)
    assert parsed, line
    command, properties, message = parsed.groups()
    pairs = [item.split("=", 1) for item in properties.split(",")]
    assert all(len(pair) == 2 for pair in pairs), line
    return (command, {key: _unescape(value, _PROPERTY_ESCAPES) for key, value in pairs},
            _unescape(message, _MESSAGE_ESCAPES))


def _expected_annotation(finding: dict[str, Any]) -> tuple[str, dict[str, str], str]:
    if "cell" in finding:  # a notebook: a file annotation, the cell position in the message
        where = f"cell {finding['cell']}:{finding['line']}:{finding['column']}"
        return (finding["severity"], {"file": finding["path"], "title": finding["code"]},
                f"{where}: {finding['message']} [{finding['name']}]")
    properties = {"file": finding["path"], "line": str(finding["line"]), "col": str(finding["column"]),
                  "title": finding["code"]}
    if finding["end_line"] == finding["line"]:  # GitHub takes a column range on one line only
        properties |= {"endLine": str(finding["end_line"]), "endColumn": str(finding["end_column"])}
    return finding["severity"], properties, f"{finding['message']} [{finding['name']}]"


def test_github_annotations_parse_back_to_the_findings(reports, findings):
    lines = reports["github"].splitlines()
    assert len(lines) == len(findings)
    assert any("%2C" in line and "%3A" in line and "%25" in line.split("::")[1] for line in lines)
    assert [_parse_workflow_command(line) for line in lines] == [_expected_annotation(f) for f in findings]


def test_github_escapes_line_breaks_and_percent_in_messages():
    finding = Finding("a:b,c%d.py", 2, 1, 4, 3, "LL301", "loss-tensor-accumulation",
                      "100% of steps\r\nkeep :: the graph", "bug", "warning")
    stream = io.StringIO()
    REPORTERS["github"]([finding], stream)
    [line] = stream.getvalue().splitlines()
    assert _parse_workflow_command(line) == _expected_annotation(finding.to_json())


# --- the example workflow -----------------------------------------------------------------------------

def _lintloop_commands(step: dict[str, Any]) -> list[argparse.Namespace]:
    """Each `lintloop ...` command line of a `run:` step, parsed by lintloop's own parser."""
    parsed = []
    for line in step.get("run", "").splitlines():
        argv = shlex.split(line, comments=True)
        if argv[:1] == ["lintloop"]:
            try:
                parsed.append(build_parser().parse_args(argv[1:]))
            except SystemExit:
                pytest.fail(f"the example workflow runs a command lintloop rejects: {line}")
    return parsed


def test_example_workflow_annotates_and_uploads_sarif():
    workflow = yaml.safe_load((INTEGRATIONS / "github-actions.yml").read_text())
    assert {"push", "pull_request"} <= set(workflow.get("on", workflow.get(True)))  # YAML 1.1 reads `on` as true
    [job] = workflow["jobs"].values()
    permissions = {**workflow.get("permissions", {}), **job.get("permissions", {})}
    assert permissions["security-events"] == "write"
    steps = job["steps"]
    commands = [(i, args) for i, step in enumerate(steps) for args in _lintloop_commands(step)]
    assert all(args.command == "check" for _, args in commands)
    [(_, annotate)] = [(i, a) for i, a in commands if a.format == "github"]
    assert not annotate.exit_zero  # the job fails while findings remain
    [(sarif_index, sarif)] = [(i, a) for i, a in commands if a.format == "sarif"]
    # The report is written whatever the findings, and uploaded even when the annotation step failed.
    assert sarif.exit_zero and sarif.output
    [(upload_index, upload)] = [(i, s) for i, s in enumerate(steps)
                                if s.get("uses", "").startswith("github/codeql-action/upload-sarif@")]
    assert upload_index > sarif_index and upload["with"]["sarif_file"] == sarif.output
    assert re.search(r"always\(\)|!\s*cancelled\(\)", upload.get("if", "")), upload.get("if")


# --- pre-commit, for real -----------------------------------------------------------------------------

def test_precommit_manifest_is_valid_and_its_entries_parse():
    manifest = CHECKOUT / ".pre-commit-hooks.yaml"
    validated = subprocess.run([sys.executable, "-m", "pre_commit", "validate-manifest", str(manifest)],
                               capture_output=True, text=True)
    assert validated.returncode == 0, validated.stdout + validated.stderr
    hooks = {hook["id"]: hook for hook in yaml.safe_load(manifest.read_text())}
    assert set(hooks) == {"lintloop", "lintloop-fix"}
    for hook_id, command in (("lintloop", "check"), ("lintloop-fix", "fix")):
        argv = shlex.split(hooks[hook_id]["entry"])
        assert argv[0] == "lintloop"
        args = build_parser().parse_args([*argv[1:], "train.py"])  # pre-commit appends the files it selected
        # --force-exclude: `exclude` applies to the files pre-commit names too
        assert args.command == command and args.force_exclude and args.paths == ["train.py"]


def _git(*args: str, cwd: Path, env: dict[str, str]) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def _isolated_env(folder: Path) -> dict[str, str]:
    """Git and pre-commit configured by the test alone, sharing the hook environment in `folder`."""
    gitconfig = folder / "gitconfig"
    if not gitconfig.exists():
        gitconfig.write_text("[user]\n\tname = lintloop tests\n\temail = tests@lintloop.invalid\n"
                             "[init]\n\tdefaultBranch = main\n[commit]\n\tgpgsign = false\n"
                             "[safe]\n\tdirectory = *\n")
    # Git variables of a caller (a hook running these tests sets GIT_INDEX_FILE) would point elsewhere.
    inherited = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    return {**inherited, "GIT_CONFIG_GLOBAL": str(gitconfig), "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_OPTIONAL_LOCKS": "0",  # `git status` in the checkout must not touch its index
            "PRE_COMMIT_HOME": str(folder / "pre-commit-home"), "PRE_COMMIT_COLOR": "never"}


def _commit_of_the_working_tree(folder: Path, env: dict[str, str]) -> tuple[str, str]:
    """(repo, rev) for a pre-commit config: the checkout at HEAD when it is clean (CI), else a
    throwaway repository with one commit of its tracked and untracked-not-ignored files."""
    if not _git("status", "--porcelain", cwd=CHECKOUT, env=env).strip():
        return str(CHECKOUT), _git("rev-parse", "HEAD", cwd=CHECKOUT, env=env).strip()
    copy = folder / "lintloop-working-tree"
    listed = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=CHECKOUT, env=env)
    for relative in filter(None, listed.split("\0")):
        source = CHECKOUT / relative
        if source.is_file() or source.is_symlink():  # not a tracked file deleted in the working tree
            (copy / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / relative, follow_symlinks=False)
    _git("init", "--quiet", cwd=copy, env=env)
    _git("add", "--all", cwd=copy, env=env)
    _git("commit", "--quiet", "--no-verify", "-m", "lintloop's working tree", cwd=copy, env=env)
    return str(copy), _git("rev-parse", "HEAD", cwd=copy, env=env).strip()


def _precommit_config(repo: str, rev: str, hook: str) -> str:
    return yaml.safe_dump({"repos": [{"repo": repo, "rev": rev, "hooks": [{"id": hook}]}]})


@pytest.fixture(scope="session")
def hook_source(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, dict[str, str]]:
    """(repo, rev, environment) with the hooks' environment installed, once per session: the
    pip install takes a while, so pytest-xdist's workers share it under a lock."""
    if not (CHECKOUT / ".git").exists():
        pytest.skip("pre-commit installs hooks from a git repository; this lintloop is not a git checkout")
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the folder every worker's own temporary folder is in
    folder = root / "pre-commit-hooks"
    folder.mkdir(exist_ok=True)
    env = _isolated_env(folder)
    ready = folder / "hook-source.json"
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be installing: wait for it
        if not ready.exists():
            repo, rev = _commit_of_the_working_tree(folder, env)
            scratch = folder / "install"
            scratch.mkdir()
            _git("init", "--quiet", cwd=scratch, env=env)
            (scratch / ".pre-commit-config.yaml").write_text(_precommit_config(repo, rev, "lintloop"))
            installed = subprocess.run([sys.executable, "-m", "pre_commit", "install-hooks"], cwd=scratch,
                                       env=env, capture_output=True, text=True)
            assert installed.returncode == 0, installed.stdout + installed.stderr
            ready.write_text(json.dumps([repo, rev]))
        repo, rev = json.loads(ready.read_text())
    return repo, rev, env


class Project:
    """A git repository with lintloop's pre-commit hook installed, committed to as a user does."""

    def __init__(self, path: Path, hook_source: tuple[str, str, dict[str, str]], hook: str) -> None:
        repo, rev, self.env = hook_source
        self.path = path
        self.git("init", "--quiet")
        self.write(".pre-commit-config.yaml", _precommit_config(repo, rev, hook))
        subprocess.run([sys.executable, "-m", "pre_commit", "install"], cwd=path, env=self.env, check=True,
                       capture_output=True)

    def git(self, *args: str) -> str:
        return _git(*args, cwd=self.path, env=self.env)

    def write(self, relative: str, text: str) -> None:
        (self.path / relative).parent.mkdir(parents=True, exist_ok=True)
        (self.path / relative).write_text(text)

    def commit(self) -> subprocess.CompletedProcess[str]:
        """`git commit`, which runs the hook on the staged files; stdout and stderr together."""
        return subprocess.run(["git", "commit", "-m", "change"], cwd=self.path, env=self.env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_precommit_check_hook_blocks_staged_findings_only(tmp_path, hook_source):
    project = Project(tmp_path, hook_source, "lintloop")
    project.write("pyproject.toml", '[tool.lintloop]\nexclude = ["generated/"]\nextend-exclude = ["vendored_*.py"]\n')
    project.write("train.py", TORCH_LEAK)
    project.write("generated/model.py", TORCH_LEAK)
    project.write("vendored_optim.py", TORCH_LEAK)
    project.write("clean.py", "import torch\n")
    # A script without a suffix is Python by its shebang (pre-commit's `python` type) and linted too.
    project.write("bin/train", "#!/usr/bin/env python\n" + TORCH_LEAK)
    (tmp_path / "bin/train").chmod(0o755)
    # Notebooks too (pre-commit's `jupyter` type): findings named by cell.
    project.write("explore.ipynb", (FIXTURES / "notebooks" / "LL301_bad.ipynb").read_text())
    project.git("add", "--all")
    project.write("clean.py", TORCH_LEAK)  # an unstaged change to a staged file
    project.write("scratch.py", TORCH_LEAK)  # never staged

    blocked = project.commit()
    assert blocked.returncode == 1, blocked.stdout
    for unseen in ("generated", "vendored_optim.py", "clean.py", "scratch.py"):
        assert unseen not in blocked.stdout
    report = blocked.stdout.splitlines()
    for staged in ("bin/train", "train.py"):
        expected = lint_text(staged, (tmp_path / staged).read_text(), load_settings(start=tmp_path).ruleset())
        assert expected.findings
        # The file's heading, then `  line:column  CODE [*] message [name]` ([*] when fixable) each.
        start = report.index(staged) + 1
        section = report[start:report.index("", start)]
        for finding in expected.findings:
            prefix = f"  {finding.line}:{finding.column}  {finding.code} "
            [line] = [text for text in section if text.startswith(prefix)]
            assert line.endswith(f" {finding.message} [{finding.name}]"), line
    assert (tmp_path / "clean.py").read_text() == TORCH_LEAK  # pre-commit gave the unstaged change back
    notebook = lint_bytes("explore.ipynb", (tmp_path / "explore.ipynb").read_bytes(),
                          load_settings(start=tmp_path).ruleset()).findings
    start = report.index("explore.ipynb") + 1
    assert notebook and [line for line in report[start:] if line.startswith("  cell ")][:len(notebook)] == [
        f"  {f.where}  {f.code}{' [*]' if f.fix and f.fix.applicability == 'safe' else ''} {f.message} [{f.name}]"
        for f in notebook]

    project.write("train.py", "import torch\n")
    project.write("bin/train", "#!/usr/bin/env python\nimport torch\n")
    project.git("rm", "--cached", "--quiet", "explore.ipynb")
    project.git("add", "train.py", "bin/train")
    passed = project.commit()
    assert passed.returncode == 0, passed.stdout
    assert re.search(r"^lintloop\.+Passed$", passed.stdout, re.MULTILINE), passed.stdout


def test_precommit_fix_hook_fixes_then_the_commit_passes(tmp_path, hook_source):
    project = Project(tmp_path, hook_source, "lintloop-fix")
    project.write("step.py", TF_PRINT)
    project.git("add", "--all")
    fixable = lint_text("step.py", TF_PRINT, load_settings(start=tmp_path).ruleset()).findings
    assert [f.fix.applicability for f in fixable if f.fix] == ["safe"]

    modified = project.commit()
    assert modified.returncode == 1 and "files were modified by this hook" in modified.stdout, modified.stdout
    text = (tmp_path / "step.py").read_text()
    assert text != TF_PRINT and not lint_text("step.py", text, load_settings(start=tmp_path).ruleset()).findings

    project.git("add", "step.py")
    passed = project.commit()
    assert passed.returncode == 0, passed.stdout
    assert project.git("show", "HEAD:step.py") == text
