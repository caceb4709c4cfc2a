"""GPUMLPClassifier's minibatch epoch on the GPU as replayed CUDA graphs.

A minibatch step is a fixed sequence of launches: gather the batch's rows, then per layer
a GEMM and ``bias_act``, ``out_delta``, per layer a weight-gradient GEMM, a column sum
and (below the top) a back-propagating GEMM and ``act_deriv``, then ``params_update``.
Issued one by one from Python that is ~15 launches and ~200 µs of host time per step,
more than the GPU needs for a 200-row batch. Here the sequence is captured once per fit
call as a CUDA graph over static buffers and replayed, several steps per replay, so the
host only queues graph launches and the GPU runs the kernels back to back.

What changes from step to step lives on the device, so one graph serves every step:

* a counter ``step`` (which minibatch this is) that the gather reads and the last node
  advances;
* the epoch's row order (``order``: one host-to-device copy per epoch; the host draws
  the permutation, so the order is the CPU trainer's);
* a table of four numbers per step (the learning rate with Adam's bias correction,
  ``1/B`` or ``1/sum(weights)``, the weighted loss scale and the scale of the squared
  weights), computed on the host by the same code as the per-step path and copied once
  per epoch. The kernels cast them to the parameters' dtype as the host cast does, so
  a graph step makes the same update as a launched one.

The loss accumulates on the device and is read once per epoch. GEMMs and the column
sums are cuBLAS (called directly, with the handle on the capture stream): nothing is
allocated while capturing. Three graphs per fit call: ``STEPS_PER_GRAPH`` full steps,
one full step (the remainder) and the last partial batch.
"""

from __future__ import annotations

import numpy as np

from .._backend import get_cupy
from .._kernels import get_function
from .._kernels._launch import capture_graph

__all__ = ["GraphEpoch", "STEPS_PER_GRAPH", "cublas_library", "gemm", "on_current_stream"]

#: full minibatch steps captured in one graph (one replay per this many steps): capturing
#: costs about 0.5 ms of host time per step, a replay a few microseconds
STEPS_PER_GRAPH = 4
#: doubles per step in the epoch table (``STEP_TAB`` in ``_kernels/mlp.cu``)
STEP_TAB = 4
#: a null pointer kernel argument
_NULL = np.uint64(0)


_lib = None


def cublas_library():
    """The cuBLAS library CuPy loaded, through ctypes (None where it cannot be found).

    CuPy's own wrappers re-set the handle's stream on every call and refuse to do so
    while a stream is capturing, so the captured calls go to the C API directly, with
    CuPy's handle for the device.
    """
    global _lib
    if _lib is None:
        import ctypes

        get_cupy().cuda.device.get_cublas_handle()  # CuPy has loaded libcublas by now
        path = None
        try:
            with open("/proc/self/maps") as maps:
                for line in maps:
                    name = line.rsplit(" ", 1)[-1].strip()
                    if "/libcublas.so" in name:
                        path = name
                        break
        except OSError:
            pass
        if path is None:
            _lib = False
        else:
            lib = ctypes.CDLL(path)
            p, i = ctypes.c_void_p, ctypes.c_int
            for name in ("cublasSgemm_v2", "cublasDgemm_v2"):
                getattr(lib, name).argtypes = [p, i, i, i, i, i, p, p, i, p, i, p, p, i]
            for name in ("cublasSgemv_v2", "cublasDgemv_v2"):
                getattr(lib, name).argtypes = [p, i, i, i, p, p, i, p, i, p, p, i]
            lib.cublasSetStream_v2.argtypes = [p, p]
            lib.cublasGetStream_v2.argtypes = [p, ctypes.POINTER(p)]
            lib.cublasSetPointerMode_v2.argtypes = [p, i]
            lib.cublasGetPointerMode_v2.argtypes = [p, ctypes.POINTER(i)]
            _lib = lib
    return _lib or None


def _check(status, what):
    if status != 0:
        raise RuntimeError(f"cuBLAS {what} failed with status {status}")


#: cuBLAS's alpha = 1 and beta = 0 on the host, per dtype (read when a call is queued)
_ONE = {np.dtype(np.float32): np.ones(1, np.float32), np.dtype(np.float64): np.ones(1, np.float64)}
_ZERO = {np.dtype(np.float32): np.zeros(1, np.float32), np.dtype(np.float64): np.zeros(1, np.float64)}


def gemm(lib, h, A, B, C, ta=False, tb=False):
    """``C = op(A) @ op(B)`` for C-contiguous row-major CuPy arrays of one dtype, through
    the C API ``lib`` (:func:`cublas_library`) on handle ``h`` as its stream and pointer mode
    are set (cuBLAS is column-major: it computes ``C.T = op(B).T @ op(A).T``)."""
    m, n = C.shape
    k = A.shape[0] if ta else A.shape[1]
    dt = C.dtype
    fn = lib.cublasSgemm_v2 if dt == np.float32 else lib.cublasDgemm_v2
    one, zero = _ONE[dt].ctypes.data, _ZERO[dt].ctypes.data
    status = fn(
        h, int(tb), int(ta), n, m, k, one, B.data.ptr, B.shape[1], A.data.ptr, A.shape[1], zero, C.data.ptr, n
    )
    _check(status, "gemm")


