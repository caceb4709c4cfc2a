"""The engine of a resolved device for :class:`~sknn_gpu.fly.FlyNNClassifier`.

``engine(device)`` is ``_flynn_cpu`` (NumPy, the reference) or ``_flynn_cuda`` (the
CuPy engine); both have the same functions. It sits beside the engines so that the
estimator (``_flynn``) and its size estimate (``_flynn_size``) share one dispatch.
"""

from __future__ import annotations

from . import _flynn_cpu, _flynn_cuda

__all__ = ["engine"]


def engine(device):
    """The FlyNN engine of a resolved device: :mod:`._flynn_cpu` or :mod:`._flynn_cuda`."""
    return _flynn_cuda if device == "cuda" else _flynn_cpu
