"""Reproduce the custom GEMV/GER kernels paper: Tables I-II vs cuBLAS and Fig. 3 (MNIST {784, N, 10}).

* Table I -- ``y = A x`` and ``y = A^T x`` (float32) on the paper's square and
  ``128 x N`` / ``256 x N`` shapes: ours (:func:`sknn_gpu.linalg.gemv` on CuPy arrays)
  vs cuBLAS (``cupy.cublas.gemv``) vs CPU BLAS (SciPy ``sgemv``). The paper's times
  are for 100,000 calls including the host-side checks and the launch, so ours are
  the wall time of one Python call, synchronised (kernel-only CUDA-event times in a
  separate column). Time saving as the paper's eq. 18: (T_other - T_ours) / T_other.
* Table II -- ``A += x y^T`` (:func:`sknn_gpu.linalg.ger`) on its shapes, same peers.
* Fig. 3 -- one training epoch of a {784, N, 10} MLP with per-sample SGD, no
  momentum (left), and the forward pass alone (right), for N = 10 ... 1,280:
  :class:`~sknn_gpu.GPUMLPClassifier` with our kernels vs the same model with
  ``kernels='cublas'`` vs the CPU (scikit-learn's MLPClassifier and our NumPy path).
  The right panel is a Python loop of 4 calls per sample (gemv, bias + sigmoid, gemv,
  bias), with our gemv or cuBLAS's; its profile says where a sample's time goes: the
  host time of issuing the calls (the loop timed without waiting for the GPU, and each
  call alone) and the GPU time with the host out of the way (the same launches captured
  into a CUDA graph of 100 samples and replayed). The paper timed its kernels from a C
  loop, so the graph-replay ratio is the comparison closest to its claim; the verdicts
  are computed from the measured numbers.
  The data are MNIST-shaped random pixels (60,000 x 784; MNIST itself is not available
  offline here, and the timing does not depend on the pixel values). Slow rows run on
  a subset and are scaled to 60,000 samples (the row says so).

``--quick`` runs the same code on fewer shapes, fewer N and smaller subsets (``--smoke``: two N).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common, when imported from elsewhere

import numpy as np  # noqa: E402
from _common import fmt_time, heading, new_figure, paper_table, parse_args, save_plot, sized  # noqa: E402
from _harness import time_call, time_cpu, time_gpu  # noqa: E402
from bench_mlp import TABLE1, TABLE2, _cublas  # noqa: E402

TITLE = "Custom GEMV/GER kernels for MLPs (Tables I-II vs cuBLAS, Fig. 3 MNIST {784, N, 10})"
PAPER_HW = "paper: GPU and CPU models not given in the text; ours: H100 and its host CPU"
ITER = 1e5  # the paper's tables are totals over 100,000 calls

#: Table I, seconds per 100,000 calls: gNewGemvf, Sgemv(CUDA), gemv(CPU), then the transposed three.
PAPER_T1 = {
    (256, 256): (0.30, 1.88, 10.81, 0.29, 0.30, 10.78),
    (512, 512): (1.22, 5.97, 42.83, 1.10, 1.04, 40.54),
    (1024, 1024): (4.36, 12.17, 176.54, 4.36, 3.45, 175.78),
    (2048, 2048): (13.27, 25.55, 405.01, 14.81, 12.63, 407.10),
    (4096, 4096): (47.86, 58.52, 1778.52, 51.46, 48.36, 1790.10),
    (128, 256): (0.30, 1.89, 2.80, 0.26, 0.29, 3.08),
    (128, 512): (0.53, 4.54, 6.76, 0.54, 0.64, 6.70),
    (128, 1024): (0.67, 9.81, 13.08, 0.67, 1.06, 13.38),
    (128, 2048): (1.22, 26.17, 26.22, 0.95, 2.42, 25.58),
    (128, 4096): (2.04, 26.58, 54.09, 1.54, 4.60, 56.80),
    (128, 8192): (3.58, 51.80, 110.81, 2.66, 8.78, 111.04),
    (128, 16384): (6.52, 53.30, 214.30, 5.02, 17.22, 216.32),
    (256, 512): (0.53, 4.54, 10.31, 0.51, 0.86, 29.71),
    (256, 1024): (0.67, 9.81, 27.16, 0.59, 0.59, 28.65),
    (256, 2048): (1.22, 26.17, 58.29, 1.18, 1.70, 57.07),
    (256, 4096): (2.04, 26.58, 96.20, 2.24, 5.33, 94.19),
    (256, 8192): (3.58, 51.80, 200.01, 3.39, 8.98, 205.88),
    (256, 16384): (6.52, 53.30, 399.35, 6.28, 18.30, 409.55),
}
#: Table II, seconds per 100,000 calls: gNewGerf, Sger(CUDA), ger(CPU).
PAPER_T2 = {
    (256, 256): (0.43, 0.46, 5.61),
    (512, 512): (1.75, 1.81, 21.88),
    (1024, 1024): (5.70, 5.91, 87.71),
    (2048, 2048): (21.48, 22.05, 159.03),
    (4096, 4096): (47.81, 49.30, 627.16),
    (128, 256): (0.19, 0.23, 3.04),
    (128, 512): (0.41, 0.47, 5.67),
    (128, 1024): (0.58, 0.78, 10.92),
    (128, 2048): (1.62, 1.85, 21.73),
    (128, 4096): (3.04, 3.30, 44.38),
    (128, 8192): (6.17, 6.82, 84.51),
    (256, 512): (0.54, 0.54, 11.09),
    (256, 1024): (1.13, 1.28, 21.57),
    (256, 2048): (2.67, 2.98, 43.71),
    (256, 4096): (5.78, 6.16, 85.65),
    (256, 8192): (10.49, 11.83, 157.26),
}
#: The paper's average time savings (text under Table II): vs cuBLAS, vs CPU, in %.
PAPER_AVG = {"Ax": (77.7, 96.2), "Aᵀx": (29.7, 96.7), "ger": (9.0, 92.9)}

QUICK_SHAPES = [(256, 256), (1024, 1024), (128, 4096), (256, 16384)]


def _saving(other, ours):
    """The paper's eq. 18, in percent (None when a time is missing)."""
    if other is None or ours is None:
        return None
    return 100.0 * (other - ours) / other


