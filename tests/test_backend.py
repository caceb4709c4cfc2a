"""Device backend: resolution, the no-CuPy path, output types, memory checks, pickling."""

import pickle
import re
import subprocess
import sys
import warnings
from numbers import Real

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import BaseEstimator, clone

import sknn_gpu
from sknn_gpu import _backend
from sknn_gpu._backend import (
    InsufficientMemoryError,
    check_memory,
    cuda_available,
    free_memory,
    get_xp,
    is_device_array,
    resolve_device,
    same_type_as_input,
    to_device,
    to_host,
)
from sknn_gpu._constraints import Interval, validate_params
from sknn_gpu.base import DeviceMixin, host_state, reject_time_dtypes, validates_params


@pytest.fixture
def no_cupy(monkeypatch):
    """Simulate a machine without CuPy: the import fails, the probe is re-run."""
    monkeypatch.setitem(sys.modules, "cupy", None)  # makes `import cupy` raise ImportError
    _backend._reset_cache()
    yield
    monkeypatch.undo()
    _backend._reset_cache()


def test_import_does_not_import_cupy():
    code = "import sys, sknn_gpu, sknn_gpu._backend, sknn_gpu._kernels; print('cupy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_cpu_always_resolves():
    assert resolve_device("cpu") == "cpu"
    assert get_xp("cpu") is np


@pytest.mark.parametrize("bad", ["gpu", "CUDA", "", None, 0])
def test_bad_device_value(bad):
    with pytest.raises(ValueError, match="device must be one of"):
        resolve_device(bad)


def test_no_cupy_auto_falls_back_silently(no_cupy, recwarn):
    assert not cuda_available()
    assert resolve_device("auto") == "cpu"
    assert len(recwarn) == 0
    assert "CuPy could not be imported" in _backend.cuda_unavailable_reason()


def test_no_cupy_cuda_is_one_clear_error(no_cupy):
    with pytest.raises(RuntimeError) as err:
        resolve_device("cuda")
    msg = str(err.value)
    assert "CuPy could not be imported" in msg
    # the package is on no index: the hint names the CuPy wheels (what the extras install)
    assert "pip install cupy-cuda12x" in msg and "pip install cupy-cuda13x" in msg
    assert "pip install sknn-gpu" not in msg


def test_env_var_disables_cuda(monkeypatch):
    monkeypatch.setenv(_backend.DISABLE_ENV, "1")
    _backend._reset_cache()
    try:
        assert resolve_device("auto") == "cpu"
        assert _backend.DISABLE_ENV in _backend.cuda_unavailable_reason()
    finally:
        monkeypatch.delenv(_backend.DISABLE_ENV)
        _backend._reset_cache()


def test_numpy_in_numpy_out(rng):
    x = rng.standard_normal((5, 3))
    assert _backend.array_module(x) is np
    assert to_host(x) is x
    assert to_device(x, "cpu") is x
    out = same_type_as_input([np.ones(2), np.zeros((1, 2))], x)
    assert type(out) is list and all(isinstance(o, np.ndarray) for o in out)
    assert isinstance(same_type_as_input(np.arange(3), x), np.ndarray)
    s = sp.random(4, 4, density=0.5, format="csr", random_state=0)
    assert to_host(s) is s


class _FakeCupyArray:
    """Stands in for a cupy.ndarray on machines without a GPU."""

    __module__ = "cupy._core.core"

    def __init__(self, data):
        self.data = np.asarray(data)
        self.shape = self.data.shape

    def get(self):
        return self.data.copy()


def test_host_state_converts_nested_device_arrays():
    a = _FakeCupyArray([1, 2, 3])
    assert is_device_array(a)
    state = host_state({"w": [a, (a, 3)], "b": a, "n": 5})
    assert isinstance(state["b"], np.ndarray) and state["b"].tolist() == [1, 2, 3]
    assert isinstance(state["w"][1][0], np.ndarray)
    assert state["n"] == 5


