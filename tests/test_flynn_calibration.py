"""FlyNN's calibrated ``predict_proba`` (held-out loss tables), its capacity and receptor
defaults, and the warning for codes that carry no class information."""

import io
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.metrics import log_loss
from sklearn.model_selection import train_test_split

from sknn_gpu._backend import to_host
from sknn_gpu.fly import FlyNNClassifier, merge_flynn
from sknn_gpu.fly._calibration import (
    CALIBRATION_ROWS,
    DEFAULT_SCALE,
    SCALE_GRID,
    calibration_rows,
    class_information,
    scale_of,
)
from sknn_gpu.fly._flynn import AUTO_CELLS, AUTO_CELLS_WIDE, auto_cells, auto_winners


@pytest.fixture(scope="module")
def digits_split():
    X, y = load_digits(return_X_y=True)
    return train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)


def _small(**kw):
    return FlyNNClassifier(n_components=2048, k=64, random_state=0, **kw)


def test_calibration_rows_spread_evenly():
    assert np.array_equal(calibration_rows(10), np.arange(10))
    rows = calibration_rows(3 * CALIBRATION_ROWS + 5)
    assert len(rows) <= CALIBRATION_ROWS and rows[0] == 0 and np.all(np.diff(rows) == 4)
    assert scale_of(None) == DEFAULT_SCALE
    table = np.full(len(SCALE_GRID), 3.0)
    table[7] = table[9] = 1.0  # ties go to the smaller scale
    assert scale_of(table) == SCALE_GRID[7]


def test_predict_proba_is_calibrated_on_held_out_counts(device, digits_split):
    X_train, X_test, y_train, y_test = digits_split
    clf = FlyNNClassifier(random_state=0, device=device).fit(X_train, y_train)
    assert clf.proba_scale_ in SCALE_GRID and clf.proba_scale_ > 1
    assert clf.calibration_loss_.shape == SCALE_GRID.shape
    assert clf.proba_scale_ == SCALE_GRID[np.argmin(clf.calibration_loss_)]
    proba = to_host(clf.predict_proba(X_test))
    calibrated = log_loss(y_test, proba, labels=clf.classes_)
    # the old softmax(-novelty / k) was nearly uniform: log-loss near log(10) = 2.30
    nov = to_host(clf.novelty(X_test))
    z = -nov / clf.k_
    flat = np.exp(z - z.max(axis=1, keepdims=True))
    flat /= flat.sum(axis=1, keepdims=True)
    assert calibrated < 0.3 < 2.0 < log_loss(y_test, flat, labels=clf.classes_)
    # the held-out hits are the cross-fitted predictions of the training rows
    correct, total = clf.held_out_hits_
    assert total == len(y_train) and 0.9 < correct / total <= 1.0
    # the chosen scale's table entry is the summed held-out loss of the training rows
    assert np.min(clf.calibration_loss_) / total < 0.3


def test_calibration_table_matches_a_manual_cross_fit(digits_split):
    from sknn_gpu.fly import _flynn_cpu

    X_train, _, y_train, _ = digits_split
    clf = _small(device="cpu").fit(X_train, y_train)
    Xv = clf._validate_X(X_train, reset=False)
    W = np.concatenate([w for _, w in clf._batch_winners(Xv)])
    y_idx = np.searchsorted(clf.classes_, y_train)
    fold = np.arange(len(y_train)) % 5
    expected = np.zeros(len(SCALE_GRID))
    for f in range(5):
        sel = fold == f
        counts = clf.counts_ - _flynn_cpu.count(W[sel], y_idx[sel], len(clf.classes_), clf.n_components_)
        nov = _flynn_cpu.novelty(W[sel], np.ascontiguousarray(clf._filters_of(counts).T))
        for i, s in enumerate(SCALE_GRID):
            z = -(nov - nov.min(axis=1, keepdims=True)) * (s / clf.k_)
            lse = np.log(np.exp(z).sum(axis=1))
            expected[i] += np.sum(lse - z[np.arange(sel.sum()), y_idx[sel]])
    np.testing.assert_allclose(clf.calibration_loss_, expected, rtol=1e-12)


#: How close a GPU calibration table is to the CPU's: the held-out filters are raised by CUDA's
#: pow and the softmax uses CUDA's exp and log (each within an ulp or two of the host's), and
#: the rows are summed in another order; on these tables the gap is about 1e-15.
TABLE_RTOL = 1e-9


def _same_calibration(clf, ref):
    np.testing.assert_allclose(clf.calibration_loss_, ref.calibration_loss_, rtol=TABLE_RTOL)
    assert clf.proba_scale_ == ref.proba_scale_ and clf.held_out_hits_ == ref.held_out_hits_


