"""What the example scripts share when they run as scripts (``python examples/plot_x.py``,
``make examples``); the gallery build hides these calls and draws the figures itself, and
a script copied alone runs without them (its figures are then not saved).

* :func:`save_figures`: every open matplotlib figure as a PNG in the folder named by
  ``SKNN_GPU_EXAMPLES_OUTPUT`` (default ``./sknn_gpu_examples_output``), then the
  folder is printed. Without a display the figures are drawn with the Agg backend.
* :func:`require`: a missing optional package stops the script with one line naming
  the extra that installs it.

``SKNN_GPU_EXAMPLES_SMALL=1`` asks each script for a small size (seconds on a laptop; what
the test suite runs): the scripts read it themselves, in plain sight.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from pathlib import Path

OUTPUT_ENV = "SKNN_GPU_EXAMPLES_OUTPUT"
DEFAULT_OUTPUT = "sknn_gpu_examples_output"

#: the distribution that provides an importable module (all of them in the examples extra)
PACKAGES = {
    "matplotlib": "matplotlib",
    "faiss": "faiss-cpu",
    "dask": "dask[distributed]",
    "distributed": "dask[distributed]",
    "PIL": "pillow",
    "skimage": "scikit-image",
}


def _in_gallery() -> bool:
    """True while sphinx-gallery runs the script (it collects the figures itself)."""
    return "sphinx_gallery" in sys.modules


def _script() -> str:
    return Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "example"


def require(*modules: str) -> None:
    """Stop with one line naming the extra when one of ``modules`` cannot be imported."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        names = ", ".join(dict.fromkeys(PACKAGES.get(m, m) for m in missing))
        raise SystemExit(
            f"{_script()} needs {names}: install the examples extra of sknn-gpu "
            '(`make examples`, or `pip install ".[examples]"` in its source tree)'
        )
    if "matplotlib" in modules and not _in_gallery() and not os.environ.get("MPLBACKEND"):
        headless = sys.platform.startswith("linux") and not (
            os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
        )
        if headless:
            import matplotlib

            matplotlib.use("Agg")


def output_dir() -> Path:
    """The folder the figures go to (created when needed)."""
    return Path(os.environ.get(OUTPUT_ENV) or DEFAULT_OUTPUT).expanduser().resolve()


def save_figures() -> list[Path]:
    """Save every open figure as ``<script>_<n>.png`` in :func:`output_dir` and print where.

    Earlier figures of the same script are replaced. Does nothing in the gallery build.
    """
    if _in_gallery():
        return []
    import matplotlib
    import matplotlib.pyplot as plt

    folder = output_dir()
    folder.mkdir(parents=True, exist_ok=True)
    stem = Path(_script()).stem
    for old in folder.glob(f"{stem}_*.png"):
        old.unlink()
    paths = []
    for n, num in enumerate(plt.get_fignums(), start=1):
        path = folder / f"{stem}_{n}.png"
        plt.figure(num).savefig(path, dpi=100)
        paths.append(path)
    print(f"{stem}: {len(paths)} figure(s) saved in {folder}: {', '.join(p.name for p in paths)}")
    if matplotlib.get_backend().lower() == "agg":  # plt.show() would only warn
        warnings.filterwarnings("ignore", message=".*non-interactive.*cannot be shown")
    return paths
