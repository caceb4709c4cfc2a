"""The CUDA trainer of GPUMLPClassifier: CuPy arrays and the kernels of ``_kernels/mlp.cu``.

* minibatches: cuBLAS GEMMs through CuPy, then our fused kernels: ``bias_act``
  (bias + hidden activation), ``out_delta`` (output activation + loss + delta),
  ``act_deriv`` and ``params_update`` (the optimizer step over all parameters in one
  launch);
* ``kernels='custom'`` with single-sample products: our GEMV/GER (:mod:`sknn_gpu.linalg`);
* ``batch_size=1`` with one hidden layer and ``kernels='custom'``: the persistent kernel
  ``mlp_sgd1`` trains a chunk of samples in one launch (one grid barrier per sample);
  not with sample weights or sparse data, which take the per-step path;
* sample weights: ``out_delta_w`` (the output delta times each row's weight, the
  weighted loss), the same ``params_update`` with the weight sum as divisor;
* sparse data: CSR on the device (:class:`~._data.CSRRows`), each minibatch densified
  there and then trained like dense data;
* dense minibatches (not the fused per-sample kernel, not single-row products with
  ``kernels='custom'``): the whole step captured once per call as CUDA graphs and replayed
  (:mod:`._mlp_graph`), the same launches with the per-step numbers on the device.

Same update rules and parameter layout as the CPU trainer (``_mlp_cpu``), the reference.
"""

from __future__ import annotations

import functools

import numpy as np

from .._backend import device_limits, get_cupy
from .._kernels import check_barrier_error, get_function, stop_resident_kernels
from ..linalg import gemv, ger
from ._base import Solver, Trainer
from ._data import CSRRows
from ._mlp_graph import _NULL, STEP_TAB, GraphEpoch, cublas_library, gemm, on_current_stream

__all__ = ["CUDATrainer", "OUT_FUSED_MAX", "forward_cuda"]

#: ``ACT`` and ``OUT`` template arguments of ``_kernels/mlp.cu``
ACT_CODES = {"identity": 0, "logistic": 1, "tanh": 2, "relu": 3}
OUT_CODES = {"softmax": 0, "logistic": 1}
#: widest output layer of the fused per-sample kernel
_FUSED_MAX_OUT = 1024
#: whether dense minibatch epochs replay captured CUDA graphs (tests switch it off to
#: compare with the per-step launches)
USE_GRAPHS = True
#: whether the fused per-sample kernel keeps each block's rows of the weights and their
#: optimizer state in shared memory when they fit (tests switch it off to compare)
FUSED_RESIDENT = True
#: fewest minibatch steps a call must plan (steps per epoch x epochs) for capturing to pay:
#: capturing costs about 0.4 ms of host time per captured step (about six of them), a
#: launched step about 0.25 ms, so a short partial_fit keeps launching step by step
GRAPH_MIN_STEPS = 12


