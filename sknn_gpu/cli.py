"""The ``sknn-gpu`` command line.

Every error is one line on stderr: exit status 2 for usage errors (a bad option
value, an output extension no image format has, a lossy output format without
``--allow-lossy``) and 1 for runtime ones (a missing
or unreadable input, an output directory that does not exist, too little memory,
no GPU for ``--device cuda``, a full disk). ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import platform
import sys
import time
import warnings
from pathlib import Path

#: Exit statuses.
EXIT_OK, EXIT_RUNTIME, EXIT_USAGE = 0, 1, 2

_PILLOW_HINT = "Pillow is needed to read and write image files: pip install pillow (sknn-gpu's demo extra)"


class UsageError(Exception):
    """A problem with the command line itself (exit status 2)."""


class CommandError(Exception):
    """A problem met while running a valid command (exit status 1)."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (argparse prints the whole usage block first)."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {_one_line(message)} (see {self.prog} --help)\n")


def _one_line(text):
    return " ".join(str(text).split())


def _versions():
    import joblib
    import numpy
    import scipy
    import sklearn

    import sknn_gpu

    rows = [
        ("sknn_gpu", sknn_gpu.__version__),
        ("python", platform.python_version()),
        ("numpy", numpy.__version__),
        ("scipy", scipy.__version__),
        ("scikit-learn", sklearn.__version__),
        ("joblib", joblib.__version__),
    ]
    return rows


def info_lines():
    """Lines printed by ``sknn-gpu info``: versions, the CPU kernels, CUDA availability, devices,
    free memory."""
    from ._backend import _fmt_bytes, cuda_available, cuda_unavailable_reason, free_memory, get_cupy
    from ._kernels._cpu import cpu_kernels_status

    lines = [f"{name:<14} {ver}" for name, ver in _versions()]
    lines.append(f"{'host memory':<14} {_fmt_bytes(free_memory('cpu'))} available")
    lines.append(f"{'cpu kernels':<14} {cpu_kernels_status()}")
    if not cuda_available():
        lines.append(f"{'cuda':<14} not usable: {cuda_unavailable_reason()}")
        return lines
    cupy = get_cupy()
    rt = cupy.cuda.runtime
    lines.append(f"{'cupy':<14} {cupy.__version__}")
    lines.append(f"{'cuda runtime':<14} {rt.runtimeGetVersion()}")
    lines.append(f"{'cuda driver':<14} {rt.driverGetVersion()}")
    for i in range(rt.getDeviceCount()):
        props = rt.getDeviceProperties(i)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        with cupy.cuda.Device(i):
            free, total = rt.memGetInfo()
        lines.append(
            f"{'device ' + str(i):<14} {name}, sm_{props['major']}{props['minor']}, "
            f"{props['multiProcessorCount']} SMs, {_fmt_bytes(free)} free of {_fmt_bytes(total)}"
        )
    return lines


def _cmd_info(args):
    print("\n".join(info_lines()))
    return EXIT_OK


# ------------------------------------------------------------------------------ halftone
def _pillow():
    try:
        from PIL import Image
    except ImportError:
        raise CommandError(_PILLOW_HINT) from None
    return Image


#: Pillow formats that store our grey and colour images with lossy compression, and how:
#: a halftone's exact levels (0 and 255) come back smeared into other values there.
LOSSY_FORMATS = {
    "JPEG": "JPEG compression",
    "MPO": "JPEG compression",
    "AVIF": "AVIF compression",
    "PDF": "JPEG compression inside the PDF",
}
#: Save options per format: WebP is lossy unless asked, and exact with ``lossless=True``.
_SAVE_OPTIONS = {"WEBP": {"lossless": True}}


def _check_output_path(path, Image, allow_lossy=False):
    """The Pillow format for ``path``; refuses what cannot be written, before any work.

    A lossy format (:data:`LOSSY_FORMATS`) is a usage error unless ``allow_lossy``.
    """
    ext = path.suffix.lower()
    fmt = Image.registered_extensions().get(ext)
    if fmt is None or fmt not in Image.SAVE:
        what = f"unknown image extension {ext!r}" if ext else "no file extension"
        raise UsageError(
            f"output {str(path)!r}: {what}; use one Pillow can write, e.g. .png, .tif, .bmp, .webp"
        )
    if fmt in LOSSY_FORMATS and not allow_lossy:
        raise UsageError(
            f"output {str(path)!r}: {fmt} stores the image with {LOSSY_FORMATS[fmt]}, which smears a "
            "halftone's exact levels into other grey values; write .png, .tif, .bmp or .webp "
            "(written lossless), or pass --allow-lossy to write it anyway"
        )
    parent = path.parent
    ancestor = parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if ancestor.exists() and not ancestor.is_dir():
        raise CommandError(f"cannot write {str(path)!r}: {str(ancestor)!r} is a file, not a directory")
    if not parent.is_dir():
        raise CommandError(f"cannot write {str(path)!r}: the directory {str(parent)!r} does not exist")
    if path.is_dir():
        raise CommandError(f"cannot write {str(path)!r}: it is a directory")
    if not os.access(parent, os.W_OK):
        raise CommandError(f"cannot write {str(path)!r}: no permission to write in {str(parent)!r}")
    return fmt


