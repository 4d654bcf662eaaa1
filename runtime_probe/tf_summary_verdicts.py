"""TensorFlow summary verdicts (LL802).

The events come from the bootstrap's `tf_summary` module: `summary_no_writer` at the first call of
`tf.summary.write` (what `tf.summary.scalar/histogram/...` end in) with no default writer at a user
call site, and `summary_writes` at the stop (calls without a writer per site, calls with one).
"""

from __future__ import annotations

from typing import Any, Callable

from lintloop.runtime_probe.verdicts import Summary, _confirmed, _not_confirmed

Verdict = Callable[[Summary, "Summary | None"], dict[str, Any]]


def summary_without_writer(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    first_calls = summary.of_type("summary_no_writer")
    if not first_calls:
        return _not_confirmed(summary, "a tf.summary op that ran with no default summary writer")
    totals = summary.of_type("summary_writes")
    sites = totals[-1]["without_writer"] if totals else [
        {"file": e.get("file"), "line": e.get("line"), "calls": 1} for e in first_calls]
    calls = sum(site["calls"] for site in sites)
    written = totals[-1]["written"] if totals else None
    where = ", ".join(f"{site['file']}:{site['line']} ({site['calls']}x)" for site in sites)
    text = (f"{calls} tf.summary call(s) ran with no default summary writer and wrote nothing (each returned "
            f"False), at {where}" + (f"; {written} call(s) had a writer" if written is not None else ""))
    first = first_calls[0]
    return _confirmed("summary_no_writer", text=text, calls=calls, written=written, sites=sites,
                      tag=first.get("tag"), file=first.get("file"), line=first.get("line"))


VERDICTS: dict[str, Verdict] = {"LL802": summary_without_writer}
