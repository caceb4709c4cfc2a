"""FlyHashTransformer and FlyNNClassifier on Dask arrays (issue 18).

FlyHash: ``fit`` reads only the width of a Dask array, ``transform`` hashes block by
block. FlyNN: ``fit``/``partial_fit`` count every block on the worker that holds it and
sum the count tables up a tree; ``predict*``/``score`` run blockwise. Every result is
compared with the in-memory one bit for bit (the algorithms are integer), on the
two-process ``LocalCluster`` of ``conftest.dask_client``, with uneven and empty chunks.
"""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.datasets import load_digits
from sklearn.exceptions import NotFittedError

from sknn_gpu import FlyHashTransformer, FlyNNClassifier
from sknn_gpu import _dask as sknn_dask
from sknn_gpu._dask import is_dask_collection

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

#: 1,797 digits rows in uneven blocks, two of them empty
ROWS = (500, 0, 700, 1, 0, 596)


@pytest.fixture(autouse=True)
def _blocks_as_given(monkeypatch):
    """The tests here are about the blocks as given (uneven, empty, one row): no merging.
    Merging small blocks has its own tests in test_dask_rows.py."""
    monkeypatch.setenv("SKNN_GPU_DASK_BLOCK_BYTES", "0")


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return X.astype(np.float32), y


def _dX(X, rows=ROWS):
    return da.from_array(X, chunks=(rows, -1))


def _hasher(**kw):
    params = dict(n_components=320, k=16, random_state=0, device="cpu")
    return FlyHashTransformer(**{**params, **kw})


# --------------------------------------------------------------------------- #
# FlyHash                                                                       #
# --------------------------------------------------------------------------- #
def test_flyhash_fit_reads_only_the_width(digits, monkeypatch):
    X, _ = digits
    dX = _dX(X)

    def no_compute(*a, **k):
        raise AssertionError("fit computed the Dask array")

    monkeypatch.setattr(type(dX), "compute", no_compute)
    monkeypatch.setattr(type(dX), "__array__", no_compute)
    lazy = _hasher().fit(dX)
    eager = _hasher().fit(X)
    assert lazy.n_features_in_ == X.shape[1]
    assert (lazy.components_ != eager.components_).nnz == 0  # the same projection
    assert np.array_equal(lazy._kernel_index, eager._kernel_index)
    assert (lazy.n_components_, lazy.k_) == (eager.n_components_, eager.k_)


@pytest.mark.parametrize("output", ["packed", "dense", "sparse"])
def test_flyhash_transform_equals_in_memory(dask_client, digits, output):
    X, _ = digits
    h = _hasher(output=output).fit(X)
    H = h.transform(_dX(X))
    assert is_dask_collection(H)
    expect = h.transform(X)
    got = dask_client.compute(H).result()  # hashed in the two worker processes
    if output == "sparse":
        assert sp.issparse(got) and got.shape == expect.shape
        assert (got != expect).nnz == 0
        assert H.chunks[0] == tuple(n for n in ROWS if n)  # empty blocks left out
    else:
        assert got.dtype == expect.dtype == np.uint8
        assert np.array_equal(got, expect)
        assert H.chunks[0] == ROWS
    assert H.dtype == expect.dtype


def test_flyhash_dask_refusals(digits):
    X, _ = digits
    h = _hasher()
    with pytest.raises(NotFittedError):
        h.transform(_dX(X))
    h.fit(X)
    with pytest.raises(ValueError, match=r"chunked along axis 1.*rechunk"):
        h.transform(da.from_array(X, chunks=(100, 16)))
    with pytest.raises(ValueError, match="X has 63 features, but FlyHashTransformer is expecting 64"):
        h.transform(_dX(X[:, :63]))
    with pytest.raises(ValueError, match="numeric"):
        h.fit(da.from_array(np.array([["a", "b"]])))
    with pytest.raises(ValueError, match="2D"):
        h.fit(da.from_array(X[0]))
    with pytest.raises(ValueError, match="0 feature"):
        h.fit(da.zeros((5, 0), chunks=(5, 0)))


