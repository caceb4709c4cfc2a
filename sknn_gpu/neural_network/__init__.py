"""Neural-network estimators: :class:`GPUMLPClassifier`.

The names load on first use (:mod:`sknn_gpu._lazy`).
"""

from typing import TYPE_CHECKING

from .._lazy import attach

__all__ = ["GPUMLPClassifier"]

_EXPORTS = {"GPUMLPClassifier": "._mlp"}
__getattr__, __dir__ = attach(__name__, _EXPORTS)

if TYPE_CHECKING:  # what type checkers and IDEs read; at run time __getattr__ imports these
    from ._mlp import GPUMLPClassifier
