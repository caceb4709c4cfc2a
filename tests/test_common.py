"""scikit-learn's common estimator checks over every public sknn_gpu estimator."""

import inspect
import sys

import numpy as np
import pytest
import sklearn.utils
from _instances import DEFAULT_INSTANCES, expected_failed_checks, make_default_instance, make_instance
from sklearn.base import BaseEstimator
from sklearn.utils.estimator_checks import parametrize_with_checks

import sknn_gpu
from sknn_gpu.base import DeviceMixin


def public_estimators():
    """Every estimator class exported in ``sknn_gpu.__all__`` (discovered, not listed)."""
    found = []
    for name in sknn_gpu.__all__:
        obj = getattr(sknn_gpu, name)
        if inspect.isclass(obj) and issubclass(obj, BaseEstimator) and not inspect.isabstract(obj):
            found.append(obj)
    return found


ESTIMATORS = public_estimators()


def test_every_estimator_has_the_device_parameter():
    for cls in ESTIMATORS:
        assert issubclass(cls, DeviceMixin), cls
        params = cls().get_params()
        assert params.get("device") == "auto", f"{cls.__name__}: device must default to 'auto'"
        assert "output_type" in params and params["output_type"] is None, (
            f"{cls.__name__}: output_type must exist and default to None (follow the input)"
        )


@parametrize_with_checks(
    [make_instance(cls) for cls in ESTIMATORS],
    expected_failed_checks=expected_failed_checks,
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


@parametrize_with_checks(
    [make_default_instance(cls) for cls in ESTIMATORS if cls.__name__ in DEFAULT_INSTANCES],
    expected_failed_checks=expected_failed_checks,
)
def test_sklearn_compatible_on_defaults(estimator, check):
    """The same checks on the default parameters: what ``check_estimator(cls())`` sees."""
    check(estimator)


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_docstring_has_example(cls):
    doc = inspect.getdoc(cls) or ""
    assert "Examples" in doc and ">>>" in doc, f"{cls.__name__} needs an Examples section"


def _fit_data(cls):
    """Small data that ``cls.fit`` accepts (images for the halftoner, bit symbols for GBNN)."""
    rng = np.random.default_rng(0)
    name = cls.__name__
    if name == "DTCNNHalftoner":
        return (rng.random((12, 12)),), {}
    if name == "GBNNMemory":
        return (rng.integers(0, 4, size=(20, 3)),), {}
    X = rng.random((40, 5))
    if name == "SparseNetRegressor":
        return (X, X.sum(axis=1)), {}
    if name == "FlyHashTransformer":
        return (X,), {}
    return (X, (X[:, 0] > 0.5).astype(int)), {}


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_device_and_random_state_resolved_once_per_fit(cls, monkeypatch):
    """``device`` goes through the backend's resolver once per fit, ``random_state`` once."""
    from sknn_gpu import _backend

    calls = {"device": 0, "random_state": 0}
    real_resolve = _backend.resolve_device

    def counting_resolve(device="auto"):
        calls["device"] += 1
        return real_resolve(device)

    monkeypatch.setattr(_backend, "resolve_device", counting_resolve)
    real_crs = sklearn.utils.check_random_state

    def counting_crs(seed):
        calls["random_state"] += 1
        return real_crs(seed)

    # every sknn_gpu module that imported check_random_state gets the counting one
    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("sknn_gpu") and hasattr(mod, "check_random_state"):
            monkeypatch.setattr(mod, "check_random_state", counting_crs)
    est = make_instance(cls).set_params(device="cpu")
    args, kwargs = _fit_data(cls)
    est.fit(*args, **kwargs)
    assert calls["device"] == 1, f"{cls.__name__}.fit resolved device {calls['device']} times"
    assert calls["random_state"] <= 1, (
        f"{cls.__name__}.fit resolved random_state {calls['random_state']} times"
    )


def _outputs(est, args):
    """Every array-returning call of a fitted estimator on its fit data."""
    X = args[0]
    out = []
    for name in ("predict", "transform", "predict_proba"):
        if hasattr(est, name):
            out.append(getattr(est, name)(X))
    return out


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_output_type_parameter_is_validated_and_honoured(cls):
    import scipy.sparse as sp

    args, kwargs = _fit_data(cls)
    est = make_instance(cls).set_params(device="cpu", output_type="numpy").fit(*args, **kwargs)
    for out in _outputs(est, args):
        assert isinstance(out, np.ndarray) or sp.issparse(out), type(out)
    with pytest.raises(ValueError, match="output_type"):
        make_instance(cls).set_params(device="cpu", output_type="torch").fit(*args, **kwargs)


@pytest.mark.cuda
@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_output_type_numpy_and_cupy_on_the_gpu(cls):
    import cupy
    import scipy.sparse as sp

    args, kwargs = _fit_data(cls)
    est = make_instance(cls).set_params(device="cuda").fit(*args, **kwargs)
    dX = cupy.asarray(args[0])
    est.set_params(output_type="numpy")
    for out in _outputs(est, (dX,)):
        assert isinstance(out, np.ndarray) or sp.issparse(out), type(out)
    est.set_params(output_type="cupy")
    for out in _outputs(est, args):
        assert type(out).__module__.split(".")[0] in ("cupy", "cupyx"), type(out)


@pytest.mark.cuda
@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_gpu_pickle_round_trip_keeps_every_attribute_where_it_was(cls):
    """What was CuPy comes back CuPy, what was NumPy (``classes_``) stays NumPy; same outputs."""
    import pickle

    import scipy.sparse as sp

    from sknn_gpu._backend import to_host

    args, kwargs = _fit_data(cls)
    est = make_instance(cls).set_params(device="cuda").fit(*args, **kwargs)
    again = pickle.loads(pickle.dumps(est))
    for name, value in vars(est).items():
        if name in est._transient_attributes:
            continue
        assert type(getattr(again, name)) is type(value), name
    for a, b in zip(_outputs(est, args), _outputs(again, args), strict=True):
        assert type(a) is type(b)
        a, b = to_host(a), to_host(b)
        assert (a != b).nnz == 0 if sp.issparse(a) else np.array_equal(a, b)
