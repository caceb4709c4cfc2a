"""The sparse family's activations: names, integer codes and one implementation against ``xp``.

The codes are shared with ``_kernels/sparsenet.cu`` (``activate`` / ``dactivate``), which
uses the same formulas. :func:`activation` and :func:`derivative` take one code and the
array module ``xp`` (NumPy or CuPy); :func:`apply_activation` and
:func:`activation_derivative` apply per-row codes to a node-major block. The CPU engine
of :class:`~sknn_gpu.sparse.SparseGraph` and the dense phase of
:class:`~sknn_gpu.sparse.SparseNetRegressor` both use them.
"""

from __future__ import annotations

import numpy as np

from .._backend import array_module

__all__ = [
    "ACTIVATIONS",
    "NEAT_ACTIVATIONS",
    "TRAINABLE_ACTIVATIONS",
    "activation",
    "derivative",
    "apply_activation",
    "activation_derivative",
    "activation_codes",
]

#: Activation name -> integer code shared with ``_kernels/sparsenet.cu``.
ACTIVATIONS = {
    "identity": 0,
    "neat_sigmoid": 1,  # neat-python's sigmoid: 1/(1+exp(-clip(5z, -60, 60)))
    "sigmoid": 2,  # 1/(1+exp(-clip(slope*z, -60, 60))), slope 4.97 by default (the paper's)
    "tanh": 3,  # plain tanh(z)
    "neat_tanh": 4,  # neat-python's tanh: tanh(clip(2.5z, -60, 60))
    "relu": 5,
    "clamped": 6,
    "sin": 7,
    "gauss": 8,
    "elu": 9,
    "lelu": 10,
    "selu": 11,
    "softplus": 12,
    "inv": 13,
    "log": 14,
    "exp": 15,
    "abs": 16,
    "hat": 17,
    "square": 18,
    "cube": 19,
}
CODE_TO_NAME = {v: k for k, v in ACTIVATIONS.items()}

#: neat-python activation name -> our code (neat's sigmoid/tanh are the scaled, clamped ones).
NEAT_ACTIVATIONS = {
    name: code
    for name, code in ACTIVATIONS.items()
    if name not in ("neat_sigmoid", "neat_tanh", "sigmoid", "tanh")
}
NEAT_ACTIVATIONS["sigmoid"] = ACTIVATIONS["neat_sigmoid"]
NEAT_ACTIVATIONS["tanh"] = ACTIVATIONS["neat_tanh"]
CODE_TO_NEAT = {v: k for k, v in NEAT_ACTIVATIONS.items()}

#: Activations whose derivative the training code knows (from the node output).
TRAINABLE_ACTIVATIONS = ("identity", "neat_sigmoid", "sigmoid", "tanh", "neat_tanh", "relu")
TRAINABLE_CODES = np.array([ACTIVATIONS[a] for a in TRAINABLE_ACTIVATIONS])

_SELU_LAMBDA, _SELU_ALPHA = 1.0507009873554805, 1.6732632423543772


def _activation(code, z, slope, xp):  # noqa: C901 - one branch per activation
    if code == 0:
        return z
    if code == 1:
        return 1.0 / (1.0 + xp.exp(-xp.clip(5.0 * z, -60.0, 60.0)))
    if code == 2:
        return 1.0 / (1.0 + xp.exp(-xp.clip(slope * z, -60.0, 60.0)))
    if code == 3:
        return xp.tanh(z)
    if code == 4:
        return xp.tanh(xp.clip(2.5 * z, -60.0, 60.0))
    if code == 5:
        return xp.where(z > 0.0, z, 0.0)
    if code == 6:
        return xp.clip(z, -1.0, 1.0)
    if code == 7:
        return xp.sin(xp.clip(5.0 * z, -60.0, 60.0))
    if code == 8:
        t = xp.clip(z, -3.4, 3.4)
        return xp.exp(-5.0 * t * t)
    if code == 9:
        return xp.where(z > 0.0, z, xp.exp(xp.minimum(z, 0.0)) - 1.0)
    if code == 10:
        return xp.where(z > 0.0, z, 0.005 * z)
    if code == 11:
        lam, alpha = _SELU_LAMBDA, _SELU_ALPHA
        return xp.where(z > 0.0, lam * z, lam * alpha * (xp.exp(xp.minimum(z, 0.0)) - 1.0))
    if code == 12:
        return 0.2 * xp.log(1.0 + xp.exp(xp.clip(5.0 * z, -60.0, 60.0)))
    if code == 13:
        return xp.where(z == 0.0, 0.0, 1.0 / xp.where(z == 0.0, 1.0, z))
    if code == 14:
        return xp.log(xp.maximum(z, 1e-7))
    if code == 15:
        return xp.exp(xp.clip(z, -60.0, 60.0))
    if code == 16:
        return xp.abs(z)
    if code == 17:
        return xp.maximum(0.0, 1.0 - xp.abs(z))
    if code == 18:
        return z * z
    if code == 19:
        return z * z * z
    raise ValueError(f"unknown activation code {code}.")


