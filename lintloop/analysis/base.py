"""What every analysis shares: a reference to the file's context, and timed, computed-once facts."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, ClassVar

if TYPE_CHECKING:
    from lintloop.analysis.context import FileContext


class Analysis:
    """One concern's questions about a file; built on first use by `FileContext`.

    `asks`: the other analyses it asks, by their `FileContext` attribute (`ctx.flow` is "flow"): the
    layers read without opening the modules. tests/test_architecture.py keeps each declaration equal
    to what its module asks, and the graph they make free of cycles."""

    asks: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.timer = ctx.timer


class computed(cached_property):
    """A fact computed at most once per file, on first use; its cost is profiled as `analysis:<name>`."""

    def __init__(self, func: Callable[[Any], Any]) -> None:
        super().__init__(func)
        self._compute = func

    def __set_name__(self, owner: type, name: str) -> None:
        super().__set_name__(owner, name)
        self.label = f"analysis:{owner.__name__}.{name}"
        compute = self._compute

        def timed(instance: Any) -> Any:
            with instance.timer.stage(self.label):
                return compute(instance)

        self.func = timed
