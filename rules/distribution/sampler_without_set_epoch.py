"""LL403 sampler-without-set-epoch: the rule, its documentation and its examples."""

from __future__ import annotations

from collections import defaultdict
from functools import cached_property

import libcst as cst

from lintloop.analysis.iteration import Event, loop_header
from lintloop.analysis.nodes import argument, dotted, keyword_arg, walk
from lintloop.rule import Example, Rule
from lintloop.screen import Needs

_SAMPLERS = {"torch.utils.data.DistributedSampler", "torch.utils.data.distributed.DistributedSampler"}
_LOADERS = {"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"}


class SamplerWithoutSetEpoch(Rule):
    code = "LL403"
    name = "sampler-without-set-epoch"
    description = "a DistributedSampler without `set_epoch` each epoch"
    frameworks = ("pt",)
    needs = Needs(file=(("name:DistributedSampler",), ("loop",)), statement=(("name:DistributedSampler",),))
    probe = "effect"
    summary = ("A `DistributedSampler` (shuffle not False) feeds a DataLoader that an epoch loop iterates, and the "
               "loop never calls `sampler.set_epoch(epoch)` with a changing argument (a single `set_epoch(0)` "
               "before the loop, or a constant argument, counts as never).")
    why = ("`DistributedSampler` shuffles with a generator seeded by `seed + epoch`; the epoch only changes "
           "through `set_epoch`. Without it every epoch visits the samples in the same order on every rank.")
    symptom = ("LL403_bad.py: the probe records the sampler's order in each epoch: identical in "
               "every epoch (measured in torch 2.13); no warning.")
    remedy = ("Call `sampler.set_epoch(epoch)` (or `loader.sampler.set_epoch(epoch)`) at the start of each epoch, "
              "before iterating the loader.")
    flagged = (
        Example("""
import torch
from torch.utils.data import DataLoader, DistributedSampler
sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, batch_size=32, sampler=sampler)
for epoch in range(epochs):
    for x, y in loader:
        train_step(x, y)
""", expect="""
3:11-3:38 `DistributedSampler(dataset)` never gets `set_epoch(epoch)` in the epoch loop
    help: call `sampler.set_epoch(epoch)` at the start of each epoch
    note: `for epoch in range(epochs)` iterates `loader` each epoch without it, so every epoch sees the
        samples in the same order
"""),
        Example("""
import torch
from torch.utils.data.distributed import DistributedSampler
def main():
    train_sampler = DistributedSampler(train_set, num_replicas=world, rank=rank)
    train_loader = torch.utils.data.DataLoader(train_set, sampler=train_sampler, batch_size=64)
    train_sampler.set_epoch(0)
    for epoch in range(args.epochs):
        train_one_epoch(model, train_loader, optimizer)

def train_one_epoch(model, loader, optimizer):
    for x, y in loader:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
""", expect="""
4:21-4:81 `DistributedSampler(train_set, num_repli…` never gets `set_epoch(epoch)` in the epoch loop
    help: call `train_sampler.set_epoch(epoch)` at the start of each epoch
    note: `for epoch in range(args.epochs)` iterates `train_loader` each epoch without it, so every
        epoch sees the samples in the same order
"""),
        Example("""
import torch
import torch.utils.data as data
loader = data.DataLoader(ds, sampler=data.distributed.DistributedSampler(ds, shuffle=True))
for epoch in range(10):
    loader.sampler.set_epoch(0)
    for batch in loader:
        step(batch)
""", expect="""
3:38-3:91 `data.distributed.DistributedSampler(ds,…` never gets `set_epoch(epoch)` in the epoch loop
    help: call `sampler.set_epoch(epoch)` at the start of each epoch
    note: `for epoch in range(10)` iterates `loader` each epoch without it, so every epoch sees the
        samples in the same order
"""),
    )
    not_flagged = (
        Example("""
import torch
from torch.utils.data import DataLoader, DistributedSampler
sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, sampler=sampler)
for epoch in range(epochs):
    if args.distributed:
        loader.sampler.set_epoch(epoch)
    for x, y in loader:
        train_step(x, y)
"""),
        Example("""
import torch
from torch.utils.data import DataLoader, DistributedSampler
val_sampler = DistributedSampler(val_set, shuffle=False)
val_loader = DataLoader(val_set, sampler=val_sampler)
for epoch in range(epochs):
    for x, y in val_loader:
        evaluate(x, y)
"""),
        Example("""
import torch
from torch.utils.data import DataLoader, DistributedSampler
def train(loader, epoch):
    loader.sampler.set_epoch(epoch)
    for batch in loader:
        step(batch)

sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, sampler=sampler)
for epoch in range(epochs):
    train(loader, epoch)
"""),
        Example("""
import torch
from torch.utils.data import DataLoader, DistributedSampler
sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, sampler=sampler)
for x, y in loader:
    train_step(x, y)
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.names.callee(node) not in _SAMPLERS:
            return
        shuffle = argument(node, 3, "shuffle")
        if isinstance(shuffle, cst.Name) and shuffle.value == "False":
            return
        names = self._names_of(node)
        others = {name for call in self._samplers if call is not node for name in self._names_of(call)}
        for loader in self._loaders_using(node, names):
            for epoch_loop in self._epoch_loops(loader):
                events = self.ctx.iteration.of(epoch_loop).events
                if not any(self._sets_epoch(e, others) for e in events):
                    sampler = next(iter(names)) if len(names) == 1 else "sampler"
                    epoch = epoch_loop.target.value if isinstance(epoch_loop, cst.For) \
                        and isinstance(epoch_loop.target, cst.Name) else "epoch"
                    self.report(node, f"`{self.ctx.snippet(node, 40)}` never gets `set_epoch(epoch)` in the "
                                      "epoch loop",
                                help=f"call `{sampler}.set_epoch({epoch})` at the start of each epoch",
                                note=f"`{loop_header(self.ctx, epoch_loop)}` iterates `{loader}` each epoch "
                                     "without it, so every epoch sees the samples in the same order")
                    return

    def _names_of(self, call: cst.Call) -> set[str]:
        """The names the sampler is bound to (`sampler`, `self.train_sampler`)."""
        parent = self.ctx.parents.get(call)
        if isinstance(parent, cst.Assign):
            return {d for t in parent.targets if (d := dotted(t.target))}
        return set()

    @cached_property
    def _samplers(self) -> list[cst.Call]:
        return [call for call in self.ctx.nodes(cst.Call) if self.ctx.names.callee(call) in _SAMPLERS]

    @cached_property
    def _loaders(self) -> list[cst.Call]:
        return [call for call in self.ctx.nodes(cst.Call) if self.ctx.names.callee(call) in _LOADERS]

    def _loaders_using(self, sampler: cst.Call, names: set[str]) -> list[str]:
        found = []
        for call in self._loaders:
            given = keyword_arg(call, "sampler") or keyword_arg(call, "batch_sampler")
            if given is None:
                continue
            if not any(n is sampler or dotted(n) in names for n in walk(given)):
                continue
            parent = self.ctx.parents.get(call)
            if isinstance(parent, cst.Assign):
                found.extend(d for t in parent.targets if (d := dotted(t.target)))
        return found

    def _epoch_loops(self, loader: str) -> list[cst.For | cst.While]:
        """Loops that contain a loop over `loader` (directly or through same-file calls)."""
        return self._loops_iterating.get(loader, [])

    @cached_property
    def _loops_iterating(self) -> dict[str | None, list[cst.For | cst.While]]:
        """For each object a loop iterates, the loops whose iteration holds such a loop (all the `for`s, then
        all the `while`s)."""
        found: dict[str | None, list[cst.For | cst.While]] = defaultdict(list)
        for loop in (*self.ctx.nodes(cst.For), *self.ctx.nodes(cst.While)):
            for target in dict.fromkeys(e.target for e in self.ctx.iteration.of(loop).events if e.kind == "iterate"):
                found[target].append(loop)
        return found

    @staticmethod
    def _sets_epoch(event: Event, other_samplers: set[str]) -> bool:
        """A `set_epoch(<changing value>)` on this sampler or any alias of it (not on another sampler)."""
        if event.kind != "set_epoch" or isinstance(event.argument_node, (cst.Integer, cst.Float)):
            return False  # `set_epoch(0)` every epoch: the same order
        return event.target not in other_samplers
