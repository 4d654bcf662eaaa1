"""The result cache: keyed by everything that changes results, JSON only, validated, bounded."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import sys

import pytest

from lintloop import cache as cache_module
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
        monkeypatch.setattr(cache_module, "__version__", "99.0")
        cache_module._environment.cache_clear()
    elif change == "engine":  # a rule's source edited in a checkout, the version unchanged
        monkeypatch.setattr(cache_module, "_engine_fingerprint", lambda: "edited")
        cache_module._environment.cache_clear()
    elif change == "selection":
        kwargs["codes"] = ("LL001",)
    elif change == "options":
        kwargs["options"] = '{"LL301": {"x": 1}}'
    else:
        kwargs["display"] = "other/leak.py"
    try:
        result = run_job(job(source, cache.directory, **kwargs))
    finally:
        cache_module._environment.cache_clear()
    assert result.cache_written  # a miss, linted and stored anew
    if change == "path":
        assert [f.path for f in result.findings] == ["other/leak.py"]
    assert len(entry_files(cache.directory)) == 2


def test_key_covers_mode_and_not_the_order_of_codes():
    key = ResultCache.key("a.py", ("LL001", "LL301"), "{}", b"x = 1\n")
    assert key == ResultCache.key("a.py", ("LL301", "LL001"), "{}", b"x = 1\n", "check")
    assert key != ResultCache.key("a.py", ("LL001", "LL301"), "{}", b"x = 1\n", "fix")


def test_engine_fingerprint_is_stable_within_a_run():
    assert cache_module._engine_fingerprint() == cache_module._engine_fingerprint()


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
    (back,) = decode_entry(encode_entry("k", [finding]), "k", "a.ipynb")
    assert back == finding and back.suppression_lines == (6, 7, 8) and back.fix.description == "use .item()"
    assert back.cell == 3 and [e.cell for e in back.fix.edits] == [2, 3]
    assert decode_entry(encode_entry("k", [finding]), "other-key", "a.ipynb") is None
    plain = dataclasses.replace(finding, path="a.py", cell=None, fix=Fix("safe", (Edit(1, 2, 3, 4, "x"),)))
    (back,) = decode_entry(encode_entry("k", [plain]), "k", "a.py")
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
    assert cache.get(oldest, "a.py") is not None
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
