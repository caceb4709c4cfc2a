"""Dask paths of :class:`~sknn_gpu.memory.GBNNMemory`: distributed storing and a blockwise score.

Storing is an OR of cliques, so a memory splits exactly over row blocks: each worker
builds the bit-packed ``W`` of its block of messages (with the engine of the
estimator's resolved device, on the worker's own CPU or GPU), and the partial ``W``
are OR-ed pairwise up a tree (``sknn_gpu._dask.SPLIT_EVERY`` at a time) by Dask's scheduler.
What reaches the client is one ``W`` and a message count — never the messages —
plus, when ``cluster_size`` must be inferred, one largest symbol per block. The result
is the ``W`` of one in-memory ``fit`` on all the messages, bit for bit.

A partial ``W`` costs a whole memory (``C*L x C*ceil(L/32)`` words, 8 MiB at C=16,
L=512) to allocate, send and OR, however few messages its block holds: with the
blocks of a few thousand messages a user may hand in, that cost was most of a Dask
fit (13 ms per block on a CPU worker, against 5 ms of storing per 1,000 messages).
So small blocks are merged first (:func:`sknn_gpu._dask.merge_rows`: one block per
task slot up to ``BLOCK_BYTES``), and the reduction moves one ``W`` per merged block.

The workers receive a parameters-only copy of the estimator (:func:`_shell`, a
:func:`~sklearn.base.clone` with the memory's shape set), once per worker (one graph
key shared by every block's task), never ``W_``: the block checks
are the estimator's own ``_check_symbols`` and ``_check_size``, so a bad block fails
with the message of an in-memory ``fit``.

Importing this module never imports Dask.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import clone

from .._backend import get_xp, to_device, to_host
from .._dask import (
    check_row_chunks,
    device_of,
    is_dask_collection,
    merge_rows,
    row_blocks,
    shared,
    tree_reduce,
)
from ._gbnn_cpu import _n_words
from ._gbnn_engine import engine

__all__ = ["check_columns", "max_symbol", "store", "score"]


def check_columns(est, X, what, C=None):
    """Refuse a Dask ``X`` that is not 2-D, numeric, one column block wide, or of the wrong width.

    Checked on the client from the array's metadata, before any task runs; the values
    are checked on the workers.
    """
    if X.ndim != 2:
        raise ValueError(f"Expected a 2D array, got a Dask array of shape {X.shape}.")
    check_row_chunks(X, f"GBNNMemory.{what}")
    if X.dtype.kind not in "biuf":
        raise ValueError(f"X must hold integer symbols, got dtype {X.dtype}.")
    C = getattr(est, "n_clusters_", None) if C is None else C
    if C is not None and X.shape[1] != C:
        raise ValueError(f"X has {X.shape[1]} clusters (columns), but the memory has n_clusters_={C}.")
    return int(X.shape[1])


def _shell(est, C, L=None):
    """A parameters-only copy of ``est`` with the memory's shape: what the workers receive."""
    shell = clone(est)
    shell.n_clusters_ = shell.n_features_in_ = int(C)
    if L is not None:
        shell.cluster_size_ = int(L)
    return shell


def _empty_input(C):
    return ValueError(f"Found array with 0 sample(s) (shape=(0, {C})) while a minimum of 1 is required.")


# ----------------------------------------------------------------------------------
# Inferring cluster_size: the largest symbol of each block
# ----------------------------------------------------------------------------------
def _block_max(shell, block):
    if block.shape[0] == 0:
        return None
    return shell._check_symbols(block, reset=False, allow_erased=False)[1]


def _max_of(*values):
    values = [v for v in values if v is not None]
    return max(values) if values else None


def max_symbol(est, X):
    """Largest symbol of the Dask messages ``X`` (every block checked as ``fit`` checks it)."""
    import dask

    C = int(X.shape[1])
    shell = shared(_shell(est, C))  # one graph key: shipped once per worker
    parts = [dask.delayed(_block_max)(shell, b) for b in row_blocks(merge_rows(X, device_of(est)))]
    mx = dask.compute(tree_reduce(parts, _max_of))[0] if parts else None
    if mx is None:
        raise _empty_input(C)
    return int(mx)


# ----------------------------------------------------------------------------------
# Storing: a partial W per block, OR-reduced
# ----------------------------------------------------------------------------------
def _block_store(shell, device, block):
    """``(W, n)``: the packed memory of one block of messages and their number (None if empty)."""
    if block.shape[0] == 0:
        return None
    X, _ = shell._check_symbols(block, reset=False, allow_erased=False)
    C, L = shell.n_clusters_, shell.cluster_size_
    shell._check_size(X.shape[0], "fit", C, L, device)
    W = get_xp(device).zeros((C * L, C * _n_words(L)), dtype=np.uint32)
    engine(device).store(W, to_device(X, device), L)
    return W, int(X.shape[0])


def _or_parts(*parts):
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    W = parts[0][0].copy()  # never write into a task's input
    for w, _ in parts[1:]:
        W |= w
    return W, sum(n for _, n in parts)


def store(est, X, C, L, device):
    """OR of the cliques of every message of the Dask array ``X``: ``(W, n_messages, n_blocks)``.

    ``W`` is a NumPy array, or a CuPy array for ``device='cuda'``, on the client; raises
    the in-memory ``fit`` errors of a bad block, and ``ValueError`` when ``X`` has no rows.
    """
    import dask

    shell = shared(_shell(est, C, L))  # one graph key: shipped once per worker
    parts = [dask.delayed(_block_store)(shell, device, b) for b in row_blocks(merge_rows(X, device))]
    out = dask.compute(tree_reduce(parts, _or_parts))[0] if parts else None
    if out is None:
        raise _empty_input(C)
    W, n = out
    return to_device(W, device), n, len(parts)


# ----------------------------------------------------------------------------------
# Score: exact-recall counts per block
# ----------------------------------------------------------------------------------
def _block_hits(est, block, y):
    """Per probe of the block, 1 when its completion equals its row of ``y`` (NumPy int64)."""
    if block.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    pred = to_host(est.predict(block))
    y_true, _ = est._check_symbols(to_host(y), reset=False, allow_erased=False, name="y")
    if y_true.shape != pred.shape:
        raise ValueError(f"y has shape {y_true.shape}, but the probes have shape {pred.shape}.")
    return np.all(pred == y_true, axis=1).astype(np.int64)


def score(est, X, y):
    """:meth:`GBNNMemory.score` of Dask probes ``X``: computed blockwise, a float on the client.

    ``y`` may be a Dask array (rechunked to the rows of ``X``) or an in-memory array of
    the same shape; only one count per block reaches the client. Equal to the
    in-memory score (both divide an exact count of hits by the number of probes).
    """
    import dask
    import dask.array as da

    check_columns(est, X, "score")
    X = merge_rows(X, device_of(est))
    if not hasattr(y, "shape"):
        y = np.asarray(y)
    if y.ndim != 2 or y.shape[0] != X.shape[0]:
        raise ValueError(f"y has shape {y.shape}, but the probes have shape {X.shape}.")
    y = y.rechunk((X.chunks[0], -1)) if is_dask_collection(y) else da.from_array(y, chunks=(X.chunks[0], -1))

    model = shared(est)  # one graph key: shipped once per worker, not inside every task
    hits = da.map_blocks(
        _block_hits, model, X, y, dtype=np.int64, drop_axis=1, meta=np.empty((0,), dtype=np.int64)
    )
    total, n = dask.compute(hits.sum(), (hits >= 0).sum())
    if int(n) == 0:
        raise _empty_input(X.shape[1])
    return float(int(total) / int(n))
