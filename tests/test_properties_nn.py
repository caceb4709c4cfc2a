"""Property and bad-input tests for sknn_gpu.linalg (gemv, ger) and GPUMLPClassifier (issue 15).

* gemv/ger equal a NumPy reference for random shapes (empty ones included), both matrix
  layouts, operands at random offsets inside larger buffers (aligned or not, so the GPU
  takes its vector and scalar variants), float32/float64 and extreme magnitudes; strided
  operands are refused; a repeated call (the GPU's cached launch) gives the same answer.
* GPUMLPClassifier on random small problems: finite weights of the input's dtype,
  probabilities in [0, 1] summing to 1, determinism for a fixed ``random_state``, and
  inputs of extreme magnitude either fit or are refused with a clear error; integer
  sample weights equal repeated rows (zero weights dropped rows) in full-batch training,
  and sparse input (CSR/CSC, empty rows included) trains and predicts as its dense copy.
* One table of bad inputs each: the error type and message fragment each must raise, and
  that nothing was written or changed. Every test takes the ``device`` fixture, so the
  cuda-marked twin runs the same cases on the GPU.
"""

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.exceptions import ConvergenceWarning, NotFittedError

from sknn_gpu import GPUMLPClassifier, InsufficientMemoryError
from sknn_gpu._backend import get_xp, to_host
from sknn_gpu.linalg import gemv, ger

SETTINGS = dict(derandomize=True)

#: decimal exponents of the operands' scales: their products stay normal numbers
_EXP = {np.float32: 12, np.float64: 120}


def _operand(xp, rng, shape, dtype, scale, order="C", offset=0):
    """Random normal values times ``scale`` in a (C or F) array starting ``offset`` elements into a buffer."""
    values = (rng.standard_normal(shape) * scale).astype(dtype)
    size = int(np.prod(shape))
    buf = xp.zeros(size + offset, dtype=dtype)
    flat = values.ravel(order=order)
    buf[offset:] = xp.asarray(flat)
    return buf[offset:].reshape(shape, order=order), values


@st.composite
def gemv_cases(draw):
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    e = _EXP[dtype]
    return dict(
        m=draw(st.integers(0, 40)),
        n=draw(st.integers(0, 40)),
        dtype=dtype,
        order=draw(st.sampled_from("CF")),
        trans=draw(st.booleans()),
        offsets=draw(st.tuples(*[st.integers(0, 3)] * 3)),
        exps=draw(st.tuples(*[st.integers(-e, e)] * 3)),  # A, x, alpha
        beta=draw(st.sampled_from([0.0, 1.0, -0.75, 2.5])),
        give_y=draw(st.booleans()),
        seed=draw(st.integers(0, 2**31)),
    )


