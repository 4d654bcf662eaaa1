"""Keras 3 (`keras`) and Keras 2 (`tf_keras`): installed when either is imported.
`apply_gradients` (eager steps, errors, gradients computed in a tf.function's trace) and
the outputs of losses built with reduction "none" (for `tf_distribute`).
"""
import functools
import sys

from .errors import record_exception
from .events import probe_error
from .frames import add_nonuser_dir
from .imports import framework_event
from .state import S
from .steps import eager_step
from .tf_distribute import remember_loss_output
from .tf_function import eager, mark_training


def install(keras):
    add_nonuser_dir(keras)
    hooks = []
    optimizers = getattr(keras, "optimizers", None)
    patched = set()
    legacy = getattr(optimizers, "legacy", None)
    for label, base in (("", getattr(optimizers, "Optimizer", None)),
                        ("legacy.", getattr(legacy, "Optimizer", None))):
        if base is None:
            continue
        for cls in base.__mro__:
            if "apply_gradients" in cls.__dict__ and cls not in patched:
                _patch_apply_gradients(cls)
                patched.add(cls)
                hooks.append(f"{label}{cls.__name__}.apply_gradients")
                break
    loss_cls = getattr(getattr(keras, "losses", None), "Loss", None)
    if loss_cls is not None and "__call__" in loss_cls.__dict__:
        _patch_loss_call(loss_cls)
        hooks.append("Loss.__call__")
    framework_event(keras.__name__, keras, hooks)


def _patch_apply_gradients(cls):
    original = cls.__dict__["apply_gradients"]

    @functools.wraps(original)
    def apply_gradients(self, *args, **kwargs):
        is_eager = eager()
        if not is_eager:
            mark_training()
        S.fn_depth += 1
        try:
            result = original(self, *args, **kwargs)
        except Exception as exc:
            record_exception(exc, "apply_gradients", from_stack=True)
            raise
        finally:
            S.fn_depth -= 1
        if is_eager and S.fn_depth == 0:
            eager_step("apply_gradients", "tf" if "tensorflow" in sys.modules else "keras",
                       {"optimizer": type(self).__name__})
        return result

    cls.apply_gradients = apply_gradients


def _patch_loss_call(cls):
    original = cls.__dict__["__call__"]

    @functools.wraps(original)
    def __call__(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        try:
            reduction = getattr(self, "reduction", "x")
            if reduction is None or reduction == "none":
                remember_loss_output(result, type(self).__name__)
        except Exception as err:
            probe_error("loss_call", err)
        return result

    cls.__call__ = __call__
