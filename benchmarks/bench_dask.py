"""Dask scale-out: one GPU in memory against Dask on 1, 2, ... N GPUs of the host.

Four workloads, each checked identical to the in-memory result:

* FlyHash ``transform`` of 784-feature float32 rows (FashionMNIST-shaped hash:
  25,088 units, 39 connections, k = 1,254, packed codes);
* FlyNN ``fit`` (counts per block, tree-summed on the workers) and ``predict`` of the
  same rows with 10 labels, beside a multi-GPU PyTorch peer (``torch.cdist`` 1-NN
  against a reference sample, the queries split over the GPUs; "not installed" without
  PyTorch);
* GBNN ``predict`` of Scenario-2 probes (C=16, L=512, 50,000 stored, 7 erased) and a
  GBNN ``fit`` of 50,000 messages.

Two ways to hold the data:

* default: generated block by block from per-block seeds (CuPy on the GPU), the
  in-memory run holding all of it on one device and every Dask run holding it on
  the workers (contiguous row ranges per worker, persisted before the clock starts);
  2,000,000 rows (``--rows``), 6,000,000 probes (``--probes``);
* ``--data-dir DIR``: the data are written once as ``.npy`` shards in ``DIR`` (kept for
  later runs) and every timed run reads them: the Dask workers through
  ``sknn_gpu.io.read_npy_shards`` (one task per shard), the one-GPU baseline shard by
  shard with ``sknn_gpu.io.load_npy`` (to the GPU, one call per shard: the way one GPU
  gets through data larger than its memory); ``--reader numpy`` reads with ``np.load``
  (+ ``cupy.asarray``) on both sides instead. Then
  FlyHash transform, FlyNN fit and predict, the whole FlyHash -> FlyNN fit -> predict
  pipeline end to end, and GBNN predict; 20,000,000 rows and 60,000,000 probes by
  default on GPUs. Shards hold ``--shard-rows`` rows and ``--probe-shard-rows`` probes
  (default: the Dask block size the estimators use, ``sknn_gpu._dask.BLOCK_BYTES``, so no
  shard is merged or moved; smaller shards balance better when there are few of them
  per worker).
  ``--workloads`` picks some of them (``flyhash,fit,predict,pipeline,gbnn``), so that a
  large run can be split over several sittings.

Dask results stay on the workers (``persist``) as the in-memory result stays on its
GPU; they are compared with the in-memory ones through order-aware fingerprints (a
64-bit sum of mixed row hashes, per block on the workers), the count tables and the
memories. Times are medians (wall clock, synchronised). Each Dask row's note says the
bytes the workers served during one extra run (to other workers and to the client,
from the workers' transfer logs); ``--report DIR`` saves a Dask performance report
(``distributed.performance_report``) of that run per workload and device count.
A summary table at the end shows every workload against in memory on one device; each
result is also written to stderr as soon as it is measured (``[bench_dask] ...`` lines), so
a run cut short keeps what it measured.

``--gpus N`` runs Dask on 1, 2, 4, ... and N GPUs (default: every GPU found; 1 and 2 CPU
worker processes without a GPU). ``--chunk`` and ``--gbnn-chunk`` set the rows per Dask block
as the user hands them in (defaults 50,000 and 250,000; the estimators merge blocks
smaller than their target); ``--threads`` the task threads of each GPU worker
(default 1). Without a GPU (or with ``--quick``) the sizes shrink and the cluster is 1
and 2 CPU worker processes. Run: ``python benchmarks/bench_dask.py [--data-dir DIR]``
(needs the ``dask`` extra; ``dask-cuda`` for GPUs; ``--device cpu --quick`` for a
CPU ``LocalCluster`` at a tiny size).
"""

import json
import math
import sys
import threading
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
from _harness import Table, environment_header, local_cluster, parse_args, time_call, time_cpu

from sknn_gpu import FlyHashTransformer, FlyNNClassifier, GBNNMemory
from sknn_gpu._backend import array_module, cuda_available, to_host
from sknn_gpu._dask import BLOCK_BYTES
from sknn_gpu.fly import PAPERS_FLYNN
from sknn_gpu.io import load_npy, read_npy_shards

#: sizes: full (GPU) and quick (CPU, CI)
FULL = dict(
    rows=2_000_000,
    disk_rows=20_000_000,
    hash=(784, 25_088, 39, 1_254),
    probes=6_000_000,
    disk_probes=60_000_000,
    stored=50_000,
    torch_ref=60_000,
    disk_torch_ref=10_000,
)
QUICK = dict(
    rows=40_000,
    disk_rows=40_000,
    hash=(784, 2_048, 39, 64),
    probes=20_000,
    disk_probes=20_000,
    stored=5_000,
    torch_ref=2_000,
    disk_torch_ref=2_000,
)
GBNN = dict(C=16, L=512, erased=7)


# ----------------------------------------------------------------------------------
# Data: blocks from seeds, shards on disk, fingerprints
# ----------------------------------------------------------------------------------
def _xp(gpu):
    return __import__("cupy") if gpu else np


