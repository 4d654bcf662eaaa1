"""Whether a file parses, and what lintloop reports on it, does not depend on the interpreter.

Syntax newer than the oldest supported Python (PEP 695, PEP 701 f-strings, `match`, `except*`,
PEP 646) is linted on every host with its findings and suppressions and no LL001, and a real
syntax error is the same LL001 everywhere: libcst's parser decides. The same inputs are linted
by python3.10 and python3.13 (a virtual environment of each, where installed) and their JSON
output must equal the host's byte for byte.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lintloop.linter import lint_text
from lintloop.rule import RuleSet
from lintloop.rules import ALL_RULES

REPO = Path(__file__).resolve().parent.parent

# Two flagged examples around each construct: LL701 (no `zero_grad` in the loop: reported) and
# LL201 (`print` in a tf.function: suppressed by its comment). `{body}` is the loop's body, indented.
_PROGRAM = """\
import tensorflow as tf
import torch
{prelude}

{train}
        loss = model(x).sum()
        loss.backward()
        opt.step()


@tf.function
def step(x):
    print(x)  # lintloop: ignore[LL201]
    return x
"""

_LOOP = "def train(model, opt, loader):\n    for x in loader:\n"

NEWER_SYNTAX = {
    "pep695_type_alias_and_generic_function": (
        "type Batch[T] = list[T]\ntype Vector = list[float]",
        "def train[M: torch.nn.Module, *Ts, **P](model: M, opt, loader):\n    for x in loader:\n"),
    "pep695_generic_class": (
        "", "class Trainer[T]:\n    def train(self, model: T, opt, loader):\n        for x in loader:\n"
            "            pass\n\n\ndef train(model, opt, loader):\n    for x in loader:\n"),
    "pep701_nested_quotes": (
        'names = {"a": 1}',
        _LOOP + '        label = f"{names["a"]}: {f"{x!r:>{names["a"]}}"}"\n'),
    "pep701_multiline_expression_with_comments": (
        "",
        _LOOP + '        label = f"{\n            x  # the batch: a comment inside an f-string\n'
                '            + 1\n        }" \'\' f"{x:{"{"}>10}"\n'),
    "match_statement": (
        "",
        "def train(model, opt, loader):\n    for x in loader:\n        match x:\n"
        "            case {\"lr\": lr, **rest} if lr > 0:\n                pass\n"
        "            case [first, *_] | (first,):\n                pass\n            case _:\n                pass\n"),
    "except_star": (
        "",
        "def train(model, opt, loader):\n    try:\n        pass\n    except* (ValueError, TypeError) as group:\n"
        "        print(group.exceptions)\n    for x in loader:\n"),
    "pep646_unpacked_variadics": (
        "from typing import TypeVarTuple\nTs = TypeVarTuple(\"Ts\")\nShape = tuple[int, *Ts]",
        "def train(model, opt, loader, *shape: *Ts) -> tuple[*Ts]:\n    for x in loader:\n"),
    "walrus": (
        "",
        "def train(model, opt, loader):\n    it = iter(loader)\n    while (x := next(it, None)) is not None:\n"
        "        if (n := len(x)) > 0:\n            pass\n"),
    "parenthesized_context_managers": (
        "import contextlib",
        "def train(model, opt, loader):\n    with (\n        contextlib.nullcontext() as a,\n"
        "        contextlib.nullcontext() as b,\n    ):\n        pass\n    for x in loader:\n"),
}


def newer_syntax_program(name: str) -> str:
    prelude, train = NEWER_SYNTAX[name]
    return _PROGRAM.format(prelude=prelude, train=train.rstrip("\n"))


# Real syntax errors: (source, line, column, message), the same on every interpreter.
SYNTAX_ERRORS = {
    "missing_colon": ("import torch\nif x\n    pass\n", 2, 5,  # after `x`, where the `:` is missing
                      "syntax error: expected one of !=, %, &, (, *, **, +, -, ., /, //, :, :=, <, <<, <=, ==, >, "
                      ">=, >>, @, [, ^, and, if, in, is, not, or, |"),
    "unfinished_before_comment_lines": ("import torch\nd_loss =\n# perform backprop\n\n# then the generator\ng = 1\n",
                                        2, 9,  # after `=`, as CPython says, not on the comments libcst read next
                                        "syntax error: expected one of (, *, +, -, ..., AWAIT, False, NAME, NUMBER, None, "
                                        "True, [, lambda, not, yield, ~"),
    "unterminated_string": ("import torch\nx = 1\ny = 'abc\n", 3, 5, "syntax error: unterminated string literal"),
    "unterminated_triple_quoted_string": ('import torch\nx = 1\n\ny = """abc\n\nz = 2\n', 4, 5,
                                          "syntax error: unterminated triple-quoted string literal"),
    "bad_dedent": ("import torch\nif x:\n    y = 2\n  z = 3\n", 4, 1,
                   "syntax error: no matching outer block for dedent"),
    "unclosed_bracket_at_end": ("import torch\nx = (1,\n", 2, 8,  # the end of the file
                                "syntax error: expected one of ), *, +, -, ..., AWAIT, False, NAME, NUMBER, None, "
                                "True, lambda, not, ~"),
    "unexpected_indent": ("import torch\nx = 1\n  y = 2\n", 3, 3,
                          "syntax error: expected one of (, *, +, -, ..., AWAIT, EOF, False, NAME, NUMBER, None, True, "
                          "[, break, continue, lambda, match, not, pass, ~"),
    "invalid_character": ("import torch\nx = $\n", 2, 5, "syntax error: '$' is not a valid character in this position"),
    # No version compiles it (after CRLF, 3.10 and 3.11 do: tests/test_cpython_verdict.py).
    "line_continuation_before_the_end": ("import torch\nx = 1\n\\\n", 3, 2,
                                         "syntax error: unexpected end of file after a line continuation"),
    # libcst's tokenizer names no position, and its pure-Python tokenizer finds none in an f-string.
    "pep701_unclosed_replacement_field": ('import torch\nx = f"{y"\n', 1, 1, "syntax error: unterminated string literal"),
    # CPython's verdict past libcst's grammar (issue 36): as 3.13 reports it, on every host
    "return_outside_function": ("import torch\nreturn 1\n", 2, 1, "syntax error: 'return' outside function"),
    "unknown_character_name": ('import torch\nx = "\\N{NOT A REAL NAME}"\n', 2, 5,
                               "syntax error: (unicode error) 'unicodeescape' codec can't decode bytes in position "
                               "0-18: unknown Unicode character name"),
    "bytes_with_non_ascii_characters": ("import torch\nx = (1,\n     b'café')\n", 3, 6,
                                        "syntax error: bytes can only contain ASCII literal characters"),
    "escape_in_an_f_string": ('import torch\nx = f"ab\\N{BAD}cd{y}"\n', 2, 21,
                              "syntax error: (unicode error) 'unicodeescape' codec can't decode bytes in position 2-8: "
                              "unknown Unicode character name"),
    "break_after_a_pep_701_f_string": ('import torch\nx = f"{a["b"]}"\nbreak\n', 3, 1,
                                       "syntax error: 'break' outside loop"),
    "break_in_except_star": ("import torch\nfor x in y:\n    try:\n        pass\n    except* E:\n        break\n", 6, 9,
                             "syntax error: 'break', 'continue' and 'return' cannot appear in an except* block"),
    "duplicate_type_parameter": ("import torch\ndef f[T, T](): pass\n", 2, 10,
                                 "syntax error: duplicate type parameter 'T'"),
    "alternatives_binding_different_names": ("import torch\nmatch x:\n    case [a] | [b]: pass\n", 3, 10,
                                             "syntax error: alternative patterns bind different names"),
    "keyword_named_debug": ("import torch\nf(__debug__=1)\n", 2, 3, "syntax error: cannot assign to __debug__"),
    "starred_f_string_field": ('import torch\nx = f"{*a}"\n', 2, 8, "syntax error: can't use starred expression here"),
}