def test_device_state_leaves_object_and_string_arrays_on_the_host(monkeypatch):
    from sknn_gpu import base

    moved = []
    monkeypatch.setattr(base, "to_device", lambda v, device: moved.append(v.dtype.kind) or ("dev", v))
    names = np.array(["a", "b"], dtype=object)
    labels = np.array(["cat", "dog"])
    state = base.device_state({"feature_names_in_": names, "classes_": labels, "w_": np.ones(3)}, "cuda")
    assert state["feature_names_in_"] is names and state["classes_"] is labels
    assert state["w_"][0] == "dev" and moved == ["f"]


def test_unpickling_on_a_gpu_box_puts_back_exactly_what_was_on_the_device(monkeypatch):
    """Simulated GPU box: the attributes that held device arrays go back; host ones (a NumPy
    ``classes_``, say) stay NumPy. A pickle without the record falls back to the old rule:
    public numeric fitted arrays except the declared ``_host_attributes``."""
    from sknn_gpu import base

    class Toy(_Toy):
        _host_attributes = ("kept_",)

    est = Toy(device="cpu").fit(np.ones((4, 2)))
    est.kept_ = np.arange(3)
    est.classes_ = np.arange(2)  # on the host though the model is on the GPU
    on_gpu = est.mean_
    monkeypatch.setattr(base, "is_device_array", lambda v: v is on_gpu)
    state = est.__getstate__()
    assert state[base._ON_DEVICE_KEY] == ("mean_", "parts_")  # parts_ holds mean_
    state["device_"] = "cuda"
    monkeypatch.setattr(base, "cuda_available", lambda: True)
    monkeypatch.setattr(base, "to_device", lambda v, device: ("dev", v))
    clone = Toy.__new__(Toy)
    clone.__setstate__(dict(state))
    assert clone.mean_[0] == "dev"
    assert isinstance(clone.kept_, np.ndarray) and isinstance(clone.classes_, np.ndarray)
    old = {k: v for k, v in state.items() if k != base._ON_DEVICE_KEY}
    clone = Toy.__new__(Toy)
    clone.__setstate__(old)
    assert clone.mean_[0] == "dev" and clone.classes_[0] == "dev"
    assert isinstance(clone.kept_, np.ndarray)


def test_check_device_X_validates_like_validate_data(rng):
    """The device-side input check, run here on NumPy arrays (same code, other array module)."""
    est = _Toy(device="cpu")
    X = est._check_device_X(rng.integers(0, 5, size=(6, 3)), reset=True, contiguous=True)
    assert X.dtype == np.float64 and est.n_features_in_ == 3
    F = np.asfortranarray(rng.standard_normal((4, 3)).astype(np.float32))
    out = est._check_device_X(F, reset=False, contiguous=True)
    assert out.dtype == np.float32 and out.flags.c_contiguous
    assert est._check_device_X(F.astype(np.float16), reset=False).dtype == np.float64
    kept = est._check_device_X(F.astype(np.float16), reset=False, cast_float=False)
    assert kept.dtype == np.float16
    bad = F.copy()
    bad[1, 2] = np.nan
    cases = [
        (np.ones(3), "2D"),
        (np.ones((0, 3)), "at least one sample"),
        (np.array([["a", "b", "c"]]), "numeric"),
        (bad, "NaN"),
        (np.ones((2, 4)), "4 features, but _Toy is expecting 3"),
    ]
    for arr, msg in cases:
        with pytest.raises(ValueError, match=msg):
            est._check_device_X(arr, reset=False)


def test_check_memory_refuses_before_allocating():
    free = free_memory("cpu")
    assert free > 0
    assert check_memory(1024, "cpu") == 1024
    with pytest.raises(InsufficientMemoryError, match=r"needs \d+ bytes .* on cpu"):
        check_memory(free * 4, "cpu", what="a huge buffer")
    with pytest.raises(ValueError):
        check_memory(-1, "cpu")


