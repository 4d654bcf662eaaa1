"""Loss computations in either framework: loss objects, loss functions, and their prediction argument."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.base import Analysis
from lintloop.analysis.nodes import argument

_TF_LOGITS_LOSSES = {
    "tensorflow.nn.softmax_cross_entropy_with_logits",
    "tensorflow.nn.sparse_softmax_cross_entropy_with_logits",
    "tensorflow.nn.sigmoid_cross_entropy_with_logits",
}


def is_loss_function(name: str) -> bool:
    """`keras.losses.mse`, `keras.losses.MSE` (aliases) are functions; `MeanSquaredError` is a class."""
    return name[:1].islower() or name.isupper()


class Losses(Analysis):
    asks = frozenset({"flow"})

    def loss_object(self, expr: cst.BaseExpression, at: cst.CSTNode) -> tuple[cst.Call, str] | None:
        """(constructor call, class) when `expr` holds a Keras loss object or a torch `nn.*Loss` instance."""
        made = self.ctx.flow.constructed_by(expr, at)
        if made is None:
            return None
        last = made[1].rsplit(".", 1)[-1]
        if made[1].startswith("keras.losses.") and not is_loss_function(last) and last != "Reduction":
            return made
        if made[1].startswith("torch.nn.") and last.endswith("Loss"):
            return made
        return None

    def prediction(self, call: cst.Call) -> tuple[cst.BaseExpression, str] | None:
        """For a call that computes a loss: (its prediction argument, 'tf' or 'pt')."""
        name = self.ctx.names.callee(call)
        if name is not None:
            last = name.rsplit(".", 1)[-1]
            if name.startswith("keras.losses.") and is_loss_function(last):
                arg = argument(call, 1, "y_pred")
                return (arg, "tf") if arg is not None else None
            if name in _TF_LOGITS_LOSSES:
                arg = argument(call, 1, "logits")
                return (arg, "tf") if arg is not None else None
            if name.startswith("torch.nn.functional.") and ("loss" in last or "entropy" in last or last == "kl_div"):
                arg = argument(call, 0, "input")
                return (arg, "pt") if arg is not None else None
            return None
        made = self.loss_object(call.func, call)
        if made is None:
            return None
        if made[1].startswith("keras."):
            arg = argument(call, 1, "y_pred")
            return (arg, "tf") if arg is not None else None
        arg = argument(call, 0, "input")
        return (arg, "pt") if arg is not None else None
