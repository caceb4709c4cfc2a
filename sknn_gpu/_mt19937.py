"""NumPy's legacy ``RandomState`` stream (MT19937) continued on the GPU.

NumPy keeps the legacy stream frozen (NEP 19): the same MT19937 outputs from the same
state are the same draws. :func:`mt19937_outputs` makes a ``RandomState``'s next outputs
on the GPU (``mt_raw``, ``_kernels/mt19937.cu``) and sets the ``RandomState`` where NumPy
would have left it; the FlyHash projection's draws (``randint``) and
:func:`legacy_uniform` (``uniform``, the MLP's initial weights) are made from them.
"""

from __future__ import annotations

import numpy as np

from ._backend import get_cupy
from ._kernels import get_function

__all__ = ["MT_N", "generation_words", "is_legacy_mt19937", "legacy_uniform", "mt19937_outputs"]

#: MT19937's state words
MT_N = 624
#: outputs per ``mt_raw`` launch in :func:`legacy_uniform` (16 MiB, and as much for the
#: generations' keys): the draws of any size are made in pieces of this many
UNIFORM_CHUNK_WORDS = 1 << 22


def is_legacy_mt19937(rng):
    """Whether ``rng`` is a NumPy ``RandomState`` on its MT19937 generator (the frozen stream)."""
    return type(rng) is np.random.RandomState and isinstance(
        getattr(rng, "_bit_generator", None), np.random.MT19937
    )


def generation_words(pos, count):
    """Words of the generations' keys ``mt_raw`` writes for ``count`` outputs from position ``pos``."""
    return ((int(pos) + int(count)) // MT_N + 2) * MT_N


def mt19937_outputs(rng, count):  # pragma: no cover - needs a GPU
    """``count`` tempered MT19937 outputs continuing ``rng``'s stream, made on the GPU.

    Returns ``(raw, advance)``: the outputs (CuPy uint32) and ``advance(used)``, which sets
    ``rng`` to the state NumPy reaches after ``used`` of them (``used <= count``); or None
    when ``rng`` is not a legacy MT19937 ``RandomState`` (the caller draws on the host).
    """
    if not is_legacy_mt19937(rng):
        return None
    _, key, pos, has_gauss, gauss = rng.get_state(legacy=True)
    cupy = get_cupy()
    raw = cupy.empty(count, dtype=cupy.uint32)
    gens = cupy.empty(generation_words(pos, count), dtype=cupy.uint32)
    get_function("mt19937", "mt_raw")(
        (1,), (1024,), (cupy.asarray(key, dtype=cupy.uint32), np.int32(pos), np.int64(count), raw, gens)
    )

    def advance(used):
        # NumPy keeps the last generation with pos 624 at its end
        g, q = divmod(int(pos) + int(used), MT_N)
        if q == 0:
            g, q = g - 1, MT_N
        rng.set_state(("MT19937", gens[g * MT_N : (g + 1) * MT_N].get(), q, has_gauss, gauss))

    return raw, advance


def legacy_uniform(rng, low, high, shape, dtype):  # pragma: no cover - needs a GPU
    """``rng.uniform(low, high, shape).astype(dtype)`` made on the GPU, bit for bit.

    Two outputs a value (``legacy_uniform`` in ``_kernels/mt19937.cu`` rounds as NumPy's C
    code does); ``rng`` is left where drawing on the host would leave it. Returns a CuPy
    array, or None when ``rng`` is not a legacy MT19937 ``RandomState``.
    """
    if not is_legacy_mt19937(rng):
        return None
    cupy = get_cupy()
    n = int(np.prod(shape))
    out = cupy.empty(n, dtype=dtype)
    ct = "float" if np.dtype(dtype) == np.float32 else "double"
    kernel = get_function("mt19937", f"legacy_uniform<{ct}>")
    low, span = float(low), float(high) - float(low)  # what NumPy computes in double
    per = UNIFORM_CHUNK_WORDS // 2
    for start in range(0, n, per):
        m = min(per, n - start)
        raw, advance = mt19937_outputs(rng, 2 * m)
        grid = int(min(-(-m // 256), 65535))
        kernel((grid,), (256,), (raw, np.int64(m), np.float64(low), np.float64(span), out[start : start + m]))
        advance(2 * m)
    return out.reshape(shape)
