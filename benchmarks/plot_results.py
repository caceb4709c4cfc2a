"""Charts of ours against the strongest peers, drawn from recorded benchmark output.

The benchmarks print markdown tables; a run's output is kept under
``benchmarks/results/<date>-<device>/`` (one ``.md`` file per benchmark, exactly as
printed). This script reads those tables — no number is typed in here — and writes:

* ``docs/_static/perf/<estimator>.png``: per estimator, the median times of our rows
  and the peers' rows of chosen tables, on a log scale;
* ``docs/user_guide/flynn_scaling.png``: FlyNN ``predict`` against PyTorch brute-force
  1-NN as the training set grows;
* ``docs/user_guide/scaling_out_disk.png``: Dask on 1, 2, 4, ... GPUs against one GPU in
  memory, from the scale-out summaries of ``bench_dask_disk_*.md`` (``bench_dask.py
  --data-dir``), workloads of at least 5 s on one GPU.

Run from the repository root after recording new output:
``python benchmarks/plot_results.py benchmarks/results/2026-11-23-h100``. The README's
summary figure (each estimator against its strongest peer) is drawn by
``benchmarks/plot_summary.py``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _results beside this script
from _results import TIME, cells, seconds  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def parse_time(text):
    """Seconds from a table cell such as ``27.20 ms`` (None for '—' or anything else)."""
    m = re.fullmatch(r"\s*" + TIME + r"\s*", text)
    return seconds(m.group(1), m.group(2)) if m else None


def tables(path):
    """``{title: [row dict, ...]}`` of every ``###`` table in a benchmark's output."""
    out, title, header = {}, None, None
    for line in Path(path).read_text().splitlines():
        if line.startswith("### "):
            title, header = line[4:].strip(), None
            out[title] = []
        elif line.startswith("|") and title is not None:
            row = cells(line)
            if header is None:
                header = row
            elif not set(line.replace("|", "").strip()) <= set("-: "):
                out[title].append(dict(zip(header, row, strict=False)))
    return out


def find(all_tables, prefix):
    for title, rows in all_tables.items():
        if title.startswith(prefix):
            return title, rows
    raise KeyError(f"no table starting with {prefix!r}")


def row_time(rows, name, column="median time"):
    for r in rows:
        if r.get("implementation") == name:
            return parse_time(r.get(column, ""))
    raise KeyError(name)


#: per estimator: (file, table prefixes) whose ours/peer rows are drawn
PER_ESTIMATOR = {
    "flyhash": ("flyhash.md", ["FashionMNIST shape"]),
    "flynn": ("flynn.md", ["Training-set sweep (GPU): 6,000", "Training-set sweep (GPU): 60,000",
                           "Training-set sweep (GPU): 600,000"]),
    "sparsegraph": ("sparsenet_latency.md", ["MLP-shaped", "180 levels"]),
    "dtcnn": ("dtcnn.md", ["camera 512x512", "camera upscaled 4096", "batch of 64"]),
}  # fmt: skip


def plot_estimator(results, key, out_png):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fname, prefixes = PER_ESTIMATOR[key]
    all_tables = tables(results / fname)
    fig, axes = plt.subplots(len(prefixes), 1, figsize=(8.5, 2.3 * len(prefixes)), squeeze=False)
    for ax, prefix in zip(axes[:, 0], prefixes, strict=True):
        title, rows = find(all_tables, prefix)
        items = []
        for r in rows:
            name, t = r.get("implementation", ""), parse_time(r.get("median time", ""))
            if t is None or not (name.startswith("ours") or name.endswith("(peer)")):
                continue
            if "launches only" in name or "rows," in name or "sweeps only" in name:
                continue  # tuning rows of the benchmark
            items.append((name.replace(" (peer)", ""), t, name.endswith("(peer)")))
        items.sort(key=lambda it: it[1])
        ax.barh(range(len(items)), [it[1] * 1e3 for it in items],
                color=["tab:gray" if it[2] else "tab:blue" for it in items])  # fmt: skip
        ax.set_yticks(range(len(items)), [it[0] for it in items], fontsize=7)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("median time (ms, log scale); blue: ours, grey: peers", fontsize=8)
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out_png, dpi=100)
    plt.close(fig)


