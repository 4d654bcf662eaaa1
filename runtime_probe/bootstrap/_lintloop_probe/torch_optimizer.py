"""PyTorch optimizer steps (global optimizer step hooks): which steps count as training
steps, gradient checks (None / all-zero / non-finite gradients, the global norm, which also
goes with every memory sample), and whether a step changed any parameter (`params_unchanged`).  Before each step, the order of
backward passes and resets since the last one (`torch_autograd`) and unscaled GradScaler
gradients (`torch_amp`) are checked.
"""
import sys

from . import torch_amp, torch_autograd
from .events import emit, probe_error
from .frames import user_site
from .grad_norms import memory_sampled
from .state import S, at_fork_in_child
from .steps import eager_step


class _Optimizers:
    """Which optimizer is the primary one, and the parameter snapshot of the current step."""

    def __init__(self):
        self.seq = 0
        self.reset()

    def reset(self):
        self.last = {}         # id(optimizer) -> sequence number of its last step
        self.primary = None
        self.snapshot = None


_OPT = _Optimizers()


def register(optimizer_module):
    """Register the step hooks with `torch.optim.optimizer`; returns the hooks' names."""
    at_fork_in_child(_OPT.reset)  # a forked child counts its own steps
    optimizer_module.register_optimizer_step_pre_hook(_pre_hook)
    hooks = ["optimizer_step_pre_hook"]
    if hasattr(optimizer_module, "register_optimizer_step_post_hook"):
        optimizer_module.register_optimizer_step_post_hook(_post_hook)
        hooks.append("optimizer_step_post_hook")
    return hooks


def _is_primary(opt):
    """Does a step of `opt` count as a training step?  The first optimizer that steps is
    the primary one; another one counts only while the primary is idle (GANs alternate two
    optimizers: one step per iteration; a new optimizer for a new phase takes over)."""
    _OPT.seq += 1
    oid = id(opt)
    previous = _OPT.last.get(oid)
    _OPT.last[oid] = _OPT.seq
    if _OPT.primary is None or _OPT.primary == oid:
        _OPT.primary = oid
        return True
    if previous is not None and _OPT.last.get(_OPT.primary, -1) < previous:
        _OPT.primary = oid
        return True
    return False


def _params(opt):
    return [p for group in opt.param_groups for p in group["params"]
            if getattr(p, "requires_grad", False)]


def _grad_check(opt, params):
    """(none, zero, total, grad_norm, nonfinite, shapes of bad params).

    One fused norm kernel over all grads and one device sync (~15 us for a small model on
    CPU); the rest is arithmetic on a short list of floats."""
    torch = sys.modules["torch"]
    total = len(params)
    with_grad = [p for p in params if p.grad is not None]
    none = total - len(with_grad)
    bad_shapes = [list(p.shape) for p in params if p.grad is None][:5]
    zero = 0
    grad_norm = None
    nonfinite = 0
    if with_grad:
        grads = [p.grad for p in with_grad]
        with torch.no_grad():
            try:
                norms = torch.stack(torch._foreach_norm(grads)).tolist()
            except Exception:  # sparse grads, several devices ...
                norms = [float(g.detach().float().norm()) for g in grads]
        square_sum = 0.0
        for index, value in enumerate(norms):
            if value == 0.0:
                zero += 1
                if len(bad_shapes) < 10:
                    bad_shapes.append(list(with_grad[index].shape))
            elif value != value or value in (float("inf"), float("-inf")):
                nonfinite += 1
            else:
                square_sum += value * value
        grad_norm = square_sum ** 0.5 if not nonfinite else None
    return none, zero, total, grad_norm, nonfinite, bad_shapes


def _pre_hook(opt, args, kwargs):
    try:
        counts = _is_primary(opt)
        n_next = S.steps + 1
        params = _params(opt)
        # Gradient checks (one fused norm kernel + a sync, 20-70 us on a small CPU model):
        # the first 5 steps, then every `check_every` steps, and the last one.
        sampled = n_next <= 5 or n_next % S.check_every == 0 or (S.cap and n_next >= S.cap)
        extra = {"optimizer": type(opt).__name__}
        on_cuda = bool(params) and getattr(params[0], "is_cuda", False)
        # The norm alone (the same kernel) also goes with each memory sample, for the report's chart.
        if sampled or (counts and memory_sampled(n_next)):
            none, zero, total, grad_norm, nonfinite, shapes = _grad_check(opt, params)
            extra["grad_norm"] = grad_norm
            if nonfinite:
                extra["nonfinite_grads"] = nonfinite
        if sampled:
            S.checks["optimizer_step"] = S.checks.get("optimizer_step", 0) + 1
            if none or zero:
                site = user_site(2)
                key = ("torch", id(opt), site)
                if S.none_seen.get(key) != (none, zero, total):
                    S.none_seen[key] = (none, zero, total)
                    emit({"type": "none_gradients", "framework": "torch", "none": none,
                          "zero": zero, "total": total, "step": n_next,
                          "optimizer": type(opt).__name__, "shapes": shapes,
                          "file": site[0], "line": site[1]})
        if counts and sampled:  # did this step change any parameter? (post hook)
            _snapshot(opt, params, n_next)
        # backward / reset order and loss scaling since this optimizer's last step
        positional = args[1:] if args and args[0] is opt else args  # torch passes (self, closure?)
        closure = bool(positional and callable(positional[0])) or callable(kwargs.get("closure"))
        checked_norm = extra.get("grad_norm") if sampled else None
        torch_autograd.before_step(opt, params, n_next, sampled, checked_norm, counts, closure)
        torch_amp.before_step(opt, n_next, checked_norm)
    except Exception as err:
        probe_error("torch_pre_hook", err)
        counts, extra, on_cuda = False, None, False
    if counts:
        eager_step("optimizer_step", "torch", extra, on_cuda)


def _snapshot(opt, params, n):
    torch = sys.modules["torch"]
    numel = sum(p.numel() for p in params)
    values = None
    if numel <= 20_000_000:
        with torch.no_grad():
            values = [p.detach().clone() for p in params]
    _OPT.snapshot = (id(opt), n, [p._version for p in params], values)


def _post_hook(opt, args, kwargs):
    snap = _OPT.snapshot
    if snap is None or snap[0] != id(opt):
        return
    _OPT.snapshot = None
    try:
        torch = sys.modules["torch"]
        params = _params(opt)
        _, n, versions, values = snap
        if len(versions) != len(params):
            return
        changed = any(p._version != v for p, v in zip(params, versions))
        method = "versions"
        if changed and values is not None:
            method = "values"
            with torch.no_grad():
                changed = any(not torch.equal(p, v) for p, v in zip(params, values))
        if not changed:
            emit({"type": "params_unchanged", "step": n, "optimizer": type(opt).__name__,
                  "params": len(params), "method": method})
    except Exception as err:
        probe_error("torch_post_hook", err)