def _ruleset() -> RuleSet:
    return RuleSet(list(ALL_RULES))


@pytest.mark.parametrize("name", sorted(NEWER_SYNTAX))
def test_newer_syntax_is_linted_with_findings_and_suppressions(name):
    result = lint_text(f"{name}.py", newer_syntax_program(name), _ruleset())
    assert not result.errors
    step_line = next(i for i, line in enumerate(newer_syntax_program(name).splitlines(), 1)
                     if line.strip() == "opt.step()")
    assert [(f.code, f.line) for f in result.findings] == [("LL701", step_line)], result.findings


def test_a_suppression_inside_a_multiline_f_string_is_read_on_every_interpreter():
    code = ("import torch\n\n\ndef train(model, opt, loader):\n    for x in loader:\n"
            "        model(x).sum().backward()\n"
            '        label = f"{\n            opt.step()  # lintloop: ignore[LL701]\n        }"\n')
    assert lint_text("a.py", code, _ruleset()).findings == []


@pytest.mark.parametrize("name", sorted(SYNTAX_ERRORS))
def test_a_syntax_error_is_one_LL001_the_same_on_every_host(name):
    code, line, column, message = SYNTAX_ERRORS[name]
    findings = lint_text(f"{name}.py", code, _ruleset()).findings
    assert [(f.code, f.line, f.column) for f in findings] == [("LL001", line, column)]
    assert findings[0].message == message


