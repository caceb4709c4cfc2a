"""Batch-1 SparseNet latency of one source tree, for interleaved A/B runs of two commits.

    git archive <commit> sknn_gpu benchmarks | tar -x -C /tmp/old
    for i in 1 2 3; do python benchmarks/tools/ab_sparse_latency.py .; \\
                       python benchmarks/tools/ab_sparse_latency.py /tmp/old; done

Each run builds the same 74k-edge random layered graph at 5 and 180 levels and prints the
``g.forward`` call time (wall, 500 calls, median) and the prepared ``fused:grid`` and
``fused:smem`` launches (CUDA events, median). Alternating processes keeps machine drift
out of the comparison. The tree defaults to this checkout. Needs CuPy and a GPU.
"""

import sys
from pathlib import Path

import numpy as np


def main(root):
    sys.path[:0] = [root, str(Path(root) / "benchmarks")]
    import cupy as cp
    from _harness import time_call, time_gpu

    from sknn_gpu.sparse import SparseGraph
    from sknn_gpu.sparse._graph_cuda import prepared_forward

    out = []
    for levels in (5, 180):
        g = SparseGraph.random_layered(16, 4, levels, 74_000, activation="neat_sigmoid", random_state=0)
        Xd = cp.asarray(np.random.default_rng(1).normal(size=(1, 16)))
        g.forward(Xd)
        call = time_call(lambda: g.forward(Xd), repeat=500, warmup=50, device="cuda")
        grid, _ = prepared_forward(g, Xd, executor="fused:grid")
        smem, _ = prepared_forward(g, Xd, executor="fused:smem")
        kg = time_gpu(grid, repeat=300, warmup=30)
        ks = time_gpu(smem, repeat=300, warmup=30)
        out.append(
            f"L={levels}: call {call * 1e6:.1f} us, grid launch {kg * 1e6:.1f} us, "
            f"smem launch {ks * 1e6:.1f} us"
        )
    print(f"{root}: " + " | ".join(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).resolve().parents[2]))
