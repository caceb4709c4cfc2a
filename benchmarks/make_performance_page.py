"""Write ``docs/performance.md`` from the recorded benchmark output.

The benchmarks print markdown tables; each run's output is kept, exactly as printed, under
``benchmarks/results/<date>-<device>/``. ``benchmarks/results/manifest.toml`` says which of
those tables and rows are today's figures, per estimator, and which command produced each
file. This script reads the tables (no number is typed in here or in the manifest), and
writes one table per estimator: workload, ours, the strongest peer, the ratio, the physical
floor where the benchmark states one, the device and date of the run and its command.

Run from anywhere after recording new output and pointing the manifest at it::

    python benchmarks/make_performance_page.py           # rewrites docs/performance.md
    python benchmarks/make_performance_page.py --check   # exit 1 if the page is out of date

``tests/test_performance_page.py`` fails when the committed page differs from what this
script writes.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _results beside this script
from _results import TIME, cells, seconds  # noqa: E402

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser as the tomli package (a pytest dependency there)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
MANIFEST = RESULTS / "manifest.toml"
PAGE = ROOT / "docs" / "performance.md"
MAX_LINES = 500

TIME_RE = re.compile(TIME + r"\b")
COLUMNS = ["workload", "ours", "strongest peer", "ours / peer", "physical floor", "device", "date", "command"]


class ManifestError(ValueError):
    """The manifest names something the recorded output does not hold."""


def parse_time(text):
    """Seconds of the first ``<number> <unit>`` in ``text`` (None when there is none)."""
    m = TIME_RE.search(text or "")
    return seconds(m.group(1), m.group(2)) if m else None


def first_time(text):
    """The first ``<number> <unit>`` of ``text`` as printed, or None."""
    m = TIME_RE.search(text or "")
    return m.group(0) if m else None


@dataclass
class Table:
    """One ``###`` section of a benchmark's output: its table and the lines after it."""

    title: str
    header: list = field(default_factory=list)
    rows: list = field(default_factory=list)
    after: list = field(default_factory=list)

    def key(self, row, n):
        return " | ".join(row[:n])

    def find(self, key, where):
        n = key.count(" | ") + 1
        hits = [r for r in self.rows if self.key(r, n) == key]
        if len(hits) != 1:
            raise ManifestError(f"{where}: {len(hits)} rows '{key}' in table '{self.title}'")
        return hits[0]

    def cell(self, row, col, where):
        """The cell of ``row`` under ``col``; ``name#2`` is the second column of that name."""
        name, _, nth = col.partition("#")
        at = [i for i, h in enumerate(self.header) if h == name]
        if len(at) < int(nth or 1):
            raise ManifestError(f"{where}: no column '{col}' in table '{self.title}' ({self.header})")
        i = at[int(nth or 1) - 1]
        return row[i] if i < len(row) else ""


@dataclass
class Output:
    """A recorded results file: its header facts and its tables."""

    path: str
    date: str | None
    device: str | None
    tables: list
    text: str

    def table(self, prefix, where):
        exact = [t for t in self.tables if t.title == prefix]
        hits = exact or [t for t in self.tables if t.title.startswith(prefix)]
        if len(hits) != 1:
            raise ManifestError(f"{where}: {len(hits)} tables starting with '{prefix}' in {self.path}")
        return hits[0]


def read_output(rel):
    """Parse ``benchmarks/results/<rel>``: the ``_date · host · device · ..._`` line and every
    ``###`` table (warnings printed between tables are skipped)."""
    path = RESULTS / rel
    if not path.is_file():
        raise ManifestError(f"no results file {rel}")
    text = path.read_text(encoding="utf-8")
    date = device = None
    tables, current, in_table = [], None, False
    for line in text.splitlines():
        m = re.fullmatch(r"_(\d{4}-\d\d-\d\d) · [^·]+ · ([^·(]+?)\s*(?:\([^)]*\))? · .*_", line.strip())
        if m and date is None:
            date, device = m.group(1), m.group(2).strip()
            continue
        if line.startswith("### "):
            current, in_table = Table(line[4:].strip()), False
            tables.append(current)
        elif current is None:
            continue
        elif line.startswith("|"):
            row = cells(line)
            if not current.header:
                current.header, in_table = row, True
            elif in_table and not set(line.replace("|", "").strip()) <= set("-: "):
                current.rows.append(row)
        else:
            in_table = False if current.header else in_table
            if line.strip() and current.header:
                current.after.append(line.strip())
    return Output(rel, date, device, tables, text)


