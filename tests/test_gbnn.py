"""GBNNMemory: storing, the three retrieval rules, the paper's examples, CPU/GPU parity."""

import logging
import pickle
import re

import numpy as np
import pytest
from sklearn.model_selection import GridSearchCV, cross_val_score

from sknn_gpu._backend import InsufficientMemoryError, to_host
from sknn_gpu.memory import (
    GBNNMemory,
    _gbnn_cpu,
    erased_recall_scorer,
    erasure_error_rate,
    theoretical_density,
)
from sknn_gpu.memory._capacity import gbnn_bytes
from sknn_gpu.memory._gbnn_cpu import _unpack

RULES = ["sum-of-sum", "sum-of-max", "joint"]


def _erase(msgs, n_erased, rng):
    """Copy of msgs with n_erased random symbols per row set to -1."""
    P = msgs.copy()
    order = np.argsort(rng.random(P.shape), axis=1)[:, :n_erased]
    np.put_along_axis(P, order, -1, axis=1)
    return P


def _dense_adjacency(mem):
    """Unpacked (n, n) 0/1 adjacency of a fitted memory (host)."""
    C, L = mem.n_clusters_, mem.cluster_size_
    W = to_host(mem.W_)
    Lw = (L + 31) // 32
    bits = _unpack(W.reshape(-1, C, Lw)).reshape(C * L, C, 32 * Lw)[:, :, :L]
    return bits.reshape(C * L, C * L)


# --------------------------------------------------------------------------- storing
def test_store_builds_cliques_without_intra_cluster_edges(device, rng):
    C, L = 5, 20
    msgs = rng.integers(0, L, size=(30, C))
    mem = GBNNMemory(device=device, cluster_size=L).fit(msgs)
    A = _dense_adjacency(mem)
    expected = np.zeros_like(A)
    for m in msgs:
        idx = np.arange(C) * L + m
        expected[np.ix_(idx, idx)] = 1
    np.fill_diagonal(expected, 0)
    assert (A == expected).all()
    assert (A == A.T).all()
    for c in range(C):  # no edge inside a cluster
        assert not A[c * L : (c + 1) * L, c * L : (c + 1) * L].any()
    assert mem.density_ == pytest.approx(A.sum() / (C * (C - 1) * L * L))
    assert mem.n_messages_seen_ == 30 and mem.n_clusters_ == C and mem.cluster_size_ == L


def test_partial_fit_is_order_independent_and_idempotent(device, rng):
    C, L = 6, 40
    msgs = rng.integers(0, L, size=(300, C))
    ref = GBNNMemory(device=device, cluster_size=L).fit(msgs)
    perm = rng.permutation(len(msgs))
    inc = GBNNMemory(device=device, cluster_size=L)
    for chunk in np.array_split(msgs[perm], 4):
        inc.partial_fit(chunk)
    inc.partial_fit(msgs[:50])  # storing again changes nothing
    assert np.array_equal(np.asarray(_dense_adjacency(ref)), np.asarray(_dense_adjacency(inc)))
    assert inc.density_ == ref.density_
    assert inc.n_messages_seen_ == 350


def test_density_matches_theory_within_one_percent(rng):
    C, L, M = 8, 128, 5000
    mem = GBNNMemory(device="cpu").fit(rng.integers(0, L, size=(M, C)))
    theo = theoretical_density(M, L)
    assert abs(mem.density_ - theo) / theo < 0.01


def test_one_step_error_rate_matches_measurement(rng):
    # P_e = 1 - (1 - d^(C-e))^(e(L-1)): probability that the joint rule's first step leaves
    # some erased cluster with more than one candidate.
    C, L, M, e, K = 8, 128, 5000, 3, 3000
    msgs = rng.integers(0, L, size=(M, C))
    mem = GBNNMemory(device="cpu", rule="joint", max_iter=1).fit(msgs)
    probes = _erase(msgs[:K], e, rng)
    res = mem.retrieve(probes)
    measured = res.ambiguous.mean()
    predicted = erasure_error_rate(mem.density_, C, e, L)
    assert 0.2 < predicted < 0.6
    # The formula treats the C-e edges of a wrong neuron as independent; they share the
    # number of stored messages through that neuron, which (Jensen) makes the measured rate
    # slightly higher (about +0.06 here), never lower.
    assert predicted - 0.02 < measured < predicted + 0.12


def test_closed_form_helpers():
    assert theoretical_density(0, 64) == 0.0
    assert theoretical_density(1, 4) == pytest.approx(1 / 16)
    d = theoretical_density(np.array([10, 1000]), 32)
    assert d.shape == (2,) and d[0] < d[1] < 1
    assert erasure_error_rate(0.0, 8, 3, 64) == 0.0
    assert erasure_error_rate(0.5, 4, 2, 2) == pytest.approx(1 - (1 - 0.25) ** 2)
    with pytest.raises(ValueError):
        erasure_error_rate(1.5, 4, 2, 8)


# --------------------------------------------------------------------------- the paper's example (V-A)
# Four messages (1,1,1), (2,2,1), (3,2,1), (1,3,1) over C = L = 3 (0-based below), probe (?, ?, 1).
PAPER_MSGS = np.array([[0, 0, 0], [1, 1, 0], [2, 1, 0], [0, 2, 0]])
PAPER_PROBE = np.array([[-1, -1, 0]])


@pytest.mark.parametrize(
    "max_iter, counts", [(1, [3, 3, 1]), (2, [1, 1, 1]), (3, [3, 3, 1]), (20, [1, 1, 1])]
)
def test_sum_of_sum_oscillates_with_gamma_1(device, max_iter, counts):
    mem = GBNNMemory(rule="sum-of-sum", gamma=1.0, max_iter=max_iter, device=device).fit(PAPER_MSGS)
    res = mem.retrieve(PAPER_PROBE)
    assert res.n_candidates.tolist() == [counts]
    assert not res.converged[0] and res.n_iter[0] == max_iter
    if counts == [1, 1, 1]:  # v^2 of the paper: neurons 1, 5, 7, a message that was never stored
        assert res.messages.tolist() == [[0, 1, 0]]


def test_sum_of_sum_converges_with_gamma_2(device):
    mem = GBNNMemory(rule="sum-of-sum", gamma=2.0, max_iter=20, device=device).fit(PAPER_MSGS)
    res = mem.retrieve(PAPER_PROBE)
    assert res.converged[0] and res.n_iter[0] < 20


@pytest.mark.parametrize("rule", ["sum-of-max", "joint"])
@pytest.mark.parametrize("gamma", [0.5, 1.0, 2.0])
def test_sum_of_max_and_joint_converge_to_the_clique_ensemble(device, rule, gamma):
    mem = GBNNMemory(rule=rule, gamma=gamma, device=device, random_state=0).fit(PAPER_MSGS)
    res = mem.retrieve(PAPER_PROBE)
    assert res.converged[0]
    assert res.n_candidates.tolist() == [[3, 3, 1]]  # every stored message matches the probe
    assert to_host(res.messages)[0].tolist() in PAPER_MSGS.tolist()


