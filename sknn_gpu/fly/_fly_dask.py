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

from .._backend import take_rows, to_device, to_host
from .._dask import device_of, is_dask_collection, merge_rows, row_blocks, shared, tree_reduce
from .._progress import Progress
from . import _calibration, _encoding, _weights
from ._common import check_dask_X, host_labels, label_kind

__all__ = ["fit", "column_range", "aligned", "classes", "counts", "score"]


# ----------------------------------------------------------------------------------
# The fitted input range: (min, max) per block, combined
# ----------------------------------------------------------------------------------
def _block_weights(w, n):
    """A block's sample weights checked and rounded as in memory (a block may be all zeros)."""
    return _weights.check_sample_weight(w, n, allow_all_zero=True)


def _block_range(shell, X, w=None):
    """Runs on a worker: the checked block's (min, max) per feature over its rows of non-zero
    weight (None when there are none)."""
    if X.shape[0] == 0:
        return None
    Xv = shell._validate_X(X, reset=False)
    if w is not None:
        rows = _weights.nonzero_rows(_block_weights(w, Xv.shape[0]))
        if rows is not None:
            if rows.size == 0:
                return None
            Xv = take_rows(Xv, rows)
    return _encoding.column_range(Xv)


def _all_zero():
    return ValueError("Sample weights must contain at least one non-zero number.")


def column_range(est, X, w=None):
    """Per-feature (min, max) of the Dask ``X`` (one column block) as host float64 arrays:
    each row block is checked as in memory by a copy of ``est`` (which knows
    ``n_features_in_``) and sends one small pair; the pairs are combined in a tree. With
    ``w`` (aligned sample weights) over the rows of non-zero weight only."""
    import dask

    shell = shared(_shell(est))  # one graph key: shipped once per worker
    if w is None:
        parts = [dask.delayed(_block_range)(shell, b) for b in X.to_delayed().ravel()]
    else:
        blocks = zip(X.to_delayed().ravel(), w.to_delayed().ravel(), strict=True)
        parts = [dask.delayed(_block_range)(shell, b, wb) for b, wb in blocks]
    found = dask.compute(tree_reduce(parts, _encoding.wider_range))[0]
    if found is None:
        raise _all_zero()
    return found


def _block_histogram(shell, X, w=None):
    """Runs on a worker: the checked block's per-feature counts over the quantile bins of
    the agreed range (``shell`` knows it), over its rows of non-zero weight."""
    if X.shape[0] == 0:
        return 0
    Xv = shell._validate_X(X, reset=False)
    weights = None
    if w is not None:  # each row counts its weight, as in memory
        weights = _block_weights(w, Xv.shape[0])
    from . import _flynn_batches

    hist = _flynn_batches.histogram(shell, Xv, weights)
    if weights is None and hist.dtype == np.int64:  # a block's counts fit int32: half the bytes to send
        return hist.astype(np.int32)
    return hist


def _add_histograms(*parts):
    """The sum of blocks' histograms, exact: summed in int64 (float64 for weighted ones) and
    sent on as int32 while every bin's count fits (fewer than 2**31 rows in it)."""
    total = 0
    for p in parts:
        total = total + (p.astype(np.int64) if isinstance(p, np.ndarray) and p.dtype == np.int32 else p)
    if isinstance(total, np.ndarray) and total.dtype == np.int64 and total.max(initial=0) < 2**31:
        return total.astype(np.int32)
    return total


def column_histogram(est, X, w=None):
    """``input_range='quantile'``: the per-feature counts of the Dask ``X`` over the quantile
    bins of ``est``'s range, summed over the blocks in a tree (integers: exact, whatever the
    blocks); one (n_features, bins) table per block travels."""
    import dask

    shell = shared(_shell(est))
    if w is None:
        parts = [dask.delayed(_block_histogram)(shell, b) for b in X.to_delayed().ravel()]
    else:
        blocks = zip(X.to_delayed().ravel(), w.to_delayed().ravel(), strict=True)
        parts = [dask.delayed(_block_histogram)(shell, b, wb) for b, wb in blocks]
    return dask.compute(tree_reduce(parts, _add_histograms))[0]


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
def _block_classes(y, w=None):
    labels = host_labels(y)
    if w is not None:
        weights = _block_weights(w, labels.shape[0])
        labels = labels[weights > 0]
    return np.unique(labels)


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


