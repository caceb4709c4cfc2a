"""C kernels of the CPU engines: compiled on first use by the platform's C compiler, called with ctypes.

The CPU side of the one kernel loader. Sources live beside the CUDA ones as ``<family>.c``
(package data); :func:`cpu_library` ``(family)`` compiles a family once per machine, keeps
the shared library in a cache folder and returns it loaded, with the argument types of its
functions set. The package stays pure Python: nothing is compiled at install time, and where
no C compiler works (or ``SKNN_GPU_DISABLE_CPU_KERNELS=1`` is set) :func:`cpu_library`
returns None and the engines use their NumPy/SciPy code, which gives the same results up to
the order of floating-point sums.

* Compiler: ``$CC``, else the compiler Python was built with, else ``cc``; flags
  ``-O3 -fPIC -shared -std=c99 -march=native`` (without ``-march=native`` where the compiler
  refuses it). The library is built for the CPU it runs on, so its name carries a digest of
  the source, the compiler and its version, the flags, and the CPU's model and feature flags.
* Cache: ``$SKNN_GPU_CACHE_DIR``, else ``$XDG_CACHE_HOME/sknn_gpu``, else
  ``~/.cache/sknn_gpu``, else a folder of the user's own in the temporary directory; a
  library is written under a temporary name and renamed, so processes that compile the
  same family at once (test workers) never load a half-written file.
* :func:`cpu_kernels_status` says, in one line, which of the two happened (``sknn-gpu info``).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path

__all__ = ["cpu_library", "cpu_kernels_status", "DISABLE_ENV"]

#: Set to 1 to use the NumPy/SciPy code of the CPU engines instead of the compiled kernels.
DISABLE_ENV = "SKNN_GPU_DISABLE_CPU_KERNELS"

_P, _I64, _I32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32
#: Argument types of each family's functions (pointers as addresses, sizes as int64).
_SIGNATURES = {
    "sparsenet": {
        "spmm": [_I64, _P, _P, _P, _P, _I64, _P, _I64, _I64, _I32],
        "spmm_t": [_I64, _P, _P, _P, _P, _I64, _P, _I64, _I64, _I32],
        "sddmm": [_I64, _P, _P, _P, _I64, _P, _I64, _I64, _P],
        "gather_t": [_I64, _I64, _P, _I64, _P, _P, _I64],
    },
}
_BASE_FLAGS = ("-O3", "-fPIC", "-shared", "-std=c99")
_NATIVE = "-march=native"
_COMPILE_SECONDS = 120

_lock = threading.Lock()
_libraries: dict = {}  # family -> CDLL or None
_status: dict = {}  # family -> one line


def _disabled() -> bool:
    return os.environ.get(DISABLE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def _compiler() -> list[str] | None:
    """The compiler command as a list (``$CC``, Python's own compiler, then ``cc``), or None."""
    for text in (os.environ.get("CC"), sysconfig.get_config_var("CC"), "cc"):
        if not text:
            continue
        cmd = shlex.split(text)
        if cmd and shutil.which(cmd[0]):
            return cmd
    return None


def _cpu_identity() -> str:
    """What distinguishes this CPU for ``-march=native`` code: model and feature flags."""
    parts = [platform.machine(), platform.processor()]
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            seen = set()
            for line in f:
                key = line.split(":", 1)[0].strip()
                if key in ("model name", "flags", "Features", "CPU part") and key not in seen:
                    seen.add(key)
                    parts.append(line.strip())
    except OSError:
        pass
    return "\n".join(parts)


def _private_dir(path: Path) -> Path | None:
    """``path`` created if needed; None unless it and the folder holding it are this user's
    (a library is loaded from there: nobody else may be able to replace it) and writable."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        if hasattr(os, "getuid"):
            # this user's own: nobody else may write the folder, nobody outside the group its parent
            for folder, others in ((path, 0o022), (path.parent, 0o002)):
                st = folder.stat()
                if st.st_uid != os.getuid() or st.st_mode & others:
                    return None
        return path if os.access(path, os.W_OK) else None
    except OSError:
        return None


def _cache_dir() -> Path | None:
    env = os.environ.get("SKNN_GPU_CACHE_DIR")
    xdg = os.environ.get("XDG_CACHE_HOME")
    candidates = [Path(env)] if env else []
    candidates.append(Path(xdg) / "sknn_gpu" if xdg else Path.home() / ".cache" / "sknn_gpu")
    user = os.getuid() if hasattr(os, "getuid") else os.getpid()
    candidates.append(Path(tempfile.gettempdir()) / f"sknn_gpu-{user}")
    for path in candidates:
        found = _private_dir(path / "cpu_kernels")
        if found is not None:
            return found
    return None


def _run(cmd) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=_COMPILE_SECONDS, check=False)


def _build(family: str, source: Path) -> tuple[Path | None, str]:
    """Compile ``source`` (once per machine); ``(library path, status line)`` or ``(None, why)``."""
    cc = _compiler()
    if cc is None:
        return None, "no C compiler found ($CC, Python's compiler or cc)"
    folder = _cache_dir()
    if folder is None:
        return None, "no writable cache folder for the compiled kernels (set SKNN_GPU_CACHE_DIR)"
    try:
        version = _run([*cc, "--version"]).stdout.splitlines()[:1]
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"the C compiler {cc[0]!r} does not run ({exc})"
    text = source.read_bytes()
    errors = []
    for flags in (_BASE_FLAGS + (_NATIVE,), _BASE_FLAGS):
        h = hashlib.sha256()
        for part in (text, " ".join(cc).encode(), " ".join(version).encode(), " ".join(flags).encode()):
            h.update(part + b"\0")
        h.update(_cpu_identity().encode())
        path = folder / f"{family}-{h.hexdigest()[:20]}.so"
        how = f"compiled with {' '.join(version) or cc[0]} ({' '.join(flags)}): {path}"
        if path.is_file():
            return path, how
        fd, tmp = tempfile.mkstemp(suffix=".so", prefix=f".{family}-", dir=folder)
        os.close(fd)
        try:
            done = _run([*cc, *flags, str(source), "-o", tmp])
            if done.returncode == 0:
                os.replace(tmp, path)
                return path, how
            errors.append(done.stderr.strip().splitlines()[-1:] or [f"exit status {done.returncode}"])
        except (OSError, subprocess.SubprocessError) as exc:
            errors.append([str(exc)])
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return None, f"the C compiler {cc[0]!r} failed: {errors[-1][0]}"


def cpu_library(family: str):
    """The compiled C kernels of ``family`` (``ctypes.CDLL``), or None where they cannot be had.

    Compiled at most once per machine (then read from the cache folder) and loaded once per
    process; thread-safe. None when disabled by ``SKNN_GPU_DISABLE_CPU_KERNELS``, on Windows,
    or when no compiler works: callers then use their NumPy/SciPy code.
    """
    if family not in _SIGNATURES:
        raise ValueError(f"unknown CPU kernel family {family!r}; known: {sorted(_SIGNATURES)}.")
    if _disabled():
        _status[family] = f"disabled by {DISABLE_ENV}; NumPy/SciPy code used"
        return None
    with _lock:
        if family in _libraries:
            return _libraries[family]
        lib = None
        if sys.platform.startswith("win"):
            why = "not built on Windows; NumPy/SciPy code used"
        else:
            from . import kernel_dir

            path, why = _build(family, kernel_dir() / f"{family}.c")
            if path is not None:
                try:
                    lib = ctypes.CDLL(str(path))
                    for name, argtypes in _SIGNATURES[family].items():
                        fn = getattr(lib, name)
                        fn.argtypes, fn.restype = argtypes, None
                except (OSError, AttributeError) as exc:
                    lib, why = None, f"the compiled library does not load ({exc})"
            if lib is None:
                why += "; NumPy/SciPy code used"
        _libraries[family] = lib
        _status[family] = why
        return lib


def cpu_kernels_status(family: str = "sparsenet") -> str:
    """One line: how ``family``'s C kernels were obtained, or why the NumPy/SciPy code is used."""
    cpu_library(family)
    return _status[family]
