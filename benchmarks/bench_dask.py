"""Dask scale-out: one GPU in memory, Dask on one GPU, Dask on every GPU of the host.

Three workloads, each checked identical to the in-memory result:

* FlyHash ``transform`` of 2,000,000 x 784 float32 rows (FashionMNIST-shaped hash:
  25,088 units, 39 connections, k = 1,254, packed codes), 50,000-row chunks;
* FlyNN ``fit`` (counts per block, tree-summed on the workers) and ``predict`` of the
  same 2,000,000 rows with 10 labels;
* GBNN ``predict`` of 6,000,000 Scenario-2 probes (``bench_gbnn.dask_scaling``).

The data are generated block by block from per-block seeds (CuPy on the GPU), so the
in-memory run and every Dask run hash exactly the same rows; on a cluster every block is
made on the worker that holds it (block i on worker i mod n) and persisted before the
clock starts. Dask results are
persisted on the workers (as the in-memory result stays on its GPU), then compared with
the in-memory one: per-block SHA-256 digests of the codes, the count tables, the
predictions. Times are medians (wall clock, synchronised).

``--chunk`` and ``--gbnn-chunk`` set the rows per Dask block (defaults 50,000 and
250,000); ``--threads`` the task threads of each GPU worker (default 1: with 2, one
thread prepares the next block while the other waits on the GPU). Without a GPU (or
with ``--quick``) the sizes shrink and the cluster is 1 and 2 CPU worker processes.
Run: ``python benchmarks/bench_dask.py`` (needs the ``dask`` extra; ``dask-cuda`` for
GPUs).
"""

import hashlib

import numpy as np
from _harness import (
    Table,
    environment_header,
    local_cluster,
    parse_args,
    persist_round_robin,
    time_call,
    time_cpu,
)

from sknn_gpu import FlyHashTransformer, FlyNNClassifier
from sknn_gpu._backend import cuda_available, to_host
from sknn_gpu.fly import PAPERS_FLYNN


def _rows(i, n, d, gpu):
    """Block ``i`` of the data: ``n`` uniform float32 rows from seed ``i`` (CuPy on the GPU)."""
    if gpu:
        import cupy as cp

        return cp.random.default_rng(i).random((n, d), dtype=cp.float32)
    return np.random.default_rng(i).random((n, d), dtype=np.float32)


def _labels(i, n):
    return np.random.default_rng(1_000_000 + i).integers(0, 10, size=n)


def _digest(block):
    return hashlib.sha256(np.ascontiguousarray(to_host(block)).tobytes()).hexdigest()


def _in_memory_data(sizes, d, gpu):
    xp = __import__("cupy") if gpu else np
    X = xp.concatenate([_rows(i, n, d, gpu) for i, n in enumerate(sizes)])
    y = np.concatenate([_labels(i, n) for i, n in enumerate(sizes)])
    return X, y


def _dask_data(sizes, d, gpu):
    import dask
    import dask.array as da

    meta = _rows(0, 0, d, gpu)
    X = da.concatenate(
        [
            da.from_delayed(dask.delayed(_rows)(i, n, d, gpu), shape=(n, d), dtype=np.float32, meta=meta)
            for i, n in enumerate(sizes)
        ]
    )
    y = da.concatenate(
        [
            da.from_delayed(dask.delayed(_labels)(i, n), shape=(n,), dtype=np.int64)
            for i, n in enumerate(sizes)
        ]
    )
    return X, y


def _block_digests(client, H):
    import dask

    return client.compute([dask.delayed(_digest)(b) for b in H.to_delayed().ravel()], sync=True)


