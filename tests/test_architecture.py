"""The package's layering, checked from the source: no import circles, families apart, readable modules.

Every module under ``sknn_gpu/`` is parsed (never imported) and every import in it is
collected, at module level and inside functions and methods alike (a function-level
import is a dependency too; it only runs later). Relative imports are resolved, and
``from package import name`` counts as an import of the submodule ``package.name`` when
that is a module, else of the package itself.

A package ``__init__`` that re-exports its submodules is the normal shape, and importing
a submodule runs its package's ``__init__`` first without that being a dependency of
the submodule on its siblings: so ``from . import _x`` is an edge to ``_x`` alone, not
to the package. A circle is then what it means in plain words: ``a`` imports ``b`` and
``b`` imports ``a``, directly or through a longer chain (``a`` imports ``b``, ``b``
imports ``c``, ``c`` imports ``a``), wherever the imports sit.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG_NAME = "sknn_gpu"
PKG = ROOT / PKG_NAME

#: The estimator families: none of them imports another.
FAMILIES = ("memory", "fly", "halftone", "sparse", "neural_network")
#: The shared floor every family stands on: it imports no family.
CORE = (
    "_backend",
    "base",
    "_kernels",
    "linalg",
    "_dask",
    "_progress",
    "_typing",
    "_version",
    "_sklearn_compat",
    "_constraints",
    "io",
    "_mt19937",
)
#: The one module allowed to import scikit-learn's private names.
SKLEARN_COMPAT = "sknn_gpu._sklearn_compat"
#: Modules longer than this need a module docstring line starting with "Size:".
MAX_LINES = 800


# ----------------------------------------------------------------------------- the graph
def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, pathlib.Path]:
    """``{dotted name: path}`` of every module of the package (packages by their ``__init__``)."""
    return {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute name of ``from <level dots><target> import ...`` written in ``module``."""
    if level == 0:
        return target or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]  # a plain module's imports are relative to its package
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _known(name: str, modules) -> str | None:
    """The longest prefix of ``name`` that is a module of the package (None outside it)."""
    parts = name.split(".")
    while parts:
        cand = ".".join(parts)
        if cand in modules:
            return cand
        parts.pop()
    return None


def import_edges(module: str, source: str, modules, is_package: bool = False) -> dict[str, int]:
    """``{imported package module: line of the first such import}`` for one module's source."""
    edges: dict[str, int] = {}

    def add(target, line):
        if target is not None and target != module:
            edges.setdefault(target, line)

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(_known(alias.name, modules), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node.level, node.module)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                add(sub if sub in modules else _known(base, modules), node.lineno)
    return edges


def _graph():
    modules = _modules()
    graph, lines = {}, {}
    for name, path in modules.items():
        edges = import_edges(name, path.read_text(encoding="utf-8"), modules, path.name == "__init__.py")
        graph[name] = sorted(edges)
        lines.update({(name, t): ln for t, ln in edges.items()})
    return graph, lines


# ----------------------------------------------------------------------------- circles
def find_cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """One circle ``[a, b, ..., a]`` per strongly connected component that holds one.

    Tarjan's algorithm (iterative) finds the components; inside each, a shortest path
    from its first member back to itself is the circle reported.
    """
    index, low, on_stack, stack, comps = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(graph.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph.get(child, ()))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        comp.append(member)
                        if member == node:
                            break
                    if len(comp) > 1 or node in graph.get(node, ()):
                        comps.append(sorted(comp))
    return [_circle(graph, comp) for comp in comps]


def _circle(graph, comp):
    """A shortest path ``[start, ..., start]`` inside the component ``comp`` (breadth first)."""
    members, start = set(comp), comp[0]
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(graph.get(node, ())):
                if child == start:
                    path = [node]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return path[::-1] + [start]
                if child in members and child not in prev:
                    prev[child] = node
                    nxt.append(child)
        frontier = nxt
    raise AssertionError(f"no circle through {start} in {comp}")  # pragma: no cover


