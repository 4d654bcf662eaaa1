"""The screen changes no result: whole-file facts from CPython's tree equal the CST index's, and
findings are identical with the screen on and off, jobs 1 and N, cache on and off — on the rules'
examples, the fixtures, and a sample of real code (the installed PyTorch and TensorFlow sources)."""

import importlib.util
import sys
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from lintloop.analysis.index import TreeIndex
from lintloop.linter import lint_text
from lintloop.rule import RuleSet
from lintloop.rules import ALL_RULES, BY_CODE
from lintloop.screen import FileFacts, SourceScreen, valid_token

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("compare_modes", ROOT / "bench" / "compare_modes.py")
compare_modes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare_modes)

VISITOR_RULES = [r for r in ALL_RULES if r.has_visitor()]
EXAMPLES = [textwrap.dedent(e.code).lstrip() for r in VISITOR_RULES for e in (*r.flagged, *r.not_flagged)]
OWN_FILES = sorted((ROOT / "tests" / "fixtures").glob("*.py")) + sorted((ROOT / "examples").glob("*.py"))


def real_code_sample(per_package: int) -> list[Path]:
    """Every n-th source file of the installed frameworks: a fixed, varied sample of real code."""
    files: list[Path] = []
    for package in ("torch", "tensorflow", "keras"):
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            continue
        found = sorted(Path(spec.submodule_search_locations[0]).rglob("*.py"))
        files += found[:: max(1, len(found) // per_package)][:per_package]
    if not files:
        pytest.skip("no framework sources installed (the test extra installs them)")
    return files


@pytest.mark.parametrize("text", EXAMPLES + [p.read_text() for p in OWN_FILES], ids=lambda t: t[:30])
def test_whole_file_facts_from_ast_equal_the_cst_index(text):
    import ast
    facts, index = FileFacts(ast.parse(text)), TreeIndex(cst.parse_module(text))
    assert facts.imports == index.imports
    assert facts.bound_names == index.bound_names


def test_whole_file_facts_on_real_code():
    import ast
    for path in real_code_sample(60):
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            tree = ast.parse(text)
            module = cst.parse_module(text)
        except (SyntaxError, cst.ParserSyntaxError):
            continue
        facts, index = FileFacts(tree), TreeIndex(module)
        assert (facts.imports, facts.bound_names) == (index.imports, index.bound_names), path


@pytest.mark.parametrize("rule", VISITOR_RULES, ids=lambda r: r.code)
def test_every_rule_declares_what_the_screen_needs(rule):
    assert rule.needs.statement, "without statement needs every file and statement would be parsed"
    assert all(valid_token(t, in_file_needs=False) for group in rule.needs.statement for t in group)
    assert all(valid_token(t, in_file_needs=True) for group in rule.needs.file for t in group)
    # At least one group of calls or names, which the text test can check before any parse.
    assert any(all(t.startswith(("call:", "outside_call:", "name:")) for t in group) for group in (*rule.needs.file,
                                                                                  *rule.needs.statement))


@pytest.mark.parametrize("rule", VISITOR_RULES, ids=lambda r: r.code)
def test_flagged_examples_pass_the_text_screen(rule):
    for example in rule.flagged:
        assert rule.may_fire(SourceScreen(textwrap.dedent(example.code)))


def _tree_screen_fires(rule, text: str, facts: FileFacts) -> bool:
    return any(facts.names.uses_framework(fw) for fw in rule.frameworks) and bool(facts.seeds(rule.needs, text))


@pytest.mark.parametrize("text", EXAMPLES + [p.read_text() for p in OWN_FILES], ids=lambda t: t[:30])
def test_the_text_screen_passes_every_rule_the_tree_screen_may_fire(text):
    """The text screen decides before any parse: it may pass a rule the tree's facts then drop, never
    drop one they would keep (a call spelled `def f(` or `super().f(`, a framework named only in a
    string or comment, are no call and no import in either)."""
    import ast
    facts = FileFacts(ast.parse(text))
    screen = SourceScreen(text)
    assert [r.code for r in VISITOR_RULES if _tree_screen_fires(r, text, facts) and not r.may_fire(screen)] == []


def test_the_text_screen_passes_every_rule_the_tree_screen_may_fire_on_real_code():
    import ast
    for path in real_code_sample(150):
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            facts = FileFacts(ast.parse(text))
        except SyntaxError:
            continue
        screen = SourceScreen(text)
        assert [r.code for r in VISITOR_RULES if _tree_screen_fires(r, text, facts) and not r.may_fire(screen)] == [], path


def test_definitions_and_calls_of_a_base_method_are_no_calls_to_the_text_screen():
    module = textwrap.dedent("""
        import torch

        class Net(torch.nn.Module):
            def forward(self, x):
                return super().forward(x)
    """)
    assert not BY_CODE["LL705"].may_fire(SourceScreen(module))
    assert BY_CODE["LL705"].may_fire(SourceScreen(module + "y = Net().forward(x)\n"))
    assert SourceScreen("async def step(self): pass\n").may_hold("call:step") is False
    assert SourceScreen("undef step(x)\n").may_hold("call:step")  # only the keyword `def` makes a definition


def test_a_class_calling_its_own_forward_is_no_outside_call():
    own = textwrap.dedent("""
        import torch

        class Block(torch.nn.Module):
            def forward(self, x):
                return x

            def run(self, x):
                return self.forward(x)
    """)
    assert not BY_CODE["LL705"].may_fire(SourceScreen(own))
    import ast
    assert not any("outside_call:forward" in unit.tokens for unit in FileFacts(ast.parse(own)).units)
    outside = own + "y = Block().forward(x)\n"
    assert BY_CODE["LL705"].may_fire(SourceScreen(outside))
    assert any("outside_call:forward" in unit.tokens for unit in FileFacts(ast.parse(outside)).units)


@pytest.mark.parametrize("call, outside", [
    ("Block.forward(self, x)", False),  # the base's method through its class: no instance
    ("Base.forward(self, x)", False),  # an imported class (or any imported name): no instance either
    ("torch.nn.LayerNorm.forward(self, x)", False),  # an attribute of an import
    ("block.forward(x)", True),
    ("self.block.forward(x)", True),
    ("trainer.model.forward(x)", True),
    ("Block(1).forward(x)", True),
])
def test_a_call_through_a_class_or_an_import_is_no_outside_call(call, outside):
    import ast
    code = textwrap.dedent(f"""
        import torch
        from models import Base

        class Block(torch.nn.Module):
            def forward(self, x):
                return x

        class Wide(Block):
            def forward(self, x):
                return {call}
    """)
    assert any("outside_call:forward" in unit.tokens for unit in FileFacts(ast.parse(code)).units) is outside
    rules = RuleSet([BY_CODE["LL705"]])
    assert lint_text("m.py", code, rules).findings == lint_text("m.py", code, RuleSet([BY_CODE["LL705"]], screen=False)).findings


@pytest.mark.parametrize("line, method", [
    ("# the attention mask is precomputed in BertModel forward() for all layers\n", False),
    ('"""feed-forward (MLP), see forward()"""\n', False),
    ("y = forward(x)\n", False),  # a function of that name: no method
    ("y = model . forward(x)\n", True),
    ("y = (model\n     .forward(x))\n", True),
    ("y = (model.  # the raw module\n     forward(x))\n", True),  # the chain goes on after a comment
    ("y = model.\\\n    forward(x)\n", True),
])
def test_an_outside_call_is_a_method_call_to_the_text_screen_as_to_the_tree(line, method):
    """`outside_call:NAME` is an attribute's call (`x.NAME(...)`): prose that names `NAME()` in a
    comment or docstring is none; a chain split over lines is one."""
    import ast

    text = "import torch\nself.forward\n" + line
    assert SourceScreen(text).may_hold("outside_call:forward") is method
    assert any("outside_call:forward" in unit.tokens for unit in FileFacts(ast.parse(text)).units) is method


@pytest.mark.parametrize("text, imported", [
    ("import tensorflow as tf\n", True),
    ("from tensorflow import keras\n", True),
    ("import os, \\\n    tensorflow\n", True),
    ("x = 1\r\nimport os, \\\r\n tensorflow\r\n", True),
    ("def f():\n    import tensorflow.compat.v1 as tf\n", True),
    ("x = 'tensorflow'\n", False),  # named in a string
    ("if is_tensorflow_available():\n    pass\n", False),  # a word part
    ("import tensorflow_addons\n", False),  # another package
    ("from helpers import (\n    tensorflow,\n)\n", False),  # a name from another module
])
def test_a_framework_counts_as_imported_on_a_line_that_imports(text, imported):
    assert SourceScreen(text).imports_framework("tensorflow") is imported


# Each example appended to this many files (in rotation): every file and every example is covered
# while the cost grows with the catalog only (every example into every file took minutes).
HOSTS_PER_EXAMPLE = 2


def test_screen_on_and_off_agree_on_own_files_with_every_example_injected():
    assert compare_modes.screen_differences(OWN_FILES, VISITOR_RULES, inject=True, hosts=HOSTS_PER_EXAMPLE) == []


def test_screen_on_and_off_agree_on_real_code():
    assert compare_modes.screen_differences(real_code_sample(150), VISITOR_RULES, inject=False) == []


def test_examples_injected_into_real_code_are_found_the_same_with_the_screen_on_and_off():
    assert compare_modes.screen_differences(real_code_sample(4), VISITOR_RULES, inject=True,
                                            hosts=HOSTS_PER_EXAMPLE) == []


def test_jobs_and_cache_agree_on_real_code_and_own_files():
    assert compare_modes.run_differences(real_code_sample(60) + OWN_FILES, "ALL", jobs=2) == []


def test_statements_of_a_tape_at_module_level_are_screened_together():
    code = ("import tensorflow as tf\nimport numpy as np\nwith tf.GradientTape() as tape:\n"
            "    loss = tf.reduce_sum(np.exp(model(x).numpy()))\n"
            "\n\ndef unrelated():\n    return 1\n\n"
            "grads = tape.gradient(loss, model.trainable_variables)\n")
    found = lint_text("m.py", code, RuleSet(list(VISITOR_RULES)))
    assert [(f.code, f.line) for f in found.findings] == [("LL101", 4)]


@pytest.mark.parametrize("elsewhere, flagged", [("        total += net(x).sum().item()\n", True),
                                               ("        total += net(x).sum().data[0]\n", False)])
def test_code_era_read_by_a_rule_is_the_same_with_the_screen_on_and_off(elsewhere, flagged):
    # LL703 asks whether the function around the loop calls `.item()` (0.4+ code, where `volatile=True`
    # does nothing); a `.item()` in another function of the file is not asked about, however it is screened.
    code = ("import torch\nfrom torch.autograd import Variable\n\ndef validate(net, loader):\n    net.eval()\n"
            "    total = 0\n    for x, y in loader:\n        x = Variable(x, volatile=True)\n" + elsewhere +
            "\ndef train_step(net, x, y, opt):\n    loss = criterion(net(x), y)\n    loss.backward()\n    opt.step()\n"
            "    return loss.item()\n")
    on, off = (lint_text("m.py", code, RuleSet([BY_CODE["LL703"]], screen=screen)).findings for screen in (True, False))
    assert [(f.code, f.line) for f in on] == [(f.code, f.line) for f in off] == ([("LL703", 9)] if flagged else [])


def test_only_the_selected_statements_and_what_they_use_are_parsed():
    import ast
    code = ("import torch\nHELPER = 3\n\ndef unrelated(a):\n    return a\n\n"
            "def train(loader):\n    total = 0\n    for x in loader:\n        loss = step(x)\n"
            "        total += loss\n\ndef step(x):\n    loss = model(x)\n    loss.backward()\n    return loss\n")
    facts = FileFacts(ast.parse(code))
    seeds = set()
    for rule in VISITOR_RULES:
        seeds.update(facts.seeds(rule.needs, code))
    selected = facts.closure(seeds)
    firsts = sorted(facts.units[i].first_line for i in selected)
    assert firsts == [7, 13]  # train and the step it calls; not the import, HELPER or unrelated
    found = lint_text("m.py", code, RuleSet(list(VISITOR_RULES)))
    assert [(f.code, f.line, f.column) for f in found.findings] == [("LL301", 11, 9)]


def test_a_name_bound_to_a_call_of_a_selected_function_brings_its_call_sites():
    import ast
    code = ("import jax\n\ndef train_step(p, s, b):\n    u, _ = tx.update(g, s, p)\n    return p, s\n\n"
            "step = jax.jit(train_step)\n\ndef main(p, s, data):\n    for b in data:\n        p, s = step(p, s, b)\n\n"
            "def unrelated(a):\n    return a\n")
    facts = FileFacts(ast.parse(code))
    selected = facts.closure({next(i for i, u in enumerate(facts.units) if u.first_line == 3)})
    assert sorted(facts.units[i].first_line for i in selected) == [3, 7, 9]  # the alias, its caller; not `unrelated`


def test_a_selected_module_class_brings_what_calling_an_instance_runs():
    import ast
    code = ("import torch\n\nclass Net(torch.nn.Module):\n    def __init__(self):\n        self.fc = 1\n\n"
            "    def forward(self, x):\n        return self.fc(x)\n\n    def extra(self):\n        return 2\n\n"
            "def train(loader):\n    net = Net()\n    for x in loader:\n        net(x).backward()\n")
    facts = FileFacts(ast.parse(code))
    selected = facts.closure({next(i for i, u in enumerate(facts.units) if u.first_line == 13)})
    assert sorted(facts.units[i].first_line for i in selected) == [3, 4, 7, 13]  # not `extra`


def test_a_selected_keras_model_class_brings_build_and_call():
    import ast
    code = ("import keras\n\nclass Net(keras.Model):\n    def build(self, shape):\n        self.out = 1\n\n"
            "    def call(self, x):\n        return self.out(x)\n\n    def summary_text(self):\n        return 2\n\n"
            "def train(ds):\n    net = Net()\n    net.compile(loss='mse')\n    net.fit(ds)\n")
    facts = FileFacts(ast.parse(code))
    selected = facts.closure({next(i for i, u in enumerate(facts.units) if u.first_line == 13)})
    assert sorted(facts.units[i].first_line for i in selected) == [3, 4, 7, 13]  # not `summary_text`


def test_a_selected_unit_brings_the_readers_of_the_attributes_it_assigns():
    import ast
    code = ("import tensorflow as tf\n\nclass Trainer:\n    def __init__(self):\n"
            "        self.test_ds = make(x).batch(32).shuffle(100)\n\n    def fit(self):\n"
            "        model.evaluate(self.test_ds)\n\n    def other(self):\n        return 1\n")
    facts = FileFacts(ast.parse(code))
    selected = facts.closure({next(i for i, u in enumerate(facts.units) if u.first_line == 4)})
    assert sorted(facts.units[i].first_line for i in selected) == [3, 4, 7]  # the class, `fit`; not `other`
    assert lint_text("m.py", code, RuleSet(list(VISITOR_RULES))).findings == []  # an evaluation pipeline


def test_a_module_statement_calling_a_method_of_a_name_comes_with_the_statements_reading_it():
    import ast
    code = ("import torch\n\ndef evaluate(model, loader):\n    for x in loader:\n"
            "        model(x)\n\nmodel = Net()\nmodel.eval()\nprint(model)\nevaluate(model, test_loader)\n")
    facts = FileFacts(ast.parse(code))
    selected = facts.closure({next(i for i, u in enumerate(facts.units) if u.first_line == 3)})
    # `model.eval()` changes what `model` holds for the call after it, as `model = Net()` does; `print` does not.
    assert sorted(facts.units[i].first_line for i in selected) == [3, 7, 8, 10]
    # The call runs a loop after `model.eval()`: module code is where LL703 may report.
    assert [u.first_line for u in facts.units if "calls_loop" in u.tokens] == [10]
    on = lint_text("m.py", code, RuleSet([BY_CODE["LL703"]]))
    assert [(f.code, f.line) for f in on.findings] == [("LL703", 5)]
    assert on.findings == lint_text("m.py", code, RuleSet([BY_CODE["LL703"]], screen=False)).findings


@pytest.mark.parametrize("code, marked", [
    # The loop runs the evaluated model, or a submodule the file assigns.
    ("model.eval()\nfor x in loader:\n    out = model(x)\n", True),
    ("class Net:\n    def __init__(self):\n        self.decoder = make()\nnet.eval()\nfor z in zs:\n    net.decoder(z)\n", True),
    ("def score(self):\n    self.model.eval()\n    return [self.model(x) for x in self.loader]\n", True),
    # Passed to a function of the file that runs its parameter (by name, as the rule follows it).
    ("def evaluate(net, loader):\n    for x in loader:\n        net(x)\n\nmodel.eval()\nevaluate(model, val)\n", True),
    ("def evaluate(net, loader):\n    for x in loader:\n        net(x)\n\nmodel.eval()\nevaluate(loader=val, net=model)\n", True),
    # Nothing runs the model after `eval()`: its parameters, its methods, a log call.
    ("model.eval()\nfor name, p in model.named_parameters():\n    print(name, p.shape)\n", False),
    ("def freeze(model):\n    model.eval()\n    for p in model.parameters():\n        p.requires_grad_(False)\n    log(model)\n", False),
    ("model.eval()\nfor x in loader:\n    other(x)\n", False),
    # Run in a function the unit calls (reading the model from around), not in one nothing here calls.
    ("def predict(x):\n    return model(x)\n\nmodel.eval()\nfor x in loader:\n    predict(x)\n", True),
    ("def predict(x):\n    return model(x)\n\nmodel.eval()\nfor x in loader:\n    show(x)\n", False),
])
def test_a_unit_that_may_run_what_it_evaluated_is_marked(code, marked):
    import ast
    code = "import torch\n" + code
    facts = FileFacts(ast.parse(code))
    assert any("runs_evaluated" in u.tokens for u in facts.units) is marked
    rules = RuleSet([BY_CODE["LL703"]])
    assert lint_text("m.py", code, rules).findings == lint_text("m.py", code, RuleSet([BY_CODE["LL703"]], screen=False)).findings


@pytest.mark.parametrize("call, serial", [
    ("ds.map(parse)", True),
    ("ds.map(parse, deterministic=False)", True),
    ("ds.map(**options)", True),
    ("ds.map(parse, *more)", True),  # where `*more` stands among the arguments, the tree does not keep
    ("ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE)", False),
    ("ds.map(parse, tf.data.AUTOTUNE)", False),
])
def test_a_map_call_passing_no_parallelism_is_serial(call, serial):
    import ast
    code = f"import tensorflow as tf\nds = tf.data.Dataset.range(8).shuffle(8)\nds = {call}\nmodel.fit(ds)\n"
    assert any("shape:serial_map" in u.tokens for u in FileFacts(ast.parse(code)).units) is serial
    rules = RuleSet([BY_CODE["LL502"]])
    assert lint_text("m.py", code, rules).findings == lint_text("m.py", code, RuleSet([BY_CODE["LL502"]], screen=False)).findings


@pytest.mark.parametrize("code, token, held", [
    # A JAX transform named through the file's imports, however spelled.
    ("import jax\n@jax.jit\ndef step(x):\n    print(x)\n    return x\n", "jax_traced", True),  # LL206 reports
    ("from jax import lax\ndef run(xs):\n    return lax.scan(body, 0, xs)\n", "jax_traced", True),
    ("from jax import jit as compile_\nstep = compile_(train_step)\n", "jax_traced", True),
    ("import flax.nnx as nnx\nout = nnx.cond(flag, f, g, x)\n", "jax_traced", True),
    # JAX imported for its arrays alone; `map`, `jit` and `cond` of other things.
    ("import torch\ndef load(w):\n    import jax.numpy as jnp\n    return list(map(jnp.asarray, w))\n"
     "def fast():\n    return torch.jit.is_scripting()\n", "jax_traced", False),
    ("import jax.numpy as jnp\nfrom lib import cond\ny = cond(jnp.ones(3))\n", "jax_traced", False),
    # optax's `update(grads, state[, params])`, flax's `apply_gradients(grads=...)`; not `dict.update(d)`.
    ("import optax\nupdates, state = tx.update(grads, state, params)\n", "shape:optax_update", True),
    ("import optax\nconfig.update(defaults)\nconfig.update(*pairs)\n", "shape:optax_update", False),
    ("import jax\nstate = state.apply_gradients(grads=grads)\n", "shape:flax_apply", True),
    ("import jax\nopt.apply_gradients(zip(grads, variables))\n", "shape:flax_apply", False),
])
def test_what_jax_rules_need_of_a_unit(code, token, held):
    _assert_token_and_screen_agree(code, token, held, ["LL206", "LL901", "LL902", "LL903", "LL904", "LL905"])


@pytest.mark.parametrize("code, held", [
    ("loss = keras.losses.SparseCategoricalCrossentropy()\n", True),
    ("loss = keras.losses.SparseCategoricalCrossentropy(from_logits=flag)\n", True),  # resolved through the name
    ("loss = SparseCategoricalCrossentropy(True)\n", True),  # positional: a call the analyses read too
    ("out = keras.losses.sparse_categorical_crossentropy(y, p)\n", True),
    ("model.compile(loss=keras.losses.binary_crossentropy)\n", True),
    ("loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)\n", False),
    ("out = keras.losses.sparse_categorical_crossentropy(y, p, from_logits=True)\n", False),
])
def test_a_unit_naming_a_cross_entropy_that_may_take_probabilities(code, held):
    code = "import keras\nfrom keras.losses import SparseCategoricalCrossentropy\n" + code + (
        "model = keras.Sequential([keras.layers.Dense(10)])\nmodel.compile(loss=loss)\n")
    _assert_token_and_screen_agree(code, "shape:probability_loss", held, ["LL709"])


@pytest.mark.parametrize("code, held", [
    ("import tensorflow as tf\ntf.summary.scalar('loss', 1.0, step=0)\n", True),
    ("from tensorflow.compat.v2 import summary\nsummary.scalar('loss', 1.0, step=0)\n", True),  # canonical
    ("from tensorflow.summary import scalar as log_scalar\nlog_scalar('loss', 1.0, step=0)\n", True),
    ("import tensorflow as tf\nmodel.summary()\nlogger.scalar('loss', 1.0)\nlog_file.write('done')\n", False),
    ("import tensorflow as tf\nfrom tensorboardX import summary\nsummary.scalar('loss', 1.0)\n", False),
])
def test_a_call_of_a_qualified_name_through_the_imports(code, held):
    _assert_token_and_screen_agree(code, "callee:tensorflow.summary.scalar", held, ["LL802"])


def _assert_token_and_screen_agree(code: str, token: str, held: bool, codes: list[str]) -> None:
    import ast
    assert any(token in u.tokens for u in FileFacts(ast.parse(code)).units) is held
    assert lint_text("m.py", code, RuleSet([BY_CODE[c] for c in codes])).findings == \
        lint_text("m.py", code, RuleSet([BY_CODE[c] for c in codes], screen=False)).findings


def test_a_function_called_in_a_loop_is_repeated_and_so_are_the_functions_it_calls():
    import ast
    code = ("import jax\n\ndef inner(f):\n    return jax.jit(f)(1)\n\ndef step(f):\n    return inner(f)\n\n"
            "def once(f):\n    return f\n\nfor f in fns:\n    step(f)\nonce(g)\n")
    facts = FileFacts(ast.parse(code))
    repeated = sorted(u.first_line for u in facts.units if "repeated" in u.tokens)
    assert repeated == [3, 6]  # the step the loop calls, the helper the step calls; not `once`


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the host parses PEP 695 itself")
def test_syntax_newer_than_the_host_is_not_a_syntax_error():
    code = "import torch\ntype Vector = list[float]\n\ndef first[T](xs: list[T]) -> T:\n    return xs[0]\n"
    assert lint_text("new.py", code, RuleSet(list(ALL_RULES))).findings == []


class _CountingList(list):
    """A list that counts the items read from it (by index or by iterating)."""

    reads = 0

    def __iter__(self):
        for item in super().__iter__():
            self.reads += 1
            yield item

    def __getitem__(self, index):
        self.reads += 1
        return super().__getitem__(index)


def test_selecting_a_chain_of_helpers_reads_each_unit_a_bounded_number_of_times():
    """Each round of the selection looks only at what the round before added (issue 22): a chain of
    helpers, each calling the next, takes one round per helper, and reading every unit in every round
    was quadratic (2,000 helpers: ×100 the reads of 200, not ×10)."""
    import ast

    def units_read(helpers: int) -> int:
        code = "".join(f"def helper_{i}(x):\n    return helper_{i + 1}(x) * 2\n\n" for i in range(helpers))
        facts = FileFacts(ast.parse(code + f"def helper_{helpers}(x):\n    return x.backward()\n"))
        facts.units = _CountingList(facts.units)
        assert len(facts.closure({0})) == helpers + 1
        return facts.units.reads

    assert units_read(2_000) <= 12 * units_read(200)


@pytest.mark.parametrize("text, word, held", [
    ("import torch\n", "torch", True),
    ("x = torch.ones(3)\n", "torch", True),
    ("x = pytorch_lightning\n", "torch", False),  # a part of another word
    ("torché = 1\n", "torch", True),  # split off at a non-ASCII letter: kept, the exact search decides
    ("opt.step()\n", "step", True),
])
def test_a_word_is_looked_up_among_the_text_s_words_before_any_search(text, word, held):
    assert SourceScreen(text).has_word(word) is held


@pytest.mark.parametrize("text, token, held", [
    ("import torch\n# remember model.eval() before scoring\n", "call:eval", False),
    ("import torch\n    # model.eval() is called by the caller\n", "call:eval", False),
    ('import torch\ns = """\n# then model.eval()\n"""\n', "call:eval", False),  # a string's text: no code either
    ("import torch\nmodel.eval()  # model.eval()\n", "call:eval", True),
    ('import torch\ns = f"""\n# {model.eval()}\n"""\n', "call:eval", True),  # an f-string's expression
    ("import torch\n# a comment\rmodel.eval()\n", "call:eval", True),  # a line ended by a lone CR
    ("# import torch\nimport numpy\n", "import:torch", False),
])
def test_a_word_on_a_comment_line_is_no_code_to_the_text_screen(text, token, held):
    """A line whose text starts with `#` is a comment, or a string's text: the tree holds neither, so
    the text screen does not count what it names."""
    import ast

    screen = SourceScreen(text)
    if token.startswith("import:"):
        assert screen.imports_framework(token.partition(":")[2]) is held
        return
    assert screen.may_hold(token) is held
    if held:
        assert any(token in unit.tokens for unit in FileFacts(ast.parse(text)).units)
