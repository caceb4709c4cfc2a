"""CPU engine of :class:`~sknn_gpu.sparse.SparseGraph`: NumPy/SciPy, the reference.

One SciPy sparse x dense product per level for the whole batch, then the
activations. Same functions and signatures as the CUDA engine (``_graph_cuda``), same
results (float64; the kernels use the same formulas). Node values are the node-major
matrix ``V`` of shape ``(n_slots, batch)`` described in ``_graph``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._backend import check_memory
from ._activations import activation_derivative, apply_activation

__all__ = ["forward", "backward"]


def _level_matrix(plan, w, level, n_slots):
    lp, indptr = plan["level_ptr"], plan["indptr"]
    r0, r1 = int(lp[level]), int(lp[level + 1])
    e0, e1 = int(indptr[r0]), int(indptr[r1])
    return (
        r0,
        r1,
        sp.csr_matrix((w[e0:e1], plan["indices"][e0:e1], indptr[r0 : r1 + 1] - e0), shape=(r1 - r0, n_slots)),
    )


def forward(graph, X, executor="auto", w=None, b=None, keep_values=False, check_finite=False):
    """Evaluate ``graph`` on NumPy ``X`` (n_samples, n_inputs), float64: one sparse product per level.

    Parameters
    ----------
    graph : SparseGraph
        The network (its level plan is built on first use).
    X : ndarray of shape (n_samples, n_inputs), float64
        Inputs (already validated by the caller).
    executor : str, default='auto'
        Accepted for the CUDA engine's signature; the CPU has one executor.
    w, b : ndarray, optional
        Plan-order weights and biases (training passes its own); default the graph's.
    keep_values : bool, default=False
        Also return the node values ``V`` (n_slots, n_samples) for the backward pass.
    check_finite : bool, default=False
        Raise ValueError when ``X`` holds NaN or infinity.

    Returns
    -------
    out : ndarray of shape (n_samples, n_outputs)
        Output node values; ``(out, V)`` when ``keep_values``.
    """
    if check_finite and not np.all(np.isfinite(X)):
        raise ValueError("X contains NaN or infinite values.")
    plan = graph.plan
    if w is None or b is None:
        pw, pb = graph.plan_params()
        w = pw if w is None else w
        b = pb if b is None else b
    n_in = plan["n_in"]
    n_slots = n_in + plan["nodes"].size
    B = X.shape[0]
    check_memory(8 * n_slots * B, "cpu", "SparseGraph forward (node values)")
    V = np.empty((n_slots, B), dtype=np.float64)
    V[:n_in] = X.T
    resp, act = plan["resp"], plan["act"]
    for level in range(plan["level_ptr"].shape[0] - 1):
        r0, r1, A = _level_matrix(plan, w, level, n_slots)
        z = b[r0:r1, None] + resp[r0:r1, None] * (A @ V)
        V[n_in + r0 : n_in + r1] = apply_activation(act[r0:r1], z, graph.slope)
    out = V[plan["out_slots"]].T.copy()
    return (out, V) if keep_values else out


def backward(graph, V, G_out, w, executor="auto"):
    """Plan-order gradients ``(gw, gb)`` of a loss, given dL/d(outputs) ``G_out`` (n_outputs, B).

    Levels are walked in reverse; each level's output gradient is gathered through the
    transposed edge structure.

    Parameters
    ----------
    graph : SparseGraph
        The network.
    V : ndarray of shape (n_slots, B)
        Node values of the forward pass (``forward(..., keep_values=True)``).
    G_out : ndarray of shape (n_outputs, B)
        Gradient of the loss with respect to the outputs.
    w : ndarray
        Plan-order weights used in the forward pass.
    executor : str, default='auto'
        Accepted for the CUDA engine's signature.

    Returns
    -------
    gw : ndarray of shape (n_active_edges,)
        Gradient with respect to the plan-order weights.
    gb : ndarray of shape (n_computed_nodes,)
        Gradient with respect to the biases of the computed nodes.
    """
    plan = graph.plan
    n_in = plan["n_in"]
    n_comp = plan["nodes"].size
    B = V.shape[1]
    G = np.zeros((n_comp, B))
    np.add.at(G, plan["out_slots"] - n_in, G_out)
    D = np.zeros((n_comp, B))
    tw = w[plan["t_perm"]] * plan["resp"][plan["t_rows"]]
    t_indptr, t_rows = plan["t_indptr"], plan["t_rows"]
    lp = plan["level_ptr"]
    for level in range(lp.shape[0] - 2, -1, -1):
        r0, r1 = int(lp[level]), int(lp[level + 1])
        s0, s1 = n_in + r0, n_in + r1
        e0, e1 = int(t_indptr[s0]), int(t_indptr[s1])
        g = G[r0:r1]
        if e1 > e0:
            T = sp.csr_matrix((tw[e0:e1], t_rows[e0:e1], t_indptr[s0 : s1 + 1] - e0), shape=(r1 - r0, n_comp))
            g = g + T @ D
        D[r0:r1] = g * activation_derivative(plan["act"][r0:r1], V[s0:s1], graph.slope)
    E = plan["indices"].shape[0]
    gw = np.empty(E)
    rows, cols = plan["row_of_edge"], plan["indices"]
    step = max(1, (32 << 20) // (16 * max(B, 1)))
    for e0 in range(0, E, step):
        e1 = min(E, e0 + step)
        gw[e0:e1] = np.einsum("ij,ij->i", D[rows[e0:e1]], V[cols[e0:e1]])
    gw *= plan["resp"][rows]
    return gw, D.sum(axis=1)
