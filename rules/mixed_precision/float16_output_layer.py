"""LL601 float16-output-layer: a softmax/sigmoid output layer computing in float16 under `mixed_float16`."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.keras_models import Output, call_with_keyword
from lintloop.analysis.nodes import keyword_arg, names_in, string_value
from lintloop.rule import Example, FixSpec, Replacement, Rule
from lintloop.screen import Needs

_SATURATING = ("softmax", "sigmoid")
# `dtype=` values that make a layer compute in float32.
_FLOAT32 = {"float32", "tensorflow.float32", "tensorflow.dtypes.float32", "keras.mixed_precision.Policy",
            "keras.DTypePolicy", "keras.mixed_precision.DTypePolicy", "numpy.float32"}


class Float16OutputLayer(Rule):
    code = "LL601"
    name = "float16-output-layer"
    description = "a softmax/sigmoid output layer not in float32 under `mixed_float16`"
    frameworks = ("tf",)
    kind = "bug"
    fix_kind = "safe"
    probe = "effect"
    # Seeds: the unit setting the policy; the units building a model (a `Sequential`/`Model`/application
    # call, an `add`, a layer); a subclassed model's `call` comes with its class.
    needs = Needs(file=(("text:float16",), ("name:set_global_policy", "name:set_dtype_policy", "name:set_policy"),
                        ("text:oftmax", "text:igmoid", "text:applications")),
                  statement=(("name:mixed_precision", "name:set_global_policy", "name:set_dtype_policy",
                              "name:Sequential", "name:Model", "name:applications", "call:add", "name:layers",
                              "name:Dense", "name:Activation", "name:Softmax"),))
    summary = ("The global Keras policy is `mixed_float16` (set in the file: `set_global_policy`, "
               "`set_dtype_policy`, a `Policy(\"mixed_float16\")`) and a model's output layer applies a softmax "
               "or sigmoid (`Dense`/`Conv2D`/… with `activation=\"softmax\"`/`\"sigmoid\"`, `Activation(\"softmax\")`, "
               "`Softmax()`, or a `keras.applications` model's classifier, softmax by default) without "
               "`dtype=\"float32\"`. The output is that of a `Sequential` (or its last `.add`), a functional "
               "`Model`'s `outputs`, or what a subclassed model's `call` returns; softmax/sigmoid layers inside "
               "a model (squeeze-excite gates, attention) are not outputs. A layer built before the policy is "
               "set is not flagged: in the same scope, in a notebook's earlier cell, or by a class's "
               "`__init__` when a later method sets it. Keras 2 and 3.")
    why = ("Under `mixed_float16` every layer computes in float16 unless given its own dtype. A softmax or "
           "sigmoid in float16 rounds probabilities near 1 to exactly 1 and tiny ones to 0 (float16 has 11 bits "
           "of mantissa and underflows below 6e-8), so the model's output saturates, and a loss computed from "
           "it (the log of an exact 0 or 1, clipped) loses its gradient signal. The Keras mixed-precision guide "
           "makes the output layer float32 for this reason.")
    symptom = ("No error. Measured (TF 2.21, Keras 3.15): under `mixed_float16`, `Dense(4, "
               "activation=\"softmax\")` on logits [12, 0.5, 0.1, 0] outputs float16 [1.0, 1.01e-05, 6.8e-06, "
               "6.1e-06] (float32: 0.99998 for the top class), and on [20, 0, 0, 0] exactly [1, 0, 0, 0] "
               "(float32: [1.0, 2.1e-09, 2.1e-09, 2.1e-09]); a float16 sigmoid gives exactly 1.0 at 8 and exactly "
               "0.0 at -18; `keras.applications.MobileNetV2` outputs float16. Under `fit` the training loss was "
               "the same as with a float32 output layer (0.2558 both in LL601_bad.py): what "
               "saturates is the model's output — predictions, calibrated probabilities, thresholds, the "
               "exported model. LL601_bad.py prints `saturated float16 output: 22 of 256 rows have a "
               "probability of exactly 1.0, 2 probabilities are exactly 0`; the fixed program has none. "
               "`mixed_bfloat16` has float32's exponent range (8 bits of mantissa: also exactly 1.0 at 12, but "
               "no underflow to 0; not flagged, as the catalog says).")
    remedy = ("Give the output layer `dtype=\"float32\"` (`Dense(10, activation=\"softmax\", "
              "dtype=\"float32\")`), or end the model in `Activation(\"softmax\", dtype=\"float32\")` after a "
              "float16 `Dense`. For a `keras.applications` model: `classifier_activation=None`, then a float32 "
              "`Activation(\"softmax\", dtype=\"float32\")` on its output.")
    fix_safety = ("Safe: adds `dtype=\"float32\"` to the output layer: the layer computes in float32 (its weights "
                  "are float32 under a mixed policy already), the model's output dtype becomes float32 and its "
                  "values are the unsaturated ones. No fix for `keras.applications` models (no such argument).")
    flagged = (
        Example("""
