"""What besides a run's inputs decides its findings: lintloop (its version and, for a source checkout
whose version does not change when a rule is edited, its sources), the host Python (its parser's
verdicts and messages) and libcst. The result cache keys its entries with it; a warm engine
(lintloop.warm_engine) is named by it. Cheap to import: the CLI's fast paths use it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
from typing import Any

from lintloop import __version__


@functools.lru_cache(maxsize=1)
def engine_identity() -> str:
    """lintloop's version and sources' fingerprint, the host Python's cache tag, libcst's version."""
    return f"{__version__};{sys.implementation.cache_tag};{_libcst_version()};{_engine_fingerprint()}"


def _libcst_version() -> str:
    """libcst's version, read from its `_version.py` (written by setuptools-scm) without importing
    libcst (~80 ms; a run answered from the cache needs none of it) or importlib.metadata (~50 ms)."""
    import importlib.util

    try:
        package = importlib.util.find_spec("libcst")
        assert package is not None and package.origin is not None
        spec = importlib.util.spec_from_file_location("_libcst_version",
                                                      os.path.join(os.path.dirname(package.origin), "_version.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return str(module.__version__)
    except Exception:  # noqa: BLE001 - an unusual install: the other parts still key the entry
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("libcst")
        except PackageNotFoundError:
            return "?"


def _engine_fingerprint() -> str:
    """sha256 of the name, size and mtime of every source file of the engine and its rules (~2 ms):
    the version alone does not change when a rule is edited in a source checkout."""
    import importlib.util

    import lintloop

    # The rules' folder without importing them (a source checkout keeps them beside `lintloop/`; an
    # install, inside it: walked once).
    rules = importlib.util.find_spec("lintloop.rules")
    assert rules is not None and rules.origin is not None
    engine, rules_folder = os.path.dirname(lintloop.__file__), os.path.dirname(rules.origin)
    bases = [engine] if rules_folder.startswith(engine + os.sep) else sorted([engine, rules_folder])
    digest = hashlib.sha256()
    for base in bases:
        _digest_sources(base, "", digest)
    return digest.hexdigest()


def _digest_sources(folder: str, relative: str, digest: Any) -> None:
    """Add the name, size and mtime of each `.py` file under `folder` (named from the base) to `digest`."""
    try:
        entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError:
        return
    for entry in entries:
        try:
            if entry.name.endswith(".py") and entry.is_file():
                st = entry.stat()
                digest.update(f"{relative}{entry.name}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
            elif entry.name != "__pycache__" and entry.is_dir():
                _digest_sources(entry.path, f"{relative}{entry.name}/", digest)
        except OSError:
            continue
