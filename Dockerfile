# syntax=docker/dockerfile:1
# The one image every mptfx pod runs (pipeline nodes, the driver, the retraining CronJob, the
# MLflow server): TensorFlow 2.16 with CUDA 12 on Python 3.10, everything from requirements.lock.
#   docker build -t mptfx:0.1.0 .
# Default command: the node entrypoint (the Kubernetes runner passes --ir and --node).

FROM ubuntu:22.04 AS build
# Ubuntu's archive keeps only the latest patch of a package, so exact apt pins would break the
# build within weeks; the Python packages, which decide behaviour, are pinned by the lock.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3.10 python3.10-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/mptfx
COPY requirements.lock pyproject.toml README.md ./
# The lock pins tensorflow==2.16.2; the and-cuda extra adds NVIDIA's CUDA 12 / cuDNN wheels.
RUN python3.10 -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir --requirement requirements.lock \
    && /opt/venv/bin/pip install --no-cache-dir --constraint requirements.lock "tensorflow[and-cuda]==2.16.2"
COPY pipelines/ pipelines/
COPY components/ components/
COPY models/ models/
COPY configs/ configs/
RUN /opt/venv/bin/pip install --no-cache-dir --no-deps /opt/mptfx

FROM ubuntu:22.04
#checkov:skip=CKV_DOCKER_2:batch pods and servers built from this image are health-checked by their Kubernetes probes; a Docker HEALTHCHECK is ignored by Kubernetes
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3.10 ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 10001 mptfx \
    && useradd --uid 10001 --gid 10001 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin mptfx
COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/mptfx/configs /opt/mptfx/configs
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    TF_CPP_MIN_LOG_LEVEL=1
WORKDIR /opt/mptfx
USER 10001:10001
CMD ["python", "-m", "pipelines.node_entrypoint"]
