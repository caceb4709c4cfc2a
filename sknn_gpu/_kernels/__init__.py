"""The one kernel loader.

CUDA sources live next to this file as ``<family>.cu`` (package data). They are
read as text and compiled with ``cupy.RawModule``. There is one way to ask for a
kernel: :func:`get_function` ``(family, name, **defines)``.

* ``name`` is the kernel's name; a templated kernel is asked for by its template-id,
  e.g. ``get_function("gemv", "gemv_rows<float,32,true>")`` (type and variant
  choices are template arguments).
* ``defines`` are compile-time constants that size arrays or unroll loops (a
  stencil radius, a class count); they are prepended as ``#define KEY VALUE``.

Each (device, family, defines, options, name) is compiled once per process and
memoized (CuPy's on-disk cache makes later processes cheap); a repeated call costs
one dictionary lookup, so callers need no cache of their own. Estimators must never
store a module or kernel on ``self`` (it does not pickle): call :func:`get_function`
where the kernel is launched. :mod:`._launch` holds the cached driver launch
records for calls where Python launch overhead matters.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import threading
from importlib import resources
from pathlib import Path

import numpy as np

from .._backend import get_cupy

__all__ = [
    "kernel_dir",
    "load_source",
    "render_defines",
    "load_module",
    "get_module",
    "get_function",
    "clear_cache",
    "check_barrier_error",
    "register_resident",
    "unregister_resident",
    "stop_resident_kernels",
    "allow_large_clusters",
]

_DEFAULT_OPTIONS = ("--std=c++17",)
_cache: dict = {}  # (device, family, defines, options, template-id or None) -> RawModule
_functions: dict = {}  # (device, family, name, defines, options) -> RawKernel
_lock = threading.Lock()


def kernel_dir() -> Path:
    """Folder holding the ``.cu`` sources (also passed to NVRTC as an include path)."""
    return Path(str(resources.files(__name__)))


def load_source(name: str) -> str:
    """Return the text of ``_kernels/<name>.cu``; a clear error when it does not exist."""
    if not name or "/" in name or "\\" in name or name.startswith("."):
        raise ValueError(f"kernel family name must be a plain file stem, got {name!r}.")
    path = kernel_dir() / f"{name}.cu"
    if not path.is_file():
        known = sorted(p.stem for p in kernel_dir().glob("*.cu"))
        raise FileNotFoundError(f"No kernel source {name}.cu in {kernel_dir()}; known families: {known}.")
    return path.read_text(encoding="utf-8")


@functools.lru_cache(maxsize=1)
def headers_digest() -> str:
    """SHA-1 of every ``*.cuh`` header next to the sources.

    CuPy's on-disk kernel cache keys on the source text and options, not on the
    headers a source includes; appending this digest to every source makes an
    edit to a shared header recompile the kernels that use it.
    """
    h = hashlib.sha1()
    for path in sorted(kernel_dir().glob("*.cuh")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _define_value(value) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str) and value and "\n" not in value:
        return value
    raise TypeError(f"define values must be bool, int, float or a one-line str, got {value!r}.")


def render_defines(defines: dict) -> str:
    """The ``#define`` preamble prepended to a source, in sorted (stable) order."""
    lines = []
    for key in sorted(defines):
        if not key.isidentifier():
            raise ValueError(f"define name must be a C identifier, got {key!r}.")
        lines.append(f"#define {key} {_define_value(defines[key])}")
    return "\n".join(lines) + ("\n" if lines else "")


def _module(device_id, name, defines_key, options, instance):
    key = (device_id, name, defines_key, options, instance)
    with _lock:
        mod = _cache.get(key)
        if mod is None:
            cupy = get_cupy()
            code = (
                render_defines(dict(defines_key)) + load_source(name) + f"\n// headers {headers_digest()}\n"
            )
            opts = _DEFAULT_OPTIONS + (f"-I{kernel_dir()}",) + tuple(options)
            kwargs = {"code": code, "options": opts}
            if instance is not None:
                kwargs["name_expressions"] = [instance]
            mod = cupy.RawModule(**kwargs)
            mod.compile()  # surface compile errors here, not at first launch
            _cache[key] = mod
    return mod


def load_module(name: str, *, options=(), **defines):
    """Compile (once) and return the ``cupy.RawModule`` of family ``name`` (no template instances).

    Most callers want :func:`get_function`; this is for tests and tools that list a
    family's ``extern "C"`` kernels.
    """
    return get_module(name, "", options=options, **defines)


