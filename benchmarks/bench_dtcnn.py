"""DTCNNHalftoner: ours (GPU / CPU) vs Pillow Floyd-Steinberg vs 8x8 Bayer ordered dither.

Time and HVS-PSNR (sigma 1.5) on real photos: scikit-image ``camera`` and
``astronaut`` (grey), scikit-learn's ``china.jpg`` and ``flower.jpg`` (grey), at
512^2 and at 2048^2 / 4096^2 (``camera`` upscaled bicubically, a real photo at
print resolution). GPU times are CUDA-event medians of ``transform`` on a
device-resident image (input quantisation, B*u, all sweeps, output); "call" is the
wall-clock Python call including the synchronisation. Every GPU schedule ("rows",
the default; "fused"; "per_class") is timed and asserted to give the same bits, plus
the row kernel's tuning knobs, the sweep launch alone and batches of 512^2 photos.
``--fast`` keeps camera at 512^2 and 4096^2 and the batches (no ablation table).

Peers: Pillow's Floyd-Steinberg (``Image.convert("1")``) on one core, and for
batches of images also on every host core through a ``ThreadPoolExecutor`` (Pillow releases
the GIL in ``convert``; the pool is created before the clock starts). The Bayer dither is a
quality reference, not counted as a peer. "vs strongest peer" is the ratio to the fastest
Pillow row; Pillow missing is a row saying so.

Floor (per image of n pixels, s sweeps, radius r): every colour-class pass of the
sweeps after the first streams the int16 state once (2n bytes read), the wide
first sweep reads it once in all, so ((s-1) (r+1)^2 + 1) 2n bytes at 3.0 TB/s,
plus the input and b arrays once. The kernels do s n (2r+1)^2 integer
multiply-adds on top, well under the integer peak.
"""

import argparse
import os
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from _harness import (
    Table,
    environment_header,
    floor_seconds,
    fmt_time,
    optional_import,
    parse_args,
    time_cpu,
    time_gpu,
)
from sklearn.exceptions import ConvergenceWarning

from sknn_gpu._backend import cuda_available
from sknn_gpu.halftone import DTCNNHalftoner, bayer_matrix
from sknn_gpu.halftone import _dtcnn_cuda as dtc
from sknn_gpu.metrics import hvs_psnr


def photos():
    from PIL import Image
    from skimage import data
    from skimage.color import rgb2gray
    from sklearn.datasets import load_sample_images

    def grey(rgb):
        return (rgb2gray(rgb) * 255).round().astype(np.uint8)

    out = {"camera": data.camera(), "astronaut": grey(data.astronaut())}
    for name, img in zip(("china", "flower"), load_sample_images().images):
        out[name] = grey(img)
    big = {}
    for side in (2048, 4096):
        big[side] = np.asarray(Image.fromarray(out["camera"]).resize((side, side), Image.BICUBIC))
    return out, big


def floyd_steinberg(img):
    from PIL import Image

    return np.asarray(Image.fromarray(img).convert("1"))


