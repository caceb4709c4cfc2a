"""GBNNMemory: properties on random memories (hypothesis) and a table of bad inputs per device.

Properties: a stored message is a fixed point of every rule (gamma > 0); with random
erasures, sum-of-max and joint keep every stored message among their candidates, keep the
known symbols and return the stored message whenever no cluster is ambiguous; results do
not depend on batching, order, dtype or memory layout. The bad-input table runs once per
device (the cuda twin passes CuPy arrays).
"""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.exceptions import NotFittedError

from sknn_gpu._backend import InsufficientMemoryError, to_host
from sknn_gpu.memory import GBNNMemory

# Each new (C, L, rule) compiles a kernel on the GPU twin: fewer examples where the device varies
# (and conftest gives the cuda twin a quarter of them).
SETTINGS = settings(max_examples=30)
CPU_SETTINGS = settings(max_examples=80)


# --------------------------------------------------------------------------- helpers
@st.composite
def memories(draw, max_c=6, max_l=40, max_m=60):
    """(messages, probes, truth, L, seed): random stored messages and erased copies of some."""
    C = draw(st.integers(1, max_c))
    L = draw(st.integers(1, max_l))
    M = draw(st.integers(1, max_m))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    msgs = rng.integers(0, L, size=(M, C))
    truth = msgs[rng.integers(0, M, size=draw(st.integers(1, 40)))]
    probes = truth.copy()
    probes[rng.random(probes.shape) < draw(st.floats(0.0, 1.0))] = -1
    return msgs, probes, truth, L, seed


def _is_clique(W, m, C, L):
    """Per row of ``m`` (K, C), True when its neurons are pairwise connected in W (host)."""
    Lw = (L + 31) // 32
    ok = (m >= 0).all(axis=1)
    mm = np.where(m >= 0, m, 0)
    for c in range(C):
        for c2 in range(C):
            if c != c2:
                word = W[c * L + mm[:, c], c2 * Lw + (mm[:, c2] >> 5)]
                ok &= ((word >> (mm[:, c2] & 31).astype(np.uint32)) & 1) == 1
    return ok


def _to(device, X):
    if device == "cuda" and isinstance(X, np.ndarray) and X.dtype.kind in "biufc":
        import cupy

        return cupy.asarray(X)
    if device == "cuda" and sp.issparse(X):
        import cupyx.scipy.sparse as csp

        return csp.csr_matrix(X)
    return X


# --------------------------------------------------------------------------- properties
@SETTINGS
@given(
    case=memories(), rule=st.sampled_from(["sum-of-sum", "sum-of-max", "joint"]), gamma=st.floats(0.1, 4.0)
)
def test_stored_messages_are_fixed_points(device, case, rule, gamma):
    msgs, _, _, L, seed = case
    mem = GBNNMemory(rule=rule, gamma=gamma, cluster_size=L, random_state=seed, device=device).fit(msgs)
    res = mem.retrieve(msgs)
    assert np.array_equal(to_host(res.messages), msgs)
    assert (to_host(res.n_candidates) == 1).all() and to_host(res.converged).all()


@SETTINGS
@given(case=memories(), rule=st.sampled_from(["sum-of-max", "joint"]), gamma=st.floats(0.01, 4.0))
def test_erased_stored_messages_are_retrieved(device, case, rule, gamma):
    msgs, probes, truth, L, seed = case
    C = msgs.shape[1]
    mem = GBNNMemory(rule=rule, gamma=gamma, max_iter=10 * C * L + 2, cluster_size=L, random_state=seed)
    res = mem.set_params(device=device).fit(msgs).retrieve(probes)
    out, cand = to_host(res.messages), to_host(res.n_candidates)
    assert to_host(res.converged).all()
    # the true clique survives: no cluster is left empty, known symbols are kept
    assert (cand >= 1).all() and (out >= 0).all()
    known = probes >= 0
    assert np.array_equal(out[known], probes[known])
    # unambiguous probes give back the stored message exactly
    sure = (cand == 1).all(axis=1)
    assert np.array_equal(out[sure], truth[sure])
    # ambiguous ones give a stored clique (or a spurious clique of W), never a mix of cliques
    assert _is_clique(to_host(mem.W_), out, C, L).all()


