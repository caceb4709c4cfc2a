"""Draw flynn_encodings.png for the FlyNN guide: cross-validated accuracy per dataset of
k-NN, of k-NN on what the default hash can see, of FlyNN's defaults and of the two
encodings' recipes.

Run from the repository root: ``python docs/user_guide/flynn_encodings.py`` (CPU, about
a minute). Every bar is computed here with the protocol of
``benchmarks/sweep_flynn_defaults.py`` (features MinMax-scaled, clipped; 5 stratified
folds; k-NN is the best of 1/3/5-NN; FlyNN seed 0).
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine  # noqa: E402
from sklearn.model_selection import StratifiedKFold, cross_val_score  # noqa: E402
from sklearn.neighbors import KNeighborsClassifier  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import FunctionTransformer, MinMaxScaler  # noqa: E402

from sknn_gpu import FlyNNClassifier  # noqa: E402

data = {
    "digits": load_digits(return_X_y=True),
    "iris": load_iris(return_X_y=True),
    "wine": load_wine(return_X_y=True),
    "breast_cancer": load_breast_cancer(return_X_y=True),
}
cv = StratifiedKFold(5, shuffle=True, random_state=0)


def centred_unit(X):
    X = X - X.mean(axis=1, keepdims=True)
    norm = np.linalg.norm(X, axis=1, keepdims=True)
    return X / np.where(norm == 0, 1.0, norm)


def score(make):
    return {name: cross_val_score(make(), X, y, cv=cv).mean() for name, (X, y) in data.items()}


def knn(view=None):
    steps = [MinMaxScaler(clip=True)] + ([FunctionTransformer(view)] if view else [])
    return {
        name: max(
            cross_val_score(make_pipeline(*steps, KNeighborsClassifier(k)), X, y, cv=cv).mean()
            for k in (1, 3, 5)
        )
        for name, (X, y) in data.items()
    }


def flynn(**params):
    return score(
        lambda: make_pipeline(
            MinMaxScaler(clip=True), FlyNNClassifier(random_state=0, device="cpu", **params)
        )
    )


recipe = dict(n_components=16384, connection_sparsity=0.2, normalize=False)
bars = {
    "k-NN": knn(),
    "k-NN on centred unit rows (what the default hash sees)": knn(centred_unit),
    "FlyNN defaults": flynn(),
    "FlyNN, encoding='complement', 8,192 cells, k=256": flynn(
        encoding="complement", **{**recipe, "n_components": 8192}, k=256
    ),
    "FlyNN, encoding='population', 16,384 cells, k=128": flynn(encoding="population", **recipe, k=128),
}
for label, accs in bars.items():
    print(
        f"{label}: "
        + ", ".join(f"{n} {a:.3f}" for n, a in accs.items())
        + f"; mean {np.mean(list(accs.values())):.3f}"
    )

fig, ax = plt.subplots(figsize=(9, 4.6))
names = list(data)
width = 0.8 / len(bars)
colors = ["0.25", "0.6", "tab:red", "tab:orange", "tab:blue"]
for i, (label, accs) in enumerate(bars.items()):
    xs = np.arange(len(names)) + (i - (len(bars) - 1) / 2) * width
    ax.bar(xs, [accs[n] for n in names], width, label=label, color=colors[i])
ax.set_xticks(np.arange(len(names)), names)
ax.set_ylim(0.75, 1.0)
ax.set_ylabel("5-fold accuracy")
ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, frameon=False)
ax.set_title("FlyNN against k-NN on scikit-learn's offline datasets (CPU, seed 0)", fontsize=10)
fig.tight_layout()
out = Path(__file__).with_name("flynn_encodings.png")
fig.savefig(out, dpi=110)
print(f"wrote {out}")
