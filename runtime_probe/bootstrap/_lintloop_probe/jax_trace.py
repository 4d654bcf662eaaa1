"""JAX tracing: per jitted user function, and per body of an eager `lax.scan` / `fori_loop` /
`while_loop` (by definition site), how often JAX ran its Python body (= traces) and how often the
program called it (the scan, outside any trace) (`jax_function` summaries at the stop); builtin
`print` run while JAX traces (`jax_trace_print`, also in bodies of `lax` control flow or `grad`);
`jax.debug.print` handed a string that already holds a tracer (`jax_debug_print_tracer`: an
f-string formatted at trace time); lists from outside a jitted function appended to, and
globals it assigns, changed while tracing it (`jax_trace_mutation`, at the stop).

`jax.jit` / `jax.pmap` are wrapped: a user function gets one counting wrapper per function
object (kept on the function itself), so JAX's compilation cache, keyed by the function's
identity, still hits for `jax.jit(module_fn)` called again; the wrapper carries `__wrapped__`,
so signature inspection (`static_argnames`) sees the user's function.  The jitted callable
comes back inside a thin proxy that counts top-level calls and hands every attribute
(`.lower`, `.trace`, `.eval_shape`, ...) to JAX's object.
"""
import builtins
import dis
import functools
import sys
import threading
import types

from .events import emit, probe_error, safe_str
from .frames import user_location
from .steps import before_stop, stop_if_pending

# The first outermost traces are watched for list mutations with a profile function (it slows
# tracing); a program's mutation sites show in its first traces.
PROFILED_TRACES = 25
_MUTATORS = ("append", "extend")
_ATTR = "_lintloop_jax_traced"
# Text of a tracer's repr in a formatted string: `JitTracer(float32[])`, `DynamicJaxprTracer(...)`.
_TRACER_TEXT = "Tracer("


class _Traces:
    def __init__(self):
        self.records = {}            # (file, line) of a def -> record
        self.mutations = {}          # (file, line) of a mutation -> {"method", "times", "record"}
        self.profiled = 0
        self.local = threading.local()   # .stack: records being traced on this thread
        self.clean = None            # jax's "no trace is active" test


_T = _Traces()


def _stack():
    stack = getattr(_T.local, "stack", None)
    if stack is None:
        stack = _T.local.stack = []
    return stack


def _tracing():
    """Is JAX tracing on this thread (a jit, a `lax.scan` body, a grad)?"""
    clean = _T.clean
    if clean is not None:
        return not clean()
    return bool(_stack())


def _record(fun, kind):
    code = fun.__code__
    where = user_location(code.co_filename, code.co_firstlineno)
    if where is None:
        return None
    rec = _T.records.get(where)
    if rec is None:
        rec = _T.records[where] = {"name": code.co_name, "kind": kind, "file": where[0], "line": where[1],
                                   "traces": 0, "calls": 0, "globals": _assigned_globals(code), "changed": {}}
    return rec


def _traced_function(fun, kind):
    """(the wrapper JAX should trace instead of `fun`, its record), or None for a function that is not
    the user's.  One wrapper per function object, kept on the function: JAX's caches key on it."""
    if not isinstance(fun, types.FunctionType):
        return None
    rec = _record(fun, kind)
    if rec is None:
        return None
    traced = fun.__dict__.get(_ATTR)
    if traced is None:
        traced = _traced_wrapper(fun, rec)
        setattr(fun, _ATTR, traced)
    return traced, rec


def _assigned_globals(code):
    """Names the function (or a def nested in it) assigns with `global`."""
    names = set()
    work = [code]
    while work:
        current = work.pop()
        for ins in dis.get_instructions(current):
            if ins.opname in ("STORE_GLOBAL", "DELETE_GLOBAL"):
                names.add(ins.argval)
        work.extend(c for c in current.co_consts if isinstance(c, types.CodeType))
    return sorted(names)


