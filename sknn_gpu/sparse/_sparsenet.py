"""SparseNetRegressor: regression with arbitrary-structured sparse networks.

The estimator decides (parameters, validation, size estimate, the training loop); the
sparse graph is evaluated and differentiated by the engine that ``device_`` picks once
(:func:`sknn_gpu.sparse._graph.engine`: ``_graph_cpu`` or ``_graph_cuda``, same
functions). The dense phase of ``'prune'`` is written against ``xp`` (NumPy or CuPy).

Size: one estimator class and its own decisions (its public docstring alone is about 150
lines); the graph, its engines, the argument checks and the training models already live
in ``_graph``, ``_graph_cpu``/``_graph_cuda``, ``_graph_build`` and ``_sparsenet_train``.
"""

from __future__ import annotations

import contextlib
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from .._backend import (
    SMALL_WORK_BYTES,
    array_module,
    check_memory,
    get_xp,
    is_device_array,
    to_device,
    to_host,
)
from .._dask import dask_rows, is_dask_collection
from .._progress import Progress
from .._sklearn_compat import HasMethods, Interval, StrOptions, _fit_context
from .._sklearn_compat import check_sample_weight as _check_sample_weight
from .._typing import Array, ArrayLike
from ..base import DeviceMixin, DeviceRegressorMixin, keeps_model, reject_time_dtypes, validates_params
from ._activations import (
    ACTIVATIONS,
    CODE_TO_NAME,
    TRAINABLE_ACTIVATIONS,
    TRAINABLE_CODES,
)
from ._graph import SparseGraph, engine
from ._graph_build import build_random_dag, graph_nbytes, n_candidate_pairs, random_dag_nbytes
from ._graph_cpu import BLOCK_BYTES, GATHER_BYTES
from ._sparsenet_train import SGD, Adam, DenseMasked, SparseModel

__all__ = ["SparseNetRegressor"]


def _prediction_shape(est, X):
    """One sample's prediction: a value, or ``n_outputs_`` of them (Dask ``predict``)."""
    check_is_fitted(est, "graph_")
    return ((), np.float64) if est._y_1d else ((est.n_outputs_,), np.float64)


#: Largest target magnitude accepted: squared errors of standardised or raw targets stay
#: finite in float64 (|y| <= 1e100 gives squares <= 4e200 per sample).
Y_MAX = 1e100

#: Node values per predict chunk (bytes): predictions run in row chunks of at most this.
PREDICT_CHUNK_BYTES = 256 << 20


# --------------------------------------------------------------------------- the estimator
def _plan_widths(g):
    """(n_nodes, n_edges, widest level) of a graph: the plan's widths once it is built."""
    return g.n_nodes, g.n_edges, g._plan["widest"] if g._plan is not None else g.n_nodes


