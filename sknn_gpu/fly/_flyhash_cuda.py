"""FlyHash CUDA engine: our kernels in ``sknn_gpu/_kernels/flyhash.cu``.

Same functions and signatures as :mod:`._flyhash_cpu` and the same results bit for
bit: :func:`transform`, :func:`winners`, :func:`work_bytes`. ``fh`` is a fitted
:class:`~sknn_gpu.fly.FlyHashTransformer`; its connection table ``_kernel_index``
goes to the GPU once (``fh._device_copy``). Results are CuPy arrays.

One fused kernel (``flyhash_fused``) computes the activations of a block of rows in
registers and selects the winners without writing the ``n x m`` activations; the
rare rows it cannot finish (ties spread over too many units, or a window miss) are
flagged and finished here from materialised activations with the same exact
selection as the CPU engine (:mod:`._wta`). Float input under ``'exact'`` takes it
beyond :data:`BAND_MAX_CONNECTIONS` / :data:`BAND_MAX_UNITS`; within them it is
hashed from a split-float16 tensor-core product with an exact check of the units
near the threshold (:func:`_band_words`), and the rows that check cannot settle go
to the fused kernel.

The tensor-core path (``_kernels/flyhash_select.cu``) serves integer-valued input
under ``precision='exact'`` / ``'integer'`` and every input under ``'fast'``: the
rows as float16 times the dense float16 0/1 projection in one cuBLAS product with
float32 accumulation, a chunk of rows at a time (:data:`GEMM_CHUNK_BYTES` of
activations, written once and read once), then ``fly_select``: an exact top-k per row with
ties to the lower index, written as the same packed words. For whole numbers of
magnitude <= 2048 (exact in float16) and fewer than 8192 connections every
activation is an integer below 2**24, summed exactly in any order: the same bits as
the CPU's sequential float32 sums, so the hash is bit-identical. The product writes
them in float16 after centring each row on a whole number (integers near 0): exact
winners whenever a row's k-th largest is within +-2047, which ``fly_select`` checks
per row; the other rows are hashed again from float32 activations. Under ``'fast'``
each row is centred on its mean (a shift that moves every activation alike: every
unit sums the same number of inputs) and scaled by a power of two that bounds its
activations below float16's largest value, and the product writes them in float16
(half the bytes to write and to select from; that rounding, and the inputs', is the
precision ``'fast'`` gives up).

Size: this module stays whole (a little over 800 lines) because it is one engine
behind one interface: :func:`words` picks the path per batch and the paths hand rows
to one another (the band path gives the rows it cannot settle to the fused kernel,
whose leftovers the materialised fallback finishes), they share the launch
configuration and the packed-word outputs, and the GPU tests set their tuning
constants (``BAND_*``, ``_window_cap``) on this one module.
"""

from __future__ import annotations

import os

import numpy as np
import scipy.sparse as sp

from .._backend import device_limits, get_cupy, is_cupy_sparse, is_device_array
from .._kernels import get_function
from .._mt19937 import MT_N as _MT_N
from .._mt19937 import mt19937_outputs
from ._flyhash_cpu import INTEGER_LIMIT
from ._flyhash_cpu import integer_valued as _host_integer_valued
from ._wta import BISECT_STEPS, wta_bisect_mask, wta_exact_mask

__all__ = ["transform", "winners", "work_bytes", "words", "integer_valued", "draw_block", "INTEGER_LIMIT"]

#: Fine/coarse histogram bins per row (the kernel's NB).
NB = 512
#: Threads per block of the fused kernel.
NTHREADS = 1024
#: Target bytes of one dense float32 input batch moved to the GPU.
BATCH_BYTES = 256 * 2**20
#: Target bytes of one float32 activation block on the fallback paths.
BLOCK_BYTES = 512 * 2**20
#: Target bytes of the activations (float16 or float32) of one chunk on the tensor-core path
#: (written by the product, read once by the selection). Measured on an H100 at the
#: FashionMNIST shape: the product needs ~2,000+ rows to run near its peak, which
#: matters more than keeping a chunk in L2 (docs/performance.md).
#: ``SKNN_GPU_FLYHASH_CHUNK_MB`` overrides it (tuning).
GEMM_CHUNK_BYTES = 256 * 2**20
#: Most features whose projection :func:`draw_block` draws on the GPU (``floyd_resolve``
#: keeps 256 words of membership bits per thread); wider inputs are drawn on the host.
FLOYD_MAX_FEATURES = 32 * 256
#: Bound on the fused kernel's grid (one resident block per SM) used by
#: :func:`work_bytes` to count the window lists without asking the device.
WINDOW_BLOCKS_BOUND = 256
#: Threads per block of the selection kernel.
SEL_NT = 512
#: Most connections for which the tensor-core product of integer-valued input is
#: exact: whole numbers up to INTEGER_LIMIT = 2**11 are exact in float16, and S of
#: them sum below 2**24 (exact in float32) when S < 2**13.
MAX_INTEGER_CONNECTIONS = 8191


