"""The differentially private release of FlyNN's counts, and what a private copy may carry.

* :func:`dp_release`: the mechanism on a host count table. Per class, ``n_released``
  rounds of the exponential mechanism pick cells and Laplace noise is added to their
  counts (Ram & Sinha, AAAI 2022, Alg. 2, per class rather than over the whole table).
  Its randomness comes from the operating system's entropy (``os.urandom``), never from
  a seed the user or anyone else may know.
* :func:`check_budget`: ``epsilon`` and ``n_released`` checked, and the Laplace scale.
* :func:`private_counts`: the released count table.
* :func:`check_public_range`: refuses a model whose encoding range was fitted from the
  data (that range is not private, and it breaks the counts' sensitivity).
* :func:`private_copy`: the private estimator that
  :meth:`FlyNNClassifier.privatize <sknn_gpu.fly.FlyNNClassifier.privatize>` returns,
  built from the public parts of the model and the released counts only, with its
  accounting in ``dp_accounting_``.
* :func:`_seeded_noise_for_tests`: for tests only (a seeded release is not private).

It sits below the estimator (``_flynn``) and the federation (``_federated``) and
imports neither: the estimator is passed in.
"""

from __future__ import annotations

import contextlib
import copy
import os
import threading
from numbers import Integral, Real

import numpy as np
from sklearn.base import clone

from .._backend import to_device, to_host
from ._encoding import input_range
from ._weights import on_grid

__all__ = [
    "MIN_SCALE",
    "MAX_SCALE",
    "PUBLIC_FITTED",
    "dp_release",
    "check_budget",
    "private_counts",
    "check_public_range",
    "check_not_private",
    "accounting",
    "merged_accounting",
    "private_copy",
]

#: The Laplace scale ``2 n_released / epsilon`` must lie in ``[MIN_SCALE, MAX_SCALE]``.
#: Above ``2**52`` the float64 spacing of the noise exceeds 1 where the noise lives, so
#: ``count + noise`` no longer has the shifted Laplace distribution the guarantee assumes
#: (and the release says nothing about the counts); below ``2**-52`` the noise cannot
#: change a count of 1 at all, so the counts would be released exactly.
MIN_SCALE = 2.0**-52
MAX_SCALE = 2.0**52

#: The fitted attributes a private copy takes from the model: public by assumption
#: (the class labels, the schema, the hashing parameters and the projection they draw,
#: the device) or public by construction (a range given as ``input_range``, checked by
#: :func:`check_public_range`). Everything else is rebuilt from the released counts
#: (``counts_``, ``filters_`` and their caches) or not carried.
PUBLIC_FITTED = (
    "device_",
    "classes_",
    "n_features_in_",
    "feature_names_in_",
    "hasher_",
    "n_components_",
    "k_",
    "n_receptors_",
    "input_low_",
    "input_high_",
    "_fitted_params_",
)

_TESTING = threading.local()


@contextlib.contextmanager
def _seeded_noise_for_tests(seed):
    """FOR TESTS ONLY: draw the mechanism's randomness from ``np.random.default_rng(seed)``.

    Inside the ``with`` block (and in this thread only), :func:`private_counts` uses a
    seeded generator instead of the operating system's entropy, so that a test can repeat
    a release or compare the CPU and GPU paths. A seeded release is NOT private: anyone
    who knows the seed regenerates the noise and subtracts it. Nothing in the package
    calls this; the accounting of a release made here says so (``noise``).
    """
    previous = getattr(_TESTING, "rng", None)
    _TESTING.rng = np.random.default_rng(seed)
    try:
        yield
    finally:
        _TESTING.rng = previous


def _test_rng():
    return getattr(_TESTING, "rng", None)


def _uniforms(shape, rng=None):
    """Uniform float64 draws strictly inside (0, 1): ``(j + 0.5) / 2**52`` for 52 random bits ``j``
    (exact in float64, never 0, 1 or 0.5, so the Gumbel and Laplace transforms stay finite).

    ``rng=None`` reads the bits from ``os.urandom`` (the operating system's
    cryptographic generator); a NumPy ``Generator`` (tests) supplies them instead.
    """
    n = int(np.prod(shape, dtype=np.int64))
    if rng is None:
        bits = np.frombuffer(os.urandom(8 * n), dtype=np.uint64) >> np.uint64(12)
    else:
        bits = rng.integers(0, 2**52, size=n, dtype=np.uint64)
    return ((bits.astype(np.float64) + 0.5) * 2.0**-52).reshape(shape)


