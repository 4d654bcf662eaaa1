"""PyTorch verdicts: modules, data loading, distribution and AMP deprecations (LL403, LL404, LL603, LL703, LL704, LL708)."""

from __future__ import annotations

from typing import Any, Callable

from lintloop.runtime_probe.verdicts import Summary

Verdict = Callable[[Summary, "Summary | None"], dict[str, Any]]

VERDICTS: dict[str, Verdict] = {}
