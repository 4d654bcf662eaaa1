"""Command line: check, fix, rule, rules.

What a command imports decides how long it takes to start: this module loads what `check` needs to
answer from the result cache and nothing more; the rule classes (with libcst), the probe, the
language server and rich's tables are imported by the commands that use them.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import warnings
from pathlib import Path
from collections.abc import Callable

from lintloop import __version__, terminal
from lintloop.entry import EXIT_INTERRUPTED
from lintloop.cache import ResultCache
from lintloop.config import ConfigError, Overrides, Settings, SettingsResolver
from lintloop.discovery import SourceFile, discover
from lintloop.finding import Finding, unique
from lintloop.isolation import DEFAULT_MEMORY_MIB, DEFAULT_SECONDS, Limits, WorkerPool, usable_cores
from lintloop.notebook import Notebook, NotebookError, is_notebook
from lintloop.output import OutputError, output_target, write_report
from lintloop.progress import progress_bar
from lintloop.reporters import FORMATS, render
from lintloop.runner import JobResult, make_jobs, run_jobs, started_workers
from lintloop.runtime_probe.options import add_probe_options, build_probe_parser
from lintloop.source import SourceText, UndecodableSource

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def _selectors(text: str) -> list[str]:
    return [s for s in text.replace(" ", ",").split(",") if s]


def _non_negative(kind: Callable[[str], float]) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not value >= 0:  # also refuses nan
            raise argparse.ArgumentTypeError(f"must be 0 or more: {text!r}")
        return value

    return parse


def _lint_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", metavar="PATH", help="files or directories (default: .)")
    parser.add_argument("--select", type=_selectors, metavar="CODES",
                        help="comma-separated codes, prefixes (LL1) or names to enable instead of the defaults")
    parser.add_argument("--extend-select", type=_selectors, default=[], metavar="CODES", help="enable these as well")
    parser.add_argument("--ignore", type=_selectors, default=[], metavar="CODES", help="disable these")
    parser.add_argument("--test-code-kinds", type=_selectors, metavar="KINDS",
                        help="comma-separated kinds of rules (bug, perf, hygiene) that run in test modules, "
                             "instead of the configuration's (default: bug); '' for none")
    parser.add_argument("--format", choices=FORMATS, default=None, help="output format (default: text)")
    parser.add_argument("--output", metavar="FILE", help="write the report to FILE instead of stdout")
    parser.add_argument("--exit-zero", action="store_true", help="exit 0 even when findings are reported")
    parser.add_argument("--statistics", action="store_true",
                        help="count findings per rule, then per folder, instead of listing them")
    parser.add_argument("--no-cache", action="store_true", help="do not read or write the result cache")
    parser.add_argument("--jobs", "-j", type=int, metavar="N",
                        help="parallel workers (default, and at most: the cores this process may use)")
    parser.add_argument("--file-timeout", type=_non_negative(float), metavar="SECONDS",
                        help=f"stop a file's analysis after SECONDS and report it as not analysed (LL004); "
                             f"0: no limit (default: {DEFAULT_SECONDS:g})")
    parser.add_argument("--file-memory-limit", type=_non_negative(int), metavar="MIB",
                        help=f"stop a file's analysis when its worker uses more than MIB MiB and report it as not "
                             f"analysed (LL004; enforced on Linux); 0: no limit (default: {DEFAULT_MEMORY_MIB})")
    parser.add_argument("--config", type=Path, metavar="FILE", help="use this pyproject.toml / lintloop.toml")
    parser.add_argument("--force-exclude", action="store_true",
                        help="apply `exclude` to files named on the command line too (for pre-commit)")
    parser.add_argument("--quiet", "-q", action="store_true", help="findings only, no summary")
    parser.add_argument("--verbose", action="store_true", help="show tracebacks of internal errors")
    terminal.add_color_option(parser)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lintloop", description="Find the mistakes that make training loops "
                                     "silently wrong, slow or leaky (TensorFlow/Keras, PyTorch, JAX).")
    parser.add_argument("--version", action="version", version=f"lintloop {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    check = commands.add_parser("check", help="lint files and directories")
    _lint_options(check)
    check.add_argument("--probe", action="store_true",
                       help="then run each script with probe-able findings under the runtime probe (runs your "
                            "code) and attach a verdict to each finding")
    add_probe_options(check, prefix="probe-")
    check.add_argument("--report", type=Path, metavar="DIR",
                       help="with --probe: write an HTML page per probed program (memory per step, traces, "
                            "gradient norms; the flagged and the fixed program side by side) into DIR")
    fix = commands.add_parser("fix", help="apply fixes in place, then report what remains")
    _lint_options(fix)
    fix.add_argument("--unsafe-fixes", action="store_true", default=None, help="also apply unsafe fixes")
    fix.add_argument("--diff", action="store_true", help="print a unified diff of the fixes and write nothing")
    fix.add_argument("--write-outside-project", action="store_true",
                     help="also rewrite files that really lie outside the project (reached through a symbolic "
                          "link) or have other names (hard links); by default they are reported, not rewritten")
    rule = commands.add_parser("rule", help="show one rule's documentation")
    rule.add_argument("rule", metavar="CODE-OR-NAME")
    rule.add_argument("--format", choices=("text", "json"), default="text")
    rule.add_argument("--example", nargs="?", const="", metavar="NAME",
                      help="print a runnable example program of the rule instead (default: its flagged program; "
                           "the documentation lists the others)")
    rules = commands.add_parser("rules", help="list all rules")
    rules.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    terminal.add_color_option(rules)
    build_probe_parser(commands)
    commands.add_parser("server", help="run the language server (LSP over stdin/stdout) for editors",
                        description="A Language Server over stdio: diagnostics while you type, quick fixes, "
                        "suppressions and rule documentation on hover. Configure your editor to start "
                        "`lintloop server` for Python files.")
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        status = _main(argv)
        try:
            sys.stdout.flush()  # here, not in the interpreter's exit, where a failure is a traceback
        except OSError as exc:
            if isinstance(exc, BrokenPipeError):
                raise
            raise OutputError(f"cannot write to standard output: {exc.strerror or exc}") from None
        return status
    except KeyboardInterrupt:  # Ctrl-C anywhere, argument parsing and imports included: no traceback
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`lintloop check | head`): stop quietly.
        _drop_stdout()
        return EXIT_FINDINGS
    except OutputError as exc:
        print(f"lintloop: error: {terminal.printable(str(exc))}", file=sys.stderr)
        _drop_stdout()
        return EXIT_ERROR


def _drop_stdout() -> None:
    """Point stdout at /dev/null, whose output cannot be written (a closed pipe, a full disk): the
    interpreter's final flush then reports nothing again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _main(argv: list[str] | None) -> int:
    # Parsing user code with Python's own parser (the fast paths) warns about the code's invalid
    # escape sequences and the like (SyntaxWarning on 3.12+): findings are ours to report, not those.
    warnings.filterwarnings("ignore", category=SyntaxWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning, message="invalid escape sequence")
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    # `lintloop probe FILE [options] -- ARGS`: everything after `--` belongs to the script.
    script_args: list[str] = []
    if argv[:1] == ["probe"] and "--" in argv:
        split = argv.index("--")
        argv, script_args = argv[:split], argv[split + 1:]
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_ERROR
    if args.command == "server":
        from lintloop.server import run_server  # the LSP stack is loaded by the server alone

        return run_server()
    terminal.set_color_choice(getattr(args, "color", "auto"))
    try:
        if args.command in ("rule", "rules"):  # they read nothing but what lintloop ships: an OSError is the output's
            try:
                return _rule(args) if args.command == "rule" else _rules(args)
            except BrokenPipeError:
                raise
            except OSError as exc:
                raise OutputError(f"cannot write to standard output: {exc.strerror or exc}") from None
        if args.command == "probe":
            from lintloop.runtime_probe.cli import probe_command

            return probe_command(args, script_args)
        return _lint(args)
    except ConfigError as exc:
        print(f"lintloop: error: {terminal.printable(str(exc))}", file=sys.stderr)
        return EXIT_ERROR
    except (KeyboardInterrupt, BrokenPipeError, OutputError):
        raise
    except Exception as exc:  # noqa: BLE001 - the contract: one line, exit 2, traceback only with --verbose
        if getattr(args, "verbose", False):
            import traceback  # a bug's report only: not on every run's start-up path

            traceback.print_exc()
        print(f"lintloop: internal error: {type(exc).__name__}: {terminal.printable(str(exc))}", file=sys.stderr)
        return EXIT_ERROR


