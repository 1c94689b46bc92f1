#!/usr/bin/env bash
# Builds Prometheus and promtool from the Go module proxy (github.com/prometheus/prometheus, pinned below),
# inside the downloaded module itself (its go.mod, replace directives and go.sum apply as upstream pins them):
#   prometheus  ./cmd/prometheus   the server the testbed runs with `mpijob-testbed up --with prometheus`
#   promtool    ./cmd/promtool     `promtool check rules` / `promtool test rules` for deploy/prometheus/*.yaml
# and downloads the Prometheus operator's module (github.com/prometheus-operator/prometheus-operator, pinned
# below) for its CRDs (example/prometheus-operator-crd/): the chart's ServiceMonitor and PrometheusRule are
# installed against them on the testbed (tests/integration/test_install.py); its path goes to
# prometheus-operator.module, as testbed/extras/build.sh records the modules it reads manifests from.
# Built without the `builtinassets` tag: the web UI's compiled assets are not in the module (upstream builds
# them with npm); the testbed only uses the HTTP API (/api/v1/...), which does not need them.
# Output: $MPIJOB_PROMETHEUS_BIN (default <repo>/.cache/testbed/prometheus), git-ignored, with one stamp per
# binary (this script + module@version + go version) so nothing is rebuilt while they match.
# Usage: build.sh   Idempotent.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${MPIJOB_PROMETHEUS_BIN:-$repo/.cache/testbed/prometheus}"
module="github.com/prometheus/prometheus"
version="v0.316.0"   # the Go module version of Prometheus v3.16.0
operator_module="github.com/prometheus-operator/prometheus-operator"
operator_version="v0.85.0"   # the newest version of that module the proxy serves here

# GOWORK=off: the module ships a go.work naming submodules that are not part of the module zip
export GOTOOLCHAIN=local CGO_ENABLED=0 GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false"
mkdir -p "$out"
start=$SECONDS
step() { printf '[prometheus build %4ds] %s\n' $((SECONDS - start)) "$*"; }

want="$(sha256sum < "$here/build.sh" | cut -c1-16) $module@$version $(go version)"
up_to_date() {  # up_to_date <name>
  [[ -x "$out/$1" && -f "$out/$1.stamp" && "$(cat "$out/$1.stamp")" == "$want" ]]
}
download() {  # download <module@version>: prints the module's directory
  local dir
  dir="$(go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [[ -n "$dir" && -d "$dir" ]] || { echo "cannot download $1" >&2; return 1; }
  echo "$dir"
}
operator_dir="$(cat "$out/prometheus-operator.module" 2>/dev/null || true)"
if [[ "$operator_dir" != *"@$operator_version" || ! -d "$operator_dir" ]]; then
  step "downloading $operator_module@$operator_version (its CRDs)"
  download "$operator_module@$operator_version" > "$out/prometheus-operator.module"
fi
if up_to_date prometheus && up_to_date promtool; then
  step "prometheus and promtool up to date in $out"
  exit 0
fi
step "downloading $module@$version"
dir="$(download "$module@$version")"
# upstream stamps the version through ldflags (Makefile.common / promu); do the same so --version is truthful
# (module v0.MMPP.x is Prometheus vM.PP.x: v0.316.0 -> 3.16.0)
minor="${version#v0.}"; minor="${minor%%.*}"; patch="${version##*.}"
ldflags="-s -w -X github.com/prometheus/common/version.Version=$((minor / 100)).$((minor % 100)).$patch"
ldflags+=" -X github.com/prometheus/common/version.Branch=module -X github.com/prometheus/common/version.Revision=$version"
for name in prometheus promtool; do
  if up_to_date "$name"; then step "$name up to date"; continue; fi
  step "go build $module/cmd/$name  (cold: several minutes on 2 cores)"
  (cd "$dir" && nice -n 10 go build -trimpath -ldflags "$ldflags" -o "$out/$name.tmp" "./cmd/$name")
  mv "$out/$name.tmp" "$out/$name"
  echo "$want" > "$out/$name.stamp"
  step "built $out/$name"
done
step "done"
