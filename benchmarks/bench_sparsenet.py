"""SparseGraph / SparseNetRegressor: activation of arbitrary-structured sparse networks.

Ours: the level plan evaluated by ``_kernels/sparsenet.cu`` (per-level launches and the
single-launch executor with block/grid barriers) and by SciPy on the CPU. Peers on the
same graphs in the same process: neat-python's ``FeedForwardNetwork.activate`` (CPU,
one sample per call) and a CuPy composition of one cuSPARSE SpMM + elementwise
activation per level, and PyTorch: per level one dense matrix with the
sparse mask applied (zeros where no edge, over the span of slots the level reads) and
``torch.sigmoid``, run eagerly and replayed as one CUDA graph (captured once, input
copied into the static buffer per call). Graphs: the MLP-shaped one
(784 -> 256 -> 256 -> 256 -> 256 -> 10 with random masks, ~70,800 edges, 5 levels: dense
per level is what a user would write) and random layered DAGs with skip connections
(every level reads from all earlier ones, so the dense peer carries all earlier slots).
A peer missing on the machine is a row saying so; "vs strongest peer" is the ratio to the
fastest peer. Build time: our level plan vs neat-python's ``create``. Training:
SparseNetRegressor('prune', density 0.1) vs scikit-learn's MLPRegressor on friedman1.
``--cpu-train``: CPU fit time only, ours vs MLPRegressor on the same layered topology, data,
epochs and minibatches (friedman1, and digits upsampled to 784 inputs), on one BLAS thread
and on the machine's default; ours also on 30% and 10% of the hidden layers' edges, and at
10% with the C kernels switched off (the SciPy/NumPy code that runs without a C compiler).
Medians of rounds of one fit of each (a burst of load on a shared machine falls on all rows
alike). Its floor is the training's multiply-adds at the measured float64 GEMM rate of the
process. Before them, one thread: the three products of a training step for a 100 x 784
block (batch 200) at 10%, 30% and 100% of its edges: the C kernels against BLAS's dense
product and SciPy's CSR product / NumPy's per-edge dot products.

Floor: the compulsory traffic (edge weights and indices once, every node value written
once and read once) at 3.0 TB/s, plus one 7 µs launch (fused) or one per level.
Everything is float64.
"""

import csv
import os
import sys
import time
import warnings

import numpy as np
from _harness import (
    Table,
    environment_header,
    floor_seconds,
    fmt_time,
    optional_import,
    parse_args,
    time_call,
    time_cpu,
    time_gpu,
    time_torch,
    torch_cuda,
    torch_graph,
)

from sknn_gpu._backend import cuda_available
from sknn_gpu.sparse import SparseGraph, SparseNetRegressor
from sknn_gpu.sparse._graph_cuda import forward as forward_gpu
from sknn_gpu.sparse._graph_cuda import prepared_forward
from sknn_gpu.sparse._graph_plan_cuda import choose_executor

try:  # neat-python is an optional peer
    import neat
    from neat.nn import FeedForwardNetwork
except Exception:  # pragma: no cover - depends on the machine
    neat = None


def neat_network(graph):
    """A neat-python FeedForwardNetwork with exactly our plan's evaluation list.

    neat's own ``create`` is O(nodes x edges) in Python and takes minutes on a 70k-edge
    graph, so for activation timing the node_evals list it would produce is built here
    from our plan (same nodes, order within a level aside, same links and functions).
    """
    from neat.activations import ActivationFunctionSet
    from neat.aggregations import AggregationFunctionSet

    from sknn_gpu.sparse._activations import CODE_TO_NEAT

    acts, aggs = ActivationFunctionSet(), AggregationFunctionSet()
    p = graph.plan
    keys = np.arange(graph.n_nodes)
    w = graph.weights[p["edge_id"]]
    slot_to_node = np.empty(p["n_in"] + p["nodes"].size, dtype=np.int64)
    slot_to_node[: p["n_in"]] = graph.input_ids
    slot_to_node[p["n_in"] :] = p["nodes"]
    evals = []
    for r, node in enumerate(p["nodes"]):
        e0, e1 = p["indptr"][r], p["indptr"][r + 1]
        links = [(int(slot_to_node[s]), float(x)) for s, x in zip(p["indices"][e0:e1], w[e0:e1])]
        evals.append(
            (
                int(node),
                acts.get(CODE_TO_NEAT[int(graph.activations[node])]),
                aggs.get("sum"),
                float(graph.biases[node]),
                float(graph.responses[node]),
                links,
            )
        )
    return FeedForwardNetwork(
        [int(k) for k in keys[graph.input_ids]], [int(k) for k in keys[graph.output_ids]], evals
    )


