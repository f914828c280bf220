#!/usr/bin/env bash
# Builds the control-plane binaries the tests and the demo run (etcd, kube-apiserver, kubectl) from the
# Go modules pinned in hack/envtest-bins/go.mod, into bin/k8s/<version>-<os>-<arch>/, the layout
# setup-envtest uses. Binaries that are already there at the right version are not rebuilt.
# Prints the directory, for KUBEBUILDER_ASSETS.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mod="$root/hack/envtest-bins"
version=$(awk '($1 == "k8s.io/kubernetes" && $2 ~ /^v/) {print $2} ($1 == "require" && $2 == "k8s.io/kubernetes") {print $3}' "$mod/go.mod" | head -1)
version=${version#v}
dir="$root/bin/k8s/${version}-$(go env GOOS)-$(go env GOARCH)"
mkdir -p "$dir"

major=${version%%.*}; rest=${version#*.}; minor=${rest%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=v$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done

# build NAME PACKAGE: skipped when the binary exists and was built from the same go.sum.
stamp=$(sha256sum "$mod/go.mod" "$mod/go.sum" | sha256sum | cut -c1-16)
build() {
  local name=$1 pkg=$2
  if [[ -x "$dir/$name" && -f "$dir/.$name.stamp" && "$(cat "$dir/.$name.stamp")" == "$stamp" ]]; then
    return
  fi
  echo "building $name ($pkg) into $dir" >&2
  (cd "$mod" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$dir/$name" "$pkg")
  echo "$stamp" > "$dir/.$name.stamp"
}
build etcd go.etcd.io/etcd/server/v3
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build kubectl k8s.io/kubernetes/cmd/kubectl
echo "$dir"
