"""FlyHashTransformer, FlyNNClassifier and the federation under hostile use: parameters
changed after fit, dates as features, fits that fail half-way, parties that disagree on
their columns, oversize projections, and odd input of every kind."""

import logging
import warnings

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from sknn_gpu._backend import to_host
from sknn_gpu.fly import FlyHashTransformer, FlyNNClassifier, fit_federated, merge_flynn


def _blobs(rng, n=120, d=8, n_classes=3):
    centers = rng.normal(scale=3.0, size=(n_classes, d))
    y = rng.integers(0, n_classes, size=n)
    return centers[y] + rng.normal(size=(n, d)), y


def _flynn(device="cpu", **kw):
    params = dict(n_components=512, k=16, random_state=0, device=device)
    return FlyNNClassifier(**{**params, **kw})


def _flyhash(device="cpu", **kw):
    params = dict(n_components=200, k=10, random_state=0, device=device)
    return FlyHashTransformer(**{**params, **kw})


def _on(X, device):
    if device == "cuda":
        import cupy as cp

        return cp.asarray(X)
    return X


#: Every public FlyNN method that reads the parameters after fit, called on (X, y).
FLYNN_CALLS = {
    "predict": lambda c, X, y: c.predict(X),
    "predict_proba": lambda c, X, y: c.predict_proba(X),
    "predict_log_proba": lambda c, X, y: c.predict_log_proba(X),
    "decision_function": lambda c, X, y: c.decision_function(X),
    "novelty": lambda c, X, y: c.novelty(X),
    "score": lambda c, X, y: c.score(X, y),
    "partial_fit": lambda c, X, y: c.partial_fit(X, y),
}
FLYHASH_CALLS = {
    "transform": lambda h, X: h.transform(X),
    "get_feature_names_out": lambda h, X: h.get_feature_names_out(),
}


# --------------------------------------------------------------------------- #
# Parameters set after fit                                                      #
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize(
    "param, value",
    [
        ("batch_size", 0),
        ("batch_size", -1),
        ("gamma", 2.0),
        ("precision", "fastest"),
        ("verbose", -1),
        ("output_type", "arrow"),
        ("device", "gpu"),
    ],
)
@pytest.mark.parametrize("method", sorted(FLYNN_CALLS))
def test_flynn_bad_parameter_after_fit_is_refused_by_name(device, rng, method, param, value):
    X, y = _blobs(rng)
    clf = _flynn(device).fit(X, y)
    before = to_host(clf.counts_).copy()
    clf.set_params(**{param: value})
    with pytest.raises(ValueError, match=param):
        FLYNN_CALLS[method](clf, _on(X, device), y)
    assert np.array_equal(to_host(clf.counts_), before)


@pytest.mark.parametrize(
    "param, value", [("bisect_steps", -1), ("bisect_steps", 0), ("output", "bits"), ("verbose", -2)]
)
@pytest.mark.parametrize("method", sorted(FLYHASH_CALLS))
def test_flyhash_bad_parameter_after_fit_is_refused_by_name(device, rng, method, param, value):
    X = rng.random((20, 8))
    fh = _flyhash(device, algorithm="bisect").fit(X)
    fh.set_params(**{param: value})
    with pytest.raises(ValueError, match=param):
        FLYHASH_CALLS[method](fh, _on(X, device))


def test_cross_parameter_rules_are_checked_after_fit(rng):
    X, y = _blobs(rng)
    fh = _flyhash().fit(X)
    fh.set_params(precision="integer", algorithm="bisect")
    with pytest.raises(ValueError, match="algorithm='exact' only"):
        fh.transform(X)
    clf = _flynn().fit(X, y)
    clf.set_params(precision="integer")  # under the default encoding
    with pytest.raises(ValueError, match="normalize=False"):
        clf.predict(X)


#: Parameters a fitted model depends on, and another valid value of each.
FLYNN_MODEL_CHANGES = [
    ("n_components", 256),
    ("k", 8),
    ("n_connections", 3),
    ("connection_sparsity", 0.5),
    ("expansion_factor", 3.0),
    ("random_state", 1),
    ("encoding", "thermometer"),
    ("encoding", None),
    ("n_receptors", 9),
    ("normalize", True),
    ("input_range", (-50.0, 50.0)),
    ("gamma", 0.5),
    ("decay", "count"),
]


