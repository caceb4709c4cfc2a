"""
Federated FlyNN on a Dask cluster
=================================

:func:`~sknn_gpu.fly.fit_federated` fits one FlyNN party per shard on the Dask
worker that holds it and brings back only the count tables, which it sums. The
result equals the model fitted on all shards together. Prediction on a Dask
array runs block by block on the workers.

With ``epsilon`` every party privatises its counts on its own worker before they
leave it (noise from the worker's operating-system entropy), over an input range
fixed in public beforehand. That protects the parties' data from whoever receives the
merged model, not from whoever operates the cluster: the client and the scheduler can
run any code on every worker (the FlyNN guide's trust model).

This example starts a small in-process :class:`distributed.LocalCluster`; point
a :class:`distributed.Client` at a real scheduler to run the same code across
machines (each with or without a GPU: ``device='auto'`` picks per worker). The figure
shows each shard's accuracy alone beside the federated and the private models'.
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
import dask.array as da
import matplotlib.pyplot as plt
import numpy as np
from distributed import Client, LocalCluster
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from sknn_gpu.fly import FlyNNClassifier, fit_federated


def main():
    X, y = load_digits(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
    # input_range='fit' (the default): the shards first send their features' minima and
    # maxima, so every party encodes over the pooled range, as one fit on all rows would
    params = dict(random_state=0, device="cpu")

    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        # the shards live on the workers (scattered here; in practice loaded there)
        parts = np.array_split(np.arange(len(y_train)), 4)
        shards = client.scatter([(X_train[i], y_train[i]) for i in parts])
        clf = fit_federated(client, shards, **params)

        pooled = FlyNNClassifier(**params).fit(X_train, y_train)
        print("federated counts == pooled counts:", np.array_equal(clf.counts_, pooled.counts_))

        # the same from a dask array: every row block is one party
        dX = da.from_array(X_train, chunks=(300, -1))
        dy = da.from_array(y_train, chunks=300)
        clf2 = fit_federated(client, (dX, dy), **params)
        print("from dask arrays:", np.array_equal(clf2.counts_, pooled.counts_))

        # block-wise prediction on the cluster
        pred = clf.predict(da.from_array(X_test, chunks=(100, -1))).compute()
        print(f"accuracy {np.mean(pred == y_test):.3f}")

        # private: each party releases 32 noisy counts per class; the range is public
        # (digits' pixels are 0..16), never the shards' own minima and maxima
        private = fit_federated(
            client, shards, epsilon=16.0, n_released=32, input_range=(0, 16), k=512, **params
        )
        acc = private.score(X_test, y_test)
        print(f"private, epsilon={private.dp_epsilon_:g} for every sample: accuracy {acc:.3f}")

    # what each party would reach on its own shard, beside the federated models
    accuracy = {
        f"shard {s}\nalone": FlyNNClassifier(**params).fit(X_train[i], y_train[i]).score(X_test, y_test)
        for s, i in enumerate(parts)
    }
    accuracy["federated\n(= pooled)"] = clf.score(X_test, y_test)
    accuracy[f"private\nepsilon={private.dp_epsilon_:g}"] = acc
    fig, ax = plt.subplots(figsize=(7, 3.5))
    colors = ["tab:gray"] * len(parts) + ["tab:blue", "tab:orange"]
    bars = ax.bar(list(accuracy), list(accuracy.values()), color=colors)
    ax.bar_label(bars, fmt="%.3f")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("test accuracy")
    ax.set_title("fit_federated on a Dask cluster: four shards of digits")
    fig.tight_layout()
    # sphinx_gallery_start_ignore
    save_figures()
    # sphinx_gallery_end_ignore
    plt.show()


if __name__ == "__main__":
    main()
