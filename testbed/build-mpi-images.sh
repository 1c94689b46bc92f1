#!/usr/bin/env bash
# Builds the real node's MPI images without a registry, as OCI archives, for the pi example's jobs:
#   openmpi4  Debian 12 bookworm, OpenMPI 4.1 (openmpi-bin)
#   openmpi5  Debian 13 trixie, OpenMPI 5.0 (openmpi-bin)
#   mpich     Debian 13 trixie, MPICH 4.2 (mpich), as the reference's MPICH image (bookworm's 4.0.2 hung in
#             MPI_Finalize in 2 of 8 runs; docs/results.md)
#   intelmpi  Debian 13 trixie, Intel MPI 2021.13 from PyPI's impi-rt wheel (impi-devel to compile pi), in
#             /opt/intel/mpi with the libfabric it bundles; the reference's Intel image has
#             intel-oneapi-mpi-2021.13 from Intel's apt repository. Details: testbed/mpi/intel/install.sh.
# Each has /home/mpiuser/pi (testbed/mpi/pi.c, compiled in the image against its MPI) and /home/mpiuser/jacobi
# (testbed/mpi/jacobi.c, the checkpointing program that resumes on any rank count), openssh-server/client
# on port 2222 for root's sshd (the default command, `/usr/sbin/sshd -De`) and for mpiuser's
# (`/usr/sbin/sshd -De -f /home/mpiuser/.sshd_config`), user mpiuser (uid/gid 1000), procps, and
# /usr/local/bin/mpi-wait-hosts for a launcher to wait for its workers' DNS names (`mpi-wait-hosts && mpirun ...`;
# the mpich image's entrypoint, as the reference's MPICH image has one; intelmpi's runs it after sourcing
# Intel MPI's environment).
# Details: testbed/mpi/customize-rootfs.sh.
# Usage: build-mpi-images.sh <out-dir> [openmpi4] [openmpi5] [mpich] [intelmpi] (default: all four).
# <out-dir>/<name>.tar links to ${XDG_CACHE_HOME:-~/.cache}/mpijob/images/<name>-<hash>.tar; the hash covers
# this script (with the wheels' pins), lib.sh, everything under testbed/mpi/, the package lists and the
# release, so editing any of them rebuilds. The wheels are cached in ${XDG_CACHE_HOME:-~/.cache}/mpijob/wheels/
# and their sha256 checked on every build.
# Needs root (mmdebstrap, chroot, umoci), the Debian mirror and (intelmpi) PyPI; ~2-4 min per image on 2 cores.
set -euo pipefail
here="$(dirname "${BASH_SOURCE[0]}")"
source "$here/lib.sh"
images_setup "${1:-}" "${BASH_SOURCE[0]}"
shift
mpi_dir="$(readlink -f "$here/mpi")"

declare -A release=([openmpi4]=bookworm [openmpi5]=trixie [mpich]=trixie [intelmpi]=trixie)
# Trixie's openssh-server needs a sysusers provider: the standalone one, not all of systemd.
declare -A mpi_pkgs=([openmpi4]=openmpi-bin [openmpi5]=openmpi-bin,systemd-standalone-sysusers [mpich]=mpich
  [intelmpi]=systemd-standalone-sysusers)
# Only for compiling pi and jacobi; customize-rootfs.sh purges them (with what they pulled in) before packing.
# Intel's mpicc drives gcc; libc6-dev is only a recommendation of gcc, which the bootstrap does not install.
declare -A build_pkgs=([openmpi4]="libopenmpi-dev gcc" [openmpi5]="libopenmpi-dev gcc" [mpich]="libmpich-dev gcc"
  [intelmpi]="gcc libc6-dev")
common_pkgs="openssh-server,openssh-client,procps,passwd"
# The reference's MPICH and Intel base images have an entrypoint that waits for the hostfile's names before a
# launcher's command (their pi-mpich.yaml and pi-intel.yaml rely on it: the launcher gives only args);
# mpi-wait-hosts does that, and with no hostfile (a worker) it only execs the command. Intel's also sources
# oneAPI's setvars.sh first: intel-mpi-entrypoint sources this image's equivalent, then runs mpi-wait-hosts.
declare -A entrypoint=([openmpi4]="" [openmpi5]="" [mpich]="--config.entrypoint /usr/local/bin/mpi-wait-hosts"
  [intelmpi]="--config.entrypoint /usr/local/bin/intel-mpi-entrypoint")
