#!/usr/bin/env bash
# Builds the real node's MPI images without a registry, as OCI archives, for the pi example's jobs:
#   openmpi4  Debian 12 bookworm, OpenMPI 4.1 (openmpi-bin)
#   openmpi5  Debian 13 trixie, OpenMPI 5.0 (openmpi-bin)
#   mpich     Debian 13 trixie, MPICH 4.2 (mpich), as the reference's MPICH image (bookworm's 4.0.2 hung in
#             MPI_Finalize in 2 of 8 runs; docs/results.md)
# Each has /home/mpiuser/pi (testbed/mpi/pi.c, compiled in the image against its MPI), openssh-server/client
# on port 2222 for root's sshd (the default command, `/usr/sbin/sshd -De`) and for mpiuser's
# (`/usr/sbin/sshd -De -f /home/mpiuser/.sshd_config`), user mpiuser (uid/gid 1000), procps, and
# /usr/local/bin/mpi-wait-hosts for a launcher to wait for its workers' DNS names (`mpi-wait-hosts && mpirun ...`;
# the mpich image's entrypoint, as the reference's MPICH image has one).
# Details: testbed/mpi/customize-rootfs.sh.
# Usage: build-mpi-images.sh <out-dir> [openmpi4] [openmpi5] [mpich] (default: all three). <out-dir>/<name>.tar
# links to ${XDG_CACHE_HOME:-~/.cache}/mpijob/images/<name>-<hash>.tar; the hash covers this script, lib.sh,
# everything under testbed/mpi/, the package lists and the release, so editing any of them rebuilds.
# Needs root (mmdebstrap, chroot, umoci) and the Debian mirror; ~2-4 min per image on 2 cores.
set -euo pipefail
here="$(dirname "${BASH_SOURCE[0]}")"
source "$here/lib.sh"
images_setup "${1:-}" "${BASH_SOURCE[0]}"
shift
mpi_dir="$(readlink -f "$here/mpi")"

declare -A release=([openmpi4]=bookworm [openmpi5]=trixie [mpich]=trixie)
# Trixie's openssh-server needs a sysusers provider: the standalone one, not all of systemd.
declare -A mpi_pkgs=([openmpi4]=openmpi-bin [openmpi5]=openmpi-bin,systemd-standalone-sysusers [mpich]=mpich)
# Only for compiling pi; customize-rootfs.sh purges them (with what they pulled in) before packing.
declare -A build_pkgs=([openmpi4]="libopenmpi-dev gcc" [openmpi5]="libopenmpi-dev gcc" [mpich]="libmpich-dev gcc")
common_pkgs="openssh-server,openssh-client,procps,passwd"
# The reference's MPICH base image has an entrypoint that waits for the hostfile's names before a launcher's
# command (its pi-mpich.yaml relies on it: the launcher gives only args); mpi-wait-hosts does that, and with no
# hostfile (a worker) it only execs the command.
declare -A entrypoint=([openmpi4]="" [openmpi5]="" [mpich]="--config.entrypoint /usr/local/bin/mpi-wait-hosts")
# Names and contents of testbed/mpi/ (pi.c, the configs, the customize hook).
mpi_hash="$(cd "$mpi_dir" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)"

names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=(openmpi4 openmpi5 mpich)
for name in "${names[@]}"; do
  [[ -v "release[$name]" ]] || { echo "build-mpi-images.sh: unknown image '$name' (openmpi4, openmpi5, mpich)" >&2; exit 2; }
done

log() { echo "[testbed images] $name: $* ($(( SECONDS - t0 ))s)"; }

work=""
# --one-file-system: never follow a mount that a failed mmdebstrap might have left in the root filesystem.
trap '[[ -z $work ]] || rm -rf --one-file-system "$work"' EXIT

build() { # build <name> <hash>: bootstrap into an umoci bundle, customize, repack -> OCI archive in the cache
  local name=$1 hash=$2 rel=${release[$1]}
  local pkgs="$common_pkgs,${mpi_pkgs[$1]}" bpkgs=${build_pkgs[$1]}
  work="$(mktemp -d)"
  umoci init --layout "$work/oci"
  umoci new --image "$work/oci:$name"
  umoci unpack --image "$work/oci:$name" "$work/bundle" >/dev/null
  log "mmdebstrap $rel + $pkgs, compiling pi with ${bpkgs// /,}"
  # The dev packages come in with the runtime ones and go again in the hook; apt (variant apt) does the purge.
  # maybe-merged-usr: /usr merged the way debootstrap does it, not by the usrmerge package, which would
  # leave perl (~50 MB) in the image.
  if ! nice -n 10 mmdebstrap --quiet --variant=apt --include="$pkgs,${bpkgs// /,}" \
    --hook-dir=/usr/share/mmdebstrap/hooks/maybe-merged-usr \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook="bash $(printf %q "$mpi_dir/customize-rootfs.sh") \"\$1\" $bpkgs" \
    "$rel" "$work/bundle/rootfs" "$mirror" > "$work/mmdebstrap.log" 2>&1; then
    # The merged-usr hook and apt talk even with --quiet; show it all only when something failed.
    tail -40 "$work/mmdebstrap.log" >&2
    exit 1
  fi
  rm -rf "$work"/bundle/rootfs/var/cache/apt/* "$work"/bundle/rootfs/var/lib/apt/lists/*
  # sshd's privilege-separation directory: /run is no tmpfs in a container, and mmdebstrap empties it at the end.
  install -d -m 0755 "$work/bundle/rootfs/run/sshd"
  log "packing"
  umoci repack --image "$work/oci:$name" "$work/bundle"
  umoci config --image "$work/oci:$name" --config.env "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    --config.workingdir /home/mpiuser --config.cmd /usr/sbin/sshd --config.cmd -De ${entrypoint[$name]}
  umoci gc --layout "$work/oci"
  tar -C "$work/oci" -cf "$cache/$name-$hash.tar.tmp" .
  mv "$cache/$name-$hash.tar.tmp" "$cache/$name-$hash.tar"
  # Older builds of this image (other input hashes) are not needed any more.
  find "$cache" -maxdepth 1 -name "$name-*.tar" ! -name "$name-$hash.tar" -delete
  rm -rf --one-file-system "$work"
  work=""
}

for name in "${names[@]}"; do
  t0=$SECONDS
  hash="$(echo "$self_hash $mpi_hash $name ${release[$name]} $common_pkgs ${mpi_pkgs[$name]} ${build_pkgs[$name]}" \
    | sha256sum | cut -c1-16)"
  archive="$cache/$name-$hash.tar"
  if [[ -f $archive ]]; then
    log "cached: $archive"
  else
    build "$name" "$hash"
    log "built: $archive ($(du -h "$archive" | cut -f1))"
  fi
  ln -sf "$archive" "$out/$name.tar"
done
echo "[testbed images] ready in $out"
