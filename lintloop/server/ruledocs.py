"""Rule documentation for the editor: Markdown for hovers, and a per-version file the diagnostics
link to (works offline and opens in the editor), unless the client gives a `docsUrl` template."""

from __future__ import annotations

import os
import string
import tempfile
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from pygls.uris import from_fs_path

from lintloop import __version__
from lintloop.frameworks import FRAMEWORK_LABELS
from lintloop.user_cache import user_cache_directory

if TYPE_CHECKING:
    from lintloop.rule import Rule

_SECTIONS = (("What it flags", "summary"), ("Why it is wrong", "why"), ("What you see when it happens", "symptom"),
             ("How to fix it", "remedy"), ("Fix safety", "fix_safety"))


def rule_markdown(rule: type[Rule]) -> str:
    """The rule's documentation (the content of `lintloop rule CODE`) as Markdown."""
    frameworks = ", ".join(FRAMEWORK_LABELS[f] for f in rule.frameworks) or "—"
    default = "on" if rule.default_on else "off"
    parts = [f"### {rule.code} `{rule.name}`",
             f"*{frameworks} · {rule.kind} · default {default} · fix: {rule.fix_kind} · probe: {rule.probe}*"]
    for title, attr in _SECTIONS:
        text = textwrap.dedent(getattr(rule, attr)).strip()
        if text:
            parts.append(f"**{title}**\n\n{text}")
    for title, examples in (("Example (flagged)", rule.flagged), ("Not flagged", rule.not_flagged)):
        if examples:
            parts.append(f"**{title}**\n\n```python\n{textwrap.dedent(examples[0].code).strip()}\n```")
    if rule.options:
        options = "\n".join(f"- `{name} = {option.default!r}`: {option.help}" for name, option in rule.options.items())
        parts.append(f"**Options** (`[tool.lintloop.rules.{rule.code}]`)\n\n{options}")
    return "\n\n".join(parts) + "\n"


def docs_directory() -> Path:
    """`$XDG_CACHE_HOME/lintloop/docs/<version>` (`~/.cache` when unset or relative, per the XDG spec)."""
    return user_cache_directory() / "docs" / __version__


# The longest `docsUrl` template taken: a link is in every diagnostic sent (browsers take URLs of 2,000
# characters everywhere).
MAX_URL_TEMPLATE = 2_000
_FIELDS = ("code", "name")


def url_template_problem(template: object) -> str | None:
    """Why a client's `docsUrl` cannot be the rules' link template (None if it can): a string of at most
    MAX_URL_TEMPLATE characters whose fields are `{code}` and `{name}` alone (no format spec, conversion
    or attribute: `{code:>999999999}` would make every link a gigabyte)."""
    expected = "a string where {code} and {name} are replaced"
    if not isinstance(template, str):
        return f"{expected}, not {type(template).__name__}"
    if len(template) > MAX_URL_TEMPLATE:
        return f"{expected}, of at most {MAX_URL_TEMPLATE:,} characters"
    try:
        fields = [(name, spec, conversion) for _, name, spec, conversion in string.Formatter().parse(template)
                  if name is not None]
    except ValueError as exc:  # a single `{` or `}`
        return f"{expected} ({exc})"
    for name, spec, conversion in fields:
        if name not in _FIELDS or spec or conversion:
            shown = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            return f"{expected}, no other field such as {shown[:40]}"
    return None


class RuleDocs:
    """Where a diagnostic's `codeDescription.href` points for each rule."""

    def __init__(self, url_template: str | None = None, directory: Path | None = None) -> None:
        self.url_template = url_template
        self.directory = directory or docs_directory()
        self._hrefs: dict[str, str | None] = {}

    def href(self, rule: type[Rule]) -> str | None:
        """The rule's documentation link; None when its file cannot be written (no link then)."""
        if self.url_template is not None:
            return self.url_template.format(code=rule.code, name=rule.name)
        if rule.code not in self._hrefs:
            self._hrefs[rule.code] = self._write(rule)
        return self._hrefs[rule.code]

    def _write(self, rule: type[Rule]) -> str | None:
        target = self.directory / f"{rule.code}.md"
        try:
            if not target.is_file():  # written once per lintloop version; a concurrent server writes the same
                target.parent.mkdir(parents=True, exist_ok=True)
                fd, temporary = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
                try:
                    with os.fdopen(fd, "w", encoding="utf-8") as stream:
                        stream.write(rule_markdown(rule))
                    os.replace(temporary, target)
                except BaseException:
                    os.unlink(temporary)
                    raise
        except OSError:
            return None
        return from_fs_path(str(target))
