"""tf.function verdicts: trace-time side effects (LL202), a tf.function built per iteration (LL204),
retracing on Python numbers (LL205), and check_numerics that XLA dropped (LL803).

The events come from the bootstrap's `tf_function` module: `trace` (one per trace, with the call's
arguments described), `tf_function` summaries (per definition site: traces, calls, Function
objects that traced for the first time), `trace_mutation`, `check_numerics_bypassed`; and TF's own
retracing warning, kept as a `warning` event by `tf_hooks`.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from lintloop.runtime_probe.verdicts import Summary, _confirmed, _not_confirmed, _where

Verdict = Callable[[Summary, "Summary | None"], dict[str, Any]]

# LL204: Function objects built from one definition site that each traced, at least this many.
# A correct program builds one per site (a per-model benchmark a few, but is not flagged statically).
MIN_NEW_FUNCTIONS = 3
# LL205: traces of one Function whose calls differed only in a Python number, at least this many
# (a bool flag or two shape buckets retrace 2 times; the step index once per call).
MIN_NUMBER_RETRACES = 3
RETRACING_WARNING = "triggered tf.function retracing"
_NUMBER = re.compile(r"-?\d+(\.\d*)?(e[-+]?\d+)?$")


def _summaries(summary: Summary) -> list[dict[str, Any]]:
    return summary.of_type("tf_function")


def _retracing_warning(summary: Summary) -> str | None:
    return next((w.get("message") for w in summary.warnings if RETRACING_WARNING in str(w.get("message"))), None)


def side_effect_in_trace(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    for event in summary.of_type("trace_mutation"):
        calls, times = event.get("calls") or 0, event.get("times") or 0
        if calls > times:
            text = (f"`{event.get('method')}` on a list from outside ran {times} time(s) while tracing "
                    f"`{event.get('function')}` ({event.get('traces')} trace(s)), which was called {calls} times")
            return _confirmed("trace_mutation", text=text, times=times, calls=calls, traces=event.get("traces"),
                              function=event.get("function"), **_where(event))
    return _not_confirmed(summary, "a list from outside a tf.function appended to while tracing it, "
                                   "fewer times than the function was called")


def function_per_iteration(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    for event in _summaries(summary):
        built = int(event.get("new_instances") or 0)
        if built >= MIN_NEW_FUNCTIONS and int(event.get("traces") or 0) >= built:
            text = (f"{built} tf.function objects built from `{event.get('function')}`, each traced: "
                    f"{event.get('traces')} traces for {event.get('calls')} calls")
            return _confirmed("function_per_iteration", text=text, functions=built, traces=event.get("traces"),
                              calls=event.get("calls"), warning=_retracing_warning(summary), **_where(event))
    return _not_confirmed(summary, f"at least {MIN_NEW_FUNCTIONS} tf.function objects built from one "
                                   "definition, each tracing")


def number_retrace(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    by_function: dict[tuple[Any, Any], list[list[str]]] = {}
    for event in summary.of_type("trace"):
        key = (event.get("def_file"), event.get("def_line"))
        by_function.setdefault(key, []).append([str(a) for a in event.get("args") or []])
    built = {(e.get("file"), e.get("line")): int(e.get("new_instances") or 0) for e in _summaries(summary)}
    for (file, line), traces in by_function.items():
        if len(traces) < MIN_NUMBER_RETRACES or built.get((file, line), 1) > 1:
            continue
        width = len(traces[0])
        if any(len(t) != width for t in traces):
            continue
        for position in range(width):
            numeric = [t for t in traces if _NUMBER.match(t[position])]
            values = [t[position] for t in numeric]
            others = {tuple(t[:position] + t[position + 1:]) for t in numeric}
            if len(set(values)) >= MIN_NUMBER_RETRACES and len(others) == 1:
                function = next((e.get("function") for e in summary.of_type("trace")
                                 if (e.get("def_file"), e.get("def_line")) == (file, line)), None)
                shown = ", ".join(values[:5]) + (", ..." if len(values) > 5 else "")
                text = (f"`{function}` traced {len(numeric)} times, once per value of its Python-number "
                        f"argument {position + 1} ({shown}); nothing else changed")
                return _confirmed("number_retrace", text=text, traces=len(numeric), argument=position + 1,
                                  values=values[:20], function=function, warning=_retracing_warning(summary),
                                  file=file, line=line)
    return _not_confirmed(summary, f"one tf.function traced at least {MIN_NUMBER_RETRACES} times, with calls "
                                   "that differ only in a Python number")


def check_numerics_bypassed(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    events = summary.of_type("check_numerics_bypassed")
    if not events:
        return _not_confirmed(summary, "a check_numerics inside an XLA-compiled function whose input held a "
                                       "NaN/Inf while the call returned without an error")
    event = events[0]
    text = (f"check_numerics(\"{event.get('message')}\") in the XLA-compiled `{event.get('function')}` saw a "
            f"NaN/Inf at call {event.get('call')} (step {event.get('step')}) and raised nothing")
    return _confirmed("check_numerics_bypassed", text=text, call=event.get("call"), step=event.get("step"),
                      function=event.get("function"), **_where(event))


VERDICTS: dict[str, Verdict] = {
    "LL202": side_effect_in_trace,
    "LL204": function_per_iteration,
    "LL205": number_retrace,
    "LL803": check_numerics_bypassed,
}
