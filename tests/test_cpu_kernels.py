"""The C kernels of the CPU engines: the loader (compile once, cache, fall back) and the kernels
themselves against NumPy."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest
import scipy.sparse as sp

from sknn_gpu._kernels import _cpu, kernel_dir


@pytest.fixture
def fresh_loader(monkeypatch, tmp_path):
    """A loader that has loaded nothing yet, compiling into its own cache folder."""
    monkeypatch.setattr(_cpu, "_libraries", {})
    monkeypatch.setattr(_cpu, "_status", {})
    monkeypatch.setenv("SKNN_GPU_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(_cpu.DISABLE_ENV, raising=False)
    return tmp_path / "cache" / "cpu_kernels"


@pytest.fixture(scope="module")
def lib():
    found = _cpu.cpu_library("sparsenet")
    if found is None:
        pytest.skip(f"no compiled CPU kernels here: {_cpu.cpu_kernels_status()}")
    return found


def _csr(rng, n_rows, n_cols, density):
    M = sp.random(n_rows, n_cols, density=density, format="csr", random_state=rng)
    M.data = rng.normal(size=M.nnz)
    M.indptr, M.indices = M.indptr.astype(np.int32), M.indices.astype(np.int32)
    return M


BATCHES = [1, 3, 31, 32, 33, 64, 70, 200]


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("n", BATCHES)
def test_spmm_is_the_sparse_product(lib, n, accumulate, rng):
    """Rows with no edge, batches under, at and over the 32-value slice and its tail; ``out``
    overwritten or added to; X read from an offset row with a longer row stride."""
    M = _csr(rng, 23, 40, 0.2)
    M = sp.diags((np.arange(23) // 3 != 2).astype(float)) @ M  # rows 6-8 lose their edges
    M.indptr, M.indices = M.indptr.astype(np.int32), M.indices.astype(np.int32)
    assert M.indptr[6] == M.indptr[9] and M.nnz > 0
    ld = n + 5
    Xbig = rng.normal(size=(45, ld))
    X = Xbig[3 : 3 + 40, :n]  # rows 3.. of a wider matrix
    out0 = rng.normal(size=(23, n))
    out = out0.copy()
    lib.spmm(
        23,
        M.indptr.ctypes.data,
        M.indices.ctypes.data,
        M.data.ctypes.data,
        Xbig.ctypes.data + 8 * 3 * ld,
        ld,
        out.ctypes.data,
        n,
        n,
        int(accumulate),
    )
    want = (out0 if accumulate else 0.0) + M @ X
    np.testing.assert_allclose(out, want, rtol=1e-13, atol=1e-13)
    if not accumulate:
        assert np.all(out[6:9] == 0.0)


@pytest.mark.parametrize("n", BATCHES)
def test_spmm_t_adds_the_transposed_product_skipping_inputs(lib, n, rng):
    """Edges from the first ``cut`` columns (inputs) pass nothing back; the others add
    ``M[:, cut:].T @ D`` to what ``out`` holds."""
    cut = 9
    M = _csr(rng, 21, 35, 0.3)
    D = rng.normal(size=(21, n))
    out0 = rng.normal(size=(35 - cut, n))
    out = out0.copy()
    lib.spmm_t(
        21,
        M.indptr.ctypes.data,
        M.indices.ctypes.data,
        M.data.ctypes.data,
        D.ctypes.data,
        n,
        out.ctypes.data,
        n,
        n,
        cut,
    )
    np.testing.assert_allclose(out, out0 + M[:, cut:].T @ D, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("n", BATCHES)
def test_sddmm_is_the_product_at_the_edges(lib, n, rng):
    M = _csr(rng, 17, 30, 0.3)
    D, V = rng.normal(size=(17, n)), rng.normal(size=(30, n))
    g = np.full(M.nnz, np.nan)
    ind, ptr = M.indices.ctypes.data, M.indptr.ctypes.data
    lib.sddmm(17, ptr, ind, D.ctypes.data, n, V.ctypes.data, n, n, g.ctypes.data)
    rows = np.repeat(np.arange(17), np.diff(M.indptr))
    np.testing.assert_allclose(g, (D @ V.T)[rows, M.indices], rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("n, m", [(1, 1), (7, 65), (200, 784), (13, 130)])
def test_gather_t_lays_rows_out_node_major(lib, n, m, rng):
    src = rng.normal(size=(n + 5, m + 3))  # a row stride longer than the values read
    rows = rng.integers(0, n + 5, size=n).astype(np.int64)
    dst = np.full((m, n + 2), np.nan)
    lib.gather_t(n, m, src.ctypes.data, m + 3, rows.ctypes.data, dst.ctypes.data, n + 2)
    np.testing.assert_array_equal(dst[:, :n], src[rows, :m].T)
    assert np.isnan(dst[:, n:]).all()  # nothing written past the batch
    lib.gather_t(n, m, src.ctypes.data, m + 3, None, dst.ctypes.data, n + 2)
    np.testing.assert_array_equal(dst[:, :n], src[:n, :m].T)


def test_compiled_once_then_read_from_the_cache(fresh_loader, monkeypatch):
    lib = _cpu.cpu_library("sparsenet")
    if lib is None:
        pytest.skip(f"no C compiler here: {_cpu.cpu_kernels_status()}")
    assert _cpu.cpu_library("sparsenet") is lib  # loaded once per process
    built = sorted(fresh_loader.glob("sparsenet-*.so"))
    assert len(built) == 1 and not list(fresh_loader.glob(".*"))  # no temporary file left
    assert str(built[0]) in _cpu.cpu_kernels_status()
    if hasattr(os, "getuid"):
        assert stat.S_IMODE(fresh_loader.stat().st_mode) & 0o077 == 0  # the user's own folder

    real_run = _cpu._run

    def run_without_compiling(cmd):
        assert "-o" not in cmd, "compiled again although the library is in the cache"
        return real_run(cmd)  # the compiler's --version (part of the library's name)

    monkeypatch.setattr(_cpu, "_run", run_without_compiling)
    again, _ = _cpu._build("sparsenet", kernel_dir() / "sparsenet.c")
    assert again == built[0]


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX ownership and modes")
def test_a_cache_folder_others_can_write_is_not_used(fresh_loader, monkeypatch, tmp_path):
    """A library is loaded from the cache: a folder whose parent anyone may write (a shared
    /tmp-like place) is passed over for the next candidate."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("SKNN_GPU_CACHE_DIR", str(shared))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _cpu._cache_dir() == tmp_path / "xdg" / "sknn_gpu" / "cpu_kernels"
    shared.chmod(0o755)
    assert _cpu._cache_dir() == shared / "cpu_kernels"


