# The aiops daemon. Built by docker-compose.yml (`docker compose build aiops`) or on its own:
#   docker build -t aiops-gpu .
#   docker run --rm -e AIOPS_KAFKA__BOOTSTRAP=broker:9092 -e AIOPS_INFLUX__URL=http://influxdb:8086 aiops-gpu
# Settings come from AIOPS_* environment variables (vocab/settings.py).

# A site without internet names its own base (a mirror, or an image loaded from a file) and its
# own package index or wheelhouse (a folder of wheels in the build context, e.g. made elsewhere by
# `pip wheel --constraint constraints.txt --wheel-dir wheelhouse .`): no frontend, image or index
# is fetched that these do not name.
#   docker build --build-arg PYTHON_IMAGE=registry.site/python:3.11-slim \
#     --build-arg PIP_INDEX_URL=https://pypi.site/simple .            (or --build-arg WHEELHOUSE=wheelhouse)
ARG PYTHON_IMAGE=python:3.11-slim

# ---- build: the project and all its dependencies as wheels (numpy, pandas, pyarrow and
# scikit-learn ship manylinux wheels for 3.11, so no compiler is needed).
FROM ${PYTHON_IMAGE} AS build
ARG PIP_INDEX_URL=https://pypi.org/simple
ARG WHEELHOUSE=
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
WORKDIR /src
COPY . .
# the same digest as the runtime stage's (below): buildah cannot mount a stage it took whole from
# its cache, so the two stages are rebuilt together or not at all
ARG AIOPS_SOURCE_DIGEST=
RUN --mount=type=cache,target=/root/.cache/pip \
    pip wheel --constraint constraints.txt --wheel-dir /wheels \
      ${WHEELHOUSE:+--no-index --find-links "/src/$WHEELHOUSE"} --index-url "$PIP_INDEX_URL" .

# ---- runtime: installed from the wheels only, no sources, no build tools, not root.
FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
# numba's compiled detectors (detectors/series.py) cache beside the sources by default, and
# site-packages is not writable by the service user
ENV NUMBA_CACHE_DIR=/var/lib/aiops/.cache/numba
# buildah (1.28, Debian's) keys the cached layer of the RUN below without the wheels it mounts: a
# rebuild after a change of the sources reused the old layer, with the old code in it.
# scripts/container passes a digest of the sources here, so a change of them is a new layer.
ARG AIOPS_SOURCE_DIGEST=
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels aiops-gpu \
 && useradd --system --uid 10001 --home-dir /var/lib/aiops --create-home aiops \
 && install -d -o aiops -g aiops -m 0700 /var/lib/aiops-state
# The state volume's mount path exists in the image, owned by the service user: a new named volume
# takes the ownership of the path it is mounted on (Docker's rule), where a path the image lacks
# gives a root-owned volume the daemons cannot checkpoint into.
USER aiops
WORKDIR /var/lib/aiops
# HTTP API (AIOPS_HTTP_PORT).
EXPOSE 8080
CMD ["aiops", "ingest"]
