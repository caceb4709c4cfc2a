"""What GPUMLPClassifier and its two trainers share.

* :class:`Layout` -- where every layer's coefficients and intercepts live in the one
  flat parameter buffer;
* :class:`Solver` and :class:`OptimizerState` -- the optimizer's code (the ``SOLVER``
  template argument of ``_kernels/mlp.cu``) and its state between calls;
* :class:`TrainConfig` -- the hyper-parameters a trainer reads;
* the activations, the log-loss and the forward pass, written against the array
  module of their input (NumPy for the CPU trainer and CPU prediction, CuPy for GPU
  prediction; SciPy sparse input on the CPU as scikit-learn takes it);
* :class:`Trainer` -- the one interface of the CPU trainer (``_mlp_cpu``) and the CUDA
  trainer (``_mlp_cuda``): the minibatch loop and the optimizer's learning rate here,
  the device-specific steps in the subclasses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from enum import IntEnum

import numpy as np
from scipy.special import expit

from .._backend import array_module, get_xp, to_device, to_host
from ._data import CSRRows

__all__ = [
    "Layout",
    "Solver",
    "OptimizerState",
    "TrainConfig",
    "Trainer",
    "hidden_activation",
    "activation_grad",
    "output_activation",
    "log_loss",
    "forward",
    "check_batch_weights",
]


# ---------------------------------------------------------------------------- parameters
class Layout:
    """Offsets of every layer's coefficients and intercepts in the flat parameter buffer.

    Coefficients first, each ``(fan_in, fan_out)`` row-major, then the intercepts: an
    optimizer step is one elementwise pass over one buffer.

    Parameters
    ----------
    units : sequence of int
        Units of every layer, input and output included.
    """

    def __init__(self, units):
        self.units = list(units)
        self.coef = []
        off = 0
        for a, b in zip(units[:-1], units[1:]):
            self.coef.append((off, off + a * b, (a, b)))
            off += a * b
        self.n_coef = off
        self.inter = []
        for b in units[1:]:
            self.inter.append((off, off + b))
            off += b
        self.size = off

    def views(self, flat):
        """``(coefs, intercepts)``: lists of views into ``flat`` (NumPy or CuPy)."""
        coefs = [flat[s:e].reshape(shape) for s, e, shape in self.coef]
        inters = [flat[s:e] for s, e in self.inter]
        return coefs, inters

    def pack(self, coefs, intercepts, device):
        """A new flat buffer on ``device`` holding ``coefs`` and ``intercepts``."""
        flat = get_xp(device).empty(self.size, dtype=coefs[0].dtype)
        coefs_v, inters_v = self.views(flat)
        for v, c in zip(coefs_v + inters_v, list(coefs) + list(intercepts)):
            v[...] = to_device(c, device)
        return flat

    def unpack(self, flat):
        """``(coefs, intercepts)`` as lists of NumPy arrays, copied out of ``flat``."""
        host = to_host(flat)  # a device buffer arrives as a new array: copied once
        coefs, inters = self.views(host.copy() if host is flat else host)
        return list(coefs), list(inters)


class Solver(IntEnum):
    """The optimizer; the values are the ``SOLVER`` template argument of ``_kernels/mlp.cu``."""

    SGD = 0  # plain stochastic gradient descent
    MOMENTUM = 1  # sgd with momentum
    NESTEROV = 2  # sgd with Nesterov's momentum
    ADAM = 3

    @classmethod
    def from_params(cls, solver, momentum, nesterovs_momentum):
        """The code of the estimator's ``solver``, ``momentum`` and ``nesterovs_momentum``."""
        if solver == "adam":
            return cls.ADAM
        if momentum == 0:
            return cls.SGD
        return cls.NESTEROV if nesterovs_momentum else cls.MOMENTUM

    @property
    def n_moments(self):
        """Parameter-sized state arrays: 0 (sgd), 1 (velocity) or 2 (Adam's two moments)."""
        return 2 if self is Solver.ADAM else (0 if self is Solver.SGD else 1)


