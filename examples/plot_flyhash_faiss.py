"""
FlyHash codes in a FAISS binary index
=====================================

:class:`~sknn_gpu.fly.FlyHashTransformer` with ``output='packed'`` returns the
hash as bytes in ``np.packbits`` layout, which is exactly what a FAISS binary
index stores: no conversion is needed. Here the 1,797 handwritten digits of
scikit-learn are hashed, put in an ``IndexBinaryFlat`` and searched by Hamming
distance; the neighbours found are compared with exact Euclidean neighbours.

The hash is locality-sensitive: the more winners (``k``) two inputs share, the
closer they tend to be. We measure, for several ``k``, how many of the 10
Hamming neighbours of each digit are among its 10 Euclidean neighbours, and
how often they carry the same label.
"""

# %%
# Hash the digits and index them
# ------------------------------

# sphinx_gallery_start_ignore
# as a script: figures saved to one folder, a missing package named (examples/_helpers.py)
try:
    from _helpers import require, save_figures
except ImportError:  # this file alone, e.g. downloaded from the gallery: figures not saved
    require = save_figures = lambda *modules: False
require("faiss", "matplotlib")
# sphinx_gallery_end_ignore
import time

import faiss
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits
from sklearn.neighbors import NearestNeighbors

from sknn_gpu.fly import FlyHashTransformer

faiss.omp_set_num_threads(1)  # 1,797 codes: one thread beats OpenMP start-up on small machines
X, y = load_digits(return_X_y=True)
X = X / 16.0
n_neighbors = 10

fh = FlyHashTransformer(expansion_factor=20.0, k=32, output="packed", random_state=0)
t0 = time.perf_counter()
codes = fh.fit_transform(X)  # uint8, shape (1797, 1280 / 8)
t_hash = time.perf_counter() - t0
print(f"hash: {codes.shape[1] * 8} bits per digit, {fh.k_} ones, on {fh.device_}, {t_hash * 1e3:.1f} ms")

index = faiss.IndexBinaryFlat(codes.shape[1] * 8)
index.add(codes)
_, hamming_nn = index.search(codes, n_neighbors + 1)  # the first hit is the query itself
hamming_nn = hamming_nn[:, 1:]

# %%
# Compare with exact Euclidean neighbours
# ---------------------------------------
euclid_nn = NearestNeighbors(n_neighbors=n_neighbors + 1).fit(X).kneighbors(X, return_distance=False)[:, 1:]


def overlap(a, b):
    """Mean fraction of the neighbours in ``a`` that are also in ``b``."""
    return float(np.mean([len(set(r) & set(s)) / len(r) for r, s in zip(a, b)]))


def label_agreement(nn):
    return float(np.mean(y[nn] == y[:, None]))


print(f"k=32: overlap with Euclidean 10-NN {overlap(hamming_nn, euclid_nn):.2f}")
print(f"same label: Hamming {label_agreement(hamming_nn):.3f} vs Euclidean {label_agreement(euclid_nn):.3f}")

# %%
# More winners, better neighbours
# -------------------------------
ks = [4, 8, 16, 32, 64, 128, 256]
overlaps, labels = [], []
for k in ks:
    c = FlyHashTransformer(expansion_factor=20.0, k=k, output="packed", random_state=0).fit_transform(X)
    idx = faiss.IndexBinaryFlat(c.shape[1] * 8)
    idx.add(c)
    nn = idx.search(c, n_neighbors + 1)[1][:, 1:]
    overlaps.append(overlap(nn, euclid_nn))
    labels.append(label_agreement(nn))

fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(ks, overlaps, "o-", label="overlap with Euclidean 10-NN")
ax.plot(ks, labels, "s-", label="neighbours with the same label")
ax.axhline(label_agreement(euclid_nn), color="gray", ls="--", label="Euclidean 10-NN, same label")
ax.set_xscale("log", base=2)
ax.set_xlabel("winners k (of 1,280 units)")
ax.set_ylim(0, 1)
ax.legend(loc="lower right", fontsize=8)
ax.set_title("FlyHash + FAISS IndexBinaryFlat on digits")
fig.tight_layout()
# sphinx_gallery_start_ignore
save_figures()
# sphinx_gallery_end_ignore
plt.show()
