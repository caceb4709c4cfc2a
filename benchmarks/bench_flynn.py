"""FlyNNClassifier: fit/predict time and accuracy, ours (GPU, CPU) vs k-NN peers on the same data.

Peers in the same process on the same split: scikit-learn ``KNeighborsClassifier``
(brute force, k = 1 and 3, all cores) and FAISS ``IndexBinaryFlat`` (exact Hamming
k-NN on the same FlyHash codes packed to bits, k = 1) when faiss is importable.
Data: digits (1,797 × 64) and a synthetic mixture (60,000 × 784: 50,000 train,
10,000 test; 10 classes of 6 Gaussian clusters each (noise 0.4 per feature) around random
sparse non-negative prototypes, clipped at 0). CPU rows on the large set are
timed once (they take seconds); GPU rows are medians of CUDA-event timings.
FlyNN runs with its defaults (population encoding over the fitted quantiles; 16,384 cells and
256 winners for the 784-feature sets, 65,536 cells and ``k='auto'`` for narrow ones; at most 16
inputs per cell; gamma=0.03 with relative decay); digits also with the papers' FlyNN (raw rows,
k=32, 256 cells per feature reading 10 % of them, gamma=0.5 ** counts). ``--only narrow``: a
16-feature table from ``make_classification`` (50,000 training rows, 10,000 queries), where
the defaults take 65,536 cells and 128 winners.

Peers as a user with a GPU would write them: brute-force 1-NN in PyTorch
(``torch.cdist`` + ``argmin``, fp32, data on the device), and on the CPU scikit-learn's
``KNeighborsClassifier`` and FAISS-CPU ``IndexFlatL2`` (exact L2 1-NN on the raw features).
The training-set sweep (``--only sweep``, GPU: 6k, 60k, 600k training rows, 10,000
queries; ``--only cpu-sweep``, CPU: 4k, 60k [, 600k] training rows, 1,000 queries) uses
synthetic FashionMNIST-shaped data (784 features, the same mixture as above, generated in
float32 blocks), not FashionMNIST itself (not available offline). A peer missing on the
machine is a row saying so; "vs strongest peer" is the ratio to the fastest peer.

Floor for GPU predict: reading the test matrix once (4 B/feature), the winner
look-ups (k × n_classes float64 per sample) and 6 launches per batch, at the H100
ceilings of DESIGN.md.
"""

import os
import time
from pathlib import Path

import numpy as np
from _harness import (
    Table,
    environment_header,
    floor_seconds,
    fmt_time,
    optional_import,
    parse_args,
    time_call,
    time_cpu,
    time_gpu,
    time_torch,
    torch_cuda,
)
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.neighbors import KNeighborsClassifier

from sknn_gpu._backend import cuda_available
from sknn_gpu.fly import PAPERS_FLYNN, FlyNNClassifier


def synthetic(n_train, n_test, d=784, n_classes=10, clusters=6, seed=0):
    rng = np.random.default_rng(seed)
    protos = rng.random((n_classes * clusters, d)) * (rng.random((n_classes * clusters, d)) < 0.15)
    n = n_train + n_test
    c = rng.integers(0, n_classes * clusters, size=n)
    X = protos[c] + 0.4 * rng.standard_normal((n, d))
    X = np.clip(X, 0, None).astype(np.float32)
    y = c % n_classes
    return X[:n_train], X[n_train:], y[:n_train], y[n_train:]


def narrow(n_train, n_test, seed=0):
    """A 16-feature table (10 classes of 2 Gaussian clusters, 12 informative features,
    ``make_classification``) split into ``(X_train, X_test, y_train, y_test)``, float32."""
    from sklearn.datasets import make_classification

    X, y = make_classification(
        n_train + n_test, 16, n_informative=12, n_classes=10, n_clusters_per_class=2, random_state=seed
    )
    X = X.astype(np.float32)
    return X[:n_train], X[n_train:], y[:n_train], y[n_train:]


