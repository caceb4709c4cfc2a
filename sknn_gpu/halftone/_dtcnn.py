"""DTCNNHalftoner: image halftoning with an asynchronous discrete-time cellular neural network.

The dynamics (Tanaka & Tanji, "GPU implementation of asynchronous discrete-time
cellular neural networks") is, for every cell (pixel) ``i``::

    x_i = sum_k A(i; k) y_k + sum_k B(i; k) u_k + T      over the (2r+1)**2 neighbourhood
    y_i = f(x_i / gain)                                    m-level quantiser saturating at +-1

In ``mode='async'`` (Gauss-Seidel) the cells are updated in colour classes: the
cells whose row and column indices agree modulo ``r + 1`` do not see each other,
so each of the ``(r + 1)**2`` classes is updated in parallel, one class after the
other, in the same fixed order on both devices. ``mode='sync'`` (Jacobi) updates
every cell at once from the previous outputs; it is kept for comparison because it
usually falls into 2-cycles, which are detected and reported.

Everything runs in integer (fixed-point) arithmetic, see ``_templates.py``, so the
NumPy reference and the CUDA kernels (``_kernels/dtcnn.cu``) give identical bits.
"""

from __future__ import annotations

import warnings
from numbers import Integral, Real
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.base import BaseEstimator, TransformerMixin, _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from .._backend import SMALL_WORK_BYTES, InsufficientMemoryError, array_module, check_memory, is_device_array
from .._dask import dask_rows, is_dask_collection
from .._progress import Progress
from ..base import DeviceMixin
from . import _dtcnn_cpu
from ._images import (
    check_image_array,
    check_image_values,
    from_stack,
    halftone_bytes,
    image_layout,
    output_dtype,
    to_stack,
)
from ._templates import MAX_LEVELS, MAX_RADIUS, build_templates

__all__ = ["DTCNNHalftoner", "bayer_matrix"]

#: Default colour-class spacing of the first sweep (see ``first_sweep_spacing``).
FIRST_SWEEP_SPACING = 30
#: With ``verbose`` on a batch in 'async' mode, the engine halftones groups of about this
#: many pixels (at least one image), one call and one progress report each. Silent calls
#: hand the engine the whole batch at once.
PROGRESS_PIXELS = 1 << 20


def bayer_matrix(n: int = 8) -> NDArray[np.int64]:
    """The ``n x n`` Bayer ordered-dither index matrix.

    Parameters
    ----------
    n : int, default=8
        Size, a power of two.

    Returns
    -------
    ndarray of shape (n, n)
        A permutation of ``0 .. n*n - 1``; ``(M + 0.5) / n**2`` are the dither thresholds.

    Examples
    --------
    >>> from sknn_gpu.halftone import bayer_matrix
    >>> bayer_matrix(2).tolist()
    [[0, 2], [3, 1]]
    """
    if n < 1 or n & (n - 1):
        raise ValueError(f"n must be a power of two, got {n}.")
    m = np.zeros((1, 1), dtype=np.int64)
    while m.shape[0] < n:
        m = np.block([[4 * m, 4 * m + 2], [4 * m + 3, 4 * m + 1]])
    return m


