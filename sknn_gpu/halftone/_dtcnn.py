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
The driver that runs an engine over a batch (blocks of sweeps, cycle detection,
progress groups) is ``_dtcnn_run.py``.

Size: the estimator alone, a little over 900 lines because its class docstring
documents every parameter, input layout and output (about 300 lines); the computation
lives in ``_dtcnn_run`` and the engines, the DataFrame output in ``_frames``.
"""

from __future__ import annotations

import warnings
from numbers import Integral, Real
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from .._backend import (
    SMALL_WORK_BYTES,
    check_memory,
    is_device_array,
    to_host,
)
from .._dask import dask_rows, is_dask_collection
from .._progress import Progress
from .._sklearn_compat import Interval, StrOptions, _fit_context
from ..base import DeviceMixin, validates_params
from ._dtcnn_run import bayer_matrix, engine, run
from ._frames import check_feature_names, check_frame_output, feature_names_in, flat_feature_names
from ._images import (
    OUTPUT_DTYPES,
    check_image_array,
    check_image_values,
    check_output_dtype,
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
        energy never increases, except with a custom ``A`` whose centre is negative,
        or positive with ``levels > 2``: such a network can cycle, which is detected
        in runs longer than 64 sweeps, see ``max_iter``). 'sync': every cell at once from the previous
        outputs (Jacobi); it ends in a 2-cycle (symmetric templates allow no longer
        period), which is detected exactly (every cell equal to two sweeps back),
        stops the iteration and is reported in ``cycle_detected_``. On photos most
        cells flip every sweep from the second on, but a few hundred keep moving for
        100 to 800 sweeps before the cycle is exact; a run that stops at
        ``max_iter`` first warns and ``back_flips_`` shows how far it got.
    max_iter : int, default=30
        Maximum number of sweeps (one sweep updates every cell once). The run stops
        earlier after a sweep that changes no cell (a fixed point). Memory does not
        depend on ``max_iter``, only on the sweeps actually run: 'async' runs of more
        than 64 sweeps go in blocks of 64, and after each block the state of every
        image still moving is compared with a saved one (Brent's cycle detection, one
        saved state per image); an image whose state repeats is in a cycle and stops
        there (``cycle_detected_``). A huge ``max_iter`` thus costs nothing more
        than the sweeps the network needs. Stopping at ``max_iter`` without a fixed
        point, or in a cycle, raises one ``ConvergenceWarning`` per call.
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
    image_shape : tuple of (int, int) or None, default=None
        Size ``(H, W)`` of the images when ``X`` is a scikit-learn sample matrix: each
        row of a 2-D ``X`` of shape ``(n_samples, H * W)`` is one flattened grey
        image, and the halftones come back in that flat layout (rows stay
        independent, so it fits a :class:`~sklearn.pipeline.Pipeline`). With it,
        any other shape is refused. None: a 2-D ``X`` is one image (see Notes).
        For example ``image_shape=(8, 8)`` for :func:`~sklearn.datasets.load_digits`
        rows scaled to [0, 1]. It is also what makes ``set_output(transform='pandas')``
        (or ``'polars'``) meaningful: each output column is the halftone of one pixel
        (see Notes).
    output_dtype : {'uint8', 'uint16', 'bool', 'float32', 'float64'}, dtype or None, \
            default=None
        Dtype of the halftone. None: the input's (uint8 in, uint8 out; a float dtype
        kept; 0/1 integers and booleans give float64). ``'uint8'``: level ``k`` of
        ``levels`` is ``round(255 k / (levels - 1))``, 0 and 255 for two levels, what
        ``PIL.Image.fromarray`` writes as an 8-bit image; ``'uint16'``: the same over
        0..65535; ``'bool'`` (``levels=2`` only): False for black, True for white,
        what scikit-image uses for binary images (``fromarray`` gives a 1-bit image);
        a float dtype: ``k / (levels - 1)`` in [0, 1]. A NumPy type or dtype
        (``np.uint8``) works as its name does. The conversion is integer arithmetic
        on the halftone's levels, the same on both devices. An alpha channel, copied
        rather than halftoned, is rescaled to the output's range (uint8 ``p`` becomes
        ``p / 255`` in a float output); ``'bool'`` refuses images with alpha.
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
        as one image), halftoned one engine call each. When stderr is not a terminal
        (a log file, a pipe, a batch job), ``1`` also logs a progress line at most
        every 5 seconds of a long call, so it shows how far it got. The halftone is
        the same bits at every ``verbose``.
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
        ``T_int``, ``gain_int``), and ``params``: the parameters they were built from
        (``transform`` refuses to run after one of them changed).
    n_iter_ : int
        Sweeps run by ``fit`` (the most over the images/channels), including the
        final sweep that changed nothing.
    n_iter_per_image_ : ndarray of shape (n_images,)
        Sweeps per single-channel image of the fitted stack (up to the fixed point,
        the detected cycle, or ``max_iter``).
    converged_ : bool
        Whether every image reached a fixed point within ``max_iter``.
    cycle_detected_ : bool
        Whether some image fell into a cycle: an exact 2-cycle in 'sync' mode; in
        'async' mode a repeated state (possible only with the custom templates
        named under ``mode``, found between blocks of 64 sweeps).
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
    image_shape_ : tuple of (int, int)
        Height and width of the images seen in ``fit``. ``transform`` refuses a 2-D
        ``X`` whose width is ``H * W`` of these (and which is not itself an ``H x W``
        image): almost surely their flattened rows, see Notes.
    device_ : str
        The resolved device.

    See Also
    --------
    sknn_gpu.metrics.hvs_psnr : the quality measure for halftones.

    Notes
    -----
    Accepted images: ``(H, W)``; ``(N, H, W)`` a batch; ``(H, W, C)`` one image with
    channels; ``(N, H, W, C)`` a batch of those (see ``channel_axis``). A 2-D array
    is always one image: an image and a scikit-learn sample matrix of flattened
    images ``(n_samples, H * W)`` have the same shape, so the estimator does not
    guess. Declare a sample matrix with ``image_shape=(H, W)``. Without it, a 2-D
    ``X`` that contradicts the fitted layout (its width is ``H * W`` of the images
    ``fit`` saw) is refused with a ``ValueError`` naming both shapes rather than
    halftoned as one tall image. A list of images is one batch: they must have one
    size (a ``ValueError`` names the sizes; halftone differently sized images one
    call each). Colour images
    are halftoned channel by channel; an alpha channel is kept. Floats must lie in
    [0, 1]; uint8 is read as ``p / 255``; other integers and booleans must hold 0
    and 1. Output has the input's shape and type (uint8 in gives uint8 in {0, 255}
    out for ``levels=2``; NumPy in gives NumPy out, CuPy in gives CuPy out).

    ``set_output(transform='pandas')`` (or ``'polars'``, or the same through
    :func:`sklearn.set_config`) returns a DataFrame with ``image_shape=(H, W)``: one row
    per image, one column per pixel, named as the columns of a DataFrame given to
    ``fit`` (one-to-one) or ``x0 .. x{H*W-1}``; the index of a pandas input is kept, and
    CuPy results are brought to the host. Without ``image_shape`` the output is an image
    (``(H, W)``, a batch, channels), not a table of samples and features, so a DataFrame
    output is refused with a ``ValueError`` before any work (``set_output(transform=
    'default')`` on the halftoner keeps arrays under a global pandas setting), and so is
    one with ``output_type='cupy'`` or a Dask input.

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

    Rows of flattened images (a sample matrix) with ``image_shape``:

    >>> rows = np.linspace(0, 1, 5 * 64).reshape(5, 64)  # five flattened 8 x 8 images
    >>> DTCNNHalftoner(image_shape=(8, 8), device="cpu").fit_transform(rows).shape
    (5, 64)
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
        "image_shape": [tuple, list, None],
        "output_dtype": [StrOptions(set(OUTPUT_DTYPES)), type, np.dtype, None],
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
        image_shape: tuple[int, int] | None = None,
        output_dtype: str | type | np.dtype | None = None,
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
        self.image_shape = image_shape
        self.output_dtype = output_dtype
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
        lay = image_layout(shape, self._channel_axis())
        host, dev = halftone_bytes(
            lay,
            dtype,
            device,
            input_on_device=input_on_device,
            energy=energy,
            out_dtype=self._requested_dtype(),
        )
        host += int(extra_host_bytes)
        what = f"halftoning images of shape {tuple(shape)} ({lay.describe()})"
        check_memory(host, "cpu", what=what, floor=SMALL_WORK_BYTES)
        if device == "cuda":
            check_memory(dev, "cuda", what=what, floor=SMALL_WORK_BYTES)
        return host, dev

    def _requested_dtype(self):
        """``output_dtype`` as a NumPy dtype, or None (follow the input)."""
        return check_output_dtype(self.output_dtype, int(self.levels))

    def _cross_check_params(self):
        """What the constraints cannot say: ``image_shape`` is two positive integers;
        ``output_dtype`` (a type or dtype) is one of the accepted ones, bool for two levels."""
        self._requested_dtype()
        shape = self.image_shape
        if shape is not None and not (
            len(shape) == 2
            and all(isinstance(v, Integral) and not isinstance(v, bool) and v >= 1 for v in shape)
        ):
            raise ValueError(
                f"image_shape must be None or two positive integers (H, W), the size of the flattened "
                f"images in the rows of X; got {shape!r}."
            )
        if shape is not None and self.channel_axis not in ("auto", None):
            raise ValueError(
                f"image_shape={tuple(shape)} reads rows of flattened grey images; channel_axis="
                f"{self.channel_axis} names a channel axis they do not have (pass channel_axis='auto' "
                "or None)."
            )

    #: the parameters ``fit`` builds ``templates_`` from (``levels`` also sets the quantiser)
    _TEMPLATE_PARAMS = ("template", "sigma", "radius", "levels", "A", "B", "T")

    def _template_params(self):
        """The template parameters as comparable values (arrays as shape and bytes)."""
        out = {}
        for name in self._TEMPLATE_PARAMS:
            value = getattr(self, name)
            if name in ("A", "B") and value is not None:
                arr = np.asarray(value, dtype=np.float64)
                value = (arr.shape, arr.tobytes())
            out[name] = value
        return out

    def _check_templates_current(self):
        """ValueError when a template parameter changed after ``fit``.

        ``transform`` halftones with the fitted templates but reads ``levels`` (the
        quantiser) from the parameters: a mix of the two would be silently wrong.
        """
        fitted = self.templates_.get("params")
        if fitted is None:  # a model pickled before the templates recorded their parameters
            return
        changed = [name for name, value in self._template_params().items() if fitted.get(name) != value]
        if changed:
            raise ValueError(
                f"{', '.join(changed)} changed after fit; the fitted templates_ were built for the "
                "old values. Call fit again (it only builds the templates; any small image will do)."
            )

    def _channel_axis(self):
        """``channel_axis`` as the layout reads it: rows of flattened images are grey."""
        return None if self.image_shape is not None else self.channel_axis

    def _images(self, X, name):
        """The image array ``X`` stands for: rows of flattened images (``image_shape``) become a
        stack ``(n, H, W)``. Refuses an ``X`` that contradicts the declared or fitted layout."""
        shape = tuple(int(v) for v in X.shape)
        self._check_declared_layout(shape, name)
        if self.image_shape is not None:
            return X.reshape(shape[0], *(int(v) for v in self.image_shape))
        self._check_fitted_layout(shape, name)
        return X

    def _check_declared_layout(self, shape, name):
        """With ``image_shape``, ``X`` must be ``(n_samples, H * W)``."""
        if self.image_shape is None:
            return
        h, w = (int(v) for v in self.image_shape)
        if len(shape) != 2 or shape[1] != h * w:
            raise ValueError(
                f"{name}: X of shape {tuple(shape)} does not match image_shape=({h}, {w}), which reads X "
                f"as rows of flattened {h} x {w} images: (n_samples, {h * w}). Pass image_shape=None "
                "for (H, W), (N, H, W), (H, W, C) or (N, H, W, C) images."
            )

    def _check_fitted_layout(self, shape, name):
        """Refuse a 2-D ``X`` whose rows have the length of the fitted images' pixel count.

        A 2-D array is one image; but one whose width is the ``H * W`` of the images seen in
        ``fit`` is almost surely a sample matrix of those images flattened, which would be
        halftoned as one tall image without a word.
        """
        fitted = getattr(self, "image_shape_", None)
        if fitted is None or len(shape) != 2 or self.image_shape is not None:
            return
        fh, fw = fitted
        if fh > 1 and fw > 1 and shape[1] == fh * fw and shape != (fh, fw):
            a, b = shape
            raise ValueError(
                f"{name}: X of shape {shape} would be halftoned as one {a} x {b} image, but this "
                f"estimator was fitted on images of {fh} x {fw} = {fh * fw} pixels, the length of its "
                f"rows. If each row is a flattened image, set image_shape=({fh}, {fw}) (the halftones "
                f"come back in the same flat layout); to halftone one {a} x {b} image, pass it as a "
                "batch of one, X[None]."
            )

    def _halftone(self, X, want_energy, random_state, what):
        first_spacing, spacing = self._spacings()
        name = f"{type(self).__name__}.{what}"
        X = check_image_array(X)
        images = self._images(X, name)
        lay = image_layout(images.shape, self._channel_axis())
        on_device = is_device_array(X)
        self._check_size(images.shape, X.dtype, self.device_, input_on_device=on_device, energy=want_energy)
        requested = self._requested_dtype()
        if lay.alpha and requested == np.bool_:
            raise ValueError(
                f"{name}: output_dtype=bool holds one bit per pixel, but the images have an alpha "
                f"channel ({lay.describe()}) that would be copied into it; use output_dtype='uint8' "
                "or drop the alpha channel."
            )
        check_image_values(X)
        rng = check_random_state(random_state)
        stk = to_stack(images, lay)
        single = stk.shape[0] == 1 or self.mode == "sync"
        bar = None  # silent: no Progress object at all (a small GPU call feels its cost)
        if self.verbose:
            bar = Progress(
                self,
                name,
                total=int(self.max_iter) if single else stk.shape[0],
                verbose=self.verbose,
                unit="sweeps" if single else "images",
                log_every=True,
            )
        try:
            out, info = run(
                stk,
                engine(self.device_),
                self.templates_,
                int(self.levels),
                self.mode,
                int(self.max_iter),
                self.init,
                self.boundary,
                rng,
                want_energy,
                first_spacing,
                output_dtype(X.dtype, requested),
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
            if self.mode == "sync" or np.any(info["cycle"]):
                summary["cycle"] = bool(np.any(info["cycle"]))
            bar.close(**summary)
        self._warn_convergence(info, name, lay)
        out = from_stack(out, images, lay)
        if out.shape != X.shape:  # rows of flattened images: back to the input's layout
            out = out.reshape(X.shape)
        return self._output(out, X), (info, lay)

    def _warn_convergence(self, info, name, lay):
        """One ConvergenceWarning per call when an image stopped at ``max_iter`` without a fixed
        point ('sync': nor an exact 2-cycle) or, in 'async' mode, fell into a cycle."""
        n = info["n_iter"].size
        stopped = int(np.sum(~info["converged"] & ~info["cycle"]))
        cycles = int(np.sum(info["cycle"])) if self.mode == "async" else 0
        if not stopped and not cycles:
            return
        noun = "image" if lay.axis is None else "channel"
        flips = info["flips"]
        if self.mode == "sync":
            text = (
                f"{name}: mode='sync' stopped at max_iter={self.max_iter} before a fixed point or an "
                f"exact 2-cycle in {stopped} of {n} {noun}{'s' if n != 1 else ''}: {int(flips[-1])} cells "
                f"changed in the last sweep and {int(info['back'][-1])} differ from two sweeps back (0 in "
                "a 2-cycle). Synchronous updates reach their 2-cycle only after a long transient (100-800 "
                "sweeps on 128^2-512^2 photos); raise max_iter to see it, or use mode='async'."
            )
        else:
            parts = []
            if stopped:
                last = int(flips[self.max_iter - 1]) if flips.size >= self.max_iter else 0
                parts.append(
                    f"{stopped} of {n} {noun}{'s' if n != 1 else ''} did not reach a fixed point within "
                    f"max_iter={self.max_iter} sweeps ({last} cells changed in the last sweep)"
                )
            if cycles:
                parts.append(
                    f"{cycles} of {n} {noun}{'s' if n != 1 else ''} fell into a cycle (a state repeated, "
                    "found between blocks of sweeps; the halftone is one state of the cycle)"
                )
            advice = (
                "Raise max_iter"
                if not cycles
                else "Asynchronous updates cycle only when the energy can rise: a custom template A "
                "with a negative centre (or a positive one with levels > 2); use a zero centre"
            )
            text = f"{name}: " + "; ".join(parts) + f". {advice}."
        # the caller's frame, above this method, _halftone, (_fit,) the method and its wrappers
        # (validates_params, _fit_context for the fits, scikit-learn's set_output for transforms)
        depth = {"fit": 7, "fit_transform": 8, "transform": 6}.get(name.rpartition(".")[2], 4)
        warnings.warn(text, ConvergenceWarning, stacklevel=depth)

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
            self.templates_["params"] = self._template_params()
            self._resolve_device()
            for attr in ("image_shape_", "n_features_in_", "feature_names_in_"):
                self.__dict__.pop(attr, None)  # fit reads X afresh, whatever it saw before
            out, (info, lay) = self._halftone(X, True, self.random_state, what)
        except BaseException:
            # a fit that fails (bad input, out of memory half-way, interrupted) leaves the
            # estimator unfitted: never the new templates beside the previous diagnostics
            for attr in [a for a in vars(self) if a.endswith("_") and not a.startswith("_")]:
                self.__dict__.pop(attr, None)
            raise
        self.image_shape_ = (lay.h, lay.w)
        names = feature_names_in(X) if self.image_shape is not None else None
        if self.image_shape is not None:  # rows of flattened images: H * W features
            self.n_features_in_ = lay.h * lay.w
        if names is not None:
            self.feature_names_in_ = names
        self.n_iter_per_image_ = np.asarray(info["n_iter"], dtype=np.int64)
        self.n_iter_ = int(self.n_iter_per_image_.max())
        self.converged_ = bool(np.all(info["converged"]))
        self.cycle_detected_ = bool(np.any(info["cycle"]))
        self.flips_ = np.asarray(info["flips"][: self.n_iter_], dtype=np.int64)
        self.back_flips_ = (
            np.asarray(info["back"][: self.n_iter_], dtype=np.int64) if "back" in info else None
        )
        scale = 2.0 * self.templates_["scale"] * (512.0 * (int(self.levels) - 1)) ** 2
        e2 = info["energy2"][: self.n_iter_]
        self.energy_ = e2.astype(np.float64) / scale
        return out

    @validates_params
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: None = None) -> DTCNNHalftoner:
        """Build the templates and halftone ``X`` once to record the diagnostics.

        Parameters
        ----------
        X : array-like of shape (H, W), (N, H, W), (H, W, C) or (N, H, W, C)
            Images: floats in [0, 1] or uint8 (read with ``channel_axis``). NumPy or
            CuPy (not Dask: see the class notes); a list of images of one size. With
            ``image_shape=(H, W)``: shape ``(n_samples, H * W)``, one flattened image
            per row.
        y : None
            Ignored.

        Returns
        -------
        self : DTCNNHalftoner

        Raises
        ------
        ValueError
            Invalid or ambiguous shapes, a shape that does not match ``image_shape``,
            a list of differently sized images, empty images, NaN/inf, values outside
            [0, 1], invalid parameters. TypeError for sparse, non-numeric or Dask
            input.
        InsufficientMemoryError
            When the images would not fit in memory (checked before any scan).
        MemoryError
            When memory runs out half-way all the same (other allocations took it);
            the message names the images, and the estimator is left unfitted.

        Warns
        -----
        ConvergenceWarning
            Once per call, when an image stopped at ``max_iter`` before a fixed point
            ('sync': nor an exact 2-cycle), or fell into a cycle in 'async' mode; the
            message names the estimator, the method, ``max_iter`` and how many images.
        """
        self._fit(X, "fit")
        return self

    @validates_params
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
            In ``output_dtype``; by default uint8 for uint8 input, else float (the
            input's float dtype) with values ``k / (levels - 1)``. A DataFrame when
            ``set_output`` asks for one (``image_shape`` only, see the class notes).
        """
        frame = check_frame_output(self, X, "fit_transform")
        out = self._fit(X, "fit_transform")
        return to_host(out) if frame else out

    def _dask_images(self, X):
        """Shape and dtype of one image's halftone, after refusing what Dask cannot do here."""
        name = f"{type(self).__name__}.transform"
        if self.image_shape is not None:  # rows of flattened images: whole rows in each block
            self._check_declared_layout(X.shape, name)
            if X.numblocks[1] != 1:
                raise ValueError(
                    f"{name}: the Dask array of flattened images is chunked along its columns (chunks "
                    f"{X.chunks}); every pixel of a halftone depends on the whole image, so keep each "
                    "row whole: X.rechunk({1: -1})."
                )
            return X.shape[1:], output_dtype(X.dtype, self._requested_dtype())
        self._check_fitted_layout(tuple(int(v) for v in X.shape), name)
        lay = image_layout(X.shape, self.channel_axis)
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
        return X.shape[1:], output_dtype(X.dtype, self._requested_dtype())

    @dask_rows(
        lambda est, X: (X.shape[1:], output_dtype(X.dtype, est._requested_dtype())),
        merge=lambda est: est.init != "random" and est.mode != "sync",  # these depend on the blocks
    )
    def _transform_dask(self, X):
        """``transform`` of one Dask block (the shared wrapper maps it over the blocks; small
        blocks merged first, except where the halftone depends on the blocks)."""
        return self.transform(X)

    @validates_params
    def transform(self, X: Any) -> Any:
        """Halftone images with the fitted templates (attributes are left unchanged).

        Parameters
        ----------
        X : array-like of shape (H, W), (N, H, W), (H, W, C) or (N, H, W, C)
            As for :meth:`fit` (any size; but a 2-D ``X`` whose width is the pixel
            count ``H * W`` of the fitted images is refused, see the class notes). Or
            a Dask array: a batch chunked along its batch axis only (each block is
            halftoned on a worker), or a single image in one block (see the class
            notes); rows of flattened images (``image_shape``) chunked along rows.

        Returns
        -------
        halftone : array of the same shape and array type as ``X``
            In ``output_dtype`` (as for :meth:`fit_transform`). A lazy Dask array for a
            Dask input, whose blocks have the array type of the input's blocks (or
            ``output_type``). A DataFrame when ``set_output`` asks for one
            (``image_shape`` only, see the class notes).

        Raises
        ------
        ValueError
            As for :meth:`fit`, and for parameters set to invalid values after it.

        Warns
        -----
        ConvergenceWarning
            As for :meth:`fit`, once per call.
        """
        check_is_fitted(self, "templates_")
        self._check_templates_current()
        frame = check_frame_output(self, X, "transform")
        if is_dask_collection(X):
            self._dask_images(X)
            return self._transform_dask(X)
        check_feature_names(self, X, "transform")
        out, _ = self._halftone(X, False, self.random_state, "transform")
        return to_host(out) if frame else out

    @validates_params
    def get_feature_names_out(self, input_features: ArrayLike | None = None) -> np.ndarray:
        """Names of the output columns, for ``image_shape=(H, W)``: one per pixel.

        The halftone of rows of flattened images maps pixel ``i`` to column ``i``, so
        the names are the input's: ``input_features``, else the column names of a
        DataFrame given to ``fit``, else ``x0 .. x{H*W-1}``. ``set_output`` names the
        columns of its DataFrames with them.

        Parameters
        ----------
        input_features : array-like of str or None, default=None
            Names of the ``H * W`` input columns; checked against those seen in ``fit``.

        Returns
        -------
        feature_names_out : ndarray of str objects
            ``H * W`` names.

        Raises
        ------
        ValueError
            Without ``image_shape``: the output is an image, whose pixels are not
            columns of a table.
        """
        check_is_fitted(self, "templates_")
        if self.image_shape is None:
            raise ValueError(
                f"{type(self).__name__}.get_feature_names_out: without image_shape the halftone is an "
                "image, not a table of features; pass image_shape=(H, W) to read X as rows of "
                "flattened images, whose pixels are then the output columns."
            )
        return flat_feature_names(self, input_features)
