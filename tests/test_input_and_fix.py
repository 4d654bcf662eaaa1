"""Bad input never crashes or loses data; `fix` writes only valid code, crash-safely and idempotently."""

import codecs
import json
import os
import stat

import libcst as cst
import pytest

from conftest import FIXTURES, TF_LEAK, TF_PRINT, TORCH_LEAK
from lintloop.linter import lint_bytes
from lintloop.rule import RuleSet
from lintloop.rules import ALL_RULES, BY_CODE

DEFAULT = RuleSet([r for r in ALL_RULES if r.default_on])


def codes(data: bytes):
    result = lint_bytes("f.py", data, DEFAULT)
    assert not result.errors
    return [(f.code, f.line) for f in result.findings]


@pytest.mark.parametrize("data,expected", [
    (b"import torch\ndef f(:\n", [("LL001", 2)]),  # syntax error in a framework file (libcst)
    (b"x = (\n", [("LL001", 1)]),  # syntax error in a plain file (fast path)
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", [("LL001", 1)]),  # binary
    (b"x = '\xff\xfe'\n", [("LL001", 1)]),  # undecodable as UTF-8
    (b"# -*- coding: klingon -*-\nx = 1\n", [("LL001", 1)]),  # unknown encoding cookie
    (b"# -*- coding: rot13 -*-\nx = 1\n", [("LL001", 1)]),  # a codec that is no text encoding (was exit 2)
    (b"# -*- coding: zlib -*-\nx = 1\n", [("LL001", 1)]),
    # `python FILE` rejects it (Non-UTF-8 code ...) though `compile()` of its bytes skips the comment
    (b"import torch\n# caf\xe9\n", [("LL001", 2)]),
    (b"", []),  # empty
    (codecs.BOM_UTF8 + TORCH_LEAK.encode(), [("LL301", 7)]),
    (TORCH_LEAK.replace("\n", "\r\n").encode(), [("LL301", 7)]),
    (TORCH_LEAK.replace("    ", "\t").encode(), [("LL301", 7)]),
    (b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + TORCH_LEAK.encode("latin-1"), [("LL301", 9)]),
    # lines ended by a lone CR: the cookie of the second line holds (CPython reads it there too)
    (b"#!/usr/bin/env python\r# -*- coding: latin-1 -*-\r# caf\xe9\r" + TORCH_LEAK.replace("\n", "\r").encode(),
     [("LL301", 10)]),
])
def test_bad_input(data, expected):
    assert codes(data) == expected


@pytest.mark.parametrize("data, position", [
    (b"import torch\n# caf\xe9\n", (2, 6)),
    (b"import torch\r\nx = 'caf\xc3\xa9' + 'd\xe9j\xe0'\r\n", (2, 16)),  # columns in characters
    (b"x = 1\ry = '\xff'\n", (2, 6)),  # a lone CR ends a line
    (b"# -*- coding: ascii -*-\n\nx = 'caf\xc3\xa9'\n", (3, 9)),
])
def test_an_undecodable_byte_is_reported_where_it_is(data, position):
    [finding] = lint_bytes("f.py", data, DEFAULT).findings
    assert (finding.code, finding.line, finding.column) == ("LL001", *position)
    assert finding.message.startswith("cannot decode as ")


def test_syntax_error_finding_has_location_and_run_goes_on(run_cli, write, tmp_path):
    # A training step (what a rule looks for): parsed where it is found in a directory.
    write("a_broken.py", "import tensorflow as tf\nwith tf.GradientTape() as t\n    loss = model(x)\n"
                         "grads = t.gradient(loss, model.trainable_variables)\n")
    write("b_leak.py", TORCH_LEAK)
    code, out, _ = run_cli("check", tmp_path, "--format", "json", "--no-cache")
    found = [(os.path.basename(f["path"]), f["code"], f["line"]) for f in json.loads(out)]
    assert code == 1 and found == [("a_broken.py", "LL001", 2), ("b_leak.py", "LL301", 7)]


def test_large_files(tmp_path, run_cli):
    functions = "".join(f"def f{i}(x):\n    return x * {i}\n\n" for i in range(170_000))
    plain = tmp_path / "generated.py"
    plain.write_text(functions + "x = (\n")
    assert plain.stat().st_size > 5_000_000
    code, out, _ = run_cli("check", plain, "--format", "concise", "--no-cache")
    assert code == 1 and out.startswith(f"{plain}:510001:")  # the syntax error, at the right line
    framework = tmp_path / "big_training.py"
    framework.write_text("import torch\n" + functions[:functions.index("def f20000(")] + TORCH_LEAK)
    code, out, _ = run_cli("check", framework, "--format", "concise", "--no-cache")
    lines = framework.read_text().splitlines()
    assert code == 1 and out.count("LL301") == 1
    line = int(out.split(":")[1])
    assert lines[line - 1] == "    total += loss"


def fix_run(run_cli, *args):
    return run_cli("fix", *args, "--no-cache")


