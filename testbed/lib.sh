# What the testbed's build scripts share; sourced (`source "$here/lib.sh"`), never run. The stamps and
# image hashes of those scripts cover this file as well as the script itself, so a change here rebuilds
# what it affects, exactly as a change in the script would.

k8s_version="v1.37.2"
lib_sh="${BASH_SOURCE[0]}"

# script_hash <script>: 16 hex digits over the script and this file (a build's own inputs).
script_hash() { cat "$1" "$lib_sh" | sha256sum | cut -c1-16; }

# Go builds of the pinned modules (testbed/k8s, testbed/kwok): the local toolchain, no cgo, the module's
# go.mod completed from the proxy, no VCS stamping (the worktree is not what is built).
k8s_go_env() { export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false"; }

# Version stamping for binaries of k8s.io/kubernetes: what `kubectl version`, /version and the kubelet report.
k8s_ldflags() {
  local flags="-s -w" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=37"
    flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  printf '%s' "$flags"
}

# images_setup <out-dir> <script>: for the real node's image builds. Sets out, cache (the archives, kept
# across clones in ${XDG_CACHE_HOME:-~/.cache}/mpijob/images), mirror and self_hash (script_hash).
images_setup() {
  out="${1:?usage: $(basename "$2") <out-dir>}"
  cache="${XDG_CACHE_HOME:-$HOME/.cache}/mpijob/images"
  mkdir -p "$out" "$cache"
  self_hash="$(script_hash "$2")"
  mirror="${MPIJOB_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
}
