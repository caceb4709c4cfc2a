"""How much a user's grid search gains over FlyNN's defaults, and whether scoring it on
log-loss picks what scoring it on accuracy picks (development-suite tables, CPU).

For each table, ``GridSearchCV`` over ``k x gamma x n_components`` (27 settings) runs on the
same stratified, shuffled 5 folds as ``sweep_flynn_devsuite.py``, scored on both accuracy and
``neg_log_loss``. Printed per table: the defaults' cross-validated accuracy, the best
grid setting's (chosen on those same folds, so the gain is if anything overstated), the
setting that log-loss picks and its accuracy.

Run from the repository root (the KEEL tables need the ``sweep`` extra)::

    python benchmarks/tools/grid_flynn_devsuite.py --datasets iris wine sonar
"""

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent)]

import numpy as np
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sweep_flynn_devsuite import load_table

from sknn_gpu import FlyNNClassifier

GRID = {"k": [128, 256, 512], "gamma": [0.01, 0.03, 0.1], "n_components": [16384, 32768, 65536]}


def grid_table(name, seed=0):
    """``(defaults, best, best_params, by_loss_accuracy, by_loss_params)`` for one table."""
    X, y, _ = load_table(name)
    cv = StratifiedKFold(5, shuffle=True, random_state=seed)
    base = FlyNNClassifier(device="cpu", random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the class-information warning, on folds of hard tables
        search = GridSearchCV(base, GRID, scoring=["accuracy", "neg_log_loss"], cv=cv, refit=False)
        res = search.fit(X, y).cv_results_
    defaults = {"k": 256, "gamma": 0.03, "n_components": 32768}
    i_def = next(i for i, p in enumerate(res["params"]) if p == defaults)
    i_acc = int(np.argmax(res["mean_test_accuracy"]))  # ties: the first setting
    i_loss = int(np.argmax(res["mean_test_neg_log_loss"]))
    accuracy = res["mean_test_accuracy"]
    return accuracy[i_def], accuracy[i_acc], res["params"][i_acc], accuracy[i_loss], res["params"][i_loss]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", required=True)
    args = parser.parse_args(argv)
    print(
        "| table | defaults | best of the grid (accuracy) | its setting "
        "| log-loss's pick: accuracy | its setting |"
    )
    print("|---|---:|---:|---|---:|---|")
    gains, gaps = [], []
    for name in args.datasets:
        start = time.perf_counter()
        d, best, bp, by_loss, lp = grid_table(name)
        gains.append(best - d)
        gaps.append(best - by_loss)
        short = lambda p: f"k={p['k']}, gamma={p['gamma']}, m={p['n_components']}"  # noqa: E731
        print(f"| {name} | {d:.3f} | {best:.3f} | {short(bp)} | {by_loss:.3f} | {short(lp)} |", flush=True)
        print(f"<!-- {name}: {time.perf_counter() - start:.0f} s -->", file=sys.stderr)
    print()
    print(
        f"Mean gain of the grid over the defaults: {np.mean(gains) * 100:.2f} points (max "
        f"{np.max(gains) * 100:.2f}); accuracy lost by picking on log-loss: mean "
        f"{np.mean(gaps) * 100:.2f} points (max {np.max(gaps) * 100:.2f})."
    )


if __name__ == "__main__":
    main()
