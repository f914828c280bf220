#!/usr/bin/env bash
# Builds the binaries of a whole cluster without a kubelet, which the tests and the demo run, and prints
# their directory, for KUBEBUILDER_ASSETS:
#   etcd, kube-apiserver, kubectl, kube-controller-manager, kube-scheduler and kwok (which plays the
#   kubelets), from the Go modules pinned in hack/envtest-bins/go.mod: one k8s.io/kubernetes version for
#   all, and kwok built against the same Kubernetes libraries, so that it shares their compiled packages.
#
# The binaries go to a cache shared by every checkout on the machine, in a directory named after the
# version and a digest of the pinned go.mod and go.sum (their content, not their path): a second or moved
# clone finds them built, and a change of the pins builds anew. The cache is
# $CONSUMERGROUP_CACHE_DIR, else the user cache directory ($XDG_CACHE_HOME or ~/.cache)/consumergroup-operator;
# when it cannot be written, bin/ of the checkout.
#
# They are built for a local cluster, to start soon, not to run fast: -gcflags "$gcflags" (below) compiles
# without inlining and without debug information, a third less compiler time on a cold build; the flags
# are part of the digest, so a changed recipe builds anew. `hack/envtest-bins.sh -gcflags` prints them, for
# builds that want to share compiled packages with these through Go's build cache (hack/run.sh).
#
# When $ENVTEST_BINS_SHARED names a file, it is created once the Kubernetes build has compiled the packages
# most other builds share with it (the standard library, k8s.io/api, apimachinery, client-go), or when this
# script ends, whichever comes first: a build started then finds them in Go's build cache instead of
# compiling them a second time at the same moment, which on two cores costs as long as it takes.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mod="$root/hack/envtest-bins"
# required MODULE prints the version of MODULE that the pinned go.mod requires.
required() {
  awk -v m="$1" '($1 == m && $2 ~ /^v/) {print $2} ($1 == "require" && $2 == m) {print $3}' "$mod/go.mod" | head -1
}
version=$(required k8s.io/kubernetes)
version=${version#v}
kwok_version=$(required sigs.k8s.io/kwok)
gcflags="all=-l -dwarf=false"
if [[ ${1:-} == -gcflags ]]; then
  echo "$gcflags"
  exit 0
fi
shared_mark=${ENVTEST_BINS_SHARED:-}
if [[ -n $shared_mark && $shared_mark != /* ]]; then shared_mark="$PWD/$shared_mark"; fi
mark_shared() { if [[ -n $shared_mark ]]; then touch "$shared_mark" || true; fi; }
digest=$( (cat "$mod/go.mod" "$mod/go.sum"; echo "-gcflags $gcflags") |
  sha256sum | cut -c1-12)

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
  mark_shared
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
trap 'rm -rf "$tmp"; mark_shared' EXIT
# The build has compiled the packages others share with it once it has compiled this many (its order
# puts the standard library, k8s.io/api, apimachinery and client-go in its first 1,000 of about 2,800).
shared_after=1200
# progress NAME TOTAL [MARK...] passes go build -v's output through: it counts the package lines (import
# paths, printed as each is compiled) and says every 250 how far NAME has got, and creates the MARK files
# once $shared_after are compiled; anything else (errors) is passed on.
progress() {
  local name=$1 total=$2
  shift 2
  awk -v name="$name" -v total="$total" -v after="$shared_after" '
    /^[^ :#]+$/ {
      n++
      if (n % 250 == 0) { printf "  %s: %d of at most %d packages compiled\n", name, n, total > "/dev/stderr"; fflush("/dev/stderr") }
      if (n == after) { print "shared"; fflush() }
      next
    }
    { print > "/dev/stderr" }' |
    while read -r _; do if (( $# )); then touch "$@" || true; fi; done
}
# The four Kubernetes commands, etcd and kwok (the tools the pinned go.mod names, at the versions it pins)
# are one go build: Go compiles each package once per process, so the packages they share (nearly all of
# etcd's and kwok's) are compiled once, not once by each of several builds running side by side; the six
# link in parallel.
name="kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (k8s.io/kubernetes v$version), etcd and kwok ($kwok_version)"
total=$(cd "$mod" && go list -deps tool | wc -l)
echo "building $name into $dir ($total packages at most; the Go build cache skips those built before)" >&2
if ! (cd "$mod" && CGO_ENABLED=0 go build -v -trimpath -gcflags "$gcflags" -ldflags "$ldflags" -o "$tmp/" tool 2>&1 |
  progress "the cluster's binaries" "$total" ${shared_mark:+"$shared_mark"}); then
  echo "building the cluster's binaries failed (above)" >&2
  exit 1
fi
# go build names a command after its import path's last element before a major version: server/v3, server.
mv "$tmp/server" "$tmp/etcd"
echo "built $name" >&2
# kwok's stages (how nodes and pods move through their lives) ship in its module: the cluster uses its
# fast node stages and its general pod stages, gathered into kwok-stages.yaml beside the binary.
src=$(cd "$mod" && go mod download -json "sigs.k8s.io/kwok@$kwok_version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
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
