"""Where ``FlyNNClassifier().predict`` spends its time on one GPU at the defaults: the
quantile positions and the encoding (two kernels, then the one kernel that does both), the
FlyHash winners (the fused kernel with its flag count, at each rows per block), the
winners' indices and the novelty, each timed alone with CUDA events (medians of 20) on real
Fashion-MNIST (fit on 60,000 x 784, predict 10,000 rows on the device), and the whole
``predict`` at several ``batch_size`` values. A profile, not a benchmark against a peer.

Run from the repository root, with the four ``*-ubyte.gz`` files of Fashion-MNIST in DIR::

    python benchmarks/tools/profile_flynn_predict.py --fashion-dir DIR

``--narrow`` profiles the narrow tables instead (65,536 cells): ``bench_flynn.py``'s
16-feature table (fit on 50,000 rows; 10,000 and 540 queries) and digits (540 queries), then
its 784-feature mixture (16,384 cells), with the tensor-core path forced on and off, each
rows-per-block of the fused kernel, and the novelty.
"""

import argparse
import os
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[2])]

import numpy as np
from _harness import time_gpu
from bench_flynn import load_fashion_mnist, narrow, synthetic

from sknn_gpu.fly import FlyNNClassifier, _flyhash_cuda, _flynn_batches, _flynn_cuda


def show(name, seconds):
    print(f"  {name:46s}{seconds * 1e3:8.3f} ms")


def stages(clf, Qv, sizes):
    """Time each stage of ``clf.predict`` on the first ``b`` validated rows, for b in ``sizes``."""
    import cupy as cp

    fh = clf.hasher_
    for b in sizes:
        Xb = Qv[:b]
        print(f"one batch of {b} rows")
        show("predict (the whole call)", time_gpu(lambda: clf.predict(Xb)))
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
        for band in ("1", "0"):
            os.environ["SKNN_GPU_FLYHASH_BAND"] = band
            show(
                f"winners, SKNN_GPU_FLYHASH_BAND={band}",
                time_gpu(lambda: fh._winners(E, integer_input=False)),
            )
        os.environ.pop("SKNN_GPU_FLYHASH_BAND")
        idx = fh._device_copy("_kernel_index", "cuda")
        mw = (fh.n_components_ + 31) // 32
        out = cp.empty((b, mw), dtype=cp.uint32)
        stats = {}
        _flyhash_cuda._fused_block(fh, E, out, idx, "exact", stats)
        print(f"    rows flagged (finished by the materialised path): {stats.get('fallback_rows', 0)}")
        print(f"    rows per block chosen: {_flyhash_cuda._fused_config(E.shape[1], b)[0]}")
        for rows in ("32", "16", "8", "4", "2"):
            os.environ["SKNN_GPU_FLYHASH_ROWS"] = rows
            if _flyhash_cuda._fused_config(E.shape[1], b)[0] != int(rows):
                print(f"  fused kernel, ROWS={rows}: its rows do not fit in shared memory")
                continue
            show(
                f"fused kernel + flag count, ROWS={rows}",
                time_gpu(lambda: _flyhash_cuda._fused_block(fh, E, out, idx, "exact")),
            )
        os.environ.pop("SKNN_GPU_FLYHASH_ROWS")
        w = fh._winners(E, integer_input=False)
        fT = cp.ascontiguousarray(clf.filters_.T)
        show("novelty + argmin (nearest_class)", time_gpu(lambda: _flynn_cuda.nearest_class(w, fT)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fashion-dir", default=None)
    parser.add_argument("--narrow", action="store_true", help="the 16-feature table and digits instead")
    args = parser.parse_args(argv)
    import cupy as cp

    if args.narrow:
        from sklearn.datasets import load_digits

        cases = [("narrow", *narrow(50_000, 10_000)[::2], (10_000, 540))]
        Xd, yd = load_digits(return_X_y=True)
        cases.append(("digits", Xd[:1257].astype(np.float32), yd[:1257], (540,)))
        cases.append(("784 features", *synthetic(20_000, 10_000)[::2], (10_000,)))
    else:
        X, Xt, y, _ = load_fashion_mnist(args.fashion_dir)
        cases = [("Fashion-MNIST", X, y, (8192, 10000))]
        Q = cp.ascontiguousarray(cp.asarray(Xt)[:10000])
    for name, X, y, sizes in cases:
        clf = FlyNNClassifier(random_state=0, device="cuda").fit(cp.asarray(X), y)
        fh = clf.hasher_
        print(
            f"{name}: m={clf.n_components_} k={clf.k_} inputs={fh.n_features_in_} s={fh.n_connections_} "
            f"batch_size={clf.batch_size}"
        )
        if args.narrow:
            Q = cp.asarray(X[: max(sizes)])  # queries shaped like the training rows
        else:
            for bs in (2048, 4096, 8192, 16384):
                clf.batch_size = bs
                show(f"predict 10,000 rows, batch_size={bs}", time_gpu(lambda: clf.predict(Q)))
            clf.batch_size = 8192
        Qv = clf._validate_X(Q, reset=False)
        show("input validation (_validate_X)", time_gpu(lambda: clf._validate_X(Q, reset=False)))
        stages(clf, Qv, sizes)
    print(f"({cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, median of 20 CUDA-event timings)")


if __name__ == "__main__":
    main()