def neat_config(n_in, n_out, path):
    text = (
        "[NEAT]\nfitness_criterion = max\nfitness_threshold = 1.0\npop_size = 2\n"
        "reset_on_extinction = False\n"
        "no_fitness_termination = False\n\n[DefaultGenome]\n"
        f"num_inputs = {n_in}\nnum_hidden = 0\nnum_outputs = {n_out}\n"
        "initial_connection = unconnected\nfeed_forward = True\ncompatibility_disjoint_coefficient = 1.0\n"
        "compatibility_weight_coefficient = 0.5\nconn_add_prob = 0.5\nconn_delete_prob = 0.5\n"
        "node_add_prob = 0.2\nnode_delete_prob = 0.2\nactivation_default = sigmoid\n"
        "activation_options = sigmoid\nactivation_mutate_rate = 0.0\naggregation_default = sum\n"
        "aggregation_options = sum\naggregation_mutate_rate = 0.0\n"
        + "".join(
            f"{a}_init_mean = {m}\n{a}_init_stdev = 1.0\n{a}_init_type = gaussian\n{a}_replace_rate = 0.0\n"
            f"{a}_mutate_rate = 0.0\n{a}_mutate_power = 0.0\n{a}_max_value = 30.0\n{a}_min_value = -30.0\n"
            for a, m in (("bias", 0.0), ("response", 1.0), ("weight", 0.0))
        )
        + "enabled_default = True\nenabled_mutate_rate = 0.0\nenabled_rate_to_true_add = 0.0\n"
        "enabled_rate_to_false_add = 0.0\n\n[DefaultSpeciesSet]\ncompatibility_threshold = 3.0\n\n"
        "[DefaultStagnation]\nspecies_fitness_func = max\nmax_stagnation = 20\nspecies_elitism = 2\n\n"
        "[DefaultReproduction]\nelitism = 2\nsurvival_threshold = 0.2\nmin_species_size = 2\n"
    )
    with open(path, "w") as fh:
        fh.write(text)
    return neat.Config(
        neat.DefaultGenome, neat.DefaultReproduction, neat.DefaultSpeciesSet, neat.DefaultStagnation, path
    )


class CupyLevels:
    """Peer: per level one cuSPARSE SpMM (cupyx csr @ dense) and CuPy elementwise ops."""

    def __init__(self, graph):
        import cupy as cp
        import cupyx.scipy.sparse as csp

        p = graph.plan
        self.n_in, self.n_slots = p["n_in"], p["n_in"] + p["nodes"].size
        w, b = graph.plan_params()
        self.levels = []
        lp, indptr = p["level_ptr"], p["indptr"]
        for level in range(lp.size - 1):
            r0, r1 = int(lp[level]), int(lp[level + 1])
            e0, e1 = int(indptr[r0]), int(indptr[r1])
            c1 = self.n_in + r0  # sources all lie before this level
            A = csp.csr_matrix(
                (cp.asarray(w[e0:e1]), cp.asarray(p["indices"][e0:e1]), cp.asarray(indptr[r0 : r1 + 1] - e0)),
                shape=(r1 - r0, c1),
            )
            self.levels.append(
                (r0, r1, c1, A, cp.asarray(b[r0:r1, None]), cp.asarray(p["resp"][r0:r1, None]))
            )
        self.out_slots = cp.asarray(p["out_slots"])

    def __call__(self, X):
        import cupy as cp

        V = cp.empty((self.n_slots, X.shape[0]))
        V[: self.n_in] = X.T
        for r0, r1, c1, A, b, resp in self.levels:
            z = b + resp * (A @ V[:c1])
            V[self.n_in + r0 : self.n_in + r1] = 1.0 / (1.0 + cp.exp(-cp.clip(5.0 * z, -60.0, 60.0)))
        return V[self.out_slots].T


def mlp_shaped(sizes, n_edges, random_state=0):
    """A layered sparse network (the MLP-shaped benchmark graph): random masks of equal density between
    consecutive layers with about ``n_edges`` edges in all, neat sigmoid everywhere."""
    rng = np.random.default_rng(random_state)
    n_in, n_out = sizes[0], sizes[-1]
    hidden_ids, start = [], n_in + n_out
    for h in sizes[1:-1]:
        hidden_ids.append(np.arange(start, start + h))
        start += h
    layers = [np.arange(n_in)] + hidden_ids + [np.arange(n_in, n_in + n_out)]
    density = n_edges / sum(a * b for a, b in zip(sizes[:-1], sizes[1:]))
    edges = []
    for src, dst in zip(layers[:-1], layers[1:]):
        mask = rng.random((src.size, dst.size)) < density
        i, j = np.nonzero(mask)
        edges.append(np.stack([src[i], dst[j]], axis=1))
    edges = np.concatenate(edges)
    return SparseGraph.from_edges(
        edges,
        n_in,
        n_out,
        rng.normal(scale=0.2, size=len(edges)),
        rng.normal(scale=0.2, size=start),
        activations="neat_sigmoid",
        n_nodes=start,
    )