def test_cycle_finder_finds_circles_on_a_toy_graph():
    """The checker can fail: two-, three- and one-module circles are found, chains and a
    package importing its own children are not circles."""
    graph = {
        "p": ["p.a", "p.b"],  # a package __init__ re-exporting its children
        "p.a": ["p.b", "core"],
        "p.b": ["core"],
        "core": [],
        "x": ["y"],
        "y": ["x"],  # x <-> y
        "u": ["v"],
        "v": ["w"],
        "w": ["u", "core"],  # u -> v -> w -> u
        "s": ["s"],  # a module importing itself
    }
    cycles = find_cycles(graph)
    assert sorted(cycles) == [["s", "s"], ["u", "v", "w", "u"], ["x", "y", "x"]]
    assert find_cycles({k: v for k, v in graph.items() if k in ("p", "p.a", "p.b", "core")}) == []


def test_import_edges_resolve_relative_and_function_level_imports():
    """The edges of a module's source: relative imports resolved against its package,
    ``from . import x`` to the submodule when ``x`` is one, imports inside functions
    counted, imports from outside the package ignored."""
    modules = {"pkg", "pkg.fam", "pkg.fam._est", "pkg.fam._eng", "pkg._core"}
    source = (
        "import numpy as np\n"
        "from .. import _core\n"
        "from . import _eng, NAME\n"
        "def later():\n"
        "    from ._est import Est\n"
        "    import pkg._core\n"
    )
    edges = import_edges("pkg.fam._x", source, modules)
    assert edges == {"pkg._core": 2, "pkg.fam._eng": 3, "pkg.fam": 3, "pkg.fam._est": 5}
    # a package __init__'s relative imports are relative to the package itself
    assert import_edges("pkg.fam", "from ._est import Est\n", modules, is_package=True) == {"pkg.fam._est": 1}


def test_no_import_circles():
    graph, lines = _graph()
    cycles = find_cycles(graph)

    def show(cycle):
        steps = [f"{a} (line {lines[(a, b)]})" for a, b in zip(cycle, cycle[1:])]
        return " -> ".join([*steps, cycle[-1]])

    assert not cycles, "import circles inside sknn_gpu/:\n" + "\n".join(show(c) for c in cycles)


def _family(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in FAMILIES else None


def _is_core(module: str) -> bool:
    parts = module.split(".")
    return len(parts) > 1 and parts[1] in CORE


def test_families_stay_apart_and_the_core_imports_no_family():
    graph, lines = _graph()
    present = {m.split(".")[1] for m in graph if "." in m}
    assert set(FAMILIES) | set(CORE) <= present, "a family or core module listed here is gone"
    bad = []
    for module, targets in graph.items():
        for target in targets:
            tf = _family(target)
            if tf is None:
                continue
            where = f"{module} imports {target} (line {lines[(module, target)]})"
            if _family(module) not in (None, tf):
                bad.append(f"{where}: one family imports another")
            elif _is_core(module):
                bad.append(f"{where}: the shared core imports no family")
    assert not bad, "\n".join(bad)


# ----------------------------------------------------------------------------- private scikit-learn
def _is_private(dotted: str) -> bool:
    """A name with a component starting with ``_`` (dunders such as ``__version__`` are public)."""
    return any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in dotted.split("."))


