#!/usr/bin/env python3
"""Does lintloop stay linear? Each input shape at a base size and ×10 (×100 with --large).

    python3 bench/scaling.py [--repeat 3] [--large] [--only SHAPE,...] [--rules all|default|both]
                             [--timeout 120] [--python PYTHON] [--keep DIR] [--json FILE]

Every shape is a realistic deep-learning file generated deterministically from its size: many
training loops in one file (PyTorch, TensorFlow, JAX), many functions (a class of thousands of
methods, helpers calling each other in a chain and in a star), many loops in one function, long
lines, notebooks of many training-loop cells, large literals, many imports, many module-level
statements, long `+` chains and deep nesting. Each point is one `lintloop check --no-cache
--format concise` (with `--select ALL`, and/or the default rules) in a fresh process, `--repeat`
times; the table gives the medians, minus the same command's cost on an empty file (start-up and
imports), so that a ratio is that of the work that grows. The requirement: when a shape grows ×10,
time and peak memory grow at most ×12 (issue 22). The driver uses the standard library only; it
exits 1 if a shape fails (too slow a growth, a crash, a timeout or an internal error). See
bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parent.parent
MAX_GROWTH = 12.0  # allowed growth of time and of memory when a shape grows ×10
# Growth below these is measurement noise, not work: a smaller difference counts as this much, so
# that a tiny base does not make a ratio explode (pick base sizes well above them).
TIME_FLOOR_S = 0.05
MEMORY_FLOOR_MIB = 4.0


# ----- the shapes -------------------------------------------------------------------------------

TORCH_HEADER = '''\
"""Experiments: many training runs of small models (generated for lintloop's scaling benchmark)."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
features, labels = torch.randn(1024, 16), torch.randint(0, 4, (1024,))
train_loader = DataLoader(TensorDataset(features, labels), batch_size=32, shuffle=True)
val_loader = DataLoader(TensorDataset(features, labels), batch_size=64)
'''

TORCH_BLOCK = '''

class Net{i}(nn.Module):
    def __init__(self, hidden={hidden}):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, hidden), nn.ReLU(), nn.Linear(hidden, 4))

    def forward(self, x):
        return F.softmax(self.body(x), dim=-1)


def train_{i}(model, loader, epochs={epochs}):
    optimizer = torch.optim.AdamW(model.parameters(), lr={lr})
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10)
    criterion = nn.CrossEntropyLoss()
    total_loss = 0.0
    history = []
    model.train()
    for epoch in range(epochs):
        for step, (x, y) in enumerate(loader):
            x, y = x.to(device), y.to(device)
            scheduler.step()
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            total_loss += loss
            history.append(loss.item())
            if step % 100 == 0:
                print(f"epoch {{epoch}} step {{step}}: {{loss.item():.4f}}")
    model.eval()
    correct = 0
    for x, y in val_loader:
        correct += (model(x).argmax(-1) == y).sum().item()
    torch.save(model.state_dict(), "model_{i}.pt")
    return total_loss, history


model = Net{i}().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr={lr})
losses = []
for epoch in range({epochs}):
    for x, y in train_loader:
        loss = F.cross_entropy(model.forward(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss)
total_{i}, history_{i} = train_{i}(model, train_loader)
'''

TF_HEADER = '''\
"""Experiments: many Keras models trained with custom loops (generated for lintloop's scaling benchmark)."""
import numpy as np
import tensorflow as tf

features = np.random.rand(1024, 16).astype("float32")
labels = np.random.randint(0, 4, size=(1024,))
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()
'''

TF_BLOCK = '''

model_{i} = tf.keras.Sequential([tf.keras.layers.Dense({hidden}, activation="relu"),
                                 tf.keras.layers.Dense(4, activation="softmax")])
optimizer_{i} = tf.keras.optimizers.Adam({lr})


@tf.function
def train_step_{i}(x, y):
    with tf.GradientTape() as tape:
        logits = model_{i}(x, training=True)
        loss = loss_fn(y, logits)
    print("tracing train_step_{i}")
    grads = tape.gradient(loss, model_{i}.trainable_variables)
    optimizer_{i}.apply_gradients(zip(grads, model_{i}.trainable_variables))
    return loss


dataset = tf.data.Dataset.from_tensor_slices((features, labels)).batch(32).shuffle(1024)
losses = []
for epoch in range({epochs}):
    for step, (x, y) in enumerate(dataset):
        loss = train_step_{i}(x, y)
        losses.append(loss)
        with tf.GradientTape() as tape:
            pred = model_{i}(x)
            penalty = tf.reduce_mean(tf.square(pred.numpy() - 1.0))
        grads = tape.gradient(penalty, model_{i}.trainable_variables)
        optimizer_{i}.apply_gradients(zip(grads, model_{i}.trainable_variables))
        tf.summary.scalar("loss_{i}", loss, step=step)
'''

JAX_HEADER = '''\
"""Experiments: many JAX/optax training runs (generated for lintloop's scaling benchmark)."""
from functools import partial

import jax
import jax.numpy as jnp
import optax


def loss_fn(params, batch):
    x, y = batch
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)
'''

JAX_BLOCK = '''

