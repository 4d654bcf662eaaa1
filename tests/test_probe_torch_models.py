"""The probe's PyTorch module, data and loss hooks, on small programs under the real framework (CPU):
the raw events (`eval_forward`, `eval_mode_step`, `ddp_bypass`, `sampler_epoch`, `cross_entropy_input` and
their end-of-run counts), and the verdicts LL403/LL404/LL603/LL703/LL704/LL708 on hand-made event lists.

torch is never imported in the test process.
"""
import importlib.util
import textwrap

import pytest

from lintloop.runtime_probe.runner import run_probe
from lintloop.runtime_probe.verdicts import Summary, verdict

pytestmark = pytest.mark.framework

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")


def _probe(tmp_path, source, steps=50):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(source))
    run = run_probe(script, [], steps=steps, device="cpu", timeout=240)
    assert run.returncode == 0, run.stderr_tail
    assert not [e for e in run.events if e["type"] == "probe_error"], run.events
    return run, script


def _line(script, marker):
    """Line number of the line of `script` that holds `marker`."""
    [number] = [i for i, text in enumerate(script.read_text().splitlines(), 1) if marker in text]
    return number


@needs_torch
def test_module_calls_eval_forwards_and_training_steps_in_eval_mode(tmp_path):
    run, script = _probe(tmp_path, """
        import torch
        import torch.nn as nn

        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 2))
        teacher = nn.Sequential(nn.Linear(8, 2), nn.Dropout(0.5))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(4, 8)

        model.eval()
        kept = [model(x) for _ in range(3)]  # EVAL WITH GRAD
        with torch.no_grad():
            kept += [model(x) for _ in range(2)]  # EVAL NO GRAD

        model.train()
        teacher.eval()
        for step in range(2):  # correct steps: a teacher in eval mode is not trained
            optimizer.zero_grad()
            (model(x).sum() + teacher(x).sum()).backward()
            optimizer.step()

        model.eval()
        model(x)  # validation without no_grad, then back to train mode: not a step in eval mode
        model.train()
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()

        model.eval()
        for step in range(3):
            optimizer.zero_grad()
            loss = model(x).sum()  # TRAIN IN EVAL MODE
            loss.backward()
            optimizer.step()
    """)
    forwards = [e for e in run.events if e["type"] == "eval_forward"]
    by_module = {}
    for event in forwards:
        by_module.setdefault(event["key"], []).append(event)
    model_events = by_module[forwards[0]["key"]]
    # Only outermost calls count: 3 + 2 + 1 + 3 calls of the model in eval mode, none of its submodules.
    assert [e["n"] for e in model_events] == list(range(1, 10))
    assert [e["grad"] for e in model_events] == [True] * 3 + [False] * 2 + [True] * 4
    assert all(e["module"] == "Sequential" and e["mem"] > 0 and e["mem_source"] == "mallinfo2"
               for e in model_events)
    assert (model_events[0]["file"], model_events[0]["line"]) == (str(script), _line(script, "EVAL WITH GRAD"))
    teacher_events = [events for key, events in by_module.items() if key != forwards[0]["key"]]
    assert [len(events) for events in teacher_events] == [2]
    [count] = [e for e in run.events if e["type"] == "eval_forwards" and e["key"] == forwards[0]["key"]]
    assert (count["calls"], count["with_grad"]) == (9, 7)

    [first] = [e for e in run.events if e["type"] == "eval_mode_step"]
    assert first["step"] == 4 and first["optimizer"] == "SGD" and first["module"] == "Sequential"
    assert first["eval_submodules"] == {"BatchNorm1d": 1, "Dropout": 1}
    assert first["line"] == _line(script, "TRAIN IN EVAL MODE")
    [steps] = [e for e in run.events if e["type"] == "eval_mode_steps"]
    assert (steps["steps"], steps["of_steps"], steps["first_step"]) == (3, 6, 4)


