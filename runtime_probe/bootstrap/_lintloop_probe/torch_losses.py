"""PyTorch losses: is the input of `torch.nn.functional.cross_entropy` (which `nn.CrossEntropyLoss` calls)
already a probability distribution (LL708)?

A checked call looks at the input along the class dimension (1, or 0 for an unbatched input): every value
in [0, 1] and every row summing to 1 (within 1e-3) -- softmax output, where logits belong.  Checked: the
first 5 calls, then every 50th (one reduction and one device sync each).  `cross_entropy_input` events:
at the first checked call of each kind (probabilities or not) per call site; counts at the end
(`cross_entropy_inputs`).
"""
import sys

from .events import emit, probe_error
from .frames import user_site
from .state import at_fork_in_child
from .steps import before_stop

_ROW_SUM_TOLERANCE = 1e-3
_CHECK_FIRST, _CHECK_EVERY = 5, 50


class _Counts:
    def __init__(self):
        self.reset()

    def reset(self):
        self.calls = 0
        self.checked = 0
        self.probabilities = 0
        self.seen = set()   # (site, is probabilities) already emitted


_C = _Counts()


def install(torch):
    """Wrap `torch.nn.functional.cross_entropy`; returns the hooks' names."""
    try:
        functional = torch.nn.functional
        functional.cross_entropy = _wrap(functional.cross_entropy)
    except Exception as err:
        probe_error("install:torch_losses", err)
        return []
    at_fork_in_child(_C.reset)
    before_stop.append(_summary)
    return ["functional.cross_entropy"]


def _wrap(original):
    def cross_entropy(input, target, *args, **kwargs):
        _C.calls += 1
        if _C.calls <= _CHECK_FIRST or _C.calls % _CHECK_EVERY == 0:
            try:
                _check(input)
            except Exception as err:
                probe_error("torch_cross_entropy", err)
        return original(input, target, *args, **kwargs)

    cross_entropy.__wrapped__ = original
    return cross_entropy


def _check(logits):
    torch = sys.modules["torch"]
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point() or logits.dim() == 0:
        return
    dim = 1 if logits.dim() >= 2 else 0
    if logits.shape[dim] < 2 or logits.numel() == 0:
        return
    with torch.no_grad():
        values = logits.detach()
        low, high = torch.aminmax(values)
        off = (values.sum(dim=dim, dtype=torch.float32) - 1).abs().max()
        low, high, off = torch.stack([low.float(), high.float(), off]).tolist()
    _C.checked += 1
    is_probability = low >= 0.0 and high <= 1.0 and off <= _ROW_SUM_TOLERANCE
    _C.probabilities += is_probability
    file, line = user_site(2)
    if (file, line, is_probability) in _C.seen:
        return
    _C.seen.add((file, line, is_probability))
    emit({"type": "cross_entropy_input", "probabilities": is_probability, "call": _C.calls,
          "shape": list(logits.shape), "min": low, "max": high, "row_sum_error": off,
          "requires_grad": bool(logits.requires_grad), "file": file, "line": line})


def _summary():
    if _C.calls:
        emit({"type": "cross_entropy_inputs", "calls": _C.calls, "checked": _C.checked,
              "probabilities": _C.probabilities}, site=False)
