"""Backend baseline: Python launch overhead and bandwidth of a loader-compiled kernel.

Ours: ``sample.cu``'s ``scaled_axpy_f32`` launched through ``sknn_gpu._kernels``.
Peers on the same data: a CuPy elementwise expression and NumPy on the CPU.
Floor: 12 bytes per element (read x, read y, write y) at 3.0 TB/s, and 7 µs per launch.
"""

import numpy as np
from _harness import (
    Table,
    environment_header,
    floor_seconds,
    parse_args,
    time_call,
    time_cpu,
    time_gpu,
)

from sknn_gpu._backend import cuda_available


def main(argv=None):
    args = parse_args(__doc__.splitlines()[0], argv)
    print(environment_header() + "\n")
    sizes = [1 << 10, 1 << 20] if args.quick else [1 << 10, 1 << 20, 1 << 26]
    gpu = cuda_available() and args.device != "cpu"
    for n in sizes:
        rng = np.random.default_rng(0)
        x = rng.standard_normal(n, dtype=np.float32)
        y = rng.standard_normal(n, dtype=np.float32)
        t = Table(
            f"y = 2·(3·x + y), n = {n:,} float32 ({12 * n / 2**20:.1f} MiB moved)",
            baseline="ours (sample.cu)" if gpu else "NumPy",
            floor=floor_seconds(bytes_moved=12 * n, launches=1),
            floor_note="(12 B/element at 3.0 TB/s + one 7 µs launch)",
        )
        out = np.empty_like(y)
        t.add("NumPy", "cpu", time_cpu(lambda: np.multiply(2.0, 3.0 * x + y, out=out), repeat=7))
        if gpu:
            import cupy

            from sknn_gpu._kernels import get_function

            k = get_function("sample", "scaled_axpy_f32", SCALE="2.0f")
            dx, dy, dout = cupy.asarray(x), cupy.asarray(y), cupy.empty(n, dtype=cupy.float32)
            blocks = min(132 * 8, (n + 255) // 256)
            launch = lambda: k((blocks,), (256,), (dx, dy, np.float32(3.0), np.int64(n)))
            peer = lambda: cupy.multiply(2.0, 3.0 * dx + dy, out=dout)
            t.add("ours (sample.cu)", "cuda", time_gpu(launch), note="kernel time (events), in place")
            t.add(
                "ours (sample.cu) call",
                "cuda",
                time_call(launch, device="cuda"),
                note="Python call + sync",
            )
            t.add("CuPy elementwise", "cuda", time_gpu(peer), note="kernel time (events), 2 kernels")
            t.add(
                "CuPy elementwise call",
                "cuda",
                time_call(peer, device="cuda"),
                note="Python call + sync",
            )
        t.print()


if __name__ == "__main__":
    main()
