"""GBNNMemory: the Gripon–Berrou clique associative memory (Yao, Gripon & Rabbat).

A message of ``C`` symbols over an alphabet of ``L`` values is one active neuron per
cluster of a network of ``n = C·L`` binary neurons; storing it adds the edges of the
clique joining its neurons. Retrieval completes erased symbols with one of three
rules: sum-of-sum (eqs. 3–5), sum-of-max (eqs. 6–7, computed BAIL-OUT-EARLY) and the
joint scheme (Algorithm 2), which reaches the same final state as sum-of-max.

This module is the estimator (parameters, validation, decisions). Both devices store
``W`` bit-packed (``uint32`` words) and run the same steps: ``_gbnn_cpu`` (NumPy, the
reference) and ``_gbnn_cuda`` (``_kernels/gbnn.cu``) have the same functions and give
bit-identical results, including the choice among several surviving neurons, which
uses one host-reproducible pseudo-random integer per (probe, cluster). Dask arrays go
through ``_gbnn_dask`` (a packed ``W`` per block OR-reduced for storing; blockwise
retrieval and score). Long loops report through :class:`sknn_gpu._progress.Progress`.
"""

from __future__ import annotations

import numbers
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from .._backend import array_module, check_memory, is_device_array, to_device, to_host
from .._dask import dask_rows, is_dask_collection
from .._progress import Progress
from .._sklearn_compat import Interval, StrOptions, _fit_context
from .._typing import Array, ArrayLike
from ..base import DeviceMixin, validates_params
from . import _gbnn_cuda, _gbnn_dask
from ._capacity import _HOST_CHECK_FLOOR, UNRELIABLE_RATE, _reliable_density, gbnn_bytes
from ._gbnn_cpu import _n_words
from ._gbnn_engine import engine

__all__ = ["GBNNMemory", "RetrievalResult"]

#: Largest ``cluster_size``: symbols are int32 on the GPU (and ``W_`` would need at least
#: ``L²/8`` bytes, 2**59 for this ``L``, long before).
MAX_CLUSTER_SIZE = 2**31 - 1
#: Messages of a storing call re-read with one symbol erased to measure that rate.
LOAD_SAMPLE = 256


# ----------------------------------------------------------------------------------
# Result object
# ----------------------------------------------------------------------------------
@dataclass
class RetrievalResult:
    """What :meth:`GBNNMemory.retrieve` returns (arrays follow the input's type).

    Attributes
    ----------
    messages : ndarray of shape (n_probes, n_clusters), int32
        Completed messages (the output of ``predict``). A cluster left without any
        active neuron is ``-1``.
    n_candidates : ndarray of shape (n_probes, n_clusters), int32
        Number of neurons still active per cluster in the rule's final state; a value
        above 1 means the symbol was picked among several equally supported ones (for
        sum-of-max with ``gamma > 0`` and joint, as one clique of that state).
    converged : ndarray of shape (n_probes,), bool
        True when the probe reached a fixed point within ``max_iter`` iterations.
    n_iter : ndarray of shape (n_probes,), int32
        Iterations used (for the joint rule the first sum-of-sum step counts as one).
    """

    messages: Any
    n_candidates: Any
    converged: Any
    n_iter: Any

    @property
    def ambiguous(self):
        """Per probe, True when some cluster ended with more than one candidate."""
        return (self.n_candidates > 1).any(axis=1)

    @property
    def converged_per_iter(self):
        """Accumulated number of converged probes after each iteration (the paper's Fig. 13b).

        Entry ``t - 1`` counts the probes that reached their fixed point within ``t``
        iterations; the length is ``n_iter.max()``. Derived from ``converged`` and
        ``n_iter`` (same array type; for Dask arrays a Dask array, whose length needs
        ``n_iter.max()`` computed first).
        """
        if is_dask_collection(self.n_iter):
            import dask.array as xp
        else:
            xp = array_module(self.n_iter)
        top = int(self.n_iter.max())
        counts = xp.bincount(xp.where(self.converged, self.n_iter, 0), minlength=top + 1)
        return xp.cumsum(counts[1:])