@pytest.mark.parametrize("param, value", FLYNN_MODEL_CHANGES)
@pytest.mark.parametrize("method", sorted(FLYNN_CALLS))
def test_flynn_model_parameter_changed_after_fit_is_refused(device, rng, method, param, value):
    """A parameter the fitted projection, encoding or filters depend on cannot change silently:
    the call names it, and the model answers as before once it is set back (or refitted)."""
    X, y = _blobs(rng)
    clf = _flynn(device).fit(X, y)
    proba = to_host(clf.predict_proba(_on(X, device)))
    old = clf.get_params()[param]
    clf.set_params(**{param: value})
    with pytest.raises(ValueError, match=rf"{param} was .* when .* fitted.*\bfit\b"):
        FLYNN_CALLS[method](clf, _on(X, device), y)
    clf.set_params(**{param: old})
    np.testing.assert_array_equal(to_host(clf.predict_proba(_on(X, device))), proba)
    clf.set_params(**{param: value}).fit(X, y)  # a refit takes the new value
    FLYNN_CALLS[method](clf, _on(X, device), y)


def test_flynn_call_time_parameters_may_change_after_fit(rng):
    X, y = _blobs(rng)
    clf = _flynn().fit(X, y)
    ref = clf.predict_proba(X)
    clf.set_params(batch_size=7, precision="fast", verbose=0, output_type="numpy")
    np.testing.assert_array_equal(clf.predict_proba(X), ref)


def test_flynn_input_range_arrays_edited_in_place_after_fit_are_refused(rng):
    X, y = _blobs(rng)
    low, high = X.min(axis=0), X.max(axis=0)
    clf = _flynn(input_range=(low, high)).fit(X, y)
    ref = clf.predict(X)
    low[0] -= 5.0  # the parameter's own array, changed in place
    with pytest.raises(ValueError, match="input_range"):
        clf.predict(X)
    low[0] += 5.0
    np.testing.assert_array_equal(clf.predict(X), ref)


@pytest.mark.parametrize(
    "param, value",
    [
        ("n_components", 100),
        ("k", 5),
        ("k", 0.5),
        ("n_connections", 1),
        ("connection_sparsity", 0.9),
        ("expansion_factor", 2.0),
        ("random_state", 7),
    ],
)
@pytest.mark.parametrize("method", sorted(FLYHASH_CALLS))
def test_flyhash_model_parameter_changed_after_fit_is_refused(device, rng, method, param, value):
    X = rng.random((30, 8))
    fh = _flyhash(device).fit(X)
    ref = to_host(fh.transform(_on(X, device))).toarray()
    old = fh.get_params()[param]
    fh.set_params(**{param: value})
    with pytest.raises(ValueError, match=rf"{param} was .* when .* fitted.*\bfit\b"):
        FLYHASH_CALLS[method](fh, _on(X, device))
    fh.set_params(**{param: old})
    np.testing.assert_array_equal(to_host(fh.transform(_on(X, device))).toarray(), ref)
    fh.set_params(**{param: value}).fit(X)
    FLYHASH_CALLS[method](fh, _on(X, device))


def test_flyhash_call_time_parameters_may_change_after_fit(rng):
    X = rng.random((30, 8))
    fh = _flyhash().fit(X)
    ref = fh.transform(X).toarray()
    fh.set_params(output="dense", precision="fast", verbose=0)
    np.testing.assert_array_equal(fh.transform(X), ref)
    assert (
        fh.set_params(precision="exact", algorithm="bisect", bisect_steps=300).transform(X).shape == ref.shape
    )


def test_merge_refuses_a_party_whose_parameters_changed_after_fit(rng):
    X, y = _blobs(rng)
    a = _flynn(input_range=(-50, 50)).fit(X[:60], y[:60])
    b = _flynn(input_range=(-50, 50)).fit(X[60:], y[60:])
    b.set_params(k=8)
    with pytest.raises(ValueError, match=r"models\[1\].*k was 16 when"):
        merge_flynn([a, b])
    a.set_params(k=8)  # both changed alike: the merged model would hash with k=8 on k=16 counts
    with pytest.raises(ValueError, match=r"models\[0\].*k was 16 when"):
        merge_flynn([a, b])


# --------------------------------------------------------------------------- #
# Dates and time spans                                                          #
# --------------------------------------------------------------------------- #
def _dates(n=40, d=6):
    return (np.arange(n * d).reshape(n, d) * 86400).astype("datetime64[s]")


