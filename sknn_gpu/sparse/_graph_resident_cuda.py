"""The resident forward kernel of :class:`~sknn_gpu.sparse.SparseGraph` (:meth:`SparseGraph.resident`).

:class:`ResidentForward` keeps the cluster kernel of one device plan running on the GPU
and answers one small NumPy batch after another through pinned host memory, without a
launch: the host side of the request protocol (control words, the ``_EMPTY`` output
marker, idle exit and relaunch, time-outs). :func:`resident_session` opens and closes
it for a graph; :func:`resident_check` says why a graph cannot be resident. Calls reach
it through ``_graph_cuda.resident_forward`` and ``forward_host``; the launch
configuration it starts the kernel with comes from ``_graph_plan_cuda``.
"""

from __future__ import annotations

import contextlib
import platform
import threading
import time

import numpy as np

from .._backend import get_cupy, host_mapped
from .._kernels import register_resident, unregister_resident
from ._graph_plan_cuda import _barrier_failed, _plan_config

__all__ = ["ResidentForward", "resident_check", "resident_session"]


#: Control words of a resident kernel (int64 in pinned host memory; RESIDENT_* in sparsenet.cu),
#: 128 bytes apart: the device polls REQ; DONE and EXITED tell an answer from an idle exit.
_REQ, _DONE, _EXITED = 0, 16, 32
_STOP = -1

#: The bits of a resident call's output words until the kernel writes them (EMPTY_BITS in
#: sparsenet.cu: a NaN no arithmetic produces).
_EMPTY = 0x7FF4DEADBEEF0001

#: Seconds a resident call waits for its answer before it raises RuntimeError.
RESIDENT_ANSWER_S = 10.0

#: Polls of the outputs a resident call makes holding the GIL (~0.1 µs each; a
#: 5-level call needs ~100) before it yields to other threads between polls.
RESIDENT_SPIN_ALONE = 4096