@settings(max_examples=60, **SETTINGS)
@given(case=gemv_cases())
def test_gemv_equals_numpy_reference(device, case):
    xp = get_xp(device)
    rng = np.random.default_rng(case["seed"])
    m, n, dtype, trans = case["m"], case["n"], case["dtype"], case["trans"]
    ea, ex, eal = case["exps"]
    A, A_h = _operand(xp, rng, (m, n), dtype, 10.0**ea, case["order"], case["offsets"][0])
    nx, ny = (m, n) if trans else (n, m)
    x, x_h = _operand(xp, rng, (nx,), dtype, 10.0**ex, offset=case["offsets"][1])
    alpha = float(rng.uniform(0.5, 2)) * 10.0 ** (eal // 4) * (-1) ** int(rng.integers(2))
    beta = case["beta"] if case["give_y"] else 0.0
    y_h = (rng.standard_normal(ny) * 10.0 ** (ea + ex + eal // 4)).astype(dtype)
    if case["give_y"] and beta == 0.0:
        y_h[:] = np.nan  # beta == 0 never reads y
    opA = A_h.astype(np.float64).T if trans else A_h.astype(np.float64)
    want = alpha * (opA @ x_h.astype(np.float64)) + (beta * y_h.astype(np.float64) if beta else 0.0)
    bound = abs(alpha) * (np.abs(opA) @ np.abs(x_h.astype(np.float64))) + abs(beta) * np.abs(
        np.nan_to_num(y_h.astype(np.float64))
    )
    eps = np.finfo(dtype).eps
    for _ in range(2):  # the second call takes the cached launch on the GPU
        if case["give_y"]:
            y, _ = _operand(xp, rng, (ny,), dtype, 1.0, offset=case["offsets"][2])
            y[...] = xp.asarray(y_h)
            out = gemv(A, x, y, alpha=alpha, beta=beta, trans=trans)
            assert out is y
        else:
            out = gemv(A, x, alpha=alpha, trans=trans)
        got = to_host(out)
        assert got.dtype == dtype and got.shape == (ny,)
        assert np.all(np.isfinite(got))
        assert np.all(np.abs(got - want) <= 4 * eps * (max(nx, 1) + 2) * bound + np.finfo(dtype).tiny)


@st.composite
def ger_cases(draw):
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    e = _EXP[dtype]
    return dict(
        m=draw(st.integers(0, 40)),
        n=draw(st.integers(0, 40)),
        dtype=dtype,
        order=draw(st.sampled_from("CF")),
        offsets=draw(st.tuples(*[st.integers(0, 3)] * 3)),
        exps=draw(st.tuples(*[st.integers(-e, e)] * 3)),  # x, y, alpha
        seed=draw(st.integers(0, 2**31)),
    )


@settings(max_examples=50, **SETTINGS)
@given(case=ger_cases())
def test_ger_equals_numpy_reference(device, case):
    xp = get_xp(device)
    rng = np.random.default_rng(case["seed"])
    m, n, dtype = case["m"], case["n"], case["dtype"]
    ex, ey, eal = case["exps"]
    scale = 10.0 ** (ex + ey + eal // 4)
    A, A_h = _operand(xp, rng, (m, n), dtype, scale, case["order"], case["offsets"][0])
    x, x_h = _operand(xp, rng, (m,), dtype, 10.0**ex, offset=case["offsets"][1])
    y, y_h = _operand(xp, rng, (n,), dtype, 10.0**ey, offset=case["offsets"][2])
    want = A_h.astype(np.float64)
    outer = np.outer(x_h.astype(np.float64), y_h.astype(np.float64))
    alphas = (float(rng.uniform(0.5, 2)) * 10.0 ** (eal // 4), -1)  # a float, then an int
    for alpha in alphas:
        assert ger(alpha, x, y, A) is A
        want = want + alpha * outer
    got = to_host(A)
    assert got.dtype == dtype and got.shape == (m, n)
    bound = np.abs(A_h.astype(np.float64)) + (abs(alphas[0]) + 1) * np.abs(outer)
    assert np.all(np.abs(got - want) <= 8 * np.finfo(dtype).eps * bound + np.finfo(dtype).tiny)


@settings(max_examples=25, **SETTINGS)
@given(
    m=st.integers(2, 12),
    n=st.integers(2, 12),
    step=st.integers(2, 3),
    which=st.sampled_from(["A", "x", "y"]),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_strided_operands_are_refused_and_nothing_is_written(device, m, n, step, which, dtype):
    xp = get_xp(device)
    A = xp.ones((m, n * step), dtype=dtype)[:, ::step] if which == "A" else xp.ones((m, n), dtype=dtype)
    x = xp.ones(n * step, dtype=dtype)[::step] if which == "x" else xp.ones(n, dtype=dtype)
    y = xp.full(m * step, 7, dtype=dtype)[::step] if which == "y" else xp.full(m, 7, dtype=dtype)
    with pytest.raises(ValueError, match=f"{which} must be (C- or Fortran-)?contiguous"):
        gemv(A, x, y)
    assert bool((y == 7).all())
    with pytest.raises(ValueError, match=f"{'A' if which == 'A' else 'y' if which == 'x' else 'x'} must be"):
        ger(1.0, y, x, A) if which != "y" else ger(1.0, y, x, xp.ones((m, n), dtype=dtype))
    assert bool((A == 1).all())


# ------------------------------------------------------------------ MLP properties
@settings(max_examples=12, **SETTINGS)
@given(
    n=st.integers(8, 60),
    d=st.integers(1, 8),
    k=st.integers(2, 4),
    hidden=st.lists(st.integers(1, 9), min_size=0, max_size=2),
    dtype=st.sampled_from([np.float32, np.float64]),
    solver=st.sampled_from(["adam", "sgd"]),
    batch=st.sampled_from(["auto", 1, 7]),
    seed=st.integers(0, 1000),
)
def test_mlp_outputs_are_probabilities_of_the_input_dtype(
    device, n, d, k, hidden, dtype, solver, batch, seed
):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)).astype(dtype)
    y = np.arange(n) % k
    params = dict(
        hidden_layer_sizes=tuple(hidden), solver=solver, batch_size=batch, max_iter=3, random_state=seed
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", UserWarning)  # batch_size clipped
        clf = GPUMLPClassifier(device=device, **params).fit(X, y)
        again = GPUMLPClassifier(device=device, **params).fit(X, y)
    n_out = 1 if k == 2 else k  # binary: one logistic output
    assert [c.shape for c in clf.coefs_] == list(zip([d, *hidden], [*hidden, n_out]))
    assert all(c.dtype == dtype and np.isfinite(c).all() for c in clf.coefs_ + clf.intercepts_)
    P = to_host(clf.predict_proba(X))
    assert P.shape == (n, k) and P.dtype == dtype
    assert np.all((P >= 0) & (P <= 1))
    np.testing.assert_allclose(P.sum(axis=1), 1, rtol=1e-5 if dtype == np.float32 else 1e-12)
    assert set(np.unique(to_host(clf.predict(X)))) <= set(range(k))
    for a, b in zip(clf.coefs_, again.coefs_):  # same random_state: the same model
        np.testing.assert_array_equal(a, b)


@settings(max_examples=8, **SETTINGS)
@given(exponent=st.sampled_from([-300, -150, -20, 20, 150, 300]), seed=st.integers(0, 100))
def test_mlp_extreme_magnitudes_fit_or_refuse_clearly(device, exponent, seed):
    """X scaled by 10**exponent: either a finite model, or the documented non-finite error."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((40, 5)) * 10.0**exponent
    y = np.arange(40) % 3
    clf = GPUMLPClassifier((6,), max_iter=3, random_state=seed, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            clf.fit(X, y)
        except ValueError as exc:
            assert "non-finite parameter weights" in str(exc)
            assert abs(exponent) >= 150
            return
    assert all(np.isfinite(c).all() for c in clf.coefs_ + clf.intercepts_)
    P = to_host(clf.predict_proba(X))
    assert np.isfinite(P).all()
    np.testing.assert_allclose(P.sum(axis=1), 1, rtol=1e-12)


@settings(max_examples=10, **SETTINGS)
@given(
    n=st.integers(6, 40),
    d=st.integers(1, 6),
    k=st.integers(2, 3),
    solver=st.sampled_from(["adam", "sgd"]),
    seed=st.integers(0, 1000),
)
def test_mlp_integer_weights_equal_repeated_rows(device, n, d, k, solver, seed):
    """Full batch: weight w is the sample w times over (0 drops it), on random data."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = np.arange(n) % k
    w = rng.integers(0, 4, n)
    w[:k] = np.maximum(w[:k], 1)  # every class keeps a sample
    params = dict(hidden_layer_sizes=(5,), solver=solver, max_iter=3, random_state=seed, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a = GPUMLPClassifier(**params).fit(X, y, sample_weight=w)
        b = GPUMLPClassifier(**params).fit(np.repeat(X, w, axis=0), np.repeat(y, w))
    np.testing.assert_allclose(a.loss_curve_, b.loss_curve_, rtol=1e-9)
    for u, v in zip(a.coefs_ + a.intercepts_, b.coefs_ + b.intercepts_):
        np.testing.assert_allclose(u, v, rtol=1e-9, atol=1e-12)


@settings(max_examples=10, **SETTINGS)
@given(
    n=st.integers(2, 50),
    d=st.integers(1, 12),
    density=st.sampled_from([0.0, 0.05, 0.3, 1.0]),
    fmt=st.sampled_from(["csr", "csc"]),
    dtype=st.sampled_from([np.float32, np.float64]),
    batch=st.sampled_from(["auto", 1, 7]),
    seed=st.integers(0, 1000),
)
def test_mlp_sparse_input_trains_and_predicts_as_dense(device, n, d, density, fmt, dtype, batch, seed):
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, random_state=seed, format=fmt, dtype=dtype) * 5
    y = np.arange(n) % 2
    params = dict(hidden_layer_sizes=(4,), batch_size=batch, max_iter=2, random_state=seed, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", UserWarning)  # batch_size clipped
        a = GPUMLPClassifier(**params).fit(X, y)
        b = GPUMLPClassifier(**params).fit(X.toarray(), y)
    # on the GPU, dense per-sample training takes the fused kernel and sparse the per-step path
    tol = (1e-9 if device == "cpu" else 1e-7) if dtype == np.float64 else 1e-4
    assert all(c.dtype == dtype for c in a.coefs_)
    for u, v in zip(a.coefs_ + a.intercepts_, b.coefs_ + b.intercepts_):
        np.testing.assert_allclose(u, v, rtol=tol, atol=tol)
    Xq = sp.random(7, d, density=0.5, random_state=int(rng.integers(99)), format="csr", dtype=dtype)
    np.testing.assert_allclose(to_host(a.predict_proba(Xq)), to_host(a.predict_proba(Xq.toarray())), rtol=tol)


# ------------------------------------------------------------------ bad inputs: linalg
def _ro(a):
    a.flags.writeable = False
    return a


def _warm_gemv(xp, dtype=np.float64):
    """Operands of a gemv call made once (so the GPU has a cached launch for the bad one)."""
    A = xp.asarray(np.arange(12, dtype=dtype).reshape(3, 4))
    x, y = xp.ones(4, dtype=dtype), xp.zeros(3, dtype=dtype)
    gemv(A, x, y)
    return A, x, y


def _warm_ger(xp, dtype=np.float64):
    A = xp.zeros((3, 4), dtype=dtype)
    x, y = xp.ones(3, dtype=dtype), xp.ones(4, dtype=dtype)
    ger(0.5, x, y, A)
    return A, x, y


def _bad_frombuffer(xp):
    raw = bytes(96)
    A = np.frombuffer(raw, dtype=np.float64).reshape(3, 4)
    return lambda: ger(1.0, np.ones(3), np.ones(4), A), lambda: raw == bytes(96)


def _bad_readonly_A(xp):
    A = _ro(np.zeros((3, 4)))
    return lambda: ger(1.0, np.ones(3), np.ones(4), A), lambda: not A.any()


def _bad_readonly_y(xp):
    y = _ro(np.full(3, 5.0))
    return lambda: gemv(np.ones((3, 4)), np.ones(4), y), lambda: bool((y == 5).all())


def _bad_scalar(func, name, value, dtype=np.float64):
    def build(xp):
        if func == "gemv":
            A, x, y = _warm_gemv(xp, dtype)
            before = to_host(y).copy()
            kw = {name: value} | ({"beta": 0.0} if name == "alpha" else {})
            return lambda: gemv(A, x, y, **kw), lambda: np.array_equal(to_host(y), before)
        A, x, y = _warm_ger(xp, dtype)
        before = to_host(A).copy()
        return lambda: ger(value, x, y, A), lambda: np.array_equal(to_host(A), before)

    return build


def _bad_call(make):
    def build(xp):
        return make(xp), lambda: True

    return build


LINALG_BAD = [
    # (id, cpu only, builder, exception, message fragment)
    ("ger-readonly-A", True, _bad_readonly_A, ValueError, r"ger: A is read-only"),
    ("ger-frombuffer-bytes", True, _bad_frombuffer, ValueError, r"ger: A is read-only"),
    ("gemv-readonly-y", True, _bad_readonly_y, ValueError, r"gemv: y is read-only"),
    ("gemv-alpha-10**400", False, _bad_scalar("gemv", "alpha", 10**400), ValueError, r"alpha .*401 digits"),
    ("gemv-beta-10**400", False, _bad_scalar("gemv", "beta", -(10**400)), ValueError, r"beta .*401 digits"),
    ("ger-alpha-10**400", False, _bad_scalar("ger", "alpha", 10**400), ValueError, r"alpha .*401 digits"),
    ("gemv-alpha-nan", False, _bad_scalar("gemv", "alpha", math.nan), ValueError, r"alpha must be a finite"),
    ("gemv-beta-inf", False, _bad_scalar("gemv", "beta", math.inf), ValueError, r"beta must be a finite"),
    ("ger-alpha--inf", False, _bad_scalar("ger", "alpha", -math.inf), ValueError, r"alpha must be a finite"),
    ("gemv-alpha-bool", False, _bad_scalar("gemv", "alpha", True), ValueError, r"alpha must be a finite"),
    ("gemv-alpha-str", False, _bad_scalar("gemv", "alpha", "2"), ValueError, r"alpha must be a finite"),
    (
        "gemv-alpha-longdouble-1e400",
        False,
        _bad_scalar("gemv", "alpha", np.longdouble(10) ** 400),
        ValueError,
        r"alpha must be a finite real number that fits a float64",
    ),
    (
        "gemv-f32-alpha-1e300",
        False,
        _bad_scalar("gemv", "alpha", 1e300, np.float32),
        ValueError,
        r"gemv: alpha=1e\+300 does not fit the operands' dtype float32",
    ),
    (
        "ger-f32-alpha-1e39",
        False,
        _bad_scalar("ger", "alpha", -1e39, np.float32),
        ValueError,
        r"ger: alpha=-1e\+39 does not fit",
    ),
    (
        "gemv-3d-A",
        False,
        _bad_call(lambda xp: lambda: gemv(xp.ones((2, 2, 2)), xp.ones(2))),
        ValueError,
        "2-D",
    ),
    (
        "gemv-int-A",
        False,
        _bad_call(lambda xp: lambda: gemv(xp.ones((2, 2), int), xp.ones(2))),
        TypeError,
        "float32",
    ),
    (
        "gemv-mixed-dtypes",
        False,
        _bad_call(lambda xp: lambda: gemv(xp.ones((2, 2)), xp.ones(2, np.float32))),
        TypeError,
        "dtype float32 but A has float64",
    ),
    (
        "gemv-y-inside-A",
        False,
        _bad_call(lambda xp: (lambda b: lambda: gemv(b[:6].reshape(2, 3), b[6:9], b[:2]))(xp.ones(12))),
        ValueError,
        "overlap",
    ),
    (
        "ger-x-inside-A",
        False,
        _bad_call(lambda xp: (lambda b: lambda: ger(1.0, b[:2], b[6:9], b[:6].reshape(2, 3)))(xp.ones(12))),
        ValueError,
        "overlap",
    ),
    (
        "gemv-beta-without-y",
        False,
        _bad_call(lambda xp: lambda: gemv(xp.ones((2, 3)), xp.ones(3), beta=1.0)),
        ValueError,
        "needs an input y",
    ),
    (
        "gemv-x-length",
        False,
        _bad_call(lambda xp: lambda: gemv(xp.ones((2, 3)), xp.ones(2))),
        ValueError,
        "x has length 2",
    ),
    (
        "gemv-list",
        False,
        _bad_call(lambda xp: lambda: gemv([[1.0]], [1.0])),
        TypeError,
        "numpy.ndarray or cupy",
    ),
]


@pytest.mark.parametrize("case", LINALG_BAD, ids=[c[0] for c in LINALG_BAD])
def test_linalg_bad_inputs(device, case):
    _, cpu_only, build, exc, match = case
    if cpu_only and device == "cuda":
        pytest.skip("CuPy arrays have no read-only flag")
    call, unchanged = build(get_xp(device))
    with pytest.raises(exc, match=match):
        call()
    assert unchanged(), "the refused call wrote into its output"


# ------------------------------------------------------------------ bad inputs: MLP
def _digits():
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return X[:200] / 16.0, y[:200]


def _fitted(device):
    X, y = _digits()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return GPUMLPClassifier((5,), max_iter=2, random_state=0, device=device).fit(X, y)


def _with_nan(X):
    X = X.copy()
    X[3, 5] = np.nan
    return X


def _with_inf(X):
    X = X.copy()
    X[0, 0] = -np.inf
    return X


# (id, estimator factory, call(est, X, y, xp), exception, message fragment, needs little memory)
MLP_BAD = [
    (
        "hidden-2.5",
        lambda d: GPUMLPClassifier([2.5], device=d),
        "fit",
        ValueError,
        r"positive integers.*2\.5",
    ),
    ("hidden-0", lambda d: GPUMLPClassifier([0], device=d), "fit", ValueError, r"hidden_layer_sizes.*\[0\]"),
    ("hidden--5", lambda d: GPUMLPClassifier([-5], device=d), "fit", ValueError, r"hidden_layer_sizes.*-5"),
    (
        "hidden-(4,0)",
        lambda d: GPUMLPClassifier((4, 0), device=d),
        "partial_fit",
        ValueError,
        "hidden_layer_sizes",
    ),
    (
        "hidden-30000x30000",
        lambda d: GPUMLPClassifier((30000, 30000), device=d),
        "fit-small-memory",
        InsufficientMemoryError,
        r"GPUMLPClassifier\.fit .*needs \d+ bytes .* only 4294967296 bytes .* free",
    ),
    (
        "hidden-10**5x10**5",
        lambda d: GPUMLPClassifier((10**5, 10**5), device=d),
        "partial_fit",
        InsufficientMemoryError,
        r"GPUMLPClassifier\.partial_fit .*needs \d+ bytes",
    ),
    (
        "predict-small-memory",
        _fitted,
        "predict-small-memory",
        InsufficientMemoryError,
        r"GPUMLPClassifier\.predict .*\[64, 5, 10\]",
    ),
    ("X-nan", lambda d: GPUMLPClassifier(device=d), "fit-nan", ValueError, "NaN"),
    ("X-inf", lambda d: GPUMLPClassifier(device=d), "fit-inf", ValueError, "infinity|NaN"),
    ("X-1d", lambda d: GPUMLPClassifier(device=d), "fit-1d", ValueError, "2D"),
    ("X-empty", lambda d: GPUMLPClassifier(device=d), "fit-empty", ValueError, "sample"),
    ("y-length", lambda d: GPUMLPClassifier(device=d), "fit-short-y", ValueError, "samples"),
    ("predict-features", _fitted, "predict-narrow", ValueError, "features"),
    ("predict-unfitted", lambda d: GPUMLPClassifier(device=d), "predict", NotFittedError, "not fitted"),
    ("lbfgs", lambda d: GPUMLPClassifier(solver="lbfgs", device=d), "fit", ValueError, "lbfgs"),
    (
        "partial-fit-early-stopping",
        lambda d: GPUMLPClassifier(early_stopping=True, device=d),
        "partial_fit",
        ValueError,
        "early_stopping",
    ),
    (
        "partial-fit-no-classes",
        lambda d: GPUMLPClassifier(device=d),
        "partial_fit-no-classes",
        ValueError,
        "classes",
    ),
    (
        "sw-length",
        lambda d: GPUMLPClassifier(device=d),
        "fit-sw-short",
        ValueError,
        r"sample_weight has \d+ weights for \d+ samples",
    ),
    ("sw-2d", lambda d: GPUMLPClassifier(device=d), "fit-sw-2d", ValueError, "sample_weight must be 1-D"),
    (
        "sw-all-zero",
        lambda d: GPUMLPClassifier(device=d),
        "fit-sw-zeros",
        ValueError,
        "at least one non-zero",
    ),
    ("sw-nan", lambda d: GPUMLPClassifier(device=d), "fit-sw-nan", ValueError, "sample_weight contains NaN"),
    (
        "sw-zero-per-sample",
        lambda d: GPUMLPClassifier(batch_size=1, device=d),
        "fit-sw-one-zero",
        ZeroDivisionError,
        r"samples 3\.\.3 .* summing to 0",
    ),
    ("X-dask", lambda d: GPUMLPClassifier(device=d), "fit-dask", TypeError, "distributed prediction only"),
    ("X-sparse-nan", lambda d: GPUMLPClassifier(device=d), "fit-sparse-nan", ValueError, "NaN"),
]


def _mlp_call(est, what, xp, monkeypatch):
    X, y = _digits()
    if what.endswith("small-memory"):
        from sknn_gpu import _backend
        from sknn_gpu.neural_network import _size

        monkeypatch.setattr(_backend, "free_memory", lambda device, need=None: 4 << 30)
        if what.startswith("predict"):
            monkeypatch.setattr(_size, "_CHECK_FROM", 0)
            monkeypatch.setattr(_backend, "free_memory", lambda device, need=None: 1024)
        what = what.rsplit("-", 2)[0]
    Xd = {
        "fit-nan": _with_nan(X),
        "fit-inf": _with_inf(X),
        "fit-1d": X[:, 0],
        "fit-empty": X[:0],
        "predict-narrow": X[:, :10],
    }.get(what, X)
    Xd = xp.asarray(Xd)
    sw = {
        "fit-sw-short": np.ones(len(y) - 1),
        "fit-sw-2d": np.ones((len(y), 2)),
        "fit-sw-zeros": np.zeros(len(y)),
        "fit-sw-nan": np.where(np.arange(len(y)) == 4, np.nan, 1.0),
        "fit-sw-one-zero": np.where(np.arange(len(y)) == 3, 0.0, 1.0),
    }.get(what)
    if sw is not None:
        return est.fit(Xd, y, sample_weight=xp.asarray(sw))
    if what == "fit-dask":
        da = pytest.importorskip("dask.array")
        return est.fit(da.from_array(X, chunks=(50, -1)), y)
    if what == "fit-sparse-nan":
        import scipy.sparse as sp

        return est.fit(sp.csr_matrix(_with_nan(X)), y)
    if what.startswith("fit"):
        return est.fit(Xd, y[:-1] if what == "fit-short-y" else y)
    if what == "partial_fit":
        return est.partial_fit(Xd, y, classes=np.arange(10))
    if what == "partial_fit-no-classes":
        return est.partial_fit(Xd, y)
    return est.predict(Xd)


@pytest.mark.parametrize("case", MLP_BAD, ids=[c[0] for c in MLP_BAD])
def test_mlp_bad_inputs(device, case, monkeypatch):
    """Each bad call raises its clear error and leaves the estimator exactly as it was."""
    _, make, what, exc, match = case
    est = make(device)
    before = dict(vars(est))
    with pytest.raises(exc, match=match):
        _mlp_call(est, what, get_xp(device), monkeypatch)
    assert vars(est).keys() == before.keys()
    assert all(vars(est)[k] is before[k] for k in before)
