"""Syntax edges: a file is LL001 exactly where no CPython 3.10-3.13 compiles it, whatever Python runs
lintloop. The oracle is the interpreters installed (pyenv's python3.10-3.13, or on PATH; a version not
installed is left out): a text compiles where `compile()` of its bytes succeeds and its bytes decode in
their PEP 263 encoding (as `python FILE` reads them); a notebook's cell where it compiles alone allowing
top-level await (as IPython compiles it). Each case is one family of texts (one file each) checked by one
`lintloop check --format json` run: the files (or cells) with LL001 must be those the oracle refuses.

Families: nesting around each version's limits (unary chains, lambdas, powers, conditionals, elifs,
attributes, calls, brackets; in several statements), escapes and bytes (`\\N{...}`, `\\x`, non-ASCII
bytes, in every string form and f-strings), f-strings (format specs nested, nested f-strings, starred and
generator fields, 3.12 forms), compile-time errors (at module level, in functions, in classes, after
syntax newer than some host), form feeds in indentation, line endings (LF, CRLF, CR, mixed) and tabs,
encodings, notebook cells; and `fix` over broken files, which must stay as they are.

Where some of python3.10-3.13 are not installed, only what the installed ones compile is checked
(never LL001). Known host dependence, not generated: a `\\N{...}` name is looked up in the host's Unicode database
(3.10: Unicode 13.0 ... 3.13: 15.1), so a name newer than 13.0 is decided by the host.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from harness import Case, Outcome

CATEGORY = "syntax"
DESCRIPTION = "syntax edges: LL001 iff no installed CPython 3.10-3.13 compiles the text"

VERSIONS = ("3.10", "3.11", "3.12", "3.13")
TRAIN = ("\n\ndef train(model, opt, loader):\n    for x in loader:\n        model(x).sum().backward()\n"
         "        opt.step()\n")


# ----- the oracle --------------------------------------------------------------------------------

_ORACLE = r"""
import base64, io, json, sys, threading, tokenize, warnings
warnings.simplefilter("ignore")
threading.stack_size(1 << 30)  # 3.10's parser recurses on the C stack

def decodes(data):
    if data.startswith(b"\xef\xbb\xbf"):
        return _decodes(data[3:], "utf-8")
    try:
        encoding, _ = tokenize.detect_encoding(iter(data.splitlines(keepends=True)[:2]).__next__)
    except SyntaxError:
        return False
    return _decodes(data, encoding)

def _decodes(data, encoding):
    try:
        data.decode(encoding)
        return True
    except (UnicodeError, LookupError, ValueError):
        return False

def compiles(data, flags):
    try:
        if not flags & 0x2000:
            compile(data, "case.py", "exec", flags=flags, dont_inherit=True)
            return True
        # A notebook's cell, as IPython runs it: parsed whole, its statements compiled one by one.
        import ast
        for statement in ast.parse(data).body:
            compile(ast.Module(body=[statement], type_ignores=[]), "cell", "exec", flags=flags, dont_inherit=True)
        return True
    except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError):
        return False

out = []
def run():
    for data, flags, file in json.load(sys.stdin):
        data = base64.b64decode(data)
        out.append(compiles(data, flags) and (not file or decodes(data)))
