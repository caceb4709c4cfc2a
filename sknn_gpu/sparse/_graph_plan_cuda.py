"""Device plan and launch configurations of the CUDA engine of :class:`~sknn_gpu.sparse.SparseGraph`.

What every GPU path launches with, computed once and cached with the graph: the device
copy of the level plan (:func:`device_plan`: per device, never pickled), the executor
rule (:func:`choose_executor`) and, per (batch, executor), the launch configuration
with its launch closure (``_exec_config``): the per-level kernels, the fused kernels
with their edge schedules and lanes, and the thread-block-cluster kernel with its
resident build (its cluster size is settled by a trial launch). ``_plan_config`` adds
the checks every forward pass makes before it launches (an earlier grid-barrier
time-out, free memory). The passes themselves are in ``_graph_cuda`` and the resident
kernel's protocol in ``_graph_resident_cuda``. Kernels come from
:func:`sknn_gpu._kernels.get_function` (memoized per device); device facts from
:func:`sknn_gpu._backend.device_limits`.
"""

from __future__ import annotations

import numpy as np

from .._backend import SMALL_WORK_BYTES, check_memory, current_device_id, device_limits, get_cupy, host_mapped
from .._kernels import allow_large_clusters, check_barrier_error, get_function, stop_resident_kernels
from .._kernels._launch import Launch, LaunchTable

__all__ = ["device_plan", "choose_executor", "FUSED_MAX_MEAN_WORK"]

#: Mean work per level (nodes x samples) up to which the single-launch executor is used.
FUSED_MAX_MEAN_WORK = 20000


def device_plan(graph):
    """Plan arrays on the current GPU (cached on the graph, never pickled)."""
    cp = get_cupy()
    key = current_device_id()
    d = graph._dev.get(key)
    if d is None:
        p = graph.plan
        d = {
            k: cp.asarray(v)
            for k, v in p.items()
            if isinstance(v, np.ndarray) and k not in ("level", "slot", "nodes", "edge_id")
        }
        pw, pb = graph.plan_params()
        d["w"], d["b"] = cp.asarray(pw), cp.asarray(pb)
        d["n_in"] = p["n_in"]
        d["n_comp"] = int(p["nodes"].size)
        d["level_ptr_host"] = p["level_ptr"]
        limits = device_limits(key)
        d["n_sm"] = limits.sm_count
        d["smem_optin"] = limits.smem_per_block_optin
        d["cc"] = limits.compute_capability
        d["indptr_host"] = p["indptr"]
        d["indices_host"] = p["indices"]
        d["n_out"] = int(p["out_slots"].shape[0])
        d["n_slots"] = p["n_in"] + d["n_comp"]
        d["n_levels_i32"] = np.int32(p["level_ptr"].shape[0] - 1)
        d["n_in_i32"] = np.int32(p["n_in"])
        d["n_out_i32"] = np.int32(d["n_out"])
        d["slope"] = np.float64(graph.slope)
        acts = p["act"]
        # one activation for every computed node: the cluster kernel is compiled for it
        d["uniform_act"] = int(acts[0]) if acts.size and np.all(acts == acts[0]) else -1
        lp, indptr = p["level_ptr"], p["indptr"]
        rows = np.diff(lp).astype(np.int64)
        fan = np.diff(indptr).astype(np.int64)
        d["lvl_rows"] = rows
        d["lvl_edges"] = indptr[lp[1:]].astype(np.int64) - indptr[lp[:-1]]
        d["lvl_fan_max"] = (
            np.maximum.reduceat(fan, lp[:-1]) if rows.size and fan.size else np.zeros(rows.size, np.int64)
        )
        # host-mapped flag for the in-kernel finiteness check of X, and the fused kernels'
        # grid-barrier error word (grid_barrier.cuh): the device writes them, the host
        # reads them without a copy (the error word is written only on a time-out)
        d["flag_np"], flag = host_mapped((1,), np.int32)
        d["bar_err_np"], err = host_mapped((1,), np.int32)
        d["flag_np"][0] = d["bar_err_np"][0] = 0
        d["flag_addr"], d["bar_err_addr"] = np.uint64(flag.data.ptr), np.uint64(err.data.ptr)
        d["mapped"] = {}  # (thread, batch, executor) -> forward_host's staging buffers and graph
        d["resident"] = None  # _graph_resident_cuda.ResidentForward, made by the first resident() block
        d["io_bytes"] = 8 * (d["n_in"] + d["n_out"])  # one row's inputs and outputs
        d["cfg"] = {}
        graph._dev[key] = d
    return d


