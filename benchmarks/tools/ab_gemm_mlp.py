"""GPUMLPClassifier's inference products against PyTorch's on one GPU: the float32 GEMMs of
``predict_proba`` (10,000 rows through the default and wider layers) and of a minibatch
step (200 rows), ours (cuBLAS ``Sgemm`` through its C API, as the trainer and
``forward_cuda`` call it; ``cupy.matmul``) beside ``torch.mm``, ``torch.addmm`` and
``addmm`` + ``relu`` (TF32 off, PyTorch's default); then the whole forward pass
(``forward_cuda`` against addmm/relu/softmax), GPU time (CUDA events) and wall clock with
synchronisation. Medians of 50. Needs CuPy and PyTorch.

Run from the repository root::

    python benchmarks/tools/ab_gemm_mlp.py
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cupy as cp
import numpy as np
import torch

from sknn_gpu.neural_network._mlp_graph import cublas_library, gemm, on_current_stream
from sknn_gpu.neural_network._predict_cuda import forward_cuda

SHAPES = [
    (10000, 784, 100),
    (10000, 784, 1280),
    (10000, 1280, 10),
    (10000, 784, 512),
    (10000, 512, 256),
    (200, 784, 1280),
    (200, 1280, 10),
    (1280, 200, 784),
]


def events_us(f, record, n=50):
    """Median GPU time of ``f()`` in microseconds; ``record()`` makes a started event pair."""
    for _ in range(5):
        f()
    times = []
    for _ in range(n):
        a, b = record()
        a.record()
        f()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) if hasattr(a, "elapsed_time") else cp.cuda.get_elapsed_time(a, b))
    return float(np.median(times)) * 1e3


def wall_us(f, sync, n=50):
    for _ in range(5):
        f()
    sync()
    times = []
    for _ in range(n):
        start = time.perf_counter()
        f()
        sync()
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e6


def main():
    lib = cublas_library()
    h = on_current_stream(lib)

    def cp_pair():
        return cp.cuda.Event(), cp.cuda.Event()

    def torch_pair():
        return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    print("tf32 allowed:", torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision())
    rng = np.random.default_rng(0)
    for m, k, n in SHAPES:
        A = cp.asarray(rng.random((m, k), dtype=np.float32))
        B = cp.asarray(rng.random((k, n), dtype=np.float32))
        C = cp.empty((m, n), cp.float32)
        bias = cp.asarray(rng.random(n, dtype=np.float32))
        At, Bt, bt = (torch.as_tensor(a, device="cuda") for a in (A, B, bias))
        ours = events_us(lambda: gemm(lib, h, A, B, C), cp_pair)  # noqa: B023
        cupy_mm = events_us(lambda: cp.matmul(A, B), cp_pair)  # noqa: B023
        mm = events_us(lambda: torch.mm(At, Bt), torch_pair)  # noqa: B023
        addmm = events_us(lambda: torch.addmm(bt, At, Bt), torch_pair)  # noqa: B023
        relu = events_us(lambda: torch.relu(torch.addmm(bt, At, Bt)), torch_pair)  # noqa: B023
        flops = 2 * m * k * n
        print(
            f"{m}x{k}x{n}: ours cublasSgemm {ours:7.1f} us  cp.matmul {cupy_mm:7.1f}  torch.mm {mm:7.1f}  "
            f"addmm {addmm:7.1f}  addmm+relu {relu:7.1f}   ({flops / ours / 1e6:.1f} TFLOPS ours, "
            f"{flops / mm / 1e6:.1f} torch)"
        )
    for hidden in [(100,), (1280,), (512, 256)]:
        units = [784, *hidden, 10]
        W = [
            cp.asarray(rng.standard_normal((a, b), dtype=np.float32) * 0.05)
            for a, b in zip(units[:-1], units[1:])
        ]
        b = [cp.asarray(rng.standard_normal(u, dtype=np.float32) * 0.05) for u in units[1:]]
        X = cp.asarray(rng.random((10000, 784), dtype=np.float32))
        Wt = [torch.as_tensor(w, device="cuda") for w in W]
        bt = [torch.as_tensor(x, device="cuda") for x in b]
        Xt = torch.as_tensor(X, device="cuda")

        def torch_forward(Wt=Wt, bt=bt, Xt=Xt):
            a = Xt
            for i, (w, bb) in enumerate(zip(Wt, bt)):
                a = torch.addmm(bb, a, w)
                if i < len(Wt) - 1:
                    a = torch.relu(a)
            return torch.softmax(a, dim=1)

        def ours_forward(X=X, W=W, b=b):
            return forward_cuda(X, W, b, "relu", "softmax")

        g1, g2 = events_us(ours_forward, cp_pair), events_us(torch_forward, torch_pair)
        w1 = wall_us(ours_forward, cp.cuda.Device().synchronize)
        w2 = wall_us(torch_forward, torch.cuda.synchronize)
        print(f"forward {hidden}: ours GPU {g1:.1f} us wall {w1:.1f}; torch GPU {g2:.1f} wall {w2:.1f}")


if __name__ == "__main__":
    main()
