"""GEMV/GER kernels (the paper's Tables I-II) and MLP training (its Fig. 3).

Part 1, ``sknn_gpu.linalg``: ours vs cuBLAS (``cupy.cublas.gemv/ger``) vs CPU BLAS
(SciPy) on the shapes of the paper's Table I (gemv, both transposes) and Table II
(ger), float32; kernel time (CUDA events) and Python call time (wall, synced), plus
the large matrices (>= 64 MB) where the copy-bandwidth floor (3.0 TB/s) matters.
Floor per call: bytes moved / 3.0 TB/s (+ one 7 us launch for call time).

Three times per call: "events" (CUDA events around ONE call on an idle GPU, so the
Python time before the launch is inside it), "kernel (queued)" (events around 20 calls
queued behind a spin kernel, divided by 20: the GPU time alone, launch gaps included),
and "call" (wall clock of one call including the final synchronisation).

Part 2, GPUMLPClassifier on MNIST-shaped data ({784, N, 10}, 60,000 samples, random
pixels: the timing does not depend on the values): one epoch of per-sample SGD
(batch_size=1, no momentum, as in the paper) and of minibatch-200 SGD; ours (fused
kernel / cuBLAS GEMM) vs our 'cublas' composition vs scikit-learn's MLPClassifier on
the CPU. Slow peers run on a subset and are scaled to 60,000 samples (said in the row).

PyTorch peers: the same {784, N, 10} ReLU network, softmax cross-entropy,
plain SGD (lr 0.01, weight decay 1e-4, no momentum), one epoch in a shuffled order, per
sample (batch 1) and per minibatch of 200, eager and with the training step captured as
one CUDA graph (warm-up on a side stream, then a copy of the sample into static buffers
and a replay per step); per-sample epochs run on a subset and are scaled (said in the
table). "vs strongest peer" is ours / the fastest PyTorch variant.

For ``gemv``/``ger`` the peers are cuBLAS via CuPy and PyTorch's ``torch.mv`` /
``torch.addr_`` (in place: A += x yᵀ), timed the same three ways when torch is installed.

Part 3 (``--part defaults``), GPUMLPClassifier at scikit-learn's defaults (Adam, batch
200) against the same training step in PyTorch, eager and captured as a CUDA graph, one
epoch of 60,000 x 784, for the hidden layers given by ``--hidden`` (repeatable, e.g.
``--hidden 100 --hidden 512,256``), ``--solver`` and ``--batch-size``; then
``predict_proba`` of 10,000 rows against ``torch.no_grad()`` inference on the same weights.

``--plot PATH`` writes the Fig. 3-style plot (epoch time vs N) when matplotlib exists.
"""

import argparse
import sys
import time
import warnings

import numpy as np
from _harness import (
    environment_header,
    fmt_time,
    optional_import,
    time_call,
    time_cpu,
    time_gpu,
    torch_cuda,
    torch_graph,
)

from sknn_gpu._backend import cuda_available


def _cublas():
    """CuPy's cuBLAS wrappers (``cupy.cublas``), imported explicitly (it is not loaded by ``import cupy``)."""
    import importlib

    return importlib.import_module("cupy.cublas")


TABLE1 = [(256, 256), (512, 512), (1024, 1024), (2048, 2048), (4096, 4096)] + [
    (r, c) for r in (128, 256) for c in (256, 512, 1024, 2048, 4096, 8192, 16384) if c > r
]
TABLE2 = [(256, 256), (512, 512), (1024, 1024), (2048, 2048), (4096, 4096)] + [
    (r, c) for r in (128, 256) for c in (256, 512, 1024, 2048, 4096, 8192) if c > r
]
BIG = [(8192, 8192), (16384, 16384), (4096, 32768), (65536, 512)]


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--part", choices=["all", "linalg", "mlp", "defaults", "profile", "tune"], default="all")
    p.add_argument("--plot", default=None)
    d = p.add_argument_group("--part defaults")
    d.add_argument(
        "--hidden",
        action="append",
        default=None,
        help="hidden layer sizes, e.g. 100 or 512,256 (repeat the flag; default: 100, 1280 and 512,256)",
    )
    d.add_argument("--solver", choices=["adam", "sgd"], default="adam")
    d.add_argument("--batch-size", type=int, default=200)
    d.add_argument("--samples", type=int, default=None, help="training rows (60,000; 6,000 with --quick)")
    d.add_argument("--repeat", type=int, default=5, help="timed fits per row (median)")
    d.add_argument(
        "--per-sample",
        action="store_true",
        help="also per-sample SGD (batch_size=1, the fused kernel) against PyTorch's per-sample step",
    )
    return p.parse_args(argv)


def _try(fn):
    """Time a peer; a peer that fails (API change, unsupported shape) prints — instead of aborting."""
    try:
        return fn()
    except Exception as exc:  # pragma: no cover - depends on the installed CuPy
        print(f"<!-- peer failed: {type(exc).__name__}: {exc} -->", file=sys.stderr)
        return None


def _gbps(nbytes, s):
    return f"{nbytes / s / 1e9:,.0f}" if s else "—"


_SPIN = {}