def test_calibration_is_the_same_on_both_devices(device, digits_split):
    X_train, X_test, y_train, _ = digits_split
    ref = _small(device="cpu").fit(X_train, y_train)
    clf = _small(device=device).fit(X_train, y_train)
    _same_calibration(clf, ref)
    np.testing.assert_allclose(to_host(clf.predict_proba(X_test)), ref.predict_proba(X_test), rtol=1e-12)
    if device == "cpu":  # the reference, bit for bit from the same steps
        assert np.array_equal(clf.calibration_loss_, ref.calibration_loss_)


@pytest.mark.parametrize(
    "params",
    [
        dict(decay="count", gamma=0.5),
        dict(class_weight="balanced"),
        dict(class_weight={0: 3.0, 4: 0.5}, input_range=(0, 16)),
    ],
    ids=["count", "balanced", "dict"],
)
def test_calibration_filters_follow_decay_and_class_weight_on_both_devices(device, digits_split, params):
    X_train, _, y_train, _ = digits_split
    ref = _small(device="cpu", **params).fit(X_train, y_train)
    clf = _small(device=device, **params).fit(X_train, y_train)
    _same_calibration(clf, ref)
    # the held-out filters are the decay's and the class weights' (a table without them differs)
    plain = _small(device="cpu", input_range=params.get("input_range", "quantile")).fit(X_train, y_train)
    assert not np.allclose(ref.calibration_loss_, plain.calibration_loss_, rtol=1e-6)


def test_weighted_and_streamed_calibration_on_both_devices(device, digits_split):
    X_train, _, y_train, _ = digits_split
    w = np.where(np.arange(len(y_train)) % 9 == 0, 0.0, 0.25 + np.arange(len(y_train)) % 4 * 0.625)
    ref = _small(device="cpu").fit(X_train, y_train, sample_weight=w)
    clf = _small(device=device).fit(X_train, y_train, sample_weight=w)
    _same_calibration(clf, ref)
    assert ref.held_out_hits_[1] == pytest.approx(w[w > 0].sum(), rel=1e-15)
    # a stream: each later batch scored by the model before it (partial_fit's held-out table)
    params = dict(input_range=(0, 16))
    ref, clf = _small(device="cpu", **params), _small(device=device, **params)
    for part in np.array_split(np.arange(len(y_train)), 3):
        ref.partial_fit(X_train[part], y_train[part], classes=np.arange(10), sample_weight=w[part])
        clf.partial_fit(X_train[part], y_train[part], classes=np.arange(10), sample_weight=w[part])
        _same_calibration(clf, ref)


def test_fit_calibrates_on_the_winners_it_counted(device, rng):
    """fit keeps the calibration rows' winners from its counting pass (every 2nd row of
    20,000, over batches of 777 rows): the table of hashing those rows again."""
    from sknn_gpu.fly._calibration import loss_table

    X = rng.normal(size=(20000, 6)) + np.repeat(rng.normal(size=(4, 6)) * 0.7, 5000, axis=0)
    y = np.repeat(np.arange(4), 5000)
    clf = FlyNNClassifier(n_components=1024, k=16, batch_size=777, random_state=0, device=device).fit(X, y)
    Xv = clf._validate_X(X, reset=False)
    table, hits = loss_table(clf, Xv, y)
    assert np.array_equal(clf.calibration_loss_, table) and clf.held_out_hits_ == hits
    assert hits[1] == len(calibration_rows(20000)) == 10000  # every 2nd row
    ref = FlyNNClassifier(n_components=1024, k=16, random_state=0, device="cpu").fit(X, y)
    _same_calibration(clf, ref)


def test_counting_keeps_the_winners_of_any_rows(device, rng):
    from sknn_gpu.fly._calibration import calibration_winners

    X, y = rng.normal(size=(50, 5)), np.arange(50) % 3
    clf = FlyNNClassifier(n_components=256, k=8, batch_size=16, random_state=0, device=device).fit(X, y)
    Xv = clf._validate_X(X, reset=False)
    for keep in ([0, 3, 4, 10, 31, 32, 49], [5, 21, 37], [17], [], list(range(0, 50, 7))):
        keep = np.asarray(keep, dtype=np.int64)
        counts, winners = clf._count(Xv, y, keep=keep)
        assert np.array_equal(to_host(counts), to_host(clf.counts_))
        expected = to_host(calibration_winners(clf, Xv[keep])) if keep.size else np.empty((0, 8))
        assert winners.shape == (keep.size, 8) and np.array_equal(to_host(winners), expected)


