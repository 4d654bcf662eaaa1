"""Gradient norms at the memory samples, for the report's chart of the global gradient norm per
sampled step: which steps get a memory sample, and the norm of the eager `tape.gradient` results
of the step about to be counted (kept until that step's `step` event is written: with
`apply_gradients`, the step is counted there, after the tape).

Computed only at the memory samples (every `sample_every`-th step: about 100 per run), like the
memory figure: a norm costs about as much as a sample (torch: one fused norm kernel, 12-35 us for a
small model; TensorFlow on the host: one numpy dot per tensor, ~30 us).
"""
import math

from .events import probe_error
from .state import S, at_fork_in_child


def memory_sampled(n):
    """Does step `n` get a `step` event (a memory sample)?  The condition `steps.count_step` applies."""
    return n == 1 or n % S.sample_every == 0 or bool(S.cap and n >= S.cap)


class _Pending:
    """The sum of squared gradient norms of the tape gradients computed for step `step`."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.step = None
        self.square_sum = 0.0
        self.finite = True


_TAPE = _Pending()
at_fork_in_child(_TAPE.reset)


def add_tape_gradients(tf, gradients, step):
    """Add the squared global norm of one `tape.gradient` result (flat, None for unconnected
    sources) to step `step`'s; several tapes of one step (a GAN's) make one global norm."""
    try:
        floating = [g for g in gradients if g is not None and g.dtype.is_floating]
        if not floating:
            return
        # Host tensors are read in place by numpy (about 30 us for a small model, where TF's eager
        # ops took 0.4-0.5 ms: several per tensor); device tensors are reduced on the device.
        on_device = [g for g in floating if "CPU" not in g.device]
        square_sum = sum(_host_square_sum(tf, g) for g in floating if "CPU" in g.device)
        if on_device:
            as_float32 = [g if g.dtype == tf.float32 else tf.cast(g, tf.float32) for g in on_device]
            square_sum += float(tf.linalg.global_norm(as_float32)) ** 2
    except Exception as err:  # the program goes on; its step just has no norm
        probe_error("tape_gradient_norm", err)
        return
    if _TAPE.step != step:
        _TAPE.reset()
        _TAPE.step = step
    if math.isfinite(square_sum):
        _TAPE.square_sum += square_sum
    else:
        _TAPE.finite = False


def _host_square_sum(tf, gradient):
    import numpy as np  # TensorFlow's own dependency, loaded with it

    values = gradient.values if isinstance(gradient, tf.IndexedSlices) else gradient
    array = values.numpy().ravel()
    if array.dtype != np.float32:  # summed in float32, as on the device: float16 squares overflow
        array = array.astype(np.float32)
    return float(np.dot(array, array))


def tape_norm_extra(step):
    """`{"grad_norm": ...}` for the `step` event of step `step` (None if not finite), or {} when no
    tape gradients were measured for it."""
    if _TAPE.step != step:
        return {}
    return {"grad_norm": math.sqrt(_TAPE.square_sum) if _TAPE.finite else None}
