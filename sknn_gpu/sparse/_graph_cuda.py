"""CUDA engine of :class:`~sknn_gpu.sparse.SparseGraph`: CuPy arrays, our kernels (``_kernels/sparsenet.cu``).

Same functions and signatures as the CPU engine (``_graph_cpu``: :func:`forward`,
:func:`backward`), same results within float64 rounding. Also the GPU-only forward
paths: :func:`prepared_forward` for benchmarks, :func:`forward_host` (a small NumPy
batch through pinned host memory, replayed as a captured CUDA graph) and
:func:`resident_forward` (the same batches answered by an open resident kernel, whose
protocol is ``_graph_resident_cuda``). The device plan, the executor rule and the
launch configurations these paths launch with are in ``_graph_plan_cuda``. Nothing
here resolves ``device``: the caller chose this engine. Kernels come from
:func:`sknn_gpu._kernels.get_function` (memoized per device).
"""

from __future__ import annotations

import threading

import numpy as np

from .._backend import check_memory, current_device_id, get_cupy, host_mapped
from .._kernels import get_function, stop_resident_kernels
from .._kernels._launch import capture_graph
from ._graph_plan_cuda import _barrier_failed, _exec_config, _plan_config, device_plan

__all__ = [
    "forward",
    "forward_host",
    "fits_host_mapped",
    "resident_forward",
    "backward",
    "prepared_forward",
]


def _scratch_values(cfg, n_slots, batch):
    """Node-value buffer for a forward pass whose values are not returned: reused across
    calls on the same stream (stream order keeps consecutive calls apart)."""
    cp = get_cupy()
    sk = cp.cuda.get_current_stream().ptr
    V = cfg["scratch"].get(sk)
    if V is None:
        V = cfg["scratch"][sk] = cp.empty((n_slots, batch), dtype=cp.float64)
    return V


def _launch_checked(d, cfg, X, V, out, w, b):
    """Launch with the finiteness flag, wait, and raise for a flagged input (ValueError)
    or a barrier time-out (RuntimeError)."""
    cfg["launch"](X, V, out, w, b, d["flag_addr"])
    _wait_checked(d)


def _wait_checked(d):
    """Wait for the current stream, then raise for a barrier time-out (RuntimeError) or a
    flagged non-finite input (ValueError; the flag is reset)."""
    get_cupy().cuda.get_current_stream().synchronize()
    if d["bar_err_np"][0]:
        _barrier_failed(d)
    flag = d["flag_np"]
    if flag[0]:
        flag[0] = 0
        raise ValueError("X contains NaN or infinite values.")


def forward(graph, X, executor="auto", w=None, b=None, keep_values=False, check_finite=False, rows=None):
    """Our kernels: evaluate ``graph`` on CuPy ``X`` (n_samples, n_inputs), float64.

    ``keep_values`` also returns the node values ``V`` (n_slots, n_samples) for the
    backward pass. ``check_finite`` lets the kernels flag a non-finite input, waits for
    them and raises ValueError (the public :meth:`SparseGraph.forward` uses it; it
    replaces a separate reduction over ``X``). ``rows``: evaluate ``X[rows]`` (a
    minibatch of the training data).
    """
    cp = get_cupy()
    if rows is not None:
        X = X[rows]
    if X.dtype != cp.float64 or not X.flags.c_contiguous:
        X = cp.ascontiguousarray(X, dtype=cp.float64)
    B = X.shape[0]
    d, cfg = _plan_config(graph, B, executor)
    out = cp.empty((B, d["n_out"]), dtype=cp.float64)
    if keep_values:
        V = cp.empty((d["n_slots"], B), dtype=cp.float64)
    elif cfg["needs_v"]:
        V = _scratch_values(cfg, d["n_slots"], B)
    else:
        V = None
    w = d["w"] if w is None else w
    b = d["b"] if b is None else b
    if check_finite:
        _launch_checked(d, cfg, X, V, out, w, b)
    else:
        cfg["launch"](X, V, out, w, b)
    return (out, V) if keep_values else out