def test_flyhash_bad_block_fails_with_the_in_memory_message(digits):
    X, _ = digits
    h = _hasher().fit(X)
    bad = X.copy()
    bad[1000, 3] = np.nan
    with pytest.raises(ValueError, match="NaN") as lazy_err:
        h.transform(_dX(bad)).compute()
    with pytest.raises(ValueError, match="NaN") as eager_err:
        h.transform(bad)
    assert str(lazy_err.value) == str(eager_err.value)


# --------------------------------------------------------------------------- #
# FlyNN: distributed fit                                                        #
# --------------------------------------------------------------------------- #
def _fly(**kw):
    params = dict(k=16, gamma=0.5, random_state=3, device="cpu")
    return FlyNNClassifier(**{**params, **kw})


@pytest.mark.parametrize("labels", ["ints", "strings"])
@pytest.mark.parametrize("y_kind", ["dask", "numpy"])
def test_flynn_fit_equals_in_memory(dask_client, digits, labels, y_kind):
    X, y = digits
    if labels == "strings":
        y = np.array(list("abcdefghij"))[y]
    dy = da.from_array(y, chunks=(ROWS,)) if y_kind == "dask" else y
    lazy = _fly().fit(_dX(X), dy)
    eager = _fly().fit(X, y)
    assert lazy.counts_.dtype == eager.counts_.dtype
    assert np.array_equal(lazy.counts_, eager.counts_)
    assert np.array_equal(lazy.classes_, eager.classes_)
    assert np.array_equal(lazy.predict(X), eager.predict(X))


def test_flynn_fit_with_differently_chunked_y(dask_client, digits):
    X, y = digits
    lazy = _fly().fit(_dX(X), da.from_array(y, chunks=300))  # y rechunked onto X's rows
    assert np.array_equal(lazy.counts_, _fly().fit(X, y).counts_)


def test_flynn_fit_sends_only_counts_to_the_client(dask_client, digits, monkeypatch):
    """What the computes return: the class labels, each feature's (min, max) (the encoding's
    fitted range, 2 x 64 numbers), the features' counts over the quantile bins, then in one
    pass one table (n_classes, m) with a row count and the winners and labels of the
    calibration rows of ``predict_proba`` (at most ``CALIBRATION_ROWS``, here every row of
    this small table)."""
    X, y = digits
    seen = []
    real = dask.compute

    def spy(*args, **kw):
        out = real(*args, **kw)
        seen.append(out)
        return out

    monkeypatch.setattr(dask, "compute", spy)
    est = _fly().fit(_dX(X), da.from_array(y, chunks=(ROWS,)))
    classes, (low, high), (table, n) = seen[0][0], seen[1][0], seen[3][0]
    calibration = [c for c in seen[3][1] if c is not None]  # with the counts, in the same pass
    assert np.array_equal(classes, np.arange(10))
    assert np.array_equal(low, X.min(axis=0)) and np.array_equal(high, X.max(axis=0))
    assert table.shape == est.counts_.shape and n == X.shape[0]
    # (input_range='quantile') the features' counts over the quantile bins: n_features x bins
    hist = seen[2][0]
    assert hist.shape == (X.shape[1], 4096) and np.array_equal(hist.sum(axis=1), [len(y)] * X.shape[1])
    # 1,797 rows: all are calibration rows; their winners travel (n x k int32), not their features
    winners = np.concatenate([c[0] for c in calibration])
    assert winners.shape == (len(y), est.k_) and winners.dtype == np.int32
    assert np.array_equal(np.concatenate([c[1] for c in calibration]), np.searchsorted(est.classes_, y))
    assert len(seen) == 4
    assert np.array_equal(est.calibration_loss_, _fly().fit(X, y).calibration_loss_)


def test_flynn_reduction_tree_is_exercised(dask_client, digits, monkeypatch):
    X, y = digits
    monkeypatch.setattr(sknn_dask, "SPLIT_EVERY", 2)
    rows = (100,) * 17 + (97,)  # 18 blocks: a tree of depth five
    lazy = _fly().fit(_dX(X, rows), da.from_array(y, chunks=(rows,)))
    assert np.array_equal(lazy.counts_, _fly().fit(X, y).counts_)


