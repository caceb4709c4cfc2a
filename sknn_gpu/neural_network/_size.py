"""The one size estimate of GPUMLPClassifier, and the check made with it before allocating.

:func:`size_estimate` counts the bytes one ``fit``/``partial_fit`` or ``predict`` call
allocates on the host and on the device, from the network's layer sizes, the number of
samples, the parameters and the form of the data; :func:`check_size` compares them with
the free memory and raises :class:`~sknn_gpu.InsufficientMemoryError` (needed vs free)
before anything large is allocated.
"""

from __future__ import annotations

import numpy as np

from .._backend import check_memory
from ._base import Solver

__all__ = ["size_estimate", "check_size", "sparse_items", "DENSE_ITEMS"]

#: estimates below this many bytes are not checked against the free memory
_CHECK_FROM = 64 << 20
#: sparse prediction on the GPU densifies at most about this many values at a time
DENSE_ITEMS = 1 << 24


def sparse_items(X):
    """Values of X's dtype that its CSR form takes on the trainer's device.

    Values, 64-bit column indices and the 64-bit row of every value
    (:class:`~._data.CSRRows`), plus the row pointers.
    """
    itemsize = X.dtype.itemsize
    return -(-(X.nnz * (itemsize + 16) + 8 * (X.shape[0] + 1)) // itemsize)


def check_size(
    est, phase, units, n_samples, dtype, *, x_on_device, batch_size=1, first_pass=False, x_items=None
):
    """Refuse ``phase`` ('fit', 'partial_fit', 'predict') of ``est`` when it cannot fit.

    Host and device are checked separately. Estimates below 64 MiB are not checked
    (reading the free memory would cost more than such a call).

    Parameters
    ----------
    est : GPUMLPClassifier
        The estimator (its ``device_`` and training parameters).
    phase : {'fit', 'partial_fit', 'predict'}
        The call, named in the error.
    units : list of int
        Units of every layer, input and output included.
    n_samples : int
        Rows of the data.
    dtype : dtype
        float32 or float64.
    x_on_device, batch_size, first_pass, x_items
        As for :func:`size_estimate`.

    Returns
    -------
    checked : bool
        Whether the estimate was large enough to be compared with the free memory (False:
        a call of this size or smaller needs no check).

    Raises
    ------
    InsufficientMemoryError
        Naming the call, the layer sizes, the bytes needed and the bytes free.
    """
    predict = phase == "predict"
    n_moments = (
        0 if predict else Solver.from_params(est.solver, est.momentum, est.nesterovs_momentum).n_moments
    )
    host, dev = size_estimate(
        units,
        n_samples,
        np.dtype(dtype).itemsize,
        phase="predict" if predict else "fit",
        device=est.device_,
        n_moments=n_moments,
        batch_size=batch_size,
        early_stopping=est.early_stopping,
        shuffle=est.shuffle,
        first_pass=first_pass,
        x_on_device=x_on_device,
        x_items=x_items,
    )
    if host < _CHECK_FROM and dev < _CHECK_FROM:
        return False

    def what():  # formatted only when a check fails (a few microseconds a predict call)
        n_params = sum(a * b + b for a, b in zip(units[:-1], units[1:]))
        return (
            f"{type(est).__name__}.{phase} with layer sizes {units} ({n_params:,} parameters, "
            f"{n_samples:,} samples, {np.dtype(dtype).name})"
        )

    if host >= _CHECK_FROM:
        check_memory(host, "cpu", what=what)
    if dev >= _CHECK_FROM:
        check_memory(dev, est.device_, what=what)
    return True


def size_estimate(
    units,
    n_samples,
    itemsize,
    *,
    phase,
    device,
    n_moments=0,
    batch_size=1,
    early_stopping=False,
    shuffle=True,
    first_pass=True,
    x_on_device=False,
    x_items=None,
):
    """Bytes ``(host, device)`` that one fit/partial_fit (``phase='fit'``) or predict call allocates.

    Counted from the network's ``units`` (input and output included), the number of
    samples and the parameters, before anything is allocated. With ``device='cpu'``
    everything is on the host and the device figure is 0.

    * fit, on the trainer's device: parameters, gradient, the optimizer's
      ``n_moments`` moments and the best parameters (early stopping); on the CPU the
      temporaries of the vectorised update; the data (and on the GPU its per-epoch
      shuffled copy); per minibatch the activations and deltas. On the host also: the
      initial weights and their copy (first fit), the optimizer state kept between
      calls, the results copied back, the float targets.
    * predict: the data moved to the device (or cast), two layers of activations at a
      time, and on the GPU the device copy of the weights.

    ``x_items`` is the size of the data, in values of ``itemsize``, in the form the
    call holds it (default: dense, ``n_samples * units[0]``; sparse data passes its CSR
    size, plus on the GPU the rows densified at a time when predicting).
    """
    P = sum(a * b + b for a, b in zip(units[:-1], units[1:]))
    n, n_in, n_out = n_samples, units[0], units[-1]
    x = n * n_in if x_items is None else x_items
    cuda = device == "cuda"
    if phase == "predict":  # the input is counted in x; the activations of the other layers
        work = (0 if x_on_device else x) + 2 * n * max(units[1:]) + (P if cuda else 0)
        host_only = n * n_out if cuda else 0
    else:
        batch = min(batch_size, n)
        work = (2 + n_moments + int(early_stopping)) * P
        work += 0 if cuda else 3 * P
        work += n * n_out + (x if cuda and not x_on_device else 0)
        work += x + n * n_out if cuda and shuffle else (0 if cuda else batch * (n_in + n_out))
        work += batch * (3 * sum(units) + max(units))
        host_only = (
            (3 * P if first_pass else 0) + n_moments * P + (4 if early_stopping else 2) * P + n * n_out
        )
        host_only += x if early_stopping else 0
    if cuda:
        return host_only * itemsize, work * itemsize
    return (host_only + work) * itemsize, 0