@pytest.mark.parametrize("rule", ["sum-of-max", "joint"])
def test_ambiguous_probe_returns_a_stored_message(device, rule):
    # Section V-A: "the retrieval rule returns an arbitrary stored message matching the input".
    # Picking each cluster on its own returned (3, 1, 1) (0-based [2, 0, 0]) for some seeds.
    answers = set()
    for seed in range(40):
        mem = GBNNMemory(rule=rule, random_state=seed, device=device).fit(PAPER_MSGS)
        answers.add(tuple(to_host(mem.predict(PAPER_PROBE))[0]))
    assert answers == {tuple(m) for m in PAPER_MSGS.tolist()}  # only stored ones, each reachable


def _cycle_messages(known, filler):
    """Messages whose cliques make a 6-cycle p1-q1-r1-p2-q2-r2-p1 over symbols 1, 2 of the last
    three clusters, each edge from its own message (``known`` leads the row; ``filler`` fills the
    third cluster): every cycle neuron is connected to one neuron of each other cycle cluster,
    but no three of them form a triangle."""
    f = filler
    tails = [(1, 1, f), (f, 1, 1), (2, f, 1), (2, 2, f), (f, 2, 2), (1, f, 2)]
    return [tuple(known) + t for t in tails]


def _links(known, filler):
    """Messages connecting ``known`` to each of the six cycle neurons, with fillers elsewhere."""
    f = filler
    tails = [(1, f, f), (2, f, f), (f, 1, f), (f, 2, f), (f, f, 1), (f, f, 2)]
    return [tuple(known) + t for t in tails]


# The sum-of-max state of the probe (0, 0, 0, ?, ?, ?) holds the cycle, connected to all three
# known neurons (through different messages), and no clique.
CYCLE_MSGS = np.array(
    _cycle_messages((0, 3, 3), 3)
    + _links((4, 0, 4), 8)
    + _links((4, 4, 0), 8)
    + [(0, 0, 5, 9, 9, 9), (0, 6, 0, 10, 10, 10), (7, 0, 0, 11, 11, 11)]  # the known neurons' edges
)


@pytest.mark.parametrize("rule", ["sum-of-max", "joint"])
def test_state_without_a_clique_gives_minus_one(device, rule):
    for seed in range(6):
        mem = GBNNMemory(rule=rule, cluster_size=12, random_state=seed, device=device).fit(CYCLE_MSGS)
        res = mem.retrieve(np.array([[0, 0, 0, -1, -1, -1]]))
        assert to_host(res.n_candidates).tolist() == [[1, 1, 1, 2, 2, 2]] and bool(res.converged[0])
        assert to_host(res.messages).tolist() == [[-1] * 6]  # no stored (or spurious) clique matches


@pytest.mark.parametrize("rule", ["sum-of-max", "joint"])
def test_search_backs_out_of_a_branch_without_clique(device, rule):
    # Probe (0, 0, ?, ?, ?, ?): cluster 2 holds the stored message's neuron 1 and neuron 2, which is
    # connected to the clique-free cycle of clusters 3-5 and to nothing of the stored clique.
    # Clamping neuron 2 first leaves a non-empty state without any clique, so a search that never
    # undoes a clamp that did not empty the state would end with nothing.
    msgs = np.array(_cycle_messages((0, 3, 2), 3) + _links((8, 0, 2), 8) + [(0, 0, 1, 7, 7, 7)])
    probe = np.array([[0, 0, -1, -1, -1, -1]])
    for seed in range(12):
        mem = GBNNMemory(rule=rule, cluster_size=10, random_state=seed, device=device).fit(msgs)
        res = mem.retrieve(probe)
        assert to_host(res.n_candidates).tolist() == [[1, 1, 2, 3, 3, 3]]
        assert to_host(res.messages).tolist() == [[0, 0, 1, 7, 7, 7]], seed


# --------------------------------------------------------------------------- retrieval
@pytest.mark.parametrize("rule", RULES)
def test_completes_stored_messages(device, rule, rng):
    C, L = 8, 64
    msgs = rng.integers(0, L, size=(300, C))
    mem = GBNNMemory(rule=rule, device=device, random_state=0).fit(msgs)
    probes = _erase(msgs, 3, rng)
    out = mem.predict(probes)
    assert isinstance(out, np.ndarray) and out.shape == msgs.shape and out.dtype == np.int32
    assert mem.score(probes, msgs) > 0.95
    assert mem.score(msgs, msgs) == 1.0  # an intact stored message is a fixed point


# --------------------------------------------------------------------------- the paper's equations, literally
def _literal_adjacency(msgs, C, L):
    """w[(c, l), (c2, l2)] of eq. 1, straight from the stored messages (4-D, bool)."""
    w = np.zeros((C, L, C, L), dtype=bool)
    for m in msgs:
        for c in range(C):
            for c2 in range(C):
                if c != c2:
                    w[c, m[c], c2, m[c2]] = True
    return w


def _literal_retrieve(w, probe, rule, gamma, max_iter):
    """Eqs. 3-5 (sum-of-sum) or 6-7 (sum-of-max) as printed, one probe: (v (C, L), t, converged)."""
    C, L = w.shape[:2]
    v = np.zeros((C, L), dtype=bool)
    for c in range(C):
        if probe[c] >= 0:
            v[c, probe[c]] = True
        elif rule == "sum-of-max":
            v[c, :] = True  # sum-of-max starts with the erased clusters all on
    for t in range(1, max_iter + 1):
        new = _literal_step(w, v, rule, gamma)
        if (new == v).all():
            return v, t, True
        v = new
    return v, max_iter, False


def _literal_step(w, v, rule, gamma):
    C = w.shape[0]
    signal = v[:, :, None, None] & w  # v_{c'l'} w_{(c'l')(cl)}, indexed [c', l', c, l]
    if rule == "sum-of-sum":
        s = gamma * v + signal.sum(axis=(0, 1))  # eq. 3
        return s == s.max(axis=1, keepdims=True)  # eqs. 4-5
    s = gamma * v + signal.any(axis=1).sum(axis=0)  # eq. 6: sum over c' of max over l'
    return s == gamma + (C - 1)  # eq. 7


@pytest.mark.parametrize("rule, gamma", [("sum-of-max", 1.0), ("sum-of-max", 0.5), ("sum-of-max", 0.0)])
@pytest.mark.parametrize("C, L, M", [(4, 6, 12), (5, 8, 40), (3, 3, 4)])
def test_sum_of_max_is_eqs_6_7(rule, gamma, C, L, M, rng):
    _compare_with_literal(rule, gamma, C, L, M, rng)


@pytest.mark.parametrize("gamma", [0.0, 1.0, 2.5])
def test_sum_of_sum_is_eqs_3_5(gamma, rng):
    _compare_with_literal("sum-of-sum", gamma, 5, 8, 40, rng)


