"""PyTorch modules: what the outermost module calls (a model called from user code, not from inside another
module's forward) do, for three signals:

- evaluation forwards (LL703): an outermost call of a module in eval mode (`training` False).  Each is
  counted per module, with whether autograd was enabled, and gets a memory sample (`eval_forward` events: a
  memory series whose "step" is one evaluation forward of that module); an evaluation loop has no optimizer
  step to sample at.
- training steps in eval mode (LL704): an optimizer step whose model's last outermost forward before it ran
  with autograd enabled, with the model in eval mode and Dropout (p > 0) / BatchNorm (tracking running
  statistics) submodules in eval mode (`eval_mode_step` at the first such step, with the forward's line
  and the step's; counts at the end).
- DistributedDataParallel bypassed (LL404): an outermost call, with autograd enabled, of the module a
  `DistributedDataParallel` wraps (or of one of its submodules) while the wrapper's own forward is not
  running: DDP does not prepare the gradient all-reduce (`ddp_bypass` at the first optimizer step after one;
  counts at the end).

Cost: `Module.__call__` gets one Python wrapper; nested calls pass straight through (one frame and a flag
test); an outermost call in training mode costs a dictionary lookup and two attribute reads.  Global
forward hooks are not used: they cost ~4 us per module call and take every call off torch's fast path.
"""
import sys
import weakref

from .events import emit, probe_error
from .frames import user_site
from .memory import sample
from .state import S, at_fork_in_child
from .steps import before_stop

# Evaluation forwards get a memory sample (~10 us with its event) every call up to this many per module,
# then every 10th.
_EVAL_SAMPLE_ALL = 100


class _Modules:
    """Per-process bookkeeping of the outermost module calls."""

    def __init__(self):
        self.depth = 0                           # >0 while an outermost module call runs
        self.ddp_members = weakref.WeakKeyDictionary()   # module (wrapped, or a submodule) -> True
        self.mode_modules = weakref.WeakKeyDictionary()  # module -> its Dropout/BatchNorm submodules
        self.reset()

    def reset(self):
        self.keys = {}             # id(module) -> small int naming it in events
        self.eval_calls = {}       # key -> [module class, calls, calls with grad, file, line]
        self.pending = {}          # id(module) -> (module ref, eval-mode submodules by class) of its last
                                   # grad-enabled outermost forward, when that ran in eval mode
        self.eval_mode_steps = 0
        self.eval_mode_first = None
        self.ddp_wrapped = 0       # DistributedDataParallel objects constructed
        self.ddp_rank = None       # the process group rank when the last one was
        self.ddp_forwards = 0
        self.ddp_forwards_at_step = 0   # ddp_forwards at the last optimizer step
        self.bypassed = 0
        self.bypass_site = None    # (module class, file, line) of the first bypassing call since a step
        self.bypass_steps = 0
        self.bypass_first = None


_M = _Modules()


def install(torch):
    """Wrap `torch.nn.Module.__call__` and `DistributedDataParallel.__init__`, and register an optimizer
    step pre-hook; returns the hooks' names (those installed before a failure, which is recorded)."""
    hooks = []
    try:
        _install(torch, hooks)
    except Exception as err:
        probe_error("install:torch_modules", err)
    return hooks


def _install(torch, hooks):
    from torch.nn.parallel import distributed
    from torch.optim import optimizer

    at_fork_in_child(_M.reset)
    module_cls = torch.nn.Module
    module_cls.__call__ = _wrap_call(module_cls.__call__, torch)
    hooks.append("Module.__call__")
    dropout = getattr(torch.nn.modules.dropout, "_DropoutNd", None)
    batchnorm = getattr(torch.nn.modules.batchnorm, "_BatchNorm", None)
    _MODE_CLASSES[:] = [c for c in (dropout, batchnorm) if c is not None]
    ddp_cls = distributed.DistributedDataParallel
    ddp_cls.__init__ = _wrap_ddp_init(ddp_cls.__init__)
    _DDP[:] = [ddp_cls]
    hooks.append("DistributedDataParallel.__init__")
    optimizer.register_optimizer_step_pre_hook(_step_hook)
    hooks.append("optimizer_step_pre_hook:modes")
    before_stop.append(_summaries)


_MODE_CLASSES = []
_DDP = []


def _wrap_call(original, torch):
    is_grad_enabled = torch.is_grad_enabled

    def __call__(self, *args, **kwargs):
        if _M.depth:
            return original(self, *args, **kwargs)
        _M.depth = 1
        try:
            try:
                _outermost(self, is_grad_enabled())
            except Exception as err:
                probe_error("torch_module_call", err)
            return original(self, *args, **kwargs)
        finally:
            _M.depth = 0

    __call__.__wrapped__ = original
    return __call__


def _outermost(module, grad):
    """Bookkeeping of an outermost module call, before it runs."""
    if _DDP and isinstance(module, _DDP[0]):  # its mode is its module's: go on to the mode checks
        _M.ddp_forwards += 1
    elif grad and _M.ddp_members and module in _M.ddp_members:
        _M.bypassed += 1
        if _M.bypass_site is None:
            _M.bypass_site = (type(module).__name__,) + user_site(2)
    if module.training:
        if _M.pending:
            _M.pending.pop(id(module), None)
        return
    _eval_forward(module, grad)
    if grad:
        in_eval = _eval_mode_submodules(module)
        if in_eval:  # the forward's line is needed for the first such step only
            site = user_site(2) if _M.eval_mode_first is None else (None, None)
            _M.pending[id(module)] = (weakref.ref(module), in_eval, site)
    elif _M.pending:
        _M.pending.pop(id(module), None)


