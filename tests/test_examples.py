"""Every script in ``examples/`` runs as a user runs it (``python examples/<name>.py``, as
``make examples`` does) at the small size, exits 0 and saves its figures as PNG files in
the folder it is given; a missing optional package is one line naming the extra.

The test extra holds everything the examples extra does, so every example runs here.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from _scripts import newcomer

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
SCRIPTS = newcomer.example_scripts(EXAMPLES)
#: no window opens and no source tree is on PYTHONPATH, whatever the machine has
_env = newcomer.clean_env


def _requirements(extra):
    """The distribution names (lower case, without versions) of a pyproject extra."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = set()
    for req in project["optional-dependencies"][extra]:
        for sep in "<>=!~; ":
            req = req.split(sep)[0]
        names.add(req.lower())
    return names


def test_the_test_extra_holds_the_examples_extra():
    examples = _requirements("examples")
    assert {"matplotlib", "faiss-cpu", "dask[distributed]"} <= examples
    assert examples <= _requirements("test")


def test_every_example_is_listed():
    assert len(SCRIPTS) >= 10
    assert {"quickstart.py", "plot_halftone.py", "federated_flynn.py"} <= {p.name for p in SCRIPTS}


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_example_runs_as_a_script_and_saves_its_figures(script, tmp_path):
    # from an empty folder of its own: it exits 0, saves drawn PNG figures named after itself
    # in the folder it is given, prints that folder last and writes nothing else
    res = newcomer.run_example(Path(sys.executable), script, tmp_path)
    assert res.error == "", res.error
    assert res.figures and all(p.parent == tmp_path / "figures" for p in res.figures)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["figures"]


def test_a_missing_package_is_one_line_naming_the_extra(tmp_path):
    code = "import _helpers\n_helpers.require('matplotlib', 'a_package_that_is_not_installed')"
    res = subprocess.run(
        [sys.executable, "-c", code],
        cwd=EXAMPLES,
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert res.returncode == 1 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "a_package_that_is_not_installed" in lines[0]
    assert "examples extra" in lines[0] and "make examples" in lines[0] and "matplotlib" not in lines[0]


def test_output_folder_follows_the_environment(tmp_path):
    code = "import _helpers\nprint(_helpers.output_dir())"

    def ask(**env):
        res = subprocess.run(
            [sys.executable, "-c", code], cwd=EXAMPLES, env=_env(**env), capture_output=True, text=True
        )
        assert res.returncode == 0, res.stderr
        return res.stdout.strip()

    assert ask() == str(EXAMPLES / "sknn_gpu_examples_output")  # the working folder's
    assert ask(SKNN_GPU_EXAMPLES_OUTPUT=str(tmp_path)) == str(tmp_path)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_the_gallery_code_needs_no_helper(script):
    """The gallery's pages and notebooks drop the lines between the ignore flags: what is left
    uses none of the helpers, and a script with a small size reads the variable itself."""
    text = script.read_text(encoding="utf-8")
    flag = r"^[ \t]*# sphinx_gallery_{}_ignore$"
    hidden = re.compile(flag.format("start") + ".*?" + flag.format("end"), re.M | re.S)
    assert len(hidden.findall(text)) >= 2, "the helper import and save_figures() sit in ignore blocks"
    shown = hidden.sub("", text)
    compile(shown, script.name, "exec")
    assert not [w for w in ("_helpers", "require(", "save_figures", "small()") if w in shown]
    if "SMALL" in shown:
        assert 'SMALL = os.environ.get("SKNN_GPU_EXAMPLES_SMALL", "") not in ("", "0")' in shown


@pytest.mark.slow
def test_an_example_alone_still_runs(tmp_path):
    """A script downloaded from the gallery comes without ``_helpers.py``: it runs at full
    size and saves nothing, instead of stopping on the missing import."""
    script = tmp_path / "plot_mlp_digits.py"
    script.write_text((EXAMPLES / script.name).read_text(encoding="utf-8"), encoding="utf-8")
    out = tmp_path / "figures"
    env = _env(SKNN_GPU_EXAMPLES_OUTPUT=str(out), MPLBACKEND="Agg")
    res = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "GPUMLPClassifier test accuracy" in res.stdout
    assert not out.exists()