def _barrier_failed(d):
    """A fused kernel's grid barrier timed out (``d['bar_err_np']`` is set): wait for the
    launches in flight (a poisoned counter makes them fail fast), re-arm every barrier of
    the plan (zeroed counters and error word) and raise RuntimeError."""
    cp = get_cupy()
    cp.cuda.Device().synchronize()
    for cfg in d["cfg"].values():
        for name in ("bar_fwd", "bar_bwd"):
            if name in cfg:
                cfg[name].fill(0)
    cp.cuda.Device().synchronize()
    err = d["bar_err_np"].copy()
    d["bar_err_np"][0] = 0
    d["flag_np"][0] = 0  # the failed launch's finiteness flag means nothing
    check_barrier_error(err, "SparseGraph fused forward/backward")


def choose_executor(level_sizes, batch):
    """'fused' when the mean work per level (nodes x batch) is at most ``FUSED_MAX_MEAN_WORK``.

    Small levels cannot fill the GPU, so the cost of a per-level launch (~7 us from
    Python) dominates; one launch that walks every level with block (one block) or
    grid synchronisation is then cheaper. Wide levels with large batches fill the
    GPU on their own and per-level launches win.
    """
    n_levels = max(1, len(level_sizes))
    mean_work = batch * float(np.sum(level_sizes)) / n_levels
    return "fused" if mean_work <= FUSED_MAX_MEAN_WORK else "level"


