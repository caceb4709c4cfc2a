"""The package as a user installs it: a wheel built from the source tree, installed into a
fresh virtual environment, run from a folder outside the source tree.

The wheel is built without build isolation and installed without dependencies and without
an index, so nothing is downloaded: the build backend (setuptools, from the test extra)
and the runtime dependencies (NumPy, SciPy, scikit-learn, from this test environment)
are the ones already here. The fresh environment sees this environment's packages
through a ``.pth`` line written after the wheel is installed (``--system-site-packages``
alone would show the base interpreter's packages, not this virtual environment's); its
own site-packages come first, so ``import sknn_gpu`` finds the installed wheel, never
the editable checkout. The steps are the helpers of ``scripts/newcomer.py``, whose
``--offline`` journey (``tests/test_newcomer.py``) runs every example on such an install.
"""

from __future__ import annotations

import email.parser
import fnmatch
import json
import os
import shutil
import textwrap
import zipfile
from pathlib import Path

import pytest
from _scripts import newcomer

import sknn_gpu

ROOT = Path(__file__).resolve().parents[1]

#: build outputs, caches and environments that are not part of the source tree
_NOT_SOURCE = {
    ".git",
    ".venv",
    ".out",
    ".whl",
    "build",
    "dist",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
    "_build",
    "auto_examples",
    "generated",
    "sknn_gpu_examples_output",
}


def _ignore(folder, names):
    return [n for n in names if n in _NOT_SOURCE or n.endswith(".egg-info")]


_run = newcomer.run  # raises (an AssertionError) with the command's output unless it exits 0


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``(source copy, wheel path)``: the source tree copied (build outputs left out, so
    that concurrent builds never share a ``build/`` folder) and its wheel built there."""
    import setuptools

    major = int(setuptools.__version__.split(".")[0])
    if major < 77:
        pytest.fail(
            f"setuptools {setuptools.__version__} cannot build this pyproject.toml (the licence is an "
            "SPDX expression): the test extra installs setuptools>=77; reinstall it (make test)"
        )
    base = tmp_path_factory.mktemp("install")
    src, out = base / "src", base / "wheelhouse"
    shutil.copytree(ROOT, src, ignore=_ignore, symlinks=True)
    out.mkdir()
    return src, newcomer.build_wheel(src, out)


def test_wheel_carries_what_the_package_needs_at_run_time(built):
    src, wheel = built
    names = set(zipfile.ZipFile(wheel).namelist())
    pkg = src / "sknn_gpu"
    kernels = sorted(p.name for p in (pkg / "_kernels").iterdir() if p.suffix in (".cu", ".cuh", ".c"))
    assert len(kernels) >= 10 and {k.rsplit(".", 1)[1] for k in kernels} == {"cu", "cuh", "c"}
    missing = [k for k in kernels if f"sknn_gpu/_kernels/{k}" not in names]
    assert not missing, f"kernel sources left out of the wheel: {missing}"
    modules = [p.relative_to(src).as_posix() for p in pkg.rglob("*.py") if "__pycache__" not in p.parts]
    assert not [m for m in modules if m not in names], "Python modules left out of the wheel"
    assert "sknn_gpu/py.typed" in names
    top = {n.split("/", 1)[0] for n in names}
    assert top == {"sknn_gpu", f"{wheel.name.split('-')[0]}-{sknn_gpu.__version__}.dist-info"}, top
    for folder in ("tests", "benchmarks", "examples", "docs", "scripts"):
        assert not fnmatch.filter(names, f"*{folder}/*"), f"{folder}/ is in the wheel"
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)


def test_wheel_metadata_is_ready_for_an_index(built):
    _, wheel = built
    with zipfile.ZipFile(wheel) as zf:
        dist_info = next(n.split("/")[0] for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(zf.read(f"{dist_info}/METADATA").decode("utf-8"))
        entry_points = zf.read(f"{dist_info}/entry_points.txt").decode("utf-8")
    assert meta["Name"] == "sknn-gpu" and meta["Version"] == sknn_gpu.__version__
    assert meta["License-Expression"] == "BSD-3-Clause"
    assert meta["Requires-Python"] == ">=3.10"
    # the long description is the README, rendered as markdown
    assert meta["Description-Content-Type"] == "text/markdown"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert meta.get_payload().strip() == readme.strip()
    classifiers = meta.get_all("Classifier")
    assert "Environment :: GPU :: NVIDIA CUDA" in classifiers and "Typing :: Typed" in classifiers
    assert not [c for c in classifiers if c.startswith("License ::")], "the licence is the expression"
    assert any(u.startswith("Documentation, https://") for u in meta.get_all("Project-URL"))
    assert "scikit-learn" in meta["Keywords"].split(",")
    extras = set(meta.get_all("Provides-Extra"))
    assert {"cuda12", "cuda13", "dask", "demo", "examples", "test", "docs"} <= extras
    assert "sknn-gpu = sknn_gpu.cli:main" in entry_points


def test_metadata_lives_in_pyproject_and_setup_cfg_holds_tool_settings():
    """One source of package metadata: a [metadata] or [options] section in setup.cfg would
    be read by setuptools beside pyproject.toml."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg", encoding="utf-8")
    assert not {"metadata", "options"} & set(cfg.sections())
    assert cfg.has_section("tool:pytest")


