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
import warnings
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[2])]

import numpy as np
from _harness import time_call

from sknn_gpu import GPUMLPClassifier
from sknn_gpu.neural_network._data import check_X
from sknn_gpu.neural_network._mlp_cuda import forward_cuda


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", default="100", help="hidden layer sizes, e.g. 100 or 512,256")
    parser.add_argument(
        "--steps",
        choices=["adam", "sgd"],
        default=None,
        help="instead: GPU time of one captured minibatch step of this solver and of each of its launches",
    )
    args = parser.parse_args(argv)
    if args.steps:
        return step_profile(tuple(int(u) for u in args.hidden.split(",")), args.steps)
    import cupy as cp

    warnings.simplefilter("ignore")
    hidden = tuple(int(u) for u in args.hidden.split(","))
    rng = np.random.default_rng(0)
    Xt = cp.asarray(rng.random((60_000, 784), dtype=np.float32))
    yt = cp.asarray(rng.integers(0, 10, 60_000))
    clf = GPUMLPClassifier(hidden, max_iter=1, random_state=0, device="cuda").fit(Xt, yt)
    X = Xt[:10_000]
    coefs, inters = clf._device_copy("coefs_"), clf._device_copy("intercepts_")

    def ms(f, n=50):  # microseconds: median wall clock with synchronisation
        return time_call(f, repeat=n, warmup=5, device="cuda") * 1e6

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


def step_profile(hidden, solver):
    """GPU time (CUDA events, median of 200 after 10 warm-ups) of one replayed minibatch step
    and of each launch it is made of, run one at a time on the trainer's own buffers."""
    import cupy as cp
    from cupyx.profiler import benchmark

    from sknn_gpu.neural_network import _mlp_graph

    kept = {}
    init = _mlp_graph.GraphEpoch.__init__

    def keep(self, *a, **k):
        init(self, *a, **k)
        kept["g"] = self

    _mlp_graph.GraphEpoch.__init__ = keep
    rng = np.random.default_rng(0)
    Xt = cp.asarray(rng.random((60_000, 784), dtype=np.float32))
    yt = cp.asarray(rng.integers(0, 10, 60_000))
    GPUMLPClassifier(hidden, solver=solver, max_iter=1, random_state=0, device="cuda").fit(Xt, yt)
    _mlp_graph.GraphEpoch.__init__ = init
    g = kept["g"]
    t = g.trainer
    stream = cp.cuda.get_current_stream()
    h = _mlp_graph.on_current_stream(g.blas)
    single = g.graphs[2]
    acts = [g.Xb] + g.H
    outs = g.H + [g.Z]
    last = len(t.coefs_v) - 1
    parts = {
        "one step, replayed graph (and a counter reset)": lambda: (g.step.fill(0), single.launch(stream))
    }
    parts["counter reset alone"] = lambda: g.step.fill(0)
    for i, W in enumerate(t.coefs_v):
        parts[f"layer {i}: forward GEMM {acts[i].shape} @ {W.shape}"] = lambda i=i, W=W: g._mm(
            h, acts[i], W, outs[i]
        )
        if i < last:
            parts[f"layer {i}: bias_act"] = lambda i=i: t._bias_act(outs[i], t.inters_v[i])
        parts[f"layer {i}: weight-gradient GEMM"] = lambda i=i: g._mm(
            h, acts[i], outs[i], t.gcoefs_v[i], ta=True
        )
        parts[f"layer {i}: column sums (gemv)"] = lambda i=i: g._colsum(h, outs[i], t.ginters_v[i])
        if i > 0:
            parts[f"layer {i}: back-propagating GEMM"] = lambda i=i, W=W: g._mm(
                h, outs[i], W, g.Dh[i - 1], tb=True
            )
            parts[f"layer {i}: act_deriv"] = lambda i=i: t._act_deriv(g.Dh[i - 1], acts[i])
    parts["out_delta"] = lambda: t._out_delta(g.Z, t.inters_v[last], g.Yb, t._acc)
    print(f"hidden {hidden}, solver={solver!r}, batch {g.bs}: GPU time per launch (median of 200)")
    total = 0.0
    for name, fn in parts.items():
        us = float(np.median(benchmark(fn, n_repeat=200, n_warmup=10).gpu_times)) * 1e6
        if not name.startswith(("one step", "counter")):
            total += us
        print(f"  {name:58s}{us:8.1f} us")
    print(f"  {'sum of the launches above (gather and optimizer not included)':58s}{total:8.1f} us")


if __name__ == "__main__":
    main()