# Intel MPI from PyPI, pinned by version and sha256 (pip --require-hashes): 2021.13.1, the reference image's
# 2021.13, is the last impi-rt that bundles libfabric (with its tcp and shm providers); 2021.14 and later ask
# for a separate `libfabric` distribution that this machine's index does not serve.
impi_version=2021.13.1
impi_wheels=(
  "impi-rt==$impi_version --hash=sha256:5404adc6af35a651067e69ae2a65db05366a0fbfff14a3415d311b1d3566d177"
  "impi-devel==$impi_version --hash=sha256:8136d8f50f688f088493169f91c636b182419653de2cea98cd12b434b4be4c81"
)
# Names and contents of testbed/mpi/ (pi.c, the configs, the customize hook).
mpi_hash="$(cd "$mpi_dir" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)"

names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=(openmpi4 openmpi5 mpich intelmpi)
for name in "${names[@]}"; do
  [[ -v "release[$name]" ]] || {
    echo "build-mpi-images.sh: unknown image '$name' (openmpi4, openmpi5, mpich, intelmpi)" >&2; exit 2; }
done

log() { echo "[testbed images] $name: $* ($(( SECONDS - t0 ))s)"; }

# intel_wheels: the two wheels in the wheel cache, downloaded once (pip in a throwaway venv, --require-hashes,
# --no-deps: both are pinned here) and checked against the pins whenever an image is built from them.
wheels="${XDG_CACHE_HOME:-$HOME/.cache}/mpijob/wheels"
intel_wheels() {
  mkdir -p "$wheels"
  printf '%s\n' "${impi_wheels[@]}" > "$wheels/impi-$impi_version.txt"
  if ! wheels_match; then
    log "downloading impi-rt and impi-devel $impi_version from PyPI (pinned hashes)"
    rm -f "$wheels"/impi_*-"$impi_version"-*.whl
    rm -rf "$work/venv"
    python3 -m venv "$work/venv"
    "$work/venv/bin/pip" download --disable-pip-version-check -q --no-deps --require-hashes --only-binary=:all: \
      -d "$wheels" -r "$wheels/impi-$impi_version.txt"
    wheels_match || { echo "build-mpi-images.sh: the Intel MPI wheels do not match their pins" >&2; exit 1; }
  fi
  rt_whl=$(echo "$wheels"/impi_rt-"$impi_version"-*.whl)
  devel_whl=$(echo "$wheels"/impi_devel-"$impi_version"-*.whl)
}
# wheels_match: every pinned wheel is in the cache once, with its pinned sha256 (pip names the files
# impi_rt-<version>-<tags>.whl).
wheels_match() {
  (cd "$wheels" && python3 - "impi-$impi_version.txt" <<'PY'
import hashlib, pathlib, sys
ok = True
for line in pathlib.Path(sys.argv[1]).read_text().splitlines():
    spec, _, digest = line.partition(" --hash=sha256:")
    name, _, version = spec.partition("==")
    found = list(pathlib.Path(".").glob(f"{name.replace('-', '_')}-{version}-*.whl"))
    ok = ok and len(found) == 1 and hashlib.sha256(found[0].read_bytes()).hexdigest() == digest
sys.exit(0 if ok else 1)
PY
  )
}

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
  # Intel MPI is no Debian package: install.sh puts the wheels' files in before pi is compiled and takes
  # impi-devel's out again after.
  local pre=() post=()
  if [[ $name == intelmpi ]]; then
    intel_wheels
    local install_sh
    install_sh="$(printf %q "$mpi_dir/intel/install.sh")"
    pre=(--customize-hook="bash $install_sh \"\$1\" $(printf %q "$rt_whl") $(printf %q "$devel_whl")")
    post=(--customize-hook="bash $install_sh --strip-devel \"\$1\"")
  fi
  log "mmdebstrap $rel + $pkgs, compiling pi and jacobi with ${bpkgs// /,}"
  # The dev packages come in with the runtime ones and go again in the hook; apt (variant apt) does the purge.
  # maybe-merged-usr: /usr merged the way debootstrap does it, not by the usrmerge package, which would
  # leave perl (~50 MB) in the image.
  if ! nice -n 10 mmdebstrap --quiet --variant=apt --include="$pkgs,${bpkgs// /,}" \
    --hook-dir=/usr/share/mmdebstrap/hooks/maybe-merged-usr \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    "${pre[@]}" --customize-hook="bash $(printf %q "$mpi_dir/customize-rootfs.sh") \"\$1\" $bpkgs" "${post[@]}" \
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