@needs_torch
def test_distributed_sampler_order_per_pass(tmp_path):
    run, script = _probe(tmp_path, """
        import torch
        from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

        dataset = TensorDataset(torch.arange(40))
        fixed = DistributedSampler(dataset, num_replicas=2, rank=1, shuffle=True, seed=3)
        reshuffled = DistributedSampler(dataset, num_replicas=2, rank=1, shuffle=True, seed=3)
        ordered = DistributedSampler(dataset, num_replicas=2, rank=0, shuffle=False)
        for epoch in range(3):
            seen = [int(i) for (batch,) in DataLoader(dataset, batch_size=4, sampler=fixed) for i in batch]
            print(seen[:5])
            reshuffled.set_epoch(epoch)
            list(reshuffled)
            list(ordered)
    """)
    events = [e for e in run.events if e["type"] == "sampler_epoch"]
    by_sampler = {}
    for event in events:
        by_sampler.setdefault(event["sampler"], []).append(event)
    fixed, reshuffled, ordered = (by_sampler[k] for k in sorted(by_sampler))
    assert [e["iteration"] for e in fixed] == [1, 2, 3]
    assert [str(e["first"]) for e in fixed] == run.stdout_tail.splitlines()  # the loader got the same order
    assert len({e["digest"] for e in fixed}) == 1 and {e["epoch"] for e in fixed} == {0}
    assert all((e["samples"], e["rank"], e["num_replicas"], e["shuffle"], e["seed"]) == (20, 1, 2, True, 3)
               for e in fixed)
    assert len({e["digest"] for e in reshuffled}) == 3 and [e["epoch"] for e in reshuffled] == [0, 1, 2]
    assert fixed[0]["digest"] == reshuffled[0]["digest"]  # epoch 0, same seed: same order
    assert {e["shuffle"] for e in ordered} == {False} and ordered[0]["first"] == [0, 2, 4, 6, 8]

    summary = Summary.from_events(run.events, run.returncode, run.timed_out)
    result = verdict("LL403", summary)
    assert result["status"] == "confirmed"
    assert (result["evidence"]["same_order_passes"], result["evidence"]["passes"]) == (3, 3)


@needs_torch
def test_cross_entropy_inputs(tmp_path):
    run, script = _probe(tmp_path, """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F

        torch.manual_seed(0)
        logits = torch.randn(6, 4, requires_grad=True)
        y = torch.randint(0, 4, (6,))
        criterion = nn.CrossEntropyLoss()
        for _ in range(2):
            criterion(logits, y).backward()  # LOGITS
        F.cross_entropy(torch.softmax(logits, dim=1), y).backward()  # PROBABILITIES
        F.cross_entropy(torch.softmax(torch.randn(2, 3, 5), dim=1), torch.zeros(2, 5, dtype=torch.long))  # 3D
        F.cross_entropy(torch.tensor([0.2, 0.3, 0.5]), torch.tensor(2))  # UNBATCHED
    """)
    events = [e for e in run.events if e["type"] == "cross_entropy_input"]
    assert [(e["line"], e["probabilities"]) for e in events] == [
        (_line(script, "LOGITS"), False), (_line(script, "PROBABILITIES"), True),
        (_line(script, "3D"), True), (_line(script, "UNBATCHED"), True)]
    probabilities = events[1]
    assert probabilities["shape"] == [6, 4] and probabilities["requires_grad"] is True
    assert 0 <= probabilities["min"] <= probabilities["max"] <= 1 and probabilities["row_sum_error"] < 1e-5
    [counts] = [e for e in run.events if e["type"] == "cross_entropy_inputs"]
    assert (counts["calls"], counts["checked"], counts["probabilities"]) == (5, 5, 3)


@needs_torch
def test_ddp_forward_bypassed(tmp_path):
    init = tmp_path / "rendezvous"
    run, script = _probe(tmp_path, f"""
        import torch
        import torch.distributed as dist
        import torch.nn as nn
        from torch.nn.parallel import DistributedDataParallel as DDP

        dist.init_process_group("gloo", init_method="file://{init}", rank=0, world_size=1)
        ddp = DDP(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1)))
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
        x = torch.randn(8, 4)
        for step in range(2):  # through the wrapper
            optimizer.zero_grad()
            ddp(x).sum().backward()
            optimizer.step()
        with torch.no_grad():
            ddp.module(x)  # evaluation through .module: no step follows with it
        state = ddp.module.state_dict()
        for step in range(3):
            optimizer.zero_grad()
            ddp.module(x).sum().backward()  # BYPASS
            optimizer.step()
        ddp.eval()
        with torch.no_grad():
            ddp(x)  # DDP EVAL
        dist.destroy_process_group()
    """)
    [bypass] = [e for e in run.events if e["type"] == "ddp_bypass"]
    assert (bypass["step"], bypass["module"], bypass["rank"], bypass["ddp_forwards"]) == (3, "Sequential", 0, 2)
    assert (bypass["file"], bypass["line"]) == (str(script), _line(script, "BYPASS"))
    [counts] = [e for e in run.events if e["type"] == "ddp_forwards"]
    assert (counts["wrappers"], counts["ddp_forwards"], counts["bypassed_forwards"], counts["bypass_steps"],
            counts["steps"]) == (1, 3, 3, 3, 5)
    [evaluation] = [e for e in run.events if e["type"] == "eval_forward"]  # the wrapper's mode is its module's
    assert (evaluation["module"], evaluation["grad"], evaluation["line"]) == (
        "DistributedDataParallel", False, _line(script, "DDP EVAL"))


