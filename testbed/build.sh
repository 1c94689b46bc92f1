#!/usr/bin/env bash
# Builds the testbed's control-plane binaries from the Go module proxy, at the
# versions pinned in testbed/k8s/go.mod and testbed/kwok/go.mod:
#   kube-apiserver kube-controller-manager kube-scheduler kubectl (k8s.io/kubernetes v1.37.2)
#   etcd (go.etcd.io/etcd/server/v3, the version Kubernetes pins)
#   kwok (sigs.k8s.io/kwok v0.8.0)
# Output: $MPIJOB_TESTBED_BIN (default <repo>/.cache/testbed/bin), git-ignored.
# Idempotent: a stamp file records a hash of the inputs; nothing is rebuilt
# when it matches and every binary is present. Go's own build cache makes a
# forced rebuild mostly a link step.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
source "$here/lib.sh"
out="${MPIJOB_TESTBED_BIN:-$repo/.cache/testbed/bin}"
bins=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok)
k8s_go_env

inputs_hash() {
  cat "$here/build.sh" "$here/lib.sh" "$here"/k8s/go.mod "$here"/k8s/go.sum "$here"/k8s/cmd/etcd/main.go \
      "$here"/kwok/go.mod "$here"/kwok/go.sum | sha256sum | cut -c1-16
  go version
}
stamp="$out/.stamp"
want="$(inputs_hash | tr '\n' ' ')"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  missing=0
  for b in "${bins[@]}"; do [[ -x "$out/$b" ]] || missing=1; done
  if [[ $missing == 0 ]]; then
    echo "testbed: binaries up to date in $out"
    exit 0
  fi
fi

mkdir -p "$out"
start=$SECONDS
step() { printf '[testbed build %4ds] %s\n' $((SECONDS - start)) "$*"; }

ldflags="$(k8s_ldflags)"
cd "$here/k8s"
step "downloading Kubernetes modules (first run: ~1 GB)"
go mod download
n=0
for target in ./cmd/etcd k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
              k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl; do
  n=$((n + 1))
  step "($n/6) go build $target  (cold: several minutes each on 2 cores)"
  go build -trimpath -ldflags "$ldflags" -o "$out/" "$target"
done
cd "$here/kwok"
step "(6/6) go build sigs.k8s.io/kwok/cmd/kwok"
go mod download
go build -trimpath -ldflags "-s -w" -o "$out/" sigs.k8s.io/kwok/cmd/kwok
echo "$want" > "$stamp"
step "done: ${bins[*]} in $out"