class _Toy(DeviceMixin, BaseEstimator):
    """Minimal estimator used to test the mixin."""

    _parameter_constraints = {**DeviceMixin._device_constraints}

    def __init__(self, device="auto"):
        self.device = device

    def fit(self, X):
        validate_params(self)
        xp = get_xp(self._resolve_device())
        self.mean_ = xp.asarray(X).mean(axis=0)
        self.parts_ = [self.mean_, {"twice": 2 * self.mean_}]
        return self


def test_mixin_resolves_and_pickles_on_cpu(rng):
    X = rng.standard_normal((20, 4))
    est = _Toy(device="cpu").fit(X)
    assert est.device_ == "cpu"
    assert est._device_copy("mean_") is est.mean_
    est2 = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(est2.mean_, X.mean(axis=0))
    assert "_device_cache" not in est2.__dict__


def test_model_fitted_on_gpu_loads_on_cpu_box(no_cupy, rng):
    """Simulate a GPU-fitted pickle (fake device arrays) opened where CUDA is absent."""
    X = rng.standard_normal((10, 3))
    est = _Toy(device="cpu").fit(X)
    est.device_ = "cuda"
    est.mean_ = _FakeCupyArray(est.mean_)
    blob = pickle.dumps(est)
    with pytest.warns(UserWarning, match="fitted on CUDA but no usable GPU"):
        est2 = pickle.loads(blob)
    assert est2.device_ == "cpu"
    assert isinstance(est2.mean_, np.ndarray)
    np.testing.assert_allclose(est2.mean_, X.mean(axis=0))


def test_pickles_carry_the_version_and_warn_when_it_differs(rng):
    from sknn_gpu.base import _VERSION_KEY

    est = _Toy(device="cpu").fit(rng.standard_normal((5, 2)))
    state = est.__getstate__()
    assert state[_VERSION_KEY] == sknn_gpu.__version__
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # same version: no warning
        pickle.loads(pickle.dumps(est))
    state[_VERSION_KEY] = "0.0.1"
    other = _Toy.__new__(_Toy)
    with pytest.warns(UserWarning, match="pickled with sknn_gpu 0.0.1"):
        other.__setstate__(state)
    assert _VERSION_KEY not in other.__dict__
    np.testing.assert_array_equal(other.mean_, est.mean_)


def test_helpers_below_estimators_refuse_an_unresolved_device():
    for fn in (get_xp, lambda d: to_device(np.ones(2), d), free_memory):
        with pytest.raises(ValueError, match="resolved device"):
            fn("auto")


def test_config_context_sets_output_type_and_restores_it():
    x = np.arange(3.0)
    assert sknn_gpu.get_config() == {"output_type": "input"}
    with sknn_gpu.config_context(output_type="numpy"):
        assert sknn_gpu.get_config()["output_type"] == "numpy"
        assert isinstance(same_type_as_input([1.0, 2.0], x), list)
        assert isinstance(same_type_as_input(np.ones(2), x), np.ndarray)
        with sknn_gpu.config_context(output_type="input"):
            assert sknn_gpu.get_config()["output_type"] == "input"
        assert sknn_gpu.get_config()["output_type"] == "numpy"
    assert sknn_gpu.get_config() == {"output_type": "input"}
    with pytest.raises(ValueError, match="output_type must be one of"):
        with sknn_gpu.config_context(output_type="torch"):
            pass
    assert sknn_gpu.get_config() == {"output_type": "input"}


def test_public_device_module_names_the_backend_helpers():
    from sknn_gpu import device

    for name in device.__all__:
        assert getattr(device, name) is getattr(_backend, name)
    assert device.resolve_device("cpu") == "cpu"


def test_invalid_device_param_is_rejected():
    with pytest.raises(ValueError, match="device"):
        _Toy(device="tpu").fit(np.ones((3, 2)))