class TorchLevels:
    """Peer: per level one dense (masked) float64 matrix over the span of slots the level
    reads, ``z = b + resp * (V @ W)``, neat sigmoid; static buffers so that the same
    ``forward`` can be captured as a CUDA graph."""

    def __init__(self, torch, graph, batch):
        p = graph.plan
        w, b = graph.plan_params()
        self.torch = torch
        self.n_in = p["n_in"]
        n_slots = self.n_in + p["nodes"].size
        lp, indptr, indices = p["level_ptr"], p["indptr"], p["indices"]
        dev = dict(dtype=torch.float64, device="cuda")
        self.levels, self.dense_elems = [], 0
        for level in range(lp.size - 1):
            r0, r1 = int(lp[level]), int(lp[level + 1])
            e0, e1 = int(indptr[r0]), int(indptr[r1])
            src = indices[e0:e1].astype(np.int64)
            rows = np.repeat(np.arange(r1 - r0), np.diff(indptr[r0 : r1 + 1]))
            c0, c1 = int(src.min()), self.n_in + r0  # sources all lie before this level
            Wt = np.zeros((c1 - c0, r1 - r0))
            np.add.at(Wt, (src - c0, rows), w[e0:e1])
            self.dense_elems += Wt.size
            self.levels.append(
                (
                    c0,
                    c1,
                    self.n_in + r0,
                    self.n_in + r1,
                    torch.from_numpy(Wt).to(**dev),
                    torch.from_numpy(np.ascontiguousarray(b[r0:r1])).to(**dev),
                    torch.from_numpy(np.ascontiguousarray(p["resp"][r0:r1], dtype=np.float64)).to(**dev),
                )
            )
        self.out_slots = torch.from_numpy(np.asarray(p["out_slots"], dtype=np.int64)).cuda()
        self.x = torch.zeros((batch, self.n_in), **dev)  # static input
        self.V = torch.zeros((batch, n_slots), **dev)

    def forward(self):
        torch, V = self.torch, self.V
        V[:, : self.n_in] = self.x
        for c0, c1, s0, s1, Wt, b, resp in self.levels:
            z = torch.addcmul(b, resp, V[:, c0:c1] @ Wt)
            V[:, s0:s1] = torch.sigmoid(torch.clamp(5.0 * z, -60.0, 60.0))
        return V[:, self.out_slots]


TORCH_ROWS = ("PyTorch dense per level, eager", "PyTorch dense per level, CUDA graph")


def torch_rows(t, g, X, ref, n_levels):
    """PyTorch peer rows: eager and CUDA-graph call (wall, synced), graph replay (events)."""
    torch = torch_cuda()
    if torch is None:
        why = "torch not installed" if optional_import("torch") is None else "torch sees no CUDA device"
        for name in TORCH_ROWS:
            t.add(name, "cuda", None, note=why, peer=True)
        return
    _torch_rows(torch, t, g, X, ref, n_levels)
    torch.cuda.empty_cache()


def _torch_rows(torch, t, g, X, ref, n_levels):
    peer = TorchLevels(torch, g, X.shape[0])
    Xt = torch.from_numpy(X).cuda()

    def eager():
        peer.x.copy_(Xt)
        return peer.forward()

    err = _rel_err(eager().cpu().numpy(), ref)
    mib = peer.dense_elems * 8 / 2**20
    sec = time_call(eager, repeat=200, warmup=10, device="torch")
    t.add(
        TORCH_ROWS[0],
        "cuda",
        sec,
        quality=f"max rel err {err:.1e}",
        note=f"wall incl. sync; {n_levels} dense levels, {mib:.0f} MiB of masked weights",
        peer=True,
    )
    box = {}

    def step():
        box["out"] = peer.forward()  # captured: box["out"] is the graph's static output

    replay = torch_graph(step)

    def graph_call():
        peer.x.copy_(Xt)
        replay()
        return box["out"]

    err = _rel_err(graph_call().cpu().numpy(), ref)
    sec = time_call(graph_call, repeat=200, warmup=10, device="torch")
    sec_k = time_torch(replay, repeat=100, warmup=10)
    t.add(
        TORCH_ROWS[1],
        "cuda",
        sec,
        quality=f"max rel err {err:.1e}",
        note=f"wall: input copy + replay + sync; replay alone (events) {fmt_time(sec_k)}",
        peer=True,
    )


def _rel_err(got, ref):
    return float(np.max(np.abs(got - ref) / (np.abs(ref) + 1e-300)))


def _predict_row(t, g, X, res):
    """Wall time of SparseNetRegressor.predict on NumPy X (validation, copies, kernels, sync)."""
    from sklearn.exceptions import ConvergenceWarning

    rng = np.random.default_rng(3)
    Xt, yt = rng.normal(size=(64, g.n_inputs)), rng.normal(size=(64, g.n_outputs))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        reg = SparseNetRegressor(topology=g, max_iter=1, device="cuda", random_state=0).fit(Xt, yt)
    # NumPy in, NumPy out: the call returns finished results (it waits for its stream
    # itself), so the wall time of the call is what a user waits; no extra sync is timed
    sec = time_call(lambda: reg.predict(X), repeat=1000, warmup=50, device="cpu")
    t.add(
        "SparseNetRegressor.predict(NumPy) call",
        "cuda",
        sec,
        note="wall of the call (returns finished NumPy): input checks, row copy + launch replayed as one "
        "CUDA graph, outputs in pinned memory",
    )
    res["predict"] = sec
    try:
        with reg.resident():
            sec = time_call(lambda: reg.predict(X), repeat=1000, warmup=50, device="cpu")
    except ValueError as exc:  # the graph does not fit one cluster
        t.add("SparseNetRegressor.predict(NumPy), resident kernel", "cuda", None, note=str(exc)[:60])
        return
    t.add(
        "SparseNetRegressor.predict(NumPy), resident kernel",
        "cuda",
        sec,
        note="wall of the call inside reg.resident(): input checks, then no launch and no CUDA API call",
    )
    res["predict_resident"] = sec


