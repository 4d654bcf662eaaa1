"""Training steps and the step cap: counting steps (with a memory sample every
`sample_every` steps), live-tensor counts at the configured steps, and ending the program
cleanly at the cap (SystemExit, with a watchdog for programs that do not end) or recording
how it ended (the `stop` event, also at exit).
"""
import os
import sys
import threading
import time

from .events import emit
from .grad_norms import memory_sampled
from .memory import count_live, cuda_peak, sample
from .state import S

_EAGER_RANK = {"tape_gradient": 1, "apply_gradients": 2, "optimizer_step": 2}

# Called before the `stop` event is written (summaries of what was seen).
before_stop = []


def eager_step(kind, fw, extra=None, on_cuda=False):
    """A step seen in eager code.  `tape.gradient` followed by `apply_gradients` in one
    iteration is one step: once a higher kind shows up, lower kinds stop counting, and the
    first higher-kind call (same iteration as the lower-kind step just counted) is not
    counted again."""
    rank = _EAGER_RANK[kind]
    if rank < S.eager_rank:
        return
    if rank > S.eager_rank:
        previous, S.eager_rank = S.eager_rank, rank
        if previous:
            return
    count_step(kind, fw, extra, on_cuda)


def count_step(kind, fw, extra=None, on_cuda=False):
    if S.stopped and S.cap and S.steps >= S.cap:  # the program swallowed our SystemExit
        raise_stop()
        return
    S.steps += 1
    n = S.steps
    S.kinds[kind] = S.kinds.get(kind, 0) + 1
    last = bool(S.cap) and n >= S.cap
    if memory_sampled(n):
        mem, source, host = sample(fw, on_cuda)
        ev = {"type": "step", "n": n, "kind": kind, "mem": mem, "mem_source": source}
        if host is not None:
            ev["host_mem"] = host
        if source == "cuda":
            ev["peak"] = cuda_peak()
        if extra:
            ev.update(extra)
        emit(ev)
    if last:
        count_live("last")
        _stop("step_limit")
    elif n in S.live_steps:
        count_live("warmup")


def _stop(reason):
    if S.stopped:
        return
    S.stopped = True
    for callback in before_stop:
        callback()
    ev = {"type": "stop", "reason": reason, "steps": S.steps, "kinds": dict(S.kinds),
          "checks": dict(S.checks)}
    emit(ev, site=(reason == "step_limit"))
    if reason != "step_limit":
        return
    _start_watchdog()
    if S.fn_depth > 0:   # inside a tf.function call or a framework hook: stop on the way out
        S.stop_pending = True
        return
    raise_stop()


def stop_if_pending():
    """Stop now if the step cap was reached inside a framework call, where it could not raise (a
    tf.function's Python body, an XLA host callback); call it on the way out of such calls."""
    if S.stop_pending and S.fn_depth == 0:
        S.stop_pending = False
        raise_stop()


def raise_stop():
    if threading.current_thread() is not threading.main_thread():
        _hard_exit()
    raise SystemExit(0)


def _hard_exit():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(0)


def _start_watchdog(delay=10.0):
    """If the program does not end within `delay` s of the step cap (non-daemon threads,
    a swallowed SystemExit), end it."""
    def watchdog():
        time.sleep(delay)
        emit({"type": "probe_error", "where": "watchdog",
              "message": f"program still running {delay:g}s after the step cap; exiting"},
             site=False)
        _hard_exit()

    try:
        threading.Thread(target=watchdog, name="lintloop-probe-watchdog", daemon=True).start()
    except Exception:
        pass


def at_exit():
    """Registered with atexit: the `stop` event of a program that ended by itself."""
    if not S.stopped:
        _stop("error" if S.uncaught else "exit")
