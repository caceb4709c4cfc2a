"""Dask arrays in, Dask arrays out: the one row-blockwise wrapper every estimator uses.

A method decorated with :func:`dask_rows` keeps its normal behaviour for NumPy/CuPy
input; given a Dask array chunked by rows (or, for images, along the batch axis) it
returns a lazy Dask array built with ``map_blocks``: each block runs the method on a
worker, on whatever array type the chunks hold (NumPy or CuPy, as on a
``dask_cuda.LocalCUDACluster``), and the result's ``meta`` has that same type. Empty
row blocks are skipped (they give empty results, never an error). A Dask array split
along the feature axis is refused with a message that says how to rechunk: each row
needs all its features at once.

Row blocks too small to pay for a task are merged first (:func:`merge_rows`): adjacent
blocks, order kept, to about :func:`block_bytes` each, so the results are those of the
blocks as given (and of one in-memory call); the environment variable
``SKNN_GPU_DASK_BLOCK_BYTES`` sets the target, ``0`` keeps the blocks as given.

Importing this module never imports Dask.
"""

from __future__ import annotations

import functools
import math
import os
import sys
import warnings

import numpy as np

__all__ = [
    "is_dask_collection",
    "dask_rows",
    "check_row_chunks",
    "row_blocks",
    "tree_reduce",
    "SPLIT_EVERY",
    "BLOCK_BYTES",
    "BLOCK_BYTES_ENV",
    "block_bytes",
    "merged_row_chunks",
    "merge_rows",
    "LAZY_MERGE_BYTES",
    "device_of",
    "shared",
]

#: partial results combined per task of the reduction trees (:func:`tree_reduce`)
SPLIT_EVERY = 8


#: Input bytes per row block that amortise one task, by where the block is computed:
#: smaller adjacent blocks are merged up to about this size (:func:`merge_rows`).
#: PROVISIONAL, until measured on the GPU: a task costs a few milliseconds of scheduling,
#: transfer and per-call checks, and a GPU works through 3-14 GB/s of input in our
#: estimators (GBNN probes at the low end, FlyHash rows at the high end), so blocks of
#: 1 GiB keep that cost near 5 %; NumPy engines are 50-100x slower per byte, so 64 MiB
#: does the same on a CPU core.
BLOCK_BYTES = {"cuda": 1 << 30, "cpu": 64 << 20}

#: Environment variable that overrides :data:`BLOCK_BYTES` (bytes per block, for both
#: devices; ``0``, ``off`` or ``keep`` keep the row blocks exactly as given).
BLOCK_BYTES_ENV = "SKNN_GPU_DASK_BLOCK_BYTES"

_warned = set()


def _warn_once(key, message):
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, UserWarning, stacklevel=4)


def block_bytes(device):
    """Target input bytes of one row block computed on ``device`` (``'cuda'`` or ``'cpu'``);
    0 when the blocks are to be kept as given (:data:`BLOCK_BYTES_ENV` set to 0)."""
    raw = os.environ.get(BLOCK_BYTES_ENV, "").strip().lower()
    if not raw:
        return BLOCK_BYTES["cuda" if device == "cuda" else "cpu"]
    if raw in ("0", "off", "keep", "none", "false", "no"):
        return 0
    try:
        value = int(float(raw))
    except ValueError:
        raise ValueError(
            f"{BLOCK_BYTES_ENV}={raw!r}: expected a number of bytes per Dask block (e.g. 268435456), "
            "or 0 to keep the blocks as given."
        ) from None
    return max(value, 0)


