"""sknn_gpu: scikit-learn-compatible GPU-accelerated brain-inspired and sparse neural estimators.

Every estimator runs on NumPy (``device='cpu'``) or on our own CUDA kernels through
CuPy (``device='cuda'``); ``device='auto'`` (the default) picks the GPU when one is
usable. Importing this package never imports CuPy.

The public names load on first use (:mod:`sknn_gpu._lazy`): ``import sknn_gpu`` imports
no estimator family, scikit-learn or SciPy; ``from sknn_gpu import FlyNNClassifier``
imports the fly family and what it needs, and nothing of the other families.
"""

from typing import TYPE_CHECKING

from ._lazy import attach
from ._version import __version__

__all__ = [
    "__version__",
    "InsufficientMemoryError",
    "config_context",
    "get_config",
    "set_config",
    "DTCNNHalftoner",
    "FlyHashTransformer",
    "FlyNNClassifier",
    "GBNNMemory",
    "GPUMLPClassifier",
    "SparseNetRegressor",
]

_EXPORTS = {
    "InsufficientMemoryError": "._backend",
    "config_context": "._backend",
    "get_config": "._backend",
    "set_config": "._backend",
    "DTCNNHalftoner": ".halftone",
    "FlyHashTransformer": ".fly",
    "FlyNNClassifier": ".fly",
    "GBNNMemory": ".memory",
    "GPUMLPClassifier": ".neural_network",
    "SparseNetRegressor": ".sparse",
}
#: reachable as ``sknn_gpu.<name>`` after a bare ``import sknn_gpu``
_SUBMODULES = ("fly", "halftone", "memory", "neural_network", "sparse", "device", "linalg", "metrics", "io")

__getattr__, __dir__ = attach(__name__, _EXPORTS, _SUBMODULES)

if TYPE_CHECKING:  # what type checkers and IDEs read; at run time __getattr__ imports these
    from ._backend import InsufficientMemoryError, config_context, get_config, set_config
    from .fly import FlyHashTransformer, FlyNNClassifier
    from .halftone import DTCNNHalftoner
    from .memory import GBNNMemory
    from .neural_network import GPUMLPClassifier
    from .sparse import SparseNetRegressor
