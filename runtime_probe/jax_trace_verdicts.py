"""JAX trace-time verdicts: `print` that ran only while tracing (LL206), Python side effects that
ran once per trace, not per call (LL902).

The events come from the bootstrap's `jax_trace` module: `jax_function` summaries (per definition
site of a jitted user function: traces = runs of its Python body, calls = calls outside any
trace), `jax_trace_print` (a builtin `print` run while JAX traced, with the jitted function being
traced), `jax_debug_print_tracer` (`jax.debug.print` given a string that already held a tracer),
`jax_trace_mutation` (a global assigned, or a list from outside appended to, while tracing).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable

from lintloop.runtime_probe.verdicts import Summary, _confirmed, _not_confirmed, _where

Verdict = Callable[[Summary, "Summary | None"], dict[str, Any]]

_TRACER_TEXT = "Tracer("


def _functions(summary: Summary) -> dict[tuple[Any, Any], dict[str, Any]]:
    return {(e.get("file"), e.get("line")): e for e in summary.of_type("jax_function")}


def _times(n: int) -> str:
    return f"{n} time" + ("" if n == 1 else "s")


def _called(function: dict[str, Any]) -> str:
    """"`train_step`", or for the body of an eager scan "`lax.scan` with the body `body`"."""
    kind = function.get("kind")
    if kind in ("jit", "pmap", None):
        return f"`{function.get('function')}`"
    return f"`lax.{kind}` with the body `{function.get('function')}`"


def print_in_trace(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    functions = _functions(summary)
    prints = summary.of_type("jax_trace_print")
    runs = Counter((e.get("file"), e.get("line")) for e in prints)
    for event in prints:
        function = functions.get((event.get("def_file"), event.get("def_line")))
        if function is None:
            continue
        times, calls = runs[(event.get("file"), event.get("line"))], int(function.get("calls") or 0)
        if times < calls:
            text = (f"print ran {_times(times)} for {calls} calls of {_called(function)} and printed "
                    f"`{event.get('text')}`")
            return _confirmed("jax_trace_print", text=text, times=times, calls=calls, traces=function.get("traces"),
                              function=function.get("function"), printed=event.get("text"), **_where(event))
    for event in prints:  # a `lax.scan` / `fori_loop` body traced without jit: it printed a tracer
        if event.get("function") is None and _TRACER_TEXT in str(event.get("text")):
            text = f"print ran while JAX traced its function and printed `{event.get('text')}`"
            return _confirmed("jax_trace_print", text=text, printed=event.get("text"), **_where(event))
    for event in summary.of_type("jax_debug_print_tracer"):
        text = f"jax.debug.print was given text formatted at trace time: it prints `{event.get('text')}` at every call"
        return _confirmed("jax_debug_print_tracer", text=text, printed=event.get("text"),
                          function=event.get("function"), **_where(event))
    return _not_confirmed(summary, "a print run while JAX traced a jitted function, fewer times than the "
                                   "function was called (or printing a tracer)")


def side_effect_in_trace(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    for event in summary.of_type("jax_trace_mutation"):
        calls, times, traces = int(event.get("calls") or 0), int(event.get("times") or 0), event.get("traces")
        if event.get("function") is None or calls <= times:
            continue
        if event.get("kind") == "global":
            what = f"global `{event.get('target')}` changed {_times(times)} while tracing `{event.get('function')}`"
        else:
            what = (f"`{event.get('target')}` on a list from outside ran {_times(times)} while tracing "
                    f"`{event.get('function')}`")
        text = f"{what}, called {calls} times and traced {_times(int(traces or 0))}"
        return _confirmed("jax_trace_mutation", text=text, kind=event.get("kind"), target=event.get("target"),
                          times=times, calls=calls, traces=traces, function=event.get("function"), **_where(event))
    return _not_confirmed(summary, "a global assigned or a list from outside mutated while JAX traced a jitted "
                                   "function, fewer times than the function was called")


VERDICTS: dict[str, Verdict] = {
    "LL206": print_in_trace,
    "LL902": side_effect_in_trace,
}
