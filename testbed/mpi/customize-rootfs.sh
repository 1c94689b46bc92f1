#!/usr/bin/env bash
# customize-rootfs.sh <rootfs> <build-package...>: build-mpi-images.sh's mmdebstrap --customize-hook, run on the
# host (as root) while mmdebstrap has /dev, /proc and /sys mounted in <rootfs>. Adds mpiuser, compiles pi and
# jacobi with the image's own mpicc, purges the compiler and MPI headers again (<build-package...>, which the
# bootstrap included only for that), and sets up sshd/ssh the way the MPI launchers and workers use them.
set -euo pipefail
root="$1"; shift
here="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")"
in_root() { chroot "$root" "$@"; }
as_mpiuser() { chroot --userspec=1000:1000 "$root" env HOME=/home/mpiuser "$@"; }

# mpiuser: uid/gid 1000, what the pi example's non-root jobs run as (sshAuthMountPath /home/mpiuser/.ssh).
in_root groupadd --gid 1000 mpiuser
in_root useradd --uid 1000 --gid 1000 --create-home --shell /bin/bash mpiuser
chmod 0755 "$root/home/mpiuser" # trixie's useradd makes homes 0700; pi in it must be reachable by any uid

# pi and jacobi, linked against this root filesystem's MPI; root-owned so a job cannot replace them, runnable
# by anyone. jacobi is C99 and warning-free with every image's compiler and mpi.h: -Werror keeps it so.
declare -A cflags=([pi]="-O2" [jacobi]="-std=c99 -Wall -Werror -O2")
for prog in pi jacobi; do
  install -m 0644 "$here/$prog.c" "$root/tmp/$prog.c"
  # shellcheck disable=SC2086 # the flags are words
  in_root mpicc ${cflags[$prog]} -o "/home/mpiuser/$prog" "/tmp/$prog.c"
  rm "$root/tmp/$prog.c"
  chmod 0755 "$root/home/mpiuser/$prog"
done
# Not keeping what is merely recommended or suggested (e.g. perl, by adduser): the bootstrap installs no
# recommends either, so what stays is what the image's packages depend on.
in_root env DEBIAN_FRONTEND=noninteractive apt-get purge -qq -y --autoremove \
  -o APT::AutoRemove::RecommendsImportant=false -o APT::AutoRemove::SuggestsImportant=false "$@" >/dev/null
in_root apt-get clean
# The purge must not have taken a library they need (the MPI runtime packages are installed as manual ones).
for prog in pi jacobi; do
  if in_root ldd "/home/mpiuser/$prog" | grep 'not found'; then
    echo "customize-rootfs.sh: $prog lost a library" >&2; exit 1
  fi
done

# sshd as root (the image's default command) and the ssh client: see the two files for why.
install -m 0644 "$here/sshd.conf" "$root/etc/ssh/sshd_config.d/mpi.conf"
install -m 0644 "$here/ssh.conf" "$root/etc/ssh/ssh_config.d/mpi.conf"
in_root ssh-keygen -A

# sshd as mpiuser: its own config and host key, readable by it.
install -o 1000 -g 1000 -m 0644 "$here/mpiuser-sshd_config" "$root/home/mpiuser/.sshd_config"
install -o 1000 -g 1000 -m 0700 -d "$root/home/mpiuser/.sshd"
as_mpiuser ssh-keygen -q -t ed25519 -N '' -C mpiuser-sshd -f /home/mpiuser/.sshd/ssh_host_ed25519_key

install -m 0755 "$here/mpi-wait-hosts" "$root/usr/local/bin/mpi-wait-hosts"

# Fail the build, not a pod: both sshd configurations must load. (Root's needs /run/sshd, which mmdebstrap
# empties after this hook; build-mpi-images.sh makes it again for the image.)
install -d -m 0755 "$root/run/sshd"
in_root /usr/sbin/sshd -t
as_mpiuser /usr/sbin/sshd -t -f /home/mpiuser/.sshd_config
