"""The documentation pages made from lintloop itself when the site is built, and the MkDocs hooks that add them.

mkdocs.yml loads this file as a hook module. Nothing it renders is committed: each rule page and the rule
index come from the rule catalog (`lintloop.rules`), the command-line reference from lintloop's argparse
parser, the probe signals from the probe's verdicts, so a page changes as soon as what it documents does.
Hand-written pages take a generated section with a marker line, `<!-- generated: NAME -->` (NAME one of
`GENERATED_SECTIONS`).

`rule_pages()` returns every generated rule page as `{path under docs/: Markdown}`; tests/test_docs_site.py
compares it with the catalog.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import textwrap
from collections.abc import Callable
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page
from plotly.offline import get_plotlyjs

from lintloop import rules as catalog
from lintloop.analysis.context import FileContext
from lintloop.cli import build_parser
from lintloop.frameworks import FRAMEWORK_LABELS
from lintloop.rule import Rule
from lintloop.rule_examples import example_names
from lintloop.runtime_probe.report import PLOTLY_JS
from lintloop.runtime_probe.verdicts import Summary, verdict

RULES_DIR = "rules"
RULES_INDEX = f"{RULES_DIR}/index.md"
# The committed probe reports (docs/evidence/*.html) load plotly's script from beside them; it is
# written into the site from the installed plotly instead of being committed (4.8 MB).
EVIDENCE_PLOTLY_JS = f"evidence/{PLOTLY_JS}"
# What each probe tag of the catalog means (the `probe` column); a rule's tag may combine several
# (`grad/error`) or qualify one (`error (warning)`).
PROBE_TAGS = {
    "grad": "gradients that come back None or all zero",
    "mem": "memory that grows with every step, or objects kept alive across steps",
    "trace": "Python that runs only while a function is traced, or a function traced again and again",
    "error": "an error or warning that the framework raises",
    "effect": "a measurable wrong result (parameters unchanged, the same order every epoch, ...)",
}
# The family whose findings the engine reports itself, after suppression comments were read.
ENGINE_FAMILY = "engine"

_CODE_SPAN = re.compile(r"(`+).+?\1", re.DOTALL)
_MARKUP = re.compile(r"[\\*_\[\]|]")
_GENERATED_SECTION = re.compile(r"^<!-- generated: ([\w-]+) -->$", re.MULTILINE)


# ----- Markdown helpers -------------------------------------------------------------------------


def _prose(text: str) -> str:
    """Catalog text as Markdown: its `code spans` kept, every other character Markdown reads as markup
    escaped (`d(w*w*x)` is no emphasis, `[0, 1]` no link), newlines joined into one paragraph."""
    pieces, start = [], 0
    for span in _CODE_SPAN.finditer(text):
        pieces += [_escaped(text[start:span.start()]), span.group(0)]
        start = span.end()
    pieces.append(_escaped(text[start:]))
    return " ".join("".join(pieces).split())


def _escaped(text: str) -> str:
    return _MARKUP.sub(lambda markup: "\\" + markup.group(0), text).replace("<", "&lt;")


def _code_block(code: str, language: str) -> str:
    """A fenced block longer than any run of backticks in `code`."""
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{code}\n{fence}"


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell or " " for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _dedented(code: str) -> str:
    return textwrap.dedent(code).strip("\n")


# ----- the catalog ------------------------------------------------------------------------------


def _family(rule: type[Rule]) -> str:
    """The rule's family folder: `memory` for `lintloop.rules.memory.loss_tensor_accumulation`."""
    return rule.__module__.split(".")[2]


def _family_title(family: str) -> str:
    """The family package's docstring, its first line: "LL3xx: memory and lifetimes in loops"."""
    doc = importlib.import_module(f"{catalog.__name__}.{family}").__doc__ or family
    return doc.strip().splitlines()[0].rstrip(".")


def _families() -> dict[str, list[type[Rule]]]:
    """Families in code order, each with its rules in code order."""
    families: dict[str, list[type[Rule]]] = {}
    for rule in sorted(catalog.ALL_RULES, key=lambda rule: rule.code):
        families.setdefault(_family(rule), []).append(rule)
    return families


def _page_path(rule: type[Rule]) -> str:
    return f"{RULES_DIR}/{rule.code}.md"


def _frameworks(rule: type[Rule]) -> str:
    return ", ".join(FRAMEWORK_LABELS[framework] for framework in rule.frameworks) or "—"


