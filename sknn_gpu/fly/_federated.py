"""One-shot federated FlyNN: merge party models, and fit one party per Dask worker.

A FlyNN model is a table of integer counts per class and Kenyon cell. Parties that
share the random projection (same hashing parameters, ``random_state`` and number
of features) can each count on their own data and send only the counts; the sum
of their counts is exactly the count table of the pooled data, so the merged
model is bit-identical to the model fitted on everything (Ram & Sinha, AAAI 2022).

With ``fit_federated(..., epsilon=...)`` every party privatises its counts on its own
worker before they leave it (:mod:`._privacy`), over an input range that the
coordinator gives (a range fitted from the parties' data is refused: it would travel
exactly). Parties that exchange files use :meth:`FlyNNClassifier.export_counts` and
:meth:`FlyNNClassifier.from_counts` (:mod:`._counts_io`), never pickles.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.utils.validation import check_is_fitted

from .._backend import to_device, to_host
from .._constraints import validate_params
from .._dask import is_dask_collection
from .._progress import Progress
from . import _fly_dask, _flynn_batches
from ._common import HASH_PARAMS, check_fitted_params, label_kind
from ._encoding import column_range, wider_range
from ._flynn import FlyNNClassifier
from ._privacy import check_budget, merged_accounting
from ._weights import check_exact, on_grid

__all__ = ["merge_flynn", "fit_federated"]

#: Parameters that define the projection (and the input transform): parties must agree on them.
_SHARED = (*HASH_PARAMS, "encoding", "n_receptors", "input_range", "normalize", "random_state")


def _shared_params(params):
    return {name: params[name] for name in _SHARED}


def _check_compatible(ref_params, ref_features, params, n_features, who):
    if n_features != ref_features:
        raise ValueError(
            f"Cannot merge FlyNN models: {who} was fitted on {n_features} features, the first on "
            f"{ref_features}. Parties must share the projection (same parameters, random_state "
            "and n_features)."
        )
    a, b = _shared_params(ref_params), _shared_params(params)
    diff = {name: (a[name], b[name]) for name in _SHARED if not _same(a[name], b[name])}
    if diff:
        detail = ", ".join(f"{k}: {v[0]!r} vs {v[1]!r}" for k, v in diff.items())
        raise ValueError(
            f"Cannot merge FlyNN models: {who} has different projection parameters ({detail}). "
            "Parties must share the projection (same parameters, random_state and n_features)."
        )
    if not isinstance(a["random_state"], (int, np.integer)):
        raise ValueError(
            "Cannot merge FlyNN models fitted with random_state="
            f"{a['random_state']!r}: parties must fix the same integer random_state so that they "
            "draw the same projection."
        )


def _same(u, v):
    if u is None or v is None:
        return u is v
    if isinstance(u, (tuple, list)) or isinstance(v, (tuple, list)):  # input_range=(low, high)
        if not (isinstance(u, (tuple, list)) and isinstance(v, (tuple, list)) and len(u) == len(v)):
            return False
        return all(
            np.array_equal(np.asarray(to_host(a)), np.asarray(to_host(b))) for a, b in zip(u, v, strict=True)
        )
    try:
        return bool(u == v)
    except Exception:  # pragma: no cover - exotic parameter values
        return False


def _check_label_types(parts, names):
    """TypeError when parties label their classes with different types (numbers vs strings).

    NumPy would silently turn every class into a string (``0`` -> ``'0'``), and the
    merged model would then predict labels that match neither party's.
    """
    kinds = [label_kind(np.asarray(c)) for c, _, _ in parts]
    for i, kind in enumerate(kinds):
        if kind != kinds[0]:
            first, other = np.asarray(parts[0][0]), np.asarray(parts[i][0])
            raise TypeError(
                f"Cannot merge FlyNN models: {names[0]} has {kinds[0]} class labels "
                f"({first.tolist()[:5]}) but {names[i]} has {kind} ones ({other.tolist()[:5]}); "
                "every party must label classes with the same type."
            )


def _agreed_feature_names(names, who, what, warn=True):
    """The feature names that parties fitted on data frames agree on (None when none has any).

    ``names[i]`` is party ``who[i]``'s ``feature_names_in_`` or None. Names that differ, or
    come in another order, are refused, naming the first column that differs: the counts
    of a cell would then add up readings of different features. Parties without names
    beside parties with them give a UserWarning (``warn``): their columns cannot be
    checked, as scikit-learn warns when an array meets a model fitted on a data frame.
    """
    named = [i for i, n in enumerate(names) if n is not None]
    if not named:
        return None
    ref = named[0]
    first = np.asarray(names[ref], dtype=object)
    for i in named[1:]:
        other = np.asarray(names[i], dtype=object)
        if other.shape == first.shape and np.array_equal(other, first):
            continue
        if other.shape != first.shape:
            raise ValueError(
                f"{what}: {who[i]} has {other.size} named features but {who[ref]} has {first.size}."
            )
        j = int(np.flatnonzero(other != first)[0])
        order = " (the same names in another order)" if sorted(other) == sorted(first) else ""
        raise ValueError(
            f"{what}: {who[i]} has feature {j} named {other[j]!r} where {who[ref]} has {first[j]!r}"
            f"{order}; every party must pass the same columns in the same order (reorder a data "
            f"frame with X[{first.tolist()[:4]}{'...' if first.size > 4 else ''}])."
        )
    unnamed = [who[i] for i in range(len(names)) if names[i] is None]
    if unnamed and warn:
        warnings.warn(
            f"{what}: {', '.join(unnamed)} {'was' if len(unnamed) == 1 else 'were'} fitted without "
            f"feature names and {who[ref]} with them; the merged model takes the names of "
            f"{who[ref]}, and the columns of the others cannot be checked against them.",
            UserWarning,
            stacklevel=3,
        )
    return first


def _check_widths(widths, who):
    """ValueError naming the first party whose number of features differs from the first's."""
    for width, name in zip(widths, who, strict=True):
        if width != widths[0]:
            raise ValueError(
                f"fit_federated: {name} has {width} features but {who[0]} has {widths[0]}; every "
                "party must hold the same features, in the same order."
            )


