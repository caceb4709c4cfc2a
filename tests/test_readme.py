"""Every Python block in README.md and in the user guide runs as written, on the CPU.

README blocks run one by one and each prints its result. A user guide page's blocks run in
order in one namespace (a page builds on its earlier blocks), after a short preamble defined
here that stands in for the data the page's text describes (``X``, ``messages``, an image), at
small sizes. A block that cannot run on a machine without a GPU or a Dask cluster carries a
marker on the line right before its fence, and is skipped:

    <!-- docs-test: needs-gpu -->            CuPy data, device='cuda', a GPU-only feature
    <!-- docs-test: needs-dask-cluster -->   a distributed Client or LocalCluster

Any other marker is an error. README.md itself must not need either.
"""

from __future__ import annotations

import importlib.util
import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GUIDE = ROOT / "docs" / "user_guide"
MARKERS = {"needs-gpu", "needs-dask-cluster"}
BLOCK = re.compile(
    r"(?:^<!-- docs-test: (?P<marker>[^>]*?) -->\n)?^```python\n(?P<code>.*?)^```", re.M | re.S
)


def blocks(path):
    """``[(line, marker or None, code), ...]`` of a markdown file's ```python blocks."""
    text = path.read_text(encoding="utf-8")
    out = []
    for m in BLOCK.finditer(text):
        line = text.count("\n", 0, m.start("code"))
        out.append((line, m.group("marker"), m.group("code")))
    return out


def test_block_finder_reads_markers():
    text = "a\n```python\nx = 1\n```\n<!-- docs-test: needs-gpu -->\n```python\ny = 2\n```\n```bash\nz\n```\n"
    path = Path(__file__).with_name("_blocks_probe.md")
    try:
        path.write_text(text, encoding="utf-8")
        found = blocks(path)
    finally:
        path.unlink()
    assert [(marker, code) for _, marker, code in found] == [(None, "x = 1\n"), ("needs-gpu", "y = 2\n")]
    assert [line for line, _, _ in found] == [2, 6]


# ---------------------------------------------------------------------------------- README

README_BLOCKS = blocks(README)


def test_readme_is_short_and_shows_the_figure_first():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150
    images = [i for i, line in enumerate(lines) if line.startswith("![")]
    assert images and images[0] < 30, "the summary figure is in the first screen"
    target = re.search(r"\]\(([^)]+\.png)\)", lines[images[0]]).group(1)
    assert (ROOT / target).is_file()
    assert len(README_BLOCKS) >= 1 and all(code.count("\n") <= 15 for _, _, code in README_BLOCKS)


def test_readme_links_resolve():
    text = README.read_text(encoding="utf-8")
    links = [t for t in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text) if not re.match(r"[a-z]+://", t)]
    assert len(links) >= 10
    missing = [t for t in links if not (ROOT / t).exists()]
    assert not missing


def test_docs_do_not_claim_an_index_install():
    """The package is on no index: installs name the source tree or a built wheel."""
    text = README.read_text(encoding="utf-8")
    assert ".[cuda12]" in text and ".[cuda13]" in text and "python -m build" in text
    pages = [README, *sorted((ROOT / "docs").glob("**/*.md"))]
    pages = [p for p in pages if not {"_build", "auto_examples"} & set(p.parts)]
    bad = [
        f"{p.relative_to(ROOT)}: {line.strip()}"
        for p in pages
        for line in p.read_text(encoding="utf-8").splitlines()
        if re.search(r"pip install [\"']?sknn-gpu", line)
    ]
    assert not bad


@pytest.mark.parametrize("block", README_BLOCKS, ids=[f"README:{line}" for line, _, _ in README_BLOCKS])
def test_readme_block_runs(block, capsys):
    line, marker, code = block
    assert marker is None, "README examples run on any machine"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence notes of the short fits
        exec(compile("\n" * line + code, str(README), "exec"), {"__name__": "__readme__"})
    assert capsys.readouterr().out.strip(), "each README block prints its result"