def _elementwise_grid(total):
    """Grid of the grid-stride elementwise kernels (256 threads a block)."""
    return int(min(-(-total // 256), 65535))


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
#: the same for ``tail_tc`` (float32 on tensor cores): its column tiles a warp (``NT``, the
#: block is 64 ``NT`` columns wide) by width, and the most row tiles of 16 (``MT``)
_TC_MAX_MT = {1: 8, 2: 8}
#: widest last hidden layer that each fused tail takes (``tail_fused``, ``tail_tc``): wider
#: ones take a cuBLAS product and ``out_fused``. On an H200, 10,000 rows, the tensor-core
#: tail took 89 us of GPU time at 100 units against 125 us for that path with the earlier
#: ``out_fused`` (results/2026-11-28-h200/profile_mlp_predict.txt); at 256 units it has been
#: measured only in an earlier version: 179-209 us by rows a block against 191 us
#: (profile_mlp_predict_first_tail_tc.txt), no clear gain, so it stops at 128. float32 only:
#: float64 keeps cuBLAS's products (its FP64 tensor cores; the fused tails are not
#: measured there)
TAIL_MAX = TC_TAIL_MAX = 128
#: whether prediction may use the fused tail, and float32 its tensor-core kernel (tests
#: and the profile tool switch them off to compare the paths)
USE_TAIL = True
USE_TENSOR_CORES = True
#: largest split copy of a layer's coefficients that ``tail_tc`` keeps on the device (64 MiB:
#: up to 65,536 inputs at 128 hidden units); wider inputs take ``tail_fused``
TC_PACK_MAX = 64 << 20


def _use_tc(dtype, n_hid, n_in=0):
    """Whether the fused tail of a float ``dtype`` network whose last hidden layer has
    ``n_hid`` units and ``n_in`` inputs runs on tensor cores (``tail_tc``), on the current
    device: not where its split copy of the layer's coefficients (:func:`pack_tail_weights`,
    kept with the model) would exceed :data:`TC_PACK_MAX` bytes."""
    if n_hid > TC_TAIL_MAX:
        return False
    nt = next(t for t in _TC_MAX_MT if n_hid <= 64 * t)
    pack = 2 * 64 * nt * (-(-n_in // 32) * 32) * 4
    return (
        USE_TENSOR_CORES
        and np.dtype(dtype) == np.float32
        and pack <= TC_PACK_MAX
        and device_limits().compute_capability >= (8, 0)
    )


def tail_tc_tiles(coefs):
    """``tail_tc``'s column tiles a warp (``NT``) for a network with coefficients ``coefs``
    (device arrays) when its prediction runs ``tail_tc``, else None: what the caller
    passes to :func:`pack_tail_weights` (and caches with the coefficients)."""
    if not USE_TAIL or len(coefs) < 2 or coefs[-1].shape[1] > OUT_FUSED_MAX:
        return None
    n_hid = coefs[-1].shape[0]
    if not _use_tc(coefs[-1].dtype, n_hid, coefs[-2].shape[0]):
        return None
    return next(nt for nt in _TC_MAX_MT if n_hid <= 64 * nt)


def pack_tail_weights(W, nt):
    """The last hidden layer's coefficients ``W`` (K, H), float32 on the device, as
    ``tail_tc`` reads them: ``(2, 64 nt, Kp)`` uint32, the TF32 halves of each value
    (``w_b = tf32(w)`` rounded to nearest with ties away from zero, as ``cvt.rna`` rounds;
    ``w_s = tf32(w - w_b)``) by columns, zero padded to 64 ``nt`` columns of Kp (a
    multiple of 32) values."""
    cp = get_cupy()
    k, h = W.shape
    Wc = cp.ascontiguousarray(W, dtype=np.float32)
    hi = (Wc.view(np.uint32) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    lo = ((Wc - hi.view(np.float32)).view(np.uint32) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    out = cp.zeros((2, 64 * nt, -(-k // 32) * 32), dtype=np.uint32)
    out[0, :h, :k] = hi.T
    out[1, :h, :k] = lo.T
    return out


def _tail_fused(dtype, in_act, act, out, n_hid, n_out, n_rows, tm=None, vec=True, n_in=0):
    """The kernel that computes the last hidden layer (``n_hid`` units) and the output
    layer (``n_out`` units) of ``n_rows`` rows: ``(kernel, rows a block, threads a block,
    dynamic shared memory in bytes, whether it is tail_tc)``, or None for float64, for a
    layer wider than the kernel takes (:data:`TAIL_MAX`, :data:`TC_TAIL_MAX`) or where the
    device cannot give a block that much shared memory.

    On a GPU of compute capability 8.0 or newer, for a layer of ``n_in`` inputs whose split
    coefficients fit :data:`TC_PACK_MAX`: ``tail_tc`` (tensor cores, three TF32 products a
    product; ``vec``: its input read in 16-byte vectors); otherwise
    ``tail_fused`` (FP32 FMAs; the kernel is also written for float64, unused). The rows
    a block takes (16 ``tm``) are the fewest with which the blocks fill the SMs in one
    wave (one block an SM), else the most its registers allow: 10,000 rows on 132 SMs
    take 125 blocks of 80 rows.
    """
    limits = device_limits()
    tc = _use_tc(dtype, n_hid, n_in)
    if np.dtype(dtype) != np.float32 or n_hid > (TC_TAIL_MAX if tc else TAIL_MAX):
        return None
    if tc:
        width = next(nt for nt in _TC_MAX_MT if n_hid <= 64 * nt)
        top = _TC_MAX_MT[width]
    else:
        width = next(w for w in _TAIL_MAX_TM if n_hid <= w)
        top = _TAIL_MAX_TM[width]
    if tm is None:
        tm = next((t for t in range(1, top) if -(-n_rows // (16 * t)) <= limits.sm_count), top)
    key = (
        limits.device_id,
        np.dtype(dtype).char,
        tc,
        in_act,
        act,
        out,
        width,
        tm,
        bool(vec) and tc,
        n_hid,
        n_out,
    )
    return _tail_kernel(*key)


@functools.lru_cache(maxsize=256)
def _tail_kernel(device_id, dtype_char, tc, in_act, act, out, width, tm, vec, n_hid, n_out):
    """:func:`_tail_fused` once its template arguments are chosen (memoized: prediction's
    host time is part of its latency)."""
    bm, size = 16 * tm, np.dtype(dtype_char).itemsize
    if tc:
        bn = 64 * width
        items = max(2 * (bm + bn) * (32 + 4), bm * (bn + 1) + n_hid * n_out + bm * n_out)
        name, threads = f"tail_tc<{in_act},{act},{out},{width},{tm},{'true' if vec else 'false'}>", 256
    else:
        vb = 16 // size
        lda = -(-bm // vb) * vb + vb
        items = max(
            4 * 16 * (lda + width), tm * (width // 16) * 256, bm * (width + 1) + n_hid * n_out + bm * n_out
        )
        ct = "float" if size == 4 else "double"
        name, threads = f"tail_fused<{ct},{in_act},{act},{out},{width},{tm}>", 512
    smem = items * size
    if smem > device_limits(device_id).smem_per_block_optin:
        return None
    k = get_function("mlp", name)
    if smem > 48 * 1024 and k.max_dynamic_shared_size_bytes < smem:
        k.max_dynamic_shared_size_bytes = smem  # opt in
    return k, bm, threads, smem, tc


def forward_cuda(
    X,
    coefs,
    inters,
    activation,
    out_activation,
    out_w=None,
    flag=None,
    tail_pack=None,
    tail_tm=None,
):
    """The output layer's activations of dense CuPy ``X``.

    Each hidden layer: one cuBLAS product, then ``bias_act_rows`` (bias and activation in
    place). The last hidden layer and the output layer, for at most :data:`OUT_FUSED_MAX`
    outputs in float32: one launch of a fused tail (:func:`_tail_fused`: ``tail_tc`` on
    tensor cores up to :data:`TC_TAIL_MAX` hidden units, else ``tail_fused`` up to
    :data:`TAIL_MAX`), which applies the previous layer's bias and activation as it reads
    its products and keeps no product in memory. Otherwise, with ``out_w`` (the output
    coefficients as :func:`out_weights` pads them) one ``out_fused``
    launch reads the last hidden layer's products once, its bias and activation applied
    on the way, and writes the output activations; otherwise a product and ``bias_out``.

    ``flag`` (a device-visible int32 of one value, or None) is set to 1 when a value the
    first kernel reads (``X`` itself in a fused tail after no hidden product, else the
    first layer's products) is not finite, which every row of ``X`` holding NaN or
    infinity causes (and finite rows that overflow). Only networks with a hidden layer
    set it: the caller checks ``X`` itself otherwise. ``tail_pack``: the last hidden
    layer's coefficients as ``tail_tc`` reads them (:func:`pack_tail_weights`; made here
    when not given). ``tail_tm`` overrides the rows a fused tail's block takes, in 16s
    (the profile tool compares them).
    """
    cp = get_cupy()
    dtype = X.dtype
    ct = "float" if dtype == np.float32 else "double"
    act = ACT_CODES[activation]
    out = OUT_CODES[out_activation]
    last = len(coefs) - 1
    n = X.shape[0]
    n_out = coefs[last].shape[1]
    tail = None
    if USE_TAIL and last >= 1 and n_out <= OUT_FUSED_MAX and n > 0:
        in_act = act if last >= 2 else -1
        k_in = coefs[last - 1].shape[0]
        # 16-byte reads of the input: its rows a multiple of 4 values, its start 16-byte aligned
        # (the products of a hidden layer and a contiguous copy are fresh allocations)
        vec = k_in % 4 == 0 and (last >= 2 or not X.flags.c_contiguous or X.data.ptr % 16 == 0)
        tail = _tail_fused(dtype, in_act, act, out, coefs[last].shape[0], n_out, n, tail_tm, vec, k_in)
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
        k, bm, threads, smem, tc = tail
        src = Z if last >= 2 else X  # the products before their bias and activation, or X
        src, W, W2 = (
            a if a.flags.c_contiguous else cp.ascontiguousarray(a) for a in (src, coefs[-2], coefs[-1])
        )
        n_hid = W.shape[1]
        if tc:
            W = tail_pack if tail_pack is not None else pack_tail_weights(W, tail_tc_tiles(coefs))
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
                np.int32(n_hid),
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


class CUDATrainer(Trainer):
    """Minibatch SGD/Adam on CuPy arrays with our kernels (see :class:`~._base.Trainer`)."""

    device = "cuda"

    def __init__(self, layout, config, coefs, intercepts, opt, batch_size, sample_weight=None, sparse=False):
        super().__init__(layout, config, coefs, intercepts, opt, batch_size, sample_weight, sparse)
        xp = self.xp
        self.custom = config.kernels == "custom"
        self._acc = xp.zeros(2, dtype=np.float64)  # [summed log-loss, summed squared coefficients]
        self._ones = xp.ones(batch_size, dtype=self.dtype)
        self.fused_plan = None
        per_step_only = sample_weight is not None or sparse  # the fused kernel reads dense, unweighted rows
        if self.custom and batch_size == 1 and len(layout.units) == 3 and not per_step_only:
            self.fused_plan = self._plan_fused(opt.solver.n_moments)
        self.fused = self.fused_plan is not None
        # the kernels of this call, from the memoized loader
        ct = "float" if self.dtype == np.float32 else "double"
        a, o, s = ACT_CODES[config.activation], OUT_CODES[config.out_activation], int(opt.solver)
        self._codes = (ct, o, s)
        if self.fused:
            self._k_sgd1 = get_function("mlp", f"mlp_sgd1<{ct},{a},{o},{s}>")
            return
        # replayed graphs: dense minibatches, any products but single-row custom ones
        self._graph_path = USE_GRAPHS and not sparse and not (self.custom and batch_size == 1)
        self._graph = None
        self._k_out_delta = get_function("mlp", f"out_delta<{ct},{o}>")
        self._k_update = get_function("mlp", f"params_update<{ct},{s}>")
        if sample_weight is not None:
            self._k_out_delta_w = get_function("mlp", f"out_delta_w<{ct},{o}>")
            self._sumsq = xp.zeros(1, dtype=np.float64)  # one update's sum of squares, then scaled
        if len(layout.units) > 2:
            self._k_bias_act = get_function("mlp", f"bias_act<{ct},{a}>")
            self._k_act_deriv = get_function("mlp", f"act_deriv<{ct},{a}>")

    def _plan_fused(self, n_moments):
        """Grid, shared memory and residency of the fused per-sample kernel (``n_moments``
        state arrays per parameter), or None when the shape does not fit it."""
        n_in, n_hid, n_out = self.layout.units
        if n_out > _FUSED_MAX_OUT:
            return None
        n_sm = device_limits().sm_count
        G = int(max(1, min(n_sm, -(-n_hid // 16))))  # at most one block per SM: all resident
        J = -(-n_hid // G)
        G = -(-n_hid // J)
        NW = min(16, J)
        P = n_out + 1
        item = self.dtype.itemsize
        smem = (2 * n_in + 3 * J + NW * P + 6 * n_out + P) * item
        # the block's rows of W1^T, W2, b1 and their optimizer state, resident in shared memory
        rows = (1 + n_moments) * J * (n_in + n_out + 1) * item
        if FUSED_RESIDENT and smem + rows <= device_limits().smem_per_block_optin - 1024:  # 1 KiB: static
            return G, J, NW, smem + rows, 1
        if smem > 46 * 1024:
            return None
        return G, J, NW, smem, 0

    # -------------------------------------------------------------- epoch
    def epoch(self, X, Y, order, opt):
        if self.fused:
            return self._epoch_fused(X, Y, order, opt)
        steps = -(-X.shape[0] // self.batch_size)
        if self._graph_path and steps * self.planned_epochs >= GRAPH_MIN_STEPS:
            g = self._graph
            if g is None or g.source != (X.data.ptr, Y.data.ptr, X.shape):
                g = self._graph = GraphEpoch(self, X, Y, *self._codes)
            if g.ready():
                return self._epoch_graph(X.shape[0], order, opt)
            self._graph_path = False  # no capture on this CuPy/driver: launch per step
        return super().epoch(X, Y, order, opt)

    def _epoch_graph(self, n, order, opt):
        """One epoch as graph replays: the step table is computed here, on the host, by
        the same arithmetic as the per-step path (learning rate, then 1/B and the weighted
        scales), and the loss is read once at the end."""
        acc = self._new_acc()
        bs = self.batch_size
        sums = self._weight_sums(order, n)
        table = np.empty((-(-n // bs), STEP_TAB), dtype=np.float64)
        for b, start in enumerate(range(0, n, bs)):
            rows = min(bs, n - start)
            lr = self._next_lr(opt)
            if sums is None:
                table[b] = (lr, 1.0 / rows, 1.0, 1.0)
            else:
                scale = rows / sums[b]
                table[b] = (lr, 1.0 / sums[b], scale, scale)
        self._graph.run(order, table)
        acc = acc.get()
        return float(acc[0] + 0.5 * self.alpha * acc[1])

    def _new_acc(self):
        self._acc.fill(0)
        return self._acc

    def _device_weights(self, sample_weight):
        """The sample weights on the device, in the parameters' dtype (what ``out_delta_w`` reads)."""
        return self.xp.asarray(sample_weight, dtype=self.dtype)

    def _epoch_data(self, X, Y, order):
        """One gather per epoch, then the minibatches are contiguous slices."""
        sw = self.sw
        if order is not None:
            xp = self.xp
            order_d = xp.asarray(order)
            X = X.take(order_d) if isinstance(X, CSRRows) else xp.take(X, order_d, axis=0)
            Y = xp.take(Y, order_d, axis=0)
            if sw is not None:
                sw = xp.take(sw, order_d)
        return X, Y, sw, None

    # -------------------------------------------------------------- one step
    def _matmul(self, A, B):
        """``A @ B``; with kernels='custom', single-row products use our GEMV."""
        if self.custom and A.shape[0] == 1 and A.flags.c_contiguous:
            if B.flags.c_contiguous:  # (1, k) @ (k, n) = (B.T @ a)
                res = gemv(B, A[0], trans=True)
            else:  # B is the transposed view of a C-contiguous matrix
                res = gemv(B.T, A[0], trans=False)
            return res.reshape(1, -1)
        return self.xp.matmul(A, B)

    def _outer_into(self, a_col, D, G):
        """``G = a_col.T @ D`` (a_col: (B, k), D: (B, n)); rank-1 updates use our GER."""
        if self.custom and a_col.shape[0] == 1:
            xp = self.xp
            G.fill(0)
            ger(1.0, xp.ascontiguousarray(a_col[0]), xp.ascontiguousarray(D[0]), G)
            return G
        return self.xp.matmul(a_col.T, D, out=G)

    def _bias_act(self, Z, b):
        rows, cols = Z.shape
        self._k_bias_act((_elementwise_grid(Z.size),), (256,), (Z, b, np.int64(rows), np.int64(cols)))

    def _out_delta(self, Z, b, Yb, acc, wb=None, scale=None):
        rows, cols = Z.shape
        if wb is None:
            self._k_out_delta((-(-rows // 256),), (256,), (Z, b, Yb, np.int64(rows), np.int32(cols), acc))
            return
        self._k_out_delta_w(
            (-(-rows // 256),),
            (256,),
            (Z, b, Yb, wb, np.int64(rows), np.int32(cols), np.float64(scale), acc),
        )

    def _colsum(self, D, out):
        # column sums as one GEMV (D.T @ 1): fewer launches than a CuPy reduction
        gemv(D, self._ones[: D.shape[0]], out, trans=True)

    def _act_deriv(self, D, H):
        self._k_act_deriv((_elementwise_grid(D.size),), (256,), (D, H, np.int64(D.size)))

    def _update(self, opt, B, acc, scale=None):
        """The optimizer step (``params_update``); ``B`` divides the gradients, ``scale``
        (None: 1) multiplies the L2 term added to the loss."""
        lr = self._next_lr(opt)
        cfg = self.config
        W, G = self.flat, self.grad
        scal = np.float32 if self.dtype == np.float32 else np.float64
        # unused state arguments point at a real buffer (never read for that solver)
        dummy = self.moment1 if self.moment1 is not None else W
        total = W.size
        grid = int(min(-(-total // 256), 1024))
        self._k_update(
            (grid,),
            (256,),
            (
                W,
                G,
                self.moment1 if self.moment1 is not None else dummy,
                self.moment2 if self.moment2 is not None else dummy,
                np.int64(total),
                np.int64(self.layout.n_coef),
                scal(1.0 / B),
                scal(self.alpha),
                scal(lr),
                scal(cfg.momentum),
                scal(cfg.beta_1),
                scal(cfg.beta_2),
                scal(cfg.epsilon),
                acc[1:] if scale is None else self._sumsq,
            ),
        )
        if scale is not None:  # the batch's squared weights count B / sum(weights) times
            acc[1:] += self._sumsq * np.float64(scale)
            self._sumsq.fill(0)

    # -------------------------------------------------------------- fused per-sample
    def _epoch_fused(self, Xd, Yd, order, opt):
        """One epoch of per-sample SGD/Adam in ``mlp_sgd1`` launches (one per chunk of samples)."""
        cupy = self.xp
        layout = self.layout
        n_in, n_hid, n_out = layout.units
        n = Xd.shape[0]
        if order is None:
            order = np.arange(n, dtype=np.int64)
        order_d = cupy.asarray(order, dtype=np.int64)
        coefs, inters = layout.views(self.flat)
        W1T = cupy.ascontiguousarray(coefs[0].T)
        W2, b1, b2 = coefs[1], inters[0], inters[1]

        def parts(state):  # the kernel's view of a state buffer: W1^T, b1, W2, b2
            if state is None:
                return None, None, None, None
            c, i = layout.views(state)
            return cupy.ascontiguousarray(c[0].T), i[0], c[1], i[1]

        a_W1, a_b1, a_W2, a_b2 = parts(self.moment1)
        b_W1, b_b1, b_W2, b_b2 = parts(self.moment2)
        dummy = cupy.zeros(1, dtype=self.dtype)
        pick = lambda a: a if a is not None else dummy  # noqa: E731
        G, J, NW, smem, resident = self.fused_plan
        if smem > self._k_sgd1.max_dynamic_shared_size_bytes:
            self._k_sgd1.max_dynamic_shared_size_bytes = smem
        P = n_out + 1
        partials = cupy.empty(2 * G * P, dtype=self.dtype)
        counter = cupy.zeros(1, dtype=np.uint64)  # grid_barrier.cuh: zeroed once, never reset
        stop_resident_kernels()  # the grid barrier needs every SM free for its blocks
        err = cupy.zeros(1, dtype=np.int32)
        chunk = int(min(n, (2**31) // G - 2))
        n_chunks = -(-n // chunk)
        losses = cupy.zeros(n_chunks, dtype=np.float64)
        cfg = self.config
        for ci in range(n_chunks):
            lo, hi = ci * chunk, min(n, (ci + 1) * chunk)
            self._k_sgd1(
                (G,),
                (32 * NW,),
                (
                    Xd,
                    Yd,
                    order_d[lo:hi],
                    np.int64(hi - lo),
                    np.int32(n_in),
                    np.int32(n_hid),
                    np.int32(n_out),
                    np.int32(J),
                    W1T,
                    b1,
                    W2,
                    b2,
                    pick(a_W1),
                    pick(b_W1),
                    pick(a_b1),
                    pick(b_b1),
                    pick(a_W2),
                    pick(b_W2),
                    pick(a_b2),
                    pick(b_b2),
                    partials,
                    counter,
                    losses[ci:],
                    err,
                    np.float64(opt.lr),
                    np.float64(cfg.momentum),
                    np.float64(self.alpha),
                    np.float64(cfg.beta_1),
                    np.float64(cfg.beta_2),
                    np.float64(cfg.epsilon),
                    np.int64(opt.t),
                    np.int32(resident),
                ),
                shared_mem=smem,
            )
            if opt.solver == Solver.ADAM:
                opt.t += hi - lo
        check_barrier_error(
            err, "GPUMLPClassifier per-sample kernel (use kernels='cublas' or batch_size > 1)"
        )
        coefs[0][...] = W1T.T
        if a_W1 is not None:
            layout.views(self.moment1)[0][0][...] = a_W1.T
        if b_W1 is not None:
            layout.views(self.moment2)[0][0][...] = b_W1.T
        return float(losses.sum().get())
