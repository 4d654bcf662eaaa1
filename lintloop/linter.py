"""Linting one file: read, pre-filter, parse once, run the enabled rules, locate, suppress; and fixing it."""

from __future__ import annotations

import ast
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import libcst as cst
from libcst.metadata import CodeRange

from lintloop.analysis import FileContext
from lintloop.analysis.context import LINE_REF
from lintloop.analysis.intent import prose_shows
from lintloop.analysis.names import Names
from lintloop.analysis.project import LintedFile
from lintloop.cache import listing_digest
from lintloop.digests import file_digest
from lintloop.finding import Edit, Finding, Fix, engine_finding
from lintloop.frameworks import evidenced_frameworks, names_nothing
from lintloop.isolation import deep_recursion, with_big_stack
from lintloop.notebook import (Notebook, NotebookError, NotebookModule, blanks_filled, exercise_placeholder,
                               is_notebook)
from lintloop.positions import node_positions
from lintloop.project_view import ProjectView, decides, imported_definitions, importers, project_view
from lintloop.rule import Report, Rule, RuleSet
from lintloop.rules import BY_CODE, lookup
from lintloop.screen import FileFacts, SourceScreen
from lintloop.source import SourceText, UndecodableSource, source_lines
from lintloop.suppression import Suppressions
from lintloop.syntax import (CHUNK_LINES, Checks, ModuleSyntax, libcst_syntax_finding, parse_cst, selection_outline, shifted,
                             syntax_error)
from lintloop.timing import NO_TIMER, StageTimer


LineLabel = Callable[[int], str]


@dataclass
class FileResult:
    findings: list[Finding] = field(default_factory=list)
    # Internal errors (a rule crashed): reported on stderr, and the run exits 2.
    errors: list[str] = field(default_factory=list)
    # Other files of the project the findings depend on: path -> content digest ("" for a file
    # looked for and absent); the result cache checks them before reusing the findings.
    dependencies: dict[str, str] = field(default_factory=dict)
    # Found in a directory and holding no deep-learning code a rule could flag: not parsed, no
    # finding (docs/architecture.md, "What is parsed"); counted in the summary.
    passed_over: bool = False


# docs/architecture.md, "What is parsed": a file found by walking a directory is parsed only if it can hold a
# finding; a file named explicitly (`explicit`: on the command line, by pre-commit, by an editor)
# always is, so that its syntax errors are always reported.

def without_framework_names(data: bytes, ruleset: RuleSet) -> bool:
    """A file's bytes name no framework an enabled rule needs and hold no word a suppression comment
    starts with: it can hold no finding (what `can_hold_findings` would say of its text, decided
    before decoding, hashing or parsing it)."""
    return names_nothing(data, ruleset.framework_roots, ruleset.framework_evidence)


def can_hold_findings(source: SourceScreen, ruleset: RuleSet) -> bool:
    """Whether some enabled rule may fire in the text (the screen), or a suppression comment may be
    reported by itself (LL002, LL003)."""
    return _may_fire(source, ruleset) or Suppressions.may_report(source.text)


def _may_fire(source: SourceScreen, ruleset: RuleSet) -> bool:
    return bool(ruleset.may_fire(source))


def not_analysed_finding(display: str, cause: str, unchanged: bool = False) -> Finding:
    """LL004 for a file whose analysis failed; `cause` says how (lintloop.isolation: "took longer
    than 120 s (the file-timeout setting)"); `unchanged`: `fix` left the file as it was."""
    return engine_finding(display, BY_CODE["LL004"], f"not analysed: its analysis {cause}"
                          + ("; the file is unchanged" if unchanged else ""))


