"""JAX compilations per user call site: how often a jitted call traced and compiled, whether each
trace was of a function object never traced before (a lambda, `partial`, `jax.grad(f)` or bound
method made anew: LL903), and which static-argument values each trace had (LL904).  One
`jax_compile_site` summary per call site at the stop.

JAX reports every trace and backend compile through `jax.monitoring` duration events
(`/jax/core/compile/jaxpr_trace_duration`, `/jax/core/compile/backend_compile_duration`, jax
0.10), synchronously on the compiling thread, after tracing finished: the innermost user frame on
the stack is then the line that called the jitted function.  At a trace event, the frame of JAX's
`pjit._infer_params` holds the function being traced (`fun`), its `PjitInfo` (`ji`: static
argument numbers and names) and the call's `args` / `kwargs`.  Nothing runs on the call path:
the listeners fire only when JAX traces or compiles.
"""
import sys
import weakref

from .events import emit, probe_error, safe_str
from .frames import user_location, user_site
from .state import at_fork_in_child
from .steps import before_stop

TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
# Where JAX's jit keeps the traced function and the call's arguments (jax/_src/pjit.py, 0.10).
_INFER_FRAME = "_infer_params"
_FRAMES_UP = 10
# Bounds on what one site keeps: distinct static values shown, characters of one value's repr.
MAX_VALUES = 20
VALUE_CHARS = 60
# How many wrappers deep a traced function is unwrapped to the user's function.
_UNWRAP = 10


class _Sites:
    def __init__(self):
        self.reset()

    def reset(self):
        self.sites = {}      # (file, line) of the user's call -> record
        self.traced = {}     # id(function object) -> weakref to it: objects JAX traced before


_S = _Sites()


def install_compile_counter(jax):
    """Count traces and compiles per user call site through `jax.monitoring` listeners (a JAX
    without them, or a stand-in module, gets nothing)."""
    register = getattr(getattr(jax, "monitoring", None), "register_event_duration_secs_listener", None)
    if register is None:
        return
    at_fork_in_child(_S.reset)
    before_stop.append(_summaries)
    register(_on_duration)


def _on_duration(event, duration, **kwargs):
    if event != TRACE_EVENT and event != COMPILE_EVENT:
        return
    try:
        file, line = user_site(2)
        if file is None:
            return
        rec = _S.sites.get((file, line))
        if event == COMPILE_EVENT:
            if rec is not None:
                rec["compiles"] += 1
            return
        infer = _infer_frame(sys._getframe(1))
        if infer is None:
            return
        fun = infer.f_locals.get("fun")
        user = _user_function(fun)
        if user is None:
            return  # an eager op's own jit (`jnp.sin(x)` outside jit), not a user function
        if rec is None:
            code = user.__code__
            where = user_location(code.co_filename, code.co_firstlineno)
            rec = _S.sites[(file, line)] = {
                "function": getattr(user, "__name__", code.co_name), "def_file": where[0] if where else None,
                "def_line": where[1] if where else None, "traces": 0, "compiles": 0, "new_functions": 0,
                "static": {}, "avals": set()}
        _trace(rec, fun, infer.f_locals)
    except Exception as err:
        probe_error("jax_compile", err)


def _infer_frame(frame):
    for _ in range(_FRAMES_UP):
        if frame is None:
            return None
        if frame.f_code.co_name == _INFER_FRAME and frame.f_code.co_filename.endswith("pjit.py"):
            return frame
        frame = frame.f_back
    return None


def _user_function(fun):
    """The user's Python function behind `fun` (through `functools.wraps`, `partial`, bound methods)."""
    for _ in range(_UNWRAP):
        if fun is None:
            return None
        code = getattr(fun, "__code__", None)
        if code is not None and user_location(code.co_filename, code.co_firstlineno) is not None:
            return fun
        fun = getattr(fun, "__wrapped__", None) or getattr(fun, "__func__", None) or getattr(fun, "func", None)
    return None


def _trace(rec, fun, local):
    rec["traces"] += 1
    key = id(fun)
    known = _S.traced.get(key)
    if known is None or known() is not fun:
        rec["new_functions"] += 1
        try:
            _S.traced[key] = weakref.ref(fun, lambda _, k=key: _S.traced.pop(k, None))
        except TypeError:  # not weakly referenceable: cannot tell it from a later object at this address
            pass
    rec["avals"].add(safe_str(local.get("avals"))[:500])
    static = _static_values(local)
    if static is not None:
        rec["static"][static] = rec["static"].get(static, 0) + 1


def _static_values(local):
    """`name=value` of the static arguments of this call, as one string (None without any)."""
    ji = local.get("ji")
    args, kwargs = local.get("args") or (), local.get("kwargs") or {}
    numbers, names = getattr(ji, "static_argnums", ()), getattr(ji, "static_argnames", ())
    if not numbers and not names:
        return None
    try:
        params = list(ji.fun_signature.parameters) if getattr(ji, "fun_signature", None) is not None else []
    except Exception:
        params = []
    parts = []
    for i in numbers:
        if 0 <= i < len(args):
            label = params[i] if i < len(params) else f"#{i}"
            parts.append(f"{label}={safe_str(args[i])[:VALUE_CHARS]}")
    for name in names:
        if name in kwargs:
            parts.append(f"{name}={safe_str(kwargs[name])[:VALUE_CHARS]}")
    return ", ".join(parts) if parts else None


def _summaries():
    for (file, line), rec in list(_S.sites.items()):
        values = list(rec["static"])
        emit({"type": "jax_compile_site", "file": file, "line": line, "function": rec["function"],
              "def_file": rec["def_file"], "def_line": rec["def_line"], "traces": rec["traces"],
              "compiles": rec["compiles"], "new_functions": rec["new_functions"],
              "static_values": len(values), "static_shown": values[:MAX_VALUES],
              "input_types": len(rec["avals"])}, site=False)
