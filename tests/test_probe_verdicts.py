"""The probe confirms each bad fixture's finding and not the good fixture's (real frameworks, CPU)."""

import importlib.util
import json

import pytest

from conftest import FIXTURES, fixture_framework
from fixture_cases import CASES as RUNS
from lintloop.rules import lookup
from lintloop.runtime_probe import store as probe_store
from lintloop.runtime_probe.verdicts import verdict

pytestmark = pytest.mark.framework

# (rule, fixture stem) for every `<code>[_variant]_bad.py` / `_good.py` pair of a rule whose catalog
# probe column is not "—".
CASES = sorted((stem[:5], stem) for stem in (p.name[: -len("_bad.py")] for p in FIXTURES.glob("LL*_bad.py"))
               if (FIXTURES / f"{stem}_good.py").exists() and lookup(stem[:5]).probe != "—")
STEPS = 60
ARGV = {case[0]: case[2] for case in RUNS}  # the run the fixture's output test reads (fixture_runs.py)
# Fixtures whose symptom needs another run than their output test's to show in the probe's signal
# (argv, step cap): TF's scalar-list growth is seen in the live tensors at the cap, and LL703's
# evaluation needs its default number of batches.
OTHER_RUNS = {"LL301_tf_bad": ([], STEPS), "LL301_tf_good": ([], STEPS),
              "LL703_bad": (["--steps", "20"], 0), "LL703_good": (["--steps", "20"], 0)}


def _needs(stem):
    module = fixture_framework(FIXTURES / f"{stem}_bad.py")
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")


def summary(fixture_probe_run, name):
    argv, steps = OTHER_RUNS.get(name, (ARGV[name], 0))
    return fixture_probe_run(name, argv, steps).summary


@pytest.mark.parametrize("code,stem", CASES, ids=[s for _, s in CASES])
def test_bad_fixture_is_confirmed(code, stem, fixture_probe_run):
    _needs(stem)
    result = verdict(code, summary(fixture_probe_run, f"{stem}_bad"))
    assert result["status"] == "confirmed", result
    assert result["evidence"]["signal"]


@pytest.mark.parametrize("code,stem", CASES, ids=[s for _, s in CASES])
def test_good_fixture_is_not_confirmed(code, stem, fixture_probe_run):
    _needs(stem)
    result = verdict(code, summary(fixture_probe_run, f"{stem}_good"))
    assert result["status"] == "not-confirmed", result


def test_check_probe_attaches_verdicts_and_the_fix_removes_the_symptom(run_cli, tmp_path):
    _needs("LL301")
    script = tmp_path / "LL301_bad.py"
    script.write_bytes((FIXTURES / "LL301_bad.py").read_bytes())
    code, out, _ = run_cli("check", script, "--probe", "--probe-steps", STEPS, "--format", "json", cwd=tmp_path)
    [finding] = json.loads(out)
    assert code == 1 and finding["code"] == "LL301"
    assert finding["probe"]["status"] == "confirmed"
    assert finding["probe"]["evidence"]["signal"] == "memory_growth"
    assert finding["probe"]["evidence"]["fixed_program"] == "symptom gone"
    # Kept for the language server, for this text of the file.
    recorded = probe_store.recorded(tmp_path / ".lintloop_cache", script, script.read_text())
    assert recorded == {("LL301", finding["line"], finding["column"]): finding["probe"]}


def test_check_probe_skips_what_it_cannot_run(run_cli, write):
    library = write("lib.py", """
        import torch
        def train(loader, model, criterion, optimizer):
            total = 0
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                total += loss
            return total
    """)
    code, out, _ = run_cli("check", library, "--probe", "--format", "json", "--no-cache")
    [finding] = json.loads(out)
    assert finding["probe"] == {"status": "skipped", "evidence": {
        "reason": 'not runnable: no `if __name__ == "__main__":` block or top-level code'}}


def test_probe_command_reports_a_crash_at_the_user_line(run_cli, write):
    _needs("LL102_torch")
    script = write("crash.py", """
        import argparse
        import torch

        def main():
            parser = argparse.ArgumentParser()
            parser.add_argument("--scale", type=float, required=True)
            args = parser.parse_args()
            w = torch.ones(3, requires_grad=True)
            loss = (w * args.scale).sum().detach()
            loss.backward()

        if __name__ == "__main__":
            main()
    """)
    code, out, _ = run_cli("probe", script, "--device", "cpu", "--", "--scale", "2")
    assert code == 1
    assert "error: RuntimeError: element 0 of tensors does not require grad" in out
    assert "crash.py:10" in out and "sitecustomize" not in out and "_lintloop_probe" not in out
