"""Type aliases of the public API (annotations only; nothing here is checked at run time).

The estimators take and return several array types (NumPy, CuPy, SciPy/cupyx sparse,
Dask), which no single static type describes, so the aliases name what is meant and
the docstrings say which types each call accepts and returns.
"""

from __future__ import annotations

from typing import Any

#: input data: anything NumPy accepts (arrays, lists), CuPy arrays, SciPy/cupyx sparse
#: matrices, or Dask arrays, as each method's docstring says
ArrayLike = Any
#: a returned array: numpy.ndarray or cupy.ndarray (the input's type, or what
#: ``output_type`` says), a SciPy/cupyx sparse matrix, or a lazy Dask array
Array = Any

__all__ = ["ArrayLike", "Array"]
