#!/usr/bin/env python3
"""A newcomer's first hour, in one command: a clean copy of the repository, a fresh virtual
environment, the install the README's Install section gives, and every script in
``examples/`` at its small size, each checked for the figures it saves.

    python scripts/newcomer.py            # or: make newcomer
    python scripts/newcomer.py --offline  # nothing downloaded (see below)

Steps:

1. ``git clone`` of the repository's committed HEAD into a new temporary folder (work not
   committed yet is not part of it: this is what a newcomer gets).
2. A new virtual environment, created with this interpreter.
3. The install. By default exactly the README's command for a CPU machine with the
   examples extra, run in the clone: ``pip install ".[examples]"`` (the dependencies and
   the build backend come from the package index). With ``--offline`` nothing is
   downloaded: this interpreter's pip and setuptools build a wheel from the clone (no build
   isolation, no index), the wheel is installed into the new environment without its
   dependencies, and the new environment sees the packages of this one (a ``.pth`` file
   written after the install, so the wheel comes first); the examples extra's packages must
   then be installed here, as ``make test`` does.
4. Every ``examples/*.py`` of the clone (leading underscore excepted), run with the new
   environment's interpreter from an empty folder of its own with
   ``SKNN_GPU_EXAMPLES_SMALL=1``: it must exit 0, save at least one drawn PNG figure
   named after itself, print the figure folder last and write nothing else.

The exit status is 0 when every step passed; a summary lists each example with its time.
Only the standard library is used, so any Python >= 3.10 runs it. The test suite
(``tests/test_newcomer.py``) runs it with ``--offline``; ``tests/test_install.py`` and
``tests/test_examples.py`` use its helpers.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import email.parser
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import venv
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PNG = b"\x89PNG\r\n\x1a\n"
#: a drawn figure is larger than this many bytes (an empty or failed save is not)
MIN_FIGURE_BYTES = 5000
DIST = "sknn-gpu"
EXTRA = "examples"
#: the README's install command for a CPU machine, with the examples extra
README_INSTALL = ["pip", "install", f".[{EXTRA}]"]


class StepFailed(AssertionError):
    """A step did not do what it should; the message says which and shows its output.

    An ``AssertionError``, so that a test using these helpers fails (not errors) on it."""


# ------------------------------------------------------------------------------ commands


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of every command run here: no source tree on ``PYTHONPATH``, no
    user site-packages, pip quiet and non-interactive, no window for matplotlib (the
    examples pick Agg themselves without a display) and none of the examples' variables
    unless given in ``extra``."""
    drop = {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "DISPLAY", "WAYLAND_DISPLAY", "MPLBACKEND"}
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("SKNN_GPU_EXAMPLES")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", PYTHONNOUSERSITE="1")
    env.update(extra)
    return env


