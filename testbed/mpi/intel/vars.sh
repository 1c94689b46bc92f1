# /opt/intel/mpi/env/vars.sh: the environment oneAPI's setvars.sh gives Intel MPI, for this image's layout
# (the impi-rt wheel's files under /opt/intel/mpi). Sourced by the entrypoint, by /opt/intel/oneapi/setvars.sh
# (which scripts written for Intel's own images source) and by Intel's mpirun itself when I_MPI_ROOT is unset
# (it looks for ../env/vars.sh beside itself). POSIX sh; sourcing it twice changes nothing.
I_MPI_ROOT=/opt/intel/mpi
export I_MPI_ROOT
# bin/libfabric has fi_info, which lists the providers libfabric can load here.
for _impi_dir in "$I_MPI_ROOT/bin/libfabric" "$I_MPI_ROOT/bin"; do
  case ":${PATH:-}:" in *":$_impi_dir:"*) ;; *) PATH="$_impi_dir${PATH:+:$PATH}" ;; esac
done
export PATH
# libmpi and the libfabric the wheel bundles (libmpi dlopens libfabric.so.1); hydra hands this environment
# on to every rank, also on other hosts.
for _impi_dir in "$I_MPI_ROOT/lib/libfabric" "$I_MPI_ROOT/lib"; do
  case ":${LD_LIBRARY_PATH:-}:" in
    *":$_impi_dir:"*) ;;
    *) LD_LIBRARY_PATH="$_impi_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;;
  esac
done
unset _impi_dir
export LD_LIBRARY_PATH
# The bundled libfabric was built for another prefix: its providers (tcp, shm, verbs, psm3, ...) are here.
FI_PROVIDER_PATH="${FI_PROVIDER_PATH:-$I_MPI_ROOT/lib/libfabric/prov}"
export FI_PROVIDER_PATH
