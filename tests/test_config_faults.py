"""Configuration and cache faults (issue 14, item 6), and hierarchical configuration.

A bad configuration is one line naming the file, the line and the key, exit 2, never a traceback.
Each file is linted with the closest configuration above it, as ruff does. A damaged or hostile
cache entry is a miss: never unpickled, never followed, never a hang.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from lintloop import cache as cache_module
from lintloop.cache import ResultCache, encode_entry
from lintloop.runner import Job, run_job

from conftest import TF_PRINT, TORCH_LEAK


def concise(run_cli, *args, cwd=None):
    code, out, err = run_cli("check", *args, "--format", "concise", "--no-cache", cwd=cwd)
    return code, sorted(line.split(" ")[0] + " " + line.split(" ")[1] for line in out.splitlines()), err


def config_error(run_cli, tmp_path, *args):
    code, out, err = run_cli("check", *args, cwd=tmp_path)
    assert code == 2 and out == "", (code, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


# -- configuration errors -----------------------------------------------------------------------

@pytest.mark.parametrize("name,text,expected", [
    # malformed TOML: tomllib's line and column
    ("pyproject.toml", '[tool.lintloop]\nselect = ["LL1"\n', "pyproject.toml:3:1: cannot read configuration: invalid TOML"),
    ("pyproject.toml", '[tool.lintloop]\nselect = [\n  "LL1",\n  LL2,\n]\n', "pyproject.toml:4:3: cannot read"),
    ("lintloop.toml", 'select = ["LL1"]\nselect = ["LL2"]\n', "lintloop.toml:2:"),
    # wrong types
    ("pyproject.toml", '[tool.lintloop]\n\nselect = "LL1"\n', "pyproject.toml:3: [tool.lintloop] select: must be a list of strings"),
    ("pyproject.toml", '[tool.lintloop]\nignore = [301]\n', "pyproject.toml:2: [tool.lintloop] ignore: must be a list"),
    ("pyproject.toml", '[tool.lintloop]\njobs = "4"\n', "pyproject.toml:2: [tool.lintloop] jobs: must be an integer"),
    ("pyproject.toml", '[tool.lintloop]\njobs = true\n', "jobs: must be an integer"),
    ("pyproject.toml", '[tool.lintloop]\njobs = 0\n', "pyproject.toml:2: [tool.lintloop] jobs: must be at least 1"),
    ("pyproject.toml", '[tool.lintloop]\nunsafe-fixes = "yes"\n', "pyproject.toml:2: [tool.lintloop] unsafe-fixes: must be true or false"),
    ("pyproject.toml", '[tool.lintloop]\nper-file-ignores = ["a.py"]\n', "pyproject.toml:2: [tool.lintloop] per-file-ignores: must be a table"),
    ("pyproject.toml", '[tool.lintloop.per-file-ignores]\n"tests/*" = "LL301"\n',
     'pyproject.toml:2: [tool.lintloop] per-file-ignores."tests/*": must be a list of codes'),
    ("pyproject.toml", '[tool]\nlintloop = 3\n', "pyproject.toml:2: tool.lintloop: must be a table"),
    ("pyproject.toml", '[tool.lintloop]\nrules = ["LL402"]\n', "pyproject.toml:2: [tool.lintloop] rules: must be a table"),
    ("pyproject.toml", '[tool.lintloop.rules]\nLL402 = 2\n', "pyproject.toml:2: [tool.lintloop] rules.LL402: must be a table"),
    # unknown codes, wherever codes are listed
    ("pyproject.toml", '[tool.lintloop]\nselect = ["LL999"]\n', "pyproject.toml:2: [tool.lintloop] select: unknown rule code or name: 'LL999'"),
    ("pyproject.toml", '[tool.lintloop]\nselect = [\n  "LL1",\n  "LL999",\n]\n', "pyproject.toml:4: [tool.lintloop] select: unknown"),
    ("pyproject.toml", '[tool.lintloop]\n# x\nignore = ["E501"]\n', "pyproject.toml:3: [tool.lintloop] ignore: unknown rule code or name: 'E501'"),
    ("pyproject.toml", '[tool.lintloop]\nextend-select = ["nope"]\n', "pyproject.toml:2: [tool.lintloop] extend-select: unknown"),
    ("pyproject.toml", '[tool.lintloop.per-file-ignores]\n"a.py" = ["LL301"]\n"b/*" = ["XX1"]\n',
     "pyproject.toml:3: [tool.lintloop] per-file-ignores.\"b/*\": unknown rule code or name: 'XX1'"),
    ("lintloop.toml", '\n\nignore = ["ZZ9"]\n', "lintloop.toml:3: ignore: unknown rule code or name: 'ZZ9'"),
    # unknown keys and rule options, bad option values
    ("pyproject.toml", '[tool.lintloop]\nselect = ["LL1"]\nselct = ["LL1"]\n', "pyproject.toml:3: [tool.lintloop]: unknown key 'selct'"),
    ("pyproject.toml", '[tool.lintloop.rules.LL777]\nx = 1\n', "pyproject.toml:1: [tool.lintloop] rules.LL777: unknown rule code"),
    ("pyproject.toml", '[tool.lintloop.rules.LL402]\ncolour = 1\n', "pyproject.toml:2: [tool.lintloop] rules.LL402.colour: unknown option 'colour'"),
    ("pyproject.toml", '[tool.lintloop.rules.LL402]\n\nkeras = 4\n', "pyproject.toml:3: [tool.lintloop] rules.LL402.keras: must be one of 2, 3"),
    ("pyproject.toml", '[tool.lintloop.rules.LL402]\nkeras = true\n', "rules.LL402.keras: must be one of 2, 3"),
    ("pyproject.toml", '[tool.lintloop.rules.dataset-without-prefetch]\ntf_injects_prefetch = 1\n',
     "pyproject.toml:2: [tool.lintloop] rules.dataset-without-prefetch.tf_injects_prefetch: must be one of true, false"),
    # dotted keys and inline tables
    ("pyproject.toml", '# top\n\ntool.lintloop.select = ["LL999"]\n[project]\nname = "x"\n', "pyproject.toml:3: [tool.lintloop] select: unknown"),
    ("pyproject.toml", '[tool.lintloop]\nrules = { LL402 = { keras = 9 } }\n', "pyproject.toml:2: [tool.lintloop] rules.LL402.keras: must be one of"),
    # TOML nested deeper than any configuration (tomllib's own limit depends on the stack), or with more
    # digits than Python converts: the line where the nesting goes too deep
    ("pyproject.toml", '[tool.lintloop]\nselect = ["LL1"]\nx = ' + "[" * 100_000 + "]" * 100_000 + "\n",
     "pyproject.toml:3: cannot read configuration: invalid TOML: arrays or inline tables nested more than 100 deep"),
    ("pyproject.toml", '[tool.lintloop]\nselect = ["LL1"]  # [[[[ a comment\nnote = "[[[["\n[tool.other]\nx = [\n  '
     + "{a = " * 5_000 + "1" + "}" * 5_000 + "\n]\n",
     "pyproject.toml:6: cannot read configuration: invalid TOML: arrays or inline tables nested more than 100 deep"),
    ("lintloop.toml", "x = [\n" + "[" * 50 + "\n" + "{a = [" * 25 + "1" + "]}" * 25 + "]" * 50 + "]\n",
     "lintloop.toml:3: cannot read configuration: invalid TOML: arrays or inline tables nested more than 100 deep"),
    ("pyproject.toml", '[tool.lintloop]\njobs = ' + "1" * 5_000 + "\n",
     "pyproject.toml: cannot read configuration: invalid TOML: Exceeds the limit (4300"),  # Python's words, per version
    # patterns that pathspec cannot compile, in every option that holds patterns
    ("lintloop.toml", 'exclude = ["\\\\"]\n', "lintloop.toml:1: exclude: invalid pattern '\\\\': not gitignore syntax"),
    ("pyproject.toml", '[tool.lintloop]\nexclude = ["\\\\"]\n',
     "pyproject.toml:2: [tool.lintloop] exclude: invalid pattern '\\\\': not gitignore syntax"),
    ("pyproject.toml", '[tool.lintloop]\nextend-exclude = [\n  "build/",\n  "!",\n]\n',
     "pyproject.toml:4: [tool.lintloop] extend-exclude: invalid pattern '!': not gitignore syntax"),
    ("pyproject.toml", '[tool.lintloop]\ninclude = ["[z-a].py"]\n',
     "pyproject.toml:2: [tool.lintloop] include: invalid pattern '[z-a].py': bad character range z-a"),
    ("pyproject.toml", "[tool.lintloop]\nextend-include = ['src/\\']\n",
     "pyproject.toml:2: [tool.lintloop] extend-include: invalid pattern 'src/\\\\': not gitignore syntax"),
    ("pyproject.toml", '[tool.lintloop.per-file-ignores]\n"tests/*" = ["LL301"]\n"\\\\" = ["LL301"]\n',
     'pyproject.toml:3: [tool.lintloop] per-file-ignores."\\\\": invalid pattern: not gitignore syntax'),
    ("pyproject.toml", '[tool.lintloop]\nper-file-ignores = { "!" = ["LL301"] }\n',
     'pyproject.toml:2: [tool.lintloop] per-file-ignores."!": invalid pattern: not gitignore syntax'),
    # items of the wrong type, absurdly long values (cut short: the message stays one short line)
    ("pyproject.toml", '[tool.lintloop]\nexclude = ["build/", 3]\n', "pyproject.toml:2: [tool.lintloop] exclude: must be a list of strings"),
    ("pyproject.toml", '[tool.lintloop.per-file-ignores]\n"a.py" = [301]\n',
     'pyproject.toml:2: [tool.lintloop] per-file-ignores."a.py": must be a list of codes'),
    ("pyproject.toml", '[tool.lintloop]\nselect = ["' + "LL9" * 50_000 + '"]\n',
     f"pyproject.toml:2: [tool.lintloop] select: unknown rule code or name: {'LL9' * 20!r}... (150000 characters) "
     "(see `lintloop rules`)"),
    ("pyproject.toml", "[tool.lintloop]\n" + "k" * 100_000 + " = 1\n",
     f"pyproject.toml:2: [tool.lintloop]: unknown key {'k' * 60!r}... (100000 characters) (known: "),
    ("pyproject.toml", '[tool.lintloop.per-file-ignores]\n"' + "d/" * 500 + '" = ["ZZ1"]\n',
     f'pyproject.toml:2: [tool.lintloop] per-file-ignores."{"d/" * 30}"... (1000 characters): '
     "unknown rule code or name: 'ZZ1'"),
])
def test_a_bad_configuration_is_one_line_naming_file_line_and_key(run_cli, write, tmp_path, name, text, expected):
    (tmp_path / name).write_text(text)
    write("a.py", "x = 1\n")
    line = config_error(run_cli, tmp_path, "a.py")
    assert expected in line and len(line) < 320


def test_valid_rule_options_are_accepted(run_cli, write, tmp_path):
    write("pyproject.toml", """
        [tool.lintloop.rules.LL402]
        keras = 2
        [tool.lintloop.rules.dataset-without-prefetch]
        tf_injects_prefetch = false
    """)
    write("a.py", "x = 1\n")
    assert concise(run_cli, "a.py", cwd=tmp_path)[:2] == (0, [])


@pytest.mark.parametrize("nested", ["[" * 100 + "]" * 100, "{a = " * 100 + "1" + "}" * 100,
                                    "[" * 50 + "{a = [" * 25 + "1" + "]}" * 25 + "]" * 50])
def test_a_configuration_nested_as_deep_as_the_bound_is_read(run_cli, write, tmp_path, nested):
    write("pyproject.toml", '[tool.lintloop]\nselect = ["LL1"]\n[tool.other]\nx = ' + nested + "\n")
    write("a.py", "x = 1\n")
    assert concise(run_cli, "a.py", cwd=tmp_path)[:2] == (0, [])


def test_a_configuration_that_is_not_utf8_names_its_line(run_cli, write, tmp_path):
    write("pyproject.toml", b'[tool.lintloop]\nselect = ["LL1"]  # caf\xe9\n', mode="wb")
    write("a.py", "x = 1\n")
    assert "pyproject.toml:2: cannot read configuration: not UTF-8 text" in config_error(run_cli, tmp_path, "a.py")


@pytest.mark.parametrize("kind", ["directory", "fifo", "device"])
def test_a_configuration_that_is_no_regular_file_is_one_line_not_a_hang(write, tmp_path, kind):
    """`--config` naming a directory, a FIFO (a reader would wait for a writer for ever) or a device."""
    write("a.py", "x = 1\n")
    if kind == "directory":
        (tmp_path / "conf").mkdir()
        config, expected = "conf", "conf: cannot read configuration: a directory, not a file"
    elif kind == "fifo":
        if not hasattr(os, "mkfifo"):
            pytest.skip("no FIFOs here")
        os.mkfifo(tmp_path / "conf")
        config, expected = "conf", "conf: cannot read configuration: not a regular file (a FIFO, socket or device)"
    else:
        if not os.path.exists("/dev/zero"):
            pytest.skip("no /dev/zero")
        config, expected = "/dev/zero", "/dev/zero: cannot read configuration: not a regular file (a FIFO, socket or device)"
    result = subprocess.run([sys.executable, "-m", "lintloop", "check", "--config", config, "a.py"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", f"lintloop: error: {expected}\n")


def test_a_bad_command_line_code_names_the_option(run_cli, write, tmp_path):
    write("a.py", "x = 1\n")
    assert "--extend-select: unknown rule code or name: 'LL999'" in config_error(
        run_cli, tmp_path, "a.py", "--extend-select", "LL999")


def test_a_pyproject_that_is_not_for_lintloop_is_passed_over_even_if_broken(run_cli, write, tmp_path):
    write("lintloop.toml", 'ignore = ["LL301"]\n')
    write("sub/pyproject.toml", 'tool = 5\n')  # not ours, whatever else it is
    write("sub/deeper/pyproject.toml", '[tool.black]\nline-length = 100\n')
    write("sub/deeper/data/pyproject.toml", '[project\nname = "broken test data of another tool"\n')
    write("sub/deeper/data/leak.py", TORCH_LEAK)
    write("sub/deeper/leak.py", TORCH_LEAK)
    assert concise(run_cli, ".", cwd=tmp_path)[:2] == (0, [])


def test_an_unreadable_configuration_is_a_clear_error_as_a_user(tmp_path):
    """As an unprivileged user (root reads anything): `setpriv` drops privileges in a subprocess."""
    if shutil.which("setpriv") is None or not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("needs root and setpriv to run as another user")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    config = tmp_path / "pkg" / "lintloop.toml"
    config.write_text('select = ["LL1"]\n')
    config.chmod(0o000)
    # The user must reach the project: open the test's directories (below the temp root) to all.
    opened = [tmp_path / "pkg", tmp_path, *itertools.takewhile(
        lambda p: p != Path(tempfile.gettempdir()), tmp_path.parents)]
    modes = {directory: directory.stat().st_mode for directory in opened}
    try:
        for directory in opened:
            directory.chmod(modes[directory] | 0o005)
        result = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                 sys.executable, "-m", "lintloop", "check", "--no-cache", "pkg/a.py"],
                                cwd=tmp_path, capture_output=True, text=True, timeout=60)
    finally:
        for directory, mode in modes.items():
            directory.chmod(mode)
    if "lintloop" not in result.stderr:
        pytest.skip(f"the unprivileged user cannot run lintloop here: {result.stderr.strip()[:200]}")
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == "lintloop: error: pkg/lintloop.toml: cannot read configuration: Permission denied"


# -- hierarchical configuration -----------------------------------------------------------------

@pytest.fixture
def nested(write, tmp_path):
    """A project whose sub-package has its own configuration (relative paths, its own selection)."""
    write("pyproject.toml", """
        [tool.lintloop]
        extend-select = ["LL003"]
        [tool.lintloop.per-file-ignores]
        "legacy/*" = ["LL301"]
    """)
    write("sub/pyproject.toml", """
        [project]
        name = "sub"
        [tool.lintloop]
        extend-exclude = ["generated/"]
        [tool.lintloop.per-file-ignores]
        "old/*" = ["LL301"]
    """)
    for name in ("leak.py", "legacy/leak.py", "old/leak.py", "sub/leak.py", "sub/legacy/leak.py",
                 "sub/old/leak.py", "sub/generated/leak.py"):
        write(name, TORCH_LEAK)
    write("unused.py", "x = 1  # lintloop: ignore[LL301]\n")
    write("sub/unused.py", "x = 1  # lintloop: ignore[LL301]\n")
    return tmp_path


ROOT_FINDINGS = ["leak.py:7:5: LL301", "old/leak.py:7:5: LL301", "unused.py:1:8: LL003"]
SUB_FINDINGS = ["leak.py:7:5: LL301", "legacy/leak.py:7:5: LL301"]  # relative to sub/


def test_each_subtree_is_linted_with_its_closest_configuration(run_cli, nested):
    code, found, err = concise(run_cli, ".", cwd=nested)
    assert code == 1, err
    # The root's per-file-ignores and extend-select do not reach sub/ (no merging); sub/'s own
    # per-file-ignores and exclude are relative to sub/.
    assert found == sorted(ROOT_FINDINGS + [f"sub/{f}" for f in SUB_FINDINGS])


def test_the_closest_configuration_applies_from_any_working_directory(run_cli, nested):
    assert concise(run_cli, ".", cwd=nested / "sub")[1] == SUB_FINDINGS
    from_sub = concise(run_cli, "..", cwd=nested / "sub")[1]
    assert from_sub == sorted([f"../{f}" for f in ROOT_FINDINGS] + [f"../sub/{f}" for f in SUB_FINDINGS])
    # A file named on the command line gets its own configuration too, and is linted though excluded.
    assert concise(run_cli, "sub/old/leak.py", "sub/generated/leak.py", "old/leak.py", cwd=nested)[1] == [
        "old/leak.py:7:5: LL301", "sub/generated/leak.py:7:5: LL301"]
    assert concise(run_cli, "sub/generated/leak.py", "--force-exclude", cwd=nested)[:2] == (0, [])


def test_config_forces_one_configuration_and_command_line_options_apply_to_every_one(run_cli, nested, write):
    forced = write("ci/lintloop.toml", 'select = ["LL3"]\n')
    code, found, _ = concise(run_cli, "sub", "--config", forced, cwd=nested)
    # sub/'s exclude and per-file-ignores are not read: all of sub/ is linted with the forced file.
    assert code == 1 and found == sorted(
        f"sub/{p}:7:5: LL301" for p in ("generated/leak.py", "leak.py", "legacy/leak.py", "old/leak.py"))
    assert "sub/unused.py:1:8: LL003" in concise(run_cli, ".", "--extend-select", "LL003", cwd=nested)[1]
    assert concise(run_cli, ".", "--ignore", "LL301", cwd=nested)[:2] == (0, [])


def test_a_broken_configuration_below_is_reported_when_its_files_are_linted(run_cli, nested):
    (nested / "sub" / "pyproject.toml").write_text('[tool.lintloop]\nignore = ["LL3010"]\n')
    assert "sub/pyproject.toml:2: [tool.lintloop] ignore: unknown rule code or name: 'LL3010'" in config_error(
        run_cli, nested, ".")
    assert concise(run_cli, "leak.py", cwd=nested)[1] == ["leak.py:7:5: LL301"]  # the root's files alone are fine


def test_fix_applies_each_subtree_its_own_selection(run_cli, write, tmp_path):
    write("lintloop.toml", 'ignore = ["LL301"]\n')
    write("vendor/lintloop.toml", 'select = ["LL3"]\n')  # LL201 (print under tf.function) is off below
    write("step.py", TF_PRINT)
    write("vendor/step.py", TF_PRINT)
    _, _, err = run_cli("fix", ".", "--no-cache", cwd=tmp_path)
    assert "Fixed 1 finding in 1 file." in err, err
    assert (tmp_path / "step.py").read_text() != TF_PRINT and (tmp_path / "vendor" / "step.py").read_text() == TF_PRINT


def test_lintloop_toml_wins_over_pyproject_in_one_directory(run_cli, write, tmp_path):
    write("pyproject.toml", '[tool.lintloop]\nselect = ["LL3"]\n')
    write("lintloop.toml", 'select = ["LL2"]\n')
    write("leak.py", TORCH_LEAK)
    assert concise(run_cli, ".", cwd=tmp_path)[:2] == (0, [])


def test_the_cache_keys_each_file_on_its_own_settings(run_cli, nested):
    def cached():
        _, out, _ = run_cli("check", ".", "--format", "concise", cwd=nested)
        return sorted(line.split(" ")[0] for line in out.splitlines())

    first = cached()
    assert cached() == first and "sub/old/leak.py:7:5:" not in first
    (nested / "sub" / "pyproject.toml").write_text('[tool.lintloop]\nextend-exclude = ["generated/"]\n')
    assert "sub/old/leak.py:7:5:" in cached()


# -- cache faults -------------------------------------------------------------------------------

CODES = ("LL001", "LL301")


@pytest.fixture
def cached_file(tmp_path):
    """A linted file, its cache with one entry, the entry's path and the findings."""
    source = tmp_path / "leak.py"
    source.write_text(TORCH_LEAK)
    cache = ResultCache.open(tmp_path)
    job = Job(str(source), "leak.py", CODES, "{}", "check", cache_dir=str(cache.directory))
    expected = run_job(job).findings
    (entry,) = cache.directory.glob("??/*.json")
    return job, entry, expected


