"""The VS Code extension (editors/vscode): built by its script into a .vsix, its test run on the way —
under node with a fake VS Code API, its client code starting this lintloop's real server (the VS Code
test runner needs a VS Code download)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

EXTENSION = Path(__file__).resolve().parent.parent / "editors" / "vscode"


def test_the_settings_name_the_executable_its_arguments_and_the_probe_command():
    manifest = json.loads((EXTENSION / "package.json").read_text())
    settings = manifest["contributes"]["configuration"]["properties"]
    assert {"lintloop.path", "lintloop.interpreter", "lintloop.args", "lintloop.probe.command"} <= settings.keys()
    assert manifest["dependencies"].keys() == {"vscode-languageclient"}
    assert (EXTENSION / "package-lock.json").is_file()  # `npm ci` installs exactly what was tested


@pytest.mark.skipif(shutil.which("npm") is None, reason="the extension is built with node and npm, not installed here")
def test_the_build_script_tests_the_extension_and_packages_it(tmp_path):
    source = tmp_path / "vscode"
    shutil.copytree(EXTENSION, source, ignore=shutil.ignore_patterns("node_modules", "out", "*.vsix"))
    built = subprocess.run(["bash", "build.sh"], cwd=source, capture_output=True, text=True, timeout=600,
                           env={**os.environ, "LINTLOOP_PYTHON": sys.executable})
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    assert "# fail 0" in built.stdout and "# pass 4" in built.stdout, built.stdout[-4000:]
    with zipfile.ZipFile(source / "lintloop.vsix") as vsix:
        names = set(vsix.namelist())
    assert {"extension/package.json", "extension/out/extension.js", "extension/out/client.js"} <= names
    assert any(name.startswith("extension/node_modules/vscode-languageclient/") for name in names)
    assert not any(name.startswith("extension/out/test/") or name.startswith("extension/src/") for name in names)