def _check_local_shards(shards):
    """The widths and column names of the ``(X, y)`` pairs held by the client, compared
    before any work (the others are compared when their ranges or counts come back)."""
    from .._sklearn_compat import get_feature_names

    widths, names, who = [], [], []
    for i, s in enumerate(shards):
        if not (isinstance(s, (tuple, list)) and len(s) == 2) or is_dask_collection(s[0]):
            continue  # futures; anything else is refused with its own message later
        try:
            shape = getattr(s[0], "shape", None) or np.shape(s[0])
        except ValueError:  # ragged rows: the party's fit says what is wrong
            continue
        if len(shape) != 2:
            continue
        widths.append(int(shape[1]))
        names.append(get_feature_names(s[0]))
        who.append(f"shard {i}")
    _check_widths(widths, who)
    _agreed_feature_names(names, who, "fit_federated", warn=False)


def _set_merged_calibration(clf, calibrations):
    """The merged model's ``predict_proba`` calibration: the sum of the parties' held-out
    loss tables (each cross-fitted on its own data; tables are sums over rows), or none (the
    default scale) when a party has none (a private release)."""
    if not calibrations or any(c is None or c[0] is None or c[1] is None for c in calibrations):
        clf._set_calibration(None)
        return
    table = np.sum([np.asarray(c[0], dtype=np.float64) for c in calibrations], axis=0)
    hits = (sum(float(c[1][0]) for c in calibrations), sum(float(c[1][1]) for c in calibrations))
    clf._set_calibration(table, hits)


def _calibration_of(clf):
    return getattr(clf, "calibration_loss_", None), getattr(clf, "held_out_hits_", None)