def _pct(v):
    return "—" if v is None else f"{v:+.1f}%"


def _us(paper_seconds):
    return fmt_time(paper_seconds / ITER)


# ------------------------------------------------------------------------------ Tables I and II
def _time_op(op, m, n, args, repeat, rng):
    """Times of one op on one shape: ours GPU call/kernel, cuBLAS call/kernel, CPU BLAS, ours NumPy."""
    from scipy.linalg import blas

    from sknn_gpu.linalg import gemv, ger

    A = rng.standard_normal((m, n), dtype=np.float32)
    r = {}
    if op == "ger":
        x = rng.standard_normal(m, dtype=np.float32) * 1e-3
        y = rng.standard_normal(n, dtype=np.float32) * 1e-3
        Af = A.T  # Fortran view: SciPy's sger updates it in place (rank-1 update of A)
        r["cpu"] = time_cpu(lambda: blas.sger(1.0, y, x, a=Af, overwrite_a=1), repeat=repeat)
        r["np"] = time_cpu(lambda: ger(1.0, x, y, A), repeat=repeat)
    else:
        trans = op == "Aᵀx"
        x = rng.standard_normal(m if trans else n, dtype=np.float32)
        y = np.zeros(n if trans else m, dtype=np.float32)
        Af = A.T
        r["cpu"] = time_cpu(lambda: blas.sgemv(1.0, Af, x, trans=0 if trans else 1), repeat=repeat)
        r["np"] = time_cpu(lambda: gemv(A, x, y, trans=trans), repeat=repeat)
    if args.gpu:
        import cupy

        dA, dx, dy = cupy.asarray(A), cupy.asarray(x), cupy.asarray(y)
        if op == "ger":
            check = dA.copy()
            ger(1.0, dx, dy, check)
            assert np.allclose(check.get(), A + np.outer(x, y), rtol=1e-5, atol=1e-6), (m, n)
            ours = lambda: ger(1.0, dx, dy, dA)  # noqa: E731
            cub = lambda: _cublas().ger(1.0, dx, dy, dA)  # noqa: E731
        else:
            got = gemv(dA, dx, trans=trans).get()
            ref = (A.T @ x) if trans else (A @ x)
            assert np.allclose(got, ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max()), (m, n, op)
            ours = lambda: gemv(dA, dx, dy, trans=trans)  # noqa: E731
            cub = lambda: _cublas().gemv("T" if trans else "N", 1.0, dA, dx, 0.0, dy)  # noqa: E731
        r["ours"] = time_call(ours, repeat=repeat, device="cuda")
        r["ours_k"] = time_gpu(ours, repeat=repeat)
        try:
            r["cub"] = time_call(cub, repeat=repeat, device="cuda")
            r["cub_k"] = time_gpu(cub, repeat=repeat)
        except Exception as exc:  # pragma: no cover - depends on the installed CuPy
            print(f"<!-- cuBLAS peer failed on {m}x{n} {op}: {type(exc).__name__}: {exc} -->")
    return r


def kernel_tables(args):
    repeat = 7 if args.quick else 50
    rng = np.random.default_rng(0)
    savings = {k: ([], []) for k in PAPER_AVG}
    for name, shapes, ops in (
        ("Table I: gemv, y = A x and y = Aᵀ x (float32), time per call", TABLE1, ("Ax", "Aᵀx")),
        ("Table II: ger, A += x yᵀ (float32), time per call", TABLE2, ("ger",)),
    ):
        shapes = [s for s in shapes if s in QUICK_SHAPES] if args.quick else shapes
        rows = []
        for m, n in shapes:
            for op in ops:
                r = _time_op(op, m, n, args, repeat, rng)
                if op == "ger":
                    p_ours, p_cub, p_cpu = PAPER_T2[(m, n)]
                else:
                    p = PAPER_T1[(m, n)]
                    p_ours, p_cub, p_cpu = p[:3] if op == "Ax" else p[3:]
                s_cub, s_cpu = _saving(r.get("cub"), r.get("ours")), _saving(r["cpu"], r.get("ours"))
                if s_cub is not None:
                    savings[op][0].append(s_cub)
                if s_cpu is not None:
                    savings[op][1].append(s_cpu)
                why = []
                if not args.gpu:
                    why.append("no GPU in this run")
                if s_cub is not None and (s_cub < 0) != (_saving(p_cub, p_ours) < 0):
                    why.append(
                        "today's cuBLAS has efficient small/skinny gemv kernels; at a few µs per call "
                        "both are bound by the launch and the Python call"
                    )
                rows.append(
                    {
                        "m × n": f"{m} × {n}",
                        "op": op,
                        "ours (GPU call)": fmt_time(r.get("ours")),
                        "cuBLAS call (ours run)": fmt_time(r.get("cub")),
                        "CPU BLAS (ours run)": fmt_time(r["cpu"]),
                        "ours NumPy path": fmt_time(r["np"]),
                        "one call, CUDA events (Python launch included): ours / cuBLAS": (
                            f"{fmt_time(r['ours_k'])} / {fmt_time(r.get('cub_k'))}" if "ours_k" in r else "—"
                        ),
                        "ours saving vs cuBLAS, CPU": f"{_pct(s_cub)}, {_pct(s_cpu)}",
                        "paper: ours / cuBLAS / CPU": f"{_us(p_ours)} / {_us(p_cub)} / {_us(p_cpu)}",
                        "paper saving": f"{_pct(_saving(p_cub, p_ours))}, {_pct(_saving(p_cpu, p_ours))}",
                        "differs because": "; ".join(why),
                    }
                )
        print(paper_table(name, rows, list(rows[0])))
    claims = []
    for op, (p_cub, p_cpu) in PAPER_AVG.items():
        c, h = savings[op]
        claims.append(
            {
                "operation": op,
                "ours: mean saving vs cuBLAS": _pct(float(np.mean(c))) if c else "— (no GPU)",
                "ours: mean saving vs CPU BLAS": _pct(float(np.mean(h))) if h else "— (no GPU)",
                "paper: vs cuBLAS": f"{p_cub:+.1f}%",
                "paper: vs CPU": f"{p_cpu:+.1f}%",
                "differs because": f"{PAPER_HW}; "
                + ("quick run: a subset of the shapes" if args.quick else "all the paper's shapes"),
            }
        )
    print(paper_table("Tables I-II: average time saving (eq. 18)", claims, list(claims[0])))


