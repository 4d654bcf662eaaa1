"""Memory per input byte: generated files and folders whose size or shape made lintloop's memory or
time grow faster than its input (issue 36: 190 nested lists in a 48 kB file took over 4 GiB and ended
as LL004; 1,000 small modules in one folder took 27 times what 100 did; one line of 100,000 pairs,
50 s and 3.5 GB), and their neighbours: deep brackets of every kind (and in f-strings, and between
pure parentheses), wide displays and calls on one line, many statements on one line, long lines,
indentation to CPython's limit, a huge string, a notebook of many cells, a folder of many modules
importing each other. Each case is bounded in memory (`BASE_MIB` plus `BYTES_PER_BYTE` per byte of
input, for the largest process) and time (`BASE_SECONDS` plus `SECONDS_PER_MB` and `SECONDS_PER_FILE`),
and must be analysed (no LL004). The long list runs each shape at ×1 and ×10 its quick size. Found with
it (fixed): 190 nested brackets of any kind, 12 statements of them: 0.45 to 1.5 GB (bound 127-163 MiB);
5,000 statements on one line: over 34 s (each was scanned with the whole line, and read its line's
unit again in the screen). A folder's quadratic reads (tests/test_project_view.py counts them) do not
show in memory, nor in time at these sizes: bench/scaling.py's `folder-*` shapes time them."""

from __future__ import annotations

import json

from harness import Case, Outcome

CATEGORY = "memory"
DESCRIPTION = "memory and time per input byte: deep, wide and many"

BASE_MIB = 120  # a run's start-up, the engine and its workers
BYTES_PER_BYTE = 1_500  # what a file's trees and analyses may hold per byte of it (training loops: ~450)
BASE_SECONDS = 30
SECONDS_PER_MB = 60  # training loops take ~12 s per MB; a deep or wide shape at most five times that
SECONDS_PER_FILE = 0.3  # a module whose view brings in its neighbours' definitions: ~0.08 s

HEADER = '''import torch
import torch.nn as nn
import torch.nn.functional as F

model = nn.Linear(16, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
'''
LOOP = '''for x, y in loader:
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
'''
LEVELS = {"lists": ("[", "]"), "calls": ("torch.stack(", ")"), "dicts": ("{'w': ", "}"), "subscripts": ("w[", "]"),
          "tuples": ("(1, ", ")"), "parentheses": ("(", ")"), "sets": ("{", "}")}


def _nested(kinds: list[str], depth: int, core: str) -> str:
    levels = [LEVELS[kinds[level % len(kinds)]] for level in range(depth)]
    return "".join(o for o, _ in levels) + core + "".join(c for _, c in reversed(levels))


def deep(kinds: list[str], depth: int, statements: int) -> str:
    """A training loop and `statements` statements nested `depth` brackets deep (of `kinds` in turn)."""
    return HEADER + LOOP + "".join(f"    extra_{i} = {_nested(kinds, depth, 'loss')}\n" for i in range(statements))


def deep_fstring(depth: int, statements: int) -> str:
    return HEADER + LOOP + "".join(f'    print(f"{{{_nested(["lists", "calls"], depth, "loss.item()")}!r}}")\n'
                                   for _ in range(statements))


def wide_display(elements: int, kind: str) -> str:
    """One statement on one line: a display (or call) of `elements` elements."""
    element = {"pairs": "[{i}, {j}]", "dict": "'k{i}': ({i}, 'v{j}')", "records": "{{'id': {i}, 'xy': [{j}]}}",
               "call": "w{i}={j}.5", "strings": "'token_{i}'"}[kind]
    items = ", ".join(element.format(i=i, j=i % 97) for i in range(elements))
    body = {"call": f"config = dict({items})", "dict": f"data = {{{items}}}"}.get(kind, f"data = [{items}]")
    return HEADER + body + "\n" + LOOP


def one_line_statements(count: int) -> str:
    return HEADER + "; ".join(f"a{i} = {i}" for i in range(count)) + "\n" + LOOP


def many_statements(count: int) -> str:
    return HEADER + "".join(f"setting_{i} = {i} * 2 + 1\n" for i in range(count)) + LOOP


def long_line(items: int) -> str:
    return HEADER + "model = nn.Sequential(" + ", ".join("nn.Linear(16, 16)" for _ in range(items)) + ")\n" + LOOP


def deep_indentation(levels: int, repeat: int) -> str:
    """`repeat` blocks of `levels` nested `if`s in a loop (CPython takes 99 levels of indentation), a
    training step at the bottom of each."""
    blocks = []
    for _ in range(repeat):
        blocks += [" " * depth + f"if flag_{depth}:\n" for depth in range(levels)]
        blocks.append(" " * levels + "loss = F.cross_entropy(model(x), y)\n" + " " * levels + "loss.backward()\n")
    return HEADER + "for x, y in loader:\n" + "".join(" " + line for line in blocks)


