"""FlyNN's differentially private release, its accounting, the safe exchange format, and the
private federation: what a private copy carries, where its noise comes from, the budget's
limits, and an empirical check of the guarantee on neighbouring data sets (with negative
controls that show the check can fail)."""

import io
import json
import threading

import numpy as np
import pytest
from scipy.stats import beta
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from sknn_gpu._backend import to_host
from sknn_gpu.fly import FlyNNClassifier, merge_flynn
from sknn_gpu.fly._federated import _fit_party
from sknn_gpu.fly._privacy import _seeded_noise_for_tests, dp_release, private_counts

#: A range fixed independently of the data: public, so the model may be privatised.
PUBLIC = dict(input_range=(-10.0, 10.0))


def _blobs(rng, n=240, d=12, n_classes=4):
    centers = rng.normal(scale=3.0, size=(n_classes, d))
    y = rng.integers(0, n_classes, size=n)
    X = np.clip(centers[y] + rng.normal(size=(n, d)), -10, 10)
    return X, y


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)


def _fitted(rng, **kw):
    X, y = _blobs(rng, n=400)
    params = dict(k=8, random_state=0, device="cpu", **PUBLIC)
    params.update(kw)
    return FlyNNClassifier(**params).fit(X, y), X, y


# --------------------------------------------------------------------------- #
# the release                                                                   #
# --------------------------------------------------------------------------- #


def test_privatize_releases_n_entries_per_class(rng):
    clf, _, _ = _fitted(rng)
    T = 12
    with _seeded_noise_for_tests(5):
        priv = clf.privatize(epsilon=2.0, n_released=T)
    counts = priv.counts_
    assert counts.dtype == np.float64 and counts.shape == clf.counts_.shape
    assert priv.dp_released_.shape == (len(clf.classes_), T)
    mask = np.zeros(counts.shape, dtype=bool)
    np.put_along_axis(mask, priv.dp_released_, True, axis=1)
    assert np.array_equal(mask.sum(axis=1), np.full(len(clf.classes_), T))  # T distinct cells per class
    assert np.all(counts[~mask] == 0.0)
    assert np.all(counts >= 0.0)
    assert priv.dp_scale_ == pytest.approx(2 * T / 2.0)
    assert np.array_equal(priv.filters_, clf.gamma ** clf._decay_exponent(counts))
    # the original model is untouched; the test seed repeats a release, another seed does not
    assert clf.counts_.dtype == np.int64
    with _seeded_noise_for_tests(5):
        again = clf.privatize(epsilon=2.0, n_released=T)
    assert np.array_equal(again.counts_, counts) and np.array_equal(again.dp_released_, priv.dp_released_)
    with _seeded_noise_for_tests(6):
        other = clf.privatize(epsilon=2.0, n_released=T)
    assert not np.array_equal(other.counts_, counts)
    # privatize is private_counts on the model's counts, nothing else
    with _seeded_noise_for_tests(5):
        table, released, scale = private_counts(clf.counts_, 2.0, T, clf.n_components_)
    assert np.array_equal(table, counts) and np.array_equal(released, priv.dp_released_)


def test_privatize_large_epsilon_releases_top_counts(rng):
    counts = rng.permutation(np.arange(200) * 3).reshape(2, 100).astype(np.int64)
    released, noisy = dp_release(counts, epsilon=1e6, n_released=10, rng=np.random.default_rng(0))
    for row in range(2):
        top = np.argsort(-counts[row])[:10]
        assert set(released[row]) == set(top)
    assert np.allclose(noisy, np.take_along_axis(counts, released, axis=1), atol=0.01)


def test_dp_laplace_scale_and_selection_bias():
    g = np.random.default_rng(123)
    counts = g.integers(0, 50, size=(40, 500))
    eps, T = 1.0, 100
    released, noisy = dp_release(counts, eps, T, g)
    noise = noisy - np.take_along_axis(counts, released, axis=1)
    scale = 2 * T / eps
    # Laplace(0, b): mean 0, mean |noise| = b (4000 draws: std error of mean|.| is b/63)
    assert abs(noise.mean()) < 0.1 * scale
    assert abs(np.abs(noise).mean() / scale - 1.0) < 0.08
    # weights exp(z / 200) favour large counts a little, never exclusively
    sel = np.take_along_axis(counts, released, axis=1)
    assert sel.mean() > counts.mean() + 0.5
    assert sel.min() < np.percentile(counts, 25)
    # tiny epsilon: selection is close to uniform
    released, _ = dp_release(counts, 1e-6, T, g)
    assert abs(np.take_along_axis(counts, released, axis=1).mean() - counts.mean()) < 1.5