optimizer_{i} = optax.adam({lr})


@jax.jit
def update_{i}(params, opt_state, batch):
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    print("compiling update_{i}")
    updates, opt_state = optimizer_{i}.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    return params, opt_state, loss


@partial(jax.jit, static_argnums=(1,))
def scale_{i}(x, factor):
    return x * factor


key = jax.random.PRNGKey({i})
params = {{"w": jnp.zeros((16, 1)), "b": jnp.zeros((1,))}}
opt_state = optimizer_{i}.init(params)
for step in range({epochs}):
    x = jax.random.normal(key, (32, 16))
    noise = jax.random.normal(key, (32, 1))
    params, opt_state, loss = update_{i}(params, opt_state, (x, x[:, :1] + noise))
    optimizer_{i}.update(params, opt_state, params)
    fast = jax.jit(loss_fn)
    y = scale_{i}(x, step)
'''


def _block(template: str, i: int) -> str:
    return template.format(i=i, hidden=16 + i % 7 * 16, epochs=2 + i % 5, lr=f"{1 + i % 9}e-3")


def training_loops(header: str, block: str) -> Callable[[int], str]:
    """A file of `n` training loops (and the functions and models around them)."""
    return lambda n: header + "".join(_block(block, i) for i in range(n))


def trainer_methods(n: int) -> str:
    """One Trainer class with `n` methods: hooks, metrics, and train steps using them."""
    methods = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            methods.append(f'''
    def train_step_{i}(self, x, y):
        self.optimizer.zero_grad()
        loss = self.criterion(self.model(x), y) + self.penalty_{i + 1}()
        loss.backward()
        self.optimizer.step()
        self.losses.append(loss)
        return loss
''')
        elif kind == 1:
            methods.append(f'''
    def penalty_{i}(self):
        return sum(p.pow(2).sum() for p in self.model.parameters()) * {i % 10 + 1}e-5
''')
        elif kind == 2:
            methods.append(f'''
    def log_{i}(self, step, loss):
        self.history.setdefault("metric_{i}", []).append(loss.item())
        print(f"step {{step}}: {{loss.item():.4f}}")
''')
        else:
            methods.append(f'''
    def fit_{i}(self, loader):
        for step, (x, y) in enumerate(loader):
            loss = self.train_step_{i - 3}(x, y)
            self.log_{i - 1}(step, loss)
''')
    return TORCH_HEADER + '''

class Trainer:
    def __init__(self, model, loader):
        self.model = model
        self.loader = loader
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
        self.criterion = nn.CrossEntropyLoss()
        self.losses = []
        self.history = {}
''' + "".join(methods) + '''

def penalty_unused(self):
    return 0.0
'''


def helper_chain(n: int) -> str:
    """`n` helpers, each calling the next; the training loop calls the first."""
    helpers = [f'''
def stage_{i}(x, scale={i % 5 + 1}):
    h = stage_{i + 1}(x) * scale
    return torch.tanh(h)
''' for i in range(n)]
    return TORCH_HEADER + "".join(helpers) + f"\ndef stage_{n}(x):\n    return model(x)\n\n" + training_loop(
        "loss = F.cross_entropy(stage_0(x), y)")


def helper_star(n: int) -> str:
    """`n` helpers all calling one train step, and one loop calling all of them."""
    helpers = [f'''
