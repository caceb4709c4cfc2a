"""GPUMLPClassifier: scikit-learn's MLPClassifier (sgd/adam) on NumPy or on our CUDA kernels.

This module is the estimator: parameters, validation, the epoch loop with its stopping
rules, and prediction. The training steps run in a trainer chosen once from
``device_``: :class:`~._mlp_cpu.CPUTrainer` (NumPy, the reference) or
:class:`~._mlp_cuda.CUDATrainer` (CuPy + ``_kernels/mlp.cu``), both behind the interface
of :class:`~._base.Trainer`. Both devices run the same update rules on the same
parameter layout:

* all coefficients and intercepts live in ONE flat buffer (coefficients first, each
  ``(fan_in, fan_out)`` row-major, then intercepts) with optimizer state of the same
  shape, so an optimizer step is one elementwise pass (one launch on the GPU);
* minibatches: forward/backward GEMMs (NumPy BLAS / cuBLAS through CuPy), fused
  bias+activation, fused output activation+loss+delta, and the fused optimizer step
  (``_kernels/mlp.cu``);
* ``batch_size=1`` on the GPU with one hidden layer and ``kernels='custom'``: the fused
  persistent kernel ``mlp_sgd1`` trains a whole chunk of samples in one launch (one
  grid-wide barrier per sample). Other per-sample cases use our GEMV/GER kernels
  (:mod:`sknn_gpu.linalg`) for the vector products.

Random numbers (initial weights, shuffling, the validation split) are drawn on the host
with the estimator's ``random_state``, so CPU and GPU start from the same state and see
the samples in the same order. Memory is estimated from the parameters and the data
shape (:func:`._size.size_estimate`) and checked before anything large is
allocated.

Sample weights follow scikit-learn 1.9's MLP (weighted deltas, gradients divided by the
minibatch's weight sum). Sparse ``X`` is SciPy CSR on the CPU, as in scikit-learn, and
CSR on the device densified one minibatch at a time on the GPU (:mod:`._data`). Dask
arrays are predicted block by block (:func:`sknn_gpu._dask.dask_rows`); training is in
memory. :meth:`GPUMLPClassifier.as_sklearn` / :meth:`~GPUMLPClassifier.from_sklearn`
convert to and from scikit-learn's estimator (:mod:`._interop`).

Size: one estimator class, scikit-learn's MLP parameters with their docstrings (about 170
lines) and its epoch loop; the trainers, data handling, size estimate and scikit-learn
conversion already live in ``_base``/``_mlp_cpu``/``_mlp_cuda``, ``_data``, ``_size`` and
``_interop``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._typing import Array, ArrayLike

if TYPE_CHECKING:
    from sklearn.neural_network import MLPClassifier

import dataclasses
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import accuracy_score
from sklearn.preprocessing import LabelBinarizer
from sklearn.utils import check_random_state
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import type_of_target, unique_labels
from sklearn.utils.validation import check_is_fitted, column_or_1d

from .._backend import (
    all_finite,
    array_module,
    host_flag,
    is_device_array,
    synchronize,
    to_device,
    to_host,
)
from .._dask import dask_rows, is_dask_collection
from .._mt19937 import legacy_uniform
from .._progress import Progress, family_logger
from .._sklearn_compat import (
    Interval,
    Options,
    StrOptions,
    _fit_context,
    check_partial_fit_first_call,
    check_sample_weight,
)
from ..base import DeviceClassifierMixin, DeviceMixin, restore_state, snapshot_state, validates_params
from . import _interop, _predict_cuda
from ._base import Layout, OptimizerState, Solver, TrainConfig, check_batch_weights, forward
from ._data import (
    CSRRows,
    check_X,
    class_codes,
    fit_label_binarizer,
    host_rows,
    is_sparse,
    validation_split,
)
from ._mlp_cpu import CPUTrainer
from ._mlp_cuda import CUDATrainer
from ._predict_cuda import OUT_FUSED_MAX, forward_cuda, out_weights, tc_packs, use_dense_tc
from ._size import DENSE_ITEMS, check_size, sparse_items

__all__ = ["GPUMLPClassifier"]


#: on the GPU, layers of at least this many weights draw their initial values there
#: (:func:`sknn_gpu._mt19937.legacy_uniform`: scikit-learn's numbers, bit for bit; MT19937 on
#: the host takes about 6-11 ns a value, so a million weights cost 6-11 ms there)
GPU_DRAWS_FROM = 1 << 18


def _one_hot(binarizer, y):
    """``binarizer.transform(y)`` (a fitted ``LabelBinarizer``) for the common case, 1-D
    binary or multiclass labels it knows, built directly (scikit-learn builds a sparse
    matrix first: ~8 ms for 60,000 labels); anything else goes to ``transform`` itself."""
    classes = binarizer.classes_
    k = len(classes)
    if y.ndim != 1 or k < 2 or binarizer.sparse_output or binarizer.y_type_ not in ("binary", "multiclass"):
        return binarizer.transform(y)
    if (binarizer.neg_label, binarizer.pos_label) != (0, 1):
        return binarizer.transform(y)
    y_codes, known_codes = class_codes(y), class_codes(classes)
    if y_codes and known_codes:  # a look-up table: faster than searchsorted
        lut = np.full(max(y_codes, known_codes), -1, dtype=np.intp)
        lut[classes] = np.arange(k)
        idx = lut[y]
        known = idx.min() >= 0
    else:
        idx = np.searchsorted(classes, y)
        np.minimum(idx, k - 1, out=idx)
        known = np.array_equal(classes[idx], y)
    if not known:  # a label it does not know: scikit-learn's answer
        return binarizer.transform(y)
    if k == 2:
        return (idx == 1).astype(int).reshape(-1, 1)
    Y = np.zeros((len(y), k), dtype=int)
    Y[np.arange(len(y)), idx] = 1
    return Y


# ---------------------------------------------------------------------------- Dask shapes
def _label_shape(est, X):
    """Shape and dtype of one sample's labels (the ``meta`` of a Dask ``predict``)."""
    check_is_fitted(est)
    if est._label_binarizer.y_type_.startswith("multilabel"):
        return (est.n_outputs_,), np.dtype(int)  # LabelBinarizer's indicator rows
    return (), est.classes_.dtype


