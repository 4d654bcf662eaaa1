"""optax: does the optimizer state (and do the parameters) advance from one update to the next; JAX
training steps.  Installed when `optax` is imported (it imports jax first).

Every `GradientTransformation` built after the import gets its `update` wrapped (the NamedTuple's
`__new__` is patched), and `optax.apply_updates` is replaced by a wrapper.  Only calls from outside
optax are watched (a `chain`'s inner updates are not): at each such call site the probe takes a
digest of the state passed in and of the state returned (one sum per leaf, the `count` leaves kept
exactly) and, for `apply_updates`, of the parameters passed in and of the updates.  Eager calls are
digested directly; calls while JAX traces (a jitted step) get a `jax.debug.callback` that receives
the digests on every run of the compiled step.  Digests are taken on each site's first 12 calls,
then every 10th.  At the stop, one `jax_opt_state` event per `update` site and one `jax_params`
event per `apply_updates` site summarise what was seen (calls, distinct input digests, whether the
state returned differed from the one passed in, the `count` values passed in).

Cost: eager digests are numpy sums on the host, on the sampled calls only.  A compiled step's
callbacks run on every execution (XLA cannot sample): measured on CPU, a `jax.debug.callback` costs
0.25-0.5 ms per step (an 80 us Adam step took 0.8 ms with the two digests), which is affordable for
the probe's capped runs and not for production.

A training step is counted per call at the first `update` site seen (`steps.count_step("jax_update",
"jax")`): one step per iteration even with two optimizers.  From a compiled step the count runs in
the callback, where the step cap cannot raise: it sets `S.stop_pending`, acted on at the next eager
call of a wrapped function (and by the watchdog otherwise).
"""
import functools
import os
import sys

from . import steps
from .events import emit, probe_error
from .frames import user_site
from .imports import framework_event
from .state import S, at_fork_in_child

_FIRST_CHECKED = 12
_CHECK_EVERY = 10


class _Sites:
    def __init__(self):
        self.reset()

    def reset(self):
        self.updates = {}   # (file, line) -> record
        self.applies = {}
        self.primary = None


_SITES = _Sites()
_J = {}  # jax, numpy, the optax directory, the jitted digest


def install(optax):
    import jax
    import jax.numpy as jnp
    import numpy as np

    base = sys.modules["optax._src.base"]
    _J.update(jax=jax, np=np, optax_dir=os.path.dirname(os.path.abspath(optax.__file__)) + os.sep)
    # Inside a trace the sums are ops of the user's own computation; eager values are summed by numpy
    # on the host, so the probe compiles nothing of its own (compile counts stay the program's).
    _J["sums"] = lambda tree: [jnp.sum(jnp.asarray(leaf, jnp.float32)) for leaf in jax.tree_util.tree_leaves(tree)]
    _J["abs_sum"] = lambda tree: sum(jnp.sum(jnp.abs(jnp.asarray(leaf, jnp.float32)))
                                     for leaf in jax.tree_util.tree_leaves(tree))
    _J["digest"] = lambda tree: np.array([np.asarray(leaf, np.float64).sum()
                                          for leaf in jax.tree_util.tree_leaves(tree)])
    _J["abs_digest"] = lambda tree: np.array([np.abs(np.asarray(leaf, np.float64)).sum()
                                              for leaf in jax.tree_util.tree_leaves(tree)])
    at_fork_in_child(_SITES.reset)
    original_new = base.GradientTransformation.__new__

    def new(cls, *args, **kwargs):
        try:
            if len(args) >= 2:
                args = (args[0], _wrap_update(args[1])) + tuple(args[2:])
            elif "update" in kwargs:
                kwargs["update"] = _wrap_update(kwargs["update"])
        except Exception as err:
            probe_error("jax_optax:new", err)
        return original_new(cls, *args, **kwargs)

    base.GradientTransformation.__new__ = new
    apply_module = sys.modules["optax._src.update"]
    wrapped_apply = _wrap_apply(apply_module.apply_updates)
    optax.apply_updates = wrapped_apply
    steps.before_stop.append(_summarise)
    framework_event("optax", optax, ["GradientTransformation.update", "apply_updates"])


def _from_optax(depth=2):
    """Is the caller (of the wrapper) optax's own code (a chain calling its parts)?"""
    try:
        return sys._getframe(depth).f_code.co_filename.startswith(_J["optax_dir"])
    except Exception:
        return False


def _wrap_update(update):
    if getattr(update, "_lintloop_update", False) or not callable(update):
        return update

    @functools.wraps(update)
    def wrapped(*args, **kwargs):
        if _from_optax():
            return update(*args, **kwargs)
        steps.stop_if_pending()
        result = update(*args, **kwargs)
        try:
            grads = args[0] if args else kwargs.get("updates")
            state = args[1] if len(args) > 1 else kwargs.get("state")
            _observe_update(grads, state, result)
        except Exception as err:
            probe_error("jax_optax:update", err)
        return result

    wrapped._lintloop_update = True
    return wrapped


def _wrap_apply(apply_updates):
    @functools.wraps(apply_updates)
    def wrapped(*args, **kwargs):
        if _from_optax():
            return apply_updates(*args, **kwargs)
        steps.stop_if_pending()
        result = apply_updates(*args, **kwargs)
        try:
            params = args[0] if args else kwargs.get("params")
            updates = args[1] if len(args) > 1 else kwargs.get("updates")
            _observe_apply(params, updates)
        except Exception as err:
            probe_error("jax_optax:apply_updates", err)
        return result

    wrapped._lintloop_apply = True
    return wrapped


