"""FlyHash tensor-core path alone: `words()` on integer-valued and on float input ('fast').

GPU only. Times the engine call (float16 conversion, cuBLAS products, ``fly_select``)
and the whole ``transform`` with ``precision='fast'``, CUDA-event medians, at the
FashionMNIST and CIFAR-10 shapes of bench_flyhash.py. Used to tune ``fly_select`` and
the chunk size (``SKNN_GPU_FLYHASH_CHUNK_MB``); bench_flyhash.py has the peers.

    python benchmarks/tune_flyhash_select.py
"""

from __future__ import annotations

import numpy as np


def _median_ms(cupy, fn, repeat=9):
    fn()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(repeat):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop))
    return float(np.median(times))


def _shape_row(cupy, rng, n, d, m, s, k):
    from sknn_gpu.fly import FlyHashTransformer
    from sknn_gpu.fly import _flyhash_cuda as engine

    Xi = cupy.asarray(rng.integers(0, 256, (n, d)).astype(np.float32))
    Xf = cupy.asarray(rng.random((n, d), dtype=np.float32))
    fh = FlyHashTransformer(n_components=m, n_connections=s, k=k, output="packed", random_state=0)
    fh.set_params(device="cuda").fit(Xf)
    t_int = _median_ms(cupy, lambda: engine.words(fh, Xi, "exact"))
    t_fast = _median_ms(cupy, lambda: engine.words(fh, Xf, "exact", precision="fast"))
    fh.set_params(precision="fast")
    t_call = _median_ms(cupy, lambda: fh.transform(Xf))
    return f"| {n:,}×{d:,} → {m:,}, k {k:,} | {t_int:.2f} ms | {t_fast:.2f} ms | {t_call:.2f} ms |"


def main():
    import cupy

    rng = np.random.default_rng(0)
    print("| shape | pixels, 'exact' (words) | float, 'fast' (words) | float, 'fast' (transform) |")
    print("|---|---|---|---|")
    for shape in [(60000, 784, 25088, 39, 1254), (50000, 3072, 98304, 153, 4915)]:
        print(_shape_row(cupy, rng, *shape), flush=True)
        cupy.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