def lint_bytes(display: str, data: bytes, ruleset: RuleSet, timer: StageTimer | None = None,
               path: str | os.PathLike[str] | None = None, explicit: bool = True) -> FileResult:
    """`path`: where the file is on disk, for questions about the other modules of its project;
    `explicit`: the file was named, not found in a directory (then it may be passed over)."""
    timer = timer or NO_TIMER
    if not explicit:
        with timer.stage("screen"):
            if without_framework_names(data, ruleset):
                return FileResult(passed_over=True)
    try:
        source = SourceText.from_bytes(data)
    except UndecodableSource as exc:
        return FileResult(_enabled([engine_finding(display, BY_CODE["LL001"], str(exc), exc.line, exc.column)],
                                   ruleset))
    if is_notebook(os.fspath(path) if path is not None else display):
        return lint_notebook(display, source.text, ruleset, timer, path, explicit)
    return lint_text(display, source.text, ruleset, timer, path, explicit=explicit)


def lint_notebook(display: str, text: str, ruleset: RuleSet, timer: StageTimer | None = None,
                  path: str | os.PathLike[str] | None = None, explicit: bool = True) -> FileResult:
    """Lint a notebook's code cells as one module, and each Python file its `%%writefile` cells write
    as a module of its own; positions are given by cell."""
    try:
        notebook = Notebook.parse(text)
    except NotebookError as exc:
        return FileResult(_enabled([engine_finding(display, BY_CODE["LL001"], str(exc))], ruleset))
    if not notebook.python:
        return FileResult()  # a notebook of another kernel's language
    modules = _notebook_modules(display, notebook, ruleset, explicit)
    if modules is None:
        return FileResult(passed_over=True)
    return _lint_modules(display, *modules, ruleset, timer, path)


def _notebook_modules(display: str, notebook: Notebook, ruleset: RuleSet,
                      explicit: bool) -> tuple[list[NotebookModule], list[Finding]] | None:
    """The notebook's programs (its kernel's module first, then the files its cells write) and an LL001
    for each kernel cell that does not parse; None for a notebook found in a directory in which
    nothing can hold a finding (decided before its cells' syntax is checked)."""
    kernel, written = notebook.module(), notebook.written_modules()
    if not explicit and not any(can_hold_findings(SourceScreen(m.text), ruleset) for m in (kernel, *written)):
        return None
    kernel, broken = _parsable_module(display, notebook, kernel)
    return [kernel, *written], broken


def _lint_modules(display: str, programs: list[NotebookModule], broken: list[Finding], ruleset: RuleSet,
                  timer: StageTimer | None, path: str | os.PathLike[str] | None) -> FileResult:
    """Lint each of a notebook's modules; one result (with `broken`, the kernel cells that do not
    parse), its findings given by cell."""
    result = FileResult(_enabled(broken, ruleset))
    for module in programs:
        # A written module that does not parse is its own LL001 (a broken script is a bug of the
        # script); the notebook's other modules are linted all the same.
        linted = lint_text(display, module.text, ruleset, timer, module.file_path(path), module.line_label,
                           checks=_checks(module))
        # A finding in another module of the project (lintloop.project_view) is given by its own lines.
        found = (in_cells(f, module) if f.path == display else f for f in linted.findings)
        result.findings.extend(f for f in found if not _demonstrated(f, module, display))
        result.errors.extend(linted.errors)
        result.dependencies.update(linted.dependencies)
    result.findings.sort(key=Finding.sort_key)
    return result


def _demonstrated(finding: Finding, module: NotebookModule, display: str) -> bool:
    """Is `finding` in a cell whose markdown just before says the cell shows what its rule reports (a
    guide cell under "side effects run only once, at tracing")?"""
    topic = BY_CODE[finding.code].shown_in_prose if finding.code in BY_CODE else None
    return topic is not None and finding.path == display and finding.cell is not None \
        and prose_shows(topic, module.prose.get(finding.cell, ""))


def _parsable_module(display: str, notebook: Notebook, module: NotebookModule) -> tuple[NotebookModule, list[Finding]]:
    """The notebook's module (`module`, as `notebook.module()` made it), and an LL001 finding for each
    cell left out of it because it does not parse: as in Jupyter, such a cell fails alone and the
    others run (and are linted). An exercise left for the reader (`x = # YOUR CODE HERE`) is left out
    without a finding: it is incomplete on purpose. IPython compiles each cell alone (allowing `await`
    outside a function, and a `from __future__` import at the top of any cell): so are they checked."""
    if syntax_error(display, module.text, Checks.CELL) is None:
        return module, []
    broken = _broken_cells(display, module)
    texts = module.cell_texts()
    reported = [f for f in broken if not _left_for_reader(display, texts[f.cell])]
    return notebook.module(leave_out=frozenset(f.cell for f in broken if f.cell is not None)), reported