@pytest.mark.parametrize("kind", ["datetime64", "timedelta64"])
def test_dates_are_refused_everywhere(rng, kind):
    Xt = _dates()
    if kind == "timedelta64":
        Xt = Xt - Xt[0, 0]
    X = rng.random(Xt.shape)
    y = rng.integers(0, 2, Xt.shape[0])
    match = rf"dtype {kind}.*dates and time spans"
    with pytest.raises(ValueError, match=match):
        _flyhash().fit(Xt)
    with pytest.raises(ValueError, match=match):
        _flyhash().fit(X).transform(Xt)
    with pytest.raises(ValueError, match=match):
        _flynn().fit(Xt, y)
    with pytest.raises(ValueError, match=match):
        _flynn().partial_fit(Xt, y, classes=[0, 1])
    clf = _flynn().fit(X, y)
    for call in FLYNN_CALLS.values():
        with pytest.raises(ValueError, match=match):
            call(clf, Xt, y)
    with pytest.raises(ValueError, match=match):
        _flynn().fit([list(row) for row in Xt], y)  # lists of NumPy dates: asarray gives the dtype back
    with pytest.raises(ValueError, match=match):
        fit_federated(None, [(X, y), (Xt, y)], random_state=0)


def test_dask_dates_are_refused_with_the_same_message():
    da = pytest.importorskip("dask.array")
    Xt = da.from_array(_dates(), chunks=(20, 6))
    y = np.arange(40) % 2
    with pytest.raises(ValueError, match="dtype datetime64.*dates and time spans"):
        _flyhash().fit(Xt)
    with pytest.raises(ValueError, match="dtype datetime64.*dates and time spans"):
        _flynn().fit(Xt, y)
    fitted = _flyhash().fit(np.ones((3, 6)) + np.arange(18).reshape(3, 6))
    with pytest.raises(ValueError, match="dtype datetime64.*dates and time spans"):
        fitted.transform(Xt)


# --------------------------------------------------------------------------- #
# A fit that fails keeps the model it had                                       #
# --------------------------------------------------------------------------- #
def _failing_flynn_fits(X, y):
    bad = X[:, :5].copy()
    bad[0, 0] = np.nan
    return {
        "y too short": lambda c: c.fit(X, y[:10]),
        "NaN in another width": lambda c: c.fit(bad, y),
        "continuous y": lambda c: c.fit(X, 0.5 * np.arange(len(y))),
        "bad parameter": lambda c: c.set_params(n_connections=10**6).fit(X, y),
        "partial_fit with y too short": lambda c: c.partial_fit(X, y[:10]),
    }


@pytest.mark.parametrize("case", sorted(_failing_flynn_fits(np.zeros((2, 6)), np.zeros(2))))
def test_failed_flynn_fit_keeps_the_old_model(device, rng, case):
    X, y = _blobs(rng)
    clf = _flynn(device).fit(X, y)
    params = clf.get_params()
    ref = to_host(clf.predict_proba(_on(X, device)))
    state = sorted(vars(clf))
    with pytest.raises((ValueError, TypeError)):
        _failing_flynn_fits(X, y)[case](clf)
    clf.set_params(**params)
    np.testing.assert_array_equal(to_host(clf.predict_proba(_on(X, device))), ref)
    assert sorted(k for k in vars(clf) if k != "_device_cache") == [k for k in state if k != "_device_cache"]


def test_failed_partial_fit_keeps_the_counts(device, rng):
    X, y = _blobs(rng)
    clf = _flynn(device).partial_fit(X[:60], y[:60], classes=[0, 1, 2])
    ref = to_host(clf.counts_).copy()
    bad = X[60:].copy()
    bad[5, 2] = np.inf
    for call in (
        lambda: clf.partial_fit(bad, y[60:]),
        lambda: clf.partial_fit(X[60:], y[60:] + 5),
        lambda: clf.partial_fit(X[60:, :4], y[60:]),
        lambda: clf.partial_fit(X[60:], y[60:], classes=[0, 1]),
    ):
        with pytest.raises(ValueError):
            call()
        assert np.array_equal(to_host(clf.counts_), ref)
    clf.partial_fit(X[60:], y[60:])  # and it goes on from there
    assert to_host(clf.counts_).sum() > ref.sum()


def test_failed_first_fit_leaves_the_estimator_unfitted(rng):
    X, y = _blobs(rng)
    clf = _flynn()
    with pytest.raises(ValueError):
        clf.fit(X, y[:3])
    with pytest.raises(NotFittedError):
        clf.predict(X)
    with pytest.raises(ValueError):
        clf.partial_fit(X, y[:3], classes=[0, 1, 2])
    with pytest.raises(NotFittedError):
        clf.predict(X)
    assert [k for k in vars(clf) if k.endswith("_")] == []


