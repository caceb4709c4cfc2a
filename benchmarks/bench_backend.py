"""Backend baseline: Python launch overhead and bandwidth of a loader-compiled kernel.

Ours: ``sample.cu``'s ``scaled_axpy_f32`` launched through ``sknn_gpu._kernels``.
Peers on the same data: a CuPy elementwise expression, the same in PyTorch (in place,
``y.add_(x, alpha=3).mul_(2)``, eager and replayed as a CUDA graph) when torch is
installed, and NumPy on the CPU; "vs strongest peer" is the ratio to the fastest peer.
Floor: 12 bytes per element (read x, read y, write y) at 3.0 TB/s, and 7 µs per launch.
"""

import numpy as np
from _harness import (
    Table,
    environment_header,
    floor_seconds,
    optional_import,
    parse_args,
    time_call,
    time_cpu,
    time_gpu,
    time_torch,
    torch_cuda,
    torch_graph,
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
        t.add("NumPy", "cpu", time_cpu(lambda: np.multiply(2.0, 3.0 * x + y, out=out), repeat=7), peer=True)
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
            t.add(
                "CuPy elementwise", "cuda", time_gpu(peer), note="kernel time (events), 2 kernels", peer=True
            )
            t.add(
                "CuPy elementwise call",
                "cuda",
                time_call(peer, device="cuda"),
                note="Python call + sync",
                peer=True,
            )
        torch_rows(t, x, y)
        t.print()


def torch_rows(t, x, y):
    """PyTorch peers: in place y = 2·(3·x + y), eager (events, call) and as a CUDA graph."""
    torch = torch_cuda()
    names = ("PyTorch in place", "PyTorch in place call", "PyTorch CUDA graph call")
    if torch is None:
        why = "torch not installed" if optional_import("torch") is None else "torch sees no CUDA device"
        for name in names:
            t.add(name, "cuda", None, note=why, peer=True)
        return
    tx, ty = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
    fn = lambda: ty.add_(tx, alpha=3.0).mul_(2.0)  # noqa: E731
    replay = torch_graph(fn)
    t.add(names[0], "cuda", time_torch(fn), note="kernel time (events), 2 kernels", peer=True)
    t.add(names[1], "cuda", time_call(fn, device="torch"), note="Python call + sync", peer=True)
    t.add(names[2], "cuda", time_call(replay, device="torch"), note="replay + sync", peer=True)


if __name__ == "__main__":
    main()
