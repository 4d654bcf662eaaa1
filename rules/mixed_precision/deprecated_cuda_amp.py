"""LL603 deprecated-cuda-amp: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.pytorch import DEPRECATED_AMP, NEW_AMP
from lintloop.analysis.nodes import walk
from lintloop.rule import Example, FixSpec, Replacement, Rule
from lintloop.screen import Needs

# The old autocast constructors take (enabled, dtype, cache_enabled); `torch.autocast` takes
# (device_type, dtype, enabled, cache_enabled): positional arguments become keywords.
_OLD_AUTOCAST_POSITIONS = ("enabled", "dtype", "cache_enabled")

# The release that deprecated the old spellings: a project that declares only older torch runs them as
# the current API (its `torch.autocast` may not even exist: it came in 1.10).
DEPRECATED_IN = (2, 4)

# Parents of a name that do not read it as a value: `x.autocast`, `def autocast(...)`, `autocast = ...`.
_NOT_A_READ = (cst.Attribute, cst.Param, cst.FunctionDef, cst.ClassDef, cst.AssignTarget)


class DeprecatedCudaAmp(Rule):
    code = "LL603"
    name = "deprecated-cuda-amp"
    description = "deprecated `torch.cuda.amp` / `torch.cpu.amp` spellings"
    frameworks = ("pt",)
    kind = "hygiene"
    needs = Needs(statement=(("name:amp",), ("name:autocast", "name:GradScaler")))
    fix_kind = "safe"
    probe = "error (warning)"
    summary = ("`torch.cuda.amp.autocast(...)`, `torch.cuda.amp.GradScaler(...)`, `torch.cpu.amp.autocast(...)` "
               "and `torch.cpu.amp.GradScaler(...)`, however imported (`from torch.cuda.amp import autocast`, "
               "`from torch.cuda import amp`), called, used as a decorator or passed on "
               "(`partial(torch.cuda.amp.autocast, ...)`): deprecated since torch 2.4; use "
               "`torch.autocast(\"cuda\", ...)` and `torch.amp.GradScaler(\"cuda\", ...)`. The old spelling as the "
               "fallback of the new one, for older torch (the other branch of an `if` on the version, an "
               "`except` after a `try` that uses or imports the new one), is left alone; so is a project that declares "
               "only torch older than 2.4 (`torch==1.7.0` in a requirements.txt, pyproject.toml, setup.py, setup.cfg "
               "or conda environment.yml, or nbdev's settings.ini, of its root or a folder up to four above) or whose code "
               "imports a module torch 2.0 removed (`from torch._six import inf`, in the file or a project module it "
               "imports), where the old spelling is the current one.")
    why = ("The `torch.cuda.amp` / `torch.cpu.amp` constructors are thin deprecated subclasses of "
           "`torch.amp.autocast` / `torch.amp.GradScaler`; every call emits a FutureWarning, and they are "
           "slated for removal.")
    symptom = ("Measured with torch 2.13, each call warns: \"FutureWarning: `torch.cuda.amp.autocast(args...)` "
               "is deprecated. Please use `torch.amp.autocast('cuda', args...)` instead.\" and \"FutureWarning: "
               "`torch.cuda.amp.GradScaler(args...)` is deprecated. Please use `torch.amp.GradScaler('cuda', "
               "args...)` instead.\" (the same for `torch.cpu.amp.autocast` / `torch.cpu.amp.GradScaler` with "
               "'cpu'): once per call site under the default warning filters, at every call (every training "
               "step, for an autocast in the loop) under `-W always`.")
    remedy = ("`torch.cuda.amp.autocast(...)` -> `torch.autocast(\"cuda\", ...)`; `torch.cuda.amp.GradScaler(...)` -> "
              "`torch.amp.GradScaler(\"cuda\", ...)`; `torch.cpu.amp.*` likewise with \"cpu\". Old positional "
              "autocast arguments become keywords (`enabled=`, `dtype=`, `cache_enabled=`): the new constructor "
              "takes `dtype` second.")
    fix_safety = ("Safe: the new call builds the same object with the same arguments (positional autocast "
                  "arguments are rewritten as keywords; GradScaler's keep their positions after the device). Where "
                  "the old autocast passed `dtype=float16` (bfloat16 on CPU) and `cache_enabled=True` by default, "
                  "`torch.autocast` reads `torch.get_autocast_dtype(device)` and `torch.is_autocast_cache_enabled()`: "
                  "the same values unless the program changes them with `torch.set_autocast_dtype` / "
                  "`torch.set_autocast_cache_enabled`. No fix when the call passes `*args` to autocast, or when the "
                  "file does not bind `torch` (or `torch.amp`) to a name: the replacement would name an unbound "
                  "module, nor for a constructor passed on uncalled. The now-unused `from torch.cuda.amp import ...` is "
                  "left in place.")
    flagged = (
        Example("""
import torch
scaler = torch.cuda.amp.GradScaler(enabled=args.fp16)
for x, y in loader:
    with torch.cuda.amp.autocast(enabled=args.fp16):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""", expect="""
