"""The documentation site (mkdocs.yml, docs/): it builds with `mkdocs build --strict`, its generated pages
follow the rule catalog, and it works in a real browser — pages render, the rule index links every rule,
and the search box finds a rule's page (headless Chromium, driven over the DevTools protocol)."""

from __future__ import annotations

import argparse
import fcntl
import functools
import html
import json
import os
import re
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from module_files import load_module
from lintloop.cli import build_parser
from lintloop.config import KNOWN_KEYS
from lintloop.rule import Example, RuleOption
from lintloop.rule_examples import example_names
from lintloop.rules import ALL_RULES, BY_CODE

pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install mkdocs-material): the site cannot be built")
pytest.importorskip("material", reason="mkdocs-material is not installed: the site's theme is missing")

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync")
BROWSER_WAIT_S = 20


def _load_generator() -> ModuleType:
    """docs/gen_pages.py, the module mkdocs.yml loads as a hook (docs/ is no package)."""
    return load_module(DOCS / "gen_pages.py", "lintloop_docs_gen_pages")


generator = _load_generator()


def _code(example: Example) -> str:
    return textwrap.dedent(example.code).strip("\n")


def _squeezed(text: str) -> str:
    """Text as compared with a page: Markdown's code backticks and all whitespace removed (Markdown trims
    the spaces at the edges of code spans, and some catalog texts nest backticks)."""
    return "".join(text.replace("`", "").split())


def _page_text(page: Path) -> str:
    """The visible text of a built page, squeezed: tags, scripts and styles removed, entities decoded."""
    source = re.sub(r"<(script|style)\b.*?</\1>", " ", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    return _squeezed(html.unescape(re.sub(r"<[^>]+>", "", source)))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    built = tmp_path_factory.mktemp("site")
    # Material prints a notice about its end of life on every build; it is no warning of this site's. Run out
    # of the checkout, whose lintloop/ `-m` would import in place of the installed one.
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                             str(ROOT / "mkdocs.yml"), "--site-dir", str(built)],
                            cwd=built, env=env, capture_output=True, text=True, timeout=120, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "WARNING" not in output, output
    return built


def test_the_site_builds_strict_with_a_page_per_rule_and_no_source_files(site: Path) -> None:
    # Pages are files (`offline`: the site opened from disk follows its links without a server).
    for page in ("index.html", "configuration.html", "cli.html", "suppression.html", "notebooks.html", "editors.html",
                 "ci.html", "probe.html", "probe-evidence.html", "rules/index.html"):
        assert (site / page).is_file(), page
    assert sorted(p.stem for p in (site / "rules").glob("LL*.html")) == sorted(r.code for r in ALL_RULES)
    # The committed probe reports load plotly's script from beside them: the build writes it there.
    assert (site / "evidence" / "plotly.min.js").stat().st_size > 1_000_000
    assert {p.name for p in (site / "evidence").glob("*.html")} >= {"tests_fixtures_LL301_bad.py.html"}
    assert not list(site.rglob("*.py")) and not list(site.rglob("__pycache__"))


def test_the_generated_rule_pages_are_one_per_rule_of_the_catalog() -> None:
    pages = generator.rule_pages()
    assert set(pages) == {"rules/index.md"} | {f"rules/{rule.code}.md" for rule in ALL_RULES}
    for rule in ALL_RULES:
        page = pages[f"rules/{rule.code}.md"]
        assert page.startswith(f"# {rule.code} {rule.name}\n"), rule.code
        for example in (*rule.flagged, *rule.not_flagged):
            assert f"```python\n{_code(example)}\n```" in page, (rule.code, example.code)
        for option in rule.options:
            assert f"\n{option} = " in page or f"\n# {option} = " in page, (rule.code, option)
        assert f"# noqa: {rule.code}" in page or "no comment hides it" in page, rule.code
        assert f"[{rule.code}]({rule.code}.md)" in pages["rules/index.md"]
    # Generated at build time only: a committed copy would go stale (and the hook refuses one).
    assert not list((DOCS / "rules").glob("*.md"))


def test_a_rule_page_changes_with_its_rules_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    rule = BY_CODE["LL301"]
    monkeypatch.setattr(rule, "summary", "A summary written by this test.")
    monkeypatch.setattr(rule, "flagged", (Example("total = probe_this_example(loss)\n"),))
    monkeypatch.setattr(rule, "options", {"test_option": RuleOption(default=3, choices=(3, 4), help="A test option.")})
    page = generator.rule_pages()["rules/LL301.md"]
    assert "A summary written by this test." in page
    assert "```python\ntotal = probe_this_example(loss)\n```" in page
    assert "test_option = 3  # the default" in page and "# A test option." in page
    assert "A summary written by this test." in generator.rules_index()


