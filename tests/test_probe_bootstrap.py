"""The probe's bootstrap on its own: it runs from a copy of its directory in an interpreter
where lintloop cannot be imported, and each module of its package imports with the
standard library only, changing nothing until the probe starts.

No framework is needed: a fake `jax` package stands in for one.
"""
import ast
import json
import os
import shutil
import subprocess
import sys

import pytest

from lintloop.runtime_probe.runner import bootstrap_dir, read_events

PACKAGE = "_lintloop_probe"
PACKAGE_DIR = bootstrap_dir() / PACKAGE
MODULES = sorted(p.stem for p in PACKAGE_DIR.glob("*.py"))

SCRIPT = """\
import json, sys, warnings

report = {"lintloop_at_start": sorted(m for m in sys.modules if m.split(".")[0] == "lintloop")}
try:
    import lintloop
    report["import_lintloop"] = "ok"
except ImportError:
    report["import_lintloop"] = "failed"
warnings.warn("user warning")
sys.path.insert(0, sys.argv[1])
import jax
report["probe_files"] = sorted(m.__file__ for name, m in list(sys.modules.items())
                               if name.split(".")[0] == "_lintloop_probe")
report["bootstrap_on_path"] = [p for p in sys.path if p == sys.argv[2]]
print(json.dumps(report))
"""


def _child_env(**env):
    base = {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "LINTLOOP_PROBE_CONFIG", "LINTLOOP_PROBE_ROOT_PID")}
    return {**base, **env}


def _copy_bootstrap(tmp_path):
    boot = tmp_path / "boot"
    shutil.copytree(bootstrap_dir(), boot, ignore=shutil.ignore_patterns("__pycache__"))
    return boot


def test_bootstrap_runs_from_a_copy_of_its_directory_without_lintloop(tmp_path):
    boot = _copy_bootstrap(tmp_path)
    work = tmp_path / "work"
    (work / "lintloop").mkdir(parents=True)  # shadows an installed lintloop
    (work / "lintloop" / "__init__.py").write_text("raise ImportError('no lintloop here')\n")
    fakes = tmp_path / "fakes" / "jax"
    fakes.mkdir(parents=True)
    (fakes / "__init__.py").write_text("__version__ = '0.0.fake'\n")
    script = work / "script.py"
    script.write_text(SCRIPT)
    events_path = tmp_path / "events.jsonl"
    config = {"events": str(events_path), "steps": 0}
    proc = subprocess.run(
        [sys.executable, str(script), str(fakes.parent), str(boot)], cwd=work, capture_output=True,
        text=True, timeout=60,
        env=_child_env(PYTHONPATH=str(boot), LINTLOOP_PROBE_CONFIG=json.dumps(config)))
    assert proc.returncode == 0, proc.stderr
    assert "lintloop probe" not in proc.stderr, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["lintloop_at_start"] == [] and report["import_lintloop"] == "failed"
    assert report["probe_files"] and all(f.startswith(str(boot)) for f in report["probe_files"])
    assert str(boot / PACKAGE / "jax_hooks.py") in report["probe_files"]  # loaded lazily
    assert report["bootstrap_on_path"] == []

    events = read_events(events_path)
    kinds = [e["type"] for e in events]
    assert kinds == ["start", "warning", "framework", "stop"], events
    assert events[0]["root"] is True and events[0]["config"]["steps"] == 0
    warning = events[1]
    line = SCRIPT.splitlines().index('warnings.warn("user warning")') + 1
    assert (warning["file"], warning["line"]) == (str(script), line)
    assert events[2]["framework"] == "jax" and events[2]["version"] == "0.0.fake"
    assert events[3]["reason"] == "exit"


def test_without_a_config_the_bootstrap_loads_nothing(tmp_path):
    boot = _copy_bootstrap(tmp_path)
    code = ("import sys; print(sorted(m for m in sys.modules"
            " if m.split('.')[0] in ('lintloop', '_lintloop_probe')),"
            " [p for p in sys.path if p == sys.argv[1]])")
    proc = subprocess.run([sys.executable, "-c", code, str(boot)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60,
                          env=_child_env(PYTHONPATH=str(boot)))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[] []"


IMPORT_CHECK = """\
import builtins, json, sys, threading, warnings, importlib

def hooks():
    return [sys.excepthook, threading.excepthook, warnings.showwarning, builtins.print,
            list(sys.meta_path), list(sys.path_hooks)]

before, hooks_before = set(sys.modules), hooks()
sys.path.insert(0, sys.argv[1])
importlib.import_module(sys.argv[2])
sys.path.pop(0)
new = set(sys.modules) - before
print(json.dumps({
    "not_stdlib": sorted(m for m in new if m.split(".")[0] not in sys.stdlib_module_names
                         and m.split(".")[0] != "_lintloop_probe"),
    "hooks_changed": hooks() != hooks_before,
}))
"""


@pytest.mark.parametrize("module", MODULES)
def test_each_module_imports_with_the_standard_library_only(module):
    name = PACKAGE if module == "__init__" else f"{PACKAGE}.{module}"
    proc = subprocess.run([sys.executable, "-I", "-c", IMPORT_CHECK, str(bootstrap_dir()), name],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report == {"not_stdlib": [], "hooks_changed": False}


def test_the_package_never_imports_lintloop():
    """The child interpreter (`--python`) may have the frameworks but not lintloop."""
    for path in [bootstrap_dir() / "sitecustomize.py", *PACKAGE_DIR.glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] if node.level == 0 else []
            else:
                continue
            assert not any(n.split(".")[0] == "lintloop" for n in names), (path.name, names)
