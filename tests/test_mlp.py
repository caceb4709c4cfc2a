"""GPUMLPClassifier: sklearn parity, training behaviour, errors, CPU/GPU parity."""

import inspect
import logging
import pickle
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_digits, make_multilabel_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

from sknn_gpu import GPUMLPClassifier

#: scikit-learn's MLPClassifier takes sample_weight from 1.7 on: the reference of the weighted tests
sklearn_mlp_weights = pytest.mark.skipif(
    "sample_weight" not in inspect.signature(MLPClassifier.fit).parameters,
    reason="scikit-learn's MLPClassifier takes sample_weight from 1.7 on (the reference here)",
)


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return train_test_split(X / 16.0, y, test_size=0.25, random_state=0)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        yield


SETTINGS = [
    dict(solver="adam", max_iter=40),
    dict(solver="sgd", learning_rate_init=0.1, max_iter=40),
    dict(solver="sgd", learning_rate_init=0.05, momentum=0.5, nesterovs_momentum=False, max_iter=30),
]


@pytest.mark.parametrize("kw", SETTINGS, ids=lambda k: k["solver"] + str(k.get("momentum", "")))
def test_digits_accuracy_within_one_percent_of_sklearn(device, digits, kw, rng):
    Xtr, Xte, ytr, yte = digits
    seed = int(rng.integers(1000))
    params = dict(hidden_layer_sizes=(48,), random_state=seed, **kw)
    ours = GPUMLPClassifier(device=device, **params).fit(Xtr, ytr)
    ref = MLPClassifier(**params).fit(Xtr, ytr)
    assert ours.device_ == device
    assert ours.score(Xte, yte) >= ref.score(Xte, yte) - 0.01
    assert len(ours.loss_curve_) == ours.n_iter_
    # same initial weights, same shuffles, same update rules: the loss curves agree
    np.testing.assert_allclose(ours.loss_curve_, ref.loss_curve_, rtol=1e-4)


def test_cpu_matches_sklearn_weights(digits, rng):
    Xtr, _, ytr, _ = digits
    seed = int(rng.integers(1000))
    params = dict(hidden_layer_sizes=(16, 12), activation="tanh", solver="sgd", max_iter=3, random_state=seed)
    ours = GPUMLPClassifier(device="cpu", **params).fit(Xtr, ytr)
    ref = MLPClassifier(**params).fit(Xtr, ytr)
    for a, b in zip(ours.coefs_ + ours.intercepts_, ref.coefs_ + ref.intercepts_):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    assert ours.t_ == ref.t_ == 3 * Xtr.shape[0]


def test_per_sample_sgd_matches_sklearn(digits, rng):
    Xtr, _, ytr, _ = digits
    Xs, ys = Xtr[:300], ytr[:300]
    params = dict(
        hidden_layer_sizes=(20,),
        activation="logistic",
        solver="sgd",
        batch_size=1,
        learning_rate_init=0.05,
        max_iter=2,
    )
    seed = int(rng.integers(1000))
    ours = GPUMLPClassifier(device="cpu", random_state=seed, **params).fit(Xs, ys)
    ref = MLPClassifier(random_state=seed, **params).fit(Xs, ys)
    np.testing.assert_allclose(ours.loss_curve_, ref.loss_curve_, rtol=1e-9)
    np.testing.assert_allclose(ours.coefs_[0], ref.coefs_[0], rtol=1e-8, atol=1e-12)


def test_float32_is_preserved(device, digits):
    Xtr, Xte, ytr, _ = digits
    clf = GPUMLPClassifier((10,), max_iter=3, random_state=0, device=device).fit(Xtr.astype(np.float32), ytr)
    assert all(isinstance(c, np.ndarray) and c.dtype == np.float32 for c in clf.coefs_ + clf.intercepts_)
    assert [c.shape for c in clf.coefs_] == [(64, 10), (10, 10)]
    assert clf.predict_proba(Xte.astype(np.float32)).dtype == np.float32


def test_early_stopping_restores_best_weights(device, digits, rng):
    Xtr, _, ytr, _ = digits
    seed = int(rng.integers(1000))
    params = dict(
        hidden_layer_sizes=(16,),
        solver="sgd",
        learning_rate_init=0.3,
        momentum=0.9,
        early_stopping=True,
        n_iter_no_change=4,
        max_iter=25,
        random_state=seed,
        device=device,
    )
    clf = GPUMLPClassifier(**params).fit(Xtr, ytr)
    scores = clf.validation_scores_
    assert len(scores) == clf.n_iter_ == len(clf.loss_curve_)
    assert clf.best_validation_score_ == max(scores)
    assert clf.best_loss_ is None
    best_epoch = int(np.argmax(scores)) + 1
    # the same run stopped at the best epoch ends on exactly those weights
    again = GPUMLPClassifier(**{**params, "max_iter": best_epoch}).fit(Xtr, ytr)
    for a, b in zip(clf.coefs_ + clf.intercepts_, again.coefs_ + again.intercepts_):
        np.testing.assert_array_equal(a, b)


def test_partial_fit(device, digits):
    Xtr, Xte, ytr, yte = digits
    clf = GPUMLPClassifier((32,), solver="sgd", learning_rate_init=0.1, random_state=0, device=device)
    with pytest.raises(ValueError, match="classes must be passed on the first call"):
        clf.partial_fit(Xtr[:10], ytr[:10])
    classes = np.unique(ytr)
    half = Xtr.shape[0] // 2
    for _ in range(5):
        clf.partial_fit(Xtr[:half], ytr[:half], classes=classes)
        clf.partial_fit(Xtr[half:], ytr[half:])
    assert clf.n_iter_ == 1  # one epoch per call, as in scikit-learn
    assert len(clf.loss_curve_) == 10
    assert clf.t_ == 5 * Xtr.shape[0]
    assert clf.score(Xte, yte) > 0.9
    with pytest.raises(ValueError, match="classes not in"):
        clf.partial_fit(Xtr[:5], np.array([0, 1, 2, 3, 99]))


def test_partial_fit_with_early_stopping_or_lbfgs_is_refused(digits):
    Xtr, _, ytr, _ = digits
    with pytest.raises(ValueError, match="partial_fit does not support early_stopping"):
        GPUMLPClassifier(early_stopping=True, device="cpu").partial_fit(Xtr, ytr, classes=np.unique(ytr))
    assert not hasattr(GPUMLPClassifier(solver="lbfgs"), "partial_fit")


def test_binary_and_multilabel(device, rng):
    X, Y = make_multilabel_classification(
        n_samples=200, n_features=10, n_classes=4, random_state=int(rng.integers(99))
    )
    clf = GPUMLPClassifier((24,), max_iter=60, learning_rate_init=0.01, random_state=0, device=device).fit(
        X, Y
    )
    assert clf.out_activation_ == "logistic"
    assert clf.predict(X).shape == Y.shape
    assert set(np.unique(clf.predict(X))) <= {0, 1}
    # clearly better than predicting each label's majority value (margin >= 0.11 over 15 seeds)
    majority = np.maximum(Y.mean(axis=0), 1 - Y.mean(axis=0)).mean()
    assert (clf.predict(X) == Y).mean() > majority + 0.05
    ref = MLPClassifier((24,), max_iter=60, learning_rate_init=0.01, random_state=0).fit(X, Y)
    np.testing.assert_allclose(clf.loss_curve_, ref.loss_curve_, rtol=1e-4)
    yb = (X[:, 0] > np.median(X[:, 0])).astype(int)
    b = GPUMLPClassifier((8,), max_iter=50, learning_rate_init=0.01, random_state=0, device=device).fit(X, yb)
    P = b.predict_proba(X)
    assert P.shape == (200, 2)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(b.predict_log_proba(X), np.log(P), rtol=1e-6)
    assert b.score(X, yb) > 0.8


def test_bad_input_errors(device, digits):
    Xtr, _, ytr, _ = digits
    Xn = Xtr.copy()
    Xn[3, 5] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        GPUMLPClassifier(device=device).fit(Xn, ytr)
    with pytest.raises(ValueError, match="lbfgs"):
        GPUMLPClassifier(solver="lbfgs", device=device).fit(Xtr, ytr)
    clf = GPUMLPClassifier((4,), max_iter=2, device=device).fit(Xtr, ytr)
    with pytest.raises(ValueError, match="features"):
        clf.predict(Xtr[:, :10])
    with pytest.raises(ValueError, match="inconsistent numbers of samples|samples"):
        GPUMLPClassifier(device=device).fit(Xtr, ytr[:-1])
    with pytest.raises(ValueError, match="hidden_layer_sizes"):
        GPUMLPClassifier(hidden_layer_sizes=(4, 0), device=device).fit(Xtr, ytr)