def classes(X, y, w=None):
    """Sorted class labels of the Dask labels ``y`` (aligned with ``X``): one small set per block
    (with ``w``, the labels of the rows of non-zero weight)."""
    import dask

    if w is None:
        parts = [dask.delayed(_block_classes)(yb) for _, yb in row_blocks(X, y)]
    else:
        parts = [dask.delayed(_block_classes)(yb, wb) for _, yb, wb in row_blocks(X, y, w)]
    return dask.compute(tree_reduce(parts, _union))[0]


# ----------------------------------------------------------------------------------
# Counting: a count table per block, summed
# ----------------------------------------------------------------------------------
def _block_counts(shell, what, X, y, w=None):
    """``(counts, rows)`` of one block, checked and counted as in memory: host counts
    (n_classes, m), int64. With ``w``, ``(counts, rows, total weight)``, the counts float64
    for weights that are not whole numbers."""
    return _counted(shell, what, shell._validate_X(X, reset=False), y, w)


def _counted(shell, what, Xv, y, w=None):
    """:func:`_block_counts` of the validated block ``Xv``."""
    labels = host_labels(y)
    n = int(Xv.shape[0])
    if w is None or what != "fit":  # fit's classes are those of the rows of non-zero weight
        y_idx = shell._encode_y(labels, n)
    shell._check_size("partial_fit", n, caller=what)
    if w is None:
        return to_host(shell._count(Xv, y_idx)), n
    weights = _block_weights(w, n)
    rows = _weights.nonzero_rows(weights)
    if rows is not None:
        if rows.size == 0:
            return np.zeros((len(shell.classes_), shell.n_components_), dtype=np.int64), n, 0.0
        Xv, labels, weights = take_rows(Xv, rows), labels[rows], weights[rows]
    y_idx = shell._encode_y(labels, labels.shape[0])
    _weights.check_totals(weights, y_idx, len(shell.classes_), what)
    return to_host(shell._count(Xv, y_idx, weights=weights)), n, float(weights.sum())


def _block_counts_and_calibration(shell, what, X, y, w, local):
    """A block's counts (:func:`_block_counts`) and the winners, class indices and weights of
    its calibration rows (``local``: their host positions in the block; None when it has
    none): the rows of ``predict_proba``'s calibration travel as winners, not as features,
    and X is read once."""
    Xv = shell._validate_X(X, reset=False)  # once, for the counts and the calibration rows
    out = _counted(shell, what, Xv, y) if w is None else _counted(shell, what, Xv, y, w)
    if local.size == 0:
        return out, None
    winners = to_host(_calibration.calibration_winners(shell, take_rows(Xv, local)))
    y_idx = shell._encode_y(host_labels(y)[local], local.size)
    weights = None if w is None else _block_weights(w, int(Xv.shape[0]))[local]
    return out, (winners, y_idx, weights)


def _add(*parts):
    total = parts[0][0]
    for p in parts[1:]:
        total = total + p[0]  # a new array (never a task's input); int64 + float64 is float64
    return (total, *(sum(p[i] for p in parts) for i in range(1, len(parts[0]))))


def counts(est, X, y, what="fit", w=None, calibration_rows=None):
    """Counts of the Dask ``X``/``y`` under the fitted hash of ``est``: ``(table, n_rows,
    n_blocks, calibration)``.

    ``table`` is on ``est.device_``; ``y`` (and the sample weights ``w``) are already
    :func:`aligned`; ``what`` names the public method in a block's errors. Weighted counts
    are sums of multiples of ``2**-20`` (:mod:`._weights`): exact in any order, as integer
    counts are. With ``calibration_rows`` (sorted host indices into X's rows), the blocks
    that hold them also return their winners, class indices and weights, concatenated in
    row order as ``calibration = (winners, y_idx, weights)`` (else None). Only these, the
    table, a row count and a total weight reach the client, in one pass over X.
    """
    import dask

    shell = shared(_shell(est))  # one graph key: shipped once per worker
    sizes = X.chunks[0]
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    xs, ys = X.to_delayed().ravel(), y.to_delayed().ravel()
    ws = None if w is None else w.to_delayed().ravel()
    wanted = np.asarray(calibration_rows if calibration_rows is not None else [], dtype=np.int64)
    parts, cal_parts = [], []
    for i, size in enumerate(sizes):
        if size == 0:
            continue
        wb = None if ws is None else ws[i]
        local = wanted[(wanted >= starts[i]) & (wanted < starts[i + 1])] - starts[i]
        if calibration_rows is None:
            args = (shell, what, xs[i], ys[i]) if wb is None else (shell, what, xs[i], ys[i], wb)
            parts.append(dask.delayed(_block_counts)(*args))
            continue
        both = dask.delayed(_block_counts_and_calibration, nout=2)(shell, what, xs[i], ys[i], wb, local)
        parts.append(both[0])
        cal_parts.append(both[1])
    (total, n, *weight), cals = dask.compute(tree_reduce(parts, _add), cal_parts)
    if weight and weight[0] == 0:
        raise _all_zero()
    _weights.check_exact(total, what)
    calibration = None
    if calibration_rows is not None:
        cals = [c for c in cals if c is not None]
        winners = np.concatenate([c[0] for c in cals])
        y_idx = np.concatenate([c[1] for c in cals])
        weights = None if w is None else np.concatenate([c[2] for c in cals])
        calibration = (winners, y_idx, weights)
    return to_device(total, est.device_), n, len(parts), calibration


