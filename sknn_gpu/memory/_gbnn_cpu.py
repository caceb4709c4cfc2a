"""CPU engine of :class:`~sknn_gpu.memory.GBNNMemory`: NumPy over the bit-packed ``W`` (the reference).

Same functions and signatures as the CUDA engine (``_gbnn_cuda``: :func:`store`,
:func:`count_edges`, :func:`retrieve`) and bit-identical results; ``_kernels/gbnn.cu``
performs the same integer steps. Nothing here resolves ``device``: the estimator chose
this engine. Also the bit helpers and the geometry (``_n_words``, ``_n_planes``) that the
estimator and the CUDA engine share.

Layout: neuron ``(c, l)`` is row ``c·L + l`` of ``W`` (``uint32``, ``C·ceil(L/32)`` words
per row); word ``c2·ceil(L/32) + q`` bit ``b`` of a row is the edge to neuron
``(c2, 32q + b)``. A probe's state uses the same words, shape ``(C, ceil(L/32))``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["store", "count_edges", "retrieve", "work_bytes"]

# Elements of the (probes x neurons) work arrays processed at once.
CHUNK_ELEMENTS = 1 << 22
# Elements of the (messages x ordered cluster pairs) index arrays of one storing step.
STORE_CHUNK_ELEMENTS = 4_000_000
# Upper bounds of the bytes allocated per element of those chunks (measured peaks with
# tracemalloc: about 42 when storing, 49 when retrieving from a saturated memory; a test
# keeps the estimate above the measured peak).
_STORE_BYTES_PER_ELEMENT = 56
_RETRIEVE_BYTES_PER_ELEMENT = 64


# ----------------------------------------------------------------------------------
# Geometry and bit helpers; word w bit b of a cluster is neuron 32*w + b.
# ----------------------------------------------------------------------------------
def _n_words(L):
    return (int(L) + 31) // 32


def _n_planes(C, L):
    return max(1, int((C - 1) * L).bit_length())


def _valid_masks(L):
    nb = np.clip(int(L) - 32 * np.arange(_n_words(L)), 0, 32)
    return np.where(nb >= 32, 0xFFFFFFFF, (np.int64(1) << nb) - 1).astype(np.uint32)


_POP8 = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def _popcount(a):
    """Set bits of every uint32 word (same shape, small ints)."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(a)
    a = np.ascontiguousarray(a, dtype="<u4")
    return _POP8[a.view(np.uint8)].reshape(a.shape + (4,)).sum(axis=-1, dtype=np.uint8)


def _unpack(words):
    """(..., m) uint32 -> (..., 32*m) uint8 bits, bit b of word w at 32*w + b."""
    words = np.ascontiguousarray(words, dtype="<u4")
    return np.unpackbits(words.view(np.uint8), axis=-1, bitorder="little")


def _pack(bits):
    """Inverse of :func:`_unpack` (last axis a multiple of 32)."""
    packed = np.packbits(np.ascontiguousarray(bits, dtype=np.uint8), axis=-1, bitorder="little")
    return np.ascontiguousarray(packed).view("<u4").astype(np.uint32, copy=False)


def _one_hot(x, Lw):
    """(k,) symbols >= 0 -> (k, Lw) words with the one bit of each symbol set."""
    out = np.zeros((x.shape[0], Lw), dtype=np.uint32)
    out[np.arange(x.shape[0]), x >> 5] = np.left_shift(np.uint32(1), (x & 31).astype(np.uint32))
    return out


def _one_hot_words(X, L):
    """(K, C) symbols (-1 = erased) -> (K, C, Lw) one-hot words (erased clusters all-off)."""
    K, C = X.shape
    V = np.zeros((K, C, _n_words(L)), dtype=np.uint32)
    kk, cc = np.nonzero(X >= 0)
    V[kk, cc] = _one_hot(X[kk, cc], _n_words(L))
    return V


# ----------------------------------------------------------------------------------
# Pseudo-random tie-breaking: one uint32 per (probe, cluster), a splitmix64 hash of
# (seed, whole probe row, cluster). It depends on the probe's content only, so
# predictions do not change with the order or the batching of the probes, and the
# same integers arise from the same 64-bit integer steps in NumPy and in the CUDA
# retrieval kernel (gbnn_mix64 in _kernels/gbnn.cu).
# ----------------------------------------------------------------------------------
_GOLDEN = 0x9E3779B97F4A7C15


