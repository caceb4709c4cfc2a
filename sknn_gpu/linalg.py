"""Dense BLAS level-2 on NumPy or CuPy arrays: :func:`gemv` and :func:`ger`.

NumPy arrays go to SciPy's BLAS (``scipy.linalg.blas``); CuPy arrays go to our own
CUDA kernels (``sknn_gpu/_kernels/gemv.cu`` and ``ger.cu``), with a variant chosen by
shape (see ``docs/performance.md`` for the measured dispatch table):

==================  =====================================================
variant             used for
==================  =====================================================
``rows``            ``A @ x``: a warp (or 1-16 lanes for short rows) per row,
                    16-byte vector loads when rows are aligned
``block_row``       ``A @ x`` with few, long rows: one block per row (the
                    paper's shared-memory reduction); split along the row
                    (split-K) when there are fewer rows than half the SMs
``t_cols``          ``A.T @ x``: 32x8 blocks over column tiles, split over rows
``t_cluster``       ``A.T @ x`` on compute capability 9.0: the row splits of a
                    column tile form a thread-block cluster and add their
                    partial sums in distributed shared memory
``t_small``         ``A.T @ x`` of a small float32 matrix (256 to 1024 rows and
                    columns, at most 512 x 1024 elements): one block per
                    narrow column tile sums every row, all loads at once
``t_flat``          ``A.T @ x`` with at most 32 columns (tall-skinny)
``ger_tiled``       ``A += alpha * outer(x, y)``, vectorised tiles
==================  =====================================================

Both functions validate shapes, dtypes (float32 or float64, all operands the same),
memory layout (C- or Fortran-contiguous matrix, contiguous vectors), that every
operand lives on the same device, that the output is writeable and does not overlap an
input, and that ``alpha``/``beta`` are finite and fit the operands' dtype.

The module has the two public functions and their validation, then the CPU engine
(``_gemv_cpu``/``_ger_cpu``: SciPy BLAS), then the CUDA engine (``_gemv_cuda``/
``_ger_cuda``: launch plans and the cached driver launches of
:mod:`sknn_gpu._kernels._launch`).

Size: one coherent thing, two public functions and their two engines. The CUDA engine
stays in this namespace because the public functions' fast path reads its module state
(CuPy's array type, the per-thread launch records) directly, on calls that take a few
microseconds, and tests and benchmarks steer its dispatch rules through the same globals.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
from scipy.linalg import blas as _blas

from ._backend import device_limits, get_cupy, is_cupy_array
from ._kernels import allow_large_clusters, get_function
from ._kernels._launch import Launch, LaunchTable, driver_launch
from ._typing import Array, ArrayLike

__all__ = ["gemv", "ger"]

_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_F32 = np.dtype(np.float32)
#: largest finite value of each operand dtype: alpha and beta must fit it
_FMAX = {
    np.dtype(np.float32): float(np.finfo(np.float32).max),
    np.dtype(np.float64): float(np.finfo(np.float64).max),
}

_ws_cache: dict = {}
_N_COUNTERS = 65536
#: rows per warp of gemv_rows_multi (2 measured best on an H100 of 2, 4 and 8)
_MULTI_ROWS = 2


def _ctype(dtype):
    return "float" if dtype == _F32 else "double"


def _check_scalar(name, value):
    """``value`` as a finite Python float, or a ValueError naming ``name``."""
    t = type(value)
    if t is float and math.isfinite(value):
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a finite real number, got {_short(value)}.")
    try:
        f = float(value)
    except (OverflowError, ValueError, TypeError):
        f = math.inf
    if not math.isfinite(f):
        raise ValueError(f"{name} must be a finite real number that fits a float64, got {_short(value)}.")
    return f


def _short(value):
    """``repr`` of a scalar, shortened for huge integers (10**400 has 401 digits)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and abs(int(value)) >= 10**30:
        digits = len(str(abs(int(value))))
        sign = "-" if value < 0 else ""
        return f"{'a negative' if sign else 'an'} integer of {digits} digits (about {sign}1e{digits - 1})"
    return repr(value)


def _check_scalar_range(func, dtype, **scalars):
    """Refuse a scale factor that the operands' dtype cannot hold (it would become inf)."""
    fmax = _FMAX[dtype]
    for name, v in scalars.items():
        if abs(v) > fmax:
            raise ValueError(
                f"{func}: {name}={v!r} does not fit the operands' dtype {dtype} (largest finite value "
                f"{fmax:.4g}); scale the operands instead."
            )


def _kind(arr):
    if type(arr) is np.ndarray:
        return "numpy"
    if is_cupy_array(arr):
        return "cupy"
    if isinstance(arr, np.ndarray):  # a subclass (np.memmap, ...)
        return "numpy"
    raise TypeError(
        f"expected a numpy.ndarray or cupy.ndarray, got {type(arr).__name__}; "
        "convert with numpy.asarray / cupy.asarray first."
    )


def _bounds(arr, kind):
    if kind == "numpy":
        start = arr.__array_interface__["data"][0]
    else:
        start = arr.data.ptr
    return start, start + arr.nbytes


