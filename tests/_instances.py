"""The one place for common-check configuration (imbalanced-learn's instance-generator pattern).

``INSTANCE_PARAMS``: constructor arguments used when the common checks build an
estimator (small, seeded, fast). ``EXPECTED_FAILED_CHECKS``: every scikit-learn
common check an estimator is known to fail, with the reason. ``DEFAULT_INSTANCES``:
the estimators whose checks also run on their defaults (what
``check_estimator(cls(device='cpu'))`` sees), with the checks those defaults fail by
design in ``EXPECTED_FAILED_CHECKS_ON_DEFAULTS`` (on top of the estimator's entries in
``EXPECTED_FAILED_CHECKS``, which hold for every instance). Each estimator owns its own entries;
nothing else in the test suite may xfail a common check.
"""

INSTANCE_PARAMS = {
    # k as a fraction works for any n_features (the checks fit 1-feature data); dense output
    # because pandas/polars set_output cannot hold sparse matrices.
    "FlyHashTransformer": {"k": 0.2, "output": "dense", "random_state": 0},
    # small and fast: the common checks fit many tiny problems
    "GPUMLPClassifier": {
        "hidden_layer_sizes": (16,),
        "max_iter": 100,
        "learning_rate_init": 0.01,
        "random_state": 0,
    },
    # k as a fraction of the hash length works for any n_features (the checks fit 1-feature data);
    # 1,024 cells instead of 8,192: the same code, an eighth of the work in the ~70 checks
    "FlyNNClassifier": {"k": 0.2, "n_components": 1024, "random_state": 0},
    # small dense net pruned to half: the checks fit many tiny problems
    "SparseNetRegressor": {
        "hidden_layer_sizes": (16,),
        "density": 0.5,
        "max_iter": 100,
        "learning_rate_init": 0.01,
        "n_prune_steps": 2,
        "fine_tune_iter": 20,
        "random_state": 0,
    },
    # "EstimatorName": {"random_state": 0, ...},
}

# DTCNNHalftoner takes images, not (n_samples, n_features) tables: a 2-D float array in
# [0, 1] is one image. The checks below feed tabular floats outside [0, 1] (make_blobs
# style), which an image refuses by design; the property each check targets is tested
# on real images in tests/test_dtcnn.py.
_DTCNN_RANGE = (
    "feeds floats outside [0, 1]; an image must hold intensities in [0, 1] and anything else "
    "is refused by design with a clear error (test_dtcnn.py::test_bad_images_raise_clear_errors)"
)
_DTCNN_NOT_ROWS = (
    "an image is not a set of independent rows: halftoning diffuses error between neighbouring "
    "rows, so permuting or cropping rows does not permute or crop the halftone"
)
_DTCNN_NO_FEATURES = "no n_features_in_: images of any size are accepted; the width is not a feature count"
# With the checks' inputs rescaled into [0, 1] (an experiment, not a test), every check
# below passes except five, which then fail for a second by-design reason: the two
# n_features_in_ checks and check_transformer_general (a transform on an image of another
# width is accepted: _DTCNN_NO_FEATURES) and the two invariance checks (_DTCNN_NOT_ROWS).
_DTCNN_XFAIL = {
    name: _DTCNN_RANGE
    for name in (
        "check_dict_unchanged",  # transform keeps attributes: test_transform_leaves_attributes_alone...
        "check_dont_overwrite_parameters",
        "check_estimators_dtypes",  # dtypes: test_uint8_in_uint8_out_and_float32_kept
        "check_estimators_fit_returns_self",
        "check_estimators_overwrite_params",
        "check_estimators_pickle",  # pickling: test_transform_leaves_attributes_alone_and_pickles
        "check_f_contiguous_array_estimator",
        "check_fit2d_1feature",
        "check_fit2d_1sample",
        "check_fit2d_predict1d",  # 1-D is refused, "Reshape your data": test_one_dimensional_input...
        "check_fit_check_is_fitted",
        "check_fit_idempotent",
        "check_pipeline_consistency",
        "check_readonly_memmap_input",
        "check_transformer_data_not_an_array",
        "check_transformer_n_iter",  # n_iter_: test_async_converges_to_a_fixed_point
        "check_transformer_preserve_dtypes",
    )
}
_DTCNN_XFAIL.update(
    {
        "check_transformer_general": f"{_DTCNN_RANGE}; and then {_DTCNN_NO_FEATURES}",
        "check_methods_sample_order_invariance": _DTCNN_NOT_ROWS,
        "check_methods_subset_invariance": _DTCNN_NOT_ROWS,
        "check_n_features_in": _DTCNN_NO_FEATURES,
        "check_n_features_in_after_fitting": _DTCNN_NO_FEATURES,
    }
)

#: scikit-learn before 1.7: its check_positive_only_tag_during_fit subtracts a float mean from
#: the integer messages its own tags made, in place, which NumPy refuses before GBNNMemory
#: sees them (the check passes from 1.7 on).
_OLD_SKLEARN_GBNN = (
    {
        "check_positive_only_tag_during_fit": (
            "scikit-learn < 1.7's check subtracts a float mean in place from the integer X its "
            "tags made (a casting error inside the check, before fit is called)"
        )
    }
    if tuple(int(p) for p in __import__("sklearn").__version__.split(".")[:2]) < (1, 7)
    else {}
)

