"""Property and fuzz tests of the sparse family (issue 15): SparseGraph and SparseNetRegressor.

* random DAGs (random ids, activations, biases, responses): ``SparseGraph.forward`` equals a
  naive node-by-node evaluation straight from the edge list (no level plan, no CSR);
* every dtype and layout of ``X`` gives the float64 result bit for bit; extreme input
  magnitudes stay finite and in range through bounded activations;
* ``SparseGraph.random_dag`` is the former (dense-listing) construction, bit for bit;
* ``SparseNetRegressor`` on random shapes and magnitudes fits and predicts finite values;
* tables of bad inputs with the exact error each must raise, over the ``device`` fixture
  (the cuda twin feeds the same inputs as CuPy arrays on the GPU).
"""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.exceptions import ConvergenceWarning
from test_sparse_graph import assert_same_graph, former_random_graph

from sknn_gpu._backend import InsufficientMemoryError
from sknn_gpu.sparse import ACTIVATIONS, SparseGraph, SparseNetRegressor
from sknn_gpu.sparse._activations import activation

# activations with bounded output (any finite input gives a value in [-1.0507 * 1.6733, 1])
BOUNDED = [
    ACTIVATIONS[a] for a in ("neat_sigmoid", "sigmoid", "tanh", "neat_tanh", "clamped", "sin", "gauss", "hat")
]
# every activation whose values stay moderate on moderate inputs (exp, inv, log, square, cube
# are left out: chains of them overflow and the comparison would be inf against inf)
MODERATE = BOUNDED + [ACTIVATIONS[a] for a in ("identity", "relu", "elu", "lelu", "selu", "softplus", "abs")]

FUZZ = settings(max_examples=80)


def on_device(X, device):
    """``X`` as the device's array type (CuPy for the cuda twin)."""
    if device == "cuda":
        import cupy as cp

        return cp.asarray(X)
    return X


def host(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


def random_graph(seed, n_in, n_out, n_hidden, p, codes):
    """A random DAG over shuffled node ids: inputs, outputs and hidden nodes anywhere in 0..n-1."""
    rng = np.random.default_rng(seed)
    n = n_in + n_out + n_hidden
    ids = rng.permutation(n)
    inputs, outputs, hidden = ids[:n_in], ids[n_in : n_in + n_out], ids[n_in + n_out :]
    order = rng.permutation(np.concatenate([hidden, outputs]))  # a topological order of the rest
    src, dst = [], []
    for j, b in enumerate(order):
        for a in np.concatenate([inputs, order[:j]]):
            if rng.random() < p:
                src.append(a)
                dst.append(b)
    edges = np.stack([np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64)], 1).reshape(-1, 2)
    return SparseGraph.from_edges(
        edges,
        n_in,
        n_out,
        rng.normal(size=len(src)),
        rng.normal(size=n),
        responses=rng.uniform(-1.5, 1.5, n),
        activations=rng.choice(codes, size=n).tolist(),
        input_ids=inputs,
        output_ids=outputs,
        slope=float(rng.uniform(0.5, 6.0)),
    )


def naive_forward(g, X):
    """Every node from its definition, one by one, memoized: no plan, no levels, no CSR."""
    into = {}
    for e in range(g.n_edges):
        into.setdefault(int(g.dst[e]), []).append((int(g.src[e]), float(g.weights[e])))
    position = {int(i): k for k, i in enumerate(g.input_ids)}
    value = {}

    def node(n):
        if n not in value:
            if n in position:
                value[n] = X[:, position[n]]
            else:
                z = sum((w * node(s) for s, w in into.get(n, [])), np.zeros(X.shape[0]))
                z = g.biases[n] + g.responses[n] * z
                value[n] = activation(int(g.activations[n]), z, g.slope)
        return value[n]

    return np.stack([node(int(o)) for o in g.output_ids], axis=1)


graphs = st.builds(
    lambda seed, n_in, n_out, n_hidden, p: (seed, n_in, n_out, n_hidden, p),
    st.integers(0, 2**32 - 1),
    st.integers(1, 4),
    st.integers(1, 3),
    st.integers(0, 14),
    st.floats(0.05, 0.7),
)


