"""Public device helpers: where sknn_gpu runs, what it may allocate, what it returns.

Everything here is a stable, documented name for a function of the one backend module
(``sknn_gpu._backend``)::

    >>> from sknn_gpu import device
    >>> device.resolve_device("cpu")
    'cpu'
    >>> device.cuda_available() in (True, False)
    True

* :func:`cuda_available`, :func:`cuda_unavailable_reason`, :func:`resolve_device` — what
  ``device='auto'`` will pick, and why CUDA is not usable when it is not.
* :func:`device_limits` — the current GPU's SM count, shared memory, registers, threads.
* :func:`to_device`, :func:`to_host` — move arrays (dense or sparse) between host and GPU.
* :func:`free_memory`, :func:`check_memory`, :class:`InsufficientMemoryError` — the size
  checks every estimator makes before allocating.
* :func:`config_context`, :func:`set_config`, :func:`get_config` — ``output_type``.
* :func:`synchronize` — wait for queued GPU work (timing).
"""

from ._backend import (
    OUTPUT_TYPES,
    DeviceLimits,
    InsufficientMemoryError,
    check_memory,
    config_context,
    cuda_available,
    cuda_unavailable_reason,
    device_limits,
    free_memory,
    get_config,
    resolve_device,
    set_config,
    synchronize,
    to_device,
    to_host,
)

__all__ = [
    "OUTPUT_TYPES",
    "DeviceLimits",
    "InsufficientMemoryError",
    "check_memory",
    "config_context",
    "cuda_available",
    "cuda_unavailable_reason",
    "device_limits",
    "free_memory",
    "get_config",
    "resolve_device",
    "set_config",
    "synchronize",
    "to_device",
    "to_host",
]
