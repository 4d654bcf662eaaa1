"""Configuration, file discovery and suppression comments."""

import json

import pytest

from conftest import TORCH_LEAK


def concise(run_cli, *args, cwd=None):
    code, out, err = run_cli("check", *args, "--format", "concise", "--no-cache", cwd=cwd)
    return code, [line.split(" ")[1] for line in out.splitlines()], err


@pytest.mark.parametrize("comment", [
    "# lintloop: ignore[LL301]", "# lintloop: ignore[loss-tensor-accumulation]", "# noqa: LL301",
    "# lintloop: ignore", "# noqa", "# lintloop: ignore[LL101, LL301]", "# NOQA:LL301",
])
def test_line_suppression(run_cli, write, comment):
    path = write("leak.py", TORCH_LEAK.replace("total += loss", f"total += loss  {comment}"))
    assert concise(run_cli, path)[:2] == (0, [])


def test_suppression_on_first_or_last_line_of_a_multiline_statement(run_cli, write):
    source = TORCH_LEAK.replace("total += loss", "total += (\n        loss\n    )")
    path = write("leak.py", source)
    assert concise(run_cli, path)[1] == ["LL301"]
    write("leak.py", source.replace("total += (", "total += (  # noqa: LL301"))
    assert concise(run_cli, path)[1] == []
    write("leak.py", source.replace("\n    )", "\n    )  # lintloop: ignore[LL301]"))
    assert concise(run_cli, path)[1] == []


def test_other_tools_noqa_and_other_codes_do_not_suppress(run_cli, write):
    path = write("leak.py", TORCH_LEAK.replace("total += loss", "total += loss  # noqa: E501  # lintloop: ignore[LL101]"))
    assert concise(run_cli, path)[1] == ["LL301"]


def test_file_level_suppression(run_cli, write):
    path = write("leak.py", "# lintloop: ignore-file[LL301]\n" + TORCH_LEAK)
    assert concise(run_cli, path)[1] == []
    path = write("leak.py", "# lintloop: ignore-file[LL201]\n" + TORCH_LEAK)
    assert concise(run_cli, path)[1] == ["LL301"]


def test_suppression_text_inside_a_string_is_not_a_comment(run_cli, write):
    path = write("leak.py", TORCH_LEAK.replace("total += loss", "total += loss; s = '# noqa: LL301'"))
    assert concise(run_cli, path)[1] == ["LL301"]


def test_unknown_code_in_suppression_is_LL002(run_cli, write):
    path = write("leak.py", TORCH_LEAK.replace("total += loss", "total += loss  # lintloop: ignore[LL999]"))
    code, out, _ = run_cli("check", path, "--format", "json", "--no-cache")
    found = {(f["code"], f["line"]) for f in json.loads(out)}
    assert found == {("LL301", 7), ("LL002", 7)}
    assert "LL999" in [f for f in json.loads(out) if f["code"] == "LL002"][0]["message"]


def test_unused_suppression_is_LL003_when_selected(run_cli, write):
    path = write("ok.py", "import torch\nx = torch.ones(1)  # lintloop: ignore[LL301]\n")
    assert concise(run_cli, path)[1] == []
    assert concise(run_cli, path, "--extend-select", "LL003")[1] == ["LL003"]


def test_pyproject_config_select_ignore_and_per_file_ignores(run_cli, write, tmp_path):
    write("pyproject.toml", """
        [tool.lintloop]
        ignore = ["LL201"]
        [tool.lintloop.per-file-ignores]
        "legacy/*" = ["loss-tensor-accumulation"]
    """)
    write("legacy/old.py", TORCH_LEAK)
    write("new.py", TORCH_LEAK)
    write("step.py", "import tensorflow as tf\n@tf.function\ndef f(x):\n    print(x)\n")
    code, found, _ = concise(run_cli, ".", cwd=tmp_path)
    assert code == 1 and found == ["LL301"]


def test_lintloop_toml_and_explicit_config(run_cli, write, tmp_path):
    write("lintloop.toml", 'select = ["LL2"]\n')
    write("leak.py", TORCH_LEAK)
    assert concise(run_cli, ".", cwd=tmp_path)[1] == []
    other = write("other/conf.toml", 'extend-select = ["LL003"]\n')
    assert concise(run_cli, "leak.py", "--config", other, cwd=tmp_path)[1] == ["LL301"]


@pytest.mark.parametrize("config,message", [
    ('[tool.lintloop]\nselct = ["LL1"]\n', "unknown key 'selct'"),
    ('[tool.lintloop]\nselect = ["LL999"]\n', "LL999"),
    ('[tool.lintloop]\nselect = "LL1"\n', "must be a list"),
    ('[tool.lintloop.per-file-ignores]\n"a.py" = ["nope"]\n', "nope"),
    ('[tool.lintloop.rules.LL402]\nkeras = 4\n', "keras"),
    ('[tool.lintloop.rules.LL402]\ncolour = 1\n', "unknown option 'colour'"),
    ('[tool.lintloop.rules.LL777]\nx = 1\n', "LL777"),
    ('[tool.lintloop\n', "cannot read configuration"),
])
def test_config_errors_exit_2_with_one_line(run_cli, write, tmp_path, config, message):
    write("pyproject.toml", config)
    write("a.py", "x = 1\n")
    code, out, err = run_cli("check", "a.py", cwd=tmp_path)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_discovery_honours_gitignore_exclude_and_explicit_files(run_cli, write, tmp_path):
    (tmp_path / ".git").mkdir()
    write(".gitignore", "generated/\n*_tmp.py\n")
    write("pyproject.toml", '[tool.lintloop]\nextend-exclude = ["vendored"]\n')
    for name in ("src/train.py", "generated/train.py", "src/x_tmp.py", "vendored/train.py",
                 ".venv/lib/train.py", "src/.ipynb_checkpoints/train-checkpoint.py", "src/notes.txt", "src/stub.pyi"):
        write(name, TORCH_LEAK)
    code, out, _ = run_cli("check", ".", "--format", "concise", "--no-cache", cwd=tmp_path)
    assert sorted({line.split(":")[0] for line in out.splitlines()}) == ["src/stub.pyi", "src/train.py"]
    code, out, _ = run_cli("check", "generated/train.py", "--format", "concise", "--no-cache")
    assert out.startswith("generated/train.py:7:5: LL301")  # named explicitly: always linted
    code, out, _ = run_cli("check", "vendored/train.py", "--force-exclude", "--no-cache")
    assert code == 0


def test_nested_gitignore_applies_to_its_subtree(run_cli, write, tmp_path):
    (tmp_path / ".git").mkdir()
    write("pkg/.gitignore", "skip.py\n")
    write("pkg/skip.py", TORCH_LEAK)
    write("skip.py", TORCH_LEAK)
    code, out, _ = run_cli("check", ".", "--format", "concise", "--no-cache", cwd=tmp_path)
    assert [line.split(":")[0] for line in out.splitlines()] == ["skip.py"]
