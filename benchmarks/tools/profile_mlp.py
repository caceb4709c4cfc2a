"""Where ``GPUMLPClassifier`` spends its time on one GPU at its defaults: ``fit`` of one
epoch of 60,000 x 784 CuPy rows (the whole call, then the host-side profile of one call:
cProfile, top 20 by cumulative time) and ``predict_proba`` of 10,000 rows (the whole call,
the input check alone, the forward pass alone: medians of 50, wall clock with
synchronisation; then its host-side profile). A profile, not a benchmark against a peer.

Run from the repository root::

    python benchmarks/tools/profile_mlp.py [--hidden 100]
"""

import argparse
import cProfile
import pstats
import sys
import time
import warnings
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2])]

import numpy as np

from sknn_gpu import GPUMLPClassifier
from sknn_gpu.neural_network._data import check_X
from sknn_gpu.neural_network._mlp_cuda import forward_cuda


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", default="100", help="hidden layer sizes, e.g. 100 or 512,256")
    args = parser.parse_args(argv)
    import cupy as cp

    warnings.simplefilter("ignore")
    hidden = tuple(int(u) for u in args.hidden.split(","))
    rng = np.random.default_rng(0)
    Xt = cp.asarray(rng.random((60_000, 784), dtype=np.float32))
    yt = cp.asarray(rng.integers(0, 10, 60_000))
    clf = GPUMLPClassifier(hidden, max_iter=1, random_state=0, device="cuda").fit(Xt, yt)
    X = Xt[:10_000]
    coefs, inters = clf._device_copy("coefs_"), clf._device_copy("intercepts_")

    def ms(f, n=50):
        for _ in range(5):
            f()
        cp.cuda.Device().synchronize()
        times = []
        for _ in range(n):
            start = time.perf_counter()
            f()
            cp.cuda.Device().synchronize()
            times.append(time.perf_counter() - start)
        return np.median(times) * 1e6

    print(f"hidden {hidden}: fit, one epoch of 60,000 x 784 float32 rows on the GPU")
    print(f"  fit                      {ms(lambda: clf.fit(Xt, yt), 5) / 1e3:8.2f} ms")
    prof = cProfile.Profile()
    prof.enable()
    clf.fit(Xt, yt)
    cp.cuda.Device().synchronize()
    prof.disable()
    pstats.Stats(prof).sort_stats("cumulative").print_stats(20)
    print(f"hidden {hidden}: predict_proba of 10,000 x 784 float32 rows on the GPU")
    print(f"  predict_proba            {ms(lambda: clf.predict_proba(X)):8.1f} us")
    print(f"  input check (check_X)    {ms(lambda: check_X(clf, X, reset=False)):8.1f} us")
    fwd = lambda: forward_cuda(X, coefs, inters, clf.activation, clf.out_activation_)  # noqa: E731
    print(f"  forward pass alone       {ms(fwd):8.1f} us")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(200):
        clf.predict_proba(X)
    cp.cuda.Device().synchronize()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
