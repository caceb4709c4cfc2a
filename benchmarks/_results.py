"""Reading recorded benchmark output (``benchmarks/results/*.md``): one time pattern, one
unit table and one table-row splitter for the scripts that read results
(``make_performance_page.py``, ``plot_summary.py``, ``plot_results.py``)."""

from __future__ import annotations

#: seconds per printed unit
UNITS = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}
#: a printed time, ``27.20 ms`` or ``1,234 µs``: group 1 the number, group 2 the unit
TIME = r"([0-9][0-9,]*(?:\.[0-9]+)?)\s*(ns|µs|us|ms|s)"


def seconds(number: str, unit: str) -> float:
    """Seconds of a printed ``number`` (thousands commas allowed) and ``unit``."""
    return float(number.replace(",", "")) * UNITS[unit]


def cells(line: str) -> list[str]:
    """The stripped cells of one markdown table row ``| a | b |``."""
    return [c.strip() for c in line.strip().strip("|").split("|")]
