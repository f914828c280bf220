#!/usr/bin/env bash
# make run: runs the operator against the cluster of $KUBECONFIG (or ~/.kube/config) when it answers;
# otherwise on a local cluster of its own (internal/cluster) with a demo group and its consumers (hack/localdev).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
assets=$(hack/envtest-bins.sh)
kubectl="$assets/kubectl"

config=${KUBECONFIG:-$HOME/.kube/config}
if [[ -n ${KUBECONFIG:-} || -f $config ]] && "$kubectl" cluster-info --request-timeout=5s > /dev/null 2>&1; then
  echo "Cluster found ($("$kubectl" config current-context)): installing the CRD and running the operator against it."
  "$kubectl" apply --server-side -f config/crd/bases
  echo "Try: kubectl apply -f config/samples/messaging_v1alpha1_consumergroup_sticky.yaml -f config/samples/demo/order-consumer.yaml"
  exec go run . --metrics-bind-address=0
fi

echo "No cluster answers at ${KUBECONFIG:-~/.kube/config}: running the operator on a local cluster."
echo "Building the demo (bin/localdev/localdev) and the kubectl plugin (bin/kubectl-cg)"
# Both builds share the packages they need through Go's build cache; run side by side they keep both
# cores busy.
go build -o bin/localdev/localdev ./hack/localdev &
demo=$!
go build -o bin/kubectl-cg ./cmd/kubectl-cg
wait "$demo"
exec env KUBEBUILDER_ASSETS="$assets" bin/localdev/localdev "$@"
