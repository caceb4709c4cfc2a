"""Dask arrays in, Dask arrays out: the one row-blockwise wrapper every estimator uses.

A method decorated with :func:`dask_rows` keeps its normal behaviour for NumPy/CuPy
input; given a Dask array chunked by rows (or, for images, along the batch axis) it
returns a lazy Dask array built with ``map_blocks``: each block runs the method on a
worker, on whatever array type the chunks hold (NumPy or CuPy, as on a
``dask_cuda.LocalCUDACluster``), and the result's ``meta`` has that same type. Empty
row blocks are skipped (they give empty results, never an error). A Dask array split
along the feature axis is refused with a message that says how to rechunk: each row
needs all its features at once.

Importing this module never imports Dask.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["is_dask_collection", "dask_rows", "check_row_chunks", "row_blocks", "tree_reduce", "SPLIT_EVERY"]

#: partial results combined per task of the reduction trees (:func:`tree_reduce`)
SPLIT_EVERY = 8


def is_dask_collection(x) -> bool:
    """True for a Dask array (never imports Dask)."""
    return type(x).__module__.split(".", 1)[0] == "dask" and hasattr(x, "map_blocks")


def check_row_chunks(X, what, sample_axes=1):
    """Refuse a Dask array chunked along anything but its first ``sample_axes`` axes."""
    split = [ax for ax in range(sample_axes, X.ndim) if X.numblocks[ax] != 1]
    if split:
        fix = ", ".join(f"{ax}: -1" for ax in range(sample_axes, X.ndim))
        raise ValueError(
            f"{what}: the Dask array is chunked along axis {split[0]} (chunks {X.chunks}); every "
            f"sample needs all its features in one block. Rechunk with X.rechunk({{{fix}}})."
        )


def _meta_module(X):
    meta = getattr(X, "_meta", None)
    if meta is not None and type(meta).__module__.split(".", 1)[0] == "cupy":
        import cupy

        return cupy
    return np


def _effective_output_type(est):
    """The output type a block must produce: the estimator's own, else the client's config."""
    from ._backend import get_config

    own = getattr(est, "output_type", None)
    return own if own is not None else get_config()["output_type"]


def _result_module(X, output_type):
    """NumPy or CuPy: the array module of the blocks the method returns."""
    if output_type == "numpy":
        return np
    if output_type == "cupy":
        import cupy

        return cupy
    return _meta_module(X)


def dask_rows(trailing, sample_axes=1):
    """Decorator: run ``method(self, X)`` block by block when ``X`` is a Dask array.

    Parameters
    ----------
    trailing : callable
        ``trailing(estimator, X) -> (shape, dtype)``: the shape of one sample's result
        (``()`` for one value per sample, ``(n,)`` for a row of ``n`` values, or the
        input's own trailing shape for image outputs) and its dtype.
    sample_axes : int
        How many leading axes index samples (1 for tables; a batch of images is one).
    """

    def decorate(method):
        @functools.wraps(method)
        def wrapper(self, X, *args, **kwargs):
            if type(X) is np.ndarray or not is_dask_collection(X):
                return method(self, X, *args, **kwargs)
            name = f"{type(self).__name__}.{method.__name__}"
            check_row_chunks(X, name, sample_axes)
            shape, dtype = trailing(self, X)
            shape, dtype = tuple(shape), np.dtype(dtype)
            out_type = _effective_output_type(self)
            xp = _result_module(X, out_type)
            import dask

            # the estimator is one graph key: pickled once and shipped once per worker,
            # not inside every block's task
            shared = dask.delayed(self, traverse=False)
            meth = method.__name__

            def block(b, est):
                if b.shape[0] == 0:
                    return xp.empty((0,) + shape, dtype=dtype)
                from ._backend import config_context

                with config_context(output_type=out_type):  # the client's setting, on the worker
                    return getattr(est, meth)(b, *args, **kwargs)

            lead = X.chunks[:sample_axes]
            meta = xp.empty((0,) * (sample_axes + len(shape)), dtype=dtype)
            chunks = lead + tuple((n,) for n in shape)
            n_in, n_out = X.ndim, sample_axes + len(shape)
            axes = {}
            if n_out < n_in:
                axes["drop_axis"] = tuple(range(n_out, n_in))
            elif n_out > n_in:
                axes["new_axis"] = tuple(range(n_in, n_out))
            return X.map_blocks(block, shared, dtype=dtype, chunks=chunks, meta=meta, **axes)

        return wrapper

    return decorate


def row_blocks(X, *others):
    """The delayed row blocks of the Dask array ``X``, those known to be empty left out.

    With ``others`` (Dask arrays chunked like ``X`` along the rows), tuples of the
    matching blocks ``(x_block, other_block, ...)``.
    """
    xs = X.to_delayed().ravel()
    rest = [o.to_delayed().ravel() for o in others]
    keep = [i for i, n in enumerate(X.chunks[0]) if n != 0]
    if not others:
        return [xs[i] for i in keep]
    return [(xs[i], *(r[i] for r in rest)) for i in keep]


def tree_reduce(parts, combine):
    """Combine delayed ``parts`` in a tree of fan-in :data:`SPLIT_EVERY`: one delayed result.

    ``combine(*parts)`` must be associative (counts summed, bit-packed memories OR-ed,
    label sets united), so the result does not depend on the tree's shape.
    """
    import dask

    while len(parts) > 1:
        parts = [
            dask.delayed(combine)(*parts[i : i + SPLIT_EVERY]) for i in range(0, len(parts), SPLIT_EVERY)
        ]
    return parts[0]