import tensorflow as tf
from tensorflow import keras
keras.mixed_precision.set_global_policy("mixed_float16")
model = keras.Sequential([
    keras.layers.Conv2D(32, 3, activation="relu"),
    keras.layers.GlobalAveragePooling2D(),
    keras.layers.Dense(10, activation="softmax"),
])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
""", expect="""
7:5-7:49 [safe fix] output layer `keras.layers.Dense(10, activation="softmax")` computes its softmax in
    float16
    help: give it `dtype="float32"`
    note: the global policy is "mixed_float16" (line 3), so its output is float16 and saturates
        (measured: logits [20, 0, 0, 0] give exactly [1, 0, 0, 0]; a top class leading by about 7.6 gets
        exactly 1.0)
""", fix_diff="""
@@ -7 +7 @@
-    keras.layers.Dense(10, activation="softmax"),
+    keras.layers.Dense(10, activation="softmax", dtype="float32"),
"""),
        Example("""
import keras
from keras import layers
policy = keras.mixed_precision.Policy("mixed_float16")
keras.mixed_precision.set_dtype_policy(policy)
inputs = keras.Input(shape=(784,))
x = layers.Dense(4096, activation="relu")(inputs)
x = layers.Dense(10)(x)
outputs = layers.Activation("softmax", name="predictions")(x)
model = keras.Model(inputs=inputs, outputs=outputs)
""", expect="""
8:11-8:59 [safe fix] output layer `layers.Activation("softmax", name="predictions")` computes its
    softmax in float16
    help: give it `dtype="float32"`
    note: the global policy is "mixed_float16" (line 4), so its output is float16 and saturates
        (measured: logits [20, 0, 0, 0] give exactly [1, 0, 0, 0]; a top class leading by about 7.6 gets
        exactly 1.0)
""", fix_diff="""
@@ -8 +8 @@
-outputs = layers.Activation("softmax", name="predictions")(x)
+outputs = layers.Activation("softmax", name="predictions", dtype="float32")(x)
"""),
        Example("""
import tensorflow as tf
tf.keras.mixed_precision.set_global_policy("mixed_float16" if args.fp16 else "float32")
class Detector(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.backbone = tf.keras.layers.Dense(64, activation="relu")
        self.head = tf.keras.layers.Dense(1, activation="sigmoid")
    def call(self, x):
        return self.head(self.backbone(x))
""", expect="""
7:21-7:67 [safe fix] output layer `tf.keras.layers.Dense(1, activation="sigmoid")` computes its sigmoid
    in float16
    help: give it `dtype="float32"`
    note: the global policy is "float32" or "mixed_float16" (line 2), so its output is float16 and
        saturates (measured: logits [20, 0, 0, 0] give exactly [1, 0, 0, 0]; a top class leading by
        about 7.6 gets exactly 1.0)
""", fix_diff="""
@@ -7 +7 @@
-        self.head = tf.keras.layers.Dense(1, activation="sigmoid")
+        self.head = tf.keras.layers.Dense(1, activation="sigmoid", dtype="float32")
"""),
        Example("""
import tensorflow as tf
tf.keras.mixed_precision.set_global_policy("mixed_float16")
def build_model():
    model = tf.keras.Sequential()
    model.add(tf.keras.layers.Dense(128, activation="relu"))
    model.add(tf.keras.layers.Dense(10, activation="softmax", dtype="float16"))
    return model
""", expect="""
6:15-6:79 [safe fix] output layer `tf.keras.layers.Dense(10, activation="softmax",…` computes its
    softmax in float16
    help: give it `dtype="float32"`
    note: the global policy is "mixed_float16" (line 2), so its output is float16 and saturates
        (measured: logits [20, 0, 0, 0] give exactly [1, 0, 0, 0]; a top class leading by about 7.6 gets
        exactly 1.0)
""", fix_diff="""
@@ -6 +6 @@
-    model.add(tf.keras.layers.Dense(10, activation="softmax", dtype="float16"))
+    model.add(tf.keras.layers.Dense(10, activation="softmax", dtype="float32"))
"""),
        Example("""
import keras
keras.mixed_precision.set_global_policy("mixed_float16")
model = keras.applications.EfficientNetB0(weights=None, classes=5)
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
""", expect="""
3:9-3:67 output layer `keras.applications.EfficientNetB0(weights=None,…` computes its softmax in float16
    help: build it with `classifier_activation=None` and add `Activation("softmax", dtype="float32")`
        (the model has no dtype argument for it)
    note: the global policy is "mixed_float16" (line 2), so its output is float16 and saturates
        (measured: logits [20, 0, 0, 0] give exactly [1, 0, 0, 0]; a top class leading by about 7.6 gets
        exactly 1.0)
"""),
        Example("""
import tensorflow as tf
def build_classifier():
    return tf.keras.Sequential([tf.keras.layers.Dense(64, activation="relu"),
                                tf.keras.layers.Dense(10, activation="softmax")])
baseline = build_classifier()
tf.keras.mixed_precision.set_global_policy("mixed_float16")
fast = build_classifier()
""", expect="""
4:33-4:80 [safe fix] output layer `tf.keras.layers.Dense(10, activation="softmax")` computes its softmax
    in float16
    help: give it `dtype="float32"`
    note: the global policy is "mixed_float16" (line 6), so its output is float16 and saturates
        (measured: logits [20, 0, 0, 0] give exactly [1, 0, 0, 0]; a top class leading by about 7.6 gets
        exactly 1.0)
""", fix_diff="""
@@ -4 +4 @@
-                                tf.keras.layers.Dense(10, activation="softmax")])
+                                tf.keras.layers.Dense(10, activation="softmax", dtype="float32")])
"""),
    )
    not_flagged = (
        Example("""
