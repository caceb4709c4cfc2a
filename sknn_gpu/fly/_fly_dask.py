"""Dask paths of the fly family: metadata checks, FlyNN's distributed fit and blockwise score.

:class:`~sknn_gpu.fly.FlyHashTransformer` needs no more than :func:`check_X` here: its
``fit`` reads only the width of a Dask array, and ``transform`` maps over the row
blocks (:func:`sknn_gpu._dask.dask_rows`).

A FlyNN model is a table of integer counts, and counting splits exactly over row
blocks: each worker hashes its block of ``X`` and counts the winners per class
(with the engine of the estimator's resolved device, on the worker's own CPU or
GPU), and the count tables are summed up a tree (``sknn_gpu._dask.SPLIT_EVERY`` at a time)
by Dask's scheduler — the merge of :func:`~sknn_gpu.fly.merge_flynn`, done by
the cluster. What reaches the client is one count table, and before it the set of
class labels (one small array per block); never a row of ``X``. The result equals
one in-memory ``fit`` bit for bit (integer sums in any order are exact).

The workers receive a model-free copy of the estimator (:func:`_shell`: parameters,
``classes_`` and the hash's projection, no counts), once per worker (one graph key).
Each block is validated and counted by the estimator's own in-memory code, so a bad
block fails with the message an in-memory ``fit`` gives.

Importing this module never imports Dask.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
from sklearn.exceptions import DataConversionWarning

from .._backend import to_device, to_host
from .._dask import check_row_chunks, is_dask_collection, row_blocks, tree_reduce

__all__ = ["check_X", "aligned", "classes", "counts", "score"]


# ----------------------------------------------------------------------------------
# Checks on the client (metadata only)
# ----------------------------------------------------------------------------------
def check_X(est, X, what, reset, rows=True):
    """Refuse a Dask ``X`` from its metadata alone (no task runs); returns ``n_features``.

    2-D, numeric, at least one feature and (when the row count is known) one row.
    With ``rows`` (the data will be read by rows): one column block and known row
    chunks too. On ``reset`` it sets ``n_features_in_`` (and drops
    ``feature_names_in_``), otherwise it compares the width with the fitted one,
    with the in-memory messages.
    """
    name = f"{type(est).__name__}.{what}"
    if X.ndim != 2:
        raise ValueError(f"Expected a 2D array, got a Dask array of shape {X.shape}.")
    if X.dtype.kind not in "biuf":
        raise ValueError(f"X must be numeric, got dtype {X.dtype}.")
    if rows:
        check_row_chunks(X, name)
        if any(np.isnan(c) for c in X.chunks[0]):
            raise ValueError(
                f"{name}: X has unknown chunk sizes along the rows; call X.compute_chunk_sizes() first."
            )
    n, d = X.shape
    for size, unit in ((n, "sample"), (d, "feature")):
        if size == 0:
            raise ValueError(
                f"Found array with 0 {unit}(s) (shape={(n, d)}) while a minimum of 1 is required."
            )
    d = int(d)
    if reset:
        est.n_features_in_ = d
        est.__dict__.pop("feature_names_in_", None)
    elif d != est.n_features_in_:
        raise ValueError(
            f"X has {d} features, but {type(est).__name__} is expecting {est.n_features_in_} "
            "features as input."
        )
    return d


def _block_range(shell, X):
    """Runs on a worker: the checked block's (min, max) per feature (None when it is empty)."""
    from ._flynn import column_range

    return None if X.shape[0] == 0 else column_range(shell._validate_X(X, reset=False))


