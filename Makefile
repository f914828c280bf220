# consumergroup-operator
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

# Tools, pinned, installed into ./bin from the Go module proxy when missing.
BIN := $(CURDIR)/bin
CONTROLLER_GEN_VERSION := v0.23.0
GOLANGCI_LINT_VERSION := v2.15.0
PROMTOOL_VERSION := v0.316.0
GOVULNCHECK_VERSION := v1.9.0
CONTROLLER_GEN := $(BIN)/controller-gen
GOLANGCI_LINT := $(BIN)/golangci-lint
PROMTOOL := $(BIN)/promtool
GOVULNCHECK := $(BIN)/govulncheck
# The Go vulnerability database govulncheck reads. vuln.go.dev, where it comes from by default, cannot be
# reached from every machine that runs make verify; the Go module proxy can. So it is built from the
# reports of golang.org/x/vulndb, the module vuln.go.dev is published from, at this pseudo-version, by that
# module's own cmd/indexdb, into bin/vulndb/<version> (the same files every time). A newer pseudo-version
# (go list -m golang.org/x/vulndb@latest) brings newer reports.
VULNDB_VERSION := v0.0.0-20261105234957-e22db6528018
VULNDB_INDEXDB := $(BIN)/indexdb
VULNDB := $(BIN)/vulndb/$(VULNDB_VERSION)

# The Helm chart; make manifests keeps its CRD, RBAC rules and alert rules equal to config/'s.
CHART := charts/consumergroup-operator
# The module that builds and tests a release: images, install.yaml, the chart's package.
RELEASE_MODULE := hack/release
# The rocketmq-client-go strategy (clients/rocketmq-go), a module of its own so that the operator's module
# does not take the RocketMQ client's dependencies.
ROCKETMQ_GO_MODULE := clients/rocketmq-go
# The modules beside the operator's, formatted, vetted and linted with it.
OTHER_MODULES := $(RELEASE_MODULE) $(ROCKETMQ_GO_MODULE)
# Where make images and make release write.
DIST ?= $(CURDIR)/dist

