"""The size estimates behind "refused before allocating", measured on the GPU (issue 15).

Every estimator checks an estimate of the device bytes a call needs against the free
memory before it allocates. An estimate below what the call really allocates would let
oversize work start and die half-way; one far above it would refuse work that fits.
Each test below runs one call with CuPy's memory pool watched by a hook (the peak of
bytes held by new allocations during the call) and the estimates the estimator handed
to ``check_memory`` for 'cuda' recorded, and checks peak <= estimate <= 16 x peak.
"""

import sys

import numpy as np
import pytest

from sknn_gpu import (
    DTCNNHalftoner,
    FlyHashTransformer,
    FlyNNClassifier,
    GBNNMemory,
    GPUMLPClassifier,
    SparseNetRegressor,
)

pytestmark = pytest.mark.cuda

#: an estimate may be pessimistic (work blocks sized for the worst case), not wildly so
MAX_OVERESTIMATE = 16.0


class _Watch:
    """Peak bytes allocated from CuPy's pool inside the block, and the 'cuda' estimates."""

    def __init__(self, monkeypatch):
        import cupy
        from cupy.cuda import memory_hook

        class Hook(memory_hook.MemoryHook):
            name = "sknn_gpu_peak"

            def __init__(self):
                self.now = self.peak = 0
                self.sizes = {}

            def malloc_postprocess(self, device_id, size, mem_size, mem_ptr, pmem_id):
                self.sizes[mem_ptr] = mem_size
                self.now += mem_size
                self.peak = max(self.peak, self.now)

            def free_postprocess(self, device_id, mem_size, mem_ptr, pmem_id):
                if self.sizes.pop(mem_ptr, None) is not None:
                    self.now -= mem_size

        self.cupy = cupy
        self.hook = Hook()
        self.estimates = []
        from sknn_gpu import _backend

        real = _backend.check_memory

        def recording(n_bytes, device, *args, **kwargs):
            if device == "cuda":
                self.estimates.append(int(n_bytes))
            return real(n_bytes, device, *args, **kwargs)

        for mod in list(sys.modules.values()):
            ours = getattr(mod, "__name__", "").startswith("sknn_gpu")
            if ours and getattr(mod, "check_memory", None) is real:
                monkeypatch.setattr(mod, "check_memory", recording)

    def measure(self, fn):
        self.cupy.cuda.Device().synchronize()
        self.estimates.clear()
        self.hook.now = self.hook.peak = 0
        self.hook.sizes.clear()
        with self.hook:
            out = fn()
            self.cupy.cuda.Device().synchronize()
        return out, self.hook.peak, max(self.estimates, default=0)


def _check(watch, fn, what, tight=True):
    """``tight=False`` where the estimate is a worst case by design: FlyHash counts the
    fallback block as if every row of a batch were flagged (measured on an H100: 572 MB
    estimated for 6,000 rows into 8,192 units, 25-26 MB used by ordinary and by binarised
    rows), so it refuses early rather than late."""
    _, peak, estimate = watch.measure(fn)
    assert estimate > 0, f"{what}: no device estimate was checked"
    assert peak <= estimate, f"{what}: allocated {peak:,} bytes, estimated {estimate:,}"
    if tight:
        assert estimate <= MAX_OVERESTIMATE * max(peak, 1 << 20), (
            f"{what}: estimated {estimate:,} bytes for a peak of {peak:,}"
        )


@pytest.fixture
def watch(monkeypatch):
    return _Watch(monkeypatch)


def test_flyhash_and_flynn_estimates_cover_their_allocations(watch):
    rng = np.random.default_rng(0)
    X = rng.random((6000, 784), dtype=np.float32)
    y = rng.integers(0, 10, size=6000)
    fh = FlyHashTransformer(n_components=8192, k=256, output="packed", random_state=0, device="cuda")
    _check(watch, lambda: fh.fit(X), "FlyHash fit")
    _check(watch, lambda: fh.transform(X), "FlyHash transform (NumPy in)", tight=False)
    ties = (X > 0.5).astype(np.float32)  # binarised: heavy ties, rows through the fallback
    _check(watch, lambda: fh.transform(ties), "FlyHash transform of tied rows", tight=False)
    clf = FlyNNClassifier(random_state=0, device="cuda")
    _check(watch, lambda: clf.fit(X, y), "FlyNN fit", tight=False)
    _check(watch, lambda: clf.predict(X[:3000]), "FlyNN predict", tight=False)


def test_gbnn_estimates_cover_their_allocations(watch):
    rng = np.random.default_rng(1)
    msgs = rng.integers(0, 128, size=(20_000, 12))
    probes = msgs[:8000].copy()
    probes[:, :3] = -1
    mem = GBNNMemory(cluster_size=128, random_state=0, device="cuda")
    _check(watch, lambda: mem.fit(msgs), "GBNN fit")
    _check(watch, lambda: mem.predict(probes), "GBNN predict")


def test_dtcnn_estimate_covers_its_allocations(watch):
    rng = np.random.default_rng(2)
    img = rng.random((1536, 2048))
    ht = DTCNNHalftoner(device="cuda")
    _check(watch, lambda: ht.fit_transform(img), "DT-CNN one 1536x2048 image")
    batch = rng.random((8, 256, 256)).astype(np.float32)
    _check(watch, lambda: ht.fit_transform(batch), "DT-CNN batch of 8 256x256 images")


def test_mlp_and_sparsenet_estimates_cover_their_allocations(watch):
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    rng = np.random.default_rng(3)
    X = rng.random((20_000, 784), dtype=np.float32)  # large enough to be checked (64 MiB and up)
    y = rng.integers(0, 5, size=20_000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mlp = GPUMLPClassifier(hidden_layer_sizes=(512,), max_iter=1, random_state=0, device="cuda")
        _check(watch, lambda: mlp.fit(X, y), "MLP fit")
        _check(watch, lambda: mlp.predict_proba(X), "MLP predict_proba")
        net = SparseNetRegressor(hidden_layer_sizes=(128, 64), max_iter=1, random_state=0, device="cuda")
        _check(watch, lambda: net.fit(X, X[:, 0]), "SparseNet fit")
        _check(watch, lambda: net.predict(X), "SparseNet predict")
