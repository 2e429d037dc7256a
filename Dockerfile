# syntax=docker/dockerfile:1
#
# memq image: one image for every role (writer, embed workers, flower, index/search/status).
#   docker build -t memq:latest .
# The role is chosen by the command: `docker run --rm memq:latest status`.
#
# Stage 1 compiles llama-cpp-python (needs build-essential + cmake); stage 2 copies only the
# finished virtualenv, so no compiler ships in the final image.

ARG PYTHON_IMAGE=python:3.11-slim

# --------------------------------------------------------------------------- build stage
FROM ${PYTHON_IMAGE} AS build

# GGML_NATIVE=OFF: portable CPU code, so an image built on one machine runs on every host of
# the fleet. On a single known host, `--build-arg LLAMA_CMAKE_ARGS=-DGGML_NATIVE=ON` is faster.
ARG LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF"

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CMAKE_ARGS="${LLAMA_CMAKE_ARGS}"

RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential cmake \
    && rm -rf /var/lib/apt/lists/*

RUN python -m venv /opt/memq
ENV PATH=/opt/memq/bin:$PATH

WORKDIR /src

# Dependencies first (from pyproject.toml only), so editing the source does not recompile
# llama.cpp: this layer is rebuilt only when pyproject.toml changes.
COPY pyproject.toml ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; print('\n'.join(p['dependencies'] + p['optional-dependencies']['fleet']))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt

# Then the project itself (deps above are already satisfied, so this is quick).
COPY . .
RUN pip install ".[fleet]" \
    && memq --help >/dev/null

# ------------------------------------------------------------------------- runtime stage
FROM ${PYTHON_IMAGE} AS runtime

# libgomp1: llama.cpp is built with OpenMP by GCC.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/*

# Non-root user. /data (SQLite) and /cache (model cache) are created here and owned by memq,
# so fresh named volumes mounted there inherit that ownership.
RUN groupadd --system --gid 10001 memq \
    && useradd --system --uid 10001 --gid memq --home-dir /home/memq --create-home \
       --shell /usr/sbin/nologin memq \
    && mkdir -p /data /cache /workspace \
    && chown memq:memq /data /cache

COPY --from=build /opt/memq /opt/memq

ENV PATH=/opt/memq/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MEMQ_WORKSPACE=/workspace \
    MEMQ_STORE_PATH=/data/memq.sqlite \
    MEMQ_CACHE_DIR=/cache

USER memq
WORKDIR /home/memq

# Flower's port (only the flower service publishes it).
EXPOSE 5555

ENTRYPOINT ["memq"]
CMD ["--help"]
