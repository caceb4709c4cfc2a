"""FlyHash: ours (fused CUDA kernel, threaded NumPy/SciPy CPU path) vs peers, same data, one run.

Settings of da Cunha et al. (CAID 2023): hash factor h, s = 5% of d, k = 5% of m.

* FashionMNIST shape: 60,000 x 784, h = 32 -> m = 25,088, s = 39, k = 1,254.
* CIFAR-10 shape: 50,000 x 3,072, h = 32 -> m = 98,304, s = 153, k = 4,915.
* Batch sweep: n = 2^1 ... 2^15, d = 1,024, h = 128 -> m = 131,072, s = 51, k = 6,553.

Data: uniform [0, 1) float32 (the datasets themselves are not available offline;
the paper's synthetic experiments use the same distribution).

Peers: what a user with a GPU would write in PyTorch: ``X @ W`` with the
dense 0/1 projection W (d x m) in fp32, TF32, bf16 and fp16, then ``torch.topk``, each
with its exactness (fraction of rows whose k winners equal our exact winners; X is
converted to bf16/fp16 inside the timed region, W beforehand); a CuPy composition
(cuSPARSE product + ``cupy.argpartition``), the paper's bisection WTA in CuPy (cuSPARSE
product + 64 halvings), and the NumPy reference (SciPy sparse product in float64 +
``np.argpartition``, as in the FlyNN reference code). CPU rows are timed on a slice of
the rows (stated in the table) because the reference needs minutes for the full sets.
A peer missing on the machine is a row saying so. "vs strongest peer" compares with the
fastest peer of equal exactness: "exact" when >= 99% of the rows' winner sets equal ours
(fp32 sums in another order differ only at near-ties), "inexact" otherwise.

Floor: DRAM traffic (read X in float32, write one bit per unit) at 3.0 TB/s,
and, for the fused kernel, the shared-memory gather bound: n*m*s 4-byte reads at
32 words/clock/SM (132 SMs, 1.98 GHz) for its one full pass, plus its sample pass
(1/16 of the units).
"""

from __future__ import annotations

import argparse
import contextlib

import numpy as np
import scipy.sparse as sp
from _harness import (
    H100,
    Table,
    environment_header,
    floor_seconds,
    fmt_time,
    optional_import,
    time_cpu,
    time_gpu,
    time_torch,
    torch_cuda,
)

from sknn_gpu._backend import cuda_available
from sknn_gpu.fly import FlyHashTransformer
from sknn_gpu.fly._flyhash_cpu import winners_from_packed

SMEM_WORDS_PER_S = 132 * 32 * 1.98e9  # H100 SXM: 32 banks x 4 B per clock per SM


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes (seconds on a CPU)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--only", default="fmnist,cifar,sweep", help="comma list of fmnist, cifar, sweep")
    p.add_argument(
        "--cpu-rows", type=int, default=None, help="rows timed on the CPU (default: per experiment)"
    )
    return p.parse_args(argv)


@contextlib.contextmanager
def fused_only(engine):
    """Hash with the fused kernel alone: no tensor-core path for integer-valued input, no
    split-float16 product for float input (the reference the other rows are checked with)."""
    saved = engine._on_tensor_cores, engine.BAND_MAX_CONNECTIONS
    engine._on_tensor_cores, engine.BAND_MAX_CONNECTIONS = (lambda *a: False), 0
    try:
        yield
    finally:
        engine._on_tensor_cores, engine.BAND_MAX_CONNECTIONS = saved