def run_within(job, seconds=20):
    """run_job in a thread: a hang fails the test instead of stalling the suite."""
    outcome = []
    worker = threading.Thread(target=lambda: outcome.append(run_job(job)), daemon=True)
    worker.start()
    worker.join(seconds)
    assert outcome, f"run_job still running after {seconds} s"
    return outcome[0]


def replace_entry(entry, make):
    entry.unlink()
    make(entry)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_in_place_of_an_entry_is_a_miss_not_a_hang(cached_file):
    job, entry, expected = cached_file
    replace_entry(entry, os.mkfifo)
    try:
        result = run_within(job)
    finally:
        with open(os.open(entry, os.O_RDWR | os.O_NONBLOCK), "wb", closefd=True):
            pass  # unblocks a reader, should the test have failed
    assert result.findings == expected and not result.errors
    assert result.cache_written and entry.is_file() and not entry.is_symlink()  # replaced by a real entry


@pytest.mark.parametrize("target", ["/dev/zero", "valid entry elsewhere"])
def test_a_symlinked_entry_is_never_followed(cached_file, tmp_path, target):
    job, entry, expected = cached_file
    if target == "/dev/zero":
        if not os.path.exists("/dev/zero"):
            pytest.skip("no /dev/zero")
        pointed = "/dev/zero"
    else:  # a real entry, where another (possibly hostile) user controls what it says
        pointed = tmp_path / "elsewhere.json"
        pointed.write_bytes(entry.read_bytes())
    replace_entry(entry, lambda path: path.symlink_to(pointed))
    result = run_within(job)
    assert result.findings == expected and not result.errors
    assert result.cache_written and entry.is_file() and not entry.is_symlink()  # replaced by a real entry


