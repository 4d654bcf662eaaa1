"""Metamorphic bench: do a program's findings survive the way its code is split into modules, scopes
and cells?

Every rule's flagged and not-flagged examples and every example program (tests/fixtures/LL*_bad.py,
LL*_good.py) is rewritten by each meaning-preserving rewrite (bench/rewrites.py: aliases,
from-imports, notebook cells, helpers / the model / the loop moved to other modules;
bench/rewrites_scope.py: the loop body in a train-step function, the program in a Trainer class, a
factory returning the step), linted with the rule alone, and compared with the original:

  - a flagged program (one the rule flags as written) must still be flagged, somewhere in its files;
  - a not-flagged program must still be clean.

    python bench/metamorphic.py [--rules LL301,LL708] [--rewrites helpers_module] [--failures]
                                [--keep DIR] [--json FILE] [--screen] [--check]

prints the matrix rule × rewrite ("kept/applicable" of the flagged programs, and the not-flagged
programs that became flagged), the totals per rewrite, and with `--failures` each case lost. `--screen`
lints every case a second time parsing whole files and lists the cases whose verdict the screen
changes (it must change none). `--check` exits 1 unless every rewrite keeps ≥ 95 % of its flagged
programs and every not-flagged one clean (and, with `--screen`, no case differs).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from rewrites import MODULE_REWRITES, Files  # noqa: E402
from rewrites_scope import SCOPE_REWRITES  # noqa: E402

FIXTURES = HERE.parent / "tests" / "fixtures"
REWRITES: dict[str, Callable[[str], Files | None]] = {**MODULE_REWRITES, **SCOPE_REWRITES}
KEPT_SHARE = 0.95


@dataclass(frozen=True)
class Program:
    code: str  # the rule it exemplifies
    label: str  # flagged-3, not-flagged-0, LL301_tf_bad
    text: str
    flagged: bool  # the rule flags it as written (a flagged example, a `_bad` program)


@dataclass
class Cell:
    """One rule × rewrite: how many programs it applied to, and which did not keep their verdict."""

    flagged: int = 0
    flagged_lost: list[str] = field(default_factory=list)
    clean: int = 0
    clean_lost: list[str] = field(default_factory=list)


def programs(codes: set[str] | None = None) -> list[Program]:
    from lintloop.rules import ALL_RULES

    found = []
    for rule in ALL_RULES:
        if not rule.has_visitor() or (codes and rule.code not in codes):
            continue
        for index, example in enumerate(rule.flagged):
            found.append(Program(rule.code, f"flagged-{index}", textwrap.dedent(example.code).lstrip(), True))
        for index, example in enumerate(rule.not_flagged):
            found.append(Program(rule.code, f"not-flagged-{index}", textwrap.dedent(example.code).lstrip(), False))
        for path in sorted(FIXTURES.glob(f"{rule.code}_*.py")):
            if path.stem.endswith(("_bad", "_good")):
                found.append(Program(rule.code, path.stem, path.read_text(encoding="utf-8"), path.stem.endswith("_bad")))
    return found


def write_cases(root: Path, chosen: list[Program], rewrites: dict[str, Callable[[str], Files | None]]
                ) -> dict[tuple[str, str, str], Path]:
    """Each program as written (`original`) and as each rewrite writes it, in a folder of its own:
    root/<code>/<label>/<rewrite>/."""
    cases = {}
    for program in chosen:
        outputs = {"original": {"main.py": program.text}}
        for name, rewrite in rewrites.items():
            try:
                files = rewrite(program.text)
            except (SyntaxError, RecursionError):
                files = None  # a snippet the rewrite cannot read: not applicable
            if files is not None:
                outputs[name] = files
        for name, files in outputs.items():
            folder = root / program.code / program.label / name
            folder.mkdir(parents=True)
            for relative, text in files.items():
                (folder / relative).write_text(text, encoding="utf-8")
            cases[(program.code, program.label, name)] = folder
    return cases


@contextlib.contextmanager
def whole_files() -> Iterator[None]:
    """Every rule set made meanwhile parses whole files (the screen off, as tests/test_screen.py compares);
    the check's workers are forked from this process and inherit it."""
    from lintloop.rule import RuleSet

    made = RuleSet.__init__

    def unscreened(self: RuleSet, *args: object, **kwargs: object) -> None:
        made(self, *args, **kwargs)
        self.screen = False

    RuleSet.__init__ = unscreened  # type: ignore[method-assign]
    try:
        yield
    finally:
        RuleSet.__init__ = made  # type: ignore[method-assign]


def flagged_folders(root: Path, code: str, screen: bool = True) -> set[Path]:
    """The case folders under root/<code>/ in which the rule alone reports a finding (`screen`: with the
    screen on, as users run it, or parsing whole files)."""
    from lintloop.cli import main as lintloop

    report = root / f"{code}{'' if screen else '-whole'}.json"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
            (contextlib.nullcontext() if screen else whole_files()):
        lintloop(["check", str(root / code), "--select", code, "--format", "json", "--output", str(report),
                  "--no-cache", "--exit-zero", "--quiet", "--test-code-kinds", "bug,perf,hygiene"])
    folders = set()
    for finding in json.loads(report.read_text(encoding="utf-8")):
        if finding["code"] == code:
            relative = Path(finding["path"]).resolve().relative_to(root / code)
            folders.add(root / code / Path(*relative.parts[:2]))
    return folders


