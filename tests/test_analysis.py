"""The engine's shared analyses: names through every import spelling, contexts, flow, training loops."""

import ast
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from lintloop.analysis import FileContext
from lintloop.analysis.nodes import call_name
from lintloop.rules import ALL_RULES


def context(code: str) -> FileContext:
    return FileContext(cst.parse_module(textwrap.dedent(code)))


def calls(ctx: FileContext, name: str) -> list[cst.Call]:
    return [c for c in ctx.nodes(cst.Call) if call_name(c) == name]


@pytest.mark.parametrize("code,expected", [
    ("import tensorflow as tf\ntf.argmax(x)", "tensorflow.argmax"),
    ("import tensorflow\ntensorflow.math.argmax(x)", "tensorflow.math.argmax"),
    ("from tensorflow import math as m\nm.argmax(x)", "tensorflow.math.argmax"),
    ("from tensorflow.math import argmax\nargmax(x)", "tensorflow.math.argmax"),
    ("from tensorflow.keras import losses\nlosses.MeanSquaredError()", "keras.losses.MeanSquaredError"),
    ("import tensorflow as tf\ntf.keras.losses.MeanSquaredError()", "keras.losses.MeanSquaredError"),
    ("import tf_keras\ntf_keras.losses.MeanSquaredError()", "keras.losses.MeanSquaredError"),
    ("import keras\nkeras.losses.MeanSquaredError()", "keras.losses.MeanSquaredError"),
    ("import tensorflow as tf\ntf.losses.MeanSquaredError()", "keras.losses.MeanSquaredError"),
    ("import torch.nn.functional as F\nF.mse_loss(a, b)", "torch.nn.functional.mse_loss"),
    ("import torch.nn\ntorch.nn.functional.mse_loss(a, b)", "torch.nn.functional.mse_loss"),
    ("def argmax(x):\n    return x\nargmax(x)", None),
    ("from .local import tf\ntf.argmax(x)", None),
])
def test_qualified_names_through_every_spelling(code, expected):
    ctx = context(code)
    assert ctx.names.callee(ctx.nodes(cst.Call)[-1]) == expected


def test_builtin_print_is_not_a_rebound_print():
    assert context("print(1)").names.is_builtin(cst.Name("print"), "print")
    assert not context("from rich import print\nprint(1)").names.is_builtin(cst.Name("print"), "print")
    assert not context("def print(x):\n    pass\n").names.is_builtin(cst.Name("print"), "print")


def test_contexts_tape_noop_scope_and_compiled():
    ctx = context("""
        import tensorflow as tf
        import torch
        strategy = tf.distribute.MirroredStrategy()
        def build():
            return tf.keras.Sequential()
        with strategy.scope():
            model = build()
        with tf.GradientTape() as tape:
            a = f(x)
        b = g(x)
        with torch.no_grad():
            c = h(x)
        @tf.function
        def step():
            def inner():
                return k(x)
            return inner()
    """)
    [f], [g], [h], [k], [sequential] = (calls(ctx, n) for n in ("f", "g", "h", "k", "Sequential"))
    assert [c.alias for c in ctx.tf.tapes.enclosing(f)] == ["tape"]
    assert ctx.tf.tapes.enclosing(g) == []
    assert ctx.torch.no_grad.enclosing(h) and not ctx.tf.tapes.enclosing(h)
    assert ctx.strategies.in_scope(sequential)  # built in a function only called inside the scope
    assert ctx.tf.compiled_function_of(k).name.value == "step" and ctx.tf.compiled_function_of(g) is None


def test_flows_into_follows_assignments_before_the_use():
    ctx = context("""
        with tape:
            p = model(x)
            q = np.asarray(p)
            metric = np.mean(p)
            loss = fn(y, q)
        grads = tape.gradient(loss, w)
    """)
    [asarray] = calls(ctx, "asarray")
    [mean] = calls(ctx, "mean")
    target = calls(ctx, "gradient")[0].args[0].value
    assert ctx.flow.flows_into(asarray, target) and not ctx.flow.flows_into(mean, target)


