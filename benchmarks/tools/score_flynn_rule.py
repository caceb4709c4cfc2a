"""Score a FlyNN setting rule from the output of ``sweep_flynn_devsuite.py``, without new fits.

The rule: inputs of at most 1,024 encoded values (``n_features x n_receptors``, with
``n_receptors='auto'`` = ``ceil(64 / n_features)`` kept within [5, 64]) take the sweep's
``n_components=65536`` column with ``k=128`` when the training rows (4/5 of the table, five
folds) are at least ``--rows-per-input`` per encoded input, else with ``k=512``; wider
inputs keep the defaults. The sweep must have run both candidates
(``--candidate n_components=65536,k=128 --candidate n_components=65536,k=512``). Prints a
markdown table: per table the k the rule picks, the defaults, the rule and the best k-NN,
and the mean gap to the best k-NN of both.

Run from the repository root::

    python benchmarks/tools/score_flynn_rule.py benchmarks/results/2026-11-28-cpu/flynn_heldout_autorule.md
"""

import argparse
import math


def read_accuracy_table(path):
    """The rows of the sweep's accuracy table, as dicts keyed by its header."""
    lines = open(path, encoding="utf-8").read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| table | rows"))
    header = [h.strip() for h in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, (c.strip() for c in line.strip("|").split("|")))))
    return rows


def _accuracy(cell):
    return float(cell.split("±")[0])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", help="a markdown file written by sweep_flynn_devsuite.py")
    parser.add_argument("--rows-per-input", type=float, default=32.0)
    parser.add_argument("--wide", type=int, default=1024, help="widest input the rule applies to")
    args = parser.parse_args(argv)
    rows = read_accuracy_table(args.sweep)
    print(
        f"Rule scored from `{args.sweep}` (no new fits): at most {args.wide} encoded inputs -> 65,536 cells, "
        f"k=128 with at least {args.rows_per_input:g} training rows per encoded input, else k=512.\n"
    )
    columns = ["table", "rows × features", "width", "training rows per input", "k", "defaults", "rule"]
    print("| " + " | ".join(columns + ["best k-NN", "rule − defaults"]) + " |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    gaps_d, gaps_r = [], []
    for r in rows:
        n, d = (int(x.replace(",", "")) for x in r["rows × features"].split("×"))
        width = d * max(5, min(64, math.ceil(64 / d)))
        n_train = n * 4 // 5
        defaults, knn = _accuracy(r["FlyNN defaults"]), _accuracy(r["best k-NN"])
        if width <= args.wide:
            k = 128 if n_train >= args.rows_per_input * width else 512
            rule = _accuracy(r[f"FlyNN n_components=65536 k={k}"])
        else:
            k, rule = "defaults", defaults
        gaps_d.append(defaults - knn)
        gaps_r.append(rule - knn)
        cells = [r["table"], r["rows × features"], width, f"{n_train / width:.1f}", k, f"{defaults:.3f}"]
        cells += [f"{rule:.3f}", f"{knn:.3f}", f"{100 * (rule - defaults):+.1f}"]
        print("| " + " | ".join(str(c) for c in cells) + " |")
    mean_d, mean_r = 100 * sum(gaps_d) / len(rows), 100 * sum(gaps_r) / len(rows)
    print(f"\nMean gap to the best k-NN over {len(rows)} tables: ", end="")
    print(f"defaults {mean_d:+.2f} points, rule {mean_r:+.2f} points.")


if __name__ == "__main__":
    main()