def test_every_rule_page_shows_the_rules_documentation_and_examples(site: Path) -> None:
    for rule in ALL_RULES:
        text = _page_text(site / "rules" / f"{rule.code}.html")
        assert _squeezed(f"{rule.code} {rule.name}") in text
        for field in (rule.summary, rule.why, rule.symptom, rule.remedy, rule.fix_safety):
            assert _squeezed(field) in text, (rule.code, field)
        for example in (*rule.flagged, *rule.not_flagged):
            assert _squeezed(_code(example)) in text, (rule.code, example.code)
        for option in rule.options:
            assert option in text, (rule.code, option)
        for name in example_names(rule.code):  # the shipped programs, and how to get one
            assert name in text and _squeezed(f"lintloop rule {rule.code} --example") in text, (rule.code, name)


def test_the_configuration_page_documents_every_key_and_rule_option(site: Path) -> None:
    source = (DOCS / "configuration.md").read_text(encoding="utf-8")
    for key in sorted(KNOWN_KEYS):
        assert f"\n`{key}`\n:" in source, f"configuration.md does not document `{key}`"
    text = _page_text(site / "configuration.html")
    for rule in ALL_RULES:
        for option in rule.options:
            assert _squeezed(f"{rule.code} {option}") in text, (rule.code, option)


def test_the_cli_reference_lists_every_command_and_option(site: Path) -> None:
    text = _page_text(site / "cli.html")
    parser = build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, command in commands.choices.items():
        assert _squeezed(f"lintloop {name}") in text
        for action in command._actions:
            for option in action.option_strings:
                assert option in text, (name, option)


def test_the_hand_written_pages_link_what_they_promise() -> None:
    probe = (DOCS / "probe.md").read_text(encoding="utf-8")
    assert "(probe-evidence.md)" in probe
    evidence = (DOCS / "probe-evidence.md").read_text(encoding="utf-8")
    for report in sorted((DOCS / "evidence").glob("*.html")):
        assert f"(evidence/{report.name})" in evidence


def test_the_ci_page_documents_every_input_and_output_of_the_action() -> None:
    yaml = pytest.importorskip("yaml")
    action_file = ROOT / "action.yml"
    if not action_file.is_file():
        pytest.skip("no action.yml at the repository's root")
    action = yaml.safe_load(action_file.read_text(encoding="utf-8"))
    ci = (DOCS / "ci.md").read_text(encoding="utf-8")
    assert "uses: lintloop/lintloop@v" in ci
    for name, spec in action["inputs"].items():
        default = f"`{spec['default']}`" if spec.get("default") else "empty"
        assert f"| `{name}` | {default} |" in ci, f"ci.md: the input {name!r} (default {spec.get('default')!r})"
    for name in action.get("outputs", {}):
        assert f"| `{name}` |" in ci, f"ci.md: the output {name!r}"