def dp_release(counts, epsilon, n_released, rng=None):
    """Per-class private release of ``n_released`` counts of the table ``counts``.

    Returns ``(released, noisy)``: ``released`` (n_classes, n_released) are the cell
    indices chosen per class, in the order they were drawn, and ``noisy`` the
    matching counts plus Laplace noise (not yet clipped at 0).

    Selection: ``n_released`` rounds of the exponential mechanism without
    replacement, utility the count, weights ``exp(epsilon * z / (2 T))``, drawn at
    once with the Gumbel-top-T trick (adding i.i.d. Gumbel noise to the log-weights and
    keeping the T largest is distributed exactly as T sequential draws without
    replacement). Values: Laplace noise of scale ``2 T / epsilon``. Both come from
    uniforms by their inverse distribution functions; the uniforms come from
    ``os.urandom`` unless a NumPy ``Generator`` ``rng`` is given (tests only: a known
    seed makes the noise known). ``epsilon`` and ``n_released`` are assumed checked
    (:func:`check_budget`).
    """
    counts = np.asarray(counts, dtype=np.float64)
    n_classes, m = counts.shape
    T = int(n_released)
    scale = 2.0 * T / float(epsilon)
    gumbel = -np.log(-np.log(_uniforms((n_classes, m), rng)))
    keys = counts / scale + gumbel
    released = np.argsort(-keys, axis=1, kind="stable")[:, :T]
    v = _uniforms((n_classes, T), rng) - 0.5  # in (-0.5, 0.5), never at either end
    noise = -scale * np.sign(v) * np.log1p(-2.0 * np.abs(v))
    noisy = np.take_along_axis(counts, released, axis=1) + noise
    return released.astype(np.int64), noisy


def check_budget(epsilon, n_released, n_components=None):
    """``(epsilon, n_released, scale)`` checked: ``epsilon`` a real number > 0,
    ``n_released`` an integer in ``[1, n_components]``, and the Laplace scale
    ``2 n_released / epsilon`` in ``[MIN_SCALE, MAX_SCALE]`` (see :data:`MAX_SCALE`).

    Raises TypeError for a non-number ``epsilon`` and ValueError otherwise, naming the
    range of ``epsilon`` that this ``n_released`` allows.
    """
    if not isinstance(epsilon, Real) or isinstance(epsilon, (bool, np.bool_)):
        raise TypeError(f"epsilon must be a positive number, got {epsilon!r}.")
    eps = float(epsilon)
    if not np.isfinite(eps) or eps <= 0:
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}.")
    upper = "n_components_" if n_components is None else f"n_components_={n_components}"
    if (
        not isinstance(n_released, Integral)
        or isinstance(n_released, (bool, np.bool_))
        or n_released < 1
        or (n_components is not None and n_released > n_components)
    ):
        raise ValueError(f"n_released must be an integer in [1, {upper}], got {n_released!r}.")
    T = int(n_released)
    with np.errstate(over="ignore"):
        scale = 2.0 * T / eps
    if not (np.isfinite(scale) and MIN_SCALE <= scale <= MAX_SCALE):
        raise ValueError(
            f"epsilon={epsilon!r} with n_released={T} gives the Laplace scale 2*n_released/epsilon "
            f"= {scale:.3g}, outside [2**-52, 2**52]: epsilon must lie in "
            f"[{2.0 * T / MAX_SCALE:.3g}, {2.0 * T / MIN_SCALE:.3g}]. Above 2**52 the noise's "
            "float64 spacing exceeds a count's change of 1, so count + noise no longer has the "
            "distribution the guarantee assumes (and it would say nothing about the counts); "
            "below 2**-52 the noise cannot change a count: the counts would be released exactly."
        )
    return eps, T, scale


