#!/usr/bin/env bash
# Installs every Debian package of testbed/system-packages.txt that is missing (root and apt). Idempotent: with
# everything present it only reads dpkg's database (~0.1 s), so `make test` and `make demo` run it first.
# The packages' own services are never started (policy-rc.d 101): containerd is run by the testbed only.
# Installing packages is the one host change `mpijob-testbed down` does not undo (docs/testbed.md).
set -euo pipefail
list="$(dirname "${BASH_SOURCE[0]}")/system-packages.txt"
mapfile -t pkgs < <(sed -e 's/#.*//' "$list" | awk 'NF {print $1}')
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} == 0 ]]; then
  echo "[system packages] all ${#pkgs[@]} present"
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "[system packages] missing ${missing[*]} and there is no apt-get here (a Debian or Ubuntu machine is needed)" >&2
  exit 2
fi
sudo=()
if [[ $(id -u) != 0 ]]; then
  command -v sudo >/dev/null || { echo "[system packages] need root to install: ${missing[*]}" >&2; exit 2; }
  sudo=(sudo)
fi
echo "[system packages] installing ${missing[*]}"
policy=/usr/sbin/policy-rc.d
own_policy=0
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee $policy >/dev/null
  "${sudo[@]}" chmod +x $policy
  own_policy=1
fi
trap '[[ $own_policy == 1 ]] && "${sudo[@]}" rm -f $policy' EXIT
start=$SECONDS
"${sudo[@]}" apt-get update -qq || "${sudo[@]}" apt-get update
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "[system packages] installed ${#missing[@]} in $((SECONDS - start)) s"
