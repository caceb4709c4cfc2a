"""
Scaling out with Dask: hash and classify more rows than one device holds
========================================================================

Every estimator takes Dask arrays chunked by rows. Here a FlyNN classifier is fitted
on a stream of row blocks that are made on the workers and never gathered anywhere:
each worker hashes and counts its blocks, and only count tables (classes × Kenyon
cells integers) travel, summed up a tree. Prediction, scoring and FlyHash codes run
block by block where the data are.

With a GPU and ``dask-cuda`` installed the same code runs on a
:class:`dask_cuda.LocalCUDACluster` (one worker per GPU, CuPy blocks) with 60 million
rows of 784 features: 188 GB of float32, more than any one GPU holds. Without them —
as when this page is built — it uses two CPU worker processes and 120,000 rows.
Dask's text progress bar shows the work as it goes.
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

import dask
import dask.array as da
import matplotlib.pyplot as plt
import numpy as np
from distributed import Client, LocalCluster, progress

from sknn_gpu import FlyHashTransformer, FlyNNClassifier
from sknn_gpu.device import cuda_available

# SKNN_GPU_EXAMPLES_SMALL=1 asks for a quick run: 8,000 rows, workers in this process
SMALL = os.environ.get("SKNN_GPU_EXAMPLES_SMALL", "") not in ("", "0")

N_CLASSES, N_FEATURES = 10, 784


def make_block(i, n, gpu):
    """Row block ``i``: ``n`` noisy samples of 10 class prototypes (made on its worker)."""
    xp = np
    if gpu:
        import cupy as xp
    protos = xp.asarray(np.random.default_rng(0).random((N_CLASSES, N_FEATURES), dtype=np.float32))
    rng = xp.random.default_rng(1 + i)  # on the GPU, CuPy's generator makes the block there
    y = rng.integers(0, N_CLASSES, size=n)
    X = protos[y] + xp.float32(0.7) * rng.standard_normal((n, N_FEATURES), dtype=np.float32)
    return X, y


def dask_dataset(n_blocks, rows, gpu, offset=0):
    """A lazy (X, y) pair of ``n_blocks`` blocks: nothing is made until a worker needs it."""
    meta = (__import__("cupy") if gpu else np).empty((0, N_FEATURES), dtype=np.float32)
    blocks = [dask.delayed(make_block, nout=2)(offset + i, rows, gpu) for i in range(n_blocks)]
    X = da.concatenate(
        [da.from_delayed(b[0], (rows, N_FEATURES), dtype=np.float32, meta=meta) for b in blocks]
    )
    y = da.concatenate([da.from_delayed(b[1], (rows,), dtype=np.int64, meta=meta[:, 0]) for b in blocks])
    return X, y


def start_cluster():
    if cuda_available() and not SMALL:
        try:
            from dask_cuda import LocalCUDACluster

            return LocalCUDACluster(threads_per_worker=2, dashboard_address=None), True
        except ImportError:
            pass
    # two worker processes (a quick run keeps them in this process)
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=not SMALL, dashboard_address=None)
    return cluster, False


def main():
    cluster, gpu = start_cluster()
    n_blocks, rows = (600, 100_000) if gpu else (6, 20_000)
    if SMALL:
        n_blocks, rows = 4, 2_000
    with cluster, Client(cluster) as client:
        n_workers = len(client.scheduler_info()["workers"])
        print(f"{n_workers} {'GPU' if gpu else 'CPU'} workers; {n_blocks * rows:,} training rows")
        X, y = dask_dataset(n_blocks, rows, gpu)
        clf = FlyNNClassifier(n_components=2048, k=64, random_state=0, device="cuda" if gpu else "cpu")
        clf.fit(X, y)  # counts per block on the workers, summed in a tree: one table returns
        print("count table on the client:", clf.counts_.shape, clf.counts_.dtype)

        X_test, y_test = dask_dataset(max(2, n_blocks // 20), rows, gpu, offset=10**6)
        pred = clf.predict(X_test).persist()  # lazily, block by block, kept on the workers
        progress(pred, notebook=False)
        accuracy = float((pred == y_test).mean().compute())
        print(f"\naccuracy on {X_test.shape[0]:,} held-out rows: {accuracy:.3f}")

        # FlyHash codes stay on the workers; reduce them to how often each cell fires
        hasher = FlyHashTransformer(n_components=512, k=16, output="dense", random_state=0)
        hasher.set_params(device="cuda" if gpu else "cpu").fit(X_test)
        usage = hasher.transform(X_test).sum(axis=0, dtype=np.int64).compute()
    usage = np.asarray(usage.get() if hasattr(usage, "get") else usage)
    fig, ax = plt.subplots(figsize=(7, 2.6))
    ax.bar(np.arange(usage.size), usage / X_test.shape[0], width=1.0, color="tab:blue")
    ax.axhline(16 / 512, color="k", lw=0.8, ls="--", label="k / m (uniform use)")
    ax.set(xlabel="Kenyon cell", ylabel="fraction of rows", title="FlyHash winners over the held-out rows")
    ax.legend(loc="upper right")
    fig.tight_layout()
    # sphinx_gallery_start_ignore
    save_figures()
    # sphinx_gallery_end_ignore
    plt.show()


if __name__ == "__main__":
    main()
