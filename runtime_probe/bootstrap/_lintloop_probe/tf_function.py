"""TensorFlow's `tf.function`: per definition site, traces versus calls (`trace` events and
`tf_function` summaries at the stop, with how many Function objects traced for the first
time), `print` run while tracing (`trace_print`), lists outside a function mutated while
tracing it (`trace_mutation`), `check_numerics` that saw a NaN/Inf under XLA and raised
nothing (`check_numerics_bypassed`), and the call of a function whose trace computed
gradients counted as a step.  Also whether code runs eagerly, which the other TensorFlow /
Keras hooks ask.
"""
import builtins
import functools
import sys
import threading

from .events import emit, probe_error, safe_str
from .frames import user_location, user_site
from .state import S, at_fork_in_child
from .steps import before_stop, count_step, raise_stop


class _Functions:
    """Records of tf.functions by definition site, and the outermost one being called."""

    def __init__(self):
        self.executing_eagerly = None
        self.training = False      # some tf.function's trace computed gradients
        self.reset()

    def reset(self):
        self.records = {}          # definition site -> record
        self.current = None        # record of the outermost tf.function being called
        self.mutations = {}        # (file, line) of a list mutation seen while tracing -> its record
        self.checks = {}           # check_numerics traced under XLA: (file, line, message) -> its flag
        self.profiled = 0          # outermost traces watched for unconverted list mutations
        self.local = threading.local()  # .xla: XLA-compiled functions on this thread's call stack


def _xla_depth():
    return getattr(_F.local, "xla", 0)


def _enter(function):
    """A tf.function call starts (eager or while tracing another): is it XLA-compiled?"""
    xla = bool(getattr(function, "_jit_compile", False))
    if xla:
        _F.local.xla = _xla_depth() + 1
    return xla


def _leave(xla):
    if xla:
        _F.local.xla = _xla_depth() - 1


_F = _Functions()


def eager():
    """Is TensorFlow executing eagerly here?  (True before TensorFlow is imported.)"""
    fn = _F.executing_eagerly
    if fn is None:
        ctx = sys.modules.get("tensorflow.python.eager.context")
        if ctx is None:
            return True
        fn = _F.executing_eagerly = ctx.executing_eagerly
    return fn()


def mark_training():
    """Gradients are computed in the trace of the tf.function being called."""
    rec = _F.current
    if rec is not None:
        rec["trains"] = True


def install_context():
    from tensorflow.python.eager import context

    _F.executing_eagerly = context.executing_eagerly


def _record(function):
    """Per definition site of the Python function behind a tf.function."""
    py = getattr(function, "_python_function", None) or getattr(function, "python_function", None)
    for _ in range(10):  # decorators (autograph's do_not_convert, functools.wraps ...)
        inner = getattr(py, "__wrapped__", None)
        if inner is None or inner is py:
            break
        py = inner
    code = getattr(py, "__code__", None)
    if code is not None:
        key = (code.co_filename, code.co_firstlineno, code.co_name)
        loc = user_location(code.co_filename, code.co_firstlineno)
        file, line = loc if loc else (code.co_filename, code.co_firstlineno)
        name = getattr(py, "__qualname__", code.co_name)
    else:
        name = getattr(function, "_name", None) or getattr(function, "__name__", "function")
        key = ("?", name)
        file = line = None
    rec = _F.records.get(key)
    if rec is None:
        rec = _F.records[key] = {"name": name, "file": file, "line": line, "traces": 0,
                                 "calls": 0, "instances": set(), "new_instances": 0, "trains": False,
                                 "checks": []}
    rec["instances"].add(id(function))
    return rec


def _describe_args(args, kwargs):
    parts = []
    try:
        for value in list(args) + list(kwargs.values()):
            shape = getattr(value, "shape", None)
            dtype = getattr(value, "dtype", None)
            if shape is not None and dtype is not None:
                try:
                    dims = list(shape)
                except Exception:  # unknown rank
                    dims = "[?]"
                parts.append(f"{getattr(dtype, 'name', dtype)}{dims}")
            elif isinstance(value, (int, float, bool, str)) or value is None:
                parts.append(repr(value)[:40])
            else:
                parts.append(type(value).__name__)
            if len(parts) >= 8:
                parts.append("...")
                break
    except Exception:
        pass
    return parts


