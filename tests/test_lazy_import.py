"""``import sknn_gpu`` and ``sknn-gpu --help`` import nothing heavy; the lazy names behave as
eager ones did (``__all__``, ``dir()``, ``from ... import``, ``import *``, type checkers).

What a fresh interpreter has imported is read from ``sys.modules`` in a subprocess (the
test process has imported everything already); no test here measures time.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["sknn_gpu", "sknn_gpu.fly", "sknn_gpu.halftone", "sknn_gpu.memory"]
PACKAGES += ["sknn_gpu.neural_network", "sknn_gpu.sparse"]
FAMILIES = ["fly", "halftone", "memory", "neural_network", "sparse"]

#: what a bare ``import sknn_gpu`` leaves out: every family, scikit-learn, SciPy and the optional stack
HEAVY = ["sklearn", "scipy", "scipy.sparse.linalg", "sklearn.neural_network", "joblib", "cupy", "dask"]
HEAVY += ["distributed", "matplotlib", "PIL", "faiss", "skimage", "neat", "tqdm"]
HEAVY += [f"sknn_gpu.{f}" for f in FAMILIES] + ["sknn_gpu._backend", "sknn_gpu.base", "sknn_gpu._kernels"]


def imported_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_probe_sees_what_an_import_brings():
    """The probe can fail: importing a family shows scikit-learn and the family."""
    mods = imported_after("import sknn_gpu.memory._gbnn")
    assert {"sklearn", "sklearn.base", "sknn_gpu.memory", "sknn_gpu._backend"} <= mods


def test_import_sknn_gpu_imports_nothing_heavy():
    mods = imported_after("import sknn_gpu")
    assert "sknn_gpu" in mods
    assert not [m for m in HEAVY if m in mods]


def test_one_estimator_imports_its_family_alone():
    mods = imported_after("from sknn_gpu import FlyNNClassifier")
    assert "sknn_gpu.fly._flynn" in mods and "sklearn.base" in mods
    others = [f"sknn_gpu.{f}" for f in FAMILIES if f != "fly"]
    assert not [m for m in others + ["sklearn.neural_network", "cupy", "dask", "matplotlib"] if m in mods]


@pytest.mark.parametrize("argv", [["--help"], ["halftone", "--help"], ["--version"]])
def test_cli_help_imports_no_estimator_scikit_learn_or_scipy(argv):
    code = f"from sknn_gpu.cli import main\nassert main({argv!r}) == 0"
    mods = imported_after(code)
    assert "sknn_gpu.cli" in mods
    heavy = [m for m in mods if m.split(".")[0] in ("sklearn", "scipy", "cupy", "PIL", "joblib")]
    assert not heavy
    assert not [m for m in mods if m.startswith("sknn_gpu.halftone._dtcnn") or m == "sknn_gpu._backend"]


@pytest.mark.parametrize("name", PACKAGES)
def test_lazy_names_resolve_and_are_listed(name):
    pkg = importlib.import_module(name)
    assert pkg.__all__ and len(set(pkg.__all__)) == len(pkg.__all__)
    listed = dir(pkg)
    for attr in pkg.__all__:
        obj = getattr(pkg, attr)
        assert attr in listed
        if attr in pkg._EXPORTS:  # the lazy name is the object its table names
            assert getattr(importlib.import_module(pkg._EXPORTS[attr], name), attr) is obj
        else:  # eager (``__version__``): bound at import
            assert attr in vars(pkg)
    ns: dict = {}
    exec(f"from {name} import *", ns)
    assert set(pkg.__all__) <= set(ns)
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        pkg.not_a_name  # noqa: B018
    assert not hasattr(pkg, "not_a_name")


def test_public_names_are_the_defining_objects():
    import sknn_gpu
    from sknn_gpu.fly._flynn import FlyNNClassifier
    from sknn_gpu.memory._gbnn import GBNNMemory

    assert sknn_gpu.FlyNNClassifier is FlyNNClassifier and sknn_gpu.fly.FlyNNClassifier is FlyNNClassifier
    assert sknn_gpu.GBNNMemory is GBNNMemory and sknn_gpu.memory.GBNNMemory is GBNNMemory
    assert sknn_gpu.linalg.__name__ == "sknn_gpu.linalg"  # submodules reachable as attributes


def _type_checking_imports(path: Path) -> set[str]:
    """Names imported under ``if TYPE_CHECKING:`` in a module's source."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom):
                    names |= {a.asname or a.name for a in stmt.names}
    return names


@pytest.mark.parametrize("name", PACKAGES)
def test_type_checkers_see_every_public_name(name):
    """Static tools do not run ``__getattr__``: every lazy public name is also imported under
    ``if TYPE_CHECKING:``, from the module the lazy table names."""
    pkg = importlib.import_module(name)
    path = Path(pkg.__file__)
    static = _type_checking_imports(path)
    assert static == set(pkg.__all__) - {"__version__"}, static ^ (set(pkg.__all__) - {"__version__"})
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level and node.module and node.names[0].name in static:
            for alias in node.names:
                assert pkg._EXPORTS[alias.name] == "." + node.module, alias.name
