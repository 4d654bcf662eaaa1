"""The runtime probe's raw event stream, on the runnable fixtures and small scripts.

Runs real PyTorch / TensorFlow programs in child processes (the test process never
imports a framework); a test is skipped when its framework is not installed.
"""
import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

from lintloop.runtime_probe.runner import run_probe

FIXTURES = Path(__file__).parent / "fixtures"

pytestmark = pytest.mark.framework


def _require(*frameworks):
    for framework in frameworks:
        if importlib.util.find_spec(framework) is None:
            pytest.skip(f"{framework} is not installed")


def _probe(script, argv=(), **kwargs):
    kwargs.setdefault("device", "cpu")
    kwargs.setdefault("timeout", 150)
    return run_probe(Path(script), list(argv), **kwargs)


def _line_of(path, text):
    """1-based line number of the (unique) line of `path` containing `text`."""
    lines = [i for i, line in enumerate(Path(path).read_text().splitlines(), 1) if text in line]
    assert len(lines) == 1, (text, lines)
    return lines[0]


def _describe(run):
    events = "\n".join(str(e)[:300] for e in run.events)
    return (f"rc={run.returncode} timed_out={run.timed_out} mem={run.killed_for_memory}\n"
            f"--- events ---\n{events}\n--- stdout ---\n{run.stdout_tail[-2000:]}\n"
            f"--- stderr ---\n{run.stderr_tail[-3000:]}")


def _shows_the_probe(text):
    """Whether `text` (a traceback) shows the probe's own code (the bootstrap's frames)."""
    return "sitecustomize" in text or "_lintloop_probe" in text


def _write(tmp_path, name, source):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source).lstrip())
    return path


@pytest.fixture(scope="module")
def fixture_run():
    """Run each fixture once per module (several tests look at the same run)."""
    cache = {}

    def run(name, framework, argv, **kwargs):
        _require(framework)
        key = (name, tuple(argv), tuple(sorted(kwargs.items())))
        if key not in cache:
            cache[key] = _probe(FIXTURES / f"{name}.py", argv, **kwargs)
        return cache[key]

    return run


def test_tf_none_gradients_at_the_tape_gradient_line(fixture_run):
    run = fixture_run("LL101_bad", "tensorflow", ["--steps", "3"])
    path = FIXTURES / "LL101_bad.py"
    line = _line_of(path, "tape.gradient(")
    events = [e for e in run.of_type("none_gradients") if e["framework"] == "tensorflow"]
    assert events, _describe(run)
    assert events[0]["none"] == events[0]["total"] == 4, _describe(run)
    assert (events[0]["file"], events[0]["line"]) == (str(path), line), _describe(run)
    assert events[0]["eager"] is True
    # and the framework's error that follows, at the apply_gradients line
    errors = run.of_type("error")
    assert any("No gradients provided" in e["message"] for e in errors), _describe(run)
    assert run.of_type("stop")[-1]["reason"] == "error"


def test_torch_backward_error_at_the_backward_line(fixture_run):
    run = fixture_run("LL102_torch_bad", "torch", ["--steps", "3"])
    path = FIXTURES / "LL102_torch_bad.py"
    line = _line_of(path, "loss.backward()")
    errors = [e for e in run.of_type("error") if "does not require grad" in e["message"]]
    assert errors, _describe(run)
    assert {(e["file"], e["line"]) for e in errors} == {(str(path), line)}, _describe(run)
    assert {e["where"] for e in errors} == {"backward", "uncaught"}
    assert errors[0]["exc_type"] == "RuntimeError"
    # the user sees the same traceback as without the probe
    assert not _shows_the_probe(run.stderr_tail) and "RuntimeError: element 0" in run.stderr_tail
    assert run.returncode == 1


