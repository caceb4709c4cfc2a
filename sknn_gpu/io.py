"""Reading ``.npy`` files onto the host or straight onto a GPU, alone or as Dask shards.

:func:`load_npy` reads one file. On the GPU it never builds the array in ordinary host
memory first: the file is read in slices into two pinned host buffers that each thread
keeps for its device, and each slice is copied to the device asynchronously while the
next one is read. ``numpy.load`` followed by ``cupy.asarray`` instead reads into freshly
allocated pageable memory (every page faulted in on first touch), then copies it once
more through the driver's own staging: two passes over host memory instead of one.

:func:`read_npy_shards` makes a lazy Dask array of many ``.npy`` files, one block per
file, each read by the worker that computes it (onto its GPU with ``device='cuda'``).
The shapes and dtypes come from the files' headers, read here without the data.

Both read the format's header themselves and refuse what ``np.load(allow_pickle=False)``
refuses (object arrays): loading a file runs no code. Importing this module imports
neither CuPy nor Dask.

Examples
--------
>>> import tempfile, pathlib, numpy as np
>>> from sknn_gpu.io import load_npy
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> np.save(folder / "X.npy", np.arange(6, dtype=np.float32).reshape(3, 2))
>>> load_npy(folder / "X.npy", device="cpu")
array([[0., 1.],
       [2., 3.],
       [4., 5.]], dtype=float32)
"""

from __future__ import annotations

import glob
import os
import threading

import numpy as np

from ._backend import SMALL_WORK_BYTES, check_memory, get_cupy, resolve_device

__all__ = ["load_npy", "npy_header", "read_npy_shards", "STAGING_BYTES"]

#: Bytes per pinned staging buffer (two per thread and device): large enough that one
#: ``read`` and one copy call per slice cost nothing against moving the slice, small
#: enough that a worker with several threads holds little pinned memory.
STAGING_BYTES = 32 << 20

_local = threading.local()


def npy_header(path) -> tuple[tuple[int, ...], np.dtype, bool, int]:
    """Shape, dtype, Fortran order and data offset of the ``.npy`` file ``path``.

    Reads only the header (a few hundred bytes).

    Raises
    ------
    ValueError
        When ``path`` is not a ``.npy`` file of a version NumPy writes, holds an object
        array (which only ``np.load(allow_pickle=True)`` reads, running code), or is shorter
        than its header says.
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                raise ValueError(f"format version {version} (this reader knows 1.0 and 2.0)")
        except ValueError as exc:
            raise ValueError(f"{path!r} is not a .npy file this reader can load: {exc}") from None
        offset = f.tell()
        size = os.fstat(f.fileno()).st_size
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        raise ValueError(
            f"{path!r} holds an array of dtype {dtype}, with Python objects: reading it would unpickle "
            "them (np.load(allow_pickle=True) runs code from the file); only plain arrays are read."
        )
    shape = tuple(int(s) for s in shape)
    need = offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if size < need:
        raise ValueError(
            f"{path!r} is truncated: its header describes {shape} of {dtype} ({need - offset} bytes of "
            f"data), but the file holds only {size - offset} bytes after the header."
        )
    return shape, dtype, bool(fortran), offset


def _read_exactly(f, view, path):
    """Fill the writable buffer ``view`` from ``f`` (a raw file: reads may come back short)."""
    done, n = 0, len(view)
    while done < n:
        got = f.readinto(view[done:])
        if not got:
            raise ValueError(f"{path!r} ended {n - done} bytes early while being read.")
        done += got


def _staging(cp):
    """This thread's two pinned buffers and their events for the current device (made once)."""
    device = cp.cuda.runtime.getDevice()
    per_device = getattr(_local, "staging", None)
    if per_device is None:
        per_device = _local.staging = {}
    bufs = per_device.get(device)
    if bufs is None or bufs[0][0].nbytes != STAGING_BYTES:
        bufs = []
        for _ in range(2):
            mem = cp.cuda.alloc_pinned_memory(STAGING_BYTES)
            host = np.frombuffer(mem, dtype=np.uint8, count=STAGING_BYTES)
            bufs.append((host, mem, cp.cuda.Event(block=False, disable_timing=True)))
        per_device[device] = bufs
    return bufs


def _load_to_device(path, shape, dtype, fortran, offset):
    cp = get_cupy()
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    check_memory(nbytes, "cuda", what=f"reading {path!r}", floor=SMALL_WORK_BYTES)
    out = cp.empty(shape, dtype=dtype, order="F" if fortran else "C")
    if nbytes == 0:
        return out
    bufs = _staging(cp)
    stream = cp.cuda.get_current_stream()
    H2D = cp.cuda.runtime.memcpyHostToDevice
    with open(path, "rb", buffering=0) as f:
        f.seek(offset)
        view_of = [memoryview(h) for h, _, _ in bufs]
        done, i = 0, 0
        while done < nbytes:
            host, mem, event = bufs[i & 1]
            event.synchronize()  # the copy that last read this buffer has finished
            n = min(STAGING_BYTES, nbytes - done)
            _read_exactly(f, view_of[i & 1][:n], path)
            cp.cuda.runtime.memcpyAsync(out.data.ptr + done, mem.ptr, n, H2D, stream.ptr)
            event.record(stream)
            done += n
            i += 1
    stream.synchronize()
    return out


