"""FlyNN defaults sweep (issue 13 item 3): cross-validated accuracy of FlyNNClassifier on
scikit-learn's offline datasets (digits, iris, wine, breast_cancer; MinMax-scaled, 5
stratified folds) over expansion_factor x k x gamma, against the best of 1/3/5-NN.

Prints kNN's accuracy per dataset, kNN's on rows with their offset and scale removed
(what FlyHash's winners can see), the 8 settings with the smallest mean gap to kNN, and
today's defaults. CPU, about a minute: ``python benchmarks/sweep_flynn_defaults.py``.
``--wide`` sweeps the other axes instead: ``normalize`` x ``n_components`` (the default
``20 * n_features``, or 2,000 / 4,000 / 8,000 cells) x ``k`` x ``connection_sparsity``
(0.1, 0.3) x ``gamma`` (0.5, 0.8), and prints the 12 best settings.
``--encodings`` cross-validates the input encodings (``encoding='complement'`` and
``'population'``, ``MinMaxScaler(clip=True)``, ``normalize=False``) over
``n_components`` (8,192 / 16,384) x ``connection_sparsity`` (0.05 / 0.1 / 0.2) x ``k``
(64 / 128 / 256) x ``gamma`` (0.5 / 0.8) with seed 0, then the 4 best of each
encoding over 5 seeds (mean and range); about 10 minutes on 2 cores. ``--plot`` draws
``docs/user_guide/flynn_encodings.png`` (accuracy per dataset of k-NN, of k-NN on what
the default hash sees, of the defaults and of both encodings' recipes; seconds).
"""

import itertools
import sys
from pathlib import Path

import numpy as np
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
from sklearn.model_selection import StratifiedKFold, cross_val_score
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, MinMaxScaler

from sknn_gpu import FlyNNClassifier
from sknn_gpu.fly._flynn import encode

data = {
    "digits": load_digits(return_X_y=True),
    "iris": load_iris(return_X_y=True),
    "wine": load_wine(return_X_y=True),
    "breast_cancer": load_breast_cancer(return_X_y=True),
}
cv = StratifiedKFold(5, shuffle=True, random_state=0)
knn = {}
for name, (X, y) in data.items():
    knn[name] = max(
        cross_val_score(make_pipeline(MinMaxScaler(), KNeighborsClassifier(k)), X, y, cv=cv).mean()
        for k in (1, 3, 5)
    )
print("knn", {k: round(v, 3) for k, v in knn.items()})


def _row_centred_unit(X):
    X = X - X.mean(axis=1, keepdims=True)
    norm = np.linalg.norm(X, axis=1, keepdims=True)
    return X / np.where(norm == 0, 1.0, norm)


# What FlyHash can see at best: every Kenyon cell sums the same number of inputs, so its
# winners ignore each row's offset and scale; k-NN on rows with both removed bounds
# what a hash of those rows can keep.
def _knn_seen(X, y, k):
    seen = make_pipeline(MinMaxScaler(), FunctionTransformer(_row_centred_unit), KNeighborsClassifier(k))
    return cross_val_score(seen, X, y, cv=cv).mean()


knn_seen = {name: max(_knn_seen(X, y, k) for k in (1, 3, 5)) for name, (X, y) in data.items()}
print(
    "knn on row-centred unit rows (FlyHash's view)",
    {k: round(v, 3) for k, v in knn_seen.items()},
    f"mean gap to knn {np.mean([knn[n] - knn_seen[n] for n in data]):.3f}",
)


