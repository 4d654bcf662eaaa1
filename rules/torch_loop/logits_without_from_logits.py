"""LL709 logits-without-from-logits: a Keras cross-entropy that expects probabilities, given logits."""

from __future__ import annotations

import ast

import libcst as cst

from lintloop.analysis.keras_models import CLASS_OF_FUNCTION, CrossEntropy, LossUse, call_with_keyword
from lintloop.analysis.nodes import argument, dotted, receiver
from lintloop.rule import Example, FixSpec, Replacement, Rule
from lintloop.screen import Needs, UnitShape

# The Keras cross-entropies, by their class and function names.
_CROSS_ENTROPIES = frozenset({*CLASS_OF_FUNCTION, *CLASS_OF_FUNCTION.values()})
_LOSS_NAMES = tuple(f"name:{n}" for n in sorted(_CROSS_ENTROPIES))


def _names_a_probability_loss(nodes: list[ast.AST]) -> bool:
    """A unit naming a Keras cross-entropy other than as the callee of a call given `from_logits=True`
    (`SparseCategoricalCrossentropy(from_logits=True)`: no loss taking logits for probabilities there; a
    flag the analyses resolve through a name counts as naming one)."""
    excused = {id(node.func) for node in nodes if isinstance(node, ast.Call) and any(
        keyword.arg == "from_logits" and isinstance(keyword.value, ast.Constant) and keyword.value.value is True
        for keyword in node.keywords)}
    return any((isinstance(node, ast.Name) and node.id in _CROSS_ENTROPIES
                or isinstance(node, ast.Attribute) and node.attr in _CROSS_ENTROPIES) and id(node) not in excused
               for node in nodes)


# The calls that train a compiled Keras model; those that only run it forward.
_TRAINING_CALLS = frozenset({"fit", "fit_generator", "train_on_batch"})
_FORWARD_CALLS = frozenset({"evaluate", "evaluate_generator", "predict", "predict_generator", "predict_on_batch",
                            "test_on_batch"})


def _hands_over(value: cst.BaseExpression, name: str) -> bool:
    """Is `value` the object named `name`, or a collection holding it (`Sequential([model, Softmax()])`)?
    (`model.layers`, `model.output` pass parts of it, not the model.)"""
    if isinstance(value, cst.Name):
        return value.value == name
    if isinstance(value, (cst.List, cst.Tuple, cst.Set)):
        return any(_hands_over(element.value, name) for element in value.elements)
    return False


# The screen's token for a unit that may read probabilities as logits.
PROBABILITY_LOSS = UnitShape("probability_loss", _CROSS_ENTROPIES, _names_a_probability_loss)


