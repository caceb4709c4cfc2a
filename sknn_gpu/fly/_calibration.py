"""FlyNN's probability calibration: the scale of ``predict_proba``'s softmax, chosen on
held-out counts.

``predict_proba`` is ``softmax(-novelty * s / k)``. The novelties of different classes
differ by a small part of ``k``, so ``s = 1`` (what FlyNN used to return) gives nearly
uniform probabilities. The scale ``s`` is picked on the training data by cross-fitting,
which the count tables make cheap: the model without a fold is the counts minus the
fold's own counts, so each calibration row is scored by a model that never saw it,
without a second fit.

* :data:`SCALE_GRID`: the candidate scales (``2 ** (i / 4 - 2)``: 0.25 to 512, four per
  octave);
* :func:`loss_table` ``(est, X, y_idx, weights)``: the held-out log-loss of every candidate,
  summed over the calibration rows (at most :data:`CALIBRATION_ROWS`, spread evenly over
  ``X``, in :data:`CALIBRATION_FOLDS` folds), with the held-out accuracy;
* :func:`scale_of` ``(table)``: the scale of least loss, :data:`DEFAULT_SCALE` without a table;
* :func:`check_class_information`: a warning when, held out, the model barely beats
  predicting the most frequent class.

A table is a sum over rows, so tables add up: a stream of ``partial_fit`` calls adds each
batch's table (the batch scored by the model before it), and a federated merge adds the
parties'. On the CPU the losses are computed in float64 fold by fold (the reference). On a
GPU the whole calibration stays there until its table (45 sums and the held-out hits) comes
back in one copy: the held-out models' filters are raised to their exponents by CUDA's
``pow`` (the exponents are the host's bit for bit, the powers may differ in the last bit or
two) and the softmax's exp and log are CUDA's, so the table agrees with the CPU's to about
1e-12 relative and the same scale is picked (a batch of ``partial_fit`` is scored with the
model's own filters: the same novelties as on the CPU).
"""

from __future__ import annotations

import numpy as np

from .._backend import take_rows, to_device, to_host
from . import _flynn_cuda
from ._flynn_engine import engine

__all__ = [
    "SCALE_GRID",
    "CALIBRATION_ROWS",
    "CALIBRATION_FOLDS",
    "DEFAULT_SCALE",
    "calibration_rows",
    "loss_table",
    "held_out_table",
    "cross_fit",
    "calibration_winners",
    "held_out",
    "scale_of",
    "class_information",
    "check_class_information",
]

#: Candidate scales ``s`` of ``softmax(-novelty * s / k)``: 0.25 to 512, four per octave (the
#: development suite picked 9.5 to 108; a larger scale only sharpens separable toy data further).
SCALE_GRID = 2.0 ** (np.arange(45) / 4.0 - 2.0)
#: Rows of the training data the scale is chosen on (spread evenly over it): the held-out
#: loss of 16,384 rows pins the scale to within a step of the grid.
CALIBRATION_ROWS = 16384
CALIBRATION_FOLDS = 5
#: The scale of a model without a calibration table (a differentially private release, whose
#: probabilities may not depend on anything but its noisy counts): the median of the scales
#: chosen on the development suite (``benchmarks/tools/sweep_flynn_devsuite.py``).
DEFAULT_SCALE = float(2.0**4.25)  # 19.03, a scale of the grid


