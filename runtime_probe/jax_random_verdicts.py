"""JAX PRNG verdicts: one key value drawn from more than once (LL901).

The events come from the bootstrap's `jax_random` module: `prng_reuse` (a key drawn from again, once
per pair of sites, with whether the draw equals the first) and `prng_keys` at the stop (eager
sampler calls, distinct keys, the most drawn-from keys and their sites). Only eager draws are seen:
a key reused inside a jitted function is not.
"""

from __future__ import annotations

import os
from typing import Any

from lintloop.runtime_probe.verdicts import Summary, _confirmed, _not_confirmed


def _site(site: dict[str, Any]) -> str:
    return f"`{site.get('sampler')}` at {os.path.basename(str(site.get('file')))}:{site.get('line')}"


def key_reuse(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    totals = summary.of_type("prng_keys")
    top = next((t["top"][0] for t in totals if t.get("top")), None)
    if top is not None:
        sites = top.get("sites") or []
        where = ", ".join(f"{_site(s)} ({s.get('draws')}x)" for s in sites[:3])
        compared, identical = int(top.get("compared") or 0), int(top.get("identical") or 0)
        effect = (f": {identical} of {compared} later draws identical to the first" if compared
                  else "")
        text = f"one PRNG key drawn from {top.get('draws')} times, by {where}{effect}"
        first = sites[0] if sites else {}
        return _confirmed("prng_key_reuse", text=text, draws=top.get("draws"), identical=identical,
                          compared=compared, sites=sites, reused_keys=totals[-1].get("reused"),
                          file=first.get("file"), line=first.get("line"))
    reuse = next(iter(summary.of_type("prng_reuse")), None)
    if reuse is not None:  # the run ended before its summary (killed): the first reuse seen
        text = (f"a PRNG key drawn from by `{reuse.get('first_sampler')}` at "
                f"{os.path.basename(str(reuse.get('first_file')))}:{reuse.get('first_line')} was drawn from again by "
                f"`{reuse.get('sampler')}` at {os.path.basename(str(reuse.get('file')))}:{reuse.get('line')}"
                + (" (identical draw)" if reuse.get("identical") else ""))
        return _confirmed("prng_key_reuse", text=text, draws=reuse.get("draws"), identical=reuse.get("identical"),
                          file=reuse.get("file"), line=reuse.get("line"))
    calls = sum(int(t.get("calls") or 0) for t in totals)
    return _not_confirmed(summary, f"a PRNG key drawn from twice by eager `jax.random` samplers ({calls} eager "
                                   "sampler calls seen; draws inside jitted code are not)")


VERDICTS = {"LL901": key_reuse}
