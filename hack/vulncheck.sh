#!/usr/bin/env bash
# make vulncheck: govulncheck over each Go module given (the operator's, hack/release, clients/rocketmq-go),
# against the database in $VULNDB (built by make vulndb from the Go module proxy). It fails when a module
# calls a vulnerable function of a module it requires: go.mod can fix that. Vulnerabilities in the
# standard library are the Go toolchain's: they are printed, with the Go version that fixes them, and fail
# only with VULNCHECK_STDLIB=fail (for the machine that builds releases), since the repository cannot
# change which Go a machine has.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
: "${GOVULNCHECK:?}" "${VULNDB:?}"
command -v jq > /dev/null || { echo 'vulncheck needs jq (apt-get install jq)' >&2; exit 1; }

failed=0
stdlib=()
for m in "$@"; do
  out=$(cd "$m" && "$GOVULNCHECK" -db "file://$VULNDB" -format json ./...)
  # A finding whose trace starts at a function is one the code calls; the others are in packages or
  # modules it only imports or requires.
  called=$(jq -r 'select(.finding.trace[0].function != null) | .finding
    | "\(.osv)\t\(.trace[0].module)@\(.trace[0].version)\tfixed in \(.fixed_version // "no release")"' <<< "$out" | sort -u)
  modules=$(grep -v $'\tstdlib@' <<< "$called" || true)
  if [[ -n $modules ]]; then
    echo "$m calls vulnerable code (https://pkg.go.dev/vuln/<id>):" >&2
    echo "$modules" >&2
    failed=1
  fi
  while IFS= read -r line; do [[ -n $line ]] && stdlib+=("$m: $line"); done < <(grep $'\tstdlib@' <<< "$called" || true)
done

if ((${#stdlib[@]})); then
  echo "The Go toolchain $(go env GOVERSION) has vulnerabilities the code reaches; build releases with a Go that fixes them:" >&2
  printf '  %s\n' "${stdlib[@]}" >&2
  [[ ${VULNCHECK_STDLIB:-warn} == fail ]] && failed=1
fi
if ((failed)); then exit 1; fi
echo "govulncheck: no module calls a vulnerable function of a module it requires (database $(basename "$VULNDB"))"
