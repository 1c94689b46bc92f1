#!/usr/bin/env bash
# Builds the operator image on a machine without a container engine or registry access: the base root
# filesystem from Debian bookworm's packages (mmdebstrap: python3 3.11, ca-certificates), the operator and
# its hash-locked dependencies (requirements.lock) from PyPI, packed as an OCI image with umoci.
# Same contract as the Dockerfile: non-root (65532), nothing written at run time (bytecode compiled here),
# entrypoint `mpijob`, default command `operator`. The Dockerfile stays the way to build it with a registry.
# Output: $out/oci (OCI image layout, tag $version) and $out/mpijob-operator-$version.oci.tar.
# Needs: mmdebstrap, umoci, root (or fakeroot-capable user namespaces), Debian mirror and PyPI.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${MPIJOB_IMAGE_DIR:-$repo/.cache/image}"
python="${PYTHON:-python3}"
version="$("$python" -c 'import tomllib,sys; print(tomllib.load(open(sys.argv[1],"rb"))["project"]["version"])' "$repo/pyproject.toml")"
stamp="$out/.stamp"
want="$(cat "$0" "$repo/requirements.lock" "$repo/pyproject.toml" <(cd "$repo" && find src/mpijob -type f ! -name '*.pyc' -print0 | sort -z | xargs -0 cat) | sha256sum | cut -c1-16)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -d "$out/oci" ]]; then
  echo "image: up to date in $out/oci ($version)"
  exit 0
fi
mkdir -p "$out"
start=$SECONDS
step() { printf '[image build %4ds] %s\n' $((SECONDS - start)) "$*"; }

# The base root filesystem is the same for every clone on this machine: kept in the user's cache (as the
# testbed's MPI images are), named by what makes it, so a fresh clone does not run mmdebstrap again.
base_args="minbase python3,ca-certificates bookworm doc,man,locale"
base_dir="${XDG_CACHE_HOME:-$HOME/.cache}/mpijob/images"
rootfs="$base_dir/operator-rootfs-$(echo "$base_args" | sha256sum | cut -c1-16).tar"
mkdir -p "$base_dir"
if [[ ! -f "$rootfs" ]]; then
  step "Debian bookworm root filesystem (mmdebstrap minbase + python3, ca-certificates)"
  rm -rf "$rootfs.tmp"
  # --format: the output name ends in .tmp, from which mmdebstrap would guess a directory.
  nice -n 10 mmdebstrap --quiet --format=tar --variant=minbase --include=python3,ca-certificates \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' bookworm "$rootfs.tmp"
  mv "$rootfs.tmp" "$rootfs"
fi
# Where an older version's build script looks for it (the upgrade tests build the previous image with it).
ln -sf "$rootfs" "$out/rootfs.tar"

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
step "unpacking the root filesystem"
tar -C "$stage" -xf "$rootfs"
rm -rf "$stage/var/cache/apt" "$stage/var/lib/apt/lists" "$stage/var/log"/* "$stage/usr/share/doc"

step "operator and locked dependencies into /opt/mpijob/lib (pip --require-hashes)"
"$python" -m pip install --quiet --no-compile --require-hashes --only-binary=:all: \
  --platform manylinux2014_x86_64 --python-version 3.11 --implementation cp \
  --target "$stage/opt/mpijob/lib" -r "$repo/requirements.lock"
"$python" -m pip install --quiet --no-compile --no-deps --target "$stage/opt/mpijob/lib" "$repo"
rm -rf "$stage/opt/mpijob/lib/bin"
# The root filesystem is read-only at run time: compile now (cpython-311 bytecode; 3.11.x share it).
"$python" -m compileall -q -j 0 "$stage/opt/mpijob/lib" >/dev/null
cat > "$stage/usr/local/bin/mpijob" <<'LAUNCHER'
#!/bin/sh
exec python3 -m mpijob "$@"
LAUNCHER
chmod 0755 "$stage/usr/local/bin/mpijob"
# The reference image's entrypoint path, for Deployments that name it in `command:` (docs/migration.md).
cat > "$stage/opt/mpi-operator" <<'LAUNCHER'
#!/usr/bin/python3
import sys
from mpijob.cli.main import reference_main
sys.exit(reference_main())
LAUNCHER
chmod 0755 "$stage/opt/mpi-operator"
echo "operator:x:65532:65532:mpijob operator:/nonexistent:/usr/sbin/nologin" >> "$stage/etc/passwd"
echo "operator:x:65532:" >> "$stage/etc/group"

step "OCI image with umoci"
rm -rf "$out/oci" "$out/bundle"
umoci init --layout "$out/oci"
umoci new --image "$out/oci:$version"
umoci unpack --image "$out/oci:$version" "$out/bundle" >/dev/null
rm -rf "$out/bundle/rootfs"
mv "$stage" "$out/bundle/rootfs"
trap - EXIT
umoci repack --image "$out/oci:$version" "$out/bundle"
rm -rf "$out/bundle"
umoci config --image "$out/oci:$version" \
  --config.user=65532:65532 \
  --config.env=PYTHONPATH=/opt/mpijob/lib --config.env=PYTHONDONTWRITEBYTECODE=1 --config.env=PYTHONUNBUFFERED=1 \
  --config.env=PATH=/usr/local/bin:/usr/bin:/bin \
  --config.entrypoint=mpijob --config.cmd=operator \
  --config.exposedports=8080/tcp --config.exposedports=9090/tcp \
  --config.label=org.opencontainers.image.title=mpijob-operator \
  --config.label=org.opencontainers.image.version="$version" \
  --config.label=org.opencontainers.image.licenses=Apache-2.0
umoci gc --layout "$out/oci"
tar -C "$out/oci" -cf "$out/mpijob-operator-$version.oci.tar" .
echo "$want" > "$stamp"
step "done: $out/oci:$version ($(du -sh "$out/mpijob-operator-$version.oci.tar" | cut -f1))"
