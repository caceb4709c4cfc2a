"""Hostile use of every estimator, as properties over all six.

* Any invalid value of any constrained parameter, set after ``fit``, makes every public
  method that reads parameters raise a ``ValueError``/``TypeError`` naming the parameter,
  instead of computing with it. The invalid values are generated from each estimator's own
  ``_parameter_constraints`` (one per constraint that no other constraint of the parameter
  accepts), so a new parameter is covered the day it is declared.
* A ``fit`` refused for bad input (NaN, infinity, dates, text, a wrong number of dimensions,
  no rows, mismatched ``y``) leaves the estimator as it was: the same answers as before,
  or cleanly unfitted. Hypothesis draws the bad input and where it goes wrong.
"""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.exceptions import ConvergenceWarning, NotFittedError

from sknn_gpu import (
    DTCNNHalftoner,
    FlyHashTransformer,
    FlyNNClassifier,
    GBNNMemory,
    GPUMLPClassifier,
    SparseNetRegressor,
)
from sknn_gpu._backend import to_host
from sknn_gpu._constraints import HasMethods, Interval, Options, make_constraint


def _gbnn(device, rng):
    msgs = rng.integers(0, 32, size=(12, 4))  # a lightly loaded memory: no overload warning
    probes = msgs[:6].copy()
    probes[:, 1] = -1
    est = GBNNMemory(cluster_size=32, device=device, random_state=0)
    return est, (msgs,), {"predict": (probes,), "retrieve": (probes,), "score": (probes, msgs[:6])}


def _flyhash(device, rng):
    X = rng.random((20, 8))
    est = FlyHashTransformer(n_components=64, k=4, random_state=0, device=device)
    return est, (X,), {"transform": (X,)}


def _flynn(device, rng):
    X = rng.random((40, 8))
    y = rng.integers(0, 3, size=40)
    est = FlyNNClassifier(n_components=256, k=8, random_state=0, device=device)
    calls = {name: (X,) for name in ("predict", "predict_proba", "decision_function", "novelty")}
    calls["score"] = (X, y)
    return est, (X, y), calls


def _dtcnn(device, rng):
    img = rng.random((12, 14))
    return DTCNNHalftoner(device=device, max_iter=8), (img,), {"transform": (img,)}


def _sparsenet(device, rng):
    X = rng.random((40, 5))
    y = X @ rng.random(5)
    est = SparseNetRegressor(
        hidden_layer_sizes=(8,), max_iter=5, fine_tune_iter=2, random_state=0, device=device
    )
    return est, (X, y), {"predict": (X,), "score": (X, y)}


def _mlp(device, rng):
    X = rng.random((40, 5))
    y = rng.integers(0, 3, size=40)
    est = GPUMLPClassifier(hidden_layer_sizes=(8,), max_iter=5, random_state=0, device=device)
    return est, (X, y), {"predict": (X,), "predict_proba": (X,), "score": (X, y)}


CASES = {
    "GBNNMemory": _gbnn,
    "FlyHashTransformer": _flyhash,
    "FlyNNClassifier": _flynn,
    "DTCNNHalftoner": _dtcnn,
    "SparseNetRegressor": _sparsenet,
    "GPUMLPClassifier": _mlp,
}


def _invalid_value(constraint):
    """A value just outside one constraint (an interval's bound passed, a string or number not
    among the options, an object without the methods); NotImplementedError for a type or a
    word, which any other type breaks."""
    if isinstance(constraint, Interval):
        if constraint.left is not None:
            return constraint.left - 1 if constraint.type.__name__ == "Integral" else constraint.left - 0.5
        if constraint.right is not None:
            return constraint.right + 1 if constraint.type.__name__ == "Integral" else constraint.right + 0.5
        raise NotImplementedError
    if isinstance(constraint, Options):
        if constraint.type is str:
            return "not_" + "_".join(sorted(constraint.options))
        return -123.25
    if isinstance(constraint, HasMethods):
        return object()
    raise NotImplementedError