def test_failed_flyhash_fit_keeps_the_old_projection(device, rng):
    X = rng.random((20, 8))
    fh = _flyhash(device).fit(X)
    ref = to_host(fh.transform(_on(X, device))).toarray()
    bad = rng.random((20, 5))
    bad[3, 1] = np.nan
    with pytest.raises(ValueError):
        fh.fit(bad)  # another width, refused after scikit-learn's checks read it
    with pytest.raises(ValueError):
        fh.set_params(n_connections=7).fit(X[:, :5])  # more connections than features
    fh.set_params(n_connections=None)
    assert fh.n_features_in_ == 8
    np.testing.assert_array_equal(to_host(fh.transform(_on(X, device))).toarray(), ref)
    fresh = _flyhash()
    with pytest.raises(ValueError):
        fresh.fit(bad)
    with pytest.raises(NotFittedError):
        fresh.transform(X)


# --------------------------------------------------------------------------- #
# Parties that disagree on their columns                                        #
# --------------------------------------------------------------------------- #
def _parties(rng, n=3, d=5):
    X, y = _blobs(rng, n=60 * n, d=d)
    params = dict(input_range=(-50, 50))
    return [_flynn(**params).fit(X[60 * i : 60 * (i + 1)], y[60 * i : 60 * (i + 1)]) for i in range(n)], X


def _named(model, names):
    model.feature_names_in_ = np.asarray(names, dtype=object)  # as a fit on a data frame sets it
    return model


def test_merge_refuses_parties_whose_columns_are_in_another_order(rng):
    models, _ = _parties(rng)
    _named(models[0], list("abcde"))
    _named(models[1], list("abcde"))
    _named(models[2], list("abdce"))
    match = r"models\[2\].*feature 2 named 'd'.*models\[0\].*'c'.*another order"
    with pytest.raises(ValueError, match=match):
        merge_flynn(models)
    _named(models[2], list("abcdz"))
    with pytest.raises(ValueError, match=r"models\[2\].*feature 4 named 'z'.*'e'") as err:
        merge_flynn(models)
    assert "another order" not in str(err.value)
    _named(models[2], list("abcde"))
    merged = merge_flynn(models)
    assert merged.feature_names_in_.tolist() == list("abcde")


def test_merge_warns_when_only_some_parties_have_feature_names(rng):
    models, X = _parties(rng)
    _named(models[1], list("abcde"))
    with pytest.warns(UserWarning, match=r"models\[0\], models\[2\] .*without feature names.*models\[1\]"):
        merged = merge_flynn(models)
    assert merged.feature_names_in_.tolist() == list("abcde")  # the names that were given
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        merge_flynn([models[0], models[2]])  # none has names: nothing to say
        merge_flynn([models[1], models[1]])


def test_merge_of_data_frames_in_another_column_order_is_refused(rng):
    pd = pytest.importorskip("pandas")
    X, y = _blobs(rng, n=120, d=4)
    params = dict(input_range=(-50, 50))
    a = _flynn(**params).fit(pd.DataFrame(X[:60], columns=list("abcd")), y[:60])
    frame = pd.DataFrame(X[60:], columns=list("abcd"))[list("badc")]
    b = _flynn(**params).fit(frame, y[60:])
    with pytest.raises(ValueError, match=r"models\[1\].*feature 0 named 'b'"):
        merge_flynn([a, b])


def test_fit_federated_refuses_shards_of_different_widths_before_any_work(rng):
    X, y = _blobs(rng, n=90, d=8)
    shards = [(X[:30], y[:30]), (X[30:60], y[30:60]), (X[60:, :6], y[60:])]
    for params in (dict(), dict(input_range=(-50, 50))):  # with and without an agreed range
        with pytest.raises(ValueError, match=r"shard 2 has 6 features.*shard 0 has 8"):
            fit_federated(None, shards, random_state=0, **params)  # no client is touched


def test_fit_federated_refuses_data_frames_in_another_column_order(rng):
    pd = pytest.importorskip("pandas")
    X, y = _blobs(rng, n=60, d=4)
    a = pd.DataFrame(X[:30], columns=list("abcd"))
    b = pd.DataFrame(X[30:], columns=list("abcd"))[list("abdc")]
    with pytest.raises(ValueError, match=r"shard 1.*feature 2 named 'd'.*shard 0.*'c'"):
        fit_federated(None, [(a, y[:30]), (b, y[30:])], random_state=0)