def test_privatize_bad_arguments(rng):
    clf, _, _ = _fitted(rng)
    with pytest.raises(ValueError, match="epsilon"):
        clf.privatize(0.0, 5)
    with pytest.raises(ValueError, match="n_released"):
        clf.privatize(1.0, 0)
    with pytest.raises(ValueError, match="n_released"):
        clf.privatize(1.0, clf.n_components_ + 1)
    for bad in ("1.0", True, None):
        with pytest.raises(TypeError, match="epsilon"):
            clf.privatize(bad, 5)


def test_privacy_costs_accuracy_monotonically_on_average(digits):
    X_train, X_test, y_train, y_test = digits
    clf = FlyNNClassifier(gamma=0.5, k=512, input_range=(0, 16), random_state=0, device="cpu").fit(
        X_train, y_train
    )
    T = clf.n_components_ // 4
    acc = {
        eps: np.mean([clf.privatize(eps, T).score(X_test, y_test) for _ in range(3)]) for eps in (0.01, 1e4)
    }
    assert acc[1e4] > acc[0.01] + 0.2  # almost no noise vs almost pure noise


# --------------------------------------------------------------------------- #
# what the private copy carries                                                 #
# --------------------------------------------------------------------------- #


def test_privatize_refuses_winners_chosen_from_the_data(digits, rng):
    """k='auto' on a narrow input picks k_ by the number of training rows: the release would
    reveal which side of the line the data fell on, so privatize asks for an integer k."""
    X_train, X_test, y_train, y_test = digits
    params = dict(n_components=2048, input_range=(0, 16), random_state=0, device="cpu")
    auto = FlyNNClassifier(**params).fit(X_train, y_train)
    with pytest.raises(ValueError, match=r"k='auto': k_=512 was chosen by its number of training rows"):
        auto.privatize(4.0, 8)
    assert FlyNNClassifier(**params, k=512).fit(X_train, y_train).privatize(4.0, 8).k_ == 512
    # a wide input's 'auto' (256 winners) depends on no data
    Xw = rng.random((60, 210))  # 1,050 encoded inputs
    yw = np.arange(60) % 2
    wide = FlyNNClassifier(n_components=2048, input_range=(0, 1), random_state=0, device="cpu").fit(Xw, yw)
    assert wide.k_ == 256 and wide.privatize(4.0, 8).k_ == 256


def test_privatize_refuses_a_range_fitted_from_the_data(rng):
    X, y = _blobs(rng)
    fitted = FlyNNClassifier(k=8, random_state=0, device="cpu").fit(X, y)  # input_range='fit'
    assert np.array_equal(fitted.input_low_, X.min(axis=0))  # the exact data minima...
    with pytest.raises(ValueError, match=r"public input range.*input_range='quantile'.*sensitivity"):
        fitted.privatize(1.0, 5)  # ...would have been released beside the noisy counts
    streamed = FlyNNClassifier(k=8, random_state=0, device="cpu").partial_fit(X, y, classes=np.unique(y))
    with pytest.raises(ValueError, match="public input range"):
        streamed.privatize(1.0, 5)
    for encoding in ("population", "complement"):
        with pytest.raises(ValueError, match="public input range"):
            FlyNNClassifier(encoding=encoding, k=8, random_state=0, device="cpu").fit(X, y).privatize(1.0, 5)
    # a range given at fit, or no range-dependent encoding, is public
    assert FlyNNClassifier(k=8, random_state=0, device="cpu", **PUBLIC).fit(X, y).privatize(1.0, 5)
    raw = FlyNNClassifier(encoding=None, k=8, random_state=0, device="cpu").fit(X, y)
    assert not hasattr(raw.privatize(1.0, 5), "input_low_")


