"""Deeply nested and long programs (issue 22, items 2 and 8): decided the same on every Python, in
linear time, never by a parser that can overflow its stack.

The scanner (lintloop.nesting) measures what the parsers cannot be trusted with: CPython's tokenizer
limits (201 nested brackets, 100 levels of indentation) are LL001 as on every CPython; a statement
nested deeper than any CPython compiles is LL001; one too deep to analyse is masked, the rest of the
file linted. The same inputs are linted by python3.10 and python3.13 in tests/test_syntax_versions.py.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import libcst as cst
import pytest

from lintloop.linter import fix_text, lint_notebook, lint_text
from lintloop.nesting import ANALYSIS_DEPTH, COMPILE_DEPTH, mask, scan
from lintloop.rule import RuleSet
from lintloop.rules import ALL_RULES
from lintloop.source import source_lines
from lintloop.syntax import CHUNK_LINES, ModuleSyntax, parse_cst

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
ALL = RuleSet(list(ALL_RULES))
DEFAULT = RuleSet([rule for rule in ALL_RULES if rule.default_on])

TRAIN = """\
import torch


def train(model, opt, loader):
    total = 0
    for x in loader:
        loss = model(x).sum()
        loss.backward()
        opt.step()
        total += loss
        {deep}
    return total
"""


def depths(code: str) -> list[tuple[int, int]]:
    """(libcst depth, Python depth) of each logical line."""
    return [(line.depth, line.python_depth) for line in scan(code).lines]


@pytest.mark.parametrize("code, expected", [
    ("x = a + b * c\n", (3, 3)),
    ("x = a + b + c + d\n", (4, 4)),  # a left-nested chain: a level per operator
    ("x = a ** b ** c\n", (3, 3)),
    ("x = -~-a\n", (4, 4)),
    ("x = not not a\n", (3, 3)),
    ("x = a < b <= c == d\n", (2, 2)),  # one comparison node in both trees
    ("x = a is not b is not c\n", (2, 2)),
    ("x = a not in b not in c\n", (2, 2)),
    ("x = a and b and c and d\n", (4, 2)),  # nested in libcst, one BoolOp in CPython's tree
    ('x = ("a" "b" "c" "d")\n', (4, 1)),  # implicit concatenation: nested in libcst, one constant
    ("x = a.b.c.d\n", (4, 4)),
    ("x = f()()()\n", (4, 4)),
    ("x = a[0][1]\n", (4, 3)),  # libcst: Subscript > SubscriptElement > Index
    ("x = ((((a))))\n", (1, 1)),  # parentheses make no node
    ("x = (a, (b, (c,)))\n", (4, 4)),
    ("x = a if b else c if d else e\n", (3, 3)),
    ("x = lambda: lambda y, z=1: y\n", (3, 3)),
    ("x = [i for i in range(3) if i]\n", (4, 3)),
    ("from a.b.c import (d, e)\n", (1, 1)),
    ('x = f"{a.b.c}"\n', (4, 4)),
    ('x = f"{a["k"]:{w}.{p}}"\n', (4, 3)),  # PEP 701 quotes reused inside the field
])
def test_the_depth_of_a_line_is_its_tree_s(code, expected):
    assert depths(code) == [expected]


def _statement_depths(tree: ast.Module) -> dict[int, int]:
    """Per first line of a statement, the depth of its own expressions in CPython's tree."""
    found: dict[int, int] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        deepest = 0
        stack = [(child, 1) for child in ast.iter_child_nodes(node) if not isinstance(child, ast.stmt)]
        while stack:
            child, depth = stack.pop()
            deepest = max(deepest, depth)
            stack += [(grandchild, depth + 1) for grandchild in ast.iter_child_nodes(child)
                      if not isinstance(grandchild, (ast.stmt, ast.expr_context, ast.operator, ast.boolop,
                                                     ast.unaryop, ast.cmpop))]
        found[node.lineno] = max(found.get(node.lineno, 0), deepest)
    return found


def test_the_python_depth_never_exceeds_cpython_s_by_more_than_two():
    """What makes a statement LL001 (COMPILE_DEPTH) must be sound: never more than the real depth, but
    at a definition's header (`class A(B):` counts its bases as a call's arguments)."""
    files = sorted(FIXTURES.glob("*.py")) + sorted((REPO / "lintloop").rglob("*.py"))
    checked = 0
    for path in files:
        text = path.read_text()
        real = _statement_depths(ast.parse(text))
        for line in scan(text).lines:
            if line.first in real:
                assert line.python_depth <= real[line.first] + 2, (path, line)
                checked += 1
    assert checked > 5000


