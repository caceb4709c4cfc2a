"""GPUMLPClassifier's minibatch epochs as replayed CUDA graphs (``_mlp_graph``) against the
CPU trainer, the reference: every solver, learning-rate schedule and activation, one to
three hidden layers, a partial last batch, no shuffling, early stopping, warm starts,
partial_fit and sample weights. All cuda-marked (skipped without a GPU)."""

import warnings

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning

from sknn_gpu import GPUMLPClassifier

pytestmark = pytest.mark.cuda


@pytest.fixture(scope="module")
def data():
    X, y = load_digits(return_X_y=True)
    return X[:430] / 16.0, y[:430]  # 430 rows: a partial last batch at every batch size below


@pytest.fixture
def graph_runs(monkeypatch):
    """Count the epochs run as graph replays (the test fails if the graph path was not taken)."""
    from sknn_gpu.neural_network import _mlp_graph

    calls = []
    real = _mlp_graph.GraphEpoch.run

    def counted(self, order, table):
        calls.append(len(table))
        return real(self, order, table)

    monkeypatch.setattr(_mlp_graph.GraphEpoch, "run", counted)
    return calls


def _fit(device, params, X, y, **fit_kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return GPUMLPClassifier(device=device, **params).fit(X, y, **fit_kw)


def _same(cpu, gpu, rtol):
    assert gpu.device_ == "cuda"
    assert gpu.n_iter_ == cpu.n_iter_
    np.testing.assert_allclose(gpu.loss_curve_, cpu.loss_curve_, rtol=rtol)
    for a, b in zip(gpu.coefs_ + gpu.intercepts_, cpu.coefs_ + cpu.intercepts_):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * np.abs(b).max())


SOLVERS = [
    dict(solver="adam"),
    dict(solver="sgd", momentum=0.0, learning_rate_init=0.1),
    dict(solver="sgd", nesterovs_momentum=False, learning_rate_init=0.05),
    dict(solver="sgd", learning_rate_init=0.05),  # Nesterov
    dict(solver="sgd", learning_rate="invscaling", learning_rate_init=0.2),
    dict(solver="sgd", learning_rate="adaptive", learning_rate_init=0.05, n_iter_no_change=1, tol=10.0),
]


def _id(kw):
    return "-".join(f"{k}={v}" for k, v in kw.items())


@pytest.mark.parametrize("kw", SOLVERS, ids=_id)
@pytest.mark.parametrize("hidden", [(24,), (20, 12), (16, 12, 8)], ids=str)
def test_graph_epochs_match_the_cpu_float64(data, graph_runs, kw, hidden):
    X, y = data
    params = dict(hidden_layer_sizes=hidden, batch_size=64, max_iter=3, random_state=1, alpha=1e-3, **kw)
    cpu, gpu = _fit("cpu", params, X, y), _fit("cuda", params, X, y)
    _same(cpu, gpu, rtol=1e-7)
    assert graph_runs == [7] * gpu.n_iter_  # 430 rows in 64-row steps: 6 full, one of 46


@pytest.mark.parametrize("activation", ["identity", "logistic", "tanh", "relu"])
def test_every_activation(data, graph_runs, activation):
    X, y = data
    params = dict(hidden_layer_sizes=(30, 10), activation=activation, batch_size=50, max_iter=2)
    params["random_state"] = 0
    _same(_fit("cpu", params, X, y), _fit("cuda", params, X, y), rtol=1e-7)
    assert len(graph_runs) == 2


@pytest.mark.parametrize("batch_size", [2, 40, 43, 430, 1000], ids=lambda b: f"batch={b}")
def test_batch_sizes_full_partial_and_one_batch(data, graph_runs, batch_size):
    """Many steps per graph and a remainder (2), a partial last batch (40), an exact split
    (43), the whole set as one batch (430) and a batch larger than the set (clipped)."""
    X, y = data
    params = dict(hidden_layer_sizes=(16,), batch_size=batch_size, max_iter=12, random_state=0)
    _same(_fit("cpu", params, X, y), _fit("cuda", params, X, y), rtol=1e-7)
    assert graph_runs  # 12 epochs: enough steps planned to capture even one batch an epoch


