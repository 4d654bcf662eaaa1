"""PyTorch backward passes and gradient resets, as seen between optimizer steps.

Wraps `torch.autograd.backward` (which `Tensor.backward` calls), `Optimizer.zero_grad`,
`Module.zero_grad` and the `torch.nn.functional` losses, and is told of every optimizer step
by `torch_optimizer` (`before_step`).  What it records, with the user's lines:

- ``grads_carried`` (missing zero_grad): the gradients an optimizer step applied were still in
  ``.grad`` when the next ``backward()`` began, and nothing reset them before the optimizer's
  next step: at every backward in between and at that step, each gradient was the same tensor
  and either not modified since the last look (``_version``) or, if modified in place (e.g.
  clipped), not all zero.
- ``accumulation`` (gradient accumulation): several backward passes between two steps of one
  optimizer with no reset between them; the value of each backwarded loss relative to the loss
  function's output (1.0 = unscaled, 1/k = divided by the number of micro-batches); the
  gradient norm after each backward and at the step.
- ``step_order``: a step before any backward ran, or a reset between the last backward and
  the step.
- ``retain_graph`` (per checked call of ``backward(retain_graph=True)``): the retained graph's
  nodes and saved-tensor bytes, whether a later backward ran through any of its nodes before
  the same line ran again, and at which step the backwarded tensor was freed.
- ``fp16_underflow``: under float16 autocast, the float32 gradients cast to float16 during a
  backward pass: how many nonzero elements became 0 or subnormal.

Checks that cost more than a counter run only before the probe's sampled steps (1-5, every
``check_every``-th), and the per-backward gradient norms and loss values only once a step
has followed several backward passes; nothing here imports torch at module level.
"""
import functools
import sys
import weakref

from .events import emit, probe_error
from .frames import user_site
from .state import S, at_fork_in_child
from .steps import before_stop

# float16's smallest normal number (2**-14): below it a value keeps fewer than 11 significant
# bits; below 2**-25 it rounds to 0.
FP16_MIN_NORMAL = 6.103515625e-05
RETAIN_CHECKS_PER_SITE = 5
EVENTS_PER_KIND = 5
MAX_GRAPH_NODES = 50_000
_LOSS_FUNCTIONS = ("cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
                   "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div",
                   "poisson_nll_loss", "gaussian_nll_loss", "margin_ranking_loss")


class _State:
    def __init__(self):
        self.reset()

    def reset(self):
        self.seq = 0                # order of backward / reset calls
        self.backwards = 0
        self.last_backward = None   # (seq, file, line) of the latest backward
        self.resets = []            # (seq, kind, weakref to the owner, file, line), recent ones
        self.opts = {}              # id(optimizer) -> _OptState
        self.primary_params = None  # parameters of the latest counted optimizer step
        self.window = []            # per backward since the last step: {"seq", "scale", "norm"}
        self.accumulating = False   # has a step followed several backward passes? (then measure them)
        self.loss = None            # latest loss-function output: (weakref, detached value)
        self.retain_sites = {}      # (file, line) -> [calls, checked]
        self.retained = {}          # (file, line) -> the latest unresolved record
        self.fp16_autocast = False
        self.scaled = None          # torch_amp: weakrefs (scaler.scale output, its input)
        self.emitted = {}           # event type -> count


class _OptState:
    __slots__ = ("seq", "backwards", "step", "watch", "carried")

    def __init__(self):
        self.seq = 0
        self.backwards = 0
        self.step = 0
        self.watch = None     # [(param, id(grad), grad._version)] since a sampled step
        self.carried = None   # the first backward after that step, which found them intact


A = _State()


def sampled(n):
    """Is the optimizer step numbered `n` one whose gradients the probe checks?"""
    return n <= 5 or n % S.check_every == 0 or bool(S.cap and n >= S.cap)


def install(torch):
    """Wrap backward, the resets and the loss functions; returns the hooks' names."""
    at_fork_in_child(A.reset)
    hooks = []
    torch.autograd.backward = _wrap_backward(torch.autograd.backward)
    hooks.append("autograd.backward:sequence")
    torch.optim.Optimizer.zero_grad = _wrap_reset(torch.optim.Optimizer.zero_grad, "optimizer")
    torch.nn.Module.zero_grad = _wrap_reset(torch.nn.Module.zero_grad, "module")
    hooks.append("zero_grad")
    functional = torch.nn.functional
    for name in _LOSS_FUNCTIONS:
        original = getattr(functional, name, None)
        if original is not None:
            setattr(functional, name, _wrap_loss(original))
    hooks.append("functional_losses")
    before_stop.append(finish)
    return hooks


