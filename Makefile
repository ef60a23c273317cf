# atoll — developer entry points. `make` (or `make help`) lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ATOLL := $(BIN)/atoll
SHAPE ?= examples/clusters/dgx-h100.yaml

.PHONY: help install lint test test-unit sandbox-bin sandbox-up sandbox-down sandbox-status demo crds bench clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[1m%-15s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (Python >= 3.11)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

install: $(STAMP) ## create .venv and install atoll (editable) with the dev tools

sandbox-bin: $(STAMP) ## build the sandbox binaries and the JobSet, LWS, MPIJob and Trainer controllers from Go modules if missing
	$(ATOLL) sandbox build --with jobset,lws,mpi,trainer

lint: $(STAMP) ## ruff, mypy --strict and the layer contract test
	$(BIN)/ruff check operator tests bench
	$(BIN)/ruff format --check operator tests bench
	$(BIN)/mypy
	$(BIN)/pytest -q tests/test_layers.py

test: $(STAMP) sandbox-bin lint ## everything: install, build sandbox binaries, lint, whole pytest suite
	$(BIN)/pytest

test-unit: $(STAMP) ## only the tests that need no cluster
	$(BIN)/pytest -m 'not cluster'

sandbox-up: $(STAMP) sandbox-bin ## start the local control plane with fake GPU nodes (SHAPE=... WITH=jobset,lws,mpi,trainer)
	$(ATOLL) sandbox up --shape $(SHAPE) $(if $(WITH),--with $(WITH))

sandbox-down: $(STAMP) ## stop every sandbox process and remove its state
	$(ATOLL) sandbox down

sandbox-status: $(STAMP) ## show what the sandbox runs
	$(ATOLL) sandbox status

demo: $(STAMP) sandbox-bin ## sandbox + CRDs + operator; one GPU gang admitted whole, another waiting whole
	$(ATOLL) demo --shape $(SHAPE)

crds: $(STAMP) ## regenerate crds/*.yaml from the API models
	$(ATOLL) crds --out crds

bench: $(STAMP) sandbox-bin ## run the benchmarks in bench/ and print their numbers (QUICK=1: scaled down)
	$(BIN)/python bench/run.py $(if $(QUICK),--quick)

bench-kueue: $(STAMP) sandbox-bin ## Kueue's scheduler benchmark: Kueue vs atoll, fresh sandboxes, budgets 50/100 and 300/500, background loads 0 and 1 (SCALE=0.1 BUDGET=300/500 LOAD=0 ONLY=atoll PACE=2)
	$(BIN)/python bench/kueue_baseline/run.py --scale $(or $(SCALE),1) $(foreach b,$(or $(BUDGET),50/100 300/500),--budget $(b)) $(foreach n,$(or $(LOAD),0 1),--background-load $(n)) $(if $(ONLY),--only $(ONLY)) $(if $(PACE),--pace $(PACE)) $(BENCH_ARGS)

clean: ## remove the virtualenv and caches (not the sandbox binary cache)
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
