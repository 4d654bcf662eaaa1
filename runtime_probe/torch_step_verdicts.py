"""PyTorch verdicts: optimizer steps and backward passes (LL105, LL303, LL604, LL605, LL701, LL702, LL706, LL707)."""

from __future__ import annotations

from typing import Any, Callable

from lintloop.runtime_probe.verdicts import Summary

Verdict = Callable[[Summary, "Summary | None"], dict[str, Any]]

VERDICTS: dict[str, Verdict] = {}
