"""FlyNN's sample and class weights: weighted counts that stay exact on every device and in merges.

A FlyNN model is a table of counts per class and Kenyon cell. With ``sample_weight`` a
sample adds its weight, instead of 1, to each of its ``k`` winning cells. Weights are
rounded to the fixed-point grid of multiples of ``2**-WEIGHT_BITS`` (about 1e-6), so
every weighted count is such a multiple: float64 holds each one exactly while it stays
below :data:`EXACT_LIMIT` (``2**(53 - WEIGHT_BITS)``, about 8.6e9), and then every
partial sum is exact too. Sums in any order (NumPy's ``bincount``, the atomic adds of
CuPy's, a Dask tree, a federation's merge) therefore give the same bits: CPU and GPU
agree, and the parties' weighted counts add up to the pooled fit's. Whole-number
weights keep the integer table (int64), equal to the table of the repeated rows.

``class_weight`` is applied where the filters are computed, as a factor of each class's
exponent of ``gamma``: under ``decay='count'`` that is exactly a weight on the class's
counts, and under ``decay='relative'`` (where each count is divided by its class's mean,
so a factor on a class's counts would cancel) it still tilts the decision towards
heavier classes. The counts stay free of it, so merges stay exact for any class weights,
``'balanced'`` included (it reads each class's total weight from the counts).

:func:`check_sample_weight` validates and rounds; :func:`nonzero_rows`,
:func:`is_whole`, :func:`check_totals`, :func:`check_exact` and :func:`on_grid` serve
the estimator, its Dask adapter, the federation and the exchange format;
:func:`class_factors` gives the per-class factors of ``class_weight``.
It sits below the estimator, imports no other module of the family, and never imports
a GPU library.
"""

from __future__ import annotations

from numbers import Real

import numpy as np

from .._backend import array_module, is_device_array, to_host
from .._sklearn_compat import check_sample_weight as sklearn_check_sample_weight

__all__ = [
    "WEIGHT_BITS",
    "EXACT_LIMIT",
    "check_sample_weight",
    "nonzero_rows",
    "is_whole",
    "check_totals",
    "check_exact",
    "on_grid",
    "check_class_weight",
    "class_factors",
]

#: Weights are rounded to multiples of ``2**-WEIGHT_BITS`` (a resolution of 9.5e-7).
WEIGHT_BITS = 20
#: Weighted counts are exact below this (``2**33``, about 8.6e9): the float64 multiples of
#: ``2**-WEIGHT_BITS`` that have at most 53 significant bits.
EXACT_LIMIT = 2.0 ** (53 - WEIGHT_BITS)
#: Whole-number weights are summed exactly up to float64's integers.
_WHOLE_LIMIT = 2.0**53


def check_sample_weight(sample_weight, n_samples, allow_all_zero=False):
    """``sample_weight`` as host float64 rounded to the grid (one finite, non-negative weight
    per sample, not all zero unless ``allow_all_zero``: a block of a Dask array may be);
    ValueError naming what is wrong otherwise.

    A weight below half the grid step (``2**-21``) rounds to 0 and its sample is then
    left out, as a sample of weight 0 is.
    """
    w = to_host(sample_weight)
    if isinstance(w, (bool, np.bool_)):
        raise ValueError(f"sample_weight must be a number or an array of numbers, got the bool {w!r}.")
    w = sklearn_check_sample_weight(
        w,
        np.empty((int(n_samples), 0)),
        dtype=np.float64,
        ensure_non_negative=True,
        allow_all_zero_weights=allow_all_zero,
    )
    if not np.isfinite(w).all():
        raise ValueError("sample_weight must be finite.")
    scaled = np.ldexp(w, WEIGHT_BITS)
    if scaled.size and scaled.max() >= 2.0**53:
        raise ValueError(
            f"sample_weight holds {w.max():.3g}; a weight must stay below 2**{53 - WEIGHT_BITS} "
            "(weights are counted exactly on a grid of 2**-20): rescale the weights."
        )
    w = np.ldexp(np.rint(scaled), -WEIGHT_BITS)
    if not allow_all_zero and not w.any():
        raise ValueError(
            f"sample_weight rounds to zero for every sample (weights are multiples of 2**-{WEIGHT_BITS}); "
            "at least one sample needs a non-zero weight."
        )
    return w


