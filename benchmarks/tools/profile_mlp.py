"""Where ``GPUMLPClassifier`` spends its time on one GPU at its defaults: ``fit`` of one
epoch of 60,000 x 784 CuPy rows (the whole call, then the host-side profile of one call:
cProfile, top 20 by cumulative time) and ``predict_proba`` of 10,000 rows (the whole call,
the input check alone, the forward pass alone: medians of 50, wall clock with
synchronisation; then its host-side profile). A profile, not a benchmark against a peer.

Run from the repository root::

    python benchmarks/tools/profile_mlp.py [--hidden 100] [--solver sgd]
    python benchmarks/tools/profile_mlp.py --predict --hidden 1280
    python benchmarks/tools/profile_mlp.py --steps sgd --hidden 1280
    python benchmarks/tools/profile_mlp.py --per-sample-phases --hidden 100
    python benchmarks/tools/profile_mlp.py --ab-registers --hidden 100
"""

import argparse
import cProfile
import pstats
import sys
import time
import warnings
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[2])]

import numpy as np
from _harness import time_call
from bench_mlp import _torch_logits
from sklearn.utils.validation import check_is_fitted

from sknn_gpu import GPUMLPClassifier
from sknn_gpu._kernels import get_function
from sknn_gpu.neural_network._data import check_X
from sknn_gpu.neural_network._predict_cuda import forward_cuda


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", default="100", help="hidden layer sizes, e.g. 100 or 512,256")
    parser.add_argument(
        "--steps",
        choices=["adam", "sgd"],
        default=None,
        help="instead: GPU time of one captured minibatch step of this solver and of each of its launches",
    )
    parser.add_argument(
        "--predict",
        action="store_true",
        help="instead: predict_proba of 10,000 rows piece by piece (host and GPU time of each part)",
    )
    parser.add_argument(
        "--per-sample-phases",
        action="store_true",
        help="instead: where a per-sample SGD epoch's time goes, phase by phase (the fused kernel's clock)",
    )
    parser.add_argument(
        "--ab-draws",
        action="store_true",
        help="instead: one-epoch fit with the initial weights drawn on the GPU against on the host",
    )
    parser.add_argument(
        "--solver", choices=["adam", "sgd"], default="adam", help="solver of the fit profile, --ab-draws"
    )
    parser.add_argument(
        "--ab-registers",
        action="store_true",
        help="instead: per-sample SGD epoch, first layer's rows in registers against in shared memory",
    )
    args = parser.parse_args(argv)
    hidden = tuple(int(u) for u in args.hidden.split(","))
    if args.ab_draws:
        return ab_draws(hidden, args.solver)
    if args.ab_registers:
        return ab_registers(hidden)
    if args.per_sample_phases:
        return per_sample_phases(hidden)
    if args.steps:
        return step_profile(hidden, args.steps)
    if args.predict:
        return predict_profile(hidden)
    import cupy as cp

    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    Xt = cp.asarray(rng.random((60_000, 784), dtype=np.float32))
    yt = cp.asarray(rng.integers(0, 10, 60_000))
    clf = GPUMLPClassifier(hidden, solver=args.solver, max_iter=1, random_state=0, device="cuda").fit(Xt, yt)
    X = Xt[:10_000]
    coefs, inters = clf._device_copy("coefs_"), clf._device_copy("intercepts_")

    def ms(f, n=50):  # microseconds: median wall clock with synchronisation
        return time_call(f, repeat=n, warmup=5, device="cuda") * 1e6

    print(f"hidden {hidden}, solver={args.solver!r}: fit, one epoch of 60,000 x 784 float32 rows on the GPU")
    print(f"  fit                      {ms(lambda: clf.fit(Xt, yt), 5) / 1e3:8.2f} ms")
    host_profile(lambda: clf.fit(Xt, yt), "cumulative", 20)
    print(f"hidden {hidden}: predict_proba of 10,000 x 784 float32 rows on the GPU")
    print(f"  predict_proba            {ms(lambda: clf.predict_proba(X)):8.1f} us")
    print(f"  input check (check_X)    {ms(lambda: check_X(clf, X, reset=False)):8.1f} us")
    out_w, flag = clf._out_w(coefs), cp.zeros((), dtype=np.int32)  # as predict runs it
    fwd = lambda: forward_cuda(X, coefs, inters, clf.activation, clf.out_activation_, out_w, flag)  # noqa: E731
    print(f"  forward pass alone       {ms(fwd):8.1f} us")
    host_profile(lambda: [clf.predict_proba(X) for _ in range(200)], "tottime", 15)


