"""Parameter constraints, their check and the ``fit`` context: sknn_gpu's own, on public
scikit-learn API only.

Every estimator declares ``_parameter_constraints``: for each ``__init__`` parameter a list
of what it may be (any one of them satisfied is enough) or ``"no_validation"``. An entry is
a constraint object of this module (:class:`Interval`, :class:`StrOptions`,
:class:`Options`, :class:`HasMethods`), a type (``dict``, ``Integral``: an instance of it),
``None``, or one of the words ``"array-like"``, ``"boolean"``, ``"random_state"`` and
``"verbose"``. The vocabulary is scikit-learn's (its estimators declare the same), so a
reader of either recognises it; the implementation is ours, so a scikit-learn release that
moves its private validation module breaks nothing here.

:func:`validate_params` checks an estimator's parameters and raises
:class:`InvalidParameterError` (a ValueError and a TypeError) naming the parameter, what it
may be and what it got. :func:`fit_context` decorates ``fit``-like methods: it checks the
parameters (unless scikit-learn's ``skip_parameter_validation`` setting is on, or the method
is ``partial_fit`` of a fitted estimator), then runs the method with nested validation
skipped when it prefers so, through the public :func:`sklearn.config_context`.
"""

from __future__ import annotations

import functools
from numbers import Integral, Real

import numpy as np
import sklearn

__all__ = [
    "InvalidParameterError",
    "Interval",
    "StrOptions",
    "Options",
    "RealNotInt",
    "HasMethods",
    "validate_params",
    "validate_parameter_constraints",
    "fit_context",
]


class InvalidParameterError(ValueError, TypeError):
    """A parameter of the wrong type or value: both a ValueError and a TypeError, so code that
    catches either (as it would scikit-learn's own) catches it."""


class RealNotInt(Real):
    """Real numbers that are not integers (Python and NumPy floats): the type of an
    :class:`Interval` of reals that must not accept an int (``k=1`` is a count, ``k=0.5`` a
    fraction)."""


RealNotInt.register(float)
RealNotInt.register(np.floating)


def _type_name(t):
    """``'an int'``, ``'a float'``, ``"an instance of 'dict'"``: how a message names type ``t``."""
    if t is Integral:
        return "an int"
    if t is Real:
        return "a float"
    if t is RealNotInt:
        return "a float"
    return f"an instance of {t.__qualname__!r}"


class _Constraint:
    """One way a parameter may be: :meth:`is_satisfied_by` and a description (``str``)."""

    hidden = False

    def is_satisfied_by(self, val):  # pragma: no cover - every subclass defines it
        raise NotImplementedError


class _InstanceOf(_Constraint):
    def __init__(self, type_):
        self.type = type_

    def is_satisfied_by(self, val):
        return isinstance(val, self.type)

    def __str__(self):
        return _type_name(self.type)


class _NoneConstraint(_Constraint):
    def is_satisfied_by(self, val):
        return val is None

    def __str__(self):
        return "None"


class _Booleans(_Constraint):
    def is_satisfied_by(self, val):
        return isinstance(val, (bool, np.bool_))

    def __str__(self):
        return "an instance of 'bool'"


class _RandomStates(_Constraint):
    """None, an int seed in [0, 2**32 - 1] or a :class:`numpy.random.RandomState`."""

    def is_satisfied_by(self, val):
        if val is None or isinstance(val, np.random.RandomState):
            return True
        return isinstance(val, Integral) and not isinstance(val, (bool, np.bool_)) and 0 <= val <= 2**32 - 1

    def __str__(self):
        return "an int in the range [0, 4294967295], an instance of 'numpy.random.RandomState' or None"


class _Verbose(_Constraint):
    """A non-negative int or a bool."""

    def is_satisfied_by(self, val):
        if isinstance(val, (bool, np.bool_)):
            return True
        return isinstance(val, Integral) and val >= 0

    def __str__(self):
        return "an int in the range [0, inf) or an instance of 'bool'"


class _ArrayLikes(_Constraint):
    """Something with a length, a shape or an ``__array__`` that is not a scalar."""

    def is_satisfied_by(self, val):
        has = hasattr(val, "__len__") or hasattr(val, "shape") or hasattr(val, "__array__")
        return has and not np.isscalar(val)

    def __str__(self):
        return "an array-like"


