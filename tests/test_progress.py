"""Verbosity and progress: family loggers, per-step lines, the plain terminal fallback."""

import logging
import sys

import pytest

from sknn_gpu._progress import Progress, family_logger


def test_family_logger_follows_the_package_layout():
    assert family_logger("sknn_gpu.fly._flynn").name == "sknn_gpu.fly"
    assert family_logger("sknn_gpu.cli").name == "sknn_gpu.cli"
    assert family_logger("elsewhere").name == "sknn_gpu"

    class Fake:
        pass

    Fake.__module__ = "sknn_gpu.memory._gbnn"
    assert family_logger(Fake()).name == "sknn_gpu.memory"
    assert family_logger(Fake).name == "sknn_gpu.memory"


def test_verbose_zero_is_silent(caplog):
    with caplog.at_level(logging.DEBUG, logger="sknn_gpu"):
        with Progress("sknn_gpu.fly.x", "fit", total=3, verbose=0) as p:
            for _ in range(3):
                p.update(loss=1.0)
    assert p.n == 3
    assert caplog.records == []


@pytest.mark.parametrize("verbose,lines", [(1, 1), (2, 4)])
def test_verbose_levels_log_summary_and_steps(caplog, verbose, lines):
    with caplog.at_level(logging.INFO, logger="sknn_gpu"):
        with Progress("sknn_gpu.sparse._x", "fit: epochs", total=3, verbose=verbose, unit="epoch") as p:
            for i in range(3):
                p.update(loss=0.5 / (i + 1))
    msgs = [r.getMessage() for r in caplog.records if r.name == "sknn_gpu.sparse"]
    assert len(msgs) == lines
    assert msgs[-1].startswith("fit: epochs: 3 epoch in ")
    if verbose >= 2:
        assert msgs[0] == "fit: epochs 1/3: loss=0.5"


def test_plain_progress_line_on_a_terminal_without_tqdm(monkeypatch, capsys):
    import sknn_gpu._progress as prog

    monkeypatch.setattr(prog, "_tty", lambda: True)
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    p = Progress("sknn_gpu.halftone.x", "halftone: sweeps", total=2, verbose=1, unit="sweep")
    p.update()
    p.update()
    p.close()
    err = capsys.readouterr().err
    assert "\rhalftone: sweeps: 2/2 sweep" in err
