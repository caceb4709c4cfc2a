"""What users read names no part of how the work was organised.

README, CHANGELOG, the docs, the package's comments and strings, the benchmarks and the
examples speak about the product: no work sessions, scratch runs, tracker numbers
("issue 13", "(issue 13)", "#13"), "the team" or closing notes. History goes to
CHANGELOG.md as plain change-and-effect lines.

Words that are also legitimate terms appear only as the exact identifiers in ``ALLOWED``,
each with its reason; a whole file is never exempt.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PATTERNS = {
    "session": r"\bsessions?\b",
    "scratch": r"\bscratch\w*",
    "issue number": r"\bissues?[\s-]*#?\d+",
    "(issue ...)": r"\(issues?\b",
    "#N tracker reference": r"(?<![\w&/#])#\d+\b",
    "the team": r"\bthe team\b",
    "closing note": r"\bclosing notes?\b",
}
WORDS = re.compile("|".join(f"(?:{p})" for p in PATTERNS.values()), re.I)

#: exact identifiers that contain a listed word for a legitimate reason
ALLOWED = {
    # the context manager behind SparseGraph.resident(): the span during which the
    # resident kernel stays on the GPU; its name appears in __all__ and in docstrings
    "resident_session": "function behind SparseGraph.resident()",
    # the key of the per-stream work buffers in the sparse family's cached launch
    # configuration (cfg["scratch"]): a string literal of the code, not prose
    '"scratch"': "dict key in sknn_gpu/sparse/_graph_plan_cuda.py and _graph_cuda.py",
}

SKIP_DIRS = {"_build", "auto_examples", "generated", "__pycache__", ".ipynb_checkpoints"}


def _files():
    out = [ROOT / "README.md", ROOT / "CHANGELOG.md"]
    for pattern in ("docs/**/*.md", "docs/**/*.rst", "docs/**/*.py"):
        out += ROOT.glob(pattern)
    for pattern in ("sknn_gpu/**/*.py", "sknn_gpu/**/*.cu", "sknn_gpu/**/*.cuh"):
        out += ROOT.glob(pattern)
    for pattern in ("benchmarks/**/*.py", "examples/**/*.py"):
        out += ROOT.glob(pattern)
    return sorted({p for p in out if p.is_file() and not SKIP_DIRS & set(p.relative_to(ROOT).parts)})


def python_text(source):
    """``[(line, text)]`` of a Python source's comments and string literals."""
    kinds = {tokenize.COMMENT, tokenize.STRING}
    kinds |= {getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}  # Python >= 3.12
    return [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type in kinds
    ]


CUDA_TEXT = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', re.S)


def cuda_text(source):
    """``[(line, text)]`` of CUDA C++ comments and string literals."""
    return [(source.count("\n", 0, m.start()) + 1, m.group()) for m in CUDA_TEXT.finditer(source)]


def scanned(path):
    """``[(line, text)]``: comments and strings of the package's code, every line elsewhere."""
    source = path.read_text(encoding="utf-8")
    rel = path.relative_to(ROOT).parts
    if rel[0] == "sknn_gpu" and path.suffix == ".py":
        return python_text(source)
    if rel[0] == "sknn_gpu":
        return cuda_text(source)
    return list(enumerate(source.splitlines(), start=1))


def hits(pieces):
    """``[(line, word, context)]`` of the process words in ``[(line, text)]``."""
    allowed = re.compile("|".join(re.escape(a) for a in ALLOWED))
    out = []
    for first, text in pieces:
        for offset, line in enumerate(text.splitlines() or [text]):
            clean = allowed.sub("", line)
            out += [(first + offset, m.group(), clean.strip()[:120]) for m in WORDS.finditer(clean)]
    return out


def test_patterns_catch_process_words_and_spare_the_rest():
    bad = [
        "measured in the fourth session",
        "a scratch run",
        "issue 13's target",
        "(issue 16)",
        "as #14 asked",
        "issues 14 and 18",
        "the team agreed",
        "Closing note: done",
    ]
    good = [
        "the issue is the host",
        "#define N 4",
        "colour #1f77b4",
        "## Heading 2",
        "&#160;",
        "resident_session(g)",
    ]
    assert all(hits([(1, t)]) for t in bad)
    assert not any(hits([(1, t)]) for t in good)


def test_code_is_read_for_comments_and_strings_only():
    py = 'session = 1  # a scratch run\nx = "issue 13"\n'
    assert [(line, word) for line, word, _ in hits(python_text(py))] == [(1, "scratch"), (2, "issue 13")]
    cu = 'int session = 0; // session two\n/* the team */ const char *s = "#12";\n'
    assert [(line, word) for line, word, _ in hits(cuda_text(cu))] == [
        (1, "session"),
        (2, "the team"),
        (2, "#12"),
    ]


FILES = _files()


def test_scan_covers_the_product():
    names = {p.relative_to(ROOT).as_posix() for p in FILES}
    assert {"README.md", "CHANGELOG.md", "docs/performance.md", "docs/reproduction.md"} <= names
    assert any(n.startswith("sknn_gpu/_kernels/") and n.endswith(".cu") for n in names)
    assert any(n.startswith("benchmarks/") for n in names) and any(n.startswith("examples/") for n in names)


@pytest.mark.parametrize("path", FILES, ids=[p.relative_to(ROOT).as_posix() for p in FILES])
def test_no_process_words(path):
    found = hits(scanned(path))
    assert not found, "\n".join(
        f"{path.relative_to(ROOT)}:{line}: {word!r} in {ctx!r}" for line, word, ctx in found
    )
