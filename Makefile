# franz-go-ordered: a patch set against github.com/twmb/franz-go.
# `make` with no target prints the targets and variables. `make test` is what
# CI runs (.ci/run).
#
# Targets are annotated for `make help`: `##u` user targets, `##m`
# maintainer targets. Durations are rough, on a 2-core VM; "cold" means an
# empty Go build cache.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

TREE := upstream/franz-go
BIN := $(CURDIR)/bin
GOLANGCI_LINT := $(BIN)/golangci-lint
TOOLS := upstream/tools
# Our own Go code: everything tracked outside the materialized tree and the
# tools module.
OUR_GO = $(shell git ls-files '*.go' | grep -v -E '^(upstream/franz-go|upstream/tools)/')

.PHONY: help
help: ## Print the targets and variables.
	@echo 'franz-go-ordered: produce reordering protection for franz-go, as a patch set.'
	@echo
	@echo 'Using it:'
	@awk 'BEGIN {FS = ":.*##u "} /^[a-zA-Z_-]+:.*##u / {printf "  make %-15s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo
	@echo 'Working on it:'
	@awk 'BEGIN {FS = ":.*##m "} /^[a-zA-Z_-]+:.*##m / {printf "  make %-15s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo
	@echo 'Variables (make VAR=value target):'
	@echo '  DEST=dir               export: where to write the modules (required)'
	@echo '  CHAOS_SECONDS=60       chaos: seconds of seeded runs per side'
	@echo '  BENCH_GROUPS="kgo e2e failstop korder isolation"  bench: which groups'
	@echo '  BENCH_COUNT=10         bench: rounds (BENCH_COUNT=2 BENCHTIME=2000x: a one-minute smoke run)'
	@echo '  SUITES="kgo kfake"     test-upstream: which upstream suites'
	@echo '  KGO_TEST_RECORDS=50000 test-upstream: records per produce/consume test of the kgo suite'
	@echo '  KGO_SEEDS=host:port,.. test-upstream: run the kgo suite against that cluster, not kfake'
	@echo '  KGO_RUN, KFAKE_RUN     test-upstream: go test -run patterns'
	@echo '  FORCE=1                patches-apply: discard unexported work in upstream/franz-go'

# ---- user targets --------------------------------------------------------

.PHONY: demo
demo: tree ##u One workload, one set of failures, three ways: a table (17 s on a fresh clone, 41 s with a cold build cache).
	@mkdir -p $(BIN)
	@echo 'demo: building the demo against the patched franz-go (about 45 s with a cold build cache)...' >&2
	@go build -o $(BIN)/demo ./cmd/demo
	@$(BIN)/demo

.PHONY: test
test: ##u Everything CI runs: materialize, lint, tests, baseline, export fixture, upstream suites, drift (5 min warm, 10 cold).
	@$(MAKE) --no-print-directory patches-apply
	@$(MAKE) --no-print-directory lint
	@$(MAKE) --no-print-directory test-ours
	@$(MAKE) --no-print-directory test-baseline
	@$(MAKE) --no-print-directory test-export
	@$(MAKE) --no-print-directory test-upstream
	@$(MAKE) --no-print-directory patches-check
	@echo 'make test: all steps passed'

.PHONY: export
export: tree ##u Write the patched franz-go and korder as modules into DEST, with the replace lines (seconds).
	@test -n "$(DEST)" || { echo 'usage: make export DEST=dir (for example DEST=../myservice/third_party/franz-go-ordered)'; exit 2; }
	@bash upstream/export.sh "$(DEST)"

.PHONY: chaos
chaos: tree ##u Seeded chaos runs, patched tree and pristine v1.22.3 (2 x CHAOS_SECONDS, default 60, plus builds).
	@bash tests/chaos.sh

.PHONY: bench
bench: tree ##u Pristine v1.22.3 vs patched (option off, on), alternated, benchstat tables (about 10 min).
	@bash tests/bench/bench.sh

.PHONY: clean
clean: ##u Remove build output (bin/, dist/, tests/bench/out/); keeps upstream/franz-go (see patches-apply FORCE=1).
	rm -rf $(BIN) dist tests/bench/out

# ---- maintainer targets --------------------------------------------------