# VERSION stamps a release build: `make build VERSION=1.2.3`. Without it, --version reports the module version
# and the commit and time Go's VCS stamp records.
VERSION ?=
VERSION_PKG := github.com/consumergroup-operator/consumergroup-operator/internal/version
# The build date is the commit's, so that the same commit builds the same binaries and images.
REVISION := $(shell git rev-parse HEAD)
SOURCE_DATE := $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ)
VERSION_LDFLAGS := $(if $(VERSION),-X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).Commit=$(REVISION) -X $(VERSION_PKG).Date=$(SOURCE_DATE))

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
manifests: controller-gen ## Generate the CRD and the ClusterRole from the API types and the RBAC markers, and copy them, with the alert rules and the admission policies, into the Helm chart.
	$(CONTROLLER_GEN) crd rbac:roleName=manager-role paths=./... output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	cp config/crd/bases/*.yaml $(CHART)/crds/
	cp config/rbac/role.yaml config/rbac/leader_election_role.yaml config/rbac/metrics_auth_role.yaml config/rbac/metrics_reader_role.yaml $(CHART)/files/
	cp config/prometheus/rules.yaml $(CHART)/files/alert-rules.yaml
	cp config/admission/*_policy.yaml $(CHART)/files/admission/

.PHONY: generate
generate: controller-gen ## Generate the API types' DeepCopy methods.
	$(CONTROLLER_GEN) object paths=./api/...

.PHONY: fmt
fmt: ## Format the Go code.
	go fmt ./...
	for m in $(OTHER_MODULES); do (cd $$m && go fmt ./...) || exit 1; done

.PHONY: vet
vet: ## Run go vet on every file, whatever its build tags.
	go vet -tags $(ALL_TAGS) ./...
	for m in $(OTHER_MODULES); do (cd $$m && go vet -tags envtest ./...) || exit 1; done

.PHONY: lint
lint: golangci-lint ## Run golangci-lint (.golangci.yml).
	$(GOLANGCI_LINT) run ./...
	for m in $(OTHER_MODULES); do (cd $$m && $(GOLANGCI_LINT) run --config $(CURDIR)/.golangci.yml ./...) || exit 1; done

.PHONY: test
test: envtest-bins jdk ## Run every test: unit, property, against a real etcd and kube-apiserver, then end to end on a whole cluster (all built by hack/envtest-bins.sh).
	java_home="$$(hack/jdk.sh)"; KUBEBUILDER_ASSETS="$$(hack/envtest-bins.sh)" JAVA_HOME="$$java_home" go test -tags envtest ./... -count=1 -timeout 25m $(GO_TEST_FLAGS)
	$(MAKE) test-rules test-mutations test-release test-clients test-e2e

.PHONY: test-clients
test-clients: envtest-bins ## Test the rocketmq-client-go strategy (clients/rocketmq-go): a real push consumer against a RocketMQ-speaking stand-in broker, the operator and a real API server.
	cd $(ROCKETMQ_GO_MODULE) && KUBEBUILDER_ASSETS="$$($(CURDIR)/hack/envtest-bins.sh)" go test -tags envtest ./... -count=1 -v $(GO_TEST_FLAGS)

.PHONY: test-release
test-release: envtest-bins ## Test the release (hack/release): the images, the Helm chart (rendered, linted, applied with dry-run), install.yaml and make release itself.
	cd $(RELEASE_MODULE) && KUBEBUILDER_ASSETS="$$($(CURDIR)/hack/envtest-bins.sh)" go test -tags envtest ./... -count=1 -v -timeout 30m

# test-mutations runs without the race detector: the search runs on one goroutine, and -race makes it several
# times slower.
.PHONY: test-mutations
test-mutations: ## Turn off each rule of the handoff in turn (build tag handoffmutations) and check that the explorer finds a counterexample for each.
	go test -tags handoffmutations ./internal/plan -run TestExploreFindsEachMutation -count=1 -v

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
	cd $(ROCKETMQ_GO_MODULE) && env -u KUBEBUILDER_ASSETS go test ./... -count=1

.PHONY: test-handoff
test-handoff: envtest-bins ## Play 10,000 random events (joins, drains, restarts, kills, operator restarts, the assignment deleted and corrupted, partitions) against a Cooperative group.
	KUBEBUILDER_ASSETS="$$(hack/envtest-bins.sh)" go test -tags envtest ./controllers -count=1 -v -timeout 240m -run 'TestRandomizedHandoff$$' -handoff-events 10000

# SCALE_FLAGS adds flags to the scale tests, e.g. SCALE_FLAGS='-run ^$$ -bench . -benchtime 3x' for the benchmarks.
SCALE_FLAGS ?=

.PHONY: test-scale
test-scale: envtest-bins ## Run the scale tests in test/scale: a 65,536-queue group of 2,048 members; 1,000 groups of 10 pods.
	KUBEBUILDER_ASSETS="$$(hack/envtest-bins.sh)" go test -tags $(ALL_TAGS) ./test/scale -count=1 -v -timeout 30m $(SCALE_FLAGS)

.PHONY: verify
verify: manifests generate fmt ## Fail when generated or formatted files differ from the commit; then vet, lint and govulncheck.
	@if ! git diff --exit-code --stat; then \
	  echo 'Generated or formatted files differ from the commit: run make manifests generate fmt and commit the result.' >&2; exit 1; fi
	@untracked=$$(git ls-files --others --exclude-standard -- api config charts); \
	if [[ -n "$$untracked" ]]; then \
	  echo "Generated files are not committed:" >&2; echo "$$untracked" >&2; exit 1; fi
	$(MAKE) vet lint vulncheck

.PHONY: vulncheck
vulncheck: govulncheck vulndb ## Run govulncheck over every module; fail when one calls a vulnerable function of a module it requires (hack/vulncheck.sh).
	GOVULNCHECK=$(GOVULNCHECK) VULNDB=$(VULNDB) hack/vulncheck.sh . $(OTHER_MODULES)

SCENARIOS := scale-out scale-in rolling-restart zone-outage queue-growth weights rollout-2-broker-zones rollout-3-broker-zones churn
# The scenarios with per-queue load run Sticky balancing by load.
LOAD_SCENARIOS := load-lognormal load-hotspot load-hotspot-noise load-wandering

.PHONY: plots
plots: ## Regenerate the simulator's plots (docs/simulate-*.svg) and result tables (docs/simulate-results.md).
	for s in $(SCENARIOS); do go run ./hack/simulate -scenario $$s -format svg > docs/simulate-$$s.svg; done
	for s in $(LOAD_SCENARIOS); do go run ./hack/simulate -scenario $$s -balance-by Load -format svg > docs/simulate-$$s.svg; done
	{ echo '# Simulator results'; echo; \
	  echo 'Generated by `make plots`; do not edit. Each cell: moved / lower bound (min–max queues per member, ✗ when unbalanced, cross-zone queues of the fewest a balanced plan allows, and the moves of the replans until nothing moves with the cross-zone count they reach).'; echo; \
	  for s in $(SCENARIOS); do go run ./hack/simulate -scenario $$s -format markdown; done; \
	  echo '## Balancing by load'; echo; \
	  echo 'Sticky balances by load (`-balance-by Load`). Each cell: queues moved (their load); the busiest member'"'"'s load over the members'"'"' mean, ✗ when a member is above max(1.1 × its fair share, its share plus its hottest queue).'; echo; \
	  for s in $(LOAD_SCENARIOS); do go run ./hack/simulate -scenario $$s -balance-by Load -format markdown; done; } > docs/simulate-results.md

##@ Build and run

# The images' repositories are $(REPOSITORY_PREFIX)/consumergroup-operator and .../consumergroup-agent, for
# the GOARCH IMAGE_ARCH; their tag is VERSION, or dev.
REPOSITORY_PREFIX ?= ghcr.io/consumergroup-operator
IMAGE_ARCH ?= amd64
IMAGE_BIN := $(BIN)/linux-$(IMAGE_ARCH)

.PHONY: images
images: ## Build the operator's and the agent's images as tarballs in dist/, without a Docker engine: docker load -i dist/consumergroup-operator.tar.
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) go build -trimpath -ldflags "-s -w $(VERSION_LDFLAGS)" -o $(IMAGE_BIN)/manager .
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) go build -trimpath -ldflags "-s -w $(VERSION_LDFLAGS)" -o $(IMAGE_BIN)/ ./cmd/consumergroup-agent
	cd $(RELEASE_MODULE) && go run . images -bin $(IMAGE_BIN) -arch $(IMAGE_ARCH) -version $(or $(VERSION),dev) \
	  -revision $(REVISION) -created $(SOURCE_DATE) -repository-prefix $(REPOSITORY_PREFIX) -out $(DIST)

# The platforms kubectl-cg is released for.
PLUGIN_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64

.PHONY: release
release: ## Write a release into dist/: the images, install.yaml, the Helm chart's package, kubectl-cg's archives and krew manifest (make release VERSION=x.y.z).
	@if [[ -z "$(VERSION)" ]]; then echo 'make release needs a VERSION, e.g. make release VERSION=0.1.0' >&2; exit 1; fi
	$(MAKE) images
	cd $(RELEASE_MODULE) && go run . manifests -version $(VERSION) -repository-prefix $(REPOSITORY_PREFIX) -out $(DIST)
	for p in $(PLUGIN_PLATFORMS); do \
	  CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} go build -trimpath -ldflags "-s -w $(VERSION_LDFLAGS)" -o $(BIN)/$${p%/*}-$${p#*/}/kubectl-cg ./cmd/kubectl-cg; \
	done
	cd $(RELEASE_MODULE) && go run . plugin -bin $(BIN) -platforms $$(echo $(PLUGIN_PLATFORMS) | tr ' ' ,) -version $(VERSION) \
	  -created $(SOURCE_DATE) -out $(DIST)

