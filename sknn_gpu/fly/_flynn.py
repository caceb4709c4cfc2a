"""FlyNNClassifier: nearest-neighbour-like classification with Fly Bloom filters.

Every training sample is hashed with FlyHash (a sparse binary random expansion
followed by a winner-take-all that keeps ``k`` of ``m`` Kenyon cells). For each
class ``l`` we keep the integer counts ``z_l[i]`` of how many class-``l`` codes
have cell ``i`` among their winners; the Fly Bloom filter of the class is
``w_l = gamma ** z_l`` (the papers' filter, ``decay='count'``) or, by default,
``gamma ** (z_l / mean(z_l))``, which does not saturate as the training set grows
(``decay='relative'``). A test point ``x`` with code ``h(x)`` gets the novelty
``s_l(x) = h(x) . w_l`` per class and the least novel class wins (Sinha & Ram,
KDD 2021; Ram & Sinha, AAAI 2022).

Because the model is a table of integer counts, training is a sum: the counts of
several parties that share the projection add up to the counts of the pooled data
(:func:`sknn_gpu.fly.merge_flynn`), and CPU and GPU give bit-identical counts. Sample
weights keep that: they are rounded to a fixed-point grid, so the weighted counts are
exact sums too (:mod:`._weights`).

Size: this module stays whole (about 1,000 lines): it is the one estimator class,
whose public methods and their docstrings are most of it; what they call lives in
modules of its own (the engines, ``_flynn_batches``, ``_flynn_size``, the weights in
``_weights``, the private release in ``_privacy`` and the exchange format in
``_counts_io``).
"""

from __future__ import annotations

import os
from numbers import Integral, Real
from typing import IO

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from .._backend import array_module, is_cupy_sparse, is_device_array, take_rows, to_device, to_host
from .._dask import dask_rows, is_dask_collection
from .._progress import Progress
from .._sklearn_compat import Interval, StrOptions, _fit_context, check_partial_fit_first_call
from .._typing import Array, ArrayLike
from ..base import DeviceClassifierMixin, DeviceMixin, keeps_model, reject_time_dtypes, validates_params
from . import _counts_io, _fly_dask, _flynn_batches, _weights
from ._calibration import calibration_rows, check_class_information, cross_fit, held_out, scale_of
from ._common import (
    HASH_PARAMS,
    check_fitted_params,
    encode_labels,
    fitted_method,
    fitted_params,
    host_labels,
    refuse_bools,
)
from ._encoding import encoding_width, input_range, n_receptors, quantile_knots
from ._flyhash import FlyHashTransformer
from ._flynn_engine import engine
from ._flynn_size import check_size
from ._privacy import private_copy

__all__ = ["FlyNNClassifier", "PAPERS_FLYNN"]

#: The FlyNN of the papers (Sinha & Ram) at the smallest scale they used: the raw features
#: (rows centred and scaled), 256 cells per feature (their settings ran from 256 to 1,024 per
#: feature) reading 10 % of them, k=32 and the filters ``gamma ** counts`` with
#: ``gamma=0.5``. ``FlyNNClassifier(**PAPERS_FLYNN)`` builds it (784 features: 200,704 cells).
PAPERS_FLYNN = dict(
    n_components=None,
    expansion_factor=256.0,
    connection_sparsity=0.1,
    k=32,
    gamma=0.5,
    encoding=None,
    decay="count",
)

#: Default ``n_connections``: ``connection_sparsity`` of the inputs the hash reads, at
#: least 2 and at most this many (more cost time and did not help in the defaults
#: sweep, ``benchmarks/tools/sweep_flynn_defaults.py --defaults``).
MAX_DEFAULT_CONNECTIONS = 16

#: The parameters a fitted model depends on (its projection, the encoding's range, the
#: filters): changing one after ``fit`` is refused until the next ``fit``. The others
#: (``precision``, ``batch_size``, ``verbose``, ``output_type``) are read at every call.
MODEL_PARAMS = (
    *HASH_PARAMS,
    "random_state",
    "encoding",
    "n_receptors",
    "input_range",
    "normalize",
    "gamma",
    "decay",
    "class_weight",
)


def _per_class(est, X=None):
    return (len(est.classes_),), np.float64


def _decision_columns(est, X=None):
    return (() if len(est.classes_) == 2 else (len(est.classes_),)), np.float64


def _labels(est, X=None):
    return (), est.classes_.dtype


def _hash_constraints():
    src = getattr(FlyHashTransformer, "_parameter_constraints", {})
    out = {name: src.get(name, "no_validation") for name in (*HASH_PARAMS, "precision")}
    out["n_components"] = [*out["n_components"], StrOptions({"auto"})]
    out["k"] = [*out["k"], StrOptions({"auto"})]
    return out


#: ``n_components='auto'``: cells for an input of at most :data:`AUTO_WIDE_INPUTS` encoded
#: values, and for a wider one (where each cell's sum and the winners' selection cost most of
#: a prediction). Chosen on the development suite (``benchmarks/tools/sweep_flynn_devsuite.py``):
#: with ``k='auto'``, 65,536 cells moved it from 0.4-0.5 points under the best k-NN to 0.0-0.2
#: over it under three hash seeds.
AUTO_CELLS = 65536
AUTO_CELLS_WIDE = 16384
AUTO_WIDE_INPUTS = 1024

#: ``k='auto'``: winners per code for an input of at most :data:`AUTO_WIDE_INPUTS` encoded
#: values, with at least :data:`AUTO_ROWS_PER_INPUT` training rows per encoded value (enough
#: data for small neighbourhoods) or fewer, and for a wider input.
AUTO_WINNERS_MANY_ROWS = 128
AUTO_WINNERS_FEW_ROWS = 512
AUTO_WINNERS_WIDE = 256
AUTO_ROWS_PER_INPUT = 32


def auto_cells(width):
    """The cells of ``n_components='auto'`` for ``width`` encoded inputs per row."""
    return AUTO_CELLS if int(width) <= AUTO_WIDE_INPUTS else AUTO_CELLS_WIDE


def auto_winners(width, n_train):
    """The winners of ``k='auto'`` for ``width`` encoded inputs per row and ``n_train``
    training rows."""
    if int(width) > AUTO_WIDE_INPUTS:
        return AUTO_WINNERS_WIDE
    if int(n_train) >= AUTO_ROWS_PER_INPUT * int(width):
        return AUTO_WINNERS_MANY_ROWS
    return AUTO_WINNERS_FEW_ROWS


def check_public_winners(est):
    """Refuse to privatize a model whose winners per code were chosen from the training data.

    ``k='auto'`` keeps 128 or 512 winners on an input of at most :data:`AUTO_WIDE_INPUTS`
    encoded values by whether the training set holds at least 32 rows per encoded value:
    ``k_``, released with the model, then tells which side of that line the data's size fell
    on, and one sample added at the line changes the hash of every row. A wider input's
    ``'auto'`` (256) and an integer or fractional ``k`` depend on nothing but the parameters.
    """
    if isinstance(getattr(est, "k", None), str) and int(est.hasher_.n_features_in_) <= AUTO_WIDE_INPUTS:
        raise ValueError(
            f"privatize needs winners per code chosen without the data, but this model has "
            f"k={est.k!r}: k_={est.k_} was chosen by its number of training rows (at least 32 per "
            "encoded input, or fewer), which the release would reveal, and one sample at that line "
            "changes every row's hash. Refit with an integer k (128 or 512, as 'auto' would pick "
            "for large or small training sets; see the FlyNN guide)."
        )