def test_the_comments_are_the_tokenizer_s():
    for path in sorted(FIXTURES.glob("*.py"))[:40] + [REPO / "lintloop" / "nesting.py"]:
        text = path.read_text()
        expected = [(t.start[0], t.start[1], t.string) for t in tokenize.generate_tokens(io.StringIO(text).readline)
                    if t.type == tokenize.COMMENT]
        assert scan(text).comments == expected, path


# ----- CPython's tokenizer limits ------------------------------------------------------------------


def _host_error(code: str) -> tuple[int, int, str]:
    with pytest.raises(SyntaxError) as raised:
        compile(code, "a.py", "exec")
    return raised.value.lineno, raised.value.offset, raised.value.msg


@pytest.mark.parametrize("code", [
    "x = " + "(" * 201 + "1" + ")" * 201 + "\n",
    "x = [" + "{" * 100 + "(" * 100 + ")" * 100 + "}" * 100 + "]\n",
    "x = 1\ny = (\n" + "(" * 200 + ")" * 201 + "\n",
    "x = " + "[" * 1500 + "]" * 1500 + "\n",
    "x = " + "(" * 1300 + "1" + ")" * 1300 + "\n",
    "".join("    " * i + "if a:\n" for i in range(100)) + "    " * 100 + "pass\n",
    "".join("\t" * i + "if a:\n" for i in range(120)) + "\t" * 120 + "pass\n",
])
def test_a_tokenizer_limit_is_the_LL001_cpython_reports_on_every_version(code):
    line, column, message = _host_error(code)
    findings = lint_text("a.py", "import torch\n" + code, ALL).findings  # a file the rules analyse
    assert [(f.code, f.line, f.column, f.message) for f in findings] == [
        ("LL001", line + 1, column, f"syntax error: {message}")]
    syntax_only = lint_text("a.py", code, ALL).findings
    assert [(f.code, f.line, f.column) for f in syntax_only] == [("LL001", line, column)]
    # fix never changes a file it cannot parse (201 parentheses were once rewritten)
    broken = "import tensorflow as tf\n\n\n@tf.function\ndef step(x):\n    print(x)\n    return x\n" + code
    assert fix_text("a.py", broken, ALL, unsafe=True).applied == 0


@pytest.mark.parametrize("code", [
    "x = " + "(" * 200 + "1" + ")" * 200 + "\n",
    "".join("    " * i + "if a:\n" for i in range(99)) + "    " * 99 + "pass\n",
    'x = f"{' + "(" * 199 + "1" + ")" * 199 + '}"\n',
])
def test_just_within_the_limits_is_valid(code):
    compile(code, "a.py", "exec")
    assert lint_text("a.py", "import torch\n" + code, ALL).findings == []


# CPython 3.12's tokenizer (the first to nest f-strings in f-strings) limits them: (code, line, column,
# message) as 3.12 and 3.13 report them; 3.10 and 3.11 compile none of these either.
FSTRING_LIMITS = [
    ('x = f"{1:{2:{3:{4}}}}"\n', 1, 15, "f-string: expressions nested too deeply"),
    ('x = f"{a!r:{b=:{c:{d}}}}"\n', 1, 18, "f-string: expressions nested too deeply"),
    ("x = " + 'f"{' * 150 + "1" + '}"' * 150 + "\n", 1, 453, "too many nested f-strings"),
]


@pytest.mark.parametrize("code, line, column, message", FSTRING_LIMITS)
def test_an_f_string_limit_of_cpython_3_12_is_LL001(code, line, column, message):
    findings = lint_text("a.py", "import torch\n" + code, ALL).findings
    assert [(f.code, f.line, f.column, f.message) for f in findings] == [
        ("LL001", line + 1, column, f"syntax error: {message}")]


@pytest.mark.parametrize("code", [
    'x = f"{1:{2:{3}}}"\n',  # 3.10 and 3.11 refuse it, 3.12+ compile it
    "x = " + 'f"{' * 149 + "1" + '}"' * 149 + "\n",
])
def test_an_f_string_within_the_limits_of_cpython_3_12_is_valid(code):
    assert lint_text("a.py", "import torch\n" + code, ALL).findings == []


# ----- deeper than any CPython compiles --------------------------------------------------------------

