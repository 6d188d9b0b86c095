# The project's commands. `make demo` and `make test` work on a fresh clone: they make .venv first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python

.PHONY: demo test test-slow test-all gpu-test bench bench-cpp clean

$(VENV)/.ready: pyproject.toml scripts/setup-env scripts/uv-overrides.txt
	PYTHON=$(PYTHON) scripts/setup-env $(VENV)
	touch $@

## demo: build, check and time every kernel in kernels/ against its torch reference (jitlab run)
demo: $(VENV)/.ready
	$(PY) -m jitlab run

## test: the quick CPU suite, every CPU test not marked slow (~1500 tests, about 3½ min on 2 cores; no root, no
## browser). GPU tests are deselected without a GPU. Tests run in TEST_WORKERS processes (pytest-xdist), 2 for
## CI's and this machine's 2 cores: a third worker made the same work cost more CPU (docs/benchmarks.md).
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal
test: $(VENV)/.ready
	$(PYTEST) -m "not gpu and not slow" --durations=10 tests

## test-slow: the CPU tests marked slow, each over ~2 s on 2 cores (torch's headers, nvcc's device code, notebooks
## top to bottom, JupyterLab in Chromium, package builds; ~10 min). Installs Chromium for the browser tests, and
## clang for faster host units, when this user may (scripts/setup-system), otherwise says what to run.
test-slow: $(VENV)/.ready
	scripts/setup-system
	$(PYTEST) -m "not gpu and slow" --durations=15 tests

## test-all: every CPU test, `make test` then `make test-slow` on one folder of header sets (what CI runs)
test-all: $(VENV)/.ready
	export JITLAB_PCH_DIR=$$(mktemp -d) && trap 'rm -rf "$$JITLAB_PCH_DIR"' EXIT && $(MAKE) test && $(MAKE) test-slow

## gpu-test: the GPU suite and the demo, with the machine's own python3 and CUDA torch
gpu-test:
	PYTHON=$(PYTHON) scripts/gpu-test

## bench: edit-loop benchmark, jitlab vs plain load_inline (GPU); bench-cpp: the same for C++ on CPU
bench:
	PYTHONPATH=. $(PYTHON) benchmarks/edit_loop.py
bench-cpp: $(VENV)/.ready
	$(PY) benchmarks/edit_loop.py --cpp

clean: $(VENV)/.ready
	$(PY) -m jitlab clean
