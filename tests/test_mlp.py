"""GPUMLPClassifier: sklearn parity, training behaviour, errors, CPU/GPU parity."""

import pickle
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_digits, make_multilabel_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

from sknn_gpu import GPUMLPClassifier


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


def test_verbose_warm_start_and_pickle(device, digits, capsys):
    Xtr, Xte, ytr, _ = digits
    clf = GPUMLPClassifier((12,), max_iter=3, verbose=True, warm_start=True, random_state=0, device=device)
    clf.fit(Xtr, ytr)
    assert "Iteration 3, loss" in capsys.readouterr().out
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

    monkeypatch.setattr(_backend, "free_memory", lambda device: n_bytes)


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
    from sknn_gpu.neural_network._mlp import _size_estimate

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
    from sknn_gpu.neural_network import _mlp

    Xtr, Xte, ytr, _ = digits
    clf = GPUMLPClassifier((8,), max_iter=2, random_state=0, device=device)
    clf.partial_fit(Xtr, ytr, classes=np.unique(ytr))
    before = {k: (v.copy() if isinstance(v, list) else v) for k, v in vars(clf).items()}
    monkeypatch.setattr(_mlp, "_CHECK_FROM", 0)  # check even tiny work
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
    from sknn_gpu.neural_network._mlp_cuda import ACT_CODES, OUT_CODES

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