def huge_string(characters: int) -> str:
    return HEADER + "PROMPT = '" + "word " * (characters // 5) + "'\n" + LOOP


def notebook(cells: int) -> str:
    code = [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": HEADER}]
    code += [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
              "source": f"loss_{i} = F.cross_entropy(model(x), y)\nloss_{i}.backward()"} for i in range(cells)]
    return json.dumps({"cells": code, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def package(modules: int) -> dict[str, str]:
    """A package of `modules` modules, each a train step calling the next module's (a finding each)."""
    files = {"project/pkg/__init__.py": ""}
    for i in range(modules):
        following = (i + 1) % modules
        files[f"project/pkg/step_{i}.py"] = (
            f"import torch\nfrom .step_{following} import train_{following}\n\n\n"
            f"def train_{i}(model, loader, optimizer):\n    for x, y in loader:\n        loss = model(x).sum()\n"
            f"        loss.backward()\n        optimizer.step()\n    train_{following}(model, loader, optimizer)\n")
    return files


def _analysed(outcome: Outcome) -> str | None:
    if "LL004" in outcome.out:
        return "not analysed (LL004): " + next(line for line in outcome.out.splitlines() if "LL004" in line)[:200]
    return None


def _case(name: str, files: dict[str, str], argv: list[str] | None = None) -> Case:
    size = sum(len(text.encode("utf-8")) for text in files.values())
    return Case(CATEGORY, name, files, argv or ["check", "--no-cache", "--select", "ALL", "--format", "concise", "."],
                max_rss_mib=BASE_MIB + BYTES_PER_BYTE * size / 2**20,
                timeout=BASE_SECONDS + SECONDS_PER_MB * size / 1e6 + SECONDS_PER_FILE * len(files), expect=_analysed)


def _shapes(scale: int) -> list[tuple[str, dict[str, str]]]:
    """Every shape at `scale` (1: the quick size, 5-100 kB or 30 modules; 10: the long list's)."""
    shapes = [(f"deep-{kind}", {"project/train.py": deep([kind], 190 if kind != "tuples" else 95, 6 * scale)})
              for kind in ("lists", "calls", "dicts", "subscripts", "tuples", "parentheses", "sets")]
    shapes += [
        ("deep-mixed", {"project/train.py": deep(["lists", "calls", "dicts", "subscripts"], 190, 6 * scale)}),
        ("deep-fstrings", {"project/train.py": deep_fstring(190, 6 * scale)}),
        ("deep-in-a-notebook", {"project/train.ipynb": json.dumps({"cells": [
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
             "source": deep(["lists", "calls"], 190, 4)} for _ in range(3 * scale)],
            "metadata": {}, "nbformat": 4, "nbformat_minor": 5})}),
        ("wide-pairs", {"project/train.py": wide_display(5_000 * scale, "pairs")}),
        ("wide-dict", {"project/train.py": wide_display(3_000 * scale, "dict")}),
        ("wide-records", {"project/train.py": wide_display(2_000 * scale, "records")}),
        ("wide-call", {"project/train.py": wide_display(5_000 * scale, "call")}),
        ("wide-strings", {"project/train.py": wide_display(5_000 * scale, "strings")}),
        ("one-line-statements", {"project/train.py": one_line_statements(5_000 * scale)}),
        ("many-statements", {"project/train.py": many_statements(5_000 * scale)}),
        ("long-line", {"project/train.py": long_line(2_000 * scale)}),
        ("deep-indentation", {"project/train.py": deep_indentation(98, 4 * scale)}),
        ("huge-string", {"project/train.py": huge_string(500_000 * scale)}),
        ("notebook-cells", {"project/train.ipynb": notebook(1_000 * scale)}),
        ("folder-of-modules", package(30 * scale)),
    ]
    return shapes


# A cross-section: tests/test_scaling.py and tests/test_pieces.py measure the growth of every shape.
QUICK = ("deep-lists", "deep-calls", "deep-in-a-notebook", "wide-pairs", "one-line-statements")


def cases(quick: bool) -> list[Case]:
    if quick:
        return [_case(name, files) for name, files in _shapes(1) if name in QUICK]
    found = [_case(f"{name}-x{scale}", files) for scale in (1, 10) for name, files in _shapes(scale)]
    # The issue's own: 120 statements of 190 nested lists (48 kB; over 4 GiB, then LL004).
    found.append(_case("issue-36-deep-lists", {"project/train.py": deep(["lists"], 190, 120)}))
    # A folder with and without the cache, checked and fixed (as a diff: the modules stay as they are).
    modules = package(300)
    found += [_case("folder-of-modules-cached", modules, ["check", "--select", "ALL", "--format", "concise", "."]),
              _case("folder-of-modules-fix-diff", modules, ["fix", "--diff", "--select", "ALL", "."])]
    return found
