"""The layers docs/architecture.md draws, kept by reading the code: the analyses ask each other along a
graph without cycles, each declaring what it asks (`Analysis.asks`); nothing below the engine's
conductor reaches up into the cache; the folders are the import names setup.py maps them to."""

from __future__ import annotations

import ast
import graphlib
import importlib
import inspect
import pkgutil
import subprocess
import sys
from pathlib import Path

import lintloop
import lintloop.analysis
import lintloop.rules
import lintloop.runtime_probe
from lintloop.analysis.base import Analysis
from lintloop.analysis.context import FileContext

CHECKOUT = Path(__file__).resolve().parents[1]
ANALYSIS_MODULES = sorted(f"lintloop.analysis.{info.name}" for info in pkgutil.iter_modules(lintloop.analysis.__path__))


ANALYSES = FileContext.analyses()


def _tree(module: str) -> ast.Module:
    return ast.parse(Path(importlib.import_module(module).__file__).read_text())


def _asked(tree: ast.Module) -> set[str]:
    """The analyses code asks: `ctx.<attribute>` and `self.ctx.<attribute>` (docstrings aside)."""
    asked = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ANALYSES:
            owner = node.value
            if (isinstance(owner, ast.Name) and owner.id == "ctx") or (
                    isinstance(owner, ast.Attribute) and owner.attr == "ctx"):
                asked.add(node.attr)
    return asked


def _lintloop_imports(module: str) -> set[str]:
    """The lintloop modules `module` imports anywhere (under TYPE_CHECKING and in functions too)."""
    package = module if Path(importlib.import_module(module).__file__).name == "__init__.py" else \
        module.rpartition(".")[0]
    found = set()
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("lintloop")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, `level - 1` packages up
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            if base.startswith("lintloop"):
                imported = importlib.import_module(base)
                found |= {f"{base}.{alias.name}" if inspect.ismodule(getattr(imported, alias.name, None)) else base
                          for alias in node.names}
    return found - {module}


def test_every_analysis_declares_what_it_asks_and_nothing_else():
    for module in ANALYSIS_MODULES:
        if module == "lintloop.analysis.context":  # the one that builds them all
            continue
        imported = importlib.import_module(module)
        classes = [c for c in vars(imported).values()
                   if inspect.isclass(c) and issubclass(c, Analysis) and c.__module__ == module]
        own = {name for name, cls in ANALYSES.items() if cls in classes}
        declared = set().union(*(c.asks for c in classes)) if classes else set()
        assert declared <= set(ANALYSES), (module, declared - set(ANALYSES))
        assert _asked(_tree(module)) - own == declared, (
            f"{module} asks {sorted(_asked(_tree(module)) - own)}, declares {sorted(declared)}")


def test_the_analyses_ask_each_other_without_a_cycle():
    graph = {name: set(cls.asks) for name, cls in ANALYSES.items()}
    order = list(graphlib.TopologicalSorter(graph).static_order())  # raises CycleError on a cycle
    assert set(order) == set(ANALYSES)
    assert all(set(ANALYSES[name].asks) <= set(list(ANALYSES)[:place]) for place, name in enumerate(ANALYSES))
    # The foundations every other analysis stands on ask nothing of the ones built on them.
    assert graph["definitions"] == set() and graph["flow"] == {"definitions"}


def test_no_analysis_reaches_the_cache_or_the_layers_above_it():
    above = {"lintloop.cache", "lintloop.linter", "lintloop.cli", "lintloop.engine", "lintloop.runner",
             "lintloop.reporters", "lintloop.project_view", "lintloop.screen", "lintloop.rule", "lintloop.rules",
             "lintloop.runtime_probe", "lintloop.server"}
    for module in ANALYSIS_MODULES:
        reached, work = set(), [module]
        while work:  # every lintloop module it imports, and those import, ...
            for imported in _lintloop_imports(work.pop()):
                if imported not in reached:
                    reached.add(imported)
                    work.append(imported)
        assert not {m for m in reached if m in above or m.startswith(tuple(f"{a}." for a in above))}, module


def test_the_folders_are_mapped_into_lintloop_by_packaging_alone():
    """`rules/` is `lintloop.rules` and `runtime_probe/` `lintloop.runtime_probe` through setup.py's
    `package_dir` (installed, or an editable install's import hook), not a path patched at import."""
    assert len(lintloop.__path__) == 1
    engine = Path(lintloop.__path__[0])
    for package, folder in ((lintloop.rules, "rules"), (lintloop.runtime_probe, "runtime_probe")):
        (where,) = package.__path__
        assert Path(where) in (engine / folder, CHECKOUT / folder), where
    assert "__path__" not in (CHECKOUT / "lintloop/__init__.py").read_text()


def test_a_checkout_s_lintloop_folder_imported_in_place_of_the_install_says_so(tmp_path):
    """`python -m lintloop` in a checkout's root with a non-editable install imports the checkout's
    lintloop/, which holds no rules: one clear line and exit 2, no traceback (as though it were missing)."""
    starts = ("import sys; sys.modules['lintloop.rules'] = None; from lintloop.entry import main; "
              "sys.exit(main())")
    run = subprocess.run([sys.executable, "-c", starts, "rules"], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert "lintloop.rules is not in it" in run.stderr and "install this checkout editable" in run.stderr