def _summary(*events):
    return Summary.from_events([{"pid": 1, **e} for e in events], 0, False)


def test_verdicts_on_events():
    same = {"type": "sampler_epoch", "sampler": 1, "shuffle": True, "digest": "aa", "epoch": 0, "samples": 8,
            "rank": 0, "num_replicas": 2}
    assert verdict("LL403", _summary({**same, "iteration": 1}, {**same, "iteration": 2}))["status"] == "confirmed"
    assert verdict("LL403", _summary({**same, "iteration": 1, "shuffle": False},
                                     {**same, "iteration": 2, "shuffle": False}))["status"] == "not-confirmed"
    assert verdict("LL403", _summary({**same, "iteration": 1},
                                     {**same, "iteration": 2, "digest": "bb"}))["status"] == "not-confirmed"
    # set_epoch is called (the epoch changes), and one epoch iterates the loader twice: not this bug
    assert verdict("LL403", _summary({**same, "iteration": 1}, {**same, "iteration": 2},
                                     {**same, "iteration": 3, "epoch": 1, "digest": "bb"}))["status"] == "not-confirmed"

    deprecated = {"type": "warning", "category": "FutureWarning", "file": "t.py", "line": 7, "message":
                  "`torch.cuda.amp.GradScaler(args...)` is deprecated. Please use "
                  "`torch.amp.GradScaler('cuda', args...)` instead."}
    result = verdict("LL603", _summary(deprecated), _summary())
    assert result["status"] == "confirmed" and result["evidence"]["line"] == 7
    assert result["evidence"]["fixed_program_deprecations"] == 0
    other = {**deprecated, "message": "torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.",
             "category": "UserWarning"}
    assert verdict("LL603", _summary(other))["status"] == "not-confirmed"

    def eval_series(step_bytes, grad):
        return [{"type": "eval_forward", "key": 1, "module": "Net", "n": n, "grad": grad,
                 "mem": 1_000_000 + n * step_bytes, "mem_source": "mallinfo2"} for n in range(1, 41)]

    assert verdict("LL703", _summary(*eval_series(80_000, True)))["status"] == "confirmed"
    assert verdict("LL703", _summary(*eval_series(80_000, False)))["status"] == "not-confirmed"  # kept outputs
    assert verdict("LL703", _summary(*eval_series(0, True)))["status"] == "not-confirmed"

    step = {"type": "eval_mode_step", "step": 9, "module": "Net", "eval_submodules": {"Dropout": 2}, "line": 3}
    result = verdict("LL704", _summary(step, {"type": "eval_mode_steps", "steps": 16, "of_steps": 24}))
    assert result["status"] == "confirmed" and "16 of 24 steps" in result["evidence"]["text"]
    assert verdict("LL704", _summary())["status"] == "not-confirmed"

    bypass = {"type": "ddp_bypass", "step": 1, "module": "Net", "rank": 0, "ddp_forwards": 0, "line": 5}
    assert verdict("LL404", _summary(bypass))["status"] == "confirmed"
    assert verdict("LL404", _summary({"type": "ddp_forwards", "ddp_forwards": 5}))["status"] == "not-confirmed"

    probabilities = {"type": "cross_entropy_input", "probabilities": True, "shape": [4, 3], "min": 0.1,
                     "max": 0.7, "row_sum_error": 1e-7, "line": 2}
    assert verdict("LL708", _summary(probabilities))["status"] == "confirmed"
    assert verdict("LL708", _summary({**probabilities, "probabilities": False}))["status"] == "not-confirmed"
