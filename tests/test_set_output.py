"""scikit-learn's set_output (pandas / polars DataFrames) for the two transformers.

DTCNNHalftoner gives a DataFrame for rows of flattened images (``image_shape``) and refuses
one for images, before any work; FlyHashTransformer refuses one for its sparse output, as
scikit-learn refuses sparse data in a DataFrame, naming the output that gives one. The
refusals run without pandas installed (they come first); the DataFrames need pandas.
"""

import numpy as np
import pytest
import scipy.sparse as sp
import sklearn
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import make_pipeline

from sknn_gpu import DTCNNHalftoner, FlyHashTransformer, config_context


@pytest.fixture
def rows(rng):
    """Six flattened 8 x 8 images in [0, 1]."""
    return rng.random((6, 64))


@pytest.fixture
def no_halftone(monkeypatch):
    """Fail the test if a halftone is computed."""

    def boom(self, *args, **kwargs):
        raise AssertionError("the halftone was computed before the problem was reported")

    monkeypatch.setattr(DTCNNHalftoner, "_halftone", boom)


# --------------------------------------------------------------------------- DTCNNHalftoner
@pytest.mark.parametrize("lib", ["pandas", "polars"])
def test_images_refuse_a_dataframe_before_any_work(rng, lib, no_halftone):
    img = rng.random((16, 16))
    ht = DTCNNHalftoner(device="cpu").set_output(transform=lib)
    with pytest.raises(ValueError, match=rf"{lib} output.*without image_shape.*image_shape=\(H, W\)"):
        ht.fit_transform(img)
    assert not hasattr(ht, "templates_")  # refused before fitting


def test_images_refuse_a_dataframe_from_the_global_setting_too(rng):
    img = rng.random((16, 16))
    ht = DTCNNHalftoner(device="cpu").fit(img)
    with sklearn.config_context(transform_output="pandas"):
        with pytest.raises(ValueError, match="set_output\\(transform='default'\\)"):
            ht.transform(img)
        # the estimator's own setting wins over the global one
        out = ht.set_output(transform="default").transform(img)
    assert isinstance(out, np.ndarray) and out.shape == (16, 16)


def test_default_output_is_unchanged(rows):
    ht = DTCNNHalftoner(device="cpu", image_shape=(8, 8))
    plain = ht.fit_transform(rows)
    again = ht.set_output(transform="default").fit_transform(rows)
    np.testing.assert_array_equal(plain, again)
    assert isinstance(again, np.ndarray)


def test_get_feature_names_out_names_one_column_per_pixel(rows):
    ht = DTCNNHalftoner(device="cpu", image_shape=(8, 8))
    with pytest.raises(NotFittedError):
        ht.get_feature_names_out()
    ht.fit(rows)
    names = ht.get_feature_names_out()
    assert names.dtype == object and names.tolist() == [f"x{i}" for i in range(64)]
    mine = [f"p{i}" for i in range(64)]
    assert ht.get_feature_names_out(mine).tolist() == mine
    with pytest.raises(ValueError, match="length 64"):
        ht.get_feature_names_out(mine[:10])
    assert ht.n_features_in_ == 64
    image = DTCNNHalftoner(device="cpu").fit(rows[0].reshape(8, 8))
    with pytest.raises(ValueError, match="without image_shape the halftone is an image"):
        image.get_feature_names_out()
    assert not hasattr(image, "n_features_in_")


def test_rows_refuse_a_dataframe_of_cupy_output(rows, no_halftone):
    ht = DTCNNHalftoner(device="cpu", image_shape=(8, 8), output_type="cupy").set_output(transform="pandas")
    with pytest.raises(ValueError, match="output_type='cupy'"):
        ht.fit_transform(rows)
    with config_context(output_type="cupy"):
        with pytest.raises(ValueError, match="output_type='cupy'"):
            ht.set_params(output_type=None).fit_transform(rows)


def test_rows_refuse_a_dataframe_of_a_dask_input(rows):
    da = pytest.importorskip("dask.array")
    ht = DTCNNHalftoner(device="cpu", image_shape=(8, 8)).fit(rows).set_output(transform="pandas")
    with pytest.raises(ValueError, match="pandas output of a Dask array"):
        ht.transform(da.from_array(rows, chunks=(3, 64)))


