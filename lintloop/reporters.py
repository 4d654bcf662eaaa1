"""Output formats: text (rich), concise, json, sarif, github."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import PurePath
from typing import IO, Any, Callable
from urllib.parse import quote

from lintloop import __version__, terminal
from lintloop.finding import Finding
from lintloop.terminal import UNPRINTABLE_BEYOND_C0, printable
from lintloop.source import source_lines

FORMATS = ("text", "concise", "json", "sarif", "github")
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"


# A report of more findings than this ends with the rules and folders that have the most (text and
# concise formats): a first run on a big repository is then read in a minute.
GROUPED_SUMMARY_ABOVE = 20
GROUPED_SUMMARY_ROWS = 10


def render(findings: list[Finding], fmt: str, stream: IO[str], *, sources: dict[str, str | dict[int, str] | None],
           statistics: bool, quiet: bool, unsafe_fixes: bool, is_file: bool, unchecked: int = 0,
           passed_over: int = 0, root: str | None = None) -> None:
    """Write `findings` in `fmt`; `unchecked`: the paths named or found that could not be checked (a
    missing file, an unreadable one), which the text summary must not pass over as clean;
    `passed_over`: the files found in directories that hold no deep-learning code (not parsed);
    `root`: the run's root, which the folders of the grouped summary and `statistics` are relative to."""
    if statistics:
        stream.write("".join(line + "\n" for line in _statistics(findings, unsafe_fixes, root)))
        return
    REPORTERS[fmt](findings, stream, sources=sources, quiet=quiet, unsafe_fixes=unsafe_fixes, is_file=is_file,
                   unchecked=unchecked, passed_over=passed_over, root=root)
    if fmt == "concise" and not quiet:
        # On stderr: the concise report itself stays one line per finding (docs/cli.md), for problem
        # matchers and pipes, as `fix` tells what it fixed on stderr.
        grouped = grouped_summary(findings, unsafe_fixes, root)
        if grouped:
            sys.stderr.write("".join("\n" + line for line in grouped) + "\n")


def _fixable(finding: Finding, unsafe_fixes: bool) -> bool:
    return finding.fix is not None and (finding.fix.applicability == "safe" or unsafe_fixes)


def _text(findings: list[Finding], stream: IO[str], *, sources: dict[str, str | dict[int, str] | None], quiet: bool,
          unsafe_fixes: bool, is_file: bool, unchecked: int = 0, passed_over: int = 0, root: str | None = None) -> None:
    """ruff's full format: per file, each finding's headline, its code frame, `note:` and `help:`, and its
    fix's preview; then a summary of what was found and what `fix` can do."""
    paint = terminal.painter(stream, is_file)
    out: list[str] = []
    # `check --probe --report DIR`: each probed file's page, named once under the file's name.
    pages = {f.path: f.probe["evidence"]["report"] for f in findings
             if f.probe and "report" in f.probe.get("evidence", {})}
    current = None
    split: dict[tuple[str, int], list[str] | None] = {}
    for finding in findings:
        if finding.path != current:
            if current is not None:
                out.append("")
            out.append(paint(printable(finding.path), "bold"))
            if finding.path in pages:
                out.append(f"  report: {printable(pages[finding.path])}")
            current = finding.path
        marker = " " + paint("[*]", "cyan") if _fixable(finding, unsafe_fixes) else ""
        colour = "red" if finding.severity == "error" else "yellow"
        out.append(f"  {finding.where}  {paint(finding.code, colour + ' bold')}{marker} "
                   f"{printable(finding.message)} {paint(f'[{finding.name}]', 'dim')}")
        lines = _lines_of(finding, sources, split)
        snippet = _snippet(finding, lines)
        if snippet:
            out.append(snippet if is_file else paint(snippet, "dim"))
        for label, text in (("note", finding.note), ("help", finding.help)):
            if text:
                out.append(f"    = {label}: {printable(text)}")
        preview = _fix_preview(finding, lines)
        if preview:
            out.append(preview)
        if finding.probe:
            from lintloop.runtime_probe.verdicts import describe

            out.append("    " + printable(describe(finding.probe)))
    if not quiet:
        out += _text_summary(findings, paint, unsafe_fixes, unchecked, passed_over, root)
    stream.write("".join(line + "\n" for line in out))


