"""GBNNMemory: the paper's Scenario 2 (C=16, L=512, 50,000 stored, 30,000 probes, 7 erased).

Ours: ``GBNNMemory`` on the GPU (``_kernels/gbnn.cu``: one block per probe, per-probe
convergence, bit-packed W) and on the CPU (vectorised NumPy reference), for each rule.
Peer on the same data: a plain CuPy dense-matrix composition of the same rules
(float32 W of n x n, all probes as one dense n x K state, cuBLAS matmuls, whole-batch
iterations), and the same dense decoder in PyTorch, what a user with a GPU
would write: W as a dense fp16 matrix (exact: 0/1 entries, integer sums <= L = 512 per
cluster block, fp32 accumulation in cuBLAS) and as fp32 (TF32 off), all probes as one
batch, iterated until the state stops changing (``torch.equal`` each iteration); W built
beforehand. A peer missing on the machine is a row saying so; "vs strongest peer"
compares each row with the fastest peer of the same rule. The paper's best time, 14.86 s
for the joint scheme on a Tesla C1060, is quoted beside (not measured here). Also the
same network near capacity (150,000 stored).

Dask: ``predict`` of 6,000,000 Scenario-2 probes in memory on one GPU, with
Dask on one GPU and on every GPU of the host (``dask_cuda.LocalCUDACluster``), and a
distributed ``fit`` (a packed W per block, OR-reduced) beside an in-memory one; both
checked identical. Without a GPU: 120,000 probes on 2 CPU worker processes.

Floor (joint rule): W is n·C·ceil(L/32)·4 bytes (8 MiB) read once, probes in and
results out; every probe's first step also gathers (C−e)·e·ceil(L/32) words of W
(from L2 in practice). Both bounds are printed.
"""

import time

import numpy as np
from _harness import (
    Table,
    environment_header,
    floor_seconds,
    fmt_time,
    local_cluster,
    optional_import,
    parse_args,
    persist_round_robin,
    time_call,
    time_cpu,
    time_gpu,
    time_torch,
    torch_cuda,
)

from sknn_gpu._backend import cuda_available
from sknn_gpu.memory import GBNNMemory, erasure_error_rate, theoretical_density

RULES = ("joint", "sum-of-max", "sum-of-sum")
PAPER_JOINT_S = 14.86


def make_data(C, L, M, K, e, seed=0):
    rng = np.random.default_rng(seed)
    msgs = rng.integers(0, L, size=(M, C), dtype=np.int64)
    idx = rng.choice(M, K, replace=False)
    truth = msgs[idx]
    probes = truth.copy()
    order = np.argsort(rng.random(probes.shape), axis=1)[:, :e]
    np.put_along_axis(probes, order, -1, axis=1)
    return msgs, probes, truth


# ------------------------------------------------------------------ dense CuPy peer
def dense_weights(cp, msgs, C, L):
    """Dense float32 n x n adjacency (0/1) of the stored cliques."""
    n = C * L
    W = cp.zeros((n, n), dtype=cp.float32)
    m = cp.asarray(msgs) + cp.arange(C) * L
    for c in range(C):
        for c2 in range(C):
            if c != c2:
                W[m[:, c], m[:, c2]] = 1.0
    return W