class FlyNNClassifier(DeviceMixin, DeviceClassifierMixin, BaseEstimator):
    """Fly Bloom filter classifier (FlyNN) on FlyHash codes, on the CPU or a GPU.

    Each class keeps integer counts of how often every Kenyon cell wins in the
    FlyHash codes of its training samples; the class filter decays with them
    (``gamma ** counts``, or with the counts relative to the class's mean count) and
    a sample is assigned to the class whose filter it finds least novel. It
    approximates a nearest-neighbour classifier at the cost of one hash and
    ``k * n_classes`` look-ups per test point, and it is trained in one pass that
    sums counts, so it streams (:meth:`partial_fit`) and federates exactly
    (:func:`~sknn_gpu.fly.merge_flynn`, :func:`~sknn_gpu.fly.fit_federated`).

    Read more in the :doc:`User Guide </user_guide/flynn>`.

    Parameters
    ----------
    n_components : int, 'auto' or None, default='auto'
        Number of Kenyon cells ``m`` (hash length); forwarded to
        :class:`~sknn_gpu.fly.FlyHashTransformer`. ``'auto'``: 65,536 cells when the hash
        reads at most 1,024 values per row, 16,384 for a wider input (the prediction's
        cost grows with the cells; the user guide shows the trade). ``None``:
        ``int(expansion_factor * inputs)``, where ``inputs`` is the number of values
        the hash reads per row (``n_features`` times the receptors per feature of
        ``encoding``: ``n_receptors``, 5, 2 or 1).
    expansion_factor : float, default=20.0
        Cells per input when ``n_components`` is None.
    n_connections : int, default=None
        Inputs summed by each cell. ``None``: ``int(connection_sparsity * inputs)``,
        at least 2 and at most 16 (:data:`MAX_DEFAULT_CONNECTIONS`).
    connection_sparsity : float, default=0.2
        Fraction of the inputs each cell reads when ``n_connections`` is None.
    k : int, float or 'auto', default='auto'
        Winners per code: an int is a count, a float in (0, 1) a fraction of ``m``.
        ``'auto'``: for a hash that reads at most 1,024 values per row, 128 winners when
        ``fit`` sees at least 32 training rows per value read (``n_samples >= 32 *
        n_features * receptors``: enough data for small neighbourhoods), else 512; 256
        for a wider input. Resolved once, into ``k_``, from the rows of ``fit`` (of
        nonzero weight), of the first :meth:`partial_fit` batch, or of every party
        together in :func:`~sknn_gpu.fly.fit_federated`; :func:`~sknn_gpu.fly.merge_flynn`
        refuses models that resolved it differently. The counts suit
        ``n_components='auto'``: with a small explicit ``n_components``, give ``k`` too.
    precision : {'exact', 'integer', 'fast'}, default='exact'
        Arithmetic of the hash in ``fit`` and prediction (see
        :class:`~sknn_gpu.fly.FlyHashTransformer`): ``'exact'`` is bit-identical on
        CPU and GPU; ``'fast'`` hashes on tensor cores in float16 on a GPU (the
        exact hash on the CPU), close to but not always the exact winners;
        ``'integer'`` needs ``encoding=None``, ``normalize=False`` and integer-valued input (raw
        pixels), which a GPU then hashes exactly on tensor cores (``'exact'`` does
        that too when the input happens to be integer-valued). Read at every call,
        so it can be changed after ``fit`` (parties of a federation may differ).
    encoding : {'population', 'thermometer', 'complement'} or None, default='population'
        What the hash reads of each feature, scaled to its range (``input_range``).
        FlyHash's winners ignore a row's offset and scale (every cell sums the same
        number of inputs), which costs accuracy where those carry the class (the
        user guide measures it). An encoding gives each feature a fixed reference,
        so the hash sees them: ``'population'`` (the default) ``n_receptors``
        receptors per feature with triangular tuning curves evenly spread over the
        range, each as wide as four spacings between centres, so a value excites the
        receptors near it (a population code: nearby values share receptors, far ones
        none); ``'thermometer'`` five saturating ramps with thresholds at 0.1, 0.3,
        ..., 0.9 of the range, each rising over 0.4 of it, so a feature at the bottom
        of its range is silent and one at the top drives them all; ``'complement'``
        reads ``u`` and ``1 - u``; ``None`` the raw features (the FlyHash of the
        papers). Sparse input is made dense a batch at a time under an encoding.
    n_receptors : int in [2, 256] or 'auto', default='auto'
        Receptors per feature of ``encoding='population'`` (ignored otherwise).
        ``'auto'``: ``ceil(64 / n_features)``, at least 5 and at most 64, so that a
        table of few features is read finely enough to tell nearby values apart (2
        features: 32 receptors each; 13 or more: 5 each).
    input_range : 'quantile', 'fit' or (low, high), default='quantile'
        How each feature is placed in [0, 1] before an ``encoding``'s receptors read it
        (ignored without one). ``'quantile'``: at its quantile among the values ``fit``
        (or the first ``partial_fit``) sees, so a heavy-tailed feature is read across
        its mass; the quantiles (257 per feature, kept in ``input_quantiles_``) come from
        integer counts over 4,096 equal bins of each feature's range (``input_low_``,
        ``input_high_``), which add up exactly over Dask blocks and federated parties
        (:func:`~sknn_gpu.fly.fit_federated` agrees on them). ``'fit'``: linearly
        between each feature's minimum and maximum, as ``MinMaxScaler(clip=True)``
        would. Under both, values beyond the fitted range read as its ends and a
        constant feature reads 0. ``(low, high)``, scalars or arrays of one value per
        feature with ``low <= high`` (a feature with ``low == high`` reads 0): a fixed
        range, read linearly, e.g. ``(0, 255)`` for pixels or ``(0, 1)`` after a
        scaler; values outside it raise ``ValueError``. Federated parties merge only
        with the same range and quantiles: give them a fixed range, or fit them with
        :func:`~sknn_gpu.fly.fit_federated`, which agrees on them.
    gamma : float in [0, 1), default=0.03
        Filter decay per unit of the exponent (see ``decay``). ``gamma = 0`` gives
        the binary Fly Bloom filter (a cell is 1 until any training code of the
        class uses it); larger values forget more slowly, so frequently used cells
        count more.
    decay : {'relative', 'count'}, default='relative'
        The exponent of ``gamma`` in the filters. ``'count'``: the counts, ``w_l =
        gamma ** z_l`` (the papers' filter); as a class's training set grows, its
        counts grow with it and the filter saturates at 0 (0.3 ** 50 is 7e-27), so
        ``gamma`` must be tuned to the data size. ``'relative'``: each count over
        its class's mean count, ``w_l = gamma ** (m z_l / sum(z_l))``: a cell used
        as often as the class's average cell weighs ``gamma``, whatever the size of
        the training set (and of each party's share of it: the counts still add
        up, so federated merges stay exact).
    class_weight : dict, 'balanced' or None, default=None
        Weights of the classes, applied to their filters: each class's exponent of
        ``gamma`` is multiplied by its weight, so a heavier class's filter decays
        faster, the class looks less novel and is predicted more often. Under
        ``decay='count'`` this is the filter of the class's counts times its weight,
        as scikit-learn's ``class_weight`` multiplies the weights of the class's
        samples; under ``decay='relative'``, where a factor shared by all of a class's
        counts cancels (each count is divided by the class's mean), it still acts. A
        dict maps labels to weights (finite, ``>= 0``; 1 for a class it does not name,
        labels that are not classes are ignored). ``'balanced'``: ``W / (n * W_l)``,
        ``W_l`` the total sample weight of class ``l`` (its number of samples without
        ``sample_weight``), ``W`` their sum and ``n`` the number of classes with a
        weight, read from the counts: a stream of :meth:`partial_fit` calls or a merge
        of parties is balanced over all the data it holds. The counts never carry
        class weights, so merges stay exact whatever they are.
    normalize : bool or 'auto', default='auto'
        Centre each row the hash reads (subtract its mean) and scale it to unit L2
        norm, in float64, before hashing (the fly model's mean-centred odour
        responses). ``'auto'``: only without an ``encoding`` (encoded rows are
        bounded already, so the pass would change nothing but time). Every cell sums
        the same number of inputs, so in exact arithmetic the winners ignore both a
        row's offset and its scale; in FlyHash's float32 projection they do not:
        raw rows riding on a large common offset lose their signal to rounding, and
        huge values can overflow. Normalising first removes both problems at the
        cost of one extra pass over the data.
    batch_size : int, default=8192
        Rows hashed at a time in fit, partial_fit and prediction (bounds memory).
    random_state : int, RandomState instance or None, default=None
        Seeds the random projection. Parties that want to merge their models
        must use the same integer seed.
    device : {'auto', 'cpu', 'cuda'}, default='auto'
        Where to compute; resolved once in fit into ``device_``.
    output_type : {'input', 'numpy', 'cupy'} or None, default=None
        Array type of what this estimator returns: None follows
        ``sknn_gpu.config_context(output_type=...)`` (by default the input's type: NumPy
        in, NumPy out; CuPy in, CuPy out); ``'numpy'`` always returns host arrays;
        ``'cupy'`` always device arrays.
    verbose : int or bool, default=0
        Progress on the ``sknn_gpu.fly`` logger (:mod:`logging`, INFO): ``0`` is
        silent; ``1`` (or True) logs one line per ``fit``, ``partial_fit``,
        prediction call and :func:`~sknn_gpu.fly.fit_federated` (batches or parties,
        samples, time), with a progress bar on a terminal; ``2`` also logs a line per
        batch of ``batch_size`` rows (per party for ``fit_federated``). On a GPU each
        batch is then waited for, so that the line is true. A projection drawn in
        several blocks (a large ``n_components``) reports them as well. Off a terminal
        (a log file, a batch job), ``1`` also logs how far a long call got, at most
        every 5 seconds.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        Class labels, sorted.
    counts_ : array of shape (n_classes, m), int64
        ``z_l[i]``: number of class-``l`` training codes with cell ``i`` among their
        winners; with ``sample_weight``, the sum of their samples' weights (float64
        unless every weight is a whole number). Float64 after :meth:`privatize`. NumPy
        or CuPy (on ``device_``).
    filters_ : array of shape (n_classes, m), float64
        The Fly Bloom filters ``gamma ** counts_`` (see ``decay`` and ``class_weight``);
        derived from the counts, and rebuilt from them when a pickle is loaded.
    hasher_ : FlyHashTransformer
        The fitted hash (shared projection).
    n_components_ : int
        Hash length ``m``.
    k_ : int
        Winners per code (resolved from ``k``).
    n_receptors_ : int
        Receptors per feature of ``encoding='population'`` (resolved from
        ``n_receptors``).
    proba_scale_ : float
        The scale ``s`` of :meth:`predict_proba`, ``softmax(-novelty * s / k_)``,
        chosen in ``fit`` on held-out counts (see Notes).
    calibration_loss_ : ndarray of shape (45,) or None
        The held-out log-loss of the calibration rows for each candidate scale
        (``2 ** (i / 4 - 2)``, 0.25 to 512), summed over the rows; ``proba_scale_`` is
        its minimum. None for a private release (the default scale, 19).
    held_out_hits_ : tuple of (float, float) or None
        ``(correct, total)``: how many calibration rows (their weight) the held-out
        model classified right, and how many there were.
    n_features_in_ : int
        Number of input features.
    input_quantiles_ : ndarray of shape (n_features, 257), float64
        Each feature's quantiles at levels 0, 1/256, ..., 1 (``input_range='quantile'``
        under an encoding).
    input_low_, input_high_ : ndarray of shape (n_features,), float64
        The range of each feature that the encoding tiles (fitted under
        ``input_range='fit'``, else the given one); absent when ``encoding=None``.
    feature_names_in_ : ndarray of shape (n_features,)
        Names of features seen during fit, when X has string column names.
    device_ : str
        'cpu' or 'cuda'.

    See Also
    --------
    FlyHashTransformer : The hash used underneath.
    sknn_gpu.fly.merge_flynn : One-shot federated merge of party models.
    sknn_gpu.fly.fit_federated : Fit one party per Dask worker and merge.

    Notes
    -----
    The defaults (population encoding with ``n_receptors='auto'`` over the fitted
    quantiles, 65,536 cells and 128 or 512 winners by the training rows per input
    (16,384 cells and 256 winners for wide inputs), at most 16 connections,
    ``gamma=0.03`` with relative decay) were chosen by 5-fold
    cross-validation on a development suite of nineteen real tables
    (``benchmarks/tools/sweep_flynn_devsuite.py``) and judged on tables outside it;
    the user guide gives both results and where FlyNN is the wrong tool. The papers'
    FlyNN is ``FlyNNClassifier(**sknn_gpu.fly.PAPERS_FLYNN)``: ``n_components=None,
    expansion_factor=256, connection_sparsity=0.1, k=32, gamma=0.5, encoding=None,
    decay='count'``.

    The hash's sizes differ from :class:`FlyHashTransformer`'s defaults (20 units per
    input, 10 % connections, 32 winners: the papers' hash, a general-purpose one
    whose codes are its output) because they were chosen for this classifier's
    accuracy on the development suite: more cells helped on every kind of table
    (8,192 to 32,768: 1.5 points closer to k-NN on average; 65,536 with ``k='auto'``:
    another 0.4-0.5 points, 3.8 on phoneme, whose 4,323 training rows of 5 features
    want small neighbourhoods); 20 % of the inputs with at most 16 connections (more
    cost time); and ``gamma=0.03``.

    ``predict_proba`` is calibrated in ``fit``: up to 16,384 training rows, spread
    evenly, are split in five folds, and each row is scored by the model of the
    counts without its fold (the counts minus the fold's own counts: no second
    fit). The scale of least held-out log-loss becomes ``proba_scale_``. The same
    held-out predictions give ``held_out_hits_``, and ``fit`` warns when they barely
    beat always predicting the most frequent class (the codes then carry almost no
    class information). The held-out losses add up: each later :meth:`partial_fit`
    batch adds its rows' losses under the model before it, and a federated merge
    adds the parties' own (so a merged model's scale is chosen on every party's
    held-out rows; its counts and predictions are those of the pooled fit, its scale
    may differ from the pooled fit's by a step of the grid). A private release has no
    calibration (it was computed from the exact data) and uses the scale 19 (the median
    of the scales chosen on the development suite).

    Integer counts make CPU and GPU models bit-identical; novelties are summed in
    float64 in the same order on both devices, so predictions are identical too.
    Ties in novelty go to the lowest class index.

    Sample weights (``fit``, ``partial_fit``) are rounded to multiples of ``2**-20``,
    and a sample adds its weight to the counts of its winning cells. Every weighted
    count is then a multiple of ``2**-20``, which float64 holds exactly below
    ``2**33``: its partial sums are exact, in any order, so the GPU's atomic adds, a
    Dask tree and a federated merge (:func:`~sknn_gpu.fly.merge_flynn`) all give the
    bits of one fit on the pooled data (a class whose total weight reaches ``2**33``
    is refused; rescale the weights). Whole-number weights keep int64 counts, those of
    the samples repeated. Under ``decay='relative'`` the mean count of a class is its
    weighted mean, so a weight shared by every sample of a class cancels: sample
    weights shift the filter within a class, ``class_weight`` weighs the classes.

    The fitted model is made with the hashing parameters (``n_components``,
    ``expansion_factor``, ``n_connections``, ``connection_sparsity``, ``k``),
    ``random_state``, ``encoding``, ``input_range``, ``normalize``, ``gamma`` and
    ``decay``: changing one of them after ``fit`` (``set_params``) makes prediction,
    ``partial_fit`` and :func:`~sknn_gpu.fly.merge_flynn` raise a ``ValueError`` that
    names it, until the next ``fit`` (or until it is set back). ``precision``,
    ``batch_size``, ``verbose`` and ``output_type`` are read at every call. Every
    parameter is validated at every public method, and a ``fit`` or ``partial_fit``
    that fails leaves the estimator as it was.

    References
    ----------
    K. Sinha and P. Ram, "Fruit-fly inspired neighborhood encoding for
    classification", KDD 2021. P. Ram and K. Sinha, "Federated nearest neighbor
    classification with a colony of fruit-flies", AAAI 2022.

    Examples
    --------
    >>> from sklearn.datasets import load_digits
    >>> from sklearn.model_selection import train_test_split
    >>> from sknn_gpu.fly import FlyNNClassifier
    >>> X, y = load_digits(return_X_y=True)
    >>> X_train, X_test, y_train, y_test = train_test_split(X, y, random_state=0)
    >>> clf = FlyNNClassifier(random_state=0, device="cpu").fit(X_train, y_train)
    >>> clf.counts_.shape == (10, clf.n_components_)
    True
    >>> bool(clf.score(X_test, y_test) > 0.95)
    True
    """

    _parameter_constraints: dict = {
        **_hash_constraints(),
        "encoding": [StrOptions({"thermometer", "population", "complement"}), None],
        "n_receptors": [Interval(Integral, 2, 256, closed="both"), StrOptions({"auto"})],
        "input_range": [StrOptions({"fit", "quantile"}), tuple, list],
        "gamma": [Interval(Real, 0.0, 1.0, closed="left")],
        "decay": [StrOptions({"relative", "count"})],
        "class_weight": [dict, StrOptions({"balanced"}), None],
        "normalize": ["boolean", StrOptions({"auto"})],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
        **DeviceMixin._device_constraints,
        **DeviceMixin._output_constraints,
        "verbose": [Interval(Integral, 0, None, closed="left"), "boolean"],
    }

    def __init__(
        self,
        n_components="auto",
        *,
        expansion_factor=20.0,
        n_connections=None,
        connection_sparsity=0.2,
        k="auto",
        precision="exact",
        encoding="population",
        n_receptors="auto",
        input_range="quantile",
        gamma=0.03,
        decay="relative",
        class_weight=None,
        normalize="auto",
        batch_size=8192,
        random_state=None,
        device="auto",
        output_type=None,
        verbose=0,
    ):
        self.n_components = n_components
        self.expansion_factor = expansion_factor
        self.n_connections = n_connections
        self.connection_sparsity = connection_sparsity
        self.k = k
        self.precision = precision
        self.encoding = encoding
        self.n_receptors = n_receptors
        self.input_range = input_range
        self.gamma = gamma
        self.decay = decay
        self.class_weight = class_weight
        self.normalize = normalize
        self.batch_size = batch_size
        self.random_state = random_state
        self.device = device
        self.output_type = output_type
        self.verbose = verbose

    # ------------------------------------------------------------------ #
    # validation helpers                                                   #
    # ------------------------------------------------------------------ #

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.input_tags.sparse = True
        return tags

    def _validate_X(self, X, reset):
        """Validate X (NumPy/SciPy via validate_data, CuPy by hand); returns it on its own device.

        Sparse input comes back as CSR (SciPy or cupyx), dense input C-ordered float.
        """
        if not reset and self._is_ready_ndarray(X):
            return X
        if is_device_array(X):
            X = self._check_device_X(X, reset=reset, contiguous=True, accept_sparse=True)
            return X.tocsr() if is_cupy_sparse(X) and X.format != "csr" else X
        reject_time_dtypes(X)
        return validate_data(
            self, X, reset=reset, dtype=[np.float64, np.float32], accept_sparse="csr", order="C"
        )

    def _is_ready_ndarray(self, X):
        """True when ``validate_data(X, reset=False)`` would return ``X`` itself unchanged.

        A plain C-ordered float32/float64 NumPy matrix with the fitted number of
        features and finite values, on an estimator fitted without feature names:
        then validate_data has nothing to convert or warn about, and skipping it
        saves most of the fixed cost of predicting a small batch. Anything else
        (including non-finite values) goes through validate_data and its messages.
        """
        return (
            type(X) is np.ndarray
            and X.ndim == 2
            and X.dtype in (np.float32, np.float64)
            and X.flags.c_contiguous
            and X.shape[0] >= 1
            and X.shape[1] == getattr(self, "n_features_in_", -1)
            and not hasattr(self, "feature_names_in_")
            # same screen as scikit-learn's finiteness check: a finite float64 sum
            and bool(np.isfinite(X.sum(dtype=np.float64)))
        )

    def _cross_check_params(self):
        """What ``_parameter_constraints`` cannot say (run by :func:`~sknn_gpu.base.validates_params`
        at every public method): no bool for a number, and ``precision='integer'`` reads the
        raw features only."""
        refuse_bools(self, (*HASH_PARAMS, "batch_size", "gamma"))
        _weights.check_class_weight(self.class_weight, type(self).__name__)
        if self.precision == "integer" and (self._normalizes() or self.encoding is not None):
            raise ValueError(
                "precision='integer' needs encoding=None and normalize=False: an encoding maps the "
                "features to receptor responses and normalize centres and scales the rows, which are "
                "then no longer integer-valued."
            )

    def _encode_y(self, y, n):
        """Class indices (int32, host) of the labels ``y``; clear error on unknown labels."""
        return encode_labels(self.classes_, y, n)

    # ------------------------------------------------------------------ #
    # model state                                                          #
    # ------------------------------------------------------------------ #

    def _hasher_params(self, width, n_train=0, winners=None):
        """The FlyHash parameters for ``width`` inputs per row, ``n_connections=None``
        resolved to FlyNN's default (capped at :data:`MAX_DEFAULT_CONNECTIONS`) and the
        ``'auto'`` sizes to theirs: ``k='auto'`` from ``n_train`` training rows, or
        ``winners`` (a model's resolved ``k_``: a merge, a file) when given."""
        params = {name: getattr(self, name) for name in HASH_PARAMS}
        if isinstance(params["n_components"], str):
            params["n_components"] = auto_cells(width)
        if isinstance(params["k"], str):
            params["k"] = int(winners) if winners is not None else auto_winners(width, n_train)
        if params["n_connections"] is None:
            s = min(MAX_DEFAULT_CONNECTIONS, int(self.connection_sparsity * width))
            params["n_connections"] = min(int(width), max(2, s))
        return params

    def _width(self, n_features):
        """The number of values the hash reads per row of ``n_features`` features."""
        return encoding_width(self.encoding, n_receptors(self.n_receptors, n_features)) * int(n_features)

    def _normalizes(self):
        """Whether rows are centred and scaled before hashing (``normalize='auto'``: without an encoding)."""
        normalize = getattr(self, "normalize", True)
        return getattr(self, "encoding", None) is None if normalize == "auto" else bool(normalize)

    def _set_input_range(self, low=None, high=None, X=None, histogram=None, knots=None, weights=None):
        """Fix ``input_low_`` / ``input_high_`` (host float64, one per feature) under an encoding,
        and ``input_quantiles_`` under ``input_range='quantile'``.

        ``input_range='fit'`` or ``'quantile'``: from ``low``/``high`` (a Dask reduction, or
        the parties' agreed range) or else the column range of ``X``; the quantiles from
        ``histogram`` (the summed histograms of blocks or parties), ``knots`` (a merge's or a
        file's, as they are) or else from ``X``'s. A
        fixed ``(low, high)`` is checked (finite, one value or one per feature, ``low <=
        high``).
        """
        for name in ("input_low_", "input_high_", "input_quantiles_"):
            self.__dict__.pop(name, None)
        agreed = self.__dict__.pop("_agreed_input", None)  # a federation's (low, high, histogram)
        if getattr(self, "encoding", None) is None:
            return
        if agreed is not None and self.input_range == "quantile":
            low, high, histogram = agreed
        self.input_low_, self.input_high_ = input_range(self.input_range, self.n_features_in_, low, high, X)
        if self.input_range == "quantile":
            if knots is not None:
                self.input_quantiles_ = np.array(knots, dtype=np.float64)
                return
            if histogram is None:  # each row counts its weight, as a repeated row would
                self.input_quantiles_ = _flynn_batches.quantiles(self, X, weights)
                return
            self.input_quantiles_ = quantile_knots(np.asarray(histogram), self.input_low_, self.input_high_)

    def _encode(self, Xb):
        """The encoded dense device batch ``Xb`` (:func:`._flynn_batches.encode_batch`)."""
        return _flynn_batches.encode_batch(self, Xb)

    def _init_model(self, n_features, n_samples=0, caller="fit", n_train=None, winners=None):
        """Resolve ``device`` and ``random_state`` once, check the size, draw the hash, zero the counts.

        The hasher receives the resolved device and the drawn random state: it
        resolves nothing again. ``n_samples`` training rows are included in the
        size check (``fit`` knows them; ``partial_fit`` passes its batch, merges 0);
        ``caller`` names the public method in the error. ``k='auto'`` is resolved
        from ``n_train`` training rows (default ``n_samples``), or is ``winners``
        when given (a merge's or a file's ``k_``).
        """
        device = self._resolve_device()
        rng = check_random_state(self.random_state)
        seed = self.random_state
        if not isinstance(seed, (Integral, type(None))):
            # a RandomState instance: draw a seed once so the hash is fixed for this fit
            seed = int(rng.randint(np.iinfo(np.int32).max))
            rng = np.random.RandomState(seed)
        self.n_receptors_ = n_receptors(self.n_receptors, n_features)
        width = self._width(n_features)
        rows = n_samples if n_train is None else n_train
        params = self._hasher_params(width, rows, winners)
        hasher = FlyHashTransformer(**params, random_state=seed, device=device)
        sizes = hasher._sizes(width)
        self._check_size("fit", n_samples, n_features=width, sizes=sizes, caller=caller)
        self.hasher_ = hasher._fit_projection(width, device, rng, owner=self)
        self.n_components_ = int(hasher.n_components_)
        self.k_ = int(hasher.k_)
        self._fitted_params_ = fitted_params(self, MODEL_PARAMS)
        self.counts_ = self._xp.zeros((len(self.classes_), self.n_components_), dtype=np.int64)

    def _set_counts(self, counts):
        """Install ``counts`` (on ``device_``) with their filters ``gamma ** counts``, together.

        The filters are computed on the host (same bits on both devices) before
        anything is assigned, so an error leaves the model as it was.
        """
        filters = self._filters_of(counts)
        self.counts_ = counts
        self._install_filters(filters)

    def _filters_of(self, counts, on_device=False):
        """The Fly Bloom filters (host float64) of the count table ``counts``: ``gamma`` to
        the decay's exponent, times each class's ``class_weight`` factor when there is one.

        ``on_device``: the filters of a CuPy ``counts`` computed where it is (the held-out
        models of the calibration): the same exponents bit for bit, raised by CUDA's ``pow``,
        which may differ from the host's in the last bit or two (the model's own filters,
        read by prediction, always come from the host)."""
        if not on_device:
            counts = to_host(counts)
        xp = array_module(counts)
        exponent = self._decay_exponent(counts)
        factors = _weights.class_factors(getattr(self, "class_weight", None), self.classes_, counts)
        if factors is not None:
            exponent = exponent * xp.asarray(factors)[:, None]
        return xp.power(np.float64(self.gamma), exponent)

    def _install_filters(self, filters):
        """Set ``filters_`` (on ``device_``) and ``_filters_t``, the transposed filters
        (C-ordered, host) that the novelty kernels read; their copy on ``device_`` and that
        of ``classes_`` are made here, once per update (``_device_copy`` caches them), so
        prediction only reads the estimator."""
        self.filters_ = to_device(filters, self.device_)
        self._filters_t = np.ascontiguousarray(filters.T)
        for name in ("_filters_t", "classes_"):
            self._device_copy(name)

    def _set_calibration(self, table, hits=None):
        """Install the calibration ``table`` (None: none, the default scale) with the scale of
        ``predict_proba`` it picks, and the held-out accuracy ``hits = (correct, total)``."""
        self.calibration_loss_ = None if table is None else np.asarray(table, dtype=np.float64)
        self.proba_scale_ = scale_of(self.calibration_loss_)
        self.held_out_hits_ = None if hits is None else (float(hits[0]), float(hits[1]))
        if hits is not None:
            check_class_information(self)

    def _add_calibration(self, table, hits):
        """Add a batch's calibration (``partial_fit``) to the model's; a model without one
        (a private release) stays without."""
        if getattr(self, "calibration_loss_", None) is None or self.held_out_hits_ is None:
            return
        old = self.held_out_hits_
        self._set_calibration(self.calibration_loss_ + table, (old[0] + hits[0], old[1] + hits[1]))

    # ------------------------------------------------------------------ #
    # pickles                                                              #
    # ------------------------------------------------------------------ #

    #: Derived from ``counts_`` and the parameters: left out of pickles, rebuilt on load.
    _transient_attributes = (*DeviceMixin._transient_attributes, "filters_", "_filters_t")

    def __getstate__(self):
        """The state without the filters (rebuilt from the counts on load), integer counts
        in the narrowest unsigned type that holds them (one byte a cell on digits) and the
        hash without its projection (:class:`FlyHashTransformer` draws it again)."""
        state = super().__getstate__()
        counts = state.get("counts_")
        if isinstance(counts, np.ndarray) and counts.dtype == np.int64 and counts.size and counts.min() >= 0:
            state["counts_"] = counts.astype(np.min_scalar_type(int(counts.max())))
        return state

    def __setstate__(self, state):
        state = dict(state)
        counts = state.get("counts_")
        if isinstance(counts, np.ndarray) and counts.dtype.kind == "u":
            state["counts_"] = counts.astype(np.int64)
        if "counts_" in state:  # pickled before the population encoding took a receptor count
            state.setdefault("n_receptors_", 5)
        state.setdefault("n_receptors", "auto")
        super().__setstate__(state)
        if "counts_" in self.__dict__ and "filters_" not in self.__dict__:
            self._install_filters(self._filters_of(self.counts_))

    def _decay_exponent(self, counts):
        """The exponent of ``gamma`` per class and cell (host float64): the counts under
        ``decay='count'``, else each count over its class's mean count,
        ``z_l[i] * m / sum_j z_l[j]`` (a class that used no cell keeps its zeros)."""
        xp = array_module(counts)
        z = xp.asarray(counts, dtype=xp.float64)
        if getattr(self, "decay", "count") == "count":
            return z
        total = z.sum(axis=1, keepdims=True)  # integers, or multiples of 2**-20: exact in any order
        return z * z.shape[1] / xp.where(total > 0, total, 1.0)

    def _forget(self):
        """Drop every fitted attribute and cache: a fit that fails leaves the estimator unfitted."""
        for key in [k for k in vars(self) if k.endswith("_") and not k.startswith("__")]:
            del self.__dict__[key]
        for key in ("_filters_t", "_device_cache"):
            self.__dict__.pop(key, None)

    def _check_size(self, stage, n_samples, n_features=None, sizes=None, caller=None):
        """Refuse ``stage`` on ``n_samples`` rows before allocating when it cannot fit
        (:func:`._flynn_size.check_size`; the sizes default to the fitted ones)."""
        check_size(self, stage, n_samples, n_features, sizes, caller)

    def _progress(self, what, n_samples):
        """The :class:`~sknn_gpu._progress.Progress` of ``what`` over the batches of ``n_samples`` rows."""
        n_batches = -(-int(n_samples) // int(self.batch_size))
        return Progress(
            self,
            f"{type(self).__name__}.{what}",
            n_batches,
            self.verbose,
            unit="batches",
            log_every=True,
        )

    def _batch_winners(self, X, bar=None):
        """Yield ``(start, winners)`` per batch of ``batch_size`` rows of validated ``X``
        (:func:`._flynn_batches.batch_winners`)."""
        return _flynn_batches.batch_winners(self, X, bar)

    def _count(self, X, y_idx, bar=None, weights=None, keep=None):
        """Counts (n_classes, m) of the winners of ``X`` per class (each weighted by its row's
        ``weights`` when given), a new array on ``device_`` (:func:`._flynn_batches.count`);
        with ``keep`` (host row indices) ``(counts, winners of those rows)``."""
        return _flynn_batches.count(self, X, y_idx, bar, weights, keep)

    def _count_and_calibration_set(self, X, y_idx, bar=None, weights=None):
        """``(counts, (winners, labels, weights))``: the counts of :meth:`_count` and the
        calibration rows of ``X`` (:func:`._calibration.calibration_rows`) with their winners,
        kept from the counting pass (the rows are hashed once)."""
        rows = calibration_rows(X.shape[0])
        counts, winners = self._count(X, y_idx, bar, weights, keep=rows)
        return counts, (winners, np.asarray(y_idx)[rows], None if weights is None else weights[rows])

    def _weighted_rows(self, X, y, sample_weight):
        """``(X, y, weights)`` with the rows of weight 0 left out (a sample of weight 0 is as
        if absent: it sets no class, no fitted range, no count); ``weights`` host float64 on
        the fixed-point grid of :mod:`._weights`, or None without ``sample_weight``."""
        if sample_weight is None:
            return X, y, None
        weights = _weights.check_sample_weight(sample_weight, X.shape[0])
        rows = _weights.nonzero_rows(weights)
        if rows is not None:
            X, y, weights = take_rows(X, rows), y[rows], weights[rows]
        return X, y, weights

    # ------------------------------------------------------------------ #
    # fit / partial_fit                                                    #
    # ------------------------------------------------------------------ #

    @validates_params
    @_fit_context(prefer_skip_nested_validation=True)
    @keeps_model
    def fit(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None) -> FlyNNClassifier:
        """Count the FlyHash winners of every training sample per class.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training data: NumPy, CuPy, a SciPy/cupyx sparse matrix (hashed as CSR;
            the same model as its dense copy, bit for bit), or a Dask array chunked
            by rows: then every block is counted on the worker that holds it and
            only count tables, the features' histograms (``input_range='quantile'``)
            and the winners of the calibration rows reach the client: the same model
            bit for bit.
        y : array-like of shape (n_samples,)
            Class labels (a Dask array, or in memory, with Dask ``X``).
        sample_weight : array-like of shape (n_samples,) or float, default=None
            What each sample adds to the counts of its winning cells instead of 1:
            finite and ``>= 0``, rounded to multiples of ``2**-20``. A whole-number
            weight ``w`` gives the model of the sample repeated ``w`` times (int64
            counts, bit for bit); other weights give float64 counts, exact and
            order-free (see the class's Notes). A sample of weight 0 is as if absent
            (it sets no class, no fitted ``input_range``). NumPy, CuPy, or Dask with
            Dask ``X``.

        Returns
        -------
        self : FlyNNClassifier
            Fitted estimator. A fit that fails leaves the estimator as it was (its
            earlier model, or unfitted).
        """
        self._forget()
        if is_dask_collection(X):
            return _fly_dask.fit(self, X, y, "fit", first=True, sample_weight=sample_weight)
        X = self._validate_X(X, reset=True)
        y_host = host_labels(y)
        check_classification_targets(y_host)
        if y_host.shape[0] != X.shape[0]:
            raise ValueError(
                f"X and y have inconsistent numbers of samples: {X.shape[0]} != {y_host.shape[0]}."
            )
        X, y_host, weights = self._weighted_rows(X, y_host, sample_weight)
        self.classes_ = np.unique(y_host)
        y_idx = self._encode_y(y_host, X.shape[0])
        if weights is not None:
            _weights.check_totals(weights, y_idx, len(self.classes_), "fit")
        self._init_model(X.shape[1], X.shape[0])  # the size check first: nothing is allocated before it
        self._set_input_range(X=X, weights=weights)
        bar = self._progress("fit", X.shape[0])
        counts, calibration_set = self._count_and_calibration_set(X, y_idx, bar, weights)
        self._set_counts(counts)
        self._set_calibration(*cross_fit(self, *calibration_set))
        bar.close(samples=X.shape[0], classes=len(self.classes_))
        return self

    @validates_params
    @_fit_context(prefer_skip_nested_validation=True)
    @keeps_model
    def partial_fit(
        self,
        X: ArrayLike,
        y: ArrayLike,
        classes: ArrayLike | None = None,
        sample_weight: ArrayLike | None = None,
    ) -> FlyNNClassifier:
        """Add a batch of samples to the counts (streaming; fit = partial_fit over batches).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            A batch of training data (as in :meth:`fit`, Dask arrays included).
        y : array-like of shape (n_samples,)
            Its labels; every label must be in ``classes``.
        classes : array-like of shape (n_classes,), default=None
            All class labels; required on the first call, ignored (but checked) later.
        sample_weight : array-like of shape (n_samples,) or float, default=None
            The batch's sample weights, as in :meth:`fit` (weighted and unweighted
            batches mix: the sum is the model of one fit with all the weights, ones for
            the unweighted rows).

        Returns
        -------
        self : FlyNNClassifier
            The updated estimator. A call that fails leaves it as it was.
        """
        first = not hasattr(self, "counts_")
        if first:
            self.__dict__.pop("classes_", None)
        else:
            check_fitted_params(self)
            if hasattr(self, "dp_accounting_"):
                raise ValueError(
                    "This model is a differentially private release (see dp_accounting_): "
                    "partial_fit would add exact counts of the new samples to its noisy ones, and a "
                    "model shared after that would not be private. Keep the exact model, "
                    "partial_fit it, and privatize it again (each release spends its own epsilon)."
                )
        if classes is not None:
            classes = host_labels(classes, "classes")
            check_classification_targets(classes)
        check_partial_fit_first_call(self, classes)
        if is_dask_collection(X):
            return _fly_dask.fit(self, X, y, "partial_fit", first=first, sample_weight=sample_weight)
        X = self._validate_X(X, reset=first)
        y_host = host_labels(y)
        check_classification_targets(y_host)
        y_idx = self._encode_y(y_host, X.shape[0])  # every label checked, weighted 0 or not
        X, y_host, weights = self._weighted_rows(X, y_host, sample_weight)
        if weights is not None:
            y_idx = self._encode_y(y_host, X.shape[0])
            _weights.check_totals(weights, y_idx, len(self.classes_), "partial_fit")
        bar = None
        if not first:  # the model changes only once the new counts are complete
            self._check_size("partial_fit", X.shape[0])
            bar = self._progress("partial_fit", X.shape[0])
            counts, calibration_set = self._count_and_calibration_set(X, y_idx, bar, weights)
            total = self.counts_ + counts
            _weights.check_exact(total, "partial_fit")
            table, hits = held_out(self, *calibration_set)  # the batch, by the model before it
            self._set_counts(total)
            self._add_calibration(table, hits)
            bar.close(samples=X.shape[0])
            return self
        self._init_model(X.shape[1], X.shape[0], caller="partial_fit")
        self._set_input_range(X=X, weights=weights)
        bar = self._progress("partial_fit", X.shape[0])
        counts, calibration_set = self._count_and_calibration_set(X, y_idx, bar, weights)
        self._set_counts(counts)
        self._set_calibration(*cross_fit(self, *calibration_set))
        bar.close(samples=X.shape[0])
        return self

    # ------------------------------------------------------------------ #
    # prediction                                                           #
    # ------------------------------------------------------------------ #

    def _predict_indices(self, X):
        """Class index (int64, on ``device_``) of the least novel class per row of validated X."""
        n = X.shape[0]
        self._check_size("predict", n)
        eng = engine(self.device_)
        filters_t = self._device_copy("_filters_t")
        out = self._xp.empty(n, dtype=np.int64)
        bar = self._progress("predict", n)
        for start, w in self._batch_winners(X, bar):
            eng.nearest_class(w, filters_t, out=out[start : start + w.shape[0]])
        bar.close(samples=n)
        return out

    def _checked(self, X):
        check_is_fitted(self)
        return self._validate_X(X, reset=False)

    def _novelty(self, X, what):
        """Novelty (n, n_classes) of validated-or-not ``X`` for the public method ``what``."""
        Xv = self._checked(X)
        n = Xv.shape[0]
        self._check_size("novelty", n, caller=what)
        eng = engine(self.device_)
        filters_t = self._device_copy("_filters_t")
        bar = self._progress(what, n)
        outs = [eng.novelty(w, filters_t) for _, w in self._batch_winners(Xv, bar)]
        bar.close(samples=n)
        return self._output(outs[0] if len(outs) == 1 else self._xp.concatenate(outs), X)

    @validates_params
    @fitted_method
    @dask_rows(_per_class)
    def novelty(self, X: ArrayLike) -> Array:
        """Novelty of every sample with respect to every class filter.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Samples to compare with the class filters (NumPy, CuPy, sparse, or Dask by
            rows).

        Returns
        -------
        novelty : array of shape (n_samples, n_classes), float64
            ``h(x) . w_l``: lower means more familiar. NumPy in, NumPy out;
            CuPy in, CuPy out; Dask in, Dask out (lazy).
        """
        return self._novelty(X, "novelty")

    @validates_params
    @fitted_method
    @dask_rows(_decision_columns)
    def decision_function(self, X: ArrayLike) -> Array:
        """Confidence scores: minus the novelty (higher means more likely).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Samples to score (NumPy, CuPy, sparse, or Dask by rows).

        Returns
        -------
        scores : array of shape (n_samples, n_classes) or (n_samples,)
            ``-novelty``; for two classes, ``novelty_0 - novelty_1`` (positive
            means ``classes_[1]``), following scikit-learn's binary convention.
        """
        nov = self._novelty(X, "decision_function")
        if nov.shape[1] == 2:
            return nov[:, 0] - nov[:, 1]
        return -nov

    @validates_params
    @fitted_method
    @dask_rows(_per_class)
    def predict_proba(self, X: ArrayLike) -> Array:
        """Class probabilities: softmax of ``-novelty * proba_scale_ / k_``.

        ``proba_scale_`` was chosen in ``fit`` on held-out counts (see the class's Notes),
        so the probabilities are calibrated: their log-loss is what cross-validation saw.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Samples whose class probabilities are wanted (NumPy, CuPy, sparse, or Dask
            by rows).

        Returns
        -------
        proba : array of shape (n_samples, n_classes)
            Rows sum to 1; columns follow ``classes_``.
        """
        nov = self._novelty(X, "predict_proba")
        z = -nov * (float(getattr(self, "proba_scale_", scale_of(None))) / float(self.k_))
        z = z - z.max(axis=1, keepdims=True)
        e = array_module(z).exp(z)
        return e / e.sum(axis=1, keepdims=True)

    @validates_params
    @fitted_method
    def predict_log_proba(self, X: ArrayLike) -> Array:
        """Logarithm of :meth:`predict_proba` (same input, same columns).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            As for :meth:`predict_proba`.

        Returns
        -------
        log_proba : array of shape (n_samples, n_classes)
            ``log(predict_proba(X))``.
        """
        proba = self.predict_proba(X)
        return array_module(proba).log(proba)

    @validates_params
    @fitted_method
    @dask_rows(_labels)
    def predict(self, X: ArrayLike) -> Array:
        """Least novel class per sample (ties go to the lowest class index).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Samples (NumPy, CuPy, sparse, or a Dask array chunked by rows).

        Returns
        -------
        y : array of shape (n_samples,)
            Predicted labels; CuPy in gives CuPy out when the labels are numeric.
        """
        Xv = self._checked(X)
        idx = self._predict_indices(Xv)
        if self.classes_.dtype.kind in "biuf":
            # numeric labels are looked up where the indices are, then follow the input
            return self._output(self._device_copy("classes_")[idx], X)
        return self.classes_[to_host(idx)]  # string labels stay on the host (CuPy cannot hold them)

    @validates_params
    @fitted_method
    def score(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None) -> float:
        """Mean accuracy of :meth:`predict` on ``X`` against ``y``.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Samples: NumPy, CuPy, sparse, or a Dask array chunked by rows (predicted
            blockwise on the workers; two numbers per block reach the client).
        y : array-like of shape (n_samples,)
            True labels (NumPy, CuPy, or Dask with Dask ``X``).
        sample_weight : array-like of shape (n_samples,), default=None
            Sample weights.

        Returns
        -------
        score : float
            Fraction of correct predictions (weighted with ``sample_weight``); on Dask
            input, unweighted, exactly the in-memory value.
        """
        if is_dask_collection(X):
            return _fly_dask.score(self, X, y, sample_weight)
        return super().score(X, y, sample_weight=sample_weight)

    # ------------------------------------------------------------------ #
    # differential privacy                                                 #
    # ------------------------------------------------------------------ #

    def privatize(self, epsilon: float, n_released: int, random_state: None = None) -> FlyNNClassifier:
        """A differentially private copy of the model (Ram & Sinha, AAAI 2022, Alg. 2, per class).

        For every class independently, ``n_released`` cells are chosen by
        ``n_released`` rounds of the exponential mechanism without replacement
        (utility: the count; weight ``exp(epsilon * z / (2 n_released))``), and the
        count of each chosen cell is released with Laplace noise of scale
        ``2 n_released / epsilon``, clipped at 0. Every other count is released as
        0 (its filter weight becomes 1, "never seen"). The noise comes from the
        operating system's entropy, never from a seed: anyone who knew the seed could
        regenerate the noise and subtract it.

        Guarantee (``epsilon``-DP, ``delta = 0``): adding or removing one training
        sample changes the counts of one class only, by at most 1 per cell, and only
        upwards when a sample is added (a monotone utility). Each selection round is
        then ``epsilon / (2 n_released)``-DP and each noisy value likewise, so one
        class's release is ``epsilon``-DP by sequential composition, and the whole
        release is ``epsilon``-DP by parallel composition over classes (``2 epsilon``
        if neighbouring data sets may replace a sample, changing two classes). A model
        fitted with ``sample_weight``: one sample moves its class's counts by its
        weight, so the guarantee holds as stated for weights of at most 1, a sample of
        weight ``w > 1`` is protected at ``w * epsilon``, and weights computed from the
        data (class frequencies, say) are outside the analysis. This
        holds only when the encoding of a sample does not depend on the other
        samples: a model whose ``input_range`` was fitted from the data (``'fit'``,
        the default, with an ``encoding``) is refused, and so is one whose ``k_`` was
        chosen from its number of rows (``k='auto'`` on an input of at most 1,024
        encoded values: fit with an integer ``k``). Public by assumption, and
        released as they are: the class labels ``classes_``, ``n_features_in_`` and
        ``feature_names_in_``, the parameters and the projection they draw
        (``hasher_``), and the ``input_range`` given at fit. Nothing else of the
        model is carried (no exact counts, no caches). Merging private party models
        is post-processing and keeps each party's guarantee. The noise is drawn in
        floating point and is not hardened against floating-point side channels.

        Parameters
        ----------
        epsilon : float > 0
            Privacy budget of this release; ``2 n_released / epsilon`` (the Laplace
            scale) must lie in ``[2**-52, 2**52]``, where float64 noise still
            implements the mechanism.
        n_released : int
            Counts released per class, ``1 <= n_released <= n_components_``.
        random_state : None
            Not accepted (it used to seed the noise, which made the release not
            private); passing anything but None raises ``TypeError``.

        Returns
        -------
        private : FlyNNClassifier
            A copy whose ``counts_`` (float64) and ``filters_`` are the private
            ones, with ``dp_released_`` (n_classes, n_released) the released cells,
            ``dp_epsilon_``, ``dp_scale_`` (the Laplace scale) and ``dp_accounting_``:
            a JSON-serialisable dict of the accounting (``epsilon``, ``delta``, the
            ``neighbouring`` relation and ``epsilon_replace_one``, the ``mechanism``
            and its ``selection_epsilon`` / ``values_epsilon`` split, ``laplace_scale``,
            ``composition``, what was ``released``, what is ``public``, the fitted
            attributes ``dropped`` and the ``noise`` source).

        Raises
        ------
        ValueError
            For an ``epsilon`` or ``n_released`` out of range, a range or a ``k_``
            chosen from the data (see above), or counts that are already a private
            release.
        TypeError
            For a non-number ``epsilon``, or any ``random_state``.
        """
        if random_state is not None:
            raise TypeError(
                "privatize no longer takes random_state: it seeded the noise, and anyone who "
                "knows the seed can regenerate the noise and subtract it. The noise now comes "
                "from the operating system's entropy; call privatize(epsilon, n_released)."
            )
        check_is_fitted(self)
        check_public_winners(self)
        return private_copy(self, epsilon, n_released)

    # ------------------------------------------------------------------ #
    # exchange between parties                                             #
    # ------------------------------------------------------------------ #

    def export_counts(self, file: str | os.PathLike | IO[bytes]) -> None:
        """Write the model to ``file`` in a safe format for another party: no pickle.

        A compressed ``.npz`` archive of plain arrays (the counts, the class labels, and when
        present the encoding's range, the feature names and the released cells of a
        private copy) with one JSON entry of metadata (the format version, the
        sknn_gpu version, :meth:`get_params`, ``n_features_in_``, ``n_components_``,
        ``k_``, a SHA-256 of the projection, and ``dp_accounting_`` of a private
        copy). The projection itself is not written: the reader redraws it from the
        shared integer ``random_state``. Read it back with :meth:`from_counts`.

        Parameters
        ----------
        file : str, path or binary file object
            Where to write (a path is used as given, no ``.npz`` appended).

        Raises
        ------
        ValueError
            Without an integer ``random_state``.
        TypeError
            For class labels or feature names that are neither numbers nor strings.
        """
        _counts_io.export_counts(self, file)

    @classmethod
    def from_counts(cls, file: str | os.PathLike | IO[bytes], device: str | None = None) -> FlyNNClassifier:
        """A fitted model read from a file written by :meth:`export_counts`.

        The file is read with ``np.load(allow_pickle=False)``, so loading runs no code
        from it, and checked: the entries and metadata keys, the format version, the
        parameter names against :meth:`get_params` and their values against the
        constraints, the shapes and dtypes of the arrays, counts that are ``>= 0`` (and
        finite), the range, and the projection redrawn from ``random_state``, whose
        SHA-256 must match the file's. :func:`~sknn_gpu.fly.merge_flynn` merges the
        models it returns.

        Parameters
        ----------
        file : str, path or binary file object
            What :meth:`export_counts` wrote.
        device : {'auto', 'cpu', 'cuda'} or None, default=None
            Device of the model; None keeps the ``device`` parameter of the file.

        Returns
        -------
        model : FlyNNClassifier
            Fitted, with the file's counts (and ``dp_*`` attributes of a private
            release).

        Raises
        ------
        ValueError
            For anything in the file that does not check out (the message says what,
            prefixed with ``from_counts:``).
        """
        return _counts_io.from_counts(cls, file, device)