def _init_thresholds(init, shape, rng):
    """Host-side thresholds in [0, 65536) for the initial quantisation (None for 'input')."""
    n, h, w = shape
    if init == "input":
        return None
    if init == "threshold":
        return np.int32(32768)
    if init == "bayer":
        bm = bayer_matrix(8)
        tiled = np.tile(bm, ((h + 7) // 8, (w + 7) // 8))[:h, :w]
        return (1024 * tiled + 512).astype(np.int32)
    return rng.randint(0, 65536, size=(n, h, w)).astype(np.int32)


def _engine(device):
    """The engine module for a resolved device: ``_dtcnn_cpu`` or ``_dtcnn_cuda``."""
    if device == "cuda":
        from . import _dtcnn_cuda

        return _dtcnn_cuda
    return _dtcnn_cpu


# --------------------------------------------------------------------------------------
# the driver shared by fit and transform
# --------------------------------------------------------------------------------------
def _image_groups(n, h, w, bar):
    """Slices of the stack that the engine halftones one call each.

    Silent (``bar`` None) or one image: the whole stack in one call. With a progress
    report on a batch: groups of about :data:`PROGRESS_PIXELS` pixels (at least one
    image), one report each. Images are halftoned independently in 'async' mode, so
    the grouping never changes a bit.
    """
    if bar is None or n <= 1:
        return [slice(0, n)]
    per = max(1, PROGRESS_PIXELS // max(1, h * w))
    return [slice(a, min(a + per, n)) for a in range(0, n, per)]


def _out_of_memory(exc, what, device, g, n, shape):
    """The error of an allocation that failed half-way, naming where it happened."""
    where = f"image {g.start + 1}" if g.stop - g.start == 1 else f"images {g.start + 1}-{g.stop}"
    done = f"; the {g.start} image(s) before it were done and are discarded" if g.start else ""
    return MemoryError(
        f"{what} ran out of memory on {device} while halftoning {where} of {n} "
        f"(stack of shape {tuple(shape)}){done}. The size estimate fitted when it was checked, "
        "so other allocations took the memory since (other arrays, CuPy's memory pool): free "
        f"them or halftone smaller batches. Cause: {type(exc).__name__}: {exc}"
    )


def _run(
    stk,
    engine,
    tm,
    m,
    mode,
    max_iter,
    init,
    boundary,
    rng,
    want_energy,
    first_spacing,
    out_dtype,
    bar=None,
    what="DTCNNHalftoner",
    device="cpu",
    spacing=None,
):
    """Halftone a stack (n, H, W) with ``engine``; returns the output levels and diagnostics.

    The output (in ``out_dtype``) stays on the engine's device; the diagnostics are
    host arrays: ``flips``, ``converged``, ``n_iter``, ``cycle``, ``back`` ('sync'
    only: cells that differ from two sweeps back) and, with ``want_energy``,
    ``energy2`` (exact ``2 E`` per image after each sweep).

    ``bar`` (a :class:`~sknn_gpu._progress.Progress`, or None when silent) advances
    per sweep ('sync', and 'async' on one image: the engines report each sweep) or
    per group of images ('async' on a batch: one engine call per group, see
    :func:`_image_groups`). When silent, the engine gets the whole stack in one call
    and no callback. A ``MemoryError`` half-way is re-raised naming the images.
    """
    n, h, w = stk.shape
    thr = _init_thresholds(init, stk.shape, rng)  # drawn for the whole stack, then sliced
    info = {}
    if mode == "sync":
        try:
            net = engine.prepare(stk, tm, m, boundary, thr)
            progress = bar.update if bar is not None else None
            out, changed, back, energies = engine.run_sync(net, max_iter, want_energy, out_dtype, progress)
        except MemoryError as exc:
            if isinstance(exc, InsufficientMemoryError):
                raise
            raise _out_of_memory(exc, what, device, slice(0, n), n, stk.shape) from exc
        fixed = changed == 0
        cyc = (back == 0) & ~fixed
        conv_any = fixed.any(axis=1)
        stop = fixed | cyc
        n_iter = np.where(stop.any(axis=1), stop.argmax(axis=1) + 1, changed.shape[1])
        info["flips"] = changed
        info["converged"] = conv_any
        info["n_iter"] = n_iter
        info["cycle"] = cyc.any(axis=1)
        info["back"] = back
        if want_energy:
            info["energy2"] = np.stack(energies, axis=1) if energies else np.zeros((n, 0), np.int64)
        return out, info

    groups = _image_groups(n, h, w, bar)
    per_sweep = bar.update if bar is not None and n == 1 else None
    flips = np.zeros((n, max_iter), dtype=np.int64)
    de2 = np.zeros((n, max_iter), dtype=np.int64)
    e0 = np.zeros(n, dtype=np.int64)
    out = None
    for g in groups:
        try:
            thr_g = thr[g] if thr is not None and np.ndim(thr) == 3 else thr
            stk_g = stk if len(groups) == 1 else stk[g]
            if want_energy or per_sweep is not None:
                net = engine.prepare(stk_g, tm, m, boundary, thr_g)
                if want_energy:
                    e0[g] = engine.energy2(net, net.Z)
                out_g, flips[g], de2[g] = engine.run_async(
                    net, max_iter, first_spacing, out_dtype, per_sweep, spacing=spacing
                )
                del net
            else:  # transform: one engine call (the CUDA engine replays a repeated configuration)
                args = (tm, m, boundary, thr_g, max_iter, first_spacing, out_dtype)
                out_g, flips[g], de2[g] = engine.halftone(stk_g, *args, spacing=spacing)
            if len(groups) == 1:
                out = out_g
            else:
                if out is None:
                    out = array_module(out_g).empty((n, h, w), dtype=out_g.dtype)
                out[g] = out_g
        except MemoryError as exc:
            if isinstance(exc, InsufficientMemoryError):
                raise
            raise _out_of_memory(exc, what, device, g, n, stk.shape) from exc
        if bar is not None and per_sweep is None:
            bar.update(g.stop - g.start)
    still = flips == 0
    conv_any = still.any(axis=1)
    n_iter = np.where(conv_any, still.argmax(axis=1) + 1, max_iter)
    steps = int(n_iter.max())
    info["flips"] = flips[:, :steps]
    info["converged"] = conv_any
    info["n_iter"] = n_iter
    info["cycle"] = np.zeros(n, dtype=bool)
    if want_energy:
        info["energy2"] = e0[:, None] + np.cumsum(de2[:, :steps], axis=1)
    return out, info


class DTCNNHalftoner(DeviceMixin, TransformerMixin, BaseEstimator):
    """Halftone images with an asynchronous discrete-time cellular neural network (DT-CNN).

    Every pixel is a cell with state ``x = A*y + B*u + T`` over a ``(2r+1)^2``
    neighbourhood and output ``y = f(x / gain)``, the ``levels``-level uniform
    quantiser saturating at -1 and +1 (input ``u`` and output ``y`` are intensities
    mapped to [-1, 1]). With the default Gaussian template each update of a cell is
    an exact descent step on the error between the original and the halftone as seen
    through a Gaussian low-pass filter (a human-visual-system model): the network
    halftones an image by minimising that filtered error, one colour class of cells
    at a time. The whole dynamics runs in fixed-point integer arithmetic, so the CPU
    and GPU give bit-identical halftones.

    Parameters
    ----------
    levels : int, default=2
        Number of output levels ``m`` (2 = black and white). The output takes the
        values ``k / (m - 1)``, ``k = 0 .. m-1`` (``round(255 k / (m-1))`` for uint8).
        At most 64.
    template : {'gaussian', 'custom'}, default='gaussian'
        'gaussian': with ``Q`` the autocorrelation of a Gaussian of width ``sigma``
        (truncated to ``radius``, normalised to sum 1), ``A = -Q`` off the centre
        and 0 at the centre, ``B = Q``, ``T = 0`` and ``gain = Q[0, 0]``: each cell
        update minimises ``||G_sigma * (y - u)||^2`` over the cell's levels.
        'custom': use the templates ``A``, ``B``, ``T`` given below with ``gain = 1``.
    sigma : float, default=1.2
        Width (pixels) of the Gaussian visual model of the 'gaussian' template. A
        larger value models a more distant viewer: coarser, more clustered dots.
        1.2 measured best for :func:`~sknn_gpu.metrics.hvs_psnr` at its default
        sigma 1.5 (see the user guide). Ignored for 'custom'.
    radius : int or None, default=None
        Template radius ``r`` (1..16): the neighbourhood is ``(2r+1)^2`` and the
        sweeps after the first use ``(r+1)^2`` colour classes (with the default
        ``class_spacing``), so their cost grows like ``r^2`` passes of ``r^2`` taps.
        None picks ``ceil(3 sigma)`` (4 for the default sigma), which keeps the taps
        that are not (nearly) zero. Must match
        ``A``/``B`` for 'custom'.
    mode : {'async', 'sync'}, default='async'
        'async': colour-class Gauss-Seidel updates (the network converges; the
        energy never increases). 'sync': every cell at once from the previous
        outputs (Jacobi); it ends in a 2-cycle (symmetric templates allow no longer
        period), which is detected exactly (every cell equal to two sweeps back),
        stops the iteration and is reported in ``cycle_detected_``. On photos most
        cells flip every sweep from the second on, but a few hundred keep moving for
        100 to 800 sweeps before the cycle is exact; a run that stops at
        ``max_iter`` first warns and ``back_flips_`` shows how far it got.
    max_iter : int, default=30
        Maximum number of sweeps (one sweep updates every cell once). The run stops
        earlier after a sweep that changes no cell (a fixed point).
    init : {'input', 'threshold', 'bayer', 'random'}, default='input'
        Initial outputs. 'input': ``y(0) = u`` (continuous; every cell is quantised
        on its first visit, seeing its neighbours' exact intensities; best quality
        in our measurements). 'threshold': nearest level. 'bayer': 8x8 ordered
        dither. 'random': random thresholds drawn from ``random_state``.
    boundary : {'zero', 'reflect'}, default='zero'
        How the input term ``B*u`` sees outside the image. The feedback term always
        sees zero (mid-grey, ``y = 0``) outside. 'zero': the input is also zero
        outside, so the energy is exactly the filtered error inside the image and the
        borders are halftoned like the interior. 'reflect': the input is
        reflect-padded; the mismatch with the zero feedback darkens or lightens a
        border band of about ``r`` pixels (-2 dB HVS-PSNR on ``camera``).
    first_sweep_spacing : int or None, default=30
        Colour-class spacing of the first sweep (2..64, at least ``radius + 1``);
        later sweeps use ``class_spacing``. The first sweep makes most of the
        halftone, and a wider spacing makes it closer to a sequential scan (each
        update sees more already-decided neighbours): 30 measured +1.7 to +2.4 dB
        HVS-PSNR over ``None`` (= ``radius + 1``) on four photos, for ``30**2``
        cheap passes (one warp per cell) instead of ``(radius + 1)**2``; 48 and 64
        add another 0.2-0.3 and 0.3-0.4 dB for 2.6x and 4.6x the passes of that
        sweep. None: the first sweep uses ``class_spacing`` like the others.
    class_spacing : int or None, default=None
        Colour-class spacing of the sweeps after the first (2..64, at least
        ``radius + 1``): cells whose row and column indices agree modulo it form a
        class, updated together. None: ``radius + 1``, the fewest classes
        (``(radius + 1)**2``) that keep a class's cells out of each other's
        neighbourhoods. ``2 * radius + 1`` gives the paper's layout: sub-images of the
        template's size, 9 classes for a 3 x 3 template. With
        ``radius=1, class_spacing=3, first_sweep_spacing=None`` every sweep updates
        the paper's 9 classes (its faithful mode; see the user guide). Another
        spacing is another (valid) asynchronous update order, so another halftone.
    A, B : array-like of shape (2r+1, 2r+1), default=None
        Feedback and control templates for ``template='custom'``. ``A`` must be
        symmetric about its centre. Ignored for 'gaussian'.
    T : float, default=0.0
        Bias for ``template='custom'``.
    channel_axis : 'auto', None or int, default='auto'
        Which axis of the images holds channels. None: none, ``(H, W)`` is one grey
        image and ``(N, H, W)`` a stack of grey images (as in scikit-image). An int
        (e.g. -1): that axis, of a 3-D ``(H, W, C)`` or 4-D ``(N, H, W, C)`` array.
        'auto': ``(H, W)`` and ``(N, H, W)`` are grey; a 3-D array whose last axis
        has length 1, 3 or 4 is one image with channels when both other sides have
        at least 8 pixels, and is refused as ambiguous otherwise (``(5, 64, 3)``: a
        5 x 64 RGB image or five 64 x 3 grey images?); a 4-D array is
        ``(N, H, W, C)`` (refused as ambiguous when ``C > 4`` while axis 1 has at
        most 4 entries, as in channels-first ``(N, 3, H, W)``). Channels are
        halftoned one by one; with 2 or 4 channels (grey + alpha, RGBA) the last
        one is alpha and is copied to the output unchanged.
    random_state : int, RandomState instance or None, default=None
        Seeds ``init='random'`` (drawn on the host, so both devices agree).
    verbose : int or bool, default=0
        Progress reports on the ``sknn_gpu.halftone`` logger (:mod:`logging`, INFO).
        ``0``: silent, and the work is exactly that of a silent call (one engine
        call for the whole batch, all sweeps in one GPU launch). ``1``: one summary
        line per call (images or sweeps, time, sweeps run, whether every image
        converged), with a progress bar when stderr is a terminal (tqdm when it is
        installed, else a plain line). ``2``: also one line per step. The step is a
        sweep for one image (the GPU then launches each sweep on its own and waits
        for its counts) and in 'sync' mode; on a batch in 'async' mode it is a group
        of images of about a million pixels (each channel of a colour image counts
        as one image), halftoned one engine call each. The halftone is the same bits
        at every ``verbose``.
    device : {'auto', 'cpu', 'cuda'}, default='auto'
        Where to compute. 'auto' uses the GPU when CuPy and a GPU are usable.
    output_type : {'input', 'numpy', 'cupy'} or None, default=None
        Array type of what this estimator returns: None follows
        ``sknn_gpu.config_context(output_type=...)`` (by default the input's type: NumPy
        in, NumPy out; CuPy in, CuPy out); ``'numpy'`` always returns host arrays;
        ``'cupy'`` always device arrays.

    Attributes
    ----------
    templates_ : dict
        Float templates ``A``, ``B``, ``T``, ``gain``, the radius, the fixed-point
        ``scale`` and the integer templates actually used (``A_int``, ``B_int``,
        ``T_int``, ``gain_int``).
    n_iter_ : int
        Sweeps run by ``fit`` (the most over the images/channels), including the
        final sweep that changed nothing.
    n_iter_per_image_ : ndarray of shape (n_images,)
        Sweeps per single-channel image of the fitted stack.
    converged_ : bool
        Whether every image reached a fixed point within ``max_iter``.
    cycle_detected_ : bool
        'sync' mode: whether some image fell into an exact 2-cycle (always False in
        'async').
    back_flips_ : ndarray of shape (n_sweeps,) or None
        'sync' mode: cells whose output differs from the one two sweeps earlier, per
        sweep (summed over images and channels); 0 with ``flips_ > 0`` is a 2-cycle.
        None in 'async' mode.
    flips_ : ndarray of shape (n_sweeps,)
        Cells changed in each sweep (summed over images and channels).
    energy_ : ndarray of shape (n_sweeps,)
        Energy after each sweep, summed over images and channels, relative to the
        continuous state ``y = u``: ``E(y) = -1/2 y'Ay - y'(Bu + T) + gain/2 |y|^2``.
        For the Gaussian template this is half the squared HVS-filtered error
        (intensities in [-1, 1]). Computed exactly in integers; never increases in
        'async' mode when ``A`` has a zero centre (or ``levels=2`` and a
        non-negative centre).
    device_ : str
        The resolved device.

    See Also
    --------
    sknn_gpu.metrics.hvs_psnr : the quality measure for halftones.

    Notes
    -----
    Accepted images: ``(H, W)``; ``(N, H, W)`` a batch; ``(H, W, C)`` one image with
    channels; ``(N, H, W, C)`` a batch of those (see ``channel_axis``). Colour images
    are halftoned channel by channel; an alpha channel is kept. Floats must lie in
    [0, 1]; uint8 is read as ``p / 255``; other integers and booleans must hold 0
    and 1. Output has the input's shape and type (uint8 in gives uint8 in {0, 255}
    out for ``levels=2``; NumPy in gives NumPy out, CuPy in gives CuPy out).

    Images that would not fit in host (or GPU) memory are refused with an
    ``InsufficientMemoryError`` naming the bytes needed and free, before they are
    scanned or copied; the estimate is about 104 bytes per pixel and channel on the
    CPU and 96 on the GPU (see the user guide, "Errors and limits").

    ``fit`` builds the templates and halftones ``X`` to record the diagnostics;
    ``transform`` halftones any images with the fitted templates and changes no
    attribute; ``fit_transform`` returns the halftone computed by ``fit``. A ``fit``
    that fails (bad input, out of memory half-way, interrupted) leaves the
    estimator unfitted, never with new templates beside old diagnostics; a failed
    ``transform`` changes nothing.

    ``transform`` takes Dask arrays: a batch chunked along its batch axis only is
    halftoned block by block on the workers and comes back as a lazy Dask array,
    the same bits as in memory (every image is halftoned on its own; the exceptions
    are ``init='random'``, whose thresholds each block draws afresh from
    ``random_state``, and ``mode='sync'``, where an image caught in a 2-cycle stops
    on the step its whole block stops). A single image ``(H, W)`` or ``(H, W, C)``
    must be one block and is halftoned as one task: every pixel depends on the
    whole image, so chunking along rows, columns or channels is refused. ``fit``
    takes in-memory images only; the templates do not depend on the data, so
    fitting a small in-memory image and transforming the Dask batch is enough.

    Examples
    --------
    >>> import numpy as np
    >>> from sknn_gpu import DTCNNHalftoner
    >>> img = np.linspace(0, 1, 32 * 32).reshape(32, 32)
    >>> ht = DTCNNHalftoner(device="cpu")
    >>> out = ht.fit_transform(img)
    >>> sorted(np.unique(out).tolist())
    [0.0, 1.0]
    >>> bool(ht.converged_), bool(abs(out.mean() - img.mean()) < 0.01)
    (True, True)
    """

    _parameter_constraints = {
        "levels": [Interval(Integral, 2, MAX_LEVELS, closed="both")],
        "template": [StrOptions({"gaussian", "custom"})],
        "sigma": [Interval(Real, 0, None, closed="neither")],
        "radius": [Interval(Integral, 1, MAX_RADIUS, closed="both"), None],
        "mode": [StrOptions({"async", "sync"})],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "init": [StrOptions({"input", "threshold", "bayer", "random"})],
        "boundary": [StrOptions({"zero", "reflect"})],
        "first_sweep_spacing": [Interval(Integral, 2, 64, closed="both"), None],
        "class_spacing": [Interval(Integral, 2, 64, closed="both"), None],
        "A": ["array-like", None],
        "B": ["array-like", None],
        "T": [Real],
        "channel_axis": [StrOptions({"auto"}), Integral, None],
        "random_state": ["random_state"],
        "verbose": [Interval(Integral, 0, None, closed="left"), "boolean"],
        **DeviceMixin._device_constraints,
        **DeviceMixin._output_constraints,
    }

    def __init__(
        self,
        levels: int = 2,
        *,
        template: Literal["gaussian", "custom"] = "gaussian",
        sigma: float = 1.2,
        radius: int | None = None,
        mode: Literal["async", "sync"] = "async",
        max_iter: int = 30,
        init: Literal["input", "threshold", "bayer", "random"] = "input",
        boundary: Literal["zero", "reflect"] = "zero",
        first_sweep_spacing: int | None = FIRST_SWEEP_SPACING,
        class_spacing: int | None = None,
        A: ArrayLike | None = None,
        B: ArrayLike | None = None,
        T: float = 0.0,
        channel_axis: Literal["auto"] | int | None = "auto",
        random_state: int | np.random.RandomState | None = None,
        verbose: int | bool = 0,
        device: Literal["auto", "cpu", "cuda"] = "auto",
        output_type: Literal["input", "numpy", "cupy"] | None = None,
    ) -> None:
        self.levels = levels
        self.template = template
        self.sigma = sigma
        self.radius = radius
        self.mode = mode
        self.max_iter = max_iter
        self.init = init
        self.boundary = boundary
        self.first_sweep_spacing = first_sweep_spacing
        self.class_spacing = class_spacing
        self.A = A
        self.B = B
        self.T = T
        self.channel_axis = channel_axis
        self.random_state = random_state
        self.verbose = verbose
        self.device = device
        self.output_type = output_type

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True
        tags.requires_fit = True
        return tags

    def _spacings(self):
        """``(first, later)`` colour-class spacings: sweep 0's (None when it equals the
        others') and that of the other sweeps (None when it is the usual ``r + 1``)."""
        r = self.templates_["radius"]
        for name in ("class_spacing", "first_sweep_spacing"):
            sp = getattr(self, name)
            if sp is not None and sp < r + 1:
                raise ValueError(
                    f"{name}={sp} is below radius + 1 = {r + 1}: cells of one colour class "
                    "would see each other."
                )
        later = self.class_spacing if self.class_spacing not in (None, r + 1) else None
        first = self.first_sweep_spacing
        if first is None or first == (later or r + 1):
            first = None
        return (None if first is None else int(first)), (None if later is None else int(later))

    def _check_size(
        self, shape, dtype=np.float64, device=None, *, input_on_device=False, extra_host_bytes=0, energy=True
    ):
        """Refuse images that would not fit in memory, before anything large is allocated.

        ``fit`` and ``transform`` call it after the cheap shape checks and before the
        value scan; the ``sknn-gpu`` command line calls it from an image file's header,
        before decoding the pixels. Work of at most ``SMALL_WORK_BYTES`` (16 MiB) on the
        host or the GPU is not checked: it cannot be oversize, and reading the free
        memory took ~75 us of a ~0.85 ms 512^2 GPU transform.

        Parameters
        ----------
        shape : tuple of int
            Shape of the images, read with ``channel_axis``.
        dtype : dtype, default=float64
            Their dtype.
        device : {'cpu', 'cuda'} or None, default=None
            A resolved device; None uses ``device_``.
        input_on_device : bool, default=False
            Whether the images already are CuPy arrays.
        extra_host_bytes : int, default=0
            Host bytes the caller holds on top (e.g. a decoded image file).
        energy : bool, default=True
            Whether the exact energy is computed (``fit``: yes; ``transform``: no).

        Returns
        -------
        host_bytes, device_bytes : int
            The estimate (``device_bytes`` is 0 on the CPU).

        Raises
        ------
        InsufficientMemoryError
            Naming the bytes needed and the bytes free on the host or the GPU.
        ValueError
            When ``shape`` is not a valid image layout (see ``channel_axis``).
        """
        device = device or self.device_
        lay = image_layout(shape, self.channel_axis)
        host, dev = halftone_bytes(lay, dtype, device, input_on_device=input_on_device, energy=energy)
        host += int(extra_host_bytes)
        what = f"halftoning images of shape {tuple(shape)} ({lay.describe()})"
        check_memory(host, "cpu", what=what, floor=SMALL_WORK_BYTES)
        if device == "cuda":
            check_memory(dev, "cuda", what=what, floor=SMALL_WORK_BYTES)
        return host, dev

    def _halftone(self, X, want_energy, random_state, what):
        first_spacing, spacing = self._spacings()
        X = check_image_array(X)
        lay = image_layout(X.shape, self.channel_axis)
        on_device = is_device_array(X)
        self._check_size(X.shape, X.dtype, self.device_, input_on_device=on_device, energy=want_energy)
        check_image_values(X)
        rng = check_random_state(random_state)
        stk = to_stack(X, lay)
        name = f"{type(self).__name__}.{what}"
        single = stk.shape[0] == 1 or self.mode == "sync"
        bar = None  # silent: no Progress object at all (a small GPU call feels its cost)
        if self.verbose:
            bar = Progress(
                self,
                name,
                total=int(self.max_iter) if single else stk.shape[0],
                verbose=self.verbose,
                unit="sweeps" if single else "images",
            )
        try:
            out, info = _run(
                stk,
                _engine(self.device_),
                self.templates_,
                int(self.levels),
                self.mode,
                int(self.max_iter),
                self.init,
                self.boundary,
                rng,
                want_energy,
                first_spacing,
                X.dtype,
                bar=bar,
                what=name,
                device=self.device_,
                spacing=spacing,
            )
        except BaseException:
            if bar is not None:
                bar.close()  # end the bar's line before the error is shown (as Progress.__exit__ does)
            raise
        if bar is not None:
            n_iter = np.asarray(info["n_iter"])
            summary = dict(n_iter=int(n_iter.max()), converged=bool(np.all(info["converged"])))
            if single:
                summary = dict(images=stk.shape[0], **summary)
            if self.mode == "sync":
                summary["cycle"] = bool(np.any(info["cycle"]))
            bar.close(**summary)
        return self._output(from_stack(out, X, lay), X), info

    def _refuse_dask(self, X, what):
        if is_dask_collection(X):
            raise TypeError(
                f"{type(self).__name__}.{what} takes in-memory images (NumPy or CuPy), not a Dask "
                "array: the templates do not depend on the images, so fit on a small in-memory "
                "image (or X[:1].compute()) and call transform on the Dask batch, which is "
                "halftoned block by block."
            )

    def _fit(self, X, what):
        self._refuse_dask(X, what)
        try:
            self.templates_ = build_templates(
                self.template, self.sigma, self.radius, int(self.levels), self.A, self.B, self.T
            )
            self._resolve_device()
            out, info = self._halftone(X, True, self.random_state, what)
        except BaseException:
            # a fit that fails (bad input, out of memory half-way, interrupted) leaves the
            # estimator unfitted: never the new templates beside the previous diagnostics
            for attr in [a for a in vars(self) if a.endswith("_") and not a.startswith("_")]:
                self.__dict__.pop(attr, None)
            raise
        self.n_iter_per_image_ = np.asarray(info["n_iter"], dtype=np.int64)
        self.n_iter_ = int(self.n_iter_per_image_.max())
        self.converged_ = bool(np.all(info["converged"]))
        self.cycle_detected_ = bool(np.any(info["cycle"]))
        self.flips_ = info["flips"].sum(axis=0)[: self.n_iter_]
        self.back_flips_ = info["back"].sum(axis=0)[: self.n_iter_] if "back" in info else None
        if self.mode == "sync" and not (self.converged_ or self.cycle_detected_):
            warnings.warn(
                f"mode='sync' stopped at max_iter={self.max_iter} before a fixed point or an exact "
                f"2-cycle: {int(self.flips_[-1])} cells changed in the last sweep and "
                f"{int(self.back_flips_[-1])} differ from two sweeps back (0 in a 2-cycle). "
                "Synchronous updates reach their 2-cycle only after a long transient (100-800 "
                "sweeps on 128^2-512^2 photos); raise max_iter to see it, or use mode='async'.",
                ConvergenceWarning,
                stacklevel=4,
            )
        scale = 2.0 * self.templates_["scale"] * (512.0 * (int(self.levels) - 1)) ** 2
        e2 = info["energy2"][:, : self.n_iter_]
        # Images that stopped earlier keep their last energy.
        if e2.shape[1] < self.n_iter_:  # pragma: no cover - defensive
            e2 = np.pad(e2, ((0, 0), (0, self.n_iter_ - e2.shape[1])), mode="edge")
        self.energy_ = e2.sum(axis=0).astype(np.float64) / scale
        return out

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: None = None) -> DTCNNHalftoner:
        """Build the templates and halftone ``X`` once to record the diagnostics.

        Parameters
        ----------
        X : array-like of shape (H, W), (N, H, W), (H, W, C) or (N, H, W, C)
            Images: floats in [0, 1] or uint8 (read with ``channel_axis``). NumPy or
            CuPy (not Dask: see the class notes).
        y : None
            Ignored.

        Returns
        -------
        self : DTCNNHalftoner

        Raises
        ------
        ValueError
            Invalid or ambiguous shapes, empty images, NaN/inf, values outside
            [0, 1]. TypeError for sparse, non-numeric or Dask input.
        InsufficientMemoryError
            When the images would not fit in memory (checked before any scan).
        MemoryError
            When memory runs out half-way all the same (other allocations took it);
            the message names the images, and the estimator is left unfitted.
        """
        self._fit(X, "fit")
        return self

    @_fit_context(prefer_skip_nested_validation=True)
    def fit_transform(self, X: ArrayLike, y: None = None) -> Any:
        """Fit on ``X`` and return its halftone (computed once).

        Parameters
        ----------
        X, y
            As for :meth:`fit`.

        Returns
        -------
        halftone : array of the same shape and array type as ``X``
            uint8 for uint8 input, else float (the input's float dtype) with values
            ``k / (levels - 1)``.
        """
        return self._fit(X, "fit_transform")

    def _dask_images(self, X):
        """Shape and dtype of one image's halftone, after refusing what Dask cannot do here."""
        lay = image_layout(X.shape, self.channel_axis)
        name = f"{type(self).__name__}.transform"
        if lay.batch and lay.axis == 0:
            raise ValueError(
                f"{name}: a Dask batch must have its images along axis 0, but channel_axis="
                f"{self.channel_axis} puts the channels there (shape {X.shape}); move the channel "
                "axis, e.g. X.transpose(1, 2, 3, 0) with channel_axis=-1."
            )
        first = 1 if lay.batch else 0
        split = [ax for ax in range(first, X.ndim) if X.numblocks[ax] != 1]
        if split:
            if lay.batch:
                fix = ", ".join(f"{ax}: -1" for ax in range(1, X.ndim))
                how = f"chunk the batch axis 0 only: X.rechunk({{{fix}}}) keeps each image whole in one block"
            else:
                how = (
                    "pass it as one block (X.rechunk(-1)), or stack several images into a batch "
                    "(N, H, W) chunked along N"
                )
            raise ValueError(
                f"{name}: the Dask array ({lay.describe()}) is chunked along axis {split[0]} "
                f"(chunks {X.chunks}); every pixel of a halftone depends on the whole image, so "
                f"an image cannot be split across blocks: {how}."
            )
        return X.shape[1:], output_dtype(X.dtype)

    @dask_rows(lambda est, X: (X.shape[1:], output_dtype(X.dtype)))
    def _transform_dask(self, X):
        """``transform`` of one Dask block (the shared wrapper maps it over the blocks)."""
        return self.transform(X)

    def transform(self, X: Any) -> Any:
        """Halftone images with the fitted templates (attributes are left unchanged).

        Parameters
        ----------
        X : array-like of shape (H, W), (N, H, W), (H, W, C) or (N, H, W, C)
            As for :meth:`fit` (any size). Or a Dask array: a batch chunked along its
            batch axis only (each block is halftoned on a worker), or a single image
            in one block (see the class notes).

        Returns
        -------
        halftone : array of the same shape and array type as ``X``
            A lazy Dask array for a Dask input, whose blocks have the array type of
            the input's blocks (or ``output_type``).
        """
        check_is_fitted(self, "templates_")
        if is_dask_collection(X):
            self._dask_images(X)
            return self._transform_dask(X)
        out, _ = self._halftone(X, False, self.random_state, "transform")
        return out