def _eval_forward(module, grad):
    key = _M.keys.get(id(module))
    if key is None:
        key = _M.keys[id(module)] = len(_M.keys) + 1
    entry = _M.eval_calls.get(key)
    first = entry is None
    if first:
        entry = _M.eval_calls[key] = [type(module).__name__, 0, 0, None, None]
    entry[1] += 1
    entry[2] += bool(grad)
    n = entry[1]
    if n <= _EVAL_SAMPLE_ALL or n % 10 == 0:
        mem, source, host = sample("torch", _on_cuda(module))
        ev = {"type": "eval_forward", "module": entry[0], "key": key, "n": n, "grad": bool(grad),
              "mem": mem, "mem_source": source}
        if host is not None:
            ev["host_mem"] = host
        if first:
            entry[3], entry[4] = ev["file"], ev["line"] = user_site(2)
        emit(ev, site=False)


def _on_cuda(module):
    for parameter in module.parameters():
        return bool(getattr(parameter, "is_cuda", False))
    return False


def _eval_mode_submodules(module):
    """{class name: count} of the module's Dropout (p > 0) / BatchNorm (tracking running statistics)
    submodules that are in eval mode."""
    found = _M.mode_modules.get(module)
    if found is None:
        found = [m for m in module.modules() if isinstance(m, tuple(_MODE_CLASSES))
                 and (getattr(m, "p", 1) or 0) > 0 and getattr(m, "track_running_stats", True)]
        _M.mode_modules[module] = found
    counts = {}
    for m in found:
        if not m.training:
            name = type(m).__name__
            counts[name] = counts.get(name, 0) + 1
    return counts


def _step_hook(opt, args, kwargs):
    try:
        if _M.pending:
            _check_eval_mode_step(opt)
        ddp_ran = _M.ddp_forwards != _M.ddp_forwards_at_step
        _M.ddp_forwards_at_step = _M.ddp_forwards
        if _M.bypass_site is not None:
            _check_bypass_step(ddp_ran)
    except Exception as err:
        probe_error("torch_modes_step_hook", err)


def _check_eval_mode_step(opt):
    """Did the model this optimizer trains run its last forward in eval mode?"""
    pending, _M.pending = _M.pending, {}
    owned = {id(p) for group in opt.param_groups for p in group["params"]}
    for ref, in_eval, (file, line) in pending.values():
        module = ref()
        if module is None or not any(id(p) in owned for p in module.parameters()):
            continue
        _M.eval_mode_steps += 1
        if _M.eval_mode_first is None:
            _M.eval_mode_first = {"step": S.steps, "module": type(module).__name__, "eval_submodules": in_eval}
            emit({"type": "eval_mode_step", "optimizer": type(opt).__name__, **_M.eval_mode_first,
                  "file": file, "line": line, "step_line": user_site(2)[1]})
        return


def _check_bypass_step(ddp_ran):
    """A step after a forward that bypassed the DDP wrapper, with no wrapper forward since the last step."""
    site, _M.bypass_site = _M.bypass_site, None
    if ddp_ran:
        return
    _M.bypass_steps += 1
    if _M.bypass_first is None:
        _M.bypass_first = S.steps
        emit({"type": "ddp_bypass", "step": S.steps, "module": site[0], "rank": _M.ddp_rank,
              "ddp_forwards": _M.ddp_forwards, "file": site[1], "line": site[2]})


def _rank():
    dist = sys.modules.get("torch.distributed")
    try:
        return dist.get_rank() if dist is not None and dist.is_initialized() else None
    except Exception:
        return None


def _wrap_ddp_init(original):
    def __init__(self, module, *args, **kwargs):
        original(self, module, *args, **kwargs)
        try:
            _M.ddp_wrapped += 1
            _M.ddp_rank = _rank()
            for member in module.modules():
                _M.ddp_members[member] = True
        except Exception as err:
            probe_error("torch_ddp_init", err)

    __init__.__wrapped__ = original
    return __init__


def _summaries():
    """At the end: the counts behind the first-occurrence events."""
    for key, (name, calls, with_grad, file, line) in _M.eval_calls.items():
        emit({"type": "eval_forwards", "module": name, "key": key, "calls": calls, "with_grad": with_grad,
              "file": file, "line": line})
    if _M.eval_mode_steps:
        emit({"type": "eval_mode_steps", "steps": _M.eval_mode_steps, "of_steps": S.steps,
              "first_step": (_M.eval_mode_first or {}).get("step")}, site=False)
    if _M.ddp_wrapped:
        emit({"type": "ddp_forwards", "wrappers": _M.ddp_wrapped, "ddp_forwards": _M.ddp_forwards,
              "bypassed_forwards": _M.bypassed,
              "bypass_steps": _M.bypass_steps, "steps": S.steps, "rank": _M.ddp_rank}, site=False)
