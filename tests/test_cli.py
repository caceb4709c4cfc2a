"""`sknn-gpu halftone`: clean one-line errors, exit statuses, paths checked first, tone kept."""

import errno
import io
import os
import re
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest

from sknn_gpu import __version__, cli
from sknn_gpu._backend import cuda_available
from sknn_gpu.halftone import DTCNNHalftoner

Image = pytest.importorskip("PIL.Image")


def run(argv, capsys):
    """Run the command in-process; return (status, stdout, stderr) and check the error contract."""
    status = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    if status != 0:
        assert len(err.strip().splitlines()) == 1, err  # one line
        assert err.startswith("sknn-gpu")
    return status, out, err


def photo(size=48, seed=0):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:size, 0:size] / size
    img = 0.5 + 0.3 * np.sin(6 * x) * np.cos(4 * y) + 0.05 * rng.standard_normal((size, size))
    return np.clip(img, 0.0, 1.0)


@pytest.fixture
def png(tmp_path):
    path = tmp_path / "in.png"
    Image.fromarray((photo() * 255).round().astype(np.uint8)).save(path)
    return path


@pytest.fixture
def no_compute(monkeypatch):
    """Fail the test if the halftone is computed."""

    def boom(self, X, y=None):
        raise AssertionError("the halftone was computed before the problem was reported")

    monkeypatch.setattr(DTCNNHalftoner, "fit_transform", boom)


# ------------------------------------------------------------------ version and usage errors
def test_version(capsys):
    status, out, _ = run(["--version"], capsys)
    assert status == 0 and out.strip() == f"sknn-gpu {__version__}"


@pytest.mark.parametrize(
    "option, value, fragment",
    [
        ("--levels", "0", "--levels: must be an integer from 2 to 64, got '0'"),
        ("--levels", "1", "--levels: must be an integer from 2 to 64, got '1'"),
        ("--levels", "65", "--levels: must be an integer from 2 to 64, got '65'"),
        ("--levels", "two", "--levels: must be an integer"),
        ("--sigma", "-1", "--sigma: must be a positive finite number, got '-1'"),
        ("--sigma", "nan", "--sigma: must be a positive finite number, got 'nan'"),
        ("--sigma", "inf", "--sigma: must be a positive finite number"),
        ("--radius", "0", "--radius: must be an integer from 1 to 16, got '0'"),
        ("--radius", "17", "--radius: must be an integer from 1 to 16"),
        ("--max-iter", "0", "--max-iter: must be an integer of at least 1, got '0'"),
        ("--first-sweep-spacing", "1", "--first-sweep-spacing: must be an integer from 2 to 64"),
        ("--first-sweep-spacing", "3", "--first-sweep-spacing 3 must be at least radius + 1 = 5"),
        ("--class-spacing", "65", "--class-spacing: must be an integer from 2 to 64"),
        ("--class-spacing", "4", "--class-spacing 4 must be at least radius + 1 = 5"),
        ("--device", "gpu", "invalid choice: 'gpu'"),
    ],
)
def test_parameter_errors_are_one_line_usage_errors(
    option, value, fragment, png, tmp_path, capsys, no_compute
):
    out_path = tmp_path / "out.png"
    status, _, err = run(["halftone", png, out_path, option, value], capsys)
    assert status == 2 and fragment in err
    assert not out_path.exists()


def test_first_sweep_spacing_none_is_accepted(png, tmp_path, capsys):
    status, out, _ = run(["halftone", png, tmp_path / "o.png", "--first-sweep-spacing", "none"], capsys)
    assert status == 0 and "converged" in out


def test_paper_class_layout_from_the_command_line(png, tmp_path, capsys):
    dst = tmp_path / "o.png"
    argv = ["halftone", png, dst, "--radius", "1", "--class-spacing", "3", "--first-sweep-spacing", "none"]
    status, out, _ = run(argv + ["--device", "cpu"], capsys)
    assert status == 0 and "converged" in out
    img = np.asarray(Image.open(png).convert("L"))
    paper = DTCNNHalftoner(radius=1, class_spacing=3, first_sweep_spacing=None, device="cpu")
    want = paper.fit_transform(img)
    np.testing.assert_array_equal(np.asarray(Image.open(dst).convert("L")), want)


def test_missing_command_and_unknown_option_are_one_line(capsys):
    status, _, err = run([], capsys)
    assert status == 2 and "required: command" in err
    status, _, err = run(["halftone", "a.png", "b.png", "--nope"], capsys)
    assert status == 2 and "unrecognized arguments: --nope" in err


