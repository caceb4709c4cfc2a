"""FlyHash ``precision``: 'exact' / 'integer' / 'fast' on both devices (issue 13).

CPU: every precision gives the exact hash; bad settings and non-integer input under
'integer' are refused. GPU: integer-valued input goes through tensor cores and is
bit-identical to the CPU; 'fast' keeps >= 99 % of the exact winners.
"""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_digits
from sklearn.preprocessing import StandardScaler

from sknn_gpu._backend import to_host
from sknn_gpu._constraints import InvalidParameterError
from sknn_gpu.fly import FlyHashTransformer, FlyNNClassifier, _flyhash_cpu, _flyhash_cuda


def _hash(X, precision, device, output="dense", **params):
    params = {"k": 40, "n_components": 1000, "random_state": 3, **params}
    fh = FlyHashTransformer(precision=precision, output=output, device=device, **params).fit(X)
    return to_host(fh.transform(X)), fh


def _pixels(rng, n=300, d=784):
    """uint8-valued images as float: many equal activations (ties) per row."""
    return rng.integers(0, 256, size=(n, d)).astype(np.float64)


def _recall(fast, exact):
    """Fraction of the exact winners the fast hash kept (same k per row)."""
    fast, exact = np.asarray(fast, bool), np.asarray(exact, bool)
    return float((fast & exact).sum() / exact.sum())


# ----------------------------------------------------------------------------- CPU
@pytest.mark.parametrize("precision", ["integer", "fast"])
def test_every_precision_is_the_exact_hash_on_the_cpu(rng, precision):
    X = _pixels(rng, n=60, d=100)
    exact, _ = _hash(X, "exact", "cpu")
    other, _ = _hash(X, precision, "cpu")
    np.testing.assert_array_equal(other, exact)
    assert np.all(exact.sum(axis=1) == 40)
    if precision == "fast":  # and for input that is not integer-valued
        Xf = rng.random((60, 100))
        np.testing.assert_array_equal(_hash(Xf, "fast", "cpu")[0], _hash(Xf, "exact", "cpu")[0])


def test_integer_precision_refuses_other_input(rng):
    X = _pixels(rng, n=20, d=50)
    fh = FlyHashTransformer(k=5, precision="integer", device="cpu", random_state=0).fit(X)
    fh.transform(X)  # whole numbers in [0, 255]: fine
    fh.transform(np.asarray(X, dtype=np.uint8))  # the dtype does not matter
    for bad in (X + 0.5, X * 9, X - 3000):  # halves, above 2048, below -2048
        with pytest.raises(ValueError, match="integer-valued input"):
            fh.transform(bad)
    with pytest.raises(ValueError, match="integer-valued input"):
        fh.transform(sp.csr_matrix(np.where(X > 200, X + 0.25, 0.0)))


def test_integer_valued_checks_whole_numbers_and_range():
    ok = np.array([[0.0, -0.0, 2048.0, -2048.0, 7.0, 1024.0]])
    assert _flyhash_cpu.integer_valued(ok)
    for v in (2049.0, 0.5, -1e-3, np.nextafter(np.float32(0), 1), 1e9, 3.0000002):
        assert not _flyhash_cpu.integer_valued(np.array([[1.0, v]], dtype=np.float32)), v
    assert _flyhash_cpu.integer_valued(sp.csr_matrix(ok))
    assert _flyhash_cpu.integer_valued(np.zeros((0, 3)))
    # judged on the float32 values the hash sees: 7 + 1e-9 is 7.0 in float32
    assert _flyhash_cpu.integer_valued(np.array([[7 + 1e-9, 3.0]]))


_INTEGER_CASES = [
    (np.array([[0.0, -0.0, 2048.0, -2048.0, 7.0]]), True),
    (np.array([[7 + 1e-9, 3.0]]), True),
    (np.array([[1.0, 2049.0]]), False),
    (np.array([[1.0, 0.5]]), False),
    (np.array([[1.0, 1e-40]], dtype=np.float32), False),  # a subnormal
]


def test_precision_setting_errors():
    X = np.arange(40, dtype=float).reshape(4, 10)
    with pytest.raises(InvalidParameterError, match="precision"):
        FlyHashTransformer(precision="half").fit(X)
    for p in ("integer", "fast"):
        with pytest.raises(ValueError, match="algorithm='exact' only"):
            FlyHashTransformer(precision=p, algorithm="bisect", device="cpu").fit(X)
    with pytest.raises(ValueError, match="normalize=False"):
        FlyNNClassifier(precision="integer", device="cpu").fit(X, [0, 1, 0, 1])


