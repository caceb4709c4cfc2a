"""Our own stand-ins in ``sknn_gpu/_sklearn_compat.py`` behave as scikit-learn's names do.

Each test compares with scikit-learn's private original while the installed release has
it, and skips once it is gone (then ours is what the package uses).
"""

import copy
import importlib

import numpy as np
import pytest
import sklearn
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.datasets import load_digits
from sklearn.neural_network import MLPClassifier

from sknn_gpu import _sklearn_compat as compat


def _sklearn(module, name):
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        pytest.skip(f"{module}.{name} is gone from this scikit-learn")


# ----------------------------------------------------------------------------- partial_fit
@pytest.mark.parametrize("which", ["ours", "sklearn"])
def test_check_partial_fit_first_call(which):
    check = (
        compat.check_partial_fit_first_call
        if which == "ours"
        else _sklearn("sklearn.utils.multiclass", "_check_partial_fit_first_call")
    )

    class Est:
        pass

    est = Est()
    with pytest.raises(ValueError, match="classes must be passed on the first call to partial_fit"):
        check(est, None)
    assert check(est, np.array(["b", "a", "b"])) is True
    assert est.classes_.tolist() == ["a", "b"]
    assert check(est, None) is False
    assert check(est, ["a", "b"]) is False
    with pytest.raises(ValueError, match="is not the same as on last call to partial_fit"):
        check(est, ["a", "c"])
    assert est.classes_.tolist() == ["a", "b"]


# ----------------------------------------------------------------------------- set_output
class _Scaler(TransformerMixin, BaseEstimator):
    def fit(self, X, y=None):
        return self

    def transform(self, X):
        return X

    def get_feature_names_out(self, input_features=None):
        return np.array(["a"])


@pytest.mark.parametrize("chosen", [None, "default", "pandas"])
@pytest.mark.parametrize("globally", ["default", "pandas"])
def test_own_output_config_reads_as_sklearn_does(chosen, globally):
    pytest.importorskip("pandas")
    sk = _sklearn("sklearn.utils._set_output", "_get_output_config")
    est = _Scaler()
    if chosen is not None:
        est.set_output(transform=chosen)
    with sklearn.config_context(transform_output=globally):
        assert compat._own_output_config("transform", est) == {"dense": sk("transform", est)["dense"]}
        assert compat._own_output_config("transform") == {"dense": sk("transform")["dense"]}
        want = chosen or globally
        assert compat._own_output_config("transform", est)["dense"] == want


# ----------------------------------------------------------------------------- MLP optimizers
SGD_CASES = [
    dict(lr_schedule="constant", momentum=0.9, nesterov=True),
    dict(lr_schedule="constant", momentum=0.9, nesterov=False),
    dict(lr_schedule="invscaling", momentum=0.5, nesterov=True, power_t=0.3),
    dict(lr_schedule="adaptive", momentum=0.0, nesterov=False),
]


def _params(rng):
    return [
        rng.standard_normal((5, 3)),
        rng.standard_normal((3, 2)),
        rng.standard_normal(3),
        rng.standard_normal(2),
    ]


def _drive(opt, params, rng):
    """Steps with fresh gradients, epoch ends and stalls; the learning rates seen."""
    seen = []
    for epoch in range(4):
        for _ in range(3):
            opt.update_params(params, [rng.standard_normal(p.shape) for p in params])
        opt.iteration_ends(30 * (epoch + 1))
        seen.append(opt.learning_rate)
        seen.append(opt.trigger_stopping("stall.", True))
        seen.append(opt.learning_rate)
    return seen


