# franz-go-ordered: a patch set against github.com/twmb/franz-go.
# `make` with no target prints this list. `make test` is what CI runs.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

TREE := upstream/franz-go
BIN := $(CURDIR)/bin
GOLANGCI_LINT := $(BIN)/golangci-lint
# Our own Go code: everything tracked outside the materialized tree and the
# tools module.
OUR_GO = $(shell git ls-files '*.go' | grep -v -E '^(upstream/franz-go|tools)/')

.PHONY: help
help: ## Print the targets.
	@echo 'franz-go-ordered: produce reordering protection for franz-go, as a patch set.'
	@echo
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  make %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo
	@echo 'Variables: FORCE=1 (patches-apply: discard unexported work), KGO_SEEDS=host:port,...'
	@echo '(test-upstream: use that cluster instead of starting kfake), KGO_RUN, KFAKE_RUN.'

.PHONY: patches-apply
patches-apply: ## Materialize franz-go (and kfake, in pkg/kfake) from the module proxy into upstream/franz-go and apply patches/.
	@bash upstream/patchset.sh apply $(if $(FORCE),--force)

.PHONY: patches-export
patches-export: ## Regenerate patches/ from the commits in upstream/franz-go.
	@bash upstream/patchset.sh export

.PHONY: patches-check
patches-check: ## Drift check: fresh download, apply, re-export, compare with patches/.
	@bash upstream/patchset.sh check

$(GOLANGCI_LINT): tools/go.mod tools/go.sum
	@echo 'building golangci-lint (pinned in tools/go.mod)'
	@cd tools && GOWORK=off GOFLAGS=-mod=readonly go build -o $(GOLANGCI_LINT) github.com/golangci/golangci-lint/v2/cmd/golangci-lint

.PHONY: lint
lint: $(GOLANGCI_LINT) ## gofmt and go vet everywhere; upstream's golangci-lint config on our kgo lines.
	@test -d $(TREE)/.git || { echo 'upstream/franz-go is not materialized; run: make patches-apply'; exit 1; }
	@echo 'lint: gofmt'
	@bad=$$( { gofmt -l $(OUR_GO) tools/*.go; cd $(TREE) && git diff --name-only --diff-filter=AM upstream-base -- '*.go' | xargs -r gofmt -l | sed 's#^#$(TREE)/#'; } ); \
		if [ -n "$$bad" ]; then echo "gofmt -l reports:"; echo "$$bad"; exit 1; fi
	@echo 'lint: go vet (this module, against the patched tree)'
	@go vet ./...
	@echo 'lint: go vet (tests/consumer, the replace-directive fixture)'
	@cd tests/consumer && GOWORK=off go vet ./...
	@echo 'lint: go vet (patched franz-go)'
	@cd $(TREE) && GOWORK=off go vet ./pkg/...
	@echo 'lint: go vet (patched kfake, a module of its own, through go.work)'
	@go vet github.com/twmb/franz-go/pkg/kfake/...
	@echo "lint: golangci-lint with upstream's .golangci.yml, new lines since upstream-base only"
	@cd $(TREE) && GOWORK=off $(GOLANGCI_LINT) run --timeout=10m --new-from-rev=upstream-base ./...

.PHONY: test-ours
test-ours: ## Our own tests (pkg/, tests/), with -race, against the patched tree.
	@test -d $(TREE)/.git || { echo 'upstream/franz-go is not materialized; run: make patches-apply'; exit 1; }
	go test -race -count=1 -timeout 10m ./...
	cd tests/consumer && GOWORK=off go test -race -count=1 -timeout 5m ./...

.PHONY: chaos
chaos: ## Seeded chaos runs for CHAOS_SECONDS (default 60) on the patched tree and the pristine baseline.
	@bash tests/chaos.sh

.PHONY: tree
tree: # Materialize upstream/franz-go unless it already is (fresh clones).
	@test -d $(TREE)/.git || $(MAKE) --no-print-directory patches-apply

.PHONY: demo
demo: tree ## One keyed workload, one set of failures, three ways (upstream-style, fail-stop, korder): a table.
	@go run ./cmd/demo

.PHONY: bench
bench: tree ## Benchmarks, pristine v1.22.3 vs patched (option off, on), alternated, with benchstat tables.
	@bash bench/bench.sh

.PHONY: upstream-pr
upstream-pr: ## Write dist/upstream-pr/: the series stripped of downstream metadata, PR.md, v1.22.x compatibility.
	@bash upstream/upstream-pr.sh

.PHONY: test-baseline
test-baseline: ## The ordering invariant tests against pristine v1.22.3: they must fail there.
	@bash tests/pristine-baseline.sh

.PHONY: test-upstream
test-upstream: ## franz-go's kgo suite (-race, kfake on loopback or KGO_SEEDS) and kfake's producer tests.
	@bash upstream/test-upstream.sh

.PHONY: test
test: ## Everything CI runs: materialize, lint, our tests, the pristine baseline, upstream's tests, drift check.
	@$(MAKE) --no-print-directory patches-apply
	@$(MAKE) --no-print-directory lint
	@$(MAKE) --no-print-directory test-ours
	@$(MAKE) --no-print-directory test-baseline
	@$(MAKE) --no-print-directory test-upstream
	@$(MAKE) --no-print-directory patches-check
	@echo 'make test: all steps passed'