_DEEPER = "deeper than any Python compiles"
_TOO_COMPLEX = "too complex to parse"
# (code, what stops every CPython first: its compiler's depth, or its parser's stack of 6,000 frames)
TOO_DEEP = {
    "unary_minus": ("x = " + "-" * 10_000 + "1\n", _DEEPER),
    "not": ("x = " + "not " * 10_000 + "1\n", _DEEPER),
    "attributes": ("x = a" + ".b" * 10_000 + "\n", _DEEPER),
    "plus_chain": ("x = " + "+".join(["a"] * 10_000) + "\n", _DEEPER),
    "calls": ("x = f" + "()" * 20_000 + "\n", _DEEPER),
    "elif_chain": ("if a:\n    pass\n" + "elif a:\n    pass\n" * COMPILE_DEPTH, _TOO_COMPLEX),
    # issue 36: compiled by none of 3.10-3.13 ("Parser stack overflowed", a MemoryError), once reported clean
    "unary_minus_9990": ("x = " + "-" * 9_990 + "1\n", _TOO_COMPLEX),
    "not_9990": ("x = " + "not " * 9_990 + "1\n", _TOO_COMPLEX),
    "lambdas_3000": ("x = " + "lambda: " * 3_000 + "1\n", _TOO_COMPLEX),
    "powers_3000": ("x = " + "y ** " * 3_000 + "1\n", _TOO_COMPLEX),
    # one past the deepest each compiles (CPython 3.13: 5,966 unary operators, 2,983 lambdas, 5,962 elifs)
    "unary_minus_5967": ("x = " + "-" * 5_967 + "1\n", _TOO_COMPLEX),
    "lambdas_2984": ("x = " + "lambda: " * 2_984 + "1\n", _TOO_COMPLEX),
    "elif_chain_5963": ("if a:\n    pass\n" + "elif a:\n    pass\n" * 5_963, _TOO_COMPLEX),
    "brackets_and_unary": ("x = " + "(" * 190 + "-" * 666 + "1" + ")" * 190 + "\n", _TOO_COMPLEX),
}


@pytest.mark.parametrize("name", sorted(TOO_DEEP))
def test_nesting_no_cpython_compiles_is_LL001(name):
    code, reason = TOO_DEEP[name]
    for text, first in ((code, 1), ("import torch\n" + code, 2)):  # syntax only, and analysed
        findings = lint_text("a.py", text, ALL).findings
        assert [(f.code, f.line) for f in findings] == [("LL001", first)], name
        assert reason in findings[0].message
    fixable = "import tensorflow as tf\n\n\n@tf.function\ndef step(x):\n    print(x)\n    return x\n" + code
    assert fix_text("a.py", fixable, ALL, unsafe=True).applied == 0  # a file that does not parse is never fixed


@pytest.mark.parametrize("code", [
    # CPython 3.13 compiles these (9,995 levels); 3.10-3.12 do not: no verdict of lintloop's can be a syntax error.
    "x = a" + ".b" * 9_995 + "\n", "x = f" + "()" * 5_000 + "\n", "x = " + "-" * 5_900 + "1\n",
    # the deepest CPython 3.13 parses and compiles
    "x = " + "-" * 5_966 + "1\n", "x = " + "not " * 5_966 + "1\n", "x = " + "lambda: " * 2_983 + "1\n",
    "x = " + "y ** " * 2_983 + "1\n", "if a:\n    pass\n" + "elif a:\n    pass\n" * 5_962,
    "x = " + "(" * 190 + "-" * 665 + "1" + ")" * 190 + "\n", "-" * 5_968 + "1\n",  # 665: 3.10 and 3.11
])
def test_nesting_some_cpython_compiles_is_not_LL001(code):
    assert ModuleSyntax.read("a.py", code).error is None
    assert lint_text("a.py", "import torch\n" + code, ALL).findings == []


# ----- too deep to analyse: masked, the rest linted --------------------------------------------------

DEEP_STATEMENTS = {
    "plus_chain": "y = " + "+".join(["x"] * 3000),
    "unary_in_condition": "if " + "-" * 2000 + "x:\n            total += loss",
    "string_concatenation": "y = (" + " ".join(['"a"'] * 3000) + ")",
    "and_chain": "y = " + " and ".join(["x"] * 20_000),
    "nested_lambdas": "f = " + "lambda: " * 1500 + "0",
    "elif_chain": "if x:\n            pass\n" + "        elif x:\n            pass\n" * (ANALYSIS_DEPTH + 1),
}


