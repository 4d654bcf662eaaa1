"""The result cache: keyed by everything that changes results, JSON only, validated, bounded."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import shutil
import subprocess
import sys

import pytest

from lintloop import cache as cache_module
from lintloop import engine_identity as engine_identity_module
from lintloop.cache import ResultCache, decode_entry, encode_entry, finding_to_json
from lintloop.finding import Edit, Finding, Fix
from lintloop.runner import Job, run_job

from conftest import TORCH_LEAK

CODES = ("LL001", "LL301")
OPTIONS = "{}"


def job(path, cache_dir, display="leak.py", codes=CODES, options=OPTIONS):
    return Job(str(path), display, codes, options, "check", cache_dir=str(cache_dir) if cache_dir else None)


def entry_files(directory):
    return sorted(p for p in directory.glob("??/*.json"))


@pytest.fixture
def setup(tmp_path):
    source = tmp_path / "leak.py"
    source.write_text(TORCH_LEAK)
    cache = ResultCache.open(tmp_path)
    assert cache is not None
    expected = run_job(job(source, None)).findings
    assert [f.code for f in expected] == ["LL301"]
    return source, cache, expected


def only_entry(cache):
    (entry,) = entry_files(cache.directory)
    return entry


def test_hit_returns_identical_findings(setup):
    source, cache, expected = setup
    first = run_job(job(source, cache.directory))
    assert first.cache_written and first.findings == expected
    second = run_job(job(source, cache.directory))
    assert not second.cache_written  # a hit
    assert second.findings == expected
    assert [f.suppression_lines for f in second.findings] == [f.suppression_lines for f in expected]


def test_cache_dir_is_tagged_and_git_ignored(setup):
    _, cache, _ = setup
    assert (cache.directory / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    assert (cache.directory / ".gitignore").read_text().splitlines()[-1] == "*"


@pytest.mark.parametrize("change", ["content", "version", "engine", "selection", "options", "path"])
def test_anything_that_changes_results_is_a_miss(setup, monkeypatch, change):
    source, cache, _ = setup
    assert run_job(job(source, cache.directory)).cache_written
    kwargs = {}
    if change == "content":
        source.write_text(TORCH_LEAK + "\n")
    elif change == "version":
        monkeypatch.setattr(engine_identity_module, "__version__", "99.0")
        engine_identity_module.engine_identity.cache_clear()
    elif change == "engine":  # a rule's source edited in a checkout, the version unchanged
        monkeypatch.setattr(engine_identity_module, "_engine_fingerprint", lambda: "edited")
        engine_identity_module.engine_identity.cache_clear()
    elif change == "selection":
        kwargs["codes"] = ("LL001",)
    elif change == "options":
        kwargs["options"] = '{"LL301": {"x": 1}}'
    else:
        kwargs["display"] = "other/leak.py"
    try:
        result = run_job(job(source, cache.directory, **kwargs))
    finally:
        engine_identity_module.engine_identity.cache_clear()
    assert result.cache_written  # a miss, linted and stored anew
    if change == "path":
        assert [f.path for f in result.findings] == ["other/leak.py"]
    assert len(entry_files(cache.directory)) == 2


def test_key_covers_mode_and_not_the_order_of_codes():
    key = ResultCache.key("a.py", ("LL001", "LL301"), "{}", b"x = 1\n")
    assert key == ResultCache.key("a.py", ("LL301", "LL001"), "{}", b"x = 1\n", "check")
    assert key != ResultCache.key("a.py", ("LL001", "LL301"), "{}", b"x = 1\n", "fix")


def test_engine_fingerprint_is_stable_within_a_run():
    assert engine_identity_module._engine_fingerprint() == engine_identity_module._engine_fingerprint()


def test_an_oversized_entry_is_a_miss_without_being_read(setup, monkeypatch):
    source, cache, expected = setup
    run_job(job(source, cache.directory))
    monkeypatch.setattr(cache_module, "MAX_ENTRY_BYTES", 10)
    result = run_job(job(source, cache.directory))
    assert result.findings == expected and result.cache_written


def test_entry_round_trips_every_field():
    fix = Fix("unsafe", (Edit(1, 2, 3, 4, "x", 2), Edit(5, 6, 5, 9, "", 3)), "use .item()")
    finding = Finding("a.ipynb", 7, 5, 7, 18, "LL301", "name", "message ✓", "bug", "error", fix,
                      {"verdict": "confirmed"}, (6, 7, 8), cell=3)
    assert set(finding_to_json(finding)) == {f.name for f in dataclasses.fields(Finding)}
    (back,) = decode_entry(encode_entry("k", [finding]), "k").findings
    assert back == finding and back.suppression_lines == (6, 7, 8) and back.fix.description == "use .item()"
    assert back.cell == 3 and [e.cell for e in back.fix.edits] == [2, 3]
    assert decode_entry(encode_entry("k", [finding]), "other-key") is None
    assert decode_entry(encode_entry("k", [], passed_over=True), "k").passed_over
    plain = dataclasses.replace(finding, path="a.py", cell=None, fix=Fix("safe", (Edit(1, 2, 3, 4, "x"),)))
    (back,) = decode_entry(encode_entry("k", [plain]), "k").findings
    assert back == plain and back.cell is None and back.fix.edits[0].cell is None


def _tamper(entry, edit):
    data = json.loads(entry.read_bytes())
    edit(data)
    entry.write_text(json.dumps(data))


@pytest.mark.parametrize("damage", ["corrupt", "truncated", "empty", "tampered", "schema", "schema_fix",
                                    "pickle", "wrong_key", "directory"])
def test_a_damaged_entry_is_a_miss_and_is_rewritten(setup, damage):
    source, cache, expected = setup
    run_job(job(source, cache.directory))
    entry = only_entry(cache)
    if damage == "corrupt":
        entry.write_bytes(b'{"format": 1, "key": ')
    elif damage == "truncated":
        entry.write_bytes(entry.read_bytes()[:-20])
    elif damage == "empty":
        entry.write_bytes(b"")
    elif damage == "tampered":  # payload edited, digest left as it was
        _tamper(entry, lambda d: d["findings"][0].update(message="nothing to see"))
    elif damage == "schema":  # payload and digest consistent, but a line is a string
        def line_as_string(d):
            d["findings"][0]["line"] = "7"
            d["sha256"] = cache_module.hashlib.sha256(cache_module._canonical(d["findings"])).hexdigest()
        _tamper(entry, line_as_string)
    elif damage == "schema_fix":
        def bad_fix(d):
            d["findings"][0]["fix"] = {"applicability": "safe", "description": "", "edits": [{"line": True}]}
            d["sha256"] = cache_module.hashlib.sha256(cache_module._canonical(d["findings"])).hexdigest()
        _tamper(entry, bad_fix)
    elif damage == "pickle":
        class Boom:
            def __reduce__(self):
                return (sys.exit, ("unpickled!",))
        entry.write_bytes(pickle.dumps(Boom()))
    elif damage == "wrong_key":
        _tamper(entry, lambda d: d.update(key="0" * 64))
    else:
        entry.unlink()
        entry.mkdir()
    result = run_job(job(source, cache.directory))
    assert result.findings == expected and not result.errors
    if damage != "directory":
        assert result.cache_written  # rewritten ...
        assert run_job(job(source, cache.directory)).cache_written is False  # ... and a hit again


def test_pruning_keeps_the_total_under_the_bound_oldest_first(tmp_path):
    cache = ResultCache.open(tmp_path)
    finding = Finding("a.py", 1, 1, 1, 2, "LL301", "n", "m" * 3000, "bug", "error")
    keys = [f"{i:02x}" + "0" * 62 for i in range(10)]
    for age, key in enumerate(keys):
        assert cache.put(key, [finding])
        mtime = 1_000_000 + age * 100  # keys[0] is the oldest
        os.utime(cache.entry_path(key), (mtime, mtime))
    sizes = {path: size for _, size, path in cache.entries()}
    cache.max_bytes = sum(sizes.values()) // 2
    assert cache.prune() > 0
    assert cache.total_bytes() <= cache.max_bytes
    left = {path.stem for _, _, path in cache.entries()}
    assert left and left == set(keys[-len(left):])  # the newest survive
    # A hit refreshes an entry, so it survives the next pruning
    oldest = min(left)
    assert cache.get(oldest) is not None
    cache.max_bytes = sizes[cache.entry_path(oldest)] * 3 // 2  # room for one entry
    cache.prune()
    assert [path.stem for _, _, path in cache.entries()] == [oldest]
    assert cache.prune() == 0  # under the bound: nothing to do


def test_pruning_tolerates_vanishing_files(tmp_path, monkeypatch):
    cache = ResultCache.open(tmp_path, max_bytes=0)
    for i in range(3):
        cache.put(f"{i:02x}" + "0" * 62, [])
    listed = cache.entries()
    for _, _, path in listed:
        path.unlink()  # a concurrent run pruned them between the listing and the removal
    monkeypatch.setattr(cache, "entries", lambda: listed)
    assert cache.prune() == 0


def test_cli_prunes_at_the_end_of_a_run(run_cli, write, tmp_path, monkeypatch):
    for i in range(3):
        write(f"m{i}.py", TORCH_LEAK + f"# {i}\n")
    monkeypatch.setattr(cache_module, "DEFAULT_MAX_BYTES", 1)
    code, out, _ = run_cli("check", ".", "--format", "concise", cwd=tmp_path)
    assert code == 1 and out.count("LL301") == 3
    assert entry_files(tmp_path / ".lintloop_cache") == []


def test_a_file_where_the_cache_dir_should_be_runs_uncached(run_cli, write, tmp_path):
    write("leak.py", TORCH_LEAK)
    (tmp_path / ".lintloop_cache").write_text("not a directory")
    expected = run_cli("check", "leak.py", "--format", "json", "--no-cache", cwd=tmp_path)
    assert ResultCache.open(tmp_path) is None
    assert run_cli("check", "leak.py", "--format", "json", cwd=tmp_path) == expected


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes read-only directories")
def test_an_unwritable_cache_dir_runs_uncached(run_cli, write, tmp_path):
    write("leak.py", TORCH_LEAK)
    expected = run_cli("check", "leak.py", "--format", "json", "--no-cache", cwd=tmp_path)
    directory = tmp_path / ".lintloop_cache"
    directory.mkdir()
    directory.chmod(0o500)
    try:
        assert run_cli("check", "leak.py", "--format", "json", cwd=tmp_path) == expected
    finally:
        directory.chmod(0o700)


def test_unwritable_entries_still_give_correct_results(setup, monkeypatch):
    """Writes failing midway (full disk, read-only mount, even for root): a miss, never an error."""
    source, cache, expected = setup

    def fail(*args, **kwargs):
        raise PermissionError(13, "read-only")

    monkeypatch.setattr(cache_module.os, "replace", fail)
    result = run_job(job(source, cache.directory))
    assert result.findings == expected and not result.errors and not result.cache_written
    assert list(cache.directory.glob("??/*")) == []  # no temporary file left behind


# -- the cache touches nothing outside itself -----------------------------------------------------

OLD = 1_000_000  # an mtime long past: first in line for pruning


def snapshot(folder):
    """Every file below `folder` (links not followed): relative path -> (bytes, mtime)."""
    return {str(path.relative_to(folder)): (path.read_bytes(), path.stat().st_mtime)
            for path in sorted(folder.rglob("*")) if path.is_file() and not path.is_symlink()}


def lookalike_entries(folder, count=5):
    """Files in `folder` named and written exactly as cache entries are, and old: what an
    unguarded prune would remove first."""
    for i in range(count):
        key = f"{i:02x}" + "e" * 62
        entry = folder / key[:2] / f"{key}.json"
        entry.parent.mkdir(parents=True, exist_ok=True)
        entry.write_bytes(encode_entry(key, []))
        os.utime(entry, (OLD, OLD))


def old_files(folder):
    """A folder of someone's old files: some named like entries (one even written as one), others not."""
    lookalike_entries(folder, 2)
    for name in ("notes.txt", "ab/data.bin", "cd/" + "c" * 64 + ".json", "ef/backup.json.123.tmp", "deep/x/y.py"):
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(2000))
    for path in folder.rglob("*"):
        os.utime(path, (OLD, OLD))


