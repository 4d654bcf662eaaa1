"""LL102 non-differentiable-before-loss: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.nodes import argument, call_name, dotted, keyword_arg, positional_args, receiver
from lintloop.rule import Example, Rule
from lintloop.screen import Needs


# Ops whose output has no gradient with respect to their input.
_NON_DIFFERENTIABLE = {
    f"{prefix}.{op}"
    for prefix in ("tensorflow", "tensorflow.math", "torch", "keras.ops")
    for op in ("argmax", "argmin", "round", "floor", "ceil", "sign", "trunc", "equal", "not_equal", "greater",
               "greater_equal", "less", "less_equal", "eq", "ne", "gt", "ge", "lt", "le")
}


_NON_DIFFERENTIABLE_METHODS = {"argmax", "argmin", "round", "floor", "ceil", "sign", "trunc", "long", "int", "short",
                               "byte", "char", "bool", "eq", "ne", "gt", "ge", "lt", "le"}


# PyTorch ops that are differentiable but piecewise constant: their gradient is zero everywhere (measured,
# torch 2.13: `backward()` runs, every gradient upstream is 0). The rest give a tensor that does not require grad.
_ZERO_GRADIENT_OPS = {"round", "floor", "ceil", "sign", "trunc"}


# Calls that pass their first argument's (non-)differentiability through unchanged.
_PASS_THROUGH = {"tensorflow.cast", "tensorflow.one_hot", "tensorflow.reshape", "tensorflow.squeeze",
                 "tensorflow.expand_dims", "tensorflow.identity", "torch.reshape", "torch.squeeze",
                 "torch.unsqueeze", "torch.nn.functional.one_hot", "keras.utils.to_categorical",
                 "keras.ops.cast", "keras.ops.one_hot"}


_PASS_THROUGH_METHODS = {"float", "double", "half", "to", "view", "reshape", "squeeze", "unsqueeze",
                         "type", "flatten", "contiguous"}


_INTEGER_DTYPES = {"int", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool", "long",
                   "short", "LongTensor", "IntTensor", "ShortTensor", "ByteTensor", "CharTensor", "BoolTensor"}


# torch reductions that return (values, indices) when given a dimension, and those that always do.
_INDEX_PAIRS_WITH_DIM = {"max", "min", "median", "mode", "nanmedian"}
_INDEX_PAIRS = {"sort", "topk", "kthvalue"}


class NonDifferentiableBeforeLoss(Rule):
    code = "LL102"
    name = "non-differentiable-before-loss"
    description = "a non-differentiable op (argmax, round, int cast) before the loss"
    frameworks = ("tf", "pt")
    # A loss computed in a helper is differentiated by its caller, which the screen selects with it.
    needs = Needs(file=(("text:loss", "text:Loss", "text:entropy", "text:kl_div"),),
                  statement=(("call:backward", "call:gradient", "call:grad"),))
    probe = "grad/error"
    summary = ("The result of argmax/argmin/round/floor/ceil/sign/trunc, a cast to an integer type "
               "(`.long()`, `.int()`, `.to(torch.long)`, `.type(torch.int64)`, `tf.cast(x, tf.int32)`), a "
               "comparison (`(out > 0.5).float()`), the indices of `torch.max(out, 1)` / `.topk()` / `.sort()`, "
               "or `torch.where` between two constants is passed as the prediction to a loss (Keras loss object or "
               "function, `torch.nn.functional` loss, an `nn.*Loss` instance) whose result is differentiated.")
    why = ("These ops are piecewise constant: they have no gradient (TensorFlow registers none) or a zero "
           "one, so nothing upstream of them learns.")
    symptom = ("LL102_bad.py (TensorFlow): `tape.gradient` returned None for 4 of 4 variables "
               "and `apply_gradients` raised `ValueError: No gradients provided for any variable.` "
               "LL102_torch_bad.py (PyTorch): `loss.backward()` raised `RuntimeError: element "
               "0 of tensors does not require grad and does not have a grad_fn` — measured the same for argmax, "
               "argmin, the indices of `torch.max(out, 1)`, comparisons, `.long()` / `.int()` / `.to(torch.long)` / "
               "`.type(torch.int64)` and `torch.where` between constants (torch 2.13). round, floor, ceil, sign and "
               "trunc instead give an all-zero gradient: `backward()` runs, the weight gradients are exactly 0, and "
               "training silently stalls. When the loss has another, differentiable term, nothing fails: this "
               "term just trains nothing.")
    remedy = ("Pass the logits or probabilities to the loss (e.g. `CrossEntropyLoss` on logits, "
              "`SparseCategoricalCrossentropy(from_logits=True)`); use argmax only for metrics. If the forward "
              "pass needs the hard value, use a straight-through estimator (`hard - soft.detach() + soft`).")
    flagged = (
        Example("""
