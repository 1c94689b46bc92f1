#!/usr/bin/env bash
# Builds helm (helm.sh/helm/v3, pinned below) from the Go module proxy into $MPIJOB_HELM_BIN
# (default <repo>/.cache/helm/bin, git-ignored), so the chart tests run a real `helm template`/`helm lint`.
# Idempotent: nothing is rebuilt when the binary reports the pinned version.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
version="v3.22.0"
out="${MPIJOB_HELM_BIN:-$repo/.cache/helm/bin}"
if [[ -x "$out/helm" ]] && "$out/helm" version --template '{{.Version}}' 2>/dev/null | grep -qx "$version"; then
  echo "helm $version up to date in $out"
  exit 0
fi
mkdir -p "$out"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-buildvcs=false"
start=$SECONDS
echo "[helm build] go install helm.sh/helm/v3/cmd/helm@$version (cold: a few minutes on 2 cores)"
# helm stamps its version through ldflags in its own Makefile; do the same so `helm version` is truthful.
GOBIN="$out" nice -n 10 go install -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$version" \
  "helm.sh/helm/v3/cmd/helm@$version"
echo "[helm build] done in $((SECONDS - start))s: $out/helm"
