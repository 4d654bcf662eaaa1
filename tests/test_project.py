"""Cross-module questions (`ctx.project`): resolving names imported from other modules of the linted
project, the result cache's dependence on those modules, and the same findings with and without the
screen, the cache and workers."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from lintloop.analysis import FileContext
from lintloop.analysis.project import LintedFile, project_root
from lintloop.digests import ABSENT
from lintloop.cache import ResultCache
from lintloop.linter import lint_text
from lintloop.rule import RuleSet
from lintloop.rules import BY_CODE
from lintloop.runner import Job, run_job, run_jobs

FIXTURES = Path(__file__).parent / "fixtures"
CROSS = FIXTURES / "crossmodule"
CODES = ("LL101", "LL401")


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())


def context(path: Path) -> FileContext:
    text = path.read_text()
    return FileContext(cst.parse_module(text), file=LintedFile(str(path), text))


def resolved(path: Path, expression: str) -> str | None:
    """`module.function` that `expression` names in the file at `path`, or None."""
    function = context(path).project.function_of(cst.parse_expression(expression))
    return None if function is None else f"{function.module.name}.{function.name}"


LOSSES = """
    import numpy as np
    import tensorflow as tf

    def compute_loss(labels, predictions):
        return tf.reduce_mean(tf.square(labels - predictions.numpy()))
