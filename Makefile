# KaaS developer entry points. `make demo` and `make test` each work alone on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
KAAS_CACHE ?= $(HOME)/.cache/kaas
ARTIFACTS := $(KAAS_CACHE)/jvm
IMAGE := build/image
MONITORING := build/monitoring
ARTIFACT_SETS := kafka kafka-previous kafka-kraft mirror mirror-kraft zookeeper jolokia spark-kafka
ARTIFACT_SUMS := $(foreach set,$(ARTIFACT_SETS),$(ARTIFACTS)/$(set)/SHA256SUMS)
PYTEST_ARGS ?=
# The real-cluster tests mostly wait on JVMs and faults: two pytest workers halve the wall
# time on 2 cores; a third kept the load average at 40-70 and ended no sooner. Each file runs
# on one worker (its module-scoped cluster starts once), and the files of the session's
# shared cluster run together on one worker (tests/conftest.py makes the groups).
PYTEST_PARALLEL ?= -n 2 --dist loadfile
# Extra `kaas up` options for demo and up, e.g. UP_ARGS='--address-base 127.0.5' beside another cluster.
UP_ARGS ?=

.PHONY: setup system-packages artifacts image demo test test-unit test-integration test-drill drills lint typecheck up down status clean

## setup: Python virtual environment, JVM artifacts from Maven Central, the local VM image,
## the monitoring daemons (statsd from npm; Debian's carbon, graphite-web, gunicorn)
setup: system-packages $(VENV)/.installed artifacts $(IMAGE)/opt/kaas/image.json $(MONITORING)/.installed

$(MONITORING)/.installed: packer/scripts/install-monitoring.sh
	packer/scripts/install-monitoring.sh $(MONITORING)
	touch $@

# nftables for the network drills (kaas drill run network-partition); without it, or without
# root, those drills are refused with the reason and everything else works.
system-packages:
	@command -v nft >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  { apt-get update -q >/dev/null && apt-get install -y -q nftables >/dev/null; } ; } || \
	  echo "setup: nftables not installed: the network drills will be refused" >&2
	@# Debian's chromium and its driver: the dashboard's test drives a real headless browser.
	@{ command -v chromium >/dev/null && command -v chromedriver >/dev/null; } || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o DPkg::Lock::Timeout=600 chromium chromium-driver >/dev/null; } || \
	  echo "setup: chromium and chromium-driver not installed: the dashboard's browser test will fail" >&2

$(VENV)/.installed: setup.cfg pyproject.toml constraints.txt
	@command -v java >/dev/null || { echo "setup: java not found on PATH: install a Java 17+ runtime" >&2; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip==26.3 setuptools==84.2.1 wheel==0.48.0
	$(BIN)/pip install -q -c constraints.txt -e '.[all,test]'
	touch $@

# The script verifies the cache and fetches only what is missing or corrupt.
artifacts:
	@packer/scripts/fetch-artifacts.sh $(ARTIFACTS)

$(IMAGE)/opt/kaas/image.json: $(ARTIFACT_SUMS) packer/scripts/provision.sh planner/contracts/vm_config/class_archive.py $(wildcard systemd/*.service) | artifacts $(VENV)/.installed
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
	  identity=$$(echo "$$status" | $(BIN)/python -c 'import json, sys; s = json.load(sys.stdin); print(s["home"] + "/" + s["vms"][0]["name"] + "/tls")'); \
	  statsd=$$(echo "$$status" | $(BIN)/python -c 'import json, sys; s = json.load(sys.stdin); m = s["monitoring"]; print(m["statsd"] + " --cluster " + s["name"] if m else "")'); \
	  $(BIN)/kaas analytics audit --bootstrap-servers $$bootstrap --client-dir $$client --ledger build/demo/ledger --out build/demo/audit $${statsd:+--statsd $$statsd} && \
	  $(BIN)/kaas plan export --bootstrap-server $${bootstrap%%,*} --client-dir $$client --node-identity $$identity --output build/demo/LAYOUT.json && \
	  $(BIN)/kaas analytics balance --bootstrap-servers $$bootstrap --client-dir $$client --out build/demo/analytics --layout build/demo/LAYOUT.json
	@url=$$($(BIN)/kaas status --json | $(BIN)/python -c 'import json, sys; print(json.load(sys.stdin)["service_url"] or "")'); \
	  if [ -n "$$url" ]; then \
	    echo "dashboard: $$url/dashboard (sign in with the admin API key kaas up named)"; \
	    echo "alerts (pending, held or firing now; none once the replacement is done):"; \
	    service=$$($(BIN)/kaas status --json | $(BIN)/python -c 'import json, sys; print(json.load(sys.stdin)["home"] + "/service")'); \
	    $(BIN)/kaas alerts list --api-url $$url --api-key-file $$service/admin-key --api-ca $$service/tls/ca.pem; \
	  else echo "dashboard: the management plane is not running"; fi

## test: lint and types, then unit, integration and drill tests against real local clusters
## (every test's time in build/test-results.xml, for keeping the suite within its budget)
test: setup lint typecheck
	$(BIN)/pytest $(PYTEST_PARALLEL) --durations=40 --junitxml=build/test-results.xml -m 'not long_drill' $(PYTEST_ARGS)

test-unit: setup
	$(BIN)/pytest -m unit $(PYTEST_ARGS)

test-integration: setup
	$(BIN)/pytest -m integration $(PYTEST_ARGS)

test-drill: setup
	$(BIN)/pytest -m drill $(PYTEST_ARGS)

## drills: every `kaas drill` at its full fault duration (make test runs them for seconds,
## and leaves the long_drill tests out), then every other long_drill test
FULL_DRILL_FILES = tests/drills/test_kaas_drill.py tests/drills/test_kaas_drill_bounces.py tests/drills/test_kaas_drill_volumes.py tests/integration/test_kraft_cluster.py
drills: setup
	KAAS_DRILL_FULL=1 $(BIN)/pytest -m drill -s $(FULL_DRILL_FILES) $(PYTEST_ARGS)
	$(BIN)/pytest -m long_drill -s $(addprefix --ignore=,$(FULL_DRILL_FILES)) $(PYTEST_ARGS)

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
