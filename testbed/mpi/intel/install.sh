#!/usr/bin/env bash
# install.sh <rootfs> <impi-rt.whl> <impi-devel.whl>: build-mpi-images.sh's first --customize-hook for the
# intelmpi image, run on the host (as root) before customize-rootfs.sh. Intel MPI comes from PyPI's wheels
# (pinned and hash-checked by build-mpi-images.sh), not from Intel's apt repository: their data files (bin/,
# lib/ with the bundled libfabric, opt/mpi/etc/, include/) go to /opt/intel/mpi, the prefix I_MPI_ROOT names.
# A temporary /usr/local/bin/mpicc lets customize-rootfs.sh compile pi and jacobi; `install.sh --strip-devel`
# removes it and impi-devel's files again afterwards, as the MPI headers are purged from the other images.
set -euo pipefail
here="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")"
prefix=/opt/intel/mpi

# unpack <rootfs> <wheel> <list-file>: the wheel's <name>.data/data/ tree under <rootfs>$prefix, conda's
# activation scripts left out. Zip has no symlinks, so the wheel carries libmpi.so, .so.12, .so.12.0 and
# .so.12.0.0 (and mpiexec/mpiexec.hydra, ...) as full copies: identical files of one directory become
# symlinks to the longest name (~70 MB less). The wheel's licence goes to share/doc/mpi/. Writes the paths
# it created, licensing notes aside, to <list-file>.
unpack() {
  python3 - "$1$prefix" "$2" "$3" <<'PY'
import hashlib, os, sys, zipfile
dest, wheel, listing = sys.argv[1:]
files = {}  # path under dest -> (bytes, executable)
with zipfile.ZipFile(wheel) as zf:
    for info in zf.infolist():
        parts = info.filename.split("/")
        if info.is_dir():
            continue
        if parts[0].endswith(".dist-info") and parts[1:] == ["LICENSE.txt"]:
            rel = "share/doc/mpi/LICENSE.txt"  # Intel's licence travels with its binaries
        elif len(parts) > 3 and parts[0].endswith(".data") and parts[1] == "data":
            rel = "/".join(parts[2:])
            if rel.startswith("etc/conda/"):
                continue
        else:
            continue
        mode = (info.external_attr >> 16) & 0o777
        files[rel] = (zf.read(info), bool(mode & 0o111) or rel.startswith("bin/"))
groups = {}
for rel, (data, _) in files.items():
    groups.setdefault((os.path.dirname(rel), hashlib.sha256(data).digest()), []).append(rel)
made = []
for names in groups.values():
    real = max(names, key=len)  # libmpi.so.12.0.0, the others link to it
    for rel in sorted(names):
        path = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.lexists(path):
            os.remove(path)
        if rel == real:
            with open(path, "wb") as f:
                f.write(files[rel][0])
            os.chmod(path, 0o755 if files[rel][1] else 0o644)
        else:
            os.symlink(os.path.basename(real), path)
        if not rel.startswith("share/doc/"):  # licensing notes stay, also impi-devel's
            made.append(path)
with open(listing, "w") as f:
    f.writelines(p + "\n" for p in made)
PY
}

if [[ $1 == --strip-devel ]]; then
  root="$2"
  xargs -r rm -f < "$root$prefix/.devel-files"
  rm -f "$root$prefix/.devel-files" "$root/usr/local/bin/mpicc"
  find "$root$prefix" -depth -type d -empty -delete
  exit 0
fi

root="$1" rt="$2" devel="$3"
unpack "$root" "$rt" /dev/null
unpack "$root" "$devel" "$root$prefix/.devel-files"

install -D -m 0644 "$here/vars.sh" "$root$prefix/env/vars.sh"
install -D -m 0644 "$here/setvars.sh" "$root/opt/intel/oneapi/setvars.sh"
install -m 0755 "$here/entrypoint" "$root/usr/local/bin/intel-mpi-entrypoint"
# Intel's wrappers find their prefix through I_MPI_ROOT (the wheel leaves a placeholder) and add it as the
# binary's RUNPATH, so pi finds libmpi on any host without LD_LIBRARY_PATH.
cat > "$root/usr/local/bin/mpicc" <<SH
#!/bin/sh
I_MPI_ROOT=$prefix exec $prefix/bin/mpicc "\$@"
SH
chmod 0755 "$root/usr/local/bin/mpicc"
