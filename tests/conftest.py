import ast
import os
import re
import shutil
import tempfile
import textwrap
from pathlib import Path

import pytest

from lintloop.cli import main

# Every run in the suite is the CLI's own, in whatever process the test chose: a warm engine
# (lintloop.warm_engine) would outlive the test; tests/test_warm_engine.py turns it on for its own runs.
os.environ["LINTLOOP_WARM_ENGINE"] = "0"

FIXTURES = Path(__file__).parent / "fixtures"
CHECKOUT = Path(__file__).resolve().parents[1]


def source_line(path, text):
    """The one line of `path` that starts with `text` (stripped), 1-based."""
    lines = [i for i, line in enumerate(Path(path).read_text().splitlines(), 1) if line.strip().startswith(text)]
    assert len(lines) == 1, (text, lines)
    return lines[0]


def fixture_framework(path) -> str:
    """The framework a fixture program imports: "torch", "jax" or "tensorflow"."""
    imported = re.findall(r"^\s*(?:import|from)\s+(\w+)", Path(path).read_text(), re.MULTILINE)
    return next((name for name in ("torch", "jax") if name in imported), "tensorflow")


def events_of(run, kind):
    """The probe events of one type from a `run_probe` result."""
    return [e for e in run.events if e.get("type") == kind]


@pytest.fixture
def run_cli(capsys, monkeypatch):
    """Run `lintloop ARGS` in-process from a directory; returns (exit code, stdout, stderr)."""

    def run(*args, cwd=None):
        if cwd is not None:
            monkeypatch.chdir(cwd)
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture(scope="session")
def fixture_probe_run(tmp_path_factory):
    """`fixture_probe_run(name, argv, steps=0)`: tests/fixtures/<name>.py run under the probe, once per
    session (shared by pytest-xdist's workers: see fixture_runs.py)."""
    from fixture_runs import fixture_run as run

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the folder every worker's own temporary folder is in
    folder = root / "fixture-runs"
    folder.mkdir(exist_ok=True)
    return lambda name, argv, steps=0: run(name, argv, folder, steps)


@pytest.fixture(scope="session")
def checkout_import_root():
    """A folder to put on PYTHONPATH where `import lintloop` finds this checkout laid out as installed:
    each import name of setup.py's `ROOTS` a link to its folder (`lintloop/rules` -> `rules/`). For an
    interpreter that cannot see the test environment's install (another user's, the system's). Readable
    by every user, as the checkout is."""
    setup = ast.parse((CHECKOUT / "setup.py").read_text())
    roots = next(ast.literal_eval(node.value) for node in setup.body
                 if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "ROOTS")
    root = Path(tempfile.mkdtemp(prefix="lintloop-import-root-"))
    root.chmod(0o755)
    package = root / "lintloop"
    package.mkdir(mode=0o755)
    for entry in (CHECKOUT / roots["lintloop"]).iterdir():
        (package / entry.name).symlink_to(entry)
    for name, folder in roots.items():
        if name != "lintloop":
            (root / name.replace(".", "/")).symlink_to(CHECKOUT / folder)
    yield root
    shutil.rmtree(root)


@pytest.fixture
def write(tmp_path):
    """Write a dedented source file under tmp_path and return its path."""

    def write_file(name, text, mode="w", encoding="utf-8"):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if mode == "wb":
            path.write_bytes(text)
        else:
            path.write_text(textwrap.dedent(text).lstrip(), encoding=encoding)
        return path

    return write_file


TORCH_LEAK = """\
import torch
total = 0
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    total += loss
    optimizer.zero_grad()
"""

# An unsafe fix: `.numpy()` turns the kept tensors into NumPy values.
TF_LEAK = """\
import tensorflow as tf
losses = []
for x, y in dataset:
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    losses.append(loss)
"""

TF_PRINT = """\
import tensorflow as tf

@tf.function
def step(x):
    print("x", x)
    return x
"""