class LogitsWithoutFromLogits(Rule):
    code = "LL709"
    name = "logits-without-from-logits"
    description = "logits given to a Keras cross-entropy without `from_logits=True`"
    frameworks = ("tf",)
    kind = "bug"
    fix_kind = "unsafe"
    probe = "effect"
    # The loss is spelled in the unit holding the finding (a class or function name, not in a call given
    # `from_logits=True`; or a string in a `compile` call); the unit applying a loss object in a custom
    # loop computes gradients; a subclassed model's `call` comes with its class.
    needs = Needs(file=(("text:rossentropy",), ("call:compile", *_LOSS_NAMES)),
                  statement=(("call:compile", PROBABILITY_LOSS, "call:gradient", "name:GradientTape",
                              "name:train_step"),))
    summary = ("A Keras `CategoricalCrossentropy` / `SparseCategoricalCrossentropy` / `BinaryCrossentropy` "
               "(also the focal ones) — a class, a function (`keras.losses.sparse_categorical_crossentropy(y, "
               "out)`) or a string in `compile(loss=\"sparse_categorical_crossentropy\")` — without "
               "`from_logits=True`, applied to the output of a model whose last layer has no activation "
               "(`Dense(10)`, `activation=None`), as the file shows it: a `Sequential` and its `.add` chain, "
               "a functional `Model`, a subclassed model's `call`, `keras.applications.*("
               "classifier_activation=None)`, a same-file builder function. Any Keras: `keras`, `tf.keras`, "
               "`tf_keras`. A linear `Activation(\"linear\", dtype=\"float32\")` on top (the mixed-precision "
               "cast, an identity) is looked through: a softmax below it is not flagged. Not a model shown failing "
               "on purpose: one fitted, later in the same scope, on the same data as a model with the activation "
               "or `from_logits=True` it lacks (a notebook's sequence of models teaching the fix); nor a model "
               "compiled at module level only to be evaluated (weights ported or set by hand, then `evaluate`/"
               "`predict`; never `fit` nor handed to other code): no gradient of its loss is taken.")
    why = ("Without `from_logits=True` the loss takes its input for probabilities: Keras clips it to "
           "[1e-7, 1 - 1e-7] and takes the log. The clip has a zero gradient outside that range, so every "
           "logit at or below 0 (or at or above 1) stops learning, and the loss stops at a floor (for a "
           "sparse categorical loss whose logits are all negative: exactly ln(number of classes)). Keras 3 measured; "
           "Keras 2's backend clips the same way (`clip_by_value(output, epsilon_, 1 - epsilon_)`, then `log`, "
           "read in its source; not run: `tf_keras` is not installed here).")
    symptom = ("No error, no warning. Measured (TF 2.21, Keras 3.15, 4 classes, SGD 0.1, 10 epochs of "
               "256 examples): the loss went 3.18, 1.41, 1.381, then stayed at 1.3809 (ln 4 = 1.3863) with "
               "accuracy 0.32; the logits of the first 8 examples were all negative (max -0.33), so each of "
               "their losses was exactly ln 4 with a zero gradient. With `from_logits=True`: 1.50 down to 0.60, accuracy 0.82. "
               "One example: `sparse_categorical_crossentropy(0, [-1, 2, 0.5, 0.3])` gives 16.71 and a zero "
               "gradient for the two logits outside [0, 1]. LL709_bad.py prints `final loss 1.3809 "
               "(ln 4 = 1.3863), accuracy 0.316, logits in [-8.68, 0.22]`; with the fix: `final loss 0.6038 "
               "(ln 4 = 1.3863), accuracy 0.816, logits in [-5.40, 4.39]`.")
    remedy = ("Pass `from_logits=True` to the loss (`keras.losses.SparseCategoricalCrossentropy("
              "from_logits=True)` in place of the string), or end the model in a softmax/sigmoid. For "
              "probabilities at serving time, wrap the trained model: `keras.Sequential([model, "
              "keras.layers.Softmax()])`.")
    fix_safety = ("Unsafe: the loss values and the gradients change (that is the point), so a run after the fix "
                  "trains differently; metrics that read the output as probabilities (`AUC`, a threshold at "
                  "0.5) still see logits and need `from_logits=True` or a threshold at 0 too.")
    flagged = (
        Example("""
import tensorflow as tf
model = tf.keras.Sequential([
    tf.keras.layers.Flatten(input_shape=(28, 28)),
    tf.keras.layers.Dense(128, activation="relu"),
    tf.keras.layers.Dense(10),
])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(x_train, y_train, epochs=5)
""", expect="""
7:38-7:71 [unsafe fix] `sparse_categorical_crossentropy` without `from_logits=True` applied to logits
    help: use `SparseCategoricalCrossentropy(from_logits=True)`
    note: the model compiled at line 7 comes out of `tf.keras.layers.Dense(10)`, which has no
        activation. Keras clips the logits to [1e-7, 1 - 1e-7] as probabilities and takes the log:
        outside that range the gradient is zero and the loss stalls
""", fix_diff="""
@@ -7 +7 @@
-model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
+model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
"""),
        Example("""
import keras
from keras import layers
inputs = keras.Input(shape=(784,))
x = layers.Dense(64, activation="relu")(inputs)
outputs = layers.Dense(10, name="predictions")(x)
model = keras.Model(inputs=inputs, outputs=outputs)
loss_fn = keras.losses.SparseCategoricalCrossentropy()
optimizer = keras.optimizers.Adam(1e-3)
for x_batch, y_batch in train_dataset:
    with tf.GradientTape() as tape:
        logits = model(x_batch, training=True)
        loss_value = loss_fn(y_batch, logits)
    grads = tape.gradient(loss_value, model.trainable_weights)
""", expect="""
7:11-7:55 [unsafe fix] `SparseCategoricalCrossentropy` without `from_logits=True` applied to logits
    help: pass `from_logits=True` to `SparseCategoricalCrossentropy`
    note: `logits` at line 12 comes out of `layers.Dense(10, name="predictions")`, which has no
        activation. Keras clips the logits to [1e-7, 1 - 1e-7] as probabilities and takes the log:
        outside that range the gradient is zero and the loss stalls
""", fix_diff="""
@@ -7 +7 @@
-loss_fn = keras.losses.SparseCategoricalCrossentropy()
+loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
"""),
        Example("""
import tensorflow as tf
class Classifier(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = tf.keras.layers.Dense(32, activation="relu")
        self.out = tf.keras.layers.Dense(1)
    def call(self, x):
        return self.out(self.hidden(x))
def build():
    return Classifier()
model = build()
model.compile(optimizer="adam", loss=tf.keras.losses.BinaryCrossentropy(from_logits=False))
""", expect="""
12:38-12:91 [unsafe fix] `BinaryCrossentropy` without `from_logits=True` applied to logits
    help: pass `from_logits=True` to `BinaryCrossentropy`
    note: the model compiled at line 12 comes out of `tf.keras.layers.Dense(1)`, which has no
        activation. Keras clips the logits to [1e-7, 1 - 1e-7] as probabilities and takes the log:
        outside that range the gradient is zero and the loss stalls
""", fix_diff="""
@@ -12 +12 @@
-model.compile(optimizer="adam", loss=tf.keras.losses.BinaryCrossentropy(from_logits=False))
+model.compile(optimizer="adam", loss=tf.keras.losses.BinaryCrossentropy(from_logits=True))
"""),
        Example("""
import tensorflow as tf
from tensorflow import keras
def make_model(num_classes):
    model = keras.Sequential()
    model.add(keras.layers.Conv2D(16, 3, activation="relu"))
    model.add(keras.layers.GlobalAveragePooling2D())
    model.add(keras.layers.Dense(num_classes))
    return model
model = make_model(5)
@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(keras.losses.categorical_crossentropy(y, model(x)))
    grads = tape.gradient(loss, model.trainable_variables)
""", expect="""
13:31-13:81 [unsafe fix] `categorical_crossentropy` without `from_logits=True` applied to logits
    help: pass `from_logits=True` to `categorical_crossentropy`
    note: `model(x)` at line 13 comes out of `keras.layers.Dense(num_classes)`, which has no activation.
        Keras clips the logits to [1e-7, 1 - 1e-7] as probabilities and takes the log: outside that
        range the gradient is zero and the loss stalls
""", fix_diff="""
@@ -13 +13 @@
-        loss = tf.reduce_mean(keras.losses.categorical_crossentropy(y, model(x)))
+        loss = tf.reduce_mean(keras.losses.categorical_crossentropy(y, model(x), from_logits=True))
"""),
        Example("""
import keras
from keras import layers
inputs = keras.Input(shape=(784,))
x = layers.Dense(10)(inputs)
outputs = layers.Activation("linear", dtype="float32")(x)
model = keras.Model(inputs, outputs)
model.compile(loss="sparse_categorical_crossentropy", optimizer="rmsprop")
""", expect="""
7:20-7:53 [unsafe fix] `sparse_categorical_crossentropy` without `from_logits=True` applied to logits
    help: use `SparseCategoricalCrossentropy(from_logits=True)`
    note: the model compiled at line 7 comes out of `layers.Dense(10)`, which has no activation. Keras
        clips the logits to [1e-7, 1 - 1e-7] as probabilities and takes the log: outside that range the
        gradient is zero and the loss stalls
""", fix_diff="""
@@ -7 +7 @@
-model.compile(loss="sparse_categorical_crossentropy", optimizer="rmsprop")
+model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), optimizer="rmsprop")
"""),
        Example("""
import tensorflow as tf
small = tf.keras.Sequential([tf.keras.layers.Dense(1)])
small.compile(loss="binary_crossentropy", optimizer="rmsprop")
small.fit(x_train, y_train, epochs=10)
wide = tf.keras.Sequential([tf.keras.layers.Dense(64, activation="relu"),
                            tf.keras.layers.Dense(1, activation="sigmoid")])
wide.compile(loss="binary_crossentropy", optimizer="rmsprop")
wide.fit(x_other, y_other, epochs=10)
""", expect="""
3:20-3:41 [unsafe fix] `binary_crossentropy` without `from_logits=True` applied to logits
    help: use `BinaryCrossentropy(from_logits=True)`
    note: the model compiled at line 3 comes out of `tf.keras.layers.Dense(1)`, which has no activation.
        Keras clips the logits to [1e-7, 1 - 1e-7] as probabilities and takes the log: outside that
        range the gradient is zero and the loss stalls
""", fix_diff="""
@@ -3 +3 @@
-small.compile(loss="binary_crossentropy", optimizer="rmsprop")
+small.compile(loss=tf.keras.losses.BinaryCrossentropy(from_logits=True), optimizer="rmsprop")
"""),
        Example("""
import tensorflow as tf
model = tf.keras.Sequential([tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(10)])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
model.evaluate(x_val, y_val)
history = train(model, x_train, y_train)
""", expect="""
3:38-3:71 [unsafe fix] `sparse_categorical_crossentropy` without `from_logits=True` applied to logits
    help: use `SparseCategoricalCrossentropy(from_logits=True)`
    note: the model compiled at line 3 comes out of `tf.keras.layers.Dense(10)`, which has no
        activation. Keras clips the logits to [1e-7, 1 - 1e-7] as probabilities and takes the log:
        outside that range the gradient is zero and the loss stalls
""", fix_diff="""
@@ -3 +3 @@
-model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
+model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
"""),
    )
    not_flagged = (
        Example("""
import tensorflow as tf
X, y = make_circles(1000, noise=0.03)
baseline = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu"), tf.keras.layers.Dense(1)])
baseline.compile(loss=tf.keras.losses.BinaryCrossentropy(), optimizer="adam", metrics=["accuracy"])
baseline.fit(X, y, epochs=50)
fixed = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu"),
                             tf.keras.layers.Dense(1, activation="sigmoid")])
fixed.compile(loss=tf.keras.losses.BinaryCrossentropy(), optimizer="adam", metrics=["accuracy"])
fixed.fit(X, y, epochs=50)
"""),
        Example("""
import keras
from keras import layers
inputs = keras.Input(shape=(784,))
x = layers.Dense(10)(inputs)
x = layers.Activation("softmax")(x)
outputs = layers.Activation("linear", dtype="float32")(x)
model = keras.Model(inputs, outputs)
model.compile(loss="sparse_categorical_crossentropy", optimizer="rmsprop")
model.fit(x_train, y_train)
"""),
        Example("""
import tensorflow as tf
model = tf.keras.Sequential()
model.add(tf.keras.layers.Dense(10, activation="softmax"))
model.add(tf.keras.layers.Activation(None, dtype="float32"))
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
"""),
        Example("""
import tensorflow as tf
model = tf.keras.Sequential([tf.keras.layers.Dense(128, activation="relu"), tf.keras.layers.Dense(10)])
model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x_train, y_train, epochs=5)
probability_model = tf.keras.Sequential([model, tf.keras.layers.Softmax()])
predictions = probability_model.predict(x_test)
"""),
        Example("""
import keras
model = keras.Sequential([keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10, activation="softmax")])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
"""),
        Example("""
import tensorflow as tf
inputs = tf.keras.Input((16,))
logits = tf.keras.layers.Dense(1)(inputs)
model = tf.keras.Model(inputs, logits)
with tf.GradientTape() as tape:
    loss = tf.keras.losses.binary_crossentropy(y, tf.sigmoid(model(x)))
"""),
        Example("""
import tensorflow as tf
model = tf.keras.Sequential([tf.keras.layers.Dense(10)])
model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=args.logits))
model.compile(optimizer="adam", loss="mse")
base = tf.keras.models.load_model("base.keras")
base.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
"""),
        Example("""
from keras.layers import Dense, Flatten, Conv2D
from keras.models import Sequential
model = Sequential()
model.add(Conv2D(8, 3, activation="relu", input_shape=(28, 28, 1)))
model.add(Flatten())
model.add(Dense(units=10))
model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
for layer, (w, b) in zip(model.layers, ported_weights):
    layer.set_weights([w, b])
model.evaluate(x=x_test, y=y_one_hot)[1]
"""),
    )

    def visit_Module(self, node: cst.Module) -> None:
        seen: set[cst.CSTNode] = set()
        uses = self.ctx.keras.loss_uses
        for use in uses:
            loss = use.loss
            if loss.from_logits is not False or use.output.activation != "linear" or loss.node in seen \
                    or self._corrected_later(use, uses) or self._evaluated_only(use):
                continue
            seen.add(loss.node)
            self._report(use)

    def _corrected_later(self, use: LossUse, uses: list[LossUse]) -> bool:
        """A compiled model shown failing on purpose: later in the same scope (a notebook's cells, a
        tutorial script) another model is fitted on the same data with the output activation or
        `from_logits=True` it lacks — the sequence of models that teaches the fix."""
        if use.prediction is not None:
            return False
        data = self._fitted_data(use.site)
        ctx = self.ctx
        return bool(data) and any(
            later.prediction is None and ctx.order[later.site] > ctx.order[use.site]
            and ctx.scope_of(later.site) is ctx.scope_of(use.site)
            and (later.output.activation != "linear" or later.loss.from_logits is True)
            and data & self._fitted_data(later.site) for later in uses)

    def _evaluated_only(self, use: LossUse) -> bool:
        """A model compiled at module level only to be evaluated (its weights set by hand or copied from
        another framework, then `evaluate`/`predict`): no gradient of its loss is ever taken, so the
        clipped log costs nothing. It must be run forward after the compile and never trained nor handed
        to other code in the file (which might train it)."""
        site = use.site
        model = receiver(site) if use.prediction is None and isinstance(site, cst.Call) else None
        ctx = self.ctx
        if not isinstance(model, cst.Name) or ctx.scope_of(site) is not ctx.module:
            return False
        evaluated = False
        for call in ctx.nodes(cst.Call):
            if isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name) \
                    and call.func.value.value == model.value:
                method = call.func.attr.value
                if method in _TRAINING_CALLS:
                    return False
                evaluated = evaluated or (method in _FORWARD_CALLS and ctx.order[call] > ctx.order[site])
            elif any(_hands_over(arg.value, model.value) for arg in call.args):
                return False
        return evaluated

    def _fitted_data(self, compile_call: cst.CSTNode) -> set[str]:
        """The code of the inputs each `fit` of the compiled model passes (`model_1.fit(X, y)`: `X`), in
        the compile call's scope, until the model is compiled again."""
        ctx = self.ctx
        model = dotted(receiver(compile_call)) if isinstance(compile_call, cst.Call) and receiver(compile_call) else None
        if model is None:
            return set()
        recompiled = next((c for c in ctx.definitions.named("compile").after(compile_call)
                           if receiver(c) is not None and dotted(receiver(c)) == model), None)
        found = set()
        for call in ctx.definitions.named("fit").after(compile_call):
            if recompiled is not None and ctx.order[call] > ctx.order[recompiled]:
                break
            if ctx.scope_of(call) is not ctx.scope_of(compile_call) or receiver(call) is None \
                    or dotted(receiver(call)) != model:
                continue
            data = argument(call, 0, "x")
            if data is not None:
                found.add(ctx.snippet(data, 200))
        return found

    def _report(self, use: LossUse) -> None:
        ctx = self.ctx
        applied = (f"the model compiled at line {ctx.line_of(use.site)}" if use.prediction is None else
                   f"`{ctx.snippet(use.prediction, 30)}` at line {ctx.line_of(use.site)}")
        self.report(use.loss.node, f"`{use.loss.name}` without `from_logits=True` applied to logits",
                    self._fix(use.loss),
                    help=(f"pass `from_logits=True` to `{use.loss.name}`" if use.loss.spelling in ("class", "function")
                          else f"use `{CLASS_OF_FUNCTION.get(use.loss.name, use.loss.name)}(from_logits=True)`"),
                    note=f"{applied} comes out of `{ctx.snippet(use.output.node, 50)}`, which has no activation. "
                         "Keras clips the logits to [1e-7, 1 - 1e-7] as probabilities and takes the log: outside that "
                         "range the gradient is zero and the loss stalls")

    def _fix(self, loss: CrossEntropy) -> FixSpec | None:
        module = self.ctx.module
        if loss.spelling in ("class", "function") and isinstance(loss.node, cst.Call):
            code = call_with_keyword(module, loss.node, "from_logits", "True")
        elif loss.spelling == "reference" and isinstance(loss.node, cst.Attribute):
            prefix = module.code_for_node(loss.node.value)
            code = f"{prefix}.{CLASS_OF_FUNCTION[loss.name]}(from_logits=True)"
        elif loss.spelling == "string":
            prefix = self._losses_module()
            if prefix is None:
                return None
            code = f"{prefix}.{CLASS_OF_FUNCTION[loss.name]}(from_logits=True)"
        else:
            return None
        return FixSpec("unsafe", [Replacement(loss.node, code)], "pass from_logits=True")

    def _losses_module(self) -> str | None:
        """How this file spells `keras.losses`: through `keras`, `tf.keras` or `tf_keras` as imported."""
        names = self.ctx.names
        for qualname, suffix in (("keras", ".losses"), ("tensorflow.keras", ".losses"), ("tf_keras", ".losses"),
                                 ("keras.losses", ""), ("tensorflow.keras.losses", ""), ("tensorflow", ".keras.losses")):
            alias = names.alias_of(qualname)
            if alias is not None:
                return alias + suffix
        return None
