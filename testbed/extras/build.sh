#!/usr/bin/env bash
# Builds the testbed's optional scheduling components from the Go module proxy, each inside its own
# downloaded module (so its go.mod, replace directives and go.sum apply exactly as upstream pins them):
#   kueue                        sigs.k8s.io/kueue           ./cmd/kueue      (Kueue's controller manager)
#   scheduler-plugins-scheduler  kube-scheduler (Kubernetes v1.34) + the Coscheduling plugin of
#                                sigs.k8s.io/scheduler-plugins v0.34.7, from testbed/extras/scheduler-plugins (its
#                                go.mod says why not upstream's go.mod as is: one pinned module is not served here)
# Volcano (volcano.sh/volcano) is not built: the module proxy refuses it here (403, "not available").
# Output: $MPIJOB_TESTBED_EXTRAS_BIN (default <repo>/.cache/testbed/extras), git-ignored, with a stamp
# of its own so the core testbed (testbed/build.sh) never rebuilds because of these.
# Usage: build.sh [kueue] [coscheduling]   (default: both). Idempotent per binary.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${MPIJOB_TESTBED_EXTRAS_BIN:-$repo/.cache/testbed/extras}"
kueue_version="v0.17.0"

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"
mkdir -p "$out"
start=$SECONDS
step() { printf '[extras build %4ds] %s\n' $((SECONDS - start)) "$*"; }

up_to_date() {  # up_to_date <name> <stamp>
  [[ -x "$out/$1" && -f "$out/$1.stamp" && "$(cat "$out/$1.stamp")" == "$2" && -f "$out/$1.module" ]]
}

build() {  # build <name> <module> <version> <package>: inside the downloaded module itself
  local name="$1" module="$2" version="$3" pkg="$4"
  local want; want="$(cat "$here/build.sh" | sha256sum | cut -c1-16) $module@$version $(go version)"
  if up_to_date "$name" "$want"; then
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

build_coscheduling() {  # our wrapper module (testbed/extras/scheduler-plugins)
  local name=scheduler-plugins-scheduler dir="$here/scheduler-plugins"
  local want; want="$(cat "$here/build.sh" "$dir/go.mod" "$dir/go.sum" "$dir"/cmd/*/main.go | sha256sum | cut -c1-16) $(go version)"
  if up_to_date "$name" "$want"; then
    step "$name up to date in $out"
    return 0
  fi
  step "downloading modules of testbed/extras/scheduler-plugins"
  (cd "$dir" && go mod download)
  step "go build $name (kube-scheduler + Coscheduling; cold: several minutes on 2 cores)"
  (cd "$dir" && go build -trimpath -ldflags "-s -w" -o "$out/$name.tmp" ./cmd/coscheduling-scheduler)
  mv "$out/$name.tmp" "$out/$name"
  (cd "$dir" && go list -m -f '{{.Dir}}' sigs.k8s.io/scheduler-plugins) > "$out/$name.module"
  echo "$want" > "$out/$name.stamp"
  step "built $out/$name"
}

targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(kueue coscheduling)
for t in "${targets[@]}"; do
  case "$t" in
    kueue) build kueue sigs.k8s.io/kueue "$kueue_version" cmd/kueue ;;
    coscheduling) build_coscheduling ;;
    volcano) echo "volcano: not buildable here (volcano.sh/volcano is not served by the Go module proxy)" >&2; exit 3 ;;
    *) echo "unknown component $t (kueue, coscheduling)" >&2; exit 2 ;;
  esac
done
step "done"