def _default(rule: type[Rule]) -> str:
    return "on" if rule.default_on else "off"


def _looked_for(rule: type[Rule]) -> str | None:
    """What the probe looks for to confirm a finding of this rule, in its verdict's own words: the
    verdict of a run that showed nothing says what it did not find."""
    nothing_seen = Summary.from_events([], 0, False)
    return verdict(rule.code, nothing_seen)["evidence"].get("looked_for")


def _probe_tags(tag: str) -> list[str]:
    return [word for word in re.findall(r"[a-z]+", tag) if word in PROBE_TAGS]


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)  # a TOML basic string or number


# ----- rule pages -------------------------------------------------------------------------------


def rule_pages() -> dict[str, str]:
    """Every generated rule page, `{path under docs/: Markdown}`: one per rule and the rule index."""
    pages = {_page_path(rule): rule_page(rule) for rule in catalog.ALL_RULES}
    pages[RULES_INDEX] = rules_index()
    return pages


def rule_page(rule: type[Rule]) -> str:
    family = _family(rule)
    sections = [
        f"# {rule.code} {rule.name}",
        _table(("framework", "kind", "severity", "default", "fix", "probe"),
               [(_frameworks(rule), rule.kind, rule.severity(), _default(rule), _prose(rule.fix_kind),
                 _prose(rule.probe))]),
        (f"Family: [{_prose(_family_title(family))}](index.md#{family}). "
         f"In a terminal: `lintloop rule {rule.code}`."),
        "## What it flags",
        _prose(rule.summary),
    ]
    for title, text in (("Why it is wrong", rule.why), ("What you see when it happens", rule.symptom),
                        ("How to fix it", rule.remedy)):
        if text:
            sections += [f"## {title}", _prose(text)]
    automatic = "" if rule.fix_kind == "—" else f"Automatic fix: {_prose(rule.fix_kind)}. "
    sections += ["## Fix safety", automatic + _prose(rule.fix_safety)]
    sections += _examples_section(rule)
    sections += _runnable_section(rule)
    sections += ["## Options", _options_section(rule)]
    sections += ["## Probe signal", _probe_section(rule)]
    sections += ["## Suppressing it", _suppression_section(rule)]
    return "\n\n".join(sections) + "\n"


def _examples_section(rule: type[Rule]) -> list[str]:
    if not rule.flagged and not rule.not_flagged:
        return []
    sections = ["## Examples"]
    for title, examples in (("Flagged", rule.flagged), ("Not flagged", rule.not_flagged)):
        if not examples:
            continue
        sections.append(f"### {title}")
        for number, example in enumerate(examples, 1):
            sections += [f"**{title} example {number}**", _code_block(_dedented(example.code), "python")]
            if example.expect is not None:
                sections += ["Reported (line:column-end, message):", _code_block(example.expect.strip("\n"), "text")]
            if example.fix_diff is not None:
                sections += ["What `lintloop fix --unsafe-fixes` changes:",
                             _code_block(example.fix_diff.strip("\n"), "diff")]
    return sections


def _runnable_section(rule: type[Rule]) -> list[str]:
    """The whole programs the symptom was measured on, shipped with lintloop (lintloop.rule_examples)."""
    names = example_names(rule.code)
    if not names:
        return []
    listed = ", ".join(f"`{name}`" for name in names)
    return ["### Runnable programs",
            f"The programs the symptom was measured on, installed with lintloop: {listed}. "
            f"`lintloop rule {rule.code} --example [NAME]` prints one (default: `{names[0]}`); "
            "`lintloop probe FILE` runs it and reports what happened:",
            _code_block(f"lintloop rule {rule.code} --example > {names[0]}\nlintloop probe {names[0]}", "bash")]


def _options_section(rule: type[Rule]) -> str:
    if not rule.options:
        return "This rule has no options."
    lines = [f"[tool.lintloop.rules.{rule.code}]"]
    for name, option in rule.options.items():
        lines += [f"# {line}" for line in textwrap.wrap(option.help, 96)]
        allowed = [_toml_value(choice) for choice in option.choices if choice is not None]
        if option.default is None:  # TOML has no null: the option is simply left out
            lines.append(f"# {name} = {allowed[0] if allowed else '...'}  # default: not set")
        else:
            lines.append(f"{name} = {_toml_value(option.default)}  # the default")
        if allowed:
            lines.append(f"# allowed: {', '.join(allowed)}")
    return (f"Set in `[tool.lintloop.rules.{rule.code}]` (or `[tool.lintloop.rules.{rule.name}]`) of "
            "`pyproject.toml`, or the same table in `lintloop.toml` without `tool.lintloop.` "
            "([configuration](../configuration.md#rule-options)):\n\n" + _code_block("\n".join(lines), "toml"))


