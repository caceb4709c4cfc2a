"""SparseNetRegressor on Dask arrays (issue 18): distributed prediction, training in memory.

Every block is predicted by a pickled copy of the fitted estimator in another process
(``conftest.dask_client``); each row's prediction equals the in-memory one to 1e-12.
"""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning, NotFittedError

from sknn_gpu import SparseNetRegressor
from sknn_gpu._dask import is_dask_collection

da = pytest.importorskip("dask.array")

ROWS = (90, 0, 131, 1, 0, 78)  # 300 rows, uneven, two empty blocks


@pytest.fixture(autouse=True)
def _blocks_as_given(monkeypatch):
    """The tests here are about the blocks as given (uneven, empty, one row): no merging.
    Merging small blocks has its own tests in test_dask_rows.py."""
    monkeypatch.setenv("SKNN_GPU_DASK_BLOCK_BYTES", "0")


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 6))
    Y = np.column_stack([X[:, 0] * X[:, 1], X[:, 2] - X[:, 3]])
    params = dict(hidden_layer_sizes=(16,), max_iter=20, random_state=0, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        one = SparseNetRegressor(**params).fit(X, Y[:, 0])
        two = SparseNetRegressor(topology="random", n_hidden=12, **params).fit(X, Y)
    return X, Y, one, two


@pytest.mark.parametrize("which", ["one output", "two outputs"])
def test_predict_and_score_on_dask_equal_in_memory(dask_client, fitted, which):
    X, Y, one, two = fitted
    est, y = (one, Y[:, 0]) if which == "one output" else (two, Y)
    dX = da.from_array(X, chunks=(ROWS, -1))
    lazy = est.predict(dX)
    assert is_dask_collection(lazy) and lazy.shape == y.shape and lazy.dtype == np.float64
    got = dask_client.compute(lazy).result()
    np.testing.assert_allclose(got, est.predict(X), rtol=1e-12, atol=0)
    assert est.score(dX, da.from_array(y, chunks=(ROWS,) + ((y.shape[1],) if y.ndim == 2 else ()))) == (
        pytest.approx(est.score(X, y), rel=1e-12)
    )


def test_dask_refusals(fitted):
    X, Y, one, _ = fitted
    with pytest.raises(ValueError, match=r"chunked along axis 1.*rechunk"):
        one.predict(da.from_array(X, chunks=(100, 3)))
    with pytest.raises(NotFittedError):
        SparseNetRegressor().predict(da.from_array(X, chunks=(100, -1)))
    with pytest.raises(TypeError, match="trains in memory"):
        SparseNetRegressor(max_iter=2).fit(da.from_array(X, chunks=(100, -1)), Y[:, 0])
    with pytest.raises(ValueError, match="X has 5 features"):
        one.predict(da.from_array(X[:, :5], chunks=(100, -1))).compute()