def load_npy(path, device="cpu"):
    """Read the ``.npy`` file ``path`` into a NumPy array or straight into GPU memory.

    Parameters
    ----------
    path : str or path-like
        A file written by :func:`numpy.save` (format 1.0 or 2.0).
    device : {'cpu', 'cuda', 'auto'}, default='cpu'
        ``'cpu'``: a NumPy array (``np.load(path, allow_pickle=False)``). ``'cuda'``: a
        CuPy array on the current device, read through pinned staging buffers without a
        host copy of the whole array; ``'auto'``: the GPU when one is usable.

    Returns
    -------
    numpy.ndarray or cupy.ndarray
        The array, with the file's shape, dtype and memory order (a Fortran-ordered file
        gives a Fortran-ordered array), except that a file stored in the other byte order
        is converted to native order (on the GPU after reading it on the host: CuPy has no
        non-native dtypes).

    Raises
    ------
    ValueError
        For a file that is not a ``.npy`` file, holds Python objects or is truncated.
    TypeError
        With ``device='cuda'``, for a dtype CuPy cannot hold (strings, records).
    InsufficientMemoryError
        When the array does not fit in the device's free memory (checked before
        allocating).

    Examples
    --------
    >>> import tempfile, pathlib, numpy as np
    >>> from sknn_gpu.io import load_npy
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "y.npy"
    >>> np.save(path, np.array([3, 1, 2]))
    >>> load_npy(path).tolist()
    [3, 1, 2]
    """
    device = resolve_device(device)
    shape, dtype, fortran, offset = npy_header(path)
    if device == "cuda" and dtype.kind not in "biufc":
        raise TypeError(
            f"{os.fspath(path)!r} holds dtype {dtype}, which has no CuPy counterpart (CuPy holds booleans "
            "and numbers); read it with device='cpu'."
        )
    if device == "cpu" or not dtype.isnative:
        a = np.load(path, allow_pickle=False)
        if not a.dtype.isnative:
            a = a.astype(a.dtype.newbyteorder("="))
        return a if device == "cpu" else get_cupy().asarray(a)
    return _load_to_device(os.fspath(path), shape, dtype, fortran, offset)


def _paths(paths):
    if isinstance(paths, (str, os.PathLike)):
        pattern = os.fspath(paths)
        found = sorted(glob.glob(pattern))
        if not found:
            raise FileNotFoundError(f"no file matches {pattern!r}.")
        return found
    found = [os.fspath(p) for p in paths]
    if not found:
        raise ValueError("read_npy_shards needs at least one file; got an empty list.")
    return found


def read_npy_shards(paths, device="cpu"):
    """A lazy Dask array of ``.npy`` files stacked along their first axis, one block per file
    (an empty file adds none).

    Every block is read by the worker that computes it, with :func:`load_npy` (onto the
    worker's GPU with ``device='cuda'``, as on a ``dask_cuda.LocalCUDACluster``): nothing
    is read here but the files' headers, and the data never pass through the client.
    Each file is one block, so write shards of about the block size the estimators use
    (:data:`sknn_gpu._dask.BLOCK_BYTES`: 1 GiB on GPUs, 64 MiB on CPUs); smaller
    adjacent blocks are merged by the estimators, larger ones are computed whole.

    Parameters
    ----------
    paths : str, path-like or sequence of them
        The files, in order; a single string is a glob pattern (``"shards/X_*.npy"``),
        expanded and sorted by name.
    device : {'cpu', 'cuda', 'auto'}, default='cpu'
        Where the workers put the blocks: NumPy (``'cpu'``) or CuPy (``'cuda'``) blocks.
        ``'auto'`` is resolved here, where the array is built: the GPU when this process
        can use one.

    Returns
    -------
    dask.array.Array
        Of shape ``(sum of the files' first dimensions, *rest)``.

    Raises
    ------
    ValueError
        When a file is not a plain ``.npy`` array, or the files disagree on dtype or on
        the shape after the first axis (the message names the first file that differs).
    FileNotFoundError
        When a glob pattern matches nothing.

    Examples
    --------
    >>> import tempfile, pathlib, numpy as np
    >>> from sknn_gpu.io import read_npy_shards
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> for i in range(3):
    ...     np.save(folder / f"X_{i:03d}.npy", np.full((4, 2), i, dtype=np.float32))
    >>> X = read_npy_shards(str(folder / "X_*.npy"))
    >>> X.shape, X.numblocks
    ((12, 2), (3, 1))
    >>> float(X.sum().compute(scheduler="synchronous"))
    24.0
    """
    try:
        import dask
        import dask.array as da
    except ImportError as exc:  # pragma: no cover - the dask extra is installed in CI
        raise ImportError(
            'read_npy_shards needs Dask: install the dask extra (pip install ".[dask]" from the source tree)'
        ) from exc
    device = resolve_device(device)
    files = _paths(paths)
    headers = [npy_header(p) for p in files]
    shape0, dtype0 = headers[0][0], headers[0][1]
    if len(shape0) == 0:
        raise ValueError(f"{files[0]!r} holds a 0-d array: shards need a first axis to stack along.")
    for p, (shape, dtype, _, _) in zip(files, headers, strict=True):
        if dtype != dtype0 or len(shape) != len(shape0) or shape[1:] != shape0[1:]:
            raise ValueError(
                f"{p!r} holds {shape} of {dtype}, but {files[0]!r} holds {shape0} of {dtype0}: the shards "
                "must share the dtype, the number of dimensions and every dimension after the first."
            )
    native = dtype0.newbyteorder("=")
    meta = (get_cupy() if device == "cuda" else np).empty((0,) + shape0[1:], dtype=native)
    blocks = [
        da.from_delayed(dask.delayed(load_npy)(p, device), shape=shape, dtype=native, meta=meta)
        for p, (shape, _, _, _) in zip(files, headers, strict=True)
    ]
    return da.concatenate(blocks, axis=0)