def test_calibration_of_fewer_rows_than_folds(device):
    X = np.array([[0.0, 1.0], [1.0, 0.0], [0.9, 0.1], [0.1, 0.8]])
    y = np.array([0, 1, 1, 0])
    ref = FlyNNClassifier(n_components=64, k=4, random_state=0, device="cpu").fit(X, y)
    clf = FlyNNClassifier(n_components=64, k=4, random_state=0, device=device).fit(X, y)
    assert ref.held_out_hits_[1] == 4 and np.all(np.isfinite(ref.calibration_loss_))
    _same_calibration(clf, ref)


def test_partial_fit_adds_each_batch_scored_by_the_model_before_it(digits_split):
    X_train, _, y_train, _ = digits_split
    first = _small(input_range=(0, 16), device="cpu").partial_fit(
        X_train[:600], y_train[:600], classes=np.arange(10)
    )
    one = _small(input_range=(0, 16), device="cpu").fit(X_train[:600], y_train[:600])
    assert np.array_equal(first.calibration_loss_, one.calibration_loss_)  # the first call cross-fits
    before = first.calibration_loss_.copy(), first.held_out_hits_
    stream = first.partial_fit(X_train[600:], y_train[600:])
    # the second batch, scored by the model of the first 600 rows
    probe = _small(input_range=(0, 16), device="cpu").fit(X_train[:600], y_train[:600])
    from sknn_gpu.fly._calibration import held_out_table

    Xv = probe._validate_X(X_train[600:], reset=False)
    table, hits = held_out_table(probe, Xv, np.searchsorted(probe.classes_, y_train[600:]))
    np.testing.assert_allclose(stream.calibration_loss_, before[0] + table, rtol=1e-12)
    assert stream.held_out_hits_ == (before[1][0] + hits[0], before[1][1] + hits[1])
    assert np.array_equal(
        stream.counts_, _small(input_range=(0, 16), device="cpu").fit(X_train, y_train).counts_
    )


def test_merge_adds_the_parties_tables_and_keeps_pooled_predictions(digits_split):
    X_train, X_test, y_train, _ = digits_split
    params = dict(n_components=2048, k=64, input_range=(0, 16), random_state=0, device="cpu")
    parts = np.array_split(np.arange(len(y_train)), 3)
    models = [FlyNNClassifier(**params).fit(X_train[p], y_train[p]) for p in parts]
    merged = merge_flynn(models)
    pooled = FlyNNClassifier(**params).fit(X_train, y_train)
    assert np.array_equal(merged.counts_, pooled.counts_)
    assert np.array_equal(merged.predict(X_test), pooled.predict(X_test))
    np.testing.assert_allclose(merged.calibration_loss_, sum(m.calibration_loss_ for m in models))
    assert merged.held_out_hits_[1] == len(y_train)
    assert merged.proba_scale_ == scale_of(merged.calibration_loss_)


def test_private_release_has_no_calibration(digits_split):
    X_train, X_test, y_train, _ = digits_split
    clf = _small(input_range=(0, 16), device="cpu").fit(X_train, y_train)
    private = clf.privatize(1.0, 1)
    assert private.calibration_loss_ is None and private.held_out_hits_ is None
    assert private.proba_scale_ == DEFAULT_SCALE
    assert {"calibration_loss_", "held_out_hits_"} <= set(private.dp_accounting_["dropped"])
    other = _small(input_range=(0, 16), device="cpu").fit(X_train, y_train).privatize(1.0, 1)
    merged = merge_flynn([private, other])
    assert merged.calibration_loss_ is None and merged.proba_scale_ == DEFAULT_SCALE


def test_counts_file_keeps_the_calibration(digits_split):
    X_train, X_test, y_train, _ = digits_split
    clf = _small(device="cpu").fit(X_train, y_train)
    buf = io.BytesIO()
    clf.export_counts(buf)
    buf.seek(0)
    back = FlyNNClassifier.from_counts(buf, device="cpu")
    assert np.array_equal(back.calibration_loss_, clf.calibration_loss_)
    assert back.held_out_hits_ == clf.held_out_hits_ and back.proba_scale_ == clf.proba_scale_
    assert np.array_equal(back.predict_proba(X_test), clf.predict_proba(X_test))


def test_auto_capacity_and_receptors(digits_split):
    X_train, _, y_train, _ = digits_split
    assert auto_cells(320) == AUTO_CELLS == 65536 and auto_cells(3920) == AUTO_CELLS_WIDE == 16384
    clf = FlyNNClassifier(random_state=0, device="cpu").fit(X_train[:200], y_train[:200])
    assert clf.n_components_ == 65536 and clf.n_receptors_ == 5 and clf.hasher_.n_features_in_ == 320
    two = FlyNNClassifier(random_state=0, device="cpu").fit(X_train[:200, :2], y_train[:200])
    assert two.n_receptors_ == 32 and two.hasher_.n_features_in_ == 64
    nine = FlyNNClassifier(n_receptors=9, random_state=0, device="cpu").fit(X_train[:50], y_train[:50])
    assert nine.n_receptors_ == 9
    with pytest.raises(ValueError, match="n_receptors"):
        FlyNNClassifier(n_receptors=1).fit(X_train[:50], y_train[:50])
    with pytest.raises(ValueError, match="n_components"):
        FlyNNClassifier(n_components="big").fit(X_train[:50], y_train[:50])


