"""Reproduce da Cunha, Rivet, Natale & Rossi, *A GPU implementation of FlyHash* (flyhash-gpu-wta.md)
with :class:`sknn_gpu.fly.FlyHashTransformer`.

    python benchmarks/reproduce/repro_flyhash.py [--quick] [--plots DIR] [--device auto|cpu|cuda]

* Fig. 4: FashionMNIST shape (60,000 x 784) and CIFAR-10 shape (50,000 x 3,072), hash factor
  h=32 (m = h·d units, s = 5% of d inputs per unit, k = 5% of m winners).
* Fig. 5: batch sweep n = 2^1 ... 2^15 with d=1,024, h=128.
* The bisection's wrong entries against its number of halvings (``bisect_steps``) at the
  paper's 20,000 x 5,000 output (its text: 64 halvings leave about 2.095e-7 wrong, 278 suffice).

Each on the CPU and (when present) the GPU, with our exact winner-take-all
(``algorithm='exact'``: exactly k winners, one fused kernel on the GPU) and the paper's
per-row threshold bisection (``algorithm='bisect'``, 64 halvings). The paper's figures are bar
and line plots whose values its text does not state; its text claims the GPU is one order of
magnitude faster than the CPU, and that 64 halvings leave about 2.095e-7 of the entries wrong.

Data: uniform [0, 1) float32 of the datasets' shapes (the datasets are not available offline; the
paper's sweep uses the same distribution). CPU rows are timed on a slice of the rows and scaled
linearly to the full size (stated in the table).
"""

from __future__ import annotations

import time

import numpy as np
from _common import fmt_time, heading, new_figure, paper_table, parse_args, save_plot
from _harness import time_cpu, time_gpu

from sknn_gpu.fly import FlyHashTransformer

TITLE = "FlyHash on the GPU (da Cunha et al.): exact winner-take-all vs bisection, CPU vs GPU"
HW = "paper: Julia on a Xeon Gold 6240 and a Quadro RTX 8000; ours: NumPy/SciPy and our CUDA kernel here"
PAPER_SPEEDUP = "GPU ≈ 10× the CPU (one order of magnitude, text)"
PAPER_ERR = 2.095e-7


def sizes(d, h):
    m = h * d
    return m, int(0.05 * d), int(0.05 * m)


_FITTED = {}


def hasher(d, h, algorithm, device):
    """A fitted hash of the paper's sizes; one fit per (shape, device), ``algorithm`` set after.

    The projection depends only on the sizes and the seed, so the exact and bisection rows
    (and the CPU and GPU rows) hash with the same projection.
    """
    key = (d, h, device)
    if key not in _FITTED:
        m, s, k = sizes(d, h)
        fh = FlyHashTransformer(
            n_components=m, n_connections=s, k=k, output="packed", random_state=0, device=device
        )
        _FITTED[key] = fh.fit(np.zeros((1, d), dtype=np.float32))
    return _FITTED[key].set_params(algorithm=algorithm)


def bits(packed, m):
    return np.unpackbits(np.asarray(packed), axis=1)[:, :m]


def time_device(fh, X, device, repeat):
    """Median seconds of ``fh.transform(X)`` (CUDA events on device-resident X for the GPU)."""
    if device == "cuda":
        import cupy

        Xd = cupy.asarray(X)
        out = cupy.asnumpy(fh.transform(Xd))  # also the warm-up (kernel compilation)
        secs = time_gpu(lambda: fh.transform(Xd), repeat=repeat, warmup=0)
        del Xd
        cupy.get_default_memory_pool().free_all_blocks()
        return secs, out
    if repeat == 1:  # slow rows: time the one call that produces the output
        t0 = time.perf_counter()
        out = fh.transform(X)
        return time.perf_counter() - t0, out
    secs = time_cpu(lambda: fh.transform(X), repeat=repeat, warmup=1)
    return secs, fh.transform(X)


QUALITY_ROWS = 4096


def quality(exact, bis, m, k):
    """(rows with exactly k winners, fraction of entries where bisection differs from exact).

    Measured on the first ``QUALITY_ROWS`` rows (unpacking every row would take gigabytes).
    """
    b, e = bits(bis[:QUALITY_ROWS], m), bits(exact[:QUALITY_ROWS], m)
    return float(np.mean(b.sum(axis=1) == k)), float(np.mean(b != e))


