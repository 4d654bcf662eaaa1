"""A file's syntax decided as CPython decides it (issue 36, items 8-10): LL001 where no CPython 3.10-3.13
compiles the text, its compile-time errors included ('return' outside function, a duplicate argument,
...), an escape or a bytes literal its parser refuses; the same error, at the same place, whatever
the host Python, also where the text uses syntax newer than the host (lintloop.cpython_verdict). The
positions and messages below are CPython 3.13's; the installed interpreters are the oracle of the last
tests, and of bench/hostile/syntax.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import libcst as cst
import pytest

from lintloop.cpython_verdict import rewritten_as_3_10
from lintloop.linter import fix_text, lint_notebook, lint_text
from lintloop.rule import RuleSet
from lintloop.rules import ALL_RULES
from lintloop.source import source_lines
from lintloop.syntax import Checks, ModuleSyntax, syntax_error

ALL = RuleSet(list(ALL_RULES))
REPO = Path(__file__).resolve().parent.parent
LOOP = ("import torch\n\n\ndef train(model, opt, loader):\n    for x in loader:\n"
        "        model(x).sum().backward()\n        opt.step()\n")

# (code, line, column, message) as CPython 3.13 reports them (python3.13 -m py_compile).
COMPILE_TIME = {
    "return_outside_function": ("return 1\n", 1, 1, "'return' outside function"),
    "return_in_class": ("class C:\n    return 1\n", 2, 5, "'return' outside function"),
    "break_outside_loop": ("break\n", 1, 1, "'break' outside loop"),
    "break_in_a_loop_s_else": ("for x in y:\n    pass\nelse:\n    break\n", 4, 5, "'break' outside loop"),
    "break_in_a_class_in_a_loop": ("for x in y:\n    class C:\n        break\n", 3, 9, "'break' outside loop"),
    "continue_outside_loop": ("def f():\n    continue\n", 2, 5, "'continue' not properly in loop"),
    "duplicate_argument": ("def f(a, a): pass\n", 1, 10, "duplicate argument 'a' in function definition"),
    "duplicate_lambda_argument": ("f = lambda a, a: 0\n", 1, 15, "duplicate argument 'a' in function definition"),
    "late_future_import": ("import os\nfrom __future__ import annotations\n", 2, 1,
                           "from __future__ imports must occur at the beginning of the file"),
    "unknown_future_feature": ("from __future__ import nope\n", 1, 1, "future feature nope is not defined"),
    "starred_assignment_alone": ("*a = [1]\n", 1, 1, "starred assignment target must be in a list or tuple"),
    "two_starred_targets": ("*a, *b = c\n", 1, 1, "multiple starred expressions in assignment"),
    "starred_expression_statement": ("*a\n", 1, 1, "can't use starred expression here"),
    "nonlocal_without_binding": ("def f():\n    nonlocal x\n", 2, 5, "no binding for nonlocal 'x' found"),
    "nonlocal_at_module_level": ("nonlocal x\n", 1, 1, "nonlocal declaration not allowed at module level"),
    "global_after_use": ("def f():\n    print(x)\n    global x\n", 3, 5,
                         "name 'x' is used prior to global declaration"),
    "global_parameter": ("def f(x):\n    global x\n", 2, 5, "name 'x' is parameter and global"),
    "yield_outside_function": ("yield 1\n", 1, 1, "'yield' outside function"),
    "yield_in_a_comprehension": ("def f():\n    return [(yield) for x in y]\n", 2, 14,
                                 "'yield' inside list comprehension"),
    "await_outside_function": ("await x\n", 1, 1, "'await' outside function"),
    "await_outside_async_function": ("def f():\n    await x\n", 2, 5, "'await' outside async function"),
    "async_for_outside_async_function": ("def f():\n    async for x in y:\n        pass\n", 2, 5,
                                         "'async for' outside async function"),
    "return_value_in_async_generator": ("async def f():\n    yield 1\n    return 2\n", 3, 5,
                                        "'return' with value in async generator"),
    "default_except_not_last": ("try:\n    pass\nexcept:\n    pass\nexcept ValueError:\n    pass\n", 3, 1,
                                "default 'except:' must be last"),
    "import_star_in_function": ("def f():\n    from os import *\n", 2, 20, "import * only allowed at module level"),
    "repeated_keyword": ("f(a=1, a=2)\n", 1, 8, "keyword argument repeated: a"),
    "walrus_rebinding_iteration_variable": ("[x := 1 for x in z]\n", 1, 2,
                                            "assignment expression cannot rebind comprehension iteration variable 'x'"),
    "capture_pattern_first": ("match x:\n    case a: pass\n    case 1: pass\n", 2, 10,
                              "name capture 'a' makes remaining patterns unreachable"),
    "alternatives_binding_different_names": ("match x:\n    case [a] | [b]: pass\n", 2, 10,
                                             "alternative patterns bind different names"),
    "twenty_two_nested_blocks": ("".join("    " * i + "with a:\n" for i in range(22)) + "    " * 22 + "pass\n", 22, 90,
                                 "too many statically nested blocks"),  # 3.10-3.12 stop at the 21st
    "keyword_named_debug": ("f(__debug__=1)\n", 1, 3, "cannot assign to __debug__"),
    "parameter_named_debug": ("def f(x, __debug__): pass\n", 1, 10, "cannot assign to __debug__"),
    # the column counts characters, not the bytes of UTF-8 (CPython's compiler reports bytes: 11)
    "after_non_ascii_text": ("x = 'é'; return 1\n", 1, 10, "'return' outside function"),
}

# What CPython's parser refuses that libcst's takes (item 8): (code, line, column, message), 3.13's.
_UNICODE_ERROR = "(unicode error) 'unicodeescape' codec can't decode bytes in position "
PARSER_ONLY = {
    "unknown_character_name": ('x = "\\N{NOT A REAL NAME}"\n', 1, 5,
                               _UNICODE_ERROR + "0-18: unknown Unicode character name"),
    "truncated_x_escape_in_a_concatenation": ('x = ("a"\n     "\\x4")\n', 2, 6,
                                              _UNICODE_ERROR + "0-2: truncated \\xXX escape"),
    "bytes_with_non_ascii_characters": ("x = b'café'\n", 1, 5, "bytes can only contain ASCII literal characters"),
    "raw_bytes_with_non_ascii_characters": ("x = rb'café'\n", 1, 5, "bytes can only contain ASCII literal characters"),
    "bad_escape_in_bytes": ('x = b"a" b"\\x4"\n', 1, 10, "(value error) invalid \\x escape at position 0"),
    "escape_in_an_f_string": ('x = f"ab\\N{BAD}cd{y}"\n', 1, 21,  # at the f-string's closing quote
                              _UNICODE_ERROR + "2-8: unknown Unicode character name"),
    "format_spec_three_deep": ('x = f"{1:{2:{3:{4}}}}"\n', 1, 15, "f-string: expressions nested too deeply"),
    # 3.12+ raise UnicodeDecodeError, no SyntaxError; 3.10 and 3.11 a SyntaxError after the f-string
    "escape_in_a_format_spec": ('x = f"{b:\\x4}"\n', 1, 14, _UNICODE_ERROR + "0-2: truncated \\xXX escape"),
    "starred_f_string_field": ('x = f"{*a}"\n', 1, 8, "can't use starred expression here"),
    "assignment_to_debug": ("__debug__ = 1\n", 1, 1, "cannot assign to __debug__"),
    "dict_unpacking_in_a_comprehension": ("x = {**a for a in b}\n", 1, 6,
                                          "dict unpacking cannot be used in dict comprehension"),
    "bytes_and_str_concatenated": ('x = "a" b"b"\n', 1, 13, "cannot mix bytes and nonbytes literals"),  # was exit 2
}

# Syntax newer than 3.10 (read by libcst, rewritten for an older host) with an error CPython finds.
NEWER_SYNTAX_ERRORS = {
    "return_after_a_type_alias": ("type X = int\nreturn 1\n", 2, 1, "'return' outside function"),
    "break_after_a_pep_701_f_string": ('x = f"{a["b"]}"\nbreak\n', 2, 1, "'break' outside loop"),
    "error_in_a_pep_701_f_string": ('x = f"{a["\\N{BAD}"]}"\n', 1, 10,
                                    _UNICODE_ERROR + "0-6: unknown Unicode character name"),
    "yield_in_a_multiline_f_string": ('x = (f"{a}"\n     "b" f"{c!r:>{w}}"\n     f"""\n\n{(yield)}""")\n', 5, 3,
                                      "'yield' outside function"),
    "duplicate_argument_of_a_generic_function": ("def f[\n\n  T: int,\n](x: T, x) -> T:\n    return x\n", 4, 9,
                                                 "duplicate argument 'x' in function definition"),
    "continue_after_a_generic_class": ("class C[T]:\n    pass\nclass D[T](C[T], metaclass=M):\n    pass\ncontinue\n",
                                       5, 1, "'continue' not properly in loop"),
    "break_in_except_star": ("for x in y:\n    try:\n        pass\n    except* E:\n        if a:\n            break\n", 6,
                             13, "'break', 'continue' and 'return' cannot appear in an except* block"),
    "return_after_starred_subscripts": ("x = a[*b]\ndef f(*args: *Ts): pass\nreturn\n", 3, 1,
                                        "'return' outside function"),
    "duplicate_type_parameter": ("def f[T, T](): pass\n", 1, 10, "duplicate type parameter 'T'"),
    "type_parameter_default_order": ("def f[T=int, U](): pass\n", 1, 14,
                                     "non-default type parameter 'U' follows default type parameter"),
    "yield_in_a_type_alias": ("def g():\n    type X = (yield)\n", 2, 15,
                              "yield expression cannot be used within a type alias"),
    "yield_in_a_constraint": ("def f[T: (int, (yield))](): pass\n", 1, 17,
                              "yield expression cannot be used within a TypeVar constraint"),
    "walrus_in_a_bound": ("def f[T: (y := int)](): pass\n", 1, 11,
                          "named expression cannot be used within a TypeVar bound"),
}

# What some CPython 3.10-3.13 compiles, though this host or another may not.
VALID = {
    "form_spec_two_deep": 'x = f"{1:{2:{3}}}"\n',  # 3.12+
    "unparenthesized_generator_in_an_f_string": 'x = f"{x for x in y}"\n',  # 3.10 and 3.11
    "twenty_one_nested_loops": "".join("    " * i + "for x in y:\n" for i in range(21)) + "    " * 21 + "pass\n",  # 3.13
    "async_comprehension_in_a_comprehension": "async def f():\n    return [[x async for x in y] for z in w]\n",  # 3.11+
    "type_parameter_defaults": "def f[T = int](x: T) -> T:\n    return x\n",  # 3.13
    "pep_701_f_strings": 'x = f"{a["b"]:{w}} {f"{c!r}"}"\ny = f"{\n    z  # a comment\n}"\n',  # 3.12+
    "line_continuation_into_the_end_after_crlf": "x = 1\r\n\\\r\n",  # 3.10 and 3.11
}


def _finding(code: str) -> list[tuple[str, int, int, str]]:
    return [(f.code, f.line, f.column, f.message) for f in lint_text("a.py", code, ALL).findings]


@pytest.mark.parametrize("name", sorted(COMPILE_TIME) + sorted(PARSER_ONLY) + sorted(NEWER_SYNTAX_ERRORS))
def test_an_error_cpython_reports_is_one_LL001_where_and_as_cpython_3_13_reports_it(name):
    code, line, column, message = {**COMPILE_TIME, **PARSER_ONLY, **NEWER_SYNTAX_ERRORS}[name]
    expected = ("LL001", line, column, f"syntax error: {message}")
    assert _finding(code) == [expected]  # a file only checked for its syntax
    assert _finding(code + LOOP) == [expected]  # a file the rules analyse
    assert ModuleSyntax.read("a.py", code).error is not None


@pytest.mark.parametrize("name", sorted(VALID))
def test_what_some_cpython_compiles_is_not_LL001(name):
    code = VALID[name]
    assert syntax_error("a.py", code) is None
    assert [f.code for f in lint_text("a.py", LOOP + code, ALL).findings] == ["LL701"]  # the file's finding is kept
    assert ModuleSyntax.read("a.py", code).error is None


# ----- notebooks: IPython compiles each cell, allowing top-level await -----------------------------

def _notebook(*cells: str) -> str:
    return json.dumps({"cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {},
                                  "outputs": [], "source": source} for i, source in enumerate(cells)],
                       "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
                       "nbformat": 4, "nbformat_minor": 5})


def test_a_notebook_may_await_at_the_top_of_a_cell_and_import_from_the_future_anywhere():
    """IPython runs a cell's statements one by one: a `from __future__` import after a line magic or
    another statement is no error there (tensorflow/examples' word2vec notebook: `%matplotlib inline`,
    then `from __future__ import print_function`)."""
    text = _notebook("import torch\nimport asyncio\nawait asyncio.sleep(0)\n",
                     "from __future__ import annotations\nx: int = 1\n",
                     "# setup\n%matplotlib inline\nfrom __future__ import print_function\n",
                     "y = 2\nfrom __future__ import division\n", LOOP.replace("import torch\n", ""))
    assert [(f.code, f.cell) for f in lint_notebook("a.ipynb", text, ALL).findings] == [("LL701", 5)]


def test_a_notebook_cell_that_does_not_compile_is_its_own_LL001_and_the_others_are_linted():
    text = _notebook("import torch\n", "x = 1\nreturn x\n", LOOP.replace("import torch\n", ""))
    findings = lint_notebook("a.ipynb", text, ALL).findings
    assert [(f.code, f.cell, f.line, f.message) for f in findings] == [
        ("LL001", 2, 2, "syntax error: 'return' outside function"), ("LL701", 3, 6, findings[1].message)]


def test_a_file_a_notebook_writes_is_compiled_as_a_file():
    text = _notebook("%%writefile train.py\nimport torch\nawait x\n", "import torch\n")
    assert [(f.code, f.message) for f in lint_notebook("a.ipynb", text, ALL).findings] == [
        ("LL001", "syntax error: 'await' outside function")]


def test_a_notebook_module_s_grammar_alone_decides_its_fix():
    assert syntax_error("a.py", "await x\n", Checks.CELL) is None
    assert syntax_error("a.py", "await x\n", Checks.GRAMMAR) is None
    assert syntax_error("a.py", "await x\n") is not None


# ----- form feeds (item 10) -----------------------------------------------------------------------

FORM_FEEDS = {
    "before_a_block_nesting_another": "def train(model, opt, loader):\n\f    for x in loader:\n"
                                      "        model(x).sum().backward()\n        opt.step()\n",
    "in_a_nested_block": "def train(model, opt, loader):\n    for x in loader:\n\f        model(x).sum().backward()\n"
                         "        opt.step()\n",
    "inside_the_indentation": "def train(model, opt, loader):\n    for x in loader:\n        model(x).sum().backward()\n"
                              "  \f        opt.step()\n",
    "with_newer_syntax": "type X = int\ndef train(model, opt, loader):\n  \f  for x in loader:\n"
                         "        model(x).sum().backward()\n        opt.step()\n",
}


@pytest.mark.parametrize("name", sorted(FORM_FEEDS))
def test_a_form_feed_in_indentation_is_whitespace_and_positions_are_the_file_s(name):
    code = "import torch\n" + FORM_FEEDS[name]
    compile(code.replace("type X = int\n", "X = int\n"), "a.py", "exec")  # CPython reads it
    [finding] = lint_text("a.py", code, ALL).findings
    step = source_lines(code)[finding.line - 1]
    assert finding.code == "LL701" and step[finding.column - 1:finding.end_column - 1] == "opt.step()"


def test_a_fix_on_lines_indented_with_form_feeds_edits_the_file_s_columns():
    fixture = (REPO / "tests" / "fixtures" / "LL203_bad.py").read_text()
    code = fixture.replace("\ndef train_step(", "\n\fdef train_step(").replace(
        "    with tf.GradientTape() as tape:", "\f    with tf.GradientTape() as tape:")
    outcome = fix_text("a.py", code, ALL, unsafe=True)
    assert outcome.applied and "\f@tf.function\ndef train_step(" in outcome.text
    compile(outcome.text, "a.py", "exec")


# ----- the oracle: the interpreters installed -----------------------------------------------------

def _interpreters() -> list[str]:
    found = []
    for version in ("3.10", "3.11", "3.12", "3.13"):
        candidates = sorted(Path.home().glob(f".pyenv/versions/{version}.*/bin/python{version}"), reverse=True)
        if version == f"{sys.version_info[0]}.{sys.version_info[1]}":
            found.append(sys.executable)
        elif candidates:
            found.append(str(candidates[0]))
    return found


def _compiled_by(python: str, codes: list[str]) -> list[bool]:
    script = ("import json, sys, warnings\nwarnings.simplefilter('ignore')\nout = []\n"
              "for code in json.load(sys.stdin):\n    try:\n        compile(code, 'a.py', 'exec')\n"
              "        out.append(True)\n    except (SyntaxError, ValueError, MemoryError, RecursionError):\n"
              "        out.append(False)\nprint(json.dumps(out))\n")
    run = subprocess.run([python, "-c", script], input=json.dumps(codes), capture_output=True, text=True, timeout=300,
                         check=True)
    return json.loads(run.stdout)


def test_syntax_newer_than_3_10_is_rewritten_into_what_3_10_reads_line_for_line():
    python = next((python for python in _interpreters() if "3.10" in Path(python).name or sys.version_info[:2] == (3, 10)),
                  None)
    if python is None:
        pytest.skip("python3.10 is not installed here")
    # (what CPython's parser refuses in a string stays as it is: 3.10 refuses it too)
    newer = [code for code, _, _, message in NEWER_SYNTAX_ERRORS.values() if not message.startswith("(unicode error)")]
    newer += [VALID[name] for name in (
        "pep_701_f_strings", "type_parameter_defaults", "unparenthesized_generator_in_an_f_string", "form_spec_two_deep")]
    newer.append("x: tuple[int, *Ts] = f(*a)\ndef g(*args: *Ts) -> tuple[*Ts]:\n    try:\n        pass\n"
                 "    except* (A, B) as group:\n        pass\nclass C[\n\n    T: (int, str) = int,\n](Base):\n    pass\n")
    rewritten = []
    for code in newer:
        lines = source_lines(code)
        text, _ = rewritten_as_3_10(lines, [(1, cst.parse_module(code))])
        assert [len(line) for line in source_lines(text)] == [len(line) for line in lines]
        rewritten.append(text)
    script = ("import ast, json, sys\nfor code in json.load(sys.stdin):\n    ast.parse(code)\n")
    run = subprocess.run([python, "-c", script], input=json.dumps(rewritten), capture_output=True, text=True,
                         timeout=300, check=False)
    assert run.returncode == 0, run.stderr


def test_LL001_where_no_installed_cpython_compiles_the_text():
    interpreters = _interpreters()
    if len(interpreters) < 2:
        pytest.skip("one interpreter: the host's verdict is checked above")
    codes = [code for code, *_ in {**COMPILE_TIME, **PARSER_ONLY, **NEWER_SYNTAX_ERRORS}.values()] + list(VALID.values())
    compiled = [any(verdicts) for verdicts in zip(*(_compiled_by(python, codes) for python in interpreters))]
    assert [syntax_error("a.py", code) is None for code in codes] == compiled