@pytest.mark.cuda
def test_cuda_round_trip_and_output_type(rng):
    import cupy

    x = rng.standard_normal((7, 5)).astype(np.float32)
    d = to_device(x, "cuda")
    assert isinstance(d, cupy.ndarray) and to_device(d, "cuda") is d
    np.testing.assert_array_equal(to_host(d), x)
    assert isinstance(same_type_as_input(np.ones(3), d), cupy.ndarray)
    assert isinstance(same_type_as_input(cupy.ones(3), x), np.ndarray)
    s = sp.random(6, 6, density=0.3, format="csr", random_state=1)
    ds = to_device(s, "cuda")
    assert is_device_array(ds)
    np.testing.assert_array_equal(to_host(ds).toarray(), s.toarray())
    assert resolve_device("auto") == "cuda"
    assert _backend.array_module(d) is cupy and _backend.array_module(x) is np
    lim = _backend.device_limits()
    assert lim.sm_count == cupy.cuda.Device().attributes["MultiProcessorCount"] > 0
    assert _backend.device_limits() is lim  # memoized
    assert lim.smem_per_block_optin >= lim.smem_per_block > 0 and lim.n_devices >= 1
    # output_type: 'numpy' and 'cupy' override the input's type
    with sknn_gpu.config_context(output_type="numpy"):
        assert isinstance(same_type_as_input(cupy.ones(3), d), np.ndarray)
    with sknn_gpu.config_context(output_type="cupy"):
        assert isinstance(same_type_as_input(np.ones(3), x), cupy.ndarray)
    assert free_memory("cuda") > 0
    with pytest.raises(InsufficientMemoryError, match="on cuda"):
        check_memory(10 * free_memory("cuda"), "cuda")


@pytest.mark.cuda
def test_cuda_pickle_gives_numpy_and_reloads_on_gpu(rng):
    import cupy

    X = rng.standard_normal((30, 4))
    est = _Toy(device="cuda").fit(X)
    assert isinstance(est.mean_, cupy.ndarray)
    state = est.__getstate__()
    assert isinstance(state["mean_"], np.ndarray)
    assert isinstance(state["parts_"][1]["twice"], np.ndarray)
    est2 = pickle.loads(pickle.dumps(est))
    assert isinstance(est2.mean_, cupy.ndarray)
    np.testing.assert_allclose(est2.mean_.get(), X.mean(axis=0))


class _ToyClassifier(DeviceMixin, sknn_gpu.base.DeviceClassifierMixin, BaseEstimator):
    """Predicts the sign of the first column; has an ``output_type`` parameter."""

    _parameter_constraints = {**DeviceMixin._device_constraints, **DeviceMixin._output_constraints}

    def __init__(self, device="auto", output_type=None):
        self.device = device
        self.output_type = output_type

    def fit(self, X, y):
        validate_params(self)
        self._resolve_device()
        self.classes_ = np.array([0, 1])
        return self

    def predict(self, X):
        return self._output((to_host(X)[:, 0] > 0).astype(int), X)


def test_estimator_output_type_parameter_overrides_the_config(rng):
    X = rng.standard_normal((10, 2))
    clf = _ToyClassifier(device="cpu").fit(X, X[:, 0] > 0)
    assert isinstance(clf.predict(X), np.ndarray)
    with sknn_gpu.config_context(output_type="numpy"):
        assert isinstance(clf.predict(X), np.ndarray)
    with pytest.raises(ValueError, match="output_type"):
        _ToyClassifier(device="cpu", output_type="torch").fit(X, X[:, 0] > 0)


def test_device_classifier_score_compares_on_the_host(rng):
    X = rng.standard_normal((50, 2))
    y = (X[:, 0] > 0).astype(int)
    y[:5] = 1 - y[:5]
    clf = _ToyClassifier(device="cpu").fit(X, y)
    assert clf.score(X, y) == pytest.approx(0.9)
    w = np.ones(50)
    w[:5] = 0.0
    assert clf.score(X, y, sample_weight=w) == pytest.approx(1.0)


@pytest.mark.cuda
def test_device_classifier_score_and_output_type_on_cupy(rng):
    import cupy

    X = rng.standard_normal((50, 2))
    y = (X[:, 0] > 0).astype(int)
    clf = _ToyClassifier(device="cpu").fit(X, y)
    Xd, yd = cupy.asarray(X), cupy.asarray(y)
    assert clf.score(Xd, yd) == 1.0  # no array-API dispatch needed
    assert isinstance(clf.predict(Xd), cupy.ndarray)
    assert isinstance(clf.set_params(output_type="numpy").predict(Xd), np.ndarray)
    assert isinstance(clf.set_params(output_type="cupy").predict(X), cupy.ndarray)


