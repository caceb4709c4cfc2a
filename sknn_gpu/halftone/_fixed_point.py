"""The prepared network and the fixed-point conversions both DT-CNN engines share.

Written against an array module ``xp`` (NumPy or CuPy), so the NumPy engine
(``_dtcnn_cpu.py``) and the CUDA engine (``_dtcnn_cuda.py``, for the dtypes its
one-pass kernels do not cover) run the same integer arithmetic. The conventions
(10-bit input, state ``Z = 512 (m - 1) y`` in int16, templates scaled by
``2**14``) are documented in ``_templates.py``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Network(NamedTuple):
    """A stack of images prepared for the sweeps, on one engine's device.

    Attributes
    ----------
    Z : array of int16, shape (n, H, W)
        Initial state (the engines' sweeps may update it in place).
    Zu : array of int32, shape (n, H, W)
        The input in state units, ``(m - 1) (U - 512)``.
    b : array of int32 or int64, shape (n, H, W)
        ``B*u + T``, computed once.
    A : ndarray of int32, shape (2r+1, 2r+1)
        The integer feedback template (host).
    A_dev : array of int32
        The feedback template where the engine reads it (host on the CPU, a flat
        device copy on the GPU).
    gain : int
        Integer output gain.
    a_c : int
        Centre tap of ``A``.
    m : int
        Number of output levels.
    defines : dict or None
        Kernel compile-time constants (CUDA engine only).
    """

    Z: object
    Zu: object
    b: object
    A: np.ndarray
    A_dev: object
    gain: int
    a_c: int
    m: int
    defines: dict | None = None


def input_state(stk, m, xp):
    """``U`` (int32 in [0, 1024]) and ``Zu = (m - 1) (U - 512)`` (int32) of an image stack.

    Exact integer arithmetic on both devices: uint8 ``p`` becomes ``round(1024 p / 255)``
    (never a tie), 0/1 integers and booleans ``1024 p``, floats ``rint(1024 v)``.
    """
    if stk.dtype == np.uint8:
        v = stk.astype(np.int32)
        U = (v * 2048 + 255) // 510
    elif stk.dtype == np.bool_ or stk.dtype.kind in "iu":
        U = stk.astype(np.int32) * 1024
    else:
        U = xp.rint(stk.astype(np.float64) * 1024.0).astype(np.int32)
    return U, ((m - 1) * (U - 512)).astype(np.int32)


def initial_state(U, Zu, thr, m, xp):
    """Initial int16 state: the continuous input (``thr is None``) or ``U`` quantised by ``thr``."""
    if thr is None:
        return Zu.astype(np.int16)
    thr = xp.asarray(thr)
    k = xp.minimum((64 * (m - 1) * U.astype(np.int64) + thr) >> 16, m - 1)
    return (512 * (2 * k - (m - 1))).astype(np.int16)


#: Largest value of the unsigned integer output dtypes: level ``k`` of ``m`` is
#: ``round(top k / (m - 1))``.
UINT_TOP = {np.dtype(np.uint8): 255, np.dtype(np.uint16): 65535}


def state_to_output(Z, m, dtype, xp):
    """Output levels ``k / (m - 1)`` of a state stack in ``dtype``.

    uint8 gives ``round(255 k / (m - 1))`` and uint16 ``round(65535 k / (m - 1))``
    (integer arithmetic, halves rounded up); bool gives ``k > 0`` (two levels); a
    float dtype is kept; anything else becomes float64. The same expressions on NumPy
    and CuPy, so both devices give the same bits.
    """
    k = (Z.astype(np.int32) // 512 + (m - 1)) // 2
    dtype = np.dtype(dtype)
    top = UINT_TOP.get(dtype)
    if top is not None:
        return ((k * (2 * top) + (m - 1)) // (2 * (m - 1))).astype(dtype)
    if dtype == np.bool_:
        return k > 0
    out_dtype = dtype if dtype.kind == "f" else np.float64
    return (k.astype(np.float64) / (m - 1)).astype(out_dtype)


def state_energy2(Z, Zu, b, A, gain, conv):
    """Exact ``2 E`` per image (int64) relative to the continuous state y = u.

    ``E(y) = -1/2 y'Ay - y'(Bu+T) + gain/2 |y|^2`` in fixed point, minus its value at
    y = u, written through D = Z - Zu to keep the numbers small. ``conv(V, T)`` is
    the engine's zero-padded neighbourhood sum.
    """
    Z = Z.astype(np.int32)
    D = Z - Zu
    AD = conv(D, A).astype(np.int64)
    AZu = conv(Zu, A).astype(np.int64)
    w = -AZu - b.astype(np.int64) + gain * Zu.astype(np.int64)
    D64 = D.astype(np.int64)
    per = D64 * (-AD + gain * D64 + 2 * w)
    return per.reshape(per.shape[0], -1).sum(axis=1)
