"""
Quickstart: every estimator on real offline data
================================================

Runs each sknn_gpu estimator with ``device='auto'`` on data that ships offline
(scikit-learn's digits, its two sample photos, friedman1, random messages) and
prints one row per estimator: device used, wall time and a quality figure; the
figure shows the times. ``make demo`` prints the same table
(``python -m sknn_gpu.demo``).
"""

# %%

# sphinx_gallery_start_ignore
# as a script: figures saved to one folder, a missing package named (examples/_helpers.py)
try:
    from _helpers import require, save_figures
except ImportError:  # this file alone, e.g. downloaded from the gallery: figures not saved
    require = save_figures = lambda *modules: False
require("matplotlib", "PIL")
# sphinx_gallery_end_ignore
import matplotlib.pyplot as plt

from sknn_gpu.demo import format_table, run

rows = run()  # device='auto': the GPU when one is usable, else NumPy
print(format_table(rows))

# %%
# Time per estimator
# ------------------
# One call each in a fresh process: on a GPU this includes compiling each kernel once.
fig, ax = plt.subplots(figsize=(8, 3.5))
ms = [r["seconds"] * 1e3 for r in rows]
ax.barh([r["estimator"] for r in rows], ms, color="tab:blue")
for i, (t, r) in enumerate(zip(ms, rows)):
    ax.text(t * 1.15, i, r["quality"], va="center", fontsize=8)
ax.set_xscale("log")
ax.set_xlim(min(ms) / 2, max(ms) * 20)
ax.invert_yaxis()
ax.set_xlabel("wall time (ms)")
ax.set_title(f"sknn_gpu quickstart, device {rows[0]['device']!r}")
fig.tight_layout()
# sphinx_gallery_start_ignore
save_figures()
# sphinx_gallery_end_ignore
plt.show()
