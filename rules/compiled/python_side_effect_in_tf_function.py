"""LL202 python-side-effect-in-tf-function: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.intent import TRACE_READ_TOKENS
from lintloop.rule import HEADLINE_LIMIT, Example, Rule
from lintloop.screen import Needs


class PythonSideEffectInTfFunction(Rule):
    code = "LL202"
    name = "python-side-effect-in-tf-function"
    description = "a Python side effect in a tf.function (runs at trace time only)"
    shown_in_prose = "tracing"
    frameworks = ("tf",)
    # `call:compile`: the unit that compiles a Keras model may say `run_eagerly=True` (no trace).
    # A tf.function (`tf.function`, `common.function`, `from tensorflow import function`: not the word in a
    # docstring), or a Keras model with a step override (a def: text). `TRACE_READ_TOKENS`: the units that
    # may read a trace counter (`print(len(traces))`), which decide whether it counts traces on purpose.
    needs = Needs(file=(("name:function", "name:Model"),
                        ("text:.function", "text:import function", "text:train_step", "text:test_step",
                         "text:predict_step")),
                  statement=(("call:append", "call:extend", "augassign", "call:compile", *TRACE_READ_TOKENS),))
    probe = "trace"
    summary = ("Inside a tf.function (any spelling or wrapper, a Keras `train_step`/`test_step`/`predict_step` "
               "traced by `fit`, or a same-file helper called only from them): `.append`/`.extend` on a list, "
               "or `+=` on a list or a `global`/`nonlocal` variable, defined outside the function (a module "
               "or enclosing function's list, a `self.x` attribute initialised as a list). Appending a Python "
               "record written out in place (a list/tuple/dict display or comprehension, a string) is taken "
               "as deliberate trace-time bookkeeping and not flagged; so is a trace counter or trace log "
               "(`n += 1`, `traces.append(x)`) whose value is read to count traces: asserted (`assert n == 1`, "
               "`self.assertEqual(len(traces), 2)`), or compared or printed as a trace count (the counter's "
               "name or the text says trace/compile: `print(\"traces:\", n)`, `if trace_count > 1:`). A counter "
               "never read, or read as data (a step for a schedule, losses averaged later), is still flagged.")
    why = ("TensorFlow runs a tf.function's Python body only while tracing it (the first call, and again for "
           "each new input signature); later calls run the graph, which holds no Python code. A list "
           "appended to, or a global counter incremented, changes once per trace, not once per call, and "
           "holds symbolic tensors, not values.")
    symptom = ("LL202_bad.py appends the loss to a module-level `history` list inside its "
               "`@tf.function` train step, called 20 times: `history has 1 entries after 20 steps: "
               "[<tf.Tensor 'mean_squared_error/div_no_nan:0' shape=() dtype=float32>]`.")
    remedy = ("Return the value from the tf.function and append it in the eager caller "
              "(`history.append(float(train_step(x, y)))`), or keep state in TensorFlow: a `tf.Variable` "
              "(`counter.assign_add(1)`), a `tf.TensorArray` for values collected inside the function, a Keras "
              "metric (`self.loss_tracker.update_state(loss)`).")
    flagged = (
        Example("""
import tensorflow as tf
history = []
def make_train_step(history):
    @tf.function
    def train_step(x, y):
        loss = tf.reduce_mean((model(x) - y) ** 2)
        history.append(loss)
        return loss
    return train_step
train_step = make_train_step(history)
""", expect="""
7:9-7:29 `history.append(...)` in the tf.function `train_step` runs only at trace time
    help: return the value to the eager caller and update `history` there, or keep the state in a
        `tf.Variable` / `tf.TensorArray` / Keras metric
    note: it changes `history`, a list defined outside the function, once per trace (first call and each
        retrace), not on every call
"""),
        Example("""
import tensorflow as tf
history = []
@tf.function
def train_step(x, y):
    loss = tf.reduce_mean((model(x) - y) ** 2)
    history.append(loss)
    return loss
""", expect="""
6:5-6:25 `history.append(...)` in the tf.function `train_step` runs only at trace time
    help: return the value to the eager caller and update `history` there, or keep the state in a
        `tf.Variable` / `tf.TensorArray` / Keras metric
    note: it changes `history`, a list defined outside the function, once per trace (first call and each
        retrace), not on every call
"""),
        Example("""
import tensorflow as tf
step_count = 0
@tf.function(jit_compile=True)
def train_step(x):
    global step_count
    step_count += 1
    return x * 2
""", expect="""
6:5-6:20 `step_count += ...` in the XLA-compiled tf.function `train_step` runs only at trace time
    help: return the value to the eager caller and update `step_count` there, or keep the state in a
        `tf.Variable` / `tf.TensorArray` / Keras metric
    note: it changes the global variable `step_count`, once per trace (first call and each retrace), not
        on every call
