"""The one module of sknn_gpu that touches scikit-learn's private names, and only behind a
fallback.

A private name is one whose module path or own name has a component starting with
``_`` (``sklearn.utils._set_output._get_output_config``): scikit-learn may move or change it
in any release without notice. Every other module of the package imports such names from
here, never from scikit-learn, and ``tests/test_architecture.py`` fails when one does, or
when one is imported here outside a ``try`` that falls back to our own code on
``ImportError``. So a scikit-learn release that moves a private name costs a fallback, not
an import error, and the package declares no upper bound on scikit-learn.

scikit-learn versions
---------------------
The oldest supported scikit-learn is the lower bound in ``pyproject.toml`` (1.6);
``make test-sklearn-oldest`` runs the fast tests against it and ``make test-sklearn-latest``
against the newest release the package index serves, each in a separate environment.

What is here, and why
---------------------
Our own, on public API only:

* the parameter constraints (``Interval``, ``StrOptions``, ``Options``, ``RealNotInt``,
  ``HasMethods``), their check and ``_fit_context``: :mod:`sknn_gpu._constraints`, in
  scikit-learn's vocabulary (the same words in ``_parameter_constraints``, the same kind of
  message, the same ``skip_parameter_validation`` setting honoured);
* :func:`check_sample_weight`, :func:`get_feature_names`, :func:`check_feature_names_in`:
  the checks scikit-learn's estimators make of ``sample_weight``, of a DataFrame's column
  names and of ``get_feature_names_out``'s ``input_features``;
* :func:`check_partial_fit_first_call` -- the ``classes`` handling of ``partial_fit``.

Imported from scikit-learn while it has them, ours otherwise:

* ``get_output_config``: an estimator's ``set_output`` choice is kept in a private
  attribute, so no public function reads it; scikit-learn's own reader is used, and when
  it is gone, our reader of the same attribute and of the public global
  ``transform_output`` setting.
* ``sklearn_mlp_optimizers``: the optimizer classes scikit-learn's ``MLPClassifier``
  drives. ``GPUMLPClassifier.as_sklearn`` puts the optimizer state in them, so the
  model it hands over is scikit-learn's own objects through and through (it pickles and
  trains on without sknn_gpu installed). Our own training never uses them. When they
  are gone, :class:`SGDMomentum` and :class:`Adam` below (the same interface and the same
  arithmetic, in the same order) take their place.
"""

from __future__ import annotations

from numbers import Number

import numpy as np
import sklearn
from sklearn.utils import check_array
from sklearn.utils.multiclass import unique_labels

from ._constraints import HasMethods, Interval, Options, RealNotInt, StrOptions
from ._constraints import fit_context as _fit_context

__all__ = [
    "_fit_context",
    "Interval",
    "StrOptions",
    "Options",
    "RealNotInt",
    "HasMethods",
    "check_sample_weight",
    "check_feature_names_in",
    "get_feature_names",
    "get_output_config",
    "check_partial_fit_first_call",
    "sklearn_mlp_optimizers",
    "SGDMomentum",
    "Adam",
]


# ----------------------------------------------------------------------------- sample_weight
def check_sample_weight(
    sample_weight, X, *, dtype=None, ensure_non_negative=False, allow_all_zero_weights=False
):
    """``sample_weight`` as a 1-D float array of one weight per row of ``X`` (an array, or
    anything with ``shape``): ones for None, a scalar repeated, else the array checked
    (one dimension, the right length, finite; non-negative and not all zero when asked).

    ``dtype``: float64 or float32 (default: float32 for float32 ``X``, else float64).

    Raises
    ------
    ValueError
        Naming what is wrong with ``sample_weight``.
    """
    n = int(X.shape[0]) if hasattr(X, "shape") else len(X)
    if dtype is None:
        dtype = np.float32 if getattr(X, "dtype", None) == np.float32 else np.float64
    if dtype not in (np.float32, np.float64):
        dtype = np.float64
    if sample_weight is None:
        return np.ones(n, dtype=dtype)
    if isinstance(sample_weight, Number):
        w = np.full(n, sample_weight, dtype=dtype)
    else:
        w = check_array(
            sample_weight,
            accept_sparse=False,
            ensure_2d=False,
            dtype=dtype,
            order="C",
            input_name="sample_weight",
        )
        if w.ndim != 1:
            raise ValueError(f"sample_weight must be 1-D, got an array of shape {w.shape}.")
        if w.shape[0] != n:
            raise ValueError(
                f"sample_weight has {w.shape[0]} weights for {n} samples; give one weight per sample."
            )
    if not np.isfinite(w).all():
        raise ValueError("sample_weight must be finite (it holds NaN or infinity).")
    if ensure_non_negative and (w < 0).any():
        raise ValueError("Negative values in data passed to sample_weight: weights must be >= 0.")
    if not allow_all_zero_weights and n and not w.any():
        raise ValueError("Sample weights must contain at least one non-zero number.")
    return w


