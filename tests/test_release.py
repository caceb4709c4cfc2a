"""Release basics: the private scikit-learn APIs we rely on, licence, citation, typing marker."""

import ast
import importlib
import pathlib
import re

import pytest

import sknn_gpu

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = ROOT / "sknn_gpu"


def _private_sklearn_imports():
    """Every ``from sklearn... import _name`` (or import from a private sklearn module) in sknn_gpu."""
    found = set()
    for path in PKG.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sklearn"):
                private_module = any(part.startswith("_") for part in node.module.split("."))
                for alias in node.names:
                    if private_module or alias.name.startswith("_"):
                        found.add((node.module, alias.name))
    return sorted(found)


PRIVATE = _private_sklearn_imports()


def test_the_private_api_scan_finds_what_we_know_we_use():
    names = {name for _mod, name in PRIVATE}
    assert {"_fit_context", "StrOptions", "Interval", "_check_sample_weight"} <= names


@pytest.mark.parametrize("module,name", PRIVATE, ids=lambda v: str(v))
def test_private_sklearn_api_still_exists(module, name):
    """The upper bound on scikit-learn in pyproject.toml is raised only when this passes."""
    mod = importlib.import_module(module)
    assert hasattr(mod, name), f"{module}.{name} is gone from this scikit-learn"


def test_private_sklearn_api_behaves_as_we_use_it():
    import numbers

    import numpy as np
    from sklearn.base import BaseEstimator
    from sklearn.utils._param_validation import Interval, StrOptions, validate_params

    @validate_params(
        {"a": [Interval(numbers.Integral, 1, None, closed="left")], "b": [StrOptions({"x"})]},
        prefer_skip_nested_validation=True,
    )
    def f(a, b):
        return a

    assert f(2, "x") == 2
    with pytest.raises(ValueError, match="'a' parameter"):
        f(0, "x")

    from sknn_gpu._sklearn_compat import _fit_context

    class Est(BaseEstimator):
        _parameter_constraints = {"a": [Interval(numbers.Integral, 1, None, closed="left")]}

        def __init__(self, a=1):
            self.a = a

        @_fit_context(prefer_skip_nested_validation=True)
        def fit(self, X=None):
            self.fitted_ = np.arange(self.a)
            return self

    assert Est(3).fit().fitted_.tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="'a' parameter of Est"):
        Est(0).fit()


def test_scikit_learn_bound_in_pyproject_admits_the_installed_version():
    import sklearn

    text = (ROOT / "pyproject.toml").read_text()
    m = re.search(r'"scikit-learn>=([\d.]+),<([\d.]+)"', text)
    assert m, "scikit-learn needs a lower and an upper bound (private APIs)"
    ver = tuple(int(p) for p in re.findall(r"\d+", sklearn.__version__)[:2])
    lo = tuple(int(p) for p in m.group(1).split("."))[:2]
    hi = tuple(int(p) for p in m.group(2).split("."))[:2]
    assert lo <= ver < hi


def test_license_citation_changelog_and_typing_marker():
    yaml = pytest.importorskip("yaml")
    assert "BSD 3-Clause" in (ROOT / "LICENSE").read_text()
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["version"] == sknn_gpu.__version__
    assert len(cff["references"]) >= 6  # the seed papers behind the six estimators
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## [{sknn_gpu.__version__}]" in changelog
    assert (PKG / "py.typed").is_file()
    assert '"sknn_gpu" = ["py.typed"]' in (ROOT / "pyproject.toml").read_text()


def _public_callables():
    """Every function in a public ``__all__`` and every public method of the classes there."""
    import importlib
    import inspect

    seen, out = set(), []
    packages = ("", ".fly", ".memory", ".halftone", ".sparse", ".neural_network")
    packages += (".linalg", ".metrics", ".device")
    for name in ("sknn_gpu" + p for p in packages):
        mod = importlib.import_module(name)
        for attr in mod.__all__:
            obj = getattr(mod, attr)
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if inspect.isclass(obj) and obj.__module__.startswith("sknn_gpu"):
                for meth_name, meth in vars(obj).items():
                    if inspect.isfunction(meth) and not meth_name.startswith("_"):
                        out.append((f"{obj.__name__}.{meth_name}", meth))
            elif inspect.isfunction(obj) and obj.__module__.startswith("sknn_gpu"):
                out.append((f"{obj.__module__}.{attr}", obj))
    return out


def test_public_api_is_annotated():
    """py.typed promises annotations: every parameter and return of the public functions and
    of the estimators' public methods carries one (constructors document theirs in the
    class docstring and scikit-learn's parameter constraints)."""
    import inspect

    missing = []
    callables = _public_callables()
    assert len(callables) > 50  # the walk found the API (57 callables on 2026-11-23)
    for name, fn in callables:
        ann = fn.__annotations__
        for p in inspect.signature(fn).parameters.values():
            if p.name in ("self", "cls") or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            if p.name not in ann:
                missing.append(f"{name}({p.name})")
        if "return" not in ann:
            missing.append(f"{name} -> ?")
    assert not missing, f"{len(missing)} missing annotations: {missing[:20]}"
