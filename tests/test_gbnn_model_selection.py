"""Model selection for GBNNMemory: StoredMessagesCV, erased_recall_scorer, erase_symbols."""

import pickle
import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score, cross_validate

from sknn_gpu._backend import to_host
from sknn_gpu.memory import GBNNMemory, StoredMessagesCV, erase_symbols, erased_recall_scorer


@pytest.fixture
def messages(rng):
    """1,000 random messages of 8 symbols over 64 values: a memory well below its load limit."""
    return rng.integers(0, 64, size=(1000, 8))


# --------------------------------------------------------------------------- erase_symbols
def test_erase_symbols_erases_exactly_n_per_row_and_keeps_the_rest(messages):
    probes = erase_symbols(messages, 3, random_state=1)
    assert probes.shape == messages.shape and probes.dtype == np.int64
    np.testing.assert_array_equal((probes == -1).sum(axis=1), np.full(len(messages), 3))
    kept = probes != -1
    np.testing.assert_array_equal(probes[kept], messages[kept])
    # every column gets erased somewhere: the positions are drawn per row, not fixed
    assert (probes == -1).any(axis=0).all()
    # a fraction of the clusters erases the same positions as the count it rounds to
    np.testing.assert_array_equal(probes, erase_symbols(messages, 3 / 8, random_state=1))


def test_erase_symbols_is_seeded_and_takes_a_fraction(messages):
    a = erase_symbols(messages, 2, random_state=5)
    np.testing.assert_array_equal(a, erase_symbols(messages, 2, random_state=5))
    assert not np.array_equal(a, erase_symbols(messages, 2, random_state=6))
    # a fraction of the 8 clusters, rounded, at least one
    assert ((erase_symbols(messages, 0.5) == -1).sum(axis=1) == 4).all()
    assert ((erase_symbols(messages, 0.01) == -1).sum(axis=1) == 1).all()


@pytest.mark.parametrize(
    "n_erased, error, match",
    [
        (0, ValueError, ">= 1"),
        (-2, ValueError, ">= 1"),
        (8, ValueError, "at least one symbol must stay known"),
        (0.99, ValueError, "at least one symbol must stay known"),
        (1.0, ValueError, r"\(0, 1\)"),
        (1.5, ValueError, r"\(0, 1\)"),
        (True, TypeError, "n_erased"),
        ("2", TypeError, "n_erased"),
    ],
)
def test_erase_symbols_refuses_bad_counts(messages, n_erased, error, match):
    with pytest.raises(error, match=match):
        erase_symbols(messages, n_erased)


def test_erase_symbols_refuses_a_1d_array():
    with pytest.raises(ValueError, match="2-D"):
        erase_symbols(np.arange(5), 1)


# --------------------------------------------------------------------------- StoredMessagesCV
def test_stored_messages_cv_stores_every_row_and_probes_disjoint_parts():
    X = np.zeros((10, 3))
    cv = StoredMessagesCV(n_splits=3)
    splits = list(cv.split(X))
    assert len(splits) == cv.get_n_splits() == 3
    for train, _ in splits:
        np.testing.assert_array_equal(train, np.arange(10))
    tests = [test for _, test in splits]
    assert [t.tolist() for t in tests] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    shuffled = [test for _, test in StoredMessagesCV(3, shuffle=True, random_state=0).split(X)]
    np.testing.assert_array_equal(np.sort(np.concatenate(shuffled)), np.arange(10))
    assert [len(t) for t in shuffled] == [4, 3, 3] and shuffled[0].tolist() != [0, 1, 2, 3]
    (only,) = list(StoredMessagesCV(1).split(X))
    np.testing.assert_array_equal(only[1], np.arange(10))


def test_stored_messages_cv_probe_size_draws_rows_per_split():
    X = np.zeros((50, 3))
    for size, k in ((7, 7), (0.2, 10), (1.0, 50)):
        cv = StoredMessagesCV(4, probe_size=size, random_state=0)
        tests = [test for _, test in cv.split(X)]
        assert [len(t) for t in tests] == [k] * 4
        assert all(len(np.unique(t)) == k and t.min() >= 0 and t.max() < 50 for t in tests)
        again = [test for _, test in cv.split(X)]  # an int seed: the same splits every call
        assert all(np.array_equal(a, b) for a, b in zip(tests, again))
    draws = [test for _, test in StoredMessagesCV(2, probe_size=10, random_state=0).split(X)]
    assert not np.array_equal(draws[0], draws[1])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n_splits": 0}, "n_splits"),
        ({"n_splits": 2.5}, "n_splits"),
        ({"n_splits": True}, "n_splits"),
        ({"probe_size": 0}, "probe_size"),
        ({"probe_size": 1.5}, "probe_size"),
        ({"probe_size": 0.0}, "probe_size"),
        ({"probe_size": "all"}, "probe_size"),
    ],
)
def test_stored_messages_cv_refuses_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        StoredMessagesCV(**kwargs)


def test_stored_messages_cv_refuses_more_parts_or_probes_than_rows():
    with pytest.raises(ValueError, match="n_splits=5"):
        list(StoredMessagesCV(5).split(np.zeros((3, 2))))
    with pytest.raises(ValueError, match="probe_size=9"):
        list(StoredMessagesCV(2, probe_size=9).split(np.zeros((3, 2))))


