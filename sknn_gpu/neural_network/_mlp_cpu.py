"""The CPU trainer of GPUMLPClassifier: NumPy, the reference for the CUDA trainer.

BLAS GEMMs for the products and vectorised NumPy for everything around them; the
optimizer step is the same arithmetic as ``params_update`` in ``_kernels/mlp.cu``.
SciPy sparse minibatches are multiplied as scikit-learn does (``X_batch @ W``,
``X_batch.T @ delta``).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ._base import Solver, Trainer, activation_grad, hidden_activation, log_loss, output_activation

__all__ = ["CPUTrainer"]


class CPUTrainer(Trainer):
    """Minibatch SGD/Adam on NumPy arrays (see :class:`~._base.Trainer`)."""

    device = "cpu"

    def _new_acc(self):
        return np.zeros(2)  # [summed log-loss, summed squared coefficients]

    def _epoch_data(self, X, Y, order):
        return X, Y, self.sw, order  # gathered per minibatch

    def _matmul(self, A, B):
        return A @ B  # np.matmul, or sparse @ dense for the input layer of sparse data

    def _outer_into(self, a_col, D, G):
        """``G = a_col.T @ D``."""
        if sp.issparse(a_col):  # the input layer of sparse data
            G[...] = a_col.T @ D
            return G
        return np.matmul(a_col.T, D, out=G)

    def _bias_act(self, Z, b):
        Z += b
        hidden_activation(Z, self.config.activation)

    def _out_delta(self, Z, b, Yb, acc, wb=None, scale=None):
        """Output activation, loss into ``acc[0]``, then ``Z`` becomes the output delta.

        With sample weights ``wb``: the weighted loss times ``scale`` and the delta times
        each row's weight.
        """
        out = self.config.out_activation
        Z += b
        output_activation(Z, out)
        if wb is None:
            acc[0] += log_loss(Z, Yb, out)
            Z -= Yb
            return
        acc[0] += scale * log_loss(Z, Yb, out, wb)
        Z -= Yb
        Z *= wb.reshape(-1, 1)

    def _colsum(self, D, out):
        D.sum(axis=0, out=out)

    def _act_deriv(self, D, H):
        activation_grad(D, H, self.config.activation)

    def _update(self, opt, B, acc, scale=None):
        """One optimizer step over the flat buffer: the arithmetic of ``params_update``.

        ``B`` divides the gradients (the batch size, or its weight sum); ``scale`` (None:
        1) multiplies the L2 term added to the loss.
        """
        lr = self._next_lr(opt)
        cfg = self.config
        T = self.dtype.type
        W, G = self.flat, self.grad
        nc = self.layout.n_coef
        inv_b = 1.0 / B
        sq = float(np.dot(W[:nc], W[:nc]))
        acc[1] += sq if scale is None else scale * sq
        g = G * T(inv_b)
        g[:nc] += T(self.alpha * inv_b) * W[:nc]
        solver = opt.solver
        if solver == Solver.SGD:
            W -= T(lr) * g
        elif solver == Solver.ADAM:
            b1, b2 = T(cfg.beta_1), T(cfg.beta_2)
            m, v = self.moment1, self.moment2
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * (g * g)
            W -= T(lr) * m / (np.sqrt(v) + T(cfg.epsilon))
        else:  # momentum, Nesterov
            mu = T(cfg.momentum)
            v = self.moment1
            v *= mu
            v -= T(lr) * g
            if solver == Solver.MOMENTUM:
                W += v
            else:
                W += mu * v - T(lr) * g