def get_function(family: str, name: str, *, options=(), **defines):
    """The compiled kernel ``name`` of ``_kernels/<family>.cu`` on the current device.

    Parameters
    ----------
    family : str
        Stem of the source file, e.g. ``"dtcnn"``.
    name : str
        An ``extern "C"`` kernel name, or a template-id such as
        ``"gemv_rows<float,32,true>"`` (compiled as that one instantiation).
    options : tuple of str
        Extra NVRTC options.
    **defines
        Compile-time constants, prepended as ``#define KEY VALUE`` (bool, int, float
        or a one-line str).

    Returns
    -------
    cupy.RawKernel
        Memoized per device, family, defines, options and name.
    """
    device_id = get_cupy().cuda.runtime.getDevice()
    options = tuple(options)
    # the type is part of the key: 1, 1.0 and True compare equal but render differently
    dkey = tuple(sorted((k, v, type(v)) for k, v in defines.items())) if defines else ()
    fkey = (device_id, family, name, dkey, options)
    fn = _functions.get(fkey)
    if fn is None:
        fn = get_module(family, name, options=options, **defines).get_function(name)
        with _lock:
            _functions[fkey] = fn
    return fn


def get_module(family: str, name: str, *, options=(), **defines):
    """The ``cupy.RawModule`` that :func:`get_function` compiles kernel ``name`` of
    ``family`` in (same arguments): for reading a module's ``__device__`` globals
    (``get_global``), as profiling builds do. A name without template arguments gives the
    family's module without template instances (:func:`load_module`)."""
    device_id = get_cupy().cuda.runtime.getDevice()
    dkey = tuple((k, _define_value(v)) for k, v in sorted(defines.items()))
    return _module(device_id, family, dkey, tuple(options), name if "<" in name else None)


def clear_cache():
    """Forget every compiled module (tests use this)."""
    with _lock:
        _cache.clear()
        _functions.clear()


def check_barrier_error(err_buf, what):
    """Raise RuntimeError when a persistent kernel's grid barrier reported a time-out.

    ``err_buf`` is the barrier's error word (``grid_barrier.cuh``): a NumPy array (a host
    copy, or a view of host-mapped pinned memory: no copy) or a CuPy array (one small
    device-to-host copy, which waits for the kernel). ``what`` names the computation in
    the message. The word is not reset here: after a failure the caller re-zeroes it and
    the barrier's arrival counter (the outputs of the failed launch are meaningless).
    """
    value = err_buf if isinstance(err_buf, np.ndarray) else err_buf.get()
    if int(value.reshape(-1)[0]) != 0:
        raise RuntimeError(
            f"{what}: grid barrier timed out: the persistent kernel's blocks were not all "
            "resident; is another workload using the GPU?"
        )


# ---------------------------------------------------------------- resident kernels
# Kernels that stay on the GPU between calls (SparseGraph.resident: _graph_resident_cuda.ResidentForward)
# hold some SMs. A kernel with a software grid barrier sizes its grid to the SMs of the whole
# device, and its blocks must all be resident at once: its launcher calls
# stop_resident_kernels() first (the resident kernel is relaunched by its next call).
_resident: set = set()
_resident_lock = threading.Lock()
_resident_atexit = False


def register_resident(kernel):
    """Record a running resident kernel (an object with ``stop()``) until it is unregistered."""
    global _resident_atexit
    with _resident_lock:
        _resident.add(kernel)
        if not _resident_atexit:
            atexit.register(stop_resident_kernels)
            _resident_atexit = True


def unregister_resident(kernel):
    with _resident_lock:
        _resident.discard(kernel)


def stop_resident_kernels():
    """Ask every running resident kernel of this process to leave, and wait for each: before
    a launch whose grid barrier needs every SM, and at exit. Cheap when there is none."""
    if _resident:
        with _resident_lock:
            running = list(_resident)
        for kernel in running:
            with contextlib.suppress(Exception):  # (at exit: a CUDA context already gone)
                kernel.stop()


#: CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED (CUDA driver API).
_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14


def allow_large_clusters(kern):
    """Let ``kern`` (a compiled kernel) launch thread-block clusters of more than 8 blocks,
    the portable maximum (H100 allows 16). Returns False where the CuPy build or the driver
    refuses the attribute; a launch may still fail when no GPC has room for the cluster."""
    try:
        get_cupy().cuda.driver.funcSetAttribute(kern.kernel.ptr, _NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
    except Exception:  # pragma: no cover - depends on the CuPy build and driver
        return False
    return True
