#!/usr/bin/env bash
# Builds the reference operator, kubeflow/mpi-operator's cmd/mpi-operator, at the version pinned in
# bench/reference/go.mod, from the Go module proxy, for the side-by-side benchmark (bench/compare.py).
# Its CRD is taken from the same module (manifests/base/kubeflow.org_mpijobs.yaml in the module cache).
# Output: $MPIJOB_REFERENCE_BIN (default <repo>/.cache/reference), git-ignored; nothing of its code is
# committed. Idempotent: a stamp records a hash of the inputs, and nothing is rebuilt when it matches.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${MPIJOB_REFERENCE_BIN:-$repo/.cache/reference}"
module=github.com/kubeflow/mpi-operator

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false"

inputs_hash() {
  cat "$here/build.sh" "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-16
  go version
}
stamp="$out/.stamp"
want="$(inputs_hash | tr '\n' ' ')"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$out/mpi-operator" && -f "$out/crd.yaml" ]]; then
  echo "reference: mpi-operator up to date in $out"
  exit 0
fi

mkdir -p "$out"
start=$SECONDS
step() { printf '[reference build %4ds] %s\n' $((SECONDS - start)) "$*"; }
cd "$here"
step "downloading $module and its dependencies"
go mod download
version="$(go list -m -f '{{.Version}}' "$module")"
step "go build $module/cmd/mpi-operator $version  (cold: a few minutes on 2 cores)"
nice -n 10 go build -trimpath -ldflags "-s -w" -o "$out/mpi-operator" "$module/cmd/mpi-operator"
cp "$(go list -m -f '{{.Dir}}' "$module")/manifests/base/kubeflow.org_mpijobs.yaml" "$out/crd.yaml"
chmod 0644 "$out/crd.yaml"
echo "$version" > "$out/version"
echo "$want" > "$stamp"
step "done: $out/mpi-operator ($version) and its CRD $out/crd.yaml"
