"""LL206 print-in-jit: the rule, its documentation and its examples."""

from __future__ import annotations

import ast

import libcst as cst

from lintloop.analysis.jax import TRACING_FILE_NEEDS
from lintloop.analysis.nodes import formatted_in_python, formatted_when_printed
from lintloop.rule import Example, FixSpec, Replacement, Rule
from lintloop.screen import Needs

# `print` keywords that say where or how to write, not what.
_DESTINATION_KEYWORDS = {"file", "flush"}
_LITERALS = (cst.SimpleString, cst.ConcatenatedString, cst.Integer, cst.Float)


class PrintInJit(Rule):
    code = "LL206"
    name = "print-in-jit"
    description = "builtin `print` in code JAX traces (runs at trace time only)"
    shown_in_prose = "tracing"
    frameworks = ("jax",)
    # A JAX import, and something that traces: a compile or a traced control-flow body.
    needs = Needs(file=TRACING_FILE_NEEDS, statement=(("call:print",),))
    fix_kind = "safe for plain positional args"
    probe = "trace"
    summary = ("Builtin `print(...)` in code JAX traces: a function compiled by `jax.jit` / `jax.pmap` / "
               "`pjit` / flax `nnx.jit` / equinox `filter_jit` (decorated in any spelling, "
               "`@partial(jax.jit, static_argnums=...)`, or wrapped: `step = jax.jit(train_step)`, "
               "`jax.jit(jax.grad(loss))`), a body or branch of `lax.scan` / `fori_loop` / `while_loop` / "
               "`cond` / `switch` / `map` (traced even without jit), or a same-file helper called only from "
               "such code. Also `jax.debug.print` handed a string already formatted in Python (an f-string, "
               "`.format`, `%`) from values of the traced function. Not flagged: a `print` that shows only "
               "what JAX knows while tracing (`jax.typeof(x)`, `.shape`, `.dtype`, `.ndim`, `.sharding`, "
               "`jax.sharding.get_abstract_mesh()`, a tree map of a function giving one, `jax.tree.map(lambda x: "
               "x.shape, params)`, or a same-file helper returning only such values) between literals: JAX's "
               "documented way to inspect types and shardings at trace time, which `jax.debug.print` cannot "
               "format; nor a `print` whose literal text announces tracing or compiling (`print(\"Tracing f "
               "with\", x)`: a word such as trace, traced, tracing, retrace, compile, compiling), which shows "
               "when JAX traces on purpose.")
    why = ("JAX runs a traced function's Python body only while tracing it: on the first call, and again for "
           "each new input shape, dtype or static argument; later calls run the compiled program, which holds "
           "no Python. A `lax.scan` body is traced once per trace of the scan, not once per iteration. So the "
           "`print` runs once, not at every call, and what it prints are tracers (`JitTracer(float32[])`), "
           "not values. A string formatted in Python before `jax.debug.print` sees it is formatted at trace "
           "time too: `jax.debug.print` then prints that fixed text, the tracer's repr, at every call.")
    symptom = ("LL206_bad.py prints the loss inside its `@jax.jit` train step, called 20 "
               "times: the output is one line, `loss JitTracer(float32[])`, then `20 steps done, final loss "
               "0.0038`. `jax.debug.print(f\"loss {loss}\")` in a jitted function prints "
               "`loss JitTracer(float32[])` at every call (jax 0.10.2).")
    remedy = ("Use `jax.debug.print(\"loss {}\", loss)` (placeholders, values as arguments), which prints the "
              "value at every call; or return the value from the traced function and print it in the Python "
              "loop. `jax.debug.print(..., ordered=True)` keeps several prints of one step in program order.")
    fix_safety = ("Safe when all arguments are plain positional values: `print(\"loss\", a, b)` becomes "
                  "`jax.debug.print(\"loss {} {}\", a, b)` (a string literal's text goes into the format, braces "
                  "doubled) with the file's own `jax` (or `jax.debug`) alias; the output "
                  "now appears at every call. Prints of one step may come out of order (`ordered=True` orders "
                  "them), and Python numbers inside containers print as arrays (`(Array(2, dtype=int32),)` for "
                  "a shape). No fix with `sep=`/`end=`/`file=`/`flush=`, starred arguments, strings formatted in "
                  "Python (an f-string, `.format`, `%`: formatted at trace time, whoever prints it), or in a "
                  "file that does not bind `jax` (or `jax.debug`) itself (`from jax import jit` only).")
    flagged = (
        Example("""
import jax
import jax.numpy as jnp
@jax.jit
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    print("loss", loss)
    return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads), loss
""", expect="""
6:5-6:24 [safe fix] builtin `print` in the jitted `train_step` runs only at trace time
    help: use `jax.debug.print("loss {}", loss)`, which prints at every call
    note: it runs on the first call and each retrace; any traced value it prints shows as a tracer, not
        a value
""", fix_diff="""
@@ -6 +6 @@
-    print("loss", loss)
+    jax.debug.print("loss {}", loss)
"""),
        Example("""
import jax
from functools import partial
@partial(jax.jit, static_argnames=("train",))
def apply_model(state, batch, train):
    print(f"apply_model train={train} images={batch['image'].shape}")
    return state.apply_fn({"params": state.params}, batch["image"])
""", expect="""
5:5-5:70 builtin `print` in the jitted `apply_model` runs only at trace time
    help: use `jax.debug.print` with `{}` placeholders and the values as arguments, which prints at
        every call
    note: it runs on the first call and each retrace; any traced value it prints shows as a tracer, not
        a value
"""),
        Example("""
import jax
def log_metrics(metrics):
    print("metrics", metrics)
def update(params, grads):
    new = jax.tree_util.tree_map(lambda p, g: p - 1e-3 * g, params, grads)
    log_metrics({"norm": optax.global_norm(grads)})
    return new
fast_update = jax.jit(update)
""", expect="""
3:5-3:30 [safe fix] builtin `print` in `log_metrics`, called from the jitted `update`, runs only at
    trace time
    help: use `jax.debug.print("metrics {}", metrics)`, which prints at every call
    note: `log_metrics` is called from the jitted `update` at line 6; it runs on the first call and each
        retrace; any traced value it prints shows as a tracer, not a value
""", fix_diff="""
@@ -3 +3 @@
-    print("metrics", metrics)
+    jax.debug.print("metrics {}", metrics)
"""),
        Example("""
from jax import lax
def body(carry, x):
    h = carry * 0.9 + x
    print("carry", h)
    return h, h
def rnn(xs):
    return lax.scan(body, 0.0, xs)
""", expect="""
4:5-4:22 builtin `print` in the `scan` body `body` runs only at trace time
    help: use `jax.debug.print` with `{}` placeholders and the values as arguments, which prints at
        every call
    note: it runs once per trace of the `scan`, not on every iteration or call; any traced value it
        prints shows as a tracer, not a value
"""),
        Example("""
import jax
@jax.jit
def train_step(state, batch):
    loss = compute_loss(state.params, batch)
    jax.debug.print(f"loss {loss}")
    return state, loss
""", expect="""
5:5-5:36 `jax.debug.print` in the jitted `train_step` gets a string formatted in Python at trace time
    help: pass the values as arguments for `{}` placeholders instead of formatting the string in Python
    note: it prints the tracer's repr at every call, not the value
"""),
        Example("""
import jax
def grad_means(tree):
    return jax.tree_util.tree_map(lambda g: g.mean(), tree)
@jax.jit
def update(params, grads):
    print("gradient means: {}".format(grad_means(grads)))
    return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads)
""", expect="""
6:5-6:58 builtin `print` in the jitted `update` runs only at trace time
    help: use `jax.debug.print` with `{}` placeholders and the values as arguments, which prints at
        every call
    note: it runs on the first call and each retrace; any traced value it prints shows as a tracer, not
        a value
"""),
        Example("""
from flax import nnx
@nnx.jit
def train_step(model, optimizer, batch):
    grad_fn = nnx.value_and_grad(loss_fn)
    loss, grads = grad_fn(model, batch)
    print(loss)
    optimizer.update(model, grads)
    return loss
""", expect="""
6:5-6:16 builtin `print` in the `nnx.jit`-compiled `train_step` runs only at trace time
    help: use `jax.debug.print` with `{}` placeholders and the values as arguments, which prints at
        every call
    note: it runs on the first call and each retrace; any traced value it prints shows as a tracer, not
        a value
"""),
    )
    not_flagged = (
        Example("""
import jax
import jax.numpy as jnp
@jax.jit
def f(x, y):
    print("Running f():")
    print(f"  x = {x}")
    return jnp.dot(x + 1, y + 1)

print(f(jnp.ones((3, 4)), jnp.ones(4)))
print("Second call:")
print(f(jnp.zeros((3, 4)), jnp.zeros(4)))
"""),
        Example("""
import jax
import jax.numpy as jnp
@jax.jit
def double(x):
    print("print:", x)
    jax.debug.print("jax.debug.print: {}", x)
    return 2 * x
for value in jnp.arange(3.0):
    double(value)
"""),
        Example("""
import jax.numpy as jnp
from flax import nnx
class MLP(nnx.Module):
    def __init__(self, dim: int, rngs: nnx.Rngs):
        self.dim = dim
        self.linear = nnx.Linear(dim, dim, rngs=rngs)
@nnx.jit
def forward(model, x):
    print("model width", model.dim)
    return model.linear(x)
model = MLP(16, nnx.Rngs(0))
for step in range(100):
    forward(model, jnp.ones((4, 16)))
"""),
        Example("""
import jax
import jax.numpy as jnp
@jax.jit
def step(params, x):
    print("tied:", params["w1"] is params["w2"], "rows:", len(x), isinstance(x, jax.Array))
    return x @ params["w1"]
for i in range(100):
    step(params, jnp.ones((2, 4)))
"""),
        Example("""
import jax
@jax.jit
def train_step(params, x):
    loss = jax.numpy.mean(x)
    jax.debug.print("loss {}", loss)
    return loss
for epoch in range(3):
    loss = train_step(params, x)
    print("epoch", epoch, "loss", float(loss))
"""),
        Example("""
import jax
from rich import print
@jax.jit
def step(x):
    print(x)
    return x
"""),
        Example("""
import jax
def log_metrics(loss):
    print("loss", loss)
@jax.jit
def train_step(x):
    loss = jax.numpy.mean(x)
    log_metrics(loss)
    return loss
for x in batches:
    log_metrics(train_step(x))
"""),
        Example("""
import jax
def report(x):
    print("value", x)
@jax.jit
def step(x):
    jax.debug.callback(report, x)
    return x * 2
"""),
        Example("""
import jax
def loss_fn(params, x):
    print("eager loss call")
    return (params * x).sum()
grads = jax.grad(loss_fn)(params, x)
"""),
        Example("""
import jax
@jax.jit
def step(x, n):
    jax.debug.print("step {n}: {x}", x=x, n=n)
    return x
"""),
        Example("""
import jax
@jax.jit
def add_arrays(x, y):
    print(f"{jax.typeof(x)=!s}", jax.typeof(y).sharding)
    print("shapes", x.shape, y.shape[0], x.dtype, end="\\n\\n")
    print(f"mesh inside: {jax.sharding.get_abstract_mesh()}")
    return x + y
"""),
        Example("""
import jax
def param_shapes(tree):
    return jax.tree_util.tree_map(lambda leaf: leaf.shape, tree)
@jax.jit
def init_state(key, batch):
    params = model.init(key, batch)
    print("initialised parameters:\\n{}".format(param_shapes(params)))
    print("input", batch.shape, "%s" % (batch.dtype,))
    return params
"""),
        Example("""
import jax
from jax import lax
@jax.jit
def cumulative(xs):
    print("Tracing cumulative with", xs)
    def body(total, x):
        print(f"compiling the scan body for {x}")
        return total + x, total
    return lax.scan(body, 0.0, xs)
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        names = self.ctx.names
        if names.is_builtin(node.func, "print"):
            if self.ctx.intent.announces_tracing(node) or self.ctx.intent.beside_graph_print(node):
                return  # a print that says it traces shows tracing on purpose
            printed = _printed_parts(node)
            jax_code = self.ctx.jax
            # Shapes, dtypes, `jax.typeof(x)` between literals: inspecting them at trace time is the point.
            if any(jax_code.is_static_info(p) for p in printed) \
                    and all(isinstance(p, _LITERALS) or jax_code.is_static_info(p) for p in printed):
                return
            traced = jax_code.traced_chain(node)
            if traced is None or self.ctx.intent.shown_call_by_call(traced[1]):
                return  # a guide printing the result of each call: it shows when the print runs
            transform = jax_code.compiled_functions.get(traced[1]) or jax_code.traced_bodies.get(traced[1])
            when = ("on the first call and each retrace" if transform is None or transform.compiles
                    else f"once per trace of the `{transform.kind}`, not on every iteration or call")
            tracers = ("" if all(isinstance(p, _LITERALS) for p in printed)
                       else "; any traced value it prints shows as a tracer, not a value")
            fix = self._fix(node)
            replacement = fix.replacements[0].code if fix is not None else ""  # `jax.debug.print("loss {}", loss)`
            shown = 0 < len(replacement) <= 80 and "\n" not in replacement
            headline, where = self._where(node, traced, "builtin `print`", "runs only at trace time")
            self.report(node, headline, fix,
                        help=f"use `{replacement}`, which prints at every call" if shown
                        else "use `jax.debug.print` with `{}` placeholders and the values as arguments, which "
                             "prints at every call",
                        note=f"{where}it runs {when}{tracers}")
        elif names.callee(node) == "jax.debug.print" and node.args and formatted_in_python(node.args[0].value):
            traced = self.ctx.jax.traced_chain(node)
            if traced is None or not self._formats_traced_values(node.args[0].value, traced[1]):
                return
            headline, where = self._where(node, traced, "`jax.debug.print`",
                                          "gets a string formatted in Python at trace time")
            self.report(node, headline,
                        help="pass the values as arguments for `{}` placeholders instead of formatting the string "
                             "in Python",
                        note=f"{where}it prints the tracer's repr at every call, not the value")

    def _where(self, node: cst.Call, traced: tuple, what: str, tail: str) -> tuple[str, str]:
        """The headline ("builtin `print` in the jitted `step` runs ...", for a helper the traced function
        calls "... in `log`, called from the jitted `step`, runs ...") and the note's start, for a helper
        ("`log` is called from the jitted `step` at line 12; ")."""
        chain, fn = traced
        label = self.ctx.jax.describe(fn)
        if not chain:
            return f"{what} in {label} {tail}", ""
        helper = next(a for a in self.ctx.ancestors(node) if isinstance(a, cst.FunctionDef)).name.value
        headline = f"{what} in `{helper}`, called from {label}, {tail}"
        if len(headline) > 100:
            headline = f"{what} in `{helper}` {tail}"
        return headline, f"`{helper}` is {self.ctx.calls.describe_chain(chain, label).removeprefix(', ')}; "

    def _formats_traced_values(self, text: cst.BaseExpression, traced: cst.CSTNode) -> bool:
        """Does the formatted string interpolate a value of the traced function (a parameter that is not
        static, or a local it computes)? Module constants and static arguments format to plain text."""
        transform = self.ctx.jax.compiled_functions.get(traced) or self.ctx.jax.traced_bodies.get(traced)
        params = traced.params if isinstance(traced, (cst.FunctionDef, cst.Lambda)) else None
        static: set[str] = set(transform.static_argnames) if transform else set()
        if params is not None and transform is not None:
            positional = [*params.posonly_params, *params.params]
            static.update(positional[i].name.value for i in transform.static_argnums if i < len(positional))
        scope = traced if isinstance(traced, cst.FunctionDef) else self.ctx.scope_of(traced)
        for name in _interpolated_names(text):
            if name in static:
                continue
            if isinstance(traced, cst.FunctionDef) and self.ctx.bindings_in(scope, name):
                return True
            if params is not None and any(p.name.value == name for p in (*params.posonly_params, *params.params,
                                                                          *params.kwonly_params)):
                return True
        return False

    def _fix(self, node: cst.Call) -> FixSpec | None:
        alias = self.ctx.names.alias_of("jax")
        debug = f"{alias}.debug" if alias else self.ctx.names.alias_of("jax.debug")
        if debug is None or any(arg.keyword is not None or arg.star for arg in node.args) \
                or any(formatted_when_printed(arg.value) for arg in node.args):
            return None  # a string formatted in Python is formatted at trace time, whoever prints it
        code = self.ctx.module.code_for_node
        # A string literal prints its own text: it goes into the format (`print("loss", loss)` ->
        # `jax.debug.print("loss {}", loss)`), braces doubled; any other value is a `{}` and an argument.
        pieces, values = [], []
        for arg in node.args:
            text = _literal_text(arg.value)
            if text is None:
                pieces.append("{}")
                values.append(code(arg.value))
            else:
                pieces.append(text.replace("{", "{{").replace("}", "}}"))
        args = "".join(f", {value}" for value in values)
        return FixSpec("safe", [Replacement(node, f'{debug}.print({_string_literal(" ".join(pieces))}{args})')],
                       f"replace `print` with `{debug}.print` and `{{}}` placeholders")


def _literal_text(expr: cst.BaseExpression) -> str | None:
    """The text of a plain string literal (`"loss"`, `r'a\\b'`), None for anything else (bytes, f-strings,
    implicit concatenation, names)."""
    if not isinstance(expr, cst.SimpleString) or "b" in expr.prefix.lower():
        return None
    value = ast.literal_eval(expr.value)
    return value if isinstance(value, str) else None


def _string_literal(text: str) -> str:
    """`text` as a double-quoted literal where it reads as itself, else as Python writes it."""
    if text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    return repr(text)


def _printed_parts(call: cst.Call) -> list[cst.BaseExpression]:
    """What a `print` call shows: its arguments, with a string formatted in Python (an f-string,
    `"...".format(a)`, `"..." % (a, b)`) replaced by the values it formats."""
    parts: list[cst.BaseExpression] = []
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value in _DESTINATION_KEYWORDS:
            continue
        parts.extend(_formatted_values(arg.value))
    return parts


def _formatted_values(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The values a string formatted in Python shows, or `[expr]` for anything else."""
    if isinstance(expr, cst.FormattedString):
        return [p.expression for p in expr.parts if isinstance(p, cst.FormattedStringExpression)]
    if not formatted_in_python(expr):
        return [expr]
    if isinstance(expr, cst.Call):  # `"...".format(a, b=c)`
        return [a.value for a in expr.args]
    values = expr.right  # type: ignore[attr-defined]  # `"..." % (a, b)`
    return [e.value for e in values.elements] if isinstance(values, cst.Tuple) else [values]


def _interpolated_names(expr: cst.BaseExpression) -> set[str]:
    """The root names of the values a formatted string interpolates (`loss` in `{loss.mean():.3f}`)."""
    if isinstance(expr, cst.FormattedString):
        values: list[cst.CSTNode] = [p.expression for p in expr.parts if isinstance(p, cst.FormattedStringExpression)]
    elif isinstance(expr, cst.Call):
        values = [a.value for a in expr.args]
    else:
        values = [expr.right]  # type: ignore[attr-defined]
    found: set[str] = set()
    for value in values:
        stack = [value]
        while stack:
            current = stack.pop()
            if isinstance(current, cst.Name):
                found.add(current.value)
            elif isinstance(current, cst.Attribute):
                stack.append(current.value)
            elif isinstance(current, (cst.Lambda, cst.FormattedString)):
                continue
            else:
                stack.extend(c for c in current.children if isinstance(c, cst.CSTNode))
    return found
