"""FlyHash CPU engine: SciPy sparse projection + exact winner-take-all (the reference).

Same functions and signatures as :mod:`._flyhash_cuda`, same results bit for bit:

* :func:`transform` ``(fh, X, output, algorithm, progress=None)``: the hash of every
  row of ``X``;
* :func:`winners` ``(fh, X, progress=None)``: the ``k_`` winner indices of every row
  (exact WTA);
* :func:`work_bytes` ``(n_samples, n_features, n_components, k, output, sparse=False)``:
  host and device bytes the two above allocate, for the estimator's size check;
* :func:`draw_block` ``(rng, n, d, s)``: one block of the projection drawn by the
  engine, or None: here always None (``_flyhash._draw_connections`` draws it on the
  host and resolves Floyd's collisions there, the reference); the CUDA engine draws
  the same stream on the GPU.

``progress``, when given, is called with the number of rows of every block once the
block is hashed (the estimator's :class:`~sknn_gpu._progress.Progress`).

``fh`` is a fitted :class:`~sknn_gpu.fly.FlyHashTransformer` (its projection
``components_`` and sizes ``n_components_``, ``k_``). Activations are float32 sums
of a unit's inputs in ascending feature order: SciPy's CSR x dense product adds
sequentially in the output dtype, which is what the CUDA kernel does with
``__fadd_rn``. Rows are processed in blocks (threads over blocks; SciPy and NumPy
release the GIL), so the ``n x m`` activations never exist at once.

Sparse input is hashed from its stored entries when it is sparse enough to pay
(:data:`SPARSE_DENSITY`): every stored ``x[r, j]`` is added to the activations of the
units that read feature ``j``, entries taken in ascending ``j`` within each row, into
float32 zeros (:func:`numpy.add.at` adds in index order, unbuffered). That is the
dense path's sum with its zero terms left out, and adding ``+-0.0`` to a float32
partial sum that starts at ``+0.0`` never changes it, so the activations are the same
bits. Denser blocks are made dense first.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext

import numpy as np
import scipy.sparse as sp

from .._backend import to_host
from ._wta import BISECT_STEPS, break_ties, wta_bisect_mask, wta_exact_mask

__all__ = ["transform", "winners", "work_bytes", "integer_valued", "draw_block"]

#: Largest magnitude of integer-valued input (``precision='integer'``; the GPU's
#: tensor-core path is exact up to it, :mod:`._flyhash_cuda`).
INTEGER_LIMIT = 2048

#: Target bytes of one float32 activation block (rows x m).
BLOCK_BYTES = 8 * 2**20
#: Most threads hashing blocks at once.
MAX_WORKERS = 16
#: Sparse blocks with at most this fraction of stored entries are hashed from their
#: entries instead of being made dense. Measured on 2 cores (one block, FlyHash
#: defaults): 37x faster at 0.1% (10,000 features), 2.2x at 1%, break-even near 1-2%,
#: 5x slower at 5% (784 features).
SPARSE_DENSITY = 0.01
#: Most (stored entry, unit) contributions gathered at once on the sparse path.
SPARSE_CHUNK = 2**19
#: Host bytes per contribution on the sparse path (target, entry index, offsets, values).
_SPARSE_ITEM_BYTES = 40
#: :func:`wta_exact_mask_host` gathers the candidates of rows that have at most one unit in
#: this many among them; rows with more take the full partition.
CANDIDATE_FRACTION = 8
#: Host bytes per unit of a block of rows at the peak of its selection, in the worst case:
#: rows whose activations all tie (constant or empty rows) hold the activations and their
#: copy, the candidate mask, the partition's copy, the mask, and break_ties' comparisons
#: and running count (28.4 measured; random rows hold 8-14).
_BLOCK_UNIT_BYTES = 30


# --------------------------------------------------------------------------- #
# Engine interface                                                              #
# --------------------------------------------------------------------------- #
def transform(fh, X, output, algorithm, progress=None, precision="exact"):
    """Hash the rows of ``X`` on the host.

    Every ``precision`` computes the exact hash here: float32 sums in feature order
    (``'fast'`` has nothing faster to offer on the CPU; integer-valued input, which
    ``'integer'`` promises, sums exactly whatever the method).

    Parameters
    ----------
    fh : FlyHashTransformer
        Fitted transformer (projection and sizes).
    X : array or sparse matrix of shape (n_samples, n_features)
        Validated float input (NumPy/SciPy; CuPy input is copied to the host).
    output : {'sparse', 'dense', 'packed'}
        What to return (see below).
    algorithm : {'exact', 'bisect'}
        Winner-take-all rule.
    progress : callable or None, default=None
        Called with the number of rows of each block once it is hashed.

    Returns
    -------
    hash : ndarray or tuple
        ``'dense'``: uint8 (n, m); ``'packed'``: uint8 (n, ceil(m / 8)) in
        ``np.packbits`` layout; ``'sparse'``: ``(indptr, indices)`` of the CSR
        hash (winner indices ascending per row), built into a matrix by the caller.
    """
    X = _host_rows(X)
    n, m = X.shape[0], fh.n_components_
    if output == "dense":
        return _mask(fh, X, algorithm, progress).view(np.uint8)
    if output == "packed":
        out = np.empty((n, (m + 7) // 8), dtype=np.uint8)
        for st, rows, bits in _iter_blocks(fh, X, algorithm, progress, lambda blk: np.packbits(blk, axis=1)):
            out[st : st + rows] = bits
        return out
    counts = np.empty(n, dtype=np.int64)
    parts = []
    post = lambda blk: (blk.sum(axis=1), _mask_columns(blk).astype(np.int32))  # noqa: E731
    for st, rows, (cnt, cols) in _iter_blocks(fh, X, algorithm, progress, post):
        counts[st : st + rows] = cnt
        parts.append(cols)
    indices = np.concatenate(parts) if parts else np.empty(0, dtype=np.int32)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return indptr, indices


def winners(fh, X, progress=None, precision="exact", integer_input=None):
    """int32 (n, k_) winner unit indices per row, ascending (exact WTA; any ``precision``).

    ``integer_input`` (a hint for the GPU engine's routing) changes nothing here.

    Parameters
    ----------
    fh : FlyHashTransformer
        Fitted transformer.
    X : array or sparse matrix of shape (n_samples, n_features)
        Validated float input.
    progress : callable or None, default=None
        Called with the number of rows of each block once it is hashed.

    Returns
    -------
    winners : ndarray of int32, shape (n_samples, k_)
        NumPy array.
    """
    X = _host_rows(X)
    k = fh.k_
    out = np.empty((X.shape[0], k), dtype=np.int32)
    for st, rows, cols in _iter_blocks(fh, X, "exact", progress, _mask_columns):
        out[st : st + rows] = cols.reshape(rows, k)
    return out


def integer_valued(X):
    """True when every entry of ``X`` (dense or sparse, host) is a whole number of magnitude <= 2048.

    Judged on the float32 values FlyHash hashes (``X`` rounded to float32, as both
    devices do), block by block, so that no full-size temporary is made.
    """
    X = _host_rows(X)
    data = X.data if sp.issparse(X) else X
    if data.ndim != 2:
        data = data.reshape(1, -1)
    rows = max(1, BLOCK_BYTES // (8 * max(1, data.shape[1])))
    for st in range(0, data.shape[0], rows):
        blk = np.asarray(data[st : st + rows], dtype=np.float32)
        if blk.size and (np.abs(blk).max() > INTEGER_LIMIT or not np.array_equal(blk, np.rint(blk))):
            return False
    return True


def draw_block(rng, n, d, s):
    """None: the host draws the projection (:func:`._flyhash._draw_connections`)."""
    return None


def work_bytes(n_samples, n_features, n_components, k, output, sparse=False):
    """Bytes :func:`transform` (or :func:`winners` for ``output='winners'``) allocates.

    Parameters
    ----------
    n_samples, n_features : int
        Shape of the input.
    n_components, k : int
        Units and winners per row.
    output : {'sparse', 'dense', 'packed', 'winners'}
        What is computed.
    sparse : bool, default=False
        The input is a sparse matrix: count the sparse path's gathers as well.

    Returns
    -------
    host, device : int
        Bytes on the host and on the GPU (always 0 here).
    """
    n, d, m = int(n_samples), int(n_features), int(n_components)
    if n == 0:
        return 0, 0
    b = min(n, _block_rows(m))
    workers = min(-(-n // b), os.cpu_count() or 1, MAX_WORKERS)
    # per block: float32 rows (transposed copy), then per unit what the selection holds at
    # its peak (_BLOCK_UNIT_BYTES: the worst case, rows of equal activations)
    per_block = b * d * 8 + _BLOCK_UNIT_BYTES * b * m
    if sparse:  # the gathers of the sparse path (its feature-to-units table: flyhash_bytes)
        per_block += SPARSE_CHUNK * _SPARSE_ITEM_BYTES
    out = {
        "dense": n * m,
        "packed": n * ((m + 7) // 8),
        "sparse": n * k * 13 + 16 * (n + 1),
        "winners": n * k * 4 + 16 * b * k,
    }[output]
    return out + workers * per_block, 0


# --------------------------------------------------------------------------- #
# Blocks of rows                                                               #
# --------------------------------------------------------------------------- #
def _host_rows(X):
    """``X`` on the host, CSR when sparse (row slices are cheap)."""
    X = to_host(X)
    if sp.issparse(X) and X.format != "csr":
        X = X.tocsr()
    return X


def _block_rows(m):
    return max(1, BLOCK_BYTES // (4 * m))


def _sparse_enough(X):
    """True when sparse ``X`` pays to be hashed from its stored entries (:data:`SPARSE_DENSITY`)."""
    return sp.issparse(X) and X.nnz <= SPARSE_DENSITY * X.shape[0] * X.shape[1]


def _units_by_feature(fh):
    """``(indptr, units)``: for every feature, the units that read it (``components_`` by columns).

    Cached with the estimator until refit (:meth:`~sknn_gpu.base.DeviceMixin._derived`).
    """

    def build(components):
        by_feature = components.tocsc()
        return by_feature.indptr.astype(np.int64), by_feature.indices.astype(np.int64)

    return fh._derived(("_units_by_feature", "cpu"), fh.components_, build)


def _sparse_activations(fh, Xb, table):
    """float32 (b, m) activations of a CSR block from its stored entries (the dense path's bits).

    Every stored ``x[r, j]`` is added to the activation of each unit reading ``j``, in
    the order of the entries (ascending ``j`` within a row), by :func:`numpy.add.at`,
    in chunks of at most :data:`SPARSE_CHUNK` contributions.
    """
    if not Xb.has_sorted_indices:
        Xb = Xb.sorted_indices()
    b, m = Xb.shape[0], fh.n_components_
    A = np.zeros(b * m, dtype=np.float32)
    indptr, units = table
    fan = np.diff(indptr)[Xb.indices]  # contributions of every stored entry
    rows = np.repeat(np.arange(b, dtype=np.int64), np.diff(Xb.indptr))
    values = np.asarray(Xb.data, dtype=np.float32)
    first = indptr[Xb.indices]
    ends = np.cumsum(fan)
    start, nnz = 0, Xb.nnz
    while start < nnz:  # loop over chunks of entries, not over samples
        done = int(ends[start - 1]) if start else 0
        stop = max(start + 1, int(np.searchsorted(ends, done + SPARSE_CHUNK, side="right")))
        cnt = fan[start:stop]
        entry = np.repeat(np.arange(start, stop), cnt)
        offset = np.arange(entry.size) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        np.add.at(A, rows[entry] * m + units[first[entry] + offset], values[entry])
        start = stop
    return A.reshape(b, m)


def _activations(fh, Xb, table=None):
    """float32 (b, m) activations of a block of rows (sequential float32 sums).

    ``table`` (:func:`_units_by_feature`) selects the sparse path for a CSR block.
    """
    if sp.issparse(Xb):
        if table is not None:
            return _sparse_activations(fh, Xb, table)
        Xb = Xb.toarray()
    XbT = np.ascontiguousarray(np.asarray(Xb, dtype=np.float32).T)
    return np.asarray(fh.components_ @ XbT).T  # (b, m) view of a C-ordered (m, b)


def _mask_block(fh, Xb, algorithm, table=None):
    A = _activations(fh, Xb, table)
    if algorithm == "bisect":
        steps = int(getattr(fh, "bisect_steps", BISECT_STEPS))  # pickles from before the parameter
        return wta_bisect_mask(np.ascontiguousarray(A), fh.k_, steps=steps)
    # a copy with rows contiguous (the product leaves them strided, and the row-wise
    # selection below runs several times faster on rows in order); -0.0 -> +0.0
    A = np.add(A, np.float32(0.0), order="C")
    return wta_exact_mask_host(A, fh.k_)


def _iter_blocks(fh, X, algorithm, progress=None, post=None):
    """Yield ``(start, rows, result)`` over the rows of host ``X``, in order: ``result`` is
    the block's bool mask, or ``post(mask)`` computed on the same worker thread (so that
    reading the winners out of the masks runs on every core too).

    ``progress(rows)`` is called as each block is handed over.
    """
    n = X.shape[0]
    b = _block_rows(fh.n_components_)
    starts = list(range(0, n, b))
    table = _units_by_feature(fh) if _sparse_enough(X) else None  # built once, before the threads

    def fn(st):
        blk = _mask_block(fh, X[st : st + b], algorithm, table)
        return st, blk.shape[0], (blk if post is None else post(blk))

    workers = min(len(starts), os.cpu_count() or 1, MAX_WORKERS)
    # SciPy/NumPy release the GIL: blocks on a thread pool when there are several
    with ThreadPoolExecutor(max_workers=workers) if workers > 1 else nullcontext() as pool:
        for st, rows, result in pool.map(fn, starts) if pool is not None else map(fn, starts):
            yield st, rows, result
            if progress is not None:
                progress(rows)


def _flat_ones(mask):
    """Flat indices of the True entries of a bool array, ascending: ``np.flatnonzero(mask)``,
    read 8 entries at a time.

    A hash's ones are rare (``k`` of ``m``), so the mask's bytes are scanned as 64-bit words
    and only the words holding a one are looked into (on a hash's masks several times
    faster than ``np.nonzero``, which also builds the row indices).
    """
    flat = np.ascontiguousarray(mask).reshape(-1)
    if flat.size % 8:
        return np.flatnonzero(flat)
    words = flat.view(np.uint64)
    hit = np.flatnonzero(words)  # words in memory order
    ones = np.flatnonzero(words[hit].view(np.uint8))  # their bytes in memory order too
    return hit[ones >> 3] * 8 + (ones & 7)


def _mask_columns(mask):
    """The column of every True entry of a bool ``(rows, m)`` mask (any layout), row by row
    and ascending within a row: ``np.nonzero(mask)[1]`` (:func:`_flat_ones`)."""
    return _flat_ones(mask) % mask.shape[1]


def _mask(fh, X, algorithm, progress=None):
    n, m = X.shape[0], fh.n_components_
    mask = np.empty((n, m), dtype=bool)
    for st, rows, blk in _iter_blocks(fh, X, algorithm, progress):
        mask[st : st + rows] = blk
    return mask


# --------------------------------------------------------------------------- #
# Winner-take-all on wide host rows                                             #
# --------------------------------------------------------------------------- #
def wta_exact_mask_host(A, k):
    """NumPy-only exact WTA (same result as :func:`~._wta.wta_exact_mask`), faster on wide rows.

    A lower bound for the k-th largest of each row is read off a sample of the
    row's first units (its order statistic a few standard deviations past the
    expected rank); only the entries above it are partitioned to find the exact
    threshold. Rows where the bound turns out too high take the full partition.
    """
    n, m = A.shape
    ns = min(m, 2048)
    if n == 0 or k == m or m < 4 * ns:
        return wta_exact_mask(A, k)
    e = ns * k / m
    r2 = int(math.ceil(e + 5.0 * math.sqrt(e * (1.0 - k / m)) + 2.0))
    if r2 >= ns:
        return wta_exact_mask(A, k)
    low = np.partition(A[:, :ns], ns - r2, axis=1)[:, ns - r2 : ns - r2 + 1]
    cand = A >= low
    # few candidates (a few hundred a row, as random rows have): their flat indices give the
    # counts and values without passes over the rows; tie-heavy blocks (constant or empty
    # rows, most units candidates) count by rows, as the indices would take 16 bytes a unit
    few = np.count_nonzero(cand) <= n * m // CANDIDATE_FRACTION
    if few:
        flat = _flat_ones(cand)
        rows = flat // m
        counts = np.bincount(rows, minlength=n)
    else:
        counts = cand.sum(axis=1)
    # rows with more candidates than an eighth of the units are tie-heavy (constant or empty
    # rows): the full partition costs them less memory than gathering their candidates
    ok = (counts >= k) & (counts <= max(k, m // CANDIDATE_FRACTION))
    if not ok.all():
        bad = np.nonzero(~ok)[0]
        mask_bad = wta_exact_mask(A[bad], k)
    width = int(counts[ok].max()) if ok.any() else k
    counts = np.where(ok, counts, 0)
    if few:
        if not ok.all():
            keep = ok[rows]
            flat, rows = flat[keep], rows[keep]
        values = A.reshape(-1)[flat]  # each row's candidates, in order
    else:
        if not ok.all():
            cand &= ok[:, None]
        values = A[cand]  # row-major: each row's candidates, in order
        rows = np.repeat(np.arange(n), counts)
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    slot = np.arange(values.size) - starts[rows]
    padded = np.full((n, width), -np.inf, dtype=A.dtype)
    padded[rows, slot] = values
    thr = np.partition(padded, width - k, axis=1)[:, width - k : width - k + 1]
    mask = A >= thr
    # entries >= thr of a row with enough candidates are all candidates (thr >= low)
    n_ge = np.bincount(rows[values >= thr[rows, 0]], minlength=n)
    tied = np.nonzero((n_ge > k) & ok)[0]
    if tied.size:
        mask[tied] = break_ties(A[tied], thr[tied], k)
    if not ok.all():
        mask[bad] = mask_bad
    return mask


def winners_from_packed(packed, m, k):
    """(n, ceil(m/8)) packed bits with k ones per row -> (n, k) int32 indices (host helper)."""
    bits = np.unpackbits(np.asarray(packed), axis=1, count=m)
    return np.nonzero(bits)[1].astype(np.int32).reshape(bits.shape[0], k)
