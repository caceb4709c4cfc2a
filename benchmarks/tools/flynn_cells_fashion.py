"""FlyNN on real Fashion-MNIST (60,000 training, 10,000 test images, one GPU) as the number of
cells grows: fit and predict time (CUDA-event medians) and test accuracy, beside PyTorch's
brute-force 1-NN (``torch.cdist`` + ``argmin``). The runs behind ``n_components='auto'``'s
16,384 cells for wide inputs.

Run from the repository root, with the four ``*-ubyte.gz`` files of Fashion-MNIST in DIR::

    python benchmarks/tools/flynn_cells_fashion.py --fashion-dir DIR
    python benchmarks/tools/flynn_cells_fashion.py --fashion-dir DIR --input-range quantile

The recorded run (benchmarks/results/2026-11-28-h100/flynn_cells_fashion.txt) was made with
``input_range="fit"``, then the default.
"""

import argparse
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[2])]

import numpy as np
from _harness import time_gpu
from bench_flynn import load_fashion_mnist

from sknn_gpu.fly import FlyNNClassifier

SETTINGS = [
    dict(encoding="thermometer", n_components=8192),
    dict(encoding="population", n_components=8192),
    dict(encoding="population", n_components=16384),
    dict(encoding="population", n_components=32768),
    dict(encoding="population", n_components=32768, k=128),
    dict(encoding="population", n_components=65536),
]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fashion-dir", required=True)
    parser.add_argument("--input-range", default="fit", choices=["fit", "quantile"])
    args = parser.parse_args(argv)
    import cupy as cp
    import torch

    X, Xt, y, yt = load_fashion_mnist(args.fashion_dir)
    Xd, Qd = cp.asarray(X), cp.asarray(Xt)
    for params in SETTINGS:
        clf = FlyNNClassifier(**params, input_range=args.input_range, random_state=0, device="cuda")
        clf.fit(Xd, y)
        tf = time_gpu(lambda: clf.fit(Xd, y), repeat=3, warmup=1)  # noqa: B023 (called at once)
        tp = time_gpu(lambda: clf.predict(Qd), repeat=10, warmup=2)  # noqa: B023 (called at once)
        acc = float((cp.asnumpy(clf.predict(Qd)) == yt).mean())
        print(
            params,
            f"fit60k {tf * 1e3:.2f} ms predict10k {tp * 1e3:.2f} ms acc {acc:.4f}",
            f"scale {clf.proba_scale_:.1f}",
            flush=True,
        )
    Xtt, Qt, ytt = (torch.as_tensor(a, device="cuda") for a in (X, Xt, y))

    def knn():
        return ytt[torch.cdist(Qt, Xtt).argmin(dim=1)]

    for _ in range(2):
        knn()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        knn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    acc = (knn().cpu().numpy() == yt).mean()
    print(f"torch cdist 1-NN 60k: {np.median(times) * 1e3:.2f} ms acc {acc:.4f}")


if __name__ == "__main__":
    main()
