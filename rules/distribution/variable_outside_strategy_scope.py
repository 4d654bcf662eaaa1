"""LL401 variable-outside-strategy-scope: the rule, its documentation and its examples."""

from __future__ import annotations

import os
from collections import defaultdict
from functools import cached_property

import libcst as cst

from lintloop.analysis.index import Scope
from lintloop.analysis.nodes import argument, dotted, dotted_names_in
from lintloop.rule import Example, Rule
from lintloop.screen import Needs


_KERAS_STATEFUL_PREFIXES = ("keras.optimizers.", "keras.metrics.", "keras.applications.")


_KERAS_MODELS = {"keras.Sequential", "keras.Model", "keras.models.Sequential", "keras.models.Model"}

# How many same-file helpers of helpers a builder call is followed into.
HELPER_DEPTH = 2



class VariableOutsideStrategyScope(Rule):
    code = "LL401"
    name = "variable-outside-strategy-scope"
    description = "a model, optimizer or variable built outside `strategy.scope()`"
    frameworks = ("tf",)
    # The step functions, the objects they use and where those are built are selected with the calls
    # that use the strategy.
    needs = Needs(file=(("text:Strategy",),), statement=(("call:run", "call:experimental_distribute_dataset",
                                                           "call:distribute_datasets_from_function", "call:compile"),))
    probe = "error/effect"
    summary = ("A `tf.distribute` strategy is built and used (`strategy.run`, "
               "`experimental_distribute_dataset`, `distribute_datasets_from_function`), but a Keras "
               "model, optimizer, metric or `tf.Variable` that the distributed step uses, or a Keras optimizer "
               "that `model.compile(optimizer=...)` gets inside the scope, is constructed "
               "outside `with strategy.scope():` — directly, or by a helper called outside it that returns "
               "it (a function of the same file, or one imported from another module of the project). A "
               "name re-bound inside the scope (a later cell's `with strategy.scope(): acc = Accuracy()`) "
               "before the step is defined or `strategy.run` runs it, in the same scope, is not flagged for its "
               "earlier object; nor is an instance attribute that another method always re-binds (which runs "
               "first is not known).")
    why = ("Variables are created by the strategy that is current when they are built. Built outside the "
           "scope they are ordinary single-device variables, not mirrored per replica.")
    symptom = ("LL401_bad.py (Keras 3, MirroredStrategy over 2 CPU devices) fails at its first "
               "distributed step: `RuntimeError: Mixing different tf.distribute.Strategy objects: "
               "<...MirroredStrategy object ...> is not <..._DefaultDistributionStrategy object ...>` (Adam "
               "built outside). With only the model outside: `ValueError: colocate_vars_with must only be "
               "passed a variable created in this tf.distribute.Strategy.scope()`. "
               "LL401_module_strategy_bad.py (strategy at module level, model from "
               "`build_model()` called outside the scope, SGD built inside) fails at its first step with a bare "
               "`AssertionError` from the optimizer's distributed update; if the model's variables are created "
               "lazily inside the step, TF fails instead with `InvalidArgumentError: You must feed a value for "
               "placeholder tensor ...`. Keras 2 with an optimizer outside runs silently, without mirrored slots.")
    remedy = ("Build the model, optimizer, metrics and variables inside `with strategy.scope():` (a "
              "function that builds them may be called from inside the scope). With Keras 3 Adam, also "
              "call `optimizer.build(model.trainable_variables)` inside the scope.")
    flagged = (
        Example("""
import tensorflow.compat.v2 as tf
strategy = tf.distribute.MirroredStrategy()
model = build_resnet(num_classes=1000)
optimizer = tf.keras.optimizers.SGD(0.1, momentum=0.9)
train_loss = tf.keras.metrics.Mean()
@tf.function
def train_step(iterator):
    def step_fn(images, labels):
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss = tf.nn.compute_average_loss(
                tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True),
                global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        train_loss.update_state(loss)
    strategy.run(step_fn, args=next(iterator))
iterator = iter(strategy.experimental_distribute_dataset(train_ds))
for step in range(train_steps):
    train_step(iterator)
""", expect="""
4:13-4:55 Keras optimizer `SGD` built outside `strategy.scope()`
    help: build it inside `with strategy.scope():`
    note: used in the distributed step `step_fn`: its variables are not mirrored across replicas (Keras
        3 fails at the first step)
5:14-5:37 Keras metric `Mean` built outside `strategy.scope()`
    help: build it inside `with strategy.scope():`
    note: used in the distributed step `step_fn`: its variables are not mirrored across replicas (Keras
        3 fails at the first step)
"""),
        Example("""
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
optimizer = tf.keras.optimizers.Adam(learning_rate=1e-3)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(128, activation="relu"), tf.keras.layers.Dense(10)])
    model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy")
model.fit(strategy.experimental_distribute_dataset(train_ds), epochs=5)
""", expect="""
3:13-3:57 Keras optimizer `Adam` built outside `strategy.scope()` but compiled inside it
    help: build it inside `with strategy.scope():`
    note: compiled into a model inside the scope (line 6): Keras 3 fails at the first step of `fit`
        (`RuntimeError: Mixing different tf.distribute.Strategy objects`)
"""),
        Example("""
import tensorflow as tf
class Trainer:
    def __init__(self, learning_rate):
        self.model = tf.keras.Sequential([tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(1)])
        self.optimizer = tf.keras.optimizers.SGD(learning_rate)
    def replica_step(self, features, targets):
        with tf.GradientTape() as tape:
            per_example = tf.keras.losses.mean_squared_error(targets, self.model(features, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss
    @tf.function
    def distributed_step(self, strategy, features, targets):
        return strategy.run(self.replica_step, args=(features, targets))
strategy = tf.distribute.MirroredStrategy()
trainer = Trainer(0.01)
for features, targets in strategy.experimental_distribute_dataset(train_ds):
    trainer.distributed_step(strategy, features, targets)
""", expect="""
4:22-4:115 Keras model built outside `strategy.scope()`
    help: build it inside `with strategy.scope():`
    note: used in the distributed step `replica_step`: its variables are not mirrored across replicas
        (Keras 3 fails at the first step)
5:26-5:64 Keras optimizer `SGD` built outside `strategy.scope()`
    help: build it inside `with strategy.scope():`
    note: used in the distributed step `replica_step`: its variables are not mirrored across replicas
        (Keras 3 fails at the first step)
"""),
        Example("""
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
with strategy.scope():
    optimizer = tf.keras.optimizers.SGD()
def step(x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
for x in strategy.experimental_distribute_dataset(ds):
    strategy.run(step, args=(x,))
""", expect="""
3:9-3:56 Keras model built outside `strategy.scope()`
    help: build it inside `with strategy.scope():`
    note: used in the distributed step `step`: its variables are not mirrored across replicas (Keras 3
        fails at the first step)
"""),
        Example("""
import tensorflow as tf
from tensorflow import keras
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.layers.Dense(1)])
opt = keras.optimizers.Adam()
acc = keras.metrics.Mean()
def train_step(x):
    opt.apply_gradients([])
    acc.update_state(model(x))
strategy.run(train_step, args=(x,))
""", expect="""
6:7-6:30 Keras optimizer `Adam` built outside `strategy.scope()`
    help: build it inside `with strategy.scope():`
    note: used in the distributed step `train_step`: its variables are not mirrored across replicas
        (Keras 3 fails at the first step)
7:7-7:27 Keras metric `Mean` built outside `strategy.scope()`
    help: build it inside `with strategy.scope():`
    note: used in the distributed step `train_step`: its variables are not mirrored across replicas
        (Keras 3 fails at the first step)
"""),
        Example("""
import tensorflow as tf
class Net(tf.keras.Model):
    def call(self, x):
        return x
strategy = tf.distribute.MirroredStrategy()
net = Net()
def step(x):
    return net(x)
strategy.run(step, args=(1,))
""", expect="""
6:7-6:12 Keras model `Net` built outside `strategy.scope()`
    help: build it inside `with strategy.scope():`
    note: used in the distributed step `step`: its variables are not mirrored across replicas (Keras 3
        fails at the first step)
"""),
        Example("""
import tensorflow as tf
class Runner:
    def __init__(self):
        self.strategy = tf.distribute.MirroredStrategy()
        self.model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    def train_step(self, batch):
        def step(x, y):
            return self.model(x)
        self.strategy.run(step, args=batch)
""", expect="""
5:22-5:69 Keras model built outside `strategy.scope()`
    help: build it inside `with strategy.scope():`
    note: used in the distributed step `step`: its variables are not mirrored across replicas (Keras 3
        fails at the first step)
"""),
        Example("""
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
counter = tf.Variable(0)
def step(x):
    counter.assign_add(1)
strategy.run(step, args=(1,))
""", expect="""
3:11-3:25 `tf.Variable` built outside `strategy.scope()`
    help: build it inside `with strategy.scope():`
    note: used in the distributed step `step`: its variables are not mirrored across replicas (Keras 3
        fails at the first step)
"""),
        Example("""
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
def create_model(units):
    model = tf.keras.Sequential([tf.keras.layers.Dense(units)])
    return model
def build_all():
    return create_model(1)
model = build_all()
with strategy.scope():
    optimizer = tf.keras.optimizers.Adam()
def step_fn(x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
@tf.function
def train_step(iterator):
    strategy.run(step_fn, args=(next(iterator),))
""", expect="""
8:9-8:20 Keras model built outside `strategy.scope()`
    help: call `create_model` inside `with strategy.scope():`
    note: built by `create_model` (line 4) and used in the distributed step `step_fn`: its variables are
        not mirrored across replicas (Keras 3 fails at the first step)
"""),
        Example("""
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
def build_network():
    return tf.keras.Sequential([tf.keras.layers.Dense(1)])
def replica_step(net, opt, batch):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(net(batch))
    opt.apply_gradients(zip(tape.gradient(loss, net.trainable_variables), net.trainable_variables))
def main(dataset):
    model = build_network()
    with strategy.scope():
        optimizer = tf.keras.optimizers.SGD()
    for batch in strategy.experimental_distribute_dataset(dataset):
        strategy.run(replica_step, args=(model, optimizer, batch))
""", expect="""
10:13-10:28 Keras model built outside `strategy.scope()`
    help: call `build_network` inside `with strategy.scope():`
    note: built by `build_network` (line 4) and used in the distributed step `replica_step`: its
        variables are not mirrored across replicas (Keras 3 fails at the first step)
"""),
        Example("""
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
acc = tf.keras.metrics.Accuracy()
def replica_fn(x, y):
    acc.update_state(y, model(x))
strategy.run(replica_fn, args=(x, y))
with strategy.scope():
    acc = tf.keras.metrics.Accuracy()
""", expect="""
5:7-5:34 Keras metric `Accuracy` built outside `strategy.scope()`
    help: build it inside `with strategy.scope():`
    note: used in the distributed step `replica_fn`: its variables are not mirrored across replicas
        (Keras 3 fails at the first step)
"""),
        Example("""
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
acc = tf.keras.metrics.Accuracy()
if distributed_eval:
    with strategy.scope():
        acc = tf.keras.metrics.Accuracy()
def replica_fn(x, y):
    acc.update_state(y, model(x))
strategy.run(replica_fn, args=(x, y))
""", expect="""
5:7-5:34 Keras metric `Accuracy` built outside `strategy.scope()`
    help: build it inside `with strategy.scope():`
    note: used in the distributed step `replica_fn`: its variables are not mirrored across replicas
        (Keras 3 fails at the first step)
"""),
        Example("""
import tensorflow as tf
class Evaluator:
    def __init__(self, x, y):
        self.strategy = tf.distribute.MirroredStrategy()
        with self.strategy.scope():
            self.model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
        self.acc = tf.keras.metrics.Accuracy()
        self.strategy.run(self.replica_fn, args=(x, y))
        with self.strategy.scope():
            self.acc = tf.keras.metrics.Accuracy()
    def replica_fn(self, x, y):
        self.acc.update_state(y, self.model(x))
Evaluator(x, y)
""", expect="""
7:20-7:47 Keras metric `Accuracy` built outside `strategy.scope()`
    help: build it inside `with strategy.scope():`
    note: used in the distributed step `replica_fn`: its variables are not mirrored across replicas
        (Keras 3 fails at the first step)
"""),
    )
    not_flagged = (
        Example("""
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    optimizer = tf.keras.optimizers.Adam(learning_rate=1e-3)
    model = tf.keras.Sequential([tf.keras.layers.Dense(128, activation="relu"), tf.keras.layers.Dense(10)])
    model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy")
    other = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    other.compile(optimizer="adam", loss="mse")
model.fit(strategy.experimental_distribute_dataset(train_ds), epochs=5)
"""),
        Example("""
import tensorflow as tf
class Trainer:
    def __init__(self, model, strategy):
        self.model = model
        self.strategy = strategy
        self.optimizer = tf.keras.optimizers.SGD(0.1, momentum=0.9)
        self.accuracy = tf.keras.metrics.SparseCategoricalAccuracy()
    def replica_step(self, images, labels):
        with tf.GradientTape() as tape:
            logits = self.model(images, training=True)
            loss = tf.nn.compute_average_loss(self.loss_fn(labels, logits), global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        self.accuracy.update_state(labels, logits)
    def fit(self, dist_ds, strategy):
        for images, labels in dist_ds:
            strategy.run(self.replica_step, args=(images, labels))
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    trainer = Trainer(build_model(), strategy)
trainer.fit(strategy.experimental_distribute_dataset(train_ds), strategy)
"""),
        Example("""
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
acc = tf.keras.metrics.Accuracy()
for x, y in eval_ds:
    acc.update_state(y, model(x))
with strategy.scope():
    acc = tf.keras.metrics.Accuracy()
@tf.function
def eval_step(x, y):
    def replica_fn(x, y):
        acc.update_state(y, model(x))
    strategy.run(replica_fn, args=(x, y))
"""),
        Example("""
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
model.fit(x_train, y_train)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
strategy.run(lambda x: x, args=(model,))
"""),
        Example("""
import tensorflow as tf
class Trainer:
    def __init__(self, strategy):
        self.strategy = strategy
        with self.strategy.scope():
            self.model = self.build_model()
            self.optimizer = tf.keras.optimizers.Adam()
    def build_model(self):
        return tf.keras.Sequential([tf.keras.layers.Dense(1)])
    def train(self, x):
        def step(x):
            return self.model(x)
        self.strategy.run(step, args=(x,))
trainer = Trainer(tf.distribute.MirroredStrategy())
"""),
        Example("""
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.Adam()
def step(x):
    optimizer.apply_gradients([])
    return model(x)
strategy.run(step, args=(1,))
"""),
        Example("""
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
def build():
    return tf.keras.Sequential([tf.keras.layers.Dense(1)])
with strategy.scope():
    model = build()
def step(x):
    return model(x)
strategy.run(step, args=(1,))
"""),
        Example("""
import tensorflow as tf
model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
optimizer = tf.keras.optimizers.Adam()
model.compile(optimizer=optimizer, loss="mse")
"""),
        Example("""
import tensorflow as tf
strategy = tf.distribute.get_strategy()
model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
def step(x):
    return model(x)
strategy.run(step, args=(1,))
"""),
        Example("""
import tensorflow as tf
class Evaluator:
    def __init__(self):
        self.strategy = tf.distribute.MirroredStrategy()
        self.acc = tf.keras.metrics.Accuracy()
    def eager_pass(self, dataset):
        for x, y in dataset:
            self.acc.update_state(y, self.model(x))
        with self.strategy.scope():
            self.acc = tf.keras.metrics.Accuracy()
    def replica_fn(self, x, y):
        self.acc.update_state(y, self.model(x))
    def distributed_pass(self, x, y):
        self.strategy.run(self.replica_fn, args=(x, y))
evaluator = Evaluator()
evaluator.eager_pass(dataset)
evaluator.distributed_pass(x, y)
"""),
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._built_by_functions: dict[tuple[int, int], str | None] = {}

    def visit_Call(self, node: cst.Call) -> None:
        if not self.ctx.strategies.used:
            return
        what = self._stateful_kind(node)
        if what is not None and self._returned_by(node) is not None:
            return  # built by a helper: judged where the helper is called
        if what is None:
            what = self._built_by_helper(node, HELPER_DEPTH)
        if what is None or self.ctx.strategies.in_scope(node):
            return
        holders = self._holder_names(node)
        steps, runs = self._readers
        # Source order: the first is named.
        users = [fn.name.value for fn in steps.reading(holders) if self._seen_at(holders, node, fn) & steps.read[fn]]
        users += [dotted(run.args[0].value) or "step" for run in runs.reading(holders)  # `args=(model, ...)`
                  if self._seen_at(holders, node, run) & runs.read[run]]
        # A helper's object: the headline names what it is, the note where the helper builds it.
        kind, _, helper = what.partition(" from `")
        helper_name, _, place = helper.partition("` ")
        origin = f"built by `{helper_name}` {place} and " if helper else ""
        remedy = (f"call `{helper_name}` inside `with strategy.scope():`" if helper
                  else "build it inside `with strategy.scope():`")
        if users:
            self.report(node, f"{kind} built outside `strategy.scope()`",
                        help=remedy,
                        note=f"{origin}used in the distributed step `{users[0]}`: its variables are not mirrored "
                             "across replicas (Keras 3 fails at the first step)")
        elif what.startswith("Keras optimizer"):
            compiled = [c for c, read in self._compiles_in_scope if self._seen_at(holders, node, c) & read]
            if compiled:
                self.report(node, f"{kind} built outside `strategy.scope()` but compiled inside it",
                            help=remedy,
                            note=f"{origin}compiled into a model inside the scope (line "
                                 f"{self.ctx.line_of(compiled[0])}): Keras 3 fails at the first step of `fit` "
                                 "(`RuntimeError: Mixing different tf.distribute.Strategy objects`)")

    @cached_property
    def _compiles_in_scope(self) -> list[tuple[cst.Call, set[str]]]:
        """`model.compile(optimizer=...)` calls inside a strategy scope, each with the names its optimizer
        argument reads."""
        found = []
        for call in self.ctx.definitions.named("compile").nodes:
            optimizer = argument(call, 0, "optimizer")
            if isinstance(call.func, cst.Attribute) and optimizer is not None and self.ctx.strategies.in_scope(call):
                found.append((call, dotted_names_in(optimizer)))
        return found

    @cached_property
    def _readers(self) -> tuple[_Readers, _Readers]:
        """The step functions and the `strategy.run` calls (with `args=`), each by the names it reads: the
        function's body, the call's arguments after the function."""
        functions = sorted(self.ctx.strategies.step_functions, key=self.ctx.order.get)
        runs = [run for run in self.ctx.strategies.runs if run.args]
        return (_Readers({fn: dotted_names_in(fn.body) for fn in functions}),
                _Readers({run: set().union(*(dotted_names_in(a.value) for a in run.args[1:])) for run in runs}))

    def _seen_at(self, holders: set[str], call: cst.Call, use: cst.CSTNode) -> set[str]:
        """The holders of what `call` builds that code at `use` still reads: not those re-bound after `call`
        by a statement of its scope that always runs, before `use` runs there (a step function: where
        `strategy.run` runs it; a `def` runs later than itself; a later cell's `with strategy.scope(): acc =
        Accuracy()`), nor an instance attribute that another method always binds (which runs first is not
        known)."""
        ctx = self.ctx
        scope = ctx.scope_of(call)
        until = self._runs_at(use, scope)
        function = scope if isinstance(scope, cst.FunctionDef) else None
        return {name for name in holders if not any(
            self._always_runs(binding.node, scope)
            for binding in ctx.flow.scope_bindings_between(scope, name, ctx.order[call], until))
            and not (function is not None and any(
                self._always_runs(b.node, ctx.scope_of(b.node)) for b in ctx.flow.other_method_bindings(name, function)))}

    def _runs_at(self, use: cst.CSTNode, scope: Scope) -> int:
        """The point of `scope` where code at `use` runs: the first `strategy.run` of a step function there,
        else the statement of `scope` holding `use`, else the end of `scope` (run from elsewhere, later)."""
        ctx = self.ctx
        if isinstance(use, cst.FunctionDef):
            runs = [ctx.order[r] for r in ctx.strategies.runs if ctx.scope_of(r) is scope and use in ctx.calls.targets(r)]
            if runs:
                return min(runs)
        body = scope.body if isinstance(scope, cst.FunctionDef) else scope
        held = next((a for a in (use, *ctx.ancestors(use)) if ctx.parents.get(a) is body), None)
        return ctx.order[held] if held is not None else ctx.subtree_end[scope]

    def _always_runs(self, node: cst.CSTNode, scope: cst.CSTNode) -> bool:
        """Does `node` run whenever its scope's body does (in no branch, loop or nested def)?"""
        for ancestor in (node, *self.ctx.ancestors(node)):
            if ancestor is scope:
                return True
            if isinstance(ancestor, _BRANCHES):
                return False
        return True

    def _returned_by(self, call: cst.Call) -> cst.FunctionDef | None:
        """The function that returns the object `call` builds (`return Ctor()`, `x = Ctor(); return x`)."""
        function = self.ctx.scope_of(call)
        if not isinstance(function, cst.FunctionDef):
            return None
        statement = self.ctx.parents.get(call)
        if isinstance(statement, cst.Return):
            return function
        if isinstance(statement, cst.Assign):
            names = {dotted(t.target) for t in statement.targets} - {None}
            if any(isinstance(r.value, cst.Name) and r.value.value in names
                   for r in self.ctx.returns_of(function)):
                return function
        return None

    def _built_by_helper(self, call: cst.Call, depth: int) -> str | None:
        """What a call of a helper builds and returns: a same-file function (through helpers of helpers)
        or a function of another module of the project."""
        local = self.ctx.calls.local_functions(call.func)
        if not local:
            return self._built_in_other_module(call)
        key = (id(local), depth)  # the same for every call of these functions (all of one name)
        if key not in self._built_by_functions:
            self._built_by_functions[key] = self._built_by_functions_of(local, depth)
        return self._built_by_functions[key]

    def _built_by_functions_of(self, local: list[cst.FunctionDef], depth: int) -> str | None:
        for function in local:
            for inner in self.ctx.definitions.calls_in(function):
                if self._returned_by(inner) is not function:
                    continue
                kind = self._stateful_kind(inner) or (self._built_by_helper(inner, depth - 1) if depth else None)
                if kind is not None:
                    return kind if " from `" in kind else f"{kind} from `{function.name.value}` (line {self.ctx.line_of(inner)})"
        return None

    def _stateful_kind(self, call: cst.Call) -> str | None:
        name = self.ctx.names.callee(call)
        if name is None:
            subclass = self.ctx.definitions.local_class(call.func)
            if subclass is not None and any(self.ctx.names.qualname(base.value) in _KERAS_MODELS for base in subclass.bases):
                return f"Keras model `{subclass.name.value}`"
            return None
        return _kind_of(name)

    def _built_in_other_module(self, call: cst.Call) -> str | None:
        """`build_model()` imported from another module of the project, which returns what it builds."""
        function = self.ctx.project.function_of(call.func)
        if function is None:
            return None
        for name, built, holder in self.ctx.project.returned_calls(function):
            kind = _kind_of(name)
            if kind is not None:
                return f"{kind} from `{function.name}` ({os.path.basename(holder.module.path)}:{built.lineno})"
        return None

    def _holder_names(self, call: cst.Call) -> set[str]:
        """Names the constructed object ends up in: `x = Ctor()`, `x = build()`."""
        statement = self.ctx.parents.get(call)
        if isinstance(statement, cst.Assign):
            return {dotted(t.target) for t in statement.targets} - {None}
        return set()


class _Readers:
    """Pieces of code in order, each with the names it reads; found by name (a file of 1,000 steps is
    not searched whole for each object built outside the scope)."""

    def __init__(self, read: dict[cst.CSTNode, set[str]]) -> None:
        self.read = read
        self._nodes = list(read)
        self._places: dict[str, list[int]] = defaultdict(list)
        for place, names in enumerate(read.values()):
            for name in names:
                self._places[name].append(place)

    def reading(self, names: set[str]) -> list[cst.CSTNode]:
        """Those that read one of `names`, in order."""
        return [self._nodes[place] for place in sorted({p for name in names for p in self._places.get(name, ())})]


# Statements whose body may not run, or run out of order: a re-binding inside one may not replace the object.
_BRANCHES = (cst.If, cst.For, cst.While, cst.Try, cst.TryStar, cst.Match, cst.FunctionDef, cst.ClassDef)


def _kind_of(name: str) -> str | None:
    """What a call of the qualified `name` builds, when it holds variables a strategy must mirror."""
    last = name.rsplit(".", 1)[-1]
    if name == "tensorflow.Variable":
        return "`tf.Variable`"
    if name in _KERAS_MODELS:
        return "Keras model"
    if name.startswith(_KERAS_STATEFUL_PREFIXES) and last[:1].isupper() and ".schedules." not in name:
        return f"Keras {name.split('.')[1].rstrip('s')} `{last}`"
    return None
