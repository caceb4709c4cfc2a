"""Winner-take-all on dense activations, written once against NumPy/CuPy.

Both FlyHash engines select winners with these functions when they hold a dense
block of activations (the CPU engine always, the CUDA engine for the rows its
fused kernel hands back); :func:`wta` is the public entry point.
"""

from __future__ import annotations

from numbers import Integral

import numpy as np

from .._backend import array_module
from .._typing import Array, ArrayLike

__all__ = ["wta"]

#: Bisection steps of the paper's WTA (Algorithm 2).
BISECT_STEPS = 64
#: :func:`break_ties` ranks the tied entries from their index lists while fewer than one
#: entry in this many ties, and with a running count along the rows beyond (less memory).
TIE_LIST_FRACTION = 8


def wta_exact_mask(A, k):
    """Boolean mask of the k largest entries per row; ties -> lower column index."""
    xp = array_module(A)
    n, m = A.shape
    if k == m:
        return xp.ones((n, m), dtype=bool)
    kth = m - k
    thr = xp.partition(A, kth, axis=1)[:, kth : kth + 1]
    mask = A >= thr
    n_ge = mask.sum(axis=1)
    tied = xp.nonzero(n_ge > k)[0]
    if tied.size:  # rare: more entries equal to the threshold than places left
        mask[tied] = break_ties(A[tied], thr[tied], k)
    return mask


def break_ties(sub, thr, k):
    """Rows of ``sub`` with more than ``k`` entries ``>= thr``: keep all ``> thr`` and
    the first (lowest-index) entries ``== thr`` up to ``k`` in total."""
    xp = array_module(sub)
    gt = sub > thr
    eq = sub == thr
    need = k - gt.sum(axis=1)
    if int(eq.sum()) * TIE_LIST_FRACTION > eq.size:
        # most entries tie (constant or empty rows): a running count along each row costs 4
        # bytes an entry, the index lists below ~40 bytes a tied entry; the same winners
        rank = xp.cumsum(eq, axis=1, dtype=xp.int32)
        gt |= eq & (rank <= need[:, None])
        return gt
    # the entries equal to the threshold, row by row in column order (a few per row): the
    # first ``need`` of each row win; no pass over whole rows beyond the two comparisons
    r, c = xp.nonzero(eq)
    per_row = eq.sum(axis=1)
    rank = xp.arange(r.size) - (xp.cumsum(per_row) - per_row)[r]
    keep = rank < need[r]
    gt[r[keep], c[keep]] = True
    return gt


def wta_bisect_mask(A, k, steps=BISECT_STEPS):
    """The paper's per-row threshold bisection (Algorithm 2), in float32.

    Counts may differ from ``k`` when ties straddle the threshold or the interval
    does not shrink enough within ``steps``.
    """
    xp = array_module(A)
    A = A.astype(xp.float32, copy=False)
    span = xp.maximum(xp.abs(A).max(axis=1, keepdims=True), xp.float32(1.0))
    eps = span * xp.float32(2.0**-20)
    lb = A.min(axis=1, keepdims=True) - eps
    ub = A.max(axis=1, keepdims=True) + eps
    half = xp.float32(0.5)
    mid = (lb + ub) * half
    for _ in range(steps):
        tot = (A > mid).sum(axis=1, keepdims=True)
        lb = xp.where(tot > k, mid, lb)
        ub = xp.where(tot < k, mid, ub)
        mid = (lb + ub) * half
    return A > mid


def wta(A: ArrayLike, k: int) -> Array:
    """Exact row-wise winner-take-all: the ``k`` largest entries of each row.

    Parameters
    ----------
    A : ndarray of shape (n_samples, n_units)
        Dense real activations, a NumPy or a CuPy array (the work runs where the
        array lives). Must be finite.
    k : int
        Number of winners per row, ``1 <= k <= n_units``.

    Returns
    -------
    mask : ndarray of bool, shape (n_samples, n_units)
        Exactly ``k`` True entries per row, of the same array type as ``A``.
        Ties are broken in favour of the lower column index, deterministically.

    Examples
    --------
    >>> import numpy as np
    >>> from sknn_gpu.fly import wta
    >>> wta(np.array([[3.0, 1.0, 3.0, 2.0]]), 2).astype(int)
    array([[1, 0, 1, 0]])
    """
    xp = array_module(A)
    if not hasattr(A, "ndim"):
        A = np.asarray(A)
        xp = np
    if A.ndim != 2:
        raise ValueError(f"wta expects a 2-D array of activations, got shape {A.shape}.")
    if A.dtype.kind not in "fiub":
        raise TypeError(f"wta expects a real numeric array, got dtype {A.dtype}.")
    if isinstance(k, bool) or not isinstance(k, Integral):
        raise TypeError(f"k must be an integer, got {k!r}.")
    if not 1 <= k <= A.shape[1]:
        raise ValueError(f"k must satisfy 1 <= k <= {A.shape[1]} (the number of columns), got k={k}.")
    if A.dtype.kind == "f" and not bool(xp.isfinite(A).all()):
        raise ValueError("wta: the activations contain NaN or infinity.")
    if A.dtype.kind == "f":
        A = A + A.dtype.type(0)  # -0.0 -> +0.0 so that the tie rule sees equal zeros
    return wta_exact_mask(A, int(k))