@dataclass
class OptimizerState:
    """The optimizer between fit/partial_fit calls (NumPy arrays, kept on the estimator).

    Attributes
    ----------
    solver : Solver
        Which update rule.
    lr : float
        Current learning rate (before Adam's bias correction).
    t : int
        Updates made so far (Adam's bias correction counts them).
    moment1 : ndarray or None
        The velocity (sgd with momentum) or Adam's first moment, shaped like the flat
        parameter buffer; None for plain sgd.
    moment2 : ndarray or None
        Adam's second moment; None otherwise.
    """

    solver: Solver
    lr: float
    t: int = 0
    moment1: np.ndarray | None = None
    moment2: np.ndarray | None = None

    @classmethod
    def new(cls, solver, lr, size, dtype):
        """A fresh state for ``size`` parameters of ``dtype`` (moments at zero)."""
        n = solver.n_moments
        return cls(
            solver=solver,
            lr=float(lr),
            t=0,
            moment1=np.zeros(size, dtype=dtype) if n >= 1 else None,
            moment2=np.zeros(size, dtype=dtype) if n == 2 else None,
        )


@dataclass(frozen=True)
class TrainConfig:
    """The hyper-parameters a trainer reads (values exactly as the estimator holds them)."""

    activation: str
    out_activation: str
    alpha: float
    momentum: float
    beta_1: float
    beta_2: float
    epsilon: float
    kernels: str

    @classmethod
    def of(cls, est):
        """The hyper-parameters of a GPUMLPClassifier (with its fitted ``out_activation_``)."""
        values = {f.name: getattr(est, f.name) for f in fields(cls) if f.name != "out_activation"}
        return cls(out_activation=est.out_activation_, **values)


# ---------------------------------------------------------------------------- math (any xp)
def hidden_activation(Z, act):
    """Hidden activation in place (NumPy or CuPy array)."""
    xp = array_module(Z)
    if act == "logistic" and xp is np:
        expit(Z, out=Z)  # scikit-learn's logistic: NumPy probabilities equal MLPClassifier's bit for bit
    elif act == "logistic":
        xp.negative(Z, out=Z)
        xp.exp(Z, out=Z)
        Z += 1
        xp.reciprocal(Z, out=Z)
    elif act == "tanh":
        xp.tanh(Z, out=Z)
    elif act == "relu":
        xp.maximum(Z, 0, out=Z)
    return Z


def activation_grad(D, H, act):
    """``D *= f'(H)`` in place, with ``H`` the activation's output."""
    if act == "logistic":
        D *= H * (1 - H)
    elif act == "tanh":
        D *= 1 - H * H
    elif act == "relu":
        D[H == 0] = 0
    return D


def output_activation(Z, out):
    """Softmax or logistic output in place."""
    xp = array_module(Z)
    if out == "softmax":
        Z -= Z.max(axis=1, keepdims=True)
        xp.exp(Z, out=Z)
        Z /= Z.sum(axis=1, keepdims=True)
    else:
        hidden_activation(Z, "logistic")
    return Z


def log_loss(P, Y, out, sample_weight=None):
    """Summed (not averaged) log-loss of probabilities ``P`` against 0/1 targets ``Y`` (NumPy).

    With ``sample_weight`` (one weight per row), the weighted sum ``sum_i w_i loss_i``.
    """
    eps = np.finfo(P.dtype).eps
    Pc = np.clip(P, eps, 1 - eps)
    if out == "softmax":
        terms = np.log(Pc, dtype=np.float64) * Y
    else:
        terms = Y * np.log(Pc, dtype=np.float64) + (1 - Y) * np.log(1 - Pc, dtype=np.float64)
    if sample_weight is None:
        return -float(np.sum(terms))
    return -float(np.dot(terms.sum(axis=1), np.asarray(sample_weight, dtype=np.float64)))


