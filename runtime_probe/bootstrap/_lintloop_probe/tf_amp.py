"""TensorFlow / Keras 3 mixed precision (LL602): does a custom loop under a float16 policy scale
its loss, and what does it cost when it does not?

- Underflow, measured exactly: on sampled eager tape entries (the first 3, then every 20th) while
  the global Keras policy computes in float16, the probe makes the tape persistent for one
  extra, reference `gradient` call seeded with the loss scale (`output_gradients` = 32,768: what
  loss scaling does), then restores the program's non-persistent tape for its own call.  The
  `amp_gradients` event counts gradient entries that are exactly zero in the program's result
  but not in the reference (divided back in float32): the underflowed ones.  Targets that went
  through `optimizer.scale_loss(...)` are recorded as scaled, with no reference call; a call
  inside the tape's own `with` block (the reference would be recorded) is not checked.
- A Keras 3 `LossScaleOptimizer` given gradients of a loss that never went through
  `scale_loss`: its `apply` divides them by the loss scale anyway.  The gradients of the latest
  `tape.gradient` call are remembered by identity with whether their target was scaled; each
  `LossScaleOptimizer.apply` of those gradients is counted per user line (`lso_apply`
  summaries at the stop), with the scale it divided by.  Gradients transformed in between
  (clipped) are not recognised and not counted.
"""
import functools
import sys

from .events import emit, probe_error
from .frames import user_site
from .imports import watch
from .state import S, at_fork_in_child
from .steps import before_stop
from .tf_function import eager
from .tf_tapes import FORCED

LOSS_SCALE = 32768.0   # Keras 3's initial dynamic loss scale
_CHECK_FIRST = 3
_CHECK_EVERY = 20
_KEEP_SCALED = 8


class _Amp:
    def __init__(self):
        self.reset()

    def reset(self):
        self.entries = 0
        self.scaled = []          # (id, tensor) of recent `scale_loss` results
        self.latest = {}          # id(gradient) -> (gradient, target was scaled) of the latest call
        self.applies = {}         # (file, line) -> lso_apply summary


_A = _Amp()


def install(tf):
    from tensorflow.python.eager import backprop

    cls = backprop.GradientTape
    original_enter = cls.__enter__
    wrapped_gradient = cls.gradient                          # the probe's other hooks, then TF's
    raw_gradient = getattr(wrapped_gradient, "__wrapped__", wrapped_gradient)

    @functools.wraps(original_enter)
    def __enter__(self):
        try:
            _A.entries += 1
            n = _A.entries
            if (n <= _CHECK_FIRST or n % _CHECK_EVERY == 0) and not self._persistent and eager() \
                    and _float16_policy() is not None:
                self._persistent = True
                setattr(self, FORCED, True)
        except Exception as err:
            probe_error("tf_amp_enter", err)
        return original_enter(self)

    @functools.wraps(wrapped_gradient)
    def gradient(self, target, sources, output_gradients=None, *args, **kwargs):
        reference = None
        forced = getattr(self, FORCED, False)
        scaled = any(i == id(target) for i, _ in _A.scaled)
        if forced:
            try:
                setattr(self, FORCED, False)
                if not scaled and output_gradients is None and not self._recording:
                    seed = tf.cast(tf.fill(tf.shape(target), LOSS_SCALE), target.dtype)
                    reference = raw_gradient(self, target, sources, seed, *args, **kwargs)
            except Exception as err:
                probe_error("tf_amp_reference", err)
            finally:
                self._persistent = False
        result = wrapped_gradient(self, target, sources, output_gradients, *args, **kwargs)
        try:
            flat = tf.nest.flatten(result)
            _A.latest = {id(g): (g, scaled) for g in flat if g is not None}
            if forced:
                _report_gradients(tf, flat, reference, scaled)
        except Exception as err:
            probe_error("tf_amp_gradient", err)
        return result

    cls.__enter__ = __enter__
    cls.gradient = gradient
    watch({"keras.src.optimizers.loss_scale_optimizer": "tf_amp:install_keras_lso",
           "keras.src.optimizers.base_optimizer": "tf_amp:install_keras_base"})
    before_stop.append(_summaries)
    at_fork_in_child(_A.reset)


def _float16_policy():
    """The global Keras 3 policy's name when it computes in float16, else None."""
    keras = sys.modules.get("keras")
    mixed = getattr(keras, "mixed_precision", None) if keras is not None else None
    if mixed is None:
        return None
    policy = mixed.global_policy()
    return policy.name if getattr(policy, "compute_dtype", None) == "float16" else None


def _report_gradients(tf, flat, reference, scaled):
    zero = underflowed = total = 0
    ref_flat = tf.nest.flatten(reference) if reference is not None else [None] * len(flat)
    for grad, ref in zip(flat, ref_flat):
        if grad is None or not hasattr(grad, "dtype") or isinstance(grad, tf.IndexedSlices):
            continue
        is_zero = tf.equal(grad, tf.zeros_like(grad))
        zero += int(tf.math.count_nonzero(is_zero))
        total += int(tf.size(grad))
        if ref is not None and not isinstance(ref, tf.IndexedSlices):
            underflowed += int(tf.math.count_nonzero(tf.logical_and(is_zero, tf.not_equal(ref, tf.zeros_like(ref)))))
    file, line = user_site(3)
    emit({"type": "amp_gradients", "policy": _float16_policy(), "scaled": scaled,
          "reference": reference is not None, "zero": zero, "underflowed": underflowed, "total": total,
          "loss_scale": LOSS_SCALE, "step": max(S.steps, 1), "file": file, "line": line})


def _remember_scaled(result):
    _A.scaled = (_A.scaled + [(id(result), result)])[-_KEEP_SCALED:]


def install_keras_base(module):
    cls = module.BaseOptimizer
    original = cls.__dict__["scale_loss"]

    @functools.wraps(original)
    def scale_loss(self, loss):
        result = original(self, loss)
        if getattr(self, "loss_scale_factor", None) is not None:
            _remember_scaled(result)
        return result

    cls.scale_loss = scale_loss


def install_keras_lso(module):
    cls = module.LossScaleOptimizer
    original_scale = cls.__dict__["scale_loss"]
    original_apply = cls.__dict__["apply"]

    @functools.wraps(original_scale)
    def scale_loss(self, loss):
        result = original_scale(self, loss)
        _remember_scaled(result)
        return result

    @functools.wraps(original_apply)
    def apply(self, grads, trainable_variables=None):
        try:
            _record_apply(self, grads)
        except Exception as err:
            probe_error("tf_amp_apply", err)
        return original_apply(self, grads, trainable_variables)

    cls.scale_loss = scale_loss
    cls.apply = apply


def _record_apply(optimizer, grads):
    known = [_A.latest[id(g)][1] for g in list(grads) if id(g) in _A.latest and _A.latest[id(g)][0] is g]
    if not known:
        return
    site = user_site(3)
    record = _A.applies.get(site)
    if record is None:
        record = _A.applies[site] = {"applies": 0, "unscaled": 0, "first_step": None, "scale": None,
                                     "eager": eager()}
    record["applies"] += 1
    if not any(known):
        record["unscaled"] += 1
        if record["first_step"] is None:
            record["first_step"] = max(S.steps, 1)   # the step that the gradient call counted
    if record["eager"]:
        scale = getattr(optimizer, "dynamic_scale", None)   # built by the first apply
        record["scale"] = float(scale.numpy()) if scale is not None else float(optimizer.initial_scale)


def _summaries():
    for (file, line), record in list(_A.applies.items()):
        emit({"type": "lso_apply", "file": file, "line": line, **record}, site=False)
