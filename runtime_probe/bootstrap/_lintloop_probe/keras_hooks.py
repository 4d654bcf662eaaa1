"""Keras 3 (`keras`) and Keras 2 (`tf_keras`): installed when either is imported.
`apply_gradients` (eager steps, errors, gradients computed in a tf.function's trace); losses
(`Loss.__call__`): the outputs of those built with reduction "none" (for `tf_distribute`), and
cross-entropies without `from_logits=True` given logits (`logits_as_probabilities`, LL709); models
(`Model.__call__`): a float16 softmax/sigmoid output (`float16_output`, LL601).

Logits are recognised exactly: in eager code by their values (outside [0, 1]), in a traced function
(`fit`, `tf.function`) by the op that made them, an affine layer's (`MatMul`/`Conv*`/`Einsum`, with
or without a bias add) seen through casts and reshapes. Checks are sampled: the first
`_CHECKS_PER_OBJECT` eager calls of each loss object or model, every trace.
"""
import functools
import sys

from .errors import record_exception
from .events import emit, probe_error
from .frames import add_nonuser_dir, user_site
from .grad_norms import tape_norm_extra
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
    model_cls = getattr(keras, "Model", None)
    if model_cls is not None and callable(getattr(model_cls, "__call__", None)):
        _patch_model_call(model_cls)
        hooks.append("Model.__call__")
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
            # The norm of this step's eager tape gradients, if they were measured (tf_hooks).
            eager_step("apply_gradients", "tf" if "tensorflow" in sys.modules else "keras",
                       {"optimizer": type(self).__name__, **tape_norm_extra(S.steps + 1)})
        return result

    cls.apply_gradients = apply_gradients


def _patch_loss_call(cls):
    original = cls.__dict__["__call__"]

    @functools.wraps(original)
    def __call__(self, *args, **kwargs):
        try:
            _check_cross_entropy_input(self, args, kwargs)
        except Exception as err:
            probe_error("loss_input", err)
        result = original(self, *args, **kwargs)
        try:
            reduction = getattr(self, "reduction", "x")
            if reduction is None or reduction == "none":
                remember_loss_output(result, type(self).__name__)
        except Exception as err:
            probe_error("loss_call", err)
        return result

    cls.__call__ = __call__


# Keras cross-entropies that read their input as probabilities unless `from_logits=True`.
_CROSS_ENTROPIES = {"categorical_crossentropy", "sparse_categorical_crossentropy", "binary_crossentropy",
                    "categorical_focal_crossentropy", "binary_focal_crossentropy"}
_CHECKS_PER_OBJECT = 20
# Ops that keep their input's values (looked through), and the ops of an affine layer.
_VALUE_KEEPING_OPS = {"Cast", "Identity", "Reshape", "Squeeze", "ExpandDims", "IdentityN"}
_AFFINE_OPS = {"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Conv1D", "Conv2D", "Conv3D",
               "DepthwiseConv2dNative", "Einsum", "XlaEinsum"}
_BIAS_OPS = {"BiasAdd", "AddV2", "Add"}
_checks = {}        # id(loss object or model) -> eager checks done
_reported = set()   # (kind, name, site) already emitted


def _loss_function_name(loss):
    """`sparse_categorical_crossentropy` for a Keras loss object computing it (a class instance, or
    the wrapper `compile` builds around a string / function), with its `from_logits`."""
    fn = getattr(loss, "fn", None)
    name = getattr(fn, "__name__", None)
    kwargs = getattr(loss, "_fn_kwargs", None) or {}
    return name, bool(kwargs.get("from_logits", False))


def _check_cross_entropy_input(loss, args, kwargs):
    name, from_logits = _loss_function_name(loss)
    if name not in _CROSS_ENTROPIES or from_logits:
        return
    y_pred = kwargs.get("y_pred", args[1] if len(args) > 1 else None)
    if y_pred is None or not hasattr(y_pred, "dtype"):
        return
    if eager():
        key = id(loss)
        done = _checks.get(key, 0)
        if done >= _CHECKS_PER_OBJECT:
            return
        _checks[key] = done + 1
        low, high = float(_reduce(y_pred, "min")), float(_reduce(y_pred, "max"))
        if low >= 0.0 and high <= 1.0:
            return
        _emit_once("logits_as_probabilities", name, {
            "loss": name, "loss_class": type(loss).__name__, "mode": "eager", "min": low, "max": high,
            "check": done + 1})
        return
    chain = _affine_chain(y_pred)
    if chain:
        _emit_once("logits_as_probabilities", name, {
            "loss": name, "loss_class": type(loss).__name__, "mode": "traced", "ops": chain,
            "tensor": getattr(y_pred, "name", None)})


