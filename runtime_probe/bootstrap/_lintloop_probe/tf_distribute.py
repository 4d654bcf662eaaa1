"""TensorFlow distribution: the strategy and its replica count (`strategy`), per-replica
values of an eager `strategy.run` (`replica_values`), and `tf.reduce_mean` applied inside
a replica context to the output of a loss built with reduction "none"
(`per_replica_mean`; the Keras hooks record those outputs with `remember_loss_output`).

`unmirrored_objects` (LL401): the Keras models, optimizers and `tf.Variable`s that the step
function given to `strategy.run` reaches (its arguments, closure, the globals it names, the
attributes of the object of a bound method) and that were not built under that strategy: a
Keras model records the strategy current at its construction (`_distribute_strategy`, None
outside any scope; tf_keras: `_distribution_strategy`), a Keras 3 optimizer likewise
(`_distribution_strategy`, the default strategy outside a scope), a variable is mirrored or not.
Seen before the step runs, so it names the cause even when the failure that follows is an
unrelated-looking graph error (a model whose variables are created lazily inside the step).
Checked on the first calls of each step function only (at trace time inside a `tf.function`).
"""
import functools
import sys
import weakref

from .events import emit, probe_error
from .frames import user_site
from .state import S
from .tf_function import eager

_LOSS_OUTPUTS = {}      # id(loss output with reduction none) -> (weakref|None, loss class)
_replica_value_events = 0
_CHECKED_STEPS = {}     # step function's code object -> times its reachable objects were checked
_CHECKS_PER_STEP = 2    # the objects a step uses are built once: the first calls show them


def remember_loss_output(output, loss_class):
    try:
        ref = weakref.ref(output)
    except TypeError:
        ref = None
    _LOSS_OUTPUTS[id(output)] = (ref, loss_class)
    if len(_LOSS_OUTPUTS) > 64:
        del _LOSS_OUTPUTS[next(iter(_LOSS_OUTPUTS))]


def install_strategy(tf):
    from tensorflow.python.distribute import distribute_lib

    cls = distribute_lib.StrategyBase
    original_run = cls.run

    @functools.wraps(original_run)
    def run(self, fn, args=(), kwargs=None, options=None):
        global _replica_value_events
        try:
            replicas = self.num_replicas_in_sync
            key = ("strategy", type(self).__name__, replicas)
            if key not in S.once and type(self).__name__ != "_DefaultDistributionStrategy":
                S.once.add(key)
                emit({"type": "strategy", "strategy": type(self).__name__,
                      "replicas": replicas})
            is_eager = eager()
            _check_reached_objects(self, fn, args, kwargs)
        except Exception as err:
            probe_error("strategy", err)
            is_eager = False
        result = original_run(self, fn, args=args, kwargs=kwargs, options=options)
        if is_eager and _replica_value_events < 20:
            try:
                values = self.experimental_local_results(result)
                floats = []
                for v in values:
                    if getattr(getattr(v, "shape", None), "rank", None) != 0:
                        floats = None
                        break
                    floats.append(float(v))
                if floats:
                    _replica_value_events += 1
                    emit({"type": "replica_values", "values": floats, "step": S.steps})
            except Exception as err:
                probe_error("replica_values", err)
        return result

    cls.run = run


def _reachable(fn, args, kwargs):
    """(name, object) pairs the step function can use, one level deep."""
    function = getattr(fn, "python_function", fn)  # a tf.function: its Python function
    owner = getattr(function, "__self__", None)
    function = getattr(function, "__func__", function)
    code = getattr(function, "__code__", None)
    found = []
    for i, value in enumerate(args or ()):
        found.extend((f"args[{i}]", v) for v in (value if isinstance(value, (tuple, list)) else (value,)))
    found.extend((f"kwargs[{k!r}]", v) for k, v in (kwargs or {}).items())
    if code is not None:
        for name, cell in zip(code.co_freevars, getattr(function, "__closure__", None) or ()):
            try:
                found.append((name, cell.cell_contents))
            except ValueError:  # an empty cell
                pass
        module_globals = getattr(function, "__globals__", {})
        found.extend((name, module_globals[name]) for name in code.co_names if name in module_globals)
    if owner is not None:
        found.extend((f"self.{name}", value) for name, value in list(vars(owner).items())[:64])
    return found


