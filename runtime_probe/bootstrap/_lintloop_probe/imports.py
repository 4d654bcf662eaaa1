"""Lazy installation of the hooks: when a watched module (a framework) finishes importing,
its installer runs, once.  The probe never imports a framework itself.

Installers are named "submodule:function" of this package, so that a framework's hook
module is only imported along with the framework.
"""
import importlib
import sys

from .events import emit, probe_error

_INSTALLERS = {}    # watched module name -> "submodule:function"
_INSTALLED = set()
_BUSY = set()


class _PostImportFinder:
    """Finds nothing itself: for watched names it lets the other finders find the spec,
    then makes the loader run our installer right after the module's code ran."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name not in _INSTALLERS or name in _BUSY or name in _INSTALLED:
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


def watch(installers):
    """Run each installer when its module is imported ({module name: "submodule:function"});
    now for modules already imported."""
    _INSTALLERS.update(installers)
    # Only the new ones: an earlier watched module may be half-imported now (a hook installed while
    # `keras` imports `tensorflow` calls this), and its installer runs when its import finishes.
    for name in list(installers):
        if name in sys.modules:
            _run_installer(name, sys.modules[name])
    sys.meta_path.insert(0, _PostImportFinder)


def _run_installer(name, module):
    if name in _INSTALLED:
        return
    _INSTALLED.add(name)
    try:
        submodule, function = _INSTALLERS[name].split(":")
        install = getattr(importlib.import_module("." + submodule, __package__), function)
        install(module)
    except Exception as err:
        probe_error(f"install:{name}", err)


def framework_event(name, module, hooks):
    """Announce a framework and the hooks installed into it."""
    emit({"type": "framework", "framework": name,
          "version": getattr(module, "__version__", None), "hooks": hooks}, site=False)
