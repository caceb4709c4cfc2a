"""FlyNN defaults sweep: cross-validated accuracy of FlyNNClassifier on
scikit-learn's offline datasets (digits, iris, wine, breast_cancer; 5 stratified folds)
against the best of 1/3/5-NN (MinMax-scaled).

``--defaults`` (CPU, about 5 minutes on 2 cores) is the sweep behind today's defaults:
the encodings (``'thermometer'``, ``'population'``, ``'complement'``, ``None``) with the
filters' ``decay`` (``'relative'``, ``'count'``) and ``gamma``, at 8,192 cells reading at
most 16 inputs with k=256, then size variants of the thermometer. Every row gives the mean
gap to k-NN over 5 seeds (and its range), the accuracies, and the accuracy on the
synthetic FashionMNIST-shaped mixture of ``bench_flynn.py`` (784 sparse, noisy features;
1,000 queries) at 4,000 and 60,000 training rows, which shows whether a recipe survives
many near-zero features and a large training set. Encodings run on the raw features
(``input_range='fit'`` scales them); the raw hash runs after a ``MinMaxScaler``, as in the
papers. Then the defaults on digits over ten 70/30 splits (the issue's measure).
``--plot`` draws ``docs/user_guide/flynn_encodings.png`` from seed 0 (seconds).

The older modes searched the papers' FlyNN (raw features, ``gamma ** counts``; this
package's defaults before 2026-11-26) and the first encodings: the default mode over
expansion_factor x k x gamma; ``--wide`` over ``normalize`` x ``n_components`` x ``k`` x
``connection_sparsity`` x ``gamma``; ``--encodings`` over the ``'complement'`` and
``'population'`` encodings of ``MinMaxScaler(clip=True)`` features with ``gamma **
counts`` (about 10 minutes).
"""

import itertools
import sys
from pathlib import Path

# the repository root (for sknn_gpu) and benchmarks/ (for bench_flynn), from any working directory
sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1])]

import numpy as np
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
from sklearn.model_selection import StratifiedKFold, cross_val_score
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, MinMaxScaler

from sknn_gpu import FlyNNClassifier
from sknn_gpu.fly import PAPERS_FLYNN
from sknn_gpu.fly._encoding import encode

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

