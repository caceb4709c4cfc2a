"""How much a user's grid search gains over FlyNN's defaults, and whether scoring it on
log-loss picks what scoring it on accuracy picks (development-suite tables).

For each table, ``GridSearchCV`` over ``k x gamma x n_components`` (27 settings) runs on the
same stratified, shuffled 5 folds as ``sweep_flynn_devsuite.py``, scored on both accuracy and
``neg_log_loss``, and the defaults (``FlyNNClassifier(random_state=0)``) are cross-validated on
those folds too. Printed per table: the defaults' cross-validated accuracy, the best grid
setting's (what ``GridSearchCV.best_score_`` shows: chosen on the folds it is scored on, so
the gain is overstated, by more on small tables where 27 noisy scores meet), the setting that
log-loss picks and its accuracy.

``--nested`` measures what the search buys on data it did not see: in each outer fold the
grid search picks its setting by an inner stratified 5-fold CV of the training part, and the
chosen model and the defaults are both scored on the outer test part.

Run from the repository root (the KEEL tables need the ``sweep`` extra, or ``--tables`` a file
written by ``sweep_flynn_devsuite.py --export-tables``)::

    python benchmarks/tools/grid_flynn_devsuite.py --datasets iris wine sonar
    python benchmarks/tools/grid_flynn_devsuite.py --nested --device cuda --tables tables.npz
"""

import argparse
import datetime
import os
import sys
import time
import warnings
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent)]

import numpy as np
from sklearn.model_selection import GridSearchCV, StratifiedKFold, cross_validate
from sweep_flynn_devsuite import DEV_SUITE, load_table, use_tables

from sknn_gpu import FlyNNClassifier

GRID = {"k": [128, 256, 512], "gamma": [0.01, 0.03, 0.1], "n_components": [16384, 32768, 65536]}
SCORING = ["accuracy", "neg_log_loss"]


def _short(p):
    return f"k={p['k']}, gamma={p['gamma']}, m={p['n_components']}"


def grid_table(X, y, seed=0, device="cpu"):
    """``(defaults, best, best_params, by_loss_accuracy, by_loss_params)`` for one table."""
    cv = StratifiedKFold(5, shuffle=True, random_state=seed)
    base = FlyNNClassifier(device=device, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the class-information warning, on folds of hard tables
        defaults = cross_validate(base, X, y, cv=cv, scoring="accuracy")["test_score"].mean()
        search = GridSearchCV(base, GRID, scoring=SCORING, cv=cv, refit=False)
        res = search.fit(X, y).cv_results_
    i_acc = int(np.argmax(res["mean_test_accuracy"]))  # ties: the first setting
    i_loss = int(np.argmax(res["mean_test_neg_log_loss"]))
    accuracy = res["mean_test_accuracy"]
    return defaults, accuracy[i_acc], res["params"][i_acc], accuracy[i_loss], res["params"][i_loss]


def nested_table(X, y, seed=0, device="cpu"):
    """``(defaults, tuned, picks)``: outer-fold accuracies' means of the defaults and of the
    grid search's choice (picked by an inner 5-fold CV of each outer training part)."""
    outer = StratifiedKFold(5, shuffle=True, random_state=seed)
    defaults, tuned, picks = [], [], []
    for train, test in outer.split(X, y):
        inner = StratifiedKFold(5, shuffle=True, random_state=seed)
        base = FlyNNClassifier(device=device, random_state=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            search = GridSearchCV(base, GRID, scoring="accuracy", cv=inner).fit(X[train], y[train])
            model = FlyNNClassifier(device=device, random_state=seed).fit(X[train], y[train])
        tuned.append(search.score(X[test], y[test]))
        defaults.append(model.score(X[test], y[test]))
        picks.append(_short(search.best_params_))
    return float(np.mean(defaults)), float(np.mean(tuned)), picks


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(DEV_SUITE))
    parser.add_argument("--nested", action="store_true", help="score the search's pick on unseen folds")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where FlyNN runs")
    parser.add_argument("--tables", type=Path, default=None, help="read the tables from this .npz")
    args = parser.parse_args(argv)
    if args.tables is not None:
        use_tables(args.tables)
    command = "python benchmarks/tools/grid_flynn_devsuite.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    print(f"{datetime.date.today()} · {os.cpu_count()}-core CPU, FlyNN on device={args.device} · {command}\n")
    if args.nested:
        print(
            "| table | defaults (outer folds) | grid search's pick (outer folds) | gain "
            "| picks per outer fold |"
        )
        print("|---|---:|---:|---:|---|")
    else:
        print(
            "| table | defaults | best of the grid (accuracy) | its setting "
            "| log-loss's pick: accuracy | its setting |"
        )
        print("|---|---:|---:|---|---:|---|")
    gains, gaps = [], []
    for name in args.datasets:
        start = time.perf_counter()
        X, y, _ = load_table(name)
        if args.nested:
            d, t, picks = nested_table(X, y, device=args.device)
            gains.append(t - d)
            print(f"| {name} | {d:.3f} | {t:.3f} | {(t - d) * 100:+.1f} | {'; '.join(picks)} |", flush=True)
        else:
            d, best, bp, by_loss, lp = grid_table(X, y, device=args.device)
            gains.append(best - d)
            gaps.append(best - by_loss)
            print(
                f"| {name} | {d:.3f} | {best:.3f} | {_short(bp)} | {by_loss:.3f} | {_short(lp)} |", flush=True
            )
        print(f"<!-- {name}: {time.perf_counter() - start:.0f} s -->", file=sys.stderr, flush=True)
    print()
    if args.nested:
        print(
            f"Mean gain of the grid search's pick over the defaults on unseen folds: "
            f"{np.mean(gains) * 100:+.2f} points (max {np.max(gains) * 100:+.2f}, "
            f"min {np.min(gains) * 100:+.2f})."
        )
    else:
        print(
            f"Mean gain of the grid over the defaults: {np.mean(gains) * 100:.2f} points (max "
            f"{np.max(gains) * 100:.2f}); accuracy lost by picking on log-loss: mean "
            f"{np.mean(gaps) * 100:.2f} points (max {np.max(gaps) * 100:.2f})."
        )


if __name__ == "__main__":
    main()