class Interval(_Constraint):
    """Numbers of ``type_`` (``Integral``, ``Real`` or ``RealNotInt``) between ``left`` and
    ``right`` (None: unbounded), ``closed`` one of ``'left'``, ``'right'``, ``'both'``,
    ``'neither'``. NaN is in no interval."""

    def __init__(self, type_, left, right, *, closed):
        if type_ not in (Integral, Real, RealNotInt):
            raise ValueError(f"Interval's type must be Integral, Real or RealNotInt, got {type_!r}.")
        if closed not in ("left", "right", "both", "neither"):
            raise ValueError(
                f"Interval's closed must be 'left', 'right', 'both' or 'neither', got {closed!r}."
            )
        if type_ is Integral:
            for name, end in (("left", left), ("right", right)):
                if end is not None and not isinstance(end, Integral):
                    raise TypeError(f"An Interval of integers needs integer bounds, got {name}={end!r}.")
        if left is not None and right is not None and right < left:
            raise ValueError(f"Interval's right bound {right!r} is below its left bound {left!r}.")
        self.type, self.left, self.right, self.closed = type_, left, right, closed

    def __contains__(self, val):
        if not isinstance(val, Integral) and np.isnan(val):
            return False
        if self.left is not None:
            if val < self.left or (val == self.left and self.closed in ("right", "neither")):
                return False
        if self.right is not None:
            if val > self.right or (val == self.right and self.closed in ("left", "neither")):
                return False
        return True

    def is_satisfied_by(self, val):
        return isinstance(val, self.type) and val in self

    def __str__(self):
        low = "-inf" if self.left is None else self.left
        high = "inf" if self.right is None else self.right
        opening = "[" if self.closed in ("left", "both") and self.left is not None else "("
        closing = "]" if self.closed in ("right", "both") and self.right is not None else ")"
        return f"{_type_name(self.type)} in the range {opening}{low}, {high}{closing}"


class Options(_Constraint):
    """One of the values ``options`` (each an instance of ``type_``); ``deprecated`` ones are
    accepted and left out of the message."""

    def __init__(self, type_, options, *, deprecated=None):
        self.type = type_
        self.options = set(options)
        self.deprecated = set(deprecated or ())
        if self.deprecated - self.options:
            raise ValueError("The deprecated options must be a subset of the options.")

    def is_satisfied_by(self, val):
        if not isinstance(val, self.type):
            return False
        try:
            return val in self.options
        except TypeError:  # an unhashable value
            return False

    def __str__(self):
        shown = sorted((repr(o) for o in self.options - self.deprecated), key=str)
        kind = "a str" if self.type is str else _type_name(self.type)
        return f"{kind} among {{{', '.join(shown)}}}"


class StrOptions(Options):
    """One of the strings ``options``."""

    def __init__(self, options, *, deprecated=None):
        super().__init__(str, options, deprecated=deprecated)


class HasMethods(_Constraint):
    """An object with every method named in ``methods`` (a name or a list of names)."""

    def __init__(self, methods):
        self.methods = [methods] if isinstance(methods, str) else list(methods)

    def is_satisfied_by(self, val):
        return all(callable(getattr(val, m, None)) for m in self.methods)

    def __str__(self):
        names = [repr(m) for m in self.methods]
        listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
        return f"an object implementing {listed}"


_WORDS = {
    "array-like": _ArrayLikes,
    "boolean": _Booleans,
    "random_state": _RandomStates,
    "verbose": _Verbose,
}


def make_constraint(c):
    """The constraint object of one entry of a ``_parameter_constraints`` list."""
    if isinstance(c, _Constraint):
        return c
    if c is None:
        return _NoneConstraint()
    if isinstance(c, str) and c in _WORDS:
        return _WORDS[c]()
    if isinstance(c, type):
        return _InstanceOf(c)
    raise ValueError(f"Unknown parameter constraint {c!r}.")


def _describe(constraints):
    shown = [str(c) for c in constraints if not c.hidden]
    if len(shown) == 1:
        return shown[0]
    return f"{', '.join(shown[:-1])} or {shown[-1]}"


def validate_parameter_constraints(constraints, params, caller_name):
    """Check ``params`` (name -> value) against ``constraints`` (name -> list of entries, or
    ``"no_validation"``); parameters without an entry are not checked.

    Raises
    ------
    InvalidParameterError
        For the first parameter that satisfies none of its entries:
        ``The 'k' parameter of FlyNNClassifier must be ... Got 'many' instead.``
    """
    for name, value in params.items():
        entries = constraints.get(name)
        if entries is None or (isinstance(entries, str) and entries == "no_validation"):
            continue
        made = [make_constraint(c) for c in entries]
        if any(c.is_satisfied_by(value) for c in made):
            continue
        raise InvalidParameterError(
            f"The {name!r} parameter of {caller_name} must be {_describe(made)}. Got {value!r} instead."
        )


def validate_params(est):
    """Check the parameters of ``est`` against its ``_parameter_constraints``."""
    validate_parameter_constraints(est._parameter_constraints, est.get_params(deep=False), type(est).__name__)


def _is_fitted(est):
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    try:
        check_is_fitted(est)
    except NotFittedError:
        return False
    return True


def fit_context(*, prefer_skip_nested_validation):
    """Decorate a ``fit``-like method: check the parameters first (unless scikit-learn's
    ``skip_parameter_validation`` is set, or this is ``partial_fit`` of a fitted estimator),
    then run the method with nested estimators' checks skipped when
    ``prefer_skip_nested_validation`` (their parameters are ours, already checked)."""

    def decorator(method):
        @functools.wraps(method)
        def wrapper(est, *args, **kwargs):
            skip = bool(sklearn.get_config().get("skip_parameter_validation", False))
            fitted_partial = method.__name__ == "partial_fit" and _is_fitted(est)
            if not skip and not fitted_partial:
                validate_params(est)
            with sklearn.config_context(skip_parameter_validation=prefer_skip_nested_validation or skip):
                return method(est, *args, **kwargs)

        return wrapper

    return decorator
