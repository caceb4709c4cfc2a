"""How fast ``.npy`` shards reach the GPU: ``np.load`` + ``cupy.asarray`` against ``sknn_gpu.io.load_npy``.

Reads the first ``--shards`` shards ``X_*.npy`` of ``--dir`` (written there first when
missing: shards of ``--rows`` x 784 float32, about 1 GiB each, the ones ``bench_dask.py
--data-dir`` writes), from the host's page cache once they have been read, and prints the throughput of
each reader: one process reading every shard to GPU 0, then ``n`` processes at once
(``n`` = 1, 2, 4, ... ``--gpus``), process ``i`` reading every ``n``-th shard to GPU ``i``,
as ``n`` Dask workers do. Medians of ``--repeat`` passes.

Run: ``python benchmarks/tools/time_npy_reader.py --dir /tmp/sknn_shards --gpus 4``
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[2])]

import numpy as np
from bench_dask import doubling_counts

ROWS, D = 342_393, 784


def _readers():
    import cupy as cp

    from sknn_gpu.io import load_npy

    def numpy_then_cupy(p):
        return cp.asarray(np.load(p))

    def sknn(p):
        return load_npy(p, device="cuda")

    return {"np.load + cupy.asarray": numpy_then_cupy, "sknn_gpu.io.load_npy": sknn}


def _child(paths, reader, repeat):
    """Read ``paths`` to this process's GPU ``repeat + 1`` times; print the seconds of each timed pass."""
    import cupy as cp

    read = _readers()[reader]
    times = []
    for r in range(repeat + 1):
        t = time.perf_counter()
        for p in paths:
            a = read(p)
            del a
        cp.cuda.Device().synchronize()
        if r:
            times.append(time.perf_counter() - t)
    print(" ".join(f"{s:.6f}" for s in times))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/sknn_shards")
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--rows", type=int, default=ROWS)
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", nargs="*", help=argparse.SUPPRESS)
    ap.add_argument("--reader", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        _child(args.child, args.reader, args.repeat)
        return
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    paths = sorted(str(p) for p in folder.glob("X_*.npy"))
    if not paths:
        for i in range(args.shards):
            np.save(
                folder / f"X_{i:05d}.npy", np.random.default_rng(i).random((args.rows, D), dtype=np.float32)
            )
        paths = sorted(str(p) for p in folder.glob("X_*.npy"))
    paths = paths[: args.shards]
    nbytes = sum(os.path.getsize(p) for p in paths)
    for p in paths:  # into the page cache
        with open(p, "rb") as f:
            while f.read(1 << 26):
                pass
    print(f"{len(paths)} shards, {nbytes / 1e9:.2f} GB, from the page cache; medians of {args.repeat}\n")
    print("| reader | processes (one GPU each) | median time | GB/s in all | GB/s per process |")
    print("|---|---|---|---|---|")
    for reader in _readers():
        for n in doubling_counts(args.gpus):
            procs = []
            for i in range(n):
                env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(i))
                cmd = [sys.executable, __file__, "--reader", reader, "--repeat", str(args.repeat), "--child"]
                procs.append(subprocess.Popen(cmd + paths[i::n], env=env, stdout=subprocess.PIPE, text=True))
            outs = [p.communicate()[0] for p in procs]
            if any(p.returncode for p in procs):
                raise SystemExit(f"a reader process failed: {reader}, {n} processes")
            per = np.array([[float(v) for v in o.split()] for o in outs])  # (process, pass)
            wall = float(np.median(per.max(axis=0)))  # a pass ends when its slowest process does
            rate = nbytes / wall / 1e9
            print(f"| {reader} | {n} | {wall:.3f} s | {rate:.2f} | {rate / n:.2f} |")


if __name__ == "__main__":
    main()