def test_flynn_partial_fit_on_dask_batches(dask_client, digits):
    X, y = digits
    classes = np.arange(10)
    lazy, eager = _fly(), _fly()
    for part in np.array_split(np.arange(len(y)), 3):
        lazy.partial_fit(_dX(X[part], (200, 0, len(part) - 200)), y[part], classes=classes)
        eager.partial_fit(X[part], y[part], classes=classes)
    assert np.array_equal(lazy.counts_, eager.counts_)
    # Dask and in-memory batches mix
    lazy.partial_fit(X[:50], y[:50])
    eager.partial_fit(_dX(X[:50], (25, 25)), y[:50])
    assert np.array_equal(lazy.counts_, eager.counts_)


def test_flynn_dask_fit_errors_leave_the_estimator_unfitted(dask_client, digits):
    X, y = digits
    bad = X.copy()
    bad[1500, 0] = np.inf
    est = _fly()
    with pytest.raises(ValueError, match="infinity") as lazy_err:
        est.fit(_dX(bad), y)
    with pytest.raises(NotFittedError):
        est.predict(X)
    with pytest.raises(ValueError, match="infinity") as eager_err:
        _fly().fit(bad, y)
    assert str(lazy_err.value) == str(eager_err.value)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        _fly().fit(_dX(X), y[:-1])
    with pytest.raises(TypeError, match="mixes string and numeric"):
        mixed = np.concatenate([y[:900].astype(object), np.array(list("abcdefghij"))[y[900:]]])
        _fly().fit(_dX(X), da.from_array(mixed, chunks=(ROWS,)))
    # partial_fit with a label outside classes: the counts of earlier batches stay
    est = _fly().partial_fit(X[:100], y[:100], classes=np.arange(10))
    before = est.counts_.copy()
    with pytest.raises(ValueError):
        est.partial_fit(_dX(X[:100], (50, 50)), y[:100] + 10)
    assert np.array_equal(est.counts_, before)


# --------------------------------------------------------------------------- #
# FlyNN: blockwise prediction and score                                         #
# --------------------------------------------------------------------------- #
def test_flynn_predict_and_score_on_dask(dask_client, digits):
    X, y = digits
    est = _fly().fit(X[:1200], y[:1200])
    dX = _dX(X)
    pred = dask_client.compute(est.predict(dX)).result()
    assert np.array_equal(pred, est.predict(X))
    proba = dask_client.compute(est.predict_proba(dX)).result()
    assert np.array_equal(proba, est.predict_proba(X))
    dy = da.from_array(y, chunks=(ROWS,))
    assert est.score(dX, dy) == est.score(X, y)
    assert est.score(dX, y) == est.score(X, y)
    w = np.random.default_rng(0).random(len(y))
    assert est.score(dX, y, sample_weight=w) == pytest.approx(est.score(X, y, sample_weight=w), rel=1e-12)


def test_flynn_clone_of_dask_fitted_model_pickles(dask_client, digits):
    import pickle

    X, y = digits
    est = _fly().fit(_dX(X), y)
    again = pickle.loads(pickle.dumps(est))
    assert np.array_equal(again.predict(X), est.predict(X))
    assert clone(est).get_params() == est.get_params()


@pytest.mark.cuda
def test_flynn_dask_on_cupy_chunks_equals_cpu(digits):
    """CuPy blocks (as on a LocalCUDACluster) under the synchronous scheduler."""
    import cupy as cp

    X, y = digits
    dX = da.from_array(cp.asarray(X), chunks=(ROWS, -1), asarray=False)
    with dask.config.set(scheduler="synchronous"):
        gpu = _fly(device="cuda").fit(dX, y)
        pred = gpu.predict(dX).compute()
        H = _hasher(output="packed", device="cuda").fit(dX)
        codes = H.transform(dX).compute()
        sparse_codes = _hasher(device="cuda").fit(dX).transform(dX).compute()  # cupyx CSR blocks
    cpu = _fly().fit(X, y)
    assert np.array_equal(cp.asnumpy(gpu.counts_), cpu.counts_)
    assert isinstance(pred, cp.ndarray) and np.array_equal(cp.asnumpy(pred), cpu.predict(X))
    assert isinstance(codes, cp.ndarray)
    assert np.array_equal(cp.asnumpy(codes), _hasher(output="packed").fit(X).transform(X))
    assert type(sparse_codes).__module__.startswith("cupyx")
    assert (sparse_codes.get() != _hasher().fit(X).transform(X)).nnz == 0
