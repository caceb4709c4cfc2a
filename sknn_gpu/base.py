"""Base mixin shared by every sknn_gpu estimator: the ``device`` parameter."""

from __future__ import annotations

import functools
import operator
import warnings
import weakref

import numpy as np
import sklearn
from sklearn.base import ClassifierMixin, RegressorMixin

from . import _backend
from ._backend import (
    OUTPUT_TYPES,
    all_finite,
    array_module,
    cuda_available,
    get_xp,
    is_cupy_sparse,
    is_device_array,
    same_type_as_input,
    to_device,
    to_host,
)
from ._constraints import validate_params
from ._sklearn_compat import StrOptions
from ._version import __version__

__all__ = [
    "keeps_model",
    "restore_state",
    "snapshot_state",
    "DeviceMixin",
    "DeviceClassifierMixin",
    "DeviceRegressorMixin",
    "host_state",
    "device_state",
    "validates_params",
    "reject_time_dtypes",
]

#: key of the sknn_gpu version stamped into every pickle (beside scikit-learn's own)
_VERSION_KEY = "_sknn_gpu_version"
#: names of the state entries that held CuPy arrays when pickled (they go back to the GPU)
_ON_DEVICE_KEY = "_sknn_gpu_on_device"


def _map_arrays(obj, fn):
    """Apply ``fn`` to every array inside nested dict/list/tuple containers."""
    if isinstance(obj, dict):
        return {k: _map_arrays(v, fn) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_map_arrays(v, fn) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_map_arrays(v, fn) for v in obj)
    return fn(obj)


def host_state(obj):
    """Copy of ``obj`` with every CuPy array (dense or sparse) converted to NumPy/SciPy."""
    return _map_arrays(obj, lambda v: to_host(v) if is_device_array(v) else v)


def _holds_device_array(obj):
    found = []
    _map_arrays(obj, lambda v: found.append(True) if is_device_array(v) else None)
    return bool(found)


def device_state(obj, device):
    """Copy of ``obj`` with every numeric NumPy array moved to ``device``.

    Object and string arrays (``feature_names_in_``, string ``classes_``) stay on the
    host: CuPy cannot hold them.
    """
    return _map_arrays(
        obj,
        lambda v: to_device(v, device) if isinstance(v, np.ndarray) and v.dtype.kind in "biufc" else v,
    )


# ----------------------------------------------------------------- parameters at every method
#: estimator -> the parameter values last found valid (weak keys: the record lives beside the
#: estimator, not in it, so ``predict`` leaves ``__dict__`` alone and pickles and clones carry
#: nothing; a copy is validated on its first call)
_VALID_PARAMS = weakref.WeakKeyDictionary()
#: containers a user may edit in place: compared by content, not identity
_MUTABLE = (list, dict, set, np.ndarray)
#: values compared by type and value
_SCALARS = (str, bytes, int, float, complex, np.generic, type(None))


@functools.cache
def _param_reader(cls):
    """``reader(est) -> tuple`` of ``est``'s ``__init__`` parameters (names sorted, as in
    ``get_params``), for the class ``cls``; ``get_params`` inspects the signature per call."""
    names = tuple(cls._get_param_names())
    if not names:
        return lambda est: ()
    if len(names) == 1:
        get = operator.attrgetter(names[0])
        return lambda est: (get(est),)
    return operator.attrgetter(*names)


def _frozen(value):
    """A comparable stand-in for one parameter value: by content for containers and small
    arrays, by type and value for scalars and strings, by identity for anything else."""
    kind = type(value)
    if isinstance(value, _SCALARS):
        return (kind, value)  # the type too: True == 1 == 1.0, but constraints tell them apart
    if kind is list or kind is tuple or kind is set:
        items = sorted(value, key=repr) if kind is set else value
        return (kind, tuple(_frozen(v) for v in items))
    if kind is dict:
        return (kind, tuple((k, _frozen(v)) for k, v in value.items()))
    if kind is np.ndarray and value.size <= 4096:
        return (kind, value.dtype.str, value.shape, value.tobytes())
    return (kind, id(value))