2:10-2:54 [safe fix] `torch.cuda.amp.GradScaler(...)` is deprecated
    help: use `torch.amp.GradScaler("cuda", ...)`
    note: it emits a FutureWarning at every call
4:10-4:52 [safe fix] `torch.cuda.amp.autocast(...)` is deprecated
    help: use `torch.autocast("cuda", ...)`
    note: it emits a FutureWarning at every call
""", fix_diff="""
@@ -2 +2 @@
-scaler = torch.cuda.amp.GradScaler(enabled=args.fp16)
+scaler = torch.amp.GradScaler("cuda", enabled=args.fp16)
@@ -4 +4 @@
-    with torch.cuda.amp.autocast(enabled=args.fp16):
+    with torch.autocast("cuda", enabled=args.fp16):
"""),
        Example("""
import torch
from torch.cuda.amp import autocast, GradScaler
scaler = GradScaler(init_scale=1024)
with autocast(dtype=torch.bfloat16):
    out = model(x)
""", expect="""
3:10-3:37 [safe fix] `torch.cuda.amp.GradScaler(...)` is deprecated
    help: use `torch.amp.GradScaler("cuda", ...)`
    note: it emits a FutureWarning at every call
4:6-4:36 [safe fix] `torch.cuda.amp.autocast(...)` is deprecated
    help: use `torch.autocast("cuda", ...)`
    note: it emits a FutureWarning at every call
""", fix_diff="""
@@ -3,2 +3,2 @@
-scaler = GradScaler(init_scale=1024)
-with autocast(dtype=torch.bfloat16):
+scaler = torch.amp.GradScaler("cuda", init_scale=1024)
+with torch.autocast("cuda", dtype=torch.bfloat16):
"""),
        Example("""
import torch
from torch.cuda import amp
class Net(torch.nn.Module):
    @amp.autocast()
    def forward(self, x):
        return self.body(x)
""", expect="""
4:6-4:20 [safe fix] `torch.cuda.amp.autocast(...)` is deprecated
    help: use `torch.autocast("cuda", ...)`
    note: it emits a FutureWarning at every call
""", fix_diff="""
@@ -4 +4 @@
-    @amp.autocast()
+    @torch.autocast("cuda")
"""),
        Example("""
import torch.nn as nn
from torch.cpu.amp import autocast
with autocast():
    y = model(x)
""", expect="""
3:6-3:16 `torch.cpu.amp.autocast(...)` is deprecated
    help: use `torch.autocast("cpu", ...)`
    note: it emits a FutureWarning at every call; no automatic fix: this file binds no name to `torch`;
        add `import torch`
"""),
        Example("""
import contextlib
import functools
import torch
amp_ctx = functools.partial(torch.cuda.amp.autocast, dtype=torch.float16) if args.amp else contextlib.nullcontext
with amp_ctx():
    loss = model(x).mean()
""", expect="""
4:29-4:52 `torch.cuda.amp.autocast` is deprecated
    help: call `torch.autocast("cuda", ...)` instead
    note: it emits a FutureWarning at every call; no automatic fix for a reference
"""),
        Example("""
import torch
try:
    from torch.cuda.amp import GradScaler
except ImportError:
    from torch.amp import GradScaler
scaler = GradScaler(enabled=use_amp)
""", expect="""
6:10-6:37 [safe fix] `torch.cuda.amp.GradScaler(...)` is deprecated
    help: use `torch.amp.GradScaler("cuda", ...)`
    note: it emits a FutureWarning at every call
""", fix_diff="""
@@ -6 +6 @@
-scaler = GradScaler(enabled=use_amp)
+scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
"""),
    )
    not_flagged = (
        Example("""
import torch
scaler = torch.amp.GradScaler("cuda", enabled=args.fp16)
with torch.autocast("cuda", enabled=args.fp16):
    loss = criterion(model(x), y)
"""),
        Example("""
import torch
from torch.amp import autocast, GradScaler
scaler = GradScaler()
with autocast(device_type="cuda", dtype=torch.float16):
    out = model(x)
"""),
        Example("""
import torch
from contextlib import nullcontext
def autocast(enabled=True):
    return nullcontext()
with autocast():
    out = model(x)
amp = torch.cuda.amp
"""),
        Example("""
import torch
from lightning.fabric.utilities.imports import _TORCH_GREATER_EQUAL_2_4
scaler = torch.amp.GradScaler("cuda") if _TORCH_GREATER_EQUAL_2_4 else torch.cuda.amp.GradScaler()
"""),
        Example("""
import torch
def autocast(enabled=True, device="cuda"):
    if TORCH_1_13:
        return torch.amp.autocast(device, enabled=enabled)
    else:
        return torch.cuda.amp.autocast(enabled)
try:
    amp_autocast = torch.autocast
except AttributeError:
    amp_autocast = torch.cuda.amp.autocast
"""),
        Example("""
import torch
try:
    from torch.amp import GradScaler
except ImportError:
    from torch.cuda.amp import GradScaler
