"""Make ``dtcnn_vs_floyd_steinberg.png`` for the DT-CNN user guide.

A crop of scikit-image's ``camera`` photo, its DT-CNN halftone (the defaults, 2 levels)
and Pillow's Floyd-Steinberg error diffusion (``Image.convert('1')``) side by side,
each enlarged 2x with nearest-neighbour so that every dot stays a sharp square, with
the HVS-PSNR of each halftone (``sknn_gpu.metrics.hvs_psnr``, sigma 1.5) in its label.

Run from the repository root (needs Pillow and scikit-image; CPU is enough)::

    python docs/user_guide/dtcnn_vs_floyd_steinberg.py
"""

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont
from skimage import data

from sknn_gpu import DTCNNHalftoner
from sknn_gpu.metrics import hvs_psnr

OUT = Path(__file__).with_suffix(".png")
CROP = (slice(40, 280), slice(150, 390))  # the face, the camera and the coat: 240 x 240
ZOOM = 2
LABEL = 30  # pixels above each panel for its label
GAP = 8


def main():
    img = data.camera()[CROP]
    ours = DTCNNHalftoner(device="cpu").fit_transform(img)
    fs = np.asarray(Image.fromarray(img).convert("1"), dtype=np.uint8) * 255
    panels = [
        (img, "original (camera, 240 x 240)"),
        (ours, f"DT-CNN (sknn_gpu): {hvs_psnr(img, ours):.1f} dB"),
        (fs, f"Floyd-Steinberg (Pillow): {hvs_psnr(img, fs):.1f} dB"),
    ]
    h, w = img.shape[0] * ZOOM, img.shape[1] * ZOOM
    canvas = Image.new("L", (len(panels) * w + (len(panels) - 1) * GAP, h + LABEL), 255)
    draw = ImageDraw.Draw(canvas)
    try:
        font = ImageFont.load_default(size=17)
    except TypeError:  # Pillow < 10.1: the small bitmap font
        font = ImageFont.load_default()
    for k, (arr, text) in enumerate(panels):
        x = k * (w + GAP)
        canvas.paste(Image.fromarray(arr).resize((w, h), Image.NEAREST), (x, LABEL))
        draw.text((x + 4, 6), text, fill=0, font=font)
    canvas.save(OUT, optimize=True)
    print(f"{OUT}: {OUT.stat().st_size / 1024:.0f} KiB; " + "; ".join(t for _, t in panels[1:]))


if __name__ == "__main__":
    main()