def _output_mode(fmt, channels, Image):
    """Pillow mode for a halftone with ``channels`` channels in format ``fmt``; drops alpha if needed."""
    import io

    mode = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}[channels]
    for candidate in (mode, mode[:-1] if mode.endswith("A") else mode):
        try:
            Image.new(candidate, (1, 1)).save(io.BytesIO(), format=fmt)
        except (OSError, ValueError, KeyError):
            continue
        return candidate
    raise UsageError(f"the {fmt} format cannot store a {mode} image; use .png or .tif")


def _open_input(path, Image):
    """Open an image file (header only); one clear error for each way it can fail."""
    if not path.exists():
        raise CommandError(f"input file not found: {str(path)!r}")
    if path.is_dir():
        raise CommandError(f"input {str(path)!r} is a directory, not an image file")
    if path.stat().st_size == 0:
        raise CommandError(f"input file {str(path)!r} is empty")
    try:
        with warnings.catch_warnings():
            # between MAX_IMAGE_PIXELS and twice that Pillow only warns; our size estimate decides
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            return Image.open(path)
    except Image.DecompressionBombError as exc:
        raise CommandError(
            f"input {str(path)!r} refused: {_one_line(exc)} (a header this large is how decompression "
            "bombs look; PIL.Image.MAX_IMAGE_PIXELS sets the limit)"
        ) from exc
    except Image.UnidentifiedImageError as exc:
        raise CommandError(f"input {str(path)!r} is not an image file Pillow can read") from exc
    except OSError as exc:
        raise CommandError(f"cannot read {str(path)!r}: {_one_line(exc.strerror or exc)}") from exc


#: Pillow modes read as they are (uint8), converted to one of those, or read in their own range.
_KEEP = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}
_CONVERT = {"1": "L", "P": None, "PA": "RGBA", "La": "LA", "RGBa": "RGBA", "RGBX": "RGB", "CMYK": "RGB"}
_CONVERT.update({"YCbCr": "RGB", "LAB": "RGB", "HSV": "RGB"})
_WIDE = {"I;16": 65535, "I;16L": 65535, "I;16B": 65535, "I;16N": 65535, "I": 65535, "F": 1.0}


def _plan(im):
    """(channels, dtype of the array handed to the halftoner) from an image's header."""
    import numpy as np

    mode = im.mode
    if mode in _KEEP:
        return _KEEP[mode], np.uint8
    if mode in _WIDE:
        return 1, np.float64 if mode != "F" else np.float32
    if mode in _CONVERT:
        target = _CONVERT[mode] or ("RGBA" if "transparency" in im.info else "RGB")
        return _KEEP[target], np.uint8
    raise CommandError(f"input images of Pillow mode {mode!r} are not supported")


def _read_pixels(im, path):
    """Decode the pixels into an array in [0, 1] (float) or uint8, keeping the image's tone.

    16-bit and 32-bit integer images are divided by 65535 and float images read as
    they are (``convert('L')`` would clip both to 8 bits).
    """
    import numpy as np

    mode = im.mode
    try:
        im.load()
        if mode in _CONVERT:
            target = _CONVERT[mode] or ("RGBA" if "transparency" in im.info else "RGB")
            im = im.convert(target)
        arr = np.asarray(im)
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise CommandError(f"input {str(path)!r} is truncated or corrupt: {_one_line(exc)}") from exc
    if mode not in _WIDE:
        return np.ascontiguousarray(arr, dtype=np.uint8)
    if mode == "F":
        lo, hi = float(np.min(arr)), float(np.max(arr))
        if not (math.isfinite(lo) and math.isfinite(hi)) or lo < 0.0 or hi > 1.0:
            raise CommandError(
                f"input {str(path)!r} is a float image with values in [{lo:g}, {hi:g}]; "
                "intensities must lie in [0, 1]"
            )
        return np.ascontiguousarray(arr, dtype=np.float32)
    lo, hi = int(np.min(arr)), int(np.max(arr))
    if lo < 0 or hi > 65535:
        raise CommandError(
            f"input {str(path)!r} is a 32-bit integer image with values in [{lo}, {hi}]; only "
            "16-bit values (0..65535) are supported"
        )
    return arr.astype(np.float64) / 65535.0