def _proba_shape(est, X):
    """Shape and dtype of one sample's probabilities (Dask ``predict_proba``)."""
    check_is_fitted(est)
    return (est.n_outputs_ if est.n_outputs_ > 1 else 2,), est.coefs_[0].dtype


# ---------------------------------------------------------------------------- estimator
class GPUMLPClassifier(DeviceMixin, DeviceClassifierMixin, BaseEstimator):
    """Multi-layer perceptron classifier trained with SGD or Adam, on the CPU or a GPU.

    The parameters, defaults, fitted attributes and behaviour follow scikit-learn's
    :class:`~sklearn.neural_network.MLPClassifier` for its stochastic solvers
    (``'sgd'``, ``'adam'``); full-batch ``'lbfgs'`` is not provided. On the GPU the
    minibatch products are cuBLAS GEMMs and everything around them runs in our fused
    kernels; per-sample training (``batch_size=1``) with one hidden layer runs whole
    epochs in one persistent kernel, and otherwise uses our GEMV/GER kernels.

    ``X`` may be NumPy, CuPy, SciPy/cupyx sparse (CSR or CSC), or, for prediction and
    ``score``, a Dask array chunked by rows (a lazy Dask array comes back; training
    takes in-memory data).

    Parameters
    ----------
    hidden_layer_sizes : array-like of shape (n_layers - 2,), default=(100,)
        Number of neurons in each hidden layer.
    activation : {'identity', 'logistic', 'tanh', 'relu'}, default='relu'
        Hidden-layer activation.
    solver : {'sgd', 'adam'}, default='adam'
        Stochastic optimizer. ``'lbfgs'`` is recognised only to raise a clear error
        (use :class:`sklearn.neural_network.MLPClassifier` for it).
    alpha : float, default=0.0001
        L2 penalty, added to the loss as ``0.5 * alpha * ||W||^2 / batch``.
    batch_size : int or 'auto', default='auto'
        Minibatch size; ``'auto'`` is ``min(200, n_samples)``. ``1`` is per-sample SGD.
    learning_rate : {'constant', 'invscaling', 'adaptive'}, default='constant'
        Learning-rate schedule of ``'sgd'``.
    learning_rate_init : float, default=0.001
        Initial learning rate.
    power_t : float, default=0.5
        Exponent of the ``'invscaling'`` schedule.
    max_iter : int, default=200
        Maximum number of epochs.
    shuffle : bool, default=True
        Shuffle the samples every epoch (with ``random_state``, on the host).
    random_state : int, RandomState instance or None, default=None
        Seeds weight initialisation, shuffling and the early-stopping split.
    tol : float, default=1e-4
        Improvement below which an epoch counts as "no change".
    verbose : int or bool, default=0
        Progress through the ``sknn_gpu.neural_network`` logger: ``1`` (or True) logs one
        line per ``fit``/``partial_fit`` call (epochs run, time, final loss) and the
        stopping message, and shows a progress bar on a terminal; ``2`` also logs every
        epoch with its loss (and validation score with early stopping), the information
        scikit-learn's MLP prints.
    warm_start : bool, default=False
        Start from the previous solution (the optimizer state is reset, as in
        scikit-learn).
    momentum : float, default=0.9
        Momentum of ``'sgd'``.
    nesterovs_momentum : bool, default=True
        Use Nesterov's momentum with ``'sgd'`` and ``momentum > 0``.
    early_stopping : bool, default=False
        Hold out ``validation_fraction`` of the data, stop when its accuracy stops
        improving, and restore the weights of the best epoch.
    validation_fraction : float, default=0.1
        Fraction of the training data held out for early stopping.
    beta_1, beta_2 : float, default=0.9, 0.999
        Adam's decay rates.
    epsilon : float, default=1e-8
        Adam's numerical-stability constant.
    n_iter_no_change : int, default=10
        Epochs without improvement of more than ``tol`` before stopping.
    device : {'auto', 'cpu', 'cuda'}, default='auto'
        Where to train and predict; resolved once in ``fit`` into ``device_``.
    output_type : {'input', 'numpy', 'cupy'} or None, default=None
        Array type of what this estimator returns: None follows
        ``sknn_gpu.config_context(output_type=...)`` (by default the input's type: NumPy
        in, NumPy out; CuPy in, CuPy out); ``'numpy'`` always returns host arrays;
        ``'cupy'`` always device arrays.
    kernels : {'custom', 'cublas'}, default='custom'
        GPU only. ``'custom'`` uses the fused per-sample kernel and our GEMV/GER for
        ``batch_size=1``; ``'cublas'`` runs every product through cuBLAS (a baseline).
        Minibatch GEMMs are cuBLAS either way.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        Class labels.
    coefs_ : list of ndarray of shape (fan_in, fan_out)
        Weight matrices (NumPy arrays, whatever the device).
    intercepts_ : list of ndarray of shape (fan_out,)
        Bias vectors (NumPy arrays).
    loss_ : float
        Loss of the last epoch.
    loss_curve_ : list of float
        Loss of every epoch (``len(loss_curve_) == n_iter_`` after ``fit``).
    best_loss_ : float or None
        Lowest training loss (None with early stopping).
    validation_scores_ : list of float or None
        Validation accuracy of every epoch with early stopping.
    best_validation_score_ : float or None
        Best validation accuracy with early stopping.
    n_iter_ : int
        Epochs run.
    t_ : int
        Training samples seen.
    n_layers_ : int
        Number of layers (input and output included).
    n_outputs_ : int
        Number of outputs.
    out_activation_ : str
        ``'softmax'`` (multiclass) or ``'logistic'`` (binary, multilabel).
    n_features_in_ : int
        Number of features seen in ``fit``.
    device_ : str
        ``'cpu'`` or ``'cuda'``.

    Notes
    -----
    :meth:`as_sklearn` returns an equivalent fitted
    :class:`~sklearn.neural_network.MLPClassifier` (same predictions) and
    :meth:`from_sklearn` imports one; the optimizer state travels both ways, so
    ``partial_fit`` continues where the other estimator stopped.

    See Also
    --------
    sklearn.neural_network.MLPClassifier : the reference implementation.
    sknn_gpu.linalg.gemv, sknn_gpu.linalg.ger : the vector kernels.

    Examples
    --------
    >>> from sklearn.datasets import load_digits
    >>> from sknn_gpu import GPUMLPClassifier
    >>> X, y = load_digits(return_X_y=True)
    >>> clf = GPUMLPClassifier(hidden_layer_sizes=(32,), max_iter=30, random_state=0,
    ...                        device="cpu").fit(X / 16, y)
    >>> clf.coefs_[0].shape
    (64, 32)
    >>> bool(clf.score(X / 16, y) > 0.9)
    True
    """

    # coefs_/intercepts_ are NumPy by contract (like sklearn's), whatever the device
    _host_attributes = ("coefs_", "intercepts_")

    _parameter_constraints = {
        "hidden_layer_sizes": ["array-like", Interval(Integral, 1, None, closed="left")],
        "activation": [StrOptions({"identity", "logistic", "tanh", "relu"})],
        "solver": [StrOptions({"sgd", "adam", "lbfgs"})],
        "alpha": [Interval(Real, 0, None, closed="left")],
        "batch_size": [StrOptions({"auto"}), Interval(Integral, 1, None, closed="left")],
        "learning_rate": [StrOptions({"constant", "invscaling", "adaptive"})],
        "learning_rate_init": [Interval(Real, 0, None, closed="neither")],
        "power_t": [Interval(Real, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "shuffle": ["boolean"],
        "random_state": ["random_state"],
        "tol": [Interval(Real, 0, None, closed="left")],
        "verbose": [Interval(Integral, 0, None, closed="left"), "boolean"],
        "warm_start": ["boolean"],
        "momentum": [Interval(Real, 0, 1, closed="both")],
        "nesterovs_momentum": ["boolean"],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(Real, 0, 1, closed="left")],
        "beta_1": [Interval(Real, 0, 1, closed="left")],
        "beta_2": [Interval(Real, 0, 1, closed="left")],
        "epsilon": [Interval(Real, 0, None, closed="neither")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left"), Options(Real, {np.inf})],
        "kernels": [StrOptions({"custom", "cublas"})],
        **DeviceMixin._device_constraints,
        **DeviceMixin._output_constraints,
    }

    def __init__(
        self,
        hidden_layer_sizes=(100,),
        activation="relu",
        *,
        solver="adam",
        alpha=0.0001,
        batch_size="auto",
        learning_rate="constant",
        learning_rate_init=0.001,
        power_t=0.5,
        max_iter=200,
        shuffle=True,
        random_state=None,
        tol=1e-4,
        verbose=0,
        warm_start=False,
        momentum=0.9,
        nesterovs_momentum=True,
        early_stopping=False,
        validation_fraction=0.1,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-8,
        n_iter_no_change=10,
        device="auto",
        output_type=None,
        kernels="custom",
    ):
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation
        self.solver = solver
        self.alpha = alpha
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.learning_rate_init = learning_rate_init
        self.power_t = power_t
        self.max_iter = max_iter
        self.shuffle = shuffle
        self.random_state = random_state
        self.tol = tol
        self.verbose = verbose
        self.warm_start = warm_start
        self.momentum = momentum
        self.nesterovs_momentum = nesterovs_momentum
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.n_iter_no_change = n_iter_no_change
        self.device = device
        self.output_type = output_type
        self.kernels = kernels

    # ------------------------------------------------------------------ public API
    @validates_params
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None) -> GPUMLPClassifier:
        """Fit the model to data ``X`` and labels ``y``.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training data: NumPy, CuPy, or a SciPy/cupyx sparse matrix (CSR or CSC).
        y : array-like of shape (n_samples,) or (n_samples, n_classes)
            Class labels, or a label-indicator matrix for multilabel problems.
        sample_weight : array-like of shape (n_samples,), default=None
            Sample weights, as in scikit-learn's MLP: each sample's output error is
            multiplied by its weight and each minibatch's gradients are divided by the
            sum of its weights (instead of its size). None gives every sample weight 1.
            Routed as fit metadata (``set_fit_request``).

        Returns
        -------
        self : GPUMLPClassifier
            The fitted estimator.
        """
        return self._fit(X, y, incremental=False, sample_weight=sample_weight)

    def _check_solver(self):
        if self.solver not in ("sgd", "adam"):
            raise AttributeError(
                f"partial_fit is only available for stochastic optimizers. {self.solver} is not stochastic."
            )
        return True

    @available_if(lambda est: est._check_solver())
    @validates_params
    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(
        self,
        X: ArrayLike,
        y: ArrayLike,
        sample_weight: ArrayLike | None = None,
        classes: ArrayLike | None = None,
    ) -> GPUMLPClassifier:
        """One epoch over ``X, y`` (an incremental update).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training data.
        y : array-like of shape (n_samples,) or (n_samples, n_classes)
            Labels.
        sample_weight : array-like of shape (n_samples,), default=None
            Sample weights, as in :meth:`fit` (the argument order is scikit-learn's:
            ``partial_fit(X, y, sample_weight=None, classes=None)``).
        classes : array-like of shape (n_classes,), default=None
            Every class that will ever be seen; required on the first call (except
            for multilabel indicator targets).

        Returns
        -------
        self : GPUMLPClassifier
            The updated estimator.
        """
        saved = self._snapshot()  # a refused or failed call leaves the estimator as it was
        try:
            if check_partial_fit_first_call(self, classes):
                self._label_binarizer = LabelBinarizer()
                if type_of_target(to_host(y)).startswith("multilabel"):
                    self._label_binarizer.fit(to_host(y))
                else:
                    self._label_binarizer.fit(self.classes_)
        except BaseException:
            self._restore(saved)
            raise
        return self._fit(X, y, incremental=True, sample_weight=sample_weight, saved=saved)

    @validates_params
    @dask_rows(_label_shape)
    def predict(self, X: ArrayLike) -> Array:
        """Predict class labels (or a label-indicator matrix for multilabel targets).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Samples (NumPy, CuPy, sparse, or a Dask array chunked by rows).

        Returns
        -------
        y : ndarray of shape (n_samples,) or (n_samples, n_classes)
            Predicted labels, the same array type as ``X`` (a lazy Dask array for Dask
            input).
        """
        labels = self._labels_from_output(to_host(self._forward(X)))
        return self._output(labels, X)

    @validates_params
    @dask_rows(_proba_shape)
    def predict_proba(self, X: ArrayLike) -> Array:
        """Class probabilities.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Samples to score: NumPy, CuPy, sparse, or a Dask array chunked by rows.

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            Probabilities ordered as ``classes_``, the same array type as ``X``.
        """
        P = self._forward(X)
        if self.n_outputs_ == 1:
            P = array_module(P).concatenate([1 - P, P], axis=1)
        return self._output(P, X)

    @validates_params
    @dask_rows(_proba_shape)
    def predict_log_proba(self, X: ArrayLike) -> Array:
        """Logarithm of :meth:`predict_proba`.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            The samples, as for :meth:`predict_proba`.

        Returns
        -------
        log_proba : ndarray of shape (n_samples, n_classes)
            ``log(predict_proba(X))``, the same array type as ``predict_proba`` returns.
        """
        P = self.predict_proba(X)
        return array_module(P).log(P)

    @validates_params
    def score(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None) -> float:
        """Mean accuracy of :meth:`predict` on ``X`` against ``y``.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Samples: NumPy, CuPy, sparse, or a Dask array chunked by rows (predicted
            block by block on the workers).
        y : array-like of shape (n_samples,) or (n_samples, n_classes)
            True labels (NumPy, CuPy or Dask).
        sample_weight : array-like of shape (n_samples,), default=None
            Sample weights (NumPy, CuPy or Dask).

        Returns
        -------
        score : float
            Accuracy (exact-match ratio for multilabel targets).
        """
        if not any(is_dask_collection(a) for a in (X, y, sample_weight)):
            return super().score(X, y, sample_weight=sample_weight)
        import dask

        pred, y, sample_weight = dask.compute(self.predict(X), y, sample_weight)
        return float(accuracy_score(to_host(y), to_host(pred), sample_weight=to_host(sample_weight)))

    # ------------------------------------------------------------------ scikit-learn interop
    @validates_params
    def as_sklearn(self) -> MLPClassifier:
        """An equivalent fitted :class:`sklearn.neural_network.MLPClassifier`.

        The parameters scikit-learn knows, the weights (``coefs_``, ``intercepts_``,
        NumPy copies), the labels, the loss history and the optimizer state are copied,
        so its ``predict``/``predict_proba`` equal this estimator's CPU results (bit for
        bit) and its ``partial_fit`` continues where this one stopped.

        Returns
        -------
        mlp : sklearn.neural_network.MLPClassifier
            A fitted copy sharing no array with this estimator.
        """
        check_is_fitted(self)
        return _interop.to_sklearn(self)

    @classmethod
    def from_sklearn(cls, mlp, device="auto", **params):
        """A GPUMLPClassifier fitted with the weights of a fitted scikit-learn MLPClassifier.

        Parameters
        ----------
        mlp : sklearn.neural_network.MLPClassifier
            A fitted estimator (any solver; ``'lbfgs'`` models predict, but only
            scikit-learn can train them further).
        device : {'auto', 'cpu', 'cuda'}, default='auto'
            Where the new estimator predicts (and trains on ``partial_fit``); resolved
            here, once, into ``device_``.
        **params
            Other parameters of the new estimator (``kernels``, ``output_type``).

        Returns
        -------
        est : GPUMLPClassifier
            A fitted estimator whose predictions equal ``mlp``'s (on the CPU, bit for
            bit).
        """
        return _interop.from_sklearn(cls, mlp, device=device, **params)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_label = True
        tags.input_tags.sparse = True
        return tags

    # ------------------------------------------------------------------ validation
    def _validate_input(self, X, y, incremental, reset):
        X, y = check_X(self, X, reset, y=y)
        if y.ndim == 2 and y.shape[1] == 1:
            y = column_or_1d(y, warn=True)
        if (not hasattr(self, "classes_")) or (not self.warm_start and not incremental):
            self._label_binarizer = fit_label_binarizer(y)
            self.classes_ = self._label_binarizer.classes_
        else:
            classes = unique_labels(y)
            if self.warm_start:
                if set(classes) != set(self.classes_):
                    raise ValueError(
                        "warm_start can only be used where `y` has the same classes as in the "
                        f"previous call to fit. Previously got {self.classes_}, `y` has {classes}"
                    )
            elif len(np.setdiff1d(classes, self.classes_, assume_unique=True)):
                raise ValueError(
                    f"`y` has classes not in `self.classes_`. `self.classes_` has {self.classes_}. "
                    f"'y' has {classes}."
                )
        Y = _one_hot(self._label_binarizer, y)
        return X, Y

    def _cross_check_params(self):
        """What ``_parameter_constraints`` cannot say (run by :func:`~sknn_gpu.base.validates_params`
        at every public method): each hidden layer size is a positive integer."""
        self._hidden_sizes()

    def _hidden_sizes(self):
        """``hidden_layer_sizes`` as a list of positive ints, or a ValueError naming it."""
        hidden = self.hidden_layer_sizes
        sizes = list(hidden) if hasattr(hidden, "__iter__") and not isinstance(hidden, str) else [hidden]
        for h in sizes:
            if isinstance(h, (bool, np.bool_)) or not isinstance(h, Integral) or h < 1:
                raise ValueError(
                    "hidden_layer_sizes must hold positive integers (the units of each hidden layer), "
                    f"got {hidden!r}: {h!r} is not one."
                )
        return [int(h) for h in sizes]

    # ------------------------------------------------------------------ sizes
    def _check_size(self, phase, units, n_samples, dtype, **data):
        """Refuse ``phase`` ('fit', 'partial_fit', 'predict') before allocating when it cannot fit.

        The one size estimate of the estimator (:func:`._size.size_estimate`), checked by
        :func:`._size.check_size` (``data``: ``x_on_device``, ``batch_size``,
        ``first_pass``, ``x_items``).

        Returns True when the estimate was large enough to be compared with the free
        memory (see :func:`._size.check_size`).

        Raises
        ------
        InsufficientMemoryError
            Naming the bytes needed and the bytes free.
        """
        return check_size(self, phase, units, n_samples, dtype, **data)

    # ------------------------------------------------------------------ training
    def _snapshot(self):
        """The instance state to put back when a call fails: what training changes in place
        (the loss and validation curves, the optimizer's learning rate, step count and
        moments) is copied; the weights are replaced, never written into."""
        saved = snapshot_state(self)
        opt = saved.get("_optimizer")
        if opt is not None:
            saved["_optimizer"] = dataclasses.replace(
                opt,
                moment1=None if opt.moment1 is None else opt.moment1.copy(),
                moment2=None if opt.moment2 is None else opt.moment2.copy(),
            )
        return saved

    def _restore(self, saved):
        restore_state(self, saved)

    def _fit(self, X, y, incremental, sample_weight=None, saved=None):
        saved = self._snapshot() if saved is None else saved
        try:  # a refused or failed call (diverged, out of memory) leaves the estimator as it was
            X, Y, sample_weight, units, first_pass = self._prepare_fit(X, y, sample_weight, incremental)
            self._random_state = check_random_state(self.random_state)
            if first_pass:
                self._initialize(Y, units, X.dtype)
            self._fit_stochastic(X, Y, sample_weight, units, incremental)
            if not all(np.isfinite(w).all() for w in self.coefs_ + self.intercepts_):
                raise ValueError(
                    "Solver produced non-finite parameter weights. The input data may contain large "
                    "values and need to be preprocessed. The estimator is left as it was before "
                    "this call."
                )
        except BaseException:
            self._restore(saved)
            raise
        return self

    def _prepare_fit(self, X, y, sample_weight, incremental):
        """Validate the call and check its size; returns ``(X, Y, sample_weight, units, first_pass)``."""
        if self.solver == "lbfgs":
            raise ValueError(
                "GPUMLPClassifier supports solver='sgd' and solver='adam' only: full-batch "
                "L-BFGS is not implemented (on any device). Use "
                "sklearn.neural_network.MLPClassifier(solver='lbfgs') for it."
            )
        if self.early_stopping and incremental:
            raise ValueError("partial_fit does not support early_stopping=True")
        hidden = self._hidden_sizes()
        first_pass = not hasattr(self, "coefs_") or (not self.warm_start and not incremental)
        if first_pass or not hasattr(self, "device_"):
            self._resolve_device()
        X, Y = self._validate_input(X, y, incremental, reset=first_pass)
        n_samples, n_features = X.shape
        dtype = X.dtype
        if sample_weight is not None:  # scikit-learn's check, on the host (n values)
            if is_dask_collection(sample_weight):
                raise TypeError("sample_weight must be in memory (NumPy or CuPy), not a Dask array.")
            sample_weight = check_sample_weight(to_host(sample_weight), host_rows(X))
            if self._batch_size(n_samples, warn=False) == 1:  # every sample is a minibatch: known now
                check_batch_weights(sample_weight, 1)
        Y = np.asarray(Y, dtype=dtype)
        if Y.ndim == 1:
            Y = Y.reshape(-1, 1)
        self.n_outputs_ = Y.shape[1]
        units = [n_features] + hidden + [self.n_outputs_]
        if not first_pass:
            if [c.shape for c in self.coefs_] != [(a, b) for a, b in zip(units[:-1], units[1:])]:
                raise ValueError(
                    "The shapes of the existing coefs_ do not match the data and hidden_layer_sizes "
                    f"({[c.shape for c in self.coefs_]}); refit without warm_start."
                )
            if self.coefs_[0].dtype != dtype:
                raise ValueError(
                    f"X has dtype {dtype} but the model was fitted on {self.coefs_[0].dtype} data."
                )
        sparse = is_sparse(X)
        self._check_size(
            "partial_fit" if incremental else "fit",
            units,
            n_samples,
            dtype,
            x_on_device=is_device_array(X) and not sparse,
            batch_size=self._batch_size(n_samples, warn=False),
            first_pass=first_pass,
            x_items=sparse_items(X) if sparse else None,
        )
        return X, Y, sample_weight, units, first_pass

    def _batch_size(self, n_samples, warn=True):
        if self.batch_size == "auto":
            return min(200, n_samples)
        if warn and self.batch_size > n_samples:
            warnings.warn(
                "Got `batch_size` less than 1 or larger than sample size. It is going to be clipped"
            )
        return int(np.clip(self.batch_size, 1, n_samples))

    def _initialize(self, Y, units, dtype):
        self.n_iter_ = 0
        self.t_ = 0
        self.n_outputs_ = Y.shape[1]
        self.n_layers_ = len(units)
        self.out_activation_ = "softmax" if self._label_binarizer.y_type_ == "multiclass" else "logistic"
        factor = 2.0 if self.activation == "logistic" else 6.0
        self.coefs_, self.intercepts_ = [], []
        for fan_in, fan_out in zip(units[:-1], units[1:]):
            bound = np.sqrt(factor / (fan_in + fan_out))
            coef = None
            if self.device_ == "cuda" and fan_in * fan_out >= GPU_DRAWS_FROM:  # the same numbers, faster
                coef = legacy_uniform(self._random_state, -bound, bound, (fan_in, fan_out), dtype)
                coef = None if coef is None else coef.get()
            if coef is None:
                coef = self._random_state.uniform(-bound, bound, (fan_in, fan_out)).astype(dtype, copy=False)
            inter = self._random_state.uniform(-bound, bound, fan_out).astype(dtype, copy=False)
            self.coefs_.append(coef)
            self.intercepts_.append(inter)
        # the same arrays, not copies: a fit replaces coefs_, never writes into them (early
        # stopping copies the best ones onto the device before training)
        self._best_coefs = list(self.coefs_)
        self._best_intercepts = list(self.intercepts_)
        self.loss_curve_ = []
        self._no_improvement_count = 0
        if self.early_stopping:
            self.validation_scores_ = []
            self.best_validation_score_ = -np.inf
            self.best_loss_ = None
        else:
            self.best_loss_ = np.inf
            self.validation_scores_ = None
            self.best_validation_score_ = None

    def _fit_stochastic(self, X, Y, sample_weight, units, incremental):
        layout = Layout(units)
        dtype = X.dtype
        device = self.device_
        sparse = is_sparse(X)
        if sparse:  # SciPy CSR for the CPU trainer, CSR rows on the device for the CUDA one
            X = CSRRows.of(X, device, dtype) if device == "cuda" else to_host(X).tocsr()
        if not incremental or not hasattr(self, "_optimizer"):
            solver = Solver.from_params(self.solver, self.momentum, self.nesterovs_momentum)
            self._optimizer = OptimizerState.new(solver, self.learning_rate_init, layout.size, dtype)
        opt = self._optimizer
        early_stopping = self.early_stopping
        if early_stopping:  # scikit-learn's split (stratified unless multilabel), on the data's device
            stratify = to_host(Y) if self.n_outputs_ == 1 else None
            (X, Y, sample_weight), (X_val, Y_val, sw_val) = validation_split(
                X, Y, sample_weight, self.validation_fraction, self._random_state, stratify
            )
            y_val = self._label_binarizer.inverse_transform(Y_val)
        else:
            X_val = y_val = sw_val = None
        n_samples = X.shape[0]
        batch_size = self._batch_size(n_samples)

        Xd = X if sparse else to_device(np.ascontiguousarray(X) if isinstance(X, np.ndarray) else X, device)
        Yd = to_device(np.ascontiguousarray(Y), device)
        config = TrainConfig.of(self)
        trainer = _TRAINERS[device](
            layout, config, self.coefs_, self.intercepts_, opt, batch_size, sample_weight, sparse
        )
        trainer.planned_epochs = 1 if incremental else self.max_iter
        best = layout.pack(self._best_coefs, self._best_intercepts, device) if early_stopping else None

        sample_idx = np.arange(n_samples, dtype=np.int64)
        call = "partial_fit" if incremental else "fit"
        bar = Progress(
            self,
            f"{type(self).__name__}.{call}",
            1 if incremental else self.max_iter,
            self.verbose,
            "epochs",
            log_every=True,
        )
        try:
            self.n_iter_ = 0
            for _ in range(self.max_iter):
                if self.shuffle:
                    sample_idx = self._random_state.permutation(sample_idx)
                    sample_idx = sample_idx.astype(np.int64, copy=False)
                total = trainer.epoch(Xd, Yd, sample_idx if self.shuffle else None, opt)
                self.n_iter_ += 1
                self.loss_ = total / n_samples
                self.t_ += n_samples
                self.loss_curve_.append(self.loss_)
                if early_stopping:
                    score = self._val_score(trainer, X_val, y_val, sw_val)
                    self.validation_scores_.append(score)
                    bar.update(loss=self.loss_, validation_score=score)
                    if score < self.best_validation_score_ + self.tol:
                        self._no_improvement_count += 1
                    else:
                        self._no_improvement_count = 0
                    if score > self.best_validation_score_:
                        self.best_validation_score_ = score
                        best[...] = trainer.flat
                else:
                    bar.update(loss=self.loss_)
                    if self.loss_curve_[-1] > self.best_loss_ - self.tol:
                        self._no_improvement_count += 1
                    else:
                        self._no_improvement_count = 0
                    if self.loss_curve_[-1] < self.best_loss_:
                        self.best_loss_ = self.loss_curve_[-1]
                if opt.solver != Solver.ADAM and self.learning_rate == "invscaling":
                    opt.lr = float(self.learning_rate_init) / (self.t_ + 1) ** self.power_t
                if self._no_improvement_count > self.n_iter_no_change:
                    what = "Validation score" if early_stopping else "Training loss"
                    msg = (
                        f"{what} did not improve more than tol={self.tol:f} for "
                        f"{self.n_iter_no_change} consecutive epochs."
                    )
                    if self._trigger_stopping(opt, msg):
                        break
                    self._no_improvement_count = 0
                if incremental:
                    break
                if self.n_iter_ == self.max_iter:
                    warnings.warn(
                        f"Stochastic Optimizer: Maximum iterations ({self.max_iter}) reached and the "
                        "optimization hasn't converged yet.",
                        ConvergenceWarning,
                    )
        except KeyboardInterrupt:
            warnings.warn("Training interrupted by user.")
        finally:
            bar.close(**({"loss": self.loss_} if self.n_iter_ else {}))

        # back to the host: the public attributes are NumPy arrays
        self.coefs_, self.intercepts_ = layout.unpack(trainer.flat)
        trainer.save_optimizer(opt)
        if early_stopping:
            self._best_coefs, self._best_intercepts = layout.unpack(best)
            self.coefs_ = [c.copy() for c in self._best_coefs]
            self.intercepts_ = [i.copy() for i in self._best_intercepts]

    def _trigger_stopping(self, opt, msg):
        """scikit-learn's stopping rule; its messages go to the family logger when verbose."""
        if opt.solver == Solver.ADAM or self.learning_rate != "adaptive":
            self._log(msg + " Stopping.")
            return True
        if opt.lr <= 1e-6:
            self._log(msg + " Learning rate too small. Stopping.")
            return True
        opt.lr /= 5.0
        self._log(msg + f" Setting learning rate to {opt.lr:f}")
        return False

    def _log(self, message):
        if self.verbose:
            family_logger(self).info("%s", message)

    def _val_score(self, trainer, X_val, y_val, sample_weight=None):
        P = trainer.output(X_val)
        if not np.isfinite(P).all():
            return np.nan
        return accuracy_score(y_val, self._labels_from_output(P), sample_weight=sample_weight)

    # ------------------------------------------------------------------ prediction
    def _forward(self, X):
        """Output-layer activations of ``X`` on ``device_`` (NumPy or CuPy)."""
        if "coefs_" not in self.__dict__:  # (scikit-learn's check costs microseconds a call)
            check_is_fitted(self, "coefs_")
        dtype = self.coefs_[0].dtype
        if self._clean_device_input(X, dtype):
            self._check_clean_size(X)
            return self._forward_device(X, True)
        dense_cupy = is_device_array(X) and not is_sparse(X)
        X = check_X(self, X, reset=False, finite=not dense_cupy)  # dense CuPy: checked below
        units = [self.n_features_in_] + [c.shape[1] for c in self.coefs_]
        sparse = is_sparse(X)
        n, n_in = X.shape
        rows = min(n, max(1, DENSE_ITEMS // n_in))  # sparse on the GPU: rows densified at a time
        self._check_size(
            "predict",
            units,
            n,
            dtype,
            x_on_device=is_device_array(X) and not sparse,
            x_items=(sparse_items(X) + (rows * n_in if self.device_ == "cuda" else 0)) if sparse else None,
        )
        # coefs_ are NumPy by contract: a cached device copy on the GPU (as they are on the CPU)
        coefs, inters = self._device_copy("coefs_"), self._device_copy("intercepts_")
        if sparse and self.device_ == "cuda":
            Xc = CSRRows.of(X, "cuda", dtype)
            parts = [
                forward(Xc.dense(s, min(s + rows, n)), coefs, inters, self.activation, self.out_activation_)
                for s in range(0, n, rows)
            ]
            return parts[0] if len(parts) == 1 else self._xp.concatenate(parts)
        X = to_device(X, self.device_)
        if X.dtype != dtype:
            X = X.astype(dtype)
        if self.device_ != "cuda":
            return forward(X, coefs, inters, self.activation, self.out_activation_)
        return self._forward_device(X, dense_cupy)

    def _clean_device_input(self, X, dtype):
        """Whether ``X`` is a CuPy ndarray that :func:`._data.check_X` would pass as it is
        (up to a contiguous copy) to a model on the GPU with a hidden layer: 2-D, at least
        one row, the fitted number of features, the model's dtype. Such input skips the
        general checks (their Python costs microseconds that a prediction on the GPU
        waits for); anything else takes them, and their errors."""
        t = type(X)
        return (
            t.__name__ == "ndarray"
            and t.__module__ == "cupy"
            and self.device_ == "cuda"
            and X.ndim == 2
            and X.shape[0] >= 1
            and X.shape[1] == self.n_features_in_
            and X.dtype == dtype
            and len(self.coefs_) > 1
        )

    def _check_clean_size(self, X):
        """The size check of clean input (:meth:`_clean_device_input`): once per row count
        while the estimate stays below the size that is compared with the free memory (the
        estimate grows with the rows; the counts that needed no check are cached with the
        device copy of the coefficients)."""
        n = X.shape[0]
        hit = self.__dict__.get("_device_cache", {}).get(("unchecked_rows", "cuda"))
        if hit is not None and hit[0] is self.coefs_ and n in hit[1]:
            return
        units = [self.n_features_in_] + [c.shape[1] for c in self.coefs_]
        checked = self._check_size("predict", units, n, X.dtype, x_on_device=True)  # a refusal caches nothing
        if not checked:
            unchecked = self._derived(("unchecked_rows", "cuda"), self.coefs_, _rows_set)
            if len(unchecked) >= 64:
                unchecked.clear()
            unchecked.add(n)

    def _forward_device(self, X, dense_cupy):
        """The forward pass of ``X`` (a CuPy array of the model's dtype) on the GPU.

        The NaN check of CuPy input comes after the forward pass is queued: a flag set by the
        first kernel, one wait for both. A flagged product is NaN or infinite X, or finite X
        that overflowed: X decides."""
        coefs, inters = self._device_copy("coefs_"), self._device_copy("intercepts_")
        if not X.flags.c_contiguous:
            X = self._xp.ascontiguousarray(X)
        flag = flag_host = None
        if dense_cupy and len(coefs) > 1:  # the values the first kernel reads stand in for a pass over X
            flag_host, flag = host_flag()
        P = forward_cuda(
            X,
            coefs,
            inters,
            self.activation,
            self.out_activation_,
            self._out_w(coefs),
            flag,
            self._tc_packs(coefs),
        )
        if dense_cupy:
            if flag is not None:
                synchronize("cuda")
            if (flag is None or flag_host[0]) and not all_finite(X):
                raise ValueError("Input X contains NaN or infinity.")
        return P

    def _tc_packs(self, coefs):
        """The hidden layers' coefficients as the tensor-core kernel reads them (two TF32
        halves, padded), cached with the device copy; None when it does not run."""
        # keyed by the switches too (tests and the profile tool change them on a fitted model)
        key = ("tc_packs", "cuda", _predict_cuda.USE_TENSOR_CORES, _predict_cuda.TC_PACK_MAX)
        return self._derived(key, coefs, lambda c: tc_packs(c) if use_dense_tc(c) else None)

    def _out_w(self, coefs):
        """The output layer's coefficients padded on the device as the fused output kernel
        reads them (:func:`out_weights`), cached with the device copy; None when that kernel
        does not apply."""
        if len(coefs) < 2 or coefs[-1].shape[1] > OUT_FUSED_MAX:
            return None
        return self._derived(("out_w", "cuda"), coefs, lambda c: out_weights(c[-1]))

    def _labels_from_output(self, P):
        if self.n_outputs_ == 1:
            P = P.ravel()
        return self._label_binarizer.inverse_transform(P)


def _rows_set(_):
    """A new empty set (the cache of row counts whose prediction needs no size check)."""
    return set()


#: the trainer of each resolved device: the one place the MLP picks its engine
_TRAINERS = {"cpu": CPUTrainer, "cuda": CUDATrainer}