def _left_for_reader(display: str, text: str) -> bool:
    """Is an unparsable cell an exercise: a course's placeholder in it, or its only gaps blanks the
    reader fills (`loss =`, a `def` whose body is a `# TODO` comment)?"""
    if exercise_placeholder(text):
        return True
    filled = blanks_filled(text)
    return filled != text and syntax_error(display, filled, Checks.CELL) is None


def _broken_cells(display: str, module: NotebookModule) -> list[Finding]:
    """An LL001 finding for each cell of the module that does not compile by itself."""
    broken = []
    for cell, text in module.cell_texts().items():
        finding = syntax_error(display, text, Checks.CELL)
        if finding is not None:
            line = max(1, finding.line - 1)  # the cell's marker line comes first
            broken.append(replace(finding, cell=cell, line=line, end_line=line, suppression_lines=(line,)))
    return broken


def _checks(module: NotebookModule) -> Checks:
    """A notebook's kernel module is checked past its grammar cell by cell (`_parsable_module`); a
    file its cells write is a file."""
    return Checks.GRAMMAR if module.written is None else Checks.FILE


def in_cells(finding: Finding, module: NotebookModule) -> Finding:
    """A finding on the notebook's module, with its positions (and its fix's) given by cell."""
    start, end = module.position(finding.line), module.position(finding.end_line)
    fix = finding.fix
    if fix is not None:
        edits = []
        for edit in fix.edits:
            edit_start, edit_end = module.position(edit.line), module.position(edit.end_line)
            edits.append(Edit(edit_start.line, edit.column, edit_end.line, edit.end_column, edit.content,
                              edit_start.cell))
        fix = Fix(fix.applicability, tuple(edits), fix.description)
    same_cell = end.cell == start.cell
    return replace(finding, line=start.line, end_line=end.line if same_cell else start.line,
                   end_column=finding.end_column if same_cell else finding.column, fix=fix, cell=start.cell,
                   suppression_lines=tuple(module.position(n).line for n in finding.suppression_lines))


def lint_text(display: str, text: str, ruleset: RuleSet, timer: StageTimer | None = None,
              path: str | os.PathLike[str] | None = None, line_label: LineLabel = str,
              explicit: bool = True, checks: Checks = Checks.FILE) -> FileResult:
    """`line_label`: how a message names a line of `text` ("called at line 7"): its number, or in
    a notebook's module the line and cell; `explicit`: as for `lint_bytes`; `checks`: what of CPython's
    verdict decides its LL001. Runs on a thread with a large stack (lintloop.isolation)."""
    return with_big_stack(_lint_text, display, text, ruleset, timer, path, line_label, explicit, checks)


def _lint_text(display: str, text: str, ruleset: RuleSet, timer: StageTimer | None,
               path: str | os.PathLike[str] | None, line_label: LineLabel, explicit: bool, checks: Checks) -> FileResult:
    timer = timer or NO_TIMER
    if path is None:
        return _lint_module(display, text, ruleset, timer, None, line_label, explicit, checks=checks)
    file = LintedFile(os.path.abspath(path), text)
    with timer.stage("screen"):
        source = SourceScreen(text)
    view, syntax = None, None
    # The definitions a module imports from its project are read for a module some rule may fire on,
    # by itself or, for a program, with them (decided on the whole text, not through the rules'
    # screen, so that the screen changes no result).
    may_fire = _may_fire(source, ruleset)
    if not may_fire and any(r.has_visitor() for r in ruleset.rules):  # a test module may run no rule at all
        with timer.stage("project"):
            program = imported_definitions(text, file.path)
        may_fire = program is not None and _may_fire(SourceScreen(program), ruleset)
    if may_fire:
        with timer.stage("syntax"):
            syntax = ModuleSyntax.read(display, text, checks)
        if syntax.tree is not None and syntax.error is None:
            with timer.stage("project"):
                view = project_view(text, file.path, syntax.tree)
    result = _lint_in_project(display, file, view, ruleset, timer, line_label, explicit, (source, syntax), checks)
    if any(f.path == display and f.code >= "LL100" for f in result.findings) and not is_notebook(file.path):
        with timer.stage("project"):
            _as_importers_see_it(display, file, syntax, result, ruleset, timer)
    return result


