"""A safe fix keeps the program's behaviour: each bad fixture of a rule with a safe fix, fixed by `lintloop fix`,
prints the same as before except the symptom, which is gone (real frameworks, CPU)."""

import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import FIXTURES, fixture_framework
from lintloop.rules import ALL_RULES

pytestmark = pytest.mark.framework

# Per rule: the arguments to run its bad fixture with, the text of the symptom the fix removes, and
# (optionally) a pattern of the stdout lines the fix adds: `jax.debug.print` prints on every call
# to stdout where the builtin `print` printed once, at trace time.
SYMPTOMS = {
    "LL206": (["--steps", "6"], "JitTracer(", r"^loss \d"),
    "LL201": (["--steps", "6"], 'loss Tensor("'),
    # `.detach()`: the same totals, the accumulator a tensor without a graph.
    "LL301": (["--steps", "30"], "grad_fn=AddBackward0", r"^done: \d+ steps, total_loss has grad_fn=NoneType$"),
    "LL603": (["--steps", "20"], "FutureWarning"),
    "LL601": (["--steps", "40"], "saturated float16 output"),
    "LL501": (["--steps", "20"], "input and training ran one after the other"),
    "LL502": (["--steps", "16"], "map ran one call at a time"),
    "LL203": (["--steps", "20"], "train step ran eagerly"),
}
CASES = [rule.code for rule in ALL_RULES
         if rule.fix_kind.startswith("safe") and (FIXTURES / f"{rule.code}_bad.py").exists()]


def _run(path, argv):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, str(path), *argv], capture_output=True, text=True, timeout=180,
                          env=env, cwd=str(path.parent))


def test_every_safe_fix_with_a_fixture_has_a_symptom():
    assert set(CASES) <= set(SYMPTOMS), f"add to SYMPTOMS: {sorted(set(CASES) - set(SYMPTOMS))}"


@pytest.mark.parametrize("code", CASES)
def test_safe_fix_keeps_the_output_and_removes_the_symptom(code, run_cli, tmp_path):
    source = FIXTURES / f"{code}_bad.py"
    framework = fixture_framework(source)
    if importlib.util.find_spec(framework) is None:
        pytest.skip(f"{framework} is not installed")
    argv, symptom, *added = SYMPTOMS[code]
    fixed = tmp_path / source.name
    fixed.write_bytes(source.read_bytes())
    run_cli("fix", fixed, "--select", code, "--no-cache")
    assert fixed.read_bytes() != source.read_bytes()
    _, out, _ = run_cli("check", fixed, "--select", code, "--format", "json", "--no-cache")
    assert json.loads(out) == []

    before, after = _run(source, argv), _run(fixed, argv)
    assert before.returncode == after.returncode == 0, after.stderr[-3000:]
    assert symptom in before.stdout + before.stderr
    assert symptom not in after.stdout + after.stderr, after.stderr[-3000:]
    after_lines = after.stdout.splitlines()
    if added:
        new = [line for line in after_lines if re.match(added[0], line)]
        assert new, after.stdout[-3000:]
        after_lines = [line for line in after_lines if line not in new]
    assert after_lines == [line for line in before.stdout.splitlines() if symptom not in line]


@pytest.mark.parametrize("code, header", [("LL201", "import tensorflow as tf\n@tf.function\n"),
                                          ("LL206", "import jax\n@jax.jit\n")])
@pytest.mark.parametrize("argument", ["f'x {x}'", "'x {}'.format(x)", "'x %s' % x", "'x %s' % (x,)"])
def test_a_string_formatted_in_python_is_no_safe_print_fix(code, header, argument):
    """Formatted at trace time, from a tracer: `tf.print` / `jax.debug.print` of it would print that
    fixed text at every call. A plain argument keeps its safe fix."""
    from lintloop.linter import lint_text
    from lintloop.rule import RuleSet
    from lintloop.rules import BY_CODE

    source = f"{header}def step(x):\n    print({argument})\n    print('x', x)\n    return x\n"
    found = lint_text("m.py", source, RuleSet([BY_CODE[code]])).findings
    assert [(f.line, f.fix.applicability if f.fix else None) for f in found] == [
        (4, "unsafe" if code == "LL201" else None), (5, "safe")]