def dense_peer(cp, W, probes, C, L, rule, gamma=1.0, max_iter=20):
    """Same rules as dense matrix algebra: returns (state n x K bool, iterations)."""
    n = C * L
    K = probes.shape[0]
    P = cp.asarray(probes)
    known = (P >= 0).T  # C x K
    V = cp.zeros((n, K), dtype=cp.float32)
    cl, pr = cp.nonzero(known)
    V[cl * L + P.T[cl, pr], pr] = 1.0
    erased_rows = cp.repeat(~known, L, axis=0)  # n x K
    it = 0
    if rule == "sum-of-sum":
        for it in range(1, max_iter + 1):  # noqa: B007 (returned)
            S = W @ V + gamma * V
            S3 = S.reshape(C, L, K)
            Vn = (S3 == S3.max(axis=1, keepdims=True)).reshape(n, K).astype(cp.float32)
            if bool((Vn == V).all()):
                break
            V = Vn
        return V > 0, it
    if rule == "joint":
        S = W @ V
        n_known = known.sum(axis=0).astype(cp.float32)  # C - e per probe
        cand = (S == n_known[None, :]) & erased_rows
        V = cp.where(erased_rows, cand, V > 0).astype(cp.float32)
    else:
        V = cp.where(erased_rows, cp.float32(1.0), V).astype(cp.float32)
    for it in range(1, max_iter + 1):  # noqa: B007 (returned)
        ok = V > 0
        for c2 in range(C):
            sig = (W[:, c2 * L : (c2 + 1) * L] @ V[c2 * L : (c2 + 1) * L]) > 0
            sig[c2 * L : (c2 + 1) * L] = True  # own cluster: the self loop
            ok &= sig
        Vn = ok.astype(cp.float32)
        if bool((Vn == V).all()):
            break
        V = Vn
    return V > 0, it


def peer_rate(cp, state, truth, C, L):
    """Retrieval rate with the first surviving neuron per cluster (-1 when none)."""
    S = state.reshape(C, L, -1)
    pick = cp.where(S.any(axis=1), S.argmax(axis=1), -1).T
    pick = pick.get() if hasattr(pick, "get") else np.asarray(pick)
    return float((pick == truth).all(axis=1).mean())


# ------------------------------------------------------------------ dense PyTorch peer
def torch_weights(torch, msgs, C, L, dtype):
    """Dense n x n adjacency (0/1) of the stored cliques as a torch tensor on the GPU."""
    n = C * L
    W = torch.zeros((n, n), dtype=dtype, device="cuda")
    m = torch.from_numpy(np.asarray(msgs, dtype=np.int64)).cuda() + torch.arange(C, device="cuda") * L
    for c in range(C):
        for c2 in range(C):
            if c != c2:
                W[m[:, c], m[:, c2]] = 1
    return W


def torch_dense_peer(torch, W, P, C, L, rule, gamma=1.0, max_iter=20):
    """The rules of :func:`dense_peer` in PyTorch, all probes (``P``: K x C int64 on the GPU,
    -1 = erased) as one n x K state; returns (state n x K bool, iterations)."""
    n = C * L
    K = P.shape[0]
    dt = W.dtype
    known = (P >= 0).T  # C x K
    V = torch.zeros((n, K), dtype=dt, device=W.device)
    cl, pr = torch.nonzero(known, as_tuple=True)
    V[cl * L + P.T[cl, pr], pr] = 1
    erased_rows = (~known).repeat_interleave(L, dim=0)  # n x K
    it = 0
    if rule == "sum-of-sum":
        for it in range(1, max_iter + 1):  # noqa: B007 (returned)
            S = W @ V + gamma * V
            S3 = S.view(C, L, K)
            Vn = (S3 == S3.amax(dim=1, keepdim=True)).view(n, K).to(dt)
            if torch.equal(Vn, V):
                break
            V = Vn
        return V > 0, it
    if rule == "joint":
        S = W @ V
        n_known = known.sum(dim=0).to(dt)  # C - e per probe
        cand = (S == n_known[None, :]) & erased_rows
        V = torch.where(erased_rows, cand, V > 0).to(dt)
    else:
        V = torch.where(erased_rows, torch.ones_like(V), V)
    for it in range(1, max_iter + 1):  # noqa: B007 (returned)
        ok = V > 0
        for c2 in range(C):
            sig = (W[:, c2 * L : (c2 + 1) * L] @ V[c2 * L : (c2 + 1) * L]) > 0
            sig[c2 * L : (c2 + 1) * L] = True  # own cluster: the self loop
            ok &= sig
        Vn = ok.to(dt)
        if torch.equal(Vn, V):
            break
        V = Vn
    return V > 0, it


def torch_rate(torch, state, truth, C, L):
    """Retrieval rate with the first surviving neuron per cluster (-1 when none)."""
    S = state.view(C, L, -1)
    pick = torch.where(S.any(dim=1), S.to(torch.uint8).argmax(dim=1), -1).T.cpu().numpy()
    return float((pick == truth).all(axis=1).mean())