def test_no_shuffle_and_multilabel(graph_runs):
    from sklearn.datasets import make_multilabel_classification

    X, Y = make_multilabel_classification(n_samples=150, n_features=20, n_classes=4, random_state=0)
    params = dict(hidden_layer_sizes=(12,), batch_size=32, max_iter=3, shuffle=False, random_state=0)
    _same(_fit("cpu", params, X, Y), _fit("cuda", params, X, Y), rtol=1e-7)
    assert graph_runs


@pytest.mark.parametrize("solver", ["adam", "sgd"])
def test_early_stopping_restores_the_same_epoch(data, graph_runs, solver):
    X, y = data
    params = dict(
        hidden_layer_sizes=(20,),
        solver=solver,
        batch_size=32,
        max_iter=6,
        early_stopping=True,
        n_iter_no_change=2,
        random_state=0,
    )
    cpu, gpu = _fit("cpu", params, X, y), _fit("cuda", params, X, y)
    _same(cpu, gpu, rtol=1e-7)
    np.testing.assert_array_equal(gpu.validation_scores_, cpu.validation_scores_)
    assert len(graph_runs) == gpu.n_iter_


def test_warm_start_and_partial_fit_continue_the_optimizer(data, graph_runs):
    X, y = data
    params = dict(hidden_layer_sizes=(20,), batch_size=48, max_iter=2, random_state=0, warm_start=True)
    models = {}
    for device in ("cpu", "cuda"):
        clf = _fit(device, params, X, y)
        clf.fit(X, y)  # continues: Adam's step count and moments carry over
        clf.partial_fit(X[:100], y[:100])  # 3 steps: launched one by one, after graph epochs
        models[device] = clf
    _same(models["cpu"], models["cuda"], rtol=1e-7)
    assert len(graph_runs) == 4


def test_short_partial_fit_launches_step_by_step(data, graph_runs):
    """A partial_fit of fewer steps than GRAPH_MIN_STEPS does not capture; one of more does."""
    X, y = data
    clf = GPUMLPClassifier((16,), batch_size=50, random_state=0, device="cuda")
    clf.partial_fit(X[:200], y[:200], classes=np.unique(y))  # 4 steps
    assert graph_runs == []
    clf.partial_fit(X, y)  # 9 steps: still short of 12
    assert graph_runs == []
    clf.set_params(batch_size=20).partial_fit(X, y)  # 22 steps
    assert graph_runs == [22]


@pytest.mark.parametrize("kw", [dict(solver="adam"), dict(solver="sgd", learning_rate_init=0.05)], ids=_id)
def test_sample_weight(data, graph_runs, kw, rng):
    X, y = data
    sw = rng.random(len(y)) * 2
    sw[::5] = 0
    params = dict(hidden_layer_sizes=(20, 10), batch_size=40, max_iter=2, random_state=0, **kw)
    cpu = _fit("cpu", params, X, y, sample_weight=sw)
    gpu = _fit("cuda", params, X, y, sample_weight=sw)
    _same(cpu, gpu, rtol=1e-7)
    assert graph_runs


def test_float32(data, graph_runs):
    X, y = data
    params = dict(hidden_layer_sizes=(32, 16), batch_size=50, max_iter=2, random_state=0)
    X32 = X.astype(np.float32)
    _same(_fit("cpu", params, X32, y), _fit("cuda", params, X32, y), rtol=1e-4)
    assert graph_runs


