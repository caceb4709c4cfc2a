"""
SparseNet on friedman1: accuracy as the network is pruned
=========================================================

:class:`~sknn_gpu.sparse.SparseNetRegressor` with ``topology='prune'`` trains a
dense layered network, then removes the smallest-magnitude weights in a few rounds
down to a target ``density``, fine-tuning in between. What is left is an
arbitrary-structured sparse network (a DAG, no longer a stack of full layers)
that is evaluated level by level.

The figure shows the test R² on friedman1 against the fraction of edges kept,
and the number of levels and edges of each result. The last cell evaluates the
same trained graph with :meth:`SparseGraph.forward` and checks it against
``predict``.
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
import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import make_friedman1
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import r2_score

from sknn_gpu.sparse import SparseNetRegressor

# SKNN_GPU_EXAMPLES_SMALL=1 asks for a quick run: fewer samples and densities
SMALL = os.environ.get("SKNN_GPU_EXAMPLES_SMALL", "") not in ("", "0")

warnings.simplefilter("ignore", ConvergenceWarning)  # short training on purpose
n_samples = 400 if SMALL else 1000
X, y = make_friedman1(n_samples=n_samples, random_state=0)
X_test, y_test = make_friedman1(n_samples=n_samples, random_state=1)

densities = [1.0, 0.1] if SMALL else [1.0, 0.3, 0.1, 0.03]
scores, edges, levels = [], [], []
for density in densities:
    reg = SparseNetRegressor(
        hidden_layer_sizes=(48, 48),
        density=density,
        max_iter=60,
        learning_rate_init=5e-3,
        n_prune_steps=2,
        fine_tune_iter=20,
        random_state=0,
        device="cpu",
    ).fit(X, y)
    scores.append(r2_score(y_test, reg.predict(X_test)))
    edges.append(reg.n_edges_)
    levels.append(reg.n_levels_)
    print(f"density {density:5.2f}: {reg.n_edges_:5d} edges, {reg.n_levels_} levels, R² {scores[-1]:.4f}")

fig, ax = plt.subplots(figsize=(5, 3.5))
ax.semilogx(densities, scores, "o-")
for d, s, e in zip(densities, scores, edges):
    ax.annotate(f"{e} edges", (d, s), textcoords="offset points", xytext=(4, -12), fontsize=8)
ax.set_xlabel("fraction of edges kept (density)")
ax.set_ylabel("test R²")
ax.set_title("friedman1, 48×48 network pruned")
ax.grid(True, which="both", alpha=0.3)
fig.tight_layout()

# %%
# The trained network is a :class:`~sknn_gpu.sparse.SparseGraph`: its levels and
# a direct evaluation. ``predict`` adds back the target scaling.
g = reg.graph_
print(g, "levels:", g.n_levels, "nodes per level:", g.level_sizes.tolist())
raw = g.forward(X_test[:5], device="cpu")[:, 0]
print(np.allclose(raw * reg._y_scale[0] + reg._y_mean[0], reg.predict(X_test[:5])))

# %%
# Serving predictions one row at a time: inside ``reg.resident()`` a model on the GPU
# keeps its forward kernel resident between calls, so a row costs no kernel launch
# (user guide, "Serving one row at a time"); on the CPU, as here, the block changes
# nothing. The predictions are the same either way.
with reg.resident():
    rows = [reg.predict(X_test[i : i + 1]) for i in range(5)]
print(np.array_equal(np.concatenate(rows), reg.predict(X_test[:5])))
# sphinx_gallery_start_ignore
save_figures()
# sphinx_gallery_end_ignore
plt.show()
