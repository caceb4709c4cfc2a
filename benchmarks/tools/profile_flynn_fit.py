"""Where ``FlyNNClassifier().fit`` spends its time on one GPU: the quantiles' histogram (and
the quantiles taken from it), the projection, hashing and counting, and the ``predict_proba``
calibration, each timed alone (medians of 3, wall clock with synchronisation) on real
Fashion-MNIST (60,000 x 784), under ``input_range='quantile'`` and ``'fit'``; and ``predict``
of 10,000 rows. A profile, not a benchmark against a peer.

``fit`` takes the quantiles from the histogram where it was counted ("quantiles (histogram +
knots)": on the GPU only the quantiles come back; "histogram of the quantiles" copies the
histogram itself to the host, as a Dask block or a federated party sends it). It counts and
keeps the calibration rows' winners in one pass ("count, keeping the calibration rows"), then
cross-fits on them ("calibration on the kept winners"); "calibration (loss_table)" hashes the
calibration rows again first, as ``fit`` did before.

Run from the repository root, with the four ``*-ubyte.gz`` files of Fashion-MNIST in DIR::

    python benchmarks/tools/profile_flynn_fit.py --fashion-dir DIR
"""

import argparse
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[2])]

import numpy as np
from bench_flynn import load_fashion_mnist

from sknn_gpu.fly import FlyNNClassifier, _calibration, _flynn_batches


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fashion-dir", required=True)
    args = parser.parse_args(argv)
    import cupy as cp

    X, Xt, y, _ = load_fashion_mnist(args.fashion_dir)
    Xd, Qd = cp.asarray(X), cp.asarray(Xt)

    def ms(f, n=3):
        f()
        cp.cuda.Device().synchronize()
        times = []
        for _ in range(n):
            start = time.perf_counter()
            f()
            cp.cuda.Device().synchronize()
            times.append(time.perf_counter() - start)
        return np.median(times) * 1e3

    for input_range in ("quantile", "fit"):
        clf = FlyNNClassifier(input_range=input_range, random_state=0, device="cuda").fit(Xd, y)
        Xv = clf._validate_X(Xd, reset=False)
        y_idx = clf._encode_y(y, len(y))
        parts = {"whole fit": lambda: clf.fit(Xd, y)}  # noqa: B023 (called in this iteration)
        if input_range == "quantile":
            parts["histogram of the quantiles"] = lambda: _flynn_batches.histogram(clf, Xv)  # noqa: B023
            parts["quantiles (histogram + knots)"] = lambda: _flynn_batches.quantiles(clf, Xv)  # noqa: B023
        parts["projection drawn (_init_model)"] = lambda: clf._init_model(X.shape[1], len(y))  # noqa: B023
        parts["count (hash + counts)"] = lambda: clf._count(Xv, y_idx)  # noqa: B023
        parts["count, keeping the calibration rows"] = lambda: clf._count_and_calibration_set(Xv, y_idx)  # noqa: B023
        parts["calibration on the kept winners"] = lambda: _calibration.cross_fit(clf, *kept)  # noqa: B023
        parts["calibration (loss_table)"] = lambda: _calibration.loss_table(clf, Xv, y_idx)  # noqa: B023
        print(f"input_range={input_range!r}")
        for name, f in parts.items():
            if name.startswith("count ("):
                clf.fit(Xd, y)  # the counts _init_model cleared, for the calibration's filters
                kept = clf._count_and_calibration_set(Xv, y_idx)[1]
            print(f"  {name:38s}{ms(f):.1f} ms")
        print(f"  {'predict 10,000 rows':38s}{ms(lambda: clf.predict(Qd[:10000]), 10):.2f} ms")  # noqa: B023


if __name__ == "__main__":
    main()