def activation_tables(args, gpu, rows_csv, latency=False):
    n_edges = 8_000 if args.quick else 74_000
    depths = [5, 40] if args.quick else [5, 180]
    batches = [1] if latency else ([1, 64] if args.quick else [1, 1024])
    sizes = (784, 64, 64, 10) if args.quick else (784, 256, 256, 256, 256, 10)
    graphs = [
        (
            "MLP-shaped " + "→".join(map(str, sizes)) + ", ",
            mlp_shaped(sizes, 12_000 if args.quick else 70_800),
        )
    ]
    graphs += [
        ("", SparseGraph.random_layered(16, 4, d, n_edges, activation="neat_sigmoid", random_state=0))
        for d in depths
    ]
    for label, g in graphs:
        n_levels = g.n_levels
        net = neat_network(g) if neat is not None else None
        for B in batches:
            rng = np.random.default_rng(1)
            X = rng.normal(size=(B, g.n_inputs))
            n_slots = g.n_inputs + g.plan["nodes"].size
            traffic = 12 * g.n_active_edges + 16 * n_slots * B
            t = Table(
                f"{label}{n_levels} levels, {g.n_active_edges:,} connections, "
                f"{g.plan['nodes'].size:,} nodes, batch {B:,}",
                baseline="ours g.forward() call (GPU)" if gpu else "ours CPU (SciPy)",
                floor=floor_seconds(bytes_moved=traffic, launches=1) if gpu else None,
                floor_note=f"({traffic / 2**20:.1f} MiB compulsory traffic at 3.0 TB/s + one 7 µs launch)",
            )
            ref = g.forward(X, device="cpu")
            t_cpu = t.add("ours CPU (SciPy)", "cpu", time_cpu(lambda: g.forward(X, device="cpu"), repeat=5))
            res = {"levels": n_levels, "edges": g.n_active_edges, "batch": B, "cpu": t_cpu}
            if gpu:
                import cupy as cp

                from sknn_gpu.sparse._graph_plan_cuda import _exec_config, device_plan

                Xd = cp.asarray(X)
                sec = time_call(lambda: g.forward(Xd), repeat=1000, warmup=50, device="cuda")
                cfg = _exec_config(device_plan(g), B, "auto")
                picked = cfg["executor"] + (f":{cfg['mode']}" if cfg["executor"] == "fused" else "")
                t.add(
                    "ours g.forward() call (GPU)",
                    "cuda",
                    sec,
                    quality=f"max rel err {_rel_err(g.forward(Xd).get(), ref):.1e}",
                    note=f"wall, validated API (in-kernel NaN check) + sync; auto = {picked}",
                )
                res["call"] = sec
                if B == 1:  # a NumPy row: the row's copy and the launch replay as one CUDA graph
                    row = lambda: g.forward(X, device="cuda")  # noqa: E731
                    sec = time_call(row, repeat=1000, warmup=50, device="cpu")  # returns finished NumPy
                    t.add(
                        "ours g.forward() call on a NumPy row (GPU)",
                        "cuda",
                        sec,
                        quality=f"max rel err {_rel_err(g.forward(X, device='cuda'), ref):.1e}",
                        note="wall of the call (returns finished NumPy): row copy + launch replayed as one "
                        "CUDA graph, outputs in pinned memory",
                    )
                    res["call_numpy"] = sec
                    label_r = "ours g.forward() call on a NumPy row, resident kernel (GPU)"
                    try:
                        with g.resident():
                            got = g.forward(X, device="cuda")
                            sec = time_call(row, repeat=1000, warmup=50, device="cpu")
                    except ValueError as exc:  # the graph does not fit one cluster
                        t.add(label_r, "cuda", None, note=str(exc)[:60])
                    else:
                        t.add(
                            label_r,
                            "cuda",
                            sec,
                            quality=f"max rel err {_rel_err(got, ref):.1e}",
                            note="wall of the call inside g.resident(): no launch, no CUDA API call (row and "
                            "outputs in pinned memory, the kernel stays on the GPU and polls for requests)",
                        )
                        res["call_numpy_resident"] = sec
                sec = time_call(lambda: forward_gpu(g, Xd), repeat=200, device="cuda")
                t.add("ours forward_gpu() call (GPU)", "cuda", sec, note="wall incl. sync, engine entry")
                res["engine_call"] = sec
                for ex in ("fused:cluster", "fused:smem", "fused:grid", "level"):
                    try:
                        got = forward_gpu(g, Xd, executor=ex).get()
                    except ValueError as exc:  # smem mode: values do not fit
                        t.add(f"ours {ex} (GPU)", "cuda", None, note=str(exc)[:60])
                        continue
                    launch, _ = prepared_forward(g, Xd, executor=ex)
                    sec_k = time_gpu(launch, repeat=100, warmup=10)
                    sec = time_gpu(lambda ex=ex: forward_gpu(g, Xd, executor=ex), repeat=100, warmup=5)
                    cfg = _exec_config(device_plan(g), B, ex)
                    shape = f"{cfg['fwd'][0]}×{cfg['fwd'][1]} threads, " if "fwd" in cfg else ""
                    t.add(
                        f"ours {ex} (GPU), launches only",
                        "cuda",
                        sec_k,
                        quality=f"max rel err {_rel_err(got, ref):.1e}",
                        note=f"{shape}{fmt_time(sec_k / n_levels)} per level, prepared buffers",
                    )
                    t.add(f"ours {ex} (GPU), forward_gpu()", "cuda", sec, note="events, incl. Python set-up")
                    res[ex] = sec_k
                    res[ex + "_call"] = sec
                if B == 1:
                    try:
                        _predict_row(t, g, X, res)
                    except Exception as exc:  # pragma: no cover - report, keep the other rows
                        print(f"predict row failed: {exc!r}")
                peer = CupyLevels(g)
                err = _rel_err(peer(Xd).get(), ref)
                sec = time_gpu(lambda: peer(Xd), repeat=20, warmup=3)
                t.add(
                    "CuPy cuSPARSE per level",
                    "cuda",
                    sec,
                    quality=f"max rel err {err:.1e}",
                    note=f"{fmt_time(sec / n_levels)} per level (events)",
                    peer=True,
                )
                res["cupy"] = sec
                cp.get_default_memory_pool().free_all_blocks()
            torch_rows(t, g, X, ref, n_levels)
            if net is not None:
                if B == 1:
                    x = list(X[0])
                    sec = time_cpu(lambda: net.activate(x), repeat=10)
                    err = _rel_err(np.array(net.activate(x)), ref[0])
                    t.add(
                        "neat-python activate",
                        "cpu",
                        sec,
                        quality=f"max rel err {err:.1e}",
                        note="one call",
                        peer=True,
                    )
                else:
                    calls = min(B, 64)  # one call per sample in Python: time 64 and scale
                    t0 = time.perf_counter()
                    for x in X[:calls]:
                        net.activate(list(x))
                    sec = (time.perf_counter() - t0) * B / calls
                    scaled = f", {calls} timed × {B / calls:.0f}" if calls < B else ""
                    t.add(
                        "neat-python activate ×batch",
                        "cpu",
                        sec,
                        note=f"{B} calls{scaled}, measured once",
                        peer=True,
                    )
                res["neat"] = sec
            else:
                t.not_installed("neat-python activate", "cpu", "neat-python")
            t.print()
            rows_csv.append(res)