@pytest.mark.parametrize("where", ["entry", "finding", "fix", "edit"])
def test_an_entry_with_a_field_it_was_not_written_with_is_a_miss(cached_file, where):
    job, entry, expected = cached_file
    data = json.loads(entry.read_bytes())
    finding = data["findings"][0]
    if finding["fix"] is None:
        finding["fix"] = {"applicability": "safe", "description": "d",
                          "edits": [{"line": 1, "column": 1, "end_line": 1, "end_column": 1, "content": ""}]}
    target = {"entry": data, "finding": finding, "fix": finding["fix"], "edit": finding["fix"]["edits"][0]}[where]
    target["__reduce__"] = "os.system"
    data["sha256"] = cache_module.hashlib.sha256(cache_module._canonical(data["findings"])).hexdigest()
    entry.write_text(json.dumps(data))
    result = run_job(job)
    assert result.findings == expected and result.cache_written  # a miss, rewritten


def test_an_unreadable_entry_is_a_miss(cached_file, monkeypatch):
    """Simulated (root reads anything): opening the entry fails with EACCES."""
    job, entry, expected = cached_file
    real_open = os.open

    def refuse(path, *args, **kwargs):
        if os.path.basename(os.fspath(path)) == entry.name:  # opened by name, relative to its shard
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(cache_module.os, "open", refuse)
    result = run_job(job)
    assert result.findings == expected and not result.errors