def run_{i}(batch):
    loss = train_step(batch, weight={i % 5 + 1})
    history.append(loss)
    return loss
''' for i in range(n)]
    calls = "".join(f"        total += run_{i}(batch)\n" for i in range(n))
    return TORCH_HEADER + '''
model = nn.Linear(16, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
history = []


def train_step(batch, weight=1):
    x, y = batch
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y) * weight
    loss.backward()
    optimizer.step()
    return loss
''' + "".join(helpers) + f'''

total = 0
for epoch in range(3):
    for batch in train_loader:
{calls}'''


def _epochs(i: int, accumulate: str) -> str:
    """Run `i`'s epochs of SGD steps over `train_loader`, each step ending with `accumulate` (lines)."""
    return (f"for epoch in range({i % 3 + 1}):\n"
            "    for x, y in train_loader:\n"
            "        optimizer.zero_grad()\n"
            "        loss = F.cross_entropy(model(x), y)\n"
            "        loss.backward()\n"
            "        optimizer.step()\n"
            + textwrap.indent(accumulate, "        "))


def loops_in_function(n: int) -> str:
    """One function of `n` consecutive training loops (a long notebook-style `main`)."""
    loops = ["\n" + textwrap.indent(f"optimizer = torch.optim.SGD(model.parameters(), lr={i % 9 + 1}e-3)\n"
                                     f"running_{i} = 0.0\n"
                                     + _epochs(i, f"running_{i} += loss\nlosses.append(loss)\n"), "    ")
             for i in range(n)]
    return TORCH_HEADER + '''

def main():
    model = nn.Linear(16, 4)
    losses = []
''' + "".join(loops) + '''    return losses
'''


def long_lines(n: int) -> str:
    """A training loop whose lines are `n` items long: a wide layer list, a long keyword call, a
    long string, and a long list of per-layer penalties."""
    layers = ", ".join(f"nn.Linear({16 + i % 8}, {16 + i % 8})" for i in range(n // 20))
    kwargs = ", ".join(f"w{i}={i % 10}.{i % 7}" for i in range(n // 10))
    text = "x" * (n * 10)
    penalty = ", ".join(f"model[{i % 50}].weight.norm()" for i in range(n // 40))
    return TORCH_HEADER + training_loop(f"loss = F.mse_loss(model(x), x) + 1e-4 * sum([{penalty}])",
                                        model=f"nn.Sequential({layers})\nconfig = dict({kwargs})\nbanner = \"{text}\"")


def notebook_cells(n: int) -> str:
    """A notebook of `n` training-loop cells (with markdown cells and magics between them)."""
    cells = [_cell("markdown", "# Experiments\nMany runs."), _cell("code", "%matplotlib inline\n" + TORCH_HEADER)]
    for i in range(n):
        if i % 10 == 0:
            cells.append(_cell("markdown", f"## Run {i}"))
        cells.append(_cell("code", "model = nn.Linear(16, 4).to(device)\n"
                                   f"optimizer = torch.optim.SGD(model.parameters(), lr={i % 9 + 1}e-3)\n"
                                   f"losses_{i} = []\n" + _epochs(i, f"losses_{i}.append(loss)\n")
                                   + f"print(sum(l.item() for l in losses_{i}))"))
    return json.dumps({"cells": cells, "metadata": {
        "kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"},
        "language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 4}, indent=1) + "\n"


EMPTY_NOTEBOOK = json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 4})


def _cell(kind: str, source: str) -> dict:
    cell = {"cell_type": kind, "metadata": {}, "source": source.splitlines(keepends=True)}
    if kind == "code":
        cell.update(execution_count=None, outputs=[])
    return cell


def large_literals(n: int) -> str:
    """A training script with a vocabulary dict and a table of numbers of `n` entries each."""
    vocab = "".join(f'    "token_{i}": {i},\n' for i in range(n))
    table = "".join(f"    [{i % 97}.{i % 13}, {i % 31}, 'label_{i % 100}', {-i}e-3],\n" for i in range(n))
    return TORCH_HEADER + f"\nVOCAB = {{\n{vocab}}}\nTABLE = [\n{table}]" + training_loop(
        "loss = model(ids[0].long()).pow(2).mean()", model="nn.Embedding(len(VOCAB), 16)", batch="ids")


def many_imports(n: int) -> str:
    """`n` imports and aliases (plain, `as`, `from`), and a training loop using some of them."""
    kinds = ("import torch as torch_{i}", "from torch import nn as nn_{i}", "from torch.nn import functional as F_{i}",
             "import package_{i}.module_{i}.sub as alias_{i}")
    lines = [kinds[i % 4].format(i=i) for i in range(n)]
    last = (n - 1) // 4 * 4
    return TORCH_HEADER + "\n".join(lines) + "\n" + training_loop(
        "loss = F_2.cross_entropy(model(x), y)", model=f"nn_{last + 1 if last + 1 < n else 1}.Linear(16, 4)",
        optimizer=f"torch_{last}.optim.SGD")


def module_statements(n: int) -> str:
    """A script of `n` module-level statements (settings, tensors, prints) around one training loop."""
    kinds = ("setting_{i} = {i} * 2 + 1", "weight_{i} = torch.randn({size}, 4)",
             "print('setting', setting_{back2}, weight_{back1}.shape)", "config['key_{i}'] = setting_{back3}",
             "x = weight_{back3}.sum().item() + {i}")
    statements = [kinds[i % 5].format(i=i, size=i % 16 + 1, back1=i - 1, back2=i - 2, back3=i - 3) for i in range(n)]
    return TORCH_HEADER + "config = {}\n" + "\n".join(statements) + "\n" + training_loop()


def training_loop(loss: str = "loss = F.cross_entropy(model(x), y)", model: str = "nn.Linear(16, 4)",
                  optimizer: str = "torch.optim.SGD", batch: str = "x, y") -> str:
    """A PyTorch training loop (after a blank line) whose loss line is `loss`."""
    return f'''
