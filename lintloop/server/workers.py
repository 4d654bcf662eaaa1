"""How the worker processes that analyse documents start."""

from __future__ import annotations

import multiprocessing
from multiprocessing.context import BaseContext

# What a worker runs (lint_analysis, safe_fix_changes) and the engine they use: imported once, by the fork server.
ENGINE_MODULES = ["lintloop.server.documents", "lintloop.engine"]


def worker_context() -> BaseContext:
    """Not fork: the server has threads, and a child forked from a threaded process can inherit a lock
    another thread held. A fork server where there is one: started once with the engine imported, it
    forks each worker ready to lint (a fresh worker in ~25 ms, where importing the engine takes ~0.5 s);
    elsewhere (Windows) spawn."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(ENGINE_MODULES)
    return context