def test_flynn_reads_precision_at_every_call():
    X, y = load_digits(return_X_y=True)  # whole numbers 0..16
    raw = dict(encoding=None, normalize=False, random_state=0, device="cpu")  # the raw pixels
    clf = FlyNNClassifier(precision="integer", **raw).fit(X, y)
    ref = FlyNNClassifier(**raw).fit(X, y)
    np.testing.assert_array_equal(clf.counts_, ref.counts_)
    clf.set_params(precision="fast")
    np.testing.assert_array_equal(clf.predict(X), ref.predict(X))
    clf.set_params(precision="integer")
    with pytest.raises(ValueError, match="integer-valued input"):
        clf.predict(X + 0.5)


def test_fast_scale_keeps_float16_activations_finite():
    """'fast' scales each row's largest magnitude into [2**(TOP-1), 2**TOP): S of them sum
    below float16's largest value, with the largest TOP that does; float32 activations
    only when no TOP >= 1 can (S > 32752)."""
    for s in [1, 2, 3, 39, 78, 153, 900, 4096, 32752, 32753, 60000]:
        top, half = _flyhash_cuda._fast_scale_top(s)
        if half:
            assert 1 <= top <= 15 and s * 2.0**top <= _flyhash_cuda.HALF_MAX
            assert top == 15 or s * 2.0 ** (top + 1) > _flyhash_cuda.HALF_MAX
        else:
            assert s > 32752 and top == 15
    assert _flyhash_cuda._fast_scale_top(39) == (10, True)


# ----------------------------------------------------------------------------- GPU
@pytest.mark.cuda
@pytest.mark.parametrize(
    "data",
    ["pixels", "digits", "signed", "constant-rows"],
)
def test_integer_input_on_tensor_cores_is_bit_identical(rng, data):
    s = None
    if data == "pixels":
        X = _pixels(rng)
    elif data == "digits":
        X = load_digits().data[:500]
    elif data == "signed":  # sums up to +-2048 * 900: far from 2**24, still exact
        X = rng.integers(-2048, 2049, size=(200, 1000)).astype(np.float32)
        s = 900
    else:  # every activation of a row equal: the first k units win
        X = np.repeat(rng.integers(0, 256, size=(50, 1)), 300, axis=1).astype(np.float64)
    params = {} if s is None else {"n_connections": s}
    cpu, _ = _hash(X, "exact", "cpu", **params)
    import cupy

    fh = FlyHashTransformer(k=40, n_components=1000, random_state=3, device="cuda", **params).fit(X)
    stats = {}
    words = _flyhash_cuda.words(fh, cupy.asarray(X, dtype=cupy.float32), "exact", stats=stats)
    assert stats.get("tensor_rows") == X.shape[0] and not stats.get("fallback_rows")
    gpu = np.unpackbits(words.get().view(np.uint8), axis=1)[:, : fh.n_components_]
    np.testing.assert_array_equal(gpu, cpu)
    np.testing.assert_array_equal(_hash(X, "integer", "cuda", **params)[0], cpu)


@pytest.mark.cuda
def test_float_input_stays_off_the_integer_path_under_exact(rng):
    import cupy

    X = rng.random((64, 200)).astype(np.float32)
    fh = FlyHashTransformer(k=20, n_components=800, random_state=0, device="cuda").fit(X)
    stats = {}
    _flyhash_cuda.words(fh, cupy.asarray(X), "exact", stats=stats)
    assert not stats.get("tensor_rows")
    with pytest.raises(ValueError, match="integer-valued input"):
        FlyHashTransformer(precision="integer", device="cuda").fit(X).transform(cupy.asarray(X))


@pytest.mark.cuda
def test_selection_without_shared_memory_keys_and_over_chunks(rng, monkeypatch):
    """m too large for the row's keys in shared memory, and many product chunks."""
    monkeypatch.setenv("SKNN_GPU_FLYHASH_CHUNK_MB", "1")  # 4 rows of 60,000 units a chunk
    X = rng.integers(0, 16, size=(37, 64)).astype(np.float32)
    params = {"n_components": 60000, "k": 3000, "n_connections": 12}
    gpu, cpu = _hash(X, "integer", "cuda", **params)[0], _hash(X, "exact", "cpu", **params)[0]
    np.testing.assert_array_equal(gpu, cpu)


