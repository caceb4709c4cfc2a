"""``scripts/newcomer.py`` (``make newcomer``): a clean clone of HEAD, a fresh virtual
environment, the README's install and every example at its small size.

The full journey runs here with ``--offline``: the wheel is built from the clone and installed
into the new environment with nothing downloaded, its dependencies seen from this test
environment (which holds the examples extra). The README's own command,
``pip install ".[examples]"``, downloads the dependencies from the package index; its test
runs only when ``SKNN_GPU_TEST_NETWORK=1`` is set.

The fast tests below prove that the script fails when it should: an example that exits
non-zero, saves no figure, saves an empty one or writes outside its folder, and an install
that breaks.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _scripts import newcomer

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "newcomer.py"

needs_git_checkout = pytest.mark.skipif(
    not newcomer.is_git_checkout(ROOT),
    reason="the newcomer's copy is a git clone of HEAD: needs git and a checkout with a commit",
)
needs_network = pytest.mark.skipif(
    os.environ.get("SKNN_GPU_TEST_NETWORK", "") in ("", "0"),
    reason='pip install ".[examples]" downloads the dependencies from the package index; '
    "set SKNN_GPU_TEST_NETWORK=1 to run it (the offline journey runs without it)",
)


def _cli(*args, timeout=1800):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=newcomer.clean_env(),
        timeout=timeout,
    )


@pytest.mark.slow
@needs_git_checkout
def test_offline_journey_installs_and_runs_every_example(tmp_path):
    workdir = tmp_path / "newcomer"
    res = _cli("--offline", "--jobs", "2", "--workdir", workdir)
    shown = f"{res.stdout[-6000:]}\n{res.stderr[-6000:]}"
    assert res.returncode == 0, shown
    clone_examples = newcomer.example_scripts(workdir / "sknn-gpu" / "examples")
    assert len(clone_examples) >= 10 and {p.name for p in clone_examples} >= {"quickstart.py"}
    for script in clone_examples:
        line = next((s for s in res.stdout.splitlines() if script.name in s.split()), "")
        assert line.split()[:1] == ["ok"], f"{script.name}: {line!r}\n{shown}"
        assert sorted((workdir / "runs" / script.stem / "figures").glob(f"{script.stem}_*.png")), script.name
    n = len(clone_examples)
    assert f"{n} of {n} examples ran and saved their figures" in res.stdout
    # the examples imported the wheel installed in the new environment, not this checkout
    site = newcomer.site_dir(workdir / "venv" / "bin" / "python")
    assert f"from {site / 'sknn_gpu' / '__init__.py'}" in res.stdout, shown
    assert (workdir / "wheelhouse").is_dir() and not (workdir / "venv" / "bin" / "pip").exists()


@pytest.mark.slow
@needs_network
@needs_git_checkout
def test_readme_install_from_the_index_runs_every_example(tmp_path):
    workdir = tmp_path / "newcomer"
    res = _cli("--jobs", "2", "--workdir", workdir)
    shown = f"{res.stdout[-6000:]}\n{res.stderr[-6000:]}"
    assert res.returncode == 0, shown
    assert "pip install '.[examples]'" in res.stdout
    n = len(newcomer.example_scripts(workdir / "sknn-gpu" / "examples"))
    assert n >= 10 and f"{n} of {n} examples ran and saved their figures" in res.stdout
    site = newcomer.site_dir(workdir / "venv" / "bin" / "python")
    assert f"from {site / 'sknn_gpu' / '__init__.py'}" in res.stdout, shown


# ------------------------------------------------------------------- failing as it should

FIGURE = """
import os, sys
from pathlib import Path
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
out = Path(os.environ["SKNN_GPU_EXAMPLES_OUTPUT"])
out.mkdir(parents=True, exist_ok=True)
assert os.environ["SKNN_GPU_EXAMPLES_SMALL"] == "1"
fig, ax = plt.subplots()
ax.plot(range(50), [i * i for i in range(50)])
fig.savefig(out / f"{Path(sys.argv[0]).stem}_1.png", dpi=100)
"""

EXAMPLES = {
    "good": FIGURE + "print(f'saved in {out}')\n",
    "exits_1": FIGURE + "raise SystemExit(1)\n",
    "no_figure": "import os\nprint(os.environ['SKNN_GPU_EXAMPLES_OUTPUT'])\n",
    "empty_png": (
        "import os, pathlib\nout = pathlib.Path(os.environ['SKNN_GPU_EXAMPLES_OUTPUT'])\n"
        "out.mkdir()\n(out / 'empty_png_1.png').write_bytes(b'\\x89PNG\\r\\n\\x1a\\n')\nprint(out)\n"
    ),
    "writes_elsewhere": FIGURE + "Path('stray.txt').write_text('x')\nprint(out)\n",
    "folder_not_last": FIGURE + "print(out)\nprint('done')\n",
}


@pytest.fixture(scope="module")
def example_results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("examples")
    for name, code in EXAMPLES.items():
        (folder / f"{name}.py").write_text(code, encoding="utf-8")
    (folder / "_helper.py").write_text("raise SystemExit('a helper is not an example')\n", encoding="utf-8")
    scripts = newcomer.example_scripts(folder)
    assert [p.stem for p in scripts] == sorted(EXAMPLES)
    results = newcomer.run_examples(
        Path(sys.executable), scripts, folder / "runs", jobs=2, log=lambda _: None
    )
    return {r.script.stem: r for r in results}


def test_a_good_example_passes(example_results):
    good = example_results["good"]
    assert good.error == "" and [p.name for p in good.figures] == ["good_1.png"]


@pytest.mark.parametrize(
    "name, says",
    [
        ("exits_1", "exited 1"),
        ("no_figure", "saved no figure"),
        ("empty_png", "is not a drawn PNG figure"),
        ("writes_elsewhere", "wrote outside its figure folder: ['stray.txt']"),
        ("folder_not_last", "did not print the figure folder"),
    ],
)
def test_a_failing_example_is_reported(example_results, name, says):
    assert says in example_results[name].error


def test_a_failed_example_fails_the_command(monkeypatch, tmp_path, capsys):
    bad = newcomer.ExampleResult(Path("plot_x.py"), 1.0, error="plot_x.py exited 1:\nTraceback")
    good = newcomer.ExampleResult(Path("plot_y.py"), 1.0, figures=[Path("plot_y_1.png")])
    report = newcomer.Report(tmp_path, Path(sys.executable), {}, [bad, good])
    monkeypatch.setattr(newcomer, "newcomer", lambda *a, **k: report)
    monkeypatch.setattr(newcomer, "is_git_checkout", lambda path: True)
    assert newcomer.main(["--repo", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert "1 of 2 examples ran" in out and "plot_x.py exited 1" in err


def _git_repo(path, files):
    path.mkdir()
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(textwrap.dedent(text), encoding="utf-8")
    git = ["git", "-C", str(path), "-c", "user.name=newcomer", "-c", "user.email=newcomer@example.org"]
    newcomer.run([*git[:3], "init", "--quiet"])
    newcomer.run([*git, "add", "."])
    newcomer.run([*git, "commit", "--quiet", "-m", "start"])
    return path


@pytest.mark.skipif(not newcomer.shutil.which("git"), reason="needs git")
def test_a_broken_install_fails_the_command(tmp_path):
    repo = _git_repo(
        tmp_path / "repo", {"pyproject.toml": "[project\nname = 'broken'\n", "examples/a.py": ""}
    )
    res = _cli("--offline", "--repo", repo, "--workdir", tmp_path / "work", timeout=300)
    assert res.returncode == 1
    assert "FAILED:" in res.stderr and "pip wheel" in res.stderr
    assert "examples at the small size" not in res.stdout  # no example ran after the failed install


def test_only_committed_work_is_cloned(tmp_path):
    if not newcomer.shutil.which("git"):
        pytest.skip("needs git")
    repo = _git_repo(tmp_path / "repo", {"examples/committed.py": "print('hi')\n"})
    (repo / "examples" / "uncommitted.py").write_text("print('not yet')\n", encoding="utf-8")
    clone = newcomer.clone_head(repo, tmp_path / "clone")
    assert [p.name for p in newcomer.example_scripts(clone / "examples")] == ["committed.py"]


def test_a_folder_without_git_is_refused(tmp_path):
    res = _cli("--repo", tmp_path, timeout=60)
    assert res.returncode == 2 and "not a git checkout" in res.stderr
