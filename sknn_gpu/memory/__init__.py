"""Associative memories: the Gripon–Berrou clique network (:class:`GBNNMemory`).

Also the two closed-form helpers used to reason about its capacity:
:func:`theoretical_density` and :func:`erasure_error_rate`.
"""

from ._capacity import erasure_error_rate, theoretical_density
from ._gbnn import GBNNMemory, RetrievalResult

__all__ = ["GBNNMemory", "RetrievalResult", "theoretical_density", "erasure_error_rate"]
