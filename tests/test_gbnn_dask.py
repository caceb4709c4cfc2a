"""GBNNMemory on Dask arrays: distributed fit (a packed W per block, OR-reduced), blockwise
predict/retrieve/score; equal to the in-memory results bit for bit, uneven and empty chunks
included, on a two-process LocalCluster."""

import logging

import numpy as np
import pytest

from sknn_gpu import _dask as sknn_dask
from sknn_gpu.memory import GBNNMemory

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

UNEVEN = (130, 0, 41, 229, 0, 200)  # 600 rows: uneven blocks and two empty ones


@pytest.fixture(autouse=True)
def _blocks_as_given(monkeypatch):
    """The tests here are about the blocks as given (uneven, empty, one row): no merging.
    Merging small blocks has its own tests in test_dask_rows.py."""
    monkeypatch.setenv("SKNN_GPU_DASK_BLOCK_BYTES", "0")


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    C, L = 6, 40
    msgs = rng.integers(0, L, size=(600, C))
    probes = msgs.copy()
    erased = rng.random(msgs.shape).argsort(axis=1) < 3  # three erased symbols per probe
    probes[erased] = -1
    return msgs, probes


def _dask(X, rows=UNEVEN):
    return da.from_array(X, chunks=(rows, (X.shape[1],)))


def _same_memory(a, b):
    assert a.W_.dtype == b.W_.dtype == np.uint32
    np.testing.assert_array_equal(a.W_, b.W_)
    for attr in (
        "n_clusters_",
        "cluster_size_",
        "n_features_in_",
        "n_messages_seen_",
        "tie_seed_",
        "density_",
    ):
        assert getattr(a, attr) == getattr(b, attr), attr


@pytest.mark.parametrize("cluster_size", [None, 50])
@pytest.mark.parametrize("rows", [UNEVEN, (600,), (1,) * 7 + (593,)])
def test_dask_fit_equals_one_in_memory_fit(dask_client, data, cluster_size, rows):
    msgs, _ = data
    params = dict(device="cpu", random_state=3, cluster_size=cluster_size)
    ref = GBNNMemory(**params).fit(msgs)
    dist = GBNNMemory(**params).fit(_dask(msgs, rows))
    _same_memory(dist, ref)
    assert dist.cluster_size_ == (40 if cluster_size is None else 50)


def test_dask_fit_moves_only_w_to_the_client(dask_client, data, monkeypatch):
    """The messages are never materialised on the client; what the computes return is
    one largest symbol per tree root (cluster_size inferred) and one W with a count."""
    import dask

    msgs, _ = data
    dX = _dask(msgs)
    returned = []
    compute = dask.compute

    def spy(*args, **kwargs):
        out = compute(*args, **kwargs)
        returned.append(out)
        return out

    def refuse(*args, **kwargs):
        raise AssertionError("the Dask messages were converted to an in-memory array on the client")

    monkeypatch.setattr(dask, "compute", spy)
    monkeypatch.setattr(type(dX), "__array__", refuse)
    mem = GBNNMemory(device="cpu", random_state=0).fit(dX)
    assert len(returned) == 2
    (mx,), ((W, n),) = returned
    assert isinstance(mx, int | np.integer) and mx == msgs.max()
    assert isinstance(W, np.ndarray) and W.shape == mem.W_.shape and n == 600
    monkeypatch.undo()
    _same_memory(mem, GBNNMemory(device="cpu", random_state=0).fit(msgs))


def test_dask_fit_ships_the_shell_once_and_merges_tiny_blocks(dask_client, data, monkeypatch):
    """A partial W per block costs a whole memory (C*L x C*words) to build, send and OR, however
    few messages the block holds: tiny blocks are merged first (one per worker here), and the
    parameters-only shell is one graph key shared by every block's task."""
    from sknn_gpu.memory import _gbnn_dask

    msgs, _ = data
    monkeypatch.setenv("SKNN_GPU_DASK_BLOCK_BYTES", str(1 << 20))  # all 600 messages fit in one
    trees = []
    real = _gbnn_dask.tree_reduce

    def spy(parts, combine):
        trees.append(parts)
        return real(parts, combine)

    monkeypatch.setattr(_gbnn_dask, "tree_reduce", spy)
    dist = GBNNMemory(device="cpu", random_state=2).fit(_dask(msgs, (3,) * 200))
    _same_memory(dist, GBNNMemory(device="cpu", random_state=2).fit(msgs))
    assert [len(p) for p in trees] == [2, 2]  # largest symbol, store: 200 blocks became 2
    for parts in trees:
        graph = {}
        for p in parts:
            graph.update(dict(p.__dask_graph__()))
        shells = [k for k, v in graph.items() if isinstance(getattr(v, "value", v), GBNNMemory)]
        assert len(shells) == 1
        assert all(shells[0] in graph[p.key].dependencies for p in parts)


def test_dask_partial_fit_ors_into_the_memory(dask_client, data):
    msgs, _ = data
    ref = GBNNMemory(device="cpu", random_state=1, cluster_size=40).fit(msgs)
    mem = GBNNMemory(device="cpu", random_state=1, cluster_size=40).partial_fit(msgs[:250])
    W_before = mem.W_.copy()
    mem.partial_fit(_dask(msgs[250:], (100, 0, 250)))
    _same_memory(mem, ref)
    assert np.all((mem.W_ & W_before) == W_before)  # OR-ed in, nothing lost
    # the first partial_fit from Dask sets the memory up like fit
    first = GBNNMemory(device="cpu", random_state=1, cluster_size=40).partial_fit(_dask(msgs))
    _same_memory(first, ref)
    # storing the same messages again changes nothing but the count (idempotent)
    again = first.partial_fit(_dask(msgs[:100], (60, 40)))
    np.testing.assert_array_equal(again.W_, ref.W_)
    assert again.n_messages_seen_ == 700


