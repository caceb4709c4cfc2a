"""The one Dask wrapper: lazy row-blockwise results, meta, empty blocks, feature-axis chunks;
small row blocks merged into blocks that pay for a task, with results unchanged."""

import warnings

import numpy as np
import pytest

from sknn_gpu import _dask as sknn_dask
from sknn_gpu._dask import BLOCK_BYTES_ENV, dask_rows, is_dask_collection, merged_row_chunks

da = pytest.importorskip("dask.array")


@pytest.fixture(autouse=True)
def _blocks_as_given(monkeypatch):
    """The wrapper's own tests see the blocks as given; the merge tests set a target."""
    monkeypatch.setenv(BLOCK_BYTES_ENV, "0")


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


# ----------------------------------------------------------------------------------
# Small row blocks merged (adjacent, in order) into blocks of about block_bytes()
# ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "chunks, row_bytes, target, parallel",
    [
        ((50,) * 40, 1000, 250_000, 1),
        ((50,) * 40, 1000, 250_000, 2),
        ((50,) * 40, 1000, 10**9, 3),
        ((10, 0, 7, 6, 0), 8, 1 << 20, 1),
        ((10, 0, 7, 6, 0), 8, 1 << 20, 2),
        ((1,) * 7 + (593,), 48, 1 << 20, 2),
        ((300, 5, 5, 5, 300), 100, 20_000, 1),
    ],
)
def test_merged_chunks_keep_rows_and_order_and_only_merge(chunks, row_bytes, target, parallel):
    out = merged_row_chunks(chunks, row_bytes, target, parallel)
    assert sum(out) == sum(chunks) and 0 < len(out) < sum(1 for c in chunks if c)
    edges_in = set(np.cumsum(chunks).tolist())
    assert set(np.cumsum(out).tolist()) <= edges_in  # a merged block is whole given blocks
    assert all(n > 0 for n in out)


def test_merged_chunks_share_the_work_evenly_over_the_task_slots():
    out = merged_row_chunks((50,) * 40, 1000, 250_000, 3)  # 2,000 rows of 1 kB: 8 blocks wanted
    assert len(out) == 9 and max(out) - min(out) <= 50  # rounded up to 3 slots x 3, near equal


@pytest.mark.parametrize(
    "chunks, row_bytes, target",
    [((500,) * 4, 1000, 250_000), ((7,), 8, 1 << 30), ((3, 3), 8, 0)],
)
def test_blocks_large_enough_are_kept(chunks, row_bytes, target):
    assert merged_row_chunks(chunks, row_bytes, target, 1) == chunks


def test_block_target_follows_the_environment(monkeypatch):
    monkeypatch.delenv(BLOCK_BYTES_ENV)
    assert sknn_dask.block_bytes("cuda") == sknn_dask.BLOCK_BYTES["cuda"]
    assert sknn_dask.block_bytes("cpu") == sknn_dask.BLOCK_BYTES["cpu"] < sknn_dask.BLOCK_BYTES["cuda"]
    monkeypatch.setenv(BLOCK_BYTES_ENV, "1e6")
    assert sknn_dask.block_bytes("cuda") == sknn_dask.block_bytes("cpu") == 1_000_000
    monkeypatch.setenv(BLOCK_BYTES_ENV, "off")
    assert sknn_dask.block_bytes("cpu") == 0
    monkeypatch.setenv(BLOCK_BYTES_ENV, "lots")
    with pytest.raises(ValueError, match="SKNN_GPU_DASK_BLOCK_BYTES='lots'.*or 0 to keep"):
        sknn_dask.block_bytes("cpu")


def _tasks_of(out):
    """The block tasks of the wrapper's layer (the method's calls) in ``out``'s graph."""
    return [k for k in dict(out.__dask_graph__()) if isinstance(k, tuple) and k[0] == out.name]


def test_tiny_blocks_run_as_fewer_tasks_with_the_same_results(rng, monkeypatch):
    monkeypatch.setenv(BLOCK_BYTES_ENV, str(64 * 4 * 8))  # 64 rows of 4 float64 per block
    monkeypatch.setattr(sknn_dask, "_parallel_slots", lambda client=None: 1)
    X = rng.standard_normal((400, 4))
    dX = da.from_array(X, chunks=((7, 0) * 50 + (50,), (4,)))  # 101 blocks, 50 of them empty
    est = _Est()
    out = est.labels(dX)
    assert len(_tasks_of(out)) == out.numblocks[0] == 7 < dX.numblocks[0]
    np.testing.assert_array_equal(out.compute(), est.labels(X))
    P = est.proba(dX)
    assert P.numblocks[0] == 7
    np.testing.assert_array_equal(P.compute(), est.proba(X))
    imgs = rng.random((30, 8, 9))  # image batches merge along the batch axis
    out = est.images(da.from_array(imgs, chunks=(1, 8, 9)))
    assert out.numblocks[0] < 30
    np.testing.assert_array_equal(out.compute(), est.images(imgs))


