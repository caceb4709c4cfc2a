"""A FlyNN model as a safe file: counts, classes, parameters and range, never a pickle.

:func:`export_counts` writes a fitted FlyNN as an ``.npz`` archive of plain arrays
(``counts``, ``classes``, and when present ``input_low`` / ``input_high``,
``feature_names``, ``dp_released``) plus one JSON ``metadata`` entry (the format and its
version, the sknn_gpu version, the parameters, ``n_features``, ``n_components``, ``k``,
a SHA-256 of the projection, and the privacy accounting of a private release).
:func:`from_counts` reads one back with ``np.load(allow_pickle=False)``: loading runs no
code from the file. Everything is checked (entries, parameter names against
``get_params``, shapes, dtypes, values) and the projection is redrawn from the shared
integer ``random_state``; its digest must match the file's. This is what parties of a
federation exchange (:meth:`FlyNNClassifier.export_counts
<sknn_gpu.fly.FlyNNClassifier.export_counts>`); :func:`~sknn_gpu.fly.merge_flynn` merges
what :func:`from_counts` returns.

It sits below the estimator (``_flynn``), which passes itself or its class in.
"""

from __future__ import annotations

import json
import os
import zipfile
from numbers import Integral

import numpy as np
from sklearn.utils.validation import check_is_fitted

from .._backend import SMALL_WORK_BYTES, check_memory, is_device_array, to_device, to_host
from .._version import __version__
from ..base import check_params
from ._calibration import SCALE_GRID
from ._flyhash import _projection_digest
from ._weights import WEIGHT_BITS, on_grid

__all__ = ["FORMAT", "FORMAT_VERSION", "export_counts", "from_counts", "projection_digest"]

#: The ``format`` entry of the metadata, and the newest version this code reads and writes.
FORMAT = "sknn_gpu.fly.FlyNNClassifier.counts"
FORMAT_VERSION = 1

_REQUIRED = ("metadata", "counts", "classes")
_OPTIONAL = (
    "input_low",
    "input_high",
    "input_quantiles",
    "feature_names",
    "dp_released",
    "calibration_loss",
    "held_out_hits",
)
_META_KEYS = {
    "format",
    "format_version",
    "sknn_gpu_version",
    "params",
    "n_features",
    "n_components",
    "k",
    "projection_sha256",
    "dp_accounting",
}


def projection_digest(hasher):
    """SHA-256 (hex) of a fitted hash's projection (the digest its pickles carry too)."""
    return _projection_digest(hasher.components_)


def _json_value(name, value):
    """A parameter value as JSON (NumPy scalars and arrays as numbers and lists; a dict, such
    as ``class_weight``, as a list of ``[key, value]`` pairs: JSON keys are strings only)."""
    if isinstance(value, dict):
        return [[_json_value(name, k), _json_value(name, v)] for k, v in value.items()]
    if is_device_array(value):
        value = to_host(value)
    if isinstance(value, np.ndarray):
        return [_json_value(name, v) for v in value.tolist()] if value.ndim else value.item()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_json_value(name, v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(
        f"export_counts: parameter {name}={value!r} ({type(value).__name__}) cannot be written as "
        "JSON; set it to a number, a string or None."
    )


def _text_array(values, what):
    """A 1-D array of labels or names as NumPy numbers or unicode strings (never objects)."""
    arr = np.asarray(values)
    if arr.dtype.kind == "O":
        items = arr.tolist()
        if all(isinstance(v, str) for v in items):
            return np.asarray(items, dtype=str)
        kinds = sorted({type(v).__name__ for v in items})
        raise TypeError(
            f"export_counts: {what} hold Python objects ({kinds}); only numbers or strings can be "
            "written without pickle."
        )
    if arr.dtype.kind not in "biufU":
        raise TypeError(f"export_counts: {what} of dtype {arr.dtype} cannot be written.")
    return arr


def export_counts(est, file):
    """Write the fitted FlyNN ``est`` to ``file`` (a path or a binary file object) as ``.npz``."""
    check_is_fitted(est)
    params = est.get_params(deep=False)
    rs = params["random_state"]
    if not isinstance(rs, Integral) or isinstance(rs, bool):
        raise ValueError(
            "export_counts needs an integer random_state: the file holds no projection, which the "
            f"reader redraws from the shared seed; this model has random_state={rs!r}."
        )
    counts = np.asarray(to_host(est.counts_))
    arrays = {
        "counts": counts.astype(np.float64 if counts.dtype.kind == "f" else np.int64, copy=False),
        "classes": _text_array(est.classes_, "the class labels"),
    }
    if hasattr(est, "input_low_"):
        arrays["input_low"] = np.asarray(est.input_low_, dtype=np.float64)
        arrays["input_high"] = np.asarray(est.input_high_, dtype=np.float64)
    if getattr(est, "input_quantiles_", None) is not None:
        arrays["input_quantiles"] = np.asarray(est.input_quantiles_, dtype=np.float64)
    if hasattr(est, "feature_names_in_"):
        arrays["feature_names"] = _text_array(est.feature_names_in_, "the feature names")
    if hasattr(est, "dp_released_"):
        arrays["dp_released"] = np.asarray(est.dp_released_, dtype=np.int64)
    if getattr(est, "calibration_loss_", None) is not None:
        arrays["calibration_loss"] = np.asarray(est.calibration_loss_, dtype=np.float64)
        arrays["held_out_hits"] = np.asarray(est.held_out_hits_, dtype=np.float64)
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "sknn_gpu_version": __version__,
        "params": {name: _json_value(name, value) for name, value in params.items()},
        "n_features": int(est.n_features_in_),
        "n_components": int(est.n_components_),
        "k": int(est.k_),
        "projection_sha256": projection_digest(est.hasher_),
        "dp_accounting": getattr(est, "dp_accounting_", None),
    }
    arrays["metadata"] = np.asarray(json.dumps(meta, allow_nan=False))
    if isinstance(file, (str, os.PathLike)):
        with open(file, "wb") as f:  # np.savez would append '.npz' to a path without it
            np.savez_compressed(f, **arrays)
    else:
        np.savez_compressed(file, **arrays)


