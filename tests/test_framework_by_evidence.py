"""Framework by evidence: a module that never imports PyTorch but has its training shape (`loss.backward()`
and `optimizer.step()`: a training loop given its model, optimizer and loader by the caller) is analysed
as PyTorch code, found in a directory or named, with the screen on or off; a module of another framework
of the same shape (MXNet's `trainer.step`) or without a step (micrograd) is not."""

from __future__ import annotations

import pytest

from lintloop.frameworks import evidenced_frameworks
from lintloop.linter import lint_bytes
from lintloop.rule import RuleSet
from lintloop.rules import ALL_RULES

LOOP = """\
def train(model, optimizer, loader, loss_fn, epochs):
    for epoch in range(epochs):
        for x, y in loader:
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
"""
ACCUMULATING = """\
def fit(model, optimizer, loader, criterion, accumulation_steps=4):
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x), y)
        loss.backward()
        if (step + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
"""
MXNET = "from mxnet import autograd, gluon\n" + LOOP.replace("optimizer.step()", "optimizer.step(x.shape[0])")
MICROGRAD = """\
for k in range(100):
    loss = total_loss(model)
    model.zero_grad()
    loss.backward()
    for p in model.parameters():
        p.data -= 0.1 * p.grad
"""


def codes(text: str, screen: bool = True, explicit: bool = False) -> list[str]:
    ruleset = RuleSet(list(ALL_RULES), {})
    ruleset.screen = screen
    result = lint_bytes("helpers.py", text.encode(), ruleset, explicit=explicit)
    return [f.code for f in result.findings]


@pytest.mark.parametrize("screen", [True, False])
@pytest.mark.parametrize(("text", "expected"), [(LOOP, ["LL701"]), (ACCUMULATING, ["LL702"])])
def test_a_training_loop_without_an_import_is_analysed_as_pytorch(text, expected, screen):
    assert codes(text, screen) == expected
    assert codes(text, screen, explicit=True) == expected


@pytest.mark.parametrize("text", [MXNET, MICROGRAD, "x.backward()\n", "scheduler.step()\n"])
def test_another_framework_of_the_same_shape_or_a_part_of_it_is_not(text):
    assert evidenced_frameworks(text) == frozenset()
    assert codes(text) == [] and codes(text, screen=False) == []


def test_a_directory_run_parses_the_module_and_reports_it(run_cli, tmp_path):
    (tmp_path / "helpers.py").write_text(LOOP)
    (tmp_path / "micro.py").write_text(MICROGRAD)
    status, out, _ = run_cli("check", ".", "--no-cache", "--format", "concise", cwd=tmp_path)
    assert status == 1 and out.splitlines()[0].startswith("helpers.py:6:13: LL701 ")
    assert "micro.py" not in out
