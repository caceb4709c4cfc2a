"""FlyNN defaults sweep (issue 13 item 3): cross-validated accuracy of FlyNNClassifier on
scikit-learn's offline datasets (digits, iris, wine, breast_cancer; MinMax-scaled, 5
stratified folds) over expansion_factor x k x gamma, against the best of 1/3/5-NN.

Prints kNN's accuracy per dataset, the 8 settings with the smallest mean gap to kNN, and
today's defaults. CPU, about a minute: ``python benchmarks/sweep_flynn_defaults.py``.
"""

import itertools

import numpy as np
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
from sklearn.model_selection import StratifiedKFold, cross_val_score
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler

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
res = []
for ef, k, g in itertools.product([10, 20, 40], [16, 32, 64, 128], [0.0, 0.5, 0.8]):
    accs = {}
    for name, (X, y) in data.items():
        m = int(ef * X.shape[1])
        kk = min(k, m // 2)
        clf = make_pipeline(
            MinMaxScaler(), FlyNNClassifier(expansion_factor=ef, k=kk, gamma=g, random_state=0, device="cpu")
        )
        accs[name] = cross_val_score(clf, X, y, cv=cv).mean()
    gap = np.mean([knn[n] - accs[n] for n in data])
    res.append((gap, ef, k, g, accs))
res.sort(key=lambda r: r[0])
for gap, ef, k, g, accs in res[:8] + [r for r in res if r[1] == 20 and r[2] == 32 and r[3] == 0.5]:
    print(f"gap {gap:.3f} ef={ef} k={k} gamma={g} ", {n: round(a, 3) for n, a in accs.items()})