def _lint_in_project(display: str, file: LintedFile, view: ProjectView | None, ruleset: RuleSet,
                     timer: StageTimer, line_label: LineLabel, explicit: bool,
                     read: tuple[SourceScreen, ModuleSyntax | None] | None = None,
                     checks: Checks = Checks.FILE) -> FileResult:
    """Lint the module `file` with the definitions it imports from its project brought in (`view`,
    lintloop.project_view), its findings where they are; `read`: the module's screen and syntax, where
    they were computed already (the module's own LL001 is decided there, with `checks`; the view's
    grammar only)."""
    if view is None:
        return _lint_module(display, file.text, ruleset, timer, file, line_label, explicit, read, checks)
    result = _lint_module(display, view.text, ruleset, timer, LintedFile(file.path, view.text), view.label, explicit,
                          checks=Checks.GRAMMAR)
    if any(f.code == "LL001" for f in result.findings):
        # The module with the definitions brought in does not parse (a `from __future__` import
        # among them, say): the module as written is linted.
        return _lint_module(display, file.text, ruleset, timer, file, line_label, explicit, read, checks)
    located = (view.located(f, display, file.path, line_label) for f in result.findings)
    result.findings = sorted((f for f in located if f is not None), key=Finding.sort_key)
    result.dependencies.update(view.dependencies)
    return result


def _as_importers_see_it(display: str, file: LintedFile, syntax: ModuleSyntax | None, result: FileResult,
                         ruleset: RuleSet, timer: StageTimer) -> None:
    """Decide the findings in this module's functions that other modules import and call as those
    callers see them: a function's parameters are what its callers pass (the scaler they built
    disabled, the stateless optimizer), which this module alone cannot see. A finding that some
    importer's view holds with all its contexts (`decides`) is kept where one such view reports it too.
    `syntax`: the module's, where read already."""
    callers = importers(file.path)
    directory = os.path.dirname(file.path)
    result.dependencies[directory] = listing_digest(directory)  # a caller added beside it changes the answer
    if not callers:
        return
    tree = (syntax if syntax is not None else ModuleSyntax.read(display, file.text, Checks.GRAMMAR)).tree
    if tree is None:
        return  # newer syntax than this host reads (libcst did): its findings stand as they are
    seen: dict[str, set[tuple[int, int, str]]] = {}
    for caller in callers:
        result.dependencies[caller.path] = file_digest(caller.path)
        result.dependencies.update(caller.view.dependencies)
        found = _lint_in_project(caller.path, LintedFile(caller.path, caller.text), caller.view, ruleset, timer, str,
                                 explicit=True, checks=Checks.GRAMMAR)
        seen[caller.path] = {(f.line, f.column, f.code) for f in found.findings if f.path == file.path}

    def kept(finding: Finding) -> bool:
        deciding = [c for c in callers if decides(c, tree, finding.line)]
        return (finding.path != display or finding.code < "LL100" or not deciding
                or any((finding.line, finding.column, finding.code) in seen[c.path] for c in deciding))

    result.findings = [f for f in result.findings if kept(f)]