def _traced(tree):
    Tracer = _J["jax"].core.Tracer
    return any(isinstance(leaf, Tracer) for leaf in _J["jax"].tree_util.tree_leaves(tree))


def _site_record(table, kind):
    file, line = user_site(3)
    key = (file, line)
    record = table.get(key)
    if record is None:
        record = table[key] = {"file": file, "line": line, "kind": kind, "calls": 0, "checked": 0,
                               "inputs": set(), "advanced": False, "counts": set(), "nonzero_updates": False,
                               "traced": False, "count_leaves": None}
    return record


def _should_check(record):
    record["calls"] += 1
    n = record["calls"]
    return n <= _FIRST_CHECKED or n % _CHECK_EVERY == 0


def _observe_update(grads, state, result):
    record = _site_record(_SITES.updates, "update")
    if record["count_leaves"] is None:
        jax = _J["jax"]
        paths = jax.tree_util.tree_flatten_with_path(state)[0]
        record["count_leaves"] = [i for i, (path, _) in enumerate(paths)
                                  if jax.tree_util.keystr(path).endswith(".count")]
        record["leaves"] = len(paths)
    new_state = result[1] if isinstance(result, tuple) and len(result) == 2 else None
    # A stateless transform has nothing to lose, but its calls still count the steps.
    watched = bool(record["leaves"]) and new_state is not None
    if _SITES.primary is None:
        _SITES.primary = record
    primary = _SITES.primary is record
    if not (watched or primary):
        return
    if _traced(grads) or _traced(state) or _traced(new_state):
        record["traced"] = True
        jnp = _J["jax"].numpy
        digests = (jnp.stack(_J["sums"](state)), jnp.stack(_J["sums"](new_state))) if watched else ()
        _J["jax"].debug.callback(functools.partial(_update_ran, record, primary, watched), *digests)
        return
    _update_ran(record, primary, watched, None, None, state, new_state)


def _update_ran(record, primary, watched, state_digest=None, new_digest=None, state=None, new_state=None):
    """One run of an update (eager, or a compiled step's callback with the digests)."""
    try:
        if _should_check(record) and watched:
            if state_digest is None:
                state_digest, new_digest = _J["digest"](state), _J["digest"](new_state)
            before = tuple(float(v) for v in _J["np"].asarray(state_digest).reshape(-1))
            after = tuple(float(v) for v in _J["np"].asarray(new_digest).reshape(-1))
            record["checked"] += 1
            record["inputs"].add(before)
            record["advanced"] = record["advanced"] or before != after
            for i in record["count_leaves"]:
                if i < len(before) and len(record["counts"]) < 8:
                    record["counts"].add(int(before[i]))
    except Exception as err:
        probe_error("jax_optax:digest", err)
    if primary:
        if record["traced"]:
            if S.stopped:
                return  # past the cap: count_step would raise, inside XLA's callback
            S.fn_depth += 1  # inside XLA's callback: the cap must not raise here
            try:
                steps.count_step("jax_update", "jax")
            finally:
                S.fn_depth -= 1
        else:
            steps.count_step("jax_update", "jax")


def _observe_apply(params, updates):
    record = _site_record(_SITES.applies, "apply_updates")
    if _traced(params) or _traced(updates):
        record["traced"] = True
        jnp = _J["jax"].numpy
        sums = _J["sums"](params)
        _J["jax"].debug.callback(functools.partial(_apply_ran, record), jnp.stack(sums) if sums else jnp.zeros((0,)),
                                 jnp.asarray(_J["abs_sum"](updates), jnp.float32))
        return
    _apply_ran(record, None, None, params, updates)


def _apply_ran(record, params_digest, updates_size, params=None, updates=None):
    try:
        if _should_check(record):
            if params_digest is None:
                params_digest, updates_size = _J["digest"](params), _J["abs_digest"](updates)
            record["checked"] += 1
            record["inputs"].add(tuple(float(v) for v in _J["np"].asarray(params_digest).reshape(-1)))
            record["nonzero_updates"] = record["nonzero_updates"] or float(_J["np"].asarray(updates_size).sum()) > 0
    except Exception as err:
        probe_error("jax_optax:digest", err)


def _summarise():
    """At the stop: what each watched call site saw."""
    for record in list(_SITES.updates.values()):
        if record["calls"] and record["leaves"]:
            emit({"type": "jax_opt_state", "file": record["file"], "line": record["line"], "calls": record["calls"],
                  "checked": record["checked"], "distinct_inputs": len(record["inputs"]),
                  "advanced": record["advanced"], "counts": sorted(record["counts"]),
                  "count_leaves": len(record["count_leaves"] or ()), "traced": record["traced"]}, site=False)
    for record in list(_SITES.applies.values()):
        if record["calls"]:
            emit({"type": "jax_params", "file": record["file"], "line": record["line"], "calls": record["calls"],
                  "checked": record["checked"], "distinct_inputs": len(record["inputs"]),
                  "nonzero_updates": record["nonzero_updates"], "traced": record["traced"]}, site=False)
