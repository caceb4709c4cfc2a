"""CUDA engine of :class:`~sknn_gpu.memory.GBNNMemory`: CuPy arrays, our kernels (``_kernels/gbnn.cu``).

Same functions and signatures as the CPU engine (``_gbnn_cpu``: :func:`store`,
:func:`count_edges`, :func:`retrieve`) and bit-identical results. Nothing here resolves
``device``: the estimator chose this engine. Kernels come from
:func:`sknn_gpu._kernels.get_function` (memoized per device).
"""

from __future__ import annotations

import numpy as np

from .._backend import device_limits, get_cupy
from .._kernels import get_function
from ._gbnn_cpu import _n_planes, _n_words

__all__ = ["store", "count_edges", "retrieve", "work_bytes", "shared_bytes", "supports"]

_RULE_IDS = {"sum-of-sum": 0, "sum-of-max": 1, "joint": 2}
#: Threads per retrieval block at most (GBNN_MAX_THREADS in gbnn.cu); wider states give each
#: thread several words.
_MAX_THREADS = 1024
#: Static shared memory of the retrieval kernel (the hash and the clamped neuron), rounded up.
_STATIC_SHARED = 64
#: Dynamic shared memory a kernel may use without raising its opt-in limit.
_DEFAULT_DYNAMIC_SHARED = 48 * 1024
#: The acceleration tricks of the retrieval kernel as compile-time switches (1 = on). Only
#: the reproduction of the paper's Fig. 12 turns them off, to time the ablation; the results
#: are the same either way (BAIL-OUT-EARLY is exact, Theorem 1; with gamma > 0 an inactive
#: neuron never turns on, Lemma 1), which a cuda test checks.
TRICKS = {"GBNN_BOE": 1, "GBNN_PRUNE": 1}
#: Probes per progress report when a ``progress`` callback is given: parallel decoding then
#: launches one grid per chunk of this many probes (and waits for it, so that the report is
#: true), serial decoding reports once per chunk instead of once per probe.
PROGRESS_ROWS = 1 << 16


def shared_bytes(C, L, rule):
    """Dynamic shared memory of one retrieval block: the probe's state and its workspace.

    Sum-of-sum: ``20·CW + 8·C`` bytes (scores, masks, state, new state; symbols, counts);
    sum-of-max and joint: ``16·CW + 16·C`` (state, new state, final state, candidates;
    symbols, counts, clamp stack), with ``CW = C·ceil(L/32)`` (the carving in gbnn.cu).
    """
    CW = int(C) * _n_words(L)
    return 20 * CW + 8 * int(C) if rule == "sum-of-sum" else 16 * CW + 16 * int(C)


def supports(C, L):
    """True when a probe's state fits one block's shared memory on this GPU, for every rule.

    Up to about 11,600 words per row (``C·ceil(L/32)``) on an H100 (227 KiB per block).
    """
    need = max(shared_bytes(C, L, rule) for rule in _RULE_IDS) + _STATIC_SHARED
    return need <= device_limits().smem_per_block_optin


def _defines(C, L):
    Lw = _n_words(L)
    return {"NC": int(C), "NL": int(L), "LW": Lw, "CW": int(C) * Lw}


def work_bytes(operation, n_rows, C, L):
    """Bytes that storing or retrieving ``n_rows`` rows allocates beyond ``W``: ``(host, device)``.

    ``'store'``: the messages on the GPU (as given, at most 8 bytes a symbol, and their
    int32 copy). ``'retrieve'``: the probes likewise, the outputs and their copy back to
    the host (for host input). The kernels' state lives in shared memory.
    """
    if operation == "store":
        return 0, n_rows * C * 12 + 8
    return n_rows * (C * 8 + 5), n_rows * (C * 20 + 6)