# --------------------------------------------------------------------------- #
# Engine interface                                                              #
# --------------------------------------------------------------------------- #
def transform(fh, X, output, algorithm, progress=None, precision="exact"):  # pragma: no cover - needs a GPU
    """Hash the rows of ``X`` on the GPU: :func:`._flyhash_cpu.transform`'s contract.

    ``X`` may be on the host or the GPU (host rows are moved batch by batch); the
    results are CuPy arrays. ``progress(rows)`` is called after each input batch.
    """
    cupy = get_cupy()
    n = X.shape[0]
    m, k = fh.n_components_, fh.k_
    w = words(fh, X, algorithm, progress=progress, precision=precision)
    if output == "packed":
        return cupy.ascontiguousarray(w.view(cupy.uint8)[:, : (m + 7) // 8])
    if output == "dense":
        return _words_to_dense(w, m)
    if algorithm == "exact":
        return cupy.arange(0, n * k + 1, k, dtype=cupy.int64), _indices(w, k, None).ravel()
    indptr = cupy.zeros(n + 1, dtype=cupy.int64)
    cupy.cumsum(_row_counts(w), out=indptr[1:])
    return indptr, _indices(w, k, indptr)


def winners(fh, X, progress=None, precision="exact", integer_input=None):  # pragma: no cover - needs a GPU
    """:func:`._flyhash_cpu.winners` on the GPU: int32 (n, k_) CuPy winner indices.

    ``integer_input=False`` says the caller knows ``X`` is not integer-valued (FlyNN's
    normalised rows): ``'exact'`` then skips the per-batch integer check (a kernel and
    a wait) and goes straight to the fused kernel.
    """
    w = words(fh, X, "exact", progress=progress, precision=precision, integer_input=integer_input)
    return _indices(w, fh.k_, None)


def integer_valued(X):  # pragma: no cover - needs a GPU
    """True when every entry of ``X`` is a whole number of magnitude <= :data:`INTEGER_LIMIT`.

    One read of the input on the device (``fly_integer_check``, on the float32 bits
    of the values as the hash rounds them: subnormals are not integers); host input
    is checked on the host.
    """
    if not is_device_array(X):
        return _host_integer_valued(X)
    # batch by batch as transform reads it (float32, dense): memory stays bounded
    return not any(_int_check_flag(Xb) for _, Xb in _device_batches(X, X.shape[1]))


def _with_margin(mean):
    """Raw outputs to generate for ``mean`` expected ones: 1 % more, 8 standard deviations
    and 4,096 besides (running out only sends the block back to the host)."""
    return int(mean * 1.01 + 8.0 * mean**0.5) + 4096


def _raw_count(n, d, s):
    """Raw MT19937 outputs to generate for a block of ``n`` units: what the masked
    rejection needs on average, with :func:`_with_margin`."""
    highs = np.arange(d - s, d, dtype=np.float64)
    masks = np.array([(1 << int(j).bit_length()) - 1 for j in range(d - s, d)], dtype=np.float64)
    return _with_margin(float(np.sum(n * (masks + 1.0) / (highs + 1.0))))


def draw_block_bytes(n, s):
    """Device bytes :func:`draw_block` allocates for ``n`` units of ``s`` connections, from
    the sizes alone: a mask keeps more than half of the outputs, so :func:`_raw_count` is
    at most ``_with_margin(2 n s)``; then the outputs, their generations' keys (at most
    the outputs plus 3 generations), the draws and the picks."""
    count = _with_margin(2.0 * n * s)
    return 4 * count + 4 * (count + 3 * _MT_N) + 8 * n * s


def draw_block(rng, n, d, s):  # pragma: no cover - needs a GPU
    """One block of the projection drawn on the GPU: :func:`._flyhash._draw_connections`' ``draw``.

    The same draws as ``rng.randint(0, j + 1, size=n)`` for ``j = d - s .. d - 1``
    (NumPy's legacy RandomState stream is frozen: MT19937 outputs and masked
    rejection, reproduced by ``mt_raw`` and ``mt_draws``), Floyd's collisions resolved
    by ``floyd_resolve``; ``rng`` is then set to the state NumPy would have reached.
    Returns the (n, s) int32 sorted picks on the host, or None (the host draws) above
    :data:`FLOYD_MAX_FEATURES` features, for a generator that is not a legacy MT19937
    RandomState, or if the generated outputs ran out (far beyond any realistic draw).
    """
    if d > FLOYD_MAX_FEATURES:
        return None
    drawn = mt19937_outputs(rng, _raw_count(n, d, s))
    if drawn is None:  # not a legacy MT19937 RandomState: its stream is not MT19937's
        return None
    raw, advance = drawn
    cupy = get_cupy()
    draws = cupy.empty((s, n), dtype=cupy.int32)
    consumed = cupy.empty(1, dtype=cupy.int64)
    get_function("flyhash", "mt_draws")(
        (1,), (1024,), (raw, np.int64(raw.size), np.int32(n), np.int32(s), np.int32(d), draws, consumed)
    )
    picks = cupy.empty((n, s), dtype=cupy.int32)
    get_function("flyhash", "floyd_resolve")(
        ((n + 127) // 128,), (128,), (draws, np.int64(n), np.int32(d), np.int32(s), picks)
    )
    used = int(consumed.get()[0])
    if used < 0:
        return None
    advance(used)
    return picks.get()


def work_bytes(n_samples, n_features, n_components, k, output, sparse=False):
    """:func:`._flyhash_cpu.work_bytes` for this engine.

    Host: a batch of host input made dense, and the result if it goes back to the
    host. GPU: the input batch, the packed words, the fallback block, the result.
    ``sparse`` changes nothing here: sparse batches are made dense batch by batch,
    which the input batch already counts. The tensor-core path is always counted (it
    serves integer-valued input whatever the precision): the float16 projection, the
    batch in float16 and one chunk of activations.
    """
    n, d, m = int(n_samples), int(n_features), int(n_components)
    if n == 0:
        return 0, 0
    mw = (m + 31) // 32
    rows = min(n, max(1, BATCH_BYTES // (4 * max(1, d))))
    batch = rows * d * 4
    fallback = min(n, max(1, BLOCK_BYTES // (4 * m))) * m * 11  # activations, mask, packing
    dp = _half_width(d)
    chunk = max(_gemm_chunk_rows(m, n, 4) * 4, _gemm_chunk_rows(m, n, 2) * 2) * m  # float32 or float16
    # integer rows redone from float32: their flags and list, a gathered chunk of rows and its words
    chunk += 12 * rows + _gemm_chunk_rows(m, n, 4) * (2 * dp + 4 * mw)
    # float rows (split float16: two columns per feature); rows the fused kernel redoes
    chunk += rows * dp * 2 + rows * (4 * d + 4 * mw)
    fallback = max(fallback, m * dp * 6 + rows * dp * 2 + chunk)  # P, and [P | P] for float rows
    fallback += min(-(-n // 32), WINDOW_BLOCKS_BOUND) * 32 * _window_cap(m, k) * 8
    out = {
        "dense": 2 * n * m,
        "packed": n * ((m + 7) // 8),
        "sparse": n * k * 8 + 16 * (n + 1),
        "winners": n * k * 4,
    }[output]
    return batch + out, batch + 4 * n * mw + fallback + out


def words(
    fh, X, algorithm, stats=None, progress=None, precision="exact", integer_input=None
):  # pragma: no cover - needs a GPU
    """uint32 (n, ceil(m/32)) packed winners on the GPU.

    ``precision`` (``algorithm='exact'`` only): ``'exact'`` hashes each input batch
    that is integer-valued on tensor cores and the others with the fused kernel (the
    same bits either way); ``'integer'`` is ``'exact'`` for input the estimator
    checked is integer-valued; ``'fast'`` hashes everything on tensor cores.
    ``integer_input=False`` (the caller knows the input is not integer-valued) skips
    the per-batch check under ``'exact'``.
    ``stats`` (a dict), when given, receives ``fallback_rows``: rows the fused
    kernel flagged and the materialised path finished, ``tensor_rows``: rows
    hashed on tensor cores, and ``float32_rows``: integer-valued rows of those that
    the float16 activations could not decide exactly (hashed again from float32
    activations). ``progress``, when given, is
    called with the rows of each input batch once the batch is done: the batch is
    waited for first (the fused kernel's flag count already waits, the materialised
    path does not), so the report is true. Without it the launches are unchanged.
    """
    cupy = get_cupy()
    n, d = X.shape
    mw = (fh.n_components_ + 31) // 32
    out_words = cupy.empty((n, mw), dtype=cupy.uint32)
    idx = fh._device_copy("_kernel_index", "cuda")
    for st, Xb in _device_batches(X, d):
        b = Xb.shape[0]
        out = out_words[st : st + b]
        if algorithm == "exact" and _on_tensor_cores(fh, Xb, precision, integer_input):
            redone = _tensor_words(fh, Xb, out, fast=precision == "fast")
            if stats is not None:
                stats["tensor_rows"] = stats.get("tensor_rows", 0) + b
                stats["float32_rows"] = stats.get("float32_rows", 0) + redone
            if progress is not None:
                cupy.cuda.get_current_stream().synchronize()
                progress(b)
            continue
        if algorithm == "exact" and _band_ok(fh):
            redone = _band_words(fh, Xb, out, idx, stats)
            if stats is not None:
                stats["band_rows"] = stats.get("band_rows", 0) + b
                stats["band_redone_rows"] = stats.get("band_redone_rows", 0) + redone
        else:
            _fused_block(fh, Xb, out, idx, algorithm, stats)
        if progress is not None:
            cupy.cuda.get_current_stream().synchronize()
            progress(b)
    return out_words


# --------------------------------------------------------------------------- #
# Tensor-core path                                                              #
# --------------------------------------------------------------------------- #
def _fused_block(fh, Xb, out, idx, algorithm, stats=None):  # pragma: no cover - needs a GPU
    """Packed winners of a dense float32 device block with the fused kernel (``'exact'``;
    rows it flags, and ``'bisect'``, through the materialised path)."""
    cupy = get_cupy()
    b, d = Xb.shape
    m, k = fh.n_components_, fh.k_
    mw = out.shape[1]
    config = _fused_config(d, b) if algorithm == "exact" else None
    todo = None  # every row through the materialised path
    if config is not None:
        rows, dyn = config
        kern = get_function("flyhash", "flyhash_fused", ROWS=rows, NB=NB, NTHREADS=NTHREADS, **_defines(fh))
        _set_dynamic_smem(kern, dyn)
        flags = cupy.empty(b, dtype=cupy.int32)
        grid = min(-(-b // rows), device_limits().sm_count)  # resident blocks, one per SM
        gcap = _window_cap(m, k)
        window = cupy.empty(grid * rows * gcap, dtype=cupy.uint64)
        kern(
            (grid,), (NTHREADS,),
            (Xb, np.int64(b), np.int32(d), np.int64(Xb.strides[0] // 4), idx, np.int32(m), np.int32(mw),
             np.int32(k), np.int32(_sample_words(mw)), out, flags, window, np.int32(gcap)),
            shared_mem=dyn,
        )  # fmt: skip
        # one small reduction + sync; the costlier nonzero only when rows were flagged
        n_flagged = int(cupy.count_nonzero(flags))
        if stats is not None:
            stats["fallback_rows"] = stats.get("fallback_rows", 0) + n_flagged
        if n_flagged == 0:
            return
        todo = cupy.nonzero(flags)[0]
    _finish_rows(fh, Xb, out, todo, algorithm)


#: Float input under ``'exact'`` is hashed from a split-float16 tensor-core product (see
#: :func:`_band_words`) when the projection has at most this many connections per unit
#: (the error bound, and so the band of units checked exactly, grows with it) ...
BAND_MAX_CONNECTIONS = 96
#: ... and at most this many units (the selection's bit mask of candidate winners).
BAND_MAX_UNITS = 65536
#: ... and when the product is not the costlier: its tensor cores multiply all ``d``
#: inputs of a row (split in two), while the fused kernel gathers ``s`` per unit, so
#: the band path is taken from ``s >= BAND_CROSSOVER_BASE + d / BAND_CROSSOVER_FEATURES``
#: connections on. Measured on an H100 (10,000 uniform rows, 8,192 units, k=256,
#: docs/performance.md): the fused kernel wins at d=784 up to s=24 and the product from
#: s=39; at d=1,568 they tie at s=39; at d=3,920 the fused kernel wins at s=39, the
#: product at s=64. (FlyNN's defaults, 3,920 encoded inputs and s=16, take the fused
#: kernel; FlyHash's FashionMNIST shape, d=784 and s=39, the product.)
BAND_CROSSOVER_BASE = 18
BAND_CROSSOVER_FEATURES = 93
#: Factor on the error bound of the approximate activations (see :func:`_band_width`).
BAND_SAFETY = 8.0


def _band_ok(fh):
    """Whether float input goes through :func:`_band_words` (else the fused kernel).

    The environment variable ``SKNN_GPU_FLYHASH_BAND`` (``0`` or ``1``) forces the
    choice within the exactness limits (tuning and benchmarks)."""
    if fh.n_connections_ > BAND_MAX_CONNECTIONS or fh.n_components_ > BAND_MAX_UNITS:
        return False
    forced = os.environ.get("SKNN_GPU_FLYHASH_BAND", "")
    if forced in ("0", "1"):
        return forced == "1"
    return fh.n_connections_ >= BAND_CROSSOVER_BASE + _half_width(fh.n_features_in_) / BAND_CROSSOVER_FEATURES


def _band_width(s):
    """Twice the bound on |approximate - exact| activation, in the scaled units of
    :func:`_band_words` (each row scaled so that its largest magnitude is below 2**15).

    The approximate activation sums ``hi + lo`` (``x = hi + lo + e``, two float16s, |e|
    <= 2**-22 |x| + 2**-25) over the unit's ``s`` inputs on tensor cores. Their
    accumulation is bounded generously: each step that adds nonzero products may lose
    up to 2**-22 of the magnitudes involved per addend (truncating alignment, as
    measured for NVIDIA's tensor cores), at most ``4 s + 1`` addend-steps, plus one
    float32 rounding (a split-K reduction, say). The exact activation (the
    CPU's sequential float32 sum) is within ``s * 2**-24`` of the magnitudes. With
    every magnitude below ``s * 2**15``, times :data:`BAND_SAFETY`.
    """
    s = int(s)
    mags = s * 2.0**15 * (1.0 + 2.0**-10)
    eps = s * (2.0**-22 * 2.0**15 + 2.0**-25)  # the split
    eps += (4 * s + 2) * 2.0**-22 * mags + s * 2.0**-24 * mags  # accumulation, exact sum
    return 2.0 * BAND_SAFETY * eps


def _band_words(fh, Xb, out, idx, stats=None):  # pragma: no cover - needs a GPU
    """Packed winners of float32 rows under ``'exact'`` from tensor cores, exactly;
    returns how many rows the fused kernel hashed instead.

    Each row is scaled by a power of two (largest magnitude in [2**14, 2**15)) and
    split into two float16s, ``hi + lo``; one cuBLAS product with ``[P | P]``
    (float32 accumulation) gives approximate activations within ``_band_width / 2``
    of the exact ones. The selection kernel (``BAND``) brackets the k-th largest
    approximate value; units above
    it by more than the band win and units below it by more lose, whatever the
    rounding; the few in between get their exact float32 sum (connection order, as on
    the CPU) and are ranked exactly. A row with too many of those is flagged and
    hashed by the fused kernel.
    """
    cupy = get_cupy()
    b, d = Xb.shape
    mw = out.shape[1]
    P2 = _split_projection(fh)
    dp = P2.shape[1] // 2
    H = cupy.empty((b, 2 * dp), dtype=cupy.uint16)
    ldx = np.int64(Xb.strides[0] // 4)
    get_function("flyhash_select", "fly_to_half")(
        (min(b, 16 * device_limits().sm_count),), (256,),
        (Xb, np.int64(b), np.int32(d), ldx, np.int32(-2), H, np.int32(dp)),
    )  # fmt: skip
    flagged = cupy.zeros(b, dtype=cupy.uint32)
    band = (Xb, ldx, idx, np.float32(_band_width(fh.n_connections_)))
    _product_select(fh, P2, H, out, None, 4, flagged, band)
    del H
    rows = cupy.flatnonzero(flagged)
    if rows.size:
        redo = cupy.empty((int(rows.size), mw), dtype=cupy.uint32)
        _fused_block(fh, cupy.ascontiguousarray(Xb[rows]), redo, idx, "exact", stats)
        out[rows] = redo
    return int(rows.size)


def _half_width(n_features):
    """Columns of the float16 rows and projection: d padded to a multiple of 8 (16-byte rows)."""
    return -(-int(n_features) // 8) * 8


def _gemm_chunk_rows(m, n, itemsize=4):
    """Rows per product + selection chunk: :data:`GEMM_CHUNK_BYTES` of activations of
    ``itemsize`` bytes (float32: 4, float16: 2)."""
    target = GEMM_CHUNK_BYTES
    forced = os.environ.get("SKNN_GPU_FLYHASH_CHUNK_MB")
    if forced:
        target = int(float(forced) * 2**20)
    return max(1, min(int(n), target // (int(itemsize) * int(m))))


#: float16's largest finite value.
HALF_MAX = 65504.0


def _fast_scale_top(n_connections):
    """``TOP`` of ``fly_to_half`` under ``'fast'``, and whether the activations fit float16.

    Each row is scaled so that its largest magnitude lies in ``[2**(TOP-1), 2**TOP)``;
    an activation sums ``S`` such values, so ``S * 2**TOP <= 65504`` keeps it finite
    in float16. ``(15, False)`` (float32 activations, inputs kept below float16's
    overflow) when not even ``TOP = 1`` allows that (``S > 32752``).
    """
    top = min(15, int(np.floor(np.log2(HALF_MAX / int(n_connections)))))
    return (top, True) if top >= 1 else (15, False)


def _int_check_flag(Xb):  # pragma: no cover - needs a GPU
    """1 when the float32 block holds an entry that is not a whole number <= INTEGER_LIMIT."""
    cupy = get_cupy()
    bad = cupy.zeros(1, dtype=cupy.uint32)
    n, d = Xb.shape
    if n:
        blocks = min(int(n), 8 * device_limits().sm_count)
        get_function("flyhash_select", "fly_integer_check")(
            (blocks,), (256,), (Xb, np.int64(n), np.int32(d), np.int64(Xb.strides[0] // 4), bad)
        )
    return int(bad[0])


def _on_tensor_cores(fh, Xb, precision, integer_input=None):  # pragma: no cover - needs a GPU
    """Whether the (dense float32 device) block goes through the tensor-core path."""
    if precision == "fast":
        return True
    if fh.n_connections_ > MAX_INTEGER_CONNECTIONS or integer_input is False:
        return False
    return precision == "integer" or not _int_check_flag(Xb)


def _half_projection(fh):  # pragma: no cover - needs a GPU
    """The (m, d padded) float16 0/1 projection on the GPU, built there once per fit."""

    def build(components):
        cupy = get_cupy()
        m, d = components.shape
        dp = _half_width(d)
        P = cupy.zeros((m, dp), dtype=cupy.uint16)
        conn = cupy.asarray(components.indices.astype(np.int32, copy=False))
        total = int(conn.size)
        if total:
            get_function("flyhash_select", "fly_dense_projection")(
                ((total + 255) // 256,), (256,), (conn, np.int32(m), np.int32(total // m), P, np.int32(dp))
            )
        return P

    return fh._derived(("_half_projection", "cuda"), fh.components_, build)


def _split_projection(fh):  # pragma: no cover - needs a GPU
    """``[P | P]``, (m, 2 d padded): one product of the split rows ``[hi | lo]`` sums both
    halves (instead of a second product that re-reads the activations)."""
    return fh._derived(
        ("_split_projection", "cuda"),
        fh.components_,
        lambda _c: get_cupy().tile(_half_projection(fh), (1, 2)),
    )


def _cublas_half_gemm(P, H, A, rows):  # pragma: no cover - needs a GPU
    """A[:rows] = H[:rows] @ P.T: float16 operands, float32 accumulation, the result in
    ``A``'s precision (float32, or float16 bits in uint16 rounded once from the float32
    sum) (cuBLAS). H's rows are P's width apart."""
    cupy = get_cupy()
    try:
        from cupy_backends.cuda.libs import cublas
    except ImportError:  # pragma: no cover - older layouts
        from cupy.cuda import cublas
    runtime = cupy.cuda.runtime
    r16 = getattr(runtime, "CUDA_R_16F", 2)
    r32 = getattr(runtime, "CUDA_R_32F", 0)
    compute = getattr(cublas, "CUBLAS_COMPUTE_32F", 68)
    algo = getattr(cublas, "CUBLAS_GEMM_DEFAULT", -1)
    m, dp = P.shape
    handle = cupy.cuda.device.get_cublas_handle()
    cublas.setStream(handle, cupy.cuda.get_current_stream().ptr)
    mode, math = cublas.getPointerMode(handle), cublas.getMathMode(handle)
    cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_HOST)
    # a split-K reduction must add in float32, not in a float16 output's precision: the
    # integer path's exactness rests on the one rounding of each exact float32 sum
    cublas.setMathMode(handle, math | _DISALLOW_REDUCED_PRECISION_REDUCTION)
    try:
        cublas.gemmEx(
            handle, cublas.CUBLAS_OP_T, cublas.CUBLAS_OP_N, m, int(rows), dp,
            _ONE.ctypes.data, P.data.ptr, r16, dp, H.data.ptr, r16, dp,
            _ZERO.ctypes.data, A.data.ptr, r16 if A.dtype.itemsize == 2 else r32, m, compute, algo,
        )  # fmt: skip
    finally:
        cublas.setPointerMode(handle, mode)
        cublas.setMathMode(handle, math)


#: CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION (cublas_api.h), OR-ed into the math mode.
_DISALLOW_REDUCED_PRECISION_REDUCTION = 16


_ONE = np.ones(1, dtype=np.float32)
_ZERO = np.zeros(1, dtype=np.float32)


def _select_kernel(m, itemsize=4, band=None):  # pragma: no cover - needs a GPU
    """(fly_select, dynamic shared bytes) for activations of ``itemsize`` bytes (float32:
    4, float16: 2): the row's keys in shared memory when they fit. ``band``: the
    projection's defines (:func:`_defines`) for the exact check of :func:`_band_words`."""
    static = 4 * 2048 + 1024 + (8 * 512 if band else 0)
    keys = int(itemsize) * int(m)
    in_smem = keys + static <= device_limits().smem_per_block_optin
    extra = dict(BAND=1, **band) if band else {}
    kern = get_function(
        "flyhash_select",
        "fly_select",
        SEL_NT=SEL_NT,
        SMEM_KEYS=int(in_smem),
        KEY16=int(itemsize == 2),
        **extra,
    )
    dyn = keys if in_smem else 0
    if dyn:
        _set_dynamic_smem(kern, dyn)
    return kern, dyn


def _tensor_words(fh, Xb, out, fast):  # pragma: no cover - needs a GPU
    """Packed winners of a dense float32 device block on tensor cores (see the module doc);
    returns how many rows were hashed again from float32 activations.

    Integer-valued input (``fast`` False) is exact: the rows are centred on a whole
    number (their activations become integers near 0), the product writes float16
    activations, and ``fly_select`` flags each row whose ``k``-th largest activation
    is beyond 2047 in magnitude (where float16 may round it onto a neighbour); those
    rows are hashed again from float32 activations (exact integers). ``fast`` rows are
    centred and scaled (float16 activations where they fit, nothing checked).
    """
    cupy = get_cupy()
    b, d = Xb.shape
    P = _half_projection(fh)
    dp = P.shape[1]
    H = cupy.empty((b, dp), dtype=cupy.uint16)
    blocks = min(b, 16 * device_limits().sm_count)
    ldx = np.int64(Xb.strides[0] // 4)
    top, half = _fast_scale_top(fh.n_connections_) if fast else (-1, True)
    get_function("flyhash_select", "fly_to_half")(
        (blocks,), (256,), (Xb, np.int64(b), np.int32(d), ldx, np.int32(top), H, np.int32(dp))
    )
    inexact = None if fast or not half else cupy.zeros(b, dtype=cupy.uint32)
    _product_select(fh, P, H, out, None, 2 if half else 4, inexact)
    if inexact is None:
        return 0
    rows = cupy.flatnonzero(inexact)
    if rows.size:
        _product_select(fh, P, H, out, rows, 4, None)
    return int(rows.size)


def _product_select(fh, P, H, out, rows, itemsize, flags, band=None):  # pragma: no cover - needs a GPU
    """Winners of the float16 rows ``H`` (all, or those listed in ``rows``) into ``out``: a
    chunk of rows at a time, the cuBLAS product into activations of ``itemsize`` bytes
    and ``fly_select``, which flags rows into ``flags`` when given (16-bit keys: the
    k-th largest beyond float16's exact integers; ``band``: too many units near it).

    ``band`` is ``(X, ldx, idx, width)`` for the exact check of :func:`_band_words`
    (the float32 rows, their stride, the projection's indices and the band's width);
    all rows then (``rows`` None).
    """
    cupy = get_cupy()
    m, k = fh.n_components_, fh.k_
    mw = out.shape[1]
    total = H.shape[0] if rows is None else int(rows.size)
    R = _gemm_chunk_rows(m, total, itemsize)
    A = cupy.empty((R, m), dtype=cupy.uint16 if itemsize == 2 else cupy.float32)
    sel, dyn = _select_kernel(m, itemsize, band=None if band is None else _defines(fh))
    dst = out if rows is None else cupy.empty((R, mw), dtype=cupy.uint32)
    for c0 in range(0, total, R):
        n = min(R, total - c0)
        Hc = H[c0:] if rows is None else H[rows[c0 : c0 + n]]
        _cublas_half_gemm(P, Hc, A, n)
        o = dst[c0:] if rows is None else dst
        flag = np.uint64(0) if flags is None else flags[c0:]
        extra = () if band is None else (band[0][c0:],) + band[1:]
        args = (A, np.int64(m), np.int32(m), np.int32(mw), np.int32(k), o, np.int64(o.strides[0] // 4), flag)
        sel((n,), (SEL_NT,), args + extra, shared_mem=dyn)
        if rows is not None:
            out[rows[c0 : c0 + n]] = dst[:n]


# --------------------------------------------------------------------------- #
# Launch configuration                                                          #
# --------------------------------------------------------------------------- #
def _sample_words(n_words):
    """Units the fused kernel samples to place its histogram window: >= 512, ~1/16 of m."""
    return min(n_words, max(16, -(-n_words // 16)))


def _window_cap(m, k):
    """Entries of one row's window list in the fused kernel.

    Mirrors the kernel's window: the ranks ``r1 = e - (5 sd + 2)`` and ``r2 = e + 5
    sd + 2`` of a sample of ``n_s`` units (``e = n_s k / m``) bound it. The units of
    the row above the sample's ``r``-th largest number about ``m r / n_s``, give or
    take ``m sqrt(r) / n_s`` (Poisson), so the list holds ``m / n_s (r2 - r1 + 5
    sqrt(r2) + 5 sqrt(r1) + 5)`` plus a margin for the coarse bins' width: a row
    overflows it about once in a million (FlyNN's k=32 of 15,680 units, where r2 is
    12, flagged ~1 row in 1,000 with 1.5x the expected count). A row that does is
    finished by the host (same bits).
    """
    m, k = int(m), int(k)
    n_s = min(m, 32 * _sample_words((m + 31) // 32))
    e = n_s * k / m
    sd = (e * (1.0 - k / m)) ** 0.5
    r1 = max(0.0, np.floor(e - 5.0 * sd - 2.0))
    r2 = min(float(n_s), np.ceil(e + 5.0 * sd + 2.0))
    listed = m / n_s * (r2 - r1 + 5.0 * (r2**0.5 + r1**0.5) + 5.0) + 64
    return int(min(m, -(-int(listed) // 32) * 32))


def _defines(fh):
    s = fh.n_connections_
    idx_t = "unsigned short" if fh.n_features_in_ <= 65535 else "int"
    return dict(S=s, SP=fh._kernel_index.shape[1], IDX_T=idx_t)


#: Relative time per row of one fused-kernel group by rows per block (32 = 1):
#: fewer rows per block put several units in a warp (bank conflicts, more index
#: loads) and pay the per-group work (sample pass, selection) for fewer rows.
#: 16 and 8: on an H200, 10,000 rows at FlyNN's narrow shape (80 inputs, 65,536 units;
#: ``python benchmarks/tools/profile_flynn_predict.py --narrow``; its wide shape, 3,920
#: inputs, fits at most 8 rows per block in shared memory); 4, 2 and 1: on an H100 at the
#: wide shape, one round of 132 groups each.
ROWS_COST = {32: 1.0, 16: 1.13, 8: 1.29, 4: 2.68, 2: 4.15, 1: 7.0}


def _fused_config(n_features, n_rows):  # pragma: no cover - needs a GPU
    """(rows per block, dynamic shared bytes) of the fused kernel, or None when x rows do not fit.

    The kernel runs one resident block per SM, each looping over groups of rows, so
    a batch takes ``ceil(groups / SMs)`` rounds of one group's time: the row count
    per block (of those whose shared memory fits) with the least
    ``rounds * rows * ROWS_COST[rows]``. 32 rows (conflict-free gathers, indices
    amortised over 32 rows) win from ~2,200 rows up on 132 SMs; small batches use
    fewer rows per block so that every SM gets work. The environment variable
    ``SKNN_GPU_FLYHASH_ROWS`` (1, 2, 4, ..., 32) forces a row count when it fits
    (tests and tuning).
    """
    limits = device_limits()
    static = 16 * 32 * 4  # the kernel's per-row scalars, generously
    forced = int(os.environ.get("SKNN_GPU_FLYHASH_ROWS", "0") or 0)
    best = None
    for rows in (32, 16, 8, 4, 2, 1):
        rowsp = 33 if rows == 32 else rows
        dyn = 4 * NB * rows + 4 * n_features * rowsp
        if dyn + static > limits.smem_per_block_optin:
            continue
        if rows == forced:
            return rows, dyn
        groups = -(-int(n_rows) // rows)
        rounds = -(-groups // limits.sm_count)
        cost = rounds * rows * ROWS_COST[rows]
        if best is None or cost < best[0]:
            best = (cost, rows, dyn)
    return None if best is None else best[1:]


def _set_dynamic_smem(kern, nbytes):  # pragma: no cover - needs a GPU
    try:
        kern.max_dynamic_shared_size_bytes = int(nbytes)
    except AttributeError:
        drv = get_cupy().cuda.driver
        fn = getattr(kern, "kernel", kern)
        drv.funcSetAttribute(fn.ptr, drv.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(nbytes))


# --------------------------------------------------------------------------- #
# Input batches and the materialised fallback                                   #
# --------------------------------------------------------------------------- #
def _device_batches(X, n_features):  # pragma: no cover - needs a GPU
    """Yield (start, dense float32 C-contiguous CuPy block) over the rows of X."""
    n = X.shape[0]
    if is_device_array(X) and not is_cupy_sparse(X) and X.dtype == np.float32 and X.flags.c_contiguous:
        yield 0, X
        return
    if (is_cupy_sparse(X) or sp.issparse(X)) and X.format != "csr":
        X = X.tocsr()
    b = max(1, BATCH_BYTES // (4 * max(1, n_features)))
    for st in range(0, n, b):
        Xb = X[st : st + b]
        if is_cupy_sparse(Xb) or sp.issparse(Xb):
            Xb = Xb.toarray()
        yield st, _as_float32(Xb)


def _activations(fh, Xb, rows=None):  # pragma: no cover - needs a GPU
    """float32 (len(rows) or b, m) activations of a dense float32 CuPy block."""
    cupy = get_cupy()
    m = fh.n_components_
    nr = Xb.shape[0] if rows is None else int(rows.size)
    A = cupy.empty((nr, m), dtype=cupy.float32)
    if nr == 0:
        return A
    kern = get_function("flyhash", "flyhash_activations", **_defines(fh))
    idx = fh._device_copy("_kernel_index", "cuda")
    for i0 in range(0, nr, 65535):  # grid.y limit
        i1 = min(nr, i0 + 65535)
        sub_rows = None if rows is None else cupy.ascontiguousarray(rows[i0:i1], dtype=cupy.int64)
        X0 = Xb if rows is not None else Xb[i0:i1]
        kern(
            ((m + 255) // 256, i1 - i0),
            (256,),
            (X0, np.int64(Xb.shape[1]), sub_rows, np.int32(i1 - i0), idx, np.int32(m), A[i0:i1]),
        )
    return A


def _order_keys(A):  # pragma: no cover - needs a GPU
    """uint32 keys of float32 ``A`` that sort as the values do, -0.0 equal to +0.0.

    Integer work on purpose: CuPy's float kernels run under -ftz=true and would
    compare subnormal activations as zeros, where the CPU engine tells them apart.
    """
    cupy = get_cupy()
    b = A.view(cupy.uint32)
    b = cupy.where((b << 1) == 0, cupy.uint32(0), b)  # -0.0 -> +0.0
    return cupy.where(b >> 31 == 1, ~b, b | cupy.uint32(0x80000000))


def _as_float32(Xb):  # pragma: no cover - needs a GPU
    """Dense C-contiguous float32 CuPy copy of a block, rounded as NumPy rounds.

    float64 on the device goes through our own conversion kernel (``convert.cu``):
    CuPy's ``astype`` flushes results below float32's normals to zero.
    """
    cupy = get_cupy()
    if not is_device_array(Xb):
        return cupy.asarray(np.ascontiguousarray(Xb, dtype=np.float32))
    if Xb.dtype != np.float64:  # integers and float16 never round to a float32 subnormal
        return cupy.ascontiguousarray(Xb, dtype=cupy.float32)
    Xb = cupy.ascontiguousarray(Xb)
    out = cupy.empty(Xb.shape, dtype=cupy.float32)
    if out.size:
        blocks = min(4 * device_limits().sm_count, (out.size + 255) // 256)
        get_function("convert", "f64_to_f32")((blocks,), (256,), (Xb, out, np.int64(out.size)))
    return out


def _finish_rows(fh, Xb, out, rows, algorithm):  # pragma: no cover - needs a GPU
    """Hash ``rows`` of a block (all rows when None) from materialised activations."""
    m, k = fh.n_components_, fh.k_
    mw = out.shape[1]
    total = Xb.shape[0] if rows is None else int(rows.size)
    if total == 0:
        return
    chunk = max(1, BLOCK_BYTES // (4 * m))
    for c0 in range(0, total, chunk):
        c1 = min(total, c0 + chunk)
        if rows is None:
            A = _activations(fh, Xb[c0:c1])
        else:
            A = _activations(fh, Xb, rows[c0:c1])
        if algorithm == "bisect":
            mask = wta_bisect_mask(A, k, steps=int(getattr(fh, "bisect_steps", BISECT_STEPS)))
        else:
            mask = wta_exact_mask(_order_keys(A), k)
        packed = _pack_words(mask, mw)
        if rows is None:
            out[c0:c1] = packed
        else:
            out[rows[c0:c1]] = packed


# --------------------------------------------------------------------------- #
# Packed words -> outputs                                                       #
# --------------------------------------------------------------------------- #
def _pack_words(mask, n_words):  # pragma: no cover - needs a GPU
    """Bool (b, m) -> uint32 (b, n_words); bytes in np.packbits order (MSB first)."""
    cupy = get_cupy()
    b, m = mask.shape
    padded = cupy.zeros((b, n_words * 32), dtype=cupy.uint8)
    padded[:, :m] = mask
    weights = cupy.asarray(np.array([128, 64, 32, 16, 8, 4, 2, 1], dtype=np.uint8))
    byts = (padded.reshape(b, n_words * 4, 8) * weights).sum(axis=2, dtype=cupy.uint8)
    return cupy.ascontiguousarray(byts).view(cupy.uint32).reshape(b, n_words)


def _words_to_dense(words, m):  # pragma: no cover - needs a GPU
    cupy = get_cupy()
    byts = words.view(cupy.uint8)
    cols = cupy.arange(m)
    shifts = (7 - (cols & 7)).astype(cupy.uint8)
    return (byts[:, cols >> 3] >> shifts) & cupy.uint8(1)


def _indices(words, k, indptr):  # pragma: no cover - needs a GPU
    """int32 winner indices (ascending per row) from packed words."""
    cupy = get_cupy()
    n, mw = words.shape
    total = n * k if indptr is None else int(indptr[-1])
    out = cupy.empty(total if indptr is not None else (n, k), dtype=cupy.int32)
    _warp_per_row("flyhash_bits_to_indices", n, (words, np.int64(n), np.int32(mw), indptr, np.int32(k), out))
    return out


def _row_counts(words):  # pragma: no cover - needs a GPU
    cupy = get_cupy()
    n, mw = words.shape
    counts = cupy.zeros(n, dtype=cupy.int64)
    _warp_per_row("flyhash_row_counts", n, (words, np.int64(n), np.int32(mw), counts))
    return counts


def _warp_per_row(name, n_rows, args):  # pragma: no cover - needs a GPU
    """Launch a one-warp-per-row kernel of ``flyhash.cu`` (256 threads a block; none for no rows)."""
    if n_rows:
        get_function("flyhash", name)(((n_rows * 32 + 255) // 256,), (256,), args)