def test_trace_prints_and_fewer_traces_than_calls(fixture_run):
    run = fixture_run("LL201_bad", "tensorflow", ["--steps", "6"])
    path = FIXTURES / "LL201_bad.py"
    prints = run.of_type("trace_print")
    assert prints, _describe(run)
    assert prints[0]["function"] == "train_step"
    assert prints[0]["text"].startswith('loss Tensor("')
    assert (prints[0]["file"], prints[0]["line"]) == (str(path), _line_of(path, 'print("loss", loss)'))
    summary = [e for e in run.of_type("tf_function") if e["function"] == "train_step"]
    assert summary and summary[0]["traces"] < summary[0]["calls"] == 6, _describe(run)
    assert summary[0]["trains"] is True
    steps = run.of_type("step")
    assert [s["n"] for s in steps] == list(range(1, 7))
    assert {s["kind"] for s in steps} == {"tf_function_call"}


def test_strategy_error_is_reported(fixture_run):
    run = fixture_run("LL401_bad", "tensorflow", ["--steps", "2"])
    errors = [e for e in run.of_type("error") if e["where"] == "uncaught"]
    assert errors, _describe(run)
    assert "Mixing different tf.distribute.Strategy objects" in errors[0]["message"]
    assert errors[0]["file"] == str(FIXTURES / "LL401_bad.py")
    assert not _shows_the_probe(run.stderr_tail)


def test_per_replica_mean_under_mirrored_strategy(fixture_run):
    run = fixture_run("LL402_bad", "tensorflow", ["--steps", "2"])
    path = FIXTURES / "LL402_bad.py"
    strategies = run.of_type("strategy")
    assert strategies and strategies[0]["replicas"] == 2, _describe(run)
    assert strategies[0]["strategy"] == "MirroredStrategy"
    means = run.of_type("per_replica_mean")
    assert len(means) == 1, _describe(run)
    assert means[0]["replicas"] == 2
    assert means[0]["loss"] == "SparseCategoricalCrossentropy"
    assert (means[0]["file"], means[0]["line"]) == (
        str(path), _line_of(path, "loss = tf.reduce_mean(per_example_loss)"))


def test_no_per_replica_mean_when_the_loss_is_averaged_correctly(fixture_run):
    run = fixture_run("LL402_good", "tensorflow", ["--steps", "2"])
    assert run.returncode == 0, _describe(run)
    assert run.of_type("strategy"), _describe(run)
    assert not run.of_type("per_replica_mean"), _describe(run)
    assert not run.of_type("error", "probe_error"), _describe(run)


def test_step_cap_stops_a_torch_loop(fixture_run):
    run = fixture_run("LL301_bad", "torch", ["--steps", "300"], steps=12)
    assert run.returncode == 0, _describe(run)
    steps = run.of_type("step")
    assert [s["n"] for s in steps] == list(range(1, 13)), _describe(run)
    assert all(s["kind"] == "optimizer_step" and s["mem_source"] == "mallinfo2" for s in steps)
    assert all(isinstance(s["mem"], int) and s["mem"] > 0 for s in steps)
    # the gradient norm goes with every memory sample (here every step); the gradient checks run at
    # steps 1-5, every 10th and the last one
    assert all(s["grad_norm"] > 0 for s in steps), _describe(run)
    stop = run.of_type("stop")
    assert stop == [stop[0]] and stop[0]["reason"] == "step_limit" and stop[0]["steps"] == 12
    assert stop[0]["checks"]["optimizer_step"] == 7
    live = run.of_type("live_objects")
    assert [e["at"] for e in live] == ["warmup", "last"] and live[0]["step"] == 10
    assert "done:" not in run.stdout_tail  # it really stopped early


def test_step_cap_inside_tf_function_calls(fixture_run):
    run = fixture_run("LL201_bad", "tensorflow", ["--steps", "20"], steps=4)
    assert run.returncode == 0, _describe(run)
    assert [s["n"] for s in run.of_type("step")] == [1, 2, 3, 4]
    assert run.of_type("stop")[0]["reason"] == "step_limit"
    assert "train_step called" not in run.stdout_tail


def test_script_with_argparse_and_main_guard_gets_its_argv(tmp_path):
    script = _write(tmp_path, "cli.py", """
        import argparse
        import sys

        def main():
            parser = argparse.ArgumentParser()
            parser.add_argument("--lr", type=float)
            parser.add_argument("name")
            args = parser.parse_args()
            print(f"name={args.name} lr={args.lr} main={__name__} path0={sys.path[0]}")

        if __name__ == "__main__":
            main()
    """)
    run = _probe(script, ["--lr", "0.5", "resnet"])
    assert run.returncode == 0, _describe(run)
    assert f"name=resnet lr=0.5 main=__main__ path0={tmp_path}" in run.stdout_tail
    start = run.of_type("start")[0]
    assert start["root"] is True and start["argv"][1:] == ["--lr", "0.5", "resnet"]
    assert run.of_type("stop")[0]["reason"] == "exit"