def _unmirrored(obj, strategy, distributed_values, tf_variable):
    """What `obj` is when it holds state the strategy does not mirror: "model", "optimizer",
    "variable", or None."""
    cls = type(obj)
    if isinstance(cls, type) and cls.__module__.startswith(("keras", "tf_keras", "tensorflow")):
        built_under = obj.__dict__.get("_distribute_strategy", _MISSING) if hasattr(obj, "__dict__") else _MISSING
        if built_under is not _MISSING:  # a Keras 3 model
            return "model" if built_under is not strategy else None
        built_under = obj.__dict__.get("_distribution_strategy", _MISSING) if hasattr(obj, "__dict__") else _MISSING
        if built_under is not _MISSING:  # a Keras 3 optimizer, a tf_keras model or optimizer
            kind = "optimizer" if "optimizer" in cls.__module__ else "model"
            return kind if built_under is not strategy else None
    if isinstance(obj, tf_variable) and not isinstance(obj, distributed_values):
        return "variable"
    return None


_MISSING = object()


def _check_reached_objects(strategy, fn, args, kwargs):
    if type(strategy).__name__ == "_DefaultDistributionStrategy":
        return
    function = getattr(getattr(fn, "python_function", fn), "__func__", getattr(fn, "python_function", fn))
    key = getattr(function, "__code__", None)
    if key is None or _CHECKED_STEPS.get(key, 0) >= _CHECKS_PER_STEP:
        return
    _CHECKED_STEPS[key] = _CHECKED_STEPS.get(key, 0) + 1
    import tensorflow as tf
    from tensorflow.python.distribute import values
    objects = []
    for name, obj in _reachable(fn, args, kwargs):
        kind = _unmirrored(obj, strategy, values.DistributedValues, tf.Variable)
        if kind is not None and all(o["id"] != id(obj) for o in objects):
            objects.append({"id": id(obj), "name": name, "kind": kind, "class": type(obj).__name__})
    if not objects:
        return
    site = user_site(3)
    event_key = ("unmirrored_objects", site, tuple(o["name"] for o in objects))
    if event_key in S.once:
        return
    S.once.add(event_key)
    emit({"type": "unmirrored_objects", "strategy": type(strategy).__name__,
          "step_function": getattr(function, "__name__", "?"),
          "objects": [{k: o[k] for k in ("name", "kind", "class")} for o in objects],
          "file": site[0], "line": site[1]})


def install_reduce_mean(tf):
    original = tf.reduce_mean
    distribute_lib = sys.modules["tensorflow.python.distribute.distribute_lib"]

    @functools.wraps(original)
    def reduce_mean(*args, **kwargs):
        if _LOSS_OUTPUTS:
            try:
                value = args[0] if args else kwargs.get("input_tensor")
                entry = _LOSS_OUTPUTS.get(id(value))
                if entry is not None and (entry[0] is None or entry[0]() is value):
                    ctx = distribute_lib.get_replica_context()
                    replicas = getattr(ctx, "num_replicas_in_sync", 1) if ctx is not None else 1
                    if replicas > 1:
                        site = user_site(2)
                        key = ("per_replica_mean", site)
                        if key not in S.once:
                            S.once.add(key)
                            emit({"type": "per_replica_mean", "replicas": replicas,
                                  "loss": entry[1], "reduction": "none",
                                  "file": site[0], "line": site[1]})
            except Exception as err:
                probe_error("reduce_mean", err)
        return original(*args, **kwargs)

    tf.reduce_mean = reduce_mean
    math = getattr(tf, "math", None)
    if math is not None and getattr(math, "reduce_mean", None) is original:
        math.reduce_mean = reduce_mean
