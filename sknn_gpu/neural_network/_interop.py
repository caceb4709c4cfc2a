"""GPUMLPClassifier to and from scikit-learn's MLPClassifier.

The two estimators share their parameters (but ``device``, ``output_type`` and
``kernels``, which are ours, and ``max_fun``, which is scikit-learn's L-BFGS only), their
fitted attributes (``coefs_`` as ``(fan_in, fan_out)`` NumPy arrays, ``intercepts_``, the
label binarizer, the loss history) and, for the stochastic solvers, the optimizer state:
ours is one flat buffer per moment (:class:`~._base.OptimizerState`), scikit-learn's a
list of arrays per moment (``SGDOptimizer.velocities``, ``AdamOptimizer.ms``/``vs``) in
the same order (coefficients, then intercepts). Everything is copied, so the two
estimators never share an array.
"""

from __future__ import annotations

import copy

from sklearn.neural_network import MLPClassifier
from sklearn.utils.validation import check_is_fitted

from .._sklearn_compat import sklearn_mlp_optimizers
from ..base import host_state
from ._base import Layout, OptimizerState, Solver

__all__ = ["to_sklearn", "from_sklearn"]

#: fitted state both estimators hold under the same names (copied when present)
_FITTED = (
    "coefs_",
    "intercepts_",
    "n_features_in_",
    "feature_names_in_",
    "classes_",
    "_label_binarizer",
    "n_layers_",
    "n_outputs_",
    "out_activation_",
    "loss_",
    "loss_curve_",
    "best_loss_",
    "validation_scores_",
    "best_validation_score_",
    "n_iter_",
    "t_",
    "_no_improvement_count",
    "_best_coefs",
    "_best_intercepts",
)


def _copy_fitted(source, target):
    for name in _FITTED:
        if hasattr(source, name):
            setattr(target, name, copy.deepcopy(host_state(getattr(source, name))))


def _shared_params(source, target_cls):
    """``source``'s parameters that ``target_cls`` also has (deep copies, as ``clone`` makes)."""
    known = target_cls().get_params(deep=False)
    return {k: copy.deepcopy(v) for k, v in source.get_params(deep=False).items() if k in known}


def _layout(est):
    return Layout([est.n_features_in_] + [c.shape[1] for c in est.coefs_])


def to_sklearn(est):
    """A fitted :class:`~sklearn.neural_network.MLPClassifier` equal to the fitted ``est``.

    Parameters
    ----------
    est : GPUMLPClassifier
        A fitted estimator (checked by the caller).

    Returns
    -------
    mlp : sklearn.neural_network.MLPClassifier
        Same parameters, weights, labels, loss history and optimizer state.
    """
    mlp = MLPClassifier(**_shared_params(est, MLPClassifier))
    _copy_fitted(est, mlp)
    opt = getattr(est, "_optimizer", None)
    if opt is not None:
        mlp._optimizer = _sklearn_optimizer(est, opt)
    return mlp


def _sklearn_optimizer(est, opt):
    """scikit-learn's optimizer object holding the state of our ``opt``."""
    SGDOptimizer, AdamOptimizer = sklearn_mlp_optimizers()

    layout = _layout(est)
    params = list(est.coefs_) + list(est.intercepts_)  # shapes and dtype only

    def moments(flat):
        coefs, inters = layout.unpack(flat)
        return coefs + inters

    if opt.solver == Solver.ADAM:
        sk = AdamOptimizer(params, est.learning_rate_init, est.beta_1, est.beta_2, est.epsilon)
        sk.t = int(opt.t)
        sk.ms, sk.vs = moments(opt.moment1), moments(opt.moment2)
        return sk
    sk = SGDOptimizer(
        params, est.learning_rate_init, est.learning_rate, est.momentum, est.nesterovs_momentum, est.power_t
    )
    sk.learning_rate = float(opt.lr)
    if opt.moment1 is not None:
        sk.velocities = moments(opt.moment1)
    return sk


def from_sklearn(cls, mlp, device="auto", **params):
    """A fitted ``cls`` (GPUMLPClassifier) equal to the fitted MLPClassifier ``mlp``.

    Parameters
    ----------
    cls : type
        GPUMLPClassifier (or a subclass).
    mlp : sklearn.neural_network.MLPClassifier
        A fitted estimator.
    device : {'auto', 'cpu', 'cuda'}, default='auto'
        Resolved once here into ``device_``.
    **params
        Further parameters of the new estimator.

    Returns
    -------
    est : GPUMLPClassifier
        The imported estimator.

    Raises
    ------
    TypeError
        When ``mlp`` is not an ``MLPClassifier``.
    sklearn.exceptions.NotFittedError
        When ``mlp`` is not fitted.
    """
    if not isinstance(mlp, MLPClassifier):
        raise TypeError(
            f"from_sklearn takes a fitted sklearn.neural_network.MLPClassifier, got {type(mlp).__name__}."
        )
    check_is_fitted(mlp)
    est = cls(**{**_shared_params(mlp, cls), **params, "device": device})
    est._resolve_device()
    _copy_fitted(mlp, est)
    sk = getattr(mlp, "_optimizer", None)
    if sk is not None and mlp.solver in ("sgd", "adam"):
        est._optimizer = _our_optimizer(est, sk)
    return est


def _our_optimizer(est, sk):
    """Our :class:`OptimizerState` holding the state of scikit-learn's optimizer ``sk``."""
    layout = _layout(est)
    n = len(est.coefs_)
    solver = Solver.from_params(est.solver, est.momentum, est.nesterovs_momentum)

    def flat(arrays):
        return layout.pack(arrays[:n], arrays[n:], "cpu")

    if solver == Solver.ADAM:
        return OptimizerState(solver, float(est.learning_rate_init), int(sk.t), flat(sk.ms), flat(sk.vs))
    return OptimizerState(
        solver, float(sk.learning_rate), 0, flat(sk.velocities) if solver.n_moments else None, None
    )