# ----- in a browser -----------------------------------------------------------------------------


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """The built site over http on localhost, as a host publishes it."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


class _Chromium:
    """Headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: JSON messages
    ending in a NUL byte, commands read on the browser's fd 3, replies written on its fd 4), so that a test
    can wait for what the page's scripts do (`--dump-dom` cannot wait for the search's web worker)."""

    def __init__(self, profile: Path) -> None:
        commands_read, self._commands = os.pipe()
        self._replies, replies_write = os.pipe()
        # The browser's ends, moved above 4 so that neither copy onto 3 and 4 overwrites the other's source;
        # posix_spawn places them there without running Python in the child (a test server thread is running).
        commands_end, replies_end = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 5) for fd in (commands_read, replies_write))
        command = [str(CHROMIUM), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe",
                   "about:blank"]
        self._pid = os.posix_spawn(command[0], command, os.environ, file_actions=[
            (os.POSIX_SPAWN_DUP2, commands_end, 3), (os.POSIX_SPAWN_DUP2, replies_end, 4),
            *((os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2))])
        for fd in (commands_read, replies_write, commands_end, replies_end):
            os.close(fd)
        self._received = b""
        self._last_id = 0
        self._session: str | None = None
        target = self.command("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.command("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def command(self, method: str, **params: Any) -> dict[str, Any]:
        self._last_id += 1
        message: dict[str, Any] = {"id": self._last_id, "method": method, "params": params}
        if self._session is not None:
            message["sessionId"] = self._session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + BROWSER_WAIT_S
        while True:
            while b"\0" in self._received:
                raw, self._received = self._received.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self._last_id:  # anything else is an event: not asked for
                    assert "error" not in reply, (method, reply["error"])
                    return reply["result"]
            left = deadline - time.monotonic()
            assert left > 0 and select.select([self._replies], [], [], left)[0], f"no reply to {method}"
            chunk = os.read(self._replies, 1 << 16)
            assert chunk, f"Chromium exited before replying to {method}"
            self._received += chunk

    def evaluate(self, expression: str) -> Any:
        return self.command("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def wait_for(self, expression: str) -> Any:
        """The value of `expression` once it is truthy."""
        deadline = time.monotonic() + BROWSER_WAIT_S
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError(f"not true within {BROWSER_WAIT_S} s: {expression}")

    def open(self, url: str) -> None:
        """Navigate, and wait until the new page has loaded."""
        self.evaluate("window.previousPage = true")  # gone with the old page's window
        self.command("Page.navigate", url=url)
        self.wait_for("!window.previousPage && document.readyState === 'complete'")

    def close(self) -> None:
        os.kill(self._pid, signal.SIGKILL)
        os.waitpid(self._pid, 0)
        os.close(self._commands)
        os.close(self._replies)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Chromium]:
    if not CHROMIUM.is_file():
        pytest.skip(f"{CHROMIUM} is absent: the site cannot be checked in a browser (CI installs chromium)")
    chromium = _Chromium(tmp_path_factory.mktemp("chromium-profile"))
    yield chromium
    chromium.close()


def test_a_rule_page_renders_its_title_and_examples(browser: _Chromium, served: str) -> None:
    rule = BY_CODE["LL301"]
    browser.open(f"{served}/rules/LL301.html")
    title = browser.evaluate("document.querySelector('article h1').firstChild.textContent")
    assert title == f"{rule.code} {rule.name}"
    blocks = browser.evaluate("[...document.querySelectorAll('article pre code')].map(code => code.innerText)")
    shown = {block.strip("\n") for block in blocks}
    assert {_code(example) for example in (*rule.flagged, *rule.not_flagged)} <= shown
    # A copy button on every code block (`content.code.copy`; material's buttons are ClipboardJS targets).
    buttons = browser.wait_for("document.querySelectorAll('article [data-clipboard-target]').length")
    assert buttons == len(blocks)


def test_the_rule_index_links_every_rule_grouped_by_family(browser: _Chromium, served: str) -> None:
    browser.open(f"{served}/rules/index.html")
    links = browser.evaluate("[...document.querySelectorAll('article table a')].map(a => [a.textContent, a.href])")
    assert sorted(links) == sorted([rule.code, f"{served}/rules/{rule.code}.html"] for rule in ALL_RULES)
    families = browser.evaluate("[...document.querySelectorAll('article h2')].map(h => h.id)")
    assert families == list(dict.fromkeys(rule.__module__.split(".")[2] for rule in ALL_RULES))


def _search_results(browser: _Chromium) -> list[str]:
    return browser.wait_for("[...document.querySelectorAll('.md-search-result__list a')].map(a => a.pathname)")


def test_the_search_box_finds_a_rule_page(browser: _Chromium, served: str) -> None:
    # A query in the address (material reads `?q=` into the search box) ...
    name_query = BY_CODE["LL301"].name
    browser.open(f"{served}/?q={name_query}")
    assert "/rules/LL301.html" in _search_results(browser)
    # ... and one typed into the search box of another page.
    browser.open(f"{served}/cli.html")
    browser.evaluate("document.querySelector('.md-search__input').focus()")
    browser.command("Input.insertText", text="LL303")
    browser.command("Input.dispatchKeyEvent", type="keyUp", key="3", code="Digit3", windowsVirtualKeyCode=51)
    assert "/rules/LL303.html" in _search_results(browser)


def test_the_site_opened_from_disk_searches_without_the_network(browser: _Chromium, site: Path) -> None:
    # From file:// a page may not start a web worker: the shipped iframe-worker shim runs the search, and no
    # page asks another host for a script (the default would load the shim from unpkg.com).
    assert (site / "assets/javascripts/iframe-worker/shim.js").is_file()
    for page in site.rglob("*.html"):
        assert not re.search(r"<script[^>]+src=\"https?:", page.read_text(encoding="utf-8")), page
    browser.open(f"{(site / 'index.html').as_uri()}?q={BY_CODE['LL301'].name}")
    assert any(path.endswith("/rules/LL301.html") for path in _search_results(browser))
    browser.open((site / "cli.html").as_uri())
    links = browser.evaluate("[...document.querySelectorAll('.md-nav a')].map(a => a.href)")
    assert (site / "configuration.html").as_uri() in links  # a link to a page, not a folder
