"""GPUMLPClassifier's prediction on the GPU: the forward pass over CuPy rows.

* float32 on a GPU with tensor cores (compute capability 8.0 and newer): every hidden layer
  is one ``dense_tc`` launch (``_kernels/mlp.cu``: the product in three TF32 products, to
  float32 accuracy, then the bias and activation); a last hidden layer of at most
  :data:`TC_COLS` units with at most :data:`OUT_FUSED_MAX` outputs takes the output layer
  in the same launch. The launches of an input shape are planned once per thread and then
  replayed from prebuilt argument blocks (:class:`~sknn_gpu._kernels._launch.Launch`).
* otherwise (float64, older GPUs): cuBLAS products, ``bias_act_rows``, and ``tail_fused``
  or ``out_fused`` for the last layers.

The reference is the NumPy forward pass (:func:`._base.forward`); the trainer
(:mod:`._mlp_cuda`) shares the kernel codes of this module.
"""

from __future__ import annotations

import functools
import operator

import numpy as np

from .._backend import device_limits, get_cupy
from .._kernels import get_function
from .._kernels._launch import Launch, LaunchTable, driver_launch
from ._mlp_graph import _NULL, cublas_library, gemm, on_current_stream

__all__ = [
    "ACT_CODES",
    "OUT_CODES",
    "OUT_FUSED_MAX",
    "forward_cuda",
    "out_weights",
    "tc_packs",
    "use_dense_tc",
]

#: ``ACT`` and ``OUT`` template arguments of ``_kernels/mlp.cu``
ACT_CODES = {"identity": 0, "logistic": 1, "tanh": 2, "relu": 3}
OUT_CODES = {"softmax": 0, "logistic": 1}
#: the output widths ``out_fused`` is compiled for (its ``O``: the output coefficients are
#: padded with zero columns to the next of them, :func:`out_weights`); wider output layers
#: take a cuBLAS product and ``bias_out``
_OUT_WIDTHS = (2, 4, 8, 10, 12, 16, 24, 32)
#: widest output layer of ``out_fused``
OUT_FUSED_MAX = _OUT_WIDTHS[-1]
#: rows a warp of ``out_fused`` takes (its ``R``), by value size and ``O``: each read of the
#: output coefficients serves them all, and the lane keeps ``R x O`` sums
_OUT_FUSED_ROWS = {
    4: {2: 2, 4: 2, 8: 4, 10: 4, 12: 4, 16: 4, 24: 4, 32: 4},
    8: {2: 2, 4: 2, 8: 2, 10: 4, 12: 4, 16: 2, 24: 2, 32: 2},
}


def _out_width(n_out):
    return next(w for w in _OUT_WIDTHS if n_out <= w)


def out_weights(W):
    """The output layer's coefficients ``W`` (H, n_out), at most :data:`OUT_FUSED_MAX`
    outputs, as ``out_fused`` reads them: C-contiguous ``(H, O)``, ``O`` the compiled width
    at or above ``n_out``, zeros in the columns after ``n_out``."""
    cp = get_cupy()
    h, n_out = W.shape
    Wp = cp.zeros((h, _out_width(n_out)), dtype=W.dtype)
    Wp[:, :n_out] = W
    return Wp


def _out_fused(n_out, dtype, act, out, vec, rows=None):
    """The ``out_fused`` kernel for ``n_out`` outputs, and its rows a warp (``rows``
    overrides the choice of :data:`_OUT_FUSED_ROWS`). ``vec``: the last hidden
    layer's width a multiple of 16 bytes' values, its products and bias 16-byte aligned
    (one read for each lane's columns of a row)."""
    width = _out_width(n_out)
    size = np.dtype(dtype).itemsize
    rows = _OUT_FUSED_ROWS[size][width] if rows is None else rows
    ct = "float" if size == 4 else "double"
    vec = "true" if vec else "false"
    return get_function("mlp", f"out_fused<{ct},{act},{out},{width},{rows},{vec}>"), rows