def _lint_module(display: str, text: str, ruleset: RuleSet, timer: StageTimer, file: LintedFile | None,
                 line_label: LineLabel, explicit: bool,
                 read: tuple[SourceScreen, ModuleSyntax | None] | None = None,
                 checks: Checks = Checks.FILE) -> FileResult:
    """Lint the module `text` (the linted file's, or its project view); `read`: its screen and syntax,
    where they were computed already; `checks`: what of CPython's verdict decides its LL001."""
    result = FileResult()
    source, syntax = read or (None, None)
    with timer.stage("screen"):
        source = source or SourceScreen(text)
        if not explicit and not can_hold_findings(source, ruleset):
            return FileResult(passed_over=True)
        rules = ruleset.may_fire(source) if ruleset.screen else [r for r in ruleset.rules if r.has_visitor()]
    if not rules:
        # No enabled rule can fire: a syntax check is all this file needs.
        with timer.stage("syntax"):
            error = syntax_error(display, text, checks)
        if error is not None:
            return _enabled_result(result, [error], ruleset)
    else:
        findings = _lint_parsed(display, text, rules, ruleset, timer, result, file, line_label, syntax, checks)
        if any(f.code == "LL001" for f in findings):
            return _enabled_result(result, findings, ruleset)
        result.findings.extend(findings)
    with timer.stage("suppress"):
        # Comments are read only where they can matter: to hide a finding, or to be reported.
        if result.findings or Suppressions.may_report(text):
            suppressions = Suppressions.scan(text)
        else:
            suppressions = Suppressions()
        result.findings = _suppress(display, result.findings, suppressions, ruleset)
        result.findings = _enabled(result.findings, ruleset)
        result.findings.sort(key=Finding.sort_key)
    return result


def _enabled_result(result: FileResult, syntax_errors: list[Finding], ruleset: RuleSet) -> FileResult:
    """A file that does not parse: its LL001 alone (its suppression comments are not read)."""
    result.findings = _enabled(syntax_errors, ruleset)
    return result


def _lint_parsed(display: str, text: str, rules: list[type[Rule]], ruleset: RuleSet, timer: StageTimer,
                 result: FileResult, file: LintedFile | None, line_label: LineLabel,
                 syntax: ModuleSyntax | None = None, checks: Checks = Checks.FILE) -> list[Finding]:
    """Decide the file's syntax (`syntax`, where read already), screen it with CPython's tree where this
    host reads it, build a CST of what the screen selects (statements too deep to analyse masked), run
    the rules."""
    if syntax is None:
        with timer.stage("syntax"):
            syntax = ModuleSyntax.read(display, text, checks)
    if syntax.error is not None:
        return [syntax.error]
    with timer.stage("screen"):
        evidenced = evidenced_frameworks(text)
        facts = FileFacts(syntax.tree) if ruleset.screen and syntax.tree is not None else None
        selected: set[int] | None = None
        if facts is not None:
            facts.names.evidenced = evidenced
            rules, seeds = _seeded(facts, rules, text)
            if not rules:
                return []
            selected = facts.closure(seeds)
            if len(selected) == len(facts.units):
                selected = None
        line_map: list[int] | None = None
        if selected is not None:
            source, line_map = facts.source_of(syntax.lines, selected)
    with timer.stage("depth"):
        analysed, masked = syntax.analysable(set(line_map) if line_map is not None else None)
        if line_map is None:
            source = analysed
        elif masked:
            source, line_map = facts.source_of(source_lines(analysed), selected)
    try:
        with timer.stage("cst"):
            try:
                module, tree = _parsed(source, syntax, line_map is None and not masked, None if masked else line_map)
            except cst.ParserSyntaxError:
                if line_map is None:
                    raise
                line_map, source = None, analysed  # a selection that does not parse alone: take the whole file
                module, tree = _parsed(source, syntax, not masked)
    except cst.ParserSyntaxError as exc:
        return [shifted(libcst_syntax_finding(display, source, exc), syntax.column_shifts)]
    with deep_recursion():
        findings = _run_rules(display, source, module, tree, rules, ruleset, result, timer,
                              facts.names if facts is not None else None, line_map, file, line_label, evidenced)
    if syntax.column_shifts:  # libcst read some lines without the form feeds of their indentation
        findings = [shifted(finding, syntax.column_shifts) for finding in findings]
    return [_without_fix_over(finding, masked) for finding in findings] if masked else findings