def _mutable(value):
    """Whether ``value`` may change in place: a list, dict, set or array, or a tuple holding one."""
    if isinstance(value, _MUTABLE):
        return True
    return type(value) is tuple and any(_mutable(v) for v in value)


class _ValidParams:
    """The parameter values of one estimator that passed the checks (held, so ids stay unique)."""

    __slots__ = ("values", "frozen", "containers")

    def __init__(self, values):
        self.values = values
        self.frozen = tuple(_frozen(v) for v in values)
        self.containers = tuple(i for i, v in enumerate(values) if _mutable(v))

    def holds(self, values):
        """Whether ``values`` are these: the same objects (mutable ones with the same content),
        else equal stand-ins."""
        if all(map(operator.is_, values, self.values)):
            return all(_frozen(values[i]) == self.frozen[i] for i in self.containers)
        return tuple(_frozen(v) for v in values) == self.frozen


def check_params(est):
    """Validate ``est``'s parameters as they are now; cheap when they have not changed.

    Checks the ``_parameter_constraints`` (:func:`sknn_gpu._constraints.validate_params`,
    as ``_fit_context`` does for ``fit``; skipped under
    ``sklearn.config_context(skip_parameter_validation=True)``), then the estimator's own
    ``_cross_check_params()`` when it defines one. The values that pass are remembered per
    estimator, so a call with unchanged parameters costs a few microseconds (one read of
    each parameter and a comparison) instead of a full check.

    Raises
    ------
    sknn_gpu._constraints.InvalidParameterError
        (a ValueError and a TypeError) naming the parameter that breaks its constraint, or
        whatever ValueError ``_cross_check_params`` raises.
    """
    values = _param_reader(type(est))(est)
    seen = _VALID_PARAMS.get(est)
    if seen is not None and seen.holds(values):
        return
    constrained = not sklearn.get_config()["skip_parameter_validation"]
    if constrained:
        validate_params(est)
    cross = getattr(est, "_cross_check_params", None)
    if cross is not None:
        cross()
    if constrained:  # remembered only when every check ran
        _VALID_PARAMS[est] = _ValidParams(values)


def validates_params(method):
    """Decorator: validate the estimator's parameters before ``method`` runs.

    Parameters may change after ``fit`` (``set_params``, attribute assignment) and
    ``predict``, ``transform``, ``score`` ... read them again; without a check a bad
    value gives wrong answers instead of an error. An estimator uses it by decorating
    every public method that reads parameters, outermost (above ``dask_rows``, below
    ``available_if``)::

        class MyEstimator(DeviceMixin, BaseEstimator):
            _parameter_constraints = {...}          # as for _fit_context

            def _cross_check_params(self):          # optional: what constraints cannot say
                if self.low > self.high:
                    raise ValueError(f"low must be <= high, got {self.low} > {self.high}.")

            @validates_params
            @_fit_context(prefer_skip_nested_validation=True)
            def fit(self, X, y): ...

            @validates_params
            def predict(self, X): ...

    On ``fit`` it adds ``_cross_check_params`` (and, after the first call, the constraints
    that ``_fit_context`` skips for a fitted ``partial_fit``). The check is
    :func:`check_params`: one validation, remembered until a parameter changes, so it
    costs microseconds per call. A bad value raises ``InvalidParameterError`` (a
    ValueError) naming the parameter, as ``fit`` does.
    """

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        check_params(self)
        return method(self, *args, **kwargs)

    return wrapper


def snapshot_state(est):
    """A record of ``est``'s instance state that :func:`restore_state` puts back whole.

    Fitted attributes are replaced by a fit, never written into, so a shallow copy of the
    instance dictionary is the record; what estimators change in place is copied too: lists
    (loss curves are appended to) and the cache of device copies.
    """
    saved = {k: list(v) if isinstance(v, list) else v for k, v in est.__dict__.items()}
    if "_device_cache" in saved:
        saved["_device_cache"] = dict(saved["_device_cache"])
    return saved


def restore_state(est, saved):
    """Put back the state :func:`snapshot_state` recorded (and nothing else)."""
    est.__dict__.clear()
    est.__dict__.update(saved)


