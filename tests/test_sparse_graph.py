"""SparseGraph: level plan, neat-python equivalence, errors, CPU/GPU parity, gradients."""

import pickle

import numpy as np
import pytest

from sknn_gpu.sparse import ACTIVATIONS, SparseGraph, _graph_cpu

NEAT_CFG = """
[NEAT]
fitness_criterion     = max
fitness_threshold     = 1.0
pop_size              = 10
reset_on_extinction   = False
no_fitness_termination = False

[DefaultGenome]
num_inputs              = {n_in}
num_hidden              = {n_hidden}
num_outputs             = {n_out}
initial_connection      = unconnected
feed_forward            = True
compatibility_disjoint_coefficient = 1.0
compatibility_weight_coefficient   = 0.5
conn_add_prob           = 0.5
conn_delete_prob        = 0.5
node_add_prob           = 0.2
node_delete_prob        = 0.2
activation_default      = sigmoid
activation_options      = sigmoid tanh relu identity
activation_mutate_rate  = 0.0
aggregation_default     = sum
aggregation_options     = sum
aggregation_mutate_rate = 0.0
bias_init_mean          = 0.0
bias_init_stdev         = 1.0
bias_init_type          = gaussian
bias_replace_rate       = 0.1
bias_mutate_rate        = 0.7
bias_mutate_power       = 0.5
bias_max_value          = 30.0
bias_min_value          = -30.0
response_init_mean      = 1.0
response_init_stdev     = 0.0
response_init_type      = gaussian
response_replace_rate   = 0.0
response_mutate_rate    = 0.0
response_mutate_power   = 0.0
response_max_value      = 30.0
response_min_value      = -30.0
weight_init_mean        = 0.0
weight_init_stdev       = 1.0
weight_init_type        = gaussian
weight_max_value        = 30
weight_min_value        = -30
weight_mutate_rate      = 0.8
weight_replace_rate     = 0.1
weight_mutate_power     = 0.5
enabled_default         = True
enabled_mutate_rate     = 0.01
enabled_rate_to_true_add = 0.0
enabled_rate_to_false_add = 0.0

[DefaultSpeciesSet]
compatibility_threshold = 3.0

[DefaultStagnation]
species_fitness_func = max
max_stagnation       = 20
species_elitism      = 2

[DefaultReproduction]
elitism            = 2
survival_threshold = 0.2
min_species_size   = 2
"""


def neat_config(tmp_path, n_in, n_out, n_hidden):
    neat = pytest.importorskip("neat")
    path = tmp_path / f"neat_{n_in}_{n_out}_{n_hidden}.cfg"
    path.write_text(NEAT_CFG.format(n_in=n_in, n_out=n_out, n_hidden=n_hidden))
    return neat.Config(
        neat.DefaultGenome,
        neat.DefaultReproduction,
        neat.DefaultSpeciesSet,
        neat.DefaultStagnation,
        str(path),
    )


def random_genome(rng, config, p):
    """A random feed-forward genome: random node order, edges forward only, some disabled."""
    import neat

    gc = config.genome_config
    genome = neat.DefaultGenome(0)
    genome.configure_new(gc)
    nodes = list(genome.nodes)
    for k in nodes:
        ng = genome.nodes[k]
        ng.bias = float(rng.normal())
        ng.response = float(rng.uniform(0.5, 1.5))
        ng.activation = str(rng.choice(["sigmoid", "tanh", "relu", "identity"]))
    order = [int(k) for k in rng.permutation(nodes)]
    innovation = 0
    for j, b in enumerate(order):
        for a in list(gc.input_keys) + order[:j]:
            if rng.random() < p:
                cg = genome.create_connection(gc, int(a), b, innovation=innovation)
                innovation += 1
                cg.weight = float(rng.normal())
                cg.enabled = bool(rng.random() < 0.85)
                genome.connections[cg.key] = cg
    return genome


# ----------------------------------------------------------------------------- neat-python equality
def test_matches_neat_activate_and_levels(tmp_path, rng):
    neat = pytest.importorskip("neat")
    from neat.graphs import feed_forward_layers

    n_checked_hidden_dropped = 0
    for trial in range(25):
        n_in, n_out, n_hidden = int(rng.integers(1, 6)), int(rng.integers(1, 4)), int(rng.integers(0, 25))
        config = neat_config(tmp_path, n_in, n_out, n_hidden)
        genome = random_genome(rng, config, p=float(rng.uniform(0.05, 0.5)))
        net = neat.nn.FeedForwardNetwork.create(genome, config)
        X = rng.normal(size=(9, n_in)) * 2
        expected = np.array([net.activate(list(x)) for x in X])
        graph = SparseGraph.from_neat(genome, config)
        got = graph.forward(X, device="cpu")
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-12, err_msg=f"trial {trial}")
        enabled = [k for k, cg in genome.connections.items() if cg.enabled]
        layers, required = feed_forward_layers(
            config.genome_config.input_keys, config.genome_config.output_keys, enabled
        )
        assert graph.n_levels == len(layers), f"trial {trial}"
        assert sorted(graph.level_sizes.tolist()) == sorted(len(lay) for lay in layers)
        assert graph.plan["nodes"].size == len(required)
        n_checked_hidden_dropped += graph.plan["nodes"].size < graph.n_nodes - n_in
    assert n_checked_hidden_dropped > 0  # some genomes had nodes that no output needs


def test_neat_export_round_trip(tmp_path, rng):
    pytest.importorskip("neat")
    config = neat_config(tmp_path, 3, 2, 0)
    graph = SparseGraph.random_layered(
        3, 2, 4, 60, activation="neat_sigmoid", random_state=int(rng.integers(1e6))
    )
    genome = graph.to_neat(config)
    assert len(genome.connections) == graph.n_edges
    import neat

    net = neat.nn.FeedForwardNetwork.create(genome, config)
    X = rng.normal(size=(5, 3))
    expected = np.array([net.activate(list(x)) for x in X])
    np.testing.assert_allclose(graph.forward(X, device="cpu"), expected, rtol=1e-5, atol=1e-12)
    back = SparseGraph.from_neat(genome, config)
    np.testing.assert_allclose(back.forward(X, device="cpu"), expected, rtol=1e-12, atol=1e-14)


def test_to_neat_refuses_activation_without_equivalent(tmp_path):
    pytest.importorskip("neat")
    config = neat_config(tmp_path, 1, 1, 0)
    graph = SparseGraph.from_edges([(0, 1, 1.0)], 1, 1, activations="sigmoid")
    with pytest.raises(ValueError, match="no neat-python equivalent"):
        graph.to_neat(config)


def test_from_neat_refuses_other_aggregations(tmp_path, rng):
    pytest.importorskip("neat")
    config = neat_config(tmp_path, 2, 1, 2)
    genome = random_genome(rng, config, p=0.9)
    next(iter(genome.nodes.values())).aggregation = "max"
    with pytest.raises(ValueError, match="aggregation 'max'"):
        SparseGraph.from_neat(genome, config)


# ----------------------------------------------------------------------------- structure
def test_levels_are_longest_paths_and_unused_nodes_dropped():
    # 0,1 inputs; 2 output; 3 -> 4 -> 2 chain, 0 -> 2 skip; 5 is fed but feeds nothing
    edges = [(0, 3, 1.0), (3, 4, 1.0), (4, 2, 1.0), (0, 2, 1.0), (1, 5, 1.0), (3, 5, 1.0)]
    g = SparseGraph.from_edges(edges, 2, 1, output_ids=[2], activations="identity")
    assert g.n_levels == 3
    assert g.plan["level"][[3, 4, 2]].tolist() == [0, 1, 2]
    assert 5 not in g.plan["nodes"]
    assert g.n_active_edges == 4 and g.n_edges == 6
    np.testing.assert_allclose(g.forward(np.array([[2.0, 7.0]]), device="cpu"), [[4.0]])


def test_bias_neuron_gets_its_own_first_level():
    # node 3 has no inputs (a neat "bias neuron"): act(bias) feeds the output
    g = SparseGraph.from_edges(
        [(3, 1, 2.0), (0, 1, 1.0)], 1, 1, biases=[0.0, 0.5, 0.0, 1.5], activations="identity"
    )
    assert g.n_levels == 2
    np.testing.assert_allclose(g.forward(np.array([[1.0], [-1.0]]), device="cpu"), [[4.5], [2.5]])


def test_random_layered_has_exact_depth(rng):
    for n_levels in (1, 3, 17):
        g = SparseGraph.random_layered(4, 2, n_levels, 500, random_state=int(rng.integers(1e6)))
        assert g.n_levels == n_levels
        assert g.n_active_edges == g.n_edges  # every node is needed


def test_build_plan_of_70k_edges():
    # its time is measured beside neat-python's in benchmarks/bench_sparsenet.py ("Build time")
    g = SparseGraph.random_layered(16, 4, 180, 70_000, random_state=0)
    assert g.n_edges > 60_000
    plan = g._build_plan()
    assert plan["level_ptr"].size - 1 == 180


