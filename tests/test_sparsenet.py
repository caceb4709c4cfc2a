"""SparseNetRegressor: topologies, pruning, training, errors, CPU/GPU parity."""

import pickle
import warnings

import numpy as np
import pytest
from sklearn.datasets import make_friedman1
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import r2_score

from sknn_gpu._backend import to_host
from sknn_gpu.sparse import SparseGraph, SparseNetRegressor


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        yield


def friedman(rng, n=600, noise=0.0):
    seed = int(rng.integers(2**31))
    X, y = make_friedman1(n_samples=n, noise=noise, random_state=seed)
    Xt, yt = make_friedman1(n_samples=400, noise=0.0, random_state=seed + 1)
    return X, y, Xt, yt


def test_prune_fits_friedman1_quickly(device, rng):
    X, y, Xt, yt = friedman(rng, n=800)
    reg = SparseNetRegressor(
        hidden_layer_sizes=(48, 48),
        density=0.2,
        max_iter=60,
        learning_rate_init=5e-3,
        n_prune_steps=2,
        fine_tune_iter=20,
        random_state=0,
        device=device,
    ).fit(X, y)
    assert reg.device_ == device
    r2 = r2_score(yt, reg.predict(Xt))
    assert r2 >= 0.9, r2
    assert reg.n_iter_ <= 60 and reg.n_fine_tune_iter_ <= 2 * 20
    assert reg.n_iter_ + reg.n_fine_tune_iter_ == len(reg.loss_curve_)
    assert reg.loss_curve_[-1] < reg.loss_curve_[0]


def test_prune_reaches_r2_097_at_density_01_on_friedman1(rng):
    X, y, Xt, yt = friedman(rng, n=2000)
    reg = SparseNetRegressor(
        hidden_layer_sizes=(128, 128),
        density=0.1,
        max_iter=100,
        learning_rate_init=3e-3,
        n_prune_steps=3,
        fine_tune_iter=30,
        random_state=0,
        device="cpu",
    ).fit(X, y)
    assert reg.n_edges_ == round(0.1 * reg.n_dense_edges_)
    r2 = r2_score(yt, reg.predict(Xt))
    assert r2 >= 0.97, r2


def test_prune_keeps_exactly_the_requested_fraction(rng):
    X, y, _, _ = friedman(rng, n=200)
    for density in (0.05, 0.137, 0.5, 1.0):
        reg = SparseNetRegressor(
            hidden_layer_sizes=(23, 11),
            density=density,
            max_iter=3,
            n_prune_steps=3,
            fine_tune_iter=1,
            random_state=1,
            device="cpu",
        ).fit(X, y)
        n_dense = 10 * 23 + 23 * 11 + 11 * 1
        assert reg.n_dense_edges_ == n_dense
        assert reg.n_edges_ == reg.graph_.n_edges == round(density * n_dense)


def test_dense_phase_keeps_pruned_weights_dead(device, rng):
    """The masked dense model multiplies by a layer's mask only once it has dead weights, and
    after a pruning round their gradients and their values after a step stay zero."""
    from sknn_gpu._backend import get_xp
    from sknn_gpu.sparse._activations import ACTIVATIONS
    from sknn_gpu.sparse._sparsenet_train import Adam, DenseMasked

    xp = get_xp(device)
    model = DenseMasked([6, 9, 1], ACTIVATIONS["relu"], 4.97, rng, xp)
    assert model.whole == [True, True]
    model.prune_to(model.n_alive() - 20)  # the 20 smallest of 63 weights die
    dead = [to_host(m) == 0 for m in model.masks]
    assert model.whole == [not d.any() for d in dead] and not all(model.whole)
    X, Y = xp.asarray(rng.normal(size=(16, 6))), xp.asarray(rng.normal(size=(16, 1)))
    out, acts = model.forward(X, keep=True)
    grads = model.backward(acts, out - Y)
    assert all(np.all(to_host(grads[2 * k])[d] == 0) for k, d in enumerate(dead))
    Adam(model.params, 0.1).step(model.params, grads)
    model.apply_masks()
    for k, d in enumerate(dead):
        weights = to_host(model.params[2 * k])
        assert np.all(weights[d] == 0) and np.all(weights[~d] != 0)


def test_prune_method_removes_smallest_weights(rng):
    X, y, Xt, _ = friedman(rng, n=300)
    reg = SparseNetRegressor(
        "random", n_hidden=30, density=0.3, max_iter=5, random_state=2, device="cpu"
    ).fit(X, y)
    w = np.abs(reg.graph_.weights)
    n0 = reg.n_edges_
    reg.prune(0.25)
    assert reg.n_edges_ == n0 - round(0.25 * n0)
    kept = np.abs(reg.graph_.weights)
    assert kept.min() >= np.sort(w)[round(0.25 * n0) - 1]
    assert reg.predict(Xt).shape == (400,)
    with pytest.raises(ValueError, match="amount"):
        reg.prune(1.5)


def test_random_topology_is_a_dag_with_skip_connections(rng):
    X, y, _, _ = friedman(rng, n=200)
    reg = SparseNetRegressor("random", n_hidden=40, density=0.25, max_iter=2, random_state=3, device="cpu")
    reg.fit(X, y)
    n_in, n_out, n_h = 10, 1, 40
    candidates = n_in * n_h + n_h * (n_h - 1) // 2 + (n_in + n_h) * n_out
    assert reg.n_edges_ == round(0.25 * candidates)
    g = reg.graph_
    level = g.plan["level"]
    hidden = (g.src >= n_in + n_out) & (g.dst >= n_in + n_out)
    span = level[g.dst[hidden]] - level[g.src[hidden]]
    span = span[(level[g.dst[hidden]] >= 0) & (level[g.src[hidden]] >= 0)]
    assert span.min() >= 1 and span.max() >= 2  # edges go forward and some skip levels
    assert reg.n_levels_ > 3


def test_random_topology_learns(device, rng):
    X, y, Xt, yt = friedman(rng, n=600)
    reg = SparseNetRegressor(
        "random",
        n_hidden=60,
        density=0.2,
        max_iter=80,
        learning_rate_init=1e-2,
        random_state=0,
        device=device,
    ).fit(X, y)
    assert r2_score(yt, reg.predict(Xt)) > 0.8


