"""Associative memories: the Gripon–Berrou clique network (:class:`GBNNMemory`).

Also the two closed-form helpers used to reason about its capacity,
:func:`theoretical_density` and :func:`erasure_error_rate`, and the model-selection
tools that probe what a memory stored: :class:`StoredMessagesCV`,
:func:`erased_recall_scorer` and :func:`erase_symbols`.
"""

from ._capacity import erasure_error_rate, theoretical_density
from ._gbnn import GBNNMemory, RetrievalResult
from ._model_selection import StoredMessagesCV, erase_symbols, erased_recall_scorer

__all__ = [
    "GBNNMemory",
    "RetrievalResult",
    "theoretical_density",
    "erasure_error_rate",
    "StoredMessagesCV",
    "erased_recall_scorer",
    "erase_symbols",
]