def _text_summary(findings: list[Finding], paint: Callable[[str, str], str], unsafe_fixes: bool, unchecked: int,
                  passed_over: int, root: str | None) -> list[str]:
    out = [""] if findings else []
    grouped = grouped_summary(findings, unsafe_fixes, root)
    if grouped:
        out += [*grouped, ""]
    files = len({f.path for f in findings})
    fixable = sum(_fixable(f, unsafe_fixes) for f in findings)
    hidden_unsafe = sum(f.fix is not None and f.fix.applicability == "unsafe" and not unsafe_fixes for f in findings)
    not_checked = f"{unchecked} path{'s' if unchecked != 1 else ''} could not be checked (see the errors)."
    not_parsed = (f" {passed_over:,} file{'s' if passed_over != 1 else ''} without deep-learning code "
                  f"{'were' if passed_over != 1 else 'was'} not parsed (`--verbose` lists them)." if passed_over else "")
    if not findings:
        verdict = f"No findings, but {not_checked}" if unchecked else paint("All checks passed.", "green")
        return [*out, verdict + not_parsed]
    summary = f"Found {len(findings)} finding{'s' if len(findings) != 1 else ''} in {files} file{'s' if files != 1 else ''}."
    if fixable:
        summary += f" [*] {fixable} fixable with `lintloop fix`."
    if hidden_unsafe:
        summary += (f" {hidden_unsafe} {'has an unsafe fix' if hidden_unsafe == 1 else 'have unsafe fixes'}"
                    f" (`lintloop fix --unsafe-fixes` applies {'it' if hidden_unsafe == 1 else 'them'}).")
    if unchecked:
        summary += f" {not_checked}"
    return [*out, summary + not_parsed]


def _lines_of(finding: Finding, sources: dict[str, str | dict[int, str] | None],
              split: dict[tuple[str, int], list[str] | None]) -> list[str] | None:
    """The lines of the finding's file (or notebook cell), split once for all the findings in it: a file
    of thousands of findings is not split again for each."""
    key = (finding.path, finding.cell or 0)
    if key not in split:
        source = sources.get(finding.path)
        text = source.get(finding.cell or 0) if isinstance(source, dict) else source
        split[key] = source_lines(text) if text is not None else None
    return split[key]


def _snippet(finding: Finding, lines: list[str] | None) -> str | None:
    """The finding's line (of `lines`, its file's or cell's) with a caret under it."""
    if lines is None or not 1 <= finding.line <= len(lines):
        return None
    line = lines[finding.line - 1].rstrip().expandtabs(1)
    # At least the one character at the finding's column (an empty range has a caret too).
    end = max(finding.end_column if finding.end_line == finding.line else len(line) + 1, finding.column + 1)
    # Printed escaped, the caret under the escapes of the characters it marks.
    before, marked = printable(line[:finding.column - 1]), printable(line[finding.column - 1:end - 1])
    gutter = str(finding.line)
    caret = " " * len(before) + "^" * max(1, len(marked))
    return f"    {gutter} | {before}{marked}{printable(line[end - 1:])}\n    {' ' * len(gutter)} | {caret}"


# A fix preview longer than this many lines on either side is cut (the rest is in `fix --diff`).
FIX_PREVIEW_LINES = 8


def _fix_preview(finding: Finding, lines: list[str] | None) -> str | None:
    """The lines the finding's fix changes, before (`-`) and after (`+`), under a heading that says
    whether `lintloop fix` applies it (ruff's full format shows the same)."""
    fix = finding.fix
    if fix is None or lines is None or not fix.edits or any(e.cell != finding.cell for e in fix.edits):
        return None
    first, last = min(e.line for e in fix.edits), max(e.end_line for e in fix.edits)
    if not 1 <= first <= last <= len(lines):
        return None
    before = "".join(lines[first - 1:last])
    offsets = [0]
    for line in lines[first - 1:last]:
        offsets.append(offsets[-1] + len(line))
    after = before
    for edit in sorted(fix.edits, key=lambda e: (e.line, e.column), reverse=True):
        start = offsets[edit.line - first] + edit.column - 1
        end = offsets[edit.end_line - first] + edit.end_column - 1
        after = after[:start] + edit.content + after[end:]
    heading = ("safe fix, applied by `lintloop fix`:" if fix.applicability == "safe" else
               "unsafe fix (it may change what the code does: review it), applied by `lintloop fix --unsafe-fixes`:")
    sides = [(sign, source_lines(text) or [""]) for sign, text in (("-", before), ("+", after))]
    width = len(str(first + max(len(changed) for _, changed in sides) - 1))
    rows = [f"    {heading}"]
    for sign, changed in sides:
        for number, line in enumerate(changed[:FIX_PREVIEW_LINES], start=first):
            rows.append(f"    {number:>{width}} {sign} {printable(line.rstrip().expandtabs(4))}")
        if len(changed) > FIX_PREVIEW_LINES:
            rows.append(f"    {'':>{width}} {sign} … {len(changed) - FIX_PREVIEW_LINES} more lines")
    return "\n".join(rows)