# ------------------------------------------------------------------------------ Fig. 3
#: The paper's Fig. 3 (right) claim: ours at least +300% faster (4x) "in most N".
PAPER_RIGHT_X = 4.0
PAPER_RIGHT = "ours +300% faster (4×) or more for most N"
PAPER_RIGHT_QUOTE = "'at least 300+ % outperformance in most N' (Fig. 3 compares with CUBLAS/CPU kernels)"
#: Samples per captured CUDA graph of the forward pass (4 launches each).
GRAPH_BLOCK = 100
#: Samples issued between two synchronisations when the host side is timed alone: at most
#: 4 x 64 launches are ever pending, far below the driver's launch queue, so the host
#: never blocks on a full queue and the time is what it spends issuing the calls.
HOST_CHUNK = 64
#: The call loop counts as host-bound when issuing its calls takes this share of its time.
HOST_BOUND = 0.8


@functools.cache
def _sigmoid_bias_kernel():
    import cupy

    return cupy.ElementwiseKernel(
        "float32 b", "float32 h", "h = 1.0f / (1.0f + expf(-(h + b)))", "sknn_bias_sigmoid"
    )


def forward_per_sample(gemv_fn, W1, b1, W2, b2, X, xp):
    """The paper's forward propagation: per sample, h = sigm(W1ᵀ x + b1), o = W2ᵀ h + b2, by GEMV.

    Returns the output of the last sample.
    """
    h = xp.empty(W1.shape[1], dtype=np.float32)
    o = xp.empty(W2.shape[1], dtype=np.float32)
    if xp is np:
        for x in X:
            gemv_fn(W1, x, h)
            h[:] = 1.0 / (1.0 + np.exp(-(h + b1)))
            gemv_fn(W2, h, o)
            o += b2
    else:
        act = _sigmoid_bias_kernel()
        for x in X:
            gemv_fn(W1, x, h)
            act(b1, h)
            gemv_fn(W2, h, o)
            o += b2
    return o


def _forward_ref(W1, b1, W2, b2, x, act=True):
    """float64 reference of one sample: the forward pass, or (``act=False``) the two gemv alone."""
    h = np.asarray(x, np.float64) @ W1.astype(np.float64)
    if not act:
        return h @ W2.astype(np.float64)
    h = 1.0 / (1.0 + np.exp(-(h + b1)))
    return h @ W2.astype(np.float64) + b2


def _max_err(got, ref):
    """Largest absolute difference, and whether it is within float32 tolerance of ``ref``."""
    err = float(np.max(np.abs(np.asarray(got, np.float64) - ref)))
    return err, err <= 1e-3 * max(1.0, float(np.max(np.abs(ref))))


def _per_sample(s):
    return "—" if s is None else f"{s * 1e6:.2f} µs"


def _calls(gemv_fn, W1, b1, W2, b2, h, o, act):
    """The four calls of one sample's forward pass, exactly as ``forward_per_sample`` issues them."""

    def gemv1(x):
        gemv_fn(W1, x, h)

    def sigm(x):
        act(b1, h)

    def gemv2(x):
        gemv_fn(W2, h, o)

    def bias(x):
        o.__iadd__(b2)  # o += b2

    return gemv1, sigm, gemv2, bias


def _host_issue(step, items, sync, chunk):
    """Host seconds spent in ``step(item)`` over ``items``, never waiting for the GPU.

    The items are issued ``chunk`` at a time; the GPU is synchronised between chunks,
    outside the timed region (so the launch queue never fills and blocks the host).
    Returns the total: the caller divides by its sample count.
    """
    total = 0.0
    for s in range(0, len(items), chunk):
        part = items[s : s + chunk]
        sync()
        t0 = time.perf_counter()
        for it in part:
            step(it)
        total += time.perf_counter() - t0
    sync()
    return total


def _capture(stream, body):
    """The CUDA graph of what ``body()`` issues on ``stream`` (the current stream, non-blocking)."""
    stream.begin_capture()
    try:
        body()
    except BaseException:
        try:
            stream.end_capture()  # leave the stream usable; the partial graph is dropped
        except Exception:
            pass
        raise
    return stream.end_capture()


#: cuBLAS enums (cublas_api.h): CUBLAS_OP_N, CUBLAS_POINTER_MODE_HOST.
CUBLAS_OP_N = 0
CUBLAS_POINTER_MODE_HOST = 0


@functools.cache
def _cublas_sgemv_v2():
    """``cublasSgemv_v2`` of the libcublas CuPy has loaded, called through ctypes.

    CuPy's wrappers cannot be captured: ``cupy.cublas.gemv`` *and* the low-level
    ``cupy_backends.cuda.libs.cublas.sgemv`` both call ``setStream`` on every call, which
    raises ``NotImplementedError`` while the current stream is capturing (CuPy >= 10).
    The C function itself is capturable (cuBLAS supports CUDA graph capture). The library
    is opened by the path it is mapped from in this process, so it is the very library
    that created CuPy's handle; if it is not mapped, this raises instead of guessing
    another copy (a handle of one copy used with another would crash, not raise).
    """
    import ctypes

    import cupy

    cupy.cuda.device.get_cublas_handle()  # loads libcublas and creates CuPy's handle
    path = None
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and os.path.basename(fields[5].strip()).startswith("libcublas.so"):
                path = fields[5].strip()
                break
    if path is None:
        raise RuntimeError("libcublas.so is not among the libraries this process has loaded")
    fn = ctypes.CDLL(path).cublasSgemv_v2
    p, i = ctypes.c_void_p, ctypes.c_int
    # handle, trans, m, n, alpha*, A*, lda, x*, incx, beta*, y*, incy
    fn.argtypes = [p, i, i, i, p, p, i, p, i, p, p, i]
    fn.restype = i
    return fn


