"""The GitHub Action (`action.yml`): its metadata read as the runner reads it, then its run steps
run with bash, in the environment the runner gives a composite action's steps, on a project with
findings.

The install step runs for real: the action's checkout (a copy of this one) is built and installed
by pip into a fresh virtual environment under $RUNNER_TEMP. Only lintloop's dependencies come from
the test's own environment, offline: pip is told, through its environment variables, to install no
dependencies, use no index and build without isolation, and the new environment finds them on
PYTHONPATH, in a folder linking every installed distribution but lintloop and pip.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from conftest import FIXTURES
from module_files import load_module

CHECKOUT = Path(__file__).resolve().parent.parent
ACTION = yaml.safe_load((CHECKOUT / "action.yml").read_text())
STEPS = ACTION["runs"]["steps"]
INPUT_DEFAULTS = {"version": "", "paths": ".", "args": "", "sarif": "true", "python-version": "3.12"}


def _step(step_id: str) -> dict[str, Any]:
    [step] = [step for step in STEPS if step.get("id") == step_id]
    return step


def _action_steps() -> ModuleType:
    return load_module(CHECKOUT / "integrations/action/action_steps.py", "action_steps")


# --- the metadata -------------------------------------------------------------------------------------

def test_action_is_composite_with_the_documented_inputs_and_outputs():
    assert ACTION["name"] == "lintloop" and ACTION["description"]
    assert ACTION["runs"]["using"] == "composite"
    assert {name: spec["default"] for name, spec in ACTION["inputs"].items()} == INPUT_DEFAULTS
    assert all(spec["description"] for spec in ACTION["inputs"].values())
    # A composite action's outputs are its steps' outputs, named alike here.
    assert {name: spec["value"] for name, spec in ACTION["outputs"].items()} == {
        name: f"${{{{ steps.check.outputs.{name} }}}}" for name in ("exit-code", "sarif-file")}
    assert all(spec["description"] for spec in ACTION["outputs"].values())


def test_run_steps_get_inputs_through_env_only():
    run_steps = [step for step in STEPS if "run" in step]
    assert [step["id"] for step in run_steps] == ["install", "check"]
    for step in run_steps:
        assert "${{" not in step["run"], step["run"]  # an expression here would be pasted into shell code
        assert step["shell"] == "bash"  # composite actions require a shell
    passed = {name for step in run_steps for value in step["env"].values()
              for name in re.findall(r"\binputs\.([\w-]+)", value)}
    assert passed == set(INPUT_DEFAULTS) - {"python-version"}  # that one goes to setup-python


def test_python_is_set_up_without_changing_the_jobs_python():
    setup = _step("python")
    assert setup["uses"].startswith("actions/setup-python@")
    assert setup["with"] == {"python-version": "${{ inputs.python-version }}", "update-environment": False}
    assert setup["if"] == "inputs.python-version != ''"  # empty: the runner's python3


def test_sarif_upload_follows_the_check_even_when_it_failed():
    [(index, upload)] = [(i, step) for i, step in enumerate(STEPS)
                         if step.get("uses", "").startswith("github/codeql-action/upload-sarif@")]
    assert index > STEPS.index(_step("check"))
    assert upload["with"]["sarif_file"] == "${{ steps.check.outputs.sarif-file }}"
    assert re.search(r"always\(\)|!\s*cancelled\(\)", upload["if"]), upload["if"]
    assert "steps.check.outputs.sarif-file != ''" in upload["if"]  # `sarif: false` writes none: no upload


# --- the version input --------------------------------------------------------------------------------

@pytest.mark.parametrize(("version", "wanted"), [
    ("", "/actions/lintloop"),
    ("  ", "/actions/lintloop"),
    ("latest", "lintloop"),
    ("0.1.0", "lintloop==0.1.0"),
    ("v0.1.0", "lintloop==0.1.0"),
    (" 0.2.0rc1 ", "lintloop==0.2.0rc1"),
    ("0.1.*", "lintloop==0.1.*"),
    (">=0.1", "lintloop>=0.1"),
    ("~=0.1.0", "lintloop~=0.1.0"),
    ("==0.1.0", "lintloop==0.1.0"),
    (">=0.1, <0.3", "lintloop>=0.1, <0.3"),
])
def test_version_input_becomes_a_pip_requirement(version, wanted):
    assert _action_steps().requirement(version, "/actions/lintloop") == wanted


@pytest.mark.parametrize("version", [
    "lintloop==0.1.0", "newest", "0.1; sys_platform == 'linux'", ">=0.1\n--pre", "-e .",
    "--index-url=https://example.invalid", "lintloop @ https://example.invalid/lintloop.whl", "./lintloop",
])
def test_version_input_that_is_no_version_is_refused(version):
    with pytest.raises(ValueError, match="version: "):
        _action_steps().requirement(version, "/actions/lintloop")


# --- the run steps, run ---------------------------------------------------------------------------------

_EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def _evaluate(text: str, contexts: dict[str, Any]) -> str:
    """`${{ context.key.key }}` in `text`, read from `contexts` (an unset step output reads as '', as on
    GitHub); any other expression fails the test rather than being guessed at."""
    def value(match: re.Match[str]) -> str:
        node = contexts
        for key in match[1].split("."):
            assert re.fullmatch(r"[A-Za-z_][\w-]*", key), f"not a context value: {match[0]}"
            node = node[key]
        return str(node)
    return _EXPRESSION.sub(value, text)


def _read_outputs(path: Path) -> dict[str, str]:
    """A GITHUB_OUTPUT file: `name=value` lines and `name<<DELIMITER` ... `DELIMITER` blocks."""
    outputs = {}
    lines = iter(path.read_text(encoding="utf-8").splitlines())
    for line in lines:
        if delimited := re.fullmatch(r"([^=]+?)<<(.+)", line):
            name, delimiter = delimited.groups()
            value = []
            for text in lines:
                if text == delimiter:
                    break
                value.append(text)
            else:
                pytest.fail(f"{name}: no closing {delimiter}")
            outputs[name] = "\n".join(value)
        else:
            name, _, outputs[name] = line.partition("=")
    return outputs


# What lintloop's and pip's distributions install in site-packages (an editable install's files too).
_LINTLOOP_OR_PIP = re.compile(r"(__editable__[._]+)?(lintloop|pip)([-_.].*)?")


@dataclass
class StepRun:
    returncode: int
    stdout: str
    outputs: dict[str, str]
    summary: str


class Runner:
    """What the runner provides the action: its checkout, a temporary folder and the environment of
    its steps; runs a step as the runner does."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.action_path = root / "actions/lintloop checkout"  # spaces: every path must be quoted
        shutil.copytree(CHECKOUT, self.action_path,
                        ignore=shutil.ignore_patterns(".*", "build", "dist", "*.egg-info", "__pycache__"))
        self.temp = root / "runner temp"
        self.temp.mkdir()
        self.env = {**os.environ, "GITHUB_ACTIONS": "true", "CI": "true", "RUNNER_TEMP": str(self.temp),
                    "GITHUB_ACTION_PATH": str(self.action_path), "PYTHONPATH": str(self._dependencies()),
                    "PIP_NO_DEPS": "1", "PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0"}  # "0": no isolation
        self.step_runs = 0  # names each run's GITHUB_OUTPUT, GITHUB_STEP_SUMMARY and script files

    def _dependencies(self) -> Path:
        folder = self.root / "dependencies"
        folder.mkdir()
        for site in {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}:
            for entry in Path(site).iterdir():
                if not _LINTLOOP_OR_PIP.fullmatch(entry.name):
                    (folder / entry.name).symlink_to(entry)
        return folder

    def run(self, step_id: str, inputs: dict[str, str], outputs: dict[str, dict[str, str]],
            workspace: Path) -> StepRun:
        """Run the step as the runner does (bash with `-eo pipefail`, in the workspace, its `env:`
        evaluated, fresh GITHUB_OUTPUT and GITHUB_STEP_SUMMARY files); record its outputs in `outputs`."""
        step = _step(step_id)
        self.step_runs += 1
        files = {name: self.root / f"{step_id}-{self.step_runs}.{name}" for name in ("script", "output", "summary")}
        files["script"].write_text(step["run"])
        files["output"].touch()
        files["summary"].touch()
        contexts = {"inputs": {**INPUT_DEFAULTS, **inputs},
                    "github": {"action_path": str(self.action_path), "workspace": str(workspace)},
                    "steps": {each["id"]: {"outputs": defaultdict(str, outputs.get(each["id"], {}))}
                              for each in STEPS if "id" in each}}
        env = {**self.env, **{name: _evaluate(value, contexts) for name, value in step["env"].items()},
               "GITHUB_WORKSPACE": str(workspace), "GITHUB_OUTPUT": str(files["output"]),
               "GITHUB_STEP_SUMMARY": str(files["summary"])}
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(files["script"])],
                              cwd=workspace, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=120, check=False)
        outputs[step_id] = _read_outputs(files["output"])
        return StepRun(done.returncode, done.stdout, outputs[step_id], files["summary"].read_text())


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Runner:
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("the install step builds lintloop offline with this environment's setuptools, which is missing")
    return Runner(tmp_path_factory.mktemp("runner"))


