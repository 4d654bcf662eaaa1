"""A quick profile of the metamorphic bench (bench/metamorphic.py; the full matrix is its own run): a
program's findings survive meaning-preserving rewrites — its import aliases renamed, from-imports, its
cells, its model or loop moved to another module of a package. The rules here are those whose every
flagged and not-flagged program keeps its verdict under these rewrites; the bench's table says which
others do not yet."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))  # the bench's scripts import each other
import metamorphic  # noqa: E402
import rewrites  # noqa: E402

RULES = {"LL101", "LL102", "LL301", "LL302", "LL402", "LL404", "LL604", "LL702", "LL707", "LL905"}
MODULE_REWRITES = ["roundtrip", "aliases", "from_imports", "notebook", "helpers_module", "model_module", "loop_module"]


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    chosen = metamorphic.programs(RULES)
    found, off, differing = metamorphic.matrix(tmp_path_factory.mktemp("metamorphic"), chosen,
                                               {name: metamorphic.REWRITES[name] for name in MODULE_REWRITES},
                                               compare_screen=True)
    assert off == []  # every program's verdict as written is the one it shows
    assert differing == []  # and the screen changes none, split into modules or not
    return found


@pytest.mark.parametrize("rewrite", MODULE_REWRITES)
def test_the_findings_survive_the_module_rewrites(cells, rewrite):
    chosen = {code: cell for (code, name), cell in cells.items() if name == rewrite}
    assert chosen and sum(c.flagged + c.clean for c in chosen.values()) > 0
    lost = {code: c.flagged_lost + c.clean_lost for code, c in chosen.items() if c.flagged_lost or c.clean_lost}
    assert lost == {}


def test_a_split_program_is_the_same_program():
    program = """
import torch
from torch import nn

class Net(nn.Module):
    def forward(self, x):
        return x

def train(model, loader):
    for x in loader:
        model(x).sum().backward()

model = Net()
for epoch in range(3):
    train(model, loader)
"""
    models = rewrites.model_module(program)
    assert set(models) == {"__init__.py", "main.py", "models.py"}
    assert "class Net" in models["models.py"] and "from .models import Net" in models["main.py"]
    loop = rewrites.loop_module(program)
    assert "def train_loop(loader, model, train):" in loop["loop.py"]
    assert "train_loop(loader, model, train)" in loop["main.py"]
    helpers = rewrites.helpers_module(program)
    assert "def train(model, loader):" in helpers["helpers.py"] and "from helpers import train" in helpers["main.py"]
    # No module is imported whole (`import torch` is never read): nothing to turn into from-imports.
    assert rewrites.from_imports(program) is None
    for files in (models, loop, helpers, rewrites.aliases(program)):
        for name, text in files.items():
            if name.endswith(".py"):
                ast.parse(text)