def _fused_config(d, level_sizes, batch, lanes=None):
    """``(n_blocks, n_threads)`` for the fused backward kernel: one block (``__syncthreads``) when
    the widest level fits in 1,024 threads, else up to one 256-thread block per SM (grid barrier;
    at most one block per SM keeps every block co-resident)."""
    if len(level_sizes) == 0:
        return 1, 32
    work = np.asarray(level_sizes, dtype=np.int64) * batch
    if lanes is not None:
        work = work * lanes
    max_work = int(work.max())
    if max_work <= 1024:
        return 1, max(32, -(-max_work // 32) * 32)
    return max(1, min(d["n_sm"], -(-max_work // 256))), 256


#: Batches below this use lane groups (several lanes per (node, sample)) in the forward pass.
LANES_MAX_BATCH = 32

#: The fused forward pass keeps node values in shared memory (one block) when they fit and
#: one block needs at most this many rounds per level on average.
SMEM_MAX_MEAN_ROUNDS = 2.0

#: Threads per block of the fused forward kernels (their ``__launch_bounds__``).
FUSED_MAX_THREADS = 512

#: Edges per lane held in the fused forward pass's edge schedule (longer rows continue
#: through the CSR arrays); a level's schedule is also capped at 4 x its edges + 4,096.
ELL_MAX_K = 4


def _edge_schedule(d, lanes, max_k=ELL_MAX_K):
    """Per-level edge schedule of the fused forward kernels for one lane configuration.

    Entry ``(k, rr, lane)`` of level ``l`` sits at ``off[l] + (k * R + rr) * L + lane`` and
    names edge ``lane + k * L`` of the level's row ``rr`` (source slot, or -1 past the
    row's end, and its plan position for gathering weights), for ``k < ell_k[l]``.
    Returns ``(off int64, ell_k int32, src int32, pos int64, tail bool)``; ``tail[l]`` is
    True when some row of level ``l`` is longer than its schedule (the kernel then reads
    the rest through the CSR arrays). ``max_k`` caps the entries per lane (``ELL_MAX_K``
    for the fused kernels, ``CLUSTER_KMAX`` for the cluster kernel).
    """
    lp, indptr, indices = d["level_ptr_host"], d["indptr_host"], d["indices_host"]
    n_levels = lp.shape[0] - 1
    off = np.zeros(n_levels, dtype=np.int64)
    ks = np.zeros(n_levels, dtype=np.int32)
    tail = np.zeros(n_levels, dtype=bool)
    srcs, poss = [], []
    total = 0
    for lv in range(n_levels):
        r0, r1 = int(lp[lv]), int(lp[lv + 1])
        R, L = r1 - r0, int(lanes[lv])
        fan = np.diff(indptr[r0 : r1 + 1]).astype(np.int64)
        off[lv] = total
        if R == 0 or fan.size == 0 or fan.max() == 0:
            continue
        K = min(max_k, -(-int(fan.max()) // L))
        while K > 0 and K * R * L > 4 * int(fan.sum()) + 4096:
            K -= 1
        tail[lv] = int(fan.max()) > K * L
        if K == 0:
            continue
        j = np.arange(L)[None, None, :] + L * np.arange(K)[:, None, None]  # (K, 1, L)
        valid = j < fan[None, :, None]  # (K, R, L)
        pos = np.where(valid, indptr[r0:r1].astype(np.int64)[None, :, None] + j, 0)
        srcs.append(np.where(valid, indices[pos], -1).astype(np.int32).ravel())
        poss.append(pos.ravel())
        ks[lv] = K
        total += K * R * L
    src = np.concatenate(srcs) if srcs else np.zeros(0, np.int32)
    pos = np.concatenate(poss) if poss else np.zeros(0, np.int64)
    return off, ks, src, pos, tail


def _pow2_ceil(x):
    return (2 ** np.ceil(np.log2(np.maximum(x, 1)))).astype(np.int64)


def _level_lanes(d, batch):
    """Per-level executor: lanes per (node, sample) for every level: 1 for large batches; for
    small ones the power of two (<= 32) covering the level's mean fan-in."""
    sizes = np.diff(d["level_ptr_host"])
    if batch >= LANES_MAX_BATCH or sizes.size == 0:
        return np.ones(sizes.size, dtype=np.int32)
    mean = np.ceil(d["lvl_edges"] / np.maximum(sizes, 1))
    return np.minimum(_pow2_ceil(mean), 32).astype(np.int32)


def _fused_lanes(d, batch, capacity, cap):
    """Fused executor: lanes per item for every level. A lane reads two edges before the
    level starts (prefetched during the previous barrier), so ``ceil(max fan-in / 2)``
    lanes finish a level's longest row in one pass; fewer when the level would then need
    more than ``capacity`` threads, but never fewer than the mean fan-in needs."""
    rows = d["lvl_rows"]
    if batch >= LANES_MAX_BATCH or rows.size == 0:
        return np.ones(rows.size, dtype=np.int32)
    items = np.maximum(rows * batch, 1)
    need = _pow2_ceil(np.ceil(d["lvl_fan_max"] / 2.0))
    mean = _pow2_ceil(np.ceil(d["lvl_edges"] / np.maximum(rows, 1)))
    fit = 2 ** np.floor(np.log2(np.maximum(capacity // items, 1))).astype(np.int64)
    lanes = np.maximum(np.minimum(need, fit), np.minimum(mean, need))
    return np.minimum(lanes, cap).astype(np.int32)


def _fused_forward_config(d, batch, mode):
    """``(mode, n_blocks, n_threads, shared_bytes, lanes)`` for the fused forward kernel."""
    rows = d["lvl_rows"]
    n_levels = rows.size
    v_bytes = 8 * d["n_slots"] * batch
    smem_fits = v_bytes + 1024 <= d["smem_optin"]
    if mode in ("auto", "smem") and smem_fits:
        lanes = _fused_lanes(d, batch, FUSED_MAX_THREADS, FUSED_MAX_THREADS)
        work = rows * batch * lanes
        unit = max(32, int(lanes.max(initial=1)))  # L > 32 lane groups must not straddle blocks
        nthr = min(FUSED_MAX_THREADS, max(1, -(-int(work.max(initial=1)) // unit)) * unit)
        rounds = float(np.sum(-(-work // nthr))) / max(n_levels, 1)
        if mode == "smem" or rounds <= SMEM_MAX_MEAN_ROUNDS:
            return "smem", 1, nthr, v_bytes, lanes
    if mode == "smem":
        raise ValueError(
            f"the node values ({v_bytes:,} bytes at batch {batch}) do not fit in shared memory "
            f"({d['smem_optin']:,} bytes); use executor='fused'."
        )
    cap_threads = d["n_sm"] * 256
    lanes = _fused_lanes(d, batch, cap_threads, 256)
    max_work = int((rows * batch * lanes).max(initial=1))
    nthr = 256 if max_work <= cap_threads else FUSED_MAX_THREADS
    return "grid", max(1, min(d["n_sm"], -(-max_work // nthr))), nthr, 0, lanes


#: Schedule entries per lane that the cluster kernel prefetches into registers
#: (``CLUSTER_KMAX`` in sparsenet.cu).
CLUSTER_KMAX = 8

#: Threads per block of the cluster kernel (its ``__launch_bounds__``).
CLUSTER_THREADS = 512

#: Largest cluster tried: 16 blocks is H100's non-portable maximum (8 is portable); a
#: size the device refuses at the first launch is halved (see ``_cluster_kernel``).
CLUSTER_MAX = 16


def _cluster_plan(d, batch, max_cluster):
    """Launch plan of the cluster kernel, or None when its shared memory does not fit.

    Returns ``(C, n_threads, shared_bytes, lanes, fits)``: ``C`` blocks per cluster (the
    smallest power of two up to ``max_cluster`` whose ``C x CLUSTER_THREADS`` threads give
    every level one round with at most ``CLUSTER_KMAX`` schedule entries per lane),
    threads per block, dynamic shared memory (level table + one node-value replica), lanes
    per level (powers of two: enough for ``CLUSTER_KMAX`` entries each, fewer when the
    level has more items than threads allow) and whether that bound held for every level
    (``fits``; else the widest levels take more entries through the CSR tail, or more
    rounds).
    """
    rows, fan = d["lvl_rows"], d["lvl_fan_max"]
    n_levels = int(rows.size)
    shared = 32 * n_levels + 8 * d["n_slots"] * batch
    if n_levels == 0 or shared + 1024 > d["smem_optin"]:
        return None
    items = np.maximum(rows * batch, 1)
    need = _pow2_ceil(np.ceil(fan / CLUSTER_KMAX))
    C = 1
    while C < max_cluster and np.any(items * need > C * CLUSTER_THREADS):
        C *= 2
    fits = bool(np.all(items * need <= C * CLUSTER_THREADS))
    room = 2 ** np.floor(np.log2(np.maximum((C * CLUSTER_THREADS) // items, 1))).astype(np.int64)
    lanes = np.minimum(np.minimum(need, room), CLUSTER_THREADS).astype(np.int32)
    unit = max(32, int(lanes.max()))  # lane groups never straddle a block
    per_block = -(-int((items * lanes).max()) // C)
    nthr = min(CLUSTER_THREADS, -(-per_block // unit) * unit)
    return C, nthr, shared, lanes, fits


def _cluster_worth(d, batch, plan):
    """Whether 'auto' takes the cluster kernel: its plan fits (``_cluster_plan``), or no
    level needs more than twice ``CLUSTER_KMAX`` entries per lane or two rounds (a few
    rows continuing through the CSR tail still beat the grid barrier; many do not)."""
    C, nthr, _, lanes, fits = plan
    if fits:
        return True
    per_lane = -(-d["lvl_fan_max"] // lanes)
    rounds = -(-(d["lvl_rows"] * batch * lanes) // (C * nthr))
    return bool(per_lane.max() <= 2 * CLUSTER_KMAX and rounds.max() <= 2)


def _cluster_kernel(d, C, batch, resident=False):
    """The compiled cluster kernel for ``C`` blocks per cluster with its attributes set, or
    None when this device or CuPy cannot run it (clusters need compute capability 9.0).
    One-row calls get a build with the batch size fixed at 1, and a graph whose computed
    nodes share one activation a build without the activation dispatch (together ~0.6 µs
    of a 5-level launch on an H100, the same bits). ``resident`` builds the request loop
    of ``_graph_resident_cuda.ResidentForward`` (``RESIDENT`` in sparsenet.cu)."""
    if C > 1 and d["cc"] < (9, 0):
        return None
    extra = {"RESIDENT": 1} if resident else {}
    kern = get_function(
        "sparsenet",
        "forward_cluster",
        CLUSTER=C,
        BATCH=1 if batch == 1 else 0,
        UNIFORM_ACT=d["uniform_act"],
        **extra,
    )
    if C > 8 and not allow_large_clusters(kern):  # non-portable cluster size
        return None
    return kern


def _cluster_launcher(d, batch, forced):
    """Config entries and launch closure of the cluster executor, or None.

    None when the node values do not fit in shared memory and, unless ``forced``, when
    the plan is not worth it (``_cluster_worth``). A cluster size the device
    refuses at a trial launch (16 blocks need 16 free SMs in one GPC) is halved.
    """
    cp = get_cupy()
    C_max = CLUSTER_MAX if d["cc"] >= (9, 0) else 1
    while True:
        plan = _cluster_plan(d, batch, C_max)
        if plan is None or not (forced or _cluster_worth(d, batch, plan)):
            return None
        C, nthr, shared, lanes, _ = plan
        kern = _cluster_kernel(d, C, batch)
        if kern is not None:
            if shared > 48 * 1024:
                kern.max_dynamic_shared_size_bytes = d["smem_optin"] - 1024
            part = _cluster_part(d, batch, kern, C, nthr, shared, lanes)
            if C == 1:
                return part
            X = cp.zeros((batch, d["n_in"]), dtype=cp.float64)
            out = cp.empty((batch, d["n_out"]), dtype=cp.float64)
            try:  # the cluster shape is only checked when a launch is made
                part["launch"](X, None, out, d["w"], d["b"])
                cp.cuda.get_current_stream().synchronize()
                return part
            except cp.cuda.driver.CUDADriverError:
                pass
        if C == 1:
            return None
        C_max = C // 2


def _cluster_part(d, batch, kern, C, nthr, shared, lanes):
    """Config entries of the cluster executor for one plan, with its launch closure. The
    graph's own parameters go through a prebuilt driver launch record after the first
    call (``_kernels._launch``); training passes its own weights through the RawKernel."""
    cp = get_cupy()
    off, ks, src, pos, tail = _edge_schedule(d, lanes, CLUSTER_KMAX)
    if src.size >= 2**31:
        raise ValueError("the cluster kernel's schedule needs 32-bit offsets; use executor='fused:grid'.")
    rows = d["lvl_rows"]
    groups = (C * nthr) // lanes
    levels = np.stack(
        [
            off,
            rows * lanes,
            d["level_ptr_host"][:-1],
            rows,
            np.log2(lanes).astype(np.int64),
            ks + 256 * tail,
            -(-(rows * batch) // groups),
            groups,
        ],
        axis=1,
    ).astype(np.int32)
    pos = cp.asarray(pos)
    dw, db = d["w"], d["b"]
    w_ell0 = dw.take(pos)
    head = (cp.asarray(levels), d["n_levels_i32"], d["indptr"], d["indices"])
    mid = (d["resp"], d["act"], d["out_index"], cp.asarray(src))
    sizes = (np.int32(batch), d["n_in_i32"], d["n_out_i32"], np.int32(d["n_comp"]), np.float64(d["slope"]))
    grid, block = (C,), (nthr,)
    table = LaunchTable(limit=4)
    iX = len(head) + 2 + len(mid) + 1  # per-call arguments: X, Vg, out, then flag (see forward_cluster)
    zero = np.uint64(0)

    def make():
        layout = [
            ("q", a.data.ptr) if isinstance(a, cp.ndarray) else ("i", int(a))
            for a in head + (dw, db) + mid + (w_ell0,)
        ]
        layout += ["p", "p", "p"] + [("i", int(v)) for v in sizes[:4]]
        layout += ["f", "p", ("q", int(d["bar_err_addr"])), ("q", 0), ("q", 0)]
        rec = Launch(kern, grid, block, layout, False, shared_mem=shared)
        rec.floats[0].value = float(d["slope"])
        return rec

    def launch(X, V, out, w, b, flag=zero):
        vg = np.uint64(V.data.ptr) if V is not None else zero
        own = w is dw and b is db
        if own:
            rec = table.records.get(0)
            if rec is not None:
                s = rec.slots
                s[iX], s[iX + 1], s[iX + 2], s[iX + 8] = X.data.ptr, int(vg), out.data.ptr, int(flag)
                rec.launch(cp.cuda.get_current_stream().ptr)
                return
        w_ell = w_ell0 if own else w.take(pos)  # training passes its own weights
        args = head + (w, b) + mid + (w_ell, X, vg, out) + sizes + (flag, d["bar_err_addr"], zero, zero)
        kern(grid, block, args, shared_mem=shared)
        if own:
            table.register(0, make)

    def resident(x, out, ctrl, idle_ns, stream):
        """Launch the resident build on ``stream`` (see ``_graph_resident_cuda.ResidentForward``)."""
        kern_r = _cluster_kernel(d, C, batch, resident=True)
        if shared > 48 * 1024:
            kern_r.max_dynamic_shared_size_bytes = d["smem_optin"] - 1024
        tail = (d["flag_addr"], d["bar_err_addr"], np.uint64(ctrl.data.ptr), np.uint64(idle_ns))
        args = head + (dw, db) + mid + (w_ell0, x, zero, out) + sizes + tail
        with stream:
            kern_r(grid, block, args, shared_mem=shared)

    return {
        "mode": "cluster",
        "cluster": C,
        "fwd": (C, nthr),
        "lanes": lanes,
        "shared_bytes": shared,
        "ell_k": ks,
        "ell_tail": tail,
        "needs_v": False,
        "launch": launch,
        "resident": resident,
    }


def _exec_config(d, batch, executor):
    """Launch configuration for one (batch, executor), cached with the device plan.

    ``executor`` is 'auto', 'level', 'fused', or 'fused:cluster' / 'fused:smem' /
    'fused:grid' to force a mode of the fused forward pass (tests and benchmarks). 'auto'
    and 'fused' take the cluster kernel where ``_cluster_launcher`` finds it worth it,
    else the older fused modes by ``_fused_forward_config``.
    """
    key = (batch, executor)
    cfg = d["cfg"].get(key)
    if cfg is not None:
        return cfg
    cp = get_cupy()
    sizes = np.diff(d["level_ptr_host"])
    mode = "auto"
    if executor in ("fused:smem", "fused:grid", "fused:cluster"):
        chosen, mode = "fused", executor.split(":")[1]
    elif executor in ("level", "fused"):
        chosen = executor
    elif executor == "auto":
        chosen = choose_executor(sizes, batch)
    else:
        raise ValueError(f"executor must be 'auto', 'level' or 'fused', got {executor!r}.")
    i32 = np.int32
    n_in, n_out, n_slots = d["n_in"], d["n_out"], d["n_slots"]
    cfg = {"executor": chosen, "need": 8 * (n_slots * batch + n_out * batch), "scratch": {}}
    slope = np.float64(d["slope"])
    zero = np.uint64(0)
    bar_err = d["bar_err_addr"]
    part = None
    if chosen == "fused" and mode in ("auto", "cluster"):
        part = _cluster_launcher(d, batch, forced=mode == "cluster")
        if part is None and mode == "cluster":
            raise ValueError(
                f"the node values ({8 * n_slots * batch:,} bytes at batch {batch}) and the level table "
                f"do not fit in shared memory ({d['smem_optin']:,} bytes); use executor='fused'."
            )
    if part is not None:
        cfg.update(part)
        cfg["bwd"] = _fused_config(d, sizes, batch)
        cfg["bar_bwd"] = cp.zeros(1, dtype=cp.uint64)
        d["cfg"][key] = cfg
        return cfg
    if chosen == "fused":
        fmode, nblk, nthr, shmem, lanes = _fused_forward_config(d, batch, mode)
        kern = get_function("sparsenet", "forward_fused_smem" if fmode == "smem" else "forward_fused_grid")
        if shmem > 48 * 1024:
            # allow the largest request the mode rule can make (idempotent; once per cached config)
            kern.max_dynamic_shared_size_bytes = d["smem_optin"] - 1024
        cfg.update(mode=fmode, fwd=(nblk, nthr), lanes=lanes, shared_bytes=shmem)
        cfg["needs_v"] = fmode == "grid"
        cfg["bwd"] = _fused_config(d, sizes, batch)
        cfg["lanes_dev"] = cp.asarray(lanes)
        # grid-barrier arrival counters, one per kernel (each launch of it has the same block count)
        cfg["bar_fwd"] = cp.zeros(1, dtype=cp.uint64)
        cfg["bar_bwd"] = cp.zeros(1, dtype=cp.uint64)
        ell_off, ell_k, ell_src, ell_pos, tail = _edge_schedule(d, lanes)
        cfg["ell_k"], cfg["ell_tail"] = ell_k, tail
        ell = (cp.asarray(ell_off), cp.asarray((ell_k + 256 * tail).astype(np.int32)), cp.asarray(ell_src))
        ell_pos = cp.asarray(ell_pos)
        dw = d["w"]
        dw_ell = dw.take(ell_pos)  # schedule weights of the graph's own parameters
        grid, block = (nblk,), (nthr,)
        c = (d["level_ptr"], d["n_levels_i32"], d["indptr"], d["indices"])
        r = (d["resp"], d["act"])
        o = (
            d["out_index"],
            i32(batch),
            d["n_in_i32"],
            d["n_out_i32"],
            slope,
            cfg["bar_fwd"],
            cfg["lanes_dev"],
        )

        def launch(X, V, out, w, b, flag=zero):
            w_ell = dw_ell if w is dw else w.take(ell_pos)  # training passes its own weights
            if nblk > 1:  # a grid barrier: every SM must be free for its blocks
                stop_resident_kernels()
            kern(
                grid,
                block,
                c
                + (w, b)
                + r
                + (X, np.uint64(V.data.ptr) if V is not None else zero, out)
                + o
                + (flag,)
                + ell
                + (w_ell, bar_err),
                shared_mem=shmem,
            )

    else:
        lanes = _level_lanes(d, batch)
        cfg["lanes"] = lanes
        cfg["needs_v"] = True
        nthr = 256
        n = batch * n_in
        load = get_function("sparsenet", "load_inputs")
        load_grid = (max(1, min(-(-n // nthr), 65535)),)
        k = get_function("sparsenet", "forward_level")
        levels = []
        for lv in range(sizes.size):
            n_lanes = int(sizes[lv]) * batch * int(lanes[lv])
            if n_lanes == 0:
                continue
            tail = (i32(d["level_ptr_host"][lv]), i32(sizes[lv]), i32(batch), i32(n_in), i32(n_out), slope)
            levels.append(((max(1, min(-(-n_lanes // nthr), 1 << 20)),), tail + (i32(lanes[lv]),)))
        cfg["levels"] = levels
        Bi, ni = i32(batch), i32(n_in)
        head = (d["indptr"], d["indices"])
        ra = (d["resp"], d["act"])
        oi = d["out_index"]

        def launch(X, V, out, w, b, flag=zero):
            load(load_grid, (nthr,), (X, V, Bi, ni, flag))
            pre = head + (w, b) + ra + (V, oi, out)
            for grid, tail in levels:
                k(grid, (nthr,), pre + tail)

    cfg["launch"] = launch
    d["cfg"][key] = cfg
    return cfg


def _plan_config(graph, batch, executor):
    """The device plan and launch configuration for ``batch`` rows, after the checks every
    forward pass makes first: an earlier launch's barrier time-out, and the node values
    against free memory."""
    d = graph._dev.get(current_device_id())
    if d is None:
        d = device_plan(graph)
    cfg = d["cfg"].get((batch, executor))
    if cfg is None:
        cfg = _exec_config(d, batch, executor)
    if d["bar_err_np"][0]:  # a grid barrier of an earlier launch timed out (host-mapped: no copy)
        _barrier_failed(d)
    if cfg["need"] > SMALL_WORK_BYTES:  # (smaller work passes check_memory without asking)
        check_memory(cfg["need"], "cuda", "SparseGraph forward (node values)", floor=SMALL_WORK_BYTES)
    return d, cfg