# ----------------------------------------------------------------------------- feature names
def get_feature_names(X):
    """The column names of a DataFrame ``X`` as an object array of str, or None (no columns,
    or none of them named by a string).

    Raises
    ------
    TypeError
        When some column names are strings and others are not.
    """
    columns = getattr(X, "columns", None)
    if columns is None or isinstance(X, np.ndarray):
        return None
    names = np.asarray(list(columns), dtype=object)
    if names.size == 0:
        return None
    kinds = sorted({type(name).__name__ for name in names})
    strings = [isinstance(name, str) for name in names]
    if all(strings):
        return names
    if any(strings):
        raise TypeError(
            f"Feature names are only supported if all input features have string names, but the "
            f"input has {kinds} as column name types. Convert them all to strings (for example "
            "X.columns = X.columns.astype(str)), or give names of no string at all to store none."
        )
    return None


def check_feature_names_in(est, input_features=None, *, generate_names=True):
    """``input_features`` of ``get_feature_names_out`` checked against the fitted ``est``.

    Given: they must equal ``feature_names_in_`` when the estimator has it, and have
    ``n_features_in_`` entries. None: ``feature_names_in_``, else ``x0, x1, ...`` when
    ``generate_names`` (else None).

    Raises
    ------
    ValueError
        When the given names differ from the fitted ones or have the wrong length.
    """
    fitted = getattr(est, "feature_names_in_", None)
    n = getattr(est, "n_features_in_", None)
    if input_features is not None:
        given = np.asarray(input_features, dtype=object)
        if fitted is not None and not np.array_equal(fitted, given):
            raise ValueError("input_features is not equal to feature_names_in_")
        if n is not None and len(given) != n:
            raise ValueError(
                f"input_features should have length equal to number of features ({n}), got {len(given)}"
            )
        return given
    if fitted is not None:
        return fitted
    if not generate_names or n is None:
        return None
    return np.asarray([f"x{i}" for i in range(n)], dtype=object)


# ----------------------------------------------------------------------------- set_output
def _own_output_config(method, estimator=None):
    """``{'dense': container}`` for ``method`` of ``estimator``: its ``set_output`` choice,
    else the global ``transform_output`` setting (``'default'``, ``'pandas'``, ``'polars'``)."""
    chosen = getattr(estimator, "_sklearn_output_config", {}) if estimator is not None else {}
    dense = chosen.get(method, sklearn.get_config()[f"{method}_output"])
    return {"dense": dense}


try:
    from sklearn.utils._set_output import _get_output_config as get_output_config
except ImportError:  # pragma: no cover - a scikit-learn newer than any tested
    get_output_config = _own_output_config


# ----------------------------------------------------------------------------- partial_fit
def check_partial_fit_first_call(est, classes=None) -> bool:
    """Record ``classes`` on the first ``partial_fit`` call of ``est``; True on that call.

    The first call (``est`` has no ``classes_``, or it is None) needs ``classes``: they
    are stored, sorted and distinct, as ``est.classes_`` and True is returned. A later
    call may pass ``classes`` again, which must then be the same set; False is returned.

    Raises
    ------
    ValueError
        When the first call has no ``classes``, or a later one passes different ones.
    """
    known = getattr(est, "classes_", None)
    if classes is None:
        if known is None:
            raise ValueError("classes must be passed on the first call to partial_fit.")
        return False
    wanted = unique_labels(classes)
    if known is None:
        est.classes_ = wanted
        return True
    if not np.array_equal(known, wanted):
        raise ValueError(
            f"`classes={classes!r}` is not the same as on last call to partial_fit, was: {known!r}"
        )
    return False


