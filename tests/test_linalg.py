"""sknn_gpu.linalg.gemv / ger against a float64 NumPy reference, on both devices."""

import numpy as np
import pytest

from sknn_gpu._backend import get_xp, to_host
from sknn_gpu.linalg import gemv, ger

# shapes that hit every GPU variant: tall-skinny (rows with few lanes, t_flat), square
# (rows / t_cols), short-wide (block_row, split-K), odd sizes (no vector loads)
SHAPES = [
    (1, 1),
    (3, 7),
    (17, 5),
    (1000, 10),
    (257, 129),
    (64, 1000),
    (128, 4096),
    (8, 20000),
    (5, 33),
    (301, 2053),
]


def _tol(dtype, k):
    return (
        (1e-5 * max(1.0, np.sqrt(k)), 1e-5) if dtype == np.float32 else (1e-12 * max(1.0, np.sqrt(k)), 1e-12)
    )


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("trans", [False, True])
def test_gemv_matches_float64_reference(device, rng, shape, dtype, trans):
    xp = get_xp(device)
    m, n = shape
    A = rng.standard_normal((m, n)).astype(dtype)
    x = rng.standard_normal(m if trans else n).astype(dtype)
    y0 = rng.standard_normal(n if trans else m).astype(dtype)
    alpha, beta = float(rng.uniform(-2, 2)), float(rng.uniform(-2, 2))
    opA = A.astype(np.float64).T if trans else A.astype(np.float64)
    want = alpha * opA @ x.astype(np.float64) + beta * y0.astype(np.float64)
    yd = xp.asarray(y0)
    out = gemv(xp.asarray(A), xp.asarray(x), yd, alpha=alpha, beta=beta, trans=trans)
    assert out is yd
    got = to_host(out)
    assert got.dtype == dtype
    rtol, atol = _tol(dtype, opA.shape[1])
    scale = np.abs(opA) @ np.abs(x.astype(np.float64)) * abs(alpha) + abs(beta) * np.abs(y0)
    assert np.all(np.abs(got - want) <= atol + rtol * scale)


@pytest.mark.parametrize("order", ["C", "F"])
def test_gemv_new_output_and_fortran_order(device, rng, order):
    xp = get_xp(device)
    m, n = int(rng.integers(2, 50)), int(rng.integers(2, 50))
    A = np.asarray(rng.standard_normal((m, n)), order=order)
    x = rng.standard_normal(n)
    got = gemv(xp.asarray(A, order=order), xp.asarray(x), alpha=0.5)
    got = to_host(got)
    np.testing.assert_allclose(got, 0.5 * A @ x, rtol=1e-12, atol=1e-12)


def test_gemv_beta_zero_ignores_nan_in_y(device, rng):
    xp = get_xp(device)
    A = rng.standard_normal((6, 9))
    x = rng.standard_normal(9)
    y = xp.full(6, np.nan)
    got = gemv(xp.asarray(A), xp.asarray(x), y, beta=0.0)
    got = to_host(got)
    np.testing.assert_allclose(got, A @ x, rtol=1e-12)


