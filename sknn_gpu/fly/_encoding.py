"""FlyNN's input encodings and the feature ranges they tile.

* :func:`encode` and its constants (:data:`ENCODING_WIDTH`, :data:`THERMOMETER_THRESHOLDS`,
  :data:`THERMOMETER_SLOPE`, :data:`RECEPTOR_SPREAD`), :func:`n_receptors` (the receptors per
  feature under ``n_receptors='auto'``) and :func:`encoding_width`: what the hash reads of
  each feature under ``encoding`` (the CUDA engine's one-kernel ``encode`` reads the same
  constants).
* Quantiles (``input_range='quantile'``): :func:`column_histogram` (counts of each feature
  over :data:`QUANTILE_BINS` equal bins of its range: integers, so the histograms of blocks
  or parties add up exactly), :func:`quantile_knots` (the :data:`QUANTILE_KNOTS` quantiles
  a histogram gives) and :func:`quantile_position` (a value's place among them, in [0, 1]).
* Ranges: :func:`column_range` (per-feature min and max of an array),
  :func:`wider_range` (their union over blocks or parties), :func:`input_range` (the
  checked ``input_low_`` / ``input_high_`` of a fit), :func:`unit_range`,
  :func:`range_arrays` (the ``low`` / ``span`` that :func:`encode` takes) and
  :func:`check_in_range` (values outside a fixed range refused).

It sits below the estimator (``_flynn``), its engines, its Dask adapter and the
federation, which all read it.
"""

from __future__ import annotations

import numpy as np

from .._backend import all_in_unit_interval, array_module, to_host

__all__ = [
    "ENCODING_WIDTH",
    "THERMOMETER_THRESHOLDS",
    "THERMOMETER_SLOPE",
    "RECEPTOR_SPREAD",
    "AUTO_RECEPTOR_INPUTS",
    "MIN_RECEPTORS",
    "MAX_RECEPTORS",
    "n_receptors",
    "encoding_width",
    "receptor_centre",
    "encode",
    "QUANTILE_BINS",
    "QUANTILE_KNOTS",
    "column_histogram",
    "quantile_knots",
    "quantile_position",
    "column_range",
    "wider_range",
    "input_range",
    "unit_range",
    "range_arrays",
    "check_in_range",
]

#: Inputs the hash reads per feature, by ``encoding`` (``'population'``: its ``n_receptors``,
#: see :func:`encoding_width`).
ENCODING_WIDTH = {None: 1, "complement": 2, "thermometer": 5}
#: ``encoding='thermometer'``: the thresholds of a feature's five ramps and their slope
#: (``clip((u - t) * slope, 0, 1)``: each ramp rises over 0.4 of the range, so
#: neighbours overlap). Picked in the defaults sweep
#: (``benchmarks/tools/sweep_flynn_defaults.py --defaults``) among slopes 2, 2.5 and 3.33 and
#: thresholds from 0 or 0.1: best mean gap to k-NN over 5 seeds.
THERMOMETER_THRESHOLDS = (0.1, 0.3, 0.5, 0.7, 0.9)
THERMOMETER_SLOPE = 2.5
#: ``encoding='population'``: ``L`` receptors per feature with triangular tuning curves
#: centred at ``q / (L - 1)`` (``q = 0 .. L-1``, evenly over the range) and a half-width of
#: this many spacings between centres, ``RECEPTOR_SPREAD / (L - 1)``: a value excites the
#: receptors within two spacings of it (chosen in exploratory runs on the development suite;
#: the committed sweep, ``benchmarks/tools/sweep_flynn_devsuite.py``, measures the result).
RECEPTOR_SPREAD = 2.0
#: ``n_receptors='auto'``: ``ceil(AUTO_RECEPTOR_INPUTS / n_features)`` receptors per feature,
#: between :data:`MIN_RECEPTORS` and :data:`MAX_RECEPTORS`: a table of few features is read
#: finely enough for the hash to tell nearby values apart (2 features: 32 receptors each),
#: a wide one with five per feature.
AUTO_RECEPTOR_INPUTS = 64
MIN_RECEPTORS = 5
MAX_RECEPTORS = 64


