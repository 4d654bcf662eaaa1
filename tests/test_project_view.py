"""The project view (lintloop.project_view): a module linted with the definitions it imports from
its project written in, so that its findings do not depend on how the program was split into
modules; a finding on a definition brought in is reported in its own module, once."""

from __future__ import annotations

import ast
import json
import os
import re
import textwrap
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from lintloop.cache import listing_digest
from lintloop.cli import main
from lintloop.line_pattern import LinePattern
from lintloop.linter import lint_text
from lintloop.project_view import _named_modules, imported_definitions, project_view
from lintloop.rule import RuleSet
from lintloop.rules import BY_CODE

LOSSES = """
    import tensorflow as tf

    def compute_loss(labels, predictions):
        return tf.reduce_mean(tf.square(labels - predictions.numpy()))
"""
MODEL = """
    import torch.nn as nn
    import torch.nn.functional as F

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(784, 10)

        def forward(self, x):
            return F.softmax(self.fc(x), dim=1)
"""
LOOP = """
    import torch.nn as nn

    def train(model, loader, optimizer):
        criterion = nn.CrossEntropyLoss()
        for x, y in loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
"""
SCRIPT = """
    import torch
    from models import Net
    from loop import train

    model = Net()
    train(model, loader, torch.optim.SGD(model.parameters(), lr=0.1))
"""


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).write_text(textwrap.dedent(text).lstrip())


def view_of(path: Path):
    text = path.read_text()
    return project_view(text, str(path), ast.parse(text))


def lint(path: Path, *codes: str) -> list[tuple[str, int, str]]:
    result = lint_text(path.name, path.read_text(), RuleSet([BY_CODE[c] for c in codes]), path=path)
    assert not result.errors
    return [(f.path, f.line, f.code) for f in result.findings]


def test_a_model_class_from_another_module_is_the_model_the_loop_trains(tmp_path):
    write(tmp_path, {"models.py": """
        from torch import nn

        class SmallNet(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))

            def forward(self, x):
                return self.layers(x)
    """, "train.py": """
        import torch
        from torch import nn
        from models import SmallNet

        def train_one_epoch(model, loader, optimizer, criterion):
            running = 0
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                running += loss
            return running / len(loader)

        net = SmallNet()
        for epoch in range(epochs):
            print(epoch, train_one_epoch(net, train_loader, optimizer, nn.CrossEntropyLoss()))
    """})
    # The class the loop trains comes from models.py; what an accumulated loss keeps is the step's saved
    # activations whatever the model's size, so LL301 reports it with either module.
    assert lint(tmp_path / "train.py", "LL301") == [("train.py", 12, "LL301")]
    write(tmp_path, {"models.py": MODEL_OF_UNKNOWN_SIZE})
    assert lint(tmp_path / "train.py", "LL301") == [("train.py", 12, "LL301")]


MODEL_OF_UNKNOWN_SIZE = """
    from torch import nn

    def SmallNet():
        return build_backbone("resnet50")
"""


def test_the_view_keeps_each_line_where_it_came_from(tmp_path):
    write(tmp_path, {"models.py": MODEL, "loop.py": LOOP, "main.py": SCRIPT})
    text = (tmp_path / "main.py").read_text()
    view = project_view(text, str(tmp_path / "main.py"), ast.parse(text))
    assert view is not None and set(view.dependencies) == {str(tmp_path / "models.py"), str(tmp_path / "loop.py")}
    lines = view.text.splitlines()
    for number, line in enumerate(lines, 1):
        path, origin = view.origin(number)
        source = text if path is None else Path(path).read_text()
        # The imports of what was brought in are left blank (their definitions now bind the names).
        assert line == source.splitlines()[origin - 1] or (path is None and line == "" and "import" in source.splitlines()[origin - 1])
    # What was brought in: the class and the function, with the imports they read; nothing else.
    assert "class Net(nn.Module):" in view.text and "def train(model, loader, optimizer):" in view.text


def test_a_finding_in_another_module_names_the_calling_file_and_carries_no_fix(tmp_path):
    write(tmp_path, {
        "losses.py": LOSSES,
        "train.py": """
            import tensorflow as tf
            from losses import compute_loss

            for x, y in dataset:
                with tf.GradientTape() as tape:
                    loss = compute_loss(y, model(x))
                grads = tape.gradient(loss, model.trainable_variables)
        """,
    })
    result = lint_text("src/train.py", (tmp_path / "train.py").read_text(), RuleSet([BY_CODE["LL101"]]),
                       path=tmp_path / "train.py")
    [finding] = result.findings
    assert (finding.path, finding.line, finding.fix) == ("src/losses.py", 4, None)
    assert "at line 6 of train.py" in finding.note  # the call under the tape
    assert str(tmp_path / "losses.py") in result.dependencies


