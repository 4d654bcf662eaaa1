"""TensorFlow contexts: gradient tapes and their `gradient` calls, `tf.function`-traced code, Keras versions."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.base import Analysis, computed
from lintloop.analysis.contexts import WithBlocks, WithContext
from lintloop.analysis.syntax import argument, call_name, receiver, string_value

_TAPES = {"tensorflow.GradientTape", "tensorflow.autodiff.GradientTape"}
# Functions handed to these run eagerly, even when called from a graph.
_EAGER_WRAPPERS = {"tensorflow.py_function", "tensorflow.numpy_function", "tensorflow.compat.v1.py_func"}


class TensorFlow(Analysis):
    # ----- tapes -----------------------------------------------------------------------------
    @computed
    def tapes(self) -> WithBlocks:
        return WithBlocks(self.ctx, "tape", lambda call: self.ctx.names.callee(call) in _TAPES)

    def tape_of(self, name: str, at: cst.CSTNode) -> WithContext | None:
        """The `with tf.GradientTape() as name:` (or `with name:`) block that `name` refers to at `at`:
        the last one opened before `at` in the same function."""
        ctx = self.ctx
        scope = ctx.scope_of(at)
        candidates = [c for c in self.tapes.contexts if c.alias == name
                      and ctx.scope_of(c.block) is scope and ctx.order[c.block] < ctx.order[at]]
        return max(candidates, key=lambda c: ctx.order[c.block]) if candidates else None

    @computed
    def gradient_calls(self) -> list[tuple[cst.Call, WithContext]]:
        """`tape.gradient(target, sources)` calls with the tape block they belong to."""
        found = []
        for call in self.ctx.nodes(cst.Call):
            tape_name = receiver(call)
            if call_name(call) == "gradient" and isinstance(tape_name, cst.Name):
                tape = self.tape_of(tape_name.value, call)
                if tape is not None:
                    found.append((call, tape))
        return found

    # ----- traced code -------------------------------------------------------------------------
    @computed
    def compiled_functions(self) -> set[cst.FunctionDef]:
        """Functions that TensorFlow traces: `@tf.function` (any spelling) or wrapped by `tf.function(f)`."""
        names = self.ctx.names
        compiled: set[cst.FunctionDef] = set()
        for fn in self.ctx.nodes(cst.FunctionDef):
            for decorator in fn.decorators:
                target = decorator.decorator
                if isinstance(target, cst.Call) and names.callee(target) == "functools.partial" and target.args:
                    target = target.args[0].value  # @functools.partial(tf.function, jit_compile=True)
                target = target.func if isinstance(target, cst.Call) else target
                if names.qualname(target) == "tensorflow.function":
                    compiled.add(fn)
        for call in self.ctx.nodes(cst.Call):
            if names.callee(call) == "tensorflow.function":
                compiled.update(self.ctx.calls.local_functions(call))
        return compiled

    @computed
    def eager_callbacks(self) -> set[cst.FunctionDef]:
        """Functions handed to `tf.py_function` / `tf.numpy_function`: they run eagerly even in a graph."""
        eager: set[cst.FunctionDef] = set()
        for call in self.ctx.nodes(cst.Call):
            if self.ctx.names.callee(call) in _EAGER_WRAPPERS:
                func = argument(call, 0, "func")
                if func is not None:
                    eager.update(self.ctx.calls.local_functions(func))
        return eager

    def compiled_function_of(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        """The tf.function that traces `node`, if any (nested defs inside one are traced too)."""
        for ancestor in self.ctx.ancestors(node):
            if ancestor in self.eager_callbacks:
                return None
            if ancestor in self.compiled_functions:
                return ancestor
        return None

    # ----- Keras versions ------------------------------------------------------------------------
    def keras_major(self, constructor: cst.Call) -> int:
        """2 for a Keras object built from `tf_keras`, or from `tf.keras` in a file that sets
        TF_USE_LEGACY_KERAS (tf.keras is then Keras 2); else 3 (TF 2.16+)."""
        raw = self.ctx.names.raw_qualname(constructor.func) or ""
        if raw.startswith("tf_keras."):
            return 2
        if raw.startswith("tensorflow.") and self.sets_legacy_keras:
            return 2
        return 3

    @computed
    def sets_legacy_keras(self) -> bool:
        return any(string_value(s) == "TF_USE_LEGACY_KERAS" for s in self.ctx.nodes(cst.SimpleString))
