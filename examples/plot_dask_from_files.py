"""
Scaling out from files: ``.npy`` shards read by the workers
===========================================================

A user's data live in files. Here they are ``.npy`` shards, one block of rows each,
and :func:`sknn_gpu.io.read_npy_shards` makes them one Dask array whose blocks every
worker reads itself (on a ``dask_cuda`` cluster straight to its GPU, through pinned
staging buffers; only the files' headers are read here). Then the whole pipeline
runs where the data are: a FlyHash transform, a FlyNN fit whose count tables are
summed up a tree on the workers, and a prediction that stays on the workers until
it is reduced to one accuracy. Only the count table, the fitted hash and a few
numbers cross to this process.

The workers' transfer logs say how many bytes moved between them and to the client
during each step: what a multi-host cluster sends over its network.

With a GPU and ``dask-cuda`` installed the cluster is a
:class:`dask_cuda.LocalCUDACluster` (one worker per GPU); without them, as when this
page is built, it is two CPU worker processes.
"""

# %%

# sphinx_gallery_start_ignore
# as a script: figures saved to one folder, a missing package named (examples/_helpers.py)
try:
    from _helpers import require, save_figures
except ImportError:  # this file alone, e.g. downloaded from the gallery: figures not saved
    require = save_figures = lambda *modules: False
require("dask", "distributed", "matplotlib")
# sphinx_gallery_end_ignore
import os
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from distributed import Client, LocalCluster

from sknn_gpu import FlyHashTransformer, FlyNNClassifier
from sknn_gpu.device import cuda_available
from sknn_gpu.io import read_npy_shards

# SKNN_GPU_EXAMPLES_SMALL=1 asks for a quick run: 12,000 rows, workers in this process
SMALL = os.environ.get("SKNN_GPU_EXAMPLES_SMALL", "") not in ("", "0")

N_CLASSES, N_FEATURES = 10, 784


def write_shards(folder, n_shards, rows):
    """Write ``n_shards`` shards of noisy class prototypes: ``X_00000.npy``, ``y_00000.npy``, ...
    (your data are already on disk; this makes some)."""
    protos = np.random.default_rng(0).random((N_CLASSES, N_FEATURES), dtype=np.float32)
    for i in range(n_shards):
        rng = np.random.default_rng(1 + i)
        y = rng.integers(0, N_CLASSES, size=rows)
        X = protos[y] + np.float32(0.7) * rng.standard_normal((rows, N_FEATURES), dtype=np.float32)
        np.save(folder / f"X_{i:05d}.npy", X)
        np.save(folder / f"y_{i:05d}.npy", y)


def moved(client):
    """Bytes the workers have sent (to each other and to clients) and received from each other."""

    def count(dask_worker):
        incoming = sum(t["total"] for t in dask_worker.transfer_incoming_log)
        return dask_worker.transfer_outgoing_bytes_total, incoming

    sent = client.run(count).values()
    return sum(s for s, _ in sent), sum(i for _, i in sent)


def start_cluster():
    if cuda_available() and not SMALL:
        try:
            from dask_cuda import LocalCUDACluster

            return LocalCUDACluster(dashboard_address=None), True
        except ImportError:
            pass
    # two worker processes (a quick run keeps them in this process)
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=not SMALL, dashboard_address=None)
    return cluster, False


def main():
    cluster, gpu = start_cluster()
    n_shards, rows = (40, 250_000) if gpu else (8, 10_000)
    if SMALL:
        n_shards, rows = 6, 2_000
    device = "cuda" if gpu else "cpu"
    steps, traffic = [], []
    with tempfile.TemporaryDirectory() as tmp, cluster, Client(cluster) as client:
        folder = Path(tmp)
        write_shards(folder, n_shards, rows)
        X = read_npy_shards(str(folder / "X_*.npy"), device=device)  # CuPy blocks on GPU workers
        y = read_npy_shards(str(folder / "y_*.npy"))  # labels stay NumPy
        n_train = (n_shards - 2) * rows  # the last two shards are held out
        X_train, y_train, X_test, y_test = X[:n_train], y[:n_train], X[n_train:], y[n_train:]
        print(f"{len(client.scheduler_info()['workers'])} workers; {n_shards} shards of {rows:,} rows")

        def step(name, fn):
            before = moved(client)
            out = fn()
            after = moved(client)
            between = after[1] - before[1]
            steps.append(name)
            traffic.append((between, after[0] - before[0] - between))
            return out

        # FlyHash codes stay on the workers: reduce them to how often each cell fires
        hasher = FlyHashTransformer(n_components=512, k=16, output="dense", random_state=0, device=device)
        hasher.fit(X_train)  # reads only the width
        usage = step(
            "FlyHash transform", lambda: hasher.transform(X_train).sum(axis=0, dtype=np.int64).compute()
        )
        clf = FlyNNClassifier(n_components=2048, k=64, random_state=0, device=device)
        step("FlyNN fit", lambda: clf.fit(X_train, y_train))  # one count table comes back
        accuracy = step("FlyNN predict", lambda: float((clf.predict(X_test) == y_test).mean().compute()))
    print(f"count table on the client: {clf.counts_.shape}; held-out accuracy {accuracy:.3f}")
    for name, (between, to_client) in zip(steps, traffic, strict=True):
        mb = f"{between / 1e6:7.2f} MB between workers, {to_client / 1e6:7.2f} MB to this process"
        print(f"{name:18s} moved {mb}")

    usage = np.asarray(usage.get() if hasattr(usage, "get") else usage)
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(9, 2.8), gridspec_kw={"width_ratios": [2, 1]})
    ax0.bar(np.arange(usage.size), usage / n_train, width=1.0, color="tab:blue")
    ax0.axhline(16 / 512, color="k", lw=0.8, ls="--", label="k / m (uniform use)")
    ax0.set(xlabel="Kenyon cell", ylabel="fraction of rows", title="FlyHash winners over the training shards")
    ax0.legend(loc="upper right")
    pos = np.arange(len(steps))
    ax1.barh(pos - 0.2, [b / 1e6 for b, _ in traffic], height=0.4, label="between workers")
    ax1.barh(pos + 0.2, [c / 1e6 for _, c in traffic], height=0.4, label="to this process")
    ax1.set_yticks(pos, steps)
    ax1.invert_yaxis()
    ax1.set(xlabel="MB", title="bytes on the network")
    ax1.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    # sphinx_gallery_start_ignore
    save_figures()
    # sphinx_gallery_end_ignore
    plt.show()


if __name__ == "__main__":
    main()