def forward(X, coefs, inters, activation, out_activation):
    """Forward pass with NumPy or CuPy arrays; returns the output layer's activations.

    ``X`` may also be a SciPy sparse matrix (the first product is then sparse @ dense,
    as in scikit-learn).
    """
    A = X
    last = len(coefs) - 1
    for i, (W, b) in enumerate(zip(coefs, inters)):
        A = A @ W  # np.matmul / cupy.matmul for dense arrays
        A += b
        if i != last:
            hidden_activation(A, activation)
    return output_activation(A, out_activation)


def check_batch_weights(sample_weight, batch_size, order="in the order given"):
    """Refuse weights whose minibatches (in this order) include one summing to 0.

    ``order`` says, in the message, which order the samples are counted in. Such a
    minibatch has no weighted mean loss; scikit-learn's MLP raises
    ``ZeroDivisionError`` there too (from ``np.average``).

    Raises
    ------
    ZeroDivisionError
        Naming the minibatch and the way out.
    """
    n = sample_weight.shape[0]
    for start in range(0, n, batch_size):
        if sample_weight[start : start + batch_size].sum() == 0:
            stop = min(start + batch_size, n)
            raise ZeroDivisionError(
                f"sample_weight: the minibatch of samples {start}..{stop - 1} ({order}, "
                f"batch_size={batch_size}) has weights summing to 0, so its weighted mean loss is "
                "undefined (scikit-learn's MLP raises ZeroDivisionError there too). Use a larger "
                "batch_size, or drop the zero-weight samples."
            )


