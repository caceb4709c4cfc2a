"""The one module that knows about devices.

Everything device-related in sknn_gpu goes through here: the lazy CuPy import,
device resolution, moving arrays between host and device, making outputs follow
the type of the input, and refusing oversize work before allocating.

Importing this module never imports CuPy; CuPy is imported the first time a
function here needs it.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse as sp

try:  # POSIX only: the process's resource limits
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None

__all__ = [
    "take_rows",
    "VALID_DEVICES",
    "InsufficientMemoryError",
    "cuda_available",
    "cuda_unavailable_reason",
    "resolve_device",
    "get_xp",
    "get_cupy",
    "array_module",
    "DeviceLimits",
    "device_limits",
    "is_cupy_array",
    "is_cupy_sparse",
    "is_device_array",
    "to_device",
    "to_host",
    "host_mapped",
    "host_flag",
    "all_finite",
    "all_in_unit_interval",
    "abs_max",
    "same_type_as_input",
    "OUTPUT_TYPES",
    "get_config",
    "set_config",
    "config_context",
    "free_memory",
    "check_memory",
    "synchronize",
]

#: Values accepted by every ``device`` parameter.
VALID_DEVICES = ("auto", "cpu", "cuda")

#: Environment variable that hides CUDA from sknn_gpu (useful to force the CPU path).
DISABLE_ENV = "SKNN_GPU_DISABLE_CUDA"

# the package is installed from its source tree or a built wheel, not by name from an index:
# name the CuPy wheels themselves (what the cuda12 / cuda13 extras install)
_INSTALL_HINT = (
    "Install CuPy for your driver's CUDA major version: `pip install cupy-cuda12x` (CUDA 12.x) "
    "or `pip install cupy-cuda13x` (CUDA 13.x), which is what sknn-gpu's cuda12 / cuda13 extras "
    "install; or use device='cpu' / 'auto'."
)


class InsufficientMemoryError(MemoryError):
    """Raised before allocating when a piece of work cannot fit on its device."""


@functools.lru_cache(maxsize=1)
def _probe_cuda():
    """Return ``(cupy_module_or_None, reason_or_None)``; the probe runs once per process."""
    if os.environ.get(DISABLE_ENV, "").strip() not in ("", "0"):
        return None, f"CUDA is disabled by the environment variable {DISABLE_ENV}."
    try:
        cupy = importlib.import_module("cupy")
    except Exception as exc:  # ImportError, or a broken CUDA install raising at import
        return None, f"CuPy could not be imported ({type(exc).__name__}: {exc})."
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return (
            None,
            f"CuPy is installed but no CUDA device is usable ({type(exc).__name__}: {exc}).",
        )
    if n < 1:
        return None, "CuPy is installed but it sees no CUDA device."
    try:  # a device that enumerates but cannot allocate is not usable
        cupy.zeros(1, dtype=cupy.float32).sum().item()
    except Exception as exc:
        return (
            None,
            f"A CUDA device was found but could not run work ({type(exc).__name__}: {exc}).",
        )
    return cupy, None


def _reset_cache():
    """Forget the CUDA probe (tests use it after faking a missing CuPy)."""
    _probe_cuda.cache_clear()


def cuda_available() -> bool:
    """Return True when CuPy imports and at least one CUDA device can run work."""
    return _probe_cuda()[0] is not None


def cuda_unavailable_reason() -> str | None:
    """Why CUDA is not usable, or None when it is."""
    return _probe_cuda()[1]


def get_cupy():
    """Return the ``cupy`` module, or raise a clear RuntimeError when it is unusable."""
    cupy, reason = _probe_cuda()
    if cupy is None:
        raise RuntimeError(f"device='cuda' was requested but CUDA is not usable: {reason} {_INSTALL_HINT}")
    return cupy


def resolve_device(device: str = "auto") -> str:
    """Resolve a ``device`` parameter to ``'cpu'`` or ``'cuda'``.

    ``'auto'`` picks ``'cuda'`` when CuPy and a GPU are usable and ``'cpu'`` otherwise,
    silently. ``'cuda'`` without them raises one RuntimeError naming what is missing.
    """
    if not isinstance(device, str) or device not in VALID_DEVICES:
        raise ValueError(f"device must be one of {VALID_DEVICES}, got {device!r}.")
    if device == "auto":
        return "cuda" if cuda_available() else "cpu"
    if device == "cuda":
        get_cupy()
    return device


def _resolved(device) -> str:
    """Check that ``device`` is already resolved ('cpu' or 'cuda'); never resolves 'auto'.

    Everything below an estimator receives the device its ``fit`` resolved once
    (``device_``); passing ``'auto'`` here is a programming error.
    """
    if device == "cpu" or device == "cuda":
        return device
    raise ValueError(f"expected a resolved device ('cpu' or 'cuda'), got {device!r}.")


def get_xp(device):
    """Array module for a resolved device: numpy for ``'cpu'``, cupy for ``'cuda'``."""
    return get_cupy() if _resolved(device) == "cuda" else np


def array_module(x):
    """The array module of ``x``: cupy for a CuPy array (dense or sparse), numpy otherwise."""
    return get_cupy() if is_device_array(x) else np


class DeviceLimits(NamedTuple):
    """What the kernels' launch rules need to know about one CUDA device."""

    device_id: int
    name: str
    sm_count: int
    max_threads_per_block: int
    max_threads_per_sm: int
    regs_per_sm: int
    smem_per_block: int  # default limit, bytes
    smem_per_block_optin: int  # with the opt-in attribute, bytes
    smem_per_sm: int
    compute_capability: tuple
    n_devices: int  # GPUs visible to this process


