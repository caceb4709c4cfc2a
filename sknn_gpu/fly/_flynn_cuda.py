"""FlyNN CUDA engine: our kernels in ``sknn_gpu/_kernels/flynn.cu``.

Same functions and signatures as :mod:`._flynn_cpu` and the same results bit for
bit (integer counts; novelties summed in the same order with ``__dadd_rn``; the
normalisation in the warp order the CPU engine reproduces). Inputs and results are
CuPy arrays. Grids are sized from the device's SM count (:func:`device_limits`);
every kernel loops over its work with a grid stride, so the results do not depend
on the grid.
"""

from __future__ import annotations

import numpy as np

from .._backend import device_limits, get_cupy
from .._kernels import get_function
from ._encoding import (
    QUANTILE_BINS,
    QUANTILE_KNOTS,
    RECEPTOR_SPREAD,
    THERMOMETER_SLOPE,
    THERMOMETER_THRESHOLDS,
    encoding_width,
)

__all__ = [
    "row_normalize",
    "encode",
    "quantile_encode",
    "count",
    "weighted_count",
    "novelty",
    "argmin",
    "nearest_class",
    "work_bytes",
]

THREADS = 256
#: Most classes for which predict fuses novelty and arg-min (per-class sums in registers).
FUSED_MAX_CLASSES = 32