def test_unknown_block_sizes_warn_once_and_still_compute(rng, monkeypatch):
    monkeypatch.setenv(BLOCK_BYTES_ENV, "1000000")
    monkeypatch.setattr(sknn_dask, "_warned", set())
    X = rng.standard_normal((30, 3))
    dX = da.from_array(X, chunks=(5, 3))
    dX = dX[dX[:, 0] > -10]  # a boolean mask: the row block sizes are unknown (nan)
    est = _Est()
    with pytest.warns(UserWarning, match=r"unknown \(nan\).*compute_chunk_sizes"):
        out = est.labels(dX)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est.labels(dX)  # once per process
    np.testing.assert_array_equal(out.compute(), est.labels(X))


def test_cluster_slots_set_the_number_of_merged_blocks(dask_client, rng, monkeypatch):
    monkeypatch.setenv(BLOCK_BYTES_ENV, str(1 << 30))
    assert sknn_dask._parallel_slots() == sum(dask_client.nthreads().values()) == 2
    X = rng.standard_normal((90, 3))
    out = _Est().proba(da.from_array(X, chunks=(3, 3)))  # 30 tiny blocks: one per worker
    assert out.numblocks[0] == 2
    np.testing.assert_array_equal(out.compute(), _Est().proba(X))


# ----------------------------------------------------------------------------------
# Every estimator's Dask path merges many tiny blocks, results as in memory
# ----------------------------------------------------------------------------------
def _count_parts(monkeypatch, module):
    """Record how many block results each reduction of ``module`` combines."""
    seen = []
    real = module.tree_reduce

    def spy(parts, combine):
        seen.append(len(parts))
        return real(parts, combine)

    monkeypatch.setattr(module, "tree_reduce", spy)
    return seen


def test_flyhash_and_flynn_merge_tiny_blocks(dask_client, monkeypatch):
    from sklearn.datasets import load_digits

    from sknn_gpu import FlyHashTransformer, FlyNNClassifier
    from sknn_gpu.fly import _fly_dask

    monkeypatch.setenv(BLOCK_BYTES_ENV, "20000")  # 78 rows of 64 float32 per block
    X, y = load_digits(return_X_y=True)
    X = X.astype(np.float32)
    dX = da.from_array(X, chunks=(7, -1))  # 257 blocks of 7 rows
    dy = da.from_array(y, chunks=(7,))
    h = FlyHashTransformer(n_components=320, k=16, output="packed", random_state=0, device="cpu").fit(X)
    H = h.transform(dX)
    assert len(_tasks_of(H)) == H.numblocks[0] == 24  # 23 blocks rounded up to 2 worker slots
    np.testing.assert_array_equal(dask_client.compute(H).result(), h.transform(X))

    seen = _count_parts(monkeypatch, _fly_dask)
    params = dict(k=16, gamma=0.5, random_state=3, device="cpu")
    lazy = FlyNNClassifier(**params).fit(dX, dy)
    eager = FlyNNClassifier(**params).fit(X, y)
    assert seen and max(seen) == 24  # classes, range and counts: 24 block results each
    np.testing.assert_array_equal(lazy.counts_, eager.counts_)
    pred = eager.predict(dX)
    assert pred.numblocks[0] == 24
    np.testing.assert_array_equal(pred.compute(), eager.predict(X))
    assert eager.score(dX, dy) == eager.score(X, y)