@functools.lru_cache(maxsize=16)
def _device_limits(device_id) -> DeviceLimits:
    cupy = get_cupy()
    dev = cupy.cuda.Device(device_id)
    a = dev.attributes
    cc = dev.compute_capability
    try:
        name = cupy.cuda.runtime.getDeviceProperties(device_id)["name"]
        name = name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # pragma: no cover - depends on the CuPy build
        name = "CUDA device"
    smem_block = int(a.get("MaxSharedMemoryPerBlock", 48 * 1024))
    return DeviceLimits(
        device_id=int(device_id),
        name=name,
        sm_count=int(a["MultiProcessorCount"]),
        max_threads_per_block=int(a.get("MaxThreadsPerBlock", 1024)),
        max_threads_per_sm=int(a.get("MaxThreadsPerMultiProcessor", 1024)),
        regs_per_sm=int(a.get("MaxRegistersPerMultiprocessor", 65536)),
        smem_per_block=smem_block,
        smem_per_block_optin=int(a.get("MaxSharedMemoryPerBlockOptin", smem_block)),
        smem_per_sm=int(a.get("MaxSharedMemoryPerMultiprocessor", 64 * 1024)),
        compute_capability=(int(cc[0]), int(cc[1:])),
        n_devices=int(cupy.cuda.runtime.getDeviceCount()),
    )


_get_device = None


def current_device_id() -> int:
    """The current CUDA device's ordinal (CuPy's runtime call, looked up once: a hot path
    asks it per call)."""
    global _get_device
    if _get_device is None:
        _get_device = get_cupy().cuda.runtime.getDevice
    return _get_device()


def device_limits(device_id: int | None = None) -> DeviceLimits:
    """Limits of the current (or the given) CUDA device, queried once per device and memoized.

    The one place that reads device attributes: SM count, threads, registers and shared
    memory per block and per SM. Kernels size their grids from it.
    """
    if device_id is None:
        device_id = current_device_id()
    return _device_limits(int(device_id))


def _top_module(obj) -> str:
    return type(obj).__module__.split(".", 1)[0]


def is_cupy_array(x) -> bool:
    """True for a dense CuPy ndarray; never imports CuPy."""
    return _top_module(x) == "cupy" and hasattr(x, "get") and hasattr(x, "shape") and not is_cupy_sparse(x)


def is_cupy_sparse(x) -> bool:
    """True for a cupyx.scipy.sparse matrix; never imports CuPy."""
    return type(x).__module__.startswith("cupyx.scipy.sparse")


def is_device_array(x) -> bool:
    """True for any CuPy array, dense or sparse."""
    return _top_module(x) in ("cupy", "cupyx") and hasattr(x, "get")


