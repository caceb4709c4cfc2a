"""A cluster started from the command line, as on several hosts: ``dask scheduler`` and
``dask worker`` (``dask cuda worker`` on GPUs) as separate processes on localhost ports,
found through a scheduler file; one FlyNN fit and predict against it equal to in memory.

Skipped when the ``dask`` command is not installed. Every process started here is
stopped in a ``finally`` (terminated, then killed after a timeout).
"""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_digits

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")

STARTUP_S = 30  # seconds a scheduler or its workers may take to come up


def _dask_cli():
    """The ``dask`` command of this interpreter's environment (else on the PATH), or None."""
    here = Path(sys.executable).with_name("dask")
    return str(here) if here.exists() else shutil.which("dask")


def _stop(procs):
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)


def _run_cluster(tmp_path, worker_args, n_workers, check):
    """Start ``dask scheduler`` and ``dask <worker_args>``, connect, run ``check(client)``."""
    cli = _dask_cli()
    if cli is None:
        pytest.skip("the dask command line is not installed")
    sched_file = tmp_path / "scheduler.json"
    log = open(tmp_path / "cluster.log", "w")  # noqa: SIM115 (closed in the finally)
    env = dict(os.environ)
    procs = []
    try:
        common = ["--scheduler-file", str(sched_file), "--no-dashboard"]
        procs.append(
            subprocess.Popen(
                [cli, "scheduler", "--host", "127.0.0.1", "--port", "0", *common],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        )
        deadline = time.monotonic() + STARTUP_S
        while not sched_file.exists():
            if time.monotonic() > deadline or procs[0].poll() is not None:
                pytest.fail(
                    f"dask scheduler did not start:\n{(tmp_path / 'cluster.log').read_text()[-3000:]}"
                )
            time.sleep(0.1)
        procs.append(
            subprocess.Popen(
                [cli, *worker_args, "--host", "127.0.0.1", *common],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=tmp_path,
            )
        )
        with distributed.Client(scheduler_file=str(sched_file), timeout=STARTUP_S) as client:
            try:
                client.wait_for_workers(n_workers, timeout=STARTUP_S)
            except TimeoutError:
                pytest.fail(f"the workers did not start:\n{(tmp_path / 'cluster.log').read_text()[-3000:]}")
            check(client)
    finally:
        _stop(procs)
        log.close()


def _flynn_check(device, to_blocks=None):
    from sknn_gpu import FlyNNClassifier
    from sknn_gpu._backend import to_host

    def check(client):
        X, y = load_digits(return_X_y=True)
        X = X.astype(np.float32)
        dX = da.from_array(X, chunks=(300, -1))
        if to_blocks is not None:
            dX = dX.map_blocks(to_blocks)
        dy = da.from_array(y, chunks=(300,))
        params = dict(n_components=640, k=16, random_state=0, device=device)
        lazy = FlyNNClassifier(**params).fit(dX, dy)  # counted in the worker processes
        eager = FlyNNClassifier(**params).fit(X, y)
        np.testing.assert_array_equal(to_host(lazy.counts_), to_host(eager.counts_))
        got = client.compute(lazy.predict(dX)).result()
        np.testing.assert_array_equal(to_host(got), to_host(eager.predict(X)))
        assert len(client.scheduler_info()["workers"]) >= 2

    return check


def test_flynn_on_a_cluster_started_from_the_command_line(tmp_path):
    worker = ["worker", "--nworkers", "2", "--nthreads", "1", "--memory-limit", "0"]
    _run_cluster(tmp_path, worker, 2, _flynn_check("cpu"))


@pytest.mark.cuda
def test_flynn_on_dask_cuda_workers_started_from_the_command_line(tmp_path):
    """``dask cuda worker``: one worker per visible GPU, CuPy blocks."""
    pytest.importorskip("dask_cuda")
    import cupy

    n_gpus = cupy.cuda.runtime.getDeviceCount()
    if n_gpus < 2:
        pytest.skip("needs two GPUs (one dask-cuda worker each)")
    _run_cluster(tmp_path, ["cuda", "worker"], n_gpus, _flynn_check("cuda", cupy.asarray))
