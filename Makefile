# consumergroup-operator
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

# Tools, pinned, installed into ./bin from the Go module proxy when missing.
BIN := $(CURDIR)/bin
CONTROLLER_GEN_VERSION := v0.23.0
GOLANGCI_LINT_VERSION := v2.15.0
PROMTOOL_VERSION := v0.316.0
CONTROLLER_GEN := $(BIN)/controller-gen
GOLANGCI_LINT := $(BIN)/golangci-lint
PROMTOOL := $(BIN)/promtool

# VERSION stamps a release build: `make build VERSION=1.2.3`. Without it, --version reports the module version
# and the commit and time Go's VCS stamp records.
VERSION ?=
VERSION_PKG := github.com/consumergroup-operator/consumergroup-operator/internal/version
VERSION_LDFLAGS := $(if $(VERSION),-X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).Commit=$(shell git rev-parse HEAD) -X $(VERSION_PKG).Date=$(shell date -u +%Y-%m-%dT%H:%M:%SZ))

# GO_TEST_FLAGS are go test's extra flags. The race detector is worth its cost for a controller and its
# pod-side client; make test GO_TEST_FLAGS= runs without it.
GO_TEST_FLAGS ?= -race

# Tests that need a control plane carry the build tag envtest; the scale tests also carry scale; the
# end-to-end tests, on a whole cluster, carry e2e. Vet and lint see every file.
ALL_TAGS := envtest,scale,e2e

##@ General

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: controller-gen ## Generate the CRD and the ClusterRole from the API types and the RBAC markers.
	$(CONTROLLER_GEN) crd rbac:roleName=manager-role paths=./... output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac

.PHONY: generate
generate: controller-gen ## Generate the API types' DeepCopy methods.
	$(CONTROLLER_GEN) object paths=./api/...

.PHONY: fmt
fmt: ## Format the Go code.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet on every file, whatever its build tags.
	go vet -tags $(ALL_TAGS) ./...

.PHONY: lint
lint: golangci-lint ## Run golangci-lint (.golangci.yml).
	$(GOLANGCI_LINT) run ./...

.PHONY: test
test: envtest-bins ## Run every test: unit, property, against a real etcd and kube-apiserver, then end to end on a whole cluster (all built by hack/envtest-bins.sh).
	KUBEBUILDER_ASSETS="$$(hack/envtest-bins.sh)" go test -tags envtest ./... -count=1 $(GO_TEST_FLAGS)
	$(MAKE) test-rules test-e2e

.PHONY: test-rules
test-rules: promtool ## Check the alert rules (config/prometheus) and run their unit tests with promtool.
	$(PROMTOOL) check rules config/prometheus/rules.yaml
	cd config/prometheus && $(PROMTOOL) test rules rules_test.yaml

# The end-to-end tests run without the race detector: they measure how long queues go unread under the
# real controllers' pace, and the envtest suites already run the same code under it.
.PHONY: test-e2e
test-e2e: envtest-bins ## Run the end-to-end tests (test/e2e) on a whole cluster: kube-controller-manager, kube-scheduler and kwok's nodes.
	KUBEBUILDER_ASSETS="$$(hack/envtest-bins.sh)" go test -tags e2e ./test/e2e ./hack/localdev -p 1 -count=1 -v -timeout 30m

.PHONY: test-unit
test-unit: ## Run the tests that need no API server, in seconds, without building any control plane.
	env -u KUBEBUILDER_ASSETS go test ./... -count=1

.PHONY: test-handoff
test-handoff: envtest-bins ## Play 10,000 random events (joins, drains, restarts, kills, operator restarts, the assignment deleted and corrupted, partitions) against a Cooperative group.
	KUBEBUILDER_ASSETS="$$(hack/envtest-bins.sh)" go test -tags envtest ./controllers -count=1 -v -timeout 240m -run 'TestRandomizedHandoff$$' -handoff-events 10000

# SCALE_FLAGS adds flags to the scale tests, e.g. SCALE_FLAGS='-run ^$$ -bench . -benchtime 3x' for the benchmarks.
SCALE_FLAGS ?=

.PHONY: test-scale
test-scale: envtest-bins ## Run the scale tests in test/scale: a 65,536-queue group of 2,048 members; 1,000 groups of 10 pods.
	KUBEBUILDER_ASSETS="$$(hack/envtest-bins.sh)" go test -tags $(ALL_TAGS) ./test/scale -count=1 -v -timeout 30m $(SCALE_FLAGS)

