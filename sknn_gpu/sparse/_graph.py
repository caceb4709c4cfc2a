"""Arbitrary-structured sparse feed-forward networks (DAGs) and their level plan.

A :class:`SparseGraph` holds an edge list ``(src, dst, weight)``, one bias, one
response and one activation per node, and the ids of the input and output nodes.
Evaluation follows neat-python's ``FeedForwardNetwork`` semantics: a node's value
is ``activation(bias + response * sum_e w_e * value[src_e])``; input nodes hold the
input features; nodes that no output needs are dropped.

Before evaluation the graph is compiled once into a *level plan* (the paper's
"network segmentation"): every required node gets the length of the longest path
that reaches it from the inputs, computed in O(V + E) with a vectorised Kahn
topological sort. All nodes of one level depend only on earlier levels, so a level
is evaluated in parallel: one sparse-matrix product per level on the CPU
(``_graph_cpu``), one thread per (node, sample) on the GPU (``_graph_cuda``).

Value layout (both devices): a node-major matrix ``V`` of shape
``(n_slots, batch)``; slots ``0 .. n_inputs-1`` hold the inputs, then the computed
nodes in level order. Everything is float64.

This module holds the graph, its plan and neat-python import/export; argument checks,
size estimates and the random generators live in ``_graph_build``, the engines in
``_graph_cpu`` and ``_graph_cuda`` (same functions, same results), picked once per call
by :func:`engine`; the GPU's launch configurations in ``_graph_plan_cuda`` and its
resident kernel (:meth:`SparseGraph.resident`) in ``_graph_resident_cuda``.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order

from .._backend import (
    check_memory,
    get_xp,
    is_cupy_array,
    is_device_array,
    resolve_device,
    same_type_as_input,
    to_device,
    to_host,
)
from .._typing import Array, ArrayLike
from . import _graph_cpu, _graph_cuda, _graph_resident_cuda
from ._activations import (
    ACTIVATIONS,
    CODE_TO_NAME,
    CODE_TO_NEAT,
    NEAT_ACTIVATIONS,
    TRAINABLE_ACTIVATIONS,
    activation_codes,
)
from ._graph_build import (
    check_count,
    check_idle_timeout,
    check_slope,
    graph_nbytes,
    random_dag,
    random_layered,
)

__all__ = [
    "SparseGraph",
    "ACTIVATIONS",
    "NEAT_ACTIVATIONS",
    "TRAINABLE_ACTIVATIONS",
    "engine",
]


def engine(device):
    """The engine module for a resolved device: ``_graph_cpu`` or ``_graph_cuda``.

    Parameters
    ----------
    device : {'cpu', 'cuda'}
        A resolved device (never 'auto').

    Returns
    -------
    module
        Both modules have the same ``forward`` and ``backward`` functions.
    """
    if device == "cuda":
        return _graph_cuda
    if device == "cpu":
        return _graph_cpu
    raise ValueError(f"expected a resolved device ('cpu' or 'cuda'), got {device!r}.")


class SparseGraph:
    """A sparse feed-forward network with arbitrary structure (a DAG).

    Nodes are numbered ``0 .. n_nodes-1``. Build one with :meth:`from_edges`,
    :meth:`from_neat`, :meth:`random_layered` or :meth:`random_dag`; evaluate it with
    :meth:`forward` on ``device='cpu'`` (one SciPy sparse product per level) or
    ``'cuda'`` (our kernels in ``_kernels/sparsenet.cu``).

    Parameters
    ----------
    src, dst : array-like of int, shape (n_edges,)
        Edge end points (node indices).
    weights : array-like of float, shape (n_edges,)
        Edge weights.
    biases, responses : array-like of float, shape (n_nodes,)
        Per-node bias and response (``activation(bias + response * sum)``).
        Entries of input nodes are ignored.
    activations : array-like of int, shape (n_nodes,)
        Per-node activation codes (see ``ACTIVATIONS``).
    input_ids, output_ids : array-like of int
        Input and output node indices, in feature / target order.
    slope : float, default=4.97
        Slope of the ``'sigmoid'`` activation.
    node_keys : array-like, optional
        Original node labels (neat keys), kept for export.

    Attributes
    ----------
    n_levels : int
        Number of levels of the plan (neat-python's ``feed_forward_layers`` count).
    level_sizes : ndarray of int
        Nodes per level.
    n_edges : int
        Stored edges; ``n_active_edges`` of them feed a required node.

    Examples
    --------
    >>> import numpy as np
    >>> from sknn_gpu.sparse import SparseGraph
    >>> g = SparseGraph.from_edges([(0, 2, 0.5), (1, 2, -1.0), (2, 3, 2.0)], n_inputs=2, n_outputs=1,
    ...                            output_ids=[3], activations="identity")
    >>> g.n_levels
    2
    >>> g.forward(np.array([[1.0, 2.0]]), device="cpu")
    array([[-3.]])
    """

    def __init__(
        self,
        src,
        dst,
        weights,
        biases,
        responses,
        activations,
        input_ids,
        output_ids,
        *,
        slope=4.97,
        node_keys=None,
    ):
        self.src = np.ascontiguousarray(src, dtype=np.int64)
        self.dst = np.ascontiguousarray(dst, dtype=np.int64)
        self.weights = np.ascontiguousarray(weights, dtype=np.float64)
        self.biases = np.ascontiguousarray(biases, dtype=np.float64)
        self.responses = np.ascontiguousarray(responses, dtype=np.float64)
        self.activations = np.ascontiguousarray(activations, dtype=np.int32)
        self.input_ids = np.ascontiguousarray(input_ids, dtype=np.int64)
        self.output_ids = np.ascontiguousarray(output_ids, dtype=np.int64)
        self.slope = check_slope(slope)
        n = self.biases.shape[0]
        self.node_keys = np.arange(n) if node_keys is None else np.asarray(node_keys)
        self._validate()
        self._plan = None
        self._dev = {}

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_edges(
        cls,
        edges,
        n_inputs,
        n_outputs,
        weights=None,
        biases=None,
        *,
        responses=None,
        activations="neat_sigmoid",
        input_ids=None,
        output_ids=None,
        n_nodes=None,
        slope=4.97,
    ):
        """Build a graph from an edge list.

        Parameters
        ----------
        edges : array-like, shape (n_edges, 2) or (n_edges, 3)
            ``(src, dst)`` node indices, or ``(src, dst, weight)`` rows.
        n_inputs, n_outputs : int
            Number of input and output nodes.
        weights : array-like of shape (n_edges,), optional
            Edge weights (required unless ``edges`` has a third column).
        biases : array-like of shape (n_nodes,), optional
            Node biases (zeros by default). Its length fixes ``n_nodes``.
        responses : array-like of shape (n_nodes,), optional
            Node responses (ones by default).
        activations : str or sequence, default='neat_sigmoid'
            One activation for every node, or one per node (names or codes).
        input_ids, output_ids : array-like of int, optional
            Default ``0 .. n_inputs-1`` and ``n_inputs .. n_inputs+n_outputs-1``.
        n_nodes : int, optional
            Number of nodes; defaults to ``len(biases)`` or ``max id + 1``.
        slope : float, default=4.97
            Slope of the ``'sigmoid'`` activation (finite).

        Returns
        -------
        SparseGraph

        Raises
        ------
        ValueError
            For non-integer counts or node ids, NaN/infinite values, a non-finite
            ``slope`` and the structural errors listed in the class docstring.
        InsufficientMemoryError
            When the graph (``n_nodes`` follows the largest node id) and its plan would
            not fit in host memory; raised before allocating.
        """
        n_inputs, n_outputs = check_count(n_inputs, "n_inputs"), check_count(n_outputs, "n_outputs")
        if n_nodes is not None:
            n_nodes = check_count(n_nodes, "n_nodes")
        slope = check_slope(slope)
        arr = np.asarray(edges, dtype=np.float64) if len(edges) else np.zeros((0, 2))
        if arr.ndim != 2 or arr.shape[1] not in (2, 3):
            raise ValueError(f"edges must have shape (n_edges, 2) or (n_edges, 3), got {arr.shape}.")
        if not np.all(np.isfinite(arr)):
            raise ValueError("edges contain NaN or infinite values.")
        ids = arr[:, :2]
        if np.any(ids != np.round(ids)):
            raise ValueError("edge end points must be integer node ids.")
        src, dst = ids[:, 0].astype(np.int64), ids[:, 1].astype(np.int64)
        if weights is None:
            if arr.shape[1] != 3:
                raise ValueError("weights are required when edges has only (src, dst) columns.")
            weights = arr[:, 2]
        weights = np.asarray(weights, dtype=np.float64).ravel()
        if weights.shape[0] != src.shape[0]:
            raise ValueError(f"weights has {weights.shape[0]} entries for {src.shape[0]} edges.")
        input_ids = np.arange(n_inputs) if input_ids is None else np.asarray(input_ids, dtype=np.int64)
        if output_ids is None:
            output_ids = np.arange(n_inputs, n_inputs + n_outputs)
        output_ids = np.asarray(output_ids, dtype=np.int64)
        if input_ids.shape != (n_inputs,) or output_ids.shape != (n_outputs,):
            raise ValueError("input_ids / output_ids must have n_inputs / n_outputs entries.")
        if n_nodes is None:
            if biases is not None:
                n_nodes = len(biases)
            else:
                cand = [n_inputs + n_outputs]
                for a in (src, dst, input_ids, output_ids):
                    if a.size:
                        cand.append(int(a.max()) + 1)
                n_nodes = max(cand)
        n_nodes = int(n_nodes)
        check_memory(
            graph_nbytes(n_nodes, src.shape[0]),
            "cpu",
            f"SparseGraph.from_edges with {n_nodes} nodes (ids 0..{n_nodes - 1}) and {src.shape[0]} edges",
        )
        biases = np.zeros(n_nodes) if biases is None else np.asarray(biases, dtype=np.float64).ravel()
        responses = np.ones(n_nodes) if responses is None else np.asarray(responses, dtype=np.float64).ravel()
        if biases.shape[0] != n_nodes or responses.shape[0] != n_nodes:
            raise ValueError(f"biases and responses need one entry per node ({n_nodes}).")
        codes = activation_codes(activations, n_nodes)
        return cls(src, dst, weights, biases, responses, codes, input_ids, output_ids, slope=slope)

    @classmethod
    def from_neat(cls, genome, config):
        """Import a neat-python genome (enabled connections, bias, response, activation).

        Node keys are renumbered ``0 .. n_nodes-1`` (inputs first, then outputs, then
        hidden nodes in key order); the neat keys are kept in ``node_keys``. Only the
        ``'sum'`` aggregation is supported.
        """
        gc = getattr(config, "genome_config", config)
        in_keys, out_keys = list(gc.input_keys), list(gc.output_keys)
        hidden = sorted(k for k in genome.nodes if k not in set(out_keys))
        keys = in_keys + out_keys + hidden
        index = {k: i for i, k in enumerate(keys)}
        n = len(keys)
        biases, responses = np.zeros(n), np.ones(n)
        codes = np.zeros(n, dtype=np.int32)
        for k, ng in genome.nodes.items():
            i = index[k]
            if ng.aggregation != "sum":
                raise ValueError(f"node {k}: aggregation {ng.aggregation!r} is not supported (only 'sum').")
            if ng.activation not in NEAT_ACTIVATIONS:
                raise ValueError(f"node {k}: activation {ng.activation!r} is not supported.")
            biases[i], responses[i] = ng.bias, ng.response
            codes[i] = NEAT_ACTIVATIONS[ng.activation]
        src, dst, w = [], [], []
        for (a, b), cg in genome.connections.items():
            if not cg.enabled:
                continue
            if a not in index or b not in index:
                raise ValueError(f"connection {(a, b)} names a node the genome does not have.")
            src.append(index[a])
            dst.append(index[b])
            w.append(cg.weight)
        return cls(
            np.array(src, dtype=np.int64),
            np.array(dst, dtype=np.int64),
            np.array(w, dtype=np.float64),
            biases,
            responses,
            codes,
            np.arange(len(in_keys)),
            np.arange(len(in_keys), len(in_keys) + len(out_keys)),
            node_keys=np.array(keys),
        )

    def to_neat(self, config: Any, key: int = 0) -> Any:
        """Export as a neat-python ``DefaultGenome`` for ``config``.

        Inputs map to ``config``'s input keys, outputs to its output keys and hidden
        nodes to keys ``n_outputs, n_outputs+1, ...``. Activations must exist in neat
        (``'sigmoid'`` with a slope and plain ``'tanh'`` do not).
        """
        gc = getattr(config, "genome_config", config)
        genome_type = getattr(config, "genome_type", None)
        if genome_type is None:
            from neat import DefaultGenome as genome_type
        if len(gc.input_keys) != self.n_inputs or len(gc.output_keys) != self.n_outputs:
            raise ValueError("config's num_inputs / num_outputs do not match the graph.")
        keys = np.empty(self.n_nodes, dtype=np.int64)
        keys[self.input_ids] = gc.input_keys
        keys[self.output_ids] = gc.output_keys
        hidden = np.setdiff1d(np.arange(self.n_nodes), np.concatenate([self.input_ids, self.output_ids]))
        keys[hidden] = self.n_outputs + np.arange(hidden.size)
        genome = genome_type(key)
        is_input = np.zeros(self.n_nodes, bool)
        is_input[self.input_ids] = True
        for i in np.flatnonzero(~is_input):
            code = int(self.activations[i])
            if code not in CODE_TO_NEAT:
                raise ValueError(f"activation {CODE_TO_NAME[code]!r} has no neat-python equivalent.")
            ng = genome.create_node(gc, int(keys[i]))
            ng.bias, ng.response = float(self.biases[i]), float(self.responses[i])
            ng.activation, ng.aggregation = CODE_TO_NEAT[code], "sum"
            genome.nodes[int(keys[i])] = ng
        for e in range(self.n_edges):
            a, b = int(keys[self.src[e]]), int(keys[self.dst[e]])
            try:  # neat-python >= 1.0 numbers connections with innovations
                cg = genome.create_connection(gc, a, b, innovation=e)
            except TypeError:  # neat-python 0.92
                cg = genome.create_connection(gc, a, b)
            cg.weight, cg.enabled = float(self.weights[e]), True
            genome.connections[cg.key] = cg
        return genome

    def to_edges(self) -> dict:
        """Return ``(edges, weights, biases)``: an (n_edges, 2) int array and the parameters."""
        return np.stack([self.src, self.dst], axis=1), self.weights.copy(), self.biases.copy()

    random_layered = classmethod(random_layered)
    random_dag = classmethod(random_dag)

    # ------------------------------------------------------------------ validation & plan
    def _validate(self):
        n = self.biases.shape[0]
        e = self.src.shape[0]
        if self.src.ndim != 1 or self.dst.shape != (e,) or self.weights.shape != (e,):
            raise ValueError("src, dst and weights must be 1-D arrays of the same length.")
        if self.responses.shape != (n,) or self.activations.shape != (n,) or self.node_keys.shape[0] != n:
            raise ValueError("biases, responses, activations and node_keys need one entry per node.")
        if not (
            np.all(np.isfinite(self.weights))
            and np.all(np.isfinite(self.biases))
            and np.all(np.isfinite(self.responses))
        ):
            raise ValueError("weights, biases and responses must be finite (found NaN or inf).")
        for name, ids in (
            ("edge source", self.src),
            ("edge destination", self.dst),
            ("input", self.input_ids),
            ("output", self.output_ids),
        ):
            bad = ids[(ids < 0) | (ids >= n)]
            if bad.size:
                raise ValueError(f"unknown node id(s) {bad[:5].tolist()} as {name}: nodes are 0..{n - 1}.")
        if np.unique(self.input_ids).size != self.input_ids.size:
            raise ValueError("input_ids contain duplicates.")
        if np.unique(self.output_ids).size != self.output_ids.size:
            raise ValueError("output_ids contain duplicates.")
        both = np.intersect1d(self.input_ids, self.output_ids)
        if both.size:
            raise ValueError(f"node(s) {both[:5].tolist()} are both input and output.")
        is_input = np.zeros(n, bool)
        is_input[self.input_ids] = True
        into = self.dst[is_input[self.dst]]
        if into.size:
            raise ValueError(f"edges may not end at an input node (input node {int(into[0])}).")
        loops = self.src[self.src == self.dst]
        if loops.size:
            raise ValueError(f"cycle: node {int(loops[0])} has an edge to itself (self-loop).")
        if e:
            key = self.src * n + self.dst
            uniq, counts = np.unique(key, return_counts=True)
            if np.any(counts > 1):
                k = int(uniq[np.argmax(counts > 1)])
                raise ValueError(f"duplicate edge {k // n} -> {k % n}.")

    n_nodes = property(lambda self: int(self.biases.shape[0]), doc="Number of nodes.")
    n_edges = property(lambda self: int(self.src.shape[0]), doc="Number of stored edges.")
    n_inputs = property(lambda self: int(self.input_ids.shape[0]), doc="Number of input nodes.")
    n_outputs = property(lambda self: int(self.output_ids.shape[0]), doc="Number of output nodes.")

    @property
    def plan(self):
        """The compiled level plan (dict of NumPy arrays), built once on first use."""
        if self._plan is None:
            self._plan = self._build_plan()
        return self._plan

    @property
    def n_levels(self):
        return int(self.plan["level_ptr"].shape[0] - 1)

    @property
    def level_sizes(self):
        return np.diff(self.plan["level_ptr"])

    @property
    def n_active_edges(self):
        return int(self.plan["indices"].shape[0])

    def _required(self, is_input):
        """Non-input nodes from which some output is reachable (plus the outputs), O(V + E)."""
        n = self.n_nodes
        # reversed graph with an extra root n -> every output
        rows = np.concatenate([self.dst, np.full(self.n_outputs, n)])
        cols = np.concatenate([self.src, self.output_ids])
        rev = sp.csr_matrix((np.ones(rows.size, np.int8), (rows, cols)), shape=(n + 1, n + 1))
        reach = breadth_first_order(rev, n, directed=True, return_predecessors=False)
        required = np.zeros(n, bool)
        required[reach[reach < n]] = True
        required &= ~is_input
        return required

    def _build_plan(self):
        n, n_in = self.n_nodes, self.n_inputs
        is_input = np.zeros(n, bool)
        is_input[self.input_ids] = True
        required = self._required(is_input)
        active = required[self.dst] & (required[self.src] | is_input[self.src])
        src, dst = self.src[active], self.dst[active]
        edge_id = np.flatnonzero(active)
        # Kahn's algorithm, level by level, counting only edges between required nodes
        internal = ~is_input[src]
        indeg = np.bincount(dst[internal], minlength=n)
        order = np.argsort(src[internal], kind="stable")
        out_ptr = np.concatenate([[0], np.cumsum(np.bincount(src[internal], minlength=n))])
        out_dst = dst[internal][order]
        level = np.full(n, -1, dtype=np.int64)
        has_in = np.bincount(dst, minlength=n) > 0
        bias_neurons = np.flatnonzero(required & ~has_in)
        first = np.flatnonzero(required & has_in & (indeg == 0))
        levels = []
        if bias_neurons.size:
            levels.append(bias_neurons)
            # nodes fed only by bias neurons (and inputs) become ready after them
            frontier = bias_neurons
            ready_now = first
        else:
            frontier = np.zeros(0, np.int64)
            ready_now = first
        # Expand: a node becomes ready once all its required predecessors are placed.
        # The bias-neuron layer's out-edges are released before the first wave.
        pending = ready_now
        released = frontier
        while True:
            if released.size:
                starts, ends = out_ptr[released], out_ptr[released + 1]
                cnt = ends - starts
                if cnt.sum():
                    idx = np.repeat(ends - cnt.cumsum(), cnt) + np.arange(cnt.sum())
                    targets = out_dst[idx]
                    touched, dec = np.unique(targets, return_counts=True)
                    indeg[touched] -= dec
                    newly = touched[(indeg[touched] == 0)]
                    pending = np.union1d(pending, newly)
            if pending.size == 0:
                break
            levels.append(pending)
            released = pending
            pending = np.zeros(0, np.int64)
        placed = np.concatenate(levels) if levels else np.zeros(0, np.int64)
        if placed.size < int(required.sum()):
            left = np.zeros(n, bool)
            left[required] = True
            left[placed] = False
            raise ValueError(f"the graph has a cycle through node(s) {self._find_cycle(left, src, dst)}.")
        for k, nodes in enumerate(levels):
            level[nodes] = k
        comp = placed  # computed nodes in level order
        slot = np.full(n, -1, dtype=np.int64)
        slot[self.input_ids] = np.arange(n_in)
        slot[comp] = n_in + np.arange(comp.size)
        row = slot[dst] - n_in
        perm = np.lexsort((np.arange(row.size), row))  # by row, stable in edge order
        row_of_edge = row[perm].astype(np.int32)
        indices = slot[src][perm].astype(np.int32)
        indptr = np.concatenate([[0], np.cumsum(np.bincount(row, minlength=comp.size))]).astype(np.int32)
        level_ptr = np.concatenate([[0], np.cumsum([lv.size for lv in levels])]).astype(np.int32)
        # transposed structure for backprop: out-edges of every slot, sorted by source slot
        tperm = np.lexsort((np.arange(indices.size), indices)).astype(np.int32)
        t_indptr = np.concatenate([[0], np.cumsum(np.bincount(indices, minlength=n_in + comp.size))]).astype(
            np.int32
        )
        return {
            "n_in": n_in,
            "nodes": comp,
            "level": level,
            "slot": slot,
            "level_ptr": level_ptr,
            "indptr": indptr,
            "indices": indices,
            "row_of_edge": row_of_edge,
            "edge_id": edge_id[perm],  # plan edge -> stored edge
            "t_indptr": t_indptr,
            "t_perm": tperm,  # transposed position -> plan edge
            "t_rows": row_of_edge[tperm],
            "widest": int(np.diff(level_ptr).max(initial=1)),  # nodes of the widest level
            "out_slots": slot[self.output_ids].astype(np.int32),
            "out_index": _out_index(slot[self.output_ids] - n_in, comp.size),
            "act": self.activations[comp].astype(np.int32),
            "resp": self.responses[comp].copy(),
        }

    def _find_cycle(self, left, src, dst):
        """Nodes on one cycle among the unplaced ``left`` nodes (error path only)."""
        keep = left[src] & left[dst]
        pred = {}
        for a, b in zip(src[keep].tolist(), dst[keep].tolist()):
            pred.setdefault(b, a)
        node = int(np.flatnonzero(left)[0])
        seen = []
        index = {}
        while node not in index:
            index[node] = len(seen)
            seen.append(node)
            node = pred[node]
        cyc = seen[index[node] :][::-1]
        return [self.node_keys[i].item() for i in cyc[:10]]

    # ------------------------------------------------------------------ parameters in plan order
    def plan_params(self) -> tuple[np.ndarray, np.ndarray]:
        """``(w, b)``: edge weights in plan order and biases of the computed nodes."""
        p = self.plan
        return self.weights[p["edge_id"]].copy(), self.biases[p["nodes"]].copy()

    def with_params(self, w_plan: ArrayLike, b_plan: ArrayLike) -> SparseGraph:
        """A copy of this graph with plan-order weights / biases written back (structure shared)."""
        p = self.plan
        g = object.__new__(SparseGraph)
        g.__dict__.update(self.__dict__)
        g.weights = self.weights.copy()
        g.biases = self.biases.copy()
        g.weights[p["edge_id"]] = to_host(w_plan)
        g.biases[p["nodes"]] = to_host(b_plan)
        g._dev = {}
        return g

    def subgraph(self, keep_edges: ArrayLike) -> SparseGraph:
        """A new graph with only the stored edges where ``keep_edges`` is True."""
        keep = np.asarray(keep_edges, bool)
        return SparseGraph(
            self.src[keep],
            self.dst[keep],
            self.weights[keep],
            self.biases,
            self.responses,
            self.activations,
            self.input_ids,
            self.output_ids,
            slope=self.slope,
            node_keys=self.node_keys,
        )

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_dev"] = {}
        state.pop("_cpu_layout", None)  # the CPU engine's training blocks, rebuilt on use
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._dev = {}

    def __repr__(self):
        return (
            f"SparseGraph(n_inputs={self.n_inputs}, n_outputs={self.n_outputs}, n_nodes={self.n_nodes}, "
            f"n_edges={self.n_edges})"
        )

    # ------------------------------------------------------------------ evaluation
    def forward(self, X: ArrayLike, device: str = "auto", executor: str = "auto") -> Array:
        """Evaluate the network on the rows of ``X``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_inputs) or (n_inputs,)
            Real input values (NumPy, CuPy or nested lists). A 1-D input is one sample.
        device : {'auto', 'cpu', 'cuda'}, default='auto'
            Where to evaluate; resolved once per call. A CuPy input with ``'auto'`` runs
            on the GPU.
        executor : {'auto', 'level', 'fused'}, default='auto'
            GPU only: one launch per level, or one launch for all levels (see
            ``_graph_plan_cuda.choose_executor``). The fused launch is, where the node
            values fit in shared memory, one thread-block cluster (one block for
            narrow levels; up to 16 blocks on compute capability 9.0, each with a
            replica of the values), else one block with a barrier per level or a grid
            of blocks with a grid barrier; ``'fused:cluster'``, ``'fused:smem'`` and
            ``'fused:grid'`` force one of the three.

        Returns
        -------
        out : ndarray of shape (n_samples, n_outputs)
            Output node values, NumPy or CuPy like ``X`` (1-D in, 1-D out).

        Raises
        ------
        TypeError
            For complex, string or object input, or a sparse matrix.
        ValueError
            For a wrong shape (the message names the expected one) or NaN/infinity.
        InsufficientMemoryError
            When the node values of the batch would not fit (before allocating them).
        """
        asked = type(X) is np.ndarray and bool(self._dev) and (device == "auto" or device == "cuda")
        if asked:
            out = _graph_cuda.resident_forward(self, X, executor)  # inside resident(): no launch
            if out is not None:
                return same_type_as_input(out, X)
        dense_cupy = is_cupy_array(X)
        if device == "auto" and (dense_cupy or is_device_array(X)):
            device = "cuda"  # a CuPy input runs where it lives
        else:
            device = resolve_device(device)
        if (
            dense_cupy
            and device == "cuda"
            and X.ndim == 2
            and X.dtype == np.float64
            and X.shape[1] == self.n_inputs
        ):
            # latency path: a float64 CuPy matrix goes straight to the kernels (they flag non-finite input)
            return _graph_cuda.forward(self, X, executor=executor, check_finite=True)
        if device == "cuda" and type(X) is np.ndarray and X.ndim in (1, 2):
            # latency path: a small float64 NumPy batch goes through pinned staging (forward_host)
            X2 = X.reshape(1, -1) if X.ndim == 1 else X
            if _graph_cuda.fits_host_mapped(self, X2):
                out = _graph_cuda.forward_host(self, X2, executor=executor, resident=not asked)
                return same_type_as_input(out[0] if X.ndim == 1 else out, X)
        Xd, one = self._check_X(X, device)
        out = engine(device).forward(self, Xd, executor=executor, check_finite=True)
        if one:
            out = out[0]
        return same_type_as_input(out, X)

    def resident(self, idle_timeout: float = 0.01, device: str = "auto") -> contextlib.AbstractContextManager:
        """Keep the forward kernel resident on the GPU while a block of small calls runs.

        Inside ``with g.resident():`` every :meth:`forward` of a small float64 NumPy
        batch (up to 64 KiB of inputs and outputs; one row is the use case) that the
        cluster executor runs is answered by a kernel that stays on the GPU: the call
        writes the rows into pinned host memory and waits for the outputs there, with no
        kernel launch and no CUDA API call (about half the time of a launched call on
        an H100; docs/performance.md). Results are the same bits as outside the block.

        While it runs, the kernel holds the SMs of its thread-block cluster (up to 16 of
        an H100's 132) on its own stream and one of its threads polls host memory; other
        work runs on the remaining SMs. It leaves after ``idle_timeout`` seconds without
        a call (the next call relaunches it: the cost of one ordinary call) and when the
        last open block of this graph closes (a nested block keeps the outer block's
        ``idle_timeout``). A device-wide synchronization made inside the block waits
        until it has left (so does CuPy returning memory to the driver: ``cudaFree``
        synchronizes the device). Calls from several threads are serialized. CuPy inputs,
        batches the cluster kernel does not run, and other executors take the usual
        path. Needs an x86-64 host (the request protocol relies on its store order).

        Parameters
        ----------
        idle_timeout : float, default=0.01
            Seconds without a call after which the kernel leaves, in (0, 10].
        device : {'auto', 'cpu', 'cuda'}, default='auto'
            Where the calls of the block will run; on the CPU (``'auto'`` without a
            usable GPU) the block changes nothing.

        Returns
        -------
        context manager

        Raises
        ------
        ValueError
            For a bad ``idle_timeout``; on the GPU when the graph's node values do not
            fit one thread-block cluster (the resident kernel is the cluster kernel) or
            the host is not x86-64.

        Examples
        --------
        >>> import numpy as np
        >>> from sknn_gpu.sparse import SparseGraph
        >>> g = SparseGraph.random_layered(4, 1, 3, 20, random_state=0)
        >>> X = np.random.default_rng(0).normal(size=(3, 4))
        >>> with g.resident():  # one row at a time, as a serving loop would
        ...     rows = [g.forward(x) for x in X]
        >>> bool(np.allclose(np.stack(rows), g.forward(X, device="cpu")))
        True
        """
        idle = check_idle_timeout(idle_timeout)
        if resolve_device(device) == "cpu":
            return contextlib.nullcontext()
        return _graph_resident_cuda.resident_session(self, idle)

    def _check_X(self, X, device):
        """``X`` as a float64 (n_samples, n_inputs) array on ``device``, and whether it was 1-D."""
        if sp.issparse(X) or (is_device_array(X) and not is_cupy_array(X)):
            raise TypeError("SparseGraph.forward needs a dense X; got a sparse matrix (use X.toarray()).")
        Xa = X if is_device_array(X) else np.asarray(X)
        if Xa.dtype.kind == "O":  # lists of Python numbers of mixed types
            try:
                Xa = Xa.astype(np.float64)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"X must hold real numbers; converting it to float64 failed: {exc}") from None
        if Xa.dtype.kind == "c":
            raise TypeError(
                f"X must be real, got complex dtype {Xa.dtype}; pass X.real or abs(X) explicitly "
                "(the imaginary part is not dropped silently)."
            )
        if Xa.dtype.kind not in "biuf":
            raise TypeError(f"X must hold real numbers, got dtype {Xa.dtype}.")
        shape = tuple(Xa.shape)
        one = Xa.ndim == 1
        if one:
            Xa = Xa.reshape(1, -1)
        if Xa.ndim != 2 or Xa.shape[1] != self.n_inputs:
            raise ValueError(f"X must have shape (n_samples, {self.n_inputs}), got {shape}.")
        return get_xp(device).asarray(to_device(Xa, device), dtype=np.float64), one


def _out_index(out_rows, n_comp):
    """Row -> output position (-1 for rows that are not outputs), int32."""
    idx = np.full(n_comp, -1, dtype=np.int32)
    idx[out_rows] = np.arange(out_rows.size, dtype=np.int32)
    return idx
