"""scikit-learn glue on CuPy data (issue 17): Pipeline with a scaler, cross_val_score and
GridSearchCV over FlyNN, the MLP and SparseNet, all on the GPU.

scikit-learn's own transformers and splitters take CuPy arrays under array-API dispatch,
which needs ``SCIPY_ARRAY_API=1`` before SciPy is first imported: so the body runs in a
fresh interpreter. What the user guide (devices.md) tells users to set is what is set here.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.cuda

ROOT = Path(__file__).resolve().parents[1]

BODY = textwrap.dedent(
    """
    import cupy as cp
    import numpy as np
    import sklearn
    from sklearn.datasets import load_digits
    from sklearn.model_selection import GridSearchCV, KFold, cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MinMaxScaler

    from sknn_gpu import FlyNNClassifier, GPUMLPClassifier, SparseNetRegressor

    sklearn.set_config(array_api_dispatch=True)
    X, y = load_digits(return_X_y=True)
    Xd, yd = cp.asarray(X, dtype=cp.float32), cp.asarray(y)

    pipe = make_pipeline(MinMaxScaler(), FlyNNClassifier(k=64, random_state=0, device="cuda"))
    pipe.fit(Xd, yd)
    pred = pipe.predict(Xd)
    assert isinstance(pred, cp.ndarray), type(pred)
    host = make_pipeline(MinMaxScaler(), FlyNNClassifier(k=64, random_state=0, device="cpu"))
    host.fit(X.astype(np.float32), y)
    agree = float((cp.asnumpy(pred) == host.predict(X.astype(np.float32))).mean())
    assert agree > 0.99, agree  # the scalers round differently on the two devices

    cv = KFold(3, shuffle=True, random_state=0)
    scores = cross_val_score(pipe, Xd, yd, cv=cv)
    assert len(scores) == 3 and float(np.min(scores)) > 0.8, scores

    fly = FlyNNClassifier(random_state=0, device="cuda")
    grid = GridSearchCV(fly, {"gamma": [0.0, 0.5], "k": [32, 64]}, cv=cv)
    grid.fit(Xd, yd)
    assert grid.best_score_ > 0.8 and set(grid.best_params_) == {"gamma", "k"}

    small = dict(hidden_layer_sizes=(32,), max_iter=30, random_state=0, device="cuda")
    mlp = make_pipeline(MinMaxScaler(), GPUMLPClassifier(**small))
    assert float(np.mean(cross_val_score(mlp, Xd, yd, cv=cv))) > 0.8

    net = make_pipeline(MinMaxScaler(), SparseNetRegressor(**small))
    r2 = cross_val_score(net, Xd, Xd[:, 10:30].sum(axis=1), cv=cv)
    assert float(np.mean(r2)) > 0.5, r2
    print("ok")
    """
)


def test_pipeline_cross_val_and_grid_search_on_cupy_data():
    env = dict(os.environ, SCIPY_ARRAY_API="1", PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, "-c", BODY], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout[-3000:] + run.stderr[-3000:]
