"""Arbitrary-structured sparse networks: :class:`SparseGraph` and :class:`SparseNetRegressor`.

The names load on first use (:mod:`sknn_gpu._lazy`).
"""

from typing import TYPE_CHECKING

from .._lazy import attach

__all__ = ["ACTIVATIONS", "SparseGraph", "SparseNetRegressor"]

_EXPORTS = {"ACTIVATIONS": "._graph", "SparseGraph": "._graph", "SparseNetRegressor": "._sparsenet"}
__getattr__, __dir__ = attach(__name__, _EXPORTS)

if TYPE_CHECKING:  # what type checkers and IDEs read; at run time __getattr__ imports these
    from ._graph import ACTIVATIONS, SparseGraph
    from ._sparsenet import SparseNetRegressor