def _rule(args: argparse.Namespace) -> int:
    from lintloop.rules import lookup

    rule = lookup(args.rule)
    if rule is None:
        print(f"lintloop: error: unknown rule {args.rule!r} (see `lintloop rules`)", file=sys.stderr)
        return EXIT_ERROR
    if args.example is not None:
        from lintloop.rule_examples import example_text

        try:
            sys.stdout.write(example_text(rule.code, args.example or None))
        except KeyError as exc:
            message, names = exc.args
            print(f"lintloop: error: {message}" + (f" (examples: {', '.join(names)})" if names else ""),
                  file=sys.stderr)
            return EXIT_ERROR
        return EXIT_CLEAN
    if args.format == "json":
        print(json.dumps(dict(rule.metadata(), documentation=rule.documentation()), indent=2))
    else:
        sys.stdout.write(rule.documentation())
    return EXIT_CLEAN


def _rules(args: argparse.Namespace) -> int:
    from rich.table import Table

    from lintloop.rules import ALL_RULES

    if args.format == "json":
        print(json.dumps([r.metadata() for r in ALL_RULES], indent=2))
        return EXIT_CLEAN
    if args.format == "markdown":
        sys.stdout.write(rules_markdown())
        return EXIT_CLEAN
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("code", "name", "framework", "kind", "default", "fix", "description"):
        table.add_column(column, no_wrap=column != "description")
    for r in ALL_RULES:
        meta = r.metadata()
        table.add_row(r.code, r.name, ", ".join(r.frameworks) or "—", r.kind, meta["default"], _fix_word(r.fix_kind),
                      r.description)
    console = terminal.console(sys.stdout)
    if console.is_terminal:
        console.print(table)  # fitted to the terminal's width
        return EXIT_CLEAN
    # A pipe or a file: whole lines (not the 80-column fallback), none padded past its text.
    console.width = 1_000
    with console.capture() as captured:
        console.print(table)
    sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
    return EXIT_CLEAN