def wider_range(*parts):
    """The per-feature (min, max) over (min, max) pairs (None entries skipped; all None: None)."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    return np.min([p[0] for p in parts], axis=0), np.max([p[1] for p in parts], axis=0)


def column_range(est, X):
    """Per-feature (min, max) of the Dask ``X`` (one column block) as host float64 arrays:
    each row block is checked as in memory by a copy of ``est`` (which knows
    ``n_features_in_``) and sends one small pair; the pairs are combined in a tree."""
    import dask

    shared = dask.delayed(_shell(est), traverse=False)
    parts = [dask.delayed(_block_range)(shared, b) for b in X.to_delayed().ravel()]
    return dask.compute(tree_reduce(parts, wider_range))[0]


def aligned(v, X, name="y"):
    """1-D ``v`` (labels or weights; Dask or in-memory) as a Dask array with ``X``'s row chunks.

    A column vector ``(n, 1)`` is raveled with scikit-learn's DataConversionWarning.
    """
    import dask.array as da

    if not is_dask_collection(v):
        v = np.asarray(v) if not hasattr(v, "shape") else to_host(v)
    if v.ndim == 2 and v.shape[1] == 1:
        warnings.warn(
            "A column-vector y was passed when a 1d array was expected. Please change the shape of y "
            "to (n_samples, ), for example using ravel().",
            DataConversionWarning,
            stacklevel=3,
        )
        v = v.ravel() if is_dask_collection(v) else v[:, 0]
    if v.ndim != 1:
        raise ValueError(f"{name} should be a 1d array, got an array of shape {v.shape} instead.")
    if v.shape[0] != X.shape[0]:
        raise ValueError(f"X and {name} have inconsistent numbers of samples: {X.shape[0]} != {v.shape[0]}.")
    if is_dask_collection(v):
        return v.rechunk((X.chunks[0],))
    return da.from_array(v, chunks=(X.chunks[0],))


def _shell(est):
    """A model-free copy of ``est``: parameters, ``classes_``, the hash; no counts or filters."""
    shell = copy.copy(est)
    drop = ("counts_", "filters_", "_filters_t", "_device_cache")
    shell.__dict__ = {k: v for k, v in est.__dict__.items() if k not in drop}
    return shell


# ----------------------------------------------------------------------------------
# Classes: the labels of each block, united
# ----------------------------------------------------------------------------------
def _block_classes(y):
    from ._flynn import _host_labels

    return np.unique(_host_labels(y))


def _union(*parts):
    """The sorted union of label sets; TypeError when numbers meet strings (as in memory)."""
    from ._flynn import _label_kind

    kinds = [_label_kind(p) for p in parts]
    if len(set(kinds)) > 1:
        a = next(p for p, k in zip(parts, kinds, strict=True) if k == "string").tolist()[0]
        b = next(p for p, k in zip(parts, kinds, strict=True) if k == "numeric").tolist()[0]
        raise TypeError(
            f"y mixes string and numeric class labels (e.g. {a!r} and {b!r}); use one type for all labels."
        )
    return np.unique(np.concatenate(parts))


def classes(X, y):
    """Sorted class labels of the Dask labels ``y`` (aligned with ``X``): one small set per block."""
    import dask

    parts = [dask.delayed(_block_classes)(yb) for _, yb in row_blocks(X, y)]
    return dask.compute(tree_reduce(parts, _union))[0]


# ----------------------------------------------------------------------------------
# Counting: a count table per block, summed
# ----------------------------------------------------------------------------------
def _block_counts(shell, what, X, y):
    """Host int64 counts (n_classes, m) of one block, checked and counted as in memory."""
    from ._flynn import _host_labels

    Xv = shell._validate_X(X, reset=False)
    y_idx = shell._encode_y(_host_labels(y), Xv.shape[0])
    shell._check_size("partial_fit", Xv.shape[0], caller=what)
    return to_host(shell._count(Xv, y_idx)), int(Xv.shape[0])


def _add(*parts):
    total = parts[0][0].copy()  # never write into a task's input
    for c, _ in parts[1:]:
        total += c
    return total, sum(n for _, n in parts)


def counts(est, X, y, what="fit"):
    """Counts of the Dask ``X``/``y`` under the fitted hash of ``est``: ``(table, n_rows, n_blocks)``.

    ``table`` is on ``est.device_``; ``y`` is already :func:`aligned`; ``what`` names the
    public method in a block's errors. Only the table and a row count reach the client.
    """
    import dask

    shared = dask.delayed(_shell(est), traverse=False)  # one graph key: shipped once per worker
    parts = [dask.delayed(_block_counts)(shared, what, xb, yb) for xb, yb in row_blocks(X, y)]
    total, n = dask.compute(tree_reduce(parts, _add))[0]
    return to_device(total, est.device_), n, len(parts)


# ----------------------------------------------------------------------------------
# Score: correct predictions per block
# ----------------------------------------------------------------------------------
def _block_hits(est, X, y, w):
    """``(sum of weights of the correct predictions, sum of weights)`` of one block."""
    from ._flynn import _host_labels

    pred = to_host(est.predict(X))
    ok = pred == _host_labels(y)
    if w is None:
        return int(ok.sum()), int(ok.size)
    w = np.asarray(to_host(w), dtype=np.float64)
    return float(w[ok].sum()), float(w.sum())


def _add_pairs(*parts):
    return sum(a for a, _ in parts), sum(b for _, b in parts)


def score(est, X, y, sample_weight=None):
    """Mean accuracy of ``est`` on the Dask ``X``: predicted blockwise, two numbers per block back.

    Unweighted it is an exact count over the number of samples (the in-memory value);
    with ``sample_weight`` the weighted sums are added per block (within rounding of
    the in-memory value).
    """
    import dask

    check_X(est, X, "score", reset=False)
    y = aligned(y, X)
    weighted = sample_weight is not None
    w = aligned(sample_weight, X, "sample_weight") if weighted else None
    shared = dask.delayed(est, traverse=False)
    parts = [
        dask.delayed(_block_hits)(shared, b[0], b[1], b[2] if weighted else None)
        for b in (row_blocks(X, y, w) if weighted else row_blocks(X, y))
    ]
    hits, total = dask.compute(tree_reduce(parts, _add_pairs))[0]
    return float(hits / total)