def _parsed(source: str, syntax: ModuleSyntax, whole_text: bool,
            line_map: list[int] | None = None) -> tuple[cst.Module, ast.Module | None]:
    """libcst's tree of `source` (the file's text when `whole_text`, else a selection of it: `line_map`
    where its lines are the file's unchanged), and CPython's where this host reads it and it was needed (a
    long source is parsed by libcst in chunks of its top-level statements, which CPython's tree gives, or
    for a selection the file's tree outlines; positions take it too)."""
    lines = syntax.lines if whole_text else source_lines(source)
    tree = syntax.tree if whole_text else None
    if tree is None and len(lines) > CHUNK_LINES:
        if line_map is not None and syntax.tree is not None:
            tree = selection_outline(syntax.tree, line_map)
        if tree is None:
            try:
                tree = ast.parse(source)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                tree = None
    return parse_cst(source, lines, tree), tree


def _without_fix_over(finding: Finding, masked: list[tuple[int, int]]) -> Finding:
    """A finding whose fix would rewrite a masked statement keeps no fix: its edits were made from the
    placeholder, not from the statement's text."""
    if finding.fix is None or not any(first <= edit.end_line and edit.line <= last
                                      for edit in finding.fix.edits for first, last in masked):
        return finding
    return replace(finding, fix=None)


def _seeded(facts: FileFacts, rules: list[type[Rule]], text: str) -> tuple[list[type[Rule]], set[int]]:
    """The rules that may fire on the file, and the units where they may report."""
    firing, seeds = [], set()
    for rule in rules:
        found = facts.seeds(rule.needs, text) if any(facts.names.uses_framework(fw) for fw in rule.frameworks) else []
        if found:
            firing.append(rule)
            seeds.update(found)
    return firing, seeds


def _run_rules(display: str, text: str, module: cst.Module, tree: ast.Module | None, rules: list[type[Rule]],
               ruleset: RuleSet, result: FileResult, timer: StageTimer, names: Names | None,
               line_map: list[int] | None, file: LintedFile | None, line_label: LineLabel,
               evidenced: frozenset[str]) -> list[Finding]:
    """Run `rules` on `module` (the file's `text`, or only the statements the screen selected: then
    `line_map` gives each line's number in the file, and `names` the whole file's imports; `evidenced`:
    the frameworks the whole file shows by its training shape)."""
    ctx = FileContext(module, timer, names, file, evidenced)
    try:
        return _reported(display, text, module, tree, rules, ruleset, result, timer, ctx, line_map, line_label)
    finally:
        ctx.close()


def _reported(display: str, text: str, module: cst.Module, tree: ast.Module | None, rules: list[type[Rule]],
              ruleset: RuleSet, result: FileResult, timer: StageTimer, ctx: FileContext, line_map: list[int] | None,
              line_label: LineLabel) -> list[Finding]:
    errors = result.errors
    reports: list[tuple[type[Rule], Report]] = []
    for rule in rules:
        if not any(ctx.names.uses_framework(fw) for fw in rule.frameworks):
            continue
        try:
            with timer.stage(f"rule:{rule.code}"):
                reports.extend((rule, r) for r in rule(ctx, ruleset.settings.get(rule.code)).run())
        except Exception as exc:  # a crashing rule must not stop the run; it is reported as an internal error
            errors.append(f"{display}: internal error in {rule.code} ({rule.name}): {type(exc).__name__}: {exc}")
    if "project" in ctx.__dict__:  # a rule asked about other modules: the findings depend on them
        result.dependencies.update(ctx.project.consulted)
    if not reports:
        return []
    with timer.stage("positions"):
        return _locate(display, text, module, tree, ctx, reports, line_map, line_label)