#: The papers' FlyNN (this package's defaults before 2026-11-26): what the older modes sweep.
PAPERS = PAPERS_FLYNN


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
        p = {**PAPERS, **params, "k": min(params["k"], m // 2)}
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
        p.update(input_range=(0, 1), decay="count", normalize=False)
        clf = FlyNNClassifier(encoding=encoding, **p, random_state=seed, device="cpu")
        accs[name] = cross_val_score(make_pipeline(MinMaxScaler(clip=True), clf), X, y, cv=cv).mean()
    return np.mean([knn[n] - accs[n] for n in data]), accs


def fmnist_like_accuracy(params, sizes=(4000, 60000), scaled=False):
    """Accuracy on bench_flynn's synthetic FashionMNIST-shaped mixture, 1,000 queries."""
    from bench_flynn import fmnist_like

    X, y = fmnist_like(max(sizes) + 1000, seed=2)
    Q, yq = X[-1000:], y[-1000:]
    out = []
    for n in sizes:
        clf = FlyNNClassifier(**params, random_state=0, device="cpu")
        if scaled:
            clf = make_pipeline(MinMaxScaler(), clf)
        out.append(float(np.mean(clf.fit(X[:n], y[:n]).predict(Q) == yq)))
    return out


def defaults_cv(seeds, scaled=False, **params):
    """Mean gap to k-NN over ``seeds`` and the mean accuracy per dataset."""
    runs = []
    for seed in seeds:
        accs = {}
        for name, (X, y) in data.items():
            clf = FlyNNClassifier(**params, random_state=seed, device="cpu")
            if scaled:
                clf = make_pipeline(MinMaxScaler(), clf)
            accs[name] = cross_val_score(clf, X, y, cv=cv).mean()
        runs.append((np.mean([knn[n] - accs[n] for n in data]), accs))
    gaps = [r[0] for r in runs]
    return gaps, {n: float(np.mean([r[1][n] for r in runs])) for n in data}


#: The rows of ``--defaults``: (label, parameters, whether a MinMaxScaler goes first).
DEFAULTS_GRID = [
    ("the papers' FlyNN (former defaults)", PAPERS, True),
    ("raw features, defaults' sizes and filters", dict(encoding=None), True),
    *[(f"thermometer, relative, gamma={g}", dict(gamma=g), False) for g in (0.03, 0.1, 0.3)],
    ("thermometer, count, gamma=0.3", dict(gamma=0.3, decay="count"), False),
    *[
        (f"population, relative, gamma={g}", dict(encoding="population", gamma=g), False)
        for g in (0.03, 0.1, 0.3)
    ],
    ("population, count, gamma=0.3", dict(encoding="population", gamma=0.3, decay="count"), False),
    ("complement, relative, gamma=0.1", dict(encoding="complement", gamma=0.1), False),
    ("thermometer, 16,384 cells", dict(n_components=16384), False),
    ("thermometer, k=128", dict(k=128), False),
    ("thermometer, k=512", dict(k=512), False),
]

if "--defaults" in sys.argv:
    from sklearn.model_selection import train_test_split

    for label, params, scaled in DEFAULTS_GRID:
        gaps, accs = defaults_cv(range(5), scaled=scaled, **params)
        fm = fmnist_like_accuracy(params, scaled=scaled)
        print(
            f"gap {np.mean(gaps):.4f} [{min(gaps):.4f}..{max(gaps):.4f}] {label:42s}",
            {n: round(a, 3) for n, a in accs.items()},
            f"fmnist-like 4k {fm[0]:.3f} 60k {fm[1]:.3f}",
            flush=True,
        )
    X, y = data["digits"]
    splits = [train_test_split(X, y, test_size=0.3, random_state=s) for s in range(10)]
    acc = [
        FlyNNClassifier(random_state=s, device="cpu").fit(a, c).score(b, d)
        for s, (a, b, c, d) in enumerate(splits)
    ]
    nn3 = [KNeighborsClassifier(3).fit(a, c).score(b, d) for a, b, c, d in splits]
    print(
        f"FlyNNClassifier() on raw digits, ten 70/30 splits: mean {np.mean(acc):.4f} "
        f"(min {min(acc):.4f}, max {max(acc):.4f}); 3-NN mean {np.mean(nn3):.4f}"
    )
    sys.exit(0)

if "--plot" in sys.argv:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = [*data, "FashionMNIST-like\n(60k rows)"]
    from bench_flynn import fmnist_like

    Xf, yf = fmnist_like(61000, seed=2)
    knn_fm = KNeighborsClassifier(1).fit(Xf[:60000], yf[:60000]).score(Xf[-1000:], yf[-1000:])
    bars = {"k-NN (best of 1, 3, 5; 1-NN on the mixture)": [*knn.values(), knn_fm]}
    for label, params, scaled in (
        ("FlyNN of the papers (former defaults)", PAPERS, True),
        (
            "FlyNN, encoding='population', decay='count', gamma=0.3",
            dict(encoding="population", gamma=0.3, decay="count"),
            False,
        ),
        ("FlyNN defaults: encoding='thermometer', decay='relative'", {}, False),
    ):
        _, accs = defaults_cv([0], scaled=scaled, **params)
        bars[label] = [*accs.values(), fmnist_like_accuracy(params, sizes=(60000,), scaled=scaled)[0]]
    for label, accs in bars.items():
        per = ", ".join(f"{n.split(chr(10))[0]} {a:.3f}" for n, a in zip(sets, accs, strict=True))
        print(f"{label}: {per}")
    fig, ax = plt.subplots(figsize=(9.5, 4.6))
    width = 0.8 / len(bars)
    colors = ["0.3", "tab:red", "tab:orange", "tab:blue"]
    for i, (label, accs) in enumerate(bars.items()):
        xs = np.arange(len(sets)) + (i - (len(bars) - 1) / 2) * width
        ax.bar(xs, accs, width, label=label, color=colors[i])
    ax.set_xticks(np.arange(len(sets)), sets)
    ax.set_ylim(0.4, 1.0)
    ax.set_ylabel("accuracy (5-fold CV; the mixture: 1,000 queries)")
    ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, frameon=False)
    ax.set_title(
        "FlyNN against k-NN: scikit-learn's offline datasets and a FashionMNIST-shaped mixture", fontsize=9.5
    )
    fig.tight_layout()
    out = Path(__file__).resolve().parents[2] / "docs" / "user_guide" / "flynn_encodings.png"
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
