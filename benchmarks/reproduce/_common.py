"""Shared helpers for the ``benchmarks/reproduce/repro_*.py`` scripts.

Every script follows one interface::

    python benchmarks/reproduce/repro_<paper>.py [--quick] [--plots DIR] [--device auto|cpu|cuda]

It prints markdown (a ``## <paper title>`` heading, then tables with an ``ours`` and a
``paper`` column and a ``differs because`` column), saves PNG plots into ``DIR`` when
``--plots`` is given, and exits 0.  ``--quick`` is the CI size (seconds on a 2-core CPU);
without it the sizes are the paper's (minutes on the H100).  ``--smoke`` (the test suite's
size, implies ``--quick``) runs every step on the smallest inputs that exercise it: it
checks that the script runs end to end, and its numbers mean nothing.

* :func:`parse_args` -- the flags; the namespace also carries ``resolved_device``
  (``'cpu'`` or ``'cuda'``) and ``gpu`` (bool).
* :func:`paper_table` -- a markdown table of ours beside the paper's figures.
* :func:`new_figure` / :func:`save_plot` -- matplotlib figures only when ``--plots`` was
  given and matplotlib imports (the accelerator image may lack it: a note is printed then).
* :func:`heading` -- the ``## title`` line plus the environment line of the benchmark harness.
* :func:`sized` -- pick a size for the full, ``--quick`` and ``--smoke`` runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent
ROOT = BENCH.parent
for _p in (ROOT, BENCH):  # `python benchmarks/reproduce/repro_x.py` from a checkout
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from _harness import environment_header, fmt_time  # noqa: E402

__all__ = [
    "DIFFERS",
    "PAPERS",
    "fmt",
    "fmt_time",
    "heading",
    "new_figure",
    "paper_table",
    "parse_args",
    "save_plot",
    "sized",
]

#: Folder holding the seed papers the "paper" columns quote from.
PAPERS = Path("/work/shared/papers")
#: Name of the explanation column every :func:`paper_table` has.
DIFFERS = "differs because"


def parse_args(description, argv=None):
    """Parse ``--quick``, ``--smoke``, ``--plots DIR`` and ``--device {auto,cpu,cuda}``.

    Returns an :class:`argparse.Namespace` with ``quick`` and ``smoke`` (bool; ``--smoke``
    sets ``quick`` too), ``plots``
    (:class:`~pathlib.Path` or None), ``device`` (as given), and two derived fields:
    ``resolved_device`` (``'cuda'`` when a usable GPU is present and the device is
    ``'auto'`` or ``'cuda'``, else ``'cpu'``) and ``gpu`` (``resolved_device == 'cuda'``).
    Asking for ``--device cuda`` without a usable GPU is an error (exit status 2).
    """
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="CI-size run (seconds on a 2-core CPU)")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="the smallest inputs that run every step (the test suite's size; implies --quick; "
        "the numbers mean nothing)",
    )
    p.add_argument(
        "--plots",
        type=Path,
        default=None,
        metavar="DIR",
        help="save PNG plots into DIR (default: no plots)",
    )
    p.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        default="auto",
        help="device of our estimators' GPU rows (CPU rows always run on the CPU)",
    )
    args = p.parse_args(argv)
    args.quick = args.quick or args.smoke
    from sknn_gpu._backend import cuda_available

    has_gpu = args.device != "cpu" and cuda_available()
    if args.device == "cuda" and not has_gpu:
        p.error("--device cuda was asked for but no usable CUDA GPU (CuPy) was found")
    args.resolved_device = "cuda" if has_gpu else "cpu"
    args.gpu = has_gpu
    return args


def sized(args, full, quick, smoke=None):
    """The size for this run: ``smoke`` under ``--smoke`` (when given), ``quick`` under
    ``--quick``, else ``full``."""
    if smoke is not None and getattr(args, "smoke", False):
        return smoke
    return quick if args.quick else full


def heading(title, args=None):
    """Print the ``## title`` heading, the environment line and the run's size/device."""
    print(f"## {title}\n", flush=True)
    print(environment_header(), flush=True)
    if args is not None:
        if getattr(args, "smoke", False):
            size = "smoke (test size: checks that every step runs; the numbers mean nothing)"
        else:
            size = "quick (CI size)" if args.quick else "full (paper size)"
        print(f"\nRun: {size}, device {args.resolved_device}.\n", flush=True)


