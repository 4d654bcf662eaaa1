"""PyTorch modules: which expressions hold an `nn.Module`, which calls run one's forward, what
activation a model ends in where the file shows it, and whether a module behaves differently in
training and evaluation mode (`mode_dependence`).

A value is a module when it is
- an instance of a class deriving from `torch.nn.Module` (directly, through same-file classes, or
  through torch, Lightning or transformers base classes), or `self` inside such a class; also what
  such a class's `load_from_checkpoint(...)` / `from_pretrained(...)` gives;
- built by torch (`nn.Linear(...)`, `nn.Sequential(...)`, `torchvision.models.resnet18()`) or a known
  model library (`timm.create_model`, `transformers.AutoModel*.from_pretrained`);
- a wrapper of a module (`DistributedDataParallel(model)`, `DataParallel`, FSDP, `torch.compile`,
  `copy.deepcopy`, `accelerator.prepare`), or what a module method returning `self` gives
  (`model.to(device)`, `.cuda()`, `.train()`, `.eval()`); `ddp.module` is the wrapped module;
- the value of a same-file function whose every `return` gives a module (or, unpacked from the
  tuple it returns, `model, result = train(...)`, the module at that place);
- `self.x` assigned a module in the class (`self.backbone = nn.Sequential(...)`), `model.x` when
  `model`'s same-file class assigns it so;
- a parameter annotated as a module, or one every same-file call site passes a module.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import libcst as cst

from lintloop.analysis.base import Analysis, computed
from lintloop.analysis.pytorch import NO_GRAD_CALLS
from lintloop.analysis.nodes import argument, call_name, dotted, positional_args, read_name, receiver, string_value

if TYPE_CHECKING:
    from lintloop.analysis.context import FileContext
    from lintloop.analysis.index import Binding

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
# Class methods that build an instance of their class: `Net.load_from_checkpoint(path)` (Lightning),
# `Net.from_pretrained(name)` (transformers).
_CLASS_CONSTRUCTORS = {"load_from_checkpoint", "from_pretrained", "from_config", "_from_config"}
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

# torch.nn layers whose forward reads `self.training`, by what evaluation mode does to them.
_DROPOUT_LAYERS = {"Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout"}
_RANDOM_ACTIVATIONS = {"RReLU"}
# Norm layers, with the place of `track_running_stats` and whether it is on by default: only with running
# statistics does evaluation change them (they normalise with, and stop updating, those statistics).
_NORM_LAYERS = {
    **{name: (4, True) for name in ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm")},
    **{name: (3, True) for name in ("LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d")},
    **{name: (4, False) for name in ("InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d")},
    **{name: (3, False) for name in ("LazyInstanceNorm1d", "LazyInstanceNorm2d", "LazyInstanceNorm3d")},
}
# Layers with a `dropout` argument: its place and default (they drop only in training mode, when it is not 0).
_DROPOUT_ARGUMENT_LAYERS = {"MultiheadAttention": (2, 0.0), "RNN": (6, 0.0), "LSTM": (5, 0.0), "GRU": (5, 0.0),
                            "Transformer": (5, 0.1), "TransformerEncoderLayer": (3, 0.1),
                            "TransformerDecoderLayer": (3, 0.1)}
# Containers, and the keyword of the argument holding their layers (`nn.Sequential`: every positional one).
_CONTAINERS = {"Sequential": None, "ModuleList": "modules", "ModuleDict": "modules",
               "TransformerEncoder": "encoder_layer", "TransformerDecoder": "decoder_layer"}
# nn.Module and Lightning methods and attributes a `forward` may use on `self` that run no submodule.
_MODULE_ATTRIBUTES = {"parameters", "named_parameters", "buffers", "named_buffers", "children", "named_children",
                      "modules", "named_modules", "get_submodule", "get_parameter", "get_buffer", "register_buffer",
                      "register_parameter", "state_dict", "extra_repr", "log", "log_dict", "print", "hparams",
                      "device", "dtype", "trainer", "logger", "global_step", "current_epoch"}
# torch.nn packages whose modules change in training mode in ways not listed here (fake quantization, fused
# conv + batch norm).
_OPAQUE_NN_PACKAGES = {"qat", "quantized", "intrinsic", "quantizable"}
# Bases that add no mode-dependent behaviour of their own.
_NEUTRAL_BASES = {"torch.nn.Module", "torch.nn.modules.module.Module", "abc.ABC"} | (
    _LIGHTNING_BASES - {"torch.jit.ScriptModule"})
# Methods that register a module in a container or a module: `self.blocks.append(Block())`.
_REGISTERING_METHODS = {"append", "extend", "insert", "add_module", "register_module", "update"}
# Module methods that store a value on the instance under a name, with the keyword of the value.
_SELF_REGISTERING_METHODS = {"add_module": "module", "register_module": "module", "register_buffer": "tensor",
                             "register_parameter": "param"}
# What a model's instance runs on its own: building it, and calling it.
_INIT_METHODS = ("__init__", "build")
_FORWARD_METHODS = ("forward", "__call__")
# Builtins whose result holds no module, whatever they are given; and those that hold what they are given.
_DATA_BUILTINS = {"int", "float", "complex", "str", "bool", "len", "round", "abs", "max", "min", "sum", "range",
                  "pow", "divmod", "hash", "repr", "format", "isinstance", "issubclass", "hasattr", "callable"}
_CONTAINER_BUILTINS = {"list", "tuple", "dict", "set", "frozenset", "sorted", "reversed", "zip", "enumerate"}
# Libraries (and torch namespaces) whose calls give numbers, arrays or tensors, never a module; torch's
# own functions (`torch.zeros`) do too, except these.
_DATA_LIBRARIES = ("math.", "numpy.", "torch.nn.init.", "torch.nn.functional.", "torch.nn.parameter.")
_DATA_CLASSES = {"torch.nn.Parameter", "torch.nn.Buffer"}
_TORCH_FUNCTIONS_GIVING_MODULES = {"torch.load", "torch.compile"}
_LITERALS = (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)


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
class ModeDependence:
    """Does a module behave differently in training and evaluation mode, and what makes it so?"""

    differs: bool | None  # True: a part of it depends on the mode; False: known not to; None: unknown
    part: cst.CSTNode | None = field(default=None, repr=False)  # the layer, call or `self.training` read
    # "dropout" | "batch_norm" (running statistics) | "random_activation" (`nn.RReLU`) | "training_flag"
    # (code reading `self.training`)
    kind: str | None = None


# (value, where, attribute) for a value stored on a module: the value None where the file cannot follow it,
# the attribute None where the file does not spell it (`setattr(self, name, value)`).
Stored = tuple[cst.BaseExpression | None, cst.CSTNode, str | None]

SAME_IN_BOTH_MODES = ModeDependence(False)
UNKNOWN_MODE_DEPENDENCE = ModeDependence(None)


def _combined(parts: Iterable[ModeDependence]) -> ModeDependence:
    """The first part that depends on the mode; else unknown when a part is; else the same in both."""
    unknown = False
    for part in parts:
        if part.differs:
            return part
        unknown = unknown or part.differs is None
    return UNKNOWN_MODE_DEPENDENCE if unknown else SAME_IN_BOTH_MODES


@dataclass(frozen=True)
class Activation:
    """The activation a value comes out of: "softmax" | "log_softmax" | "sigmoid", and where it is."""

    kind: str
    node: cst.CSTNode = field(repr=False)  # the `F.softmax(...)` call, or the `nn.Softmax(...)` layer that ends a model


def _literal_items(expr: cst.BaseExpression) -> list[cst.BaseExpression] | None:
    """The values of a literal list, tuple or dict (a list of `(name, module)` pairs gives the modules);
    None for anything else."""
    if isinstance(expr, cst.Dict):
        return [e.value for e in expr.elements] if all(isinstance(e, cst.DictElement) for e in expr.elements) \
            else None
    if not isinstance(expr, (cst.List, cst.Tuple)) or any(isinstance(e, cst.StarredElement) for e in expr.elements):
        return None
    pairs = [e.value for e in expr.elements if isinstance(e.value, cst.Tuple) and len(e.value.elements) == 2]
    if pairs and len(pairs) == len(expr.elements):
        return [pair.elements[1].value for pair in pairs]
    return [e.value for e in expr.elements]


def _container_layers(call: cst.Call | None, keyword: str | None) -> list[cst.BaseExpression] | None:
    """The layers a torch container is built with (`keyword`: the argument holding them; None: every
    positional argument), None when they are not all written out (`*layers`, none given)."""
    if call is None or not call.args or any(a.star for a in call.args):
        return None
    args = positional_args(call)
    if keyword is None:
        if len(args) == 1 and isinstance(args[0], cst.Call) and call_name(args[0]) == "OrderedDict":
            pairs = positional_args(args[0])  # `nn.Sequential(OrderedDict([("fc", nn.Linear(2, 2)), ...]))`
            return _literal_items(pairs[0]) if len(pairs) == 1 else None
        return args
    layers = argument(call, 0, keyword)
    if layers is None:
        return None
    return [layers] if keyword.endswith("_layer") else _literal_items(layers)


def _self_attribute(expr: cst.BaseExpression) -> str | None:
    """`x` in `self.x`, `self.x[i]`, `self.x.encode`: the attribute of `self` an expression starts from."""
    while isinstance(expr, (cst.Attribute, cst.Subscript)):
        if isinstance(expr, cst.Attribute) and dotted(expr.value) == "self":
            return expr.attr.value
        expr = expr.value
    return None


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

    asks = frozenset({"calls", "definitions", "flow", "torch"})

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._cache: dict[tuple[cst.CSTNode, cst.CSTNode], ModuleValue | None] = {}
        self._active: set[tuple[cst.CSTNode, cst.CSTNode]] = set()
        self._class_layers: dict[tuple[cst.ClassDef, int | None], Activation | None] = {}
        # The mode questions: answers depend on the instances whose classes are being read (`_instances`).
        self._modes: dict[tuple, ModeDependence] = {}
        self._class_modes: dict[tuple, ModeDependence] = {}
        self._plain: dict[tuple, bool] = {}
        self._active_modes: set[tuple] = set()
        self._active_plain: set[tuple] = set()
        # The classes being read, innermost last, each with the call that builds the instance (None when
        # not a call of the class itself: `Net.load_from_checkpoint(...)`, `self`).
        self._instances: list[tuple[cst.ClassDef, cst.Call | None]] = []

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
        local = self.ctx.definitions.local_class(base)
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
        local = self.ctx.definitions.local_class(expr)
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
        """`model, opt = accelerator.prepare(model, opt)`; `model, result = train(...)` where every
        `return` of the same-file `train` gives a tuple with a module at that place."""
        call = assign.value
        if not isinstance(call, cst.Call):
            return None
        for target in assign.targets:
            if not isinstance(target.target, (cst.Tuple, cst.List)):
                continue
            names = [e.value.value if isinstance(e.value, cst.Name) else None for e in target.target.elements]
            if name not in names:
                continue
            place = names.index(name)
            if call_name(call) in _PREPARERS and receiver(call) is not None:
                args = positional_args(call)
                return self.value(args[place], assign) if len(names) == len(args) else None
            functions = self.ctx.calls.local_functions(call.func)
            if len(functions) == 1:
                return self._returned_value(functions[0], place, len(names))
        return None

    def _attribute_value(self, expr: cst.Attribute, at: cst.CSTNode) -> ModuleValue | None:
        if self.ctx.names.qualname(expr) is not None:
            return None  # `nn.Linear`, `torch.compile`: an imported thing
        if isinstance(expr.value, cst.Name) and expr.value.value == "self":
            cls = self.enclosing_class(at)
            if cls is not None and cls not in self.module_classes:
                # `self.model` of a class that holds modules without being one (a trainer): what its
                # methods assign it.
                return self._class_attribute(cls, expr.attr.value)
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
        values = self._attribute_assignments(cls, attr)
        if not values:
            return None
        found = [self.value(value, node) for value, node in values]
        return found[0] if all(found) else None

    def _attribute_assignments(self, cls: cst.ClassDef, attr: str) -> list[tuple[cst.BaseExpression, cst.CSTNode]]:
        """(value, assignment) for each `self.attr = value` in `cls`'s methods, `None` left out."""
        name = f"self.{attr}"
        return [(b.value, b.node) for b in self.ctx.definitions.instance_bindings(cls, name)
                if b.value is not None and not (isinstance(b.value, cst.Name) and b.value.value == "None")]

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
        local = self.ctx.definitions.local_class(call.func)
        if local is not None:
            return ModuleValue("class", call, cls=local) if local in self.module_classes else None
        method = call_name(call)
        owner = receiver(call)
        if owner is not None and method in _CLASS_CONSTRUCTORS:
            local = self.ctx.definitions.local_class(owner)
            if local is not None and local in self.module_classes:
                return ModuleValue("class", call, cls=local)
        if owner is not None and method in _RETURNS_SELF:
            return self.value(owner, at)
        if owner is not None and method in _PREPARERS and len(positional_args(call)) == 1:
            return self.value(positional_args(call)[0], at)
        functions = self.ctx.calls.local_functions(call.func)
        if functions and len(functions) == 1:
            return self._returned_value(functions[0])
        return None

    def _returned_value(self, fn: cst.FunctionDef, place: int | None = None, size: int = 0) -> ModuleValue | None:
        """The module a same-file function returns, when every `return` in it gives one; with `place`,
        the module at that place of the `size`-tuple every `return` gives."""
        returned = [self._returned_part(r, place, size) for r in self.ctx.returns_of(fn)]
        if not returned or any(value is None for value, _ in returned):
            return None
        found = [self.value(value, at) for value, at in returned]
        return found[0] if all(found) else None

    @staticmethod
    def _returned_part(ret: cst.Return, place: int | None, size: int) -> tuple[cst.BaseExpression | None, cst.Return]:
        value = ret.value
        if place is None or value is None:
            return value, ret
        if isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == size and not any(
                isinstance(e, cst.StarredElement) for e in value.elements):
            return value.elements[place].value, ret
        return None, ret

    def _parameter_value(self, param: cst.Param) -> ModuleValue | None:
        """A parameter annotated as a module, or one every same-file call site passes a module."""
        if param.annotation is not None:
            annotated = param.annotation.annotation
            qualname = self.ctx.names.qualname(annotated)
            local = self.ctx.definitions.local_class(annotated)
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
            cls = self.ctx.definitions.local_class(call.func)
            if cls is not None:
                found[cls].append(call)
        return found

    def _argument_value(self, site: cst.Call, fn: cst.FunctionDef, param: cst.Param) -> ModuleValue | None:
        argument = self.ctx.definitions.argument_for(site, fn, param)
        return self.value(argument, site) if argument is not None else None

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

    # ----- training and evaluation mode ----------------------------------------------------------
    def same_in_both_modes(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None) -> bool:
        """Is the module `expr` holds at `at` known to behave the same in training and evaluation mode?"""
        return self.mode_dependence(expr, at).differs is False

    def mode_dependence(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None) -> ModeDependence:
        """Whether the module `expr` holds at `at` behaves differently in training and evaluation mode:
        the part of it that does (Dropout, BatchNorm or InstanceNorm with running statistics, `nn.RReLU`,
        code reading `self.training`), that nothing does, or unknown (a part the file does not show: an
        imported or library model, an attribute set elsewhere, layers given as `*layers`). A parameter
        holds every module its same-file call sites pass, `self.x` every module its class assigns it."""
        at = at if at is not None else expr
        key = (expr, at, *self._instances)
        if key in self._modes:
            return self._modes[key]
        if key in self._active_modes or len(self._active_modes) > _MAX_DEPTH:
            return UNKNOWN_MODE_DEPENDENCE
        self._active_modes.add(key)
        try:
            result = self._mode_dependence(expr, at)
        finally:
            self._active_modes.discard(key)
        self._modes[key] = result
        return result

    def _mode_dependence(self, expr: cst.BaseExpression, at: cst.CSTNode) -> ModeDependence:
        if isinstance(expr, cst.Name) and expr.value != "self":
            binding = self.ctx.flow.last_binding(expr.value, at)
            if binding is not None and isinstance(binding.node, cst.Param):
                return self._parameter_mode(binding.node)
            if binding is not None and binding.value is not None and not binding.augmented \
                    and not isinstance(binding.node, cst.WithItem):
                return self.mode_dependence(binding.value, binding.node)
        elif isinstance(expr, cst.Attribute) and expr.attr.value != "module" and self.ctx.names.qualname(expr) is None:
            cls = self._owner_class(expr.value, at)
            if cls is not None:
                assigned = self._attribute_assignments(cls, expr.attr.value)
                return _combined(self.mode_dependence(value, node) for value, node in assigned) if assigned \
                    else UNKNOWN_MODE_DEPENDENCE
        elif isinstance(expr, cst.Call):
            same = self._same_module(expr)
            if same is not None:
                return self.mode_dependence(same, at)
        elif isinstance(expr, cst.IfExp):
            return _combined((self.mode_dependence(expr.body, at), self.mode_dependence(expr.orelse, at)))
        value = self.value(expr, at)
        return self.module_mode(value) if value is not None else UNKNOWN_MODE_DEPENDENCE

    def _owner_class(self, owner: cst.BaseExpression, at: cst.CSTNode) -> cst.ClassDef | None:
        """The same-file class of `owner` in `owner.x`: `self`'s class (a model, or a trainer holding one),
        or the class of the module `owner` holds."""
        if isinstance(owner, cst.Name) and owner.value == "self":
            return self.enclosing_class(at)
        value = self.value(owner, at)
        return value.cls if value is not None and value.kind in ("class", "self") else None

    def _same_module(self, call: cst.Call) -> cst.BaseExpression | None:
        """The module a call gives back, itself or wrapped in something that runs it in its own mode:
        `model.to(device)`, `DDP(model)`, `torch.compile(model)`, `accelerator.prepare(model)`."""
        if self.ctx.names.callee(call) in _WRAPPERS:
            args = positional_args(call)
            return args[0] if args else None
        owner = receiver(call)
        if owner is None or self.ctx.names.callee(call) is not None:
            return None
        if call_name(call) in _RETURNS_SELF:
            return owner
        args = positional_args(call)
        return args[0] if call_name(call) in _PREPARERS and len(call.args) == len(args) == 1 else None

    def _parameter_mode(self, param: cst.Param) -> ModeDependence:
        """A parameter holds what each call giving it a value passes (unknown without such calls)."""
        fn = self._function_of(param)
        sites = self._calls_giving_parameters(fn) if fn is not None else None
        passed = [(self.ctx.definitions.argument_for(site, fn, param), site) for site in sites or ()]
        if not passed or any(argument is None for argument, _ in passed):
            return UNKNOWN_MODE_DEPENDENCE
        return _combined(self.mode_dependence(argument, site) for argument, site in passed)

    def _calls_giving_parameters(self, fn: cst.FunctionDef) -> list[cst.Call] | None:
        """The calls that give `fn`'s parameters their values: for the `__init__` of a class being read, the
        call that builds that instance (None when unknown: a base's `__init__`, reached through `super()`;
        an instance not built by calling its class); else `fn`'s same-file call sites."""
        if fn.name.value == "__init__":
            cls = self.enclosing_class(fn)
            for reading, instance in reversed(self._instances):
                if cls in self._hierarchy(reading):
                    return [instance] if cls is reading and instance is not None else None
        return self._call_sites(fn)

    def _function_of(self, param: cst.Param) -> cst.FunctionDef | None:
        """The function whose parameter `param` is (None for a lambda's)."""
        owner = self.ctx.parents.get(self.ctx.parents.get(param))
        return owner if isinstance(owner, cst.FunctionDef) else None

    def module_mode(self, module: ModuleValue) -> ModeDependence:
        """Whether a module behaves differently in training and evaluation mode (see `mode_dependence`)."""
        module = module.unwrapped()
        if module.kind == "torch" and module.qualname is not None:
            return self._torch_layer_mode(module.qualname, module.origin)
        if module.kind == "self" and module.cls is not None:
            return self._class_mode(module.cls, None)
        if module.kind == "class" and module.cls is not None:
            name = module.cls.name.value
            origin = module.origin
            built = origin if isinstance(origin, cst.Call) and dotted(origin.func) == name else None
            # A notebook may define a class again under the same name: the instance is of one of them.
            same_name = [c for c in self.ctx.nodes(cst.ClassDef) if c.name.value == name]
            return _combined(self._class_mode(c, built) for c in same_name)
        return UNKNOWN_MODE_DEPENDENCE

    def _torch_layer_mode(self, qualname: str, origin: cst.CSTNode) -> ModeDependence:
        """A torch.nn layer built by `origin` (a call; or a class's base, for a class deriving from it)."""
        parts = qualname.split(".")
        name = parts[-1]
        call = origin if isinstance(origin, cst.Call) else None
        if _OPAQUE_NN_PACKAGES & set(parts[2:-1]):
            return UNKNOWN_MODE_DEPENDENCE
        if name in _DROPOUT_LAYERS:
            return ModeDependence(True, origin, "dropout")
        if name in _RANDOM_ACTIVATIONS:
            return ModeDependence(True, origin, "random_activation")
        if name in _NORM_LAYERS:
            place, default = _NORM_LAYERS[name]
            tracks = self._literal_argument(call, place, "track_running_stats", default)
            return UNKNOWN_MODE_DEPENDENCE if tracks is None else (
                ModeDependence(True, origin, "batch_norm") if tracks else SAME_IN_BOTH_MODES)
        if name in _DROPOUT_ARGUMENT_LAYERS:
            place, default = _DROPOUT_ARGUMENT_LAYERS[name]
            rate = self._literal_argument(call, place, "dropout", default)
            return UNKNOWN_MODE_DEPENDENCE if rate is None else (
                ModeDependence(True, origin, "dropout") if rate else SAME_IN_BOTH_MODES)
        if name in _CONTAINERS:
            layers = _container_layers(call, _CONTAINERS[name])
            return UNKNOWN_MODE_DEPENDENCE if layers is None else _combined(
                self._part_mode(layer, origin) for layer in layers)
        return SAME_IN_BOTH_MODES

    def _literal_argument(self, call: cst.Call | None, place: int, keyword: str,
                          default: bool | float) -> bool | float | None:
        """The bool or number a call passes (directly or through a name assigned one), the default when it
        passes none, None when the file does not show it."""
        if call is None:
            return default
        value = argument(call, place, keyword)
        if value is None:
            return None if any(a.star for a in call.args) else default
        value = self.ctx.flow.resolve_value(value, call)
        if isinstance(value, cst.Name) and value.value in ("True", "False"):
            return value.value == "True"
        if isinstance(value, (cst.Integer, cst.Float)):
            return float(value.evaluated_value)
        return None

    def _class_mode(self, cls: cst.ClassDef, instance: cst.Call | None) -> ModeDependence:
        """An instance of a same-file class, built by the call `instance` (its `__init__` arguments)."""
        key = (*self._instances, (cls, instance))
        if key not in self._class_modes:
            self._class_modes[key] = UNKNOWN_MODE_DEPENDENCE  # a class reached again while it is read
            self._instances.append((cls, instance))
            try:
                self._class_modes[key] = self._read_class_mode(cls)
            finally:
                self._instances.pop()
        return self._class_modes[key]

    def _read_class_mode(self, cls: cst.ClassDef) -> ModeDependence:
        """A same-file module class: its bases, what its `__init__` stores on the instance, and whether what
        its `forward` runs reads `self.training` or calls an attribute that `__init__` does not set."""
        hierarchy = self._hierarchy(cls)
        outside_bases = [base.value for c in hierarchy for base in c.bases
                         if self.ctx.definitions.local_class(base.value) is None]
        parts = [self._base_mode(base) for base in outside_bases]
        methods: dict[str, list[cst.FunctionDef]] = defaultdict(list)
        for c in hierarchy:
            for method in c.body.body:
                if isinstance(method, cst.FunctionDef):
                    methods[method.name.value].append(method)
        if "forward" not in methods and not any(self._is_layer_base(base) for base in outside_bases):
            return _combined((*parts, UNKNOWN_MODE_DEPENDENCE))  # what calling it runs is not in the file
        init = self._reachable(methods, _INIT_METHODS)
        forward = self._reachable(methods, _FORWARD_METHODS)
        assigned = list(self._assigned(init))
        added = list(self._added(init))
        filled = {attribute for _, _, attribute in added}
        # `self.blocks = nn.ModuleList()` then `self.blocks.append(Block())`: the blocks are what it holds.
        parts += [self._part_mode(value, at) for value, at, attribute in assigned
                  if not (attribute in filled and self._empty_container(value, at))]
        parts += [self._part_mode(value, at) for value, at, _ in added]
        parts += [ModeDependence(True, self._training_read(read), "training_flag")
                  for fn in forward for read in self.ctx.nodes_within(cst.Attribute, fn)
                  if read.attr.value == "training" and dotted(read.value) == "self"]
        stored = {attribute for _, _, attribute in assigned} | filled
        # What `forward` runs on the instance must be what `__init__` stores (or a method): anything else is
        # set where the file does not show (a layer base's own `self.weight` is not).
        if None not in stored and not any(self._is_layer_base(base) for base in outside_bases):
            known = stored | methods.keys() | _MODULE_ATTRIBUTES
            parts += [UNKNOWN_MODE_DEPENDENCE for fn in forward for used in self._attributes_run(fn)
                      if used not in known]
        return _combined(parts)

    def _attributes_run(self, fn: cst.FunctionDef) -> Iterator[str]:
        """`x` for each `self.x(...)`, `self.x[i](...)`, `self.x.encode(...)` and `for block in self.x` in `fn`."""
        for call in self.ctx.definitions.calls_in(fn):
            attribute = _self_attribute(call.func)
            if attribute is not None:
                yield attribute
        for loop in self.ctx.nodes_within(cst.For, fn):
            iterated = loop.iter
            while isinstance(iterated, cst.Call) and positional_args(iterated):  # `enumerate(self.blocks)`
                iterated = positional_args(iterated)[0]
            attribute = _self_attribute(iterated)
            if attribute is not None:
                yield attribute

    def _hierarchy(self, cls: cst.ClassDef) -> list[cst.ClassDef]:
        """`cls` and its same-file base classes, most derived first."""
        found = [cls]
        for c in found:
            for base in c.bases:
                parent = self.ctx.definitions.local_class(base.value)
                if parent is not None and parent not in found:
                    found.append(parent)
        return found

    def _is_layer_base(self, base: cst.BaseExpression) -> bool:
        """A torch.nn layer as a base class (`class Block(nn.Linear)`): its `forward` runs."""
        qualname = self.ctx.names.qualname(base)
        return qualname is not None and qualname not in _NEUTRAL_BASES and _is_torch_module_name(qualname)

    def _base_mode(self, base: cst.BaseExpression) -> ModeDependence:
        """A base class from outside the file: `nn.Module` and Lightning's add nothing, a torch.nn layer
        behaves as that layer, anything else is unknown."""
        qualname = self.ctx.names.qualname(base)
        if qualname in _NEUTRAL_BASES or self.ctx.names.is_builtin(base, "object"):
            return SAME_IN_BOTH_MODES
        if self._is_layer_base(base):
            return self._torch_layer_mode(qualname, base)
        return UNKNOWN_MODE_DEPENDENCE

    def _reachable(self, methods: dict[str, list[cst.FunctionDef]], roots: tuple[str, ...]) -> list[cst.FunctionDef]:
        """The methods named `roots` and those they call on `self` (or `super()`), transitively."""
        found = [m for name in roots for m in methods.get(name, ())]
        for fn in found:
            for call in self.ctx.definitions.calls_in(fn):
                owner = receiver(call)
                if owner is not None and (dotted(owner) == "self" or isinstance(owner, cst.Call)
                                          and self.ctx.names.is_builtin(owner.func, "super")):
                    found += [m for m in methods.get(call_name(call), ()) if m not in found]
        return found

    def _assigned(self, init: list[cst.FunctionDef]) -> Iterator[Stored]:
        """`self.x = value` (also `self.a, self.b = a, b` and `self.x.y = value`) and `self.x[k] = value` in
        the methods `init`."""
        for fn in init:
            for name, bindings in self.ctx.bindings.get(fn, {}).items():
                if name.startswith("self."):
                    for binding in bindings:
                        yield self._bound_value(binding), binding.node, name.split(".")[1]
            for assign in self.ctx.nodes_within(cst.Assign, fn):
                for target in assign.targets:
                    container = dotted(target.target.value) if isinstance(target.target, cst.Subscript) else None
                    if container is not None and container.startswith("self."):
                        yield assign.value, assign, container.split(".")[1]

    def _added(self, init: list[cst.FunctionDef]) -> Iterator[Stored]:
        """Modules the methods `init` add to the instance or to a container on it: `self.blocks.append(b)`,
        `self.heads.extend([...])`, `self.add_module(name, m)`, `setattr(self, name, m)`."""
        for fn in init:
            for call in self.ctx.definitions.calls_in(fn):
                args = positional_args(call)
                label = dotted(receiver(call)) if receiver(call) is not None else None
                method = call_name(call)
                if self.ctx.names.is_builtin(call.func, "setattr") and len(args) == 3 and dotted(args[0]) == "self":
                    yield args[2], call, string_value(args[1])
                elif label == "self" and method in _SELF_REGISTERING_METHODS:
                    value = argument(call, 1, _SELF_REGISTERING_METHODS[method])
                    yield value, call, string_value(argument(call, 0, "name"))
                elif label is not None and label.startswith("self.") and method in _REGISTERING_METHODS:
                    attribute = label.split(".")[1]
                    if any(a.star for a in call.args) or not args:
                        yield None, call, attribute
                    elif method in ("extend", "update"):
                        for item in _literal_items(args[0]) or [None]:
                            yield item, call, attribute
                    else:
                        yield args[-1], call, attribute

    def _bound_value(self, binding: Binding) -> cst.BaseExpression | None:
        """The value a binding of `self.x` gives it, also in `self.a, self.b = a, b`."""
        if binding.value is not None or not isinstance(binding.node, cst.Assign):
            return binding.value
        value = binding.node.value
        for target in binding.node.targets:
            elements = target.target.elements if isinstance(target.target, (cst.Tuple, cst.List)) else ()
            if isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(elements):
                for element, given in zip(elements, value.elements):
                    if dotted(element.value) == binding.name and not isinstance(given, cst.StarredElement):
                        return given.value
        return None

    def _empty_container(self, value: cst.BaseExpression | None, at: cst.CSTNode) -> bool:
        """`nn.ModuleList()`, `nn.Sequential()`: a container built with nothing in it."""
        module = self.value(value, at) if isinstance(value, cst.Call) else None
        return module is not None and module.kind == "torch" and not value.args and (
            (module.qualname or "").rsplit(".", 1)[-1] in _CONTAINERS)

    def _part_mode(self, value: cst.BaseExpression | None, at: cst.CSTNode) -> ModeDependence:
        """A value stored on a module: a module (its mode dependence), plain data (numbers, tensors,
        parameters: none), or something the file does not show (unknown)."""
        if value is None:
            return UNKNOWN_MODE_DEPENDENCE
        if self.value(value, at) is not None:
            return self.mode_dependence(value, at)
        return SAME_IN_BOTH_MODES if self._plain_data(value, at) else UNKNOWN_MODE_DEPENDENCE

    def _training_read(self, read: cst.Attribute) -> cst.CSTNode:
        """Where `self.training` is read, for a message: the call it is passed to
        (`F.dropout(x, training=self.training)`), else the read itself."""
        parent = self.ctx.parents.get(read)
        call = self.ctx.parents.get(parent) if isinstance(parent, cst.Arg) else None
        return call if isinstance(call, cst.Call) else read

    def _plain_data(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Does `expr` hold no module: literals, numbers, tensors, parameters, and names and same-file call
        sites' arguments that give only such values?"""
        key = (expr, at, *self._instances)
        if key not in self._plain:
            if key in self._active_plain or len(self._active_plain) > _MAX_DEPTH:
                return False
            self._active_plain.add(key)
            try:
                self._plain[key] = self._read_plain_data(expr, at)
            finally:
                self._active_plain.discard(key)
        return self._plain[key]

    def _read_plain_data(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        plain = self._plain_data
        if isinstance(expr, _LITERALS) or isinstance(expr, cst.Name) and expr.value in ("True", "False", "None"):
            return True
        if isinstance(expr, (cst.Tuple, cst.List, cst.Set)):
            return all(plain(e.value, at) for e in expr.elements)
        if isinstance(expr, cst.Dict):
            return all(isinstance(e, cst.DictElement) and plain(e.value, at) for e in expr.elements)
        if isinstance(expr, cst.Comparison):
            return True
        if isinstance(expr, cst.UnaryOperation):
            return plain(expr.expression, at)
        if isinstance(expr, (cst.BinaryOperation, cst.BooleanOperation)):
            return plain(expr.left, at) and plain(expr.right, at)
        if isinstance(expr, cst.Subscript):
            return plain(expr.value, at)
        if isinstance(expr, cst.Call):
            return self._plain_call(expr, at)
        if isinstance(expr, cst.Attribute):
            qualname = self.ctx.names.qualname(expr)
            if qualname is not None:  # `torch.float32`, `math.pi`, a class or function of theirs
                return qualname.startswith(("torch.", "math.", "numpy.")) and not _is_library_model_name(qualname)
            cls = self.enclosing_class(at) if dotted(expr.value) == "self" else None
            assigned = self._attribute_assignments(cls, expr.attr.value) if cls is not None else []
            return bool(assigned) and all(plain(value, node) for value, node in assigned)
        if isinstance(expr, cst.Name):
            return self._plain_name(expr, at)
        return False

    def _plain_call(self, call: cst.Call, at: cst.CSTNode) -> bool:
        qualname = self.ctx.names.callee(call)
        if qualname is not None:
            parts = qualname.split(".")
            return qualname.startswith(_DATA_LIBRARIES) or qualname in _DATA_CLASSES or (
                parts[0] == "torch" and len(parts) == 2 and qualname not in _TORCH_FUNCTIONS_GIVING_MODULES)
        if any(self.ctx.names.is_builtin(call.func, name) for name in _DATA_BUILTINS):
            return True
        if any(self.ctx.names.is_builtin(call.func, name) for name in _CONTAINER_BUILTINS):
            return all(self._plain_data(a.value, at) for a in call.args)
        owner = receiver(call)
        return owner is not None and self._plain_data(owner, at)  # `shape.numel()`, `"{}".format(n)`

    def _plain_name(self, name: cst.Name, at: cst.CSTNode) -> bool:
        binding = self.ctx.flow.last_binding(name.value, at)
        if binding is None:
            return False
        if isinstance(binding.node, cst.Param):
            param = binding.node
            fn = self._function_of(param)
            sites = self._calls_giving_parameters(fn) if fn is not None else None
            return bool(sites) and all(self._plain_argument(site, fn, param) for site in sites)
        if isinstance(binding.node, cst.For) and binding.value is None:
            return self._plain_data(binding.node.iter, binding.node)
        return binding.value is not None and not isinstance(binding.node, cst.WithItem) and \
            self._plain_data(binding.value, binding.node)

    def _plain_argument(self, site: cst.Call, fn: cst.FunctionDef, param: cst.Param) -> bool:
        """Does `site` pass `param` plain data (or leave it at a plain default)?"""
        passed = self.ctx.definitions.argument_for(site, fn, param)
        if passed is not None:
            return self._plain_data(passed, site)
        return param.default is not None and not any(a.star for a in site.args) and \
            self._plain_data(param.default, fn)

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

    def _forward_activation(self, cls: cst.ClassDef, element: int | None = None) -> Activation | None:
        """The activation a same-file class's `forward` returns from, where every return agrees; with
        `element`, that of the element at that place of a returned tuple (`return probs, features`)."""
        if (cls, element) in self._class_layers:
            return self._class_layers[(cls, element)]
        self._class_layers[(cls, element)] = None  # guards recursion
        forward = next(iter(self.ctx.definitions.methods_named(cls, "forward")), None)
        returns = [r for r in self.ctx.returns_of(forward)
                   if r.value is not None] if forward is not None else []
        values = [(r.value if element is None else _tuple_element(r.value, element), r) for r in returns]
        found = [self.activation_of(value, r) if value is not None else None for value, r in values]
        result = found[0] if found and all(a is not None and a.kind == found[0].kind for a in found) else None
        self._class_layers[(cls, element)] = result
        return result

    def _unpacked_output(self, name: str, at: cst.CSTNode) -> tuple[cst.Call, int] | None:
        """`probs, features = model(x)`: the call whose returned tuple `name` is unpacked from, and its place."""
        binding = self.ctx.flow.last_binding(name, at)
        node = binding.node if binding is not None else None
        if not isinstance(node, cst.Assign) or len(node.targets) != 1 or not isinstance(node.value, cst.Call):
            return None
        target = node.targets[0].target
        if not isinstance(target, (cst.Tuple, cst.List)) or any(isinstance(e, cst.StarredElement)
                                                                 for e in target.elements):
            return None
        place = next((i for i, e in enumerate(target.elements) if isinstance(e.value, cst.Name)
                      and e.value.value == name), None)
        return (node.value, place) if place is not None else None

    def activation_of(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None,
                      depth: int = 0) -> Activation | None:
        """The activation whose output `expr` holds: `F.softmax(x)`, `x.softmax(1)`, `nn.Softmax()(x)`,
        the output of a model ending in one, through names and reshaping methods."""
        at = at if at is not None else expr
        if depth > _MAX_DEPTH:
            return None
        name = read_name(expr)
        if name is not None:
            held = self.ctx.flow.value_at(name, at)
            if held is not None:
                return self.activation_of(*held, depth + 1)
            unpacked = self._unpacked_output(name, at)
            module = self.forward_of(unpacked[0]) if unpacked is not None else None
            cls = module.unwrapped().cls if module is not None else None
            return self._forward_activation(cls, unpacked[1]) if cls is not None else None
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


def _tuple_element(value: cst.BaseExpression, place: int) -> cst.BaseExpression | None:
    """The element at `place` of a tuple expression (`return probs, features`), None for anything else."""
    if not isinstance(value, cst.Tuple) or any(isinstance(e, cst.StarredElement) for e in value.elements):
        return None
    return value.elements[place].value if place < len(value.elements) else None
