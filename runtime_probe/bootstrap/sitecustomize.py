"""lintloop runtime probe: the bootstrap that runs inside the probed program.

The runner (``lintloop.runtime_probe.runner``) puts this file's directory first on the
child's ``PYTHONPATH``, so the interpreter imports it as ``sitecustomize`` at start-up --
in the probed script's process and in every Python process that process spawns
(``torch.multiprocessing`` / DDP workers, ``multiprocessing`` spawn children).

It does nothing unless ``LINTLOOP_PROBE_CONFIG`` is set (JSON: ``events`` = path of a
JSON-lines file to append events to, ``steps`` = step cap, ``device``, ``sample_every``,
``live_steps``).  It never imports a framework itself: a ``sys.meta_path`` finder notices
when ``torch`` / ``tensorflow`` / ``keras`` / ``tf_keras`` / ``jax`` finish importing and
installs the matching hooks then, once.

Self-contained on purpose: standard library only, because ``--python`` may point at an
interpreter that has the frameworks but not lintloop.  Every hook is wrapped so that a
failure inside the probe is recorded (``probe_error``) and never changes what the user's
program does; exceptions raised by the user's code or the framework pass through
unchanged.  The event schema is documented in ``lintloop.runtime_probe.runner``.
"""
import os
import sys

_CONFIG_VAR = "LINTLOOP_PROBE_CONFIG"
_HERE = os.path.dirname(os.path.abspath(__file__))


def _chain_other_sitecustomize():
    """Run the ``sitecustomize`` that would have run without us (found after our dir)."""
    try:
        from importlib.machinery import PathFinder

        paths = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
        spec = PathFinder.find_spec("sitecustomize", paths)
        if spec is None or spec.loader is None:
            return
        if spec.origin and os.path.abspath(spec.origin) == os.path.abspath(__file__):
            return
        import importlib.util

        module = importlib.util.module_from_spec(spec)
        sys.modules["_lintloop_chained_sitecustomize"] = module
        spec.loader.exec_module(module)
    except Exception as exc:  # what site.py does for a failing sitecustomize
        sys.stderr.write(
            "Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
            f"{type(exc).__name__}: {exc}\n")


# Our directory must not stay visible to the user's program (it only exists to get us
# imported); children still find it through the inherited PYTHONPATH.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

if os.environ.get(_CONFIG_VAR):
    try:
        import json as _json
        import threading as _threading
        import time as _time

        _CFG = _json.loads(os.environ[_CONFIG_VAR])
    except Exception as _exc:  # a broken config must not break the program
        sys.stderr.write(f"lintloop probe: bad {_CONFIG_VAR}: {_exc}\n")
        _CFG = None
else:
    _CFG = None


# ---------------------------------------------------------------------------------------
# state, event writer
# ---------------------------------------------------------------------------------------

class _State:
    pass


_S = _State()


