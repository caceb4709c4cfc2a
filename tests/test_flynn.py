"""FlyNNClassifier: counts, filters, streaming, federated merge, Dask, CPU/GPU parity (the DP release:
test_flynn_privacy.py)."""

import pickle

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sknn_gpu._backend import to_host
from sknn_gpu.fly import FlyNNClassifier, _flynn_cpu, _weights, merge_flynn
from sknn_gpu.fly._flynn_engine import engine


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)


#: The raw FlyHash of the papers (no encoding): for the tests of the hash's own properties
#: (counts of its winners, normalisation, float32 range, sparse hashing).
RAW = dict(encoding=None)


def _fixed_range(X):
    """A fixed ``input_range`` over ``X``: the same encoding for every subset (streaming, parties)."""
    return dict(input_range=(X.min(axis=0), X.max(axis=0)))


def _blobs(rng, n=240, d=16, n_classes=4):
    # 16 features: encoded, FlyNN's default 16 connections (80 inputs); raw, 3 (a flyhash.cu build
    # the FlyHash tests share). The GPU compiles its fused kernel per (rows per block, connections).
    centers = rng.normal(scale=3.0, size=(n_classes, d))
    y = rng.integers(0, n_classes, size=n)
    X = centers[y] + rng.normal(size=(n, d))
    return X, y


def _codes_counts(clf, X, y):
    """Independent count table: one-hot codes from the hasher, summed per class with np.add.at."""
    Xd = _on(clf, np.asarray(X, dtype=np.float64))
    w = to_host(clf.hasher_._winners(engine(clf.device_).row_normalize(Xd) if clf._normalizes() else Xd))
    counts = np.zeros((len(clf.classes_), clf.n_components_), dtype=np.int64)
    rows = np.searchsorted(clf.classes_, y)
    np.add.at(counts, (np.repeat(rows, w.shape[1]), w.ravel()), 1)
    return counts, w


def _on(clf, X):
    from sknn_gpu._backend import to_device

    return to_device(X, clf.device_)


# --------------------------------------------------------------------------- #
# training                                                                      #
# --------------------------------------------------------------------------- #


def test_counts_are_winner_counts_per_class(device, rng):
    X, y = _blobs(rng)
    clf = FlyNNClassifier(k=8, gamma=0.5, random_state=3, device=device, **RAW).fit(X, y)
    expected, w = _codes_counts(clf, X, y)
    counts = to_host(clf.counts_)
    assert counts.dtype == np.int64
    assert np.array_equal(counts, expected)
    # every sample contributes exactly k winners to its own class row
    assert np.array_equal(counts.sum(axis=1), np.bincount(np.searchsorted(clf.classes_, y)) * clf.k_)
    assert w.shape == (len(y), clf.k_)


def test_filters_are_gamma_power_of_counts(device, rng):
    X, y = _blobs(rng)
    clf = FlyNNClassifier(k=8, gamma=0.3, decay="count", random_state=0, device=device).fit(X, y)
    counts, filters = to_host(clf.counts_), to_host(clf.filters_)
    assert filters.shape == counts.shape == (len(clf.classes_), clf.n_components_)
    assert np.allclose(filters, 0.3**counts, rtol=0, atol=0)
    # decay='relative' (the default): the exponent is each count over its class's mean count
    rel = FlyNNClassifier(k=8, gamma=0.3, random_state=0, device=device).fit(X, y)
    assert np.array_equal(to_host(rel.counts_), counts)
    mean = counts.sum(axis=1, keepdims=True) / counts.shape[1]
    np.testing.assert_array_equal(to_host(rel.filters_), 0.3 ** (counts / mean))


def test_relative_decay_does_not_saturate_as_the_training_set_grows(rng):
    """With decay='count' ten copies of the training set drive every used cell's weight
    to ~0 (gamma ** (10 z)); with decay='relative' the filters, and so the predictions,
    do not change at all."""
    X, y = _blobs(rng, n=200)
    Xt, _ = _blobs(rng, n=100)
    big_X, big_y = np.tile(X, (10, 1)), np.tile(y, 10)
    for decay, same in (("relative", True), ("count", False)):
        params = dict(k=8, gamma=0.5, decay=decay, random_state=0, device="cpu")
        small = FlyNNClassifier(**params).fit(X, y)
        big = FlyNNClassifier(**params).fit(big_X, big_y)
        assert np.array_equal(big.counts_, 10 * small.counts_)
        assert np.array_equal(big.filters_, small.filters_) is same


def test_gamma_zero_gives_binary_filters(device, rng):
    X, y = _blobs(rng)
    clf = FlyNNClassifier(k=8, gamma=0.0, random_state=0, device=device).fit(X, y)
    counts, filters = to_host(clf.counts_), to_host(clf.filters_)
    assert set(np.unique(filters)) <= {0.0, 1.0}
    assert np.array_equal(filters == 1.0, counts == 0)
    # some cells were used and some not, so the filter is informative
    assert 0 < filters.sum() < filters.size
    # with binary filters the novelty is an integer count of unused winners
    nov = to_host(clf.novelty(X))
    assert np.array_equal(nov, np.round(nov)) and nov.min() >= 0 and nov.max() <= clf.k_


def test_partial_fit_equals_fit(device, rng):
    X, y = _blobs(rng, n=300)
    fixed = _fixed_range(X)  # under input_range='fit' the stream would tile its first batch's range
    full = FlyNNClassifier(k=8, random_state=1, device=device, **fixed).fit(X, y)
    stream = FlyNNClassifier(k=8, random_state=1, device=device, **fixed)
    cuts = np.sort(rng.choice(np.arange(1, len(y)), size=4, replace=False))
    for i, part in enumerate(np.split(np.arange(len(y)), cuts)):
        stream.partial_fit(X[part], y[part], classes=np.unique(y) if i == 0 else None)
    assert np.array_equal(to_host(stream.counts_), to_host(full.counts_))
    assert np.array_equal(to_host(stream.predict(X)), to_host(full.predict(X)))
    # the internal batch size changes nothing either
    small = FlyNNClassifier(k=8, random_state=1, batch_size=7, device=device, **fixed).fit(X, y)
    assert np.array_equal(to_host(small.counts_), to_host(full.counts_))
    assert np.array_equal(to_host(small.novelty(X)), to_host(full.novelty(X)))


def test_partial_fit_unseen_class_and_missing_classes(rng):
    X, y = _blobs(rng)
    clf = FlyNNClassifier(k=8, random_state=0, device="cpu")
    with pytest.raises(ValueError, match="classes must be passed"):
        clf.partial_fit(X, y)
    clf.partial_fit(X, y, classes=[0, 1, 2, 3])
    with pytest.raises(ValueError, match=r"labels \[7\] that are not in classes_"):
        clf.partial_fit(X[:5], np.array([0, 1, 7, 2, 0]))
    with pytest.raises(ValueError, match="not the same as on last call"):
        clf.partial_fit(X, y, classes=[0, 1, 2])


# --------------------------------------------------------------------------- #
# prediction                                                                    #
# --------------------------------------------------------------------------- #


