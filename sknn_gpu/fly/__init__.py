"""Fly-inspired hashing and classification: FlyHash and FlyNN.

The names load on first use (:mod:`sknn_gpu._lazy`): ``from sknn_gpu.fly import
FlyHashTransformer`` imports FlyHash alone.
"""

from typing import TYPE_CHECKING

from .._lazy import attach

__all__ = ["FlyHashTransformer", "wta", "FlyNNClassifier", "PAPERS_FLYNN", "merge_flynn", "fit_federated"]

_EXPORTS = {
    "FlyHashTransformer": "._flyhash",
    "wta": "._wta",
    "FlyNNClassifier": "._flynn",
    "PAPERS_FLYNN": "._flynn",
    "merge_flynn": "._federated",
    "fit_federated": "._federated",
}
__getattr__, __dir__ = attach(__name__, _EXPORTS)

if TYPE_CHECKING:  # what type checkers and IDEs read; at run time __getattr__ imports these
    from ._federated import fit_federated, merge_flynn
    from ._flyhash import FlyHashTransformer
    from ._flynn import PAPERS_FLYNN, FlyNNClassifier
    from ._wta import wta