def _invalid_values(cls):
    """(parameter, value) pairs that break one constraint and satisfy no other one."""
    out = []
    for name, constraints in cls._parameter_constraints.items():
        if constraints == "no_validation":
            continue
        for constraint in constraints:
            try:
                bad = _invalid_value(make_constraint(constraint))
            except NotImplementedError:  # e.g. a type constraint: every other type is "valid" elsewhere
                continue
            if any(make_constraint(c).is_satisfied_by(bad) for c in constraints):
                continue
            out.append((name, bad))
    return out


@pytest.fixture(scope="module")
def fitted():
    """One fitted estimator per (name, device), shared by the parameter cases."""
    cache = {}

    def get(name, device):
        if (name, device) not in cache:
            est, fit_args, calls = CASES[name](device, np.random.default_rng(0))
            cache[name, device] = (est.fit(*fit_args), calls)
        return cache[name, device]

    return get


# the fits are a few epochs long on purpose
pytestmark = pytest.mark.filterwarnings(f"ignore::{ConvergenceWarning.__module__}.ConvergenceWarning")


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_invalid_parameter_set_after_fit_is_refused_by_every_method(name, device, fitted):
    est, calls = fitted(name, device)
    invalid = _invalid_values(type(est))
    assert len(invalid) >= 5, f"{name}: too few generated cases to mean anything ({invalid})"
    for param, bad in invalid:
        good = est.get_params()[param]
        est.set_params(**{param: bad})
        try:
            for method, args in calls.items():
                with pytest.raises((ValueError, TypeError), match=param):
                    getattr(est, method)(*args)
        finally:
            est.set_params(**{param: good})
    for method, args in calls.items():  # the valid values work again
        getattr(est, method)(*args)


def _answers(est, calls):
    out = {}
    for method, args in calls.items():
        value = getattr(est, method)(*args)
        if method == "retrieve":  # a result object; predict gives the same completions
            continue
        value = value.toarray() if sp.issparse(value) else value
        out[method] = to_host(np.asarray(value))
    return out


_BAD_KINDS = ("nan", "inf", "datetime", "ndim", "strings", "y_length")


@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=25)
@given(kind=st.sampled_from(_BAD_KINDS), where=st.floats(0.0, 0.999))
def test_a_refused_fit_leaves_the_estimator_as_it_was(name, kind, where):
    est, fit_args, calls = CASES[name]("cpu", np.random.default_rng(1))
    est.fit(*fit_args)
    before = _answers(est, calls)
    X = np.asarray(fit_args[0])
    bad_args = list(fit_args)
    flat = int(where * X.size)
    if kind in ("nan", "inf"):
        if X.dtype.kind in "iu":  # symbols: a float array with one non-finite entry
            X = X.astype(np.float64)
        X = X.astype(np.float64, copy=True)
        X.flat[flat] = np.nan if kind == "nan" else np.inf
        bad_args[0] = X
    elif kind == "datetime":
        bad_args[0] = (X * 1000).astype("int64").astype("datetime64[s]")
    elif kind == "ndim":
        bad_args[0] = X[None, None, None]  # 5-D: no estimator reads that
    elif kind == "strings":
        bad_args[0] = X.astype(str).astype(object)
        bad_args[0].flat[flat] = "not a number"
    elif kind == "y_length":
        if len(bad_args) < 2:  # unsupervised: a fit on one row where the estimator needs more
            bad_args[0] = X[:0]
        else:
            bad_args[1] = np.asarray(bad_args[1])[: max(1, int(where * len(bad_args[1])))]
    with pytest.raises((ValueError, TypeError)):
        est.fit(*bad_args)
    try:
        after = _answers(est, calls)
    except NotFittedError:  # cleanly unfitted is allowed; half-fitted is not
        return
    for method, value in before.items():
        if value is not None:
            np.testing.assert_array_equal(
                after[method], value, err_msg=f"{name}.{method} after a refused fit"
            )