def activation(code, z, slope, xp=np):
    """Activation ``code`` applied to ``z`` (any shape) with the array module ``xp``.

    Parameters
    ----------
    code : int
        One of the values of ``ACTIVATIONS``.
    z : ndarray
        Pre-activations (NumPy or CuPy, matching ``xp``).
    slope : float
        Slope of the ``'sigmoid'`` activation (code 2).
    xp : module, default=numpy
        ``numpy`` or ``cupy``.

    Returns
    -------
    ndarray
        Same shape as ``z``. Overflow in intermediate steps is silent (the formulas
        clamp where the kernels clamp).
    """
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        return _activation(int(code), z, slope, xp)


def derivative(code, f, slope, xp=np):
    """d activation / d z expressed through the activation's output ``f`` (trainable codes only).

    ``code``, ``slope`` and ``xp`` are as in :func:`activation`; ``f`` holds the outputs
    ``activation(code, z, slope, xp)`` and the result has its shape. Raises ValueError for
    an activation whose derivative is not known from its output (not in
    ``TRAINABLE_ACTIVATIONS``).
    """
    code = int(code)
    if code == 0:
        return xp.ones_like(f)
    if code == 1:
        return 5.0 * f * (1.0 - f)
    if code == 2:
        return slope * f * (1.0 - f)
    if code == 3:
        return 1.0 - f * f
    if code == 4:
        return 2.5 * (1.0 - f * f)
    if code == 5:
        return (f > 0.0).astype(f.dtype)
    raise ValueError(f"activation {CODE_TO_NAME.get(code, code)!r} cannot be trained.")


def _per_row(fn, codes, block, slope):
    """Apply ``fn(code, rows, slope, xp)`` to the rows of ``block`` grouped by their code."""
    xp = array_module(block)
    codes = np.asarray(codes)
    uniq = np.unique(codes)
    if uniq.size == 1:  # one code for the whole block (the common case): no gather/scatter
        return fn(int(uniq[0]), block, slope, xp)
    out = xp.empty_like(block)
    for code in uniq:
        rows = np.flatnonzero(codes == code)
        if xp is not np:
            rows = xp.asarray(rows)
        out[rows] = fn(int(code), block[rows], slope, xp)
    return out


def apply_activation(codes, z, slope):
    """Apply per-row activation ``codes`` (shape (n,), host) to ``z`` (shape (n, B)).

    Parameters
    ----------
    codes : array-like of int, shape (n,)
        One activation code per row.
    z : ndarray of shape (n, B)
        Pre-activations, NumPy or CuPy.
    slope : float
        Slope of ``'sigmoid'``.

    Returns
    -------
    ndarray of shape (n, B)
        The activations, same array type as ``z``.
    """
    return _per_row(activation, codes, z, slope)


def activation_derivative(codes, f, slope):
    """Per-row d activation / d z through the outputs ``f`` (shape (n, B)); trainable codes only.

    The counterpart of :func:`apply_activation` (same arguments, with the outputs ``f`` in
    place of ``z``), built on :func:`derivative`.
    """
    return _per_row(derivative, codes, f, slope)


def activation_codes(activations, n_nodes, default="identity"):
    """Per-node integer codes from None, one name, a sequence of names or of codes.

    Parameters
    ----------
    activations : None, str or sequence of str or int
        One activation for every node, or one per node.
    n_nodes : int
        Number of nodes.
    default : str, default='identity'
        Used when ``activations`` is None.

    Returns
    -------
    ndarray of int32, shape (n_nodes,)
    """
    if activations is None:
        activations = default
    if isinstance(activations, str):
        if activations not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activations!r}; known: {sorted(ACTIVATIONS)}.")
        return np.full(n_nodes, ACTIVATIONS[activations], dtype=np.int32)
    acts = list(activations)
    if len(acts) != n_nodes:
        raise ValueError(f"activations has {len(acts)} entries, expected one per node ({n_nodes}).")
    codes = np.empty(n_nodes, dtype=np.int32)
    for i, a in enumerate(acts):
        if isinstance(a, str):
            if a not in ACTIVATIONS:
                raise ValueError(f"unknown activation {a!r} for node {i}; known: {sorted(ACTIVATIONS)}.")
            codes[i] = ACTIVATIONS[a]
        else:
            if int(a) not in CODE_TO_NAME:
                raise ValueError(f"unknown activation code {a!r} for node {i}.")
            codes[i] = int(a)
    return codes
