"""What choosing rules, passing over files that name no framework, and the test-code policy need without
importing the rules: each rule's code, name, family folder, kind, whether it is on by default, and its
frameworks. Generated from the rule classes (`python -m lintloop.rules.index` rewrites this file);
tests/test_catalog.py fails while it differs from them."""

from __future__ import annotations

from typing import NamedTuple


# The kinds of rule: a wrong result, wasted time or memory, or style (`lintloop rules`, column kind).
KINDS = ("bug", "perf", "hygiene")


class IndexEntry(NamedTuple):
    code: str
    name: str
    family: str
    kind: str
    default_on: bool
    frameworks: tuple[str, ...]  # of a rule that inspects code (a visitor); none for the engine's codes


# fmt: off
ENTRIES: tuple[IndexEntry, ...] = (
    IndexEntry('LL001', 'syntax-error', 'engine', 'bug', True, ()),
    IndexEntry('LL002', 'invalid-suppression', 'engine', 'hygiene', True, ()),
    IndexEntry('LL003', 'unused-suppression', 'engine', 'hygiene', False, ()),
    IndexEntry('LL004', 'not-analysed', 'engine', 'bug', True, ()),
    IndexEntry('LL101', 'numpy-in-gradient-tape', 'autodiff', 'bug', True, ('tf',)),
    IndexEntry('LL102', 'non-differentiable-before-loss', 'autodiff', 'bug', True, ('tf', 'pt')),
    IndexEntry('LL103', 'unwatched-tape-source', 'autodiff', 'bug', True, ('tf',)),
    IndexEntry('LL104', 'gradient-inside-tape', 'autodiff', 'perf', True, ('tf',)),
    IndexEntry('LL105', 'detached-before-loss', 'autodiff', 'bug', True, ('pt',)),
    IndexEntry('LL201', 'print-in-tf-function', 'compiled', 'bug', True, ('tf',)),
    IndexEntry('LL202', 'python-side-effect-in-tf-function', 'compiled', 'bug', True, ('tf',)),
    IndexEntry('LL203', 'train-step-not-compiled', 'compiled', 'perf', False, ('tf',)),
    IndexEntry('LL204', 'tf-function-in-loop', 'compiled', 'perf', True, ('tf',)),
    IndexEntry('LL205', 'python-scalar-retrace', 'compiled', 'perf', True, ('tf',)),
    IndexEntry('LL206', 'print-in-jit', 'compiled', 'bug', True, ('jax',)),
    IndexEntry('LL301', 'loss-tensor-accumulation', 'memory', 'bug', True, ('tf', 'pt')),
    IndexEntry('LL302', 'host-sync-every-step', 'memory', 'perf', False, ('tf', 'pt')),
    IndexEntry('LL303', 'retain-graph-in-loop', 'memory', 'perf', True, ('pt',)),
    IndexEntry('LL304', 'persistent-tape-in-loop', 'memory', 'perf', True, ('tf',)),
    IndexEntry('LL401', 'variable-outside-strategy-scope', 'distribution', 'bug', True, ('tf',)),
    IndexEntry('LL402', 'loss-reduction-under-strategy', 'distribution', 'bug', True, ('tf',)),
    IndexEntry('LL403', 'sampler-without-set-epoch', 'distribution', 'bug', True, ('pt',)),
    IndexEntry('LL404', 'ddp-module-forward', 'distribution', 'bug', True, ('pt',)),
    IndexEntry('LL501', 'dataset-without-prefetch', 'pipelines', 'perf', True, ('tf',)),
    IndexEntry('LL502', 'map-without-parallel-calls', 'pipelines', 'perf', True, ('tf',)),
    IndexEntry('LL503', 'shuffle-after-batch', 'pipelines', 'bug', True, ('tf',)),
    IndexEntry('LL504', 'cache-after-random-map', 'pipelines', 'bug', True, ('tf',)),
    IndexEntry('LL505', 'eval-loader-shuffled', 'pipelines', 'hygiene', False, ('pt',)),
    IndexEntry('LL601', 'float16-output-layer', 'mixed_precision', 'bug', True, ('tf',)),
    IndexEntry('LL602', 'custom-loop-without-loss-scaling', 'mixed_precision', 'bug', True, ('tf',)),
    IndexEntry('LL603', 'deprecated-cuda-amp', 'mixed_precision', 'hygiene', True, ('pt',)),
    IndexEntry('LL604', 'grad-scaler-misuse', 'mixed_precision', 'bug', True, ('pt',)),
    IndexEntry('LL605', 'float16-without-grad-scaler', 'mixed_precision', 'bug', True, ('pt',)),
    IndexEntry('LL701', 'missing-zero-grad', 'torch_loop', 'bug', True, ('pt',)),
    IndexEntry('LL702', 'accumulation-without-loss-scaling', 'torch_loop', 'bug', True, ('pt',)),
    IndexEntry('LL703', 'eval-without-no-grad', 'torch_loop', 'perf', True, ('pt',)),
    IndexEntry('LL704', 'missing-train-mode', 'torch_loop', 'bug', True, ('pt',)),
    IndexEntry('LL705', 'direct-forward-call', 'torch_loop', 'hygiene', True, ('pt',)),
    IndexEntry('LL706', 'step-order', 'torch_loop', 'bug', True, ('pt',)),
    IndexEntry('LL707', 'scheduler-before-optimizer-step', 'torch_loop', 'bug', True, ('pt',)),
    IndexEntry('LL708', 'softmax-into-cross-entropy', 'torch_loop', 'bug', True, ('pt', 'tf')),
    IndexEntry('LL709', 'logits-without-from-logits', 'torch_loop', 'bug', True, ('tf',)),
    IndexEntry('LL801', 'checkpoint-without-optimizer', 'checkpoints', 'bug', True, ('pt', 'tf')),
    IndexEntry('LL802', 'summary-without-default-writer', 'checkpoints', 'bug', True, ('tf',)),
    IndexEntry('LL803', 'check-numerics-under-xla', 'checkpoints', 'bug', True, ('tf',)),
    IndexEntry('LL901', 'prng-key-reuse', 'jax', 'bug', True, ('jax',)),
    IndexEntry('LL902', 'python-side-effect-in-jit', 'jax', 'bug', True, ('jax',)),
    IndexEntry('LL903', 'jit-in-loop', 'jax', 'perf', True, ('jax',)),
    IndexEntry('LL904', 'changing-static-argument', 'jax', 'perf', True, ('jax',)),
    IndexEntry('LL905', 'discarded-optimizer-state', 'jax', 'bug', True, ('jax',)),
)
# fmt: on


def render() -> str:
    """This file's text for the rule classes as they are now."""
    from lintloop.rules import ALL_RULES

    with open(__file__, encoding="utf-8") as handle:
        text = handle.read()
    head, _, rest = text.partition("ENTRIES: tuple[IndexEntry, ...] = (\n")
    _, _, tail = rest.partition(")\n# fmt: on\n")
    rows = "".join(f"    IndexEntry({rule.code!r}, {rule.name!r}, {rule.__module__.split('.')[-2]!r}, {rule.kind!r}, "
                   f"{rule.default_on!r}, {rule.frameworks if rule.has_visitor() else ()!r}),\n"
                   for rule in ALL_RULES)
    return f"{head}ENTRIES: tuple[IndexEntry, ...] = (\n{rows})\n# fmt: on\n{tail}"


if __name__ == "__main__":
    text = render()
    with open(__file__, "w", encoding="utf-8") as handle:
        handle.write(text)
