"""Property and fuzz tests for the fly family (issue 15), on every device.

* FlyHash gives exactly ``k`` winners per row for random shapes, dtypes, layouts and
  magnitudes (or refuses the magnitudes float32 cannot hold, with a clear error);
* its hash equals a naive reference (loop over connections, stable sort);
* a merge of FlyNN parties fitted on shuffled shards equals a pooled fit and an
  independent naive count;
* a table of bad inputs, each with the exact error type and message fragment.

Every test takes the ``device`` fixture: the cuda-marked twin runs the same cases
on the GPU (CuPy input there).
"""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.exceptions import NotFittedError

from sknn_gpu._backend import InsufficientMemoryError, to_device, to_host
from sknn_gpu.fly import PAPERS_FLYNN, FlyHashTransformer, FlyNNClassifier, merge_flynn
from sknn_gpu.fly._flynn_cpu import row_normalize

_FLT_MAX = float(np.finfo(np.float32).max)
_FLT_TINY = float(np.finfo(np.float32).tiny)


# --------------------------------------------------------------------------- #
# naive references                                                              #
# --------------------------------------------------------------------------- #
def _naive_activations(fh, X):
    """float32 sums over each unit's connections, one connection at a time, ascending feature order."""
    X = np.asarray(X.toarray() if sp.issparse(X) else X).astype(np.float32)
    conn = fh.components_.indices.reshape(fh.n_components_, fh.n_connections_)
    acc = np.zeros((X.shape[0], fh.n_components_), dtype=np.float32)
    for c in range(fh.n_connections_):
        acc = acc + X[:, conn[:, c]]
    return acc


def _naive_winners(A, k):
    """The k largest of each row (stable sort on -value: ties to the lower index), ascending."""
    order = np.argsort(-(A + np.float32(0.0)), axis=1, kind="stable")[:, :k]
    return np.sort(order, axis=1)


def _naive_dense(fh, X):
    W = _naive_winners(_naive_activations(fh, X), fh.k_)
    H = np.zeros((W.shape[0], fh.n_components_), dtype=np.uint8)
    np.put_along_axis(H, W.astype(np.int64), 1, axis=1)
    return H


# --------------------------------------------------------------------------- #
# FlyHash: exactly k ones, equal to the reference                               #
# --------------------------------------------------------------------------- #
@st.composite
def _hash_case(draw):
    n = draw(st.integers(1, 30))
    d = draw(st.integers(1, 24))
    m = draw(st.integers(1, 160))
    k = draw(st.integers(1, m))
    s = draw(st.integers(1, d))
    dtype = draw(st.sampled_from([np.float64, np.float32, np.int64, np.uint8]))
    layout = draw(st.sampled_from(["C", "F", "strided", "csr", "csc", "coo"]))
    exponent = draw(st.integers(-45, 40))
    kind = draw(st.sampled_from(["normal", "ties", "sparse", "constant_rows"]))
    seed = draw(st.integers(0, 2**31 - 1))
    return n, d, m, k, s, dtype, layout, exponent, kind, seed


