"""tf.data: what a consumed pipeline does to its examples (LL503 shuffle-after-batch, LL504
cache-after-random-map).

`Dataset.shuffle`, `.cache`, `.map` and `.batch` remember the user's line that called them.
The first time a dataset is iterated eagerly (`for x in ds`, `iter(ds)`), its lineage (the
`_input_dataset` links from the consumed dataset back to its source) is read once:

- a `shuffle` whose input elements are batches (a batch before it, no unbatch / flat_map /
  interleave / window between, no batch after it up to the consumed end): the batched input's
  first `buffer + 8` batches (at most 256) are hashed; then two fresh passes ("epochs") over the
  shuffle take 8 batches each, and each is looked up among the input's batches. A batch equal to
  input batch k holds examples k*b .. k*b+b-1 in their order. Event `shuffled_batches`.
- a memory `cache()` with a `map` before it (up to 4 maps back, before any earlier cache): each
  map's traced function is called twice on its first input element (different outputs: it draws
  random numbers); if one is random and the cache holds at most 4,096 elements, two passes over
  the cache (the first fills it, as the first epoch does) and digests of their first 8 elements.
  Event `cached_random_map`.

Cost: nothing per element or step; the checks run once per consumed dataset with the pattern,
reading a bounded number of elements (the cache check: one full pass of the cached dataset).
"""
import hashlib
import weakref

from .events import emit, probe_error
from .frames import user_site

_SAMPLE = 8
_MAX_INPUT_BATCHES = 256
_MAX_CACHED = 4096
_MAX_MAPS = 4
_REGROUPING = ("Unbatch", "FlatMap", "Interleave", "Window")

_sites = weakref.WeakKeyDictionary()   # dataset returned by shuffle/cache/map -> (file, line)
_checked = weakref.WeakKeyDictionary()
_busy = [False]


def install(tf):
    """Wrap `tf.data.Dataset.shuffle`, `.cache`, `.map`, `.batch` (their user line) and `__iter__` (the checks)."""
    from tensorflow.python.data.ops import dataset_ops

    cls = dataset_ops.DatasetV2
    for name in ("shuffle", "cache", "map", "batch"):
        setattr(cls, name, _remember_site(getattr(cls, name)))
    cls.__iter__ = _wrap_iter(cls.__iter__, tf)