def n_receptors(given, n_features):
    """Receptors per feature of ``encoding='population'``: ``given`` (an int), or under
    ``'auto'`` ``ceil(64 / n_features)`` kept within [5, 64]."""
    if not isinstance(given, str):
        return int(given)
    d = max(1, int(n_features))
    return int(min(MAX_RECEPTORS, max(MIN_RECEPTORS, -(-AUTO_RECEPTOR_INPUTS // d))))


def encoding_width(encoding, receptors):
    """Inputs the hash reads per feature under ``encoding`` (``receptors``: the resolved
    receptor count, read by ``'population'`` only)."""
    return int(receptors) if encoding == "population" else ENCODING_WIDTH[encoding]


def receptor_centre(q, receptors):
    """Centre of receptor ``q`` of ``receptors`` (a Python float, ``q / (receptors - 1)``:
    one correctly rounded division, as the CUDA kernel computes it)."""
    return q / (receptors - 1)


def encode(X, encoding, low=None, span=None, clip=False, receptors=MIN_RECEPTORS):
    """The inputs the hash reads for dense rows ``X`` (NumPy or CuPy).

    ``low`` and ``span`` (float64 arrays on ``X``'s device, one entry per feature; both
    None for features already in [0, 1]) map each feature to ``u = (x - low) / span``
    in float64, so that its range ``[low, low + span]`` becomes [0, 1]; ``clip`` then
    reads values beyond the range as its ends.

    * ``'thermometer'``: five saturating ramps per feature, ``clip((u - t) * s, 0, 1)``
      for the thresholds ``t`` of :data:`THERMOMETER_THRESHOLDS` and the slope ``s`` of
      :data:`THERMOMETER_SLOPE`: a feature at the bottom of its range is silent, one at
      the top drives every ramp (1, 1, 1, 0.75, 0.25; large values win, as in the raw
      hash), and the level in between is coded against a fixed reference.
    * ``'population'``: ``receptors`` receptors (``L``) with triangular tuning curves,
      ``max(0, w - |u - c_q|)`` for the centres ``c_q = q / (L - 1)`` and
      ``w = RECEPTOR_SPREAD / (L - 1)`` (:data:`RECEPTOR_SPREAD`).
    * ``'complement'``: ``[u, 1 - u]`` (complement coding, as in fuzzy ART).

    Columns go receptor by receptor (``[r_0(X), r_1(X), ...]``). Every operation is one
    correctly rounded subtraction, multiplication or division (or an exact
    ``abs``/``max``/``clip``), so NumPy and CuPy give the same bits and so the same
    hash. Without a range the input's dtype is kept; the scaling works in float64 (no
    overflow for tiny ranges, no float32 subnormals for CuPy to flush).
    """
    xp = array_module(X)
    if low is not None:
        X = (X - low) / span  # float64 arrays: the result is float64
    if clip:
        X = xp.clip(X, 0.0, 1.0)
    if encoding == "complement":
        return xp.concatenate([X, 1.0 - X], axis=1)
    if encoding == "thermometer":
        return xp.concatenate(
            [xp.clip((X - t) * THERMOMETER_SLOPE, 0.0, 1.0) for t in THERMOMETER_THRESHOLDS], axis=1
        )
    L = int(receptors)
    w = RECEPTOR_SPREAD / (L - 1)
    return xp.concatenate([xp.maximum(w - xp.abs(X - receptor_centre(q, L)), 0.0) for q in range(L)], axis=1)


# --------------------------------------------------------------------------- #
# Quantiles                                                                      #
# --------------------------------------------------------------------------- #

#: ``input_range='quantile'``: the range of each feature is cut in this many equal bins,
#: whose counts (integers: they add up exactly over blocks, batches and parties) give the
#: feature's quantiles, and :data:`QUANTILE_KNOTS` of them (levels 0, 1/256, ..., 1) are
#: kept: a value is read at its place among them, linear between two.
QUANTILE_BINS = 4096
QUANTILE_KNOTS = 257


def column_histogram(X, low, high, weights=None):
    """Per-feature counts (host, shape (n_features, :data:`QUANTILE_BINS`)) of the dense rows
    ``X`` (NumPy or CuPy) over equal bins of ``[low, high]`` (host float64 arrays; a constant
    feature counts in its first bin): int64, or with row ``weights`` (on FlyNN's fixed-point
    grid) their float64 sums, exact in any order. Bin ``floor((x - low) / span * B)`` clipped
    to ``[0, B - 1]``: three correctly rounded float64 steps, the same bits on both devices."""
    xp = array_module(X)
    n, d = X.shape
    B = QUANTILE_BINS
    span = np.where(high - low > 0, high - low, 1.0)
    pos = (xp.asarray(X, dtype=xp.float64) - xp.asarray(low)) / xp.asarray(span)
    b = xp.clip(xp.floor(pos * float(B)), 0, B - 1).astype(xp.int64)
    b += xp.arange(d, dtype=xp.int64) * B  # one bincount over every feature's bins
    if weights is None:
        return np.asarray(to_host(xp.bincount(b.ravel(), minlength=d * B)), dtype=np.int64).reshape(d, B)
    w = xp.repeat(xp.asarray(weights, dtype=xp.float64), d)  # row-major: each row's weight d times
    return np.asarray(to_host(xp.bincount(b.ravel(), weights=w, minlength=d * B))).reshape(d, B)


def quantile_knots(hist, low, high):
    """The :data:`QUANTILE_KNOTS` quantiles (host float64, shape (n_features, K)) of each
    feature from its histogram ``hist`` over ``[low, high]``, linear within a bin (level 0:
    the range's low end, level 1: the top of the highest bin used). Non-decreasing: the bin
    index and the fraction within it grow with the level, and each step rounds monotonely."""
    d, B = hist.shape
    K = QUANTILE_KNOTS
    width = (high - low) / B
    levels = np.arange(K, dtype=np.float64) / (K - 1)
    knots = np.empty((d, K), dtype=np.float64)
    for j in range(d):  # loop over features: K searches in a cumulative count each
        h = hist[j].astype(np.float64)
        total = h.sum()
        if total == 0 or width[j] == 0:
            knots[j] = low[j]
            continue
        cum = np.cumsum(h)
        target = levels * total
        b = np.minimum(np.searchsorted(cum, target, side="left"), B - 1)
        before = cum[b] - h[b]
        frac = np.clip((target - before) / np.where(h[b] > 0, h[b], 1.0), 0.0, 1.0)
        knots[j] = low[j] + (b + frac) * width[j]
    return knots


def quantile_position(X, knots):
    """Each value's place among its feature's ``knots`` (float64 in [0, 1], NumPy): ``(i +
    (x - k_i) / (k_(i+1) - k_i)) / (K - 1)`` for the last knot ``k_i <= x`` (0 between equal
    knots; below the first knot 0, above the last 1; a constant feature, whose knots are all
    equal, reads 0 as under ``'fit'``). The CUDA kernel
    ``flynn_quantile_position`` computes the same steps."""
    X = np.asarray(X, dtype=np.float64)
    n, d = X.shape
    K = knots.shape[1]
    out = np.empty((n, d), dtype=np.float64)
    for j in range(d):  # loop over features: one sorted search each
        k = knots[j]
        if k[0] == k[-1]:
            out[:, j] = 0.0
            continue
        i = np.clip(np.searchsorted(k, X[:, j], side="right") - 1, 0, K - 2)
        lo, hi = k[i], k[i + 1]
        gap = hi - lo
        frac = np.where(gap > 0, (X[:, j] - lo) / np.where(gap > 0, gap, 1.0), 0.0)
        out[:, j] = (i + np.clip(frac, 0.0, 1.0)) / (K - 1)
    return out


# --------------------------------------------------------------------------- #
# Feature ranges                                                                #
# --------------------------------------------------------------------------- #


def column_range(X):
    """Per-feature (min, max) of ``X`` (NumPy, CuPy, SciPy or cupyx sparse; implicit
    zeros count) as host float64 arrays."""
    lo, hi = X.min(axis=0), X.max(axis=0)
    if hasattr(lo, "toarray"):  # sparse: a 1 x d sparse matrix
        lo, hi = lo.toarray(), hi.toarray()
    return (
        np.asarray(to_host(lo), dtype=np.float64).ravel(),
        np.asarray(to_host(hi), dtype=np.float64).ravel(),
    )


def wider_range(*parts):
    """The per-feature (min, max) over (min, max) pairs (None entries skipped; all None: None)."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    return np.min([p[0] for p in parts], axis=0), np.max([p[1] for p in parts], axis=0)


def input_range(given, n_features, low=None, high=None, X=None):
    """The range ``(low, high)`` (host float64, one value per feature) an encoding tiles.

    ``given`` is the ``input_range`` parameter. ``'fit'``: ``low``/``high`` (a Dask
    reduction, or the parties' agreed range) or else the column range of ``X``; a
    fixed ``(low, high)`` is checked (finite, one value or one per feature,
    ``low <= high``).
    """
    d = int(n_features)
    if isinstance(given, str):
        if low is None:
            low, high = column_range(X)
    else:
        if len(given) != 2:
            raise ValueError(
                f"input_range must be 'fit' or a pair (low, high), got a sequence of {len(given)} items."
            )
        low, high = given
    try:
        low = np.broadcast_to(np.asarray(to_host(low), dtype=np.float64), (d,)).copy()
        high = np.broadcast_to(np.asarray(to_host(high), dtype=np.float64), (d,)).copy()
    except (ValueError, TypeError) as exc:
        raise ValueError(
            f"input_range: low and high must be numbers or arrays of {d} values (one per feature); {exc}"
        ) from None
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        raise ValueError("input_range: low and high must be finite.")
    if not isinstance(given, str) and not (low <= high).all():
        j = int(np.flatnonzero(~(low <= high))[0])
        raise ValueError(
            f"input_range needs low <= high for every feature; feature {j} has low={low[j]:.6g}, "
            f"high={high[j]:.6g}."
        )
    return low, high


def unit_range(low, high):
    """Whether every feature's range is [0, 1] (the encoding reads the values as they are)."""
    return bool((low == 0).all() and (high == 1).all())


def range_arrays(low, high, xp):
    """``(low, span)`` of :func:`encode` as ``xp`` float64 arrays, or ``(None, None)``
    when every feature's range is [0, 1]; a constant feature (``span == 0``) reads 0."""
    if unit_range(low, high):
        return None, None
    span = high - low
    span = np.where(span > 0, span, 1.0)  # a constant feature reads 0
    return xp.asarray(low), xp.asarray(span)


def check_in_range(Xb, low, high, encoding, given):
    """Refuse values of the dense batch ``Xb`` outside the fixed range ``given`` (``low``,
    ``high``: its host arrays); one pass on a [0, 1] range."""
    if unit_range(low, high) and all_in_unit_interval(Xb):  # one pass (GPU: one fused reduction)
        return
    xp = array_module(Xb)
    lo, hi = xp.asarray(low), xp.asarray(high)
    bad = xp.logical_or(Xb < lo, Xb > hi)
    if not bool(bad.any()):
        return
    r, j = (int(v) for v in np.unravel_index(int(xp.argmax(bad)), bad.shape))
    value = float(Xb[r, j])
    raise ValueError(
        f"encoding={encoding!r} with input_range={given!r}: feature {j} has the "
        f"value {value:.6g}, outside [{low[j]:.6g}, {high[j]:.6g}]. Widen input_range, scale X first "
        "(e.g. sklearn.preprocessing.MinMaxScaler(clip=True)), or use input_range='fit'."
    )