def threshold_sweep(args, gpu, rows_csv):
    """Fused vs per-level launches around the auto rule's threshold (mean nodes x batch per level)."""
    if not gpu:
        return
    import cupy as cp

    from sknn_gpu.sparse._graph_plan_cuda import FUSED_MAX_MEAN_WORK

    t = Table(
        f"Executor threshold: fused vs per level (launches only); auto = fused up to a mean of "
        f"{FUSED_MAX_MEAN_WORK:,} (node, sample) pairs per level"
    )
    n_edges = 8_000 if args.quick else 74_000
    for n_levels, batches in ((5, (2, 4, 8, 16, 32)), (180, (64, 128, 256, 512, 1024))):
        g = SparseGraph.random_layered(16, 4, n_levels, n_edges, activation="neat_sigmoid", random_state=0)
        for B in batches:
            Xd = cp.asarray(np.random.default_rng(1).normal(size=(B, 16)))
            mean_work = B * g.plan["nodes"].size / n_levels
            secs = {}
            for ex in ("fused", "level"):
                launch, _ = prepared_forward(g, Xd, executor=ex)
                secs[ex] = time_gpu(launch, repeat=50, warmup=5)
            auto = choose_executor(g.level_sizes, B)
            best = min(secs, key=secs.get)
            t.add(
                f"{n_levels} levels, batch {B}",
                "cuda",
                secs[auto],
                quality=f"fused {fmt_time(secs['fused'])} · level {fmt_time(secs['level'])}",
                note=f"mean work {mean_work:,.0f}; auto {auto}"
                + ("" if auto == best else f" (faster: {best})"),
            )
            rows_csv.append(
                {"levels": n_levels, "batch": B, "thr_fused": secs["fused"], "thr_level": secs["level"]}
            )
    t.print()


def speedup_sweep(args, gpu, rows_csv):
    """The paper's Fig. 7: speedup over neat-python's activate vs number of connections (batch 1)."""
    if not (gpu and neat is not None):
        return
    import cupy as cp

    t = Table(
        "Speedup vs connections (batch 1): neat-python activate / ours (GPU, auto executor, launches only)"
    )
    sizes = [2_000, 8_000] if args.quick else [1_000, 4_000, 16_000, 74_000]
    for n_levels in (5, 50):
        for n_edges in sizes:
            g = SparseGraph.random_layered(
                16, 4, n_levels, n_edges, activation="neat_sigmoid", random_state=0
            )
            net = neat_network(g)
            x = np.random.default_rng(2).normal(size=(1, 16))
            xd = cp.asarray(x)
            launch, _ = prepared_forward(g, xd)
            ours = time_gpu(launch, repeat=50, warmup=5)
            theirs = time_cpu(lambda: net.activate(list(x[0])), repeat=7)
            t.add(
                f"{n_levels} levels, {g.n_active_edges:,} connections",
                "cuda",
                ours,
                quality=f"neat {fmt_time(theirs)}",
                note=f"speedup {theirs / ours:.0f}×",
            )
            rows_csv.append(
                {
                    "levels": n_levels,
                    "edges": g.n_active_edges,
                    "batch": 1,
                    "sweep_ours": ours,
                    "sweep_neat": theirs,
                }
            )
    t.print()


