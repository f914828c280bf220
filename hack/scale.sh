#!/usr/bin/env bash
# Usage: hack/scale.sh N
# Makes the demo group's member pods order-consumer-0 .. order-consumer-(N-1): creates the missing ones and
# deletes the others, in the current namespace of $KUBECONFIG (the local demo's kubeconfig when unset).
# The pods run registry.k8s.io/pause and carry app=order-consumer, which the samples select; they are plain
# pods, not a Deployment, because the local demo's control plane has no controller-manager.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
n=${1:?usage: hack/scale.sh N}
if ! [[ $n =~ ^[0-9]+$ ]]; then echo "hack/scale.sh: N must be a whole number, got $n" >&2; exit 2; fi

export KUBECONFIG=${KUBECONFIG:-$root/bin/localdev/kubeconfig}
kubectl=${KUBECTL:-}
if [[ -z $kubectl ]]; then
  # The kubectl make run built (hack/envtest-bins.sh caches it), else the one on the PATH.
  kubectl="$("$root/hack/envtest-bins.sh" 2>/dev/null)/kubectl" || true
  [[ -x $kubectl ]] || kubectl=kubectl
fi

existing=$("$kubectl" get pods -l app=order-consumer -o name)
for ((i = 0; i < n; i++)); do
  if ! grep -qx "pod/order-consumer-$i" <<< "$existing"; then
    cat <<POD
apiVersion: v1
kind: Pod
metadata:
  name: order-consumer-$i
  labels:
    app: order-consumer
spec:
  containers:
    - name: consumer
      image: registry.k8s.io/pause:3.10
---
POD
  fi
done | { manifests=$(cat); if [[ -n $manifests ]]; then "$kubectl" create -f - <<< "$manifests"; fi; }

extra=()
for pod in $existing; do
  i=${pod#pod/order-consumer-}
  if [[ $i =~ ^[0-9]+$ ]] && ((i >= n)); then extra+=("$pod"); fi
done
if ((${#extra[@]} > 0)); then
  "$kubectl" delete --wait=false "${extra[@]}"
fi