model = {model}
optimizer = {optimizer}(model.parameters(), lr=0.1)
total = 0
for {batch} in train_loader:
    optimizer.zero_grad()
    {loss}
    loss.backward()
    optimizer.step()
    total += loss
'''


def _loop_around(statement: str) -> str:
    """A PyTorch script of one training loop whose loss line is `statement`."""
    return TORCH_HEADER + training_loop(statement)


def plus_chain(n: int) -> str:
    """A loss that is the sum of `n` terms."""
    return _loop_around("loss = " + " + ".join(f"F.mse_loss(model(x)[:, {i % 4}], y.float())" for i in range(n)))


def parentheses(n: int) -> str:
    return _loop_around("loss = " + "(" * n + "F.cross_entropy(model(x), y)" + ")" * n)


def attribute_chain(n: int) -> str:
    """`model.body.body...` and `x.float().float()...` chains of `n` links."""
    return _loop_around("loss = F.cross_entropy(model" + ".body" * (n // 2) + "(x" + ".float()" * (n // 2) + "), y)")


def unary_chain(n: int) -> str:
    return _loop_around("loss = " + "- " * n + "F.cross_entropy(model(x), y)")


def elif_chain(n: int) -> str:
    """A training loop dispatching on the epoch through an `if`/`elif` chain of `n` branches."""
    branches = "".join(f'''
        elif epoch == {i}:
            loss = F.cross_entropy(model(x), y) * {i % 7 + 1}''' for i in range(1, n))
    return TORCH_HEADER + f'''