def build_table(args):
    t = Table(
        "Build time: our level plan vs neat-python FeedForwardNetwork.create", baseline="ours from_edges+plan"
    )
    sizes = [1_000, 4_000] if args.quick else [1_000, 4_000, 16_000, 74_000]
    path = os.path.join(os.environ.get("OUT", "/tmp"), "bench_sparsenet_neat.cfg")
    for n_edges in sizes:
        g = SparseGraph.random_layered(16, 4, 20, n_edges, activation="neat_sigmoid", random_state=0)
        edges, w, b = g.to_edges()

        def ours():
            h = SparseGraph.from_edges(
                edges, 16, 4, w, b, activations="neat_sigmoid", output_ids=g.output_ids, n_nodes=g.n_nodes
            )
            return h.plan

        t.add(
            "ours from_edges+plan" if n_edges == sizes[0] else f"ours, {g.n_edges:,} edges",
            "cpu",
            time_cpu(ours, repeat=3),
            note=f"{g.n_edges:,} edges, {g.n_nodes:,} nodes",
        )
        if neat is not None and n_edges <= 16_000:
            config = neat_config(16, 4, path)
            genome = g.to_neat(config)
            t0 = time.perf_counter()
            FeedForwardNetwork.create(genome, config)
            t.add(f"neat create, {g.n_edges:,} edges", "cpu", time.perf_counter() - t0, note="measured once")
    t.print()


def training_table(args):
    from sklearn.datasets import make_friedman1
    from sklearn.metrics import r2_score
    from sklearn.neural_network import MLPRegressor

    n = 1000 if args.quick else 2000
    X, y = make_friedman1(n_samples=n, random_state=0)
    Xt, yt = make_friedman1(n_samples=2000, random_state=1)
    hidden = (64, 64) if args.quick else (128, 128)
    t = Table(
        f"Training on friedman1 ({n} samples, hidden {hidden}), R² on 2,000 fresh samples",
        baseline="MLPRegressor",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        mlp = MLPRegressor(hidden_layer_sizes=hidden, max_iter=200, learning_rate_init=3e-3, random_state=0)
        mlp.fit(X, y)
        t.add(
            "MLPRegressor",
            "cpu",
            time.perf_counter() - t0,
            quality=f"R² {r2_score(yt, mlp.predict(Xt)):.4f}",
            note=f"dense, {mlp.n_iter_} epochs",
        )
        devices = ["cpu"] + (["cuda"] if cuda_available() and args.device != "cpu" else [])
        for dev in devices:
            reg = SparseNetRegressor(
                hidden_layer_sizes=hidden,
                density=0.1,
                max_iter=100,
                learning_rate_init=3e-3,
                n_prune_steps=3,
                fine_tune_iter=30,
                random_state=0,
                device=dev,
            )
            t0 = time.perf_counter()
            reg.fit(X, y)
            sec = time.perf_counter() - t0
            t.add(
                f"SparseNetRegressor prune d=0.1 ({dev})",
                dev,
                sec,
                quality=f"R² {r2_score(yt, reg.predict(Xt)):.4f}",
                note=f"{reg.n_edges_:,} of {reg.n_dense_edges_:,} edges, {reg.n_levels_} levels, "
                f"{reg.n_iter_} + {reg.n_fine_tune_iter_} epochs (dense + fine-tuning)",
            )
    t.print()


# ------------------------------------------------------------------ CPU training mode
#: Threads of the CPU training tables: one core, then the BLAS default of this machine.
CPU_TRAIN_THREADS = (1, None)


def _layered_graph(sizes, density, rng):
    """The layered network ``sizes`` (ReLU hidden, linear outputs) as a SparseGraph with the
    initial weights of SparseNetRegressor's dense phase; ``density`` < 1 keeps that random
    fraction of the weights into every hidden layer (the output layer stays whole, so that
    every hidden node keeps its path to the outputs and every edge is trained)."""
    from sknn_gpu.sparse._activations import ACTIVATIONS
    from sknn_gpu.sparse._sparsenet_train import DenseMasked

    model = DenseMasked(sizes, ACTIVATIONS["relu"], 4.97, rng, np)
    if density < 1.0:
        for k, m in enumerate(model.masks[:-1]):
            keep = rng.random(m.shape) < density
            model.masks[k] = keep.astype(np.float64)
            model.params[2 * k] = model.params[2 * k] * model.masks[k]
    return model.to_graph(4.97)


def _dgemm_rate():
    """Measured float64 GEMM rate (FLOP/s) of this process's BLAS at its current thread limit."""
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(1024, 1024)), rng.normal(size=(1024, 1024))
    return 2 * 1024**3 / time_cpu(lambda: a @ b, repeat=5)


def _train_flops(g, n_rows, epochs):
    """Multiply-adds x 2 of training: the forward product and the weight gradient over every
    edge, the back-propagated gradient over the edges that leave a hidden node."""
    p = g.plan
    hidden_src = int(np.count_nonzero(p["indices"] >= p["n_in"]))
    return 2.0 * epochs * n_rows * (2 * g.n_active_edges + hidden_src)


