"""A/B of two source trees on the headline GPU calls of all six estimators (public API only).

Used to show that a refactor changed no speed: the two trees run alternately in fresh
processes on the same machine, each round timing every workload, and the medians of the
rounds are compared side by side::

    python benchmarks/tools/ab_trees.py --a .before --b . --rounds 2

``--tree PATH --json FILE`` (what the driver calls) times one tree once. Workloads:

* FlyHash ``transform``, FashionMNIST shape (60,000 x 784 -> 25,088, s = 39, k = 1,254), packed, events
* FlyNN default parameters: ``fit`` of 60,000 x 784 (call) and ``predict`` of 10,000 queries (call)
* GBNN Scenario 2 (C = 16, L = 512, 50,000 stored, 30,000 probes, 7 erased), joint ``retrieve``, events
* DT-CNN one 512^2 image (synthetic photo-like, device-resident), call
* SparseGraph ``forward`` batch 1, 5 levels / ~74k edges, call
* MLP {784, 1280, 10} one per-sample SGD epoch on 60,000 rows (fused kernel), call
* ``linalg.gemv`` 256^2 call, 16384^2 ``Ax`` and ``A.T x`` events; ``ger`` 16384^2 events

Timing: CUDA events (GPU time) or wall time including the final synchronisation (call);
medians of repeats inside a round, then the median over rounds. The two timers are
written here rather than imported from ``_harness``: importing the harness puts this
checkout first on ``sys.path``, which would shadow the tree under test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # this checkout (not put on sys.path)


def _events(fn, repeat, warmup=2):
    import cupy

    for _ in range(warmup):
        fn()
    cupy.cuda.get_current_stream().synchronize()
    out = []
    for _ in range(repeat):
        a, b = cupy.cuda.Event(), cupy.cuda.Event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(cupy.cuda.get_elapsed_time(a, b) / 1e3)
    return statistics.median(out)


def _call(fn, repeat, warmup=2):
    import cupy

    stream = cupy.cuda.get_current_stream()
    for _ in range(warmup):
        fn()
    stream.synchronize()
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        stream.synchronize()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def run_tree(tree):
    sys.path.insert(0, str(Path(tree).resolve()))
    import cupy as cp
    import numpy as np

    import sknn_gpu
    from sknn_gpu import (
        DTCNNHalftoner,
        FlyHashTransformer,
        FlyNNClassifier,
        GBNNMemory,
        GPUMLPClassifier,
        linalg,
    )
    from sknn_gpu.sparse import SparseGraph

    assert Path(sknn_gpu.__file__).resolve().is_relative_to(Path(tree).resolve()), sknn_gpu.__file__
    res = {}
    rng = np.random.default_rng(0)

    X = rng.random((60_000, 784), dtype=np.float32)
    Xd = cp.asarray(X)
    fh = FlyHashTransformer(
        n_components=25_088, n_connections=39, k=1_254, output="packed", random_state=0, device="cuda"
    ).fit(X)
    res["flyhash fmnist transform (events)"] = _events(lambda: fh.transform(Xd), 10)
    fh = None

    y = rng.integers(0, 10, 60_000)
    yd = cp.asarray(y)
    Q = cp.asarray(rng.random((10_000, 784), dtype=np.float32))
    FlyNNClassifier(random_state=0, device="cuda").fit(Xd[:1000], yd[:1000])  # compile
    res["flynn fit 60k (call)"] = _call(
        lambda: FlyNNClassifier(random_state=0, device="cuda").fit(Xd, yd), 5, warmup=1
    )
    clf = FlyNNClassifier(random_state=0, device="cuda").fit(Xd, yd)
    res["flynn predict 10k (call)"] = _call(lambda: clf.predict(Q), 20)
    clf = None

    C, L, M, K, e = 16, 512, 50_000, 30_000, 7
    msgs = rng.integers(0, L, size=(M, C), dtype=np.int64)
    probes = msgs[rng.choice(M, K, replace=False)].copy()
    order = np.argsort(rng.random(probes.shape), axis=1)[:, :e]
    np.put_along_axis(probes, order, -1, axis=1)
    mem = GBNNMemory(rule="joint", device="cuda", random_state=0).fit(msgs)
    pd = cp.asarray(probes)
    res["gbnn scenario2 joint retrieve (events)"] = _events(lambda: mem.retrieve(pd), 10)
    mem = None

    yy, xx = np.mgrid[0:512, 0:512] / 512.0
    img = 0.5 + 0.25 * np.sin(6 * xx) * np.cos(4 * yy) + 0.2 * (xx - 0.5) + 0.05 * rng.random((512, 512))
    imgd = cp.asarray(np.clip(img, 0, 1))
    ht = DTCNNHalftoner(device="cuda", random_state=0)
    ht.fit(imgd)
    res["dtcnn 512^2 transform (call)"] = _call(lambda: ht.transform(imgd), 20)

    g = SparseGraph.random_layered(16, 4, 5, 74_000, activation="neat_sigmoid", random_state=0)
    x1 = cp.asarray(rng.normal(size=(1, 16)))
    res["sparse forward batch1 5 levels (call)"] = _call(lambda: g.forward(x1), 300, warmup=5)

    common = dict(solver="sgd", momentum=0.0, learning_rate_init=0.01, max_iter=1, random_state=0)
    import warnings

    warnings.simplefilter("ignore")
    GPUMLPClassifier((1280,), batch_size=1, device="cuda", **common).fit(Xd[:400], yd[:400])
    mlp = GPUMLPClassifier((1280,), batch_size=1, device="cuda", **common)
    res["mlp per-sample epoch 60k (call)"] = _call(lambda: mlp.fit(Xd, yd), 3, warmup=0)

    for n in (256, 16384):
        A = cp.asarray(rng.random((n, n), dtype=np.float32))
        x = cp.asarray(rng.random(n, dtype=np.float32))
        yv = cp.empty(n, dtype=np.float32)
        if n == 256:
            res["gemv 256^2 (call)"] = _call(lambda: linalg.gemv(A, x, yv), 2000, warmup=20)
            res["ger 256^2 (call)"] = _call(lambda: linalg.ger(1.0, x, x, A), 2000, warmup=20)
        else:
            res["gemv 16384^2 Ax (events)"] = _events(lambda: linalg.gemv(A, x, yv), 20)
            res["gemv 16384^2 A.T x (events)"] = _events(lambda: linalg.gemv(A, x, yv, trans=True), 20)
            res["ger 16384^2 (events)"] = _events(lambda: linalg.ger(1.0, x, x, A), 20)
    return res


def _fmt(s):
    return f"{s * 1e3:.3f} ms" if s >= 1e-3 else f"{s * 1e6:.1f} us"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tree")
    p.add_argument("--json")
    p.add_argument(
        "--a", default=str(ROOT / ".before"), help="tree A (before); default .before in this checkout"
    )
    p.add_argument("--b", default=str(ROOT), help="tree B (after); default this checkout")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    if args.tree:
        Path(args.json).write_text(json.dumps(run_tree(args.tree)))
        return 0
    runs = {"A": [], "B": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = (("A", args.a), ("B", args.b))
            for label, tree in order if r % 2 == 0 else order[::-1]:
                out = Path(tmp) / f"{label}{r}.json"
                env = dict(os.environ, PYTHONPATH="")
                t0 = time.perf_counter()
                subprocess.run(
                    [sys.executable, __file__, "--tree", tree, "--json", str(out)], check=True, env=env
                )
                print(f"round {r} tree {label} ({tree}): {time.perf_counter() - t0:.0f} s", flush=True)
                runs[label].append(json.loads(out.read_text()))
    print(f"\n| workload | A: {args.a} | B: {args.b} | B / A |\n|---|---|---|---|")
    for key in runs["A"][0]:
        a = statistics.median(r[key] for r in runs["A"])
        b = statistics.median(r[key] for r in runs["B"])
        print(f"| {key} | {_fmt(a)} | {_fmt(b)} | {b / a:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