def _cublas_gemv_t_direct(cupy):
    """``gemv_t(A, x, out)``: out = Aᵀ x by cuBLAS's sgemv C call, usable during stream capture.

    ``A`` is a C-order (k, N) float32 matrix: column-major it is an N x k matrix with
    lda = N, so out (length N) = that matrix · x is sgemv with CUBLAS_OP_N, m = N, n = k,
    lda = N -- exactly the call ``cupy.cublas.gemv("T", 1.0, A, x, 0.0, out)`` makes for a
    C-contiguous ``A``, so the same cuBLAS kernel runs. It runs on the stream CuPy's
    handle is set to and needs host pointer mode: call it inside ``_cublas_on_stream``.
    alpha = 1 and beta = 0 are read through host pointers to float32 arrays kept alive
    with the function (``gemv_t.scalars``).
    """
    sgemv = _cublas_sgemv_v2()
    handle = cupy.cuda.device.get_cublas_handle()
    one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)
    alpha, beta = one.ctypes.data, zero.ctypes.data

    def gemv_t(A, x, out):
        k, n = A.shape
        if not (A.flags.c_contiguous and A.dtype == x.dtype == out.dtype == np.float32):
            raise ValueError("need a C-contiguous float32 A and float32 x, out")
        if x.shape != (k,) or out.shape != (n,) or x.strides[0] != 4 or out.strides[0] != 4:
            raise ValueError(f"shapes {A.shape}, {x.shape}, {out.shape} (contiguous vectors) do not fit Aᵀx")
        status = sgemv(handle, CUBLAS_OP_N, n, k, alpha, A.data.ptr, n, x.data.ptr, 1, beta, out.data.ptr, 1)
        if status:
            raise RuntimeError(f"cublasSgemv_v2 returned status {status}")

    gemv_t.scalars = (one, zero)
    return gemv_t


@contextlib.contextmanager
def _cublas_on_stream(stream):
    """CuPy's cuBLAS handle on ``stream`` in host pointer mode; its stream and mode restored after.

    Enter it before the capture begins (``setStream`` refuses a capturing stream) and
    leave it after the capture has ended; later CuPy calls see the handle as before.
    """
    import cupy
    from cupy_backends.cuda.libs import cublas

    handle = cupy.cuda.device.get_cublas_handle()
    old_stream, old_mode = cublas.getStream(handle), cublas.getPointerMode(handle)
    cublas.setStream(handle, stream.ptr)
    cublas.setPointerMode(handle, CUBLAS_POINTER_MODE_HOST)
    try:
        yield handle
    finally:
        cublas.setPointerMode(handle, old_mode)
        cublas.setStream(handle, old_stream)


def _graph_replay(cupy, step, dX, n, block, check, repeat=3, on_stream=None):
    """GPU seconds per sample of ``step(x)`` over the first ``n`` rows of ``dX``, replayed from a CUDA graph.

    The graph holds ``block`` samples one after another: ``step`` on each row of a fixed
    device buffer, captured on a non-blocking stream, i.e. the very launches of the call
    loop, in order, with the host out of the way. Before each replay the next ``block``
    rows are copied into that buffer (one device-to-device memcpy per block, included in
    the time), so every replay reads new samples. Timed with CUDA events around all the
    replays (the host issues one memcpy and one graph launch per block, far less than the
    GPU work of a block). Returns ``(seconds per sample, check(i))`` where ``i`` is the
    row of the last sample: ``check`` compares the output left by the last replay.
    ``on_stream(stream)``, if given, is a context manager entered on the capture stream
    before the warm-up and left after the last replay (``_cublas_on_stream``).
    """
    if not dX.flags.c_contiguous:
        raise ValueError("dX must be C-contiguous")
    nb = n // block
    if nb < 1:
        raise ValueError(f"need at least {block} samples, got {n}")
    nbytes = block * dX.shape[1] * dX.itemsize
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream, (on_stream or (lambda _: contextlib.nullcontext()))(stream):
        xbuf = cupy.empty((block, dX.shape[1]), dtype=dX.dtype)
        dst = xbuf.data
        srcs = [dX[j * block : (j + 1) * block].data for j in range(nb)]
        rows = [xbuf[i] for i in range(block)]
        dst.copy_from_device_async(srcs[0], nbytes, stream)
        # warm-up on this stream before capturing: compiled kernels, our cached launch
        # records, gemv's split-reduction workspace of this stream, cuBLAS pointed at it
        for x in rows[:2]:
            step(x)
        stream.synchronize()

        def body():
            for x in rows:
                step(x)

        graph = _capture(stream, body)

        def replay():
            for src in srcs:
                dst.copy_from_device_async(src, nbytes, stream)
                graph.launch(stream)

        replay()  # the first launch also uploads the graph
        stream.synchronize()
        times = []
        for _ in range(repeat):
            e0 = stream.record()
            replay()
            e1 = stream.record()
            e1.synchronize()
            times.append(cupy.cuda.get_elapsed_time(e0, e1) / 1e3 / (nb * block))
        result = check(nb * block - 1)
        stream.synchronize()
    return float(np.median(times)), result