def test_training_loops_directly_and_through_a_same_file_function():
    ctx = context("""
        import tensorflow as tf
        def step(batch):
            loss = model(batch)
            loss.backward()
            optimizer.step()
        for batch in loader:
            step(batch)
        for batch in loader:
            evaluate(batch)
        for epoch in range(3):
            for x in data:
                with tf.GradientTape() as t:
                    l = model(x)
                t.gradient(l, model.trainable_variables)
    """)
    loops = ctx.nodes(cst.For)
    assert [ctx.training.is_training_loop(loop) for loop in loops] == [True, False, True, True]


# ----- the indexes equal the walks they replace (issue 22: linear time) ---------------------------

_TRICKY_FLOWS = """
import torch
loss = model(x)
loss = loss + reg(loss)
d = {}
d[loss.backward()] = loss
x: f(loss.backward()) = model(y)
for i in range(3):
    loss = (z := model(i)) + loss
    w = loss
    w.backward()
    (q := loss).backward()
def g(a, b=loss.backward()):
    global loss
    c = a + loss
    c.backward()
    def h():
        nonlocal c
        c = c * model(c)
        c.backward()
        return c
    loss = h()
    return [t for t in loss]
with model(x) as m, m(m) as n:
    n.backward()
    m = m.backward()
y = y.backward()
a, b = model(x), model(y)
(a + b).backward()
a, *rest = b
rest.backward()
"""


def _analysed_sources() -> list[str]:
    """The rules' examples, the fixtures and a file of unusual bindings."""
    fixtures = sorted((Path(__file__).parent / "fixtures").glob("*.py"))
    return ([textwrap.dedent(e.code) for r in ALL_RULES for e in (*r.flagged, *r.not_flagged)]
            + [p.read_text(encoding="utf-8") for p in fixtures] + [_TRICKY_FLOWS])


def _walked_scope(ctx: FileContext, node: cst.CSTNode) -> cst.CSTNode:
    return next((a for a in ctx.ancestors(node) if isinstance(a, cst.FunctionDef) and node is not a.name), ctx.module)


def test_tree_questions_answered_from_the_index_equal_the_walks():
    for source in _analysed_sources():
        ctx = context(source)
        containers = [*ctx.nodes(cst.For), *ctx.nodes(cst.While), *ctx.nodes(cst.FunctionDef), *ctx.nodes(cst.With)]
        for container in containers:
            walked = [c for c in ctx.nodes(cst.Call) if c is container or any(a is container for a in ctx.ancestors(c))]
            assert ctx.nodes_within(cst.Call, container) == walked
            assert list(ctx.definitions.calls_in(container)) == [c for c in walked if not any(
                isinstance(a, (cst.FunctionDef, cst.Lambda)) for a in _ancestors_below(ctx, c, container))]
        for node in ctx.nodes(cst.Name) + ctx.nodes(cst.Call):
            assert ctx.scope_of(node) is _walked_scope(ctx, node)
            assert ctx.enclosing_scopes(node) == [a for a in ctx.ancestors(node) if isinstance(a, cst.FunctionDef)] + [
                ctx.module]
        for scope in [ctx.module, *ctx.nodes(cst.FunctionDef)]:
            assert ctx.nodes_in_scope(cst.Return, scope).nodes == [
                r for r in ctx.nodes(cst.Return) if _walked_scope(ctx, r) is scope]


def _ancestors_below(ctx: FileContext, node: cst.CSTNode, stop: cst.CSTNode) -> list[cst.CSTNode]:
    found = []
    for ancestor in ctx.ancestors(node):
        if ancestor is stop:
            break
        found.append(ancestor)
    return found


def test_bindings_found_by_bisection_equal_the_filtered_lists():
    for source in _analysed_sources():
        ctx = context(source)
        for node in ctx.nodes(cst.Name):
            scopes = ctx.enclosing_scopes(node)
            found = next(((s, ctx.bindings_in(s, node.value)) for s in scopes if ctx.bindings_in(s, node.value)), None)
            if found is None:
                assert ctx.flow.bindings_of(node.value, node) == [] and ctx.flow.last_binding(node.value, node) is None
                continue
            scope, bindings = found
            before = [b for b in bindings if scope is not scopes[0] or b.order < ctx.order[node]
                      and not (b.value is not None and ctx.is_inside(node, b.value))]
            assert ctx.flow.bindings_of(node.value, node) == before
            assert list(ctx.flow.bindings_latest_first(node.value, node)) == sorted(
                before, key=lambda b: b.order, reverse=True)
            assert ctx.flow.last_binding(node.value, node) == (max(before, key=lambda b: b.order) if before else None)
            for loop in ctx.nodes(cst.For):
                assert ctx.flow.bindings_within(node.value, node, loop) == [
                    b for b in bindings if ctx.is_inside(b.node, loop)]


