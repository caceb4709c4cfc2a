"""The engine of a resolved device for :class:`~sknn_gpu.memory.GBNNMemory`.

``engine(device)`` is ``_gbnn_cpu`` (NumPy, the reference) or ``_gbnn_cuda`` (the CuPy
engine); both have the same functions. It sits beside the engines so that the estimator
(``_gbnn``) and its Dask adapter (``_gbnn_dask``) share one dispatch without importing
each other.
"""

from __future__ import annotations

from . import _gbnn_cpu, _gbnn_cuda

__all__ = ["engine"]


def engine(device):
    """The engine module of a resolved device: ``_gbnn_cpu`` or ``_gbnn_cuda``."""
    return _gbnn_cuda if device == "cuda" else _gbnn_cpu