def _concise(findings: list[Finding], stream: IO[str], **_: object) -> None:
    for f in findings:
        stream.write(f"{printable(f.path)}:{f.where}: {f.code} {printable(f.message)} [{f.name}]\n")


def _json(findings: list[Finding], stream: IO[str], **_: object) -> None:
    stream.write(_json_text([f.to_json() for f in findings]) + "\n")


def _json_text(value: object) -> str:
    """JSON of `value`, readable (non-ASCII text as it is) yet safe to print: json escapes C0 controls
    itself; the other unprintable characters (which only strings can hold) are written as \\u escapes
    too, a lone surrogate (a file name's undecodable byte) as the escape of that surrogate."""
    text = json.dumps(value, indent=2, ensure_ascii=False)
    return UNPRINTABLE_BEYOND_C0.sub(lambda m: f"\\u{ord(m[0]):04x}", text)


def _github_escape(text: str, property_value: bool = False) -> str:
    """Escape a workflow command's message, or with `property_value` one of its `key=value` values."""
    text = printable(text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A"))
    if property_value:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text


def _github(findings: list[Finding], stream: IO[str], **_: object) -> None:
    for f in findings:
        level = "error" if f.severity == "error" else "warning"
        # GitHub accepts a column range on a single line only: a finding spanning lines keeps
        # its start `line,col` and sends no end.
        if f.cell is not None:
            # Lines of a notebook's JSON file mean nothing to a reader: a file annotation naming the cell.
            stream.write(f"::{level} file={_github_escape(f.path, True)},title={f.code}::"
                         f"{_github_escape(f'{f.where}: {f.message} [{f.name}]')}\n")
            continue
        span = f",endLine={f.end_line},endColumn={f.end_column}" if f.end_line == f.line else ""
        stream.write(f"::{level} file={_github_escape(f.path, True)},line={f.line},col={f.column}{span},"
                     f"title={f.code}::{_github_escape(f'{f.message} [{f.name}]')}\n")


def _sarif(findings: list[Finding], stream: IO[str], **_: object) -> None:
    from lintloop.rules import ALL_RULES  # each rule's documentation goes into the report

    index = {rule.code: i for i, rule in enumerate(ALL_RULES)}
    rules = [{
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.description},
        "fullDescription": {"text": rule.summary},
        "help": {"text": rule.documentation()},
        "defaultConfiguration": {"level": "error" if rule.severity() == "error" else "warning",
                                 "enabled": rule.default_on},
        "properties": {"tags": [rule.kind, *rule.frameworks], "fix": rule.fix_kind, "probe": rule.probe},
    } for rule in ALL_RULES]
    results = [_sarif_result(f, index[f.code]) for f in findings]
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "lintloop", "version": __version__, "semanticVersion": __version__,
                                "rules": rules}},
            "columnKind": "unicodeCodePoints",
            "results": results,
        }],
    }
    stream.write(_json_text(log) + "\n")


def _sarif_region(line: int, column: int, end_line: int, end_column: int, cell: int | None) -> dict[str, Any]:
    region: dict[str, Any] = {"startLine": line, "startColumn": column, "endLine": end_line, "endColumn": end_column}
    if cell is not None:  # a notebook: the lines are the cell's (SARIF's property bag carries the cell)
        region["properties"] = {"cell": cell}
    return region


