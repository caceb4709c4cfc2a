"""
Federated FlyNN in one round, with parties as separate processes
================================================================

Three parties each hold a non-IID share of the digits (each sees mostly its own
digits). Every party runs in its own process, fits a
:class:`~sknn_gpu.fly.FlyNNClassifier` on its data only, and sends its counts back
once, as bytes in a safe format (:meth:`~sknn_gpu.fly.FlyNNClassifier.export_counts`:
plain arrays and JSON, never a pickle, so reading another party's file runs none of
its code). The server reads them with :meth:`~sknn_gpu.fly.FlyNNClassifier.from_counts`
and merges them with :func:`~sknn_gpu.fly.merge_flynn`: the counts add up, so the
merged model is bit-identical to a model fitted on the pooled data, which no one
ever saw.

The parties agree beforehand, in public, on the hashing parameters, an integer
``random_state`` (so they draw the same projection) and the range of the features
that the encoding tiles (``input_range``; digits' pixels are 0..16). In a private
variant each party privatises its counts first
(:meth:`~sknn_gpu.fly.FlyNNClassifier.privatize`), so what leaves the party is
epsilon-differentially private; the noise comes from each party's operating-system
entropy, never from a seed (the shared ``random_state`` is public and only draws the
projection). The figure shows each party's accuracy alone beside the merged models'.
"""

# %%

# sphinx_gallery_start_ignore
# as a script: figures saved to one folder, a missing package named (examples/_helpers.py)
try:
    from _helpers import require, save_figures
except ImportError:  # this file alone, e.g. downloaded from the gallery: figures not saved
    require = save_figures = lambda *modules: False
require("matplotlib")
# sphinx_gallery_end_ignore
import io
from concurrent.futures import ProcessPoolExecutor

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from sknn_gpu.fly import FlyNNClassifier, merge_flynn

# parties share the projection (random_state), the range the encoding tiles and the winners
# per code: an integer k, so that no party's choice depends on its own number of rows (and a
# private release reveals nothing of it)
PARAMS = dict(input_range=(0, 16), k=512, random_state=0, device="cpu")


def party(X, y, epsilon=None):
    """Runs in a separate process: fit on local data, optionally privatise, send bytes."""
    clf = FlyNNClassifier(**PARAMS).fit(X, y)
    if epsilon is not None:
        clf = clf.privatize(epsilon, n_released=32)
    out = io.BytesIO()
    clf.export_counts(out)  # counts, classes, parameters and range: an .npz, no pickle
    return out.getvalue()


def load(blob):
    """What the server does with a party's bytes: read them without unpickling anything."""
    return FlyNNClassifier.from_counts(io.BytesIO(blob))


def split_non_iid(y, n_parties, rng):
    """Each party gets 80% of 'its' digits and a thin slice of the others."""
    owner = (y % n_parties).astype(int)
    stray = rng.random(len(y)) < 0.2
    owner[stray] = rng.integers(0, n_parties, size=stray.sum())
    return [np.flatnonzero(owner == p) for p in range(n_parties)]


def main():
    X, y = load_digits(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
    shares = split_non_iid(y_train, 3, np.random.default_rng(0))
    for p, idx in enumerate(shares):
        print(
            f"party {p}: {len(idx)} samples, class counts {np.bincount(y_train[idx], minlength=10).tolist()}"
        )

    with ProcessPoolExecutor(max_workers=3) as pool:  # one process per party, one round
        blobs = list(pool.map(party, [X_train[i] for i in shares], [y_train[i] for i in shares]))
        private_blobs = list(
            pool.map(party, [X_train[i] for i in shares], [y_train[i] for i in shares], [8.0] * 3)
        )
    print(f"bytes sent per party: {[len(b) for b in blobs]}")

    merged = merge_flynn([load(b) for b in blobs])
    pooled = FlyNNClassifier(**PARAMS).fit(X_train, y_train)
    print("merged counts == pooled counts:", np.array_equal(merged.counts_, pooled.counts_))
    print(f"merged accuracy {merged.score(X_test, y_test):.3f}, pooled {pooled.score(X_test, y_test):.3f}")
    accuracy = {}
    for p, b in enumerate(blobs):
        accuracy[f"party {p}\nalone"] = acc = load(b).score(X_test, y_test)
        print(f"party {p} alone: accuracy {acc:.3f}")
    private = merge_flynn([load(b) for b in private_blobs])
    acc = private.score(X_test, y_test)
    print(
        f"merged from epsilon={private.dp_epsilon_:g} private releases (32 counts per class): "
        f"accuracy {acc:.3f}"
    )
    accuracy["merged\n(= pooled)"] = merged.score(X_test, y_test)
    accuracy[f"merged private\nepsilon={private.dp_epsilon_:g}"] = acc

    fig, ax = plt.subplots(figsize=(7, 3.5))
    colors = ["tab:gray"] * len(blobs) + ["tab:blue", "tab:orange"]
    bars = ax.bar(list(accuracy), list(accuracy.values()), color=colors)
    ax.bar_label(bars, fmt="%.3f")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("test accuracy")
    ax.set_title("Federated FlyNN on digits: three non-IID parties, one round")
    fig.tight_layout()
    # sphinx_gallery_start_ignore
    save_figures()
    # sphinx_gallery_end_ignore
    plt.show()


if __name__ == "__main__":
    main()