def _bad(message):
    return ValueError(f"from_counts: {message}")


def _header(z, name):
    """``(shape, dtype)`` of the entry ``name`` of the open archive ``z``, read from its
    ``.npy`` header without loading it."""
    with z.zip.open(f"{name}.npy") as fp:
        version = np.lib.format.read_magic(fp)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(fp)
        else:
            shape, _, dtype = np.lib.format.read_array_header_2_0(fp)
    return shape, dtype


def _read(file):
    """The arrays of the archive ``file`` (a dict), read without pickle.

    Every entry's header is read first: object dtypes are refused and the total size
    is checked against the free memory before anything is loaded (a compressed archive
    can unpack to far more than its size on disk).
    """
    try:
        z = np.load(file, allow_pickle=False)
    except FileNotFoundError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise _bad(f"not an .npz archive that loads without pickle ({exc}).") from None
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise _bad("not an .npz archive (a single array).")
    with z:
        names = set(z.files)
        missing = [n for n in _REQUIRED if n not in names]
        unknown = sorted(names - set(_REQUIRED) - set(_OPTIONAL))
        if missing or unknown:
            raise _bad(f"not a FlyNN counts file: missing entries {missing}, unknown entries {unknown}.")
        try:
            total = 0
            for name in sorted(names):
                shape, dtype = _header(z, name)
                if dtype.hasobject:
                    raise _bad(f"{name} holds Python objects, which cannot be read without pickle.")
                total += int(np.prod(shape, dtype=np.float64)) * dtype.itemsize
            check_memory(total, "cpu", "from_counts: the file's arrays", floor=SMALL_WORK_BYTES)
            return {name: z[name] for name in names}
        except (ValueError, KeyError, OSError, EOFError, zipfile.BadZipFile) as exc:  # damage
            if str(exc).startswith("from_counts:"):
                raise
            raise _bad(f"cannot read the file without pickle ({exc}).") from None


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _metadata(arrays):
    raw = arrays["metadata"]
    if raw.dtype.kind != "U" or raw.ndim != 0:
        raise _bad("the metadata entry must be one JSON string.")
    try:
        meta = json.loads(str(raw[()]))
    except json.JSONDecodeError as exc:
        raise _bad(f"the metadata is not valid JSON ({exc}).") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise _bad(f"not a FlyNN counts file (format {found!r}, expected {FORMAT!r}).")
    version = meta.get("format_version")
    if not _is_int(version) or not 1 <= version <= FORMAT_VERSION:
        raise _bad(
            f"format_version {version!r} is not one this sknn_gpu ({__version__}) reads "
            f"(1..{FORMAT_VERSION}); the file was written by sknn_gpu {meta.get('sknn_gpu_version')!r}."
        )
    missing, unknown = sorted(_META_KEYS - set(meta)), sorted(set(meta) - _META_KEYS)
    if missing or unknown:
        raise _bad(f"metadata keys missing {missing}, unknown {unknown}.")
    for key in ("n_features", "n_components", "k"):
        if not _is_int(meta[key]) or meta[key] < 1:
            raise _bad(f"metadata {key} must be an integer >= 1, got {meta[key]!r}.")
    if not isinstance(meta["params"], dict):
        raise _bad("metadata params must be a JSON object.")
    dp = meta["dp_accounting"]
    if dp is not None:
        eps = dp.get("epsilon") if isinstance(dp, dict) else None
        if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not 0 < eps < float("inf"):
            raise _bad("dp_accounting must be an object with a positive epsilon.")
    return meta


