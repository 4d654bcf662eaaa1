"""Positions located statement by statement (a top-level statement alone, a class's member alone inside
its class header) are the ranges libcst gives for the whole module."""

from __future__ import annotations

import ast
from collections import Counter

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider

from lintloop.positions import node_positions
from lintloop.screen import FileFacts
from lintloop.source import source_lines
from lintloop.syntax import CHUNK_LINES, parse_cst, selection_outline

CLASS = '''\
import torch  # a comment


@torch.no_grad()
def evaluate(model):
    return model(1)


class Trainer(
        torch.nn.Module):
    """A class whose members are located one at a time."""
    size = 3; depth = 4
    if torch.cuda.is_available():
        device = "cuda"

    @staticmethod
    @torch.no_grad()
    def step(model, batch,
  weird_indent=1):
        loss = model(batch)
        return (loss
                    .sum())

    # a comment between members

    class Nested:
        def inner(self):
            return [
    1,
            2]

    async def fetch(self): return await self.source()
'''


def _parents(module: cst.Module) -> dict[cst.CSTNode, cst.CSTNode]:
    return dict(MetadataWrapper(module, unsafe_skip_copy=True).resolve(ParentNodeProvider))


def _every_node(module: cst.Module) -> list[cst.CSTNode]:
    """Every node but the module, and but those libcst shares between parents (a field's default,
    `SimpleWhitespace("")`), which have no one range."""
    seen: Counter[int] = Counter()
    nodes: dict[int, cst.CSTNode] = {}

    class Count(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            seen[id(node)] += 1
            nodes[id(node)] = node
            return True

    module.visit(Count())
    return [node for key, node in nodes.items() if seen[key] == 1 and not isinstance(node, cst.Module)]


@pytest.mark.parametrize("indent", ["    ", "\t"])
def test_each_node_of_a_class_member_is_where_the_whole_module_puts_it(indent):
    text = CLASS.replace("    ", indent)
    module = cst.parse_module(text)
    whole = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    nodes = _every_node(module)
    located = node_positions(module, text, ast.parse(text), _parents(module).get, nodes)
    assert {node: located[node] for node in nodes} == {node: whole[node] for node in nodes}


def test_a_member_of_a_class_selected_in_part_is_located_by_the_outline():
    """A long selection's positions come from the file's tree outlined (`selection_outline`): a class's
    selected members carry their lines in the selection."""
    methods = "".join(f"    @staticmethod\n    def m{n}(x):\n        return (x *\n  {n})\n\n" for n in range(CHUNK_LINES // 2))
    text = f"import torch\n\nclass Big(torch.nn.Module):\n    '''doc'''\n    a = 1; b = 2\n\n{methods}x = 1\n"
    tree = ast.parse(text)
    facts = FileFacts(tree)
    wanted = {i for i in range(len(facts.units)) if i % 3 != 2}
    selection, line_map = facts.source_of(source_lines(text), wanted | {u.shell for u in facts.units if u.shell is not None})
    outline = selection_outline(tree, line_map)
    assert outline is not None and len(source_lines(selection)) > CHUNK_LINES
    module = parse_cst(selection, source_lines(selection), outline)
    whole = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    parents = _parents(module)
    nodes = _every_node(module)
    located = node_positions(module, selection, outline, parents.get, nodes)
    assert {node: located[node] for node in nodes} == {node: whole[node] for node in nodes}
    [big] = [s for s in module.body if isinstance(s, cst.ClassDef)]
    assert len(big.body.body) < CHUNK_LINES // 2  # methods were left out of the selection


def test_statements_the_tree_does_not_pair_are_located_with_more_around_them():
    """Where CPython's statements do not pair with libcst's, a member is located with its whole class
    (the class's statement has no such members), or every node with the whole module (another text's)."""
    module = cst.parse_module(CLASS)
    whole = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    [trainer] = [s for s in module.body if isinstance(s, cst.ClassDef)]
    member = trainer.body.body[2]  # the `if` in the class body
    tree = ast.parse(CLASS)
    [class_statement] = [s for s in tree.body if isinstance(s, ast.ClassDef)]
    class_statement.body = class_statement.body[:1]
    for unpaired in (tree, ast.parse("import torch\n")):
        assert node_positions(module, CLASS, unpaired, _parents(module).get, [member])[member] == whole[member]