def _overlap(a, b, kind):
    if a.nbytes == 0 or b.nbytes == 0:
        return False
    if kind == "numpy":
        return np.may_share_memory(a, b)
    a0, a1 = _bounds(a, kind)
    b0, b1 = _bounds(b, kind)
    return a0 < b1 and b0 < a1


def _check_operands(func, A, vectors, out):
    """Common validation; returns (kind, dtype, A_is_fortran).

    ``vectors`` are ``(name, array)`` pairs; ``out`` names the operand written in place
    (it must be writeable: a read-only NumPy array is refused, never modified).
    """
    kind = _kind(A)
    if A.ndim != 2:
        raise ValueError(f"{func}: A must be 2-D, got an array of shape {A.shape}.")
    if A.dtype not in _DTYPES:
        raise TypeError(f"{func}: A must be float32 or float64, got {A.dtype}.")
    if A.flags.c_contiguous:
        fortran = False
    elif A.flags.f_contiguous:
        fortran = True
    else:
        raise ValueError(
            f"{func}: A must be C- or Fortran-contiguous (got strides {A.strides}); "
            "pass an ascontiguousarray copy."
        )
    tA = type(A)
    for name, v in vectors:
        if type(v) is not tA and _kind(v) != kind:
            raise TypeError(f"{func}: A is a {kind} array but {name} is not; put all operands on one device.")
        if v.ndim != 1:
            raise ValueError(f"{func}: {name} must be 1-D, got shape {v.shape}.")
        if v.dtype != A.dtype:
            raise TypeError(f"{func}: {name} has dtype {v.dtype} but A has {A.dtype}; they must match.")
        if not v.flags.c_contiguous:
            raise ValueError(f"{func}: {name} must be contiguous (got strides {v.strides}).")
    if kind == "numpy" and out is not None:
        name, arr = out
        if not arr.flags.writeable:
            raise ValueError(
                f"{func}: {name} is read-only (flags.writeable is False) and {func} writes into it; "
                f"pass a writeable array (e.g. {name}.copy())."
            )
    if kind == "cupy" and device_limits().n_devices > 1:  # several GPUs: same device?
        dev = A.device.id
        for name, v in vectors:
            if v.device.id != dev:
                raise ValueError(f"{func}: {name} is on GPU {v.device.id} but A is on GPU {dev}.")
    return kind, A.dtype, fortran


def gemv(
    A: ArrayLike,
    x: ArrayLike,
    y: ArrayLike | None = None,
    alpha: float = 1.0,
    beta: float = 0.0,
    trans: bool = False,
) -> Array:
    """Matrix-vector product ``y = alpha * op(A) @ x + beta * y``.

    ``op(A)`` is ``A`` or, with ``trans=True``, ``A.T``. NumPy arrays use SciPy's BLAS
    (``sgemv``/``dgemv``); CuPy arrays use sknn_gpu's CUDA kernels.

    Parameters
    ----------
    A : ndarray of shape (m, n), float32 or float64
        C- or Fortran-contiguous matrix (NumPy or CuPy).
    x : ndarray of shape (n,) or, with ``trans=True``, (m,)
        Contiguous vector of the same dtype and on the same device as ``A``.
    y : ndarray of shape (m,) or, with ``trans=True``, (n,), optional
        Output vector, overwritten in place. Must not overlap ``A`` or ``x``.
        When omitted a new array is returned (``beta`` must then be 0).
    alpha, beta : float
        Scale factors. With ``beta == 0`` the old contents of ``y`` are not read
        (NaN in ``y`` does not propagate, as in BLAS).
    trans : bool, default=False
        Use ``A.T`` instead of ``A``.

    Returns
    -------
    y : ndarray
        The result: ``y`` itself when it was given, otherwise a new array of the
        same kind (NumPy or CuPy) as ``A``.

    Raises
    ------
    ValueError
        Wrong dimensions or shapes, a non-contiguous operand, a read-only ``y``, ``y``
        overlapping an input, ``alpha``/``beta`` not finite or beyond the dtype's range,
        or ``beta != 0`` without ``y``.
    TypeError
        Not float32/float64, mixed dtypes, or mixed NumPy/CuPy operands.

    Examples
    --------
    >>> import numpy as np
    >>> from sknn_gpu.linalg import gemv
    >>> A = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> gemv(A, np.ones(3, dtype=np.float32))
    array([ 3., 12.], dtype=float32)
    >>> gemv(A, np.ones(2, dtype=np.float32), trans=True)
    array([3., 5., 7.], dtype=float32)
    """
    if type(A) is _ND:  # CuPy: a call signature validated before launches at once
        out = _gemv_fast(A, x, y, alpha, beta, trans)
        if out is not None:
            return out
    alpha = _check_scalar("alpha", alpha)
    beta = _check_scalar("beta", beta)
    trans = bool(trans)
    vectors = [("x", x)] if y is None else [("x", x), ("y", y)]
    kind, dtype, fortran = _check_operands("gemv", A, vectors, None if y is None else ("y", y))
    _check_scalar_range("gemv", dtype, alpha=alpha, beta=beta)
    m, n = A.shape
    nx, ny = (m, n) if trans else (n, m)
    if x.shape[0] != nx:
        raise ValueError(
            f"gemv: x has length {x.shape[0]} but {'A.T' if trans else 'A'} of shape "
            f"{(n, m) if trans else (m, n)} needs {nx}."
        )
    if y is None:
        if beta != 0.0:
            raise ValueError("gemv: beta != 0 needs an input y.")
    else:
        if y.shape[0] != ny:
            raise ValueError(f"gemv: y has length {y.shape[0]} but the result has length {ny}.")
        if _overlap(y, A, kind) or _overlap(y, x, kind):
            raise ValueError("gemv: y must not overlap A or x (the output would be read while written).")
    if kind == "numpy":
        return _gemv_cpu(A, x, y, alpha, beta, trans, fortran, ny)
    return _gemv_cuda(A, x, y, alpha, beta, trans, fortran, ny)