@pytest.mark.parametrize("kw", SGD_CASES, ids=lambda kw: "-".join(map(str, kw.values())))
def test_sgd_momentum_steps_as_sklearn_bit_for_bit(kw, capsys):
    sk_cls = _sklearn("sklearn.neural_network._stochastic_optimizers", "SGDOptimizer")
    rng = np.random.default_rng(7)
    p_ours = _params(rng)
    p_sk = copy.deepcopy(p_ours)
    ours = compat.SGDMomentum(p_ours, 0.05, **kw)
    theirs = sk_cls(p_sk, 0.05, **kw)
    seen_ours = _drive(ours, p_ours, np.random.default_rng(1))
    out_ours = capsys.readouterr().out
    seen_sk = _drive(theirs, p_sk, np.random.default_rng(1))
    assert out_ours == capsys.readouterr().out and "stall." in out_ours
    assert seen_ours == seen_sk
    for a, b in zip(p_ours + ours.velocities, p_sk + theirs.velocities):
        np.testing.assert_array_equal(a, b)


def test_adam_steps_as_sklearn_bit_for_bit(capsys):
    sk_cls = _sklearn("sklearn.neural_network._stochastic_optimizers", "AdamOptimizer")
    rng = np.random.default_rng(3)
    p_ours = _params(rng)
    p_sk = copy.deepcopy(p_ours)
    ours = compat.Adam(p_ours, 0.01, 0.8, 0.99, 1e-7)
    theirs = sk_cls(p_sk, 0.01, 0.8, 0.99, 1e-7)
    assert _drive(ours, p_ours, np.random.default_rng(2)) == _drive(theirs, p_sk, np.random.default_rng(2))
    assert ours.t == theirs.t == 12
    for a, b in zip(p_ours + ours.ms + ours.vs, p_sk + theirs.ms + theirs.vs):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("solver_kw", [dict(solver="adam"), dict(solver="sgd", learning_rate="invscaling")])
def test_own_optimizers_drive_sklearn_mlp_identically(solver_kw):
    """Put in scikit-learn's MLPClassifier (what ``as_sklearn`` does when scikit-learn's own
    classes are gone), ours train on exactly as scikit-learn's do."""
    X, y = load_digits(return_X_y=True)
    X = X[:400] / 16.0
    y = y[:400]
    a = MLPClassifier((12,), learning_rate_init=0.01, random_state=0, **solver_kw)
    a.partial_fit(X[:200], y[:200], classes=np.unique(y))
    b = copy.deepcopy(a)
    sk = b._optimizer
    if solver_kw["solver"] == "adam":
        mine = compat.Adam(b.coefs_ + b.intercepts_, sk.learning_rate_init, sk.beta_1, sk.beta_2, sk.epsilon)
        mine.t, mine.ms, mine.vs = sk.t, sk.ms, sk.vs
    else:
        mine = compat.SGDMomentum(
            b.coefs_ + b.intercepts_,
            sk.learning_rate_init,
            sk.lr_schedule,
            sk.momentum,
            sk.nesterov,
            sk.power_t,
        )
        mine.learning_rate, mine.velocities = sk.learning_rate, sk.velocities
    b._optimizer = mine
    for _ in range(3):
        a.partial_fit(X[200:], y[200:])
        b.partial_fit(X[200:], y[200:])
    assert a.loss_curve_ == b.loss_curve_
    for p, q in zip(a.coefs_ + a.intercepts_, b.coefs_ + b.intercepts_):
        np.testing.assert_array_equal(p, q)


def test_as_sklearn_hands_over_sklearn_optimizer_objects():
    """While scikit-learn has its optimizer classes, the exported model holds them: it is
    scikit-learn's objects only and loads where sknn_gpu is not installed."""
    from sknn_gpu.neural_network import GPUMLPClassifier

    _sklearn("sklearn.neural_network._stochastic_optimizers", "AdamOptimizer")
    X, y = load_digits(return_X_y=True)
    ours = GPUMLPClassifier((8,), max_iter=2, random_state=0, device="cpu").fit(X[:200] / 16.0, y[:200])
    assert type(ours.as_sklearn()._optimizer).__module__.startswith("sklearn.")
    assert compat.sklearn_mlp_optimizers()[1].__module__.startswith("sklearn.")