import tensorflow as tf
loss_fn = tf.keras.losses.MeanSquaredError()
with tf.GradientTape() as tape:
    pred = tf.cast(tf.argmax(model(x), axis=1), tf.float32)
    loss = loss_fn(y, pred)
grads = tape.gradient(loss, model.trainable_variables)
""", expect="""
5:23-5:27 this loss's prediction comes from `tf.argmax` and has no gradient
    help: pass the logits or probabilities to the loss instead
    note: this loss trains nothing: `tape.gradient` returns None when it is the only term
"""),
        Example("""
import torch.nn.functional as F
out = model(x)
loss = F.mse_loss(out.argmax(dim=1).float(), y)
loss.backward()
""", expect="""
3:19-3:44 this loss's prediction comes from `.argmax()` and has no gradient
    help: pass the logits or probabilities to the loss instead
    note: its result does not require grad: `backward()` raises `RuntimeError: element 0 of tensors does
        not require grad and does not have a grad_fn` when this is the only term, and this term trains
        nothing otherwise
"""),
        Example("""
import torch
from torch import nn
criterion = nn.L1Loss()
def train_step(x, y):
    pred = torch.round(model(x))
    loss = criterion(pred, y)
    loss.backward()
""", expect="""
6:22-6:26 this loss's prediction comes from `torch.round` and has a zero gradient everywhere
    help: pass the continuous output instead, or use a straight-through estimator (`hard - soft.detach()
        + soft`)
    note: `backward()` runs, but nothing upstream of it gets a gradient from this loss, so training
        silently stalls
"""),
        Example("""
import torch
from torch import nn
class Trainer:
    def __init__(self, model):
        self.model = model
        self.criterion = nn.MSELoss()
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    def train_step(self, x, y):
        self.optimizer.zero_grad()
        outputs = self.model(x)
        _, predicted = torch.max(outputs, 1)
        loss = self.criterion(predicted.float(), y.float())
        loss.backward()
        self.optimizer.step()
""", expect="""
12:31-12:48 this loss's prediction comes from the indices of `torch.max(outputs, 1)` and has no gradient
    help: pass the logits or probabilities to the loss instead
    note: its result does not require grad: `backward()` raises `RuntimeError: element 0 of tensors does
        not require grad and does not have a grad_fn` when this is the only term, and this term trains
        nothing otherwise
"""),
        Example("""
