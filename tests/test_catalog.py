"""The layout holds the catalog: one module per rule, in its family's folder; analyses never import rules."""

import ast
import re
import json
import subprocess
import sys
from pathlib import Path

import pytest

import lintloop.analysis
import lintloop.rules
from lintloop.rules import ALL_RULES, BY_CODE

ROOT = Path(__file__).resolve().parent.parent
RULES_DIR = Path(lintloop.rules.__file__).parent
ANALYSIS_DIR = Path(lintloop.analysis.__file__).parent
# The catalog's families (RULES.md sections): the hundreds digit of a code names the folder.
FAMILIES = {"0": "engine", "1": "autodiff", "2": "compiled", "3": "memory", "4": "distribution",
            "5": "pipelines", "6": "mixed_precision", "7": "torch_loop", "8": "checkpoints", "9": "jax"}


def _rule_modules() -> list[Path]:
    return sorted(p for p in RULES_DIR.glob("*/*.py") if p.name != "__init__.py")


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_each_rule_lives_in_its_own_module_in_its_family(rule):
    path = Path(sys.modules[rule.__module__].__file__)
    assert path.stem == rule.name.replace("-", "_")
    assert path.parent.name == FAMILIES[rule.code[2]]


def test_every_rule_module_is_discovered_once():
    modules = _rule_modules()
    assert len(modules) == len(ALL_RULES) == len(BY_CODE)
    assert {m.stem for m in modules} == {r.name.replace("-", "_") for r in ALL_RULES}


def test_rules_command_lists_every_discovered_rule(tmp_path):
    # Out of the checkout: `-m` puts the working directory first on the module path, and the checkout's
    # lintloop/ holds no rules/ (setup.py maps them; docs/architecture.md, "One import name").
    out = subprocess.run([sys.executable, "-m", "lintloop", "rules", "--format", "json"], capture_output=True,
                         text=True, check=True, cwd=tmp_path).stdout
    assert [r["code"] for r in json.loads(out)] == [r.code for r in ALL_RULES]


def test_the_rule_index_is_generated_from_the_rules():
    """What selection reads without importing the rules (lintloop.rules.index) equals the rules."""
    import lintloop.rules.index as index

    current = Path(index.__file__).read_text(encoding="utf-8")
    assert current == index.render(), "the rule index is stale: run `python -m lintloop.rules.index`"
    assert [(e.code, e.name, e.default_on, e.frameworks) for e in index.ENTRIES] == \
        [(r.code, r.name, r.default_on, r.frameworks if r.has_visitor() else ()) for r in ALL_RULES]
    assert all(Path(sys.modules[BY_CODE[e.code].__module__].__file__).parent.name == e.family for e in index.ENTRIES)


def test_a_module_with_two_rules_is_refused(tmp_path, monkeypatch):
    family = tmp_path / "family"
    family.mkdir()
    (family / "__init__.py").write_text("")
    (family / "two_rules.py").write_text(
        "from lintloop.rule import Rule\n"
        "class A(Rule):\n    code = 'LL998'\n    name = 'two-rules'\n"
        "class B(Rule):\n    code = 'LL999'\n    name = 'other'\n")
    monkeypatch.setattr(lintloop.rules, "__path__", [str(tmp_path)])
    with pytest.raises(lintloop.rules.CatalogError, match="exactly one rule"):
        lintloop.rules._discover()


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize("path", sorted(ANALYSIS_DIR.glob("*.py")), ids=lambda p: p.name)
def test_analyses_never_import_a_rule(path):
    assert not {m for m in _imports(path) if m.startswith("lintloop.rules") or m.startswith("lintloop.rule")}


def test_rule_example_prints_the_shipped_programs(run_cli):
    code, out, _ = run_cli("rule", "LL301", "--example")
    assert code == 0 and out == (ROOT / "tests" / "fixtures" / "LL301_bad.py").read_text()
    code, out, _ = run_cli("rule", "LL301", "--example", "LL301_good.py")
    assert code == 0 and out == (ROOT / "tests" / "fixtures" / "LL301_good.py").read_text()
    code, out, err = run_cli("rule", "LL301", "--example", "nope.py")
    assert (code, out) == (2, "") and "LL301_bad.py, LL301_good.py" in err
    code, _, err = run_cli("rule", "LL001", "--example")
    assert code == 2 and "no runnable example" in err


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_documentation_names_only_shipped_examples(rule):
    """A program the documentation names is one `--example` prints (never a path into the test suite)."""
    from lintloop.rule_examples import example_names

    text = rule.documentation()
    assert "tests/" not in text
    named = set(re.findall(r"\bLL\d{3}\w*\.py\b", text))
    assert named <= {name for other in ALL_RULES for name in example_names(other.code)}
    if example_names(rule.code):
        assert f"lintloop rule {rule.code} --example" in text
