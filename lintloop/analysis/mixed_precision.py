"""Keras mixed precision: the global dtype policy a file sets, loss-scale optimizers, scaled losses.

Measured (TF 2.21, Keras 3.15): `mixed_float16` computes in float16 (max 65,504, smallest subnormal
6e-8): small gradients underflow to zero unless the loss is scaled, and a softmax output saturates.
`mixed_bfloat16` has float32's exponent range: no scaling needed, no saturation. Keras 3 scales a loss
with `optimizer.scale_loss(loss)` (a `LossScaleOptimizer`, or any optimizer built with
`loss_scale_factor=`) and unscales inside `apply_gradients`; Keras 2's `get_scaled_loss` /
`get_unscaled_gradients` no longer exist in Keras 3. `Model.compile` wraps the optimizer in a
`LossScaleOptimizer` itself when the model's policy is `mixed_float16` (Keras 2 and 3).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from lintloop.analysis.base import Analysis, computed
from lintloop.analysis.nodes import argument, call_name, keyword_arg, read_name, receiver, string_value

# Canonical names (lintloop.analysis.names.canonical: tf.keras / tf_keras / keras.src → keras).
_POLICY_SETTERS = {
    "keras.mixed_precision.set_global_policy",        # Keras 2.4+ and Keras 3
    "keras.mixed_precision.set_dtype_policy",         # Keras 3
    "keras.config.set_dtype_policy",                  # Keras 3
    "keras.mixed_precision.experimental.set_policy",  # Keras 2 before TF 2.4
    "keras.mixed_precision.experimental.set_global_policy",
}
_POLICY_CONSTRUCTORS = {
    "keras.mixed_precision.Policy", "keras.mixed_precision.DTypePolicy", "keras.DTypePolicy",
    "keras.mixed_precision.experimental.Policy", "keras.dtype_policies.DTypePolicy",
}
# Compute dtype float16: gradients can underflow and outputs saturate. `mixed_bfloat16` is not here.
FLOAT16_POLICIES = frozenset({"mixed_float16", "float16"})
# TF 1-style rewrite: wraps the optimizer it is given with loss scaling.
_GRAPH_REWRITES = {
    "tensorflow.train.experimental.enable_mixed_precision_graph_rewrite",
    "tensorflow.compat.v1.train.experimental.enable_mixed_precision_graph_rewrite",
    "tensorflow.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite",
    "tensorflow.mixed_precision.experimental.enable_mixed_precision_graph_rewrite",
}
# Where plain optimizer classes live (`keras.optimizers.Adam`, `tf.compat.v1.train.AdamOptimizer`).
_OPTIMIZER_MODULES = ("keras.optimizers.", "tensorflow.compat.v1.train.", "tensorflow.train.")
# Method names that scale a loss before differentiation: Keras 3, Keras 2.
SCALE_LOSS_METHODS = ("scale_loss", "get_scaled_loss")


@dataclass(frozen=True)
class PolicySetting:
    """One call that sets the global Keras dtype policy."""

    call: cst.Call
    # The policy names it may set: one literal, both literal branches of `a if c else b`; empty
    # when the value is not visible in the file (a variable, a config field).
    names: frozenset[str]
    keras_major: int

    @property
    def float16(self) -> bool:
        """May set a float16 compute policy (`mixed_float16`, `float16`)."""
        return bool(self.names & FLOAT16_POLICIES)

    @property
    def label(self) -> str:
        return " or ".join(f'"{name}"' for name in sorted(self.names)) or "an unknown policy"


class MixedPrecision(Analysis):
    asks = frozenset({"calls", "definitions", "flow", "tf"})

    @computed
    def policy_settings(self) -> list[PolicySetting]:
        """Every call in the file that sets the global policy, in source order."""
        settings = []
        for call in self.ctx.nodes(cst.Call):
            callee = self.ctx.names.callee(call)
            if callee in _POLICY_SETTERS:
                value = argument(call, 0, "policy")
                names = self.policy_names(value, call) if value is not None else frozenset()
                # The `experimental` API existed only in Keras 2 (TF 2.1-2.8).
                major = 2 if ".experimental." in callee else self.ctx.tf.keras_major(call)
                settings.append(PolicySetting(call, names, major))
        return sorted(settings, key=lambda s: self.ctx.order[s.call])

    @computed
    def float16_policy(self) -> PolicySetting | None:
        """The first setting of a float16 global policy anywhere in the file (`mixed_float16`), if any;
        `float16_policy_for(node)` says whether one is in effect at a given place."""
        return next((s for s in self.policy_settings if s.float16), None)

    def float16_policy_for(self, node: cst.CSTNode) -> PolicySetting | None:
        """The float16 policy setting in effect where `node` runs, as far as the file shows: one in
        module code, or in a function that holds `node`, calls `node`'s function (through same-file
        calls), or constructs the class whose method holds `node` (`model = CustomModel(...)` for a
        `train_step` override). A setting in an unrelated function (another test case) does not count."""
        ctx = self.ctx
        functions = [a for a in ctx.ancestors(node) if isinstance(a, cst.FunctionDef)]
        classes = {a for a in ctx.ancestors(node) if isinstance(a, cst.ClassDef)}
        for setting in self.policy_settings:
            if not setting.float16:
                continue
            scope = ctx.scope_of(setting.call)
            if scope is ctx.module or scope in functions:
                return setting
            if any(fn in functions for fn in ctx.calls.called_functions(scope)):
                return setting
            definitions = ctx.definitions
            if classes and any(definitions.local_class(call.func) in classes for call in definitions.calls_in(scope)):
                return setting
        return None

    def policy_names(self, expr: cst.BaseExpression, at: cst.CSTNode) -> frozenset[str]:
        """Policy names `expr` evaluates to: `"mixed_float16"`, `Policy("mixed_float16")`, a name
        assigned one of these (every assignment it may see), either literal branch of a conditional;
        empty when not visible."""
        name = read_name(expr)
        if name is not None:
            bindings = self.ctx.flow.bindings_of(name, at)
            if bindings and all(b.value is not None and not b.augmented for b in bindings):
                return frozenset().union(*(self.policy_names(b.value, b.node) for b in bindings))
            return frozenset()
        if isinstance(expr, cst.IfExp):
            return self.policy_names(expr.body, at) | self.policy_names(expr.orelse, at)
        if isinstance(expr, cst.Call) and self.ctx.names.callee(expr) in _POLICY_CONSTRUCTORS:
            name = argument(expr, 0, "name")
            return self.policy_names(name, expr) if name is not None else frozenset()
        text = string_value(expr)
        return frozenset({text}) if text else frozenset()

    # ----- optimizers --------------------------------------------------------------------------
    def optimizer_scales_loss(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool | None:
        """Is the optimizer `expr` (at `at`) one that scales losses? True: a `LossScaleOptimizer`
        (any spelling, Keras 2 or 3), one built with `loss_scale_factor=`, or one wrapped by
        `enable_mixed_precision_graph_rewrite`; False: a plain Keras/TF optimizer constructed in
        this file; None: not visible (a function argument, `self.optimizer` set by `compile`, a
        project helper) — callers must not guess."""
        built = self.ctx.flow.constructed_by(expr, at)
        if built is None:
            return None
        call, name = built
        if name.rsplit(".", 1)[-1] == "LossScaleOptimizer" or name in _GRAPH_REWRITES:
            return True
        if name.startswith(_OPTIMIZER_MODULES) and name.rsplit(".", 1)[-1][:1].isupper():
            return keyword_arg(call, "loss_scale_factor") is not None
        return None

    # ----- scaled losses ---------------------------------------------------------------------------
    @computed
    def loss_scale_calls(self) -> list[cst.Call]:
        """`opt.scale_loss(loss)` (Keras 3) and `opt.get_scaled_loss(loss)` (Keras 2) calls."""
        return [c for c in self.ctx.nodes(cst.Call)
                if call_name(c) in SCALE_LOSS_METHODS and receiver(c) is not None]

    def scales_loss(self, node: cst.CSTNode) -> bool:
        """Does the function holding `node` (or module code), or a same-file function it calls, scale
        a loss with `scale_loss` / `get_scaled_loss`?"""
        ctx = self.ctx
        scope = ctx.scope_of(node)
        reached = {scope} | ctx.calls.called_functions(scope)
        return any(ctx.scope_of(call) in reached for call in self.loss_scale_calls)