def _count(kind):
    A.emitted[kind] = A.emitted.get(kind, 0) + 1
    return A.emitted[kind] <= EVENTS_PER_KIND


# --- wrappers -----------------------------------------------------------------------------


def _wrap_backward(original):
    @functools.wraps(original)
    def backward(tensors, *args, **kwargs):
        try:
            before = _before_backward(tensors, args, kwargs)
        except Exception as err:
            probe_error("torch_backward_pre", err)
            before = None
        try:
            return original(tensors, *args, **kwargs)
        finally:
            if before is not None:
                try:
                    _after_backward(tensors, before)
                except Exception as err:
                    probe_error("torch_backward_post", err)

    return backward


def _wrap_reset(original, kind):
    @functools.wraps(original)
    def zero_grad(self, *args, **kwargs):
        try:
            A.seq += 1
            site = user_site(2) if sampled(S.steps + 1) else (None, None)
            A.resets.append((A.seq, kind, weakref.ref(self), site[0], site[1]))
            if len(A.resets) > 64:
                del A.resets[:-64]
        except Exception as err:
            probe_error("torch_zero_grad", err)
        return original(self, *args, **kwargs)

    return zero_grad


def _wrap_loss(original):
    @functools.wraps(original)
    def loss(*args, **kwargs):
        out = original(*args, **kwargs)
        try:
            # the detached value outlives a temporary output (`criterion(...) / k`), without its graph
            if A.accumulating and sampled(S.steps + 1) and getattr(out, "grad_fn", None) is not None \
                    and out.dim() == 0:
                A.loss = (weakref.ref(out), out.detach())
        except Exception as err:
            probe_error("torch_loss_output", err)
        return out

    return loss


# --- backward -----------------------------------------------------------------------------


def _roots(tensors):
    if isinstance(tensors, (list, tuple)):
        return [t for t in tensors if hasattr(t, "grad_fn")]
    return [tensors] if hasattr(tensors, "grad_fn") else []


def _flag(args, kwargs, position, name):
    """`retain_graph` / `create_graph` of torch.autograd.backward(tensors, grad_tensors,
    retain_graph, create_graph, ...)."""
    if name in kwargs:
        return kwargs[name]
    return args[position - 1] if len(args) >= position else None


def _before_backward(tensors, args, kwargs):
    A.seq += 1
    A.backwards += 1
    check = sampled(S.steps + 1)
    site = user_site(3) if check else (None, None)
    A.last_backward = (A.seq, site[0], site[1])
    roots = _roots(tensors)
    for state in A.opts.values():
        if state.watch is not None:
            _check_carried(state)
    scaled = _scaler_input(roots)
    before = {"check": check, "site": site, "hooks": None, "retain": None, "scaled": scaled is not None}
    if check:
        scale = _loss_scale(scaled if scaled is not None else roots[0]) \
            if A.accumulating and len(roots) == 1 else None
        A.window.append({"seq": A.seq, "scale": scale, "norm": None, "line": site[1]})
    retain = _flag(args, kwargs, 2, "retain_graph")
    if retain is None:
        retain = bool(_flag(args, kwargs, 3, "create_graph"))
    if retain:
        if site[0] is None:
            site = user_site(3)
        counts = A.retain_sites.setdefault(site, [0, 0])
        counts[0] += 1
        previous = A.retained.pop(site, None)
        if previous is not None:
            _resolve_retained(previous, "the same line ran again")
        if counts[1] < RETAIN_CHECKS_PER_SITE:
            counts[1] += 1
            before["retain"] = site
    if check and A.fp16_autocast:
        before["hooks"] = _watch_fp16_casts(roots)
    return before


def _after_backward(tensors, before):
    hooks = before.get("hooks")
    if hooks is not None:
        handles, counts = hooks
        for handle in handles:
            handle.remove()
        if (counts["to_zero"] or counts["subnormal"]) and _count("fp16_underflow"):
            emit({"type": "fp16_underflow", "step": S.steps + 1, "scaled": before["scaled"],
                  "file": before["site"][0], "line": before["site"][1], **counts})
    if before["check"] and A.accumulating and A.window and A.primary_params is not None:
        A.window[-1]["norm"] = _grad_norm(A.primary_params)
    if before["retain"] is not None:
        _record_retained(tensors, before["retain"])
    for state in A.opts.values():
        if state.watch is not None:
            state.watch = [(p, id(p.grad), p.grad._version) for p, _, _ in state.watch if p.grad is not None]


