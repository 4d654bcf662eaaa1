"""lintloop's runtime probe, inside the probed program (standard library only).

Loaded by the bootstrap's ``sitecustomize`` when ``LINTLOOP_PROBE_CONFIG`` is set; the
frameworks' hook modules are imported only when their framework is (see ``imports``).
Importing this package or any of its modules changes nothing: ``start`` does.  The event
schema is documented in ``lintloop.runtime_probe.runner``.
"""
import atexit
import os
import sys
import time

from . import errors, files, frames, imports, state, steps
from .events import emit

# module imported -> "submodule:installer" of this package
_INSTALLERS = {
    "torch": "torch_hooks:install",
    "tensorflow": "tf_hooks:install",
    "keras": "keras_hooks:install",
    "tf_keras": "keras_hooks:install",
    "jax": "jax_hooks:install",
    "optax": "jax_optax:install",
    "numpy": "frames:add_nonuser_dir",
    "multiprocessing.process": "errors:install_process_hook",
}


def start(cfg):
    """Start probing this process, as configured by `cfg` (``events`` = path of the
    JSON-lines file to append events to, ``steps`` = step cap, ``device``,
    ``sample_every``, ``live_steps``)."""
    state.init(cfg)
    for name in ("os", "json", "threading"):  # the standard library is not user code
        module = sys.modules.get(name)
        if module is not None:
            frames.add_nonuser_dir(module)
    imports.watch(_INSTALLERS)
    root = os.environ.get("LINTLOOP_PROBE_ROOT_PID")
    if root is None:
        os.environ["LINTLOOP_PROBE_ROOT_PID"] = str(os.getpid())
    S = state.S
    emit({"type": "start", "root": root is None, "ppid": os.getppid(), "argv": list(sys.argv),
          "executable": sys.executable, "python": sys.version.split()[0], "cwd": S.cwd0,
          "wall": time.time(), "config": {"steps": S.cap, "device": S.device,
                                          "sample_every": S.sample_every}}, site=False)
    errors.install()
    files.install()
    atexit.register(steps.at_exit)