def torch_peers(t, msgs, probes, truth, C, L, rules):
    """PyTorch dense-decoder peer rows (fp16 and fp32 W) for ``rules``."""
    torch = torch_cuda()
    if torch is None:
        why = "torch not installed" if optional_import("torch") is None else "torch sees no CUDA device"
        for rule in rules:
            t.add(f"PyTorch dense {rule}", "cuda", None, note=why, peer=True, exact=rule)
        return
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        P = torch.from_numpy(np.asarray(probes, dtype=np.int64)).cuda()
        for name, dtype in (("fp16", torch.float16), ("fp32", torch.float32)):
            _torch_rows(torch, t, torch_weights(torch, msgs, C, L, dtype), name, P, truth, C, L, rules)
            torch.cuda.empty_cache()  # W is gone: give its blocks back
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def _torch_rows(torch, t, W, name, P, truth, C, L, rules):
    n = C * L
    for rule in rules:
        try:
            state, its = torch_dense_peer(torch, W, P, C, L, rule)
            rate = torch_rate(torch, state, truth, C, L)
            del state
            secs = time_torch(lambda rule=rule: torch_dense_peer(torch, W, P, C, L, rule), repeat=3, warmup=1)
            t.add(
                f"PyTorch dense {rule} ({name} W)",
                "cuda",
                secs,
                quality=f"rate {rate:.4f}",
                note=f"{name} W {n}x{n}, {its} whole-batch iters (W built beforehand)",
                peer=True,
                exact=rule,
            )
        except Exception as exc:  # out of memory on small GPUs
            t.add(
                f"PyTorch dense {rule} ({name} W)",
                "cuda",
                None,
                note=f"failed: {type(exc).__name__}: {str(exc)[:60]}",
                peer=True,
                exact=rule,
            )