def cpu_product_tables(args):
    """One thread: a training step's three products for one 100 x 784 block at batch 200, by
    the C kernels (`_kernels/sparsenet.c`), BLAS on the dense matrix (zeros where no edge)
    and SciPy's CSR product / NumPy's per-edge dot products (the fallback)."""
    import scipy.sparse as sp
    from threadpoolctl import threadpool_limits

    from sknn_gpu._kernels._cpu import cpu_kernels_status, cpu_library

    lib = cpu_library("sparsenet")
    print(f"C kernels: {cpu_kernels_status()}\n")
    rows, cols, B = 100, 784, 200
    repeat = 20 if args.quick else 100
    rng = np.random.default_rng(0)
    X, D = rng.normal(size=(cols, B)), rng.normal(size=(rows, B))
    x_addr, d_addr = X.ctypes.data, D.ctypes.data
    for density in (0.1, 0.3, 1.0):
        M = sp.random(rows, cols, density=density, format="csr", random_state=0)
        M.indptr, M.indices = M.indptr.astype(np.int32), M.indices.astype(np.int32)
        W, nnz = M.toarray(), M.nnz
        rr = np.repeat(np.arange(rows), np.diff(M.indptr))
        out, g = np.empty((rows, B)), np.empty(nnz)
        ptr, ind, w = M.indptr.ctypes.data, M.indices.ctypes.data, M.data.ctypes.data
        t = Table(
            f"CPU sparse products, {rows} x {cols} block, {density:.0%} of its edges ({nnz:,}), "
            f"batch {B}, 1 thread",
            baseline="BLAS dense W @ V",
        )
        fmas = nnz * B

        def rate(sec):
            return f"{fmas / sec / 1e9:.1f} G multiply-adds/s at the edges"

        with threadpool_limits(limits=1):
            cases = [
                ("BLAS dense W @ V", "forward", lambda: W @ X, True),
                ("SciPy CSR W @ V", "forward", lambda: M @ X, False),
                ("BLAS dense D @ V.T (gradient, every entry)", "weight gradient", lambda: D @ X.T, True),
                (
                    "NumPy per-edge dot products (gradient)",
                    "weight gradient",
                    lambda: np.einsum("ij,ij->i", D[rr], X[M.indices]),
                    False,
                ),
            ]
            if lib is not None:
                cases.insert(
                    2,
                    (
                        "ours: C spmm",
                        "forward",
                        lambda: lib.spmm(rows, ptr, ind, w, x_addr, B, out.ctypes.data, B, B, 0),
                        False,
                    ),
                )
                cases.append(
                    (
                        "ours: C sddmm (gradient at the edges)",
                        "weight gradient",
                        lambda: lib.sddmm(rows, ptr, ind, d_addr, B, x_addr, B, B, g.ctypes.data),
                        False,
                    )
                )
            for name, what, fn, peer in cases:
                sec = time_cpu(fn, repeat=repeat, warmup=3)
                t.add(name, "cpu", sec, note=f"{what}; {rate(sec)}; median of {repeat}", peer=peer)
        t.print()


def _cpu_train_workloads(quick):
    from scipy.ndimage import zoom
    from sklearn.datasets import load_digits, make_friedman1

    X, y = make_friedman1(n_samples=1000, random_state=0)
    Xt, yt = make_friedman1(n_samples=1000, random_state=1)
    yield "friedman1, 1,000 rows × 10 features", X, y, Xt, yt, (100, 100), (5 if quick else 50)
    d = load_digits()
    imgs = zoom(d.images, (1, 3.5, 3.5), order=1)  # 8 x 8 -> 28 x 28: 784 inputs
    Xd = imgs.reshape(len(imgs), -1) / 16.0
    Yd = np.eye(10)[d.target]  # one-hot targets: 10 outputs
    n = 1200
    yield (
        "digits upsampled to 28×28, 1,200 rows × 784 features, 10 outputs",
        Xd[:n],
        Yd[:n],
        Xd[n:],
        Yd[n:],
        (100, 100),
        (3 if quick else 20),
    )