# ----------------------------------------------------------------------------- forward == naive
@FUZZ
@given(spec=graphs, batch=st.integers(1, 9), scale=st.sampled_from([1e-3, 1.0, 3.0]))
def test_forward_equals_naive_evaluation(device, spec, batch, scale):
    g = random_graph(*spec, MODERATE)
    X = np.random.default_rng(spec[0]).normal(size=(batch, g.n_inputs)) * scale
    expected = naive_forward(g, X)
    got = host(g.forward(on_device(X, device), device=device))
    assert got.shape == (batch, g.n_outputs)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9 * max(1.0, np.abs(expected).max()))


@FUZZ
@given(spec=graphs, exponent=st.integers(-300, 300))
def test_extreme_magnitudes_stay_finite_through_bounded_activations(device, spec, exponent):
    g = random_graph(*spec, BOUNDED)
    X = np.random.default_rng(spec[0]).uniform(-1, 1, size=(3, g.n_inputs)) * 10.0**exponent
    got = host(g.forward(on_device(X, device), device=device))
    assert np.all(np.isfinite(got))
    assert np.all(np.abs(got) <= 1.0 + 1e-12)  # every node (outputs included) is bounded
    np.testing.assert_allclose(got, naive_forward(g, X), rtol=1e-9, atol=1e-9)


@settings(max_examples=40)
@given(
    spec=graphs,
    layout=st.sampled_from(["float32", "int32", "bool", "fortran", "strided", "readonly", "list"]),
)
def test_every_dtype_and_layout_gives_the_float64_result(spec, layout):
    g = random_graph(*spec, MODERATE)
    rng = np.random.default_rng(spec[0])
    base = rng.normal(size=(6, 2 * g.n_inputs)) * 4
    X = {
        "float32": base[:, : g.n_inputs].astype(np.float32),
        "int32": np.round(base[:, : g.n_inputs]).astype(np.int32),
        "bool": base[:, : g.n_inputs] > 0,
        "fortran": np.asfortranarray(base[:, : g.n_inputs]),
        "strided": base[:, ::2],
        "readonly": base[:, : g.n_inputs].copy(),
        "list": base[:, : g.n_inputs].tolist(),
    }[layout]
    if layout == "readonly":
        X.flags.writeable = False
    ref = g.forward(np.ascontiguousarray(np.asarray(X, dtype=np.float64)), device="cpu")
    np.testing.assert_array_equal(g.forward(X, device="cpu"), ref)
    one = g.forward(np.asarray(X)[2], device="cpu")  # 1-D in, 1-D out
    np.testing.assert_array_equal(one, ref[2])


# ----------------------------------------------------------------------------- random_dag
@settings(max_examples=60)
@given(
    n_in=st.integers(1, 6),
    n_out=st.integers(1, 3),
    n_hidden=st.integers(0, 40),
    density=st.floats(0.01, 1.0),
    seed=st.integers(0, 2**31 - 1),
    act=st.sampled_from(["relu", "tanh", "sigmoid", "neat_sigmoid"]),
)
def test_random_dag_is_the_former_construction(n_in, n_out, n_hidden, density, seed, act):
    ref = former_random_graph(n_in, n_out, n_hidden, density, act, 4.97, np.random.RandomState(seed))
    got = SparseGraph.random_dag(n_in, n_out, n_hidden, density, activation=act, random_state=seed)
    assert_same_graph(got, ref)
    assert got.n_levels >= 1  # acyclic: the plan builds


