# The project's commands. `make demo` and `make test` work on a fresh clone: they make .venv first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python

.PHONY: demo test test-fast gpu-test bench bench-cpp clean

$(VENV)/.ready: pyproject.toml scripts/setup-env
	PYTHON=$(PYTHON) scripts/setup-env $(VENV)
	touch $@

## demo: build, check and time every kernel in kernels/ against its torch reference (jitlab run)
demo: $(VENV)/.ready
	$(PY) -m jitlab run

## test: the CPU test suite (what CI runs); GPU tests are deselected without a GPU. Installs Chromium
## for the browser test, and clang for faster host units, when this user may (scripts/setup-system),
## otherwise says what to run.
## Tests run in TEST_WORKERS processes (pytest-xdist), 2 for CI's and this machine's 2 cores: a third
## worker made the same work cost more CPU (fresh clones here: 2 workers 7 min 5 s, 7 min 7 s and
## 7 min 11 s; 3 workers 7 min 8 s, 7 min 35 s and 8 min 20 s; docs/benchmarks.md); builds are shared
## through one cache per run.
TEST_WORKERS ?= 2
test: $(VENV)/.ready
	scripts/setup-system
	$(PY) -m pytest -m "not gpu" -n $(TEST_WORKERS) --dist worksteal --durations=15 tests

## test-fast: CPU tests without the ones that compile torch headers (tens of seconds each)
test-fast: $(VENV)/.ready
	$(PY) -m pytest -m "not gpu and not slow" -n $(TEST_WORKERS) --dist worksteal tests

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
