"""FlyHashTransformer and wta: exact winner counts, tie rule, devices, outputs, errors."""

import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_digits
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler

from sknn_gpu._backend import InsufficientMemoryError, get_xp, to_host
from sknn_gpu.fly import FlyHashTransformer, wta


def _digits():
    return load_digits().data  # integers 0..16: activations tie constantly


def _reference_activations(fh, X):
    """Plain loop over connections: sequential float32 sums in ascending feature order."""
    X = np.asarray(X.toarray() if sp.issparse(X) else X, dtype=np.float32)
    conn = fh.components_.indices.reshape(fh.n_components_, fh.n_connections_)
    acc = np.zeros((X.shape[0], fh.n_components_), dtype=np.float32)
    for c in range(fh.n_connections_):
        acc = acc + X[:, conn[:, c]]
    return acc


def _reference_winners(A, k):
    """Stable sort on (-value, index): the k best of each row, ascending indices."""
    order = np.argsort(-(A + np.float32(0)), axis=1, kind="stable")[:, :k]
    return np.sort(order, axis=1)


# ----------------------------------------------------------------------------- fit
def test_projection_shape_and_distinct_connections(rng):
    X = rng.random((7, 50))
    fh = FlyHashTransformer(expansion_factor=3.0, connection_sparsity=0.2, k=5, random_state=1).fit(X)
    W = fh.components_
    assert sp.issparse(W) and W.format == "csr"
    assert W.shape == (150, 50) == (fh.n_components_, fh.n_features_in_)
    assert fh.n_connections_ == 10 and fh.k_ == 5
    assert np.all(np.diff(W.indptr) == 10)
    rows = W.indices.reshape(150, 10)
    assert np.all(np.diff(rows, axis=1) > 0)  # distinct and sorted
    assert np.all(W.data == 1)
    # every feature has a chance: with 1500 draws over 50 features, all are used
    assert np.unique(rows).size == 50


def test_resolved_sizes_follow_the_rules(rng):
    X = rng.random((3, 40))
    fh = FlyHashTransformer(n_components=100, n_connections=7, k=0.25, random_state=0).fit(X)
    assert (fh.n_components_, fh.n_connections_, fh.k_) == (100, 7, 25)
    fh = FlyHashTransformer(expansion_factor=2.5, connection_sparsity=0.01, k=3, random_state=0).fit(X)
    assert (fh.n_components_, fh.n_connections_, fh.k_) == (100, 2, 3)  # s = max(2, int(0.4))


def test_same_random_state_same_projection_and_hash(rng):
    X = rng.random((20, 30))
    a = FlyHashTransformer(k=10, random_state=42, device="cpu").fit(X)
    b = FlyHashTransformer(k=10, random_state=42, device="cpu").fit(X)
    c = FlyHashTransformer(k=10, random_state=43, device="cpu").fit(X)
    assert (a.components_ != b.components_).nnz == 0
    assert (a.components_ != c.components_).nnz > 0
    assert (a.transform(X) != b.transform(X)).nnz == 0


def test_projection_uniform_over_features():
    # each unit samples s of d without replacement: feature usage ~ m*s/d each
    fh = FlyHashTransformer(n_components=4000, n_connections=5, k=1, random_state=0).fit(np.ones((1, 20)))
    counts = np.bincount(fh.components_.indices, minlength=20)
    expected = 4000 * 5 / 20
    assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected))


# ------------------------------------------------------------------- transform
def test_exactly_k_ones_per_row_on_tie_heavy_digits(device):
    X = _digits()
    fh = FlyHashTransformer(k=32, random_state=0, device=device).fit(X)
    H = fh.transform(X)
    assert H.shape == (X.shape[0], 64 * 20)
    assert H.dtype == bool
    assert np.all(np.diff(H.indptr) == 32)
    # digits activations really tie at the threshold (the point of the test)
    A = _reference_activations(fh, X)
    kth = np.sort(A, axis=1)[:, -32]
    assert np.mean((A == kth[:, None]).sum(1) > 1) > 0.5


def test_winners_equal_reference_on_ties(device):
    X = _digits()[:300]
    fh = FlyHashTransformer(k=40, random_state=3, device=device).fit(X)
    expected = _reference_winners(_reference_activations(fh, X), 40)
    W = to_host(fh._winners(X))
    assert W.dtype == np.int32 and W.shape == (300, 40)
    np.testing.assert_array_equal(W, expected)
    H = fh.transform(X)
    np.testing.assert_array_equal(H.indices.reshape(300, 40), expected)


def test_tie_rule_lower_index_wins():
    # one feature, every unit reads it: all activations tie -> the first k units win
    X = np.array([[1.0], [0.0], [-2.5]])
    fh = FlyHashTransformer(n_components=50, k=7, random_state=0, device="cpu", output="dense").fit(X)
    H = fh.transform(X)
    assert np.all(H[:, :7] == 1) and np.all(H[:, 7:] == 0)


def test_break_ties_keeps_the_lowest_indices_of_the_tied_entries(device, rng):
    """break_ties (index lists of the tied entries) equals the cumulative-count rule it
    replaced: every entry above the threshold, then the lowest-index equal ones up to k."""
    from sknn_gpu.fly._wta import break_ties

    xp = get_xp(device)
    for _ in range(50):
        # rows of at most 128 entries: CuPy compiles its (CUB) row sums per block size, which it
        # picks from the row length (32 threads up to 128 entries, 64 up to 256, ...): one build
        # here instead of three; break_ties has no branch on the row length
        n, m = int(rng.integers(1, 30)), int(rng.integers(2, 129))
        k = int(rng.integers(1, m))
        A = rng.integers(0, int(rng.integers(2, 12)), size=(n, m)).astype(np.float32)
        thr = np.partition(A, m - k, axis=1)[:, m - k : m - k + 1]
        tied = (A >= thr).sum(axis=1) > k
        if not tied.any():
            continue
        sub, th = A[tied], thr[tied]
        gt, eq = sub > th, sub == th
        need = (k - gt.sum(axis=1))[:, None]
        expected = gt | (eq & (np.cumsum(eq, axis=1) <= need))
        got = to_host(break_ties(xp.asarray(sub), xp.asarray(th), k))
        np.testing.assert_array_equal(got, expected)
        assert (got.sum(axis=1) == k).all()


