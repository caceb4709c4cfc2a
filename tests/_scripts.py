"""The repository's stand-alone scripts (``scripts/*.py``) as modules, for the tests that use
their helpers: ``from _scripts import newcomer``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load(name):
    """Import ``scripts/<name>.py`` once, under a private module name."""
    key = f"_sknn_gpu_script_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, SCRIPTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module  # before running it: its dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules[key]


newcomer = load("newcomer")