def _locate(display: str, text: str, module: cst.Module, tree: ast.Module | None, ctx: FileContext,
            reports: list[tuple[type[Rule], Report]], line_map: list[int] | None,
            line_label: LineLabel) -> list[Finding]:
    wanted = [r.node for _, r in reports]
    wanted += [ctx.statement_of(node) for node in wanted]
    wanted += [rep.node for _, r in reports if r.fix for rep in r.fix.replacements]
    wanted += ctx.line_refs
    positions = node_positions(module, text, tree, ctx.parents.get, wanted)
    if line_map is not None:
        def in_file(line: int) -> int:  # an end past the selection's last line lies as far past its file line
            return line_map[line - 1] if line <= len(line_map) else line_map[-1] + line - len(line_map)

        positions = {node: CodeRange((in_file(where.start.line), where.start.column),
                                     (in_file(where.end.line), where.end.column))
                     for node, where in positions.items()}
    findings = []
    for rule, report in reports:
        where = positions[report.node]
        statement = positions[ctx.statement_of(report.node)]
        header_end = min(statement.end.line, where.end.line) if isinstance(
            ctx.statement_of(report.node), cst.BaseCompoundStatement) else statement.end.line
        fix = None
        if report.fix is not None:
            edits = tuple(Edit(positions[r.node].start.line, positions[r.node].start.column + 1,
                               positions[r.node].end.line, positions[r.node].end.column + 1, r.code)
                          for r in report.fix.replacements)
            fix = Fix(report.fix.applicability, edits, report.fix.description)
        findings.append(Finding(
            display, where.start.line, where.start.column + 1, where.end.line, where.end.column + 1,
            rule.code, rule.name, _with_lines(report.message, ctx, positions, line_label), rule.kind, rule.severity(), fix,
            suppression_lines=tuple(sorted({where.start.line, statement.start.line, header_end})),
            help=_with_lines(report.help, ctx, positions, line_label),
            note=_with_lines(report.note, ctx, positions, line_label),
        ))
    return findings


def _with_lines(message: str, ctx: FileContext, positions: dict[cst.CSTNode, CodeRange],
                line_label: LineLabel) -> str:
    """`message` with each `ctx.line_of` placeholder replaced by its node's line in the file."""
    parts = message.split(LINE_REF)
    parts[1::2] = [line_label(positions[ctx.line_refs[int(ref)]].start.line) for ref in parts[1::2]]
    return "".join(parts)


def _suppress(display: str, findings: list[Finding], suppressions: Suppressions, ruleset: RuleSet) -> list[Finding]:
    kept = [f for f in findings if f.code == "LL001"
            or not suppressions.suppresses(f.code, f.name, f.suppression_lines)]
    for entry in suppressions.entries:
        unknown = [s for s in entry.selectors if lookup(s) is None]
        if unknown:
            kept.append(engine_finding(
                display, BY_CODE["LL002"], f"suppression names unknown rule(s): {', '.join(unknown)}",
                entry.line, entry.column, entry.line, entry.end_column,
                help="name a rule by its code or name (`lintloop rules` lists them)"))
        elif not entry.used and not entry.from_noqa and "LL003" in ruleset.codes and (
                not entry.selectors or any(lookup(s).code in ruleset.codes for s in entry.selectors)):
            kept.append(engine_finding(display, BY_CODE["LL003"], "suppression comment suppresses no finding",
                                       entry.line, entry.column, entry.line, entry.end_column,
                                       help="remove the comment, or the codes in it that suppress nothing"))
    return kept


def _enabled(findings: list[Finding], ruleset: RuleSet) -> list[Finding]:
    return [f for f in findings if f.code in ruleset.codes]


# ----- fixing --------------------------------------------------------------------------------


def apply_edits(text: str, edits: list[Edit]) -> str:
    """Apply non-overlapping edits (1-based line/column positions in `text`)."""
    lines = source_lines(text)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(line: int, column: int) -> int:
        return starts[line - 1] + column - 1

    pieces = []
    cursor = 0
    for edit in sorted(edits, key=lambda e: (e.line, e.column)):
        start, end = offset(edit.line, edit.column), offset(edit.end_line, edit.end_column)
        pieces.append(text[cursor:start])
        pieces.append(edit.content)
        cursor = end
    pieces.append(text[cursor:])
    return "".join(pieces)


@dataclass
class FixOutcome:
    text: str
    applied: int
    remaining: FileResult
    refused: list[str] = field(default_factory=list)


