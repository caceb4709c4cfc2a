"""Quickstart demo: every estimator on real offline data with ``device='auto'``.

Run with ``python -m sknn_gpu.demo`` (or ``make demo``). Prints a short table:
estimator, device, wall time and a quality figure. Each estimator contributes one
``_demo_*`` function listed in ``CASES``.
"""

from __future__ import annotations

import sys
import time

from ._backend import cuda_available, cuda_unavailable_reason, resolve_device

CASES = []  # functions returning dict(estimator=, data=, device=, seconds=, quality=)


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _demo_flynn(device):
    """FlyNNClassifier on digits: three parties fit separately and merge in one shot."""
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    from .fly import FlyNNClassifier, merge_flynn

    X, y = load_digits(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)

    def work():
        parts = np.array_split(np.arange(len(y_train)), 3)
        # the parties share the projection and the pixels' range (0..16), so their counts add up
        params = dict(input_range=(0, 16), random_state=0, device=device)
        models = [FlyNNClassifier(**params).fit(X_train[p], y_train[p]) for p in parts]
        merged = merge_flynn(models)
        return merged, merged.score(X_test, y_test)

    (merged, acc), seconds = _timed(work)
    return dict(
        estimator="FlyNNClassifier",
        data="digits (3 parties, merged)",
        device=merged.device_,
        seconds=seconds,
        quality=f"accuracy {acc:.3f}",
    )


CASES.append(_demo_flynn)


def _demo_flyhash(device):
    """FlyHashTransformer on digits: 10 nearest neighbours by Hamming distance of the codes."""
    import numpy as np
    from sklearn.datasets import load_digits

    from .fly import FlyHashTransformer

    X, y = load_digits(return_X_y=True)
    fh = FlyHashTransformer(expansion_factor=20.0, k=32, output="packed", random_state=0, device=device)
    codes, seconds = _timed(lambda: fh.fit_transform(X))
    bits = np.unpackbits(np.asarray(codes if not hasattr(codes, "get") else codes.get()), axis=1)
    shared = bits.astype(np.int32) @ bits.T.astype(np.int32)  # winners in common
    np.fill_diagonal(shared, -1)
    nn = np.argsort(-shared, axis=1, kind="stable")[:, :10]
    agree = float(np.mean(y[nn] == y[:, None]))
    return dict(
        estimator="FlyHashTransformer",
        data="digits (1280-bit codes, k=32)",
        device=fh.device_,
        seconds=seconds,
        quality=f"10-NN same label {agree:.3f}",
    )


CASES.append(_demo_flyhash)


