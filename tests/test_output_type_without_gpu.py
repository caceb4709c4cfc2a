"""output_type='cupy' where CUDA is not usable: the error names output_type, not device.

CUDA is hidden with SKNN_GPU_DISABLE_CUDA, so these tests take the same path on a GPU
machine as on a CPU-only one.
"""

import numpy as np
import pytest
import scipy.sparse as sp

import sknn_gpu
from sknn_gpu import _backend
from sknn_gpu._backend import same_type_as_input


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setenv(_backend.DISABLE_ENV, "1")
    _backend._reset_cache()
    yield
    monkeypatch.undo()
    _backend._reset_cache()


def _fitted(name, rng):
    """A CPU-fitted estimator of each family and what to call it on."""
    if name == "GBNNMemory":
        X = rng.integers(0, 16, size=(40, 4))
        return sknn_gpu.GBNNMemory(device="cpu", random_state=0).fit(X), "predict", X
    if name == "DTCNNHalftoner":
        X = rng.random((16, 16))
        return sknn_gpu.DTCNNHalftoner(device="cpu").fit(X), "transform", X
    if name == "FlyHashTransformer":
        X = rng.random((20, 6))
        return (
            sknn_gpu.FlyHashTransformer(k=4, n_components=32, device="cpu", random_state=0).fit(X),
            "transform",
            X,
        )
    X = rng.random((30, 4))
    y = (X[:, 0] > 0.5).astype(int)
    if name == "FlyNNClassifier":
        return (
            sknn_gpu.FlyNNClassifier(n_components=64, k=4, random_state=0, device="cpu").fit(X, y),
            "predict",
            X,
        )
    if name == "GPUMLPClassifier":
        est = sknn_gpu.GPUMLPClassifier(hidden_layer_sizes=(4,), max_iter=2, random_state=0, device="cpu")
        return est.fit(X, y), "predict", X
    est = sknn_gpu.SparseNetRegressor(hidden_layer_sizes=(4,), max_iter=2, random_state=0, device="cpu")
    return est.fit(X, X.sum(axis=1)), "predict", X


ESTIMATORS = [
    "GBNNMemory",
    "DTCNNHalftoner",
    "FlyHashTransformer",
    "FlyNNClassifier",
    "GPUMLPClassifier",
    "SparseNetRegressor",
]


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("name", ESTIMATORS)
def test_estimator_output_type_cupy_names_output_type(name, rng, no_cuda):
    est, method, X = _fitted(name, rng)
    est.set_params(output_type="cupy")
    with pytest.raises(RuntimeError, match="output_type='cupy'") as err:
        getattr(est, method)(X)
    msg = str(err.value)
    assert "estimator's output_type parameter" in msg and "device='cuda'" not in msg
    assert _backend.DISABLE_ENV in msg  # why CUDA is not usable
    est.set_params(output_type="numpy")
    out = getattr(est, method)(X)  # host output needs no GPU
    assert isinstance(out, np.ndarray) or sp.issparse(out)


def test_config_context_output_type_cupy_names_the_context(rng, no_cuda):
    est, method, X = _fitted("GBNNMemory", rng)
    with sknn_gpu.config_context(output_type="cupy"):
        with pytest.raises(RuntimeError, match="output_type='cupy'.*config_context"):
            est.predict(X)
    assert isinstance(est.predict(X), np.ndarray)  # the context is over


def test_same_type_as_input_checks_before_moving(no_cuda):
    x = np.arange(3)
    for result in (x, (x, x)):
        with pytest.raises(RuntimeError, match="output_type='cupy'"):
            same_type_as_input(result, x, "cupy")
    assert same_type_as_input(x, x, "numpy") is x
    assert same_type_as_input(x, x, "input") is x