def _spin(us):
    """Keep the GPU busy for ``us`` microseconds (a clock64 loop), so later launches queue up."""
    import cupy

    dev = cupy.cuda.Device().id
    if dev not in _SPIN:
        src = (
            'extern "C" __global__ void bench_spin(long long cycles)'
            "{ long long t0 = clock64(); while (clock64() - t0 < cycles) { } }"
        )
        khz = cupy.cuda.Device().attributes["ClockRate"]
        _SPIN[dev] = (cupy.RawKernel(src, "bench_spin"), khz)
    k, khz = _SPIN[dev]
    k((1,), (1,), (np.int64(us * khz // 1000),))


def time_queued(fn, n=20, repeat=3):
    """GPU time of one call: events around ``n`` calls queued behind a spin kernel, / n.

    The spin lasts longer than the host takes to queue the calls (checked: a sample whose
    queueing outlasted the spin is dropped), so the calls run back to back and the Python
    time of each call is hidden.
    """
    import cupy

    fn()
    cupy.cuda.get_current_stream().synchronize()
    spin_us = n * 150
    samples = []
    for _ in range(repeat + 2):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        _spin(spin_us)
        t0 = time.perf_counter()
        start.record()
        for _ in range(n):
            fn()
        end.record()
        host_us = (time.perf_counter() - t0) * 1e6
        end.synchronize()
        if host_us < 0.8 * spin_us:
            samples.append(cupy.cuda.get_elapsed_time(start, end) / 1e3 / n)
        if len(samples) >= repeat:
            break
    return float(np.median(samples)) if samples else None


def _torch_times(fn, repeat):
    """A PyTorch peer timed like ours: events around one call, queued, and synced call (the
    default streams of CuPy and PyTorch are the same legacy stream)."""
    return dict(
        torch=time_gpu(fn, repeat=repeat),
        torch_q=time_queued(fn),
        torch_call=time_call(fn, repeat=repeat, device="torch"),
    )


def _torch_cells(row, gpu, torch):
    """The torch columns and the ratio of ours to the strongest peer (cuBLAS or torch)."""
    if torch is None and optional_import("torch") is None or gpu and torch is None:
        why = _torch_missing()
        head = f"{why} | {why} | {why}"
    else:
        head = " | ".join(fmt_time(row.get(k)) for k in ("torch", "torch_q", "torch_call"))
    ratios = []
    for ours, peers in (("ours_q", ("cub_q", "torch_q")), ("ours_call", ("cub_call", "torch_call"))):
        best = min((row[p] for p in peers if row.get(p)), default=None)
        ratios.append(f"{row[ours] / best:.2f}×" if best and row.get(ours) else "—")
    return f"{head} | {' · '.join(ratios)} |"


def bench_gemv(shapes, gpu, repeat):
    from scipy.linalg import blas

    from sknn_gpu.linalg import gemv

    torch = torch_cuda() if gpu else None
    print("### gemv, float32: ours vs cuBLAS vs torch.mv vs CPU BLAS (Table I shapes)\n")
    print(
        "| m × n | op | ours (events) | cuBLAS (events) | ours kernel (queued) | cuBLAS kernel (queued) "
        "| ours call | cuBLAS call | CPU BLAS call | ours GB/s (queued) | floor "
        "| torch.mv (events) | torch.mv (queued) | torch.mv call | ours vs strongest peer (queued · call) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for m, n in shapes:
        A = rng.standard_normal((m, n), dtype=np.float32)
        for trans in (False, True):
            x = rng.standard_normal(m if trans else n, dtype=np.float32)
            y = np.zeros(n if trans else m, dtype=np.float32)
            Af = A.T  # Fortran view for scipy (no copy)
            cpu = time_cpu(lambda: blas.sgemv(1.0, Af, x, trans=0 if trans else 1), repeat=repeat)
            row = {"cpu": cpu}
            nbytes = A.nbytes + x.nbytes + 2 * y.nbytes
            if gpu:
                import cupy

                dA, dx, dy = cupy.asarray(A), cupy.asarray(x), cupy.asarray(y)
                ours = lambda: gemv(dA, dx, dy, trans=trans)  # noqa: E731
                cub = lambda: _cublas().gemv("T" if trans else "N", 1.0, dA, dx, 0.0, dy)  # noqa: E731
                got = gemv(dA, dx, trans=trans).get()
                ref = (A.T @ x) if trans else (A @ x)
                assert np.allclose(got, ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max()), (m, n, trans)
                row.update(
                    ours=time_gpu(ours, repeat=repeat),
                    cub=_try(lambda: time_gpu(cub, repeat=repeat)),
                    ours_q=time_queued(ours),
                    cub_q=_try(lambda: time_queued(cub)),
                    ours_call=time_call(ours, repeat=repeat, device="cuda"),
                    cub_call=_try(lambda: time_call(cub, repeat=repeat, device="cuda")),
                )
                if torch is not None:
                    tA, tx = torch.from_numpy(A).cuda(), torch.from_numpy(x).cuda()
                    ty = torch.from_numpy(y).cuda()
                    op = tA.T if trans else tA
                    tmv = lambda: torch.mv(op, tx, out=ty)  # noqa: E731
                    assert np.allclose(tmv().cpu().numpy(), ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max())
                    row.update(_torch_times(tmv, repeat))
            floor = nbytes / 3.0e12
            print(
                f"| {m} × {n} | {'Aᵀx' if trans else 'Ax'} | {fmt_time(row.get('ours'))} "
                f"| {fmt_time(row.get('cub'))} | {fmt_time(row.get('ours_q'))} "
                f"| {fmt_time(row.get('cub_q'))} "
                f"| {fmt_time(row.get('ours_call'))} | {fmt_time(row.get('cub_call'))} | {fmt_time(cpu)} "
                f"| {_gbps(nbytes, row.get('ours_q'))} | {fmt_time(floor)} | {_torch_cells(row, gpu, torch)}",
                flush=True,
            )
    print()


def bench_ger(shapes, gpu, repeat):
    from scipy.linalg import blas

    from sknn_gpu.linalg import ger

    torch = torch_cuda() if gpu else None
    print("### ger (A += x yᵀ), float32: ours vs cuBLAS vs torch.addr_ vs CPU BLAS (Table II shapes)\n")
    print(
        "| m × n | ours (events) | cuBLAS (events) | ours kernel (queued) | cuBLAS kernel (queued) "
        "| ours call | cuBLAS call | CPU BLAS call | ours GB/s (queued) | floor "
        "| torch.addr_ (events) | torch.addr_ (queued) | torch.addr_ call "
        "| ours vs strongest peer (queued · call) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(1)
    for m, n in shapes:
        A = rng.standard_normal((m, n), dtype=np.float32)
        x = rng.standard_normal(m, dtype=np.float32) * 1e-3
        y = rng.standard_normal(n, dtype=np.float32) * 1e-3
        Af = A.T
        cpu = time_cpu(lambda: blas.sger(1.0, y, x, a=Af, overwrite_a=1), repeat=repeat)
        row = {}
        nbytes = 2 * A.nbytes + x.nbytes + y.nbytes
        if gpu:
            import cupy

            dA, dx, dy = cupy.asarray(A), cupy.asarray(x), cupy.asarray(y)
            check = cupy.asarray(A)
            ger(1.0, dx, dy, check)
            assert np.allclose(check.get(), A + np.outer(x, y), rtol=1e-5, atol=1e-6), (m, n)
            ours = lambda: ger(1.0, dx, dy, dA)  # noqa: E731
            cub = lambda: _cublas().ger(1.0, dx, dy, dA)  # noqa: E731
            row.update(
                ours=time_gpu(ours, repeat=repeat),
                cub=_try(lambda: time_gpu(cub, repeat=repeat)),
                ours_q=time_queued(ours),
                cub_q=_try(lambda: time_queued(cub)),
                ours_call=time_call(ours, repeat=repeat, device="cuda"),
                cub_call=_try(lambda: time_call(cub, repeat=repeat, device="cuda")),
            )
            if torch is not None:
                tA, tx, ty = (torch.from_numpy(v).cuda() for v in (A, x, y))
                tchk = tA.clone().addr_(tx, ty)
                assert np.allclose(tchk.cpu().numpy(), A + np.outer(x, y), rtol=1e-5, atol=1e-6), (m, n)
                row.update(_torch_times(lambda: tA.addr_(tx, ty), repeat))  # noqa: B023 (called at once)
        print(
            f"| {m} × {n} | {fmt_time(row.get('ours'))} | {fmt_time(row.get('cub'))} "
            f"| {fmt_time(row.get('ours_q'))} | {fmt_time(row.get('cub_q'))} "
            f"| {fmt_time(row.get('ours_call'))} "
            f"| {fmt_time(row.get('cub_call'))} | {fmt_time(cpu)} | {_gbps(nbytes, row.get('ours_q'))} "
            f"| {fmt_time(nbytes / 3.0e12)} | {_torch_cells(row, gpu, torch)}",
            flush=True,
        )
    print()


def bench_big(gpu):
    if not gpu:
        return
    import cupy

    from sknn_gpu.linalg import gemv, ger

    print("### Large matrices (float32): bandwidth vs the 3.0 TB/s copy ceiling\n")
    torch = torch_cuda()
    print(
        "| m × n | MB | op | ours (events) | ours kernel (queued) | ours TB/s | % of 3.0 "
        "| cuBLAS (events) | cuBLAS kernel (queued) | cuBLAS TB/s | torch (queued) | torch TB/s "
        "| ours vs strongest peer (queued) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for m, n in BIG:
        dA = cupy.random.standard_normal((m, n), dtype=cupy.float32)
        mb = dA.nbytes / 2**20
        for op in ("Ax", "Aᵀx", "ger"):
            if op == "ger":
                dx = cupy.random.standard_normal(m, dtype=cupy.float32) * 1e-6
                dy = cupy.random.standard_normal(n, dtype=cupy.float32) * 1e-6
                ours = lambda: ger(1.0, dx, dy, dA)  # noqa: E731
                cub = lambda: _cublas().ger(1.0, dx, dy, dA)  # noqa: E731
                tor = None
                if torch is not None:
                    tA, tx, ty = (torch.as_tensor(v, device="cuda") for v in (dA, dx, dy))  # zero-copy views
                    tor = lambda: tA.addr_(tx, ty)  # noqa: E731
                nbytes = 2 * dA.nbytes
            else:
                t = op != "Ax"
                dx = cupy.random.standard_normal(m if t else n, dtype=cupy.float32)
                dy = cupy.zeros(n if t else m, dtype=cupy.float32)
                ours = lambda: gemv(dA, dx, dy, trans=t)  # noqa: E731
                cub = lambda: _cublas().gemv("T" if t else "N", 1.0, dA, dx, 0.0, dy)  # noqa: E731
                tor = None
                if torch is not None:
                    tA, tx, ty = (torch.as_tensor(v, device="cuda") for v in (dA, dx, dy))  # zero-copy views
                    tor = lambda: torch.mv(tA.T if t else tA, tx, out=ty)  # noqa: E731
                nbytes = dA.nbytes
            to, tc = time_gpu(ours, repeat=10), _try(lambda: time_gpu(cub, repeat=10))  # noqa: B023
            qo, qc = time_queued(ours, n=10), _try(lambda: time_queued(cub, n=10))  # noqa: B023
            ctb = f"{nbytes / qc / 1e12:.2f}" if qc else "—"
            qt = _try(lambda: time_queued(tor, n=10)) if tor else None  # noqa: B023
            ttb = f"{nbytes / qt / 1e12:.2f}" if qt else ("—" if torch else _torch_missing())
            best = min((v for v in (qc, qt) if v), default=None)
            print(
                f"| {m} × {n} | {mb:,.0f} | {op} | {fmt_time(to)} | {fmt_time(qo)} "
                f"| {nbytes / qo / 1e12:.2f} | "
                f"{100 * nbytes / qo / 3e12:.0f}% | {fmt_time(tc)} | {fmt_time(qc)} | {ctb} "
                f"| {fmt_time(qt)} | {ttb} | {f'{qo / best:.2f}×' if best else '—'} |",
                flush=True,
            )
        dA = None  # free before the next size
    print()


def _small_gemv_case():
    """The smallest Table I/II shape (256 x 256, float32) and a bare launch of its gemv kernel."""
    import cupy

    from sknn_gpu._kernels import get_function

    dA = cupy.random.standard_normal((256, 256), dtype=cupy.float32)
    dx = cupy.random.standard_normal(256, dtype=cupy.float32)
    dy = cupy.zeros(256, dtype=cupy.float32)
    k = get_function("gemv", "gemv_rows<float,32,true>")
    args = (dA, dx, dy, np.int64(256), np.int64(256), np.float32(1), np.float32(0))
    return dA, dx, dy, k, args


def call_overheads(gpu):
    """Python call time of the smallest Table I/II shape: where a few microseconds go."""
    if not gpu:
        return

    from sknn_gpu.linalg import gemv, ger

    dA, dx, dy, k, args = _small_gemv_case()
    rows = [
        ("bare RawKernel launch (gemv_rows)", lambda: k((32,), (256,), args)),
        ("sknn_gpu.linalg.gemv(A, x, y)", lambda: gemv(dA, dx, dy)),
        ("sknn_gpu.linalg.gemv(A, x) (new y)", lambda: gemv(dA, dx)),
        ("cupy.cublas.gemv", lambda: _cublas().gemv("N", 1.0, dA, dx, 0.0, dy)),
        ("sknn_gpu.linalg.ger", lambda: ger(1e-6, dx, dy, dA)),
        ("cupy.cublas.ger", lambda: _cublas().ger(1e-6, dx, dy, dA)),
    ]
    print("### Python call time, 256 × 256 float32 (wall, synced, median of 300)\n")
    print("| call | time |")
    print("|---|---|")
    for name, fn in rows:
        t = _try(lambda: time_call(fn, repeat=300, device="cuda"))  # noqa: B023
        print(f"| {name} | {fmt_time(t)} |")
    print()


def tune_t_cols(gpu):
    """Sweep the transposed kernels: row splits through a workspace, or clusters of
    blocks (compute capability 9.0), x rows loaded at once per thread (U); queued kernel
    time on the Table I shapes, two tall ones and two large squares, beside cuBLAS."""
    if not gpu:
        return
    import cupy

    from sknn_gpu import linalg
    from sknn_gpu._backend import device_limits

    print(
        "### Tuning sweep: A.T @ x, float32, kernel (queued): workspace splits (s) and "
        "thread-block clusters (C) x U (rows loaded at once)\n"
    )
    combos = [(u, s) for u in (4, 16, 32) for s in (1, 2, 4, 8, 16, 32)]
    clusters = [(u, c) for c in (2, 4, 8, 16) for u in (8, 16, 32)]
    cluster_ok = device_limits().compute_capability >= (9, 0)
    heads = " | ".join([f"U{u} s{s}" for u, s in combos] + [f"U{u} C{c}" for u, c in clusters])
    print(f"| m × n | rule (U, splits) | rule cluster (U, C) | rule | best | {heads} | cuBLAS |")
    print("|---" * (len(combos) + len(clusters) + 6) + "|")
    shapes = [(128, n) for n in (256, 512, 1024, 2048, 4096, 8192, 16384)]
    shapes += [(256, n) for n in (512, 1024, 2048, 4096, 8192, 16384)]
    shapes += [(n, n) for n in (256, 512, 1024, 2048, 4096, 8192, 16384)] + [(8192, 256), (65536, 512)]
    n_sm = device_limits().sm_count

    def reset():
        linalg._plan_cache.clear()
        linalg._TABLE.clear()

    try:
        for m, n in shapes:
            dA = cupy.random.standard_normal((m, n), dtype=cupy.float32)
            dx = cupy.random.standard_normal(m, dtype=cupy.float32)
            dy = cupy.zeros(n, dtype=cupy.float32)
            want = dA.T.astype(cupy.float64) @ dx.astype(cupy.float64)

            def run(force, cluster=None):
                linalg._T_COLS_FORCE = force
                linalg._T_CLUSTER_FORCE = cluster
                reset()
                got = linalg.gemv(dA, dx, trans=True)
                assert float(cupy.abs(got - want).max()) <= 1e-3 * float(cupy.abs(want).max()) + 1e-3
                return time_queued(lambda: linalg.gemv(dA, dx, dy, trans=True))  # noqa: B023

            rule = linalg._t_cols_config(m, -(-n // 128), n_sm)
            rule_c = linalg._t_cluster_config(
                m, -(-n // 128), n_sm, (9, 0) if cluster_ok else (0, 0), m * n * 4
            )
            times = {("s",) + c: run(c) for c in combos if c[1] <= max(1, m // 8)}
            if cluster_ok:
                times.update({("C",) + c: run(None, c) for c in clusters})
            t_rule = run(None)
            best = min(times, key=times.get)
            cells = [fmt_time(times[("s",) + c]) if ("s",) + c in times else "—" for c in combos]
            cells += [fmt_time(times[("C",) + c]) if ("C",) + c in times else "—" for c in clusters]
            cub = _try(lambda: time_queued(lambda: _cublas().gemv("T", 1.0, dA, dx, 0.0, dy)))  # noqa: B023
            row = f"| {m} × {n} | {rule} | {rule_c} | {fmt_time(t_rule)} | {best} | " + " | ".join(cells)
            print(row + f" | {fmt_time(cub)} |", flush=True)
    finally:
        linalg._T_COLS_FORCE = linalg._T_CLUSTER_FORCE = None
        reset()
    print()


def profile_overheads(gpu):
    """Where the Python time of a gemv call and of a minibatch epoch goes (cProfile, top entries)."""
    if not gpu:
        return
    import cProfile
    import io
    import pstats

    import cupy

    from sknn_gpu import GPUMLPClassifier
    from sknn_gpu.linalg import gemv

    dA, dx, dy, k, args = _small_gemv_case()
    bare = time_call(lambda: k((32,), (256,), args), repeat=200, device="cuda")
    full = time_call(lambda: gemv(dA, dx, dy), repeat=200, device="cuda")
    cub = _try(
        lambda: time_call(lambda: _cublas().gemv("N", 1.0, dA, dx, 0.0, dy), repeat=200, device="cuda")
    )
    print("### Python call overhead, 256 × 256 gemv (wall, synced)\n")
    print("| bare RawKernel launch | sknn_gpu.linalg.gemv | cupy.cublas.gemv |")
    print("|---|---|---|")
    print(f"| {fmt_time(bare)} | {fmt_time(full)} | {fmt_time(cub)} |\n")
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(2000):
        gemv(dA, dx, dy)
    pr.disable()
    out = io.StringIO()
    pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(12)
    print("<details><summary>cProfile, 2000 gemv calls</summary>\n\n```")
    print("\n".join(out.getvalue().splitlines()[:40]))
    print("```\n</details>\n")
    rng = np.random.default_rng(0)
    dX = cupy.asarray(rng.random((60000, 784), dtype=np.float32))
    dlab = cupy.asarray(rng.integers(0, 10, 60000))
    clf = GPUMLPClassifier((1280,), solver="sgd", momentum=0.0, max_iter=1, device="cuda", random_state=0)
    clf.fit(dX[:1000], dlab[:1000])
    pr = cProfile.Profile()
    pr.enable()
    clf.fit(dX, dlab)
    cupy.cuda.get_current_stream().synchronize()
    pr.disable()
    out = io.StringIO()
    pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(15)
    print("<details><summary>cProfile, one minibatch-200 epoch, N=1280</summary>\n\n```")
    print("\n".join(out.getvalue().splitlines()[:45]))
    print("```\n</details>\n")


def _torch_missing():
    return "torch not installed" if optional_import("torch") is None else "torch sees no CUDA device"


def torch_mlp_epochs(torch, X, y, N, batch, n_steps_max, lr=0.01, alpha=1e-4):
    """One epoch of {784, N, 10} SGD in PyTorch, eager and CUDA graph: {variant: (seconds, steps)}.

    ``n_steps_max`` caps the steps timed (the caller scales to a full epoch)."""
    n = min(X.shape[0], n_steps_max * batch)
    dev = dict(device="cuda", dtype=torch.float32)
    Xt = torch.from_numpy(X[:n]).cuda()
    yt = torch.from_numpy(np.asarray(y[:n], dtype=np.int64)).cuda()
    gen = torch.Generator(device="cpu").manual_seed(0)
    out = {}
    for variant in ("eager", "graph"):
        b1, b2 = (6.0 / (784 + N)) ** 0.5, (6.0 / (N + 10)) ** 0.5  # Glorot uniform, as sklearn
        W1 = ((torch.rand((784, N), generator=gen) * 2 - 1) * b1).to(**dev).requires_grad_()
        W2 = ((torch.rand((N, 10), generator=gen) * 2 - 1) * b2).to(**dev).requires_grad_()
        c1 = torch.zeros(N, **dev, requires_grad=True)
        c2 = torch.zeros(10, **dev, requires_grad=True)
        opt = torch.optim.SGD([W1, c1, W2, c2], lr=lr, momentum=0.0, weight_decay=alpha)
        xb = torch.zeros((batch, 784), **dev)
        yb = torch.zeros(batch, device="cuda", dtype=torch.int64)

        def step(xb=xb, yb=yb, W1=W1, c1=c1, W2=W2, c2=c2, opt=opt):
            opt.zero_grad(set_to_none=True)
            logits = torch.relu(xb @ W1 + c1) @ W2 + c2
            torch.nn.functional.cross_entropy(logits, yb).backward()
            opt.step()

        run = step if variant == "eager" else torch_graph(step)

        def epoch(m, xb=xb, yb=yb, run=run):
            perm = torch.randperm(n, device="cuda")
            Xp, yp = Xt[perm], yt[perm]
            for i in range(0, m - batch + 1, batch):
                xb.copy_(Xp[i : i + batch])
                yb.copy_(yp[i : i + batch])
                run()

        epoch(min(n, 50 * batch))  # warm-up (allocator, cuBLAS handles)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        epoch(n)
        torch.cuda.synchronize()
        out[variant] = (time.perf_counter() - t0, n // batch)
    torch.cuda.empty_cache()
    return out


def _peer_line(N, row, n_total):
    cells = [str(N)]
    for ours_key, key in (("fused", "t1"), ("ours200", "t200")):
        ours = row.get(ours_key)
        eager, graph = row.get(f"{key}_eager"), row.get(f"{key}_graph")
        if eager is None:
            why = _torch_missing()
            cells += [fmt_time(ours), why, why, "—"]
            continue
        steps = row[f"{key}_steps"]
        scaled = f" (×{n_total / steps:.0f} of {steps:,} steps)" if key == "t1" and steps < n_total else ""
        best = min(eager, graph)
        ratio = f"{ours / best:.2f}×" if ours else "—"
        cells += [fmt_time(ours), fmt_time(eager) + scaled, fmt_time(graph) + scaled, ratio]
    return "| " + " | ".join(cells) + " |"


def bench_mlp(gpu, quick, plot):
    from sklearn.neural_network import MLPClassifier

    from sknn_gpu import GPUMLPClassifier

    warnings.simplefilter("ignore")
    n_total = 6000 if quick else 60000
    rng = np.random.default_rng(0)
    X = rng.random((n_total, 784), dtype=np.float32)
    y = rng.integers(0, 10, n_total)
    Ns = [10, 80, 320] if quick else [10, 40, 160, 320, 640, 1280]
    print(f"### MLP {{784, N, 10}}, one epoch on {n_total:,} samples (float32)\n")
    print(
        "| N | per-sample: ours fused | per-sample: ours 'cublas' | per-sample: sklearn CPU "
        "| minibatch-200: ours | minibatch-200: sklearn CPU | predict: ours | predict: sklearn |"
    )
    print("|---|---|---|---|---|---|---|---|")
    common = dict(solver="sgd", momentum=0.0, learning_rate_init=0.01, max_iter=1, random_state=0, alpha=1e-4)
    curves = {k: [] for k in ("fused", "cublas", "sk1", "ours200", "sk200")}
    peer_lines = []
    for N in Ns:
        row = {}
        sub_sk1 = 300 if N >= 640 else 1000
        sub_sk200 = 6000
        sub_cub = 2000
        Xs, ys = X[:sub_sk1], y[:sub_sk1]
        t0 = time.perf_counter()
        MLPClassifier((N,), batch_size=1, **common).fit(Xs, ys)
        row["sk1"] = (time.perf_counter() - t0) * n_total / sub_sk1
        t0 = time.perf_counter()
        sk = MLPClassifier((N,), batch_size=200, **common).fit(X[:sub_sk200], y[:sub_sk200])
        row["sk200"] = (time.perf_counter() - t0) * n_total / sub_sk200
        row["skpred"] = time_cpu(lambda: sk.predict(X), repeat=3, warmup=0)
        if gpu:
            import cupy

            dX, dy = cupy.asarray(X), cupy.asarray(y)
            for kern, bs in (("custom", 1), ("cublas", 1), ("custom", 200)):  # compile + warm up
                GPUMLPClassifier((N,), batch_size=bs, kernels=kern, device="cuda", **common).fit(
                    dX[:400], dy[:400]
                )
            clf = GPUMLPClassifier((N,), batch_size=1, device="cuda", **common)
            row["fused"] = time_call(lambda: clf.fit(dX, dy), repeat=3, warmup=0, device="cuda")
            cub = GPUMLPClassifier((N,), batch_size=1, kernels="cublas", device="cuda", **common)
            row["cublas"] = (
                time_call(lambda: cub.fit(dX[:sub_cub], dy[:sub_cub]), repeat=1, warmup=0, device="cuda")
                * n_total
                / sub_cub
            )
            mb = GPUMLPClassifier((N,), batch_size=200, device="cuda", **common)
            row["ours200"] = time_call(lambda: mb.fit(dX, dy), repeat=3, warmup=1, device="cuda")
            row["pred"] = time_call(lambda: mb.predict(dX), repeat=5, device="cuda")
            acc = float((clf.predict(dX[:5000]) == dy[:5000]).mean())
            assert 0.0 <= acc <= 1.0
        torch = torch_cuda() if gpu else None
        if torch is not None:
            for bs, key, cap in ((1, "t1", 500 if quick else 5000), (200, "t200", 10**9)):
                for variant, (secs, steps) in torch_mlp_epochs(torch, X, y, N, bs, cap).items():
                    row[f"{key}_{variant}"] = secs * (n_total // bs) / steps
                    row[f"{key}_steps"] = steps
        peer_lines.append(_peer_line(N, row, n_total))
        for k in curves:
            curves[k].append(row.get(k))
        print(
            f"| {N} | {fmt_time(row.get('fused'))} "
            f"| {fmt_time(row.get('cublas'))} (×{n_total // sub_cub} of {sub_cub}) "
            f"| {fmt_time(row['sk1'])} (×{n_total // sub_sk1} of {sub_sk1}) | {fmt_time(row.get('ours200'))} "
            f"| {fmt_time(row['sk200'])} (×{n_total // sub_sk200} of {sub_sk200}) "
            f"| {fmt_time(row.get('pred'))} "
            f"| {fmt_time(row['skpred'])} |",
            flush=True,
        )
    print(
        "\nAll GPU times are fit() wall-clock with the data already on the GPU (CuPy input), "
        "max_iter=1, including validation and the copy of coefs_ back to NumPy.\n"
    )
    print(f"### MLP {{784, N, 10}}: ours vs PyTorch (peer), one epoch of {n_total:,} samples\n")
    print(
        "| N | per-sample: ours | PyTorch eager | PyTorch CUDA graph | ours vs strongest peer "
        "| minibatch-200: ours | PyTorch eager | PyTorch CUDA graph | ours vs strongest peer |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for line in peer_lines:
        print(line)
    print(
        "\nPyTorch: wall clock of one epoch after a warm-up, synced; per-sample epochs timed on the "
        "first steps shown and scaled to the full epoch.\n"
    )
    if plot:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("(matplotlib is not installed: no plot written)")
            return
        fig, ax = plt.subplots(figsize=(6, 4))
        labels = {
            "fused": "ours, per-sample (fused kernel)",
            "cublas": "ours 'cublas', per-sample",
            "sk1": "sklearn CPU, per-sample",
            "ours200": "ours, minibatch 200",
            "sk200": "sklearn CPU, minibatch 200",
        }
        for k, lab in labels.items():
            if any(v is not None for v in curves[k]):
                ax.plot(Ns, curves[k], marker="o", label=lab)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("hidden units N")
        ax.set_ylabel(f"seconds per epoch ({n_total:,} samples)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(plot, dpi=120)
        print(f"plot written to {plot}")


def _torch_net(torch, units, seed, dtype):
    """Glorot-uniform layers of ``units`` (scikit-learn's initialisation), as leaf tensors."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    weights, biases = [], []
    for a, b in zip(units[:-1], units[1:]):
        bound = (6.0 / (a + b)) ** 0.5
        weights.append(
            ((torch.rand((a, b), generator=gen, dtype=dtype) * 2 - 1) * bound).cuda().requires_grad_()
        )
        biases.append(torch.zeros(b, dtype=dtype, device="cuda", requires_grad=True))
    return weights, biases


def _torch_logits(torch, x, weights, biases):
    for i, (W, b) in enumerate(zip(weights, biases)):
        x = torch.addmm(b, x, W)
        if i < len(weights) - 1:
            x = torch.relu(x)
    return x


def torch_default_epochs(torch, X, y, units, solver, batch, repeat):
    """One epoch of scikit-learn's default training in PyTorch: {'eager'|'graph': (median s, last loss)}.

    ReLU layers, softmax cross-entropy (mean over the batch), L2 1e-4 on the weights only
    (scikit-learn adds alpha/2 * ||W||^2 / batch, i.e. weight decay alpha / batch), Adam
    (lr 1e-3, betas 0.9/0.999, eps 1e-8; ``capturable=True`` for the graph) or SGD (lr 1e-3,
    Nesterov momentum 0.9). Each epoch draws a permutation on the GPU, gathers the rows once
    and copies each minibatch into the static input of the step (eager or captured as one
    CUDA graph after a warm-up on a side stream, as PyTorch's documentation shows).
    """
    n = X.shape[0] - X.shape[0] % batch
    Xt = torch.as_tensor(X[:n], device="cuda")
    yt = torch.as_tensor(np.asarray(y[:n], dtype=np.int64), device="cuda")
    out = {}
    for variant in ("eager", "graph"):
        weights, biases = _torch_net(torch, units, 0, Xt.dtype)
        groups = [
            {"params": weights, "weight_decay": 1e-4 / batch},
            {"params": biases, "weight_decay": 0.0},
        ]
        if solver == "adam":
            opt = torch.optim.Adam(groups, lr=1e-3, capturable=variant == "graph")
        else:
            opt = torch.optim.SGD(groups, lr=1e-3, momentum=0.9, nesterov=True)
        xb = torch.zeros((batch, X.shape[1]), dtype=Xt.dtype, device="cuda")
        yb = torch.zeros(batch, dtype=torch.int64, device="cuda")
        loss_box = torch.zeros((), device="cuda")

        def step(xb=xb, yb=yb, weights=weights, biases=biases, opt=opt, loss_box=loss_box):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(_torch_logits(torch, xb, weights, biases), yb)
            loss.backward()
            opt.step()
            loss_box.copy_(loss.detach())

        run = step if variant == "eager" else torch_graph(step)

        def epoch(xb=xb, yb=yb, run=run):
            perm = torch.randperm(n, device="cuda")
            Xp, yp = Xt[perm], yt[perm]
            for i in range(0, n, batch):
                xb.copy_(Xp[i : i + batch])
                yb.copy_(yp[i : i + batch])
                run()

        secs = time_call(epoch, repeat=repeat, warmup=1, device="torch")
        out[variant] = (secs, float(loss_box))
    torch.cuda.empty_cache()
    return out


def _per_sample_rows(gpu, torch, X, y, hidden, n):
    """Per-sample SGD epochs (plain SGD, lr 0.01, L2 1e-4): ours (the fused kernel) against
    PyTorch's per-sample step, eager and as a CUDA graph (timed on 5,000 steps, scaled)."""
    from sknn_gpu import GPUMLPClassifier

    print(f"### Per-sample SGD (batch_size=1): one epoch of {n:,} samples\n")
    print("| hidden | ours (fused kernel) | PyTorch, CUDA graph | PyTorch, eager | ours vs graph |")
    print("|---|---|---|---|---|")
    common = dict(solver="sgd", momentum=0.0, learning_rate_init=0.01, alpha=1e-4, max_iter=1, random_state=0)
    for h in hidden:
        ours = None
        if gpu:
            import cupy

            dX, dy = cupy.asarray(X), cupy.asarray(y)
            clf = GPUMLPClassifier(h, batch_size=1, device="cuda", **common)
            clf.fit(dX[:400], dy[:400])
            ours = time_call(lambda: clf.fit(dX, dy), repeat=3, warmup=0, device="cuda")  # noqa: B023
        cells = ["—", "—", "—"]
        if torch is not None:
            runs = torch_mlp_epochs(torch, X, y, h[0], 1, 5000)
            (ge, steps), (gg, _) = runs["eager"], runs["graph"]
            scale = n / steps
            cells = [f"{fmt_time(gg * scale)} (×{scale:.0f} of {steps:,} steps)", fmt_time(ge * scale)]
            cells.append(f"{gg * scale / ours:.1f}×" if ours else "—")
        print(f"| {h} | {fmt_time(ours) if ours else 'no GPU'} | " + " | ".join(cells) + " |")
    print()


def bench_defaults(gpu, args):
    """GPUMLPClassifier at scikit-learn's defaults against the same training step in PyTorch."""
    from sknn_gpu import GPUMLPClassifier

    warnings.simplefilter("ignore")
    n = args.samples or (6000 if args.quick else 60000)
    rng = np.random.default_rng(0)
    X = rng.random((n, 784), dtype=np.float32)
    y = rng.integers(0, 10, n)
    hidden = [tuple(int(u) for u in h.split(",")) for h in (args.hidden or ["100", "1280", "512,256"])]
    solver, bs = args.solver, args.batch_size
    print(
        f"### GPUMLPClassifier at its defaults (solver={solver!r}, batch_size={bs}): one epoch of "
        f"{n:,} x 784 float32, 10 classes, CuPy input\n"
    )
    print(
        "Ours: `fit` with max_iter=1 (validation, initialisation, the epoch, coefs_ back to NumPy), "
        f"wall clock with synchronisation, median of {args.repeat}. PyTorch: the same layers, loss, L2 "
        "and optimizer; one epoch (permutation, gather, a copy into the static batch and the step per "
        "minibatch), eager and with the step captured as a CUDA graph; median of the same count. "
        "'ours vs X' = X's time / ours (above 1: ours faster).\n"
    )
    torch = torch_cuda() if gpu else None
    rows, pred_rows = [], []
    for h in hidden:
        units = (784, *h, 10)
        ours = loss = None
        if gpu:
            import cupy

            dX, dy = cupy.asarray(X), cupy.asarray(y)
            clf = GPUMLPClassifier(h, solver=solver, batch_size=bs, max_iter=1, random_state=0, device="cuda")
            clf.fit(dX[: 4 * bs], dy[: 4 * bs])  # compile the kernels
            ours = time_call(lambda: clf.fit(dX, dy), repeat=args.repeat, warmup=1, device="cuda")  # noqa: B023
            loss = clf.loss_
            q = dX[:10000]
        peers = {}
        if torch is not None:
            peers = torch_default_epochs(torch, X, y, units, solver, bs, args.repeat)
            with torch.no_grad():
                Wt = [torch.as_tensor(c, device="cuda") for c in clf.coefs_]
                bt = [torch.as_tensor(c, device="cuda") for c in clf.intercepts_]
                qt = torch.as_tensor(q, device="cuda")

                def infer(Wt=Wt, bt=bt, qt=qt):
                    with torch.no_grad():
                        return torch.softmax(_torch_logits(torch, qt, Wt, bt), dim=1)

                same = float((infer() - torch.as_tensor(clf.predict_proba(q), device="cuda")).abs().max())
                # five rounds of ours then PyTorch, the median of each: the two see the same host
                ours_t, torch_t = [], []
                for _ in range(5):
                    ours_t.append(time_call(lambda: clf.predict_proba(q), repeat=20, warmup=3, device="cuda"))  # noqa: B023
                    torch_t.append(time_call(infer, repeat=20, warmup=3, device="torch"))
                ours_pred, torch_pred = float(np.median(ours_t)), float(np.median(torch_t))
            pred_rows.append((h, ours_pred, torch_pred, same))
        elif gpu:
            ours_pred = time_call(lambda: clf.predict_proba(q), repeat=20, warmup=3, device="cuda")  # noqa: B023
            pred_rows.append((h, ours_pred, None, None))

        def cell(key, peers=peers, ours=ours):
            if key not in peers:
                return "—", "—"
            secs, last = peers[key]
            return f"{fmt_time(secs)} (loss {last:.3f})", (f"{secs / ours:.2f}×" if ours else "—")

        g, gr = cell("graph")
        e, er = cell("eager")
        ours_cell = f"{fmt_time(ours)} (loss {loss:.3f})" if ours else "no GPU"
        rows.append(f"| {h} | {ours_cell} | {g} | {e} | {gr} | {er} |")
    print("| hidden | ours | PyTorch, CUDA graph | PyTorch, eager | ours vs graph | ours vs eager |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows) + "\n")
    if args.per_sample:
        _per_sample_rows(gpu, torch, X, y, [h for h in hidden if len(h) == 1], n)
    if pred_rows:
        print("### predict_proba of 10,000 rows: ours against PyTorch inference on the same weights\n")
        print(
            "Wall clock with synchronisation: five rounds of ours then PyTorch, each the median of 20 "
            "calls, and the median of the rounds (PyTorch: `torch.no_grad()`, addmm + relu per layer, "
            "softmax; its input already a tensor on the GPU).\n"
        )
        print("| hidden | ours | PyTorch no_grad | ours vs PyTorch | largest difference |")
        print("|---|---|---|---|---|")
        for h, o, tp, same in pred_rows:
            ratio = f"{tp / o:.2f}×" if tp else "—"
            diff = f"{same:.1e}" if same is not None else "—"
            print(f"| {h} | {fmt_time(o)} | {fmt_time(tp) if tp else _torch_missing()} | {ratio} | {diff} |")
        print()


def main(argv=None):
    args = _args(argv)
    print(environment_header() + "\n")
    gpu = cuda_available() and args.device != "cpu"
    repeat = 7 if args.quick else 30
    if args.part in ("all", "linalg"):
        bench_gemv(TABLE1[:6] if args.quick else TABLE1, gpu, repeat)
        bench_ger(TABLE2[:6] if args.quick else TABLE2, gpu, repeat)
        call_overheads(gpu)
        if not args.quick:
            bench_big(gpu)
    if args.part == "tune":
        tune_t_cols(gpu)
    if args.part in ("all", "profile"):
        profile_overheads(gpu)
    if args.part in ("all", "mlp"):
        bench_mlp(gpu, args.quick, args.plot)
    if args.part in ("all", "defaults"):
        bench_defaults(gpu, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