class Page:
    """Resolves the manifest's references against the recorded output."""

    def __init__(self, manifest):
        self.manifest = manifest
        self.files = manifest.get("files", {})
        self.outputs = {}
        self.used = []  # the files read since the current section began

    def output(self, rel, where):
        if rel not in self.files:
            raise ManifestError(f"{where}: {rel} is not listed under [files] (its command)")
        if rel not in self.outputs:
            self.outputs[rel] = read_output(rel)
        if rel not in self.used:
            self.used.append(rel)
        return self.outputs[rel]

    # -- one value ---------------------------------------------------------------------------

    def value(self, spec, ctx, where):
        """``(text, label)`` of one cell spec.

        ``spec`` is a row label (the default column, ``median time``, of that row) or a table:
        ``row`` (first cells joined by `` | ``), ``col``, ``file``/``table`` (default: the
        row's), ``regex`` (group 1, or the match, of the cell), ``line`` (a line after the
        table starting with this text instead of a cell), ``label``, ``note_col`` and
        ``note_regex`` (appended in parentheses), ``text`` (a fixed text such as '—')."""
        if isinstance(spec, str):
            spec = {"row": spec}
        if "text" in spec:
            return spec["text"], spec.get("label", "")
        out = self.output(spec.get("file", ctx.get("file")), where)
        if "table" not in spec and "table" not in ctx:  # a plain text output: the regex alone
            if not spec.get("regex"):
                raise ManifestError(f"{where}: a value without a table needs a regex")
            return self._pick(out.text, spec["regex"], where), spec.get("label", "")
        table = out.table(spec.get("table", ctx.get("table")), where)
        if "line" in spec:
            lines = [a for a in table.after if a.startswith(spec["line"])]
            if len(lines) != 1:
                raise ManifestError(f"{where}: {len(lines)} lines '{spec['line']}' after '{table.title}'")
            raw = lines[0][len(spec["line"]) :].strip(" :")
            row = None
        else:
            row = (
                table.find(spec.get("row", ctx.get("row")), where) if "row" in spec or "row" in ctx else None
            )
            if row is None:
                raise ManifestError(f"{where}: no row given")
            raw = table.cell(row, spec.get("col", "median time"), where)
        text = self._pick(raw, spec.get("regex"), where) if spec.get("regex") else raw
        if "line" in spec and not spec.get("regex"):
            text = first_time(raw) or raw
        if spec.get("format"):
            text = spec["format"].format(text)
        if spec.get("note_col"):
            note = table.cell(row, spec["note_col"], where)
            note = self._pick(note, spec["note_regex"], where) if spec.get("note_regex") else note
            text = f"{text} ({note})"
        label = spec.get("label")
        if label is None and row is not None:
            label = re.sub(r"\s*\(peer\)$", "", row[0])
        return text, label or ""

    @staticmethod
    def _pick(text, pattern, where):
        m = re.search(pattern, text)
        if not m:
            raise ManifestError(f"{where}: /{pattern}/ not in '{text}'")
        return m.group(1) if m.groups() else m.group(0)

    def peer(self, spec, ctx, where):
        """The fastest of one or more peer cells: ``(cell text, seconds)``."""
        if spec is None:
            return "—", None
        specs = spec if isinstance(spec, list) else [spec]
        best = None
        for s in specs:
            text, label = self.value(s, ctx, where)
            t = parse_time(text)
            if t is None and len(specs) > 1:
                continue
            if best is None or (t is not None and t < best[1]):
                best = (f"{label}: {text}" if label else text, t)
        if best is None:
            raise ManifestError(f"{where}: no peer with a time")
        return best

    # -- rows ---------------------------------------------------------------------------------

    def row(self, spec, ctx, where):
        ours, _ = self.value(spec["ours"], ctx, where)
        peer, peer_t = self.peer(spec.get("peer"), ctx, where)
        if "ratio" in spec:
            ratio, _ = self.value(spec["ratio"], ctx, where)
        elif peer_t is not None and parse_time(ours) is not None:
            ratio = fmt_ratio(parse_time(ours) / peer_t)
        else:
            ratio = "—"
        floor = self.value(spec["floor"], ctx, where)[0] if "floor" in spec else "—"
        rel = ctx["file"]
        out = self.output(rel, where)
        facts = self.files[rel]
        date = facts.get("date", out.date)
        device = facts.get("device", _short_device(out.device))
        if not date or not device:
            raise ManifestError(f"{where}: {rel} has no date/device line; give them under [files]")
        workload = spec["workload"].format(**ctx.get("fields", {}))
        command = f"`{facts['command']}`"
        return [workload, ours, peer, ratio, floor, device, date, command]

    def rows(self, spec, where):
        """One row, or with ``each`` one row per row of the table (``key`` columns name it)."""
        ctx = {"file": spec["file"], "table": spec["table"]}
        if not spec.get("each"):
            return [self.row(spec, ctx, where)]
        out = self.output(spec["file"], where)
        table = out.table(spec["table"], where)
        n = len(spec["key"])
        result = []
        for r in table.rows:
            key = table.key(r, n)
            fields = {c: table.cell(r, c, where) for c in table.header}
            row_ctx = {**ctx, "row": key, "fields": fields}
            if key in spec.get("replace", {}):
                row_ctx["file"] = spec["replace"][key]
            result.append(self.row(spec, row_ctx, f"{where} [{key}]"))
        return result