def _combine(template, parts, names, input_range=(None, None), agreed=None, knots=None, winners=None):
    """A fitted classifier with the summed counts of ``parts`` [(classes, counts, n_features), ...].

    ``template`` is an unfitted FlyNNClassifier whose parameters the result takes;
    ``n_features`` is read from the first part; ``names`` name the parts in errors;
    ``input_range`` is the (low, high) the parties' encoding tiled (under
    ``input_range='fit'``); ``winners`` the parties' ``k_`` (``k='auto'``).
    """
    _check_label_types(parts, names)
    classes = np.unique(np.concatenate([np.asarray(c) for c, _, _ in parts]))
    n_features = parts[0][2]
    clf = template
    clf.classes_ = classes
    clf.n_features_in_ = n_features
    if agreed is not None:  # input_range='quantile': the parties' agreed histogram
        clf._set_input_range(agreed[0], agreed[1], histogram=agreed[2])
    elif knots is not None:  # input_range='quantile': the merged parties' common quantiles
        clf._set_input_range(knots[0], knots[1], knots=knots[2])
    else:
        clf._set_input_range(*input_range)
    clf._init_model(n_features, caller="merge", winners=winners)
    # float counts: a private release's, or a weighted fit's (exact: their sums too)
    floats = any(np.asarray(cnt).dtype.kind == "f" for _, cnt, _ in parts)
    total = np.zeros((len(classes), clf.n_components_), dtype=np.float64 if floats else np.int64)
    for name, (cls, cnt, _) in zip(names, parts, strict=True):
        cnt = np.asarray(cnt)
        if cnt.shape[1] != clf.n_components_:
            raise ValueError(
                f"Cannot merge FlyNN models: {name} has {cnt.shape[1]} Kenyon cells, expected "
                f"{clf.n_components_}."
            )
        rows = np.searchsorted(classes, np.asarray(cls))
        total[rows] += cnt
    if all(on_grid(cnt) for _, cnt, _ in parts):  # exact (weighted) counts: their sum must be exact
        check_exact(total, "Cannot merge FlyNN models")
    clf._set_counts(to_device(total, clf.device_))
    return clf


