#!/usr/bin/env bash
# make run: runs the operator against the cluster of $KUBECONFIG (or ~/.kube/config) when it answers;
# otherwise on a local cluster of its own (internal/cluster) with a demo group and its consumers (hack/localdev).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The demo and the kubectl plugin build while the cluster's binaries do (hack/envtest-bins.sh). Built as
# the cluster's binaries are (CGO_ENABLED=0, -trimpath, the same -gcflags), they share the compiled
# packages both need (the standard library, k8s.io/api, apimachinery, client-go and their dependencies:
# all but about 75 of the demo's 1,227) through Go's build cache, because the root go.mod and
# hack/envtest-bins/go.mod pin the same versions (TestDemoBuildsWithTheClusterVersions keeps them so).
# Their modules download at once, while Kubernetes compiles; they compile once envtest-bins.sh says it has compiled the shared packages ($ENVTEST_BINS_SHARED), so that
# the two builds do not compile the same packages at the same time, and fill the cores while the cluster's
# binaries link.
mkdir -p bin/localdev
build_log=bin/localdev/build.log
shared=bin/localdev/.envtest-bins-shared
rm -f "$shared"
gcflags=$(hack/envtest-bins.sh -gcflags)
(
  go list -deps ./hack/localdev ./cmd/kubectl-cg > /dev/null &&
    while [[ ! -e $shared ]]; do sleep 1; done &&
    CGO_ENABLED=0 go build -trimpath -gcflags "$gcflags" -o bin/localdev/localdev ./hack/localdev &&
    CGO_ENABLED=0 go build -trimpath -gcflags "$gcflags" -o bin/kubectl-cg ./cmd/kubectl-cg
) > "$build_log" 2>&1 &
builds=$!
echo "Building the demo (bin/localdev/localdev) and the kubectl plugin (bin/kubectl-cg) beside the cluster's binaries"
assets=$(ENVTEST_BINS_SHARED="$shared" hack/envtest-bins.sh)
kubectl="$assets/kubectl"

config=${KUBECONFIG:-$HOME/.kube/config}
if [[ -n ${KUBECONFIG:-} || -f $config ]] && "$kubectl" cluster-info --request-timeout=5s > /dev/null 2>&1; then
  wait "$builds" || true # the plugin is welcome; the demo is not needed
  echo "Cluster found ($("$kubectl" config current-context)): installing the CRD and running the operator against it."
  "$kubectl" apply --server-side -f config/crd/bases
  echo "Try: kubectl apply -f config/samples/messaging_v1alpha1_consumergroup_sticky.yaml -f config/samples/demo/order-consumer.yaml"
  exec go run . --metrics-bind-address=0
fi

echo "No cluster answers at ${KUBECONFIG:-~/.kube/config}: running the operator on a local cluster."
if ! wait "$builds"; then
  cat "$build_log" >&2
  echo "building the demo or the kubectl plugin failed (above)" >&2
  exit 1
fi
exec env KUBEBUILDER_ASSETS="$assets" bin/localdev/localdev "$@"
