"""
Halftoning a photo with the asynchronous DT-CNN
===============================================

A halftone shows an image with only black and white dots; seen from a distance
(through the low-pass filter of the eye) it should look like the original.
:class:`~sknn_gpu.DTCNNHalftoner` makes every pixel a cell of a discrete-time
cellular neural network whose updates descend the error between the two images
as seen through a Gaussian model of the eye. We compare it with Pillow's
Floyd-Steinberg error diffusion and an 8x8 Bayer ordered dither on scikit-image's
``camera`` photo, scoring each with :func:`~sknn_gpu.metrics.hvs_psnr` (PSNR after
a Gaussian low-pass of width 1.5 pixels; higher is better).
"""

# %%
# Halftone the photo three ways
# -----------------------------

# sphinx_gallery_start_ignore
# as a script: figures saved to one folder, a missing package named (examples/_helpers.py)
try:
    from _helpers import require, save_figures
except ImportError:  # this file alone, e.g. downloaded from the gallery: figures not saved
    require = save_figures = lambda *modules: False
require("matplotlib", "PIL", "skimage")
# sphinx_gallery_end_ignore
import matplotlib.pyplot as plt
import numpy as np
from PIL import Image
from skimage import data

from sknn_gpu import DTCNNHalftoner
from sknn_gpu.halftone import bayer_matrix
from sknn_gpu.metrics import hvs_psnr

img = data.camera()[96:352, 128:384]  # a 256 x 256 crop keeps the CPU run short

fs = np.asarray(Image.fromarray(img).convert("1"))  # Floyd-Steinberg
threshold = (np.tile(bayer_matrix(8), (32, 32)) + 0.5) / 64.0
bayer = img / 255.0 > threshold

ht = DTCNNHalftoner(device="auto")  # the GPU when one is usable, else NumPy
ours = ht.fit_transform(img)
print(f"DT-CNN on {ht.device_}: {ht.n_iter_} sweeps, converged={ht.converged_}")

# %%
# Compare them
# ------------
panels = [
    ("original", img),
    (f"Floyd-Steinberg {hvs_psnr(img, fs):.2f} dB", fs),
    (f"Bayer 8x8 {hvs_psnr(img, bayer):.2f} dB", bayer),
    (f"DT-CNN (ours) {hvs_psnr(img, ours):.2f} dB", ours),
]
fig, axes = plt.subplots(1, 4, figsize=(14, 4))
for ax, (title, im) in zip(axes, panels):
    ax.imshow(im, cmap="gray", interpolation="nearest")
    ax.set_title(title)
    ax.axis("off")
fig.tight_layout()

# %%
# The energy of the network never increases
# ------------------------------------------
# Each sweep updates every cell once, colour class by colour class. The energy
# (half the squared filtered error) falls and the network stops at a fixed point.
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(np.arange(1, ht.n_iter_ + 1), ht.energy_, marker="o")
ax.set_xlabel("sweep")
ax.set_ylabel("energy")
ax.set_title("asynchronous DT-CNN energy per sweep")
fig.tight_layout()
# sphinx_gallery_start_ignore
save_figures()
# sphinx_gallery_end_ignore
plt.show()