# ---------------------------------------------------------------- Fig. 4
def fig4(args, name, n, d, h, cpu_rows, gpu_bisect_rows):
    m, s, k = sizes(d, h)
    rng = np.random.default_rng(0)
    X = rng.random((n, d), dtype=np.float32)
    results = {}
    devices = (["cuda"] if args.gpu else []) + ["cpu"]
    for device in devices:
        for alg in ("exact", "bisect"):
            rows = n if device == "cuda" else min(n, cpu_rows)
            if device == "cuda" and alg == "bisect":
                rows = min(n, gpu_bisect_rows)
            repeat = (10 if alg == "exact" else 3) if device == "cuda" else (3 if rows * m <= 2e7 else 1)
            secs, out = time_device(hasher(d, h, alg, device), X[:rows], device, repeat)
            results[(device, alg)] = (secs * n / rows, rows, out)
    table = []
    for (device, alg), (secs, rows, out) in results.items():
        exact_out = results[(device, "exact")][2]
        if alg == "exact":
            q = f"exactly k={k:,} per row"
            if device == "cpu" and ("cuda", "exact") in results:
                same = np.array_equal(out, results[("cuda", "exact")][2][: out.shape[0]])
                q += "; bit-identical to GPU" if same else "; DIFFERS from GPU"
        else:
            r = min(out.shape[0], exact_out.shape[0], QUALITY_ROWS)
            ok_rows, err = quality(exact_out[:r], out[:r], m, k)
            q = f"{ok_rows:.2%} rows with k winners; {err:.2e} of entries ≠ exact"
        scaled = f"timed on {rows:,} rows, ×{n / rows:.1f}" if rows < n else "all rows"
        table.append(
            {
                "ours": f"{alg} ({'GPU' if device == 'cuda' else 'CPU'})",
                "ours time": fmt_time(secs),
                "timed": scaled,
                "quality": q,
                "paper": "— (bar heights only)",
            }
        )
    dev = "cuda" if args.gpu else "cpu"
    speed = results[("cpu", "exact")][0] / results[(dev, "exact")][0]
    table.append(
        {
            "ours": "GPU vs CPU speedup, exact",
            "ours time": f"{speed:.1f}×" if args.gpu else "— (no GPU in this run)",
            "paper": PAPER_SPEEDUP,
            "differs because": HW + "; our CPU path is multithreaded NumPy/SciPy" if args.gpu else "",
        }
    )
    for device in devices:
        r = min(results[(device, "bisect")][2].shape[0], results[(device, "exact")][2].shape[0], QUALITY_ROWS)
        _, err = quality(results[(device, "exact")][2][:r], results[(device, "bisect")][2][:r], m, k)
        table.append(
            {
                "ours": f"bisection: entries ≠ exact top-k ({'GPU' if device == 'cuda' else 'CPU'})",
                "ours time": f"{err:.2e}",
                "timed": f"{r:,} × {m:,} entries",
                "paper": f"{PAPER_ERR:.3e} (64 halvings, 20,000 × 5,000 output)",
                "differs because": "other shape and data; ties at the threshold count as errors here "
                "(exact breaks them by lower index)",
            }
        )
    print(
        paper_table(
            f"Fig. 4 — {name} shape: n={n:,}, d={d:,}, h={h} -> m={m:,}, s={s}, k={k:,}",
            table,
            ["ours", "ours time", "timed", "quality", "paper", "differs because"],
        )
    )
    return {key: v[0] for key, v in results.items()}