def to_device(x: Any, device: str) -> Any:
    """Return ``x`` on ``device`` ('cpu' or 'cuda'); no copy when it is already there.

    Dense arrays become numpy/cupy arrays, sparse matrices scipy/cupyx CSR-family
    matrices. None and Python scalars pass through.
    """
    if x is None or np.isscalar(x):
        return x
    if _resolved(device) == "cpu":
        return to_host(x)
    cupy = get_cupy()
    if is_device_array(x):
        return x
    if sp.issparse(x):
        import cupyx.scipy.sparse as csp

        if x.format not in ("csr", "csc", "coo"):
            x = x.tocsr()
        if x.dtype.kind not in "bfc":  # cupyx holds bool and floating values only
            x = x.astype(np.float64)  # integers are exact in float64 up to 2**53
        return {"csr": csp.csr_matrix, "csc": csp.csc_matrix, "coo": csp.coo_matrix}[x.format](x)
    return cupy.asarray(x)


def take_rows(X: Any, rows: Any) -> Any:
    """Rows ``rows`` (host integer indices) of NumPy, SciPy CSR, CuPy or cupyx CSR data;
    the indices go to the GPU first for device data."""
    return X[to_device(rows, "cuda")] if is_device_array(X) else X[rows]


def to_host(x: Any) -> Any:
    """Return ``x`` as a NumPy array (or scipy sparse matrix); no copy for host data."""
    if x is None or np.isscalar(x):
        return x
    if is_device_array(x):
        return x.get()
    if sp.issparse(x):
        return x
    return np.asarray(x)


def host_mapped(shape: tuple[int, ...], dtype: Any) -> tuple[np.ndarray, Any]:
    """A NumPy array in pinned host memory and a CuPy array over the same bytes.

    Under unified addressing (every 64-bit platform CuPy supports) pinned host memory
    is addressable from kernels with the host pointer, so kernels can write small
    results into it: no copy call, no device allocation, and the host reads them once
    the stream is synchronized (one-row predictions, flags). Every device access
    crosses the PCIe bus, so data that kernels read, or read many times, belongs in
    device memory (a one-row input read by every block of a cluster was slower in
    place than copied).
    """
    cp = get_cupy()
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    mem = cp.cuda.alloc_pinned_memory(max(nbytes, 1))
    host = np.ndarray(shape, dtype=dtype, buffer=mem)
    raw = cp.cuda.UnownedMemory(mem.ptr, max(nbytes, 1), mem, cp.cuda.runtime.getDevice())
    return host, cp.ndarray(shape, dtype=dtype, memptr=cp.cuda.MemoryPointer(raw, 0))


_host_flags = threading.local()  # per thread: {device ordinal: host_mapped((1,), int32)}


def host_flag() -> tuple[np.ndarray, Any]:
    """A zeroed int32 flag in host-mapped pinned memory: ``(host view, device view)``.

    One per thread and device, reused: a kernel sets it through the device view and the
    host reads the host view once the stream is synchronized (no allocation, no copy
    call). Each call re-zeroes it, so the caller must be done with its last use.
    """
    flags = getattr(_host_flags, "by_device", None)
    if flags is None:
        flags = _host_flags.by_device = {}
    dev = current_device_id()
    flag = flags.get(dev)
    if flag is None:
        flag = flags[dev] = host_mapped((1,), np.int32)
    flag[0][0] = 0
    return flag


@functools.cache
def _device_reductions():
    """CuPy reduction kernels that read an array once and write no temporary (CuPy compiles
    each for the device of the array it is called on)."""
    cp = get_cupy()
    return {
        "all_finite": cp.ReductionKernel(
            "T x", "bool y", "isfinite(x)", "a && b", "y = a", "true", "sknn_all_finite"
        ),
        # the largest magnitude from the bits: exact for subnormals, which CuPy's float
        # kernels (-ftz=true) would see as zeros
        "abs_max_bits": cp.ReductionKernel(
            "T x",
            "T y",
            "x & (T)(~((T)1 << (sizeof(T) * 8 - 1)))",
            "max(a, b)",
            "y = a",
            "0",
            "sknn_abs_max_bits",
        ),
        # every value in [0, 1], read from the bits (x << 1 == 0: a zero of either sign;
        # else a non-negative float no larger than one): exact for subnormals, NaN fails
        "in_unit_bits": cp.ReductionKernel(
            "T x, T one",
            "bool y",
            "(T)(x << 1) == 0 || x <= one",
            "a && b",
            "y = a",
            "true",
            "sknn_in_unit_bits",
        ),
    }