"""


@pytest.fixture
def package(tmp_path: Path) -> Path:
    write(tmp_path, {
        "pkg/__init__.py": "from .losses import compute_loss as exported_loss\n",
        "pkg/losses.py": LOSSES,
        "pkg/models.py": """
            import tensorflow as tf
            from tensorflow import keras

            def build_model():
                model = keras.Sequential([keras.layers.Dense(1)])
                return model

            def build_optimizer():
                return make()

            def make():
                return tf.keras.optimizers.Adam()
        """,
        "pkg/sub/__init__.py": "",
        "pkg/sub/train.py": """
            from .. import models
            from ..losses import compute_loss
            from pkg.models import build_model as absolute_build
            import pkg.losses
            from pkg import exported_loss
            from ...outside import nothing
        """,
    })
    return tmp_path


def test_root_is_above_the_outermost_package(package: Path) -> None:
    assert project_root(str(package / "pkg/sub/train.py")) == (str(package), ["pkg", "sub", "train"])
    assert project_root(str(package / "pkg/__init__.py")) == (str(package), ["pkg"])


@pytest.mark.parametrize("expression, expected", [
    ("compute_loss", "pkg.losses.compute_loss"),            # from ..losses import compute_loss
    ("models.build_model", "pkg.models.build_model"),       # from .. import models
    ("absolute_build", "pkg.models.build_model"),           # absolute import under the same root
    ("pkg.losses.compute_loss", "pkg.losses.compute_loss"),  # import pkg.losses
    ("exported_loss", "pkg.losses.compute_loss"),           # re-exported by pkg/__init__.py
    ("models.missing", None),
    ("nothing", None),                                      # a relative import above the root
    ("print", None),
])
def test_resolves_relative_absolute_and_reexported_names(package: Path, expression: str, expected: str | None) -> None:
    assert resolved(package / "pkg/sub/train.py", expression) == expected


def test_a_top_level_scripts_directory_is_a_root(tmp_path: Path) -> None:
    write(tmp_path, {"helpers.py": LOSSES, "train.py": "from helpers import compute_loss\nimport tensorflow\n"})
    assert resolved(tmp_path / "train.py", "compute_loss") == "helpers.compute_loss"
    assert resolved(tmp_path / "train.py", "tensorflow.reduce_mean") is None  # a library, not read


def test_import_cycles_and_bad_modules_resolve_to_nothing(tmp_path: Path) -> None:
    write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from .b import f\n",
        "pkg/b.py": "from .a import f\n",
        "pkg/broken.py": "def f(:\n",
        "pkg/binary.py": "",
        "pkg/train.py": "from .a import f\nfrom .broken import f as g\nfrom .gone import h\nfrom .binary import k\n",
    })
    (tmp_path / "pkg/binary.py").write_bytes(b"\xff\xfe\x00def k(): pass\x00")
    ctx = context(tmp_path / "pkg/train.py")
    for name in ("f", "g", "h", "k"):
        assert ctx.project.function_of(cst.parse_expression(name)) is None
    consulted = ctx.project.consulted
    assert consulted[str(tmp_path / "pkg/gone.py")] == ABSENT  # recorded: creating it changes the answer
    assert consulted[str(tmp_path / "pkg/broken.py")] != ABSENT


def test_questions_on_resolved_functions(package: Path) -> None:
    ctx = context(package / "pkg/sub/train.py")
    loss = ctx.project.function_of(cst.parse_expression("compute_loss"))
    conversion, holder = ctx.project.numpy_into_return(loss, {"predictions"})
    assert conversion.as_string() == "predictions.numpy()" and holder.where == "losses.py:4"
    assert ctx.project.numpy_into_return(loss, {"labels"}) is None  # labels are not converted
    built = ctx.project.returned_calls(ctx.project.function_of(cst.parse_expression("models.build_model")))
    assert [name for name, _, _ in built] == ["keras.Sequential"]
    through_helper = ctx.project.returned_calls(ctx.project.function_of(cst.parse_expression("models.build_optimizer")))
    assert [(name, holder.name) for name, _, holder in through_helper] == [("keras.optimizers.Adam", "make")]


def test_project_decorator_that_wraps_tf_function(tmp_path: Path) -> None:
    write(tmp_path, {
        "agents/__init__.py": "",
        "agents/common.py": """
            import tensorflow as tf

            def function(*args, **kwargs):
                kwargs.setdefault("autograph", False)
                return tf.function(*args, **kwargs)

            compiled = tf.function

            def plain(f):
                return f
        """,
        "agents/train.py": "from agents import common\n",
    })
    ctx = context(tmp_path / "agents/train.py")
    assert ctx.project.wraps_tf_function(cst.parse_expression("common.function"))
    assert ctx.project.wraps_tf_function(cst.parse_expression("common.compiled"))
    assert not ctx.project.wraps_tf_function(cst.parse_expression("common.plain"))


# ----- findings: the fixture package ------------------------------------------------------------

def lint_package(root: Path, screen: bool = True) -> list[tuple[str, int, str]]:
    ruleset = RuleSet([BY_CODE[c] for c in CODES], screen=screen)
    found = []
    for path in sorted(root.rglob("*.py")):
        result = lint_text(path.name, path.read_text(), ruleset, path=path)
        assert not result.errors
        found += [(f.path, f.line, f.code) for f in result.findings]
    return found


def test_cross_module_findings_with_and_without_the_screen() -> None:
    # The `.numpy()` is reported where it is, in losses.py, found through train_numpy_bad.py's call
    # under the tape (lintloop.project_view); the model is built outside the scope in the script.
    expected = [("losses.py", 8, "LL101"), ("train_scope_bad.py", 31, "LL401")]
    assert lint_package(CROSS) == expected
    assert lint_package(CROSS, screen=False) == expected


def test_without_a_path_nothing_is_resolved() -> None:
    text = (CROSS / "train_numpy_bad.py").read_text()
    assert lint_text("train_numpy_bad.py", text, RuleSet([BY_CODE["LL101"]])).findings == []


def jobs(root: Path, cache_dir: Path | None) -> list[Job]:
    return [Job(str(p), p.name, CODES, "{}", "check", cache_dir=str(cache_dir) if cache_dir else None)
            for p in sorted(root.rglob("*.py"))]


def findings_of(results) -> list[tuple[str, int, str]]:
    return [(f.path, f.line, f.code) for r in results for f in r.findings]


def test_same_findings_with_two_workers() -> None:
    assert findings_of(run_jobs(jobs(CROSS, None), 2)) == findings_of(run_jobs(jobs(CROSS, None), 1))


def test_cached_finding_is_recomputed_when_the_other_module_changes(tmp_path: Path) -> None:
    root = tmp_path / "project"
    shutil.copytree(CROSS, root / "crossmodule", ignore=shutil.ignore_patterns("__pycache__"))
    cache = ResultCache.open(tmp_path)
    train = root / "crossmodule" / "train_numpy_bad.py"
    losses = root / "crossmodule" / "losses.py"

    def run() -> list[str]:
        result = run_job(Job(str(train), "train.py", CODES, "{}", "check", cache_dir=str(cache.directory)))
        return [f.code for f in result.findings]

    assert run() == ["LL101"]
    (entry,) = cache.directory.glob("??/*.json")
    assert [str(losses)] == [path for path, _ in json.loads(entry.read_text())["depends"] if path == str(losses)]
    assert run() == ["LL101"]  # a hit
    original = losses.read_text()
    losses.write_text(original.replace("np.clip(predictions.numpy(),", "tf.clip_by_value(predictions,"))
    assert run() == []  # the helper no longer leaves TensorFlow: the entry is stale
    losses.write_text(original)
    assert run() == ["LL101"]
    losses.unlink()
    assert run() == []  # the module is gone


def test_a_project_module_is_parsed_without_astroid_importing_other_modules(tmp_path: Path) -> None:
    import astroid

    from lintloop.analysis.project import _parse

    data = b"import json\njson.decoder.scanstring = None\n\ndef helper(x):\n    return x\n"
    module = _parse(str(tmp_path / "m.py"), data, [], "m")
    assert module is not None and module.tree.body[-1].name == "helper"
    # astroid's own `json.decoder.x = ...` resolution would have built the json package.
    assert "json.decoder" not in astroid.MANAGER.astroid_cache
    assert astroid.MANAGER.module_denylist == set()  # restored for any other user of astroid


# ----- the torch a project declares (LL603) -------------------------------------------------------

AMP_STEP = """
import torch
scaler = torch.cuda.amp.GradScaler()
for x, y in loader:
    with torch.cuda.amp.autocast():
        loss = model(x).sum()
    scaler.scale(loss).backward()
