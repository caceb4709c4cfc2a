"""Fly-inspired hashing and classification: FlyHash and FlyNN."""

from ._federated import fit_federated, merge_flynn
from ._flyhash import FlyHashTransformer
from ._flynn import PAPERS_FLYNN, FlyNNClassifier
from ._wta import wta

__all__ = ["FlyHashTransformer", "wta", "FlyNNClassifier", "PAPERS_FLYNN", "merge_flynn", "fit_federated"]