@pytest.mark.slow
def test_installed_wheel_runs_outside_the_source_tree(built, tmp_path):
    _, wheel = built
    env_dir, work = tmp_path / "env", tmp_path / "work"
    work.mkdir()
    python = newcomer.create_venv(env_dir, with_pip=False)
    bindir = python.parent
    newcomer.install_wheel(python, wheel, cwd=work)
    site = newcomer.site_dir(python)
    newcomer.share_site_packages(python)  # after the install: the dependencies, from here

    script = textwrap.dedent(
        """
        import json, sys
        from pathlib import Path
        import numpy as np
        import sknn_gpu
        from sknn_gpu import FlyNNClassifier, GBNNMemory
        from sknn_gpu._kernels import kernel_dir, load_source
        from sknn_gpu._kernels._cpu import cpu_kernels_status

        rng = np.random.default_rng(0)
        X = rng.random((60, 8))
        y = (X[:, 0] > 0.5).astype(int)
        clf = FlyNNClassifier(n_components=64, k=8, random_state=0, device="cpu").fit(X, y)
        messages = rng.integers(0, 16, size=(30, 4))
        probes = messages.copy()
        probes[:, 0] = -1
        mem = GBNNMemory(random_state=0, device="cpu").fit(messages)
        print(json.dumps({
            "file": sknn_gpu.__file__,
            "version": sknn_gpu.__version__,
            "path": sys.path,
            "predicted": sorted(set(clf.predict(X).tolist())),
            "completed": float(mem.score(probes, messages)),
            "typed": (Path(sknn_gpu.__file__).parent / "py.typed").is_file(),
            "kernels": sorted(p.stem for p in kernel_dir().glob("*.cu")),
            "gemv_source": len(load_source("gemv")),
            "cpu_kernels": cpu_kernels_status(),
        }))
        """
    )
    env = newcomer.clean_env(SKNN_GPU_CACHE_DIR=str(work / "cache"))  # the C kernels compiled afresh
    res = json.loads(_run([python, "-c", script], cwd=work, env=env).stdout)
    assert Path(res["file"]).resolve().is_relative_to(env_dir.resolve()), res["file"]
    assert res["version"] == sknn_gpu.__version__
    # the one sknn_gpu on sys.path is the installed one (the source tree is not on it)
    entries = [Path(p) if p else work for p in res["path"]]  # '' is the working folder
    holders = {str(p.resolve()) for p in entries if (p / "sknn_gpu").is_dir()}
    assert holders == {str(site.resolve())}, holders
    assert set(res["predicted"]) <= {0, 1} and res["predicted"]
    assert 0.0 <= res["completed"] <= 1.0
    assert res["typed"] and "gemv" in res["kernels"] and res["gemv_source"] > 0
    # the C source ships in the wheel and compiles from where it was installed
    from sknn_gpu._kernels._cpu import _compiler

    if _compiler() is not None:
        assert res["cpu_kernels"].startswith("compiled with") and str(work) in res["cpu_kernels"]

    cli = bindir / ("sknn-gpu.exe" if os.name == "nt" else "sknn-gpu")
    helped = _run([cli, "--help"], cwd=work)
    assert helped.stdout.startswith("usage: sknn-gpu") and "halftone" in helped.stdout
    assert _run([cli, "--version"], cwd=work).stdout.strip() == f"sknn-gpu {sknn_gpu.__version__}"
