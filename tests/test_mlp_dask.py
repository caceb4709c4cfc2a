"""GPUMLPClassifier on Dask arrays (issue 18): distributed prediction, results equal to in memory.

Prediction only: the MLP trains in memory (``fit`` refuses Dask input with the way out).
The cluster is a real ``distributed.LocalCluster`` with two worker processes, so every
block is predicted by a pickled copy of the fitted estimator in another process.
"""

import warnings

import numpy as np
import pytest
from sklearn.datasets import load_digits, make_multilabel_classification
from sklearn.exceptions import ConvergenceWarning, NotFittedError

from sknn_gpu import GPUMLPClassifier
from sknn_gpu._dask import is_dask_collection

da = pytest.importorskip("dask.array")

#: uneven row chunks with empty blocks (an empty block is skipped, never an error)
CHUNKS = (100, 0, 137, 63, 0, 150, 50)


@pytest.fixture(autouse=True)
def _blocks_as_given(monkeypatch):
    """The tests here are about the blocks as given (uneven, empty, one row): no merging.
    Merging small blocks has its own tests in test_dask_rows.py."""
    monkeypatch.setenv("SKNN_GPU_DASK_BLOCK_BYTES", "0")


@pytest.fixture(scope="module")
def models():
    """Fitted models of every output kind, and data to predict (500 rows)."""
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    Xm, Ym = make_multilabel_classification(n_samples=500, n_features=64, n_classes=4, random_state=0)
    params = dict(hidden_layer_sizes=(16,), max_iter=5, random_state=0, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fitted = {
            "multiclass": (GPUMLPClassifier(**params).fit(X, y), X[:500], y[:500]),
            "binary": (GPUMLPClassifier(**params).fit(X, y % 2), X[:500], y[:500] % 2),
            "strings": (GPUMLPClassifier(**params).fit(X, np.array(list("abcdefghij"))[y]), X[:500], None),
            "multilabel": (GPUMLPClassifier(**params).fit(Xm, Ym), Xm, Ym),
            "float32": (
                GPUMLPClassifier(**params).fit(X.astype(np.float32), y),
                X[:500].astype(np.float32),
                None,
            ),
        }
    return fitted


CASES = ["multiclass", "binary", "strings", "multilabel", "float32"]


@pytest.mark.parametrize("case", CASES)
def test_predict_methods_on_dask_equal_in_memory(dask_client, models, case):
    clf, X, _ = models[case]
    dX = da.from_array(X, chunks=(CHUNKS, -1))
    for method in ("predict", "predict_proba", "predict_log_proba"):
        out = getattr(clf, method)(dX)
        assert is_dask_collection(out), method  # lazy: a Dask array comes back
        ref = getattr(clf, method)(X)
        assert out.shape == ref.shape and out.dtype == ref.dtype, method
        assert isinstance(out._meta, np.ndarray)
        assert out.chunks[0] == CHUNKS
        got = dask_client.compute(out).result()  # on the two worker processes
        assert isinstance(got, np.ndarray) and got.dtype == ref.dtype
        if method == "predict":
            np.testing.assert_array_equal(got, ref)  # labels: bit for bit
        else:  # float64 to 1e-12; float32 to a few ulps (BLAS blocks rows differently per chunk)
            tol = 1e-12 if ref.dtype == np.float64 else 4 * np.finfo(np.float32).eps
            np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("case", ["multiclass", "multilabel"])
def test_score_on_dask_equals_in_memory(dask_client, models, case):
    clf, X, y = models[case]
    dX = da.from_array(X, chunks=(CHUNKS, -1))
    dy = da.from_array(y, chunks=(CHUNKS,) + ((y.shape[1],) if y.ndim == 2 else ()))
    w = np.linspace(0.1, 2.0, X.shape[0])
    expected = clf.score(X, y)
    for args in ((dX, dy), (dX, y), (X, dy)):
        got = clf.score(*args)
        assert isinstance(got, float) and got == expected
    weighted = clf.score(dX, dy, sample_weight=da.from_array(w, chunks=(CHUNKS,)))
    assert weighted == clf.score(X, y, sample_weight=w)


def test_single_empty_and_one_row_blocks(dask_client, models):
    clf, X, _ = models["multiclass"]
    one = da.from_array(X[:1], chunks=(1, -1))
    np.testing.assert_array_equal(clf.predict(one).compute(), clf.predict(X[:1]))
    empty = da.from_array(X[:0], chunks=((0,), (64,)))
    got = clf.predict_proba(empty).compute()
    assert got.shape == (0, 10) and got.dtype == np.float64


def test_feature_axis_chunks_are_refused(models):
    clf, X, _ = models["multiclass"]
    dX = da.from_array(X, chunks=(100, 32))
    with pytest.raises(
        ValueError, match=r"GPUMLPClassifier.predict: .*chunked along axis 1.*rechunk\(\{1: -1\}\)"
    ):
        clf.predict(dX)


def test_training_on_dask_is_refused_with_the_way_out(models):
    _, X, _ = models["multiclass"]
    y = np.arange(X.shape[0]) % 3
    dX = da.from_array(X, chunks=(100, -1))
    est = GPUMLPClassifier((4,), max_iter=2, device="cpu")
    with pytest.raises(TypeError, match=r"distributed prediction only.*X\.compute\(\)"):
        est.fit(dX, y)
    with pytest.raises(TypeError, match="distributed prediction only"):
        est.partial_fit(dX, y, classes=np.arange(3))
    assert not hasattr(est, "coefs_")
    with pytest.raises(TypeError, match="sample_weight must be in memory"):
        est.fit(X, y, sample_weight=da.ones(X.shape[0], chunks=100))


def test_unfitted_model_on_dask_raises_not_fitted():
    dX = da.zeros((10, 4), chunks=(5, -1))
    for method in ("predict", "predict_proba", "predict_log_proba"):
        with pytest.raises(NotFittedError):
            getattr(GPUMLPClassifier(), method)(dX)


@pytest.mark.cuda
def test_cupy_chunks_give_cupy_blocks(models):
    """A GPU model on CuPy chunks (as on a dask_cuda cluster): CuPy meta, results equal in memory."""
    import cupy

    _, X, _ = models["multiclass"]
    y = load_digits(return_X_y=True)[1][:500]
    clf = GPUMLPClassifier((16,), max_iter=5, random_state=0, device="cuda").fit(X, y)
    dX = da.from_array(X, chunks=(CHUNKS, -1)).map_blocks(cupy.asarray)
    for method in ("predict", "predict_proba"):
        out = getattr(clf, method)(dX)
        assert isinstance(out._meta, cupy.ndarray), method
        got = out.compute(scheduler="synchronous")
        ref = getattr(clf, method)(cupy.asarray(X))
        assert isinstance(got, cupy.ndarray)
        np.testing.assert_allclose(got.get(), ref.get(), rtol=1e-12, atol=1e-12)
    assert clf.score(dX, y) == clf.score(X, y)