def test_a_file_that_does_not_parse_has_its_LL001_alone():
    # Its comments are not read: no interpreter's tokenizer decides what a broken file's comments are.
    code = "# lintloop: ignore[LL999]\nimport torch  # noqa: LL101\nif x\n    pass\n"
    assert [f.code for f in lint_text("a.py", code, _ruleset()).findings] == ["LL001"]


def test_a_compile_time_error_is_LL001_on_both_paths():
    # CPython's compiler refuses it though its parser reads it (issue 36): `python file.py` would not run.
    for code in ("import torch\nreturn 1\nawait x\n", "return 1\nawait x\n"):  # analysed, syntax only
        assert [(f.code, f.line, f.message) for f in lint_text("a.py", code, _ruleset()).findings] == [
            ("LL001", code.count("\n", 0, code.index("return")) + 1, "syntax error: 'return' outside function")]


# ----- the same output on python3.10 and python3.13 ------------------------------------------------

_OTHER_PYTHONS = ("3.10", "3.13")


def _interpreter(version: str) -> str | None:
    """A working python`version`: pyenv's build of it, or one on PATH (a pyenv shim of a version
    not selected is on PATH and fails: each candidate is tried)."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = [str(p) for p in sorted(pyenv.glob(f"{version}.*/bin/python{version}"), reverse=True)]
    candidates += [found] if (found := shutil.which(f"python{version}")) else []
    for candidate in candidates:
        if subprocess.run([candidate, "-c", "import venv"], capture_output=True).returncode == 0:
            return candidate
    return None


def _venv_with_lintloop(python: str, version: str, folder: Path) -> Path:
    """A virtual environment of `python` with this checkout installed (core dependencies only), built
    once per session; pytest-xdist's workers share it through a lock."""
    venv = folder / f"py{version}"
    with open(folder / f"py{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ready = venv / "ready"
        if not ready.exists():
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([python, "-m", "venv", str(venv)], check=True, capture_output=True)
            source = folder / "checkout"  # a copy: building in place would write into the checkout
            shutil.rmtree(source, ignore_errors=True)
            shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
                ".git", ".venv*", "build", "*.egg-info", "__pycache__", ".pytest_cache", "bench"))
            installed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(source)],
                                       capture_output=True, text=True)
            assert installed.returncode == 0, installed.stdout + installed.stderr
            ready.touch()
    return venv


# Nesting no parser of every host takes (issue 22): what CPython's tokenizer refuses on every version,
# what no CPython compiles (LL001), what only some compile, and statements too deep to analyse inside a
# training loop (masked: the loop's findings are still reported). Each host's parser gives up at its own
# depth (3.10's `ast.parse` takes 100,000 levels of attributes, 3.11's stops near 3,000): lintloop's verdict
# must not.
_TRAIN = "def train(model, opt, loader):\n    for x in loader:\n        model(x).sum().backward()\n" \
         "        opt.step()\n        {deep}\n"