def cpu_training_tables(args):
    """Fit time on the CPU: SparseNetRegressor on the layered topology that MLPRegressor trains
    (as a SparseGraph, and as the dense phase of 'prune'), and on random fractions of its
    edges, against scikit-learn's MLPRegressor: same data, epochs, minibatches, Adam step."""
    from sklearn.metrics import r2_score
    from sklearn.neural_network import MLPRegressor
    from threadpoolctl import threadpool_info, threadpool_limits

    from sknn_gpu._kernels._cpu import DISABLE_ENV

    repeat = 3 if args.quick else 5
    lr, alpha, bs = 1e-3, 1e-4, 200
    for label, X, y, Xt, yt, hidden, epochs in _cpu_train_workloads(args.quick):
        sizes = [X.shape[1], *hidden, 1 if y.ndim == 1 else y.shape[1]]
        for threads in CPU_TRAIN_THREADS:
            with threadpool_limits(limits=threads):
                rate = _dgemm_rate()
                n_threads = max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")
                dense = _layered_graph(sizes, 1.0, np.random.default_rng(0))
                flops = _train_flops(dense, X.shape[0], epochs)
                t = Table(
                    f"CPU training, {label}, {'→'.join(map(str, sizes))}, {epochs} epochs, "
                    f"{n_threads} BLAS thread{'s' if n_threads > 1 else ''}",
                    baseline="MLPRegressor",
                    floor=flops / rate,
                    floor_note=f"({flops / 1e9:.2f} GFLOP of dense training at this process's measured "
                    f"float64 GEMM rate, {rate / 1e9:.0f} GFLOP/s; the data and weights stay in cache)",
                )
                common = dict(learning_rate_init=lr, alpha=alpha, batch_size=bs, max_iter=epochs, tol=0.0)
                common["n_iter_no_change"] = epochs + 1

                def fit_mlp():
                    return MLPRegressor(hidden_layer_sizes=hidden, random_state=0, **common).fit(X, y)

                rows = [("MLPRegressor", fit_mlp, None)]
                ours = [("ours, dense topology as a SparseGraph", dense, {})]
                ours.append(
                    (
                        "ours, 'prune' dense phase (masked dense matrices)",
                        "prune",
                        dict(hidden_layer_sizes=hidden, density=1.0, n_prune_steps=1, fine_tune_iter=0),
                    )
                )
                for density in (0.3, 0.1):
                    g = _layered_graph(sizes, density, np.random.default_rng(0))
                    ours.append(
                        (f"ours, {density:.0%} of the hidden layers' edges (random) as a SparseGraph", g, {})
                    )
                ours.append(
                    (
                        "ours, 10% as above, C kernels off (SciPy/NumPy: no C compiler)",
                        g,
                        {DISABLE_ENV: "1"},
                    )
                )
                for name, topo, kw in ours:

                    def fit_ours(topo=topo, kw=kw):
                        kw = dict(kw)
                        off = kw.pop(DISABLE_ENV, None)
                        if off:
                            os.environ[DISABLE_ENV] = off
                        try:
                            reg = SparseNetRegressor(topo, random_state=0, device="cpu", **common, **kw)
                            return reg.fit(X, y)
                        finally:
                            os.environ.pop(DISABLE_ENV, None)

                    rows.append((name, fit_ours, topo))
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    # rounds of one fit of each, the first untimed: a burst of load from other
                    # processes on a shared machine falls on every row alike, not on one
                    models = [fit() for _, fit, _ in rows]
                    times = [[] for _ in rows]
                    for _ in range(repeat):
                        for k, (_, fit, _) in enumerate(rows):
                            t0 = time.perf_counter()
                            fit()
                            times[k].append(time.perf_counter() - t0)
                for (name, _, topo), model, samples in zip(rows, models, times):
                    sec = float(np.median(samples))
                    quality = f"R² {r2_score(yt, model.predict(Xt)):.3f}"
                    if topo is None:
                        note = f"dense, {model.n_iter_} epochs, median of {repeat}"
                        t.add(name, "cpu", sec, quality=quality, note=note, peer=True)
                        continue
                    own = _train_flops(model.graph_, X.shape[0], epochs) / rate
                    note = (
                        f"{model.graph_.n_active_edges:,} edges, {model.n_iter_} epochs, median of {repeat}; "
                        f"its own multiply-adds at the GEMM rate: {fmt_time(own)}"
                    )
                    t.add(name, "cpu", sec, quality=quality, note=note)
                t.print()


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    command = " ".join(["python benchmarks/bench_sparsenet.py", *argv])
    latency = "--latency" in argv  # batch-1 tables and the executor threshold sweep only
    if latency:
        argv.remove("--latency")
    cpu_train = "--cpu-train" in argv  # the CPU training tables only (ours vs MLPRegressor)
    if cpu_train:
        argv.remove("--cpu-train")
    args = parse_args(__doc__.splitlines()[0], argv)
    if cpu_train:
        print(f"{time.strftime('%Y-%m-%d')} · {os.cpu_count()}-core CPU, no GPU used · {command}\n")
        print(environment_header() + "\n")
        cpu_product_tables(args)
        cpu_training_tables(args)
        return
    print(environment_header() + "\n")
    gpu = cuda_available() and args.device != "cpu"
    print(f"neat-python: {'available' if neat is not None else 'not installed (its rows are skipped)'}\n")
    rows = []
    activation_tables(args, gpu, rows, latency=latency)
    threshold_sweep(args, gpu, rows)
    if not latency:
        speedup_sweep(args, gpu, rows)
        build_table(args)
        training_table(args)
    out = os.environ.get("OUT")
    if out:
        keys = sorted({k for r in rows for k in r})
        with open(os.path.join(out, "bench_sparsenet.csv"), "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()


def plot_fig7(csv_path, png_path):
    """The paper's Fig. 7 from a CSV written by this script (``$OUT/bench_sparsenet.csv``).

    ``python -c "import bench_sparsenet as b; b.plot_fig7('bench_sparsenet.csv', 'fig7.png')"``
    (needs matplotlib, which the GPU machine lacks: plot where the CSV lands).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(csv_path) as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("sweep_ours")]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for n_levels in sorted({int(r["levels"]) for r in rows}):
        sel = sorted(
            (int(r["edges"]), float(r["sweep_neat"]) / float(r["sweep_ours"]))
            for r in rows
            if int(r["levels"]) == n_levels
        )
        ax.loglog([e for e, _ in sel], [s for _, s in sel], "o-", label=f"{n_levels} levels")
    ax.set_xlabel("connections")
    ax.set_ylabel("speedup over neat-python activate")
    ax.set_title("Batch 1, H100 (ours: fused kernel, launches only)", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
