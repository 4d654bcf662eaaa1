"""The README's first screen: what lintloop is, the two commands for a fresh machine, and a quickstart
whose sample output is what lintloop prints today; install and pre-commit instructions that work."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
QUICKSTART_FILE = "examples/train_torch.py"
# A terminal's first screen.
FIRST_SCREEN_LINES = 24


def quickstart_output() -> str:
    """The README's sample: `lintloop check` of one shipped example, as a person sees it."""
    ran = subprocess.run([sys.executable, "-m", "lintloop", "check", "--no-cache", "--color", "never", QUICKSTART_FILE],
                         cwd=ROOT, capture_output=True, text=True)
    assert ran.returncode == 1, ran.stderr
    return f"```console\n$ lintloop check {QUICKSTART_FILE}\n{ran.stdout}```\n"


def _between(text: str, marker: str) -> str:
    return text.split(f"<!-- {marker}-start -->\n")[1].split(f"<!-- {marker}-end -->")[0]


def test_the_first_screen_says_what_it_is_and_starts_the_quickstart():
    lines = README.read_text().splitlines()
    assert lines[0] == "# lintloop"
    assert "## Quickstart" in lines[:FIRST_SCREEN_LINES]
    assert any(line.startswith("A static analyzer for deep-learning training loops") for line in lines[:4])


def test_the_quickstart_output_is_what_lintloop_prints():
    assert _between(README.read_text(), "quickstart-output") == quickstart_output(), (
        "regenerate with: python tests/test_readme.py")


def test_the_rule_table_matches_the_rules():
    from lintloop.cli import rules_markdown

    assert _between(README.read_text(), "rules-table") == rules_markdown(), "regenerate with: python tests/test_readme.py"


def _documented_revs() -> set[str]:
    texts = [README.read_text(), *(path.read_text() for path in (ROOT / "docs").glob("*.md")),
             (ROOT / "integrations" / "README.md").read_text(), (ROOT / "integrations" / "github-actions.yml").read_text()]
    revs = set()
    for text in texts:
        revs |= set(re.findall(r"^\s*rev: (\S+)", text, re.M))
        revs |= set(re.findall(r"lintloop/lintloop@(v[\w.]+)", text))
    return revs


def test_install_pre_commit_and_action_pins_name_a_tag_of_this_repository():
    revs = _documented_revs()
    assert revs == {"v0.1.0"}, revs
    tags = subprocess.run(["git", "tag", "--list"], cwd=ROOT, capture_output=True, text=True)
    if tags.returncode != 0 or not tags.stdout.strip():
        pytest.skip("this checkout has no tags (a shallow clone or an export): the tag cannot be looked up")
    for rev in revs:
        assert rev in tags.stdout.split(), f"{rev} is not a tag of this repository"
    from lintloop import __version__

    assert f"v{__version__}" in revs  # the pin is the release this checkout is


def test_no_document_says_to_install_an_unreleased_package_from_an_index():
    for path in [README, *(ROOT / "docs").glob("*.md"), *(ROOT / "integrations").iterdir()]:
        if path.is_file():
            for match in re.finditer(r"pip install (['\"]?)lintloop\b(?![\w\[ ]*@)(?!==)", path.read_text()):
                pytest.fail(f"{path.name}: `{match.group(0)}…` names a package index lintloop is not on")


def regenerate() -> None:
    from lintloop.cli import rules_markdown

    text = README.read_text()
    for marker, content in (("quickstart-output", quickstart_output()), ("rules-table", rules_markdown())):
        start, end = f"<!-- {marker}-start -->\n", f"<!-- {marker}-end -->"
        text = text.split(start)[0] + start + content + end + text.split(end)[1]
    README.write_text(text)


if __name__ == "__main__":
    regenerate()
