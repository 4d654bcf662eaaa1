"""lintloop runtime probe: the bootstrap that runs inside the probed program.

The runner (``lintloop.runtime_probe.runner``) puts this file's directory first on the
child's ``PYTHONPATH``, so the interpreter imports it as ``sitecustomize`` at start-up --
in the probed script's process and in every Python process that process spawns
(``torch.multiprocessing`` / DDP workers, ``multiprocessing`` spawn children).

It does nothing unless ``LINTLOOP_PROBE_CONFIG`` is set (JSON: ``events`` = path of a
JSON-lines file to append events to, ``steps`` = step cap, ``device``, ``sample_every``,
``live_steps``); then it loads the package ``_lintloop_probe`` beside it (from that
directory, whatever ``sys.path`` holds) and starts it.  The package never imports a
framework itself: it installs its hooks when the program imports ``torch`` /
``tensorflow`` / ``keras`` / ``tf_keras`` / ``jax``.

Self-contained on purpose: standard library only, because ``--python`` may point at an
interpreter that has the frameworks but not lintloop.  Every hook is wrapped so that a
failure inside the probe is recorded (``probe_error``) and never changes what the user's
program does; exceptions raised by the user's code or the framework pass through
unchanged.  The ``sitecustomize`` that would have run without us still runs, after us.
"""
import os
import sys

_CONFIG_VAR = "LINTLOOP_PROBE_CONFIG"
_HERE = os.path.dirname(os.path.abspath(__file__))
_PACKAGE = "_lintloop_probe"


def _load_probe():
    """Import the package beside this file as ``_lintloop_probe``."""
    import importlib.util

    location = os.path.join(_HERE, _PACKAGE)
    spec = importlib.util.spec_from_file_location(
        _PACKAGE, os.path.join(location, "__init__.py"), submodule_search_locations=[location])
    module = importlib.util.module_from_spec(spec)
    sys.modules[_PACKAGE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_PACKAGE]
        raise
    return module


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
        import json

        _config = json.loads(os.environ[_CONFIG_VAR])
    except Exception as _exc:  # a broken config must not break the program
        sys.stderr.write(f"lintloop probe: bad {_CONFIG_VAR}: {_exc}\n")
    else:
        try:
            _load_probe().start(_config)
        except Exception as _exc:
            sys.stderr.write(f"lintloop probe: could not start: {type(_exc).__name__}: {_exc}\n")

_chain_other_sitecustomize()