def nonzero_rows(weights):
    """Indices (host int64) of the samples whose weight is not 0, or None when none is 0."""
    keep = weights > 0
    return None if keep.all() else np.flatnonzero(keep)


def is_whole(weights):
    """Whether every weight is a whole number (the counts then stay int64)."""
    return bool(np.all(weights == np.floor(weights)))


def check_totals(weights, y_idx, n_classes, what):
    """Refuse a fit whose weighted counts could pass where they are exact: each class's total
    weight bounds every count of the class (checked before anything is counted)."""
    totals = np.bincount(np.asarray(y_idx, dtype=np.int64), weights=weights, minlength=n_classes)
    limit = _WHOLE_LIMIT if is_whole(weights) else EXACT_LIMIT
    if totals.max(initial=0.0) >= limit:
        raise ValueError(
            f"{what}: a class's total sample_weight is {totals.max():.4g}, beyond the "
            f"{limit:.4g} up to which weighted counts are exact; rescale sample_weight."
        )


def check_exact(counts, what):
    """Refuse float (weighted) counts that reach :data:`EXACT_LIMIT`, where a sum of them may
    have been rounded (the sums of non-negative counts stay exact below it); NumPy or CuPy."""
    if counts.dtype.kind == "f" and counts.size and float(counts.max()) >= EXACT_LIMIT:
        raise ValueError(
            f"{what}: a weighted count reaches {float(counts.max()):.4g}, beyond the "
            f"{EXACT_LIMIT:.4g} (2**{53 - WEIGHT_BITS}) up to which weighted counts add up "
            "exactly; rescale sample_weight."
        )
    return counts


def on_grid(counts):
    """Whether ``counts`` are exact weighted counts: integers, or float multiples of
    ``2**-WEIGHT_BITS`` that are >= 0 and below :data:`EXACT_LIMIT` (noisy counts of a
    private release, or sums past the limit, are not)."""
    counts = np.asarray(to_host(counts))
    if counts.dtype.kind in "iu":
        return True
    if not (np.isfinite(counts).all() and (counts >= 0).all() and (counts < EXACT_LIMIT).all()):
        return False
    scaled = np.ldexp(counts, WEIGHT_BITS)
    return bool(np.all(scaled == np.floor(scaled)))


def check_class_weight(class_weight, owner):
    """ValueError unless ``class_weight`` is None, ``'balanced'`` or a dict of finite,
    non-negative numbers (the constraint checks the type)."""
    if not isinstance(class_weight, dict):
        return
    for label, value in class_weight.items():
        if (
            isinstance(value, (bool, np.bool_))
            or not isinstance(value, (Real, np.number))
            or not np.isfinite(value)
            or value < 0
        ):
            raise ValueError(
                f"{owner}'s class_weight must map labels to finite numbers >= 0; "
                f"class {label!r} has {value!r}."
            )


def class_factors(class_weight, classes, counts):
    """The factor of each class's exponent (host float64, one per class), or None for None.

    A dict gives each class its weight (1 for a class it does not name; labels it names
    that are not classes are ignored). ``'balanced'``: ``total / (n * W_l)`` with ``W_l``
    the total weight of class ``l`` (its counts' sum over ``k``), ``total`` their sum and
    ``n`` the number of classes with a weight, read from ``counts`` (host), so that a
    merge of parties is balanced over the pooled data; a class with no weight keeps 1.
    CuPy ``counts`` (the calibration's held-out models) give CuPy factors, by the same
    steps (the sums are exact in any order) and without a copy.
    """
    if class_weight is None:
        return None
    if isinstance(class_weight, dict):
        return np.asarray([float(class_weight.get(c, 1.0)) for c in np.asarray(classes).tolist()])
    if is_device_array(counts):
        xp = array_module(counts)
        per_class = counts.astype(np.float64).sum(axis=1)
        seen = per_class > 0
        total = (per_class * seen).sum()  # per_class[seen].sum(): the others add zeros
        return xp.where(seen, total / (seen.sum() * xp.where(seen, per_class, 1.0)), 1.0)
    per_class = np.asarray(counts, dtype=np.float64).sum(axis=1)
    seen = per_class > 0
    factors = np.ones(per_class.shape[0])
    if seen.any():
        factors[seen] = per_class[seen].sum() / (np.count_nonzero(seen) * per_class[seen])
    return factors