def fix_text(display: str, text: str, ruleset: RuleSet, unsafe: bool, max_passes: int = 10,
             path: str | os.PathLike[str] | None = None, explicit: bool = True,
             checks: Checks = Checks.FILE) -> FixOutcome:
    """Apply fixes until none applies; a pass whose result does not parse is refused and undone.
    `explicit`: as for `lint_bytes` (a file passed over is left as it is); `checks`: as for `lint_text`."""
    applied = 0
    refused: list[str] = []
    result = lint_text(display, text, ruleset, path=path, explicit=explicit, checks=checks)
    for _ in range(max_passes):
        chosen: list[Finding] = []
        taken: list[tuple[tuple[int, int], tuple[int, int]]] = []
        for finding in result.findings:
            if finding.fix is None or (finding.fix.applicability == "unsafe" and not unsafe):
                continue
            spans = [((e.line, e.column), (e.end_line, e.end_column)) for e in finding.fix.edits]
            if any(s < t_end and t_start < e for s, e in spans for t_start, t_end in taken):
                continue  # overlaps a fix already chosen in this pass; the next pass takes it
            chosen.append(finding)
            taken.extend(spans)
        if not chosen:
            break
        candidate = apply_edits(text, [e for f in chosen for e in f.fix.edits])
        error = syntax_error(display, candidate, checks)
        if error is not None:
            refused.append(f"{display}: fixes for {', '.join(sorted({f.code for f in chosen}))} refused: the "
                           f"result would not parse ({error.message} at line {error.line})")
            break
        text = candidate
        applied += len(chosen)
        result = lint_text(display, text, ruleset, path=path, checks=checks)
    return FixOutcome(text, applied, result, refused)


@dataclass
class NotebookFixOutcome:
    text: str  # the notebook file's new text (its old text where nothing changed)
    applied: int
    remaining: FileResult
    refused: list[str] = field(default_factory=list)
    changed_cells: dict[int, tuple[str, str]] = field(default_factory=dict)  # cell -> (old, new) source


def fix_notebook(display: str, text: str, ruleset: RuleSet, unsafe: bool,
                 path: str | os.PathLike[str] | None = None, explicit: bool = True) -> NotebookFixOutcome:
    """Fix a notebook's modules (its kernel's, and each file its cells write) as `fix_text` fixes a
    module, and write the fixed code back into the cells' sources, every other byte of the file as it
    was. `explicit`: as for `lint_bytes`."""
    try:
        notebook = Notebook.parse(text)
    except NotebookError:
        return NotebookFixOutcome(text, 0, lint_notebook(display, text, ruleset, path=path))
    if not notebook.python:
        return NotebookFixOutcome(text, 0, FileResult())
    modules = _notebook_modules(display, notebook, ruleset, explicit)
    if modules is None:
        return NotebookFixOutcome(text, 0, FileResult(passed_over=True))
    programs, broken = modules
    applied = 0
    refused: list[str] = []
    sources: dict[int, str] = {}  # cell -> fixed source, of every module (no cell is in two)
    for module in programs:
        outcome = fix_text(display, module.text, ruleset, unsafe, path=module.file_path(path), checks=_checks(module))
        refused.extend(outcome.refused)
        if not outcome.applied:
            continue
        try:
            sources.update(notebook.cell_sources(outcome.text, module))
            applied += outcome.applied
        except NotebookError as exc:
            refused.append(f"{display}: fixes refused: {exc}")
    if not applied:
        # Linted again, by cell: `fix_text`'s messages name the modules' lines.
        return NotebookFixOutcome(text, 0, _lint_modules(display, programs, broken, ruleset, None, path), refused)
    try:
        new_text = notebook.with_sources(sources)
        written = Notebook.parse(new_text)
        if {c.index: c.source for c in written.cells} != {**{c.index: c.source for c in notebook.cells}, **sources}:
            raise NotebookError("the rewritten file does not read back as the fixed cells")
    except NotebookError as exc:
        refused = [*refused, f"{display}: fixes refused: {exc}"]
        return NotebookFixOutcome(text, 0, _lint_modules(display, programs, broken, ruleset, None, path), refused)
    old = {c.index: c.source for c in notebook.cells}
    return NotebookFixOutcome(new_text, applied, lint_notebook(display, new_text, ruleset, path=path),
                              refused, {i: (old[i], new) for i, new in sorted(sources.items())})