# ---------------------------------------------------------------------------- trainers
class Trainer:
    """Training buffers and update rules of one fit/partial_fit call on one device.

    The estimator builds one per call from ``device_`` and never stores it (it holds
    device buffers and compiled kernels). The parameters live in one flat buffer
    (:class:`Layout`) with a gradient buffer and the optimizer's moments of the same
    shape. :meth:`epoch` runs the minibatch loop written here; the subclasses supply the
    device-specific pieces of one step (``_matmul``, ``_outer_into``, ``_bias_act``,
    ``_out_delta``, ``_colsum``, ``_act_deriv``, ``_update``) and of the epoch
    (``_new_acc``, ``_epoch_data``).

    Sample weights follow scikit-learn's MLP: within a minibatch of ``B`` samples with
    weights summing to ``S``, the output deltas are multiplied by the weights and the
    gradients (L2 term included) divided by ``S`` instead of ``B``; the minibatch adds
    ``B / S`` times its weighted loss to the epoch's loss.

    Parameters
    ----------
    layout : Layout
        The network's parameter layout.
    config : TrainConfig
        Hyper-parameters.
    coefs, intercepts : list of ndarray
        Starting parameters (NumPy).
    opt : OptimizerState
        The optimizer; its moments are copied to the device here and back in
        :meth:`save_optimizer`.
    batch_size : int
        Samples per minibatch.
    sample_weight : ndarray of shape (n_samples,) or None, default=None
        Weights of the training samples (NumPy, as validated by the estimator).
    sparse : bool, default=False
        Whether the training data is sparse (SciPy CSR on the CPU, :class:`CSRRows` on
        the GPU).
    """

    #: 'cpu' or 'cuda' (set by the subclass)
    device = None
    #: epochs this call plans at most (the estimator sets it: max_iter, or 1 for partial_fit);
    #: the CUDA trainer captures its step as a graph only when enough steps lie ahead
    planned_epochs = 1

    def __init__(self, layout, config, coefs, intercepts, opt, batch_size, sample_weight=None, sparse=False):
        self.xp = get_xp(self.device)
        self.sparse = sparse
        self.layout = layout
        self.config = config
        self.batch_size = batch_size
        self.dtype = np.dtype(coefs[0].dtype)
        self.sample_weight = sample_weight
        self.sw = None if sample_weight is None else self._device_weights(sample_weight)
        self.alpha = float(config.alpha)
        self.flat = layout.pack(coefs, intercepts, self.device)
        self.moment1 = to_device(opt.moment1, self.device)
        self.moment2 = to_device(opt.moment2, self.device)
        self.grad = self.xp.empty_like(self.flat)
        # views into the flat buffers, made once per fit call
        self.coefs_v, self.inters_v = layout.views(self.flat)
        self.gcoefs_v, self.ginters_v = layout.views(self.grad)

    def _device_weights(self, sample_weight):
        """The sample weights as the step hooks read them (CPU: the validated NumPy array)."""
        return sample_weight

    # -------------------------------------------------------------- the loop
    def epoch(self, X, Y, order, opt):
        """One pass over ``X, Y`` (on this device) in ``order`` (None: as stored).

        Returns the summed loss (log-loss plus the L2 term, summed over samples; with
        sample weights, each minibatch's weighted mean loss times its size, as in
        scikit-learn).
        """
        acc = self._new_acc()
        n = X.shape[0]
        bs = self.batch_size
        sums = self._weight_sums(order, n)
        X, Y, sw, order = self._epoch_data(X, Y, order)
        for b, start in enumerate(range(0, n, bs)):
            stop = min(start + bs, n)
            rows = slice(start, stop) if order is None else order[start:stop]
            if sums is None:
                self._step(X[rows], Y[rows], opt, acc)
            else:
                self._step(X[rows], Y[rows], opt, acc, sw[rows], sums[b])
        acc = to_host(acc)
        return float(acc[0] + 0.5 * self.alpha * acc[1])

    def _weight_sums(self, order, n):
        """Each minibatch's weight sum this epoch (NumPy float64, host), or None unweighted.

        Raises ZeroDivisionError (:func:`check_batch_weights`), before any update, when a
        minibatch's weights sum to 0.
        """
        if self.sample_weight is None:
            return None
        bs = self.batch_size
        w = self.sample_weight if order is None else self.sample_weight[order]
        sums = [np.float64(w[start : start + bs].sum()) for start in range(0, n, bs)]
        if 0 in sums:
            check_batch_weights(w, bs, "in this epoch's order")
        return sums

    def _step(self, Xb, Yb, opt, acc, wb=None, wsum=None):
        """Forward, backward and one optimizer update on the minibatch ``Xb, Yb``.

        ``wb``: the minibatch's sample weights (None: unweighted), ``wsum`` their sum.
        """
        B = Xb.shape[0]
        scale = None if wb is None else B / wsum  # how much this batch's weighted mean counts
        coefs, inters = self.coefs_v, self.inters_v
        gcoefs, ginters = self.gcoefs_v, self.ginters_v
        acts = [Xb]
        last = len(coefs) - 1
        for i, (W, b) in enumerate(zip(coefs, inters)):
            Z = self._matmul(acts[-1], W)
            if i != last:
                self._bias_act(Z, b)
                acts.append(Z)
            else:
                self._out_delta(Z, b, Yb, acc, wb, scale)
                D = Z
        for i in range(last, -1, -1):
            self._outer_into(acts[i], D, gcoefs[i])
            self._colsum(D, ginters[i])
            if i > 0:
                D = self._matmul(D, coefs[i].T)
                self._act_deriv(D, acts[i])
        self._update(opt, B if wb is None else wsum, acc, scale)

    def _next_lr(self, opt):
        """Learning rate of the next update (Adam: bias-corrected, counting the update)."""
        if opt.solver == Solver.ADAM:
            opt.t += 1
            t = opt.t
            return opt.lr * math.sqrt(1 - self.config.beta_2**t) / (1 - self.config.beta_1**t)
        return opt.lr

    # -------------------------------------------------------------- results
    def output(self, X):
        """Output-layer activations (NumPy) of ``X`` with the current parameters."""
        coefs, inters = self.layout.views(self.flat)
        if isinstance(X, CSRRows):
            X = X.toarray()
        P = forward(
            to_device(X, self.device), coefs, inters, self.config.activation, self.config.out_activation
        )
        return to_host(P)

    def save_optimizer(self, opt):
        """Write the moments back into ``opt`` as NumPy arrays."""
        opt.moment1 = to_host(self.moment1)
        opt.moment2 = to_host(self.moment2)
