"""Image halftoning with asynchronous discrete-time cellular neural networks.

The names load on first use (:mod:`sknn_gpu._lazy`).
"""

from typing import TYPE_CHECKING

from .._lazy import attach

__all__ = ["DTCNNHalftoner", "bayer_matrix"]

_EXPORTS = {"DTCNNHalftoner": "._dtcnn", "bayer_matrix": "._dtcnn"}
__getattr__, __dir__ = attach(__name__, _EXPORTS)

if TYPE_CHECKING:  # what type checkers and IDEs read; at run time __getattr__ imports these
    from ._dtcnn import DTCNNHalftoner, bayer_matrix
