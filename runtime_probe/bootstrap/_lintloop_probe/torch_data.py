"""PyTorch data loading: the order each `DistributedSampler` hands out, per pass (LL403).

`DistributedSampler.__iter__` builds the whole list of this rank's indices and returns an iterator over
it; the wrapper takes that list, records a digest of it with the sampler's `epoch`, `shuffle`, `seed`,
`rank` and `num_replicas` (a `sampler_epoch` event per pass: one per epoch when a DataLoader iterates
it), and returns an iterator over the same list.  Cost: one pass over the indices per epoch.
"""
import hashlib
import weakref
from array import array

from .events import emit, probe_error
from .state import at_fork_in_child

_KEYS = weakref.WeakKeyDictionary()    # sampler -> [key, passes]


def install(torch):
    """Wrap `torch.utils.data.distributed.DistributedSampler.__iter__`; returns the hooks' names."""
    try:
        from torch.utils.data import distributed

        cls = distributed.DistributedSampler
        cls.__iter__ = _wrap_iter(cls.__iter__)
    except Exception as err:
        probe_error("install:torch_data", err)
        return []
    at_fork_in_child(_KEYS.clear)
    return ["DistributedSampler.__iter__"]


def _wrap_iter(original):
    def __iter__(self):
        indices = list(original(self))
        try:
            _record(self, indices)
        except Exception as err:
            probe_error("torch_sampler_iter", err)
        return iter(indices)

    __iter__.__wrapped__ = original
    return __iter__


def _record(sampler, indices):
    entry = _KEYS.get(sampler)
    if entry is None:
        entry = _KEYS[sampler] = [len(_KEYS) + 1, 0]
    entry[1] += 1
    try:
        data = array("q", indices).tobytes()
    except (TypeError, OverflowError):
        data = ",".join(map(str, indices)).encode()
    emit({"type": "sampler_epoch", "sampler": entry[0], "sampler_class": type(sampler).__name__,
          "iteration": entry[1], "epoch": getattr(sampler, "epoch", None),
          "shuffle": getattr(sampler, "shuffle", None), "seed": getattr(sampler, "seed", None),
          "rank": getattr(sampler, "rank", None), "num_replicas": getattr(sampler, "num_replicas", None),
          "samples": len(indices), "first": indices[:5],
          "digest": hashlib.blake2b(data, digest_size=8).hexdigest()})