def test_values_followed_forward_reach_what_following_back_reaches():
    """`DataFlow.reaches` (names followed forward from the value once) answers as `flows_into` for each use."""
    for source in _analysed_sources():
        ctx = context(source)
        for scope in {ctx.scope_of(call) for _, call in ctx.training.differentiated}:
            uses = ctx.training.differentiated_in_scope(scope)
            indexed = ctx.flow.uses(uses)
            for node in ctx.nodes_in_scope(cst.Call, scope).nodes + ctx.nodes_in_scope(cst.Name, scope).nodes:
                assert ctx.flow.reaches(node, indexed) == any(ctx.flow.flows_into(node, t, at) for t, at in uses), (
                    ctx.snippet(node))


def _method(ctx: FileContext, cls: str, name: str) -> cst.FunctionDef:
    klass = next(c for c in ctx.nodes(cst.ClassDef) if c.name.value == cls)
    return next(m for m in klass.body.body if isinstance(m, cst.FunctionDef) and m.name.value == name)


def test_an_instance_attribute_set_in_another_method_is_seen_as_an_enclosing_binding():
    ctx = context("""
        class Trainer:
            def __init__(self):
                self.model = None
                self.model = Net()
                self.loss_fn = CrossEntropyLoss()
            def fit(self):
                out = self.model(x)
                self.loss_fn = FocalLoss()
                loss = self.loss_fn(out, y)
            def evaluate(self):
                return self.loss_fn(self.model(x), y)
    """)
    flow = ctx.flow
    [fit_model, evaluate_model] = calls(ctx, "model")
    assert ctx.snippet(flow.last_binding("self.model", fit_model).value) == "Net()"  # the `None` placeholder left out
    fit_loss, evaluate_loss = calls(ctx, "loss_fn")[-2:]
    # Its own method's assignment before the read wins; another method sees every method's assignments.
    assert ctx.snippet(flow.last_binding("self.loss_fn", fit_loss).value) == "FocalLoss()"
    assert {ctx.snippet(b.value) for b in flow.bindings_of("self.loss_fn", evaluate_loss)} == {
        "CrossEntropyLoss()", "FocalLoss()"}
    # Outside a class, `self.x` is bound nowhere.
    assert flow.bindings_of("self.model", context("def f(self):\n    return self.model\n").nodes(cst.Name)[-1]) == []


def test_values_flow_through_instance_attributes_within_and_across_methods():
    ctx = context("""
        class Trainer:
            def __init__(self):
                self.probs = F.softmax(model(x), dim=-1)
            def fit(self):
                self.out = np.asarray(self.probs)
                self.loss = fn(y, self.out.view(-1))
                self.loss.backward()
    """)
    [softmax] = calls(ctx, "softmax")
    [asarray] = calls(ctx, "asarray")
    target = calls(ctx, "backward")[0].func.value
    assert ctx.flow.flows_into(asarray, target) and ctx.flow.flows_into(softmax, target)
    fit = _method(ctx, "Trainer", "fit")
    uses = ctx.flow.uses([(target, calls(ctx, "backward")[0])])
    assert ctx.flow.reaches(asarray, uses) and ctx.flow.reaches(softmax, uses)
    assert ctx.training.differentiated_in_scope(fit)


def test_a_method_call_runs_the_method_of_the_class_it_is_called_on():
    ctx = context("""
        class Base:
            def log(self):
                pass
            def fit(self):
                self.log()
                self.step()
        class Trainer(Base):
            def step(self):
                pass
            def log(self):
                pass
        class Evaluator:
            def fit(self):
                self.log()
            def log(self):
                pass
        Trainer().fit()
        evaluator = Evaluator()
        evaluator.fit()
        unknown.fit()
    """)
    graph = ctx.calls
    base_log, trainer_log, evaluator_log = (_method(ctx, c, "log") for c in ("Base", "Trainer", "Evaluator"))
    base_self_log, evaluator_self_log = calls(ctx, "log")
    # `self.log()` in Base: Base's own and its subclass's override, not Evaluator's.
    assert graph.targets(base_self_log) == [base_log, trainer_log]
    assert graph.targets(evaluator_self_log) == [evaluator_log]
    # A hook the class defines only in a subclass.
    [step_call] = calls(ctx, "step")
    assert graph.targets(step_call) == [_method(ctx, "Trainer", "step")]
    trainer_fit, evaluator_fit, unknown_fit = calls(ctx, "fit")
    assert graph.targets(trainer_fit) == [_method(ctx, "Base", "fit")]  # inherited
    assert graph.targets(evaluator_fit) == [_method(ctx, "Evaluator", "fit")]
    assert graph.targets(unknown_fit) == []


