"""LL201 print-in-tf-function: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.nodes import formatted_when_printed
from lintloop.rule import Example, FixSpec, Replacement, Rule
from lintloop.screen import Needs


_TF_PRINT_KEYWORDS = {"sep", "end"}



class PrintInTfFunction(Rule):
    code = "LL201"
    name = "print-in-tf-function"
    description = "builtin `print` in a tf.function (runs at trace time only)"
    shown_in_prose = "tracing"
    frameworks = ("tf",)
    # `call:compile`: the unit that compiles a Keras model may say `run_eagerly=True` (no trace).
    # A tf.function (`tf.function`, `common.function`, `from tensorflow import function`: not the word in a
    # docstring), or a Keras model with a step override (a def: text).
    needs = Needs(file=(("name:function", "name:Model"),
                        ("text:.function", "text:import function", "text:train_step", "text:test_step",
                         "text:predict_step")),
                  statement=(("call:print", "call:compile"),))
    fix_kind = "safe for plain positional args, else unsafe"
    probe = "trace"
    summary = ("Builtin `print(...)` in a function decorated by `tf.function` (any spelling, with or "
               "without arguments, `jit_compile=True`, `functools.partial(tf.function, ...)`, a project "
               "decorator that returns `tf.function(...)`), wrapped as `f = tf.function(g)`, in a Keras "
               "`train_step`/`test_step`/`predict_step` override (traced by `fit`, Keras 2 and 3, unless "
               "the file compiles with `run_eagerly=True`), or in a same-file helper called only from such "
               "functions. Not in a function run by `tf.py_function` / `tf.numpy_function` (passed to it or "
               "decorated by it): its body runs eagerly at every call, even from a tf.function. Nor a `print` whose "
               "literal text announces tracing (`print(\"Tracing with\", x)`, `print(f\"retracing for {n}\")`: a "
               "word such as trace, traced, tracing, retrace, compile, compiling): the TensorFlow guide's own way to "
               "show when a function traces.")
    why = ("A `tf.function` runs its Python body only while tracing a graph (the first call, and again "
           "for each new input signature); later calls run the graph, which contains no Python `print`.")
    symptom = ("LL201_bad.py calls its `@tf.function` train step 6 times; the `print` ran once "
               "(twice when an Adam optimizer forces a second trace) and printed a symbolic tensor, "
               "`loss Tensor(\"mean_squared_error/div_no_nan:0\", shape=(), dtype=float32)`, never a value.")
    remedy = "Use `tf.print(...)`, which is a graph op and prints the value at every call."
    fix_safety = ("Safe when all arguments are plain positional values: `print(a, b)` becomes "
                  "`tf.print(a, b)`. Unsafe with `sep=`/`end=` or a string formatted in Python (an f-string, "
                  "`.format`, `%`: formatted once at trace time even under `tf.print`). No fix with `file=` or `flush=`, or when "
                  "the file has no `import tensorflow as <name>`. Note that `tf.print` writes to stderr.")
    flagged = (
        Example("""
import tensorflow as tf
from tensorflow.python.eager.def_function import function
@function
def decode_step(tokens, state):
    print("decoding", tokens)
    logits, state = decoder(tokens, state)
    return tf.argmax(logits, axis=-1), state
for _ in range(max_length):
    tokens, state = decode_step(tokens, state)
""", expect="""
5:5-5:30 [safe fix] builtin `print` in the tf.function `decode_step` runs only at trace time
    help: use `tf.print(...)`, a graph op that prints on every call
    note: it runs on the first call and each retrace, and prints symbolic tensors, not values
""", fix_diff="""
@@ -5 +5 @@
-    print("decoding", tokens)
+    tf.print("decoding", tokens)
"""),
        Example("""
import tensorflow as tf
@tf.function
def train_step(x, y):
    loss = compute(x, y)
    print("loss", loss)
    return loss
""", expect="""
5:5-5:24 [safe fix] builtin `print` in the tf.function `train_step` runs only at trace time
    help: use `tf.print(...)`, a graph op that prints on every call
    note: it runs on the first call and each retrace, and prints symbolic tensors, not values