def test_private_copy_carries_only_public_state_and_released_counts(rng):
    clf, X, _ = _fitted(rng)
    clf.predict(X[:5])  # fill the device caches
    priv = clf.privatize(3.0, 10)
    fitted = {name for name in vars(priv) if name.endswith("_") and not name.startswith("__")}
    allowed = {
        "device_", "classes_", "n_features_in_", "hasher_", "n_components_", "k_", "input_low_",
        "input_high_", "_fitted_params_", "counts_", "filters_", "n_receptors_",
        "proba_scale_", "calibration_loss_", "held_out_hits_",
        "dp_released_", "dp_epsilon_", "dp_scale_", "dp_accounting_",
    }  # fmt: skip
    assert fitted <= allowed, fitted - allowed
    # the calibration was computed from the exact data: not released
    assert priv.calibration_loss_ is None and priv.held_out_hits_ is None
    assert "_device_cache" not in vars(priv) and "_device_cache" not in vars(priv.hasher_)
    # the range is the one given, the projection the shared one, the labels the same
    assert np.array_equal(priv.input_low_, np.full(X.shape[1], -10.0))
    assert np.array_equal(priv.input_high_, np.full(X.shape[1], 10.0))
    assert (priv.hasher_.components_ != clf.hasher_.components_).nnz == 0
    assert np.array_equal(priv.classes_, clf.classes_)
    # filters and probabilities come from the released counts only
    assert np.array_equal(priv.filters_, clf.gamma ** clf._decay_exponent(priv.counts_))
    assert np.all(np.isfinite(priv.predict_proba(X)))
    # decay='relative': the class means are those of the noisy counts
    z = priv.counts_
    rel = z * z.shape[1] / np.where(z.sum(axis=1, keepdims=True) > 0, z.sum(axis=1, keepdims=True), 1)
    assert np.array_equal(priv.filters_, np.power(clf.gamma, rel)) and (priv.filters_ < 1).any()


def test_privatize_noise_comes_from_os_entropy_not_random_state(rng):
    clf, X, y = _fitted(rng)
    twin = FlyNNClassifier(**clf.get_params()).fit(X, y)  # same data, same random_state
    np.random.seed(0)  # noqa: NPY002
    a = clf.privatize(1.0, 20)
    np.random.seed(0)  # noqa: NPY002  (neither the global NumPy state...
    b = twin.privatize(1.0, 20)  # ...nor random_state draws the noise)
    assert not np.array_equal(a.counts_, b.counts_)
    assert a.dp_accounting_["noise"].startswith("operating-system entropy")
    with pytest.raises(TypeError, match="random_state.*regenerate the noise"):
        clf.privatize(1.0, 20, random_state=0)
    with pytest.raises(TypeError, match="random_state"):
        clf.privatize(1.0, 20, np.random.RandomState(0))


def test_seeded_test_noise_is_marked_and_stays_in_its_thread(rng):
    clf, _, _ = _fitted(rng)
    seen = {}
    with _seeded_noise_for_tests(1):
        seeded = clf.privatize(1.0, 5)
        other = threading.Thread(target=lambda: seen.update(acc=clf.privatize(1.0, 5).dp_accounting_))
        other.start()
        other.join()
    assert seeded.dp_accounting_["noise"].startswith("SEEDED")
    assert seen["acc"]["noise"].startswith("operating-system")  # another thread is not seeded
    assert clf.privatize(1.0, 5).dp_accounting_["noise"].startswith("operating-system")


@pytest.mark.parametrize("epsilon", [1e-320, 5e-324, 1e-300, 1e300, np.finfo(np.float64).max])
def test_privatize_refuses_epsilon_that_cannot_be_released(rng, epsilon):
    clf, _, _ = _fitted(rng)
    with pytest.raises(ValueError, match=r"Laplace scale.*epsilon must lie in"):
        clf.privatize(epsilon, 4)