# ----------------------------------------------------------------------------- the estimator
@settings(max_examples=20)
@given(
    n=st.integers(12, 60),
    n_features=st.integers(1, 5),
    n_outputs=st.integers(1, 2),
    x_exp=st.integers(-8, 8),
    y_exp=st.integers(-50, 97),  # |y| reaches ~10 x 10**y_exp: fit refuses targets beyond 1e100
    topology=st.sampled_from(["prune", "random"]),
    seed=st.integers(0, 2**31 - 1),
)
def test_regressor_fits_and_predicts_finite_values(n, n_features, n_outputs, x_exp, y_exp, topology, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, n_features)) * 10.0**x_exp
    y = X @ rng.normal(size=(n_features, n_outputs)) / 10.0**x_exp + rng.normal(size=(n, n_outputs))
    y = y * 10.0**y_exp
    reg = SparseNetRegressor(
        topology,
        hidden_layer_sizes=(6,),
        n_hidden=6,
        density=0.5,
        max_iter=3,
        n_prune_steps=1,
        random_state=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        reg.set_params(device="cpu").fit(X, y[:, 0] if n_outputs == 1 else y)
    pred = reg.predict(X)
    assert pred.shape == ((n,) if n_outputs == 1 else (n, n_outputs))
    assert np.all(np.isfinite(pred))
    assert np.all(np.isfinite(reg.loss_curve_))


# ----------------------------------------------------------------------------- bad inputs
def _graph3():
    return SparseGraph.random_layered(3, 2, 3, 40, random_state=0)


FORWARD_BAD = [
    ("complex X", lambda: np.ones((2, 3)) + 1j, TypeError, "complex"),
    (
        "list of the wrong width",
        lambda: [[1.0, 2.0], [3.0, 4.0]],
        ValueError,
        r"shape \(n_samples, 3\), got \(2, 2\)",
    ),
    ("1-D of the wrong width", lambda: np.ones(4), ValueError, r"shape \(n_samples, 3\), got \(4,\)"),
    ("3-D", lambda: np.ones((2, 3, 1)), ValueError, r"shape \(n_samples, 3\)"),
    ("NaN", lambda: np.array([[0.0, np.nan, 1.0]]), ValueError, "NaN or infinite"),
    ("inf", lambda: np.array([[0.0, 1.0, -np.inf]]), ValueError, "NaN or infinite"),
    ("strings", lambda: np.array([["a", "b", "c"]]), TypeError, "real numbers"),
    ("sparse matrix", lambda: sp.csr_matrix(np.ones((2, 3))), TypeError, "dense"),
]


@pytest.mark.parametrize("case, make_X, error, match", FORWARD_BAD, ids=[c[0] for c in FORWARD_BAD])
def test_forward_bad_inputs(device, case, make_X, error, match):
    g = _graph3()
    X = make_X()
    if device == "cuda" and isinstance(X, np.ndarray) and X.dtype.kind in "fc":
        X = on_device(X, device)  # numeric input goes in as CuPy on the GPU twin
    with pytest.raises(error, match=match):
        g.forward(X, device=device)


def _xy(n=40, f=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, f))
    return X, X @ rng.normal(size=f)


def _with(y=None, X=None):
    Xd, yd = _xy()
    return (Xd if X is None else X(Xd)), (yd if y is None else y(yd))


def _set(a, index, value):
    a = a.astype(np.result_type(a, value), copy=True)
    a[index] = value
    return a


ESTIMATOR_BAD = [
    ("hidden [0]", dict(hidden_layer_sizes=[0]), _with, ValueError, "hidden_layer_sizes"),
    ("hidden [2.5]", dict(hidden_layer_sizes=[2.5]), _with, ValueError, "hidden_layer_sizes"),
    ("hidden [-5]", dict(hidden_layer_sizes=[-5]), _with, ValueError, "hidden_layer_sizes"),
    ("hidden (8, 0)", dict(hidden_layer_sizes=(8, 0)), _with, ValueError, "hidden_layer_sizes"),
    (
        "target 1e300",
        {},
        lambda: _with(y=lambda y: _set(y, 3, 1e300)),
        ValueError,
        r"magnitude 1e\+300.*1e\+100",
    ),
    ("target -1e101", {}, lambda: _with(y=lambda y: _set(y, 0, -1e101)), ValueError, "magnitude"),
    ("NaN in X", {}, lambda: _with(X=lambda X: _set(X, (2, 1), np.nan)), ValueError, "NaN"),
    ("inf in y", {}, lambda: _with(y=lambda y: _set(y, 5, np.inf)), ValueError, "infinity"),
    ("complex X", {}, lambda: _with(X=lambda X: X + 1j), ValueError, "omplex"),
    ("density 0", dict(density=0.0), _with, ValueError, "density"),
    (
        "n_hidden 10**6",
        dict(topology="random", n_hidden=10**6),
        _with,
        InsufficientMemoryError,
        r"needs \d+ bytes .* only \d+ bytes .* free",
    ),
    (
        "hidden (10**6, 10**6)",
        dict(hidden_layer_sizes=(10**6, 10**6)),
        _with,
        InsufficientMemoryError,
        r"SparseNetRegressor\.fit .*needs \d+ bytes",
    ),
]


