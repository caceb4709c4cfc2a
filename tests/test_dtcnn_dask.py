"""DTCNNHalftoner.transform on Dask arrays: blockwise on two worker processes, same bits.

The dynamics runs in fixed-point integers and every image of a batch is halftoned on
its own ('async' mode), so a batch cut into blocks along its batch axis gives exactly
the bits of the in-memory call; uint8, float32 and float64 outputs are compared
exactly. The cluster is the session's two-process ``distributed.LocalCluster``
(``dask_client`` in conftest.py): each block runs on a pickled copy of the fitted
estimator in another interpreter.
"""

import numpy as np
import pytest
from scipy import ndimage
from sklearn.exceptions import NotFittedError

from sknn_gpu import DTCNNHalftoner
from sknn_gpu._dask import is_dask_collection

da = pytest.importorskip("dask.array")

#: uneven blocks along the batch axis, with empty ones (skipped, never an error)
CHUNKS = (3, 0, 1, 4, 0, 2)


@pytest.fixture(autouse=True)
def _blocks_as_given(monkeypatch):
    """The tests here are about the blocks as given (uneven, empty, one row): no merging.
    Merging small blocks has its own tests in test_dask_rows.py."""
    monkeypatch.setenv("SKNN_GPU_DASK_BLOCK_BYTES", "0")


def _batch(rng, n=10, shape=(23, 29)):
    imgs = [ndimage.gaussian_filter(rng.random(shape), 2.0) for _ in range(n)]
    return np.stack([(x - x.min()) / (x.max() - x.min()) for x in imgs])


@pytest.mark.parametrize(
    "params, dtype",
    [
        (dict(), np.float64),
        (dict(levels=4, init="bayer", radius=3), np.uint8),
        (dict(first_sweep_spacing=None, boundary="reflect"), np.float32),
    ],
    ids=["default-f64", "levels4-u8", "narrow-f32"],
)
def test_transform_of_a_batch_equals_in_memory_bit_for_bit(dask_client, params, dtype, rng):
    batch = _batch(rng)
    if dtype == np.uint8:
        batch = (batch * 255).round().astype(np.uint8)
    else:
        batch = batch.astype(dtype)
    ht = DTCNNHalftoner(device="cpu", **params).fit(batch[:1])
    expected = ht.transform(batch)
    lazy = ht.transform(da.from_array(batch, chunks=(CHUNKS, -1, -1)))
    assert is_dask_collection(lazy)
    assert lazy.shape == expected.shape and lazy.dtype == expected.dtype
    assert lazy.chunks[0] == CHUNKS and isinstance(lazy._meta, np.ndarray)
    got = dask_client.compute(lazy).result()
    assert isinstance(got, np.ndarray) and got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


def test_colour_batches_and_a_single_image_in_one_block(dask_client, rng):
    rgba = np.concatenate([np.stack([_batch(rng, 5)] * 3, axis=-1), np.full((5, 23, 29, 1), 0.5)], axis=-1)
    ht = DTCNNHalftoner(device="cpu").fit(rgba[0])
    lazy = ht.transform(da.from_array(rgba, chunks=((2, 3), -1, -1, -1)))
    got = dask_client.compute(lazy).result()
    np.testing.assert_array_equal(got, ht.transform(rgba))
    np.testing.assert_array_equal(got[..., 3], rgba[..., 3])  # alpha copied
    # a single image is halftoned whole, as one task
    img = rgba[1, ..., 0]
    one = ht.transform(da.from_array(img, chunks=-1))
    assert is_dask_collection(one) and one.numblocks == (1, 1)
    np.testing.assert_array_equal(dask_client.compute(one).result(), ht.transform(img))


@pytest.mark.parametrize(
    "shape, chunks, channel_axis, match",
    [
        ((6, 23, 29), (2, 10, -1), "auto", r"chunked along axis 1 .* X\.rechunk\(\{1: -1, 2: -1\}\)"),
        ((6, 23, 29), (2, -1, 15), "auto", r"chunked along axis 2 .* chunk the batch axis 0 only"),
        ((6, 23, 29, 3), (3, -1, -1, 1), -1, r"axis 3 .* X\.rechunk\(\{1: -1, 2: -1, 3: -1\}\)"),
        (
            (23, 29),
            (10, -1),
            "auto",
            r"1 image of 23 x 29 pixels, grey\) is chunked along axis 0 .*\(X\.rechunk\(-1\)",
        ),
        ((23, 29, 3), (-1, -1, 1), -1, r"chunked along axis 2 .* stack several images into a batch"),
        ((3, 5, 23, 29), (1, -1, -1, -1), 0, r"images along axis 0, but channel_axis=0 puts the channels"),
    ],
    ids=["rows", "columns", "channels", "single-rows", "single-channels", "channels-first-axis"],
)
def test_chunks_that_split_an_image_are_refused(shape, chunks, channel_axis, match, rng):
    fit_on = rng.random((12, 12, 3)) if channel_axis != "auto" else rng.random((12, 12))
    ht = DTCNNHalftoner(device="cpu", channel_axis=channel_axis).fit(fit_on)
    X = da.from_array(rng.random(shape), chunks=chunks)
    with pytest.raises(ValueError, match=match):
        ht.transform(X)


def test_fit_refuses_dask_and_transform_needs_a_fitted_model(rng):
    X = da.from_array(_batch(rng, 4), chunks=(2, -1, -1))
    for method in ("fit", "fit_transform"):
        with pytest.raises(TypeError, match=rf"DTCNNHalftoner\.{method} takes in-memory images .* transform"):
            getattr(DTCNNHalftoner(device="cpu"), method)(X)
    with pytest.raises(NotFittedError):
        DTCNNHalftoner(device="cpu").transform(X)


def test_random_init_draws_per_block(dask_client, rng):
    """init='random': every block draws its thresholds from random_state afresh (documented)."""
    batch = _batch(rng, 6)
    ht = DTCNNHalftoner(device="cpu", init="random", random_state=5).fit(batch[:1])
    got = dask_client.compute(ht.transform(da.from_array(batch, chunks=(3, -1, -1)))).result()
    np.testing.assert_array_equal(got[:3], ht.transform(batch[:3]))
    np.testing.assert_array_equal(got[3:], ht.transform(batch[3:]))
    assert not np.array_equal(got, ht.transform(batch))  # the in-memory batch draws once for all six


@pytest.mark.cuda
def test_cupy_blocks_give_cupy_results_and_the_cpu_bits(rng):
    import cupy as cp

    batch = (_batch(rng, 7) * 255).round().astype(np.uint8)
    ref = DTCNNHalftoner(device="cpu", levels=3).fit(batch[:1]).transform(batch)
    gpu = DTCNNHalftoner(device="cuda", levels=3).fit(batch[:1])
    X = da.from_array(batch, chunks=((3, 0, 4), -1, -1)).map_blocks(cp.asarray)
    lazy = gpu.transform(X)
    assert isinstance(lazy._meta, cp.ndarray)
    got = lazy.compute(scheduler="synchronous")
    assert isinstance(got, cp.ndarray)
    np.testing.assert_array_equal(got.get(), ref)
    host = gpu.set_params(output_type="numpy").transform(X).compute(scheduler="synchronous")
    assert isinstance(host, np.ndarray)
    np.testing.assert_array_equal(host, ref)