@pytest.mark.parametrize("name", sorted(DEEP_STATEMENTS))
def test_a_statement_too_deep_to_analyse_is_masked_and_the_rest_is_linted(name):
    code = TRAIN.replace("{deep}", DEEP_STATEMENTS[name])
    for ruleset in (ALL, RuleSet(list(ALL_RULES), screen=False)):  # the screen changes nothing
        result = lint_text("a.py", code, ruleset)
        assert not result.errors
        assert [(f.code, f.line) for f in result.findings] == [("LL701", 9), ("LL301", 10)]


def test_the_masked_text_keeps_every_other_line_where_it_was():
    code = TRAIN.replace("{deep}", DEEP_STATEMENTS["unary_in_condition"])
    masked, ranges = ModuleSyntax.read("a.py", code).analysable()
    assert ranges == [(11, 12)]
    original, replaced = source_lines(code), source_lines(masked)
    assert len(replaced) == len(original)
    assert replaced[10] == "        pass\n" and replaced[11] == "\n"
    assert [line for n, line in enumerate(replaced) if n not in (10, 11)] == \
           [line for n, line in enumerate(original) if n not in (10, 11)]
    ast.parse(masked)


def test_mask_replaces_statements_and_compound_statements_whole():
    code = "@dec\ndef f(\n    a,\n):\n    return a\nx = 1\n"
    masked = mask(source_lines(code), [(1, 5)])
    assert masked == "pass\n\n\n\n\nx = 1\n"
    nesting = scan("if " + "-" * (ANALYSIS_DEPTH + 5) + "a:\n    b = 1\nelse:\n    c = 2\nd = 3\n")
    assert nesting.masked_ranges() == [(1, 4)]


def test_fix_never_rewrites_a_masked_statement():
    deep = "print(" + "+".join(["x"] * 3000) + ")"
    code = ("import tensorflow as tf\n\n\n@tf.function\ndef step(x):\n    print(x)\n    " + deep + "\n    return x\n")
    outcome = fix_text("a.py", code, ALL, unsafe=True)
    assert outcome.applied == 1 and "tf.print(x)" in outcome.text
    assert deep in outcome.text  # the deep print is not analysed, so neither reported nor fixed


def test_a_call_chain_that_some_cpython_compiles_is_linted_with_its_positions():
    # `X = f()()...` once made locating findings overflow Python's recursion (an internal error).
    code = "X = f" + "()" * 5000 + "\n" + TRAIN.replace("{deep}", "pass")
    result = lint_text("a.py", code, ALL)
    assert not result.errors
    assert [(f.code, f.line) for f in result.findings] == [("LL701", 10), ("LL301", 11)]


def test_a_notebook_cell_too_deep_is_its_own_LL001_and_the_other_cells_are_linted():
    import json

    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": source}
             for source in ("import torch\n", "x = " + "(" * 1300 + ")" * 1300 + "\n",
                            TRAIN.replace("{deep}", "pass").split("\n", 1)[1])]
    notebook = json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    findings = lint_notebook("a.ipynb", notebook, ALL).findings
    assert [(f.code, f.cell) for f in findings] == [("LL001", 2), ("LL701", 3), ("LL301", 3)]
    assert findings[0].message == "syntax error: too many nested parentheses"


# ----- large files ----------------------------------------------------------------------------------


def test_a_syntax_error_at_the_end_of_a_large_file_is_found_chunk_by_chunk():
    # libcst's tree of the whole text would take gigabytes: the error's chunk is parsed alone.
    code = "".join(f"def f{i}(x):\n    return x * {i}\n\n" for i in range(20_000)) + "x = (\n"
    findings = lint_text("generated.py", code, ALL).findings
    assert [(f.code, f.line, f.column) for f in findings] == [("LL001", 60_001, 6)]


# ----- a run over ordinary and pathological files ---------------------------------------------------


