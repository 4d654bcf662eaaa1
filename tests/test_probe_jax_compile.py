"""The probe's JAX compile counter (`jax_compile_site` events) and the LL903 / LL904 verdicts."""

import textwrap

import pytest

from lintloop.runtime_probe.jax_compile_verdicts import jit_per_iteration, static_value_per_iteration
from lintloop.runtime_probe.runner import run_probe
from lintloop.runtime_probe.verdicts import Summary

pytestmark = pytest.mark.framework

CALLS = 6
# One jitted call per line, each in its own loop of CALLS iterations; the marker comment names the line.
SCRIPT = textwrap.dedent(f"""
    import functools
    import jax
    import jax.numpy as jnp

    def double(x):
        return x * 2

    def scale(x, n):
        return x * n

    def loss(w):
        return jnp.sum(w * w)

    class Model:
        def apply(self, x):
            return x + 1

    x = jnp.ones(3)
    model = Model()
    by_step = jax.jit(scale, static_argnums=1)
    by_flag = jax.jit(functools.partial(scale), static_argnames="n")
    by_keyword = jax.jit(lambda x, n: x * n, static_argnums=1)
    for i in range({CALLS}):
        jax.jit(double)(x)  # SITE module_function
    for i in range({CALLS}):
        jax.jit(lambda v: v * 3)(x)  # SITE lambda
    for i in range({CALLS}):
        jax.jit(functools.partial(scale, n=4))(x)  # SITE partial
    for i in range({CALLS}):
        jax.jit(jax.grad(loss))(x)  # SITE grad
    for i in range({CALLS}):
        jax.jit(model.apply)(x)  # SITE bound_method
    for i in range({CALLS}):
        by_step(x, i)  # SITE static_counter
    for i in range({CALLS}):
        by_flag(x, n=i % 2 == 0)  # SITE static_flag
    for i in range({CALLS}):
        by_keyword(x, 5) if i % 2 else by_keyword(x, n=5)  # SITE positional_or_keyword
    for i in range({CALLS}):
        by_step(jnp.ones(i + 1), 7)  # SITE shapes
""")


def _line(marker):
    return next(n for n, text in enumerate(SCRIPT.splitlines(), 1) if text.endswith(f"# SITE {marker}"))


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    pytest.importorskip("jax")
    script = tmp_path_factory.mktemp("jax_compile") / "compiles.py"
    script.write_text(SCRIPT)
    run = run_probe(script, [], steps=0, device="cpu", timeout=300)
    assert run.returncode == 0, run.events
    sites = {e["line"]: e for e in run.events if e.get("type") == "jax_compile_site"}
    return sites, Summary.from_events(run.events, run.returncode, run.timed_out)


def test_jit_of_the_same_module_function_compiles_once(probed):
    sites, _ = probed
    site = sites[_line("module_function")]
    assert (site["traces"], site["compiles"], site["new_functions"]) == (1, 1, 1)
    assert site["function"] == "double"


@pytest.mark.parametrize("marker,function", [("lambda", "<lambda>"), ("partial", "scale"), ("grad", "loss"),
                                             ("bound_method", "apply")])
def test_a_new_function_object_per_call_compiles_every_call(probed, marker, function):
    sites, _ = probed
    site = sites[_line(marker)]
    assert (site["traces"], site["compiles"], site["new_functions"]) == (CALLS, CALLS, CALLS)
    assert site["function"] == function


def test_static_values_are_recorded_per_value(probed):
    sites, _ = probed
    counter = sites[_line("static_counter")]
    assert (counter["traces"], counter["new_functions"], counter["static_values"]) == (CALLS, 1, CALLS)
    assert counter["static_shown"][:3] == ["n=0", "n=1", "n=2"]
    flag = sites[_line("static_flag")]
    assert (flag["traces"], flag["static_values"]) == (2, 2)
    assert sorted(flag["static_shown"]) == ["n=False", "n=True"]
    # The same value passed positionally and by keyword: two cache entries (measured).
    both = sites[_line("positional_or_keyword")]
    assert (both["traces"], both["static_values"]) == (2, 1)
    shapes = sites[_line("shapes")]
    assert (shapes["traces"], shapes["static_values"], shapes["input_types"]) == (CALLS, 1, CALLS)


def test_verdicts_on_the_probed_program(probed):
    _, summary = probed
    ll903 = jit_per_iteration(summary, None)
    assert ll903["status"] == "confirmed"
    assert ll903["evidence"]["line"] == _line("lambda")
    assert ll903["evidence"]["text"].startswith(f"the jitted lambda called at line {_line('lambda')} compiled "
                                                f"{CALLS} times in {CALLS} calls")
    ll904 = static_value_per_iteration(summary, None)
    assert ll904["status"] == "confirmed"
    assert ll904["evidence"]["line"] == _line("static_counter")
    assert ll904["evidence"]["static_values"] == CALLS


def _summary(*sites):
    events = [{"type": "jax_compile_site", "file": "/w/train.py", "line": 10 + i, "function": "step",
               "def_file": "/w/train.py", "def_line": 3, "traces": 1, "compiles": 1, "new_functions": 1,
               "static_values": 0, "static_shown": [], "input_types": 1, **site} for i, site in enumerate(sites)]
    return Summary.from_events(events, 0, False)


def test_a_few_new_functions_are_a_loop_over_models_not_a_finding():
    summary = _summary({"traces": 2, "compiles": 2, "new_functions": 2})
    assert jit_per_iteration(summary, None)["status"] == "not-confirmed"


def test_retraces_for_shapes_are_not_new_functions_nor_static_values():
    summary = _summary({"traces": 8, "compiles": 8, "new_functions": 1, "input_types": 8})
    assert jit_per_iteration(summary, None)["status"] == "not-confirmed"
    assert static_value_per_iteration(summary, None)["status"] == "not-confirmed"


def test_static_values_with_changing_shapes_are_not_confirmed():
    summary = _summary({"traces": 6, "compiles": 6, "static_values": 6, "input_types": 3,
                        "static_shown": [f"n={i}" for i in range(6)]})
    assert static_value_per_iteration(summary, None)["status"] == "not-confirmed"


def test_changing_static_value_is_confirmed_with_the_values():
    summary = _summary({"traces": 5, "compiles": 5, "static_values": 5,
                        "static_shown": [f"step={i}" for i in range(5)]})
    result = static_value_per_iteration(summary, None)
    assert result["status"] == "confirmed"
    assert result["evidence"]["text"] == ("the jitted `step` called at line 10 compiled 5 times, once per value of "
                                          "its static arguments (5 values: step=0; step=1; step=2; step=3; ...); "
                                          "its other inputs kept their shapes")


def test_a_failed_program_is_an_error_not_a_verdict():
    events = [{"type": "error", "exc_type": "ValueError", "message": "Non-hashable static arguments are not "
               "supported", "file": "/w/train.py", "line": 9}]
    summary = Summary.from_events(events, 1, False)
    assert jit_per_iteration(summary, None)["status"] == "error"
    assert static_value_per_iteration(summary, None)["status"] == "error"