def test_verbose_warm_start_and_pickle(device, digits, capsys, caplog):
    Xtr, Xte, ytr, _ = digits
    clf = GPUMLPClassifier((12,), max_iter=3, verbose=2, warm_start=True, random_state=0, device=device)
    with caplog.at_level(logging.INFO, logger="sknn_gpu.neural_network"):
        clf.fit(Xtr, ytr)
    assert "GPUMLPClassifier.fit 3/3: loss=" in caplog.text  # iteration and loss, as scikit-learn
    assert capsys.readouterr().out == ""  # through logging, never print()
    first = clf.loss_curve_[-1]
    clf.fit(Xtr, ytr)  # continues from the previous weights
    assert len(clf.loss_curve_) == 6 and clf.loss_curve_[-1] < first
    clone = pickle.loads(pickle.dumps(clf))
    assert all(isinstance(c, np.ndarray) for c in clone.coefs_)
    np.testing.assert_array_equal(clone.predict(Xte), clf.predict(Xte))


def test_learning_rate_schedules(digits):
    Xtr, _, ytr, _ = digits
    for schedule in ("invscaling", "adaptive"):
        params = dict(
            hidden_layer_sizes=(10,),
            solver="sgd",
            learning_rate=schedule,
            learning_rate_init=0.2,
            n_iter_no_change=2,
            tol=0.05,
            max_iter=15,
            random_state=1,
        )
        ours = GPUMLPClassifier(device="cpu", **params).fit(Xtr, ytr)
        ref = MLPClassifier(**params).fit(Xtr, ytr)
        assert ours.n_iter_ == ref.n_iter_
        np.testing.assert_allclose(ours.loss_curve_, ref.loss_curve_, rtol=1e-9)


# ------------------------------------------------------------------ GPU only
def _pair(params, X, y):
    cpu = GPUMLPClassifier(device="cpu", **params).fit(X, y)
    gpu = GPUMLPClassifier(device="cuda", **params).fit(X, y)
    return cpu, gpu


def _assert_same_model(cpu, gpu, rtol):
    assert gpu.device_ == "cuda"
    np.testing.assert_allclose(gpu.loss_curve_, cpu.loss_curve_, rtol=rtol)
    for a, b in zip(gpu.coefs_ + gpu.intercepts_, cpu.coefs_ + cpu.intercepts_):
        assert isinstance(a, np.ndarray)
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * np.abs(b).max())


GPU_CASES = [
    dict(solver="adam", batch_size=32),
    dict(solver="sgd", batch_size=50, learning_rate_init=0.1),
    dict(solver="sgd", batch_size=1, learning_rate_init=0.01),  # fused, nesterov
    dict(solver="sgd", batch_size=1, learning_rate_init=0.01, momentum=0.0),  # fused, plain
    dict(solver="sgd", batch_size=1, learning_rate_init=0.01, nesterovs_momentum=False),  # fused, momentum
    dict(solver="adam", batch_size=1),  # fused adam
    dict(solver="sgd", batch_size=1, learning_rate_init=0.01, kernels="cublas"),
    dict(solver="adam", batch_size=1, hidden_layer_sizes=(12, 9)),  # per-sample GEMV/GER path
]


@pytest.mark.cuda
@pytest.mark.parametrize("kw", GPU_CASES, ids=lambda k: "-".join(f"{a}={b}" for a, b in k.items()))
@pytest.mark.parametrize("activation", ["relu", "logistic"])
def test_cpu_gpu_parity_float64(digits, kw, activation):
    Xtr, _, ytr, _ = digits
    params = dict(hidden_layer_sizes=(40,), activation=activation, max_iter=2, random_state=3, alpha=1e-3)
    params.update(kw)
    cpu, gpu = _pair(params, Xtr[:400], ytr[:400])
    _assert_same_model(cpu, gpu, rtol=1e-7)


@pytest.mark.cuda
@pytest.mark.parametrize("kw", GPU_CASES[:4], ids=lambda k: "-".join(f"{a}={b}" for a, b in k.items()))
def test_cpu_gpu_parity_float32(digits, kw):
    Xtr, _, ytr, _ = digits
    params = dict(hidden_layer_sizes=(40,), max_iter=1, random_state=5)
    params.update(kw)
    cpu, gpu = _pair(params, Xtr[:300].astype(np.float32), ytr[:300])
    _assert_same_model(cpu, gpu, rtol=1e-4)


@pytest.mark.cuda
@pytest.mark.parametrize("resident", [True, False])
@pytest.mark.parametrize("kw", GPU_CASES[2:6], ids=lambda k: "-".join(f"{a}={b}" for a, b in k.items()))
def test_fused_per_sample_kernel_with_rows_in_shared_or_global_memory(digits, kw, resident, monkeypatch):
    """The fused per-sample kernel keeps each block's rows of the weights and their state
    in shared memory when they fit and in global memory otherwise: both give the CPU's
    model, also with more hidden units per block than warps (3,000 units: 23 a block)."""
    from sknn_gpu.neural_network import _mlp_cuda

    monkeypatch.setattr(_mlp_cuda, "FUSED_RESIDENT", resident)
    Xtr, _, ytr, _ = digits
    params = dict(hidden_layer_sizes=(3000,), max_iter=1, random_state=4, alpha=1e-3)
    params.update(kw)
    cpu, gpu = _pair(params, Xtr[:150], ytr[:150])
    _assert_same_model(cpu, gpu, rtol=1e-7)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("kw", GPU_CASES[2:6], ids=lambda k: "-".join(f"{a}={b}" for a, b in k.items()))
