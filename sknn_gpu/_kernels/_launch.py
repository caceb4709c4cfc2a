"""Cached driver launches: a kernel launched from a prebuilt argument block.

A CuPy ``RawKernel`` call costs a few microseconds of Python on top of the launch
(it inspects and packs every argument). Where that overhead dominates (a 256 x 256
``gemv`` is about 3 µs of GPU work), a caller can build a :class:`Launch` record once
per call shape and then, on every call, write only what changes (pointers and
scalars) into the record's argument block and launch through ``cuLaunchKernel``
directly.

* :class:`Launch` -- one record: the kernel's function pointer, its launch shape and an
  argument block with one 8-byte slot per kernel argument. Fixed arguments (sizes,
  strides) are written once; per-call pointers go into ``slots[i]``, per-call floats
  through the ctypes views in ``floats``.
* :class:`LaunchTable` -- the records of one caller, per thread: the driver reads the
  argument block after the GIL is released, so two threads must never share a record.
* :func:`driver_launch` -- CuPy's ``cuLaunchKernel`` binding, or None when this CuPy
  build has none (callers then keep launching through ``RawKernel``).
* :func:`capture_graph` -- a fixed sequence of copies and launches (fixed buffers, the
  data changing only in them) captured once as a CUDA graph: one ``cudaGraphLaunch``
  per call replaces several API calls (a one-row SparseGraph forward, the row's copy
  and the launch: 29-30 -> 23-24 µs of wall time on an H100).

The first call of a shape should go through the ``RawKernel`` itself (which also makes
the device's context current in the calling thread); later calls use the record. The
caller keys its records by everything its validation looked at, so a record is only
reused for a call that would have passed the same checks.
"""

from __future__ import annotations

import ctypes
import threading

from .._backend import get_cupy

__all__ = ["Launch", "LaunchTable", "driver_launch", "capture_graph"]

_UNSET = object()
_driver = _UNSET


def driver_launch():
    """CuPy's ``cupy.cuda.driver.launchKernel``, or None when this CuPy build lacks it (memoized).

    Its arguments are ``(function pointer, gx, gy, gz, bx, by, bz, shared bytes, stream
    pointer, address of the argument pointer array, 0)``.
    """
    global _driver
    if _driver is _UNSET:
        get_cupy()
        try:
            from cupy.cuda import driver

            _driver = driver.launchKernel
        except (ImportError, AttributeError):  # pragma: no cover - depends on the CuPy build
            _driver = None
    return _driver


class Launch:
    """A prebuilt launch: function pointer, launch shape and one 8-byte slot per kernel argument.

    Parameters
    ----------
    kernel : cupy.RawKernel
        The compiled kernel (from :func:`sknn_gpu._kernels.get_function`).
    grid, block : tuple of int
        Launch shape, 1 to 3 dimensions each.
    layout : sequence
        One entry per kernel argument, in order: ``"p"`` a pointer (or any 64-bit value)
        written per call into ``slots[i]``; ``"f"`` a float written per call through the
        next view of ``floats``; ``("q", v)`` a fixed 64-bit integer; ``("i", v)`` a
        fixed 32-bit integer.
    f32 : bool
        Whether the ``"f"`` slots are C ``float`` (else ``double``).
    shared_mem : int, default=0
        Dynamic shared memory in bytes.

    Attributes
    ----------
    slots : ctypes array of uint64
        The argument block.
    floats : tuple of ctypes.c_float or ctypes.c_double
        Views of the ``"f"`` slots, in layout order.
    fptr, gx, gy, gz, bx, by, bz, smem, paddr
        What :meth:`launch` passes to the driver (hot paths may pass them inline).
    """

    __slots__ = (
        "fn",
        "fptr",
        "gx",
        "gy",
        "gz",
        "bx",
        "by",
        "bz",
        "smem",
        "slots",
        "params",
        "paddr",
        "floats",
    )

    def __init__(self, kernel, grid, block, layout, f32, shared_mem=0):
        if driver_launch() is None:
            raise RuntimeError("this CuPy build has no cuLaunchKernel binding; launch the RawKernel instead.")
        n = len(layout)
        self.slots = (ctypes.c_uint64 * n)()
        base = ctypes.addressof(self.slots)
        self.params = (ctypes.c_void_p * n)(*[base + 8 * i for i in range(n)])
        self.paddr = ctypes.addressof(self.params)
        ftype = ctypes.c_float if f32 else ctypes.c_double
        floats = []
        for i, item in enumerate(layout):
            if item == "f":
                floats.append(ftype.from_buffer(self.slots, 8 * i))
            elif item == "p":
                continue
            elif item[0] == "i":
                ctypes.c_int32.from_buffer(self.slots, 8 * i).value = int(item[1])
            elif item[0] == "q":
                self.slots[i] = int(item[1])
            else:
                raise ValueError(f"unknown launch layout entry {item!r}.")
        self.floats = tuple(floats)
        grid, block = tuple(grid) + (1, 1), tuple(block) + (1, 1)
        self.gx, self.gy, self.gz = int(grid[0]), int(grid[1]), int(grid[2])
        self.bx, self.by, self.bz = int(block[0]), int(block[1]), int(block[2])
        self.smem = int(shared_mem)
        self.fn = kernel.kernel  # the CuPy Function keeps its module (and so fptr) loaded
        self.fptr = int(self.fn.ptr)

    def launch(self, stream_ptr):
        """Launch on the stream ``stream_ptr`` with the current contents of the argument block."""
        _driver(
            self.fptr,
            self.gx,
            self.gy,
            self.gz,
            self.bx,
            self.by,
            self.bz,
            self.smem,
            stream_ptr,
            self.paddr,
            0,
        )


