"""``sknn_gpu.io``: .npy files read onto the host or the GPU, alone or as Dask shards."""

import doctest
import os

import numpy as np
import pytest

import sknn_gpu.io as sio
from sknn_gpu._backend import to_host
from sknn_gpu.io import load_npy, npy_header, read_npy_shards

DTYPES = [np.float32, np.float64, np.int8, np.int32, np.int64, np.uint16, np.bool_, np.complex64]


@pytest.fixture
def small_staging(monkeypatch):
    """Staging buffers of 1 KiB: every file below takes many slices, and the last one is partial."""
    monkeypatch.setattr(sio, "STAGING_BYTES", 1024)


def _same(got, want):
    got_host = to_host(got)
    assert got_host.dtype == want.dtype.newbyteorder("=")
    assert got_host.shape == want.shape
    assert got.flags.f_contiguous == want.flags.f_contiguous or want.ndim < 2  # on the device itself
    np.testing.assert_array_equal(got_host, want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_load_npy_reads_every_plain_dtype_like_np_load(tmp_path, device, small_staging, rng, dtype):
    want = (rng.random((37, 29)) * 100).astype(dtype)
    np.save(tmp_path / "a.npy", want)
    got = load_npy(tmp_path / "a.npy", device=device)
    assert type(got).__module__.split(".")[0] == ("cupy" if device == "cuda" else "numpy")
    _same(got, want)


@pytest.mark.parametrize(
    "make",
    [
        lambda r: np.asfortranarray(r.random((50, 41), dtype=np.float32)),  # Fortran order kept
        lambda r: r.random((3, 5, 7, 11)),  # any number of axes
        lambda r: r.integers(0, 9, size=1000, dtype=np.int16),  # 1-D
        lambda r: np.float64(2.5) * np.ones(()),  # 0-d
        lambda r: np.empty((0, 784), dtype=np.float32),  # empty
        lambda r: r.random((300, 7)).astype(">f8"),  # big-endian: converted to native order
        lambda r: r.random((1024 // 4, 1), dtype=np.float32),  # exactly one slice
    ],
    ids=["fortran", "4d", "1d", "0d", "empty", "big-endian", "one-slice"],
)
def test_load_npy_keeps_shape_order_and_values(tmp_path, device, small_staging, rng, make):
    want = make(rng)
    np.save(tmp_path / "a.npy", want)
    _same(load_npy(str(tmp_path / "a.npy"), device=device), want)


@pytest.mark.cuda
def test_load_npy_on_the_gpu_reuses_its_staging_and_leaves_the_stream_usable(tmp_path, rng):
    cp = pytest.importorskip("cupy")
    arrays = [rng.random((n, 64), dtype=np.float32) for n in (1, 500, 2048, 3)]
    for i, a in enumerate(arrays):
        np.save(tmp_path / f"{i}.npy", a)
    # one thread, one device: the same two pinned buffers serve every file
    outs = [load_npy(tmp_path / f"{i}.npy", device="cuda") for i in range(len(arrays))]
    staging = sio._local.staging[cp.cuda.runtime.getDevice()]
    again = load_npy(tmp_path / "1.npy", device="cuda")
    np.testing.assert_array_equal(cp.asnumpy(again * 2), arrays[1] * 2)  # a kernel on the current stream
    assert sio._local.staging[cp.cuda.runtime.getDevice()] is staging
    for got, want in zip(outs, arrays, strict=True):
        np.testing.assert_array_equal(cp.asnumpy(got), want)


@pytest.mark.cuda
def test_load_npy_on_the_gpu_refuses_oversize_before_allocating(tmp_path):
    from sknn_gpu._backend import InsufficientMemoryError, free_memory

    path = tmp_path / "huge.npy"
    rows = free_memory("cuda") // (1 << 20) + 1  # more rows of 1 MiB than the GPU holds
    with open(path, "wb") as f:
        header = {"descr": "|u1", "fortran_order": False, "shape": (rows, 1 << 20)}
        np.lib.format.write_array_header_1_0(f, header)
        offset = f.tell()
    os.truncate(path, offset + rows * (1 << 20))  # a sparse file: the header is all there is to read
    with pytest.raises(InsufficientMemoryError, match="huge.npy"):
        load_npy(path, device="cuda")


@pytest.mark.cuda
def test_load_npy_on_the_gpu_refuses_dtypes_cupy_cannot_hold(tmp_path):
    np.save(tmp_path / "s.npy", np.array(["a", "bc"]))
    with pytest.raises(TypeError, match="no CuPy counterpart"):
        load_npy(tmp_path / "s.npy", device="cuda")


def test_bad_files_are_refused_with_the_file_named(tmp_path, device):
    (tmp_path / "text.npy").write_bytes(b"not an array at all")
    with pytest.raises(ValueError, match="text.npy.*not a .npy file"):
        load_npy(tmp_path / "text.npy", device=device)
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="obj.npy.*Python objects"):
        load_npy(tmp_path / "obj.npy", device=device)
    np.save(tmp_path / "cut.npy", np.arange(1000, dtype=np.int64))
    data = (tmp_path / "cut.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(data[:-8])
    with pytest.raises(ValueError, match="cut.npy.*truncated.*7992 bytes"):
        load_npy(tmp_path / "cut.npy", device=device)
    with pytest.raises(FileNotFoundError):
        load_npy(tmp_path / "missing.npy", device=device)


def test_npy_header_reads_no_data(tmp_path):
    a = np.asfortranarray(np.zeros((5, 3), dtype=">i4"))
    np.save(tmp_path / "a.npy", a)
    shape, dtype, fortran, offset = npy_header(tmp_path / "a.npy")
    assert (shape, dtype, fortran) == ((5, 3), np.dtype(">i4"), True)
    assert offset + a.nbytes == (tmp_path / "a.npy").stat().st_size


def _write_shards(folder, sizes, rng, trailing=(6,), dtype=np.float32):
    parts = []
    for i, n in enumerate(sizes):
        a = rng.random((n,) + trailing).astype(dtype)
        np.save(folder / f"X_{i:03d}.npy", a)
        parts.append(a)
    return np.concatenate(parts)


def test_read_npy_shards_stacks_the_files_in_order_one_block_each(tmp_path, device, rng):
    pytest.importorskip("dask")
    want = _write_shards(tmp_path, [5, 0, 17, 3], rng)
    X = read_npy_shards(str(tmp_path / "X_*.npy"), device=device)
    assert X.shape == want.shape and X.chunks[0] == (5, 17, 3)  # an empty file adds no block
    assert type(X._meta).__module__.split(".")[0] == ("cupy" if device == "cuda" else "numpy")
    _same(X.compute(scheduler="synchronous"), want)
    # a list in another order is taken as given
    paths = [tmp_path / f"X_{i:03d}.npy" for i in (2, 0)]
    got = read_npy_shards(paths, device=device).compute(scheduler="synchronous")
    _same(got, np.concatenate([np.load(p) for p in paths]))


def test_read_npy_shards_on_a_cluster_feeds_an_estimator(tmp_path, dask_client, rng):
    from sknn_gpu import FlyHashTransformer

    want = _write_shards(tmp_path, [40, 25, 35], rng, trailing=(16,))
    X = read_npy_shards(sorted(tmp_path.glob("X_*.npy")))
    hasher = FlyHashTransformer(n_components=64, k=4, output="dense", random_state=0, device="cpu").fit(want)
    np.testing.assert_array_equal(hasher.transform(X).compute(), hasher.transform(want))


def test_read_npy_shards_refuses_shards_that_do_not_stack(tmp_path, rng):
    pytest.importorskip("dask")
    _write_shards(tmp_path, [4, 4], rng)
    np.save(tmp_path / "X_002.npy", np.zeros((4, 7), dtype=np.float32))
    with pytest.raises(ValueError, match=r"X_002.npy' holds \(4, 7\) of float32, but .*X_000.npy"):
        read_npy_shards(str(tmp_path / "X_*.npy"))
    np.save(tmp_path / "X_002.npy", np.zeros((4, 6), dtype=np.float64))
    with pytest.raises(ValueError, match="must share the dtype"):
        read_npy_shards(str(tmp_path / "X_*.npy"))
    with pytest.raises(FileNotFoundError, match="no file matches"):
        read_npy_shards(str(tmp_path / "Y_*.npy"))
    with pytest.raises(ValueError, match="at least one file"):
        read_npy_shards([])
    np.save(tmp_path / "s.npy", np.float32(1))
    with pytest.raises(ValueError, match="0-d array"):
        read_npy_shards([tmp_path / "s.npy"])
    np.save(tmp_path / "v.npy", np.zeros(4, dtype=np.float32))
    with pytest.raises(ValueError, match="s.npy' holds \\(\\) of float32"):
        read_npy_shards([tmp_path / "v.npy", tmp_path / "s.npy"])  # a 0-d file after a 1-d one


def test_module_examples_run():
    result = doctest.testmod(sio, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 3 and result.failed == 0
