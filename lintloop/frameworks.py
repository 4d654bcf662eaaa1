"""The frameworks the rules are about, by the top-level packages a program imports them from, and
the cheapest test lintloop makes of a file: whether its bytes name any of them (docs/architecture.md,
"What is parsed"). Imports nothing: a run answered from the result cache uses it without the engine."""

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

# Module paths that are another spelling of a framework's public API (a re-export, a private module
# the public name is defined in), most specific first: an import from one is recorded as the public
# path, so `tf`, `nn.CrossEntropyLoss` or `function` mean what they mean when imported publicly.
# `tensorflow.compat.v1` is not among them: it keeps TF1's semantics (graph mode, sessions).
# `tf_keras` is Keras 2, not Keras 3: it is merged into `keras.` later, where a rule asks for a
# canonical name (lintloop.analysis.names.canonical), and stays apart where one tells them apart.
_PUBLIC_PATHS = (
    ("tensorflow.compat.v2", "tensorflow"),
    ("tensorflow.python.eager.def_function", "tensorflow"),
    ("tensorflow.python.eager.polymorphic_function.polymorphic_function", "tensorflow"),
    ("keras.src", "keras"),
    ("jax._src.api", "jax"),
    ("jax._src.random", "jax.random"),
    ("jax._src.numpy.lax_numpy", "jax.numpy"),
    ("jax._src.numpy", "jax.numpy"),
    ("jax._src.lax.lax", "jax.lax"),
    ("jax._src.lax.control_flow", "jax.lax"),
    ("jax._src", "jax"),
)
_TORCH_MODULES = "torch.nn.modules"  # torch.nn.modules.loss.CrossEntropyLoss is torch.nn.CrossEntropyLoss


def public_path(path: str) -> str:
    """The public spelling of an imported dotted path (`tensorflow.compat.v2` -> `tensorflow`,
    `torch.nn.modules.loss.MSELoss` -> `torch.nn.MSELoss`); other paths unchanged."""
    for private, public in _PUBLIC_PATHS:
        if path == private or path.startswith(private + "."):
            return public + path[len(private):]
    if path == _TORCH_MODULES or path.startswith(_TORCH_MODULES + "."):
        rest = path[len(_TORCH_MODULES) + 1:].split(".")
        # `torch.nn.modules.loss.MSELoss`: the submodule (`loss`) is dropped, the class kept.
        return ".".join(["torch", "nn", *rest[1:]]) if len(rest) > 1 else "torch.nn"
    return path

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


# A framework's training shape, for a module that never imports it (a training loop given its model,
# optimizer and loader by the caller): each group's words all in the text. PyTorch: `loss.backward()`
# and `optimizer.step()` (TensorFlow and JAX spell training through their imports: `GradientTape`, `jax.grad`).
FRAMEWORK_EVIDENCE = {"pt": ((".backward(", ".step("),)}
# Other frameworks with the same shape (MXNet's `trainer.step`, tinygrad, ...): a text that names one is
# not taken for PyTorch by its shape (MXNet overwrites gradients: no `zero_grad` is missing there).
_SAME_SHAPE_ELSEWHERE = ("mxnet", "tinygrad", "paddle", "mindspore", "oneflow", "jittor", "chainer", "mlx",
                         "micrograd", "tensorflow", "keras", "jax", "autograd", "theano", "dynet")


def shows_framework(text: str, framework: str) -> bool:
    """Does `text` have `framework`'s training shape (`FRAMEWORK_EVIDENCE`), imports aside, and name no
    other framework of that shape?"""
    return any(all(word in text for word in group) for group in FRAMEWORK_EVIDENCE.get(framework, ())) \
        and not any(other in text for other in _SAME_SHAPE_ELSEWHERE)


def evidenced_frameworks(text: str) -> frozenset[str]:
    """The frameworks whose training shape `text` has."""
    return frozenset(framework for framework in FRAMEWORK_EVIDENCE if shows_framework(text, framework))


@functools.cache
def framework_evidence(frameworks: frozenset[str]) -> tuple[tuple[bytes, ...], ...]:
    """`FRAMEWORK_EVIDENCE` of these frameworks, as bytes to search a file for."""
    return tuple(tuple(word.encode() for word in group) for framework in sorted(frameworks)
                 for group in FRAMEWORK_EVIDENCE.get(framework, ()))


def names_nothing(data: bytes, names: Iterable[bytes], evidence: Iterable[tuple[bytes, ...]] = ()) -> bool:
    """A file's bytes name none of `names` (framework names), have no group of `evidence` (a framework's
    training shape; a loose test: `shows_framework` decides) and hold no word a lintloop comment starts
    with (`lintloop`, `noqa`, in any case): it can hold no finding."""
    if any(name in data for name in names) or any(all(word in data for word in group) for group in evidence):
        return False
    lowered = data.lower()
    return b"lintloop" not in lowered and b"noqa" not in lowered
