#!/usr/bin/env bash
# Installs what the real testbed node needs from Debian packages (root and apt required):
#   containerd runc containernetworking-plugins (bridge, host-local, loopback, portmap)
#   iptables + nftables (the DNAT rule for the `kubernetes` Service; nft removes tables iptables created)  umoci busybox-static mmdebstrap (local images)
# Installing packages is the one host change `mpijob-testbed down` does not undo (see docs/testbed.md);
# the packages' own services are never started: `up --real-node` runs containerd from its own config.
set -euo pipefail
pkgs=(containerd runc containernetworking-plugins iptables nftables umoci busybox-static mmdebstrap)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} == 0 ]]; then
  echo "testbed node: Debian packages present"
  exit 0
fi
if [[ $(id -u) != 0 ]]; then
  echo "testbed node: need root to install: ${missing[*]}" >&2
  exit 2
fi
echo "testbed node: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d 101: package scripts must not start daemons (containerd is run by the testbed only).
policy=/usr/sbin/policy-rc.d
own_policy=0
if [[ ! -e $policy ]]; then printf '#!/bin/sh\nexit 101\n' > $policy; chmod +x $policy; own_policy=1; fi
trap '[[ $own_policy == 1 ]] && rm -f $policy' EXIT
apt-get update -qq || apt-get update
apt-get install -y -qq --no-install-recommends "${missing[@]}"