def _reduce(tensor, how):
    import tensorflow as tf
    value = tf.reduce_min(tensor) if how == "min" else tf.reduce_max(tensor)
    return value.numpy()


def _affine_chain(tensor):
    """The op types from `tensor` back to an affine layer's op (`["AddV2", "MatMul"]`), through
    value-keeping ops; None when it does not come out of one."""
    chain = []
    op = getattr(tensor, "op", None)
    for _ in range(8):
        if op is None:
            return None
        kind = op.type
        chain.append(kind)
        if kind in _AFFINE_OPS:
            return chain
        if kind in _BIAS_OPS:
            inputs = [_through_value_keeping(t.op) for t in op.inputs]
            affine = [i for i in inputs if i is not None and i.type in _AFFINE_OPS]
            if affine:
                return chain + [affine[0].type]
            return None
        if kind not in _VALUE_KEEPING_OPS or not op.inputs:
            return None
        op = op.inputs[0].op
    return None


def _through_value_keeping(op):
    for _ in range(8):
        if op is None or op.type not in _VALUE_KEEPING_OPS or not op.inputs:
            return op
        op = op.inputs[0].op
    return op


def _emit_once(kind, name, event, variant=None):
    """Emit `event` once per kind, name, user site (and `variant`: a later, different finding)."""
    site = user_site(3)
    key = (kind, name, site, variant)
    if key in _reported:
        return
    _reported.add(key)
    event.update({"type": kind, "file": site[0], "line": site[1]})
    emit(event)


def _patch_model_call(cls):
    original = cls.__call__
    depth = [0]

    @functools.wraps(original)
    def __call__(self, *args, **kwargs):
        depth[0] += 1
        try:
            result = original(self, *args, **kwargs)
        finally:
            depth[0] -= 1
        if depth[0] == 0:
            try:
                _check_model_output(self, result)
            except Exception as err:
                probe_error("model_output", err)
        return result

    cls.__call__ = __call__


def _output_activation(model, output):
    """"softmax"/"sigmoid" when `output` comes out of one: the op in a trace, the last layer's
    activation in eager code (a `Sequential` or functional model); else None."""
    op = getattr(output, "op", None) if not eager() else None
    if op is not None:
        kind = _through_value_keeping(op)
        kind = kind.type if kind is not None else None
        return {"Softmax": "softmax", "Sigmoid": "sigmoid"}.get(kind)
    layers = getattr(model, "layers", None) or []
    last = layers[-1] if layers else None
    if last is None:
        return None
    if type(last).__name__ == "Softmax":
        return "softmax"
    name = getattr(getattr(last, "activation", None), "__name__", None)
    return name if name in ("softmax", "sigmoid") else None


def _check_model_output(model, output):
    dtype = getattr(getattr(output, "dtype", None), "name", None)
    if dtype != "float16":
        return
    activation = _output_activation(model, output)
    if activation is None:
        return
    name = type(model).__name__
    if not eager():
        _emit_once("float16_output", name, {"model": name, "activation": activation, "dtype": dtype,
                                            "mode": "traced"})
        return
    key = id(model)
    done = _checks.get(key, 0)
    if done >= _CHECKS_PER_OBJECT:
        return
    _checks[key] = done + 1
    values = output.numpy().astype("float64")
    rows = values.reshape(-1, values.shape[-1]) if values.ndim > 1 else values.reshape(-1, 1)
    saturated = int((rows.max(axis=1) == 1.0).sum()) if activation == "softmax" else int((rows == 1.0).sum())
    zeros = int((rows == 0.0).sum())
    _emit_once("float16_output", name, {
        "model": name, "activation": activation, "dtype": dtype, "mode": "eager", "rows": int(rows.shape[0]),
        "values": int(rows.size), "exactly_one": saturated, "exactly_zero": zeros}, variant=saturated > 0)
