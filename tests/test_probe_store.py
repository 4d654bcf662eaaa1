"""The probe verdicts `check --probe` keeps for the language server."""

import json

from lintloop.finding import Finding
from lintloop.runtime_probe import store

CONFIRMED = {"status": "confirmed", "evidence": {"signal": "memory_growth", "bytes_per_step": 10240}}


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


def test_an_unwritable_store_is_not_an_error(tmp_path):
    (tmp_path / "cache").write_text("a file where the cache directory should be")
    assert store.record(tmp_path / "cache", tmp_path / "train.py", "x\n", [_finding(1, CONFIRMED)]) is False