def ger(alpha: float, x: ArrayLike, y: ArrayLike, A: ArrayLike) -> Array:
    """Rank-1 update in place: ``A += alpha * outer(x, y)``.

    NumPy arrays use SciPy's BLAS (``sger``/``dger``); CuPy arrays use sknn_gpu's
    tiled CUDA kernel.

    Parameters
    ----------
    alpha : float
        Scale factor.
    x : ndarray of shape (m,)
        Contiguous vector, same dtype and device as ``A``.
    y : ndarray of shape (n,)
        Contiguous vector, same dtype and device as ``A``.
    A : ndarray of shape (m, n), float32 or float64
        C- or Fortran-contiguous matrix, updated in place; it must not overlap
        ``x`` or ``y``.

    Returns
    -------
    A : ndarray
        The same array, updated.

    Raises
    ------
    ValueError
        Wrong dimensions or shapes, non-contiguous operands, a read-only ``A``, ``A``
        overlapping ``x`` or ``y``, or ``alpha`` not finite or beyond the dtype's range.
    TypeError
        An operand that is not float32/float64, operands whose dtypes differ, or NumPy
        and CuPy operands in one call.

    Examples
    --------
    >>> import numpy as np
    >>> from sknn_gpu.linalg import ger
    >>> A = np.zeros((2, 3))
    >>> ger(2.0, np.array([1.0, 2.0]), np.array([1.0, 0.0, -1.0]), A)
    array([[ 2.,  0., -2.],
           [ 4.,  0., -4.]])
    """
    if type(A) is _ND:  # CuPy: a call signature validated before launches at once
        out = _ger_fast(alpha, x, y, A)
        if out is not None:
            return out
    alpha = _check_scalar("alpha", alpha)
    kind, dtype, fortran = _check_operands("ger", A, [("x", x), ("y", y)], ("A", A))
    _check_scalar_range("ger", dtype, alpha=alpha)
    m, n = A.shape
    if x.shape[0] != m or y.shape[0] != n:
        raise ValueError(
            f"ger: A has shape {(m, n)} so x needs length {m} and y length {n}; "
            f"got {x.shape[0]} and {y.shape[0]}."
        )
    if _overlap(A, x, kind) or _overlap(A, y, kind):
        raise ValueError("ger: A must not overlap x or y (the update would read what it writes).")
    if m == 0 or n == 0 or alpha == 0.0:
        return A
    if kind == "numpy":
        return _ger_cpu(alpha, x, y, A, fortran)
    return _ger_cuda(alpha, x, y, A, fortran)


# ---------------------------------------------------------------- CPU engine (SciPy BLAS)


def _gemv_cpu(A, x, y, alpha, beta, trans, fortran, ny):
    fn = _blas.sgemv if A.dtype == _F32 else _blas.dgemv
    # BLAS is column-major: a C-contiguous A is a Fortran-contiguous A.T
    a, t = (A, trans) if fortran else (A.T, not trans)
    if ny == 0:
        out = np.zeros(0, dtype=A.dtype)
        return out if y is None else y
    if x.shape[0] == 0:  # empty reduction: op(A) @ x is all zeros
        res = np.zeros(ny, dtype=A.dtype) if y is None else (beta * y if beta != 0 else np.zeros_like(y))
        if y is None:
            return res
        y[...] = res
        return y
    if y is None:
        return fn(alpha, a, x, trans=int(t))
    res = fn(alpha, a, x, beta=beta, y=y, trans=int(t), overwrite_y=1)
    if res is not y and not np.shares_memory(res, y):
        y[...] = res
    return y


def _ger_cpu(alpha, x, y, A, fortran):
    fn = _blas.sger if A.dtype == _F32 else _blas.dger
    if fortran:
        res = fn(alpha, x, y, a=A, overwrite_a=1)
        if not np.shares_memory(res, A):
            A[...] = res
    else:  # C-contiguous A is the Fortran-contiguous A.T: A.T += alpha * y x^T
        res = fn(alpha, y, x, a=A.T, overwrite_a=1)
        if not np.shares_memory(res, A):
            A[...] = res.T
    return A


