"""PyTorch: installed when `torch` is imported.  Optimizer step hooks (`torch_optimizer`),
and the errors of `backward()` and of `torch.multiprocessing.spawn` workers, recorded where
they happen.
"""
import functools
import sys
import traceback

from . import torch_amp, torch_autograd
from . import memory, torch_data, torch_losses, torch_modules
from .errors import record_exception
from .frames import add_nonuser_dir
from .imports import framework_event
from .torch_optimizer import register


def install(torch):
    add_nonuser_dir(torch)
    from torch.optim import optimizer as optim_mod

    hooks = register(optim_mod)

    torch.Tensor.backward = _record_backward_errors(torch.Tensor.backward)
    hooks.append("Tensor.backward")
    torch.autograd.backward = _record_backward_errors(torch.autograd.backward)
    hooks.append("autograd.backward")
    hooks += torch_autograd.install(torch)
    hooks += torch_amp.install(torch)
    hooks += torch_modules.install(torch) + torch_data.install(torch) + torch_losses.install(torch)
    hooks += memory.torch_device_event(torch)

    spawn_mod = sys.modules.get("torch.multiprocessing.spawn")
    if spawn_mod is not None and hasattr(spawn_mod, "_wrap"):
        spawn_mod._wrap = _record_worker_errors(spawn_mod._wrap)
        hooks.append("multiprocessing.spawn")
    framework_event("torch", torch, hooks)


def _record_backward_errors(original):
    """`Tensor.backward` / `autograd.backward`, recording the RuntimeError it raises."""
    @functools.wraps(original)
    def backward(*args, **kwargs):
        try:
            return original(*args, **kwargs)
        except RuntimeError as exc:
            record_exception(exc, "backward", from_stack=True)
            raise

    return backward


def _record_worker_errors(original_wrap):
    """torch's `_wrap` catches the worker's exception and formats it with
    traceback.format_exc(): record it there (no extra frame in the worker's traceback,
    which the parent prints)."""
    wrap_code = original_wrap.__code__

    @functools.wraps(original_wrap)
    def _wrap(fn, i, args, error_file):
        original_format_exc = traceback.format_exc

        def format_exc(*a, **k):
            try:
                if sys._getframe(1).f_code is wrap_code:
                    exc = sys.exc_info()[1]
                    if exc is not None:
                        record_exception(exc, "worker", extra={"rank": i})
            except Exception:
                pass
            return original_format_exc(*a, **k)

        traceback.format_exc = format_exc
        try:
            return original_wrap(fn, i, args, error_file)
        finally:
            traceback.format_exc = original_format_exc

    return _wrap