def test_fix_keeps_encoding_bom_newlines_and_mode(run_cli, tmp_path):
    original = (codecs.BOM_UTF8 + TF_PRINT.replace("\n", "\r\n").replace('"x"', '"é"').encode())
    path = tmp_path / "step.py"
    path.write_bytes(original)
    path.chmod(0o754)
    code, _, err = fix_run(run_cli, path)
    fixed = path.read_bytes()
    assert code == 0 and "Fixed 1 finding in 1 file." in err
    assert fixed == original.replace(b"    print(", b"    tf.print(")
    assert stat.S_IMODE(path.stat().st_mode) == 0o754
    assert not [p for p in tmp_path.iterdir() if p.name != "step.py"]  # no temp file left behind


def test_fix_latin1_file(run_cli, tmp_path):
    path = tmp_path / "step.py"
    path.write_bytes(b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + TF_PRINT.encode())
    assert fix_run(run_cli, path)[0] == 0
    assert path.read_bytes().startswith(b"# -*- coding: latin-1 -*-\n# caf\xe9\n")
    assert b"tf.print(" in path.read_bytes()


def test_unsafe_fixes_need_the_flag_and_fix_is_idempotent(run_cli, write):
    path = write("leak.py", TF_LEAK)
    code, out, _ = fix_run(run_cli, path)
    assert code == 1 and path.read_text() == TF_LEAK and "LL301" in out
    code, _, _ = fix_run(run_cli, path, "--unsafe-fixes")
    assert code == 0 and "losses.append(loss.numpy())" in path.read_text()
    before = path.read_bytes()
    code, _, err = fix_run(run_cli, path, "--unsafe-fixes")
    assert code == 0 and path.read_bytes() == before and "Fixed 0 findings" in err


def test_diff_writes_nothing(run_cli, write):
    path = write("step.py", TF_PRINT)
    code, out, _ = fix_run(run_cli, path, "--diff")
    assert code == 1 and path.read_text() == TF_PRINT
    assert '-    print("x", x)' in out and '+    tf.print("x", x)' in out


def test_fix_never_touches_unparsable_or_undecodable_files(run_cli, tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_bytes(b"import tensorflow as tf\n@tf.function\ndef f(x):\n    print(x\n")
    binary = tmp_path / "binary.py"
    binary.write_bytes(b"\x00\x01import tensorflow")
    before = {p: p.read_bytes() for p in (broken, binary)}
    code, out, _ = fix_run(run_cli, tmp_path, "--format", "concise")
    assert code == 1 and out.count("LL001") == 2
    assert {p: p.read_bytes() for p in before} == before


def test_fix_refuses_result_that_does_not_parse(monkeypatch, write, run_cli):
    from lintloop import linter

    path = write("step.py", TF_PRINT)
    real = linter.apply_edits
    monkeypatch.setattr(linter, "apply_edits", lambda text, edits: real(text, edits) + "\n)(\n")
    code, _, err = fix_run(run_cli, path)
    assert path.read_text() == TF_PRINT and "refused" in err and code == 1


def test_fix_on_fixtures_is_valid_and_idempotent(run_cli, tmp_path):
    for fixture in FIXTURES.glob("*.py"):
        (tmp_path / fixture.name).write_bytes(fixture.read_bytes())
    fix_run(run_cli, tmp_path, "--unsafe-fixes")
    once = {p.name: p.read_bytes() for p in tmp_path.glob("*.py")}
    for text in once.values():
        cst.parse_module(text)
    assert once["LL201_bad.py"] != (FIXTURES / "LL201_bad.py").read_bytes()
    fix_run(run_cli, tmp_path, "--unsafe-fixes")
    assert {p.name: p.read_bytes() for p in tmp_path.glob("*.py")} == once


_JIT_PRINTS = [
    'print("loss", loss)',
    'print("step {", x, \'of\', "a\\tb", b"raw", loss)',
    "print(loss)",
    'print("done")',
    "print('say \"hi\"', r'C:\\path', loss)",
]


@pytest.mark.parametrize("call", _JIT_PRINTS)
def test_the_jax_debug_print_fix_puts_string_literals_in_the_format_and_prints_the_same_text(call):
    import io
    import types
    from contextlib import redirect_stdout

    from lintloop.linter import fix_text
    source = f"import jax\n@jax.jit\ndef step(x, loss):\n    {call}\n    return x\n"
    fixed = fix_text("step.py", source, RuleSet([BY_CODE["LL206"]], {}), unsafe=False).text
    fixed_call = fixed.splitlines()[3].strip()
    assert fixed_call.startswith("jax.debug.print(")
    if call.startswith('print("loss"'):
        assert fixed_call == 'jax.debug.print("loss {}", loss)'

    def printed(statement: str) -> str:  # jax.debug.print formats with str.format, as print joins with spaces
        fake_jax = types.SimpleNamespace(debug=types.SimpleNamespace(print=lambda fmt, *a: print(fmt.format(*a))))
        out = io.StringIO()
        with redirect_stdout(out):
            exec(statement, {"jax": fake_jax, "x": 3, "loss": 0.25})
        return out.getvalue()

    assert printed(fixed_call) == printed(call)