def test_a_suppression_comment_in_the_other_module_applies(tmp_path):
    write(tmp_path, {"models.py": MODEL, "main.py": SCRIPT,
                     "loop.py": LOOP.replace("loss = criterion(model(x), y)",
                                             "loss = criterion(model(x), y)  # lintloop: ignore[LL708]")})
    assert lint(tmp_path / "main.py", "LL708") == []


def test_a_fix_on_the_linted_module_keeps_its_own_lines(tmp_path):
    write(tmp_path, {
        "helpers.py": """
            import torch

            def log_every(step, loss):
                if step % 100 == 0:
                    print(step, float(loss))
        """,
        "main.py": """
            import torch
            from helpers import log_every

            with torch.cuda.amp.autocast():
                out = model(x)
        """,
    })
    result = lint_text("main.py", (tmp_path / "main.py").read_text(), RuleSet([BY_CODE["LL603"]]),
                       path=tmp_path / "main.py")
    [finding] = result.findings
    assert (finding.path, finding.line) == ("main.py", 4) and finding.fix is not None
    assert {(e.line, e.end_line) for e in finding.fix.edits} == {(4, 4)}


def test_no_view_where_a_name_brought_in_would_change_the_module(tmp_path):
    write(tmp_path, {
        "helpers.py": """
            import torch
            scale = 2.0

            def train(model, loader):
                for x in loader:
                    (model(x).sum() * scale).backward()
        """,
        "main.py": """
            from helpers import train
            scale = "the script's own"
            train(model, loader)
        """,
    })
    assert view_of(tmp_path / "main.py") is None
    write(tmp_path, {"main.py": "from helpers import train\ntrain(model, loader)\n"})
    view = view_of(tmp_path / "main.py")
    assert view is not None and "scale = 2.0" in view.text


def test_a_finding_two_scripts_bring_to_light_is_reported_once(tmp_path, capsys):
    script = """
        import tensorflow as tf
        from losses import compute_loss

        for x, y in dataset:
            with tf.GradientTape() as tape:
                loss = compute_loss(y, model(x))
            grads = tape.gradient(loss, model.trainable_variables)
    """
    write(tmp_path, {"losses.py": LOSSES, "train.py": script, "finetune.py": script.replace("dataset", "small")})
    main(["check", "--no-cache", "--select", "LL101", "--format", "json", str(tmp_path)])
    found = [(Path(f["path"]).name, f["line"]) for f in json.loads(capsys.readouterr().out)]
    assert found == [("losses.py", 4)]


def test_a_function_imported_and_called_elsewhere_is_judged_with_its_callers_arguments(tmp_path):
    loop = """
        def train_loop(model, loader, optimizer, scaler):
            for x, y in loader:
                optimizer.zero_grad()
                scaler.scale(model(x).sum()).backward()
                optimizer.step()
    """
    write(tmp_path, {"loop.py": loop, "main.py": """
        import torch
        from loop import train_loop
        scaler = torch.amp.GradScaler("cuda", enabled=False)
        train_loop(model, loader, optimizer, scaler)
    """})
    # Alone, `scaler` could be any scaler; the only caller passes a disabled one, which scales nothing.
    assert lint(tmp_path / "loop.py", "LL604") == [] and lint(tmp_path / "main.py", "LL604") == []
    write(tmp_path, {"main.py": """
        import torch
        from loop import train_loop
        train_loop(model, loader, optimizer, torch.amp.GradScaler("cuda"))
    """})
    # An enabled scaler: the caller's view confirms the finding (the script's own text holds no scaler
    # step, so no rule of this run may fire on it: it is not read with its imports).
    assert lint(tmp_path / "loop.py", "LL604") == [("loop.py", 5, "LL604")]
    # A caller added beside it is a module the cached answer depends on.
    result = lint_text("loop.py", (tmp_path / "loop.py").read_text(), RuleSet([BY_CODE["LL604"]]),
                       path=tmp_path / "loop.py")
    assert str(tmp_path) in result.dependencies and str(tmp_path / "main.py") in result.dependencies


def test_a_module_in_a_folder_not_made_yet_has_no_callers(tmp_path):
    # A notebook's `%%writefile going_modular/engine.py`: linted at a path whose folder does not exist.
    text = "import torch\n\ndef train(model, loader):\n    for x in loader:\n        model(x).sum().backward()\n"
    result = lint_text("nb.ipynb", text, RuleSet([BY_CODE["LL702"]]), path=tmp_path / "missing" / "engine.py")
    assert not result.errors


