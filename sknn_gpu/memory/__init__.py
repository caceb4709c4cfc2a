"""Associative memories: the Gripon–Berrou clique network (:class:`GBNNMemory`).

Also the two closed-form helpers used to reason about its capacity,
:func:`theoretical_density` and :func:`erasure_error_rate`, and the model-selection
tools that probe what a memory stored: :class:`StoredMessagesCV`,
:func:`erased_recall_scorer` and :func:`erase_symbols`.

The names load on first use (:mod:`sknn_gpu._lazy`).
"""

from typing import TYPE_CHECKING

from .._lazy import attach

__all__ = [
    "GBNNMemory",
    "RetrievalResult",
    "theoretical_density",
    "erasure_error_rate",
    "StoredMessagesCV",
    "erased_recall_scorer",
    "erase_symbols",
]

_EXPORTS = {
    "GBNNMemory": "._gbnn",
    "RetrievalResult": "._gbnn",
    "theoretical_density": "._capacity",
    "erasure_error_rate": "._capacity",
    "StoredMessagesCV": "._model_selection",
    "erased_recall_scorer": "._model_selection",
    "erase_symbols": "._model_selection",
}
__getattr__, __dir__ = attach(__name__, _EXPORTS)

if TYPE_CHECKING:  # what type checkers and IDEs read; at run time __getattr__ imports these
    from ._capacity import erasure_error_rate, theoretical_density
    from ._gbnn import GBNNMemory, RetrievalResult
    from ._model_selection import StoredMessagesCV, erase_symbols, erased_recall_scorer
