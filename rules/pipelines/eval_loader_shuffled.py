"""LL505 eval-loader-shuffled: the rule, its documentation and its examples."""

from __future__ import annotations

import re

import libcst as cst

from lintloop.analysis.nodes import argument, dotted, string_value
from lintloop.rule import Example, Rule
from lintloop.screen import Needs

_DATALOADERS = {"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"}
# Whole parts of a name (split on `_` and case) that mark an evaluation split.
_EVAL_PARTS = {"val", "valid", "validation", "test", "eval", "dev"}
_PARTS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def name_parts(name: str) -> list[str]:
    """`val_loader` -> ['val', 'loader']; `testDataLoader` -> ['test', 'data', 'loader']."""
    return [part.lower() for piece in name.split("_") for part in _PARTS.findall(piece)]


class EvalLoaderShuffled(Rule):
    code = "LL505"
    name = "eval-loader-shuffled"
    description = "a validation or test DataLoader with `shuffle=True`"
    frameworks = ("pt",)
    kind = "hygiene"
    default_on = False
    needs = Needs(file=(("text:shuffle",),), statement=(("name:DataLoader",),))
    summary = ("A `torch.utils.data.DataLoader` (any spelling) for validation or test data — the name or "
               "dict key it is bound to, returned from or passed as, split on `_` and case, has a part `val`, `valid`, "
               "`validation`, `test`, `eval` or `dev` — built with `shuffle=True`.")
    why = ("Evaluation visits every example once; the order changes nothing in an averaged metric but makes "
           "per-example outputs (saved predictions, the first batch shown in logs, per-batch metrics) come in a "
           "different order every epoch, so runs are not comparable and predictions no longer line up with the "
           "dataset's rows. With `drop_last=True` it is worse: a different subset is evaluated each time.")
    symptom = ("Nothing fails. LL505_bad.py prints where each epoch's validation pass starts: "
               "examples [248, 240, 254, 216, 211, 213] in epoch 0, [253, 218, 242, 193, 241, 209] in epoch 1; "
               "LL505_good.py visits [192, 193, 194, 195, 196, 197] in both.")
    remedy = "Build evaluation loaders with `shuffle=False` (the default)."
    flagged = (
        Example("""
from torch.utils.data import DataLoader
train_loader = DataLoader(train_ds, batch_size=32, shuffle=True)
val_loader = DataLoader(val_ds, batch_size=64, shuffle=True)
""", expect="""
3:56-3:60 evaluation DataLoader `val_loader` is built with `shuffle=True`
    help: use `shuffle=False`
    note: its order changes every epoch: per-example outputs stop lining up with the dataset, and runs
        stop being comparable
"""),
        Example("""
import torch
import pytorch_lightning as pl
class LitModel(pl.LightningModule):
    def test_dataloader(self):
        return torch.utils.data.DataLoader(self.test_set, batch_size=64, shuffle=True, num_workers=4)
""", expect="""
5:82-5:86 evaluation DataLoader `test_dataloader` is built with `shuffle=True`
    help: use `shuffle=False`
    note: its order changes every epoch: per-example outputs stop lining up with the dataset, and runs
        stop being comparable
"""),
        Example("""
from torch.utils import data
self.evalLoader = data.DataLoader(dev_set, 16, True)
trainer.fit(model, train_loader, val_dataloaders=data.DataLoader(valid_ds, shuffle=True))
""", expect="""
2:48-2:52 evaluation DataLoader `evalLoader` is built with `shuffle=True`
    help: use `shuffle=False`
    note: its order changes every epoch: per-example outputs stop lining up with the dataset, and runs
        stop being comparable
3:84-3:88 evaluation DataLoader `val_dataloaders` is built with `shuffle=True`
    help: use `shuffle=False`
    note: its order changes every epoch: per-example outputs stop lining up with the dataset, and runs
        stop being comparable
"""),
        Example("""
import torch
loaders = {"train": torch.utils.data.DataLoader(train_set, shuffle=True),
           "test": torch.utils.data.DataLoader(test_set, shuffle=True)}
loaders["val"] = torch.utils.data.DataLoader(val_set, shuffle=True)
""", expect="""
3:66-3:70 evaluation DataLoader `test` is built with `shuffle=True`
    help: use `shuffle=False`
    note: its order changes every epoch: per-example outputs stop lining up with the dataset, and runs
        stop being comparable
4:63-4:67 evaluation DataLoader `val` is built with `shuffle=True`
    help: use `shuffle=False`
    note: its order changes every epoch: per-example outputs stop lining up with the dataset, and runs
        stop being comparable
"""),
    )
    not_flagged = (
        Example("""
from torch.utils.data import DataLoader
trainval_loader = DataLoader(trainval_ds, batch_size=32, shuffle=True)
retrieval_loader = DataLoader(gallery, batch_size=32, shuffle=True)
"""),
        Example("""
from torch.utils.data import DataLoader
loaders = {split: DataLoader(sets[split], batch_size=32, shuffle=(split == "train")) for split in sets}
val_loader = DataLoader(val_ds, batch_size=32, shuffle=(split == "train"))
"""),
        Example("""
from torch.utils.data import DataLoader
val_loader = DataLoader(val_ds, batch_size=64, shuffle=False)
test_loader = DataLoader(test_ds, batch_size=64)
"""),
        Example("""
def DataLoader(data, shuffle=False):
    return iter(data)
import torch
val_loader = DataLoader(val_ds, shuffle=True)
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.names.callee(node) not in _DATALOADERS:
            return
        shuffle = argument(node, 2, "shuffle")
        if not (isinstance(shuffle, cst.Name) and shuffle.value == "True"):
            return
        name = self._bound_name(node)
        if name is not None and _EVAL_PARTS.intersection(name_parts(name)):
            shown = name if len(name) <= 40 else name[:39] + "…"
            self.report(shuffle, f"evaluation DataLoader `{shown}` is built with `shuffle=True`",
                        help="use `shuffle=False`",
                        note="its order changes every epoch: per-example outputs stop lining up with the dataset, "
                             "and runs stop being comparable")

    def _bound_name(self, call: cst.Call) -> str | None:
        """The name the loader is assigned to (last part of `self.val_loader`, the key of `loaders["val"]` or
        `{"val": ...}`), the function returning it (`val_dataloader`), or the keyword it is passed as
        (`val_dataloaders=`)."""
        parent = self.ctx.parents.get(call)
        if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
            target = self._target_name(parent.targets[0].target)
        elif isinstance(parent, cst.AnnAssign):
            target = self._target_name(parent.target)
        elif isinstance(parent, cst.DictElement) and parent.value is call:
            target = string_value(parent.key)
        elif isinstance(parent, cst.Arg) and parent.keyword is not None:
            target = parent.keyword.value
        elif isinstance(parent, cst.Return):
            scope = self.ctx.scope_of(call)
            target = scope.name.value if isinstance(scope, cst.FunctionDef) else None
        else:
            target = None
        return target.rsplit(".", 1)[-1] if target else None

    @staticmethod
    def _target_name(target: cst.BaseExpression) -> str | None:
        """`val_loader`, `self.val_loader`, or the key of `loaders["val"]`."""
        if isinstance(target, cst.Subscript) and len(target.slice) == 1:
            index = target.slice[0].slice
            return string_value(index.value) if isinstance(index, cst.Index) else None
        return dotted(target)
