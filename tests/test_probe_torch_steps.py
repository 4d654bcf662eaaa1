"""The probe's PyTorch step-sequence events (torch_autograd, torch_amp), on the runnable fixtures
and on small scripts with the correct shapes they must stay quiet on.

Runs real PyTorch programs in child processes (CPU); skipped when torch is not installed.
"""
import importlib.util
import textwrap
from pathlib import Path

import pytest

from lintloop.runtime_probe.runner import run_probe
from lintloop.runtime_probe.verdicts import Summary, verdict
from conftest import events_of as _events, source_line as _line

FIXTURES = Path(__file__).parent / "fixtures"

pytestmark = pytest.mark.framework

HEADER = """
import torch
import torch.nn as nn

torch.manual_seed(0)
x = torch.randn(64, 8)
y = torch.randn(64, 1)
"""


@pytest.fixture(autouse=True)
def _torch():
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")


_runs = {}


def _fixture(stem, steps=6):
    key = (stem, steps)
    if key not in _runs:
        _runs[key] = run_probe(FIXTURES / f"{stem}.py", ["--steps", str(steps)], device="cpu", timeout=300)
    return _runs[key]


def _script(tmp_path, body, steps=6):
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(HEADER).lstrip() + textwrap.dedent(body))
    return path, run_probe(path, [], steps=steps, device="cpu", timeout=300)


def _no_probe_errors(run):
    ours = [e for e in _events(run, "probe_error") if str(e.get("where", "")).startswith(("torch_backward",
            "torch_zero_grad", "torch_loss", "torch_scaler", "torch_clip", "torch_autocast", "torch_pre_hook"))]
    assert not ours, ours


# --- LL701: gradients carried across steps ------------------------------------------------------


def test_missing_zero_grad_carries_the_applied_gradients_into_the_next_step():
    run = _fixture("LL701_bad")
    path = FIXTURES / "LL701_bad.py"
    carried = _events(run, "grads_carried")
    assert [(e["from_step"], e["step"]) for e in carried] == [(1, 2), (2, 3), (3, 4), (4, 5)]
    assert all(e["params"] == e["total"] == 4 and e["backwards"] == 1 for e in carried)
    assert carried[0]["backward_line"] == _line(path, "loss.backward()")
    assert carried[0]["line"] == _line(path, "optimizer.step()")
    norms = [e["grad_norm"] for e in _events(run, "step") if e["n"] <= 5]
    assert all(later > earlier for earlier, later in zip(norms, norms[1:])), norms
    _no_probe_errors(run)


def test_zero_grad_each_iteration_carries_nothing():
    assert not _events(_fixture("LL701_good"), "grads_carried")


@pytest.mark.parametrize("reset", [
    "opt_d.zero_grad()\n",
    "for p in d.parameters():\n    p.grad = None\n",
    "for p in d.parameters():\n    if p.grad is not None:\n        p.grad.zero_()\n",
])
def test_gan_generator_backward_into_the_discriminator_is_not_carried(tmp_path, reset):
    # DCGAN: the generator's backward adds into D's gradients after D's step; D resets them
    # (zero_grad, `p.grad = None`, or in place) before its next step.
    _, run = _script(tmp_path, """
        g, d = nn.Linear(8, 8), nn.Linear(8, 1)
        opt_g, opt_d = torch.optim.SGD(g.parameters(), lr=0.01), torch.optim.SGD(d.parameters(), lr=0.01)
        for step in range(6):
        RESET
            d(g(x).detach()).mean().backward()
            opt_d.step()
            opt_g.zero_grad()
            (-d(g(x)).mean()).backward()
            opt_g.step()
        """.replace("        RESET\n", textwrap.indent(reset, " " * 12)))
    assert run.returncode == 0, run.stderr_tail
    assert not _events(run, "grads_carried")
    summary = Summary.from_events(run.events, run.returncode, run.timed_out)
    assert verdict("LL701", summary)["status"] == "not-confirmed"


# --- LL702: accumulation without dividing the loss -----------------------------------------------


def test_accumulation_counts_backwards_and_unscaled_losses():
    run = _fixture("LL702_bad")
    windows = [e for e in _events(run, "accumulation") if e["step"] >= 2]
    assert windows
    for event in windows:
        assert event["backwards"] == 4 and event["reset_between"] is False
        assert event["loss_scales"] == [1.0] * 4
        assert event["norms"][-1] == pytest.approx(event["grad_norm"], rel=1e-5)
    assert windows[0]["line"] == _line(FIXTURES / "LL702_bad.py", "optimizer.step()")