def integer_row(table, fh, Xd, label, note, repeat, time_fused=False):
    """Add the row of integer-valued CuPy input ``Xd`` on tensor cores, its bits checked
    against the fused kernel's; returns the fused kernel's ``transform`` time when asked."""
    import cupy

    from sknn_gpu.fly import _flyhash_cuda
    from sknn_gpu.fly._flyhash_cuda import words as words_cuda

    m, k = fh.n_components_, fh.k_
    st = {}
    win = winners_from_packed(words_cuda(fh, Xd, "exact", st).view(cupy.uint8).get(), m, k)
    with fused_only(_flyhash_cuda):
        same = np.array_equal(
            win, winners_from_packed(words_cuda(fh, Xd, "exact").view(cupy.uint8).get(), m, k)
        )
        t_fused = time_gpu(lambda: fh.transform(Xd), repeat=repeat, warmup=1) if time_fused else None
    table.add(
        label,
        "cuda",
        time_gpu(lambda: fh.transform(Xd), repeat=repeat, warmup=2),
        ("bit-identical to the fused kernel" if same else "DIFFERS from the fused kernel")
        + f" ({st.get('tensor_rows', 0):,} rows on tensor cores,"
        + f" {st.get('float32_rows', 0):,} of them redone from float32 activations)",
        note,
        exact="exact" if same else "inexact",
    )
    return t_fused


def digit_pixels(n, d):
    """``n`` image-like rows of ``d`` = 784 (28x28) or 3,072 (32x32x3) pixels in 0..255:
    scikit-learn's 8x8 digits upscaled 4x (cropped to 28x28), tiled; None for other d."""
    from sklearn.datasets import load_digits

    if d not in (784, 3072):
        return None
    img = np.kron(load_digits().images, np.ones((4, 4))) * 16.0  # 0..256 on 32x32
    img = np.minimum(img, 255.0)
    img = img[:, 2:30, 2:30].reshape(len(img), -1) if d == 784 else np.repeat(img.reshape(len(img), -1), 3, 1)
    return np.resize(img, (n, d)).astype(np.float32)


def numpy_reference(X64, WT64, k):
    """FlyNN reference: float64 sparse product, then argpartition for the top k."""
    A = X64 @ WT64
    m = A.shape[1]
    return np.argpartition(A, m - k, axis=1)[:, m - k :]


def rows_equal(win_a, win_b):
    """Fraction of rows whose winner sets are equal (each row: sorted int arrays)."""
    a = np.sort(win_a, axis=1)
    b = np.sort(win_b, axis=1)
    return float(np.mean(np.all(a == b, axis=1)))


class _Progress(Table):
    """Table that also prints each row as it is measured (so a time limit keeps partial results)."""

    def add(self, name, device, seconds, quality="", note="", **kw):
        print(f"  measured: {name} ({device}) {fmt_time(seconds)} {quality}", flush=True)
        return super().add(name, device, seconds, quality, note, **kw)


def recall(win, ref):
    """Fraction of the reference winners (n, k) that ``win`` (n, k) kept."""
    kept = sum(np.intersect1d(a, b, assume_unique=True).size for a, b in zip(win, ref))
    return kept / ref.size


def exactness(fraction):
    """Exactness class: "exact" when at least 99% of the rows' winner sets equal ours (a
    float32 product summed in another order differs only at near-ties), else "inexact"."""
    return "exact" if fraction >= 0.99 else "inexact"


TORCH_PRECISIONS = ("fp32", "TF32", "bf16", "fp16")


def torch_peers(table, X, components, ours_win, k, repeat):
    """:func:`_torch_peers`, then PyTorch's cached blocks go back to the device."""
    _torch_peers(table, X, components, ours_win, k, repeat)
    torch = torch_cuda()
    if torch is not None:
        torch.cuda.empty_cache()