def fmnist_like(n, d=784, n_classes=10, clusters=6, seed=0, block=65536):
    """``n`` rows of the same mixture as :func:`synthetic`, generated in float32 blocks
    (600,000 x 784 without float64 temporaries)."""
    rng = np.random.default_rng(seed)
    protos = (rng.random((n_classes * clusters, d)) * (rng.random((n_classes * clusters, d)) < 0.15)).astype(
        np.float32
    )
    c = rng.integers(0, n_classes * clusters, size=n)
    X = np.empty((n, d), dtype=np.float32)
    for r in range(0, n, block):
        cb = c[r : r + block]
        Xb = rng.standard_normal((cb.size, d), dtype=np.float32)
        Xb *= 0.4
        Xb += protos[cb]
        np.maximum(Xb, 0, out=Xb)
        X[r : r + block] = Xb
    return X, c % n_classes


def acc(pred, y):
    return f"acc {np.mean(np.asarray(pred) == y):.3f}"


TORCH_1NN = "PyTorch cdist + argmin 1-NN (fp32)"


def torch_1nn(torch, Xtr, ytr, Q):
    """Brute-force 1-NN: ``torch.cdist`` (its matmul form for these sizes) + ``argmin``; the
    queries go in blocks so that one distance block stays <= 2^30 floats (4 GiB)."""
    rows = max(1, min(Q.shape[0], 2**30 // Xtr.shape[0]))
    return torch.cat(
        [ytr[torch.cdist(Q[r : r + rows], Xtr).argmin(dim=1)] for r in range(0, Q.shape[0], rows)]
    )


def add_torch_1nn(table, X_train, y_train, X_test, y_test, repeat):
    """The PyTorch brute-force 1-NN peer row (data already on the device, fp32, no TF32)."""
    torch = torch_cuda()
    if torch is None:
        why = "torch not installed" if optional_import("torch") is None else "torch sees no CUDA device"
        table.add(TORCH_1NN, "cuda", None, note=why, peer=True)
        return
    _torch_1nn_row(torch, table, X_train, y_train, X_test, y_test, repeat)
    torch.cuda.empty_cache()  # the tensors are gone: give the cached blocks back


def _torch_1nn_row(torch, table, X_train, y_train, X_test, y_test, repeat):
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        Xtr = torch.from_numpy(np.ascontiguousarray(X_train, dtype=np.float32)).cuda()
        ytr = torch.from_numpy(np.asarray(y_train, dtype=np.int64)).cuda()
        Q = torch.from_numpy(np.ascontiguousarray(X_test, dtype=np.float32)).cuda()
        pred = torch_1nn(torch, Xtr, ytr, Q).cpu().numpy()
        secs = time_torch(lambda: torch_1nn(torch, Xtr, ytr, Q), repeat=repeat, warmup=1)
        rows = max(1, min(Q.shape[0], 2**30 // Xtr.shape[0]))
        table.add(
            TORCH_1NN,
            "cuda",
            secs,
            acc(pred, y_test),
            f"data on the device; queries in blocks of {rows:,}",
            peer=True,
        )
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def add_faiss_flat(table, fit_table, X_train, y_train, X_test, y_test, reps):
    """FAISS-CPU exact L2 1-NN (IndexFlatL2) on the raw features."""
    faiss = optional_import("faiss")
    name = "FAISS IndexFlatL2 1-NN"
    if faiss is None:
        table.not_installed(name, "cpu", "faiss")
        return
    Xtr = np.ascontiguousarray(X_train, dtype=np.float32)
    Q = np.ascontiguousarray(X_test, dtype=np.float32)

    def fit():
        index = faiss.IndexFlatL2(Xtr.shape[1])
        index.add(Xtr)
        return index

    index = fit()
    if fit_table is not None:
        fit_table.add(name, "cpu", time_cpu(fit, **reps), note="add (copy)", peer=True)

    def predict():
        return y_train[index.search(Q, 1)[1][:, 0]]

    table.add(
        name,
        "cpu",
        time_cpu(predict, **reps),
        acc(predict(), y_test),
        f"exact L2 on the raw features, {faiss.omp_get_max_threads()} threads",
        peer=True,
    )


def run_case(name, X_train, X_test, y_train, y_test, params, gpu, quick):
    n, d = X_test.shape
    fit_t = Table(f"{name}: fit on {X_train.shape[0]:,} × {d}", baseline="sklearn kNN (k=1)")
    pred_t = Table(
        f"{name}: predict {n:,} × {d}",
        baseline="sklearn kNN (k=1)",
    )
    ref = FlyNNClassifier(**params, device="cpu").fit(X_train, y_train)
    big = X_train.shape[0] * d > 10_000_000 or X_train.shape[0] >= 50_000  # CPU rows timed once
    reps = 3 if quick else 5
    cpu_reps = dict(repeat=1, warmup=0) if big else dict(repeat=reps)

    # peers: scikit-learn brute-force kNN (all cores)
    for kk in (1, 3):
        knn = KNeighborsClassifier(n_neighbors=kk, algorithm="brute", n_jobs=-1)
        fit_t.add(
            f"sklearn kNN (k={kk})",
            "cpu",
            time_cpu(lambda: knn.fit(X_train, y_train), repeat=reps),
            peer=True,
        )
        t0 = time.perf_counter()
        pred = knn.predict(X_test)
        once = time.perf_counter() - t0
        secs = once if big else time_cpu(lambda: knn.predict(X_test), repeat=3, warmup=0)
        pred_t.add(f"sklearn kNN (k={kk})", "cpu", secs, acc(pred, y_test), "brute, all cores", peer=True)

    # ours on the CPU
    cpu = ref
    fit_t.add("ours FlyNN", "cpu", time_cpu(lambda: cpu.fit(X_train, y_train), **cpu_reps), note="NumPy")
    t0 = time.perf_counter()
    pred_cpu = cpu.predict(X_test)
    once = time.perf_counter() - t0
    secs = once if big else time_cpu(lambda: cpu.predict(X_test), repeat=reps)
    pred_t.add("ours FlyNN", "cpu", secs, acc(pred_cpu, y_test), "NumPy")

    # FAISS exact binary k-NN on the same FlyHash codes (CPU)
    try:
        import faiss
    except ImportError:
        faiss = None
    if faiss is not None:
        m = ref.n_components_

        def codes(X):
            w = np.concatenate([w for _, w in ref._batch_winners(X)])  # the model's own codes
            dense = np.zeros((X.shape[0], m), dtype=bool)
            np.put_along_axis(dense, np.asarray(w, dtype=np.int64), True, axis=1)
            return np.packbits(dense, axis=1)

        nbits = ((m + 7) // 8) * 8

        def faiss_fit():
            index = faiss.IndexBinaryFlat(nbits)
            index.add(codes(X_train))
            return index

        index = faiss_fit()
        fit_t.add(
            "FAISS IndexBinaryFlat", "cpu", time_cpu(faiss_fit, **cpu_reps), note="hash + add", peer=True
        )

        def faiss_predict():
            _, idx = index.search(codes(X_test), 1)
            return y_train[idx[:, 0]]

        pred_t.add(
            "FAISS IndexBinaryFlat",
            "cpu",
            time_cpu(faiss_predict, **cpu_reps),
            acc(faiss_predict(), y_test),
            "hash + exact Hamming 1-NN",
            peer=True,
        )
    else:
        pred_t.not_installed("FAISS IndexBinaryFlat", "cpu", "faiss")
    add_faiss_flat(pred_t, fit_t, X_train, y_train, X_test, y_test, cpu_reps)
    add_torch_1nn(pred_t, X_train, y_train, X_test, y_test, repeat=reps * 2)

    if gpu:
        import cupy as cp

        Xtr_d, Xte_d = cp.asarray(X_train), cp.asarray(X_test)
        clf = FlyNNClassifier(**params, device="cuda").fit(Xtr_d, y_train)
        same = np.array_equal(cp.asnumpy(clf.counts_), ref.counts_)
        fit_t.add(
            "ours FlyNN",
            "cuda",
            time_gpu(lambda: clf.fit(Xtr_d, y_train), repeat=reps * 2),
            "counts == CPU" if same else "counts DIFFER from CPU",
            "CUDA events, data on device",
        )
        pred_gpu = cp.asnumpy(clf.predict(Xte_d))
        parity = np.array_equal(pred_gpu, pred_cpu)
        pred_t.add(
            "ours FlyNN",
            "cuda",
            time_gpu(lambda: clf.predict(Xte_d), repeat=reps * 4),
            acc(pred_gpu, y_test) + (" (== CPU)" if parity else " (DIFFERS from CPU)"),
            "CUDA events, data on device",
        )
        fast = FlyNNClassifier(**{**params, "precision": "fast"}, device="cuda").fit(Xtr_d, y_train)
        fit_t.add(
            "ours FlyNN, precision='fast'",
            "cuda",
            time_gpu(lambda: fast.fit(Xtr_d, y_train), repeat=reps * 2),
            "float16 tensor-core hash",
            "CUDA events, data on device",
        )
        pred_fast = cp.asnumpy(fast.predict(Xte_d))
        pred_t.add(
            "ours FlyNN, precision='fast'",
            "cuda",
            time_gpu(lambda: fast.predict(Xte_d), repeat=reps * 4),
            acc(pred_fast, y_test) + f" ({np.mean(pred_fast == pred_gpu):.1%} = exact)",
            "float16 tensor-core hash",
        )
        del fast
        pred_t.add(
            "ours FlyNN call",
            "cuda",
            time_call(lambda: clf.predict(X_test), repeat=reps * 2, device="cuda"),
            "",
            "NumPy in/out: includes H2D copy + sync",
        )
        # where the predict time goes (one batch of the whole test set)
        from sknn_gpu.fly import _flynn_cuda

        if clf.encoding is not None:  # what the hash reads: the encoding, or the normalised rows
            stage = (
                "input encoding",
                "flynn.cu flynn_encode, one pass to float32",
                lambda: clf._encode(Xte_d),
            )
        else:
            stage = (
                "row normalisation",
                "flynn.cu, one warp per row",
                lambda: _flynn_cuda.row_normalize(Xte_d),
            )
        Xn = stage[2]()
        w = clf.hasher_._winners(Xn)
        fT = cp.ascontiguousarray(clf.filters_.T)
        pred_t.add(
            f"  of which: {stage[0]}",
            "cuda",
            time_gpu(stage[2], repeat=reps * 4),
            "",
            stage[1],
        )
        pred_t.add(
            "  of which: FlyHash winners",
            "cuda",
            time_gpu(lambda: clf.hasher_._winners(Xn), repeat=reps * 4),
            "",
            "flyhash.cu (FlyHashTransformer)",
        )
        pred_t.add(
            "  of which: novelty + argmin",
            "cuda",
            time_gpu(lambda: _flynn_cuda.nearest_class(w, fT), repeat=reps * 4),
            "",
            "flynn.cu (fused for <= 32 classes)",
        )
        n_classes = len(clf.classes_)
        batches = -(-n // clf.batch_size)
        pred_t.floor = floor_seconds(
            bytes_moved=n * d * 4 + n * clf.k_ * (4 + 8 * n_classes), launches=6 * batches
        )
        pred_t.floor_note = "(read X once + k·n_classes float64 look-ups per sample + 6 launches per batch)"
    else:
        pred_t.baseline = fit_t.baseline
    fit_t.print()
    pred_t.print()


def _once_or_median(fn, reps):
    """(seconds, result): one timed call when ``reps`` says one run, else the median of several."""
    if reps.get("repeat", 1) == 1 and not reps.get("warmup", 1):
        t0 = time.perf_counter()
        out = fn()
        return time.perf_counter() - t0, out
    out = fn()
    return time_cpu(fn, **reps), out


SWEEP_PARAMS = dict(random_state=0)  # the defaults


def gpu_sweep(sizes, n_queries, gpu, quick):
    """GPU: FlyNN predict vs PyTorch brute-force 1-NN as the training set grows."""
    X, y = fmnist_like(max(sizes) + n_queries, seed=1)
    Q, yq = X[-n_queries:], y[-n_queries:]
    reps = 3 if quick else 5
    for n in sizes:
        Xtr, ytr = X[:n], y[:n]
        t = Table(
            f"Training-set sweep (GPU): {n:,} training rows × 784 (synthetic, FashionMNIST-shaped), "
            f"predict {n_queries:,} queries",
            baseline="ours FlyNN predict (GPU)" if gpu else None,
        )
        if gpu:
            import cupy as cp

            Xd, Qd = cp.asarray(Xtr), cp.asarray(Q)
            clf = FlyNNClassifier(**SWEEP_PARAMS, device="cuda").fit(Xd, ytr)
            t_fit = time_gpu(lambda: clf.fit(Xd, ytr), repeat=reps, warmup=1)  # noqa: B023 (called at once)
            pred = cp.asnumpy(clf.predict(Qd))
            t.add(
                "ours FlyNN predict (GPU)",
                "cuda",
                time_gpu(lambda: clf.predict(Qd), repeat=reps * 4),  # noqa: B023 (called at once)
                acc(pred, yq),
                f"CUDA events, data on the device; fit on {n:,} rows: {fmt_time(t_fit)}",
            )
            clf.set_params(precision="fast")  # read at every call: same model, fast hash
            pred_fast = cp.asnumpy(clf.predict(Qd))
            t.add(
                "ours FlyNN predict (GPU), precision='fast'",
                "cuda",
                time_gpu(lambda: clf.predict(Qd), repeat=reps * 4),  # noqa: B023 (called at once)
                acc(pred_fast, yq) + f" ({np.mean(pred_fast == pred):.1%} = exact)",
                "float16 tensor-core hash",
            )
            del Xd, Qd, clf
            cp.get_default_memory_pool().free_all_blocks()
        else:
            t.add("ours FlyNN predict (GPU)", "cuda", None, note="no GPU here")
        add_torch_1nn(t, Xtr, ytr, Q, yq, repeat=reps)
        t.print()


def cpu_sweep(sizes, n_queries):
    """CPU: FlyNN (NumPy) vs scikit-learn 1-NN and FAISS IndexFlatL2 as the training set grows."""
    X, y = fmnist_like(max(sizes) + n_queries, seed=2)
    Q, yq = X[-n_queries:], y[-n_queries:]
    for n in sizes:
        Xtr, ytr = X[:n], y[:n]
        reps = dict(repeat=1, warmup=0) if n * 784 > 10_000_000 else dict(repeat=3, warmup=1)
        t = Table(
            f"Training-set sweep (CPU): {n:,} training rows × 784 (synthetic, FashionMNIST-shaped), "
            f"predict {n_queries:,} queries",
            baseline="ours FlyNN predict (CPU)",
        )
        clf = FlyNNClassifier(**SWEEP_PARAMS, device="cpu")
        t_fit, _ = _once_or_median(lambda: clf.fit(Xtr, ytr), reps)  # noqa: B023 (called at once)
        secs, pred = _once_or_median(lambda: clf.predict(Q), reps)  # noqa: B023 (called at once)
        runs = "once" if reps["repeat"] == 1 else f"median of {reps['repeat']}"
        t.add(
            "ours FlyNN predict (CPU)",
            "cpu",
            secs,
            acc(pred, yq),
            f"NumPy, {runs}; fit on {n:,} rows: {fmt_time(t_fit)}",
        )
        knn = KNeighborsClassifier(n_neighbors=1, algorithm="brute", n_jobs=-1).fit(Xtr, ytr)
        secs, pred = _once_or_median(lambda: knn.predict(Q), reps)  # noqa: B023 (called at once)
        t.add("sklearn kNN (k=1)", "cpu", secs, acc(pred, yq), f"brute, all cores, {runs}", peer=True)
        add_faiss_flat(t, None, Xtr, ytr, Q, yq, reps)
        t.print()


def load_fashion_mnist(folder):
    """``(X_train, X_test, y_train, y_test)`` of Fashion-MNIST (float32 pixels 0..255; the
    standard 60,000 / 10,000 split) from the four ``*-ubyte.gz`` files of its distribution in
    ``folder``, or None without one."""
    import gzip

    if not folder:
        return None
    path = Path(folder)

    def read(name, offset):
        with gzip.open(path / name) as f:
            return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)

    try:
        X = read("train-images-idx3-ubyte.gz", 16).reshape(-1, 784).astype(np.float32)
        Xt = read("t10k-images-idx3-ubyte.gz", 16).reshape(-1, 784).astype(np.float32)
        y = read("train-labels-idx1-ubyte.gz", 8).astype(np.int64)
        yt = read("t10k-labels-idx1-ubyte.gz", 8).astype(np.int64)
    except FileNotFoundError:
        return None
    return X, Xt, y, yt


def _ints(text):
    return [int(v) for v in text.split(",") if v]


def main(argv=None):
    import argparse

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument(
        "--only",
        default=None,
        help="comma list of digits, narrow, synthetic, sweep (GPU training-set sweep), cpu-sweep, "
        "fashion (real Fashion-MNIST, with --fashion-dir); default: all",
    )
    pre.add_argument(
        "--fashion-dir",
        default=os.environ.get("SKNN_FASHION_MNIST"),
        help="folder holding Fashion-MNIST's four *-ubyte.gz files (default: $SKNN_FASHION_MNIST)",
    )
    pre.add_argument("--sizes", default=None, help="GPU sweep training rows (default 6000,60000,600000)")
    pre.add_argument("--queries", type=int, default=None, help="GPU sweep queries (default 10000)")
    pre.add_argument("--cpu-sizes", default=None, help="CPU sweep training rows (default 4000,60000)")
    pre.add_argument("--cpu-queries", type=int, default=None, help="CPU sweep queries (default 1000)")
    extra, rest = pre.parse_known_args(argv)
    args = parse_args(__doc__.splitlines()[0], rest)
    print(environment_header() + "\n")
    gpu = cuda_available() and args.device != "cpu"
    only = (
        set(extra.only.split(",")) if extra.only else {"digits", "narrow", "synthetic", "sweep", "cpu-sweep"}
    )
    if "sweep" in only:
        sizes = (
            _ints(extra.sizes)
            if extra.sizes
            else ([2_000, 6_000] if args.quick else [6_000, 60_000, 600_000])
        )
        gpu_sweep(sizes, extra.queries or (1_000 if args.quick else 10_000), gpu, args.quick)
    if "cpu-sweep" in only:
        sizes = (
            _ints(extra.cpu_sizes) if extra.cpu_sizes else ([1_000, 4_000] if args.quick else [4_000, 60_000])
        )
        cpu_sweep(sizes, extra.cpu_queries or (200 if args.quick else 1_000))
    if "digits" in only:
        X, y = load_digits(return_X_y=True)
        X = X.astype(np.float32)
        parts = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
        run_case("digits (defaults)", *parts, params=dict(random_state=0), gpu=gpu, quick=args.quick)
        papers = PAPERS_FLYNN
        run_case(
            "digits (the papers' FlyNN)",
            *parts,
            params=dict(papers, random_state=0),
            gpu=gpu,
            quick=args.quick,
        )
    if "narrow" in only:
        n_train, n_test = (5_000, 1_000) if args.quick else (50_000, 10_000)
        parts = narrow(n_train, n_test)
        params = dict(random_state=0)
        run_case("narrow mixture, 16 features (defaults)", *parts, params=params, gpu=gpu, quick=args.quick)
    if "fashion" in only:
        data = load_fashion_mnist(extra.fashion_dir)
        if data is None:
            print(
                "### Fashion-MNIST: skipped\n\nGive --fashion-dir DIR with the four files of the "
                "standard distribution (train-images-idx3-ubyte.gz, ...).\n"
            )
        else:
            params = dict(random_state=0)
            run_case("Fashion-MNIST (defaults)", *data, params=params, gpu=gpu, quick=args.quick)
    if "synthetic" not in only:
        return

    n_train, n_test = (5_000, 1_000) if args.quick else (50_000, 10_000)
    parts = synthetic(n_train, n_test)
    run_case("synthetic mixture (defaults)", *parts, params=dict(random_state=0), gpu=gpu, quick=args.quick)


if __name__ == "__main__":
    main()