#: the last hidden layer widths ``tail_fused`` is compiled for (its ``HP``) and the most
#: rows a thread may own at each (its ``TM``: the thread holds ``TM x HP / 16`` sums in
#: registers, at most 128 of them a thread in blocks of 512)
_TAIL_MAX_TM = {32: 8, 64: 8, 128: 8}
#: widest last hidden layer that ``tail_fused`` takes (where float32 prediction does not run
#: on tensor cores); wider ones take a cuBLAS product and ``out_fused``
TAIL_MAX = 128
#: whether prediction may compute the last hidden layer and the output layer in one launch
#: (``dense_tc``'s or ``tail_fused``'s), and whether float32 prediction runs on tensor cores
#: (tests and the profile tool switch them off to compare the paths)
USE_TAIL = True
USE_TENSOR_CORES = True
#: largest split copy of one hidden layer's coefficients that ``dense_tc`` keeps on the device
#: (64 MiB: 4,096 inputs by 2,048 units); a network with a larger layer predicts with
#: cuBLAS's products
TC_PACK_MAX = 64 << 20
#: the column tile of ``dense_tc`` (its ``BN``): a layer's split coefficients are padded to
#: a multiple of it, and a last hidden layer up to this wide takes the output layer in the
#: same launch
TC_COLS = 128
#: the rows a block of ``dense_tc`` may take (its ``BM``), each with the GPU time a row
#: costs there relative to 128 (smaller tiles reuse each value read from shared memory
#: less): :func:`_tc_rows` weighs them against how evenly the blocks fill the SMs
_TC_ROWS = {128: 1.0, 96: 1.08, 64: 1.2}


