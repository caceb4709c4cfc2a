"""FlyNN CPU engine: NumPy counting, novelty and row normalisation (the reference).

Same functions and signatures as :mod:`._flynn_cuda`, same results bit for bit:

* :func:`row_normalize` ``(X)``: centre each row and scale it to unit L2 norm;
* :func:`count` ``(winners, labels, n_classes, n_components)``: integer counts;
* :func:`weighted_count` ``(winners, labels, weights, n_classes, n_components)``: the
  counts with a weight per sample (float64; exact for weights on FlyNN's fixed-point grid);
* :func:`novelty` ``(winners, filters_t)`` and :func:`argmin` ``(novelty)``;
* :func:`nearest_class` ``(winners, filters_t, out=None)``: ``argmin(novelty(...))``;
* :func:`work_bytes` ``(n_rows, n_features, k, n_classes, n_components)``.

``winners`` is the int32 (n, k) table of FlyHash winner indices, ``filters_t`` the
float64 (m, n_classes) transposed Fly Bloom filters. Novelties are summed
sequentially over the winners and the normalisation reproduces the GPU warp's
summation order, so both devices give the same bits.
"""

from __future__ import annotations

import numpy as np

__all__ = ["row_normalize", "count", "weighted_count", "novelty", "argmin", "nearest_class", "work_bytes"]


def _lane_sum(V):
    """Row sums of float64 ``V`` in the order of the GPU warp reduction.

    Lane ``l`` of a warp adds elements ``l, l + 32, ...`` of the zero-padded row one
    after the other; the 32 lane sums are then combined by the tree
    ``lane[i] += lane[i + off]`` for ``off = 16, 8, 4, 2, 1``. Reproducing that
    order exactly makes the CPU and GPU normalisations bit-identical.
    """
    n, d = V.shape
    pad = (-d) % 32
    if pad:
        V = np.concatenate([V, np.zeros((n, pad), dtype=V.dtype)], axis=1)
    P = V.reshape(n, -1, 32)
    acc = np.zeros((n, 32), dtype=np.float64)
    for t in range(P.shape[1]):  # loop over column groups of 32, not over samples
        acc += P[:, t, :]
    for off in (16, 8, 4, 2, 1):
        acc = acc[:, :off] + acc[:, off : 2 * off]
    return acc[:, 0]


def row_normalize(X):
    """Centre every row and scale it to unit L2 norm (float64 maths, fixed summation order).

    Each row is first scaled by the power of two ``2**-e`` with
    ``max|row| = f * 2**e``, ``f`` in [0.5, 1) (``frexp``), using ``ldexp``: an
    exact scaling that the centred, normalised row does not notice, so ordinary
    rows keep their bits while rows of any magnitude (``1e155``, whose squares
    would overflow, or ``1e-300``, whose squares would underflow) normalise like
    the others. The GPU kernel does the same.

    Parameters
    ----------
    X : ndarray of shape (n, d), float32 or float64
        Rows to normalise (finite).

    Returns
    -------
    Z : ndarray of X's dtype and shape
        Centred rows of unit norm; a constant row becomes zeros.
    """
    X64 = np.asarray(X, dtype=np.float64)
    _, e = np.frexp(np.abs(X64).max(axis=1))  # e = 0 for a zero row
    X64 = np.ldexp(X64, -e[:, None])
    d = X64.shape[1]
    mean = _lane_sum(X64) / d
    Xc = X64 - mean[:, None]
    sq = _lane_sum(Xc * Xc)
    nrm = np.sqrt(np.where(sq > 0.0, sq, 1.0))
    return (Xc / nrm[:, None]).astype(X.dtype, copy=False)


