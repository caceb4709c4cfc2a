"""Release basics: the private scikit-learn names we read (behind fallbacks), licence, citation, typing."""

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


#: The private scikit-learn names sknn_gpu still reads, each behind a fallback of its own
#: (``sknn_gpu/_sklearn_compat.py``): a release that moves one costs the fallback, not an error.
GUARDED = {
    ("sklearn.utils._set_output", "_get_output_config"),
    ("sklearn.neural_network._stochastic_optimizers", "AdamOptimizer"),
    ("sklearn.neural_network._stochastic_optimizers", "SGDOptimizer"),
}


def test_the_private_api_scan_finds_only_the_guarded_names():
    assert set(PRIVATE) == GUARDED


@pytest.mark.parametrize("module,name", PRIVATE, ids=lambda v: str(v))
def test_private_sklearn_api_still_exists(module, name):
    """Whether this scikit-learn still has a name we read behind a fallback (when it fails,
    our own code is in use: nothing breaks, but the fallback is then the tested path)."""
    mod = importlib.import_module(module)
    assert hasattr(mod, name), f"{module}.{name} is gone from this scikit-learn"


def test_our_fit_context_and_constraints_behave_as_scikit_learn_estimators_do():
    import numbers

    import numpy as np
    import sklearn
    from sklearn.base import BaseEstimator

    from sknn_gpu._constraints import InvalidParameterError
    from sknn_gpu._sklearn_compat import Interval, StrOptions, _fit_context

    class Inner(BaseEstimator):
        _parameter_constraints = {"b": [StrOptions({"x"})]}

        def __init__(self, b="x"):
            self.b = b

        @_fit_context(prefer_skip_nested_validation=False)
        def fit(self, X=None):
            self.fitted_ = True
            return self

    class Est(BaseEstimator):
        _parameter_constraints = {"a": [Interval(numbers.Integral, 1, None, closed="left")]}

        def __init__(self, a=1, inner=None):
            self.a = a
            self.inner = inner

        @_fit_context(prefer_skip_nested_validation=True)
        def fit(self, X=None):
            self.fitted_ = np.arange(self.a)
            if self.inner is not None:
                self.inner.fit()  # nested: its checks are skipped
            return self

        @_fit_context(prefer_skip_nested_validation=True)
        def partial_fit(self, X=None):
            self.fitted_ = np.arange(self.a)
            return self

    assert Est(3).fit().fitted_.tolist() == [0, 1, 2]
    with pytest.raises(
        InvalidParameterError,
        match=r"The 'a' parameter of Est must be an int in the range \[1, inf\)\. Got 0 instead\.",
    ):
        Est(0).fit()
    assert issubclass(InvalidParameterError, ValueError) and issubclass(InvalidParameterError, TypeError)
    with pytest.raises(InvalidParameterError, match="'b' parameter of Inner"):
        Inner(b="y").fit()
    assert Est(2, inner=Inner(b="y")).fit().inner.fitted_  # nested validation skipped
    with sklearn.config_context(skip_parameter_validation=True):
        assert Est(0).fit().fitted_.tolist() == []  # the global setting is honoured
    fitted = Est(2).partial_fit()
    fitted.a = 0
    assert fitted.partial_fit().fitted_.tolist() == []  # a fitted partial_fit is not re-checked
    with pytest.raises(InvalidParameterError):
        Est(0).partial_fit()


def test_scikit_learn_bound_in_pyproject_admits_the_installed_version():
    """A lower bound only: no private name is read without a fallback, so no release is
    known to break the package."""
    import sklearn

    text = (ROOT / "pyproject.toml").read_text()
    m = re.search(r'"scikit-learn>=([\d.]+)"', text)
    assert m, "scikit-learn needs a lower bound and no upper one"
    ver = tuple(int(p) for p in re.findall(r"\d+", sklearn.__version__)[:2])
    lo = tuple(int(p) for p in m.group(1).split("."))[:2]
    assert lo <= ver


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
