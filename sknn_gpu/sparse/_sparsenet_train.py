"""Trainable models of :class:`~sknn_gpu.sparse.SparseNetRegressor` and their optimisers.

* :class:`DenseMasked`: the dense layered MLP with 0/1 weight masks of the ``'prune'``
  topology (CuPy matrix products on the GPU), exported as a ``SparseGraph``;
* :class:`SparseModel`: plan-order weights and biases of a ``SparseGraph`` on the device,
  evaluated and differentiated by the engine of that device (``_graph.engine``);
* :class:`Adam`, :class:`SGD`: the optimisers, elementwise on NumPy or CuPy arrays.

All are written against the array module of their parameters; the estimator's training
loop (``SparseNetRegressor._train``) drives them with the same calls on both devices.
"""

from __future__ import annotations

import numpy as np

from .._backend import array_module, to_device, to_host
from ._activations import ACTIVATIONS, activation, derivative
from ._graph import SparseGraph, engine

__all__ = ["DenseMasked", "SparseModel", "Adam", "SGD"]


# --------------------------------------------------------------------------- models
def _largest(values, n_keep):
    """Mask of the ``n_keep`` largest ``values``, ties broken towards the lowest index.

    The set ``np.argsort(-values, kind="stable")[:n_keep]`` selects, in linear time (a
    partition instead of a sort: the dense phase of a wide network prunes 10^8 weights).
    """
    n = values.size
    n_keep = min(max(int(n_keep), 0), n)
    if n_keep in (0, n):
        return np.full(n, n_keep == n)
    threshold = np.partition(values, n - n_keep)[n - n_keep]  # the n_keep-th largest
    keep = values > threshold
    ties = np.flatnonzero(values == threshold)
    keep[ties[: n_keep - int(keep.sum())]] = True
    return keep


class DenseMasked:
    """A layered MLP with 0/1 masks on its weights (the 'prune' topology before export)."""

    def __init__(self, sizes, code, slope, rng, xp):
        self.xp, self.code, self.slope = xp, code, slope
        self.sizes = list(sizes)
        factor = 2.0 if code in (1, 2) else 6.0
        params, masks = [], []
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            bound = np.sqrt(factor / (fan_in + fan_out))
            params.append(xp.asarray(rng.uniform(-bound, bound, (fan_in, fan_out))))
            params.append(xp.asarray(rng.uniform(-bound, bound, fan_out)))
            masks.append(xp.ones((fan_in, fan_out)))
        self.params, self.masks = params, masks
        # whole[k]: every weight of layer k is live (its mask all ones, which no product needs)
        self.whole = [True] * len(masks)
        self.weight_index = list(range(0, len(params), 2))

    def forward(self, X, keep=False, rows=None):
        acts = [X if rows is None else X[rows]]
        n_layers = len(self.masks)
        for k in range(n_layers):
            z = acts[-1] @ self.params[2 * k] + self.params[2 * k + 1]
            acts.append(z if k == n_layers - 1 else activation(self.code, z, self.slope, self.xp))
        return (acts[-1], acts) if keep else acts[-1]

    def backward(self, acts, G):
        grads = [None] * len(self.params)
        n_layers = len(self.masks)
        for k in range(n_layers - 1, -1, -1):
            grads[2 * k] = acts[k].T @ G
            if not self.whole[k]:
                grads[2 * k] *= self.masks[k]  # in place: a new product, masked without a copy
            grads[2 * k + 1] = G.sum(axis=0)
            if k:
                G = (G @ self.params[2 * k].T) * derivative(self.code, acts[k], self.slope, self.xp)
        return grads

    def apply_masks(self):
        """Zero the dead weights again after an optimiser step (in place)."""
        for k, m in enumerate(self.masks):
            if not self.whole[k]:
                self.params[2 * k] *= m

    def n_alive(self):
        return int(sum(float(m.sum()) for m in self.masks))

    def prune_to(self, n_keep):
        """Keep exactly the ``n_keep`` largest-magnitude live weights (ties: lowest index)."""
        xp = self.xp
        mags = np.concatenate(
            [
                np.where(to_host(self.masks[k]) > 0, np.abs(to_host(self.params[2 * k])), -1.0).ravel()
                for k in range(len(self.masks))
            ]
        )
        # dead weights get -1 so they are never kept; ties at the threshold go to the lowest
        # positions (what a stable sort by decreasing magnitude keeps), found in O(n)
        keep = _largest(mags, n_keep)
        pos = 0
        for k, m in enumerate(self.masks):
            size = m.size
            new = keep[pos : pos + size].reshape(m.shape).astype(np.float64)
            self.masks[k] = xp.asarray(new)
            self.whole[k] = bool(keep[pos : pos + size].all())
            self.params[2 * k] = self.params[2 * k] * self.masks[k]
            pos += size

    def to_graph(self, slope):
        """Export the live weights as a SparseGraph (inputs, outputs, then hidden nodes)."""
        sizes = self.sizes
        n_in, n_out = sizes[0], sizes[-1]
        hidden = sizes[1:-1]
        # node ids per layer
        ids = [np.arange(n_in)]
        start = n_in + n_out
        for h in hidden:
            ids.append(np.arange(start, start + h))
            start += h
        ids.append(np.arange(n_in, n_in + n_out))
        n_nodes = start
        src, dst, w = [], [], []
        biases = np.zeros(n_nodes)
        codes = np.full(n_nodes, self.code, dtype=np.int32)
        codes[ids[-1]] = ACTIVATIONS["identity"]
        for k in range(len(self.masks)):
            W = to_host(self.params[2 * k])
            M = to_host(self.masks[k]) > 0
            r, c = np.nonzero(M)
            src.append(ids[k][r])
            dst.append(ids[k + 1][c])
            w.append(W[r, c])
            biases[ids[k + 1]] = to_host(self.params[2 * k + 1])
        return SparseGraph(
            np.concatenate(src),
            np.concatenate(dst),
            np.concatenate(w),
            biases,
            np.ones(n_nodes),
            codes,
            ids[0],
            ids[-1],
            slope=slope,
        )