def test_auto_winners_follow_the_training_rows_per_input(dask_client):
    """k='auto': 128 winners from 32 training rows per encoded input (narrow inputs), else
    512; 256 for wide inputs. fit, partial_fit's first batch, Dask, fit_federated and a
    counts file resolve it alike; merge_flynn refuses parties that resolved it differently."""
    import dask.array as da

    from sknn_gpu.fly import fit_federated

    assert auto_winners(64, 2047) == 512 and auto_winners(64, 2048) == 128
    assert auto_winners(1024, 10**6) == 128 and auto_winners(1025, 10**6) == 256
    rng = np.random.default_rng(0)
    X = rng.random((2100, 2))  # 2 features: 32 receptors each, 64 encoded inputs
    y = (X[:, 0] > X[:, 1]).astype(int)
    params = dict(n_components=4096, input_range=(0, 1), random_state=0, device="cpu")
    assert FlyNNClassifier(**params).fit(X[:2047], y[:2047]).k_ == 512
    pooled = FlyNNClassifier(**params).fit(X, y)
    assert pooled.k_ == 128 and pooled.k == "auto" and pooled.hasher_.k_ == 128
    # rows of weight 0 are absent: 2,047 rows left
    w = np.r_[np.zeros(53), np.ones(2047)]
    assert FlyNNClassifier(**params).fit(X, y, sample_weight=w).k_ == 512
    lazy = FlyNNClassifier(**params).fit(da.from_array(X, chunks=700), da.from_array(y, chunks=700))
    assert lazy.k_ == 128 and np.array_equal(lazy.counts_, pooled.counts_)
    lazy_w = FlyNNClassifier(**params).fit(
        da.from_array(X, chunks=700), da.from_array(y, chunks=700), sample_weight=da.from_array(w, chunks=700)
    )
    assert lazy_w.k_ == 512
    # a stream resolves k from its first batch and keeps it
    stream = FlyNNClassifier(**params).partial_fit(X[:100], y[:100], classes=[0, 1])
    assert stream.k_ == 512 and stream.partial_fit(X[100:], y[100:]).k_ == 512
    # parties of 700 rows alone would keep 512 winners; fit_federated counts all 2,100 rows
    parts = np.array_split(np.arange(len(y)), 3)
    fed = fit_federated(dask_client, [(X[p], y[p]) for p in parts], **params)
    assert fed.k_ == 128 and np.array_equal(fed.counts_, pooled.counts_)
    assert np.array_equal(fed.predict(X[:300]), pooled.predict(X[:300]))
    fed_lazy = fit_federated(
        dask_client, (da.from_array(X, chunks=700), da.from_array(y, chunks=700)), **params
    )
    assert fed_lazy.k_ == 128 and np.array_equal(fed_lazy.counts_, pooled.counts_)
    # merges keep the parties' k_, and refuse parties that resolved it differently
    small, large = (
        FlyNNClassifier(**params).fit(X[:700], y[:700]),
        FlyNNClassifier(**params).fit(X[700:], y[700:]),
    )
    assert (small.k_, large.k_) == (512, 512) and merge_flynn([small, large]).k_ == 512
    big = FlyNNClassifier(**params).fit(X[:2048], y[:2048])
    with pytest.raises(ValueError, match=r"models\[1\] keeps 128 winners per code \(k_\), the first 512"):
        merge_flynn([small, big])
    assert merge_flynn([big, FlyNNClassifier(**params).fit(X[:2048], y[:2048])]).k_ == 128
    # a counts file keeps the resolved k
    buf = io.BytesIO()
    pooled.export_counts(buf)
    buf.seek(0)
    back = FlyNNClassifier.from_counts(buf)
    assert back.k_ == 128 and np.array_equal(back.predict(X[:300]), pooled.predict(X[:300]))
    # an explicit k is kept whatever the rows; a wide input gets 256
    assert FlyNNClassifier(**{**params, "k": 64}).fit(X, y).k_ == 64
    wide = FlyNNClassifier(n_components=4096, random_state=0, device="cpu").fit(rng.random((40, 210)), y[:40])
    assert wide.hasher_.n_features_in_ == 1050 and wide.k_ == 256
    with pytest.raises(ValueError, match="'k' parameter"):
        FlyNNClassifier(k="many").fit(X, y)


