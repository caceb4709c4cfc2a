"""Fly-inspired hashing and classification: FlyHash and FlyNN."""

from ._federated import fit_federated, merge_flynn
from ._flyhash import FlyHashTransformer
from ._flynn import FlyNNClassifier
from ._wta import wta

__all__ = ["FlyHashTransformer", "wta", "FlyNNClassifier", "merge_flynn", "fit_federated"]