def merge_flynn(models: Sequence[FlyNNClassifier], device: str | None = None) -> FlyNNClassifier:
    """Merge FlyNN party models in one shot: the counts add up.

    Parameters
    ----------
    models : sequence of fitted FlyNNClassifier
        The parties' models. They must share the projection: the same hashing
        parameters, ``encoding``, ``input_range``, ``normalize``, the same integer
        ``random_state`` and the same number of features (a clear ValueError
        otherwise). Under an encoding they must also tile the same input range: with
        ``input_range='fit'`` each party fits its own, so give parties a fixed
        ``input_range=(low, high)`` (or fit them with :func:`fit_federated`). Their class sets may
        differ; the merged model knows the union.
    device : {'auto', 'cpu', 'cuda'} or None, default=None
        Device of the merged model; ``None`` keeps the first model's ``device``.

    Returns
    -------
    merged : FlyNNClassifier
        A fitted classifier whose ``counts_`` are the sum of the parties' counts:
        bit-identical to fitting on the pooled data (with ``sample_weight`` too: the
        weighted counts are sums of multiples of ``2**-20``, exact in any order).
        ``gamma``, ``decay``, ``class_weight`` and ``batch_size`` come from the first
        model. Merging privatised models (see
        :meth:`FlyNNClassifier.privatize`) sums their released float counts; when
        every model is private, the merge has ``dp_epsilon_`` (the largest of the
        parties': each sample is in one party's release) and ``dp_accounting_``.
        Models read with :meth:`FlyNNClassifier.from_counts` merge like any other.

    Raises
    ------
    ValueError
        When the parties do not share the projection (saying what differs).
    TypeError
        When a model is not a FlyNNClassifier, or parties label their classes with
        different types (numbers and strings).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.datasets import load_digits
    >>> from sknn_gpu.fly import FlyNNClassifier, merge_flynn
    >>> X, y = load_digits(return_X_y=True)
    >>> parts = np.array_split(np.arange(len(y)), 3)
    >>> params = dict(input_range=(0, 16), random_state=0, device="cpu")  # pixels 0..16
    >>> models = [FlyNNClassifier(**params).fit(X[p], y[p]) for p in parts]
    >>> pooled = FlyNNClassifier(**params).fit(X, y)
    >>> bool(np.array_equal(merge_flynn(models).counts_, pooled.counts_))
    True
    """
    models = list(models)
    if not models:
        raise ValueError("merge_flynn needs at least one fitted FlyNNClassifier.")
    for i, m in enumerate(models):
        if not isinstance(m, FlyNNClassifier):
            raise TypeError(f"models[{i}] is a {type(m).__name__}, not a FlyNNClassifier.")
        check_is_fitted(m)
        check_fitted_params(m, who=f"Cannot merge FlyNN models: models[{i}]")
    ref = models[0]
    ref_params = ref.get_params()
    ref_components = to_host(ref.hasher_.components_)
    for i, m in enumerate(models[1:], start=1):
        _check_compatible(ref_params, ref.n_features_in_, m.get_params(), m.n_features_in_, f"models[{i}]")
        comp = to_host(m.hasher_.components_)
        if not _arrays_equal(comp, ref_components):
            raise ValueError(
                f"Cannot merge FlyNN models: models[{i}] has a different projection matrix although its "
                "parameters match; parties must share the projection."
            )
        if m.k_ != ref.k_:  # k='auto' resolved from each party's own rows
            raise ValueError(
                f"Cannot merge FlyNN models: models[{i}] keeps {m.k_} winners per code (k_), the first "
                f"{ref.k_}; k={ref.k!r} was resolved from each party's own training rows. Fit the "
                "parties with the same integer k, or with fit_federated, which resolves k='auto' from "
                "the rows of all parties together."
            )
        if hasattr(ref, "input_low_") and not (
            _arrays_equal(m.input_low_, ref.input_low_)
            and _arrays_equal(m.input_high_, ref.input_high_)
            and _arrays_equal(getattr(m, "input_quantiles_", None), getattr(ref, "input_quantiles_", None))
        ):
            raise ValueError(
                f"Cannot merge FlyNN models: models[{i}] encodes its features over a different input range "
                "or quantiles (input_range='fit' and 'quantile' take each party's own). Fit the parties "
                "with the same fixed input_range=(low, high), or with fit_federated, which agrees on one."
            )
    names = _agreed_feature_names(
        [getattr(m, "feature_names_in_", None) for m in models],
        [f"models[{i}]" for i in range(len(models))],
        "Cannot merge FlyNN models",
    )
    params = dict(ref_params)
    if device is not None:
        params["device"] = device
    parts = [(m.classes_, to_host(m.counts_), m.n_features_in_) for m in models]
    ranges = (ref.input_low_, ref.input_high_) if hasattr(ref, "input_low_") else (None, None)
    agreed = None
    if getattr(ref, "input_quantiles_", None) is not None:  # the parties' common quantiles
        agreed = (ref.input_low_, ref.input_high_, ref.input_quantiles_)
    merged = _combine(
        FlyNNClassifier(**params),
        parts,
        [f"models[{i}]" for i in range(len(models))],
        ranges,
        knots=agreed,
        winners=ref.k_,
    )
    _set_merged_calibration(merged, [_calibration_of(m) for m in models])
    if names is not None:
        merged.feature_names_in_ = names
    if all(hasattr(m, "dp_accounting_") for m in models):
        _set_merged_accounting(merged, [m.dp_accounting_ for m in models])
    return merged


def _set_merged_accounting(merged, accountings):
    """``dp_epsilon_`` and ``dp_accounting_`` of a merge of private releases (each party's data
    are in one release only, so the merge is as private as its least private party)."""
    merged.dp_accounting_ = merged_accounting(accountings)
    merged.dp_epsilon_ = merged.dp_accounting_["epsilon"]


def _arrays_equal(a, b):
    import scipy.sparse as sp

    if sp.issparse(a) or sp.issparse(b):
        if not (sp.issparse(a) and sp.issparse(b)) or a.shape != b.shape:
            return False
        return (a != b).nnz == 0
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and bool(np.array_equal(a, b))


# --------------------------------------------------------------------------- #
# Dask                                                                         #
# --------------------------------------------------------------------------- #