def run(cmd, *, cwd=None, env=None, timeout=None) -> subprocess.CompletedProcess:
    """Run ``cmd``; raise :class:`StepFailed` with its output unless it exits 0."""
    cmd = [str(c) for c in cmd]
    shown = " ".join(cmd)
    try:
        out = subprocess.run(
            cmd,
            cwd=cwd,
            env=clean_env() if env is None else env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        raise StepFailed(f"{shown} ran past {timeout} s") from exc
    if out.returncode != 0:
        raise StepFailed(f"{shown} exited {out.returncode}:\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}")
    return out


# ------------------------------------------------------------------------ source and venv


def clone_head(repo: Path, dest: Path) -> Path:
    """A ``git clone`` of ``repo``'s HEAD in ``dest``: the committed tree, nothing else."""
    if shutil.which("git") is None:
        raise StepFailed("git is not installed: the newcomer's copy is a git clone")
    run(["git", "clone", "--quiet", "--no-hardlinks", repo, dest])
    return dest


def is_git_checkout(path: Path) -> bool:
    """True when ``path`` is the top of a git work tree with at least one commit."""
    if shutil.which("git") is None or not (path / ".git").exists():
        return False
    out = subprocess.run(["git", "-C", str(path), "rev-parse", "--verify", "-q", "HEAD"], capture_output=True)
    return out.returncode == 0


def create_venv(env_dir: Path, *, with_pip: bool, system_site_packages: bool = False) -> Path:
    """A new virtual environment in ``env_dir``; returns its interpreter."""
    builder = venv.EnvBuilder(
        system_site_packages=system_site_packages, with_pip=with_pip, symlinks=os.name != "nt"
    )
    builder.create(env_dir)
    bindir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    return bindir / ("python.exe" if os.name == "nt" else "python")


def build_wheel(src: Path, wheel_dir: Path, *, python=sys.executable) -> Path:
    """The wheel of the source tree ``src``, built by ``python``'s pip and build backend
    with nothing downloaded (no build isolation, no index)."""
    cmd = [python, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index"]
    run([*cmd, "--wheel-dir", wheel_dir, src], cwd=wheel_dir.parent)
    wheels = sorted(wheel_dir.glob("sknn_gpu-*.whl"))
    if len(wheels) != 1:
        raise StepFailed(f"expected one sknn_gpu wheel in {wheel_dir}, found {[w.name for w in wheels]}")
    return wheels[0]


def install_wheel(python: Path, wheel: Path, *, cwd=None) -> None:
    """Install ``wheel`` into the environment of ``python`` without its dependencies and
    without an index; pip runs from this interpreter (the new one needs no pip)."""
    cmd = [sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps", "--no-index"]
    run([*cmd, "--find-links", wheel.parent, DIST], cwd=cwd)


def site_dir(python: Path) -> Path:
    """The site-packages folder of the environment of ``python``."""
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(run([python, "-c", where]).stdout.strip())


def share_site_packages(python: Path) -> Path:
    """Let the environment of ``python`` import this interpreter's installed packages: a
    ``.pth`` file in its site-packages lists this interpreter's site-packages folders.
    Lines of a ``.pth`` file go after the environment's own folder, so what is installed
    there comes first; the ``.pth`` files of the folders listed are not read, so an
    editable install of the package here is not seen there."""
    ours = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir()]
    path = site_dir(python) / "_sknn_gpu_shared_dependencies.pth"
    path.write_text("\n".join(dict.fromkeys(ours)) + "\n", encoding="utf-8")
    return path


def extra_requirements(wheel: Path, extra: str = EXTRA) -> list[str]:
    """The distribution names an extra of the wheel asks for (its METADATA)."""
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(zf.read(name).decode("utf-8"))
    names = []
    for req in meta.get_all("Requires-Dist") or []:
        spec, _, marker = req.partition(";")
        if re.search(rf"""extra\s*==\s*["']{re.escape(extra)}["']""", marker):
            names.append(re.split(r"[\s\[<>=!~(]", spec.strip(), maxsplit=1)[0])
    return sorted(set(names))


def missing_distributions(python: Path, names) -> list[str]:
    """The names in ``names`` that the environment of ``python`` has no distribution of."""
    code = (
        "import sys, importlib.metadata as m\n"
        "def has(n):\n"
        "    try:\n"
        "        m.distribution(n)\n"
        "        return True\n"
        "    except m.PackageNotFoundError:\n"
        "        return False\n"
        "print('\\n'.join(n for n in sys.argv[1:] if not has(n)))\n"
    )
    return run([python, "-c", code, *names]).stdout.split()


def installed_package(python: Path, *, cwd: Path) -> dict[str, str]:
    """Where the environment of ``python`` imports sknn_gpu from, and its version."""
    code = "import sknn_gpu; print(sknn_gpu.__file__); print(sknn_gpu.__version__)"
    file, version = run([python, "-c", code], cwd=cwd).stdout.split()
    return {"file": file, "version": version}


# ------------------------------------------------------------------------------ examples


def example_scripts(folder: Path) -> list[Path]:
    """The example scripts of ``folder``: every ``*.py`` not starting with an underscore."""
    return sorted(p for p in folder.glob("*.py") if not p.name.startswith("_"))


def example_env(out: Path) -> dict[str, str]:
    """The environment an example runs in: the small size, its figures saved in ``out``."""
    return clean_env(SKNN_GPU_EXAMPLES_SMALL="1", SKNN_GPU_EXAMPLES_OUTPUT=str(out))


def check_example_output(
    script: Path, res: subprocess.CompletedProcess, out: Path, workdir: Path
) -> list[Path]:
    """Raise :class:`StepFailed` unless the example ``script`` (run in ``workdir`` with its
    figures going to ``out``, which lies in ``workdir``) exited 0, saved at least one drawn
    PNG named after itself, printed the figure folder last and wrote nothing else in
    ``workdir``; returns the figures."""
    tail = f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    if res.returncode != 0:
        raise StepFailed(f"{script.name} exited {res.returncode}:\n{tail}")
    figures = sorted(out.glob(f"{script.stem}_*.png"))
    if not figures:
        raise StepFailed(f"{script.name} saved no figure in {out}:\n{tail}")
    for fig in figures:
        data = fig.read_bytes()
        if not data.startswith(PNG) or len(data) <= MIN_FIGURE_BYTES:
            raise StepFailed(f"{script.name}: {fig.name} is not a drawn PNG figure ({len(data)} bytes)")
    lines = res.stdout.strip().splitlines()
    if not lines or str(out.resolve()) not in lines[-1]:
        raise StepFailed(f"{script.name} did not print the figure folder {out} last:\n{tail}")
    extra = sorted(p.name for p in workdir.iterdir() if p != out)
    if extra:
        raise StepFailed(f"{script.name} wrote outside its figure folder: {extra}")
    return figures


@dataclass
class ExampleResult:
    script: Path
    seconds: float
    figures: list[Path] = field(default_factory=list)
    error: str = ""


def run_example(python: Path, script: Path, workdir: Path, *, timeout: float = 600) -> ExampleResult:
    """Run one example as a user does, from the empty folder ``workdir``, at the small size;
    its figures go to ``workdir/figures``. The result carries the error instead of raising."""
    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / "figures"
    start = time.perf_counter()
    try:
        res = subprocess.run(
            [str(python), str(script)],
            cwd=workdir,
            env=example_env(out),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        figures = check_example_output(script, res, out, workdir)
        return ExampleResult(script, time.perf_counter() - start, figures)
    except subprocess.TimeoutExpired:
        return ExampleResult(script, time.perf_counter() - start, error=f"{script.name} ran past {timeout} s")
    except StepFailed as exc:
        return ExampleResult(script, time.perf_counter() - start, error=str(exc))


def run_examples(python: Path, scripts, workdir: Path, *, jobs: int = 1, log=print) -> list[ExampleResult]:
    """Run every example (``jobs`` at a time), each in a folder of its own in ``workdir``."""
    results = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(run_example, python, s, workdir / s.stem) for s in scripts]
        for fut in concurrent.futures.as_completed(futures):
            r = fut.result()
            log(
                f"  {'ok  ' if not r.error else 'FAIL'} {r.script.name:32s} {r.seconds:6.1f} s"
                f"  {len(r.figures)} figure(s)"
            )
            results.append(r)
    return sorted(results, key=lambda r: r.script.name)


# ---------------------------------------------------------------------------- the journey


@dataclass
class Report:
    workdir: Path
    python: Path
    package: dict[str, str]
    examples: list[ExampleResult]

    @property
    def failed(self) -> list[ExampleResult]:
        return [r for r in self.examples if r.error]


def newcomer(repo: Path, workdir: Path, *, offline: bool, jobs: int = 1, log=print) -> Report:
    """Every step, in ``workdir``; raises :class:`StepFailed` when the clone or the install
    fails, and returns the examples' results otherwise (see :attr:`Report.failed`)."""
    workdir.mkdir(parents=True, exist_ok=True)
    src, env_dir, home = workdir / "sknn-gpu", workdir / "venv", workdir / "home"
    home.mkdir()

    log(f"1. git clone {repo} (HEAD) -> {src}")
    clone_head(repo, src)

    log(f"2. new virtual environment {env_dir}")
    python = create_venv(env_dir, with_pip=not offline)

    if offline:
        log("3. install, nothing downloaded: wheel built from the clone, installed without dependencies")
        wheel_dir = workdir / "wheelhouse"
        wheel_dir.mkdir()
        wheel = build_wheel(src, wheel_dir)
        install_wheel(python, wheel, cwd=home)
        share_site_packages(python)
        missing = missing_distributions(python, extra_requirements(wheel))
        if missing:
            raise StepFailed(
                f"--offline takes the {EXTRA} extra's packages from {sys.executable}'s environment, "
                f"which lacks {', '.join(missing)}: install them there, or run without --offline"
            )
    else:
        log(f"3. in {src}: {shlex.join(README_INSTALL)}  (the README's install, CPU only, examples extra)")
        run([python, "-m", *README_INSTALL], cwd=src, timeout=1800)

    package = installed_package(python, cwd=home)
    if not Path(package["file"]).resolve().is_relative_to(env_dir.resolve()):
        raise StepFailed(f"sknn_gpu is imported from {package['file']}, not from the new environment")
    log(f"   sknn_gpu {package['version']} from {package['file']}")

    scripts = example_scripts(src / "examples")
    if not scripts:
        raise StepFailed(f"no example scripts in {src / 'examples'}")
    log(f"4. {len(scripts)} examples at the small size, {jobs} at a time")
    results = run_examples(python, scripts, workdir / "runs", jobs=jobs, log=log)
    return Report(workdir, python, package, results)


def _log(line: str) -> None:
    print(line, flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--repo", type=Path, default=ROOT, help="the git repository to clone (default: this one)"
    )
    parser.add_argument(
        "--offline", action="store_true", help="download nothing (see the module's docstring)"
    )
    parser.add_argument("--jobs", type=int, default=1, help="examples run at a time (default 1)")
    parser.add_argument(
        "--workdir", type=Path, help="keep everything in this new folder (default: a temporary one)"
    )
    args = parser.parse_args(argv)

    if not is_git_checkout(args.repo):
        print(f"{args.repo} is not a git checkout with a commit: nothing to clone", file=sys.stderr)
        return 2
    keep = args.workdir is not None
    if keep and args.workdir.exists() and any(args.workdir.iterdir()):
        print(f"{args.workdir} exists and is not empty", file=sys.stderr)
        return 2
    workdir = args.workdir.resolve() if keep else Path(tempfile.mkdtemp(prefix="sknn-gpu-newcomer-"))
    start = time.perf_counter()
    try:
        report = newcomer(args.repo.resolve(), workdir, offline=args.offline, jobs=args.jobs, log=_log)
    except StepFailed as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
    for r in report.failed:
        print(f"\n== {r.script.name}\n{r.error}", file=sys.stderr)
    n, bad = len(report.examples), len(report.failed)
    print(f"{n - bad} of {n} examples ran and saved their figures in {time.perf_counter() - start:.0f} s")
    if keep:
        print(f"everything is in {workdir}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
