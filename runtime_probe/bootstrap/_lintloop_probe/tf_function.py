"""TensorFlow's `tf.function`: per definition site, traces versus calls (`trace` events and
`tf_function` summaries at the stop), `print` run while tracing (`trace_print`), and the
call of a function whose trace computed gradients counted as a step.  Also whether code
runs eagerly, which the other TensorFlow / Keras hooks ask.
"""
import builtins
import functools
import sys

from .events import emit, probe_error, safe_str
from .frames import user_location
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
                                 "calls": 0, "instances": set(), "trains": False}
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
            try:
                return original_call(self, *args, **kwargs)
            finally:
                S.fn_depth -= 1
        try:
            rec = _record(self)
            before = self.experimental_get_tracing_count()
        except Exception as err:
            probe_error("tf_function_record", err)
            return original_call(self, *args, **kwargs)
        steps_before = S.steps
        S.fn_depth += 1
        _F.current = rec
        try:
            result = original_call(self, *args, **kwargs)
        finally:
            S.fn_depth -= 1
            _F.current = None
            try:
                rec["calls"] += 1
                after = self.experimental_get_tracing_count()
                if after != before:
                    rec["traces"] += after - before
                    emit({"type": "trace", "function": rec["name"], "traces": rec["traces"],
                          "call": rec["calls"], "args": _describe_args(args, kwargs),
                          "def_file": rec["file"], "def_line": rec["line"]})
            except Exception as err:
                probe_error("tf_function_trace", err)
            if S.stop_pending:
                S.stop_pending = False
                raise_stop()
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
              "instances": len(rec["instances"]), "trains": rec["trains"]}, site=False)
