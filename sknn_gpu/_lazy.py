"""Lazy public names for the package ``__init__`` files (PEP 562).

A package lists its public names and the private module defining each; a name's module is
imported the first time the name is read (``sknn_gpu.FlyNNClassifier``, ``from sknn_gpu
import FlyNNClassifier``, ``from sknn_gpu import *``), then kept in the package's namespace.
So ``import sknn_gpu`` costs no estimator family, scikit-learn or SciPy, and
``sknn-gpu --help`` answers at once. Type checkers read the same names from the
``if TYPE_CHECKING:`` imports that each ``__init__`` keeps beside its table.

Importing this module imports nothing outside the standard library.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["attach"]


def attach(
    package: str, exports: Mapping[str, str], submodules: Iterable[str] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for the package named ``package``.

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    exports : mapping of str to str
        Public name -> the module defining it, relative to the package (``"._flynn"``).
    submodules : iterable of str
        Subpackages and modules reachable as attributes (``sknn_gpu.fly``) without an
        ``import`` of their own, as when the package imported them eagerly.
    """
    exports = dict(exports)
    submodules = frozenset(submodules)
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        if name in exports:
            value = getattr(importlib.import_module(exports[name], package), name)
        elif name in submodules:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value  # later reads find it without calling back here
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports) | submodules)

    return __getattr__, __dir__