def prepared_forward(graph, X, executor="auto"):
    """``(launch, out)``: a callable that re-runs the forward pass on CuPy ``X`` into ``out``.

    Buffers and kernel arguments are prepared once, so repeated calls pay only the
    launches (used by the benchmark to separate kernel time from Python overhead).
    """
    cp = get_cupy()
    d = device_plan(graph)
    X = cp.ascontiguousarray(X, dtype=cp.float64)
    B = int(X.shape[0])
    cfg = _exec_config(d, B, executor)
    V = cp.empty((d["n_slots"], B), dtype=cp.float64) if cfg["needs_v"] else None
    out = cp.empty((B, d["n_out"]), dtype=cp.float64)
    launch, w, b = cfg["launch"], d["w"], d["b"]
    return (lambda: launch(X, V, out, w, b)), out


#: Largest batch (its inputs and outputs, bytes) that :func:`forward_host` evaluates
#: from pinned host memory; larger NumPy batches are copied to the device.
HOST_MAPPED_MAX_BYTES = 64 << 10

#: cudaMemcpyHostToDevice
_H2D = 1

#: Staging buffer sets kept per plan (one per thread and batch size) before they are dropped.
HOST_MAPPED_MAX_BUFFERS = 32


def fits_host_mapped(graph, X):
    """Whether :func:`forward_host` takes ``X``: a 2-D float64 NumPy array of the graph's
    width, at most ``HOST_MAPPED_MAX_BYTES`` of inputs and outputs."""
    return (
        type(X) is np.ndarray
        and X.ndim == 2
        and X.dtype == np.float64
        and X.shape[1] == graph.n_inputs
        and 8 * X.shape[0] * (graph.n_inputs + graph.n_outputs) <= HOST_MAPPED_MAX_BYTES
    )


def resident_forward(graph, X, executor="auto"):
    """The outputs of the small float64 NumPy batch ``X`` (2-D, or 1-D for one row: 1-D
    out) from the graph's resident kernel on the current device, or None when no resident
    block of the graph is open there, or its kernel does not take this call (see
    :func:`fits_host_mapped`; a batch size whose launch configuration is not yet made or
    is not the cluster executor's). The fast path of :meth:`SparseGraph.forward` and
    :func:`forward_host`, kept to a few operations (a call is ~20 µs): the checks every
    launch makes first are left to the kernel's answer (a barrier time-out, a non-finite
    input), and no memory is allocated."""
    d = graph._dev.get(current_device_id())
    res = None if d is None else d["resident"]
    if res is None or not res.users or X.dtype is not _F64:  # (another float64 dtype object: the usual path)
        return None
    one = X.ndim == 1
    B = 1 if one else X.shape[0]
    if not (one or X.ndim == 2) or X.shape[-1] != d["n_in"] or B * d["io_bytes"] > HOST_MAPPED_MAX_BYTES:
        return None
    cfg = d["cfg"].get((B, executor))
    if cfg is None or cfg.get("mode") != "cluster":
        return None
    out = res.call(cfg, X)  # (a row of shape (n_in,) is copied into the (1, n_in) buffer)
    return out[0] if one else out


_F64 = np.dtype(np.float64)


