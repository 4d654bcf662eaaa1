"""The warm engine (lintloop.warm_engine): a check it runs prints and exits as the CLI's own run does;
the first check starts it, the next is answered by it, it ends when idle, replaces a stale socket, and
is never used from a folder others could plant a socket in."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from lintloop import warm_engine

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "win32", reason="needs fork and AF_UNIX")

TRAINING = """import torch
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
running_loss = 0
for x, y in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    running_loss += loss
"""
# `lintloop ARGS` as the console script runs it; the file named by $RAN_BY says which process ran the
# command: the CLI imported here, or not (the warm engine ran it).
LINTLOOP = ("import os, sys; from lintloop.entry import main; status = main(); "
            "open(os.environ['RAN_BY'], 'w').write('here' if 'lintloop.cli' in sys.modules else 'warm engine'); "
            "sys.exit(status)")


@pytest.fixture
def runtime(monkeypatch):
    """A folder of warm engines of this test's own (XDG_RUNTIME_DIR: short, as a socket's path must
    be); each engine is ended afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="ll-"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    monkeypatch.setenv(warm_engine.SWITCH, "1")
    monkeypatch.setenv(warm_engine.IDLE_SETTING, "60")
    yield folder
    warm_engine.end_engines(str(folder / "lintloop"))
    shutil.rmtree(folder, ignore_errors=True)


def _lintloop(project: Path, *args: str, switch: str = "1") -> tuple[int, str, str, str]:
    """(exit status, stdout, stderr, which process ran it)"""
    marker = project / ".ran-by"
    done = subprocess.run([sys.executable, "-c", LINTLOOP, *args], cwd=project, capture_output=True, text=True,
                          env={**os.environ, warm_engine.SWITCH: switch, "RAN_BY": str(marker)}, timeout=120)
    return done.returncode, done.stdout, done.stderr, marker.read_text()


def _listening(runtime: Path) -> bool:
    return any(path.is_socket() for path in (runtime / "lintloop").glob("*.sock"))


def _wait_for(condition, seconds: float = 60.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def project(tmp_path):
    (tmp_path / "lintloop.toml").write_text("")
    (tmp_path / "train.py").write_text(TRAINING)
    (tmp_path / "clean.py").write_text("import torch\nx = torch.zeros(3)\n")
    return tmp_path


@pytest.mark.parametrize("args", [("check", "train.py"), ("check", "--no-cache", "--format", "json", "train.py"),
                                  ("check", "clean.py"), ("check", "--select", "LL999", "train.py"),
                                  ("check", "missing.py")])
def test_a_check_run_by_the_warm_engine_prints_and_exits_as_its_own_run(runtime, project, args):
    code, out, err, ran_by = _lintloop(project, *args, switch="0")
    assert ran_by == "here"
    first = _lintloop(project, *args)  # no warm engine yet: run here, one started
    assert first == (code, out, err, "here")
    assert _wait_for(lambda: _listening(runtime))
    assert _lintloop(project, *args) == (code, out, err, "warm engine")


def test_only_check_goes_to_the_warm_engine(runtime, project):
    _lintloop(project, "check", "train.py")
    assert _wait_for(lambda: _listening(runtime))
    assert _lintloop(project, "rule", "LL301")[3] == "here"
    assert _lintloop(project, "fix", "--diff", "train.py")[3] == "here"


def _children(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads a process's children from /proc")
@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGKILL])
def test_ctrl_c_or_a_killed_client_ends_the_run_in_the_warm_engine(runtime, project, signal_number):
    """Ctrl-C reaches the run (its exit status as the CLI's own: 130); a client killed outright takes
    its run and workers with it. The warm engine itself stays."""
    loop = TRAINING.replace("import torch\n", "")
    for index in range(8):
        (project / f"big{index}.py").write_text("import torch\n" + "".join(
            f"def train{n}(model, loader, optimizer):\n" + "".join(f"    {line}\n" for line in loop.splitlines())
            for n in range(300)))
    _lintloop(project, "check", "train.py")
    assert _wait_for(lambda: _listening(runtime))
    engine = int(next((runtime / "lintloop").glob("*.lock")).read_text())
    files = [f"big{i}.py" for i in range(8)]
    client = subprocess.Popen([sys.executable, "-c", LINTLOOP, "check", "--no-cache", *files], cwd=project,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "RAN_BY": str(project / ".ran-by")})
    assert _wait_for(lambda: _children(engine), seconds=30)  # the run started
    client.send_signal(signal_number)
    status = client.wait(timeout=60)
    assert status == (130 if signal_number == signal.SIGINT else -signal.SIGKILL)
    assert _wait_for(lambda: not _children(engine), seconds=30)
    os.kill(engine, 0)  # still there


def test_a_warm_engine_ends_when_idle_and_a_stale_socket_is_replaced(runtime, project, monkeypatch):
    monkeypatch.setenv(warm_engine.IDLE_SETTING, "1")
    (runtime / "lintloop").mkdir(mode=0o700)
    monkeypatch.chdir(project)
    # The address is named by this process's module path: the test's runs use the same one.
    address = json.loads(subprocess.run(
        [sys.executable, "-c", "import json; from lintloop import warm_engine as w; print(json.dumps(w._address()))"],
        capture_output=True, text=True, check=True).stdout)
    Path(address).write_text("")  # left by an engine that died: nothing listens there
    assert _lintloop(project, "check", "train.py")[3] == "here"
    assert _wait_for(lambda: Path(address).is_socket())
    assert _wait_for(lambda: not Path(address).exists(), seconds=30)  # a second without a run: gone


@pytest.mark.parametrize("setting, ci, expected", [("", "", True), ("", "true", False), ("1", "true", True),
                                                    ("0", "", False)])
def test_on_by_default_off_under_ci_and_by_its_switch(monkeypatch, setting, ci, expected):
    monkeypatch.setenv(warm_engine.SWITCH, setting)
    monkeypatch.setenv("CI", ci)
    assert warm_engine.enabled() is expected


def test_a_folder_others_can_enter_or_a_link_is_not_used(tmp_path, monkeypatch):
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    (runtime / "lintloop").mkdir()
    os.chmod(runtime / "lintloop", 0o777)
    assert warm_engine._folder() is None
    (runtime / "lintloop").rmdir()
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    (runtime / "lintloop").symlink_to(tmp_path / "elsewhere")
    assert warm_engine._folder() is None
    (runtime / "lintloop").unlink()
    assert warm_engine._folder() == str(runtime / "lintloop")
    assert (os.stat(runtime / "lintloop").st_mode & 0o777) == 0o700
    # A socket's path too long for the system: no warm engine.
    deep = runtime / ("d" * 90)
    deep.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(deep))
    assert warm_engine._address() is None