def all_finite(x: Any) -> bool:
    """Whether every value of the real array ``x`` (NumPy or CuPy) is finite.

    On the GPU a float32/float64 array is checked by one fused reduction (no
    temporary boolean array, one pass over ``x``).
    """
    xp = array_module(x)
    if xp is np or x.dtype not in (np.float32, np.float64) or x.size == 0:
        return bool(xp.isfinite(x).all())
    return bool(_device_reductions()["all_finite"](x))


def all_in_unit_interval(x: Any) -> bool:
    """Whether every value of the real array ``x`` (NumPy or CuPy) lies in [0, 1].

    NaN does not; -0.0 and subnormals are compared exactly as NumPy compares them. On
    the GPU a float32/float64 array is checked on its bits by one fused reduction (one
    pass, no temporary; CuPy's float comparisons would flush subnormals to zero).
    """
    xp = array_module(x)
    if x.size == 0:
        return True
    if xp is np or x.dtype not in (np.float32, np.float64):
        return bool(x.min() >= 0 and x.max() <= 1)
    ut = np.uint32 if x.dtype == np.float32 else np.uint64
    one = np.array(1, dtype=x.dtype).view(ut)[()]  # the bits of 1.0, as a NumPy scalar
    return bool(_device_reductions()["in_unit_bits"](x.view(ut), one))


def abs_max(x: Any) -> float:
    """The largest magnitude of a non-empty real array ``x`` (NumPy or CuPy), as a float.

    On the GPU a float32/float64 array is reduced on its bits in one pass: exact for
    subnormal values too (CuPy's float kernels flush them to zero), inf for inf, NaN
    when ``x`` holds a NaN.
    """
    xp = array_module(x)
    if xp is np or x.dtype not in (np.float32, np.float64):
        return float(xp.abs(x).max())
    ut = np.uint32 if x.dtype == np.float32 else np.uint64
    bits = _device_reductions()["abs_max_bits"](x.view(ut))
    return float(np.array(bits.get(), dtype=ut).view(x.dtype))


#: What estimator outputs are converted to: ``'input'`` (follow the input), ``'numpy'`` or ``'cupy'``.
OUTPUT_TYPES = ("input", "numpy", "cupy")
# holds a read-only mapping that is replaced, never mutated, so no context leaks into another
_config = contextvars.ContextVar("sknn_gpu_config", default=MappingProxyType({"output_type": "input"}))


def get_config() -> dict:
    """The current sknn_gpu configuration (``{'output_type': ...}``) of this thread/context."""
    return dict(_config.get())


def _check_output_type(output_type):
    if output_type not in OUTPUT_TYPES:
        raise ValueError(f"output_type must be one of {OUTPUT_TYPES}, got {output_type!r}.")
    return output_type


def set_config(output_type: str | None = None) -> None:
    """Set sknn_gpu's configuration for the current thread/context.

    Parameters
    ----------
    output_type : {'input', 'numpy', 'cupy'}, optional
        What estimators return: ``'input'`` (default) follows the input array type
        (NumPy in, NumPy out; CuPy in, CuPy out); ``'numpy'`` always returns host
        arrays (handy for a GPU-fitted model feeding plotting or pandas code);
        ``'cupy'`` always returns device arrays (needs CuPy and a GPU).
    """
    cfg = get_config()
    if output_type is not None:
        cfg["output_type"] = _check_output_type(output_type)
    _config.set(MappingProxyType(cfg))


@contextlib.contextmanager
def config_context(*, output_type: str | None = None) -> Iterator[None]:
    """Temporarily change sknn_gpu's configuration (see :func:`set_config`).

    Examples
    --------
    >>> import numpy as np
    >>> from sknn_gpu import FlyHashTransformer, config_context
    >>> X = np.random.default_rng(0).random((20, 8))
    >>> hasher = FlyHashTransformer(n_components=64, k=4, device="cpu").fit(X)
    >>> with config_context(output_type="numpy"):
    ...     codes = hasher.transform(X)
    >>> type(codes).__module__.split(".")[0] in ("numpy", "scipy")
    True
    """
    token = _config.set(_config.get())
    try:
        set_config(output_type=output_type)
        yield
    finally:
        _config.reset(token)