def test_a_directory_mixing_ordinary_and_pathological_files_prints_every_ordinary_finding(tmp_path):
    import json
    import subprocess
    import sys
    import time

    hostile = {
        "parentheses.py": "x = " + "(" * 1300 + "1" + ")" * 1300 + "\n",
        "brackets.py": "x = " + "[" * 1500 + "]" * 1500 + "\n",
        "attributes.py": "x = a" + ".b" * 10_000 + "\n",
        "minus.py": "x = " + "-" * 10_000 + "1\n",
        "nots.py": "x = " + "not " * 10_000 + "1\n",
        "plus.py": "x = " + "+".join(["a"] * 20_000) + "\n",
        "calls.py": "X = f" + "()" * 5_000 + "\n",
        "p201.py": "x = " + "(" * 201 + "1" + ")" * 201 + "\n",
        "deep_loop.py": TRAIN.replace("{deep}", DEEP_STATEMENTS["plus_chain"]),
        "kernel.ipynb": json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "outputs": [],
                                               "execution_count": None, "source": "import torch\n"}],
                                    "metadata": {"kernelspec": "python3", "language_info": "python"},
                                    "nbformat": 4, "nbformat_minor": 5}),
    }
    for name, text in hostile.items():
        (tmp_path / name).write_text(text)
    ordinary = {f"ordinary_{n}.py": (FIXTURES / f"{code}_bad.py").read_text()
                for n, code in enumerate(("LL301", "LL701", "LL201", "LL101"))}
    for name, text in ordinary.items():
        (tmp_path / name).write_text(text)
    for jobs in ("1", "2"):
        started = time.monotonic()
        # Named, as pre-commit names them: parsed whatever they hold (found in a directory, the
        # pathological files without a training shape would be passed over unparsed).
        run = subprocess.run([sys.executable, "-m", "lintloop", "check", "--no-cache", "--format", "json",
                              "--jobs", jobs, *sorted([*hostile, *ordinary])], cwd=tmp_path, capture_output=True,
                             text=True, timeout=300)
        assert time.monotonic() - started < 120
        assert run.returncode == 1 and run.stderr == "", run.stderr
        findings = json.loads(run.stdout)
        assert {f["path"] for f in findings if f["code"] != "LL001"} == {*ordinary, "deep_loop.py"}
        assert {f["path"] for f in findings if f["code"] == "LL001"} == {
            "parentheses.py", "brackets.py", "attributes.py", "minus.py", "nots.py", "plus.py", "p201.py"}
        for name in ordinary:  # exactly what the file gets alone
            alone = lint_text(name, ordinary[name], DEFAULT).findings
            assert [(f["code"], f["line"]) for f in findings if f["path"] == name] == [(f.code, f.line) for f in alone]


_SEAMS = [
    "",  # nothing between two top-level statements
    "\n\n# a comment between two chunks\n\n",
    "    # an indented comment\n\n",
    "@decorator\n",  # a decorator starts its statement
]