def forward_host(graph, X, executor="auto", resident=True):
    """Evaluate a small float64 NumPy batch (see :func:`fits_host_mapped`) with no
    allocation and, from the second call on, one API call: a latency path for one-row
    predictions.

    ``X`` is written into a pinned host buffer and copied asynchronously into a device
    buffer (the kernels read it there: read in place over the bus, a wide row read by
    every block of a cluster took far longer); the kernels write the outputs straight
    into pinned host memory (:func:`~sknn_gpu._backend.host_mapped`), which the host
    reads once the stream is synchronized. After the first call the copy and the launch
    are replayed as one captured CUDA graph (``capture_graph``; not for executors with a
    per-stream workspace). The buffers and the graph are kept with the device plan
    per (thread, batch size, executor), so concurrent callers do not share them. A
    non-finite input raises ValueError (the kernels' flag). Returns a new NumPy array of
    shape (n_samples, n_outputs). ``resident=False``: the caller has just asked
    :func:`resident_forward` itself.
    """
    if resident:
        out = resident_forward(graph, X, executor)
        if out is not None:
            return out
    B = X.shape[0]
    d, cfg = _plan_config(graph, B, executor)
    res = d["resident"]
    if res is not None and res.users and cfg.get("mode") == "cluster":
        return res.call(cfg, X)  # (the first call of this batch size in the block)
    key = (threading.get_ident(), B, executor)
    bufs = d["mapped"].get(key)
    if bufs is None:
        if len(d["mapped"]) >= HOST_MAPPED_MAX_BUFFERS:
            d["mapped"].clear()  # a caller still holding its buffers keeps them alive
        x_host = host_mapped((B, d["n_in"]), np.float64)[0]
        x_dev = get_cupy().empty((B, d["n_in"]), dtype=np.float64)
        bufs = [x_host, x_dev, *host_mapped((B, d["n_out"]), np.float64), None]
        d["mapped"][key] = bufs
    x_host, x_dev, out_host, out_dev, replay = bufs
    np.copyto(x_host, X)
    cp = get_cupy()
    if replay is not None:
        replay.launch(cp.cuda.get_current_stream())
        _wait_checked(d)
        return out_host.copy()

    def enqueue():
        stream = cp.cuda.get_current_stream().ptr
        cp.cuda.runtime.memcpyAsync(x_dev.data.ptr, x_host.ctypes.data, x_host.nbytes, _H2D, stream)
        V = _scratch_values(cfg, d["n_slots"], B) if cfg["needs_v"] else None
        cfg["launch"](x_dev, V, out_dev, d["w"], d["b"], d["flag_addr"])

    enqueue()
    _wait_checked(d)
    if not cfg["needs_v"]:  # (a workspace is per stream; a graph would fix one)
        bufs[4] = capture_graph(enqueue)  # later calls: one graph launch instead of two calls
    return out_host.copy()


def backward(graph, V, G_out, w, executor="auto"):
    """Our kernels: plan-order gradients ``(gw, gb)`` given dL/d(outputs) (n_outputs, B) on the GPU."""
    cp = get_cupy()
    d = device_plan(graph)
    B = int(V.shape[1])
    n_in, n_comp = d["n_in"], d["n_comp"]
    lp = d["level_ptr_host"]
    sizes = np.diff(lp)
    i32 = np.int32
    if 16 * n_comp * B > (16 << 20):
        check_memory(16 * n_comp * B, "cuda", "SparseGraph backward (gradients)")
    G = cp.zeros((n_comp, B), dtype=cp.float64)
    G[d["out_slots"] - n_in] = G_out  # output ids are unique
    D = cp.empty((n_comp, B), dtype=cp.float64)
    slope = np.float64(graph.slope)
    if d["bar_err_np"][0]:  # a grid barrier of an earlier launch timed out (host-mapped: no copy)
        _barrier_failed(d)
    cfg = _exec_config(d, B, executor)
    args_tail = (
        d["t_indptr"],
        d["t_rows"],
        d["t_perm"],
        w,
        d["resp"],
        d["act"],
        V,
        G,
        D,
        i32(B),
        i32(n_in),
        slope,
    )
    if cfg["executor"] == "fused":
        nblk, nthr = cfg["bwd"]
        if nblk > 1:  # a grid barrier: every SM must be free for its blocks
            stop_resident_kernels()
        args = (
            (d["level_ptr"], d["n_levels_i32"])
            + args_tail
            + (cfg["bar_bwd"], i32(nblk > 1), d["bar_err_addr"])
        )
        get_function("sparsenet", "backward_fused")((nblk,), (nthr,), args)
    else:
        nthr = 256
        for level in range(len(sizes) - 1, -1, -1):
            r0, nr = int(lp[level]), int(sizes[level])
            n = nr * B
            if n == 0:
                continue
            grid = max(1, min(-(-n // nthr), 1 << 20))
            get_function("sparsenet", "backward_level")((grid,), (nthr,), (i32(r0), i32(nr)) + args_tail)
    E = int(d["indices"].shape[0])
    gw = cp.empty(E, dtype=cp.float64)
    gb = cp.empty(n_comp, dtype=cp.float64)
    if E:
        grid = max(1, min(-(-E // 8), 65535))
        get_function("sparsenet", "edge_grad")(
            (grid,), (256,), (d["row_of_edge"], d["indices"], d["resp"], D, V, gw, i32(E), i32(B))
        )
    if n_comp:
        grid = max(1, min(-(-n_comp // 8), 65535))
        get_function("sparsenet", "row_sum")((grid,), (256,), (D, gb, i32(n_comp), i32(B)))
    return gw, gb