def test_negative_zero_ties_with_zero():
    X = np.array([[-0.0, 0.0, -0.0, 0.0]])
    fh = FlyHashTransformer(n_components=12, n_connections=1, k=5, random_state=0, device="cpu")
    H = fh.fit(X).transform(X)
    np.testing.assert_array_equal(H.indices, np.arange(5))


def test_bisect_equals_exact_on_tie_free_floats(rng):
    X = rng.standard_normal((60, 30))
    fh = FlyHashTransformer(expansion_factor=10, connection_sparsity=0.3, k=17, random_state=0, device="cpu")
    fh.fit(X)
    A = np.sort(_reference_activations(fh, X), axis=1)
    assert np.all(A[:, -17] > A[:, -18])  # no tie at the threshold: bisection can resolve it
    exact = fh.transform(X)
    bisect = fh.set_params(algorithm="bisect").transform(X)
    assert (exact != bisect).nnz == 0
    assert np.all(np.diff(bisect.indptr) == 17)


def test_bisect_can_miss_k_under_ties():
    X = np.array([[1.0, 1.0, 1.0, 1.0]])
    fh = FlyHashTransformer(n_components=10, n_connections=1, k=3, algorithm="bisect", random_state=0)
    H = fh.set_params(device="cpu").fit(X).transform(X)
    assert H.nnz != 3  # all ten units tie: no threshold separates 3 of them


def test_outputs_agree(rng):
    X = rng.random((25, 12)) * 10
    base = dict(expansion_factor=7.0, k=9, random_state=5, device="cpu")
    S = FlyHashTransformer(output="sparse", **base).fit_transform(X)
    D = FlyHashTransformer(output="dense", **base).fit_transform(X)
    P = FlyHashTransformer(output="packed", **base).fit_transform(X)
    assert D.dtype == np.uint8 and D.shape == (25, 84)
    assert P.dtype == np.uint8 and P.shape == (25, 11)
    np.testing.assert_array_equal(S.toarray(), D.astype(bool))
    np.testing.assert_array_equal(np.packbits(D, axis=1), P)
    np.testing.assert_array_equal(np.unpackbits(P, axis=1, count=84), D)


def test_sparse_and_dense_input_agree(rng, device):
    X = rng.random((40, 25))
    X[X < 0.6] = 0
    # 16 connections: the fused-kernel build the other GPU tests use (FlyNN's default S)
    fh = FlyHashTransformer(k=11, n_connections=16, random_state=0, device=device, output="dense").fit(X)
    dense = to_host(fh.transform(X))
    for fmt in ("csr", "csc", "coo"):
        np.testing.assert_array_equal(to_host(fh.transform(sp.coo_matrix(X).asformat(fmt))), dense)
    np.testing.assert_array_equal(to_host(fh.transform(X.astype(np.float32))), dense)


def test_integer_and_float_input_agree(rng):
    Xi = rng.integers(0, 256, size=(30, 20))
    fh = FlyHashTransformer(k=13, random_state=0, device="cpu").fit(Xi)
    assert (fh.transform(Xi) != fh.transform(Xi.astype(np.float64))).nnz == 0


def test_wta_matches_reference(rng, device):
    xp = get_xp(device)
    A = rng.integers(0, 5, size=(50, 70)).astype(np.float32)  # ties everywhere
    M = wta(xp.asarray(A), 9)
    assert type(M) is type(xp.asarray(A))
    M = to_host(M)
    assert M.dtype == bool and np.all(M.sum(1) == 9)
    expected = _reference_winners(A, 9)
    np.testing.assert_array_equal(np.nonzero(M)[1].reshape(50, 9), expected)


def test_host_selection_on_wide_rows_matches_reference(rng):
    from sknn_gpu.fly._flyhash_cpu import wta_exact_mask_host

    A = rng.random((40, 12000), dtype=np.float32)
    A[:5, :2048] -= 2.0  # the sampled prefix is unrepresentative: these rows take the full path
    A[5:10] = np.round(A[5:10] * 8)  # heavy ties at the threshold
    for k in (1, 37, 600, 11999):
        M = wta_exact_mask_host(A, k)
        assert np.all(M.sum(axis=1) == k)
        np.testing.assert_array_equal(np.nonzero(M)[1].reshape(40, k), _reference_winners(A, k))


def test_host_winner_reading_matches_nonzero(rng):
    """The CPU engine reads a block's winners 8 mask entries at a time (_mask_columns): the
    same columns as np.nonzero, on rare and dense ones, every layout and sizes that are no
    multiple of 8; and the wide-row selection on a block that mixes constant rows (every unit
    a candidate) with random ones gives the reference winners."""
    from sknn_gpu.fly._flyhash_cpu import _flat_ones, _mask_columns, wta_exact_mask_host

    cases = [((32, 65536), 128 / 65536), ((7, 13), 0.3), ((5, 16), 0.0), ((4, 24), 1.0), ((0, 16), 0.5)]
    for shape, p in cases:
        mask = rng.random(shape) < p
        for layout in (mask, np.asfortranarray(mask), mask[:, ::-1]):
            np.testing.assert_array_equal(_mask_columns(layout), np.nonzero(layout)[1])
            np.testing.assert_array_equal(_flat_ones(layout), np.flatnonzero(layout))
    A = rng.random((64, 12000), dtype=np.float32)
    A[[3, 40]] = 1.0  # two rows of ties among random ones: the block still has few candidates
    for k in (5, 300):
        np.testing.assert_array_equal(
            np.nonzero(wta_exact_mask_host(A.copy(), k))[1].reshape(64, k), _reference_winners(A, k)
        )


def test_wta_errors():
    with pytest.raises(ValueError, match="1 <= k <= 3"):
        wta(np.ones((2, 3)), 4)
    with pytest.raises(ValueError, match="1 <= k"):
        wta(np.ones((2, 3)), 0)
    with pytest.raises(ValueError, match="NaN"):
        wta(np.array([[1.0, np.nan]]), 1)
    with pytest.raises(ValueError, match="2-D"):
        wta(np.ones(3), 1)


