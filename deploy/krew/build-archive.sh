#!/usr/bin/env bash
# Builds dist/kubectl-mpijob-<version>-linux-amd64.tar.gz for the krew manifest: the package and its
# hash-locked dependencies (requirements.lock) under lib/, plus launchers that run them with python3.
# Prints the archive's sha256 (the manifest's `sha256`).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
python="${PYTHON:-python3}"
version="$("$python" -c 'import tomllib,sys; print(tomllib.load(open(sys.argv[1],"rb"))["project"]["version"])' "$repo/pyproject.toml")"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
"$python" -m pip install --quiet --no-compile --require-hashes --only-binary=:all: \
  --platform manylinux2014_x86_64 --python-version 3.11 --implementation cp --target "$stage/lib" \
  -r "$repo/requirements.lock"
"$python" -m pip install --quiet --no-compile --no-deps --target "$stage/lib" "$repo"
rm -rf "$stage/lib/bin"
for entry in kubectl-mpijob:run kubectl_complete-mpijob:run_complete; do
  name="${entry%%:*}"
  cat > "$stage/$name" <<LAUNCHER
#!/bin/sh
# krew links this file; resolve the real directory to find lib/.
here="\$(cd "\$(dirname "\$(readlink -f "\$0")")" && pwd)"
PYTHONPATH="\$here/lib" exec python3 -c 'import sys; from mpijob.cli.plugin import ${entry#*:}; sys.argv[0] = "$name"; ${entry#*:}()' "\$@"
LAUNCHER
  chmod +x "$stage/$name"
done
cp "$repo/LICENSE" "$stage/"
mkdir -p "$repo/dist"
out="$repo/dist/kubectl-mpijob-$version-linux-amd64.tar.gz"
tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -czf "$out" .
echo "$out"
sha256sum "$out" | cut -d' ' -f1