def test_device_copy_on_the_cpu_returns_host_values_without_caching(rng):
    est = _Toy(device="cpu").fit(rng.standard_normal((6, 3)))
    est.layers_ = [np.ones(2), np.zeros(3)]
    assert est._device_copy("mean_") is est.mean_
    assert est._device_copy("layers_") is est.layers_
    assert "_device_cache" not in est.__dict__


@pytest.mark.cuda
def test_integer_sparse_input_moves_to_the_gpu_as_float64():
    s = sp.random(5, 4, density=0.5, format="csr", random_state=0, dtype=np.float64)
    s.data = np.arange(1, s.nnz + 1, dtype=np.float64)
    ds = to_device(s.astype(np.int64), "cuda")
    assert ds.dtype == np.float64
    np.testing.assert_array_equal(to_host(ds).toarray(), s.toarray())


@pytest.mark.cuda
def test_free_memory_honours_a_memory_pool_limit_and_work_is_refused_before_allocating(rng):
    import cupy

    pool = cupy.get_default_memory_pool()
    keep = cupy.ones(1 << 20, dtype=np.uint8)  # something in use
    try:
        pool.set_limit(size=pool.used_bytes() + (8 << 20))
        assert free_memory("cuda") <= 8 << 20
        with pytest.raises(InsufficientMemoryError, match="on cuda"):
            check_memory(64 << 20, "cuda", what="test work")
        # an estimator whose estimate exceeds the cap refuses before allocating and stays unfitted
        from sknn_gpu import GPUMLPClassifier

        X = rng.random((64, 2000), dtype=np.float32)
        clf = GPUMLPClassifier(hidden_layer_sizes=(20000,), max_iter=1, device="cuda")
        with pytest.raises(InsufficientMemoryError, match="needs"):
            clf.fit(X, np.arange(64) % 2)
        assert not hasattr(clf, "coefs_")
    finally:
        pool.set_limit(size=0)
        del keep


@pytest.mark.cuda
def test_free_memory_asks_the_driver_only_when_the_pool_cannot_cover_the_need(monkeypatch):
    import cupy

    pool = cupy.get_default_memory_pool()
    block = cupy.empty(64 << 20, dtype=np.uint8)
    del block  # 64 MiB back in the pool, unused
    assert pool.free_bytes() >= 64 << 20
    real, calls = cupy.cuda.runtime.memGetInfo, []
    monkeypatch.setattr(cupy.cuda.runtime, "memGetInfo", lambda: calls.append(1) or real())
    monkeypatch.setattr(_backend, "_driver_readings", {})
    assert free_memory("cuda", need=32 << 20) >= 32 << 20 and calls == []
    assert check_memory(16 << 20, "cuda") == 16 << 20 and calls == []
    need = pool.free_bytes() + 1  # more than the pool holds: the driver is asked
    free_memory("cuda", need=need)
    assert calls == [1]
    free_memory("cuda", need=need)  # a fresh reading with twice the need free stands in
    assert calls == [1]
    monkeypatch.setattr(_backend, "DRIVER_READING_TTL", 0.0)  # a stale one does not
    free_memory("cuda", need=need)
    assert calls == [1, 1]
    with pytest.raises(InsufficientMemoryError, match="on cuda"):
        check_memory(10 * free_memory("cuda"), "cuda")


def test_check_memory_formats_a_callable_description_only_to_refuse():
    from sknn_gpu._backend import InsufficientMemoryError, check_memory

    calls = []

    def what():
        calls.append(1)
        return "the described work"

    assert check_memory(1 << 10, "cpu", what=what) == 1 << 10
    assert calls == []  # it fits: no message made
    with pytest.raises(InsufficientMemoryError, match="^the described work needs"):
        check_memory(1 << 62, "cpu", what=what)
    assert calls == [1]


