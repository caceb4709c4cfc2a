"""FlyNN's Dask adapter: the distributed fit (input range, class labels, counts) and blockwise score.

:class:`~sknn_gpu.fly.FlyHashTransformer` needs nothing here: its ``fit`` reads only
the width of a Dask array (checked with :func:`._common.check_dask_X`, as every Dask
``X`` is), and ``transform`` maps over the row blocks (:func:`sknn_gpu._dask.dask_rows`).

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
from sklearn.utils.multiclass import check_classification_targets

from .._backend import to_device, to_host
from .._dask import is_dask_collection, row_blocks, tree_reduce
from .._progress import Progress
from . import _encoding
from ._common import check_dask_X, host_labels, label_kind

__all__ = ["fit", "column_range", "aligned", "classes", "counts", "score"]


# ----------------------------------------------------------------------------------
# The fitted input range: (min, max) per block, combined
# ----------------------------------------------------------------------------------
def _block_range(shell, X):
    """Runs on a worker: the checked block's (min, max) per feature (None when it is empty)."""
    return None if X.shape[0] == 0 else _encoding.column_range(shell._validate_X(X, reset=False))


def column_range(est, X):
    """Per-feature (min, max) of the Dask ``X`` (one column block) as host float64 arrays:
    each row block is checked as in memory by a copy of ``est`` (which knows
    ``n_features_in_``) and sends one small pair; the pairs are combined in a tree."""
    import dask

    shared = dask.delayed(_shell(est), traverse=False)
    parts = [dask.delayed(_block_range)(shared, b) for b in X.to_delayed().ravel()]
    return dask.compute(tree_reduce(parts, _encoding.wider_range))[0]


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
    return np.unique(host_labels(y))


def _union(*parts):
    """The sorted union of label sets; TypeError when numbers meet strings (as in memory)."""
    kinds = [label_kind(p) for p in parts]
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
    Xv = shell._validate_X(X, reset=False)
    y_idx = shell._encode_y(host_labels(y), Xv.shape[0])
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


def fit(est, X, y, what, first):
    """``fit``/``partial_fit`` (``what``) of ``est`` on Dask ``X``: counts per block on the
    workers, summed in a tree; returns ``est``.

    The client checks the metadata, gathers the class labels (``fit``) and draws
    the projection; each worker validates and counts its blocks with the
    in-memory code. The model changes only once the summed counts are back; a
    ``first`` call that fails leaves the estimator unfitted.
    """
    d = check_dask_X(est, X, what, reset=first)
    y = aligned(y, X)
    try:
        if what == "fit":
            labels = classes(X, y)
            check_classification_targets(labels)
            est.classes_ = labels
        if first:
            low = high = None
            if getattr(est, "encoding", None) is not None and isinstance(est.input_range, str):
                low, high = column_range(est, X)  # one reduction over the blocks
            est._set_input_range(low, high)
            est._init_model(d, 0, caller=what)
        bar = Progress(est, f"{type(est).__name__}.{what} (dask)", verbose=est.verbose, unit="blocks")
        total, n, bar.n = counts(est, X, y, what)
        est._set_counts(total if first else est.counts_ + total)
        bar.close(samples=n, classes=len(est.classes_))
    except BaseException:
        if first:
            est._forget()
        raise
    return est


# ----------------------------------------------------------------------------------
# Score: correct predictions per block
# ----------------------------------------------------------------------------------
def _block_hits(est, X, y, w):
    """``(sum of weights of the correct predictions, sum of weights)`` of one block."""
    pred = to_host(est.predict(X))
    ok = pred == host_labels(y)
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

    check_dask_X(est, X, "score", reset=False)
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
