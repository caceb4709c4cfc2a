"""The paper reproduction scripts (``benchmarks/reproduce``): every ``repro_*.py --smoke`` (the
``--quick`` code on the smallest inputs) runs on the CPU and prints ours-vs-paper tables; the shared
helpers and ``run_all.py`` behave.

The scripts run once per session, two at a time (each in its own process), and the per-script
tests read their captured output. No subprocess has a tight time limit: on a busy machine the runs
are slow, not wrong (the limit only ends a hung script).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: seconds before a hung subprocess is killed; far above a run on a loaded 2-core machine
HUNG = 1800
REPRO = ROOT / "benchmarks" / "reproduce"
SCRIPTS = sorted(REPRO.glob("repro_*.py"))
sys.path.insert(0, str(REPRO))
import _common  # noqa: E402

try:
    import matplotlib  # noqa: F401

    HAS_MPL = True
except ImportError:  # pragma: no cover
    HAS_MPL = False


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    # two scripts share the two cores: keep each one's BLAS/OpenMP pools at one thread
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return env


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{script stem: (returncode, stdout, stderr, plots dir)} of every script run with --smoke on CPU."""
    base = tmp_path_factory.mktemp("repro")

    def run(script):
        plots = base / script.stem
        proc = subprocess.run(
            [sys.executable, str(script), "--smoke", "--device", "cpu", "--plots", str(plots)],
            cwd=ROOT,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=HUNG,
        )
        return script.stem, (proc.returncode, proc.stdout, proc.stderr, plots)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(run, SCRIPTS))


def tables(markdown):
    """Header rows (lists of cell names) and data-row counts of every markdown table."""
    found, lines = [], markdown.splitlines()
    for i, line in enumerate(lines[:-1]):
        if line.startswith("|") and re.match(r"^\|(---\|)+$", lines[i + 1].strip()):
            n_rows = 0
            for nxt in lines[i + 2 :]:
                if not nxt.startswith("|"):
                    break
                n_rows += 1
            found.append(([c.strip() for c in line.strip().strip("|").split("|")], n_rows))
    return found


def test_scripts_are_discovered():
    # the issue asks for one script per seed paper (GBNN, FlyHash, FlyNN, DT-CNN, sparse nets, MLP)
    assert {s.stem for s in SCRIPTS} >= {"repro_gbnn", "repro_flyhash", "repro_flynn"}
    assert len(SCRIPTS) >= 3


@pytest.mark.parametrize("script", [s.stem for s in SCRIPTS])
def test_quick_run_prints_ours_vs_paper_tables(runs, script):
    rc, out, err, plots = runs[script]
    assert rc == 0, f"{script} --smoke failed:\n{err[-3000:]}"
    assert re.search(r"^## \S", out, flags=re.M), "no '## <paper title>' heading"
    assert "Run: smoke" in out, "the script did not take --smoke"
    found = tables(out)
    assert found, "no markdown table printed"
    with_paper = [(cols, n) for cols, n in found if any("paper" in c.lower() for c in cols)]
    assert with_paper, f"no table with a paper column; headers: {[c for c, _ in found]}"
    for cols, n_rows in with_paper:
        assert any("ours" in c.lower() for c in cols), f"table without an 'ours' column: {cols}"
        assert n_rows >= 1, f"table {cols} has no rows"
    assert "Traceback" not in out


@pytest.mark.skipif(not HAS_MPL, reason="matplotlib not installed")
@pytest.mark.parametrize("script", [s.stem for s in SCRIPTS])
def test_quick_run_saves_png_plots(runs, script):
    rc, _, err, plots = runs[script]
    assert rc == 0, err[-2000:]
    pngs = sorted(Path(plots).glob("*.png"))
    assert pngs, f"{script} saved no plot into --plots"
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{png.name} is not a PNG"


# ---------------------------------------------------------------- _common helpers
def test_paper_table_formats_cells_and_adds_differs_column():
    md = _common.paper_table(
        "t",
        [{"what": "a|b", "ours": 1.234567, "paper": None}, ("c", 2e-6, 3)],
        ["what", "ours", "paper"],
    )
    lines = md.splitlines()
    assert lines[0] == "### t"
    assert lines[2] == "| what | ours | paper | differs because |"
    assert lines[4] == "| a\\|b | 1.235 | — |  |"  # pipe escaped, 4 significant digits, None as a dash
    assert lines[5] == "| c | 2.000e-06 | 3 |  |"  # short sequence row padded