def test_cycle_is_a_clear_error_naming_its_nodes():
    edges = [(0, 2, 1.0), (2, 3, 1.0), (3, 4, 1.0), (4, 2, 1.0), (4, 1, 1.0)]
    g = SparseGraph.from_edges(edges, 1, 1, output_ids=[1])
    with pytest.raises(ValueError, match=r"cycle through node\(s\) \[(2, 3, 4|3, 4, 2|4, 2, 3)\]"):
        g.forward(np.ones((1, 1)), device="cpu")
    with pytest.raises(ValueError, match="self-loop"):
        SparseGraph.from_edges([(0, 2, 1.0), (2, 2, 1.0), (2, 1, 1.0)], 1, 1, output_ids=[1])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(edges=[(0, 1, np.nan)]), "NaN"),
        (dict(edges=[(0, 1.5, 1.0)]), "integer"),
        (dict(edges=[(0, 7, 1.0)], biases=np.zeros(3)), r"unknown node id\(s\) \[7\]"),
        (dict(edges=[(-1, 1, 1.0)]), r"unknown node id\(s\) \[-1\]"),
        (dict(edges=[(1, 0, 1.0)]), "input node"),
        (dict(edges=[(0, 1, 1.0), (0, 1, 2.0)]), "duplicate edge 0 -> 1"),
        (dict(edges=[(0, 1)], weights=[1.0, 2.0]), "weights has 2 entries"),
        (dict(edges=[(0, 1)]), "weights are required"),
        (dict(edges=np.zeros((2, 4))), "shape"),
        (dict(edges=[(0, 1, 1.0)], activations="softmax"), "unknown activation"),
        (dict(edges=[(0, 1, 1.0)], biases=[0.0, np.inf]), "finite"),
    ],
)
def test_bad_edges_are_clear_errors(kwargs, match):
    kwargs = dict(kwargs)
    edges = kwargs.pop("edges")
    with pytest.raises(ValueError, match=match):
        SparseGraph.from_edges(edges, 1, 1, **kwargs)


def test_forward_rejects_bad_input(rng):
    g = SparseGraph.random_layered(3, 1, 3, 40, random_state=int(rng.integers(1e6)))
    with pytest.raises(ValueError, match=r"shape \(n_samples, 3\)"):
        g.forward(rng.normal(size=(4, 2)), device="cpu")
    X = rng.normal(size=(4, 3))
    X[1, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        g.forward(X, device="cpu")


def test_to_edges_round_trip(rng):
    g = SparseGraph.random_layered(3, 2, 4, 80, random_state=int(rng.integers(1e6)))
    edges, w, b = g.to_edges()
    g2 = SparseGraph.from_edges(edges, 3, 2, w, b, activations=g.activations, output_ids=g.output_ids)
    X = rng.normal(size=(6, 3))
    np.testing.assert_array_equal(g2.forward(X, device="cpu"), g.forward(X, device="cpu"))
    one = g.forward(X[0], device="cpu")
    assert one.shape == (2,)
    np.testing.assert_allclose(one, g.forward(X[:1], device="cpu")[0])


def _all_activation_graph(rng, n_levels=4):
    g = SparseGraph.random_layered(5, 3, n_levels, 300, random_state=int(rng.integers(1e6)))
    # every activation except 'inv' (1/z near z = 0 is too ill-conditioned for a parity check)
    choices = np.array([c for c in ACTIVATIONS.values() if c != ACTIVATIONS["inv"]])
    codes = rng.choice(choices, size=g.n_nodes).astype(np.int32)
    return SparseGraph(
        g.src, g.dst, g.weights, g.biases, rng.uniform(0.5, 1.5, g.n_nodes), codes, g.input_ids, g.output_ids
    )


def test_every_activation_matches_neat_formulas(rng):
    neat_act = pytest.importorskip("neat.activations")
    fset = neat_act.ActivationFunctionSet()
    from sknn_gpu.sparse._activations import NEAT_ACTIVATIONS, apply_activation

    z = np.concatenate([rng.normal(size=50) * 3, [0.0, -100.0, 100.0, 1e-9]])
    for name, code in NEAT_ACTIVATIONS.items():
        expected = np.array([fset.get(name)(float(v)) for v in z])
        got = apply_activation(np.array([code]), z[None, :], 4.97)[0]
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-300, err_msg=name)


# ----------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("activation", ["relu", "tanh", "sigmoid", "neat_sigmoid", "neat_tanh", "identity"])
def test_backward_matches_finite_differences(activation, rng):
    g = SparseGraph.random_layered(4, 2, 5, 120, activation=activation, random_state=int(rng.integers(1e6)))
    g = SparseGraph(
        g.src,
        g.dst,
        g.weights,
        g.biases,
        rng.uniform(0.5, 1.5, g.n_nodes),
        g.activations,
        g.input_ids,
        g.output_ids,
        slope=1.3,
    )
    X, Y = rng.normal(size=(7, 4)), rng.normal(size=(7, 2))
    w, b = g.plan_params()

    def loss(w, b):
        out = _graph_cpu.forward(g, X, w=w, b=b)
        return 0.5 * ((out - Y) ** 2).sum()

    out, V = _graph_cpu.forward(g, X, w=w, b=b, keep_values=True)
    gw, gb = _graph_cpu.backward(g, V, (out - Y).T, w)
    eps = 1e-6
    pick = rng.choice(w.size, size=min(40, w.size), replace=False)
    for i in pick:
        d = np.zeros_like(w)
        d[i] = eps
        num = (loss(w + d, b) - loss(w - d, b)) / (2 * eps)
        assert abs(num - gw[i]) <= 1e-5 * max(1.0, abs(num)), (i, num, gw[i])
    for i in rng.choice(b.size, size=min(20, b.size), replace=False):
        d = np.zeros_like(b)
        d[i] = eps
        num = (loss(w, b + d) - loss(w, b - d)) / (2 * eps)
        assert abs(num - gb[i]) <= 1e-5 * max(1.0, abs(num)), (i, num, gb[i])


def _layered(sizes, density, rng, activation="relu"):
    """A layered network with ``density`` of each layer's possible edges (all at 1.0)."""
    ids, start = [np.arange(sizes[0])], sizes[0] + sizes[-1]
    for h in sizes[1:-1]:
        ids.append(np.arange(start, start + h))
        start += h
    ids.append(np.arange(sizes[0], sizes[0] + sizes[-1]))
    edges = []
    for a, b in zip(ids[:-1], ids[1:]):
        i, j = np.nonzero(rng.random((a.size, b.size)) < density)
        edges.append(np.stack([a[i], b[j]], axis=1))
    edges = np.concatenate(edges)
    return SparseGraph.from_edges(
        edges,
        sizes[0],
        sizes[-1],
        rng.normal(size=len(edges)) / 4,
        rng.normal(size=start),
        activations=activation,
        n_nodes=start,
    )


def _mixed(g, rng):
    """``g`` with random trainable activations and responses per node."""
    codes = np.array([ACTIVATIONS[a] for a in ("relu", "tanh", "sigmoid", "identity")], dtype=np.int32)
    return SparseGraph(
        g.src,
        g.dst,
        g.weights,
        g.biases,
        rng.uniform(0.5, 1.5, g.n_nodes),
        rng.choice(codes, g.n_nodes).astype(np.int32),
        g.input_ids,
        g.output_ids,
        slope=1.3,
    )


def _dense_reference(g, X, G_out, w, b):
    """Training from the definition on a dense (slots x slots) weight matrix: outputs, every
    node value, and the gradients of the weights and biases."""
    from sknn_gpu.sparse._activations import activation_derivative, apply_activation

    p = g.plan
    n_in, n_comp = p["n_in"], p["nodes"].size
    W = np.zeros((n_in + n_comp, n_in + n_comp))
    W[n_in + p["row_of_edge"], p["indices"]] = w
    V = np.zeros((n_in + n_comp, X.shape[0]))
    V[:n_in] = X.T
    lp = p["level_ptr"]
    for r0, r1 in zip(lp[:-1], lp[1:]):
        z = b[r0:r1, None] + p["resp"][r0:r1, None] * (W[n_in + r0 : n_in + r1] @ V)
        V[n_in + r0 : n_in + r1] = apply_activation(p["act"][r0:r1], z, g.slope)
    G = np.zeros_like(V)
    np.add.at(G, p["out_slots"], G_out)
    D = np.zeros_like(V)
    for r0, r1 in zip(lp[-2::-1], lp[:0:-1]):
        s = slice(n_in + r0, n_in + r1)
        D[s] = G[s] * activation_derivative(p["act"][r0:r1], V[s], g.slope)
        G += W[s].T @ (p["resp"][r0:r1, None] * D[s])
    gW = (np.concatenate([np.zeros(n_in), p["resp"]])[:, None] * D) @ V.T
    return V[p["out_slots"]].T, V, gW[n_in + p["row_of_edge"], p["indices"]], D[n_in:].sum(axis=1)


def _bias_only_nodes(rng):
    """A hidden layer where 16 of 30 nodes have no incoming edge (their bias alone feeds the
    output): they form a level of their own whose sums are zero."""
    n_in, hidden = 8, range(9, 39)
    edges = [(i, h, rng.normal()) for k, h in enumerate(hidden) if not 8 <= k < 24 for i in range(n_in)]
    edges += [(h, n_in, rng.normal()) for h in hidden]
    g = SparseGraph.from_edges(
        edges, n_inputs=n_in, n_outputs=1, output_ids=[n_in], n_nodes=39, activations="tanh"
    )
    biases = rng.normal(size=g.n_nodes)
    return SparseGraph(g.src, g.dst, g.weights, biases, g.responses, g.activations, g.input_ids, g.output_ids)