def fit(est, X, y, what, first, sample_weight=None):
    """``fit``/``partial_fit`` (``what``) of ``est`` on Dask ``X``: counts per block on the
    workers, summed in a tree; returns ``est``. ``sample_weight`` (Dask or in memory) as in
    memory: rows of weight 0 set no class and no fitted range.

    The client checks the metadata, gathers the class labels (``fit``) and draws
    the projection; each worker validates and counts its blocks with the
    in-memory code. The model changes only once the summed counts are back (a call
    that fails is undone by the estimator's ``keeps_model``).
    """
    d = check_dask_X(est, X, what, reset=first)
    X = merge_rows(X, device_of(est))  # blocks that pay for a task; y and the weights follow
    y = aligned(y, X)
    w = None if sample_weight is None else aligned(sample_weight, X, "sample_weight")
    if what == "fit":
        labels = classes(X, y, w)
        if labels.size == 0:
            raise _all_zero()
        check_classification_targets(labels)
        est.classes_ = labels
    if first:
        low = high = None
        if getattr(est, "encoding", None) is not None and isinstance(est.input_range, str):
            low, high = column_range(est, X, w)  # one reduction over the blocks
        if est.input_range == "quantile" and est.encoding is not None:
            est.input_low_, est.input_high_ = low, high  # the bins the blocks count over
            est._set_input_range(low, high, histogram=column_histogram(est, X, w))
        else:
            est._set_input_range(low, high)
    kept = _kept_rows(X, w)
    n_train = X.shape[0] if kept is None else kept.size  # the rows an in-memory fit keeps
    if first:
        est._init_model(d, 0, caller=what, n_train=n_train)  # k='auto' from n_train
    bar = Progress(est, f"{type(est).__name__}.{what} (dask)", verbose=est.verbose, unit="blocks")
    rows = _calibration.calibration_rows(n_train)
    rows = rows if kept is None else kept[rows]
    total, n, bar.n, cal = counts(est, X, y, what, w, calibration_rows=rows)
    if not first:
        total = _weights.check_exact(est.counts_ + total, what)
        table = _calibration.held_out(est, *cal)  # the batch, scored by the model before it
        est._set_counts(total)
        est._add_calibration(*table)
    else:
        est._set_counts(total)
        est._set_calibration(*_calibration.cross_fit(est, *cal))
    bar.close(samples=n, classes=len(est.classes_))
    return est


def _kept_rows(X, w):
    """The indices of the rows of nonzero weight (the weights, one number a row, are read),
    or None without weights. ``predict_proba``'s calibration rows are picked among them
    (at most ``CALIBRATION_ROWS``, evenly spread), as an in-memory fit picks them, so both
    calibrate alike, and ``k='auto'`` counts them."""
    import dask

    if w is None:
        return None
    return np.flatnonzero(np.asarray(to_host(dask.compute(w)[0]), dtype=np.float64) != 0)


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
    X = merge_rows(X, device_of(est))
    y = aligned(y, X)
    weighted = sample_weight is not None
    w = aligned(sample_weight, X, "sample_weight") if weighted else None
    model = shared(est)  # one graph key: shipped once per worker
    parts = [
        dask.delayed(_block_hits)(model, b[0], b[1], b[2] if weighted else None)
        for b in (row_blocks(X, y, w) if weighted else row_blocks(X, y))
    ]
    hits, total = dask.compute(tree_reduce(parts, _add_pairs))[0]
    return float(hits / total)
