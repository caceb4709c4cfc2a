"""Shared fixtures: the ``device`` fixture and automatic skipping of ``cuda`` tests."""

import zlib

import numpy as np
import pytest

from sknn_gpu._backend import cuda_available, cuda_unavailable_reason


def pytest_collection_modifyitems(config, items):
    if cuda_available():
        return
    skip = pytest.mark.skip(reason=f"needs a usable CUDA device: {cuda_unavailable_reason()}")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def device(request):
    """Run a test body once per device; the cuda run is skipped without a GPU."""
    return request.param


@pytest.fixture
def rng(request):
    """A fresh generator per test, seeded from the test's id so failures reproduce.

    (crc32, not ``hash()``: str hashing is salted per process, which made seeds differ
    between runs.)
    """
    seed = zlib.crc32(request.node.nodeid.encode())
    return np.random.default_rng(seed)


@pytest.fixture(scope="session")
def dask_client():
    """One two-process ``distributed.LocalCluster`` for the whole test session.

    Processes, not threads: every block then runs on a pickled copy of the estimator in
    another interpreter, as on a real cluster. Started on first use (tests that need no
    Dask never pay for it); skipped when ``distributed`` is not installed.
    """
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            processes=True, n_workers=2, threads_per_worker=1, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client