def test_warns_when_codes_carry_no_class_information():
    rng = np.random.default_rng(0)
    # two classes that differ only by their spread: FlyHash's winners cannot tell them apart
    X = np.concatenate([rng.normal(size=(400, 8)), 3 * rng.normal(size=(400, 8))])
    X = X / np.linalg.norm(X, axis=1, keepdims=True)  # same norm: only the direction is left
    y = np.repeat([0, 1], 400)
    with pytest.warns(UserWarning, match="almost no class information"):
        clf = FlyNNClassifier(n_components=4096, random_state=0, device="cpu").fit(X, y)
    accuracy, majority = class_information(clf)
    assert majority == 0.5 and accuracy < 0.55
    # a table with class information does not warn
    Xd, yd = load_digits(return_X_y=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FlyNNClassifier(n_components=2048, random_state=0, device="cpu").fit(Xd, yd)


# --------------------------------------------------------------------------- #
# input_range='quantile'                                                        #
# --------------------------------------------------------------------------- #


def test_quantile_positions_read_features_across_their_mass():
    from sknn_gpu.fly._encoding import QUANTILE_KNOTS, column_histogram, quantile_knots, quantile_position

    rng = np.random.default_rng(0)
    X = np.c_[rng.lognormal(sigma=2.0, size=4000), rng.normal(size=4000), np.full(4000, 3.0)]
    low, high = X.min(axis=0), X.max(axis=0)
    hist = column_histogram(X, low, high)
    assert hist.dtype == np.int64 and np.array_equal(hist.sum(axis=1), [4000] * 3)
    # histograms add up: two halves give the whole's counts, so the quantiles too
    assert np.array_equal(column_histogram(X[:1500], low, high) + column_histogram(X[1500:], low, high), hist)
    knots = quantile_knots(hist, low, high)
    assert knots.shape == (3, QUANTILE_KNOTS) and np.all(np.diff(knots, axis=1) >= 0)
    u = quantile_position(X, knots)
    assert u.min() >= 0 and u.max() <= 1
    # the heavy-tailed feature: min-max puts nearly every value in the bottom 1 %, its
    # quantiles spread them evenly
    assert np.mean((X[:, 0] - low[0]) / (high[0] - low[0]) < 0.01) > 0.5
    np.testing.assert_allclose(np.quantile(u[:, 0], [0.1, 0.5, 0.9]), [0.1, 0.5, 0.9], atol=0.02)
    assert np.all(u[:, 2] == 0)  # a constant feature reads 0, as under 'fit'
    order = np.argsort(X[:, 1])
    assert np.all(np.diff(u[order, 1]) >= 0)  # monotone


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "encoding, receptors", [("population", 5), ("population", 7), ("thermometer", 5), ("complement", 5)]
)
def test_quantile_encoding_in_one_kernel_is_the_two_step_reference(dtype, encoding, receptors):
    """The GPU's one-kernel quantile encoding (knots in shared memory, tiles of features
    over slices of rows) gives the bits of the NumPy positions followed by the NumPy
    encoding: awkward knots (runs of equal knots, a flat feature, values beyond the
    ends), a width that is not a multiple of the tile, a strided view, and knots too
    many for shared memory (the two-kernel route)."""
    import cupy as cp

    from sknn_gpu.fly import _flynn_cuda
    from sknn_gpu.fly._encoding import column_histogram, encode, quantile_knots, quantile_position

    rng = np.random.default_rng(3)
    n, d = 1037, 37
    X = rng.lognormal(sigma=1.5, size=(n, d))
    X[:, 5] = np.round(X[:, 5])  # few distinct values: runs of equal knots
    X[:, 9] = 2.5  # a flat feature
    X[rng.random((n, d)) < 0.1] = 0.0
    low, high = X.min(axis=0), X.max(axis=0)
    knots = quantile_knots(column_histogram(X, low, high), low, high)
    Q = np.r_[X[:500], X[:40] * 3.0 - 1.0].astype(dtype)  # queries beyond both ends
    want = encode(quantile_position(Q, knots), encoding, receptors=receptors).astype(np.float32)
    got = _flynn_cuda.quantile_encode(cp.asarray(Q), cp.asarray(knots), encoding, receptors=receptors)
    assert np.array_equal(cp.asnumpy(got), want)
    # a strided view of a wider array (its row stride is not d)
    wide = cp.asarray(np.c_[Q, Q[:, :3]])[:, :d]
    got = _flynn_cuda.quantile_encode(wide, cp.asarray(knots), encoding, receptors=receptors)
    assert np.array_equal(cp.asnumpy(got), want)
    # 7,000 knots per feature do not fit the tile's shared memory: the two kernels
    big = np.concatenate([knots, np.repeat(knots[:, -1:], 7000 - knots.shape[1], axis=1)], axis=1)
    want = encode(quantile_position(Q[:50], big), encoding, receptors=receptors).astype(np.float32)
    got = _flynn_cuda.quantile_encode(cp.asarray(Q[:50]), cp.asarray(big), encoding, receptors=receptors)
    assert np.array_equal(cp.asnumpy(got), want)