def private_sklearn_imports(source: str) -> list[tuple[int, str]]:
    """``[(line, 'sklearn.x._y.name'), ...]``: every private scikit-learn name a module's source
    imports or reaches by attribute (``sklearn.utils._x.f``), at any depth of the module."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "sklearn":
                for alias in node.names:
                    name = f"{node.module}.{alias.name}"
                    if _is_private(name):
                        found.append((node.lineno, name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "sklearn" and _is_private(alias.name):
                    found.append((node.lineno, alias.name))
        elif isinstance(node, ast.Attribute) and _is_private(node.attr):  # sklearn.a._b in an expression
            text = ast.unparse(node)
            if text.split(".")[0] == "sklearn" and _is_private(text) and "(" not in text:
                found.append((node.lineno, text))
    return sorted(set(found))


def test_private_sklearn_scan_on_toy_sources():
    """The checker can fail: each way of reaching a private name is found, public ones are not."""
    source = (
        "import sklearn\n"
        "from sklearn.base import BaseEstimator, _fit_context\n"
        "from sklearn.utils._param_validation import Interval\n"
        "import sklearn.utils._set_output as so\n"
        "def later():\n"
        "    from sklearn.utils.validation import _check_sample_weight\n"
        "    return sklearn.neural_network._stochastic_optimizers\n"
        "from sklearn.utils.validation import check_is_fitted\n"
        "from ._param_validation import Interval\n"  # our own relative module, not scikit-learn's
        "v = sklearn.__version__\n"
    )
    assert private_sklearn_imports(source) == [
        (2, "sklearn.base._fit_context"),
        (3, "sklearn.utils._param_validation.Interval"),
        (4, "sklearn.utils._set_output"),
        (6, "sklearn.utils.validation._check_sample_weight"),
        (7, "sklearn.neural_network._stochastic_optimizers"),
    ]


def test_only_the_compat_module_imports_private_sklearn_names():
    """scikit-learn's private names come through ``sknn_gpu/_sklearn_compat.py`` alone, so a new
    scikit-learn release can break nothing else (see that module's docstring)."""
    modules = _modules()
    assert SKLEARN_COMPAT in modules
    bad = []
    for name, path in modules.items():
        if name == SKLEARN_COMPAT:
            continue
        for line, what in private_sklearn_imports(path.read_text(encoding="utf-8")):
            bad.append(f"{path.relative_to(ROOT)}:{line} imports {what}")
    assert not bad, "import these from sknn_gpu._sklearn_compat instead:\n" + "\n".join(bad)
    assert private_sklearn_imports(modules[SKLEARN_COMPAT].read_text(encoding="utf-8")), (
        "the scan sees nothing"
    )


def _catches_import_error(node: ast.Try) -> bool:
    names = {"ImportError", "ModuleNotFoundError", "Exception"}
    for handler in node.handlers:
        caught = handler.type
        elts = caught.elts if isinstance(caught, ast.Tuple) else [caught]
        if caught is None or any(isinstance(e, ast.Name) and e.id in names for e in elts):
            return True
    return False


def unguarded_private_sklearn_imports(source: str) -> list[tuple[int, str]]:
    """The private scikit-learn names of ``source`` (:func:`private_sklearn_imports`) that are
    not inside the body of a ``try`` whose handler catches ``ImportError``: those a release
    that moves the name turns into an error instead of a fallback."""
    private = dict(private_sklearn_imports(source))
    guarded = set()

    def visit(node, inside):
        if isinstance(node, ast.Try) and _catches_import_error(node):
            for child in node.body:
                visit(child, True)
            for child in (*node.handlers, *node.orelse, *node.finalbody):
                visit(child, inside)
            return
        if inside and getattr(node, "lineno", None) in private:
            guarded.add(node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(ast.parse(source), False)
    return sorted((line, what) for line, what in private.items() if line not in guarded)


def test_unguarded_private_import_scan_on_toy_source():
    source = (
        "try:\n"
        "    from sklearn.utils._set_output import _get_output_config\n"
        "except ImportError:\n"
        "    _get_output_config = None\n"
        "from sklearn.base import _fit_context\n"
        "try:\n"
        "    from sklearn.utils._x import y\n"
        "except KeyError:\n"
        "    pass\n"
    )
    assert unguarded_private_sklearn_imports(source) == [
        (5, "sklearn.base._fit_context"),
        (7, "sklearn.utils._x.y"),
    ]


def test_the_compat_module_reads_private_names_only_behind_a_fallback():
    """No private scikit-learn name is needed: each one is imported inside a ``try`` that falls
    back to our own code, so pyproject.toml sets no upper bound on scikit-learn."""
    source = _modules()[SKLEARN_COMPAT].read_text(encoding="utf-8")
    assert unguarded_private_sklearn_imports(source) == []


# ----------------------------------------------------------------------------- size
def _has_size_line(source: str) -> bool:
    doc = ast.get_docstring(ast.parse(source)) or ""
    return any(line.strip().startswith("Size:") for line in doc.splitlines())


def test_size_line_is_read_from_the_module_docstring():
    assert _has_size_line('"""Title.\n\nSize: one coherent thing.\n"""\nx = 1\n')
    assert not _has_size_line('"""Title."""\n# Size: a comment is not the docstring\n')
    assert not _has_size_line("x = 1\n")


@pytest.mark.parametrize("path", sorted(PKG.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_size(path):
    source = path.read_text(encoding="utf-8")
    n = len(source.splitlines())
    assert n <= MAX_LINES or _has_size_line(source), (
        f"{path.relative_to(ROOT)} has {n} lines (over {MAX_LINES}): split it along a real seam, "
        "or say in its module docstring, on a line starting with 'Size:', why it is one thing."
    )
