"""Imported names: what `tf.keras.losses.MSE`, `from torch import nn as N; N.Linear` really are.

Spellings of one API (tf.keras / keras / tf_keras, tf.losses / keras.losses) are merged into one
canonical qualified name, so rules match `keras.losses.…` once instead of every spelling.
"""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.nodes import dotted
from lintloop.frameworks import FRAMEWORK_ROOTS, public_path

_CANONICAL_PREFIXES = (
    ("tensorflow.python.keras.", "keras."),
    ("tensorflow.keras.", "keras."),
    ("tf_keras.", "keras."),
    ("tensorflow.losses.", "keras.losses."),
    ("tensorflow.metrics.", "keras.metrics."),
    ("tensorflow.optimizers.", "keras.optimizers."),
)
_CANONICAL_EXACT = {"tensorflow.keras": "keras", "tf_keras": "keras", "tensorflow.python.keras": "keras"}



def canonical(qualname: str) -> str:
    qualname = public_path(qualname)
    if qualname in _CANONICAL_EXACT:
        return _CANONICAL_EXACT[qualname]
    for prefix, replacement in _CANONICAL_PREFIXES:
        if qualname.startswith(prefix):
            return replacement + qualname[len(prefix):]
    return qualname


class Names:
    """Qualified names through the file's imports (every import of the file, at any depth)."""

    def __init__(self, imports: dict[str, str], bound_names: set[str],
                 evidenced: frozenset[str] = frozenset()) -> None:
        self.imports = imports
        self.bound_names = bound_names
        # Frameworks the file's code shows by its training shape though it never imports them
        # (lintloop.frameworks.FRAMEWORK_EVIDENCE): analysed as that framework's code.
        self.evidenced = evidenced

    def raw_qualname(self, expr: cst.BaseExpression) -> str | None:
        """Like `qualname`, without merging spellings (`tf_keras.X` stays `tf_keras.X`)."""
        path = dotted(expr)
        return self.resolve(path) if path else None

    def qualname(self, expr: cst.BaseExpression) -> str | None:
        """Fully qualified, canonical name of an imported thing however it is spelled."""
        path = dotted(expr)
        return self.qualified(path) if path else None

    def qualified(self, path: str) -> str | None:
        """`qualname` of a dotted path (`tf.summary.scalar` -> `tensorflow.summary.scalar`)."""
        raw = self.resolve(path)
        return canonical(raw) if raw else None

    def resolve(self, path: str) -> str | None:
        """The qualified name a dotted path (`lax.scan`) stands for through the imports (`jax.lax.scan`),
        spelled as imported; None where its head is not imported. From either tree's nodes (the
        screen reads CPython's)."""
        head, dot, rest = path.partition(".")
        qualified = self.imports.get(head)
        return None if qualified is None else qualified + dot + rest

    def callee(self, call: cst.Call) -> str | None:
        return self.qualname(call.func)

    def is_builtin(self, expr: cst.BaseExpression, name: str) -> bool:
        """`expr` is the builtin `name`, not rebound anywhere in the file."""
        return (isinstance(expr, cst.Name) and expr.value == name
                and name not in self.bound_names and name not in self.imports)

    def uses_framework(self, framework: str) -> bool:
        roots = FRAMEWORK_ROOTS[framework]
        return framework in self.evidenced or any(q.split(".")[0] in roots for q in self.imports.values())

    def alias_of(self, qualname: str) -> str | None:
        """A local name the file imports `qualname` as (`tf` for `tensorflow`)."""
        return next((local for local, full in self.imports.items() if full == qualname), None)
