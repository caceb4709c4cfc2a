"""The differentially private release of FlyNN's counts (Ram & Sinha, AAAI 2022, Alg. 2).

:func:`dp_release` is the mechanism on a host count table: per class, the exponential
mechanism picks the cells to release and Laplace noise is added to their counts.
:func:`private_counts` checks the budget and builds the released table that
:meth:`FlyNNClassifier.privatize <sknn_gpu.fly.FlyNNClassifier.privatize>` installs
in its copy of the model (the guarantee is stated there).
"""

from __future__ import annotations

from numbers import Integral

import numpy as np
from sklearn.utils import check_random_state

from .._backend import to_host

__all__ = ["dp_release", "private_counts"]


def dp_release(counts, epsilon, n_released, rng):
    """Per-class private release of ``n_released`` counts (Ram & Sinha, AAAI 2022, Alg. 2).

    Returns ``(released, noisy)``: ``released`` (n_classes, n_released) are the cell
    indices chosen per class, in the order they were drawn, and ``noisy`` the
    matching counts plus Laplace noise (not yet clipped at 0).

    Selection: ``n_released`` rounds of the exponential mechanism without
    replacement, with utility the count and weights ``exp(epsilon * z / (2 T))``,
    drawn at once with the Gumbel-top-T trick (adding i.i.d. Gumbel noise to the
    log-weights and keeping the T largest is distributed exactly as T sequential
    draws without replacement). Values: Laplace noise of scale ``2 T / epsilon``.
    """
    counts = np.asarray(counts, dtype=np.float64)
    n_classes, m = counts.shape
    T = int(n_released)
    scale = 2.0 * T / float(epsilon)
    gumbel = rng.gumbel(size=(n_classes, m))
    keys = counts / scale + gumbel
    released = np.argsort(-keys, axis=1, kind="stable")[:, :T]
    noise = rng.laplace(0.0, scale, size=(n_classes, T))
    noisy = np.take_along_axis(counts, released, axis=1) + noise
    return released.astype(np.int64), noisy


def private_counts(counts, epsilon, n_released, n_components, random_state=None):
    """The released count table of ``counts`` (n_classes, n_components) under budget ``epsilon``.

    Checks ``epsilon`` (a finite number > 0) and ``n_released`` (an integer in
    ``[1, n_components]``), then brings ``counts`` to the host and releases
    ``n_released`` noisy counts per class with :func:`dp_release`, clipped at 0; every
    other count is released as 0. Returns
    ``(private, released, scale)``: the float64 table, the released cells per class
    and the Laplace scale ``2 n_released / epsilon``.
    """
    if not isinstance(epsilon, (int, float, np.floating, np.integer)) or isinstance(epsilon, bool):
        raise TypeError(f"epsilon must be a positive number, got {epsilon!r}.")
    if not np.isfinite(epsilon) or epsilon <= 0:
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}.")
    if (
        not isinstance(n_released, (Integral, np.integer))
        or isinstance(n_released, bool)
        or not 1 <= n_released <= n_components
    ):
        raise ValueError(
            f"n_released must be an integer in [1, n_components_={n_components}], got {n_released!r}."
        )
    rng = check_random_state(random_state)
    counts = to_host(counts)
    released, noisy = dp_release(counts, epsilon, n_released, rng)
    private = np.zeros(counts.shape, dtype=np.float64)
    np.put_along_axis(private, released, np.maximum(noisy, 0.0), axis=1)
    return private, released, 2.0 * int(n_released) / float(epsilon)
