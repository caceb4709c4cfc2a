"""FlyNN's batch pipeline: from validated rows to Kenyon-cell winners and class counts.

:func:`batch_winners` takes ``batch_size`` rows at a time to the estimator's device,
makes a sparse batch dense where an encoding or the normalisation needs it, encodes it
over the fitted input range (:func:`encode_batch`, :func:`range_arrays`), centres and
scales the rows (``normalize``) and hashes them with the fitted FlyHash;
:func:`count` sums the winners per class (or their samples' weights). They read the estimator's parameters and
fitted state (``est``) and change nothing but its cache of device arrays.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._backend import array_module, get_xp, is_cupy_sparse, is_device_array, synchronize, to_device
from . import _encoding, _flynn_cuda, _weights
from ._flynn_engine import engine

__all__ = ["range_arrays", "encode_batch", "histogram", "quantiles", "batch_winners", "count"]


def range_arrays(est, Xb):
    """``(low, span)`` of :func:`._encoding.encode` (float64, on ``Xb``'s device; cached on
    ``est``), or ``(None, None)`` when every feature's range is [0, 1]."""

    def build(low):
        return _encoding.range_arrays(low, est.input_high_, array_module(Xb))

    return est._derived(("_input_range", est.device_), est.input_low_, build)


def histogram(est, X, weights=None):
    """Per-feature counts of validated ``X`` over the bins of ``input_range='quantile'``
    (:func:`._encoding.column_histogram`), summed over batches of ``batch_size`` rows (each
    made dense where it lives: NumPy or CuPy, the same bits): host int64, exact (with row
    ``weights``, host float64 on the fixed-point grid: their sums, exact too).

    On a GPU (``device_='cuda'``, or CuPy ``X``) one kernel per batch adds to one table on
    the device (:func:`._flynn_cuda.column_histogram`; dense CuPy ``X`` in one launch, as
    it makes no temporary per value), copied to the host once."""
    if _on_gpu(est, X):
        table = _device_histogram(est, X, weights)
        if table is not None:
            return _flynn_cuda.histogram_to_host(table, X.shape[1])
    total = 0
    bs = int(est.batch_size)
    for start in range(0, X.shape[0], bs):  # loop over batches, not samples
        Xb = X[start : start + bs]
        Xb = Xb.toarray() if sp.issparse(Xb) else Xb
        wb = None if weights is None else weights[start : start + bs]
        total = total + _encoding.column_histogram(Xb, est.input_low_, est.input_high_, wb)
    if isinstance(total, int):  # no rows
        return _encoding.column_histogram(np.empty((0, X.shape[1])), est.input_low_, est.input_high_, weights)
    return total


def quantiles(est, X, weights=None):
    """``input_quantiles_`` of validated ``X``: :func:`._encoding.quantile_knots` of its
    :func:`histogram`; on a GPU both are computed there and only the quantiles come back
    (:func:`._flynn_cuda.quantile_knots`, the same bits)."""
    low, high = est.input_low_, est.input_high_
    if _on_gpu(est, X):
        table = _device_histogram(est, X, weights)
        if table is not None:
            return _flynn_cuda.quantile_knots(table, low, high)
    return _encoding.quantile_knots(np.asarray(histogram(est, X, weights)), low, high)


def _on_gpu(est, X):
    """Whether the histogram is counted on the GPU: for a GPU model, or CuPy ``X``."""
    return getattr(est, "device_", None) == "cuda" or is_device_array(X)  # (a party's shell has none)


def _device_histogram(est, X, weights=None):
    """The device table of :func:`histogram` (:func:`._flynn_cuda.column_histogram`'s
    accumulator; None without rows): host NumPy or SciPy batches are moved there first."""
    xp = get_xp("cuda")
    low, high = est.input_low_, est.input_high_
    span = np.where(high - low > 0, high - low, 1.0)  # as column_histogram: a constant feature, bin 0
    low, span = xp.asarray(low, dtype=xp.float64), xp.asarray(span, dtype=xp.float64)
    n = X.shape[0]
    whole = is_device_array(X) and not is_cupy_sparse(X)  # no temporary per value: one launch
    bs = n if whole else int(est.batch_size)
    table = None
    for start in range(0, n, bs):  # loop over batches, not samples
        Xb = X[start : start + bs]
        Xb = to_device(Xb.toarray() if sp.issparse(Xb) or is_cupy_sparse(Xb) else Xb, "cuda")
        wb = None if weights is None else to_device(weights[start : start + bs], "cuda")
        table = _flynn_cuda.column_histogram(Xb, low, span, table, wb)
    return table


def _device_knots(est):
    """``input_quantiles_`` on ``device_`` (copied once per fitted model)."""
    return est._derived(
        ("_input_quantiles", est.device_), est.input_quantiles_, lambda k: to_device(k, est.device_)
    )


def _quantile_positions(est, Xb):
    """``input_range='quantile'``: each value of the dense device batch ``Xb`` at its place
    among its feature's quantiles (float64 in [0, 1])."""
    knots = _device_knots(est)
    if est.device_ == "cuda":
        return _flynn_cuda.quantile_position(Xb, knots)
    return _encoding.quantile_position(Xb, knots)


