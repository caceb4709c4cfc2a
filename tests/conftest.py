"""Shared fixtures: the ``device`` fixture, automatic skipping of ``cuda`` tests and the
suite's Hypothesis profile (with fewer examples for the cuda twins of property tests)."""

import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

from sknn_gpu._backend import cuda_available, cuda_unavailable_reason

# No wall-clock limits: the suite must pass on a busy 2-core machine, where an example or its
# data generation can take seconds. Tests set only how many examples they draw.
settings.register_profile(
    "sknn_gpu",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile("sknn_gpu")

#: The cuda twin of a property test (``device`` == "cuda") runs the same kernels on every example
#: and compares them with the CPU engine, which its CPU twin explores with the full count; the
#: twin draws a quarter of the examples (at least 5, never more than the CPU twin).
CUDA_EXAMPLES_DIVISOR = 4


def cuda_examples(n):
    """How many examples the cuda twin of a property test drawing ``n`` on the CPU draws."""
    return min(n, max(5, n // CUDA_EXAMPLES_DIVISOR))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """Run the cuda twin of a Hypothesis test with :func:`cuda_examples` of its examples."""
    test = getattr(getattr(item, "obj", None), "__func__", getattr(item, "obj", None))
    callspec = getattr(item, "callspec", None)
    twin = callspec is not None and callspec.params.get("device") == "cuda"
    if not (twin and getattr(test, "is_hypothesis_test", False)):
        yield
        return
    # Hypothesis reads the test's settings when it is called, from this attribute (the one
    # @settings writes); it is put back after the call
    own = test._hypothesis_internal_use_settings
    test._hypothesis_internal_use_settings = settings(own, max_examples=cuda_examples(own.max_examples))
    try:
        yield
    finally:
        test._hypothesis_internal_use_settings = own


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
