"""`ctx.iteration`: how many times a loop runs where its text says (`count`), parameters updated by hand
(`update` events, `Iteration.updates_parameters`), and the step function an ignite `Engine` runs once per
iteration (`engine_step`); and how LL703 / LL704 use them."""

import textwrap

import libcst as cst
import pytest

from lintloop.analysis import FileContext
from lintloop.linter import lint_text
from lintloop.rule import RuleSet
from lintloop.rules import BY_CODE


def context(code: str) -> FileContext:
    return FileContext(cst.parse_module(textwrap.dedent(code)))


@pytest.mark.parametrize("header, count", [
    ("for i in range(5):", 5),
    ("for i in range(2, 11, 3):", 3),
    ("for i in range(0):", 0),
    ("for i in range(shown):", 6),
    ("for name in ['a', 'b']:", 2),
    ("for i, (k, v) in enumerate({'a': 1, 'b': 2, 'c': 3}.items()):", 3),
    ("for a, b in zip(range(4), ('x', 'y')):", 2),
    ("for i in tqdm(range(7)):", 7),
    ("for i in trange(4):", 4),
    ("for x, y in loader:", None),
    ("for i in range(len(dataset)):", None),
    ("for i in range(start, 10):", None),
    ("for layer in [*layers, head]:", None),
    ("while step < 10:", None),
])
def test_count_is_known_only_where_the_text_says(header, count):
    ctx = context(f"from tqdm import tqdm, trange\nshown = 6\n{header}\n    pass\n")
    loop = [*ctx.nodes(cst.For), *ctx.nodes(cst.While)][-1]
    assert ctx.iteration.count(loop) == count


@pytest.mark.parametrize("body, count", [
    ("out = model(x)\n    break", 1),  # a look at the first batch
    ("if x is None:\n        continue\n    out = model(x)\n    break", None),  # a skipped item goes on
    ("for y in x:\n        continue\n    break", 1),  # the inner loop's own continue
    ("if done:\n        break\n    out = model(x)", None),
    ("out = model(x)", None),
])
def test_a_body_ending_in_break_runs_once(body, count):
    ctx = context(f"for x in loader:\n    {body}\n")
    assert ctx.iteration.count(ctx.nodes(cst.For)[0]) == count



def test_a_body_ending_in_break_runs_at_most_its_length():
    ctx = context("for x in range(0):\n    out = model(x)\n    break\n")
    assert ctx.iteration.count(ctx.nodes(cst.For)[0]) == 0


@pytest.mark.parametrize("body, updates", [
    ("    loss.backward()\n    optimizer.step()", True),
    ("    loss.backward()\n    with torch.no_grad():\n        for p in params:\n            p -= lr * p.grad", True),
    ("    loss.backward()\n    for p in params:\n        p.data.add_(p.grad, alpha=-lr)", True),
    ("    loss.backward()\n    for p in params:\n        p.data = p.data - lr * p.grad.data", True),
    ("    loss.backward()\n    step(optimizer)\n\ndef step(opt):\n    opt.step()", True),
    # looking at gradients is no update
    ("    loss.backward()\n    norms = [p.grad.norm() for p in params]", False),
    ("    loss.backward()\n    for p in params:\n        g = p.grad.clone()", False),
    ("    loss.backward()\n    for p in params:\n        p.grad += noise", False),
])
def test_updates_parameters(body, updates):
    ctx = context(f"import torch\nfor x in loader:\n{body}\n")
    loop = ctx.nodes(cst.For)[0]
    assert ctx.iteration.of(loop).updates_parameters is updates


@pytest.mark.parametrize("code, engine", [
    ("from ignite.engine import Engine\ndef update(engine, batch):\n    pass\nEngine(update)", True),
    ("import ignite.engine as ie\ndef update(engine, batch):\n    pass\nie.Engine(process_function=update)", True),
    ("from ignite.engine.engine import Engine as E\ndef update(engine, batch):\n    pass\nE(update)", True),
    # a user's own Engine, a step function the file does not define
    ("class Engine:\n    pass\ndef update(engine, batch):\n    pass\nEngine(update)", False),
    ("from ignite.engine import Engine\nfrom steps import update\nEngine(update)", False),
])
def test_engine_step(code, engine):
    ctx = context(code)
    built = ctx.nodes(cst.Call)[-1]
    step = ctx.iteration.engine_step(built)
    assert (step is not None) is engine
    if engine:
        assert step.loop.name.value == "update" and step.engine is built


def findings(code: str, rule: str) -> list:
    result = lint_text("example.py", textwrap.dedent(code).lstrip(), RuleSet([BY_CODE[rule]]))
    assert not result.errors
    return [f for f in result.findings if f.code == rule]


@pytest.mark.parametrize("loop, kept", [
    # a small literal loop whose outputs are rebound, or unpacked, each iteration: one graph at a time
    ("for i in range(3):\n    logits, hidden = net(inputs[i])\n    print(logits.argmax().item())", False),
    ("for i in range(3):\n    scores.append(net(inputs[i]).argmax(1).item())", False),
    # kept: stored in a container item, accumulated
    ("for i in range(3):\n    outputs[i] = net(inputs[i])", True),
    ("for i in range(3):\n    total += net(inputs[i]).sum()", True),
])
def test_ll703_small_loops_are_reported_only_when_they_keep_outputs(loop, kept):
    found = findings(f"import torch\nnet.eval()\n{loop}\n", "LL703")
    assert bool(found) is kept
    if kept:
        assert "keeps its output across iterations" in found[0].detailed


def test_ll703_says_a_loop_runs_a_known_number_of_times():
    found = findings("import torch\nnet.eval()\nfor i in range(500):\n    out = net(inputs[i])\n", "LL703")
    assert len(found) == 1 and "runs it 500 times:" in found[0].detailed


def test_ll703_a_small_loop_around_a_loader_loop_reports_the_loader_loop():
    found = findings("""
        import torch
        net.eval()
        for split in ["val", "test"]:
            for x, y in loaders[split]:
                out = net(x)
        """, "LL703")
    assert len(found) == 1 and "once for every item of `loaders[split]`" in found[0].detailed


def test_ll704_names_the_layer_evaluation_changes():
    found = findings("""
        import torch
        from torch import nn
        net = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for epoch in range(3):
            opt.zero_grad()
            net(x).sum().backward()
            opt.step()
            net.eval()
        """, "LL704")
    assert len(found) == 1
    assert "`nn.BatchNorm1d(4)` at line 3 normalises with its running statistics" in found[0].detailed


@pytest.mark.parametrize("iterable,count", [
    ("names[:12]", 12),
    ("sorted(names)[:12]", 12),
    ("names[2:10]", 8),
    ("names[-5:]", 5),
    ("names[:12:2]", None),
    ("names[:-1]", None),
    ("names[2:]", None),
    ("names[:n]", None),
])
def test_a_slice_with_literal_bounds_takes_at_most_its_width(iterable, count):
    ctx = FileContext(cst.parse_module(f"picked = {iterable}\nfor name in enumerate(picked):\n    use(name)\n"))
    assert ctx.iteration.count(ctx.nodes(cst.For)[0]) == count
