"""The probe verdicts `check --probe` keeps for the language server."""

import json

import pytest

from lintloop.finding import Finding
from lintloop.runtime_probe import store

# As the probe writes it (runtime_probe.verdicts): what `describe` makes the editor's line of.
CONFIRMED = {"status": "confirmed", "evidence": {"signal": "memory_growth", "mem_source": "host", "memory": {
    "median_increase_bytes_per_step": 10240, "positive_fraction": 1.0}}}


def _finding(line: int, probe=None) -> Finding:
    return Finding("train.py", line, 9, line, 27, "LL301", "loss-tensor-accumulation", "m", "bug", "error",
                   probe=probe)


def test_verdicts_are_found_again_for_the_same_text(tmp_path):
    source = tmp_path / "train.py"
    source.write_text("x = 1\n")
    assert store.record(tmp_path / "cache", source, "x = 1\n", [_finding(3, CONFIRMED), _finding(4)])
    assert store.recorded(tmp_path / "cache", source, "x = 1\n") == {("LL301", 3, 9): CONFIRMED}


def test_an_edited_file_has_no_verdicts(tmp_path):
    source = tmp_path / "train.py"
    store.record(tmp_path / "cache", source, "x = 1\n", [_finding(3, CONFIRMED)])
    assert store.recorded(tmp_path / "cache", source, "x = 2\n") == {}
    assert store.recorded(tmp_path / "cache", tmp_path / "other.py", "x = 1\n") == {}


def test_a_damaged_or_foreign_record_is_ignored(tmp_path):
    source = tmp_path / "train.py"
    store.record(tmp_path / "cache", source, "x = 1\n", [_finding(3, CONFIRMED)])
    (record,) = (tmp_path / "cache" / store.STORE_DIR_NAME).iterdir()
    entry = json.loads(record.read_text())
    for damaged in ("{", "[]", json.dumps({**entry, "format": 99}),
                    json.dumps({**entry, "verdicts": [{"code": "LL301", "line": "3", "column": 9, "probe": CONFIRMED}]}),
                    json.dumps({**entry, "verdicts": [{"code": "LL301", "line": 3, "column": 9,
                                                       "probe": {"status": "__import__('os')"}}]})):
        record.write_text(damaged)
        assert store.recorded(tmp_path / "cache", source, "x = 1\n") == {}


def _planted(tmp_path, text: str | bytes) -> None:
    """`text` in place of the record of train.py (a record the working tree may hold, whoever wrote it)."""
    source = tmp_path / "train.py"
    store.record(tmp_path / "cache", source, "x = 1\n", [_finding(3, CONFIRMED)])
    (record,) = (tmp_path / "cache" / store.STORE_DIR_NAME).iterdir()
    record.write_bytes(text.encode() if isinstance(text, str) else text)


def _entry(tmp_path, verdicts: list) -> str:
    return json.dumps({"format": store.FORMAT, "path": str((tmp_path / "train.py").resolve()),
                       "digest": store._digest("x = 1\n"), "verdicts": verdicts})


@pytest.mark.parametrize("evidence", [
    {"signal": "memory_growth", "memory": "grows"},
    {"signal": "memory_growth", "memory": {"median_increase_bytes_per_step": "10 KiB", "positive_fraction": 1}},
    {"signal": "memory_growth"},
    {"signal": "none_gradients", "notebook": {"dropped_lines": "many"}},
    {"signal": "none_gradients", "notebook": {"dropped_lines": 1, "dropped": [{"cell": 1}]}},
    {"signal": "none_gradients", "notebook": {"dropped_lines": 1, "dropped": [{"cell": 1, "line": 2, "text": 3}]}},
])
def test_a_verdict_that_cannot_be_described_is_ignored_and_the_others_kept(tmp_path, evidence):
    broken = {"code": "LL301", "line": 4, "column": 9, "probe": {"status": "confirmed", "evidence": evidence}}
    _planted(tmp_path, _entry(tmp_path, [{"code": "LL301", "line": 3, "column": 9, "probe": CONFIRMED}, broken]))
    assert store.recorded(tmp_path / "cache", tmp_path / "train.py", "x = 1\n") == {("LL301", 3, 9): CONFIRMED}


