"""The one Dask wrapper: lazy row-blockwise results, meta, empty blocks, feature-axis chunks."""

import numpy as np
import pytest

from sknn_gpu._dask import dask_rows, is_dask_collection

da = pytest.importorskip("dask.array")


class _Est:
    def __init__(self):
        self.calls = 0

    @dask_rows(lambda est, X: ((), np.int64))
    def labels(self, X):
        self.calls += 1
        return (np.asarray(X).sum(axis=1) > 0).astype(np.int64)

    @dask_rows(lambda est, X: ((3,), np.float64))
    def proba(self, X):
        return np.repeat(np.asarray(X)[:, :1], 3, axis=1) * np.array([1.0, 2.0, 3.0])

    @dask_rows(lambda est, X: (X.shape[1:], np.uint8), sample_axes=1)
    def images(self, X):
        return (np.asarray(X) > 0.5).astype(np.uint8)


def test_numpy_input_goes_straight_through():
    est = _Est()
    X = np.array([[1.0, -3.0], [2.0, 0.5]])
    assert est.labels(X).tolist() == [0, 1]
    assert not is_dask_collection(X)


def test_dask_in_dask_out_lazily_with_uneven_and_empty_chunks(rng):
    est = _Est()
    X = rng.standard_normal((23, 4))
    dX = da.from_array(X, chunks=((10, 0, 7, 6), (4,)))
    out = est.labels(dX)
    assert is_dask_collection(out) and est.calls == 0  # nothing computed yet
    assert isinstance(out._meta, np.ndarray) and out.dtype == np.int64
    np.testing.assert_array_equal(out.compute(), est.labels(X))
    P = est.proba(dX)
    assert P.shape == (23, 3)
    np.testing.assert_array_equal(P.compute(), est.proba(X))


def test_image_batches_chunked_along_the_batch_axis(rng):
    est = _Est()
    imgs = rng.random((5, 8, 9))
    out = est.images(da.from_array(imgs, chunks=(2, 8, 9)))
    assert out.shape == imgs.shape and out.chunks[0] == (2, 2, 1)
    np.testing.assert_array_equal(out.compute(), est.images(imgs))


def test_feature_axis_chunks_are_refused_with_the_fix():
    X = da.zeros((10, 6), chunks=(5, 3))
    with pytest.raises(ValueError, match=r"chunked along axis 1.*X.rechunk\(\{1: -1\}\)"):
        _Est().labels(X)


class _Typed(_Est):
    output_type = None

    @dask_rows(lambda est, X: ((), np.float64))
    def seen_config(self, X):
        from sknn_gpu import get_config

        # one value per row: 1.0 when the block ran under the client's output_type
        return np.full(len(X), get_config()["output_type"] == "numpy", dtype=np.float64)


def test_estimator_is_one_graph_key_shared_by_all_blocks(rng):
    cloudpickle = pytest.importorskip("cloudpickle")

    est = _Est()
    est.payload = np.zeros(1 << 17)  # 1 MiB of fitted state
    dX = da.from_array(rng.standard_normal((40, 3)), chunks=(5, 3))  # 8 blocks
    out = est.labels(dX)
    graph = dict(out.__dask_graph__())
    holders = [k for k, v in graph.items() if isinstance(getattr(v, "value", None), _Est)]
    assert len(holders) == 1  # the estimator sits in the graph once ...
    blocks = [v for k, v in graph.items() if k[0] == out.name]
    assert len(blocks) == 8
    for task in blocks:  # ... every block refers to it by key, none carries a copy
        assert holders[0] in task.dependencies
        assert len(cloudpickle.dumps(task)) < 20_000


def test_output_type_of_the_client_config_reaches_the_blocks(rng):
    from sknn_gpu import config_context

    est = _Typed()
    dX = da.from_array(rng.standard_normal((12, 3)), chunks=(4, 3))
    with config_context(output_type="numpy"):
        out = est.seen_config(dX)  # built under the config ...
    assert out.compute().tolist() == [1.0] * 12  # ... computed outside it, still honoured
    assert est.seen_config(dX).compute().tolist() == [0.0] * 12
    est.output_type = "numpy"  # the estimator's own parameter wins
    assert est.seen_config(dX).compute().tolist() == [1.0] * 12