def install_function(tf):
    from tensorflow.python.eager.polymorphic_function import polymorphic_function as pf

    at_fork_in_child(_F.reset)
    before_stop.append(_summaries)
    Function = pf.Function
    original_call = Function.__call__

    @functools.wraps(original_call)
    def __call__(self, *args, **kwargs):
        try:
            outer = S.fn_depth == 0 and eager()
        except Exception:
            outer = False
        if not outer:
            S.fn_depth += 1
            xla = _enter(self)
            try:
                return original_call(self, *args, **kwargs)
            finally:
                S.fn_depth -= 1
                _leave(xla)
        try:
            rec = _record(self)
            before = self.experimental_get_tracing_count()
        except Exception as err:
            probe_error("tf_function_record", err)
            return original_call(self, *args, **kwargs)
        steps_before = S.steps
        S.fn_depth += 1
        _F.current = rec
        xla = _enter(self)
        try:
            result = original_call(self, *args, **kwargs)
        finally:
            S.fn_depth -= 1
            _F.current = None
            _leave(xla)
            try:
                rec["calls"] += 1
                after = self.experimental_get_tracing_count()
                if after != before:
                    rec["traces"] += after - before
                    if before == 0:
                        rec["new_instances"] += 1
                    emit({"type": "trace", "function": rec["name"], "traces": rec["traces"],
                          "call": rec["calls"], "args": _describe_args(args, kwargs),
                          "def_file": rec["file"], "def_line": rec["line"]})
            except Exception as err:
                probe_error("tf_function_trace", err)
            if S.stop_pending:
                S.stop_pending = False
                raise_stop()
        if rec["checks"]:
            _read_checks(rec)
        if rec["trains"]:
            _F.training = True
        if S.steps == steps_before and (
                rec["trains"] or (not _F.training and set(S.kinds) <= {"tf_function_call"})):
            count_step("tf_function_call", "tf",
                       {"function": rec["name"]} if rec["trains"] else
                       {"function": rec["name"], "fallback": True})
        return result

    Function.__call__ = __call__


def install_print(tf):
    original_print = builtins.print
    ops = sys.modules.get("tensorflow.python.framework.ops")

    def print(*args, **kwargs):  # noqa: A001 - replaces the builtin, same behaviour
        try:
            if not eager():
                rec = _F.current
                name = rec["name"] if rec is not None else None
                if name is None and ops is not None:
                    name = getattr(ops.get_default_graph(), "name", None)
                sep = kwargs.get("sep", " ")
                sep = " " if sep is None else sep
                text = sep.join(safe_str(a) for a in args)
                emit({"type": "trace_print", "function": name, "text": text[:300]})
        except Exception as err:
            probe_error("trace_print", err)
        return original_print(*args, **kwargs)

    print.__doc__ = original_print.__doc__
    print.__module__ = __name__
    print.__wrapped__ = original_print
    builtins.print = print


def _summaries():
    for rec in list(_F.records.values()):
        emit({"type": "tf_function", "function": rec["name"], "file": rec["file"],
              "line": rec["line"], "traces": rec["traces"], "calls": rec["calls"],
              "instances": len(rec["instances"]), "new_instances": rec["new_instances"],
              "trains": rec["trains"]}, site=False)
    for (file, line), seen in list(_F.mutations.items()):
        rec = seen["record"]
        emit({"type": "trace_mutation", "function": rec["name"] if rec else None, "method": seen["method"],
              "times": seen["times"], "traces": rec["traces"] if rec else None,
              "calls": rec["calls"] if rec else None, "file": file, "line": line}, site=False)


# ----- lists mutated while tracing (LL202) ------------------------------------------------------
_MUTATORS = ("append", "extend")
# The profile function doubles the time of a trace (measured: +60-80 ms on a ~60-170 ms trace of a
# small Keras train step); a program's mutation sites show in its first traces, so only the first
# outermost traces are watched (a program that retraces every step is not slowed throughout).
PROFILED_TRACES = 25


def install_trace_mutations(tf):
    """An `append`/`extend` run while tracing a tf.function, on a list that is not a local of
    the traced function (a module's list, `self.x`), runs once per trace, not per call.  Code
    that autograph converted routes each call through `converted_call` (its generated `ag__`
    namespace copies this module's `converted_call` on first use, after this hook); code traced
    unconverted (`autograph=False`, Keras 3's `train_step`) is watched with a profile function,
    set only while a graph is built from Python (`func_graph_from_py_func`).  `+=` on a global
    is not seen."""
    from tensorflow.python.autograph.impl import api as ag_api
    from tensorflow.python.framework import func_graph

    original_converted_call = ag_api.converted_call

    @functools.wraps(original_converted_call)
    def converted_call(f, args, kwargs, caller_fn_scope=None, options=None):
        if getattr(f, "__name__", None) in _MUTATORS and isinstance(getattr(f, "__self__", None), list):
            _safe_mutation(f.__self__, f.__name__, sys._getframe(1))
        return original_converted_call(f, args, kwargs, caller_fn_scope, options)

    ag_api.converted_call = converted_call

    original_trace = func_graph.func_graph_from_py_func

    @functools.wraps(original_trace)
    def func_graph_from_py_func(*args, **kwargs):
        local = _F.local
        depth = getattr(local, "tracing", 0)
        watch = depth == 0 and _F.profiled < PROFILED_TRACES
        if watch:
            _F.profiled += 1
            local.previous_profile = sys.getprofile()
            sys.setprofile(_profile)
        local.tracing = depth + 1
        try:
            return original_trace(*args, **kwargs)
        finally:
            local.tracing = depth
            if watch:
                sys.setprofile(local.previous_profile)

    func_graph.func_graph_from_py_func = func_graph_from_py_func


