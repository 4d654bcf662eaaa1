"""Memory figures for `step` events, and the live-tensor count (`live_objects`).

On the host: the heap in use from glibc's mallinfo2 (mallinfo, whose int fields wrap past
4 GiB, on older glibc; mstats on macOS; else the resident set).  On a GPU (unless the run
is `--device cpu`): the CUDA allocator's figure for PyTorch (`torch.cuda.memory_allocated`,
and the peak since the previous sample, `max_memory_allocated`, after which the peak is
reset: a program that prints its own peak sees per-step peaks under the probe),
TensorFlow's GPU:0 memory info for TensorFlow, with the host figure alongside.
"""
import gc
import os
import sys
import time

from .events import emit, probe_error
from .state import S

_heap_sampler = None    # (callable returning bytes in use, source name), made on first use
_tf_gpu = None          # does TensorFlow see a GPU? (asked once)


def _make_heap_sampler():
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
    global _heap_sampler
    if _heap_sampler is None:
        _heap_sampler = _make_heap_sampler()
    fn, source = _heap_sampler
    try:
        return fn(), source
    except Exception:
        return None, source


def sample(fw, on_cuda=False):
    """(mem, source, host_mem_or_None) for a step of framework `fw` (torch|tf|keras)."""
    global _tf_gpu
    if S.device != "cpu":
        try:
            if fw == "torch" and on_cuda:
                torch = sys.modules["torch"]
                host, _ = _host_mem()
                return torch.cuda.memory_allocated(), "cuda", host
            if fw == "tf":
                if _tf_gpu is None:
                    tf = sys.modules["tensorflow"]
                    _tf_gpu = bool(tf.config.list_logical_devices("GPU"))
                if _tf_gpu:
                    tf = sys.modules["tensorflow"]
                    host, _ = _host_mem()
                    info = tf.config.experimental.get_memory_info("GPU:0")
                    return info["current"], "tf_gpu", host
        except Exception as err:
            probe_error("device_memory", err)
    mem, source = _host_mem()
    return mem, source, None


def cuda_peak():
    """The CUDA allocator's peak since the previous call (bytes), resetting it; None on failure."""
    try:
        cuda = sys.modules["torch"].cuda
        peak = cuda.max_memory_allocated()
        cuda.reset_peak_memory_stats()
        return peak
    except Exception as err:
        probe_error("cuda_peak", err)
        return None


def torch_device_event(torch):
    """With `--device cuda`: a `device` event saying whether this process sees CUDA (asked only then:
    the question initialises the CUDA driver)."""
    if S.device != "cuda":
        return []
    try:
        available = bool(torch.cuda.is_available())
        ev = {"type": "device", "framework": "torch", "requested": "cuda", "cuda_available": available,
              "devices": torch.cuda.device_count() if available else 0}
        if available:
            ev["name"] = torch.cuda.get_device_name(0)
        emit(ev, site=False)
    except Exception as err:
        probe_error("torch_device", err)
    return ["device"]


def count_live(at):
    """Count live framework tensors (all are gc-tracked objects) -- exact but slow."""
    try:
        t0 = time.perf_counter()
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
        ev = {"type": "live_objects", "step": S.steps, "at": at,
              "cost_s": round(time.perf_counter() - t0, 4)}
        if eager_cls is not None:
            ev["tf_eager_tensors"] = n_eager
        if torch_cls is not None:
            ev["torch_tensors"] = n_torch
            ev["torch_tensors_with_grad_fn"] = n_grad_fn
        emit(ev)
    except Exception as err:
        probe_error("live_objects", err)
