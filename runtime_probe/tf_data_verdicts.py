"""tf.data verdicts: batches shuffled instead of examples (LL503), augmentation frozen by a cache (LL504).

The events come from the bootstrap's `tf_data` module (see its docstring for what it reads and when).
"""

from __future__ import annotations

from typing import Any

from lintloop.runtime_probe.verdicts import Summary, _confirmed, _not_confirmed, _where


def shuffle_after_batch(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    looked = "batches of a shuffle, in two passes, equal to batches of its unshuffled input"
    for event in summary.of_type("shuffled_batches"):
        size = int(event.get("batch_size") or 0)
        epochs = event.get("epochs") or []
        matched = [[(pos, k, rows) for pos, k, rows in epoch if k is not None] for epoch in epochs]
        checked = sum(len(epoch) for epoch in epochs)
        found = sum(len(epoch) for epoch in matched)
        if len(epochs) < 2 or not checked or found < checked or not all(matched):
            continue
        examples = [f"batch {pos} of epoch {e} = examples {k * size}..{k * size + rows - 1}, in order"
                    for e, epoch in enumerate(matched, 1) for pos, k, rows in epoch[:2]]
        orders = [[k for _, k, _ in epoch] for epoch in matched]
        text = (f"every batch the shuffle at line {event.get('line')} gave in two passes ({found} batches) is one "
                f"batch of its input unchanged — {size} consecutive examples in their order: "
                f"{'; '.join(examples)}; only the batch order changes (input batches {orders[0]} then {orders[1]})")
        return _confirmed("shuffled_batches", text=text, batch_size=size, buffer_size=event.get("buffer_size"),
                          batch_orders=orders, **_where(event))
    return _not_confirmed(summary, looked)


def cache_after_random_map(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    looked = "a random map (two calls, different values) whose cached output is identical in two passes"
    for event in summary.of_type("cached_random_map"):
        if not event.get("random") or not event.get("identical"):
            continue
        digests = event.get("epoch_digests") or []
        text = (f"the map at line {event.get('map_line')} returns different values for the same example on two "
                f"calls, but the cache at line {event.get('line')} returned identical elements in two passes "
                f"(first {min(8, int(event.get('elements') or 0))} of {event.get('elements')} elements, digest "
                f"{digests[0] if digests else '?'} both times): the augmentation is frozen after the first epoch")
        evidence = {"text": text, "elements": event.get("elements"), "epoch_digests": digests,
                    "map_line": event.get("map_line"), **_where(event)}
        return _confirmed("cached_random_map", **evidence)
    return _not_confirmed(summary, looked)


VERDICTS = {"LL503": shuffle_after_batch, "LL504": cache_after_random_map}