# ---------------------------------------------------------------- Fig. 5
def fig5(args, exps, cpu_max, h=128):
    d = 1024
    m, s, k = sizes(d, h)
    rng = np.random.default_rng(1)
    X = rng.random((2 ** max(exps), d), dtype=np.float32)
    devices = (["cuda"] if args.gpu else []) + ["cpu"]
    keys = [(dev, alg) for dev in devices for alg in ("exact", "bisect")]
    times = {key: {} for key in keys}
    rows = []
    for e in exps:
        n = 2**e
        row = {"n": f"{n:,}"}
        for dev, alg in keys:
            if dev == "cpu" and n > cpu_max:
                row[f"ours {alg} {dev.upper()}"] = "—"
                continue
            repeat = 3 if (dev == "cpu" or n > 4096) else 10
            secs, _ = time_device(
                hasher(d, h, alg, dev), X[:n], dev, repeat if n <= 16 or dev == "cuda" else 1
            )
            times[(dev, alg)][n] = secs
            row[f"ours {alg} {'GPU' if dev == 'cuda' else 'CPU'}"] = fmt_time(secs)
        if args.gpu and n in times[("cpu", "exact")]:
            row["ours GPU/CPU speedup (exact)"] = (
                f"{times[('cpu', 'exact')][n] / times[('cuda', 'exact')][n]:.1f}×"
            )
        if len(row) > 1 and any(v != "—" for k_, v in row.items() if k_ != "n"):
            rows.append(row)  # (a CPU-only run has nothing to show above the CPU rows' limit)
    rows[-1]["paper"] = PAPER_SPEEDUP
    rows[-1]["differs because"] = HW
    cols = ["n"]
    if args.gpu:
        cols += ["ours exact GPU", "ours bisect GPU"]
    cols += ["ours exact CPU", "ours bisect CPU"]
    if args.gpu:
        cols += ["ours GPU/CPU speedup (exact)"]
    cols += ["paper", "differs because"]
    print(
        paper_table(
            f"Fig. 5 — batch sweep: d={d:,}, h={h}{' (quick; paper h=128)' if h != 128 else ''} -> m={m:,}, "
            f"s={s}, k={k:,} (CPU rows up to n={cpu_max:,})",
            rows,
            cols,
        )
    )
    fig, ax = new_figure(args)
    if fig is not None:
        for (dev, alg), t in times.items():
            if t:
                ns = sorted(t)
                ax.loglog(ns, [t[n] for n in ns], marker="o", label=f"ours {alg} ({dev})")
        ax.set_xlabel("batch size n")
        ax.set_ylabel("transform time (s)")
        ax.set_title(f"Fig. 5: d={d}, h={h}")
        ax.legend()
        save_plot(fig, args.plots, "flyhash_fig5_batch_sweep")


def plot_fig4(args, res):
    fig, ax = new_figure(args)
    if fig is None:
        return
    names = list(res)
    keys = sorted({key for r in res.values() for key in r})
    width = 0.8 / len(keys)
    for i, key in enumerate(keys):
        ax.bar(
            np.arange(len(names)) + i * width,
            [res[nm].get(key, np.nan) for nm in names],
            width,
            label="/".join(key),
        )
    ax.set_xticks(np.arange(len(names)) + 0.4 - width / 2, names)
    ax.set_yscale("log")
    ax.set_ylabel("transform time (s)")
    ax.set_title("Fig. 4: h=32")
    ax.legend()
    save_plot(fig, args.plots, "flyhash_fig4_datasets")


# ---------------------------------------------------------------- halvings vs wrong entries
PAPER_WRONG_AT_64 = 2.095e-7


def _tied_at_k(fh, x, k):
    """Whether the k-th and (k+1)-th largest activations of row ``x`` are equal, with the
    activations summed as the estimator sums them (float32, connections in ascending order)."""
    C = fh.components_.tocsr()
    s = fh.n_connections_
    idx = np.sort(C.indices.reshape(C.shape[0], s), axis=1)  # every unit has s connections
    acc = np.zeros(C.shape[0], dtype=np.float32)
    x = np.asarray(x, dtype=np.float32)
    for t in range(s):
        acc = acc + x[idx[:, t]]
    a = np.sort(acc)[::-1]
    return bool(a[k - 1] == a[k])