def test_cpu_training_is_the_same_with_and_without_the_c_kernels(monkeypatch, rng):
    """A sparse network trained on the CPU through the compiled C kernels and through the
    NumPy/SciPy code: the same losses and weights up to the order of floating-point sums."""
    from sknn_gpu._kernels._cpu import DISABLE_ENV, cpu_kernels_status, cpu_library

    monkeypatch.delenv(DISABLE_ENV, raising=False)
    if cpu_library("sparsenet") is None:
        pytest.skip(f"no compiled CPU kernels here: {cpu_kernels_status()}")
    X, y, Xt, _ = friedman(rng, n=300)
    g = SparseGraph.random_layered(10, 1, 3, 900, activation="relu", random_state=3)
    fits = []
    for disabled in ("0", "1"):
        monkeypatch.setenv(DISABLE_ENV, disabled)
        reg = SparseNetRegressor(topology=g, max_iter=8, batch_size=64, random_state=0, device="cpu")
        fits.append(reg.fit(X, y))
    used = [f.graph_._cpu_layout[3] is not None for f in fits]
    assert used == [True, False]
    blocks = [blk for level in fits[0].graph_._cpu_layout[1] for blk in level[2]]
    assert any(blk.dense_up_to < 64 for blk in blocks)  # a block took the sparse kernels
    assert len(fits[0].loss_curve_) == len(fits[1].loss_curve_) == 8
    np.testing.assert_allclose(fits[0].loss_curve_, fits[1].loss_curve_, rtol=1e-10)
    np.testing.assert_allclose(fits[0].graph_.weights, fits[1].graph_.weights, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(fits[0].predict(Xt), fits[1].predict(Xt), rtol=1e-8, atol=1e-12)


def test_given_graph_is_trained_not_modified(rng):
    X, y, _, _ = friedman(rng, n=300)
    g = SparseGraph.random_layered(10, 1, 4, 400, activation="tanh", random_state=4)
    g = SparseGraph(
        g.src,
        g.dst,
        g.weights,
        g.biases,
        g.responses,
        np.where(np.isin(np.arange(g.n_nodes), g.output_ids), 0, g.activations),
        g.input_ids,
        g.output_ids,
    )
    w0 = g.weights.copy()
    reg = SparseNetRegressor(topology=g, max_iter=30, learning_rate_init=1e-2, random_state=0, device="cpu")
    reg.fit(X, y)
    np.testing.assert_array_equal(g.weights, w0)
    assert reg.graph_.n_edges == g.n_edges and reg.n_levels_ == g.n_levels
    assert not np.allclose(reg.graph_.weights, w0)
    assert reg.loss_curve_[-1] < 0.5 * reg.loss_curve_[0]


def test_given_graph_errors(rng):
    X, y, _, _ = friedman(rng, n=50)
    g = SparseGraph.random_layered(3, 1, 3, 30, random_state=5)
    with pytest.raises(ValueError, match="3 input nodes but X has 10"):
        SparseNetRegressor(topology=g, device="cpu").fit(X, y)
    g = SparseGraph.random_layered(10, 1, 3, 60, activation="sin", random_state=5)
    with pytest.raises(ValueError, match="cannot be trained"):
        SparseNetRegressor(topology=g, device="cpu").fit(X, y)


def test_multi_output(device, rng):
    X, y, Xt, yt = friedman(rng, n=500)
    Y = np.stack([y, -2 * y + 1, X[:, 0] * 3], axis=1)
    reg = SparseNetRegressor(
        hidden_layer_sizes=(32,),
        density=0.5,
        max_iter=60,
        learning_rate_init=1e-2,
        n_prune_steps=1,
        fine_tune_iter=10,
        random_state=0,
        device=device,
    ).fit(X, Y)
    P = reg.predict(X)
    assert P.shape == (500, 3) and reg.n_outputs_ == 3
    assert r2_score(Y, P) > 0.8


def test_early_stopping_partial_fit_and_warm_start(rng):
    X, y, _, _ = friedman(rng, n=400)
    reg = SparseNetRegressor(
        "random",
        n_hidden=20,
        density=0.3,
        max_iter=200,
        early_stopping=True,
        n_iter_no_change=3,
        tol=1e-2,
        random_state=0,
        device="cpu",
    ).fit(X, y)
    assert reg.best_validation_score_ is not None and reg.n_iter_ < 200
    n = len(reg.loss_curve_)
    reg.partial_fit(X, y)
    assert len(reg.loss_curve_) == n + 1 and reg.n_iter_ == 1
    reg.set_params(warm_start=True, max_iter=4, early_stopping=False)
    w_before = reg.graph_.weights.copy()
    reg.fit(X, y)
    assert len(reg.loss_curve_) == n + 5
    assert reg.graph_.n_edges == w_before.size and not np.allclose(reg.graph_.weights, w_before)
    fresh = SparseNetRegressor("random", n_hidden=20, density=0.3, random_state=0, device="cpu")
    fresh.partial_fit(X, y)
    assert fresh.n_iter_ == 1 and hasattr(fresh, "graph_")
    pruned = SparseNetRegressor(hidden_layer_sizes=(10,), density=0.5, random_state=0, device="cpu")
    pruned.partial_fit(X, y)
    assert pruned.n_edges_ == round(0.5 * (10 * 10 + 10))


def test_sgd_and_sigmoid_slope(rng):
    X, y, Xt, yt = friedman(rng, n=400)
    reg = SparseNetRegressor(
        hidden_layer_sizes=(32,),
        density=0.5,
        activation="sigmoid",
        solver="sgd",
        learning_rate_init=0.05,
        max_iter=60,
        n_prune_steps=1,
        fine_tune_iter=5,
        random_state=0,
        device="cpu",
    ).fit(X, y)
    assert reg.graph_.slope == pytest.approx(4.97)
    assert r2_score(yt, reg.predict(Xt)) > 0.5


def test_bad_input_is_a_clear_error(rng):
    X, y, _, _ = friedman(rng, n=100)
    Xn = X.copy()
    Xn[3, 4] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        SparseNetRegressor(max_iter=2, device="cpu").fit(Xn, y)
    reg = SparseNetRegressor(hidden_layer_sizes=(8,), max_iter=2, device="cpu").fit(X, y)
    with pytest.raises(ValueError, match="features"):
        reg.predict(X[:, :5])
    with pytest.raises(ValueError, match="NaN"):
        reg.predict(Xn)
    with pytest.raises(ValueError, match="density"):
        SparseNetRegressor(density=0.0, device="cpu").fit(X, y)


def test_pickle_round_trip(rng):
    X, y, Xt, _ = friedman(rng, n=200)
    reg = SparseNetRegressor("random", n_hidden=15, density=0.4, max_iter=5, random_state=0, device="cpu")
    reg.fit(X, y)
    back = pickle.loads(pickle.dumps(reg))
    np.testing.assert_array_equal(back.predict(Xt), reg.predict(Xt))


def _device_branch_on_numpy(monkeypatch):
    """Send NumPy input down the CuPy-input branch (validation on the device, no host copy).

    ``DeviceMixin._check_device_X`` is written against the input's array module, so the
    branch runs on NumPy arrays on a machine without a GPU.
    """
    from sknn_gpu.sparse import _sparsenet

    monkeypatch.setattr(_sparsenet, "is_device_array", lambda x: isinstance(x, np.ndarray))
    monkeypatch.setattr(_sparsenet, "to_device", lambda x, device: np.asarray(x))

    def no_host_validation(*args, **kwargs):
        raise AssertionError("device input went through validate_data (a host copy)")

    monkeypatch.setattr(_sparsenet, "validate_data", no_host_validation)


@pytest.mark.parametrize("topology", ["random", "prune"])
def test_device_input_branch_validates_in_place_and_trains_alike(topology, monkeypatch, rng):
    X, y, Xt, _ = friedman(rng, n=200)
    kw = dict(hidden_layer_sizes=(12,), n_hidden=15, density=0.4, max_iter=4, random_state=0, device="cpu")
    ref = SparseNetRegressor(topology, **kw).fit(X, y)
    _device_branch_on_numpy(monkeypatch)
    reg = SparseNetRegressor(topology, **kw).fit(X, y)
    assert reg.n_features_in_ == 10 and not hasattr(reg, "feature_names_in_")
    np.testing.assert_array_equal(reg.loss_curve_, ref.loss_curve_)
    np.testing.assert_array_equal(reg.predict(Xt), ref.predict(Xt))
    reg.partial_fit(X, y[:, None])  # (n, 1) targets: one output, as fitted
    assert reg.n_iter_ == 1
    with pytest.raises(ValueError, match="expecting 10 features"):
        reg.predict(Xt[:, :4])


@pytest.mark.parametrize(
    "y_bad, match",
    [
        ("nan", "y contains NaN"),
        ("short", "inconsistent numbers of samples"),
        ("3d", r"shape \(n_samples,\)"),
        ("str", "y must be numeric"),
    ],
)
def test_device_input_branch_checks_y(y_bad, match, monkeypatch, rng):
    X, y, _, _ = friedman(rng, n=60)
    y = {
        "nan": np.where(np.arange(60) == 7, np.nan, y),
        "short": y[:50],
        "3d": y.reshape(60, 1, 1),
        "str": y.astype(str),
    }[y_bad]
    _device_branch_on_numpy(monkeypatch)
    with pytest.raises(ValueError, match=match):
        SparseNetRegressor(hidden_layer_sizes=(4,), max_iter=1, device="cpu").fit(X, y)


def test_predict_skips_sklearn_checks_only_for_input_they_would_pass_unchanged(monkeypatch, rng):
    from sknn_gpu.sparse import _sparsenet

    X, y, Xt, _ = friedman(rng, n=120)
    reg = SparseNetRegressor(n_hidden=12, density=0.4, max_iter=3, random_state=0, device="cpu").fit(X, y)
    ref = reg.predict(Xt.tolist())  # a list: scikit-learn's validation
    calls = []
    real = _sparsenet.validate_data
    monkeypatch.setattr(_sparsenet, "validate_data", lambda *a, **k: calls.append(1) or real(*a, **k))
    np.testing.assert_array_equal(reg.predict(Xt), ref)  # clean float64 array: validated in place
    np.testing.assert_array_equal(reg.predict(Xt[:1]), ref[:1])
    assert calls == []
    for bad in (Xt.astype(np.float32), np.asfortranarray(Xt)[:, :5], np.where(Xt > 0.9, np.nan, Xt)):
        assert reg._unchanged_host_X(bad) is None
    assert reg._unchanged_host_X(np.asfortranarray(Xt)) is not None  # order is not changed by the checks
    np.testing.assert_allclose(
        reg.predict(Xt.astype(np.float32)), reg.predict(Xt.astype(np.float32).astype(np.float64))
    )
    assert len(calls) == 1
    with pytest.raises(ValueError, match="NaN"):
        reg.predict(np.where(Xt > 0.9, np.nan, Xt))
    with pytest.raises(ValueError, match="expecting 10 features"):
        reg.predict(Xt[:, :5])


def test_predict_size_estimate_follows_the_fitted_graph(rng):
    """predict's estimate reads the widest level from the graph's plan: a prune or refit
    (a new graph_) is seen at once."""
    from sknn_gpu.sparse._sparsenet import _plan_widths

    X, y, Xt, _ = friedman(rng, n=120)
    reg = SparseNetRegressor(n_hidden=30, density=0.5, max_iter=2, random_state=0, device="cpu").fit(X, y)

    def expected():
        n_nodes, n_edges, widest = _plan_widths(reg.graph_)
        values = 8 * n_nodes * 7 + 8 * 4 * widest * 7  # 7 rows: node values and CPU temporaries
        return 2 * 8 * 7 * (10 + 1) + values + 64 * (n_edges + n_nodes)

    first = reg._memory_estimate(7, 10, 1, fit=False)["device"]
    assert first == expected() and reg.graph_.plan["widest"] == int(reg.graph_.level_sizes.max())
    reg.prune(0.5)
    assert reg._memory_estimate(7, 10, 1, fit=False)["device"] == expected() < first


@pytest.mark.cuda
def test_gpu_predict_caches_the_target_scaling_per_fit(rng):
    import cupy as cp

    X, y, Xt, _ = friedman(rng, n=200)
    kw = dict(n_hidden=16, density=0.4, max_iter=3, random_state=0)
    reg = SparseNetRegressor(device="cuda", **kw)
    for target in (y, 100.0 * y - 7.0, np.stack([y, -3.0 * y], axis=1)):  # refits change scale and mean
        reg.fit(X, target)
        cpu = SparseNetRegressor(device="cpu", **kw).fit(X, target).predict(Xt)
        for _ in range(2):  # the second call uses the cached device copies
            host, dev = reg.predict(Xt), reg.predict(cp.asarray(Xt)).get()
            np.testing.assert_allclose(host, cpu, rtol=1e-5, atol=1e-8)
            # NumPy rows are unscaled on the host, CuPy rows on the GPU: the same two operations
            np.testing.assert_array_equal(host, dev)


@pytest.mark.cuda
@pytest.mark.parametrize("input_activation", ["identity", "sigmoid"])
def test_gpu_predict_of_a_few_numpy_rows_uses_pinned_memory(input_activation, monkeypatch, rng):
    """A few NumPy rows are predicted through pinned host memory (one copy): the same bits as
    the CuPy rows; a squashed input keeps the device path (its tanh runs on the GPU)."""
    import cupy as cp

    from sknn_gpu.sparse import _graph_cuda

    X, y, Xt, _ = friedman(rng, n=200)
    kw = dict(n_hidden=16, density=0.4, max_iter=3, random_state=0, input_activation=input_activation)
    reg = SparseNetRegressor(device="cuda", **kw).fit(X, y)
    calls = []
    real = _graph_cuda.forward_host
    monkeypatch.setattr(
        _graph_cuda, "forward_host", lambda g, X, **k: calls.append(X.shape) or real(g, X, **k)
    )
    for rows in (Xt[:1], Xt[:7], np.asfortranarray(Xt[:7])):
        got = reg.predict(rows)
        assert type(got) is np.ndarray and got.shape == (rows.shape[0],)
        np.testing.assert_array_equal(got, reg.predict(cp.asarray(rows)).get())
    assert calls == ([(1, 10), (7, 10), (7, 10)] if input_activation == "identity" else [])
    with pytest.raises(ValueError, match="NaN"):
        reg.predict(np.where(Xt[:2] > 0.5, np.nan, Xt[:2]))


def test_resident_block_is_a_no_op_on_the_cpu_and_needs_a_fitted_model(rng):
    from sklearn.exceptions import NotFittedError

    X, y, Xt, _ = friedman(rng, n=200)
    with pytest.raises(NotFittedError):
        SparseNetRegressor(device="cpu").resident()
    reg = SparseNetRegressor(device="cpu", n_hidden=16, density=0.4, max_iter=3, random_state=0).fit(X, y)
    ref = reg.predict(Xt[:5])
    with reg.resident(idle_timeout=1.0) as res:
        assert res is None
        np.testing.assert_array_equal(np.concatenate([reg.predict(Xt[i : i + 1]) for i in range(5)]), ref)
    with pytest.raises(ValueError, match="idle_timeout"):
        reg.resident(idle_timeout=-1)


@pytest.mark.cuda
@pytest.mark.parametrize("input_activation", ["identity", "sigmoid"])
def test_gpu_predict_inside_a_resident_block_gives_the_same_predictions(input_activation, rng):
    """One-row predictions inside reg.resident() are answered by the resident kernel (the
    identity input activation's pinned path) with the same bits as outside it."""
    X, y, Xt, _ = friedman(rng, n=200)
    kw = dict(n_hidden=16, density=0.4, max_iter=3, random_state=0, input_activation=input_activation)
    reg = SparseNetRegressor(device="cuda", **kw).fit(X, y)
    ref = np.concatenate([reg.predict(Xt[i : i + 1]) for i in range(20)])
    with reg.resident(idle_timeout=10.0) as res:
        got = np.concatenate([reg.predict(Xt[i : i + 1]) for i in range(20)])
        assert res.launches == (1 if input_activation == "identity" else 0)
        with pytest.raises(ValueError, match="NaN"):
            reg.predict(np.where(Xt[:1] > 0.5, np.nan, Xt[:1]))
    np.testing.assert_array_equal(got, ref)


@pytest.mark.cuda
def test_cupy_input_stays_on_the_gpu(monkeypatch, rng):
    import cupy as cp

    from sknn_gpu.sparse import _sparsenet

    X, y, Xt, _ = friedman(rng, n=300)
    kw = dict(n_hidden=20, density=0.3, max_iter=5, random_state=0, device="cuda")
    ref = SparseNetRegressor("random", **kw).fit(X, y)
    ref_pred = ref.predict(Xt)

    def no_host_validation(*args, **kwargs):
        raise AssertionError("CuPy input went through validate_data (a host copy)")

    monkeypatch.setattr(_sparsenet, "validate_data", no_host_validation)
    reg = SparseNetRegressor("random", **kw).fit(cp.asarray(X), cp.asarray(y))
    np.testing.assert_allclose(reg.loss_curve_, ref.loss_curve_, rtol=1e-10)
    out = reg.predict(cp.asarray(Xt))
    assert isinstance(out, cp.ndarray) and out.shape == (400,)
    np.testing.assert_allclose(out.get(), ref_pred, rtol=1e-9, atol=1e-12)
    monkeypatch.undo()
    assert reg.score(cp.asarray(Xt), cp.asarray(ref_pred)) == pytest.approx(1.0)  # R² takes CuPy X and y
    # a CPU model predicting CuPy input: validated on the device, computed on the host, CuPy out
    cpu = SparseNetRegressor("random", **{**kw, "device": "cpu"}).fit(X, y)
    got = cpu.predict(cp.asarray(Xt))
    assert isinstance(got, cp.ndarray)
    np.testing.assert_allclose(got.get(), cpu.predict(Xt), rtol=0, atol=0)


@pytest.mark.cuda
@pytest.mark.parametrize("topology", ["random", "prune"])
def test_cpu_and_gpu_fits_agree(topology, rng):
    import cupy as cp

    X, y, Xt, _ = friedman(rng, n=300)
    kw = dict(
        hidden_layer_sizes=(24,),
        n_hidden=30,
        density=0.3,
        max_iter=8,
        n_prune_steps=2,
        fine_tune_iter=3,
        learning_rate_init=3e-3,
        random_state=0,
    )
    cpu = SparseNetRegressor(topology, device="cpu", **kw).fit(X, y)
    gpu = SparseNetRegressor(topology, device="cuda", **kw).fit(X, y)
    assert gpu.device_ == "cuda"
    assert cpu.n_edges_ == gpu.n_edges_
    np.testing.assert_allclose(gpu.loss_curve_, cpu.loss_curve_, rtol=1e-5)
    np.testing.assert_allclose(gpu.predict(Xt), cpu.predict(Xt), rtol=1e-5, atol=1e-8)
    out = gpu.predict(cp.asarray(Xt))
    assert isinstance(out, cp.ndarray)
    np.testing.assert_allclose(out.get(), cpu.predict(Xt), rtol=1e-5, atol=1e-8)
    back = pickle.loads(pickle.dumps(gpu))
    np.testing.assert_allclose(back.predict(Xt), cpu.predict(Xt), rtol=1e-5, atol=1e-8)


# ----------------------------------------------------------------------------- errors and limits (issue 15)
@pytest.mark.parametrize("sizes", [[0], [2.5], [-5], (8, 0), [True], "10"])
def test_hidden_layer_sizes_must_be_integers_of_at_least_one(sizes, rng):
    X, y, _, _ = friedman(rng, n=50)
    with pytest.raises(ValueError, match="hidden_layer_sizes"):
        SparseNetRegressor(hidden_layer_sizes=sizes, max_iter=1, device="cpu").fit(X, y)


def test_targets_beyond_1e100_are_refused_and_large_ones_work(rng):
    X, y, _, _ = friedman(rng, n=120)
    big = y.copy()
    big[3] = 1e300
    reg = SparseNetRegressor("random", n_hidden=10, max_iter=3, random_state=0, device="cpu")
    with pytest.raises(ValueError, match=r"magnitude 1e\+300.*up to 1e\+100"):
        reg.fit(X, big)
    assert not hasattr(reg, "graph_")
    pred = reg.fit(X, y * 1e98).predict(X)  # within the limit: standardised, finite, of the right scale
    assert np.all(np.isfinite(pred)) and 1e97 < np.abs(pred).mean() < 1e100
    with pytest.raises(ValueError, match="magnitude"):
        reg.partial_fit(X, -big)


def _tiny_free_memory(monkeypatch, n_bytes):
    from sknn_gpu import _backend

    monkeypatch.setattr(_backend, "free_memory", lambda device, need=None: n_bytes)


def test_oversize_fit_is_refused_before_allocating(monkeypatch, rng):
    import tracemalloc

    from sknn_gpu._backend import InsufficientMemoryError

    X, y, _, _ = friedman(rng, n=200)
    _tiny_free_memory(monkeypatch, 64 << 20)
    reg = SparseNetRegressor(hidden_layer_sizes=(3000, 3000), max_iter=1, device="cpu")
    tracemalloc.start()
    with pytest.raises(
        InsufficientMemoryError, match=r"SparseNetRegressor\.fit .* needs (\d+) bytes .* only 67108864"
    ):
        reg.fit(X, y)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 8 << 20, peak  # 9 million weights were never allocated
    assert not hasattr(reg, "graph_")


def test_oversize_partial_fit_and_predict_leave_the_model_as_it_was(monkeypatch, rng):
    from sknn_gpu._backend import InsufficientMemoryError

    X, y, Xt, _ = friedman(rng, n=300)
    reg = SparseNetRegressor("random", n_hidden=40, density=0.5, max_iter=2, random_state=0, device="cpu")
    reg.fit(X, y)
    before = (reg.graph_.weights.copy(), list(reg.loss_curve_), reg.predict(Xt))
    big = np.tile(X, (200, 1))  # 60,000 rows: over the 16 MiB below which nothing is checked
    _tiny_free_memory(monkeypatch, 1 << 20)
    with pytest.raises(InsufficientMemoryError, match=r"partial_fit .* needs \d+ bytes .* only 1048576"):
        reg.partial_fit(big, np.tile(y, 200))
    with pytest.raises(InsufficientMemoryError, match=r"predict .* needs"):
        reg.predict(big)
    small = reg.predict(Xt)  # small work skips the free-memory query
    np.testing.assert_array_equal(small, before[2])
    monkeypatch.undo()
    np.testing.assert_array_equal(reg.graph_.weights, before[0])
    assert reg.loss_curve_ == before[1]
    np.testing.assert_array_equal(reg.predict(Xt), before[2])


@pytest.mark.parametrize(
    "params",
    [
        dict(hidden_layer_sizes=(256, 128), density=0.2, n_prune_steps=2, fine_tune_iter=1),
        dict(topology="random", n_hidden=600, density=0.3, early_stopping=True, batch_size=500),
    ],
    ids=["prune", "random"],
)
def test_size_estimate_bounds_the_measured_peak(params, rng):
    """The estimate is an upper bound of what fit and predict allocate, and not a wild one."""
    import tracemalloc

    X, y, _, _ = friedman(rng, n=1500)
    reg = SparseNetRegressor(max_iter=2, random_state=0, device="cpu", **params)
    reg.device_ = "cpu"
    need = reg._memory_estimate(1500, 10, 1)
    del reg.device_
    tracemalloc.start()
    reg.fit(X, y)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    reg.predict(X)
    _, predict_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    total = need["host"] + need["device"]
    assert peak <= total <= 4 * peak, (peak, need)
    predict_need = sum(reg._memory_estimate(1500, 10, 1, fit=False).values())
    assert predict_peak <= predict_need <= 4 * predict_peak, (predict_peak, predict_need)


# --------------------------------------------------------------------------- #
# sample_weight, verbose, failures half-way (issues 15 and 17)                   #
# --------------------------------------------------------------------------- #
def _sw_pair(device, params, X, y, sw, X2, y2):
    a = SparseNetRegressor(device=device, **params).fit(X, y, sample_weight=sw)
    b = SparseNetRegressor(device=device, **params).fit(X2, y2)
    assert len(a.loss_curve_) == len(b.loss_curve_) > 0
    np.testing.assert_allclose(a.loss_curve_, b.loss_curve_, rtol=1e-9)
    np.testing.assert_allclose(to_host(a.predict(X)), to_host(b.predict(X)), rtol=1e-8, atol=1e-10)
    return a, b


_SW_PARAMS = [
    dict(topology="prune", hidden_layer_sizes=(12,), n_prune_steps=2, max_iter=12),
    dict(topology="random", n_hidden=20, density=0.5, solver="sgd", learning_rate_init=0.05, max_iter=12),
]


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("params", _SW_PARAMS, ids=["prune-adam", "random-sgd"])
def test_integer_weights_equal_repeated_rows(device, rng, params):
    """One minibatch (n < 200): weight k trains as k copies of the row, shuffling aside."""
    X = rng.standard_normal((50, 4))
    y = np.column_stack([X[:, 0] - 2 * X[:, 1], X[:, 2] * X[:, 3]])
    sw = rng.integers(1, 4, 50)
    _sw_pair(
        device, dict(random_state=3, **params), X, y, sw, np.repeat(X, sw, axis=0), np.repeat(y, sw, axis=0)
    )


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("params", _SW_PARAMS, ids=["prune-adam", "random-sgd"])
def test_zero_weights_equal_dropped_rows(device, rng, params):
    X = rng.standard_normal((60, 4))
    y = X @ np.array([1.0, -1.0, 0.5, 2.0])
    sw = np.ones(60)
    sw[rng.choice(60, 20, replace=False)] = 0.0
    keep = sw > 0
    _sw_pair(device, dict(random_state=3, **params), X, y, sw, X[keep], y[keep])


def test_unit_weights_change_no_bit(rng):
    X = rng.standard_normal((300, 5))
    y = X.sum(axis=1)
    params = dict(hidden_layer_sizes=(8,), max_iter=4, random_state=0, device="cpu")
    with pytest.warns(ConvergenceWarning):
        a = SparseNetRegressor(**params).fit(X, y, sample_weight=np.ones(300))
    with pytest.warns(ConvergenceWarning):
        b = SparseNetRegressor(**params).fit(X, y)
    np.testing.assert_allclose(a.loss_curve_, b.loss_curve_, rtol=1e-13)
    np.testing.assert_allclose(a.predict(X), b.predict(X), rtol=1e-12)


def test_bad_sample_weights_are_refused(rng):
    X = rng.standard_normal((20, 3))
    y = X[:, 0]
    est = SparseNetRegressor(hidden_layer_sizes=(4,), max_iter=2, device="cpu")
    with pytest.raises(ValueError, match="[Nn]egative"):
        est.fit(X, y, sample_weight=-np.ones(20))
    with pytest.raises(ValueError, match="inconsistent|19"):
        est.fit(X, y, sample_weight=np.ones(19))
    with pytest.raises(ValueError, match="NaN|infinity"):
        est.fit(X, y, sample_weight=np.full(20, np.nan))
    with pytest.raises(ValueError, match="at least one non-zero"):
        est.fit(X, y, sample_weight=np.zeros(20))
    assert not hasattr(est, "graph_")


def test_sample_weight_is_routed_as_fit_metadata(rng):
    import sklearn
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X = rng.standard_normal((80, 3))
    y = X[:, 0] + X[:, 1]
    sw = rng.random(80)
    params = dict(hidden_layer_sizes=(6,), max_iter=3, random_state=0, device="cpu")
    with sklearn.config_context(enable_metadata_routing=True), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        net = SparseNetRegressor(**params).set_fit_request(sample_weight=True)
        pipe = make_pipeline(StandardScaler().set_fit_request(sample_weight=False), net).fit(
            X, y, sample_weight=sw
        )
        direct = SparseNetRegressor(**params).fit(StandardScaler().fit_transform(X), y, sample_weight=sw)
    np.testing.assert_array_equal(pipe[-1].loss_curve_, direct.loss_curve_)


def test_verbose_logs_epochs_through_the_family_logger(rng, caplog):
    import logging

    X = rng.standard_normal((100, 3))
    y = X[:, 0]
    params = dict(hidden_layer_sizes=(4,), max_iter=3, random_state=0, device="cpu", n_prune_steps=1)
    with caplog.at_level(logging.INFO, logger="sknn_gpu.sparse"), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        SparseNetRegressor(verbose=0, **params).fit(X, y)
        assert not [r for r in caplog.records if r.name.startswith("sknn_gpu.sparse")]
        SparseNetRegressor(verbose=1, **params).fit(X, y)
        summaries = [r.getMessage() for r in caplog.records if r.name.startswith("sknn_gpu.sparse")]
        assert any("training (dense)" in m and "3 epochs" in m and "loss=" in m for m in summaries)
        caplog.clear()
        SparseNetRegressor(verbose=2, **params).fit(X, y)
        per_epoch = [r.getMessage() for r in caplog.records if "training (dense) " in r.getMessage()]
        assert len(per_epoch) == 3 and all("loss=" in m for m in per_epoch)


@pytest.mark.parametrize("failing_epoch", [1, 3])
def test_fit_failing_half_way_leaves_the_estimator_as_it_was(monkeypatch, device, rng, failing_epoch):
    """An error part-way through training (an out-of-memory on a shared GPU, say)."""
    from sklearn.exceptions import NotFittedError

    from sknn_gpu.sparse import _sparsenet_train

    X = rng.standard_normal((120, 4))
    y = X[:, 0] - X[:, 2]
    params = dict(hidden_layer_sizes=(6,), max_iter=4, n_prune_steps=1, random_state=0, device=device)
    real, calls, fail_at = _sparsenet_train.Adam.step, [], [failing_epoch]

    def failing(self, params_, grads):
        calls.append(1)
        if len(calls) == fail_at[0]:
            raise MemoryError("simulated out-of-memory half-way through training")
        return real(self, params_, grads)

    monkeypatch.setattr(_sparsenet_train.Adam, "step", failing)
    est = SparseNetRegressor(**params)
    with pytest.raises(MemoryError, match="simulated"):
        est.fit(X, y)
    with pytest.raises(NotFittedError):
        est.predict(X)
    assert not hasattr(est, "n_outputs_") and not hasattr(est, "loss_curve_")
    monkeypatch.setattr(_sparsenet_train.Adam, "step", real)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
    before = (list(est.loss_curve_), to_host(est.predict(X)).copy(), est.n_edges_)
    calls.clear()
    fail_at[0] = 3  # a warm fit of 4 epochs failing in its third: two epochs were appended
    monkeypatch.setattr(_sparsenet_train.Adam, "step", failing)
    est.set_params(warm_start=True)
    with pytest.raises(MemoryError, match="simulated"):
        est.fit(X, y)
    assert est.loss_curve_ == before[0] and est.n_edges_ == before[2]
    est.set_params(warm_start=False)
    calls.clear()
    fail_at[0] = 1  # partial_fit trains one epoch: one optimizer step here
    monkeypatch.setattr(_sparsenet_train.Adam, "step", failing)
    with pytest.raises(MemoryError, match="simulated"):
        est.partial_fit(X, y)
    assert est.loss_curve_ == before[0] and est.n_edges_ == before[2]
    np.testing.assert_array_equal(to_host(est.predict(X)), before[1])


def test_sigmoid_inputs_equal_a_model_fitted_on_squashed_inputs(device, rng):
    """input_activation='sigmoid' (the paper's squashed sensors) is the identity model on
    1 / (1 + exp(-X)), in fit and in predict; huge inputs saturate instead of overflowing."""
    X = rng.standard_normal((150, 5)) * 3.0
    y = np.tanh(X[:, 0]) - X[:, 1] / 10
    params = dict(hidden_layer_sizes=(8,), max_iter=6, random_state=1, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a = SparseNetRegressor(input_activation="sigmoid", **params).fit(X, y)
        squashed = 1.0 / (1.0 + np.exp(-X))
        b = SparseNetRegressor(**params).fit(squashed, y)
    np.testing.assert_allclose(a.loss_curve_, b.loss_curve_, rtol=1e-12)
    np.testing.assert_allclose(to_host(a.predict(X)), to_host(b.predict(squashed)), rtol=1e-10)
    big = np.full((2, 5), 1e4)
    big[1] *= -1
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no overflow in exp
        out = to_host(a.predict(big))
    np.testing.assert_allclose(out, to_host(b.predict(np.array([[1.0] * 5, [0.0] * 5]))), rtol=1e-10)
    with pytest.raises(ValueError, match="input_activation"):
        SparseNetRegressor(input_activation="relu").fit(X, y)


# ------------------------------------------------------------------ parameters, failed fits, epochs, dtypes
def _small_fit(rng, device="cpu", **kw):
    X = rng.standard_normal((80, 4))
    y = X[:, 0] - 0.5 * X[:, 2]
    params = dict(hidden_layer_sizes=(6,), max_iter=3, n_prune_steps=1, random_state=0, device=device)
    return SparseNetRegressor(**{**params, **kw}).fit(X, y), X, y


@pytest.mark.parametrize(
    "param, value",
    [("input_activation", "bogus"), ("output_type", "bogus"), ("batch_size", 0), ("device", "tpu")],
)
@pytest.mark.parametrize("method", ["predict", "score", "partial_fit", "resident", "prune"])
def test_parameters_changed_after_fit_are_refused_by_every_method(device, rng, param, value, method):
    reg, X, y = _small_fit(rng, device)
    expected = to_host(reg.predict(X))
    call = {
        "predict": lambda: reg.predict(X),
        "score": lambda: reg.score(X, y),
        "partial_fit": lambda: reg.partial_fit(X, y),
        "resident": lambda: reg.resident(),
        "prune": lambda: reg.prune(0.1),
    }[method]
    reg.set_params(**{param: value})
    with pytest.raises(ValueError, match=f"'{param}' parameter of SparseNetRegressor must be"):
        call()
    reg.set_params(**{param: SparseNetRegressor().get_params()[param] if param != "device" else device})
    np.testing.assert_array_equal(to_host(reg.predict(X)), expected)


def test_hidden_layer_sizes_set_after_fit_are_refused_at_predict(rng):
    reg, X, _ = _small_fit(rng)
    reg.hidden_layer_sizes = [6, 0]  # an array-like, so only the estimator's own check sees it
    with pytest.raises(ValueError, match="hidden_layer_sizes must hold integers >= 1"):
        reg.predict(X)
    reg.hidden_layer_sizes[1] = 3
    assert reg.predict(X).shape == (X.shape[0],)


def test_failed_fit_with_too_few_targets_keeps_the_previous_model(device, rng):
    reg, X, y = _small_fit(rng, device)
    before = to_host(reg.predict(X)).copy()
    curve = list(reg.loss_curve_)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        reg.fit(X, y[:-1])
    np.testing.assert_array_equal(to_host(reg.predict(X)), before)
    assert reg.loss_curve_ == curve


@pytest.mark.parametrize("dtype", ["datetime64[s]", "timedelta64[ms]"])
def test_dates_and_time_spans_are_refused_naming_the_dtype(rng, dtype):
    reg, X, y = _small_fit(rng)
    T = (np.abs(X) * 1000).astype(np.int64).astype(dtype)
    kind = dtype.split("[")[0]
    with pytest.raises(ValueError, match=rf"X has dtype {kind}.*not numeric features"):
        SparseNetRegressor(max_iter=1, device="cpu").fit(T, y)
    with pytest.raises(ValueError, match=rf"X has dtype {kind}"):
        reg.predict(T)
    with pytest.raises(ValueError, match=rf"y has dtype {kind}"):
        SparseNetRegressor(max_iter=1, device="cpu").fit(X, (y * 1000).astype(np.int64).astype(dtype))


@pytest.mark.parametrize("topology", ["prune", "random"])
def test_n_iter_counts_the_epochs_max_iter_bounds(rng, topology):
    """``max_iter`` bounds the dense phase of 'prune' (the fine-tuning rounds have their own
    budget, ``fine_tune_iter``): ``n_iter_`` counts those epochs, never more than ``max_iter``."""
    X = rng.standard_normal((60, 5))
    y = X[:, 0] * X[:, 1]
    reg = SparseNetRegressor(
        topology, hidden_layer_sizes=(8,), n_hidden=8, max_iter=30, tol=0.0, random_state=0, device="cpu"
    ).fit(X, y)
    assert reg.n_iter_ == 30
    fine = 4 * (30 // 4) if topology == "prune" else 0  # four rounds of max(1, max_iter // 4) epochs
    assert reg.n_fine_tune_iter_ == fine
    assert len(reg.loss_curve_) == reg.n_iter_ + reg.n_fine_tune_iter_
    reg.partial_fit(X, y)
    assert reg.n_iter_ == 1 and reg.n_fine_tune_iter_ == 0


def test_convergence_warning_only_when_max_iter_ends_training(rng):
    X = rng.standard_normal((60, 5))
    y = X[:, 0] * X[:, 1]
    params = dict(hidden_layer_sizes=(8,), n_prune_steps=2, random_state=0, device="cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        SparseNetRegressor(max_iter=3, fine_tune_iter=3, tol=0.0, **params).fit(X, y)
        SparseNetRegressor(max_iter=1, tol=0.0, **params).fit(X, y)  # one epoch is a limit too
        SparseNetRegressor(max_iter=50, tol=1e9, n_iter_no_change=2, **params).fit(X, y)  # converged
        SparseNetRegressor(max_iter=3, **params).partial_fit(X, y)  # one epoch by definition
    conv = [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]
    assert len(conv) == 2, conv  # once per fit stopped by max_iter, not once per fine-tuning round
    assert "maximum iterations (3)" in conv[0] and "maximum iterations (1)" in conv[1]


def test_optimiser_steps_are_the_textbook_formulas_bit_for_bit(device, rng):
    """Adam and SGD update their state in place; the arithmetic is the out-of-place formulas'."""
    from sknn_gpu._backend import get_xp
    from sknn_gpu.sparse._sparsenet_train import SGD, Adam

    xp = get_xp(device)
    params = [xp.asarray(rng.standard_normal((7, 5))), xp.asarray(rng.standard_normal(5))]
    grads = [[xp.asarray(rng.standard_normal(p.shape)) for p in params] for _ in range(3)]
    given = [to_host(p).copy() for p in params]
    adam, sgd = Adam(params, 0.01), SGD(params, 0.05)
    pa, ps = list(params), list(params)
    m = [p * 0.0 for p in params]
    v = [p * 0.0 for p in params]
    vel = [p * 0.0 for p in params]
    ra, rs = list(params), list(params)
    for t, gs in enumerate(grads, start=1):
        adam.step(pa, gs)
        sgd.step(ps, gs)
        lr = 0.01 * np.sqrt(1 - 0.999**t) / (1 - 0.9**t)
        for i, g in enumerate(gs):
            m[i] = 0.9 * m[i] + (1 - 0.9) * g
            v[i] = 0.999 * v[i] + (1 - 0.999) * g * g
            root = v[i] ** 0.5 if xp is np else xp.sqrt(v[i])  # NumPy's ** 0.5 is its sqrt
            ra[i] = ra[i] - lr * m[i] / (root + 1e-8)
            vel[i] = 0.9 * vel[i] - 0.05 * g
            rs[i] = rs[i] + vel[i]
    for got, want in zip(pa + ps, ra + rs):
        np.testing.assert_array_equal(to_host(got), to_host(want))
    for p, g in zip(params, given):  # the arrays given were replaced, never written into
        np.testing.assert_array_equal(to_host(p), g)


@pytest.mark.parametrize("n_keep", [0, 1, 7, 50, 333, 599, 600])
def test_pruning_keeps_what_a_stable_sort_by_magnitude_keeps(rng, n_keep):
    from sknn_gpu.sparse._sparsenet_train import _largest

    values = np.round(rng.random(600), 1)  # many ties
    values[rng.random(600) < 0.2] = -1.0  # dead weights
    want = np.zeros(600, bool)
    want[np.argsort(-values, kind="stable")[:n_keep]] = True
    np.testing.assert_array_equal(_largest(values, n_keep), want)


def test_verbose_one_logs_progress_lines_off_a_terminal(monkeypatch, rng, caplog):
    """A wide dense phase runs for minutes (one optimizer step per minibatch over
    n_features * hidden weights): at verbose=1 without a bar, lines every few seconds show it."""
    import logging

    import sknn_gpu._progress as prog

    monkeypatch.setattr(prog, "_tty", lambda: False)
    monkeypatch.setattr("sknn_gpu._progress.LOG_EVERY_SECONDS", 0.0)  # here: a line per epoch
    X = rng.standard_normal((40, 3))
    params = dict(hidden_layer_sizes=(4,), max_iter=3, n_prune_steps=1, fine_tune_iter=2, random_state=0)
    with caplog.at_level(logging.INFO, logger="sknn_gpu.sparse"):
        SparseNetRegressor(verbose=1, device="cpu", **params).fit(X, X[:, 0])
    lines = [r.getMessage() for r in caplog.records]
    dense = [m.split(" after ")[0] for m in lines if m.startswith("SparseNetRegressor training (dense) ")]
    assert dense == [f"SparseNetRegressor training (dense) {k}/3 epochs" for k in (1, 2, 3)]
    assert sum("(fine-tuning, pruning round 1/1) " in m and " after " in m for m in lines) == 2
