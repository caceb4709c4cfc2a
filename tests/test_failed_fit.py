"""A fit that fails keeps the model the estimator had, or leaves it cleanly unfitted.

Never half-fitted: after the error, either every fitted attribute is back and the
estimator answers as before, or none is left and it raises NotFittedError.
"""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning, NotFittedError

from sknn_gpu import DTCNNHalftoner, GBNNMemory, GPUMLPClassifier
from sknn_gpu._backend import to_host
from sknn_gpu.sparse import SparseNetRegressor


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        yield


def _fitted_attributes(est):
    return {k: v for k, v in vars(est).items() if k.endswith("_") and not k.startswith("_")}


def _assert_kept_or_cleanly_unfitted(est, before, answer, expected):
    """``before``: the fitted attributes before the failed call; ``answer()`` asks the
    estimator (predict, transform) what ``expected`` holds from before the call."""
    now = _fitted_attributes(est)
    if now:  # kept: all of it, answering as before
        lost, gained = sorted(before.keys() - now.keys()), sorted(now.keys() - before.keys())
        assert not lost and not gained, f"half-fitted: lost {lost}, gained {gained}"
        np.testing.assert_array_equal(to_host(answer()), expected)
    else:  # unfitted: nothing left
        with pytest.raises(NotFittedError):
            answer()


def _fail_in_the_second_call(monkeypatch, owner, name):
    """``owner.name`` raises MemoryError (an out-of-memory half-way) from its second call on."""
    real, calls = getattr(owner, name), []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) >= 2:
            raise MemoryError("simulated out-of-memory half-way through fit")
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, failing)


@pytest.mark.parametrize("failure", ["too few labels", "half-way"])
def test_mlp(device, rng, monkeypatch, failure):
    from sknn_gpu.neural_network import _mlp

    X = rng.standard_normal((90, 6))
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0)
    clf = GPUMLPClassifier((5,), max_iter=3, random_state=0, device=device).fit(X, y)
    before, expected = _fitted_attributes(clf), to_host(clf.predict_proba(X))
    if failure == "half-way":
        _fail_in_the_second_call(monkeypatch, _mlp._TRAINERS[device], "epoch")
        with pytest.raises(MemoryError, match="simulated"):
            clf.fit(X, y)
    else:
        with pytest.raises(ValueError, match="inconsistent numbers of samples"):
            clf.fit(X, y[:-1])
    _assert_kept_or_cleanly_unfitted(clf, before, lambda: clf.predict_proba(X), expected)


@pytest.mark.parametrize("failure", ["too few targets", "half-way"])
def test_sparsenet(device, rng, monkeypatch, failure):
    from sknn_gpu.sparse import _sparsenet_train

    X = rng.standard_normal((90, 5))
    y = X[:, 0] - X[:, 3]
    reg = SparseNetRegressor(
        hidden_layer_sizes=(6,), max_iter=3, n_prune_steps=1, random_state=0, device=device
    )
    reg.fit(X, y)
    before, expected = _fitted_attributes(reg), to_host(reg.predict(X))
    if failure == "half-way":
        _fail_in_the_second_call(monkeypatch, _sparsenet_train.Adam, "step")
        with pytest.raises(MemoryError, match="simulated"):
            reg.fit(X, y)
    else:
        with pytest.raises(ValueError, match="inconsistent numbers of samples"):
            reg.fit(X, y[:-1])
    _assert_kept_or_cleanly_unfitted(reg, before, lambda: reg.predict(X), expected)


@pytest.mark.parametrize("bad", ["symbol beyond cluster_size", "non-integer symbol"])
def test_gbnn(device, rng, bad):
    msgs = rng.integers(0, 16, size=(40, 4))
    mem = GBNNMemory(cluster_size=16, device=device).fit(msgs)
    probe = msgs[:5].copy()
    probe[:, 0] = -1  # one erased symbol per probe
    before, expected = _fitted_attributes(mem), to_host(mem.predict(probe))
    worse = msgs.copy()
    if bad == "non-integer symbol":
        worse = worse.astype(np.float64)
        worse[3, 2] = 0.5
    else:
        worse[3, 2] = 16
    with pytest.raises(ValueError):
        mem.fit(worse)
    _assert_kept_or_cleanly_unfitted(mem, before, lambda: mem.predict(probe), expected)


def test_dtcnn(device, rng):
    img = rng.random((24, 20))
    ht = DTCNNHalftoner(device=device).fit(img)
    before, expected = _fitted_attributes(ht), to_host(ht.transform(img))
    bad = img.copy()
    bad[5, 7] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        ht.fit(bad)
    _assert_kept_or_cleanly_unfitted(ht, before, lambda: ht.transform(img), expected)
