"""What unpickling a fitted ``FlyHashTransformer`` costs on the CPU at the FashionMNIST shape
(784 features, m = 25,088 units, s = 39 connections, k = 1,254): the first load in a process
draws the projection again from the pickled generator state and checks its digest; later
loads of the same model reuse the projection the process drew (what a Dask worker meets on
every call after the first). Medians of 7, wall clock. A profile, not a benchmark against a
peer.

Run from the repository root::

    python benchmarks/tools/time_flyhash_unpickle.py
"""

import pickle
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np

from sknn_gpu import FlyHashTransformer
from sknn_gpu.fly import _flyhash


def median_ms(fn, repeat=7):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3


def main():
    X = np.random.default_rng(0).random((100, 784), dtype=np.float32)
    fh = FlyHashTransformer(n_components=25088, n_connections=39, k=1254, device="cpu", random_state=0).fit(X)
    blob = pickle.dumps(fh)

    def first_load():
        _flyhash._REDRAWN.clear()  # as in a fresh process
        pickle.loads(blob)

    print(f"pickle size                        {len(blob) / 1e3:8.1f} kB")
    print(f"pickle.dumps                       {median_ms(lambda: pickle.dumps(fh)):8.2f} ms")
    print(f"first load (projection drawn)      {median_ms(first_load):8.2f} ms")
    pickle.loads(blob)
    print(f"later loads (projection reused)    {median_ms(lambda: pickle.loads(blob)):8.2f} ms")


if __name__ == "__main__":
    main()