@pytest.mark.parametrize("dependency", ["fifo", "/dev/zero"])
def test_a_hostile_dependency_path_is_never_read(cached_file, tmp_path, dependency):
    """An entry with a valid digest naming a FIFO or a device among the files its findings depend
    on: a miss at once (a blocking open or an endless read would hang every run)."""
    job, entry, expected = cached_file
    if dependency == "fifo":
        if not hasattr(os, "mkfifo"):
            pytest.skip("no FIFOs here")
        dependency = str(tmp_path / "pipe")
        os.mkfifo(dependency)
    elif not os.path.exists(dependency):
        pytest.skip("no /dev/zero")
    key = json.loads(entry.read_bytes())["key"]
    entry.write_bytes(encode_entry(key, [], {dependency: cache_module.ABSENT}))
    result = run_within(job)
    assert result.findings == expected and result.cache_written


def test_a_dependency_that_is_a_real_module_still_hits(cached_file, tmp_path):
    job, entry, expected = cached_file
    module = tmp_path / "helpers.py"
    module.write_text("def f():\n    return 1\n")
    key = json.loads(entry.read_bytes())["key"]
    from lintloop.digests import file_digest

    entry.write_bytes(encode_entry(key, expected, {str(module): file_digest(str(module)),
                                                   str(tmp_path / "absent.py"): cache_module.ABSENT}))
    assert run_job(job).cache_written is False  # a hit
    module.write_text("def f():\n    return 2\n")
    assert run_job(job).cache_written is True  # the module changed: a miss