def test_fit_federated_names_the_shard_of_another_width_on_the_cluster(dask_client, rng):
    X, y = _blobs(rng, n=60, d=8)
    futures = dask_client.scatter([(X[:30], y[:30]), (X[30:, :5], y[30:])])
    for params in (dict(), dict(input_range=(-50, 50))):
        with pytest.raises(ValueError, match=r"shard 1 has 5 features.*shard 0 has 8"):
            fit_federated(dask_client, futures, random_state=0, **params)


# --------------------------------------------------------------------------- #
# Large projections: progress while drawing, and a size estimate that covers it #
# --------------------------------------------------------------------------- #
#: 2,000 features: the projection is drawn in blocks of 16,777 units, so 40,000 units take 3.
WIDE = 2000


def test_a_projection_drawn_in_blocks_reports_each(caplog):
    from sknn_gpu.fly._flyhash import _DRAW_BLOCK_BYTES

    block = 8 * _DRAW_BLOCK_BYTES // WIDE
    assert -(-40_000 // block) == 3
    X = np.random.default_rng(0).random((2, WIDE))
    with caplog.at_level(logging.INFO, logger="sknn_gpu"):
        _flyhash(n_components=40_000, verbose=2).fit(X)
    msgs = [r.getMessage() for r in caplog.records if r.name == "sknn_gpu.fly"]
    steps = [m for m in msgs if m.startswith("FlyHashTransformer.fit: projection ")]
    assert steps == [
        f"FlyHashTransformer.fit: projection {block}/40000",
        f"FlyHashTransformer.fit: projection {2 * block}/40000",
        "FlyHashTransformer.fit: projection 40000/40000",
    ]
    assert msgs[-1].startswith("FlyHashTransformer.fit: 40000 units in ")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="sknn_gpu"):
        _flynn(n_components=40_000, k=8, encoding=None, verbose=2).fit(X, [0, 1])
    steps = [r.getMessage() for r in caplog.records if "projection" in r.getMessage()]
    assert steps[-1].startswith("FlyNNClassifier.fit: projection: 40000 units in ")
    assert len(steps) == 4  # three blocks and the summary


def test_a_long_draw_logs_how_far_it_got_off_a_terminal(caplog, monkeypatch):
    """verbose=1 with no terminal (a log file, a batch job): a line every LOG_EVERY_SECONDS."""
    monkeypatch.setattr("sknn_gpu._progress.LOG_EVERY_SECONDS", 0.0)  # every block is "long"
    X = np.random.default_rng(0).random((2, WIDE))
    with caplog.at_level(logging.INFO, logger="sknn_gpu"):
        _flyhash(n_components=40_000, verbose=1).fit(X).transform(X[:1])
    msgs = [r.getMessage() for r in caplog.records if r.name == "sknn_gpu.fly"]
    assert (
        len([m for m in msgs if m.startswith("FlyHashTransformer.fit: projection ") and " after " in m]) == 3
    )
    assert any(m.startswith("FlyHashTransformer.transform 1/1 rows after ") for m in msgs)
    caplog.clear()
    monkeypatch.setattr("sknn_gpu._progress.LOG_EVERY_SECONDS", 3600.0)
    with caplog.at_level(logging.INFO, logger="sknn_gpu"):
        _flyhash(n_components=40_000, verbose=1).fit(X)
    assert not any(" after " in r.getMessage() for r in caplog.records)  # a short call: the summary only


@pytest.mark.parametrize(
    "d, m, n, output, kind",
    [
        (16, 300_000, 40, "sparse", "random"),
        (WIDE, 40_000, 30, "packed", "random"),
        (300, 20_000, 500, "dense", "sparse"),  # empty rows among them: every unit ties at 0
        (64, 50_000, 300, "sparse", "constant"),
    ],
)
def test_size_estimate_covers_what_fit_and_transform_allocate(d, m, n, output, kind):
    import tracemalloc

    import scipy.sparse as sp

    from sknn_gpu.fly._flyhash import flyhash_bytes

    rng = np.random.default_rng(0)
    X = {
        "random": lambda: rng.random((n, d)),
        "sparse": lambda: sp.random(n, d, density=0.005, format="csr", random_state=0),
        "constant": lambda: np.full((n, d), 3.0),
    }[kind]()
    sparse_input = kind == "sparse"
    fh = _flyhash(n_components=m, k=16, output=output)
    _, s, k = fh._sizes(d)
    tracemalloc.start()
    try:
        fh.fit(X)
        fit_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        fh.transform(X)
        transform_peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    fit_bytes = flyhash_bytes("cpu", d, m, s, k, projection=True)[0]
    transform_bytes = flyhash_bytes("cpu", d, m, s, k, n_samples=n, output=output, sparse=sparse_input)[0]
    assert fit_peak <= fit_bytes, (fit_peak, fit_bytes)
    assert transform_peak <= transform_bytes, (transform_peak, transform_bytes)