class SparseModel:
    """Trainable view of a SparseGraph: plan-order weights and biases on the device, one engine."""

    def __init__(self, graph, device):
        self.graph, self.engine = graph, engine(device)
        self.params = [to_device(p, device) for p in graph.plan_params()]
        self.weight_index = [0]

    def forward(self, X, keep=False, rows=None):
        w, b = self.params
        out, V = self.engine.forward(self.graph, X, w=w, b=b, keep_values=True, rows=rows)
        return (out, V) if keep else out

    def backward(self, V, G):
        G_out = array_module(G).ascontiguousarray(G.T)
        return list(self.engine.backward(self.graph, V, G_out, self.params[0]))

    def to_graph(self):
        return self.graph.with_params(self.params[0], self.params[1])


# --------------------------------------------------------------------------- optimisers
class Adam:
    """Adam (scikit-learn's MLP defaults); ``step`` replaces the entries of ``params``.

    The moments are updated in place (they belong to the optimiser) and the temporaries
    live in two work arrays per parameter array, kept between steps: the operations of
    ``m = b1 * m + (1 - b1) * g``, ``v = b2 * v + (1 - b2) * g * g`` and
    ``p - lr * m / (v ** 0.5 + eps)``, in that order (the same bits as those expressions
    on NumPy), with one new array per step instead of eleven. A wide dense phase spends
    most of its time here: 10^7 weights step in ~80 ms instead of ~200 ms on one core.
    """

    def __init__(self, params, lr, beta_1=0.9, beta_2=0.999, epsilon=1e-8):
        self.lr, self.b1, self.b2, self.eps = lr, beta_1, beta_2, epsilon
        self.m = [p * 0.0 for p in params]
        self.v = [p * 0.0 for p in params]
        self._scratch = [None] * len(params)
        self.t = 0

    def step(self, params, grads):
        self.t += 1
        lr = self.lr * np.sqrt(1 - self.b2**self.t) / (1 - self.b1**self.t)
        for i, (p, g) in enumerate(zip(params, grads)):
            m, v = self.m[i], self.v[i]
            if self._scratch[i] is None:
                self._scratch[i] = (m * 0.0, m * 0.0)
            a, b = self._scratch[i]
            xp = array_module(m)
            xp.multiply(g, 1 - self.b1, out=a)
            m *= self.b1
            m += a
            xp.multiply(g, 1 - self.b2, out=a)
            a *= g
            v *= self.b2
            v += a
            xp.sqrt(v, out=a)  # NumPy's v ** 0.5
            a += self.eps
            xp.multiply(m, lr, out=b)
            b /= a
            params[i] = p - b


class SGD:
    """SGD with momentum; ``step`` replaces the entries of ``params`` (the velocity is
    updated in place with one work array: ``vel = mu * vel - lr * g``, the same
    operations)."""

    def __init__(self, params, lr, momentum=0.9):
        self.lr, self.mu = lr, momentum
        self.vel = [p * 0.0 for p in params]
        self._scratch = [None] * len(params)

    def step(self, params, grads):
        for i, (p, g) in enumerate(zip(params, grads)):
            vel = self.vel[i]
            if self._scratch[i] is None:
                self._scratch[i] = vel * 0.0
            a = self._scratch[i]
            array_module(vel).multiply(g, self.lr, out=a)
            vel *= self.mu
            vel -= a
            params[i] = p + vel