EXPECTED_FAILED_CHECKS = {
    "DTCNNHalftoner": _DTCNN_XFAIL,
    "GBNNMemory": {
        name: (
            "the check sets n_clusters to 1 or 2 (assuming a clustering parameter) and then fits "
            "data with more columns; GBNNMemory's n_clusters is the number of symbols per message "
            "and a mismatch is refused by design. Order/subset invariance of predict is tested in "
            "tests/test_gbnn.py::test_prediction_invariant_to_probe_order_and_batching"
        )
        for name in (
            "check_dont_overwrite_parameters",
            "check_fit2d_1sample",
            "check_fit2d_predict1d",
            "check_methods_sample_order_invariance",
            "check_methods_subset_invariance",
        )
    }
    | {
        name: (
            "score(X, y) needs the true messages y of shape (n_samples, n_clusters); the check "
            "passes a 1-D class vector"
        )
        for name in ("check_fit_score_takes_y", "check_pipeline_consistency")
    }
    | _OLD_SKLEARN_GBNN,
    "FlyNNClassifier": dict.fromkeys(
        ("check_sample_weight_equivalence_on_dense_data", "check_sample_weight_equivalence_on_sparse_data"),
        (
            "the counts, filters and predictions of a weight w are those of the row repeated w "
            "times, bit for bit (test_flynn.py::test_whole_number_weights_equal_repeated_rows); "
            "predict_proba's scale is chosen on held-out folds, where w repeated copies fall in "
            "different folds and each is scored by a model that saw its twins, which one weighted "
            "row is not, so the probabilities' scale may differ"
        ),
    ),
    # "EstimatorName": {"check_name": "why it cannot pass"},
}


#: Estimators whose common checks also run on the defaults, ``cls(device='cpu')``.
DEFAULT_INSTANCES = ("FlyHashTransformer", "FlyNNClassifier", "GBNNMemory", "DTCNNHalftoner")

# Six checks set n_components=1, as for a decomposition, and keep the estimator's other
# parameters: FlyHash's and FlyNN's default k is a count of winners (32 and 256).
_FLY_K_OVER_M = (
    "the check sets n_components=1 (as for a decomposition) and keeps the default integer k "
    "(32 winners for FlyHash, 256 for FlyNN): more winners than units is refused by design with a "
    "ValueError that says so (k <= n_components; test_flyhash.py::test_k_out_of_range_is_refused), "
    "since a hash whose every unit wins gives every sample the same code. With k as a fraction of "
    "the units (the instance in INSTANCE_PARAMS) the same checks pass"
)
_FLY_N_COMPONENTS_ONE = (
    "check_dont_overwrite_parameters",
    "check_fit2d_1feature",  # 1 feature would be fine: the refusal is k > n_components=1
    "check_fit2d_1sample",  # likewise for 1 sample
    "check_fit2d_predict1d",
    "check_methods_sample_order_invariance",
    "check_methods_subset_invariance",
)
EXPECTED_FAILED_CHECKS_ON_DEFAULTS = {
    "FlyHashTransformer": dict.fromkeys(_FLY_N_COMPONENTS_ONE, _FLY_K_OVER_M),
    "FlyNNClassifier": dict.fromkeys(_FLY_N_COMPONENTS_ONE, _FLY_K_OVER_M)
    | {
        name: "as for every instance (EXPECTED_FAILED_CHECKS): predict_proba's held-out scale"
        for name in (
            "check_sample_weight_equivalence_on_dense_data",
            "check_sample_weight_equivalence_on_sparse_data",
        )
    },
    # The checks instance differs from the defaults only in random_state=0, so the defaults
    # fail exactly the checks listed for every instance in EXPECTED_FAILED_CHECKS (GBNN: 7;
    # DT-CNN: 22 names, 24 results, as two checks run twice), and nothing more.
    "GBNNMemory": {},
    "DTCNNHalftoner": {},
}


def make_default_instance(cls):
    """The estimator with its default parameters, pinned to the CPU."""
    return cls(device="cpu")


def _is_default_instance(estimator):
    defaults = {**type(estimator)().get_params(deep=False), "device": "cpu"}
    return estimator.get_params(deep=False) == defaults


def make_instance(cls):
    """Seeded, CPU-pinned instance used by the common checks."""
    params = {"device": "cpu"}
    params.update(INSTANCE_PARAMS.get(cls.__name__, {}))
    if "random_state" in cls().get_params() and "random_state" not in params:
        params["random_state"] = 0
    return cls(**params)


def expected_failed_checks(estimator):
    name = type(estimator).__name__
    expected = dict(EXPECTED_FAILED_CHECKS.get(name, {}))
    if _is_default_instance(estimator):
        expected.update(EXPECTED_FAILED_CHECKS_ON_DEFAULTS.get(name, {}))
    return expected