def private_counts(counts, epsilon, n_released, n_components):
    """The released count table of ``counts`` (n_classes, n_components) under budget ``epsilon``.

    Checks the budget (:func:`check_budget`), brings ``counts`` to the host and releases
    ``n_released`` noisy counts per class with :func:`dp_release` (noise from the
    operating system's entropy), clipped at 0; every other count is released as 0.
    Returns ``(private, released, scale)``: the float64 table (always finite), the
    released cells per class and the Laplace scale ``2 n_released / epsilon``.
    """
    eps, T, scale = check_budget(epsilon, n_released, n_components)
    counts = np.asarray(to_host(counts))
    released, noisy = dp_release(counts, eps, T, _test_rng())
    private = np.zeros(counts.shape, dtype=np.float64)
    np.put_along_axis(private, released, np.maximum(noisy, 0.0), axis=1)
    if not np.isfinite(private).all():  # cannot happen within the checked budget; never release it
        raise FloatingPointError("the private release is not finite; nothing was released.")
    return private, released, scale


def check_public_range(est):
    """Refuse to privatize a model whose encoding range was fitted from the training data.

    Under an ``encoding`` the model carries each feature's range (``input_low_``,
    ``input_high_``). With ``input_range='fit'`` that range is each feature's exact
    minimum and maximum in the training data: released beside the noisy counts it is
    not private at all, and one sample can move it and so change the encoding of
    every row, so the counts' sensitivity (one sample changes one class's counts by at
    most 1 per cell) no longer holds. A range given as ``input_range=(low, high)`` is
    public by assumption (it must not be derived from the private data); without an
    encoding (``encoding=None``) nothing depends on a range.
    """
    has_range = hasattr(est, "input_low_")
    given = getattr(est, "input_range", "fit")
    if not has_range and getattr(est, "encoding", None) is None:
        return
    public = False
    if has_range and not isinstance(given, str):
        try:
            low, high = input_range(given, est.n_features_in_)
        except ValueError:
            low = high = None
        public = (
            low is not None
            and np.array_equal(low, np.asarray(est.input_low_))
            and np.array_equal(high, np.asarray(est.input_high_))
        )
    if not public:
        how = (
            f"each feature's exact minimum and maximum (and, under 'quantile', its quantiles) in the "
            f"training data (input_range={given!r})"
            if isinstance(given, str)
            else f"a range other than its input_range={given!r} (it was fitted under another one)"
        )
        raise ValueError(
            f"privatize needs a public input range, but this model's encoding "
            f"(encoding={getattr(est, 'encoding', None)!r}) tiles {how}. That range would be "
            "released beside the noisy counts, and one sample can move a range fitted from the data "
            "and so change every encoded row, which breaks the counts' sensitivity. Refit with "
            "input_range=(low, high) fixed from public knowledge of the data (e.g. (0, 255) for "
            "pixels; not computed from the private data), or with encoding=None."
        )


def check_not_private(est):
    """Refuse to privatize a release again: ``counts_`` that are already noisy (a private
    copy, a merge of private parties, or private counts loaded from a file). Float counts
    of a fit with sample weights are exact (multiples of ``2**-20``, :mod:`._weights`) and
    pass; noisy ones are not on that grid."""
    counts = getattr(est, "counts_", None)
    noisy = counts is not None and counts.dtype.kind == "f" and not on_grid(counts)
    if hasattr(est, "dp_accounting_") or noisy:
        raise ValueError(
            "privatize: this model's counts are already a private release (or a merge of "
            "releases); privatize the model fitted on the data instead."
        )


