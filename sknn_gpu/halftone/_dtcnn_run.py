"""The driver that runs a DT-CNN engine over a stack of images, shared by fit and transform.

:class:`~sknn_gpu.halftone.DTCNNHalftoner` decides (parameters, layouts, sizes); this
module runs the dynamics: the initial state (:func:`bayer_matrix` and the other
``init`` rules), the choice of engine for a resolved device, the grouping of a batch
into progress-sized calls, the block-by-block 'async' run with Brent's cycle detection,
and the per-sweep trace. Both engines take the same blocks at the same sweeps, so their
bits stay identical.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from .._backend import InsufficientMemoryError, array_module, to_host
from . import _dtcnn_cpu

__all__ = ["bayer_matrix", "engine", "run"]

#: With ``verbose`` on a batch in 'async' mode, the engine halftones groups of about this
#: many pixels (at least one image), one call and one progress report each. Silent calls
#: hand the engine the whole batch at once.
PROGRESS_PIXELS = 1 << 20
#: 'async' runs of more than this many sweeps go in blocks of this many: the per-sweep
#: counters (host and GPU) are sized by the block, never by ``max_iter``, and after each
#: block the state of every image still moving is compared with a saved state (Brent's
#: cycle detection: one saved state per image), so an image caught in a cycle stops.
#: The blocks end at the same sweeps on both devices, which keeps them bit-identical.
SWEEP_BLOCK = 64


def bayer_matrix(n: int = 8) -> NDArray[np.int64]:
    """The ``n x n`` Bayer ordered-dither index matrix.

    Parameters
    ----------
    n : int, default=8
        Size, a power of two.

    Returns
    -------
    ndarray of shape (n, n)
        A permutation of ``0 .. n*n - 1``; ``(M + 0.5) / n**2`` are the dither thresholds.

    Examples
    --------
    >>> from sknn_gpu.halftone import bayer_matrix
    >>> bayer_matrix(2).tolist()
    [[0, 2], [3, 1]]
    """
    if n < 1 or n & (n - 1):
        raise ValueError(f"n must be a power of two, got {n}.")
    m = np.zeros((1, 1), dtype=np.int64)
    while m.shape[0] < n:
        m = np.block([[4 * m, 4 * m + 2], [4 * m + 3, 4 * m + 1]])
    return m


def _init_thresholds(init, shape, rng):
    """Host-side thresholds in [0, 65536) for the initial quantisation (None for 'input')."""
    n, h, w = shape
    if init == "input":
        return None
    if init == "threshold":
        return np.int32(32768)
    if init == "bayer":
        bm = bayer_matrix(8)
        tiled = np.tile(bm, ((h + 7) // 8, (w + 7) // 8))[:h, :w]
        return (1024 * tiled + 512).astype(np.int32)
    return rng.randint(0, 65536, size=(n, h, w)).astype(np.int32)


def engine(device):
    """The engine module for a resolved device: ``_dtcnn_cpu`` or ``_dtcnn_cuda``."""
    if device == "cuda":
        from . import _dtcnn_cuda

        return _dtcnn_cuda
    return _dtcnn_cpu


# --------------------------------------------------------------------------------------
# the driver shared by fit and transform
# --------------------------------------------------------------------------------------
def _image_groups(n, h, w, bar):
    """Slices of the stack that the engine halftones one call each.

    Silent (``bar`` None) or one image: the whole stack in one call. With a progress
    report on a batch: groups of about :data:`PROGRESS_PIXELS` pixels (at least one
    image), one report each. Images are halftoned independently in 'async' mode, so
    the grouping never changes a bit.
    """
    if bar is None or n <= 1:
        return [slice(0, n)]
    per = max(1, PROGRESS_PIXELS // max(1, h * w))
    return [slice(a, min(a + per, n)) for a in range(0, n, per)]


def _out_of_memory(exc, what, device, g, n, shape):
    """The error of an allocation that failed half-way, naming where it happened."""
    where = f"image {g.start + 1}" if g.stop - g.start == 1 else f"images {g.start + 1}-{g.stop}"
    done = f"; the {g.start} image(s) before it were done and are discarded" if g.start else ""
    return MemoryError(
        f"{what} ran out of memory on {device} while halftoning {where} of {n} "
        f"(stack of shape {tuple(shape)}){done}. The size estimate fitted when it was checked, "
        "so other allocations took the memory since (other arrays, CuPy's memory pool): free "
        f"them or halftone smaller batches. Cause: {type(exc).__name__}: {exc}"
    )


class _Trace:
    """Outcome per image and totals per sweep of a run, in memory that grows with the
    sweeps actually run (never with ``max_iter``).

    ``n_iter``, ``converged`` and ``cycle`` are per image of the stack; ``flips`` and
    ``de2`` per sweep, summed over the images (what the fitted attributes report);
    ``e0`` is the summed ``2 E`` of the initial states.
    """

    def __init__(self, n, max_iter):
        self.n_iter = np.full(n, max_iter, dtype=np.int64)
        self.converged = np.zeros(n, dtype=bool)
        self.cycle = np.zeros(n, dtype=bool)
        self._flips = np.zeros(min(max_iter, SWEEP_BLOCK), dtype=np.int64)
        self._de2 = np.zeros_like(self._flips)
        self.steps = 0
        self.e0 = 0

    def add(self, images, start, flips, de2):
        """Counters ``(len(images), k)`` of sweeps ``start .. start + k`` of ``images`` (stack
        indices); returns the mask of the images that reached a fixed point."""
        k = flips.shape[1]
        end = start + k
        if end > self._flips.size:  # grow by doubling: amortised O(1) per sweep
            size = max(end, 2 * self._flips.size)
            self._flips = np.concatenate([self._flips, np.zeros(size - self._flips.size, np.int64)])
            self._de2 = np.concatenate([self._de2, np.zeros(size - self._de2.size, np.int64)])
        self._flips[start:end] += flips.sum(axis=0)
        self._de2[start:end] += de2.sum(axis=0)
        self.steps = max(self.steps, end)
        still = flips == 0
        fixed = still.any(axis=1)
        self.n_iter[images[fixed]] = start + still[fixed].argmax(axis=1) + 1
        self.converged[images[fixed]] = True
        return fixed

    @property
    def flips(self):
        return self._flips[: self.steps]

    @property
    def de2(self):
        return self._de2[: self.steps]


def _run_long(engine, stk, args, max_iter, progress, want_energy, trace, offset):
    """'async' sweeps of a stack in blocks of :data:`SWEEP_BLOCK`, with cycle detection.

    After each block, the images that reached a fixed point leave the run; the state of
    every other image is compared with its saved state (Brent's method: the state is
    saved after blocks 1, 2, 4, 8, ... of the run), and an image whose state repeats is
    in a cycle: it is reported (``trace.cycle``) and leaves the run as it is. A state
    equal to one some sweeps earlier proves a cycle (every sweep after the first applies
    the same map), and Brent's method finds every cycle within a few of its periods,
    with one saved state per image. The images still running are swept as a sub-stack
    (every image is halftoned on its own, so this changes no bit).

    ``args`` are ``(tm, m, boundary, thr, first_spacing, spacing, out_dtype)``; the
    results go into ``trace`` (stack indices shifted by ``offset``); returns the output.
    """
    tm, m, boundary, thr, first_spacing, spacing, out_dtype = args
    net = engine.prepare(stk, tm, m, boundary, thr)
    if want_energy:
        trace.e0 += int(np.sum(engine.energy2(net, net.Z)))
    xp = array_module(net.Z)
    n = stk.shape[0]
    active = np.arange(n)
    saved, power, lam = None, 1, 0
    done = 0
    while done < max_iter and active.size:
        k = min(SWEEP_BLOCK, max_iter - done)
        if active.size == n:
            sub = net
        else:
            idx = xp.asarray(active)
            sub = net._replace(Z=net.Z[idx], Zu=net.Zu[idx], b=net.b[idx])
        flips, de2 = engine.sweep_block(sub, k, first_spacing if done == 0 else None, spacing, progress)
        if sub is not net:
            net.Z[idx] = sub.Z
        fixed = trace.add(active + offset, done, flips, de2)
        done += k
        moving = ~fixed
        Z = sub.Z[xp.asarray(moving)] if fixed.any() else sub.Z
        if saved is not None and fixed.any():
            saved = saved[xp.asarray(moving)]
        active = active[moving]
        if not active.size:
            break
        if saved is None:
            saved = Z.copy()
            continue
        lam += 1
        same = np.asarray(to_host(xp.all((Z == saved).reshape(active.size, -1), axis=1)), dtype=bool)
        if same.any():
            trace.cycle[active[same] + offset] = True
            trace.n_iter[active[same] + offset] = done
            keep = ~same
            active, Z, saved = active[keep], Z[xp.asarray(keep)], saved[xp.asarray(keep)]
        if lam == power:
            saved, power, lam = Z.copy(), 2 * power, 0
    return engine.output(net, out_dtype)


def run(
    stk,
    engine,
    tm,
    m,
    mode,
    max_iter,
    init,
    boundary,
    rng,
    want_energy,
    first_spacing,
    out_dtype,
    bar=None,
    what="DTCNNHalftoner",
    device="cpu",
    spacing=None,
):
    """Halftone a stack (n, H, W) with ``engine``; returns the output levels and diagnostics.

    The output (in ``out_dtype``) stays on the engine's device; the diagnostics are
    host arrays: per image ``converged``, ``cycle`` and ``n_iter``; per sweep, summed
    over the images, ``flips``, ``back`` ('sync' only: cells that differ from two
    sweeps back) and, with ``want_energy``, ``energy2`` (exact ``2 E`` after each
    sweep). Their memory follows the sweeps run, never ``max_iter``: 'async' runs
    longer than :data:`SWEEP_BLOCK` sweeps go block by block (:func:`_run_long`).

    ``bar`` (a :class:`~sknn_gpu._progress.Progress`, or None when silent) advances
    per sweep ('sync', and 'async' on one image: the engines report each sweep) or
    per group of images ('async' on a batch: one engine call per group, see
    :func:`_image_groups`). When silent, the engine gets the whole stack in one call
    and no callback. A ``MemoryError`` half-way is re-raised naming the images.
    """
    n, h, w = stk.shape
    thr = _init_thresholds(init, stk.shape, rng)  # drawn for the whole stack, then sliced
    info = {}
    if mode == "sync":
        try:
            net = engine.prepare(stk, tm, m, boundary, thr)
            progress = bar.update if bar is not None else None
            out, changed, back, energies = engine.run_sync(net, max_iter, want_energy, out_dtype, progress)
        except MemoryError as exc:
            if isinstance(exc, InsufficientMemoryError):
                raise
            raise _out_of_memory(exc, what, device, slice(0, n), n, stk.shape) from exc
        fixed = changed == 0
        cyc = (back == 0) & ~fixed
        conv_any = fixed.any(axis=1)
        stop = fixed | cyc
        info["n_iter"] = np.where(stop.any(axis=1), stop.argmax(axis=1) + 1, changed.shape[1])
        info["converged"] = conv_any
        info["cycle"] = cyc.any(axis=1)
        info["flips"] = changed.sum(axis=0)
        info["back"] = back.sum(axis=0)
        if want_energy:
            info["energy2"] = np.array([int(np.sum(e)) for e in energies], dtype=np.int64)
        return out, info

    groups = _image_groups(n, h, w, bar)
    per_sweep = bar.update if bar is not None and n == 1 else None
    trace = _Trace(n, max_iter)
    out = None
    for g in groups:
        try:
            thr_g = thr[g] if thr is not None and np.ndim(thr) == 3 else thr
            stk_g = stk if len(groups) == 1 else stk[g]
            images = np.arange(g.start, g.stop)
            if max_iter > SWEEP_BLOCK:
                args = (tm, m, boundary, thr_g, first_spacing, spacing, out_dtype)
                out_g = _run_long(engine, stk_g, args, max_iter, per_sweep, want_energy, trace, g.start)
            elif want_energy or per_sweep is not None:
                net = engine.prepare(stk_g, tm, m, boundary, thr_g)
                if want_energy:
                    trace.e0 += int(np.sum(engine.energy2(net, net.Z)))
                out_g, flips, de2 = engine.run_async(
                    net, max_iter, first_spacing, out_dtype, per_sweep, spacing=spacing
                )
                del net
                trace.add(images, 0, flips, de2)
            else:  # transform: one engine call (the CUDA engine replays a repeated configuration)
                args = (tm, m, boundary, thr_g, max_iter, first_spacing, out_dtype)
                out_g, flips, de2 = engine.halftone(stk_g, *args, spacing=spacing)
                trace.add(images, 0, flips, de2)
            if len(groups) == 1:
                out = out_g
            else:
                if out is None:
                    out = array_module(out_g).empty((n, h, w), dtype=out_g.dtype)
                out[g] = out_g
        except MemoryError as exc:
            if isinstance(exc, InsufficientMemoryError):
                raise
            raise _out_of_memory(exc, what, device, g, n, stk.shape) from exc
        if bar is not None and per_sweep is None:
            bar.update(g.stop - g.start)
    steps = int(trace.n_iter.max())
    info["flips"] = trace.flips[:steps]
    info["converged"] = trace.converged
    info["n_iter"] = trace.n_iter
    info["cycle"] = trace.cycle
    if want_energy:
        info["energy2"] = trace.e0 + np.cumsum(trace.de2[:steps])
    return out, info