def test_check_memory_skips_the_query_for_work_up_to_its_floor(monkeypatch):
    import sknn_gpu._backend as backend

    calls = []
    monkeypatch.setattr(backend, "free_memory", lambda device, need=None: calls.append(device) or 1000)
    assert backend.check_memory(4096, "cpu", floor=4096) == 4096 and calls == []
    with pytest.raises(backend.InsufficientMemoryError, match="needs 4097 bytes"):
        backend.check_memory(4097, "cpu", floor=4096)
    assert calls == ["cpu"]
    with pytest.raises(backend.InsufficientMemoryError):
        backend.check_memory(4096, "cpu")  # no floor: always asked


@pytest.mark.parametrize("xp_name", ["numpy", pytest.param("cupy", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int32])
def test_all_finite_and_abs_max_on_both_devices(xp_name, dtype):
    """One fused pass on the GPU: the same answers as NumPy, float32 subnormals kept
    (CuPy's float kernels would flush them), inf and NaN seen."""
    from sknn_gpu._backend import abs_max, all_finite

    xp = np if xp_name == "numpy" else pytest.importorskip("cupy")
    base = np.array([[0.5, -3.0, 2.0], [7.0, -0.0, 1.0]], dtype=dtype)
    assert all_finite(xp.asarray(base)) and abs_max(xp.asarray(base)) == 7.0
    assert abs_max(xp.asarray(-base)) == 7.0
    if dtype == np.int32:
        return
    for bad, amax in ((np.inf, np.inf), (-np.inf, np.inf), (np.nan, None)):
        X = base.copy()
        X[1, 2] = bad
        assert not all_finite(xp.asarray(X))
        got = abs_max(xp.asarray(X))
        assert got == amax if amax is not None else np.isnan(got)
    if dtype == np.float32:
        tiny = np.array([1e-40, -3e-41, 0.0], dtype=np.float32)  # subnormals
        assert abs_max(xp.asarray(tiny)) == np.float32(1e-40)
    assert all_finite(xp.asarray(base[:0]))


@pytest.mark.parametrize("xp_name", ["numpy", pytest.param("cupy", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int32])
def test_all_in_unit_interval_on_both_devices(xp_name, dtype):
    """[0, 1] checked in one pass: the bounds and -0.0 in, NaN, inf and anything past a
    bound out, float32/float64 subnormals compared exactly (not flushed to zero)."""
    from sknn_gpu._backend import all_in_unit_interval

    xp = np if xp_name == "numpy" else pytest.importorskip("cupy")
    if dtype == np.int32:
        assert all_in_unit_interval(xp.asarray(np.array([0, 1, 1, 0], dtype=dtype)))
        assert not all_in_unit_interval(xp.asarray(np.array([0, 2], dtype=dtype)))
        assert not all_in_unit_interval(xp.asarray(np.array([-1, 0], dtype=dtype)))
        return
    base = np.array([[0.0, 0.25, 1.0], [0.5, -0.0, 0.999]], dtype=dtype)
    assert all_in_unit_interval(xp.asarray(base))
    assert all_in_unit_interval(xp.asarray(base[:0]))
    finfo = np.finfo(dtype)
    for bad in (np.nan, np.inf, -np.inf, 1.0 + finfo.eps, -finfo.tiny, 2.0, -0.5):
        X = base.copy()
        X[1, 2] = bad
        assert not all_in_unit_interval(xp.asarray(X)), bad
    if dtype in (np.float32, np.float64):
        sub = finfo.smallest_subnormal
        assert all_in_unit_interval(xp.asarray(np.array([sub, 0.5], dtype=dtype)))
        assert not all_in_unit_interval(xp.asarray(np.array([-sub, 0.5], dtype=dtype)))


# ------------------------------------------------------------ parameters checked at every method
class _Checked(DeviceMixin, BaseEstimator):
    """A toy estimator whose non-fit method goes through ``validates_params``."""

    _parameter_constraints = {
        "alpha": [Interval(Real, 0, None, closed="left")],
        "sizes": ["array-like"],
        **DeviceMixin._device_constraints,
    }

    def __init__(self, alpha=1.0, sizes=(3,), device="cpu"):
        self.alpha = alpha
        self.sizes = sizes
        self.device = device

    def _cross_check_params(self):
        if any(int(s) < 1 for s in self.sizes):
            raise ValueError(f"sizes must hold integers >= 1, got {self.sizes!r}.")

    @validates_params
    def fit(self, X):
        self.mean_ = np.asarray(X).mean(axis=0)
        return self

    @validates_params
    def transform(self, X):
        """Scaled ``X``."""
        return self.alpha * (np.asarray(X) - self.mean_)


def test_params_changed_after_fit_are_validated_at_predict(rng):
    X = rng.standard_normal((6, 2))
    est = _Checked().fit(X)
    before = est.transform(X)
    est.set_params(alpha=-1.0)
    with pytest.raises(ValueError, match="'alpha' parameter of _Checked"):
        est.transform(X)
    est.alpha = "bogus"  # plain attribute assignment is caught the same way
    with pytest.raises(ValueError, match="'alpha' parameter"):
        est.transform(X)
    est.alpha = 1.0
    np.testing.assert_array_equal(est.transform(X), before)


def test_the_estimators_own_cross_checks_run_too_and_see_in_place_edits(rng):
    X = rng.standard_normal((6, 2))
    est = _Checked(sizes=[3]).fit(X)
    est.transform(X)
    est.sizes.append(0)  # the same list object, edited in place
    with pytest.raises(ValueError, match="sizes must hold integers >= 1"):
        est.transform(X)
    est.sizes.pop()
    assert est.transform(X).shape == X.shape


def test_param_check_is_cached_until_a_parameter_changes(rng, monkeypatch):
    X = rng.standard_normal((6, 2))
    est = _Checked().fit(X)
    calls = []
    from sknn_gpu import _constraints

    real = _constraints.validate_parameter_constraints
    counted = lambda *a: calls.append(1) or real(*a)  # noqa: E731
    monkeypatch.setattr(_constraints, "validate_parameter_constraints", counted)
    est.transform(X)
    est.transform(X)
    assert calls == []  # fit validated these values: nothing to do again
    est.set_params(alpha=2.0)
    est.transform(X)
    est.transform(X)
    assert calls == [1]
    est.alpha = float("2.0")  # an equal value in a new object: still no second validation
    est.transform(X)
    assert calls == [1]
    clone(est).fit(X).transform(X)  # another instance is validated on its own
    assert calls == [1, 1]


def test_param_check_leaves_the_instance_dict_and_pickles_alone(rng):
    X = rng.standard_normal((6, 2))
    est = _Checked().fit(X)
    state = dict(est.__dict__)
    est.transform(X)
    assert est.__dict__.keys() == state.keys()
    est2 = pickle.loads(pickle.dumps(est))
    est2.alpha = -3.0
    with pytest.raises(ValueError, match="'alpha' parameter"):
        est2.transform(X)


def test_param_check_honours_sklearns_skip_parameter_validation(rng):
    import sklearn

    X = rng.standard_normal((6, 2))
    est = _Checked().fit(X)
    est.alpha = -1.0
    with sklearn.config_context(skip_parameter_validation=True):
        est.transform(X)  # the user opted out of scikit-learn's constraint checks
        est.sizes = (0,)
        with pytest.raises(ValueError, match="sizes must hold"):  # the estimator's own still run
            est.transform(X)
    est.sizes = (3,)
    with pytest.raises(ValueError, match="'alpha' parameter"):
        est.transform(X)


def test_validates_params_keeps_the_method_name_and_docstring():
    assert _Checked.transform.__name__ == "transform"
    assert _Checked.transform.__doc__ == "Scaled ``X``."


# ------------------------------------------------------------ dates and time spans are not numbers
@pytest.mark.parametrize("dtype", ["datetime64[ns]", "datetime64[D]", "timedelta64[s]"])
def test_reject_time_dtypes_names_the_dtype(dtype):
    T = np.arange(6).reshape(3, 2).astype(dtype)
    with pytest.raises(ValueError, match=rf"X has dtype {re.escape(str(T.dtype))}: dates and time spans"):
        reject_time_dtypes(T)
    with pytest.raises(ValueError, match=r"y has dtype"):
        reject_time_dtypes(T[:, 0], input_name="y")
    with pytest.raises(ValueError, match=r"dtype (datetime|timedelta)64"):
        reject_time_dtypes([list(row) for row in T])  # a list of NumPy dates


def test_reject_time_dtypes_reads_data_frame_columns_and_lets_numbers_through():
    class _Frame:  # the two attributes of a pandas/polars frame that the check reads
        columns = ["price", "when"]
        dtypes = [np.dtype(np.float64), np.dtype("datetime64[us]")]

    with pytest.raises(ValueError, match=r"dtype datetime64\[us\] \(column 'when'\)"):
        reject_time_dtypes(_Frame())

    class _Polars:  # polars dtypes have no NumPy kind: their names tell
        columns = ["a", "b"]
        dtypes = ["Float64", "Duration(time_unit='us')"]

    with pytest.raises(ValueError, match=r"Duration\(time_unit='us'\) \(column 'b'\)"):
        reject_time_dtypes(_Polars())
    for ok in (np.ones((2, 2)), np.ones(3, dtype=np.int8), sp.csr_matrix(np.eye(2)), [[1, 2]], [[1], [1, 2]]):
        assert reject_time_dtypes(ok) is None


# ------------------------------------------------------------ the process's address-space limit
def _address_space_limit(monkeypatch, soft):
    """Make ``resource.getrlimit(RLIMIT_AS)`` report ``soft`` bytes (other limits as they are)."""
    resource = pytest.importorskip("resource")
    real = resource.getrlimit
    fake = lambda which: (soft, resource.RLIM_INFINITY) if which == resource.RLIMIT_AS else real(which)
    monkeypatch.setattr(resource, "getrlimit", fake)
    return resource


def test_check_memory_refuses_work_beyond_the_address_space_limit(monkeypatch):
    used = _backend._address_space_used()
    assert used > 0  # this process's virtual size
    limit = used + (256 << 20)  # room for 256 MiB more, far below MemAvailable on any test box
    _address_space_limit(monkeypatch, limit)
    assert free_memory("cpu") <= 256 << 20
    assert check_memory(64 << 20, "cpu") == 64 << 20
    with pytest.raises(InsufficientMemoryError, match=rf"address-space limit \(RLIMIT_AS\) of {limit} bytes"):
        check_memory(1 << 30, "cpu", what="a 1 GiB buffer")


def test_estimator_work_beyond_the_address_space_limit_is_refused_before_allocating(monkeypatch, rng):
    from sknn_gpu.sparse import SparseNetRegressor, _sparsenet

    _address_space_limit(monkeypatch, _backend._address_space_used() + (32 << 20))
    built, real = [], _sparsenet.DenseMasked
    monkeypatch.setattr(_sparsenet, "DenseMasked", lambda *a, **k: built.append(a) or real(*a, **k))
    reg = SparseNetRegressor(hidden_layer_sizes=(4096, 4096), max_iter=1, device="cpu")
    with pytest.raises(InsufficientMemoryError, match=r"RLIMIT_AS"):
        reg.fit(rng.standard_normal((50, 8)), rng.standard_normal(50))
    assert built == [] and not hasattr(reg, "graph_")  # no weights were drawn


def test_no_address_space_limit_or_no_resource_module_leaves_memavailable(monkeypatch):
    resource = pytest.importorskip("resource")
    monkeypatch.setattr(_backend, "_host_available_bytes", lambda: 5 << 30)  # MemAvailable, held still
    monkeypatch.setattr(resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert free_memory("cpu") == 5 << 30
    monkeypatch.setattr(_backend, "resource", None)  # a platform without the module (Windows)
    assert free_memory("cpu") == 5 << 30
