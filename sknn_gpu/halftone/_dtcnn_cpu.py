"""The NumPy engine of DTCNNHalftoner: the reference the CUDA engine reproduces bit for bit.

Vectorised over the cells of a colour class (no Python loop over pixels). The
functions :func:`prepare`, :func:`energy2`, :func:`run_async`, :func:`sweep_block`,
:func:`output` and :func:`run_sync` have the same signatures and results as those of
``_dtcnn_cuda.py``; the estimator picks one of the two modules once from ``device_``.
"""

from __future__ import annotations

import numpy as np

from ._fixed_point import Network, initial_state, input_state, state_energy2, state_to_output

__all__ = [
    "prepare",
    "halftone",
    "energy2",
    "run_async",
    "sweep_block",
    "output",
    "run_sync",
    "conv",
    "decide",
]


def _reflect_index(n, r):
    i = np.mod(np.arange(-r, n + r), 2 * n)
    return np.where(i < n, i, 2 * n - 1 - i)


def conv(V, T, reflect=False, offset=0):
    """int64 ``offset + T * V`` over the (2r+1)^2 window, V reflect- or zero-extended."""
    r = (T.shape[0] - 1) // 2
    n, h, w = V.shape
    V = V.astype(np.int64)
    if reflect:
        P = V[:, _reflect_index(h, r)][:, :, _reflect_index(w, r)]
    else:
        P = np.pad(V, ((0, 0), (r, r), (r, r)))
    out = np.full((n, h, w), offset, dtype=np.int64)
    for dy, dx in zip(*np.nonzero(T)):
        out += int(T[dy, dx]) * P[:, dy : dy + h, dx : dx + w]
    return out


