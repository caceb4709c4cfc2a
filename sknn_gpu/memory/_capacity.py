"""GBNN capacity and size: how full a memory is, how often it errs, and what it needs.

The theory the estimator checks its load against (:func:`theoretical_density`,
:func:`erasure_error_rate` and the density at which one erased symbol becomes
unreliable) and the byte estimate every storing and retrieving call checks before it
allocates (:func:`gbnn_bytes`, which asks the device's engine for its working set).
Functions of the shapes only: no estimator state.
"""

from __future__ import annotations

import numpy as np

from ._gbnn_cpu import _n_words
from ._gbnn_engine import engine

__all__ = ["theoretical_density", "erasure_error_rate", "gbnn_bytes"]

#: ``fit`` and ``partial_fit`` warn when a probe with ONE erased symbol is left ambiguous
#: (several neurons of its cluster connected to every known one) more often than this:
#: measured on a sample of the call's messages, or predicted for random messages by
#: :func:`erasure_error_rate` at ``density_`` (see :func:`_reliable_density`).
UNRELIABLE_RATE = 0.1

# ----------------------------------------------------------------------------------
# Size estimate (refuse oversize work before allocating)
# ----------------------------------------------------------------------------------
#: Host bytes below which a GPU call skips the host-memory check (reading the host's free
#: memory costs ~20 us, a noticeable share of a small GPU batch).
_HOST_CHECK_FLOOR = 64 << 20


def gbnn_bytes(device, n_clusters, cluster_size, n_rows=0, operation="fit"):
    """Host and device bytes one :class:`GBNNMemory` call allocates, from the sizes alone.

    The one size estimate of :class:`GBNNMemory`, checked before anything is
    allocated by ``fit``, ``partial_fit`` and ``retrieve``/``predict``/``score``.

    Parameters
    ----------
    device : {'cpu', 'cuda'}
        Resolved device.
    n_clusters, cluster_size : int
        ``C`` and ``L``.
    n_rows : int, default=0
        Messages stored or probes retrieved in the call.
    operation : {'fit', 'partial_fit', 'retrieve'}, default='fit'
        ``'fit'`` counts the bit-packed ``W_`` (``C·L × C·ceil(L/32)`` ``uint32`` words)
        and the storing work; ``'partial_fit'`` the storing work; ``'retrieve'`` the
        per-batch work of a retrieval.

    Returns
    -------
    host, device : int
        Bytes on the host and on the GPU (0 for ``device='cpu'``).
    """
    if operation not in ("fit", "partial_fit", "retrieve"):
        raise ValueError(f"operation must be 'fit', 'partial_fit' or 'retrieve', got {operation!r}.")
    C, L, n_rows = int(n_clusters), int(cluster_size), int(n_rows)
    host, dev = engine(device).work_bytes("retrieve" if operation == "retrieve" else "store", n_rows, C, L)
    if operation == "fit":
        w = C * L * C * _n_words(L) * 4
        if device == "cuda":
            dev += w
        else:
            host += w
    return host, dev


# ----------------------------------------------------------------------------------
# Closed-form helpers
# ----------------------------------------------------------------------------------
def theoretical_density(n_messages: int, cluster_size: int) -> float:
    """Expected fraction of inter-cluster edges present after storing random messages.

    Each of the ``L²`` possible edges between two clusters is added by one uniform
    random message with probability ``1/L²``, so after ``M`` messages

    ``d = 1 − (1 − 1/L²)^M``.

    Parameters
    ----------
    n_messages : int or array-like
        Number ``M`` of stored (independent, uniform) messages.
    cluster_size : int
        Neurons per cluster ``L``.

    Returns
    -------
    density : float or ndarray
    """
    m = np.asarray(n_messages, dtype=np.float64)
    L = float(cluster_size)
    if np.any(m < 0) or L < 1:
        raise ValueError("n_messages must be >= 0 and cluster_size >= 1.")
    d = -np.expm1(m * np.log1p(-1.0 / (L * L))) if L > 1 else np.where(m > 0, 1.0, 0.0)
    return float(d) if np.ndim(d) == 0 else d


def erasure_error_rate(density: float, n_clusters: int, n_erased: int, cluster_size: int) -> float:
    """One-step probability that a probe with erased symbols is not uniquely resolved.

    After one step from the ``C − e`` known neurons, a wrong neuron of an erased
    cluster survives when it is connected to all of them (probability ``d^(C−e)``);
    there are ``e(L − 1)`` wrong neurons, so

    ``P_e = 1 − (1 − d^(C−e))^(e(L−1))``.

    Parameters
    ----------
    density : float or array-like
        Edge density ``d`` (see :func:`theoretical_density` or ``GBNNMemory.density_``).
    n_clusters : int
        ``C``.
    n_erased : int or array-like
        ``e``, number of erased symbols (``0 <= e <= C``).
    cluster_size : int
        ``L``.

    Returns
    -------
    p_error : float or ndarray
    """
    d = np.asarray(density, dtype=np.float64)
    e = np.asarray(n_erased, dtype=np.float64)
    if np.any((d < 0) | (d > 1)) or np.any((e < 0) | (e > n_clusters)):
        raise ValueError("density must be in [0, 1] and n_erased in [0, n_clusters].")
    p = -np.expm1(e * (cluster_size - 1) * np.log1p(-(d ** (n_clusters - e))))
    p = np.where(d ** (n_clusters - e) >= 1.0, np.where(e > 0, 1.0, 0.0), p)
    return float(p) if np.ndim(p) == 0 else p


def _reliable_density(n_clusters, cluster_size, rate=UNRELIABLE_RATE):
    """The density at which :func:`erasure_error_rate` for one erased symbol reaches ``rate``.

    Solves ``1 - (1 - d^(C-1))^(L-1) = rate``: ``d = (1 - (1 - rate)^(1/(L-1)))^(1/(C-1))``
    (0.25 for C=5, L=26; 0.36 for C=8, L=128; 0.57 for C=16, L=512). None when
    ``C < 2`` or ``L < 2``, where no probe can be ambiguous that way.
    """
    C, L = int(n_clusters), int(cluster_size)
    if C < 2 or L < 2:
        return None
    per_neuron = -np.expm1(np.log1p(-rate) / (L - 1))  # 1 - (1 - rate)^(1/(L-1)), exactly
    return float(per_neuron ** (1.0 / (C - 1)))