def _params(cls, meta, device):
    """The unfitted estimator of the file's parameters, checked (names and values)."""
    params = dict(meta["params"])
    params.setdefault("class_weight", None)  # files written before the parameter existed
    if "n_receptors" not in params:  # written before the population encoding took a receptor count
        if params.get("encoding") == "population":
            raise _bad(
                "it was written by an sknn_gpu whose encoding='population' had other tuning curves "
                f"({meta['sknn_gpu_version']!r}); its counts do not fit today's encoding: fit the "
                "model again."
            )
        params["n_receptors"] = "auto"  # read by the population encoding only
    expected = set(cls().get_params(deep=False))
    missing, unknown = sorted(expected - set(params)), sorted(set(params) - expected)
    if missing or unknown:
        raise _bad(
            f"the parameters do not match {cls.__name__}.get_params(): missing {missing}, unknown "
            f"{unknown} (written by sknn_gpu {meta['sknn_gpu_version']!r})."
        )
    given = params["input_range"]
    if isinstance(given, list):  # (low, high): numbers or one value per feature
        if len(given) != 2:
            raise _bad(f"input_range must be 'fit' or a pair, got {given!r}.")
        params["input_range"] = tuple(
            np.asarray(v, dtype=np.float64) if isinstance(v, list) else v for v in given
        )
    pairs = params["class_weight"]
    if isinstance(pairs, list):  # a dict, written as [label, weight] pairs
        if not all(isinstance(p, list) and len(p) == 2 and not isinstance(p[0], list) for p in pairs):
            raise _bad(f"class_weight must be None, 'balanced' or [label, weight] pairs, got {pairs!r}.")
        params["class_weight"] = {label: weight for label, weight in pairs}
    if device is not None:
        params["device"] = device
    if not _is_int(params["random_state"]):
        raise _bad(
            "random_state must be an integer (the projection is redrawn from it), got "
            f"{params['random_state']!r}."
        )
    est = cls(**params)
    check_params(est)  # constraints and the cross-checks (class weights >= 0, ...): a ValueError
    return est


def _array(arrays, name, kinds, ndim, shape=None):
    a = arrays[name]
    if a.dtype.kind not in kinds or a.ndim != ndim or (shape is not None and a.shape != shape):
        want = f"shape {shape}" if shape is not None else f"{ndim}-D"
        raise _bad(f"{name} must be a {want} array of kind {kinds!r}, got {a.dtype} of shape {a.shape}.")
    return a


def _counts(arrays, n_classes, m, private):
    counts = _array(arrays, "counts", "if", 2, (n_classes, m))
    if counts.dtype.kind == "i":
        counts = counts.astype(np.int64)
        if (counts < 0).any():
            raise _bad("counts must be >= 0.")
        return counts
    counts = counts.astype(np.float64)
    if not (np.isfinite(counts).all() and (counts >= 0).all()):
        raise _bad("float counts (a private release, or a fit with sample weights) must be finite and >= 0.")
    if not private and not on_grid(counts):
        raise _bad(
            "float counts must be a private release (with dp_accounting) or the weighted counts of "
            f"a fit with sample weights: multiples of 2**-{WEIGHT_BITS} below 2**{53 - WEIGHT_BITS}."
        )
    return counts


def _range(arrays, est, d):
    has_range = "input_low" in arrays or "input_high" in arrays
    if has_range != (est.encoding is not None):
        raise _bad(f"encoding={est.encoding!r} needs input_low and input_high exactly when it is not None.")
    if not has_range:
        return None, None
    low = _array(arrays, "input_low", "f", 1, (d,)).astype(np.float64)
    high = _array(arrays, "input_high", "f", 1, (d,)).astype(np.float64)
    if not (np.isfinite(low).all() and np.isfinite(high).all() and (low <= high).all()):
        raise _bad("input_low and input_high must be finite with input_low <= input_high.")
    return low, high


