"""PyTorch contexts: code under `torch.no_grad()` / `torch.inference_mode()`."""

from __future__ import annotations

from lintloop.analysis.base import Analysis, computed
from lintloop.analysis.contexts import WithBlocks

_NO_GRAD = {"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad"}


class PyTorch(Analysis):
    @computed
    def no_grad(self) -> WithBlocks:
        """`with torch.no_grad():` / `torch.inference_mode()` blocks: nothing computed there holds a graph."""
        return WithBlocks(self.ctx, "no_grad", lambda call: self.ctx.names.callee(call) in _NO_GRAD)
