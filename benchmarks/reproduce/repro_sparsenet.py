"""Reproduce "GPU acceleration of sparse and arbitrary structured neural networks", Figs. 4-7.

The paper activates random arbitrary-structured networks (one sample, batch 1) level by
level on a GPU and compares with a sequential implementation: Fig. 4 time vs connections
(sequential and GPU), Fig. 5 GPU time alone (flat, 1-2.5 ms), Fig. 6 the same on a log
axis, Fig. 7 the speed-up (below 1 for tiny networks, about 1 up to ~8,000 connections,
then growing linearly to ~15x at 70,000 connections).

Ours on the same kind of networks (:meth:`SparseGraph.random_layered`, NEAT sigmoid,
16 inputs, 4 outputs; 2, 5 and 50 levels; connection budgets from 50 to 70,000, so the
small nets where the paper's GPU is slower are in the sweep):

* sequential: neat-python's ``FeedForwardNetwork.activate`` (one Python loop over nodes
  and links; skipped with a note when neat-python is not installed) and our CPU path
  (SciPy sparse products, one per level);
* GPU: our kernels, both as the Python call ``g.forward(x, device='cuda')`` with a NumPy
  sample in and out (copies included, as in the paper's definition) and as the bare
  prepared launch (CUDA events).

The crossover table says, per depth, from which connection count our GPU call stays
faster than our CPU path (the choice a user makes) and than neat-python, computed from the
measured rows ("faster at every net measured" when the GPU call already wins on the
smallest one). The generator's count is approximate (duplicate draws are dropped) and a
deep net needs about one connection per level, so at 50 levels the smallest budgets give
the same minimal net: such repeats are measured once and listed in the notes.

``--quick`` runs the same code on fewer, smaller networks (seconds on a 2-core CPU);
``--smoke`` on three sizes, each timed twice.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common, when imported from elsewhere

import numpy as np  # noqa: E402
from _common import fmt_time, heading, new_figure, paper_table, parse_args, save_plot, sized  # noqa: E402
from _harness import time_cpu, time_gpu  # noqa: E402
from bench_sparsenet import neat, neat_network  # noqa: E402

from sknn_gpu.sparse import SparseGraph  # noqa: E402

TITLE = "Sparse arbitrary-structured networks on the GPU (Figs. 4-7)"
PAPER_HW = "GTX 1080 + Xeon E5-2620"


#: Connection budgets given to ``SparseGraph.random_layered`` (the rows show the count it built).
SIZES_QUICK = [50, 200, 1_000, 4_000, 16_000, 70_000]
SIZES_SMOKE = [50, 1_000, 16_000]
SIZES_FULL = [50, 100, 200, 500, 1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 70_000]
#: Levels (network depth); the paper's curve mixes depths, ours keeps them apart.
DEPTHS = [2, 5, 50]
#: Why a series is missing, for the "not run" cells.
MISSING = {"neat": "neat-python not installed", "gpu_call": "no GPU in this run"}


def measure(args):
    """One row per (levels, connections): sequential and GPU times of one activation.

    Returns ``(rows, skipped)``; ``skipped`` lists ``(levels, budget, connections)`` of the
    budgets that rebuilt a net already measured at that depth (a deep net needs about one
    connection per level, so small budgets all give the same minimal net).
    """
    sizes = sized(args, SIZES_FULL, SIZES_QUICK, SIZES_SMOKE)
    repeat = sized(args, 10, 5, 2)  # the paper: 10 runs (GPU), 5 runs (sequential)
    min_time = 0.0 if args.quick else 0.05  # full size: more samples for the µs-scale small nets
    rows, skipped = [], []
    for n_levels in DEPTHS:
        seen = set()
        for n_edges in sizes:
            g = SparseGraph.random_layered(
                16, 4, n_levels, n_edges, activation="neat_sigmoid", random_state=0
            )
            shape = (int(g.n_active_edges), int(g.n_nodes))
            if shape in seen:  # same draws, same net: measured already
                skipped.append((n_levels, n_edges, shape[0]))
                continue
            seen.add(shape)
            x = np.random.default_rng(1).normal(size=16)
            ref = g.forward(x, device="cpu")
            r = {"levels": n_levels, "edges": shape[0], "nodes": shape[1], "budget": n_edges}
            r["cpu"] = time_cpu(lambda: g.forward(x, device="cpu"), repeat=repeat, min_time=min_time)  # noqa: B023
            if neat is not None:
                net = neat_network(g)
                xl = [float(v) for v in x]
                got = np.asarray(net.activate(xl))
                r["neat_err"] = float(np.max(np.abs(got - ref) / (np.abs(ref) + 1e-300)))
                r["neat"] = time_cpu(lambda: net.activate(xl), repeat=repeat, min_time=min_time)  # noqa: B023
            if args.gpu:
                import cupy as cp

                from sknn_gpu.sparse._graph_cuda import prepared_forward

                got = g.forward(x, device="cuda")
                r["gpu_err"] = float(np.max(np.abs(got - ref) / (np.abs(ref) + 1e-300)))
                r["gpu_call"] = time_cpu(
                    lambda: g.forward(x, device="cuda"),  # noqa: B023
                    repeat=10 * repeat,
                    min_time=min_time,
                )
                launch, _ = prepared_forward(g, cp.asarray(x[None, :]))
                r["gpu_kernel"] = time_gpu(launch, repeat=10 * repeat, warmup=3)
            rows.append(r)
    return rows, skipped


def _ratio(s):
    return f"{s:.1f}×" if s >= 1 else f"{s:.2g}×"


def _speedup(a, b):
    """Speed-up of time ``b`` over time ``a`` (``a / b``), or a dash when one is missing."""
    if not (a and b):
        return "—"
    return _ratio(a / b)


def fig4_table(args, rows):
    cols = [
        "levels",
        "connections",
        "ours: neat-python activate (sequential)",
        "ours: CPU SciPy",
        "ours: GPU call (NumPy in/out)",
        "ours: GPU kernel only",
        "ours speed-up neat / GPU call",
        "ours speed-up CPU SciPy / GPU call",
        "ours speed-up neat / CPU SciPy",
        "paper speed-up (Fig. 7)",
        "differs because",
    ]
    out = []
    for r in rows:
        e = r["edges"]
        if e < 2_000:
            paper = "< 1 on the smallest nets, then ≈ 1"
        elif e <= 8_000:
            paper = "≈ 1"
        elif e >= 60_000:
            paper = "≈ 15× (at 70,000)"
        else:
            paper = "grows linearly from ≈ 1 at 8,000 to ≈ 15× at 70,000"
        why = []
        if neat is None:
            why.append("neat-python not installed here: its row is skipped")
        if not args.gpu:
            why.append("no GPU in this run")
        why.append(f"H100 vs {PAPER_HW}; paper's sequential code is its own (language not stated)")
        out.append(
            {
                "levels": r["levels"],
                "connections": f"{e:,}",
                "ours: neat-python activate (sequential)": fmt_time(r.get("neat"))
                + (f" (err {r['neat_err']:.0e})" if "neat_err" in r else ""),
                "ours: CPU SciPy": fmt_time(r["cpu"]),
                "ours: GPU call (NumPy in/out)": fmt_time(r.get("gpu_call")),
                "ours: GPU kernel only": fmt_time(r.get("gpu_kernel")),
                "ours speed-up neat / GPU call": _speedup(r.get("neat"), r.get("gpu_call")),
                "ours speed-up CPU SciPy / GPU call": _speedup(r["cpu"], r.get("gpu_call")),
                "ours speed-up neat / CPU SciPy": _speedup(r.get("neat"), r.get("cpu")),
                "paper speed-up (Fig. 7)": paper,
                "differs because": "; ".join(why),
            }
        )
    print(paper_table("Figs. 4-7: activation time of one sample vs connections", out, cols))


def _slope(rows, key, levels):
    sel = [(r["edges"], r[key]) for r in rows if r["levels"] == levels and r.get(key)]
    if len(sel) < 2:
        return None
    e, t = np.log([s[0] for s in sel]), np.log([s[1] for s in sel])
    return float(np.polyfit(e, t, 1)[0])


def _ratios(rows, levels, key, base):
    """Sorted ``(connections, base time / key time)`` at one depth: the speed-up of ``key``."""
    return sorted(
        (r["edges"], r[base] / r[key]) for r in rows if r["levels"] == levels and r.get(key) and r.get(base)
    )


def _crossover(rows, levels, key, base="neat"):
    """Smallest connection count from which ``base`` / ``key`` stays >= 1 up to the largest net.

    ``'never'`` when ``key`` is not faster at the largest net, None when either series
    was not measured. Equal to the smallest net measured when ``key`` is never slower.
    """
    sel = _ratios(rows, levels, key, base)
    if not sel:
        return None
    above = [e for i, (e, _) in enumerate(sel) if all(s >= 1 for _, s in sel[i:])]
    return above[0] if above else "never"


def _not_run(rows, key, base):
    return "not run (" + "; ".join(MISSING[k] for k in (key, base) if not any(r.get(k) for r in rows)) + ")"


def _versus(rows, levels, key, base):
    """One cell: from which connection count ``key`` stays faster than ``base`` (measured)."""
    sel = _ratios(rows, levels, key, base)
    cross = _crossover(rows, levels, key, base)
    if cross is None:
        return _not_run(rows, key, base)
    (e0, s0), (e1, s1) = sel[0], sel[-1]
    if cross == "never":
        return f"not faster at the largest net ({_ratio(s1)} at {e1:,} connections; {_ratio(s0)} at {e0:,})"
    if cross == e0:
        return (
            f"faster at every net measured, no crossover ({_ratio(s0)} at the smallest, {e0:,} connections)"
        )
    ep, sp = [(e, s) for e, s in sel if e < cross][-1]
    below = f"{_ratio(sp)} at {ep:,}" + (f", {_ratio(s0)} at {e0:,}" if ep != e0 else "")
    return f"crossover at {cross:,} connections: faster from there on, slower below ({below})"


def _slower_on_small(rows, levels, key, base):
    """Short claim cell: is ``key`` slower than ``base`` on the smallest net, and where it stops being."""
    sel = _ratios(rows, levels, key, base)
    cross = _crossover(rows, levels, key, base)
    if cross is None:
        return _not_run(rows, key, base)
    e0, s0 = sel[0]
    yes = "yes" if s0 < 1 else "no"
    if cross == "never":
        return f"{yes} ({_ratio(s0)} at {e0:,} connections, not faster even at the largest net)"
    if cross == e0:
        return f"{yes} ({_ratio(s0)} at {e0:,} connections, faster at every net measured)"
    return f"{yes} ({_ratio(s0)} at {e0:,} connections, faster from {cross:,} on)"


PAPER_CROSS = (
    "GPU < 1 on very small nets (copies to and from the device), ≈ 1 up to ~8,000 connections, > 1 beyond"
)


def crossover_table(args, rows):
    """Per depth: from which connection count our GPU call stays faster (Fig. 7's crossover, ours)."""
    cols = [
        "levels",
        "connections measured",
        "ours: GPU call vs our CPU path (what a user picks between)",
        "ours: GPU call vs neat-python",
        "ours: our CPU path vs neat-python",
        "paper (Fig. 7: GPU vs its sequential code)",
        "differs because",
    ]
    out = []
    for L in sorted({r["levels"] for r in rows}):
        edges = sorted(r["edges"] for r in rows if r["levels"] == L)
        why = []
        if not args.gpu:
            why.append("no GPU in this run")
        if neat is None:
            why.append("neat-python not installed here")
        why.append(
            "the paper's curve mixes depths (its jagged line), ours is per depth; "
            f"H100 vs {PAPER_HW}; the paper's sequential code is its own"
        )
        out.append(
            {
                "levels": L,
                "connections measured": f"{edges[0]:,} – {edges[-1]:,} ({len(edges)} nets)",
                cols[2]: _versus(rows, L, "gpu_call", "cpu"),
                cols[3]: _versus(rows, L, "gpu_call", "neat"),
                cols[4]: _versus(rows, L, "cpu", "neat"),
                cols[5]: PAPER_CROSS,
                "differs because": "; ".join(why),
            }
        )
    print(
        paper_table(
            "Fig. 7 crossover for us: from which connection count the first-named path stays faster",
            out,
            cols,
        )
    )


def claims_table(args, rows):
    depths = sorted({r["levels"] for r in rows})
    largest = max(r["edges"] for r in rows)
    out = []
    for L in depths:
        big = [
            r
            for r in rows
            if r["levels"] == L and r["edges"] == max(q["edges"] for q in rows if q["levels"] == L)
        ][0]
        s_neat, s_cpu = _slope(rows, "neat", L), _slope(rows, "cpu", L)
        out.append(
            {
                "claim": f"Fig. 4: sequential time linear in connections ({L} levels)",
                "ours": (
                    f"neat-python ∝ connections^{s_neat:.2f}"
                    if s_neat is not None
                    else "neat-python: not run"
                )
                + (f"; our CPU ∝ connections^{s_cpu:.2f}" if s_cpu is not None else ""),
                "paper": "linear (slope 1 on log-log)",
                "differs because": "our CPU path is vectorised per level: "
                "its fixed per-level cost dominates small nets",
            }
        )
        gp = [r["gpu_call"] for r in rows if r["levels"] == L and r.get("gpu_call")]
        out.append(
            {
                "claim": f"Fig. 5: GPU time nearly flat in connections ({L} levels)",
                "ours": f"{fmt_time(min(gp))} – {fmt_time(max(gp))} (call)" if gp else "not run (no GPU)",
                "paper": "1 ms – 2.5 ms",
                "differs because": f"H100 and one fused launch vs {PAPER_HW} with one __syncthreads per level"
                if gp
                else "no GPU in this run",
            }
        )
        small = min((r for r in rows if r["levels"] == L), key=lambda r: r["edges"])
        if not small.get("gpu_call"):
            why = "no GPU in this run"
        elif small["cpu"] >= small["gpu_call"]:
            why = (
                f"vs our CPU: on the {small['edges']:,}-connection net our CPU path already costs "
                f"{fmt_time(small['cpu'])} (one SciPy product per level, {L} levels), the GPU call "
                f"{fmt_time(small['gpu_call'])} (copies and launch included)"
            )
        else:
            why = (
                f"vs our CPU it agrees: on the {small['edges']:,}-connection net the GPU call "
                f"({fmt_time(small['gpu_call'])}, copies and launch) costs more than our CPU path "
                f"({fmt_time(small['cpu'])})"
            )
        if small.get("gpu_call") and small.get("neat"):
            agree = "agrees" if small["neat"] < small["gpu_call"] else "does not agree"
            why += f"; vs neat-python (a per-node Python loop, {fmt_time(small['neat'])} there) it {agree}"
        out.append(
            {
                "claim": f"Fig. 7: GPU slower than sequential on small nets ({L} levels)",
                "ours": f"GPU call vs our CPU: {_slower_on_small(rows, L, 'gpu_call', 'cpu')}"
                f"; vs neat-python: {_slower_on_small(rows, L, 'gpu_call', 'neat')}",
                "paper": f"yes: {PAPER_CROSS}",
                "differs because": why,
            }
        )
        out.append(
            {
                "claim": f"Fig. 7: speed-up at the largest net ({big['edges']:,} connections, {L} levels)",
                "ours": (
                    "neat / GPU call: "
                    + (
                        _speedup(big.get("neat"), big.get("gpu_call"))
                        + f" (kernel only {_speedup(big.get('neat'), big.get('gpu_kernel'))})"
                        if big.get("neat") and big.get("gpu_call")
                        else "not run (needs neat-python and a GPU)"
                    )
                    + (f"; neat / our CPU: {_speedup(big['neat'], big['cpu'])}" if big.get("neat") else "")
                    + (
                        f"; our CPU / GPU call: {_speedup(big['cpu'], big['gpu_call'])}"
                        if big.get("gpu_call")
                        else ""
                    )
                ),
                "paper": "≈ 15× at 70,000 connections"
                if largest >= 60_000
                else "≈ 15× at 70,000 (not reached with --quick)",
                "differs because": "different sequential baseline (neat-python vs the paper's own code) "
                "and hardware",
            }
        )
    print(
        paper_table(
            "The paper's claims, ours beside them", out, ["claim", "ours", "paper", "differs because"]
        )
    )


def plots(args, rows):
    depths = sorted({r["levels"] for r in rows})
    colour = {L: f"C{i}" for i, L in enumerate(depths)}  # one colour per depth, one style per series
    fig, axes = new_figure(args, 1, 2, figsize=(11, 4))
    if fig is None:
        return
    series = [
        ("neat", "neat-python activate (sequential)", "o-"),
        ("cpu", "ours CPU (SciPy)", "s-"),
        ("gpu_call", "ours GPU call", "^-"),
        ("gpu_kernel", "ours GPU kernel only", "v--"),
    ]
    for log, ax in zip((False, True), axes):
        for L in depths:
            for key, label, style in series:
                sel = [(r["edges"], r[key]) for r in rows if r["levels"] == L and r.get(key)]
                if sel:
                    ax.plot(*zip(*sel), style, color=colour[L], label=f"{label}, {L} levels", markersize=4)
        ax.set_xlabel("connections")
        ax.set_ylabel("seconds per activation (batch 1)")
        if log:
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title("Fig. 6 analogue (log-log)", fontsize=9)
        else:
            ax.set_title("Figs. 4/5 analogue", fontsize=9)
        ax.grid(True, alpha=0.3)
    axes[1].legend(fontsize=6)
    save_plot(fig, args.plots, "sparsenet_fig4_fig6")
    fig, ax = new_figure(args, figsize=(7, 4.5))
    if fig is None:
        return
    label = {"neat": "neat-python", "cpu": "ours CPU", "gpu_call": "ours GPU call"}
    for L in depths:
        for key, base, style in (
            ("gpu_call", "cpu", "^-"),
            ("gpu_call", "neat", "o--"),
            ("cpu", "neat", "s:"),
        ):
            sel = _ratios(rows, L, key, base)
            if sel:
                ax.plot(
                    *zip(*sel),
                    style,
                    color=colour[L],
                    label=f"{label[base]} / {label[key]}, {L} levels",
                    markersize=4,
                )
        cross = _crossover(rows, L, "gpu_call", "cpu")
        if isinstance(cross, int) and cross > min(r["edges"] for r in rows if r["levels"] == L):
            ax.axvline(
                cross,
                color=colour[L],
                ls="-.",
                lw=1,
                label=f"GPU call beats our CPU from {cross:,}, {L} levels",
            )
    ax.axhline(1.0, color="red", lw=1)
    ax.set_xlabel("connections")
    ax.set_xscale("log")
    ax.set_ylabel("speed-up")
    ax.set_yscale("log")
    ax.set_title("Fig. 7 analogue (red: speed-up 1; dash-dot: our GPU-vs-CPU crossover)", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=6)
    save_plot(fig, args.plots, "sparsenet_fig7")


def main(argv=None):
    args = parse_args(__doc__.splitlines()[0], argv)
    t0 = time.perf_counter()
    heading(TITLE, args)
    if neat is None:
        print("_neat-python is not installed: the sequential neat-python rows are skipped._\n")
    rows, skipped = measure(args)
    fig4_table(args, rows)
    crossover_table(args, rows)
    claims_table(args, rows)
    plots(args, rows)
    print(
        "Notes: times are medians of repeated single-sample activations (the paper averages 10 GPU "
        "and 5 sequential runs). The neat-python network is built from our level plan (same nodes, "
        "links and NEAT sigmoid; its own `create` is quadratic and takes minutes at 70,000 links); "
        "'err' is its largest relative difference from our CPU output. 'connections' is the count "
        "the generator built (it drops duplicate draws, and a net of L levels needs about L "
        "connections at least). A crossover is the smallest net from which the faster path stays "
        "faster up to the largest one measured.\n"
    )
    if skipped:
        print(
            "Budgets not measured again (they built the same net as a smaller budget at that depth): "
            + "; ".join(f"{L} levels, budget {b:,} → {e:,} connections" for L, b, e in skipped)
            + ".\n"
        )
    print(f"_total run time {time.perf_counter() - t0:.1f} s_\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
