"""sknn_gpu: scikit-learn-compatible GPU-accelerated brain-inspired and sparse neural estimators.

Every estimator runs on NumPy (``device='cpu'``) or on our own CUDA kernels through
CuPy (``device='cuda'``); ``device='auto'`` (the default) picks the GPU when one is
usable. Importing this package never imports CuPy.
"""

__version__ = "0.1.0"

from ._backend import InsufficientMemoryError, config_context, get_config, set_config  # noqa: E402
from .fly import FlyHashTransformer, FlyNNClassifier  # noqa: E402
from .halftone import DTCNNHalftoner  # noqa: E402
from .memory import GBNNMemory  # noqa: E402
from .neural_network import GPUMLPClassifier  # noqa: E402
from .sparse import SparseNetRegressor  # noqa: E402

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