def encode_batch(est, Xb):
    """The encoded dense device batch ``Xb``: scaled to the input range, checked or clipped."""
    if est.input_range == "quantile":
        if est.device_ == "cuda" and not est._normalizes():  # one kernel, straight to float32
            knots = _device_knots(est)
            return _flynn_cuda.quantile_encode(Xb, knots, est.encoding, receptors=est.n_receptors_)
        u = _quantile_positions(est, Xb)
        return _encoding.encode(u, est.encoding, receptors=est.n_receptors_)
    low, span = range_arrays(est, Xb)
    fitted = isinstance(est.input_range, str)
    if not fitted:  # values outside a fixed range are refused (one pass on a [0, 1] range)
        _encoding.check_in_range(Xb, est.input_low_, est.input_high_, est.encoding, est.input_range)
    # a fixed range is clipped too: only the rounding of (x - low) / span can pass 1 there,
    # and clipping it keeps the bits of a fit over the same range under 'fit' (federated merges)
    clip = fitted or low is not None
    if est.device_ == "cuda" and not est._normalizes():  # one kernel, straight to float32
        return _flynn_cuda.encode(Xb, est.encoding, low, span, clip=clip, receptors=est.n_receptors_)
    return _encoding.encode(Xb, est.encoding, low, span, clip=clip, receptors=est.n_receptors_)


def batch_winners(est, X, bar=None):
    """Yield ``(start, winners)`` per batch of ``batch_size`` rows of validated ``X``.

    Each batch goes to ``device_``, is normalised if requested, and hashed by the
    hasher's engine (int32 (b, k_) winner cells). A sparse batch is hashed as it is
    without normalisation (FlyHash takes CSR) and made dense first with it
    (centring fills every entry of a row). ``bar`` (a Progress) advances once the
    caller is done with a batch; on a GPU the batch's work is waited for first
    when ``verbose`` asks for reports.
    """
    encoding = getattr(est, "encoding", None)
    normalize = est._normalizes()
    if encoding is None and not normalize:  # raw inputs are summed in float32: refuse what it cannot hold
        est.hasher_._check_float32_range(X, hint="rescale X or use normalize=True")
    precision = getattr(est, "precision", "exact")
    if precision == "integer" and (normalize or encoding is not None):
        raise ValueError(
            "precision='integer' needs encoding=None and normalize=False: an encoding maps the "
            "features to receptor responses and normalize centres and scales the rows, which are "
            "then no longer integer-valued."
        )
    eng = engine(est.device_)
    dense_first = (normalize or encoding is not None) and (sp.issparse(X) or is_cupy_sparse(X))
    bs = int(est.batch_size)
    for start in range(0, X.shape[0], bs):  # loop over batches, not samples
        Xb = X[start : start + bs]
        Xb = to_device(Xb.toarray() if dense_first else Xb, est.device_)
        if encoding is not None:
            Xb = est._encode(Xb)
        if normalize:
            Xb = eng.row_normalize(Xb)
        # normalised or encoded rows are not integer-valued (in general), so the GPU need not look
        integer_input = False if normalize or encoding is not None else None
        yield start, est.hasher_._winners(Xb, precision=precision, integer_input=integer_input)
        if bar is not None and est.verbose:
            synchronize(est.device_)
            bar.update(rows=Xb.shape[0])


def count(est, X, y_idx, bar=None, weights=None, keep=None):
    """Counts (n_classes, m) of the winners of ``X`` per class, summed over batches.

    With ``weights`` (host float64 on :mod:`._weights`' grid, one per row) each row adds
    its weight: float64 sums, exact in any order, that stay int64 when every weight is a
    whole number. A new array on ``device_``: the model is not touched, so an error
    half-way (out of memory, say) leaves it as it was.

    ``keep`` (sorted host row indices, e.g. the calibration rows): returns ``(counts,
    winners)``, the winners (on ``device_``) of those rows in their order as well, taken
    from the batches as they are counted instead of hashing the rows again.
    """
    labels = to_device(y_idx, est.device_)
    eng = engine(est.device_)
    n_classes = len(est.classes_)
    kept = []
    if weights is None:
        total = est._xp.zeros((n_classes, est.n_components_), dtype=np.int64)
    else:
        row_weights = to_device(weights, est.device_)
        total = est._xp.zeros((n_classes, est.n_components_), dtype=np.float64)
    for start, w in est._batch_winners(X, bar):
        rows = slice(start, start + w.shape[0])
        if weights is None:
            total += eng.count(w, labels[rows], n_classes, est.n_components_)
        else:
            total += eng.weighted_count(w, labels[rows], row_weights[rows], n_classes, est.n_components_)
        if keep is not None:
            kept.append(_rows_of_batch(w, keep, start))
    if weights is not None and _weights.is_whole(weights):
        total = total.astype(np.int64)
    if keep is None:
        return total
    winners = kept[0] if len(kept) == 1 else est._xp.concatenate(kept)
    return total, winners


def _rows_of_batch(w, keep, start):
    """A copy of the rows of the batch ``w`` (winners of rows ``start, start + 1, ...``) that
    ``keep`` names (so that the batch itself can go): evenly spaced rows (the calibration
    rows) are sliced, others gathered."""
    xp = array_module(w)
    lo, hi = np.searchsorted(keep, [start, start + w.shape[0]])
    local = np.asarray(keep[lo:hi], dtype=np.int64) - start
    step = int(local[1] - local[0]) if local.size > 1 else 1
    if local.size == 0 or (step > 0 and np.array_equal(local, local[0] + step * np.arange(local.size))):
        first = int(local[0]) if local.size else 0
        return xp.ascontiguousarray(w[first : first + step * local.size : step])
    return w[to_device(local, "cuda") if xp is not np else local]