""", fix_diff="""
@@ -5 +5 @@
-    print("loss", loss)
+    tf.print("loss", loss)
"""),
        Example("""
import tensorflow as tf
from tensorflow import function
@function(jit_compile=True)
def step(x):
    print(x)
    return x * 2
""", expect="""
5:5-5:13 [safe fix] builtin `print` in the XLA-compiled tf.function `step` runs only at trace time
    help: use `tf.print(...)`, a graph op that prints on every call
    note: it runs on the first call and each retrace, and prints symbolic tensors, not values
""", fix_diff="""
@@ -5 +5 @@
-    print(x)
+    tf.print(x)
"""),
        Example("""
import tensorflow as tf
def step(x):
    print("step input", x)
    return x + 1
fast_step = tf.function(step)
""", expect="""
3:5-3:27 [safe fix] builtin `print` in the tf.function `step` runs only at trace time
    help: use `tf.print(...)`, a graph op that prints on every call
    note: it runs on the first call and each retrace, and prints symbolic tensors, not values
""", fix_diff="""
@@ -3 +3 @@
-    print("step input", x)
+    tf.print("step input", x)
"""),
        Example("""
import tensorflow as tf
def log_metrics(loss):
    print("loss", loss)
@tf.function
def train_step(model, x, y):
    loss = tf.reduce_mean((model(x) - y) ** 2)
    log_metrics(loss)
    return loss
""", expect="""
3:5-3:24 [safe fix] builtin `print` in `log_metrics`, called from the tf.function `train_step`, runs
    only at trace time
    help: use `tf.print(...)`, a graph op that prints on every call
    note: `log_metrics` is called from the tf.function `train_step` at line 7; it runs on the first call
        and each retrace, and prints symbolic tensors, not values
""", fix_diff="""
@@ -3 +3 @@
-    print("loss", loss)
+    tf.print("loss", loss)
"""),
        Example("""
import tensorflow as tf
class GAN(tf.keras.Model):
    def train_step(self, data):
        real = data
        print("batch", real.shape)
        return {}
""", expect="""
5:9-5:35 [safe fix] builtin `print` in the Keras `train_step` runs only at trace time
    help: use `tf.print(...)`, a graph op that prints on every call
    note: traced by `fit`/`evaluate`/`predict`; it runs on the first call and each retrace, and prints
        symbolic tensors, not values
""", fix_diff="""
@@ -5 +5 @@
-        print("batch", real.shape)
+        tf.print("batch", real.shape)
"""),
        Example("""
import tensorflow as tf
@tf.function
def train_step(x, y):
    loss = tf.reduce_mean((model(x) - y) ** 2)
    print("loss is a tracer or a value?", loss)
    return loss
""", expect="""
5:5-5:48 [safe fix] builtin `print` in the tf.function `train_step` runs only at trace time
    help: use `tf.print(...)`, a graph op that prints on every call
    note: it runs on the first call and each retrace, and prints symbolic tensors, not values
""", fix_diff="""
@@ -5 +5 @@
-    print("loss is a tracer or a value?", loss)
+    tf.print("loss is a tracer or a value?", loss)
"""),
        Example("""
import tensorflow as tf
def function(*args, **kwargs):
    return tf.function(*args, autograph=False, **kwargs)
@function
def collect(env_step):
    print("collecting", env_step)
    return env_step
""", expect="""
6:5-6:34 [safe fix] builtin `print` in the tf.function `collect` runs only at trace time
    help: use `tf.print(...)`, a graph op that prints on every call
    note: it runs on the first call and each retrace, and prints symbolic tensors, not values
""", fix_diff="""
@@ -6 +6 @@
-    print("collecting", env_step)
+    tf.print("collecting", env_step)
"""),
    )
    not_flagged = (
        Example("""
import tensorflow as tf
@tf.function
def double(a):
    print("a is", a)
    return a + a

print("result:", double(tf.constant(1)))
print("result:", double(tf.constant(1.1)))
print("result:", double(tf.constant("c")))
"""),
        Example("""