def _fix_word(fix_kind: str) -> str:
    """A rule's fix in one word for the table (`lintloop rule CODE` says when which applies)."""
    if fix_kind == "—":
        return "—"
    safe, unsafe = fix_kind.startswith("safe"), "unsafe" in fix_kind
    return "safe/unsafe" if safe and unsafe else "safe" if safe else "unsafe"


def rules_markdown() -> str:
    """The rule table of the README (kept in sync by a test)."""
    from lintloop.rules import ALL_RULES

    lines = ["| code | name | framework | default | fix | what it flags |", "|---|---|---|---|---|---|"]
    for r in ALL_RULES:
        lines.append(f"| {r.code} | {r.name} | {', '.join(r.frameworks) or '—'} | {'on' if r.default_on else 'off'} | "
                     f"{_fix_word(r.fix_kind)} | {r.description.replace('|', chr(92) + '|')} |")
    return "\n".join(lines) + "\n"


def _resolver(args: argparse.Namespace) -> SettingsResolver:
    """Configuration per directory (the closest file, or `--config` for all), command-line options on top."""
    overrides = Overrides(select=args.select, extend_select=args.extend_select, ignore=args.ignore,
                          unsafe_fixes=bool(getattr(args, "unsafe_fixes", None)), jobs=args.jobs,
                          file_timeout=args.file_timeout, file_memory_limit=args.file_memory_limit,
                          test_code_kinds=args.test_code_kinds)
    return SettingsResolver(overrides, forced=args.config)


def _discover(paths: list[str], resolver: SettingsResolver,
              force_exclude: bool) -> tuple[list[tuple[SourceFile, Settings]], list[str]]:
    """The files to lint, each with its settings. Each argument is searched with the settings of its
    closest configuration; a file below another configuration is then dropped where that one's
    `exclude` matches it (files named on the command line are kept unless `force_exclude`)."""
    by_settings: dict[int, tuple[Settings, list[str]]] = {}
    for path in paths:
        settings = resolver.for_path(Path(path))
        by_settings.setdefault(id(settings), (settings, []))[1].append(path)
    found: dict[Path | str, tuple[SourceFile, Settings]] = {}
    missing: list[str] = []
    for searched_with, arguments in by_settings.values():
        files, not_found = discover(arguments, searched_with, force_exclude)
        missing += not_found
        named = set(arguments)
        for file in files:
            settings = resolver.for_file(file.path)
            if settings is not searched_with and (force_exclude or file.display not in named) \
                    and settings.excludes(file.path):
                continue
            # discover() found each file once; searches with other settings may find it again.
            found.setdefault(file.path.resolve() if len(by_settings) > 1 else file.display, (file, settings))
    return sorted(found.values(), key=lambda item: item[0].display), missing


