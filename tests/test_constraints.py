"""sknn_gpu's own parameter constraints (``sknn_gpu/_constraints.py``): what each accepts and
refuses, and the message that names the parameter."""

from numbers import Integral, Real

import numpy as np
import pytest

from sknn_gpu._constraints import (
    HasMethods,
    Interval,
    InvalidParameterError,
    Options,
    RealNotInt,
    StrOptions,
    make_constraint,
    validate_parameter_constraints,
)


def test_intervals_by_closedness_type_and_nan():
    both = Interval(Integral, 1, 3, closed="both")
    assert [both.is_satisfied_by(v) for v in (0, 1, 3, 4, np.int64(2), 2.0)] == [
        False,
        True,
        True,
        False,
        True,
        False,  # a float is not an int
    ]
    left = Interval(Real, 0, 1, closed="left")
    assert left.is_satisfied_by(0) and left.is_satisfied_by(0.5) and not left.is_satisfied_by(1.0)
    assert not left.is_satisfied_by(float("nan"))
    neither = Interval(RealNotInt, 0, 1, closed="neither")
    assert neither.is_satisfied_by(0.5) and neither.is_satisfied_by(np.float32(0.5))
    assert not neither.is_satisfied_by(0.0) and not neither.is_satisfied_by(1)  # an int is refused
    unbounded = Interval(Real, None, None, closed="neither")
    assert unbounded.is_satisfied_by(-1e300) and not unbounded.is_satisfied_by("1")
    assert str(Interval(Integral, 1, None, closed="left")) == "an int in the range [1, inf)"
    assert str(neither) == "a float in the range (0, 1)"
    with pytest.raises(ValueError, match="closed"):
        Interval(Real, 0, 1, closed="open")
    with pytest.raises(ValueError, match="below its left bound"):
        Interval(Real, 1, 0, closed="both")
    with pytest.raises(TypeError, match="integer bounds"):
        Interval(Integral, 0.5, None, closed="left")


def test_options_words_types_and_methods():
    s = StrOptions({"auto", "cpu"}, deprecated={"cpu"})
    assert s.is_satisfied_by("cpu") and not s.is_satisfied_by("gpu") and not s.is_satisfied_by(1)
    assert str(s) == "a str among {'auto'}"  # a deprecated option is accepted, not advertised
    inf = Options(Real, {np.inf})
    assert inf.is_satisfied_by(np.inf) and not inf.is_satisfied_by(3.0) and not inf.is_satisfied_by([1])
    has = HasMethods(["forward", "to_edges"])
    assert str(has) == "an object implementing 'forward' and 'to_edges'"
    assert not has.is_satisfied_by(object())
    words = {w: make_constraint(w) for w in ("boolean", "random_state", "verbose", "array-like")}
    assert words["boolean"].is_satisfied_by(np.True_) and not words["boolean"].is_satisfied_by(1)
    rs = words["random_state"]
    assert rs.is_satisfied_by(None) and rs.is_satisfied_by(np.random.RandomState(0)) and rs.is_satisfied_by(7)
    assert not rs.is_satisfied_by(-1) and not rs.is_satisfied_by(True) and not rs.is_satisfied_by(2**32)
    assert words["verbose"].is_satisfied_by(True) and not words["verbose"].is_satisfied_by(-1)
    assert words["array-like"].is_satisfied_by([1, 2]) and not words["array-like"].is_satisfied_by(3)
    assert make_constraint(dict).is_satisfied_by({}) and make_constraint(None).is_satisfied_by(None)
    with pytest.raises(ValueError, match="Unknown parameter constraint"):
        make_constraint("sparse-ish")


def test_the_message_names_the_parameter_what_it_may_be_and_what_it_got():
    constraints = {
        "k": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "free": "no_validation",
    }
    validate_parameter_constraints(constraints, {"k": "auto", "free": object(), "other": -1}, "Est")
    with pytest.raises(
        InvalidParameterError,
        match=r"^The 'k' parameter of Est must be an int in the range \[1, inf\) or a str among "
        r"\{'auto'\}\. Got 'many' instead\.$",
    ) as info:
        validate_parameter_constraints(constraints, {"k": "many"}, "Est")
    assert isinstance(info.value, ValueError) and isinstance(info.value, TypeError)