def same_type_as_input(result, reference, output_type=None):
    """Convert an estimator's ``result`` to its output type (cuML-style).

    By default the output follows ``reference``, the input: NumPy in gives NumPy out;
    CuPy in gives CuPy out. ``output_type`` ('input', 'numpy' or 'cupy'; an estimator's
    own parameter) overrides that, and when it is None the current
    ``config_context(output_type=...)`` decides. Tuples and lists are converted element
    by element. Estimators pass every returned array through here, and nothing else.
    """
    given = output_type
    if output_type is None:
        output_type = _config.get()["output_type"]
    if type(result) is np.ndarray and (
        output_type == "numpy" or (output_type == "input" and type(reference) is np.ndarray)
    ):
        return result  # what to_host returns for it, without the type checks (small predictions)
    if output_type == "input" and type(result) is type(reference) and is_cupy_array(result):
        return result  # CuPy in, CuPy out: what to_device returns for it, without the checks
    if isinstance(result, (tuple, list)):
        return type(result)(same_type_as_input(r, reference, given) for r in result)
    if output_type == "cupy" and not is_device_array(result) and not cuda_available():
        where = "the estimator's output_type parameter" if given else "sknn_gpu.config_context / set_config"
        raise RuntimeError(
            f"output_type='cupy' (from {where}) asks for CuPy arrays, but CUDA is not usable: "
            f"{cuda_unavailable_reason()} Use output_type='numpy', or 'input' / None to follow the "
            "input's array type, on a machine without a GPU."
        )
    if output_type == "cupy" or (output_type == "input" and is_device_array(reference)):
        return to_device(result, "cuda")
    return to_host(result)


def synchronize(device: str) -> None:
    """Wait for queued GPU work (no-op on the CPU)."""
    if device == "cuda":
        get_cupy().cuda.get_current_stream().synchronize()


def _host_available_bytes() -> int:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - exotic platforms
        return 2**62