def _n_rows(a):
    shape = getattr(a, "shape", None)
    return int(shape[0]) if shape else len(a)


def _empty_shard(index):
    return ValueError(
        f"fit_federated: shard {index} is empty (0 samples); every party needs at least one "
        "sample (drop the empty shard or rebalance the data)."
    )


def _fit_party(X, y, params, index, dp=None, agreed=None):
    """Runs on a worker: fit one party and return only what travels (counts).

    With ``dp`` (``{'epsilon': ..., 'n_released': ...}``) the counts are privatised here,
    on the worker, and only the release travels: the noisy counts, the class labels,
    the number of features and the accounting (not the number of samples).
    Errors name the shard (``index``), so that the client knows which party failed.
    ``agreed`` (``input_range='quantile'``): the parties' agreed ``(low, high, histogram)``.
    """
    if _n_rows(X) == 0 or _n_rows(y) == 0:
        raise _empty_shard(index)
    try:
        clf = FlyNNClassifier(**params)
        if agreed is not None:
            clf._agreed_input = agreed  # read (and dropped) by fit's _set_input_range
        clf = clf.fit(X, y)
        if dp is not None:
            clf = clf.privatize(dp["epsilon"], dp["n_released"])
    except (ValueError, TypeError) as exc:
        message = f"fit_federated: shard {index}: {exc}"
        try:
            named = type(exc)(message)
        except Exception:  # an exception type whose constructor wants more than a message
            named = (TypeError if isinstance(exc, TypeError) else ValueError)(message)
        raise named from exc
    return {
        "classes": clf.classes_,
        "counts": to_host(clf.counts_),
        "n_features": int(clf.n_features_in_),
        "feature_names": getattr(clf, "feature_names_in_", None),
        "n_samples": None if dp is not None else int(np.asarray(to_host(y)).shape[0]),
        "dp_accounting": getattr(clf, "dp_accounting_", None),
        "calibration": _calibration_of(clf),
    }


def _fit_party_pair(pair, params, index, dp=None, agreed=None):
    X, y = pair
    return _fit_party(X, y, params, index, dp, agreed)


def _check_private_federation(full, epsilon, n_released):
    """The ``dp`` settings of the parties (None without ``epsilon``), checked before any work."""
    if epsilon is None:
        if n_released is not None:
            raise ValueError("fit_federated: n_released is only used with epsilon; pass both or neither.")
        return None
    if n_released is None:
        raise ValueError("fit_federated: epsilon needs n_released, the counts each party releases per class.")
    check_budget(epsilon, n_released)
    if isinstance(full["k"], str):
        raise ValueError(
            "fit_federated with epsilon needs an integer k: k='auto' chooses the winners per code "
            "from the parties' numbers of rows, which every party would send to the coordinator "
            "and the release would reveal, unprotected by any noise. Pass k=128 or k=512 (what "
            "'auto' picks for large or small training sets; see the FlyNN guide)."
        )
    if full["encoding"] is not None and isinstance(full["input_range"], str):
        raise ValueError(
            f"fit_federated with epsilon needs a public input_range (encoding={full['encoding']!r}): "
            "with input_range='fit' every party would send its features' exact minima and maxima to "
            "the coordinator, which no noise protects, and a range fitted from the data breaks the "
            "counts' sensitivity. Pass input_range=(low, high) agreed beforehand from public "
            "knowledge of the data (not computed from it), or encoding=None."
        )
    return {"epsilon": epsilon, "n_released": int(n_released)}


