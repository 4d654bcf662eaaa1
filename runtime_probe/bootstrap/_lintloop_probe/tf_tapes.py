"""TensorFlow persistent tapes (LL304): when a persistent `GradientTape` starts recording in eager
code, how many persistent tapes entered at the same user line earlier, and done recording, are
still alive?  In a loop without `del tape`, the previous step's tape (and every tensor it
recorded) is alive until the `with ... as tape:` rebinding after `__enter__`: 1 at every entry
after the first; with `del tape`, 0.

Tapes are tracked with weak references (the count keeps nothing alive); the cost is a few list
operations per persistent-tape entry.  Tapes that the probe itself made persistent (`tf_amp`'s
reference gradients) are skipped.  One `persistent_tape` event per site at the stop: entries,
entries that found an earlier tape alive, and the first such entry.
"""
import functools
import weakref

from .events import emit, probe_error
from .frames import user_site
from .state import at_fork_in_child
from .steps import before_stop
from .tf_function import eager

# Set on a tape that the probe made persistent (tf_amp): not the program's own persistent tape.
FORCED = "_lintloop_probe_forced"
_SITES = {}        # (file, line) -> {"tapes": [weakref], "entries", "previous_alive", "first_step"}
_DONE = weakref.WeakSet()   # tapes whose `with` block has exited


def install(tf):
    from tensorflow.python.eager import backprop

    cls = backprop.GradientTape
    original_enter = cls.__enter__
    original_exit = cls.__exit__

    @functools.wraps(original_enter)
    def __enter__(self):
        try:
            if getattr(self, "_persistent", False) and not getattr(self, FORCED, False) and eager():
                _entered(self, user_site(2))
        except Exception as err:
            probe_error("tf_tapes_enter", err)
        return original_enter(self)

    @functools.wraps(original_exit)
    def __exit__(self, *exc):
        try:
            return original_exit(self, *exc)
        finally:
            try:
                _DONE.add(self)
            except Exception as err:
                probe_error("tf_tapes_exit", err)

    cls.__enter__ = __enter__
    cls.__exit__ = __exit__
    before_stop.append(_summaries)
    at_fork_in_child(_SITES.clear)


def _entered(tape, site):
    record = _SITES.get(site)
    if record is None:
        record = _SITES[site] = {"tapes": [], "entries": 0, "previous_alive": 0, "first_entry": None}
    alive = []
    for ref in record["tapes"]:
        earlier = ref()
        if earlier is not None and earlier is not tape:
            alive.append(earlier)
    record["tapes"] = [weakref.ref(t) for t in alive] + [weakref.ref(tape)]
    record["entries"] += 1
    if any(t in _DONE for t in alive):
        record["previous_alive"] += 1
        if record["first_entry"] is None:
            record["first_entry"] = record["entries"]
    del alive


def _summaries():
    for (file, line), record in list(_SITES.items()):
        emit({"type": "persistent_tape", "file": file, "line": line, "entries": record["entries"],
              "previous_alive": record["previous_alive"], "first_entry": record["first_entry"]}, site=False)