def test_summary_figure_is_drawn_from_the_performance_pages_results():
    """The README's figure reads the recorded runs that docs/performance.md is generated from."""
    tomllib = pytest.importorskip("tomllib")
    spec = importlib.util.spec_from_file_location("plot_summary", ROOT / "benchmarks" / "plot_summary.py")
    plot_summary = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plot_summary)
    rows = plot_summary.ratios()
    six = {"GBNNMemory", "FlyHashTransformer", "FlyNNClassifier", "DTCNNHalftoner"}
    six |= {"SparseNetRegressor", "GPUMLPClassifier"}
    assert {r[0] for r in rows} == six
    assert all(t_ours > 0 and t_peer > 0 for *_, t_ours, t_peer in rows)
    manifest = tomllib.loads((ROOT / "benchmarks" / "results" / "manifest.toml").read_text(encoding="utf-8"))
    used = {w[2] for w in plot_summary.WORKLOADS} | {w[1] for w in plot_summary.MLP_WORKLOADS}
    assert used <= set(manifest["files"]), "redraw the figure from the files the performance page uses"


# ------------------------------------------------------------------------------ user guide

#: what a page's text describes but its blocks do not build, small enough for a slow CPU
PREAMBLE = {
    "devices.md": "",
    "dtcnn.md": """
import numpy as np
img = np.linspace(0.0, 1.0, 48 * 40).reshape(48, 40)
photos = (np.random.default_rng(0).random((3, 32, 32)) * 255).astype(np.uint8)
from sknn_gpu import DTCNNHalftoner
""",
    "flyhash.md": """
import numpy as np
X = np.random.default_rng(0).random((40, 24))
""",
    "gbnn.md": """
import numpy as np
rng = np.random.default_rng(0)
messages = rng.integers(0, 32, size=(200, 6))
messages_true = messages[:50]
probes = messages_true.copy()
probes[:, :2] = -1
words = messages
""",
    "mlp.md": """
import numpy as np
rng = np.random.default_rng(0)
X = rng.random((60, 12))
y = (X[:, 0] > 0.5).astype(int)
w = rng.random(60) + 0.5
X_big, y_big = X, y
A = rng.random((16, 16), dtype=np.float32)
x = rng.random(16, dtype=np.float32)
u = rng.random(16, dtype=np.float32)
v = rng.random(16, dtype=np.float32)
""",
    "scaling_out.md": "",
    "flynn.md": """
import io
import numpy as np
from sklearn.datasets import load_digits
from sknn_gpu.fly import FlyNNClassifier
X_pix, y_pix = load_digits(return_X_y=True)
X_pix = X_pix * 15  # pixels 0..240
parties = [(X_pix[:900], y_pix[:900]), (X_pix[900:], y_pix[900:])]
payloads = []
for X_p, y_p in parties:
    model = FlyNNClassifier(input_range=(0, 255), random_state=0).fit(X_p, y_p)
    buf = io.BytesIO()
    model.export_counts(buf)
    payloads.append(buf.getvalue())
""",
    "sparsenet.md": """
import numpy as np
from sknn_gpu.sparse import SparseNetRegressor
rng = np.random.default_rng(0)
X = rng.random((40, 5))
y = X.sum(axis=1)
reg = SparseNetRegressor(hidden_layer_sizes=(8,), max_iter=5, random_state=0).fit(X, y)
rows = [X[i : i + 1] for i in range(3)]
""",
}
#: pages whose blocks are not run yet, with the reason (their preamble may be ready)
#: guide pages whose blocks are not run, with the reason (none today)
NOT_RUN: dict[str, str] = {}
PAGES = sorted(p.name for p in GUIDE.glob("*.md") if blocks(p))


def test_every_guide_page_with_code_is_covered():
    assert PAGES, "the user guide has Python examples"
    for page in PAGES:
        assert page in PREAMBLE or page in NOT_RUN, page
        assert {m for _, m, _ in blocks(GUIDE / page)} <= MARKERS | {None}, page


@pytest.mark.parametrize("page", [p for p in PAGES if p in PREAMBLE and p not in NOT_RUN])
def test_guide_page_runs(page):
    import sklearn

    import sknn_gpu

    path = GUIDE / page
    ns = {"__name__": "__guide__"}
    ran = 0
    with sklearn.config_context(), sknn_gpu.config_context(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(PREAMBLE[page], f"<preamble of {page}>", "exec"), ns)
        for line, marker, code in blocks(path):
            if marker is not None:
                continue
            exec(compile("\n" * line + code, str(path), "exec"), ns)
            ran += 1
    if ran == 0:
        pytest.skip(f"every block of {page} needs a GPU or a Dask cluster")
