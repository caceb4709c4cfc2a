"""sknn_gpu: scikit-learn-compatible GPU-accelerated brain-inspired and sparse neural estimators.

Every estimator runs on NumPy (``device='cpu'``) or on our own CUDA kernels through
CuPy (``device='cuda'``); ``device='auto'`` (the default) picks the GPU when one is
usable. Importing this package never imports CuPy.
"""

from ._backend import InsufficientMemoryError, config_context, get_config, set_config
from ._version import __version__
from .fly import FlyHashTransformer, FlyNNClassifier
from .halftone import DTCNNHalftoner
from .memory import GBNNMemory
from .neural_network import GPUMLPClassifier
from .sparse import SparseNetRegressor

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
