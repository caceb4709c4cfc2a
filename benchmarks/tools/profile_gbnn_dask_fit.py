"""Where a small GBNN ``fit`` through Dask spends its time, against the same ``fit`` in memory.

A Dask ``fit`` of ``--messages`` Scenario-2 messages (C = 16, L = 512) on a local cluster
of ``--workers`` worker processes (one task thread each; one per GPU with ``--device
cuda``), beside what its parts cost alone on the same cluster:

* the in-memory ``fit`` (the target compares against it);
* one empty task, submitted and waited for (the scheduler's round trip);
* one packed ``W`` (C·L x C·ceil(L/32) uint32: 8 MiB) made on a worker and fetched by the
  client, as the reduced memory is;
* the Dask ``fit`` itself, and its task stream (each task's name and duration, summed).

Medians of ``--repeat``. Run: ``python benchmarks/tools/profile_gbnn_dask_fit.py
[--device cuda] [--workers 2]``.
"""

import argparse
import collections
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # _harness beside the benchmarks

import numpy as np
from _harness import local_cluster

C, L = 16, 512


def _median(fn, repeat):
    fn()  # warm-up: kernels, imports, the estimator on the workers
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _make_w(device):
    from sknn_gpu._backend import get_xp

    return get_xp(device).zeros((C * L, C * ((L + 31) // 32)), dtype=np.uint32)


def main():
    import dask.array as da
    from distributed import Client, get_task_stream

    from sknn_gpu import GBNNMemory
    from sknn_gpu._backend import synchronize

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    msgs = np.random.default_rng(1).integers(0, L, size=(args.messages, C), dtype=np.int32)
    mem = GBNNMemory(device=args.device, random_state=0, cluster_size=L)

    def in_memory():
        mem.fit(msgs)
        synchronize(args.device)

    print(f"GBNN fit of {args.messages:,} messages (C={C}, L={L}), {args.device}, medians of {args.repeat}")
    print(f"in memory:                       {_median(in_memory, args.repeat) * 1e3:8.2f} ms")
    with local_cluster(args.device == "cuda", args.workers) as cluster, Client(cluster) as client:
        X = da.from_array(msgs, chunks=(max(1, args.messages // (4 * args.workers)), -1)).persist()
        t_task = _median(lambda: client.submit(int, 1, pure=False).result(), args.repeat)
        t_w = _median(lambda: client.submit(_make_w, args.device, pure=False).result(), args.repeat)
        t_fit = _median(lambda: GBNNMemory(**mem.get_params()).fit(X), args.repeat)
        with get_task_stream(client) as ts:
            t = time.perf_counter()
            GBNNMemory(**mem.get_params()).fit(X)
            one = time.perf_counter() - t
        print(f"one empty task, round trip:      {t_task * 1e3:8.2f} ms")
        print(f"one 8 MiB W from a worker:       {t_w * 1e3:8.2f} ms")
        print(f"Dask fit ({args.workers} workers):           {t_fit * 1e3:8.2f} ms")
        by, n = collections.defaultdict(float), collections.Counter()
        for r in ts.data:
            for s in r.get("startstops", ()):
                name = r["key"][0] if isinstance(r["key"], tuple) else r["key"]
                name = str(name).split("-")[0]
                by[(name, s["action"])] += s["stop"] - s["start"]
                n[(name, s["action"])] += 1
        print(f"\ntask stream of one more Dask fit ({one * 1e3:.2f} ms on the client's clock):")
        for (name, action), secs in sorted(by.items(), key=lambda kv: -kv[1]):
            print(f"  {name:28s} {action:9s} x{n[(name, action)]:<3d} {secs * 1e3:8.2f} ms")


if __name__ == "__main__":
    main()
