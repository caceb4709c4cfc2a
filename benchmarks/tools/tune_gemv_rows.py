"""Tuning sweep behind gemv_rows_multi: rows per warp (1, 2, 4, 8) and grid size for
float32 ``Ax`` on large matrices, beside cuBLAS and ``torch.mv``, in one process.

Queued GPU time: 20 calls between two events, median of 5; every variant is checked
bit-identical to the one-row kernel. Run on a GPU: ``python benchmarks/tools/tune_gemv_rows.py``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

from sknn_gpu._backend import device_limits  # noqa: E402
from sknn_gpu._kernels import get_function  # noqa: E402

n_sm = device_limits().sm_count
try:
    import torch
except ImportError:
    torch = None


def queued(fn, n=20):
    for _ in range(3):
        fn()
    s, e = cp.cuda.Event(), cp.cuda.Event()
    ts = []
    for _ in range(5):
        s.record()
        for _ in range(n):
            fn()
        e.record()
        e.synchronize()
        ts.append(cp.cuda.get_elapsed_time(s, e) / 1e3 / n)
    return float(np.median(ts))


for m, n in [(16384, 16384), (8192, 8192), (4096, 32768), (65536, 512), (32768, 32768)]:
    A = cp.random.standard_normal((m, n), dtype=cp.float32)
    x = cp.random.standard_normal(n, dtype=cp.float32)
    y0 = cp.zeros(m, dtype=cp.float32)
    y1 = cp.zeros(m, dtype=cp.float32)
    args = lambda y: (A, x, y, np.int64(m), np.int64(n), np.float32(1), np.float32(0))
    k0 = get_function("gemv", "gemv_rows<float,32,true>")
    g0 = int(min(-(-m // 8), n_sm * 16))
    res = {}
    res["old rows"] = queued(lambda: k0((g0,), (256,), args(y0)))
    for R in (2, 4, 8):
        kR = get_function("gemv", f"gemv_rows_multi<float,{R}>")
        for waves in (4, 8, 16):
            g = int(min(-(-m // (8 * R)), n_sm * waves))
            res[f"multi R={R} grid {waves}/SM"] = queued(lambda: kR((g,), (256,), args(y1)))
            assert cp.array_equal(y0, y1), (m, n, R)
    from cupy.cublas import gemv as cgemv

    res["cuBLAS"] = queued(lambda: cgemv("N", 1.0, A, x, 0.0, y1))
    if torch is not None:
        tA = torch.as_tensor(A, device="cuda")
        tx = torch.as_tensor(x, device="cuda")
        ty = torch.empty(m, device="cuda")
        res["torch.mv"] = queued(lambda: torch.mv(tA, tx, out=ty))
    print(f"== {m}x{n} ({A.nbytes / 2**20:.0f} MB)")
    for k, t in sorted(res.items(), key=lambda kv: kv[1]):
        print(f"   {k:28s} {t * 1e6:9.1f} us  {A.nbytes / t / 1e12:5.2f} TB/s")
    A = None  # free before the next size