def _lint(args: argparse.Namespace) -> int:
    if getattr(args, "report", None) is not None and not args.probe:
        raise ConfigError("--report needs --probe (the report shows what the probe measured)")
    resolver = _resolver(args)
    settings = resolver.for_directory(Path.cwd())  # the run's own: cache, workers, report
    if args.output:
        output_target(args.output, settings.root)  # an --output that cannot be written: said before the run
    paths = args.paths or ["."]
    # Linting allocates many short-lived tree objects: at the default threshold (700) the cyclic GC
    # runs constantly (measured: parsing the corpus 2.03 s -> 1.19 s). Workers inherit it.
    gc.set_threshold(50_000, 20, 100)
    workers = min(settings.jobs or usable_cores(), usable_cores())
    limits = Limits.configured(settings.file_timeout, settings.file_memory_limit)
    # Without a result cache to answer from, every file analysed needs the engine: where a directory is
    # to be walked (many files, most likely), the workers start and import it while the files are found.
    # (With a cache, a warm run imports it nowhere: tests/test_startup.py.)
    uncached = args.no_cache or args.command != "check"
    pool = started_workers(workers, limits) if uncached and any(os.path.isdir(path) for path in paths) else None
    try:
        return _lint_files(args, resolver, settings, paths, workers, limits, pool)
    finally:
        if pool is not None:
            pool.close()


def _lint_files(args: argparse.Namespace, resolver: SettingsResolver, settings: Settings, paths: list[str],
                workers: int, limits: Limits, pool: WorkerPool | None) -> int:
    discovered, missing = _discover(paths, resolver, args.force_exclude)
    files = [file for file, _ in discovered]
    for message in missing:
        _say(f"error: {message}")
    mode = "check" if args.command == "check" else ("diff" if args.diff else "fix")
    cache = None if args.no_cache or mode != "check" else ResultCache.open(settings.root)
    cache_dir = None if cache is None else str(cache.directory)
    groups: dict[int, tuple[Settings, list[SourceFile]]] = {}
    for file, file_settings in discovered:
        groups.setdefault(id(file_settings), (file_settings, []))[1].append(file)
    jobs = [job for group_settings, group_files in groups.values()
            for job in make_jobs(group_files, group_settings.codes(), group_settings.rule_options, mode,
                                 per_file_ignores=_skipped(group_settings),
                                 unsafe_fixes=group_settings.unsafe_fixes, cache_dir=cache_dir,
                                 write_root=None if getattr(args, "write_outside_project", False)
                                 else str(group_settings.root))]
    bar = progress_bar(len(jobs), quiet=args.quiet)
    try:
        results = run_jobs(jobs, workers, on_result=bar, limits=limits, pool=pool)
    finally:
        if bar is not None:
            bar.close()
    if cache is not None and any(r.cache_written for r in results):
        cache.prune()  # once, here in the parent: bounds the cache to its size
    findings = unique(sorted((f for r in results for f in r.findings), key=Finding.sort_key))
    errors = [e for r in results for e in r.errors]
    if getattr(args, "probe", False):
        from lintloop.runtime_probe.correlate import ProbeOptions, attach_verdicts

        options = ProbeOptions(steps=args.probe_steps or 100, timeout=args.probe_timeout, device=args.device,
                               python=args.python, memory_limit_mb=args.memory_limit, report_dir=args.report)
        by_display = {f.display: f.path for f in files}
        attach_verdicts(findings, by_display, options)
        if cache is not None:
            _record_verdicts(cache.directory, findings, by_display)
    passed_over = [r.display for r in results if r.passed_over]
    _report(args, results, findings, settings, mode, files, unchecked=len(missing) + len(errors),
            passed_over=len(passed_over))
    for error in errors:
        _say(f"error: {error}")
    if args.verbose:
        for display in passed_over:
            _say(f"not parsed (no deep-learning code): {display}")
        for details in (d for r in results for d in r.tracebacks):
            print(terminal.printable_lines(details), file=sys.stderr, end="")
    if missing or errors:
        return EXIT_ERROR
    changed = mode == "diff" and any(r.diff for r in results)
    return EXIT_FINDINGS if (findings or changed) and not args.exit_zero else EXIT_CLEAN