def test_a_helper_its_module_calls_is_judged_with_every_caller_the_importer_brings(tmp_path):
    write(tmp_path, {"helpers.py": """
        import tensorflow as tf

        def log_metrics(loss):
            print("loss", loss)

        @tf.function
        def train_step(x):
            loss = tf.reduce_mean(x)
            log_metrics(loss)
            return loss
    """, "main.py": """
        import tensorflow as tf
        from helpers import log_metrics, train_step
        for x in batches:
            log_metrics(train_step(x))
    """})
    # helpers.py alone sees `log_metrics` called only while tracing; the script also calls it eagerly
    # every step, where its print is meant: the print is not flagged, from either module.
    assert lint(tmp_path / "main.py", "LL201") == [] and lint(tmp_path / "helpers.py", "LL201") == []
    write(tmp_path, {"main.py": """
        import tensorflow as tf
        from helpers import train_step
        for x in batches:
            train_step(x)
    """})
    assert lint(tmp_path / "helpers.py", "LL201") == [("helpers.py", 4, "LL201")]


def test_a_module_assigning_what_an_imported_function_returns_is_a_program(tmp_path):
    write(tmp_path, {"helpers.py": """
        from jax import random

        def augment(images, rng=random.key(42)):
            flips = random.bernoulli(rng, 0.5, (images.shape[0],))
            return images.at[flips].set(images[flips, :, ::-1])
    """, "main.py": """
        from helpers import augment
        train_x = augment(train_x)
        val_x = augment(val_x)
    """, "library.py": """
        from helpers import augment
        LIMIT = max(1, 2)
    """})
    assert imported_definitions((tmp_path / "main.py").read_text(), str(tmp_path / "main.py")) is not None
    # A module that assigns what a builtin returns runs no project code at its top level.
    assert imported_definitions((tmp_path / "library.py").read_text(), str(tmp_path / "library.py")) is None
    # The program names no framework: the pre-check brings the helper's own `from jax import random`.
    assert [(Path(p).name, line, code) for p, line, code in lint(tmp_path / "main.py", "LL901")] == [
        ("helpers.py", 3, "LL901")]


def test_a_compiled_function_of_an_imported_one_makes_a_program(tmp_path):
    write(tmp_path, {"helpers.py": """
        def step(x):
            print("step input", x)
            return x + 1
    """, "main.py": """
        import tensorflow as tf
        from helpers import step
        fast_step = tf.function(step)
    """})
    assert [(Path(p).name, line, code) for p, line, code in lint(tmp_path / "main.py", "LL201")] == [
        ("helpers.py", 2, "LL201")]


def test_the_pre_check_brings_the_functions_an_imported_definition_calls_beside_it(tmp_path):
    write(tmp_path, {"helpers.py": """
        import tensorflow as tf

        @tf.function
        def augment(images, seed):
            return tf.image.stateless_random_flip_left_right(images, seed=[seed, 0])

        def prepare(images, seed):
            return augment(images, seed)
    """, "main.py": """
        import tensorflow as tf
        from helpers import prepare
        for epoch in range(100):
            batch = prepare(images, epoch)
    """})
    program = imported_definitions((tmp_path / "main.py").read_text(), str(tmp_path / "main.py"))
    assert "@tf.function" in program and "def prepare" in program  # the screen sees the traced function
    assert [(Path(p).name, code) for p, _, code in lint(tmp_path / "main.py", "LL205")] == [("helpers.py", "LL205")]


def test_a_module_that_trains_a_model_class_imported_from_another_is_judged_with_it(tmp_path):
    write(tmp_path, {"models.py": MODEL, "train.py": """
        import torch
        from torch import nn
        from models import Net

        def train(loader):
            model = Net()
            criterion = nn.CrossEntropyLoss()
            for x, y in loader:
                criterion(model(x), y).backward()
    """})
    # `train.py` runs nothing at its top level, and alone could hold no LL708 finding (no softmax in it).
    assert imported_definitions((tmp_path / "train.py").read_text(), str(tmp_path / "train.py")) is not None
    assert [(Path(p).name, code) for p, _, code in lint(tmp_path / "train.py", "LL708")] == [("train.py", "LL708")]


# ----- the importers of a module, found in linear time ---------------------------------------------