def _compare_with_literal(rule, gamma, C, L, M, rng):
    msgs = rng.integers(0, L, size=(M, C))
    probes = np.vstack([_erase(msgs[: 2 * C], e, rng) for e in range(1, C + 1)])
    probes = np.vstack([probes, _erase(rng.integers(0, L, size=(10, C)), 1, rng)])  # unexplained ones
    w = _literal_adjacency(msgs, C, L)
    mem = GBNNMemory(rule=rule, gamma=gamma, max_iter=12, cluster_size=L, device="cpu").fit(msgs)
    assert np.array_equal(_dense_adjacency(mem).reshape(C, L, C, L), w)
    res = mem.retrieve(probes)
    # the packed state itself, from the CPU engine's rule loop
    V, n_iter, conv = _gbnn_cpu._retrieve_chunk(mem.W_, probes, rule, gamma, 12, L)
    state = _unpack(V.reshape(len(probes), -1)).reshape(len(probes), C, -1)[:, :, :L].astype(bool)
    for k, p in enumerate(probes):
        v, t, ok = _literal_retrieve(w, p, rule, gamma, 12)
        assert np.array_equal(state[k], v), k
        assert (res.n_iter[k], res.converged[k]) == (t, ok) == (n_iter[k], conv[k]), k
        assert res.n_candidates[k].tolist() == v.sum(axis=1).tolist(), k
        if (v.sum(axis=1) == 1).all():
            assert res.messages[k].tolist() == v.argmax(axis=1).tolist(), k


def _literal_algorithm_2(w, probe, max_iter):
    """Algorithm 2 as printed: one sum-of-sum step keeps the erased-cluster neurons with C - e
    signals, then BAIL-OUT-EARLY updates the neurons of erased clusters only, until they stop
    changing (line 13 checks erased clusters only)."""
    C, L = w.shape[:2]
    known = probe >= 0
    v = np.zeros((C, L), dtype=bool)
    v[known, probe[known]] = True
    s0 = (v[:, :, None, None] & w).sum(axis=(0, 1))
    v[~known] = s0[~known] == known.sum()
    for _ in range(max_iter):
        ok = (v[:, :, None, None] & w).any(axis=1)  # [c', c, l]: a signal from cluster c'
        ok[np.arange(C), np.arange(C)] = True  # own cluster: the self loop
        new = v & ok.all(axis=0)
        new[known] = v[known]
        if (new == v).all():
            break
        v = new
    return v


def test_joint_differs_from_algorithm_2_as_printed_only_by_its_final_check(rng):
    # Our joint rule ends with one full BAIL-OUT-EARLY pass (known clusters too), so it equals
    # sum-of-max; Algorithm 2 as printed never checks the known neurons, so a probe whose known
    # symbols are not all connected keeps them and completes the erased ones.
    C, L, M = 6, 8, 60
    msgs = rng.integers(0, L, size=(M, C))
    probes = np.vstack([_erase(msgs[:30], 3, rng), _erase(rng.integers(0, L, size=(30, C)), 2, rng)])
    w = _literal_adjacency(msgs, C, L)
    joint = GBNNMemory(rule="joint", cluster_size=L, max_iter=50, device="cpu").fit(msgs).retrieve(probes)
    n_differ = 0
    for k, p in enumerate(probes):
        printed = _literal_algorithm_2(w, p, 50)
        som, _, _ = _literal_retrieve(w, p, "sum-of-max", 1.0, 50)
        assert joint.n_candidates[k].tolist() == som.sum(axis=1).tolist(), k  # ours == eqs. 6-7
        if not np.array_equal(printed, som):
            n_differ += 1
            # where they differ, the printed algorithm stopped at a state that eq. 7 would change
            assert not np.array_equal(_literal_step(w, printed, "sum-of-max", 1.0), printed), k
    assert n_differ >= 5  # the foreign probes


def test_joint_equals_sum_of_max_probe_by_probe_near_capacity(rng):
    C, L, M = 8, 32, 700  # density ~0.5: many spurious candidates and ambiguous probes
    msgs = rng.integers(0, L, size=(M, C))
    stored = _erase(msgs[:400], 4, rng)
    foreign = _erase(rng.integers(0, L, size=(200, C)), 3, rng)  # mostly unexplained probes
    probes = np.vstack([stored, foreign])
    som = GBNNMemory(rule="sum-of-max", device="cpu", random_state=7, max_iter=100).fit(msgs)
    joint = GBNNMemory(rule="joint", device="cpu", random_state=7, max_iter=100).fit(msgs)
    a, b = som.retrieve(probes), joint.retrieve(probes)
    assert a.converged.all() and b.converged.all()
    assert np.array_equal(a.n_candidates, b.n_candidates)
    assert np.array_equal(a.messages, b.messages)
    assert a.ambiguous.mean() > 0.1  # the comparison exercised ties
    assert (a.messages == -1).all(axis=1).mean() > 0.1  # and collapsed (unexplained) probes
    assert b.n_iter.mean() <= a.n_iter.mean()


def test_sum_of_max_beats_sum_of_sum_with_many_erasures(rng):
    C, L, M = 8, 128, 5000
    msgs = rng.integers(0, L, size=(M, C))
    probes = _erase(msgs[:1000], 5, rng)
    sos = GBNNMemory(rule="sum-of-sum", device="cpu", random_state=0).fit(msgs)
    som = GBNNMemory(rule="sum-of-max", device="cpu", random_state=0).fit(msgs)
    assert som.score(probes, msgs[:1000]) > sos.score(probes, msgs[:1000]) + 0.1


def test_ties_are_picked_among_candidates_deterministically(rng):
    L = 8
    msgs = np.array([[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 3, 6]])
    probes = np.array([[1, 2, 3, -1]] * 3 + [[1, 2, -1, -1]])
    mem = GBNNMemory(rule="joint", cluster_size=L, device="cpu", random_state=0).fit(msgs)
    res = mem.retrieve(probes)
    assert res.n_candidates[0].tolist() == [1, 1, 1, 3]
    assert set(res.messages[:, 3].tolist()) <= {4, 5, 6}
    assert len(set(res.messages[:3, 3].tolist())) == 1  # same probe, same pick
    picks = {
        int(GBNNMemory(rule="joint", device="cpu", random_state=s).fit(msgs).predict(probes[:1])[0, 3])
        for s in range(40)
    }
    assert picks == {4, 5, 6}  # the seed decides, over all candidates


def test_prediction_invariant_to_probe_order_and_batching(rng):
    C, L = 6, 16
    msgs = rng.integers(0, L, size=(150, C))  # dense: many ties
    probes = _erase(msgs, 3, rng)
    mem = GBNNMemory(device="cpu", rule="sum-of-max", random_state=3).fit(msgs)
    full = mem.predict(probes)
    perm = rng.permutation(len(probes))
    assert np.array_equal(mem.predict(probes[perm]), full[perm])
    assert np.array_equal(mem.predict(probes[:17]), full[:17])


@pytest.mark.parametrize("rule", RULES)
def test_serial_decoding_gives_the_parallel_results(device, rule, rng):
    C, L = 6, 16
    msgs = rng.integers(0, L, size=(120, C))  # dense: ties and ambiguous probes
    probes = np.vstack([_erase(msgs[:40], 3, rng), _erase(rng.integers(0, L, size=(10, C)), 2, rng)])
    mem = GBNNMemory(device=device, rule=rule, random_state=1).fit(msgs)
    a, b = mem.retrieve(probes), mem.retrieve(probes, decoding="serial")
    for name in ("messages", "n_candidates", "n_iter", "converged"):
        assert np.array_equal(to_host(getattr(a, name)), to_host(getattr(b, name))), name
    assert a.ambiguous.any()


