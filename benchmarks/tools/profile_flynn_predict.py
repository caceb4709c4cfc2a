"""Where ``FlyNNClassifier().predict`` spends its time on one GPU at the defaults: the
quantile positions and the encoding (two kernels, then the one kernel that does both), the
FlyHash winners (the fused kernel with its flag count, at 8 and 4 rows per block), the
winners' indices and the novelty, each timed alone with CUDA events (medians of 20) on real
Fashion-MNIST (fit on 60,000 x 784, predict 10,000 rows on the device), and the whole
``predict`` at several ``batch_size`` values. A profile, not a benchmark against a peer.

Run from the repository root, with the four ``*-ubyte.gz`` files of Fashion-MNIST in DIR::

    python benchmarks/tools/profile_flynn_predict.py --fashion-dir DIR
"""

import argparse
import os
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[2])]

from _harness import time_gpu
from bench_flynn import load_fashion_mnist

from sknn_gpu.fly import FlyNNClassifier, _flyhash_cuda, _flynn_batches, _flynn_cuda


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fashion-dir", required=True)
    args = parser.parse_args(argv)
    import cupy as cp

    X, Xt, y, _ = load_fashion_mnist(args.fashion_dir)
    Xd, Qd = cp.asarray(X), cp.ascontiguousarray(cp.asarray(Xt)[:10000])
    clf = FlyNNClassifier(random_state=0, device="cuda").fit(Xd, y)
    fh = clf.hasher_
    print(
        f"m={clf.n_components_} k={clf.k_} inputs={fh.n_features_in_} s={fh.n_connections_} "
        f"batch_size={clf.batch_size}"
    )

    def show(name, seconds):
        print(f"  {name:46s}{seconds * 1e3:8.3f} ms")

    for bs in (2048, 4096, 8192, 16384):
        clf.batch_size = bs
        show(f"predict 10,000 rows, batch_size={bs}", time_gpu(lambda: clf.predict(Qd)))
    clf.batch_size = 8192
    Qv = clf._validate_X(Qd, reset=False)
    show("input validation (_validate_X)", time_gpu(lambda: clf._validate_X(Qd, reset=False)))
    for b in (8192, 10000):
        Xb = Qv[:b]
        print(f"one batch of {b} rows")
        knots = cp.asarray(clf.input_quantiles_)
        u = _flynn_cuda.quantile_position(Xb, knots)
        show("quantile positions (float64 out)", time_gpu(lambda: _flynn_cuda.quantile_position(Xb, knots)))
        show("encoding of the positions (float32 out)", time_gpu(lambda: _flynn_cuda.encode(u, clf.encoding)))
        show(
            "one kernel (quantile_encode)",
            time_gpu(lambda: _flynn_cuda.quantile_encode(Xb, knots, clf.encoding, clf.n_receptors_)),
        )
        show("encode_batch (what predict runs)", time_gpu(lambda: _flynn_batches.encode_batch(clf, Xb)))
        E = _flynn_batches.encode_batch(clf, Xb)
        show("winners (_winners: words + indices)", time_gpu(lambda: fh._winners(E, integer_input=False)))
        idx = fh._device_copy("_kernel_index", "cuda")
        mw = (fh.n_components_ + 31) // 32
        out = cp.empty((b, mw), dtype=cp.uint32)
        stats = {}
        _flyhash_cuda._fused_block(fh, E, out, idx, "exact", stats)
        print(f"    rows flagged (finished by the materialised path): {stats.get('fallback_rows', 0)}")
        for rows in ("8", "4"):
            os.environ["SKNN_GPU_FLYHASH_ROWS"] = rows
            show(
                f"fused kernel + flag count, ROWS={rows}",
                time_gpu(lambda: _flyhash_cuda._fused_block(fh, E, out, idx, "exact")),
            )
        os.environ.pop("SKNN_GPU_FLYHASH_ROWS")
        w = fh._winners(E, integer_input=False)
        fT = cp.ascontiguousarray(clf.filters_.T)
        show("novelty + argmin (nearest_class)", time_gpu(lambda: _flynn_cuda.nearest_class(w, fT)))
    print(f"({cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, median of 20 CUDA-event timings)")


if __name__ == "__main__":
    main()