def _mention(stem: bytes):
    """How `importers` tells that a module names `stem` (what its directory index must agree with)."""
    escaped = re.escape(stem)
    return LinePattern(rb"from[ \t]+(?:[\w.]*\b" + escaped + rb"[ \t]+import\b|\.[ \t]+import\b[^\n]*\b" + escaped + rb")")


_IMPORT_PIECES = st.sampled_from(["a", "b", "_", "1", ".", " ", "\t", "é", "模", ",", "(", "#", "import", "from",
                                  "\n", "ab", "a_b", "x.a", " as ", "*"])
_STEMS = st.sampled_from(["a", "b", "ab", "a_b", "é", "aé", "éa", "模", "a模", "_", "b1", "x", "import"])


@settings(max_examples=400, deadline=None)
@given(lines=st.lists(st.one_of(
    st.builds(lambda module, rest: f"from {module} import{rest}", st.text(
        st.sampled_from(["a", "b", ".", "é", "模", "_", "1", "x"]), min_size=1, max_size=6),
        st.lists(_IMPORT_PIECES, max_size=6).map("".join)),
    st.builds(lambda rest: f"from . import{rest}", st.lists(_IMPORT_PIECES, max_size=8).map("".join)),
    st.lists(_IMPORT_PIECES, max_size=8).map("".join)), min_size=1, max_size=4),
    stems=st.sets(_STEMS, min_size=1))
def test_the_directory_index_names_the_modules_a_line_names(lines, stems):
    data = "\n".join(lines).encode()
    encoded = frozenset(stem.encode() for stem in stems)
    prefixes = {stem[:end] for stem in encoded for end in range(1, len(stem) + 1)}
    named = _named_modules(data, encoded, prefixes)
    assert {stem for stem in encoded if _mention(stem).search(data)} == named


def _package(root: Path, modules: int) -> list[Path]:
    """`modules` modules in one folder, each calling a train step the next one defines (a finding each)."""
    paths = []
    for index in range(modules):
        following = (index + 1) % modules
        path = root / f"step_{index}.py"
        path.write_text(f"import torch\nfrom step_{following} import train_{following}\n\n\n"
                        f"def train_{index}(model, loader, optimizer):\n    for x, y in loader:\n"
                        f"        loss = model(x).sum()\n        loss.backward()\n        optimizer.step()\n"
                        f"    train_{following}(model, loader, optimizer)\n")
        paths.append(path)
    return paths


def test_a_run_reads_each_module_of_a_folder_once_however_many_ask_for_their_importers(tmp_path, monkeypatch):
    """Each module of a folder of 1,000 was read for each of them (0.93 M reads, quadratic): now once for
    the folder's index, then the importers found and what their views bring in."""
    import lintloop.cache
    import lintloop.project_view as module_view

    reads = []
    monkeypatch.setattr(module_view, "read_module", lambda path, limit: reads.append(path) or lintloop.cache.read_module(path, limit))
    monkeypatch.setattr(lintloop.cache, "_RUN_READS", {})  # as in a worker of a run (read_once_per_run)
    counts = {}
    for count in (10, 100):
        folder = tmp_path / str(count)
        folder.mkdir()
        paths = _package(folder, count)
        reads.clear()
        found = {path.name: [Path(i.path).name for i in module_view.importers(str(path))] for path in paths}
        assert found["step_1.py"] == ["step_0.py"] and found["step_0.py"] == [f"step_{count - 1}.py"]
        counts[count] = len(reads)  # the index's, each importer's, and the modules its view brings in
    assert counts[100] == 10 * counts[10], counts
    assert listing_digest(str(tmp_path / "10")) == listing_digest(str(tmp_path / "10"))


def test_without_a_run_every_answer_is_read_afresh(tmp_path):
    """A language server's worker lives on while files change: nothing is kept between its requests."""
    from lintloop.project_view import importers

    first, second = _package(tmp_path, 2)
    assert [Path(i.path).name for i in importers(str(second))] == ["step_0.py"]
    first.write_text("import torch\n")
    assert importers(str(second)) == []


def test_a_module_no_import_can_name_has_no_importers(tmp_path):
    (tmp_path / "my-utils.py").write_text("def train(model):\n    model.step()\n")
    (tmp_path / "main.py").write_text("from my-utils import train\n")
    (tmp_path / "\udcff.py".encode("utf-8", "surrogateescape").decode("utf-8", "surrogateescape")).write_bytes(b"")
    from lintloop.project_view import importers

    assert importers(str(tmp_path / "my-utils.py")) == []
    assert importers(os.fsdecode(os.path.join(os.fsencode(tmp_path), b"\xff.py"))) == []  # a name's undecodable bytes