import tensorflow as tf
def build_classifier():
    return tf.keras.Sequential([tf.keras.layers.Dense(64, activation="relu"),
                                tf.keras.layers.Dense(10, activation="softmax")])
classifier = build_classifier()
classifier.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
classifier.fit(x_train, y_train, epochs=5)
tf.keras.mixed_precision.set_global_policy("mixed_float16")
fast = tf.keras.Sequential([tf.keras.layers.Dense(64, activation="relu"),
                            tf.keras.layers.Dense(10, activation="softmax", dtype="float32")])
"""),
        Example("""
import tensorflow as tf
from tensorflow import keras
keras.mixed_precision.set_global_policy("mixed_float16")
inputs = keras.Input(shape=(784,))
x = keras.layers.Dense(4096, activation="relu")(inputs)
x = keras.layers.Dense(10)(x)
outputs = keras.layers.Activation("softmax", dtype="float32", name="predictions")(x)
model = keras.Model(inputs=inputs, outputs=outputs)
"""),
        Example("""
import keras
keras.mixed_precision.set_global_policy("mixed_bfloat16")
model = keras.Sequential([keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10, activation="softmax")])
"""),
        Example("""
import keras
from keras import layers
keras.mixed_precision.set_global_policy("mixed_float16")
def squeeze_excite(x, filters):
    s = layers.GlobalAveragePooling2D(keepdims=True)(x)
    s = layers.Conv2D(filters // 4, 1, activation="relu")(s)
    s = layers.Conv2D(filters, 1, activation="sigmoid")(s)
    return layers.multiply([x, s])
inputs = keras.Input((32, 32, 16))
x = squeeze_excite(inputs, 16)
outputs = layers.Dense(10, dtype="float32")(layers.GlobalAveragePooling2D()(x))
model = keras.Model(inputs, outputs)
"""),
        Example("""
import tensorflow as tf
model = tf.keras.Sequential([tf.keras.layers.Dense(10, activation="softmax")])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
"""),
        Example("""
import tensorflow as tf
def test_float16_dense():
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    layer = tf.keras.layers.Dense(4)
    tf.keras.mixed_precision.set_global_policy("float32")
    model = tf.keras.Sequential([tf.keras.layers.Dense(2, activation="sigmoid")])
"""),
        Example("""
import tensorflow as tf
def build_classifier():
    return tf.keras.Sequential([tf.keras.layers.Dense(64, activation="relu"),
                                tf.keras.layers.Dense(10, activation="softmax")])
class Trainer:
    def __init__(self):
        self.classifier = build_classifier()
        self.classifier.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    def fit_fast_head(self, x, y):
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        head = tf.keras.Sequential([tf.keras.layers.Dense(10, activation="softmax", dtype="float32")])
        head.fit(self.classifier(x), y)
Trainer().fit_fast_head(x_train, y_train)
"""),
    )

    def visit_Module(self, node: cst.Module) -> None:
        setting = self.ctx.mixed_precision.float16_policy
        if setting is None:
            return
        seen: set[cst.CSTNode] = set()
        for output in self.ctx.keras.model_outputs():
            if output.activation not in _SATURATING or output.node in seen or not self._under_float16(output, setting.call):
                continue
            seen.add(output.node)
            layer = output.layer
            if layer is not None:
                if self._computes_in_float32(layer):
                    continue
                self.report(layer, self._headline(output), FixSpec("safe", [Replacement(layer, call_with_keyword(
                                self.ctx.module, layer, "dtype", '"float32"'))], 'add dtype="float32"'),
                            help="give it `dtype=\"float32\"`", note=self._note(output, setting.label, setting.call))
            elif isinstance(output.node, cst.Call):  # a keras.applications model's classifier
                self.report(output.node, self._headline(output),
                            help="build it with `classifier_activation=None` and add "
                                 "`Activation(\"softmax\", dtype=\"float32\")` (the model has no dtype argument for it)",
                            note=self._note(output, setting.label, setting.call))

    def _under_float16(self, output: Output, policy_call: cst.Call) -> bool:
        """Is the float16 policy in effect where the layer is built? Not when, in the layer's own scope, the
        layer comes before it, or the last policy set before the layer is another one (`"float32"`)."""
        ctx = self.ctx
        scope = ctx.scope_of(output.node)
        earlier = [s for s in ctx.mixed_precision.policy_settings
                   if ctx.scope_of(s.call) is scope and ctx.order[s.call] < ctx.order[output.node]]
        if earlier:
            return earlier[-1].float16
        if ctx.scope_of(policy_call) is scope:
            return ctx.order[output.node] > ctx.order[policy_call]
        return not (self._used_only_before(output.node, policy_call)
                    or self._built_by_constructor_first(output.node, policy_call))

    def _built_by_constructor_first(self, layer: cst.CSTNode, policy_call: cst.Call) -> bool:
        """Is the policy set in a method of a class (not `__init__`, nor one it calls) and the layer built
        only by that class's `__init__` (through same-file calls)? An instance's constructor runs before
        its methods: a Trainer that builds its model in `__init__` and sets the policy in `fit`."""
        ctx = self.ctx
        setter = ctx.scope_of(policy_call)
        cls = ctx.definitions.method_class(setter) if isinstance(setter, cst.FunctionDef) else None
        init = next(iter(ctx.definitions.methods_named(cls, "__init__")), None) if cls else None
        if init is None or setter is init or setter in ctx.calls.called_functions(init):
            return False
        return ctx.calls.through_callers(layer, lambda node: ctx.scope_of(node) is init) is not None

    def _used_only_before(self, layer: cst.CSTNode, policy_call: cst.Call) -> bool:
        """Is the layer built in a module-level function or class that the module code uses only before
        the module-level statement setting the policy (a notebook's later cell: a Keras layer takes the
        policy in force when it is constructed)? Uses are followed through the names module code binds
        from them (`hypermodel = SimpleMLP(...)`, `tuner = Tuner(hypermodel)`, `tuner.search(...)`) and
        the definitions that use them (their uses count)."""
        ctx = self.ctx
        if not isinstance(ctx.scope_of(policy_call), cst.Module):
            return False
        top = next((a for a in [layer, *ctx.ancestors(layer)]
                    if isinstance(a, (cst.FunctionDef, cst.ClassDef)) and isinstance(ctx.parents.get(a), cst.Module)),
                   None)
        setting = next((a for a in ctx.ancestors(policy_call) if isinstance(ctx.parents.get(a), cst.Module)), None)
        if top is None or setting is None:
            return False
        names: set[str] = {top.name.value}
        last_use = None
        while True:  # until no name is added: a definition may use one bound further down
            before = len(names)
            for statement in ctx.module.body:
                if statement is top or not names_in(statement) & names:
                    continue
                if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
                    names.add(statement.name.value)  # a helper using it: its uses are uses
                    continue
                last_use = statement if last_use is None or ctx.order[statement] > ctx.order[last_use] else last_use
                names |= {n for target in ctx.nodes_within(cst.AssignTarget, statement) for n in names_in(target.target)}
            if len(names) == before:
                break
        return last_use is not None and ctx.order[last_use] < ctx.order[setting]

    def _computes_in_float32(self, layer: cst.Call) -> bool:
        """`dtype="float32"`, `dtype=tf.float32`, a float32 `Policy`; also a dtype the file does not show
        (a variable: not ours to judge)."""
        dtype = keyword_arg(layer, "dtype")
        if dtype is None:
            return False
        value = self.ctx.flow.resolve_value(dtype, layer)
        text = string_value(value)
        if text is not None:
            return text == "float32"
        if isinstance(value, cst.Call):
            name = self.ctx.names.callee(value)
            argument = value.args[0].value if value.args else None
            return name in _FLOAT32 and string_value(argument) == "float32"
        qualname = self.ctx.names.qualname(value)
        return qualname in _FLOAT32 or qualname is None

    def _headline(self, output: Output) -> str:
        return f"output layer `{self.ctx.snippet(output.node, 48)}` computes its {output.activation} in float16"

    def _note(self, output: Output, policy: str, policy_call: cst.Call) -> str:
        return (f"the global policy is {policy} (line {self.ctx.line_of(policy_call)}), so its output is float16 "
                "and saturates (measured: logits [20, 0, 0, 0] give exactly [1, 0, 0, 0]; a top class leading by "
                "about 7.6 gets exactly 1.0)")
