# Entry points: `make demo` and `make test` (see README). Everything else is a step they depend on.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint unit integration system-deps testbed testbed-node testbed-extras testbed-prometheus chart-files e2e e2e-reference helm bench compare crd docs bundle plugin-archive lock image clean chaos soak
TESTBED_BIN ?= $(or $(MPIJOB_TESTBED_BIN),.cache/testbed/bin)

# The operator with its dev tools, and the development testbed (its own distribution: testbed/pyproject.toml).
$(STAMP): pyproject.toml testbed/pyproject.toml
	@echo "[setup] creating $(VENV) and installing mpijob and mpijob-testbed with the dev tools"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]' -e ./testbed
	@touch $(STAMP)

# Every Debian package any script needs (testbed/system-packages.txt, the one list); idempotent, ~0.1 s when
# all are present. The first step of `make test` and `make demo`, so both work on a fresh machine.
system-deps:
	bash testbed/install-system-deps.sh

testbed:
	bash testbed/build.sh

# helm from its Go module, for the chart tests (helm lint / helm template).
helm:
	bash testbed/helm/build.sh

# The real node's parts (root): Debian packages, then the kubelet (own stamp; the kwok-only testbed never waits
# for it). `mpijob-testbed up --real-node` does both itself when needed.
testbed-node: system-deps
	nice -n 10 bash testbed/build-node.sh

# The real-node tests alone (the reference's e2e suite against the operator image as a pod, and a helm upgrade,
# among them, in test_real_node_mpi.py); a machine that cannot run a real node fails here instead of skipping.
e2e: system-deps $(STAMP) testbed helm image
	MPIJOB_REQUIRE_REAL_NODE=1 $(BIN)/pytest tests/integration/test_real_node.py tests/integration/test_real_node_mpi.py tests/integration/test_real_node_horovod.py -q -p no:cacheprovider

# The reference's e2e suite side by side: under mpijob (as in `make test`), then under the reference operator
# itself (its install file unchanged, its image from bench/reference/build-image.sh); prints the spec-by-spec
# table docs/results.md shows. Not in `make test`: the second run takes minutes and proves nothing of ours.
e2e-reference: system-deps $(STAMP) testbed helm image
	MPIJOB_REQUIRE_REAL_NODE=1 $(BIN)/pytest tests/integration/test_real_node_mpi.py -m "sidebyside or not sidebyside" -k reference_e2e_suite -q -s -p no:cacheprovider

# Kueue and the coscheduling scheduler for tests/integration/test_scheduling.py (docs/scheduling.md). A
# failed build stops CI (CI=true); elsewhere those tests then skip and say why.
testbed-extras:
	bash testbed/extras/build.sh || { if [ "$$CI" = true ]; then echo "[extras] build failed (CI: the scheduling tests must run)"; exit 1; fi; echo "[extras] build failed; tests/integration/test_scheduling.py will skip"; }

# Prometheus and promtool from their Go module, for tests/integration/test_alerts.py (the alert rules with
# `promtool test rules`, the rules and the dashboard's queries on a real Prometheus). Same CI rule as above.
testbed-prometheus:
	bash testbed/prometheus/build.sh || { if [ "$$CI" = true ]; then echo "[prometheus] build failed (CI: the alert and dashboard tests must run)"; exit 1; fi; echo "[prometheus] build failed; tests/integration/test_alerts.py will skip"; }

demo: system-deps $(STAMP) testbed
	$(BIN)/mpijob-testbed demo

# The shell scripts shellcheck keeps clean (Debian package shellcheck, testbed/system-packages.txt).
SHELLCHECKED := src/mpijob/planner/discover_hosts.sh src/mpijob/planner/mpijob_run.sh tests/run-suite.sh

lint: $(STAMP)
	shellcheck $(SHELLCHECKED)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: $(STAMP)
	$(BIN)/pytest tests/unit -q

integration: system-deps $(STAMP) testbed testbed-extras testbed-prometheus helm image
	$(BIN)/pytest tests/integration -q