def test_the_estimate_counts_scipys_int64_copy_of_a_wide_projection():
    """At m * s >= 2**31 entries SciPy stores the CSR indices as int64, a new array beside the
    int32 table and its flat copy: 20 bytes an entry while the matrix is built."""
    from sknn_gpu.fly._flyhash import flyhash_bytes

    m, s = 2**27, 16  # 2**31 entries
    host, _ = flyhash_bytes("cpu", 64, m, s, 8, projection=True)
    assert host >= 20 * m * s + 8 * (m + 1)


# --------------------------------------------------------------------------- #
# Odd values and odd input                                                      #
# --------------------------------------------------------------------------- #
FLYNN_NUMBERS = [
    "n_components",
    "n_connections",
    "k",
    "batch_size",
    "expansion_factor",
    "connection_sparsity",
]
FLYHASH_NUMBERS = [
    "n_components",
    "n_connections",
    "k",
    "bisect_steps",
    "expansion_factor",
    "connection_sparsity",
]


@pytest.mark.parametrize("value", [True, False])
@pytest.mark.parametrize("param", FLYNN_NUMBERS + ["gamma"])
def test_flynn_refuses_a_bool_for_a_number(rng, param, value):
    """n_components=True passed scikit-learn's Interval(Integral) as 1: a one-cell hash."""
    X, y = _blobs(rng)
    with pytest.raises(ValueError, match=rf"{param}.*(bool|Got (True|False))"):
        _flynn(**{param: value}).fit(X, y)
    clf = _flynn().fit(X, y)
    if param in ("batch_size",):  # read at every call: refused there too
        clf.set_params(**{param: value})
        with pytest.raises(ValueError, match=rf"{param}.*(bool|Got (True|False))"):
            clf.predict(X)


@pytest.mark.parametrize("value", [True, False])
@pytest.mark.parametrize("param", FLYHASH_NUMBERS)
def test_flyhash_refuses_a_bool_for_a_number(rng, param, value):
    X = rng.random((20, 8))
    with pytest.raises(ValueError, match=rf"{param}.*(bool|Got (True|False))"):
        _flyhash(**{param: value}).fit(X)


def _reference_mask(A, k):
    """The k largest of each row, ties to the lower index: sorted by (value desc, index asc)."""
    mask = np.zeros(A.shape, dtype=bool)
    for i, row in enumerate(A):
        mask[i, np.lexsort((np.arange(row.size), -row))[:k]] = True
    return mask


@pytest.mark.parametrize("k", [1, 16, 700])
def test_tie_heavy_rows_keep_the_lowest_index_winners(device, rng, k):
    """Rows of equal activations (constant or empty input rows) take the full partition and
    break_ties' running count along the rows instead of index lists: the same winners."""
    from sknn_gpu._backend import to_device
    from sknn_gpu.fly._flyhash_cpu import wta_exact_mask_host
    from sknn_gpu.fly._wta import wta_exact_mask

    m = 9000
    A = rng.integers(0, 3, size=(24, m)).astype(np.float32)
    A[:8] = 0.0  # every unit ties
    A[8:16] = np.where(rng.random((8, m)) < 0.001, 2.0, 1.0)  # a few above a sea of ties
    ref = _reference_mask(A, k)
    np.testing.assert_array_equal(to_host(wta_exact_mask(to_device(A, device), k)), ref)
    np.testing.assert_array_equal(wta_exact_mask_host(A.copy(), k), ref)
    X = np.zeros((6, 40))
    X[3:] = 5.0
    fh = _flyhash(device, n_components=m, k=k, output="dense").fit(rng.random((3, 40)))
    H = to_host(fh.transform(_on(X, device))).astype(bool)
    np.testing.assert_array_equal(H, _reference_mask(np.zeros((6, m)), k))  # first k units