# ---------------------------------------------------------------- CUDA engine
#
# A call costs Python time on top of the kernel: a bare CuPy RawKernel launch is a few
# microseconds, and validating six arrays costs as much again. Two caches keep a
# repeated call close to the bare driver launch:
#
# * ``_plan_cache`` (shared by all threads): shape -> kernel, launch shape and the
#   fixed arguments (the measured dispatch rules below).
# * per-thread :class:`_Plan` records (:mod:`sknn_gpu._kernels._launch`) keyed by
#   everything the validation looked at (shapes, dtypes, contiguity flags, 16-byte
#   alignment, device). A call whose key is known skips that validation (it passed for
#   the same key) but still checks what depends on the actual pointers and scalars
#   (overlap, finite scalars that fit the dtype, beta without y), writes the pointers and
#   scalars into the prebuilt argument block and calls ``cuLaunchKernel`` directly. The
#   first call of a key in a thread is launched through CuPy's RawKernel, which also
#   makes the device's context current there.

_plan_cache: dict = {}
_TABLE = LaunchTable()
_ND = None  # cupy.ndarray once CuPy has been seen
_EMPTY = _STREAM = _DEVICE = _LAUNCH = None
_MULTI = False


def _bind_cupy(cupy):
    """Remember CuPy's ndarray type and the few CuPy functions the fast path calls."""
    global _ND, _EMPTY, _STREAM, _DEVICE, _LAUNCH, _MULTI
    if _ND is not None:
        return
    launch = driver_launch()
    try:  # the fast path reads CuPy's contiguity fields directly (no Flags object per call)
        probe = cupy.empty(1, dtype=np.float32)
        _ = (probe._c_contiguous, probe._f_contiguous, probe.data.device_id)
    except AttributeError:  # pragma: no cover - depends on the CuPy version
        launch = None
    _EMPTY, _STREAM, _DEVICE = cupy.empty, cupy.cuda.get_current_stream, cupy.cuda.runtime.getDevice
    _LAUNCH, _MULTI = launch, device_limits().n_devices > 1
    _ND = cupy.ndarray


class _Plan(Launch):
    """A :class:`~sknn_gpu._kernels._launch.Launch` with what gemv/ger's fast paths need.

    ``fa``/``fb``: the alpha/beta slots; ``fmax``: the largest finite value of the
    dtype (scalars beyond it go to the validating path, which refuses them); ``ws``:
    workspace elements of a split reduction (0: none); ``ny``: length of a new gemv
    output; ``swap``: ger of a Fortran-ordered A (x and y trade places).
    """

    __slots__ = ("fa", "fb", "fmax", "ws", "ny", "swap")

    def __init__(self, kernel, grid, block, layout, dtype, ws=0, ny=0, swap=False):
        assert len(grid) <= 2 and len(block) <= 2  # the fast paths launch with gz = bz = 1
        super().__init__(kernel, grid, block, layout, dtype == _F32)
        self.fa = self.floats[0]
        self.fb = self.floats[1] if len(self.floats) > 1 else None
        self.fmax = _FMAX[dtype]
        self.ws, self.ny, self.swap = ws, ny, swap


def _register(key, make):
    """Store the record ``make()`` for ``key`` in this thread (skipped without a driver launch)."""
    if _LAUNCH is not None:
        _TABLE.register(key, make)


def _cached_plan(pkey, make, *args):
    """The plan of ``pkey`` from ``_plan_cache``, made by ``make(*args)`` the first time."""
    plan = _plan_cache.get(pkey)
    if plan is None:
        if len(_plan_cache) > 4096:
            _plan_cache.clear()
        plan = _plan_cache[pkey] = make(*args)
    return plan


def _workspace(cupy, dev, sptr, n_elems):
    """Per-(device, stream) workspace for split reductions: (partials, counters, their pointers).

    The kernels leave the counters at zero, so they are allocated (and zeroed) once; the
    partials buffer is float64-sized and also serves float32.
    """
    key = (dev, sptr)
    ent = _ws_cache.get(key)
    if ent is None or ent[0].size < n_elems:
        buf = cupy.empty(max(n_elems, 1 << 18), dtype=np.float64)
        cnt = ent[1] if ent is not None else cupy.zeros(_N_COUNTERS, dtype=np.uint32)
        ent = (buf, cnt, buf.data.ptr, cnt.data.ptr)
        _ws_cache[key] = ent
    return ent


