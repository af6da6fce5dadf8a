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
# buildah 1.28 reads no STORAGE_DRIVER variable itself: pass it as the global flag. (Not a
# function named `buildah`: that would hide a missing program from every lookup.)
run_buildah() { buildah ${STORAGE_DRIVER:+--storage-driver "$STORAGE_DRIVER"} "$@"; }
export STORAGE_DRIVER=${STORAGE_DRIVER:-}
# shellcheck source=lib/packages.sh
. scripts/lib/packages.sh

die() { echo "build_image: $*" >&2; exit 2; }

start=$(date +%s)
if type -P docker >/dev/null && docker info >/dev/null 2>&1; then
  echo "build_image: docker build -t $TAG (base ${BASE_IMAGE:-python:3.10-slim-bookworm})"
  DOCKER_BUILDKIT=1 docker build --build-arg BASE_IMAGE="${BASE_IMAGE:-python:3.10-slim-bookworm}" -t "$TAG" .
  size=$(docker image inspect --format '{{.Size}}' "$TAG")
else
  ensure_programs build_image buildah:buildah debootstrap:debootstrap
  [ "$(id -u)" = 0 ] || die "buildah's chroot isolation and vfs storage need root here; run as root"
  if [ -z "${BASE_IMAGE:-}" ]; then
    BASE_IMAGE=localhost/python:3.10-slim-bookworm
    bash scripts/build_base_image.sh "$BASE_IMAGE"
  fi
  volumes=()
  [ -f "$BUILD_CA_BUNDLE" ] && volumes+=(--volume "$BUILD_CA_BUNDLE:/etc/ssl/certs/ca-certificates.crt:ro")
  echo "build_image: buildah bud -t $TAG (base $BASE_IMAGE)"
  run_buildah bud --quiet --isolation chroot --layers --build-arg BASE_IMAGE="$BASE_IMAGE" \
    "${volumes[@]}" -t "$TAG" . >/dev/null
  size=$(run_buildah images --noheading --format '{{.Size}}' "$TAG" | head -1)
fi
echo "build_image: $TAG ready in $(( $(date +%s) - start )) s, size $size"
