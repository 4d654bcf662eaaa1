"""PyTorch contexts: code under `torch.no_grad()` / `torch.inference_mode()`, autocast regions, optimizer steps."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from lintloop.analysis.base import Analysis, computed
from lintloop.analysis.with_blocks import WithBlocks
from lintloop.analysis.nodes import argument, call_name, dotted, positional_args, string_value

# Context managers (and decorators) under which nothing computed holds an autograd graph.
NO_GRAD_CALLS = {"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad",
                 "torch.autograd.grad_mode.no_grad", "torch.autograd.grad_mode.inference_mode"}

# Autocast constructors, by the device type they fix (None: the first argument, `device_type`, names it).
AUTOCAST_DEVICES: dict[str, str | None] = {
    "torch.autocast": None,
    "torch.amp.autocast": None,
    "torch.amp.autocast_mode.autocast": None,
    "torch.cuda.amp.autocast": "cuda",
    "torch.cuda.amp.autocast_mode.autocast": "cuda",
    "torch.cpu.amp.autocast": "cpu",
    "torch.cpu.amp.autocast_mode.autocast": "cpu",
}
# The deprecated spellings (torch 2.4+: FutureWarning at every call) and the device they stand for.
DEPRECATED_AMP = {
    "torch.cuda.amp.autocast": ("autocast", "cuda"),
    "torch.cuda.amp.autocast_mode.autocast": ("autocast", "cuda"),
    "torch.cpu.amp.autocast": ("autocast", "cpu"),
    "torch.cpu.amp.autocast_mode.autocast": ("autocast", "cpu"),
    "torch.cuda.amp.GradScaler": ("GradScaler", "cuda"),
    "torch.cuda.amp.grad_scaler.GradScaler": ("GradScaler", "cuda"),
    "torch.cpu.amp.GradScaler": ("GradScaler", "cpu"),
    "torch.cpu.amp.grad_scaler.GradScaler": ("GradScaler", "cpu"),
}
# Their replacements: a file that uses one of these beside a deprecated spelling keeps the old one as a fallback.
NEW_AMP = {"torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast", "torch.amp.GradScaler",
           "torch.amp.grad_scaler.GradScaler", "torch.GradScaler"}
# What autocast runs in when `dtype` is not given (torch.get_autocast_dtype, measured on torch 2.13).
_DEFAULT_DTYPE = {"cuda": "float16", "cpu": "bfloat16"}
# `batch_of_one`: how far names and moves are followed; what keeps a tensor's batch dimension.
_BATCH_DEPTH = 8
_MOVES = {"to", "float", "double", "half", "cuda", "cpu", "long", "int", "contiguous", "type"}
_NEW_AXES = {"np.newaxis", "numpy.newaxis"}
_FROM_DATA = {"torch.tensor", "torch.as_tensor", "torch.Tensor", "torch.FloatTensor", "torch.LongTensor",
              "torch.from_numpy", "numpy.array", "numpy.asarray"}
_SIZED_CONSTRUCTORS = {"torch.zeros", "torch.ones", "torch.randn", "torch.rand", "torch.empty", "torch.full",
                       "numpy.zeros", "numpy.ones", "numpy.empty", "numpy.full"}
# PyTorch 0.3's autograd wrapper (a no-op since 0.4): its `volatile=True` turned recording off then.
_VARIABLE = {"torch.autograd.Variable", "torch.autograd.variable.Variable"}
_DTYPES = {"torch.float16": "float16", "torch.half": "float16", "torch.bfloat16": "bfloat16",
           "torch.float32": "float32", "torch.float": "float32"}


@dataclass(frozen=True)
class Autocast:
    """One autocast call and the code it covers."""

    call: cst.Call
    qualname: str
    device: str | None  # "cuda", "cpu", ... when known
    dtype: str | None  # "float16", "bfloat16", "float32" when known (given, or the device's default)
    enabled: bool | None  # False only when literally disabled; None when not a literal
    region: cst.With | cst.FunctionDef  # the `with` statement whose body it covers, or the function it decorates
    anchor: cst.CSTNode  # where to report it: the call, or the name a `with` uses for it

    @property
    def float16(self) -> bool:
        return self.dtype == "float16" and self.enabled is not False


class PyTorch(Analysis):
    asks = frozenset({"flow"})

    @computed
    def no_grad(self) -> WithBlocks:
        """`with torch.no_grad():` / `torch.inference_mode()` blocks: nothing computed there holds a graph."""
        return WithBlocks(self.ctx, "no_grad", lambda call: self.ctx.names.callee(call) in NO_GRAD_CALLS)

    @computed
    def requires_grad_set(self) -> dict[str, set[bool]]:
        """What the file sets `requires_grad` to, by the object's dotted name: `x.requires_grad = True`,
        `x.requires_grad_()`, `model.requires_grad_(False)`."""
        found: dict[str, set[bool]] = {}
        for node in self.ctx.nodes(cst.Assign):
            setting = _literal_bool(node.value)
            for target in node.targets:
                if setting is None or not isinstance(target.target, cst.Attribute) \
                        or target.target.attr.value != "requires_grad":
                    continue
                name = dotted(target.target.value)
                if name is not None:
                    found.setdefault(name, set()).add(setting)
        for call in self.ctx.nodes(cst.Call):
            if call_name(call) != "requires_grad_" or not isinstance(call.func, cst.Attribute):
                continue
            given = argument(call, 0, "requires_grad")
            setting = True if given is None else _literal_bool(given)
            name = dotted(call.func.value)
            if setting is not None and name is not None:
                found.setdefault(name, set()).add(setting)
        return found

    @computed
    def autocasts(self) -> list[Autocast]:
        """Every autocast used as a `with` item or a decorator (any spelling, also through
        `amp_autocast = functools.partial(torch.autocast, ...)`), with its device and dtype."""
        found: list[Autocast] = []
        blocks = WithBlocks(self.ctx, "autocast", lambda call: self._constructor(call) is not None)
        for context in blocks.contexts:
            item = context.item.item
            manager = item if isinstance(item, cst.Call) else self.ctx.flow.resolve_value(item, item)
            call = self._constructor(manager) if isinstance(manager, cst.Call) else None
            if call is not None:
                found.append(self._autocast(call, context.block, item))
        for fn in self.ctx.nodes(cst.FunctionDef):
            for decorator in fn.decorators:
                call = self._constructor(decorator.decorator) if isinstance(decorator.decorator, cst.Call) else None
                if call is not None:
                    found.append(self._autocast(call, fn, decorator.decorator))
        return found

    def _constructor(self, call: cst.Call) -> cst.Call | None:
        """The autocast call `call` makes: itself, or for `amp_autocast()` with `amp_autocast =
        partial(torch.autocast, ...)`, a call (outside the tree) with the partial's arguments, then its own."""
        if self.ctx.names.callee(call) in AUTOCAST_DEVICES:
            return call
        made = self.ctx.flow.resolve_value(call.func, call)
        if isinstance(made, cst.Call) and self.ctx.names.callee(made) == "functools.partial" and made.args:
            wrapped = made.args[0]
            if (wrapped.keyword is None and not wrapped.star
                    and self.ctx.names.qualname(wrapped.value) in AUTOCAST_DEVICES):
                return cst.Call(func=wrapped.value, args=[*made.args[1:], *call.args])
        return None

    def _autocast(self, call: cst.Call, region: cst.With | cst.FunctionDef, anchor: cst.CSTNode) -> Autocast:
        qualname = self.ctx.names.callee(call) or ""
        fixed_device = AUTOCAST_DEVICES[qualname]
        if fixed_device is None:
            device = string_value(self._value(argument(call, 0, "device_type")))
            dtype_arg = argument(call, 1, "dtype")
            enabled_arg = argument(call, 2, "enabled")
        else:  # the deprecated constructors: (enabled, dtype, cache_enabled)
            device = fixed_device
            dtype_arg = argument(call, 1, "dtype")
            enabled_arg = argument(call, 0, "enabled")
        if dtype_arg is None:
            dtype = _DEFAULT_DTYPE.get(device or "")
        else:
            dtype = _DTYPES.get(self.ctx.names.qualname(self._value(dtype_arg)) or "")
        enabled: bool | None = True
        if enabled_arg is not None:
            value = self._value(enabled_arg)
            literal = isinstance(value, cst.Name) and value.value in ("True", "False")
            enabled = value.value == "True" if literal else None
        return Autocast(call, qualname, device, dtype, enabled, region, anchor)

    def _value(self, expr: cst.BaseExpression | None) -> cst.BaseExpression | None:
        """A name followed to the value it was last assigned (`amp_dtype = torch.float16`)."""
        return self.ctx.flow.resolve_value(expr) if expr is not None else None

    def batch_of_one(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> bool:
        """Is `expr` (a model's input) a batch of one sample, as the code shapes it: `x.unsqueeze(0)`,
        `x[None]`, `x.view(1, -1)`, `torch.zeros(1, ...)`, through names and device or dtype moves? One
        observation per step of an RL acting loop, one token of a sampling loop: a forward's graph there is
        a few small tensors."""
        expr, at, depth = self._unmoved(expr, at, depth)
        if expr is None:
            return False
        if isinstance(expr, cst.Subscript):
            axes = [isinstance(e.slice, cst.Index) and (dotted(e.slice.value) == "None" or dotted(e.slice.value)
                                                          in _NEW_AXES) for e in expr.slice]
            # `x[None]` puts a batch axis of one first; `seq[:, None]` makes one sequence of a flat one;
            # `x[:, -1]` keeps the batch axis of `x`.
            whole_batch = bool(axes) and isinstance(expr.slice[0].slice, cst.Slice) and all(
                part is None for part in (expr.slice[0].slice.lower, expr.slice[0].slice.upper, expr.slice[0].slice.step))
            return bool(axes) and (axes[0] or any(axes) and self._one_sequence(expr.value, at, depth + 1)
                                   or whole_batch and self.batch_of_one(expr.value, at, depth + 1))
        if not isinstance(expr, cst.Call):
            return False
        method = call_name(expr)
        args = positional_args(expr)
        callee = self.ctx.names.callee(expr) or ""
        if (callee in _FROM_DATA or callee in _VARIABLE) and args and not isinstance(args[0], (cst.List, cst.Tuple)):
            return self.batch_of_one(args[0], at, depth + 1)  # `torch.LongTensor(seq)`: as `seq` is shaped
        if isinstance(expr.func, cst.Attribute) and method == "unsqueeze":
            dim = args[0] if args else argument(expr, 0, "dim")
            return isinstance(dim, cst.Integer) and dim.value == "0"
        if method in ("view", "reshape") or (self.ctx.names.callee(expr) or "") in _SIZED_CONSTRUCTORS:
            first = args[1] if method in ("view", "reshape") and not isinstance(expr.func, cst.Attribute) else (
                args[0] if args else None)
            if isinstance(first, (cst.Tuple, cst.List)) and first.elements:
                first = first.elements[0].value
            return isinstance(first, cst.Integer) and first.value == "1"
        if (self.ctx.names.callee(expr) or "") in _FROM_DATA and args and isinstance(args[0], (cst.List, cst.Tuple)):
            rows = args[0].elements  # `torch.tensor([[x, y]])`: one row
            return len(rows) == 1 and isinstance(rows[0].value, (cst.List, cst.Tuple))
        return False

    def volatile_input(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> bool:
        """Is `expr` a `Variable(x, volatile=True)`, through names and device or dtype moves? PyTorch 0.3
        recorded no graph for a forward given one; 0.4 and later ignore the flag (with a warning)."""
        expr, _, _ = self._unmoved(expr, at, depth)
        if not isinstance(expr, cst.Call) or (self.ctx.names.callee(expr) or "") not in _VARIABLE:
            return False
        volatile = argument(expr, 2, "volatile")
        return isinstance(volatile, cst.Name) and volatile.value == "True"

    def _unmoved(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int
                 ) -> tuple[cst.BaseExpression | None, cst.CSTNode, int]:
        """The value `expr` holds, followed through names and device or dtype moves (`x.cuda()`), where
        it is evaluated, and the depth reached; None past `_BATCH_DEPTH` or at a name of unknown value."""
        while depth <= _BATCH_DEPTH:
            if isinstance(expr, cst.Name):
                held = self.ctx.flow.value_at(expr.value, at)
                if held is None:
                    return None, at, depth
                expr, at = held
            elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and call_name(expr) in _MOVES:
                expr = expr.func.value
            else:
                return expr, at, depth
            depth += 1
        return None, at, depth

    def _one_sequence(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int) -> bool:
        """Is `expr` one flat sequence of Python values made a tensor (`torch.tensor(tokens)`, where `tokens`
        is a list of ids, maybe grown by `[start] + prompt`)? Through device and dtype moves."""
        if depth > _BATCH_DEPTH:
            return False
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and call_name(expr) in _MOVES:
            return self._one_sequence(expr.func.value, at, depth + 1)
        if isinstance(expr, cst.Call) and (self.ctx.names.callee(expr) or "") in _FROM_DATA \
                and positional_args(expr):
            return self._flat_list(positional_args(expr)[0], at, 0)
        return False

    def _flat_list(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int) -> bool:
        """A list display of no nested lists, or a sum of such lists, through names."""
        if depth > _BATCH_DEPTH:
            return False
        if isinstance(expr, cst.Name):
            held = self.ctx.flow.value_at(expr.value, at)
            return held is not None and self._flat_list(held[0], held[1], depth + 1)
        nested = (cst.List, cst.Tuple, cst.ListComp)
        if isinstance(expr, cst.List):
            return not any(isinstance(e.value, nested) for e in expr.elements)
        if isinstance(expr, cst.ListComp):
            return not isinstance(expr.elt, nested)
        if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
            parts = (expr.left, expr.right)
            return any(isinstance(p, (cst.List, cst.ListComp)) for p in parts) and all(
                isinstance(p, cst.Name) or self._flat_list(p, at, depth + 1) for p in parts)
        return False


def _literal_bool(expr: cst.BaseExpression) -> bool | None:
    return {"True": True, "False": False}.get(expr.value) if isinstance(expr, cst.Name) else None