@pytest.mark.parametrize("where", ["low", "high"])
def test_privatize_at_the_edges_of_the_budget_gives_finite_outputs(rng, where):
    clf, X, _ = _fitted(rng, decay="relative")
    T = 4
    eps = 2.0 * T / 2.0**52 if where == "low" else 2.0 * T / 2.0**-52
    priv = clf.privatize(eps, T)
    assert np.all(np.isfinite(priv.counts_)) and np.all(np.isfinite(priv.filters_))
    proba = priv.predict_proba(X)
    assert np.all(np.isfinite(proba)) and np.allclose(proba.sum(axis=1), 1.0)
    if where == "high":  # no noise to speak of: the released counts are the exact top counts
        rows = np.arange(len(clf.classes_))[:, None]
        assert np.array_equal(priv.counts_[rows, priv.dp_released_], clf.counts_[rows, priv.dp_released_])


def test_accounting_is_recorded_and_json_serialisable(rng):
    clf, _, _ = _fitted(rng)
    priv = clf.privatize(2.0, 16)
    acc = json.loads(json.dumps(priv.dp_accounting_))
    assert acc["epsilon"] == priv.dp_epsilon_ == 2.0 and acc["delta"] == 0.0
    assert acc["epsilon_replace_one"] == 4.0 and "add or remove one" in acc["neighbouring"]
    assert acc["selection_epsilon"] + acc["values_epsilon"] == pytest.approx(2.0)
    assert acc["step_epsilon"] == pytest.approx(2.0 / 32) and acc["laplace_scale"] == priv.dp_scale_ == 16.0
    assert "exponential mechanism" in acc["mechanism"] and "Laplace" in acc["mechanism"]
    assert acc["n_released"] == 16 and acc["released"] == ["counts_", "filters_", "dp_released_"]
    assert any("classes_" in p for p in acc["public"])
    # the held-out calibration was computed from the exact data: dropped (the default scale)
    assert acc["dropped"] == ["calibration_loss_", "held_out_hits_", "proba_scale_"]


def test_a_release_is_not_privatised_again(rng):
    clf, _, _ = _fitted(rng)
    priv = clf.privatize(1.0, 5)
    with pytest.raises(ValueError, match="already a private release"):
        priv.privatize(1.0, 5)
    with pytest.raises(ValueError, match="already a private release"):
        merge_flynn([priv, clf.privatize(1.0, 5)]).privatize(1.0, 5)


def test_partial_fit_of_a_release_is_refused_and_the_release_kept(rng):
    # exact counts of new samples added to noisy ones would leave the private copy unprivate
    clf, X, y = _fitted(rng)
    priv = clf.privatize(1.0, 5)
    counts = to_host(priv.counts_).copy()
    with pytest.raises(ValueError, match="differentially private release"):
        priv.partial_fit(X[:10], y[:10])
    np.testing.assert_array_equal(to_host(priv.counts_), counts)
    refit = priv.fit(X, y)  # a fresh fit is an exact model again, with no private accounting
    assert not hasattr(refit, "dp_accounting_")
    np.testing.assert_array_equal(to_host(refit.counts_), to_host(clf.counts_))


def test_merging_private_releases_records_the_accounting(rng):
    clf, X, y = _fitted(rng)
    halves = [
        FlyNNClassifier(**clf.get_params()).fit(X[p], y[p]) for p in np.array_split(np.arange(len(y)), 2)
    ]
    merged = merge_flynn([halves[0].privatize(1.0, 5), halves[1].privatize(2.0, 7)])
    assert merged.dp_epsilon_ == 2.0  # every sample is in one release: the largest epsilon
    assert merged.dp_accounting_["party_epsilons"] == [1.0, 2.0]
    assert merged.dp_accounting_["parties"] == 2
    assert not hasattr(merge_flynn([halves[0].privatize(1.0, 5), halves[1]]), "dp_accounting_")


# --------------------------------------------------------------------------- #
# the guarantee, measured                                                       #
# --------------------------------------------------------------------------- #

#: Releases drawn per data set in the empirical check, and its overall false-alarm level.
N_DRAWS, ALPHA = 300_000, 1e-6