def test_dask_predict_retrieve_score_equal_in_memory(dask_client, data):
    msgs, probes = data
    mem = GBNNMemory(device="cpu", random_state=2).fit(msgs)
    dP = _dask(probes)
    pred = mem.predict(dP)
    assert isinstance(pred, da.Array) and isinstance(pred._meta, np.ndarray)
    assert pred.dtype == np.int32 and pred.chunks[0] == UNEVEN
    np.testing.assert_array_equal(pred.compute(), mem.predict(probes))
    res, ref = mem.retrieve(dP, decoding="serial"), mem.retrieve(probes)
    for field in ("messages", "n_candidates", "converged", "n_iter"):
        got = getattr(res, field)
        assert isinstance(got, da.Array), field
        out = got.compute()
        assert out.dtype == getattr(ref, field).dtype, field
        np.testing.assert_array_equal(out, getattr(ref, field), err_msg=field)
    np.testing.assert_array_equal(res.ambiguous.compute(), ref.ambiguous)
    np.testing.assert_array_equal(np.asarray(res.converged_per_iter), ref.converged_per_iter)
    expected = mem.score(probes, msgs)
    assert 0.2 < expected < 1.0  # some probes fail: the count is tested, not a constant
    assert mem.score(dP, msgs) == expected
    assert mem.score(dP, da.from_array(msgs, chunks=(250, 6))) == expected  # other chunks: rechunked


def test_dask_input_refusals(dask_client, data):
    msgs, probes = data
    mem = GBNNMemory(device="cpu", random_state=0).fit(msgs)
    W = mem.W_.copy()
    with pytest.raises(ValueError, match=r"chunked along axis 1.*rechunk"):
        mem.predict(da.from_array(probes, chunks=(100, 3)))
    with pytest.raises(ValueError, match=r"chunked along axis 1.*rechunk"):
        GBNNMemory(device="cpu").fit(da.from_array(msgs, chunks=(100, 3)))
    with pytest.raises(ValueError, match=r"X has 5 clusters .* n_clusters_=6"):
        mem.predict(_dask(probes[:, :5], (300, 300)))
    with pytest.raises(ValueError, match=r"X has 5 clusters .* n_clusters_=6"):
        mem.partial_fit(_dask(msgs[:, :5], (300, 300)))
    with pytest.raises(ValueError, match="0 sample"):
        GBNNMemory(device="cpu").fit(da.zeros((0, 6), chunks=(0, 6), dtype=np.int64))
    with pytest.raises(ValueError, match="integer symbols"):
        GBNNMemory(device="cpu").fit(da.from_array(np.array([["a", "b"]]), chunks=(1, 2)))
    with pytest.raises(ValueError, match=r"y has shape \(599, 6\)"):
        mem.score(_dask(probes), msgs[:-1])
    # a bad block fails on its worker with the in-memory message; the memory is unchanged
    bad = msgs.copy()
    bad[450, 2] = -4
    with pytest.raises(ValueError, match=r"Negative values in data passed as X \(-4\)"):
        mem.partial_fit(_dask(bad))
    big = msgs.copy()
    big[5, 0] = 40
    with pytest.raises(ValueError, match="X has a symbol 40, but cluster_size_ is 40"):
        mem.partial_fit(_dask(big))
    frac = msgs.astype(float)
    frac[300, 1] = 2.5
    with pytest.raises(ValueError, match="non-integer values such as 2.5"):
        GBNNMemory(device="cpu").fit(_dask(frac))
    np.testing.assert_array_equal(mem.W_, W)
    assert mem.n_messages_seen_ == 600


def test_dask_fit_reports_one_summary_line(dask_client, data, caplog):
    msgs, _ = data
    with caplog.at_level(logging.INFO, logger="sknn_gpu.memory"):
        GBNNMemory(device="cpu", random_state=0, verbose=1).fit(_dask(msgs))
    lines = [r.getMessage() for r in caplog.records if r.name == "sknn_gpu.memory"]
    assert len(lines) == 1
    assert lines[0].startswith("fit (dask): 4 blocks in ") and "messages=600" in lines[0]


def test_reduction_tree_is_exercised(dask_client, data, monkeypatch):
    """More blocks than the fan-in: the OR runs in two levels and still equals one fit."""
    msgs, _ = data
    monkeypatch.setattr(sknn_dask, "SPLIT_EVERY", 2)
    rows = (37,) * 16 + (8,)
    dist = GBNNMemory(device="cpu", random_state=5).fit(_dask(msgs, rows))
    _same_memory(dist, GBNNMemory(device="cpu", random_state=5).fit(msgs))


@pytest.mark.cuda
def test_dask_on_cupy_chunks_equals_one_gpu_fit(dask_client, data):
    import cupy as cp

    msgs, probes = data
    ref = GBNNMemory(device="cuda", random_state=4).fit(cp.asarray(msgs))
    dX = _dask(msgs).map_blocks(cp.asarray)
    dist = GBNNMemory(device="cuda", random_state=4).fit(dX)
    assert isinstance(dist.W_, cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(dist.W_), cp.asnumpy(ref.W_))
    assert dist.density_ == ref.density_ and dist.tie_seed_ == ref.tie_seed_
    pred = dist.predict(_dask(probes).map_blocks(cp.asarray))
    assert isinstance(pred._meta, cp.ndarray)
    out = pred.compute()
    assert isinstance(out, cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(out), cp.asnumpy(ref.predict(cp.asarray(probes))))
    assert dist.score(_dask(probes), msgs) == ref.score(probes, msgs)