def calibration_rows(n_samples):
    """Host indices of the calibration rows of ``n_samples``: all of them up to
    :data:`CALIBRATION_ROWS`, else every ``ceil(n / CALIBRATION_ROWS)``-th row."""
    n = int(n_samples)
    step = max(1, -(-n // CALIBRATION_ROWS))
    return np.arange(0, n, step)


def _losses(novelty, y_idx, weights, k):
    """``(losses, correct)``: the weighted log-loss of ``softmax(-novelty * s / k)`` for
    every ``s`` of :data:`SCALE_GRID` (float64, one per scale), and the weighted count of rows
    whose least novel class is their own (ties to the lowest index, as ``predict``)."""
    nov = np.asarray(novelty, dtype=np.float64)
    y = np.asarray(y_idx, dtype=np.int64)
    w = np.ones(len(y)) if weights is None else np.asarray(weights, dtype=np.float64)
    rows = np.arange(len(y))
    # relative to the least novel class: exp never overflows and the true class's term is exact
    gap = nov - nov.min(axis=1, keepdims=True)
    out = np.empty(len(SCALE_GRID))
    for i, s in enumerate(SCALE_GRID):  # one pass per scale over a (rows, classes) table
        z = -gap * (s / k)
        lse = np.log(np.exp(z).sum(axis=1))
        out[i] = float(np.dot(w, lse - z[rows, y]))
    correct = float(np.dot(w, nov.argmin(axis=1) == y))
    return out, correct


def calibration_winners(est, X):
    """The int32 (n, k) winners of validated ``X`` on ``device_``, all batches together."""
    parts = [w for _, w in est._batch_winners(X)]
    return parts[0] if len(parts) == 1 else est._xp.concatenate(parts)


def _fold_counts(est, winners, labels, weights):
    eng = engine(est.device_)
    n_classes, m = len(est.classes_), est.n_components_
    if weights is None:
        return eng.count(winners, labels, n_classes, m)
    return eng.weighted_count(winners, labels, to_device(weights, est.device_), n_classes, m)


def _novelty_of(est, winners, counts):
    """Host novelty of ``winners`` against the filters of the count table ``counts``."""
    filters_t = np.ascontiguousarray(est._filters_of(counts).T)
    return to_host(engine(est.device_).novelty(winners, to_device(filters_t, est.device_)))


def _calibration_set(est, X, y_idx, weights):
    """``(winners, labels, weights)`` of the calibration rows of validated ``X``."""
    rows = calibration_rows(X.shape[0])
    Xc = X if len(rows) == X.shape[0] else take_rows(X, rows)
    wc = None if weights is None else np.asarray(weights)[rows]
    return calibration_winners(est, Xc), np.asarray(y_idx)[rows], wc


def loss_table(est, X, y_idx, weights=None):
    """Cross-fitted calibration of ``est`` just fitted on validated ``X`` (its labels
    ``y_idx``, host ints, and row ``weights`` or None): ``(table, accuracy)``.

    ``table`` (float64, one entry per :data:`SCALE_GRID` scale) sums the log-losses of the
    calibration rows, each scored by the model of the counts without its fold;
    ``accuracy = (correct, total)``: the weighted number of those rows whose least novel
    held-out class is their own, and their total weight.
    """
    return cross_fit(est, *_calibration_set(est, X, y_idx, weights))


def cross_fit(est, winners, yc, wc=None):
    """:func:`loss_table` from the calibration rows' ``winners`` (int32 (n, k), NumPy or on
    ``device_``), their labels ``yc`` (host ints) and weights ``wc`` (host or None), in the
    order of the rows: the folds go by position (row ``i`` is in fold ``i % 5``)."""
    winners = to_device(winners, est.device_)
    yc = np.asarray(yc)
    if est.device_ == "cuda":
        return _cross_fit_cuda(est, winners, yc, wc)
    fold = np.arange(len(yc)) % CALIBRATION_FOLDS
    table = np.zeros(len(SCALE_GRID))
    correct = total = 0.0
    for f in range(min(CALIBRATION_FOLDS, len(yc))):
        sel = np.flatnonzero(fold == f)
        w_f = winners[to_device(sel, est.device_)]
        y_f = yc[sel]
        weights_f = None if wc is None else wc[sel]
        counts = est.counts_ - _fold_counts(est, w_f, to_device(y_f.astype(np.int32), est.device_), weights_f)
        losses, hits = _losses(_novelty_of(est, w_f, counts), y_f, weights_f, est.k_)
        table += losses
        correct += hits
        total += len(sel) if weights_f is None else float(weights_f.sum())
    return table, (correct, total)


def _cross_fit_cuda(est, winners, yc, wc):  # pragma: no cover - needs a GPU
    """:func:`cross_fit` on the GPU, with one copy to the host: per fold, its counts, the
    held-out table and its filters (:meth:`FlyNNClassifier._filters_of` on the device) and
    its rows' novelties, launched one after the other; then the losses of every row and
    scale in one kernel (:func:`._flynn_cuda.calibration_losses`)."""
    xp = est._xp
    n = len(yc)
    winners = xp.ascontiguousarray(winners, dtype=xp.int32)
    labels = xp.asarray(yc.astype(np.int32))
    weights = None if wc is None else xp.asarray(np.asarray(wc, dtype=np.float64))
    novelty = xp.empty((n, len(est.classes_)), dtype=xp.float64)
    for f in range(min(CALIBRATION_FOLDS, n)):
        rows = slice(f, None, CALIBRATION_FOLDS)
        fold_weights = None if weights is None else weights[rows]
        counts = est.counts_ - _fold_counts(est, winners[rows], labels[rows], fold_weights)
        filters_t = xp.ascontiguousarray(est._filters_of(counts, on_device=True).T)
        _flynn_cuda.novelty_rows(winners, filters_t, novelty, f, CALIBRATION_FOLDS)
    return _device_losses(est, novelty, labels, weights, wc, n)


def _device_losses(est, novelty, labels, weights, wc, n):  # pragma: no cover - needs a GPU
    """``(losses, (correct, total))`` of :func:`_losses` from device novelties: the one copy
    to the host of a calibration on the GPU."""
    sums = to_host(_flynn_cuda.calibration_losses(novelty, labels, weights, SCALE_GRID / est.k_))
    total = float(n) if wc is None else float(np.asarray(wc, dtype=np.float64).sum())
    return sums[:-1], (float(sums[-1]), total)


def held_out_table(est, X, y_idx, weights=None):
    """The calibration of a ``partial_fit`` batch: its rows (at most
    :data:`CALIBRATION_ROWS`) scored by the model before the batch, ``(table, accuracy)``
    as :func:`loss_table`."""
    return held_out(est, *_calibration_set(est, X, y_idx, weights))


def held_out(est, winners, yc, wc=None):
    """:func:`held_out_table` from the calibration rows' ``winners``, labels and weights."""
    winners = to_device(winners, est.device_)
    if est.device_ == "cuda":  # the model's own filters (computed on the host), already there
        xp = est._xp
        novelty = engine("cuda").novelty(winners, est._device_copy("_filters_t"))
        labels = xp.asarray(np.asarray(yc).astype(np.int32))
        weights = None if wc is None else xp.asarray(np.asarray(wc, dtype=np.float64))
        return _device_losses(est, novelty, labels, weights, wc, len(yc))
    losses, hits = _losses(_novelty_of(est, winners, est.counts_), yc, wc, est.k_)
    return losses, (hits, float(len(yc)) if wc is None else float(np.asarray(wc).sum()))


def scale_of(table):
    """The scale of least summed loss in ``table`` (the smallest on a tie), or
    :data:`DEFAULT_SCALE` without one."""
    if table is None:
        return DEFAULT_SCALE
    return float(SCALE_GRID[int(np.argmin(np.asarray(table)))])


#: :func:`check_class_information` warns when the held-out accuracy closes less than this
#: share of the distance from always predicting the most frequent class to a perfect score
#: (ring-shaped classes: none of it), on at least :data:`MIN_WARN_ROWS` calibration rows.
MIN_LIFT = 0.05
MIN_WARN_ROWS = 100


def class_information(est):
    """``(accuracy, majority)``: the held-out accuracy of the calibration rows and the share of
    the most frequent class (read from the counts: each sample adds its weight to ``k``
    cells), or None without a held-out record."""
    hits = getattr(est, "held_out_hits_", None)
    if hits is None or hits[1] <= 0:
        return None
    per_class = np.asarray(to_host(est.counts_), dtype=np.float64).sum(axis=1)
    if per_class.sum() <= 0:
        return None
    return hits[0] / hits[1], float(per_class.max() / per_class.sum())


def check_class_information(est):
    """Warn (``UserWarning``) when the model barely beats always predicting the most frequent
    class on held-out rows: its codes carry almost no class information for ``predict``.
    Classes that differ only by their spread, or by an offset shared by every feature, are
    out of FlyNN's reach (the user guide measures it)."""
    info = class_information(est)
    if info is None or est.held_out_hits_[1] < MIN_WARN_ROWS:
        return
    accuracy, majority = info
    if majority >= 1.0 or (accuracy - majority) / (1.0 - majority) >= MIN_LIFT:
        return
    import warnings

    warnings.warn(
        f"{type(est).__name__}: held out (cross-fitted on the training data), the model is "
        f"right on {accuracy:.1%} of the rows against {majority:.1%} for always predicting the "
        "most frequent class: its codes carry almost no class information for predict. If "
        "k-NN or a linear model does better on this data, its classes may differ in a way "
        "FlyHash cannot see (only by their spread, or by an offset shared by every feature); "
        "see the user guide's 'Where FlyNN is the wrong tool'.",
        UserWarning,
        stacklevel=4,
    )