def _resident_blocks(kern, threads, lim):
    """Blocks of ``threads`` threads one SM holds at once for ``kern`` (register and thread limits).

    ``lim`` is the device's :func:`~sknn_gpu._backend.device_limits`; at most 32 blocks
    per SM (every architecture since Maxwell).
    """
    try:
        regs = int(kern.attributes["num_regs"])
    except Exception:  # pragma: no cover - attribute names differ between CuPy versions
        return 4
    warps = -(-threads // 32)
    warp_regs = -(-max(regs, 1) * 32 // 256) * 256
    return int(max(1, min((lim.regs_per_sm // warp_regs) // warps, lim.max_threads_per_sm // threads, 32)))


#: The transposed column-tile kernel, from the H100 sweep in docs/performance.md
#: (``python benchmarks/bench_mlp.py --part tune``: queued kernel time of every split
#: count and load depth on the Table I shapes): no split up to _T_COLS_UNSPLIT_ROWS rows
#: (a thread then sums up to 32 rows, all loaded at once); above, m // 256 splits, at
#: least 8 and at most 32 (_T_COLS_SPLITS), and no more than one block per SM over the
#: column tiles. _T_COLS_FORCE = (U, splits) overrides the rule (the sweep).
_T_COLS_UNSPLIT_ROWS = 256
_T_COLS_SPLITS = (8, 32)
_T_COLS_FORCE = None


def _t_cols_config(m, col_blocks, n_sm):
    """``(U, splits)`` of the transposed column-tile kernel for ``m`` rows over ``col_blocks``
    column tiles: U, the rows a thread loads at once, is 32 when each of its 8 row lanes
    sums at least 32 rows, else 16."""
    if _T_COLS_FORCE is not None:
        U, nsplit = _T_COLS_FORCE
        return int(U), int(max(1, min(nsplit, m)))
    nsplit = 1
    if m > _T_COLS_UNSPLIT_ROWS and col_blocks < n_sm and col_blocks <= _N_COUNTERS:
        lo, hi = _T_COLS_SPLITS
        nsplit = int(max(1, min(max(lo, min(hi, m // 256)), n_sm // col_blocks)))
    per_lane = -(-m // nsplit) // 8
    return (32 if per_lane >= 32 else 16), nsplit


#: The cluster variant of the transposed kernel (compute capability 9.0), from a sweep of
#: ``(U, blocks per cluster)`` on the Table I shapes and 8192² / 16384² (H200 and H100,
#: queued kernel time; ``python benchmarks/bench_mlp.py --part tune``): clusters of C = 8,
#: 4 or 2 blocks, the largest whose grid (column tiles x C) stays within 2 blocks per SM
#: while each of a block's 8 row lanes keeps at least 8 rows; 16 once the grid exceeds
#: half the SMs; 64 when the column tiles alone cover half the SMs (256 x 16384 ran
#: 5.7 µs split in pairs, 5.2 µs unsplit, on the H100). None below 256 rows, where one
#: block per tile sums every row (_T_COLS_UNSPLIT_ROWS), and none where the grid would
#: hold fewer blocks than a quarter of the SMs for more than 2 MiB (tall, narrow
#: matrices: the workspace split spreads them wider). U is 16 for pairs of blocks and
#: for 9 to 63 rows per lane, else 8 (on the H100 and the H200 alike, 4096² and 8192²
#: ran 15-30 % slower with U = 16), and 4 for clusters of 8 with 64 rows or more per lane
#: (H100, 4096² with the streaming loads of gemv.cu's ld_stream: 25.2 µs against 25.6 µs
#: with U = 8, 29.7 with U = 16). ``_T_CLUSTER_FORCE = (U, C)`` forces it (the sweep).
_T_CLUSTER_FORCE = None
_T_CLUSTER_SMALL_BYTES = 2 << 20


def _t_narrow_tiles(m, col_blocks, n_sm, cc, nbytes):
    """Whether ``A.T @ x`` of a small matrix takes 32-column tiles (scalar loads) in clusters
    of 8 blocks instead of its ``col_blocks`` vector tiles: compute capability 9.0, at least
    512 rows, at most ``_T_CLUSTER_SMALL_BYTES``, and 8-block clusters of the vector tiles
    would occupy under a quarter of the SMs. Four times the blocks then beat wider loads
    (H100, 512² float32, queued: 3.30 µs against 3.70 µs; cuBLAS 3.27 µs; at 1024² the
    two tie, at 2048² the narrow tiles won 5.91 against 6.13 µs, at 4096² they lost,
    28.5 against 26.4 µs). Off while a sweep forces a configuration."""
    if _T_CLUSTER_FORCE is not None or _T_COLS_FORCE is not None or cc < (9, 0):
        return False
    return m >= 512 and nbytes <= _T_CLUSTER_SMALL_BYTES and 8 * col_blocks < n_sm // 4


def _t_cluster_config(m, col_blocks, n_sm, cc, nbytes):
    """``(U, blocks per cluster)`` of the cluster variant of the transposed kernel for ``m``
    rows over ``col_blocks`` column tiles of a matrix of ``nbytes`` bytes on a device of
    compute capability ``cc``, or None for the column-tile kernel (``_t_cols_config``)."""
    if cc < (9, 0):
        return None
    if _T_CLUSTER_FORCE is not None:
        U, cs = _T_CLUSTER_FORCE
        return int(U), int(cs)
    if m < _T_COLS_UNSPLIT_ROWS or _T_COLS_FORCE is not None:
        return None
    for cs in (8, 4, 2):
        grid = col_blocks * cs
        per_lane = -(-m // cs) // 8
        need = 64 if 2 * col_blocks >= n_sm else (16 if 2 * grid > n_sm else 8)
        if grid <= 2 * n_sm and per_lane >= need:
            if 4 * grid < n_sm and nbytes > _T_CLUSTER_SMALL_BYTES:
                return None
            if cs == 8 and per_lane >= 64:
                return 4, cs  # (4096^2: 25.2 us against 25.6 with U = 8, streaming loads)
            return (16 if cs == 2 or 8 < per_lane < 64 else 8), cs
    return None


def _t_small_config(m, n, dtype):
    """``(TC, RL, UR)`` of ``gemv_t_small`` for ``A.T @ x`` of an (m, n) matrix, or None: float32
    with 256 to 1024 rows and columns and at most 512 x 1024 elements (where it was measured
    to win). A block sums TC columns over all m rows with RL row lanes, each loading
    UR >= m / RL rows at once (a power of two: few builds). H100, queued (a sweep of
    TC x RL and an A/B of the trees, docs/performance.md): 8 x 32 up to 512² elements
    (512²: 2.9 µs against 3.3 µs for clusters of 32-column tiles; 256²: 2.5 against 3.3;
    1024 x 256: 3.1 against 3.5), else 16 x 16 (512 x 1024: 3.1 against 3.7; 1024 x 512:
    the same as the cluster kernel; 1024²: 3.9 against 3.87, left to the cluster kernel)."""
    if (
        dtype != _F32
        or not (256 <= m <= 1024 and 256 <= n <= 1024)
        or m * n > 512 * 1024
        or _T_CLUSTER_FORCE
        or _T_COLS_FORCE
    ):
        return None
    tc, rl = (8, 32) if m * n <= 512 * 512 else (16, 16)
    ur = 1 << (-(-m // rl) - 1).bit_length()
    return tc, rl, ur


def _gemv_plan(lim, m, n, trans, dtype, vector):
    """Kernel, launch shape and fixed arguments for one (shape, dtype, alignment) case.

    Returns ``(kernel, grid, block, ws_elems, dims, tail)``: ``ws_elems`` is None for the
    variants without a workspace argument, 0 when the split variant runs unsplit.
    """
    n_sm = lim.sm_count
    f32 = dtype == _F32
    ct = "float" if f32 else "double"
    vw = 4 if f32 else 2
    vs = "true" if vector else "false"
    if not trans:
        if m <= 4 * n_sm and n >= 1024:
            # few long rows: one block per row, split along the row when rows are scarce
            threads = 512 if n * dtype.itemsize >= 16384 else 256
            nsplit = 1
            if m < n_sm // 2:
                nsplit = int(min(max(1, (4 * n_sm) // m), max(1, n // 2048)))
            chunk = -(-n // nsplit)
            chunk = -(-chunk // vw) * vw
            nsplit = -(-n // chunk)
            k = get_function("gemv", f"gemv_block_row<{ct},{vs}>")
            return k, (m, nsplit), (threads,), (nsplit * m if nsplit > 1 else 0), (m, n), (chunk,)
        per = n // vw if vector else n
        if f32 and vector and per >= 64 and -(-m // (8 * _MULTI_ROWS)) >= 3 * n_sm:
            # many long rows: two rows per warp share each load of x (x's cache reads
            # halved) and A is streamed; H100, 16384^2: 2.94 TB/s against 2.83 TB/s
            # (gemv_rows) and cuBLAS's 2.94, same bits. With fewer blocks than ~3 per
            # SM (4096 x 32768) the extra work per warp costs more than it saves.
            grid = int(min(-(-m // (8 * _MULTI_ROWS)), n_sm * 16))
            k = get_function("gemv", f"gemv_rows_multi<float,{_MULTI_ROWS}>")
            return k, (grid,), (256,), None, (m, n), ()
        lanes = 32
        if per < 64:
            lanes = 1
            while lanes < 32 and lanes * 2 <= max(1, per // 2):
                lanes *= 2
        rows_per_block = 256 // lanes
        grid = int(min(-(-m // rows_per_block), n_sm * 16))
        k = get_function("gemv", f"gemv_rows<{ct},{lanes},{vs}>")
        return k, (grid,), (256,), None, (m, n), ()
    # transposed: y (len n) = A.T @ x (len m)
    if n <= 32:
        rows_per_split = max(256, -(-m // (4 * n_sm)))
        nsplit = -(-m // rows_per_split)
        k = get_function("gemv", f"gemv_t_flat<{ct}>")
        ws = nsplit * n if nsplit > 1 else 0
        return k, (nsplit,), (256,), ws, (m, n), (rows_per_split,)
    small = _t_small_config(m, n, dtype)
    if small is not None:
        tc, rl, ur = small
        k = get_function("gemv", f"gemv_t_small<{ct},{tc},{rl},{ur}>")
        return k, (-(-n // tc),), (tc * rl,), None, (m, n), ()
    cols_per_block = 32 * (vw if vector else 1)
    col_blocks = -(-n // cols_per_block)
    nbytes = m * n * dtype.itemsize
    if vector and _t_narrow_tiles(m, col_blocks, n_sm, lim.compute_capability, nbytes):
        vs, col_blocks, cluster = "false", -(-n // 32), (8, 8)  # scalar 32-column tiles (U unused)
    else:
        cluster = _t_cluster_config(m, col_blocks, n_sm, lim.compute_capability, nbytes)
    if cluster is not None:  # the row splits of a tile form one cluster: no workspace
        U, cs = cluster
        k = get_function("gemv", f"gemv_t_cluster<{ct},{vs},{U}>", T_CLUSTER=cs)
        if cs > 8 and not allow_large_clusters(k):  # non-portable cluster size
            return _gemv_plan_t_cols(m, n, ct, vs, col_blocks, n_sm)
        return k, (col_blocks, cs), (32, 8), None, (m, n), ()
    return _gemv_plan_t_cols(m, n, ct, vs, col_blocks, n_sm)


def _gemv_plan_t_cols(m, n, ct, vs, col_blocks, n_sm):
    """``_gemv_plan`` of the transposed column-tile kernel (split through a workspace)."""
    U, nsplit = _t_cols_config(m, col_blocks, n_sm)
    k = get_function("gemv", f"gemv_t_cols<{ct},{vs},{U}>")
    rows_per_split = -(-m // nsplit)
    nsplit = -(-m // rows_per_split)
    ws = nsplit * n if nsplit > 1 else 0
    return k, (col_blocks, nsplit), (32, 8), ws, (m, n), (rows_per_split,)


def _gemv_key(A, x, y, trans, pa, px, dev):
    """Everything gemv's validation and dispatch depend on, except pointers and scalars."""
    key = (
        A.shape, A.dtype, A._c_contiguous, A._f_contiguous, x.shape, x.dtype, x._c_contiguous,
        None if y is None else (y.shape, y.dtype, y._c_contiguous), trans, ((pa | px) & 15) == 0, dev,
    )  # fmt: skip
    if _MULTI:
        key += (A.data.device_id, x.data.device_id, None if y is None else y.data.device_id)
    return key


def _gemv_fast(A, x, y, alpha, beta, trans):
    """Launch a call whose signature was validated before in this thread; None otherwise."""
    ta, tb = type(alpha), type(beta)
    if not ((ta is float or ta is int) and (tb is float or tb is int)) or type(x) is not _ND:
        return None
    if y is not None and type(y) is not _ND:
        return None
    pa, px = A.data.ptr, x.data.ptr
    dev = _DEVICE()
    rec = _TABLE.records.get(_gemv_key(A, x, y, trans, pa, px, dev))
    if rec is None:
        return None
    fmax = rec.fmax
    if not (-fmax <= alpha <= fmax and -fmax <= beta <= fmax):  # NaN, inf or beyond the dtype: refused
        return None
    if y is None:
        if beta != 0:
            return None
        y = _EMPTY(rec.ny, dtype=A.dtype)
        py = y.data.ptr
    else:
        py, yb = y.data.ptr, y.nbytes
        if (py < pa + A.nbytes and pa < py + yb) or (py < px + x.nbytes and px < py + yb):
            return None  # the validating path raises the overlap error
    s = rec.slots
    s[0], s[1], s[2] = pa, px, py
    sptr = _STREAM().ptr
    if rec.ws:
        ent = _ws_cache.get((dev, sptr))
        if ent is None or ent[0].size < rec.ws:
            ent = _workspace(get_cupy(), dev, sptr, rec.ws)
        s[3], s[4] = ent[2], ent[3]
    rec.fa.value = alpha
    rec.fb.value = beta
    _LAUNCH(rec.fptr, rec.gx, rec.gy, 1, rec.bx, rec.by, 1, 0, sptr, rec.paddr, 0)
    return y


def _gemv_cuda(A, x, y, alpha, beta, trans, fortran, ny):
    cupy = get_cupy()
    _bind_cupy(cupy)
    pa, px = A.data.ptr, x.data.ptr
    lim = device_limits()
    dev = lim.device_id
    key = _gemv_key(A, x, y, trans, pa, px, dev) if _LAUNCH is not None else None
    if fortran:  # a Fortran-contiguous A is the C-contiguous A.T
        A = A.T
        trans = not trans
    m, n = A.shape
    dtype = A.dtype
    if y is None:
        y = cupy.empty(ny, dtype=dtype)
    if ny == 0:
        return y
    if m == 0 or n == 0:  # empty reduction
        if beta == 0.0:
            y.fill(0)
        else:
            y *= beta
        return y
    f32 = dtype == _F32
    vector = (n % (4 if f32 else 2) == 0) and ((pa | px) & 15) == 0
    pkey = (dev, m, n, trans, f32, vector)
    k, grid, block, ws_elems, dims, tail = _cached_plan(pkey, _gemv_plan, lim, m, n, trans, dtype, vector)
    scal = np.float32 if f32 else np.float64
    i64 = np.int64
    flat = trans and n <= 32  # the t_flat variant takes n as a 32-bit int
    if ws_elems is None:
        k(grid, block, (A, x, y, i64(dims[0]), i64(dims[1]), scal(alpha), scal(beta)))
        layout = ["p", "p", "p", ("q", dims[0]), ("q", dims[1]), "f", "f"]
    else:
        if ws_elems:
            ent = _workspace(cupy, dev, cupy.cuda.get_current_stream().ptr, ws_elems)
            ws, cnt = ent[0], ent[1]
        else:
            ws, cnt = y, y  # unsplit: never touched
        n_arg = np.int32(dims[1]) if flat else i64(dims[1])
        k(grid, block, (A, x, y, ws, cnt, i64(dims[0]), n_arg, scal(alpha), scal(beta), i64(tail[0])))
        layout = ["p"] * (5 if ws_elems else 3) + ([] if ws_elems else [("q", 0), ("q", 0)])
        layout += [("q", dims[0]), (("i" if flat else "q"), dims[1]), "f", "f", ("q", tail[0])]
    _register(key, lambda: _Plan(k, grid, block, layout, dtype, ws=ws_elems or 0, ny=ny))
    return y


def _ger_plan(lim, mm, nn, dtype, vector):
    """Kernel and launch shape of the tiled update of a C-contiguous (mm, nn) matrix.

    A block is (bx, 256 / bx) threads: bx threads over the columns (VW of them each),
    256 / bx rows at a time, so short rows do not idle most of a block; the grid covers
    the columns and fills one wave of resident blocks over the rows.
    """
    f32 = dtype == _F32
    per = (4 if f32 else 2) if vector else 1
    col_threads = -(-nn // per)
    bx = min(256, -(-col_threads // 32) * 32)
    by = 256 // bx
    gx = -(-col_threads // bx)
    k = get_function("ger", f"ger_tiled<{_ctype(dtype)},{'true' if vector else 'false'}>")
    wave = _resident_blocks(k, bx * by, lim) * lim.sm_count
    gy = int(max(1, min(-(-mm // by), -(-wave // gx), 65535)))
    return k, (gx, gy), (bx, by)


def _ger_key(A, x, y, pa, px, py, dev):
    """Everything ger's validation and dispatch depend on, except pointers and alpha."""
    key = (
        A.shape, A.dtype, A._c_contiguous, A._f_contiguous, x.shape, x.dtype, x._c_contiguous,
        y.shape, y.dtype, y._c_contiguous, ((pa | px | py) & 15) == 0, dev,
    )  # fmt: skip
    if _MULTI:
        key += (A.data.device_id, x.data.device_id, y.data.device_id)
    return key


def _ger_fast(alpha, x, y, A):
    """Launch a call whose signature was validated before in this thread; None otherwise."""
    ta = type(alpha)
    if not (ta is float or ta is int) or type(x) is not _ND or type(y) is not _ND:
        return None
    pa, px, py = A.data.ptr, x.data.ptr, y.data.ptr
    dev = _DEVICE()
    rec = _TABLE.records.get(_ger_key(A, x, y, pa, px, py, dev))
    if rec is None:
        return None
    fmax = rec.fmax
    if not -fmax <= alpha <= fmax:  # NaN, inf or beyond the dtype: the validating path refuses it
        return None
    ab = A.nbytes
    if (px < pa + ab and pa < px + x.nbytes) or (py < pa + ab and pa < py + y.nbytes):
        return None  # the validating path raises the overlap error
    if alpha == 0:
        return A
    s = rec.slots
    if rec.swap:
        s[0], s[1], s[2] = pa, py, px
    else:
        s[0], s[1], s[2] = pa, px, py
    rec.fa.value = alpha
    _LAUNCH(rec.fptr, rec.gx, rec.gy, 1, rec.bx, rec.by, 1, 0, _STREAM().ptr, rec.paddr, 0)
    return A


def _ger_cuda(alpha, x, y, A, fortran):
    cupy = get_cupy()
    _bind_cupy(cupy)
    pa, px, py = A.data.ptr, x.data.ptr, y.data.ptr
    lim = device_limits()
    dev = lim.device_id
    key = _ger_key(A, x, y, pa, px, py, dev) if _LAUNCH is not None else None
    At, xx, yy = (A.T, y, x) if fortran else (A, x, y)
    mm, nn = At.shape
    f32 = A.dtype == _F32
    vector = (nn % (4 if f32 else 2) == 0) and ((pa | px | py) & 15) == 0
    pkey = ("ger", dev, mm, nn, f32, vector)
    k, grid, block = _cached_plan(pkey, _ger_plan, lim, mm, nn, A.dtype, vector)
    scal = np.float32 if f32 else np.float64
    k(grid, block, (At, xx, yy, np.int64(mm), np.int64(nn), scal(alpha)))
    layout = ["p", "p", "p", ("q", mm), ("q", nn), "f"]
    _register(key, lambda: _Plan(k, grid, block, layout, A.dtype, swap=fortran))
    return A
