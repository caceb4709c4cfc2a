"""How DTCNNHalftoner reads an image array: layout, value checks and the size estimate.

An array is read as a stack of single-channel images ``(n, H, W)`` that the
engines halftone one by one; :func:`image_layout` decides how (which axis holds
channels, whether there is a batch axis, whether the last channel is alpha) and
refuses shapes whose reading would be a guess. :func:`halftone_bytes` is the one
size estimate, used by ``fit``/``transform`` and by the ``sknn-gpu`` command line
before anything large is allocated or scanned.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from .._backend import array_module, is_device_array
from ._fixed_point import UINT_TOP

__all__ = [
    "Layout",
    "image_layout",
    "check_image_array",
    "check_image_values",
    "to_stack",
    "from_stack",
    "halftone_bytes",
    "OUTPUT_DTYPES",
    "check_output_dtype",
    "output_dtype",
    "convert_intensity",
]

#: 'auto' reads a trailing axis of length 1, 3 or 4 of a 3-D array as channels only
#: when both other sides have at least this many pixels; smaller ones are ambiguous.
AUTO_MIN_SIDE = 8
#: Peak host bytes per pixel of the single-channel stack in the NumPy engine, measured
#: with tracemalloc on 512 x 512 images: 74 (async fit), 78 (init='random'), 98 (sync
#: fit), 102 (sync fit, init='random'); transform needs 41 to 89. Rounded up.
CPU_BYTES_PER_PIXEL = 104
#: Device bytes per pixel in the CUDA engine: U, Zu, b (int32), the state (int16) and
#: the int64 temporaries of the exact energy (about 70) that fit computes.
CUDA_BYTES_PER_PIXEL = 96
#: The same without the energy (``transform``): U, Zu, b and the state (14), plus the
#: generic conversions' int32/float64 temporaries (dtypes without a one-pass kernel) or
#: 'sync''s two state copies. Rounded up.
CUDA_TRANSFORM_BYTES_PER_PIXEL = 32
#: Host bytes per pixel of the CUDA engine: the random initial thresholds (int32).
CUDA_HOST_BYTES_PER_PIXEL = 4

_SHAPES = "(H, W), (N, H, W), (H, W, C) or (N, H, W, C)"


class Layout(NamedTuple):
    """How an image array maps to a stack of single-channel images.

    Attributes
    ----------
    n, h, w : int
        Images in the batch (1 without a batch axis), rows and columns.
    c : int
        Channels of the array, alpha included (1 without a channel axis).
    axis : int or None
        The channel axis (non-negative), or None.
    batch : bool
        Whether the array has a batch axis.
    alpha : bool
        Whether the last channel is alpha (2 or 4 channels: grey + alpha, RGBA); it is
        passed through unchanged instead of halftoned.
    """

    n: int
    h: int
    w: int
    c: int
    axis: int | None
    batch: bool
    alpha: bool

    @property
    def n_halftoned(self):
        """Channels halftoned per image (alpha excluded)."""
        return self.c - int(self.alpha)

    @property
    def stack_shape(self):
        """Shape ``(n * channels, H, W)`` of the stack the engines halftone."""
        return (self.n * self.n_halftoned, self.h, self.w)

    def describe(self):
        """A few words for messages, e.g. '2 images of 64 x 48 pixels with 4 channels (RGBA)'."""
        what = f"{self.n} image{'s' if self.n != 1 else ''} of {self.h} x {self.w} pixels"
        if self.axis is None:
            return what + ", grey"
        extra = " (last one alpha, kept)" if self.alpha else ""
        return what + f" with {self.c} channel{'s' if self.c != 1 else ''}{extra}"


def _auto_channel_axis(shape):
    """The channel axis 'auto' picks for ``shape``, or a ValueError when it would be a guess."""
    if len(shape) == 2:
        return None
    if len(shape) == 3:
        a, b, c = shape
        if c not in (1, 3, 4):
            return None  # (N, H, W): a stack of grey images
        if min(a, b) >= AUTO_MIN_SIDE:
            return 2  # (H, W, C)
        raise ValueError(
            f"images of shape {tuple(shape)} are ambiguous: one {a} x {b} image with {c} "
            f"channel(s), or {a} grey images of {b} x {c} pixels? Pass channel_axis=-1 for the "
            "first or channel_axis=None for the second."
        )
    n, a, b, c = shape
    if c > 4 and a <= 4:
        raise ValueError(
            f"images of shape {tuple(shape)} are ambiguous: {n} images of {a} x {b} pixels with "
            f"{c} channels last, or {n} images of {b} x {c} pixels with {a} channels first? Pass "
            "channel_axis=-1 for the first or channel_axis=1 for the second."
        )
    return 3


def image_layout(shape, channel_axis="auto"):
    """Read an image array's shape as a :class:`Layout`.

    Parameters
    ----------
    shape : tuple of int
        Shape of the array (2 to 4 dimensions).
    channel_axis : 'auto', None or int
        'auto': ``(H, W)`` and ``(N, H, W)`` are grey, a trailing axis of length 1,
        3 or 4 of a 3-D array is a channel axis when both other sides have at least
        8 pixels (else the shape is ambiguous and refused), and a 4-D array is
        ``(N, H, W, C)`` (refused when ``C > 4`` while axis 1 has at most 4 entries:
        channels first?). None: no channel axis (2-D or 3-D). An int: that axis holds
        channels (3-D or 4-D).

    Returns
    -------
    Layout

    Raises
    ------
    ValueError
        For a wrong number of dimensions, an empty array, an axis out of range or an
        ambiguous shape (the message says which ``channel_axis`` to pass).
    """
    shape = tuple(int(s) for s in shape)
    ndim = len(shape)
    if ndim not in (2, 3, 4):
        hint = (
            " Reshape your data: one row of pixels is X.reshape(1, -1), one column X.reshape(-1, 1)."
            if ndim == 1
            else ""
        )
        raise ValueError(
            f"images must be {_SHAPES}; got an array with {ndim} dimension(s) of shape {shape}.{hint}"
        )
    if 0 in shape:
        what = "0 sample(s)" if shape[0] == 0 else "0 feature(s)"
        raise ValueError(
            f"images must not be empty: found array with {what} (shape={shape}) while a minimum of 1 "
            "is required."
        )
    if isinstance(channel_axis, str) and channel_axis == "auto":
        axis = _auto_channel_axis(shape)
    elif channel_axis is None:
        if ndim == 4:
            raise ValueError(
                f"channel_axis=None reads (H, W) or (N, H, W) grey images, but the images have shape "
                f"{shape}; pass the channel axis, e.g. channel_axis=-1 for (N, H, W, C)."
            )
        axis = None
    else:
        if ndim == 2:
            raise ValueError(
                f"channel_axis={channel_axis} was given but images of shape {shape} have no channel "
                "axis; pass channel_axis=None (or 'auto') for a grey image."
            )
        if not -ndim <= channel_axis < ndim:
            raise ValueError(f"channel_axis={channel_axis} is out of range for images of shape {shape}.")
        axis = int(channel_axis) % ndim
    spatial = [s for i, s in enumerate(shape) if i != axis]
    c = 1 if axis is None else shape[axis]
    batch = len(spatial) == 3
    n, h, w = spatial if batch else [1, *spatial]
    return Layout(n, h, w, c, axis, batch, axis is not None and c in (2, 4))


def check_image_array(X):
    """Return ``X`` as a NumPy or CuPy array of a supported dtype (no value scan).

    Raises TypeError for sparse matrices and non-numeric data, ValueError for complex
    data.
    """
    if sp.issparse(X) or type(X).__module__.startswith("cupyx.scipy.sparse"):
        raise TypeError("DTCNNHalftoner takes dense images, got a sparse matrix.")
    if not is_device_array(X):
        try:
            X = np.asarray(X)
            if X.dtype == object:
                X = np.asarray(X, dtype=np.float64)  # a TypeError names the offending element
        except ValueError as exc:  # a ragged list: NumPy's "inhomogeneous shape" error
            raise _ragged(X, exc) from None
    if X.dtype.kind == "c":
        raise ValueError("Complex data not supported: images must hold real intensities in [0, 1].")
    if not (X.dtype == np.bool_ or X.dtype.kind in "uif"):
        raise TypeError(f"images must be a numeric array (uint8 or float in [0, 1]); got dtype {X.dtype}.")
    return X


def _ragged(X, exc):
    """The error for a sequence of images that cannot be stacked, naming their sizes."""
    items = X if isinstance(X, (list, tuple)) else list(getattr(X, "flat", []))
    shapes = []
    for item in items:
        try:
            shapes.append(tuple(int(v) for v in np.shape(item)))
        except ValueError:
            shapes.append(None)
    if len(shapes) > 1 and None not in shapes and len(set(shapes)) > 1:
        return ValueError(
            f"images in a list are halftoned as one batch, so they must all have the same size; got "
            f"{len(shapes)} images of different sizes: {', '.join(map(str, shapes))}. Halftone them "
            "one call each, e.g. [ht.transform(im) for im in images] (or pad them to one size)."
        )
    return ValueError(
        f"images must be a rectangular array of {_SHAPES}; this sequence cannot be stacked into one: {exc}"
    )


def check_image_values(X):
    """Refuse values that are not intensities.

    NaN or inf, floats outside [0, 1], integers other than uint8 outside {0, 1}. Two
    reductions (min and max; NaN propagates through both), no temporary array.
    """
    xp = array_module(X)
    if X.dtype.kind == "f":
        lo, hi = float(xp.min(X)), float(xp.max(X))
        if not (np.isfinite(lo) and np.isfinite(hi)):
            raise ValueError("images contain NaN or infinite values.")
        if lo < 0.0 or hi > 1.0:
            neg = "Negative values in data: " if lo < 0.0 else ""
            raise ValueError(
                f"{neg}float images must hold intensities in [0, 1]; got values in [{lo:g}, {hi:g}]. "
                "Divide by 255 (or pass uint8) first."
            )
    elif X.dtype.kind in "iu" and X.dtype != np.uint8:
        lo, hi = int(xp.min(X)), int(xp.max(X))
        if lo < 0 or hi > 1:
            raise ValueError(
                f"integer images must be uint8 (0..255) or hold only 0 and 1; got dtype {X.dtype} "
                f"with values in [{lo}, {hi}]."
            )


def _channels_last(X, lay):
    """View of ``X`` as (n, H, W, c)."""
    if lay.axis is None:
        return X[..., None] if lay.batch else X[None, :, :, None]
    Xc = array_module(X).moveaxis(X, lay.axis, -1)
    return Xc if lay.batch else Xc[None]


def to_stack(X, lay):
    """The single-channel stack ``(n * channels, H, W)`` of ``X`` (a view where possible)."""
    X4 = _channels_last(X, lay)
    k = lay.n_halftoned
    if k == 1:
        return X4[..., 0]
    return array_module(X).moveaxis(X4[..., :k], -1, 1).reshape(lay.n * k, lay.h, lay.w)


def from_stack(out, X, lay):
    """Put a halftoned stack back into ``X``'s layout, on ``out``'s device (alpha copied from
    ``X``, in the intensity scale of ``out``'s dtype: see :func:`convert_intensity`)."""
    xo = array_module(out)
    if lay.axis is None:
        return out if lay.batch else out[0]
    k = lay.n_halftoned
    o4 = out[..., None] if k == 1 else xo.moveaxis(out.reshape(lay.n, k, lay.h, lay.w), 1, -1)
    if lay.alpha:
        full = xo.empty((lay.n, lay.h, lay.w, lay.c), dtype=out.dtype)
        full[..., :k] = o4
        full[..., k] = convert_intensity(xo.asarray(_channels_last(X, lay)[..., k]), out.dtype)
        o4 = full
    res = o4 if lay.batch else o4[0]
    return xo.ascontiguousarray(xo.moveaxis(res, -1, lay.axis))


#: What ``DTCNNHalftoner(output_dtype=...)`` accepts besides None (any spelling NumPy reads
#: as one of these dtypes: 'uint8', np.uint8, np.dtype('uint8'), ...).
OUTPUT_DTYPES = ("uint8", "uint16", "bool", "float32", "float64")


def check_output_dtype(requested, levels):
    """``requested`` (an ``output_dtype`` parameter) as a NumPy dtype, or None; ValueError
    for a dtype outside :data:`OUTPUT_DTYPES` and for bool with more than two levels."""
    if requested is None:
        return None
    try:
        dtype = np.dtype(requested)
    except TypeError:
        dtype = None
    if dtype is None or dtype.name not in OUTPUT_DTYPES or isinstance(requested, bool):
        raise ValueError(
            f"output_dtype must be None (follow the input) or one of {', '.join(OUTPUT_DTYPES)} (a "
            f"name, a NumPy type or a dtype); got {requested!r}."
        )
    if dtype == np.bool_ and levels != 2:
        raise ValueError(
            f"output_dtype=bool holds two levels (False = black, True = white), but levels={levels}; "
            "use 'uint8' or a float dtype for more levels."
        )
    return dtype


def output_dtype(dtype, requested=None):
    """Dtype of the halftone of images of ``dtype``: ``requested`` when given (a dtype from
    :func:`check_output_dtype`), else uint8 and floats kept and anything else float64."""
    if requested is not None:
        return np.dtype(requested)
    dtype = np.dtype(dtype)
    return dtype if dtype == np.uint8 or dtype.kind == "f" else np.dtype(np.float64)


def convert_intensity(a, dtype):
    """Intensities ``a`` (uint8 0..255, floats in [0, 1], else 0/1) in the scale of ``dtype``.

    Used for the alpha channel, which is copied, not halftoned: it keeps its values when
    ``dtype`` has ``a``'s scale, and is rescaled otherwise (uint8 ``p`` becomes ``p / 255``
    in a float output; floats ``v`` become ``rint(255 v)`` in uint8 and ``rint(65535 v)`` in
    uint16). The same operations on NumPy and CuPy.
    """
    xp = array_module(a)
    dtype = np.dtype(dtype)
    scale = 255.0 if a.dtype == np.uint8 else 1.0
    if dtype.kind == "f":
        if a.dtype == np.uint8:
            return (a.astype(np.float64) / scale).astype(dtype)
        return a.astype(dtype)
    if dtype == a.dtype:
        return a
    return xp.rint(a.astype(np.float64) * (UINT_TOP[dtype] / scale)).astype(dtype)


def halftone_bytes(lay, dtype, device, input_on_device=False, energy=True, out_dtype=None):
    """Host and device bytes that halftoning images of layout ``lay`` and ``dtype`` needs.

    The one size estimate of DTCNNHalftoner (``fit``, ``transform`` and the command
    line check it before allocating or scanning anything large).

    Parameters
    ----------
    lay : Layout
        From :func:`image_layout`.
    dtype : dtype
        Dtype of the images.
    device : {'cpu', 'cuda'}
        The resolved device.
    input_on_device : bool, default=False
        Whether the images are already on the GPU (CuPy).
    energy : bool, default=True
        Whether the exact energy is computed (``fit``); its temporaries dominate the
        GPU's share.
    out_dtype : dtype or None, default=None
        Dtype of the halftone; None: the one :func:`output_dtype` gives for ``dtype``.

    Returns
    -------
    host_bytes, device_bytes : int
        ``device_bytes`` is 0 on the CPU.
    """
    pixels = int(np.prod(lay.stack_shape, dtype=np.float64))
    elems = lay.n * lay.h * lay.w * lay.c
    out_item = output_dtype(dtype, out_dtype).itemsize
    reassembly = 2 * out_item * elems if lay.axis is not None else 0  # channel moves, alpha
    if device == "cpu":
        return CPU_BYTES_PER_PIXEL * pixels + reassembly, 0
    per_pixel = CUDA_BYTES_PER_PIXEL if energy else CUDA_TRANSFORM_BYTES_PER_PIXEL
    dev = per_pixel * pixels + out_item * elems + reassembly
    if not input_on_device:
        dev += np.dtype(dtype).itemsize * elems
    host = CUDA_HOST_BYTES_PER_PIXEL * pixels + (0 if input_on_device else out_item * elems)
    return int(host), int(dev)