def test_quantile_fit_is_the_same_on_both_devices(device):
    rng = np.random.default_rng(1)
    X = np.c_[rng.lognormal(size=(600, 3)), rng.normal(size=(600, 2))]
    y = (X[:, 0] > np.median(X[:, 0])).astype(int) + 2 * (X[:, 3] > 0)
    params = dict(input_range="quantile", n_components=2048, k=32, random_state=0)
    ref = FlyNNClassifier(**params, device="cpu").fit(X, y)
    clf = FlyNNClassifier(**params, device=device).fit(X, y)
    assert np.array_equal(clf.input_quantiles_, ref.input_quantiles_)
    assert np.array_equal(to_host(clf.counts_), ref.counts_)
    assert np.array_equal(to_host(clf.predict(X)), ref.predict(X))
    # values beyond the training range read as the ends, as under 'fit'
    assert np.array_equal(to_host(clf.predict(X * 50)), ref.predict(X * 50))


def test_quantile_file_round_trip_and_refused_merge():
    rng = np.random.default_rng(2)
    X, y = rng.lognormal(size=(300, 4)), rng.integers(0, 3, 300)
    params = dict(input_range="quantile", n_components=1024, k=16, random_state=0, device="cpu")
    clf = FlyNNClassifier(**params).fit(X, y)
    buf = io.BytesIO()
    clf.export_counts(buf)
    buf.seek(0)
    back = FlyNNClassifier.from_counts(buf)
    assert np.array_equal(back.input_quantiles_, clf.input_quantiles_)
    assert np.array_equal(back.predict(X), clf.predict(X))
    # parties that took their own quantiles cannot merge
    other = FlyNNClassifier(**params).fit(X[:150], y[:150])
    with pytest.raises(ValueError, match="quantiles"):
        merge_flynn([clf, other])
    # a party that took the same quantiles (read from the file) merges
    buf.seek(0)
    assert np.array_equal(merge_flynn([clf, FlyNNClassifier.from_counts(buf)]).counts_, 2 * clf.counts_)


def test_quantile_federated_and_dask_fits_equal_the_pooled_fit(dask_client):
    import dask.array as da

    from sknn_gpu.fly import fit_federated

    rng = np.random.default_rng(3)
    X = np.c_[rng.lognormal(sigma=1.5, size=(900, 4)), rng.normal(size=(900, 3))]
    y = (X[:, 0] > 1).astype(int) + (X[:, 5] > 0)
    params = dict(input_range="quantile", n_components=2048, k=32, random_state=0, device="cpu")
    pooled = FlyNNClassifier(**params).fit(X, y)
    parts = np.array_split(np.arange(len(y)), 3)
    fed = fit_federated(dask_client, [(X[p], y[p]) for p in parts], **params)
    assert np.array_equal(fed.input_quantiles_, pooled.input_quantiles_)
    assert np.array_equal(fed.counts_, pooled.counts_)
    lazy = FlyNNClassifier(**params).fit(da.from_array(X, chunks=(250, 7)), da.from_array(y, chunks=250))
    assert np.array_equal(lazy.input_quantiles_, pooled.input_quantiles_)
    assert np.array_equal(lazy.counts_, pooled.counts_)
    # the calibration rows' winners come back with the counts: the same table as in memory
    assert np.array_equal(lazy.calibration_loss_, pooled.calibration_loss_)
    assert lazy.held_out_hits_ == pooled.held_out_hits_
    # with sample weights (rows of weight 0 left out of the calibration rows, as in memory)
    w = np.where(np.arange(len(y)) % 7 == 0, 0.0, 1.0 + (np.arange(len(y)) % 3))
    eager = FlyNNClassifier(**params).fit(X, y, sample_weight=w)
    dX, dy, dw = da.from_array(X, chunks=(250, 7)), da.from_array(y, chunks=250), da.from_array(w, chunks=250)
    lazy = FlyNNClassifier(**params).fit(dX, dy, sample_weight=dw)
    assert np.array_equal(lazy.counts_, eager.counts_)
    assert np.array_equal(lazy.input_quantiles_, eager.input_quantiles_)
    assert np.array_equal(lazy.calibration_loss_, eager.calibration_loss_)
    assert lazy.held_out_hits_ == eager.held_out_hits_


# --------------------------------------------------------------------------- #
# The quantiles' histogram on both devices (flynn_column_histogram on a GPU)    #
# --------------------------------------------------------------------------- #