def fit_federated(
    client: Any, shards: Any, *, epsilon: float | None = None, n_released: int | None = None, **params: Any
) -> FlyNNClassifier:
    """Fit one FlyNN party per Dask worker, where its shard lives, and merge the counts.

    Only the count tables (n_classes × n_components integers per party) travel
    back to the client; the data stay on the workers. The result is bit-identical
    to fitting one FlyNNClassifier on the concatenation of the shards.

    Parameters
    ----------
    client : distributed.Client
        A connected Dask client.
    shards : list of Future, list of (X, y) pairs, or a pair of dask arrays
        * futures already on the cluster, each resolving to an ``(X, y)`` pair
          (the party task is scheduled where the future's data live);
        * ``(X, y)`` pairs of local arrays: each pair is scattered to a worker
          first (one party each);
        * ``(X, y)`` dask arrays: each row block of ``X`` (with the matching
          block of ``y``) is one party.
    epsilon : float > 0 or None, default=None
        Privatise every party's counts on its own worker before they leave it
        (:meth:`FlyNNClassifier.privatize` with this ``epsilon`` and ``n_released``):
        then only the noisy counts, the class labels and the number of features
        travel, and the merged model is ``epsilon``-DP for every sample (each is in
        one party's release; merging is post-processing). Needs a public
        ``input_range=(low, high)`` under an encoding (``'fit'`` is refused: the
        parties' exact minima and maxima would travel), an integer ``k`` (``'auto'``
        would choose it from the parties' numbers of rows) and ``n_released``. This
        protects the parties' data from whoever receives the merged model, not from
        the operator of the Dask cluster, who can run any code on every worker (see
        the user guide's trust model).
    n_released : int or None, default=None
        Counts each party releases per class (with ``epsilon`` only).
    **params
        FlyNNClassifier parameters, shared by every party. ``random_state`` must
        be an integer (parties must draw the same projection). ``verbose`` reports
        on the client: at 1 one line when all parties are merged, at 2 also a line
        per party as it finishes (its shard and samples); the parties' own fits stay
        silent. Under an ``encoding`` with ``input_range='fit'`` (the defaults),
        each shard first sends its features' minima and maxima (2 x n_features
        numbers) and every party tiles the range of the pooled data, as one fit on
        the pooled data would; pass a fixed ``input_range`` and an integer ``k`` to
        send nothing but counts. With ``k='auto'`` (the default) each shard first sends
        its numbers of rows and features, and every party keeps the winners per code
        that one fit on the pooled rows would.

    Returns
    -------
    clf : FlyNNClassifier
        The merged, fitted classifier (on ``params['device']``, default 'auto');
        with ``epsilon``, a private one with ``dp_epsilon_`` and ``dp_accounting_``.

    Raises
    ------
    ValueError
        Without an integer ``random_state``, for an empty shard (``shard i is
        empty``), or when a party's fit fails (its message is prefixed with
        ``fit_federated: shard i:``; a TypeError likewise); with ``epsilon``,
        without ``n_released``, for a budget out of range, for ``k='auto'`` or for
        ``input_range='fit'`` under an encoding.
    TypeError
        When parties label their classes with different types.

    Examples
    --------
    >>> from distributed import Client, LocalCluster  # doctest: +SKIP
    >>> from sklearn.datasets import load_digits  # doctest: +SKIP
    >>> from sknn_gpu.fly import fit_federated  # doctest: +SKIP
    >>> X, y = load_digits(return_X_y=True)  # doctest: +SKIP
    >>> with LocalCluster(n_workers=2, processes=False) as cluster, Client(cluster) as client:
    ...     clf = fit_federated(client, [(X[:900], y[:900]), (X[900:], y[900:])], random_state=0)
    ... # doctest: +SKIP
    """
    template = FlyNNClassifier(**params)
    validate_params(template)
    full = template.get_params()
    if not isinstance(full["random_state"], (int, np.integer)):
        raise ValueError(
            "fit_federated needs an integer random_state shared by every party, got "
            f"{full['random_state']!r}."
        )
    dp = _check_private_federation(full, epsilon, n_released)
    ranges = (None, None)
    party = {**full, "verbose": 0}  # the client reports, parties stay quiet
    if not _dask_pair(shards):
        shards = list(shards)  # read twice below (an iterator would be spent)
        _check_local_shards(shards)
    agreed = None
    if full["encoding"] is not None and isinstance(full["input_range"], str):
        ranges = _agreed_range(client, shards, party)  # every party tiles the same range
        if full["input_range"] == "quantile":  # and reads it at the pooled data's quantiles
            agreed = (*ranges, _agreed_histogram(client, shards, party, ranges))
        else:
            party["input_range"] = ranges
    winners = None
    if isinstance(full["k"], str):  # k='auto': resolved from the rows of every party together
        rows, n_features = _agreed_rows(client, shards)
        winners = party["k"] = template._hasher_params(template._width(n_features), rows)["k"]
    futures = _submit(client, shards, party, dp, agreed)
    if not futures:
        raise ValueError("fit_federated needs at least one shard.")
    bar = Progress(FlyNNClassifier, "fit_federated", len(futures), full["verbose"], unit="parties")
    if full["verbose"]:  # report the parties as they finish (their counts come back anyway)
        from distributed import as_completed

        shard_of = {f.key: i for i, f in enumerate(futures)}
        for fut in as_completed(futures):
            done = fut.result()
            info = {} if done["n_samples"] is None else {"samples": done["n_samples"]}
            bar.update(shard=shard_of[fut.key], **info)
    results = client.gather(futures)
    who = [f"shard {i}" for i in range(len(results))]
    _check_widths([r["n_features"] for r in results], who)
    names = _agreed_feature_names([r.get("feature_names") for r in results], who, "fit_federated")
    parts = [(r["classes"], r["counts"], r["n_features"]) for r in results]
    who = [f"shard {i}" for i in range(len(parts))]
    clf = _combine(FlyNNClassifier(**full), parts, who, ranges, agreed, winners=winners)
    _set_merged_calibration(clf, [r.get("calibration") for r in results])
    if names is not None:
        clf.feature_names_in_ = names
    if dp is not None:
        _set_merged_accounting(clf, [r["dp_accounting"] for r in results])
        bar.close(classes=len(clf.classes_))
    else:
        bar.close(samples=sum(r["n_samples"] for r in results), classes=len(clf.classes_))
    return clf


