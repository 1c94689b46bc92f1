# /opt/intel/oneapi/setvars.sh: where Intel's own images (and the reference's entrypoint and Dockerfiles)
# look for the oneAPI environment; here it is Intel MPI's alone.
. /opt/intel/mpi/env/vars.sh