def cv_accuracy(**params):
    accs = {}
    for name, (X, y) in data.items():
        m = params.get("n_components") or int(params.get("expansion_factor", 20.0) * X.shape[1])
        p = {**params, "k": min(params["k"], m // 2)}
        clf = make_pipeline(MinMaxScaler(), FlyNNClassifier(**p, random_state=0, device="cpu"))
        accs[name] = cross_val_score(clf, X, y, cv=cv).mean()
    return np.mean([knn[n] - accs[n] for n in data]), accs


def show(gap, label, accs):
    print(f"gap {gap:.3f} {label} ", {n: round(a, 3) for n, a in accs.items()})


def encoding_cv(encoding, seed, **params):
    """Mean gap to k-NN and accuracies of an encoding (features MinMax-scaled, clipped)."""
    accs = {}
    for name, (X, y) in data.items():
        p = {**params, "k": min(params["k"], params["n_components"] // 2)}
        clf = FlyNNClassifier(encoding=encoding, **p, normalize=False, random_state=seed, device="cpu")
        accs[name] = cross_val_score(make_pipeline(MinMaxScaler(clip=True), clf), X, y, cv=cv).mean()
    return np.mean([knn[n] - accs[n] for n in data]), accs


if "--plot" in sys.argv:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recipe = dict(connection_sparsity=0.2, gamma=0.5)
    bars = {
        "k-NN": knn,
        "k-NN on centred unit rows (what the default hash sees)": knn_seen,
        "FlyNN defaults": cv_accuracy(expansion_factor=20.0, k=32, gamma=0.5)[1],
        "FlyNN, encoding='complement', 8,192 cells, k=256": encoding_cv(
            "complement", 0, n_components=8192, k=256, **recipe
        )[1],
        "FlyNN, encoding='population', 16,384 cells, k=128": encoding_cv(
            "population", 0, n_components=16384, k=128, **recipe
        )[1],
    }
    for label, accs in bars.items():
        per = ", ".join(f"{n} {a:.3f}" for n, a in accs.items())
        print(f"{label}: {per}; mean {np.mean([*accs.values()]):.3f}")
    fig, ax = plt.subplots(figsize=(9, 4.6))
    width = 0.8 / len(bars)
    colors = ["0.25", "0.6", "tab:red", "tab:orange", "tab:blue"]
    for i, (label, accs) in enumerate(bars.items()):
        xs = np.arange(len(data)) + (i - (len(bars) - 1) / 2) * width
        ax.bar(xs, [accs[n] for n in data], width, label=label, color=colors[i])
    ax.set_xticks(np.arange(len(data)), list(data))
    ax.set_ylim(0.75, 1.0)
    ax.set_ylabel("5-fold accuracy")
    ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, frameon=False)
    ax.set_title("FlyNN against k-NN on scikit-learn's offline datasets (CPU, seed 0)", fontsize=10)
    fig.tight_layout()
    out = Path(__file__).resolve().parents[1] / "docs" / "user_guide" / "flynn_encodings.png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")
    sys.exit(0)

if "--encodings" in sys.argv:
    for encoding in ("complement", "population"):
        # what the hash can see of the encoded rows at best: k-NN on them, centred and unit
        seen = FunctionTransformer(lambda Z, e=encoding: _row_centred_unit(encode(Z, e)))
        ceiling = {
            name: max(
                cross_val_score(
                    make_pipeline(MinMaxScaler(clip=True), seen, KNeighborsClassifier(k)), X, y, cv=cv
                ).mean()
                for k in (1, 3, 5)
            )
            for name, (X, y) in data.items()
        }
        print(
            f"knn on encoding={encoding!r} rows, centred and unit (the hash's view)",
            {n: round(v, 3) for n, v in ceiling.items()},
            f"mean gap to knn {np.mean([knn[n] - ceiling[n] for n in data]):.4f}",
            flush=True,
        )
        grid = itertools.product([8192, 16384], [0.05, 0.1, 0.2], [64, 128, 256], [0.5, 0.8])
        res = []
        for m, cs, k, g in grid:
            p = dict(n_components=m, connection_sparsity=cs, k=k, gamma=g)
            res.append((encoding_cv(encoding, 0, **p)[0], p))
        res.sort(key=lambda r: r[0])
        for _, p in res[:4]:
            runs = [encoding_cv(encoding, seed, **p) for seed in range(5)]
            gaps = [r[0] for r in runs]
            mean_accs = {n: np.mean([r[1][n] for r in runs]) for n in data}
            lo = {n: min(r[1][n] for r in runs) for n in data}
            label = f"encoding={encoding!r} " + " ".join(f"{a}={v}" for a, v in p.items())
            print(
                f"gap {np.mean(gaps):.3f} [{min(gaps):.3f}..{max(gaps):.3f}] {label} ",
                {n: f"{mean_accs[n]:.3f} (min {lo[n]:.3f})" for n in data},
                flush=True,
            )
    sys.exit(0)

if "--wide" in sys.argv:
    grid = itertools.product(
        [True, False], [None, 2000, 4000, 8000], [16, 32, 64, 128], [0.1, 0.3], [0.5, 0.8]
    )
    res = []
    for norm, m, k, cs, g in grid:
        gap, accs = cv_accuracy(normalize=norm, n_components=m, k=k, connection_sparsity=cs, gamma=g)
        res.append((gap, f"normalize={norm} n_components={m} k={k} connection_sparsity={cs} gamma={g}", accs))
    res.sort(key=lambda r: r[0])
    for row in res[:12]:
        show(*row)
    sys.exit(0)

res = []
for ef, k, g in itertools.product([10, 20, 40], [16, 32, 64, 128], [0.0, 0.5, 0.8]):
    gap, accs = cv_accuracy(expansion_factor=ef, k=k, gamma=g)
    res.append((gap, ef, k, g, accs))
res.sort(key=lambda r: r[0])
for gap, ef, k, g, accs in res[:8] + [r for r in res if r[1] == 20 and r[2] == 32 and r[3] == 0.5]:
    show(gap, f"ef={ef} k={k} gamma={g}", accs)