def test_stored_messages_cv_repr():
    assert repr(StoredMessagesCV(4, probe_size=0.5)) == (
        "StoredMessagesCV(n_splits=4, probe_size=0.5, random_state=None, shuffle=False)"
    )


# --------------------------------------------------------------------------- the scorer
def test_scorer_is_the_recall_of_the_erased_stored_messages(messages):
    mem = GBNNMemory(device="cpu", random_state=0).fit(messages)
    scorer = erased_recall_scorer(5, random_state=3)
    expected = mem.score(erase_symbols(messages, 5, random_state=3), messages)
    assert 0.5 < expected < 1  # a question with some wrong answers: the score can tell settings apart
    assert scorer(mem, messages) == expected
    assert scorer(mem, messages, np.zeros(len(messages))) == expected  # y is ignored
    assert repr(scorer) == "erased_recall_scorer(n_erased=5, random_state=3)"
    again = pickle.loads(pickle.dumps(scorer))  # travels to joblib workers
    assert again(mem, messages) == expected


def test_scorer_refuses_bad_counts_when_built():
    with pytest.raises(ValueError, match=">= 1"):
        erased_recall_scorer(0)


def test_held_out_messages_score_zero_with_the_scorer_too(messages):
    """What the splitter is for: with KFold the probes come from messages never stored."""
    scores = cross_val_score(
        GBNNMemory(device="cpu", random_state=0), messages, scoring=erased_recall_scorer(2), cv=KFold(3)
    )
    np.testing.assert_array_equal(scores, np.zeros(3))
    stored = cross_val_score(
        GBNNMemory(device="cpu", random_state=0),
        messages,
        scoring=erased_recall_scorer(2),
        cv=StoredMessagesCV(3),
    )
    assert (stored > 0.95).all()


# --------------------------------------------------------------------------- GridSearchCV in one line
def test_gridsearch_gives_finite_scores_that_rank_settings_sensibly(messages):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no failed fit, no nan score
        warnings.simplefilter("ignore", ConvergenceWarning)  # max_iter=1 stops before convergence
        search = GridSearchCV(
            GBNNMemory(device="cpu", random_state=0),
            {"rule": ["sum-of-sum", "joint"], "max_iter": [1, 20]},
            scoring=erased_recall_scorer(5),
            cv=StoredMessagesCV(n_splits=3),
        ).fit(messages)
    res = search.cv_results_
    scores = dict(zip([(p["rule"], p["max_iter"]) for p in res["params"]], res["mean_test_score"]))
    assert np.isfinite(res["mean_test_score"]).all() and (res["mean_test_score"] > 0).all()
    assert scores["joint", 20] > scores["sum-of-sum", 20]  # the paper's ranking of the rules
    assert scores["joint", 20] > scores["joint", 1]  # iterations resolve ambiguous clusters
    assert search.best_params_ == {"max_iter": 20, "rule": "joint"}
    # the mean over the three probe sets is the recall over every stored message
    best = search.best_estimator_
    overall = erased_recall_scorer(5)(best, messages)
    assert search.best_score_ == pytest.approx(overall, abs=0.01)
    assert best.n_messages_seen_ == len(messages)  # refitted on every message


def test_gridsearch_over_cluster_size_and_ambiguous(messages):
    """cluster_size above the largest symbol adds neurons no message uses: the same recall;
    ambiguous='reject' answers -1 where 'guess' is sometimes right, so it ranks lower."""
    search = GridSearchCV(
        GBNNMemory(device="cpu", random_state=0),
        {"cluster_size": [64, 128], "ambiguous": ["guess", "reject"]},
        scoring=erased_recall_scorer(6),
        cv=StoredMessagesCV(2),
    ).fit(messages)
    res = search.cv_results_
    scores = {(p["cluster_size"], p["ambiguous"]): s for p, s in zip(res["params"], res["mean_test_score"])}
    assert scores[64, "guess"] == scores[128, "guess"] and scores[64, "reject"] == scores[128, "reject"]
    assert scores[64, "guess"] > scores[64, "reject"] > 0
    assert search.best_params_["ambiguous"] == "guess"


def test_cross_validate_with_several_erasure_counts(messages):
    scoring = {f"erased_{e}": erased_recall_scorer(e) for e in (2, 5, 7)}
    out = cross_validate(
        GBNNMemory(device="cpu", random_state=0), messages, scoring=scoring, cv=StoredMessagesCV(2)
    )
    means = [out[f"test_erased_{e}"].mean() for e in (2, 5, 7)]
    assert means[0] > means[1] > means[2]  # more erased symbols, fewer exact recalls


# --------------------------------------------------------------------------- device
def test_scorer_on_either_device(device, messages):
    """The probes are drawn on the host, so CuPy messages get the same probes and scores."""
    mem = GBNNMemory(device=device, random_state=0).fit(messages)
    X = messages
    if device == "cuda":
        import cupy

        X = cupy.asarray(messages)
        probes = erase_symbols(X, 4, random_state=2)
        assert isinstance(probes, cupy.ndarray)
        np.testing.assert_array_equal(to_host(probes), erase_symbols(messages, 4, random_state=2))
    cpu = GBNNMemory(device="cpu", random_state=0).fit(messages)
    assert erased_recall_scorer(4, random_state=2)(mem, X) == erased_recall_scorer(4, random_state=2)(
        cpu, messages
    )