def _skipped(settings: Settings) -> Callable[[SourceFile], set[str]]:
    """The codes a configuration switches off for each file (per-file-ignores, the test-code policy):
    decided here, before the jobs are made, so that a job's codes (and its cache key) are the file's own."""
    return lambda file: settings.skipped_for(file.path, resolved=not file.explicit)


def _record_verdicts(cache_dir: Path, findings: list[Finding], paths: dict[str, Path]) -> None:
    """Keep each probed file's verdicts for the language server (`runtime_probe.store`)."""
    from lintloop.runtime_probe import store as probe_store

    by_file: dict[str, list[Finding]] = {}
    for finding in findings:
        if finding.probe is not None:
            by_file.setdefault(finding.path, []).append(finding)
    for display, file_findings in by_file.items():
        text = _read_text(paths[display])
        if text is not None:
            probe_store.record(cache_dir, paths[display], text, file_findings)


def _report(args: argparse.Namespace, results: list[JobResult], findings: list[Finding], settings: Settings,
            mode: str, files, unchecked: int, passed_over: int) -> None:
    fmt = args.format or "text"
    for result in results:
        for message in result.messages:
            _say(message)
    if mode == "diff":
        diff = "".join(r.diff for r in results)
        write_report(lambda stream: stream.write(terminal.printable_lines(diff)))
        unsafe = sum(f.fix is not None and f.fix.applicability == "unsafe" for f in findings)
        if unsafe and not settings.unsafe_fixes:
            shown = "The diff shows the safe fixes only" if diff else "No safe fix to show"
            _say(f"{shown}: {unsafe} finding{'s have unsafe fixes' if unsafe != 1 else ' has an unsafe fix'}, "
                 "which may change what the code does; `lintloop fix --diff --unsafe-fixes` shows "
                 f"{'them' if unsafe != 1 else 'it'}.")
    elif mode == "fix" and not args.quiet:
        fixed = sum(r.fixed for r in results)
        touched = sum(1 for r in results if r.fixed)
        print(f"Fixed {fixed} finding{'s' if fixed != 1 else ''} in {touched} file{'s' if touched != 1 else ''}.",
              file=sys.stderr)
    with_findings = {f.path for f in findings}
    sources = {f.display: _read_source(f.path) for f in files if f.display in with_findings} if fmt == "text" else {}
    if args.output:
        write_report(lambda stream: render(
            findings, fmt, stream, sources=sources, statistics=args.statistics, quiet=args.quiet,
            unsafe_fixes=settings.unsafe_fixes, is_file=True, unchecked=unchecked, passed_over=passed_over,
            root=str(settings.root)), args.output, settings.root)
    elif mode == "diff" and findings:  # what remains, on stderr: stdout is the diff's
        render(findings, fmt, sys.stderr, sources=sources, statistics=args.statistics, quiet=args.quiet,
               unsafe_fixes=settings.unsafe_fixes, is_file=False, unchecked=unchecked, passed_over=passed_over,
               root=str(settings.root))
    elif mode != "diff":
        write_report(lambda stream: render(
            findings, fmt, stream, sources=sources, statistics=args.statistics, quiet=args.quiet,
            unsafe_fixes=settings.unsafe_fixes, is_file=False, unchecked=unchecked, passed_over=passed_over,
            root=str(settings.root)))


def _say(message: str) -> None:
    """A line for the user on stderr, escaped: it may hold a file's name or text."""
    print(f"lintloop: {terminal.printable(message)}", file=sys.stderr)


def _read_text(path: Path) -> str | None:
    try:
        return SourceText.from_bytes(path.read_bytes()).text
    except (OSError, UndecodableSource):
        return None


def _read_source(path: Path) -> str | dict[int, str] | None:
    """What the text report shows lines of: a file's text, or a notebook's code cells' sources."""
    text = _read_text(path)
    if text is None or not is_notebook(str(path)):
        return text
    try:
        return {cell.index: cell.source for cell in Notebook.parse(text).cells}
    except NotebookError:
        return None
