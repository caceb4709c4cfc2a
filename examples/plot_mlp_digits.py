"""
GPUMLPClassifier on the digits data set
=======================================

:class:`sknn_gpu.GPUMLPClassifier` follows scikit-learn's
:class:`~sklearn.neural_network.MLPClassifier` (stochastic solvers): the same
parameters, the same initial weights for the same ``random_state``, the same shuffles
and the same update rules. This example trains both on the 8×8 digits with the same
settings and compares their loss curves and test accuracy. It runs on the CPU in a
few seconds; with ``device='cuda'`` the same code trains on the GPU.
"""

# %%
# Train both models with the same settings
# ----------------------------------------

# sphinx_gallery_start_ignore
# as a script: figures saved to one folder, a missing package named (examples/_helpers.py)
try:
    from _helpers import require, save_figures
except ImportError:  # this file alone, e.g. downloaded from the gallery: figures not saved
    require = save_figures = lambda *modules: False
require("matplotlib")
# sphinx_gallery_end_ignore
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

from sknn_gpu import GPUMLPClassifier

X, y = load_digits(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X / 16.0, y, test_size=0.25, random_state=0)

settings = dict(hidden_layer_sizes=(64,), solver="sgd", learning_rate_init=0.1, max_iter=40, random_state=0)
ours = GPUMLPClassifier(device="cpu", **settings).fit(X_train, y_train)
ref = MLPClassifier(**settings).fit(X_train, y_train)
print(f"GPUMLPClassifier test accuracy: {ours.score(X_test, y_test):.3f}")
print(f"MLPClassifier    test accuracy: {ref.score(X_test, y_test):.3f}")

# %%
# Loss curves
# -----------
# The curves coincide: same initial weights, same sample order, same arithmetic.
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(ref.loss_curve_, lw=4, alpha=0.4, label="sklearn MLPClassifier")
ax.plot(ours.loss_curve_, "k--", label="sknn_gpu GPUMLPClassifier")
ax.set_xlabel("epoch")
ax.set_ylabel("training loss")
ax.set_yscale("log")
ax.legend()
fig.tight_layout()

# %%
# Per-sample SGD and early stopping
# ---------------------------------
# ``batch_size=1`` is per-sample SGD (the case the fused GPU kernel accelerates);
# ``early_stopping=True`` holds out 10% of the training data and restores the
# weights of the epoch with the best validation accuracy.
per_sample = GPUMLPClassifier(
    (64,),
    solver="sgd",
    batch_size=1,
    learning_rate_init=0.01,
    momentum=0.0,
    max_iter=5,
    early_stopping=True,
    n_iter_no_change=2,
    random_state=0,
    device="cpu",
).fit(X_train, y_train)
print("validation accuracy per epoch:", [f"{s:.3f}" for s in per_sample.validation_scores_])
print(f"per-sample SGD test accuracy: {per_sample.score(X_test, y_test):.3f}")

# %%
# Sample weights and the round trip to scikit-learn
# -------------------------------------------------
# ``sample_weight`` weighs samples exactly as scikit-learn's MLP does (here: the
# digit 8, the most confused one, counts three times). ``as_sklearn()`` hands the
# fitted model to scikit-learn (same predictions, bit for bit) and
# ``from_sklearn()`` takes one back, e.g. to predict on a GPU.
weights = np.where(y_train == 8, 3.0, 1.0)
weighted = GPUMLPClassifier(device="cpu", **settings).fit(X_train, y_train, sample_weight=weights)
ref_weighted = MLPClassifier(**settings).fit(X_train, y_train, sample_weight=weights)
gap = max(np.abs(a - b).max() for a, b in zip(weighted.coefs_, ref_weighted.coefs_))
print(f"largest weight difference to scikit-learn with sample weights: {gap:.1e}")
mlp = weighted.as_sklearn()
same = (mlp.predict_proba(X_test) == weighted.predict_proba(X_test)).all()
print("as_sklearn() gives the same probabilities:", bool(same))
back = GPUMLPClassifier.from_sklearn(mlp, device="cpu")
print("from_sklearn() predicts the same:", bool((back.predict(X_test) == mlp.predict(X_test)).all()))
# sphinx_gallery_start_ignore
save_figures()
# sphinx_gallery_end_ignore
plt.show()
