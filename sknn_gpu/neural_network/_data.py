"""The forms the data of GPUMLPClassifier takes: validation, row indexing, sparse rows on the GPU.

:func:`check_X` validates ``X`` (and ``y``) in every form the estimator accepts: NumPy
and SciPy sparse through scikit-learn's ``validate_data``, CuPy (dense or cupyx sparse)
on the device; Dask arrays are refused for training. :func:`take_rows` indexes rows of
any form the training data takes.

Sparse (CSR) training data for the CUDA trainer: rows kept sparse, densified per minibatch.

scikit-learn's MLP multiplies a SciPy CSR minibatch by the weights (``X_batch @ W`` and
``X_batch.T @ delta``); the CPU trainer does exactly that. On the GPU the data stays in
CSR form on the device (values, column indices, row pointers, and the row of every
stored value) and each minibatch is scattered into a dense ``(batch, n_features)``
block, which then goes through the same GEMMs and fused kernels as dense data. Only one
minibatch is ever dense, so the device holds ``nnz`` values plus one dense block.

Everything here is written against the array module of the arrays it holds, so the
same code runs (and is tested) on NumPy.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import LabelBinarizer
from sklearn.utils.validation import validate_data

from .._backend import array_module, get_xp, is_cupy_sparse, is_device_array, to_host
from .._backend import take_rows as backend_take_rows
from .._dask import is_dask_collection
from ..base import reject_time_dtypes

__all__ = [
    "CSRRows",
    "check_X",
    "class_codes",
    "fit_label_binarizer",
    "host_rows",
    "is_sparse",
    "take_rows",
    "validation_split",
]

#: labels counted with ``np.bincount`` in :func:`fit_label_binarizer` stay below
#: ``max(COUNT_LABELS_BELOW, 2 * n_labels)``: the counts never take much more memory than
#: the labels
COUNT_LABELS_BELOW = 1 << 16


def fit_label_binarizer(y):
    """``LabelBinarizer().fit(y)`` (``y`` a NumPy array, as :func:`check_X` returns it),
    counted instead of sorted when ``y`` holds class codes (:func:`class_codes`): one
    ``np.bincount`` pass where ``fit`` sorts the labels twice. The binarizer is left in the
    state ``fit`` leaves it in (the tests compare the two); any other ``y`` goes to ``fit``."""
    lb = LabelBinarizer()
    if not class_codes(y):
        return lb.fit(y)
    classes = np.flatnonzero(np.bincount(y)).astype(y.dtype, copy=False)
    lb.y_type_ = "binary" if classes.size <= 2 else "multiclass"
    lb.sparse_input_ = False
    lb.classes_ = classes
    return lb


def class_codes(y):
    """The largest value of ``y`` (NumPy) plus one when ``y`` holds class codes: 1-D, not
    empty, a signed or at-most-32-bit unsigned integer dtype, none negative, all below
    ``max(2 * len(y),`` :data:`COUNT_LABELS_BELOW` ``)``; else 0."""
    kind = y.dtype.kind
    if y.ndim != 1 or not y.size or not (kind == "i" or (kind == "u" and y.dtype.itemsize <= 4)):
        return 0
    top = int(y.max())
    return top + 1 if y.min() >= 0 and top < max(2 * y.size, COUNT_LABELS_BELOW) else 0


def check_X(est, X, reset, y="no_validation", finite=True):
    """Validate X (and y) for the estimator ``est``; CuPy X is checked on the device and kept there.

    Sparse X (SciPy or cupyx; CSR, CSC or anything SciPy converts) is accepted as in
    scikit-learn. Dask X is refused: only prediction is distributed (the estimator's
    prediction methods take Dask arrays before they get here).

    Parameters
    ----------
    est : GPUMLPClassifier
        The estimator (``n_features_in_`` is set on ``reset`` and compared otherwise).
    X : array-like or sparse matrix of shape (n_samples, n_features)
        The data.
    reset : bool
        Whether this is a first fit.
    y : array-like or None, default="no_validation"
        Targets to validate with ``X`` (the default validates ``X`` alone).
    finite : bool, default=True
        Whether to check dense CuPy ``X`` for NaN and infinity here (False: the caller
        checks it later, see ``DeviceMixin._check_device_X``); other input is always checked.

    Returns
    -------
    X or (X, y)
        ``X`` float32/float64 (NumPy, SciPy sparse, CuPy or cupyx sparse); ``y`` on the host.
    """
    if is_dask_collection(X):
        raise TypeError(
            f"{type(est).__name__} trains on in-memory data only (distributed prediction only: "
            "predict, predict_proba, predict_log_proba and score take Dask arrays). Pass "
            "X.compute() to fit or partial_fit."
        )
    if is_device_array(X):
        X = est._check_device_X(
            X, reset=reset, accept_sparse=True, contiguous=True, finite=finite or is_cupy_sparse(X)
        )
        if is_cupy_sparse(X) and X.dtype.kind != "f":
            X = X.astype(np.float64)
        if isinstance(y, str) and y == "no_validation":
            return X
        if y is None:
            raise ValueError("requires y to be passed, but the target y is None.")
        y = np.asarray(to_host(y))
        if y.shape[0] != X.shape[0]:
            raise ValueError(f"X has {X.shape[0]} samples but y has {y.shape[0]}.")
        return X, y
    reject_time_dtypes(X)
    kw = dict(accept_sparse=["csr", "csc"], dtype=(np.float64, np.float32), reset=reset)
    if isinstance(y, str) and y == "no_validation":
        return validate_data(est, X, **kw)
    return validate_data(est, X, y if y is None else to_host(y), multi_output=True, **kw)


def host_rows(X):
    """A host stand-in with X's number of rows, for scikit-learn's sample-weight check."""
    return np.empty((X.shape[0], 0)) if is_device_array(X) else X


def is_sparse(X):
    """SciPy or cupyx sparse."""
    return sp.issparse(X) or is_cupy_sparse(X)


def take_rows(X, idx):
    """Rows ``idx`` (host indices) of NumPy, CuPy, SciPy sparse or :class:`CSRRows` data."""
    if isinstance(X, CSRRows):
        return X.take(idx)
    return backend_take_rows(X, idx)


def validation_split(X, Y, sample_weight, test_size, random_state, stratify):
    """scikit-learn's early-stopping split of the training rows, for data in any form.

    The same draw as ``train_test_split(X, y, sample_weight, ...)`` in scikit-learn's MLP
    (the split depends only on the number of rows, ``test_size``, ``random_state`` and
    ``stratify``); the rows are taken with :func:`take_rows`.

    Returns
    -------
    train, validation : tuple of (X, Y, sample_weight)
        ``sample_weight`` parts are None when it is None.

    Raises
    ------
    ValueError
        When fewer than two samples are held out.
    """
    idx_train, idx_val = train_test_split(
        np.arange(X.shape[0]), random_state=random_state, test_size=test_size, stratify=stratify
    )
    if idx_val.shape[0] < 2:
        raise ValueError(
            "The validation set is too small. Increase 'validation_fraction' or the size of your dataset."
        )

    def part(idx):
        return take_rows(X, idx), Y[idx], None if sample_weight is None else sample_weight[idx]

    return part(idx_train), part(idx_val)


class CSRRows:
    """A CSR matrix on one device whose row blocks are densified on demand.

    Parameters
    ----------
    data : ndarray of shape (nnz,)
        Stored values (float32 or float64), row by row.
    indices : ndarray of shape (nnz,)
        Column of every stored value (duplicates are summed when densified).
    indptr : ndarray of shape (n_rows + 1,), int64
        Row pointers.
    n_cols : int
        Number of columns.
    bounds : ndarray of shape (n_rows + 1,), int64, optional
        ``indptr`` on the host (computed when not given).
    row_of : ndarray of shape (nnz,), int64, optional
        The row of every stored value (computed when not given).
    """

    def __init__(self, data, indices, indptr, n_cols, bounds=None, row_of=None):
        self.data, self.indices, self.indptr = data, indices, indptr
        self.bounds = np.asarray(to_host(indptr), dtype=np.int64) if bounds is None else bounds
        self.shape = (int(self.bounds.shape[0]) - 1, int(n_cols))
        self.dtype = data.dtype
        # the row of every stored value: one search per matrix, not per minibatch
        self.row_of = _rows_of(indptr, data.shape[0]) if row_of is None else row_of

    @classmethod
    def of(cls, X, device, dtype):
        """``X`` (SciPy or cupyx sparse, any format) as CSR rows of ``dtype`` on ``device``."""
        if is_cupy_sparse(X) and device == "cpu":
            X = to_host(X)
        X = X.tocsr()
        xp = get_xp(device)
        indptr = xp.asarray(X.indptr, dtype=np.int64)
        return cls(
            xp.asarray(X.data, dtype=dtype),
            xp.asarray(X.indices, dtype=np.int64),
            indptr,
            X.shape[1],
            bounds=np.asarray(to_host(X.indptr), dtype=np.int64),
        )

    @property
    def nnz(self):
        """Number of stored values."""
        return int(self.data.shape[0])

    def take(self, rows):
        """A new CSRRows holding ``rows`` (an index array on this device) in that order."""
        xp = array_module(self.data)
        rows = xp.asarray(rows, dtype=np.int64)
        starts = self.indptr[rows]
        lengths = self.indptr[rows + 1] - starts
        indptr = xp.concatenate([xp.zeros(1, dtype=np.int64), xp.cumsum(lengths)])
        bounds = np.asarray(to_host(indptr), dtype=np.int64)  # one transfer per gather
        nnz = int(bounds[-1])
        new_row = _rows_of(indptr, nnz)
        source = starts[new_row] + (xp.arange(nnz, dtype=np.int64) - indptr[new_row])
        return CSRRows(
            self.data[source], self.indices[source], indptr, self.shape[1], bounds=bounds, row_of=new_row
        )

    def dense(self, start, stop):
        """Rows ``start:stop`` as a dense C-contiguous array (duplicates summed)."""
        xp = array_module(self.data)
        lo, hi = int(self.bounds[start]), int(self.bounds[stop])
        out = xp.zeros((stop - start, self.shape[1]), dtype=self.dtype)
        if hi > lo:  # one flat index per stored value (a tuple of index arrays is not portable to CuPy)
            flat = (self.row_of[lo:hi] - start) * self.shape[1] + self.indices[lo:hi]
            xp.add.at(out.reshape(-1), flat, self.data[lo:hi])
        return out

    def toarray(self):
        """Every row as a dense array."""
        return self.dense(0, self.shape[0])

    def __getitem__(self, key):
        """``X[start:stop]``: a contiguous block of rows, dense (what a minibatch needs)."""
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("CSRRows supports contiguous row slices only; use take() for index arrays.")
        start, stop, _ = key.indices(self.shape[0])
        return self.dense(start, max(start, stop))


def _rows_of(indptr, nnz):
    """Row of each of the ``nnz`` stored values of a CSR matrix with row pointers ``indptr``."""
    xp = array_module(indptr)
    return xp.searchsorted(indptr, xp.arange(nnz, dtype=np.int64), side="right") - 1