HOSTILE = {
    "brackets_201": "x = " + "(" * 201 + "1" + ")" * 201,
    "brackets_1300": "x = " + "(" * 1300 + "1" + ")" * 1300,
    "indentation_100": "".join("    " * i + "if a:\n" for i in range(100)) + "    " * 100 + "pass",
    "unary_10000": "x = " + "-" * 10_000 + "1",
    "attributes_10000": "x = a" + ".b" * 10_000,
    "plus_chain_10000": "x = " + "+".join(["a"] * 10_000),
    "elif_chain_10000": "if a:\n    pass\n" + "elif a:\n    pass\n" * 10_000,
    "attributes_9995": "x = a" + ".b" * 9_995 + "\n" + _TRAIN.format(deep="pass"),
    "calls_5000": "X = f" + "()" * 5_000 + "\n" + _TRAIN.format(deep="pass"),
    "deep_in_loop_plus": _TRAIN.format(deep="y = " + "+".join(["x"] * 3_000)),
    "deep_in_loop_and": _TRAIN.format(deep="y = " + " and ".join(["x"] * 20_000)),
    "deep_in_loop_concat": _TRAIN.format(deep="y = (" + " ".join(['"a"'] * 3_000) + ")"),
    "deep_in_loop_elifs": _TRAIN.format(deep="if x:\n            pass\n" + "        elif x:\n            pass\n" * 1_001),
    # CPython's parser stack (issue 36): 3.13 parses and compiles 5,966 unary operators, none 5,967
    "unary_5966": "x = " + "-" * 5_966 + "1\n" + _TRAIN.format(deep="pass"),
    "unary_5967": "x = " + "-" * 5_967 + "1",
    "lambdas_3000": "x = " + "lambda: " * 3_000 + "1",
    "twenty_one_nested_loops": "".join("    " * i + "for x in y:\n" for i in range(21)) + "    " * 21 + "pass\n"
                               + _TRAIN.format(deep="pass"),
}


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("syntax-corpus")
    for name, code in HOSTILE.items():
        (folder / f"hostile_{name}.py").write_text("import torch\n" + code + "\n")
    for name in NEWER_SYNTAX:
        (folder / f"{name}.py").write_text(newer_syntax_program(name))
    for name, (code, *_) in SYNTAX_ERRORS.items():
        (folder / f"error_{name}.py").write_bytes(("# noqa: LL1\n" + code).encode())
    (folder / "suppression_in_f_string.py").write_text(
        "import torch\n\n\ndef train(model, opt, loader):\n    for x in loader:\n        model(x).sum().backward()\n"
        '        label = f"{\n            opt.step()  # lintloop: ignore[LL701, LL7777]\n        }"\n'
        "        print(f\"{'#'}  # noqa: LL701\")  # noqa\n")
    return folder


def _lint_json(python: str, folder: Path) -> bytes:
    # Each file named: parsed whatever it holds (found in a directory, a file without a training shape
    # would be passed over, and its syntax error not reported).
    names = sorted(path.name for path in folder.iterdir())
    run = subprocess.run([python, "-m", "lintloop", "check", "--select", "ALL", "--format", "json", "--no-cache",
                          "--jobs", "1", *names], cwd=folder, capture_output=True)
    assert run.returncode == 1, run.stderr.decode()
    return run.stdout


@pytest.fixture(scope="session")
def host_output(corpus) -> bytes:
    return _lint_json(sys.executable, corpus)


def test_the_host_reports_every_syntax_error_and_every_finding(host_output):
    import json

    findings = json.loads(host_output)
    errors = sorted(f["path"] for f in findings if f["code"] == "LL001")
    too_deep = ("brackets_201", "brackets_1300", "indentation_100", "unary_10000", "attributes_10000",
                "plus_chain_10000", "elif_chain_10000", "unary_5967", "lambdas_3000")
    assert errors == sorted([f"error_{name}.py" for name in SYNTAX_ERRORS] + [f"hostile_{n}.py" for n in too_deep])
    assert sorted(f["path"] for f in findings if f["code"] == "LL701") == sorted(
        [f"{n}.py" for n in NEWER_SYNTAX] + [f"hostile_{n}.py" for n in HOSTILE if n not in too_deep])
    in_f_string = [(f["code"], f["line"]) for f in findings if f["path"] == "suppression_in_f_string.py"]
    assert in_f_string == [("LL002", 8)]  # LL701 suppressed; the unknown code named


@pytest.mark.parametrize("version", _OTHER_PYTHONS)
def test_other_interpreters_give_the_host_s_output_byte_for_byte(version, corpus, host_output, tmp_path_factory):
    python = _interpreter(version)
    if python is None:
        pytest.skip(f"python{version} is not installed here")
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by every worker of the session
    folder = root / "syntax-venvs"
    folder.mkdir(exist_ok=True)
    venv = _venv_with_lintloop(python, version, folder)
    assert _lint_json(str(venv / "bin" / "python"), corpus).decode() == host_output.decode()