def test_events_from_torch_multiprocessing_workers(tmp_path):
    _require("torch")
    script = _write(tmp_path, "spawn.py", """
        import argparse

        import torch
        import torch.multiprocessing as mp

        def worker(rank, steps):
            model = torch.nn.Linear(4, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for _ in range(steps):
                opt.zero_grad()
                model(torch.randn(8, 4)).pow(2).mean().backward()
                opt.step()
            if rank == 1:
                raise ValueError("worker failed")

        if __name__ == "__main__":
            parser = argparse.ArgumentParser()
            parser.add_argument("--steps", type=int, default=3)
            mp.spawn(worker, args=(parser.parse_args().steps,), nprocs=2)
    """)
    run = _probe(script, ["--steps", "3"])
    root = [e["pid"] for e in run.of_type("start") if e["root"]]
    assert len(root) == 1, _describe(run)
    step_pids = {e["pid"] for e in run.of_type("step")}
    assert len(step_pids) == 2 and root[0] not in step_pids, _describe(run)
    worker_error = [e for e in run.of_type("error") if e["where"] == "worker"]
    assert worker_error and worker_error[0]["message"] == "worker failed", _describe(run)
    assert worker_error[0]["line"] == _line_of(script, 'raise ValueError("worker failed")')
    assert worker_error[0]["pid"] in step_pids
    parent_error = [e for e in run.of_type("error") if e["where"] == "uncaught"]
    assert parent_error and parent_error[0]["pid"] == root[0]
    assert parent_error[0]["embedded"]["exception"] == "ValueError: worker failed"
    assert not _shows_the_probe(run.stderr_tail)


def test_crash_in_user_code_is_reported_with_its_line(tmp_path):
    script = _write(tmp_path, "crash.py", """
        def load(path):
            raise FileNotFoundError(f"no such checkpoint: {path}")

        def main():
            load("ckpt.pt")

        if __name__ == "__main__":
            main()
    """)
    run = _probe(script)
    assert run.returncode == 1
    errors = run.of_type("error")
    assert len(errors) == 1, _describe(run)
    assert errors[0]["exc_type"] == "FileNotFoundError"
    assert errors[0]["message"] == "no such checkpoint: ckpt.pt"
    assert (errors[0]["file"], errors[0]["line"]) == (str(script), 2)
    assert [f[2] for f in errors[0]["frames"]] == ["<module>", "main", "load"]
    assert not _shows_the_probe(run.stderr_tail) and "runtime_probe" not in run.stderr_tail
    assert run.stderr_tail.rstrip().endswith("FileNotFoundError: no such checkpoint: ckpt.pt")
    assert run.of_type("stop")[0]["reason"] == "error"


def test_timeout_and_memory_limit_kill_the_process_tree(tmp_path):
    sleeper = _write(tmp_path, "sleep.py", """
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        time.sleep(60)
    """)
    run = _probe(sleeper, timeout=2)
    assert run.timed_out and not run.killed_for_memory and run.duration < 10
    hog = _write(tmp_path, "hog.py", """
        import time
        blocks = []
        for _ in range(100):
            blocks.append(bytearray(20 * 2**20))
            time.sleep(0.05)
    """)
    run = _probe(hog, memory_limit_mb=150)
    assert run.killed_for_memory and not run.timed_out and run.returncode != 0


def test_other_sitecustomize_still_runs(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['OTHER_SITE'] = 'ran'\n")
    script = _write(tmp_path, "show.py", """
        import os, sys
        print("other", os.environ.get("OTHER_SITE"), any("bootstrap" in p for p in sys.path))
    """)
    run = _probe(script, extra_env={"PYTHONPATH": str(other)}, python=sys.executable)
    assert "other ran False" in run.stdout_tail, _describe(run)
    assert run.of_type("start")