def batch_table(batch, gpu, ht_cpu, check_cpu):
    """One call on a batch of images: ours (GPU) vs Pillow FS on one core and on all cores."""
    nb, h, w = batch.shape
    t = Table(f"batch of {nb} × {h}x{w} photos: halftone, 2 levels", baseline="ours DT-CNN batch (GPU)")
    if gpu:
        import cupy as cp

        dbatch = cp.asarray(batch)
        ht_b = DTCNNHalftoner(device="cuda")
        out_b = ht_b.fit_transform(dbatch)
        if check_cpu:
            ref_b = np.stack([ht_cpu.fit_transform(im) for im in batch])
            assert np.array_equal(out_b.get(), ref_b), "batched GPU halftone differs from per-image CPU"
        t_b = time_gpu(lambda: ht_b.transform(dbatch), repeat=5, warmup=1)
        t.add(
            "ours DT-CNN batch (GPU)",
            "cuda",
            t_b,
            "same bits as per-image CPU" if check_cpu else "",
            f"one call, events, {fmt_time(t_b / nb)} per image, {ht_b.n_iter_} sweeps",
        )
        t_p = time_gpu(prepare_only(ht_b, dbatch), repeat=5, warmup=1)
        t.add("ours, prepare only (GPU)", "cuda", t_p, "", "part of the call: quantisation, B*u + T, state")
    else:
        t.add("ours DT-CNN batch (GPU)", "cuda", None, note="no GPU here")
    if optional_import("PIL") is None:
        t.not_installed("Pillow Floyd-Steinberg, 1 thread", "cpu", "Pillow")
        t.not_installed("Pillow Floyd-Steinberg, thread pool", "cpu", "Pillow")
        return t
    images = list(batch)
    t.add(
        "Pillow Floyd-Steinberg, 1 thread",
        "cpu",
        time_cpu(lambda: [floyd_steinberg(im) for im in images], repeat=3),
        note="image after image",
        peer=True,
    )
    workers = os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=workers) as pool:
        t.add(
            f"Pillow Floyd-Steinberg, {workers} threads",
            "cpu",
            time_cpu(lambda: list(pool.map(floyd_steinberg, images)), repeat=3),
            note="ThreadPoolExecutor over the batch, all host cores",
            peer=True,
        )
    return t