def test_gbnn_merges_tiny_blocks(dask_client, monkeypatch):
    from sknn_gpu.memory import GBNNMemory, _gbnn_dask

    monkeypatch.setenv(BLOCK_BYTES_ENV, "20000")  # 416 messages of 6 int64 per block
    rng = np.random.default_rng(7)
    msgs = rng.integers(0, 60, size=(400, 6))
    probes = msgs.copy()
    probes[rng.random(msgs.shape).argsort(axis=1) < 3] = -1
    seen = _count_parts(monkeypatch, _gbnn_dask)
    dist = GBNNMemory(device="cpu", random_state=3).fit(da.from_array(msgs, chunks=(5, -1)))  # 80 blocks
    ref = GBNNMemory(device="cpu", random_state=3).fit(msgs)
    assert seen == [2, 2]  # the largest symbol, then the store: one block per worker
    np.testing.assert_array_equal(dist.W_, ref.W_)
    assert (dist.n_messages_seen_, dist.density_) == (ref.n_messages_seen_, ref.density_)
    dP = da.from_array(probes, chunks=(5, -1))
    pred = ref.predict(dP)
    assert pred.numblocks[0] == 2
    np.testing.assert_array_equal(pred.compute(), ref.predict(probes))
    assert ref.score(dP, msgs) == ref.score(probes, msgs)


def test_networks_and_halftones_merge_tiny_blocks(dask_client, monkeypatch, rng):
    from sknn_gpu import DTCNNHalftoner, GPUMLPClassifier, SparseNetRegressor

    monkeypatch.setenv(BLOCK_BYTES_ENV, "4000")
    X = rng.standard_normal((200, 5))
    y = (X[:, 0] > 0).astype(int)
    dX = da.from_array(X, chunks=(4, -1))  # 50 blocks; 100 rows of 5 float64 per merged block
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a few iterations: convergence warnings
        mlp = GPUMLPClassifier(hidden_layer_sizes=(8,), max_iter=5, random_state=0, device="cpu").fit(X, y)
        net = SparseNetRegressor(hidden_layer_sizes=(8,), max_iter=5, random_state=0, device="cpu")
        net.fit(X, X[:, 1])
    for est, method in ((mlp, "predict_proba"), (net, "predict")):
        out = getattr(est, method)(dX)
        assert out.numblocks[0] == 2
        np.testing.assert_array_equal(out.compute(), getattr(est, method)(X))
    imgs = rng.random((20, 10, 10))
    dimgs = da.from_array(imgs, chunks=(1, -1, -1))  # 800 bytes per image: 5 per merged block
    ht = DTCNNHalftoner(device="cpu").fit(imgs[:1])
    out = ht.transform(dimgs)
    assert out.numblocks[0] == 4
    np.testing.assert_array_equal(out.compute(), ht.transform(imgs))
    drawn = DTCNNHalftoner(device="cpu", init="random", random_state=1).fit(imgs[:1])
    assert drawn.transform(dimgs).numblocks[0] == 20  # draws per block: the blocks are kept


def _holders(parts, cls):
    """Graph keys of ``parts`` (delayed objects) whose value is a ``cls`` instance, and the
    tasks that carry one inside instead of referring to it."""
    graph = {}
    for p in parts:
        graph.update(dict(p.__dask_graph__()))
    keys = [k for k, v in graph.items() if isinstance(getattr(v, "value", v), cls)]
    return keys, graph


def test_fits_and_scores_ship_the_estimator_once(dask_client, monkeypatch):
    """FlyNN's range, counts and score and GBNN's largest symbol and store: every block's task
    refers to one graph key holding the estimator (or its model-free shell)."""
    cloudpickle = pytest.importorskip("cloudpickle")
    from sklearn.datasets import load_digits

    from sknn_gpu import FlyNNClassifier
    from sknn_gpu.fly import _fly_dask

    X, y = load_digits(return_X_y=True)
    dX, dy = da.from_array(X, chunks=(200, -1)), da.from_array(y, chunks=(200,))
    seen = []
    real = _fly_dask.tree_reduce
    monkeypatch.setattr(_fly_dask, "tree_reduce", lambda parts, f: seen.append(parts) or real(parts, f))
    est = FlyNNClassifier(k=16, random_state=3, device="cpu").fit(dX, dy)
    est.score(dX, dy)
    with_model = [parts for parts in seen if _holders(parts, FlyNNClassifier)[0]]
    assert len(with_model) >= 2  # the counts and the score (and the input range, if encoded)
    for parts in with_model:
        keys, graph = _holders(parts, FlyNNClassifier)
        assert len(keys) == 1 and len(parts) == 9  # the blocks as given
        for p in parts:
            tasks = [p.key]
            if keys[0] not in graph[p.key].dependencies:  # an item of a task with two results
                tasks = list(graph[p.key].dependencies)  # (FlyNN's counts and calibration rows)
            assert all(keys[0] in graph[t].dependencies for t in tasks)
            for t in tasks:
                assert len(cloudpickle.dumps(graph[t])) < 5_000  # a reference, not a copy