# ----------------------------------------------------------------------------- MLP optimizers
class _Optimizer:
    """What scikit-learn's ``MLPClassifier`` asks of its optimizer: ``update_params``
    (add the step to each parameter in place), ``iteration_ends`` (after each epoch),
    ``trigger_stopping`` (on no improvement: True to stop) and ``learning_rate``."""

    def __init__(self, learning_rate_init):
        self.learning_rate_init = learning_rate_init
        self.learning_rate = float(learning_rate_init)

    def update_params(self, params, grads):
        for param, step in zip(params, self._steps(grads)):
            param += step

    def iteration_ends(self, time_step):
        pass

    def trigger_stopping(self, msg, verbose):
        if verbose:
            print(msg + " Stopping.")
        return True


class SGDMomentum(_Optimizer):
    """Stochastic gradient descent with (Nesterov) momentum and a learning-rate schedule.

    ``velocities`` (one array per parameter) hold the momentum; ``lr_schedule`` is
    ``'constant'``, ``'invscaling'`` (``learning_rate_init / (t + 1) ** power_t`` after
    each epoch, ``t`` the samples seen) or ``'adaptive'`` (divided by 5 on each stall,
    stop below 1e-6).
    """

    def __init__(
        self, params, learning_rate_init=0.1, lr_schedule="constant", momentum=0.9, nesterov=True, power_t=0.5
    ):
        super().__init__(learning_rate_init)
        self.lr_schedule = lr_schedule
        self.momentum = momentum
        self.nesterov = nesterov
        self.power_t = power_t
        self.velocities = [np.zeros_like(p) for p in params]

    def iteration_ends(self, time_step):
        if self.lr_schedule == "invscaling":
            self.learning_rate = float(self.learning_rate_init) / (time_step + 1) ** self.power_t

    def trigger_stopping(self, msg, verbose):
        if self.lr_schedule != "adaptive":
            return super().trigger_stopping(msg, verbose)
        if self.learning_rate <= 1e-6:
            if verbose:
                print(msg + " Learning rate too small. Stopping.")
            return True
        self.learning_rate /= 5.0
        if verbose:
            print(msg + f" Setting learning rate to {self.learning_rate:f}")
        return False

    def _steps(self, grads):
        mu, lr = self.momentum, self.learning_rate
        self.velocities = [mu * v - lr * g for v, g in zip(self.velocities, grads)]
        if not self.nesterov:
            return self.velocities
        # Nesterov: the step looks ahead along the new velocity
        return [mu * v - lr * g for v, g in zip(self.velocities, grads)]


class Adam(_Optimizer):
    """Adam (Kingma and Ba, 2014): moment estimates ``ms``, ``vs``, step count ``t``; the
    bias corrections are folded into ``learning_rate``."""

    def __init__(self, params, learning_rate_init=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-8):
        super().__init__(learning_rate_init)
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.t = 0
        self.ms = [np.zeros_like(p) for p in params]
        self.vs = [np.zeros_like(p) for p in params]

    def _steps(self, grads):
        b1, b2 = self.beta_1, self.beta_2
        self.t += 1
        self.ms = [b1 * m + (1 - b1) * g for m, g in zip(self.ms, grads)]
        self.vs = [b2 * v + (1 - b2) * (g**2) for v, g in zip(self.vs, grads)]
        self.learning_rate = self.learning_rate_init * np.sqrt(1 - b2**self.t) / (1 - b1**self.t)
        return [-self.learning_rate * m / (np.sqrt(v) + self.epsilon) for m, v in zip(self.ms, self.vs)]


def sklearn_mlp_optimizers():
    """``(SGDOptimizer, AdamOptimizer)``: scikit-learn's own while it has them (see the
    module docstring), else :class:`SGDMomentum` and :class:`Adam`."""
    try:
        from sklearn.neural_network._stochastic_optimizers import AdamOptimizer, SGDOptimizer
    except ImportError:  # pragma: no cover - a scikit-learn newer than any tested
        return SGDMomentum, Adam
    return SGDOptimizer, AdamOptimizer
