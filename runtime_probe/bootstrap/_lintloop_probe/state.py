"""Per-process state shared by the probe's modules: the configuration, the event file's
buffer and the step counters.

`init` fills it at start-up; in a forked child (DataLoader worker, fork-started Process)
the counters start again, so that each process counts its own steps.  Framework hooks keep
their own bookkeeping in their modules and reset it through `at_fork_in_child`.
"""
import os
import time


class State:
    """A namespace; `init` sets the attributes."""


S = State()


def init(cfg):
    S.t0 = time.perf_counter()
    S.cwd0 = os.getcwd()
    S.cap = int(cfg.get("steps") or 0)
    S.sample_every = max(1, int(cfg.get("sample_every") or 1))
    S.device = cfg.get("device") or "auto"
    S.live_steps = set(int(x) for x in cfg.get("live_steps", [10]))
    S.check_every = max(1, int(cfg.get("param_check_every") or 10))
    S.pid = os.getpid()
    S.fd = os.open(cfg["events"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    S.steps = 0
    S.kinds = {}
    S.eager_rank = 0           # highest eager step kind seen (tape_gradient < apply/step)
    S.stopped = False
    S.stop_pending = False
    S.fn_depth = 0             # depth of tf.function calls / eager step hooks
    S.uncaught = False
    S.probe_errors = set()
    S.none_seen = {}           # site -> last gradient counts emitted
    S.once = set()             # keys of events emitted once
    S.checks = {}              # gradient checks performed, by kind
    at_fork_in_child(_reset_in_child)


def _reset_in_child():
    S.steps = 0
    S.kinds = {}
    S.checks = {}
    S.eager_rank = 0
    S.stopped = S.stop_pending = S.uncaught = False
    S.fn_depth = 0
    S.t0 = time.perf_counter()


def at_fork_in_child(reset):
    """Call `reset` in every forked child of this process (where the platform forks)."""
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=reset)
