"""The probe on CUDA: every PyTorch bad/good fixture pair runs with `device="cuda"` (the fixtures pick
`torch.device("cuda" if torch.cuda.is_available() else "cpu")`), memory is the CUDA allocator's, and the bad
fixture is confirmed while the good one is not.

On a machine with a GPU:  .venv/bin/pytest -q -p no:randomly -m gpu tests/test_probe_gpu.py
Without CUDA (asked of a child process: torch is never imported here) the GPU tests skip, saying why;
the device handling that needs no GPU is tested here too.
"""
import functools
import importlib.util
import os
import subprocess
import sys

import pytest

from conftest import FIXTURES
from lintloop.rules import lookup
from lintloop.runtime_probe.runner import run_probe
from lintloop.runtime_probe.verdicts import Summary, verdict

pytestmark = pytest.mark.framework

STEPS = 60
# (rule code, stem) of every `<code>[_variant]_bad.py` that imports torch, has a `_good.py` and a probe column.
CASES = sorted(
    (stem[:5], stem) for stem in (p.name[: -len("_bad.py")] for p in FIXTURES.glob("LL*_bad.py"))
    if (FIXTURES / f"{stem}_good.py").exists() and "import torch" in (FIXTURES / f"{stem}_bad.py").read_text()
    and lookup(stem[:5]).probe != "—")


@functools.cache
def _cuda_in_child() -> str | None:
    """None when a child Python sees CUDA through torch; else why not."""
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES" or v.strip()}
    proc = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                          capture_output=True, text=True, timeout=120, env=env)
    if proc.returncode != 0:
        return f"a child process could not ask torch about CUDA: {proc.stderr.strip()[-300:]}"
    if proc.stdout.strip() != "True":
        return "torch.cuda.is_available() is False in a child process (no CUDA device or driver)"
    return None


def _require_cuda():
    reason = _cuda_in_child()
    if reason:
        pytest.skip(reason)


@functools.cache
def _run(name):
    run = run_probe(FIXTURES / name, [], steps=STEPS, device="cuda", timeout=300)
    return run, Summary.from_events(run.events, run.returncode, run.timed_out)


def _on_cuda(run):
    devices = [e for e in run.events if e.get("type") == "device"]
    assert devices and all(e["cuda_available"] for e in devices), devices
    return sorted({e.get("mem_source") for e in run.events if e.get("type") in ("step", "eval_forward")}, key=str)


@pytest.mark.gpu
@pytest.mark.parametrize("code,stem", CASES, ids=[s for _, s in CASES])
def test_bad_fixture_is_confirmed_on_cuda(code, stem):
    _require_cuda()
    run, summary = _run(f"{stem}_bad.py")
    sources = _on_cuda(run)
    result = verdict(code, summary)
    assert result["status"] == "confirmed", (sources, result, run.stderr_tail[-2000:])


@pytest.mark.gpu
@pytest.mark.parametrize("code,stem", CASES, ids=[s for _, s in CASES])
def test_good_fixture_is_not_confirmed_on_cuda(code, stem):
    _require_cuda()
    run, summary = _run(f"{stem}_good.py")
    sources = _on_cuda(run)
    result = verdict(code, summary)
    assert result["status"] == "not-confirmed", (sources, result, run.stderr_tail[-2000:])


@pytest.mark.gpu
def test_cuda_memory_is_the_allocators_with_a_peak_per_step():
    _require_cuda()
    run, summary = _run("LL301_bad.py")
    steps = [e for e in run.events if e.get("type") == "step"]
    assert steps and {e["mem_source"] for e in steps} == {"cuda"}, steps[:3]
    assert all(e["peak"] >= e["mem"] for e in steps) and all(e["host_mem"] > 0 for e in steps)


def test_every_torch_fixture_pair_is_discovered():
    assert {"LL301", "LL403", "LL404", "LL603", "LL703", "LL704", "LL708"} <= {code for code, _ in CASES}
    assert all("import torch" in (FIXTURES / f"{stem}_bad.py").read_text() for _, stem in CASES)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_device_cuda_shows_gpus_and_reports_what_the_child_sees(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # hidden by the caller: `--device cuda` shows them again
    script = tmp_path / "prog.py"
    script.write_text("import os\nimport torch\nprint(repr(os.environ.get('CUDA_VISIBLE_DEVICES')))\n")
    run = run_probe(script, [], steps=5, device="cuda", timeout=120)
    assert run.returncode == 0, run.stderr_tail
    assert run.stdout_tail.strip() == "None"
    [device] = [e for e in run.events if e["type"] == "device"]
    assert device["requested"] == "cuda" and device["cuda_available"] is (_cuda_in_child() is None)

    hidden = run_probe(script, [], steps=5, device="cpu", timeout=120)
    assert hidden.stdout_tail.strip() == "''"
    assert not [e for e in hidden.events if e["type"] == "device"]  # CUDA is not even asked about