def _tail_fused(dtype, in_act, act, out, n_hid, n_out, n_rows, tm=None):
    """The ``tail_fused`` kernel that computes the last hidden layer (``n_hid`` units) and
    the output layer (``n_out`` units) of ``n_rows`` rows: ``(kernel, rows a block, threads
    a block, dynamic shared memory in bytes)``, or None for float64, for a layer wider than
    :data:`TAIL_MAX` or where the device cannot give a block that much shared memory.

    FP32 FMAs (the kernel is also written for float64, unused). The rows a block takes (16
    ``tm``) are the fewest with which the blocks fill the SMs in one wave (one block an
    SM), else the most its registers allow: 10,000 rows on 132 SMs take 125 blocks of 80.
    """
    limits = device_limits()
    if np.dtype(dtype) != np.float32 or n_hid > TAIL_MAX:
        return None
    width = next(w for w in _TAIL_MAX_TM if n_hid <= w)
    top = _TAIL_MAX_TM[width]
    if tm is None:
        tm = next((t for t in range(1, top) if -(-n_rows // (16 * t)) <= limits.sm_count), top)
    return _tail_kernel(limits.device_id, np.dtype(dtype).char, in_act, act, out, width, tm, n_hid, n_out)


@functools.lru_cache(maxsize=256)
def _tail_kernel(device_id, dtype_char, in_act, act, out, width, tm, n_hid, n_out):
    """:func:`_tail_fused` once its template arguments are chosen (memoized: prediction's
    host time is part of its latency)."""
    bm, size = 16 * tm, np.dtype(dtype_char).itemsize
    vb = 16 // size
    lda = -(-bm // vb) * vb + vb
    items = max(
        4 * 16 * (lda + width), tm * (width // 16) * 256, bm * (width + 1) + n_hid * n_out + bm * n_out
    )
    ct = "float" if size == 4 else "double"
    smem = items * size
    if smem > device_limits(device_id).smem_per_block_optin:
        return None
    k = get_function("mlp", f"tail_fused<{ct},{in_act},{act},{out},{width},{tm}>")
    if smem > 48 * 1024 and k.max_dynamic_shared_size_bytes < smem:
        k.max_dynamic_shared_size_bytes = smem  # opt in
    return k, bm, 512, smem


def _tc_smem(bm):
    """``dense_tc``'s dynamic shared memory in bytes for ``bm`` rows a block (two stages of
    the TF32 halves of A's and W's chunks; a fused output layer fits in them)."""
    return 4 * (bm + TC_COLS) * 36 * 4


def _tc_pack_bytes(shape):
    k, n = shape
    return 2 * (-(-n // TC_COLS) * TC_COLS) * (-(-k // 32) * 32) * 4


def use_dense_tc(coefs):
    """Whether prediction of a network with coefficients ``coefs`` (device arrays) runs its
    hidden layers on tensor cores (``dense_tc``): float32, at least one hidden layer, a GPU
    of compute capability 8.0 or newer, and every hidden layer's split copy
    (:func:`pack_tc_weights`, kept with the model) within :data:`TC_PACK_MAX` bytes."""
    return (
        USE_TENSOR_CORES
        and len(coefs) >= 2
        and coefs[0].dtype == np.float32
        and all(_tc_pack_bytes(W.shape) <= TC_PACK_MAX for W in coefs[:-1])
        and device_limits().compute_capability >= (8, 0)
        and device_limits().smem_per_block_optin >= _tc_smem(min(_TC_ROWS))
    )


def pack_tc_weights(W):
    """A hidden layer's coefficients ``W`` (K, N), float32 on the device, as ``dense_tc``
    reads them: ``(2, Np, Kp)`` uint32, the TF32 halves of each value (``w_b = tf32(w)``
    rounded to nearest with ties away from zero, as ``cvt.rna`` rounds; ``w_s = tf32(w -
    w_b)``) by columns, zero padded to Np (a multiple of :data:`TC_COLS`) columns of Kp (a
    multiple of 32) values."""
    cp = get_cupy()
    k, n = W.shape
    Wc = cp.ascontiguousarray(W, dtype=np.float32)
    hi = (Wc.view(np.uint32) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    lo = ((Wc - hi.view(np.float32)).view(np.uint32) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    out = cp.zeros((2, -(-n // TC_COLS) * TC_COLS, -(-k // 32) * 32), dtype=np.uint32)
    out[0, :n, :k] = hi.T
    out[1, :n, :k] = lo.T
    return out


def tc_packs(coefs):
    """The hidden layers' split coefficients (:func:`pack_tc_weights`), a tuple."""
    return tuple(pack_tc_weights(W) for W in coefs[:-1])


def _tc_rows(n, col_tiles):
    """``dense_tc``'s rows a block for ``n`` rows and ``col_tiles`` column tiles: the one
    of :data:`_TC_ROWS` with the least (waves of one block an SM) x (rows a block) x (its
    relative cost a row); 10,000 rows of one column tile on 132 SMs take 105 blocks of 96."""
    limits = device_limits()
    fits = [bm for bm in _TC_ROWS if _tc_smem(bm) <= limits.smem_per_block_optin]
    return min(fits, key=lambda bm: -(-(-(-n // bm) * col_tiles) // limits.sm_count) * bm * _TC_ROWS[bm])


@functools.lru_cache(maxsize=256)
def _dense_kernel(device_id, bm, act, out, vec, smem):
    """The ``dense_tc`` instance, its dynamic shared memory opted in (memoized)."""
    k = get_function("mlp", f"dense_tc<{bm},{act},{out},{'true' if vec else 'false'}>")
    if smem > 48 * 1024 and k.max_dynamic_shared_size_bytes < smem:
        k.max_dynamic_shared_size_bytes = smem
    return k


# stand-ins in a step's arguments for what changes from call to call
_IN, _OUT, _FLAG = object(), object(), object()


class _Step:
    """One launch of a tensor-core forward pass: the kernel, its 1-D grid of 256-thread
    blocks, shared memory and arguments (:data:`_IN` the layer's input, :data:`_OUT` the
    array it writes, of ``shape``, :data:`_FLAG` the input check's flag), and once made,
    the prebuilt driver launch (``rec``) with the slots of those three."""

    __slots__ = ("kernel", "blocks", "smem", "args", "shape", "rec", "slots")

    def __init__(self, kernel, blocks, smem, args, shape):
        self.kernel, self.blocks, self.smem, self.args, self.shape = kernel, blocks, smem, args, shape
        self.rec = self.slots = None

    def record(self):
        """Build the prebuilt launch: fixed arguments written once, the stand-ins per call."""
        layout = []
        for a in self.args:
            if a is _IN or a is _OUT or a is _FLAG:
                layout.append("p")
            elif isinstance(a, np.int32):
                layout.append(("i", int(a)))
            elif isinstance(a, (np.int64, np.uint64)):
                layout.append(("q", int(a)))
            else:  # a device array that stays with the model
                layout.append(("q", a.data.ptr))
        self.rec = Launch(self.kernel, (self.blocks,), (256,), layout, True, shared_mem=self.smem)
        self.slots = tuple(
            next((i for i, a in enumerate(self.args) if a is s), None) for s in (_IN, _OUT, _FLAG)
        )


class _TCPlan:
    """The launches of one network's tensor-core forward pass for one input shape, with the
    device arrays its launches point at (``model``: kept alive, and compared by identity
    before the plan is reused)."""

    __slots__ = ("model", "steps", "final", "calls")

    def __init__(self, model, steps, final):
        self.model, self.steps, self.final, self.calls = model, steps, final, 0

    def holds(self, model):
        """Whether this plan was made for these very arrays."""
        return all(map(operator.is_, model, self.model))


#: the tensor-core forward passes' plans, per thread (their argument blocks are per thread)
_PLANS = LaunchTable(limit=64)


def _tc_plan(n, coefs, inters, act, out, out_w, packs, vec, bm=None):
    """The steps of :func:`_forward_tc` for ``n`` rows: every hidden layer one ``dense_tc``
    launch (the last hidden layer's bias and activation left to ``out_fused`` when that
    runs), then ``out_fused``, unless a last hidden layer of at most :data:`TC_COLS` units
    with at most :data:`OUT_FUSED_MAX` outputs computes the output layer in its own launch.
    ``final``: whether a cuBLAS product and ``bias_out`` take the output layer after the
    steps (more outputs than ``out_fused`` takes). ``bm`` overrides :func:`_tc_rows`."""
    cp = get_cupy()
    device_id = device_limits().device_id
    last = len(coefs) - 1
    n_out = coefs[last].shape[1]
    model = (coefs, inters, out_w, packs)
    steps = []
    for i in range(last):
        K, N = coefs[i].shape
        Wp = packs[i]
        np_cols = Wp.shape[1]
        rows = _tc_rows(n, np_cols // TC_COLS) if bm is None else bm
        smem = _tc_smem(rows)
        tail = USE_TAIL and i == last - 1 and N <= TC_COLS and n_out <= OUT_FUSED_MAX
        W2 = b2 = _NULL
        if tail:
            smem = max(smem, (rows * (TC_COLS + 1) + N * n_out + rows * n_out) * 4)
            W2 = coefs[last] if coefs[last].flags.c_contiguous else cp.ascontiguousarray(coefs[last])
            b2, k_act, k_out, shape = inters[last], act, out, (n, n_out)
        else:
            raw = i == last - 1 and out_w is not None  # out_fused applies the bias and activation
            k_act, k_out, shape = -1 if raw else act, -1, (n, N)
        kernel = _dense_kernel(device_id, rows, k_act, k_out, bool(vec) if i == 0 else N % 4 == 0, smem)
        vec = N % 4 == 0  # the next layer's input: a fresh array of N columns
        args = (_IN, Wp, inters[i], W2, b2, _OUT, np.int64(n), np.int32(K), np.int32(N), np.int32(np_cols))
        args += (np.int32(n_out), _FLAG if i == 0 else _NULL)
        steps.append(_Step(kernel, -(-n // rows) * (np_cols // TC_COLS), smem, args, shape))
        if tail:
            return _TCPlan(model, steps, False)
    if out_w is None:
        return _TCPlan(model, steps, True)
    n_hid = coefs[last].shape[0]
    kernel, rows = _out_fused(
        n_out, np.float32, act, out, n_hid % 4 == 0 and inters[last - 1].data.ptr % 16 == 0
    )
    args = (
        _IN,
        inters[last - 1],
        out_w,
        inters[last],
        _OUT,
        np.int64(n),
        np.int32(n_hid),
        np.int32(n_out),
        _NULL,
    )
    steps.append(_Step(kernel, -(-n // (8 * rows)), 0, args, (n, n_out)))
    return _TCPlan(model, steps, False)


def _forward_tc(X, coefs, inters, act, out, out_w, flag, packs, bm=None):
    """:func:`forward_cuda` with every hidden layer on ``dense_tc`` (:func:`_tc_plan`).

    The plan of an input shape is kept per thread; from its second call on, its launches go
    through prebuilt argument blocks (:class:`~sknn_gpu._kernels._launch.Launch`, a few
    microseconds each instead of a ``RawKernel`` call's packing of every argument)."""
    cp = get_cupy()
    n = X.shape[0]
    if not X.flags.c_contiguous:
        X = cp.ascontiguousarray(X)
    vec = X.shape[1] % 4 == 0 and X.data.ptr % 16 == 0
    model = (coefs, inters, out_w, packs)
    key = (device_limits().device_id, n, vec, act, out, USE_TAIL, bm) + tuple(map(id, model))
    plan = _PLANS.records.get(key)
    if plan is None or not plan.holds(model):
        plan = _tc_plan(n, coefs, inters, act, out, out_w, packs, vec, bm)
        _PLANS.register(key, lambda: plan)
    fast = plan.calls > 0 and plan.steps[0].rec is not None
    stream = cp.cuda.get_current_stream().ptr if fast else 0
    fl, flag_ptr = (_NULL, 0) if flag is None else (flag, flag.data.ptr)
    A = X
    for st in plan.steps:
        Out = cp.empty(st.shape, dtype=np.float32)
        if fast:
            slots, (i_in, i_out, i_flag) = st.rec.slots, st.slots
            slots[i_in] = A.data.ptr
            slots[i_out] = Out.data.ptr
            if i_flag is not None:
                slots[i_flag] = flag_ptr
            st.rec.launch(stream)
        else:
            args = tuple(A if a is _IN else Out if a is _OUT else (fl if a is _FLAG else a) for a in st.args)
            st.kernel((st.blocks,), (256,), args, shared_mem=st.smem)
        A = Out
    if plan.calls == 0 and driver_launch() is not None:
        try:  # the first call went through RawKernel (the context is current now)
            for st in plan.steps:
                st.record()
        except Exception:  # pragma: no cover - a CuPy build without Function.ptr: stay on RawKernel
            for st in plan.steps:
                st.rec = None
    plan.calls += 1
    if plan.final:
        Z = cp.matmul(A, coefs[-1])
        k = get_function("mlp", f"bias_out<float,{out}>")
        k((-(-n // 256),), (256,), (Z, inters[-1], np.int64(n), np.int32(Z.shape[1])))
        return Z
    return A


def forward_cuda(
    X,
    coefs,
    inters,
    activation,
    out_activation,
    out_w=None,
    flag=None,
    packs=None,
    tail_tm=None,
    tc_rows=None,
):
    """The output layer's activations of dense CuPy ``X``.

    float32 on a GPU with tensor cores (:func:`use_dense_tc`): every hidden layer is one
    ``dense_tc`` launch (:func:`_forward_tc`; ``packs``: the hidden layers' split
    coefficients, :func:`tc_packs`, made here when not given; given, they select this
    path).

    Otherwise each hidden layer is one cuBLAS product, then ``bias_act_rows`` (bias and
    activation in place). The last hidden layer and the output layer, for at most
    :data:`OUT_FUSED_MAX` outputs in float32: one ``tail_fused`` launch up to
    :data:`TAIL_MAX` hidden units, which applies the previous layer's bias and activation
    as it reads its products and keeps no product in memory. Otherwise, with ``out_w``
    (the output coefficients as :func:`out_weights` pads them) one ``out_fused`` launch
    reads the last hidden layer's products once, its bias and activation applied on the
    way, and writes the output activations; otherwise a product and ``bias_out``.

    ``flag`` (a device-visible int32 of one value, or None) is set to 1 when a value the
    first kernel reads (``X`` itself for ``dense_tc`` and for a fused tail after no hidden
    product, else the first layer's products) is not finite, which every row of ``X``
    holding NaN or infinity causes (and finite rows that overflow). Only networks with a
    hidden layer set it: the caller checks ``X`` itself otherwise. ``tail_tm`` and
    ``tc_rows`` override the rows a block of ``tail_fused`` (in 16s) and of ``dense_tc``
    take (tests and the profile tool compare them).
    """
    cp = get_cupy()
    dtype = X.dtype
    ct = "float" if dtype == np.float32 else "double"
    act = ACT_CODES[activation]
    out = OUT_CODES[out_activation]
    if X.shape[0] > 0 and dtype == np.float32 and (packs is not None or use_dense_tc(coefs)):
        packs = packs if packs is not None else tc_packs(coefs)
        return _forward_tc(X, coefs, inters, act, out, out_w, flag, packs, tc_rows)
    last = len(coefs) - 1
    n = X.shape[0]
    n_out = coefs[last].shape[1]
    tail = None
    if USE_TAIL and last >= 1 and n_out <= OUT_FUSED_MAX and n > 0:
        in_act = act if last >= 2 else -1
        tail = _tail_fused(dtype, in_act, act, out, coefs[last].shape[0], n_out, n, tail_tm)
    fuse = tail is not None or (out_w is not None and last >= 1)
    n_products = last - 1 if tail is not None else last  # hidden layers multiplied by cuBLAS
    lib = cublas_library()
    h = on_current_stream(lib) if lib is not None and (n_products > 0 or not fuse) else None

    def product(A, W):
        if lib is not None and A.flags.c_contiguous and W.flags.c_contiguous:
            Z = cp.empty((n, W.shape[1]), dtype=dtype)
            gemm(lib, h, A, W, Z)  # the C API: a few microseconds less than cupy.matmul per call
            return Z
        return cp.matmul(A, W)

    first_flag = _NULL if flag is None else flag  # the kernel that reads the first products
    A = X
    # the hidden layers that keep their products in memory (with tail_fused, the last one
    # is computed there and the one before has its bias and activation applied there)
    for i in range(n_products):
        Z = product(A, coefs[i])
        if fuse and (i == last - 1 or (tail is not None and i == last - 2)):
            break  # its bias and activation happen in out_fused / tail_fused
        cols = Z.shape[1]
        threads = min(256, -(-cols // 32) * 32)
        gx = -(-cols // threads)
        gy = int(max(1, min(n, 65535, -(-4096 // gx))))
        k = get_function("mlp", f"bias_act_rows<{ct},{act}>")
        k((gx, gy), (threads,), (Z, inters[i], np.int64(n), np.int32(cols), first_flag if i == 0 else _NULL))
        A = Z
    if tail is not None:
        k, bm, threads, smem = tail
        src = Z if last >= 2 else X  # the products before their bias and activation, or X
        src, W, W2 = (
            a if a.flags.c_contiguous else cp.ascontiguousarray(a) for a in (src, coefs[-2], coefs[-1])
        )
        P = cp.empty((n, n_out), dtype=dtype)
        k(
            (-(-n // bm),),
            (threads,),
            (
                src,
                inters[last - 2] if last >= 2 else _NULL,
                W,
                inters[last - 1],
                W2,
                inters[last],
                P,
                np.int64(n),
                np.int32(src.shape[1]),
                np.int32(W.shape[1]),
                np.int32(n_out),
                first_flag if last <= 2 else _NULL,
            ),
            shared_mem=smem,
        )
        return P
    if fuse:
        n_hid = Z.shape[1]
        b1 = inters[last - 1]
        vec = n_hid % (16 // dtype.itemsize) == 0 and Z.data.ptr % 16 == 0 and b1.data.ptr % 16 == 0
        k, rows = _out_fused(n_out, dtype, act, out, vec)
        P = cp.empty((n, n_out), dtype=dtype)
        blocks = -(-n // (8 * rows))  # 8 warps a block
        k(
            (blocks,),
            (256,),
            (
                Z,
                b1,
                out_w,
                inters[last],
                P,
                np.int64(n),
                np.int32(n_hid),
                np.int32(n_out),
                first_flag if last == 1 else _NULL,
            ),
        )
        return P
    Z = product(A, coefs[last])
    k = get_function("mlp", f"bias_out<{ct},{out}>")
    k((-(-n // 256),), (256,), (Z, inters[last], np.int64(n), np.int32(Z.shape[1])))
    return Z