def _dask_pair(shards):
    """Whether ``shards`` is an ``(X, y)`` pair of Dask arrays (each row block one party)."""
    return isinstance(shards, tuple) and len(shards) == 2 and is_dask_collection(shards[0])


def _check_row_blocks(X):
    """Refuse a Dask ``X`` with an empty row block (an empty party), naming it."""
    for i, rows in enumerate(X.chunks[0]):
        if rows == 0:
            raise _empty_shard(i)


def _shard_range(pair, index, params):
    """Runs on a worker (or the client, for a local pair): the (min, max) per feature of one
    shard's X, checked as a party's fit checks it (errors name the shard)."""
    if _n_rows(pair[0]) == 0:
        raise _empty_shard(index)
    try:
        return column_range(FlyNNClassifier(**params)._validate_X(pair[0], reset=True))
    except (ValueError, TypeError) as exc:
        raise type(exc)(f"fit_federated: shard {index}: {exc}") from exc


def _shard_histogram(pair, index, params, low, high):
    """Runs on a worker: one shard's per-feature counts over the quantile bins of the agreed
    range (integers: the parties' histograms add up to the pooled data's exactly)."""
    try:
        shell = FlyNNClassifier(**params)
        Xv = shell._validate_X(pair[0], reset=True)
        shell.input_low_, shell.input_high_ = low, high
        return _flynn_batches.histogram(shell, Xv)
    except (ValueError, TypeError) as exc:
        raise type(exc)(f"fit_federated: shard {index}: {exc}") from exc


def _agreed_histogram(client, shards, params, ranges):
    """``input_range='quantile'``: the summed histograms of every shard's X over the agreed
    range (n_features x bins counts travel per party; the pooled data's, exactly)."""
    low, high = ranges
    if _dask_pair(shards):
        template = FlyNNClassifier(**params)
        template.n_features_in_ = int(shards[0].shape[1])
        template.input_low_, template.input_high_ = low, high
        return _fly_dask.column_histogram(template, shards[0].rechunk({1: -1}))
    return sum(_per_shard(client, shards, _shard_histogram, params, low, high))