# ----------------------------------------------------------------- errors
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_input_is_refused(bad, rng, device):
    X = rng.random((5, 8))
    fh = FlyHashTransformer(k=4, random_state=0, device=device).fit(X)
    X[2, 3] = bad
    with pytest.raises(ValueError, match="NaN|infinity"):
        fh.transform(X)
    if device == "cuda":
        import cupy

        with pytest.raises(ValueError, match="NaN|infinity"):
            fh.transform(cupy.asarray(X))


def test_k_out_of_range_is_refused(rng):
    X = rng.random((4, 5))
    with pytest.raises(ValueError, match="k=101 winners exceeds n_components_=100"):
        FlyHashTransformer(n_components=100, k=101).fit(X)
    with pytest.raises(ValueError, match="'k' parameter"):
        FlyHashTransformer(k=0).fit(X)
    with pytest.raises(ValueError, match="'k' parameter"):
        FlyHashTransformer(k=1.5).fit(X)


def test_wrong_n_features_and_bad_params(rng):
    X = rng.random((4, 5))
    fh = FlyHashTransformer(k=3, random_state=0, device="cpu").fit(X)
    with pytest.raises(ValueError, match="5 features"):
        fh.transform(rng.random((4, 6)))
    with pytest.raises(ValueError, match="n_connections=9 exceeds n_features=5"):
        FlyHashTransformer(n_connections=9, k=3).fit(X)
    with pytest.raises(ValueError, match="'output' parameter"):
        FlyHashTransformer(output="bits").fit(X)
    with pytest.raises(ValueError, match="overflow"):
        fh.transform(np.full((1, 5), 3e38))


def test_dense_output_refused_before_allocating(monkeypatch, rng):
    X = rng.random((10, 4))
    fh = FlyHashTransformer(k=3, random_state=0, device="cpu", output="dense").fit(X)
    monkeypatch.setattr("sknn_gpu._backend.free_memory", lambda device, need=None: 100)
    with pytest.raises(
        InsufficientMemoryError, match=r"transform of 10 samples into 80 units.*only 100 bytes"
    ):
        fh.transform(X)


# --------------------------------------------------------------- sklearn API
def test_pipeline_and_feature_names(rng):
    X = rng.random((6, 4)) * 100
    fh = FlyHashTransformer(k=5, random_state=0, output="dense", device="cpu")
    pipe = make_pipeline(MinMaxScaler(), fh).fit(X)
    out = pipe.transform(X)
    assert out.shape == (6, 80) and np.all(out.sum(axis=1) == 5)
    names = pipe.get_feature_names_out()
    assert list(names[:2]) == ["flyhashtransformer0", "flyhashtransformer1"] and len(names) == 80
    packed = FlyHashTransformer(k=5, output="packed", random_state=0).fit(X)
    assert list(packed.get_feature_names_out()[[0, -1]]) == [
        "flyhashtransformer_byte0",
        "flyhashtransformer_byte9",
    ]


def test_set_output_pandas(rng):
    pd = pytest.importorskip("pandas")
    X = pd.DataFrame(rng.random((6, 4)), columns=list("abcd"))
    fh = FlyHashTransformer(k=5, random_state=0, output="dense", device="cpu").set_output(transform="pandas")
    out = fh.fit_transform(X)
    assert list(out.columns[:2]) == ["flyhashtransformer0", "flyhashtransformer1"]
    assert np.all(out.sum(axis=1) == 5)


def test_pickle_roundtrip(rng):
    X = rng.random((9, 6))
    fh = FlyHashTransformer(k=4, random_state=0, device="cpu").fit(X)
    fh2 = pickle.loads(pickle.dumps(fh))
    assert (fh2.transform(X) != fh.transform(X)).nnz == 0


@pytest.mark.parametrize("seed", ["int", "none", "instance"])
def test_pickle_keeps_the_generator_state_and_redraws_the_projection(device, rng, seed):
    """A pickle holds the generator state the projection was drawn from, not the projection:
    loading draws it again, the same bits (on a GPU the fit draws on the device, the load on
    the host), whatever ``random_state`` was."""
    import copy

    random_state = {"int": 3, "none": None, "instance": np.random.RandomState(7)}[seed]
    X = rng.random((20, 40))
    fh = FlyHashTransformer(n_components=4096, k=64, random_state=random_state, device=device).fit(X)
    blob = pickle.dumps(fh)
    # 4,096 units x 4 connections held ~120 KB (CSR data, indices and the GPU table); the
    # generator state is 2.5 KB, a RandomState parameter as much again
    assert len(blob) < 16 * 1024
    for again in (pickle.loads(blob), copy.deepcopy(fh)):
        assert (again.components_ != fh.components_).nnz == 0
        assert again.components_.indices.dtype == fh.components_.indices.dtype
        assert np.array_equal(again._kernel_index, fh._kernel_index)
        assert (again.transform(X) != fh.transform(X)).nnz == 0


def test_unpickled_projection_is_drawn_once_per_process(rng, monkeypatch):
    """A Dask worker unpickles the same fitted transformer with every call: the projection
    is drawn (and checked against its digest) the first time, then reused; the cache keeps
    the few most recent projections and a digest it does not hold is still checked."""
    from sknn_gpu.fly import _flyhash

    X = rng.random((10, 30))
    fitted = [
        FlyHashTransformer(n_components=512, k=16, random_state=seed, device="cpu").fit(X)
        for seed in range(_flyhash._REDRAWN_MAX + 1)
    ]
    blobs = [pickle.dumps(fh) for fh in fitted]
    monkeypatch.setattr(_flyhash, "_REDRAWN", type(_flyhash._REDRAWN)())
    draws = []
    real_draw = _flyhash._draw_connections
    monkeypatch.setattr(_flyhash, "_draw_connections", lambda *a: draws.append(a) or real_draw(*a))
    first = pickle.loads(blobs[0])
    again = pickle.loads(blobs[0])
    assert len(draws) == 1  # the second load reused the first one's projection
    assert again.components_ is first.components_
    assert (again.components_ != fitted[0].components_).nnz == 0
    assert np.array_equal(again._kernel_index, fitted[0]._kernel_index)
    assert (again.transform(X) != fitted[0].transform(X)).nnz == 0
    for blob in blobs[1:]:  # one more than the cache holds: the first is dropped
        pickle.loads(blob)
    assert len(_flyhash._REDRAWN) == _flyhash._REDRAWN_MAX and len(draws) == len(blobs)
    pickle.loads(blobs[0])
    assert len(draws) == len(blobs) + 1
    # a damaged pickle (a digest nobody drew) is refused even with good projections cached
    state = fitted[1].__getstate__()
    state["_projection_sha256"] = "0" * 64
    with pytest.raises(ValueError, match="drawn again .* differs"):
        FlyHashTransformer.__new__(FlyHashTransformer).__setstate__(state)