def test_rows_give_a_pandas_dataframe(rows):
    pd = pytest.importorskip("pandas")
    ht = DTCNNHalftoner(device="cpu", image_shape=(8, 8), output_dtype="uint8").set_output(transform="pandas")
    out = ht.fit_transform(rows)
    assert isinstance(out, pd.DataFrame) and out.shape == (6, 64)
    assert out.columns.tolist() == [f"x{i}" for i in range(64)] and (out.dtypes == np.uint8).all()
    np.testing.assert_array_equal(
        out.to_numpy(),
        DTCNNHalftoner(device="cpu", image_shape=(8, 8), output_dtype="uint8").fit_transform(rows),
    )
    # named pixel columns and an index carry through, one-to-one
    frame = pd.DataFrame(rows, columns=[f"pixel_{i // 8}_{i % 8}" for i in range(64)], index=list("abcdef"))
    out = ht.fit(frame).transform(frame.iloc[2:])
    assert out.index.tolist() == list("cdef") and out.columns.tolist() == frame.columns.tolist()
    with pytest.raises(ValueError, match="feature names should match"):
        ht.transform(frame.rename(columns=lambda c: c.upper()))


def test_rows_in_a_pandas_pipeline(rows):
    pd = pytest.importorskip("pandas")
    from sklearn.preprocessing import FunctionTransformer

    frame = pd.DataFrame(rows * 16, columns=[f"pixel{i}" for i in range(64)])
    pipe = make_pipeline(
        FunctionTransformer(lambda d: d / 16, feature_names_out="one-to-one"),
        DTCNNHalftoner(device="cpu", image_shape=(8, 8)),
    ).set_output(transform="pandas")
    out = pipe.fit_transform(frame)
    assert isinstance(out, pd.DataFrame) and out.columns.tolist() == frame.columns.tolist()
    assert set(np.unique(out.to_numpy()).tolist()) == {0.0, 1.0}


# --------------------------------------------------------------------------- FlyHashTransformer
@pytest.mark.parametrize("lib", ["pandas", "polars"])
def test_sparse_hash_refuses_a_dataframe_naming_the_dense_output(rng, lib, monkeypatch):
    X = rng.random((20, 6))
    fh = FlyHashTransformer(k=4, n_components=32, random_state=0, device="cpu").set_output(transform=lib)

    def boom(self, X):
        raise AssertionError("hashed before the problem was reported")

    fh.fit(X)
    monkeypatch.setattr(FlyHashTransformer, "_hash", boom)
    for call in (fh.transform, fh.fit_transform):
        with pytest.raises(
            ValueError, match=rf"{lib.capitalize()} output does not support sparse data.*output='dense'"
        ):
            call(X)


def test_sparse_hash_refuses_a_dataframe_from_the_global_setting(rng):
    X = rng.random((20, 6))
    fh = FlyHashTransformer(k=4, n_components=32, random_state=0, device="cpu").fit(X)
    with sklearn.config_context(transform_output="pandas"):
        with pytest.raises(ValueError, match="output='dense'"):
            fh.transform(X)
        assert sp.issparse(fh.set_output(transform="default").transform(X))


def test_dense_hash_gives_a_pandas_dataframe(rng):
    pd = pytest.importorskip("pandas")
    X = rng.random((20, 6))
    fh = FlyHashTransformer(k=4, n_components=32, random_state=0, device="cpu", output="dense")
    out = fh.set_output(transform="pandas").fit_transform(X)
    assert isinstance(out, pd.DataFrame) and out.shape == (20, 32)
    assert (out.sum(axis=1) == 4).all() and out.columns[0] == "flyhashtransformer0"


# --------------------------------------------------------------------------- scikit-learn's own checks
@pytest.mark.parametrize(
    "est",
    [
        DTCNNHalftoner(device="cpu", image_shape=(1, 5)),  # the checks' X: 20 rows of 5 values in [0, 1)
        FlyHashTransformer(device="cpu"),  # sparse by default: the checks accept its refusal
        FlyHashTransformer(device="cpu", output="dense", k=0.2),
    ],
    ids=["DTCNN rows", "FlyHash sparse", "FlyHash dense"],
)
@pytest.mark.parametrize(
    "check",
    [
        "check_set_output_transform",
        "check_set_output_transform_pandas",
        "check_global_output_transform_pandas",
    ],
)
def test_scikit_learn_set_output_checks(est, check):
    if "pandas" in check:
        pytest.importorskip("pandas")
    from sklearn.utils import estimator_checks

    getattr(estimator_checks, check)(type(est).__name__, est)