.PHONY: build
build: ## Build the operator into bin/manager and every command under cmd/ into bin/; VERSION=x.y.z stamps a release (--version).
	go build -ldflags "$(VERSION_LDFLAGS)" -o $(BIN)/manager .
	if compgen -G 'cmd/*/' > /dev/null; then go build -ldflags "$(VERSION_LDFLAGS)" -o $(BIN)/ ./cmd/...; fi

.PHONY: run
run: ## Run the operator: against the configured cluster if one answers, else on a local cluster (kube-controller-manager, kube-scheduler, kwok) with a demo group and its consumers.
	hack/run.sh

##@ Tools

.PHONY: envtest-bins
envtest-bins: ## Build etcd, kube-apiserver, kubectl, kube-controller-manager, kube-scheduler and kwok into the machine's cache, once for every checkout.
	@hack/envtest-bins.sh > /dev/null

.PHONY: jdk
jdk: ## Find a JDK 17+ for the tests of clients/java, installing Debian's when there is none (hack/jdk.sh).
	@hack/jdk.sh > /dev/null

.PHONY: controller-gen
controller-gen: ## Install controller-gen into bin/ when missing.
	@$(call go-install,$(CONTROLLER_GEN),sigs.k8s.io/controller-tools/cmd/controller-gen,$(CONTROLLER_GEN_VERSION))

.PHONY: promtool
promtool: ## Install promtool (github.com/prometheus/prometheus) into bin/ when missing.
	@$(call go-install,$(PROMTOOL),github.com/prometheus/prometheus/cmd/promtool,$(PROMTOOL_VERSION))

.PHONY: govulncheck
govulncheck: ## Install govulncheck (golang.org/x/vuln) into bin/ when missing.
	@$(call go-install,$(GOVULNCHECK),golang.org/x/vuln/cmd/govulncheck,$(GOVULNCHECK_VERSION))

.PHONY: vulndb
vulndb: ## Build the Go vulnerability database of VULNDB_VERSION into bin/vulndb/ when missing, from the Go module proxy.
	@if [[ ! -f "$(VULNDB)/index/db.json" ]]; then \
	  $(call go-install,$(VULNDB_INDEXDB),golang.org/x/vulndb/cmd/indexdb,$(VULNDB_VERSION)); \
	  src=$$(cd / && go mod download -json golang.org/x/vulndb@$(VULNDB_VERSION) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p'); \
	  echo "indexing $$src/data/osv into $(VULNDB)" >&2; \
	  rm -rf "$(VULNDB).tmp"; $(VULNDB_INDEXDB) -vulns "$$src/data/osv" -out "$(VULNDB).tmp"; mv "$(VULNDB).tmp" "$(VULNDB)"; \
	fi

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