import tensorflow as tf
@tf.function
def show(num):
    print(num)
    tf.print(num)
for i in range(3):
    show(tf.constant(i))
"""),
        Example("""
import tensorflow as tf
def step(x):
    print("tracing", x.shape)
    return x + 1
fast_step = tf.function(step)
"""),
        Example("""
import tensorflow as tf
@tf.function
def scale(x, factor):
    print(f"--- Retracing scale for factor={factor} ---")
    print("Traced with", x)
    return x * factor
"""),
        Example("""
import tensorflow as tf
class Encoder(tf.keras.Model):
    @tf.function(jit_compile=True)
    def encode(self, tokens):
        print("compiling encode:", tokens.shape)
        return self.embed(tokens)
"""),
        Example("""
import tensorflow as tf
class Net(tf.keras.Model):
    def train_step(self, data):
        print("tracing train_step")
        return super().train_step(data)
model = Net()
model.compile(optimizer="adam", loss="mse", run_eagerly=True)
"""),
        Example("""
import tensorflow as tf
@tf.function
def step(x):
    tf.print("x", x)
    return x
print(step(tf.constant(1.0)))
"""),
        Example("""
import tensorflow as tf
from rich import print
@tf.function
def step(x):
    print(x)
    return x
"""),
        Example("""
import tensorflow as tf
@tf.function
def step(x):
    def log(v):
        print(v)
        return v
    return tf.py_function(log, [x], tf.float32)
"""),
        Example("""
import tensorflow as tf
@tf.py_function(Tout=tf.float32)
def py_plus(x, y):
    print("Executing eagerly.")
    return x + y
@tf.function
def tf_wrapper(x, y):
    return py_plus(x, y)
"""),
        Example("""
import tensorflow as tf
def log_metrics(loss):
    print("loss", loss)
@tf.function
def train_step(x):
    loss = tf.reduce_mean(x)
    log_metrics(loss)
    return loss
for x in batches:
    log_metrics(train_step(x))
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        if not self.ctx.names.is_builtin(node.func, "print") or self.ctx.intent.announces_tracing(node) \
                or self.ctx.intent.beside_graph_print(node):
            return  # a print that says it traces, or shown beside tf.print of the same value: on purpose
        traced = self.ctx.tf.traced_chain(node)
        if traced is None or self.ctx.intent.shown_call_by_call(traced[1]):
            return  # a guide printing the result of each call: it shows when the print runs
        chain, fn = traced
        tf = self.ctx.tf
        label, _, aside = tf.describe(fn).partition(" (")  # "the Keras `train_step`", "traced by `fit`..."
        how = f"{aside.rstrip(')')}; " if aside else ""
        if chain:
            helper = next(a for a in self.ctx.ancestors(node) if isinstance(a, cst.FunctionDef)).name.value
            headline = f"builtin `print` in `{helper}`, called from {label}, runs only at trace time"
            if len(headline) > 100:
                headline = f"builtin `print` in `{helper}` runs only at trace time"
            how = f"`{helper}` is {self.ctx.calls.describe_chain(chain, label).removeprefix(', ')}; {how}"
        else:
            headline = f"builtin `print` in {label} runs only at trace time"
        self.report(node, headline, fix=self._fix(node),
                    help="use `tf.print(...)`, a graph op that prints on every call",
                    note=f"{how}it runs on the first call and each retrace, and prints symbolic tensors, not "
                         "values")

    def _fix(self, node: cst.Call) -> FixSpec | None:
        alias = self.ctx.names.alias_of("tensorflow")
        keywords = {arg.keyword.value for arg in node.args if arg.keyword is not None}
        if alias is None or keywords - _TF_PRINT_KEYWORDS or any(arg.star for arg in node.args):
            return None
        plain = not keywords and not any(formatted_when_printed(arg.value) for arg in node.args)
        return FixSpec("safe" if plain else "unsafe", [Replacement(node.func, f"{alias}.print")],
                       f"replace `print` with `{alias}.print`")
