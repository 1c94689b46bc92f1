# syntax=docker/dockerfile:1
# The operator image: multi-stage, base pinned by digest, dependencies installed only from the hash-locked
# requirements.lock (`pip install --require-hashes`), non-root (65532), and able to run on a read-only root
# filesystem (nothing is written at run time; deploy/ sets readOnlyRootFilesystem: true).
# Not built by this repository's CI: docs/image.md says why, and how to build and check it.

# python:3.11-slim-bookworm (multi-arch index). Renew with `crane digest docker.io/library/python:3.11-slim-bookworm`.
ARG BASE=docker.io/library/python:3.11.10-slim-bookworm@sha256:5148c0e4bbb64271bca1d3322360ebf4bfb7564507ae32dd639322e4952a6b16

FROM ${BASE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# Dependencies first (their layer survives source changes), each checked against its hash.
COPY requirements.lock requirements-build.lock ./
RUN python -m venv /opt/mpijob \
 && /opt/mpijob/bin/pip install --require-hashes --only-binary=:all: -r requirements.lock \
 && python -m venv /opt/build \
 && /opt/build/bin/pip install --require-hashes -r requirements-build.lock
# The operator itself (src/mpijob only: the development testbed is not part of the image), without touching
# the locked dependencies; bytecode compiled now, since the root filesystem is read-only at run time.
COPY pyproject.toml README.md ./
COPY src/mpijob ./src/mpijob
RUN /opt/build/bin/pip wheel --no-deps --no-build-isolation -w /tmp/wheel . \
 && /opt/mpijob/bin/pip install --no-deps /tmp/wheel/*.whl \
 && /opt/mpijob/bin/python -m compileall -q /opt/mpijob/lib

FROM ${BASE}
LABEL org.opencontainers.image.title="mpijob-operator" \
      org.opencontainers.image.description="MPIJob (kubeflow.org/v2beta1) operator with targeted elastic scale-in" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="0.1.0"
COPY --from=build /opt/mpijob /opt/mpijob
# The reference image's entrypoint path, for Deployments that name it in `command:` (docs/migration.md).
COPY --from=build /opt/mpijob/bin/mpi-operator /opt/mpi-operator
ENV PATH=/opt/mpijob/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 8080 9090
ENTRYPOINT ["mpijob"]
CMD ["operator"]