def _scaler_input(roots):
    """The loss a GradScaler scaled, when the backwarded tensor is `scaler.scale(loss)`."""
    if A.scaled is None or len(roots) != 1:
        return None
    output, loss = (ref() for ref in A.scaled)
    return loss if output is not None and roots[0] is output else None


def _loss_scale(root):
    """The backwarded loss relative to the latest loss-function output: 1.0 when it is that
    output, None when there is none to compare with."""
    if A.loss is None:
        return None
    (ref, value), A.loss = A.loss, None
    if root is ref():
        return 1.0
    if root.dim() != 0:
        return None
    reference = value.item()
    return root.detach().item() / reference if reference else None


def _grad_norm(params):
    torch = sys.modules["torch"]
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    with torch.no_grad():
        try:
            norms = torch.stack(torch._foreach_norm(grads)).tolist()
        except Exception:
            norms = [float(g.detach().float().norm()) for g in grads]
    return sum(v * v for v in norms) ** 0.5


# --- missing zero_grad -----------------------------------------------------------------------


def _intact(watch):
    """Is every watched gradient the same tensor, unmodified or at least not zeroed in place?"""
    modified = []
    for p, gid, version in watch:
        grad = p.grad
        if grad is None or id(grad) != gid:
            return False
        if grad._version != version:
            modified.append(grad)
    if not modified:
        return True
    torch = sys.modules["torch"]
    with torch.no_grad():
        return all(float(g.abs().max()) != 0.0 for g in modified)


def _check_carried(state):
    """A backward after a sampled step: are that step's gradients still there?"""
    if not _intact(state.watch):
        state.watch = state.carried = None
    elif state.carried is None:
        state.carried = {"seq": A.seq, "params": len(state.watch),
                         "file": A.last_backward[1] if A.last_backward else None,
                         "line": A.last_backward[2] if A.last_backward else None}


def _resets_since(seq, opt, params, until=None):
    """Resets after `seq` (and before `until`) of this optimizer, or of a module holding any
    of its parameters."""
    found = []
    param_ids = None
    for reset in A.resets:
        if reset[0] <= seq or (until is not None and reset[0] >= until):
            continue
        owner = reset[2]()
        if reset[1] == "optimizer":
            if owner is opt:
                found.append(reset)
        else:
            if param_ids is None:
                param_ids = {id(p) for p in params}
            if owner is None or any(id(p) in param_ids for p in owner.parameters()):
                found.append(reset)
    return found


# --- called by torch_optimizer before every optimizer step ------------------------------------


def before_step(opt, params, n, check, grad_norm, counts, closure=False):
    """Sequence checks for this step of `opt` (step number `n` if it counts).  A step given a
    closure (LBFGS) runs its own backward passes inside: its order is not checked."""
    state = A.opts.get(id(opt))
    first = state is None
    if first:
        state = A.opts[id(opt)] = _OptState()
    backwards = A.backwards - state.backwards
    if check and not closure:
        if first and A.backwards == 0 and _count("step_order"):
            emit({"type": "step_order", "order": "step_before_backward", "step": n,
                  "optimizer": type(opt).__name__, "backwards_before": 0})
        elif backwards and A.last_backward is not None:
            resets = _resets_since(A.last_backward[0], opt, params)
            if resets and _count("step_order"):
                reset = resets[-1]
                emit({"type": "step_order", "order": "reset_between_backward_and_step", "step": n,
                      "optimizer": type(opt).__name__, "reset": f"{reset[1]}.zero_grad()",
                      "reset_file": reset[3], "reset_line": reset[4],
                      "backward_file": A.last_backward[1], "backward_line": A.last_backward[2]})
        carried = state.carried
        if carried is not None and _intact(state.watch) and not _resets_since(carried["seq"], opt, params):
            if _count("grads_carried"):
                emit({"type": "grads_carried", "from_step": state.step, "step": n, "params": carried["params"],
                      "total": len(params), "optimizer": type(opt).__name__, "grad_norm": grad_norm,
                      "backwards": backwards, "backward_file": carried["file"], "backward_line": carried["line"]})
        if counts and backwards >= 2 and len(A.window) == backwards:
            zeroed = bool(_resets_since(A.window[0]["seq"], opt, params, until=A.last_backward[0]))
            if _count("accumulation"):
                emit({"type": "accumulation", "step": n, "backwards": backwards, "optimizer": type(opt).__name__,
                      "reset_between": zeroed,
                      "loss_scales": [None if w["scale"] is None else round(w["scale"], 6) for w in A.window],
                      "backward_lines": [w["line"] for w in A.window],
                      "norms": [None if w["norm"] is None else round(w["norm"], 6) for w in A.window],
                      "grad_norm": grad_norm})
    state.carried = None
    state.watch = [(p, id(p.grad), p.grad._version) for p in params if p.grad is not None] if check else None
    if not state.watch:
        state.watch = None
    state.seq = A.seq
    state.backwards = A.backwards
    state.step = n
    if counts:
        A.primary_params = params
        A.window = []
        A.accumulating = A.accumulating or backwards >= 2
    if len(A.resets) > 16:
        oldest = min(min(s.seq for s in A.opts.values()),
                     min((s.carried["seq"] for s in A.opts.values() if s.carried), default=A.seq))
        A.resets = [r for r in A.resets if r[0] > oldest]


