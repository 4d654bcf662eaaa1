"""The real-world review: lintloop's default findings on public training code, each with a person's verdict.

    python3 bench/realworld.py [--mirror DIR] [--only OWNER/NAME,...] [--lintloop CMD] [--json FILE]

Builds the repositories pinned in bench/realworld.tsv (their `*.py` and `*.ipynb` files at the pinned
commit, fetched with git from GitHub, or from local git directories `DIR/<owner>+<name>/repo` (bare, or a checkout) with
`--mirror`) under `~/.cache/lintloop-bench/realworld` (`--cache`), lints each with the default rules
and with `--select ALL` (the installed `lintloop check --format json`, run in the repository's root as
a user would), and compares the default findings with the verdicts in bench/realworld_review.tsv: one
row per finding ever reported, TP or the kind of false alarm (RULES.md "What is a finding") and why.

It prints, per repository: its size, the default findings now, how many are true positives, false
alarms and not yet reviewed, actionable precision (TP / default findings) before (the review's first
run) and now, and the `--select ALL` count; then the findings nobody has reviewed, the true positives
of the first run no longer reported (a TP lost), and the real misses of bench/realworld_misses.tsv
with whether they are reported now.

Exit status: 0 when every default finding has a verdict and no true positive was lost; 1 otherwise;
2 when the corpus could not be built. The driver uses the standard library only.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPOSITORIES = HERE / "realworld.tsv"
REVIEW = HERE / "realworld_review.tsv"
MISSES = HERE / "realworld_misses.tsv"
VERDICTS = ("TP", "FP-demo", "FP-small", "FP-premise", "FP-other")
SUFFIXES = (".py", ".ipynb")
# The marker of a finished export, named for what an export holds (v2: the requirements files too; v3:
# nbdev's settings.ini), so that an older export is made again.
COMPLETE = ".complete-v3"
# Files lintloop reads besides code: where a project declares its requirements (LL603 reads the torch
# it pins; lintloop.analysis.project.REQUIREMENT_FILES).
REQUIREMENT_FILES = ("requirements.txt", "pyproject.toml", "setup.py", "setup.cfg", "environment.yml",
                     "environment.yaml", "settings.ini")
SETS = ("reviewed", *(f"{half}-{split}" for split in range(1, 7) for half in ("tune", "held-out")))


@dataclass(frozen=True)
class Repository:
    name: str  # owner/name
    commit: str
    frameworks: str
    kind: str
    set: str  # one of SETS (realworld.tsv)

    @property
    def folder(self) -> str:
        return f"{self.name.replace('/', '+')}@{self.commit[:12]}"


# A finding's identity across runs: the repositories are pinned, so its place and code identify it.
Key = tuple[str, str, str, str, str]  # repo, path, cell ("" outside notebooks), line, code


def read_tsv(path: Path) -> list[list[str]]:
    """Rows of a tab-separated file, without `#` comment lines; the first row is the header."""
    with path.open(newline="", encoding="utf-8") as handle:
        return [row for row in csv.reader((line for line in handle if not line.startswith("#")), delimiter="\t")
                if row]


def repositories() -> list[Repository]:
    return [Repository(*row) for row in read_tsv(REPOSITORIES)]


# ----- building the corpus ---------------------------------------------------------------------


def build(repo: Repository, cache: Path, mirror: Path | None) -> Path:
    """The repository's Python files and notebooks at its commit, under `cache` (reused once complete)."""
    dest = cache / "src" / repo.folder
    if (dest / COMPLETE).exists():
        return dest
    if mirror is not None:
        git_dir = mirror / repo.name.replace("/", "+") / "repo"
        if (git_dir / ".git").is_dir():  # a checkout, not a bare directory
            git_dir = git_dir / ".git"
        missing = export(git_dir, repo.commit, dest)
    else:
        with tempfile.TemporaryDirectory() as scratch:
            git_dir = Path(scratch) / "git"
            run(["git", "init", "--quiet", "--bare", str(git_dir)])
            run(["git", f"--git-dir={git_dir}", "fetch", "--quiet", "--depth", "1",
                 f"https://github.com/{repo.name}.git", repo.commit])
            missing = export(git_dir, repo.commit, dest)
    dest.mkdir(parents=True, exist_ok=True)  # a snapshot may hold none of the files
    (dest / "lintloop.toml").write_text("# the default rules (bench/realworld.py)\n")
    (dest / COMPLETE).write_text(f"{missing} files absent from the snapshot\n")
    return dest