def _histogram_of(device, X, low, high, weights=None, batch_size=8192, on_device=True, what="histogram"):
    """``_flynn_batches.histogram`` (or ``.quantiles``: ``what``) of ``X`` by an estimator on
    ``device`` over [low, high] (``on_device``: CuPy ``X`` for a cuda estimator, else the host
    array, moved batch by batch)."""
    from types import SimpleNamespace

    from sknn_gpu.fly import _flynn_batches

    est = SimpleNamespace(
        device_=device,
        input_low_=np.asarray(low, dtype=np.float64),
        input_high_=np.asarray(high, dtype=np.float64),
        batch_size=batch_size,
    )
    if device == "cuda" and on_device:
        import cupy as cp

        X = cp.asarray(X)
    return getattr(_flynn_batches, what)(est, X, weights)


def _histogram_by_feature(X, low, high, weights=None):
    """The bins of column_histogram's docstring, one feature at a time: floor((x - low) / span
    * 4096) clipped to [0, 4095], in float64 (a constant feature: span 1)."""
    from sknn_gpu.fly._encoding import QUANTILE_BINS as B

    X = np.asarray(X).astype(np.float64)
    out = np.zeros((X.shape[1], B), dtype=np.int64 if weights is None else np.float64)
    for j in range(X.shape[1]):
        span = high[j] - low[j] if high[j] - low[j] > 0 else 1.0
        b = np.clip(np.floor((X[:, j] - low[j]) / span * float(B)), 0, B - 1).astype(np.int64)
        out[j] = np.bincount(b, weights=weights, minlength=B)
    return out


def _awkward_columns(rng, n):
    """Float64 columns that test the bin formula: values on the range's ends and on bin edges,
    beyond a given range, a constant column, a subnormal range, negatives and -0.0."""
    low = np.array([-3.0, 0.0, 7.5, 0.0, -1.0, 2.0, 0.0])
    high = np.array([5.0, 1.0, 7.5, 1e-320, 1.0, 2.0 + 2.0**-30, 255.0])
    edges = low[0] + (high[0] - low[0]) * rng.integers(0, 4097, n) / 4096.0  # on bin edges
    cols = [
        np.where(rng.random(n) < 0.2, rng.choice([-3.0, 5.0], n), edges),
        rng.random(n) * 1.4 - 0.2,  # beyond [0, 1] on both sides: clipped to the end bins
        np.full(n, 7.5),  # constant: bin 0
        rng.integers(0, 11, n) * 1e-321,  # a subnormal range, values on and past it
        np.where(rng.random(n) < 0.5, -0.0, rng.uniform(-1, 1, n)),
        2.0 + rng.integers(0, 2**20, n) * 2.0**-50,  # a tiny range in the middle of the line
        np.floor(rng.random(n) * 256.0),  # pixel values, many repeats
    ]
    return np.column_stack(cols), low, high


def test_histogram_bins_are_the_reference_on_awkward_data(device, rng):
    X, low, high = _awkward_columns(rng, 3000)
    hist = _histogram_of(device, X, low, high)
    assert hist.dtype == np.int64 and hist.shape == (X.shape[1], 4096)
    assert np.array_equal(hist, _histogram_by_feature(X, low, high))
    assert np.array_equal(hist.sum(axis=1), [3000] * X.shape[1])
    assert hist[2, 0] == 3000 and hist[1, 0] > 300 and hist[1, 4095] > 300  # constant; clipped ends
    # float32 input (the bins of its float64 values), F-ordered and strided copies too
    X32 = (X[:, [0, 1, 4, 6]] * 0.999).astype(np.float32)
    lo, hi = X32.min(axis=0).astype(np.float64), X32.max(axis=0).astype(np.float64)
    ref = _histogram_by_feature(X32, lo, hi)
    assert np.array_equal(_histogram_of(device, X32, lo, hi), ref)
    assert np.array_equal(_histogram_of(device, np.asfortranarray(X32), lo, hi), ref)
    wide = np.repeat(X32, 2, axis=1)
    assert np.array_equal(_histogram_of(device, wide[:, ::2], lo, hi), ref)