def _probe_section(rule: type[Rule]) -> str:
    looked_for = _looked_for(rule)
    if rule.probe == "—" and looked_for is None:
        return ("None: the [runtime probe](../probe.md) does not check this rule; it is reported from the "
                "code alone.")
    lines = [f"Probe: `{rule.probe}`", "\n".join(f"- `{tag}`: {PROBE_TAGS[tag]}" for tag in _probe_tags(rule.probe))]
    if looked_for is None:
        lines.append("The probe has no verdict for this rule yet: `check --probe` reports its findings as skipped.")
    else:
        lines.append(f"`lintloop check --probe` runs the file and confirms a finding when it sees: "
                     f"{_prose(looked_for)}.")
    lines.append("Any figure on this page was measured on CPU; none has been measured on a GPU yet. "
                 "See [the runtime probe](../probe.md).")
    return "\n\n".join(line for line in lines if line)


def _suppression_section(rule: type[Rule]) -> str:
    configuration = _code_block(f'[tool.lintloop]\nignore = ["{rule.code}"]\n\n'
                                f'[tool.lintloop.per-file-ignores]\n"scripts/*" = ["{rule.code}"]', "toml")
    if _family(rule) == ENGINE_FAMILY:
        return (f"{rule.code} is reported by the engine itself, after the file's suppression comments were "
                "read (or without reading them, when the file could not be parsed or analysed): no comment "
                f"hides it. Turn it off in the configuration or with `--ignore {rule.code}`:\n\n" + configuration)
    line_comments = _code_block(f"...  # noqa: {rule.code}\n...  # lintloop: ignore[{rule.code}]\n"
                                f"...  # lintloop: ignore[{rule.name}]", "python")
    file_comment = _code_block(f"# lintloop: ignore-file[{rule.code}]", "python")
    return ("At the end of the reported line (for a statement over several lines: its first or last line), "
            "by code or by name:\n\n" + line_comments + "\n\nFor a whole file, anywhere in it:\n\n" + file_comment
            + f"\n\nOr in the configuration (or with `--ignore {rule.code}`):\n\n" + configuration
            + "\n\nSee [suppression](../suppression.md).")


def rules_index() -> str:
    families = _families()
    count = sum(len(rules) for rules in families.values())
    legend = "; ".join(f"`{tag}` {meaning}" for tag, meaning in PROBE_TAGS.items())
    sections = [
        "# Rules",
        (f"{count} rules in {len(families)} families. Codes and names are stable: use either in the "
         "configuration and in suppression comments. `lintloop rules` prints this table, "
         "`lintloop rule CODE` a rule's page."),
        ("**default**: `on` rules run unless ignored, `off` rules only when selected (`extend-select`). "
         "**fix**: what `lintloop fix` does (`unsafe` fixes need `--unsafe-fixes`). **probe**: what the "
         f"[runtime probe](../probe.md) measures to confirm a finding: {legend}; `—`: static only."),
    ]
    for family, rules in families.items():
        rows = [(f"[{rule.code}]({rule.code}.md) {rule.name}", _prose(rule.summary), _default(rule),
                 _prose(rule.fix_kind), _prose(rule.probe)) for rule in rules]
        sections += [f"## {_prose(_family_title(family))} {{#{family}}}",
                     _table(("rule", "what it flags", "default", "fix", "probe"), rows)]
    return "\n\n".join(sections) + "\n"


def rule_nav() -> list[Any]:
    """The Rules section of the navigation: the index, then a section per family."""
    nav: list[Any] = [RULES_INDEX]
    for family, rules in _families().items():
        title = _family_title(family).split(" — ")[0]
        nav.append({title: [{f"{rule.code} {rule.name}": _page_path(rule)} for rule in rules]})
    return nav


# ----- sections of hand-written pages -----------------------------------------------------------