BLOCK_GRAPHS = {
    "dense layers (whole blocks, no copy)": lambda rng: _layered([6, 20, 20, 2], 1.0, rng),
    "30% layers": lambda rng: _layered([30, 20, 20, 3], 0.3, rng),
    "2% layers": lambda rng: _layered([200, 60, 60, 3], 0.02, rng),
    "random DAG with skips, mixed activations": lambda rng: _mixed(
        SparseGraph.random_dag(5, 2, 40, 0.3, random_state=int(rng.integers(1e6))), rng
    ),
    "bias neuron": lambda rng: SparseGraph.from_edges(
        [(0, 3, 0.5), (1, 3, -1.0), (2, 3, 2.0), (3, 4, 1.0), (2, 4, 0.3)],
        n_inputs=2,
        n_outputs=1,
        output_ids=[4],
        n_nodes=5,
        activations="tanh",
    ),
    "nodes fed by no edge": _bias_only_nodes,
}


@pytest.fixture(params=["C kernels", "NumPy/SciPy"])
def sparse_kernels(request, monkeypatch):
    """The CPU engine's sparse products from the compiled C kernels, then from NumPy/SciPy
    (what runs where no C compiler works)."""
    from sknn_gpu._kernels._cpu import DISABLE_ENV, cpu_kernels_status, cpu_library

    if request.param == "C kernels":
        monkeypatch.delenv(DISABLE_ENV, raising=False)
        if cpu_library("sparsenet") is None:
            pytest.skip(f"no compiled CPU kernels here: {cpu_kernels_status()}")
    else:
        monkeypatch.setenv(DISABLE_ENV, "1")
    return request.param