# ----------------------------------------------------------------------------------
# Estimator
# ----------------------------------------------------------------------------------
class GBNNMemory(DeviceMixin, BaseEstimator):
    """Gripon–Berrou clique associative memory (GBNN), on NumPy or CUDA.

    Stores messages of ``n_clusters`` symbols, each in ``[0, cluster_size)``, as
    cliques of a ``C``-partite binary network and completes partially erased
    messages (``-1`` marks an erased symbol) with one of the retrieval rules of
    Yao, Gripon & Rabbat, *A massively parallel associative memory based on sparse
    neural networks*.

    Parameters
    ----------
    n_clusters : int, default=None
        Number of symbols per message ``C``. Inferred from the first fit when None;
        when given, messages with another number of columns are refused.
    cluster_size : int, default=None
        Alphabet size ``L`` (neurons per cluster). Inferred as ``max(X) + 1`` from
        the first fit when None; set it to reserve room for symbols that only later
        ``partial_fit`` calls will contain. At most ``2**31 - 1``.
    rule : {'joint', 'sum-of-max', 'sum-of-sum'}, default='joint'
        Retrieval rule.

        - ``'sum-of-sum'`` (eqs. 3–5): erased clusters start all-off; every neuron
          scores ``gamma·self + signals`` and each cluster keeps its maxima. It may
          oscillate (section V-A); ``max_iter`` bounds it.
        - ``'sum-of-max'`` (eqs. 6–7, BAIL-OUT-EARLY): erased clusters start all-on;
          a neuron stays on only with a signal from every other cluster. Converges
          (Theorem 3) when ``gamma > 0``.
        - ``'joint'`` (Algorithm 2): one sum-of-sum step from the known clusters
          keeps the neurons connected to all of them, then BAIL-OUT-EARLY runs only
          on the candidate pools of unresolved erased clusters. It reaches the same
          final state as ``'sum-of-max'`` (for ``gamma > 0``), much faster.
    gamma : float, default=1.0
        Reinforcement (self-excitation) factor ``γ >= 0``. It changes sum-of-sum; any
        ``γ > 0`` acts like ``γ = 1`` for sum-of-max (Theorem 1) and the joint rule
        ignores it. With ``γ = 0``, sum-of-max follows eq. 7 literally, so a neuron
        that is off turns on when it receives ``C − 1`` signals.
    max_iter : int, default=20
        Maximum number of iterations per probe (the joint rule's first step counts
        as one). A retrieval that leaves probes unconverged at ``max_iter`` emits one
        ``ConvergenceWarning`` per call.
    ambiguous : {'guess', 'reject'}, default='guess'
        What a cluster whose winner is not unique after retrieval (more than one
        neuron left active, ``n_candidates > 1``) completes to. ``'guess'``: one of
        its candidates, picked as described under ``random_state`` (for sum-of-max
        and joint, one clique of the final state). ``'reject'``: ``-1``, as for a
        cluster with no candidate, so that an answer is only given where the memory
        resolved it; ``n_candidates`` still reports the candidates. The same
        integer result on both devices. For example
        ``GBNNMemory(ambiguous='reject').fit(messages).predict(probes)`` returns
        ``-1`` where several stored messages fit a probe equally well.
    random_state : int, RandomState instance or None, default=None
        Seeds the choice among several neurons left active in a cluster, or among
        several cliques (drawn in ``fit``). The choice is a deterministic function of
        this seed and the probe's content, so it is the same on both devices and for
        any order or batching of the probes.
    device : {'auto', 'cpu', 'cuda'}, default='auto'
        Where ``W`` lives and retrieval runs. ``'auto'`` picks CUDA when usable and a
        probe's state fits one block's shared memory (``C·ceil(L/32)`` up to about
        11,600 words on an H100), else the CPU.
    output_type : {'input', 'numpy', 'cupy'} or None, default=None
        Array type of what this estimator returns: None follows
        ``sknn_gpu.config_context(output_type=...)`` (by default the input's type: NumPy
        in, NumPy out; CuPy in, CuPy out); ``'numpy'`` always returns host arrays;
        ``'cupy'`` always device arrays. Applies to ``predict`` and to every array of a
        :class:`RetrievalResult`.
    verbose : int or bool, default=0
        Progress reports on the ``sknn_gpu.memory`` logger (:mod:`logging`, INFO):
        ``0`` is silent; ``1`` logs one summary line per ``fit``, ``partial_fit`` and
        retrieval (messages stored and the density; probes completed, converged and
        ambiguous) and shows a progress bar on a terminal; ``2`` also logs a line per
        batch of messages stored and per chunk of probes retrieved — a chunk, not a
        probe, also for serial decoding.

    Attributes
    ----------
    n_clusters_ : int
        Number of clusters ``C``.
    cluster_size_ : int
        Neurons per cluster ``L``.
    n_features_in_ : int
        Equal to ``n_clusters_``.
    n_messages_seen_ : int
        Messages stored so far (duplicates included).
    density_ : float
        Fraction of the ``C(C−1)L²/2`` possible inter-cluster edges that are present.
    W_ : ndarray of shape (C·L, C·ceil(L/32)), uint32
        Bit-packed symmetric adjacency matrix: word ``W_[c·L + l, c2·ceil(L/32) + q]``
        bit ``b`` is the edge to neuron ``32q + b`` of cluster ``c2``. A NumPy array,
        or a CuPy array when ``device_ == 'cuda'``.
    tie_seed_ : int
        64-bit seed of the tie-breaking hash, drawn from ``random_state``.
    device_ : str
        Resolved device, ``'cpu'`` or ``'cuda'``.

    See Also
    --------
    theoretical_density : Expected ``density_`` of random messages.
    erasure_error_rate : One-step error probability for ``e`` erasures.
    StoredMessagesCV : Cross-validation splits that probe stored messages.
    erased_recall_scorer : Scorer that erases symbols of stored messages.

    Notes
    -----
    ``W_`` needs ``(C·L)·C·ceil(L/32)·4`` bytes (8 MiB for ``C=16, L=512``). Every
    ``fit``, ``partial_fit`` and retrieval first computes its host and device bytes
    (:func:`gbnn_bytes`: ``W_`` and the per-batch work) and raises
    :class:`~sknn_gpu.InsufficientMemoryError`, naming the bytes needed and free,
    before allocating anything when they do not fit.

    **Load.** Retrieval is reliable only while the memory is lightly loaded. After
    every ``fit`` and ``partial_fit``, a ``UserWarning`` says so when a probe with a
    single erased symbol would be left ambiguous (several symbols fit) more than 10%
    of the time, by either of two measures: (1) ``density_`` above the density at
    which :func:`erasure_error_rate` for one erasure reaches 10% for random messages,
    ``(1 - 0.9^(1/(L-1)))^(1/(C-1))`` (0.25 for ``C=5, L=26``; 0.57 for the paper's
    ``C=16, L=512``); (2) the measured rate on up to 256 of the call's messages, each
    with one symbol erased (the same integer computation on both devices), measured by
    every ``fit`` and by a ``partial_fit`` once the memory holds twice the messages it
    held at the last measurement (a retrieval per streamed batch would cost more than
    storing it).
    One erasure is the easiest probe: more erasures fail sooner, so past this point
    completions are mostly guesses. The second measure catches correlated data
    (words, images), which loads a memory at a much lower density than random
    messages: ``load_digits`` stored as messages of 64 pixels has density 0.44, far
    below the random-message limit of 0.92 for ``C=64, L=17``, yet 60% of its
    single-pixel erasures are ambiguous. ``ambiguous='reject'`` returns ``-1`` for
    such clusters instead of a guess.

    **Dask.** ``fit`` and ``partial_fit`` accept a Dask array of messages chunked by
    rows: every block is stored into its own packed ``W`` on the workers and the
    partial memories are OR-ed up a tree, so only ``W`` (and, when ``cluster_size`` is
    None, one largest symbol per block) reaches the client; the result equals one
    in-memory fit bit for bit. ``predict`` and ``retrieve`` return lazy Dask arrays
    for Dask probes, and ``score`` computes blockwise and returns a float. Empty blocks
    are skipped; a Dask array split along the clusters is refused.

    **Scoring and cross-validation.** ``score(X, y)`` is the exact-recall rate: the
    fraction of probes ``X`` whose completion equals the message ``y`` they were made
    from. A memory recalls only what it stored, so the default cross-validation
    (``cross_val_score(mem, messages, messages)``: store the training fold, score the
    held-out fold) scores 0 by nature — a held-out message is not in the memory, and
    its completion is ``-1`` or another stored message. Score probes made from stored
    messages instead: :class:`StoredMessagesCV` stores every message in each split and
    probes a part of them, and :func:`erased_recall_scorer` erases symbols of the
    probed messages and scores their recall, so that
    ``GridSearchCV(GBNNMemory(), grid, scoring=erased_recall_scorer(2),
    cv=StoredMessagesCV(3))`` ranks parameters by how well they recall the stored set.

    Examples
    --------
    >>> import numpy as np
    >>> from sknn_gpu.memory import GBNNMemory
    >>> rng = np.random.default_rng(0)
    >>> messages = rng.integers(0, 64, size=(200, 8))
    >>> mem = GBNNMemory(rule="joint", device="cpu", random_state=0).fit(messages)
    >>> probes = messages.copy()
    >>> probes[:, :3] = -1                      # erase three symbols
    >>> bool((mem.predict(probes) == messages).all())
    True
    >>> mem.score(probes, messages)
    1.0
    >>> res = mem.retrieve(probes)
    >>> res.n_candidates.shape, bool(res.converged.all())
    ((200, 8), True)
    """

    _parameter_constraints: dict = {
        "n_clusters": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "cluster_size": [Interval(numbers.Integral, 1, MAX_CLUSTER_SIZE, closed="both"), None],
        "rule": [StrOptions({"sum-of-sum", "sum-of-max", "joint"})],
        "gamma": [Interval(numbers.Real, 0, None, closed="left")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "ambiguous": [StrOptions({"guess", "reject"})],
        "random_state": ["random_state"],
        **DeviceMixin._device_constraints,
        **DeviceMixin._output_constraints,
        "verbose": [Interval(numbers.Integral, 0, None, closed="left"), "boolean"],
    }

    def __init__(
        self,
        *,
        n_clusters=None,
        cluster_size=None,
        rule="joint",
        gamma=1.0,
        max_iter=20,
        ambiguous="guess",
        random_state=None,
        device="auto",
        output_type=None,
        verbose=0,
    ):
        self.n_clusters = n_clusters
        self.cluster_size = cluster_size
        self.rule = rule
        self.gamma = gamma
        self.max_iter = max_iter
        self.ambiguous = ambiguous
        self.random_state = random_state
        self.device = device
        self.output_type = output_type
        self.verbose = verbose

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.categorical = True
        tags.input_tags.positive_only = True  # stored symbols are >= 0 (probes may use -1)
        tags.target_tags.required = False
        return tags

    # ------------------------------------------------------------------ input
    def _check_symbols(self, X, *, reset, allow_erased, name="X"):
        """Validate an integer-valued (n, C) array of symbols; returns ``(X, max symbol)``.

        The array checks are the shared ones (``validate_data`` for host input,
        ``DeviceMixin._check_device_X`` on the device for CuPy input, which stays there);
        added here: integer values, the symbol range and the number of clusters. ``X`` is
        returned in its validated dtype; the engines cast it.
        """
        if is_device_array(X):
            X = self._check_device_X(X, reset=reset, cast_float=False)
        elif name == "X":
            X = validate_data(self, X, reset=reset, dtype="numeric", ensure_all_finite=True)
        else:
            X = check_array(X, dtype="numeric", ensure_all_finite=True, input_name=name)
        if X.dtype.kind not in "biuf":
            raise ValueError(f"{name} must hold integer symbols, got dtype {X.dtype}.")
        if X.dtype.kind == "f":
            frac = X != array_module(X).floor(X)
            if bool(frac.any()):
                bad = float(X[frac][0])
                raise ValueError(
                    f"GBNNMemory expects integer symbols (and -1 for erased ones in probes); {name} contains "
                    f"non-integer values such as {bad!r}."
                )
        top = X.max().item()
        mn, mx = int(X.min().item()), int(top)
        if mx >= MAX_CLUSTER_SIZE:
            raise ValueError(
                f"{name} has a symbol {top!r}, but symbols must be < {MAX_CLUSTER_SIZE} (2**31 - 1, the "
                "largest cluster_size)."
            )
        if mn < (-1 if allow_erased else 0):
            if allow_erased:
                raise ValueError(
                    f"{name} has a value {mn}, but symbols must be >= -1 (-1 marks an erased symbol)."
                )
            raise ValueError(f"Negative values in data passed as {name} ({mn}): stored symbols must be >= 0.")
        L = getattr(self, "cluster_size_", None)
        if L is not None and mx >= L:
            raise ValueError(
                f"{name} has a symbol {mx}, but cluster_size_ is {L} (symbols must be < {L}); set "
                "cluster_size when constructing the memory to reserve room for larger symbols."
            )
        C = getattr(self, "n_clusters_", None)
        if C is not None and X.shape[1] != C:
            raise ValueError(
                f"{name} has {X.shape[1]} clusters (columns), but the memory has n_clusters_={C}."
            )
        return X, mx

    def _check_size(self, n_rows, operation, C, L, device):
        """Raise InsufficientMemoryError, naming the bytes needed and free, unless
        :func:`gbnn_bytes` fits now on the host and (for CUDA) the GPU."""
        host, dev = gbnn_bytes(device, C, L, n_rows, operation)
        rows = "probes" if operation == "retrieve" else "messages"
        what = (
            f"GBNNMemory.{operation} of {n_rows} {rows} with n_clusters={C}, cluster_size={L} "
            f"(W_ is {C * L} neurons x {C * _n_words(L)} uint32 words)"
        )
        if device == "cuda":
            if host > _HOST_CHECK_FLOOR:
                check_memory(host, "cpu", what=f"{what} (host side)")
            check_memory(dev, "cuda", what=what)
        else:
            check_memory(host, "cpu", what=what)

    # ------------------------------------------------------------------ fitting
    @validates_params
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: None = None) -> GBNNMemory:
        """Store every message of ``X`` in a fresh memory.

        A fit that is refused (bad symbols, too large) or fails half-way (out of
        memory, interrupted) leaves the estimator as it was: the previous memory, or
        unfitted.

        Parameters
        ----------
        X : array-like or Dask array of shape (n_messages, n_clusters)
            Integer symbols in ``[0, cluster_size)`` (``cluster_size`` defaults to the
            largest symbol + 1). Integer-valued floats are accepted; other floats are
            refused. CuPy input is validated on the device. A Dask array chunked by
            rows is stored block by block on the workers (see Notes of the class).
        y : None
            Ignored.

        Returns
        -------
        self : GBNNMemory
        """
        # a fresh memory: the previous one's shape must not steer the new fit's checks, but a
        # fit that is refused or fails half-way puts the previous model back, whole
        previous = {a: v for a, v in vars(self).items() if a.endswith("_") and not a.startswith("_")}
        for attr in previous:
            del self.__dict__[attr]
        try:
            return self._store(X, first=True)
        except BaseException:
            for attr in [a for a in vars(self) if a.endswith("_") and not a.startswith("_")]:
                del self.__dict__[attr]
            self.__dict__.update(previous)
            raise

    @validates_params
    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X: ArrayLike, y: None = None) -> GBNNMemory:
        """Store more messages (the first call sets up the memory like ``fit``).

        Storing is order-independent and idempotent: the final ``W_`` depends only
        on the set of messages stored.

        Parameters
        ----------
        X : array-like or Dask array of shape (n_messages, n_clusters)
            More messages, symbols in ``[0, cluster_size_)``. A Dask array is stored
            on the workers and its packed memory OR-ed into ``W_``.
        y : None
            Ignored.

        Returns
        -------
        self : GBNNMemory
        """
        return self._store(X, first=not hasattr(self, "W_"))

    def _plan(self, C, mx, n_rows):
        """First storing call: check the shape parameters, resolve the device (with the
        wide-state fallback to the CPU) and check the size; returns ``L``. Allocates nothing."""
        if self.n_clusters is not None and C != self.n_clusters:
            raise ValueError(f"X has {C} clusters (columns), but n_clusters={self.n_clusters}.")
        L = int(self.cluster_size) if self.cluster_size is not None else mx + 1
        if mx is not None and mx >= L:
            raise ValueError(f"X has a symbol {mx}, but cluster_size={L} (symbols must be < {L}).")
        device = self._resolve_device()
        if device == "cuda" and not _gbnn_cuda.supports(C, L):
            if self.device == "cuda":
                self._check_size(n_rows, "fit", C, L, device)  # a size no device holds says so first
                need = max(_gbnn_cuda.shared_bytes(C, L, r) for r in ("sum-of-sum", "joint"))
                raise ValueError(
                    f"device='cuda' keeps a probe's state (n_clusters * ceil(cluster_size / 32) = "
                    f"{C * _n_words(L)} words for C={C}, L={L}: {need} bytes) in one block's shared "
                    "memory, more than this GPU allows; use device='cpu'."
                )
            device = self.device_ = "cpu"
        self._check_size(n_rows, "fit", C, L, device)
        return L

    def _init_memory(self, C, L, W=None):
        """Set the fitted state of a fresh memory (``W`` given, or an empty one)."""
        self.n_clusters_ = C
        self.cluster_size_ = L
        self.W_ = self._xp.zeros((C * L, C * _n_words(L)), dtype=np.uint32) if W is None else W
        rs = check_random_state(self.random_state)
        self.tie_seed_ = (int(rs.randint(0, 2**32, dtype=np.int64)) << 32) | int(
            rs.randint(0, 2**32, dtype=np.int64)
        )
        self.n_messages_seen_ = 0

    def _store(self, X, first):
        what = "fit" if first else "partial_fit"
        if is_dask_collection(X):
            return self._store_dask(X, first, what)
        X, mx = self._check_symbols(X, reset=first, allow_erased=False)
        if first:
            C = X.shape[1]
            self._init_memory(C, self._plan(C, mx, X.shape[0]))
        else:
            self._check_size(X.shape[0], "partial_fit", self.n_clusters_, self.cluster_size_, self.device_)
        bar = Progress(self, what, total=X.shape[0], verbose=self.verbose, unit="messages")
        try:
            engine(self.device_).store(
                self.W_, to_device(X, self.device_), self.cluster_size_, progress=self._progress_callback(bar)
            )
        except BaseException:
            # a fit that fails half-way (out of memory, interrupted) leaves no
            # half-stored memory behind; a partial_fit keeps W_ as far as it got:
            # storing is idempotent, so repeating the call completes it
            if first:
                fitted = [a for a in vars(self) if a.endswith("_") and not a.startswith("_")]
                for attr in fitted:
                    self.__dict__.pop(attr, None)
            raise
        self._count(X.shape[0], bar, what, X)
        return self

    def _store_dask(self, X, first, what):
        """``_store`` of a Dask array: a packed ``W`` per block on the workers, OR-reduced."""
        C = _gbnn_dask.check_columns(self, X, what, C=None if first else self.n_clusters_)
        if first:
            mx = _gbnn_dask.max_symbol(self, X) if self.cluster_size is None else None
            L = self._plan(C, mx, 0)
        else:
            L = self.cluster_size_
        bar = Progress(self, f"{what} (dask)", verbose=self.verbose, unit="blocks")
        W, n, n_blocks = _gbnn_dask.store(self, X, C, L, self.device_)
        bar.update(n_blocks)
        if first:
            self._init_memory(C, L, W)
            self.n_features_in_ = C
            self.__dict__.pop("feature_names_in_", None)
        else:
            self.W_ |= W
        self._count(n, bar, what)
        return self

    def _progress_callback(self, bar):
        """What the engines report to: None when silent, so that the GPU engine keeps one
        launch for all probes (with a callback it launches and waits chunk by chunk)."""
        return bar.update if self.verbose else None

    def _count(self, n, bar, what, X=None):
        """Add ``n`` stored messages, recount the density, close the progress report and
        warn when the memory is loaded past reliable retrieval (``X``: the call's messages)."""
        L, C = self.cluster_size_, self.n_clusters_
        edges = engine(self.device_).count_edges(self.W_, C, L)
        self.n_messages_seen_ += int(n)
        possible = C * (C - 1) * L * L
        self.density_ = float(edges / possible) if possible else 0.0
        bar.close(messages=int(n), density=self.density_)
        self._check_load(what, X, stacklevel=7 if X is not None else 8)  # the caller of fit

    def _single_erasure_ambiguity(self, X):
        """``(rate, k)``: the fraction of ``k`` of the stored messages ``X`` (a sample, drawn
        with a fixed seed) left ambiguous in their one erased cluster (also fixed-seeded)."""
        C, L = self.n_clusters_, self.cluster_size_
        k = min(X.shape[0], LOAD_SAMPLE, max(1, (1 << 22) // (C * _n_words(L))))  # <= 16 MiB of state
        rs = np.random.default_rng(0)
        rows = np.sort(rs.choice(X.shape[0], size=k, replace=False)) if k < X.shape[0] else np.arange(k)
        cols = rs.integers(0, C, size=k)
        xp = array_module(X)
        probes = X[xp.asarray(rows)].astype(np.int64)
        probes[xp.arange(k), xp.asarray(cols)] = -1
        _, cnts, _, _ = engine(self.device_).retrieve(
            self.W_, to_device(probes, self.device_), self.tie_seed_, "joint", 1.0, 2, L
        )
        xc = array_module(cnts)  # a scalar back from the device, not the counts
        return float((cnts[xc.arange(k), xc.asarray(cols)] > 1).mean()), k

    def _check_load(self, what, X=None, stacklevel=7):
        """One UserWarning when a single erasure is ambiguous more than UNRELIABLE_RATE of
        the time: predicted at ``density_`` for random messages, or measured on ``X``."""
        C, L = self.n_clusters_, self.cluster_size_
        limit = _reliable_density(C, L)
        if limit is None:
            return
        rate, k = None, 0
        # measured by fit, and by partial_fit once the memory has doubled since the last
        # measurement: a retrieval of up to LOAD_SAMPLE probes per streamed batch would cost
        # more than storing small batches (the density check below is free and runs always)
        due = what == "fit" or self.n_messages_seen_ >= 2 * getattr(self, "_load_measured_at", 0)
        if X is not None and X.shape[0] and due:
            try:
                rate, k = self._single_erasure_ambiguity(X)
                self._load_measured_at = self.n_messages_seen_
            except MemoryError:  # the memory is stored: a check that does not fit is skipped
                pass
        over = self.density_ > limit
        if not over and (rate is None or rate <= UNRELIABLE_RATE):
            return
        parts = []
        if rate is not None:
            parts.append(
                f"{rate:.0%} of {k} of the messages just stored, with one symbol erased, come back "
                "ambiguous (several symbols fit the erased cluster)"
            )
        relation = "exceeds" if over else "is below"
        parts.append(
            f"density_={self.density_:.3f} after {self.n_messages_seen_} messages {relation} "
            f"{limit:.3f}, the density at which random messages with one erased symbol are "
            f"ambiguous {UNRELIABLE_RATE:.0%} of the time (n_clusters={C}, cluster_size={L})"
        )
        warnings.warn(
            f"GBNNMemory.{what}: retrieval from this memory is unreliable: {'; '.join(parts)}. "
            "Completions of ambiguous clusters are guesses: pass ambiguous='reject' to get -1 for "
            "them, store fewer messages per memory, or use a larger cluster_size (correlated "
            "messages, such as words, load a memory faster than random ones).",
            UserWarning,
            stacklevel=stacklevel,
        )

    # ------------------------------------------------------------------ retrieval
    def _check_dask_probes(self, X):
        check_is_fitted(self, "W_")
        _gbnn_dask.check_columns(self, X, "predict")

    def _message_columns(self, X):
        self._check_dask_probes(X)
        return (self.n_clusters_,), np.int32

    def _packed_columns(self, X):
        self._check_dask_probes(X)
        return (2 * self.n_clusters_ + 2,), np.int32

    @validates_params
    def retrieve(self, X: ArrayLike, *, decoding: str = "parallel") -> RetrievalResult:
        """Complete the erased symbols of every probe and report how sure it is.

        Parameters
        ----------
        X : array-like or Dask array of shape (n_probes, n_clusters)
            Probes: integer symbols in ``[0, cluster_size_)``, ``-1`` for erased.
        decoding : {'parallel', 'serial'}, default='parallel'
            ``'parallel'`` decodes the probes together (the paper's eq. 11: a chunk of
            probes per NumPy step on the CPU, all probes in one kernel launch on the
            GPU); ``'serial'`` decodes one probe after the other (eq. 10: one NumPy pass
            or one launch per probe), the paper's other configuration of Fig. 11. The
            results are the same; only the time differs.

        Returns
        -------
        result : RetrievalResult
            ``messages`` (what :meth:`predict` returns), ``n_candidates`` (neurons
            left active per cluster), ``converged`` and ``n_iter`` per probe, and
            ``converged_per_iter`` (converged probes after each iteration). Arrays
            are NumPy for NumPy input and CuPy for CuPy input (or as ``output_type``
            says); for a Dask array of probes, lazy Dask arrays computed blockwise
            (the four fields share one task per block).
        """
        check_is_fitted(self, "W_")
        if decoding not in ("parallel", "serial"):
            raise ValueError(f"decoding must be 'parallel' or 'serial', got {decoding!r}.")
        if is_dask_collection(X):
            C = _gbnn_dask.check_columns(self, X, "retrieve", C=self.n_clusters_)
            P = self._retrieve_packed(X, decoding=decoding)
            return RetrievalResult(
                messages=P[:, :C],
                n_candidates=P[:, C : 2 * C],
                converged=P[:, 2 * C + 1] == 1,
                n_iter=P[:, 2 * C],
            )
        return self._retrieve(X, decoding, "retrieve")

    @dask_rows(_packed_columns)
    def _retrieve_packed(self, X, decoding="parallel"):
        """One block of a Dask retrieval: messages, n_candidates, n_iter, converged side by side (int32)."""
        res = self._retrieve(X, decoding, "retrieve")
        xp = array_module(res.messages)
        parts = (res.n_iter[:, None], res.converged[:, None].astype(xp.int32))
        return xp.concatenate((res.messages, res.n_candidates) + parts, axis=1)

    def _retrieve(self, X, decoding, what):
        Xc, _ = self._check_symbols(X, reset=False, allow_erased=True)
        self._check_size(Xc.shape[0], "retrieve", self.n_clusters_, self.cluster_size_, self.device_)
        bar = Progress(
            self, f"{what} ({self.rule}, {decoding})", total=Xc.shape[0], verbose=self.verbose, unit="probes"
        )
        out = engine(self.device_).retrieve(
            self.W_,
            to_device(Xc, self.device_),
            self.tie_seed_,
            self.rule,
            float(self.gamma),
            int(self.max_iter),
            self.cluster_size_,
            serial=decoding == "serial",
            progress=self._progress_callback(bar),
        )
        if self.verbose:
            msgs, cnts, _, convs = out
            bar.close(converged=int(convs.sum()), ambiguous=int((cnts > 1).any(axis=1).sum()))
        msgs, cnts, iters, convs = out
        if self.ambiguous == "reject":  # the same integers on both devices
            msgs = array_module(msgs).where(cnts > 1, np.int32(-1), msgs)
        if not bool(convs.all()):
            self._warn_unconverged(convs, what)
        msgs, cnts, iters, convs = self._output([msgs, cnts, iters, convs], X)
        return RetrievalResult(messages=msgs, n_candidates=cnts, converged=convs, n_iter=iters)

    def _warn_unconverged(self, convs, what):
        """One ConvergenceWarning for the probes a retrieval left unconverged at max_iter."""
        n = int(convs.shape[0])
        bad = n - int(convs.sum())
        why = (
            "sum-of-sum can oscillate (section V-A of the paper): rule='joint' or 'sum-of-max' converge"
            if self.rule == "sum-of-sum"
            else "raise max_iter"
        )
        warnings.warn(
            f"GBNNMemory.{what}: {bad} of {n} probes did not converge within max_iter="
            f"{self.max_iter} iterations (rule={self.rule!r}); their completions are the state "
            f"after the last iteration ({why}).",
            ConvergenceWarning,
            stacklevel=6 if what == "predict" else 5,  # the caller, above the method's wrappers
        )

    @validates_params
    @dask_rows(_message_columns)
    def predict(self, X: ArrayLike) -> Array:
        """Complete the erased symbols (``-1``) of every probe.

        Parameters
        ----------
        X : array-like or Dask array of shape (n_probes, n_clusters)
            Probes, as for :meth:`retrieve`.

        Returns
        -------
        messages : ndarray of shape (n_probes, n_clusters), int32
            One symbol per cluster; ``-1`` everywhere when no stored clique explains
            the probe. When several neurons remain active in some cluster, sum-of-max
            (``gamma > 0``) and joint return one clique among them (a stored message
            when one matches; see the user guide), sum-of-sum picks per cluster; the
            choice is seeded by ``random_state``. A lazy Dask array for Dask probes.
        """
        check_is_fitted(self, "W_")
        return self._retrieve(X, "parallel", "predict").messages

    @validates_params
    def score(self, X: ArrayLike, y: ArrayLike | None = None) -> float:
        """Exact-recall rate: the fraction of probes whose completion equals the true message.

        This measures recall of **stored** messages from partial ones: ``X`` holds
        probes (stored messages with symbols erased, ``-1``) and ``y`` the messages they
        came from. A message that was never stored is not recalled, so scoring held-out
        messages (the default of scikit-learn's cross-validation) gives 0 by nature; for
        ``GridSearchCV`` and ``cross_val_score`` use ``scoring=erased_recall_scorer(e)``
        with ``cv=StoredMessagesCV(...)`` (see the class Notes).

        Parameters
        ----------
        X : array-like or Dask array of shape (n_probes, n_clusters)
            Probes (``-1`` for erased symbols). A Dask array is scored blockwise on the
            workers (one count per block reaches the client).
        y : array-like or Dask array of shape (n_probes, n_clusters)
            The true messages. Required: None (what cross-validation passes when it is
            given no ``y``) raises a ``ValueError`` saying so.

        Returns
        -------
        score : float
        """
        check_is_fitted(self, "W_")
        if y is None:
            raise ValueError(
                "GBNNMemory.score needs y, the true messages the probes X were made from (it is the "
                "fraction of probes completed exactly). For cross-validation, pass "
                "scoring=sknn_gpu.memory.erased_recall_scorer(n_erased) with "
                "cv=sknn_gpu.memory.StoredMessagesCV(n_splits): it erases symbols of stored messages."
            )
        if is_dask_collection(X):
            return _gbnn_dask.score(self, X, y)
        pred = to_host(self._retrieve(X, "parallel", "score").messages)
        y_true, _ = self._check_symbols(to_host(y), reset=False, allow_erased=False, name="y")
        if y_true.shape != pred.shape:
            raise ValueError(f"y has shape {y_true.shape}, but the probes have shape {pred.shape}.")
        return float(np.mean(np.all(pred == y_true, axis=1)))