def store(W, X, L, progress=None):
    """OR the clique of every message of ``X`` (M, C) into ``W`` (n, CW), in place.

    One launch for all messages; ``progress``, when given, is called once with ``M``
    after it (the caller's next synchronising step, the edge count, waits for it).
    """
    cp = get_cupy()
    X = cp.ascontiguousarray(X, dtype=cp.int32)
    C = X.shape[1]
    M = X.shape[0]
    if M == 0 or C < 2:
        if progress is not None and M:
            progress(M)
        return
    kern = get_function("gbnn", "gbnn_store", **_defines(C, L))
    total = M * C * C
    blocks = int(min((total + 255) // 256, 65535 * 8))
    kern((blocks,), (256,), (X, np.int64(M), W))
    if progress is not None:
        progress(M)


def count_edges(W, C, L):
    """Number of set bits of ``W`` (every edge counted in both directions)."""
    cp = get_cupy()
    out = cp.zeros(1, dtype=cp.uint64)
    n_words = W.size
    kern = get_function("gbnn", "gbnn_popcount", **_defines(C, L))
    blocks = int(max(1, min((n_words + 255) // 256, 4096)))
    kern((blocks,), (256,), (W, np.int64(n_words), out))
    return int(out.get()[0])


def retrieve(W, X, seed, rule, gamma, max_iter, L, serial=False, progress=None):
    """Complete the probes ``X`` (K, C) (``-1`` = erased) with ``rule``; see the CPU engine.

    One thread block per probe (up to 1,024 threads, each owning every 1,024-th word of
    the state, which lives in dynamic shared memory: :func:`shared_bytes`), all probes in
    one launch (``serial=False``, the paper's parallel decoding), or one launch per probe
    (``serial=True``, its serial decoding).
    The kernel computes the tie-breaking hash itself (the same integer steps as the CPU
    engine's ``_tie_keys``). Returns CuPy arrays.

    With a ``progress`` callback, parallel decoding launches one grid per
    :data:`PROGRESS_ROWS` probes and serial decoding reports per as many probes; each
    report waits for the launches before it. Each block decodes its own probe, so the
    results do not depend on how the probes are split into launches.
    """
    cp = get_cupy()
    X = cp.ascontiguousarray(X, dtype=cp.int32)
    W = cp.ascontiguousarray(W)
    K, C = X.shape
    d = _defines(C, L)
    kern = get_function("gbnn", "gbnn_retrieve", RULE=_RULE_IDS[rule], NPLANES=_n_planes(C, L), **d, **TRICKS)
    msgs = cp.empty((K, C), dtype=cp.int32)
    cnts = cp.empty((K, C), dtype=cp.int32)
    iters = cp.empty(K, dtype=cp.int32)
    convs = cp.empty(K, dtype=cp.uint8)
    threads = min(_MAX_THREADS, ((d["CW"] + 31) // 32) * 32)
    smem = shared_bytes(C, L, rule)
    if smem > _DEFAULT_DYNAMIC_SHARED:
        kern.max_dynamic_shared_size_bytes = smem  # opt in (idempotent)
    tail = (np.uint64(seed), np.float64(gamma), np.int32(max_iter))

    def launch(r):
        n = r.stop - r.start
        args = (W, X[r], np.int64(n), *tail, msgs[r], cnts[r], iters[r], convs[r])
        kern((int(min(n, 2**31 - 1)),), (threads,), args, shared_mem=smem)

    if serial:
        for k in range(K):
            launch(slice(k, k + 1))
            if progress is not None and ((k + 1) % PROGRESS_ROWS == 0 or k + 1 == K):
                cp.cuda.get_current_stream().synchronize()
                progress((k % PROGRESS_ROWS) + 1)
    elif progress is None:
        launch(slice(0, K))
    else:
        for s in range(0, K, PROGRESS_ROWS):
            r = slice(s, min(s + PROGRESS_ROWS, K))
            launch(r)
            cp.cuda.get_current_stream().synchronize()
            progress(r.stop - r.start)
    return msgs, cnts, iters, convs.astype(cp.bool_)