def test_paper_table_refuses_tables_without_ours_or_paper():
    with pytest.raises(ValueError, match="paper"):
        _common.paper_table("t", [], ["ours", "theirs"])
    with pytest.raises(ValueError, match="ours"):
        _common.paper_table("t", [], ["mine", "paper"])
    with pytest.raises(ValueError, match="not in"):
        _common.paper_table("t", [{"ours": 1, "bogus": 2}], ["ours", "paper"])
    with pytest.raises(ValueError, match="cells"):
        _common.paper_table("t", [(1, 2, 3, 4)], ["ours", "paper"])


def test_parse_args_and_save_plot(tmp_path):
    args = _common.parse_args("d", ["--quick", "--plots", str(tmp_path / "p"), "--device", "cpu"])
    assert args.quick and args.resolved_device == "cpu" and args.gpu is False
    assert not args.smoke and _common.sized(args, "full", "quick", "smoke") == "quick"
    smoke = _common.parse_args("d", ["--smoke"])
    assert smoke.smoke and smoke.quick  # --smoke implies --quick
    assert _common.sized(smoke, "full", "quick", "smoke") == "smoke"
    assert _common.sized(smoke, "full", "quick") == "quick"  # no smoke size: the quick one
    assert _common.sized(_common.parse_args("d", []), "full", "quick", "smoke") == "full"
    assert args.plots == tmp_path / "p"
    assert _common.new_figure(_common.parse_args("d", [])) == (None, None)  # no --plots: no figure
    assert _common.save_plot(None, tmp_path, "x") is None
    if HAS_MPL:
        fig, ax = _common.new_figure(args)
        ax.plot([0, 1], [1, 0])
        path = _common.save_plot(fig, args.plots, "line")
        assert path == tmp_path / "p" / "line.png" and path.read_bytes()[:4] == b"\x89PNG"


def test_plots_are_skipped_with_a_note_without_matplotlib(monkeypatch, capsys, tmp_path):
    # the accelerator machine may lack matplotlib: scripts must still run and say so
    monkeypatch.setattr(_common, "_pyplot", lambda: None)
    monkeypatch.setattr(_common.new_figure, "_warned", False, raising=False)
    args = _common.parse_args("d", ["--plots", str(tmp_path)])
    assert _common.new_figure(args) == (None, None)
    assert _common.new_figure(args) == (None, None)
    assert capsys.readouterr().out.count("plots skipped") == 1
    assert not list(tmp_path.iterdir())


def test_parse_args_refuses_cuda_without_gpu():
    from sknn_gpu._backend import cuda_available

    if cuda_available():
        pytest.skip("a GPU is present")
    with pytest.raises(SystemExit) as exc:
        _common.parse_args("d", ["--device", "cuda"])
    assert exc.value.code == 2


# ---------------------------------------------------------------- run_all
def test_run_all_concatenates_and_fails_when_one_script_fails(tmp_path):
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    ok = textwrap.dedent(
        """
        import sys
        print("## ok paper")
        print("| ours | paper |")
        print("|---|---|")
        print("| 1 | 2 |")
        print("flags:", " ".join(sys.argv[1:]))
        """
    )
    (scripts / "repro_a_ok.py").write_text(ok)
    (scripts / "repro_b_bad.py").write_text("import sys\nprint('## bad')\nsys.exit('boom in b')\n")
    (scripts / "not_a_repro.py").write_text("raise SystemExit(3)\n")
    out = tmp_path / "report.md"
    cmd = [
        sys.executable,
        str(REPRO / "run_all.py"),
        "--quick",
        "--plots",
        str(tmp_path / "plots"),
        "--out",
        str(out),
        "--scripts-dir",
        str(scripts),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=HUNG)
    assert proc.returncode == 1
    assert "repro_b_bad.py" in proc.stderr
    report = out.read_text()
    assert "## ok paper" in report and "## bad" in report and "not_a_repro" not in report
    assert "boom in b" in report  # the failing script's error is kept in the report
    assert "| repro_a_ok.py | ok |" in report and "| repro_b_bad.py | FAILED (1) |" in report
    assert "flags: --quick --device auto --plots" in report  # flags passed through
    # only the passing script: exit 0
    proc = subprocess.run(
        cmd + ["--only", "ok"], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=HUNG
    )
    assert proc.returncode == 0, proc.stderr
