"""The frameworks the rules are about, by the top-level packages a program imports them from, and
the cheapest test lintloop makes of a file: whether its bytes name any of them (DESIGN.md "What is
parsed"). Imports nothing: a run answered from the result cache uses it without the engine."""

from __future__ import annotations

import functools
from collections.abc import Iterable

# The top-level packages that make a file use each framework.
FRAMEWORK_ROOTS = {
    "tf": ("tensorflow", "keras", "tf_keras"),
    "pt": ("torch",),
    "jax": ("jax", "flax", "optax"),
}
FRAMEWORK_LABELS = {"tf": "TensorFlow/Keras", "pt": "PyTorch", "jax": "JAX"}

# Searched for in this order (the most common first: most files that name one name `torch`).
_ROOT_ORDER = ("torch", "tensorflow", "keras", "jax", "flax", "optax")


@functools.cache
def framework_names(frameworks: frozenset[str]) -> tuple[bytes, ...]:
    """The names to search a file's bytes for, for these frameworks. A name that contains another
    (`tf_keras`, `keras`) is left out: a text holding it holds the shorter one."""
    roots = {root for framework in frameworks for root in FRAMEWORK_ROOTS[framework]}
    needed = {root for root in roots if not any(other != root and other in root for other in roots)}
    return tuple(root.encode() for root in sorted(
        needed, key=lambda root: (_ROOT_ORDER.index(root) if root in _ROOT_ORDER else len(_ROOT_ORDER), root)))


def names_nothing(data: bytes, names: Iterable[bytes]) -> bool:
    """A file's bytes name none of `names` (framework names) and hold no word a lintloop comment
    starts with (`lintloop`, `noqa`, in any case): it can hold no finding."""
    if any(name in data for name in names):
        return False
    lowered = data.lower()
    return b"lintloop" not in lowered and b"noqa" not in lowered
