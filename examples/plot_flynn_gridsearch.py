"""
FlyNN on digits: accuracy over gamma × k, and the price of privacy
==================================================================

:class:`~sknn_gpu.fly.FlyNNClassifier` has two knobs that matter most: the
number of winners ``k`` of the FlyHash code and the filter decay ``gamma``
(``gamma = 0``: binary Fly Bloom filters; closer to 1: cells used by many
training samples count more; the defaults are ``k='auto'``, 128 or 512 winners by the
number of training rows, and ``gamma=0.03``). A
cross-validated grid search over both is an ordinary scikit-learn ``GridSearchCV``.

The second figure shows the accuracy of differentially private releases
(:meth:`FlyNNClassifier.privatize`) as the privacy budget epsilon grows, for a
few numbers of released counts per class.
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
import os

import matplotlib.pyplot as plt
import numpy as np
from sklearn.base import clone
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.neighbors import KNeighborsClassifier

from sknn_gpu.fly import FlyNNClassifier

# SKNN_GPU_EXAMPLES_SMALL=1 asks for a quick run: a smaller grid, fewer releases
SMALL = os.environ.get("SKNN_GPU_EXAMPLES_SMALL", "") not in ("", "0")

X, y = load_digits(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)

gammas = [0.0, 0.3] if SMALL else [0.0, 0.03, 0.3, 0.9]
ks = [64, 256] if SMALL else [64, 256, 1024]
search = GridSearchCV(
    FlyNNClassifier(random_state=0),
    {"gamma": gammas, "k": ks},
    cv=2 if SMALL else 3,
    n_jobs=1,
).fit(X_train, y_train)
scores = search.cv_results_["mean_test_score"].reshape(len(gammas), len(ks))

fig, ax = plt.subplots(figsize=(5, 4))
im = ax.imshow(scores, cmap="viridis", origin="lower")
ax.set_xticks(range(len(ks)), [str(k) for k in ks])
ax.set_yticks(range(len(gammas)), [str(g) for g in gammas])
ax.set_xlabel("k (winners per code)")
ax.set_ylabel("gamma (filter decay)")
for i in range(len(gammas)):
    for j in range(len(ks)):
        ax.text(j, i, f"{scores[i, j]:.2f}", ha="center", va="center", color="w")
fig.colorbar(im, label=f"{search.n_splits_}-fold CV accuracy")
ax.set_title("FlyNN on digits")
fig.tight_layout()

best = search.best_estimator_
knn = KNeighborsClassifier(n_neighbors=1).fit(X_train, y_train)
print(f"best {search.best_params_}: test accuracy {best.score(X_test, y_test):.3f}")
print(f"1-NN test accuracy {knn.score(X_test, y_test):.3f}")

# %%
# Differential privacy: accuracy against epsilon
# ----------------------------------------------
# Each class releases ``n_released`` noisy counts (exponential mechanism +
# Laplace noise of scale ``2 n_released / epsilon``); all other counts are
# released as 0. Few released counts are less noisy but describe the class
# coarsely; many released counts need a larger budget. Averaged over 3 releases
# (the noise comes from the operating system's entropy: every run differs a little).
# A private release needs an input range that is public, not fitted from the data:
# digits' pixels are 0..16 by definition, so the best model is refitted over that range.
epsilons = [4, 64, 1024] if SMALL else [1, 4, 16, 64, 256, 1024]
repeats = 1 if SMALL else 3
public = clone(best).set_params(input_range=(0, 16)).fit(X_train, y_train)
fig, ax = plt.subplots(figsize=(5, 4))
for T in (16, 64) if SMALL else (16, 64, 256):
    acc = [np.mean([public.privatize(e, T).score(X_test, y_test) for _ in range(repeats)]) for e in epsilons]
    ax.plot(epsilons, acc, marker="o", label=f"n_released = {T}")
ax.axhline(public.score(X_test, y_test), color="k", ls="--", label="non-private")
ax.set_xscale("log")
ax.set_xlabel("epsilon")
ax.set_ylabel("test accuracy")
ax.legend()
ax.set_title("Private FlyNN on digits")
fig.tight_layout()
# sphinx_gallery_start_ignore
save_figures()
# sphinx_gallery_end_ignore
plt.show()