def _make_input(n, d, dtype, layout, exponent, kind, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        X = rng.integers(0, 7 if kind == "ties" else 250, size=(n, 2 * d))
    else:
        X = rng.standard_normal((n, 2 * d))
        if kind == "ties":
            X = np.round(X * 2)
        X = X * 10.0**exponent
    if kind == "sparse":
        X[rng.random(X.shape) < 0.7] = 0
    if kind == "constant_rows":
        X[::2] = X[::2, :1]
    X = X.astype(dtype)
    if layout == "strided":
        return X[:, ::2]
    X = np.ascontiguousarray(X[:, :d])
    if layout == "F":
        return np.asfortranarray(X)
    if layout in ("csr", "csc", "coo"):
        return sp.coo_matrix(X).asformat(layout)
    return X


def _refused_magnitude(X, s):
    """What FlyHash must refuse: float32 overflow of an s-term sum, or all values below float32's normals."""
    data = X.data if sp.issparse(X) else np.asarray(X)
    if data.size == 0:
        return False
    amax = float(np.abs(data.astype(np.float64)).max())
    if not np.isfinite(amax):
        return True  # float32 input overflowed to inf when it was made: refused as non-finite
    return amax * s >= _FLT_MAX or 0.0 < amax < _FLT_TINY


@pytest.mark.cuda
def test_cuda_sums_that_cancel_to_subnormals_match_the_cpu():
    """Found by this suite on the H100: inputs near 1e-32 whose float32 sums cancel to
    subnormal activations picked other tied winners on the GPU. Cause: CuPy compiles
    every kernel with -ftz=true, so the GPU flushed the subnormal sums (and CuPy's own
    float ops on the fallback path compared them as zeros); the kernels now add with
    IEEE inline PTX and the fallback ranks integer keys."""
    X = _make_input(12, 4, np.float64, "C", -32, "ties", 0)
    fh = FlyHashTransformer(n_components=14, n_connections=3, k=12, output="dense", random_state=0)
    fh.set_params(device="cuda").fit(np.ones((1, 4)))
    np.testing.assert_array_equal(to_host(fh.transform(to_device(X, "cuda"))), _naive_dense(fh, X))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cuda_subnormal_inputs_and_rows_match_the_cpu(dtype):
    """Rows of subnormal float32 values beside normal rows (the range check passes): the
    GPU neither calls such a row constant nor flushes its values when converting."""
    rng = np.random.default_rng(3)
    tiny = np.finfo(np.float32).tiny
    X = rng.random((40, 16))
    X[::3] *= tiny / 4  # every third row entirely subnormal in float32
    X[1::3, ::2] = tiny * rng.random(X[1::3, ::2].shape) / 8  # mixed rows
    X = X.astype(dtype)
    fh = FlyHashTransformer(n_components=96, n_connections=4, k=9, output="dense", random_state=1)
    cpu = fh.set_params(device="cpu").fit(X).transform(X)
    np.testing.assert_array_equal(cpu, _naive_dense(fh, X))
    gpu = fh.set_params(device="cuda").fit(X).transform(to_device(X, "cuda"))
    np.testing.assert_array_equal(to_host(gpu), cpu)
    np.testing.assert_array_equal(to_host(fh.transform(X)), cpu)  # NumPy in, GPU engine


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # sklearn's sum over inf input
@settings(max_examples=150)
@given(case=_hash_case())
def test_flyhash_exactly_k_ones_and_equal_to_reference(device, case):
    n, d, m, k, s, dtype, layout, exponent, kind, seed = case
    X = _make_input(n, d, dtype, layout, exponent, kind, seed)
    fh = FlyHashTransformer(n_components=m, n_connections=s, k=k, output="dense", random_state=seed % 1000)
    fh.set_params(device=device).fit(np.ones((1, d)))  # fit reads only the width
    Xin = to_device(X, device) if device == "cuda" else X
    if _refused_magnitude(X, s):
        with pytest.raises(ValueError, match="overflow|smallest normal|infinity"):
            fh.transform(Xin)
        return
    H = to_host(fh.transform(Xin))
    assert H.shape == (n, m) and H.dtype == np.uint8
    assert np.all(H.sum(axis=1) == k), "every row must have exactly k winners"
    np.testing.assert_array_equal(H, _naive_dense(fh, X))
    packed = to_host(fh.set_params(output="packed").transform(Xin))
    np.testing.assert_array_equal(np.unpackbits(packed, axis=1, count=m), H)
    S = fh.set_params(output="sparse").transform(Xin)
    assert np.all(np.diff(to_host(S.indptr)) == k)


# --------------------------------------------------------------------------- #
# FlyNN: merged parties == pooled fit == independent naive count               #
# --------------------------------------------------------------------------- #
@st.composite
def _federation(draw):
    n = draw(st.integers(8, 90))
    d = draw(st.integers(2, 10))
    n_classes = draw(st.integers(1, 5))
    n_parties = draw(st.integers(1, min(4, n)))
    str_labels = draw(st.booleans())
    gamma = draw(st.sampled_from([0.0, 0.3, 0.9]))
    exponent = draw(st.sampled_from([-300, -20, 0, 20, 150]))
    seed = draw(st.integers(0, 2**31 - 1))
    return n, d, n_classes, n_parties, str_labels, gamma, exponent, seed


@settings(max_examples=40)
@given(case=_federation())
def test_merged_parties_equal_pooled_fit_and_naive_count(device, case):
    n, d, n_classes, n_parties, str_labels, gamma, exponent, seed = case
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=3.0, size=(n_classes, d))
    y_idx = rng.integers(0, n_classes, size=n)
    X = (centres[y_idx] + rng.normal(size=(n, d))) * 10.0**exponent
    y = np.array([f"class{c}" for c in range(n_classes)])[y_idx] if str_labels else y_idx * 7 - 3
    # the papers' FlyNN (raw rows, gamma ** counts): what the naive reference below computes
    params = {**PAPERS_FLYNN, "k": 4, "expansion_factor": 6.0, "gamma": gamma}
    params.update(random_state=seed % 997, device=device)
    perm = rng.permutation(n)
    cuts = np.sort(rng.choice(np.arange(1, n), size=n_parties - 1, replace=False)) if n_parties > 1 else []
    shards = np.split(perm, cuts)  # shuffled, non-empty shards
    models = [FlyNNClassifier(**params).fit(X[i], y[i]) for i in shards]
    merged = merge_flynn(models)
    order = rng.permutation(n)  # pooled fit on another order of the rows
    pooled = FlyNNClassifier(**params).fit(X[order], y[order])
    # independent count: the naive hash of the normalised rows, summed per class with np.add.at
    classes = np.unique(y)
    W = _naive_winners(_naive_activations(pooled.hasher_, row_normalize(X)), pooled.k_)
    naive = np.zeros((len(classes), pooled.n_components_), dtype=np.int64)
    np.add.at(naive, (np.repeat(np.searchsorted(classes, y), W.shape[1]), W.ravel()), 1)
    assert np.array_equal(merged.classes_, classes)
    assert np.array_equal(to_host(merged.counts_), naive)
    assert np.array_equal(to_host(pooled.counts_), naive)
    assert np.array_equal(to_host(merged.filters_), gamma ** naive.astype(np.float64))
    assert np.array_equal(to_host(merged.predict(X)), to_host(pooled.predict(X)))