def keeps_model(method):
    """Decorator: when ``method`` (``fit`` or ``partial_fit``) raises, the estimator is put
    back as it was before the call (its fitted model, or unfitted), instead of half changed."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        saved = snapshot_state(self)
        try:
            return method(self, *args, **kwargs)
        except BaseException:
            restore_state(self, saved)
            raise

    return wrapper


# ----------------------------------------------------------------- input dtypes
#: names of the date and duration dtypes of data frames that have no NumPy ``kind`` (polars)
_TIME_DTYPE_NAMES = ("Datetime", "Date", "Duration", "Time")


def _is_time_dtype(dtype):
    kind = getattr(dtype, "kind", None)
    if isinstance(kind, str):
        return kind in ("m", "M")
    return str(dtype).split("(", 1)[0] in _TIME_DTYPE_NAMES


def reject_time_dtypes(X, input_name="X"):
    """Refuse dates and time spans (``datetime64``/``timedelta64``) as numeric input.

    scikit-learn's ``validate_data(..., dtype=np.float64)`` casts them silently to
    counts of their unit since 1970 (or of their span), so a model would train on
    numbers whose scale depends on the unit the data happened to carry. Call it on the
    host input before ``validate_data`` (CuPy holds no time dtypes;
    :meth:`DeviceMixin._check_device_X` refuses every non-numeric dtype). Looks at the
    array's ``dtype``, a data frame's column ``dtypes``, or, for a list or tuple, the
    dtype NumPy gives it.

    Raises
    ------
    ValueError
        Naming the dtype (and the column of a data frame).
    """
    dtype = getattr(X, "dtype", None)
    if dtype is not None:
        columns = [(None, dtype)]
    elif hasattr(X, "dtypes"):  # a data frame: one dtype per column
        dtypes = X.dtypes
        names = getattr(X, "columns", None)
        dtypes = list(dtypes.values if hasattr(dtypes, "values") else dtypes)
        columns = list(zip(list(names) if names is not None else [None] * len(dtypes), dtypes))
    elif isinstance(X, (list, tuple)):
        try:
            columns = [(None, np.asarray(X).dtype)]
        except (ValueError, TypeError):  # ragged or odd: validate_data says what is wrong
            return
    else:
        return
    for column, dtype in columns:
        if _is_time_dtype(dtype):
            where = "" if column is None else f" (column {column!r})"
            raise ValueError(
                f"{input_name} has dtype {dtype}{where}: dates and time spans are not numeric "
                "features. Convert them to numbers in a unit you choose before passing them, for "
                "example seconds: X.astype('datetime64[s]').astype(np.int64) (or "
                "'timedelta64[s]' for time spans)."
            )


class DeviceMixin:
    """Mixin giving an estimator the ``device`` parameter.

    * ``device`` is declared in ``_parameter_constraints`` (merge
      ``DeviceMixin._device_constraints`` into the estimator's own dict).
    * ``_resolve_device()`` is called once in ``fit`` and stores ``device_``
      ('cpu' or 'cuda').
    * Pickles carry the sknn_gpu version; loading one from another version warns.
    * Pickling converts every CuPy array in the instance state (at any nesting
      depth in lists/dicts/tuples) to NumPy, so a model fitted on a GPU loads on a
      CPU-only machine. Transient caches named in ``_transient_attributes``
      (device copies, for instance) are dropped. On unpickling, a model whose
      ``device_`` is 'cuda' moves exactly the attributes that held CuPy arrays when
      it was pickled back to the GPU when one is usable (host attributes such as
      ``classes_`` stay NumPy), and otherwise falls back to 'cpu' with a warning.
    * Parameters are validated at every public method, not only in ``fit``: decorate
      each with :func:`validates_params` (it runs ``_validate_params`` and the
      estimator's ``_cross_check_params`` hook, once per change of the parameters;
      :func:`check_params` where a method cannot be decorated).
    """

    _device_constraints = {"device": [StrOptions({"auto", "cpu", "cuda"})]}
    #: merge into ``_parameter_constraints`` of an estimator that has an ``output_type`` parameter
    _output_constraints = {"output_type": [None, StrOptions(set(OUTPUT_TYPES))]}
    _transient_attributes = ("_device_cache",)
    #: fitted attributes that stay NumPy whatever the device (part of the estimator's contract)
    _host_attributes = ()

    def _device_copy(self, name, device=None):
        """Fitted attribute ``name`` on ``device`` (default ``device_``), cached until refit.

        The cache lives in ``self._device_cache`` and is never pickled.
        """
        device = device or getattr(self, "device_", "cpu")
        value = getattr(self, name)
        if device == "cpu" and (
            isinstance(value, np.ndarray)
            or (isinstance(value, (list, tuple)) and all(isinstance(v, np.ndarray) for v in value))
        ):
            return value  # already where it is needed: no cache entry (predict leaves __dict__ alone)
        move = (lambda v: device_state(v, device)) if device == "cuda" else host_state
        return self._derived((name, device), value, move)

    def _derived(self, key, source, build):
        """``build(source)``, computed once and cached until ``source`` is replaced.

        For arrays derived from fitted state (a device copy, the projection by columns,
        its dense float16 copy on the GPU): kept in the transient ``_device_cache``
        (never pickled, dropped on refit), keyed by ``key`` and valid while the
        fitted attribute ``source`` is the same object.
        """
        cache = self.__dict__.setdefault("_device_cache", {})
        hit = cache.get(key)
        if hit is not None and hit[0] is source:
            return hit[1]
        value = build(source)
        cache[key] = (source, value)
        return value

    def _unchanged_host_X(self, X):
        """``X`` when ``validate_data(self, X, reset=False, dtype=np.float64)`` would return it
        unchanged and silently, else None (the caller then runs ``validate_data``, which
        raises or warns as scikit-learn does).

        That is: a 2-D float64 NumPy array with at least one row, the fitted number of
        features, all finite, for an estimator fitted without feature names. Costs a
        finiteness pass instead of scikit-learn's ~50 µs of checks, which dominate a
        one-row prediction on the GPU.
        """
        if (
            type(X) is np.ndarray
            and X.ndim == 2
            and X.dtype == np.float64
            and X.shape[0] >= 1
            and X.shape[1] == getattr(self, "n_features_in_", -1)
            and not hasattr(self, "feature_names_in_")
            and np.isfinite(X).all()
        ):
            return X
        return None

    def _check_device_X(
        self, X, *, reset, accept_sparse=False, cast_float=True, contiguous=False, finite=True
    ):
        """Validate a 2-D CuPy ``X`` on the device (``validate_data`` would copy it to the host).

        The checks ``validate_data`` makes for NumPy input: 2-D, numeric, at least one
        sample and one feature, finite, and ``n_features_in_`` set on ``reset`` or compared
        otherwise. Input that is not float32/float64 becomes float64 when ``cast_float``; ``contiguous``
        returns a C-ordered array; ``accept_sparse`` lets cupyx sparse matrices through
        (their stored values are checked). Written against the input's array module, so
        the same code is exercised on NumPy arrays by the CPU tests. ``finite=False`` leaves
        the NaN/infinity check to the caller (who runs it after queueing its own work, so
        that its one synchronisation waits for both).
        """
        sparse = is_cupy_sparse(X)
        if sparse and not accept_sparse:
            raise TypeError(f"{type(self).__name__} does not accept sparse input; pass a dense array.")
        if X.ndim != 2:
            raise ValueError(f"Expected a 2D array, got an array of shape {X.shape}.")
        if X.dtype.kind not in "biuf":
            raise ValueError(f"X must be numeric, got dtype {X.dtype}.")
        if X.shape[0] < 1 or X.shape[1] < 1:
            raise ValueError(
                f"Found array with shape {X.shape}; at least one sample and one feature are needed."
            )
        if not sparse:
            xp = array_module(X)
            if cast_float and X.dtype not in (xp.float32, xp.float64):
                X = X.astype(xp.float64)
            if contiguous:
                X = xp.ascontiguousarray(X)
        data = X.data if sparse else X
        if finite and data.dtype.kind == "f" and data.size and not all_finite(data):
            raise ValueError("Input X contains NaN or infinity.")
        if reset:
            self.n_features_in_ = int(X.shape[1])
            if hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
        elif X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {X.shape[1]} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input."
            )
        return X

    def _output(self, result, X):
        """``result`` as this estimator returns it: the type of ``X``, or what ``output_type`` says.

        The estimator's own ``output_type`` parameter (when it has one and it is not None)
        wins over ``sknn_gpu.config_context(output_type=...)``.
        """
        return same_type_as_input(result, X, getattr(self, "output_type", None))

    def _resolve_device(self):
        """Resolve ``device`` into ``device_`` ('cpu' or 'cuda'): once per ``fit``, nowhere else.

        Everything below (engines, inner estimators, helpers) takes the resolved value.
        """
        self.device_ = _backend.resolve_device(self.device)
        return self.device_

    @property
    def _xp(self):
        """Array module of the fitted device (computed, never stored)."""
        return get_xp(getattr(self, "device_", "cpu"))

    def __getstate__(self):
        state = super().__getstate__() if hasattr(super(), "__getstate__") else self.__dict__.copy()
        state = dict(state)
        for key in self._transient_attributes:
            state.pop(key, None)
        on_device = tuple(key for key, value in state.items() if _holds_device_array(value))
        state = {key: host_state(value) for key, value in state.items()}
        state[_VERSION_KEY] = __version__
        state[_ON_DEVICE_KEY] = on_device
        return state

    def __setstate__(self, state):
        state = dict(state)
        pickled = state.pop(_VERSION_KEY, None)
        on_device = state.pop(_ON_DEVICE_KEY, None)
        if pickled is not None and pickled != __version__:
            warnings.warn(
                f"{type(self).__name__} was pickled with sknn_gpu {pickled} and is loaded with "
                f"sknn_gpu {__version__}; it may not work or give the same results. Refit it, or "
                f"load it with sknn_gpu {pickled}.",
                UserWarning,
                stacklevel=2,
            )
        if state.get("device_") == "cuda":
            if cuda_available():
                if on_device is None:  # an older pickle, without the record: public fitted arrays
                    on_device = [
                        key
                        for key in state
                        if key.endswith("_") and not key.startswith("_") and key not in self._host_attributes
                    ]
                for key in on_device:  # exactly what was on the GPU goes back (host classes_ stay)
                    if key in state:
                        state[key] = device_state(state[key], "cuda")
            else:
                warnings.warn(
                    f"{type(self).__name__} was fitted on CUDA but no usable GPU is present; "
                    "it will run on the CPU (device_ set to 'cpu').",
                    UserWarning,
                    stacklevel=2,
                )
                state["device_"] = "cpu"
        if hasattr(super(), "__setstate__"):
            super().__setstate__(state)
        else:  # pragma: no cover - BaseEstimator always defines it
            self.__dict__.update(state)


class DeviceClassifierMixin(ClassifierMixin):
    """scikit-learn's ClassifierMixin whose ``score`` also takes CuPy ``X``/``y``.

    scikit-learn's ``accuracy_score`` refuses CuPy arrays unless array-API dispatch is on;
    the labels are small, so they are compared on the host.
    """

    def score(self, X, y, sample_weight=None):
        """Mean accuracy of ``self.predict(X)`` against ``y`` (NumPy or CuPy arrays)."""
        from sklearn.metrics import accuracy_score

        return float(
            accuracy_score(to_host(y), to_host(self.predict(X)), sample_weight=to_host(sample_weight))
        )


class DeviceRegressorMixin(RegressorMixin):
    """scikit-learn's RegressorMixin whose ``score`` (R^2) also takes CuPy ``X``/``y``."""

    def score(self, X, y, sample_weight=None):
        """Coefficient of determination of ``self.predict(X)`` against ``y`` (NumPy or CuPy)."""
        from sklearn.metrics import r2_score

        return float(r2_score(to_host(y), to_host(self.predict(X)), sample_weight=to_host(sample_weight)))
