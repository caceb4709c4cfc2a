"""The kernel loader: sources, defines, memoization, and a sample kernel on the GPU."""

import numpy as np
import pytest

from sknn_gpu import _kernels
from sknn_gpu._kernels import get_function, load_module, load_source, render_defines


def test_sources_ship_as_package_data():
    src = load_source("sample")
    assert "scaled_axpy_f32" in src
    assert (_kernels.kernel_dir() / "sample.cu").is_file()


def test_unknown_family_is_a_clear_error():
    with pytest.raises(FileNotFoundError, match="known families: .*'sample'"):
        load_source("nope")
    with pytest.raises(ValueError):
        load_source("../etc/passwd")


def test_defines_are_rendered_sorted_and_validated():
    assert render_defines({"B": 2, "A": True, "C": 1.5}) == "#define A 1\n#define B 2\n#define C 1.5\n"
    assert render_defines({}) == ""
    with pytest.raises(ValueError):
        render_defines({"not an identifier": 1})
    with pytest.raises(TypeError):
        render_defines({"X": [1, 2]})


def test_loading_without_cuda_names_the_problem(monkeypatch):
    import sys

    from sknn_gpu import _backend

    monkeypatch.setitem(sys.modules, "cupy", None)
    _backend._reset_cache()
    try:
        with pytest.raises(RuntimeError, match="CUDA is not usable"):
            load_module("sample")
    finally:
        monkeypatch.undo()
        _backend._reset_cache()


@pytest.mark.cuda
def test_sample_kernel_loads_runs_and_is_memoized(rng):
    import cupy

    _kernels.clear_cache()
    n = 100_003  # not a multiple of the block size
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    k2 = get_function("sample", "scaled_axpy_f32", SCALE="2.0f")
    dx, dy = cupy.asarray(x), cupy.asarray(y)
    k2((64,), (256,), (dx, dy, np.float32(3.0), np.int64(n)))
    expected = np.float32(2.0) * (np.float32(3.0) * x + y)  # float32, as the kernel computes
    np.testing.assert_allclose(dy.get(), expected, rtol=1e-5, atol=1e-6)
    # memoized per define set: same object back, a different define compiles anew
    assert load_module("sample", SCALE="2.0f") is load_module("sample", SCALE="2.0f")
    assert load_module("sample", SCALE="1.0f") is not load_module("sample", SCALE="2.0f")
    assert get_function("sample", "scaled_axpy_f32", SCALE="2.0f") is k2


@pytest.mark.cuda
def test_get_function_keys_on_define_types_and_template_ids():
    # 2 and 2.0 compare equal in Python but are different C literals: two compilations
    a = get_function("sample", "scaled_axpy_f32", SCALE=2)
    b = get_function("sample", "scaled_axpy_f32", SCALE=2.0)
    assert a is not b
    # a template-id is compiled as that one instantiation and memoized like any name
    g = get_function("gemv", "gemv_t_flat<float>")
    assert get_function("gemv", "gemv_t_flat<float>") is g
    assert get_function("gemv", "gemv_t_flat<double>") is not g


# ---------------------------------------------------------------- the one grid barrier
_PERSISTENT_FAMILIES = ("dtcnn", "sparsenet", "mlp")


def test_persistent_kernels_share_the_one_grid_barrier():
    import re
    from pathlib import Path

    header = _kernels.kernel_dir() / "grid_barrier.cuh"
    assert header.is_file()  # ships next to the .cu sources
    text = header.read_text(encoding="utf-8")
    assert "__device__ __forceinline__ bool grid_barrier(unsigned long long* count, int* err)" in text
    assert "GRID_BARRIER_TIMEOUT_NS" in text and "globaltimer" in text  # bounded wait
    own_barrier = re.compile(r"__device__[^;{]*\b\w*barrier\w*\s*\(")
    for family in _PERSISTENT_FAMILIES:
        src = load_source(family)
        assert '#include "grid_barrier.cuh"' in src, family
        assert own_barrier.search(src) is None, f"{family}.cu defines a barrier of its own"
        assert re.search(r"if \(!grid_barrier\(\w+, [\w*()]+\)\) return;", src), family
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    if pyproject.is_file():  # the header is package data, as the sources are
        assert '"*.cuh"' in pyproject.read_text(encoding="utf-8")


def test_check_barrier_error_raises_only_when_set():
    from sknn_gpu._kernels import check_barrier_error

    check_barrier_error(np.zeros(1, dtype=np.int32), "nothing")  # no error: returns
    with pytest.raises(RuntimeError, match="^Thing: grid barrier timed out: .*not all resident"):
        check_barrier_error(np.ones(1, dtype=np.int32), "Thing")