def _init_state(cfg):
    S = _S
    S.t0 = _time.perf_counter()
    S.cwd0 = os.getcwd()
    S.cap = int(cfg.get("steps") or 0)
    S.sample_every = max(1, int(cfg.get("sample_every") or 1))
    S.device = cfg.get("device") or "auto"
    S.live_steps = set(int(x) for x in cfg.get("live_steps", [10]))
    S.check_every = max(1, int(cfg.get("param_check_every") or 10))
    S.pid = os.getpid()
    S.fd = os.open(cfg["events"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    S.buf = []
    S.flushed = S.t0
    S.steps = 0
    S.kinds = {}
    S.eager_rank = 0           # highest eager step kind seen (tape_gradient < apply/step)
    S.stopped = False
    S.stop_pending = False
    S.fn_depth = 0             # depth of tf.function calls / eager step hooks
    S.fn_current = None        # record of the outermost tf.function being called
    S.fn_records = {}          # definition site -> record
    S.uncaught = False
    S.probe_errors = set()
    S.none_seen = {}           # site -> last (none, zero, total) emitted
    S.once = set()             # keys of events emitted once
    S.mem_fn = None
    S.tf_gpu = None
    S.tf_eager = None
    S.checks = {}              # gradient checks performed, by kind
    S.opt_last = {}            # torch: id(optimizer) -> sequence number of its last step
    S.opt_seq = 0
    S.opt_primary = None
    S.param_snapshot = None
    S.loss_outputs = {}        # id(loss output with reduction none) -> (weakref|None, class)
    S.replica_value_events = 0
    S.frameworks = set()
    S.training_fn = False      # some tf.function's trace computed gradients


_FILE_KIND = {}     # co_filename -> True (user) / False (not user) / None (autograph file)
_UNKNOWN = object()
_AG_MAP = {}        # (generated file, line) -> (original file, line)
_NONUSER_PREFIXES = []
_SELF_FILE = os.path.abspath(__file__)


def _json_default(obj):
    try:
        return float(obj)
    except Exception:
        return str(obj)


_FLUSH_LINES = 64
_FLUSH_S = 0.5


def _emit(ev, site=True, buffered=False):
    """Append one event as one JSON line.  Lines go out with one write(2) (atomic between
    processes appending to the same file).  `buffered` events (steps) are held back until
    64 lines or 0.5 s have gathered, or any other event is emitted; a kill loses at most
    that tail."""
    S = _S
    pid = os.getpid()
    if pid != S.pid:           # a forked child: announce it once; the buffer is the parent's
        S.pid = pid
        S.buf = []
        _emit({"type": "start", "forked": True, "ppid": os.getppid(), "argv": list(sys.argv)},
              site=False)
    now = _time.perf_counter()
    ev["pid"] = pid
    ev["t"] = round(now - S.t0, 6)
    if site and "file" not in ev:
        ev["file"], ev["line"] = _user_site(2)
    try:
        line = _json.dumps(ev, default=_json_default, separators=(",", ":")) + "\n"
    except Exception:
        return
    S.buf.append(line)
    if not buffered or len(S.buf) >= _FLUSH_LINES or now - S.flushed > _FLUSH_S:
        _flush(now)


def _flush(now=None):
    S = _S
    if not S.buf:
        return
    buf, S.buf = S.buf, []
    data = "".join(buf).encode("utf-8", "replace")
    S.flushed = _time.perf_counter() if now is None else now
    try:
        while data:
            written = os.write(S.fd, data)
            data = data[written:]
    except Exception:
        pass


def _probe_error(where, exc):
    if where in _S.probe_errors:
        return
    _S.probe_errors.add(where)
    _emit({"type": "probe_error", "where": where, "exc_type": type(exc).__name__,
           "message": _first_line(exc)}, site=False)


def _first_line(exc_or_text, limit=500):
    text = exc_or_text if isinstance(exc_or_text, str) else _safe_str(exc_or_text)
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:limit]
    return ""


def _exc_message(exc):
    """First line of the message; for TF's "in user code:" errors, the original message."""
    text = _safe_str(exc)
    first = _first_line(text)
    if first == "in user code:":
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        for line in reversed(lines):
            if not line.startswith("File ") and not line.endswith("*"):
                prefix = type(exc).__name__ + ": "
                return (line[len(prefix):] if line.startswith(prefix) else line)[:500]
    return first


def _safe_str(obj):
    try:
        return str(obj)
    except Exception:
        return f"<unprintable {type(obj).__name__}>"


# ---------------------------------------------------------------------------------------
# user frames
# ---------------------------------------------------------------------------------------

def _classify(filename):
    kind = _FILE_KIND.get(filename, _UNKNOWN)
    if kind is not _UNKNOWN:
        return kind
    if "__autograph_generated_file" in filename:
        kind = None
    elif filename.startswith("<"):
        kind = False
    else:
        path = filename if os.path.isabs(filename) else os.path.join(_S.cwd0, filename)
        path = os.path.normpath(path)
        if (path == _SELF_FILE or os.sep + "site-packages" + os.sep in path
                or os.sep + "dist-packages" + os.sep in path):
            kind = False
        else:
            kind = not any(path.startswith(p) for p in _NONUSER_PREFIXES)
    _FILE_KIND[filename] = kind
    return kind


def _user_location(filename, lineno):
    """(file, line) of a user location, mapping autograph-generated code back; else None."""
    kind = _classify(filename)
    if kind is True:
        return _abs(filename), lineno
    if kind is None:
        orig = _AG_MAP.get((filename, lineno))
        if orig is not None and _classify(orig[0]) is True:
            return _abs(orig[0]), orig[1]
    return None


_ABS = {}


def _abs(filename):
    path = _ABS.get(filename)
    if path is None:
        path = filename if os.path.isabs(filename) else os.path.join(_S.cwd0, filename)
        path = _ABS[filename] = os.path.normpath(path)
    return path


def _user_site(depth=1):
    """(file, line) of the innermost user frame on the current stack (or (None, None))."""
    try:
        f = sys._getframe(depth)
    except ValueError:
        return None, None
    while f is not None:
        code = f.f_code
        kind = _FILE_KIND.get(code.co_filename, _UNKNOWN)
        if kind is True:
            return _abs(code.co_filename), f.f_lineno
        if kind is not False:  # unknown yet, or autograph-generated
            loc = _user_location(code.co_filename, f.f_lineno)
            if loc is not None:
                return loc
        f = f.f_back
    return None, None


def _stack_user_frames(depth=1, limit=20):
    out = []
    try:
        f = sys._getframe(depth)
    except ValueError:
        return out
    while f is not None and len(out) < limit:
        loc = _user_location(f.f_code.co_filename, f.f_lineno)
        if loc is not None:
            out.append([loc[0], loc[1], f.f_code.co_name])
        f = f.f_back
    out.reverse()
    return out


def _tb_user_frames(tb, limit=30):
    out = []
    while tb is not None:
        code = tb.tb_frame.f_code
        loc = _user_location(code.co_filename, tb.tb_lineno)
        if loc is not None:
            out.append([loc[0], loc[1], code.co_name])
        tb = tb.tb_next
    return out[-limit:]


# ---------------------------------------------------------------------------------------
# errors and warnings
# ---------------------------------------------------------------------------------------

def _record_exception(exc, where, tb=None, from_stack=False, extra=None):
    """Emit an `error` event for `exc` (once per exception object and `where`)."""
    try:
        key = (id(exc), where)
        seen = getattr(exc, "_lintloop_recorded", None)
        if seen is not None and where in seen:
            return
        try:
            if seen is None:
                seen = set()
                exc._lintloop_recorded = seen
            seen.add(where)
        except Exception:
            if key in _S.once:
                return
            _S.once.add(key)
        frames = _tb_user_frames(tb if tb is not None else exc.__traceback__)
        if from_stack:  # caught in a wrapper: the user frames are above us
            frames = _stack_user_frames(1) + frames
        file, line = (frames[-1][0], frames[-1][1]) if frames else (None, None)
        ev = {"type": "error", "where": where, "exc_type": type(exc).__name__,
              "exc_module": type(exc).__module__, "message": _exc_message(exc),
              "file": file, "line": line, "frames": frames, "exc_id": id(exc)}
        cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
        if cause is not None:
            ev["cause"] = {"exc_type": type(cause).__name__, "message": _first_line(cause)}
        embedded = _embedded_traceback(_safe_str(exc))
        if embedded:
            ev["embedded"] = embedded
        if extra:
            ev.update(extra)
        _emit(ev)
    except Exception as err:
        _probe_error("record_exception", err)


def _embedded_traceback(text):
    """A traceback quoted in a message (e.g. torch's ProcessRaisedException from a worker):
    its exception line and innermost user frame."""
    marker = "Traceback (most recent call last):"
    if marker not in text:
        return None
    body = text[text.rindex(marker):]
    lines = [line for line in body.splitlines() if line.strip()]
    exc_line = lines[-1].strip() if lines else ""
    file = line_no = None
    for line in lines:
        stripped = line.strip()
        if stripped.startswith('File "') and '", line ' in stripped:
            try:
                path = stripped[6:stripped.index('", line ')]
                num = int(stripped.split('", line ', 1)[1].split(",", 1)[0])
            except (ValueError, IndexError):
                continue
            loc = _user_location(path, num)
            if loc is not None:
                file, line_no = loc
    return {"exception": exc_line[:500], "file": file, "line": line_no}


def _strip_probe_frames(tb):
    """The traceback without this module's frames (the user sees what they would without us)."""
    try:
        import types

        entries = []
        while tb is not None:
            if os.path.abspath(tb.tb_frame.f_code.co_filename) != _SELF_FILE:
                entries.append(tb)
            tb = tb.tb_next
        new = None
        for entry in reversed(entries):
            new = types.TracebackType(new, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
        return new
    except Exception:
        return tb


def _excepthook(exc_type, exc, tb):
    if exc is not None and not issubclass(exc_type, SystemExit):
        _S.uncaught = True
        _record_exception(exc, "uncaught", tb)
        tb = _strip_probe_frames(tb)
        try:
            exc.__traceback__ = tb
        except Exception:
            pass
    return _PREV_EXCEPTHOOK(exc_type, exc, tb)


def _threading_excepthook(args):
    if args.exc_value is not None and not issubclass(args.exc_type, SystemExit):
        name = getattr(args.thread, "name", None)
        _record_exception(args.exc_value, "thread", args.exc_traceback, extra={"thread": name})
    return _PREV_THREADING_EXCEPTHOOK(args)


def _showwarning(message, category, filename, lineno, file=None, line=None):
    try:
        fpath, fline = _user_site(2)
        origin = _user_location(filename, lineno) if filename else None
        if origin is not None:  # warned in user code itself (e.g. stacklevel pointed here)
            fpath, fline = origin
        _emit({"type": "warning", "category": getattr(category, "__name__", str(category)),
               "message": _first_line(_safe_str(message)), "file": fpath, "line": fline,
               "origin_file": filename, "origin_line": lineno})
    except Exception as err:
        _probe_error("showwarning", err)
    return _PREV_SHOWWARNING(message, category, filename, lineno, file, line)


# ---------------------------------------------------------------------------------------
# memory
# ---------------------------------------------------------------------------------------

def _host_mem_fn():
    """(callable returning bytes in use, source name) for the process heap."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        fields = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                  "uordblks", "fordblks", "keepcost")
        # mallinfo2 has size_t fields; the older mallinfo has int fields that wrap past 4 GiB.
        for name, field_type in (("mallinfo2", ctypes.c_size_t), ("mallinfo", ctypes.c_uint)):
            if not hasattr(libc, name):
                continue

            class MallInfo(ctypes.Structure):
                _fields_ = [(n, field_type) for n in fields]

            fn = getattr(libc, name)
            fn.restype = MallInfo
            fn.argtypes = []

            def heap_in_use(fn=fn):
                m = fn()
                return m.uordblks + m.hblkhd

            heap_in_use()
            return heap_in_use, name
        if hasattr(libc, "mstats"):  # macOS libmalloc
            class MStats(ctypes.Structure):
                _fields_ = [(n, ctypes.c_size_t) for n in (
                    "bytes_total", "chunks_used", "bytes_used", "chunks_free", "bytes_free")]

            fn2 = libc.mstats
            fn2.restype = MStats
            fn2.argtypes = []
            return (lambda: fn2().bytes_used), "mstats"
    except Exception:
        pass
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

    def rss():
        try:
            with open("/proc/self/statm") as fh:
                return int(fh.read().split()[1]) * page
        except Exception:
            return None

    return rss, "rss"


def _host_mem():
    if _S.mem_fn is None:
        _S.mem_fn = _host_mem_fn()
    fn, source = _S.mem_fn
    try:
        return fn(), source
    except Exception:
        return None, source


def _sample_mem(fw, on_cuda=False):
    """(mem, source, host_mem_or_None) for a step of framework `fw`."""
    if _S.device != "cpu":
        try:
            if fw == "torch" and on_cuda:
                torch = sys.modules["torch"]
                host, _ = _host_mem()
                return torch.cuda.memory_allocated(), "cuda", host
            if fw == "tf":
                if _S.tf_gpu is None:
                    tf = sys.modules["tensorflow"]
                    _S.tf_gpu = bool(tf.config.list_logical_devices("GPU"))
                if _S.tf_gpu:
                    tf = sys.modules["tensorflow"]
                    host, _ = _host_mem()
                    return tf.config.experimental.get_memory_info("GPU:0")["current"], "tf_gpu", host
        except Exception as err:
            _probe_error("device_memory", err)
    mem, source = _host_mem()
    return mem, source, None


def _count_live(at):
    """Count live framework tensors (all are gc-tracked objects) -- exact but slow."""
    try:
        import gc

        t0 = _time.perf_counter()
        torch = sys.modules.get("torch")
        eager_cls = None
        ops = sys.modules.get("tensorflow.python.framework.ops")
        if ops is not None:
            eager_cls = getattr(ops, "EagerTensor", None)
        torch_cls = getattr(torch, "Tensor", None) if torch is not None else None
        n_torch = n_grad_fn = n_eager = 0
        is_torch = {}  # type -> bool; type() never runs user code (isinstance may: __class__)
        for obj in gc.get_objects():
            cls = type(obj)
            if cls is eager_cls:
                n_eager += 1
            elif torch_cls is not None:
                flag = is_torch.get(cls)
                if flag is None:
                    flag = is_torch[cls] = issubclass(cls, torch_cls)
                if flag:
                    n_torch += 1
                    if obj.grad_fn is not None:
                        n_grad_fn += 1
        ev = {"type": "live_objects", "step": _S.steps, "at": at,
              "cost_s": round(_time.perf_counter() - t0, 4)}
        if eager_cls is not None:
            ev["tf_eager_tensors"] = n_eager
        if torch_cls is not None:
            ev["torch_tensors"] = n_torch
            ev["torch_tensors_with_grad_fn"] = n_grad_fn
        _emit(ev)
    except Exception as err:
        _probe_error("live_objects", err)


# ---------------------------------------------------------------------------------------
# steps and the step cap
# ---------------------------------------------------------------------------------------

_EAGER_RANK = {"tape_gradient": 1, "apply_gradients": 2, "optimizer_step": 2}


def _eager_step(kind, fw, extra=None, on_cuda=False):
    """A step seen in eager code.  `tape.gradient` followed by `apply_gradients` in one
    iteration is one step: once a higher kind shows up, lower kinds stop counting, and the
    first higher-kind call (same iteration as the lower-kind step just counted) is not
    counted again."""
    S = _S
    rank = _EAGER_RANK[kind]
    if rank < S.eager_rank:
        return
    if rank > S.eager_rank:
        previous, S.eager_rank = S.eager_rank, rank
        if previous:
            return
    _count_step(kind, fw, extra, on_cuda)


def _count_step(kind, fw, extra=None, on_cuda=False):
    S = _S
    if S.stopped and S.cap and S.steps >= S.cap:  # the program swallowed our SystemExit
        _raise_stop()
        return
    S.steps += 1
    n = S.steps
    S.kinds[kind] = S.kinds.get(kind, 0) + 1
    last = bool(S.cap) and n >= S.cap
    if n == 1 or last or n % S.sample_every == 0:
        mem, source, host = _sample_mem(fw, on_cuda)
        ev = {"type": "step", "n": n, "kind": kind, "mem": mem, "mem_source": source}
        if host is not None:
            ev["host_mem"] = host
        if extra:
            ev.update(extra)
        _emit(ev, buffered=True)
    if last:
        _count_live("last")
        _stop("step_limit")
    elif n in S.live_steps:
        _count_live("warmup")


def _summaries():
    for rec in list(_S.fn_records.values()):
        _emit({"type": "tf_function", "function": rec["name"], "file": rec["file"],
               "line": rec["line"], "traces": rec["traces"], "calls": rec["calls"],
               "instances": len(rec["instances"]), "trains": rec["trains"]}, site=False)


def _stop(reason):
    S = _S
    if S.stopped:
        return
    S.stopped = True
    _summaries()
    ev = {"type": "stop", "reason": reason, "steps": S.steps, "kinds": dict(S.kinds),
          "checks": dict(S.checks)}
    _emit(ev, site=(reason == "step_limit"))
    if reason != "step_limit":
        return
    _start_watchdog()
    if S.fn_depth > 0:   # inside a tf.function call or a framework hook: stop on the way out
        S.stop_pending = True
        return
    _raise_stop()


def _raise_stop():
    if _threading.current_thread() is not _threading.main_thread():
        _hard_exit()
    raise SystemExit(0)


def _hard_exit():
    _flush()
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
        _time.sleep(delay)
        _emit({"type": "probe_error", "where": "watchdog",
               "message": f"program still running {delay:g}s after the step cap; exiting"},
              site=False)
        _hard_exit()

    try:
        _threading.Thread(target=watchdog, name="lintloop-probe-watchdog", daemon=True).start()
    except Exception:
        pass


def _atexit():
    if not _S.stopped:
        _stop("error" if _S.uncaught else "exit")
    _flush()


# ---------------------------------------------------------------------------------------
# import hook
# ---------------------------------------------------------------------------------------

_INSTALLED = set()
_WATCHED = {}
_BUSY = set()


class _PostImportFinder:
    """Finds nothing itself: for watched names it lets the other finders find the spec,
    then makes the loader run our installer right after the module's code ran."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name not in _WATCHED or name in _BUSY or name in _INSTALLED:
            return None
        _BUSY.add(name)
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is cls:
                    continue
                find = getattr(finder, "find_spec", None)
                if find is None:
                    continue
                spec = find(name, path, target)
                if spec is not None:
                    break
        finally:
            _BUSY.discard(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module):
            try:
                original(module)
            finally:
                try:
                    del loader.exec_module
                except AttributeError:
                    pass
            _run_installer(name, module)

        try:
            loader.exec_module = exec_module
        except Exception:
            return spec
        return spec

    @classmethod
    def invalidate_caches(cls):
        pass


def _run_installer(name, module):
    if name in _INSTALLED:
        return
    _INSTALLED.add(name)
    try:
        _WATCHED[name](module)
    except Exception as err:
        _probe_error(f"install:{name}", err)


def _add_nonuser_dir(module):
    path = getattr(module, "__file__", None)
    if path:
        d = os.path.dirname(os.path.abspath(path)) + os.sep
        if d not in _NONUSER_PREFIXES:
            _NONUSER_PREFIXES.append(d)
            _FILE_KIND.clear()


def _framework_event(name, module, hooks):
    _S.frameworks.add(name)
    _emit({"type": "framework", "framework": name,
           "version": getattr(module, "__version__", None), "hooks": hooks}, site=False)


def _wraps(original):
    import functools

    return functools.wraps(original)


# ---------------------------------------------------------------------------------------
# PyTorch
# ---------------------------------------------------------------------------------------

def _install_torch(torch):
    _add_nonuser_dir(torch)
    hooks = []
    from torch.optim import optimizer as optim_mod

    optim_mod.register_optimizer_step_pre_hook(_torch_pre_hook)
    hooks.append("optimizer_step_pre_hook")
    if hasattr(optim_mod, "register_optimizer_step_post_hook"):
        optim_mod.register_optimizer_step_post_hook(_torch_post_hook)
        hooks.append("optimizer_step_post_hook")

    original_tensor_backward = torch.Tensor.backward

    @_wraps(original_tensor_backward)
    def backward(self, *args, **kwargs):
        try:
            return original_tensor_backward(self, *args, **kwargs)
        except RuntimeError as exc:
            _record_exception(exc, "backward", from_stack=True)
            raise

    torch.Tensor.backward = backward
    hooks.append("Tensor.backward")

    original_autograd_backward = torch.autograd.backward

    @_wraps(original_autograd_backward)
    def autograd_backward(*args, **kwargs):
        try:
            return original_autograd_backward(*args, **kwargs)
        except RuntimeError as exc:
            _record_exception(exc, "backward", from_stack=True)
            raise

    torch.autograd.backward = autograd_backward
    hooks.append("autograd.backward")

    spawn_mod = sys.modules.get("torch.multiprocessing.spawn")
    if spawn_mod is not None and hasattr(spawn_mod, "_wrap"):
        original_wrap = spawn_mod._wrap

        wrap_code = original_wrap.__code__

        @_wraps(original_wrap)
        def _wrap(fn, i, args, error_file):
            # torch's _wrap catches the worker's exception and formats it with
            # traceback.format_exc(): record it there (no extra frame in the worker's
            # traceback, which the parent prints).
            import traceback

            original_format_exc = traceback.format_exc

            def format_exc(*a, **k):
                try:
                    if sys._getframe(1).f_code is wrap_code:
                        exc = sys.exc_info()[1]
                        if exc is not None:
                            _record_exception(exc, "worker", extra={"rank": i})
                except Exception:
                    pass
                return original_format_exc(*a, **k)

            traceback.format_exc = format_exc
            try:
                return original_wrap(fn, i, args, error_file)
            finally:
                traceback.format_exc = original_format_exc

        spawn_mod._wrap = _wrap
        hooks.append("multiprocessing.spawn")
    _framework_event("torch", torch, hooks)


def _torch_primary(opt):
    """Does a step of `opt` count as a training step?  The first optimizer that steps is
    the primary one; another one counts only while the primary is idle (GANs alternate two
    optimizers: one step per iteration; a new optimizer for a new phase takes over)."""
    S = _S
    S.opt_seq += 1
    oid = id(opt)
    previous = S.opt_last.get(oid)
    S.opt_last[oid] = S.opt_seq
    if S.opt_primary is None or S.opt_primary == oid:
        S.opt_primary = oid
        return True
    if previous is not None and S.opt_last.get(S.opt_primary, -1) < previous:
        S.opt_primary = oid
        return True
    return False


def _torch_params(opt):
    return [p for group in opt.param_groups for p in group["params"]
            if getattr(p, "requires_grad", False)]


def _torch_grad_check(opt, params):
    """(none, zero, total, grad_norm, nonfinite, shapes of bad params).

    One fused norm kernel over all grads and one device sync (~15 us for a small model on
    CPU); the rest is arithmetic on a short list of floats."""
    torch = sys.modules["torch"]
    total = len(params)
    with_grad = [p for p in params if p.grad is not None]
    none = total - len(with_grad)
    bad_shapes = [list(p.shape) for p in params if p.grad is None][:5]
    zero = 0
    grad_norm = None
    nonfinite = 0
    if with_grad:
        grads = [p.grad for p in with_grad]
        with torch.no_grad():
            try:
                norms = torch.stack(torch._foreach_norm(grads)).tolist()
            except Exception:  # sparse grads, several devices ...
                norms = [float(g.detach().float().norm()) for g in grads]
        square_sum = 0.0
        for index, value in enumerate(norms):
            if value == 0.0:
                zero += 1
                if len(bad_shapes) < 10:
                    bad_shapes.append(list(with_grad[index].shape))
            elif value != value or value in (float("inf"), float("-inf")):
                nonfinite += 1
            else:
                square_sum += value * value
        grad_norm = square_sum ** 0.5 if not nonfinite else None
    return none, zero, total, grad_norm, nonfinite, bad_shapes


def _torch_pre_hook(opt, args, kwargs):
    S = _S
    try:
        counts = _torch_primary(opt)
        n_next = S.steps + 1
        params = _torch_params(opt)
        # Gradient checks (one fused norm kernel + a sync, 20-70 us on a small CPU model):
        # the first 5 steps, then every `check_every` steps, and the last one.
        sampled = n_next <= 5 or n_next % S.check_every == 0 or (S.cap and n_next >= S.cap)
        extra = {"optimizer": type(opt).__name__}
        on_cuda = bool(params) and getattr(params[0], "is_cuda", False)
        if sampled:
            none, zero, total, grad_norm, nonfinite, shapes = _torch_grad_check(opt, params)
            S.checks["optimizer_step"] = S.checks.get("optimizer_step", 0) + 1
            extra["grad_norm"] = grad_norm
            if nonfinite:
                extra["nonfinite_grads"] = nonfinite
            if none or zero:
                site = _user_site(2)
                key = ("torch", id(opt), site)
                if S.none_seen.get(key) != (none, zero, total):
                    S.none_seen[key] = (none, zero, total)
                    _emit({"type": "none_gradients", "framework": "torch", "none": none,
                           "zero": zero, "total": total, "step": n_next,
                           "optimizer": type(opt).__name__, "shapes": shapes,
                           "file": site[0], "line": site[1]})
        if counts and sampled:  # did this step change any parameter? (post hook)
            _torch_snapshot(opt, params, n_next)
    except Exception as err:
        _probe_error("torch_pre_hook", err)
        counts, extra, on_cuda = False, None, False
    if counts:
        _eager_step("optimizer_step", "torch", extra, on_cuda)


def _torch_snapshot(opt, params, n):
    torch = sys.modules["torch"]
    numel = sum(p.numel() for p in params)
    values = None
    if numel <= 20_000_000:
        with torch.no_grad():
            values = [p.detach().clone() for p in params]
    _S.param_snapshot = (id(opt), n, [p._version for p in params], values)


def _torch_post_hook(opt, args, kwargs):
    snap = _S.param_snapshot
    if snap is None or snap[0] != id(opt):
        return
    _S.param_snapshot = None
    try:
        torch = sys.modules["torch"]
        params = _torch_params(opt)
        _, n, versions, values = snap
        if len(versions) != len(params):
            return
        changed = any(p._version != v for p, v in zip(params, versions))
        method = "versions"
        if changed and values is not None:
            method = "values"
            with torch.no_grad():
                changed = any(not torch.equal(p, v) for p, v in zip(params, values))
        if not changed:
            _emit({"type": "params_unchanged", "step": n, "optimizer": type(opt).__name__,
                   "params": len(params), "method": method})
    except Exception as err:
        _probe_error("torch_post_hook", err)


# ---------------------------------------------------------------------------------------
# TensorFlow / Keras
# ---------------------------------------------------------------------------------------

def _eager():
    fn = _S.tf_eager
    if fn is None:
        ctx = sys.modules.get("tensorflow.python.eager.context")
        if ctx is None:
            return True
        fn = _S.tf_eager = ctx.executing_eagerly
    return fn()


def _mark_training():
    rec = _S.fn_current
    if rec is not None:
        rec["trains"] = True


def _install_tensorflow(tf):
    _add_nonuser_dir(tf)
    hooks = []
    try:
        from tensorflow.python.eager import context

        _S.tf_eager = context.executing_eagerly
    except Exception as err:
        _probe_error("tf_context", err)
    for name, installer in (
            ("autograph_source_map", _tf_autograph),
            ("GradientTape.gradient", _tf_tape),
            ("tf.function", _tf_function),
            ("print", _tf_print),
            ("Strategy.run", _tf_strategy),
            ("reduce_mean", _tf_reduce_mean),
            ("tf_logging", _tf_logging)):
        try:
            installer(tf)
            hooks.append(name)
        except Exception as err:
            _probe_error(f"tf:{name}", err)
    _framework_event("tensorflow", tf, hooks)


def _tf_autograph(tf):
    from tensorflow.python.autograph.core import config as ag_config
    from tensorflow.python.autograph.impl import api as ag_api
    from tensorflow.python.util import traceback_utils

    # Keep our wrapper frames out of TF's filtered tracebacks and "in user code:" messages.
    traceback_utils._EXCLUDED_PATHS = tuple(traceback_utils._EXCLUDED_PATHS) + (_SELF_FILE,)

    # Never let autograph convert our wrappers (it would transpile this file).
    ag_config.CONVERSION_RULES = (ag_config.DoNotConvert(__name__),) + tuple(
        ag_config.CONVERSION_RULES)
    original = ag_api._convert_actual

    def _convert_actual(entity, program_ctx):
        transformed = original(entity, program_ctx)
        try:
            source_map = getattr(transformed, "ag_source_map", None) or {}
            for loc, origin in source_map.items():
                _AG_MAP[(loc.filename, loc.lineno)] = (origin.loc.filename, origin.loc.lineno)
        except Exception as err:
            _probe_error("autograph_source_map", err)
        return transformed

    ag_api._convert_actual = _convert_actual


def _source_names(sources, flat_result, nest):
    names = []
    try:
        flat_sources = nest.flatten(sources)
        if len(flat_sources) != len(flat_result):
            return names
        for src, grad in zip(flat_sources, flat_result):
            if grad is not None:
                continue
            name = getattr(src, "path", None)
            if name is None:
                try:
                    name = src.name
                except Exception:
                    shape = getattr(src, "shape", None)
                    name = f"{type(src).__name__}{list(shape) if shape is not None else ''}"
            names.append(str(name))
            if len(names) >= 10:
                break
    except Exception:
        pass
    return names


def _tf_tape(tf):
    from tensorflow.python.eager import backprop
    from tensorflow.python.util import nest

    original = backprop.GradientTape.gradient

    @_wraps(original)
    def gradient(self, target, sources, *args, **kwargs):
        try:
            result = original(self, target, sources, *args, **kwargs)
        except Exception as exc:
            _record_exception(exc, "tape.gradient", from_stack=True)
            raise
        S = _S
        try:
            eager = _eager()
            if not eager:
                _mark_training()
            flat = nest.flatten(result)
            total = len(flat)
            none = sum(1 for g in flat if g is None)
            S.checks["tape_gradient"] = S.checks.get("tape_gradient", 0) + 1
            if none:
                site = _user_site(2)
                key = ("tf", site)
                if S.none_seen.get(key) != (none, total):
                    S.none_seen[key] = (none, total)
                    _emit({"type": "none_gradients", "framework": "tensorflow", "none": none,
                           "total": total, "eager": eager, "step": S.steps + (1 if eager else 0),
                           "names": _source_names(sources, flat, nest),
                           "file": site[0], "line": site[1]})
        except Exception as err:
            _probe_error("tape_gradient", err)
            return result
        if eager:
            _eager_step("tape_gradient", "tf")
        return result

    backprop.GradientTape.gradient = gradient


def _fn_record(function):
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
        loc = _user_location(code.co_filename, code.co_firstlineno)
        file, line = loc if loc else (code.co_filename, code.co_firstlineno)
        name = getattr(py, "__qualname__", code.co_name)
    else:
        name = getattr(function, "_name", None) or getattr(function, "__name__", "function")
        key = ("?", name)
        file = line = None
    rec = _S.fn_records.get(key)
    if rec is None:
        rec = _S.fn_records[key] = {"name": name, "file": file, "line": line, "traces": 0,
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


def _tf_function(tf):
    from tensorflow.python.eager.polymorphic_function import polymorphic_function as pf

    Function = pf.Function
    original_call = Function.__call__

    @_wraps(original_call)
    def __call__(self, *args, **kwargs):
        S = _S
        try:
            outer = S.fn_depth == 0 and _eager()
        except Exception:
            outer = False
        if not outer:
            S.fn_depth += 1
            try:
                return original_call(self, *args, **kwargs)
            finally:
                S.fn_depth -= 1
        try:
            rec = _fn_record(self)
            before = self.experimental_get_tracing_count()
        except Exception as err:
            _probe_error("tf_function_record", err)
            return original_call(self, *args, **kwargs)
        steps_before = S.steps
        S.fn_depth += 1
        S.fn_current = rec
        try:
            result = original_call(self, *args, **kwargs)
        finally:
            S.fn_depth -= 1
            S.fn_current = None
            try:
                rec["calls"] += 1
                after = self.experimental_get_tracing_count()
                if after != before:
                    rec["traces"] += after - before
                    _emit({"type": "trace", "function": rec["name"], "traces": rec["traces"],
                           "call": rec["calls"], "args": _describe_args(args, kwargs),
                           "def_file": rec["file"], "def_line": rec["line"]})
            except Exception as err:
                _probe_error("tf_function_trace", err)
            if S.stop_pending:
                S.stop_pending = False
                _raise_stop()
        if rec["trains"]:
            S.training_fn = True
        if S.steps == steps_before and (
                rec["trains"] or (not S.training_fn and set(S.kinds) <= {"tf_function_call"})):
            _count_step("tf_function_call", "tf",
                        {"function": rec["name"]} if rec["trains"] else
                        {"function": rec["name"], "fallback": True})
        return result

    Function.__call__ = __call__


def _tf_print(tf):
    import builtins

    original_print = builtins.print
    ops = sys.modules.get("tensorflow.python.framework.ops")

    def print(*args, **kwargs):  # noqa: A001 - replaces the builtin, same behaviour
        try:
            if not _eager():
                rec = _S.fn_current
                name = rec["name"] if rec is not None else None
                if name is None and ops is not None:
                    name = getattr(ops.get_default_graph(), "name", None)
                sep = kwargs.get("sep", " ")
                sep = " " if sep is None else sep
                text = sep.join(_safe_str(a) for a in args)
                _emit({"type": "trace_print", "function": name, "text": text[:300]})
        except Exception as err:
            _probe_error("trace_print", err)
        return original_print(*args, **kwargs)

    print.__doc__ = original_print.__doc__
    print.__module__ = __name__
    print.__wrapped__ = original_print
    builtins.print = print


def _tf_strategy(tf):
    from tensorflow.python.distribute import distribute_lib

    cls = distribute_lib.StrategyBase
    original_run = cls.run

    @_wraps(original_run)
    def run(self, fn, args=(), kwargs=None, options=None):
        S = _S
        try:
            replicas = self.num_replicas_in_sync
            key = ("strategy", type(self).__name__, replicas)
            if key not in S.once and type(self).__name__ != "_DefaultDistributionStrategy":
                S.once.add(key)
                _emit({"type": "strategy", "strategy": type(self).__name__,
                       "replicas": replicas})
            eager = _eager()
        except Exception as err:
            _probe_error("strategy", err)
            eager = False
        result = original_run(self, fn, args=args, kwargs=kwargs, options=options)
        if eager and S.replica_value_events < 20:
            try:
                values = self.experimental_local_results(result)
                floats = []
                for v in values:
                    if getattr(getattr(v, "shape", None), "rank", None) != 0:
                        floats = None
                        break
                    floats.append(float(v))
                if floats:
                    S.replica_value_events += 1
                    _emit({"type": "replica_values", "values": floats, "step": S.steps})
            except Exception as err:
                _probe_error("replica_values", err)
        return result

    cls.run = run


def _tf_reduce_mean(tf):
    original = tf.reduce_mean
    distribute_lib = sys.modules["tensorflow.python.distribute.distribute_lib"]

    @_wraps(original)
    def reduce_mean(*args, **kwargs):
        S = _S
        if S.loss_outputs:
            try:
                value = args[0] if args else kwargs.get("input_tensor")
                entry = S.loss_outputs.get(id(value))
                if entry is not None and (entry[0] is None or entry[0]() is value):
                    ctx = distribute_lib.get_replica_context()
                    replicas = getattr(ctx, "num_replicas_in_sync", 1) if ctx is not None else 1
                    if replicas > 1:
                        site = _user_site(2)
                        key = ("per_replica_mean", site)
                        if key not in S.once:
                            S.once.add(key)
                            _emit({"type": "per_replica_mean", "replicas": replicas,
                                   "loss": entry[1], "reduction": "none",
                                   "file": site[0], "line": site[1]})
            except Exception as err:
                _probe_error("reduce_mean", err)
        return original(*args, **kwargs)

    tf.reduce_mean = reduce_mean
    math = getattr(tf, "math", None)
    if math is not None and getattr(math, "reduce_mean", None) is original:
        math.reduce_mean = reduce_mean


def _tf_logging(tf):
    import logging

    class Handler(logging.Handler):
        def emit(self, record):
            try:
                _emit({"type": "warning", "category": f"tf_logging.{record.levelname}",
                       "message": _first_line(record.getMessage())})
            except Exception:
                pass

    logging.getLogger("tensorflow").addHandler(Handler(logging.WARNING))


def _install_keras(keras):
    """Keras 3 (`keras`) and Keras 2 (`tf_keras`): optimizer steps, loss reductions."""
    _add_nonuser_dir(keras)
    hooks = []
    optimizer_cls = getattr(getattr(keras, "optimizers", None), "Optimizer", None)
    patched = set()
    if optimizer_cls is not None:
        for cls in optimizer_cls.__mro__:
            if "apply_gradients" in cls.__dict__ and cls not in patched:
                _patch_apply_gradients(cls)
                patched.add(cls)
                hooks.append(f"{cls.__name__}.apply_gradients")
                break
    legacy = getattr(getattr(getattr(keras, "optimizers", None), "legacy", None), "Optimizer", None)
    if legacy is not None:
        for cls in legacy.__mro__:
            if "apply_gradients" in cls.__dict__ and cls not in patched:
                _patch_apply_gradients(cls)
                patched.add(cls)
                hooks.append(f"legacy.{cls.__name__}.apply_gradients")
                break
    loss_cls = getattr(getattr(keras, "losses", None), "Loss", None)
    if loss_cls is not None and "__call__" in loss_cls.__dict__:
        _patch_loss_call(loss_cls)
        hooks.append("Loss.__call__")
    _framework_event(keras.__name__, keras, hooks)


def _patch_apply_gradients(cls):
    original = cls.__dict__["apply_gradients"]

    @_wraps(original)
    def apply_gradients(self, *args, **kwargs):
        S = _S
        eager = _eager()
        if not eager:
            _mark_training()
        S.fn_depth += 1
        try:
            result = original(self, *args, **kwargs)
        except Exception as exc:
            _record_exception(exc, "apply_gradients", from_stack=True)
            raise
        finally:
            S.fn_depth -= 1
        if eager and S.fn_depth == 0:
            _eager_step("apply_gradients", "tf" if "tensorflow" in sys.modules else "keras",
                        {"optimizer": type(self).__name__})
        return result

    cls.apply_gradients = apply_gradients


def _patch_loss_call(cls):
    import weakref

    original = cls.__dict__["__call__"]

    @_wraps(original)
    def __call__(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        try:
            reduction = getattr(self, "reduction", "x")
            if reduction is None or reduction == "none":
                outputs = _S.loss_outputs
                try:
                    ref = weakref.ref(result)
                except TypeError:
                    ref = None
                outputs[id(result)] = (ref, type(self).__name__)
                if len(outputs) > 64:
                    del outputs[next(iter(outputs))]
        except Exception as err:
            _probe_error("loss_call", err)
        return result

    cls.__call__ = __call__


def _install_jax(jax):
    _add_nonuser_dir(jax)
    _framework_event("jax", jax, [])


def _install_numpy(numpy):
    _add_nonuser_dir(numpy)


def _install_multiprocessing_process(mp_process):
    cls = mp_process.BaseProcess
    original_run = cls.run

    def run(self):
        try:
            return original_run(self)
        except Exception as exc:
            _record_exception(exc, "process", extra={"process": getattr(self, "name", None)})
            raise
        finally:
            _flush()  # forked children end with os._exit: no atexit

    run.__wrapped__ = original_run
    cls.run = run


# ---------------------------------------------------------------------------------------
# start-up
# ---------------------------------------------------------------------------------------

def _after_fork_in_child():
    """A forked child (DataLoader worker, fork-started Process) counts its own steps."""
    S = _S
    S.buf = []
    S.steps = 0
    S.kinds = {}
    S.checks = {}
    S.eager_rank = 0
    S.stopped = S.stop_pending = S.uncaught = False
    S.fn_depth = 0
    S.fn_current = None
    S.fn_records = {}
    S.opt_last = {}
    S.opt_primary = None
    S.param_snapshot = None
    S.t0 = _time.perf_counter()


def _start(cfg):
    _init_state(cfg)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)
    for name in ("os", "json", "threading"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None):
            d = os.path.dirname(os.path.abspath(module.__file__)) + os.sep
            if d not in _NONUSER_PREFIXES:
                _NONUSER_PREFIXES.append(d)
    _WATCHED.update({
        "torch": _install_torch,
        "tensorflow": _install_tensorflow,
        "keras": _install_keras,
        "tf_keras": _install_keras,
        "jax": _install_jax,
        "numpy": _install_numpy,
        "multiprocessing.process": _install_multiprocessing_process,
    })
    for name in list(_WATCHED):  # already imported (e.g. by another sitecustomize)
        if name in sys.modules:
            _run_installer(name, sys.modules[name])
    sys.meta_path.insert(0, _PostImportFinder)
    root = os.environ.get("LINTLOOP_PROBE_ROOT_PID")
    if root is None:
        os.environ["LINTLOOP_PROBE_ROOT_PID"] = str(os.getpid())
    _emit({"type": "start", "root": root is None, "ppid": os.getppid(), "argv": list(sys.argv),
           "executable": sys.executable, "python": sys.version.split()[0], "cwd": _S.cwd0,
           "wall": _time.time(), "config": {"steps": _S.cap, "device": _S.device,
                                            "sample_every": _S.sample_every}}, site=False)

    global _PREV_EXCEPTHOOK, _PREV_THREADING_EXCEPTHOOK, _PREV_SHOWWARNING
    _PREV_EXCEPTHOOK = sys.excepthook
    sys.excepthook = _excepthook
    _PREV_THREADING_EXCEPTHOOK = _threading.excepthook
    _threading.excepthook = _threading_excepthook
    import warnings

    _PREV_SHOWWARNING = warnings.showwarning
    warnings.showwarning = _showwarning
    import atexit

    atexit.register(_atexit)


if _CFG is not None:
    sys.modules.setdefault("_lintloop_probe", sys.modules.get(__name__))
    try:
        _start(_CFG)
    except Exception as _exc:
        sys.stderr.write(f"lintloop probe: could not start: {type(_exc).__name__}: {_exc}\n")

_chain_other_sitecustomize()
