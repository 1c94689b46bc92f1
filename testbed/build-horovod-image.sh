#!/usr/bin/env bash
# Builds the real node's Horovod image without a registry, as an OCI archive (issue 12, item 3):
#   horovod   Debian 12 (mmdebstrap) + python3, openssh-server/client (the workers run sshd, the launcher ssh),
#             tensorflow-cpu 2.12.1 (PyPI's CPU wheel) and Horovod 0.28.1 built here from its source
#             distribution with Gloo only (no MPI, no GPU): horovodrun's elastic driver and horovod.tensorflow
# Usage: build-horovod-image.sh <out-dir>. The archive is <out-dir>/horovod.tar, a link to
# ${XDG_CACHE_HOME:-~/.cache}/mpijob/images/horovod-<hash>.tar; the hash covers this script (which pins every
# version), lib.sh and the Debian release, so a later run or a fresh clone on this machine reuses it. The Horovod
# wheel is cached beside it (wheels/), since compiling it is the slow part (~2-5 min on 2 cores).
# Needs root (mmdebstrap, umoci) and the packages of testbed/system-packages.txt (python3-dev, cmake, g++ among
# them). Exit 3 (with the reason on stderr) when a build prerequisite is missing.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
images_setup "${1:-}" "${BASH_SOURCE[0]}"
mkdir -p "$cache/wheels"
debian_pkgs="python3,python3-distutils,libstdc++6,openssh-server,openssh-client,procps"
hash="$(echo "$self_hash $debian_pkgs bookworm" | sha256sum | cut -c1-16)"
archive="$cache/horovod-$hash.tar"
if [[ -f $archive ]]; then
  ln -sf "$archive" "$out/horovod.tar"
  echo "[testbed images] horovod cached: $archive"
  exit 0
fi
# Build prerequisites (cmake, g++, python3-dev, python3-venv, mmdebstrap, umoci): testbed/system-packages.txt.
bash "$(dirname "${BASH_SOURCE[0]}")/install-system-deps.sh" >&2 || { echo "build-horovod-image.sh: system packages missing" >&2; exit 3; }
py="${MPIJOB_HOROVOD_PYTHON:-/usr/bin/python3}"
"$py" -c 'import sys, sysconfig, os; assert sys.version_info[:2] == (3, 11), sys.version
assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' 2>/dev/null \
  || { echo "build-horovod-image.sh: need python3.11 with headers (the image's Debian 12 python is 3.11)" >&2; exit 3; }

# Pins: tensorflow-cpu 2.12 is the newest TF that Horovod 0.28.1 builds against; its loose dependencies
# (jax, numpy) are pinned to what TF 2.12 works with so pip does not backtrack through newer releases.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cat > "$work/constraints.txt" <<'PINS'
numpy==1.23.5
jax==0.4.13
ml-dtypes==0.2.0
scipy==1.10.1
protobuf==4.23.4
grpcio==1.56.2
tensorboard==2.12.3
keras==2.12.0
tensorflow-estimator==2.12.0
wrapt==1.14.1
cloudpickle==3.0.0
psutil==5.9.8
pyyaml==6.0.1
PINS
echo "[testbed images] building horovod: a venv with tensorflow-cpu 2.12.1"
"$py" -m venv "$work/venv"
pip=("$work/venv/bin/pip" --disable-pip-version-check -q)
nice -n 19 "${pip[@]}" install -c "$work/constraints.txt" tensorflow-cpu==2.12.1 cloudpickle psutil pyyaml 'setuptools<70' wheel
hvd_wheel="$(ls "$cache"/wheels/horovod-0.28.1-cp311-*.whl 2>/dev/null | head -1 || true)"
if [[ -z $hvd_wheel ]]; then
  echo "[testbed images] compiling Horovod 0.28.1 (Gloo, TensorFlow; ~2-5 min on 2 cores)"
  t0=$(date +%s)
  HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 \
    HOROVOD_WITHOUT_MXNET=1 HOROVOD_GPU_OPERATIONS= MAKEFLAGS=-j2 \
    nice -n 19 "${pip[@]}" wheel --no-deps --no-build-isolation -w "$work/hvd" horovod==0.28.1 \
    > "$work/horovod-build.log" 2>&1 || { tail -40 "$work/horovod-build.log" >&2; exit 1; }
  cp "$work"/hvd/horovod-*.whl "$cache/wheels/"
  hvd_wheel="$(ls "$cache"/wheels/horovod-0.28.1-cp311-*.whl | head -1)"
  echo "[testbed images] Horovod compiled in $(( $(date +%s) - t0 ))s"
fi

root="$work/rootfs"
echo "[testbed images] horovod rootfs: mmdebstrap bookworm + $debian_pkgs"
nice -n 10 mmdebstrap --quiet --variant=essential --include="$debian_pkgs" \
  --dpkgopt='path-exclude=/usr/share/{doc,man,locale}/*' bookworm "$root" "$mirror"
rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/*
# The Python packages (TF's full dependency closure, as pinned) go where Debian's python3 looks for local ones.
site="$root/usr/local/lib/python3.11/dist-packages"
nice -n 19 "${pip[@]}" wheel -c "$work/constraints.txt" -w "$work/dl" tensorflow-cpu==2.12.1 cloudpickle psutil pyyaml
"${pip[@]}" install --no-index --no-deps --target "$site" "$work"/dl/*.whl "$hvd_wheel"
rm -rf "$site/bin"
cat > "$root/usr/local/bin/horovodrun" <<'SH'
#!/bin/sh
exec python3 -c 'import sys; from horovod.runner.launch import run_commandline; sys.argv[0] = "horovodrun"; run_commandline()' "$@"
SH
chmod +x "$root/usr/local/bin/horovodrun"
# sshd as the reference operator's images set it up: keys from the job's Secret mounted at /root/.ssh (a
# volume whose modes sshd's StrictModes would refuse), no host-key prompts between pods.
mkdir -p "$root/run/sshd"
sed -i 's/^#\?StrictModes.*/StrictModes no/' "$root/etc/ssh/sshd_config"
printf 'Host *\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n' >> "$root/etc/ssh/ssh_config"
# Fail here, not in a pod, when the image cannot run Horovod.
chroot "$root" python3 -c 'import horovod, horovod.tensorflow, horovod.runner.launch; print("horovod", horovod.__version__, "imports")'

echo "[testbed images] packing horovod"
oci="$work/oci"
umoci init --layout "$oci"
umoci new --image "$oci:horovod"
umoci unpack --image "$oci:horovod" "$work/bundle" >/dev/null
cp -a "$root/." "$work/bundle/rootfs/"
umoci repack --image "$oci:horovod" "$work/bundle"
umoci config --image "$oci:horovod" --config.env "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  --config.cmd /usr/sbin/sshd --config.cmd -De
umoci gc --layout "$oci"
tar -C "$oci" -cf "$archive.tmp" .
mv "$archive.tmp" "$archive"
find "$cache" -maxdepth 1 -name 'horovod-*.tar' ! -name "horovod-$hash.tar" -delete
ln -sf "$archive" "$out/horovod.tar"
echo "[testbed images] horovod ready: $archive ($(du -h "$archive" | cut -f1))"