scaler = GradScaler("cuda", enabled=use_amp)
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        qualname = self.ctx.names.callee(node)
        if qualname not in DEPRECATED_AMP or self._fallback(node) or self._current_where_declared():
            return
        kind, device = DEPRECATED_AMP[qualname]
        old = f"torch.{device}.amp.{kind}"
        new = f"torch.autocast(\"{device}\", ...)" if kind == "autocast" else f"torch.amp.GradScaler(\"{device}\", ...)"
        message = f"`{old}(...)` is deprecated"
        warning = "it emits a FutureWarning at every call"
        replacement, missing = self._replacement(node, kind, device)
        if replacement is None:
            self.report(node, message, help=f"use `{new}`", note=f"{warning}; no automatic fix: {missing}")
            return
        self.report(node, message, FixSpec("safe", [Replacement(node, replacement)], f"use `{new}`"),
                    help=f"use `{new}`", note=warning)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._check_reference(node)

    def visit_Name(self, node: cst.Name) -> None:
        self._check_reference(node)

    def _fallback(self, node: cst.CSTNode) -> bool:
        """The old API as the fallback beside the new one, for torch versions without it:
        `torch.amp.GradScaler(...) if TORCH_2_4 else torch.cuda.amp.GradScaler()`, the other branch of an
        `if`, or the `except AttributeError:` of a `try` that uses the new API (never run on torch 2.4+)."""
        previous = node
        for ancestor in self.ctx.ancestors(node):
            if isinstance(ancestor, (cst.IfExp, cst.If)):
                other = ancestor.orelse if previous is ancestor.body else (
                    ancestor.body if previous is ancestor.orelse else None)
                if other is not None and self._uses_new_api(other):
                    return True
            elif isinstance(ancestor, cst.Try) and previous in ancestor.handlers \
                    and self._uses_new_api(ancestor.body):
                return True
            previous = ancestor
        return False

    def _current_where_declared(self) -> bool:
        """The project declares only torch older than the deprecation: there the old spelling is current."""
        return self.ctx.project.torch_pinned_below(DEPRECATED_IN)

    def _uses_new_api(self, node: cst.CSTNode) -> bool:
        return any(isinstance(n, (cst.Attribute, cst.Name)) and self.ctx.names.qualname(n) in NEW_AMP for n in walk(node))

    def _check_reference(self, node: cst.Attribute | cst.Name) -> None:
        """`ctx = torch.cuda.amp.autocast if amp else nullcontext`, `partial(autocast, enabled=amp)`: the
        constructor passed on, called elsewhere (reported without a fix: the call site is not here)."""
        qualname = self.ctx.names.qualname(node)
        if qualname not in DEPRECATED_AMP or self._fallback(node) or self._current_where_declared():
            return
        parent = self.ctx.parents.get(node)
        if (isinstance(parent, cst.Call) and parent.func is node or isinstance(parent, _NOT_A_READ)
                or isinstance(parent, cst.Arg) and parent.keyword is node
                or any(isinstance(a, (cst.Import, cst.ImportFrom)) for a in self.ctx.ancestors(node))
                or isinstance(node, cst.Name) and self.ctx.flow.bindings_of(node.value, node, before=False)):
            return  # not a read of the import (a name the file also binds is left alone)
        kind, device = DEPRECATED_AMP[qualname]
        new = "torch.autocast" if kind == "autocast" else "torch.amp.GradScaler"
        self.report(node, f"`torch.{device}.amp.{kind}` is deprecated", help=f"call `{new}(\"{device}\", ...)` instead",
                    note="it emits a FutureWarning at every call; no automatic fix for a reference")

    def _replacement(self, call: cst.Call, kind: str, device: str) -> tuple[str | None, str]:
        """The new call's code, or None and why there is none."""
        torch_name = self.ctx.names.alias_of("torch")
        amp_name = self.ctx.names.alias_of("torch.amp")
        if torch_name is not None:
            func = f"{torch_name}.autocast" if kind == "autocast" else f"{torch_name}.amp.GradScaler"
        elif amp_name is not None:
            func = f"{amp_name}.{kind}"
        else:
            return None, "this file binds no name to `torch`; add `import torch`"
        args = list(call.args)
        if kind == "autocast":
            if any(a.star == "*" for a in args):
                return None, "`*args` cannot be mapped to the new argument order"
            args = [self._as_keyword(a, _OLD_AUTOCAST_POSITIONS[i]) if a.keyword is None and not a.star and
                    i < len(_OLD_AUTOCAST_POSITIONS) else a for i, a in enumerate(args)]
        device_arg = cst.Arg(cst.SimpleString(f'"{device}"'),
                             comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")) if args else
                             cst.MaybeSentinel.DEFAULT)
        new_call = call.with_changes(func=cst.parse_expression(func), args=[device_arg, *args])
        return self.ctx.module.code_for_node(new_call), ""

    @staticmethod
    def _as_keyword(arg: cst.Arg, keyword: str) -> cst.Arg:
        return arg.with_changes(keyword=cst.Name(keyword), equal=cst.AssignEqual(
            whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))