@pytest.mark.skipif(cuda_available(), reason="needs a machine without a usable GPU")
def test_device_cuda_without_gpu_is_a_clear_runtime_error(png, tmp_path, capsys, no_compute):
    status, _, err = run(["halftone", png, tmp_path / "o.png", "--device", "cuda"], capsys)
    assert status == 1 and "device='cuda' was requested but CUDA is not usable" in err


# ------------------------------------------------------------------ output path, before computing
@pytest.mark.parametrize(
    "make_output, status_expected, fragment",
    [
        (lambda d: d / "missing" / "out.png", 1, "does not exist"),
        (lambda d: d / "in.png" / "out.png", 1, "is a file, not a directory"),
        (lambda d: d / "in.png" / "sub" / "out.png", 1, "is a file, not a directory"),
        (lambda d: d / "out.xyz", 2, "unknown image extension '.xyz'"),
        (lambda d: d / "out", 2, "no file extension"),
        (lambda d: d, 2, "no file extension"),
    ],
)
def test_output_path_is_checked_before_computing(
    make_output, status_expected, fragment, png, tmp_path, capsys, no_compute
):
    status, _, err = run(["halftone", png, make_output(tmp_path), "--device", "cpu"], capsys)
    assert status == status_expected and fragment in err, err


def test_output_that_is_a_directory_is_refused(png, tmp_path, capsys, no_compute):
    (tmp_path / "dir.png").mkdir()
    status, _, err = run(["halftone", png, tmp_path / "dir.png", "--device", "cpu"], capsys)
    assert status == 1 and "it is a directory" in err


