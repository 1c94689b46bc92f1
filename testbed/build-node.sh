#!/usr/bin/env bash
# Builds the real nodes' parts from Go modules:
#   kubelet  k8s.io/kubernetes (testbed/k8s/go.mod, the control plane's module, so its version matches the API server)
#   coredns  github.com/coredns/coredns v1.15.0 with the standard Corefile's plugins (testbed/coredns/main.go)
# Separate from build.sh (own output directory and stamp) so that the kwok-only testbed never builds or waits
# for them. Output: $MPIJOB_TESTBED_NODE_BIN (default <repo>/.cache/testbed/node-bin), git-ignored.
# Cold: kubelet ~470 s on 2 cores (~75 s with the control plane's Go build cache warm), coredns ~150 s.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
source "$here/lib.sh"
out="${MPIJOB_TESTBED_NODE_BIN:-$repo/.cache/testbed/node-bin}"
k8s_go_env

stamp="$out/.stamp"
want="$( (cat "$here/build-node.sh" "$here/lib.sh" "$here"/k8s/go.mod "$here"/k8s/go.sum "$here"/coredns/go.mod \
  "$here"/coredns/go.sum "$here"/coredns/main.go | sha256sum | cut -c1-16; go version) | tr '\n' ' ')"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$out/kubelet" && -x "$out/coredns" ]]; then
  echo "testbed: kubelet and coredns up to date in $out"
  exit 0
fi
mkdir -p "$out"
start=$SECONDS
ldflags="$(k8s_ldflags)"
cd "$here/k8s"
echo "[testbed node build] (1/2) go build k8s.io/kubernetes/cmd/kubelet (cold: ~8 min on 2 cores)"
go mod download
nice -n 10 go build -trimpath -ldflags "$ldflags" -o "$out/" k8s.io/kubernetes/cmd/kubelet
cd "$here/coredns"
echo "[testbed node build $((SECONDS - start))s] (2/2) go build coredns (github.com/coredns/coredns v1.15.0; cold: ~2-3 min)"
go mod download
nice -n 10 go build -trimpath -ldflags "-s -w" -o "$out/coredns" .
echo "$want" > "$stamp"
echo "[testbed node build] done in $((SECONDS - start)) s: $out/kubelet $out/coredns"