def on_current_stream(lib):
    """CuPy's cuBLAS handle of the current device, pointed at the current stream with host
    scalars (what CuPy itself sets before each of its calls); returns the handle."""
    cp = get_cupy()
    h = cp.cuda.device.get_cublas_handle()
    _check(lib.cublasSetStream_v2(h, cp.cuda.get_current_stream().ptr), "setStream")
    _check(lib.cublasSetPointerMode_v2(h, 0), "setPointerMode")  # CUBLAS_POINTER_MODE_HOST
    return h


class GraphEpoch:
    """The buffers and captured graphs of one CUDA trainer's minibatch epochs.

    Parameters
    ----------
    trainer : CUDATrainer
        Its flat parameters, gradient, moments, loss accumulator, kernels and config are
        baked into the graphs (they must stay where they are for the trainer's life).
    X, Y : cupy.ndarray
        The training rows and 0/1 targets (made C-contiguous here).
    """

    def __init__(self, trainer, X, Y, ctype, out_code, solver_code):
        cp = get_cupy()
        t = self.trainer = trainer
        self.source = (X.data.ptr, Y.data.ptr, X.shape)
        self.X = cp.ascontiguousarray(X)
        self.Y = cp.ascontiguousarray(Y)
        self.n = int(self.X.shape[0])
        units = t.layout.units
        bs = self.bs = int(min(t.batch_size, self.n))
        dt = t.dtype
        self.Xb = cp.empty((bs, units[0]), dtype=dt)
        self.Yb = cp.empty((bs, units[-1]), dtype=dt)
        self.wb = cp.empty(bs, dtype=dt) if t.sw is not None else None
        self.H = [cp.empty((bs, u), dtype=dt) for u in units[1:-1]]  # hidden activations
        self.Dh = [cp.empty((bs, u), dtype=dt) for u in units[1:-1]]  # hidden deltas
        self.Z = cp.empty((bs, units[-1]), dtype=dt)  # logits, then the output delta
        self.ones = cp.ones(bs, dtype=dt)
        self.order = cp.empty(self.n, dtype=np.int64)
        self.steps = -(-self.n // bs)
        self.tab = cp.zeros(self.steps * STEP_TAB, dtype=np.float64)
        self.step = cp.zeros(1, dtype=np.int64)
        self.sequential = False  # whether self.order holds 0..n-1
        self._k_gather = get_function("mlp", f"gather_batch<{ctype}>")
        self._k_update = get_function("mlp", f"params_update_step<{ctype},{solver_code}>")
        self._k_advance = get_function("mlp", "step_advance")
        if t.sw is not None:
            self._k_out_w = get_function("mlp", f"out_delta_w_step<{ctype},{out_code}>")
        self.graphs = None
        self.blas = cublas_library()
        if self.blas is not None:
            self._gemv = self.blas.cublasSgemv_v2 if dt == np.float32 else self.blas.cublasDgemv_v2

    # -------------------------------------------------------------- capture
    def _mm(self, h, A, B, C, ta=False, tb=False):
        gemm(self.blas, h, A, B, C, ta, tb)

    def _colsum(self, h, D, out):
        """``out = D.T @ 1`` (D of shape (rows, u): cuBLAS's column-major (u, rows) times ones)."""
        rows, u = D.shape
        one, zero = _ONE[D.dtype].ctypes.data, _ZERO[D.dtype].ctypes.data
        status = self._gemv(h, 0, u, rows, one, D.data.ptr, u, self.ones.data.ptr, 1, zero, out.data.ptr, 1)
        _check(status, "gemv")

    def _enqueue_step(self, h, rows):
        """Queue one minibatch step of ``rows`` rows on the current stream."""
        t = self.trainer
        cfg = t.config
        units = t.layout.units
        coefs, inters = t.coefs_v, t.inters_v
        gcoefs, ginters = t.gcoefs_v, t.ginters_v
        acc = t._acc
        scal = np.float32 if t.dtype == np.float32 else np.float64
        wb = self.wb[:rows] if self.wb is not None else None
        self._k_gather(
            (rows,),
            (256,),
            (
                self.X,
                self.Y,
                t.sw if wb is not None else _NULL,
                self.order,
                self.step,
                np.int64(self.bs),
                np.int32(rows),
                np.int32(units[0]),
                np.int32(units[-1]),
                self.Xb,
                self.Yb,
                wb if wb is not None else _NULL,
            ),
        )
        acts = [self.Xb[:rows]]
        last = len(coefs) - 1
        for i in range(last):
            H = self.H[i][:rows]
            self._mm(h, acts[-1], coefs[i], H)
            t._bias_act(H, inters[i])
            acts.append(H)
        Z = self.Z[:rows]
        self._mm(h, acts[-1], coefs[last], Z)
        if wb is None:
            t._out_delta(Z, inters[last], self.Yb[:rows], acc)
        else:
            self._k_out_w(
                (-(-rows // 256),),
                (256,),
                (
                    Z,
                    inters[last],
                    self.Yb[:rows],
                    wb,
                    np.int64(rows),
                    np.int32(units[-1]),
                    self.tab,
                    self.step,
                    acc,
                ),
            )
        D = Z
        for i in range(last, -1, -1):
            self._mm(h, acts[i], D, gcoefs[i], ta=True)
            self._colsum(h, D, ginters[i])
            if i > 0:
                Dn = self.Dh[i - 1][:rows]
                self._mm(h, D, coefs[i], Dn, tb=True)
                t._act_deriv(Dn, acts[i])
                D = Dn
        W = t.flat
        state = t.moment1 if t.moment1 is not None else W  # never read by a solver without it
        total = W.size
        self._k_update(
            (int(min(-(-total // 256), 1024)),),
            (256,),
            (
                W,
                t.grad,
                state,
                t.moment2 if t.moment2 is not None else state,
                np.int64(total),
                np.int64(t.layout.n_coef),
                self.tab,
                self.step,
                scal(t.alpha),
                scal(cfg.momentum),
                scal(cfg.beta_1),
                scal(cfg.beta_2),
                scal(cfg.epsilon),
                acc[1:],
            ),
        )
        self._k_advance((1,), (1,), (self.step,))

    def _blas_calls(self, h, rows):
        """The step's GEMMs and column sums alone (they write only working buffers: activations,
        deltas, gradients), run once before capturing so that cuBLAS sets up whatever it
        needs for these shapes on this stream outside the capture."""
        t = self.trainer
        acts = [self.Xb[:rows]] + [H[:rows] for H in self.H]
        outs = [H[:rows] for H in self.H] + [self.Z[:rows]]
        for i, W in enumerate(t.coefs_v):
            self._mm(h, acts[i], W, outs[i])
            self._mm(h, acts[i], outs[i], t.gcoefs_v[i], ta=True)
            self._colsum(h, outs[i], t.ginters_v[i])
            if i > 0:
                self._mm(h, outs[i], W, self.Dh[i - 1][:rows], tb=True)

    def _capture(self, steps, rows):
        """A graph of ``steps`` consecutive steps of ``rows`` rows, or None (no capture here)."""
        import ctypes

        blas = self.blas
        h = get_cupy().cuda.device.get_cublas_handle()

        def prepare(stream):  # the handle on the capture stream, host scalars, shapes set up
            old_stream, old_mode = ctypes.c_void_p(), ctypes.c_int()
            _check(blas.cublasGetStream_v2(h, ctypes.byref(old_stream)), "getStream")
            _check(blas.cublasGetPointerMode_v2(h, ctypes.byref(old_mode)), "getPointerMode")
            _check(blas.cublasSetStream_v2(h, stream.ptr), "setStream")
            _check(blas.cublasSetPointerMode_v2(h, 0), "setPointerMode")  # CUBLAS_POINTER_MODE_HOST
            self._blas_calls(h, rows)
            stream.synchronize()

            def undo():
                blas.cublasSetPointerMode_v2(h, old_mode.value)
                blas.cublasSetStream_v2(h, old_stream.value)

            return undo

        def enqueue():
            for _ in range(steps):
                self._enqueue_step(h, rows)

        return capture_graph(enqueue, prepare)

    def ready(self):
        """Capture the graphs (once); False where this CuPy or driver cannot capture."""
        if self.graphs is None and self.blas is None:
            self.graphs = False
        if self.graphs is None:
            full, part = divmod(self.n, self.bs)
            k = min(full, STEPS_PER_GRAPH)
            many = self._capture(k, self.bs) if k > 1 else None
            single = self._capture(1, self.bs) if full else None
            last = self._capture(1, part) if part else None
            wanted = [(k > 1, many), (full > 0, single), (part > 0, last)]
            ok = all(g is not None for needed, g in wanted if needed)
            self.graphs = (many, k, single, last) if ok else False
        return self.graphs is not False

    # -------------------------------------------------------------- one epoch
    def run(self, order, table):
        """Replay one epoch: ``order`` (int64 NumPy, or None for 0..n-1) and the step table
        (``(steps, STEP_TAB)`` float64 NumPy) are copied to the device first."""
        cp = get_cupy()
        if order is None:
            if self.sequential is not True:
                self.order.set(np.arange(self.n, dtype=np.int64))
                self.sequential = True
        else:
            self.order.set(np.ascontiguousarray(order, dtype=np.int64))
            self.sequential = False
        self.tab.set(np.ascontiguousarray(table, dtype=np.float64).ravel())
        self.step.fill(0)
        many, k, single, last = self.graphs
        stream = cp.cuda.get_current_stream()
        full = self.n // self.bs
        if many is not None:
            for _ in range(full // k):
                many.launch(stream)
            rest = full % k
        else:
            rest = full
        for _ in range(rest):
            single.launch(stream)
        if last is not None:
            last.launch(stream)