def _per_shard(client, shards, fn, *args):
    """``[fn(shard, i, *args), ...]`` over the shards: on the worker that holds a Future's
    data (only the result travels), on the client for a local ``(X, y)`` pair.

    Raises
    ------
    TypeError
        For a shard that is neither.
    ValueError
        For no shard at all.
    """
    from distributed import Future

    out = []
    for i, s in enumerate(shards):
        if isinstance(s, Future):  # computed where the shard lives; gathered below
            out.append(client.submit(fn, s, i, *args, pure=False))
        elif isinstance(s, (tuple, list)) and len(s) == 2:
            out.append(fn(s, i, *args))
        else:
            raise TypeError(f"shards[{i}] must be a Future or an (X, y) pair, got {type(s).__name__}.")
    if not out:
        raise ValueError("fit_federated needs at least one shard.")
    return [r.result() if isinstance(r, Future) else r for r in out]


def _shard_shape(pair, index):
    """Runs on a worker (or the client, for a local pair): ``(rows, features)`` of one shard's X."""
    X = pair[0]
    shape = getattr(X, "shape", None) or np.shape(X)
    if len(shape) != 2:
        raise ValueError(f"fit_federated: shard {index}: X must be 2-D, got shape {tuple(shape)}.")
    if int(shape[0]) == 0:
        raise _empty_shard(index)
    return int(shape[0]), int(shape[1])


def _agreed_rows(client, shards):
    """``(rows, features)`` of the pooled shards, for ``k='auto'``: the parties resolve it as
    one fit on the pooled data would (two numbers travel per party)."""
    if _dask_pair(shards):
        _check_row_blocks(shards[0])
        return int(shards[0].shape[0]), int(shards[0].shape[1])
    shapes = _per_shard(client, shards, _shard_shape)
    _check_widths([d for _, d in shapes], [f"shard {i}" for i in range(len(shapes))])
    return sum(n for n, _ in shapes), shapes[0][1]


def _agreed_range(client, shards, params):
    """The per-feature (min, max) over every shard's X: ``input_range='fit'`` of the pooled
    data, which the parties then share (2 x n_features numbers travel per party)."""
    if _dask_pair(shards):
        X = shards[0]
        _check_row_blocks(X)
        template = FlyNNClassifier(**params)
        template.n_features_in_ = int(X.shape[1])
        return _fly_dask.column_range(template, X.rechunk({1: -1}))
    ranges = _per_shard(client, shards, _shard_range, params)
    _check_widths([len(low) for low, _ in ranges], [f"shard {i}" for i in range(len(ranges))])
    return wider_range(*ranges)


def _submit(client, shards, params, dp=None, agreed=None):
    from distributed import Future

    if _dask_pair(shards):
        import dask

        X, y = shards
        if not is_dask_collection(y):
            import dask.array as da

            y = da.from_array(np.asarray(y), chunks=(X.chunks[0],))
        X = X.rechunk({1: -1})
        y = y.rechunk((X.chunks[0],))
        _check_row_blocks(X)
        xb, yb = X.to_delayed().ravel(), y.to_delayed().ravel()
        tasks = [
            dask.delayed(_fit_party)(a, b, params, i, dp, agreed)
            for i, (a, b) in enumerate(zip(xb, yb, strict=True))
        ]
        return client.compute(tasks)
    shards = list(shards)
    futures = []
    local = [(i, s) for i, s in enumerate(shards) if not isinstance(s, Future)]
    if local:
        for i, s in local:
            if not (isinstance(s, (tuple, list)) and len(s) == 2):
                raise TypeError(f"shards[{i}] must be a Future or an (X, y) pair, got {type(s).__name__}.")
            if _n_rows(s[0]) == 0 or _n_rows(s[1]) == 0:
                raise _empty_shard(i)
        scattered = client.scatter([tuple(s) for _, s in local])
        mapping = {i: f for (i, _), f in zip(local, scattered, strict=True)}
    else:
        mapping = {}
    for i, s in enumerate(shards):
        fut = s if isinstance(s, Future) else mapping[i]
        futures.append(client.submit(_fit_party_pair, fut, params, i, dp, agreed, pure=False))
    return futures
