"""`python -m lintloop.profiling`: every stage, analysis and rule that ran has its cost reported."""

from lintloop.profiling import format_profile, profile

from conftest import FIXTURES


def test_profile_reports_stages_analyses_and_rules():
    report = profile([str(FIXTURES / name) for name in ("LL301_bad.py", "LL101_bad.py", "LL201_good.py")])
    assert report["files"] == 3 and report["lines"] > 0 and report["findings"] >= 2
    assert {"read", "screen", "cst", "index", "positions", "suppress", "report"} <= set(report["stages"])
    assert {"LL301", "LL101"} <= set(report["rules"])
    assert "CallGraph.call_sites" in report["analyses"] and "TensorFlow.gradient_calls" in report["analyses"]
    parts = sum(report["stages"].values()) + sum(report["analyses"].values()) + sum(report["rules"].values())
    assert parts <= report["seconds"] * 1.01  # exclusive times: nothing is counted twice
    assert "| rule | seconds |" in format_profile(report)
