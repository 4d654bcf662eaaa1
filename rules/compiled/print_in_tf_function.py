"""LL201 print-in-tf-function: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.rule import Example, FixSpec, Replacement, Rule
from lintloop.screen import Needs


_TF_PRINT_KEYWORDS = {"sep", "end"}



class PrintInTfFunction(Rule):
    code = "LL201"
    name = "print-in-tf-function"
    frameworks = ("tf",)
    needs = Needs(file=(("text:function",),), statement=(("call:print",),))
    fix_kind = "safe for plain positional args, else unsafe"
    probe = "trace"
    summary = ("Builtin `print(...)` in a function decorated by `tf.function` (any spelling, with or "
               "without arguments) or wrapped as `f = tf.function(g)`, or in a same-file helper called "
               "only from such functions.")
    why = ("A `tf.function` runs its Python body only while tracing a graph (the first call, and again "
           "for each new input signature); later calls run the graph, which contains no Python `print`.")
    symptom = ("tests/fixtures/LL201_bad.py calls its `@tf.function` train step 6 times; the `print` ran once "
               "(twice when an Adam optimizer forces a second trace) and printed a symbolic tensor, "
               "`loss Tensor(\"mean_squared_error/div_no_nan:0\", shape=(), dtype=float32)`, never a value.")
    remedy = "Use `tf.print(...)`, which is a graph op and prints the value at every call."
    fix_safety = ("Safe when all arguments are plain positional values: `print(a, b)` becomes "
                  "`tf.print(a, b)`. Unsafe with `sep=`/`end=` or f-strings (an f-string is formatted "
                  "once at trace time even under `tf.print`). No fix with `file=` or `flush=`, or when "
                  "the file has no `import tensorflow as <name>`. Note that `tf.print` writes to stderr.")
    flagged = (
        Example("""
import tensorflow as tf
@tf.function
def train_step(x, y):
    loss = compute(x, y)
    print("loss", loss)
    return loss
"""),
        Example("""
import tensorflow as tf
from tensorflow import function
@function(jit_compile=True)
def step(x):
    print(x)
    return x * 2
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
def log_metrics(loss):
    print("loss", loss)
@tf.function
def train_step(model, x, y):
    loss = tf.reduce_mean((model(x) - y) ** 2)
    log_metrics(loss)
    return loss
"""),
    )
    not_flagged = (
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
        if not self.ctx.names.is_builtin(node.func, "print"):
            return
        tf = self.ctx.tf
        chain = self.ctx.calls.through_callers(node, lambda n: tf.compiled_function_of(n) is not None)
        if chain is None:
            return
        compiled = tf.compiled_function_of(chain[-1] if chain else node)
        where = f"tf.function `{compiled.name.value}`"
        if chain:
            helper = next(a for a in self.ctx.ancestors(node) if isinstance(a, cst.FunctionDef))
            where = f"`{helper.name.value}`{self.ctx.calls.describe_chain(chain, 'the ' + where)},"
        self.report(node, f"builtin `print` inside {where} runs only while TensorFlow traces it (first call "
                          "and each retrace) and prints symbolic tensors; use `tf.print` to print on every "
                          "call", fix=self._fix(node))

    def _fix(self, node: cst.Call) -> FixSpec | None:
        alias = self.ctx.names.alias_of("tensorflow")
        keywords = {arg.keyword.value for arg in node.args if arg.keyword is not None}
        if alias is None or keywords - _TF_PRINT_KEYWORDS or any(arg.star for arg in node.args):
            return None
        plain = not keywords and not any(isinstance(arg.value, cst.FormattedString) for arg in node.args)
        return FixSpec("safe" if plain else "unsafe", [Replacement(node.func, f"{alias}.print")],
                       f"replace `print` with `{alias}.print`")