@pytest.mark.parametrize("seam", _SEAMS)
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_a_long_module_parsed_in_chunks_is_the_tree_of_one_parse(seam, newline):
    # Two indentations (the module's is the first block's) and two line ends, varying chunk by chunk.
    blocks = ["def f{n}(x):\n    return x + {n}\n", "class C{n}:\n\tvalue = {n}  # tab\n", "y{n} = [\n  {n},\n]\n"]
    parts = []
    for n in range(2 * CHUNK_LINES):
        seamed = n % 97 == 0 and n % 3 != 2  # (a decorator needs a def or a class)
        parts.append((seam if seamed else "") + blocks[n % 3].format(n=n))
    text = "".join(parts).replace("\n", newline)
    if newline == "\r\n":  # a file whose line end changes part way
        text = text[: len(text) // 2] + text[len(text) // 2:].replace("\r\n", "\n")
    whole = cst.parse_module(text)
    lines = source_lines(text)
    for tree in (ast.parse(text), None):  # statements' starts from CPython's tree, or from the scanner
        chunked = parse_cst(text, lines, tree)
        assert chunked.code == text
        assert chunked.deep_equals(whole)


def test_a_long_module_with_a_syntax_error_raises_libcst_s_error_of_the_whole_text():
    text = "x = 1\n" * (3 * CHUNK_LINES) + "def (:\n" + "y = 2\n" * CHUNK_LINES
    with pytest.raises(cst.ParserSyntaxError) as chunked:
        parse_cst(text, source_lines(text), None)
    with pytest.raises(cst.ParserSyntaxError) as whole:
        cst.parse_module(text)
    assert (chunked.value.raw_line, chunked.value.raw_column) == (whole.value.raw_line, whole.value.raw_column)


def _display(opener: str, closer: str, item: str, count: int, seam: str = "") -> str:
    rows = "".join((seam if n % 500 == 0 else "") + "    " + item.format(n=n) + ",\n" for n in range(count))
    return f"{opener}\n{rows}{closer}"


_LONG_DISPLAYS = {
    "list": "TABLE = " + _display("[", "]", "[{n}.5, {n}, 'label_{n}', -{n}e-3]", 2_500, "    # a comment at a seam\n\n"),
    "dict": "VOCAB = " + _display("{", "}", "'token_{n}': {n}", 2_500, "\n"),
    "dict with unpacking": "VOCAB = " + _display("{", "}", "**BASE_{n}", 2_500),
    "set": "SEEN = " + _display("{", "}", "{n}", 2_500),
    "tuple": "PAIRS = " + _display("(", ")", "({n}, {n})", 2_500),
    "calls, spanning lines": "layers = " + _display("[", "]", "nn.Linear(\n        {n},\n        {n})", 1_000),
    "annotated": "TABLE: list[int] = " + _display("[", "]", "{n}", 2_500),
    "expression": "print" + _display("(", ")", "{n}", 2_500),
    "parenthesized list": "TABLE = (" + _display("[", "]", "{n}", 2_500) + ")",
    "comment after the bracket": "TABLE = " + _display("[  # data", "]", "{n}", 2_500),
    "closing with more": "TABLE = " + _display("[", "]", "{n}", 2_500) + ".copy()  # copied; then\nx = 1",
    "two statements on its last line": "TABLE = " + _display("[", "]", "{n}", 2_500) + "; y = TABLE",
}


@pytest.mark.parametrize("name", list(_LONG_DISPLAYS))
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_a_long_display_parsed_in_pieces_is_the_tree_of_one_parse(name, newline):
    text = ("import torch\n\n# data\n" + _LONG_DISPLAYS[name] + "\n\n# end\nmodel = torch.nn.Linear(4, 4)\n").replace(
        "\n", newline)
    whole = cst.parse_module(text)
    chunked = parse_cst(text, source_lines(text), ast.parse(text))
    assert chunked.code == text
    assert chunked.deep_equals(whole)


_PIECED = {"list", "dict", "set", "tuple", "calls, spanning lines", "annotated"}


@pytest.mark.parametrize("name", list(_LONG_DISPLAYS))
def test_the_displays_parsed_in_pieces_are_those_split_at_an_element(name, monkeypatch):
    # The others (no element starts a line; a bracket not alone on its line) are parsed whole.
    parsed_lengths = []
    real_parse = cst.parse_module
    monkeypatch.setattr(cst, "parse_module", lambda text: parsed_lengths.append(len(text)) or real_parse(text))
    text = "import torch\n" + _LONG_DISPLAYS[name] + "\n"
    tree = ast.parse(text)
    parse_cst(text, source_lines(text), tree)
    pieced = max(parsed_lengths) < len(text) // 2
    assert pieced == (name in _PIECED)


def test_a_selection_outlined_from_the_file_s_tree_is_parsed_and_located_as_if_parsed_again():
    """A long selection is chunked by the file's tree, renumbered (`selection_outline`), instead of a second
    CPython parse: the same top-level statements, the same CST, the same positions."""
    from lintloop.screen import FileFacts
    from lintloop.syntax import selection_outline

    methods = "".join(f"    @staticmethod\n    def m{n}(x):\n        return x * {n}\n\n    # after m{n}\n" for n in range(CHUNK_LINES // 2))
    text = ("import torch\n\n@torch.no_grad()\ndef evaluate(model):\n    return model(1)\n\na = 1; b = 2\n\n"
            f"class Big(torch.nn.Module):\n    '''a class whose methods are selected in part'''\n\n{methods}"
            "x = [\n    1,\n]\n")
    tree = ast.parse(text)
    facts = FileFacts(tree)
    wanted = {i for i in range(len(facts.units)) if i % 4 != 3}  # methods selected in part
    selection, line_map = facts.source_of(source_lines(text), wanted | {u.shell for u in facts.units if u.shell is not None})
    outline = selection_outline(tree, line_map)
    parsed = ast.parse(selection)
    assert len(source_lines(selection)) > CHUNK_LINES and len(outline.body) == len(parsed.body)
    for placeholder, statement in zip(outline.body, parsed.body):
        assert placeholder.lineno == statement.lineno
        assert [d.lineno for d in placeholder.decorator_list] == [d.lineno for d in getattr(statement, "decorator_list", [])]
        trailing = source_lines(selection)[statement.end_lineno:placeholder.end_lineno]  # comments after a method
        assert all(not line.strip() or line.strip().startswith("#") for line in trailing)
    lines = source_lines(selection)
    assert parse_cst(selection, lines, outline).deep_equals(parse_cst(selection, lines, parsed))
    long_display = "table = [\n" + "    0,\n" * (CHUNK_LINES + 1) + "]\n"
    assert selection_outline(ast.parse(long_display), list(range(1, CHUNK_LINES + 4))) is None  # split by its elements