def host_profile(call, sort, top):
    """cProfile of ``call()`` and the GPU work it queued, the ``top`` lines by ``sort``."""
    import cupy as cp

    prof = cProfile.Profile()
    prof.enable()
    call()
    cp.cuda.Device().synchronize()
    prof.disable()
    pstats.Stats(prof).sort_stats(sort).print_stats(top)


def _fitted(hidden, **params):
    import cupy as cp

    rng = np.random.default_rng(0)
    Xt = cp.asarray(rng.random((60_000, 784), dtype=np.float32))
    yt = cp.asarray(rng.integers(0, 10, 60_000))
    clf = GPUMLPClassifier(hidden, max_iter=1, random_state=0, device="cuda", **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.fit(Xt, yt)
    return clf, Xt, yt


def predict_profile(hidden):
    """predict_proba of 10,000 rows in parts: wall clock of the whole call and of the
    forward pass, GPU time of each way to run the forward pass (CUDA events,
    cupyx.profiler.benchmark) and of its launches, host time of the call's pieces, the
    host-side profile of the call, and PyTorch's inference on the same weights when
    installed (its whole pass and its first product alone)."""
    import cupy as cp
    from cupyx.profiler import benchmark

    from sknn_gpu._backend import host_flag
    from sknn_gpu.neural_network import _predict_cuda
    from sknn_gpu.neural_network._mlp_graph import cublas_library, gemm, on_current_stream
    from sknn_gpu.neural_network._predict_cuda import ACT_CODES, OUT_CODES, _tail_fused

    clf, Xt, _ = _fitted(hidden)
    X = Xt[:10_000]
    coefs, inters = clf._device_copy("coefs_"), clf._device_copy("intercepts_")
    out_w = clf._out_w(coefs)
    flag_host, flag = host_flag()

    def us(f, n=100):
        return time_call(f, repeat=n, warmup=5, device="cuda") * 1e6

    def gpu_us(f):
        return float(np.median(benchmark(f, n_repeat=200, n_warmup=10).gpu_times)) * 1e6

    print(f"hidden {hidden}: predict_proba of 10,000 x 784 float32 rows, parts")
    print(f"  predict_proba, wall clock with synchronisation     {us(lambda: clf.predict_proba(X)):8.1f} us")
    check = lambda: check_X(clf, X, False, finite=False)  # noqa: E731
    print(f"  input check as predict makes it (check_X)          {us(check):8.1f} us")
    last = len(coefs) - 1
    n_hid = coefs[last].shape[0]
    ways = {"automatic (what predict runs)": dict(USE_TAIL=True, USE_TENSOR_CORES=True)}
    for bm in _predict_cuda._TC_ROWS:
        ways[f"dense_tc, {bm} rows a block"] = dict(USE_TAIL=True, USE_TENSOR_CORES=True, bm=bm)
    ways["dense_tc, then out_fused"] = dict(USE_TAIL=False, USE_TENSOR_CORES=True)
    if last >= 1 and n_hid <= _predict_cuda.TAIL_MAX:
        ways["tail_fused (automatic rows)"] = dict(USE_TAIL=True, USE_TENSOR_CORES=False)
    ways["cuBLAS products + out_fused"] = dict(USE_TAIL=False, USE_TENSOR_CORES=False)
    ref = None
    for name, way in ways.items():
        bm = way.pop("bm", None)
        keep = {key: getattr(_predict_cuda, key) for key in way}

        def fwd(bm=bm):
            packs = clf._tc_packs(coefs)
            return forward_cuda(
                X, coefs, inters, clf.activation, clf.out_activation_, out_w, flag, packs, tc_rows=bm
            )

        try:
            for key, value in way.items():
                setattr(_predict_cuda, key, value)
            act_code, out_code = ACT_CODES[clf.activation], OUT_CODES[clf.out_activation_]
            in_act = -1 if last < 2 else act_code
            plan = _tail_fused(np.float32, in_act, act_code, out_code, n_hid, 10, X.shape[0])
            P = fwd()
            ref = P if ref is None else ref
            err = float(cp.abs(P - ref).max())
            wall, gpu = us(fwd), gpu_us(fwd)
            print(f"  forward, {name:34s} wall {wall:8.1f} us, GPU {gpu:8.1f} us, max |P - first| {err:.1e}")
            if way["USE_TAIL"] and not way["USE_TENSOR_CORES"] and plan is not None:
                k, rows, threads, smem = plan
                at = k.attributes
                print(
                    f"    {rows} rows x {threads} threads a block: {at['num_regs']} registers, "
                    f"{at['local_size_bytes']} B local memory, {smem} B shared"
                )
        finally:
            for key, value in keep.items():
                setattr(_predict_cuda, key, value)
    print(f"  flag read back (stream synchronize)                {us(lambda: flag_host[0]):8.1f} us")
    lib = cublas_library()
    h = on_current_stream(lib)
    Z0 = cp.empty((X.shape[0], coefs[0].shape[1]), np.float32)
    t = gpu_us(lambda: gemm(lib, h, X, coefs[0], Z0))
    print(f"  GPU: first layer's cuBLAS GEMM {X.shape} @ {coefs[0].shape}   {t:8.1f} us")
    ct, act = "float", ACT_CODES[clf.activation]
    host_parts = {
        "cp.empty of the output": lambda: cp.empty((X.shape[0], 10), np.float32),
        "on_current_stream (cublasSetStream, pointer mode)": lambda: on_current_stream(lib),
        "gemm of the first layer (host side)": lambda: gemm(lib, h, X, coefs[0], Z0),
        "get_function lookup": lambda: get_function("mlp", f"bias_act_rows<{ct},{act}>"),
        "host_flag()": host_flag,
    }
    units = [clf.n_features_in_] + [c.shape[1] for c in clf.coefs_]
    host_parts.update(
        {
            "check_is_fitted": lambda: check_is_fitted(clf, "coefs_"),
            "size check (_check_size)": lambda: clf._check_size(
                "predict", units, X.shape[0], np.float32, x_on_device=True, x_items=None
            ),
            "device copies and out_w (cached)": lambda: (
                clf._device_copy("coefs_"),
                clf._device_copy("intercepts_"),
                clf._out_w(coefs),
            ),
            "size check of clean input (cached)": lambda: clf._check_clean_size(X),
            "forward pass (host time to queue it)": lambda: forward_cuda(
                X, coefs, inters, clf.activation, clf.out_activation_, out_w, flag, clf._tc_packs(coefs)
            ),
        }
    )
    for name, fn in host_parts.items():
        ts = []
        for _ in range(50):
            cp.cuda.Device().synchronize()
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        cp.cuda.Device().synchronize()
        print(f"  host: {name:51s}{np.median(ts) * 1e6:8.1f} us")
    host_profile(lambda: [clf.predict_proba(X) for _ in range(200)], "cumulative", 40)
    import ctypes  # the same GEMM with a 32 MiB cuBLAS workspace (CuPy's handle sets none)

    ws = cp.empty(32 << 20, dtype=np.uint8)
    lib.cublasSetWorkspace_v2.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    if lib.cublasSetWorkspace_v2(h, ws.data.ptr, ws.nbytes) == 0:
        t = gpu_us(lambda: gemm(lib, h, X, coefs[0], Z0))
        print(f"  GPU: the first GEMM with a 32 MiB cuBLAS workspace           {t:8.1f} us")
    try:
        import torch
    except ImportError:
        return
    Wt = [torch.as_tensor(c, device="cuda") for c in clf.coefs_]
    bt = [torch.as_tensor(c, device="cuda") for c in clf.intercepts_]
    q = torch.as_tensor(X, device="cuda")

    def infer():  # what bench_mlp times as PyTorch inference
        with torch.no_grad():
            return torch.softmax(_torch_logits(torch, q, Wt, bt), dim=1)

    def first():
        with torch.no_grad():
            return torch.addmm(bt[0], q, Wt[0])

    wall = time_call(infer, repeat=100, warmup=5, device="torch") * 1e6
    print(f"  PyTorch no_grad inference, wall clock with sync    {wall:8.1f} us")
    for name, fn in (("inference", infer), ("first addmm alone", first)):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(100):
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        print(f"  PyTorch no_grad {name}, GPU time (events)  {np.median(times):8.1f} us")


def _interleaved(call, settings, reset, rounds):
    """Wall clock (synchronised) of ``call()`` under each of ``settings`` (name: function
    that sets it up, after ``reset()``), in rounds whose order alternates; the times by name."""
    import cupy as cp

    times = {name: [] for name in settings}
    names = list(settings)
    for r in range(rounds):
        for name in names if r % 2 else names[::-1]:
            reset()
            settings[name]()
            cp.cuda.Device().synchronize()
            t0 = time.perf_counter()
            call()
            cp.cuda.Device().synchronize()
            times[name].append(time.perf_counter() - t0)
    reset()
    return times


def _per_sample_setup(hidden, n):
    """bench_mlp's per-sample settings (plain SGD, lr 0.01, L2 1e-4, one epoch) on ``n``
    random 784-feature CuPy rows, 10 classes: ``(classifier, X, y)``."""
    import cupy as cp

    warnings.simplefilter("ignore")  # one-epoch fits: ConvergenceWarning each time
    rng = np.random.default_rng(0)
    X = cp.asarray(rng.random((n, 784), dtype=np.float32))
    y = cp.asarray(rng.integers(0, 10, n))
    common = dict(solver="sgd", momentum=0.0, learning_rate_init=0.01, alpha=1e-4, max_iter=1, random_state=0)
    return GPUMLPClassifier(hidden, batch_size=1, device="cuda", **common), X, y


def ab_registers(hidden, rounds=7, n=60_000):
    """Per-sample SGD epoch (the fused kernel, bench_mlp's per-sample settings) with each
    hidden unit's row of the first layer in its warp's registers against in shared memory
    (``FUSED_REGISTERS``), interleaved rounds, medians."""
    from sknn_gpu.neural_network import _mlp_cuda

    clf, X, y = _per_sample_setup(hidden, n)
    for regs in (True, False):  # compile both
        _mlp_cuda.FUSED_REGISTERS = regs
        clf.fit(X[:400], y[:400])
    times = _interleaved(
        lambda: clf.fit(X, y),
        {"registers": lambda: None, "shared memory": lambda: setattr(_mlp_cuda, "FUSED_REGISTERS", False)},
        lambda: setattr(_mlp_cuda, "FUSED_REGISTERS", True),
        rounds,
    )
    print(f"hidden {hidden}: one per-sample SGD epoch of {n:,} x 784 float32 samples, median of {rounds}:")
    for name, t in times.items():
        t = float(np.median(t))
        print(f"  first layer's rows in {name:14s} {t * 1e3:8.2f} ms  ({t / n * 1e6:.2f} us a sample)")


def ab_draws(hidden, solver, rounds=15):
    """One-epoch fit with the initial weights drawn on the GPU (``sknn_gpu._mt19937.legacy_uniform``)
    against drawn on the host, interleaved rounds, medians; then the host-side profile of
    one fit (cProfile, top 25 by internal time)."""
    from sknn_gpu.neural_network import _mlp

    clf, Xt, yt = _fitted(hidden, solver=solver)
    gpu_from = _mlp.GPU_DRAWS_FROM
    times = _interleaved(
        lambda: clf.fit(Xt, yt),
        {"GPU": lambda: None, "host": lambda: setattr(_mlp, "GPU_DRAWS_FROM", 1 << 62)},
        lambda: setattr(_mlp, "GPU_DRAWS_FROM", gpu_from),
        rounds,
    )
    print(
        f"hidden {hidden}, solver={solver!r}: one-epoch fit, median of {rounds}: initial weights "
        f"drawn on the GPU {np.median(times['GPU']) * 1e3:.2f} ms, on the host "
        f"{np.median(times['host']) * 1e3:.2f} ms"
    )
    host_profile(lambda: clf.fit(Xt, yt), "tottime", 25)


#: the phases SGD1_MARK records in mlp_sgd1, in order
_SGD1_PHASES = (
    "zero the block's partial sums, block barrier",
    "(1) W1 rows: last sample's update, this one's hidden units; (2) W2 rows; barrier",
    "block partials to global memory, next sample's row loaded",
    "grid barrier",
    "partials of every block summed (through L2), barrier",
    "output activation, loss and delta (warp 0), barrier",
    "(5) hidden deltas of the block's units, barrier",
)


def per_sample_phases(hidden, n=20_000):
    """Where one per-sample SGD epoch (the fused kernel, bench_mlp's per-sample settings)
    spends its time: the kernel compiled with SGD1_PHASES, whose block 0 adds the SM clock
    cycles of each phase of every sample; each phase's share of the cycles times the
    epoch's time a sample. Also the epoch's time without the instrumentation."""
    import cupy as cp

    from sknn_gpu._kernels import get_module
    from sknn_gpu.neural_network import _mlp_cuda

    clf, X, y = _per_sample_setup(hidden, n)
    clf.fit(X[:64], y[:64])  # compile
    plain = time_call(lambda: clf.fit(X, y), repeat=3, warmup=1, device="cuda")
    real = _mlp_cuda.get_function
    names = []

    def instrumented(family, name, **kw):
        if name.startswith("mlp_sgd1"):
            names.append(name)
            return real(family, name, SGD1_PHASES=1, **kw)
        return real(family, name, **kw)

    _mlp_cuda.get_function = instrumented
    try:
        clf.fit(X[:64], y[:64])  # compile the instrumented kernel
        acc = get_module("mlp", names[-1], SGD1_PHASES=1).get_global("sgd1_phases")
        phases = cp.ndarray((8,), dtype=cp.uint64, memptr=acc)
        phases.fill(0)
        t = time_call(lambda: clf.fit(X, y), repeat=1, warmup=0, device="cuda")
        cycles = phases.get()[: len(_SGD1_PHASES)].astype(np.float64)
    finally:
        _mlp_cuda.get_function = real
    share = cycles / cycles.sum()
    labels = list(_SGD1_PHASES)
    if "cluster" in names[-1]:  # mlp_sgd1_cluster: a cluster barrier, partials from shared memory
        labels[3] = "cluster barrier"
        labels[4] = "partials of every block summed (from the cluster's shared memory), barrier"
    print(f"kernel {names[-1]}")
    print(
        f"hidden {hidden}: one per-sample SGD epoch of {n:,} x 784 float32 samples (batch_size=1, momentum 0)"
    )
    print(f"  epoch, plain kernel          {plain * 1e3:8.2f} ms  ({plain / n * 1e6:.2f} us a sample)")
    print(f"  epoch, instrumented kernel   {t * 1e3:8.2f} ms  ({t / n * 1e6:.2f} us a sample)")
    print("  phase of a sample (block 0's clock; share of its cycles x the plain epoch's time a sample):")
    for name, sh in zip(labels, share):
        print(f"    {name:84s} {sh * 100:5.1f} %  {sh * plain / n * 1e6:6.2f} us")


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