def _profile(frame, event, arg):
    """While tracing: `append`/`extend` of a list called from the user's own code — a builtin
    method (`c_call`), or a list subclass's own (`call`: Keras tracks `self.x = []` as a
    `TrackedList`)."""
    if event == "c_call":
        if getattr(arg, "__name__", None) in _MUTATORS and isinstance(getattr(arg, "__self__", None), list) \
                and user_location(frame.f_code.co_filename, frame.f_lineno) is not None:
            _safe_mutation(arg.__self__, arg.__name__, frame)
    elif event == "call" and frame.f_code.co_name in _MUTATORS:
        caller = frame.f_back
        target = frame.f_locals.get("self")
        if caller is not None and isinstance(target, list) \
                and user_location(caller.f_code.co_filename, caller.f_lineno) is not None:
            _safe_mutation(target, frame.f_code.co_name, caller)


def _safe_mutation(target, method, frame):
    try:
        _mutation(target, method, frame)
    except Exception as err:
        probe_error("trace_mutation", err)


def _is_local(target, frame):
    """Is `target` a local of the function running in `frame`?  Autograph runs a converted loop's
    body as a nested function of the converted one (`tf__<name>`): its locals are that function's."""
    while frame is not None:
        code = frame.f_code
        local = frame.f_locals
        if any(local.get(name) is target for name in code.co_varnames + code.co_cellvars):
            return True
        if "__autograph_generated_file" not in code.co_filename or code.co_name.startswith("tf__"):
            return False
        frame = frame.f_back
        while frame is not None and "__autograph_generated_file" not in frame.f_code.co_filename:
            frame = frame.f_back  # autograph's own loop / cond machinery in between
    return False


def _mutation(target, method, frame):
    code = frame.f_code
    if _is_local(target, frame):
        return  # a list local to the traced function (or passed in): built and consumed in the trace
    where = user_location(code.co_filename, frame.f_lineno)
    if where is None:
        return
    seen = _F.mutations.get(where)
    if seen is None:
        seen = _F.mutations[where] = {"method": method, "times": 0, "record": _F.current}
    seen["times"] += 1


# ----- check_numerics under XLA (LL803) ---------------------------------------------------------
# Where TensorFlow binds the op: the public names are re-exports of these.
_CHECK_NUMERICS_SITES = (("tensorflow.python.ops.gen_array_ops", "check_numerics"),
                         ("tensorflow.python.ops.array_ops", "check_numerics"))
_CHECK_NUMERICS_API = ("debugging", "compat.v1", "compat.v1.debugging")


def install_check_numerics(tf):
    """While a check_numerics is traced inside an XLA-compiled function, also store whether its
    input was all finite in a probe variable (a graph op beside the check: the user's graph
    computes what it did).  After each call of the outermost function, a variable that says
    "not finite" while the call returned normally proves that the check saw a NaN/Inf and
    raised nothing (`check_numerics_bypassed`)."""
    import importlib

    for module_name, attr in _CHECK_NUMERICS_SITES:
        module = importlib.import_module(module_name)
        original = getattr(module, attr)
        wrapper = _check_numerics_wrapper(tf, original)
        setattr(module, attr, wrapper)
        for api in _CHECK_NUMERICS_API:
            namespace = tf
            for part in api.split("."):
                namespace = getattr(namespace, part, None)
            if namespace is not None and getattr(namespace, attr, None) is original:
                setattr(namespace, attr, wrapper)


def _check_numerics_wrapper(tf, original):
    @functools.wraps(original)
    def check_numerics(tensor, message, name=None):
        result = original(tensor, message, name=name)
        if _xla_depth() and _F.current is not None and not eager():
            try:
                _watch_check(tf, tensor, message)
            except Exception as err:
                probe_error("check_numerics", err)
        return result

    return check_numerics


def _watch_check(tf, tensor, message):
    if tf.distribute.has_strategy():
        return  # a variable assigned in a replica context needs an aggregation: stay out
    file, line = user_site(3)
    key = (file, line, str(message)[:200])
    # One flag per check site, made on its first trace: TensorFlow lets a tf.function create
    # variables only then (a retrace reuses it).
    check = _F.checks.get(key)
    if check is None:
        with tf.init_scope():
            flag = tf.Variable(True, trainable=False, name="lintloop_probe_finite")
        check = _F.checks[key] = {"flag": flag, "message": key[2], "file": file, "line": line, "reported": False}
    check["flag"].assign(tf.reduce_all(tf.math.is_finite(tensor)))
    if not any(c is check for c in _F.current["checks"]):
        _F.current["checks"].append(check)


def _read_checks(rec):
    for check in rec["checks"]:
        if check["reported"]:
            continue
        try:
            finite = bool(check["flag"].numpy())
        except Exception as err:
            probe_error("check_numerics_read", err)
            check["reported"] = True
            continue
        if not finite:
            check["reported"] = True
            emit({"type": "check_numerics_bypassed", "function": rec["name"], "call": rec["calls"],
                  "step": S.steps + (1 if rec["trains"] else 0), "message": check["message"], "file": check["file"], "line": check["line"]})