@pytest.mark.parametrize("case, params, data, error, match", ESTIMATOR_BAD, ids=[c[0] for c in ESTIMATOR_BAD])
def test_estimator_bad_inputs(device, case, params, data, error, match):
    X, y = data()
    reg = SparseNetRegressor(max_iter=2, hidden_layer_sizes=(8,), device=device).set_params(**params)
    with pytest.raises(error, match=match):
        reg.fit(on_device(X, device), on_device(y, device))
    assert not hasattr(reg, "graph_")  # refused before anything was built


def test_estimator_predict_bad_inputs(device):
    X, y = _xy()
    reg = SparseNetRegressor("random", n_hidden=8, max_iter=2, random_state=0, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        reg.fit(on_device(X, device), on_device(y, device))
    with pytest.raises(ValueError, match="expecting 4 features"):
        reg.predict(on_device(X[:, :3], device))
    with pytest.raises(ValueError, match="NaN"):
        reg.predict(on_device(_set(X, (0, 0), np.nan), device))
    with pytest.raises(ValueError, match="y has 2 targets"):
        reg.partial_fit(on_device(X, device), on_device(np.stack([y, y], 1), device))


CONSTRUCTION_BAD = [
    (
        "node id 10**12",
        lambda: SparseGraph.from_edges([(0, 10**12, 1.0)], 1, 1),
        InsufficientMemoryError,
        r"from_edges with 1000000000001 nodes .* needs \d+ bytes",
    ),
    ("slope nan", lambda: SparseGraph.from_edges([(0, 1, 1.0)], 1, 1, slope=np.nan), ValueError, "slope"),
    (
        "slope inf (constructor)",
        lambda: SparseGraph([], [], [], [0.0, 0.0], [1.0, 1.0], [0, 0], [0], [1], slope=np.inf),
        ValueError,
        "slope",
    ),
    (
        "n_inputs 2.7",
        lambda: SparseGraph.from_edges([(0, 3, 1.0)], 2.7, 1),
        ValueError,
        "n_inputs must be an integer",
    ),
    (
        "n_outputs 0",
        lambda: SparseGraph.from_edges([(0, 1, 1.0)], 1, 0),
        ValueError,
        "n_outputs must be an integer >= 1",
    ),
    ("n_nodes 2.5", lambda: SparseGraph.from_edges([(0, 1, 1.0)], 1, 1, n_nodes=2.5), ValueError, "n_nodes"),
    ("n_inputs True", lambda: SparseGraph.from_edges([(0, 1, 1.0)], True, 1), ValueError, "n_inputs"),
    (
        "random_dag n_hidden 10**6",
        lambda: SparseGraph.random_dag(10, 1, 10**6, 0.1),
        InsufficientMemoryError,
        r"n_hidden=1000000 .* needs \d+ bytes",
    ),
    ("random_dag density 0", lambda: SparseGraph.random_dag(2, 1, 5, 0.0), ValueError, "density"),
    ("random_dag density nan", lambda: SparseGraph.random_dag(2, 1, 5, np.nan), ValueError, "density"),
    ("random_dag n_hidden -1", lambda: SparseGraph.random_dag(2, 1, -1), ValueError, "n_hidden"),
    (
        "random_dag activation",
        lambda: SparseGraph.random_dag(2, 1, 5, activation="softmax"),
        ValueError,
        "unknown activation",
    ),
    ("random_layered n_levels 0", lambda: SparseGraph.random_layered(2, 1, 0, 10), ValueError, "n_levels"),
    (
        "random_layered 10**12 edges",
        lambda: SparseGraph.random_layered(2, 1, 3, 10**12),
        InsufficientMemoryError,
        "random_layered",
    ),
]


@pytest.mark.parametrize("case, build, error, match", CONSTRUCTION_BAD, ids=[c[0] for c in CONSTRUCTION_BAD])
def test_construction_bad_inputs(case, build, error, match):
    with pytest.raises(error, match=match):
        build()
