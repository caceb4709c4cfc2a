"""The suite's own machinery in conftest.py: the Hypothesis profile and the cuda twins' examples."""

from types import SimpleNamespace

import conftest
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


def test_profile_has_no_wall_clock_limits():
    assert settings.default.deadline is None
    assert HealthCheck.too_slow in settings.default.suppress_health_check


@pytest.mark.parametrize(("cpu", "cuda"), [(40, 10), (150, 37), (12, 5), (3, 3)])
def test_cuda_examples(cpu, cuda):
    assert conftest.cuda_examples(cpu) == cuda


def _run_through_the_hook(test, params):
    """Call ``test`` the way pytest does, inside conftest's pytest_runtest_call wrapper."""
    item = SimpleNamespace(obj=test, callspec=SimpleNamespace(params=params))
    hook = conftest.pytest_runtest_call(item)
    next(hook)
    test()
    with pytest.raises(StopIteration):
        next(hook)


def test_the_cuda_twin_of_a_property_test_draws_fewer_examples():
    drawn = []

    @settings(max_examples=40, database=None)
    @given(st.integers())
    def prop(x):
        drawn.append(x)

    for params, expected in (({"device": "cpu"}, 40), ({"device": "cuda"}, 10), ({}, 40)):
        drawn.clear()
        _run_through_the_hook(prop, params)
        assert len(drawn) == expected, params
        assert prop._hypothesis_internal_use_settings.max_examples == 40  # put back after the call