def _neighbouring_rows(k):
    """The changed class's count rows of a 3-cell FlyNN on D and on D' = D plus one sample.

    Checks the premise of the accounting on a real fit: the extra sample changes one
    class's counts only, by +1 in exactly ``k`` cells.
    """
    g = np.random.default_rng(7)
    X, y = g.normal(size=(3, 4)), np.array([0, 1, 1])
    params = dict(n_components=3, k=k, encoding=None, random_state=0, device="cpu")
    d = FlyNNClassifier(**params).fit(X, y).counts_
    d2 = FlyNNClassifier(**params).fit(np.vstack([X, X[:1]]), np.r_[y, 0]).counts_
    diff = d2 - d
    assert np.array_equal(diff[1], np.zeros(3)) and set(np.unique(diff[0])) <= {0, 1} and diff[0].sum() == k
    return d[0], d2[0]


def _releases(row, epsilon, T, seed, noise_factor=1.0):
    """``N_DRAWS`` independent releases of one class's counts ``row``: (cells, values).

    ``noise_factor=1`` runs the package's own path (:func:`private_counts`, seeded for the
    test); another factor scales the Laplace noise of :func:`dp_release` (a broken
    mechanism, for the negative control), clipped at 0 as the package clips.
    """
    counts = np.repeat(np.asarray(row, dtype=np.int64)[None, :], N_DRAWS, axis=0)
    if noise_factor == 1.0:
        with _seeded_noise_for_tests(seed):
            table, released, _ = private_counts(counts, epsilon, T, counts.shape[1])
        return released, np.take_along_axis(table, released, axis=1)
    released, noisy = dp_release(counts, epsilon, T, np.random.default_rng(seed))
    exact = np.take_along_axis(counts, released, axis=1)
    return released, np.maximum(exact + (noisy - exact) * noise_factor, 0.0)


def _event_counts(released, values, m, thresholds):
    """How many releases fall in each event: for every ordered choice of cells, that
    choice, and that choice with every value (or one of them) at or above / below each
    threshold. Tail events are where a shift of the counts shows most."""
    T = released.shape[1]
    code = np.zeros(len(released), dtype=np.int64)
    for t in range(T):
        code = code * m + released[:, t]
    out = []
    for c in range(m**T):
        v = values[code == c]
        out.append([len(v)])
        columns = [v.min(axis=1), v.max(axis=1)] + ([v[:, t] for t in range(T)] if T > 1 else [])
        for col in columns:
            s = np.sort(col)
            out.append(len(s) - np.searchsorted(s, thresholds))  # all/one value >= threshold
            out.append(np.searchsorted(s, thresholds))  # ... < threshold
    return np.concatenate(out)


def _violations(c1, c2, epsilon):
    """Events where P(E|D) > e^eps P(E|D') (or the reverse) beyond sampling error: the
    Clopper-Pearson lower bound of one side above e^eps times the upper bound of the
    other, each at level ALPHA / (2 x events) (Bonferroni over events and directions)."""
    n, a = N_DRAWS, ALPHA / (2 * len(c1))
    lo = lambda c: np.where(c > 0, beta.ppf(a, c, n - c + 1), 0.0)  # noqa: E731
    hi = lambda c: np.where(c < n, beta.ppf(1 - a, c + 1, n - c), 1.0)  # noqa: E731
    bound = np.exp(epsilon)
    return int(((lo(c1) > bound * hi(c2)) | (lo(c2) > bound * hi(c1))).sum())


@pytest.mark.parametrize("T,k", [(1, 1), (2, 2)])
def test_release_is_epsilon_dp_on_neighbouring_data_sets(T, k):
    eps = 1.0
    row, row2 = _neighbouring_rows(k)
    thresholds = np.arange(0.5, 10.0, 0.5)

    def counts_of(r, true_eps=eps, factor=1.0, seed=0):
        return _event_counts(*_releases(r, true_eps, T, seed, factor), len(r), thresholds)

    c1, c2 = counts_of(row, seed=1), counts_of(row2, seed=2)
    assert c1.size > 50 and (np.minimum(c1, c2) > 1000).sum() > 20  # the events carry mass
    assert _violations(c1, c2, eps) == 0
    # negative controls: the same check catches a mechanism with half the noise it needs,
    # and a release made with 2 epsilon but reported as epsilon
    half = _violations(counts_of(row, factor=0.5, seed=3), counts_of(row2, factor=0.5, seed=4), eps)
    misreported = _violations(counts_of(row, 2 * eps, seed=5), counts_of(row2, 2 * eps, seed=6), eps)
    assert half > 0 and misreported > 0