@CPU_SETTINGS
@given(case=memories(max_c=5, max_l=12), rule=st.sampled_from(["sum-of-sum", "sum-of-max", "joint"]))
def test_predict_is_invariant_to_batching_order_and_input_layout(case, rule):
    msgs, probes, _, L, seed = case
    rng = np.random.default_rng(seed)
    mem = GBNNMemory(rule=rule, cluster_size=L, random_state=seed, device="cpu").fit(msgs)
    full = mem.retrieve(probes)
    cuts = np.sort(rng.integers(0, len(probes) + 1, size=3))
    parts = [mem.predict(p) for p in np.split(probes, cuts) if len(p)]
    assert np.array_equal(np.vstack(parts), full.messages)
    perm = rng.permutation(len(probes))
    assert np.array_equal(mem.predict(probes[perm]), full.messages[perm])
    # dtypes, Fortran order, strided and read-only views give the same answer
    wide = np.zeros((probes.shape[0], 2 * probes.shape[1]), dtype=np.int64)
    wide[:, ::2] = probes
    frozen = probes.copy()
    frozen.flags.writeable = False
    for X in (
        probes.astype(np.int16),
        probes.astype(np.float32),
        np.asfortranarray(probes),
        wide[:, ::2],
        frozen,
    ):
        assert np.array_equal(mem.predict(X), full.messages)
    # storing is a function of the set of messages, whatever their dtype and order
    other = GBNNMemory(rule=rule, cluster_size=L, random_state=seed, device="cpu")
    other.fit(np.asfortranarray(msgs[rng.permutation(len(msgs))]).astype(np.float64))
    assert np.array_equal(other.W_, mem.W_)
    # serial decoding (one probe at a time) gives the same results as parallel decoding
    ser = mem.retrieve(probes, decoding="serial")
    for name in ("messages", "n_candidates", "n_iter", "converged"):
        assert np.array_equal(getattr(ser, name), getattr(full, name)), name


@CPU_SETTINGS
@given(
    C=st.integers(1, 4),
    L=st.sampled_from([1, 2, 31, 32, 33, 64, 65, 300]),
    M=st.integers(1, 5),
    seed=st.integers(0, 2**16),
)
def test_extreme_shapes_round_trip(C, L, M, seed):
    # one-symbol alphabets, one cluster, word-boundary alphabet sizes, symbols at L - 1
    rng = np.random.default_rng(seed)
    msgs = rng.integers(0, L, size=(M, C))
    msgs[0] = L - 1
    mem = GBNNMemory(cluster_size=L, random_state=seed, device="cpu").fit(msgs)
    assert np.array_equal(mem.predict(msgs), msgs)
    everything_erased = mem.retrieve(np.full((1, C), -1))
    # with nothing known every stored message matches; the answer is one of them (or a clique of W)
    assert _is_clique(mem.W_, everything_erased.messages, C, L).all()


# --------------------------------------------------------------------------- bad inputs
F = np.array([[0, 1, 2, 3], [3, 2, 1, 0]] * 2)  # 4 stored messages of 4 symbols in [0, 16)

FIT_CASES = [
    (
        "non-integer float",
        {},
        np.array([[0, 1, 2], [3, 4, 5.5]]),
        ValueError,
        r"non-integer values such as 5\.5",
    ),
    ("NaN", {}, np.array([[0, 1, 2], [3, np.nan, 5]]), ValueError, "NaN"),
    ("infinity", {}, np.array([[0, 1, np.inf]]), ValueError, "infinity"),
    ("negative symbol", {}, np.array([[0, 1, -1]]), ValueError, r"Negative values .*\(-1\)"),
    ("no rows", {}, np.empty((0, 3)), ValueError, "0 sample|at least one sample"),
    ("no columns", {}, np.empty((3, 0), dtype=np.int64), ValueError, "0 feature|one feature"),
    ("1-D", {}, np.array([0, 1, 2]), ValueError, "2D array"),
    ("3-D", {}, np.zeros((2, 3, 4), dtype=np.int64), ValueError, "dim 3|2D array"),
    ("complex", {}, np.array([[0, 1j]]), ValueError, "omplex|numeric"),
    ("strings", {}, np.array([["a", "b"]]), ValueError, "numeric|could not convert"),
    ("sparse", {}, sp.csr_matrix(np.eye(3)), TypeError, "[Ss]parse"),
    ("n_clusters mismatch", {"n_clusters": 5}, F, ValueError, r"4 clusters .* n_clusters=5"),
    ("symbol >= cluster_size", {"cluster_size": 3}, F, ValueError, r"symbol 3, but cluster_size=3"),
    ("symbol beyond int32", {}, np.array([[0, 2**40]]), ValueError, r"symbol 1099511627776.*2\*\*31 - 1"),
    ("huge float symbol", {}, np.array([[0, 1e300]]), ValueError, r"symbol 1e\+300"),
    ("oversize memory", {"cluster_size": 10**9}, F, InsufficientMemoryError, r"fit of 4 messages.*needs \d+"),
    ("gamma < 0", {"gamma": -1.0}, F, ValueError, "'gamma' parameter"),
    ("max_iter = 0", {"max_iter": 0}, F, ValueError, "'max_iter' parameter"),
    ("unknown rule", {"rule": "sum"}, F, ValueError, "'rule' parameter"),
    ("unknown device", {"device": "gpu"}, F, ValueError, "'device' parameter"),
    ("n_clusters = 0", {"n_clusters": 0}, F, ValueError, "'n_clusters' parameter"),
    ("fractional cluster_size", {"cluster_size": 2.5}, F, ValueError, "'cluster_size' parameter"),
    ("cluster_size > 2**31 - 1", {"cluster_size": 2**31}, F, ValueError, "'cluster_size' parameter"),
    ("verbose < 0", {"verbose": -1}, F, ValueError, "'verbose' parameter"),
    ("unknown output_type", {"output_type": "torch"}, F, ValueError, "'output_type' parameter"),
]