# --- retain_graph ---------------------------------------------------------------------------


def _graph_nodes(roots):
    seen, stack, nodes = set(), [getattr(t, "grad_fn", None) for t in roots], []
    while stack and len(nodes) < MAX_GRAPH_NODES:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        nodes.append(node)
        stack.extend(fn for fn, _ in node.next_functions)
    return nodes


def _saved_bytes(nodes):
    """Bytes of the tensors the graph's nodes saved for backward (parameters excluded)."""
    storages, total = set(), 0
    for node in nodes:
        for name in dir(node):
            if not name.startswith("_saved_"):
                continue
            try:
                value = getattr(node, name)
            except Exception:
                continue
            for tensor in value if isinstance(value, (list, tuple)) else (value,):
                if not hasattr(tensor, "untyped_storage") or (tensor.is_leaf and tensor.requires_grad):
                    continue
                storage = tensor.untyped_storage()
                if storage.data_ptr() not in storages:
                    storages.add(storage.data_ptr())
                    total += storage.nbytes()
    return total


def _record_retained(tensors, site):
    roots = _roots(tensors)
    nodes = _graph_nodes(roots)
    record = {"file": site[0], "line": site[1], "call": A.retain_sites[site][0], "step": S.steps,
              "nodes": len(nodes), "saved_bytes": _saved_bytes(nodes), "reused": False,
              "freed_at_step": None, "handles": []}

    def reused(*_):
        record["reused"] = True

    for node in nodes:
        if type(node).__name__ != "AccumulateGrad":  # shared by every graph using the parameter
            record["handles"].append(node.register_prehook(reused))
    for root in roots:
        try:
            weakref.finalize(root, _freed, record)
        except TypeError:
            pass
    A.retained[site] = record


def _freed(record):
    if record.get("freed_at_step") is None:
        record["freed_at_step"] = S.steps


def _resolve_retained(record, resolved_by):
    for handle in record.pop("handles"):
        handle.remove()
    emit({"type": "retain_graph", "resolved_by": resolved_by, **record})


def finish():
    """At the end of the run: the last retained graphs, and the calls per site."""
    for site in list(A.retained):
        _resolve_retained(A.retained.pop(site), "end of run")
    for (file, line), (calls, checked) in A.retain_sites.items():
        emit({"type": "retain_graph_calls", "file": file, "line": line, "calls": calls, "checked": checked})


# --- float16 underflow ------------------------------------------------------------------------


def _watch_fp16_casts(roots):
    """Hooks on the graph's casts whose backward turns a float32 gradient into float16."""
    torch = sys.modules["torch"]
    counts = {"casts": 0, "nonzero": 0, "to_zero": 0, "subnormal": 0}

    def cast(grad_inputs, grad_outputs):
        low, high = grad_inputs[0], grad_outputs[0]
        if low is None or high is None or low.dtype != torch.float16 or high.dtype != torch.float32:
            return
        with torch.no_grad():
            nonzero = high != 0
            small = low.abs() < FP16_MIN_NORMAL
            counts["casts"] += 1
            counts["nonzero"] += int(nonzero.sum())
            counts["to_zero"] += int((nonzero & (low == 0)).sum())
            counts["subnormal"] += int((nonzero & small & (low != 0)).sum())

    handles = [node.register_hook(cast) for node in _graph_nodes(roots)
               if type(node).__name__ == "ToCopyBackward0"]
    return handles, counts

