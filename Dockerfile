# syntax=docker/dockerfile:1
# The aiops daemon. Built by docker-compose.yml (`docker compose build aiops`) or on its own:
#   docker build -t aiops-gpu .
#   docker run --rm -e AIOPS_KAFKA__BOOTSTRAP=broker:9092 -e AIOPS_INFLUX__URL=http://influxdb:8086 aiops-gpu
# Settings come from AIOPS_* environment variables (vocab/settings.py).

ARG PYTHON_IMAGE=python:3.11-slim

# ---- build: the project and all its dependencies as wheels (numpy, pandas, pyarrow and
# scikit-learn ship manylinux wheels for 3.11, so no compiler is needed).
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/root/.cache/pip \
    pip wheel --constraint constraints.txt --wheel-dir /wheels .

# ---- runtime: installed from the wheels only, no sources, no build tools, not root.
FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
# numba's compiled detectors (detectors/series.py) cache beside the sources by default, and
# site-packages is not writable by the service user
ENV NUMBA_CACHE_DIR=/var/lib/aiops/.cache/numba
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels aiops-gpu \
 && useradd --system --uid 10001 --home-dir /var/lib/aiops --create-home aiops
USER aiops
WORKDIR /var/lib/aiops
# HTTP API (AIOPS_HTTP_PORT).
EXPOSE 8080
CMD ["aiops", "ingest"]
