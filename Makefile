# consumergroup-operator
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

.PHONY: test
test: ## Run every test (unit, property and envtest).
	go test ./... -count=1
