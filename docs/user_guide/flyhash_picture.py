"""Draw flyhash_picture.png for the FlyHash guide: two digits, their activations, their hashes.

Run from the repository root: ``python docs/user_guide/flyhash_picture.py`` (CPU, seconds).
Every number drawn is computed here by FlyHashTransformer on scikit-learn's digits.
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

from sknn_gpu import FlyHashTransformer  # noqa: E402

X, y = load_digits(return_X_y=True)
picks = [int(np.flatnonzero(y == 3)[0]), int(np.flatnonzero(y == 3)[1]), int(np.flatnonzero(y == 8)[0])]
fh = FlyHashTransformer(n_components=256, k=16, output="dense", random_state=0, device="cpu").fit(X)
H = fh.transform(X[picks])
A = X[picks].astype(np.float32) @ fh.components_.toarray().astype(np.float32).T  # (3, 256) activations

fig, axes = plt.subplots(3, 3, figsize=(9, 4.6), gridspec_kw={"width_ratios": [1, 4, 4]})
for row, i in enumerate(picks):
    axes[row, 0].imshow(X[i].reshape(8, 8), cmap="gray_r")
    axes[row, 0].set_xticks([])
    axes[row, 0].set_yticks([])
    axes[row, 0].set_ylabel(f"digit {y[i]}", fontsize=9)
    win = H[row].astype(bool)
    axes[row, 1].bar(np.arange(256), A[row], width=1.0, color=np.where(win, "tab:red", "tab:gray"))
    axes[row, 1].set_xlim(0, 256)
    axes[row, 1].set_yticks([])
    axes[row, 2].imshow(H[row].reshape(8, 32), cmap="Reds", vmin=0, vmax=1.3)
    axes[row, 2].set_xticks([])
    axes[row, 2].set_yticks([])
axes[0, 1].set_title("activations of 256 units (red: the k = 16 winners)", fontsize=9)
axes[0, 2].set_title("the hash: 16 of 256 bits set", fontsize=9)
# over the whole dataset: winners shared by digits of one class and of two classes
Hall = fh.transform(X).astype(np.int32)
rng = np.random.default_rng(0)
a, b = rng.integers(0, len(y), size=(2, 20_000))
shared = (Hall[a] & Hall[b]).sum(axis=1)
same, other = shared[(y[a] == y[b]) & (a != b)].mean(), shared[y[a] != y[b]].mean()
fig.suptitle(
    f"FlyHash of digits (k = 16 of 256): random pairs of one class share {same:.1f} winners on "
    f"average, pairs of two classes {other:.1f}",
    fontsize=10,
)
fig.tight_layout()
fig.savefig(Path(__file__).with_suffix(".png"), dpi=100)
print(f"mean shared winners: same class {same:.2f}, different classes {other:.2f}")