def fmt_ratio(r):
    """``ours / peer`` with two decimals, or two significant digits below 0.1."""
    return f"{r:.2f}×" if r >= 0.095 else f"{r:.2g}×"


def _short_device(device):
    return re.sub(r"^NVIDIA\s+", "", device) if device else device


def _md_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return lines


def render(manifest_path=MANIFEST):
    """The page's markdown text."""
    manifest = tomllib.loads(Path(manifest_path).read_text(encoding="utf-8"))
    page = Page(manifest)
    values = {}
    for name, spec in manifest.get("values", {}).items():
        values[name] = page.value(spec, {}, f"values.{name}")[0]

    def prose(text, where):
        try:
            return text.format(**values).strip()
        except KeyError as exc:
            raise ManifestError(f"{where}: unknown value {exc}") from None

    lines = [f"# {manifest['title']}", ""]
    lines += [prose(manifest["intro"], "intro"), ""]
    for part in manifest.get("section", []):
        where = f"section {part['title']!r}"
        lines += [f"## {part['title']}", ""]
        if part.get("intro"):
            lines += [prose(part["intro"], where), ""]
        if part.get("items"):
            lines += [f"- {prose(item, where)}" for item in part["items"]] + [""]
        page.used = []
        if part.get("row"):
            rows = [r for j, spec in enumerate(part["row"]) for r in page.rows(spec, f"{where} row {j}")]
            lines += _md_table(COLUMNS, rows) + [""]
        for d, detail in enumerate(part.get("detail", [])):
            lines += detail_table(page, detail, f"{where} detail {d}")
        if page.used:
            files = ", ".join(f"`benchmarks/results/{u}`" for u in page.used)
            lines += [f"Recorded output: {files}.", ""]
        if part.get("outro"):
            lines += [prose(part["outro"], where), ""]
    text = "\n".join(lines).rstrip() + "\n"
    n = text.count("\n")
    if n > MAX_LINES:
        raise ManifestError(f"the page would have {n} lines (at most {MAX_LINES})")
    return text


def detail_table(page, spec, where):
    """Chosen columns of one recorded table, as printed, under a short heading."""
    out = page.output(spec["file"], where)
    table = out.table(spec["table"], where)
    cols = spec["columns"]
    rows = [[table.cell(r, c, where) for c in cols] for r in table.rows]
    header = spec.get("headers", cols)
    command = page.files[spec["file"]]["command"]
    return (
        [
            f"**{spec['title']}** ({out.date}, {_short_device(out.device)}, `{command}`):",
            "",
        ]
        + _md_table(header, rows)
        + [""]
    )


def commands(manifest_path=MANIFEST):
    """``{results file: command}`` of the manifest (for the tests)."""
    manifest = tomllib.loads(Path(manifest_path).read_text(encoding="utf-8"))
    return {rel: facts["command"] for rel, facts in manifest.get("files", {}).items()}


def script_of(command):
    """The ``benchmarks/...py`` script a command runs and the ``--flags`` it passes."""
    words = shlex.split(command)
    scripts = [w for w in words if w.endswith(".py")]
    flags = [w.split("=")[0] for w in words if w.startswith("--")]
    return (scripts[0] if scripts else None), flags


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if docs/performance.md is out of date")
    p.add_argument("--out", type=Path, default=PAGE, help="where to write (default docs/performance.md)")
    args = p.parse_args(argv)
    text = render()
    if args.check:
        same = args.out.is_file() and args.out.read_text(encoding="utf-8") == text
        print(f"{args.out}: {'up to date' if same else 'out of date'}")
        return 0 if same else 1
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
