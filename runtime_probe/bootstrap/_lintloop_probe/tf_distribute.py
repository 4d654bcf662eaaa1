"""TensorFlow distribution: the strategy and its replica count (`strategy`), per-replica
values of an eager `strategy.run` (`replica_values`), and `tf.reduce_mean` applied inside
a replica context to the output of a loss built with reduction "none"
(`per_replica_mean`; the Keras hooks record those outputs with `remember_loss_output`).
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