# The whole suite: static checks, then unit and integration tests on a real local control plane, the
# real-node modules beside the rest (tests/run-suite.sh says how). The real-node tests, the Horovod scenario
# among them, build what they need through testbed/ scripts (cached in ~/.cache/mpijob; the reference's e2e
# suite through bench/reference/build-e2e.sh, into .cache/reference) and skip with the reason on a machine
# that cannot run a real node (not root, no apt). Each half prints its 20 slowest tests.
test: system-deps $(STAMP) testbed testbed-extras testbed-prometheus helm image lint
	bash tests/run-suite.sh

# A long seeded chaos run (issue 8): operator SIGKILLs across scale-in, node termination and scale-out.
# CHAOS_SEED=n replays a run; docs/reliability.md has the counts of the last long run.
# CHAOS_FAULT_ROUNDS: rounds of watch expiry, API server restarts, 409 storm and lease handovers.
CHAOS_STEPS ?= 200
CHAOS_SEED ?= 20261130
CHAOS_FAULT_ROUNDS ?= 3
chaos: $(STAMP) testbed
	MPIJOB_CHAOS_STEPS=$(CHAOS_STEPS) MPIJOB_CHAOS_SEED=$(CHAOS_SEED) MPIJOB_CHAOS_FAULT_ROUNDS=$(CHAOS_FAULT_ROUNDS) $(BIN)/pytest tests/integration/test_chaos.py -q -s -p no:cacheprovider

# A flake census (issue 31): SOAK_RUNS pytest runs in a row of SOAK_TESTS (modules or node ids), all on one
# testbed; per test its pass/fail/error/skip counts and min/median/max durations in SOAK_DIR/soak.md and
# soak.json (default .cache/soak/<start time>). SOAK_HOG=1: beside a busy loop taking one core. Exits 1 when
# any run had a failure or an error, after writing the report. docs/testbed-internals.md, "A flake census".
SOAK_TESTS ?= tests/integration
SOAK_RUNS ?= 5
SOAK_HOG ?= 0
SOAK_DIR ?=
soak: $(STAMP) testbed
	$(BIN)/python bench/soak.py --runs $(SOAK_RUNS) $(if $(filter 1,$(SOAK_HOG)),--hog) $(if $(SOAK_DIR),--out $(SOAK_DIR)) $(SOAK_TESTS)

bench: $(STAMP) testbed
	$(BIN)/python bench/run.py

# Side by side with the reference operator (built from its Go module into .cache/reference).
compare: $(STAMP) testbed
	$(BIN)/python bench/compare.py $(COMPARE_ARGS)

crd: $(STAMP)
	$(BIN)/mpijob crd > deploy/crd/kubeflow.org_mpijobs.yaml
	cp deploy/crd/kubeflow.org_mpijobs.yaml deploy/helm/mpijob-operator/crds/

# The chart's copies of the alert rules and the dashboard (tests/unit/test_monitoring_files.py checks them).
chart-files:
	cp deploy/prometheus/mpijob-alerts.yaml deploy/grafana/mpijob-dashboard.json deploy/helm/mpijob-operator/files/

# Generated docs (a test fails when they drift from the models).
docs: $(STAMP)
	$(BIN)/mpijob api-reference > docs/api-reference.md

# The operator image without a container engine or registry (docs/image.md); `make test` runs it once.
image: system-deps $(STAMP)
	PYTHON=$(BIN)/python bash deploy/image/build-offline.sh

# kubectl plugin archive for krew (dist/, git-ignored); prints its sha256 for deploy/krew/mpijob.yaml.
plugin-archive: $(STAMP)
	PYTHON=$(BIN)/python bash deploy/krew/build-archive.sh

# Hash-locked runtime dependencies of the image and the plugin archive.
lock: $(STAMP)
	$(BIN)/pip install --quiet pip-tools
	$(BIN)/pip-compile --quiet --generate-hashes --strip-extras --allow-unsafe --no-emit-index-url --no-emit-find-links -o requirements.lock pyproject.toml
	$(BIN)/pip-compile --quiet --generate-hashes --allow-unsafe --no-emit-index-url --no-emit-find-links -o requirements-build.lock requirements-build.in

# The single-file install: the standalone overlay rendered (a test fails when it is stale).
bundle: crd testbed
	$(TESTBED_BIN)/kubectl kustomize deploy/overlays/standalone > deploy/mpijob-operator.yaml

clean:
	-$(BIN)/mpijob-testbed down
	rm -rf $(VENV) .cache .testbed