def _grid(n_items, items_per_block, blocks_per_sm):  # pragma: no cover - needs a GPU
    """One-dimensional grid: enough blocks for the work, at most ``blocks_per_sm`` per SM."""
    full = device_limits().sm_count * blocks_per_sm
    return (max(1, min(full, (int(n_items) + items_per_block - 1) // items_per_block)),)


def _launch(name, n_items, args, **defines):  # pragma: no cover - needs a GPU
    """Launch ``flynn.cu`` kernel ``name`` over ``n_items`` grid-stride items (none: no launch).

    ``THREADS`` threads per block, up to 16 blocks per SM.
    """
    if n_items:
        get_function("flynn", name, **defines)(_grid(n_items, THREADS, 16), (THREADS,), args)


def row_normalize(X):  # pragma: no cover - needs a GPU
    """Centre every row and scale it to unit L2 norm; one warp per row (``flynn.cu``).

    Parameters
    ----------
    X : cupy.ndarray of shape (n, d), float32 or float64

    Returns
    -------
    Z : cupy.ndarray of X's dtype and shape
    """
    cp = get_cupy()
    X = cp.ascontiguousarray(X)
    out = cp.empty_like(X)
    n, d = X.shape
    name = "flynn_row_normalize_f32" if X.dtype == cp.float32 else "flynn_row_normalize_f64"
    get_function("flynn", name)(_grid(n, THREADS // 32, 64), (THREADS,), (X, out, np.int64(n), np.int64(d)))
    return out


_ENC_KIND = {"thermometer": 0, "population": 1, "complement": 2}


def _encoding_args(encoding, receptors):
    """(ENC_KIND, ENC_WIDTH, the six constants) of an encoding for ``flynn.cu``'s encode kernels."""
    kind = _ENC_KIND[encoding]
    width = encoding_width(encoding, receptors)
    if kind == 0:
        consts = (*THERMOMETER_THRESHOLDS, THERMOMETER_SLOPE)
    else:  # the population's half-width (its centres are computed in the kernel); complement reads none
        consts = (0.0, 0.0, 0.0, 0.0, 0.0, RECEPTOR_SPREAD / (width - 1))
    return kind, width, tuple(map(np.float64, consts))


def encode(X, encoding, low=None, span=None, clip=False, receptors=5):  # pragma: no cover - needs a GPU
    """:func:`sknn_gpu.fly._encoding.encode` in one kernel, straight to the float32 the hash
    reads (the reference's float64 or input-dtype result, cast): one pass instead of a
    dozen CuPy element-wise passes and a float64 copy. Same bits as the reference
    followed by a float32 cast (``flynn.cu``: ``flynn_encode``)."""
    cp = get_cupy()
    if X.strides[1] != X.itemsize:
        X = cp.ascontiguousarray(X)
    n, d = X.shape
    kind, width, consts = _encoding_args(encoding, receptors)
    out = cp.empty((n, width * d), dtype=cp.float32)
    t = "float" if X.dtype == cp.float32 else "double"
    ranged = low is not None
    kern = get_function(
        "flynn",
        "flynn_encode",
        ENC_T=t,
        ENC_C="double" if ranged else t,
        ENC_KIND=kind,
        ENC_WIDTH=width,
        RANGE=int(ranged),
    )
    ldx = np.int64(X.strides[0] // X.itemsize)
    # no range: low and span are never read (None goes as a null pointer); the six
    # constants go by value (no upload per batch)
    args = (X, np.int64(n), np.int64(d), ldx, low, span, np.int32(clip), *consts, out)
    if n * d:
        kern(_grid(n * d, THREADS, 16), (THREADS,), args)
    return out


#: ``quantile_encode``: features per block (their knots in shared memory, 8 bytes each),
#: and the rows each block goes over.
QUANTILE_TILE = 16
QUANTILE_SLICE_ROWS = 512


def quantile_encode(X, knots, encoding, receptors=5):  # pragma: no cover - needs a GPU
    """:func:`quantile_position` followed by :func:`encode` of the positions in one kernel
    (``flynn_quantile_encode``): the same float32 bits, without the float64 positions in
    between, and the bisection in shared memory. ``knots`` is the (n_features, K) float64
    CuPy array of the features' quantiles."""
    cp = get_cupy()
    if X.strides[1] != X.itemsize:
        X = cp.ascontiguousarray(X)
    t = {cp.dtype(cp.float32): "float", cp.dtype(cp.float64): "double"}.get(X.dtype)
    if t is None:
        X, t = X.astype(cp.float64), "double"
    n, d = X.shape
    kind, width, consts = _encoding_args(encoding, receptors)
    out = cp.empty((n, width * d), dtype=cp.float32)
    K = int(knots.shape[1])
    if 8 * K > 48 * 1024:  # a feature's knots beyond the default shared memory: two kernels
        return encode(quantile_position(X, knots), encoding, receptors=receptors)
    # the default 48 KiB of shared memory per block holds the tile's knots
    tile = max(1, min(QUANTILE_TILE, (48 * 1024) // (8 * K), d))
    kern = get_function(
        "flynn", "flynn_quantile_encode", ENC_T=t, ENC_C="double", ENC_KIND=kind, ENC_WIDTH=width, RANGE=0
    )
    if n * d:
        grid = (-(-d // tile), min(65535, -(-n // QUANTILE_SLICE_ROWS)))
        ldx = np.int64(X.strides[0] // X.itemsize)
        args = (X, np.int64(n), np.int64(d), ldx, knots, np.int32(K), np.int32(tile), *consts, out)
        kern(grid, (THREADS,), args, shared_mem=8 * tile * K)
    return out


def quantile_position(X, knots):  # pragma: no cover - needs a GPU
    """:func:`sknn_gpu.fly._encoding.quantile_position` in one kernel (float64 out, same bits):
    ``knots`` is the (n_features, K) float64 CuPy array of the features' quantiles."""
    cp = get_cupy()
    if X.strides[1] != X.itemsize:
        X = cp.ascontiguousarray(X)
    n, d = X.shape
    out = cp.empty((n, d), dtype=cp.float64)
    t = {cp.dtype(cp.float32): "float", cp.dtype(cp.float64): "double"}.get(X.dtype)
    if t is None:
        X, t = X.astype(cp.float64), "double"
    kern = get_function("flynn", "flynn_quantile_position", QUANT_T=t)
    ldx = np.int64(X.strides[0] // X.itemsize)
    if n * d:
        args = (X, np.int64(n), np.int64(d), ldx, knots, np.int32(knots.shape[1]), out)
        kern(_grid(n * d, THREADS, 16), (THREADS,), args)
    return out


#: ``column_histogram``: threads per block, and the fewest rows a block counts (its bins are
#: zeroed and flushed once per block, so a block reads at least about as many values as it
#: has bins).
HIST_THREADS = 1024
HIST_MIN_ROWS = 8192
#: ``quantile_knots``: threads per block (one block per feature; ``flynn.cu``'s KNOT_THREADS).
KNOT_THREADS = 256
#: The C type the histogram kernel reads for each NumPy dtype (any other is made float64).
_HIST_TYPES = {
    "float32": "float",
    "float64": "double",
    "int8": "signed char",
    "int16": "short",
    "int32": "int",
    "int64": "long long",
    "uint8": "unsigned char",
    "uint16": "unsigned short",
    "uint32": "unsigned int",
    "uint64": "unsigned long long",
    "bool": "bool",
}


def column_histogram(X, low, span, hist=None, weights=None):  # pragma: no cover - needs a GPU
    """Add the per-feature counts of the dense rows ``X`` (CuPy, any real dtype) over the
    :data:`QUANTILE_BINS` equal bins of each feature's range to ``hist``, in one kernel
    (``flynn.cu``: ``flynn_column_histogram``) and without a temporary per value.

    ``low`` and ``span`` are float64 CuPy arrays (one entry per feature; ``span`` already 1
    where the range is empty, as :func:`._encoding.column_histogram` makes it); ``weights``
    (float64 CuPy, one per row, on FlyNN's fixed-point grid) or None. ``hist`` is the flat
    accumulator of :func:`histogram_to_host` (None: a new one, zeroed): ``n_features *
    QUANTILE_BINS`` uint64 counts (float64 sums with ``weights``) followed by the number of
    NaN values seen. The bins are the reference's, bit for bit. Returns ``hist``.
    """
    cp = get_cupy()
    n, d = X.shape
    B = QUANTILE_BINS
    weighted = weights is not None
    if hist is None:
        hist = cp.zeros(d * B + 1, dtype=cp.float64 if weighted else cp.uint64)
    if n == 0 or d == 0:
        return hist
    ctype = _HIST_TYPES.get(X.dtype.name)
    if ctype is None:
        X, ctype = X.astype(cp.float64), "double"
    if X.strides[1] != X.itemsize or X.strides[0] % X.itemsize:
        X = cp.ascontiguousarray(X)
    bin_bytes = B * (8 if weighted else 4)
    limits = device_limits()
    # features per block: a 32-byte sector of a row (8 float32 or 4 float64 values) as far
    # as shared memory allows, as a power of two (few compiled variants)
    tile = min(8, max(1, 32 // X.itemsize), max(1, limits.smem_per_block_optin // bin_bytes), d)
    tile = 1 << (int(tile).bit_length() - 1)
    shared = tile * bin_bytes
    kern = get_function(
        "flynn",
        "flynn_column_histogram",
        HIST_T=ctype,
        HIST_TILE=tile,
        HIST_BINS=B,
        HIST_WEIGHTED=int(weighted),
    )
    if shared > 48 * 1024 and kern.max_dynamic_shared_size_bytes < shared:
        kern.max_dynamic_shared_size_bytes = shared
    col_tiles = -(-d // tile)
    per_sm = max(1, min(limits.smem_per_sm // (shared + 1024), limits.max_threads_per_sm // HIST_THREADS))
    # row slices: about four waves of blocks, each slice at least HIST_MIN_ROWS rows and
    # fewer than 2**30 (its 32-bit counters cannot overflow)
    slices = max(1, min(-(-4 * limits.sm_count * per_sm // col_tiles), n // HIST_MIN_ROWS))
    slices = max(slices, -(-n // 2**30))
    rows = -(-n // slices)
    slices = -(-n // rows)
    ldx = np.int64(X.strides[0] // X.itemsize)
    if weighted:
        weights = cp.ascontiguousarray(weights, dtype=cp.float64)
    args = (X, np.int64(n), np.int64(d), ldx, low, span, weights, hist, np.int64(rows))
    kern((col_tiles, slices), (HIST_THREADS,), args, shared_mem=shared)
    return hist


def _refuse_nan(n_nan):
    """The ValueError of a histogram that met NaN values (the NumPy reference refuses them too)."""
    if n_nan:
        raise ValueError(
            f"input_range='quantile': {int(n_nan)} values of X are NaN; a NaN has no "
            "place among the quantiles. Impute or drop them first."
        )


def histogram_to_host(hist, n_features):  # pragma: no cover - needs a GPU
    """The host histogram (int64, or float64 sums for a weighted one; shape (n_features,
    :data:`QUANTILE_BINS`)) of :func:`column_histogram`'s accumulator ``hist``, in one copy;
    ValueError when a value was NaN (it has no bin)."""
    host = hist.get()
    _refuse_nan(host[-1])
    counts = host[:-1].reshape(int(n_features), QUANTILE_BINS)
    return counts if counts.dtype == np.float64 else counts.view(np.int64)


def quantile_knots(hist, low, high):  # pragma: no cover - needs a GPU
    """:func:`._encoding.quantile_knots` of :func:`column_histogram`'s accumulator ``hist``
    on the device (``flynn_quantile_knots``, one block per feature, the same bits), over the
    range ``[low, high]`` (host float64): host float64 (n_features, :data:`QUANTILE_KNOTS`),
    in one copy (the histogram stays on the device); ValueError when a value was NaN."""
    cp = get_cupy()
    d, K, B = low.shape[0], QUANTILE_KNOTS, QUANTILE_BINS
    width = (high - low) / B  # the reference's bin widths, computed as it does
    levels = np.arange(K, dtype=np.float64) / (K - 1)
    out = cp.empty(d * K + 1, dtype=cp.float64)  # the knots, then the NaN count
    acc = "double" if hist.dtype == cp.float64 else "long long"  # uint64 counts below 2**63
    kern = get_function("flynn", "flynn_quantile_knots", KNOT_ACC=acc, HIST_BINS=B)
    grid = (max(1, min(d, device_limits().sm_count * 8)),)
    args = (hist, np.int64(d), cp.asarray(low), cp.asarray(width), cp.asarray(levels), np.int32(K), out)
    kern(grid, (KNOT_THREADS,), args)
    host = out.get()
    _refuse_nan(host[-1])
    return host[:-1].reshape(d, K)


def count(winners, labels, n_classes, n_components):  # pragma: no cover - needs a GPU
    """Integer counts (n_classes, m): how often each cell wins per class (atomic adds)."""
    cp = get_cupy()
    winners = cp.ascontiguousarray(winners, dtype=cp.int32)
    labels = cp.ascontiguousarray(labels, dtype=cp.int32)
    counts = cp.zeros((n_classes, n_components), dtype=cp.int64)
    n, k = winners.shape
    _launch("flynn_count", n * k, (winners, labels, counts, np.int64(n), np.int32(k), np.int64(n_components)))
    return counts


def weighted_count(winners, labels, weights, n_classes, n_components):  # pragma: no cover - needs a GPU
    """Weighted counts (n_classes, m), float64: :func:`._flynn_cpu.weighted_count` with CuPy's
    ``bincount`` (atomic float64 adds). The order of the adds varies, the result does not:
    for weights on FlyNN's fixed-point grid (:mod:`._weights`) every partial sum is exact."""
    cp = get_cupy()
    m = n_components
    flat = labels.astype(cp.int64)[:, None] * m + winners.astype(cp.int64)
    w = cp.broadcast_to(weights.astype(cp.float64)[:, None], flat.shape).ravel()
    return cp.bincount(flat.ravel(), weights=w, minlength=n_classes * m).reshape(n_classes, m)


def novelty(winners, filters_t):  # pragma: no cover - needs a GPU
    """Novelty (n, n_classes), one thread per (sample, class), summed over the winners in order."""
    cp = get_cupy()
    winners = cp.ascontiguousarray(winners, dtype=cp.int32)
    n, k = winners.shape
    n_classes = filters_t.shape[1]
    out = cp.empty((n, n_classes), dtype=cp.float64)
    args = (winners, filters_t, out, np.int64(n), np.int32(k), np.int32(n_classes))
    _launch("flynn_novelty", n * n_classes, args)
    return out


def novelty_rows(winners, filters_t, out, start, step):  # pragma: no cover - needs a GPU
    """:func:`novelty` of the rows ``start, start + step, ...`` of ``winners`` (int32 (n, k),
    C-ordered), written to the same rows of ``out`` (float64 (n, n_classes)); the other rows
    are left as they are. The same sums, in the same order (``flynn_novelty_rows``)."""
    n, k = winners.shape
    n_rows = max(0, -(-(n - int(start)) // int(step)))
    n_classes = filters_t.shape[1]
    args = (winners, filters_t, out, np.int64(n_rows), np.int32(k), np.int32(n_classes))
    _launch("flynn_novelty_rows", n_rows * n_classes, (*args, np.int64(start), np.int64(step)))
    return out


def calibration_losses(novelty, labels, weights, scales):  # pragma: no cover - needs a GPU
    """The held-out log-loss of ``softmax(-novelty * t)`` for each ``t`` of ``scales`` (the
    candidate scales over ``k``), summed over the rows with their ``weights`` (None: 1 each),
    then the summed weight of the rows whose least novel class is their label: a float64
    CuPy array of ``len(scales) + 1`` values, left on the device (``flynn_calibration_losses``
    per row and scale, then one sum per scale in a fixed order)."""
    cp = get_cupy()
    novelty = cp.ascontiguousarray(novelty, dtype=cp.float64)
    labels = cp.ascontiguousarray(labels, dtype=cp.int32)
    if weights is not None:
        weights = cp.ascontiguousarray(weights, dtype=cp.float64)
    n, n_classes = novelty.shape
    scales = cp.asarray(np.asarray(scales, dtype=np.float64))
    per_row = cp.empty((scales.size + 1, n), dtype=cp.float64)
    sizes = (np.int32(scales.size), np.int64(n), np.int32(n_classes))
    _launch("flynn_calibration_losses", per_row.size, (novelty, labels, weights, scales, *sizes, per_row))
    return per_row.sum(axis=1)


def argmin(novelty):  # pragma: no cover - needs a GPU
    """Index (int64) of the least novel class per row; ties go to the lowest class index."""
    cp = get_cupy()
    n, n_classes = novelty.shape
    out = cp.empty(n, dtype=cp.int64)
    _launch("flynn_argmin", n, (novelty, out, np.int64(n), np.int32(n_classes)))
    return out


def nearest_class(winners, filters_t, out=None):  # pragma: no cover - needs a GPU
    """``argmin(novelty(winners, filters_t))``, written into ``out`` when given.

    With at most ``FUSED_MAX_CLASSES`` classes one kernel computes the per-class
    sums (same order, same rounding as :func:`novelty`) and the arg-min (same tie
    rule as :func:`argmin`) without writing the novelty matrix.
    """
    n_classes = filters_t.shape[1]
    if n_classes > FUSED_MAX_CLASSES:
        idx = argmin(novelty(winners, filters_t))
        if out is None:
            return idx
        out[...] = idx
        return out
    cp = get_cupy()
    winners = cp.ascontiguousarray(winners, dtype=cp.int32)
    n, k = winners.shape
    if out is None:
        out = cp.empty(n, dtype=cp.int64)
    args = (winners, filters_t, out, np.int64(n), np.int32(k))
    group = 1 << max(0, int(n_classes) - 1).bit_length()  # lanes per sample: a power of two >= n_classes
    _launch("flynn_predict", n * group, args, N_CLASSES=int(n_classes), N_GROUP=group)
    return out


def work_bytes(n_rows, n_features, k, n_classes, n_components):
    """Bytes one batch of ``n_rows`` allocates here (normalise, count, novelty).

    Returns
    -------
    host, device : int
        Host bytes (0) and GPU bytes: the batch moved to the GPU and its normalised
        copy, the per-batch count table, the novelty block.
    """
    n, d, c, m = int(n_rows), int(n_features), int(n_classes), int(n_components)
    return 0, 2 * n * d * 8 + n * k * 4 + c * m * 8 + n * c * 8