"""


@pytest.mark.parametrize("declaration, silent", [
    ({"requirements.txt": "timm==0.3.2\ntorch==1.7.0\ntorchvision==0.8.1\n"}, True),
    ({"requirements.txt": "torch>=1.6,<1.9\n"}, True),
    ({"pyproject.toml": '[project]\nname = "p"\ndependencies = ["torch~=2.3.0"]\n'}, True),
    ({"environment.yml": "dependencies:\n  - pytorch=1.8.1\n  - cudatoolkit=11.1\n"}, True),
    ({"../setup.py": "setup(install_requires=['torch<=2.3.1'])\n"}, True),  # a folder above the project's root
    ({"requirements.txt": "torch>=1.7\ntorchvision\n"}, False),
    ({"requirements.txt": "torch==2.4.0\n"}, False),
    ({"requirements.txt": "pytorch-lightning==1.2\ntorchvision==0.8.1\n"}, False),
    ({"settings.ini": "[DEFAULT]\nlib_name = miniai\nrequirements = torch>=1.7,<2.1 fastcore\n"}, True),  # nbdev's
    ({}, False),
])
def test_the_old_amp_spelling_is_current_where_the_project_declares_only_older_torch(tmp_path, declaration, silent):
    project = tmp_path / "repo" / "project"
    write(project, {"engine.py": AMP_STEP, **declaration})
    path = project / "engine.py"
    result = lint_text("engine.py", path.read_text(), RuleSet([BY_CODE["LL603"]]), path=path)
    assert (not result.findings) is silent, [f.message for f in result.findings]
    # The answer depends on every file looked for: a cached result is recomputed when one changes.
    assert str(project / "requirements.txt") in result.dependencies
    assert str(tmp_path / "repo" / "setup.py") in result.dependencies


@pytest.mark.parametrize("files, silent", [
    ({"utils.py": "from torch._six import inf\n", "engine.py": "import utils\n" + AMP_STEP}, True),
    ({"utils.py": "import torch._six\n", "engine.py": "from utils import clip\n" + AMP_STEP}, True),
    ({"engine.py": "from torch._six import inf\n" + AMP_STEP}, True),
    ({"engine.py": "from torch import _six\n" + AMP_STEP}, True),
    ({"utils.py": "from torch import _six\n", "engine.py": "import utils\n" + AMP_STEP}, True),
    ({"engine.py": "import torch._six\nclass Scaler:\n    def __init__(self):\n"
                   "        self.scaler = torch.cuda.amp.GradScaler()\n"}, True),
    ({"utils.py": "from math import inf\n", "engine.py": "import utils\n" + AMP_STEP}, False),
    ({"utils.py": "from torch._six import inf\n", "engine.py": AMP_STEP}, False),  # a module it does not import
])
def test_code_importing_a_module_torch_2_removed_runs_on_older_torch(tmp_path, files, silent):
    write(tmp_path, files)
    path = tmp_path / "engine.py"
    for screen in (True, False):  # the same answer whether the file is parsed whole or only its screened code
        result = lint_text("engine.py", path.read_text(), RuleSet([BY_CODE["LL603"]], screen=screen), path=path)
        assert (not result.findings) is silent, [f.message for f in result.findings]
    if "import utils" in files["engine.py"]:
        assert str(tmp_path / "utils.py") in result.dependencies  # an edit of it recomputes the answer


def test_a_package_module_sees_the_requirements_above_its_package(tmp_path):
    write(tmp_path, {"requirements.txt": "torch==1.8.1\n", "src/pkg/__init__.py": "", "src/pkg/engine.py": AMP_STEP})
    path = tmp_path / "src/pkg/engine.py"
    assert lint_text("engine.py", path.read_text(), RuleSet([BY_CODE["LL603"]]), path=path).findings == []
