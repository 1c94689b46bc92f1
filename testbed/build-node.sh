#!/usr/bin/env bash
# Builds the real node's kubelet from the same Go module (testbed/k8s/go.mod) as the
# control plane, so its version matches the API server. Separate from build.sh (own
# output directory and stamp) so that the kwok-only testbed never builds or waits for it.
# Output: $MPIJOB_TESTBED_NODE_BIN (default <repo>/.cache/testbed/node-bin), git-ignored.
# Cold: ~470 s on 2 cores; with the control plane's Go build cache warm: ~75 s.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
source "$here/lib.sh"
out="${MPIJOB_TESTBED_NODE_BIN:-$repo/.cache/testbed/node-bin}"
k8s_go_env

stamp="$out/.stamp"
want="$( (cat "$here/build-node.sh" "$here/lib.sh" "$here"/k8s/go.mod "$here"/k8s/go.sum | sha256sum | cut -c1-16; go version) | tr '\n' ' ')"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$out/kubelet" ]]; then
  echo "testbed: kubelet up to date in $out"
  exit 0
fi
mkdir -p "$out"
start=$SECONDS
ldflags="$(k8s_ldflags)"
cd "$here/k8s"
echo "[testbed node build] go build k8s.io/kubernetes/cmd/kubelet (cold: ~8 min on 2 cores)"
go mod download
nice -n 10 go build -trimpath -ldflags "$ldflags" -o "$out/" k8s.io/kubernetes/cmd/kubelet
echo "$want" > "$stamp"
echo "[testbed node build] done in $((SECONDS - start)) s: $out/kubelet"