import torch
for x, y in loader:
    logits = model(x).squeeze(-1)
    loss = torch.nn.functional.binary_cross_entropy((torch.sigmoid(logits) > 0.5).float(), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
""", expect="""
4:53-4:90 this loss's prediction comes from a comparison and has no gradient
    help: pass the logits or probabilities to the loss instead
    note: its result does not require grad: `backward()` raises `RuntimeError: element 0 of tensors does
        not require grad and does not have a grad_fn` when this is the only term, and this term trains
        nothing otherwise
"""),
        Example("""
import torch
criterion = torch.nn.SmoothL1Loss()
for x, y in loader:
    out = model(x)
    loss = criterion(out.to(torch.long).float(), y) + criterion(out.floor(), y)
    loss.backward()
""", expect="""
5:22-5:48 this loss's prediction comes from a cast to an integer type and has no gradient
    help: pass the logits or probabilities to the loss instead
    note: its result does not require grad: `backward()` raises `RuntimeError: element 0 of tensors does
        not require grad and does not have a grad_fn` when this is the only term, and this term trains
        nothing otherwise
5:65-5:76 this loss's prediction comes from `.floor()` and has a zero gradient everywhere
    help: pass the continuous output instead, or use a straight-through estimator (`hard - soft.detach()
        + soft`)
    note: `backward()` runs, but nothing upstream of it gets a gradient from this loss, so training
        silently stalls
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
        Example("""
import torch
criterion = torch.nn.CrossEntropyLoss()
for images, labels in train_loader:
    outputs = model(images)
    loss = criterion(outputs, labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    _, predicted = torch.max(outputs.data, 1)
    correct += (predicted == labels).sum().item()
"""),
        Example("""
import torch
import torch.nn.functional as F
for x, y in loader:
    soft = torch.sigmoid(model(x))
    hard = (soft > 0.5).float()
    pred = hard - soft.detach() + soft  # straight-through estimator
    loss = F.mse_loss(pred, y) + F.mse_loss(torch.where(soft > 0.5, soft, 0.1 * soft), y)
    loss.backward()
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
        headline = f"this loss's prediction comes from {op}"
        if framework == "tf":
            self.report(prediction, f"{headline} and has no gradient",
                        help="pass the logits or probabilities to the loss instead",
                        note="this loss trains nothing: `tape.gradient` returns None when it is the only term")
        elif self._zero_gradient(op):
            self.report(prediction, f"{headline} and has a zero gradient everywhere",
                        help="pass the continuous output instead, or use a straight-through estimator "
                             "(`hard - soft.detach() + soft`)",
                        note="`backward()` runs, but nothing upstream of it gets a gradient from this loss, so "
                             "training silently stalls")
        else:
            self.report(prediction, f"{headline} and has no gradient",
                        help="pass the logits or probabilities to the loss instead",
                        note="its result does not require grad: `backward()` raises `RuntimeError: element 0 of "
                             "tensors does not require grad and does not have a grad_fn` when this is the only "
                             "term, and this term trains nothing otherwise")

    @staticmethod
    def _zero_gradient(op: str) -> bool:
        return op.strip("`.()").rsplit(".", 1)[-1] in _ZERO_GRADIENT_OPS

    def _non_differentiable(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int) -> str | None:
        if depth > 6:
            return None
        if isinstance(expr, cst.Comparison):
            return "a comparison"
        if isinstance(expr, cst.Name):
            binding = self.ctx.flow.last_binding(expr.value, at)
            if binding is None or binding.augmented:
                return None
            if binding.value is None:  # `_, pred = torch.max(out, 1)`
                return self._unpacked_indices(binding.node, expr.value)
            return self._non_differentiable(binding.value, binding.node, depth + 1)
        if isinstance(expr, cst.Subscript) and _literal_index(expr) == 1 and self._index_pair(expr.value):
            return f"the indices of `{self.ctx.snippet(expr.value, 25)}`"
        if isinstance(expr, cst.Attribute) and expr.attr.value == "indices" and self._index_pair(expr.value):
            return f"the indices of `{self.ctx.snippet(expr.value, 25)}`"
        if not isinstance(expr, cst.Call):
            return None
        name = self.ctx.names.callee(expr)
        if name in _NON_DIFFERENTIABLE:
            return f"`{name.replace('tensorflow.', 'tf.')}`"
        if name in ("tensorflow.cast", "keras.ops.cast") and self._integer_dtype(argument(expr, 1, "dtype")):
            return "a cast to an integer type"
        if name == "torch.where" and all(_is_number(argument(expr, i, n)) for i, n in ((1, "input"), (2, "other"))):
            return "`torch.where` between two constants"
        if name in _PASS_THROUGH:
            inner = argument(expr, 0, "x")
            return self._non_differentiable(inner, at, depth + 1) if inner is not None else None
        method = call_name(expr)
        owner = receiver(expr)
        if name is None and owner is not None:
            if method in _NON_DIFFERENTIABLE_METHODS:
                return f"`.{method}()`"
            if method in ("to", "type") and self._integer_dtype(argument(expr, 0, "dtype")):
                return "a cast to an integer type"
            if method in _PASS_THROUGH_METHODS:
                return self._non_differentiable(owner, at, depth + 1)
        return None

    def _index_pair(self, expr: cst.BaseExpression) -> bool:
        """`torch.max(out, 1)`, `out.max(dim=1)`, `out.topk(k)`: a call that returns (values, indices)."""
        if not isinstance(expr, cst.Call):
            return False
        name = self.ctx.names.callee(expr)
        if name is not None:
            op = name[len("torch."):] if name.startswith("torch.") else None
            given = len(positional_args(expr)) >= 2
        else:
            op = call_name(expr) if receiver(expr) is not None else None
            given = len(positional_args(expr)) >= 1
        if op in _INDEX_PAIRS:
            return True
        return op in _INDEX_PAIRS_WITH_DIM and (given or keyword_arg(expr, "dim") is not None)

    def _unpacked_indices(self, node: cst.CSTNode, name: str) -> str | None:
        """For `values, indices = torch.max(out, 1)`: the op, when `name` is the second target."""
        if not isinstance(node, cst.Assign) or not self._index_pair(node.value):
            return None
        for target in node.targets:
            elements = target.target.elements if isinstance(target.target, (cst.Tuple, cst.List)) else ()
            if len(elements) == 2 and isinstance(elements[1].value, cst.Name) and elements[1].value.value == name:
                return f"the indices of `{self.ctx.snippet(node.value, 25)}`"
        return None

    def _integer_dtype(self, expr: cst.BaseExpression | None) -> bool:
        if expr is None:
            return False
        text = dotted(expr) or ""
        if isinstance(expr, cst.SimpleString):
            text = str(expr.evaluated_value)
        return text.rsplit(".", 1)[-1] in _INTEGER_DTYPES


def _literal_index(expr: cst.Subscript) -> int | None:
    if len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
        value = expr.slice[0].slice.value
        if isinstance(value, cst.Integer):
            return int(value.value)
    return None


def _is_number(expr: cst.BaseExpression | None) -> bool:
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        expr = expr.expression
    return isinstance(expr, (cst.Integer, cst.Float))