def test_converged_per_iter_accumulates_fig_13b(rng):
    C, L = 8, 64
    msgs = rng.integers(0, L, size=(600, C))
    probes = np.vstack([_erase(msgs[:300], e, rng) for e in (2, 4, 6)])
    res = GBNNMemory(device="cpu", rule="sum-of-max", max_iter=20).fit(msgs).retrieve(probes)
    acc = res.converged_per_iter
    assert len(acc) == res.n_iter.max() and len(set(res.n_iter.tolist())) > 2
    for t in range(1, len(acc) + 1):
        assert acc[t - 1] == np.sum(res.converged & (res.n_iter <= t))
    assert acc[-1] == res.converged.sum() and (np.diff(acc) >= 0).all()
    osc = GBNNMemory(device="cpu", rule="sum-of-sum", max_iter=5).fit(PAPER_MSGS).retrieve(PAPER_PROBE)
    assert osc.converged_per_iter.tolist() == [0, 0, 0, 0, 0]  # the oscillating probe never converges


def test_unexplained_probe_gives_minus_one(device):
    msgs = np.array([[0, 0, 0], [1, 1, 1]])
    mem = GBNNMemory(device=device, rule="joint").fit(msgs)
    res = mem.retrieve(np.array([[0, 1, -1]]))  # (0, 1) is not part of any clique
    assert res.messages.tolist() == [[-1, -1, -1]] and res.n_candidates.tolist() == [[0, 0, 0]]
    som = GBNNMemory(device=device, rule="sum-of-max").fit(msgs).retrieve(np.array([[0, 1, -1]]))
    assert som.messages.tolist() == [[-1, -1, -1]] and som.converged[0]


def test_integer_valued_floats_are_accepted(rng):
    msgs = rng.integers(0, 10, size=(20, 4))
    a = GBNNMemory(device="cpu", random_state=0).fit(msgs)
    b = GBNNMemory(device="cpu", random_state=0).fit(msgs.astype(np.float64))
    p = _erase(msgs, 1, rng)
    assert np.array_equal(a.predict(p), b.predict(p.astype(np.float32)))


def test_pickle_round_trip(rng):
    msgs = rng.integers(0, 30, size=(100, 5))
    mem = GBNNMemory(device="cpu", random_state=1).fit(msgs)
    back = pickle.loads(pickle.dumps(mem))
    p = _erase(msgs, 2, rng)
    assert np.array_equal(back.predict(p), mem.predict(p))


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "X, match",
    [
        (np.array([[0, 1, 2], [3, 4, 5.5]]), "non-integer"),
        (np.array([[0, 1, 2], [3, np.nan, 5]]), "NaN"),
        (np.array([[0, 1, -1]]), "Negative values"),
        (np.empty((0, 3)), "0 sample"),
        (np.array([["a", "b"]]), "could not convert|dtype|numeric"),
    ],
)
def test_bad_messages_are_refused(X, match):
    with pytest.raises(ValueError, match=match):
        GBNNMemory(device="cpu").fit(X)


def test_bad_probes_are_refused(rng):
    mem = GBNNMemory(device="cpu", cluster_size=16).fit(rng.integers(0, 16, size=(10, 4)))
    with pytest.raises(ValueError, match="cluster_size_ is 16"):
        mem.predict(np.array([[0, 1, 2, 16]]))
    with pytest.raises(ValueError, match=">= -1"):
        mem.predict(np.array([[0, 1, 2, -2]]))
    with pytest.raises(ValueError, match="4 features|n_clusters"):
        mem.predict(np.array([[0, 1, 2]]))
    with pytest.raises(ValueError, match="non-integer"):
        mem.predict(np.array([[0, 1, 2, 0.25]]))
    with pytest.raises(ValueError, match="NaN"):
        mem.predict(np.array([[0, 1, 2, np.nan]]))
    with pytest.raises(ValueError, match="shape"):
        mem.score(np.array([[0, 1, 2, -1]]), np.array([[0, 1, 2, 3], [0, 1, 2, 3]]))
    with pytest.raises(ValueError, match="cluster_size_ is 16"):
        mem.partial_fit(np.array([[0, 1, 2, 17]]))


def test_explicit_shape_parameters_are_enforced(rng):
    with pytest.raises(ValueError, match="n_clusters=5"):
        GBNNMemory(device="cpu", n_clusters=5).fit(rng.integers(0, 4, size=(5, 4)))
    with pytest.raises(ValueError, match="cluster_size=4"):
        GBNNMemory(device="cpu", cluster_size=4).fit(np.array([[0, 1, 4]]))


def test_oversize_configuration_is_refused_before_allocating():
    with pytest.raises(InsufficientMemoryError, match="bytes"):
        GBNNMemory(device="cpu", cluster_size=2_000_000).fit(np.array([[0, 1, 2, 3]] * 2))


# --------------------------------------------------------------------------- size estimate
def _free_bytes(monkeypatch, n_bytes):
    """Pretend that only ``n_bytes`` are free on every device."""
    from sknn_gpu import _backend

    monkeypatch.setattr(_backend, "free_memory", lambda device, need=None: int(n_bytes))


def test_predict_refuses_a_batch_that_does_not_fit_before_computing(monkeypatch, rng):
    msgs = rng.integers(0, 64, size=(200, 8))
    mem = GBNNMemory(device="cpu", random_state=0).fit(msgs)
    probes = _erase(msgs, 3, rng)
    _free_bytes(monkeypatch, 1 << 20)  # the per-batch work of 200 probes needs ~6.6 MB
    ran = []
    monkeypatch.setattr(_gbnn_cpu, "_retrieve_chunk", lambda *a: ran.append(a))
    with pytest.raises(
        InsufficientMemoryError,
        match=r"retrieve of 200 probes with n_clusters=8.* needs \d+ bytes .* only 1048576",
    ):
        mem.predict(probes)
    assert not ran


def test_refused_partial_fit_leaves_the_memory_as_it_was(monkeypatch, rng):
    mem = GBNNMemory(device="cpu", cluster_size=32, random_state=0).fit(rng.integers(0, 32, size=(100, 6)))
    W, seen, density = mem.W_.copy(), mem.n_messages_seen_, mem.density_
    _free_bytes(monkeypatch, 1 << 16)
    with pytest.raises(InsufficientMemoryError, match="partial_fit of 5000 messages"):
        mem.partial_fit(rng.integers(0, 32, size=(5000, 6)))
    assert np.array_equal(mem.W_, W) and mem.n_messages_seen_ == seen and mem.density_ == density


def test_fit_counts_the_storing_work_not_only_w(monkeypatch, rng):
    C, L, M = 8, 64, 20_000
    w_bytes = C * L * C * 2 * 4
    _free_bytes(monkeypatch, 4 * w_bytes)  # W_ alone would fit
    mem = GBNNMemory(device="cpu", cluster_size=L)
    with pytest.raises(InsufficientMemoryError, match="fit of 20000 messages"):
        mem.fit(rng.integers(0, L, size=(M, C)))
    assert not hasattr(mem, "W_")