thread = threading.Thread(target=run)
thread.start()
thread.join()
print(json.dumps(out))
"""
_TOP_LEVEL_AWAIT = 0x2000  # ast.PyCF_ALLOW_TOP_LEVEL_AWAIT


@functools.cache
def interpreters() -> tuple[str, ...]:
    """python3.10-3.13 as installed (pyenv's builds first, then PATH; this one for its own version)."""
    found = []
    for version in VERSIONS:
        if version == f"{sys.version_info[0]}.{sys.version_info[1]}":
            found.append(sys.executable)
            continue
        pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
        candidates = [str(p) for p in sorted(pyenv.glob(f"{version}.*/bin/python{version}"), reverse=True)]
        candidates += [found_on_path] if (found_on_path := shutil.which(f"python{version}")) else []
        for candidate in candidates:
            if subprocess.run([candidate, "-c", "pass"], capture_output=True, check=False).returncode == 0:
                found.append(candidate)
                break
    return tuple(found)


def _compiled(items: list[tuple[bytes, int, bool]]) -> list[bool]:
    """Whether some installed CPython compiles each (text, flags, whole file: decoded as a file is)."""
    payload = json.dumps([(base64.b64encode(data).decode(), flags, file) for data, flags, file in items])
    verdicts = [False] * len(items)
    for python in interpreters():
        run = subprocess.run([python, "-c", _ORACLE], input=payload, capture_output=True, text=True, timeout=600,
                             check=True)
        verdicts = [before or now for before, now in zip(verdicts, json.loads(run.stdout))]
    return verdicts


# ----- the texts --------------------------------------------------------------------------------

Family = dict[str, bytes]  # file name -> bytes (a notebook: its JSON)


def _text(code: str) -> bytes:
    return code.encode("utf-8")


def _chains(quick: bool) -> dict[str, Family]:
    """Nesting around each version's limits: 3.10-3.12 compile about 2,983-2,993 levels, 3.13 9,995;
    every parser stacks at most 6,000 frames (a unary operator takes 1, `lambda` and `**` 2)."""
    shapes = {  # name: (piece, end, lengths)
        "unary_minus": ("-", "1", (2_983, 2_994, 5_965, 5_966, 5_967, 5_968, 9_990)),
        "not": ("not ", "1", (2_984, 5_966, 5_967, 9_990)),
        "invert": ("~", "1", (5_966, 5_967)),
        "lambdas": ("lambda: ", "1", (2_982, 2_983, 2_984, 3_000)),
        "powers": ("y ** ", "1", (2_982, 2_983, 2_984, 3_000)),
        "conditionals": ("a if b else ", "1", (5_965, 5_966, 5_967)),
        "attributes": ("", "", (9_994, 9_995, 9_996, 9_998, 10_000)),
        "calls": ("", "", (9_994, 9_995, 9_996, 10_000)),
        "plus_chain": ("", "", (9_995, 9_996, 9_997, 10_001)),
    }
    contexts = {
        "assignment": "x = {}\n", "expression": "{}\n", "return": "def f():\n    return {}\n",
        "if_body": "if a:\n    x = {}\n", "call_argument": "f({})\n", "parenthesized": "x = ({})\n",
        "in_a_list": "x = [{}]\n",
    }
    if quick:
        shapes = {"unary_minus": ("-", "1", (5_966, 5_967)), "lambdas": ("lambda: ", "1", (2_983, 2_984)),
                  "attributes": ("", "", (9_995, 9_996))}
        contexts = {name: contexts[name] for name in ("assignment", "return")}
    families = {}
    for name, (piece, end, lengths) in shapes.items():
        family = {}
        for context, template in contexts.items():
            for length in lengths:
                if name == "attributes":
                    expression = "a" + ".b" * length
                elif name == "calls":
                    expression = "f" + "()" * length
                elif name == "plus_chain":
                    expression = "+".join(["a"] * length)
                else:
                    expression = piece * length + end
                family[f"{name}_{context}_{length}.py"] = _text(template.format(expression))
        families[f"depth-{name}"] = family
    elifs = (2_983, 5_961, 5_962, 5_963, 5_970) if not quick else (5_963,)
    families["depth-elif-chains"] = {
        f"elifs_{where}_{count}.py": _text(prefix + "if a:\n" + indent + "    pass\n"
                                           + f"{indent}elif a:\n{indent}    pass\n" * count)
        for count in elifs for where, prefix, indent in (("module", "", ""), ("def", "def f():\n", "    "))}
    families["depth-brackets"] = {
        f"brackets_{kind}_{levels}_{minus}.py": _text("x = " + opening * levels + "-" * minus + "1"
                                                      + closing * levels + "\n")
        for kind, opening, closing in (("parentheses", "(", ")"), ("lists", "[", "]"))
        for levels, minus in ((190, 664), (190, 665), (190, 666), (199, 400), (200, 1), (201, 1))
        if not quick or (levels, minus, kind) in ((190, 665, "parentheses"), (190, 666, "parentheses"))}
    return families


_STRINGS = {  # (name, literal) the escape families put in several statements
    "unknown_name": '"\\N{NOT A REAL NAME}"', "known_name": '"\\N{LATIN SMALL LETTER A}"',
    "lower_case_name": '"\\N{latin small letter a}"', "empty_name": '"\\N{}"',
    "truncated_x": '"\\x4"', "truncated_u": '"\\u12"', "truncated_U": '"\\U0001F60"',
    "too_large_U": '"\\U00110000"', "octal_over_377": '"\\777"', "unknown_escape": '"\\q"',
    "raw_unknown_name": 'r"\\N{NOT A REAL NAME}"', "unicode_prefix": 'u"\\N{NOT A REAL NAME}"',
    "triple_quoted": '"""a\nb\\N{NOT A REAL NAME}\n"""', "concatenated": '"a" "\\x4"',
    "bytes_non_ascii": "b'caf\u00e9'", "raw_bytes_non_ascii": "rb'caf\u00e9'", "bytes_ascii": "b'cafe'",
    "bytes_N": 'b"\\N{DASH}"', "bytes_truncated_x": 'b"\\x4"', "bytes_and_str": '"a" b"b"',
    "f_string_unknown_name": 'f"a{b}\\N{NOT A REAL NAME}"', "f_string_known_name": 'f"{b}\\N{LATIN SMALL LETTER A}"',
    "raw_f_string_unknown_name": 'rf"\\N{NOT A REAL NAME}{b}"', "f_string_spec_escape": 'f"{b:\\x4}"',
    "f_string_and_bytes": 'f"{b}" b"c"', "nested_string_in_f_string": 'f"{"\\N{NOT A REAL NAME}"}"',
    "triple_quoted_f_string": 'f"""\n{b}\\x4\n"""',
}


def _escapes(quick: bool) -> dict[str, Family]:
    statements = {"assignment": "x = {}\n", "call": "print(1,\n      {})\n", "in_a_def": "def f():\n    return {}\n",
                  "after_newer_syntax": "type T = int\nx = {}\n"}
    names = list(_STRINGS)
    if quick:
        names = ["unknown_name", "known_name", "truncated_x", "bytes_non_ascii", "bytes_and_str",
                 "f_string_unknown_name", "nested_string_in_f_string", "f_string_and_bytes"]
        statements = {name: statements[name] for name in ("after_newer_syntax",)}
    return {f"escapes-{where}": {f"{name}.py": _text(template.format(_STRINGS[name])) for name in names}
            for where, template in statements.items()}


_F_STRINGS = {
    "spec_1": 'f"{a:{b}}"', "spec_2": 'f"{a:{b:{c}}}"', "spec_3": 'f"{a:{b:{c:{d}}}}"',
    "spec_3_conversion": 'f"{a!r:{b=:{c:{d}}}}"', "spec_2_two_fields": 'f"{a:{b:{c}{d}}}"',
    "nested_148": 'f"{' * 148 + "1" + '}"' * 148, "nested_149": 'f"{' * 149 + "1" + '}"' * 149,
    "nested_150": 'f"{' * 150 + "1" + '}"' * 150, "nested_quotes": 'f"{d["k"]}"',
    "backslash_in_field": "f\"{'\\n'.join(x)}\"", "comment_in_field": 'f"{\n    a  # the batch\n}"',
    "starred_field": 'f"{*a}"', "starred_tuple_field": 'f"{*a, b}"', "starred_in_spec": 'f"{a:{*b}}"',
    "generator_field": 'f"{x for x in y}"', "lambda_field": 'f"{lambda: 1}"', "parenthesized_lambda": 'f"{(lambda: 1)}"',
    "empty_field": 'f"{}"', "bad_conversion": 'f"{a!x}"', "debug_field": 'f"{a = }"', "yield_field": 'f"{(yield)}"',
    "walrus_field": 'f"{(y := 1)}"', "multiline_single_quoted": 'f"{\na\n}"', "unclosed_field": 'f"{a"',
    "doubled_braces": 'f"{{a}} {b}"', "concatenated_with_bytes": 'f"{a}" b"x"',
}


def _f_strings(quick: bool) -> dict[str, Family]:
    statements = {"assignment": "x = {}\n", "in_a_def": "def f():\n    return {}\n", "statement": "{}\n"}
    names = list(_F_STRINGS) if not quick else ["spec_2", "spec_3", "nested_149", "nested_150", "starred_field",
                                                "generator_field", "yield_field", "nested_quotes"]
    if quick:
        statements = {"assignment": statements["assignment"]}
    return {f"f-strings-{where}": {f"{name}.py": _text(template.format(_F_STRINGS[name])) for name in names}
            for where, template in statements.items()}


_COMPILE_ERRORS = {
    "return": "return 1\n", "yield": "yield 1\n", "await": "await x\n", "break": "break\n", "continue": "continue\n",
    "nonlocal": "nonlocal x\n", "late_future": "import os\nfrom __future__ import annotations\n",
    "unknown_future": "from __future__ import braces\n", "starred_alone": "*a = [1]\n", "two_starred": "*a, *b = c\n",
    "starred_expression": "*a\n", "duplicate_argument": "def f(a, a): pass\n", "duplicate_lambda": "g = lambda a, a: 0\n",
    "nonlocal_without_binding": "def f():\n    nonlocal x\n", "global_after_use": "def f():\n    print(x)\n    global x\n",
    "global_after_assignment": "def f():\n    x = 1\n    global x\n", "parameter_global": "def f(x):\n    global x\n",
    "default_except_first": "try:\n    pass\nexcept:\n    pass\nexcept ValueError:\n    pass\n",
    "await_in_def": "def f():\n    await x\n", "async_with_in_def": "def f():\n    async with x:\n        pass\n",
    "return_in_async_generator": "async def f():\n    yield 1\n    return 1\n",
    "yield_from_in_async": "async def f():\n    yield from x\n", "import_star_in_def": "def f():\n    from os import *\n",
    "walrus_in_class_comprehension": "class C:\n    [y := 1 for x in z]\n",
    "walrus_rebinding": "[x := 1 for x in z]\n", "repeated_keyword": "f(a=1, a=2)\n",
    "debug_keyword": "f(__debug__=1)\n", "debug_parameter": "def f(__debug__): pass\n", "debug_assignment": "__debug__ = 1\n",
    "capture_first": "match x:\n    case a: pass\n    case 1: pass\n", "alternatives": "match x:\n    case [a] | [b]: pass\n",
    "twenty_one_loops": "".join("    " * i + "for x in y:\n" for i in range(21)) + "    " * 21 + "pass\n",
    "twenty_two_withs": "".join("    " * i + "with a:\n" for i in range(22)) + "    " * 22 + "pass\n",
    "async_comprehension_nested": "async def f():\n    return [[x async for x in y] for z in w]\n",
    "break_in_except_star": "for x in y:\n    try:\n        pass\n    except* E:\n        break\n",
    "return_in_except_star_def": "try:\n    pass\nexcept* E:\n    def g():\n        return 1\n",
    "duplicate_type_parameter": "def f[T, T](): pass\n", "type_parameter_default_order": "def f[T=int, U](): pass\n",
    "yield_in_type_alias": "def g():\n    type X = (yield)\n", "yield_in_bound": "def f[T: (yield)](): pass\n",
    "valid_program": "def f(a, *b, **c):\n    return [x for x in b if x]\n",
}
_PREFIXES = {"plain": "", "after_a_type_alias": "type Alias = int\n", "after_a_pep_701_f_string": 'label = f"{d["k"]}"\n',
             "after_except_star": "try:\n    pass\nexcept* OSError:\n    pass\n"}


def _compile_errors(quick: bool) -> dict[str, Family]:
    names = list(_COMPILE_ERRORS) if not quick else ["return", "break", "late_future", "starred_alone",
                                                     "duplicate_argument", "nonlocal_without_binding",
                                                     "twenty_one_loops", "debug_keyword", "valid_program"]
    prefixes = _PREFIXES if not quick else {name: _PREFIXES[name] for name in ("plain", "after_a_pep_701_f_string")}
    families = {}
    for prefix_name, prefix in prefixes.items():
        family = {}
        for name in names:
            code = _COMPILE_ERRORS[name]
            if name == "late_future" or name == "unknown_future":
                family[f"{name}.py"] = _text(code + prefix)  # a future import must come first
            else:
                family[f"{name}.py"] = _text(prefix + code)
                if not quick:
                    family[f"{name}_in_a_class.py"] = _text(prefix + "class K:\n" + _indented(code))
        families[f"compile-time-{prefix_name}"] = family
    return families


def _indented(code: str) -> str:
    return "".join("    " + line if line.strip() else line for line in code.splitlines(keepends=True))


def _form_feeds(quick: bool) -> dict[str, Family]:
    bodies = {
        "before_a_nesting_block": "def train(model, opt, loader):\n\f    for x in loader:\n"
                                  "        model(x).sum().backward()\n        opt.step()\n",
        "in_a_nested_block": "def train(model, opt, loader):\n    for x in loader:\n\f        model(x).sum().backward()\n"
                             "        opt.step()\n",
        "inside_indentation": "def train(model, opt, loader):\n    for x in loader:\n        model(x).sum().backward()\n"
                              "  \f        opt.step()\n",
        "after_indentation": "def train(model, opt, loader):\n    for x in loader:\n        \fmodel(x).sum().backward()\n",
        "before_a_dedent": "def train(model, opt, loader):\n    for x in loader:\n        opt.step()\n\fy = 1\n",
        "mismatched_after_reset": "def train(model, opt, loader):\n    for x in loader:\n        model(x)\n  \f      opt.step()\n",
        "page_break_lines": "x = 1\n\f\ndef f():\n    return 1\n\f\n",
        "before_a_decorator": "import functools\n\f@functools.cache\ndef f():\n    return 1\n",
        "in_a_continuation": "x = (1,\n\f     2)\n",
        "with_tabs": "def train(model, opt, loader):\n\t\f    for x in loader:\n        opt.step()\n",
    }
    endings = {"lf": "\n", "crlf": "\r\n", "cr": "\r"} if not quick else {"crlf": "\r\n"}
    prefixes = {"plain": "import torch\n", "newer_syntax": "import torch\ntype T = int\n"}
    if quick:
        bodies = {name: bodies[name] for name in ("before_a_nesting_block", "inside_indentation", "mismatched_after_reset")}
    return {f"form-feeds-{prefix_name}-{ending_name}": {
        f"{name}.py": _text((prefix + body).replace("\n", ending)) for name, body in bodies.items()}
        for prefix_name, prefix in prefixes.items() for ending_name, ending in endings.items()}


def _line_endings(quick: bool) -> dict[str, Family]:
    program = "import torch\nif a:\n    x = (1,\n         2)\n    y = '''a\nb'''\n" + TRAIN
    texts = {
        "lf": program, "crlf": program.replace("\n", "\r\n"), "cr": program.replace("\n", "\r"),
        "mixed": program.replace("\n", "\r\n", 3).replace("\n", "\r", 2),
        "continuation_at_the_end_lf": "x = 1\n\\\n", "continuation_at_the_end_crlf": "x = 1\r\n\\\r\n",
        "continuation_into_the_end_crlf": "x = 1 \\\r\n", "continuation_at_the_end_cr": "x = 1\r\\\r",
        "continuation_without_newline": "x = 1\n\\",
        "tabs": "if a:\n\tif b:\n\t\tx = 1\n", "tabs_then_spaces": "if a:\n\tx = 1\n        y = 2\n",
        "spaces_then_tab": "if a:\n        x = 1\n\ty = 2\n", "inconsistent_tabs": "if a:\n    \tx = 1\n\ty = 2\n",
        "null_byte": "x = 1\x00\n", "lone_surrogate_escape": 'x = "\\ud800"\n', "vertical_tab": "x = 1\x0b\n",
        "indentation_99": "".join("    " * i + "if a:\n" for i in range(99)) + "    " * 99 + "pass\n",
        "indentation_100": "".join("    " * i + "if a:\n" for i in range(100)) + "    " * 100 + "pass\n",
    }
    if quick:
        texts = {name: texts[name] for name in ("crlf", "cr", "continuation_at_the_end_crlf", "tabs_then_spaces",
                                                "null_byte")}
    return {"line-endings-and-tabs": {f"{name}.py": _text(code) for name, code in texts.items()}}


def _encodings(quick: bool) -> dict[str, Family]:
    texts = {
        "comment_latin1_bytes": b"import torch\n# caf\xe9\n", "string_latin1_bytes": b"x = 'caf\xe9'\n",
        "cookie_latin1": b"# -*- coding: latin-1 -*-\nx = 'caf\xe9'\n", "cookie_rot13": b"# coding: rot13\nx = 1\n",
        "cookie_unknown": b"# coding: klingon\nx = 1\n", "cookie_on_line_two_cr": b"#!python\r# coding: latin-1\rx = '\xe9'\r",
        "cookie_on_line_three": b"\n\n# coding: latin-1\nx = '\xe9'\n", "bom_and_latin1_cookie": b"\xef\xbb\xbf# coding: latin-1\n",
        "bom_utf8": b"\xef\xbb\xbfx = 'caf\xc3\xa9'\n", "utf16_bom": "x = 1\n".encode("utf-16"),
        "invalid_identifier": "x = a\u20ac\n".encode(), "non_ascii_identifier": "caf\u00e9 = 1\n".encode(),
        "nbsp": "x = 1\u00a0+ 2\n".encode(), "zero_width_space": "x = 1 \u200b\n".encode(),
    }
    if quick:
        texts = {name: texts[name] for name in ("comment_latin1_bytes", "cookie_rot13", "cookie_on_line_two_cr")}
    return {"encodings": {f"{name}.py": data for name, data in texts.items()}}


_CELLS = {
    "top_level_await": ["import asyncio\nawait asyncio.sleep(0)\n"], "async_for": ["async for x in y:\n    pass\n"],
    "return": ["x = 1\n", "return x\n"], "yield": ["yield 1\n"], "break": ["break\n"],
    "future_in_a_later_cell": ["x = 1\n", "from __future__ import annotations\ny: int = 1\n"],
    "late_future_in_a_cell": ["x = 1\nfrom __future__ import annotations\n"], "nonlocal": ["nonlocal x\n"],
    "duplicate_argument": ["def f(a, a):\n    pass\n"], "bytes_non_ascii": ["x = b'caf\u00e9'\n"],
    "await_in_def": ["def f():\n    await x\n"], "valid": ["import torch\n", TRAIN],
    "newer_syntax_and_return": ["type T = int\n", "return 1\n"],
}


def _notebook(cells: list[str]) -> bytes:
    document = {"cells": [{"cell_type": "code", "execution_count": None, "id": f"cell{i}", "metadata": {},
                           "outputs": [], "source": source} for i, source in enumerate(cells)],
                "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
                "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(document, indent=1).encode()


def _notebooks(quick: bool) -> dict[str, Family]:
    names = list(_CELLS) if not quick else ["top_level_await", "return", "future_in_a_later_cell", "valid"]
    return {"notebook-cells": {f"{name}.ipynb": _notebook(_CELLS[name]) for name in names}}


# ----- cases -------------------------------------------------------------------------------------


def _expected(family: Family) -> dict[str, set[int | None]]:
    """For each file, what the oracle refuses: {None} a file; {cell, ...} a notebook's cells."""
    items: list[tuple[bytes, int, bool]] = []
    owners: list[tuple[str, int | None]] = []
    for name, data in family.items():
        if name.endswith(".ipynb"):
            for index, cell in enumerate(json.loads(data)["cells"], start=1):
                items.append((cell["source"].encode(), _TOP_LEVEL_AWAIT, False))
                owners.append((name, index))
        else:
            items.append((data, 0, True))
            owners.append((name, None))
    refused: dict[str, set[int | None]] = {name: set() for name in family}
    for (name, cell), compiled in zip(owners, _compiled(items)):
        if not compiled:
            refused[name].add(cell)
    return refused


def _check(family: Family):
    def expect(outcome: Outcome) -> str | None:
        expected = _expected(family)  # the oracle asked when the case runs, not when it is listed
        try:
            findings = json.loads(outcome.out)
        except ValueError:
            return "no JSON report: " + outcome.out[:200]
        found: dict[str, set[int | None]] = {name: set() for name in expected}
        for finding in findings:
            if finding["code"] == "LL001":
                found.setdefault(finding["path"], set()).add(finding.get("cell"))
        # Where a version is not installed, what the others refuse it may compile: only what they
        # compile is checked (never LL001).
        every_version = len(interpreters()) == len(VERSIONS)
        wrong = [f"{name}: LL001 {sorted(map(str, found[name])) or 'none'}, CPython refuses "
                 f"{sorted(map(str, expected.get(name, set()))) or 'none'}"
                 for name in sorted(found) if not _agrees(found[name], expected.get(name, set()), every_version)]
        return "; ".join(wrong) or None
    return expect


def _agrees(found: set[int | None], refused: set[int | None], every_version: bool) -> bool:
    return found == refused if every_version else found <= refused


_KINDS = ("depth", "escapes", "f-strings", "compile-time", "form-feeds", "line-endings", "encodings", "notebook")


def cases(quick: bool) -> list[Case]:
    families: dict[str, Family] = {}
    for build in (_chains, _escapes, _f_strings, _compile_errors, _form_feeds, _line_endings, _encodings, _notebooks):
        families.update(build(quick))
    if quick:  # a process per kind of family (depth, escapes, ...): each costs a start
        merged: dict[str, Family] = {}
        for name, family in families.items():
            kind = next(kind for kind in _KINDS if name.startswith(kind))
            merged.setdefault(kind, {}).update({f"{name.removeprefix(kind).strip('-') or kind}-{file}": data
                                                for file, data in family.items()})
        families = merged
    found = []
    for name, family in families.items():
        files = {f"project/{file}": data for file, data in family.items()}
        argv = ["check", "--format", "json", "--no-cache", "--select", "ALL", *sorted(family)]
        found.append(Case(CATEGORY, name, files, argv, expect=_check(family), timeout=300))
    # fix leaves every file it cannot compile as it is (the harness checks that nothing changed)
    broken = {**{f"project/{name}.py": _text("import tensorflow as tf\n\n\n@tf.function\ndef step(x):\n    print(x)\n"
                                             "    return x\n" + code) for name, code in _COMPILE_ERRORS.items()
                 if name in ("return", "late_future", "duplicate_argument", "debug_keyword")},
              "project/escape.py": _text("import tensorflow as tf\n\n\n@tf.function\ndef step(x):\n    print(x)\n"
                                         "    return x\nx = b'caf\u00e9'\n")}
    found.append(Case(CATEGORY, "fix-leaves-what-does-not-compile", broken, ["fix", "--unsafe-fixes", "--no-cache", "."],
                      exits=frozenset({1})))
    return found