def test_disabled_by_the_environment(fresh_loader, monkeypatch):
    monkeypatch.setenv(_cpu.DISABLE_ENV, "1")
    assert _cpu.cpu_library("sparsenet") is None
    assert "disabled by SKNN_GPU_DISABLE_CPU_KERNELS" in _cpu.cpu_kernels_status()
    monkeypatch.setenv(_cpu.DISABLE_ENV, "0")  # 0 means not disabled
    assert not _cpu._disabled()


def test_no_compiler_falls_back_with_a_reason(fresh_loader, monkeypatch):
    monkeypatch.setattr(_cpu, "_compiler", lambda: None)
    assert _cpu.cpu_library("sparsenet") is None
    assert _cpu.cpu_kernels_status() == (
        "no C compiler found ($CC, Python's compiler or cc); NumPy/SciPy code used"
    )


def test_failing_compiler_falls_back_with_its_message(fresh_loader, monkeypatch, tmp_path):
    cc = tmp_path / "broken-cc"
    cc.write_text("#!/bin/sh\necho 'fatal: no such target' >&2\nexit 1\n")
    cc.chmod(0o755)
    monkeypatch.setenv("CC", str(cc))
    assert _cpu.cpu_library("sparsenet") is None
    status = _cpu.cpu_kernels_status()
    assert "failed: fatal: no such target; NumPy/SciPy code used" in status
    assert not list(fresh_loader.iterdir())  # nothing half-written left behind


def test_compiler_refusing_native_code_gets_the_portable_flags(fresh_loader, monkeypatch, tmp_path):
    """A compiler without ``-march=native`` (some Clang builds on ARM) builds the portable library."""
    real = _cpu._compiler()
    if real is None:
        pytest.skip("no C compiler here")
    cc = tmp_path / "no-native-cc"
    cc.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do [ "$a" = -march=native ] && { echo "unknown -march" >&2; exit 1; }; done\n'
        f'exec {" ".join(real)} "$@"\n'
    )
    cc.chmod(0o755)
    monkeypatch.setenv("CC", str(cc))
    lib = _cpu.cpu_library("sparsenet")
    assert lib is not None
    status = _cpu.cpu_kernels_status()
    assert "-march=native" not in status and "-O3 -fPIC -shared -std=c99" in status


def test_unknown_family_is_refused():
    with pytest.raises(ValueError, match="unknown CPU kernel family 'nope'"):
        _cpu.cpu_library("nope")
