#!/usr/bin/env bash
# Builds the testbed's optional scheduling components from the Go module proxy, each inside its own
# downloaded module (so its go.mod, replace directives and go.sum apply exactly as upstream pins them):
#   kueue                        sigs.k8s.io/kueue           ./cmd/kueue      (Kueue's controller manager)
#   scheduler-plugins-scheduler  sigs.k8s.io/scheduler-plugins ./cmd/scheduler (kube-scheduler + coscheduling)
# Volcano (volcano.sh/volcano) is not built: the module proxy refuses it here (403, "not available").
# Output: $MPIJOB_TESTBED_EXTRAS_BIN (default <repo>/.cache/testbed/extras), git-ignored, with a stamp
# of its own so the core testbed (testbed/build.sh) never rebuilds because of these.
# Usage: build.sh [kueue] [coscheduling]   (default: both). Idempotent per binary.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${MPIJOB_TESTBED_EXTRAS_BIN:-$repo/.cache/testbed/extras}"
kueue_version="v0.17.0"
scheduler_plugins_version="v0.34.7"

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"
mkdir -p "$out"
start=$SECONDS
step() { printf '[extras build %4ds] %s\n' $((SECONDS - start)) "$*"; }

build() {  # build <name> <module> <version> <package>
  local name="$1" module="$2" version="$3" pkg="$4"
  local want; want="$(cat "$here/build.sh" | sha256sum | cut -c1-16) $module@$version $(go version)"
  if [[ -x "$out/$name" && -f "$out/$name.stamp" && "$(cat "$out/$name.stamp")" == "$want" ]]; then
    step "$name up to date in $out"
    return 0
  fi
  step "downloading $module@$version"
  local dir
  dir="$(go mod download -json "$module@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [[ -n "$dir" && -d "$dir" ]] || { echo "cannot download $module@$version" >&2; return 1; }
  step "go build $module/$pkg  (cold: several minutes on 2 cores)"
  (cd "$dir" && go build -trimpath -ldflags "-s -w" -o "$out/$name.tmp" "./$pkg")
  mv "$out/$name.tmp" "$out/$name"
  # The module directory: where the testbed reads the CRDs and webhook manifests at run time.
  echo "$dir" > "$out/$name.module"
  echo "$want" > "$out/$name.stamp"
  step "built $out/$name"
}

targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(kueue coscheduling)
for t in "${targets[@]}"; do
  case "$t" in
    kueue) build kueue sigs.k8s.io/kueue "$kueue_version" cmd/kueue ;;
    coscheduling) build scheduler-plugins-scheduler sigs.k8s.io/scheduler-plugins "$scheduler_plugins_version" cmd/scheduler ;;
    volcano) echo "volcano: not buildable here (volcano.sh/volcano is not served by the Go module proxy)" >&2; exit 3 ;;
    *) echo "unknown component $t (kueue, coscheduling)" >&2; exit 2 ;;
  esac
done
step "done"