def test_full_disk_leaves_no_partial_file_and_keeps_the_old_one(png, tmp_path, capsys, monkeypatch):
    out_path = tmp_path / "out.png"
    out_path.write_bytes(b"previous result")

    real = Image.Image.save

    def full(self, fp, format=None, **kw):
        if isinstance(fp, io.BytesIO):  # the format probe before computing
            return real(self, fp, format, **kw)
        with open(fp, "wb") as fh:
            fh.write(b"partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Image.Image, "save", full)
    status, _, err = run(["halftone", png, out_path, "--device", "cpu"], capsys)
    assert status == 1 and "No space left on device" in err and str(out_path) in err
    assert out_path.read_bytes() == b"previous result"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.png", "out.png"]


# ------------------------------------------------------------------ bad input files
def _png_with_size(width, height):
    """A valid 1x1 grey PNG whose header claims width x height pixels."""
    buf = io.BytesIO()
    Image.new("L", (1, 1)).save(buf, format="PNG")
    data = bytearray(buf.getvalue())
    ihdr = data.index(b"IHDR")
    data[ihdr + 4 : ihdr + 12] = struct.pack(">II", width, height)
    crc = zlib.crc32(bytes(data[ihdr : ihdr + 17])) & 0xFFFFFFFF
    data[ihdr + 17 : ihdr + 21] = struct.pack(">I", crc)
    return bytes(data)


@pytest.mark.parametrize(
    "content, fragment",
    [
        (None, "input file not found"),
        (b"", "is empty"),
        (b"this is not an image\n" * 10, "is not an image file Pillow can read"),
        ("truncated", "is truncated or corrupt"),
        (_png_with_size(100_000, 100_000), "decompression bomb"),
    ],
    ids=["missing", "empty", "text", "truncated", "bomb"],
)
def test_bad_input_files_are_one_line_runtime_errors(content, fragment, tmp_path, capsys, no_compute):
    src = tmp_path / "in.png"
    if content == "truncated":
        Image.fromarray((photo(64) * 255).astype(np.uint8)).save(src)
        src.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
    elif content is not None:
        src.write_bytes(content)
    status, _, err = run(["halftone", src, tmp_path / "out.png", "--device", "cpu"], capsys)
    assert status == 1 and fragment in err, err
    assert not (tmp_path / "out.png").exists()


def test_input_directory_is_refused(tmp_path, capsys, no_compute):
    status, _, err = run(["halftone", tmp_path, tmp_path / "out.png"], capsys)
    assert status == 1 and "is a directory, not an image file" in err


def test_image_too_large_for_memory_is_refused_from_its_header(tmp_path, capsys, monkeypatch, no_compute):
    import sknn_gpu._backend as backend

    png = tmp_path / "large.png"  # 27 MB estimated: above the 16 MiB that is never checked
    Image.fromarray(np.zeros((512, 512), dtype=np.uint8)).save(png)
    monkeypatch.setattr(backend, "free_memory", lambda device, need=None: 100_000)

    def no_decode(im, path):
        raise AssertionError("pixels decoded before the size check")

    monkeypatch.setattr(cli, "_read_pixels", no_decode)
    status, _, err = run(["halftone", png, tmp_path / "out.png", "--device", "cpu"], capsys)
    assert status == 1 and "halftoning images of shape (512, 512)" in err
    assert "bytes" in err and "are free" in err


# ------------------------------------------------------------------ tone of wide images
def _ramp(h=64, w=256):
    return np.tile(np.linspace(0.0, 1.0, w), (h, 1))


def _mean_of(path):
    return np.asarray(Image.open(path), dtype=np.float64).mean() / 255.0


def test_16_bit_png_keeps_its_tone(tmp_path, capsys):
    src, dst = tmp_path / "ramp16.png", tmp_path / "out.png"
    Image.fromarray((_ramp() * 65535).round().astype(np.uint16)).save(src)
    assert Image.open(src).mode.startswith("I;16")
    status, _, _ = run(["halftone", src, dst, "--device", "cpu"], capsys)
    assert status == 0 and abs(_mean_of(dst) - 0.5) < 0.01  # convert('L') clipped: 0.98


def test_float_tiff_keeps_its_tone(tmp_path, capsys):
    src, dst = tmp_path / "ramp.tif", tmp_path / "out.png"
    Image.fromarray(_ramp().astype(np.float32)).save(src)
    assert Image.open(src).mode == "F"
    status, out, _ = run(["halftone", src, dst, "--device", "cpu"], capsys)
    assert status == 0 and abs(_mean_of(dst) - 0.5) < 0.01  # convert('L') made it black
    assert "HVS-PSNR" in out and float(out.split("HVS-PSNR ")[1].split()[0]) < 60


def test_float_tiff_outside_unit_range_is_refused(tmp_path, capsys, no_compute):
    src = tmp_path / "hdr.tif"
    Image.fromarray((_ramp() * 255).astype(np.float32)).save(src)
    status, _, err = run(["halftone", src, tmp_path / "out.png"], capsys)
    assert status == 1 and "values in [0, 255]" in err and "[0, 1]" in err


def test_16_bit_output_levels_equal_the_8_bit_path(tmp_path, capsys):
    """The same picture as 8-bit and as 16-bit gives uint8 levels round(255 k / (m - 1))."""
    src, dst = tmp_path / "r16.png", tmp_path / "out.png"
    Image.fromarray((_ramp(32, 64) * 65535).round().astype(np.uint16)).save(src)
    assert run(["halftone", src, dst, "--levels", "7", "--device", "cpu"], capsys)[0] == 0
    values = set(np.unique(np.asarray(Image.open(dst))).tolist())
    assert values <= {(k * 510 + 6) // 12 for k in range(7)} and len(values) > 2


# ------------------------------------------------------------------ alpha
def test_rgba_png_keeps_its_alpha(tmp_path, capsys):
    rgb = (np.stack([photo(40, s) for s in range(3)], axis=-1) * 255).astype(np.uint8)
    alpha = np.tile(np.linspace(0, 255, 40).astype(np.uint8), (40, 1))
    src, dst = tmp_path / "rgba.png", tmp_path / "out.png"
    Image.fromarray(np.dstack([rgb, alpha]), mode="RGBA").save(src)
    status, _, _ = run(["halftone", src, dst, "--device", "cpu"], capsys)
    out = Image.open(dst)
    assert status == 0 and out.mode == "RGBA"
    arr = np.asarray(out)
    np.testing.assert_array_equal(arr[..., 3], alpha)
    assert set(np.unique(arr[..., :3]).tolist()) == {0, 255}
    expected = DTCNNHalftoner(device="cpu", channel_axis=-1).fit_transform(rgb)
    np.testing.assert_array_equal(arr[..., :3], expected)


def test_alpha_is_dropped_with_a_note_for_formats_without_it(tmp_path, capsys):
    src, dst = tmp_path / "la.png", tmp_path / "out.jpg"
    grey = (photo(32) * 255).astype(np.uint8)
    Image.fromarray(np.dstack([grey, np.full_like(grey, 200)]), mode="LA").save(src)
    status, _, err = run(["halftone", src, dst, "--device", "cpu", "--allow-lossy"], capsys)
    assert status == 0 and "JPEG cannot store alpha" in err and Image.open(dst).mode == "L"


# ------------------------------------------------------------------ lossy formats
LOSSY = [".jpg", ".jpeg", ".JPG", ".pdf"] + ([".avif"] if ".avif" in Image.registered_extensions() else [])


@pytest.mark.parametrize("ext", LOSSY)
def test_lossy_output_is_refused_before_any_work(png, tmp_path, capsys, no_compute, ext):
    dst = tmp_path / f"out{ext}"
    status, out, err = run(["halftone", png, dst, "--device", "cpu"], capsys)
    assert status == 2 and out == ""
    assert "smears a halftone's exact levels" in err and "--allow-lossy" in err and ".png" in err
    assert not dst.exists()


def test_allow_lossy_writes_jpeg_with_a_warning(png, tmp_path, capsys):
    dst = tmp_path / "out.jpg"
    status, out, err = run(["halftone", png, dst, "--device", "cpu", "--allow-lossy"], capsys)
    assert status == 0 and "-> " in out
    assert err.startswith("sknn-gpu: warning: JPEG is lossy") and len(err.strip().splitlines()) == 1
    arr = np.asarray(Image.open(dst))
    assert Image.open(dst).format == "JPEG" and arr.shape == (48, 48)
    # what the warning is about: the two levels come back as many values
    assert len(np.unique(arr)) > 2


@pytest.mark.skipif(".webp" not in Image.registered_extensions(), reason="Pillow without WebP")
def test_webp_is_written_lossless(png, tmp_path, capsys):
    dst = tmp_path / "out.webp"
    status, _, err = run(["halftone", png, dst, "--device", "cpu"], capsys)
    assert status == 0 and "warning" not in err
    expected = DTCNNHalftoner(device="cpu", output_dtype="uint8").fit_transform(np.asarray(Image.open(png)))
    np.testing.assert_array_equal(np.asarray(Image.open(dst).convert("L")), expected)


# ------------------------------------------------------------------ Pillow missing, unexpected errors
def test_missing_pillow_names_the_extra(png, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)
    monkeypatch.setitem(sys.modules, "PIL.Image", None)
    status, _, err = run(["halftone", png, tmp_path / "o.png"], capsys)
    assert status == 1 and "pip install pillow" in err and "pip install sknn-gpu" not in err


def test_unexpected_errors_are_one_line_unless_debug(png, tmp_path, capsys, monkeypatch):
    def broken(self, X, y=None):
        raise ZeroDivisionError("something deep inside")

    monkeypatch.setattr(DTCNNHalftoner, "fit_transform", broken)
    status, _, err = run(["halftone", png, tmp_path / "o.png", "--device", "cpu"], capsys)
    assert status == 1 and "ZeroDivisionError: something deep inside" in err and "--debug" in err
    with pytest.raises(ZeroDivisionError):
        cli.main(["--debug", "halftone", str(png), str(tmp_path / "o.png"), "--device", "cpu"])
    with pytest.raises(ZeroDivisionError):
        cli.main(["halftone", str(png), str(tmp_path / "o.png"), "--device", "cpu", "--debug"])


# ------------------------------------------------------------------ progress on a terminal
class _Terminal(io.StringIO):
    def __init__(self, tty):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


@pytest.mark.parametrize("tty", [True, False])
def test_progress_is_shown_on_a_terminal_only(tty, png, tmp_path, monkeypatch, caplog):
    """The bar is the house one (sknn_gpu._progress through verbose): sweeps of a grey image.
    Off a terminal a short call prints nothing (long ones log a line every few seconds)."""
    import logging

    seen = []
    real = DTCNNHalftoner.fit_transform

    def spy(self, X, y=None):
        seen.append(self.verbose)
        return real(self, X)

    monkeypatch.setattr(DTCNNHalftoner, "fit_transform", spy)
    term = _Terminal(tty)
    monkeypatch.setattr(sys, "stderr", term)
    logger = logging.getLogger("sknn_gpu.halftone")
    level = logger.level
    with caplog.at_level(logging.INFO, logger="sknn_gpu"):
        assert cli.main(["halftone", str(png), str(tmp_path / "o.png"), "--device", "cpu"]) == 0
    assert logger.level == level  # the summary is held back during the call only
    # no summary line on stderr: the result line on stdout says it all
    assert not [r for r in caplog.records if r.name == "sknn_gpu.halftone"]
    text = term.getvalue()
    assert seen == [1]
    if tty:
        expected = DTCNNHalftoner(device="cpu").fit(np.asarray(Image.open(png))).n_iter_
        assert f"\rDTCNNHalftoner.fit_transform: {expected}/30 sweeps" in text
        assert text.count("\r") == expected  # one refresh per sweep
        assert text.endswith("\n")
    else:
        assert text == ""


def test_colour_progress_counts_channels(tmp_path, monkeypatch):
    rgb = (np.stack([photo(40, s) for s in range(3)], axis=-1) * 255).astype(np.uint8)
    src = tmp_path / "rgb.png"
    Image.fromarray(rgb).save(src)
    term = _Terminal(True)
    monkeypatch.setattr(sys, "stderr", term)
    assert cli.main(["halftone", str(src), str(tmp_path / "o.png"), "--device", "cpu"]) == 0
    text = term.getvalue()
    assert "\rDTCNNHalftoner.fit_transform: 3/3 images" in text and text.endswith("\n")


def test_failure_half_way_on_a_terminal_ends_the_bar_before_the_error(png, tmp_path, monkeypatch):
    import sknn_gpu.halftone._dtcnn_cpu as engine

    real = engine.decide
    calls = []

    def failing(*args):
        calls.append(1)
        if len(calls) == 900 + 25 + 10:  # in sweep 3 (900 colour classes in sweep 1, 25 after)
            raise MemoryError("simulated")
        return real(*args)

    monkeypatch.setattr(engine, "decide", failing)
    term = _Terminal(True)
    monkeypatch.setattr(sys, "stderr", term)
    assert cli.main(["halftone", str(png), str(tmp_path / "o.png"), "--device", "cpu"]) == 1
    text = term.getvalue()
    assert "\rDTCNNHalftoner.fit_transform: 1/30 sweeps" in text  # the bar had started
    last = text.split("\n")[-2]
    assert last.startswith("sknn-gpu: error: DTCNNHalftoner.fit_transform ran out of memory on cpu")
    assert not (tmp_path / "o.png").exists()


# ------------------------------------------------------------------ the real process
def test_process_exit_statuses_and_stderr(png, tmp_path):
    def proc(*argv):
        return subprocess.run(
            [sys.executable, "-m", "sknn_gpu.cli", *map(str, argv)], capture_output=True, text=True
        )

    missing = proc("halftone", tmp_path / "missing.png", tmp_path / "o.png")
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert missing.stderr.strip().splitlines() == [
        f"sknn-gpu: error: input file not found: '{tmp_path}/missing.png'"
    ]
    usage = proc("halftone", png, tmp_path / "o.png", "--levels", "65")
    assert usage.returncode == 2 and len(usage.stderr.strip().splitlines()) == 1
    ok = proc("halftone", png, tmp_path / "o.png", "--device", "cpu")
    assert ok.returncode == 0 and ok.stderr == "" and (tmp_path / "o.png").is_file()


# ------------------------------------------------------------------ progress off a terminal
def test_progress_off_a_terminal_goes_to_the_log_at_a_bounded_rate(png, tmp_path, monkeypatch, caplog):
    """Off a terminal (a batch job, a pipe) a long call logs a progress line at most every
    LOG_EVERY_SECONDS; here the interval is 0, so every sweep is logged. The closing
    summary is still held back (the result line on stdout says it all)."""
    import logging

    monkeypatch.setattr("sknn_gpu._progress.LOG_EVERY_SECONDS", 0.0)
    term = _Terminal(False)
    monkeypatch.setattr(sys, "stderr", term)
    with caplog.at_level(logging.INFO, logger="sknn_gpu"):
        assert cli.main(["halftone", str(png), str(tmp_path / "o.png"), "--device", "cpu"]) == 0
    lines = [r.getMessage() for r in caplog.records if r.name == "sknn_gpu.halftone"]
    n = DTCNNHalftoner(device="cpu").fit(np.asarray(Image.open(png))).n_iter_
    assert len(lines) == n, lines
    for k, line in enumerate(lines, 1):
        assert re.fullmatch(rf"DTCNNHalftoner\.fit_transform {k}/30 sweeps after [\d.]+ s", line), line
    assert "\r" not in term.getvalue()  # no bar off a terminal


def test_max_iter_reached_is_a_one_line_warning(png, tmp_path, capsys):
    status, out, err = run(
        ["halftone", png, tmp_path / "o.png", "--device", "cpu", "--max-iter", "2"], capsys
    )
    assert status == 0 and "stopped at max_iter=2" in out
    assert err.count("\n") == 1 and re.fullmatch(
        r"sknn-gpu: warning: DTCNNHalftoner\.fit_transform: 1 of 1 image did not reach a fixed point "
        r"within max_iter=2 sweeps .*\n",
        err,
    ), err


def test_huge_max_iter_is_cheap(png, tmp_path, capsys):
    """--max-iter 1e9 took 76 s and 16 GB (counters sized by max_iter); a converging run
    costs what it costs at the default."""
    status, out, _ = run(
        ["halftone", png, tmp_path / "o.png", "--device", "cpu", "--max-iter", "1000000000"], capsys
    )
    assert status == 0 and "(converged)" in out
