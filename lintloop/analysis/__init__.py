"""The shared analyses rules ask, one module per concern.

- `syntax`: questions about a node alone (dotted names, call parts, traversal)
- `index`: the one walk over a file (parents, order, nodes by type, imports, bindings)
- `names`: qualified names through imports, canonical spellings, builtins
- `dataflow`: bindings visible at a point, values flowing into others, what constructed a value
- `calls`: same-file functions, call targets, calls in a body, call sites
- `contexts`: with-blocks of a kind and which enclose a node
- `training`: what is differentiated, training functions and loops
- `tensorflow`: tapes, `gradient` calls, `tf.function`-traced code, Keras versions
- `distribution`: `tf.distribute` strategies, scopes and step functions
- `pytorch`: `no_grad` / `inference_mode` code, autocast regions, GradScalers
- `modules`: which values are `nn.Module`s, their forward calls and last layers
- `iteration`: the ordered events of a PyTorch loop's iteration (zero_grad, backward, step, modes, ...)
- `losses`: loss objects and functions of both frameworks
- `intent`: tracing shown on purpose (prints that announce it, trace counters read to count traces)
- `context`: `FileContext`, which holds the tree and builds each analysis on first use
"""

from lintloop.analysis.context import FileContext

__all__ = ["FileContext"]