def git_repository(folder):
    """A tiny committed repository: its .git/objects are files in 2-hex-digit shard directories."""
    if not shutil.which("git"):
        pytest.skip("git is not installed")
    folder.mkdir()

    def git(*args):
        return subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, check=True,
                              env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                                   "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})

    git("init", "-q", ".")
    for i in range(5):
        (folder / f"f{i}.txt").write_text(f"content {i}\n" * 50)
    git("add", ".")
    git("commit", "-q", "-m", "tiny")
    for path in (folder / ".git" / "objects").rglob("*"):
        os.utime(path, (OLD, OLD), follow_symlinks=False)
    return git


@pytest.mark.parametrize("target", ["old files", "git objects"])
def test_a_symlinked_cache_dir_runs_uncached_and_deletes_nothing(run_cli, write, tmp_path, monkeypatch, target):
    """The reproduced defect: pruning through a linked cache deleted 29 old files, and a repository's
    loose objects. Now a linked cache directory is not used at all, with a bound that forces pruning."""
    for i in range(3):
        write(f"project/m{i}.py", TORCH_LEAK + f"# {i}\n")
    if target == "old files":
        pointed = tmp_path / "old"
        pointed.mkdir()
        old_files(pointed)
    else:
        git = git_repository(tmp_path / "repo")
        pointed = tmp_path / "repo" / ".git" / "objects"
    before = snapshot(pointed)
    (tmp_path / "project" / ".lintloop_cache").symlink_to(pointed, target_is_directory=True)
    expected = run_cli("check", ".", "--format", "json", "--no-cache", cwd=tmp_path / "project")
    monkeypatch.setattr(cache_module, "DEFAULT_MAX_BYTES", 1)
    assert run_cli("check", ".", "--format", "json", cwd=tmp_path / "project") == expected  # no message either
    if target == "git objects":
        git("fsck", "--full", "--strict")  # check=True: fails on a missing object
    assert snapshot(pointed) == before  # every file there, byte for byte, nothing added
    assert ResultCache.open(tmp_path / "project") is None


