"""The shared analyses rules ask, one module per concern, each an attribute of the file's `FileContext`
(`context.py`: `ctx.training`, `ctx.flow`, ...) built the first time it is asked. Beside them, what they
stand on: `index.py`, the one walk over a file; `nodes.py`, questions about a node alone (dotted names,
call parts, traversal); `names.py`, qualified names through imports; `with_blocks.py`, with-blocks of a
kind. docs/architecture.md lists the analyses, what each answers and asks (generated from `Analysis.asks`).
"""

from lintloop.analysis.context import FileContext

__all__ = ["FileContext"]
