"""The one size estimate of FlyNNClassifier, and the check made with it before allocating.

:func:`footprint` counts the bytes one ``fit``, ``partial_fit``, ``predict`` or
``novelty`` call allocates on the host and on the device, from the parameters and the
shapes only (FlyHash's own estimate, :func:`._flyhash.flyhash_bytes`, plus the FlyNN
engine's work, the encoding's batches, the model and the result); :func:`check_size`
compares them with the free memory and raises
:class:`~sknn_gpu.InsufficientMemoryError` (needed vs free) before anything large is
allocated.
"""

from __future__ import annotations

from ._encoding import QUANTILE_BINS, QUANTILE_KNOTS
from ._flyhash import check_footprint, flyhash_bytes
from ._flynn_engine import engine

__all__ = ["footprint", "check_size"]


def footprint(est, stage, n_samples, n_features, sizes):
    """Host and device bytes of ``stage`` of ``est`` for ``n_samples`` rows: the one size estimate.

    ``stage``: ``'fit'`` (projection, counts and filters, then training batches),
    ``'partial_fit'`` (training batches), ``'predict'`` or ``'novelty'``
    (batches and the result). ``n_features`` is the number of inputs the hash reads
    and ``sizes`` is ``(m, s, k)``. Computed from the parameters and shapes only.
    """
    m, s, k = sizes
    device, n_classes = est.device_, len(est.classes_)
    host = gpu = 0
    if stage == "fit":
        host, gpu = flyhash_bytes(device, n_features, m, s, k, projection=True)
        model = 3 * n_classes * m * 8  # counts_, filters_ and the transposed filters
        host += 3 * n_classes * m * 8  # float64 counts, gamma ** counts, transposed copy
        if device == "cuda":
            gpu += model
        else:
            host += model
    rows = min(int(est.batch_size), int(n_samples))
    if rows:
        h, g = flyhash_bytes(device, n_features, m, s, k, n_samples=rows, output="winners")
        eh, eg = engine(device).work_bytes(rows, n_features, k, n_classes, m)
        host, gpu = host + h + eh, gpu + g + eg
        if getattr(est, "encoding", None) is not None:  # a batch's receptors, then their concatenation
            if device == "cuda":
                gpu += 2 * rows * n_features * 8
            else:
                host += 2 * rows * n_features * 8
        if getattr(est, "encoding", None) is not None and getattr(est, "input_range", None) == "quantile":
            d = int(getattr(est, "n_features_in_", n_features))
            if stage in ("fit", "partial_fit"):  # the quantiles' histogram: a batch's bins, the tables
                host += d * (2 * QUANTILE_BINS * 8 + QUANTILE_KNOTS * 8)
            temps = 2 * rows * d * 8  # each value's bin (or place among the quantiles), in float64
            if device == "cuda":
                gpu += temps
            else:
                host += temps
        result = {"fit": 4, "partial_fit": 4, "predict": 8, "novelty": 8 * n_classes}[stage] * n_samples
        if stage in ("fit", "partial_fit"):  # the batch counts' total, then the new counts_
            result += 2 * n_classes * m * 8
        host += result  # labels in, or the result out (NumPy in, NumPy out)
        gpu += result if device == "cuda" else 0
    return host, gpu


def check_size(est, stage, n_samples, n_features=None, sizes=None, caller=None):
    """Refuse ``stage`` of ``est`` on ``n_samples`` rows before allocating when it cannot fit.

    ``n_features`` (the inputs the hash reads: the encoded width) and ``sizes``
    (m, s, k) default to the fitted ones; the error names ``caller`` (default: the
    stage) and the sizes involved.
    """
    if n_features is None:
        n_features = est.hasher_.n_features_in_
        sizes = (est.n_components_, est.hasher_.n_connections_, est.k_)
    check_footprint(
        footprint(est, stage, n_samples, n_features, sizes),
        est.device_,
        what=(
            f"{type(est).__name__}.{caller or stage} of {n_samples} samples x "
            f"{_inputs_text(est, n_features)} "
            f"with n_components={sizes[0]} cells, {len(est.classes_)} classes, "
            f"batch_size={est.batch_size}"
        ),
    )


def _inputs_text(est, width):
    """``'64 features'``, or ``'64 features (320 inputs after encoding='population')'``."""
    d = getattr(est, "n_features_in_", width)
    if getattr(est, "encoding", None) is None or d == width:
        return f"{width} features"
    return f"{d} features ({width} inputs after encoding={est.encoding!r})"