class ResidentForward:
    """The cluster kernel of one device plan kept resident on the GPU, answering one
    small NumPy batch after another without a launch.

    The kernel (``forward_cluster`` built with ``RESIDENT``) occupies its cluster's SMs
    (up to 16 on an H100) on its own non-blocking stream and polls a request word in
    pinned host memory. A call fills the outputs (also pinned host memory) with
    ``_EMPTY``, writes the rows, posts the next sequence number and spins until no output
    word is ``_EMPTY`` any more: no CUDA API call at all, and no fence or done word between
    the last output and the answer. After ``idle_ns`` without a
    request the kernel leaves by itself; the next call relaunches it. A call for another
    batch size stops the kernel and relaunches it for that size. Calls are serialized by
    a lock. Made and used through :func:`resident_session`.
    """

    def __init__(self, d, idle_ns):
        self.d = d
        self.idle_ns = int(idle_ns)
        self.users = 0
        self.lock = threading.RLock()
        self.stream = None
        self.cfg = None  # the launch configuration the running kernel was started with
        self.bufs = None
        self.ctrl, self.ctrl_dev = host_mapped((_EXITED + 1,), np.int64)
        self.ctrl[:] = 0
        self.words = memoryview(self.ctrl)  # (a memoryview item is read twice as fast as a NumPy one)
        self.bar_err, self.flag = memoryview(d["bar_err_np"]), memoryview(d["flag_np"])
        self.seq = 0
        self.running = False
        self.launches = 0  # (tests: a relaunch after an idle exit is counted)

    def _start(self, cfg, B):
        cp = get_cupy()
        d = self.d
        if self.bufs is None or self.bufs[0].shape[0] != B:
            x_host, x_dev = host_mapped((B, d["n_in"]), np.float64)
            out_host, out_dev = host_mapped((B, d["n_out"]), np.float64)
            out_bytes = memoryview(out_host).cast("B")
            empty = np.full(out_host.size, _EMPTY, dtype=np.int64).tobytes()
            self.bufs = (x_host, x_dev, out_host, out_dev, out_bytes, out_bytes.cast("q"), empty)
        if self.stream is None:
            self.stream = cp.cuda.Stream(non_blocking=True)
        c = self.ctrl
        c[_EXITED] = 0
        c[_REQ] = c[_DONE]
        cfg["resident"](self.bufs[1], self.bufs[3], self.ctrl_dev, self.idle_ns, self.stream)
        self.cfg, self.running = cfg, True
        self.launches += 1
        register_resident(self)

    def stop(self):
        """Ask the kernel to leave and wait for it (idempotent)."""
        with self.lock:
            if self.running:
                self.ctrl[_REQ] = _STOP
                self.stream.synchronize()
                self.running = False
                self.ctrl[_REQ] = self.ctrl[_DONE]
            unregister_resident(self)

    def _check_alive(self, s, t0):
        """While waiting for request ``s`` (posted at ``time.monotonic()`` ``t0``): raise when
        the kernel's stream failed, when the kernel is gone without answering or saying it
        left, or after ``RESIDENT_ANSWER_S`` without an answer (a kernel still queued
        behind other work answers the request later; the next call posts a new one)."""
        if self.stream.done:  # (raises the stream's CUDA error, if any; its writes are all visible now)
            c = self.ctrl
            if _EMPTY in self.bufs[5] and not (c[_EXITED] and c[_DONE] != s):  # (else: relaunched)
                self.running = False
                raise RuntimeError("the resident SparseGraph kernel stopped without answering a request.")
        elif time.monotonic() - t0 > RESIDENT_ANSWER_S:
            raise RuntimeError(
                f"the resident SparseGraph kernel did not answer within {RESIDENT_ANSWER_S:g} s "
                "(is other work holding the GPU?)."
            )

    def call(self, cfg, X):
        """Outputs (a new 2-D NumPy array) of the rows ``X`` (a float64 NumPy batch that
        fits :func:`fits_host_mapped`, or one row as a 1-D array; ``cfg``: the cluster
        launch configuration of its batch size)."""
        B = 1 if X.ndim == 1 else X.shape[0]
        with self.lock:
            if self.running and (self.cfg is not cfg or self.bufs[0].shape[0] != B):
                self.stop()  # another batch size (or executor): relaunch for it
            if not self.running:
                self._start(cfg, B)
            x_host, _, out_host, _, out_bytes, out_words, empty = self.bufs
            out_bytes[:] = empty  # (every output word is written once per request)
            np.copyto(x_host, X)
            s = self.seq = self.seq + 1
            words = self.words
            words[_REQ] = s  # (x86 keeps stores in order: the rows and EMPTY are visible first)
            spins, t0 = 0, time.monotonic()
            while out_words[-1] == _EMPTY or _EMPTY in out_words:
                if words[_EXITED] and words[_DONE] != s:
                    # it left (idle) before it saw the request: relaunch, post again (once it
                    # has answered, the outputs are on their way)
                    self.running = False
                    self._start(cfg, B)
                    words[_REQ] = s
                spins += 1
                if spins > RESIDENT_SPIN_ALONE:  # a long wait (a relaunch, a busy GPU): let other threads run
                    time.sleep(0)
                    if not spins & 0xFFF:
                        self._check_alive(s, t0)
            if self.bar_err[0]:  # a wait for a value timed out: the kernel is broken
                self.stop()
                _barrier_failed(self.d)
            if self.flag[0]:
                self.flag[0] = 0
                raise ValueError("X contains NaN or infinite values.")
            return out_host.copy()


def resident_check(graph):
    """The device plan and one-row cluster configuration of a resident kernel, or
    ValueError naming why the graph cannot be resident."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        # the request protocol relies on the host's stores becoming visible in program order
        raise ValueError(
            f"resident kernels need an x86-64 host (stores kept in order); this is {platform.machine()}."
        )
    d, cfg = _plan_config(graph, 1, "auto")
    if cfg.get("mode") != "cluster":
        raise ValueError(
            "this graph cannot run as a resident kernel: its node values "
            f"({8 * d['n_slots']:,} bytes for one row) do not fit one thread-block "
            "cluster's shared memory, or its levels are too wide for one cluster ('auto' runs it "
            "with the fused or per-level executor)."
        )
    return d, cfg


@contextlib.contextmanager
def resident_session(graph, idle_timeout):
    """Context manager behind :meth:`SparseGraph.resident`: while any ``resident()`` block of
    the graph's device plan is open, :func:`forward_host` calls of the cluster executor go to its
    :class:`ResidentForward`; the last block to close stops the kernel."""
    d, _ = resident_check(graph)
    res = d["resident"]
    if res is None:
        res = d["resident"] = ResidentForward(d, idle_timeout * 1e9)
    with res.lock:
        if not res.users:  # (a nested block keeps the outer block's idle timeout)
            res.idle_ns = int(idle_timeout * 1e9)
        res.users += 1
    try:
        yield res
    finally:
        with res.lock:
            res.users -= 1
            if not res.users:
                res.stop()