def test_a_symlinked_shard_dir_is_neither_written_read_nor_pruned(tmp_path):
    cache = ResultCache.open(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    lookalike_entries(elsewhere, 1)  # elsewhere/00/00eee....json
    before = snapshot(elsewhere)
    (cache.directory / "00").symlink_to(elsewhere / "00", target_is_directory=True)
    key = "00" + "e" * 62
    finding = Finding("a.py", 1, 1, 1, 2, "LL301", "n", "m", "bug", "error")
    assert cache.put(key, [finding]) is False  # not written through the link
    assert cache.get(key) is None  # nor read through it
    assert cache.put("01" + "0" * 62, [finding])  # other shards work
    assert [path.parent.name for _, _, path in cache.entries()] == ["01"]
    cache.max_bytes = 0
    assert cache.prune() == 1  # the real entry
    assert snapshot(elsewhere) == before


def test_prune_removes_only_files_that_are_its_entries(tmp_path):
    """Named as an entry is not enough: the file must also begin as an entry does, naming its key."""
    cache = ResultCache.open(tmp_path)
    ours = "ab" + "1" * 62
    assert cache.put(ours, [])
    shard = cache.directory / "ab"
    not_ours = {
        "ab" + "2" * 62 + ".json": b"not an entry: wrong magic " + os.urandom(200),
        "ab" + "3" * 62 + ".json": encode_entry("ab" + "4" * 62, []),  # an entry, of another key
        "ab" + "5" * 62 + ".json.77.tmp": b"\x00" * 300,  # a temporary file's name, not its content
        "ab" + "6" * 62 + ".json": b"",
        "ab" + "7" * 62 + ".JSON": encode_entry("ab" + "7" * 62, []),  # not the naming pattern
        "cd" + "8" * 62 + ".json": encode_entry("cd" + "8" * 62, []),  # in the wrong shard
    }
    for name, data in not_ours.items():
        (shard / name).write_bytes(data)
    stale_tmp = shard / f"{ours}.json.99.tmp"  # a crashed writer's, written as entries are: removed
    stale_tmp.write_bytes(encode_entry(ours, [])[:120])
    for path in shard.iterdir():
        os.utime(path, (OLD, OLD))
    cache.max_bytes = 0
    assert cache.prune() == 2
    assert not cache.entry_path(ours).exists() and not stale_tmp.exists()
    assert {path.name: path.read_bytes() for path in shard.iterdir()} == not_ours


@pytest.mark.parametrize("replacement", ["symlink", "another directory"])
def test_a_cache_dir_swapped_during_the_run_is_not_followed(tmp_path, monkeypatch, replacement):
    """The cache directory is replaced between pruning's listing and its removals (and before later
    writes): by a link to a folder, or by another directory, holding files that are entries in all
    but place. Nothing there is removed or written."""
    cache = ResultCache.open(tmp_path)
    keys = [f"{i:02x}" + "0" * 62 for i in range(4)]
    for key in keys:
        assert cache.put(key, [])
        os.utime(cache.entry_path(key), (OLD, OLD))
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(cache.directory, elsewhere)  # the same names, the same (valid) contents
    before = snapshot(elsewhere)
    listing = cache._listing

    def list_then_swap():
        listed = listing()
        cache.directory.rename(tmp_path / "moved")
        if replacement == "symlink":
            cache.directory.symlink_to(elsewhere, target_is_directory=True)
        else:
            elsewhere.rename(cache.directory)
        return listed

    monkeypatch.setattr(cache, "_listing", list_then_swap)
    cache.max_bytes = 0
    assert cache.prune() == 0
    assert not cache.put("ff" + "0" * 62, [])
    if replacement == "another directory":
        cache.directory.rename(elsewhere)
    assert snapshot(elsewhere) == before
    assert len(list((tmp_path / "moved").glob("??/*.json"))) == len(keys)  # nor were ours removed


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to give a directory away")
def test_a_cache_dir_of_another_user_runs_uncached(run_cli, write, tmp_path):
    write("leak.py", TORCH_LEAK)
    directory = tmp_path / ".lintloop_cache"
    directory.mkdir()
    lookalike_entries(directory, 2)
    os.chown(directory, 65534, 65534)
    before = snapshot(directory)
    expected = run_cli("check", "leak.py", "--format", "json", "--no-cache", cwd=tmp_path)
    assert ResultCache.open(tmp_path) is None
    assert run_cli("check", "leak.py", "--format", "json", cwd=tmp_path) == expected
    assert snapshot(directory) == before