def test_a_record_beyond_the_bounds_is_ignored(tmp_path):
    verdict = {"code": "LL301", "line": 3, "column": 9, "probe": CONFIRMED}
    deep = dict(verdict, probe={"status": "confirmed", "evidence": {"signal": "x", "text": "t", "deep": "DEEP"}})
    deep_text = _entry(tmp_path, [deep]).replace('"DEEP"', "[" * 100_000 + "]" * 100_000)
    for text in (deep_text, _entry(tmp_path, [verdict] * store.MAX_RECORD_VALUES),
                 _entry(tmp_path, [verdict]).encode().replace(b"train.py", b"train\xed\xb2\x80.py")):
        _planted(tmp_path, text)
        assert store.recorded(tmp_path / "cache", tmp_path / "train.py", "x = 1\n") == {}


def test_an_unwritable_store_is_not_an_error(tmp_path):
    (tmp_path / "cache").write_text("a file where the cache directory should be")
    assert store.record(tmp_path / "cache", tmp_path / "train.py", "x\n", [_finding(1, CONFIRMED)]) is False


def test_a_symlinked_cache_dir_is_neither_written_nor_read(tmp_path):
    """The store lives in the result cache's directory, and is opened as it is: never through a link."""
    source = tmp_path / "train.py"
    elsewhere = tmp_path / "elsewhere"
    store.record(elsewhere, source, "x = 1\n", [_finding(3, CONFIRMED)])  # a valid record, in the wrong place
    before = {path: path.read_bytes() for path in elsewhere.rglob("*") if path.is_file()}
    (tmp_path / ".lintloop_cache").symlink_to(elsewhere, target_is_directory=True)
    assert store.record(tmp_path / ".lintloop_cache", source, "x = 1\n", [_finding(4, CONFIRMED)]) is False
    assert store.recorded(tmp_path / ".lintloop_cache", source, "x = 1\n") == {}
    assert {path: path.read_bytes() for path in elsewhere.rglob("*") if path.is_file()} == before


def test_a_symlinked_store_dir_is_neither_written_nor_read(tmp_path):
    source = tmp_path / "train.py"
    elsewhere = tmp_path / "elsewhere"
    store.record(elsewhere, source, "x = 1\n", [_finding(3, CONFIRMED)])
    before = {path: path.read_bytes() for path in elsewhere.rglob("*") if path.is_file()}
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / store.STORE_DIR_NAME).symlink_to(elsewhere / store.STORE_DIR_NAME,
                                                           target_is_directory=True)
    assert store.record(tmp_path / "cache", source, "x = 1\n", [_finding(4, CONFIRMED)]) is False
    assert store.recorded(tmp_path / "cache", source, "x = 1\n") == {}
    assert {path: path.read_bytes() for path in elsewhere.rglob("*") if path.is_file()} == before


def test_a_symlinked_record_is_not_followed(tmp_path):
    source = tmp_path / "train.py"
    store.record(tmp_path / "cache", source, "x = 1\n", [_finding(3, CONFIRMED)])
    (record,) = (tmp_path / "cache" / store.STORE_DIR_NAME).iterdir()
    planted = tmp_path / "planted.json"
    planted.write_bytes(record.read_bytes())
    record.unlink()
    record.symlink_to(planted)
    assert store.recorded(tmp_path / "cache", source, "x = 1\n") == {}
    assert store.record(tmp_path / "cache", source, "x = 1\n", [_finding(4, CONFIRMED)])
    assert not record.is_symlink() and planted.read_bytes() != record.read_bytes()  # the link replaced, not written through