def matrix(root: Path, chosen: list[Program], rewrites: dict[str, Callable[[str], Files | None]],
           compare_screen: bool = False) -> tuple[dict[tuple[str, str], Cell], list[str], list[str]]:
    """The cells rule × rewrite, the programs whose verdict as written differs from what they are meant
    to show (left out of the matrix), and with `compare_screen` the case folders whose verdict differs
    between the screen on and whole files parsed (the screen must change no result)."""
    cases = write_cases(root, chosen, rewrites)
    flagged: set[Path] = set()
    differing: set[Path] = set()
    for code in sorted({p.code for p in chosen}):
        found = flagged_folders(root, code)
        flagged |= found
        if compare_screen:
            differing |= found ^ flagged_folders(root, code, screen=False)
    cells: dict[tuple[str, str], Cell] = {}
    off = []
    for program in chosen:
        original = cases[(program.code, program.label, "original")]
        if (original in flagged) != program.flagged:
            off.append(f"{program.code} {program.label}")
            continue
        for name in rewrites:
            folder = cases.get((program.code, program.label, name))
            if folder is None:
                continue
            cell = cells.setdefault((program.code, name), Cell())
            still = folder in flagged
            if program.flagged:
                cell.flagged += 1
                if not still:
                    cell.flagged_lost.append(str(folder))
            else:
                cell.clean += 1
                if still:
                    cell.clean_lost.append(str(folder))
    return cells, off, sorted(map(str, differing))


def share(kept: int, total: int) -> str:
    return f"{kept}/{total} ({100 * kept / total:.0f} %)" if total else "—"


def table(cells: dict[tuple[str, str], Cell], rewrites: list[str]) -> str:
    """Markdown: per rewrite, flagged programs still flagged and not-flagged ones still clean; then the
    rows rule × rewrite below 100 %."""
    lines = ["| rewrite | flagged still flagged | not-flagged still clean |", "|---|---:|---:|"]
    for name in rewrites:
        chosen = [c for (_, n), c in cells.items() if n == name]
        flagged = sum(c.flagged for c in chosen)
        clean = sum(c.clean for c in chosen)
        lines.append(f"| {name} | {share(flagged - sum(len(c.flagged_lost) for c in chosen), flagged)} | "
                     f"{share(clean - sum(len(c.clean_lost) for c in chosen), clean)} |")
    below = [(code, name, c) for (code, name), c in sorted(cells.items()) if c.flagged_lost or c.clean_lost]
    if below:
        lines += ["", "| rule | rewrite | flagged still flagged | not-flagged still clean |", "|---|---|---:|---:|"]
        for code, name, c in below:
            lines.append(f"| {code} | {name} | {share(c.flagged - len(c.flagged_lost), c.flagged)} | "
                         f"{share(c.clean - len(c.clean_lost), c.clean)} |")
    return "\n".join(lines)


def holds(cells: dict[tuple[str, str], Cell], rewrites: list[str]) -> bool:
    for name in rewrites:
        chosen = [c for (_, n), c in cells.items() if n == name]
        flagged = sum(c.flagged for c in chosen)
        kept = flagged - sum(len(c.flagged_lost) for c in chosen)
        if (flagged and kept < KEPT_SHARE * flagged) or any(c.clean_lost for c in chosen):
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rules", help="comma-separated codes (default: every rule with a visitor)")
    parser.add_argument("--rewrites", help=f"comma-separated, of: {', '.join(REWRITES)}")
    parser.add_argument("--failures", action="store_true", help="list each case that lost its verdict")
    parser.add_argument("--keep", type=Path, help="write the cases under DIR (empty or absent) and keep them")
    parser.add_argument("--json", type=Path, help="write the matrix as JSON to FILE")
    parser.add_argument("--check", action="store_true", help="exit 1 unless the acceptance shares hold")
    parser.add_argument("--screen", action="store_true",
                        help="also lint every case parsing whole files, and list those whose verdict differs")
    args = parser.parse_args(argv)
    codes = set(args.rules.split(",")) if args.rules else None
    rewrites = {n: REWRITES[n] for n in args.rewrites.split(",")} if args.rewrites else REWRITES
    chosen = programs(codes)
    with contextlib.ExitStack() as stack:
        root = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="lintloop-metamorphic-")))
        root.mkdir(parents=True, exist_ok=True)
        cells, off, differing = matrix(root.resolve(), chosen, rewrites, compare_screen=args.screen)
    print(f"{len(chosen)} programs of {len({p.code for p in chosen})} rules; {len(rewrites)} rewrites\n")
    print(table(cells, list(rewrites)))
    if off:
        print(f"\nleft out (the rule's verdict on the program as written is not the one it shows): {', '.join(off)}")
    for folder in differing:
        print(f"screen on and off differ: {folder}")
    if args.failures:
        for (code, name), cell in sorted(cells.items()):
            for folder in cell.flagged_lost:
                print(f"lost: {folder}")
            for folder in cell.clean_lost:
                print(f"new finding: {folder}")
    if args.json:
        args.json.write_text(json.dumps({f"{code} {name}": {
            "flagged": c.flagged, "flagged_lost": c.flagged_lost, "clean": c.clean, "clean_lost": c.clean_lost}
            for (code, name), c in sorted(cells.items())}, indent=1) + "\n")
    return 0 if not args.check or (holds(cells, list(rewrites)) and not differing) else 1


if __name__ == "__main__":
    sys.exit(main())