def bayer(img):
    h, w = img.shape
    t = (np.tile(bayer_matrix(8), ((h + 7) // 8, (w + 7) // 8))[:h, :w] + 0.5) / 64.0
    return ((img / 255.0) > t).astype(np.uint8) * 255


def quality(img, out):
    o = np.asarray(out, dtype=np.float64)
    o = o if out.dtype == np.bool_ else o / 255.0
    return f"{hvs_psnr(img, out):.2f} dB, Δmean {abs(o.mean() - img.mean() / 255.0):.4f}"


def prepare_only(ht, dimg):
    """A callable running only the GPU preparation (``_dtcnn_cuda.prepare``: input
    quantisation, ``B*u + T`` and the initial state) of a stack ``(n, H, W)`` or image."""
    stack = dimg if dimg.ndim == 3 else dimg[None]

    def run():
        return dtc.prepare(stack, ht.templates_, int(ht.levels), ht.boundary, None)

    return run


def sweeps_only(ht, dimg):
    """A callable running only the GPU sweeps (``_dtcnn_cuda._sweeps``) on a prepared state."""
    net = dtc.prepare(dimg[None], ht.templates_, int(ht.levels), ht.boundary, None)
    first, later = ht._spacings()

    def run():
        Z = net.Z.copy()
        return dtc._sweeps(Z, net.b, net.A_dev, net.gain, net.a_c, ht.max_iter, net.defines, first, later)

    return run


def main(argv=None):
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument(
        "--fast",
        action="store_true",
        help="camera at 512^2 and 4096^2 plus a 512^2 batch only, no ablation table",
    )
    mine, rest = extra.parse_known_args(sys.argv[1:] if argv is None else argv)
    args = parse_args(__doc__.splitlines()[0], rest)
    print(environment_header() + "\n")
    gpu = cuda_available() and args.device != "cpu"
    small, big = photos()
    all_small = dict(small)
    if args.quick:
        small = {k: v[:128, :128] for k, v in list(small.items())[:2]}
        big = {}
    if mine.fast:
        small = {"camera": small["camera"]}
        big = {4096: big[4096]} if big else {}
    ht_cpu = DTCNNHalftoner(device="cpu")
    ht_gpu = DTCNNHalftoner(device="cuda") if gpu else None
    summary = []
    cases = [(f"{name} {img.shape[0]}x{img.shape[1]}", img) for name, img in small.items()]
    cases += [(f"camera upscaled {s}x{s}", img) for s, img in big.items()]
    for label, img in cases:
        n = img.size
        ref = ht_cpu.fit(img[:16, :16])  # templates only; transform below
        r = ref.templates_["radius"]
        sweeps_seen = None
        rows = Table(
            f"{label}: halftone, 2 levels",
            baseline="Pillow Floyd-Steinberg",
        )
        fs = floyd_steinberg(img)
        rows.add(
            "Pillow Floyd-Steinberg",
            "cpu",
            time_cpu(lambda: floyd_steinberg(img), repeat=5),
            quality(img, fs),
            "one core",
            peer=True,
        )
        rows.add(
            "Bayer 8x8 ordered dither (NumPy)",
            "cpu",
            time_cpu(lambda: bayer(img), repeat=5),
            quality(img, bayer(img)),
            "quality reference (not a peer)",
        )
        out_cpu = None
        if n <= 512 * 640 or not gpu:
            t0 = time.perf_counter()
            out_cpu = ht_cpu.fit_transform(img)
            t_cpu = time.perf_counter() - t0
            sweeps_seen = ht_cpu.n_iter_
            rows.add(
                "ours DT-CNN (NumPy)",
                "cpu",
                t_cpu,
                quality(img, out_cpu),
                f"{ht_cpu.n_iter_} sweeps, one run",
            )
        if gpu:
            import cupy as cp

            dimg = cp.asarray(img)
            out_gpu = ht_gpu.fit_transform(dimg)
            sweeps_seen = ht_gpu.n_iter_
            if out_cpu is not None:
                assert np.array_equal(out_gpu.get(), out_cpu), "CPU and GPU halftones differ"
            for schedule in ("rows", "fused", "per_class"):
                dtc.GPU_SCHEDULE = schedule
                t_ev = time_gpu(lambda: ht_gpu.transform(dimg), repeat=10, warmup=2)
                t0 = time.perf_counter()
                out_s = ht_gpu.transform(dimg)
                cp.cuda.get_current_stream().synchronize()
                t_call = time.perf_counter() - t0
                assert cp.array_equal(out_s, out_gpu), f"{schedule} schedule differs from auto"
                rows.add(
                    f"ours DT-CNN ({schedule})",
                    "cuda",
                    t_ev,
                    quality(img, out_gpu.get()),
                    f"{ht_gpu.n_iter_} sweeps, r={r}; call {fmt_time(t_call)}",
                )
                summary.append((label, schedule, t_ev))
            dtc.GPU_SCHEDULE = "auto"
            for name, value, what in (
                ("_ROWS_CPT2_MAX_WIDTH", 0, "4 columns per thread"),
                ("_ROWS_CPT2_MAX_WIDTH", 10**6, "2 columns per thread"),
                ("_ROWS_BLOCKS_PER_SM", 2, "at most 2 blocks per SM"),
                ("_ROWS_BLOCKS_PER_SM", 1, "at most 1 block per SM"),
            ):
                saved = getattr(dtc, name)
                setattr(dtc, name, value)
                try:
                    assert cp.array_equal(ht_gpu.transform(dimg), out_gpu)
                    t_v = time_gpu(lambda: ht_gpu.transform(dimg), repeat=10, warmup=2)
                finally:
                    setattr(dtc, name, saved)
                rows.add(f"ours rows, {what}", "cuda", t_v, "same bits", f"{name}={value}")
            t_sw = time_gpu(sweeps_only(ht_gpu, dimg), repeat=10, warmup=2)
            rows.add(
                "ours, sweeps only (auto)",
                "cuda",
                t_sw,
                "",
                "_dtcnn_cuda._sweeps on a prepared state (state copy included)",
            )
            t_pr = time_gpu(prepare_only(ht_gpu, dimg), repeat=10, warmup=2)
            rows.add(
                "ours, prepare only", "cuda", t_pr, "", "_dtcnn_cuda.prepare: quantisation, B*u + T, state"
            )
            for label_x, params_x in (
                ("first_sweep_spacing=48", {"first_sweep_spacing": 48}),
                ("first_sweep_spacing=None", {"first_sweep_spacing": None}),
            ):
                ht_x = DTCNNHalftoner(device="cuda", **params_x)
                out_x = ht_x.fit_transform(dimg)
                t_ev = time_gpu(lambda: ht_x.transform(dimg), repeat=5, warmup=1)
                rows.add(
                    f"ours {label_x} (auto)",
                    "cuda",
                    t_ev,
                    quality(img, out_x.get()),
                    f"{ht_x.n_iter_} sweeps",
                )
        if sweeps_seen:
            passes = (sweeps_seen - 1) * (r + 1) ** 2 + 1
            rows.floor = floor_seconds(bytes_moved=passes * 2 * n + 12 * n, launches=1)
            rows.floor_note = (
                f"(wide first sweep: the state once; {sweeps_seen - 1} more sweeps x {(r + 1) ** 2} "
                "class passes; 2 B/pixel per pass at 3.0 TB/s)"
            )
        rows.print()

    # Many small images per call: a batch of 512^2 photos (quick: 128^2 crops).
    imgs = [all_small[k] for k in ("camera", "astronaut")]
    if args.quick:
        imgs = [im[:128, :128] for im in imgs]
    for nb in (4, 16) if args.quick else (4, 16, 64):
        batch = np.stack([imgs[i % len(imgs)] for i in range(nb)])
        batch_table(batch, gpu, ht_cpu, check_cpu=nb == 4).print()
    if mine.fast:
        return

    # What each idea gives: quality on the 512^2 photos (GPU when present: same bits as CPU).
    dev = "cuda" if gpu else "cpu"
    names = list(small)[:2] if args.quick else list(small)
    fs_row = " | ".join(f"{hvs_psnr(small[k], floyd_steinberg(small[k])):.2f}" for k in names)
    print("### Quality ablation (HVS-PSNR dB, sigma 1.5; sweeps in brackets)\n")
    print("| variant | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    print(f"| Pillow Floyd-Steinberg | {fs_row} |")
    variants = [
        ("default (sigma 1.2, r 4, first sweep spacing 30, init input, zero boundary)", {}),
        ("first_sweep_spacing=None (every sweep spaced r + 1 = 5)", {"first_sweep_spacing": None}),
        ("first_sweep_spacing=15", {"first_sweep_spacing": 15}),
        ("first_sweep_spacing=48", {"first_sweep_spacing": 48}),
        ("first_sweep_spacing=64", {"first_sweep_spacing": 64}),
        ("r 7, first_sweep_spacing=None", {"radius": 7, "first_sweep_spacing": None}),
        ("r 14, first_sweep_spacing=None", {"radius": 14, "first_sweep_spacing": None}),
        ("r 3", {"radius": 3}),
        ("r 7", {"radius": 7}),
        ("sigma 1.0 (r 3)", {"sigma": 1.0}),
        ("sigma 1.5 (= metric; r 5)", {"sigma": 1.5}),
        ("boundary='reflect' (reflect-padded input)", {"boundary": "reflect"}),
        ("init='threshold'", {"init": "threshold"}),
        ("init='bayer'", {"init": "bayer"}),
        ("init='random'", {"init": "random", "random_state": 0}),
        ("max_iter=1 (one sweep)", {"max_iter": 1}),
        ("max_iter=3", {"max_iter": 3}),
        ("mode='sync' (Jacobi)", {"mode": "sync"}),
        ("levels=4 (4-level output)", {"levels": 4}),
    ]
    for label, params in variants:
        cells = []
        for k in names:
            h = DTCNNHalftoner(device=dev, **params)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)  # sync stops at 30 steps: expected
                o = h.fit_transform(small[k])
            cells.append(f"{hvs_psnr(small[k], o):.2f} ({h.n_iter_}{', cycle' if h.cycle_detected_ else ''})")
        print(f"| {label} | " + " | ".join(cells) + " |")
    print()


if __name__ == "__main__":
    main()
