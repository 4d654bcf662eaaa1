"""How the worker processes that analyse documents start."""

from __future__ import annotations

import multiprocessing
import os
from multiprocessing import forkserver
from multiprocessing.context import BaseContext

# What a worker runs (lint_analysis, safe_fix_changes) and the engine they use: imported once, by the fork server.
ENGINE_MODULES = ["lintloop.server.documents", "lintloop.engine"]


def worker_context() -> BaseContext:
    """Not fork: the server has threads, and a child forked from a threaded process can inherit a lock
    another thread held. A fork server where there is one: started once with the engine imported, it
    forks each worker ready to lint (a fresh worker in ~25 ms, where importing the engine takes ~0.5 s);
    elsewhere (Windows) spawn.

    The fork server is started now, from the standard library's folder: it runs as `python -c`, which
    puts its working directory first on its module path for good (Python 3.10-3.13 leave out the path
    they are given), so from the editor's workspace a `multiprocessing/` or `astroid.py` there would run
    in it and in every worker. From the standard library's folder that entry finds only what the path
    finds anyway. (The workers keep that folder as their working directory: they read files by absolute
    path.) Called before the server starts threads: changing directory is the whole process's."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(ENGINE_MODULES)
    try:
        here: str | None = os.getcwd()
    except OSError:  # a working directory removed since the server started: nothing there to run
        here = None
    os.chdir(os.path.dirname(os.__file__))
    try:
        forkserver.ensure_running()
    finally:
        if here is not None:
            os.chdir(here)
    return context