def test_accumulation_with_the_loss_divided_sees_the_division():
    windows = [e for e in _events(_fixture("LL702_good"), "accumulation") if e["step"] >= 2]
    assert windows and all(e["loss_scales"] == [0.25] * 4 for e in windows)


def test_gradients_divided_before_the_step_are_not_a_sum(tmp_path):
    _, run = _script(tmp_path, """
        model = nn.Linear(8, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for i in range(24):
            loss = nn.functional.mse_loss(model(x[i % 8::8]), y[i % 8::8])
            loss.backward()
            if (i + 1) % 4 == 0:
                for p in model.parameters():
                    p.grad /= 4
                opt.step()
                opt.zero_grad()
        """)
    summary = Summary.from_events(run.events, run.returncode, run.timed_out)
    assert [e["backwards"] for e in summary.of_type("accumulation")][1:] == [4] * 4
    assert verdict("LL702", summary)["status"] == "not-confirmed"


def test_two_losses_backwarded_before_one_step_are_not_accumulation(tmp_path):
    # pytorch/examples DCGAN: the discriminator's real and fake terms, each backwarded, one step
    _, run = _script(tmp_path, """
        model = nn.Linear(8, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for step in range(6):
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            nn.functional.l1_loss(model(-x), y).backward()
            opt.step()
        """)
    summary = Summary.from_events(run.events, run.returncode, run.timed_out)
    windows = summary.of_type("accumulation")
    assert windows and all(len(set(e["backward_lines"])) == 2 for e in windows[1:])
    assert verdict("LL702", summary)["status"] == "not-confirmed"


def test_lbfgs_closure_steps_are_not_out_of_order(tmp_path):
    _, run = _script(tmp_path, """
        model = nn.Linear(8, 1)
        opt = torch.optim.LBFGS(model.parameters(), max_iter=4)

        def closure():
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            return loss

        for step in range(6):
            opt.step(closure)
        """)
    assert run.returncode == 0, run.stderr_tail
    summary = Summary.from_events(run.events, run.returncode, run.timed_out)
    assert not summary.of_type("step_order") and not summary.of_type("grads_carried")
    assert verdict("LL706", summary)["status"] == "not-confirmed"


# --- LL706: step order --------------------------------------------------------------------------


def test_zero_grad_between_backward_and_step():
    run = _fixture("LL706_bad")
    path = FIXTURES / "LL706_bad.py"
    [first, *_] = _events(run, "step_order")
    assert first["order"] == "reset_between_backward_and_step" and first["step"] == 1
    assert (first["reset_line"], first["backward_line"], first["line"]) == (
        _line(path, "optimizer.zero_grad()"), _line(path, "loss.backward()"), _line(path, "optimizer.step()"))
    assert {e["step"] for e in _events(run, "params_unchanged")} == {1, 2, 3, 4, 5}


def test_step_before_any_backward():
    run = _fixture("LL706_step_first_bad")
    events = _events(run, "step_order")
    assert [(e["order"], e["step"]) for e in events] == [("step_before_backward", 1)]
    assert events[0]["line"] == _line(FIXTURES / "LL706_step_first_bad.py", "optimizer.step()")


@pytest.mark.parametrize("stem", ["LL706_good", "LL706_step_first_good", "LL702_bad"])
def test_correct_orders_have_no_step_order_event(stem):
    assert not _events(_fixture(stem), "step_order")


# --- LL303: retain_graph ------------------------------------------------------------------------


def test_retained_graph_never_backwarded_again_is_held_past_the_step():
    run = _fixture("LL303_bad")
    line = _line(FIXTURES / "LL303_bad.py", "loss.backward(retain_graph=True)")
    records = _events(run, "retain_graph")
    assert len(records) == 5 and all(e["line"] == line and not e["reused"] for e in records)
    assert [e["freed_at_step"] - e["step"] for e in records] == [1] * 5
    # batch 512: at least the two 512x256 float32 hidden activations
    assert all(e["saved_bytes"] >= 2 * 512 * 256 * 4 for e in records)
    [calls] = _events(run, "retain_graph_calls")
    assert (calls["calls"], calls["checked"]) == (6, 5)
    assert not _events(_fixture("LL303_good"), "retain_graph")