def _quantiles(arrays, est, d):
    """``input_quantiles`` (input_range='quantile'), checked: present exactly then, finite and
    non-decreasing per feature; None otherwise."""
    wanted = est.encoding is not None and est.input_range == "quantile"
    if ("input_quantiles" in arrays) != wanted:
        raise _bad("input_quantiles go with input_range='quantile' under an encoding, and only then.")
    if not wanted:
        return None
    knots = _array(arrays, "input_quantiles", "f", 2)
    if knots.shape[0] != d or knots.shape[1] < 2:
        raise _bad(f"input_quantiles must have {d} rows of at least 2 knots, got shape {knots.shape}.")
    if not (np.isfinite(knots).all() and (np.diff(knots, axis=1) >= 0).all()):
        raise _bad("input_quantiles must be finite and non-decreasing along each row.")
    return knots.astype(np.float64)


def _set_private(est, arrays, dp, n_classes, m):
    if "dp_released" in arrays:
        released = _array(arrays, "dp_released", "iu", 2)
        if (
            released.shape != (n_classes, dp.get("n_released"))
            or (released < 0).any()
            or (released >= m).any()
        ):
            raise _bad("dp_released must hold n_released cell indices in [0, n_components) per class.")
        est.dp_released_ = released.astype(np.int64)
    est.dp_epsilon_ = float(dp["epsilon"])
    scale = dp.get("laplace_scale")
    if isinstance(scale, (int, float)) and not isinstance(scale, bool):
        est.dp_scale_ = float(scale)
    est.dp_accounting_ = dp


def _calibration(arrays, dp):
    """``(table, hits)`` of ``predict_proba``'s calibration, or ``(None, None)`` (a file
    written before calibration existed, or a private release: the default scale)."""
    if "calibration_loss" not in arrays and "held_out_hits" not in arrays:
        return None, None
    if "calibration_loss" not in arrays or "held_out_hits" not in arrays:
        raise _bad("calibration_loss and held_out_hits go together.")
    if dp is not None:
        raise _bad("a private release carries no calibration (it was computed from the exact data).")
    table = _array(arrays, "calibration_loss", "f", 1, (len(SCALE_GRID),))
    hits = _array(arrays, "held_out_hits", "f", 1, (2,))
    if not (np.isfinite(table).all() and np.isfinite(hits).all() and (hits >= 0).all()):
        raise _bad("calibration_loss and held_out_hits must be finite (and hits >= 0).")
    return table, hits


def from_counts(cls, file, device=None):
    """The fitted ``cls`` (FlyNNClassifier) read from ``file`` (written by :func:`export_counts`)."""
    arrays = _read(file)
    meta = _metadata(arrays)
    est = _params(cls, meta, device)
    d, m, dp = meta["n_features"], meta["n_components"], meta["dp_accounting"]
    if dp is None and "dp_released" in arrays:
        raise _bad("dp_released without dp_accounting.")
    classes = _array(arrays, "classes", "biufU", 1)
    if classes.size == 0 or not np.array_equal(np.unique(classes), classes):
        raise _bad("classes must be non-empty, sorted and distinct.")
    counts = _counts(arrays, classes.size, m, private=dp is not None)
    low, high = _range(arrays, est, d)
    est.classes_ = classes
    est.n_features_in_ = d
    est._init_model(d, caller="from_counts", winners=meta["k"])  # the size checked before drawing
    est._set_input_range(low, high, knots=_quantiles(arrays, est, d))
    if low is not None and not (
        np.array_equal(est.input_low_, low) and np.array_equal(est.input_high_, high)
    ):
        raise _bad(f"input_low / input_high differ from input_range={est.input_range!r}.")
    same = (est.n_components_, est.k_) == (m, meta["k"])
    if not same or projection_digest(est.hasher_) != meta["projection_sha256"]:
        raise _bad(
            "these parameters draw a different projection here than where the file was written "
            f"(sknn_gpu {meta['sknn_gpu_version']!r}, here {__version__!r}); the counts are only "
            "meaningful with the projection they were counted with."
        )
    est._set_counts(to_device(counts, est.device_))
    est._set_calibration(*_calibration(arrays, dp))
    if "feature_names" in arrays:
        names = _array(arrays, "feature_names", "U", 1, (d,))
        est.feature_names_in_ = np.asarray(names.tolist(), dtype=object)
    if dp is not None:
        _set_private(est, arrays, dp, classes.size, m)
    return est