class _NoSummary(logging.Filter):
    """Drops the closing summary record of a progress report (``sknn_gpu._progress``)."""

    def filter(self, record):
        return getattr(record, "sknn_gpu_progress", None) != "summary"


@contextlib.contextmanager
def _progress_without_summary():
    """Show the halftoner's progress but not its INFO summary line.

    The progress comes from the house mechanism (:mod:`sknn_gpu._progress`, through the
    estimator's ``verbose=1``): a bar when stderr is a terminal, else a log line on
    stderr every ``sknn_gpu._progress.LOG_EVERY_SECONDS`` of a long call (a short one prints nothing). The
    closing summary would repeat the result line this command prints on stdout, so it is
    filtered out of the family logger meanwhile.
    """
    logger = logging.getLogger("sknn_gpu.halftone")
    no_summary = _NoSummary()
    logger.addFilter(no_summary)
    try:
        yield
    finally:
        logger.removeFilter(no_summary)


def _save(Image, arr, mode, path, fmt):
    """Write through a temporary file in the same directory, so a failure leaves no partial output."""
    import tempfile

    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".sknn-gpu-", suffix=path.suffix, dir=path.parent)
        os.close(fd)
        im = Image.fromarray(arr)
        if im.mode != mode:  # pragma: no cover - fromarray infers it from the shape
            raise CommandError(f"internal error: expected a {mode} image, got {im.mode}")
        im.save(tmp, format=fmt, **_SAVE_OPTIONS.get(fmt, {}))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise CommandError(f"cannot write {str(path)!r}: {_one_line(exc.strerror or exc)}") from exc
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def _cmd_halftone(args):
    """Halftone an image file with DTCNNHalftoner and write the result."""
    from sklearn.exceptions import ConvergenceWarning

    from ._backend import resolve_device
    from .halftone import DTCNNHalftoner
    from .halftone._templates import default_radius

    radius = args.radius if args.radius is not None else default_radius(args.sigma)
    for flag, value in (
        ("--first-sweep-spacing", args.first_sweep_spacing),
        ("--class-spacing", args.class_spacing),
    ):
        if value is not None and value < radius + 1:
            raise UsageError(f"{flag} {value} must be at least radius + 1 = {radius + 1} (or 'none')")
    Image = _pillow()
    src, dst = Path(args.input), Path(args.output)
    fmt = _check_output_path(dst, Image, allow_lossy=args.allow_lossy)
    if fmt in LOSSY_FORMATS:
        print(
            f"{_prog()}: warning: {fmt} is lossy ({LOSSY_FORMATS[fmt]}): the written halftone's levels "
            "are not exact; write .png, .tif, .bmp or .webp to keep them",
            file=sys.stderr,
        )
    try:
        device = resolve_device(args.device)
    except RuntimeError as exc:
        raise CommandError(_one_line(exc)) from exc
    im = _open_input(src, Image)
    with im:
        channels, dtype = _plan(im)
        mode = _output_mode(fmt, channels, Image)
        w, h = im.size
        shape = (h, w) if channels == 1 else (h, w, channels)
        ht = DTCNNHalftoner(
            levels=args.levels,
            sigma=args.sigma,
            radius=args.radius,
            max_iter=args.max_iter,
            init=args.init,
            first_sweep_spacing=args.first_sweep_spacing,
            class_spacing=args.class_spacing,
            channel_axis=None if channels == 1 else -1,
            output_dtype="uint8",  # round(255 k / (levels - 1)), what the file stores
            # progress (sweeps of a grey image, channels of a colour one): a bar on a terminal,
            # else a log line every few seconds of a long call (see _progress_without_summary)
            verbose=1,
            device=device,
        )
        decoded = 2 * h * w * channels * max(4, dtype().itemsize)  # Pillow's buffer and our array
        ht._check_size(shape, dtype, device, extra_host_bytes=decoded)
        img = _read_pixels(im, src)
    t0 = time.perf_counter()
    with _progress_without_summary(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        out = ht.fit_transform(img)
    seconds = time.perf_counter() - t0
    for w in caught:  # one line each (the result line below says "stopped at max_iter" too)
        if issubclass(w.category, ConvergenceWarning):
            print(f"{_prog()}: warning: {_one_line(w.message)}", file=sys.stderr)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    from .metrics import hvs_psnr

    k = channels - (channels in (2, 4))  # halftoned channels (alpha aside)
    colour = (Ellipsis,) if channels == 1 else (Ellipsis, 0) if k == 1 else (Ellipsis, slice(0, k))
    quality = hvs_psnr(img[colour], out[colour])
    if len(mode) < channels:  # the format cannot store alpha
        out = out[colour]
        print(f"{_prog()}: note: {fmt} cannot store alpha; the alpha channel was dropped", file=sys.stderr)
    _save(Image, out, mode, dst, fmt)
    status = "converged" if ht.converged_ else f"stopped at max_iter={args.max_iter}"
    print(
        f"{args.input} {img.shape} -> {args.output}: {args.levels} levels on {ht.device_}, "
        f"{ht.n_iter_} sweeps ({status}), {seconds * 1e3:.1f} ms, HVS-PSNR {quality:.2f} dB (sigma 1.5)"
    )
    return EXIT_OK


# ------------------------------------------------------------------------------ parser
def _int_in(lo, hi=None):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < lo or (hi is not None and value > hi):
            span = f"from {lo} to {hi}" if hi is not None else f"of at least {lo}"
            raise argparse.ArgumentTypeError(f"must be an integer {span}, got {text!r}")
        return value

    return parse


def _positive_float(text):
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text!r}")
    return value