def halvings(args, n, d, m, steps_list):
    """The paper's error statement as a figure: entries of the bisection's output that differ
    from the exact top-k, against the number of halvings (``bisect_steps``), at its output
    size n x m. The verdicts can fail: the fraction must not grow with more halvings, must
    reach 0 by 278 (the paper's bound for float32), and is compared with the paper's
    2.095e-7 at 64.
    """
    rng = np.random.default_rng(0)
    X = rng.random((n, d), dtype=np.float32)
    s, k = max(1, round(0.05 * d)), max(1, round(0.05 * m))
    params = dict(n_components=m, n_connections=s, k=k, output="dense", random_state=0, device="cpu")
    exact = FlyHashTransformer(**params).fit(X).transform(X)
    rows, fracs = [], []
    for steps in steps_list:
        H = FlyHashTransformer(algorithm="bisect", bisect_steps=steps, **params).fit(X).transform(X)
        frac = float(np.mean(H != exact))
        fracs.append(frac)
        rows.append(
            {
                "halvings": steps,
                "ours: entries ≠ exact top-k": f"{frac:.3e}",
                "ours: rows with exactly k": f"{np.mean(H.sum(axis=1) == k):.4f}",
                "paper": "64 halvings: ≈ 2.095e-7 of the entries wrong (20,000 × 5,000); at most 278 "
                "needed for float32"
                if steps in (64, 278)
                else "",
            }
        )
    monotone = all(a >= b for a, b in zip(fracs, fracs[1:], strict=False))
    # rows still wrong after the last count of halvings: is each one tied at the k-th value?
    # (bisection keeps all or none of equal activations; the exact top-k breaks ties by index)
    fh = FlyHashTransformer(**params).fit(X)
    wrong = np.flatnonzero((H != exact).any(axis=1))
    tied = [_tied_at_k(fh, X[r], k) for r in wrong]
    rows[-1]["differs because"] = (
        f"{len(wrong)} row(s) left, {sum(tied)} of them with equal k-th and (k+1)-th activations"
        if len(wrong)
        else ""
    )
    exact_at_278 = 278 in steps_list and (fracs[list(steps_list).index(278)] == 0.0 or all(tied))
    at64 = fracs[list(steps_list).index(64)] if 64 in steps_list else None
    near = at64 is not None and (at64 == 0.0 or 0.1 <= at64 / PAPER_WRONG_AT_64 <= 10)
    print(
        paper_table(
            f"Bisection halvings vs wrong entries: {n:,} × {m:,} output (d={d}, s={s}, k={k}), CPU",
            rows,
            list(rows[0]),
        )
    )
    print(
        f"Never more wrong entries with more halvings: {'yes' if monotone else 'NO'}; "
        f"none wrong at 278 halvings except rows tied at the k-th value: {'yes' if exact_at_278 else 'NO'}; "
        f"at 64 halvings ours {at64:.3e} vs the paper's {PAPER_WRONG_AT_64:.3e} (within 10x, or 0): "
        f"{'yes' if near else 'NO'}. Our inputs are uniform [0, 1) (the paper's data for this "
        "statement are not given).\n"
    )
    return steps_list, fracs


def main(argv=None):
    args = parse_args(__doc__.splitlines()[0], argv)
    heading(TITLE, args)
    print(
        "Times are for `transform` with `output='packed'` (GPU: CUDA-event medians on device-resident "
        "input; CPU: wall time). Data: uniform [0, 1) float32 of the datasets' shapes.\n"
    )
    res = {}
    if args.smoke:
        res["FashionMNIST"] = fig4(
            args, "FashionMNIST (smoke: 100 rows, h=4 instead of 32)", 100, 784, 4, 100, 100
        )
        res["CIFAR-10"] = fig4(args, "CIFAR-10 (smoke: 20 rows, h=1 instead of 32)", 20, 3072, 1, 20, 20)
        fig5(args, range(1, 6), 32, h=4)
        halvings(args, 200, 250, 1_000, (8, 16, 32, 64, 278))
    elif args.quick:
        res["FashionMNIST"] = fig4(args, "FashionMNIST (quick: 500 rows)", 500, 784, 32, 500, 500)
        # drawing the paper's CIFAR-10 and sweep projections alone takes seconds on a small CPU:
        # the quick run shrinks the hash factor there (stated in the titles)
        res["CIFAR-10"] = fig4(args, "CIFAR-10 (quick: 100 rows, h=4 instead of 32)", 100, 3072, 4, 100, 100)
        fig5(args, range(1, 8), 128, h=16)
        halvings(args, 1_000, 250, 5_000, (8, 16, 24, 32, 48, 64, 128, 278))
    else:
        res["FashionMNIST"] = fig4(args, "FashionMNIST", 60_000, 784, 32, 4_000, 60_000)
        res["CIFAR-10"] = fig4(args, "CIFAR-10", 50_000, 3072, 32, 200, 10_000)
        fig5(args, range(1, 16), 256)
        halvings(args, 20_000, 250, 5_000, (8, 16, 24, 32, 48, 64, 128, 278))
    plot_fig4(args, res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
