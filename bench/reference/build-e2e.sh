#!/usr/bin/env bash
# Builds the reference's own e2e suite (kubeflow/mpi-operator test/e2e, Ginkgo v1) at the version pinned in
# bench/reference/go.mod into one test binary, for tests/integration/test_reference_e2e.py. The module cache is
# read-only, so the module is copied to a writable directory and compiled there with `go test -c ./test/e2e`;
# nothing of the suite is edited or committed. The suite finds `../../bin/kubectl` and its manifests relative
# to its working directory: run it from <out>/e2e/src/test/e2e (the test module links bin/kubectl there).
# Output: $MPIJOB_REFERENCE_BIN/e2e (default <repo>/.cache/reference/e2e), git-ignored: e2e.test, src/, version.
# Idempotent: a stamp records a hash of the inputs, and nothing is rebuilt when it matches.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${MPIJOB_REFERENCE_BIN:-$repo/.cache/reference}/e2e"
module=github.com/kubeflow/mpi-operator

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false"

inputs_hash() {
  cat "$here/build-e2e.sh" "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-16
  go version
}
stamp="$out/.stamp"
want="$(inputs_hash | tr '\n' ' ')"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$out/e2e.test" && -d "$out/src/test/e2e" ]]; then
  echo "reference e2e: suite up to date in $out"
  exit 0
fi

mkdir -p "$out"
start=$SECONDS
step() { printf '[reference e2e build %4ds] %s\n' $((SECONDS - start)) "$*"; }
cd "$here"
step "downloading $module"
go mod download "$module"
version="$(go list -m -f '{{.Version}}' "$module")"
dir="$(go list -m -f '{{.Dir}}' "$module")"
step "copying $dir to a writable $out/src"
rm -rf "$out/src" "$out/e2e.test" "$stamp"
cp -r "$dir" "$out/src"
chmod -R u+w "$out/src"
cd "$out/src"
# Only the packages the suite imports are downloaded (its go.mod also lists tools such as golangci-lint).
step "go test -c ./test/e2e $version, its go.mod and go.sum unchanged  (cold: several minutes on 2 cores)"
nice -n 10 go test -c -trimpath -o "$out/e2e.test" ./test/e2e
echo "$version" > "$out/version"
echo "$want" > "$stamp"
step "done: $out/e2e.test ($version); run it from $out/src/test/e2e"