def test_pickle_whose_projection_does_not_redraw_is_refused(rng):
    X = rng.random((5, 12))
    fh = FlyHashTransformer(k=4, random_state=0, device="cpu").fit(X)
    state = fh.__getstate__()
    assert "components_" not in state and "_kernel_index" not in state
    state["_projection_sha256"] = "0" * 64  # another version's draw, or a damaged file
    with pytest.raises(ValueError, match="drawn again .* differs"):
        FlyHashTransformer.__new__(FlyHashTransformer).__setstate__(state)


def test_pickle_without_a_generator_state_keeps_its_projection(rng):
    """A model whose projection has no recorded generator state (an older pickle) keeps the
    projection itself in the pickle."""
    X = rng.random((5, 12))
    fh = FlyHashTransformer(k=4, random_state=0, device="cpu").fit(X)
    del fh._projection_draw
    state = fh.__getstate__()
    assert "components_" in state and "_projection_sha256" not in state
    again = pickle.loads(pickle.dumps(fh))
    assert (again.transform(X) != fh.transform(X)).nnz == 0


# ----------------------------------------------------------------- GPU parity
@pytest.mark.cuda
@pytest.mark.parametrize("output", ["sparse", "dense", "packed"])
def test_cuda_matches_cpu_bit_for_bit_digits(output):
    import cupy

    X = _digits()
    cpu = FlyHashTransformer(k=32, random_state=0, device="cpu", output=output).fit(X)
    gpu = FlyHashTransformer(k=32, random_state=0, device="cuda", output=output).fit(X)
    assert (cpu.components_ != gpu.components_).nnz == 0
    Hc, Hg = cpu.transform(X), gpu.transform(cupy.asarray(X))
    if output == "sparse":
        assert Hg.format == "csr"
        np.testing.assert_array_equal(Hc.toarray(), Hg.get().toarray().astype(bool))
    else:
        assert isinstance(Hg, cupy.ndarray) and Hg.dtype == np.uint8
        np.testing.assert_array_equal(Hc, Hg.get())
    # NumPy input on a CUDA-fitted transformer returns NumPy
    Hn = gpu.transform(X)
    assert not hasattr(Hn, "get")
    if output == "sparse":
        assert (Hn != Hc).nnz == 0
    else:
        np.testing.assert_array_equal(Hn, Hc)


@pytest.mark.cuda
@pytest.mark.parametrize(
    "shape,params",
    [
        ((700, 784), dict(expansion_factor=32, connection_sparsity=0.05, k=0.05)),  # FashionMNIST config
        ((300, 3072), dict(expansion_factor=32, connection_sparsity=0.05, k=0.05)),  # CIFAR-10 config
        ((257, 33), dict(n_components=1000, n_connections=3, k=999)),  # k close to m
        ((100, 16), dict(n_components=77, n_connections=16, k=1)),  # m not a multiple of 32
    ],
)
def test_cuda_matches_cpu_bit_for_bit_floats(shape, params, rng):
    import cupy

    X = rng.standard_normal(shape).astype(np.float32)
    X[rng.random(shape) < 0.2] = 0.0  # zeros and exact duplicates create ties
    X[:3] = 1.0  # rows whose activations all tie
    cpu = FlyHashTransformer(random_state=0, device="cpu", output="packed", **params).fit(X)
    gpu = FlyHashTransformer(random_state=0, device="cuda", output="packed", **params).fit(X)
    np.testing.assert_array_equal(cpu.transform(X), gpu.transform(cupy.asarray(X)).get())
    np.testing.assert_array_equal(cpu._winners(X), gpu._winners(cupy.asarray(X)).get())


@pytest.mark.cuda
@pytest.mark.parametrize("rows", [32, 16, 8, 4, 2, 1])
def test_cuda_every_rows_per_block_variant_matches_cpu(rows, monkeypatch, rng):
    import cupy

    from sknn_gpu.fly import _flyhash_cuda

    monkeypatch.setenv("SKNN_GPU_FLYHASH_ROWS", str(rows))
    monkeypatch.setattr(_flyhash_cuda, "BAND_MAX_CONNECTIONS", 0)  # the fused kernel, not the band path
    X = np.vstack([_digits()[:150], rng.random((90, 64)) * 16, np.full((3, 64), 7.0)])
    # both configurations with FlyNN's default 16 connections: the kernel is built per (rows,
    # connections), so each rows value here is one build, shared with the FlyNN tests
    for params in (dict(k=32, n_connections=16), dict(k=0.05, expansion_factor=32, n_connections=16)):
        cpu = FlyHashTransformer(random_state=1, device="cpu", output="packed", **params).fit(X)
        gpu = FlyHashTransformer(random_state=1, device="cuda", output="packed", **params).fit(X)
        np.testing.assert_array_equal(cpu.transform(X), gpu.transform(cupy.asarray(X)).get())


_PAPER = dict(expansion_factor=32, connection_sparsity=0.05, k=0.05)
# FlyNNClassifier's defaults before 2026-11-26 (the raw features' hash)
_FLYNN = dict(expansion_factor=20, connection_sparsity=0.1, k=32)


