"""Keras models: what a model's output comes out of, and where a cross-entropy loss meets it.

A model is found where the file builds it: `Sequential([...])` and its `.add(...)` chain, the functional
API (`Model(inputs, outputs)` with `outputs = Dense(10, activation="softmax")(x)`), a same-file subclass
of `keras.Model` (what its `call` returns: `self.out(x)`, `tf.nn.softmax(logits)`), `keras.applications.*`
(`classifier_activation`, "softmax" by default; unknown without a top), a same-file builder function whose
every `return` gives a model, a name or `self.x` bound to one of these. Spellings are merged by
`lintloop.analysis.names` (`keras`, `tf.keras`, `tf_keras`), so this is Keras 2 and 3 alike; which one a
call means is `ctx.tf.keras_major`.

An output's activation is "softmax", "sigmoid", "linear" (a layer with no activation: logits) or another
activation's name; unknown (None) wherever the file does not show it (a `Lambda`, a layer built from a
variable, a model loaded from disk). Layers that keep their input's values (`Dropout`, `Flatten`,
`Reshape`, a `tf.cast`) are looked through.

Losses: `compile(loss=...)` (a string, a class, a function) on a model, and a loss object or function
called on a value (`loss_fn(y, model(x))`). Only the cross-entropies whose `from_logits` matters are
described (`CrossEntropy`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import libcst as cst

from lintloop.analysis.base import Analysis, computed
from lintloop.analysis.nodes import argument, call_name, keyword_arg, positional_args, read_name, receiver, string_value

if TYPE_CHECKING:
    from lintloop.analysis.context import FileContext

_SEQUENTIAL = {"keras.Sequential", "keras.models.Sequential"}
_FUNCTIONAL = {"keras.Model", "keras.models.Model"}
_MODEL_BASES = _FUNCTIONAL | {"keras.layers.Layer"}
# Calls that return a copy of the model they are given.
_MODEL_COPIES = {"keras.models.clone_model"}
# Activation functions, by canonical name.
_ACTIVATION_FUNCTIONS = {
    "keras.activations.softmax": "softmax", "keras.ops.softmax": "softmax", "keras.backend.softmax": "softmax",
    "tensorflow.nn.softmax": "softmax", "tensorflow.math.softmax": "softmax",
    "keras.activations.sigmoid": "sigmoid", "keras.ops.sigmoid": "sigmoid", "keras.backend.sigmoid": "sigmoid",
    "tensorflow.nn.sigmoid": "sigmoid", "tensorflow.math.sigmoid": "sigmoid", "tensorflow.sigmoid": "sigmoid",
    "keras.activations.linear": "linear",
}
# Layers that are an activation by their class.
_ACTIVATION_LAYERS = {"Softmax": "softmax", "ReLU": "relu", "LeakyReLU": "leaky_relu", "PReLU": "prelu",
                      "ELU": "elu"}
# Layers whose output keeps the values of their input (shape, noise and dtype only).
_PASS_THROUGH_LAYERS = {"Dropout", "SpatialDropout1D", "SpatialDropout2D", "SpatialDropout3D", "AlphaDropout",
                        "GaussianDropout", "GaussianNoise", "Flatten", "Reshape", "Permute", "Identity",
                        "ActivityRegularization"}
# Values-keeping functions applied to a model output.
_PASS_THROUGH_FUNCTIONS = {"tensorflow.cast", "keras.ops.cast", "tensorflow.reshape", "keras.ops.reshape",
                           "tensorflow.squeeze", "keras.ops.squeeze", "tensorflow.identity"}
# Cross-entropies whose `from_logits` decides what the loss computes: by class and by function name.
_CROSS_ENTROPY_CLASSES = {
    "CategoricalCrossentropy": "categorical", "SparseCategoricalCrossentropy": "sparse_categorical",
    "BinaryCrossentropy": "binary", "CategoricalFocalCrossentropy": "categorical",
    "BinaryFocalCrossentropy": "binary",
}
_CROSS_ENTROPY_FUNCTIONS = {
    "categorical_crossentropy": "categorical", "sparse_categorical_crossentropy": "sparse_categorical",
    "binary_crossentropy": "binary", "categorical_focal_crossentropy": "categorical",
    "binary_focal_crossentropy": "binary",
}
CLASS_OF_FUNCTION = {
    "categorical_crossentropy": "CategoricalCrossentropy",
    "sparse_categorical_crossentropy": "SparseCategoricalCrossentropy",
    "binary_crossentropy": "BinaryCrossentropy",
    "categorical_focal_crossentropy": "CategoricalFocalCrossentropy",
    "binary_focal_crossentropy": "BinaryFocalCrossentropy",
}
# Where the prediction and `from_logits` are passed positionally: loss functions (y_true, y_pred,
# from_logits), `keras.backend` ones (target, output, from_logits).
_LOSS_MODULES = ("keras.losses.", "keras.metrics.", "keras.backend.")
_MAX_DEPTH = 16


@dataclass(frozen=True)
class Output:
    """What a value comes out of: its activation, and the layer or call that applies it."""

    activation: str  # "softmax" | "sigmoid" | "linear" | another activation's name
    node: cst.CSTNode = field(repr=False)  # the layer constructor, activation call or application call
    # The Keras layer constructor whose output it is (a `dtype=` can be given there); None for a function.
    layer: cst.Call | None = field(default=None, repr=False)


@dataclass(frozen=True)
class CrossEntropy:
    """A Keras cross-entropy loss: its kind, whether it expects logits, and where it is spelled."""

    kind: str  # "categorical" | "sparse_categorical" | "binary"
    from_logits: bool | None  # None when the file does not show it (a variable)
    node: cst.CSTNode = field(repr=False)  # the string, the constructor or function call, the function reference
    spelling: str  # "string" | "class" | "function" | "reference"
    name: str  # the class or function name: `SparseCategoricalCrossentropy`, `binary_crossentropy`


@dataclass(frozen=True)
class LossUse:
    """A cross-entropy applied to a value whose output the file shows."""

    loss: CrossEntropy
    output: Output
    site: cst.CSTNode = field(repr=False)  # the `compile(...)` call or the loss call
    prediction: cst.BaseExpression | None = field(default=None, repr=False)  # y_pred of a loss call


def _layer_name(qualname: str | None) -> str | None:
    """`Dense` for `keras.layers.Dense` / `keras.layers.core.Dense`, else None."""
    if qualname and qualname.startswith("keras.layers.") and qualname.rsplit(".", 1)[-1][:1].isupper():
        return qualname.rsplit(".", 1)[-1]
    return None


def _application_name(qualname: str | None) -> bool:
    """`keras.applications.ResNet50`, `keras.applications.resnet50.ResNet50` (not `preprocess_input`)."""
    return bool(qualname) and qualname.startswith("keras.applications.") and qualname.rsplit(".", 1)[-1][:1].isupper()


def call_with_keyword(module: cst.Module, call: cst.Call, keyword: str, value: str) -> str:
    """`call`'s code with `keyword=value`: the existing argument's value replaced, or the argument added."""
    args = list(call.args)
    new_arg = cst.Arg(cst.parse_expression(value), keyword=cst.Name(keyword), equal=cst.AssignEqual(
        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))
    for i, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == keyword:
            args[i] = arg.with_changes(value=new_arg.value)
            return module.code_for_node(call.with_changes(args=args))
    if args:
        last = args[-1]
        trailing = last.comma if isinstance(last.comma, cst.Comma) else cst.MaybeSentinel.DEFAULT
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        new_arg = new_arg.with_changes(comma=trailing)
    return module.code_for_node(call.with_changes(args=[*args, new_arg]))


class KerasModels(Analysis):
    asks = frozenset({"calls", "definitions", "flow"})

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._active: set[tuple[int, int]] = set()
        self._class_outputs: dict[cst.ClassDef, Output | None] = {}

    # ----- classes ---------------------------------------------------------------------------
    @computed
    def model_classes(self) -> set[cst.ClassDef]:
        """Same-file subclasses of `keras.Model` (or `keras.layers.Layer`), directly or through others."""
        found: set[cst.ClassDef] = set()
        changed = True
        while changed:
            changed = False
            for cls in self.ctx.nodes(cst.ClassDef):
                if cls not in found and any(self._is_model_base(b.value, found) for b in cls.bases):
                    found.add(cls)
                    changed = True
        return found

    def _is_model_base(self, base: cst.BaseExpression, known: set[cst.ClassDef]) -> bool:
        if self.ctx.names.qualname(base) in _MODEL_BASES:
            return True
        local = self.ctx.definitions.local_class(base)
        return local is not None and local in known

    def _method(self, cls: cst.ClassDef, name: str) -> cst.FunctionDef | None:
        for statement in cls.body.body:
            if isinstance(statement, cst.FunctionDef) and statement.name.value == name:
                return statement
        for base in cls.bases:
            parent = self.ctx.definitions.local_class(base.value)
            if parent is not None and parent is not cls:
                found = self._method(parent, name)
                if found is not None:
                    return found
        return None

    def class_output(self, cls: cst.ClassDef) -> Output | None:
        """What a subclassed model's `call` returns, when every `return` agrees on the activation."""
        if cls in self._class_outputs:
            return self._class_outputs[cls]
        self._class_outputs[cls] = None  # guards recursion
        method = self._method(cls, "call")
        returns = [r for r in self.ctx.returns_of(method)
                   if r.value is not None] if method is not None else []
        found = [self.output_of(r.value, r) for r in returns]
        result = found[0] if found and all(o is not None and o.activation == found[0].activation
                                           for o in found) else None
        self._class_outputs[cls] = result
        return result

    # ----- models ----------------------------------------------------------------------------
    def model_output(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None) -> Output | None:
        """The output of the Keras model `expr` holds at `at` (a model, not a tensor)."""
        at = at if at is not None else expr
        key = (id(expr), id(at))
        if key in self._active or len(self._active) > _MAX_DEPTH:
            return None
        self._active.add(key)
        try:
            return self._model_output(expr, at)
        finally:
            self._active.discard(key)

    def _model_output(self, expr: cst.BaseExpression, at: cst.CSTNode) -> Output | None:
        ctx = self.ctx
        if isinstance(expr, cst.Name) and expr.value == "self":
            cls = next((a for a in ctx.ancestors(at) if isinstance(a, cst.ClassDef)), None)
            return self.class_output(cls) if cls in self.model_classes else None
        if isinstance(expr, cst.Name):
            added = self._added_layers(expr, at)
            if added:
                return self._sequential_output(added)
            held = ctx.flow.value_at(expr.value, at)
            return self.model_output(*held) if held is not None else None
        if isinstance(expr, cst.Attribute):  # `self.model`: assigned one model in the class
            value = ctx.flow.resolve_value(expr, at)
            return self.model_output(value, value) if value is not expr else None
        if not isinstance(expr, cst.Call):
            return None
        qualname = ctx.names.callee(expr)
        if qualname in _SEQUENTIAL:
            layers = argument(expr, 0, "layers")
            if isinstance(layers, (cst.List, cst.Tuple)) and layers.elements:
                return self._sequential_output([(e.value, expr) for e in layers.elements])
            return None
        if qualname in _FUNCTIONAL:
            outputs = argument(expr, 1, "outputs")
            if isinstance(outputs, (cst.List, cst.Tuple)):
                outputs = outputs.elements[0].value if len(outputs.elements) == 1 else None
            return self.output_of(outputs, expr) if outputs is not None else None
        if _application_name(qualname):
            top = keyword_arg(expr, "include_top")
            if isinstance(top, cst.Name) and top.value == "False":
                return None
            activation = keyword_arg(expr, "classifier_activation")
            kind = "softmax" if activation is None else self._activation_value(activation, expr)
            return Output(kind, expr) if kind is not None else None
        if qualname in _MODEL_COPIES:
            model = argument(expr, 0, "model")
            return self.model_output(model, at) if model is not None else None
        if qualname is not None:
            return None
        local = ctx.definitions.local_class(expr.func)
        if local is not None:
            return self.class_output(local) if local in self.model_classes else None
        functions = ctx.calls.local_functions(expr.func)
        if len(functions) == 1:
            returns = ctx.returns_of(functions[0])
            if not returns or any(r.value is None for r in returns):
                return None
            found = [self.model_output(r.value, r) for r in returns]
            return found[0] if all(o is not None and o.activation == found[0].activation for o in found) else None
        return None

    def _added_layers(self, name: cst.Name, at: cst.CSTNode) -> list[tuple[cst.BaseExpression, cst.CSTNode]]:
        """`model.add(layer)` calls on a `Sequential` bound to `name` before `at`: each layer and its `add`, in
        order."""
        ctx = self.ctx
        binding = ctx.flow.last_binding(name.value, at)
        if binding is None or not isinstance(binding.value, cst.Call) or ctx.names.callee(binding.value) not in _SEQUENTIAL:
            return []
        scope = ctx.scope_of(binding.node)
        adds = [c for c in ctx.definitions.named("add").between(ctx.order[binding.node], ctx.order[at] - 1)
                if isinstance(receiver(c), cst.Name) and receiver(c).value == name.value
                and ctx.scope_of(c) is scope and positional_args(c)]
        return [(positional_args(add)[0], add) for add in adds]

    def _sequential_output(self, layers: list[tuple[cst.BaseExpression, cst.CSTNode]]) -> Output | None:
        """The last layer of a `Sequential` list that decides its output (pass-through layers and linear
        `Activation` casts skipped)."""
        for layer, at in reversed(layers):
            made = self.ctx.flow.constructed_by(layer, at)
            name = _layer_name(made[1]) if made else None
            if name in _PASS_THROUGH_LAYERS or made is not None and self._is_linear_activation(made[0], name):
                continue
            return self.layer_output(layer, at)
        return None

    def layer_output(self, layer: cst.BaseExpression, at: cst.CSTNode) -> Output | None:
        """The output activation of a layer or model used as a layer (`Sequential` element, `.add` argument)."""
        made = self.ctx.flow.constructed_by(layer, at)
        if made is not None and _layer_name(made[1]) is not None:
            return self._constructed_layer(made[0], _layer_name(made[1]))
        return self.model_output(layer, at)

    def _constructed_layer(self, call: cst.Call, name: str) -> Output | None:
        if name == "Activation":
            activation = argument(call, 0, "activation")
            kind = self._activation_value(activation, call) if activation is not None else None
            return Output(kind, call, call) if kind is not None else None
        if name in _ACTIVATION_LAYERS:
            return Output(_ACTIVATION_LAYERS[name], call, call)
        activation = keyword_arg(call, "activation")
        if activation is None:
            # Layers whose `activation` defaults to none: Dense, EinsumDense, Conv*, *Conv*Transpose.
            if name in ("Dense", "EinsumDense") or "Conv" in name:
                positional = positional_args(call)
                # `Dense(units, activation)`: the second positional argument; Conv: the fourth or later.
                if name == "Dense" and len(positional) >= 2:
                    kind = self._activation_value(positional[1], call)
                    return Output(kind, call, call) if kind is not None else None
                if "Conv" in name and len(positional) > 3:
                    return None
                return Output("linear", call, call)
            return None
        kind = self._activation_value(activation, call)
        return Output(kind, call, call) if kind is not None else None

    def _activation_value(self, expr: cst.BaseExpression, at: cst.CSTNode) -> str | None:
        """"softmax" for `"softmax"`, `keras.activations.softmax`, `tf.nn.softmax`; "linear" for `None`."""
        value = self.ctx.flow.resolve_value(expr, at)
        if isinstance(value, cst.Name) and value.value == "None":
            return "linear"
        text = string_value(value)
        if text is not None:
            return text.lower()
        qualname = self.ctx.names.qualname(value)
        if qualname in _ACTIVATION_FUNCTIONS:
            return _ACTIVATION_FUNCTIONS[qualname]
        if qualname is not None and qualname.startswith("keras.activations."):
            return qualname.rsplit(".", 1)[-1]
        return None

    # ----- tensors -----------------------------------------------------------------------------
    def output_of(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None, depth: int = 0) -> Output | None:
        """What the tensor `expr` comes out of: a layer applied to a value (`Dense(10)(x)`, `self.head(x)`),
        an activation function (`tf.nn.softmax(x)`), a model called on a value (`model(x)`)."""
        at = at if at is not None else expr
        if depth > _MAX_DEPTH:
            return None
        ctx = self.ctx
        name = read_name(expr)
        if name is not None:
            held = ctx.flow.value_at(name, at)
            return self.output_of(*held, depth + 1) if held is not None else None
        if not isinstance(expr, cst.Call):
            return None
        qualname = ctx.names.callee(expr)
        if qualname in _ACTIVATION_FUNCTIONS:
            return Output(_ACTIVATION_FUNCTIONS[qualname], expr)
        if qualname in _PASS_THROUGH_FUNCTIONS:
            inner = argument(expr, 0, "x")
            return self.output_of(inner, at, depth + 1) if inner is not None else None
        if qualname is not None:
            return None
        func = expr.func
        if isinstance(func, cst.Call):  # `Dense(10, activation="softmax")(x)`
            name = _layer_name(ctx.names.callee(func))
            if name is not None:
                return self._applied_layer(func, name, expr, at, depth)
            return self.model_output(func, at)
        if isinstance(func, cst.Attribute) and func.attr.value in ("predict", "predict_on_batch", "call"):
            return None  # numpy probabilities, or a model's raw `call`
        made = ctx.flow.constructed_by(func, at)
        if made is not None and _layer_name(made[1]) is not None:
            return self._applied_layer(made[0], _layer_name(made[1]), expr, at, depth)
        if isinstance(func, (cst.Name, cst.Attribute)) and not ctx.calls.local_functions(func):
            return self.model_output(func, at)
        return None

    def _applied_layer(self, layer: cst.Call, name: str, applied: cst.Call, at: cst.CSTNode,
                       depth: int) -> Output | None:
        if name in _PASS_THROUGH_LAYERS or self._is_linear_activation(layer, name):
            inputs = argument(applied, 0, "inputs")
            return self.output_of(inputs, at, depth + 1) if inputs is not None else None
        return self._constructed_layer(layer, name)

    def _is_linear_activation(self, layer: cst.Call, name: str | None) -> bool:
        """`Activation("linear")` / `Activation(None)`: an identity (with `dtype="float32"`, the mixed-precision
        cast of a float16 output), so what the model outputs comes from the layer below."""
        if name != "Activation":
            return False
        activation = argument(layer, 0, "activation")
        return activation is not None and self._activation_value(activation, layer) == "linear"

    # ----- models built in the file, and the losses applied to them ----------------------------------
    @computed
    def model_constructors(self) -> list[cst.Call]:
        """Every `Sequential(...)`, `Model(...)` and `keras.applications.*(...)` call in the file."""
        found = []
        for call in self.ctx.nodes(cst.Call):
            qualname = self.ctx.names.callee(call)
            if qualname in _SEQUENTIAL or qualname in _FUNCTIONAL or _application_name(qualname):
                found.append(call)
        return found

    def model_outputs(self) -> list[Output]:
        """The output of every model the file builds (constructors, `.add` chains, subclassed models)."""
        outputs: list[Output] = []
        for call in self.model_constructors:
            statement = self.ctx.statement_of(call)
            target = None
            if isinstance(statement, cst.SimpleStatementLine) and isinstance(statement.body[0], cst.Assign):
                assign = statement.body[0]
                if assign.value is call and isinstance(assign.targets[0].target, cst.Name):
                    target = assign.targets[0].target
            added = self._added_layers(target, _end_of_scope(self.ctx, call)) if target is not None else []
            output = self._sequential_output(added) if added else self.model_output(call, call)
            if output is not None:
                outputs.append(output)
        for cls in self.model_classes:
            if self._method(cls, "call") is not None:
                output = self.class_output(cls)
                if output is not None:
                    outputs.append(output)
        return outputs

    def cross_entropy(self, expr: cst.BaseExpression, at: cst.CSTNode) -> CrossEntropy | None:
        """The Keras cross-entropy `expr` names: `"sparse_categorical_crossentropy"`, a loss object (or a
        name bound to one), a loss function reference."""
        ctx = self.ctx
        value = ctx.flow.resolve_value(expr, at)
        text = string_value(value)
        if text is not None:
            kind = _CROSS_ENTROPY_FUNCTIONS.get(text)
            return CrossEntropy(kind, False, value, "string", text) if kind else None
        if isinstance(value, cst.Call):
            qualname = ctx.names.callee(value)
            last = (qualname or "").rsplit(".", 1)[-1]
            if qualname and qualname.startswith("keras.losses.") and last in _CROSS_ENTROPY_CLASSES:
                return CrossEntropy(_CROSS_ENTROPY_CLASSES[last], self._from_logits(value, 0), value, "class", last)
            return None
        qualname = ctx.names.qualname(value)
        last = (qualname or "").rsplit(".", 1)[-1]
        if qualname and qualname.startswith(_LOSS_MODULES) and last in _CROSS_ENTROPY_FUNCTIONS:
            return CrossEntropy(_CROSS_ENTROPY_FUNCTIONS[last], False, value, "reference", last)
        return None

    def _from_logits(self, call: cst.Call, position: int) -> bool | None:
        value = argument(call, position, "from_logits")
        if value is None:
            return False
        value = self.ctx.flow.resolve_value(value, call)
        if isinstance(value, cst.Name) and value.value in ("True", "False"):
            return value.value == "True"
        return None

    def loss_call(self, call: cst.Call) -> tuple[CrossEntropy, cst.BaseExpression] | None:
        """(the loss, its prediction) for a call computing a Keras cross-entropy: `loss_fn(y, out)`,
        `keras.losses.sparse_categorical_crossentropy(y, out, from_logits=True)`."""
        ctx = self.ctx
        qualname = ctx.names.callee(call)
        last = (qualname or "").rsplit(".", 1)[-1]
        if qualname and qualname.startswith(_LOSS_MODULES) and last in _CROSS_ENTROPY_FUNCTIONS:
            prediction = argument(call, 1, "output" if qualname.startswith("keras.backend.") else "y_pred")
            loss = CrossEntropy(_CROSS_ENTROPY_FUNCTIONS[last], self._from_logits(call, 2), call, "function", last)
            return (loss, prediction) if prediction is not None else None
        if qualname is not None:
            return None
        loss = self.cross_entropy(call.func, call)
        if loss is None or loss.spelling != "class":
            return None
        prediction = argument(call, 1, "y_pred")
        return (loss, prediction) if prediction is not None else None

    @computed
    def loss_uses(self) -> list[LossUse]:
        """Every cross-entropy applied to a value whose output the file shows: in `model.compile(loss=...)`
        (the model's output) and in a loss call (its `y_pred`)."""
        uses = []
        for call in self.ctx.nodes(cst.Call):
            if call_name(call) == "compile" and receiver(call) is not None:
                loss_expr = argument(call, 1, "loss")
                loss = self.cross_entropy(loss_expr, call) if loss_expr is not None else None
                output = self.model_output(receiver(call), call) if loss is not None else None
                if loss is not None and output is not None:
                    uses.append(LossUse(loss, output, call))
                continue
            found = self.loss_call(call)
            if found is not None:
                output = self.output_of(found[1], call)
                if output is not None:
                    uses.append(LossUse(found[0], output, call, found[1]))
        return uses


def _end_of_scope(ctx: FileContext, node: cst.CSTNode) -> cst.CSTNode:
    """The last node of the function (or module) holding `node`: a point after every statement in it."""
    scope = ctx.scope_of(node)
    last = scope.body.body[-1] if isinstance(scope, cst.FunctionDef) else scope.body[-1]
    while True:
        inner = getattr(last, "body", None)
        if isinstance(inner, cst.BaseSuite) and inner.body:
            last = inner.body[-1]
        elif isinstance(last, cst.SimpleStatementLine):
            return last.body[-1]
        else:
            return last
