#!/usr/bin/env bash
# Build the mptfx image (`make image` runs this).
#
#   scripts/build_image.sh [TAG]      (default mptfx:<version in pyproject.toml>)
#
# With a Docker engine that answers: `docker build`, FROM the official python:3.10-slim-bookworm.
# Without one: buildah (installed with apt-get when missing, as root), chroot isolation, its
# configured storage (STORAGE_DRIVER=vfs where overlay is unavailable), FROM a local stand-in for that base built by scripts/build_base_image.sh when absent
# (no registry needed). BASE_IMAGE=... overrides the base in both cases. Either way unchanged
# inputs reuse every layer, so a rebuild with nothing changed takes seconds.
# Build-time downloads trust this machine's CA bundle (BUILD_CA_BUNDLE, mounted for the build
# only, never copied into the image), so a TLS-inspecting proxy works.
# Exit codes: 0 built, 2 bad environment (see the one-line message), else the builder's.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -1)
TAG=${1:-mptfx:$VERSION}
BUILD_CA_BUNDLE=${BUILD_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
# buildah 1.28 reads no STORAGE_DRIVER variable itself: pass it as the global flag.
buildah() { command buildah ${STORAGE_DRIVER:+--storage-driver "$STORAGE_DRIVER"} "$@"; }
export STORAGE_DRIVER=${STORAGE_DRIVER:-}

die() { echo "build_image: $*" >&2; exit 2; }

# Debian packages this build needs, installed the way scripts/start_services.sh installs PostgreSQL.
ensure_packages() {
  local missing=()
  command -v buildah >/dev/null || missing+=(buildah)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  [ ${#missing[@]} -eq 0 ] && return
  [ "$(id -u)" = 0 ] || die "${missing[*]} not installed; as root: apt-get install -y ${missing[*]}"
  echo "build_image: installing ${missing[*]} (Debian packages)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

start=$(date +%s)
if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  echo "build_image: docker build -t $TAG (base ${BASE_IMAGE:-python:3.10-slim-bookworm})"
  DOCKER_BUILDKIT=1 docker build --build-arg BASE_IMAGE="${BASE_IMAGE:-python:3.10-slim-bookworm}" -t "$TAG" .
  size=$(docker image inspect --format '{{.Size}}' "$TAG")
else
  ensure_packages
  [ "$(id -u)" = 0 ] || die "buildah's chroot isolation and vfs storage need root here; run as root"
  if [ -z "${BASE_IMAGE:-}" ]; then
    BASE_IMAGE=localhost/python:3.10-slim-bookworm
    bash scripts/build_base_image.sh "$BASE_IMAGE"
  fi
  volumes=()
  [ -f "$BUILD_CA_BUNDLE" ] && volumes+=(--volume "$BUILD_CA_BUNDLE:/etc/ssl/certs/ca-certificates.crt:ro")
  echo "build_image: buildah bud -t $TAG (base $BASE_IMAGE)"
  buildah bud --quiet --isolation chroot --layers --build-arg BASE_IMAGE="$BASE_IMAGE" \
    "${volumes[@]}" -t "$TAG" . >/dev/null
  size=$(buildah images --noheading --format '{{.Size}}' "$TAG" | head -1)
fi
echo "build_image: $TAG ready in $(( $(date +%s) - start )) s, size $size"
