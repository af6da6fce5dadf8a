#!/usr/bin/env bash
# `make test`: every tier but the fault runs, with the image built while the other tiers run.
#
#   PARALLEL="-n auto --dist loadfile" scripts/run_tests.sh IMAGE [PYTEST ARGS...]
#
# Building the image on a fresh machine is mostly downloading and unpacking (~4 GB of wheels,
# a quarter of an hour and little CPU), so it runs beside tests/unit, integration and e2e;
# tests/image runs once it is built (every layer is reused when nothing changed). Where the
# build is impossible (not root, not CI) the image tests skip with one line; under CI=true, or
# with buildah installed, a failed build fails the run. The build never outlives this script.
# Exit code: the first failing step's (pytest's, or 2 for the build).
set -uo pipefail
cd "$(dirname "$0")/.."
image=$1
shift
venv=${VENV:-.venv}
log=$(mktemp "${TMPDIR:-/tmp}/mptfx-image-build.XXXXXX")
# The trained workspaces the tiers share (tests/workspaces.py): the image tier's replay reuses
# the local run the e2e tier made instead of training it again.
MPTFX_TEST_WORKSPACES=$(mktemp -d "${TMPDIR:-/tmp}/mptfx-test-workspaces.XXXXXX")
export MPTFX_TEST_WORKSPACES

bash scripts/build_image.sh "$image" >"$log" 2>&1 &
build=$!
trap 'kill "$build" 2>/dev/null; wait "$build" 2>/dev/null; rm -rf "$log" "$MPTFX_TEST_WORKSPACES"' EXIT
trap 'exit 130' INT TERM

# shellcheck disable=SC2086 # PARALLEL is several words
"$venv/bin/pytest" ${PARALLEL:-} --ignore=tests/image "$@"
tiers=$?

wait "$build"
built=$?
build_failed=0
if [ "$built" = 0 ]; then
  tail -n 1 "$log"
  export MPTFX_IMAGE_BUILT=$image
elif [ "${CI:-}" = true ] || type -P buildah >/dev/null; then
  echo "make test: the image build failed (exit $built); its last lines:" >&2
  tail -n 20 "$log" >&2
  build_failed=2
else
  echo "make test: no image ($(tail -n 1 "$log")); tests/image will skip" >&2
fi
export MPTFX_IMAGE=$image
images=0
if [ "$build_failed" = 0 ]; then
  # shellcheck disable=SC2086
  "$venv/bin/pytest" ${PARALLEL:-} "$@" tests/image
  images=$?
fi
for code in "$tiers" "$build_failed" "$images"; do
  [ "$code" = 0 ] || exit "$code"
done