# ------------------------------------------------------------------ experiment
def scenario(C, L, M, K, e, gpu, cpu_rules, peer_rules, quick):
    msgs, probes, truth = make_data(C, L, M, K, e)
    Lw = (L + 31) // 32
    n = C * L
    w_bytes = n * C * Lw * 4
    gather = K * (C - e) * e * Lw * 4
    io = probes.size * 4 + K * C * 8 + K * 5
    floor = floor_seconds(bytes_moved=w_bytes + io, launches=1)
    floor_l2 = floor_seconds(bytes_moved=w_bytes + io + gather, launches=1)
    d_theo = theoretical_density(M, L)
    title = f"C={C}, L={L}, {M:,} stored, {K:,} probes, {e} erased (retrieval)"
    t = Table(
        title,
        baseline="ours joint" if gpu else "ours joint (CPU)",
        floor=floor,
        floor_note=(
            f"(joint: W {w_bytes / 2**20:.1f} MiB + probes/results {io / 2**20:.1f} MiB once at 3.0 TB/s "
            f"+ one launch; if the {gather / 2**20:.0f} MiB of first-step gathers came at copy bandwidth: "
            f"{fmt_time(floor_l2)})"
        ),
    )
    store = Table(f"C={C}, L={L}, {M:,} stored (storing)", baseline="ours store (GPU)" if gpu else None)
    rates = {}
    mem_cpu = GBNNMemory(device="cpu", random_state=0)
    t0 = time.perf_counter()
    mem_cpu.fit(msgs)
    store.add("ours store (CPU)", "cpu", time.perf_counter() - t0, note="NumPy bitwise_or.at, 1 run")
    print(
        f"density measured {mem_cpu.density_:.5f}, theory {d_theo:.5f}; one-step P_e (theory, measured d) = "
        f"{erasure_error_rate(mem_cpu.density_, C, e, L):.4f}\n"
    )
    if gpu:
        import cupy as cp

        mem = GBNNMemory(device="cuda", random_state=0)
        mem.fit(msgs)
        assert np.array_equal(mem.W_.get(), mem_cpu.W_), "GPU and CPU W differ"
        store.add(
            "ours store (GPU)",
            "cuda",
            time_call(lambda: mem.fit(msgs), repeat=5, warmup=1, device="cuda"),
            note="fit() wall time incl. upload of the messages",
        )
        pd = cp.asarray(probes)
        for rule in RULES:
            mem.set_params(rule=rule)
            res = mem.retrieve(probes)
            rate = float((res.messages == truth).all(axis=1).mean())
            amb = float(res.ambiguous.mean())
            rates[rule] = rate
            kt = time_gpu(lambda: mem.retrieve(pd), repeat=10, warmup=2)
            t.add(
                f"ours {rule}",
                "cuda",
                kt,
                quality=f"rate {rate:.4f}",
                note=f"retrieve(CuPy in), events, ambiguous {amb:.4f}, mean iters {res.n_iter.mean():.2f}",
                exact=rule,
            )
            t.add(
                f"ours {rule} call",
                "cuda",
                time_call(lambda: mem.retrieve(probes), repeat=5, warmup=1, device="cuda"),
                quality=f"rate {rate:.4f}",
                note="retrieve(NumPy probes) wall incl. transfers",
                exact=rule,
            )
        Wd = dense_weights(cp, msgs, C, L) if peer_rules else None
        for rule in peer_rules:
            try:
                state, its = dense_peer(cp, Wd, probes, C, L, rule)
                rate = peer_rate(cp, state, truth, C, L)
                secs = time_gpu(lambda: dense_peer(cp, Wd, probes, C, L, rule), repeat=3, warmup=1)
                t.add(
                    f"CuPy dense {rule}",
                    "cuda",
                    secs,
                    quality=f"rate {rate:.4f}",
                    note=f"float32 W {n}x{n} + cuBLAS, {its} whole-batch iters (W built beforehand)",
                    peer=True,
                    exact=rule,
                )
            except Exception as exc:  # out of memory on small GPUs
                t.add(
                    f"CuPy dense {rule}",
                    "cuda",
                    None,
                    note=f"failed: {type(exc).__name__}",
                    peer=True,
                    exact=rule,
                )
            finally:
                cp.get_default_memory_pool().free_all_blocks()
        Wd = None
        cp.get_default_memory_pool().free_all_blocks()
    torch_peers(t, msgs, probes, truth, C, L, peer_rules if gpu else cpu_rules)
    for rule in cpu_rules:
        mem_cpu.set_params(rule=rule)
        box = {}
        reps = 3 if (rule == "joint" or quick) else 1
        secs = time_cpu(lambda: box.setdefault("res", mem_cpu.retrieve(probes)), repeat=reps, warmup=0)
        rate = float((box["res"].messages == truth).all(axis=1).mean())
        if rule in rates:
            assert rate == rates[rule], f"CPU and GPU retrieval rates differ for {rule}"
        t.add(
            f"ours {rule} (CPU)",
            "cpu",
            secs,
            quality=f"rate {rate:.4f}",
            note=f"NumPy, median of {reps}",
            exact=rule,
        )
    if C == 16 and L == 512 and M == 50_000 and K == 30_000:
        t.add(
            "paper joint (Tesla C1060)", "—", PAPER_JOINT_S, note="quoted from the paper, not measured here"
        )
    store.print()
    t.print()


