"""PyTorch modules: which expressions hold an `nn.Module`, which calls run one's forward, and what
activation a model ends in where the file shows it.

A value is a module when it is
- an instance of a class deriving from `torch.nn.Module` (directly, through same-file classes, or
  through torch, Lightning or transformers base classes), or `self` inside such a class;
- built by torch (`nn.Linear(...)`, `nn.Sequential(...)`, `torchvision.models.resnet18()`) or a known
  model library (`timm.create_model`, `transformers.AutoModel*.from_pretrained`);
- a wrapper of a module (`DistributedDataParallel(model)`, `DataParallel`, FSDP, `torch.compile`,
  `copy.deepcopy`, `accelerator.prepare`), or what a module method returning `self` gives
  (`model.to(device)`, `.cuda()`, `.train()`, `.eval()`); `ddp.module` is the wrapped module;
- the value of a same-file function whose every `return` gives a module;
- `self.x` assigned a module in the class (`self.backbone = nn.Sequential(...)`), `model.x` when
  `model`'s same-file class assigns it so;
- a parameter annotated as a module, or one every same-file call site passes a module.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import libcst as cst

from lintloop.analysis.base import Analysis, computed
from lintloop.analysis.pytorch import NO_GRAD_CALLS
from lintloop.analysis.syntax import call_name, positional_args, receiver

if TYPE_CHECKING:
    from lintloop.analysis.context import FileContext

DDP_WRAPPERS = frozenset({
    "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel",
    "torch.nn.DistributedDataParallel",
})
# Calls that return a module wrapping (or being) their first argument.
_WRAPPERS = DDP_WRAPPERS | {
    "torch.nn.DataParallel", "torch.nn.parallel.DataParallel", "torch.nn.parallel.data_parallel.DataParallel",
    "torch.distributed.fsdp.FullyShardedDataParallel",
    "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
    "torch.compile", "copy.deepcopy",
}
# Module methods that return the module itself.
_RETURNS_SELF = {"to", "cuda", "cpu", "train", "eval", "float", "half", "double", "bfloat16", "type",
                 "requires_grad_", "to_empty", "share_memory", "apply"}
# `accelerator.prepare(model, opt, loader)`, `fabric.setup(model, opt)`: one result per argument.
_PREPARERS = {"prepare", "prepare_model", "setup", "setup_module"}
_NOT_MODULES_UNDER_NN = {"functional", "init", "utils", "attention", "grad", "parameter"}
_NN_NON_MODULE_CLASSES = {"Parameter", "Buffer", "UninitializedParameter", "UninitializedBuffer"}
_MODEL_LIBRARY_CALLS = {"timm.create_model", "timm.models.create_model", "torchvision.models.get_model"}
_TORCHVISION_HELPERS = {"get_weight", "list_models", "get_model_weights", "get_model_builder", "WeightsEnum"}
# Words in transformers class names that contain "Model" / "For" but are no models
# (`DataCollatorForLanguageModeling`, `ModelOutput`, `AutoTokenizer`).
_TRANSFORMERS_NON_MODELS = ("Tokenizer", "Config", "Processor", "Output", "Collator", "Pipeline", "Trainer",
                            "Arguments", "FeatureExtractor", "Callback")
_LIGHTNING_BASES = {"lightning.LightningModule", "lightning.pytorch.LightningModule",
                    "lightning.pytorch.core.LightningModule", "pytorch_lightning.LightningModule",
                    "pytorch_lightning.core.LightningModule", "torch.jit.ScriptModule"}

# Activations a model output can end in, by how they are spelled.
_ACTIVATION_FUNCTIONS = {
    "torch.nn.functional.softmax": "softmax", "torch.softmax": "softmax", "torch.special.softmax": "softmax",
    "torch.nn.functional.log_softmax": "log_softmax", "torch.log_softmax": "log_softmax",
    "torch.special.log_softmax": "log_softmax",
    "torch.sigmoid": "sigmoid", "torch.nn.functional.sigmoid": "sigmoid", "torch.special.expit": "sigmoid",
}
_ACTIVATION_METHODS = {"softmax": "softmax", "log_softmax": "log_softmax", "sigmoid": "sigmoid"}
_ACTIVATION_LAYERS = {"Softmax": "softmax", "Softmax2d": "softmax", "LogSoftmax": "log_softmax",
                      "Sigmoid": "sigmoid"}
# Tensor methods that keep the values an activation produced (reshaping, dtype and device moves).
_SHAPE_METHODS = {"view", "reshape", "squeeze", "unsqueeze", "float", "double", "half", "to", "contiguous",
                  "flatten", "clone", "cpu", "cuda"}
# torch.nn modules that hold no parameters: calling one is a pure function of its inputs.
_PARAMETERLESS_LAYERS = {"Softmax", "Softmax2d", "LogSoftmax", "Sigmoid", "ReLU", "ReLU6", "LeakyReLU", "GELU",
                         "SiLU", "Tanh", "Softplus", "Mish", "ELU", "Hardswish", "Dropout", "Dropout1d",
                         "Dropout2d", "Identity", "Flatten", "Unflatten", "MaxPool1d", "MaxPool2d",
                         "AvgPool1d", "AvgPool2d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d"}
_MAX_DEPTH = 12


@dataclass(frozen=True)
class ModuleValue:
    """What an expression holding a module was made by."""

    kind: str  # "class" (same-file nn.Module subclass) | "self" | "torch" | "library" | "wrapper" | "unknown"
    origin: cst.CSTNode = field(repr=False)  # the constructor call, class, parameter or `self` that made it
    qualname: str | None = None  # the torch / library callee: `torch.nn.Sequential`, a DDP wrapper
    cls: cst.ClassDef | None = field(default=None, repr=False)  # the same-file class, for "class" and "self"
    inner: ModuleValue | None = None  # for a wrapper: the module it wraps, when known

    @property
    def is_ddp(self) -> bool:
        return self.kind == "wrapper" and self.qualname in DDP_WRAPPERS

    def unwrapped(self) -> ModuleValue:
        """The model under any wrappers (itself when not wrapped, or when the wrapped one is unknown)."""
        value = self
        while value.kind == "wrapper" and value.inner is not None:
            value = value.inner
        return value

    @property
    def parameterless(self) -> bool:
        """A torch loss or activation layer: its output requires grad only when its input does."""
        last = (self.qualname or "").rsplit(".", 1)[-1]
        return self.kind == "torch" and (last.endswith("Loss") or last in _PARAMETERLESS_LAYERS)


@dataclass(frozen=True)
class Activation:
    """The activation a value comes out of: "softmax" | "log_softmax" | "sigmoid", and where it is."""

    kind: str
    node: cst.CSTNode = field(repr=False)  # the `F.softmax(...)` call, or the `nn.Softmax(...)` layer that ends a model


def _is_torch_module_name(qualname: str) -> bool:
    """`torch.nn.Linear`, `torch.nn.modules.conv.Conv2d`, `torch.nn.parallel.DistributedDataParallel`."""
    parts = qualname.split(".")
    return (len(parts) >= 3 and parts[:2] == ["torch", "nn"] and parts[-1][:1].isupper()
            and not _NOT_MODULES_UNDER_NN & set(parts[2:-1]) and parts[-1] not in _NN_NON_MODULE_CLASSES)


def _is_library_model_name(qualname: str) -> bool:
    if qualname in _MODEL_LIBRARY_CALLS:
        return True
    parts = qualname.split(".")
    if parts[0] == "torchvision" and parts[1:2] == ["models"] and len(parts) > 2:
        last = parts[-1]
        return not last.endswith("Weights") and last not in _TORCHVISION_HELPERS
    if parts[0] == "transformers" and len(parts) > 1:
        name = parts[-2] if parts[-1] in ("from_pretrained", "from_config", "_from_config") else parts[-1]
        return (name[:1].isupper() and ("Model" in name or "For" in name)
                and not any(w in name for w in _TRANSFORMERS_NON_MODELS))
    return False


class TorchModules(Analysis):
    """Which expressions are `nn.Module`s, the calls that run their forward, and their last layer."""

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._cache: dict[tuple[cst.CSTNode, cst.CSTNode], ModuleValue | None] = {}
        self._active: set[tuple[cst.CSTNode, cst.CSTNode]] = set()
        self._class_layers: dict[cst.ClassDef, Activation | None] = {}

    # ----- classes ---------------------------------------------------------------------------
    @computed
    def module_classes(self) -> set[cst.ClassDef]:
        """Same-file classes deriving from `nn.Module`, directly or through other same-file classes."""
        found: set[cst.ClassDef] = set()
        classes = self.ctx.nodes(cst.ClassDef)
        changed = True
        while changed:
            changed = False
            for cls in classes:
                if cls not in found and any(self._is_module_base(base.value, found) for base in cls.bases):
                    found.add(cls)
                    changed = True
        return found

    def _is_module_base(self, base: cst.BaseExpression, known: set[cst.ClassDef]) -> bool:
        qualname = self.ctx.names.qualname(base)
        if qualname is not None:
            return (_is_torch_module_name(qualname) or qualname in _LIGHTNING_BASES
                    or _is_library_model_name(qualname))
        local = self.ctx.calls.local_class(base)
        return local is not None and local in known

    def enclosing_class(self, node: cst.CSTNode) -> cst.ClassDef | None:
        """The class whose method holds `node` (the innermost class around it)."""
        return next((a for a in self.ctx.ancestors(node) if isinstance(a, cst.ClassDef)), None)

    # ----- values ----------------------------------------------------------------------------
    def is_module(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None) -> bool:
        return self.value(expr, at) is not None

    def value(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None) -> ModuleValue | None:
        """What made the module `expr` holds at `at` (default: `expr` itself); None when it is not known
        to hold a module."""
        at = at if at is not None else expr
        key = (expr, at)
        if key in self._cache:
            return self._cache[key]
        if key in self._active or len(self._active) > _MAX_DEPTH:
            return None  # a cycle (a parameter passed back to itself) or too deep to matter
        self._active.add(key)
        try:
            result = self._value(expr, at)
        finally:
            self._active.discard(key)
        self._cache[key] = result
        return result

    def _value(self, expr: cst.BaseExpression, at: cst.CSTNode) -> ModuleValue | None:
        if isinstance(expr, cst.Name):
            return self._name_value(expr, at)
        if isinstance(expr, cst.Attribute):
            return self._attribute_value(expr, at)
        if isinstance(expr, cst.Call):
            return self._call_value(expr, at)
        if isinstance(expr, cst.Subscript):  # `nn.Sequential(...)[0]`, `self.blocks[i]`: a submodule
            return self.value(expr.value, at)
        if isinstance(expr, cst.NamedExpr):
            return self.value(expr.value, at)
        if isinstance(expr, cst.IfExp):  # `model.module if distributed else model`
            body, orelse = self.value(expr.body, at), self.value(expr.orelse, at)
            return body if body is not None and orelse is not None else None
        return None

    def _name_value(self, expr: cst.Name, at: cst.CSTNode) -> ModuleValue | None:
        if expr.value == "self":
            cls = self.enclosing_class(at)
            return ModuleValue("self", cls, cls=cls) if cls in self.module_classes else None
        local = self.ctx.calls.local_class(expr)
        if local is not None or expr.value in self.ctx.names.imports:
            return None  # a class or an imported thing, not an instance
        binding = self.ctx.flow.last_binding(expr.value, at)
        if binding is None or binding.augmented:
            return None
        if binding.value is not None:
            if isinstance(binding.node, cst.WithItem):
                return None
            return self.value(binding.value, binding.node)
        if isinstance(binding.node, cst.Param):
            return self._parameter_value(binding.node)
        if isinstance(binding.node, cst.Assign):  # `model, opt = accelerator.prepare(model, opt)`
            return self._unpacked_value(expr.value, binding.node)
        return None

    def _unpacked_value(self, name: str, assign: cst.Assign) -> ModuleValue | None:
        call = assign.value
        if not (isinstance(call, cst.Call) and call_name(call) in _PREPARERS and receiver(call) is not None):
            return None
        for target in assign.targets:
            if isinstance(target.target, (cst.Tuple, cst.List)):
                names = [e.value.value if isinstance(e.value, cst.Name) else None for e in target.target.elements]
                args = positional_args(call)
                if name in names and len(names) == len(args):
                    return self.value(args[names.index(name)], assign)
        return None

    def _attribute_value(self, expr: cst.Attribute, at: cst.CSTNode) -> ModuleValue | None:
        if self.ctx.names.qualname(expr) is not None:
            return None  # `nn.Linear`, `torch.compile`: an imported thing
        owner = self.value(expr.value, at)
        if owner is None:
            return None
        attr = expr.attr.value
        if attr == "module" and owner.kind == "wrapper":
            return owner.inner or ModuleValue("unknown", expr)
        if owner.cls is not None:
            return self._class_attribute(owner.cls, attr)
        return None

    def _class_attribute(self, cls: cst.ClassDef, attr: str) -> ModuleValue | None:
        """`self.attr` assigned a module in `cls`'s methods (every assignment that is not `None`)."""
        name = f"self.{attr}"
        values = [(b.value, b.node) for fn in self._methods(cls) for b in self.ctx.bindings_in(fn, name)
                  if b.value is not None and not (isinstance(b.value, cst.Name) and b.value.value == "None")]
        if not values:
            return None
        found = [self.value(value, node) for value, node in values]
        return found[0] if all(found) else None

    def _methods(self, cls: cst.ClassDef) -> list[cst.FunctionDef]:
        """`cls`'s methods, and those of its same-file base classes."""
        methods = [s for s in cls.body.body if isinstance(s, cst.FunctionDef)]
        for base in cls.bases:
            parent = self.ctx.calls.local_class(base.value)
            if parent is not None and parent is not cls:
                methods += self._methods(parent)
        return methods

    def _call_value(self, call: cst.Call, at: cst.CSTNode) -> ModuleValue | None:
        qualname = self.ctx.names.callee(call)
        if qualname is not None:
            if qualname in _WRAPPERS:
                args = positional_args(call)
                inner = self.value(args[0], at) if args else None
                if qualname in ("torch.compile", "copy.deepcopy"):
                    return inner
                return ModuleValue("wrapper", call, qualname, inner=inner)
            if _is_torch_module_name(qualname):
                return ModuleValue("torch", call, qualname)
            if _is_library_model_name(qualname):
                return ModuleValue("library", call, qualname)
            return None
        local = self.ctx.calls.local_class(call.func)
        if local is not None:
            return ModuleValue("class", call, cls=local) if local in self.module_classes else None
        method = call_name(call)
        owner = receiver(call)
        if owner is not None and method in _RETURNS_SELF:
            return self.value(owner, at)
        if owner is not None and method in _PREPARERS and len(positional_args(call)) == 1:
            return self.value(positional_args(call)[0], at)
        functions = self.ctx.calls.local_functions(call.func)
        if functions and len(functions) == 1:
            return self._returned_value(functions[0])
        return None

    def _returned_value(self, fn: cst.FunctionDef) -> ModuleValue | None:
        """The module a same-file function returns, when every `return` in it gives one."""
        returns = self.ctx.returns_of(fn)
        if not returns or any(r.value is None for r in returns):
            return None
        found = [self.value(r.value, r) for r in returns]
        return found[0] if all(found) else None

    def _parameter_value(self, param: cst.Param) -> ModuleValue | None:
        """A parameter annotated as a module, or one every same-file call site passes a module."""
        if param.annotation is not None:
            annotated = param.annotation.annotation
            qualname = self.ctx.names.qualname(annotated)
            local = self.ctx.calls.local_class(annotated)
            if (qualname is not None and (_is_torch_module_name(qualname) or qualname in _LIGHTNING_BASES)) or (
                    local is not None and local in self.module_classes):
                return ModuleValue("unknown", param, qualname, cls=local)
        fn = next((a for a in self.ctx.ancestors(param) if isinstance(a, cst.FunctionDef)), None)
        if fn is None:
            return None
        found = [self._argument_value(site, fn, param) for site in self._call_sites(fn)]
        if not found or not all(found):
            return None
        first = found[0]
        return first if all(v.kind == first.kind and v.qualname == first.qualname for v in found) else (
            ModuleValue("unknown", param))

    def _call_sites(self, fn: cst.FunctionDef) -> list[cst.Call]:
        if fn.name.value == "__init__":
            cls = self.enclosing_class(fn)
            return list(self._instantiations.get(cls, ())) if cls is not None else []
        return list(self.ctx.calls.call_sites.get(fn, ()))

    @computed
    def _instantiations(self) -> dict[cst.ClassDef, list[cst.Call]]:
        """The calls of each same-file class (its constructions), in source order."""
        found: dict[cst.ClassDef, list[cst.Call]] = defaultdict(list)
        for call in self.ctx.nodes(cst.Call):
            cls = self.ctx.calls.local_class(call.func)
            if cls is not None:
                found[cls].append(call)
        return found

    def _argument_value(self, site: cst.Call, fn: cst.FunctionDef, param: cst.Param) -> ModuleValue | None:
        name = param.name.value
        for arg in site.args:
            if arg.keyword is not None and arg.keyword.value == name:
                return self.value(arg.value, site)
        params = list(fn.params.posonly_params) + list(fn.params.params)
        index = next((i for i, p in enumerate(params) if p is param), None)
        if index is None:
            return None
        bound_method = self.enclosing_class(fn) is not None and params and params[0].name.value in ("self", "cls")
        if bound_method and (isinstance(site.func, cst.Attribute) or fn.name.value == "__init__"):
            index -= 1  # `self.step(model)`, `Trainer(model)`: the first parameter is bound
        positional = positional_args(site)
        if any(a.star for a in site.args) or not 0 <= index < len(positional):
            return None
        return self.value(positional[index], site)

    # ----- forward calls ---------------------------------------------------------------------
    def forward_of(self, call: cst.Call) -> ModuleValue | None:
        """The module whose forward `call` runs: `model(x)`, `model.forward(x)`, `ddp.module(x)`."""
        if isinstance(call.func, cst.Attribute) and call.func.attr.value == "forward":
            owner = call.func.value
            if isinstance(owner, cst.Call) and self.ctx.names.is_builtin(owner.func, "super"):
                return None
            return self.value(owner, call)
        return self.value(call.func, call)

    def in_no_grad(self, node: cst.CSTNode) -> bool:
        """Is `node` in code that records no graph: a `torch.no_grad()` / `inference_mode()` block, or a
        function decorated with one?"""
        if self.ctx.torch.no_grad.enclosing(node):
            return True
        return any(isinstance(d.decorator, cst.Call) and self.ctx.names.callee(d.decorator) in NO_GRAD_CALLS
                   for fn in self.ctx.ancestors(node) if isinstance(fn, cst.FunctionDef) for d in fn.decorators)

    @computed
    def forward_calls(self) -> list[cst.Call]:
        """Every call in the file that runs a module's forward: the model outputs."""
        return [call for call in self.ctx.nodes(cst.Call) if self.forward_of(call) is not None]

    # ----- last layers -----------------------------------------------------------------------
    def last_layer(self, module: ModuleValue) -> Activation | None:
        """The activation a module's output comes out of, where the file shows it: the last layer of an
        `nn.Sequential`, an activation layer itself, or what a same-file class's `forward` returns."""
        module = module.unwrapped()
        last = (module.qualname or "").rsplit(".", 1)[-1]
        if module.kind == "torch" and last in _ACTIVATION_LAYERS:
            return Activation(_ACTIVATION_LAYERS[last], module.origin)
        if module.kind == "torch" and last == "Sequential" and isinstance(module.origin, cst.Call):
            layers = positional_args(module.origin)
            inner = self.value(layers[-1], module.origin) if layers else None
            return self.last_layer(inner) if inner is not None else None
        if module.cls is not None:
            return self._forward_activation(module.cls)
        return None

    def _forward_activation(self, cls: cst.ClassDef) -> Activation | None:
        if cls in self._class_layers:
            return self._class_layers[cls]
        self._class_layers[cls] = None  # guards recursion
        forward = next((m for m in self._methods(cls) if m.name.value == "forward"), None)
        returns = [r for r in self.ctx.returns_of(forward)
                   if r.value is not None] if forward is not None else []
        found = [self.activation_of(r.value, r) for r in returns]
        result = found[0] if found and all(a is not None and a.kind == found[0].kind for a in found) else None
        self._class_layers[cls] = result
        return result

    def activation_of(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None,
                      depth: int = 0) -> Activation | None:
        """The activation whose output `expr` holds: `F.softmax(x)`, `x.softmax(1)`, `nn.Softmax()(x)`,
        the output of a model ending in one, through names and reshaping methods."""
        at = at if at is not None else expr
        if depth > _MAX_DEPTH:
            return None
        if isinstance(expr, cst.Name):
            binding = self.ctx.flow.last_binding(expr.value, at)
            if binding is None or binding.value is None or binding.augmented:
                return None
            return self.activation_of(binding.value, binding.node, depth + 1)
        if not isinstance(expr, cst.Call):
            return None
        qualname = self.ctx.names.callee(expr)
        if qualname in _ACTIVATION_FUNCTIONS:
            return Activation(_ACTIVATION_FUNCTIONS[qualname], expr)
        owner = receiver(expr)
        if qualname is None and owner is not None:
            method = call_name(expr)
            if method in _ACTIVATION_METHODS:
                return Activation(_ACTIVATION_METHODS[method], expr)
            if method in _SHAPE_METHODS:
                return self.activation_of(owner, at, depth + 1)
        module = self.forward_of(expr)
        return self.last_layer(module) if module is not None else None