.PHONY: patches-apply
patches-apply: ##m Materialize franz-go (and kfake, in pkg/kfake) from the module proxy into upstream/franz-go and apply patches/ (seconds).
	@bash upstream/patchset.sh apply $(if $(FORCE),--force)

.PHONY: patches-export
patches-export: ##m Regenerate patches/ from the commits in upstream/franz-go.
	@bash upstream/patchset.sh export

.PHONY: patches-check
patches-check: ##m Drift check: fresh download, apply, re-export, compare with patches/ (seconds).
	@bash upstream/patchset.sh check

.PHONY: tree
tree: # Materialize upstream/franz-go unless it already is (fresh clones).
	@test -d $(TREE)/.git || $(MAKE) --no-print-directory patches-apply

$(GOLANGCI_LINT): $(TOOLS)/go.mod $(TOOLS)/go.sum
	@echo 'building golangci-lint (pinned in $(TOOLS)/go.mod; about 5 min with a cold build cache)'
	@cd $(TOOLS) && GOWORK=off GOFLAGS=-mod=readonly go build -o $(GOLANGCI_LINT) github.com/golangci/golangci-lint/v2/cmd/golangci-lint

.PHONY: lint
lint: $(GOLANGCI_LINT) ##m gofmt and go vet everywhere; upstream's golangci-lint config on our kgo lines (1-2 min; building golangci-lint first, about 5 min).
	@test -d $(TREE)/.git || { echo 'upstream/franz-go is not materialized; run: make patches-apply'; exit 1; }
	@echo 'lint: gofmt'
	@bad=$$( { gofmt -l $(OUR_GO) $(TOOLS)/*.go; cd $(TREE) && git diff --name-only --diff-filter=AM upstream-base -- '*.go' | xargs -r gofmt -l | sed 's#^#$(TREE)/#'; } ); \
		if [ -n "$$bad" ]; then echo "gofmt -l reports:"; echo "$$bad"; exit 1; fi
	@echo 'lint: go vet (this module, against the patched tree)'
	@go vet ./...
	@echo 'lint: go vet (tests/consumer, the replace-directive fixture)'
	@cd tests/consumer && GOWORK=off go vet ./...
	@echo 'lint: go vet (tests/bench/chart, the chart module)'
	@cd tests/bench/chart && GOWORK=off go vet ./...
	@echo 'lint: go vet (patched franz-go)'
	@cd $(TREE) && GOWORK=off go vet ./pkg/...
	@echo 'lint: go vet (patched kfake, a module of its own, through go.work)'
	@go vet github.com/twmb/franz-go/pkg/kfake/...
	@echo "lint: golangci-lint with upstream's .golangci.yml, new lines since upstream-base only"
	@cd $(TREE) && GOWORK=off $(GOLANGCI_LINT) run --timeout=10m --new-from-rev=upstream-base ./...

.PHONY: test-ours
test-ours: ##m Our own tests (pkg/, cmd/, tests/), with -race, against the patched tree (2-3 min).
	@test -d $(TREE)/.git || { echo 'upstream/franz-go is not materialized; run: make patches-apply'; exit 1; }
	go test -race -count=1 -timeout 10m ./...
	cd tests/consumer && GOWORK=off go test -race -count=1 -timeout 5m ./...

.PHONY: test-baseline
test-baseline: ##m The ordering invariant tests against pristine v1.22.3, where they must fail (30 s).
	@bash tests/pristine-baseline.sh

.PHONY: test-export
test-export: tree ##m make export into a temporary directory, then build and test tests/exportfixture from it alone (1 min).
	@bash tests/exportfixture/run.sh

.PHONY: test-upstream
test-upstream: ##m franz-go's kgo suite (-race, kfake on loopback or KGO_SEEDS) and kfake's producer tests (3 min).
	@bash upstream/test-upstream.sh

.PHONY: upstream-pr
upstream-pr: ##m Write dist/upstream-pr/: the series stripped of downstream metadata, PR.md, v1.22.x compatibility.
	@bash upstream/upstream-pr.sh

.PHONY: chart
chart: tree ##m Re-measure the isolation chart: tests/bench/isolation.csv and tests/bench/isolation.png (1 min).
	@go run ./tests/bench/isolation -out tests/bench/isolation.csv
	@cd tests/bench/chart && GOWORK=off go run . -in ../isolation.csv -out ../isolation.png