def test_a_linted_file_leaves_its_tree_to_reference_counting_not_to_the_cyclic_gc():
    """Each analysis holds its FileContext, which holds the analyses: closed after the rules, that cycle
    no longer keeps a file's CST for the cyclic GC to traverse (a collection per file in a worker)."""
    import gc

    from lintloop.config import load_settings
    from lintloop.linter import lint_text

    from conftest import FIXTURES

    ruleset = load_settings().ruleset()
    text = (FIXTURES / "LL301_bad.py").read_text()
    lint_text("LL301_bad.py", text, ruleset)  # imports and caches filled first
    gc.collect()
    gc.disable()
    try:
        assert lint_text("LL301_bad.py", text, ruleset).findings
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        left = [o for o in gc.garbage if isinstance(o, (FileContext, cst.CSTNode))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert left == []


def test_parsing_skips_libcsts_node_checks_and_nothing_else_does():
    from lintloop.syntax import parse_cst

    text = "for x in range(3):\n    total += x  # sum\n"
    module = parse_cst(text, text.splitlines(keepends=True), None)
    assert module.code == text and module.deep_equals(cst.parse_module(text))
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")


@pytest.mark.parametrize("call", ["loss.backward()", "opt.apply_gradients(pairs)", "opt.minimize(loss)",
                                  "tape.gradient(loss, w)", "optimizer.step()", "jax.grad(f)(w)",
                                  "jax.value_and_grad(f)(w)", "torch.autograd.grad(loss, w)"])
def test_every_call_that_trains_has_its_screen_token(call):
    """A loop the analysis takes for a training loop holds a call the screen's `TRAINING_CALL_TOKENS`
    name: a rule asking whether code trains never loses a finding to the screen."""
    from lintloop.analysis.training import TRAINING_CALL_TOKENS
    from lintloop.screen import FileFacts

    code = (f"import jax\nimport torch\nimport tensorflow as tf\nwith tf.GradientTape() as tape:\n    pass\n"
            f"for x in xs:\n    {call}\n")
    ctx = FileContext(cst.parse_module(code))
    assert ctx.training.is_training_loop(ctx.nodes(cst.For)[0])
    tokens = FileFacts(ast.parse(code)).tokens
    assert any(token in tokens for token in TRAINING_CALL_TOKENS), tokens


@pytest.mark.parametrize("code,exclusive", [
    # opposite branches of one `if`, through `elif` too
    ("if amp:\n    a()\nelse:\n    b()", True),
    ("if amp:\n    a()\nelif fast:\n    b()", True),
    ("if amp:\n    a()\n    b()", False),
    # two `if`s on one name or attribute chain, negated or not
    ("if amp:\n    a()\nif amp:\n    x = 1\nelse:\n    b()", True),
    ("if cfg.amp:\n    a()\nif not cfg.amp:\n    b()", True),
    ("if amp:\n    a()\nif not not amp:\n    b()", False),
    ("if amp:\n    a()\nif other:\n    pass\nelse:\n    b()", False),
    # the name bound from the first test to the second: they may disagree
    ("if amp:\n    a()\namp = step > 9\nif not amp:\n    b()", False),
    ("if amp:\n    a()\n    amp = False\nif not amp:\n    b()", False),
    # in a loop, a binding after both tests is seen by both
    ("for step in loader:\n    if amp:\n        a()\n    if not amp:\n        b()\n    amp = step > 9", True),
    # another scope's `if` says nothing of this one
    ("if amp:\n    a()\ndef f():\n    if not amp:\n        b()", False),
])
def test_exclusive_branches(code, exclusive):
    ctx = context(code)
    (a,), (b,) = calls(ctx, "a"), calls(ctx, "b")
    assert ctx.exclusive(a, b) is exclusive
    assert ctx.exclusive(b, a) is exclusive
