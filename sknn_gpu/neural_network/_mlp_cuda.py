"""The CUDA trainer of GPUMLPClassifier: CuPy arrays and the kernels of ``_kernels/mlp.cu``.

* minibatches: cuBLAS GEMMs through CuPy, then our fused kernels: ``bias_act``
  (bias + hidden activation), ``out_delta`` (output activation + loss + delta),
  ``act_deriv`` and ``params_update`` (the optimizer step over all parameters in one
  launch);
* ``kernels='custom'`` with single-sample products: our GEMV/GER (:mod:`sknn_gpu.linalg`);
* ``batch_size=1`` with one hidden layer and ``kernels='custom'``: the persistent kernel
  ``mlp_sgd1`` trains a chunk of samples in one launch (one grid barrier per sample; a
  cluster barrier in ``mlp_sgd1_cluster`` when the grid is one cluster of at most
  :data:`FUSED_CLUSTER_MAX` blocks); not with sample weights or sparse data, which take the
  per-step path;
* sample weights: ``out_delta_w`` (the output delta times each row's weight, the
  weighted loss), the same ``params_update`` with the weight sum as divisor;
* sparse data: CSR on the device (:class:`~._data.CSRRows`), each minibatch densified
  there and then trained like dense data;
* dense minibatches (not the fused per-sample kernel, not single-row products with
  ``kernels='custom'``): the whole step captured once per call as CUDA graphs and replayed
  (:mod:`._mlp_graph`), the same launches with the per-step numbers on the device.

Same update rules and parameter layout as the CPU trainer (``_mlp_cpu``), the reference.
Prediction on the GPU is :mod:`._predict_cuda`.
"""

from __future__ import annotations

import numpy as np

from .._backend import device_limits
from .._kernels import check_barrier_error, get_function, stop_resident_kernels
from ..linalg import gemv, ger
from ._base import Solver, Trainer
from ._data import CSRRows
from ._mlp_graph import STEP_TAB, GraphEpoch
from ._predict_cuda import ACT_CODES, OUT_CODES

__all__ = ["ACT_CODES", "CUDATrainer", "OUT_CODES"]

#: widest output layer of the fused per-sample kernel
_FUSED_MAX_OUT = 1024
#: whether dense minibatch epochs replay captured CUDA graphs (tests switch it off to
#: compare with the per-step launches)
USE_GRAPHS = True
#: whether the fused per-sample kernel keeps each block's rows of the weights and their
#: optimizer state in shared memory when they fit (tests switch it off to compare)
FUSED_RESIDENT = True
#: whether the fused per-sample kernel runs as one thread-block cluster where its grid is at
#: most :data:`FUSED_CLUSTER_MAX` blocks on a GPU of compute capability 9.0 (a hardware
#: barrier and the blocks' shared memory instead of the grid barrier and L2; the same bits;
#: tests switch it off to compare)
FUSED_CLUSTER = True
#: largest portable thread-block cluster
FUSED_CLUSTER_MAX = 8
#: whether the fused per-sample kernel keeps each hidden unit's row of the first layer's
#: weights (and their velocity) in its warp's registers for the launch, where a block has at
#: most one unit a warp and the row fits :data:`FUSED_REGISTER_MAX` 32-bit registers a lane
#: (plain SGD and momentum; the same bits; tests switch it off to compare)
FUSED_REGISTERS = True
#: most 32-bit registers a lane spends on its share of a row and its velocity (more spills:
#: plain SGD up to 1,024 float32 inputs or 512 float64, with momentum half as many)
FUSED_REGISTER_MAX = 32
#: fewest minibatch steps a call must plan (steps per epoch x epochs) for capturing to pay:
#: capturing costs about 0.4 ms of host time per captured step (about six of them), a
#: launched step about 0.25 ms, so a short partial_fit keeps launching step by step
GRAPH_MIN_STEPS = 12


def _elementwise_grid(total):
    """Grid of the grid-stride elementwise kernels (256 threads a block)."""
    return int(min(-(-total // 256), 65535))


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
            G, KR = self.fused_plan[0], self.fused_plan[5]
            if FUSED_CLUSTER and G <= FUSED_CLUSTER_MAX and device_limits().compute_capability >= (9, 0):
                self._k_sgd1 = get_function("mlp", f"mlp_sgd1_cluster<{ct},{a},{o},{s},{KR},{G}>")
            else:
                self._k_sgd1 = get_function("mlp", f"mlp_sgd1<{ct},{a},{o},{s},{KR}>")
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
        """Grid, shared memory, residency and registers a lane (KR, 0: none) of the fused
        per-sample kernel (``n_moments`` state arrays per parameter), or None when the shape
        does not fit it."""
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
        smem = (2 * n_in + 3 * J + NW * P + 6 * n_out + 3 * P) * item
        # a unit's row of W1^T (and velocity) in its warp's registers: KR values a lane
        KR = -(-n_in // 32)
        fits = J == NW and n_moments <= 1 and KR * (1 + n_moments) * item // 4 <= FUSED_REGISTER_MAX
        KR = KR if FUSED_REGISTERS and fits else 0
        # the block's rows of W1^T (unless in registers), W2, b1 and their optimizer state,
        # resident in shared memory
        rows = (1 + n_moments) * J * ((0 if KR else n_in) + n_out + 1) * item
        if FUSED_RESIDENT and smem + rows <= device_limits().smem_per_block_optin - 1024:  # 1 KiB: static
            return G, J, NW, smem + rows, 1, KR
        if smem > 46 * 1024:
            return None
        return G, J, NW, smem, 0, KR

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
        G, J, NW, smem, resident, _ = self.fused_plan
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
