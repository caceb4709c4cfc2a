# The two commands a user needs are `make demo` and `make test`; both set up .venv themselves.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip install --quiet --disable-pip-version-check

.PHONY: demo examples newcomer test test-fast test-sklearn-oldest test-sklearn-latest docs docs-check lint format gpu-check gpu-test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# demo install: the package, its runtime dependencies and the demo extra (Pillow for the photos)
$(VENV)/.base-installed: pyproject.toml setup.cfg | $(BIN)/python
	$(PIP) -e ".[demo]"
	@touch $@

# development install: test + docs extras on top
$(VENV)/.dev-installed: pyproject.toml setup.cfg | $(BIN)/python
	$(PIP) -e ".[demo,test,docs,dev]"
	@touch $(VENV)/.base-installed $@

demo: $(VENV)/.base-installed
	$(BIN)/python -m sknn_gpu.demo

# every script in examples/, as a user runs it, with the examples extra (matplotlib, Dask, FAISS,
# scikit-image); the figures go to $(EXAMPLES_OUTPUT), drawn with Agg (no window opens).
# `make examples SKNN_GPU_EXAMPLES_SMALL=1` runs each at a small size, in seconds.
EXAMPLES_OUTPUT ?= sknn_gpu_examples_output
$(VENV)/.examples-installed: pyproject.toml setup.cfg | $(BIN)/python
	$(PIP) -e ".[demo,examples]"
	@touch $(VENV)/.base-installed $@

examples: $(VENV)/.examples-installed
	@failed=""; for f in examples/[!_]*.py; do \
	  echo "== $$f"; \
	  MPLBACKEND=Agg SKNN_GPU_EXAMPLES_OUTPUT="$(abspath $(EXAMPLES_OUTPUT))" $(BIN)/python "$$f" \
	    || failed="$$failed $$f"; \
	done; \
	echo "figures: $(abspath $(EXAMPLES_OUTPUT))"; \
	if [ -n "$$failed" ]; then echo "failed:$$failed"; exit 1; fi

# a newcomer's first hour in one command, without .venv: a git clone of HEAD in a temporary
# folder, a new virtual environment, the README's install (pip install ".[examples]", from the
# package index) and every example at its small size, each checked for its figures.
# NEWCOMER_ARGS="--jobs 2" runs two examples at a time; "--offline" downloads nothing (the wheel
# and the dependencies of $(PYTHON)'s environment: what tests/test_newcomer.py runs)
NEWCOMER_ARGS ?=
newcomer:
	$(PYTHON) scripts/newcomer.py $(NEWCOMER_ARGS)

test: $(VENV)/.dev-installed
	$(BIN)/python -m pytest -q -p no:cacheprovider
	$(MAKE) --no-print-directory docs-check

test-fast: $(VENV)/.dev-installed
	$(BIN)/python -m pytest -q -x -m "not slow"

# the fast tests against the oldest supported scikit-learn (the lower bound in pyproject.toml),
# in their own environment $(OLDEST_VENV); the sources are the checkout's (python -m pytest)
OLDEST_VENV ?= .venv-sklearn-oldest
SKLEARN_OLDEST ?= 1.6
OLDEST_TESTS ?= tests
test-sklearn-oldest:
	test -x $(OLDEST_VENV)/bin/python || $(PYTHON) -m venv $(OLDEST_VENV)
	$(OLDEST_VENV)/bin/python -m pip install --quiet --disable-pip-version-check ".[test]" "scikit-learn~=$(SKLEARN_OLDEST).0"
	$(OLDEST_VENV)/bin/python -c "import sklearn; print('scikit-learn', sklearn.__version__)"
	$(OLDEST_VENV)/bin/python -m pytest -q -p no:cacheprovider -m "not slow" $(OLDEST_TESTS)

# the scikit-learn-facing fast tests (the estimator checks over all six, our parameter
# validation and checks, set_output, model selection, the MLP beside scikit-learn's, the
# private-import rule) against the newest scikit-learn release on the package index, in their own
# environment $(LATEST_VENV) (pyproject.toml sets no upper bound). Not part of `make test`
# (.ci/run), to keep CI's time; SKLEARN_PRE=1 takes a pre-release, LATEST_TESTS=tests everything.
LATEST_VENV ?= .venv-sklearn-latest
LATEST_TESTS ?= tests/test_common.py tests/test_sklearn_compat.py tests/test_release.py \
  tests/test_set_output.py tests/test_gbnn_model_selection.py tests/test_mlp.py tests/test_architecture.py
test-sklearn-latest:
	test -x $(LATEST_VENV)/bin/python || $(PYTHON) -m venv $(LATEST_VENV)
	$(LATEST_VENV)/bin/python -m pip install --quiet --disable-pip-version-check ".[test]"
	$(LATEST_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --upgrade \
	  $(if $(filter-out 0,$(SKLEARN_PRE)),--pre) scikit-learn
	$(LATEST_VENV)/bin/python -c "import sklearn; print('scikit-learn', sklearn.__version__)"
	$(LATEST_VENV)/bin/python -m pytest -q -p no:cacheprovider -m "not slow" $(LATEST_TESTS)

# full docs with the gallery executed
docs: $(VENV)/.dev-installed
	$(BIN)/sphinx-build -b html docs docs/_build/html

# docs build check used by `make test`: warnings are errors; gallery examples are not executed;
# a fresh environment (-E), because autosummary writes the stubs of a page added since the last
# build only when it reads every page anew
docs-check: $(VENV)/.dev-installed
	$(BIN)/sphinx-build -E -W --keep-going -q -b html -D plot_gallery=0 docs docs/_build/html-check

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check sknn_gpu tests benchmarks examples docs/conf.py
	$(BIN)/ruff format --check sknn_gpu tests benchmarks examples

format: $(VENV)/.dev-installed
	$(BIN)/ruff check --fix sknn_gpu tests benchmarks examples
	$(BIN)/ruff format sknn_gpu tests benchmarks examples

# on the accelerator machine (CuPy preinstalled there): cuda tests + all benchmarks
gpu-check:
	bash scripts/gpu_check.sh

# on the accelerator machine (CuPy preinstalled, no venv): the cuda-marked tests alone, slowest ten listed.
# With pytest-xdist installed (the test extra) the files are spread over GPU_WORKERS processes
# sharing the one GPU: most of the suite's time is compiling each kernel variant once (a fresh
# machine has an empty kernel cache) and host-side reference work, which the workers share out.
GPU_WORKERS ?= 8
gpu-test:
	PYTHONPATH=.$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON) -m pytest -q -p no:cacheprovider -m cuda --durations=10 \
	  $$($(PYTHON) -c "import xdist" 2>/dev/null && echo "-n $(GPU_WORKERS) --dist loadfile") tests

bench: $(VENV)/.dev-installed
	$(BIN)/python benchmarks/run_all.py --quick

# the seed papers' headline experiments, ours beside the papers (benchmarks/reproduce):
# `make reproduce` runs them full size (for the GPU machine), `make reproduce QUICK=1` at CI size;
# the markdown report and the PNG plots go to $(REPRO_DIR)
REPRO_DIR ?= .out/reproduce
.PHONY: reproduce
reproduce: $(VENV)/.dev-installed
	$(BIN)/python benchmarks/reproduce/run_all.py $(if $(QUICK),--quick) --plots $(REPRO_DIR)/plots --out $(REPRO_DIR)/report.md

clean:
	rm -rf $(VENV) $(OLDEST_VENV) $(LATEST_VENV) build *.egg-info docs/_build docs/auto_examples docs/generated $(EXAMPLES_OUTPUT)