# ----------------------------------------------------------------------------- Dask scale-out
def dask_scaling(C, L, M, K, e, chunk, gpu, threads=1):
    """``predict`` of K probes: in memory on one device, then Dask on one worker and on
    every GPU of the host (2 CPU worker processes without a GPU); a distributed ``fit``
    beside one in-memory fit. Results are checked equal to the in-memory ones."""
    try:
        import dask.array as da
        from distributed import Client, wait
    except ImportError:
        print("Dask scale-out: dask[distributed] not installed\n")
        return
    if gpu:
        try:
            import dask_cuda  # noqa: F401
        except ImportError:
            print("Dask scale-out: dask-cuda not installed\n")
            return
        import cupy as cp

        from sknn_gpu._backend import device_limits

        counts = sorted({1, device_limits().n_devices})
    else:
        counts = [1, 2]
    device = "cuda" if gpu else "cpu"
    rng = np.random.default_rng(1)
    msgs = rng.integers(0, L, size=(M, C), dtype=np.int32)
    truth = msgs[rng.integers(0, M, size=K)]
    probes = truth.copy()
    np.put_along_axis(probes, np.argsort(rng.random(probes.shape), axis=1)[:, :e], -1, axis=1)
    mem = GBNNMemory(device=device, random_state=0, cluster_size=L).fit(msgs)
    on_device = cp.asarray(probes) if gpu else probes
    expected = mem.predict(on_device)
    t = Table(
        f"Dask: predict of {K:,} probes (C={C}, L={L}, {M:,} stored, {e} erased), {chunk:,}-row chunks",
        baseline=f"in memory, 1 {'GPU' if gpu else 'CPU process'}",
    )
    t.add(
        t.baseline,
        device,
        time_call(lambda: mem.predict(on_device), repeat=5, warmup=1, device=device),
        note="probes already on the device",
    )
    fits = Table(f"Dask: fit of {M:,} messages (C={C}, L={L})", baseline="fit in memory")
    fits.add("fit in memory", device, time_call(lambda: mem.fit(msgs), repeat=5, warmup=1, device=device))
    for n in counts:
        unit = "GPU" if gpu else "CPU worker"
        with local_cluster(gpu, n, threads) as cluster, Client(cluster) as client:
            dP = da.from_array(probes, chunks=(chunk, -1))
            dM = da.from_array(msgs, chunks=(max(1, M // (4 * n)), -1))
            if gpu:
                dP, dM = dP.map_blocks(cp.asarray), dM.map_blocks(cp.asarray)
            dP, dM = persist_round_robin(client, dP, dM)

            def run():
                out = mem.predict(dP).persist()  # results stay on the workers, as in memory
                wait(out)
                return out

            secs = time_cpu(run, repeat=5, warmup=1)
            got = run().compute()
            same = np.array_equal(cp.asnumpy(got) if gpu else got, cp.asnumpy(expected) if gpu else expected)
            t.add(f"Dask, {n} {unit}{'s' if n > 1 else ''}", device, secs, quality=f"identical: {same}")
            dist = GBNNMemory(device=device, random_state=0, cluster_size=L)
            secs = time_cpu(lambda: dist.fit(dM), repeat=5, warmup=1)  # noqa: B023 (called at once)
            W_same = np.array_equal(
                cp.asnumpy(dist.W_) if gpu else dist.W_, cp.asnumpy(mem.W_) if gpu else mem.W_
            )
            fits.add(
                f"fit Dask, {n} {unit}{'s' if n > 1 else ''}",
                device,
                secs,
                quality=f"W identical: {W_same}",
                note="a packed W per block, OR-reduced in a tree; W to the client",
            )
    t.print()
    fits.print()


def main(argv=None):
    import sys

    argv = sys.argv[1:] if argv is None else list(argv)
    skip_dask = "--no-dask" in argv  # the Dask part also runs in bench_dask.py
    args = parse_args(__doc__.splitlines()[0], [a for a in argv if a != "--no-dask"])
    print(environment_header() + "\n")
    gpu = cuda_available() and args.device != "cpu"
    if args.quick:
        scenario(16, 512, 5_000, 2_000, 7, gpu, RULES, RULES if gpu else (), True)
        if not skip_dask:
            dask_scaling(16, 512, 5_000, 20_000, 7, 5_000, gpu)
        return
    scenario(16, 512, 50_000, 30_000, 7, gpu, RULES, RULES if gpu else (), False)
    scenario(16, 512, 150_000, 30_000, 7, gpu, ("joint",), ("joint",) if gpu else (), False)
    # the scale-out target: 6,000,000 Scenario-2 probes (a CPU run uses 120,000)
    if not skip_dask:
        dask_scaling(16, 512, 50_000, 6_000_000 if gpu else 120_000, 7, 250_000 if gpu else 30_000, gpu)


if __name__ == "__main__":
    main()