def fmt(value, digits=4):
    """Format one table cell: None -> '—', floats with ``digits`` significant digits."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != value:  # NaN
            return "—"
        if value == 0 or 1e-3 <= abs(value) < 1e6:
            return f"{value:.{digits}g}"
        return f"{value:.{max(digits - 1, 1)}e}"
    return str(value)


def _cell(value):
    return fmt(value).replace("|", "\\|").replace("\n", " ")


def paper_table(title, rows, columns):
    """Markdown table of ours beside the paper's figures.

    Parameters
    ----------
    title : str
        Printed as a ``### title`` heading above the table.
    rows : list of dict or list of sequence
        One entry per row.  Dict rows are keyed by column name (missing keys print
        empty); sequence rows list the cells in ``columns`` order (short rows are
        padded).  ``None`` prints as ``—``, floats with 4 significant digits.
    columns : list of str
        Column names.  At least one must mention ``ours`` and one ``paper``
        (case-insensitive).  A ``differs because`` column is appended when absent, so
        every table has a place to say why ours differs from the paper's claim.

    Returns
    -------
    str
        The markdown text (heading, blank line, table, trailing blank line).
    """
    columns = [str(c) for c in columns]
    lower = [c.lower() for c in columns]
    if not any("ours" in c for c in lower) or not any("paper" in c for c in lower):
        raise ValueError(
            f"paper_table({title!r}) needs a column mentioning 'ours' and one mentioning "
            f"'paper'; got {columns}"
        )
    if DIFFERS not in lower:
        columns.append(DIFFERS)
    lines = [f"### {title}", ""]
    lines.append("| " + " | ".join(columns) + " |")
    lines.append("|" + "---|" * len(columns))
    for row in rows:
        if isinstance(row, dict):
            unknown = set(row) - set(columns)
            if unknown:
                raise ValueError(f"paper_table({title!r}): row keys {sorted(unknown)} not in {columns}")
            cells = [row.get(c, "") for c in columns]
        else:
            cells = list(row)
            if len(cells) > len(columns):
                raise ValueError(
                    f"paper_table({title!r}): row has {len(cells)} cells for {len(columns)} columns"
                )
            cells += [""] * (len(columns) - len(cells))
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def new_figure(args, *subplots_args, **subplots_kw):
    """``(fig, ax)`` from ``plt.subplots`` when plots were asked for, else ``(None, None)``.

    Returns ``(None, None)`` (and prints a note once) when ``--plots`` was given but
    matplotlib is not installed, so scripts run everywhere and plot where they can.
    """
    if args is None or getattr(args, "plots", None) is None:
        return None, None
    plt = _pyplot()
    if plt is None:
        if not getattr(new_figure, "_warned", False):
            print("_(plots skipped: matplotlib is not installed here)_\n", flush=True)
            new_figure._warned = True
        return None, None
    subplots_kw.setdefault("figsize", (6, 4))
    return plt.subplots(*subplots_args, **subplots_kw)


def save_plot(fig, plots_dir, name):
    """Save ``fig`` as ``plots_dir/name.png`` and close it; return the path (or None).

    Nothing is written (and None returned) when ``fig`` or ``plots_dir`` is None.
    """
    if fig is None or plots_dir is None:
        return None
    plots_dir = Path(plots_dir)
    plots_dir.mkdir(parents=True, exist_ok=True)
    name = str(name)
    if not name.lower().endswith(".png"):
        name += ".png"
    path = plots_dir / name
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt = _pyplot()
    if plt is not None:
        plt.close(fig)
    print(f"_plot saved: {path}_\n", flush=True)
    return path