# --------------------------------------------------------------------------- #
# bad inputs: the exact error each must raise                                   #
# --------------------------------------------------------------------------- #
def _X(rng, n=12, d=5):
    return rng.random((n, d)) + 0.1


def _fitted_hash(device, rng):
    return FlyHashTransformer(k=3, random_state=0, device=device).fit(_X(rng))


def _fitted_nn(device, rng, **kw):
    return FlyNNClassifier(k=3, random_state=0, device=device, **kw).fit(_X(rng), np.arange(12) % 3)


def _with_nan(rng):
    X = _X(rng)
    X[3, 2] = np.nan
    return X


def _with_inf(rng):
    X = _X(rng)
    X[0, 0] = -np.inf
    return X


BAD_INPUTS = [
    # (id, call(device, rng, on_device), error type, message fragment)
    ("hash-nan", lambda dv, r, on: _fitted_hash(dv, r).transform(on(_with_nan(r))), ValueError, "NaN"),
    ("hash-inf", lambda dv, r, on: _fitted_hash(dv, r).transform(on(_with_inf(r))), ValueError, "infinity"),
    ("hash-1d", lambda dv, r, on: _fitted_hash(dv, r).transform(on(_X(r)[0])), ValueError, "2D"),
    (
        "hash-empty",
        lambda dv, r, on: _fitted_hash(dv, r).transform(on(np.empty((0, 5)))),
        ValueError,
        "0 sample|at least one sample",
    ),
    (
        "hash-complex",
        lambda dv, r, on: _fitted_hash(dv, r).transform(on(_X(r) + 1j)),
        ValueError,
        "[Cc]omplex|numeric",
    ),
    ("hash-width", lambda dv, r, on: _fitted_hash(dv, r).transform(on(_X(r, d=6))), ValueError, "features"),
    (
        "hash-overflow",
        lambda dv, r, on: _fitted_hash(dv, r).transform(on(_X(r) * 3e38)),
        ValueError,
        "can overflow the float32 sum",
    ),
    (
        "hash-underflow",
        lambda dv, r, on: _fitted_hash(dv, r).transform(on(_X(r) * 1e-300)),
        ValueError,
        "below float32's smallest normal",
    ),
    (
        "hash-oversize",
        lambda dv, r, on: FlyHashTransformer(n_components=10**11, device=dv).fit(on(_X(r))),
        InsufficientMemoryError,
        r"n_components=100000000000 units.*needs \d+ bytes .* but only \d+ bytes .* are free",
    ),
    (
        "hash-s-gt-d",
        lambda dv, r, on: FlyHashTransformer(n_connections=9, device=dv).fit(on(_X(r))),
        ValueError,
        "n_connections=9 exceeds n_features=5",
    ),
    (
        "hash-k-gt-m",
        lambda dv, r, on: FlyHashTransformer(n_components=4, k=5, device=dv).fit(on(_X(r))),
        ValueError,
        "k=5 winners exceeds n_components_=4",
    ),
    (
        "hash-k0",
        lambda dv, r, on: FlyHashTransformer(k=0, device=dv).fit(on(_X(r))),
        ValueError,
        "'k' parameter",
    ),
    (
        "hash-unfitted",
        lambda dv, r, on: FlyHashTransformer(device=dv).transform(on(_X(r))),
        NotFittedError,
        "not fitted",
    ),
    (
        "nn-mixed-labels",
        lambda dv, r, on: FlyNNClassifier(device=dv).fit(on(_X(r, n=4)), [1, "a", 1, "a"]),
        TypeError,
        "mixes string and numeric class labels",
    ),
    (
        "nn-mixed-object-labels",
        lambda dv, r, on: FlyNNClassifier(device=dv).fit(on(_X(r, n=4)), np.array([2, "b", 2, "b"], object)),
        TypeError,
        "mixes string and numeric class labels",
    ),
    (
        "nn-continuous-y",
        lambda dv, r, on: FlyNNClassifier(device=dv).fit(on(_X(r)), r.normal(size=12)),
        ValueError,
        "Unknown label type",
    ),
    (
        "nn-length",
        lambda dv, r, on: FlyNNClassifier(device=dv).fit(on(_X(r)), np.arange(11) % 2),
        ValueError,
        "inconsistent numbers of samples",
    ),
    (
        "nn-nan",
        lambda dv, r, on: FlyNNClassifier(device=dv).fit(on(_with_nan(r)), np.arange(12) % 2),
        ValueError,
        "NaN",
    ),
    (
        "nn-raw-overflow",
        lambda dv, r, on: _fitted_nn(dv, r, normalize=False, encoding=None).predict(on(_X(r) * 1e155)),
        ValueError,
        "overflow.*use normalize=True",
    ),
    (
        "nn-raw-underflow",
        lambda dv, r, on: FlyNNClassifier(normalize=False, encoding=None, device=dv).fit(
            on(_X(r) * 1e-300), np.arange(12) % 2
        ),
        ValueError,
        "smallest normal.*use normalize=True",
    ),
    (
        "nn-oversize",
        lambda dv, r, on: FlyNNClassifier(n_components=10**11, device=dv).fit(on(_X(r)), np.arange(12) % 2),
        InsufficientMemoryError,
        r"FlyNNClassifier.fit .* n_components=100000000000 .* needs \d+ bytes",
    ),
    (
        "nn-gamma",
        lambda dv, r, on: FlyNNClassifier(gamma=1.0, device=dv).fit(on(_X(r)), np.arange(12) % 2),
        ValueError,
        "'gamma' parameter",
    ),
    (
        "nn-partial-no-classes",
        lambda dv, r, on: FlyNNClassifier(device=dv).partial_fit(on(_X(r)), np.arange(12) % 2),
        ValueError,
        "classes must be passed",
    ),
    (
        "nn-partial-unseen",
        lambda dv, r, on: FlyNNClassifier(device=dv).partial_fit(
            on(_X(r)), np.arange(12) % 3, classes=[0, 1]
        ),
        ValueError,
        r"labels \[2\] that are not in classes_",
    ),
    ("nn-width", lambda dv, r, on: _fitted_nn(dv, r).predict(on(_X(r, d=4))), ValueError, "features"),
    (
        "nn-merge-label-types",
        lambda dv, r, on: merge_flynn(
            [
                _fitted_nn(dv, r, input_range=(-100, 100)),
                FlyNNClassifier(k=3, input_range=(-100, 100), random_state=0, device=dv).fit(
                    on(_X(r)), ["a", "b"] * 6
                ),
            ]
        ),
        TypeError,
        "models\\[0\\] has numeric class labels .* models\\[1\\] has string ones",
    ),
    ("nn-privatize", lambda dv, r, on: _fitted_nn(dv, r).privatize(0.0, 3), ValueError, "epsilon"),
]


@pytest.mark.parametrize("call, error, fragment", [c[1:] for c in BAD_INPUTS], ids=[c[0] for c in BAD_INPUTS])
def test_bad_inputs_raise_clear_errors(device, rng, call, error, fragment):
    def on(X):  # the input where the estimator runs (CuPy on the GPU twin)
        return to_device(X, device) if device == "cuda" else X

    with pytest.raises(error, match=fragment):
        call(device, rng, on)