@pytest.mark.parametrize(
    "shape", [(1, 1), (3, 7), (256, 256), (1000, 10), (10, 1001), (128, 8192), (33, 130)]
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("order", ["C", "F"])
def test_ger_matches_reference(device, rng, shape, dtype, order):
    xp = get_xp(device)
    m, n = shape
    A = np.asarray(rng.standard_normal((m, n)).astype(dtype), order=order)
    x = rng.standard_normal(m).astype(dtype)
    y = rng.standard_normal(n).astype(dtype)
    alpha = float(rng.uniform(-3, 3))
    want = A.astype(np.float64) + alpha * np.outer(x.astype(np.float64), y.astype(np.float64))
    Ad = xp.asarray(A, order=order)
    out = ger(alpha, xp.asarray(x), xp.asarray(y), Ad)
    assert out is Ad
    got = to_host(Ad)
    tol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(got, want, rtol=tol * 10, atol=tol * 10)


def test_bad_inputs_raise_clear_errors(device, rng):
    xp = get_xp(device)
    A = xp.asarray(rng.standard_normal((4, 5)))
    x5, x4 = xp.asarray(rng.standard_normal(5)), xp.asarray(rng.standard_normal(4))
    with pytest.raises(ValueError, match="x has length 4"):
        gemv(A, x4)
    with pytest.raises(ValueError, match="y has length 5"):
        gemv(A, x5, xp.zeros(5))
    with pytest.raises(TypeError, match="float32 or float64"):
        gemv(A.astype(xp.int64), x5)
    with pytest.raises(TypeError, match="dtype float32 but A has float64"):
        gemv(A, x5.astype(xp.float32))
    with pytest.raises(ValueError, match="2-D"):
        gemv(x5, x5)
    with pytest.raises(ValueError, match="contiguous"):
        gemv(xp.asarray(rng.standard_normal((4, 10)))[:, ::2], x5)
    with pytest.raises(ValueError, match="contiguous"):
        gemv(A, xp.asarray(rng.standard_normal(10))[::2])
    with pytest.raises(ValueError, match="needs an input y"):
        gemv(A, x5, beta=1.0)
    with pytest.raises(ValueError, match="finite"):
        gemv(A, x5, alpha=np.nan)
    # aliasing: y inside A, A overlapping x
    big = xp.asarray(rng.standard_normal(30))
    with pytest.raises(ValueError, match="overlap"):
        gemv(big[:20].reshape(4, 5), big[20:25], big[:4])
    with pytest.raises(ValueError, match="overlap"):
        ger(1.0, big[:4], big[10:15], big[:20].reshape(4, 5))
    with pytest.raises(ValueError, match="x needs length 4"):
        ger(1.0, x5, x5, A)
    with pytest.raises(TypeError, match="numpy.ndarray or cupy.ndarray"):
        gemv([[1.0]], [1.0])


@pytest.mark.cuda
def test_mixed_devices_rejected(rng):
    import cupy

    A = rng.standard_normal((3, 3))
    with pytest.raises(TypeError, match="one device"):
        gemv(A, cupy.asarray(rng.standard_normal(3)))


@pytest.mark.cuda
@pytest.mark.parametrize("shape", [(256, 256), (4096, 4096), (128, 16384), (256, 8192), (60000, 10)])
def test_gpu_equals_cpu_blas(rng, shape):
    import cupy

    A = rng.standard_normal(shape).astype(np.float32)
    for trans in (False, True):
        x = rng.standard_normal(shape[0] if trans else shape[1]).astype(np.float32)
        cpu = gemv(A, x, trans=trans)
        gpu = gemv(cupy.asarray(A), cupy.asarray(x), trans=trans).get()
        np.testing.assert_allclose(gpu, cpu, rtol=1e-4, atol=1e-4 * np.abs(cpu).max())


@pytest.mark.cuda
@pytest.mark.parametrize("shape", [(8192, 1024), (8193, 1024), (8191, 1028), (20000, 256)])
def test_two_rows_per_warp_kernel_gives_the_one_row_kernels_bits(rng, shape):
    """Many long rows take gemv_rows_multi (two rows per warp, x loaded once for both,
    odd row counts included); its sums are formed in gemv_rows's order: the same bits,
    with alpha and beta applied as BLAS does."""
    import cupy

    from sknn_gpu import linalg
    from sknn_gpu._backend import device_limits
    from sknn_gpu._kernels import get_function

    m, n = shape
    A = cupy.asarray(rng.standard_normal(shape).astype(np.float32))
    x = cupy.asarray(rng.standard_normal(n).astype(np.float32))
    y0 = cupy.asarray(rng.standard_normal(m).astype(np.float32))
    plan = linalg._gemv_plan(device_limits(), m, n, False, np.dtype(np.float32), True)
    assert plan[0] is get_function("gemv", f"gemv_rows_multi<float,{linalg._MULTI_ROWS}>")
    y = y0.copy()
    linalg.gemv(A, x, y, alpha=0.5, beta=-2.0)
    ref = y0.copy()
    one_row = get_function("gemv", "gemv_rows<float,32,true>")
    scalars = (np.int64(m), np.int64(n), np.float32(0.5), np.float32(-2.0))
    one_row((int(-(-m // 8)),), (256,), (A, x, ref, *scalars))
    assert cupy.array_equal(y, ref)
    want = 0.5 * (A.get().astype(np.float64) @ x.get()) - 2.0 * y0.get()
    np.testing.assert_allclose(y.get(), want, rtol=1e-4, atol=1e-3)


# ------------------------------------------------------------- repeated calls (cached launches)
# A CuPy call whose signature was validated before in the same thread is launched from a
# prebuilt argument block; these tests make sure the cached path computes the same
# thing with new data and new scalars, and still refuses what the validation refuses.


@pytest.mark.parametrize("shape", [(300, 200), (64, 5000), (5000, 40), (2048, 2048), (333, 20)])
@pytest.mark.parametrize("trans", [False, True])
def test_gemv_repeated_calls_new_data_and_scalars(device, rng, shape, trans):
    xp = get_xp(device)
    m, n = shape
    A = xp.asarray(rng.standard_normal(shape).astype(np.float32))
    y = xp.zeros(n if trans else m, dtype=np.float32)
    for _ in range(3):  # first call validates and builds the launch; the others reuse it
        x0 = rng.standard_normal(m if trans else n).astype(np.float32)
        y0 = rng.standard_normal(n if trans else m).astype(np.float32)
        alpha, beta = float(rng.uniform(-2, 2)), float(rng.uniform(-2, 2))
        y[...] = xp.asarray(y0)
        A_h = to_host(A)
        opA = A_h.astype(np.float64).T if trans else A_h.astype(np.float64)
        want = alpha * opA @ x0 + beta * y0
        out = gemv(A, xp.asarray(x0), y, alpha=alpha, beta=beta, trans=trans)
        assert out is y
        got = to_host(out)
        scale = abs(alpha) * np.abs(opA) @ np.abs(x0) + abs(beta) * np.abs(y0)
        assert np.all(np.abs(got - want) <= 1e-5 + 1e-5 * np.sqrt(opA.shape[1]) * scale)
        fresh = gemv(A, xp.asarray(x0), alpha=alpha, trans=trans)  # new output each call
        assert fresh is not y
        got = to_host(fresh)
        np.testing.assert_allclose(got, alpha * opA @ x0, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("shape", [(256, 256), (5, 1001), (1000, 3)])
def test_ger_repeated_calls_accumulate(device, rng, order, shape):
    xp = get_xp(device)
    A0 = np.asarray(rng.standard_normal(shape), order=order)
    A = xp.asarray(A0, order=order)
    want = A0.copy()
    for alpha in (0.5, -1.25, 0.0, 2):  # includes alpha == 0 (a no-op) and an int
        x0, y0 = rng.standard_normal(shape[0]), rng.standard_normal(shape[1])
        assert ger(alpha, xp.asarray(x0), xp.asarray(y0), A) is A
        want += alpha * np.outer(x0, y0)
    got = to_host(A)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_cached_signature_still_refuses_bad_calls(device, rng):
    xp = get_xp(device)
    buf = xp.asarray(rng.standard_normal(40))
    A, x, y = buf[:20].reshape(4, 5), buf[20:25], buf[25:29]
    gemv(A, x, y)  # valid: caches this signature
    gemv(A, x, y)
    with pytest.raises(ValueError, match="overlap"):
        gemv(A, x, buf[16:20])  # same shapes and layout, but y lies inside A
    with pytest.raises(ValueError, match="finite"):
        gemv(A, x, y, alpha=float("nan"))
    with pytest.raises(ValueError, match="finite"):
        gemv(A, x, y, beta=float("inf"))
    gemv(A, x)
    with pytest.raises(ValueError, match="needs an input y"):
        gemv(A, x, beta=0.5)
    ger(1.0, buf[30:34], buf[34:39], A)
    with pytest.raises(ValueError, match="overlap"):
        ger(1.0, buf[0:4], buf[34:39], A)
    with pytest.raises(ValueError, match="finite"):
        ger(float("-inf"), buf[30:34], buf[34:39], A)
    with pytest.raises(TypeError, match="dtype float32 but A has float64"):
        ger(1.0, buf[30:34].astype(np.float32), buf[34:39], A)


@pytest.mark.cuda
def test_gpu_calls_use_cached_driver_launch(rng):
    import cupy

    from sknn_gpu import linalg

    A = cupy.asarray(rng.standard_normal((96, 80)).astype(np.float32))
    x = cupy.asarray(rng.standard_normal(80).astype(np.float32))
    gemv(A, x)
    ger(1.0, cupy.zeros(96, np.float32), x, A)
    if linalg._LAUNCH is not None:  # a CuPy with cuLaunchKernel: the second call is the fast one
        assert len(linalg._TABLE.records) >= 2
        assert linalg._gemv_fast(A, x, None, 1.0, 0.0, False) is not None


@pytest.mark.cuda
@pytest.mark.parametrize("shape", [(2048, 2048), (8, 20000), (60000, 10)])
def test_gpu_split_kernels_on_other_streams(rng, shape):
    import cupy

    A_h = rng.standard_normal(shape).astype(np.float32)
    A = cupy.asarray(A_h)
    for trans in (False, True):
        x_h = rng.standard_normal(shape[0] if trans else shape[1]).astype(np.float32)
        want = (A_h.T if trans else A_h).astype(np.float64) @ x_h
        x = cupy.asarray(x_h)
        gemv(A, x, trans=trans)  # default stream first, so the cached launch exists
        cupy.cuda.Device().synchronize()  # the other streams do not wait for the default one
        outs = []
        streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(3)]
        for s in streams:
            with s:
                outs.append([gemv(A, x, trans=trans) for _ in range(4)])
        for s, res in zip(streams, outs):
            s.synchronize()
            for r in res:
                np.testing.assert_allclose(r.get(), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.cuda
def test_gpu_threads_get_their_own_launch_records(rng):
    import threading

    import cupy

    A_h = rng.standard_normal((512, 384)).astype(np.float32)
    xs = [rng.standard_normal(512).astype(np.float32) for _ in range(4)]
    A = cupy.asarray(A_h)
    results, errors = {}, []

    def work(i):
        try:
            cupy.cuda.Device(A.device.id).use()
            x = cupy.asarray(xs[i])
            y = cupy.empty(384, dtype=np.float32)
            for _ in range(50):
                gemv(A, x, y, trans=True, alpha=float(i + 1))
            cupy.cuda.get_current_stream().synchronize()
            results[i] = y.get()
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in range(4):
        want = (i + 1) * A_h.T.astype(np.float64) @ xs[i]
        np.testing.assert_allclose(results[i], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize(
    "m, col_blocks, want",
    [
        (128, 8, (16, 1)),  # up to 256 rows: never split; 16 rows a lane, all loaded at once
        (128, 128, (16, 1)),
        (256, 4, (32, 1)),  # 32 rows a lane: loaded 32 at once
        (256, 64, (32, 1)),
        (512, 4, (16, 8)),  # above: at least 8 splits ...
        (1024, 8, (16, 8)),
        (2048, 16, (32, 8)),
        (8192, 2, (32, 32)),  # ... m // 256, at most 32
        (65536, 4, (32, 32)),
        (4096, 32, (32, 4)),  # ... and at most one block per SM: 132 // 32 tiles
        (8192, 64, (32, 2)),
        (4096, 2000, (32, 1)),  # more column tiles than SMs: no split
    ],
)
def test_transposed_split_rule(m, col_blocks, want):
    from sknn_gpu.linalg import _t_cols_config

    assert _t_cols_config(m, col_blocks, n_sm=132) == want


def test_transposed_rule_can_be_forced_for_the_tuning_sweep(monkeypatch):
    from sknn_gpu import linalg

    monkeypatch.setattr(linalg, "_T_COLS_FORCE", (4, 64))
    assert linalg._t_cols_config(512, 4, n_sm=132) == (4, 64)
    assert linalg._t_cols_config(16, 4, n_sm=132) == (4, 16)  # never more splits than rows


@pytest.mark.parametrize(
    "m, n, want",
    [
        (128, 256, None),  # below 256 rows one block per column tile sums every row
        (256, 256, (8, 4)),  # every row lane keeps >= 8 rows
        (512, 512, (8, 8)),
        (1024, 1024, (16, 8)),
        (4096, 4096, (4, 8)),  # 32 tiles x 8 = 256 blocks: within 2 per SM; 64 rows per lane: U = 4
        (8192, 8192, (8, 4)),
        (16384, 16384, (16, 2)),  # pairs of blocks load 16 rows at once
        (256, 4096, (16, 2)),  # a grid beyond half the SMs wants >= 16 rows per lane
        (256, 16384, None),  # tiles alone cover half the SMs: split only for >= 64 rows per lane
        (2048, 2048, (16, 8)),
        (65536, 512, None),  # 4 tiles x 8 blocks for 128 MiB: the workspace split spreads wider
        (128 * 8, 132 * 128 * 3, None),  # more tiles than 2 per SM
    ],
)
def test_transposed_cluster_rule(m, n, want):
    from sknn_gpu.linalg import _t_cluster_config

    assert _t_cluster_config(m, -(-n // 128), 132, (9, 0), m * n * 4) == want
    assert _t_cluster_config(m, -(-n // 128), 132, (8, 0), m * n * 4) is None  # clusters need 9.0


@pytest.mark.parametrize(
    ("m", "n", "itemsize", "want"),
    [
        (512, 512, 4, True),  # 4 vector tiles x 8 blocks = 32 < 132 / 4
        (1024, 512, 4, True),
        (512, 512, 8, False),  # float64: 8 tiles of 64 columns, 64 blocks
        (256, 512, 4, False),  # too few rows for 8 blocks of 8 row lanes
        (512, 1024, 4, False),  # 64 blocks
        (2048, 512, 4, False),  # 4 MiB
    ],
)
def test_transposed_narrow_tile_rule(m, n, itemsize, want):
    from sknn_gpu.linalg import _t_narrow_tiles

    vw = 16 // itemsize
    assert _t_narrow_tiles(m, -(-n // (32 * vw)), 132, (9, 0), m * n * itemsize) is want
    assert not _t_narrow_tiles(m, -(-n // (32 * vw)), 132, (8, 0), m * n * itemsize)


@pytest.mark.parametrize(
    "m, n, want",
    [
        (256, 256, (8, 32, 8)),
        (512, 512, (8, 32, 16)),
        (300, 700, (8, 32, 16)),  # 10 rows per lane: 16 loads, the last 6 guarded
        (512, 1024, (16, 16, 32)),  # beyond 512² elements: 16 columns x 16 row lanes
        (1024, 512, (16, 16, 64)),
        (1024, 1024, None),  # measured no faster: the cluster kernel
        (128, 512, None),  # outside 256..1024: the column-tile kernels
        (2048, 512, None),
        (512, 2048, None),
    ],
)
def test_transposed_small_rule(m, n, want):
    from sknn_gpu import linalg

    assert linalg._t_small_config(m, n, np.dtype(np.float32)) == want
    assert linalg._t_small_config(m, n, np.dtype(np.float64)) is None  # measured for float32 only


def test_transposed_small_rule_steps_aside_for_the_tuning_sweep(monkeypatch):
    from sknn_gpu import linalg

    monkeypatch.setattr(linalg, "_T_CLUSTER_FORCE", (8, 8))
    assert linalg._t_small_config(512, 512, np.dtype(np.float32)) is None


@pytest.mark.cuda
@pytest.mark.parametrize("shape", [(512, 512), (300, 700), (1024, 256), (256, 1024), (1024, 512)])
def test_transposed_small_kernel_matches_cpu(rng, shape):
    """gemv_t_small (the rule's float32 shapes, rows not a multiple of the lanes included),
    with alpha and beta and with beta = 0 over a NaN y, against the CPU; the second call
    takes the cached launch record."""
    import cupy

    from sknn_gpu import linalg
    from sknn_gpu._backend import device_limits

    m, n = shape
    plan = linalg._gemv_plan(device_limits(), m, n, True, np.dtype(np.float32), True)
    tc, rl, _ = linalg._t_small_config(m, n, np.dtype(np.float32))
    assert plan[1] == (-(-n // tc),) and plan[2] == (tc * rl,) and plan[3] is None
    A = rng.standard_normal((m, n)).astype(np.float32)
    x = rng.standard_normal(m).astype(np.float32)
    y0 = rng.standard_normal(n).astype(np.float32)
    want = gemv(A, x, y0.copy(), alpha=0.75, beta=-1.5, trans=True)
    scale = 0.75 * np.abs(A.T.astype(np.float64)) @ np.abs(x) + 1.5 * np.abs(y0)
    for _ in range(2):
        got = gemv(cupy.asarray(A), cupy.asarray(x), cupy.asarray(y0), alpha=0.75, beta=-1.5, trans=True)
        assert np.all(np.abs(got.get() - want) <= 1e-5 * (1 + scale))
    y_nan = cupy.full(n, np.nan, dtype=np.float32)
    got = gemv(cupy.asarray(A), cupy.asarray(x), y_nan, trans=True).get()  # beta = 0: y is never read
    ref = A.T.astype(np.float64) @ x
    assert np.all(np.abs(got - ref) <= 1e-5 * (1 + np.abs(A.T.astype(np.float64)) @ np.abs(x)))


@pytest.mark.cuda
def test_transposed_narrow_tiles_match_cpu(rng):
    """2048 x 256 float32 A.T @ x in 32-column tiles over clusters of 8 blocks (the rule's
    case; 512², where it was measured, now takes gemv_t_small), with alpha and beta,
    against the CPU."""
    import cupy

    from sknn_gpu import linalg
    from sknn_gpu._backend import device_limits

    lim = device_limits()
    if lim.compute_capability < (9, 0) or lim.sm_count < 132:
        pytest.skip("the narrow-tile rule applies on compute capability 9.0 with >= 132 SMs")
    plan = linalg._gemv_plan(lim, 2048, 256, True, np.dtype(np.float32), True)
    assert plan[1] == (8, 8) and plan[2] == (32, 8) and plan[3] is None
    A = rng.standard_normal((2048, 256)).astype(np.float32)
    x = rng.standard_normal(2048).astype(np.float32)
    y0 = rng.standard_normal(256).astype(np.float32)
    want = gemv(A, x, y0.copy(), alpha=0.75, beta=-1.5, trans=True)
    scale = 0.75 * np.abs(A.T.astype(np.float64)) @ np.abs(x) + 1.5 * np.abs(y0)
    for _ in range(2):  # the second call takes the cached launch record
        got = gemv(cupy.asarray(A), cupy.asarray(x), cupy.asarray(y0), alpha=0.75, beta=-1.5, trans=True)
        assert np.all(np.abs(got.get() - want) <= 1e-5 * (1 + scale))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(512, 512), (301, 2053), (5, 132), (1000, 96)])
@pytest.mark.parametrize("force", [(8, 2), (16, 4), (32, 8), (8, 16)], ids=lambda f: f"U{f[0]}C{f[1]}")
def test_transposed_cluster_kernel_matches_cpu(monkeypatch, rng, dtype, shape, force):
    """The cluster variant of A.T @ x (partial sums met in distributed shared memory),
    forced on shapes with odd sizes, blocks with no rows (5 rows over up to 16 blocks),
    scalar tiles (n not a multiple of the vector width), alpha and beta, against the CPU."""
    import cupy

    from sknn_gpu import linalg
    from sknn_gpu._backend import device_limits

    if device_limits().compute_capability < (9, 0):
        pytest.skip("thread-block clusters need compute capability 9.0")
    monkeypatch.setattr(linalg, "_T_CLUSTER_FORCE", force)
    monkeypatch.setattr(linalg, "_plan_cache", {})
    linalg._TABLE.clear()
    m, n = shape
    A = rng.standard_normal(shape).astype(dtype)
    x = rng.standard_normal(m).astype(dtype)
    y0 = rng.standard_normal(n).astype(dtype)
    plan = linalg._gemv_plan(device_limits(), m, n, True, np.dtype(dtype), True)
    assert plan[2] == (32, 8) and plan[1][1] == force[1] and plan[3] is None  # no workspace
    want = gemv(A, x, y0.copy(), alpha=0.75, beta=-1.5, trans=True)
    for _ in range(2):  # the second call takes the cached launch record
        got = gemv(cupy.asarray(A), cupy.asarray(x), cupy.asarray(y0), alpha=0.75, beta=-1.5, trans=True)
        rtol = 1e-5 if dtype == np.float32 else 1e-12
        scale = 0.75 * np.abs(A.T.astype(np.float64)) @ np.abs(x) + 1.5 * np.abs(y0)
        assert np.all(np.abs(got.get() - want) <= rtol * (1 + scale))
    linalg._TABLE.clear()


# ------------------------------------------------------------- the cached launch facility (no GPU needed)
class _FakeKernel:
    """What :class:`Launch` reads from a CuPy RawKernel: ``kernel.ptr``."""

    class kernel:  # noqa: N801 - mirrors RawKernel.kernel
        ptr = 0x1234


@pytest.mark.parametrize("f32", [False, True])
def test_launch_record_argument_block(monkeypatch, f32):
    import ctypes

    from sknn_gpu._kernels import _launch

    calls = []
    monkeypatch.setattr(_launch, "_driver", lambda *args: calls.append(args))
    layout = ["p", ("q", 2**40 + 7), "f", ("i", -3), "f", "p"]
    rec = _launch.Launch(_FakeKernel, (3, 2), (64,), layout, f32, shared_mem=96)
    assert len(rec.floats) == 2
    rec.slots[0], rec.slots[5] = 0xDEADBEEF, 0xFEED
    rec.floats[0].value, rec.floats[1].value = 2.5, -1.25
    rec.launch(77)
    ((fptr, gx, gy, gz, bx, by, bz, smem, stream, paddr, extra),) = calls
    assert (fptr, gx, gy, gz, bx, by, bz, smem, stream, extra) == (0x1234, 3, 2, 1, 64, 1, 1, 96, 77, 0)
    # the driver reads argument i through params[i], which points at slot i
    params = (ctypes.c_void_p * len(layout)).from_address(paddr)
    base = ctypes.addressof(rec.slots)
    assert [params[i] for i in range(len(layout))] == [base + 8 * i for i in range(len(layout))]
    ftype = ctypes.c_float if f32 else ctypes.c_double
    read = [
        ctypes.c_uint64.from_address(params[0]).value,
        ctypes.c_int64.from_address(params[1]).value,
        ftype.from_address(params[2]).value,
        ctypes.c_int32.from_address(params[3]).value,
        ftype.from_address(params[4]).value,
        ctypes.c_uint64.from_address(params[5]).value,
    ]
    assert read == [0xDEADBEEF, 2**40 + 7, 2.5, -3, -1.25, 0xFEED]
    with pytest.raises(ValueError, match="unknown launch layout entry"):
        _launch.Launch(_FakeKernel, (1,), (1,), ["x"], f32)


def _fake_cupy(events, *, has_capture=True, end_error=False):
    """Just what ``capture_graph`` touches of CuPy: a stream with begin/end capture, the
    capture mode constant and the two CUDA error types. ``events`` logs the calls."""
    import types

    class RuntimeErr(Exception):
        pass

    class DriverErr(Exception):
        pass

    class Stream:
        def __init__(self, non_blocking=False):
            events.append(("stream", non_blocking))

        def __enter__(self):
            events.append("enter")
            return self

        def __exit__(self, *exc):
            events.append("exit")

        def end_capture(self):
            events.append("end")
            if end_error:
                raise RuntimeErr("capture invalidated")
            return "graph"

    if has_capture:
        Stream.begin_capture = lambda self, mode: events.append(("begin", mode))
    runtime = types.SimpleNamespace(streamCaptureModeRelaxed=2, CUDARuntimeError=RuntimeErr)
    driver = types.SimpleNamespace(CUDADriverError=DriverErr)
    cuda = types.SimpleNamespace(Stream=Stream, runtime=runtime, driver=driver)
    return types.SimpleNamespace(cuda=cuda)


def test_capture_graph_falls_back_only_when_capture_is_unavailable(monkeypatch):
    """capture_graph: the work is enqueued once on a fresh non-blocking stream in relaxed
    mode; capture mode is always left; a CuPy without capture or a driver refusal gives
    None (the caller keeps its calls); any other error in the work propagates."""
    from sknn_gpu._kernels import _launch

    events = []
    fake = _fake_cupy(events)
    monkeypatch.setattr(_launch, "get_cupy", lambda: fake)
    assert _launch.capture_graph(lambda: events.append("work")) == "graph"
    assert events == [("stream", True), "enter", ("begin", 2), "work", "end", "exit"]

    events.clear()
    fake = _fake_cupy(events, has_capture=False)
    monkeypatch.setattr(_launch, "get_cupy", lambda: fake)
    assert _launch.capture_graph(lambda: events.append("work")) is None
    assert "work" not in events

    events.clear()
    fake = _fake_cupy(events, end_error=True)
    monkeypatch.setattr(_launch, "get_cupy", lambda: fake)
    assert _launch.capture_graph(lambda: events.append("work")) is None
    assert events[-2:] == ["end", "exit"]

    events.clear()
    fake = _fake_cupy(events)
    monkeypatch.setattr(_launch, "get_cupy", lambda: fake)

    def broken():
        raise KeyError("a bug in the work")

    with pytest.raises(KeyError, match="a bug in the work"):
        _launch.capture_graph(broken)
    assert events[-2:] == ["end", "exit"]  # capture mode was left first


def test_launch_table_is_per_thread_and_bounded(monkeypatch):
    import threading

    from sknn_gpu._kernels import _launch

    monkeypatch.setattr(_launch, "_driver", lambda *args: None)
    table = _launch.LaunchTable(limit=3)
    for i in range(4):
        table.register(i, lambda: f"record {i}")  # noqa: B023
    assert table.records == {0: "record 0", 1: "record 1", 2: "record 2", 3: "record 3"}
    table.register(4, lambda: "record 4")  # over the limit: the table starts again
    assert table.records == {4: "record 4"}
    seen = []
    t = threading.Thread(target=lambda: seen.append(dict(table.records)))
    t.start()
    t.join()
    assert seen == [{}]  # another thread has its own (empty) table
    table.register(5, lambda: 1 / 0)  # a record that cannot be built is skipped
    assert 5 not in table.records
    monkeypatch.setattr(_launch, "_driver", None)  # no cuLaunchKernel: nothing is stored
    table.clear()
    table.register(6, lambda: "record 6")
    assert table.records == {}