def count(winners, labels, n_classes, n_components):
    """Integer counts (n_classes, m): how often each cell wins per class.

    Parameters
    ----------
    winners : ndarray of int32, shape (n, k)
        Winner cells per sample.
    labels : ndarray of int32, shape (n,)
        Class index per sample.
    n_classes, n_components : int
        Shape of the count table.

    Returns
    -------
    counts : ndarray of int64, shape (n_classes, n_components)
    """
    m = n_components
    flat = _class_cells(winners, labels, m)
    return np.bincount(flat.ravel(), minlength=n_classes * m).reshape(n_classes, m).astype(np.int64)


def _class_cells(winners, labels, m):
    """Flat index ``label * m + cell`` of every (sample, winner) pair, shape (n, k), int64."""
    return labels.astype(np.int64)[:, None] * m + winners.astype(np.int64)


def weighted_count(winners, labels, weights, n_classes, n_components):
    """Weighted counts (n_classes, m): the sum of the weights of the samples in which each
    cell wins, per class.

    Float64 sums; for weights that are multiples of ``2**-20`` and totals below ``2**33``
    (what :mod:`._weights` admits) every partial sum is exact, so the result does not
    depend on the order of the additions (the GPU's atomic adds give the same bits).

    Parameters
    ----------
    winners : ndarray of int32, shape (n, k)
        Winner cells per sample.
    labels : ndarray of int32, shape (n,)
        Class index per sample.
    weights : ndarray of float64, shape (n,)
        Weight per sample.
    n_classes, n_components : int
        Shape of the count table.

    Returns
    -------
    counts : ndarray of float64, shape (n_classes, n_components)
    """
    m = n_components
    flat = _class_cells(winners, labels, m)
    w = np.broadcast_to(weights.astype(np.float64)[:, None], flat.shape).ravel()
    return np.bincount(flat.ravel(), weights=w, minlength=n_classes * m).reshape(n_classes, m)


def novelty(winners, filters_t):
    """Novelty (n, n_classes): the sum over the k winners of the class filter weights.

    Summed sequentially over the winners in float64 (the GPU's order).

    Parameters
    ----------
    winners : ndarray of int32, shape (n, k)
        Winner cells per sample.
    filters_t : ndarray of float64, shape (m, n_classes)
        Transposed filters.

    Returns
    -------
    novelty : ndarray of float64, shape (n, n_classes)
    """
    n, k = winners.shape
    out = np.zeros((n, filters_t.shape[1]), dtype=np.float64)
    for j in range(k):  # loop over the k winners (not samples): fixed summation order
        out += filters_t[winners[:, j]]
    return out


def argmin(novelty):
    """Index (int64) of the least novel class per row; ties go to the lowest class index.

    Parameters
    ----------
    novelty : ndarray of float64, shape (n, n_classes)

    Returns
    -------
    index : ndarray of int64, shape (n,)
    """
    return np.argmin(novelty, axis=1)


def nearest_class(winners, filters_t, out=None):
    """``argmin(novelty(winners, filters_t))``, written into ``out`` when given.

    Parameters
    ----------
    winners : ndarray of int32, shape (n, k)
    filters_t : ndarray of float64, shape (m, n_classes)
    out : ndarray of int64, shape (n,), optional
        Receives the result (may be a view).

    Returns
    -------
    index : ndarray of int64, shape (n,)
    """
    idx = argmin(novelty(winners, filters_t))
    if out is None:
        return idx
    out[...] = idx
    return out


def work_bytes(n_rows, n_features, k, n_classes, n_components):
    """Bytes one batch of ``n_rows`` allocates here (normalise, count, novelty).

    Returns
    -------
    host, device : int
        Host bytes and GPU bytes (always 0 here).
    """
    n, d, c, m = int(n_rows), int(n_features), int(n_classes), int(n_components)
    normalize = 7 * n * (d + 32) * 8  # float64 copy, scaled copy, padding, centred rows, squares, result
    counting = 3 * n * k * 8 + 2 * c * m * 8  # flat indices, bincount and its int64 copy
    scoring = 2 * n * c * 8
    return normalize + counting + scoring, 0