@pytest.mark.parametrize("B", [9, 70], ids=["batch 9", "batch 70 (two slices and a tail)"])
@pytest.mark.parametrize("small_blocks", [False, True], ids=["whole levels", "levels cut by rows"])
@pytest.mark.parametrize("method", ["by cost", "dense", "sparse"])
@pytest.mark.parametrize("kind", list(BLOCK_GRAPHS))
def test_training_blocks_match_the_definition(
    kind, method, small_blocks, B, sparse_kernels, monkeypatch, rng
):
    """The CPU engine's training path computes what the definition says, whichever method
    each block takes (dense blocks through BLAS; sparse products and weight gradients at the
    edges, from the C kernels or from SciPy/NumPy; levels cut into row blocks), and its node
    values are those of the evaluation path."""
    if method != "by cost":  # free or prohibitive dense products: every block one way
        monkeypatch.setattr(_graph_cpu, "DENSE_NS", 0.0 if method == "dense" else 1e9)
    if small_blocks:
        monkeypatch.setattr(_graph_cpu, "BLOCK_BYTES", 8 * 64)
    g = BLOCK_GRAPHS[kind](rng)
    X, Y = rng.normal(size=(B, g.n_inputs)), rng.normal(size=(B, g.n_outputs))
    w, b = g.plan_params()
    w = w + rng.normal(scale=0.01, size=w.size)  # training passes its own weights
    out, V = _graph_cpu.forward(g, X, w=w, b=b, keep_values=True)
    gw, gb = _graph_cpu.backward(g, V, (out - Y).T, w)
    ref_out, ref_V, ref_gw, ref_gb = _dense_reference(g, X, (out - Y).T, w, b)
    np.testing.assert_allclose(out, ref_out, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(V, ref_V, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(gw, ref_gw, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gb, ref_gb, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(_graph_cpu.forward(g, X, w=w, b=b), out, rtol=1e-12, atol=1e-13)
    levels = _graph_cpu._layout(g)
    assert (g._cpu_layout[3] is None) == (sparse_kernels == "NumPy/SciPy")
    blocks = [blk for level in levels for blk in level[2]]
    dense = [(B <= blk.dense_up_to, B <= blk.gradient_dense_up_to) for blk in blocks]
    if method == "dense":
        assert all(fwd and grad for fwd, grad in dense)
        if small_blocks:  # a level whose rows x slots rectangle passes 64 entries is cut by rows
            lp, indptr, cols = g.plan["level_ptr"], g.plan["indptr"], g.plan["indices"]
            for k, level in enumerate(levels):
                r0, r1 = int(lp[k]), int(lp[k + 1])
                c = cols[indptr[r0] : indptr[r1]]
                wide = c.size and (r1 - r0) > 1 and (r1 - r0) * (int(c.max()) - int(c.min()) + 1) > 64
                assert (len(level[2]) > 1) == bool(wide)
    if kind == "nodes fed by no edge":
        assert [len(level[2]) for level in levels][0] == 0  # the level of bias-only nodes
    elif method == "sparse":
        assert all(blk.full or not (fwd or grad) for blk, (fwd, grad) in zip(blocks, dense))
    if kind.startswith("dense layers"):
        assert all(blk.full for blk in blocks)
    state = pickle.loads(pickle.dumps(g)).__dict__
    assert "_cpu_layout" not in state and "_cpu_layout" in g.__dict__  # kept, never pickled


def test_training_forward_of_rows_is_the_forward_of_those_rows(sparse_kernels, rng):
    """``rows=`` (the minibatch gathered into the node values) gives what ``X[rows]`` gives,
    in training and in evaluation; out-of-range rows are refused."""
    g = BLOCK_GRAPHS["30% layers"](rng)
    X = rng.normal(size=(40, g.n_inputs))
    rows = rng.permutation(40)[:13]
    out, V = _graph_cpu.forward(g, X, keep_values=True, rows=rows)
    ref_out, ref_V = _graph_cpu.forward(g, X[rows], keep_values=True)
    np.testing.assert_array_equal(V, ref_V)
    np.testing.assert_array_equal(out, ref_out)
    np.testing.assert_array_equal(_graph_cpu.forward(g, X, rows=rows), _graph_cpu.forward(g, X[rows]))
    Xf = np.asfortranarray(X)  # not C-contiguous: the NumPy gather
    np.testing.assert_array_equal(_graph_cpu.forward(g, Xf, keep_values=True, rows=rows)[1], ref_V)
    for bad in ([40], [-1], [[1, 2]]):
        with pytest.raises(IndexError, match="rows must be a 1-D array of row indices of X"):
            _graph_cpu.forward(g, X, rows=np.array(bad))


# ----------------------------------------------------------------------------- layout (issue 12)
def test_engines_have_the_same_functions_and_signatures():
    import inspect

    from sknn_gpu.sparse import _graph, _graph_cuda

    for name in ("forward", "backward"):
        cpu, cuda = getattr(_graph_cpu, name), getattr(_graph_cuda, name)
        assert inspect.signature(cpu) == inspect.signature(cuda), name
    assert _graph.engine("cpu") is _graph_cpu and _graph.engine("cuda") is _graph_cuda
    with pytest.raises(ValueError, match="resolved device"):
        _graph.engine("auto")
    # the engines never resolve a device, and the GPU engine keeps no kernel cache of its own
    for mod in (_graph_cpu, _graph_cuda):
        assert not hasattr(mod, "resolve_device") and not hasattr(mod, "_KERNELS")


def test_forward_resolves_device_once_per_call(monkeypatch, rng):
    from sknn_gpu.sparse import _graph

    calls = []
    real = _graph.resolve_device
    monkeypatch.setattr(_graph, "resolve_device", lambda d="auto": calls.append(d) or real(d))
    g = SparseGraph.random_layered(3, 2, 4, 60, random_state=int(rng.integers(1e6)))
    X = rng.normal(size=(5, 3))
    ref = g.forward(X, device="cpu")
    for device in ("cpu", "auto"):  # NumPy input: 'auto' may pick the GPU; the output stays NumPy
        calls.clear()
        out = g.forward(X, device=device)
        assert calls == [device]
        assert isinstance(out, np.ndarray)
        np.testing.assert_allclose(out, ref, rtol=1e-6)


def former_random_graph(n_in, n_out, n_h, density, activation, slope, rng):
    """SparseNetRegressor._random_graph as it was (dense candidate lists, O(n_hidden**2))."""
    code = ACTIVATIONS[activation]
    hidden_ids = n_in + n_out + rng.permutation(n_h)
    iu, ju = np.triu_indices(n_h, 1)
    src = np.concatenate(
        [
            np.repeat(np.arange(n_in), n_h),
            hidden_ids[iu],
            np.repeat(np.concatenate([np.arange(n_in), hidden_ids]), n_out),
        ]
    )
    dst = np.concatenate(
        [np.tile(hidden_ids, n_in), hidden_ids[ju], np.tile(np.arange(n_in, n_in + n_out), n_in + n_h)]
    )
    k = max(1, int(round(density * src.size)))
    pick = np.sort(rng.choice(src.size, size=k, replace=False))
    src, dst = src[pick], dst[pick]
    n_nodes = n_in + n_out + n_h
    fan_in = np.bincount(dst, minlength=n_nodes)
    fan_out = np.bincount(src, minlength=n_nodes)
    factor = 2.0 if code in (1, 2) else 6.0
    w = rng.uniform(-1.0, 1.0, k) * np.sqrt(factor / np.maximum(fan_in[dst] + fan_out[src], 1))
    b = rng.uniform(-1.0, 1.0, n_nodes) * np.sqrt(factor / np.maximum(fan_in + fan_out, 1))
    codes = np.full(n_nodes, code, dtype=np.int32)
    codes[n_in : n_in + n_out] = ACTIVATIONS["identity"]
    return SparseGraph(
        src, dst, w, b, np.ones(n_nodes), codes, np.arange(n_in), np.arange(n_in, n_in + n_out), slope=slope
    )


def assert_same_graph(a, b):
    for name in ("src", "dst", "weights", "biases", "responses", "activations", "input_ids", "output_ids"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.slope == b.slope


@pytest.mark.parametrize(
    "n_in, n_out, n_h, density", [(3, 1, 0, 0.5), (1, 2, 1, 1.0), (4, 2, 2, 0.3), (10, 1, 57, 0.13)]
)
def test_random_dag_is_the_former_random_topology(n_in, n_out, n_h, density):
    """Same draws, same graph, bit for bit: the pairs are decoded instead of listed."""
    for seed in (0, 7):
        ref = former_random_graph(n_in, n_out, n_h, density, "tanh", 2.5, np.random.RandomState(seed))
        got = SparseGraph.random_dag(
            n_in, n_out, n_h, density, activation="tanh", slope=2.5, random_state=seed
        )
        assert_same_graph(got, ref)
        # a DAG in the hidden order, every kept edge a forward pair
        assert got.n_levels >= 1 and got.n_edges == max(
            1, round(density * (n_in * n_h + n_h * (n_h - 1) // 2 + (n_in + n_h) * n_out))
        )


@pytest.mark.parametrize("code", [0, 1, 2, 3, 4, 5])
def test_activation_derivatives_match_finite_differences(code, rng):
    from sknn_gpu.sparse._activations import activation, derivative

    z = rng.normal(size=200) * 2
    z = z[np.abs(z) > 1e-3]  # relu's kink
    eps = 1e-6
    num = (activation(code, z + eps, 1.7) - activation(code, z - eps, 1.7)) / (2 * eps)
    np.testing.assert_allclose(derivative(code, activation(code, z, 1.7), 1.7), num, rtol=1e-6, atol=1e-8)
    with pytest.raises(ValueError, match="cannot be trained"):
        derivative(ACTIVATIONS["sin"], z, 1.0)


def _fake_device(g, n_sm=132, smem_optin=232448):
    """The parts of device_plan that the launch-configuration rules read (no GPU needed)."""
    p = g.plan
    lp, indptr = p["level_ptr"], p["indptr"]
    fan = np.diff(indptr)
    return {
        "lvl_rows": np.diff(lp).astype(np.int64),
        "lvl_edges": (indptr[lp[1:]] - indptr[lp[:-1]]).astype(np.int64),
        "lvl_fan_max": np.maximum.reduceat(fan, lp[:-1]).astype(np.int64),
        "n_slots": p["n_in"] + p["nodes"].size,
        "smem_optin": smem_optin,
        "n_sm": n_sm,
        "level_ptr_host": lp,
        "indptr_host": indptr,
        "indices_host": p["indices"],
    }


def test_fused_launch_rule_shared_memory_vs_grid(rng):
    from sknn_gpu.sparse._graph_plan_cuda import _fused_forward_config, _fused_lanes

    deep = _fake_device(SparseGraph.random_layered(16, 4, 60, 20_000, random_state=int(rng.integers(1e6))))
    wide = _fake_device(SparseGraph.random_layered(16, 4, 5, 20_000, random_state=int(rng.integers(1e6))))
    # deep and narrow at batch 1: one block, node values in shared memory
    mode, nblk, nthr, shared, lanes = _fused_forward_config(deep, 1, "auto")
    assert (mode, nblk) == ("smem", 1) and shared == 8 * deep["n_slots"]
    assert nthr % max(32, lanes.max()) == 0 and nthr <= 512
    # wide levels: several blocks, at most one per SM, grid barrier
    mode, nblk, nthr, shared, lanes = _fused_forward_config(wide, 1, "auto")
    assert mode == "grid" and 1 < nblk <= wide["n_sm"] and shared == 0 and nthr % lanes.max() == 0
    # values that do not fit in shared memory: grid, and forcing smem is a clear error
    assert _fused_forward_config(deep, 4096, "auto")[0] == "grid"
    with pytest.raises(ValueError, match="shared memory"):
        _fused_forward_config(deep, 4096, "smem")
    # lanes: powers of two; one per item for large batches; the longest fan-in covered in one pass
    assert np.all(_fused_lanes(wide, 64, 132 * 256, 256) == 1)
    lanes = _fused_lanes(deep, 1, 1024, 1024)
    assert np.all(lanes & (lanes - 1) == 0)
    assert np.all(2 * lanes >= deep["lvl_fan_max"])


def test_cluster_plan_sizes_clusters_lanes_and_shared_memory(rng):
    from sknn_gpu.sparse._graph_plan_cuda import CLUSTER_KMAX, CLUSTER_THREADS, _cluster_plan

    deep = _fake_device(SparseGraph.random_layered(16, 4, 60, 20_000, random_state=int(rng.integers(1e6))))
    wide = _fake_device(SparseGraph.random_layered(16, 4, 5, 60_000, random_state=int(rng.integers(1e6))))
    for d, B in ((deep, 1), (deep, 3), (wide, 1), (wide, 2)):
        C, nthr, shared, lanes, fits = _cluster_plan(d, B, 16)
        n_levels = d["lvl_rows"].size
        assert shared == 32 * n_levels + 8 * d["n_slots"] * B
        assert C in (1, 2, 4, 8, 16) and nthr <= CLUSTER_THREADS
        assert np.all(lanes & (lanes - 1) == 0) and nthr % max(32, lanes.max()) == 0
        items = d["lvl_rows"] * B
        if fits:  # one round per level, every row within CLUSTER_KMAX entries per lane
            assert np.all(items * lanes <= C * nthr)
            assert np.all(lanes * CLUSTER_KMAX >= d["lvl_fan_max"])
            # and no smaller cluster would have done
            assert C == 1 or not _cluster_plan(d, B, C // 2)[4]
    # narrow levels need one block; wide ones a cluster of several
    assert _cluster_plan(deep, 1, 16)[0] == 1
    assert _cluster_plan(wide, 1, 16)[0] > 1
    # capped at one block: the wide levels no longer fit in one round of KMAX entries
    assert not _cluster_plan(wide, 1, 1)[4]
    # node values beyond shared memory: no plan
    assert _cluster_plan(deep, 4096, 16) is None


def test_cluster_auto_rule_allows_a_short_tail_only(rng):
    from sknn_gpu.sparse._graph_plan_cuda import _cluster_plan, _cluster_worth

    # 64 inputs -> 64 -> 64 -> 4 outputs, fully connected: fan-in 64 on every level
    n_in, n_out, h = 64, 4, 64
    hid1, hid2 = np.arange(n_in + n_out, n_in + n_out + h), np.arange(n_in + n_out + h, n_in + n_out + 2 * h)
    layers = [np.arange(n_in), hid1, hid2, np.arange(n_in, n_in + n_out)]
    edges = np.concatenate(
        [np.stack(np.meshgrid(a, b, indexing="ij"), -1).reshape(-1, 2) for a, b in zip(layers, layers[1:])]
    )
    n_nodes = n_in + n_out + 2 * h
    g = SparseGraph.from_edges(
        edges, n_in, n_out, rng.normal(size=len(edges)), rng.normal(size=n_nodes), n_nodes=n_nodes
    )
    d = _fake_device(g)
    plan = _cluster_plan(d, 16, 16)  # 1,024 items x 8 lanes: 16 blocks of 512, one round
    assert plan[0] == 16 and plan[4] and _cluster_worth(d, 16, plan)
    plan = _cluster_plan(d, 32, 16)  # 4 lanes: 16 entries per lane, twice the registers' 8: still taken
    assert not plan[4] and plan[3].min() == 4 and _cluster_worth(d, 32, plan)
    plan = _cluster_plan(d, 64, 16)  # 2 lanes: 32 entries per lane, mostly through the CSR tail: not taken
    assert not plan[4] and not _cluster_worth(d, 64, plan)


@pytest.mark.parametrize("mode", ["smem", "grid", "cluster"])
@pytest.mark.parametrize("B", [2, 40])
def test_fused_edge_schedule_covers_every_edge_once(mode, B, rng):
    """The fused kernel's per-level edge schedule + CSR tail, walked as the kernel walks it
    (lane by lane), gives the CPU result: every edge exactly once, padding ignored."""
    from sknn_gpu.sparse._activations import apply_activation
    from sknn_gpu.sparse._graph_plan_cuda import (
        CLUSTER_KMAX,
        _cluster_plan,
        _edge_schedule,
        _fused_forward_config,
    )

    g = SparseGraph.random_layered(7, 3, 6, 1500, random_state=int(rng.integers(1e6)))
    d = _fake_device(g)
    X = rng.normal(size=(B, 7))
    if mode == "cluster":
        lanes = _cluster_plan(d, B, 1)[3]  # one block: the widest levels take the CSR tail
        off, ks, src, pos, tail = _edge_schedule(d, lanes, CLUSTER_KMAX)
        assert np.all(ks <= CLUSTER_KMAX) and src.shape == pos.shape
    else:
        lanes = _fused_forward_config(d, B, mode)[4]
        off, ks, src, pos, tail = _edge_schedule(d, lanes)
        assert np.all(ks <= 4) and src.shape == pos.shape
    if B == 40 and mode != "cluster":  # one lane per item: rows beyond 4 edges continue in the CSR tail
        assert np.all(lanes == 1) and tail.any()
    p = g.plan
    w, b = g.plan_params()
    lp, indptr, indices, n_in = p["level_ptr"], p["indptr"], p["indices"], p["n_in"]
    V = np.zeros((d["n_slots"], B))
    V[:n_in] = X.T
    seen = np.zeros(indices.size, dtype=np.int64)
    for lv in range(lp.size - 1):
        r0, R, L, K = lp[lv], lp[lv + 1] - lp[lv], int(lanes[lv]), int(ks[lv])
        for rr in range(R):
            acc = np.zeros(B)
            for lane in range(L):
                base = off[lv] + rr * L + lane
                for q in range(K):
                    i = base + q * R * L
                    if src[i] >= 0:
                        assert src[i] == indices[pos[i]]
                        seen[pos[i]] += 1
                        acc += w[pos[i]] * V[src[i]]
                for e in range(indptr[r0 + rr] + lane + K * L, indptr[r0 + rr + 1] if tail[lv] else 0, L):
                    seen[e] += 1
                    acc += w[e] * V[indices[e]]
            z = b[r0 + rr] + p["resp"][r0 + rr] * acc
            V[n_in + r0 + rr] = apply_activation(p["act"][r0 + rr : r0 + rr + 1], z[None, :], g.slope)[0]
    assert np.all(seen == 1)
    np.testing.assert_allclose(V[p["out_slots"]].T, g.forward(X, device="cpu"), rtol=1e-12, atol=1e-14)


# ----------------------------------------------------------------------------- GPU
@pytest.mark.cuda
@pytest.mark.parametrize("n_levels", [1, 5, 40, 180])
@pytest.mark.parametrize("batch", [1, 37, 1024])
def test_gpu_forward_matches_cpu_both_executors(n_levels, batch, rng):
    import cupy as cp

    from sknn_gpu.sparse._graph_plan_cuda import device_plan

    g = SparseGraph.random_layered(8, 3, n_levels, 6000, random_state=int(rng.integers(1e6)))
    X = rng.normal(size=(batch, 8))
    ref = g.forward(X, device="cpu")
    executors = ["level", "fused", "fused:grid", "auto"]
    if _smem_fits(g, batch):
        executors.append("fused:smem")
    else:
        with pytest.raises(ValueError, match="shared memory"):
            g.forward(cp.asarray(X), device="cuda", executor="fused:smem")
    if _cluster_fits(g, batch):
        executors.append("fused:cluster")
    else:
        with pytest.raises(ValueError, match="shared memory"):
            g.forward(cp.asarray(X), device="cuda", executor="fused:cluster")
    for executor in executors:
        for _ in range(2):  # the second call reuses the cached configuration and scratch buffers
            got = g.forward(cp.asarray(X), device="cuda", executor=executor)
            assert isinstance(got, cp.ndarray)
            np.testing.assert_allclose(got.get(), ref, rtol=1e-5, atol=1e-12, err_msg=executor)
    if n_levels == 180 and batch == 1:  # narrow levels: auto keeps node values in shared memory, one block
        cfg = _exec_config(device_plan(g), batch, "fused")
        assert (cfg["mode"], cfg["cluster"]) == ("cluster", 1)


def _smem_fits(g, batch):
    from sknn_gpu.sparse._graph_plan_cuda import device_plan

    d = device_plan(g)
    return 8 * d["n_slots"] * batch + 1024 <= d["smem_optin"]


def _cluster_fits(g, batch):
    from sknn_gpu.sparse._graph_plan_cuda import device_plan

    d = device_plan(g)
    return 32 * g.n_levels + 8 * d["n_slots"] * batch + 1024 <= d["smem_optin"]


def _forced(g, batch):
    """The forced fused modes that can run this batch (node values in shared memory or not)."""
    return (
        ("fused:grid",)
        + (("fused:smem",) if _smem_fits(g, batch) else ())
        + (("fused:cluster",) if _cluster_fits(g, batch) else ())
    )


@pytest.mark.cuda
@pytest.mark.parametrize("max_cluster", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("batch", [1, 3])
def test_gpu_cluster_forward_every_cluster_size(max_cluster, batch, monkeypatch, rng):
    """The cluster kernel at each cluster size (capped through CLUSTER_MAX; a size that does
    not fit one round takes the CSR tail), values and outputs equal to the CPU's."""
    import cupy as cp

    from sknn_gpu.sparse import _graph_plan_cuda
    from sknn_gpu.sparse._graph_cuda import forward as forward_gpu
    from sknn_gpu.sparse._graph_plan_cuda import device_plan

    monkeypatch.setattr(_graph_plan_cuda, "CLUSTER_MAX", max_cluster)
    g = SparseGraph.random_layered(20, 5, 6, 40_000, random_state=int(rng.integers(1e6)))
    X = rng.normal(size=(batch, 20))
    w, b = g.plan_params()
    ref, V = _graph_cpu.forward(g, X, w=w, b=b, keep_values=True)
    for _ in range(3):  # the later calls go through the cached launch record
        got = g.forward(cp.asarray(X), device="cuda", executor="fused:cluster")
        np.testing.assert_allclose(got.get(), ref, rtol=1e-5, atol=1e-12)
    cfg = _exec_config(device_plan(g), batch, "fused:cluster")
    assert cfg["mode"] == "cluster" and 1 <= cfg["cluster"] <= max_cluster
    outd, Vd = forward_gpu(g, cp.asarray(X), executor="fused:cluster", keep_values=True)
    np.testing.assert_allclose(Vd.get(), V, rtol=1e-5, atol=1e-12)
    np.testing.assert_allclose(outd.get(), ref, rtol=1e-5, atol=1e-12)


@pytest.mark.cuda
@pytest.mark.parametrize("mixed", [False, True])
@pytest.mark.parametrize("batch", [1, 3])
def test_gpu_cluster_builds_for_one_row_and_one_activation(mixed, batch, rng):
    """The cluster kernel is compiled per graph with the batch fixed at 1 for one-row calls
    and without the activation dispatch when every computed node has one activation: the
    same values as the CPU either way (mixed activations keep the per-node dispatch).

    The one activation is random_layered's default, neat_sigmoid: its builds at this graph's
    cluster sizes (2 for one row, 8 for three) are the ones the forward tests already
    compile, so this test adds no build of its own for them; which activation a uniform
    build bakes in is one constant of the same code, and every activation's formula is
    compared on the GPU through the dispatch in test_gpu_every_activation_matches_cpu."""
    import cupy as cp

    from sknn_gpu.sparse._activations import ACTIVATIONS
    from sknn_gpu.sparse._graph_plan_cuda import device_plan

    g = SparseGraph.random_layered(
        16, 4, 5, 6000, activation="neat_sigmoid", random_state=int(rng.integers(1e6))
    )
    if mixed:
        names = ("identity", "neat_sigmoid", "sigmoid", "tanh", "relu", "sin", "gauss")
        tame = [ACTIVATIONS[a] for a in names]
        acts = rng.choice(tame, size=g.activations.size).astype(np.int32)
        g = SparseGraph(
            g.src, g.dst, g.weights, g.biases, g.responses, acts, g.input_ids, g.output_ids, slope=g.slope
        )
    d = device_plan(g)
    assert (d["uniform_act"] == -1) == mixed
    if not mixed:
        assert d["uniform_act"] == ACTIVATIONS["neat_sigmoid"]
    X = rng.normal(size=(batch, 16))
    ref = g.forward(X, device="cpu")
    for _ in range(2):  # the second call goes through the cached launch record
        got = g.forward(cp.asarray(X), device="cuda", executor="fused:cluster").get()
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-12)
    np.testing.assert_array_equal(g.forward(X, device="cuda", executor="fused:cluster"), got)
    assert _exec_config(d, batch, "fused:cluster")["mode"] == "cluster"


def _exec_config(d, batch, executor):
    from sknn_gpu.sparse._graph_plan_cuda import _exec_config as cfg

    return cfg(d, batch, executor)


@pytest.mark.cuda
@pytest.mark.parametrize("executor", ["fused", "level", "fused:smem", "fused:grid", "fused:cluster"])
def test_gpu_forward_flags_non_finite_input(executor, rng):
    import cupy as cp

    g = SparseGraph.random_layered(6, 2, 7, 900, random_state=int(rng.integers(1e6)))
    X = rng.normal(size=(3, 6))
    ref = g.forward(X, device="cpu")
    for bad in (np.nan, np.inf, -np.inf):
        Xb = X.copy()
        Xb[2, int(rng.integers(6))] = bad
        with pytest.raises(ValueError, match="NaN or infinite"):
            g.forward(cp.asarray(Xb), device="cuda", executor=executor)
        # the flag is cleared: a finite input right after is accepted and correct
        got = g.forward(cp.asarray(X), device="cuda", executor=executor).get()
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-12)


@pytest.mark.cuda
@pytest.mark.parametrize("executor", ["auto", "level", "fused:smem", "fused:grid", "fused:cluster"])
def test_gpu_small_numpy_batches_run_from_pinned_memory(executor, monkeypatch, rng):
    """A small float64 NumPy batch on the GPU goes through pinned host memory
    (forward_host): the same bits as the CuPy input, NumPy out, 1-D in 1-D out, any
    memory order, non-finite input flagged; a larger batch takes the copy path."""
    import cupy as cp

    from sknn_gpu.sparse import _graph_cuda

    g = SparseGraph.random_layered(6, 2, 7, 900, random_state=int(rng.integers(1e6)))
    calls = []
    real = _graph_cuda.forward_host
    monkeypatch.setattr(
        _graph_cuda, "forward_host", lambda g, X, **k: calls.append(X.shape) or real(g, X, **k)
    )
    for batch in (1, 3, 1, 3):  # the second round reuses the pinned buffers
        X = rng.normal(size=(batch, 6))
        got = g.forward(X, device="cuda", executor=executor)
        assert type(got) is np.ndarray and got.shape == (batch, 2)
        np.testing.assert_array_equal(got, g.forward(cp.asarray(X), executor=executor).get())
        np.testing.assert_allclose(got, g.forward(X, device="cpu"), rtol=1e-5, atol=1e-12)
    one = g.forward(X[0], device="cuda", executor=executor)
    assert one.shape == (2,)
    np.testing.assert_array_equal(one, g.forward(cp.asarray(X[:1]), executor=executor).get()[0])
    Xf = np.asfortranarray(rng.normal(size=(5, 6)))
    np.testing.assert_array_equal(
        g.forward(Xf, device="cuda", executor=executor), g.forward(cp.asarray(Xf), executor=executor).get()
    )
    Xb = X.copy()
    Xb[-1, 2] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite"):
        g.forward(Xb, device="cuda", executor=executor)
    np.testing.assert_array_equal(g.forward(X, device="cuda", executor=executor), got)  # flag cleared
    assert calls == [(1, 6), (3, 6), (1, 6), (3, 6), (1, 6), (5, 6), (3, 6), (3, 6)]
    big = rng.normal(size=(_graph_cuda.HOST_MAPPED_MAX_BYTES // (8 * 8) + 1, 6))
    np.testing.assert_allclose(
        g.forward(big, device="cuda"), g.forward(big, device="cpu"), rtol=1e-5, atol=1e-12
    )
    assert len(calls) == 8  # too large for pinned memory: copied to the device


@pytest.mark.cuda
@pytest.mark.parametrize("executor", ["auto", "fused:cluster", "fused:smem", "level"])
def test_gpu_pinned_path_replays_a_captured_graph(executor, rng):
    """After its first call, a small NumPy batch replays one captured CUDA graph (the
    row's copy and the launch) where the launch needs no per-stream scratch: every
    replay reads the new row, on whatever stream is current, and flags bad input."""
    import cupy as cp

    g = SparseGraph.random_layered(10, 3, 6, 2500, random_state=int(rng.integers(1e6)))
    X = rng.normal(size=(40, 10))
    # one row at a time: the lanes per node, and so the order of the sums, depend on the batch
    ref = np.concatenate([g.forward(cp.asarray(X[i : i + 1]), executor=executor).get() for i in range(40)])
    outs = [g.forward(X[i : i + 1], device="cuda", executor=executor) for i in range(20)]
    with cp.cuda.Stream(non_blocking=True):
        outs += [g.forward(X[i : i + 1], device="cuda", executor=executor) for i in range(20, 40)]
    np.testing.assert_array_equal(np.concatenate(outs), ref)
    d = g._dev[cp.cuda.runtime.getDevice()]
    bufs = [b for k, b in d["mapped"].items() if k[1:] == (1, executor)]
    assert len(bufs) == 1
    cfg = d["cfg"][(1, executor)]
    assert (bufs[0][4] is not None) == (not cfg["needs_v"])
    bad = X[:1].copy()
    bad[0, 3] = np.inf
    with pytest.raises(ValueError, match="NaN or infinite"):
        g.forward(bad, device="cuda", executor=executor)
    np.testing.assert_array_equal(g.forward(X[5:6], device="cuda", executor=executor), ref[5:6])


@pytest.mark.cuda
def test_gpu_pinned_buffers_are_per_thread(rng):
    """Threads predicting one row each at the same time get their own rows' outputs."""
    from concurrent.futures import ThreadPoolExecutor

    import cupy as cp

    g = SparseGraph.random_layered(12, 3, 6, 4000, random_state=int(rng.integers(1e6)))
    X = rng.normal(size=(48, 12))
    ref = np.concatenate([g.forward(cp.asarray(X[i : i + 1])).get() for i in range(X.shape[0])])

    def rows(i):
        return [g.forward(X[i : i + 1], device="cuda") for _ in range(40)]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(rows, range(X.shape[0])))
    for i, outs in enumerate(results):
        for out in outs:
            np.testing.assert_array_equal(out, ref[i : i + 1])


@pytest.mark.cuda
def test_gpu_forward_wide_levels_use_grid_barrier(rng):
    import cupy as cp

    # 5 levels of ~2,000 nodes at batch 4: the fused kernel runs on many blocks
    g = SparseGraph.random_layered(10, 3, 5, 20_000, random_state=int(rng.integers(1e6)))
    X = rng.normal(size=(4, 10))
    ref = g.forward(X, device="cpu")
    for executor in ("fused", "fused:grid"):
        for _ in range(3):
            got = g.forward(cp.asarray(X), device="cuda", executor=executor)
            np.testing.assert_allclose(got.get(), ref, rtol=1e-5, atol=1e-12)


@pytest.mark.cuda
def test_gpu_every_activation_matches_cpu(rng):
    import cupy as cp

    g = _all_activation_graph(rng)
    for batch in (64, 2):
        X = rng.normal(size=(batch, 5))
        ref = g.forward(X, device="cpu")
        for executor in ("level", "fused") + _forced(g, batch):
            got = g.forward(cp.asarray(X), device="cuda", executor=executor).get()
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-10, err_msg=executor)


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 50, 700])
def test_gpu_backward_matches_cpu(batch, rng):
    """Gradients of relu, tanh and sigmoid nodes on the GPU equal the CPU's. One graph mixes
    the three (the backward kernels dispatch on each node's activation, so every derivative
    runs in one pass): one forward cluster build per batch (the per-node dispatch) instead
    of one per activation."""
    import cupy as cp

    from sknn_gpu.sparse._activations import ACTIVATIONS
    from sknn_gpu.sparse._graph_cuda import backward as backward_gpu
    from sknn_gpu.sparse._graph_cuda import forward as forward_gpu

    g = SparseGraph.random_layered(6, 2, 12, 3000, random_state=int(rng.integers(1e6)))
    codes = np.array([ACTIVATIONS[a] for a in ("relu", "tanh", "sigmoid")], dtype=np.int32)
    acts = rng.choice(codes, size=g.n_nodes).astype(np.int32)
    g = SparseGraph(
        g.src, g.dst, g.weights, g.biases, g.responses, acts, g.input_ids, g.output_ids, slope=g.slope
    )
    assert set(g.plan["act"].tolist()) == set(codes.tolist())  # every activation on computed nodes
    X, Y = rng.normal(size=(batch, 6)), rng.normal(size=(batch, 2))
    w, b = g.plan_params()
    out, V = _graph_cpu.forward(g, X, w=w, b=b, keep_values=True)
    gw, gb = _graph_cpu.backward(g, V, (out - Y).T, w)
    for executor in ("level", "fused") + _forced(g, batch):
        outd, Vd = forward_gpu(g, cp.asarray(X), executor=executor, keep_values=True)
        np.testing.assert_allclose(Vd.get(), V, rtol=1e-5, atol=1e-12, err_msg=executor)
        G = cp.ascontiguousarray((outd - cp.asarray(Y)).T)
        gwd, gbd = backward_gpu(g, Vd, G, cp.asarray(w), executor=executor)
        np.testing.assert_allclose(gwd.get(), gw, rtol=1e-5, atol=1e-10)
        np.testing.assert_allclose(gbd.get(), gb, rtol=1e-5, atol=1e-10)


@pytest.mark.cuda
def test_gpu_prepared_launch_and_lane_groups(rng):
    import cupy as cp

    from sknn_gpu.sparse._graph_cuda import prepared_forward
    from sknn_gpu.sparse._graph_plan_cuda import _level_lanes, device_plan

    # 4 outputs fed by a whole level: a long fan-in that batch 1 splits over lane groups
    g = SparseGraph.random_layered(12, 4, 5, 9000, random_state=int(rng.integers(1e6)))
    lanes = _level_lanes(device_plan(g), 1)
    assert lanes.max() == 32 and lanes.min() >= 1
    assert np.all(_level_lanes(device_plan(g), 64) == 1)
    # fused lanes: the outputs' long fan-in gets lane groups wider than a warp (block reduction)
    d = device_plan(g)
    fan_max = d["lvl_fan_max"]
    for executor, cap in (("fused:smem", 1024), ("fused:grid", 256)):
        lanes = _exec_config(d, 1, executor)["lanes"]
        assert lanes.max() > 32 and lanes.max() <= cap
        assert np.all(lanes & (lanes - 1) == 0)  # powers of two
        assert 2 * lanes[-1] >= fan_max[-1] or lanes[-1] == cap
    for batch in (1, 3, 40):
        X = rng.normal(size=(batch, 12))
        ref = g.forward(X, device="cpu")
        for executor in ("level", "fused") + _forced(g, batch):
            launch, out = prepared_forward(g, cp.asarray(X), executor=executor)
            launch()
            np.testing.assert_allclose(out.get(), ref, rtol=1e-5, atol=1e-12)
            out[...] = 0.0
            launch()  # a second launch recomputes into the same buffers
            np.testing.assert_allclose(out.get(), ref, rtol=1e-5, atol=1e-12)


@pytest.mark.cuda
def test_gpu_forward_with_cupy_input_resolves_nothing_and_stays_on_the_gpu(monkeypatch, rng):
    import cupy as cp

    from sknn_gpu.sparse import _graph

    calls = []
    real = _graph.resolve_device
    monkeypatch.setattr(_graph, "resolve_device", lambda d="auto": calls.append(d) or real(d))
    g = SparseGraph.random_layered(6, 2, 5, 500, random_state=int(rng.integers(1e6)))
    X = rng.normal(size=(9, 6))
    ref = g.forward(X, device="cpu")
    calls.clear()
    for Xd in (cp.asarray(X), cp.asarray(X, dtype=cp.float32), cp.asfortranarray(cp.asarray(X))):
        got = g.forward(Xd)  # 'auto': a CuPy input runs where it lives
        assert isinstance(got, cp.ndarray) and got.shape == (9, 2)
        np.testing.assert_allclose(got.get(), ref, rtol=1e-5, atol=1e-6)
    one = g.forward(cp.asarray(X[3]))
    assert isinstance(one, cp.ndarray) and one.shape == (2,)
    np.testing.assert_allclose(one.get(), ref[3], rtol=1e-5, atol=1e-12)
    assert calls == []
    out = g.forward(cp.asarray(X), device="cuda")
    assert calls == ["cuda"] and isinstance(out, cp.ndarray)


# ------------------------------------------------------------------ resident kernel
@pytest.mark.parametrize("bad", [0, 0.0, -1.0, np.nan, np.inf, 10.5, True, "0.01", None])
def test_resident_rejects_a_bad_idle_timeout(bad):
    g = SparseGraph.random_layered(6, 2, 3, 60, random_state=0)
    with pytest.raises(ValueError, match="idle_timeout must be a number of seconds"):
        g.resident(idle_timeout=bad, device="cpu")


def test_resident_block_changes_nothing_on_the_cpu(rng):
    g = SparseGraph.random_layered(6, 2, 3, 60, random_state=0)
    X = rng.normal(size=(4, 6))
    ref = g.forward(X, device="cpu")
    with g.resident(idle_timeout=10, device="cpu") as res:  # (the largest timeout allowed)
        assert res is None
        np.testing.assert_array_equal(g.forward(X, device="cpu"), ref)
        np.testing.assert_array_equal(g.forward(X[0], device="cpu"), ref[0])


def _resident_plan(g):
    from sknn_gpu.sparse._graph_plan_cuda import device_plan

    return device_plan(g)


def _resident(g):
    return _resident_plan(g)["resident"]


@pytest.mark.cuda
@pytest.mark.parametrize(
    "shape",
    [(10, 3, 6, 2500), (784, 10, 5, 70_000)],
    ids=["small", "mlp-sized"],
)
def test_gpu_resident_kernel_answers_like_the_launched_path(shape, rng):
    """Inside g.resident() a NumPy row is answered by the resident kernel with the same
    bits as the launched cluster kernel; another batch size relaunches it for that size;
    closing the block stops it."""
    g = SparseGraph.random_layered(*shape[:3], shape[3], random_state=int(rng.integers(1e6)))
    X = rng.normal(size=(30, g.n_inputs))
    ref = np.concatenate([g.forward(X[i : i + 1], device="cuda") for i in range(30)])
    ref3 = g.forward(X[:3], device="cuda")
    np.testing.assert_allclose(ref, g.forward(X, device="cpu"), rtol=1e-5, atol=1e-12)
    mode3 = _exec_config(_resident_plan(g), 3, "auto").get("mode")
    with g.resident(idle_timeout=10.0) as res:  # (no idle exit: the launches are counted)
        assert res is _resident(g)
        got = np.concatenate([g.forward(X[i : i + 1], device="cuda") for i in range(30)])
        np.testing.assert_array_equal(got, ref)
        assert res.launches == 1 and res.running
        np.testing.assert_array_equal(g.forward(X[0], device="cuda"), ref[0])  # 1-D in, 1-D out
        strided = np.repeat(X[:1], 2, axis=1)[0, ::2]  # (a strided view: copied into the pinned row)
        np.testing.assert_array_equal(g.forward(strided, device="cuda"), ref[0])
        np.testing.assert_array_equal(g.forward(X[:1].astype(">f8"), device="cuda"), ref[:1])  # usual checks
        # three rows: relaunched for them where the cluster kernel runs three rows, else the usual
        # path, which stops the resident kernel first when it has a grid barrier (every SM needed)
        np.testing.assert_array_equal(g.forward(X[:3], device="cuda"), ref3)
        np.testing.assert_array_equal(g.forward(X[4:5], device="cuda"), ref[4:5])
        assert res.launches == {"cluster": 3, "grid": 2}.get(mode3, 1)
    assert not res.running and res.stream.done
    np.testing.assert_array_equal(g.forward(X[7:8], device="cuda"), ref[7:8])  # the launched path again


@pytest.mark.cuda
def test_gpu_resident_kernel_flags_bad_rows_and_keeps_answering(rng):
    g = SparseGraph.random_layered(12, 3, 6, 4000, random_state=int(rng.integers(1e6)))
    X = rng.normal(size=(4, 12))
    ref = np.concatenate([g.forward(X[i : i + 1], device="cuda") for i in range(4)])
    with g.resident(idle_timeout=10.0) as res:
        for bad in (np.nan, np.inf, -np.inf):
            Xb = X[:1].copy()
            Xb[0, 5] = bad
            with pytest.raises(ValueError, match="NaN or infinite"):
                g.forward(Xb, device="cuda")
            np.testing.assert_array_equal(g.forward(X[2:3], device="cuda"), ref[2:3])
        assert res.launches == 1


@pytest.mark.cuda
def test_gpu_resident_kernel_leaves_when_idle_and_comes_back(rng):
    """After idle_timeout without a call the kernel leaves by itself (so a device-wide
    synchronization inside the block returns); the next call relaunches it."""
    import cupy as cp

    from sknn_gpu.sparse._graph_resident_cuda import _EXITED

    g = SparseGraph.random_layered(12, 3, 6, 4000, random_state=int(rng.integers(1e6)))
    X = rng.normal(size=(5, 12))
    ref = np.concatenate([g.forward(X[i : i + 1], device="cuda") for i in range(5)])
    with g.resident(idle_timeout=0.002) as res:
        np.testing.assert_array_equal(g.forward(X[:1], device="cuda"), ref[:1])
        cp.cuda.Device().synchronize()  # returns once the idle kernel has left by itself
        assert res.ctrl[_EXITED] == 1 and res.stream.done
        for i in range(1, 5):
            np.testing.assert_array_equal(g.forward(X[i : i + 1], device="cuda"), ref[i : i + 1])
        assert res.launches == 2


@pytest.mark.cuda
def test_gpu_resident_kernel_serves_threads_and_nested_blocks(rng):
    from concurrent.futures import ThreadPoolExecutor

    g = SparseGraph.random_layered(12, 3, 6, 4000, random_state=int(rng.integers(1e6)))
    X = rng.normal(size=(16, 12))
    ref = np.concatenate([g.forward(X[i : i + 1], device="cuda") for i in range(16)])

    def rows(i):
        return [g.forward(X[i : i + 1], device="cuda") for _ in range(25)]

    with g.resident(idle_timeout=10.0) as res:
        np.testing.assert_array_equal(g.forward(X[:1], device="cuda"), ref[:1])
        with g.resident() as inner:
            assert inner is res and res.users == 2
        assert res.users == 1 and res.running  # the outer block still holds it
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(rows, range(16)))
    assert res.users == 0 and not res.running
    for i, outs in enumerate(results):
        for out in outs:
            np.testing.assert_array_equal(out, ref[i : i + 1])


@pytest.mark.cuda
def test_gpu_resident_refuses_a_graph_too_large_for_one_cluster():
    g = SparseGraph.random_layered(30_000, 2, 3, 60_000, random_state=0)  # 240 KB of node values
    with pytest.raises(ValueError, match="cannot run as a resident kernel"):
        with g.resident():
            pass


class _FakeStream:
    """Stands for the resident kernel's CUDA stream: the 'kernel' is a host thread."""

    def __init__(self):
        self.thread = None

    @property
    def done(self):
        return self.thread is None or not self.thread.is_alive()

    def synchronize(self):
        if self.thread is not None:
            self.thread.join(5.0)
            assert not self.thread.is_alive(), "the fake kernel did not leave"


def _fake_resident(monkeypatch, behaviour=None, n_in=3, n_out=2):
    """A ResidentForward whose kernel is a host thread speaking the same protocol over
    NumPy arrays (no GPU): it answers out = sum(row) * (1, 2, ...) per row, flags a
    non-finite row, leaves on STOP or after its idle time. ``behaviour(launch_number)``
    may return 'leave' (leave at once, saying so, without answering), 'vanish' (leave
    without a word), 'mute' (stay, never answer) or 'late' (say DONE first, then write the
    outputs one by one: the device does not order them) for a launch."""
    import threading
    import time as _time
    from types import SimpleNamespace

    from sknn_gpu.sparse import _graph_resident_cuda as gr

    monkeypatch.setattr(gr, "host_mapped", lambda shape, dtype: (lambda a: (a, a))(np.zeros(shape, dtype)))
    fake_cp = SimpleNamespace(cuda=SimpleNamespace(Stream=lambda non_blocking: _FakeStream()))
    monkeypatch.setattr(gr, "get_cupy", lambda: fake_cp)
    d = {"n_in": n_in, "n_out": n_out, "bar_err_np": np.zeros(1, np.int32), "flag_np": np.zeros(1, np.int32)}
    launches = []

    def launch(x, out, ctrl, idle_ns, stream):
        launches.append(x.shape[0])
        mode = behaviour(len(launches)) if behaviour else None

        def kernel():
            last, t0 = int(ctrl[gr._DONE]), _time.monotonic()
            if mode in ("leave", "vanish"):
                if mode == "leave":
                    ctrl[gr._EXITED] = 1
                return
            while True:
                _time.sleep(0)  # (let the caller's thread run: both spin under the GIL)
                v = int(ctrl[gr._REQ])
                if v == gr._STOP:
                    break
                if v != last and mode != "mute":
                    rows = x.copy()
                    if not np.isfinite(rows).all():
                        d["flag_np"][0] = 1
                    ans = rows.sum(axis=1, keepdims=True) * np.arange(1, out.shape[1] + 1)
                    if mode == "late":
                        ctrl[gr._DONE] = v
                        for i in np.ndindex(out.shape):
                            _time.sleep(0.002)
                            out[i] = ans[i]
                    else:
                        out[:] = ans
                    ctrl[gr._DONE] = last = v
                    t0 = _time.monotonic()
                elif mode != "mute" and _time.monotonic() - t0 > idle_ns * 1e-9:
                    break
            ctrl[gr._EXITED] = 1

        stream.thread = threading.Thread(target=kernel, daemon=True)
        stream.thread.start()

    cfg = {"resident": launch}
    res = gr.ResidentForward(d, idle_ns=0.5e9)
    return res, cfg, d, launches


def _expected(X):
    return X.sum(axis=1, keepdims=True) * np.arange(1, 3)


def test_resident_protocol_answers_and_relaunches_after_an_idle_exit(monkeypatch, rng):
    """The host side of the resident kernel (no GPU: a host thread speaks the protocol):
    rows are answered in order by one launch; after the kernel has left idle the next
    call relaunches it; another batch size restarts it with buffers of that size; stop()
    ends it and unregisters it."""
    import time as _time

    from sknn_gpu import _kernels

    res, cfg, d, launches = _fake_resident(monkeypatch)
    X = rng.normal(size=(20, 3))
    for i in range(20):
        np.testing.assert_array_equal(res.call(cfg, X[i : i + 1]), _expected(X[i : i + 1]))
    assert launches == [1] and res.running and res in _kernels._resident
    res.idle_ns = int(1e6)  # 1 ms: the next launch leaves when idle
    res.stop()
    assert not res.running and res not in _kernels._resident
    np.testing.assert_array_equal(res.call(cfg, X[:1]), _expected(X[:1]))
    for _ in range(500):  # it leaves when idle (up to 5 s on a loaded machine)
        if res.stream.done:
            break
        _time.sleep(0.01)
    assert res.stream.done
    np.testing.assert_array_equal(res.call(cfg, X[1:2]), _expected(X[1:2]))
    np.testing.assert_array_equal(res.call(cfg, X[2:5]), _expected(X[2:5]))  # 3 rows: restarted
    # one launch each: the first rows, after stop(), after the idle exit, the 3-row restart;
    # on a loaded machine a kernel idle for 1 ms may leave before it sees the next request,
    # and the call relaunches it (the race the next test pins down): more 1-row launches
    assert launches[:3] == [1, 1, 1] and launches[-1] == 3 and set(launches[3:-1]) <= {1}
    _kernels.stop_resident_kernels()  # (what a grid-barrier launch does first)
    assert not res.running and res.stream.done


def test_resident_protocol_relaunches_a_kernel_that_left_before_seeing_the_request(monkeypatch, rng):
    """The race at the idle timeout: the kernel leaves (saying so) just as a request is
    posted; the call sees EXITED without DONE, relaunches and posts again."""
    res, cfg, _, launches = _fake_resident(monkeypatch, behaviour=lambda n: "leave" if n == 1 else None)
    X = rng.normal(size=(2, 3))
    np.testing.assert_array_equal(res.call(cfg, X[:1]), _expected(X[:1]))
    np.testing.assert_array_equal(res.call(cfg, X[1:]), _expected(X[1:]))
    assert launches == [1, 1]
    res.stop()


def test_resident_protocol_waits_for_every_output_word(monkeypatch, rng):
    """The kernel writes outputs unfenced and in no order, and its done word may come
    first: a call returns only when every output word of every row has been written."""
    res, cfg, _, _ = _fake_resident(monkeypatch, behaviour=lambda n: "late", n_out=2)
    X = rng.normal(size=(3, 3))
    for i in range(3):
        np.testing.assert_array_equal(res.call(cfg, X[i : i + 1]), _expected(X[i : i + 1]))
    np.testing.assert_array_equal(res.call(cfg, X), _expected(X))
    res.stop()


def test_resident_protocol_flags_bad_rows_and_reports_a_silent_or_mute_kernel(monkeypatch, rng):
    from sknn_gpu.sparse import _graph_resident_cuda as gr

    res, cfg, d, _ = _fake_resident(monkeypatch)
    X = rng.normal(size=(1, 3))
    with pytest.raises(ValueError, match="NaN or infinite"):
        res.call(cfg, np.array([[1.0, np.nan, 2.0]]))
    assert d["flag_np"][0] == 0  # reset for the next call
    np.testing.assert_array_equal(res.call(cfg, X), _expected(X))
    res.stop()

    res, cfg, _, _ = _fake_resident(monkeypatch, behaviour=lambda n: "vanish")
    with pytest.raises(RuntimeError, match="stopped without answering"):
        res.call(cfg, X)

    monkeypatch.setattr(gr, "RESIDENT_ANSWER_S", 0.05)
    res, cfg, _, _ = _fake_resident(monkeypatch, behaviour=lambda n: "mute")
    with pytest.raises(RuntimeError, match="did not answer within"):
        res.call(cfg, X)
    res.stop()  # a mute kernel still leaves on STOP
    assert not res.running


def test_forward_asks_the_resident_path_once(monkeypatch):
    """g.forward() of a NumPy row (no GPU: the device plan and the device ordinal are
    stand-ins): inside a resident block the row goes to the resident call, 1-D in and
    out; without one, forward() asks the resident path once and then takes the launch
    path (forward_host does not ask again)."""
    from sknn_gpu.sparse import _graph as G
    from sknn_gpu.sparse import _graph_cuda as gc

    g = SparseGraph.random_layered(4, 1, 3, 20, random_state=0)
    rows = []

    class _Resident:
        users = 1

        def call(self, cfg, X):
            rows.append(X.shape)
            return np.full((1, g.n_outputs), 7.0)

    d = {
        "resident": _Resident(),
        "n_in": 4,
        "io_bytes": 8 * (4 + g.n_outputs),
        "cfg": {(1, "auto"): {"mode": "cluster"}},
    }
    g._dev = {0: d}
    monkeypatch.setattr(gc, "current_device_id", lambda: 0)
    np.testing.assert_array_equal(g.forward(np.ones(4), device="cuda"), np.full(g.n_outputs, 7.0))
    assert rows == [(4,)]

    d["resident"] = None
    asked = []
    real = gc.resident_forward
    monkeypatch.setattr(gc, "resident_forward", lambda *a, **k: asked.append(1) or real(*a, **k))
    monkeypatch.setattr(G, "resolve_device", lambda device: "cuda")

    def launch_path(*a, **k):
        raise RuntimeError("the launch path")

    monkeypatch.setattr(gc, "_plan_config", launch_path)
    with pytest.raises(RuntimeError, match="the launch path"):
        g.forward(np.ones((1, 4)), device="cuda")
    assert len(asked) == 1