def test_graph_and_launched_steps_agree(data, monkeypatch):
    """The graph makes the same updates as the per-step launches it replaces."""
    from sknn_gpu.neural_network import _mlp_cuda

    X, y = data
    params = dict(hidden_layer_sizes=(24, 12), batch_size=40, max_iter=3, random_state=0)
    graph = _fit("cuda", params, X, y)
    monkeypatch.setattr(_mlp_cuda, "USE_GRAPHS", False)
    launched = _fit("cuda", params, X, y)
    _same(launched, graph, rtol=1e-10)


def test_cupy_input_in_any_layout(data, graph_runs):
    """Fortran-ordered CuPy rows are made contiguous once; the result is the NumPy input's."""
    import cupy

    X, y = data
    params = dict(hidden_layer_sizes=(16,), batch_size=64, max_iter=2, random_state=0)
    a = _fit("cuda", params, cupy.asfortranarray(cupy.asarray(X)), cupy.asarray(y))
    b = _fit("cuda", params, X, y)
    for u, v in zip(a.coefs_, b.coefs_):
        np.testing.assert_allclose(u, v, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("hidden", [(20,), (20, 12)])
@pytest.mark.parametrize("activation", ["identity", "logistic", "tanh", "relu"])
@pytest.mark.parametrize("target", ["multiclass", "binary", "multilabel", "40 classes"])
def test_fused_prediction_matches_the_numpy_forward(data, activation, target, hidden):
    """predict_proba on the GPU (cuBLAS products, bias_act_rows, then out_fused up to 32
    outputs or a product and bias_out above) against the NumPy forward pass on the same
    weights (softmax and logistic outputs), for CuPy and NumPy input."""
    import cupy
    from sklearn.datasets import make_multilabel_classification

    from sknn_gpu.neural_network._base import forward

    X, y = data
    if target == "binary":
        y = (y > 4).astype(int)
    elif target == "multilabel":
        X, y = make_multilabel_classification(n_samples=200, n_features=30, n_classes=4, random_state=1)
    elif target == "40 classes":  # wider than the fused output kernel takes
        y = np.arange(len(y)) % 40
    params = dict(hidden_layer_sizes=hidden, activation=activation, max_iter=3, random_state=0)
    gpu = _fit("cuda", params, X, y)
    expected = forward(X.copy(), gpu.coefs_, gpu.intercepts_, activation, gpu.out_activation_)
    if target == "binary":
        expected = np.hstack([1 - expected, expected])
    np.testing.assert_allclose(gpu.predict_proba(X), expected, rtol=1e-12, atol=1e-15)
    got = gpu.predict_proba(cupy.asarray(X))
    assert isinstance(got, cupy.ndarray)
    np.testing.assert_allclose(got.get(), expected, rtol=1e-12, atol=1e-15)


def test_fused_prediction_in_float32_within_the_documented_tolerance(data):
    """float32 prediction through out_fused: its sums run in another order than NumPy's."""
    import cupy

    from sknn_gpu.neural_network._base import forward

    X, y = data
    X = X.astype(np.float32)
    for hidden in [(300,), (64, 33)]:  # rows of several 32-column strides, and an odd width
        gpu = _fit("cuda", dict(hidden_layer_sizes=hidden, max_iter=2, random_state=0), X, y)
        expected = forward(X.copy(), gpu.coefs_, gpu.intercepts_, "relu", "softmax")
        got = gpu.predict_proba(cupy.asarray(X)).get()
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kernel", ["float64", "float32", "float32 tensor cores"])
@pytest.mark.parametrize(
    "hidden", [(1,), (31,), (64,), (100,), (128,), (129,), (256,), (257,), (20, 100), (16, 8, 64), (50, 33)]
)
def test_prediction_kernels_match_the_product_path_and_numpy(data, hidden, kernel, monkeypatch):
    """Every prediction path against the NumPy forward pass: float32 on tensor cores
    (dense_tc every hidden layer, a last one of at most TC_COLS units taking the output layer
    in the same launch, else out_fused after it); float32 without them (tail_fused up to
    TAIL_MAX hidden units: the input X itself or the previous layer's products with their
    bias and activation applied on reading); the cuBLAS products with out_fused (USE_TAIL
    off). Row counts around a block's rows, input widths not a multiple of a chunk (read
    value by value) and multiples of 4 (16-byte reads), every width class and every number
    of rows a block takes. float64 keeps the product path (checked too)."""
    import cupy

    from sknn_gpu._backend import device_limits
    from sknn_gpu.neural_network import _predict_cuda
    from sknn_gpu.neural_network._base import forward

    dtype = np.float64 if kernel == "float64" else np.float32
    tc = kernel.endswith("tensor cores")
    if tc and device_limits().compute_capability < (8, 0):
        pytest.skip("tensor-core kernel needs compute capability 8.0")
    monkeypatch.setattr(_predict_cuda, "USE_TENSOR_CORES", tc)
    X, y = data
    # the first layer's input width: 71 or 72 features (read value by value, or in 16-byte
    # vectors); a later layer's: the previous hidden layer's 20, 8 (vectors) or 50 units
    X = np.hstack([X, X[:, : 7 + (hidden[0] % 2 == 0)]]).astype(dtype)
    activation = "tanh" if len(hidden) == 2 else "relu"
    params = dict(hidden_layer_sizes=hidden, activation=activation, max_iter=2, random_state=0)
    clf = _fit("cuda", params, X, y)
    paths = []
    for name in ("_tail_kernel", "_forward_tc"):
        real = getattr(_predict_cuda, name)
        monkeypatch.setattr(
            _predict_cuda, name, lambda *a, real=real, name=name, **k: paths.append(name) or real(*a, **k)
        )
    rtol, atol = (1e-5, 1e-6) if dtype == np.float32 else (1e-12, 1e-15)
    for n in (1, 31, 65, 430):
        Xd = cupy.asarray(X[:n])
        expected = forward(X[:n].copy(), clf.coefs_, clf.intercepts_, activation, "softmax")
        monkeypatch.setattr(_predict_cuda, "USE_TAIL", True)
        fused = clf.predict_proba(Xd).get()
        again = clf.predict_proba(cupy.asarray(X[:n])).get()  # the kept plan, another input array
        monkeypatch.setattr(_predict_cuda, "USE_TAIL", False)
        products = clf.predict_proba(Xd).get()
        assert fused.dtype == dtype
        np.testing.assert_allclose(fused, expected, rtol=rtol, atol=atol)
        np.testing.assert_array_equal(again, fused)
        np.testing.assert_allclose(products, expected, rtol=rtol, atol=atol)
    if tc:
        assert paths == ["_forward_tc"] * 12
    else:
        fused = (
            dtype == np.float32 and hidden[-1] <= _predict_cuda.TAIL_MAX
        )  # float64 keeps cuBLAS's products
        assert paths == (["_tail_kernel"] * 8 if fused else [])
    coefs, inters = clf._device_copy("coefs_"), clf._device_copy("intercepts_")
    expected = forward(X.copy(), clf.coefs_, clf.intercepts_, activation, "softmax")
    monkeypatch.setattr(_predict_cuda, "USE_TAIL", True)
    if tc:  # every number of rows a block takes, with and without the output layer fused
        for bm in _predict_cuda._TC_ROWS:
            for tail in (True, False):
                monkeypatch.setattr(_predict_cuda, "USE_TAIL", tail)
                ow = _predict_cuda.out_weights(coefs[-1])
                got = _predict_cuda.forward_cuda(
                    cupy.asarray(X), coefs, inters, activation, "softmax", ow, tc_rows=bm
                )
                np.testing.assert_allclose(
                    got.get(), expected, rtol=rtol, atol=atol, err_msg=f"bm={bm} {tail}"
                )
    elif fused:  # every number of rows a block of tail_fused takes (430 rows get the fewest)
        top = _predict_cuda._TAIL_MAX_TM[next(w for w in _predict_cuda._TAIL_MAX_TM if hidden[-1] <= w)]
        for tm in range(2, top + 1):
            got = _predict_cuda.forward_cuda(
                cupy.asarray(X), coefs, inters, activation, "softmax", tail_tm=tm
            )
            np.testing.assert_allclose(got.get(), expected, rtol=rtol, atol=atol, err_msg=f"tm={tm}")


@pytest.mark.parametrize("activation", ["identity", "logistic", "tanh", "relu"])
@pytest.mark.parametrize("target", ["multiclass", "binary", "40 classes"])
def test_tensor_core_prediction_every_activation_and_output(data, activation, target):
    """dense_tc with every activation in its epilogue and in the fused output layer, a
    logistic output (binary) and more outputs than out_fused takes (a cuBLAS product and
    bias_out after the tensor-core layers), three hidden layers; float32 CuPy input."""
    import cupy

    from sknn_gpu._backend import device_limits
    from sknn_gpu.neural_network._base import forward

    if device_limits().compute_capability < (8, 0):
        pytest.skip("tensor-core kernel needs compute capability 8.0")
    X, y = data
    X = X.astype(np.float32)
    if target == "binary":
        y = (y > 4).astype(int)
    elif target == "40 classes":
        y = np.arange(len(y)) % 40
    for hidden in [(24,), (40, 200, 16)]:
        params = dict(hidden_layer_sizes=hidden, activation=activation, max_iter=3, random_state=0)
        gpu = _fit("cuda", params, X, y)
        expected = forward(X.copy(), gpu.coefs_, gpu.intercepts_, activation, gpu.out_activation_)
        if target == "binary":
            expected = np.hstack([1 - expected, expected])
        got = gpu.predict_proba(cupy.asarray(X))
        assert isinstance(got, cupy.ndarray)
        np.testing.assert_allclose(got.get(), expected, rtol=1e-5, atol=1e-6)


def test_tensor_core_plans_follow_the_model_and_the_input(data):
    """The launches kept for an input shape point at the model's arrays: a refit, new
    intercepts, another activation, Fortran-ordered, offset and float64 input each give
    what the NumPy forward pass gives for the model as it is now."""
    import cupy

    from sknn_gpu._backend import device_limits
    from sknn_gpu.neural_network._base import forward

    if device_limits().compute_capability < (8, 0):
        pytest.skip("tensor-core kernel needs compute capability 8.0")
    X, y = data
    X = X.astype(np.float32)
    clf = _fit("cuda", dict(hidden_layer_sizes=(48, 20), max_iter=2, random_state=0), X, y)
    Xd = cupy.asarray(X)

    def check(got, Xh=X):
        expected = forward(Xh.copy(), clf.coefs_, clf.intercepts_, clf.activation, "softmax")
        np.testing.assert_allclose(got.get(), expected, rtol=1e-5, atol=1e-6)

    for _ in range(3):  # the first call builds the plan, the next ones replay it
        check(clf.predict_proba(Xd))
    clf.intercepts_ = [b + 0.25 for b in clf.intercepts_]
    check(clf.predict_proba(Xd))
    clf.set_params(activation="tanh")
    check(clf.predict_proba(Xd))
    check(clf.predict_proba(cupy.asfortranarray(Xd)))
    check(clf.predict_proba(Xd[1:]), X[1:])  # another start address
    flat = cupy.concatenate([cupy.zeros(1, dtype=cupy.float32), Xd.ravel()])
    check(clf.predict_proba(flat[1:].reshape(X.shape)))  # contiguous, not 16-byte aligned
    got = clf.predict_proba(Xd.astype(np.float64))  # cast to the model's float32
    assert got.dtype == np.float32
    check(got)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.set_params(activation="relu", max_iter=3).fit(X[::-1], y[::-1])
    check(clf.predict_proba(Xd))
    with pytest.raises(ValueError, match="features"):
        clf.predict_proba(Xd[:, :10])


def test_tensor_core_prediction_gives_way_where_a_split_copy_would_be_too_large(data, monkeypatch):
    """dense_tc keeps split copies of the hidden layers' coefficients with the model; a
    network with a layer whose copy would pass TC_PACK_MAX takes the cuBLAS products (no
    copy made), same result."""
    import cupy

    from sknn_gpu.neural_network import _predict_cuda
    from sknn_gpu.neural_network._base import forward

    X, y = data
    X = X.astype(np.float32)
    clf = _fit("cuda", dict(hidden_layer_sizes=(40,), max_iter=2, random_state=0), X, y)
    monkeypatch.setattr(
        _predict_cuda, "TC_PACK_MAX", 2 * 128 * 64 * 4 - 1
    )  # 64 inputs by 128 columns: one byte more
    launched = []
    real = _predict_cuda._forward_tc
    monkeypatch.setattr(_predict_cuda, "_forward_tc", lambda *a, **k: launched.append(a) or real(*a, **k))
    got = clf.predict_proba(cupy.asarray(X)).get()
    assert not launched
    assert clf._tc_packs(clf._device_copy("coefs_")) is None
    expected = forward(X.copy(), clf.coefs_, clf.intercepts_, "relu", "softmax")
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_nan_in_cupy_input_is_refused_after_the_forward_pass(data):
    """The NaN check of dense CuPy input runs after the forward pass is queued; it still refuses."""
    import cupy

    X, y = data
    clf = _fit("cuda", dict(hidden_layer_sizes=(8,), max_iter=1, random_state=0), X, y)
    bad = cupy.asarray(X[:20].copy())
    bad[3, 5] = cupy.inf
    for method in (clf.predict, clf.predict_proba, clf.predict_log_proba):
        with pytest.raises(ValueError, match="NaN or infinity"):
            method(bad)


@pytest.mark.parametrize("hidden", [(8,), (8, 6), (200,)])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("width", [64, 63])
def test_non_finite_cupy_input_is_refused_whichever_kernel_reads_the_first_products(
    data, hidden, value, dtype, width
):
    """The first kernel's reads stand in for a pass over X. float64: out_fused reads the first
    layer's products with one hidden layer, bias_act_rows with two; float32 on tensor cores:
    dense_tc reads X itself (in 16-byte vectors with 64 features, value by value with 63). A
    zero weight column must not hide the value."""
    import cupy

    X, y = data
    X = X[:, :width].astype(dtype)
    clf = _fit("cuda", dict(hidden_layer_sizes=hidden, max_iter=1, random_state=0), X, y)
    clf.coefs_[0][7, :] = 0.0  # inf * 0 is NaN, still caught
    clf.coefs_ = list(clf.coefs_)  # a new list: the device copies are rebuilt
    for col in (5, 7):
        bad = cupy.asarray(X[:50].copy())
        bad[41, col] = value
        with pytest.raises(ValueError, match="NaN or infinity"):
            clf.predict_proba(bad)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n_out", [1, 2, 3, 9, 10, 12, 13, 17, 24, 32])
def test_fused_output_layer_matches_numpy_at_every_width_and_row_count(dtype, n_out, monkeypatch):
    """out_fused (no fused tail): every compiled output width and widths padded up to the
    next one (zero columns that must not reach the softmax), last hidden layers whose
    width is and is not a multiple of a 16-byte read (the vector and value-by-value
    reads), row counts around a warp's rows, softmax and logistic outputs."""
    import cupy

    from sknn_gpu.neural_network import _predict_cuda
    from sknn_gpu.neural_network._base import forward

    monkeypatch.setattr(_predict_cuda, "USE_TAIL", False)
    rng = np.random.default_rng(n_out)
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    for n_hid, activation in [(36, "tanh"), (37, "relu"), (258, "logistic")]:
        sizes = (20, n_hid, n_out)
        coefs = [(rng.normal(size=(a, b)) / np.sqrt(a)).astype(dtype) for a, b in zip(sizes[:-1], sizes[1:])]
        inters = [rng.normal(size=b).astype(dtype) for b in sizes[1:]]
        dc, di = [cupy.asarray(c) for c in coefs], [cupy.asarray(b) for b in inters]
        ow = _predict_cuda.out_weights(dc[-1])
        for out in ("softmax", "logistic"):
            for n in (1, 7, 33):
                X = rng.normal(size=(n, 20)).astype(dtype)
                got = _predict_cuda.forward_cuda(cupy.asarray(X), dc, di, activation, out, ow)
                expected = forward(X.copy(), coefs, inters, activation, out)
                assert got.shape == (n, n_out)
                np.testing.assert_allclose(got.get(), expected, rtol=rtol, atol=rtol * 1e-1)


def test_finite_cupy_input_whose_products_overflow_is_not_refused(data):
    """A flagged product from finite X (float32 overflow) is not an input error: X itself is
    checked then, and the call returns what the CPU path returns for the other rows."""
    import cupy

    from sknn_gpu.neural_network._base import forward

    X, y = data
    X = X.astype(np.float32)
    gpu = _fit("cuda", dict(hidden_layer_sizes=(8,), max_iter=1, random_state=0), X, y)
    big = X[:20].copy()
    big[4] = 3e38  # finite, but its products overflow to infinity
    with np.errstate(all="ignore"):
        got = gpu.predict_proba(cupy.asarray(big)).get()
        expected = forward(big.copy(), gpu.coefs_, gpu.intercepts_, "relu", "softmax")
    keep = np.arange(20) != 4
    np.testing.assert_allclose(got[keep], expected[keep], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_initial_weights_drawn_on_the_gpu_are_numpys_bit_for_bit(dtype, monkeypatch):
    """_mt19937.legacy_uniform continues a RandomState's MT19937 stream on the GPU: the same
    values as RandomState.uniform(...).astype(dtype), and the state left where NumPy leaves
    it; from mid-generation, and in several pieces."""
    from sknn_gpu import _mt19937

    for shape, burn, chunk in [((784, 1280), 0, None), ((3, 5), 37, None), ((1000, 333), 1001, 4096)]:
        if chunk is not None:
            monkeypatch.setattr(_mt19937, "UNIFORM_CHUNK_WORDS", chunk)
        ours, numpys = np.random.RandomState(11), np.random.RandomState(11)
        ours.uniform(size=burn)
        numpys.uniform(size=burn)
        got = _mt19937.legacy_uniform(ours, -0.0712, 0.0712, shape, dtype)
        assert got.shape == shape and got.dtype == dtype
        np.testing.assert_array_equal(got.get(), numpys.uniform(-0.0712, 0.0712, shape).astype(dtype))
        np.testing.assert_array_equal(ours.random_sample(7), numpys.random_sample(7))
    other = np.random.RandomState(np.random.PCG64(0))  # not MT19937: left to the host
    assert _mt19937.legacy_uniform(other, 0.0, 1.0, (3,), dtype) is None


def test_fit_with_initial_weights_drawn_on_the_gpu_equals_drawn_on_the_host(data, monkeypatch):
    """The estimator draws large layers on the GPU: its fit is the one drawn on the host."""
    from sknn_gpu.neural_network import _mlp

    X, y = data
    params = dict(hidden_layer_sizes=(40, 20), max_iter=1, random_state=3)
    monkeypatch.setattr(_mlp, "GPU_DRAWS_FROM", 1)  # every layer
    on_gpu = _fit("cuda", params, X, y)
    monkeypatch.setattr(_mlp, "GPU_DRAWS_FROM", 1 << 62)  # none
    on_host = _fit("cuda", params, X, y)
    for a, b in zip(on_gpu.coefs_ + on_gpu.intercepts_, on_host.coefs_ + on_host.intercepts_):
        np.testing.assert_array_equal(a, b)