def cli_reference() -> str:
    """Every command of `lintloop` and its options, from the parser the program itself uses."""
    parser = build_parser()
    sections = ["### `lintloop`", _prose(parser.description or ""),
                _code_block(parser.format_usage().strip(), "text"), _options_table(parser),
                "Every command also takes `-h` / `--help`."]
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help for choice in action._choices_actions}
        for name, command in action.choices.items():
            sections += [f"### `lintloop {name}`", _prose(command.description or helps.get(name) or ""),
                         _code_block(command.format_usage().strip(), "text"), _options_table(command)]
    return "\n\n".join(section for section in sections if section)


def _options_table(parser: argparse.ArgumentParser) -> str:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        names = ", ".join(f"`{option}`" for option in action.option_strings) or f"`{action.metavar or action.dest}`"
        if action.choices is not None:
            value = ", ".join(f"`{choice}`" for choice in action.choices)
        else:
            value = f"`{action.metavar}`" if action.metavar and action.option_strings else ""
        shown_default = action.default not in (None, False, [], argparse.SUPPRESS)
        default = f"`{action.default}`" if shown_default else ""
        # argparse expands %-placeholders in every help string (a literal % is written %%).
        help_text = action.help % dict(vars(action), prog=parser.prog) if action.help else ""
        rows.append((names, value, default, _prose(help_text)))
    if not rows:
        return "No options."
    return _table(("option", "value", "default", "meaning"), rows)


def rule_options_reference() -> str:
    """Every rule option of the catalog, linked to its rule's page."""
    rows = []
    for rule in catalog.ALL_RULES:
        for name, option in rule.options.items():
            allowed = ", ".join(f"`{_toml_value(choice)}`" for choice in option.choices if choice is not None)
            default = "not set" if option.default is None else f"`{_toml_value(option.default)}`"
            rows.append((f"[{rule.code}]({_page_path(rule)}#options)", f"`{name}`", default, allowed,
                         _prose(option.help)))
    return _table(("rule", "option", "default", "allowed", "meaning"), rows)


def probe_signals() -> str:
    """What the probe looks for, per rule that it checks."""
    rows = []
    for rule in catalog.ALL_RULES:
        looked_for = _looked_for(rule)
        if looked_for is not None:
            rows.append((f"[{rule.code}]({_page_path(rule)})", f"`{rule.name}`", _prose(rule.probe),
                         _prose(looked_for)))
    return _table(("rule", "name", "probe", "confirmed when the run shows"), rows)


def analyses_table() -> str:
    """The analyses rules ask, each after those it asks (`Analysis.asks`), with what its module is for."""
    rows = []
    for name, analysis in FileContext.analyses().items():
        module = importlib.import_module(analysis.__module__)
        purpose = (module.__doc__ or "").strip().split("\n\n")[0]
        rows.append((f"`ctx.{name}`", f"`{analysis.__module__.replace('.', '/')}.py`",
                     ", ".join(f"`{asked}`" for asked in sorted(analysis.asks)) or "—", _prose(purpose)))
    return _table(("asked as", "module", "asks", "answers"), rows)


GENERATED_SECTIONS: dict[str, Callable[[], str]] = {
    "analyses": analyses_table,
    "cli-reference": cli_reference,
    "rule-options": rule_options_reference,
    "probe-signals": probe_signals,
}


# ----- MkDocs hooks -----------------------------------------------------------------------------


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """Expand the nav entry `Rules: rules/index.md` into the rule index and one section per family."""
    for position, entry in enumerate(config.nav or []):
        if entry == {"Rules": RULES_INDEX}:
            config.nav[position] = {"Rules": rule_nav()}
            return config
    raise PluginError(f"mkdocs.yml: the nav needs the entry `- Rules: {RULES_INDEX}` (docs/gen_pages.py expands it)")


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for path, markdown in rule_pages().items():
        _add_generated(files, config, path, markdown)
    _add_generated(files, config, EVIDENCE_PLOTLY_JS, get_plotlyjs())
    return files


def _add_generated(files: Files, config: MkDocsConfig, path: str, content: str) -> None:
    if files.get_file_from_path(path) is not None:
        raise PluginError(f"docs/{path} is generated when the site is built: delete the committed copy")
    files.append(File.generated(config, path, content=content))


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    def generated(marker: re.Match[str]) -> str:
        render = GENERATED_SECTIONS.get(marker.group(1))
        if render is None:
            raise PluginError(f"{page.file.src_uri}: unknown generated section {marker.group(1)!r} "
                              f"(known: {', '.join(GENERATED_SECTIONS)})")
        return render()

    return _GENERATED_SECTION.sub(generated, markdown)