model = nn.Linear(16, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
total = 0
for epoch in range({n}):
    for x, y in train_loader:
        optimizer.zero_grad()
        if epoch == 0:
            loss = F.cross_entropy(model(x), y){branches}
        else:
            loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss
'''


def nested_ifs(n: int) -> str:
    """A training step at every level of `n` nested `if` blocks, in a training loop (CPython allows
    100 levels of indentation): n steps, n levels deep."""
    levels = []
    for depth in range(n):
        indent = "    " * (depth + 1)
        levels.append(f"{indent}if flag_{depth}:\n")
        levels.append(textwrap.indent("optimizer.zero_grad()\nloss = F.cross_entropy(model(x), y)\nloss.backward()\n"
                                      "optimizer.step()\ntotal += loss\n", indent + "    "))
    return TORCH_HEADER + "".join(f"flag_{d} = True\n" for d in range(n)) + '''
model = nn.Linear(16, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
total = 0
for x, y in train_loader:
''' + "".join(levels)


def _loop_with(statements: list[str]) -> str:
    """A PyTorch script whose training loop also runs `statements` (each one line, in the loop's body)."""
    return TORCH_HEADER + training_loop().rstrip("\n") + "\n" + "".join(f"    {line}\n" for line in statements)


# What each level of a deep statement opens, in turn: a list, a call, a dict, a subscript.
_LEVELS = (("[", "]"), ("torch.stack(", ")"), ("{'w': ", "}"), ("weights[", "]"))


def deep_brackets(n: int) -> str:
    """120 statements of a training loop, each nested `n` brackets deep (lists, calls, dicts and
    subscripts in turn, around the loss; CPython's tokenizer takes 200 levels)."""
    def nested(i: int) -> str:
        levels = [_LEVELS[(i + level) % len(_LEVELS)] for level in range(n)]
        return "".join(o for o, _ in levels) + "F.cross_entropy(model(x), y)" + "".join(c for _, c in reversed(levels))

    return _loop_with([f"penalty_{i} = {nested(i)}" for i in range(120)])


def deep_fstrings(n: int) -> str:
    """120 log lines of a training loop, each an f-string whose field nests `n` lists and calls deep."""
    def field(i: int) -> str:
        levels = [("[", "]") if (i + level) % 2 else ("max(", ")") for level in range(n)]
        return "".join(o for o, _ in levels) + "loss.item()" + "".join(c for _, c in reversed(levels))

    return _loop_with([f'print(f"step {{{field(i)}!r:>12}} of run {i}")' for i in range(120)])


def deep_parentheses(n: int) -> str:
    """1,000 statements of a training loop, each with `n` grouping parentheses around its loss."""
    return _loop_with([f"scaled_{i} = " + "(" * n + f"loss * {i % 7 + 1}" + ")" * n for i in range(1_000)])


def statements_on_one_line(n: int) -> str:
    """`n` settings assigned on one line (`a0 = 0; a1 = 1; ...`), then a training loop."""
    return TORCH_HEADER + "; ".join(f"setting_{i} = {i}" for i in range(n)) + "\n" + training_loop()


def nested_literal(n: int) -> str:
    """A table of `n` pairs in one statement on one line (`data = [[0, 1], [2, 3], ...]`) and a loop."""
    table = ", ".join(f"[{i}, {i % 97}]" for i in range(n))
    return TORCH_HEADER + f"data = [{table}]\n" + training_loop()


def nested_literal_mixed(n: int) -> str:
    """One line of `n` records, in turn a dict, a tuple, a string and a call, passed to a tensor."""
    kinds = ("{{'id': {i}, 'xy': [{i}, {j}]}}", "({i}, 'label_{j}')", "'token_{i}'", "torch.tensor([{i}.5, {j}])")
    records = ", ".join(kinds[i % 4].format(i=i, j=i % 97) for i in range(n))
    return TORCH_HEADER + f"records = [{records}]\n" + training_loop()


def folder_scripts(n: int) -> dict[str, str]:
    """A folder of `n` small training scripts, each a model and its loop (findings in each)."""
    return {"lintloop.toml": "", **{f"train_{i}.py": TORCH_HEADER + _block(TORCH_BLOCK, i) for i in range(n)}}


def folder_package(n: int) -> dict[str, str]:
    """A package of `n` modules, each a train step that calls the next module's (imported from it)."""
    modules = {"lintloop.toml": "", "experiments/__init__.py": ""}
    for i in range(n):
        following = (i + 1) % n
        modules[f"experiments/step_{i}.py"] = f'''import torch
import torch.nn.functional as F

from .step_{following} import train_step_{following}


def train_step_{i}(model, loader, optimizer, epochs={i % 5 + 1}):
    for epoch in range(epochs):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
    train_step_{following}(model, loader, optimizer)
'''
    return modules


@dataclass(frozen=True)
class Shape:
    name: str
    generate: Callable[[int], str | dict[str, str]]  # a file's text, or a folder's files
    base: int
    suffix: str = ".py"
    large: bool = True  # ×100 is feasible (with --large)
    note: str = ""  # the stage the shape exercises most, shown beside a failing verdict
    # "check" (without the result cache), "warm" (a check with the cache it made) or "diff" (fix --diff)
    command: str = "check"


_PARSER = "the syntax and depth stages (lintloop/syntax.py, lintloop/nesting.py)"
_PIECES = "libcst's parser on deep or wide statements (lintloop/pieces.py)"
_FOLDER = "what each file reads of the others (lintloop/project_view.py importers, lintloop/cache.py once_per_run)"
# Base sizes: about a second of work above start-up (a smaller base makes the growth ratio noise);
# ×100 (--large) where that stays near the sizes real repositories hold (5 MB, 5,000 cells).
SHAPES = [
    Shape("loops-torch", training_loops(TORCH_HEADER, TORCH_BLOCK), 40),
    Shape("loops-tf", training_loops(TF_HEADER, TF_BLOCK), 50),
    Shape("loops-jax", training_loops(JAX_HEADER, JAX_BLOCK), 60),
    Shape("class-methods", trainer_methods, 500, large=False),
    Shape("helper-chain", helper_chain, 1_500, large=False),
    Shape("helper-star", helper_star, 600, large=False),
    Shape("loops-in-function", loops_in_function, 300, large=False),
    Shape("long-lines", long_lines, 20_000, large=False),
    Shape("notebook-cells", notebook_cells, 500, suffix=".ipynb", large=False),
    Shape("large-literal", large_literals, 8_000, large=False),
    Shape("imports", many_imports, 8_000, large=False),
    Shape("module-statements", module_statements, 6_000, large=False),
    Shape("plus-chain", plus_chain, 200, note=_PARSER),
    Shape("parentheses", parentheses, 20, large=False, note=_PARSER),
    Shape("attribute-chain", attribute_chain, 100, note=_PARSER),
    Shape("unary-chain", unary_chain, 100, note=_PARSER),
    Shape("elif-chain", elif_chain, 300, large=False),
    Shape("nested-ifs", nested_ifs, 9, large=False, note="CPython's limit: 100 levels of indentation"),
    Shape("deep-brackets", deep_brackets, 19, large=False, note=_PIECES),
    Shape("deep-fstrings", deep_fstrings, 19, large=False, note=_PIECES),
    Shape("deep-parentheses", deep_parentheses, 19, large=False, note=_PIECES),
    Shape("statements-one-line", statements_on_one_line, 3_000, large=False, note=_PARSER),
    Shape("nested-literal", nested_literal, 10_000, large=False, note=_PIECES),
    Shape("nested-literal-mixed", nested_literal_mixed, 5_000, large=False, note=_PIECES),
    Shape("folder-scripts", folder_scripts, 100, suffix="", large=False, note=_FOLDER),
    Shape("folder-scripts-warm", folder_scripts, 100, suffix="", large=False, note=_FOLDER, command="warm"),
    Shape("folder-package", folder_package, 100, suffix="", large=False, note=_FOLDER),
    Shape("folder-package-fix", folder_package, 100, suffix="", large=False, note=_FOLDER, command="diff"),
]


# ----- measuring --------------------------------------------------------------------------------


@dataclass
class Run:
    """One process: its wall and CPU seconds and peak RSS, or why it has none."""

    wall: float = 0.0
    cpu: float = 0.0
    rss_mib: float = 0.0
    failure: str = ""  # "TIMEOUT", "CRASH (SIGSEGV)", "ERROR (exit 2: ...)", "NOT-ANALYSED (...)" (an LL004)


def measure(argv: list[str], cwd: Path, timeout: float) -> Run:
    """Run `argv` as a process group, killed after `timeout` s; its own and its children's usage come
    from `wait4` (the peak RSS is that of the largest process of the tree)."""
    with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, stdout=stdout, stderr=stderr, start_new_session=True)
        timed_out = threading.Event()

        def kill() -> None:
            timed_out.set()
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        run = Run(time.perf_counter() - started, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)
        if timed_out.is_set():
            run.failure = "TIMEOUT"
        elif proc.returncode < 0:
            run.failure = f"CRASH ({signal.Signals(-proc.returncode).name})"
        elif proc.returncode not in (0, 1):
            stderr.seek(0)
            last = (stderr.read().decode(errors="replace").strip().splitlines() or [""])[-1]
            run.failure = f"ERROR (exit {proc.returncode}: {last[:120]})"
        else:
            stdout.seek(0)
            stopped = next((line for line in stdout.read().decode(errors="replace").splitlines()
                            if ": LL004 " in line), None)
            if stopped is not None:  # lintloop's own per-file bound stopped the analysis
                run.failure = f"NOT-ANALYSED ({stopped.split(': LL004 ', 1)[1][:120]})"
    return run


@dataclass
class Point:
    """A shape at one size: the medians of its runs, or its failure."""

    size: int
    chars: int
    wall: float = 0.0
    cpu: float = 0.0
    rss_mib: float = 0.0
    failure: str = ""


def measure_point(argv: list[str], cwd: Path, repeat: int, timeout: float, size: int, chars: int) -> Point:
    runs: list[Run] = []
    for _ in range(repeat):
        run = measure(argv, cwd, timeout)
        if run.failure:
            return Point(size, chars, run.wall, run.cpu, run.rss_mib, run.failure)  # a failure is not repeated
        runs.append(run)
    return Point(size, chars, statistics.median(r.wall for r in runs), statistics.median(r.cpu for r in runs),
                 statistics.median(r.rss_mib for r in runs))


def lint_command(python: str, rules: str, path: Path, limits: bool, command: str = "check") -> list[str]:
    select = ["--select", "ALL"] if rules == "all" else []
    unbounded = [] if limits else ["--file-timeout", "0", "--file-memory-limit", "0"]
    how = {"check": ["check", "--no-cache"], "warm": ["check"], "diff": ["fix", "--diff", "--no-cache"]}[command]
    return [python, "-m", "lintloop", *how, "--format", "concise", *select, *unbounded, str(path)]


@dataclass
class Row:
    shape: Shape
    rules: str
    points: list[Point] = field(default_factory=list)

    def growth(self, baseline: Point) -> list[tuple[float, float]]:
        """(time, memory) growth of each ×10 step, of the work above the empty file's cost; CPU time,
        which other processes' load disturbs far less than wall time."""
        work = [(max(p.cpu - baseline.cpu, TIME_FLOOR_S), max(p.rss_mib - baseline.rss_mib, MEMORY_FLOOR_MIB))
                for p in self.points if not p.failure]
        return [(b[0] / a[0], b[1] / a[1]) for a, b in zip(work, work[1:])]

    def verdict(self, baseline: Point) -> str:
        failed = next((p.failure for p in self.points if p.failure), "")
        if failed:
            return failed.split(" (")[0]
        return "PASS" if all(t <= MAX_GROWTH and m <= MAX_GROWTH for t, m in self.growth(baseline)) else "FAIL"


def run_shape(shape: Shape, rules: str, sizes: list[int], args: argparse.Namespace, folder: Path) -> Row:
    row = Row(shape, rules)
    for size in sizes:
        generated = shape.generate(size)
        path = folder / f"{shape.name}-{size}{shape.suffix}"
        if isinstance(generated, dict):  # a folder of files (its own lintloop.toml: its own project and cache)
            for relative, text in generated.items():
                (path / relative).parent.mkdir(parents=True, exist_ok=True)
                (path / relative).write_text(text, encoding="utf-8")
            chars = sum(map(len, generated.values()))
        else:
            path.write_text(generated, encoding="utf-8")
            chars = len(generated)
        argv = lint_command(args.python, rules, path, args.limits, shape.command)
        if shape.command == "warm":
            measure(argv, folder, args.timeout)  # the run that fills the cache
        point = measure_point(argv, folder, args.repeat, args.timeout, size, chars)
        row.points.append(point)
        if not args.keep:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        if point.failure:
            break  # a bigger input fails at least as badly: not worth its timeout
    return row


# ----- reporting --------------------------------------------------------------------------------


def _size(chars: int) -> str:
    return f"{chars / 1e6:.1f} MB" if chars >= 1e6 else f"{chars / 1e3:.0f} kB"


def _empty_of(shape: Shape) -> tuple[str, str]:
    """Which empty input's cost is subtracted from a shape's: its suffix (a folder's files are .py) and command."""
    return shape.suffix or ".py", shape.command


def print_table(rows: list[Row], baselines: dict[tuple[str, str, str], Point]) -> None:
    print("| shape | rules | sizes | CPU s (wall s) above empty | peak MiB above empty | growth ×10: time, memory | verdict |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        baseline = baselines[(row.rules, *_empty_of(row.shape))]
        sizes = " → ".join(f"{p.size:,} ({_size(p.chars)})" for p in row.points)
        seconds = " → ".join(p.failure.split(" (")[0] if p.failure else
                             f"{p.cpu - baseline.cpu:.2f} ({p.wall - baseline.wall:.2f})" for p in row.points)
        memory = " → ".join("—" if p.failure else f"{p.rss_mib - baseline.rss_mib:.0f}" for p in row.points)
        growth = "; ".join(f"×{t:.1f}, ×{m:.1f}" for t, m in row.growth(baseline)) or "—"
        verdict = row.verdict(baseline)
        failure = next((p.failure for p in row.points if p.failure), "")
        if failure and failure != verdict:
            verdict += " " + failure[len(verdict):].strip()
        if row.shape.note and verdict != "PASS":
            verdict += f" — {row.shape.note}"
        print(f"| {row.shape.name} | {row.rules} | {sizes} | {seconds} | {memory} | {growth} | {verdict} |", flush=True)
    print()
    for (rules, suffix, command), point in sorted(baselines.items()):
        print(f"empty {suffix} file, {rules} rules, {command}: {point.cpu:.2f} CPU s, {point.wall:.2f} wall s, "
              f"{point.rss_mib:.0f} MiB peak (subtracted above)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per point; the median counts (default 3)")
    parser.add_argument("--large", action="store_true", help="also ×100 where feasible (5 MB files, 5,000 cells)")
    parser.add_argument("--only", help="comma-separated shape names")
    parser.add_argument("--rules", choices=("all", "default", "both"), default="both")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per run before it is TIMEOUT")
    parser.add_argument("--python", default=sys.executable, help="the interpreter whose lintloop runs")
    parser.add_argument("--limits", action="store_true",
                        help="keep lintloop's per-file time and memory bounds (default: off, to measure the whole cost)")
    parser.add_argument("--keep", type=Path, help="write the generated inputs into this folder and keep them")
    parser.add_argument("--json", type=Path, help="also write the points as JSON")
    args = parser.parse_args(argv)
    shapes = SHAPES
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {s.name for s in SHAPES}
        if unknown:
            parser.error(f"unknown shapes: {', '.join(sorted(unknown))} (known: {', '.join(s.name for s in SHAPES)})")
        shapes = [s for s in SHAPES if s.name in wanted]
    rule_sets = ["all", "default"] if args.rules == "both" else [args.rules]
    with tempfile.TemporaryDirectory(prefix="lintloop-scaling-") as temporary:
        folder = args.keep or Path(temporary)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "lintloop.toml").write_text("", encoding="utf-8")  # no configuration above applies
        baselines: dict[tuple[str, str, str], Point] = {}
        for rules in rule_sets:
            for suffix, command in sorted({_empty_of(s) for s in shapes}):
                empty = folder / f"empty{suffix}"
                empty.write_text(EMPTY_NOTEBOOK if suffix == ".ipynb" else "", encoding="utf-8")
                argv = lint_command(args.python, rules, empty, args.limits, command)
                if command == "warm":
                    measure(argv, folder, args.timeout)  # the run that fills the cache
                baselines[rules, suffix, command] = measure_point(argv, folder, args.repeat, args.timeout, 0, 0)
        rows = []
        for shape in shapes:
            sizes = [shape.base, shape.base * 10] + ([shape.base * 100] if args.large and shape.large else [])
            for rules in rule_sets:
                rows.append(run_shape(shape, rules, sizes, args, folder))
                print(f"{shape.name} ({rules}): " + ", ".join(
                    p.failure or f"{p.cpu:.2f} s {p.rss_mib:.0f} MiB" for p in rows[-1].points), file=sys.stderr, flush=True)
    print_table(rows, baselines)
    if args.json:
        args.json.write_text(json.dumps([{"shape": r.shape.name, "rules": r.rules, "verdict": r.verdict(
            baselines[(r.rules, *_empty_of(r.shape))]), "points": [p.__dict__ for p in r.points]} for r in rows], indent=1))
    return 0 if all(r.verdict(baselines[(r.rules, *_empty_of(r.shape))]) == "PASS" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