@pytest.mark.cuda
@pytest.mark.parametrize("n,d,params", [(400, 784, _PAPER), (400, 3072, _PAPER), (8192, 784, _FLYNN)])
def test_cuda_fused_kernel_rarely_hands_rows_to_the_host(n, d, params, monkeypatch, rng):
    """The one-pass kernel's window lists hold the K-th largest on real-looking rows.

    Uniform rows and digit-like rows (most pixels zero), at the paper's configs and
    at FlyNN's (k=32 of 15,680: a window of a dozen sample ranks, whose list once
    overflowed for ~1 row in 1,000): at most 1 % of rows (one row for FlyNN's 8,192)
    may overflow their list (the host finishes those, same bits).
    """
    import cupy

    from sknn_gpu.fly import _flyhash_cuda

    monkeypatch.setattr(_flyhash_cuda, "BAND_MAX_CONNECTIONS", 0)  # the fused kernel, not the band path
    X = rng.random((n, d)).astype(np.float32)
    X[n // 2 :][rng.random((n - n // 2, d)) < 0.8] = 0.0
    fh = FlyHashTransformer(random_state=0, device="cuda", output="packed", **params).fit(X)
    stats = {}
    words = _flyhash_cuda.words(fh, cupy.asarray(X), "exact", stats=stats, integer_input=False)
    assert stats.get("fallback_rows", 0) <= (1 if params is _FLYNN else n // 100)
    cpu = FlyHashTransformer(random_state=0, device="cpu", output="packed", **params).fit(X)
    m, sub = fh.n_components_, np.r_[0:200, n - 200 : n]
    np.testing.assert_array_equal(cpu.transform(X[sub]), words.get()[sub].view(np.uint8)[:, : (m + 7) // 8])


@pytest.mark.cuda
def test_cuda_window_list_overflow_is_finished_by_the_host(monkeypatch, rng):
    """Lists too short for any row: every row is flagged, and the host path gives the same bits."""
    import cupy

    from sknn_gpu.fly import _flyhash_cuda

    monkeypatch.setattr(_flyhash_cuda, "_window_cap", lambda m, k: 8)
    monkeypatch.setattr(_flyhash_cuda, "BAND_MAX_CONNECTIONS", 0)  # the fused kernel, not the band path
    X = rng.random((150, 64)).astype(np.float32)
    params = dict(expansion_factor=32, n_connections=16, k=0.05)
    gpu = FlyHashTransformer(random_state=2, device="cuda", output="packed", **params).fit(X)
    stats = {}
    _flyhash_cuda.words(gpu, cupy.asarray(X), "exact", stats=stats, integer_input=False)
    assert stats["fallback_rows"] == 150
    cpu = FlyHashTransformer(random_state=2, device="cpu", output="packed", **params).fit(X)
    np.testing.assert_array_equal(cpu.transform(X), gpu.transform(cupy.asarray(X)).get())


def _near_ties(rng, n, d):
    """Rows that stress an approximate product: mixed magnitudes (the exact float32 sums
    drop the small inputs), many exact zeros, offsets far above the spread."""
    X = rng.random((n, d)).astype(np.float32)
    X[: n // 4] *= np.where(rng.random((n // 4, d)) < 0.5, 1e4, 1e-4).astype(np.float32)
    X[n // 4 : n // 2][rng.random((n // 4, d)) < 0.7] = 0.0
    X[n // 2 : 3 * n // 4] += np.float32(1000.0)
    X[-3:] = 2.5  # every activation of these rows ties
    return X


@pytest.mark.cuda
@pytest.mark.parametrize("params", [_FLYNN, _PAPER, dict(k=16, expansion_factor=40, connection_sparsity=0.1)])
def test_cuda_float_rows_from_tensor_cores_are_exact(params, rng):
    """Float input under 'exact' through the split-float16 product: the units near the
    threshold get their exact sums, a row with too many such units goes to the fused
    kernel; bit-identical to the CPU either way."""
    import cupy

    from sknn_gpu.fly import _flyhash_cuda

    X = _near_ties(rng, 800, 784)
    fh = FlyHashTransformer(random_state=4, device="cuda", output="packed", **params).fit(X)
    assert _flyhash_cuda._band_ok(fh)
    stats = {}
    words = _flyhash_cuda.words(fh, cupy.asarray(X), "exact", stats=stats, integer_input=False)
    assert stats["band_rows"] == 800 and 3 <= stats["band_redone_rows"] < 400
    cpu = FlyHashTransformer(random_state=4, device="cpu", output="packed", **params).fit(X)
    m = fh.n_components_
    np.testing.assert_array_equal(cpu.transform(X), words.get().view(np.uint8)[:, : (m + 7) // 8])


@pytest.mark.cuda
@pytest.mark.parametrize("path", ["band", "fused", "fast"])
def test_cuda_rows_of_subnormals_among_normal_rows(path, monkeypatch, rng):
    """Rows whose every value is a float32 subnormal (allowed while other rows are
    normal), and rows just above the smallest normal: the split-float16 product finds
    their largest magnitude from the bits (min/max flush subnormals to zero under
    -ftz) and scales them into [2**14, 2**15) like every row, by up to 2**163 in two
    exact steps (2**128 and beyond overflow float32). Both kinds used to reach the
    fused kernel (all-zero or infinite approximate activations); now they are decided
    by the band check, and both give the CPU's bits. 'fast' keeps exactly k winners."""
    import cupy

    from sknn_gpu.fly import _flyhash_cuda

    if path == "fused":
        monkeypatch.setattr(_flyhash_cuda, "BAND_MAX_CONNECTIONS", 0)
    X = rng.random((40, 784)).astype(np.float32)
    X[:5] *= np.float32(1e-39)  # every value subnormal
    X[5:8] *= np.float32(3e-38)  # largest magnitudes just above the smallest normal
    params = dict(random_state=6, output="packed", **_FLYNN)
    fh = FlyHashTransformer(device="cuda", precision="fast" if path == "fast" else "exact", **params).fit(X)
    stats = {}
    got = fh.transform(cupy.asarray(X)).get()
    if path == "fast":
        assert np.all(np.unpackbits(got, axis=1).sum(axis=1) == fh.k_)
        return
    words = _flyhash_cuda.words(fh, cupy.asarray(X), "exact", stats=stats, integer_input=False)
    assert stats.get("band_rows", 0) == (40 if path == "band" else 0)
    assert stats.get("band_redone_rows", 0) == 0  # decided there, not handed to the fused kernel
    cpu = FlyHashTransformer(device="cpu", **params).fit(X).transform(X)
    m = fh.n_components_
    np.testing.assert_array_equal(cpu, got)
    np.testing.assert_array_equal(cpu, words.get().view(np.uint8)[:, : (m + 7) // 8])


@pytest.mark.cuda
def test_cuda_band_rows_with_too_many_candidates_go_to_the_fused_kernel(monkeypatch, rng):
    import cupy

    from sknn_gpu.fly import _flyhash_cuda

    monkeypatch.setattr(_flyhash_cuda, "BAND_SAFETY", 1e4)  # a band that holds hundreds of units
    X = rng.random((200, 300)).astype(np.float32)
    # 39 connections: the band and fused builds of the FashionMNIST configuration's tests
    params = dict(random_state=5, output="packed", k=32, n_connections=39)
    fh = FlyHashTransformer(device="cuda", **params).fit(X)
    assert _flyhash_cuda._band_ok(fh)
    stats = {}
    words = _flyhash_cuda.words(fh, cupy.asarray(X), "exact", stats=stats, integer_input=False)
    assert stats["band_redone_rows"] == 200
    cpu = FlyHashTransformer(device="cpu", **params).fit(X)
    m = fh.n_components_
    np.testing.assert_array_equal(cpu.transform(X), words.get().view(np.uint8)[:, : (m + 7) // 8])


def test_band_width_bounds_the_split_product_generously():
    """The band is twice BAND_SAFETY times the error bound, grows with S, and stays a
    small fraction of the scaled magnitudes for FlyHash's usual S."""
    from sknn_gpu.fly import _flyhash_cuda

    widths = [_flyhash_cuda._band_width(s) for s in (2, 39, 78, 96)]
    assert widths == sorted(widths)
    s = 78
    assert _flyhash_cuda._band_width(s) >= 2 * 8 * (4 * s) * 2.0**-22 * s * 2.0**15
    assert _flyhash_cuda._band_width(s) < 0.1 * s * 2.0**15  # a few percent of the largest sum


@pytest.mark.cuda
def test_cuda_bisect_matches_cpu(rng):
    import cupy

    X = rng.random((200, 50)).astype(np.float32)
    params = dict(k=30, n_connections=16, algorithm="bisect", random_state=0, output="dense")
    cpu = FlyHashTransformer(device="cpu", **params).fit(X)
    gpu = FlyHashTransformer(device="cuda", **params).fit(X)
    np.testing.assert_array_equal(cpu.transform(X), gpu.transform(cupy.asarray(X)).get())


@pytest.mark.cuda
def test_cuda_sparse_input_and_pickle(rng):
    import cupy
    import cupyx.scipy.sparse as csp

    X = rng.random((64, 40)).astype(np.float32)
    X[X < 0.5] = 0
    gpu = FlyHashTransformer(k=20, n_connections=16, random_state=0, device="cuda", output="dense").fit(X)
    dense = gpu.transform(cupy.asarray(X))
    np.testing.assert_array_equal(gpu.transform(csp.csr_matrix(cupy.asarray(X))).get(), dense.get())
    back = pickle.loads(pickle.dumps(gpu))
    np.testing.assert_array_equal(back.transform(X), dense.get())


# ----------------------------------------------------- issue 15: limits and magnitudes
def test_oversize_projection_refused_before_allocating(monkeypatch):
    """FlyHashTransformer(n_components=10**9).fit(zeros((1, 64))) is refused by the estimate, not by NumPy."""
    import time
    import tracemalloc

    monkeypatch.setattr("sknn_gpu._backend.free_memory", lambda device, need=None: 32 * 2**30)  # a 32 GiB box
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(
            InsufficientMemoryError,
            match=r"n_components=1000000000 units x n_connections=6 inputs \(64 features\).* needs "
            r"\d+ bytes \(\d+\.\d GiB\) on cpu, but only 34359738368 bytes \(32\.0 GiB\) are free",
        ):
            FlyHashTransformer(n_components=10**9).fit(np.zeros((1, 64)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20, f"{peak} bytes were allocated before the refusal"
    assert time.perf_counter() - t0 < 5


def test_oversize_projection_refused_on_any_machine():
    # 10**12 units: terabytes whatever the machine (NumPy itself would say "Unable to allocate")
    with pytest.raises(InsufficientMemoryError, match=r"n_components=1000000000000 units.* needs \d+ bytes"):
        FlyHashTransformer(n_components=10**12, device="cpu").fit(np.zeros((1, 64)))


@pytest.mark.parametrize("output", ["sparse", "dense", "packed"])
def test_transform_refused_before_allocating_for_every_output(monkeypatch, rng, device, output):
    X = rng.random((40, 6))
    fh = FlyHashTransformer(k=3, random_state=0, device=device, output=output).fit(X)
    monkeypatch.setattr("sknn_gpu._backend.free_memory", lambda device, need=None: 1000)
    with pytest.raises(
        InsufficientMemoryError, match=rf"transform of 40 samples into 120 units \(output='{output}'\) needs"
    ):
        fh.transform(X)


def test_input_below_float32_normals_is_refused(rng, device):
    X = rng.random((6, 8)) + 0.5
    fh = FlyHashTransformer(k=4, random_state=0, device=device).fit(X)
    with pytest.raises(ValueError, match=r"at most .* below float32's smallest normal .* rescale X"):
        fh.transform(X * 1e-300)
    # a row of zeros among normal rows is fine: the check is about the whole input's scale
    X[0] = 0.0
    assert np.all(np.diff(to_host(fh.transform(X)).indptr) == 4)


def test_connections_are_uniform_distinct_sorted_subsets():
    """Floyd's sampling per unit: every s-subset of d features equally likely."""
    from itertools import combinations

    from sknn_gpu.fly._flyhash import _draw_connections

    n = 40_000
    conn = _draw_connections(np.random.RandomState(3), n, 6, 3)
    assert conn.shape == (n, 3) and conn.dtype == np.int32
    assert (np.diff(conn, axis=1) > 0).all() and conn.min() >= 0 and conn.max() < 6
    subsets = {c: i for i, c in enumerate(combinations(range(6), 3))}
    counts = np.bincount([subsets[tuple(r)] for r in conn.tolist()], minlength=len(subsets))
    expected = n / len(subsets)
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 45.3, chi2  # 19 degrees of freedom, p ~ 0.0007: a biased sampler fails this
    full = _draw_connections(np.random.RandomState(0), 5, 4, 4)
    np.testing.assert_array_equal(full, np.tile(np.arange(4), (5, 1)))


def _floyd_reference(rng, n_units, d, s, block):
    """Floyd's sampling unit by unit with a Python set, the draws in the order the
    vectorised sampler makes them (per block of rows, column after column)."""
    out = np.empty((n_units, s), dtype=np.int32)
    for start in range(0, n_units, block):
        n = min(n_units, start + block) - start
        draws = [rng.randint(0, j + 1, size=n) for j in range(d - s, d)]
        for r in range(n):
            chosen = set()
            for i, j in enumerate(range(d - s, d)):
                t = int(draws[i][r])
                chosen.add(j if t in chosen else t)
            out[start + r] = sorted(chosen)
    return out


@pytest.mark.parametrize("chunk_bytes", [7, 64, 1 << 20])
def test_connection_draw_does_not_depend_on_its_chunking(chunk_bytes, monkeypatch):
    """The membership mask is processed in chunks of rows (cache-sized); any chunking
    gives the per-unit Floyd draw of the same random stream."""
    from sknn_gpu.fly import _flyhash

    monkeypatch.setattr(_flyhash, "_DRAW_BLOCK_BYTES", 64)  # blocks of 512 // d rows: several
    monkeypatch.setattr(_flyhash, "_DRAW_CHUNK_BYTES", chunk_bytes)
    n, d, s = 301, 9, 5
    got = _flyhash._draw_connections(np.random.RandomState(11), n, d, s)
    np.testing.assert_array_equal(got, _floyd_reference(np.random.RandomState(11), n, d, s, 512 // d))


@pytest.mark.cuda
@pytest.mark.parametrize(
    "n,d,s", [(15680, 784, 78), (301, 9, 5), (1000, 33, 32), (64, 8192, 300), (700, 1024, 3)]
)
@pytest.mark.parametrize("used", [0, 5, 623, 624, 1000])
def test_cuda_draws_the_projection_as_numpy_does(n, d, s, used, monkeypatch):
    """The GPU's MT19937 + masked rejection + Floyd give the host's picks bit for bit and
    leave the RandomState where NumPy's own draws leave it, from any position in the stream
    (a fresh seed, mid-generation, at a generation's end) and over several blocks."""
    from sknn_gpu.fly import _flyhash, _flyhash_cuda

    if n == 700:
        monkeypatch.setattr(_flyhash, "_DRAW_BLOCK_BYTES", 8 * 1024)  # blocks of 64 rows: 11 blocks
    host_rng, gpu_rng = np.random.RandomState(5), np.random.RandomState(5)
    if used:
        host_rng.randint(0, 2**31, size=used)
        gpu_rng.randint(0, 2**31, size=used)
    host = _flyhash._draw_connections(host_rng, n, d, s)
    gpu = _flyhash._draw_connections(gpu_rng, n, d, s, draw=_flyhash_cuda.draw_block)
    np.testing.assert_array_equal(gpu, host)
    a, b = host_rng.get_state(), gpu_rng.get_state()
    np.testing.assert_array_equal(a[1], b[1])
    assert a[0] == b[0] and a[2:] == b[2:]
    np.testing.assert_array_equal(host_rng.randint(0, 1000, 50), gpu_rng.randint(0, 1000, 50))


@pytest.mark.parametrize(
    "n,d,s", [(15680, 784, 78), (42799, 784, 39), (1, 2, 1), (64, 8192, 300), (5, 1025, 1)]
)
def test_gpu_draw_estimate_bounds_what_draw_block_allocates(n, d, s):
    """flyhash_bytes' sizes-only bound covers draw_block's buffers for any stream position."""
    from sknn_gpu.fly import _flyhash_cuda as fc

    count = fc._raw_count(n, d, s)
    gens = ((fc._MT_N + count) // fc._MT_N + 2) * fc._MT_N  # the largest: a state at position 624
    assert count >= n * s  # at least one output per draw
    assert 4 * count + 4 * gens + 8 * n * s <= fc.draw_block_bytes(n, s)


@pytest.mark.cuda
def test_cuda_projection_draw_leaves_other_generators_to_the_host():
    from sknn_gpu.fly import _flyhash_cuda

    wide = _flyhash_cuda.FLOYD_MAX_FEATURES + 1
    assert _flyhash_cuda.draw_block(np.random.RandomState(0), 10, wide, 3) is None
    other = np.random.RandomState(np.random.PCG64(0))  # legacy API over another bit generator
    before = other.get_state(legacy=False)
    assert _flyhash_cuda.draw_block(other, 10, 50, 3) is None
    assert other.get_state(legacy=False)["state"] == before["state"]  # nothing drawn


@pytest.mark.cuda
def test_cuda_and_cpu_fits_draw_the_same_projection():
    X = np.zeros((2, 784), dtype=np.float32)
    params = dict(expansion_factor=20, connection_sparsity=0.1, random_state=4)
    cpu = FlyHashTransformer(device="cpu", **params).fit(X)
    gpu = FlyHashTransformer(device="cuda", **params).fit(X)
    assert (cpu.components_ != gpu.components_).nnz == 0
    np.testing.assert_array_equal(cpu._kernel_index, gpu._kernel_index)


# ------------------------------------------------------ sparse input, verbose (issue 17)
def _order_sensitive_csr(rng, n, d, density):
    """CSR rows whose float32 sums depend on the order of the additions (magnitudes 1e-6..1e6),
    with explicit zeros, negative zeros and empty rows."""
    X = sp.random(
        n, d, density=density, format="csr", dtype=np.float64, random_state=int(rng.integers(1 << 30))
    )
    X.data = rng.standard_normal(X.nnz) * 10.0 ** rng.integers(-6, 7, X.nnz)
    X.data[::17] = 0.0
    X.data[5::23] = -0.0
    X = X.tolil()
    X[::7] = 0  # empty rows
    return X.tocsr()


@pytest.mark.parametrize("density", [0.002, 0.008, 0.05])
def test_sparse_input_hashes_bit_for_bit_like_its_dense_copy(rng, density, monkeypatch):
    from sknn_gpu.fly import _flyhash_cpu

    X = _order_sensitive_csr(rng, 300, 900, density)
    used = []
    real = _flyhash_cpu._sparse_activations
    monkeypatch.setattr(_flyhash_cpu, "_sparse_activations", lambda *a: used.append(1) or real(*a))
    fh = FlyHashTransformer(k=25, random_state=0, device="cpu", output="dense").fit(X)
    assert fh.n_components_ * 4 * 300 > _flyhash_cpu.BLOCK_BYTES  # several blocks (threads)
    dense = fh.transform(X.toarray())
    assert not used
    for fmt in ("csr", "csc", "coo"):
        np.testing.assert_array_equal(fh.transform(X.asformat(fmt)), dense)
    assert bool(used) == (density <= _flyhash_cpu.SPARSE_DENSITY)  # the entry path where it pays
    # the entry path forced on denser data still gives the dense bits, for every output
    monkeypatch.setattr(_flyhash_cpu, "SPARSE_DENSITY", 1.0)
    used.clear()
    np.testing.assert_array_equal(fh.transform(X), dense)
    assert used
    for output in ("sparse", "packed"):
        fh.set_params(output=output)
        a, b = fh.transform(X), fh.transform(X.toarray())
        assert (a != b).nnz == 0 if output == "sparse" else np.array_equal(a, b)
    # and the activations themselves are the reference's sequential float32 sums
    table = _flyhash_cpu._units_by_feature(fh)
    A = _flyhash_cpu._activations(fh, X[:40], table)
    np.testing.assert_array_equal(
        A.view(np.uint32), (_reference_activations(fh, X[:40]) + np.float32(0)).view(np.uint32)
    )


def test_unsorted_csr_indices_hash_like_sorted(rng):
    X = _order_sensitive_csr(rng, 50, 400, 0.005)
    shuffled = X.copy()
    for r in range(X.shape[0]):  # reverse each row's entries: same matrix, unsorted indices
        lo, hi = shuffled.indptr[r], shuffled.indptr[r + 1]
        shuffled.indices[lo:hi] = shuffled.indices[lo:hi][::-1].copy()
        shuffled.data[lo:hi] = shuffled.data[lo:hi][::-1].copy()
    shuffled.has_sorted_indices = False
    fh = FlyHashTransformer(k=9, random_state=2, device="cpu", output="dense").fit(X)
    np.testing.assert_array_equal(fh.transform(shuffled), fh.transform(X.toarray()))


@pytest.mark.parametrize("verbose", [0, 1, 2])
def test_verbose_logs_fit_and_transform(caplog, rng, verbose):
    import logging

    from sknn_gpu.fly import _flyhash_cpu

    X = rng.random((3 * 130, 16))
    fh = FlyHashTransformer(n_components=16000, k=8, random_state=0, device="cpu", verbose=verbose)
    n_blocks = -(-X.shape[0] // _flyhash_cpu._block_rows(16000))
    assert n_blocks == 3
    with caplog.at_level(logging.INFO, logger="sknn_gpu"):
        fh.fit(X).transform(X)
    msgs = [r.getMessage() for r in caplog.records if r.name == "sknn_gpu.fly"]
    if verbose == 0:
        assert msgs == []
        return
    assert msgs[0].startswith("FlyHashTransformer.fit: 16000 units in ")
    assert msgs[0].endswith("n_connections=2, k=8")
    steps = [m for m in msgs if m.startswith("FlyHashTransformer.transform ")]
    assert len(steps) == (n_blocks if verbose == 2 else 0)
    if verbose == 2:
        assert steps[-1] == f"FlyHashTransformer.transform {X.shape[0]}/{X.shape[0]}"
    assert msgs[-1].startswith(f"FlyHashTransformer.transform: {X.shape[0]} rows in ")
    assert msgs[-1].endswith("output=sparse, device=cpu")


# --------------------------------------------------------------------------- #
# bisect_steps (issue 16: the paper's halvings are a parameter)                  #
# --------------------------------------------------------------------------- #
def _bisect_wrong_rows(steps, X, **kw):
    # 16 of 30 inputs per unit: units with the same inputs (exact ties) are very unlikely
    params = dict(n_components=400, n_connections=16, k=20, output="dense", random_state=0, **kw)
    fh = FlyHashTransformer(algorithm="bisect", bisect_steps=steps, **params).fit(X)
    H = to_host(fh.transform(X))
    exact = to_host(fh.set_params(algorithm="exact").transform(X))
    return int((H.sum(axis=1) != 20).sum()), int((H != exact).sum()), H


def test_more_halvings_never_leave_more_rows_wrong(rng):
    X = rng.standard_normal((300, 30)).astype(np.float32)
    wrong = [_bisect_wrong_rows(s, X, device="cpu")[:2] for s in (4, 8, 16, 24, 32, 64, 300)]
    rows = [w[0] for w in wrong]
    assert rows[0] > 0  # 4 halvings cannot separate the k-th value on generic data
    assert all(a >= b for a, b in zip(rows, rows[1:], strict=False)), rows
    assert wrong[-1] == (0, 0)  # 300 halvings: exactly k winners, the exact top-k


def test_bisect_steps_is_validated():
    X = np.ones((2, 4))
    for bad in (0, -3, 2.5, 5000):
        with pytest.raises(ValueError, match="bisect_steps"):
            FlyHashTransformer(n_components=8, k=2, bisect_steps=bad).fit(X)


@pytest.mark.cuda
@pytest.mark.parametrize("steps", [8, 64, 300])
def test_bisect_steps_same_bits_on_both_devices(rng, steps):
    X = rng.standard_normal((200, 30)).astype(np.float32)
    cpu = _bisect_wrong_rows(steps, X, device="cpu")[2]
    gpu = _bisect_wrong_rows(steps, X, device="cuda")[2]
    np.testing.assert_array_equal(gpu, cpu)