def _mix64(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _tie_keys(X, seed):
    K, C = X.shape
    h = np.full(K, seed, dtype=np.uint64)
    g = np.uint64(_GOLDEN)
    for c in range(C):
        h = _mix64((h + g) ^ (X[:, c] + 1).astype(np.uint64))
    out = np.empty((K, C), dtype=np.uint32)
    for c in range(C):
        salt = np.uint64(((c + 1) * _GOLDEN) & 0xFFFFFFFFFFFFFFFF)
        out[:, c] = (_mix64(h + salt) >> np.uint64(32)).astype(np.uint32)
    return out


# ----------------------------------------------------------------------------------
# Storing
# ----------------------------------------------------------------------------------
def store(W, X, L, progress=None):
    """OR the clique of every message of ``X`` (M, C) into ``W`` (n, CW), in place.

    Order-independent and idempotent. ``progress``, when given, is called with the
    number of messages stored after each batch (:data:`STORE_CHUNK_ELEMENTS` index
    entries at a time).
    """
    X = np.asarray(X, dtype=np.int64)
    C = X.shape[1]
    Lw = _n_words(L)
    CW = C * Lw
    c1, c2 = np.nonzero(~np.eye(C, dtype=bool))
    if c1.size == 0:
        if progress is not None and X.shape[0]:
            progress(X.shape[0])
        return
    flat = W.reshape(-1)
    step = max(1, STORE_CHUNK_ELEMENTS // c1.size)
    for s in range(0, X.shape[0], step):
        Xs = X[s : s + step]
        a = Xs[:, c1]
        b = Xs[:, c2]
        idx = ((c1 * L + a) * CW + c2 * Lw + (b >> 5)).ravel()
        bits = np.left_shift(np.uint32(1), (b & 31).astype(np.uint32)).ravel()
        np.bitwise_or.at(flat, idx, bits)
        if progress is not None:
            progress(Xs.shape[0])


def work_bytes(operation, n_rows, C, L):
    """Bytes that storing or retrieving ``n_rows`` rows allocates beyond ``W``: ``(host, device)``.

    ``operation`` is ``'store'`` (the int64 copy of the messages, one chunk of index
    arrays, and the popcount of ``W`` for the density) or ``'retrieve'`` (the int64
    copy of the probes, tie keys and outputs, and one chunk of work arrays). Nothing
    on a GPU.
    """
    Lw = _n_words(L)
    CW = C * Lw
    if operation == "store":
        pairs = C * (C - 1)
        chunk = min(n_rows, max(1, STORE_CHUNK_ELEMENTS // pairs)) * pairs if pairs else 0
        return n_rows * C * 8 + chunk * _STORE_BYTES_PER_ELEMENT + C * L * CW, 0
    k = min(n_rows, max(1, CHUNK_ELEMENTS // (32 * CW)))
    return n_rows * (C * 24 + 8) + k * 32 * CW * _RETRIEVE_BYTES_PER_ELEMENT, 0


def count_edges(W, C, L):
    """Number of set bits of ``W`` (every edge counted in both directions)."""
    return int(_popcount(W).sum(dtype=np.int64))


# ----------------------------------------------------------------------------------
# Retrieval steps
# ----------------------------------------------------------------------------------
def _cluster_counts(V):
    return _popcount(V).sum(axis=2, dtype=np.int32)


def _sos_step(W, V, gamma, L, nplanes):
    """One sum-of-sum update (eqs. 3–5) of states V (k, C, Lw); bit-sliced counters."""
    k, C, Lw = V.shape
    CW = C * Lw
    bits = _unpack(V.reshape(k, CW))  # (k, 32*CW)
    pk, f = np.nonzero(bits)
    u = f >> 5
    j = (u // Lw) * L + (u % Lw) * 32 + (f & 31)
    planes = np.zeros((nplanes, k, CW), dtype=np.uint32)
    if pk.size:
        per = np.bincount(pk, minlength=k)
        starts = np.cumsum(per) - per
        rank = np.arange(pk.size) - starts[pk]
        order = np.argsort(rank, kind="stable")
        bounds = np.searchsorted(rank[order], np.arange(int(per.max()) + 1))
        bounds = np.append(bounds, pk.size)
        for a in range(int(per.max())):
            sel = order[bounds[a] : bounds[a + 1]]
            p = pk[sel]
            carry = W[j[sel]]
            for pl in range(nplanes):
                cur = planes[pl, p]
                nxt = cur & carry
                planes[pl, p] = cur ^ carry
                carry = nxt
                if not carry.any():
                    break
    cnt = np.zeros((k, 32 * CW), dtype=np.int32)
    for pl in range(nplanes):
        if planes[pl].any():
            cnt += _unpack(planes[pl]).astype(np.int32) << pl
    s = cnt.astype(np.float64) + np.where(bits != 0, float(gamma), 0.0)
    s = s.reshape(k, C, 32 * Lw)
    valid = _unpack(_valid_masks(L)).astype(bool)
    s[:, :, ~valid] = -np.inf
    mx = s.max(axis=2, keepdims=True)
    new = (s == mx) & valid
    return _pack(new.reshape(k, C * 32 * Lw)).reshape(k, C, Lw)


def _som_update(W3, V, cand, check, L):
    """One BAIL-OUT-EARLY update: bits of ``cand`` (k, C, Lw) that receive a signal from
    every cluster ``c2`` other than their own with ``check[k, c2]`` true. Returns the
    surviving bits (untested bits are 0)."""
    k, C, Lw = V.shape
    cb = _unpack(cand.reshape(k, C * Lw))
    pk, f = np.nonzero(cb)
    out = np.zeros_like(cb)
    if pk.size == 0:
        return _pack(out).reshape(k, C, Lw)
    u = f >> 5
    ci = u // Lw
    j = ci * L + (u % Lw) * 32 + (f & 31)
    cnt = _cluster_counts(V)
    vb = _unpack(V.reshape(k * C, Lw)).reshape(k, C, 32 * Lw)
    single = np.argmax(vb, axis=2)  # the neuron of a one-neuron cluster
    alive = np.arange(pk.size)
    # Pass 1: clusters with no neuron (no signal) or one neuron (test one bit).
    for c2 in range(C):
        if alive.size == 0:
            break
        pa = pk[alive]
        need = (ci[alive] != c2) & check[pa, c2]
        cc = cnt[pa, c2]
        fail = need & (cc == 0)
        idx = np.nonzero(need & (cc == 1))[0]
        if idx.size:
            l2 = single[pa[idx], c2]
            word = W3[j[alive[idx]], c2, l2 >> 5]
            fail[idx[((word >> (l2 & 31).astype(np.uint32)) & np.uint32(1)) == 0]] = True
        alive = alive[~fail]
    # Pass 2: clusters with several neurons (AND + any over the cluster's words).
    for c2 in range(C):
        if alive.size == 0:
            break
        pa = pk[alive]
        idx = np.nonzero((ci[alive] != c2) & check[pa, c2] & (cnt[pa, c2] > 1))[0]
        if idx.size:
            hit = np.any(W3[j[alive[idx]], c2, :] & V[pa[idx], c2, :], axis=1)
            keep = np.ones(alive.size, dtype=bool)
            keep[idx[~hit]] = False
            alive = alive[keep]
    out[pk[alive], f[alive]] = 1
    return _pack(out).reshape(k, C, Lw)


def _fixpoint(W3, V, ids, L):
    """Run sum-of-max (``gamma > 0``: active neurons only) on the states ``V[ids]`` until
    each is a fixed point, in place."""
    C = V.shape[1]
    run = np.asarray(ids)
    while run.size:
        Vr = V[run]
        Vn = _som_update(W3, Vr, Vr, np.ones((run.size, C), dtype=bool), L)
        same = (Vn == Vr).all(axis=(1, 2))
        V[run] = Vn
        run = run[~same]


def _pick_in(V, rnd, L):
    """Per row of ``V`` (k, Lw) (one cluster each): the (rnd mod count)-th active neuron, -1 if none."""
    bits = _unpack(V)
    cnt = bits.sum(axis=1, dtype=np.int32)
    target = (rnd % np.maximum(cnt, 1).astype(np.uint32)).astype(np.int64)
    cs = np.cumsum(bits, axis=1, dtype=np.int32)
    hit = (bits == 1) & (cs == (target + 1)[:, None])
    sym = np.argmax(hit, axis=1).astype(np.int32)
    sym[cnt == 0] = -1
    return sym, cnt


def _pick(V, rnd, L):
    """Symbol per cluster: the (rnd mod count)-th active neuron; -1 when none."""
    k, C, Lw = V.shape
    sym, cnt = _pick_in(V.reshape(k * C, Lw), rnd.reshape(-1), L)
    return sym.reshape(k, C), cnt.reshape(k, C)


def _disambiguate(W3, V, rnd, ids, L):
    """Replace each ambiguous fixed point ``V[ids]`` by one clique it contains (in place).

    Depth-first search, the same steps as ``gbnn_disambiguate`` in ``_kernels/gbnn.cu``.
    A step: when some cluster is empty (the current branch holds no clique), pop the last
    clamp ``(c, x)``, drop ``x`` from the candidates remembered for ``c``, rebuild the state
    from the initial fixed point and the remaining clamps, run sum-of-max to its fixed point,
    and force the next clamp into ``c``; with an empty stack, every neuron goes off. Else the
    next clamp goes into the forced cluster, or the first cluster with several neurons (none:
    done, one neuron per cluster is a clique): remember its neurons, keep only the
    (rnd mod count)-th of them and run sum-of-max to its fixed point. Every clique of the
    initial state survives the sum-of-max iterations unless a clamp excludes it, so the
    search ends with a clique whenever the initial state holds one.
    """
    C, Lw = V.shape[1:]
    ids = np.asarray(ids)
    S0 = V[ids].copy()  # the fixed points to disambiguate (compact rows)
    S = S0.copy()
    rem = np.zeros_like(S0)  # candidates left per clamped cluster
    stk_c = np.zeros((ids.size, C), dtype=np.int64)
    stk_x = np.zeros((ids.size, C), dtype=np.int64)
    depth = np.zeros(ids.size, dtype=np.int64)
    force = np.full(ids.size, -1, dtype=np.int64)
    rnd = rnd[ids]
    act = np.arange(ids.size)
    while act.size:
        cnt = _cluster_counts(S[act])
        collapsed = (cnt == 0).any(axis=1)
        several = cnt > 1
        # ---- backtrack (current branch holds no clique)
        bt = act[collapsed & (depth[act] > 0)]
        S[act[collapsed & (depth[act] == 0)]] = 0
        if bt.size:
            depth[bt] -= 1
            d = depth[bt]
            cb, xb = stk_c[bt, d], stk_x[bt, d]
            rem[bt, cb] &= ~_one_hot(xb, Lw)
            S[bt] = S0[bt]
            for i in range(int(d.max())):
                sel = np.nonzero(d > i)[0]
                S[bt[sel], stk_c[bt[sel], i]] = _one_hot(stk_x[bt[sel], i], Lw)
            S[bt, cb] = rem[bt, cb]
            force[bt] = cb
        # ---- clamp one neuron of the forced or the first ambiguous cluster
        go = ~collapsed & ((force[act] >= 0) | several.any(axis=1))
        pu = act[go]
        if pu.size:
            cl = np.where(force[pu] >= 0, force[pu], np.argmax(several[go], axis=1))
            x, _ = _pick_in(S[pu, cl], rnd[pu, cl], L)
            rem[pu, cl] = S[pu, cl]
            stk_c[pu, depth[pu]] = cl
            stk_x[pu, depth[pu]] = x
            depth[pu] += 1
            force[pu] = -1
            S[pu, cl] = _one_hot(x, Lw)
        step = np.concatenate([bt, pu])
        _fixpoint(W3, S, step, L)
        act = np.sort(step)
    V[ids] = S


# ----------------------------------------------------------------------------------
# Retrieval
# ----------------------------------------------------------------------------------
def _retrieve_chunk(W, X, rule, gamma, max_iter, L):
    K, C = X.shape
    Lw = _n_words(L)
    W3 = W.reshape(-1, C, Lw)
    known = X >= 0
    n_iter = np.zeros(K, dtype=np.int32)
    conv = np.zeros(K, dtype=bool)
    V = _one_hot_words(X, L)
    valid = _valid_masks(L)
    all_clusters = np.ones((K, C), dtype=bool)
    if rule in ("sum-of-sum", "sum-of-max"):
        if rule == "sum-of-max":
            V[~known] = valid
        nplanes = _n_planes(C, L)
        run = np.arange(K)
        t = 0
        while run.size and t < max_iter:
            Vr = V[run]
            if rule == "sum-of-sum":
                Vn = _sos_step(W, Vr, gamma, L, nplanes)
            else:
                cand = Vr if gamma > 0 else np.broadcast_to(valid, Vr.shape)
                Vn = _som_update(W3, Vr, cand, all_clusters[run], L)
            t += 1
            n_iter[run] = t
            same = (Vn == Vr).all(axis=(1, 2))
            V[run] = Vn
            conv[run[same]] = True
            run = run[~same]
        return V, n_iter, conv

    # joint (Algorithm 2). Step 1: candidates connected to every known neuron.
    acc = np.broadcast_to(valid, V.shape).copy()
    for c2 in range(C):
        sel = np.nonzero(known[:, c2])[0]
        if sel.size:
            acc[sel] &= W3[c2 * L + X[sel, c2]]
    V = np.where(known[:, :, None], V, acc)
    n_iter[:] = 1
    t = 1

    def full_check(ids):
        if ids.size == 0:
            return
        Vr = V[ids]
        bad = (_som_update(W3, Vr, Vr, all_clusters[ids], L) != Vr).any(axis=(1, 2))
        V[ids[bad]] = 0
        conv[ids] = True

    run = np.arange(K)
    while run.size:
        cnt = _cluster_counts(V[run])
        empty = (cnt == 0).any(axis=1)
        V[run[empty]] = 0
        conv[run[empty]] = True
        run, cnt = run[~empty], cnt[~empty]
        unres = ~known[run] & (cnt > 1)
        some = unres.any(axis=1)
        full_check(run[~some])
        run, unres = run[some], unres[some]
        if run.size == 0 or t >= max_iter:
            break
        Vr = V[run]
        cand = np.where(unres[:, :, None], Vr, np.uint32(0))
        new = _som_update(W3, Vr, cand, ~known[run], L)
        Vn = np.where(unres[:, :, None], new, Vr)
        t += 1
        n_iter[run] = t
        same = (Vn == Vr).all(axis=(1, 2))
        V[run] = Vn
        full_check(run[same])
        run = run[~same]
    return V, n_iter, conv


def retrieve(W, X, seed, rule, gamma, max_iter, L, serial=False, progress=None):
    """Complete the probes ``X`` (K, C) (``-1`` = erased) with ``rule``.

    Parameters
    ----------
    W : ndarray of shape (C·L, C·ceil(L/32)), uint32
        The packed memory.
    X : array of shape (K, C), integer
        Probes.
    seed : int
        64-bit seed of the tie-breaking hash.
    rule : {'sum-of-sum', 'sum-of-max', 'joint'}
    gamma : float
    max_iter : int
    L : int
        Neurons per cluster.
    serial : bool, default=False
        Decode one probe after the other (the paper's serial decoding, eq. 10) instead
        of a chunk of probes at a time (parallel decoding, eq. 11). Same results.
    progress : callable or None, default=None
        Called with the number of probes done after each chunk of probes (the parallel
        chunk, also for serial decoding, which would otherwise report every probe).

    Returns
    -------
    messages, n_candidates, n_iter, converged : ndarrays
        ``(K, C)`` int32, ``(K, C)`` int32, ``(K,)`` int32, ``(K,)`` bool.
        ``n_candidates`` counts the neurons of the rule's final state; for sum-of-max
        (``gamma > 0``) and joint, a converged probe with several neurons in some cluster
        is then reduced to one clique of that state (:func:`_disambiguate`), from which
        ``messages`` are read.
    """
    X = np.asarray(X, dtype=np.int64)
    W = np.asarray(W)
    K, C = X.shape
    rnd = _tie_keys(X, seed)
    chunk = max(1, CHUNK_ELEMENTS // (C * 32 * _n_words(L)))
    step = 1 if serial else chunk
    clique_pick = rule == "joint" or (rule == "sum-of-max" and gamma > 0)
    msgs = np.empty((K, C), dtype=np.int32)
    cnts = np.empty((K, C), dtype=np.int32)
    iters = np.empty(K, dtype=np.int32)
    convs = np.empty(K, dtype=bool)
    for s0 in range(0, K, chunk):
        end = min(s0 + chunk, K)
        for s in range(s0, end, step):
            sl = slice(s, min(s + step, end))
            V, it, cv = _retrieve_chunk(W, X[sl], rule, gamma, max_iter, L)
            cnts[sl] = _cluster_counts(V)
            if clique_pick:
                todo = np.nonzero(cv & (cnts[sl] > 1).any(axis=1))[0]
                _disambiguate(W.reshape(-1, C, V.shape[2]), V, rnd[sl], todo, L)
            msgs[sl] = _pick(V, rnd[sl], L)[0]
            iters[sl], convs[sl] = it, cv
        if progress is not None:
            progress(end - s0)
    return msgs, cnts, iters, convs