def test_fused_per_sample_kernel_as_one_cluster_gives_the_grid_kernels_bits(digits, kw, dtype, monkeypatch):
    """A per-sample grid of at most FUSED_CLUSTER_MAX blocks runs as one thread-block cluster
    on compute capability 9.0: the same model to the bit as the grid-barrier kernel, and the
    CPU's model (3, 7 and 8 blocks; softmax and, multilabel, logistic outputs)."""
    from sklearn.datasets import make_multilabel_classification

    from sknn_gpu._backend import device_limits
    from sknn_gpu.neural_network import _mlp_cuda

    if device_limits().compute_capability < (9, 0):
        pytest.skip("thread-block clusters need compute capability 9.0")
    Xtr, _, ytr, _ = digits
    Xm, Ym = make_multilabel_classification(n_samples=120, n_features=30, n_classes=5, random_state=2)
    launched = []
    real = _mlp_cuda.get_function
    monkeypatch.setattr(_mlp_cuda, "get_function", lambda f, n, **k: launched.append(n) or real(f, n, **k))
    for hidden, X, y in [((40,), Xtr[:150], ytr[:150]), ((100,), Xtr[:150], ytr[:150]), ((128,), Xm, Ym)]:
        params = dict(hidden_layer_sizes=hidden, max_iter=1, random_state=4, alpha=1e-3, **kw)
        X = X.astype(dtype)
        models = {}
        for cluster in (True, False):
            monkeypatch.setattr(_mlp_cuda, "FUSED_CLUSTER", cluster)
            launched.clear()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                models[cluster] = GPUMLPClassifier(device="cuda", **params).fit(X, y)
            blocks = -(-hidden[0] // 16)
            expected = (
                f"mlp_sgd1_cluster<{'float' if dtype == np.float32 else 'double'}" if cluster else "mlp_sgd1<"
            )
            assert any(
                n.startswith(expected) and (not cluster or n.endswith(f",{blocks}>")) for n in launched
            )
        a, b = models[True], models[False]
        assert a.loss_curve_ == b.loss_curve_
        for u, v in zip(a.coefs_ + a.intercepts_, b.coefs_ + b.intercepts_):
            np.testing.assert_array_equal(u, v)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            cpu = GPUMLPClassifier(device="cpu", **params).fit(X, y)
        _assert_same_model(cpu, a, rtol=1e-7 if dtype == np.float64 else 1e-4)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kw", GPU_CASES[2:6], ids=lambda k: "-".join(f"{a}={b}" for a, b in k.items()))
def test_fused_per_sample_kernel_with_rows_in_registers_gives_the_same_bits(kw, dtype, monkeypatch):
    """Each hidden unit's row of the first layer (and its velocity) held in its warp's
    registers: the same model to the bit as the shared-memory rows, with the grid and with the
    cluster kernel, and the CPU's model. Inputs of 64, 300 and 1,030 features (the last too wide
    for the registers, as is Adam's second moment: those keep the shared-memory rows)."""
    from sknn_gpu.neural_network import _mlp_cuda

    rng = np.random.default_rng(7)
    launched = []
    real = _mlp_cuda.get_function
    monkeypatch.setattr(_mlp_cuda, "get_function", lambda f, n, **k: launched.append(n) or real(f, n, **k))
    regs_per_value = np.dtype(dtype).itemsize // 4
    for n_features, hidden, cluster in [(64, (40,), True), (300, (100,), False), (1030, (60,), True)]:
        X = rng.random((120, n_features)).astype(dtype)
        y = rng.integers(0, 4, 120)
        monkeypatch.setattr(_mlp_cuda, "FUSED_CLUSTER", cluster)
        params = dict(hidden_layer_sizes=hidden, max_iter=2, random_state=3, alpha=1e-3, **kw)
        n_moments = 2 if kw["solver"] == "adam" else int(kw.get("momentum", 0.9) > 0)
        kr = -(-n_features // 32)
        fits = n_moments <= 1 and kr * (1 + n_moments) * regs_per_value <= _mlp_cuda.FUSED_REGISTER_MAX
        models = {}
        for registers in (True, False):
            monkeypatch.setattr(_mlp_cuda, "FUSED_REGISTERS", registers)
            launched.clear()
            models[registers] = GPUMLPClassifier(device="cuda", **params).fit(X, y)
            sgd1 = [n for n in launched if n.startswith("mlp_sgd1")]
            assert len(sgd1) == 1
            args = sgd1[0][sgd1[0].index("<") + 1 : -1].split(",")
            assert int(args[4]) == (kr if registers and fits else 0), sgd1[0]
        a, b = models[True], models[False]
        assert a.loss_curve_ == b.loss_curve_
        for u, v in zip(a.coefs_ + a.intercepts_, b.coefs_ + b.intercepts_):
            np.testing.assert_array_equal(u, v)
        cpu = GPUMLPClassifier(device="cpu", **params).fit(X, y)
        _assert_same_model(cpu, a, rtol=1e-7 if dtype == np.float64 else 1e-4)


@pytest.mark.cuda
def test_cpu_gpu_parity_multilabel_fused(rng):
    X, Y = make_multilabel_classification(n_samples=150, n_features=30, n_classes=5, random_state=2)
    params = dict(
        hidden_layer_sizes=(300,),
        solver="sgd",
        batch_size=1,
        learning_rate_init=0.01,
        max_iter=2,
        random_state=0,
    )
    cpu, gpu = _pair(params, X, Y)
    _assert_same_model(cpu, gpu, rtol=1e-7)


@pytest.mark.cuda
def test_cupy_in_cupy_out(digits):
    import cupy

    Xtr, Xte, ytr, _ = digits
    clf = GPUMLPClassifier((16,), max_iter=5, random_state=0, device="cuda").fit(
        cupy.asarray(Xtr), cupy.asarray(ytr)
    )
    pred = clf.predict(cupy.asarray(Xte))
    assert isinstance(pred, cupy.ndarray)
    assert isinstance(clf.predict_proba(cupy.asarray(Xte)), cupy.ndarray)
    np.testing.assert_array_equal(pred.get(), clf.predict(Xte))
    with pytest.raises(ValueError, match="NaN"):
        clf.predict(cupy.full((2, 64), cupy.nan))


# ------------------------------------------------------------------ issue 15: refuse up front
@pytest.mark.parametrize("hidden", [[2.5], [0], [-5], (4, 0), [True], np.array([3.0]), [[3, 4]]], ids=repr)
def test_hidden_layer_sizes_must_be_positive_integers(device, digits, hidden):
    Xtr, _, ytr, _ = digits
    clf = GPUMLPClassifier(hidden_layer_sizes=hidden, max_iter=2, device=device)
    with pytest.raises(ValueError, match=r"hidden_layer_sizes must hold positive integers"):
        clf.fit(Xtr, ytr)
    assert not hasattr(clf, "coefs_") and not hasattr(clf, "n_features_in_")


def test_integer_like_hidden_layer_sizes_are_accepted(digits):
    Xtr, _, ytr, _ = digits
    clf = GPUMLPClassifier(hidden_layer_sizes=np.array([7, 5]), max_iter=2, device="cpu").fit(Xtr, ytr)
    assert [c.shape for c in clf.coefs_] == [(64, 7), (7, 5), (5, 10)]
    assert GPUMLPClassifier(hidden_layer_sizes=6, max_iter=1, device="cpu").fit(Xtr, ytr).coefs_[0].shape == (
        64,
        6,
    )


def test_huge_network_is_refused_before_allocating(device, digits):
    """10**5 x 10**5 weights need ~10**12 bytes: refused at once with needed vs free."""
    import time

    from sknn_gpu import InsufficientMemoryError

    Xtr, _, ytr, _ = digits
    clf = GPUMLPClassifier(hidden_layer_sizes=(10**5, 10**5), device=device)
    t0 = time.perf_counter()
    with pytest.raises(InsufficientMemoryError, match=r"GPUMLPClassifier\.fit .*needs \d+ bytes .* free"):
        clf.fit(Xtr, ytr)
    assert time.perf_counter() - t0 < 5  # no 80 GB of random draws before the refusal
    assert vars(clf) == vars(GPUMLPClassifier(hidden_layer_sizes=(10**5, 10**5), device=device))


def _small_memory(monkeypatch, n_bytes):
    from sknn_gpu import _backend

    monkeypatch.setattr(_backend, "free_memory", lambda device, need=None: n_bytes)


def test_issue_case_30000_squared_refused_on_a_small_box(device, digits, monkeypatch):
    """The issue's (30000, 30000) died in NumPy after 13-36 s; with 8 GiB free it is refused up front."""
    from sknn_gpu import InsufficientMemoryError

    Xtr, _, ytr, _ = digits
    _small_memory(monkeypatch, 8 << 30)
    clf = GPUMLPClassifier(hidden_layer_sizes=(30000, 30000), device=device)
    with pytest.raises(
        InsufficientMemoryError, match=r"needs \d+ bytes \(\d+\.\d GiB\).* only 8589934592 bytes"
    ):
        clf.fit(Xtr, ytr)
    assert not hasattr(clf, "coefs_") and not hasattr(clf, "classes_")


def test_size_estimate_counts_weights_gradients_state_and_activations():
    from sknn_gpu.neural_network._size import size_estimate as _size_estimate

    units = [64, 30000, 30000, 10]
    P = 64 * 30000 + 30000 + 30000 * 30000 + 30000 + 30000 * 10 + 10
    kw = dict(phase="fit", n_moments=2, batch_size=200, first_pass=True)
    host, dev = _size_estimate(units, 1000, 8, device="cpu", **kw)
    assert dev == 0
    # weights + gradient + 2 Adam moments + update temporaries + initial draws + host state + results
    assert host >= (2 + 2 + 3 + 3 + 2 + 2) * P * 8
    h_gpu, d_gpu = _size_estimate(units, 1000, 8, device="cuda", **kw)
    assert d_gpu >= 4 * P * 8 + 200 * 3 * sum(units) * 8  # on the device: W, G, m, v, activations
    assert h_gpu >= 7 * P * 8 and h_gpu + d_gpu < host + d_gpu + P * 8 * 4
    sgd = _size_estimate(units, 1000, 8, device="cpu", **{**kw, "n_moments": 0})[0]
    assert host - sgd == 4 * P * 8  # two moments, on the trainer's device and kept on the host
    small = _size_estimate(units, 1000, 4, device="cpu", **kw)[0]
    assert small * 2 == host  # float32 halves everything
    # predict: the data, two layers of activations, and on the GPU the weights
    p_cpu = _size_estimate(units, 5000, 8, phase="predict", device="cpu")[0]
    assert p_cpu == (5000 * 64 + 2 * 5000 * 30000) * 8
    assert _size_estimate(units, 5000, 8, phase="predict", device="cuda")[1] == p_cpu + P * 8


@pytest.mark.parametrize("method", ["fit", "partial_fit", "predict"])
def test_one_estimate_guards_fit_partial_fit_and_predict(device, digits, monkeypatch, method):
    from sknn_gpu import InsufficientMemoryError
    from sknn_gpu.neural_network import _size

    Xtr, Xte, ytr, _ = digits
    clf = GPUMLPClassifier((8,), max_iter=2, random_state=0, device=device)
    clf.partial_fit(Xtr, ytr, classes=np.unique(ytr))
    before = {k: (v.copy() if isinstance(v, list) else v) for k, v in vars(clf).items()}
    monkeypatch.setattr(_size, "_CHECK_FROM", 0)  # check even tiny work
    _small_memory(monkeypatch, 1024)
    call = {
        "fit": lambda: clf.fit(Xtr, ytr),
        "partial_fit": lambda: clf.partial_fit(Xtr, ytr),
        "predict": lambda: clf.predict(Xte),
    }[method]
    with pytest.raises(
        InsufficientMemoryError, match=rf"GPUMLPClassifier\.{method} with layer sizes \[64, 8, 10\]"
    ):
        call()
    # refused before anything changed: same attributes, same weights
    assert vars(clf).keys() == before.keys()
    for a, b in zip(clf.coefs_ + clf.intercepts_, before["coefs_"] + before["intercepts_"]):
        assert a is b
    assert clf.n_iter_ == before["n_iter_"] and clf.t_ == before["t_"]


def test_refused_refit_keeps_the_fitted_model(digits, monkeypatch):
    from sknn_gpu import InsufficientMemoryError

    Xtr, Xte, ytr, _ = digits
    clf = GPUMLPClassifier((8,), max_iter=3, random_state=0, device="cpu").fit(Xtr, ytr)
    pred = clf.predict(Xte)
    clf.set_params(hidden_layer_sizes=(10**5, 10**5))
    with pytest.raises(InsufficientMemoryError):
        clf.fit(Xtr, ytr)
    clf.set_params(hidden_layer_sizes=(8,))
    np.testing.assert_array_equal(clf.predict(Xte), pred)
    assert [c.shape for c in clf.coefs_] == [(64, 8), (8, 10)]


# ------------------------------------------------------------------ issue 12: named solver and state
def test_solver_codes_match_the_kernel_template():
    """Solver values are mlp.cu's SOLVER template argument; ACT/OUT codes are its ACT/OUT."""
    import re

    from sknn_gpu._kernels import load_source
    from sknn_gpu.neural_network._base import Solver
    from sknn_gpu.neural_network._predict_cuda import ACT_CODES, OUT_CODES

    src = load_source("mlp")
    solver_line = re.search(r"// SOLVER: (.*)", src).group(1)
    assert solver_line == "0 sgd without momentum, 1 sgd with momentum, 2 sgd with Nesterov momentum, 3 adam."
    assert [int(s) for s in Solver] == [0, 1, 2, 3]
    assert Solver.from_params("sgd", 0.0, True) is Solver.SGD
    assert Solver.from_params("sgd", 0.9, False) is Solver.MOMENTUM
    assert Solver.from_params("sgd", 0.9, True) is Solver.NESTEROV
    assert Solver.from_params("adam", 0.9, True) is Solver.ADAM
    assert [s.n_moments for s in Solver] == [0, 1, 1, 2]
    act_line = re.search(r"// ACT \(hidden activation\): (.*)", src).group(1)
    assert act_line == ", ".join(f"{v} {k}" for k, v in ACT_CODES.items()) + "."
    out_line = re.search(r"// OUT \(output activation\): +(.*)", src).group(1)
    assert out_line == ", ".join(f"{v} {k}" for k, v in OUT_CODES.items()) + "."


@pytest.mark.parametrize("solver_kw", [dict(solver="adam"), dict(solver="sgd", momentum=0.9)])
def test_optimizer_state_survives_pickling_between_partial_fits(digits, solver_kw):
    """partial_fit after a pickle round trip continues exactly where it stopped."""
    from sknn_gpu.neural_network._base import OptimizerState

    Xtr, _, ytr, _ = digits
    classes = np.unique(ytr)
    a = GPUMLPClassifier((12,), random_state=0, device="cpu", **solver_kw)
    a.partial_fit(Xtr[:400], ytr[:400], classes=classes)
    opt = a._optimizer
    assert isinstance(opt, OptimizerState) and opt.moment1.shape == (64 * 12 + 12 * 10 + 12 + 10,)
    assert (opt.moment2 is not None) == (solver_kw["solver"] == "adam")
    assert opt.t == (2 if solver_kw["solver"] == "adam" else 0)  # Adam counts its updates: 400 / 200
    b = pickle.loads(pickle.dumps(a))
    for est in (a, b):
        est.partial_fit(Xtr[400:], ytr[400:])
    for u, v in zip(a.coefs_ + a.intercepts_, b.coefs_ + b.intercepts_):
        np.testing.assert_array_equal(u, v)
    np.testing.assert_array_equal(a._optimizer.moment1, b._optimizer.moment1)


def test_trainer_is_chosen_once_from_device(digits, monkeypatch):
    from sknn_gpu.neural_network import _mlp
    from sknn_gpu.neural_network._mlp_cpu import CPUTrainer

    built = []

    class Counting(CPUTrainer):
        def __init__(self, *args, **kwargs):
            built.append(self)
            super().__init__(*args, **kwargs)

    monkeypatch.setitem(_mlp._TRAINERS, "cpu", Counting)
    Xtr, _, ytr, _ = digits
    clf = GPUMLPClassifier((6,), max_iter=4, random_state=0, device="cpu").fit(Xtr, ytr)
    assert len(built) == 1 and built[0].device == clf.device_ == "cpu"
    assert set(_mlp._TRAINERS) == {"cpu", "cuda"}


# ------------------------------------------------------------------ issue 17: verbose through logging
def test_verbose_levels_log_through_the_family_logger(digits, caplog, capsys):
    Xtr, _, ytr, _ = digits
    params = dict(hidden_layer_sizes=(8,), max_iter=4, random_state=0, device="cpu")
    with caplog.at_level(logging.INFO, logger="sknn_gpu.neural_network"):
        GPUMLPClassifier(verbose=0, **params).fit(Xtr, ytr)
        assert caplog.records == []
        one = GPUMLPClassifier(verbose=1, **params).fit(Xtr, ytr)
        lines = [r.getMessage() for r in caplog.records]
        assert all(r.name == "sknn_gpu.neural_network" for r in caplog.records)
        assert len(lines) == 1 and lines[0].startswith("GPUMLPClassifier.fit: 4 epochs in ")
        assert f"loss={one.loss_:.6g}" in lines[0]
        caplog.clear()
        two = GPUMLPClassifier(verbose=2, **params).fit(Xtr, ytr)
        lines = [r.getMessage() for r in caplog.records]
    # one line per epoch with its number and loss (what scikit-learn prints), then the summary
    assert lines[:4] == [
        f"GPUMLPClassifier.fit {i}/4: loss={two.loss_curve_[i - 1]:.6g}" for i in range(1, 5)
    ]
    assert len(lines) == 5 and lines[4].startswith("GPUMLPClassifier.fit: 4 epochs")
    assert capsys.readouterr() == ("", "")  # a handler is configured (caplog): nothing printed


def test_verbose_logs_validation_scores_stopping_and_partial_fit(digits, caplog):
    Xtr, _, ytr, _ = digits
    clf = GPUMLPClassifier(
        (8,), early_stopping=True, n_iter_no_change=1, tol=0.5, max_iter=20, random_state=0, verbose=2
    )
    with caplog.at_level(logging.INFO, logger="sknn_gpu.neural_network"):
        clf.set_params(device="cpu").fit(Xtr, ytr)
        text = caplog.text
        caplog.clear()
        inc = GPUMLPClassifier((8,), random_state=0, verbose=1, device="cpu")
        inc.partial_fit(Xtr, ytr, classes=np.unique(ytr))
        partial = [r.getMessage() for r in caplog.records]
    assert f"validation_score={clf.validation_scores_[0]:.6g}" in text
    assert (
        "Validation score did not improve more than tol=0.500000 for 1 consecutive epochs. Stopping." in text
    )
    assert clf.n_iter_ == 3 < 20
    assert len(partial) == 1 and partial[0].startswith("GPUMLPClassifier.partial_fit: 1 epochs in ")


@pytest.mark.parametrize("bad", [-1, 1.5, "yes"])
def test_verbose_is_validated(digits, bad):
    Xtr, _, ytr, _ = digits
    with pytest.raises(ValueError, match="verbose"):
        GPUMLPClassifier(verbose=bad, device="cpu").fit(Xtr, ytr)


# ------------------------------------------------------------------ issue 17: sample_weight
SW_SETTINGS = [
    dict(solver="adam", max_iter=6),
    dict(solver="sgd", learning_rate_init=0.1, max_iter=5),
    dict(solver="sgd", momentum=0.5, nesterovs_momentum=False, learning_rate_init=0.05, max_iter=4),
    dict(solver="adam", batch_size=1, max_iter=1),
    dict(solver="adam", early_stopping=True, max_iter=8, n_iter_no_change=3),
    dict(solver="sgd", learning_rate="adaptive", tol=0.05, n_iter_no_change=1, max_iter=8),
]


def _sw_id(kw):
    return "-".join(f"{k}={v}" for k, v in kw.items())


@sklearn_mlp_weights
@pytest.mark.parametrize("kw", SW_SETTINGS, ids=_sw_id)
def test_sample_weight_matches_sklearn(digits, kw, rng):
    """Weighted loss and gradients exactly as MLPClassifier 1.9 defines them (to rounding)."""
    Xtr, _, ytr, _ = digits
    n = 300 if kw.get("batch_size") == 1 else Xtr.shape[0]
    X, y = Xtr[:n], ytr[:n]
    sw = rng.random(n) * 3
    if kw.get("batch_size") != 1:  # a minibatch of zero weight divides by zero (next test)
        sw[rng.choice(n, n // 10, replace=False)] = 0.0
    seed = int(rng.integers(1000))
    params = dict(hidden_layer_sizes=(20,), activation="tanh", random_state=seed, **kw)
    ours = GPUMLPClassifier(device="cpu", **params).fit(X, y, sample_weight=sw)
    ref = MLPClassifier(**params).fit(X, y, sample_weight=sw)
    assert ours.n_iter_ == ref.n_iter_
    np.testing.assert_allclose(ours.loss_curve_, ref.loss_curve_, rtol=1e-9)
    for a, b in zip(ours.coefs_ + ours.intercepts_, ref.coefs_ + ref.intercepts_):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    if kw.get("early_stopping"):
        np.testing.assert_allclose(ours.validation_scores_, ref.validation_scores_, rtol=1e-12)
    # and they differ from the unweighted model: the weights are used
    plain = GPUMLPClassifier(device="cpu", **params).fit(X, y)
    assert not np.allclose(plain.coefs_[0], ours.coefs_[0], rtol=1e-6)


@sklearn_mlp_weights
def test_zero_weight_minibatch_is_refused_as_in_sklearn(digits):
    """A minibatch whose weights sum to 0 has no weighted mean: ZeroDivisionError, as scikit-learn."""
    Xtr, _, ytr, _ = digits
    sw = np.ones(50)
    sw[7] = 0.0
    params = dict(hidden_layer_sizes=(5,), batch_size=1, max_iter=1, random_state=0)
    with pytest.raises(ZeroDivisionError):
        MLPClassifier(**params).fit(Xtr[:50], ytr[:50], sample_weight=sw)
    ours = GPUMLPClassifier(device="cpu", **params)
    with pytest.raises(
        ZeroDivisionError,
        match=r"samples 7\.\.7 \(in the order given, batch_size=1\) has weights summing to 0",
    ):
        ours.fit(Xtr[:50], ytr[:50], sample_weight=sw)
    assert not hasattr(ours, "coefs_")  # per-sample batches: refused before anything
    sw2 = np.ones(50)
    sw2[:25] = 0.0  # unshuffled minibatches of 25: the first one weighs nothing
    est = GPUMLPClassifier(device="cpu", **{**params, "batch_size": 25, "shuffle": False})
    with pytest.raises(ZeroDivisionError, match=r"samples 0\.\.24 \(in this epoch's order"):
        est.fit(Xtr[:50], ytr[:50], sample_weight=sw2)
    assert not any(k.endswith("_") for k in vars(est))  # a failed first fit leaves it unfitted


@sklearn_mlp_weights
def test_sample_weight_partial_fit_matches_sklearn(digits, rng):
    Xtr, _, ytr, _ = digits
    sw = rng.random(Xtr.shape[0]) + 0.5
    classes = np.unique(ytr)
    ours = GPUMLPClassifier((16,), solver="sgd", learning_rate_init=0.1, random_state=4, device="cpu")
    ref = MLPClassifier((16,), solver="sgd", learning_rate_init=0.1, random_state=4)
    half = Xtr.shape[0] // 2
    for est in (ours, ref):
        est.partial_fit(Xtr[:half], ytr[:half], sw[:half], classes)  # scikit-learn's argument order
        est.partial_fit(Xtr[half:], ytr[half:], sample_weight=sw[half:])
    np.testing.assert_allclose(ours.loss_curve_, ref.loss_curve_, rtol=1e-9)
    np.testing.assert_allclose(ours.coefs_[0], ref.coefs_[0], rtol=1e-9, atol=1e-12)


def _fit_pair(device, params, X, y, sw, X2, y2):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a = GPUMLPClassifier(device=device, **params).fit(X, y, sample_weight=sw)
        b = GPUMLPClassifier(device=device, **params).fit(X2, y2)
    assert a.loss_curve_ and len(a.loss_curve_) == len(b.loss_curve_)
    np.testing.assert_allclose(a.loss_curve_, b.loss_curve_, rtol=1e-9)
    for u, v in zip(a.coefs_ + a.intercepts_, b.coefs_ + b.intercepts_):
        np.testing.assert_allclose(u, v, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(a.predict_proba(X), b.predict_proba(X), rtol=1e-9, atol=1e-12)


FULL_BATCH = [dict(solver="adam", max_iter=15), dict(solver="sgd", learning_rate_init=0.2, max_iter=15)]


@pytest.mark.parametrize("kw", FULL_BATCH, ids=_sw_id)
def test_integer_weights_equal_repeated_rows(device, rng, kw):
    """Full-batch training: weight k is the sample repeated k times (shuffling aside)."""
    X = rng.standard_normal((60, 7))
    y = np.arange(60) % 3
    sw = rng.integers(1, 4, 60)
    params = dict(hidden_layer_sizes=(9,), random_state=2, **kw)  # "auto": one batch (n < 200)
    _fit_pair(device, params, X, y, sw, np.repeat(X, sw, axis=0), np.repeat(y, sw))


@pytest.mark.parametrize("kw", FULL_BATCH, ids=_sw_id)
def test_zero_weights_equal_dropped_rows(device, rng, kw):
    X = rng.standard_normal((60, 7))
    y = np.arange(60) % 3
    sw = np.ones(60)
    sw[rng.choice(60, 15, replace=False)] = 0
    params = dict(hidden_layer_sizes=(9,), random_state=2, **kw)  # "auto": one batch (n < 200)
    keep = sw > 0
    _fit_pair(device, params, X, y, sw, X[keep], y[keep])


def test_unit_weights_change_nothing(digits):
    Xtr, _, ytr, _ = digits
    params = dict(hidden_layer_sizes=(10,), max_iter=3, random_state=1, device="cpu")
    a = GPUMLPClassifier(**params).fit(Xtr, ytr, sample_weight=np.ones(Xtr.shape[0]))
    b = GPUMLPClassifier(**params).fit(Xtr, ytr)
    np.testing.assert_allclose(a.loss_curve_, b.loss_curve_, rtol=1e-13)
    np.testing.assert_allclose(a.coefs_[0], b.coefs_[0], rtol=1e-12, atol=1e-15)


def test_sample_weight_is_routed_as_fit_metadata(digits, rng):
    """Metadata routing from the signature: a Pipeline passes sample_weight to fit when requested."""
    import sklearn
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    Xtr, _, ytr, _ = digits
    sw = rng.random(Xtr.shape[0])
    params = dict(hidden_layer_sizes=(8,), max_iter=3, random_state=0, device="cpu")
    with sklearn.config_context(enable_metadata_routing=True):
        routing = GPUMLPClassifier().get_metadata_routing()
        assert "sample_weight" in routing.fit.requests and "sample_weight" in routing.partial_fit.requests
        mlp = GPUMLPClassifier(**params).set_fit_request(sample_weight=True)
        pipe = make_pipeline(StandardScaler().set_fit_request(sample_weight=False), mlp)
        pipe.fit(Xtr, ytr, sample_weight=sw)
    direct = GPUMLPClassifier(**params).fit(StandardScaler().fit_transform(Xtr), ytr, sample_weight=sw)
    np.testing.assert_array_equal(pipe[-1].coefs_[0], direct.coefs_[0])


@pytest.mark.cuda
@pytest.mark.parametrize(
    "kw",
    [
        dict(solver="adam", batch_size=32),
        dict(solver="sgd", batch_size=50, learning_rate_init=0.1),
        dict(solver="sgd", batch_size=1, learning_rate_init=0.01),  # the per-step path, not the fused kernel
        dict(solver="adam", batch_size=1, hidden_layer_sizes=(12, 9)),  # GEMV/GER
        dict(solver="adam", batch_size=40, early_stopping=True),
    ],
    ids=_sw_id,
)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sample_weight_cpu_gpu_parity(digits, kw, dtype, rng):
    if dtype == np.float32 and kw.get("early_stopping"):
        pytest.skip("float32 rounding may flip a validation prediction and so the restored epoch")
    Xtr, _, ytr, _ = digits
    X, y = Xtr[:400].astype(dtype), ytr[:400]
    sw = rng.random(400) * 2
    if kw.get("batch_size") == 1:
        sw += 0.1  # every sample is a minibatch: none may weigh 0
    else:
        sw[::7] = 0
    params = dict(hidden_layer_sizes=(40,), max_iter=2, random_state=3, alpha=1e-3)
    params.update(kw)
    cpu = GPUMLPClassifier(device="cpu", **params).fit(X, y, sample_weight=sw)
    gpu = GPUMLPClassifier(device="cuda", **params).fit(X, y, sample_weight=sw)
    _assert_same_model(cpu, gpu, rtol=1e-7 if dtype == np.float64 else 1e-4)


@pytest.mark.cuda
def test_sample_weight_cupy_weights_and_data(digits, rng):
    import cupy

    Xtr, _, ytr, _ = digits
    sw = rng.random(Xtr.shape[0])
    params = dict(hidden_layer_sizes=(16,), max_iter=2, random_state=0, device="cuda")
    a = GPUMLPClassifier(**params).fit(cupy.asarray(Xtr), cupy.asarray(ytr), sample_weight=cupy.asarray(sw))
    b = GPUMLPClassifier(**params).fit(Xtr, ytr, sample_weight=sw)
    for u, v in zip(a.coefs_, b.coefs_):
        np.testing.assert_allclose(u, v, rtol=1e-12, atol=1e-15)


# ------------------------------------------------------------------ issue 17: sparse X
SPARSE_SETTINGS = [
    dict(solver="adam", max_iter=4),
    dict(solver="sgd", batch_size=1, learning_rate_init=0.01, max_iter=1),
    dict(solver="adam", early_stopping=True, max_iter=5),
]


def _sparse_digits(digits, fmt="csr"):
    import scipy.sparse as sp

    Xtr, Xte, ytr, yte = digits
    return sp.csr_matrix(Xtr).asformat(fmt), sp.csr_matrix(Xte).asformat(fmt), ytr, yte


@pytest.mark.parametrize("kw", SPARSE_SETTINGS, ids=_sw_id)
def test_csr_matches_sklearn_and_dense(digits, kw, rng):
    Xs, Xtes, ytr, _ = _sparse_digits(digits)
    n = 300 if kw.get("batch_size") == 1 else Xs.shape[0]
    Xs, ytr = Xs[:n], ytr[:n]
    params = dict(hidden_layer_sizes=(20,), random_state=int(rng.integers(1000)), **kw)
    ours = GPUMLPClassifier(device="cpu", **params).fit(Xs, ytr)
    ref = MLPClassifier(**params).fit(Xs, ytr)
    dense = GPUMLPClassifier(device="cpu", **params).fit(Xs.toarray(), ytr)
    np.testing.assert_allclose(ours.loss_curve_, ref.loss_curve_, rtol=1e-9)
    for a, b, c in zip(
        ours.coefs_ + ours.intercepts_, ref.coefs_ + ref.intercepts_, dense.coefs_ + dense.intercepts_
    ):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(a, c, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ours.predict_proba(Xtes), ours.predict_proba(Xtes.toarray()), rtol=1e-12)
    np.testing.assert_array_equal(ours.predict(Xtes), ref.predict(Xtes))


@pytest.mark.parametrize("fmt", ["csc", "coo", "lil"])
def test_other_sparse_formats_are_converted(digits, fmt):
    Xs, Xtes, ytr, _ = _sparse_digits(digits, fmt)
    params = dict(hidden_layer_sizes=(8,), max_iter=2, random_state=0, device="cpu")
    a = GPUMLPClassifier(**params).fit(Xs, ytr)
    b = GPUMLPClassifier(**params).fit(Xs.tocsr(), ytr)
    np.testing.assert_allclose(a.coefs_[0], b.coefs_[0], rtol=1e-12)
    np.testing.assert_allclose(a.predict_proba(Xtes), b.predict_proba(Xtes.tocsr()), rtol=1e-12)


def test_csr_rows_densify_gather_and_sum_duplicates(rng):
    import scipy.sparse as sp

    from sknn_gpu.neural_network._data import CSRRows

    dense = sp.random(40, 9, density=0.3, random_state=int(rng.integers(100))).toarray()
    dense[5] = 0  # an empty row
    X = sp.csr_matrix(dense)
    rows = CSRRows.of(X, "cpu", np.float64)
    assert rows.shape == (40, 9) and rows.nnz == X.nnz
    np.testing.assert_array_equal(rows.toarray(), X.toarray())
    order = rng.permutation(40)
    taken = rows.take(order)
    np.testing.assert_array_equal(taken.toarray(), X.toarray()[order])
    np.testing.assert_array_equal(taken[3:17], X.toarray()[order][3:17])
    assert taken[20:20].shape == (0, 9)
    with pytest.raises(TypeError, match="contiguous row slices"):
        rows[np.arange(3)]
    # duplicates (non-canonical CSR) are summed, as SciPy reads them
    dup = sp.csr_matrix((np.array([1.0, 2.0, 4.0]), np.array([1, 1, 0]), np.array([0, 2, 3])), shape=(2, 3))
    np.testing.assert_array_equal(CSRRows.of(dup, "cpu", np.float32).toarray(), [[0, 3, 0], [4, 0, 0]])


def test_csr_rows_feed_the_trainer_as_the_gpu_does(digits, rng):
    """The CUDA trainer's data path on NumPy: gather the CSR rows once, then densify slices."""
    import scipy.sparse as sp

    from sknn_gpu.neural_network._base import Layout, OptimizerState, Solver, TrainConfig
    from sknn_gpu.neural_network._data import CSRRows
    from sknn_gpu.neural_network._mlp_cpu import CPUTrainer

    Xtr, _, ytr, _ = digits
    clf = GPUMLPClassifier((12,), max_iter=1, random_state=0, device="cpu").fit(Xtr, ytr)
    Y = clf._label_binarizer.transform(ytr).astype(np.float64)
    order = rng.permutation(Xtr.shape[0])
    layout = Layout([64, 12, 10])
    losses, weights = [], []
    for X in (
        np.ascontiguousarray(Xtr[order]),
        CSRRows.of(sp.csr_matrix(Xtr), "cpu", np.float64).take(order),
    ):
        opt = OptimizerState.new(Solver.ADAM, 0.001, layout.size, np.float64)
        trainer = CPUTrainer(layout, TrainConfig.of(clf), clf.coefs_, clf.intercepts_, opt, 50)
        losses.append(trainer.epoch(X, Y[order], None, opt))
        weights.append(trainer.flat.copy())
    assert losses[0] == losses[1]
    np.testing.assert_array_equal(weights[0], weights[1])


@pytest.mark.cuda
@pytest.mark.parametrize(
    "kw", SPARSE_SETTINGS + [dict(solver="sgd", batch_size=1, hidden_layer_sizes=(9, 7))], ids=_sw_id
)
def test_csr_cpu_gpu_parity(digits, kw):
    import cupyx.scipy.sparse as csp

    Xs, Xtes, ytr, _ = _sparse_digits(digits)
    Xs, ytr = Xs[:300], ytr[:300]
    params = dict(hidden_layer_sizes=(20,), random_state=1, max_iter=2)
    params.update(kw)
    cpu = GPUMLPClassifier(device="cpu", **params).fit(Xs, ytr)
    gpu = GPUMLPClassifier(device="cuda", **params).fit(Xs, ytr)
    _assert_same_model(cpu, gpu, rtol=1e-7)
    dense = GPUMLPClassifier(device="cuda", **params).fit(Xs.toarray(), ytr)
    _assert_same_model(dense, gpu, rtol=1e-9)
    on_device = GPUMLPClassifier(device="cuda", **params).fit(csp.csr_matrix(Xs), ytr)  # cupyx input
    _assert_same_model(gpu, on_device, rtol=1e-12)
    np.testing.assert_allclose(gpu.predict_proba(Xtes), cpu.predict_proba(Xtes), rtol=1e-7, atol=1e-12)
    out = gpu.predict_proba(csp.csr_matrix(Xtes))
    assert type(out).__module__.split(".")[0] == "cupy"  # cupyx in, CuPy out
    np.testing.assert_allclose(out.get(), gpu.predict_proba(Xtes), rtol=1e-12)


@pytest.mark.cuda
def test_csr_prediction_on_the_gpu_in_row_chunks(digits, monkeypatch):
    from sknn_gpu.neural_network import _mlp

    Xs, Xtes, ytr, _ = _sparse_digits(digits)
    clf = GPUMLPClassifier((16,), max_iter=3, random_state=0, device="cuda").fit(Xs, ytr)
    whole = clf.predict_proba(Xtes)
    monkeypatch.setattr(_mlp, "DENSE_ITEMS", 64 * 7)  # 7 rows at a time
    np.testing.assert_allclose(clf.predict_proba(Xtes), whole, rtol=1e-12)
    np.testing.assert_array_equal(clf.predict(Xtes), clf.predict(Xtes.toarray()))


# ------------------------------------------------------------------ issue 17: scikit-learn interop
@pytest.fixture(scope="module")
def interop_cases():
    from sklearn.datasets import make_multilabel_classification

    X, y = load_digits(return_X_y=True)
    X = X[:500] / 16.0
    y = y[:500]
    Xm, Ym = make_multilabel_classification(n_samples=150, n_features=10, n_classes=4, random_state=1)
    return {
        "multiclass-relu": (X, y, dict(hidden_layer_sizes=(20,))),
        "binary-logistic": (X, (y > 4).astype(int), dict(hidden_layer_sizes=(10, 6), activation="logistic")),
        "strings-tanh": (X, np.array(list("abcdefghij"))[y], dict(activation="tanh", solver="sgd")),
        "multilabel": (Xm, Ym, dict(hidden_layer_sizes=(12,))),
        "float32-identity": (X.astype(np.float32), y, dict(activation="identity")),
        "early-stopping": (X, y, dict(early_stopping=True)),
    }


INTEROP = [
    "multiclass-relu",
    "binary-logistic",
    "strings-tanh",
    "multilabel",
    "float32-identity",
    "early-stopping",
]


@pytest.mark.parametrize("case", INTEROP)
def test_as_sklearn_predicts_identically(case, interop_cases):
    X, y, kw = interop_cases[case]
    ours = GPUMLPClassifier(max_iter=5, random_state=0, device="cpu", **kw).fit(X, y)
    mlp = ours.as_sklearn()
    assert type(mlp) is MLPClassifier
    np.testing.assert_array_equal(mlp.predict(X), ours.predict(X))
    np.testing.assert_array_equal(mlp.predict_proba(X), ours.predict_proba(X))  # bit for bit
    assert mlp.get_params()["hidden_layer_sizes"] == ours.hidden_layer_sizes
    assert mlp.n_iter_ == ours.n_iter_ and mlp.loss_curve_ == ours.loss_curve_
    assert mlp.coefs_[0].dtype == ours.coefs_[0].dtype
    assert not any(np.shares_memory(a, b) for a, b in zip(mlp.coefs_, ours.coefs_))


@pytest.mark.parametrize("case", INTEROP)
def test_from_sklearn_predicts_identically(case, interop_cases):
    X, y, kw = interop_cases[case]
    mlp = MLPClassifier(max_iter=5, random_state=0, **kw).fit(X, y)
    ours = GPUMLPClassifier.from_sklearn(mlp, device="cpu")
    assert ours.device_ == "cpu" and ours.n_features_in_ == mlp.n_features_in_
    np.testing.assert_array_equal(ours.predict(X), mlp.predict(X))
    np.testing.assert_array_equal(ours.predict_proba(X), mlp.predict_proba(X))
    np.testing.assert_array_equal(ours.predict_log_proba(X), mlp.predict_log_proba(X))
    again = pickle.loads(pickle.dumps(ours))
    np.testing.assert_array_equal(again.predict_proba(X), mlp.predict_proba(X))
    mlp.coefs_[0][...] = 0  # nothing shared
    assert np.abs(ours.coefs_[0]).sum() > 0


@pytest.mark.parametrize(
    "kw",
    [dict(solver="adam"), dict(solver="sgd", momentum=0.9), dict(solver="sgd", momentum=0.0)],
    ids=_sw_id,
)
def test_partial_fit_continues_across_the_conversion(digits, kw):
    """The optimizer state travels: partial_fit after the conversion equals partial_fit before."""
    Xtr, _, ytr, _ = digits
    classes = np.unique(ytr)
    ours = GPUMLPClassifier((14,), learning_rate_init=0.01, random_state=3, device="cpu", **kw)
    ours.partial_fit(Xtr[:600], ytr[:600], classes=classes)
    exported = ours.as_sklearn()
    back = GPUMLPClassifier.from_sklearn(exported, device="cpu")
    for est in (ours, exported, back):
        est.partial_fit(Xtr[600:], ytr[600:])
    for est in (exported, back):
        np.testing.assert_allclose(est.loss_curve_, ours.loss_curve_, rtol=1e-9)
        for a, b in zip(est.coefs_ + est.intercepts_, ours.coefs_ + ours.intercepts_):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def test_from_sklearn_refuses_what_it_cannot_import(digits):
    from sklearn.exceptions import NotFittedError
    from sklearn.linear_model import LogisticRegression

    Xtr, _, ytr, _ = digits
    with pytest.raises(TypeError, match="MLPClassifier, got LogisticRegression"):
        GPUMLPClassifier.from_sklearn(LogisticRegression().fit(Xtr, ytr))
    with pytest.raises(NotFittedError):
        GPUMLPClassifier.from_sklearn(MLPClassifier())
    with pytest.raises(NotFittedError):
        GPUMLPClassifier().as_sklearn()
    lbfgs = MLPClassifier((8,), solver="lbfgs", max_iter=20, random_state=0).fit(Xtr, ytr)
    ours = GPUMLPClassifier.from_sklearn(lbfgs, device="cpu", kernels="cublas")
    assert ours.kernels == "cublas" and not hasattr(ours, "_optimizer")
    np.testing.assert_array_equal(ours.predict_proba(Xtr), lbfgs.predict_proba(Xtr))  # predicts
    with pytest.raises(ValueError, match="lbfgs"):  # but only scikit-learn trains L-BFGS
        ours.fit(Xtr, ytr)


@pytest.mark.cuda
def test_from_sklearn_on_the_gpu(digits):
    import cupy

    Xtr, Xte, ytr, _ = digits
    mlp = MLPClassifier((24,), max_iter=10, random_state=0).fit(Xtr, ytr)
    ours = GPUMLPClassifier.from_sklearn(mlp, device="cuda")
    assert ours.device_ == "cuda"
    np.testing.assert_array_equal(ours.predict(Xte), mlp.predict(Xte))
    np.testing.assert_allclose(ours.predict_proba(Xte), mlp.predict_proba(Xte), rtol=1e-10, atol=1e-15)
    assert isinstance(ours.predict_proba(cupy.asarray(Xte)), cupy.ndarray)
    ours.partial_fit(Xtr, ytr)  # trains on the GPU from the imported optimizer state
    mlp.partial_fit(Xtr, ytr)
    _assert_same_model(mlp, ours, rtol=1e-7)
    np.testing.assert_array_equal(ours.as_sklearn().predict(Xte), ours.predict(Xte))


# ------------------------------------------------------------------ issue 17: scikit-learn glue
def test_device_classifier_mixin_score_with_weights(digits, rng):
    from sklearn.metrics import accuracy_score

    from sknn_gpu.base import DeviceClassifierMixin

    Xtr, Xte, ytr, yte = digits
    clf = GPUMLPClassifier((16,), max_iter=10, random_state=0, device="cpu").fit(Xtr, ytr)
    assert isinstance(clf, DeviceClassifierMixin)
    sw = rng.random(len(yte))
    assert clf.score(Xte, yte, sample_weight=sw) == accuracy_score(yte, clf.predict(Xte), sample_weight=sw)


@pytest.mark.cuda
def test_cupy_score_and_output_type_without_array_api_dispatch(digits):
    """score on CuPy X/y needs no sklearn.set_config(array_api_dispatch=True); output_type wins."""
    import cupy

    from sknn_gpu import config_context

    Xtr, Xte, ytr, yte = digits
    clf = GPUMLPClassifier((16,), max_iter=10, random_state=0, device="cuda")
    clf.fit(cupy.asarray(Xtr), cupy.asarray(ytr))
    assert clf.score(cupy.asarray(Xte), cupy.asarray(yte)) == clf.score(Xte, yte)
    assert isinstance(clf.set_params(output_type="numpy").predict(cupy.asarray(Xte)), np.ndarray)
    with config_context(output_type="cupy"):
        assert isinstance(clf.set_params(output_type=None).predict_proba(Xte), cupy.ndarray)


# ------------------------------------------------------------------ parameters, failed fits, input dtypes
def _fitted(device, digits, **kw):
    Xtr, _, ytr, _ = digits
    params = dict(hidden_layer_sizes=(8,), max_iter=2, random_state=0, device=device, **kw)
    return GPUMLPClassifier(**params).fit(Xtr, ytr)


@pytest.mark.parametrize(
    "param, value",
    [
        ("activation", "bogus"),
        ("output_type", "bogus"),
        ("batch_size", 0),
        ("alpha", -1.0),
        ("device", "tpu"),
    ],
)
@pytest.mark.parametrize("method", ["predict", "predict_proba", "predict_log_proba", "score"])
def test_parameters_changed_after_fit_are_refused_by_every_method(device, digits, param, value, method):
    _, Xte, _, yte = digits
    clf = _fitted(device, digits)
    expected = getattr(clf, method)(*((Xte, yte) if method == "score" else (Xte,)))
    clf.set_params(**{param: value})
    args = (Xte, yte) if method == "score" else (Xte,)
    with pytest.raises(ValueError, match=f"'{param}' parameter of GPUMLPClassifier must be"):
        getattr(clf, method)(*args)
    clf.set_params(**{param: GPUMLPClassifier().get_params()[param] if param != "device" else device})
    np.testing.assert_array_equal(getattr(clf, method)(*args), expected)


def test_parameters_assigned_after_fit_are_refused_by_partial_fit_and_as_sklearn(digits):
    Xtr, Xte, ytr, _ = digits
    clf = _fitted("cpu", digits)
    pred = clf.predict(Xte)
    clf.learning_rate_init = -0.5  # scikit-learn skips its check for a fitted partial_fit
    with pytest.raises(ValueError, match="'learning_rate_init' parameter"):
        clf.partial_fit(Xtr, ytr)
    clf.learning_rate_init = 0.001
    clf.activation = "bogus"
    with pytest.raises(ValueError, match="'activation' parameter"):
        clf.as_sklearn()
    clf.activation = "relu"
    clf.hidden_layer_sizes = (8, 0)  # passes the "array-like" constraint: the estimator's own check
    with pytest.raises(ValueError, match="hidden_layer_sizes must hold positive integers"):
        clf.predict(Xte)
    clf.hidden_layer_sizes = (8,)
    np.testing.assert_array_equal(clf.predict(Xte), pred)


def test_failed_fit_with_too_few_labels_keeps_the_previous_model(device, digits):
    Xtr, Xte, ytr, _ = digits
    clf = _fitted(device, digits)
    before = clf.predict_proba(Xte)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        clf.fit(Xtr, ytr[:-1])
    np.testing.assert_array_equal(clf.predict_proba(Xte), before)


@pytest.mark.parametrize("call", ["fit", "partial_fit"])
def test_diverged_fit_keeps_the_previous_model(device, digits, call):
    """A fit whose weights overflow raises, and leaves the model it had (not NaN weights)."""
    Xtr, Xte, ytr, _ = digits
    clf = _fitted(device, digits, solver="sgd", learning_rate_init=0.1)
    clf.partial_fit(Xtr, ytr)  # optimizer state, loss curve: everything a failed call could touch
    before = clf.predict_proba(Xte)
    state = {k: (list(v) if isinstance(v, list) else v) for k, v in vars(clf).items()}
    moments = clf._optimizer.moment1.copy()
    clf.set_params(learning_rate_init=10.0)
    with pytest.raises(ValueError, match="non-finite parameter weights"):
        getattr(clf, call)(Xtr * 1e150, ytr)
    clf.set_params(learning_rate_init=0.1)
    np.testing.assert_array_equal(clf.predict_proba(Xte), before)
    assert vars(clf).keys() == state.keys()
    assert clf.loss_curve_ == state["loss_curve_"] and clf.n_iter_ == state["n_iter_"]
    assert clf.t_ == state["t_"] and clf._optimizer.lr == 0.1
    np.testing.assert_array_equal(clf._optimizer.moment1, moments)
    clf.partial_fit(Xtr, ytr)  # and it goes on from there
    assert np.isfinite(clf.loss_curve_[-1])


def test_diverged_first_fit_leaves_the_estimator_unfitted(digits):
    from sklearn.exceptions import NotFittedError

    Xtr, Xte, ytr, _ = digits
    clf = GPUMLPClassifier(
        (8,), solver="sgd", learning_rate_init=10.0, max_iter=2, device="cpu", random_state=0
    )
    with pytest.raises(ValueError, match="non-finite parameter weights"):
        clf.fit(Xtr * 1e150, ytr)
    assert not any(k.endswith("_") for k in vars(clf))
    with pytest.raises(NotFittedError):
        clf.predict(Xte)


@pytest.mark.parametrize("dtype", ["datetime64[s]", "timedelta64[ms]"])
def test_dates_and_time_spans_are_refused_naming_the_dtype(digits, dtype):
    Xtr, Xte, ytr, _ = digits
    T = (Xtr * 16).astype(np.int64).astype(dtype)
    with pytest.raises(ValueError, match=rf"X has dtype {dtype.split('[')[0]}.*not numeric features"):
        GPUMLPClassifier((4,), max_iter=1, device="cpu").fit(T, ytr)
    clf = _fitted("cpu", digits)
    with pytest.raises(ValueError, match=rf"X has dtype {dtype.split('[')[0]}"):
        clf.predict(T[:5])
    with pytest.raises(ValueError, match=rf"X has dtype {dtype.split('[')[0]}"):
        clf.partial_fit(T, ytr)


def test_verbose_one_logs_progress_lines_off_a_terminal(monkeypatch, digits, caplog):
    import sknn_gpu._progress as prog

    Xtr, _, ytr, _ = digits
    monkeypatch.setattr(prog, "_tty", lambda: False)
    monkeypatch.setattr("sknn_gpu._progress.LOG_EVERY_SECONDS", 0.0)  # here: a line per epoch
    with caplog.at_level(logging.INFO, logger="sknn_gpu.neural_network"):
        GPUMLPClassifier((8,), max_iter=3, verbose=1, random_state=0, device="cpu").fit(Xtr, ytr)
    steps = [r.getMessage().split(" after ")[0] for r in caplog.records if " after " in r.getMessage()]
    assert steps == [f"GPUMLPClassifier.fit {k}/3 epochs" for k in (1, 2, 3)]


@pytest.mark.parametrize(
    "y",
    [
        np.array([3, 1, 2, 3, 1, 2, 2]),
        np.array(["b", "a", "a", "b"]),
        np.array([1.0, 2.0, 1.0]),
        np.array(["x", "y", "z", "x"], dtype=object),
        np.array([10, 0, 5, 10, 0], dtype=np.uint8),  # codes with gaps: the look-up table
        np.array([-2, 3, -2, 3, 7]),  # a negative code: searchsorted
    ],
    ids=["int-multiclass", "str-binary", "float-binary", "object-multiclass", "uint8-gaps", "negative"],
)
def test_fast_one_hot_is_the_label_binarizers(y):
    from sklearn.preprocessing import LabelBinarizer

    from sknn_gpu.neural_network._mlp import _one_hot

    lb = LabelBinarizer().fit(y)
    np.testing.assert_array_equal(_one_hot(lb, y), lb.transform(y))
    part = y[:2]  # fewer classes than fitted: still the fitted columns
    np.testing.assert_array_equal(_one_hot(lb, part), lb.transform(part))


def test_fast_one_hot_leaves_unknown_labels_and_multilabel_to_scikit_learn():
    from sklearn.preprocessing import LabelBinarizer

    from sknn_gpu.neural_network._mlp import _one_hot

    lb = LabelBinarizer().fit([0, 1, 2])
    np.testing.assert_array_equal(_one_hot(lb, np.array([0, 7])), lb.transform(np.array([0, 7])))
    lb = LabelBinarizer().fit([0, 2, 4])  # an unknown code between known ones
    np.testing.assert_array_equal(_one_hot(lb, np.array([0, 1])), lb.transform(np.array([0, 1])))
    Y = np.array([[1, 0], [0, 1], [1, 1]])
    lbm = LabelBinarizer().fit(Y)
    np.testing.assert_array_equal(_one_hot(lbm, Y), lbm.transform(Y))


@pytest.mark.parametrize(
    "y, counted",
    [
        (np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3]), True),  # int64, gaps between classes
        (np.array([0, 1, 1, 0], dtype=np.int32), True),  # binary
        (np.array([7, 7, 7], dtype=np.int16), True),  # one class: 'binary' for scikit-learn
        (np.array([2, 0, 1], dtype=np.uint8), True),
        (np.array([5, 2, 5], dtype=np.uint32), True),
        (np.array([5, 2, 5], dtype=np.uint64), False),  # no bincount: scikit-learn's fit
        (np.array([-1, 1, -1, 1]), False),  # negative
        (np.array([0, 10**9, 3]), False),  # too far apart to count
        (np.array([0.0, 1.0, 2.0]), False),  # floats
        (np.array(["b", "a", "c"]), False),
        (np.array([[0, 1], [1, 1]]), False),  # multilabel indicator
    ],
    ids=lambda v: f"{v.dtype}-{v.ndim}d-{v.size}" if isinstance(v, np.ndarray) else str(v),
)
def test_label_binarizer_fitted_by_counting_is_scikit_learns(y, counted, monkeypatch):
    """Class codes counted with np.bincount leave the LabelBinarizer exactly as its own
    fit does (classes_ values and dtype, y_type_, sparse_input_); other labels take fit."""
    from sklearn.preprocessing import LabelBinarizer

    from sknn_gpu.neural_network._data import fit_label_binarizer

    theirs = LabelBinarizer().fit(y)
    if counted:  # the counting path must not fall back on fit
        monkeypatch.setattr(LabelBinarizer, "fit", lambda self, y: pytest.fail("fit called"))
    ours = fit_label_binarizer(y)
    monkeypatch.undo()
    assert vars(ours).keys() == vars(theirs).keys()
    for name, value in vars(theirs).items():
        if isinstance(value, np.ndarray):
            assert getattr(ours, name).dtype == value.dtype, name
            np.testing.assert_array_equal(getattr(ours, name), value)
        else:
            assert getattr(ours, name) == value, name
    np.testing.assert_array_equal(ours.transform(y), theirs.transform(y))


def test_label_binarizer_refuses_empty_labels_as_scikit_learn_does():
    from sknn_gpu.neural_network._data import fit_label_binarizer

    with pytest.raises(ValueError, match="0 samples"):
        fit_label_binarizer(np.array([], dtype=np.int64))
