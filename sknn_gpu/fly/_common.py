"""Labels and checks shared by the fly family's estimators, Dask adapter and federation.

* :data:`HASH_PARAMS`: the FlyHash parameters a FlyNNClassifier forwards to its hash
  (and that federated parties must agree on).
* :func:`label_kind`, :func:`host_labels`, :func:`encode_labels`: class labels as a
  1-D host array, refused when they mix strings and numbers, and as class indices.
* :func:`check_dask_X`: the metadata checks on a Dask ``X`` that both estimators make
  before any task runs.
* :func:`fitted_params`, :func:`check_fitted_params`: the parameters a fitted model
  depends on, recorded at fit and compared at every later call (a change is refused).
* :func:`refuse_bools`: a bool where a count or a fraction belongs is refused.

It sits below the estimators (``_flyhash``, ``_flynn``), the Dask adapter
(``_fly_dask``) and the federation (``_federated``), so that they share these
helpers without importing each other. Importing this module never imports Dask.
"""

from __future__ import annotations

import functools

import numpy as np
from sklearn.utils.validation import check_is_fitted, column_or_1d

from .._backend import to_host
from .._dask import check_row_chunks
from ..base import reject_time_dtypes

__all__ = [
    "HASH_PARAMS",
    "label_kind",
    "host_labels",
    "encode_labels",
    "check_dask_X",
    "fitted_params",
    "check_fitted_params",
    "fitted_method",
    "refuse_bools",
]

#: The FlyHash parameters a FlyNNClassifier forwards to its FlyHashTransformer.
HASH_PARAMS = ("n_components", "expansion_factor", "n_connections", "connection_sparsity", "k")


# --------------------------------------------------------------------------- #
# Class labels                                                                  #
# --------------------------------------------------------------------------- #


def label_kind(labels):
    """``'numeric'``, ``'string'`` or ``'mixed'`` for a 1-D host array of class labels."""
    if labels.dtype.kind in "biuf":
        return "numeric"
    if labels.dtype.kind in "US":
        return "string"
    types = {type(v) for v in labels.tolist()}  # object arrays: look at the values
    if all(issubclass(t, str) for t in types):
        return "string"
    if not any(issubclass(t, str) for t in types):
        return "numeric"
    return "mixed"


def host_labels(y, what="y"):
    """Labels as a 1-D host array; TypeError when they mix strings and numbers.

    A Python list such as ``[1, 'a']`` would silently become the strings
    ``['1', 'a']`` in NumPy, and an object array of both fails deep inside NumPy's
    sorting: both are refused here, naming an example of each type.
    """
    raw = y if hasattr(y, "dtype") else np.asarray(y, dtype=object)
    labels = column_or_1d(to_host(raw), warn=True)
    if labels.dtype.kind != "O":
        return labels
    if label_kind(labels) == "mixed":
        values = labels.tolist()
        a = next(v for v in values if isinstance(v, str))
        b = next(v for v in values if not isinstance(v, str))
        raise TypeError(
            f"{what} mixes string and numeric class labels (e.g. {a!r} and {b!r}); "
            "use one type for all labels."
        )
    return labels if raw is y else np.asarray(labels.tolist())  # a list: NumPy's own dtype


def encode_labels(classes, y, n):
    """Class indices (int32, host) of the labels ``y`` among the sorted ``classes``.

    ``n`` is the number of rows of ``X``; a clear error on a length mismatch or on
    labels that are not in ``classes``.
    """
    y = column_or_1d(to_host(y), warn=True)
    if y.shape[0] != n:
        raise ValueError(f"X and y have inconsistent numbers of samples: {n} != {y.shape[0]}.")
    idx = np.searchsorted(classes, y)
    idx = np.clip(idx, 0, len(classes) - 1)
    bad = classes[idx] != y
    if np.any(bad):
        unseen = np.unique(y[bad])
        raise ValueError(
            f"y contains labels {unseen.tolist()[:10]} that are not in classes_ "
            f"{classes.tolist()[:20]}; pass every label in `classes` on the first call "
            "to partial_fit."
        )
    return idx.astype(np.int32)


# --------------------------------------------------------------------------- #
# Dask input (metadata only)                                                    #
# --------------------------------------------------------------------------- #


