"""With-blocks of one kind (a tape, a strategy scope, no_grad) and which of them enclose a node."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import libcst as cst

from lintloop.analysis.base import Analysis
from lintloop.analysis.nodes import read_name

if TYPE_CHECKING:
    from lintloop.analysis.context import FileContext


@dataclass(frozen=True)
class WithContext:
    kind: str  # "tape" | "strategy_scope" | "no_grad"
    block: cst.With
    item: cst.WithItem
    alias: str | None


class WithBlocks(Analysis):
    """The with-items whose context manager (a call, or a name bound to one) `matches`."""

    asks = frozenset({"flow"})

    def __init__(self, ctx: FileContext, kind: str, matches: Callable[[cst.Call], bool]) -> None:
        super().__init__(ctx)
        self.kind = kind
        self.contexts: list[WithContext] = []
        self._by_block: dict[int, list[WithContext]] = defaultdict(list)
        for block in ctx.nodes(cst.With):
            for item in block.items:
                manager = self._manager(item)
                if manager is not None and matches(manager):
                    alias = item.asname.name.value if item.asname and isinstance(item.asname.name, cst.Name) else (
                        read_name(item.item))
                    context = WithContext(kind, block, item, alias)
                    self.contexts.append(context)
                    self._by_block[id(block)].append(context)

    def _manager(self, item: cst.WithItem) -> cst.Call | None:
        expr = item.item
        if read_name(expr) is not None:  # `tape = tf.GradientTape(); with tape:`, and `with self.tape:`
            made = self.ctx.flow.constructed_by(expr, item)
            expr = made[0] if made else expr
        return expr if isinstance(expr, cst.Call) else None

    def enclosing(self, node: cst.CSTNode) -> list[WithContext]:
        """Blocks of this kind whose body lexically contains `node`, innermost first."""
        result = []
        previous = node
        for ancestor in self.ctx.ancestors(node):
            if id(ancestor) in self._by_block and previous is ancestor.body:
                result.extend(self._by_block[id(ancestor)])
            previous = ancestor
        return result