_BARRIER_TEST_SRC = r"""
#define GRID_BARRIER_TIMEOUT_NS 50000000ull  // 50 ms: the time-out test stays short
#include "grid_barrier.cuh"

// rounds of: every block publishes r, barrier, every block checks that all published r
extern "C" __global__ void barrier_rounds(unsigned long long* count, int* err, int* slots, int* stale,
                                          const int rounds)
{
    for (int r = 1; r <= rounds; ++r) {
        if (threadIdx.x == 0) slots[blockIdx.x] = r;
        if (!grid_barrier(count, err)) return;
        int bad = 0;
        for (int i = threadIdx.x; i < (int)gridDim.x; i += blockDim.x) bad |= __ldcg(slots + i) < r;
        if (bad) atomicAdd(stale, 1);
    }
}

extern "C" __global__ void barrier_once(unsigned long long* count, int* err, int* passed)
{
    if (grid_barrier(count, err) && threadIdx.x == 0) atomicAdd(passed, 1);
}
"""


def _barrier_test_module():
    import cupy

    return cupy.RawModule(code=_BARRIER_TEST_SRC, options=("--std=c++17", f"-I{_kernels.kernel_dir()}"))


@pytest.mark.cuda
def test_grid_barrier_synchronises_and_counter_needs_no_reset():
    import cupy

    mod = _barrier_test_module()
    kern = mod.get_function("barrier_rounds")
    nb = int(cupy.cuda.Device().attributes["MultiProcessorCount"])  # one block per SM: resident
    count = cupy.zeros(1, dtype=cupy.uint64)
    err = cupy.zeros(1, dtype=cupy.int32)
    stale = cupy.zeros(1, dtype=cupy.int32)
    rounds = 50
    for launch in (1, 2):  # the same counter, never reset: a multiple of the grid between launches
        slots = cupy.zeros(nb, dtype=cupy.int32)
        kern((nb,), (128,), (count, err, slots, stale, np.int32(rounds)))
        cupy.cuda.Device().synchronize()
        assert int(count.get()[0]) == launch * rounds * nb
        assert int(stale.get()[0]) == 0  # nobody passed a barrier before every block arrived
        assert int(err.get()[0]) == 0
        np.testing.assert_array_equal(slots.get(), rounds)
    _kernels.check_barrier_error(err, "barrier_rounds")  # no error: returns


@pytest.mark.cuda
def test_grid_barrier_times_out_instead_of_hanging():
    import cupy

    mod = _barrier_test_module()
    kern = mod.get_function("barrier_once")
    n_sm = int(cupy.cuda.Device().attributes["MultiProcessorCount"])
    nb = 64 * n_sm  # 1024-thread blocks: at most 2 per SM resident, the rest wait for them
    count = cupy.zeros(1, dtype=cupy.uint64)
    err = cupy.zeros(1, dtype=cupy.int32)
    passed = cupy.zeros(1, dtype=cupy.int32)
    kern((nb,), (1024,), (count, err, passed))
    cupy.cuda.Device().synchronize()  # returns: the waiting blocks gave up (50 ms limit)
    assert int(err.get()[0]) == 1
    assert int(passed.get()[0]) == 0  # no block went through the broken barrier
    assert int(count.get()[0]) >= 1 << 62  # poisoned: later launches on it fail at once
    with pytest.raises(RuntimeError, match="grid barrier timed out"):
        _kernels.check_barrier_error(err, "barrier_once")
    # a later launch on the poisoned counter fails at once too, even with every block resident
    err.fill(0)
    kern((2,), (32,), (count, err, passed))
    cupy.cuda.Device().synchronize()
    assert int(err.get()[0]) == 1 and int(passed.get()[0]) == 0


def test_header_digest_tracks_shared_headers():
    digest = _kernels.headers_digest()
    assert len(digest) == 40 and int(digest, 16) >= 0
    assert any(_kernels.kernel_dir().glob("*.cuh"))  # there is something for it to track


def test_resident_kernels_are_stopped_before_a_grid_barrier_launch():
    """The registry behind SparseGraph.resident: stop_resident_kernels() stops every
    registered kernel (a grid-barrier launch needs every SM), nothing once unregistered,
    and a failing stop (at exit: the context may be gone) does not stop the others."""

    class Fake:
        def __init__(self, fail=False):
            self.stops, self.fail = 0, fail

        def stop(self):
            self.stops += 1
            if self.fail:
                raise RuntimeError("context gone")

    a, b = Fake(), Fake(fail=True)
    _kernels.register_resident(a)
    _kernels.register_resident(b)
    try:
        _kernels.stop_resident_kernels()
        assert (a.stops, b.stops) == (1, 1)
    finally:
        _kernels.unregister_resident(a)
        _kernels.unregister_resident(b)
    _kernels.stop_resident_kernels()
    assert (a.stops, b.stops) == (1, 1)