def check_dask_X(est, X, what, reset, rows=True):
    """Refuse a Dask ``X`` from its metadata alone (no task runs); returns ``n_features``.

    2-D, numeric, at least one feature and (when the row count is known) one row.
    With ``rows`` (the data will be read by rows): one column block and known row
    chunks too. On ``reset`` it sets ``n_features_in_`` (and drops
    ``feature_names_in_``), otherwise it compares the width with the fitted one,
    with the in-memory messages.
    """
    name = f"{type(est).__name__}.{what}"
    reject_time_dtypes(X)
    if X.ndim != 2:
        raise ValueError(f"Expected a 2D array, got a Dask array of shape {X.shape}.")
    if X.dtype.kind not in "biuf":
        raise ValueError(f"X must be numeric, got dtype {X.dtype}.")
    if rows:
        check_row_chunks(X, name)
        if any(np.isnan(c) for c in X.chunks[0]):
            raise ValueError(
                f"{name}: X has unknown chunk sizes along the rows; call X.compute_chunk_sizes() first."
            )
    n, d = X.shape
    for size, unit in ((n, "sample"), (d, "feature")):
        if size == 0:
            raise ValueError(
                f"Found array with 0 {unit}(s) (shape={(n, d)}) while a minimum of 1 is required."
            )
    d = int(d)
    if reset:
        est.n_features_in_ = d
        est.__dict__.pop("feature_names_in_", None)
    elif d != est.n_features_in_:
        raise ValueError(
            f"X has {d} features, but {type(est).__name__} is expecting {est.n_features_in_} "
            "features as input."
        )
    return d


# --------------------------------------------------------------------------- #
# Parameters a fitted model depends on                                          #
# --------------------------------------------------------------------------- #
def _kept(value):
    """``value`` as recorded at fit: arrays and the containers holding them (lists, tuples,
    dicts) copied (a user may edit them in place later), anything else (a ``RandomState``,
    say) as it is."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, (list, tuple)):
        return type(value)(_kept(v) for v in value)
    if isinstance(value, dict):  # class_weight
        return {k: _kept(v) for k, v in value.items()}
    return value


def _equal(recorded, value):
    """Whether a parameter still has the value it had at fit (arrays by content, other
    objects such as a ``RandomState`` by identity or ``==``)."""
    if recorded is value:
        return True
    if isinstance(recorded, (list, tuple)) or isinstance(value, (list, tuple)):
        if not (isinstance(recorded, (list, tuple)) and isinstance(value, (list, tuple))):
            return False
        return len(recorded) == len(value) and all(map(_equal, recorded, value))
    if isinstance(recorded, np.ndarray) or isinstance(value, np.ndarray):
        a, b = np.asarray(to_host(recorded)), np.asarray(to_host(value))
        return a.shape == b.shape and a.dtype.kind == b.dtype.kind and bool(np.array_equal(a, b))
    if recorded is None or value is None or isinstance(recorded, bool) != isinstance(value, bool):
        return False
    try:
        return bool(recorded == value)
    except Exception:  # pragma: no cover - values that cannot be compared
        return False


def fitted_params(est, names):
    """The parameters ``names`` of ``est`` as they are now (copies of any arrays): recorded
    by ``fit`` as ``est._fitted_params_`` and compared by :func:`check_fitted_params`."""
    return {name: _kept(getattr(est, name)) for name in names}


def check_fitted_params(est, who=None):
    """Refuse a parameter that the fitted model depends on and that changed since ``fit``.

    The projection, the encoding's range and the filters of a fitted model were made with
    the values recorded in ``est._fitted_params_``; predicting (or counting more samples,
    or merging) under another value would mix two models silently. Estimators fitted
    before the record existed (older pickles) are not checked. ``who`` prefixes the
    message (``models[1]`` in a merge).

    Raises
    ------
    ValueError
        Naming the first parameter that changed, its value at fit and now.
    """
    recorded = est.__dict__.get("_fitted_params_")
    if recorded is None:
        return
    for name, old in recorded.items():
        new = getattr(est, name)
        if not _equal(old, new):
            prefix = f"{who}: " if who else ""
            raise ValueError(
                f"{prefix}{type(est).__name__}'s parameter {name} was {old!r} when the model was "
                f"fitted and is {new!r} now; the fitted model was made with the old value. Call "
                f"fit to refit with the new value, or set {name} back to {old!r}."
            )


def fitted_method(method):
    """Decorator for a public method of a fitted estimator: NotFittedError before a fit, and
    :func:`check_fitted_params` (a parameter the model depends on changed since) before
    any work, Dask input included (goes below ``validates_params``, above ``dask_rows``)."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        check_is_fitted(self)
        check_fitted_params(self)
        return method(self, *args, **kwargs)

    return wrapper


def refuse_bools(est, names):
    """ValueError for a bool given as one of the numeric parameters ``names``: scikit-learn's
    ``Interval(Integral, ...)`` takes ``True`` as 1 (``n_components=True`` would draw a
    one-unit hash), and a flag where a count or a fraction belongs is a mistake."""
    for name in names:
        value = getattr(est, name)
        if isinstance(value, (bool, np.bool_)):
            raise ValueError(
                f"{type(est).__name__}'s parameter {name} must be a number, got the bool {value!r}."
            )
