"""Property and fuzz tests of DTCNNHalftoner (hypothesis), and its table of bad inputs.

* any layout, dtype and magnitude: the output has the input's shape, only the allowed
  levels, and an alpha channel passes through unchanged;
* 'async' mode: the energy never increases, every change is a strict descent;
* the NumPy engine equals a naive cell-by-cell implementation of the documented rules
  (colour classes in raster order, nearest level, ties keep the current level);
* ``verbose`` never changes a bit: any layout, split into any image groups, gives the
  silent call's halftone and diagnostics;
* bad inputs raise the documented error on every device (the cuda twin runs on a GPU).
"""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from sknn_gpu._backend import InsufficientMemoryError
from sknn_gpu.halftone import DTCNNHalftoner
from sknn_gpu.halftone._images import from_stack, image_layout, to_stack

SETTINGS = dict(max_examples=80)

#: Values a float image may hold, extremes included.
_UNIT = st.one_of(
    st.floats(0.0, 1.0, allow_nan=False, allow_subnormal=True),
    st.sampled_from([0.0, 1.0, 0.5, 5e-324, 1e-300, 0.5 - 2**-53, 0.5 + 2**-52, 1.0 - 2**-53]),
)


@st.composite
def images(draw, max_side=14):
    """(array, channel_axis) of any supported layout and dtype."""
    dtype = draw(st.sampled_from([np.uint8, np.float32, np.float64, np.bool_, np.int16]))
    layout = draw(st.sampled_from(["hw", "nhw", "hwc", "nhwc", "chw"]))
    h, w = draw(st.integers(1, max_side)), draw(st.integers(1, max_side))
    n, c = draw(st.integers(1, 3)), draw(st.sampled_from([1, 2, 3, 4]))
    shape, axis = {
        "hw": ((h, w), None),
        "nhw": ((n, h, w), None),
        "hwc": ((h, w, c), -1),
        "nhwc": ((n, h, w, c), -1),
        "chw": ((c, h, w), 0),
    }[layout]
    if dtype == np.uint8:
        elements = st.integers(0, 255)
    elif dtype in (np.bool_, np.int16):
        elements = st.integers(0, 1)
    else:
        elements = _UNIT
    X = draw(arrays(dtype, shape, elements=elements))
    return X, axis


