#!/usr/bin/env bash
# Builds the binaries of a whole cluster without a kubelet, which the tests and the demo run, and prints
# their directory, for KUBEBUILDER_ASSETS:
#   etcd, kube-apiserver, kubectl, kube-controller-manager and kube-scheduler, from the Go modules pinned
#   in hack/envtest-bins/go.mod (one k8s.io/kubernetes version for all);
#   kwok, which plays the kubelets (sigs.k8s.io/kwok at $kwok_version, from its own module).
#
# The binaries go to a cache shared by every checkout on the machine, in a directory named after the
# version and a digest of the pinned go.mod and go.sum (their content, not their path): a second or moved
# clone finds them built, and a change of the pins builds anew. The cache is
# $CONSUMERGROUP_CACHE_DIR, else the user cache directory ($XDG_CACHE_HOME or ~/.cache)/consumergroup-operator;
# when it cannot be written, bin/ of the checkout.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mod="$root/hack/envtest-bins"
version=$(awk '($1 == "k8s.io/kubernetes" && $2 ~ /^v/) {print $2} ($1 == "require" && $2 == "k8s.io/kubernetes") {print $3}' "$mod/go.mod" | head -1)
version=${version#v}
kwok_version=v0.8.0
digest=$( (cat "$mod/go.mod" "$mod/go.sum"; echo "sigs.k8s.io/kwok $kwok_version") | sha256sum | cut -c1-12)

cache=${CONSUMERGROUP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/consumergroup-operator}
if ! mkdir -p "$cache/k8s" 2>/dev/null || [[ ! -w "$cache/k8s" ]]; then
  cache="$root/bin"
  mkdir -p "$cache/k8s"
fi
dir="$cache/k8s/${version}-$(go env GOOS)-$(go env GOARCH)-${digest}"
binaries=(etcd kube-apiserver kubectl kube-controller-manager kube-scheduler kwok)

complete() {
  for name in "${binaries[@]}"; do [[ -x "$1/$name" ]] || return 1; done
}
if complete "$dir"; then
  echo "$dir"
  exit 0
fi

major=${version%%.*}; rest=${version#*.}; minor=${rest%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=v$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
# Build beside the final directory and rename it into place, so that a checkout building at the same time
# never sees half a set.
tmp=$(mktemp -d "$cache/k8s/.build-XXXXXX")
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT
# progress NAME TOTAL passes go build -v's output through: it counts the package lines (import paths,
# printed as each is compiled) and says every 250 how far NAME has got; anything else (errors) is passed on.
progress() {
  awk -v name="$1" -v total="$2" '
    /^[^ :#]+$/ { n++; if (n % 250 == 0) { printf "  %s: %d of at most %d packages compiled\n", name, n, total > "/dev/stderr"; fflush("/dev/stderr") } ; next }
    { print > "/dev/stderr" }'
}
# build NAME DIR OUT PACKAGES... builds PACKAGES of the module in DIR into OUT (a file, or a directory
# ending in / for several), with a progress line now and then.
build() {
  local name=$1 moddir=$2 out=$3
  shift 3
  local total
  total=$(cd "$moddir" && go list -deps "$@" | wc -l)
  echo "building $name into $dir ($total packages at most; the Go build cache skips those built before)" >&2
  (cd "$moddir" && CGO_ENABLED=0 go build -v -trimpath -ldflags "$ldflags" -o "$out" "$@" 2>&1 | progress "$name" "$total")
  echo "built $name" >&2
}
# The three builds run side by side: each one's single-threaded phases (linking, a package every other
# one waits for) leave a core free for the others. The four Kubernetes commands are one build, so the
# packages they share are compiled once and linked four times in parallel.
build "kube-apiserver, kube-controller-manager, kube-scheduler and kubectl (k8s.io/kubernetes v$version)" "$mod" "$tmp/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubectl &
k8s=$!
build etcd "$mod" "$tmp/etcd" go.etcd.io/etcd/server/v3 &
etcd=$!
# kwok's stages (how nodes and pods move through their lives) ship in its module: the cluster uses its
# fast node stages and its general pod stages, gathered into kwok-stages.yaml beside the binary. go install
# with a version builds kwok with its own module's requirements, apart from Kubernetes' pins.
(
  echo "building kwok (sigs.k8s.io/kwok $kwok_version) into $dir" >&2
  cd "$tmp" && CGO_ENABLED=0 GOBIN="$tmp" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$kwok_version"
  echo "built kwok" >&2
) &
kwok=$!
failed=0
for pid in "$k8s" "$etcd" "$kwok"; do
  wait "$pid" || failed=1
done
if (( failed )); then
  echo "building the cluster's binaries failed (above)" >&2
  exit 1
fi
src=$(cd "$tmp" && go mod download -json "sigs.k8s.io/kwok@$kwok_version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
stages=(node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml
  pod/general/pod-create.yaml pod/general/pod-init-container-running.yaml
  pod/general/pod-init-container-completed.yaml pod/general/pod-ready.yaml pod/general/pod-complete.yaml
  pod/general/pod-delete.yaml)
for stage in "${stages[@]}"; do cat "$src/kustomize/stage/$stage"; echo "---"; done > "$tmp/kwok-stages.yaml"
if ! mv -T "$tmp" "$dir" 2>/dev/null && ! complete "$dir"; then
  echo "could not move the binaries into $dir" >&2
  exit 1
fi
echo "$dir"