def test_predict_proba_decision_and_predict_agree(device, rng):
    X, y = _blobs(rng)
    clf = FlyNNClassifier(k=8, gamma=0.6, random_state=2, device=device).fit(X, y)
    Xt = _on(clf, X[:60] + rng.normal(scale=0.1, size=(60, X.shape[1])))
    proba = to_host(clf.predict_proba(Xt))
    nov = to_host(clf.novelty(Xt))
    assert proba.shape == (60, 4)
    assert np.allclose(proba.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert np.all(proba > 0)
    assert np.array_equal(to_host(clf.decision_function(Xt)), -nov)
    z = -nov * clf.proba_scale_ / clf.k_
    expected = np.exp(z - z.max(axis=1, keepdims=True))
    expected /= expected.sum(axis=1, keepdims=True)
    assert np.allclose(proba, expected, rtol=1e-9, atol=1e-300)
    pred = to_host(clf.predict(Xt))
    assert np.array_equal(pred, clf.classes_[np.argmin(nov, axis=1)])
    assert np.array_equal(pred, clf.classes_[np.argmax(proba, axis=1)])


def test_binary_decision_function_sign(rng):
    X, y = _blobs(rng, n_classes=2)
    y = np.where(y == 1, "b", "a")
    clf = FlyNNClassifier(k=8, random_state=0, device="cpu").fit(X, y)
    dec = clf.decision_function(X)
    assert dec.shape == (len(y),)
    assert np.array_equal(clf.predict(X), np.where(dec > 0, "b", "a"))
    assert clf.score(X, y) > 0.9


def test_ties_go_to_lowest_class_index(device, rng):
    X = rng.normal(size=(50, 16))
    # the same samples under two labels: identical filters, every novelty ties
    Xd = np.vstack([X, X])
    yd = np.r_[np.full(50, 5), np.full(50, 2)]
    for gamma in (0.0, 0.7):
        clf = FlyNNClassifier(k=6, gamma=gamma, random_state=4, device=device).fit(Xd, yd)
        nov = to_host(clf.novelty(X))
        assert np.array_equal(nov[:, 0], nov[:, 1])
        assert np.all(to_host(clf.predict(rng.normal(size=(30, 16)))) == 2)


def test_digits_accuracy_close_to_knn(digits):
    X_train, X_test, y_train, y_test = digits
    knn = KNeighborsClassifier(n_neighbors=1).fit(X_train, y_train).score(X_test, y_test)
    clf = FlyNNClassifier(gamma=0.5, random_state=0, device="cpu").fit(X_train, y_train)
    acc = clf.score(X_test, y_test)
    print(f"digits: FlyNN accuracy {acc:.3f}, 1-NN {knn:.3f}, chance 0.100")
    assert acc > 0.85
    assert acc > knn - 0.1


def test_row_normalize_centres_and_scales(rng):
    X = rng.normal(size=(40, 70)) * rng.uniform(0.1, 50, size=(40, 1)) + rng.normal(size=(40, 1)) * 100
    X[7] = 3.0  # constant row -> zeros
    Z = _flynn_cpu.row_normalize(X)
    keep = np.arange(40) != 7
    assert np.allclose(Z[keep].mean(axis=1), 0, atol=1e-12)
    assert np.allclose(np.linalg.norm(Z[keep], axis=1), 1, atol=1e-12)
    assert np.all(Z[7] == 0)
    assert _flynn_cpu.row_normalize(X.astype(np.float32)).dtype == np.float32


def test_normalize_protects_against_a_large_offset(digits):
    # FlyHash sums inputs in float32: a common offset of 1e8 drowns the pixel values,
    # unless the rows are centred (in float64) first.
    X_train, X_test, y_train, y_test = digits
    off = 1e8
    plain = FlyNNClassifier(gamma=0.5, random_state=0, device="cpu", **RAW).fit(X_train, y_train)
    base = plain.score(X_test, y_test)
    on = FlyNNClassifier(gamma=0.5, normalize=True, random_state=0, device="cpu", **RAW)
    on.fit(X_train + off, y_train)
    off_ = FlyNNClassifier(gamma=0.5, normalize=False, random_state=0, device="cpu", **RAW).fit(
        X_train + off, y_train
    )
    assert on.score(X_test + off, y_test) == pytest.approx(base, abs=0.01)
    assert off_.score(X_test + off, y_test) < base - 0.1


def test_bad_input_errors(rng):
    X, y = _blobs(rng)
    with pytest.raises(ValueError, match="gamma"):
        FlyNNClassifier(gamma=1.0, device="cpu").fit(X, y)
    with pytest.raises(ValueError, match="gamma"):
        FlyNNClassifier(gamma=-0.1, device="cpu").fit(X, y)
    Xn = X.copy()
    Xn[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        FlyNNClassifier(random_state=0, device="cpu").fit(Xn, y)
    clf = FlyNNClassifier(k=8, random_state=0, device="cpu").fit(X, y)
    with pytest.raises(ValueError, match="NaN"):
        clf.predict(Xn)
    with pytest.raises(ValueError, match="features"):
        clf.predict(X[:, :-1])
    with pytest.raises(ValueError, match="Unknown label type"):
        FlyNNClassifier(device="cpu").fit(X, rng.normal(size=len(y)))


def test_pickle_roundtrip(device, rng):
    X, y = _blobs(rng)
    clf = FlyNNClassifier(k=8, random_state=0, device=device).fit(X, y)
    clone = pickle.loads(pickle.dumps(clf))
    assert np.array_equal(to_host(clone.counts_), to_host(clf.counts_))
    assert np.array_equal(to_host(clone.predict(X)), to_host(clf.predict(X)))


def test_pickle_holds_the_counts_and_rebuilds_the_rest(device, digits):
    """The filters, their transpose and the projection are derived: a pickle leaves them out
    and loading rebuilds them bit for bit, so a default model on digits pickles to its counts
    at one byte a cell (no class has 256 samples), its features' quantiles (257 float64 each)
    and a few kilobytes."""
    X_train, X_test, y_train, _ = digits
    clf = FlyNNClassifier(random_state=0, device=device).fit(X_train, y_train)
    blob = pickle.dumps(clf)
    cells = len(clf.classes_) * clf.n_components_  # 81,920
    # parameters, the encoding's range (2 x 64 float64), the generator state (2.5 KB), digests
    assert len(blob) < cells + clf.input_quantiles_.nbytes + 16 * 1024
    again = pickle.loads(blob)
    assert again.counts_.dtype == np.int64 and type(again.counts_) is type(clf.counts_)
    assert type(again.filters_) is type(clf.filters_)
    for name in ("counts_", "filters_"):
        assert np.array_equal(to_host(getattr(again, name)), to_host(getattr(clf, name)))
    assert np.array_equal(again._filters_t, clf._filters_t)
    assert (again.hasher_.components_ != clf.hasher_.components_).nnz == 0
    assert np.array_equal(to_host(again.novelty(X_test)), to_host(clf.novelty(X_test)))
    assert np.array_equal(to_host(again.predict(X_test)), to_host(clf.predict(X_test)))


# --------------------------------------------------------------------------- #
# federated merge                                                               #
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("split", ["iid", "non_iid"])
def test_merge_of_three_parties_equals_pooled_fit(device, rng, split):
    X, y = _blobs(rng, n=300)
    if split == "iid":
        parts = np.array_split(rng.permutation(len(y)), 3)
    else:  # each party sees its own classes (with one shared), so class sets differ
        groups = [{0, 1}, {1, 2}, {3}]
        parts = [np.flatnonzero(np.isin(y, sorted(g))) for g in groups]
        parts[1] = parts[1][~np.isin(parts[1], parts[0])]
    params = dict(k=8, gamma=0.4, random_state=7, device=device, **_fixed_range(X))
    models = [FlyNNClassifier(**params).fit(X[p], y[p]) for p in parts]
    if split == "non_iid":
        assert len({tuple(m.classes_) for m in models}) == 3
    merged = merge_flynn(models)
    pooled = FlyNNClassifier(**params).fit(X, y)
    assert np.array_equal(merged.classes_, pooled.classes_)
    assert to_host(merged.counts_).dtype == np.int64
    assert np.array_equal(to_host(merged.counts_), to_host(pooled.counts_))
    assert np.array_equal(to_host(merged.filters_), to_host(pooled.filters_))
    assert np.array_equal(to_host(merged.predict(X)), to_host(pooled.predict(X)))


def test_merge_refuses_mismatched_parties(rng):
    X, y = _blobs(rng)
    a = FlyNNClassifier(k=8, random_state=0, device="cpu").fit(X, y)
    with pytest.raises(ValueError, match="random_state"):
        merge_flynn([a, FlyNNClassifier(k=8, random_state=1, device="cpu").fit(X, y)])
    with pytest.raises(ValueError, match="k:"):
        merge_flynn([a, FlyNNClassifier(k=6, random_state=0, device="cpu").fit(X, y)])
    with pytest.raises(ValueError, match="features"):
        merge_flynn([a, FlyNNClassifier(k=8, random_state=0, device="cpu").fit(X[:, :-1], y)])
    with pytest.raises(ValueError, match="integer random_state"):
        free = [FlyNNClassifier(k=8, device="cpu").fit(X, y) for _ in range(2)]
        merge_flynn(free)
    with pytest.raises(ValueError, match="at least one"):
        merge_flynn([])
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        merge_flynn([a, FlyNNClassifier(k=8, random_state=0)])
    # input_range='fit': each party fits its own range, which the merge refuses (naming the fix)
    halves = [FlyNNClassifier(k=8, random_state=0, device="cpu").fit(X[i::2], y[i::2]) for i in (0, 1)]
    with pytest.raises(ValueError, match=r"models\[1\] encodes its features over a different input range"):
        merge_flynn(halves)
    with pytest.raises(ValueError, match="input_range"):
        merge_flynn([a, FlyNNClassifier(k=8, random_state=0, device="cpu", **_fixed_range(X)).fit(X, y)])


# --------------------------------------------------------------------------- #
# scikit-learn model selection, Dask                                            #
# --------------------------------------------------------------------------- #


def _grid(digits, n_jobs=None):
    X_train, _, y_train, _ = digits
    pipe = make_pipeline(StandardScaler(), FlyNNClassifier(random_state=0, device="cpu"))
    grid = {"flynnclassifier__gamma": [0.0, 0.6], "flynnclassifier__k": [8, 32]}
    return GridSearchCV(pipe, grid, cv=2, n_jobs=n_jobs).fit(X_train[:600], y_train[:600])


def test_gridsearch_n_jobs_2(digits):
    gs = _grid(digits, n_jobs=2)
    assert gs.cv_results_["mean_test_score"].shape == (4,)
    assert gs.best_score_ > 0.6
    serial = _grid(digits, n_jobs=None)
    assert np.allclose(gs.cv_results_["mean_test_score"], serial.cv_results_["mean_test_score"])


def test_gridsearch_with_joblib_dask_backend(digits, dask_client):
    import joblib

    with joblib.parallel_backend("dask"):
        gs = _grid(digits, n_jobs=-1)
    serial = _grid(digits, n_jobs=None)
    assert np.allclose(gs.cv_results_["mean_test_score"], serial.cv_results_["mean_test_score"])


def test_fit_federated_on_dask_equals_pooled(digits, dask_client):
    from sknn_gpu.fly import fit_federated

    da = pytest.importorskip("dask.array")
    X_train, X_test, y_train, _ = digits
    params = dict(k=16, gamma=0.5, random_state=3, device="cpu")
    pooled = FlyNNClassifier(**params).fit(X_train, y_train)
    parts = np.array_split(np.arange(len(y_train)), 3)
    # local pairs (scattered), futures already on the cluster, and dask arrays
    fed_pairs = fit_federated(dask_client, [(X_train[p], y_train[p]) for p in parts], **params)
    futs = dask_client.scatter([(X_train[p], y_train[p]) for p in parts])
    fed_futs = fit_federated(dask_client, futs, **params)
    dX = da.from_array(X_train, chunks=(400, -1))
    dy = da.from_array(y_train, chunks=400)
    fed_dask = fit_federated(dask_client, (dX, dy), **params)
    for fed in (fed_pairs, fed_futs, fed_dask):
        assert np.array_equal(fed.counts_, pooled.counts_)
        assert np.array_equal(fed.classes_, pooled.classes_)
    with pytest.raises(ValueError, match="integer random_state"):
        fit_federated(dask_client, futs, k=16)
    # block-wise prediction on a dask array; chunks along the features are refused with the fix
    with pytest.raises(ValueError, match=r"chunked along axis 1.*rechunk"):
        pooled.predict(da.from_array(X_test, chunks=(100, 16)))
    dXt = da.from_array(X_test, chunks=(100, 16)).rechunk({1: -1})
    assert np.array_equal(pooled.predict(dXt).compute(), pooled.predict(X_test))
    proba = pooled.predict_proba(dXt).compute()
    assert np.allclose(proba, pooled.predict_proba(X_test), rtol=0, atol=0)


# --------------------------------------------------------------------------- #
# GPU parity (run on the device machine)                                        #
# --------------------------------------------------------------------------- #


@pytest.mark.cuda
@pytest.mark.parametrize("n_classes", [1, 2, 3, 10, 16, 17, 32])
def test_gpu_nearest_class_matches_the_cpu(rng, n_classes):
    """The fused prediction kernel gives the CPU engine's labels: the same sums in the same
    order, the lowest class on ties (columns repeated, so exact ties happen), at batch sizes
    that leave a warp's lane groups partly idle."""
    import cupy as cp

    from sknn_gpu.fly import _flynn_cuda

    m, k = 4096, 37  # k not a multiple of the kernel's unrolling
    filters_t = rng.random((m, n_classes)) ** 3
    if n_classes > 2:
        filters_t[:, n_classes - 1] = filters_t[:, 0]  # the last class ties with the first
        filters_t[:, 1] = filters_t[:, 2]
    filters_t = np.ascontiguousarray(filters_t)
    for n in (1, 5, 33, 1000):
        winners = rng.integers(0, m, size=(n, k), dtype=np.int32)
        expected = _flynn_cpu.nearest_class(winners, filters_t)
        got = _flynn_cuda.nearest_class(cp.asarray(winners), cp.asarray(filters_t))
        assert np.array_equal(cp.asnumpy(got), expected)
        out = cp.full(n + 3, -1, dtype=cp.int64)
        _flynn_cuda.nearest_class(cp.asarray(winners), cp.asarray(filters_t), out=out[2 : 2 + n])
        assert (
            np.array_equal(cp.asnumpy(out[2 : 2 + n]), expected) and int(out[0]) == -1 and int(out[-1]) == -1
        )


@pytest.mark.cuda
def test_cpu_gpu_bit_identical(rng):
    import cupy as cp

    X, y = _blobs(rng, n=500, d=30)
    Xt = rng.normal(scale=3.0, size=(200, 30))
    for gamma in (0.0, 0.5, 0.9):
        cpu = FlyNNClassifier(k=10, gamma=gamma, random_state=0, device="cpu").fit(X, y)
        gpu = FlyNNClassifier(k=10, gamma=gamma, random_state=0, device="cuda").fit(X, y)
        assert isinstance(gpu.counts_, cp.ndarray)
        assert np.array_equal(cp.asnumpy(gpu.counts_), cpu.counts_)
        assert np.array_equal(cp.asnumpy(gpu.filters_), cpu.filters_)
        nov_gpu = gpu.novelty(cp.asarray(Xt))
        assert isinstance(nov_gpu, cp.ndarray)
        assert np.array_equal(cp.asnumpy(nov_gpu), cpu.novelty(Xt))
        pred_gpu = gpu.predict(cp.asarray(Xt))
        assert isinstance(pred_gpu, cp.ndarray)
        assert np.array_equal(cp.asnumpy(pred_gpu), cpu.predict(Xt))
        assert np.array_equal(gpu.predict(Xt), cpu.predict(Xt))  # NumPy in, NumPy out
        assert np.allclose(cp.asnumpy(gpu.predict_proba(cp.asarray(Xt))), cpu.predict_proba(Xt), rtol=1e-12)


@pytest.mark.cuda
def test_row_normalize_bit_identical(rng):
    import cupy as cp

    for dtype in (np.float32, np.float64):
        X = (rng.normal(size=(300, 77)) * rng.uniform(0.1, 100, size=(300, 1))).astype(dtype)
        X[5] = 2.5  # a constant row: centred to zeros
        if dtype == np.float64:  # rows whose squares overflow, underflow, and a subnormal row
            X[6] *= 1e155
            X[7] *= 1e-300
            X[8] *= 1e-310
        cpu = _flynn_cpu.row_normalize(X)
        gpu = cp.asnumpy(engine("cuda").row_normalize(cp.asarray(X)))
        assert gpu.dtype == dtype
        assert np.array_equal(cpu, gpu)
        assert np.all(cpu[5] == 0)
        norms = np.linalg.norm(cpu[[0, 1, 2, 6, 7, 8]].astype(np.float64), axis=1)
        assert np.allclose(norms, 1.0, atol=1e-5)


@pytest.mark.cuda
def test_gpu_partial_fit_merge_and_pickle_to_cpu(rng):
    import cupy as cp

    X, y = _blobs(rng, n=300)
    parts = np.array_split(np.arange(len(y)), 3)
    fixed = _fixed_range(X)  # parties share the encoding's range
    gpu_models = [
        FlyNNClassifier(k=8, random_state=2, device="cuda", **fixed).fit(cp.asarray(X[p]), y[p])
        for p in parts
    ]
    cpu = FlyNNClassifier(k=8, random_state=2, device="cpu", **fixed).fit(X, y)
    merged = merge_flynn(gpu_models)
    assert merged.device_ == "cuda"
    assert np.array_equal(cp.asnumpy(merged.counts_), cpu.counts_)
    state = pickle.loads(pickle.dumps(merged))
    assert isinstance(state.__getstate__()["counts_"], np.ndarray)
    assert np.array_equal(to_host(state.predict(X)), cpu.predict(X))


def test_predict_fast_validation_matches_validate_data(rng):
    """Plain float ndarrays skip validate_data; every other input takes it, with the same labels."""
    X, y = _blobs(rng, n=200, d=9)
    clf = FlyNNClassifier(k=6, random_state=1, device="cpu").fit(X, y)
    Xt = rng.normal(scale=3.0, size=(70, 9))
    assert clf._is_ready_ndarray(Xt)
    assert clf._is_ready_ndarray(Xt.astype(np.float32))
    assert not clf._is_ready_ndarray(np.asfortranarray(Xt))
    assert not clf._is_ready_ndarray(Xt[:, :-1])
    assert not clf._is_ready_ndarray(Xt.astype(np.float16))
    Xbad = Xt.copy()
    Xbad[4, 4] = np.inf
    assert not clf._is_ready_ndarray(Xbad)
    with pytest.raises(ValueError, match="infinity"):
        clf.predict(Xbad)
    ref = clf.predict(Xt)
    assert np.array_equal(clf.predict(np.asfortranarray(Xt)), ref)
    assert np.array_equal(clf.predict(Xt.tolist()), ref)
    # float32 input is hashed as float32 on both routes
    assert np.array_equal(clf.predict(Xt.astype(np.float32)), clf.predict(np.asfortranarray(Xt, np.float32)))


def test_fast_validation_keeps_feature_name_warning(rng):
    pd = pytest.importorskip("pandas")
    X, y = _blobs(rng, n=120, d=5)
    clf = FlyNNClassifier(k=4, random_state=0, device="cpu").fit(pd.DataFrame(X, columns=list("abcde")), y)
    assert not clf._is_ready_ndarray(X)
    with pytest.warns(UserWarning, match="feature names"):
        clf.predict(X)


@pytest.mark.cuda
@pytest.mark.parametrize("n_classes", [2, 7, 32, 33])
def test_gpu_predict_fused_and_batched_equals_cpu(rng, n_classes):
    """Fused novelty+argmin (<= 32 classes) and the two-kernel path (33) give the CPU labels."""
    import cupy as cp

    X, y = _blobs(rng, n=40 * n_classes, d=16, n_classes=n_classes)
    Xt = rng.normal(scale=3.0, size=(301, 16))
    labels = np.array([f"c{i:02d}" for i in range(n_classes)])
    for yy in (y * 3 + 1, labels[y]):
        cpu = FlyNNClassifier(k=8, gamma=0.5, batch_size=37, random_state=3, device="cpu").fit(X, yy)
        gpu = FlyNNClassifier(k=8, gamma=0.5, batch_size=37, random_state=3, device="cuda").fit(X, yy)
        ref = cpu.predict(Xt)
        assert np.array_equal(ref, cpu.classes_[np.argmin(cpu.novelty(Xt), axis=1)])
        assert np.array_equal(gpu.predict(Xt), ref)
        out = gpu.predict(cp.asarray(Xt))
        if yy.dtype.kind in "iu":
            assert isinstance(out, cp.ndarray)
            assert out.dtype == ref.dtype
        assert np.array_equal(to_host(out), ref)
        # more training data changes filters_: the cached transposed filters must follow
        cpu.partial_fit(Xt[:50], ref[::-1][:50])
        gpu.partial_fit(Xt[:50], ref[::-1][:50])
        assert np.array_equal(gpu.predict(Xt), cpu.predict(Xt))


# --------------------------------------------------------------------------- #
# issue 15: limits, magnitudes, labels, federated shards, failed fits           #
# --------------------------------------------------------------------------- #


def test_oversize_model_refused_before_allocating(monkeypatch):
    import tracemalloc

    from sknn_gpu._backend import InsufficientMemoryError

    X, y = np.zeros((2, 64)), np.array([0, 1])
    monkeypatch.setattr("sknn_gpu._backend.free_memory", lambda device, need=None: 32 * 2**30)  # a 32 GiB box
    tracemalloc.start()
    try:
        with pytest.raises(
            InsufficientMemoryError,
            match=r"FlyNNClassifier\.fit of 2 samples x 64 features "
            r"\(320 inputs after encoding='population'\) "
            r"with n_components=1000000000 cells.* "
            r"needs \d+ bytes .* but only 34359738368 bytes \(32\.0 GiB\) are free",
        ):
            FlyNNClassifier(n_components=10**9).fit(X, y)
        with pytest.raises(InsufficientMemoryError, match=r"FlyNNClassifier\.partial_fit of 2 samples"):
            FlyNNClassifier(n_components=10**9).partial_fit(X, y, classes=[0, 1])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20, f"{peak} bytes were allocated before the refusal"
    monkeypatch.undo()
    with pytest.raises(InsufficientMemoryError, match=r"n_components=1000000000000 cells"):
        FlyNNClassifier(n_components=10**12, device="cpu").fit(X, y)


def test_prediction_refused_before_allocating(monkeypatch, device, rng):
    from sknn_gpu._backend import InsufficientMemoryError

    X, y = _blobs(rng, n=50)
    clf = FlyNNClassifier(k=8, random_state=0, device=device).fit(X, y)
    monkeypatch.setattr("sknn_gpu._backend.free_memory", lambda device, need=None: 1000)
    for method in ("predict", "predict_proba", "decision_function", "novelty"):  # each names itself
        with pytest.raises(InsufficientMemoryError, match=rf"FlyNNClassifier\.{method} of 50 samples x 16"):
            getattr(clf, method)(X)
    with pytest.raises(InsufficientMemoryError, match=r"FlyNNClassifier\.partial_fit of 50 samples"):
        clf.partial_fit(X, y)


@pytest.mark.parametrize("scale", [1e155, 1e-300, 2.0**600, 1e300, 1e-310])
def test_normalize_is_scale_robust(device, digits, scale):
    """X * 1e155 used to overflow the squared norm (one class for every row), X * 1e-300 to underflow."""
    X_train, X_test, y_train, _ = digits
    X_train, X_test, y_train = X_train[:600], X_test[:200], y_train[:600]
    ref = FlyNNClassifier(n_connections=16, random_state=0, device="cpu", **RAW).fit(X_train, y_train)
    clf = FlyNNClassifier(n_connections=16, random_state=0, device=device, **RAW).fit(
        _on_device(X_train * scale, device), y_train
    )
    assert np.array_equal(to_host(clf.counts_), ref.counts_)
    pred = to_host(clf.predict(_on_device(X_test * scale, device)))
    assert len(np.unique(pred)) == 10
    assert np.array_equal(pred, ref.predict(X_test))
    # the normalised rows themselves do not change under an exact power-of-two scaling
    Z = to_host(engine(device).row_normalize(_on_device(X_train * 2.0**-900, device)))
    assert np.array_equal(Z, _flynn_cpu.row_normalize(X_train))


def _on_device(X, device):
    from sknn_gpu._backend import to_device

    return to_device(X, device)


@pytest.mark.parametrize("scale, fragment", [(1e155, "overflow"), (1e-300, "smallest normal")])
def test_raw_inputs_out_of_float32_range_are_refused(device, rng, scale, fragment):
    X, y = _blobs(rng)
    with pytest.raises(ValueError, match=rf"{fragment}.*use normalize=True"):
        FlyNNClassifier(normalize=False, random_state=0, device=device, **RAW).fit(np.abs(X) * scale, y)
    clf = FlyNNClassifier(normalize=False, random_state=0, device=device, **RAW).fit(X, y)
    with pytest.raises(ValueError, match=rf"{fragment}.*use normalize=True"):
        clf.predict(np.abs(X) * scale)


@pytest.mark.parametrize(
    "y",
    [[1, "a"] * 10, np.array([2, "b"] * 10, dtype=object), np.array([0.5, "x"] * 10, dtype=object)],
    ids=["list", "object", "float-object"],
)
def test_mixed_string_and_numeric_labels_are_refused(rng, y):
    X = rng.normal(size=(20, 4))
    with pytest.raises(TypeError, match=r"y mixes string and numeric class labels \(e\.g\. '.+' and .+\)"):
        FlyNNClassifier(device="cpu").fit(X, y)
    with pytest.raises(TypeError, match="classes mixes string and numeric"):
        FlyNNClassifier(device="cpu").partial_fit(X, np.zeros(20, int), classes=np.array([0, "a"], object))
    # one type per call is fine, and a list of strings keeps NumPy's string dtype
    clf = FlyNNClassifier(k=4, random_state=0, device="cpu").fit(X, ["a", "b"] * 10)
    assert clf.classes_.dtype.kind == "U" and list(clf.classes_) == ["a", "b"]


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_merge_refuses_numeric_and_string_labels(rng, order):
    X, y = _blobs(rng, n_classes=2)
    parties = [
        FlyNNClassifier(k=8, random_state=0, device="cpu").fit(X, y),
        FlyNNClassifier(k=8, random_state=0, device="cpu").fit(X, np.where(y == 1, "b", "a")),
    ]
    kinds = ["numeric", "string"]
    a, b = order
    with pytest.raises(
        TypeError,
        match=rf"models\[0\] has {kinds[a]} class labels .* but models\[1\] has {kinds[b]} ones",
    ):
        merge_flynn([parties[a], parties[b]])


@pytest.mark.parametrize("failing_call", [1, 2])
def test_failed_fit_leaves_estimator_unfitted_and_partial_fit_unchanged(
    monkeypatch, device, rng, failing_call
):
    """An error half-way (a GPU out-of-memory, say) never leaves a half-updated model."""
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    X, y = _blobs(rng, n=90)
    eng = engine(device)
    real_count, calls = eng.count, []

    def failing_count(*args):
        calls.append(1)
        if len(calls) == failing_call:
            raise MemoryError("simulated out-of-memory in the middle of the counts")
        return real_count(*args)

    fixed = _fixed_range(X)  # the halves of partial_fit below encode like one fit
    clf = FlyNNClassifier(k=8, batch_size=30, random_state=0, device=device, **fixed)
    monkeypatch.setattr(eng, "count", failing_count)
    with pytest.raises(MemoryError, match="simulated"):
        clf.fit(X, y)
    with pytest.raises(NotFittedError):
        check_is_fitted(clf)
    monkeypatch.setattr(eng, "count", real_count)
    clf.partial_fit(X[:45], y[:45], classes=np.unique(y))
    before = to_host(clf.counts_).copy(), to_host(clf.filters_).copy(), to_host(clf.predict(X))
    calls.clear()
    monkeypatch.setattr(eng, "count", failing_count)
    with pytest.raises(MemoryError, match="simulated"):
        clf.partial_fit(X[45:], y[45:])
    assert np.array_equal(to_host(clf.counts_), before[0])
    assert np.array_equal(to_host(clf.filters_), before[1])
    assert np.array_equal(to_host(clf.predict(X)), before[2])
    monkeypatch.setattr(eng, "count", real_count)  # and it carries on as if nothing happened
    clf.partial_fit(X[45:], y[45:])
    assert np.array_equal(
        to_host(clf.counts_), FlyNNClassifier(k=8, random_state=0, device="cpu", **fixed).fit(X, y).counts_
    )


def test_fit_federated_names_the_empty_shard(digits, dask_client):
    from sknn_gpu.fly import fit_federated

    da = pytest.importorskip("dask.array")
    X_train, _, y_train, _ = digits
    params = dict(k=8, random_state=0, device="cpu")
    pairs = [(X_train[:100], y_train[:100]), (X_train[:0], y_train[:0]), (X_train[100:200], y_train[100:200])]
    with pytest.raises(ValueError, match=r"shard 1 is empty \(0 samples\)"):
        fit_federated(dask_client, pairs, **params)
    futures = dask_client.scatter(pairs[::-1])  # the empty pair is still shard 1, now on a worker
    with pytest.raises(ValueError, match=r"shard 1 is empty \(0 samples\)"):
        fit_federated(dask_client, futures, **params)
    dX = da.from_array(X_train[:200], chunks=((100, 0, 100), (64,)))
    dy = da.from_array(y_train[:200], chunks=((100, 0, 100),))
    with pytest.raises(ValueError, match=r"shard 1 is empty \(0 samples\)"):
        fit_federated(dask_client, (dX, dy), **params)
    # any other error of a party names its shard too
    bad = [(X_train[:100], y_train[:100]), (X_train[100:200], y_train[100:200].astype(float) + 0.5)]
    with pytest.raises(ValueError, match=r"fit_federated: shard 1: Unknown label type"):
        fit_federated(dask_client, bad, **params)


# --------------------------------------------------------------------------- #
# sparse input, verbose (issue 17)                                             #
# --------------------------------------------------------------------------- #


def _sparse_blobs(rng, n=300, d=400, density=0.004, n_classes=3):
    """Sparse rows (uneven counts, some empty) whose classes own different features."""
    import scipy.sparse as sp

    y = rng.integers(0, n_classes, size=n)
    X = sp.random(
        n, d, density=density, format="lil", dtype=np.float64, random_state=int(rng.integers(1 << 30))
    )
    for c in range(n_classes):  # a class signature on a few features of its own
        rows = np.flatnonzero(y == c)
        X[rows[:, None], np.arange(c * 10, c * 10 + 3)] = rng.random((rows.size, 3)) * 5
    return X.tocsr(), y


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sparse_input_equals_dense_bit_for_bit(rng, normalize, dtype):
    X, y = _sparse_blobs(rng)
    X = X.astype(dtype)
    params = dict(k=12, normalize=normalize, batch_size=128, random_state=0, device="cpu", **RAW)
    dense = FlyNNClassifier(**params).fit(X.toarray(), y)
    Xt, yt = _sparse_blobs(rng, n=90)
    Xt = Xt.astype(dtype)
    for fmt in ("csr", "csc", "coo"):
        sparse = FlyNNClassifier(**params).fit(X.asformat(fmt), y)
        assert np.array_equal(sparse.counts_, dense.counts_)
        assert np.array_equal(sparse.novelty(Xt.asformat(fmt)), dense.novelty(Xt.toarray()))
        assert np.array_equal(sparse.predict_proba(Xt.asformat(fmt)), dense.predict_proba(Xt.toarray()))
        assert np.array_equal(sparse.predict(Xt.asformat(fmt)), dense.predict(Xt.toarray()))
    assert dense.score(Xt.toarray(), yt) == sparse.score(Xt, yt)
    # streaming a sparse matrix in pieces gives the same counts as well
    streamed = FlyNNClassifier(**params)
    for part in np.array_split(np.arange(X.shape[0]), 3):
        streamed.partial_fit(X[part], y[part], classes=np.unique(y))
    assert np.array_equal(streamed.counts_, dense.counts_)
    assert dense.score(Xt.toarray(), yt) > 0.6  # the sparse signal is learnt at all


def test_sparse_input_is_hashed_without_densifying_when_not_normalised(rng, monkeypatch):
    from sknn_gpu.fly import _flyhash_cpu

    X, y = _sparse_blobs(rng, density=0.002)
    seen = []
    real = _flyhash_cpu._sparse_activations
    monkeypatch.setattr(
        _flyhash_cpu, "_sparse_activations", lambda fh, Xb, t: seen.append(Xb.format) or real(fh, Xb, t)
    )
    FlyNNClassifier(k=12, normalize=False, random_state=0, device="cpu", **RAW).fit(X, y).predict(X)
    assert seen and set(seen) == {"csr"}
    seen.clear()
    FlyNNClassifier(k=12, normalize=True, random_state=0, device="cpu", **RAW).fit(
        X, y
    )  # centring fills rows
    assert seen == []


@pytest.mark.cuda
@pytest.mark.parametrize("normalize", [True, False])
def test_cupyx_sparse_input_equals_cpu_dense(rng, normalize):
    import cupyx.scipy.sparse as csp

    X, y = _sparse_blobs(rng, n_classes=4)  # (4 classes: the predict build of the other GPU tests)
    params = dict(k=12, normalize=normalize, batch_size=128, random_state=0)
    cpu = FlyNNClassifier(**params, device="cpu").fit(X.toarray(), y)
    gpu = FlyNNClassifier(**params, device="cuda").fit(csp.csr_matrix(X), y)
    assert np.array_equal(to_host(gpu.counts_), cpu.counts_)
    Xt, _ = _sparse_blobs(rng, n=90, n_classes=4)
    for fmt in ("csr", "csc"):
        Xd = csp.csr_matrix(Xt) if fmt == "csr" else csp.csc_matrix(Xt)
        assert np.array_equal(to_host(gpu.predict(Xd)), cpu.predict(Xt.toarray()))
        assert np.array_equal(to_host(gpu.novelty(Xd)), cpu.novelty(Xt.toarray()))
    host_sparse = FlyNNClassifier(**params, device="cuda").fit(X, y)  # SciPy CSR onto the GPU
    assert np.array_equal(to_host(host_sparse.counts_), cpu.counts_)


@pytest.mark.parametrize("verbose", [0, 1, 2])
def test_verbose_reports_batches(caplog, rng, verbose):
    import logging

    X, y = _blobs(rng, n=250)
    clf = FlyNNClassifier(k=8, batch_size=100, random_state=0, device="cpu", verbose=verbose)
    with caplog.at_level(logging.INFO, logger="sknn_gpu"):
        clf.fit(X, y)
        clf.partial_fit(X[:50], y[:50])
        clf.predict(X)
        clf.predict_proba(X[:30])
    msgs = [r.getMessage() for r in caplog.records if r.name == "sknn_gpu.fly"]
    if verbose == 0:
        assert msgs == []
        return
    summaries = [m for m in msgs if " batches in " in m]
    assert [m.split(":")[0] for m in summaries] == [
        "FlyNNClassifier.fit",
        "FlyNNClassifier.partial_fit",
        "FlyNNClassifier.predict",
        "FlyNNClassifier.predict_proba",
    ]
    assert summaries[0].startswith("FlyNNClassifier.fit: 3 batches in ")
    assert summaries[0].endswith("samples=250, classes=4")
    assert summaries[2].startswith("FlyNNClassifier.predict: 3 batches in ")
    steps = [m for m in msgs if m not in summaries]
    if verbose == 1:
        assert steps == []
    else:
        assert steps[:3] == [
            "FlyNNClassifier.fit 1/3: rows=100",
            "FlyNNClassifier.fit 2/3: rows=100",
            "FlyNNClassifier.fit 3/3: rows=50",
        ]
        assert len(steps) == 3 + 1 + 3 + 1


# --------------------------------------------------------------------------- #
# input encodings                                                               #
# --------------------------------------------------------------------------- #


def _unit_blobs(rng, n=300, d=10, n_classes=3):
    """Blobs scaled into [0, 1] (what an encoding needs)."""
    X, y = _blobs(rng, n=n, d=d, n_classes=n_classes)
    X = (X - X.min(axis=0)) / (X.max(axis=0) - X.min(axis=0))
    return np.clip(X, 0.0, 1.0), y


def test_input_range_fit_tiles_the_training_range(rng):
    """'fit' keeps each feature's training min and max; later values beyond them read as the
    ends (clipped), a constant feature reads 0; equal to a fixed range over the same bounds;
    partial_fit takes the range of its first batch."""
    from sknn_gpu.fly._encoding import encode
    from sknn_gpu.fly._flynn_batches import range_arrays

    X, y = _blobs(rng, n=200, d=6)
    X[:, 2] = 7.0  # a constant feature
    clf = FlyNNClassifier(k=8, input_range="fit", random_state=0, device="cpu").fit(X, y)
    np.testing.assert_array_equal(clf.input_low_, X.min(axis=0))
    np.testing.assert_array_equal(clf.input_high_, X.max(axis=0))
    fixed = FlyNNClassifier(k=8, random_state=0, device="cpu", **_fixed_range(X)).fit(X, y)
    assert np.array_equal(clf.counts_, fixed.counts_)
    # the encoder's own view: scaled to [0, 1], clipped, the constant feature at 0
    low, scale = range_arrays(clf, X)
    U = encode(X, "complement", low, scale, clip=True)[:, :6]  # the first half is u itself
    assert U.min() == 0.0 and U.max() == 1.0 and np.all(U[:, 2] == 0.0)
    assert np.all(encode(X + 1e3, "complement", low, scale, clip=True)[:, :6] == 1.0)  # read as the ends
    far = X[:20] + 1e6 * np.sign(X[:20] - X.mean(axis=0))  # far beyond the range, on the same side
    clipped = np.where(far > X.max(axis=0), X.max(axis=0), np.where(far < X.min(axis=0), X.min(axis=0), far))
    np.testing.assert_array_equal(clf.novelty(far), clf.novelty(clipped))
    with pytest.raises(ValueError, match="outside"):
        fixed.predict(far)  # a fixed range refuses what 'fit' clips
    # streaming: the first batch fixes the range
    stream = FlyNNClassifier(k=8, input_range="fit", random_state=0, device="cpu")
    stream.partial_fit(X[:50], y[:50], classes=np.unique(y))
    stream.partial_fit(X[50:], y[50:])
    np.testing.assert_array_equal(stream.input_low_, X[:50].min(axis=0))
    first = FlyNNClassifier(k=8, random_state=0, device="cpu", input_range=(X[:50].min(0), X[:50].max(0)))
    first_counts = first.partial_fit(X[:50], y[:50], classes=np.unique(y)).counts_
    rest = np.clip(X[50:], X[:50].min(axis=0), X[:50].max(axis=0))  # what the stream read of the rest
    assert np.array_equal(stream.counts_ - first_counts, first._count(rest, first._encode_y(y[50:], 150)))
    # no encoding: no range
    assert not hasattr(FlyNNClassifier(input_range="fit", k=8, device="cpu", **RAW).fit(X, y), "input_low_")


@pytest.mark.parametrize(
    "bad, match",
    [
        ((0.0,), "a pair"),
        ((0.0, 1.0, 2.0), "a pair"),
        ((0.0, np.inf), "finite"),
        ((1.0, 0.0), r"low <= high for every feature; feature 0 has low=1, high=0"),
        ((np.zeros(3), np.ones(6)), "arrays of 6 values"),
        (("a", "b"), "numbers or arrays"),
    ],
)
def test_input_range_errors(rng, bad, match):
    X, y = _blobs(rng, n=60, d=6)
    with pytest.raises(ValueError, match=match):
        FlyNNClassifier(input_range=bad, k=8, device="cpu").fit(X, y)
    with pytest.raises(ValueError, match="input_range"):
        FlyNNClassifier(input_range="auto", k=8, device="cpu").fit(X, y)


def test_normalize_auto_normalizes_only_raw_features(rng):
    X, y = _blobs(rng, n=120, d=8)
    for encoding, expected in ((None, True), ("population", False), ("complement", False)):
        auto = FlyNNClassifier(encoding=encoding, k=8, random_state=0, device="cpu").fit(X, y)
        same = FlyNNClassifier(encoding=encoding, normalize=expected, k=8, random_state=0, device="cpu").fit(
            X, y
        )
        assert auto._normalizes() is expected
        assert np.array_equal(auto.counts_, same.counts_)


def test_encode_values():
    from sknn_gpu.fly._encoding import (
        RECEPTOR_SPREAD,
        THERMOMETER_SLOPE,
        THERMOMETER_THRESHOLDS,
        encode,
        n_receptors,
    )

    X = np.array([[0.0, 0.25, 0.6, 1.0]])
    np.testing.assert_array_equal(encode(X, "complement"), [[0.0, 0.25, 0.6, 1.0, 1.0, 0.75, 0.4, 0.0]])
    for L in (5, 9):
        pop = encode(X, "population", receptors=L)
        assert pop.shape == (1, 4 * L)
        w = RECEPTOR_SPREAD / (L - 1)
        for q in range(L):  # receptor by receptor, centred at q / (L - 1)
            c = q / (L - 1)
            np.testing.assert_array_equal(pop[0, 4 * q : 4 * q + 4], np.maximum(w - np.abs(X[0] - c), 0.0))
        assert pop[0, 0] == w and pop[0, 4 * (L - 1) + 3] == w  # x at a centre: that receptor's peak
        # a value excites only the receptors within two spacings of it
        assert np.count_nonzero(pop[0, 0::4]) == 2  # x = 0: centres 0 and 1/(L-1) (2/(L-1) is at 0)
    np.testing.assert_array_equal(encode(X, "population"), encode(X, "population", receptors=5))
    assert encode(X.astype(np.float32), "population", receptors=7).dtype == np.float32
    # 'auto': 64 inputs spread over the features, 5 to 64 receptors each
    assert [n_receptors("auto", d) for d in (1, 2, 5, 10, 13, 64, 784)] == [64, 32, 13, 7, 5, 5, 5]
    assert n_receptors(11, 784) == 11
    th = encode(X, "thermometer")
    assert th.shape == (1, 4 * len(THERMOMETER_THRESHOLDS))
    for j, t in enumerate(THERMOMETER_THRESHOLDS):
        np.testing.assert_array_equal(th[0, 4 * j : 4 * j + 4], np.clip((X[0] - t) * THERMOMETER_SLOPE, 0, 1))
    assert np.all(th[0, 0::4] == 0.0)  # the bottom of the range is silent
    np.testing.assert_allclose(
        th[0, 3::4], [1.0, 1.0, 1.0, 0.75, 0.25], rtol=1e-15
    )  # the top drives every ramp
    np.testing.assert_allclose(th[0, [1, 5, 9, 13, 17]], [0.375, 0, 0, 0, 0])  # 0.25: the first ramp only
    # a range in float64: (x - low) / span, clipped; float32 input comes out float64
    low, span = np.array([-2.0, 0.0, 1.0, 0.0]), np.array([4.0, 0.5, 1.0, 1.0])
    Y = np.array([[0.0, 0.25, 3.0, -1.0]], dtype=np.float32)
    out = encode(Y, "complement", low, span, clip=True)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out[0, :4], [0.5, 0.5, 1.0, 0.0])


@pytest.mark.parametrize(
    "encoding, width", [(None, 1), ("complement", 2), ("population", 7), ("thermometer", 5)]
)
def test_encoding_sizes_count_the_encoded_inputs(rng, encoding, width):
    X, y = _unit_blobs(rng, d=10)  # population, n_receptors='auto': ceil(64 / 10) = 7 per feature
    clf = FlyNNClassifier(None, encoding=encoding, input_range="fit", k=8, random_state=0, device="cpu")
    clf.fit(X, y)
    assert clf.n_features_in_ == 10
    assert clf.hasher_.n_features_in_ == 10 * width
    assert clf.n_components_ == 20 * 10 * width  # expansion_factor x encoded inputs
    assert clf.hasher_.n_connections_ == max(2, int(0.2 * 10 * width))  # 2, 4, 10
    assert FlyNNClassifier(k=8, device="cpu").fit(np.tile(X, 9), y).hasher_.n_connections_ == 16  # capped
    counts, _ = _codes_counts_encoded(clf, X, y)
    assert np.array_equal(clf.counts_, counts)


def _codes_counts_encoded(clf, X, y):
    from sknn_gpu.fly._encoding import encode

    Xd = _on(clf, np.asarray(X, dtype=np.float64))
    if clf.encoding is not None:
        Xd = encode(Xd, clf.encoding, receptors=clf.n_receptors_)
    if clf._normalizes():
        Xd = engine(clf.device_).row_normalize(Xd)
    w = to_host(clf.hasher_._winners(Xd))
    counts = np.zeros((len(clf.classes_), clf.n_components_), dtype=np.int64)
    np.add.at(counts, (np.repeat(np.searchsorted(clf.classes_, y), w.shape[1]), w.ravel()), 1)
    return counts, w


@pytest.mark.parametrize("encoding", ["thermometer", "complement", "population"])
def test_fixed_input_range_refuses_values_outside_it(device, rng, encoding):
    X, y = _unit_blobs(rng)
    params = dict(encoding=encoding, input_range=(0, 1), k=8, n_connections=16, random_state=0, device=device)
    for bad in (X * 1.5, X - 0.1):
        with pytest.raises(
            ValueError, match=r"has the value -?[\d.]+, outside \[0, 1\].*MinMaxScaler\(clip=True\)"
        ):
            FlyNNClassifier(**params).fit(bad, y)
    clf = FlyNNClassifier(**params).fit(X, y)
    Xb = X.copy()
    Xb[3, 4] = -0.25
    with pytest.raises(ValueError, match=r"feature 4 has the value -0\.25, outside \[0, 1\]"):
        clf.predict(Xb)
    # a per-feature range names the feature and its own bounds
    wide = FlyNNClassifier(**{**params, "input_range": (np.zeros(10), np.full(10, 2.0))}).fit(X, y)
    Xb = X.copy()
    Xb[5, 7] = 2.5
    with pytest.raises(ValueError, match=r"feature 7 has the value 2\.5, outside \[0, 2\]"):
        wide.predict(Xb)
    with pytest.raises(ValueError, match="needs encoding=None and normalize=False"):
        FlyNNClassifier(encoding=encoding, precision="integer", normalize=False, device=device).fit(X, y)


@pytest.mark.parametrize("encoding", ["thermometer", "complement", "population"])
def test_encoding_sparse_streaming_and_merge(rng, encoding):
    """Sparse input is encoded a batch at a time (dense): the model equals the dense one;
    streaming equals fit; parties merge only with the same encoding."""
    import scipy.sparse as sp

    X, y = _unit_blobs(rng)
    X[X < 0.3] = 0.0
    params = dict(encoding=encoding, input_range=(0, 1), k=8, batch_size=64, random_state=0, device="cpu")
    dense = FlyNNClassifier(**params).fit(X, y)
    sparse = FlyNNClassifier(**params).fit(sp.csr_matrix(X), y)
    assert np.array_equal(dense.counts_, sparse.counts_)
    assert np.array_equal(dense.predict(X), sparse.predict(sp.csr_matrix(X)))
    streamed = FlyNNClassifier(**params)
    for part in np.array_split(np.arange(X.shape[0]), 3):
        streamed.partial_fit(X[part], y[part], classes=np.unique(y))
    assert np.array_equal(streamed.counts_, dense.counts_)
    halves = [FlyNNClassifier(**params).fit(X[i::2], y[i::2]) for i in (0, 1)]
    assert np.array_equal(merge_flynn(halves).counts_, dense.counts_)
    other = FlyNNClassifier(**{**params, "encoding": None}).fit(X, y)
    with pytest.raises(ValueError, match="encoding"):
        merge_flynn([dense, other])


def test_defaults_reach_knn_on_digits(digits):
    """``FlyNNClassifier()`` on raw digits (pixels 0..16) reaches 0.95 (3-NN: 0.98), ahead
    of the papers' FlyNN at the papers' smallest scale."""
    from sknn_gpu.fly import PAPERS_FLYNN

    X_train, X_test, y_train, y_test = digits
    acc = FlyNNClassifier(random_state=0, device="cpu").fit(X_train, y_train).score(X_test, y_test)
    former = FlyNNClassifier(**PAPERS_FLYNN, random_state=0, device="cpu")
    assert acc >= 0.95
    assert acc > former.fit(X_train, y_train).score(X_test, y_test)


@pytest.mark.cuda
@pytest.mark.parametrize("encoding", ["thermometer", "population", "complement"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("input_range", ["fit", "quantile", (0, 1)])
# the fused kernel (s = 16 < 18 + d / 93), or the product forced; encoded widths 80-1000. The
# encode kernel is built per (encoding, dtype, range) and the hash per route, so each pairing
# of width and route reaches every build once (d=40 by the band, or d=200 by the fused kernel,
# would run the same builds again).
@pytest.mark.parametrize("d, route", [(40, "auto"), (200, "band")])
def test_encoding_cpu_gpu_bit_identical(monkeypatch, rng, encoding, dtype, input_range, d, route):
    import cupy as cp

    from sknn_gpu.fly import _flyhash_cuda

    if route == "band":
        monkeypatch.setenv("SKNN_GPU_FLYHASH_BAND", "1")

    X, y = _unit_blobs(rng, n=400, d=d, n_classes=5)
    Xt = _unit_blobs(rng, n=150, d=d, n_classes=5)[0]
    if input_range == "fit":  # raw-looking features; the queries reach beyond the training range
        X, Xt = X * 37.5 - 4.0, Xt * 45.0 - 6.0
    X, Xt = X.astype(dtype), Xt.astype(dtype)
    params = dict(encoding=encoding, input_range=input_range, random_state=0)
    cpu = FlyNNClassifier(**params, device="cpu").fit(X, y)
    gpu = FlyNNClassifier(**params, device="cuda").fit(cp.asarray(X), y)
    h = gpu.hasher_  # s <= 16 < 18 + d / 93: the rule picks the fused kernel
    assert h.n_connections_ <= 16 and _flyhash_cuda._band_ok(h) is (route == "band")
    np.testing.assert_array_equal(gpu.input_low_, cpu.input_low_)
    assert np.array_equal(cp.asnumpy(gpu.counts_), cpu.counts_)
    assert np.array_equal(cp.asnumpy(gpu.novelty(cp.asarray(Xt))), cpu.novelty(Xt))
    assert np.array_equal(gpu.predict(Xt), cpu.predict(Xt))


@pytest.mark.cuda
def test_defaults_on_digits_cpu_gpu_bit_identical(digits):
    """FlyNNClassifier() on raw digits: the fitted range, the thermometer encoding, the
    relative filters and the predictions are the same on both devices."""
    X_train, X_test, y_train, _ = digits
    cpu = FlyNNClassifier(random_state=0, device="cpu").fit(X_train, y_train)
    gpu = FlyNNClassifier(random_state=0, device="cuda").fit(X_train, y_train)
    assert np.array_equal(to_host(gpu.counts_), cpu.counts_)
    assert np.array_equal(to_host(gpu.filters_), cpu.filters_)
    assert np.array_equal(gpu.predict_proba(X_test), cpu.predict_proba(X_test))
    assert np.array_equal(gpu.predict(X_test), cpu.predict(X_test))


def test_encoding_on_dask_equals_in_memory(digits, dask_client):
    """Fit and predict on Dask arrays with an encoding: every block is checked and encoded
    on its worker, and the model and predictions equal the in-memory ones; a block
    outside [0, 1] fails with the encoding's message."""
    da = pytest.importorskip("dask.array")
    X_train, X_test, y_train, _ = digits
    X_train, X_test = X_train / 16.0, X_test / 16.0  # digits' pixels are 0..16
    params = dict(encoding="population", input_range=(0, 1), k=32, random_state=3, device="cpu")
    ref = FlyNNClassifier(**params).fit(X_train, y_train)
    dX, dy = da.from_array(X_train, chunks=(400, -1)), da.from_array(y_train, chunks=400)
    lazy = FlyNNClassifier(**params).fit(dX, dy)
    assert np.array_equal(lazy.counts_, ref.counts_)
    dXt = da.from_array(X_test, chunks=(100, -1))
    assert np.array_equal(lazy.predict(dXt).compute(), ref.predict(X_test))
    with pytest.raises(ValueError, match=r"outside \[0, 1\]"):
        FlyNNClassifier(**params).fit(da.from_array(X_train * 16.0, chunks=(400, -1)), dy)
    # input_range='fit' on Dask: one reduction gives the pooled range, the same model
    fitted = {**params, "input_range": "fit"}
    ref = FlyNNClassifier(**fitted).fit(X_train * 16.0, y_train)
    lazy = FlyNNClassifier(**fitted).fit(da.from_array(X_train * 16.0, chunks=(400, -1)), dy)
    assert np.array_equal(lazy.input_low_, ref.input_low_) and np.array_equal(
        lazy.input_high_, ref.input_high_
    )
    assert np.array_equal(lazy.counts_, ref.counts_)


# --------------------------------------------------------------------------- #
# sample and class weights                                                      #
# --------------------------------------------------------------------------- #


def _weighted_reference(clf, X, y, w):
    """Independent weighted count table: each sample's weight added to its winners one at a
    time (np.add.at, float64), from the winners of the model's own encoding and hash."""
    batches = clf._batch_winners(clf._validate_X(_on(clf, X), reset=False))
    winners = np.concatenate([to_host(b) for _, b in batches])
    counts = np.zeros((len(clf.classes_), clf.n_components_), dtype=np.float64)
    rows = np.searchsorted(clf.classes_, y)
    np.add.at(counts, (np.repeat(rows, winners.shape[1]), winners.ravel()), np.repeat(w, winners.shape[1]))
    return counts


def test_whole_number_weights_equal_repeated_rows(device, rng):
    """A weight w is the sample repeated w times, bit for bit: int64 counts, the fitted
    range, the classes and every prediction (rows of weight 0 are as if absent). Not the
    probabilities' scale: repeated copies fall in different calibration folds, so each is
    held out from a model that saw its twins, which a weighted row is not."""
    X, y = _blobs(rng, n=200)
    w = rng.integers(0, 4, size=len(y))
    w[np.argmax(X[:, 0])] = 0  # the largest value of feature 0 is weighted out: the range shrinks
    params = dict(k=16, random_state=5, device=device)
    weighted = FlyNNClassifier(**params).fit(_on_device(X, device), y, sample_weight=_on_device(w, device))
    repeated = FlyNNClassifier(**params).fit(np.repeat(X, w, axis=0), np.repeat(y, w))
    assert weighted.counts_.dtype == np.int64
    assert np.array_equal(to_host(weighted.counts_), to_host(repeated.counts_))
    assert np.array_equal(weighted.input_high_, repeated.input_high_)
    assert weighted.input_high_[0] < X[:, 0].max()
    assert np.array_equal(to_host(weighted.filters_), to_host(repeated.filters_))
    assert np.array_equal(to_host(weighted.novelty(X)), to_host(repeated.novelty(X)))
    assert np.array_equal(to_host(weighted.predict(X)), to_host(repeated.predict(X)))


@pytest.mark.parametrize("weights", ["none", "ones", "scalar"])
def test_unit_weights_keep_the_unweighted_model(device, rng, weights):
    X, y = _blobs(rng, n=120)
    ref = FlyNNClassifier(k=16, random_state=1, device=device).fit(X, y)
    sw = {"none": None, "ones": np.ones(len(y)), "scalar": 1.0}[weights]
    got = FlyNNClassifier(k=16, random_state=1, device=device).fit(X, y, sample_weight=sw)
    assert got.counts_.dtype == np.int64
    assert np.array_equal(to_host(got.counts_), to_host(ref.counts_))
    assert np.array_equal(to_host(got.filters_), to_host(ref.filters_))


def test_fractional_weights_are_exact_in_any_order_and_merge(device, rng):
    """Weighted counts are sums of multiples of 2**-20: the fit, an independent one-at-a-time
    sum, partial_fit over batches in another order and a merge of parties agree bit for bit."""
    X, y = _blobs(rng, n=300)
    w = rng.random(len(y)) * 3.0
    params = dict(k=16, random_state=2, device=device, **_fixed_range(X))
    pooled = FlyNNClassifier(**params).fit(X, y, sample_weight=w)
    assert pooled.counts_.dtype == np.float64
    grid = np.rint(w * 2.0**20) / 2.0**20  # the weights as the model rounds them
    assert np.array_equal(to_host(pooled.counts_), _weighted_reference(pooled, X, y, grid))
    parts = np.array_split(rng.permutation(len(y)), 3)
    streamed = FlyNNClassifier(**params)
    for p in parts[::-1]:
        streamed.partial_fit(X[p], y[p], classes=np.unique(y), sample_weight=w[p])
    merged = merge_flynn([FlyNNClassifier(**params).fit(X[p], y[p], sample_weight=w[p]) for p in parts])
    for model in (streamed, merged):
        assert np.array_equal(to_host(model.counts_), to_host(pooled.counts_))
        assert np.array_equal(to_host(model.filters_), to_host(pooled.filters_))
    # weighted and unweighted batches mix: the unweighted rows weigh 1
    mixed = FlyNNClassifier(**params).partial_fit(X[:150], y[:150], classes=np.unique(y))
    mixed.partial_fit(X[150:], y[150:], sample_weight=w[150:])
    ones = np.concatenate([np.ones(150), w[150:]])
    assert np.array_equal(to_host(mixed.counts_), to_host(FlyNNClassifier(**params).fit(X, y, ones).counts_))


def test_relative_decay_uses_the_weighted_class_mean(rng):
    """Under decay='relative' a weight shared by all of a class's samples cancels; weights
    within a class change its filter."""
    X, y = _blobs(rng, n=200)
    params = dict(k=16, input_range="fit", random_state=4, device="cpu")  # the range ignores weights
    ref = FlyNNClassifier(**params).fit(X, y)
    per_class = np.where(y == 0, 4.0, 1.0)
    assert np.array_equal(FlyNNClassifier(**params).fit(X, y, sample_weight=per_class).filters_, ref.filters_)
    within = FlyNNClassifier(**params).fit(X, y, sample_weight=rng.random(len(y)) + 0.5)
    assert not np.array_equal(within.filters_, ref.filters_)
    exponent = within.counts_ * within.n_components_ / within.counts_.sum(axis=1, keepdims=True)
    assert np.array_equal(within.filters_, np.power(within.gamma, exponent))


def test_sample_weight_rounding_and_errors(rng):
    X, y = _blobs(rng, n=60)
    params = dict(k=8, random_state=0, device="cpu")
    w = rng.random(len(y))
    w[:5] = 1e-9  # below half the grid step: weight 0, as if absent
    got = FlyNNClassifier(**params).fit(X, y, sample_weight=w)
    keep = np.ones(len(y), dtype=bool)
    keep[:5] = False
    ref = FlyNNClassifier(**params).fit(X[keep], y[keep], sample_weight=np.rint(w[keep] * 2.0**20) / 2.0**20)
    assert np.array_equal(got.counts_, ref.counts_)
    clf = FlyNNClassifier(**params)
    for bad, match in [
        (-w, "Negative values"),
        (np.full(len(y), np.nan), "NaN"),
        (np.zeros(len(y)), "zero"),
        (np.full(len(y), 1e-9), "rounds to zero"),
        (np.ones(len(y) + 1), "61 weights for 60 samples"),
        (np.ones((len(y), 2)), "must be 1-D"),
        (np.full(len(y), 2.0**40), "rescale"),
    ]:
        with pytest.raises(ValueError, match=match):
            clf.fit(X, y, sample_weight=bad)
    assert not hasattr(clf, "counts_")
    # seven copies of one row weigh 7 * 2**30 (+ 3.5) in its cells: below 2**33, exact; the same
    # again would pass 2**33, where sums of weighted counts may round
    X[:7], y[:7] = X[0], y[0]
    heavy = np.where(np.arange(len(y)) < 7, 2.0**30 + 0.5, 1.0)
    big = FlyNNClassifier(**params).fit(X, y, sample_weight=heavy)
    peak = big.counts_.max()
    assert 7 * (2.0**30 + 0.5) <= peak < 2.0**33
    with pytest.raises(ValueError, match="2\\*\\*33"):
        big.partial_fit(X, y, sample_weight=heavy)
    assert big.counts_.max() == peak  # the model is kept as it was
    with pytest.raises(ValueError, match="rescale"):  # one fit whose class total passes it
        FlyNNClassifier(**params).fit(X, y, sample_weight=heavy * 2.0 + 0.25)


def test_class_only_in_weight_zero_rows_is_not_a_class(rng):
    X, y = _blobs(rng, n=80, n_classes=3)
    w = np.where(y == 2, 0.0, 1.0)
    clf = FlyNNClassifier(k=8, random_state=0, device="cpu").fit(X, y, sample_weight=w)
    assert clf.classes_.tolist() == [0, 1]
    assert set(clf.predict(X).tolist()) <= {0, 1}
    with pytest.raises(ValueError, match="not in classes_"):  # partial_fit checks every label
        FlyNNClassifier(k=8, device="cpu").partial_fit(X, y, classes=[0, 1], sample_weight=w)


def test_class_weight_scales_each_class_exponent(device, rng):
    """class_weight multiplies a class's exponent of gamma: under decay='count' that is the
    filter of its counts times the weight (scikit-learn's class_weight on the samples)."""
    X, y = _blobs(rng, n=200, n_classes=3)
    # 'fit': the range ignores sample weights ('quantile' would count them)
    params = dict(k=16, input_range="fit", random_state=6, device=device, decay="count", gamma=0.9)
    heavy = FlyNNClassifier(**params, class_weight={1: 2.0, "absent": 5.0}).fit(X, y)
    by_samples = FlyNNClassifier(**params).fit(X, y, sample_weight=np.where(y == 1, 2.0, 1.0))
    assert np.array_equal(to_host(heavy.filters_), to_host(by_samples.filters_))
    assert np.array_equal(to_host(heavy.counts_), to_host(FlyNNClassifier(**params).fit(X, y).counts_))
    # under relative decay too, a heavier class is less novel (and predicted at least as often)
    rel = dict(k=16, random_state=6, device=device, gamma=0.5)
    base = FlyNNClassifier(**rel).fit(X, y)
    tilted = FlyNNClassifier(**rel, class_weight={0: 3.0}).fit(X, y)
    nov, nov_tilted = to_host(base.novelty(X)), to_host(tilted.novelty(X))
    assert np.all(nov_tilted[:, 0] <= nov[:, 0]) and np.any(nov_tilted[:, 0] < nov[:, 0])
    assert np.array_equal(nov_tilted[:, 1:], nov[:, 1:])
    assert np.sum(to_host(tilted.predict(X)) == 0) >= np.sum(to_host(base.predict(X)) == 0)


def test_balanced_class_weight_reads_the_counts_and_merges_exactly(rng):
    from sklearn.utils.class_weight import compute_class_weight

    X, y = _blobs(rng, n=300, n_classes=3)
    y[:200] = 0  # class 0 is two thirds of the data
    params = dict(k=16, random_state=7, device="cpu", class_weight="balanced", **_fixed_range(X))
    clf = FlyNNClassifier(**params).fit(X, y)
    factors = _weights.class_factors("balanced", clf.classes_, clf.counts_)
    expected = compute_class_weight("balanced", classes=clf.classes_, y=y)
    np.testing.assert_allclose(factors, expected, rtol=1e-12)
    exponent = clf._decay_exponent(clf.counts_) * factors[:, None]
    assert np.array_equal(clf.filters_, np.power(clf.gamma, exponent))
    parts = np.array_split(rng.permutation(len(y)), 3)
    merged = merge_flynn([FlyNNClassifier(**params).fit(X[p], y[p]) for p in parts])
    assert np.array_equal(merged.filters_, clf.filters_)
    # equal classes: every factor is exactly 1
    even = np.repeat(np.arange(3), 40)
    assert np.array_equal(
        FlyNNClassifier(**params).fit(X[:120], even).filters_,
        FlyNNClassifier(**{**params, "class_weight": None}).fit(X[:120], even).filters_,
    )


def test_class_weight_is_checked_and_part_of_the_model(rng):
    X, y = _blobs(rng, n=60)
    for bad in ({0: -1.0}, {0: np.inf}, {0: "heavy"}, {0: True}):
        with pytest.raises(ValueError, match="class_weight"):
            FlyNNClassifier(class_weight=bad, device="cpu").fit(X, y)
    with pytest.raises(ValueError, match="class_weight"):
        FlyNNClassifier(class_weight="even", device="cpu").fit(X, y)
    clf = FlyNNClassifier(k=8, class_weight={0: 2.0}, device="cpu").fit(X, y)
    clf.class_weight[0] = 3.0  # edited in place after fit: the filters were made with 2.0
    with pytest.raises(ValueError, match="class_weight was"):
        clf.predict(X)


def test_weighted_model_exports_pickles_and_privatizes(rng, tmp_path):
    from sknn_gpu.fly._privacy import _seeded_noise_for_tests

    X, y = _blobs(rng, n=120)
    clf = FlyNNClassifier(
        k=8, random_state=3, device="cpu", input_range=(-20, 20), class_weight={1: 1.5}
    ).fit(X, y, sample_weight=rng.random(len(y)))
    path = tmp_path / "weighted.npz"
    clf.export_counts(path)
    back = FlyNNClassifier.from_counts(path)
    assert back.class_weight == {1: 1.5}
    assert back.counts_.dtype == np.float64 and np.array_equal(back.counts_, clf.counts_)
    assert np.array_equal(back.filters_, clf.filters_)
    again = pickle.loads(pickle.dumps(clf))
    assert again.counts_.dtype == np.float64 and np.array_equal(again.filters_, clf.filters_)
    with _seeded_noise_for_tests(0):
        private = clf.privatize(1.0, 8)
    with pytest.raises(ValueError, match="already a private release"):
        private.privatize(1.0, 8)


def test_sample_weight_on_dask_equals_in_memory(digits, dask_client):
    """Weighted counts per block, summed in a tree, are the in-memory ones bit for bit; rows of
    weight 0 set no class and no fitted range there either."""
    da = pytest.importorskip("dask.array")
    X_train, _, y_train, _ = digits
    rng = np.random.default_rng(11)
    w = rng.random(len(y_train)) * (rng.random(len(y_train)) > 0.2)
    w[y_train == 9] = 0.0
    params = dict(k=32, random_state=3, device="cpu")
    ref = FlyNNClassifier(**params).fit(X_train, y_train, sample_weight=w)
    dX = da.from_array(X_train, chunks=(300, -1))
    dy, dw = da.from_array(y_train, chunks=300), da.from_array(w, chunks=300)
    lazy = FlyNNClassifier(**params).fit(dX, dy, sample_weight=dw)
    assert lazy.classes_.tolist() == list(range(9))
    assert np.array_equal(lazy.input_low_, ref.input_low_)
    assert np.array_equal(lazy.input_high_, ref.input_high_)
    assert np.array_equal(lazy.counts_, ref.counts_)


@pytest.mark.cuda
def test_weighted_fit_on_gpu_equals_cpu_bit_for_bit(rng):
    """CuPy's atomic float64 adds give the CPU's weighted counts (every partial sum is exact),
    from CuPy, cupyx sparse and NumPy input, with rows of weight 0 left out on the device."""
    import cupy as cp
    import cupyx.scipy.sparse as csp

    X, y = _blobs(rng, n=400)
    X[X < 0] = 0.0  # sparse enough to be worth a CSR
    w = rng.random(len(y)) * 2.0
    w[::7] = 0.0
    params = dict(k=16, random_state=9, class_weight="balanced")
    cpu = FlyNNClassifier(**params, device="cpu").fit(X, y, sample_weight=w)
    for Xg in (cp.asarray(X), csp.csr_matrix(cp.asarray(X)), X):
        gpu = FlyNNClassifier(**params, device="cuda").fit(Xg, y, sample_weight=cp.asarray(w))
        assert gpu.counts_.dtype == np.float64
        assert np.array_equal(cp.asnumpy(gpu.counts_), cpu.counts_)
        assert np.array_equal(cp.asnumpy(gpu.filters_), cpu.filters_)
        assert np.array_equal(cp.asnumpy(gpu.predict(cp.asarray(X))), cpu.predict(X))
    whole = rng.integers(0, 3, size=len(y))
    gpu = FlyNNClassifier(**params, device="cuda").fit(cp.asarray(X), y, sample_weight=whole)
    cpu = FlyNNClassifier(**params, device="cpu").fit(X, y, sample_weight=whole)
    assert gpu.counts_.dtype == np.int64 and np.array_equal(cp.asnumpy(gpu.counts_), cpu.counts_)
