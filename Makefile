# KaaS developer entry points. `make demo` and `make test` each work alone on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
KAAS_CACHE ?= $(HOME)/.cache/kaas
ARTIFACTS := $(KAAS_CACHE)/jvm
IMAGE := build/image
ARTIFACT_SETS := kafka kafka-previous zookeeper jolokia spark-kafka
ARTIFACT_SUMS := $(foreach set,$(ARTIFACT_SETS),$(ARTIFACTS)/$(set)/SHA256SUMS)
PYTEST_ARGS ?=
# Extra `kaas up` options for demo and up, e.g. UP_ARGS='--address-base 127.0.5' beside another cluster.
UP_ARGS ?=

.PHONY: setup artifacts image demo test test-unit test-integration test-drill lint typecheck up down status clean

## setup: Python virtual environment, JVM artifacts from Maven Central, the local VM image
setup: $(VENV)/.installed artifacts $(IMAGE)/opt/kaas/image.json

$(VENV)/.installed: setup.cfg pyproject.toml constraints.txt
	@command -v java >/dev/null || { echo "setup: java not found on PATH: install a Java 17+ runtime" >&2; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip==26.3 setuptools==84.2.1 wheel==0.48.0
	$(BIN)/pip install -q -c constraints.txt -e '.[all,test]'
	touch $@

# The script verifies the cache and fetches only what is missing or corrupt.
artifacts:
	@packer/scripts/fetch-artifacts.sh $(ARTIFACTS)

$(IMAGE)/opt/kaas/image.json: $(ARTIFACT_SUMS) packer/scripts/provision.sh $(wildcard systemd/*.service) | artifacts $(VENV)/.installed
	packer/scripts/provision.sh --root $(IMAGE) --artifacts $(ARTIFACTS) --python $(BIN)/python

$(ARTIFACT_SUMS): | artifacts

## demo: a 3-VM local cluster doing real work, a tenant producing over SCRAM while one VM is
## replaced through the management plane, the audit of what it produced, then the balance
## job over its metrics (score and chart); leaves the cluster running
demo: setup
	$(BIN)/kaas up --nodes 3 $(UP_ARGS)
	@rm -rf build/demo/ledger && mkdir -p build/demo
	KAAS_PRODUCED_LEDGER_DIR=build/demo/ledger $(BIN)/kaas demo
	@status=$$($(BIN)/kaas status --json); \
	  bootstrap=$$(echo "$$status" | $(BIN)/python -c 'import json, sys; print(json.load(sys.stdin)["bootstrap_servers"])'); \
	  client=$$(echo "$$status" | $(BIN)/python -c 'import json, sys; print(json.load(sys.stdin)["client"]["directory"])'); \
	  $(BIN)/kaas analytics audit --bootstrap-servers $$bootstrap --client-dir $$client --ledger build/demo/ledger --out build/demo/audit && \
	  $(BIN)/kaas plan export --bootstrap-server $${bootstrap%%,*} --client-dir $$client --output build/demo/LAYOUT.json && \
	  $(BIN)/kaas analytics balance --bootstrap-servers $$bootstrap --client-dir $$client --out build/demo/analytics --layout build/demo/LAYOUT.json

## test: lint and types, then unit, integration and drill tests against real local clusters
test: setup lint typecheck
	$(BIN)/pytest $(PYTEST_ARGS)

test-unit: setup
	$(BIN)/pytest -m unit $(PYTEST_ARGS)

test-integration: setup
	$(BIN)/pytest -m integration $(PYTEST_ARGS)

test-drill: setup
	$(BIN)/pytest -m drill $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: setup
	$(BIN)/mypy

up: setup
	$(BIN)/kaas up --nodes 3 $(UP_ARGS)

status:
	$(BIN)/kaas status

down:
	$(BIN)/kaas down

clean:
	rm -rf build $(VENV)