@pytest.mark.parametrize("C, L, M, K, e", [(8, 128, 3000, 1500, 4), (4, 64, 30_000, 3000, 2)])
def test_size_estimate_bounds_the_measured_peak(C, L, M, K, e, rng):
    # (4, 64, 30000): a saturated memory, every neuron a candidate (the worst case per element)
    import tracemalloc

    msgs = rng.integers(0, L, size=(M, C))
    probes = _erase(msgs[:K], e, rng)
    tracemalloc.start()
    try:
        mem = GBNNMemory(device="cpu", cluster_size=L, random_state=0).fit(msgs)
        fit_peak = tracemalloc.get_traced_memory()[1]
        peaks = {}
        for rule in RULES:
            mem.set_params(rule=rule)
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            mem.retrieve(probes)
            peaks[rule] = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    fit_est = sum(gbnn_bytes("cpu", C, L, M, "fit"))
    ret_est = sum(gbnn_bytes("cpu", C, L, K, "retrieve"))
    assert fit_peak <= fit_est <= 4 * fit_peak
    assert max(peaks.values()) <= ret_est <= 4 * max(peaks.values()), peaks
    assert gbnn_bytes("cpu", C, L, M, "partial_fit")[0] == fit_est - C * L * C * ((L + 31) // 32) * 4
    host, dev = gbnn_bytes("cuda", C, L, K, "retrieve")
    assert dev >= K * C * 12 and host >= K * C * 8  # probes and outputs on the GPU, results copied back


# --------------------------------------------------------------------------- verbose, output type, CV
def _memory_lines(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "sknn_gpu.memory"]


def test_verbose_zero_is_silent_and_gives_the_engines_no_callback(caplog, monkeypatch, rng):
    """Silent calls pass progress=None: the GPU engine then keeps one launch for all probes."""
    callbacks = []
    for name in ("store", "retrieve"):
        real = getattr(_gbnn_cpu, name)

        def spy(*args, _real=real, progress=None, **kwargs):
            callbacks.append(progress)
            return _real(*args, progress=progress, **kwargs)

        monkeypatch.setattr(_gbnn_cpu, name, spy)
    msgs = rng.integers(0, 16, size=(50, 5))
    with caplog.at_level(logging.DEBUG, logger="sknn_gpu"):
        mem = GBNNMemory(device="cpu", random_state=0).fit(msgs)
        mem.partial_fit(msgs[:5])
        mem.retrieve(_erase(msgs, 2, rng), decoding="serial")
    assert _memory_lines(caplog) == []
    # fit, its load check (a retrieval of a sample of the messages), partial_fit (55 messages:
    # not yet twice the 50 measured, so no retrieval), retrieve: none with a callback
    assert callbacks == [None] * 4
    mem.set_params(verbose=1).predict(msgs)
    assert callable(callbacks[-1])


def test_partial_fit_measures_the_load_once_the_memory_has_doubled(monkeypatch, rng):
    """The measured load check costs a retrieval: fit measures, partial_fit only once the
    memory holds twice the messages it held at the last measurement."""
    retrievals = []
    real = _gbnn_cpu.retrieve

    def spy(*args, **kwargs):
        retrievals.append(args[1].shape[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(_gbnn_cpu, "retrieve", spy)
    msgs = rng.integers(0, 64, size=(200, 5))
    mem = GBNNMemory(cluster_size=64, device="cpu", random_state=0).fit(msgs[:40])
    assert retrievals == [40]
    for lo, hi in ((40, 60), (60, 79)):  # 60 and 79 messages: fewer than 80
        mem.partial_fit(msgs[lo:hi])
    assert retrievals == [40]
    mem.partial_fit(msgs[79:81])  # 81 >= 2 * 40: measured on this batch
    assert retrievals == [40, 2]
    mem.fit(msgs[:10])  # a new fit measures again, whatever came before
    assert retrievals == [40, 2, 10]


def test_verbose_1_logs_one_summary_line_per_call(caplog, rng):
    msgs = rng.integers(0, 16, size=(300, 5))
    probes = _erase(msgs, 2, rng)
    with caplog.at_level(logging.INFO, logger="sknn_gpu.memory"):
        mem = GBNNMemory(device="cpu", random_state=0, verbose=1).fit(msgs[:200])
        density_after_fit = mem.density_
        mem.partial_fit(msgs[200:])
        res = mem.retrieve(probes)
        mem.predict(probes)
    lines = _memory_lines(caplog)
    assert len(lines) == 4, lines
    assert re.fullmatch(
        rf"fit: 200 messages in [\d.]+ s, messages=200, density={density_after_fit:.6g}", lines[0]
    )
    assert re.fullmatch(
        rf"partial_fit: 100 messages in [\d.]+ s, messages=100, density={mem.density_:.6g}", lines[1]
    )
    summary = f"converged={int(res.converged.sum())}, ambiguous={int(res.ambiguous.sum())}"
    assert re.fullmatch(rf"retrieve \(joint, parallel\): 300 probes in [\d.]+ s, {summary}", lines[2])
    assert re.fullmatch(rf"predict \(joint, parallel\): 300 probes in [\d.]+ s, {summary}", lines[3])


@pytest.mark.parametrize("decoding", ["parallel", "serial"])
def test_verbose_2_logs_a_line_per_batch_and_per_chunk_of_probes(caplog, monkeypatch, decoding, rng):
    C, L = 5, 16
    msgs = rng.integers(0, L, size=(100, C))
    probes = _erase(msgs[:70], 3, rng)
    quiet = GBNNMemory(device="cpu", random_state=0).fit(msgs)
    expected = quiet.retrieve(probes)
    monkeypatch.setattr(_gbnn_cpu, "STORE_CHUNK_ELEMENTS", 40 * C * (C - 1))  # 40 messages a batch
    monkeypatch.setattr(_gbnn_cpu, "CHUNK_ELEMENTS", 32 * C * 32)  # 32 probes a chunk
    with caplog.at_level(logging.INFO, logger="sknn_gpu.memory"):
        mem = GBNNMemory(device="cpu", random_state=0, verbose=2).fit(msgs)
        res = mem.retrieve(probes, decoding=decoding)
    lines = _memory_lines(caplog)
    assert lines[:3] == ["fit 40/100", "fit 80/100", "fit 100/100"]
    assert lines[3].startswith("fit: 100 messages in ")
    desc = f"retrieve (joint, {decoding})"
    assert lines[4:7] == [f"{desc} 32/70", f"{desc} 64/70", f"{desc} 70/70"]  # per chunk, also serial
    assert lines[7].startswith(f"{desc}: 70 probes in ") and len(lines) == 8
    np.testing.assert_array_equal(mem.W_, quiet.W_)
    for name in ("messages", "n_candidates", "n_iter", "converged"):
        np.testing.assert_array_equal(getattr(res, name), getattr(expected, name), err_msg=name)


def test_cross_validation_on_held_out_messages_scores_zero_by_nature(rng):
    """A memory recalls what it stored: held-out messages (the default CV) are not recalled."""
    msgs = rng.integers(0, 32, size=(400, 6))
    scores = cross_val_score(GBNNMemory(device="cpu", random_state=0), msgs, msgs, cv=3)
    np.testing.assert_array_equal(scores, np.zeros(3))
    assert GBNNMemory(device="cpu", random_state=0).fit(msgs).score(msgs, msgs) == 1.0
    with pytest.raises(ValueError, match="needs y"):
        cross_val_score(GBNNMemory(device="cpu"), msgs, cv=3, error_score="raise")


def test_gridsearch_with_the_erasure_scorer_and_explicit_splits(rng):
    """Splits given as a list work as well as StoredMessagesCV (tests/test_gbnn_model_selection.py)."""
    msgs = rng.integers(0, 32, size=(400, 6))
    rows = np.arange(len(msgs))
    grid = {"rule": ["sum-of-sum", "joint"]}
    scorer = erased_recall_scorer(4)
    # one split whose test rows are the stored rows, and probe sets that are parts of them
    for cv in ([(rows, rows)], [(rows, part) for part in np.array_split(rows, 4)]):
        search = GridSearchCV(GBNNMemory(device="cpu", random_state=0), grid, scoring=scorer, cv=cv)
        search.fit(msgs)
        sos, joint = search.cv_results_["mean_test_score"]
        assert 0 < sos < joint <= 1
        assert search.best_params_ == {"rule": "joint"}
    direct = GBNNMemory(device="cpu", random_state=0).fit(msgs)
    assert search.best_score_ == pytest.approx(scorer(direct, msgs), abs=0.05)


@pytest.mark.cuda
def test_output_type_applies_to_every_retrieval_field(rng):
    import cupy as cp

    msgs = rng.integers(0, 24, size=(200, 6))
    probes = _erase(msgs, 3, rng)
    ref = GBNNMemory(device="cpu", random_state=0).fit(msgs).retrieve(probes)
    mem = GBNNMemory(device="cuda", random_state=0, output_type="numpy").fit(cp.asarray(msgs))
    for out_type, X, kind in (("numpy", cp.asarray(probes), np.ndarray), ("cupy", probes, cp.ndarray)):
        res = mem.set_params(output_type=out_type).retrieve(X)
        for name in ("messages", "n_candidates", "n_iter", "converged"):
            got = getattr(res, name)
            assert isinstance(got, kind), (out_type, name)
            np.testing.assert_array_equal(to_host(got), getattr(ref, name), err_msg=name)
        assert isinstance(res.converged_per_iter, kind)
        assert isinstance(mem.predict(X), kind)


@pytest.mark.cuda
@pytest.mark.parametrize("decoding", ["parallel", "serial"])
def test_gpu_progress_reports_per_chunk_of_launches(caplog, monkeypatch, decoding, rng):
    """With verbose, the GPU splits parallel decoding into one launch per chunk; same results."""
    import cupy as cp

    from sknn_gpu.memory import _gbnn_cuda

    msgs = rng.integers(0, 40, size=(300, 8))
    probes = cp.asarray(_erase(msgs[:150], 4, rng))
    mem = GBNNMemory(device="cuda", random_state=0).fit(msgs)
    expected = mem.retrieve(probes)
    monkeypatch.setattr(_gbnn_cuda, "PROGRESS_ROWS", 64)
    with caplog.at_level(logging.INFO, logger="sknn_gpu.memory"):
        res = mem.set_params(verbose=2).retrieve(probes, decoding=decoding)
    desc = f"retrieve (joint, {decoding})"
    lines = _memory_lines(caplog)
    assert lines[:3] == [f"{desc} 64/150", f"{desc} 128/150", f"{desc} 150/150"]
    for name in ("messages", "n_candidates", "n_iter", "converged"):
        assert cp.array_equal(getattr(res, name), getattr(expected, name)), name


# --------------------------------------------------------------------------- CPU == GPU
def _parity_case(rng, C=8, L=48, M=900, K=500):
    msgs = rng.integers(0, L, size=(M, C))
    probes = np.vstack(
        [
            _erase(msgs[:K], 3, rng),
            _erase(msgs[:K], 5, rng),
            _erase(rng.integers(0, L, size=(100, C)), 2, rng),
            np.full((2, C), -1),
        ]
    )
    return msgs, probes


@pytest.mark.cuda
@pytest.mark.parametrize(
    "rule, gamma",
    [
        ("sum-of-sum", 1.0),
        ("sum-of-sum", 2.5),
        ("sum-of-sum", 0.0),
        ("sum-of-max", 1.0),
        ("sum-of-max", 0.0),
        ("joint", 1.0),
    ],
)
def test_cpu_gpu_bit_identical(rule, gamma, rng):
    import cupy

    msgs, probes = _parity_case(rng)
    kw = dict(rule=rule, gamma=gamma, random_state=11, max_iter=12)
    cpu = GBNNMemory(device="cpu", **kw).fit(msgs)
    gpu = GBNNMemory(device="cuda", **kw).fit(msgs)
    assert np.array_equal(cpu.W_, gpu.W_.get())
    assert cpu.density_ == gpu.density_
    a, b = cpu.retrieve(probes), gpu.retrieve(probes)
    for name in ("messages", "n_candidates", "n_iter", "converged"):
        x, y = getattr(a, name), getattr(b, name)
        assert isinstance(y, np.ndarray)
        assert np.array_equal(x, y), name
    c = gpu.retrieve(cupy.asarray(probes))  # CuPy in -> CuPy out, same values
    assert isinstance(c.messages, cupy.ndarray)
    assert np.array_equal(c.messages.get(), a.messages)
    assert (a.n_candidates > 1).any()  # ties were exercised


@pytest.mark.cuda
@pytest.mark.parametrize("boe, prune", [(0, 1), (1, 0), (0, 0)])
def test_gpu_tricks_switched_off_give_the_same_results(boe, prune, rng, monkeypatch):
    # The Fig. 12 ablation times the kernel without BAIL-OUT-EARLY and without the pruning
    # of inactive neurons; both are exact (Theorem 1, Lemma 1), so every output must match.
    from sknn_gpu.memory import _gbnn_cuda

    msgs = rng.integers(0, 64, size=(600, 8))
    probes = _erase(msgs[:300], 4, rng)
    for rule, gamma in (("sum-of-max", 1.0), ("sum-of-max", 0.0), ("joint", 1.0)):
        cpu = GBNNMemory(device="cpu", rule=rule, gamma=gamma, random_state=3).fit(msgs).retrieve(probes)
        monkeypatch.setattr(_gbnn_cuda, "TRICKS", {"GBNN_BOE": boe, "GBNN_PRUNE": prune})
        gpu = GBNNMemory(device="cuda", rule=rule, gamma=gamma, random_state=3).fit(msgs)
        got = gpu.set_params(output_type="numpy").retrieve(probes)
        monkeypatch.undo()
        for name in ("messages", "n_candidates", "n_iter", "converged"):
            assert np.array_equal(getattr(cpu, name), getattr(got, name)), (rule, gamma, name)


@pytest.mark.cuda
@pytest.mark.parametrize("C, L", [(3, 3), (5, 33), (16, 512), (4, 1000)])
def test_cpu_gpu_parity_odd_shapes(C, L, rng):
    msgs = rng.integers(0, L, size=(min(4 * L, 3000), C))
    probes = _erase(msgs[:300], max(1, C // 2), rng)
    for rule in RULES:
        cpu = GBNNMemory(device="cpu", rule=rule, random_state=2).fit(msgs)
        gpu = GBNNMemory(device="cuda", rule=rule, random_state=2).fit(msgs)
        a, b = cpu.retrieve(probes), gpu.retrieve(probes)
        assert np.array_equal(a.messages, b.messages), rule
        assert np.array_equal(a.n_candidates, b.n_candidates), rule
        assert np.array_equal(a.n_iter, b.n_iter), rule


@pytest.mark.cuda
def test_cpu_gpu_parity_at_1024_words_per_row(rng):
    # C * ceil(L / 32) = 1024: blocks of 1,024 threads, which need the kernel's launch bound
    # (64 registers per thread at most)
    C, L = 32, 1024
    msgs = rng.integers(0, L, size=(2000, C))
    probes = _erase(msgs[:40], 16, rng)
    for rule in RULES:
        cpu = GBNNMemory(device="cpu", rule=rule, random_state=2).fit(msgs)
        gpu = GBNNMemory(device="cuda", rule=rule, random_state=2).fit(msgs)
        a, b = cpu.retrieve(probes), gpu.retrieve(probes)
        for name in ("messages", "n_candidates", "n_iter", "converged"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), (rule, name)
        assert gpu.score(probes, msgs[:40]) > 0.9


@pytest.mark.cuda
@pytest.mark.parametrize("rule", ["sum-of-max", "joint"])
def test_cpu_gpu_identical_on_ambiguous_probes_near_capacity(rule, rng):
    # density ~0.6: most probes are ambiguous and the clique search sometimes backs out
    C, L, M = 8, 32, 900
    msgs = rng.integers(0, L, size=(M, C))
    probes = np.vstack([_erase(msgs[:400], 5, rng), _erase(rng.integers(0, L, size=(100, C)), 3, rng)])
    cpu = GBNNMemory(device="cpu", rule=rule, random_state=4, max_iter=50).fit(msgs)
    gpu = GBNNMemory(device="cuda", rule=rule, random_state=4, max_iter=50).fit(msgs)
    a, b = cpu.retrieve(probes), gpu.retrieve(probes)
    assert a.ambiguous.mean() > 0.3
    for name in ("messages", "n_candidates", "n_iter", "converged"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


@pytest.mark.cuda
def test_cupy_input_is_validated_and_kept_on_the_gpu(monkeypatch, rng):
    import cupy

    from sknn_gpu import _backend
    from sknn_gpu.memory import _gbnn

    msgs = rng.integers(0, 32, size=(200, 6))
    probes = _erase(msgs, 2, rng)

    def no_host_copy(x):
        raise AssertionError("CuPy input was copied to the host")

    monkeypatch.setattr(_backend, "to_host", no_host_copy)
    monkeypatch.setattr(_gbnn, "to_host", no_host_copy)
    mem = GBNNMemory(device="cuda", random_state=0).fit(cupy.asarray(msgs))
    res = mem.retrieve(cupy.asarray(probes))
    with pytest.raises(ValueError, match="cluster_size_ is 32"):
        mem.predict(cupy.asarray(probes) + 40)
    monkeypatch.undo()
    assert isinstance(res.messages, cupy.ndarray) and isinstance(res.converged, cupy.ndarray)
    cpu = GBNNMemory(device="cpu", random_state=0).fit(msgs).retrieve(probes)
    assert np.array_equal(res.messages.get(), cpu.messages)


@pytest.mark.cuda
def test_gpu_partial_fit_and_pickle(rng):
    msgs = rng.integers(0, 64, size=(500, 8))
    gpu = GBNNMemory(device="cuda", cluster_size=64, random_state=0)
    for chunk in np.array_split(msgs[rng.permutation(500)], 3):
        gpu.partial_fit(chunk)
    cpu = GBNNMemory(device="cpu", cluster_size=64, random_state=0).fit(msgs)
    assert np.array_equal(gpu.W_.get(), cpu.W_)
    back = pickle.loads(pickle.dumps(gpu))
    p = _erase(msgs, 3, rng)
    assert np.array_equal(back.predict(p), cpu.predict(p))


def test_wide_rows_run_on_the_cpu(rng):
    # C * ceil(L / 32) = 2 * 513 words per row: beyond the GPU kernels' 1024, fine on the CPU
    L = 32 * 513
    msgs = rng.integers(0, L, size=(50, 2))
    # distinct known symbols, so every probe has exactly one completion (with repeats, the
    # birthday odds of an ambiguous probe are ~7%, which made this test flaky)
    msgs[:, 0] = rng.choice(L, size=50, replace=False)
    mem = GBNNMemory(device="cpu", cluster_size=L, random_state=0).fit(msgs)
    probes = msgs.copy()
    probes[:, 1] = -1
    assert mem.score(probes, msgs) == 1.0


@pytest.mark.cuda
@pytest.mark.parametrize("C, L", [(2, 32 * 513), (4, 32_000)])
def test_cpu_gpu_parity_beyond_1024_words_per_row(C, L, rng):
    # 1,026 words: 1,024 threads owning two words each; 4,000 words: 64-80 KiB of dynamic
    # shared memory per block (beyond the 48 KiB default, so the launch opts in)
    # every column distinct across messages: whichever symbol a probe keeps, one completion
    msgs = np.stack([rng.choice(L, size=300, replace=False) for _ in range(C)], axis=1)
    probes = np.vstack([_erase(msgs[:20], 1, rng), msgs[20:22]])
    cpu = GBNNMemory(device="cpu", cluster_size=L, random_state=2).fit(msgs)
    gpu = GBNNMemory(device="cuda", cluster_size=L, random_state=2).fit(msgs)
    assert gpu.device_ == "cuda" and np.array_equal(cpu.W_, gpu.W_.get())
    for rule in RULES:
        a, b = cpu.set_params(rule=rule).retrieve(probes), gpu.set_params(rule=rule).retrieve(probes)
        for name in ("messages", "n_candidates", "n_iter", "converged"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), (rule, name)
    assert np.array_equal(b.messages[:20], msgs[:20])


@pytest.mark.cuda
def test_state_beyond_shared_memory_is_refused_on_cuda():
    from sknn_gpu.memory import _gbnn_cuda

    assert _gbnn_cuda.supports(16, 512) and _gbnn_cuda.supports(4, 32_000)
    assert not _gbnn_cuda.supports(12_000, 1)  # 12,000 words: 336-384 KiB per block
    with pytest.raises(ValueError, match="shared memory"):
        GBNNMemory(device="cuda", cluster_size=1).fit(np.zeros((2, 12_000), dtype=np.int64))


def test_state_too_wide_for_the_gpu_falls_back_to_the_cpu(monkeypatch, rng):
    from sknn_gpu.memory import _gbnn_cuda

    # pretend a GPU was resolved whose shared memory cannot hold this state
    monkeypatch.setattr(
        GBNNMemory, "_resolve_device", lambda self: setattr(self, "device_", "cuda") or "cuda"
    )
    monkeypatch.setattr(_gbnn_cuda, "supports", lambda C, L: False)
    monkeypatch.setattr(GBNNMemory, "_check_size", lambda self, *a: None)  # no GPU memory to ask here
    msgs = rng.integers(0, 8, size=(20, 3))
    assert GBNNMemory(device="auto").fit(msgs).device_ == "cpu"
    with pytest.raises(ValueError, match=r"3 words for C=3, L=8: \d+ bytes\) in one block's shared memory"):
        GBNNMemory(device="cuda").fit(msgs)


@pytest.mark.parametrize("failing_batch", [1, 2])
def test_store_failing_half_way(monkeypatch, device, failing_batch):
    """An error in the middle of storing (a GPU out-of-memory, say): a failed ``fit``
    leaves the estimator unfitted; a failed ``partial_fit`` keeps what was stored before
    it and, repeated, completes the batch (storing is idempotent)."""
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    from sknn_gpu.memory._gbnn_engine import engine

    rng = np.random.default_rng(5)
    msgs = rng.integers(0, 16, size=(400, 5))
    eng = engine(device)
    real_store, calls = eng.store, []

    def failing_store(W, X, L, progress=None):
        calls.append(1)
        if len(calls) == failing_batch:
            real_store(W, X[: len(X) // 2], L)  # half the batch reaches W, then the failure
            raise MemoryError("simulated out-of-memory half-way through storing")
        return real_store(W, X, L, progress=progress)

    monkeypatch.setattr(eng, "store", failing_store)
    mem = GBNNMemory(cluster_size=16, random_state=0, device=device)
    if failing_batch == 1:
        with pytest.raises(MemoryError, match="simulated"):
            mem.fit(msgs)
        with pytest.raises(NotFittedError):
            check_is_fitted(mem)
        assert not hasattr(mem, "W_")
        with pytest.raises(NotFittedError):
            mem.predict(msgs)
        return
    mem.fit(msgs[:200])  # call 1 succeeds
    seen = mem.n_messages_seen_
    with pytest.raises(MemoryError, match="simulated"):
        mem.partial_fit(msgs[200:])
    assert mem.n_messages_seen_ == seen  # the failed batch is not counted
    monkeypatch.setattr(eng, "store", real_store)
    mem.partial_fit(msgs[200:])  # repeated: the memory of all 400 messages
    full = GBNNMemory(cluster_size=16, random_state=0, device=device).fit(msgs)
    assert np.array_equal(to_host(mem.W_), to_host(full.W_))


# --------------------------------------------------------------------------- reliability
def _no_warnings():
    import warnings

    ctx = warnings.catch_warnings()
    ctx.__enter__()
    warnings.simplefilter("error")
    return ctx


def test_overloaded_memory_warns_after_fit_and_partial_fit(device, rng):
    """Real correlated data (load_digits: 60% of its single-pixel erasures are ambiguous at
    density 0.44) and random messages past the density limit warn; a light memory does not."""
    from sklearn.datasets import load_digits

    digits = load_digits().data.astype(np.int64)
    with pytest.warns(UserWarning, match=r"GBNNMemory\.fit: retrieval from this memory is unreliable: \d+%"):
        mem = GBNNMemory(device=device).fit(digits)
    assert 0.4 < mem.density_ < 0.5
    words = rng.integers(0, 26, size=(1107, 5))  # as many 5-symbol messages as the words
    with pytest.warns(UserWarning, match=r"density_=0\.8\d+ .* exceeds 0\.2\d+") as record:
        GBNNMemory(device=device).fit(words)
    assert len([w for w in record if issubclass(w.category, UserWarning)]) == 1
    light = rng.integers(0, 64, size=(200, 8))
    ctx = _no_warnings()
    try:
        mem = GBNNMemory(device=device, cluster_size=64).fit(light)
        mem.partial_fit(light[:50])
    finally:
        ctx.__exit__(None, None, None)
    with pytest.warns(
        UserWarning, match=r"GBNNMemory\.partial_fit: retrieval from this memory is unreliable"
    ):
        mem.partial_fit(rng.integers(0, 64, size=(40_000, 8)))


def test_reject_returns_minus_one_for_ambiguous_clusters(device, rng):
    stored = np.array([[0, 1, 2, 5], [0, 1, 3, 5], [4, 4, 4, 4]])
    probes = np.array([[0, 1, -1, 5], [4, 4, -1, 4], [0, 1, -1, -1]])
    for rule in RULES:
        guess = GBNNMemory(device=device, rule=rule, cluster_size=8, random_state=0).fit(stored)
        res = guess.retrieve(probes)
        assert res.messages[0, 2] in (2, 3) and res.n_candidates[0, 2] == 2  # a guess today
        reject = GBNNMemory(device=device, rule=rule, cluster_size=8, random_state=0, ambiguous="reject")
        got = reject.fit(stored).retrieve(probes)
        expected = np.where(to_host(res.n_candidates) > 1, -1, to_host(res.messages))
        np.testing.assert_array_equal(to_host(got.messages), expected)
        np.testing.assert_array_equal(to_host(got.n_candidates), to_host(res.n_candidates))
        assert to_host(got.messages)[0].tolist() == [0, 1, -1, 5]
        assert to_host(got.messages)[1].tolist() == [4, 4, 4, 4]  # resolved: as with 'guess'
        np.testing.assert_array_equal(to_host(reject.predict(probes)), expected)
    with pytest.raises(ValueError, match="ambiguous"):
        GBNNMemory(ambiguous="maybe").fit(stored)


def test_max_iter_reached_warns_once_per_call(device, rng):
    from sklearn.exceptions import ConvergenceWarning

    msgs = rng.integers(0, 32, size=(300, 6))
    probes = _erase(msgs, 3, rng)
    mem = GBNNMemory(device=device, rule="sum-of-max", max_iter=1, random_state=0).fit(msgs)
    for call, name in ((mem.predict, "predict"), (mem.retrieve, "retrieve")):
        with pytest.warns(ConvergenceWarning) as record:
            call(probes)
        msgs_ = [str(w.message) for w in record if issubclass(w.category, ConvergenceWarning)]
        assert len(msgs_) == 1
        assert re.match(
            rf"GBNNMemory\.{name}: 300 of 300 probes did not converge within max_iter=1 iterations "
            r"\(rule='sum-of-max'\)",
            msgs_[0],
        ), msgs_[0]
    with pytest.warns(ConvergenceWarning, match=r"GBNNMemory\.score: 300 of 300"):
        mem.score(probes, msgs)
    ctx = _no_warnings()
    try:
        mem.set_params(max_iter=20).predict(probes)
    finally:
        ctx.__exit__(None, None, None)


def test_parameters_set_after_fit_are_validated(rng):
    msgs = rng.integers(0, 16, size=(50, 4))
    mem = GBNNMemory(device="cpu").fit(msgs)
    for params, method in (
        (dict(max_iter=0), "predict"),
        (dict(rule="sum-of-everything"), "retrieve"),
        (dict(gamma=-1.0), "score"),
        (dict(ambiguous="sometimes"), "predict"),
    ):
        est = pickle.loads(pickle.dumps(mem)).set_params(**params)
        with pytest.raises(ValueError, match=next(iter(params))):
            getattr(est, method)(msgs) if method != "score" else est.score(msgs, msgs)
