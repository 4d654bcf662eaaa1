"""TensorFlow summaries: TF 2 summary ops (`tf.summary.scalar/histogram/image/text/audio`
all end in `tf.summary.write`) that run with no default writer write nothing and return
False.  Counted per user call site (`summary_no_writer` at the first, `summary_writes` per
site at the stop); calls with a writer are counted too, without a site.
"""
import functools
import sys

from .events import emit, probe_error
from .frames import user_site
from .state import at_fork_in_child
from .steps import before_stop

_SITES = {}          # (file, line) -> calls without a default writer there
_written = [0]       # calls with a default writer


def _reset():
    _SITES.clear()
    _written[0] = 0


def install(tf):
    from tensorflow.python.ops import summary_ops_v2

    at_fork_in_child(_reset)
    before_stop.append(_summaries)
    state = summary_ops_v2._summary_state
    wrapped = {}
    for name in ("write", "write_raw_pb"):
        original = getattr(summary_ops_v2, name)
        wrapped[id(original)] = _wrap(original, state, name)
        setattr(summary_ops_v2, name, wrapped[id(original)])
    # Other modules hold their own references: `tf.summary.write` (what TensorBoard's `scalar`,
    # `histogram` ... call), `tf.compat.v2.summary.write`.  Modules imported later import the wrapper.
    for module_name, module in list(sys.modules.items()):
        if module is None or not module_name.startswith(("tensorflow", "tensorboard")):
            continue
        for attr in ("write", "write_raw_pb"):
            replacement = wrapped.get(id(getattr(module, attr, None)))
            if replacement is not None:
                setattr(module, attr, replacement)


def _wrap(original, state, name):
    @functools.wraps(original)
    def write(*args, **kwargs):
        try:
            if state.writer is None:
                site = user_site(2)
                count = _SITES.get(site, 0)
                _SITES[site] = count + 1
                if count == 0:
                    tag = args[0] if args else kwargs.get("tag", kwargs.get("tensor"))
                    emit({"type": "summary_no_writer", "op": name, "tag": str(tag)[:80],
                          "file": site[0], "line": site[1]})
            else:
                _written[0] += 1
        except Exception as err:
            probe_error("summary_write", err)
        return original(*args, **kwargs)

    return write


def _summaries():
    if not _SITES and not _written[0]:
        return
    emit({"type": "summary_writes", "written": _written[0],
          "without_writer": [{"file": f, "line": ln, "calls": n} for (f, ln), n in _SITES.items()]},
         site=False)