# --------------------------------------------------------------------------- #
# the exchange format                                                           #
# --------------------------------------------------------------------------- #


def _roundtrip(est, **kw):
    buf = io.BytesIO()
    est.export_counts(buf)
    buf.seek(0)
    return FlyNNClassifier.from_counts(buf, **kw)


@pytest.mark.parametrize("labels", ["numeric", "string"])
def test_export_counts_round_trips_the_model(rng, labels):
    clf, X, y = _fitted(rng)
    if labels == "string":
        clf = FlyNNClassifier(**clf.get_params()).fit(X, np.array(["a", "b", "c", "d"])[y])
    back = _roundtrip(clf)
    assert np.array_equal(back.counts_, clf.counts_) and back.counts_.dtype == np.int64
    assert np.array_equal(back.classes_, clf.classes_)
    assert np.array_equal(back.predict(X), clf.predict(X))
    assert np.array_equal(back.predict_proba(X), clf.predict_proba(X))
    assert np.array_equal(back.input_low_, clf.input_low_)
    assert set(back.get_params()) == set(clf.get_params())
    private = clf.privatize(2.0, 8)
    again = _roundtrip(private)
    assert np.array_equal(again.counts_, private.counts_) and np.array_equal(
        again.dp_released_, private.dp_released_
    )
    assert again.dp_accounting_ == private.dp_accounting_ and again.dp_epsilon_ == 2.0


def test_export_counts_to_a_path_keeps_the_name_and_fitted_range_and_feature_names(rng, tmp_path):
    X, y = _blobs(rng)
    clf = FlyNNClassifier(k=8, input_range="fit", random_state=3, device="cpu").fit(X, y)
    clf.feature_names_in_ = np.array([f"f{j}" for j in range(X.shape[1])], dtype=object)  # as a frame gives
    path = tmp_path / "party0.counts"
    clf.export_counts(path)
    assert path.exists()  # no '.npz' appended
    back = FlyNNClassifier.from_counts(str(path))
    assert np.array_equal(back.input_low_, clf.input_low_) and back.input_range == "fit"
    assert back.feature_names_in_.dtype == object and list(back.feature_names_in_) == list(
        clf.feature_names_in_
    )
    del clf.feature_names_in_, back.feature_names_in_
    assert np.array_equal(back.predict(X), clf.predict(X))


def test_merge_flynn_merges_what_from_counts_returns(rng):
    X, y = _blobs(rng, n=300)
    params = dict(k=8, random_state=2, device="cpu", **PUBLIC)
    parts = np.array_split(np.arange(len(y)), 3)
    files = []
    for p in parts:
        buf = io.BytesIO()
        FlyNNClassifier(**params).fit(X[p], y[p]).export_counts(buf)
        files.append(buf.getvalue())  # bytes: all that travels
    merged = merge_flynn([FlyNNClassifier.from_counts(io.BytesIO(b)) for b in files])
    assert np.array_equal(merged.counts_, FlyNNClassifier(**params).fit(X, y).counts_)


