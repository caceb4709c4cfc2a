"""FlyNN defaults sweep (issue 13 item 3): cross-validated accuracy of FlyNNClassifier on
scikit-learn's offline datasets (digits, iris, wine, breast_cancer; MinMax-scaled, 5
stratified folds) over expansion_factor x k x gamma, against the best of 1/3/5-NN.

Prints kNN's accuracy per dataset, kNN's on rows with their offset and scale removed
(what FlyHash's winners can see), the 8 settings with the smallest mean gap to kNN, and
today's defaults. CPU, about a minute: ``python benchmarks/sweep_flynn_defaults.py``.
``--wide`` sweeps the other axes instead: ``normalize`` x ``n_components`` (the default
``20 * n_features``, or 2,000 / 4,000 / 8,000 cells) x ``k`` x ``connection_sparsity``
(0.1, 0.3) x ``gamma`` (0.5, 0.8), and prints the 12 best settings.
"""

import itertools
import sys

import numpy as np
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
from sklearn.model_selection import StratifiedKFold, cross_val_score
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, MinMaxScaler

from sknn_gpu import FlyNNClassifier

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