.PHONY: verify
verify: manifests generate fmt ## Fail when generated or formatted files differ from the commit; then vet and lint.
	@if ! git diff --exit-code --stat; then \
	  echo 'Generated or formatted files differ from the commit: run make manifests generate fmt and commit the result.' >&2; exit 1; fi
	@untracked=$$(git ls-files --others --exclude-standard -- api config); \
	if [[ -n "$$untracked" ]]; then \
	  echo "Generated files are not committed:" >&2; echo "$$untracked" >&2; exit 1; fi
	$(MAKE) vet lint

SCENARIOS := scale-out scale-in rolling-restart zone-outage queue-growth weights

.PHONY: plots
plots: ## Regenerate the simulator's plots (docs/simulate-*.svg) and result tables (docs/simulate-results.md).
	for s in $(SCENARIOS); do go run ./hack/simulate -scenario $$s -format svg > docs/simulate-$$s.svg; done
	{ echo '# Simulator results'; echo; \
	  echo 'Generated by `make plots`; do not edit. Each cell: moved / lower bound (min–max queues per member, ✗ when unbalanced, cross-zone queues).'; echo; \
	  for s in $(SCENARIOS); do go run ./hack/simulate -scenario $$s -format markdown; done; } > docs/simulate-results.md

##@ Build and run

IMG ?= consumergroup-operator:latest
AGENT_IMG ?= consumergroup-agent:latest

.PHONY: docker-build
docker-build: ## Build the operator's image $(IMG) (needs a Docker engine).
	docker build --target manager -t $(IMG) .

.PHONY: docker-build-agent
docker-build-agent: ## Build the member agent's image $(AGENT_IMG) (needs a Docker engine).
	docker build --target agent -t $(AGENT_IMG) .

.PHONY: build
build: ## Build the operator into bin/manager and every command under cmd/ into bin/; VERSION=x.y.z stamps a release (--version).
	go build -ldflags "$(VERSION_LDFLAGS)" -o $(BIN)/manager .
	if compgen -G 'cmd/*/' > /dev/null; then go build -ldflags "$(VERSION_LDFLAGS)" -o $(BIN)/ ./cmd/...; fi

.PHONY: run
run: envtest-bins ## Run the operator: against the configured cluster if one answers, else on a local cluster (kube-controller-manager, kube-scheduler, kwok) with a demo group and its consumers.
	hack/run.sh

##@ Tools

.PHONY: envtest-bins
envtest-bins: ## Build etcd, kube-apiserver, kubectl, kube-controller-manager, kube-scheduler and kwok into the machine's cache, once for every checkout.
	@hack/envtest-bins.sh > /dev/null

.PHONY: controller-gen
controller-gen: ## Install controller-gen into bin/ when missing.
	@$(call go-install,$(CONTROLLER_GEN),sigs.k8s.io/controller-tools/cmd/controller-gen,$(CONTROLLER_GEN_VERSION))

.PHONY: promtool
promtool: ## Install promtool (github.com/prometheus/prometheus) into bin/ when missing.
	@$(call go-install,$(PROMTOOL),github.com/prometheus/prometheus/cmd/promtool,$(PROMTOOL_VERSION))

.PHONY: golangci-lint
golangci-lint: ## Install golangci-lint into bin/ when missing.
	@$(call go-install,$(GOLANGCI_LINT),github.com/golangci/golangci-lint/v2/cmd/golangci-lint,$(GOLANGCI_LINT_VERSION))

# go-install BINARY,PACKAGE,VERSION installs PACKAGE@VERSION as BINARY unless BINARY-VERSION is already
# there. The versioned name keeps an old binary from passing for a new pin; BINARY links to it.
define go-install
if [[ ! -x "$(1)-$(3)" ]]; then \
  echo "installing $(2)@$(3)" >&2; \
  mkdir -p "$(dir $(1))"; \
  tmp=$$(mktemp -d); GOBIN=$$tmp go install $(2)@$(3); mv "$$tmp/$$(basename $(1))" "$(1)-$(3)"; rm -rf "$$tmp"; \
fi; \
ln -sf "$$(basename $(1))-$(3)" "$(1)"
endef