def run(n_rows, chunk, hash_shape, gpu, worker_counts, repeat, threads=1):
    from distributed import Client, wait

    d, m, s, k = hash_shape
    device = "cuda" if gpu else "cpu"
    sizes = [chunk] * (n_rows // chunk) + ([n_rows % chunk] if n_rows % chunk else [])
    hasher = FlyHashTransformer(
        n_components=m, n_connections=s, k=k, output="packed", random_state=0, device=device
    )
    # the raw features' hash with gamma ** counts: the configuration the recorded 2-GPU figures
    # measured (FlyNN's defaults before 2026-11-26)
    papers = {**PAPERS_FLYNN, "n_components": m, "n_connections": s, "k": k}
    fly = FlyNNClassifier(**papers, random_state=0, device=device)
    unit = "GPU" if gpu else "CPU worker"

    # ------------------------------------------------ in memory, one device
    X, y = _in_memory_data(sizes, d, gpu)
    hasher.fit(X[:1])
    hashes = Table(
        f"Dask: FlyHash transform of {n_rows:,} x {d} (m={m:,}, s={s}, k={k:,}, packed), "
        f"{chunk:,}-row chunks",
        baseline=f"in memory, 1 {'GPU' if gpu else 'CPU process'}",
    )
    hashes.add(hashes.baseline, device, time_call(lambda: hasher.transform(X), repeat, 1, device))
    bounds = np.cumsum([0] + sizes)
    blocks = [X[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    hashes.add(
        "in memory, 1 GPU, block by block" if gpu else "in memory, block by block",
        device,
        time_call(lambda: [hasher.transform(b) for b in blocks], repeat, 1, device),
        note="the Dask blocks, one call each, one process: the estimator's own per-call cost",
    )
    H = hasher.transform(X)
    expect_digests = [_digest(H[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    H = None

    one = f"in memory, 1 {'GPU' if gpu else 'CPU process'}"
    fits = Table(f"Dask: FlyNN fit of the same {n_rows:,} rows (10 classes)", baseline=one)
    fits.add(one, device, time_call(lambda: fly.fit(X, y), repeat, 1, device))
    preds = Table(f"Dask: FlyNN predict of the same {n_rows:,} rows", baseline=one)
    preds.add(one, device, time_call(lambda: fly.predict(X), repeat, 1, device))
    counts = to_host(fly.counts_).copy()
    pred = to_host(fly.predict(X))
    X = None  # free the in-memory copy before the clusters start
    if gpu:
        import cupy as cp

        cp.get_default_memory_pool().free_all_blocks()

    # ------------------------------------------------ Dask on 1..n workers
    for n in worker_counts:
        label = f"Dask, {n} {unit}{'s' if n > 1 else ''}"
        with local_cluster(gpu, n, threads) as cluster, Client(cluster) as client:
            dX, dy = persist_round_robin(client, *_dask_data(sizes, d, gpu))

            def transform():
                out = hasher.transform(dX).persist()  # codes stay on the workers
                wait(out)
                return out

            secs = time_cpu(transform, repeat=repeat, warmup=1)
            same = _block_digests(client, transform()) == expect_digests
            hashes.add(label, device, secs, quality=f"identical: {same}")

            dist = FlyNNClassifier(**fly.get_params())
            secs = time_cpu(lambda: dist.fit(dX, dy), repeat=repeat, warmup=1)  # noqa: B023
            fits.add(
                label,
                device,
                secs,
                quality=f"counts identical: {np.array_equal(to_host(dist.counts_), counts)}",
                note="count tables summed in a tree on the workers; one table to the client",
            )

            def predict():
                out = dist.predict(dX).persist()  # noqa: B023
                wait(out)
                return out

            secs = time_cpu(predict, repeat=repeat, warmup=1)
            got = to_host(predict().compute())
            preds.add(label, device, secs, quality=f"identical: {np.array_equal(got, pred)}")
    hashes.print()
    fits.print()
    preds.print()


def main(argv=None):
    import argparse
    import sys

    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--chunk", type=int, default=50_000, help="rows per chunk (FlyHash, FlyNN)")
    extra.add_argument("--gbnn-chunk", type=int, default=250_000, help="probes per chunk (GBNN)")
    extra.add_argument("--threads", type=int, default=1, help="task threads per GPU worker")
    own, rest = extra.parse_known_args(sys.argv[1:] if argv is None else argv)
    args = parse_args(__doc__.splitlines()[0], rest)
    print(environment_header() + "\n")
    try:
        import distributed  # noqa: F401
    except ImportError:
        print("dask[distributed] is not installed: nothing to measure")
        return
    gpu = cuda_available() and args.device != "cpu"
    counts = [1, 2]
    if gpu:
        try:
            import dask_cuda  # noqa: F401
        except ImportError:
            print("dask-cuda is not installed: nothing to measure on GPUs")
            return
        from sknn_gpu._backend import device_limits

        counts = sorted({1, device_limits().n_devices})
    if args.quick or not gpu:
        run(40_000, 5_000, (784, 2_048, 39, 64), gpu, counts, repeat=3)
    else:
        run(2_000_000, own.chunk, (784, 25_088, 39, 1_254), gpu, counts, repeat=5, threads=own.threads)
    import bench_gbnn

    if args.quick or not gpu:
        bench_gbnn.dask_scaling(16, 512, 5_000, 20_000, 7, 5_000, gpu)
    else:
        bench_gbnn.dask_scaling(16, 512, 50_000, 6_000_000, 7, own.gbnn_chunk, gpu, threads=own.threads)


if __name__ == "__main__":
    main()