def _traced_wrapper(fun, rec):
    """The function JAX traces instead of `fun`: counts each run of its Python body."""
    module_globals = fun.__globals__

    @functools.wraps(fun)
    def traced(*args, **kwargs):
        stack = _stack()
        outermost = not stack
        watch = outermost and _T.profiled < PROFILED_TRACES
        try:
            rec["traces"] += 1
            before = {n: module_globals.get(n, _MISSING) for n in rec["globals"]}
            stack.append(rec)
            if watch:
                _T.profiled += 1
                _T.local.previous_profile = sys.getprofile()
                sys.setprofile(_profile)
        except Exception as err:
            probe_error("jax_trace", err)
            before, watch = {}, False
        try:
            return fun(*args, **kwargs)
        finally:
            try:
                if watch:
                    sys.setprofile(_T.local.previous_profile)
                if stack and stack[-1] is rec:
                    stack.pop()
                for name, old in before.items():
                    if module_globals.get(name, _MISSING) is not old:
                        rec["changed"][name] = rec["changed"].get(name, 0) + 1
            except Exception as err:
                probe_error("jax_trace", err)

    return traced


_MISSING = object()


class _CountedJit:
    """JAX's jitted callable, counting the calls made outside any trace."""

    def __init__(self, jitted, rec):
        functools.update_wrapper(self, jitted)
        self._lintloop_jitted = jitted
        self._lintloop_record = rec

    def __call__(self, *args, **kwargs):
        top = False
        try:
            top = not _tracing()
            if top:
                self._lintloop_record["calls"] += 1
        except Exception as err:
            probe_error("jax_trace_call", err)
        result = self._lintloop_jitted(*args, **kwargs)
        if top:
            stop_if_pending()  # the step cap was reached inside the call (an optax update in the step)
        return result

    def __getattr__(self, name):
        return getattr(self.__dict__["_lintloop_jitted"], name)

    def __get__(self, obj, objtype=None):
        return self if obj is None else types.MethodType(self, obj)


def _wrap_compile(original, kind):
    def compile_(fun=None, *args, **kwargs):
        if fun is None:  # `jax.jit(static_argnames=...)` used as a decorator factory
            return lambda f: compile_(f, *args, **kwargs)
        try:
            if isinstance(fun, types.MethodType):
                # A bound method is a new object each time: JAX compiles each anew, and so does this.
                rec = _record(fun.__func__, kind) if isinstance(fun.__func__, types.FunctionType) else None
                found = (types.MethodType(_traced_wrapper(fun.__func__, rec), fun.__self__), rec) if rec else None
            else:
                found = _traced_function(fun, kind)
        except Exception as err:
            probe_error("jax_trace_wrap", err)
            found = None
        if found is None:
            return original(fun, *args, **kwargs)
        return _CountedJit(original(found[0], *args, **kwargs), found[1])

    functools.update_wrapper(compile_, original)
    return compile_


# Control flow that traces a body (position, keyword), once per call, even without jit.
_BODY_PRIMITIVES = (("scan", 0, "f"), ("fori_loop", 2, "body_fun"), ("while_loop", 1, "body_fun"))


def _wrap_body_primitive(original, kind, position, keyword):
    @functools.wraps(original)
    def primitive(*args, **kwargs):
        try:
            in_args = keyword not in kwargs and len(args) > position
            found = _traced_function(args[position] if in_args else kwargs.get(keyword), kind)
            if found is not None:
                if not _tracing():
                    found[1]["calls"] += 1
                if in_args:
                    args = args[:position] + (found[0],) + args[position + 1:]
                else:
                    kwargs = dict(kwargs, **{keyword: found[0]})
        except Exception as err:
            probe_error("jax_trace_body", err)
        return original(*args, **kwargs)

    return primitive