class SparseNetRegressor(DeviceMixin, DeviceRegressorMixin, BaseEstimator):
    """Regression with an arbitrary-structured sparse feed-forward network.

    The network is a DAG (a :class:`~sknn_gpu.sparse.SparseGraph`) evaluated level
    by level: every node of a level depends only on earlier levels, so a level is
    one sparse product on the CPU and one thread per (node, sample) on the GPU
    (Gajurel et al., "GPU acceleration of sparse neural networks"). Training is
    backpropagation through the levels in reverse, with one gradient per edge.

    Parameters
    ----------
    topology : {'prune', 'random'} or SparseGraph, default='prune'
        ``'prune'``: train a dense layered MLP (``hidden_layer_sizes``), then remove
        the smallest-magnitude weights in ``n_prune_steps`` rounds (geometric schedule)
        down to ``density``, fine-tuning after each round; the result is exported as a
        sparse graph (hidden nodes left without a path to an output are dropped).
        ``'random'``: a random sparse DAG with skip connections over ``n_hidden``
        hidden nodes in random order, keeping a ``density`` fraction of all
        forward pairs. A :class:`SparseGraph`: train the weights and biases of that
        structure, starting from its stored values, with its own activations.
    hidden_layer_sizes : array-like of int, default=(100,)
        Dense layer widths for ``'prune'`` (each an integer >= 1).
    density : float in (0, 1], default=0.1
        Fraction of the candidate edges kept (exactly ``round(density * n)``).
    n_hidden : int, default=100
        Hidden nodes for ``'random'``.
    activation : {'relu', 'tanh', 'sigmoid', 'neat_sigmoid'}, default='relu'
        Hidden-node activation for generated topologies (outputs are linear).
        ``'sigmoid'`` is ``1 / (1 + exp(-slope * z))``; ``'neat_sigmoid'`` is
        neat-python's (slope 5, argument clamped to [-60, 60]).
    input_activation : {'identity', 'sigmoid'}, default='identity'
        Applied to every input feature before the network: ``'sigmoid'`` squashes the
        sensor inputs with ``1 / (1 + exp(-x))``, as the sparse-network paper does;
        ``'identity'`` feeds them as they are. The same in ``fit`` and ``predict``.
    slope : float, default=4.97
        Slope of ``'sigmoid'`` (the paper's value).
    solver : {'adam', 'sgd'}, default='adam'
        Optimiser (SGD with momentum 0.9).
    learning_rate_init : float, default=1e-3
        Step size.
    alpha : float, default=1e-4
        L2 penalty on the weights (not on biases), scaled by the batch size.
    batch_size : int or 'auto', default='auto'
        Minibatch size; ``'auto'`` is ``min(200, n_samples)``.
    max_iter : int, default=200
        Epochs (for ``'prune'``: of the dense phase).
    n_prune_steps : int, default=4
        Pruning rounds for ``'prune'``.
    fine_tune_iter : int or None, default=None
        Epochs after each pruning round; None means ``max(1, max_iter // 4)``.
    early_stopping : bool, default=False
        Hold out ``validation_fraction`` of the data and stop when its R² stops
        improving by ``tol`` for ``n_iter_no_change`` epochs (best weights kept).
    validation_fraction : float, default=0.1
        Held-out fraction for early stopping.
    n_iter_no_change : int, default=10
        Patience in epochs.
    tol : float, default=1e-4
        Minimum improvement of the loss (or validation score).
    warm_start : bool, default=False
        Continue from the fitted graph instead of building a new topology.
    verbose : int or bool, default=False
        Progress through the ``sknn_gpu.sparse`` logger (and a bar on a terminal when
        tqdm is installed): ``1`` (or True) logs one summary line per training phase,
        ``2`` also the loss of every epoch.
    random_state : int, RandomState instance or None, default=None
        Seeds the topology, initial weights, minibatch order and validation split
        (all drawn on the host, so CPU and GPU fits start alike).
    device : {'auto', 'cpu', 'cuda'}, default='auto'
        Where to train and predict.
    output_type : {'input', 'numpy', 'cupy'} or None, default=None
        Array type of what this estimator returns: None follows
        ``sknn_gpu.config_context(output_type=...)`` (by default the input's type: NumPy
        in, NumPy out; CuPy in, CuPy out); ``'numpy'`` always returns host arrays;
        ``'cupy'`` always device arrays.

    Attributes
    ----------
    graph_ : SparseGraph
        The trained network (host arrays).
    n_levels_ : int
        Levels of ``graph_`` (longest path from the inputs).
    n_edges_ : int
        Edges of ``graph_``.
    n_dense_edges_ : int or None
        Edges of the dense network before pruning (``'prune'`` only).
    loss_curve_ : list of float
        Training loss (half mean squared error on standardised targets plus the
        L2 term) per epoch: those of the dense phase, then those of the fine-tuning
        rounds for ``'prune'``.
    best_validation_score_ : float or None
        Best validation R² when ``early_stopping``.
    n_iter_ : int
        Epochs run by the last ``fit`` in the training that ``max_iter`` bounds (for
        ``'prune'``: the dense phase), at most ``max_iter``; 1 after ``partial_fit``.
    n_fine_tune_iter_ : int
        Epochs run by the last ``fit`` in the fine-tuning rounds of ``'prune'`` (0
        otherwise); ``len(loss_curve_)`` grows by ``n_iter_ + n_fine_tune_iter_``.
    n_outputs_ : int
        Number of targets.
    device_ : str
        Resolved device.
    n_features_in_ : int
        Number of features seen in ``fit``.

    Notes
    -----
    All computation is float64 on both devices; CPU and GPU agree to about 1e-12
    relative. Targets are standardised internally when every output node is linear.
    On the GPU the dense phase of ``'prune'`` uses CuPy matrix products (cuBLAS);
    everything on the sparse graph runs on our kernels (``_kernels/sparsenet.cu``).
    CuPy input stays on the GPU: it is validated there and ``predict`` returns CuPy.

    Refused up front, before anything large is allocated: ``hidden_layer_sizes``
    entries that are not integers >= 1 and targets larger than ``1e100`` in magnitude
    (ValueError naming the value); work whose estimated size (:meth:`_memory_estimate`:
    weights, optimizer state, one batch of activations, the data) does not fit the free
    host or device memory (``InsufficientMemoryError`` with the bytes needed and free).

    The dense phase of ``'prune'`` trains every weight of the layered network
    (``n_features * hidden_layer_sizes[0] + ...``) with one optimizer step over all of
    them per minibatch, however few the rows: 10^6 features and 100 hidden units are
    10^8 weights (0.8 GB; gradients, masks, the optimizer's moments and work arrays take
    several times that again) and about two seconds per epoch on one CPU core, so a fit
    of two rows runs for minutes. ``verbose=1`` shows its progress (a bar on a terminal, else a log
    line every few seconds); ``'random'``, which trains only ``density`` of the possible
    edges, or fewer features cost less.

    Examples
    --------
    >>> from sklearn.datasets import make_friedman1
    >>> from sknn_gpu.sparse import SparseNetRegressor
    >>> X, y = make_friedman1(n_samples=300, random_state=0)
    >>> reg = SparseNetRegressor(hidden_layer_sizes=(32,), density=0.3, max_iter=100,
    ...                          learning_rate_init=0.01, random_state=0, device="cpu").fit(X, y)
    >>> reg.n_edges_ == round(0.3 * (10 * 32 + 32 * 1))
    True
    >>> reg.predict(X[:2]).shape
    (2,)
    """

    _parameter_constraints = {
        "topology": [StrOptions({"prune", "random"}), HasMethods(["forward", "to_edges"])],
        "hidden_layer_sizes": ["array-like", Interval(Integral, 1, None, closed="left")],
        "density": [Interval(Real, 0, 1, closed="right")],
        "n_hidden": [Interval(Integral, 1, None, closed="left")],
        "activation": [StrOptions({"relu", "tanh", "sigmoid", "neat_sigmoid"})],
        "input_activation": [StrOptions({"identity", "sigmoid"})],
        "slope": [Interval(Real, 0, None, closed="neither")],
        "solver": [StrOptions({"adam", "sgd"})],
        "learning_rate_init": [Interval(Real, 0, None, closed="neither")],
        "alpha": [Interval(Real, 0, None, closed="left")],
        "batch_size": [StrOptions({"auto"}), Interval(Integral, 1, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "n_prune_steps": [Interval(Integral, 1, None, closed="left")],
        "fine_tune_iter": [Interval(Integral, 0, None, closed="left"), None],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "warm_start": ["boolean"],
        "verbose": ["verbose"],
        "random_state": ["random_state"],
        **DeviceMixin._device_constraints,
        **DeviceMixin._output_constraints,
    }

    def __init__(
        self,
        topology="prune",
        *,
        hidden_layer_sizes=(100,),
        density=0.1,
        n_hidden=100,
        activation="relu",
        input_activation="identity",
        slope=4.97,
        solver="adam",
        learning_rate_init=1e-3,
        alpha=1e-4,
        batch_size="auto",
        max_iter=200,
        n_prune_steps=4,
        fine_tune_iter=None,
        early_stopping=False,
        validation_fraction=0.1,
        n_iter_no_change=10,
        tol=1e-4,
        warm_start=False,
        verbose=False,
        random_state=None,
        device="auto",
        output_type=None,
    ):
        self.topology = topology
        self.hidden_layer_sizes = hidden_layer_sizes
        self.density = density
        self.n_hidden = n_hidden
        self.activation = activation
        self.input_activation = input_activation
        self.slope = slope
        self.solver = solver
        self.learning_rate_init = learning_rate_init
        self.alpha = alpha
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.n_prune_steps = n_prune_steps
        self.fine_tune_iter = fine_tune_iter
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.warm_start = warm_start
        self.verbose = verbose
        self.random_state = random_state
        self.device = device
        self.output_type = output_type

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        return tags

    # ------------------------------------------------------------------ public API
    @validates_params
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None) -> SparseNetRegressor:
        """Build the topology (unless ``warm_start``) and train it.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training inputs (NumPy or CuPy; CuPy input is validated and trained on the GPU).
            Training is in memory: a Dask array is refused (prediction runs on Dask).
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
            Targets, at most ``1e100`` in magnitude.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weights: each minibatch's loss is the weighted mean of its
            samples' squared errors (and the L2 term is divided by the batch's weight
            sum), and the target standardisation and the early-stopping R² are
            weighted. An integer weight trains as that many copies of the row (up to
            the shuffling of the minibatches); a minibatch whose weights are all zero
            is skipped. Routed as fit metadata (``set_fit_request``).

        Returns
        -------
        self : SparseNetRegressor

        Raises
        ------
        ValueError
            For bad input or parameters (e.g. ``hidden_layer_sizes`` entries that are not
            integers >= 1, targets larger than ``1e100`` in magnitude, negative weights).
        InsufficientMemoryError
            Before allocating, when the estimated host or device bytes do not fit.

        Notes
        -----
        A fit that fails part-way (out of memory on a shared GPU, an interrupt) leaves
        the estimator as it was before the call: unfitted, or with its previous model.
        """
        return self._fit(X, y, incremental=False, sample_weight=sample_weight)

    @validates_params
    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(
        self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None
    ) -> SparseNetRegressor:
        """One epoch over ``(X, y)`` on the current graph (built on the first call).

        On an unfitted ``'prune'`` estimator the first call trains the dense net for
        one epoch and prunes it to ``density`` in a single round.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training inputs (NumPy or CuPy).
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
            Targets.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weights, as in :meth:`fit`.

        Returns
        -------
        self : SparseNetRegressor
        """
        return self._fit(X, y, incremental=True, sample_weight=sample_weight)

    @validates_params
    @dask_rows(_prediction_shape)
    def predict(self, X: ArrayLike) -> Array:
        """Predict with the trained graph.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            NumPy or CuPy; the output follows the input's type. A Dask array chunked
            by rows is predicted block by block on the workers (lazily; each row's
            prediction is the in-memory one).

        Returns
        -------
        y : ndarray of shape (n_samples,) or (n_samples, n_outputs)
        """
        if type(X) is np.ndarray and "graph_" in self.__dict__ and self._pinned_rows(X):
            # latency path (one-row predictions): a few plain NumPy rows through pinned memory
            # (_host_mapped_predict); the kernels' flag is the finiteness check
            out = engine("cuda").forward_host(self.graph_, X)  # a new array: scaled in place
            np.multiply(out, self._y_scale, out=out)
            np.add(out, self._y_mean, out=out)
            return self._output(out[:, 0] if self._y_1d else out, X)
        check_is_fitted(self, "graph_")
        if is_device_array(X):
            Xv = self._check_device_X(X, reset=False).astype(np.float64, copy=False)
        else:
            Xv = self._unchanged_host_X(X)
            if Xv is None:
                reject_time_dtypes(X)
                Xv = validate_data(self, X, reset=False, dtype=np.float64)
        if self._host_mapped_predict(X, Xv):  # a few NumPy rows on the GPU: no copies, no allocation
            out = engine("cuda").forward_host(self.graph_, Xv)
        else:
            need = self._memory_estimate(Xv.shape[0], Xv.shape[1], self.n_outputs_, fit=False)
            self._check_memory(need, "SparseNetRegressor.predict")
            out = self._forward_chunks(self._squash_inputs(to_device(Xv, self.device_)))
            if not is_device_array(X):  # NumPy in, NumPy out: undo the scaling after the copy back
                out = to_host(out)  # (the same two float64 operations, no GPU launches for them)
        out = self._unscale(out)
        if self._y_1d:
            out = out[:, 0]
        return self._output(out, X)

    @validates_params
    def resident(self, idle_timeout: float = 0.01) -> contextlib.AbstractContextManager:
        """Keep the trained graph's forward kernel resident on the GPU while a block of
        one-row predictions runs (:meth:`SparseGraph.resident <sknn_gpu.sparse.SparseGraph.resident>`).

        Inside ``with reg.resident():``, :meth:`predict` of a few plain float64 NumPy
        rows (the one-row latency path) is answered by a kernel that stays on the GPU:
        no kernel launch, no CUDA API call per call, the same predictions. The kernel
        holds the SMs of one thread-block cluster (up to 16 of an H100's 132) until
        ``idle_timeout`` seconds pass without a call or the block closes. On the CPU
        (``device_ == 'cpu'``), and with ``input_activation='sigmoid'`` (whose rows take
        the general path), the block changes nothing.

        Parameters
        ----------
        idle_timeout : float, default=0.01
            Seconds without a call after which the kernel leaves (the next call
            relaunches it), in (0, 10].

        Returns
        -------
        context manager
            The trained graph's (:meth:`SparseGraph.resident
            <sknn_gpu.sparse.SparseGraph.resident>`, which names the errors it raises).

        Examples
        --------
        >>> import numpy as np
        >>> from sknn_gpu.sparse import SparseNetRegressor
        >>> rng = np.random.default_rng(0)
        >>> X = rng.random((200, 4)); y = X @ np.array([1.0, -2.0, 0.5, 3.0])
        >>> reg = SparseNetRegressor(hidden_layer_sizes=(16,), max_iter=1000, random_state=0).fit(X, y)
        >>> with reg.resident():
        ...     preds = [reg.predict(X[i : i + 1]) for i in range(3)]
        >>> bool(np.allclose(np.concatenate(preds), reg.predict(X[:3])))
        True
        """
        check_is_fitted(self, "graph_")
        return self.graph_.resident(idle_timeout, device=self.device_)

    @validates_params
    def prune(self, amount: float) -> SparseNetRegressor:
        """Remove the ``round(amount * n_edges_)`` smallest-magnitude edges of the fitted graph.

        Parameters
        ----------
        amount : float in [0, 1)
            Fraction of the current edges to remove.

        Returns
        -------
        self : SparseNetRegressor
        """
        check_is_fitted(self, "graph_")
        if not isinstance(amount, Real) or not 0.0 <= amount < 1.0:
            raise ValueError(f"amount must be a float in [0, 1), got {amount!r}.")
        g = self.graph_
        n_remove = int(round(amount * g.n_edges))
        order = np.argsort(np.abs(g.weights), kind="stable")
        keep = np.ones(g.n_edges, bool)
        keep[order[:n_remove]] = False
        self._set_graph(g.subgraph(keep))
        return self

    # ------------------------------------------------------------------ size estimate
    def _memory_estimate(self, n_samples, n_features, n_outputs, *, fit=True, first=True):
        """Host and device bytes that ``fit``/``partial_fit`` (``fit=True``) or ``predict`` need.

        Computed from the parameters and the data shape before anything is allocated:
        the data and its float64 copies; the model (weights, gradients, optimizer state
        and the optimizer's temporaries, the masks of a dense ``'prune'`` phase, the
        device copy of the level plan); the node values of one minibatch (of one
        prediction chunk) with their gradients, plus the CPU engine's per-level
        temporaries; on the host, the topology's construction (the random DAG's draw,
        pruning and export). An upper estimate: tests compare it with measured peaks.

        Parameters
        ----------
        n_samples, n_features, n_outputs : int
            Shape of the data.
        fit : bool, default=True
            Training (True) or prediction (False).
        first : bool, default=True
            Whether ``fit`` builds a new topology (False: it trains ``graph_``).

        Returns
        -------
        dict
            ``{'host': bytes, 'device': bytes}``; on ``device_='cpu'`` both are host memory.
        """
        cpu = self.device_ == "cpu"
        data = 8 * n_samples * (n_features + n_outputs)
        if getattr(self, "input_activation", "identity") != "identity":
            data += 8 * n_samples * n_features  # the squashed copy of X

        def sparse_batch(n_nodes, n_edges, widest, batch, backward):
            # V (+ G and D), the CPU engine's per-level temporaries, and in training either
            # a dense block's weights and weight gradient or a sparse block's gather chunk
            values = 8 * n_nodes * batch * (3 if backward else 1)
            block = 2 * min(BLOCK_BYTES, 8 * widest * n_nodes)
            work = max(block, min(GATHER_BYTES, 16 * n_edges * batch)) if backward else 0
            return values + (8 * 4 * widest * batch + work if cpu else 0)

        if not fit:  # X on the device and the predictions, node values of one chunk
            # the widest level is kept with the graph's plan (a one-row predict felt its ~20 us)
            n_nodes, n_edges, widest = _plan_widths(self.graph_)
            chunk = min(n_samples, max(1, PREDICT_CHUNK_BYTES // (8 * max(n_nodes, 1))))
            device = (
                2 * data + sparse_batch(n_nodes, n_edges, widest, chunk, False) + 64 * (n_edges + n_nodes)
            )
            return {"host": data, "device": device}
        bs = min(200, n_samples) if self.batch_size == "auto" else min(int(self.batch_size), n_samples)
        n_val = int(round(self.validation_fraction * n_samples)) + 1 if self.early_stopping else 0
        per_param = 3 + (2 if self.solver == "adam" else 1) + 2  # value, gradient, L2 term, state, temps
        host, device = 2 * data, 2 * data
        topo = self.topology if first else None
        if isinstance(topo, str) and topo == "prune":
            sizes = [n_features, *self._hidden_sizes(), n_outputs]
            n_w = sum(a * b for a, b in zip(sizes[:-1], sizes[1:]))
            n_p = n_w + sum(sizes[1:])
            device += 8 * (per_param * n_p + n_w) + 8 * sum(sizes) * (4 * bs + n_val)  # + masks, acts
            # initial draw, pruning (magnitudes, order, host copies) and export; no sparse training
            host += 8 * n_p + 33 * n_w + graph_nbytes(sum(sizes), int(round(float(self.density) * n_w)))
            return {"host": host, "device": device}
        if isinstance(topo, str):  # 'random'
            n_h = int(self.n_hidden)
            host += random_dag_nbytes(n_features, n_outputs, n_h, float(self.density))
            n_pairs = n_candidate_pairs(n_features, n_outputs, n_h)
            n_nodes, n_edges = n_features + n_outputs + n_h, max(1, int(round(float(self.density) * n_pairs)))
            widest = n_nodes
        else:  # a given SparseGraph (copied) or the fitted one
            n_nodes, n_edges, widest = _plan_widths(self.graph_ if topo is None else topo)
            host += graph_nbytes(n_nodes, n_edges)
        # the sparse model: parameters with optimizer state and the device plan, one batch
        device += 8 * per_param * (n_edges + n_nodes) + 64 * (n_edges + n_nodes)
        device += sparse_batch(n_nodes, n_edges, widest, bs, True) + sparse_batch(
            n_nodes, n_edges, widest, n_val, False
        )
        return {"host": host, "device": device}

    def _check_memory(self, need, what):
        """Refuse (InsufficientMemoryError, bytes needed and free) before allocating ``need``.

        Work under ``SMALL_WORK_BYTES`` per device is not checked: it cannot be oversize,
        and the free-memory query (~20 us on the host) would dominate small predictions.
        """
        parts = [("cpu", need["host"], f"{what} (host part)"), ("cuda", need["device"], what)]
        if self.device_ == "cpu":
            parts = [("cpu", need["host"] + need["device"], what)]
        for device, n_bytes, label in parts:
            label = f"{label} (weights, optimizer state, activations per batch)"
            check_memory(n_bytes, device, label, floor=SMALL_WORK_BYTES)

    # ------------------------------------------------------------------ internals
    def _set_graph(self, graph):
        self.graph_ = graph
        self.n_levels_ = graph.n_levels
        self.n_edges_ = graph.n_edges

    def _unscale(self, out):
        """``out * scale + mean``: the targets' standardisation undone (two operations, as on
        the host). On the GPU the device copies of scale and mean come from
        :meth:`_device_copy` (cached until refit), so a small prediction pays no
        host-to-device copies for them."""
        if array_module(out) is np:
            return out * self._y_scale + self._y_mean
        return out * self._device_copy("_y_scale") + self._device_copy("_y_mean")

    def _pinned_rows(self, X):
        """Whether the NumPy array ``X`` goes to ``forward_host`` as it is: the checks
        ``validate_data`` would make, but finiteness (:meth:`_host_mapped_predict`'s
        conditions include 2-D float64 of the fitted width; at least one row, no feature
        names). A non-finite value then raises ValueError from the kernels' flag."""
        return self._host_mapped_predict(X, X) and X.shape[0] >= 1 and not hasattr(self, "feature_names_in_")

    def _host_mapped_predict(self, X, Xv):
        """Whether ``predict`` evaluates the validated NumPy rows ``Xv`` through pinned host
        memory (``_graph_cuda.forward_host``): on the GPU, for a small batch, with the
        identity input activation (a squashed input would be computed on the host, not
        with the device's ``tanh`` that larger batches use, and could differ in the last bit)."""
        return (
            self.device_ == "cuda"
            and (type(X) is np.ndarray or not is_device_array(X))
            and getattr(self, "input_activation", "identity") == "identity"
            and engine("cuda").fits_host_mapped(self.graph_, Xv)
        )

    def _squash_inputs(self, X):
        """``X`` after ``input_activation`` (a new array for 'sigmoid'; ``X`` itself otherwise)."""
        if getattr(self, "input_activation", "identity") == "identity":
            return X
        xp = array_module(X)
        return 0.5 * (1.0 + xp.tanh(0.5 * X))  # 1 / (1 + exp(-x)) without overflow

    def _cross_check_params(self):
        """What ``_parameter_constraints`` cannot say (run by :func:`~sknn_gpu.base.validates_params`
        at every public method): each entry of ``hidden_layer_sizes`` is an integer >= 1."""
        self._hidden_sizes()

    def _hidden_sizes(self):
        """``hidden_layer_sizes`` as a list of ints; a clear ValueError for anything else."""
        h = self.hidden_layer_sizes
        sizes = list(h) if np.iterable(h) and not isinstance(h, str) else [h]
        for s in sizes:
            if isinstance(s, (bool, np.bool_)) or not isinstance(s, Integral) or s < 1:
                raise ValueError(
                    f"hidden_layer_sizes must hold integers >= 1 (layer widths), got {h!r}: {s!r} is not one."
                )
        return [int(s) for s in sizes]

    def _forward_chunks(self, X):
        """Predictions of the standardised model for ``X`` (on ``device_``), in row chunks."""
        g = self.graph_
        n_slots = g.plan["n_in"] + g.plan["nodes"].size
        chunk = max(1, PREDICT_CHUNK_BYTES // (8 * max(n_slots, 1)))
        eng = engine(self.device_)
        outs = [eng.forward(g, X[s : s + chunk]) for s in range(0, X.shape[0], chunk)]
        return outs[0] if len(outs) == 1 else array_module(X).concatenate(outs, axis=0)

    def _check_graph(self, g, n_features, n_outputs):
        if g.n_inputs != n_features:
            raise ValueError(f"topology has {g.n_inputs} input nodes but X has {n_features} features.")
        if g.n_outputs != n_outputs:
            raise ValueError(f"topology has {g.n_outputs} output nodes but y has {n_outputs} targets.")
        used = g.activations[g.plan["nodes"]]
        bad = np.setdiff1d(np.unique(used), TRAINABLE_CODES)
        if bad.size:
            names = [CODE_TO_NAME[int(c)] for c in bad]
            raise ValueError(
                f"topology uses activation(s) {names} that cannot be trained; trainable: "
                f"{', '.join(TRAINABLE_ACTIVATIONS)}."
            )

    def _validate_xy(self, X, y, reset):
        """Validated float64 ``(X, y)``: CuPy ``X`` on the GPU (no host copy), else on the host."""
        reject_time_dtypes(y, "y")
        if not is_device_array(X):
            reject_time_dtypes(X)
            y = to_host(y) if is_device_array(y) else y
            return validate_data(self, X, y, reset=reset, multi_output=True, y_numeric=True, dtype=np.float64)
        X = self._check_device_X(X, reset=reset).astype(np.float64, copy=False)
        xp = array_module(X)
        y = to_device(y, "cuda")
        if y.dtype.kind not in "biuf":
            raise ValueError(f"y must be numeric, got dtype {y.dtype}.")
        if y.ndim not in (1, 2) or (y.ndim == 2 and y.shape[1] < 1):
            raise ValueError(f"y must have shape (n_samples,) or (n_samples, n_outputs), got {y.shape}.")
        if y.shape[0] != X.shape[0]:
            raise ValueError(
                f"Found input variables with inconsistent numbers of samples: [{X.shape[0]}, {y.shape[0]}]."
            )
        y = y.astype(xp.float64, copy=False)
        if not bool(xp.isfinite(y).all()):
            raise ValueError("Input y contains NaN or infinity.")
        return X, y

    @staticmethod
    def _check_target_magnitude(y2):
        """Targets must be at most ``Y_MAX`` in magnitude (their squares must stay finite)."""
        big = float(array_module(y2).abs(y2).max()) if y2.size else 0.0
        if big > Y_MAX:
            raise ValueError(
                f"y holds a value of magnitude {big:.3g}; SparseNetRegressor accepts targets up to "
                f"{Y_MAX:g} in magnitude (squared errors must stay finite in float64). Rescale y "
                "(for example divide it by its largest magnitude) and scale the predictions back."
            )

    def _fit(self, X, y, incremental, sample_weight=None):
        if any(is_dask_collection(a) for a in (X, y, sample_weight)):
            raise TypeError(
                "SparseNetRegressor trains in memory: X, y and sample_weight must be NumPy or CuPy, "
                "not Dask arrays (predict and score take Dask arrays; fit on a sample, or on "
                "X.compute())."
            )
        return self._fit_checked(X, y, incremental, sample_weight)

    @keeps_model  # a fit that fails part-way (out of memory, interrupted) leaves no half-trained model
    def _fit_checked(self, X, y, incremental, sample_weight):
        fitted = hasattr(self, "graph_")
        first = not fitted or (not incremental and not self.warm_start)
        hidden = self._hidden_sizes()
        X, y = self._validate_xy(X, y, reset=first)
        X = self._squash_inputs(X)
        if sample_weight is not None:  # scikit-learn's checks (non-negative, finite, length), on the host
            if is_device_array(sample_weight):
                sample_weight = to_host(sample_weight)
            sample_weight = _check_sample_weight(
                sample_weight, np.empty((X.shape[0], 0)), dtype=np.float64, ensure_non_negative=True
            )
        y2 = y.reshape(-1, 1) if y.ndim == 1 else y
        if not first and y2.shape[1] != self.n_outputs_:
            raise ValueError(f"y has {y2.shape[1]} targets but the model was fitted with {self.n_outputs_}.")
        self._check_target_magnitude(y2)
        rng = check_random_state(self.random_state)
        device = self._resolve_device() if first else self.device_
        need = self._memory_estimate(X.shape[0], X.shape[1], y2.shape[1], first=first)
        self._check_memory(
            need, "SparseNetRegressor.partial_fit" if incremental else "SparseNetRegressor.fit"
        )
        if device == "cpu":  # CuPy input trained on the CPU; NumPy input goes to the GPU in _train
            X, y2 = to_host(X), to_host(y2)
        self._sw = sample_weight  # the host weights of this call (None: unweighted), for _train
        if first:
            self.n_outputs_ = y2.shape[1]
            self._y_1d = y.ndim == 1
            self.loss_curve_ = []
            self.best_validation_score_ = None
            self.n_dense_edges_ = None
        xp = get_xp(device)
        max_iter = 1 if incremental else int(self.max_iter)
        self.n_iter_ = 0
        self.n_fine_tune_iter_ = 0

        if first:
            topo = self.topology
            if isinstance(topo, str) and topo == "prune":
                self._fit_prune(X, y2, hidden, rng, incremental, max_iter, xp)
                del self._sw
                return self
            if isinstance(topo, str):  # 'random'
                graph = build_random_dag(
                    SparseGraph,
                    X.shape[1],
                    y2.shape[1],
                    int(self.n_hidden),
                    self.density,
                    self.activation,
                    self.slope,
                    rng,
                )
            else:
                graph = topo.subgraph(np.ones(topo.n_edges, bool))  # private copy
            self._check_graph(graph, X.shape[1], y2.shape[1])
            linear = bool(np.all(graph.activations[graph.output_ids] == ACTIVATIONS["identity"]))
            self._y_mean, self._y_scale = self._target_scaling(y2, linear, self._sw)
        else:
            graph = self.graph_
        model = SparseModel(graph, device)
        self._train(model, X, self._standardise(y2), rng, max_iter, xp, limited=not incremental)
        self._set_graph(model.to_graph())
        del self._sw
        return self

    def _fit_prune(self, X, y2, hidden, rng, incremental, max_iter, xp):
        """Dense phase, pruning rounds with fine-tuning, export as ``graph_``."""
        sizes = [X.shape[1], *hidden, y2.shape[1]]
        self._y_mean, self._y_scale = self._target_scaling(y2, True, self._sw)
        ys = self._standardise(y2)
        model = DenseMasked(sizes, ACTIVATIONS[self.activation], float(self.slope), rng, xp)
        self.n_dense_edges_ = model.n_alive()
        self._train(model, X, ys, rng, max_iter, xp, limited=not incremental)
        steps = 1 if incremental else int(self.n_prune_steps)
        if incremental:
            ft = 0
        else:
            ft = max(1, self.max_iter // 4) if self.fine_tune_iter is None else int(self.fine_tune_iter)
        n0 = self.n_dense_edges_
        for s in range(1, steps + 1):
            frac = float(self.density) ** (s / steps)
            model.prune_to(int(round(n0 * frac)) if s < steps else int(round(n0 * self.density)))
            if ft:
                phase = f"fine-tuning, pruning round {s}/{steps}"
                self._train(model, X, ys, rng, ft, xp, phase=phase, counter="n_fine_tune_iter_")
        self._set_graph(model.to_graph(float(self.slope)))

    def _standardise(self, y2):
        """``(y2 - mean) / scale`` with the fitted target scaling, where ``y2`` lives."""
        xp = array_module(y2)
        return (y2 - xp.asarray(self._y_mean)) / xp.asarray(self._y_scale)

    @staticmethod
    def _target_scaling(y2, linear, sample_weight=None):
        """Host ``(mean, scale)`` of the targets (zeros and ones when an output is not linear);
        weighted means and standard deviations with ``sample_weight``."""
        if not linear:
            return np.zeros(y2.shape[1]), np.ones(y2.shape[1])
        if sample_weight is None:
            scale = y2.std(axis=0)
            mean = y2.mean(axis=0)
        else:
            yh = to_host(y2)
            mean = np.average(yh, axis=0, weights=sample_weight)
            scale = np.sqrt(np.average((yh - mean) ** 2, axis=0, weights=sample_weight))
        scale = to_host(scale)
        scale[scale < 1e-12] = 1.0
        return to_host(mean), scale

    def _train(self, model, X, ys, rng, n_epochs, xp, phase=None, counter="n_iter_", limited=False):
        """Minibatch training loop shared by the dense (prune) and sparse models.

        Runs at most ``n_epochs`` epochs, counting them in the attribute ``counter``
        (``n_iter_``, or ``n_fine_tune_iter_`` for the fine-tuning rounds). ``limited``: the
        loop is the training that ``max_iter`` bounds, so ending it without converging
        warns (ConvergenceWarning), as scikit-learn's MLP does.
        """
        n = X.shape[0]
        sw = getattr(self, "_sw", None)  # host weights, or None (unweighted: the original arithmetic)
        val = None
        sw_val = None
        if self.early_stopping and n >= 10:
            perm = rng.permutation(n)
            n_val = max(1, int(round(self.validation_fraction * n)))
            vi, ti = perm[:n_val], perm[n_val:]
            if sw is not None:
                sw_val, sw = sw[vi], sw[ti]
            if is_device_array(X):  # CuPy data is indexed with device indices
                vi, ti = xp.asarray(vi), xp.asarray(ti)
            val = (xp.asarray(X[vi]), to_host(ys[vi]))
            X, ys = X[ti], ys[ti]
            n = X.shape[0]
        Xd, yd = xp.asarray(X), xp.asarray(ys)
        swd = None if sw is None else xp.asarray(sw)
        total_weight = float(n if sw is None else sw.sum())
        bs = min(200, n) if self.batch_size == "auto" else min(int(self.batch_size), n)
        opt = (
            Adam(model.params, self.learning_rate_init)
            if self.solver == "adam"
            else SGD(model.params, self.learning_rate_init)
        )
        n_out = ys.shape[1]
        best_loss, best_score, no_improve, best_params = np.inf, -np.inf, 0, None
        converged = False
        if phase is None:
            phase = "dense" if isinstance(model, DenseMasked) else "sparse"
        bar = Progress(
            self,
            f"{type(self).__name__} training ({phase})",
            n_epochs,
            self.verbose,
            "epochs",
            log_every=True,  # a wide dense phase may run for minutes
        )
        for _epoch in range(n_epochs):
            order = rng.permutation(n)
            total = 0.0
            for s in range(0, n, bs):
                idx = order[s : s + bs]
                B = idx.size
                if sw is not None:
                    B = float(sw[idx].sum())  # the batch's weight plays the part of its size
                    if B == 0.0:
                        continue  # all weights zero: nothing to learn from this batch
                idx = xp.asarray(idx)
                yb = yd[idx]
                out, cache = model.forward(Xd, keep=True, rows=idx)  # X[idx], gathered where it is used
                diff = out - yb
                if sw is None:
                    G = diff / (B * n_out)
                    sq = diff * diff
                else:
                    wb = swd[idx][:, None]
                    G = diff * wb / (B * n_out)
                    sq = diff * diff * wb
                grads = model.backward(cache, G)
                loss = 0.5 * float(sq.sum()) / (B * n_out)
                for i in model.weight_index:
                    p = model.params[i]
                    grads[i] += (self.alpha / B) * p  # the gradient is this step's own array
                    flat = p.ravel()  # a dot product: no temporary of the weights' size
                    loss += 0.5 * self.alpha * float(flat @ flat) / B
                opt.step(model.params, grads)
                if isinstance(model, DenseMasked):  # the step's new weights, masked in place
                    model.apply_masks()
                total += loss * B
            epoch_loss = total / total_weight
            if not np.isfinite(epoch_loss):
                raise ValueError(
                    "training diverged (the loss is not finite); lower learning_rate_init, or scale X "
                    "to a moderate range."
                )
            self.loss_curve_.append(epoch_loss)
            setattr(self, counter, getattr(self, counter) + 1)
            if val is not None:
                pred = to_host(model.forward(val[0]))
                if sw_val is None:
                    ss_res = float(((pred - val[1]) ** 2).sum())
                    ss_tot = float(((val[1] - val[1].mean(axis=0)) ** 2).sum()) or 1.0
                else:
                    w = sw_val[:, None]
                    mean = np.average(val[1], axis=0, weights=sw_val) if sw_val.sum() > 0 else 0.0
                    ss_res = float((w * (pred - val[1]) ** 2).sum())
                    ss_tot = float((w * (val[1] - mean) ** 2).sum()) or 1.0
                score = 1.0 - ss_res / ss_tot
                if score > best_score + self.tol:
                    no_improve = 0
                else:
                    no_improve += 1
                if score > best_score:
                    best_score = score
                    best_params = [p.copy() for p in model.params]
                self.best_validation_score_ = best_score
            else:
                if epoch_loss > best_loss - self.tol:
                    no_improve += 1
                else:
                    no_improve = 0
                best_loss = min(best_loss, epoch_loss)
            info = {"loss": epoch_loss}
            if val is not None:
                info["validation_r2"] = score
            bar.update(**info)
            if no_improve >= self.n_iter_no_change:
                converged = True
                break
        bar.close(**({"loss": self.loss_curve_[-1]} if self.loss_curve_ else {}))
        if val is not None and best_params is not None:
            model.params[:] = best_params
        if limited and not converged:
            warnings.warn(
                f"SparseNetRegressor: maximum iterations ({n_epochs}) reached and the optimisation "
                "has not converged yet.",
                ConvergenceWarning,
                stacklevel=3,
            )
