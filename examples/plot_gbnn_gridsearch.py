"""
GBNN memory: choosing the retrieval rule with GridSearchCV
==========================================================

A :class:`~sknn_gpu.memory.GBNNMemory` recalls only the messages it stored, so
scikit-learn's usual cross-validation (store the training fold, score the held-out
fold) scores every memory 0. :class:`~sknn_gpu.memory.StoredMessagesCV` stores every
message in each split and probes a part of them, and
:func:`~sknn_gpu.memory.erased_recall_scorer` erases symbols of the probed messages
and scores how many the memory completes exactly. With these two, a grid search over
the retrieval rule and the number of iterations is one ordinary ``GridSearchCV``.
"""

# %%
# Search the rule and the iterations
# ----------------------------------
# 1,000 random messages of 8 symbols over 64 values; each probe has 5 of its 8 symbols
# erased. Every candidate memory stores all 1,000 messages and is asked the same probes.

# sphinx_gallery_start_ignore
# as a script: figures saved to one folder, a missing package named (examples/_helpers.py)
try:
    from _helpers import require, save_figures
except ImportError:  # this file alone, e.g. downloaded from the gallery: figures not saved
    require = save_figures = lambda *modules: False
require("matplotlib")
# sphinx_gallery_end_ignore
import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV, cross_validate

from sknn_gpu.memory import GBNNMemory, StoredMessagesCV, erased_recall_scorer

# a small max_iter stops some probes before they converge, on purpose: that is what is measured
warnings.filterwarnings("ignore", category=ConvergenceWarning)

messages = np.random.default_rng(0).integers(0, 64, size=(1000, 8))
rules = ["sum-of-sum", "sum-of-max", "joint"]
iterations = [1, 2, 3, 5, 20]
search = GridSearchCV(
    GBNNMemory(device="cpu", random_state=0),
    {"rule": rules, "max_iter": iterations},
    scoring=erased_recall_scorer(5),
    cv=StoredMessagesCV(n_splits=3),
).fit(messages)
# equal scores rank equal; the first of them in the grid's order is the best
print(f"best {search.best_params_}: exact recall {search.best_score_:.3f}")

# %%
# Recall per rule and number of iterations
# ----------------------------------------
# The grid's order is max_iter (outer) by rule (inner). Sum-of-max and joint reach the
# same states, so their curves coincide; sum-of-sum stays below.
mean = search.cv_results_["mean_test_score"].reshape(len(iterations), len(rules))
std = search.cv_results_["std_test_score"].reshape(len(iterations), len(rules))
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
for j, (rule, marker) in enumerate(zip(rules, "osx")):
    ax1.errorbar(iterations, mean[:, j], yerr=std[:, j], marker=marker, capsize=3, label=rule)
ax1.set_xscale("log")
ax1.set_xticks(iterations, [str(t) for t in iterations])
ax1.set_xlabel("max_iter")
ax1.set_ylabel("exact recall (mean over 3 probe sets)")
ax1.set_title("5 of 8 symbols erased")
ax1.legend()

# %%
# The best memory against more and fewer erased symbols
# -----------------------------------------------------
# The number of erased symbols is the question asked, not a parameter of the memory:
# several scorers at once give the whole curve for the chosen memory.
erased = list(range(1, 8))
scores = cross_validate(
    search.best_estimator_,
    messages,
    cv=StoredMessagesCV(n_splits=3),
    scoring={f"e{e}": erased_recall_scorer(e) for e in erased},
)
recall = [scores[f"test_e{e}"].mean() for e in erased]
ax2.plot(erased, recall, marker="o")
ax2.set_xlabel("erased symbols (of 8)")
ax2.set_ylabel("exact recall")
ax2.set_title(f"best: {search.best_params_['rule']}, max_iter={search.best_params_['max_iter']}")
fig.tight_layout()
# sphinx_gallery_start_ignore
save_figures()
# sphinx_gallery_end_ignore
plt.show()