def install_trace(jax):
    """Count traces and calls of jitted / pmapped user functions; watch what their traces change."""
    if not callable(getattr(jax, "jit", None)):
        return  # not JAX's package (a stand-in module of the same name)
    try:
        from jax._src import core
        _T.clean = core.trace_state_clean
    except Exception as err:  # an older or newer JAX: fall back to the jitted functions being traced
        probe_error("jax_trace_state", err)
    jax.jit = _wrap_compile(jax.jit, "jit")
    jax.pmap = _wrap_compile(jax.pmap, "pmap")
    for name, position, keyword in _BODY_PRIMITIVES:
        setattr(jax.lax, name, _wrap_body_primitive(getattr(jax.lax, name), name, position, keyword))
    before_stop.append(_summaries)


def install_print(jax):
    """Builtin `print` run while JAX traces; `jax.debug.print` given a string holding a tracer."""
    if not callable(getattr(jax, "jit", None)):
        return  # not JAX's package (a stand-in module of the same name)
    original_print = builtins.print

    def print(*args, **kwargs):  # noqa: A001 - replaces the builtin, same behaviour
        try:
            if _tracing():
                stack = _stack()
                rec = stack[0] if stack else None  # the outermost: a jitted function, or an eager scan's body
                sep = kwargs.get("sep", " ")
                text = (" " if sep is None else str(sep)).join(safe_str(a) for a in args)
                emit({"type": "jax_trace_print", "function": rec["name"] if rec else None,
                      "def_file": rec["file"] if rec else None, "def_line": rec["line"] if rec else None,
                      "text": text[:300]})
        except Exception as err:
            probe_error("jax_trace_print", err)
        return original_print(*args, **kwargs)

    print.__doc__ = original_print.__doc__
    print.__module__ = __name__
    print.__wrapped__ = original_print
    builtins.print = print

    original_debug_print = jax.debug.print

    @functools.wraps(original_debug_print)
    def debug_print(fmt, *args, **kwargs):
        try:
            if isinstance(fmt, str) and _TRACER_TEXT in fmt and _tracing():
                stack = _stack()
                rec = stack[0] if stack else None
                emit({"type": "jax_debug_print_tracer", "function": rec["name"] if rec else None,
                      "text": fmt[:300]})
        except Exception as err:
            probe_error("jax_debug_print", err)
        return original_debug_print(fmt, *args, **kwargs)

    jax.debug.print = debug_print


def _profile(frame, event, arg):
    """While tracing: `append`/`extend` on a list, called from the user's code, that is not a
    local of the calling function (a module's list, `self.x`, a closure's)."""
    if event != "c_call" or getattr(arg, "__name__", None) not in _MUTATORS:
        return
    target = getattr(arg, "__self__", None)
    if not isinstance(target, list):
        return
    try:
        where = user_location(frame.f_code.co_filename, frame.f_lineno)
        if where is None:
            return
        code = frame.f_code
        local = frame.f_locals
        if any(local.get(name) is target for name in code.co_varnames + code.co_cellvars):
            return  # built (or passed in) and consumed inside the trace
        stack = _stack()
        seen = _T.mutations.get(where)
        if seen is None:
            seen = _T.mutations[where] = {"method": arg.__name__, "times": 0, "record": stack[0] if stack else None}
        seen["times"] += 1
    except Exception as err:
        probe_error("jax_trace_mutation", err)


def _summaries():
    for rec in list(_T.records.values()):
        emit({"type": "jax_function", "function": rec["name"], "kind": rec["kind"], "file": rec["file"],
              "line": rec["line"], "traces": rec["traces"], "calls": rec["calls"]}, site=False)
        for name, times in rec["changed"].items():
            emit({"type": "jax_trace_mutation", "kind": "global", "target": name, "times": times,
                  "function": rec["name"], "traces": rec["traces"], "calls": rec["calls"],
                  "file": rec["file"], "line": rec["line"]}, site=False)
    for (file, line), seen in list(_T.mutations.items()):
        rec = seen["record"]
        emit({"type": "jax_trace_mutation", "kind": "list", "target": seen["method"], "times": seen["times"],
              "function": rec["name"] if rec else None, "traces": rec["traces"] if rec else None,
              "calls": rec["calls"] if rec else None, "file": file, "line": line}, site=False)