FITTED_CASES = [
    ("predict", "symbol >= cluster_size_", np.array([[0, 1, 2, 16]]), ValueError, "cluster_size_ is 16"),
    ("predict", "value below -1", np.array([[0, 1, 2, -2]]), ValueError, ">= -1"),
    ("predict", "wrong number of columns", np.array([[0, 1, 2]]), ValueError, "4 features"),
    ("predict", "non-integer float", np.array([[0, 1, 2, 0.25]]), ValueError, "non-integer"),
    ("predict", "NaN", np.array([[0, 1, 2, np.nan]]), ValueError, "NaN"),
    ("predict", "no rows", np.empty((0, 4)), ValueError, "0 sample|at least one sample"),
    ("retrieve", "1-D", np.array([0, 1, 2, 3]), ValueError, "2D array"),
    ("retrieve", "unknown decoding", (np.array([[0, 1, 2, -1]]), "batch"), ValueError, "decoding"),
    ("partial_fit", "symbol >= cluster_size_", np.array([[0, 1, 2, 17]]), ValueError, "cluster_size_ is 16"),
    ("partial_fit", "erased symbol", np.array([[0, 1, 2, -1]]), ValueError, "Negative values"),
    ("partial_fit", "wrong number of columns", np.array([[0, 1, 2, 3, 4]]), ValueError, "4 features"),
    ("score", "shape mismatch", (np.array([[0, 1, 2, -1]]), F[:2]), ValueError, "shape"),
    ("score", "no y (cross-validation without y)", (np.array([[0, 1, 2, -1]]), None), ValueError, "needs y"),
]


@pytest.mark.parametrize("what, params, X, exc, match", FIT_CASES, ids=[c[0] for c in FIT_CASES])
def test_bad_fit_input_is_refused(device, what, params, X, exc, match):
    # on the GPU too a size no device holds is named as such, before the shared-memory limit
    mem = GBNNMemory(device=device).set_params(**params)
    with pytest.raises(exc, match=match):
        mem.fit(_to(device, X))
    assert not hasattr(mem, "W_")


@pytest.mark.parametrize(
    "method, what, X, exc, match", FITTED_CASES, ids=[f"{c[0]}-{c[1]}" for c in FITTED_CASES]
)
def test_bad_input_to_a_fitted_memory_is_refused(device, method, what, X, exc, match):
    mem = GBNNMemory(device=device, cluster_size=16, random_state=0).fit(_to(device, F))
    W = to_host(mem.W_).copy()
    with pytest.raises(exc, match=match):
        if method == "score":
            mem.score(_to(device, X[0]), X[1])
        elif method == "retrieve" and isinstance(X, tuple):
            mem.retrieve(_to(device, X[0]), decoding=X[1])
        else:
            getattr(mem, method)(_to(device, X))
    assert np.array_equal(to_host(mem.W_), W) and mem.n_messages_seen_ == len(F)


def test_work_beyond_free_memory_is_refused_on_every_device(device, monkeypatch):
    from sknn_gpu import _backend

    mem = GBNNMemory(device=device, cluster_size=16, random_state=0).fit(_to(device, F))
    monkeypatch.setattr(_backend, "free_memory", lambda dev, need=None: 100)  # 100 bytes free everywhere
    match = r"retrieve of 4 probes .* needs \d+ bytes .* only 100 bytes"
    with pytest.raises(InsufficientMemoryError, match=match):
        mem.predict(_to(device, F))
    with pytest.raises(InsufficientMemoryError, match="partial_fit of 4 messages"):
        mem.partial_fit(_to(device, F))
    with pytest.raises(InsufficientMemoryError, match="fit of 4 messages"):
        GBNNMemory(device=device, cluster_size=16).fit(_to(device, F))
    assert mem.n_messages_seen_ == len(F)


def test_unfitted_memory_refuses_to_predict(device):
    with pytest.raises(NotFittedError):
        GBNNMemory(device=device).predict(_to(device, F))