def plot_flynn_scaling(results, out_png):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    all_tables = tables(results / "flynn.md")
    sizes, ours, brute = [], [], []
    for title, rows in all_tables.items():
        m = re.match(r"Training-set sweep \(GPU\): ([0-9,]+) training rows", title)
        if not m:
            continue
        sizes.append(int(m.group(1).replace(",", "")))
        ours.append(row_time(rows, "ours FlyNN predict (GPU)") * 1e3)
        brute.append(row_time(rows, "PyTorch cdist + argmin 1-NN (fp32) (peer)") * 1e3)
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    ax.loglog(sizes, ours, "o-", label="FlyNN predict (ours, GPU)")
    ax.loglog(sizes, brute, "s--", color="tab:gray", label="PyTorch cdist + argmin 1-NN (GPU)")
    ax.set_xlabel("training rows (784 features)")
    ax.set_ylabel("predict 10,000 queries (ms)")
    ax.set_title("FlyNN's cost does not grow with the training set", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)


def scale_out_rows(results, min_seconds=5.0):
    """``[(workload, {GPUs: speed-up against in memory on one GPU}), ...]`` from the scale-out
    summaries of the ``bench_dask_disk_*.md`` files in ``results``: the workloads that take
    at least ``min_seconds`` in memory on one GPU."""
    out = []
    for path in sorted(results.glob("bench_dask_disk_*.md")):
        for title, rows in tables(path).items():
            if not title.startswith("Scale-out summary"):
                continue
            for r in rows:
                base = parse_time(r.get("in memory, 1 GPU", ""))
                if base is None or base < min_seconds:
                    continue
                speed = {}
                for col, cell in r.items():
                    m = re.fullmatch(r"Dask, (\d+) GPUs?", col)
                    t = parse_time(cell.split(" (")[0]) if m else None
                    if t:
                        speed[int(m.group(1))] = base / t
                out.append((r["workload"], speed))
    return out


def plot_scale_out(results, out_png, target=(4, 3.5)):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = scale_out_rows(results)
    fig, ax = plt.subplots(figsize=(6.2, 3.8))
    top = max(max(s) for _, s in rows)
    ax.plot([1, top], [1, top], ":", color="gray", label="linear")
    for name, speed in rows:
        gpus = sorted(speed)
        label = re.sub(r" from (\d+ \.npy shards|disk)$", "", name)
        ax.plot(gpus, [speed[g] for g in gpus], "o-", label=label)
    ax.plot([target[0]], [target[1]], "r_", markersize=18, mew=2, label=f"target at {target[0]} GPUs")
    ax.set_xticks(sorted({g for _, s in rows for g in s}))
    ax.set_xlabel("GPUs (Dask, one worker per GPU, 2 threads each)")
    ax.set_ylabel("speed-up against one GPU in memory")
    ax.set_title(
        "Data read from .npy shards (median times); one GPU in memory reads,\n"
        "then computes, shard by shard; Dask's two threads overlap the two",
        fontsize=9,
    )
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", type=Path, help="a directory of recorded benchmark output")
    args = p.parse_args(argv)
    out = ROOT / "docs" / "_static" / "perf"
    out.mkdir(parents=True, exist_ok=True)
    for key in PER_ESTIMATOR:
        if (args.results / PER_ESTIMATOR[key][0]).exists():
            plot_estimator(args.results, key, out / f"{key}.png")
    if (args.results / "flynn.md").exists():
        plot_flynn_scaling(args.results, ROOT / "docs" / "user_guide" / "flynn_scaling.png")
    if scale_out_rows(args.results):
        plot_scale_out(args.results, ROOT / "docs" / "user_guide" / "scaling_out_disk.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
