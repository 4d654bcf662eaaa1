"""PyTorch mixed precision: float16 autocast regions and GradScaler use.

Wraps `autocast.__enter__` (notes float16 autocast, which turns on the float16 underflow
check of `torch_autograd`), `GradScaler.scale` / `unscale_` / `step` / `update` and
`torch.nn.utils.clip_grad_norm_`.  What it records, with the user's lines:

- ``scaled_step``: an optimizer step, not through `scaler.step`, while the gradients still
  hold a scaled loss's gradients (`scaler.scale(loss)` backwarded, no `unscale_` since).
- ``scaled_clip``: `clip_grad_norm_` on gradients still scaled (no `unscale_` since the
  last `scaler.scale`): the norm it measured and clipped to includes the loss scale.

A disabled scaler (a CUDA scaler on a machine without CUDA) scales by nothing: none of
this applies to it.  Nothing here imports torch at module level.
"""
import functools
import weakref

from .events import emit, probe_error
from .frames import user_site
from .state import S, at_fork_in_child
from .torch_autograd import A

EVENTS_PER_KIND = 3


class _Scaling:
    def __init__(self):
        self.reset()

    def reset(self):
        self.pending = None     # weakref to the enabled scaler whose scaled gradients are not unscaled
        self.in_step = 0        # depth of GradScaler.step calls
        self.emitted = {}


M = _Scaling()


def install(torch):
    """Wrap autocast, GradScaler and clip_grad_norm_; returns the hooks' names."""
    at_fork_in_child(M.reset)
    hooks = []
    autocast = torch.amp.autocast_mode.autocast
    autocast.__enter__ = _wrap_autocast_enter(autocast.__enter__, torch.float16)
    hooks.append("autocast")
    scaler = getattr(getattr(torch.amp, "grad_scaler", None), "GradScaler", None)
    if scaler is not None:
        scaler.scale = _wrap_scale(scaler.scale)
        scaler.unscale_ = _wrap_unscale(scaler.unscale_)
        scaler.step = _wrap_scaler_step(scaler.step)
        hooks.append("GradScaler")
    from torch.nn.utils import clip_grad

    wrapped = _wrap_clip(clip_grad.clip_grad_norm_)
    clip_grad.clip_grad_norm_ = wrapped
    torch.nn.utils.clip_grad_norm_ = wrapped
    hooks.append("clip_grad_norm_")
    return hooks


def _once(kind):
    M.emitted[kind] = M.emitted.get(kind, 0) + 1
    return M.emitted[kind] <= EVENTS_PER_KIND


def _wrap_autocast_enter(original, float16):
    @functools.wraps(original)
    def __enter__(self):
        try:
            if getattr(self, "_enabled", True) and getattr(self, "fast_dtype", None) == float16:
                A.fp16_autocast = True
        except Exception as err:
            probe_error("torch_autocast", err)
        return original(self)

    return __enter__


def _wrap_scale(original):
    @functools.wraps(original)
    def scale(self, outputs):
        out = original(self, outputs)
        try:
            if self.is_enabled():
                M.pending = weakref.ref(self)
                if hasattr(outputs, "grad_fn") and hasattr(out, "grad_fn"):
                    A.scaled = (weakref.ref(out), weakref.ref(outputs))
        except Exception as err:
            probe_error("torch_scaler_scale", err)
        return out

    return scale


def _wrap_unscale(original):
    @functools.wraps(original)
    def unscale_(self, optimizer):
        M.pending = None
        return original(self, optimizer)

    return unscale_


def _wrap_scaler_step(original):
    @functools.wraps(original)
    def step(self, optimizer, *args, **kwargs):
        M.in_step += 1
        try:
            return original(self, optimizer, *args, **kwargs)
        finally:
            M.in_step -= 1
            M.pending = None

    return step


def _scale_of(ref):
    scaler = ref() if ref is not None else None
    try:
        return float(scaler.get_scale()) if scaler is not None else None
    except Exception:
        return None


def before_step(opt, n, grad_norm):
    """Called by torch_optimizer before each optimizer step."""
    pending = M.pending
    if M.in_step or pending is None:
        return
    M.pending = None
    if _once("scaled_step"):
        emit({"type": "scaled_step", "step": n, "optimizer": type(opt).__name__, "scale": _scale_of(pending),
              "grad_norm": grad_norm})


def _wrap_clip(original):
    @functools.wraps(original)
    def clip_grad_norm_(parameters, max_norm, *args, **kwargs):
        pending = M.pending
        total = original(parameters, max_norm, *args, **kwargs)
        try:
            if pending is not None and not M.in_step and _once("scaled_clip"):
                file, line = user_site(2)
                emit({"type": "scaled_clip", "step": S.steps + 1, "max_norm": float(max_norm),
                      "total_norm": float(total), "scale": _scale_of(pending), "file": file, "line": line})
        except Exception as err:
            probe_error("torch_clip", err)
        return total

    return clip_grad_norm_
