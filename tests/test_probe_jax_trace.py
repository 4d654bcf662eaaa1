"""The probe's JAX trace events (jax_trace.py): per jitted user function traces versus calls
(`jax_function`), `print` run while tracing (`jax_trace_print`), `jax.debug.print` given text formatted
at trace time (`jax_debug_print_tracer`), globals and outside lists changed while tracing
(`jax_trace_mutation`); that wrapping `jax.jit` keeps JAX's compilation cache and API; and the LL206 /
LL902 verdicts on them.

Runs real JAX programs in child processes (CPU); skipped when jax is not installed.
"""
import textwrap

import pytest

from conftest import events_of as _events, source_line as _line
from lintloop.runtime_probe.runner import run_probe
from lintloop.runtime_probe.verdicts import Summary, verdict

pytestmark = pytest.mark.framework
pytest.importorskip("jax")

HEADER = """
import functools
import jax
import jax.numpy as jnp
x = jnp.ones((4,))
"""


def _script(tmp_path, body):
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(HEADER).lstrip() + textwrap.dedent(body))
    run = run_probe(path, [], steps=0, device="cpu", timeout=300)
    assert run.returncode == 0 and not run.timed_out, run.stderr_tail
    assert not _events(run, "probe_error"), _events(run, "probe_error")
    return path, run


def _function(run, name):
    [summary] = [e for e in _events(run, "jax_function") if e["function"] == name]
    return summary


def _summary(run):
    return Summary.from_events(run.events, run.returncode, run.timed_out)


def test_traces_and_calls_per_function_keep_the_compilation_cache_and_the_api(tmp_path):
    path, run = _script(tmp_path, """
        def double(v):
            return v * 2
        for _ in range(5):
            jax.jit(double)(x)            # one function object: JAX's cache hits, one trace
        @functools.partial(jax.jit, static_argnames="n")
        def power(v, n):
            return v ** n
        for n in (1, 2, 2, 3, 3, 3):
            power(x, n=n)                  # one trace per distinct static value
        @jax.jit(static_argnums=1)
        def scale(v, k):
            return v * k
        scale(x, 2.0); scale(x, 2.0)
        print("lowered", type(power.lower(x, n=2)).__name__)
        class Model:
            @functools.partial(jax.jit, static_argnums=0)
            def apply(self, v):
                return v + 1
            def __hash__(self):
                return 0
            def __eq__(self, other):
                return True
        m = Model()
        for _ in range(3):
            m.apply(x)
        for _ in range(3):
            jax.jit(lambda v: v - 1)(x)    # a new function object each time: a trace each time
    """)
    assert (_function(run, "double")["traces"], _function(run, "double")["calls"]) == (1, 5)
    assert (_function(run, "power")["traces"], _function(run, "power")["calls"]) == (3, 6)
    assert _function(run, "power")["line"] == _line(path, "@functools.partial(jax.jit, static_argnames")
    assert (_function(run, "scale")["traces"], _function(run, "scale")["calls"]) == (1, 2)
    assert (_function(run, "apply")["traces"], _function(run, "apply")["calls"]) == (1, 3)
    assert (_function(run, "<lambda>")["traces"], _function(run, "<lambda>")["calls"]) == (3, 3)
    assert "lowered Lowered" in run.stdout_tail


def test_print_while_tracing_and_debug_print_of_a_formatted_tracer(tmp_path):
    path, run = _script(tmp_path, """
        @jax.jit
        def step(v):
            print("value", v)
            jax.debug.print(f"formatted {v}")
            jax.debug.print("placeholder {}", v)
            return v + 1
        for _ in range(4):
            step(x)
        def body(c, v):
            print("carry", c)
            return c + v, c
        for _ in range(3):
            jax.lax.scan(body, 0.0, x)     # traced without jit
        print("eager", 1)
    """)
    prints = _events(run, "jax_trace_print")
    assert [(e["line"], e["function"], e["text"]) for e in prints] == [
        (_line(path, 'print("value"'), "step", "value JitTracer(float32[4])"),
        (_line(path, 'print("carry"'), "body", "carry JitTracer(~float32[])"),
    ]
    body = _function(run, "body")
    assert (body["kind"], body["traces"], body["calls"]) == ("scan", 1, 3)  # traced once for 3 eager scans
    [tracer] = _events(run, "jax_debug_print_tracer")
    assert tracer["line"] == _line(path, 'jax.debug.print(f"') and tracer["text"] == "formatted JitTracer(float32[4])"
    result = verdict("LL206", _summary(run))
    assert result["status"] == "confirmed"
    assert result["evidence"]["text"].startswith("print ran 1 time for 4 calls of `step`")


def test_debug_print_with_placeholders_and_eager_prints_are_not_confirmed(tmp_path):
    _, run = _script(tmp_path, """
        @jax.jit
        def step(v):
            jax.debug.print("value {}", v)
            return v + 1
        for i in range(4):
            print("step", i, step(x)[0])
    """)
    assert not _events(run, "jax_trace_print") and not _events(run, "jax_debug_print_tracer")
    assert verdict("LL206", _summary(run))["status"] == "not-confirmed"


def test_globals_and_outside_lists_changed_while_tracing(tmp_path):
    path, run = _script(tmp_path, """
        count = 0
        history = []
        @jax.jit
        def step(v):
            global count
            count += 1
            history.append(v)
            local = []
            local.append(v)
            return v + local[0]
        for _ in range(6):
            step(x)
        history.clear()
        print("count", count)
    """)
    mutations = {(e["kind"], e["target"]): e for e in _events(run, "jax_trace_mutation")}
    assert set(mutations) == {("global", "count"), ("list", "append")}
    assert mutations[("list", "append")]["line"] == _line(path, "history.append(v)")
    assert all((e["times"], e["traces"], e["calls"]) == (1, 1, 6) for e in mutations.values())
    result = verdict("LL902", _summary(run))
    assert result["status"] == "confirmed" and result["evidence"]["calls"] == 6


def test_state_returned_to_the_caller_is_not_confirmed(tmp_path):
    _, run = _script(tmp_path, """
        count = 0
        @jax.jit
        def step(v):
            parts = []
            parts.append(v * 2)
            return parts[0]
        for _ in range(6):
            x = step(x)
            count += 1
    """)
    assert not _events(run, "jax_trace_mutation")
    assert verdict("LL902", _summary(run))["status"] == "not-confirmed"


def test_a_scan_body_traced_without_jit_prints_and_appends_once_for_every_scan(tmp_path):
    path, run = _script(tmp_path, """
        seen = []
        def body(c, v):
            print("carry", c)
            seen.append(c)
            return c + v, c
        for _ in range(3):
            jax.lax.scan(body, 0.0, x)
        print("seen", len(seen))
    """)
    assert "seen 1" in run.stdout_tail
    [mutation] = _events(run, "jax_trace_mutation")
    assert mutation["line"] == _line(path, "seen.append(c)") and (mutation["times"], mutation["calls"]) == (1, 3)
    result = verdict("LL206", _summary(run))
    assert result["evidence"]["text"].startswith("print ran 1 time for 3 calls of `lax.scan` with the body `body`")
    assert verdict("LL902", _summary(run))["status"] == "confirmed"
