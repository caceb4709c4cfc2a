"""Benchmark harness shared by every ``bench_*.py``.

* :func:`time_cpu` / :func:`time_gpu` return the **median** of repeated runs;
  GPU timings use CUDA events recorded on the current stream (kernel time),
  and :func:`time_call` measures wall-clock call time including the final sync.
* :class:`Table` collects rows of ours vs peers on the same data in one process
  and prints a markdown table with ratios to a chosen baseline and the physical floor.
* :func:`floor_seconds` turns bytes moved and operations into the lower bound set by
  the measured H100 ceilings (DESIGN.md).
* Peers: :func:`optional_import` / :func:`torch_cuda` import a peer only when present;
  rows added with ``peer=True`` get a "vs strongest peer" column (the fastest peer of the
  same ``exact`` class is the reference); :meth:`Table.not_installed` reports a missing
  peer as a row. :func:`time_torch` and :func:`torch_graph` time PyTorch peers.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a checkout with `python benchmarks/bench_x.py`
    sys.path.insert(0, str(ROOT))

#: Measured H100 ceilings (DESIGN.md): bytes/s, FLOP/s, seconds per Python launch.
H100 = {"copy_Bps": 3.0e12, "sgemm_flops": 51e12, "hgemm_flops": 770e12, "launch_s": 7e-6}


def floor_seconds(bytes_moved=0.0, flops=0.0, launches=0, peak_flops=H100["sgemm_flops"]):
    """Lower bound on GPU time: max(bytes / copy bandwidth, flops / peak) + launches * 7 us."""
    return max(bytes_moved / H100["copy_Bps"], flops / peak_flops) + launches * H100["launch_s"]


def _median(samples):
    return float(statistics.median(samples))


def time_cpu(fn, repeat=5, warmup=1, min_time=0.0):
    """Median wall time of ``fn()`` in seconds over ``repeat`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    samples = []
    t_start = time.perf_counter()
    while len(samples) < repeat or (time.perf_counter() - t_start) < min_time:
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
        if len(samples) >= 1000:
            break
    return _median(samples)


def time_gpu(fn, repeat=20, warmup=3):
    """Median GPU time of ``fn()`` in seconds, measured with CUDA events on the current stream."""
    import cupy

    for _ in range(warmup):
        fn()
    cupy.cuda.get_current_stream().synchronize()
    samples = []
    for _ in range(repeat):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
    return _median(samples)


def time_call(fn, repeat=20, warmup=3, device="cpu"):
    """Median wall-clock time of a call, including the final device synchronisation
    (``device="torch"``: ``torch.cuda.synchronize()``)."""
    if device == "torch":
        import torch

        def torch_synced():
            fn()
            torch.cuda.synchronize()

        return time_cpu(torch_synced, repeat=repeat, warmup=warmup)
    if device != "cuda":
        return time_cpu(fn, repeat=repeat, warmup=warmup)
    import cupy

    stream = cupy.cuda.get_current_stream()

    def synced():
        fn()
        stream.synchronize()

    return time_cpu(synced, repeat=repeat, warmup=warmup)


def optional_import(name):
    """The module ``name``, or None when it is not installed (report it, never drop the row)."""
    try:
        return importlib.import_module(name)
    except Exception:  # ImportError, or a broken install (missing shared library)
        return None


def torch_cuda():
    """PyTorch when it is installed and sees a GPU, else None."""
    torch = optional_import("torch")
    return torch if torch is not None and torch.cuda.is_available() else None


def time_torch(fn, repeat=20, warmup=3):
    """Median GPU time of ``fn()`` in seconds: ``torch.cuda.Event`` pairs on torch's current
    stream, synchronised before the first sample and after each."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3)
    torch.cuda.synchronize()
    return _median(samples)


def torch_graph(fn, warmup=3):
    """``fn`` captured once as a CUDA graph; returns the graph's ``replay``. Warm-up runs on a
    side stream before the capture, as the PyTorch docs ask; the tensors ``fn`` reads and
    writes are the graph's static inputs and outputs (update them in place)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return graph.replay


def local_cluster(gpu, n_workers, threads=1):
    """A Dask cluster of ``n_workers``: one worker per GPU (``dask_cuda.LocalCUDACluster``
    on GPUs 0..n-1, ``threads`` task threads each), or single-threaded CPU worker processes."""
    if gpu:
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError:  # the same layout without dask-cuda: one pinned worker process per GPU
            return pinned_gpu_cluster(n_workers, threads)
        return LocalCUDACluster(
            CUDA_VISIBLE_DEVICES=list(range(n_workers)), threads_per_worker=threads, dashboard_address=None
        )
    from distributed import LocalCluster

    return LocalCluster(processes=True, n_workers=n_workers, threads_per_worker=1, dashboard_address=None)


def pinned_gpu_cluster(n_workers, threads=1):
    """A local cluster of ``n_workers`` worker processes, worker ``i`` started with
    ``CUDA_VISIBLE_DEVICES=i`` (so it sees GPU ``i`` as its device 0), ``threads`` task
    threads each: what ``dask_cuda.LocalCUDACluster`` sets up, for hosts without dask-cuda.

    The workers get no host memory limit (``memory_limit=0``): Dask sizes a CuPy block by
    its bytes, so under the default limit (a share of the host's memory) a worker holding a
    few GB of device arrays would start spilling them through the host to disk, which is
    what dask-cuda's device-aware spilling exists to avoid (measured: a 2,000,000 x 784
    FlyHash transform on one worker took 21 s instead of 0.5 s)."""
    from distributed import Nanny, Scheduler, SpecCluster

    workers = {
        f"gpu-{i}": {
            "cls": Nanny,
            "options": {"nthreads": threads, "memory_limit": 0, "env": {"CUDA_VISIBLE_DEVICES": str(i)}},
        }
        for i in range(n_workers)
    }
    return SpecCluster(workers=workers, scheduler={"cls": Scheduler, "options": {"dashboard_address": ":0"}})


def persist_round_robin(client, *arrays):
    """Persist Dask arrays with row block ``i`` of each on worker ``i mod n``: the data sit
    evenly on the workers before the clock starts, as they would on a real cluster
    (the scheduler alone may pile a few large blocks onto one worker)."""
    import dask.array as da
    from distributed import wait

    workers = sorted(client.scheduler_info()["workers"])
    out = []
    for a in arrays:
        parts = [
            client.persist(a.blocks[i], workers=[workers[i % len(workers)]]) for i in range(a.numblocks[0])
        ]
        out.append(da.concatenate(parts, axis=0))
    wait(out)
    return out


def fmt_time(s):
    if s is None:
        return "—"
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


@dataclass
class Row:
    name: str
    device: str
    seconds: float | None
    quality: str = ""
    note: str = ""
    peer: bool = False
    exact: str | None = None


@dataclass
class Table:
    """Rows of one experiment (same data), printed as markdown with ratios to ``baseline``."""

    title: str
    baseline: str | None = None
    floor: float | None = None
    floor_note: str = ""
    rows: list = field(default_factory=list)

    def add(self, name, device, seconds, quality="", note="", peer=False, exact=None):
        """``peer=True`` marks a peer row; ``exact`` names its exactness class (e.g. "exact",
        "fp16"): a row's "vs strongest peer" ratio is taken to the fastest peer of its class
        (of all peers when the row has no class)."""
        self.rows.append(Row(name, device, seconds, quality, note, peer, exact))
        return seconds

    def not_installed(self, name, device, package, exact=None):
        """A peer row for a package missing on this machine (reported, never dropped)."""
        return self.add(name, device, None, note=f"{package} not installed", peer=True, exact=exact)

    def strongest_peer(self, exact=None):
        """The fastest measured peer row (of class ``exact`` when given), or None."""
        peers = [r for r in self.rows if r.peer and r.seconds and (exact is None or r.exact == exact)]
        return min(peers, key=lambda r: r.seconds) if peers else None

    def markdown(self):
        base = next((r.seconds for r in self.rows if r.name == self.baseline), None)
        with_peers = any(r.peer for r in self.rows)
        out = [f"### {self.title}", ""]
        out.append(
            "| implementation | device | median time | vs "
            + (self.baseline or "—")
            + (" | vs strongest peer" if with_peers else "")
            + " | quality | note |"
        )
        out.append("|---|---|---|---|---|---|" + ("---|" if with_peers else ""))
        for r in self.rows:
            ratio = "—"
            if base and r.seconds:
                ratio = f"{r.seconds / base:.2f}×"
            if with_peers:
                ref = self.strongest_peer(r.exact)
                ratio += f" | {r.seconds / ref.seconds:.2f}×" if ref and r.seconds else " | —"
            name = f"{r.name} (peer)" if r.peer else r.name
            out.append(f"| {name} | {r.device} | {fmt_time(r.seconds)} | {ratio} | {r.quality} | {r.note} |")
        if with_peers:
            out.append("")
            classes = {r.exact for r in self.rows if r.peer} | {r.exact for r in self.rows if r.exact is None}
            for cls in sorted(classes, key=str):
                ref = self.strongest_peer(cls)
                label = "Strongest peer" + (f" ({cls})" if cls is not None else "")
                got = f"{ref.name} ({ref.device}), {fmt_time(ref.seconds)}" if ref else "none measured here"
                out.append(f"{label}: {got}.")
            out.append("'vs strongest peer' = time / that peer's time (below 1: faster than it).")
        if self.floor is not None:
            out.append("")
            out.append(f"Physical floor: {fmt_time(self.floor)} {self.floor_note}".rstrip())
        return "\n".join(out) + "\n"

    def print(self):
        print(self.markdown(), flush=True)


def environment_header():
    """One markdown line: date, host, devices and library versions."""
    import numpy
    import sklearn

    from sknn_gpu._backend import cuda_available, get_cupy

    dev = "no GPU"
    if cuda_available():
        cupy = get_cupy()
        props = cupy.cuda.runtime.getDeviceProperties(0)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        dev = f"{name} (CuPy {cupy.__version__})"
    return (
        f"_{_dt.date.today().isoformat()} · {platform.node() or 'host'} · {dev} · "
        f"Python {platform.python_version()} · NumPy {numpy.__version__} · "
        f"scikit-learn {sklearn.__version__}_"
    )


def parse_args(description, argv=None):
    """Common CLI flags for benchmark scripts: ``--quick`` (CI-size) and ``--device``."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="small sizes (seconds on a CPU)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    return p.parse_args(argv)