def export(git_dir: Path, commit: str, dest: Path) -> int:
    """Write the commit's `*.py` and `*.ipynb` blobs and its requirements files under `dest`; the number
    absent from the git directory (a snapshot without its largest files) is returned."""
    listing = run(["git", f"--git-dir={git_dir}", "ls-tree", "-r", "-z", commit]).split("\0")
    wanted = []
    for entry in filter(None, listing):
        meta, path = entry.split("\t", 1)
        mode, kind, sha = meta.split()
        if kind == "blob" and mode != "120000" and (path.endswith(SUFFIXES)
                                                     or path.rsplit("/", 1)[-1] in REQUIREMENT_FILES):
            wanted.append((sha, path))
    missing = 0
    with subprocess.Popen(["git", f"--git-dir={git_dir}", "cat-file", "--batch"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE) as batch:
        assert batch.stdin is not None and batch.stdout is not None
        for sha, path in wanted:
            batch.stdin.write(sha.encode() + b"\n")
            batch.stdin.flush()
            header = batch.stdout.readline().split()
            if header[-1] == b"missing":
                missing += 1
                continue
            data = batch.stdout.read(int(header[2]))
            batch.stdout.read(1)  # the newline after each object
            target = dest / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    return missing


def run(command: list[str], cwd: Path | None = None) -> str:
    proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {shlex.join(command)}\n{proc.stderr.strip()[-2000:]}")
    return proc.stdout


def size(root: Path) -> tuple[int, int]:
    """Files, and non-blank lines of Python (notebooks: of their code cells)."""
    files = lines = 0
    for path in sorted(root.rglob("*")):
        if not path.name.endswith(SUFFIXES) or not path.is_file():
            continue
        files += 1
        text = path.read_text(encoding="utf-8", errors="replace")
        if path.suffix == ".ipynb":
            try:
                cells = json.loads(text).get("cells", [])
            except (ValueError, AttributeError):
                continue
            text = "\n".join("".join(c["source"]) if isinstance(c.get("source"), list) else str(c.get("source", ""))
                             for c in cells if isinstance(c, dict) and c.get("cell_type") == "code")
        lines += sum(1 for line in text.splitlines() if line.strip())
    return files, lines


# ----- linting and comparing -------------------------------------------------------------------


def lint(lintloop: list[str], root: Path, select_all: bool) -> list[dict]:
    command = [*lintloop, "check", "--format", "json", "--no-cache", "--exit-zero", "--quiet",
               *(["--select", "ALL"] if select_all else []), "."]
    proc = subprocess.run(command, cwd=root, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"lintloop failed ({proc.returncode}) in {root}: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout)


def key(repo: str, finding: dict) -> Key:
    cell = finding.get("cell")
    return repo, finding["path"], "" if cell is None else str(cell), str(finding["line"]), finding["code"]


@dataclass
class Verdict:
    verdict: str
    first_run: bool
    reason: str


def review() -> dict[Key, Verdict]:
    rows = read_tsv(REVIEW)
    header, verdicts = rows[0], {}
    for row in rows[1:]:
        entry = dict(zip(header, row))
        if entry["verdict"] not in VERDICTS:
            raise SystemExit(f"{REVIEW.name}: unknown verdict {entry['verdict']!r} (one of {', '.join(VERDICTS)})")
        found = (entry["repo"], entry["path"], entry["cell"], entry["line"], entry["code"])
        if found in verdicts:
            raise SystemExit(f"{REVIEW.name}: two rows for {found}")
        verdicts[found] = Verdict(entry["verdict"], entry["first_run"] == "yes", entry["reason"])
    return verdicts


def precision(tp: int, total: int) -> str:
    return f"{tp / total:.2f}" if total else "—"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=Path(os.environ.get(
        "LINTLOOP_BENCH_CACHE", Path.home() / ".cache" / "lintloop-bench")) / "realworld")
    parser.add_argument("--mirror", type=Path, help="local git directories DIR/<owner>+<name>/repo instead of GitHub")
    parser.add_argument("--only", help="comma-separated owner/name to run")
    parser.add_argument("--set", choices=SETS, help="run one set of realworld.tsv only")
    parser.add_argument("--lintloop", default=f"{shlex.quote(sys.executable)} -m lintloop",
                        help="the lintloop command (default: this Python's)")
    parser.add_argument("--json", type=Path, help="write every finding (default rules and ALL) to this file")
    args = parser.parse_args(argv)
    lintloop = shlex.split(args.lintloop)
    chosen = repositories()
    if args.only:
        names = set(args.only.split(","))
        chosen = [r for r in chosen if r.name in names]
    if args.set:
        chosen = [r for r in chosen if r.set == args.set]
    verdicts = review()
    in_scope = {r.name for r in chosen}

    rows, unreviewed, everything = [], [], {}
    reported: set[Key] = set()
    totals = {s: Counter() for s in SETS}
    for repo in chosen:
        root = build(repo, args.cache, args.mirror)
        files, lines = size(root)
        default, every = lint(lintloop, root, False), lint(lintloop, root, True)
        everything[repo.name] = {"default": default, "all": every}
        keys = [key(repo.name, f) for f in default]
        reported.update(keys)
        now = Counter(verdicts[k].verdict if k in verdicts else "unreviewed" for k in keys)
        unreviewed += [(k, f) for k, f in zip(keys, default) if k not in verdicts]
        first = [v for k, v in verdicts.items() if k[0] == repo.name and v.first_run]
        first_tp = sum(v.verdict == "TP" for v in first)
        false_alarms = sum(n for verdict, n in now.items() if verdict.startswith("FP"))
        rows.append((repo, files, lines, len(first), first_tp, len(default), now["TP"], false_alarms,
                     now["unreviewed"], len(every)))
        totals[repo.set].update(repos=1, files=files, lines=lines, first=len(first), first_tp=first_tp, now=len(default), tp=now["TP"],
                      fp=false_alarms, unreviewed=now["unreviewed"], all=len(every))

    print("| repository | set | kind | files | lines | first run: findings | TP | precision | now: findings | TP | "
          "false alarms | unreviewed | precision | `--select ALL` |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for repo, files, lines, first, first_tp, now, tp, fp, todo, every in rows:
        print(f"| {repo.name} | {repo.set} | {repo.kind} | {files:,} | {lines:,} | {first} | {first_tp} | "
              f"{precision(first_tp, first)} | {now} | {tp} | {fp} | {todo} | {precision(tp, now)} | {every} |")
    for name, t in totals.items():
        if t["repos"]:
            print(f"| **{name}: {t['repos']} repositories** | | | {t['files']:,} | {t['lines']:,} | {t['first']} | "
                  f"{t['first_tp']} | {precision(t['first_tp'], t['first'])} | {t['now']} | {t['tp']} | {t['fp']} | "
                  f"{t['unreviewed']} | {precision(t['tp'], t['now'])} | {t['all']} |")

    by_verdict = Counter(verdicts[k].verdict for k in reported if k in verdicts)
    print("\nDefault findings now, by verdict: " + ", ".join(f"{v} {by_verdict[v]}" for v in VERDICTS))
    fixed = Counter(v.verdict for k, v in verdicts.items() if k[0] in in_scope and k not in reported
                    and v.verdict != "TP")
    if fixed:
        print("False alarms of earlier runs no longer reported: "
              + ", ".join(f"{v} {n}" for v, n in sorted(fixed.items())))
    if unreviewed:
        print(f"\n## Not reviewed ({len(unreviewed)}): add a row to {REVIEW.name} for each")
        for (repo, path, cell, line, code), finding in unreviewed:
            where = f"{path}" + (f" cell {cell}" if cell else "")
            print(f"{repo}\t{where}:{line}\t{code}\t{finding['message'][:160]}")
    lost = sorted(k for k, v in verdicts.items() if k[0] in in_scope and v.verdict == "TP" and k not in reported)
    if lost:
        print(f"\n## True positives no longer reported ({len(lost)})")
        for found in lost:
            print("\t".join(found) + "\t" + verdicts[found].reason)
    misses = read_tsv(MISSES)
    header = misses[0]
    print(f"\n## Real misses found while reviewing ({len(misses) - 1}; {MISSES.name})")
    for row in misses[1:]:
        entry = dict(zip(header, row))
        if entry["repo"] not in in_scope:
            continue
        found = (entry["repo"], entry["path"], entry["cell"], entry["line"], entry["code"])
        every_key = {key(entry["repo"], f) for f in everything[entry["repo"]]["all"]}
        status = "reported (default)" if found in reported else "reported (ALL)" if found in every_key else "missed"
        print(f"{status}\t{entry['repo']}\t{entry['path']}{' cell ' + entry['cell'] if entry['cell'] else ''}:"
              f"{entry['line']}\t{entry['code']}\t{entry['what']}")
    if args.json:
        args.json.write_text(json.dumps(everything, indent=1))
    return 1 if unreviewed or lost else 0


if __name__ == "__main__":
    sys.exit(main())
