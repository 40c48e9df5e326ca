# Two entry points: `make run` (the extender, verbs and controllers in one process, on the bundled demo cluster) and
# `make test` (lint and the whole suite). Both bootstrap .venv on first use.
# `make test-fast` runs the fast tier only: every test not marked `e2e` (tests/e2e/) or `slow`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
LISTEN ?= 127.0.0.1:8888
SOURCE ?= examples/demo-cluster

.PHONY: run run-health test test-fast lint bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

run: $(VENV)/.installed
	$(BIN)/dra-extender all --source $(SOURCE) --listen $(LISTEN)

# The demo cluster in the fake API server with examples/health/policy.yaml, and the alert receiver on 127.0.0.1:9095 (docs/health.md).
run-health: $(VENV)/.installed
	BIN=$(BIN) LISTEN=$(LISTEN) examples/health/run.sh

test: lint
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

# In-process tests (no dra-extender or fake API server subprocess, no kube-scheduler model, no real-clock rate,
# none marked `slow`) on two xdist workers: 50 s on 2 idle cores (1,327 tests; 50 s wall, 92 s of CPU, measured at
# load 0.6; the whole fast tier was 148 s serial before the split); longer when other jobs share the cores.
test-fast: $(VENV)/.installed
	DRA_TEST_TIER=fast $(BIN)/python -m pytest -q -n 2 -m "not e2e and not slow" $(PYTEST_ARGS)

# Style and layering, also run by `make test` (and by pre-commit: .pre-commit-config.yaml).
lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy allocator tracker serving extender controllers webhook dra_extender kubectl_dra kubesim bench

bench: $(VENV)/.installed
	$(BIN)/python -m pip install -q -e '.[test,bench]'
	$(BIN)/python -m bench $(BENCH)

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