def _remember_site(original):
    def method(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        try:
            _sites[result] = user_site(2)
        except TypeError:
            pass
        return result

    method.__wrapped__ = original
    method.__name__ = original.__name__
    method.__doc__ = original.__doc__
    return method


def _wrap_iter(original, tf):
    def __iter__(self):
        if not _busy[0] and tf.executing_eagerly():
            try:
                fresh = self not in _checked
                _checked[self] = True
            except TypeError:
                fresh = False
            if fresh:
                _busy[0] = True
                try:
                    _inspect(tf, self, original)
                except Exception as err:
                    probe_error("tf_data", err)
                finally:
                    _busy[0] = False
        return original(self)

    __iter__.__wrapped__ = original
    return __iter__


def _lineage(dataset, limit=64):
    chain = []
    while dataset is not None and len(chain) < limit:
        chain.append(dataset)
        dataset = getattr(dataset, "_input_dataset", None)
    return chain


def _kind(dataset):
    name = type(dataset).__name__
    if any(word in name for word in _REGROUPING):
        return "regroup"
    if "Shuffle" in name:
        return "shuffle"
    if "Batch" in name:
        return "batch"
    if "Cache" in name:
        return "cache"
    if "Map" in name and hasattr(dataset, "_map_func"):
        return "map"
    return "other"


def _inspect(tf, dataset, iterate):
    chain = _lineage(dataset)
    kinds = [_kind(d) for d in chain]
    shuffle = _shuffle_of_batches(kinds)
    if shuffle is not None:
        _check_shuffled_batches(tf, chain[shuffle[0]], chain[shuffle[1]], iterate)
    for i, kind in enumerate(kinds):
        if kind == "cache":
            _check_cache(tf, chain, kinds, i, iterate)


def _shuffle_of_batches(kinds):
    """(shuffle index, batch index) in the lineage (consumed end first) when the shuffled elements are
    batches that nothing batches again before they are consumed."""
    for i, kind in enumerate(kinds):
        if kind == "batch":
            return None
        if kind == "shuffle":
            for j in range(i + 1, len(kinds)):
                if kinds[j] == "regroup":
                    return None
                if kinds[j] == "batch":
                    return i, j
            return None
    return None


def _digest(tf, element):
    h = hashlib.blake2b(digest_size=8)
    for part in tf.nest.flatten(element):
        value = part.numpy() if hasattr(part, "numpy") else part
        h.update(str(getattr(value, "shape", "")).encode())
        h.update(value.tobytes() if hasattr(value, "tobytes") else repr(value).encode())
    return h.hexdigest()


def _take(dataset, iterate, count):
    out = []
    iterator = iterate(dataset)
    for element in iterator:
        out.append(element)
        if len(out) >= count:
            break
    return out


def _rows(tf, element):
    first = tf.nest.flatten(element)[0]
    shape = getattr(first, "shape", None)
    return int(shape[0]) if shape is not None and len(shape) else 1


def _check_shuffled_batches(tf, shuffle, batch, iterate):
    batch_size = int(batch._batch_size)
    buffer_size = int(shuffle._buffer_size)
    count = min(max(buffer_size, 0) + _SAMPLE, _MAX_INPUT_BATCHES)
    index = {}
    for k, element in enumerate(_take(shuffle._input_dataset, iterate, count)):
        index.setdefault(_digest(tf, element), k)
    epochs = []
    for _ in range(2):
        seen = []
        for position, element in enumerate(_take(shuffle, iterate, _SAMPLE)):
            seen.append([position, index.get(_digest(tf, element)), _rows(tf, element)])
        epochs.append(seen)
    file, line = _sites.get(shuffle, (None, None))
    emit({"type": "shuffled_batches", "batch_size": batch_size, "buffer_size": buffer_size,
          "input_batches_hashed": len(index), "epochs": epochs,
          "batch_line": _sites.get(batch, (None, None))[1], "file": file, "line": line})


def _check_cache(tf, chain, kinds, at, iterate):
    cache = chain[at]
    filename = getattr(cache, "_filename", None)
    if filename is not None and bytes(filename.numpy() if hasattr(filename, "numpy") else filename):
        return  # a file cache: our passes would write the user's file
    maps = []
    for j in range(at + 1, len(chain)):
        if kinds[j] == "cache" or len(maps) >= _MAX_MAPS:
            break
        if kinds[j] == "map":
            maps.append(chain[j])
    if not maps:
        return
    random_map = next((m for m in maps if _draws_random(tf, m, iterate)), None)
    file, line = _sites.get(cache, (None, None))
    event = {"type": "cached_random_map", "maps_checked": len(maps), "random": random_map is not None,
             "map_line": _sites.get(random_map, (None, None))[1] if random_map is not None else None,
             "file": file, "line": line}
    if random_map is not None:
        size = int(cache.cardinality())
        event["elements"] = size
        if 0 <= size <= _MAX_CACHED:
            first = [_digest(tf, e) for e in _take(cache, iterate, size + 1)[:_SAMPLE]]
            second = [_digest(tf, e) for e in _take(cache, iterate, _SAMPLE)]
            event["epoch_digests"] = [_combined(first), _combined(second)]
            event["identical"] = first == second
        else:
            event["skipped"] = "cache size unknown or above 4096 elements"
    emit(event)


def _combined(digests):
    return hashlib.blake2b("".join(digests).encode(), digest_size=8).hexdigest()


def _draws_random(tf, dataset, iterate):
    """Does the map's traced function return different values for the same input on two calls?"""
    function = getattr(getattr(dataset, "_map_func", None), "function", None)
    if function is None:
        return False
    inputs = _take(dataset._input_dataset, iterate, 1)
    if not inputs:
        return False
    flat = tf.nest.flatten(inputs[0])
    try:
        first, second = function(*flat), function(*flat)
    except Exception:
        return False
    return _digest(tf, first) != _digest(tf, second)