def _tampered(clf, edit):
    """The export of ``clf`` with its arrays changed by ``edit(arrays, meta)``."""
    buf = io.BytesIO()
    clf.export_counts(buf)
    buf.seek(0)
    with np.load(buf, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(str(arrays["metadata"][()]))
    edit(arrays, meta)
    arrays["metadata"] = np.asarray(json.dumps(meta))
    out = io.BytesIO()
    np.savez(out, **arrays)
    out.seek(0)
    return out


def _set(key, value):
    def edit(arrays, meta):
        meta[key] = value

    return edit


def _param(name, value):
    def edit(arrays, meta):
        if value is KeyError:
            del meta["params"][name]
        else:
            meta["params"][name] = value

    return edit


def _array_edit(name, value):
    def edit(arrays, meta):
        arrays[name] = value(arrays[name]) if callable(value) else value

    return edit


@pytest.mark.parametrize(
    "edit,match",
    [
        (_set("format", "something.else"), "not a FlyNN counts file"),
        (_set("format_version", 99), "format_version 99"),
        (_set("n_components", 0), "n_components must be an integer"),
        (_set("projection_sha256", "0" * 64), "different projection"),
        (_set("extra", 1), "unknown"),
        (_param("not_a_parameter", 1), r"unknown \['not_a_parameter'\]"),
        (_param("gamma", KeyError), r"missing \['gamma'\]"),
        (_param("gamma", 7.0), "gamma"),
        (_param("random_state", None), "random_state must be an integer"),
        (_array_edit("counts", lambda c: c[:, :-1]), "counts must be"),
        (_array_edit("counts", lambda c: -c), "counts must be >= 0"),
        (_array_edit("counts", lambda c: c.astype(np.float64) + 0.1), "counts must be"),  # off the grid
        (_array_edit("classes", lambda c: c[::-1]), "sorted and distinct"),
        (_array_edit("input_low", lambda c: c[:-1]), "input_low must be"),
        (_array_edit("dp_released", np.zeros((4, 2), dtype=np.int64)), "dp_released without"),
    ],
)
def test_from_counts_validates_what_it_reads(rng, edit, match):
    clf, _, _ = _fitted(rng)
    with pytest.raises(ValueError, match=match):
        FlyNNClassifier.from_counts(_tampered(clf, edit))


def test_from_counts_never_unpickles(rng, tmp_path):
    clf, _, _ = _fitted(rng)
    buf = io.BytesIO()
    clf.export_counts(buf)
    buf.seek(0)
    with np.load(buf, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["classes"] = np.array([object(), 1, 2, 3], dtype=object)  # would need pickle to load
    evil = io.BytesIO()
    np.savez(evil, **arrays)
    evil.seek(0)
    with pytest.raises(ValueError, match="without pickle"):
        FlyNNClassifier.from_counts(evil)
    pickled = tmp_path / "model.pkl"
    pickled.write_bytes(__import__("pickle").dumps(clf))
    with pytest.raises(ValueError, match="from_counts: not an .npz archive"):
        FlyNNClassifier.from_counts(pickled)


def test_from_counts_checks_the_size_before_loading(rng):
    """A compressed archive can claim far more than it holds: the headers are read first."""
    import zipfile

    from sknn_gpu._backend import InsufficientMemoryError

    clf, _, _ = _fitted(rng)
    buf = io.BytesIO()
    clf.export_counts(buf)
    buf.seek(0)
    bomb = io.BytesIO()
    with zipfile.ZipFile(buf) as src, zipfile.ZipFile(bomb, "w") as dst:
        for item in src.namelist():
            if item == "counts.npy":  # a header claiming 80 TB of counts, and no data
                head = io.BytesIO()
                header = {"descr": "<i8", "fortran_order": False, "shape": (10**7, 10**6)}
                np.lib.format.write_array_header_1_0(head, header)
                dst.writestr(item, head.getvalue())
            else:
                dst.writestr(item, src.read(item))
    bomb.seek(0)
    with pytest.raises(InsufficientMemoryError, match="from_counts"):
        FlyNNClassifier.from_counts(bomb)


def test_export_counts_refuses_what_it_cannot_write_safely(rng):
    X, y = _blobs(rng)
    unseeded = FlyNNClassifier(k=8, device="cpu", **PUBLIC).fit(X, y)
    with pytest.raises(ValueError, match="integer random_state"):
        unseeded.export_counts(io.BytesIO())
    mixed = FlyNNClassifier(k=8, random_state=0, device="cpu", **PUBLIC).fit(X, y)
    mixed.classes_ = np.array([(1, 2), "b", "c", "d"], dtype=object)
    with pytest.raises(TypeError, match="Python objects"):
        mixed.export_counts(io.BytesIO())


# --------------------------------------------------------------------------- #
# the private federation                                                        #
# --------------------------------------------------------------------------- #


def test_private_party_sends_only_its_release(rng):
    X, y = _blobs(rng)
    params = FlyNNClassifier(k=8, random_state=0, device="cpu", **PUBLIC).get_params()
    exact = _fit_party(X, y, params, 0)
    private = _fit_party(X, y, params, 0, {"epsilon": 1.0, "n_released": 6})
    assert exact["n_samples"] == len(y) and exact["dp_accounting"] is None
    assert private["n_samples"] is None  # the shard's size stays at the party
    assert private["counts"].dtype == np.float64 and (private["counts"] > 0).sum(axis=1).max() <= 6
    assert private["dp_accounting"]["epsilon"] == 1.0
    assert set(private) <= {
        "classes", "counts", "n_features", "n_samples", "dp_accounting", "feature_names", "calibration",
    }  # fmt: skip
    assert private["calibration"] == (None, None)  # held-out losses of the exact data stay at the party


def test_fit_federated_with_epsilon_refuses_a_data_fitted_range_before_any_work():
    from sknn_gpu.fly import fit_federated

    client = object()  # never used: the refusals come first
    with pytest.raises(ValueError, match=r"public input_range.*exact minima and maxima"):
        fit_federated(client, [], epsilon=1.0, n_released=5, random_state=0, k=64)
    with pytest.raises(ValueError, match=r"needs an integer k: k='auto' chooses the winners"):
        fit_federated(client, [], epsilon=1.0, n_released=5, random_state=0, **PUBLIC, k="auto")
    with pytest.raises(ValueError, match="needs n_released"):
        fit_federated(client, [], epsilon=1.0, random_state=0, **PUBLIC)
    with pytest.raises(ValueError, match="only used with epsilon"):
        fit_federated(client, [], n_released=5, random_state=0, **PUBLIC)
    with pytest.raises(ValueError, match="Laplace scale"):
        fit_federated(client, [], epsilon=1e-320, n_released=5, random_state=0, **PUBLIC)


def test_fit_federated_with_epsilon_privatizes_on_the_workers(digits, dask_client):
    from sknn_gpu.fly import fit_federated

    X_train, X_test, y_train, y_test = digits
    # 8,192 cells: 64 released cells per class keep more of a smaller table
    params = dict(n_components=8192, k=512, gamma=0.5, input_range=(0, 16), random_state=3, device="cpu")
    parts = np.array_split(np.arange(len(y_train)), 3)
    shards = [(X_train[p], y_train[p]) for p in parts]
    private = fit_federated(dask_client, shards, epsilon=16.0, n_released=64, **params)
    pooled = FlyNNClassifier(**params).fit(X_train, y_train)
    assert private.counts_.dtype == np.float64 and not np.array_equal(private.counts_, pooled.counts_)
    assert private.dp_epsilon_ == 16.0 and private.dp_accounting_["parties"] == 3
    # each party released at most 64 cells per class
    assert ((private.counts_ > 0).sum(axis=1) <= 3 * 64).all()
    assert private.score(X_test, y_test) > 0.6  # still a classifier (about 0.8)
    with pytest.raises(ValueError, match="already a private release"):
        private.privatize(1.0, 5)


# --------------------------------------------------------------------------- #
# GPU                                                                           #
# --------------------------------------------------------------------------- #


@pytest.mark.cuda
def test_gpu_private_copy_and_exchange_match_cpu(rng):
    import cupy as cp

    X, y = _blobs(rng, n=300)
    params = dict(k=8, random_state=2, **PUBLIC)
    gpu = FlyNNClassifier(device="cuda", **params).fit(cp.asarray(X), y)
    cpu = FlyNNClassifier(device="cpu", **params).fit(X, y)
    with _seeded_noise_for_tests(0):
        priv_gpu = gpu.privatize(1.0, 20)
    with _seeded_noise_for_tests(0):
        priv_cpu = cpu.privatize(1.0, 20)
    assert isinstance(priv_gpu.counts_, cp.ndarray)
    assert np.array_equal(cp.asnumpy(priv_gpu.counts_), priv_cpu.counts_)
    assert np.array_equal(to_host(priv_gpu.predict(X)), priv_cpu.predict(X))
    back = _roundtrip(priv_gpu, device="cpu")
    assert np.array_equal(back.counts_, priv_cpu.counts_)
    on_gpu = _roundtrip(cpu, device="cuda")
    assert on_gpu.device_ == "cuda"
    assert np.array_equal(to_host(on_gpu.predict(cp.asarray(X))), cpu.predict(X))