def _allowed_levels(dtype, m):
    k = np.arange(m)
    if dtype == np.uint8:
        return set(((k * 510 + (m - 1)) // (2 * (m - 1))).tolist())
    return set((k / (m - 1)).astype(dtype).tolist())


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # short sync runs
@settings(**SETTINGS)
@given(
    data=images(),
    levels=st.integers(2, 6),
    mode=st.sampled_from(["async", "sync"]),
    init=st.sampled_from(["input", "threshold", "bayer", "random"]),
    radius=st.integers(1, 3),
    spacing=st.sampled_from([None, 5, 9]),
)
def test_output_takes_only_allowed_levels_and_keeps_layout(data, levels, mode, init, radius, spacing):
    X, axis = data
    ht = DTCNNHalftoner(
        levels=levels,
        mode=mode,
        init=init,
        radius=radius,
        first_sweep_spacing=spacing if spacing is None or spacing > radius else None,
        max_iter=4,
        channel_axis=axis,
        random_state=0,
        device="cpu",
    )
    out = ht.fit_transform(X)
    assert out.shape == X.shape
    assert out.dtype == (X.dtype if X.dtype in (np.uint8, np.float32, np.float64) else np.float64)
    lay = image_layout(X.shape, axis)
    halftoned = to_stack(out, lay)
    assert set(np.unique(halftoned).tolist()) <= _allowed_levels(out.dtype, levels)
    if lay.alpha:
        np.testing.assert_array_equal(np.moveaxis(out, axis, -1)[..., -1], np.moveaxis(X, axis, -1)[..., -1])
    np.testing.assert_array_equal(ht.transform(X), out)  # transform == fit_transform (seeded)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # short sync runs
@settings(**SETTINGS)
@given(
    data=images(max_side=10),
    levels=st.integers(2, 4),
    mode=st.sampled_from(["async", "sync"]),
    init=st.sampled_from(["input", "random", "bayer"]),
    group_pixels=st.integers(1, 400),
)
def test_verbose_never_changes_a_bit(data, levels, mode, init, group_pixels):
    import logging

    import sknn_gpu.halftone._dtcnn_run as dtcnn_module

    X, axis = data
    params = dict(levels=levels, mode=mode, init=init, channel_axis=axis, random_state=1, max_iter=6)
    quiet = DTCNNHalftoner(device="cpu", **params)
    expected = quiet.fit_transform(X)
    real = dtcnn_module.PROGRESS_PIXELS
    dtcnn_module.PROGRESS_PIXELS = group_pixels  # any grouping of the batch's images
    logger = logging.getLogger("sknn_gpu.halftone")
    level = logger.level
    logger.setLevel(logging.WARNING)  # keep the hypothesis run quiet
    try:
        loud = DTCNNHalftoner(device="cpu", verbose=2, **params)
        got = loud.fit_transform(X)
    finally:
        dtcnn_module.PROGRESS_PIXELS = real
        logger.setLevel(level)
    np.testing.assert_array_equal(got, expected)
    for name in ("flips_", "energy_", "n_iter_per_image_", "converged_", "cycle_detected_"):
        np.testing.assert_array_equal(getattr(loud, name), getattr(quiet, name), err_msg=name)


@settings(**SETTINGS)
@given(data=images(max_side=10))
def test_stack_round_trip_is_the_identity(data):
    X, axis = data
    lay = image_layout(X.shape, axis)
    stk = to_stack(X, lay)
    assert stk.shape == lay.stack_shape
    np.testing.assert_array_equal(from_stack(stk.copy(), X, lay), X)


@settings(**SETTINGS)
@given(
    img=arrays(np.float64, st.tuples(st.integers(3, 16), st.integers(3, 16)), elements=_UNIT),
    levels=st.integers(2, 5),
    init=st.sampled_from(["input", "threshold", "bayer", "random"]),
    radius=st.integers(1, 3),
    sigma=st.floats(0.5, 2.0),
    spacing=st.sampled_from([None, 4, 7]),
    classes=st.sampled_from([None, 4, 7]),
)
def test_async_energy_never_increases(img, levels, init, radius, sigma, spacing, classes):
    ht = DTCNNHalftoner(
        levels=levels,
        init=init,
        radius=radius,
        sigma=sigma,
        first_sweep_spacing=spacing if spacing is None or spacing > radius else None,
        class_spacing=classes if classes is None or classes > radius else None,
        max_iter=50,
        random_state=1,
        device="cpu",
    ).fit(img)
    d = np.diff(ht.energy_)
    assert np.all(d <= 0)
    changed = ht.flips_[1:] > 0
    assert np.all(d[changed] < 0) and np.all(d[~changed] == 0)
    assert ht.converged_ == (ht.flips_[-1] == 0)


# ------------------------------------------------------------------ naive reference
def _naive(img, ht, max_iter, init):
    """Cell-by-cell DT-CNN with the documented fixed-point rules (pure Python, tiny images)."""
    tm, m = ht.templates_, int(ht.levels)
    A, B, gain, T = tm["A_int"].tolist(), tm["B_int"].tolist(), tm["gain_int"], tm["T_int"]
    r = tm["radius"]
    h, w = img.shape
    if img.dtype == np.uint8:
        U = [[(int(v) * 2048 + 255) // 510 for v in row] for row in img]
    else:
        U = [[int(np.rint(float(v) * 1024.0)) for v in row] for row in img]
    Zu = [[(m - 1) * (u - 512) for u in row] for row in U]
    levels = [512 * (2 * k - (m - 1)) for k in range(m)]

    def window(V, i, j, K):
        return sum(
            K[dy][dx] * V[i + dy - r][j + dx - r]
            for dy in range(2 * r + 1)
            for dx in range(2 * r + 1)
            if 0 <= i + dy - r < h and 0 <= j + dx - r < w
        )

    b = [[T + window(Zu, i, j, B) for j in range(w)] for i in range(h)]

    def nearest(x, zcur):
        dist = [abs(x - gain * z) for z in levels]
        best = min(dist)
        ties = [z for z, d in zip(levels, dist) if d == best]
        return zcur if zcur in ties else ties[0]

    def energy2(Z):  # 2E(Z) - 2E(Zu), E(y) = -1/2 y'Ay - y'b + gain/2 |y|^2 in state units
        def e(V):
            return sum(
                -V[i][j] * window(V, i, j, A) - 2 * V[i][j] * b[i][j] + gain * V[i][j] ** 2
                for i in range(h)
                for j in range(w)
            )

        return e(Z) - e(Zu)

    if init == "input":
        Z = [row[:] for row in Zu]
    else:  # 'threshold': the level of U rounded half up
        Z = [[levels[min((64 * (m - 1) * u + 32768) >> 16, m - 1)] for u in row] for row in U]
    flips = []
    first = ht.first_sweep_spacing
    later = ht.class_spacing or r + 1
    for s in range(max_iter):
        p = first if (s == 0 and first) else later
        f = 0
        for ci in range(p):
            for cj in range(p):
                for i in range(ci, h, p):
                    for j in range(cj, w, p):
                        znew = nearest(window(Z, i, j, A) + b[i][j], Z[i][j])
                        f += znew != Z[i][j]
                        Z[i][j] = znew
        flips.append(f)
        if f == 0:
            break
    k = np.array([[(z // 512 + m - 1) // 2 for z in row] for row in Z])
    return k, flips, energy2(Z)


#: Intensities that put cells exactly between two levels under the identity template.
_TIES = st.sampled_from([0.25, 0.5, 0.75])


@settings(**SETTINGS)
@given(
    img=st.one_of(
        arrays(np.uint8, st.tuples(st.integers(2, 9), st.integers(2, 9)), elements=st.integers(0, 255)),
        arrays(np.float64, st.tuples(st.integers(2, 9), st.integers(2, 9)), elements=st.one_of(_UNIT, _TIES)),
    ),
    levels=st.integers(2, 4),
    radius=st.integers(1, 2),
    spacing=st.sampled_from([None, 4]),
    classes=st.sampled_from([None, 3, 5]),
    template=st.sampled_from(["gaussian", "custom", "identity"]),
    init=st.sampled_from(["input", "threshold"]),
)
def test_numpy_engine_equals_a_naive_cell_by_cell_run(img, levels, radius, spacing, classes, template, init):
    from sknn_gpu.halftone._templates import gaussian_q

    params = dict(
        levels=levels,
        max_iter=20,
        first_sweep_spacing=spacing,
        class_spacing=classes,
        init=init,
        device="cpu",
    )
    if template == "gaussian":
        params.update(radius=radius)
    else:
        q = gaussian_q(0.9, radius)
        A = -q.copy()
        A[radius, radius] = 0.0
        if template == "identity":  # y = f(u): ties wherever u is halfway between two levels
            A, q = np.zeros_like(q), np.zeros_like(q)
            q[radius, radius] = 1.0
        params.update(template="custom", A=A, B=q, T=0.1 if template == "custom" else 0.0)
    ht = DTCNNHalftoner(**params)
    out = ht.fit_transform(img)
    k, flips, e2 = _naive(img, ht, 20, init)
    if img.dtype == np.uint8:
        np.testing.assert_array_equal(out, ((k * 510 + (levels - 1)) // (2 * (levels - 1))).astype(np.uint8))
    else:
        np.testing.assert_array_equal(out, k / (levels - 1))
    np.testing.assert_array_equal(ht.flips_, flips)
    scale = 2.0 * ht.templates_["scale"] * (512.0 * (levels - 1)) ** 2
    assert ht.energy_[-1] == float(e2) / scale


# ------------------------------------------------------------------ bad inputs, every device
def _huge():
    return np.broadcast_to(np.float32(0.5), (200_000, 200_000))  # 40 G pixels, no memory behind them


BAD_INPUTS = [
    # (id, images, estimator parameters, error type, message fragment)
    ("nan", lambda: np.full((8, 8), np.nan), {}, ValueError, "NaN or infinite"),
    ("inf", lambda: np.full((8, 8), np.inf), {}, ValueError, "NaN or infinite"),
    ("negative", lambda: np.full((8, 8), -0.1), {}, ValueError, "Negative values in data"),
    ("above one", lambda: np.full((8, 8), 1.5), {}, ValueError, r"\[0, 1\]"),
    ("uint8 scale float", lambda: np.full((8, 8), 255.0), {}, ValueError, "Divide by 255"),
    ("int64 not 0/1", lambda: np.full((8, 8), 7, dtype=np.int64), {}, ValueError, "must be uint8"),
    ("1-D", lambda: np.full(8, 0.5), {}, ValueError, "1 dimension"),
    ("5-D", lambda: np.full((2, 2, 2, 2, 2), 0.5), {}, ValueError, "5 dimension"),
    ("empty", lambda: np.zeros((0, 8)), {}, ValueError, "must not be empty"),
    ("complex", lambda: np.full((8, 8), 0.5 + 0j), {}, ValueError, "Complex data"),
    ("strings", lambda: np.array([["a", "b"], ["c", "d"]]), {}, TypeError, "numeric"),
    ("sparse", lambda: sp.csr_matrix(np.full((8, 8), 0.5)), {}, TypeError, "sparse"),
    ("grey stack (5, 64, 3)", lambda: np.full((5, 64, 3), 0.5), {}, ValueError, "ambiguous"),
    ("channels first", lambda: np.full((2, 3, 16, 16), 0.5), {}, ValueError, "ambiguous"),
    ("axis out of range", lambda: np.full((8, 8, 3), 0.5), {"channel_axis": 3}, ValueError, "out of range"),
    ("axis on 2-D", lambda: np.full((8, 8), 0.5), {"channel_axis": -1}, ValueError, "no channel axis"),
    (
        "None on 4-D",
        lambda: np.full((1, 8, 8, 3), 0.5),
        {"channel_axis": None},
        ValueError,
        "channel_axis=None",
    ),
    ("bad channel_axis", lambda: np.full((8, 8), 0.5), {"channel_axis": "rgb"}, ValueError, "channel_axis"),
    ("huge float image", _huge, {}, InsufficientMemoryError, r"needs \d+ bytes"),
    ("levels=1", lambda: np.full((8, 8), 0.5), {"levels": 1}, ValueError, "'levels' parameter"),
    ("levels=65", lambda: np.full((8, 8), 0.5), {"levels": 65}, ValueError, "'levels' parameter"),
    ("sigma=nan", lambda: np.full((8, 8), 0.5), {"sigma": float("nan")}, ValueError, "'sigma' parameter"),
    ("sigma=-1", lambda: np.full((8, 8), 0.5), {"sigma": -1.0}, ValueError, "'sigma' parameter"),
    ("radius=0", lambda: np.full((8, 8), 0.5), {"radius": 0}, ValueError, "'radius' parameter"),
    ("max_iter=0", lambda: np.full((8, 8), 0.5), {"max_iter": 0}, ValueError, "'max_iter' parameter"),
    ("spacing < r+1", lambda: np.full((8, 8), 0.5), {"first_sweep_spacing": 3}, ValueError, r"radius \+ 1"),
    (
        "custom without A",
        lambda: np.full((8, 8), 0.5),
        {"template": "custom"},
        ValueError,
        "needs both A and B",
    ),
]


@pytest.mark.parametrize("case", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_inputs_raise_the_documented_error(case, device):
    _, make, params, error, fragment = case
    X = make()
    if device == "cuda" and isinstance(X, np.ndarray) and X.dtype.kind in "biufc" and X.base is None:
        import cupy

        X = cupy.asarray(X)  # the checks run on the device, as for a user's CuPy images
    with pytest.raises(error, match=fragment):
        DTCNNHalftoner(device=device, **params).fit(X)
