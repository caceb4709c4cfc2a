"""FlyHash tensor-core path alone: `words()` on integer-valued and on float input ('fast').

GPU only. Times the engine call (float16 conversion, cuBLAS products, ``fly_select``)
and the whole ``transform`` with ``precision='fast'``, CUDA-event medians, at the
FashionMNIST and CIFAR-10 shapes of bench_flyhash.py. Used to tune ``fly_select`` and
the chunk size (``SKNN_GPU_FLYHASH_CHUNK_MB``); bench_flyhash.py has the peers.

    python benchmarks/tools/tune_flyhash_select.py
"""

from __future__ import annotations

import sys
from pathlib import Path

# the repository root (for sknn_gpu) and benchmarks/ (for _harness), from any working directory
sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1])]

import numpy as np
from _harness import time_gpu


def _ms(fn):
    return time_gpu(fn, repeat=9, warmup=1) * 1e3


def _shape_row(rng, n, d, m, s, k):
    import cupy

    from sknn_gpu.fly import FlyHashTransformer
    from sknn_gpu.fly import _flyhash_cuda as engine

    Xi = cupy.asarray(rng.integers(0, 256, (n, d)).astype(np.float32))
    Xf = cupy.asarray(rng.random((n, d), dtype=np.float32))
    fh = FlyHashTransformer(n_components=m, n_connections=s, k=k, output="packed", random_state=0)
    fh.set_params(device="cuda").fit(Xf)
    t_int = _ms(lambda: engine.words(fh, Xi, "exact"))
    t_fast = _ms(lambda: engine.words(fh, Xf, "exact", precision="fast"))
    fh.set_params(precision="fast")
    t_call = _ms(lambda: fh.transform(Xf))
    return f"| {n:,}×{d:,} → {m:,}, k {k:,} | {t_int:.2f} ms | {t_fast:.2f} ms | {t_call:.2f} ms |"


def main():
    import cupy

    rng = np.random.default_rng(0)
    print("| shape | pixels, 'exact' (words) | float, 'fast' (words) | float, 'fast' (transform) |")
    print("|---|---|---|---|")
    for shape in [(60000, 784, 25088, 39, 1254), (50000, 3072, 98304, 153, 4915)]:
        print(_shape_row(rng, *shape), flush=True)
        cupy.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