def _torch_peers(table, X, components, ours_win, k, repeat):
    """PyTorch peers: X @ W (dense 0/1 projection, d x m) at each precision, then torch.topk.

    ``ours_win``: our exact winners (n x k), the reference of the exactness column.
    """
    torch = torch_cuda()
    if torch is None:
        why = "torch not installed" if optional_import("torch") is None else "torch sees no CUDA device"
        for prec in TORCH_PRECISIONS:
            table.add(f"PyTorch {prec} GEMM + topk", "cuda", None, note=why, peer=True, exact="exact")
        return
    n = X.shape[0]
    m = components.shape[0]
    Xt = torch.from_numpy(X).cuda()
    W32 = torch.from_numpy(np.ascontiguousarray(components.T.toarray(), dtype=np.float32)).cuda()
    ref = torch.from_numpy(np.sort(ours_win, axis=1).astype(np.int64)).cuda()
    rows = max(1, min(n, 2**31 // m))  # activations of one chunk <= 2^31 elements (8 GiB in fp32)
    dtypes = {"fp32": torch.float32, "TF32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    saved = torch.backends.cuda.matmul.allow_tf32
    try:
        for prec in TORCH_PRECISIONS:
            dt = dtypes[prec]
            torch.backends.cuda.matmul.allow_tf32 = prec == "TF32"
            W = W32.to(dt)

            def gemm_topk(W=W, dt=dt):
                return [
                    torch.topk(Xt[r : r + rows].to(dt) @ W, k, dim=1, sorted=False).indices
                    for r in range(0, n, rows)
                ]

            def gemm(W=W, dt=dt):
                for r in range(0, n, rows):
                    Xt[r : r + rows].to(dt) @ W

            idx = torch.sort(torch.cat(gemm_topk()), dim=1).values
            q = float((idx == ref).all(dim=1).float().mean().item())
            rec = recall(idx.cpu().numpy(), ref.cpu().numpy())
            del idx
            t = time_torch(gemm_topk, repeat=repeat, warmup=1)
            t_gemm = time_torch(gemm, repeat=repeat, warmup=1)
            conv = "" if dt == torch.float32 else f", X -> {prec} in the timing"
            table.add(
                f"PyTorch {prec} GEMM + topk",
                "cuda",
                t,
                f"recall {rec:.4f}, {q:.1%} rows = ours (exact)",
                f"GEMM alone {fmt_time(t_gemm)}{conv}; {-(-n // rows)} chunk(s)",
                peer=True,
                exact=exactness(q),
            )
            del W
            torch.cuda.empty_cache()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def experiment(title, n, d, m, s, k, args, cpu_rows, gpu, repeat_gpu=10, tie_heavy=False):
    rng = np.random.default_rng(0)
    X = rng.random((n, d), dtype=np.float32)
    fh_cpu = FlyHashTransformer(
        n_components=m, n_connections=s, k=k, output="packed", random_state=0, device="cpu"
    )
    fh_cpu.fit(X[:1])
    bytes_moved = 4.0 * n * d + n * m / 8.0
    floor = floor_seconds(bytes_moved=bytes_moved, launches=1)
    gather = (1.0 + 1.0 / 16.0) * n * m * s / SMEM_WORDS_PER_S  # full pass + sample pass
    table = _Progress(
        f"{title}: n={n:,}, d={d:,} -> m={m:,}, s={s}, k={k:,}",
        baseline="ours GPU (transform)" if gpu else "ours CPU",
        floor=floor,
        floor_note=(
            f"(DRAM: {bytes_moved / 2**20:.0f} MiB at 3.0 TB/s + one launch); shared-memory gather bound "
            f"of the fused kernel's full and sample passes: {fmt_time(gather)}"
        ),
    )
    n_cpu = min(n, cpu_rows)
    Xc = X[:n_cpu]
    scale = n / n_cpu
    note_cpu = f"timed on {n_cpu:,} rows, x{scale:.1f} (linear in rows)" if n_cpu < n else ""
    ref_win = None
    if gpu:
        import cupy
        import cupyx.scipy.sparse as csp

        from sknn_gpu.fly import _flyhash_cuda
        from sknn_gpu.fly._flyhash_cuda import words as words_cuda

        fh = FlyHashTransformer(
            n_components=m, n_connections=s, k=k, output="packed", random_state=0, device="cuda"
        )
        fh.fit(X[:1])
        Xd = cupy.asarray(X)
        packed = fh.transform(Xd)
        ours_win = winners_from_packed(packed.get(), m, k)
        t_call = time_gpu(lambda: fh.transform(Xd), repeat=repeat_gpu, warmup=2)
        stats = {}
        words_cuda(fh, Xd, "exact", stats)
        band = _flyhash_cuda._band_ok(fh)
        table.add(
            "ours GPU (transform)",
            "cuda",
            t_call,
            "exact k, ties -> lower index"
            + (f"; {stats.get('band_redone_rows', 0):,} rows to the fused kernel" if band else ""),
            "CuPy in, packed out; "
            + (
                "split-float16 tensor-core product, exact check near the threshold"
                if band
                else "fused kernel"
            ),
            exact="exact",
        )
        with fused_only(_flyhash_cuda):
            t_kern = time_gpu(lambda: words_cuda(fh, Xd, "exact"), repeat=repeat_gpu, warmup=1)
            stats = {}
            fused_words = words_cuda(fh, Xd, "exact", stats)
        fb = stats.get("fallback_rows", 0)
        same = np.array_equal(winners_from_packed(fused_words.view(cupy.uint8).get(), m, k), ours_win)
        del fused_words
        table.add(
            "ours GPU (fused kernel)",
            "cuda",
            t_kern,
            f"{fb} rows via fallback; "
            + ("same bits as the transform" if same else "DIFFERS from the transform"),
            "kernel + flagged-row fix-up (words)",
            exact="exact" if same else "inexact",
        )

        # precision='fast' (float16 tensor cores + our selection) on the same
        # float input, and integer-valued input (pixels) under precision='exact', which
        # goes through tensor cores and must give the fused kernel's bits
        fp = FlyHashTransformer(**{**fh.get_params(), "precision": "fast"}).fit(X[:1])
        fast_win = winners_from_packed(fp.transform(Xd).get(), m, k)
        table.add(
            "ours GPU (transform, precision='fast')",
            "cuda",
            time_gpu(lambda: fp.transform(Xd), repeat=repeat_gpu, warmup=2),
            f"recall {recall(fast_win, ours_win):.4f}, {rows_equal(fast_win, ours_win):.1%} rows = exact",
            "float16 tensor cores, fp32 accumulation, rows centred, float16 activations",
            exact=exactness(rows_equal(fast_win, ours_win)),
        )
        del fast_win
        Xi = cupy.asarray(np.random.default_rng(1).integers(0, 256, size=(n, d)).astype(np.float32))
        label = "ours GPU, pixels 0..255 (tensor cores)"
        note = "integer-valued input, precision='exact'"
        t_fused = integer_row(table, fh, Xi, label, note, repeat_gpu, time_fused=True)
        table.add(
            "ours GPU, pixels 0..255 (fused kernel)",
            "cuda",
            t_fused,
            "the same pixels without tensor cores",
            "integer-valued input on the fused kernel",
            exact="exact",
        )
        del Xi
        Xg = digit_pixels(n, d)
        if Xg is not None:  # image-like pixels: dark backgrounds, strokes of 0..255
            integer_row(
                table, fh, cupy.asarray(Xg), "ours GPU, digit images upscaled, 0..255 (tensor cores)",
                "scikit-learn's digits, 8x8 -> 28x28 (or 32x32x3), tiled to n rows", repeat_gpu,
            )  # fmt: skip
            del Xg

        if tie_heavy:
            # binarised input: activations are small integers that tie massively at the
            # threshold (0/1 is integer-valued: the tensor-core path, ties ranked by unit)
            Xt = (Xd > 0.5).astype(cupy.float32)
            st = {}
            words_cuda(fh, Xt, "exact", st)
            table.add(
                "ours GPU, binarised X (ties)",
                "cuda",
                time_gpu(lambda: fh.transform(Xt), repeat=3, warmup=1),
                f"{st.get('tensor_rows', 0):,} rows on tensor cores, {st.get('float32_rows', 0):,} redone "
                f"from float32, {st.get('fallback_rows', 0)} via the fused kernel's fallback",
                "heavy ties",
            )
            del Xt

        Wd = csp.csr_matrix(fh.components_)
        batch = max(1, min(n, (3 * 2**30) // (4 * m)))

        def composition():
            outs = []
            for st in range(0, n, batch):
                AT = Wd @ Xd[st : st + batch].T  # cuSPARSE SpMM, (m, b)
                A = cupy.ascontiguousarray(AT.T)
                outs.append(cupy.argpartition(A, m - k, axis=1)[:, m - k :])
            return outs

        def bisection():
            from sknn_gpu.fly._wta import wta_bisect_mask

            outs = []
            for st in range(0, n, batch):
                A = cupy.ascontiguousarray((Wd @ Xd[st : st + batch].T).T)
                outs.append(wta_bisect_mask(A, k))
            return outs

        comp = composition()
        comp_win = np.concatenate([c.get() for c in comp])[: min(n, 4096)]
        q = rows_equal(comp_win, ours_win[: comp_win.shape[0]])
        del comp
        table.add(
            "CuPy composition",
            "cuda",
            time_gpu(composition, repeat=3, warmup=0),
            f"{q:.1%} rows = ours (first {comp_win.shape[0]:,})",
            "cuSPARSE + argpartition",
            peer=True,
            exact=exactness(q),
        )
        bis = bisection()
        counts = np.concatenate([b.sum(axis=1).get() for b in bis])
        del bis
        table.add(
            "paper's bisection (CuPy)",
            "cuda",
            time_gpu(bisection, repeat=3, warmup=0),
            f"{np.mean(counts == k):.1%} rows with k winners",
            "cuSPARSE + 64 halvings",
            peer=True,
            exact="exact" if np.all(counts == k) else "inexact",
        )
        cupy.get_default_memory_pool().free_all_blocks()
        torch_peers(table, X, fh_cpu.components_, ours_win, k, repeat=max(3, repeat_gpu // 2))
        ref_win = ours_win
    t_ours_cpu = time_cpu(lambda: fh_cpu.transform(Xc), repeat=3, warmup=1) * scale
    cpu_win = winners_from_packed(fh_cpu.transform(Xc), m, k)
    q_cpu = "bit-identical to GPU" if ref_win is not None and np.array_equal(cpu_win, ref_win[:n_cpu]) else ""
    if ref_win is not None and not q_cpu:
        q_cpu = "DIFFERS from GPU"
    if not gpu:  # the GPU peers are rows all the same (not run without a GPU)
        torch_peers(table, X, fh_cpu.components_, None, k, repeat=3)
    table.add("ours CPU", "cpu", t_ours_cpu, q_cpu, note_cpu, exact="exact")
    X64 = Xc.astype(np.float64)
    WT64 = sp.csc_matrix(fh_cpu.components_.T, dtype=np.float64)
    ref = numpy_reference(X64, WT64, k)
    t_ref = time_cpu(lambda: numpy_reference(X64, WT64, k), repeat=2, warmup=0) * scale
    q_ref = rows_equal(ref, cpu_win)
    table.add(
        "NumPy reference",
        "cpu",
        t_ref,
        f"{q_ref:.1%} rows = ours",
        note_cpu,
        peer=True,
        exact=exactness(q_ref),
    )
    table.print()
    if t_ours_cpu:
        print(f"ours CPU vs NumPy reference: {t_ref / t_ours_cpu:.2f}x faster\n")
    return table


def sweep(args, gpu):
    d, h = 1024, 128
    m = d * h
    s, k = int(0.05 * d), int(0.05 * m)
    exps = range(1, 16) if not args.quick else range(1, 8)
    rng = np.random.default_rng(1)
    X = rng.random((2 ** max(exps), d), dtype=np.float32)
    print(f"### Batch sweep: d={d:,}, m={m:,}, s={s}, k={k:,}\n")
    cols = [
        "n",
        "ours GPU (transform)",
        "CuPy composition",
        "paper's bisection (CuPy)",
        "ours CPU",
        "NumPy reference",
    ]
    print("| " + " | ".join(cols) + " |")
    print("|---|---|---|---|---|---|")
    fh_cpu = FlyHashTransformer(
        n_components=m, n_connections=s, k=k, output="packed", random_state=0, device="cpu"
    )
    fh_cpu.fit(X[:1])
    if gpu:
        import cupy
        import cupyx.scipy.sparse as csp

        from sknn_gpu.fly._wta import wta_bisect_mask

        fh = FlyHashTransformer(
            n_components=m, n_connections=s, k=k, output="packed", random_state=0, device="cuda"
        )
        fh.fit(X[:1])
        Wd = csp.csr_matrix(fh.components_)
        Xall = cupy.asarray(X)
    WT64 = sp.csc_matrix(fh_cpu.components_.T, dtype=np.float64)
    for e in exps:
        n = 2**e
        cells = []
        if gpu:
            Xd = Xall[:n]
            batch = max(1, min(n, (2 * 2**30) // (4 * m)))

            def comp(Xd=Xd, n=n, batch=batch):
                for st in range(0, n, batch):
                    A = cupy.ascontiguousarray((Wd @ Xd[st : st + batch].T).T)
                    cupy.argpartition(A, m - k, axis=1)

            def bis(Xd=Xd, n=n, batch=batch):
                for st in range(0, n, batch):
                    A = cupy.ascontiguousarray((Wd @ Xd[st : st + batch].T).T)
                    wta_bisect_mask(A, k)

            rep = 10 if n <= 4096 else 3
            prep = 3 if n <= 4096 else 2
            cells += [
                fmt_time(time_gpu(lambda Xd=Xd: fh.transform(Xd), repeat=rep, warmup=1)),
                fmt_time(time_gpu(comp, repeat=prep, warmup=1)),
                fmt_time(time_gpu(bis, repeat=prep, warmup=1)),
            ]
            cupy.get_default_memory_pool().free_all_blocks()
        else:
            cells += ["—", "—", "—"]
        if n <= (256 if not args.quick else 128):
            Xc = X[:n]
            cells.append(fmt_time(time_cpu(lambda Xc=Xc: fh_cpu.transform(Xc), repeat=2, warmup=1)))
            X64 = Xc.astype(np.float64)
            cells.append(
                fmt_time(time_cpu(lambda X64=X64: numpy_reference(X64, WT64, k), repeat=1, warmup=0))
            )
        else:
            cells += ["—", "—"]
        print(f"| {n:,} | " + " | ".join(cells) + " |", flush=True)
    print()


def main(argv=None):
    args = parse(argv)
    print(environment_header() + "\n")
    gpu = cuda_available() and args.device != "cpu"
    only = set(args.only.split(","))
    if "fmnist" in only:
        if args.quick:
            experiment("FashionMNIST shape (quick: 2,000 rows)", 2000, 784, 25088, 39, 1254, args, 500, gpu)
        else:
            experiment(
                "FashionMNIST shape",
                60000,
                784,
                25088,
                39,
                1254,
                args,
                args.cpu_rows or 6000,
                gpu,
                tie_heavy=True,
            )
    if "cifar" in only:
        if args.quick:
            experiment("CIFAR-10 shape (quick: 200 rows)", 200, 3072, 98304, 153, 4915, args, 100, gpu)
        else:
            experiment("CIFAR-10 shape", 50000, 3072, 98304, 153, 4915, args, args.cpu_rows or 200, gpu, 3)
    if "sweep" in only:
        sweep(args, gpu)
    print(f"(H100 ceilings used for floors: copy {H100['copy_Bps'] / 1e12:.1f} TB/s, launch 7 µs)")


if __name__ == "__main__":
    main()