def accounting(epsilon, n_released, scale, dropped=(), seeded=False):
    """The ``dp_accounting_`` record of a release (a JSON-serialisable dict; see
    :meth:`FlyNNClassifier.privatize <sknn_gpu.fly.FlyNNClassifier.privatize>`)."""
    eps, T = float(epsilon), int(n_released)
    return {
        "epsilon": eps,
        "delta": 0.0,
        "neighbouring": "add or remove one training sample",
        "epsilon_replace_one": 2.0 * eps,
        "mechanism": (
            "per class: n_released rounds of the exponential mechanism without replacement "
            "(utility: the count; sensitivity 1, monotone) select the released cells, and each "
            "selected count gets Laplace noise, then is clipped at 0; every other count is 0"
        ),
        "n_released": T,
        "selection_epsilon": eps / 2.0,
        "values_epsilon": eps / 2.0,
        "step_epsilon": eps / (2.0 * T),
        "laplace_scale": float(scale),
        "composition": (
            "sequential within a class (2 n_released steps of epsilon / (2 n_released)); "
            "parallel over classes (one sample changes one class's counts)"
        ),
        "released": ["counts_", "filters_", "dp_released_"],
        "public": [
            "classes_",
            "n_features_in_",
            "feature_names_in_",
            "the parameters (get_params), the projection they draw (hasher_), n_components_, k_",
            "input_low_ and input_high_: the input_range given at fit",
        ],
        "dropped": sorted(dropped),
        "noise": (
            "SEEDED FOR TESTS: not private"
            if seeded
            else "operating-system entropy (os.urandom); never random_state"
        ),
    }


def merged_accounting(accountings):
    """The ``dp_accounting_`` of a sum of private party releases (``accountings``: theirs).

    Each party's samples are in its own release only, so the merge is ``max`` of the
    parties' epsilons for any one sample (parallel composition; merging is
    post-processing). A person whose samples sit at several parties is covered by the
    sum of those parties' epsilons.
    """
    epsilons = [float(a["epsilon"]) for a in accountings]
    seeded = any(str(a.get("noise", "")).startswith("SEEDED") for a in accountings)
    eps = max(epsilons)
    return {
        "epsilon": eps,
        "delta": 0.0,
        "neighbouring": "add or remove one training sample at one party",
        "epsilon_replace_one": 2.0 * eps,
        "mechanism": "the sum of the parties' private releases (post-processing of each)",
        "parties": len(accountings),
        "party_epsilons": epsilons,
        "party_n_released": [a.get("n_released") for a in accountings],
        "composition": (
            "parallel over parties (disjoint data): the largest party epsilon; a person with "
            "samples at several parties: the sum of those parties' epsilons"
        ),
        "released": ["counts_", "filters_"],
        "public": accountings[0].get("public", []),
        "dropped": sorted({name for a in accountings for name in a.get("dropped", [])}),
        "noise": (
            "SEEDED FOR TESTS: not private"
            if seeded
            else "operating-system entropy (os.urandom) at each party; never random_state"
        ),
    }


def private_copy(est, epsilon, n_released):
    """The private copy of the fitted FlyNN ``est``: a new estimator with the same
    parameters that holds only the public fitted attributes (:data:`PUBLIC_FITTED`) and
    the released counts (with the filters they give), plus ``dp_released_``,
    ``dp_epsilon_``, ``dp_scale_`` and ``dp_accounting_``.

    The budget is checked first, then that the range is public and the model not
    already private; the model itself is not changed. (``privatize`` checks first that the
    winners per code were not chosen from the data.)
    """
    check_budget(epsilon, n_released, est.n_components_)
    check_public_range(est)
    check_not_private(est)
    seeded = _test_rng() is not None
    private, released, scale = private_counts(est.counts_, epsilon, n_released, est.n_components_)
    out = clone(est)  # the parameters (deep copies), nothing fitted
    for name in PUBLIC_FITTED:
        if name in est.__dict__:
            out.__dict__[name] = copy.deepcopy(est.__dict__[name])
    if hasattr(out, "hasher_"):
        out.hasher_.__dict__.pop("_device_cache", None)
    out._set_counts(to_device(private, est.device_))
    out._set_calibration(None)  # the held-out losses were computed from the exact data: not released
    dropped = [
        name
        for name in vars(est)
        if name.endswith("_")
        and not name.startswith("_")
        and name not in PUBLIC_FITTED
        and name not in ("counts_", "filters_")
    ]
    out.dp_released_ = released
    out.dp_epsilon_ = float(epsilon)
    out.dp_scale_ = scale
    out.dp_accounting_ = accounting(epsilon, n_released, scale, dropped, seeded)
    return out