def test_histogram_of_wide_tables_many_rows_and_batches(device, rng):
    # 1,003 features (not a multiple of any block's features)
    X = rng.normal(size=(500, 1003)).astype(np.float32)
    X[:, 5] = 1.0
    low, high = X.min(axis=0).astype(np.float64), X.max(axis=0).astype(np.float64)
    assert np.array_equal(_histogram_of(device, X, low, high), _histogram_by_feature(X, low, high))
    # 70,000 rows of 3 features: several slices of rows per feature, in one launch or in
    # batches of 9,000 host rows moved to the GPU one at a time (the counts add up)
    X = np.c_[rng.lognormal(sigma=2.0, size=70000), rng.normal(size=70000), rng.integers(0, 9, 70000)]
    low, high = X.min(axis=0), X.max(axis=0)
    ref = _histogram_by_feature(X, low, high)
    assert np.array_equal(_histogram_of(device, X, low, high), ref)
    assert np.array_equal(_histogram_of(device, X, low, high, batch_size=9000, on_device=False), ref)
    assert np.array_equal(_histogram_of(device, X[::-1], low, high), ref)  # rows in reverse


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.bool_])
def test_histogram_of_integer_inputs(device, rng, dtype):
    info = np.iinfo(dtype) if dtype is not np.bool_ else None
    if dtype is np.int64:  # beyond 2**53: converted to float64 with rounding, as astype does
        X = rng.integers(2**60, 2**60 + 2**12, size=(2000, 3), dtype=np.int64)
        X[:, 2] = rng.integers(info.min, info.max, 2000, dtype=np.int64)
    elif dtype is np.bool_:
        X = rng.random((2000, 3)) < 0.3
    else:
        X = rng.integers(info.min, int(info.max) + 1, size=(2000, 3)).astype(dtype)
    low, high = X.min(axis=0).astype(np.float64), X.max(axis=0).astype(np.float64)
    hist = _histogram_of(device, X, low, high)
    assert np.array_equal(hist, _histogram_by_feature(X, low, high))
    assert np.array_equal(hist.sum(axis=1), [2000] * 3)


def test_weighted_histogram_sums_the_weights_exactly(device, rng):
    from sknn_gpu.fly._weights import check_sample_weight

    X, low, high = _awkward_columns(rng, 20000)
    w = check_sample_weight(rng.random(20000) * 3.0, 20000)  # on the grid of 2**-20
    w[::7] = np.floor(w[::7] * 1000.0)  # some large whole weights
    hist = _histogram_of(device, X, low, high, weights=w)
    assert hist.dtype == np.float64
    assert np.array_equal(hist, _histogram_by_feature(X, low, high, weights=w))
    batches = _histogram_of(device, X, low, high, weights=w, batch_size=3000, on_device=False)
    assert np.array_equal(batches, hist)
    np.testing.assert_allclose(hist.sum(axis=1), w.sum(), rtol=1e-15)


def test_histogram_refuses_nan_as_the_reference_does(device, rng):
    X = rng.random((300, 4))
    X[17, 2] = np.nan
    with pytest.raises(ValueError), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's cast of NaN to an index
        _histogram_of(device, X, np.zeros(4), np.ones(4))


def test_quantiles_of_the_histogram_on_both_devices(device, rng):
    """On a GPU the quantiles are taken from the histogram there (one block per feature):
    the bits of quantile_knots, weighted too; only they come back."""
    from sknn_gpu.fly._encoding import QUANTILE_KNOTS, quantile_knots
    from sknn_gpu.fly._weights import check_sample_weight

    X, low, high = _awkward_columns(rng, 5000)
    for weights in (None, check_sample_weight(rng.random(5000) * 2.0, 5000)):
        knots = _histogram_of(device, X, low, high, weights, what="quantiles")
        expected = quantile_knots(_histogram_by_feature(X, low, high, weights), low, high)
        assert knots.shape == (X.shape[1], QUANTILE_KNOTS) and np.array_equal(knots, expected)
        assert np.all(knots[2] == 7.5) and np.all(np.diff(knots, axis=1) >= 0)
    X = rng.lognormal(sigma=2.0, size=(3000, 300)).astype(np.float32)
    low, high = X.min(axis=0).astype(np.float64), X.max(axis=0).astype(np.float64)
    knots = _histogram_of(device, X, low, high, batch_size=1000, on_device=False, what="quantiles")
    assert np.array_equal(knots, quantile_knots(_histogram_by_feature(X, low, high), low, high))
    X[5, 7] = np.nan
    with pytest.raises(ValueError), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        _histogram_of(device, X, low, high, what="quantiles")


def test_weighted_quantile_fit_is_the_same_on_both_devices(device, rng):
    X = np.c_[rng.lognormal(size=(700, 3)), rng.integers(0, 5, (700, 2))].astype(np.float32)
    y = (X[:, 0] > np.median(X[:, 0])).astype(int) + 2 * (X[:, 3] > 1)
    w = rng.random(700) * 2.0
    params = dict(input_range="quantile", n_components=2048, k=32, random_state=0)
    ref = FlyNNClassifier(**params, device="cpu").fit(X, y, sample_weight=w)
    Xd = X
    if device == "cuda":
        import cupy as cp

        Xd = cp.asarray(X)
    clf = FlyNNClassifier(**params, device=device).fit(Xd, y, sample_weight=w)
    assert np.array_equal(clf.input_quantiles_, ref.input_quantiles_)
    assert np.array_equal(to_host(clf.counts_), ref.counts_)
