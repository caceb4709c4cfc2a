"""Building :class:`~sknn_gpu.sparse.SparseGraph` objects: argument checks, size estimates, random topologies.

* :func:`check_count`, :func:`check_slope`: the clear ValueErrors of the constructors;
* :func:`graph_nbytes`, :func:`random_dag_nbytes`: host bytes of a graph with its level
  plan and of a random DAG's construction, used to refuse oversize work before allocating
  (``SparseGraph`` constructors and ``SparseNetRegressor``'s size estimate);
* :func:`random_layered` and :func:`random_dag`, bound to ``SparseGraph`` as classmethods
  (``cls`` is the class to build; this module never imports ``_graph``).
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.utils import check_random_state

from .._backend import check_memory
from ._activations import ACTIVATIONS

__all__ = [
    "check_count",
    "check_slope",
    "graph_nbytes",
    "random_dag_nbytes",
    "n_candidate_pairs",
    "decode_pairs",
    "random_layered",
    "random_dag",
    "build_random_dag",
]

#: Host bytes per node and per stored edge of a graph together with its level plan
#: (arrays and the plan builder's temporaries; measured with tracemalloc, rounded up).
BYTES_PER_NODE = 160
BYTES_PER_EDGE = 128


def graph_nbytes(n_nodes, n_edges):
    """Host bytes of a graph of ``n_nodes`` nodes and ``n_edges`` edges with its level plan.

    Parameters
    ----------
    n_nodes, n_edges : int
        Sizes of the graph.

    Returns
    -------
    int
        An upper estimate, used to refuse oversize graphs before allocating them.
    """
    return BYTES_PER_NODE * int(n_nodes) + BYTES_PER_EDGE * int(n_edges)


def n_candidate_pairs(n_inputs, n_outputs, n_hidden):
    """Forward pairs of a random DAG: input->hidden, hidden->later hidden, input/hidden->output."""
    return n_inputs * n_hidden + n_hidden * (n_hidden - 1) // 2 + (n_inputs + n_hidden) * n_outputs


def random_dag_nbytes(n_inputs, n_outputs, n_hidden, density):
    """Host bytes :meth:`SparseGraph.random_dag` needs (the draw of the kept pairs and the graph).

    Drawing ``round(density * n_pairs)`` of the ``n_pairs`` candidate pairs without
    replacement permutes all of them (8 bytes each, NumPy's ``RandomState.choice``); the
    graph and its plan then cost :func:`graph_nbytes`.

    Parameters
    ----------
    n_inputs, n_outputs, n_hidden : int
        Node counts.
    density : float
        Fraction of candidate pairs kept.

    Returns
    -------
    int
    """
    n_pairs = n_candidate_pairs(int(n_inputs), int(n_outputs), int(n_hidden))
    k = max(1, int(round(density * n_pairs)))
    n_nodes = n_inputs + n_outputs + n_hidden
    return 8 * n_pairs + 24 * k + graph_nbytes(n_nodes, k)


def check_count(value, name, minimum=1):
    """``value`` as an int when it is an integer (not bool) >= ``minimum``, else a clear ValueError."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
    return int(value)


def check_slope(slope):
    """``slope`` as a float when it is a finite real number, else a clear ValueError."""
    if isinstance(slope, (bool, np.bool_)) or not isinstance(slope, Real) or not np.isfinite(slope):
        raise ValueError(f"slope must be a finite real number, got {slope!r}.")
    return float(slope)


def check_idle_timeout(idle_timeout):
    """``idle_timeout`` (seconds) as a float when it is a real number in (0, 10], else a
    clear ValueError (a device-wide synchronization waits up to that long for a resident
    kernel to leave)."""
    ok = isinstance(idle_timeout, Real) and not isinstance(idle_timeout, (bool, np.bool_))
    if not ok or not 0.0 < idle_timeout <= 10.0:  # (NaN fails the comparison)
        raise ValueError(f"idle_timeout must be a number of seconds in (0, 10], got {idle_timeout!r}.")
    return float(idle_timeout)


# --------------------------------------------------------------------------- random topologies
def random_layered(
    cls,
    n_inputs,
    n_outputs,
    n_levels,
    n_edges,
    *,
    width=None,
    activation="neat_sigmoid",
    random_state=None,
):
    """A random DAG with exactly ``n_levels`` levels and about ``n_edges`` edges.

    Hidden nodes are spread evenly over levels ``1 .. n_levels-1`` (outputs form
    the last level); every node gets one edge from the previous level (so the
    depth is exact) and one to the next level (so every node is needed), and the
    remaining edges join random earlier nodes to random later ones (skip
    connections). Duplicate draws are dropped, so the count is approximate.
    Used by the benchmark and the tests.

    Parameters
    ----------
    cls : type
        The class to build (``SparseGraph``; this is its classmethod).
    n_inputs, n_outputs, n_levels : int
        Node counts and depth (all >= 1).
    n_edges : int
        Edge budget.
    width : int, optional
        Nodes per hidden level; by default about ``n_edges / (8 * hidden levels)``.
    activation : str, default='neat_sigmoid'
        Activation of every node.
    random_state : int, Generator or None
        Seed of ``numpy.random.default_rng``.

    Returns
    -------
    SparseGraph
    """
    n_inputs, n_outputs = check_count(n_inputs, "n_inputs"), check_count(n_outputs, "n_outputs")
    n_levels = check_count(n_levels, "n_levels")
    n_edges = check_count(n_edges, "n_edges", 0)
    rng = np.random.default_rng(random_state)
    n_hidden_levels = n_levels - 1
    if width is None:
        # choose the width so that the edge budget gives a few edges per node
        width = max(1, int(n_edges // (8 * max(n_hidden_levels, 1)))) if n_hidden_levels else 0
    width = check_count(width, "width", 0)
    sizes = [n_inputs] + [width] * n_hidden_levels + [n_outputs]
    n_nodes = sum(sizes)
    check_memory(
        graph_nbytes(n_nodes, 2 * n_nodes + n_edges),
        "cpu",
        f"SparseGraph.random_layered with {n_nodes} nodes and about {n_edges} edges",
    )
    starts = np.cumsum([0] + sizes)
    level_of = np.repeat(np.arange(len(sizes)), sizes)
    # chain edges: each non-input node from a random node of the previous level
    dst0 = np.arange(n_inputs, n_nodes)
    lv = level_of[dst0]
    src0 = starts[lv - 1] + (rng.random(dst0.size) * np.array(sizes)[lv - 1]).astype(np.int64)
    # forward edges: each hidden node to a random node of the next level, so every node is needed
    src2 = np.arange(n_inputs, n_nodes - n_outputs)
    lv2 = level_of[src2]
    dst2 = starts[lv2 + 1] + (rng.random(src2.size) * np.array(sizes)[lv2 + 1]).astype(np.int64)
    src0, dst0 = np.concatenate([src0, src2]), np.concatenate([dst0, dst2])
    n_extra = max(0, int(n_edges) - dst0.size)
    # extra edges: pick a destination, then a source uniformly among earlier levels
    dst1 = rng.integers(n_inputs, n_nodes, size=n_extra)
    src1 = (rng.random(n_extra) * starts[level_of[dst1]]).astype(np.int64)
    src = np.concatenate([src0, src1])
    dst = np.concatenate([dst0, dst1])
    key = src * n_nodes + dst
    _, first = np.unique(key, return_index=True)
    first.sort()
    src, dst = src[first], dst[first]
    fan_in = np.bincount(dst, minlength=n_nodes).astype(np.float64)
    w = rng.normal(0.0, 1.0, size=src.size) / np.sqrt(np.maximum(fan_in[dst], 1.0))
    b = rng.normal(0.0, 0.1, size=n_nodes)
    return cls.from_edges(
        np.stack([src, dst], 1),
        n_inputs,
        n_outputs,
        w,
        b,
        activations=activation,
        output_ids=np.arange(n_nodes - n_outputs, n_nodes),
        n_nodes=n_nodes,
    )


def random_dag(
    cls,
    n_inputs,
    n_outputs,
    n_hidden,
    density=0.1,
    *,
    activation="relu",
    slope=4.97,
    random_state=None,
):
    """A random sparse DAG with skip connections (``SparseNetRegressor(topology='random')``).

    The hidden nodes are put in a random order; the candidate edges are all forward
    pairs in that order (input -> hidden, hidden -> later hidden, input or hidden ->
    output), and exactly ``max(1, round(density * n_pairs))`` of them are kept, drawn
    without replacement. Weights and biases are uniform in ``±sqrt(f / (fan_in +
    fan_out))`` (``f`` = 2 for the sigmoids, 6 otherwise). Hidden nodes use
    ``activation``; outputs are linear. Node ids: inputs ``0 .. n_inputs-1``, then the
    outputs, then the hidden nodes.

    Parameters
    ----------
    cls : type
        The class to build (``SparseGraph``; this is its classmethod).
    n_inputs, n_outputs : int
        Input and output nodes (>= 1).
    n_hidden : int
        Hidden nodes (>= 0).
    density : float in (0, 1], default=0.1
        Fraction of the candidate pairs kept.
    activation : str, default='relu'
        Hidden-node activation (a name of ``ACTIVATIONS``).
    slope : float, default=4.97
        Slope of ``'sigmoid'``.
    random_state : int, RandomState instance or None, default=None
        Seeds the order, the draw and the initial values.

    Returns
    -------
    graph : SparseGraph
        Hidden nodes in ``activation``, outputs linear, responses 1.

    Raises
    ------
    ValueError
        For counts that are not integers, ``density`` outside (0, 1] or an unknown
        activation.
    InsufficientMemoryError
        Before allocating, when the draw (8 bytes per candidate pair, about
        ``n_hidden**2 / 2`` of them) and the graph would not fit in host memory
        (:func:`random_dag_nbytes`).
    """
    n_inputs, n_outputs = check_count(n_inputs, "n_inputs"), check_count(n_outputs, "n_outputs")
    n_hidden = check_count(n_hidden, "n_hidden", 0)
    if isinstance(density, (bool, np.bool_)) or not isinstance(density, Real) or not 0.0 < density <= 1.0:
        raise ValueError(f"density must be a real number in (0, 1], got {density!r}.")
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; known: {sorted(ACTIVATIONS)}.")
    slope = check_slope(slope)
    rng = check_random_state(random_state)
    return build_random_dag(cls, n_inputs, n_outputs, n_hidden, density, activation, slope, rng)


def build_random_dag(cls, n_in, n_out, n_h, density, activation, slope, rng):
    """:func:`random_dag` with validated arguments and a resolved ``RandomState`` (the estimator's)."""
    n_pairs = n_candidate_pairs(n_in, n_out, n_h)
    check_memory(
        random_dag_nbytes(n_in, n_out, n_h, density),
        "cpu",
        f"a random DAG with n_hidden={n_h} ({n_pairs} candidate pairs, density={density})",
    )
    code = ACTIVATIONS[activation]
    # node ids: inputs, outputs, hidden; positions: inputs, hidden in random order, outputs
    hidden_ids = n_in + n_out + rng.permutation(n_h)
    k = max(1, int(round(density * n_pairs)))
    pick = np.sort(rng.choice(n_pairs, size=k, replace=False))
    src, dst = decode_pairs(pick, n_in, n_out, hidden_ids)
    n_nodes = n_in + n_out + n_h
    fan_in = np.bincount(dst, minlength=n_nodes)
    fan_out = np.bincount(src, minlength=n_nodes)
    factor = 2.0 if code in (1, 2) else 6.0
    bound = np.sqrt(factor / np.maximum(fan_in[dst] + fan_out[src], 1))
    w = rng.uniform(-1.0, 1.0, k) * bound
    node_bound = np.sqrt(factor / np.maximum(fan_in + fan_out, 1))
    b = rng.uniform(-1.0, 1.0, n_nodes) * node_bound
    codes = np.full(n_nodes, code, dtype=np.int32)
    codes[n_in : n_in + n_out] = ACTIVATIONS["identity"]
    return cls(
        src,
        dst,
        w,
        b,
        np.ones(n_nodes),
        codes,
        np.arange(n_in),
        np.arange(n_in, n_in + n_out),
        slope=slope,
    )


def decode_pairs(pick, n_in, n_out, hidden_ids):
    """End points of candidate pairs ``pick`` of a random DAG, without listing all pairs.

    The candidates are numbered as if listed in three blocks: input ``i`` -> hidden
    position ``h`` at ``i * n_h + h``; hidden positions ``r < c`` in row-major upper
    triangle order; then source ``s`` (inputs, then hidden positions) -> output ``o`` at
    ``s * n_out + o``. Memory and time are O(n_hidden + len(pick)).
    """
    n_h = hidden_ids.size
    n1, n2 = n_in * n_h, n_h * (n_h - 1) // 2
    src = np.empty(pick.size, dtype=np.int64)
    dst = np.empty(pick.size, dtype=np.int64)
    first = pick < n1
    i = pick[first]
    src[first], dst[first] = i // n_h, hidden_ids[i % n_h]
    last = pick >= n1 + n2
    i = pick[last] - (n1 + n2)
    sources = np.concatenate([np.arange(n_in), hidden_ids])
    src[last], dst[last] = sources[i // n_out], n_in + i % n_out
    mid = ~(first | last)
    if mid.any():
        j = pick[mid] - n1
        row_start = np.concatenate([[0], np.cumsum(np.arange(n_h - 1, 0, -1, dtype=np.int64))])
        r = np.searchsorted(row_start, j, side="right") - 1
        src[mid], dst[mid] = hidden_ids[r], hidden_ids[r + 1 + (j - row_start[r])]
    return src, dst