"""),
        Example("""
import tensorflow as tf
class Trainer(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.batch_losses = []
    def train_step(self, data):
        x, y = data
        loss = self.compute_loss(x, y, self(x))
        self.batch_losses.append(loss)
        return {"loss": loss}
""", expect="""
9:9-9:39 `self.batch_losses.append(...)` in the Keras `train_step` runs only at trace time
    help: return the value to the eager caller and update `self.batch_losses` there, or keep the state
        in a `tf.Variable` / `tf.TensorArray` / Keras metric
    note: traced by `fit`/`evaluate`/`predict`; it changes `self.batch_losses`, a list attribute set
        outside the function, once per trace (first call and each retrace), not on every call
"""),
        Example("""
import tensorflow as tf
def make_step(model):
    seen = []
    def record(v):
        seen.append(v)
    @tf.function
    def step(x):
        out = model(x)
        record(out)
        return out
    return step, seen
""", expect="""
5:9-5:23 `seen.append(...)` in `record`, called from the tf.function `step`, runs only at trace time
    help: return the value to the eager caller and update `seen` there, or keep the state in a
        `tf.Variable` / `tf.TensorArray` / Keras metric
    note: `record` is called from the tf.function `step` at line 9; it changes `seen`, a list defined
        outside the function, once per trace (first call and each retrace), not on every call
"""),
        Example("""
import tensorflow as tf
global_step = 0
@tf.function
def train_step(x, y):
    global global_step
    global_step += 1
    return tf.reduce_mean((model(x) - y) ** 2)
for x, y in dataset:
    train_step(x, y)
    if global_step > 1000:
        optimizer.learning_rate = 1e-4
print("steps:", global_step)
""", expect="""
6:5-6:21 `global_step += ...` in the tf.function `train_step` runs only at trace time
    help: return the value to the eager caller and update `global_step` there, or keep the state in a
        `tf.Variable` / `tf.TensorArray` / Keras metric
    note: it changes the global variable `global_step`, once per trace (first call and each retrace),
        not on every call
"""),
        Example("""
import tensorflow as tf
losses = []
@tf.function
def eval_step(x, y):
    loss = tf.reduce_mean((model(x) - y) ** 2)
    losses.append(loss)
    return loss
for x, y in val_data:
    eval_step(x, y)
print("eval batches:", len(losses), "mean loss:", sum(losses) / len(losses))
""", expect="""
6:5-6:24 `losses.append(...)` in the tf.function `eval_step` runs only at trace time
    help: return the value to the eager caller and update `losses` there, or keep the state in a
        `tf.Variable` / `tf.TensorArray` / Keras metric
    note: it changes `losses`, a list defined outside the function, once per trace (first call and each
        retrace), not on every call
"""),
    )
    not_flagged = (
        Example("""
import tensorflow as tf
state = []
@tf.function
def scaled(x):
    if not state:
        state.append(tf.Variable(2.0 * x))
        state.append(tf.Variable(state[0] * 3.0))
    return state[0] * x * state[1]
"""),
        Example("""
import tensorflow as tf
@tf.function
def unroll(x, steps):
    outputs = []
    def advance(x):
        x = x * 2
        outputs.append(x)
        return x
    for i in range(steps):
        x = advance(x)
    return tf.stack(outputs)
"""),
        Example("""
import tensorflow as tf
def test_square_traces_once_per_dtype():
    traces = 0
    @tf.function
    def square(x):
        nonlocal traces
        traces += 1
        return x * x
    square(tf.constant(2.0))
    square(tf.constant(3.0))
    square(tf.constant(2))
    assert traces == 2
"""),
        Example("""
import tensorflow as tf
traced_inputs = []
@tf.function
def normalize(x):
    traced_inputs.append(x)
    return x / tf.reduce_max(x)
for batch in (tf.ones([2]), tf.ones([3]), tf.ones([3])):
    normalize(batch)
print("number of traces:", len(traced_inputs))
"""),
        Example("""
import tensorflow as tf
class StepTest(tf.test.TestCase):
    def test_step_does_not_retrace(self):
        trace_count = 0
        @tf.function
        def step(x):
            nonlocal trace_count
            trace_count += 1
            return x + 1
        for value in [1.0, 2.0, 3.0]:
            step(tf.constant(value))
        if trace_count > 1:
            self.fail("step retraced")
"""),
        Example("""
import tensorflow as tf
traced_with = []
@tf.function(autograph=False)
def f(x):
    with tf.GradientTape() as tape:
        y = layer(x)
    traced_with.append([(id(v), v.name) for v in tape.watched_variables()])
    return y
"""),
        Example("""
import tensorflow as tf
@tf.function
def unroll(x, steps):
    outputs = []
    for i in range(steps):
        x = x * 2
        outputs.append(x)
    return tf.stack(outputs)
"""),
        Example("""
import tensorflow as tf
@tf.function
def run(xs):
    ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
    for i in tf.range(tf.shape(xs)[0]):
        ta = ta.write(i, xs[i] * 2)
    return ta.stack()
"""),
        Example("""
import tensorflow as tf
class Trainer(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.loss_tracker = tf.keras.metrics.Mean(name="loss")
        self.history = []
    def train_step(self, data):
        x, y = data
        loss = self.compute_loss(x, y, self(x))
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}
    def on_epoch_end(self, logs):
        self.history.append(logs)
"""),
        Example("""
import tensorflow as tf
history = []
@tf.function
def train_step(x):
    return tf.reduce_mean(x)
for x in batches:
    history.append(float(train_step(x)))
"""),
        Example("""
import tensorflow as tf
counter = tf.Variable(0)
@tf.function
def step(x):
    counter.assign_add(1)
    return x
"""),
    )

    def _first_time_only(self, node: cst.CSTNode, target: cst.BaseExpression, fn: cst.CSTNode) -> bool:
        """Is the change made only while `target` is still empty, in the function itself (`if not state:`
        `state.append(tf.Variable(...))`, `if obj.v is None:`): state created on the first call, the
        documented way to make variables in a tf.function, meant to run once?"""
        changed = self.ctx.module.code_for_node(target)
        for guard in self.ctx.ancestors(node):
            if guard is fn:
                return False
            if isinstance(guard, cst.If) and self.ctx.is_inside(node, guard.body) and _tests_empty(guard.test, changed,
                                                                                                  self.ctx.module):
                return True
        return False

    def visit_Call(self, node: cst.Call) -> None:
        self._check(node)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._check(node)

    def _check(self, node: cst.Call | cst.AugAssign) -> None:
        ctx = self.ctx
        mutation = ctx.outer_state.mutation(node)
        if mutation is None:
            return
        target, _ = mutation
        outside = ctx.outer_state.defined_outside(target, node)
        if outside is None:
            return
        tf = ctx.tf
        traced = tf.traced_chain(node)
        if traced is None or ctx.outer_state.local_to_trace(target, node, traced[1]) \
                or ctx.intent.counts_traces(node, target, traced[1]) or ctx.intent.shown_call_by_call(traced[1]) \
                or self._first_time_only(node, target, traced[1]):
            return  # a variable of the trace itself; a trace counter read to count traces counts them on purpose
        chain, fn = traced
        label, _, aside = tf.describe(fn).partition(" (")  # "the Keras `train_step`", "traced by `fit`..."
        how = f"{aside.rstrip(')')}; " if aside else ""
        where = [label]
        if chain:
            helper = next(a for a in ctx.ancestors(node) if isinstance(a, cst.FunctionDef)).name.value
            where = [f"`{helper}`, called from {label},", f"`{helper}`"]
            how = f"`{helper}` is {ctx.calls.describe_chain(chain, label).removeprefix(', ')}; {how}"
        # The changing code (`history.append(...)`, `step_count += ...`) shortened so that the headline fits.
        headlines = []
        for limit in (40, 20):
            action = (f"`{ctx.snippet(node.func, limit)}(...)`" if isinstance(node, cst.Call)
                      else f"`{ctx.snippet(node.target, limit)} += ...`")
            headlines += [f"{action} in {place} runs only at trace time" for place in where]
        headline = next((h for h in headlines if len(h) <= HEADLINE_LIMIT), headlines[-1])
        self.report(node, headline,
                    help=f"return the value to the eager caller and update `{ctx.snippet(target, 40)}` there, or "
                         "keep the state in a `tf.Variable` / `tf.TensorArray` / Keras metric",
                    note=f"{how}it changes {outside}, once per trace (first call and each retrace), not on "
                         "every call")


def _tests_empty(test: cst.BaseExpression, changed: str, module: cst.Module) -> bool:
    """`not x`, `x is None`, `len(x) == 0`, `x == []` for the code `changed`."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return module.code_for_node(test.expression) == changed
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        left, (compared,) = test.left, test.comparisons
        right = module.code_for_node(compared.comparator)
        if isinstance(left, cst.Call) and module.code_for_node(left.func) == "len" and len(left.args) == 1:
            return module.code_for_node(left.args[0].value) == changed and right == "0" \
                and isinstance(compared.operator, (cst.Equal, cst.LessThanEqual))
        return module.code_for_node(left) == changed and (
            isinstance(compared.operator, cst.Is) and right == "None"
            or isinstance(compared.operator, cst.Equal) and right in ("[]", "None", "0"))
    return False