def _fig3_right_gpu(W1, b1, W2, b2, X, n_fwd, sub_f, n_host, n_graph, block):
    """Fig. 3 (right) on the GPU for one N, ours and cuBLAS: the call loop and its profile.

    ``f_ours``/``f_cub``: the call loop (today's column, scaled to ``n_fwd``); ``prof``:
    per path, seconds per sample of the synchronised loop (``loop``), of issuing it
    without waiting for the GPU (``host``), of each call alone (``parts``), and the GPU
    time of the forward pass and of the two gemv alone replayed from a CUDA graph
    (``graph``, ``graph_gemv``; ``*_fail`` says why one is missing). CuPy refuses cuBLAS
    calls while a stream is capturing, so cuBLAS's graph is captured from the same sgemv
    called through its C API (``_cublas_gemv_t_direct``: the arguments ``cupy.cublas.gemv``
    passes, so the same kernel), checked against NumPy uncaptured first; the call loop
    and the host profile keep ``cupy.cublas.gemv``, what a user's Python loop calls.
    """
    import cupy

    from sknn_gpu.linalg import gemv

    dW1, dW2, db1, db2 = (cupy.asarray(a) for a in (W1, W2, b1, b2))
    if len(X) < max(sub_f, HOST_CHUNK, block):
        raise ValueError(f"need at least {max(sub_f, HOST_CHUNK, block)} samples, got {len(X)}")
    n_host = max(HOST_CHUNK, min(n_host, len(X)) // HOST_CHUNK * HOST_CHUNK)
    n_graph = max(block, min(n_graph, len(X)) // block * block)
    dX = cupy.ascontiguousarray(cupy.asarray(X[: max(sub_f, n_host, n_graph)]))
    dXf = dX[:sub_f]
    sync = cupy.cuda.get_current_stream().synchronize

    def ours_gemv(A, x, out):
        gemv(A, x, out, trans=True)

    def cub_gemv(A, x, out):
        _cublas().gemv("T", 1.0, A, x, 0.0, out)

    res = {"prof": {}, "n_graph": n_graph, "n_host": n_host}
    for key, name, fn in (("f_ours", "ours", ours_gemv), ("f_cub", "cuBLAS", cub_gemv)):
        p = {}
        # today's measurement: the call loop, synchronised once at its end
        loop = time_call(
            lambda fn=fn: forward_per_sample(fn, dW1, db1, dW2, db2, dXf, cupy),
            repeat=3,
            warmup=1,
            device="cuda",
        )
        res[key] = loop * n_fwd / sub_f
        p["loop"] = loop / sub_f
        o_last = forward_per_sample(fn, dW1, db1, dW2, db2, dXf, cupy).get()
        p["loop_err"], p["loop_ok"] = _max_err(o_last, _forward_ref(W1, b1, W2, b2, X[sub_f - 1]))
        # (a) host: the same loop issued without waiting for the GPU, then each call alone
        chunks = [dX[s : s + HOST_CHUNK] for s in range(0, n_host, HOST_CHUNK)]
        p["host"] = (
            _host_issue(
                lambda Xc, fn=fn: forward_per_sample(fn, dW1, db1, dW2, db2, Xc, cupy), chunks, sync, 1
            )
            / n_host
        )
        h = cupy.empty(W1.shape[1], dtype=np.float32)
        o = cupy.empty(W2.shape[1], dtype=np.float32)
        calls = _calls(fn, dW1, db1, dW2, db2, h, o, _sigmoid_bias_kernel())
        xs = [dX[i] for i in range(n_host)]
        p["parts"] = tuple(_host_issue(c, xs, sync, HOST_CHUNK) / n_host for c in calls)
        # (b) the GPU alone: the same launches replayed from a CUDA graph
        gcalls, on_stream = calls, None
        if fn is cub_gemv:  # cuBLAS's sgemv through its C API (CuPy's wrappers refuse capture)
            try:
                direct = _cublas_gemv_t_direct(cupy)
                with _cublas_on_stream(cupy.cuda.get_current_stream()):
                    direct(dW1, dX[0], h)
                    direct(dW2, h, o)
                err, ok = _max_err(o.get(), _forward_ref(W1, b1, W2, b2, X[0], act=False))
                if not ok:
                    raise RuntimeError(
                        f"direct cublasSgemv_v2 output differs from NumPy (max abs error {err:.2e})"
                    )
            except Exception as exc:  # report, never crash
                msg = " ".join(f"{type(exc).__name__}: {exc}".split())
                p["graph_fail"] = p["graph_gemv_fail"] = f"capture not tried: {msg[:200]}"
                res["prof"][name] = p
                continue
            gcalls, on_stream = (
                _calls(direct, dW1, db1, dW2, db2, h, o, _sigmoid_bias_kernel()),
                _cublas_on_stream,
            )
        for gkey, steps, act in (("graph", gcalls, True), ("graph_gemv", (gcalls[0], gcalls[2]), False)):

            def step(x, steps=steps):
                for c in steps:
                    c(x)

            def check(i, act=act):
                return _max_err(o.get(), _forward_ref(W1, b1, W2, b2, X[i], act=act))

            try:
                t, (err, ok) = _graph_replay(cupy, step, dX, n_graph, block, check, on_stream=on_stream)
            except Exception as exc:  # report, never crash: the lead decides what to change
                msg = " ".join(f"{type(exc).__name__}: {exc}".split())
                p[gkey + "_fail"] = f"capture failed: {msg[:200]}"
                continue
            if ok:
                p[gkey], p[gkey + "_err"] = t, err
            else:
                p[gkey + "_fail"] = f"graph output differs from NumPy (max abs error {err:.2e})"
        res["prof"][name] = p
    return res


def _ratio(a, b):
    return None if a is None or b is None or b <= 0 else a / b


def _x(v, digits=2):
    return "—" if v is None else f"{v:.{digits}f}×"


def _right_row(r, n_fwd):
    """One row of the Fig. 3 (right) table; the verdict is computed from the measured numbers."""
    row = {
        "N": r["N"],
        "ours GPU (our gemv)": fmt_time(r.get("f_ours")),
        "ours GPU (cuBLAS gemv)": fmt_time(r.get("f_cub")),
        "CPU BLAS": fmt_time(r["f_cpu"]),
        "ours speed-up vs cuBLAS, CPU": (
            f"{r['f_cub'] / r['f_ours']:.2f}×, {r['f_cpu'] / r['f_ours']:.1f}×" if "f_ours" in r else "—"
        ),
        "ours GPU time, graph replay (launch overhead removed): our gemv / cuBLAS gemv": "—",
        "ours graph-replay speed-up vs cuBLAS: forward; the 2 gemv alone": "—",
        "paper (Fig. 3 right)": PAPER_RIGHT,
    }
    if "prof" not in r:
        row["differs because"] = "no GPU in this run"
        return row
    po, pc = r["prof"]["ours"], r["prof"]["cuBLAS"]
    cpu = r["f_cpu"] / n_fwd
    row["ours GPU time, graph replay (launch overhead removed): our gemv / cuBLAS gemv"] = " / ".join(
        fmt_time(p["graph"] * n_fwd) if "graph" in p else "capture failed" for p in (po, pc)
    )
    g_ratio = _ratio(pc.get("graph"), po.get("graph"))
    gg_ratio = _ratio(pc.get("graph_gemv"), po.get("graph_gemv"))
    row["ours graph-replay speed-up vs cuBLAS: forward; the 2 gemv alone"] = f"{_x(g_ratio)}; {_x(gg_ratio)}"
    why = []
    shares = [(name, p["host"] / p["loop"], p) for name, p in (("ours", po), ("cuBLAS", pc))]
    bound = [name for name, s, _ in shares if s >= HOST_BOUND]
    detail = ", ".join(
        f"{name} {_per_sample(p['host'])} of {_per_sample(p['loop'])} ({s:.0%})" for name, s, p in shares
    )
    if len(bound) == 2:
        why.append(f"the call loop is host-bound: issuing the 4 calls takes, per sample, {detail}")
    elif bound:
        why.append(f"the call loop is host-bound for {bound[0]} only: host issue per sample {detail}")
    else:
        why.append(f"the call loop is not host-bound: host issue per sample {detail}")
    fails = [
        f"{name}: {p[k]}" for name, p in (("ours", po), ("cuBLAS", pc)) for k in ("graph_fail",) if k in p
    ]
    if fails:
        why.append("; ".join(fails))
    elif g_ratio >= PAPER_RIGHT_X:
        why.append(f"met with launch overhead removed: graph replay {g_ratio:.2f}× ≥ {PAPER_RIGHT_X:g}×")
    else:
        why.append(
            f"not met with launch overhead removed either: graph replay {g_ratio:.2f}× < {PAPER_RIGHT_X:g}× "
            f"(GPU per sample {_per_sample(po['graph'])} ours vs {_per_sample(pc['graph'])} cuBLAS; "
            f"the 2 gemv alone {_x(gg_ratio)})"
        )
    if "graph" in po:
        if cpu <= po["graph"]:
            why.append(f"CPU BLAS ({_per_sample(cpu)}/sample) is faster even than the graph replay")
        elif cpu <= po["loop"]:
            why.append(
                f"CPU BLAS ({_per_sample(cpu)}/sample) beats the Python call loop "
                f"({_per_sample(po['loop'])}) but not the graph replay ({_per_sample(po['graph'])})"
            )
    bad = [name for name, p in (("ours", po), ("cuBLAS", pc)) if not p["loop_ok"]]
    if bad:
        why.append(f"call-loop output differs from NumPy: {', '.join(bad)}")
    row["differs because"] = "; ".join(why)
    return row


PROFILE_COLS = [
    "N",
    "gemv",
    "ours run: call loop, synced",
    "host issue of the loop (no sync)",
    "host per call: gemv₁ / σ(·+b₁) / gemv₂ / +b₂",
    "GPU per sample, graph replay: forward / 2 gemv alone",
    "host share of the loop",
    "check, max abs error: loop / graph",
    "paper",
    "differs because",
]


def _profile_rows(r):
    """Rows of the per-sample profile table for one N (ours and cuBLAS)."""
    paper = "no breakdown (its times are a C loop: CPU-side checks + launch + kernels)"
    if "prof" not in r:
        return [{"N": r["N"], "gemv": "—", "paper": paper, "differs because": "no GPU in this run"}]
    rows = []
    for name, p in r["prof"].items():
        share = p["host"] / p["loop"]
        parts = p["parts"]
        graph = " / ".join(_per_sample(p[k]) if k in p else "capture failed" for k in ("graph", "graph_gemv"))
        errs = f"{p['loop_err']:.1e} / " + (f"{p['graph_err']:.1e}" if "graph_err" in p else "—")
        if share >= HOST_BOUND:
            why = f"host-bound: issuing the calls is {share:.0%} of the loop"
        else:
            why = f"not host-bound: issuing the calls is {share:.0%} of the loop"
        extra = p["host"] - sum(parts)
        why += (
            f"; the 4 calls alone cost {_per_sample(sum(parts))} of host time, "
            f"the loop around them {_per_sample(extra)}"
        )
        if "graph" in p:
            why += f"; the GPU's own work is {p['graph'] / p['loop']:.0%} of the loop time"
        for k in ("graph_fail", "graph_gemv_fail"):
            if k in p:
                why += f"; {'forward' if k == 'graph_fail' else '2 gemv'} graph: {p[k]}"
        rows.append(
            {
                "N": r["N"],
                "gemv": name,
                "ours run: call loop, synced": _per_sample(p["loop"]),
                "host issue of the loop (no sync)": _per_sample(p["host"]),
                "host per call: gemv₁ / σ(·+b₁) / gemv₂ / +b₂": " / ".join(f"{t * 1e6:.2f}" for t in parts)
                + " µs",
                "GPU per sample, graph replay: forward / 2 gemv alone": graph,
                "host share of the loop": f"{share:.0%}",
                "check, max abs error: loop / graph": errs,
                "paper": paper,
                "differs because": why,
            }
        )
    return rows


def _right_claims(curves, n_fwd, quick):
    """The Fig. 3 (right) claims, each checked against the measured numbers."""
    prof = [r for r in curves if "prof" in r]
    n = len(prof)

    def tally(vals, target):
        vals = [v for v in vals if v is not None]
        if not vals:
            return None, "— (no measurement)"
        k = sum(v >= target for v in vals)
        return k, f"{k} of {len(vals)} N ≥ {target:g}×; median {float(np.median(vals)):.2f}×"

    def verdict(k, total):
        if k is None:
            return "not checked"
        return "met" if 2 * k > total else "not met"

    if not n:
        return [
            {
                "claim": c,
                "ours": "not run (no GPU)",
                "paper": PAPER_RIGHT,
                "verdict (computed)": "not checked",
                "differs because": "no GPU in this run",
            }
            for c in ("ours ≥ 4× cuBLAS, call loop", "ours ≥ 4× cuBLAS, graph replay", "ours ≥ 4× CPU BLAS")
        ]
    size = "quick run: a subset of N and of the samples" if quick else "all the paper's N"
    loop = [_ratio(r["f_cub"], r["f_ours"]) for r in prof]
    graph = [_ratio(r["prof"]["cuBLAS"].get("graph"), r["prof"]["ours"].get("graph")) for r in prof]
    gemv2 = [_ratio(r["prof"]["cuBLAS"].get("graph_gemv"), r["prof"]["ours"].get("graph_gemv")) for r in prof]
    cpu_loop = [_ratio(r["f_cpu"], r["f_ours"]) for r in prof]
    cpu_graph = [_ratio(r["f_cpu"] / n_fwd, r["prof"]["ours"].get("graph")) for r in prof]
    hb = {
        name: sum(r["prof"][name]["host"] / r["prof"][name]["loop"] >= HOST_BOUND for r in prof)
        for name in ("ours", "cuBLAS")
    }
    claims = []
    for claim, vals, target, paper, note in (
        (
            "ours ≥ 4× cuBLAS, call loop (Python issues each call; today's columns)",
            loop,
            PAPER_RIGHT_X,
            PAPER_RIGHT,
            "the paper's loop is C: its per-call host cost is a fraction of a Python call's",
        ),
        (
            "ours ≥ 4× cuBLAS, GPU time with launch overhead removed "
            "(graph replay; closest to the paper's C loop)",
            graph,
            PAPER_RIGHT_X,
            PAPER_RIGHT,
            "same launches replayed from a CUDA graph: what is left is the GPU work of the 4 kernels",
        ),
        (
            "ours ≥ 4× cuBLAS, the 2 gemv alone (graph replay)",
            gemv2,
            PAPER_RIGHT_X,
            "the forward pass 'purely consists of our kernels'",
            "the sigmoid and bias kernels are the same on both sides; this ratio leaves them out",
        ),
        (
            "ours ≥ 4× CPU BLAS, call loop",
            cpu_loop,
            PAPER_RIGHT_X,
            PAPER_RIGHT_QUOTE,
            PAPER_HW,
        ),
        (
            "ours ≥ 4× CPU BLAS, graph replay",
            cpu_graph,
            PAPER_RIGHT_X,
            PAPER_RIGHT_QUOTE,
            PAPER_HW,
        ),
    ):
        k, text = tally(vals, target)
        claims.append(
            {
                "claim": claim,
                "ours": f"{text}; {size}",
                "paper": paper,
                "verdict (computed)": verdict(k, len([v for v in vals if v is not None])),
                "differs because": note,
            }
        )
    claims.append(
        {
            "claim": f"explanation: the call loop is host-bound (host issue ≥ {HOST_BOUND:.0%} of its time)",
            "ours": f"ours at {hb['ours']} of {n} N, cuBLAS at {hb['cuBLAS']} of {n} N",
            "paper": "— (its times include CPU-side checks and launches, from C)",
            "verdict (computed)": "holds" if 2 * hb["ours"] > n and 2 * hb["cuBLAS"] > n else "does not hold",
            "differs because": "host issue = the same loop timed without waiting for the GPU",
        }
    )
    return claims


def fig3_right(
    args, Ns, X, n_fwd=10_000, sub_f=2_000, n_host=1_000, n_graph=10_000, block=GRAPH_BLOCK, seed=1
):
    """Fig. 3 (right): the per-sample forward pass by GEMV, its profile and its claims (printed).

    ``X`` are the (NumPy) samples; the call loops run on ``sub_f`` of them and are scaled
    to ``n_fwd``; the host profile issues ``n_host``, the graph replay ``n_graph``. GPU
    parts run only with ``args.gpu``. Returns one dict per N (``f_*`` totals in seconds
    for ``n_fwd`` samples, ``prof`` the per-sample profile).
    """
    from scipy.linalg import blas

    def cpu_blas(A, x, out):
        out[:] = blas.sgemv(1.0, A.T, x, trans=0)  # A is C-order (k, N): A.T is Fortran

    rng = np.random.default_rng(seed)
    curves = []
    for N in Ns:
        W1 = rng.standard_normal((X.shape[1], N), dtype=np.float32) * 0.05
        W2 = rng.standard_normal((N, 10), dtype=np.float32) * 0.05
        b1 = rng.standard_normal(N, dtype=np.float32) * 0.05
        b2 = rng.standard_normal(10, dtype=np.float32) * 0.05
        r = {"N": N}
        r["f_cpu"] = (
            time_cpu(lambda: forward_per_sample(cpu_blas, W1, b1, W2, b2, X[:sub_f], np), repeat=3)  # noqa: B023
            * n_fwd
            / sub_f
        )
        if args.gpu:
            r.update(_fig3_right_gpu(W1, b1, W2, b2, X, n_fwd, sub_f, n_host, n_graph, block))
            for name, key in (("ours", "g_ours"), ("cuBLAS", "g_cub")):
                if "graph" in r["prof"][name]:
                    r[key] = r["prof"][name]["graph"] * n_fwd
        curves.append(r)
    rows = [_right_row(r, n_fwd) for r in curves]
    print(
        paper_table(
            f"Fig. 3 (right): forward propagation of {n_fwd:,} samples one at a time (GEMV per layer)",
            rows,
            list(rows[0]),
        )
    )
    prof = [row for r in curves for row in _profile_rows(r)]
    n_graph_used = next((r["n_graph"] for r in curves if "n_graph" in r), None)
    n_host_used = next((r["n_host"] for r in curves if "n_host" in r), None)
    print(
        paper_table(
            "Fig. 3 (right), profile: where one sample's time goes (per sample; "
            f"call loop on {sub_f:,} samples, host issue on {n_host_used or n_host:,}, graph replay on "
            f"{n_graph_used or n_graph:,} in graphs of {block} samples)",
            prof,
            PROFILE_COLS,
        )
    )
    claims = _right_claims(curves, n_fwd, args.quick)
    print(paper_table("Fig. 3 (right): the paper's claim, checked", claims, list(claims[0])))
    return curves


def fig3(args):
    from sklearn.neural_network import MLPClassifier

    from sknn_gpu import GPUMLPClassifier

    warnings.simplefilter("ignore")
    n_total = 60_000
    rng = np.random.default_rng(0)
    n_data = 2_000 if args.quick else n_total
    X = rng.random((n_data, 784), dtype=np.float32)
    y = rng.integers(0, 10, n_data)
    Ns = sized(args, [10, 20, 40, 80, 160, 320, 640, 1280], [10, 80, 320], [10, 80])
    common = dict(solver="sgd", momentum=0.0, learning_rate_init=0.01, max_iter=1, random_state=0, alpha=1e-4)
    n_fwd = 10_000  # MNIST's test set
    rows_e, curves = [], []
    for N in Ns:
        sub_cpu = sized(args, 300 if N >= 640 else 1000, 200, 100)
        scale = n_total / sub_cpu
        r = {"N": N}
        t0 = time.perf_counter()
        MLPClassifier((N,), batch_size=1, **common).fit(X[:sub_cpu], y[:sub_cpu])
        r["sk"] = (time.perf_counter() - t0) * scale
        t0 = time.perf_counter()
        GPUMLPClassifier((N,), batch_size=1, device="cpu", **common).fit(X[:sub_cpu], y[:sub_cpu])
        r["np"] = (time.perf_counter() - t0) * scale
        if args.gpu:
            import cupy

            dX, dy = cupy.asarray(X), cupy.asarray(y)
            for kern in ("custom", "cublas"):  # compile and warm up
                GPUMLPClassifier((N,), batch_size=1, kernels=kern, device="cuda", **common).fit(
                    dX[:400], dy[:400]
                )
            clf = GPUMLPClassifier((N,), batch_size=1, device="cuda", **common)
            r["ours"] = time_call(lambda: clf.fit(dX, dy), repeat=3, warmup=0, device="cuda")  # noqa: B023
            sub_cub = 2_000
            cub = GPUMLPClassifier((N,), batch_size=1, kernels="cublas", device="cuda", **common)
            r["cub"] = (
                time_call(lambda: cub.fit(dX[:sub_cub], dy[:sub_cub]), repeat=1, warmup=0, device="cuda")  # noqa: B023
                * n_total
                / sub_cub
            )
            r["cub_note"] = f"×{n_total // sub_cub} of {sub_cub:,}"
        curves.append(r)
        best_cpu = min(r["sk"], r["np"])
        rows_e.append(
            {
                "N": N,
                "ours GPU (fused kernel)": fmt_time(r.get("ours")),
                "ours GPU, kernels='cublas'": fmt_time(r.get("cub"))
                + (f" ({r['cub_note']})" if "cub_note" in r else ""),
                "ours CPU (NumPy)": f"{fmt_time(r['np'])} (×{scale:g} of {sub_cpu:,})",
                "scikit-learn CPU": f"{fmt_time(r['sk'])} (×{scale:g} of {sub_cpu:,})",
                "ours speed-up vs cuBLAS, best CPU": (
                    f"{r['cub'] / r['ours']:.1f}×, {best_cpu / r['ours']:.0f}×" if "ours" in r else "—"
                ),
                "paper (Fig. 3 left)": "ours +200% faster (3×) than cuBLAS / CPU on average",
                "differs because": (
                    "ours fuses a whole epoch into one persistent kernel; "
                    "the paper kept one kernel per matrix operation"
                    if "ours" in r
                    else "no GPU in this run"
                ),
            }
        )
    print(
        paper_table(
            f"Fig. 3 (left): one epoch of per-sample SGD (no momentum) on {n_total:,} MNIST-shaped samples",
            rows_e,
            list(rows_e[0]),
        )
    )
    # forward propagation, per sample, by GEMV (the paper's Fig. 3 right), and its profile
    if args.quick:
        right = fig3_right(args, Ns, X, n_fwd, sub_f=200, n_host=256, n_graph=n_data)
    else:
        right = fig3_right(args, Ns, X, n_fwd, sub_f=2_000, n_host=1_024, n_graph=n_fwd)
    for r, rr in zip(curves, right):
        r.update({k: v for k, v in rr.items() if k != "N"})
    fig, axes = new_figure(args, 1, 2, figsize=(11, 4))
    if fig is not None:
        Nv = [r["N"] for r in curves]
        for ax, series, title in (
            (
                axes[0],
                (
                    ("ours", "ours GPU, fused"),
                    ("cub", "ours GPU, kernels='cublas'"),
                    ("np", "ours CPU"),
                    ("sk", "sklearn CPU"),
                ),
                "one epoch, per-sample SGD",
            ),
            (
                axes[1],
                (
                    ("f_ours", "GPU call loop, our gemv"),
                    ("f_cub", "GPU call loop, cuBLAS gemv"),
                    ("g_ours", "GPU graph replay, our gemv"),
                    ("g_cub", "GPU graph replay, cuBLAS gemv"),
                    ("f_cpu", "CPU BLAS"),
                ),
                f"forward pass, {n_fwd:,} samples one at a time",
            ),
        ):
            for key, label in series:
                vals = [r.get(key) for r in curves]
                if any(v is not None for v in vals):
                    style = "s--" if key.startswith("g_") else "o-"
                    ax.plot(Nv, vals, style, label=label, markersize=4)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("hidden units N")
            ax.set_ylabel("seconds")
            ax.set_title(title, fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
        save_plot(fig, args.plots, "mlp_fig3")


def main(argv=None):
    args = parse_args(__doc__.splitlines()[0], argv)
    t0 = time.perf_counter()
    heading(TITLE, args)
    kernel_tables(args)
    fig3(args)
    print(
        "Notes: the paper's figures are totals over 100,000 calls, shown here per call. Its 256 × N "
        "gemv rows repeat its 128 × N figures for gNewGemvf and Sgemv exactly (quoted as printed). "
        "Scaled rows ran on the subset named in the cell and are multiplied up to the full size.\n"
    )
    print(f"_total run time {time.perf_counter() - t0:.1f} s_\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
