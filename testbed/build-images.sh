#!/usr/bin/env bash
# Builds the real node's container images without a registry, as OCI archives:
#   pause     busybox-static only; the pod sandbox image (sleeps until killed)
#   launcher  a minimal Debian 12 root filesystem (mmdebstrap) with sh, curl, python3 and CA certificates:
#             what the launcher's discover_hosts.sh and a test's loop need
# Usage: build-images.sh <out-dir>. Each archive is named <image>-<hash>.tar, the hash covering this script,
# lib.sh and the inputs' package versions, and is cached under ${XDG_CACHE_HOME:-~/.cache}/mpijob/images so a
# fresh clone (or a fresh state directory) does not rebuild it. `up --real-node` imports them with
# `ctr images import`. Needs root (mmdebstrap, umoci unpack/repack as root) and the packages of
# testbed/system-packages.txt.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
images_setup "${1:-}" "${BASH_SOURCE[0]}"
launcher_pkgs="python3,curl,ca-certificates"

pack() { # pack <name> <rootfs-dir> <hash> <cmd...>: rootfs -> OCI archive in the cache
  local name=$1 rootfs=$2 hash=$3; shift 3
  local work; work="$(mktemp -d)"
  umoci init --layout "$work/oci"
  umoci new --image "$work/oci:$name"
  umoci unpack --image "$work/oci:$name" "$work/bundle" >/dev/null
  cp -a "$rootfs/." "$work/bundle/rootfs/"
  umoci repack --image "$work/oci:$name" "$work/bundle"
  local cfg=(--config.env "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
  for arg in "$@"; do cfg+=(--config.cmd "$arg"); done
  umoci config --image "$work/oci:$name" "${cfg[@]}"
  umoci gc --layout "$work/oci"
  tar -C "$work/oci" -cf "$cache/$name-$hash.tar.tmp" .
  mv "$cache/$name-$hash.tar.tmp" "$cache/$name-$hash.tar"
  # Older builds of this image (other input hashes) are not needed any more.
  find "$cache" -maxdepth 1 -name "$name-*.tar" ! -name "$name-$hash.tar" -delete
  rm -rf "$work"
}

# pause: busybox-static's applets on a 1 MB root filesystem.
bb_version="$(dpkg-query -W -f='${Version}' busybox-static)"
hash="$(echo "$self_hash $bb_version" | sha256sum | cut -c1-16)"
if [[ ! -f "$cache/pause-$hash.tar" ]]; then
  echo "[testbed images] building pause (busybox-static $bb_version)"
  root="$(mktemp -d)"
  mkdir -p "$root/bin"
  cp /bin/busybox "$root/bin/busybox"
  for a in sh sleep cat echo ls; do ln -s busybox "$root/bin/$a"; done
  pack pause "$root" "$hash" /bin/sleep infinity
  rm -rf "$root"
fi
ln -sf "$cache/pause-$hash.tar" "$out/pause.tar"

# launcher: Debian's own packages, so the image is reproducible from the mirror without a registry.
hash="$(echo "$self_hash $launcher_pkgs bookworm" | sha256sum | cut -c1-16)"
if [[ ! -f "$cache/launcher-$hash.tar" ]]; then
  echo "[testbed images] building launcher (mmdebstrap bookworm + $launcher_pkgs; ~1-2 min)"
  root="$(mktemp -d)"
  nice -n 10 mmdebstrap --quiet --variant=essential --include="$launcher_pkgs" \
    --dpkgopt='path-exclude=/usr/share/{doc,man,locale}/*' bookworm "$root" "$mirror"
  rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/*
  pack launcher "$root" "$hash" /bin/sh
  rm -rf "$root"
fi
ln -sf "$cache/launcher-$hash.tar" "$out/launcher.tar"
echo "[testbed images] ready in $out"