class LaunchTable(threading.local):
    """Launch records of one caller, one dictionary per thread (``records``).

    Parameters
    ----------
    limit : int, default=1024
        When a thread holds more records than this, its table is emptied before the next
        one is added (records are cheap to rebuild; the table must not grow without bound).
    """

    def __init__(self, limit=1024):
        self.records = {}
        self.limit = limit

    def register(self, key, make):
        """Store ``make()`` (a :class:`Launch`) under ``key`` in this thread's table.

        Does nothing without a driver launch, or when ``make`` fails (a CuPy without
        ``Function.ptr``): the caller then stays on ``RawKernel`` launches.
        """
        if driver_launch() is None:
            return
        try:
            rec = make()
        except Exception:  # pragma: no cover - depends on the CuPy build
            return
        if len(self.records) > self.limit:
            self.records.clear()
        self.records[key] = rec

    def clear(self):
        """Forget this thread's records."""
        self.records.clear()


def capture_graph(enqueue, prepare=None):
    """Capture the work ``enqueue()`` puts on the current stream as a CUDA graph.

    ``enqueue`` is called once, with a fresh non-blocking stream current, and must only
    enqueue asynchronous work (copies, launches: no allocation, no synchronisation).
    Every pointer and scalar is baked into the graph, so the caller keeps the buffers
    alive with the graph and changes only their contents between replays
    (``graph.launch(stream)`` on any stream of the device). Returns the
    ``cupy.cuda.graph.Graph``, or None where this CuPy or driver cannot capture (the
    caller keeps issuing the calls itself); any other error propagates.

    ``prepare(stream)``, when given, runs on that stream just before the capture begins
    (e.g. to point a library handle at it: CuPy refuses ``cublas.setStream`` while a
    stream is capturing) and returns a callable that undoes it after the capture ends.
    """
    cp = get_cupy()
    try:
        relaxed = cp.cuda.runtime.streamCaptureModeRelaxed  # other threads may allocate meanwhile
        side = cp.cuda.Stream(non_blocking=True)
        begin, end = side.begin_capture, side.end_capture
    except AttributeError:  # a CuPy without stream capture
        return None
    try:
        with side:
            undo = prepare(side) if prepare is not None else None
            try:
                begin(mode=relaxed)
                try:
                    enqueue()
                finally:
                    graph = end()  # always leave capture mode, also on an error
            finally:
                if undo is not None:
                    undo()
    except (cp.cuda.runtime.CUDARuntimeError, cp.cuda.driver.CUDADriverError):
        return None  # the driver refused the capture
    return graph
