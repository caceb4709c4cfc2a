"""Sphinx configuration: numpydoc docstrings, sphinx-gallery examples, MyST markdown pages."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sknn_gpu  # noqa: E402

project = "sknn_gpu"
author = "sknn_gpu developers"
copyright = "2026, sknn_gpu developers"
version = release = sknn_gpu.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
    "myst_parser",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "**.ipynb_checkpoints", "auto_examples/*.ipynb", "auto_examples/*.py"]
templates_path = ["_templates"]
html_static_path = ["_static"]
html_theme = "pydata_sphinx_theme"
html_title = f"sknn_gpu {release}"
html_theme_options = {"navigation_with_keys": False, "show_toc_level": 2}

autosummary_generate = True
autodoc_default_options = {"members": True, "inherited-members": False}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
myst_heading_anchors = 3
suppress_warnings = ["myst.header"]

sphinx_gallery_conf = {
    "examples_dirs": ["../examples"],
    "gallery_dirs": ["auto_examples"],
    # every example runs when the gallery is built (quickstart and the federated scripts
    # too, so their pages show their output); `make docs-check` builds without running them
    "filename_pattern": r"/(plot_|quickstart|federated_)",
    "ignore_pattern": r"(__init__|_helpers)\.py",
    "plot_gallery": os.environ.get("SKNN_GPU_DOCS_PLOT", "True"),
    "download_all_examples": False,
    "remove_config_comments": True,
    "matplotlib_animations": False,
}