# ----- a repository's configuration does not decide the machine's load (issue 36) ------------------


@pytest.fixture
def started_pools(monkeypatch):
    """The number of workers each pool of the run was started with."""
    import lintloop.cli
    import lintloop.runner

    sizes: list[int] = []
    for module in (lintloop.cli, lintloop.runner):
        original = module.WorkerPool

        class CountedPool(original):  # type: ignore[valid-type, misc]
            def __init__(self, workers, *args, **kwargs):
                sizes.append(workers)
                super().__init__(workers, *args, **kwargs)

        monkeypatch.setattr(module, "WorkerPool", CountedPool)
    return sizes


@pytest.mark.parametrize("where", ["config", "command line"])
@pytest.mark.parametrize("jobs", ["64", str(10**19)])
def test_jobs_never_exceed_the_usable_cores(run_cli, write, tmp_path, started_pools, monkeypatch, where, jobs):
    import lintloop.cli

    monkeypatch.setattr(lintloop.cli, "usable_cores", lambda: 2)
    for index in range(12):  # enough files for a pool of several workers
        write(f"m{index}.py", TORCH_LEAK)
    args = ["--jobs", jobs] if where == "command line" else []
    if where == "config":
        write("pyproject.toml", f"[tool.lintloop]\njobs = {jobs}\n")
    code, _, err = run_cli("check", "--no-cache", *args, ".", cwd=tmp_path)
    assert code == 1, err
    assert started_pools and max(started_pools) <= 2