@pytest.mark.cuda
@pytest.mark.parametrize("data", ["digits", "digits-standardized", "uniform"])
def test_fast_keeps_the_exact_winners(rng, data):
    if data.startswith("digits"):
        X = load_digits().data
        if data == "digits-standardized":  # real-valued features: float16 rounds them
            X = StandardScaler().fit_transform(X)
        params = {"n_components": 1280, "k": 64}
    else:
        X = rng.random((2000, 784)).astype(np.float32)
        params = {"n_components": 25088 // 4, "k": 313, "n_connections": 39}
    exact, _ = _hash(X, "exact", "cpu", **params)
    fast, _ = _hash(X, "fast", "cuda", **params)
    assert np.all(fast.sum(axis=1) == params["k"])
    assert _recall(fast, exact) >= 0.99


@pytest.mark.cuda
@pytest.mark.parametrize("bits", [16, 32])
@pytest.mark.parametrize("m", [1000, 1003])  # 16-byte loads, one key at a time
@pytest.mark.parametrize("smem_keys", [1, 0])
def test_fly_select_ranks_like_a_stable_sort(rng, bits, m, smem_keys):
    """fly_select on float16 and float32 activations: the k largest per row, ties to the
    lower unit, -0.0 equal to +0.0, rows of one repeated value."""
    import cupy

    from sknn_gpu._kernels import get_function

    n, k = 64, 37
    dt = np.float16 if bits == 16 else np.float32
    pool = np.array([-0.0, 0.0, 1.0, -1.0, 2.5, 1000.0, 65504.0, -65504.0, 6e-8, 0.5], dt)
    A = np.where(rng.random((n, m)) < 0.5, pool[rng.integers(0, pool.size, (n, m))], rng.normal(size=(n, m)))
    A = A.astype(dt)
    A[0] = 3.0
    A[1] = np.where(rng.random(m) < 0.5, -0.0, 0.0)
    ref = np.zeros((n, m), bool)
    for r in range(n):
        ref[r, np.lexsort((np.arange(m), -A[r].astype(np.float64)))[:k]] = True
    mw = -(-m // 32)
    out = cupy.zeros((n, mw), dtype=cupy.uint32)
    itemsize = bits // 8
    if smem_keys:
        kern, dyn = _flyhash_cuda._select_kernel(m, itemsize)
    else:
        defines = {"SEL_NT": _flyhash_cuda.SEL_NT, "SMEM_KEYS": 0, "KEY16": int(bits == 16)}
        kern, dyn = get_function("flyhash_select", "fly_select", **defines), 0
    Ad = cupy.asarray(A.view(np.uint16) if bits == 16 else A)
    args = (Ad, np.int64(m), np.int32(m), np.int32(mw), np.int32(k), out, np.int64(mw), np.uint64(0))
    kern((n,), (_flyhash_cuda.SEL_NT,), args, shared_mem=dyn)
    got = np.unpackbits(out.get().view(np.uint8), axis=1)[:, :m].astype(bool)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.cuda
def test_fly_select_flags_float16_rows_it_cannot_decide_exactly(rng):
    """Integer sums rounded to float16 keep their winners when the k-th largest is within
    +-2047; beyond, the row is flagged (for the float32 path)."""
    import cupy

    m, k = 64, 5
    thresholds = [2047.0, 2048.0, -2047.0, -2048.0, 0.0, 1000.0]
    A = np.full((len(thresholds), m), -30000.0, dtype=np.float16)
    for r, t in enumerate(thresholds):
        A[r, [3, 9, 17, 40]] = 65504.0  # winners far above: their rounding does not matter
        A[r, 50] = t
    kern, dyn = _flyhash_cuda._select_kernel(m, 2)
    out = cupy.zeros((A.shape[0], 2), dtype=cupy.uint32)
    flags = cupy.zeros(A.shape[0], dtype=cupy.uint32)
    args = (
        cupy.asarray(A.view(np.uint16)),
        np.int64(m),
        np.int32(m),
        np.int32(2),
        np.int32(k),
        out,
        np.int64(2),
    )
    kern((A.shape[0],), (_flyhash_cuda.SEL_NT,), args + (flags,), shared_mem=dyn)
    np.testing.assert_array_equal(flags.get(), [0, 1, 0, 1, 0, 0])
    got = np.unpackbits(out.get().view(np.uint8), axis=1)[:, :m]
    assert np.all(np.flatnonzero(got[0]) == [3, 9, 17, 40, 50])


@pytest.mark.cuda
def test_integer_rows_beyond_float16_are_redone_in_float32(rng):
    """Pixel rows are decided from float16 activations, rows of +-2048 values (sums far
    beyond 2047) are flagged and hashed again from float32: all bit-identical."""
    import cupy

    X = np.concatenate(
        [rng.integers(0, 256, size=(60, 300)), rng.integers(-2048, 2049, size=(40, 300))]
    ).astype(np.float32)
    X = X[rng.permutation(X.shape[0])]
    big = int((np.abs(X) > 255).any(axis=1).sum())
    params = {"n_connections": 20}
    cpu, _ = _hash(X, "exact", "cpu", **params)
    fh = FlyHashTransformer(k=40, n_components=1000, random_state=3, device="cuda", **params).fit(X)
    stats = {}
    words = _flyhash_cuda.words(fh, cupy.asarray(X), "exact", stats=stats)
    assert stats["tensor_rows"] == 100 and stats["float32_rows"] == big == 40
    gpu = np.unpackbits(words.get().view(np.uint8), axis=1)[:, : fh.n_components_]
    np.testing.assert_array_equal(gpu, cpu)


@pytest.mark.cuda
def test_fast_with_many_connections_keeps_activations_finite(rng):
    """900 connections: rows scaled to below 2**6 so that sums stay in float16's range."""
    X = rng.random((300, 1000))
    params = {"n_components": 2000, "k": 100, "n_connections": 900}
    assert _flyhash_cuda._fast_scale_top(900) == (6, True)
    exact, _ = _hash(X, "exact", "cpu", **params)
    fast, _ = _hash(X, "fast", "cuda", **params)
    assert np.all(fast.sum(axis=1) == params["k"])
    assert _recall(fast, exact) >= 0.99


@pytest.mark.cuda
def test_fast_scales_rows_out_of_float16_range(rng):
    """Rows of 1e6 and of 1e-6 overflow or underflow float16 unless scaled first."""
    X = rng.random((100, 300))
    X[:50] *= 1e6
    X[50:] *= 1e-6
    exact, _ = _hash(X, "exact", "cpu")
    fast, _ = _hash(X, "fast", "cuda")
    assert _recall(fast[:50], exact[:50]) >= 0.99 and _recall(fast[50:], exact[50:]) >= 0.99


@pytest.mark.cuda
@pytest.mark.parametrize("case", range(len(_INTEGER_CASES)))
def test_integer_check_agrees_on_both_devices(case):
    import cupy
    import cupyx.scipy.sparse as csp

    X, expected = _INTEGER_CASES[case]
    assert _flyhash_cpu.integer_valued(X) is expected
    assert _flyhash_cuda.integer_valued(cupy.asarray(X)) is expected
    host_csr = sp.csr_matrix(X.astype(np.float32))  # built on the host: the subnormal is kept
    assert _flyhash_cuda.integer_valued(csp.csr_matrix(host_csr)) is expected


@pytest.mark.cuda
def test_tensor_core_products_reduce_in_float32_and_restore_the_math_mode(monkeypatch, rng):
    """cuBLAS may add split-K partial sums in a float16 output's precision unless told not
    to; the products ask for float32 reductions and leave the handle as they found it."""
    import cupy

    try:
        from cupy_backends.cuda.libs import cublas
    except ImportError:  # pragma: no cover - older layouts
        from cupy.cuda import cublas

    handle = cupy.cuda.device.get_cublas_handle()
    before = cublas.getMathMode(handle)
    seen = []
    real = cublas.gemmEx
    monkeypatch.setattr(cublas, "gemmEx", lambda h, *a: seen.append(cublas.getMathMode(h)) or real(h, *a))
    X = _pixels(rng, n=50, d=100)
    np.testing.assert_array_equal(_hash(X, "exact", "cuda")[0], _hash(X, "exact", "cpu")[0])
    assert seen and all(mode & _flyhash_cuda._DISALLOW_REDUCED_PRECISION_REDUCTION for mode in seen)
    assert cublas.getMathMode(handle) == before