def test_second_backward_through_a_shared_trunk_is_reuse(tmp_path):
    path, run = _script(tmp_path, """
        trunk, head_a, head_b = nn.Linear(8, 16), nn.Linear(16, 1), nn.Linear(16, 1)
        params = [*trunk.parameters(), *head_a.parameters(), *head_b.parameters()]
        opt = torch.optim.SGD(params, lr=0.01)
        for step in range(6):
            opt.zero_grad()
            features = torch.relu(trunk(x))
            head_a(features).pow(2).mean().backward(retain_graph=True)
            head_b(features).pow(2).mean().backward()
            opt.step()
        """)
    records = [e for e in _events(run, "retain_graph") if e["resolved_by"] != "end of run"]
    assert records and all(e["reused"] for e in records)
    summary = Summary.from_events(run.events, run.returncode, run.timed_out)
    assert verdict("LL303", summary)["status"] == "not-confirmed"


# --- LL604 / LL605: mixed precision --------------------------------------------------------------


def test_optimizer_step_on_scaled_gradients():
    run = _fixture("LL604_bad")
    [first, *_] = _events(run, "scaled_step")
    assert (first["step"], first["scale"]) == (1, 65536.0)
    assert first["grad_norm"] > 1000
    assert first["line"] == _line(FIXTURES / "LL604_bad.py", "optimizer.step()")


def test_clipping_before_unscale():
    run = _fixture("LL604_clip_bad")
    [first, *_] = _events(run, "scaled_clip")
    assert (first["step"], first["scale"], first["max_norm"]) == (1, 65536.0, 1.0)
    assert first["total_norm"] > 1000
    assert first["line"] == _line(FIXTURES / "LL604_clip_bad.py", "grad_norm = torch.nn.utils.clip_grad_norm_(")


def test_scaler_step_without_update_raises_at_the_second_step():
    run = _fixture("LL604_update_bad")
    errors = [e for e in _events(run, "error") if e["where"] == "uncaught"]
    assert errors[0]["message"] == "step() has already been called since the last update()."
    assert errors[0]["line"] == _line(FIXTURES / "LL604_update_bad.py", "scaler.step(optimizer)")
    assert max(e["n"] for e in _events(run, "step")) == 1


@pytest.mark.parametrize("stem", ["LL604_good", "LL604_update_good", "LL604_clip_good", "LL605_good"])
def test_documented_scaler_use_is_quiet(stem):
    run = _fixture(stem)
    assert run.returncode == 0, run.stderr_tail
    assert not _events(run, "scaled_step") and not _events(run, "scaled_clip")
    assert all(e["scaled"] and e["to_zero"] == 0 for e in _events(run, "fp16_underflow"))
    _no_probe_errors(run)


def test_float16_gradients_underflow_without_a_scaler():
    run = _fixture("LL605_bad")
    events = _events(run, "fp16_underflow")
    assert [e["step"] for e in events] == [1, 2, 3, 4, 5]
    for event in events:
        assert event["scaled"] is False and event["nonzero"] == 128 * 784
        assert event["to_zero"] > 0 and event["to_zero"] + event["subnormal"] == event["nonzero"]
    assert events[0]["line"] == _line(FIXTURES / "LL605_bad.py", "loss.backward()")


def test_bfloat16_autocast_is_not_checked(tmp_path):
    _, run = _script(tmp_path, """
        model = nn.Linear(8, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for step in range(6):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
        """)
    assert run.returncode == 0, run.stderr_tail
    assert not _events(run, "fp16_underflow")


# --- LL707 / LL105: the framework's own warning and error, at the user's line ----------------------


def test_scheduler_warning_at_the_scheduler_line():
    run = _fixture("LL707_bad", steps=8)
    path = FIXTURES / "LL707_bad.py"
    warnings = [e for e in _events(run, "warning") if "lr_scheduler.step()" in e["message"]]
    assert len(warnings) == 1 and warnings[0]["line"] == _line(path, "scheduler.step()")
    assert not [e for e in _events(_fixture("LL707_good", steps=8), "warning")
                if "lr_scheduler.step()" in e["message"]]


def test_detached_loss_fails_at_backward():
    run = _fixture("LL105_bad")
    [error] = [e for e in _events(run, "error") if e["where"] == "backward"]
    assert error["message"] == "element 0 of tensors does not require grad and does not have a grad_fn"
    assert error["line"] == _line(FIXTURES / "LL105_bad.py", "loss.backward()")
