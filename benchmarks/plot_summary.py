"""The README's figure: each estimator against the strongest peer, from recorded benchmark output.

Every benchmark prints markdown tables and, under each table, the line
``Strongest peer[ (class)]: NAME (device), TIME.``; the output of a GPU run is kept in
``benchmarks/results/<date>-<device>/``. This script reads our row's median time and that
line from the files named in ``WORKLOADS`` (no number is typed in here) and draws one bar
per workload: how many times faster ours is than the strongest peer (below 1: slower).
The MLP's peer table has one column per implementation instead; its peer is the faster of
PyTorch eager and PyTorch replayed as a CUDA graph.

Run from the repository root after recording new output (edit ``WORKLOADS`` to point at it)::

    python benchmarks/plot_summary.py            # writes docs/_static/summary.png
    python benchmarks/plot_summary.py --print    # the ratios only, no figure
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _results beside this script
from _results import TIME, cells, seconds  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
OUT = ROOT / "docs" / "_static" / "summary.png"
PEER_LINE = re.compile(
    r"^Strongest peer(?: \((?P<cls>[^)]+)\))?: (?P<name>.+) \((?:cpu|cuda)\), " + TIME + r"\.$"
)

FLYHASH = "2026-11-26-h100/bench_flyhash_fmnist_recheck.md"
SPARSE = "2026-11-26-h100/sparsenet_latency_after_review_mend.md"

FLYNN = "2026-11-28-h100/bench_flynn_defaults.md"
FLYNN_NARROW = "2026-11-28-h200/bench_flynn_narrow_digits.md"
#: (estimator, workload, results file, table title prefix, our row (on cuda), peer class or None)
WORKLOADS = [
    ("GBNNMemory", "joint retrieval, 30,000 probes (Scenario 2)", "2026-11-26-h100/bench_gbnn_peers.md",
     "C=16, L=512, 50,000 stored, 30,000 probes", "ours joint", "joint"),
    ("FlyHashTransformer", "exact, FashionMNIST shape", FLYHASH,
     "FashionMNIST shape", "ours GPU (transform)", "exact"),
    ("FlyHashTransformer", "precision='fast', FashionMNIST shape", FLYHASH,
     "FashionMNIST shape", "ours GPU (transform, precision='fast')", "inexact"),
    ("FlyNNClassifier", "predict 10,000, 6,000 training rows", FLYNN,
     "Training-set sweep (GPU): 6,000 ", "ours FlyNN predict (GPU)", None),
    ("FlyNNClassifier", "predict 10,000, 600,000 training rows", FLYNN,
     "Training-set sweep (GPU): 600,000 ", "ours FlyNN predict (GPU)", None),
    ("FlyNNClassifier", "predict digits (540 rows, H200)", "2026-11-28-h200/bench_flynn_narrow_digits.md",
     "digits (defaults): predict", "ours FlyNN", None),
    ("FlyNNClassifier", "predict 10,000 x 16, 50,000 training rows (H200)", FLYNN_NARROW,
     "narrow mixture, 16 features (defaults): predict", "ours FlyNN", None),
    ("DTCNNHalftoner", "one 512² photo (Pillow on one core)", "2026-11-26-h100/dtcnn_rowskip.md",
     "camera 512x512", "ours DT-CNN (rows)", None),
    ("DTCNNHalftoner", "one 4096² image (Pillow on one core)", "2026-11-26-h100/dtcnn_rowskip.md",
     "camera upscaled 4096x4096", "ours DT-CNN (rows)", None),
    ("DTCNNHalftoner", "64 photos of 512² (Pillow on all cores)", "2026-11-26-h100/dtcnn_rowskip.md",
     "batch of 64 ", "ours DT-CNN batch (GPU)", None),
    ("SparseNetRegressor", "predict one row, 5 levels (MLP-shaped)", SPARSE,
     "MLP-shaped", "SparseNetRegressor.predict(NumPy) call", None),
    ("SparseNetRegressor", "predict one row, 180 levels", SPARSE,
     "180 levels", "SparseNetRegressor.predict(NumPy) call", None),
]  # fmt: skip

#: (workload, results file, table title prefix, N, our column, peer columns by position)
MLP_WORKLOADS = [
    ("per-sample SGD epoch, 60,000 x 784, hidden 1,280 (H200)", "2026-11-28-h200/bench_mlp_defaults_sgd.md",
     "Per-sample SGD", "(1280,)", 1, (2, 3)),
    ("defaults (Adam, batch 200) epoch, same shape (H200)", "2026-11-28-h200/bench_mlp_defaults_adam.md",
     "GPUMLPClassifier at its defaults (solver='adam'", "(1280,)", 1, (2, 3)),
]  # fmt: skip


def parse_time(text):
    """Seconds from a cell such as ``27.20 ms``, or None (``—``, or a cell with more text)."""
    m = re.fullmatch(r"\s*" + TIME + r"(\s*\(.*\))?\s*", text)
    return seconds(m.group(1), m.group(2)) if m else None


def sections(path):
    """``{title: {"header": [...], "rows": [[cell, ...], ...], "peers": {class: (name, s)}}}``.

    One entry per ``###`` table of a benchmark's output; ``peers`` holds the
    ``Strongest peer`` lines printed under it (class None when the line names none).
    """
    out, cur = {}, None
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.startswith("### "):
            cur = out[line[4:].strip()] = {"header": None, "rows": [], "peers": {}}
        elif cur is None:
            continue
        elif line.startswith("|"):
            row = cells(line)
            if cur["header"] is None:
                cur["header"] = row
            elif not set("".join(row)) <= set("-: "):
                cur["rows"].append(row)
        elif m := PEER_LINE.match(line.strip()):
            peer_s = seconds(m.group(3), m.group(4))
            cur["peers"][m.group("cls")] = (m.group("name"), peer_s)
    return out


def _section(path, prefix):
    found = [s for title, s in sections(path).items() if title.startswith(prefix)]
    if len(found) != 1:
        raise KeyError(f"{path.name}: {len(found)} tables start with {prefix!r} (want one)")
    return found[0]


def ratios(results=RESULTS):
    """``[(estimator, workload, peer name, ours s, peer s), ...]`` from the recorded files."""
    out = []
    for est, work, fname, prefix, ours, cls in WORKLOADS:
        sec = _section(results / fname, prefix)
        col, dev = sec["header"].index("median time"), sec["header"].index("device")
        times = [parse_time(r[col]) for r in sec["rows"] if r[0] == ours and r[dev] == "cuda"]
        if len(times) != 1 or times[0] is None:
            raise KeyError(f"{fname}: no single timed row {ours!r} under {prefix!r}")
        peer, t_peer = sec["peers"][cls]
        out.append((est, work, peer, times[0], t_peer))
    for work, fname, prefix, n, ours_col, peer_cols in MLP_WORKLOADS:
        sec = _section(results / fname, prefix)
        row = next(r for r in sec["rows"] if r[0] == n)
        named = [(sec["header"][c], parse_time(row[c])) for c in peer_cols]
        peer, t_peer = min(named, key=lambda p: p[1])
        out.append(("GPUMLPClassifier", work, peer, parse_time(row[ours_col]), t_peer))
    return out


def plot(rows, out_png):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    speed = [t_peer / t_ours for *_, t_ours, t_peer in rows]
    labels = [f"{est}: {work}\nvs {peer}" for est, work, peer, *_ in rows]
    fig, ax = plt.subplots(figsize=(9.0, 0.42 * len(rows) + 1.2))
    ax.barh(range(len(rows)), speed, color=["tab:green" if s >= 1 else "tab:red" for s in speed])
    ax.set_yticks(range(len(rows)), labels, fontsize=7.5)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(1.0, color="k", lw=0.8)
    for i, s in enumerate(speed):
        ax.text(s, i, f" {s:.0f}×" if s >= 10 else f" {s:.3g}×", va="center", fontsize=8)
    ax.set_xlim(min(speed) / 2, max(speed) * 4)
    ax.set_xlabel("times faster than the strongest peer (log scale; red: the peer is faster)", fontsize=9)
    fig.suptitle(
        "sknn_gpu on one H100 (rows marked H200: H200) against what a user would write instead", fontsize=10
    )
    fig.tight_layout()  # the title centred on the figure, not on the axes beside the long labels
    fig.savefig(out_png, dpi=100)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=OUT, help="the PNG to write (default: %(default)s)")
    p.add_argument("--print", action="store_true", help="print the ratios, draw nothing")
    args = p.parse_args(argv)
    rows = ratios()
    for est, work, peer, t_ours, t_peer in rows:
        print(f"{est:20s} {work:50s} {t_peer / t_ours:7.3g}x vs {peer}")
    if not args.print:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        plot(rows, args.out)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
