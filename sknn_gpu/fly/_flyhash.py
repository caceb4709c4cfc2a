"""FlyHash: sparse binary random expansion followed by an exact winner-take-all.

The fruit-fly olfactory circuit (Dasgupta, Stevens & Navlakha, 2017) hashes an
input ``x`` in ``R^d`` by (1) projecting it onto ``m >> d`` units, each of which
sums ``s`` randomly chosen inputs, and (2) keeping the ``k`` most active units
(winner-take-all, WTA). This module gives that hash as a scikit-learn transformer:
parameters, validation, the projection (drawn on the host at ``fit``), the size
check and the output type. The hashing itself runs in one of two engines with the
same functions, picked once from ``device_`` by :func:`engine`:
:mod:`._flyhash_cpu` (NumPy/SciPy, the reference) and :mod:`._flyhash_cuda`
(our kernels in ``_kernels/flyhash.cu``).

Numerical contract (identical on both devices)
----------------------------------------------
* The input is cast to float32. Each unit's activation is the float32 sum of its
  ``s`` inputs, added one after the other in ascending feature order, starting
  from ``+0.0``. On the CPU this is exactly what SciPy's CSR x dense product
  computes (``csr_matvecs`` accumulates sequentially in the output dtype); the
  CUDA kernel performs the same additions in the same order with ``__fadd_rn``.
  float32 keeps the GPU kernel in single precision and halves the shared-memory
  footprint of an input row; the only loss is the initial rounding of float64
  input to float32 (relative 6e-8), which is deterministic.
* ``'exact'`` WTA keeps the ``k`` largest activations of each row; ties go to
  the lower unit index (``-0.0`` and ``+0.0`` are equal). Because both devices
  compute bit-identical activations and apply the same rule, CPU and GPU hashes
  are bit-identical.

Size: about 900 lines, one estimator: the transformer class (its public
methods and docstrings are most of it) with the drawing of its projection and the
size estimate that guards it, which only it uses; the hashing lives in the engines.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from .._backend import (
    abs_max,
    array_module,
    check_memory,
    is_cupy_sparse,
    is_device_array,
    to_host,
)
from .._dask import dask_rows, is_dask_collection
from .._progress import Progress
from .._sklearn_compat import Interval, RealNotInt, StrOptions, _fit_context, get_output_config
from .._typing import Array, ArrayLike
from ..base import DeviceMixin, keeps_model, reject_time_dtypes, validates_params
from . import _flyhash_cpu, _flyhash_cuda
from ._common import (
    HASH_PARAMS,
    check_dask_X,
    fitted_method,
    fitted_params,
    refuse_bools,
)
from ._wta import wta

__all__ = ["FlyHashTransformer", "wta", "engine", "flyhash_bytes", "check_footprint"]

_FLT_MAX = float(np.finfo(np.float32).max)
_FLT_TINY = float(np.finfo(np.float32).tiny)
#: Sets the rows of the projection drawn at once (``8 * _DRAW_BLOCK_BYTES // d``); the
#: random stream, hence the projection of a seed, depends on it: do not change it.
_DRAW_BLOCK_BYTES = 4 * 2**20
#: Bytes of the membership mask of one chunk of rows while drawing (fits a CPU's L2/L3).
_DRAW_CHUNK_BYTES = 4 * 2**20
#: Host bytes of a GPU run below which the host side is not checked (see check_footprint).
_HOST_CHECK_FLOOR = 64 * 2**20
#: Projections drawn again by unpickling, kept per process by their digest (the most recent
#: few): a Dask worker receives the same fitted transformer with every call and would
#: otherwise draw its projection again each time (~30 ms at m = 25,088, s = 39).
_REDRAWN = OrderedDict()
_REDRAWN_MAX = 4
_REDRAWN_LOCK = threading.Lock()
#: The parameters a fitted projection depends on: changing one after ``fit`` is refused
#: until the next ``fit`` (the others are read at every call).
MODEL_PARAMS = (*HASH_PARAMS, "random_state")
#: Numeric parameters that refuse a bool (``True`` would pass as 1).
_NUMBERS = (*HASH_PARAMS, "bisect_steps")


def engine(device):
    """The hashing engine of a resolved device: :mod:`._flyhash_cpu` or :mod:`._flyhash_cuda`."""
    return _flyhash_cuda if device == "cuda" else _flyhash_cpu


# --------------------------------------------------------------------------- #
# Projection                                                                    #
# --------------------------------------------------------------------------- #
def _draw_blocks(n_units, n_features, n_connections):
    """How many blocks of rows :func:`_draw_connections` draws (0 when every unit reads every feature)."""
    if n_connections >= n_features:
        return 0
    return -(-int(n_units) // max(1, 8 * _DRAW_BLOCK_BYTES // max(1, int(n_features))))


def _draw_connections(rng, n_units, n_features, n_connections, draw=None, progress=None):
    """(n_units, s) int32: each row ``s`` distinct features, sorted ascending.

    ``rng`` is a ``numpy.random.RandomState`` (the caller resolved
    ``random_state`` once). Uniform sampling without replacement per unit with
    Floyd's algorithm, vectorised over units: for ``j`` from ``d - s`` to ``d - 1``
    draw ``t`` uniform in ``[0, j]`` and take ``t``, or ``j`` when ``t`` was taken
    already. ``s`` draws per unit instead of ``d`` keys and a partition (FlyNN's fit
    on a FashionMNIST-sized hash spent ~220 ms drawing its projection that way).

    The draws come in blocks of rows, column after column, as
    ``rng.randint(0, j + 1, size=rows)`` (the random stream depends on
    ``_DRAW_BLOCK_BYTES`` only). ``draw(rng, rows, d, s)`` (the CUDA engine's
    :func:`~._flyhash_cuda.draw_block`) may make a block instead, the same draws
    from the same stream, leaving ``rng`` in the same state, and return its sorted
    picks; or return None: then the host draws the block and resolves Floyd's
    collisions (:func:`_resolve_on_host`). Either way the projection is the same.
    """
    out = np.empty((n_units, n_connections), dtype=np.int32)
    if n_connections >= n_features:
        out[:] = np.arange(n_features, dtype=np.int32)
        return out
    d, s = int(n_features), int(n_connections)
    block = max(1, 8 * _DRAW_BLOCK_BYTES // max(1, d))
    for start in range(0, n_units, block):
        n = min(n_units, start + block) - start
        picks = None if draw is None else draw(rng, n, d, s)
        if picks is None:
            draws = np.empty((s, n), dtype=np.int32)  # column i: unit draws for j = d - s + i
            for i, j in enumerate(range(d - s, d)):
                draws[i] = rng.randint(0, j + 1, size=n)
            picks = _resolve_on_host(draws, d)
        out[start : start + n] = picks
        if progress is not None:
            progress(n)
    return out


def _resolve_on_host(draws, d):
    """Floyd's collisions of one block of draws ``(s, n)``: the sorted ``(n, s)`` picks.

    Column ``i`` holds the draws for ``j = d - s + i``; a draw already taken by its
    unit becomes ``j``. Done in chunks of :data:`_DRAW_CHUNK_BYTES` of the ``(rows,
    d)`` membership mask, which stay in the CPU's cache (one mask over the whole
    block did not: its scattered reads and writes took most of the time). The
    chunking never changes a result. ``draws`` is updated in place.
    """
    s, n = draws.shape
    highs = range(d - s, d)
    chunk = max(1, min(n, _DRAW_CHUNK_BYTES // d))
    taken = np.empty(chunk * d, dtype=bool)  # flat (rows, d) membership mask, reused
    offsets = np.arange(chunk, dtype=np.int64) * d
    pos = np.empty(chunk, dtype=np.int64)
    for a in range(0, n, chunk):
        rows = min(n, a + chunk) - a
        base, p = offsets[:rows], pos[:rows]
        taken[: rows * d] = False
        for i, j in enumerate(highs):
            t = draws[i, a : a + rows]
            np.add(base, t, out=p)
            t[taken[p]] = j  # taken already: Floyd's step takes j (never taken yet)
            np.add(base, t, out=p)
            taken[p] = True
    picks = draws.T.copy()
    picks.sort(axis=1)
    return picks


def _components_matrix(connections, n_features):
    m, s = connections.shape
    indptr = np.arange(0, m * s + 1, s, dtype=np.int64 if m * s >= 2**31 else np.int32)
    data = np.ones(m * s, dtype=np.float32)
    mat = sp.csr_matrix((data, connections.ravel().copy(), indptr), shape=(m, n_features))
    mat.has_sorted_indices = True
    return mat


def _kernel_table(connections, n_features):
    """The GPU copy of the connections: rows padded to a multiple of 8 entries (16-byte
    vector loads in flyhash.cu); padding is never read as a connection."""
    m, s = connections.shape
    kidx = np.zeros((m, _index_row_width(s)), dtype=_index_dtype(n_features))
    kidx[:, :s] = connections
    return kidx


def _generator_state(rng):
    """The state of the ``RandomState`` ``rng`` as a plain dict (any bit generator)."""
    return rng.get_state(legacy=False)


def _generator(state):
    """A ``RandomState`` at ``state`` (from :func:`_generator_state`)."""
    bit_generator = getattr(np.random, state["bit_generator"])()
    bit_generator.state = state
    return np.random.RandomState(bit_generator)


def _projection_digest(components):
    """SHA-256 (hex) of a projection (SciPy or cupyx CSR): its shape, index dtype and
    connections, in order. Pickles and the count files of :mod:`._counts_io` both use it."""
    h = hashlib.sha256()
    h.update(repr((tuple(components.shape), components.indices.dtype.str)).encode())
    h.update(np.ascontiguousarray(to_host(components.indices)))
    return h.hexdigest()


def _index_row_width(n_connections):
    """Entries per row of the GPU connection table: s padded to a multiple of 8 (16-byte loads)."""
    return -(-n_connections // 8) * 8


def _index_dtype(n_features):
    return np.uint16 if n_features <= 65535 else np.int32


# --------------------------------------------------------------------------- #
# Size estimate: refuse oversize work before allocating                         #
# --------------------------------------------------------------------------- #
def flyhash_bytes(
    device,
    n_features,
    n_components,
    n_connections,
    k,
    *,
    projection=False,
    n_samples=0,
    output="winners",
    sparse=False,
):
    """Host and device bytes FlyHash allocates, from the sizes alone.

    The one size estimate of :class:`FlyHashTransformer` (and the hashing part of
    :class:`~sknn_gpu.fly.FlyNNClassifier`'s): drawing and storing the projection
    when ``projection`` is true, plus hashing ``n_samples`` rows into ``output`` with
    the engine of ``device``.

    Parameters
    ----------
    device : {'cpu', 'cuda'}
        Resolved device.
    n_features, n_components, n_connections, k : int
        ``d``, ``m``, ``s`` and the winners per row.
    projection : bool, default=False
        Count the projection: the connection table, the CSR ``components_``, the
        GPU connection table, the random draws per block (on a GPU: the raw
        generator outputs, the draws and the picks of a block).
    n_samples : int, default=0
        Rows to hash.
    output : {'sparse', 'dense', 'packed', 'winners'}, default='winners'
        What the rows are hashed into (``'winners'``: the (n, k) index table).
    sparse : bool, default=False
        The rows are a sparse matrix (the CPU engine then also builds a
        feature-to-units copy of the projection, once, for its sparse path).

    Returns
    -------
    host, device : int
        Bytes on the host and on the GPU (0 for ``device='cpu'``).
    """
    d, m, s = int(n_features), int(n_components), int(n_connections)
    host = gpu = 0
    if projection:
        wide = m * s >= 2**31  # int64 indptr, and SciPy then stores int64 indices
        table = m * _index_row_width(s) * np.dtype(_index_dtype(d)).itemsize
        block = min(m, max(1, 8 * _DRAW_BLOCK_BYTES // max(1, d)))
        # a block's draws, its sorted picks and one int64 column of randint; the chunk's mask
        keys = block * (s * 8 + 8) + min(block, max(1, _DRAW_CHUNK_BYTES // max(1, d))) * (d + 16)
        # the connections, their flat copy and the float32 ones of the CSR (whose indices are
        # that copy), and for a wide one SciPy's int64 copy of the indices beside them
        host += m * s * (4 + 4 + 4 + (8 if wide else 0)) + (m + 1) * (8 if wide else 4) + table + keys
        # on a GPU: the connection table, and what drawing one block takes there
        gpu += table + _flyhash_cuda.draw_block_bytes(block, s) if device == "cuda" else 0
    work_host, work_gpu = engine(device).work_bytes(n_samples, d, m, k, output, sparse=sparse)
    if sparse and n_samples and device == "cpu":  # components_ by columns: int64 units, indptr, CSC copy
        host += m * s * (8 + 4 + 4 + 4) + (d + 1) * 16
    return host + work_host, gpu + work_gpu


def check_footprint(footprint, device, what):
    """Raise InsufficientMemoryError unless ``footprint = (host, gpu)`` bytes fit now.

    On the CPU both parts come out of host memory. On CUDA the GPU part is checked
    on the device, and the host part (input batches and results copied back, the
    projection at fit) when it exceeds ``_HOST_CHECK_FLOOR``: reading the host's
    free memory costs ~20 us, a noticeable share of a small GPU batch.
    """
    host, gpu = footprint
    if device == "cuda":
        if host > _HOST_CHECK_FLOOR:
            check_memory(host, "cpu", what=f"{what} (host side)")
        check_memory(gpu, "cuda", what=what)
    else:
        check_memory(host + gpu, "cpu", what=what)


def _hash_columns(est, X):
    """Per-row shape and dtype of the hash (:func:`~sknn_gpu._dask.dask_rows`'s ``trailing``)."""
    m = est.n_components_
    if est.output == "packed":
        return ((m + 7) // 8,), np.uint8
    if est.output == "dense":
        return (m,), np.uint8
    return (m,), (np.float32 if is_device_array(X._meta) else bool)  # CSR blocks


def _is_sparse(X):
    return sp.issparse(X) or is_cupy_sparse(X)


def _csr_hash(indptr, indices, shape):
    """The CSR hash from its ``(indptr, indices)``, on the arrays' device.

    SciPy: boolean data, int32 ``indptr`` when it fits. cupyx: float32 data (cupyx
    sparse has no boolean type), int32 ``indptr``.
    """
    if is_device_array(indices):
        import cupyx.scipy.sparse as csp

        if indices.size >= 2**31:
            raise ValueError(
                f"the sparse hash has {indices.size} entries; cupyx CSR is limited to 2**31 - 1."
            )
        xp = array_module(indices)
        H = csp.csr_matrix(
            (xp.ones(indices.size, dtype=xp.float32), indices, indptr.astype(xp.int32)), shape=shape
        )
    else:
        if indptr[-1] < 2**31:
            indptr = indptr.astype(np.int32)
        H = sp.csr_matrix((np.ones(indices.size, dtype=bool), indices, indptr), shape=shape)
    try:
        H.has_sorted_indices = True
    except AttributeError:  # pragma: no cover - older cupyx
        pass
    return H


# --------------------------------------------------------------------------- #
# Estimator                                                                     #
# --------------------------------------------------------------------------- #
class FlyHashTransformer(DeviceMixin, TransformerMixin, BaseEstimator):
    """FlyHash: sparse binary random expansion + exact winner-take-all.

    Each of the ``m`` output units sums ``s`` randomly chosen input features
    (a sparse binary projection drawn at ``fit``); ``transform`` keeps the ``k``
    most active units of every sample. The hash is a locality-sensitive code:
    similar inputs share many winners (Dasgupta, Stevens & Navlakha, 2017).
    On a GPU one fused kernel computes the projection and selects the winners
    without ever writing the ``n x m`` activations to memory.

    Parameters
    ----------
    n_components : int, default=None
        Number of hash units ``m``. ``None``: ``int(expansion_factor * n_features)``.
    expansion_factor : float, default=20.0
        Units per input feature when ``n_components`` is None.
    n_connections : int, default=None
        Inputs summed by each unit, ``s`` (distinct, sampled without
        replacement). ``None``: ``max(2, int(connection_sparsity * n_features))``
        capped at ``n_features``.
    connection_sparsity : float, default=0.1
        Fraction of the inputs each unit reads when ``n_connections`` is None.
    k : int or float, default=32
        Winners per sample: an int is the number of winners, a float in (0, 1)
        a fraction of ``m`` (``max(1, int(k * m))``).
    output : {'sparse', 'dense', 'packed'}, default='sparse'
        ``'sparse'``: CSR matrix of shape (n_samples, m) with a True per winner
        (boolean on the CPU; float32 ones for CuPy input, as cupyx sparse has
        no boolean type). ``'dense'``: uint8 array (n_samples, m).
        ``'packed'``: uint8 array (n_samples, ceil(m / 8)) in ``np.packbits``
        layout (unit ``i`` is bit ``7 - i % 8`` of byte ``i // 8``), the layout
        FAISS binary indexes take.
    algorithm : {'exact', 'bisect'}, default='exact'
        ``'exact'``: exactly ``k`` winners per sample; ties go to the lower unit
        index on both devices. ``'bisect'``: the per-row threshold bisection of
        da Cunha et al. (``bisect_steps`` halvings of ``[min - eps, max + eps]``,
        winners are the units above the final midpoint); under ties (or an
        interval that does not shrink enough) a row can get a number of winners
        other than ``k``. Offered for fidelity with the paper.
    precision : {'exact', 'integer', 'fast'}, default='exact'
        Arithmetic of the activations (``algorithm='exact'`` only; see the user
        guide's "Choosing a precision").

        - ``'exact'``: the numerical contract below, bit-identical on CPU and GPU.
          On a GPU, input that is integer-valued (every entry a whole number of
          magnitude <= 2048, e.g. raw pixel values, whatever its dtype) is hashed
          on tensor cores, where its sums are exact too: the same bits, faster.
          Detecting it costs one read of the input on the device.
        - ``'integer'``: as ``'exact'``, for input that must be integer-valued;
          anything else raises ``ValueError`` (the CPU checks too).
        - ``'fast'``: on a GPU, every row is scaled by a power of two and
          rounded to float16 (11 significant bits), multiplied by the projection on
          tensor cores with float32 accumulation, and its exact top ``k`` taken
          from those activations. Not bit-identical to the CPU: rows whose
          ``k``-th largest activation is nearly tied can swap winners (recall of
          the exact winners >= 0.99 on digits and on uniform data; measured in
          docs/performance.md). On the CPU ``'fast'`` computes the exact hash.
    bisect_steps : int, default=64
        Halvings of the bisection (``algorithm='bisect'`` only). The paper uses 64
        and notes that up to 278 can be needed to separate every float32 value;
        more halvings leave fewer rows with other than ``k`` winners (see the
        reproduction of its error figure in docs/reproduction.md).
    random_state : int, RandomState instance or None, default=None
        Seeds the projection. The projection depends only on
        (n_features, the size parameters, random_state): the same on every device.
    device : {'auto', 'cpu', 'cuda'}, default='auto'
        Where ``transform`` runs; ``'auto'`` picks a usable GPU.
    output_type : {'input', 'numpy', 'cupy'} or None, default=None
        Array type of what this estimator returns: None follows
        ``sknn_gpu.config_context(output_type=...)`` (by default the input's type: NumPy
        in, NumPy out; CuPy in, CuPy out); ``'numpy'`` always returns host arrays;
        ``'cupy'`` always device arrays.
    verbose : int or bool, default=0
        Progress on the ``sknn_gpu.fly`` logger (:mod:`logging`, INFO): ``0`` is
        silent; ``1`` (or True) logs one line per ``fit`` (the projection's size and
        time) and per ``transform`` (rows, output, time), with a progress bar on a
        terminal; ``2`` also logs a line per block of rows hashed (on a GPU each
        block is then waited for, so that the line is true). A projection drawn in
        several blocks (a large ``n_components``, whose projection can take minutes
        and gigabytes: its size is checked against the free memory first) reports each
        block. Off a terminal (a log file, a batch job), ``1`` also logs how far a
        long call got, at most every 5 seconds.

    Attributes
    ----------
    components_ : scipy.sparse.csr_matrix of shape (m, d)
        The binary projection (float32 ones), ``m = n_components_`` rows of
        ``d = n_features_in_`` columns, ``n_connections_`` ones per row with
        sorted column indices.
    n_components_ : int
        Resolved number of units ``m``.
    n_connections_ : int
        Resolved inputs per unit ``s``.
    k_ : int
        Resolved number of winners.
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (d,)
        Names of features seen during fit, when X has string column names.
    device_ : {'cpu', 'cuda'}
        The device ``transform`` runs on.

    See Also
    --------
    wta : Exact row-wise winner-take-all on dense activations.
    sknn_gpu.fly.FlyNNClassifier : Classifier built on FlyHash codes.

    Notes
    -----
    Activations are float32 sums of the ``s`` inputs of a unit in ascending
    feature order, computed identically on CPU and GPU, so the two devices give
    bit-identical hashes. float64 input is rounded to float32 first.

    The defaults (20 units per feature, 10 % connections, 32 winners) are the hash
    of the FlyNN papers (Sinha & Ram): a general-purpose hash whose length follows
    the input and whose codes, what this transformer returns, stay short.
    :class:`~sknn_gpu.fly.FlyNNClassifier` defaults to other sizes (65,536 cells, or
    16,384 for wide inputs; 20 % of its encoded inputs up to 16 connections; 128 to 512
    winners), chosen by a cross-validated sweep of its classification accuracy on
    encoded inputs; it keeps counts of the codes, never the codes, and as a hash those
    sizes would return 4 to 16 times more winners per row at a length that ignores the input.
    The user guide's FlyHash and FlyNN pages give the details.

    The projection is drawn with ``n_components``, ``expansion_factor``,
    ``n_connections``, ``connection_sparsity``, ``k`` and ``random_state``: changing
    one of them after ``fit`` makes ``transform`` raise a ``ValueError`` that names it,
    until the next ``fit`` (or until it is set back). ``output``, ``algorithm``,
    ``precision``, ``bisect_steps``, ``verbose`` and ``output_type`` are read at every
    call. Every parameter is validated at every public method, and a ``fit`` that
    fails leaves the transformer as it was.

    A pickle holds the state of the random generator the projection was drawn from,
    not the projection (a few kilobytes instead of about ``10 * m * s`` bytes):
    loading draws it again, bit for bit, and checks it against a SHA-256 digest
    kept in the pickle.

    References
    ----------
    S. Dasgupta, C. F. Stevens, S. Navlakha. "A neural algorithm for a
    fundamental computing problem." Science 358 (2017).
    A. da Cunha, D. Rivet, E. Natale, A. Rossi. "Une implementation GPU de la
    methode de recherche approximative FlyHash." CAID 2023.

    Examples
    --------
    >>> import numpy as np
    >>> from sknn_gpu.fly import FlyHashTransformer
    >>> X = np.random.default_rng(0).random((5, 16))
    >>> fh = FlyHashTransformer(k=8, random_state=0, device="cpu")
    >>> H = fh.fit_transform(X)
    >>> H.shape, fh.n_components_, fh.n_connections_
    ((5, 320), 320, 2)
    >>> np.asarray(H.sum(axis=1)).ravel().tolist()
    [8, 8, 8, 8, 8]
    """

    _parameter_constraints = {
        "n_components": [Interval(Integral, 1, None, closed="left"), None],
        "expansion_factor": [Interval(Real, 0, None, closed="neither")],
        "n_connections": [Interval(Integral, 1, None, closed="left"), None],
        "connection_sparsity": [Interval(Real, 0, 1, closed="right")],
        "k": [Interval(Integral, 1, None, closed="left"), Interval(RealNotInt, 0, 1, closed="neither")],
        "output": [StrOptions({"sparse", "dense", "packed"})],
        "algorithm": [StrOptions({"exact", "bisect"})],
        "precision": [StrOptions({"exact", "integer", "fast"})],
        "bisect_steps": [Interval(Integral, 1, 4096, closed="both")],
        "random_state": ["random_state"],
        **DeviceMixin._device_constraints,
        **DeviceMixin._output_constraints,
        "verbose": [Interval(Integral, 0, None, closed="left"), "boolean"],
    }

    def __init__(
        self,
        n_components=None,
        *,
        expansion_factor=20.0,
        n_connections=None,
        connection_sparsity=0.1,
        k=32,
        output="sparse",
        algorithm="exact",
        precision="exact",
        bisect_steps=64,
        random_state=None,
        device="auto",
        output_type=None,
        verbose=0,
    ):
        self.n_components = n_components
        self.expansion_factor = expansion_factor
        self.n_connections = n_connections
        self.connection_sparsity = connection_sparsity
        self.k = k
        self.output = output
        self.algorithm = algorithm
        self.precision = precision
        self.bisect_steps = bisect_steps
        self.random_state = random_state
        self.device = device
        self.output_type = output_type
        self.verbose = verbose

    # ------------------------------------------------------------------ fit
    @validates_params
    @_fit_context(prefer_skip_nested_validation=True)
    @keeps_model
    def fit(self, X: ArrayLike, y: None = None) -> FlyHashTransformer:
        """Draw the sparse binary projection for ``X``'s number of features.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training data; only its number of features (and feature names) is used.
            A Dask array is not computed: its width is all ``fit`` reads (its values
            are checked blockwise by ``transform``).
        y : None
            Ignored.

        Returns
        -------
        self : FlyHashTransformer
            The fitted transformer (a fit that fails leaves the transformer as it was).
        """
        self._validate(X, reset=True)
        device = self._resolve_device()
        bar = Progress(self, f"{type(self).__name__}.fit", verbose=self.verbose, unit="units")
        self._fit_projection(self.n_features_in_, device, check_random_state(self.random_state))
        bar.n = self.n_components_  # one step: the projection, reported once
        bar.close(n_connections=self.n_connections_, k=self.k_)
        return self

    def _sizes(self, n_features):
        """Resolved ``(n_components, n_connections, k)`` for ``n_features`` inputs, checked."""
        d = n_features
        if self.n_components is not None:
            m = int(self.n_components)
        else:
            m = int(self.expansion_factor * d)
            if m < 1:
                raise ValueError(
                    f"expansion_factor={self.expansion_factor} with {d} features gives "
                    f"n_components={m}; it must give at least 1 unit."
                )
        if self.n_connections is not None:
            s = int(self.n_connections)
            if s > d:
                raise ValueError(
                    f"n_connections={s} exceeds n_features={d}: each unit reads distinct features."
                )
        else:
            s = min(d, max(2, int(self.connection_sparsity * d)))
        k = int(self.k) if isinstance(self.k, Integral) else max(1, int(self.k * m))
        if k > m:
            raise ValueError(f"k={k} winners exceeds n_components_={m} units; use k <= n_components.")
        return m, s, k

    def _fit_projection(self, n_features, device, rng, owner=None):
        """Draw the projection for ``n_features`` inputs on a resolved ``device``.

        The fit path without validation or resolution: ``device`` is already
        resolved ('cpu' or 'cuda') and ``rng`` is the ``RandomState`` the caller
        made once from its ``random_state``. :class:`~sknn_gpu.fly.FlyNNClassifier`
        fits its hasher through here, so one classifier fit resolves each once.
        The size of the projection is checked before anything is drawn. A projection
        drawn in several blocks reports them through the ``verbose`` of ``owner`` (the
        estimator being fitted; default this transformer).
        """
        m, s, k = self._sizes(n_features)
        check_footprint(
            flyhash_bytes(device, n_features, m, s, k, projection=True),
            device,
            what=(
                f"{type(self).__name__}: the projection of n_components={m} units x "
                f"n_connections={s} inputs ({n_features} features)"
            ),
        )
        self.device_ = device
        self.n_features_in_ = int(n_features)
        owner = self if owner is None else owner
        bar = None
        if _draw_blocks(m, n_features, s) > 1 and owner.verbose:
            bar = Progress(
                owner,
                f"{type(owner).__name__}.fit: projection",
                m,
                owner.verbose,
                unit="units",
                log_every=True,
            )
        step = None if bar is None else bar.update
        start = _generator_state(rng)  # what a pickle keeps instead of the projection
        conn = _draw_connections(rng, m, n_features, s, draw=engine(device).draw_block, progress=step)
        if bar is not None:
            bar.close(n_connections=s)
        self.components_ = _components_matrix(conn, n_features)
        self.n_components_ = m
        self.n_connections_ = s
        self.k_ = k
        self._kernel_index = _kernel_table(conn, n_features)
        self._projection_draw = start
        self._n_features_out = m
        self._fitted_params_ = fitted_params(self, MODEL_PARAMS)
        self.__dict__.pop("_device_cache", None)
        return self

    def _cross_check_params(self):
        """What ``_parameter_constraints`` cannot say (run by :func:`~sknn_gpu.base.validates_params`
        at every public method): no bool for a number, and ``precision`` other than 'exact'
        needs ``algorithm='exact'``."""
        refuse_bools(self, _NUMBERS)
        self._check_precision()

    # ------------------------------------------------------------ validate
    def _validate(self, X, reset):
        """Validated 2-D input: NumPy/SciPy through validate_data, CuPy checked here.

        A Dask array (``fit`` only) is checked from its metadata: nothing is computed.
        """
        if is_dask_collection(X):
            check_dask_X(self, X, "fit", reset=reset, rows=False)
            return X
        if is_device_array(X):
            return self._check_device_X(X, reset=reset, accept_sparse=True, cast_float=False)
        reject_time_dtypes(X)
        return validate_data(
            self,
            X,
            reset=reset,
            accept_sparse=["csr", "csc", "coo"],
            dtype=[np.float32, np.float64],
            ensure_all_finite=True,
        )

    def _check_float32_range(self, X, hint="rescale X"):
        """Refuse input the float32 activations cannot hold (``hint`` says what to do).

        Values whose sum over ``n_connections_`` inputs can overflow float32, and
        input whose largest magnitude is below float32's smallest normal number
        (it would hash as (nearly) all zeros: every row alike).
        """
        data = X.data if _is_sparse(X) else X
        if data.size == 0:
            return
        amax = abs_max(data)  # on the GPU from the bits: float32 subnormals are not flushed
        if amax * self.n_connections_ >= _FLT_MAX:
            raise ValueError(
                f"Input values up to {amax:.3g} can overflow the float32 sum of "
                f"{self.n_connections_} inputs; {hint}."
            )
        if 0.0 < amax < _FLT_TINY:
            raise ValueError(
                f"Input values are at most {amax:.3g} in magnitude, below float32's smallest normal "
                f"number {_FLT_TINY:.3g}: in FlyHash's float32 sums they lose their precision or "
                f"become 0, and every row would hash alike; {hint}."
            )

    def _check_precision(self, X=None, precision=None):
        """Refuse a ``precision`` (default: this transformer's) the settings or ``X`` cannot honour."""
        precision = precision or getattr(self, "precision", "exact")
        if precision != "exact" and self.algorithm != "exact":
            raise ValueError(
                f"precision={precision!r} applies to algorithm='exact' only (the bisection "
                f"compares float32 activations); use precision='exact' with algorithm={self.algorithm!r}."
            )
        if precision == "integer" and X is not None and not engine(self.device_).integer_valued(X):
            raise ValueError(
                f"precision='integer' needs integer-valued input: every entry a whole number of "
                f"magnitude at most {_flyhash_cpu.INTEGER_LIMIT}; X has other values. Use "
                "precision='exact' (the same hash for any input) or 'fast'."
            )

    def _check_work(self, n_samples, output, caller, sparse=False):
        """Refuse hashing ``n_samples`` rows into ``output`` when it cannot fit (before allocating)."""
        m = self.n_components_
        check_footprint(
            flyhash_bytes(
                self.device_,
                self.n_features_in_,
                m,
                self.n_connections_,
                self.k_,
                n_samples=n_samples,
                output=output,
                sparse=sparse,
            ),
            self.device_,
            what=f"{type(self).__name__}.{caller} of {n_samples} samples into {m} units (output={output!r})",
        )

    # ----------------------------------------------------------- transform
    @validates_params
    @fitted_method
    def transform(self, X: ArrayLike) -> Array:
        """Hash ``X``: the ``k_`` most active units of each sample.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Real input, dense or sparse; NumPy/SciPy or CuPy/cupyx; or a Dask array
            chunked by rows (hashed block by block on the workers, lazily).

        Returns
        -------
        H : sparse matrix, ndarray of uint8
            Shape ``(n_samples, n_components_)`` for ``output='sparse'`` or
            ``'dense'``; ``(n_samples, ceil(n_components_ / 8))`` for ``'packed'``.
            CuPy input gives CuPy output. Dask input gives a lazy Dask array of the
            same blocks (for ``'sparse'``, blocks of SciPy CSR — cupyx CSR on GPU
            workers — with empty row blocks left out; ``compute()`` stacks them).

        Raises
        ------
        ValueError
            With ``output='sparse'`` when ``set_output`` (or scikit-learn's global
            ``transform_output``) asks for a pandas or polars DataFrame, which cannot
            hold a sparse matrix (as scikit-learn refuses it), before any work:
            ``output='dense'`` gives one 0/1 ``uint8`` column per unit.
        """
        self._check_frame_output()
        if not is_dask_collection(X):
            return self._hash(X)
        check_dask_X(self, X, "transform", reset=False)
        if self.output != "sparse":
            return self._hash(X)
        import dask.array as da

        nonempty = [i for i, n in enumerate(X.chunks[0]) if n]
        H = self._hash(X.blocks[nonempty] if nonempty else X)
        xp = array_module(X._meta)
        meta = _csr_hash(xp.zeros(1, dtype=xp.int64), xp.zeros(0, dtype=xp.int32), (0, self.n_components_))
        return da.Array(H.dask, H.name, H.chunks, meta=meta)

    def _check_frame_output(self):
        """Refuse a DataFrame output of the sparse hash before hashing (scikit-learn would refuse
        it after), naming the output that gives one."""
        frame = get_output_config("transform", self)["dense"]
        if frame != "default" and self.output == "sparse":
            raise ValueError(
                f"{frame.capitalize()} output does not support sparse data. {type(self).__name__} with "
                "output='sparse' returns a sparse matrix: set output='dense' (one uint8 column of 0/1 "
                "per hash unit, named by get_feature_names_out) or output='packed' for a DataFrame, or "
                f"disable {frame.capitalize()} output via set_output(transform='default') to keep the "
                "sparse matrix."
            )

    @dask_rows(_hash_columns)
    def _hash(self, X):
        """:meth:`transform` of in-memory ``X`` (a Dask array: block by block)."""
        check_is_fitted(self)
        Xv = self._validate(X, reset=False)
        self._check_float32_range(Xv)
        self._check_precision(Xv)
        n = Xv.shape[0]
        self._check_work(n, self.output, "transform", sparse=_is_sparse(Xv))
        bar = Progress(
            self,
            f"{type(self).__name__}.transform",
            n,
            self.verbose,
            unit="rows",
            log_every=True,
        )
        progress = bar.update if self.verbose else None
        precision = getattr(self, "precision", "exact")
        hashed = engine(self.device_).transform(
            self, Xv, self.output, self.algorithm, progress=progress, precision=precision
        )
        bar.close(output=self.output, device=self.device_)
        out = self._output(hashed, X)
        if self.output == "sparse":
            return _csr_hash(*out, shape=(n, self.n_components_))
        return out

    @validates_params
    @fitted_method
    def get_feature_names_out(self, input_features: ArrayLike | None = None) -> np.ndarray:
        """Names of the output columns: one per hash unit (per byte for ``'packed'``).

        Parameters
        ----------
        input_features : array-like of str or None, default=None
            Only checked against the names seen in fit.

        Returns
        -------
        feature_names_out : ndarray of str objects
            ``flyhashtransformer0 ...`` (units) or ``flyhashtransformer_byte0 ...``.
        """
        check_is_fitted(self, "_n_features_out")
        from .._sklearn_compat import check_feature_names_in

        check_feature_names_in(self, input_features, generate_names=False)
        prefix = type(self).__name__.lower()
        if self.output == "packed":
            n = (self.n_components_ + 7) // 8
            return np.asarray([f"{prefix}_byte{i}" for i in range(n)], dtype=object)
        return np.asarray([f"{prefix}{i}" for i in range(self.n_components_)], dtype=object)

    # ------------------------------------------------------------ pickles
    def __getstate__(self):
        """The state without the projection: the generator state it was drawn from (a few
        kilobytes instead of about ``10 * m * s`` bytes) and its digest; ``__setstate__``
        draws it again, the same bits."""
        state = super().__getstate__()
        if state.get("_projection_draw") is not None and "components_" in state:
            state["_projection_sha256"] = _projection_digest(state.pop("components_"))
            state.pop("_kernel_index", None)
        return state

    def __setstate__(self, state):
        state = dict(state)
        digest = state.pop("_projection_sha256", None)
        super().__setstate__(state)
        if digest is not None:
            self._redraw_projection(digest)

    def _redraw_projection(self, digest):
        """Draw the fitted projection again from ``_projection_draw`` (on the host: the GPU's
        draw gives the same bits) and check it against ``digest``; a projection this process
        already drew (and checked) for the same digest is reused (:data:`_REDRAWN`)."""
        d, m, s = self.n_features_in_, self.n_components_, self.n_connections_
        key = (digest, d, m, s)
        with _REDRAWN_LOCK:
            hit = _REDRAWN.get(key)
            if hit is not None:
                _REDRAWN.move_to_end(key)
        if hit is None:  # drawn here for the first time in this process
            conn = _draw_connections(_generator(self._projection_draw), m, d, s)
            components = _components_matrix(conn, d)
            if _projection_digest(components) != digest:
                raise ValueError(
                    f"{type(self).__name__}: the projection drawn again from the pickled generator "
                    "state differs from the one that was pickled (a pickle from another sknn_gpu "
                    "version, or a damaged one); refit the model with this version."
                )
            hit = (components, _kernel_table(conn, d))
            with _REDRAWN_LOCK:
                _REDRAWN[key] = hit
                while len(_REDRAWN) > _REDRAWN_MAX:
                    _REDRAWN.popitem(last=False)
        # the same fitted arrays for every copy of this model in the process (read-only, as
        # fitted attributes are: a refit replaces them)
        self.components_, self._kernel_index = hit

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.transformer_tags.preserves_dtype = []
        return tags

    # ------------------------------------------------------------ winners
    def _winners(self, X, precision=None, integer_input=None):
        """int32 (n, k_) winner unit indices per row, ascending, on ``device_``.

        Private contract for FlyNNClassifier: ``X`` is already validated float
        input (dense NumPy/CuPy or scipy/cupyx sparse) and its size checked by the
        caller. Always the exact WTA (``algorithm='bisect'`` cannot promise ``k_``
        winners per row), with ``precision`` (default: this transformer's).
        ``integer_input=False``: the caller knows ``X`` is not integer-valued, so the GPU
        skips looking (see :func:`._flyhash_cuda.winners`).
        """
        precision = precision or getattr(self, "precision", "exact")
        if precision == "integer":
            self._check_precision(X, precision)
        return engine(self.device_).winners(self, X, precision=precision, integer_input=integer_input)