def _sarif_result(finding: Finding, rule_index: int) -> dict[str, Any]:
    uri = quote(_path_bytes(finding.path.replace(os.sep, "/")))
    result: dict[str, Any] = {
        "ruleId": finding.code,
        "ruleIndex": rule_index,
        "level": "error" if finding.severity == "error" else "warning",
        "message": {"text": finding.message},
        "locations": [{"physicalLocation": {
            "artifactLocation": {"uri": uri},
            "region": _sarif_region(finding.line, finding.column, finding.end_line, finding.end_column, finding.cell),
        }}],
    }
    if finding.fix is not None:
        result["fixes"] = [{
            "description": {"text": f"{finding.fix.description or 'apply the fix'} ({finding.fix.applicability})"},
            "artifactChanges": [{"artifactLocation": {"uri": uri}, "replacements": [
                {"deletedRegion": _sarif_region(e.line, e.column, e.end_line, e.end_column, e.cell),
                 "insertedContent": {"text": e.content}} for e in finding.fix.edits]}],
        }]
    if finding.probe is not None:
        result["properties"] = {"probe": finding.probe}
    return result


def _path_bytes(path: str) -> bytes:
    """A path's bytes on disk (an undecodable byte of its name is held as a surrogate), for a URI."""
    try:
        return os.fsencode(path)
    except UnicodeEncodeError:  # a surrogate that stands for no byte: not a name read from disk
        return path.encode("utf-8", "backslashreplace")


def _statistics(findings: list[Finding], unsafe_fixes: bool, root: str | None) -> list[str]:
    """`--statistics`: every rule's count, then every folder's (where there is more than one folder)."""
    by_folder = _folder_rows(findings, root)
    return _rule_rows(findings, unsafe_fixes) + (["", *by_folder] if len(by_folder) > 1 else [])


def grouped_summary(findings: list[Finding], unsafe_fixes: bool, root: str | None) -> list[str]:
    """The rules and the folders with the most findings, for a report of more than
    GROUPED_SUMMARY_ABOVE findings (none for fewer: they are read at a glance). A table of one row (one
    rule, one folder) is left out: it groups nothing, and says nothing the findings did not."""
    if len(findings) <= GROUPED_SUMMARY_ABOVE:
        return []
    lines = []
    for title, rows, what in (("Rules with the most findings:", _rule_rows(findings, unsafe_fixes), "rules"),
                              ("Folders with the most findings:", _folder_rows(findings, root), "folders")):
        if len(rows) > 1:
            lines += [title, *rows[:GROUPED_SUMMARY_ROWS]]
            if len(rows) > GROUPED_SUMMARY_ROWS:
                lines.append(f"  ... {len(rows) - GROUPED_SUMMARY_ROWS} more {what} (`--statistics` lists them all)")
    return lines


def _rule_rows(findings: list[Finding], unsafe_fixes: bool) -> list[str]:
    """One row per rule: count, code, `[*]` where fixable, name; most findings first, then by code."""
    counts = Counter((f.code, f.name) for f in findings)
    fixable = {f.code for f in findings if _fixable(f, unsafe_fixes)}
    return [f"{count:>5}  {code}  {'[*]' if code in fixable else '   '} {name}"
            for (code, name), count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))]


def _folder_rows(findings: list[Finding], root: str | None) -> list[str]:
    """One row per folder (`_folder`): count, folder; most findings first, then by name."""
    counts: Counter[str] = Counter()
    for path, count in Counter(f.path for f in findings).items():  # a path's folder once, not per finding
        counts[_folder(path, root)] += count
    return [f"{count:>5}  {printable(folder)}"
            for folder, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))]


def _folder(path: str, root: str | None) -> str:
    """The first two parts of the folder of a file, relative to `root` (`src/models/`; `./` for a file
    in `root` itself); a file outside `root` by the path as shown."""
    shown = path
    if root is not None:
        try:
            relative = os.path.relpath(os.path.abspath(path), root)
        except ValueError:  # another drive (Windows)
            relative = os.pardir
        if relative.split(os.sep)[0] != os.pardir:
            shown = relative
    parts = PurePath(shown).parent.parts[:2]
    folder = os.path.join(*parts) if parts else "."
    return folder if folder.endswith(os.sep) else folder + os.sep


REPORTERS: dict[str, Callable[..., None]] = {
    "text": _text,
    "concise": _concise,
    "json": _json,
    "sarif": _sarif,
    "github": _github,
}
