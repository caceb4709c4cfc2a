"""docs/performance.md is generated from the recorded benchmark output and cannot drift from it.

``benchmarks/make_performance_page.py`` reads ``benchmarks/results/manifest.toml`` (which
recorded tables hold today's figures) and writes the page; these tests regenerate it and
compare, check that every figure's file was printed by a command whose script exists with
the flags it is given, and check the generator's own parsing on a small made-up output.
"""

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "make_performance_page.py"


def _load():
    spec = importlib.util.spec_from_file_location("make_performance_page", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


page = _load()


def test_committed_page_equals_a_fresh_generation(tmp_path):
    out = tmp_path / "performance.md"
    assert page.main(["--out", str(out)]) == 0
    committed = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    assert out.read_text(encoding="utf-8") == committed, (
        "docs/performance.md differs from what benchmarks/make_performance_page.py writes; "
        "run `python benchmarks/make_performance_page.py` and commit the page"
    )


def test_page_is_at_most_500_lines_and_says_how_it_is_made():
    text = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    assert text.count("\n") <= 500
    assert "python benchmarks/make_performance_page.py" in text  # how to regenerate it


def test_every_figure_comes_from_a_recorded_file_of_an_existing_command():
    commands = page.commands()
    assert commands, "the manifest lists no results files"
    for rel, command in commands.items():
        path = page.RESULTS / rel
        assert path.is_file(), rel
        assert not path.name.startswith("scratch_"), f"{rel}: output of a script that is not kept"
        script, flags = page.script_of(command)
        assert script is not None, f"{rel}: '{command}' runs no script"
        script_path = ROOT / script
        assert script_path.parent in (ROOT / "benchmarks", ROOT / "benchmarks" / "tools"), script
        assert script_path.is_file(), f"{rel}: {script} does not exist"
        source = script_path.read_text(encoding="utf-8")
        source += (ROOT / "benchmarks" / "_harness.py").read_text(encoding="utf-8")  # --quick, --device
        for flag in flags:
            assert f'"{flag}"' in source, f"{rel}: {script} takes no {flag}"


@pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs the git checkout"
)
def test_every_results_file_of_the_page_is_committed():
    files = [str(Path("benchmarks") / "results" / rel) for rel in page.commands()]
    tracked = subprocess.run(
        ["git", "ls-files", "--", *files], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert sorted(set(files) - set(tracked)) == []


SAMPLE = """\
Tue Nov 24 08:00:00 AM UTC 2026
_2026-11-24 · vm · NVIDIA H100 80GB HBM3 (CuPy 14.2.0) · Python 3.12.3 · NumPy 2.5.2_

### shape A, batch 1

| implementation | device | median time | quality | note |
|---|---|---|---|---|
| ours | cuda | 2.50 ms | acc 0.990 | fit on 6,000 rows: 4.85 ms |
| ours | cpu | 1.20 s | acc 0.990 | |
| fast peer (peer) | cuda | 10.00 ms | acc 1.000 | |
| slow peer (peer) | cuda | 40.0 ms | acc 1.000 | |

Strongest peer: fast peer (cuda), 10.00 ms.

Physical floor: 7.3 µs (1.0 MiB at 3.0 TB/s + one launch)
some warning printed between tables
### shape A, batch 2
| N | ours | peer | ours | peer |
|---|---|---|---|---|
| 10 | 1.00 ms | 2.00 ms | 3.00 ms | 1.50 ms (x12 of 5,000 steps) |
"""

MANIFEST = """\
title = "Perf"
intro = "Generated. {floor} floor."
[files."run/out.md"]
command = "python benchmarks/bench_x.py --fast"
[values.floor]
file = "run/out.md"
table = "shape A, batch 1"
line = "Physical floor"
[[section]]
title = "Thing"
[[section.row]]
workload = "one"
file = "run/out.md"
table = "shape A, batch 1"
ours = {row = "ours | cuda", note_col = "quality"}
peer = ["slow peer (peer)", "fast peer (peer)"]
floor = {line = "Physical floor"}
[[section.row]]
workload = "fit"
file = "run/out.md"
table = "shape A, batch 1"
ours = {row = "ours | cuda", col = "note", regex = 'rows: (\\S+ \\S+)'}
[[section.row]]
each = true
key = ["N"]
workload = "second pair, N = {N}"
file = "run/out.md"
table = "shape A, batch 2"
ours = {col = "ours#2"}
peer = {col = "peer#2", regex = '^(\\S+ \\S+)', label = "peer"}
"""


def _sample(tmp_path, monkeypatch, manifest=MANIFEST):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "out.md").write_text(SAMPLE, encoding="utf-8")
    (tmp_path / "manifest.toml").write_text(manifest, encoding="utf-8")
    monkeypatch.setattr(page, "RESULTS", tmp_path)
    return page.render(tmp_path / "manifest.toml")


def test_render_reads_cells_peers_floors_and_header_facts(tmp_path, monkeypatch):
    lines = _sample(tmp_path, monkeypatch).splitlines()
    assert lines[0] == "# Perf"
    assert "Generated. 7.3 µs floor." in lines
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| workload")]
    one, fit, second = rows
    # the fastest peer with a time is shown; the ratio is ours / peer; device and date from the header
    assert one.split(" | ")[1:7] == [
        "2.50 ms (acc 0.990)",
        "fast peer: 10.00 ms",
        "0.25×",
        "7.3 µs",
        "H100 80GB HBM3",
        "2026-11-24",
    ]
    assert one.endswith("`python benchmarks/bench_x.py --fast` |")
    assert fit.split(" | ")[1:5] == ["4.85 ms", "—", "—", "—"]
    # a repeated column name is addressed as name#2; a regex keeps the time of a longer cell
    assert second.split(" | ")[:4] == ["| second pair, N = 10", "3.00 ms", "peer: 1.50 ms", "2.00×"]
    assert "Recorded output: `benchmarks/results/run/out.md`." in lines


@pytest.mark.parametrize(
    "change, message",
    [
        (('ours = {row = "ours | cuda", note_col', 'ours = {row = "ours", note_col'), "2 rows 'ours'"),
        (('table = "shape A, batch 1"\nours', 'table = "shape B"\nours'), "0 tables starting with 'shape B'"),
        (('col = "ours#2"', 'col = "ours#3"'), "no column 'ours#3'"),
        (('"run/out.md"]\ncommand', '"run/other.md"]\ncommand'), "not listed under [files]"),
    ],
)
def test_render_refuses_what_the_output_does_not_hold(tmp_path, monkeypatch, change, message):
    old, new = change
    assert old in MANIFEST
    with pytest.raises(page.ManifestError, match=message.replace("[", r"\[").replace("]", r"\]")):
        _sample(tmp_path, monkeypatch, MANIFEST.replace(old, new, 1))


def test_parse_time_and_ratio_format():
    assert page.parse_time("2.45 s (×12 of 5,000 steps)") == pytest.approx(2.45)
    assert page.parse_time("1,234.5 µs") == pytest.approx(1.2345e-3)
    assert page.parse_time("—") is None
    assert page.fmt_ratio(0.2467) == "0.25×"
    assert page.fmt_ratio(0.0299) == "0.03×"
    assert page.fmt_ratio(2.914) == "2.91×"


def test_render_refuses_a_page_over_the_line_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(page, "MAX_LINES", 5)
    with pytest.raises(page.ManifestError, match="at most 5"):
        _sample(tmp_path, monkeypatch)