def _address_space_used() -> int:
    """This process's virtual size in bytes (``VmSize``; 0 where it cannot be read)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _address_space_limit() -> int | None:
    """The soft address-space limit of this process (``RLIMIT_AS``, ``ulimit -v``) in bytes,
    or None when there is none (unlimited, or no ``resource`` module on this platform)."""
    if resource is None:
        return None
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    except (OSError, ValueError, AttributeError):  # pragma: no cover - platforms without RLIMIT_AS
        return None
    if soft is None or soft == resource.RLIM_INFINITY or soft < 0:
        return None
    return int(soft)


def _address_space_left() -> tuple[int, int] | None:
    """``(limit, bytes it leaves above this process's virtual size)``, or None without a limit."""
    limit = _address_space_limit()
    if limit is None:
        return None
    return limit, max(0, limit - _address_space_used())


def _host_free_bytes() -> int:
    """The smaller of MemAvailable and what ``RLIMIT_AS`` leaves above this process's
    virtual size: a process started under ``ulimit -v`` gets MemoryError long before the
    machine runs out of memory."""
    avail = _host_available_bytes()
    left = _address_space_left()
    return avail if left is None else min(avail, left[1])


def _host_limit_note(avail) -> str:
    """Why only ``avail`` bytes are free on the host, when the address-space limit says so."""
    left = _address_space_left()
    if left is None or left[1] > avail:
        return ""
    limit, room = left
    return (
        f" (the process's address-space limit (RLIMIT_AS) of {limit} bytes ({_fmt_bytes(limit)}) "
        f"of which it already uses {limit - room} bytes ({_fmt_bytes(limit - room)}))"
    )


#: seconds a reading of the driver's free memory stands in for a new one, for work of at
#: most half of what it showed (:func:`free_memory`)
DRIVER_READING_TTL = 0.5
_driver_readings: dict[int, tuple[float, int]] = {}  # device -> (monotonic time, free bytes)


def _driver_free(cupy, need):
    """The CUDA driver's free bytes on the current device (see :func:`free_memory`)."""
    dev = cupy.cuda.Device().id
    now = time.monotonic()
    at, free = _driver_readings.get(dev, (-math.inf, 0))
    if need is not None and now - at < DRIVER_READING_TTL and 2 * need <= free:
        return free
    free = int(cupy.cuda.runtime.memGetInfo()[0])
    _driver_readings[dev] = (now, free)
    return free


def free_memory(device: str, need: int | None = None) -> int:
    """Bytes that can be allocated now on ``device``.

    On CUDA this is the driver's free memory plus what CuPy's memory pool holds
    but does not use, capped by the pool's limit when one is set
    (``cupy.get_default_memory_pool().set_limit``); on the CPU it is the kernel's
    MemAvailable, or what the process's address-space limit (``RLIMIT_AS``, set by
    ``ulimit -v``) leaves above its current virtual size when that is smaller.

    With ``need`` on CUDA the driver (about 25 us a query) is spared where the answer
    cannot be in doubt: when the pool's unused bytes alone cover ``need`` (a call repeated
    on the same sizes; an allocation the pool cannot place frees its cached blocks and
    asks the driver again, which then has at least that much free), those are returned;
    when a reading of the driver taken less than :data:`DRIVER_READING_TTL` seconds ago
    showed at least twice ``need`` free, that reading stands in for a new one.
    """
    if _resolved(device) == "cpu":
        return _host_free_bytes()
    cupy = get_cupy()
    pool = cupy.get_default_memory_pool()
    pooled = int(pool.free_bytes())
    limit = int(pool.get_limit())
    if need is not None and pooled >= need and not limit:
        return pooled
    avail = _driver_free(cupy, need) + pooled
    if limit:  # a user-set cap on CuPy's pool (set_limit) is as binding as the device
        avail = min(avail, max(0, limit - int(pool.used_bytes())))
    return avail


def _fmt_bytes(n) -> str:
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


#: Work of at most this many bytes on a device is not checked against free memory by the
#: estimators' per-call paths (``check_memory(..., floor=SMALL_WORK_BYTES)``): it cannot be
#: oversize on any machine that runs them, and the free-memory query (``/proc/meminfo``, the
#: CUDA driver and the memory pool: 20-80 us) would dominate a small call. An allocation
#: that still fails raises CuPy's or NumPy's MemoryError, which the estimators report.
SMALL_WORK_BYTES = 16 << 20


def check_memory(
    n_bytes: int,
    device: str,
    what: str | Callable[[], str] = "this operation",
    headroom: float = 0.9,
    floor: int = 0,
) -> int:
    """Refuse work before allocating when ``n_bytes`` will not fit on ``device``.

    Parameters
    ----------
    n_bytes : int
        Bytes the work needs to allocate.
    device : {'cpu', 'cuda'}
        Where it would be allocated (a resolved device).
    what : str or callable
        Description used in the error message; a callable returning it is called only
        when the error is raised (a per-call check need not format a message that fits).
    headroom : float
        Fraction of the free memory that may be used.
    floor : int, default=0
        Work of at most ``floor`` bytes passes without asking for the free memory
        (see :data:`SMALL_WORK_BYTES`).

    Returns
    -------
    int
        ``n_bytes``, once it is known to fit (or to be at most ``floor``).

    Raises
    ------
    InsufficientMemoryError
        Naming the bytes needed and the bytes available (and, on the host, the
        address-space limit when that is what binds).
    """
    n_bytes = int(n_bytes)
    if n_bytes < 0:
        raise ValueError(f"n_bytes must be non-negative, got {n_bytes}.")
    if n_bytes <= floor:
        return n_bytes
    avail = free_memory(device, need=int(n_bytes / headroom) + 1 if headroom > 0 else None)
    if n_bytes > headroom * avail:
        why = _host_limit_note(avail) if device == "cpu" else ""
        what = what() if callable(what) else what
        raise InsufficientMemoryError(
            f"{what} needs {n_bytes} bytes ({_fmt_bytes(n_bytes)}) on {device}, but only "
            f"{avail} bytes ({_fmt_bytes(avail)}) are free{why}; use smaller batches or a smaller "
            f"configuration."
        )
    return n_bytes
