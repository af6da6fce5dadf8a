# syntax=docker/dockerfile:1
# The one image every mptfx pod runs (pipeline nodes, the driver, the retraining CronJob, the
# MLflow server): TensorFlow 2.16 with CUDA 12 on Python 3.10, every version from
# requirements-image.lock (requirements.lock plus the NVIDIA wheels of tensorflow[and-cuda]).
#   make image                                  (docker build, else buildah; see README)
#   docker build -t mptfx:0.1.0 .
# Default command: the node entrypoint (the Kubernetes runner passes --ir and --node).
# Layers, most stable first, so that a code change reinstalls no dependency.

# The official image: CPython 3.10 in /usr/local on Debian 12. Where no registry is reachable,
# scripts/build_base_image.sh builds a stand-in and `make image` passes it here.
ARG BASE_IMAGE=python:3.10-slim-bookworm
FROM ${BASE_IMAGE}
#checkov:skip=CKV_DOCKER_7:the base is ARG BASE_IMAGE, whose default python:3.10-slim-bookworm names a version tag; checkov does not resolve ARG defaults
#checkov:skip=CKV_DOCKER_2:batch pods and servers built from this image are health-checked by their Kubernetes probes; a Docker HEALTHCHECK is ignored by Kubernetes

# The pods run as uid 10001 (runAsUser in every manifest); HOME=/tmp is that user's only
# writable place besides the mounted workspace, as under readOnlyRootFilesystem.
RUN groupadd --gid 10001 mptfx \
    && useradd --uid 10001 --gid 10001 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin mptfx

# XLA looks for libdevice under a CUDA install; the nvcc wheel ships it inside site-packages.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    TF_CPP_MIN_LOG_LEVEL=1 \
    XLA_FLAGS=--xla_gpu_cuda_data_dir=/opt/venv/lib/python3.10/site-packages/nvidia/cuda_nvcc
WORKDIR /opt/mptfx

# One dependency layer, keyed only by the lock. uv (its version from the lock) installs in a
# fraction of pip's time; the cache mount keeps downloaded wheels out of the image and lets a
# rebuild after a lock change download only what changed. Bytecode is compiled now because
# the image's files are read-only at run time. pyfarmhash (apache-beam[gcp]) is an sdist: g++
# is there for its build only and leaves in the same layer. Downloads trust the system CA
# store, so a build host behind a TLS-inspecting proxy can mount its bundle over it for the
# build (`make image` does).
COPY requirements-image.lock ./
# Debian's archive keeps only the latest patch of a package, so an exact apt pin would break
# the build within weeks; g++ does not reach the image.
# hadolint ignore=DL3008
RUN --mount=type=cache,target=/root/.cache/uv,sharing=locked \
    apt-get update \
    && apt-get install -y --no-install-recommends g++ \
    && python -m venv /opt/venv \
    && /opt/venv/bin/python -m pip install --no-cache-dir --cert /etc/ssl/certs/ca-certificates.crt \
       --no-deps --constraint requirements-image.lock uv \
    && SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt UV_CACHE_DIR=/root/.cache/uv UV_LINK_MODE=copy \
       /opt/venv/bin/uv pip sync --python /opt/venv/bin/python --compile-bytecode requirements-image.lock \
    && test -f "${XLA_FLAGS#*=}/nvvm/libdevice/libdevice.10.bc" \
    && apt-get purge -y --auto-remove g++ \
    && rm -rf /var/lib/apt/lists/*

# The code: one layer (.dockerignore keeps only the packages, configs and metadata), then the
# console script `mptfx` with no dependency resolution. uv leaves a world-writable .lock in
# the venv: removed, so that no image file is writable by the pod's user.
COPY . ./
RUN UV_LINK_MODE=copy uv pip install --python /opt/venv/bin/python --no-deps --no-build-isolation \
       --compile-bytecode --no-cache /opt/mptfx \
    && rm -rf /opt/mptfx/build /opt/mptfx/*.egg-info /opt/venv/.lock

USER 10001:10001
CMD ["python", "-m", "pipelines.node_entrypoint"]
