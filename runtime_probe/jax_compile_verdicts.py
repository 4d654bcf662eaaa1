"""JAX compile verdicts: a jitted function made anew each iteration (LL903), a static argument that
changes each iteration (LL904).

The events come from the bootstrap's `jax_compile` module: one `jax_compile_site` per user line
that called a jitted function which traced — `traces`, backend `compiles`, `new_functions` (traces
of a function object JAX had never traced before), `static_values` (distinct static-argument
values among its traces, the first shown in `static_shown`), `input_types` (distinct argument
shapes/dtypes). `jax_function` summaries (from `jax_trace`) add the calls of a jitted user def.
"""

from __future__ import annotations

from typing import Any, Callable

from lintloop.runtime_probe.verdicts import Summary, _confirmed, _not_confirmed, _where

Verdict = Callable[[Summary, "Summary | None"], dict[str, Any]]

# A correct program traces one function object per call site (a loop over a few models or
# configurations: a few); the bad fixtures trace one per step (20 in 20 steps).
MIN_RECOMPILES = 3
# LL903: nearly every trace at the site was of a new function object.
NEW_FUNCTION_SHARE = 0.8


def _sites(summary: Summary) -> list[dict[str, Any]]:
    return summary.of_type("jax_compile_site")


def _calls(summary: Summary, site: dict[str, Any]) -> int | None:
    """Calls of the jitted user def behind a site, when `jax_trace` counted them."""
    for function in summary.of_type("jax_function"):
        if (function.get("file"), function.get("line")) == (site.get("def_file"), site.get("def_line")):
            return int(function.get("calls") or 0) or None
    return None


def _label(site: dict[str, Any]) -> str:
    name = site.get("function")
    return "the jitted lambda" if name == "<lambda>" else f"the jitted `{name}`"


def jit_per_iteration(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    for site in _sites(summary):
        traces, new = int(site.get("traces") or 0), int(site.get("new_functions") or 0)
        if new >= MIN_RECOMPILES and new >= NEW_FUNCTION_SHARE * traces:
            compiles = int(site.get("compiles") or 0)
            calls = _calls(summary, site)
            text = (f"{_label(site)} called at line {site.get('line')} compiled {compiles} times"
                    + (f" in {calls} calls" if calls else "")
                    + f": {new} of its {traces} traces were of a function object never traced before")
            evidence = {"text": text, "compiles": compiles, "traces": traces, "new_functions": new,
                        "calls": calls, "function": site.get("function"), **_where(site)}
            if differential is not None:
                evidence["fixed_program_compiles"] = sum(int(s.get("compiles") or 0) for s in _sites(differential))
            return _confirmed("new_function_each_call", **evidence)
    return _not_confirmed(summary, f"a call site whose jitted function was a new object on at least "
                                   f"{MIN_RECOMPILES} traces")


def static_value_per_iteration(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    for site in _sites(summary):
        traces, values = int(site.get("traces") or 0), int(site.get("static_values") or 0)
        new = int(site.get("new_functions") or 0)
        # One function object, retraced only for new static values (its inputs' shapes unchanged).
        if values >= MIN_RECOMPILES and traces >= values and new <= 1 and int(site.get("input_types") or 0) <= 1:
            shown = list(site.get("static_shown") or [])
            listed = "; ".join(shown[:4]) + ("; ..." if len(shown) > 4 else "")
            text = (f"{_label(site)} called at line {site.get('line')} compiled {site.get('compiles')} times, "
                    f"once per value of its static arguments ({values} values: {listed}); "
                    "its other inputs kept their shapes")
            return _confirmed("static_value_each_call", text=text, compiles=site.get("compiles"), traces=traces,
                              static_values=values, shown=shown, function=site.get("function"), **_where(site))
    return _not_confirmed(summary, f"a jitted function retraced for at least {MIN_RECOMPILES} distinct "
                                   "static-argument values with unchanged input shapes")


VERDICTS: dict[str, Verdict] = {
    "LL903": jit_per_iteration,
    "LL904": static_value_per_iteration,
}
