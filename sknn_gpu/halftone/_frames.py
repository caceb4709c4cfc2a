"""DataFrame output (scikit-learn's ``set_output``) for DTCNNHalftoner.

A halftone is a table of samples and features only when the estimator reads ``X`` as
rows of flattened images (``image_shape=(H, W)``): then each output column is the
halftone of one input pixel, a one-to-one mapping like scikit-learn's scalers. Every
other layout is an image, and a DataFrame of it would be a guess; it is refused before
any work with a message saying what to do.
"""

from __future__ import annotations

import numpy as np

from .._backend import get_config
from .._dask import is_dask_collection
from .._sklearn_compat import get_output_config

__all__ = [
    "frame_output",
    "check_frame_output",
    "feature_names_in",
    "check_feature_names",
    "flat_feature_names",
]


def frame_output(est):
    """The container ``transform`` output is configured to (``'pandas'``, ``'polars'``) for
    ``est`` (its ``set_output`` or scikit-learn's global ``transform_output``), or None."""
    dense = get_output_config("transform", est)["dense"]
    return None if dense == "default" else dense


def check_frame_output(est, X, what):
    """``frame_output(est)``, after refusing what cannot become a DataFrame.

    ValueError (before any work) when a DataFrame is requested and ``est`` has no
    ``image_shape`` (its output is an image), ``X`` is a Dask array, or the output type
    is CuPy; None when no DataFrame is requested.
    """
    lib = frame_output(est)
    if lib is None:
        return None
    name = f"{type(est).__name__}.{what}"
    fix = "or call set_output(transform='default') on the halftoner to get arrays"
    if est.image_shape is None:
        raise ValueError(
            f"{name}: {lib} output was requested (set_output or sklearn.set_config), but without "
            "image_shape the halftone is an image ((H, W), a batch (N, H, W) or channels), not a table "
            "of samples and features. Pass image_shape=(H, W) to read X as rows of flattened H x W "
            f"images (each output column is then the halftone of one pixel), {fix}."
        )
    if is_dask_collection(X):
        raise ValueError(
            f"{name}: {lib} output of a Dask array would compute every block into one DataFrame on "
            f"the client; compute the halftone as arrays (set_output(transform='default')) or pass "
            f"in-memory rows, {fix}."
        )
    output_type = est.output_type if est.output_type is not None else get_config()["output_type"]
    if output_type == "cupy":
        raise ValueError(
            f"{name}: {lib} output holds host data, but output_type='cupy' asks for CuPy arrays; use "
            f"output_type=None or 'numpy' with a DataFrame output, {fix}."
        )
    return lib


def feature_names_in(X):
    """The column names of a DataFrame ``X`` (pandas or polars) when they are all strings,
    as an object array; None for arrays and for frames with other column labels."""
    columns = getattr(X, "columns", None)
    if columns is None or isinstance(X, np.ndarray):
        return None
    names = list(columns)
    if not names or not all(isinstance(c, str) for c in names):
        return None
    return np.asarray(names, dtype=object)


def check_feature_names(est, X, what):
    """ValueError when ``X`` is a DataFrame whose column names differ from the ones ``fit``
    saw (as scikit-learn refuses them); nothing to check otherwise."""
    fitted = getattr(est, "feature_names_in_", None)
    names = feature_names_in(X)
    if fitted is None or names is None:
        return
    if len(names) != len(fitted) or not np.array_equal(names, fitted):
        raise ValueError(
            f"{type(est).__name__}.{what}: the feature names should match those passed during fit "
            f"(the {len(fitted)} pixel columns, in order); got other column names."
        )


def flat_feature_names(est, input_features=None):
    """Output column names for rows of flattened ``image_shape`` images: one per pixel,
    the input's names (one-to-one) or ``x0 .. x{H*W - 1}``."""
    h, w = (int(v) for v in est.image_shape)
    n = h * w
    fitted = getattr(est, "feature_names_in_", None)
    if input_features is None:
        if fitted is not None:
            return fitted.copy()
        return np.asarray([f"x{i}" for i in range(n)], dtype=object)
    names = np.asarray(input_features, dtype=object)
    if names.ndim != 1 or names.shape[0] != n:
        raise ValueError(
            f"input_features should have length {n}, the pixels of image_shape=({h}, {w}); got "
            f"{names.shape[0] if names.ndim == 1 else names.shape}."
        )
    if fitted is not None and not np.array_equal(names, fitted):
        raise ValueError("input_features is not equal to feature_names_in_")
    return names