def _demo_gbnn(device):
    """GBNNMemory on digits: every image as 16 symbols (2x2 blocks, 4 grey levels), 4 blocks erased."""
    import numpy as np
    from sklearn.datasets import load_digits

    from .memory import GBNNMemory

    q = np.minimum(load_digits().images // 4, 3).astype(np.int64)
    blocks = q.reshape(-1, 4, 2, 4, 2).transpose(0, 1, 3, 2, 4).reshape(-1, 16, 4)
    messages = (blocks * 4 ** np.arange(4)).sum(axis=-1)  # (1797, 16), symbols in [0, 256)
    rng = np.random.default_rng(0)
    probes = messages.copy()
    np.put_along_axis(probes, np.argsort(rng.random(probes.shape), axis=1)[:, :4], -1, axis=1)

    def work():
        mem = GBNNMemory(cluster_size=256, random_state=0, device=device).fit(messages)
        return mem, mem.score(probes, messages)

    (mem, rate), seconds = _timed(work)
    return dict(
        estimator="GBNNMemory",
        data="digits as 16-symbol messages, 4 erased",
        device=mem.device_,
        seconds=seconds,
        quality=f"exact completion {rate:.3f}",
    )


CASES.append(_demo_gbnn)


def _demo_dtcnn(device):
    """DTCNNHalftoner on scikit-learn's china.jpg (grey, 256 x 256 crop) vs Pillow Floyd-Steinberg."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_sample_image

    from .halftone import DTCNNHalftoner
    from .metrics import hvs_psnr

    rgb = load_sample_image("china.jpg")
    img = (rgb @ np.array([0.299, 0.587, 0.114])).round().astype(np.uint8)[100:356, 150:406]
    ht = DTCNNHalftoner(device=device)
    out, seconds = _timed(lambda: ht.fit_transform(img))
    fs = np.asarray(Image.fromarray(img).convert("1"))
    return dict(
        estimator="DTCNNHalftoner",
        data="china.jpg grey 256x256",
        device=ht.device_,
        seconds=seconds,
        quality=f"HVS-PSNR {hvs_psnr(img, out):.2f} dB (Floyd-Steinberg {hvs_psnr(img, fs):.2f})",
    )


CASES.append(_demo_dtcnn)


def _demo_sparsenet(device):
    """SparseNetRegressor on friedman1: a 64x64 MLP pruned to 10% of its edges, R² on fresh samples."""
    import warnings

    from sklearn.datasets import make_friedman1
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.metrics import r2_score

    from .sparse import SparseNetRegressor

    X, y = make_friedman1(n_samples=1000, random_state=0)
    X_test, y_test = make_friedman1(n_samples=1000, random_state=1)
    reg = SparseNetRegressor(
        hidden_layer_sizes=(64, 64),
        density=0.1,
        max_iter=60,
        learning_rate_init=5e-3,
        n_prune_steps=2,
        fine_tune_iter=20,
        random_state=0,
        device=device,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        _, seconds = _timed(lambda: reg.fit(X, y))
    return dict(
        estimator="SparseNetRegressor",
        data=f"friedman1 ({reg.n_edges_} of {reg.n_dense_edges_} edges, {reg.n_levels_} levels)",
        device=reg.device_,
        seconds=seconds,
        quality=f"R² {r2_score(y_test, reg.predict(X_test)):.3f}",
    )


CASES.append(_demo_sparsenet)


def run(cases=None, device="auto"):
    """Run the demo cases and return their result rows."""
    rows = []
    for case in cases if cases is not None else CASES:
        rows.append(case(device))
    return rows


def format_table(rows):
    header = ("estimator", "data", "device", "time", "quality")
    body = [
        (r["estimator"], r["data"], r["device"], f"{r['seconds'] * 1e3:.1f} ms", r["quality"]) for r in rows
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
    fmt = "| " + " | ".join(f"{{:<{w}}}" for w in widths) + " |"
    lines = [fmt.format(*header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += [fmt.format(*row) for row in body]
    return "\n".join(lines)


def _demo_mlp(device):
    """GPUMLPClassifier on digits: 64 hidden units, 30 epochs of SGD, held-out accuracy."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    from .neural_network import GPUMLPClassifier

    X, y = load_digits(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X / 16.0, y, test_size=0.25, random_state=0)
    clf = GPUMLPClassifier(
        (64,), solver="sgd", learning_rate_init=0.1, max_iter=30, random_state=0, device=device
    )
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, seconds = _timed(lambda: clf.fit(Xtr, ytr))
    return dict(
        estimator="GPUMLPClassifier",
        data="digits (64-64-10, 30 epochs)",
        device=clf.device_,
        seconds=seconds,
        quality=f"test accuracy {clf.score(Xte, yte):.3f}",
    )


CASES.append(_demo_mlp)


def main(argv=None):
    device = resolve_device("auto")
    print(f"sknn_gpu demo: device='auto' resolves to {device!r}", end="")
    print("" if cuda_available() else f" ({cuda_unavailable_reason()})")
    rows = run()
    if not rows:
        print("No estimators are registered in sknn_gpu.demo.CASES yet.")
        return 0
    print(format_table(rows))
    if any(r["device"] == "cuda" for r in rows):
        print(
            "GPU times include each kernel's one-time compilation in a fresh process; "
            "see docs/performance.md for steady-state timings."
        )
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
