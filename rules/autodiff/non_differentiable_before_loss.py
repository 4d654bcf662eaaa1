"""LL102 non-differentiable-before-loss: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.syntax import argument, call_name, dotted, receiver
from lintloop.rule import Example, Rule
from lintloop.screen import Needs


# Ops whose output has no gradient with respect to their input.
_NON_DIFFERENTIABLE = {
    f"{prefix}.{op}"
    for prefix in ("tensorflow", "tensorflow.math", "torch", "keras.ops")
    for op in ("argmax", "argmin", "round", "floor", "ceil", "sign", "equal", "not_equal", "greater",
               "greater_equal", "less", "less_equal", "eq", "ne", "gt", "ge", "lt", "le")
}


_NON_DIFFERENTIABLE_METHODS = {"argmax", "argmin", "round", "floor", "ceil", "sign", "long", "int", "bool",
                               "eq", "ne", "gt", "ge", "lt", "le"}


# Calls that pass their first argument's (non-)differentiability through unchanged.
_PASS_THROUGH = {"tensorflow.cast", "tensorflow.one_hot", "tensorflow.reshape", "tensorflow.squeeze",
                 "tensorflow.expand_dims", "tensorflow.identity", "torch.reshape", "torch.squeeze",
                 "torch.unsqueeze", "torch.nn.functional.one_hot", "keras.utils.to_categorical",
                 "keras.ops.cast", "keras.ops.one_hot"}


_PASS_THROUGH_METHODS = {"float", "double", "half", "to", "view", "reshape", "squeeze", "unsqueeze",
                         "type", "flatten", "contiguous"}


_INTEGER_DTYPES = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool", "long"}



class NonDifferentiableBeforeLoss(Rule):
    code = "LL102"
    name = "non-differentiable-before-loss"
    frameworks = ("tf", "pt")
    # A loss computed in a helper is differentiated by its caller, which the screen selects with it.
    needs = Needs(file=(("text:loss", "text:Loss", "text:entropy", "text:kl_div"),),
                  statement=(("call:backward", "call:gradient", "call:grad"),))
    probe = "grad/error"
    summary = ("The result of argmax/argmin/round/floor/ceil/sign, a cast to an integer type or a "
               "comparison is passed as the prediction to a loss (Keras loss object or function, "
               "`torch.nn.functional` loss, an `nn.*Loss` instance) whose result is differentiated.")
    why = ("These ops are piecewise constant: they have no gradient (TensorFlow registers none) or a zero "
           "one, so nothing upstream of them learns.")
    symptom = ("tests/fixtures/LL102_bad.py (TensorFlow): `tape.gradient` returned None for 4 of 4 variables "
               "and `apply_gradients` raised `ValueError: No gradients provided for any variable.` "
               "tests/fixtures/LL102_torch_bad.py (PyTorch): `loss.backward()` raised `RuntimeError: element "
               "0 of tensors does not require grad and does not have a grad_fn`. `torch.round` gives an "
               "all-zero gradient instead, and training silently stalls. When the loss has another, "
               "differentiable term, nothing fails: this term just trains nothing.")
    remedy = ("Pass the logits or probabilities to the loss (e.g. `CrossEntropyLoss` on logits, "
              "`SparseCategoricalCrossentropy(from_logits=True)`); use argmax only for metrics.")
    flagged = (
        Example("""
import tensorflow as tf
loss_fn = tf.keras.losses.MeanSquaredError()
with tf.GradientTape() as tape:
    pred = tf.cast(tf.argmax(model(x), axis=1), tf.float32)
    loss = loss_fn(y, pred)
grads = tape.gradient(loss, model.trainable_variables)
"""),
        Example("""
import torch.nn.functional as F
out = model(x)
loss = F.mse_loss(out.argmax(dim=1).float(), y)
loss.backward()
"""),
        Example("""
import torch
from torch import nn
criterion = nn.L1Loss()
def train_step(x, y):
    pred = torch.round(model(x))
    loss = criterion(pred, y)
    loss.backward()
"""),
    )
    not_flagged = (
        Example("""
import torch.nn.functional as F
out = model(x)
loss = F.cross_entropy(out, y)
loss.backward()
acc = (out.argmax(dim=1) == y).float().mean()
"""),
        Example("""
import torch.nn.functional as F
out = model(x)
loss = F.cross_entropy(out, onehot.argmax(dim=1))
loss.backward()
"""),
        Example("""
import tensorflow as tf
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
logits = model(x)
pred = tf.argmax(logits, axis=1)
loss = loss_fn(tf.argmax(y, axis=1), logits)
print(loss_fn(y, tf.cast(pred, tf.float32)))
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        found = self.ctx.losses.prediction(node)
        if found is None:
            return
        prediction, framework = found
        op = self._non_differentiable(prediction, node, depth=0)
        if op is None or not self.ctx.training.is_differentiated(node):
            return
        consequence = ("`tape.gradient` returns None when it is the only term" if framework == "tf" else
                       "`backward()` raises 'element 0 of tensors does not require grad' when it is the "
                       "only term; round/floor give all-zero gradients")
        self.report(prediction, f"the prediction passed to this loss comes from `{op}`, which has no "
                                f"gradient, so this loss trains nothing ({consequence})")

    def _non_differentiable(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int) -> str | None:
        if depth > 6:
            return None
        if isinstance(expr, cst.Comparison):
            return "a comparison"
        if isinstance(expr, cst.Name):
            binding = self.ctx.flow.last_binding(expr.value, at)
            if binding is None or binding.value is None or binding.augmented:
                return None
            return self._non_differentiable(binding.value, binding.node, depth + 1)
        if not isinstance(expr, cst.Call):
            return None
        name = self.ctx.names.callee(expr)
        if name in _NON_DIFFERENTIABLE:
            return name.replace("tensorflow.", "tf.")
        if name in ("tensorflow.cast", "keras.ops.cast") and self._integer_dtype(argument(expr, 1, "dtype")):
            return "a cast to an integer type"
        if name in _PASS_THROUGH:
            inner = argument(expr, 0, "x")
            return self._non_differentiable(inner, at, depth + 1) if inner is not None else None
        method = call_name(expr)
        owner = receiver(expr)
        if name is None and owner is not None:
            if method in _NON_DIFFERENTIABLE_METHODS:
                return f".{method}()"
            if method in ("to", "type") and self._integer_dtype(argument(expr, 0, "dtype")):
                return "a cast to an integer type"
            if method in _PASS_THROUGH_METHODS:
                return self._non_differentiable(owner, at, depth + 1)
        return None

    def _integer_dtype(self, expr: cst.BaseExpression | None) -> bool:
        if expr is None:
            return False
        text = dotted(expr) or ""
        if isinstance(expr, cst.SimpleString):
            text = str(expr.evaluated_value)
        return text.rsplit(".", 1)[-1] in _INTEGER_DTYPES
