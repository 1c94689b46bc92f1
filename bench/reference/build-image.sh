#!/usr/bin/env bash
# Packs the reference operator built by bench/reference/build.sh (a static Go binary) into an OCI image shaped
# as upstream's (its Dockerfile: the binary at /opt/mpi-operator, ENTRYPOINT ["/opt/mpi-operator"], CMD
# ["--help"], run as root), so the reference's own install file runs unchanged on the testbed's real nodes
# (tests/integration/test_real_node_reference_e2e.py loads it under the name that file names). No registry
# and no container engine: umoci, as deploy/image/build-offline.sh. The base is empty instead of distroless:
# a static binary with in-cluster config reads nothing else (only /tmp for klog's files, created here).
# Output: $MPIJOB_REFERENCE_BIN/image/mpi-operator.oci.tar (default <repo>/.cache/reference), git-ignored.
# Idempotent: a stamp records a hash of this script and the binary.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
ref="${MPIJOB_REFERENCE_BIN:-$repo/.cache/reference}"
out="$ref/image"
bash "$here/build.sh"
want="$(cat "$0" "$ref/mpi-operator" | sha256sum | cut -c1-16)"
if [[ -f "$out/.stamp" && "$(cat "$out/.stamp")" == "$want" && -f "$out/mpi-operator.oci.tar" ]]; then
  echo "reference image: up to date in $out"
  exit 0
fi
version="$(cat "$ref/version")"
rm -rf "$out"
mkdir -p "$out"
umoci init --layout "$out/oci"
umoci new --image "$out/oci:$version"
umoci unpack --image "$out/oci:$version" "$out/bundle" >/dev/null
install -D -m 0755 "$ref/mpi-operator" "$out/bundle/rootfs/opt/mpi-operator"
install -d -m 1777 "$out/bundle/rootfs/tmp"
umoci repack --image "$out/oci:$version" "$out/bundle"
rm -rf "$out/bundle"
umoci config --image "$out/oci:$version" --config.entrypoint=/opt/mpi-operator --config.cmd=--help \
  --config.label=org.opencontainers.image.title=mpi-operator --config.label=org.opencontainers.image.version="$version"
umoci gc --layout "$out/oci"
tar -C "$out/oci" -cf "$out/mpi-operator.oci.tar" .
rm -rf "$out/oci"
echo "$want" > "$out/.stamp"
echo "reference image: $out/mpi-operator.oci.tar ($version, $(du -sh "$out/mpi-operator.oci.tar" | cut -f1))"