def decide(x, zcur, gain, m):
    """The level nearest to ``x / gain`` as a state value (vectorised twin of ``decide`` in dtcnn.cu).

    On an exact tie the current level is kept, else the lower one; int64 throughout.
    """
    c = 2048 * gain
    R = 2 * x + 1024 * gain * m
    pos = R > 0
    q = np.where(pos, (R - 1) // c, 0)
    k = np.minimum(q, m - 1)
    up = R // c
    tie = pos & (R % c == 0) & (up <= m - 1) & (zcur == 512 * (2 * up - (m - 1)))
    k = np.where(tie, up, k)
    return 512 * (2 * k - (m - 1))


def prepare(stk, tm, m, boundary, thr):
    """Quantise a stack (n, H, W), compute ``B*u + T`` and the initial state.

    Parameters
    ----------
    stk : ndarray of shape (n, H, W)
        Intensities (uint8, 0/1 integers or booleans, or floats in [0, 1]).
    tm : dict
        Templates from ``build_templates``.
    m : int
        Number of output levels.
    boundary : {'zero', 'reflect'}
        How ``B*u`` sees outside the image.
    thr : ndarray, int or None
        Initial-quantisation thresholds (None: start from the continuous input).

    Returns
    -------
    Network
    """
    stk = np.asarray(stk)
    U, Zu = input_state(stk, m, np)
    A = tm["A_int"]
    b = conv(Zu, tm["B_int"], reflect=boundary == "reflect", offset=tm["T_int"])
    Z = initial_state(U, Zu, thr, m, np)
    r = tm["radius"]
    return Network(Z, Zu, b, A, A, tm["gain_int"], int(A[r, r]), m)


def halftone(stk, tm, m, boundary, thr, max_iter, first_spacing, out_dtype, spacing=None):
    """:func:`prepare` then :func:`run_async` without progress reports: ``(out, flips, de2)``.

    The CUDA engine's twin keeps the launches of a repeated configuration; here it is
    just the two calls.
    """
    net = prepare(stk, tm, m, boundary, thr)
    return run_async(net, max_iter, first_spacing, out_dtype, spacing=spacing)


def energy2(net, Z):
    """Exact ``2 E`` per image of the state ``Z`` (host int64, shape (n,))."""
    return state_energy2(Z, net.Zu, net.b, net.A, net.gain, conv)


def _sparse_pass(Zp, b, A64, sel, ci, cj, p):
    """x for the cells of one wide-spacing class: one window product per cell (einsum)."""
    k = A64.shape[0]
    src = Zp if isinstance(sel, slice) else Zp[sel]
    win = np.lib.stride_tricks.sliding_window_view(src, (k, k), axis=(1, 2))[:, ci::p, cj::p]
    return np.einsum("nijab,ab->nij", win, A64) + b[sel, ci::p, cj::p]


def _sweeps(Z, b, A, gain, a_c, m, max_iter, first_spacing=None, progress=None, spacing=None):
    """Colour-class sweeps until a sweep changes nothing; per-sweep flips and 2 dE (int64).

    Sweep 0 uses ``first_spacing`` when given, every other sweep ``spacing`` (None:
    ``r + 1``); the classes of a sweep run in raster order of ``(ci, cj)``.

    ``progress``, when given, is called with 1 after each sweep (the sweeps are a
    Python loop here, so reporting costs nothing).
    """
    n, h, w = Z.shape
    r = (A.shape[0] - 1) // 2
    A64 = A.astype(np.int64)
    Zp = np.zeros((n, h + 2 * r, w + 2 * r), dtype=np.int32)
    Zp[:, r : r + h, r : r + w] = Z
    taps = [(int(dy), int(dx), int(A[dy, dx])) for dy, dx in zip(*np.nonzero(A))]
    flips = np.zeros((n, max_iter), dtype=np.int64)
    de2 = np.zeros((n, max_iter), dtype=np.int64)
    active = np.arange(n)
    for s in range(max_iter):
        if s > 0:
            active = active[flips[active, s - 1] != 0]
            if active.size == 0:
                break
        sel = slice(None) if active.size == n else active
        sparse = s == 0 and first_spacing is not None
        p = first_spacing if sparse else (spacing or r + 1)
        for ci in range(p):
            nr = len(range(ci, h, p))
            for cj in range(p):
                nc = len(range(cj, w, p))
                if nr == 0 or nc == 0:
                    continue
                rows = slice(r + ci, r + ci + (nr - 1) * p + 1, p)
                cols = slice(r + cj, r + cj + (nc - 1) * p + 1, p)
                if sparse:
                    x = _sparse_pass(Zp, b, A64, sel, ci, cj, p)
                else:
                    acc = np.zeros((active.size, nr, nc), dtype=np.int32)
                    for dy, dx, a in taps:
                        y0, x0 = ci + dy, cj + dx
                        acc += a * Zp[sel, y0 : y0 + (nr - 1) * p + 1 : p, x0 : x0 + (nc - 1) * p + 1 : p]
                    x = acc.astype(np.int64) + b[sel, ci::p, cj::p]
                zcur = Zp[sel, rows, cols].astype(np.int64)
                znew = decide(x, zcur, gain, m)
                changed = znew != zcur
                d = (gain - a_c) * (znew - zcur) * (znew + zcur) - 2 * (x - a_c * zcur) * (znew - zcur)
                flips[active, s] += changed.reshape(active.size, -1).sum(axis=1)
                de2[active, s] += np.where(changed, d, 0).reshape(active.size, -1).sum(axis=1)
                Zp[sel, rows, cols] = znew
        if progress is not None:
            progress(1)
    return Zp[:, r : r + h, r : r + w].astype(np.int16), flips, de2


def run_async(net, max_iter, first_spacing, out_dtype, progress=None, spacing=None):
    """Asynchronous (colour-class Gauss-Seidel) sweeps from ``net.Z``.

    Parameters
    ----------
    net : Network
        From :func:`prepare`.
    max_iter : int
        Most sweeps.
    first_spacing : int or None
        Colour-class spacing of sweep 0 (None: ``spacing``, like the others).
    out_dtype : dtype
        Dtype of the returned output levels.
    progress : callable or None, default=None
        Called with the number of sweeps run, after each sweep (the CUDA engine:
        after each block of ``PROGRESS_SWEEPS`` sweeps, one launch each). None (the
        estimator's ``verbose=0``) keeps the CUDA engine at one launch for all sweeps.
    spacing : int or None, default=None
        Colour-class spacing of the other sweeps, ``r + 1`` .. (None: ``r + 1``, the
        fewest classes; ``2 r + 1``: the paper's sub-images of the template's size).

    Returns
    -------
    out : array of shape (n, H, W)
        Output levels in ``out_dtype`` (on the engine's device).
    flips, de2 : ndarray of int64, shape (n, max_iter)
        Cells changed and exact ``2 dE`` per image and sweep (host; zero after the
        sweep that changed nothing).
    """
    Z, flips, de2 = _sweeps(
        net.Z, net.b, net.A, net.gain, net.a_c, net.m, max_iter, first_spacing, progress, spacing
    )
    return state_to_output(Z, net.m, out_dtype, np), flips, de2


def sweep_block(net, k, first_spacing, spacing=None, progress=None):
    """``k`` asynchronous sweeps from ``net.Z``, written back into ``net.Z``: ``(flips, de2)``.

    The sweeps of :func:`run_async` without the output conversion, for the estimator's
    long runs (blocks of sweeps, the state checked between blocks). ``flips`` and
    ``de2`` are host int64 arrays of shape (n, k), as for :func:`run_async`.
    """
    Z, flips, de2 = _sweeps(
        net.Z, net.b, net.A, net.gain, net.a_c, net.m, k, first_spacing, progress, spacing
    )
    net.Z[...] = Z
    return flips, de2


def output(net, out_dtype):
    """Output levels of the state ``net.Z`` in ``out_dtype``."""
    return state_to_output(net.Z, net.m, out_dtype, np)


def run_sync(net, max_iter, want_energy, out_dtype, progress=None):
    """Synchronous (Jacobi) steps from ``net.Z`` until a fixed point or a 2-cycle.

    Parameters
    ----------
    net, max_iter, out_dtype
        As for :func:`run_async` (``max_iter`` counts steps).
    want_energy : bool
        Record ``2 E`` after every step.
    progress : callable or None, default=None
        Called with 1 after each step (both engines wait for each step's counts
        anyway, so reporting adds no launch).

    Returns
    -------
    out : array of shape (n, H, W)
        As for :func:`run_async`.
    changed, back : ndarray of int64, shape (n, steps)
        Per step, cells that differ from the previous state and from the state two
        steps back (0 with ``changed > 0``: a 2-cycle).
    energies : list of ndarray
        ``2 E`` per image after each step (empty unless ``want_energy``).
    """
    n = net.Z.shape[0]
    zprev2 = net.Z.astype(np.int64)
    zcur = net.Z.astype(np.int64)
    changed, back = [], []  # one (n,) column per step run: memory follows the steps, not max_iter
    energies = []
    for _ in range(max_iter):
        x = conv(zcur, net.A) + net.b
        znew = decide(x, zcur, net.gain, net.m)
        changed.append((znew != zcur).reshape(n, -1).sum(axis=1))
        back.append((znew != zprev2).reshape(n, -1).sum(axis=1))
        zprev2, zcur = zcur, znew
        if want_energy:
            energies.append(energy2(net, zcur))
        if progress is not None:
            progress(1)
        if np.all((changed[-1] == 0) | (back[-1] == 0)):
            break
    out = state_to_output(zcur.astype(np.int16), net.m, out_dtype, np)
    return out, np.stack(changed, axis=1).astype(np.int64), np.stack(back, axis=1).astype(np.int64), energies
