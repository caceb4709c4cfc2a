"""FlyHash float input under ``'exact'``: the split-float16 band route against the fused
kernel, by input width ``d`` and connections ``s`` (the crossover behind ``_band_ok``).

GPU only. 10,000 uniform float32 rows on the device, 8,192 units, k=256; each route is
forced with ``SKNN_GPU_FLYHASH_BAND`` and ``_flyhash_cuda.words`` timed (CUDA-event
medians); the last column is the route the rule ``s >= 18 + d / 93`` picks.

    python benchmarks/tools/tune_flyhash_band.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# the repository root (for sknn_gpu) and benchmarks/ (for _harness), from any working directory
sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1])]

import numpy as np
from _harness import environment_header, time_gpu


def main():
    import cupy

    from sknn_gpu.fly import FlyHashTransformer, _flyhash_cuda

    print(environment_header() + "\n")
    print("| d | s | band route | fused kernel | faster | the rule picks |")
    print("|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for d in (784, 1568, 3920):
        X = cupy.asarray(rng.random((10_000, d), dtype=np.float32))
        for s in (8, 16, 24, 39, 64, 96):
            fh = FlyHashTransformer(n_components=8192, n_connections=s, k=256, random_state=0, device="cuda")
            fh.fit(X[:10])
            times = []
            for band in ("1", "0"):
                os.environ["SKNN_GPU_FLYHASH_BAND"] = band
                run = lambda: _flyhash_cuda.words(fh, X, "exact", integer_input=False)  # noqa: E731
                times.append(time_gpu(run, repeat=7, warmup=1) * 1e3)
            del os.environ["SKNN_GPU_FLYHASH_BAND"]
            faster = "band" if times[0] < times[1] else "fused"
            rule = "band" if _flyhash_cuda._band_ok(fh) else "fused"
            print(f"| {d:,} | {s} | {times[0]:.2f} ms | {times[1]:.2f} ms | {faster} | {rule} |", flush=True)


if __name__ == "__main__":
    main()