def _spacing(text):
    if text.strip().lower() == "none":
        return None
    return _int_in(2, 64)(text)


def _prog():
    return "sknn-gpu"


def build_parser():
    """The argument parser of ``sknn-gpu`` (one-line errors, exit status 2)."""
    from . import __version__
    from .halftone._templates import MAX_LEVELS, MAX_RADIUS

    parser = _Parser(prog=_prog(), description="sknn_gpu command line tools")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the Python traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True)
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    p_info = sub.add_parser(
        "info", parents=[debug], help="versions, CuPy/CUDA availability, devices and free memory"
    )
    p_info.set_defaults(func=_cmd_info)
    p_ht = sub.add_parser(
        "halftone", parents=[debug], help="halftone an image file with the asynchronous DT-CNN"
    )
    p_ht.add_argument("input", help="input image (any format Pillow reads; grey, colour, 16-bit or float)")
    p_ht.add_argument("output", help="output image, 8-bit (format from the extension, e.g. .png)")
    p_ht.add_argument(
        "--levels",
        type=_int_in(2, MAX_LEVELS),
        default=2,
        help=f"output levels per channel, 2..{MAX_LEVELS} (default 2)",
    )
    p_ht.add_argument("--sigma", type=_positive_float, default=1.2, help="HVS filter width of the template")
    p_ht.add_argument(
        "--radius",
        type=_int_in(1, MAX_RADIUS),
        default=None,
        help=f"template radius, 1..{MAX_RADIUS} (default from sigma)",
    )
    p_ht.add_argument("--max-iter", type=_int_in(1), default=30, help="maximum number of sweeps (>= 1)")
    p_ht.add_argument("--init", default="input", choices=["input", "threshold", "bayer", "random"])
    p_ht.add_argument(
        "--first-sweep-spacing",
        type=_spacing,
        default=30,
        help="colour-class spacing of the first sweep, 2..64 and at least radius + 1, or 'none'",
    )
    p_ht.add_argument(
        "--class-spacing",
        type=_spacing,
        default=None,
        help="colour-class spacing of the other sweeps, 2..64 and at least radius + 1 "
        "(default 'none': radius + 1; 3 with --radius 1 is the paper's 9 classes)",
    )
    p_ht.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p_ht.add_argument(
        "--allow-lossy",
        action="store_true",
        help="write a lossy format (.jpg, .avif, .pdf) anyway; its compression smears the exact levels",
    )
    p_ht.set_defaults(func=_cmd_halftone)
    return parser


def main(argv=None):
    """Run ``sknn-gpu``; returns the exit status (0 ok, 1 runtime error, 2 usage error)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors (already printed)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        return args.func(args)
    except KeyboardInterrupt:
        if args.debug:
            raise
        print(f"{_prog()}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.debug:
            raise
        if isinstance(exc, UsageError):
            print(f"{_prog()}: error: {_one_line(exc)}", file=sys.stderr)
            return EXIT_USAGE
        if isinstance(exc, (CommandError, MemoryError, ValueError, TypeError, RuntimeError)):
            print(f"{_prog()}: error: {_one_line(exc)}", file=sys.stderr)
        else:
            detail = f"{type(exc).__name__}: {_one_line(exc)}"
            print(f"{_prog()}: error: {detail} (run with --debug for the traceback)", file=sys.stderr)
        return EXIT_RUNTIME


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