def merged_row_chunks(chunks, row_bytes, target, parallel=1):
    """Row chunks with adjacent ``chunks`` merged to about ``target`` bytes each.

    The number of merged blocks is rounded up to a multiple of ``parallel`` (the task
    slots of the cluster) and their edges are the input's block edges nearest to equal
    shares, so every slot gets the same work; blocks are never split, and nothing
    changes unless the count of non-empty blocks falls. Order is kept.
    """
    chunks = tuple(int(c) for c in chunks)
    total = sum(chunks)
    nonempty = sum(1 for c in chunks if c)
    if target <= 0 or len(chunks) <= 1:
        return chunks
    per_block = max(1, int(target // max(int(row_bytes), 1)))
    n = max(1, math.ceil(total / per_block))
    n = math.ceil(n / max(1, int(parallel))) * max(1, int(parallel))
    if n >= nonempty:  # the blocks are large enough already
        return chunks
    edges = np.cumsum(chunks)[:-1]  # inner edges of the given blocks
    cut = []
    for k in range(1, n):
        want = k * total / n
        i = int(np.searchsorted(edges, want))  # the nearest inner edge to an equal share
        best = min((j for j in (i - 1, i) if 0 <= j < len(edges)), key=lambda j: abs(edges[j] - want))
        cut.append(int(edges[best]))
    bounds = sorted({0, total, *(c for c in cut if 0 < c < total)})
    out = tuple(b - a for a, b in zip(bounds[:-1], bounds[1:], strict=True))
    return out if out else chunks


#: On a cluster of several workers, row blocks not yet computed (read from files, made by
#: tasks) merge only when they hold at most this many bytes: a merged block's pieces may be
#: made on different workers and one of them then receives the others, and moving a block
#: of a few MiB costs about what a task does. Blocks already in the workers' memory merge
#: only with their neighbours on the same worker, and then at any size.
LAZY_MERGE_BYTES = 8 << 20


def _client():
    """The current ``distributed`` client, or None (never imports ``distributed``)."""
    dist = sys.modules.get("distributed")
    if dist is None:
        return None
    try:
        return dist.default_client()
    except Exception:  # no client
        return None


def _parallel_slots(client=None):
    """Task threads of the workers of ``client`` (the current one by default; 1 without one)."""
    client = client or _client()
    if client is None:
        return 1
    try:
        return max(1, sum(client.nthreads().values()))
    except Exception:  # it cannot answer now: plan for one slot
        return 1


def _n_workers(client):
    if client is None:
        return 1
    try:
        return len(client.nthreads())
    except Exception:
        return 1


def _first_key(keys):
    while isinstance(keys, list):
        keys = keys[0]
    return keys


def _block_holders(X, client):
    """Per row block of ``X``: the address of the one worker that holds it in memory, or None
    (not computed yet, or made of pieces from several workers)."""
    from distributed import Future, futures_of

    futures = futures_of(X)
    if not futures:
        return [None] * X.numblocks[0]
    try:
        who = client.who_has(futures)
    except Exception:
        return [None] * X.numblocks[0]
    graph = dict(X.__dask_graph__())
    out = []
    for keys in X.__dask_keys__():
        key = _first_key(keys)
        for _ in range(8):  # follow aliases (a concatenation of persisted blocks) to the data
            node = graph.get(key)
            if isinstance(node, Future):
                key = node.key
                break
            if key in who or node is None:
                break
            if isinstance(node, tuple) and node in graph or node in who:
                key = node
                continue
            deps = getattr(node, "dependencies", None)
            if deps is None or len(deps) != 1:
                break
            key = next(iter(deps))
        holders = who.get(key) or ()
        out.append(holders[0] if len(holders) == 1 else None)
    return out


def _merge_runs(chunks, labels, row_bytes, target, parallel, lazy_ok):
    """Merged row chunks where only adjacent blocks of one label merge (a worker's address for
    blocks in memory; None for blocks not computed, which merge only when ``lazy_ok``)."""
    out, run, run_label = [], [], object()

    def flush():
        if run:
            mergeable = run_label is not None or lazy_ok
            slots = parallel if run_label is None else 1
            out.extend(merged_row_chunks(run, row_bytes, target, slots) if mergeable else run)

    for c, label in zip(chunks, labels, strict=True):
        if c == 0 and run:  # an empty block goes with its neighbour
            run.append(c)
            continue
        if not run or label != run_label:
            flush()
            run, run_label = [], label
        run.append(c)
    flush()
    return tuple(out)


def device_of(est):
    """Where ``est`` computes its blocks: its resolved ``device_``, else its ``device``
    parameter (``'auto'`` resolved here, on the client)."""
    device = getattr(est, "device_", None) or getattr(est, "device", None)
    if device == "auto":
        from ._backend import resolve_device

        device = resolve_device("auto")
    return device


def _is_dense(meta):
    return type(meta).__module__.split(".", 1)[0] in ("numpy", "cupy") and hasattr(meta, "strides")


def merge_rows(X, device=None, sample_axes=1):
    """``X`` with its row blocks (along axis 0) merged to about :func:`block_bytes` each.

    Adjacent blocks only and in order (``X.rechunk`` along the rows), so every result
    computed from it is the one of ``X`` as given. The target is that of ``'cuda'`` when
    ``device`` is ``'cuda'`` or the blocks are CuPy arrays, else that of ``'cpu'``.
    On a cluster of several workers, merging must not move data: blocks already in the
    workers' memory merge only with neighbours held by the same worker, and blocks not
    computed yet (read from files, made by tasks) only when they hold at most
    :data:`LAZY_MERGE_BYTES` (their pieces may be made on different workers).
    ``X`` comes back unchanged when its blocks are large enough, when the environment
    variable :data:`BLOCK_BYTES_ENV` is 0, or (with one warning per process) when its
    row block sizes are unknown or its blocks are sparse matrices.
    """
    if sample_axes != 1 or X.ndim < 1 or X.numblocks[0] <= 1:
        return X
    meta = getattr(X, "_meta", None)
    gpu = device == "cuda" or type(meta).__module__.split(".", 1)[0] == "cupy"
    target = block_bytes("cuda" if gpu else "cpu")
    if target == 0:
        return X
    if any(math.isnan(c) for c in X.chunks[0]):
        _warn_once(
            "nan",
            "The Dask array's row block sizes are unknown (nan), so its small blocks cannot be merged "
            "into blocks that pay for a task; call X.compute_chunk_sizes() first (or set "
            f"{BLOCK_BYTES_ENV}=0 to silence this).",
        )
        return X
    if meta is not None and not _is_dense(meta):
        _warn_once(
            "sparse",
            f"Dask blocks of {type(meta).__name__} are used as given: sknn_gpu merges small row blocks "
            "of dense arrays only. Blocks of a few thousand rows cost more in scheduling than in "
            f"work; rechunk the rows yourself (or set {BLOCK_BYTES_ENV}=0 to silence this).",
        )
        return X
    row_bytes = X.dtype.itemsize * math.prod(int(d) for d in X.shape[1:])
    given = tuple(int(c) for c in X.chunks[0])
    client = _client()
    slots, workers = _parallel_slots(client), _n_workers(client)
    if workers <= 1:  # one process holds every block: nothing moves when blocks merge
        chunks = merged_row_chunks(given, row_bytes, target, slots)
    else:
        nonempty = [c for c in given if c]
        small = float(np.median(nonempty)) * row_bytes <= LAZY_MERGE_BYTES if nonempty else False
        chunks = _merge_runs(given, _block_holders(X, client), row_bytes, target, slots, small)
    if chunks == given:
        return X
    return X.rechunk({0: chunks})


def shared(obj):
    """``obj`` as one graph key of its own: pickled once and shipped once per worker that
    needs it, never inside every task that reads it."""
    import dask

    return dask.delayed(obj, traverse=False)


def is_dask_collection(x) -> bool:
    """True for a Dask array (never imports Dask)."""
    return type(x).__module__.split(".", 1)[0] == "dask" and hasattr(x, "map_blocks")


def check_row_chunks(X, what, sample_axes=1):
    """Refuse a Dask array chunked along anything but its first ``sample_axes`` axes."""
    split = [ax for ax in range(sample_axes, X.ndim) if X.numblocks[ax] != 1]
    if split:
        fix = ", ".join(f"{ax}: -1" for ax in range(sample_axes, X.ndim))
        raise ValueError(
            f"{what}: the Dask array is chunked along axis {split[0]} (chunks {X.chunks}); every "
            f"sample needs all its features in one block. Rechunk with X.rechunk({{{fix}}})."
        )


def _meta_module(X):
    meta = getattr(X, "_meta", None)
    if meta is not None and type(meta).__module__.split(".", 1)[0] == "cupy":
        import cupy

        return cupy
    return np


def _effective_output_type(est):
    """The output type a block must produce: the estimator's own, else the client's config."""
    from ._backend import get_config

    own = getattr(est, "output_type", None)
    return own if own is not None else get_config()["output_type"]


def _result_module(X, output_type):
    """NumPy or CuPy: the array module of the blocks the method returns."""
    if output_type == "numpy":
        return np
    if output_type == "cupy":
        import cupy

        return cupy
    return _meta_module(X)


def dask_rows(trailing, sample_axes=1, merge=None):
    """Decorator: run ``method(self, X)`` block by block when ``X`` is a Dask array.

    Row blocks too small to pay for a task are merged first (:func:`merge_rows`), unless
    ``merge(estimator)`` says no (a method whose results depend on the blocks, such as
    per-block random draws, keeps the user's blocks).

    Parameters
    ----------
    trailing : callable
        ``trailing(estimator, X) -> (shape, dtype)``: the shape of one sample's result
        (``()`` for one value per sample, ``(n,)`` for a row of ``n`` values, or the
        input's own trailing shape for image outputs) and its dtype.
    sample_axes : int
        How many leading axes index samples (1 for tables; a batch of images is one).
    merge : callable or None
        ``merge(estimator) -> bool``: whether small row blocks may be merged (default: yes).
    """

    def decorate(method):
        @functools.wraps(method)
        def wrapper(self, X, *args, **kwargs):
            if type(X) is np.ndarray or not is_dask_collection(X):
                return method(self, X, *args, **kwargs)
            name = f"{type(self).__name__}.{method.__name__}"
            check_row_chunks(X, name, sample_axes)
            if merge is None or merge(self):
                X = merge_rows(X, device_of(self), sample_axes)
            shape, dtype = trailing(self, X)
            shape, dtype = tuple(shape), np.dtype(dtype)
            out_type = _effective_output_type(self)
            xp = _result_module(X, out_type)
            # the estimator is one graph key: pickled once and shipped once per worker,
            # not inside every block's task
            est_key = shared(self)
            meth = method.__name__

            def block(b, est):
                if b.shape[0] == 0:
                    return xp.empty((0,) + shape, dtype=dtype)
                from ._backend import config_context

                with config_context(output_type=out_type):  # the client's setting, on the worker
                    return getattr(est, meth)(b, *args, **kwargs)

            lead = X.chunks[:sample_axes]
            meta = xp.empty((0,) * (sample_axes + len(shape)), dtype=dtype)
            chunks = lead + tuple((n,) for n in shape)
            n_in, n_out = X.ndim, sample_axes + len(shape)
            axes = {}
            if n_out < n_in:
                axes["drop_axis"] = tuple(range(n_out, n_in))
            elif n_out > n_in:
                axes["new_axis"] = tuple(range(n_in, n_out))
            return X.map_blocks(block, est_key, dtype=dtype, chunks=chunks, meta=meta, **axes)

        return wrapper

    return decorate


def row_blocks(X, *others):
    """The delayed row blocks of the Dask array ``X``, those known to be empty left out.

    With ``others`` (Dask arrays chunked like ``X`` along the rows), tuples of the
    matching blocks ``(x_block, other_block, ...)``.
    """
    xs = X.to_delayed().ravel()
    rest = [o.to_delayed().ravel() for o in others]
    keep = [i for i, n in enumerate(X.chunks[0]) if n != 0]
    if not others:
        return [xs[i] for i in keep]
    return [(xs[i], *(r[i] for r in rest)) for i in keep]


def tree_reduce(parts, combine):
    """Combine delayed ``parts`` in a tree of fan-in :data:`SPLIT_EVERY`: one delayed result.

    ``combine(*parts)`` must be associative (counts summed, bit-packed memories OR-ed,
    label sets united), so the result does not depend on the tree's shape.
    """
    import dask

    while len(parts) > 1:
        parts = [
            dask.delayed(combine)(*parts[i : i + SPLIT_EVERY]) for i in range(0, len(parts), SPLIT_EVERY)
        ]
    return parts[0]
