"""The one module of sknn_gpu that touches scikit-learn's private names.

A private name is one whose module path or own name has a component starting with
``_`` (``sklearn.utils._param_validation.Interval``, ``sklearn.base._fit_context``):
scikit-learn may move or change it in any release without notice. Every other module of
the package imports such names from here, never from scikit-learn, and
``tests/test_architecture.py`` fails when one does. So when a new scikit-learn release
breaks something private, this file is the only place to mend.

scikit-learn versions
---------------------
The oldest supported scikit-learn is the lower bound in ``pyproject.toml`` (1.6);
``make test-sklearn-oldest`` runs the fast tests against it in a separate environment.
The upper bound is the newest release the test suite has passed on. It is lifted by
running the suite against the new release: only this module can break, and what breaks
is either mended here or given our own implementation here.

What is here, and why
---------------------
Imported from scikit-learn (private, kept on purpose):

* ``_fit_context`` and the parameter constraints (``Interval``, ``StrOptions``,
  ``Options``, ``RealNotInt``, ``HasMethods``). They are scikit-learn's parameter
  validation itself: the constraint objects in ``_parameter_constraints`` are what
  scikit-learn's ``set_params``, ``clone``, ``GridSearchCV`` and the common estimator
  checks read, and ``_fit_context`` is what applies ``skip_parameter_validation`` /
  ``config_context`` the way scikit-learn's own estimators do. Replacing them would
  mean our own constraint classes, our own validation decorator and our own error
  messages, and keeping all of that in step with scikit-learn's behaviour by hand; the
  names have been stable since 1.3.
* ``_check_sample_weight``, ``_check_feature_names_in``, ``_get_feature_names``: the
  same checks and messages as scikit-learn's estimators give (the common checks compare
  them); ours would have to follow every change of theirs.
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

Our own (public API only):

* :func:`check_partial_fit_first_call` -- the ``classes`` handling of ``partial_fit``.
"""

from __future__ import annotations

import numpy as np
import sklearn

# scikit-learn's parameter validation: see the module docstring for why these stay imported.
from sklearn.base import _fit_context
from sklearn.utils._param_validation import HasMethods, Interval, Options, RealNotInt, StrOptions
from sklearn.utils.multiclass import unique_labels
from sklearn.utils.validation import _check_feature_names_in, _check_sample_weight, _get_feature_names

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

check_sample_weight = _check_sample_weight
check_feature_names_in = _check_feature_names_in
get_feature_names = _get_feature_names


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