def test_a_configuration_may_lower_jobs(run_cli, write, tmp_path, started_pools):
    for index in range(12):
        write(f"m{index}.py", TORCH_LEAK)
    write("lintloop.toml", "jobs = 1\n")
    run_cli("check", "--no-cache", ".", cwd=tmp_path)
    assert started_pools == [1]


@pytest.mark.parametrize("text, limits", [
    ("file-timeout = 0\nfile-memory-limit = 0\n", (120.0, 4096)),  # "no limit": the defaults
    ("file-timeout = 10000\nfile-memory-limit = 1000000\n", (120.0, 4096)),  # above them: the defaults
    ("file-timeout = 5\nfile-memory-limit = 512\n", (5, 512)),  # below: as written
])
def test_a_configuration_may_tighten_the_file_limits_never_lift_them(run_cli, write, tmp_path, text, limits):
    from lintloop.config import SettingsResolver
    from lintloop.isolation import Limits

    write("lintloop.toml", text)
    settings = SettingsResolver().for_directory(tmp_path)
    configured = Limits.configured(settings.file_timeout, settings.file_memory_limit)
    assert (configured.seconds, configured.memory_mib) == limits


def test_the_command_line_may_lift_the_file_limits(write, tmp_path):
    from lintloop.config import Overrides, SettingsResolver
    from lintloop.isolation import Limits

    write("lintloop.toml", "file-timeout = 5\n")
    settings = SettingsResolver(Overrides(file_timeout=0, file_memory_limit=8192)).for_directory(tmp_path)
    configured = Limits.configured(settings.file_timeout, settings.file_memory_limit)
    assert (configured.seconds, configured.memory_mib) == (None, 8192)