@pytest.fixture(scope="module")
def installed(runner: Runner) -> dict[str, dict[str, str]]:
    """The step outputs once lintloop is installed: setup-python's (this interpreter), then the install
    step's, run once for the module."""
    outputs = {"python": {"python-path": sys.executable}}
    workspace = runner.root / "install workspace"
    workspace.mkdir()
    install = runner.run("install", {}, outputs, workspace)
    assert install.returncode == 0, install.stdout
    assert re.search(r"^lintloop \d", install.stdout, re.MULTILINE), install.stdout  # `lintloop --version`
    assert not any(workspace.iterdir())  # nothing written into the user's checkout
    return outputs


def test_install_puts_the_actions_own_lintloop_in_a_fresh_venv(runner, installed):
    lintloop = Path(installed["install"]["lintloop"])
    assert lintloop.is_file() and runner.temp in lintloop.parents
    # Out of this checkout, whose `lintloop/` folder `-c` would import from the current directory.
    imported = subprocess.run([str(lintloop.parent / "python"), "-c", "import lintloop; print(lintloop.__file__)"],
                              cwd=runner.root, env=runner.env, capture_output=True, text=True, check=True).stdout
    assert runner.temp in Path(imported.strip()).parents  # not the test environment's lintloop


def test_install_refuses_a_version_that_is_no_version(runner):
    workspace = runner.root / "refused workspace"
    workspace.mkdir()
    refused = runner.run("install", {"version": "0.1; os_name == 'nt'"}, {}, workspace)
    assert refused.returncode == 2 and "::error title=lintloop action::version: " in refused.stdout
    assert "lintloop" not in refused.outputs


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A checkout with two flagged training scripts (LL301, LL101), one clean one, and one flagged
    script in a directory whose name holds a space."""
    checkout = tmp_path / "work space"
    (checkout / "my project").mkdir(parents=True)
    (checkout / "train.py").write_text((FIXTURES / "LL301_bad.py").read_text())
    (checkout / "tape.py").write_text((FIXTURES / "LL101_bad.py").read_text())
    (checkout / "clean.py").write_text((FIXTURES / "LL301_good.py").read_text())
    (checkout / "my project/train.py").write_text((FIXTURES / "LL301_bad.py").read_text())
    return checkout


def _check(runner: Runner, installed: dict[str, dict[str, str]], workspace: Path, **inputs: str) -> StepRun:
    return runner.run("check", inputs, {**installed}, workspace)


def _annotated(stdout: str) -> dict[str, set[str]]:
    """file -> the codes annotated on it, from the `::error`/`::warning` lines."""
    annotated = defaultdict(set)
    for file, code in re.findall(r"^::(?:error|warning) file=([^,]+),line=\d+,col=\d+.*?,title=(\w+)::",
                                 stdout, re.MULTILINE):
        annotated[file].add(code)
    return dict(annotated)


def _sarif_results(report: str) -> dict[str, set[str]]:
    """file -> the rule ids of its results, from a SARIF report (which must be valid JSON)."""
    [run] = json.loads(Path(report).read_text())["runs"]
    results = defaultdict(set)
    for result in run["results"]:
        results[result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]].add(result["ruleId"])
    return dict(results)


def test_findings_are_annotated_and_reported_in_sarif_and_fail_the_step(runner, installed, workspace):
    checked = _check(runner, installed, workspace)
    assert checked.returncode == 1 and checked.outputs["exit-code"] == "1", checked.stdout
    expected = {"train.py": {"LL301"}, "tape.py": {"LL101"}, "my project/train.py": {"LL301"}}
    assert _annotated(checked.stdout) == expected
    assert re.search(r"^::error file=train\.py,line=\d+,", checked.stdout, re.MULTILINE)
    report = checked.outputs["sarif-file"]
    assert runner.temp in Path(report).parents
    assert _sarif_results(report) == {uri.replace(" ", "%20"): codes for uri, codes in expected.items()}
    assert "| LL301 | `loss-tensor-accumulation` | 2 |" in checked.summary
    assert "| LL101 | `numpy-in-gradient-tape` | 2 |" in checked.summary


def test_clean_code_passes(runner, installed, workspace):
    checked = _check(runner, installed, workspace, paths="clean.py")
    assert checked.returncode == 0 and checked.outputs["exit-code"] == "0", checked.stdout
    assert _annotated(checked.stdout) == {} and "No findings." in checked.summary
    assert _sarif_results(checked.outputs["sarif-file"]) == {}


def test_paths_are_split_as_a_shell_would(runner, installed, workspace):
    checked = _check(runner, installed, workspace, paths=' "my project"\n  clean.py ')
    assert checked.outputs["exit-code"] == "1"
    assert _annotated(checked.stdout) == {"my project/train.py": {"LL301"}}


def test_without_python_version_the_steps_run_on_the_runners_python3(runner, installed, workspace):
    outputs = {"install": installed["install"]}  # setup-python was skipped: its output reads as ''
    checked = runner.run("check", {"python-version": "", "paths": "clean.py"}, outputs, workspace)
    assert checked.returncode == 0 and checked.outputs["exit-code"] == "0", checked.stdout


def test_args_reach_lintloop(runner, installed, workspace):
    checked = _check(runner, installed, workspace, args="--select LL1")
    assert checked.outputs["exit-code"] == "1"
    assert _annotated(checked.stdout) == {"tape.py": {"LL101"}}
    assert _sarif_results(checked.outputs["sarif-file"]) == {"tape.py": {"LL101"}}


def test_sarif_false_writes_no_report(runner, installed, workspace):
    before = set(runner.temp.rglob("*.sarif"))
    checked = _check(runner, installed, workspace, sarif="False")
    assert checked.returncode == 1 and checked.outputs["exit-code"] == "1"
    assert "sarif-file" not in checked.outputs and set(runner.temp.rglob("*.sarif")) == before


@pytest.mark.parametrize(("inputs", "reason"), [
    ({"paths": "missing.py"}, "missing.py"),
    ({"args": "--select LL9999"}, "LL9999"),
    ({"args": '--select "LL1'}, "args: No closing quotation"),
    ({"sarif": "yes"}, "sarif: 'yes'"),
])
def test_a_usage_error_fails_with_2_and_says_why(runner, installed, workspace, inputs, reason):
    checked = _check(runner, installed, workspace, **inputs)
    assert checked.returncode == 2 and checked.outputs["exit-code"] == "2", checked.stdout
    [error] = [line for line in checked.stdout.splitlines() if line.startswith("::error title=lintloop action::")]
    assert reason in error and reason in checked.summary
    assert "sarif-file" not in checked.outputs