def _rows(i, n, d, gpu):
    """Block ``i`` of the data: ``n`` uniform float32 rows from seed ``i`` (CuPy on the GPU)."""
    if gpu:
        import cupy as cp

        return cp.random.default_rng(i).random((n, d), dtype=cp.float32)
    return np.random.default_rng(i).random((n, d), dtype=np.float32)


def _labels(i, n):
    return np.random.default_rng(1_000_000 + i).integers(0, 10, size=n)


def _sizes(total, chunk):
    return [chunk] * (total // chunk) + ([total % chunk] if total % chunk else [])


_MIX = 0xBF58476D1CE4E5B9
_GOLD = 0x9E3779B97F4A7C15
_MASK = (1 << 64) - 1


def fingerprint(block, offset):
    """Order-aware 64-bit fingerprint of the rows of ``block`` (rows ``offset``... of the whole
    result): a sum of mixed per-row hashes, so fingerprints of consecutive blocks add up to
    that of the whole, however it is split. NumPy or CuPy (computed where the block is)."""
    xp = array_module(block)
    a = xp.ascontiguousarray(block.reshape(block.shape[0], -1))
    n = a.shape[0]
    if n == 0:
        return 0
    if a.dtype.itemsize * a.shape[1] % 8 == 0:
        words = a.view(xp.uint8).view(xp.uint64)
    else:
        words = a.astype(xp.uint64)
    mult = np.array([((2 * j + 1) * _GOLD) & _MASK for j in range(words.shape[1])], dtype=np.uint64)
    r = (words * xp.asarray(mult)).sum(axis=1, dtype=xp.uint64)
    r ^= (xp.arange(n, dtype=xp.uint64) + xp.uint64(offset)) * xp.uint64(_GOLD)
    r ^= r >> xp.uint64(31)
    r *= xp.uint64(_MIX)
    return int(r.sum(dtype=xp.uint64)) & _MASK


def _add(*values):
    return sum(values) & _MASK


def dask_fingerprint(client, A):
    """:func:`fingerprint` of the Dask array ``A``: one per block on the workers, summed."""
    import dask

    offsets = np.concatenate([[0], np.cumsum(A.chunks[0])[:-1]]).tolist()
    parts = [
        dask.delayed(fingerprint)(b, int(o)) for b, o in zip(A.to_delayed().ravel(), offsets, strict=True)
    ]
    return client.compute(dask.delayed(_add)(*parts), sync=True)


#: how a shard is read: ``sknn`` (:func:`sknn_gpu.io.load_npy`: on the GPU through pinned
#: staging buffers) or ``numpy`` (``np.load``, then ``cupy.asarray`` on the GPU); ``--reader``
READERS = ("sknn", "numpy")


def _load(path, gpu, reader="sknn"):
    """One shard, on the current GPU when ``gpu`` (NumPy otherwise), read the ``reader`` way."""
    if reader == "sknn":
        return load_npy(path, device="cuda" if gpu else "cpu")
    a = np.load(path)
    if gpu:
        import cupy as cp

        return cp.asarray(a)
    return a


def _write_shards(folder, prefix, sizes, make):
    """Shards ``prefix_00000.npy``... of ``make(i, n)`` (host arrays) unless already written,
    several at a time (NumPy's generators, sorts and file writes release the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    paths = [folder / f"{prefix}_{i:05d}.npy" for i in range(len(sizes))]

    def write(i):
        if not paths[i].exists():
            np.save(paths[i], make(i, sizes[i]))

    with ThreadPoolExecutor(max_workers=min(16, max(1, len(sizes)))) as pool:
        list(pool.map(write, range(len(sizes))))
    return paths


#: the workloads of the on-disk run (``--workloads``)
DISK_WORKLOADS = ("flyhash", "fit", "predict", "pipeline", "gbnn")


def _disk_data(folder, rows, probes, shard_rows, probe_shard_rows, d, stored, gbnn=True):
    """Write (once) the FlyHash/FlyNN rows and labels, GBNN's stored messages and probes
    (``gbnn=False``: no probes, when GBNN is not measured)."""
    folder.mkdir(parents=True, exist_ok=True)
    meta = dict(
        rows=rows,
        probes=probes,
        shard_rows=shard_rows,
        probe_shard_rows=probe_shard_rows,
        d=d,
        stored=stored,
        version=1,
    )
    meta_file = folder / "bench_dask.json"
    if meta_file.exists() and json.loads(meta_file.read_text()) != meta:
        for p in folder.glob("*.npy"):  # another size: written again
            p.unlink()
    sizes = _sizes(rows, shard_rows)
    X = _write_shards(folder, "X", sizes, lambda i, n: _rows(i, n, d, False))
    y = _write_shards(folder, "y", sizes, _labels)
    msgs, truth_of = _gbnn_messages(stored)
    psizes = _sizes(probes, probe_shard_rows) if gbnn else []
    P = _write_shards(folder, "probes", psizes, lambda i, n: _gbnn_probes(msgs, i, n)[0])
    meta_file.write_text(json.dumps(meta))
    return dict(X=X, y=y, sizes=sizes, P=P, psizes=psizes, msgs=msgs)


def _read(paths, sizes, trailing, dtype, gpu, reader="sknn"):
    """A Dask array of the shards, each read by a worker (CuPy blocks on GPU workers):
    :func:`sknn_gpu.io.read_npy_shards`, or ``np.load`` per shard with ``reader='numpy'``."""
    if reader == "sknn":
        return read_npy_shards([str(p) for p in paths], device="cuda" if gpu else "cpu")
    import dask
    import dask.array as da

    meta = _xp(gpu).empty((0,) + trailing, dtype=dtype)
    return da.concatenate(
        [
            da.from_delayed(
                dask.delayed(_load)(str(p), gpu, reader), shape=(n,) + trailing, dtype=dtype, meta=meta
            )
            for p, n in zip(paths, sizes, strict=True)
        ]
    )


def _gbnn_messages(M):
    C, L = GBNN["C"], GBNN["L"]
    msgs = np.random.default_rng(1).integers(0, L, size=(M, C), dtype=np.int32)
    return msgs, None


def _gbnn_probes(msgs, i, n):
    """Probes of block ``i``: ``n`` stored messages with ``erased`` symbols erased (seed ``i``)."""
    rng = np.random.default_rng(2_000_000 + i)
    truth = msgs[rng.integers(0, msgs.shape[0], size=n)]
    probes = truth.copy()
    np.put_along_axis(probes, np.argsort(rng.random(probes.shape), axis=1)[:, : GBNN["erased"]], -1, axis=1)
    return probes, truth


# ----------------------------------------------------------------------------------
# Clusters: placement, transfer bytes, performance reports
# ----------------------------------------------------------------------------------
def persist_contiguous(client, *arrays):
    """Persist Dask arrays with contiguous row ranges per worker (block i of nb on worker
    i * n // nb): the data sit evenly on the workers before the clock starts, and the blocks
    the estimators merge (adjacent ones) are on the same worker, as a user's contiguous
    shards would be."""
    import dask.array as da
    from distributed import wait

    workers = sorted(client.scheduler_info()["workers"])
    out = []
    for a in arrays:
        nb = a.numblocks[0]
        parts = [client.persist(a.blocks[i], workers=[workers[i * len(workers) // nb]]) for i in range(nb)]
        out.append(da.concatenate(parts, axis=0))
    wait(out)
    return out


def _served(dask_worker):
    """Bytes this worker sent (to workers and clients) and received from other workers."""
    incoming = sum(t.get("total", 0) for t in dask_worker.transfer_incoming_log)
    return dask_worker.transfer_outgoing_bytes_total, incoming


def transfer_bytes(client):
    """``(served, between_workers)``: bytes the workers sent in all, and received from each other."""
    got = client.run(_served).values()
    return sum(o for o, _ in got), sum(i for _, i in got)


def _mb(n):
    return f"{n / 1e6:,.1f} MB"


def _task_stream_json(ts, path):
    """The task stream of a run (per task: its key, worker, and compute/transfer spans) as JSON."""
    rows = [
        dict(key=str(r["key"]), worker=r["worker"], **{k: s[k] for k in ("action", "start", "stop")})
        for r in ts.data
        for s in r["startstops"]
    ]
    path.write_text(json.dumps(rows))


def profiled(client, fn, report, name):
    """:func:`profiled_run`'s note alone."""
    return profiled_run(client, fn, report, name)[0]


def profiled_run(client, fn, report, name):
    """Run ``fn()`` once more, under a performance report in ``report`` when given (the task
    stream as JSON where bokeh, which the HTML report needs, is missing); returns a note on
    the bytes the workers moved during it and what ``fn`` returned (checked against in
    memory, so that no extra run is needed for the check)."""
    from distributed import get_task_stream

    served0, between0 = transfer_bytes(client)
    if report:
        folder = Path(report)
        folder.mkdir(parents=True, exist_ok=True)
        try:
            import bokeh  # noqa: F401
        except ImportError:
            with get_task_stream(client) as ts:
                out = fn()
            _task_stream_json(ts, folder / f"{name}.json")
        else:
            from distributed import performance_report

            with performance_report(filename=str(folder / f"{name}.html")):
                out = fn()
    else:
        out = fn()
    served, between = transfer_bytes(client)
    between -= between0
    moved = f"moved: {_mb(between)} between workers, {_mb(max(served - served0 - between, 0))} to the client"
    return moved, out


def _cupy_device(k):
    import cupy as cp

    return cp.cuda.Device(k)


# ----------------------------------------------------------------------------------
# The PyTorch peer: 1-NN by torch.cdist against a reference sample, queries over the GPUs
# ----------------------------------------------------------------------------------
def torch_peer(table, pieces, ref, ref_y, counts, gpu, load=None, batch=8192, repeat=3):
    """Rows ``PyTorch cdist 1-NN, n GPUs`` (n in ``counts``): each GPU takes a contiguous share of
    ``pieces`` (arrays, or paths read with ``load(path, gpu)`` onto the current CuPy device,
    then handed to PyTorch without a copy) and labels them by the nearest of ``ref`` (its
    labels ``ref_y``); a "not installed" row without PyTorch."""
    try:
        import torch
    except ImportError:
        table.not_installed("PyTorch cdist 1-NN", "cuda" if gpu else "cpu", "PyTorch")
        print("PyTorch is not installed: no peer row for FlyNN predict\n")
        return
    counts = counts if gpu else [1]
    for n in counts:
        devs = [torch.device(f"cuda:{i}") if gpu else torch.device("cpu") for i in range(n)]
        refs = [torch.as_tensor(to_host(ref)).to(d) for d in devs]
        labs = [torch.as_tensor(to_host(ref_y)).to(d) for d in devs]
        shares = [pieces[i * len(pieces) // n : (i + 1) * len(pieces) // n] for i in range(n)]
        if load is None:  # in-memory data: placed on its GPU before the clock starts
            shares = [
                [torch.as_tensor(to_host(p)).to(d) for p in s] for s, d in zip(shares, devs, strict=True)
            ]

        def work(k):
            dev = devs[k]
            with torch.cuda.device(dev) if gpu else nullcontext(), _cupy_device(k) if gpu else nullcontext():
                for p in shares[k]:  # noqa: B023
                    q = torch.as_tensor(load(p, gpu), device=dev) if load is not None else p
                    for a in range(0, q.shape[0], batch):
                        nearest = torch.cdist(q[a : a + batch], refs[k]).argmin(dim=1)  # noqa: B023
                        labs[k][nearest]  # noqa: B023 (the prediction, kept on the GPU)
                if gpu:
                    torch.cuda.synchronize(dev)

        def run():
            threads = [threading.Thread(target=work, args=(k,)) for k in range(n)]  # noqa: B023
            for t in threads:
                t.start()
            for t in threads:
                t.join()

        unit = "GPU" if gpu else "CPU"
        secs = time_cpu(run, repeat=repeat, warmup=1)
        refs = labs = shares = None
        if gpu:
            torch.cuda.empty_cache()  # give the memory back before the Dask workers start
        table.add(
            f"PyTorch cdist 1-NN, {n} {unit}{'s' if n > 1 else ''}",
            "torch" if gpu else "cpu",
            secs,
            note=f"a different model: 1-NN against {ref.shape[0]:,} reference rows, queries split over "
            "the devices",
            peer=True,
        )


# ----------------------------------------------------------------------------------
# The workloads
# ----------------------------------------------------------------------------------
class Summary:
    """Every workload's median times by column, printed as one table at the end."""

    def __init__(self):
        self.rows = {}
        self.columns = []

    def add(self, workload, column, seconds):
        import sys

        from _harness import fmt_time

        self.rows.setdefault(workload, {})[column] = seconds
        if column not in self.columns:
            self.columns.append(column)
        # one line per result as it comes (stderr, flushed): a run cut short keeps what it measured
        print(f"[bench_dask] {workload} | {column}: {fmt_time(seconds)}", file=sys.stderr, flush=True)

    def print(self):
        from _harness import fmt_time

        base = self.columns[0]
        cols = self.columns
        print("### Scale-out summary: median times (ratio = in memory on one device / this)\n")
        print("| workload | " + " | ".join(cols) + " |")
        print("|---|" + "---|" * len(cols))
        for w, got in self.rows.items():
            cells = []
            for c in cols:
                s = got.get(c)
                if s is None:
                    cells.append("—")
                elif c == base or not got.get(base):
                    cells.append(fmt_time(s))
                else:
                    cells.append(f"{fmt_time(s)} ({got[base] / s:.2f}×)")
            print(f"| {w} | " + " | ".join(cells) + " |")
        print()


def _label(n, gpu):
    return f"Dask, {n} {'GPU' if gpu else 'CPU worker'}{'s' if n > 1 else ''}"


def _one(gpu):
    return f"in memory, 1 {'GPU' if gpu else 'CPU process'}"


def _models(hash_shape, device):
    d, m, s, k = hash_shape
    hasher = FlyHashTransformer(
        n_components=m, n_connections=s, k=k, output="packed", random_state=0, device=device
    )
    # the raw features' hash with gamma ** counts: the configuration the recorded 2-GPU figures
    # measured (FlyNN's defaults before 2026-11-26)
    papers = {**PAPERS_FLYNN, "n_components": m, "n_connections": s, "k": k}
    return hasher, FlyNNClassifier(**papers, random_state=0, device=device)


def run_in_memory_data(n_rows, chunk, hash_shape, gpu, worker_counts, repeat, summary, opts):
    """FlyHash and FlyNN on data generated from seeds: in memory on one device, then Dask."""
    from distributed import Client, wait

    d, m, s, k = hash_shape
    device = "cuda" if gpu else "cpu"
    sizes = _sizes(n_rows, chunk)
    hasher, fly = _models(hash_shape, device)
    one = _one(gpu)
    xp = _xp(gpu)
    X = xp.concatenate([_rows(i, n, d, gpu) for i, n in enumerate(sizes)])
    y = np.concatenate([_labels(i, n) for i, n in enumerate(sizes)])
    hasher.fit(X[:1])
    hashes = Table(
        f"Dask: FlyHash transform of {n_rows:,} x {d} (m={m:,}, s={s}, k={k:,}, packed), "
        f"{chunk:,}-row chunks",
        baseline=one,
    )
    secs = hashes.add(one, device, time_call(lambda: hasher.transform(X), repeat, 1, device))
    summary.add(f"FlyHash transform {n_rows:,} x {d}", one, secs)
    bounds = np.cumsum([0] + sizes)
    blocks = [X[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    hashes.add(
        "in memory, 1 GPU, block by block" if gpu else "in memory, block by block",
        device,
        time_call(lambda: [hasher.transform(b) for b in blocks], repeat, 1, device),
        note="the Dask blocks, one call each, one process: the estimator's own per-call cost",
    )
    expect_h = fingerprint(hasher.transform(X), 0)
    fits = Table(f"Dask: FlyNN fit of the same {n_rows:,} rows (10 classes)", baseline=one)
    summary.add(
        f"FlyNN fit {n_rows:,}",
        one,
        fits.add(one, device, time_call(lambda: fly.fit(X, y), repeat, 1, device)),
    )
    preds = Table(f"Dask: FlyNN predict of the same {n_rows:,} rows", baseline=one)
    summary.add(
        f"FlyNN predict {n_rows:,}",
        one,
        preds.add(one, device, time_call(lambda: fly.predict(X), repeat, 1, device)),
    )
    counts = to_host(fly.counts_).copy()
    expect_p = fingerprint(fly.predict(X), 0)
    ref = to_host(X[: opts.torch_ref])
    torch_peer(preds, blocks, ref, y[: opts.torch_ref], worker_counts, gpu)
    X = blocks = None  # free the in-memory copy before the clusters start
    if gpu:
        __import__("cupy").get_default_memory_pool().free_all_blocks()

    for n in worker_counts:
        label = _label(n, gpu)
        tag = f"{n}{'gpu' if gpu else 'cpu'}"
        with local_cluster(gpu, n, opts.threads) as cluster, Client(cluster) as client:
            dX, dy = persist_contiguous(client, *_dask_data(sizes, d, gpu))

            def transform():
                out = hasher.transform(dX).persist()  # codes stay on the workers  # noqa: B023
                wait(out)
                return out

            secs = time_cpu(transform, repeat=repeat, warmup=1)
            same = dask_fingerprint(client, transform()) == expect_h
            note = profiled(client, transform, opts.report, f"flyhash_transform_{tag}")
            summary.add(
                f"FlyHash transform {n_rows:,} x {d}",
                label,
                hashes.add(label, device, secs, f"identical: {same}", note),
            )

            dist = FlyNNClassifier(**fly.get_params())
            secs = time_cpu(lambda: dist.fit(dX, dy), repeat=repeat, warmup=1)  # noqa: B023
            note = profiled(client, lambda: dist.fit(dX, dy), opts.report, f"flynn_fit_{tag}")  # noqa: B023
            same = np.array_equal(to_host(dist.counts_), counts)
            summary.add(
                f"FlyNN fit {n_rows:,}",
                label,
                fits.add(
                    label,
                    device,
                    secs,
                    quality=f"counts identical: {same}",
                    note=f"count tables summed in a tree on the workers; one table to the client; {note}",
                ),
            )

            def predict():
                out = dist.predict(dX).persist()  # noqa: B023
                wait(out)
                return out

            secs = time_cpu(predict, repeat=repeat, warmup=1)
            same = dask_fingerprint(client, predict()) == expect_p
            note = profiled(client, predict, opts.report, f"flynn_predict_{tag}")
            summary.add(
                f"FlyNN predict {n_rows:,}", label, preds.add(label, device, secs, f"identical: {same}", note)
            )
    hashes.print()
    fits.print()
    preds.print()


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


def run_gbnn(K, chunk, gpu, worker_counts, repeat, summary, opts, stored):
    """GBNN predict of ``K`` probes and fit of the stored messages: in memory, then Dask."""
    import dask.array as da
    from distributed import Client, wait

    C, L, e = GBNN["C"], GBNN["L"], GBNN["erased"]
    device = "cuda" if gpu else "cpu"
    msgs, _ = _gbnn_messages(stored)
    sizes = _sizes(K, chunk)
    parts = [_gbnn_probes(msgs, i, n) for i, n in enumerate(sizes)]
    probes = np.concatenate([p for p, _ in parts])
    mem = GBNNMemory(device=device, random_state=0, cluster_size=L).fit(msgs)
    xp = _xp(gpu)
    on_device = xp.asarray(probes)
    expected = fingerprint(mem.predict(on_device), 0)
    one = _one(gpu)
    t = Table(
        f"Dask: predict of {K:,} probes (C={C}, L={L}, {stored:,} stored, {e} erased), {chunk:,}-row chunks",
        baseline=one,
    )
    secs = t.add(
        one,
        device,
        time_call(lambda: mem.predict(on_device), repeat, 1, device),
        note="probes already on the device",
    )
    summary.add(f"GBNN predict {K:,} probes", one, secs)
    fits = Table(f"Dask: fit of {stored:,} messages (C={C}, L={L})", baseline="fit in memory")
    secs = fits.add("fit in memory", device, time_call(lambda: mem.fit(msgs), repeat, 1, device))
    summary.add(f"GBNN fit {stored:,} messages", one, secs)
    W = to_host(mem.W_)
    on_device = None
    for n in worker_counts:
        label = _label(n, gpu)
        tag = f"{n}{'gpu' if gpu else 'cpu'}"
        with local_cluster(gpu, n, opts.threads) as cluster, Client(cluster) as client:
            dP = da.from_array(probes, chunks=(tuple(sizes), -1))
            dM = da.from_array(msgs, chunks=(max(1, stored // (4 * n)), -1))
            if gpu:
                import cupy as cp

                dP, dM = dP.map_blocks(cp.asarray), dM.map_blocks(cp.asarray)
            dP, dM = persist_contiguous(client, dP, dM)

            def run():
                out = mem.predict(dP).persist()  # results stay on the workers, as in memory  # noqa: B023
                wait(out)
                return out

            secs = time_cpu(run, repeat=repeat, warmup=1)
            same = dask_fingerprint(client, run()) == expected
            note = profiled(client, run, opts.report, f"gbnn_predict_{tag}")
            summary.add(
                f"GBNN predict {K:,} probes", label, t.add(label, device, secs, f"identical: {same}", note)
            )
            dist = GBNNMemory(device=device, random_state=0, cluster_size=L)
            secs = time_cpu(lambda: dist.fit(dM), repeat=repeat, warmup=1)  # noqa: B023 (called at once)
            note = profiled(client, lambda: dist.fit(dM), opts.report, f"gbnn_fit_{tag}")  # noqa: B023
            same = np.array_equal(to_host(dist.W_), W)
            summary.add(
                f"GBNN fit {stored:,} messages",
                label,
                fits.add(
                    f"fit {label}",
                    device,
                    secs,
                    quality=f"W identical: {same}",
                    note=f"a packed W per merged block, OR-reduced in a tree; W to the client; {note}",
                ),
            )
    t.print()
    fits.print()


def run_disk(folder, n_rows, K, hash_shape, gpu, worker_counts, repeat, summary, opts):
    """The on-disk pipeline: shards read by the workers (Dask) or one by one (one device)."""
    from distributed import Client, wait

    d, m, s, k = hash_shape
    device = "cuda" if gpu else "cpu"
    row_bytes = d * 4
    block = BLOCK_BYTES["cuda" if gpu else "cpu"]
    shard = opts.shard_rows or max(1, math.ceil(block / row_bytes))
    pshard = opts.probe_shard_rows or max(1, math.ceil(block / (GBNN["C"] * 4)))
    want = set(opts.workloads)
    started = time.perf_counter()
    data = _disk_data(Path(folder), n_rows, K, shard, pshard, d, opts.stored, gbnn="gbnn" in want)
    print(f"[bench_dask] data ready in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    print(
        f"Data: {len(data['X'])} shards of up to {shard:,} rows x {d} float32 and {len(data['P'])} shards of "
        f"up to {pshard:,} GBNN probes in {folder}\n"
    )
    hasher, fly = _models(hash_shape, device)
    hasher.fit(np.load(data["X"][0])[:1])
    one = _one(gpu)
    read = "load_npy" if opts.reader == "sknn" else "np.load"
    loop = f"shard by shard: {read}, to the device, one call per shard"
    where = f"{n_rows:,} x {d} from {len(data['X'])} .npy shards"
    hashes = Table(f"Dask: FlyHash transform of {where} (m={m:,}, s={s}, k={k:,}, packed)", baseline=one)
    fits = Table(f"Dask: FlyNN fit of the same {n_rows:,} rows from .npy shards (10 classes)", baseline=one)
    preds = Table(f"Dask: FlyNN predict of the same {n_rows:,} rows from .npy shards", baseline=one)
    pipe = Table(f"Dask: FlyHash transform -> FlyNN fit -> predict of {where}", baseline=one)
    gb = Table(
        f"Dask: predict of {K:,} probes from {len(data['P'])} .npy shards (C={GBNN['C']}, L={GBNN['L']}, "
        f"{opts.stored:,} stored, {GBNN['erased']} erased)",
        baseline=one,
    )
    offsets = np.concatenate([[0], np.cumsum(data["sizes"])[:-1]]).tolist()
    poffsets = np.concatenate([[0], np.cumsum(data["psizes"])[:-1]]).tolist()
    classes = np.arange(10)

    def codes_1():
        return _add(
            *(
                fingerprint(hasher.transform(_load(p, gpu, opts.reader)), o)
                for p, o in zip(data["X"], offsets, strict=True)
            )
        )

    def fit_1():
        est = FlyNNClassifier(**fly.get_params())
        for p, q in zip(data["X"], data["y"], strict=True):
            est.partial_fit(_load(p, gpu, opts.reader), np.load(q), classes=classes)
        return est

    def predict_1(est):
        return _add(
            *(
                fingerprint(est.predict(_load(p, gpu, opts.reader)), o)
                for p, o in zip(data["X"], offsets, strict=True)
            )
        )

    mem = GBNNMemory(device=device, random_state=0, cluster_size=GBNN["L"]).fit(data["msgs"])

    def gbnn_1():
        return _add(
            *(
                fingerprint(mem.predict(_load(p, gpu, opts.reader)), o)
                for p, o in zip(data["P"], poffsets, strict=True)
            )
        )

    sync = device
    if "flyhash" in want:
        expect_h = codes_1()
    if "flyhash" in want:
        secs = hashes.add(one, device, time_call(codes_1, repeat, 1, sync), note=loop)
        summary.add(f"FlyHash transform {where}", one, secs)
    if "fit" in want:
        secs = fits.add(one, device, time_call(fit_1, repeat, 1, sync), note=f"{loop} (partial_fit)")
        summary.add(f"FlyNN fit {n_rows:,} from disk", one, secs)
    if want & {"fit", "predict"}:
        model = fit_1()
        counts = to_host(model.counts_).copy()
        expect_p = predict_1(model)
    if "predict" in want:
        secs = preds.add(one, device, time_call(lambda: predict_1(model), repeat, 1, sync), note=loop)
        summary.add(f"FlyNN predict {n_rows:,} from disk", one, secs)
    if "pipeline" in want:
        secs = pipe.add(
            one, device, time_call(lambda: (codes_1(), predict_1(fit_1())), repeat, 1, sync), note=loop
        )
        summary.add(f"FlyHash -> FlyNN fit -> predict {n_rows:,} from disk", one, secs)
    if "gbnn" in want:
        expect_g = gbnn_1()
        secs = gb.add(one, device, time_call(gbnn_1, repeat, 1, sync), note=loop)
        summary.add(f"GBNN predict {K:,} probes from disk", one, secs)
    if "predict" in want:
        ref = np.load(data["X"][0])[: opts.torch_ref]
        ref_y = np.load(data["y"][0])[: opts.torch_ref]
        torch_peer(
            preds,
            data["X"],
            ref,
            ref_y,
            worker_counts,
            gpu,
            load=lambda p, g: _load(p, g, opts.reader),
            repeat=repeat,
        )

    for n in worker_counts:
        label = _label(n, gpu)
        tag = f"{n}{'gpu' if gpu else 'cpu'}"
        with local_cluster(gpu, n, opts.threads) as cluster, Client(cluster) as client:
            dX = _read(data["X"], data["sizes"], (d,), np.float32, gpu, opts.reader)
            dy = _read(data["y"], data["sizes"], (), np.int64, False, opts.reader)
            dP = (
                _read(data["P"], data["psizes"], (GBNN["C"],), np.int32, gpu, opts.reader)
                if "gbnn" in want
                else None
            )

            def codes():
                return dask_fingerprint(client, hasher.transform(dX))  # noqa: B023

            def fit():
                return FlyNNClassifier(**fly.get_params()).fit(dX, dy)  # noqa: B023

            def predict(est):
                out = est.predict(dX).persist()  # noqa: B023
                wait(out)
                return out

            def gbnn():
                out = mem.predict(dP).persist()  # noqa: B023
                wait(out)
                return out

            if "flyhash" in want:
                secs = time_cpu(codes, repeat=repeat, warmup=1)
                note, got = profiled_run(client, codes, opts.report, f"disk_flyhash_transform_{tag}")
                hashes.add(label, device, secs, f"identical: {got == expect_h}", note)
                summary.add(f"FlyHash transform {where}", label, secs)
            if "fit" in want:
                secs = time_cpu(fit, repeat=repeat, warmup=1)
                note, dist = profiled_run(client, fit, opts.report, f"disk_flynn_fit_{tag}")
            elif "predict" in want:
                dist = fit()
            if want & {"fit", "predict"}:
                same = np.array_equal(to_host(dist.counts_), counts)
            if "fit" in want:
                summary.add(
                    f"FlyNN fit {n_rows:,} from disk",
                    label,
                    fits.add(label, device, secs, f"counts identical: {same}", note),
                )
            if "predict" in want:
                secs = time_cpu(lambda: predict(dist), repeat=repeat, warmup=1)  # noqa: B023
                note, out = profiled_run(
                    client,
                    lambda: predict(dist),  # noqa: B023
                    opts.report,
                    f"disk_flynn_predict_{tag}",
                )
                same = dask_fingerprint(client, out) == expect_p
                summary.add(
                    f"FlyNN predict {n_rows:,} from disk",
                    label,
                    preds.add(label, device, secs, f"identical: {same}", note),
                )

            def pipeline():
                codes()  # noqa: B023
                return predict(fit())  # noqa: B023

            if "pipeline" in want:
                secs = time_cpu(pipeline, repeat=repeat, warmup=1)
                note = profiled(client, pipeline, opts.report, f"disk_pipeline_{tag}")
                summary.add(
                    f"FlyHash -> FlyNN fit -> predict {n_rows:,} from disk",
                    label,
                    pipe.add(label, device, secs, note=note),
                )
            if "gbnn" in want:
                secs = time_cpu(gbnn, repeat=repeat, warmup=1)
                note, out = profiled_run(client, gbnn, opts.report, f"disk_gbnn_predict_{tag}")
                same = dask_fingerprint(client, out) == expect_g
                summary.add(
                    f"GBNN predict {K:,} probes from disk",
                    label,
                    gb.add(label, device, secs, f"identical: {same}", note),
                )
    for table, name in (
        (hashes, "flyhash"),
        (fits, "fit"),
        (preds, "predict"),
        (pipe, "pipeline"),
        (gb, "gbnn"),
    ):
        if name in want:
            table.print()


def doubling_counts(top):
    """1, 2, 4, ... up to ``top``, and ``top``."""
    return sorted({2**e for e in range(top.bit_length()) if 2**e <= top} | {top})


def worker_counts(gpu, want):
    """:func:`doubling_counts` of N: N = ``want`` (at most the GPUs found) or every GPU;
    1 and 2 CPU workers without one."""
    if gpu:
        from sknn_gpu._backend import device_limits

        found = device_limits().n_devices
        return doubling_counts(min(want or found, found))
    return doubling_counts(want or 2)


def main(argv=None):
    import argparse
    import sys

    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--chunk", type=int, default=50_000, help="rows per chunk handed in (FlyHash, FlyNN)")
    extra.add_argument("--gbnn-chunk", type=int, default=250_000, help="probes per chunk handed in (GBNN)")
    extra.add_argument("--threads", type=int, default=1, help="task threads per GPU worker")
    extra.add_argument(
        "--gpus", type=int, default=None, help="Dask on 1, 2, 4, ... N GPUs (default N: all found)"
    )
    extra.add_argument(
        "--reader",
        choices=READERS,
        default="sknn",
        help="with --data-dir: read shards with sknn_gpu.io (default) or np.load + cupy.asarray",
    )
    extra.add_argument(
        "--rows", type=int, default=None, help="FlyHash/FlyNN rows (default 2M; 20M with --data-dir)"
    )
    extra.add_argument(
        "--probes", type=int, default=None, help="GBNN probes (default 6M; 60M with --data-dir)"
    )
    extra.add_argument("--stored", type=int, default=None, help="GBNN stored messages (default 50,000)")
    extra.add_argument("--data-dir", default=None, help="write .npy shards here once; the runs read them")
    extra.add_argument(
        "--shard-rows", type=int, default=None, help="rows per shard (default: the Dask block size)"
    )
    extra.add_argument(
        "--probe-shard-rows",
        type=int,
        default=None,
        help="GBNN probes per shard (default: the Dask block size)",
    )
    extra.add_argument("--torch-ref", type=int, default=None, help="reference rows of the PyTorch 1-NN peer")
    extra.add_argument("--report", default=None, help="save a Dask performance report per workload here")
    extra.add_argument("--repeat", type=int, default=None, help="timed runs per row (5; 3 quick)")
    extra.add_argument(
        "--workloads",
        type=lambda v: [w for w in v.split(",") if w],
        default=list(DISK_WORKLOADS),
        help="with --data-dir: which to run, a comma list of "
        + ", ".join(DISK_WORKLOADS)
        + " (default: all)",
    )
    own, rest = extra.parse_known_args(sys.argv[1:] if argv is None else argv)
    unknown = sorted(set(own.workloads) - set(DISK_WORKLOADS))
    if unknown:
        extra.error(f"--workloads: unknown {', '.join(unknown)} (choose from {', '.join(DISK_WORKLOADS)})")
    args = parse_args(__doc__.splitlines()[0], rest)
    print(environment_header() + "\n")
    try:
        import distributed  # noqa: F401
    except ImportError:
        print("dask[distributed] is not installed: nothing to measure")
        return
    gpu = cuda_available() and args.device != "cpu"
    if gpu:
        try:
            import dask_cuda  # noqa: F401
        except ImportError:
            print(
                "dask-cuda is not installed: one worker process per GPU, pinned by "
                "CUDA_VISIBLE_DEVICES (what LocalCUDACluster sets up)\n"
            )
    small = args.quick or not gpu
    size = QUICK if small else FULL
    own.stored = own.stored or size["stored"]
    own.torch_ref = own.torch_ref or size["disk_torch_ref" if own.data_dir else "torch_ref"]
    counts = worker_counts(gpu, own.gpus)
    repeat = own.repeat or (3 if small else 5)
    summary = Summary()
    if own.data_dir:
        rows = own.rows or size["disk_rows"]
        probes = own.probes or size["disk_probes"]
        run_disk(own.data_dir, rows, probes, size["hash"], gpu, counts, repeat, summary, own)
    else:
        chunk = 5_000 if small else own.chunk
        gchunk = 5_000 if small else own.gbnn_chunk
        run_in_memory_data(own.rows or size["rows"], chunk, size["hash"], gpu, counts, repeat, summary, own)
        run_gbnn(own.probes or size["probes"], gchunk, gpu, counts, repeat, summary, own, own.stored)
    summary.print()


if __name__ == "__main__":
    main()
