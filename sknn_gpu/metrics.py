"""Image-quality metrics used by the halftoning estimator.

:func:`hvs_psnr` is the figure of merit for halftones: the PSNR between the
original and the halftone after both are seen through a Gaussian low-pass filter,
a simple model of the human visual system (HVS) at a given viewing distance.
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

from ._backend import to_host
from ._typing import ArrayLike

__all__ = ["hvs_psnr"]


def _as_unit_float(a, name):
    a = to_host(a)
    a = np.asarray(a)
    if a.dtype == np.bool_:
        return a.astype(np.float64)
    if a.dtype == np.uint8:
        return a.astype(np.float64) / 255.0
    if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise TypeError(f"{name} must be a numeric array, got dtype {a.dtype}.")
    a = a.astype(np.float64)
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} contains NaN or infinite values.")
    if a.size and (a.min() < 0 or a.max() > 1):
        raise ValueError(
            f"{name} must hold intensities in [0, 1] (or be uint8 / bool); "
            f"got values in [{a.min():g}, {a.max():g}]."
        )
    return a


def hvs_psnr(original: ArrayLike, halftone: ArrayLike, sigma: float = 1.5) -> float:
    """PSNR (dB) between two images after a Gaussian low-pass of both.

    Both images are filtered with a Gaussian of standard deviation ``sigma``
    pixels (``scipy.ndimage.gaussian_filter``, reflect boundary, truncated at
    4 sigma), then ``10 log10(1 / MSE)`` is returned for intensities in [0, 1].
    A higher value means the halftone looks closer to the original from a
    distance.

    Parameters
    ----------
    original : array-like of shape (H, W), (H, W, C) or (N, H, W[, C])
        Float intensities in [0, 1], or uint8 (divided by 255). NumPy or CuPy.
    halftone : array-like of the same shape
        Float in [0, 1], uint8, or bool.
    sigma : float, default=1.5
        Width of the HVS low-pass filter in pixels. It is applied over the two
        image axes only (the last two, or the two before a trailing channel
        axis of length 3 or 4).

    Returns
    -------
    float
        The HVS-PSNR in dB (``inf`` for identical filtered images).

    Examples
    --------
    >>> import numpy as np
    >>> from sknn_gpu.metrics import hvs_psnr
    >>> img = np.full((32, 32), 0.5)
    >>> checker = (np.indices((32, 32)).sum(axis=0) % 2).astype(float)
    >>> round(hvs_psnr(img, checker), 1) > 30
    True
    """
    if not (isinstance(sigma, (int, float, np.integer, np.floating)) and sigma > 0):
        raise ValueError(f"sigma must be a positive number, got {sigma!r}.")
    a = _as_unit_float(original, "original")
    b = _as_unit_float(halftone, "halftone")
    if a.shape != b.shape:
        raise ValueError(f"original and halftone shapes differ: {a.shape} vs {b.shape}.")
    if a.ndim < 2:
        raise ValueError(f"images must have at least 2 dimensions, got shape {a.shape}.")
    sig = [0.0] * a.ndim
    if a.ndim >= 3 and a.shape[-1] in (3, 4):
        sig[-3] = sig[-2] = float(sigma)
    else:
        sig[-2] = sig[-1] = float(sigma)
    diff = ndimage.gaussian_filter(a - b, sigma=sig, mode="reflect")
    mse = float(np.mean(diff * diff))
    if mse == 0.0:
        return float("inf")
    return float(10.0 * np.log10(1.0 / mse))