# ----------------------------------------------------------------------------------
# Merging never moves data between workers
# ----------------------------------------------------------------------------------
def _persist_on(client, X, place):
    """``X`` persisted with row block ``i`` on worker ``place(i, n_workers)``."""
    from distributed import wait

    workers = sorted(client.nthreads())
    parts = [
        client.persist(X.blocks[i], workers=[workers[place(i, len(workers))]]) for i in range(X.numblocks[0])
    ]
    wait(parts)
    return da.concatenate(parts), workers


def _received(client):
    """The keys the workers have received from each other."""

    def keys(dask_worker):
        return [str(k) for t in dask_worker.transfer_incoming_log for k in t["keys"]]

    return {k for got in client.run(keys).values() for k in got}


def test_blocks_in_memory_merge_only_with_neighbours_on_their_worker(dask_client, rng, monkeypatch):
    distributed = pytest.importorskip("distributed")
    monkeypatch.setenv(BLOCK_BYTES_ENV, str(1 << 30))
    X = rng.standard_normal((160, 3))
    est = _Est()
    halves, _ = _persist_on(
        dask_client, da.from_array(X, chunks=(10, 3), name=False), lambda i, n: i * n // 16
    )
    out = est.proba(halves)
    assert out.chunks[0] == (80, 80)  # one block per worker, none across them
    before = _received(dask_client)
    res = out.persist()  # the results stay where they were computed
    distributed.wait(res)
    moved = _received(dask_client) - before
    assert moved and all("_Est" in k for k in moved)  # the estimator reached both; no row moved
    np.testing.assert_array_equal(res.compute(), est.proba(X))
    alternating, _ = _persist_on(
        dask_client, da.from_array(X, chunks=(10, 3), name=False), lambda i, n: i % n
    )
    out = est.proba(alternating)
    assert out.chunks[0] == (10,) * 16  # every neighbour is on the other worker: kept as given
    np.testing.assert_array_equal(out.compute(), est.proba(X))


def test_blocks_not_computed_merge_only_when_small(dask_client, rng, monkeypatch):
    monkeypatch.setenv(BLOCK_BYTES_ENV, str(1 << 30))
    X = rng.standard_normal((160, 3))
    dX = da.from_array(X, chunks=(10, 3))  # 240 bytes per block
    assert _Est().proba(dX).numblocks[0] == 2  # small: merged, one block per worker slot
    monkeypatch.setattr(sknn_dask, "LAZY_MERGE_BYTES", 200)
    out = _Est().proba(dX)
    assert out.chunks[0] == (10,) * 16  # larger than moving is worth: kept as given
    np.testing.assert_array_equal(out.compute(), _Est().proba(X))


@pytest.mark.cuda
def test_cupy_blocks_merge_to_the_gpu_target(dask_client, monkeypatch):
    """CuPy blocks (as on a dask_cuda cluster) are merged with the GPU's target, concatenated on
    the device, and give the in-memory GPU results."""
    import cupy as cp
    from sklearn.datasets import load_digits

    from sknn_gpu import FlyHashTransformer, GBNNMemory

    monkeypatch.delenv(BLOCK_BYTES_ENV)
    monkeypatch.setattr(sknn_dask, "BLOCK_BYTES", {"cuda": 64 * 256, "cpu": 1})  # 64 rows per GPU block
    X = load_digits().data.astype(np.float32)
    dX = da.from_array(X, chunks=(8, -1)).map_blocks(cp.asarray)
    h = FlyHashTransformer(n_components=320, k=16, output="packed", random_state=0, device="cuda").fit(X)
    H = h.transform(dX)
    assert isinstance(H._meta, cp.ndarray) and H.numblocks[0] < dX.numblocks[0]
    np.testing.assert_array_equal(cp.asnumpy(H.compute()), cp.asnumpy(h.transform(cp.asarray(X))))
    rng = np.random.default_rng(3)
    msgs = rng.integers(0, 60, size=(400, 6))
    mem = GBNNMemory(device="cuda", random_state=0).fit(
        da.from_array(msgs, chunks=(5, -1)).map_blocks(cp.asarray)
    )
    ref = GBNNMemory(device="cuda", random_state=0).fit(cp.asarray(msgs))
    np.testing.assert_array_equal(cp.asnumpy(mem.W_), cp.asnumpy(ref.W_))
