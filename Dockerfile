# Operator image. Not built by this repository's CI (the build machines have no container engine).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-cache-dir . && useradd -u 65532 -M operator
USER 65532
ENTRYPOINT ["mpijob"]
CMD ["operator"]
