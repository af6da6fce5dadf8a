#!/usr/bin/env bash
# `make test`: every tier but the fault runs, in one pytest session, with the image built beside.
#
#   PARALLEL="-n auto --dist loadfile" scripts/run_tests.sh IMAGE [PYTEST ARGS...]
#
# Building the image on a fresh machine is mostly downloading and unpacking (~4 GB of wheels,
# a quarter of an hour and little CPU), so it runs beside the tests from the start; every layer
# is reused when nothing changed. tests/image's files are queued after the longest files
# (tests/conftest.py) and their `image` fixture waits for this build's exit code
# ($MPTFX_IMAGE_BUILD/exit), so they start once it is done and fill the workers' last minutes
# instead of running as a tier of their own after the others. Where the build is impossible
# (not root, not CI) the image tests skip with one line; under CI=true, or with buildah
# installed, a failed build fails them and the run. The build runs in its own process group
# and never outlives this script.
# Exit code: pytest's, else 2 when the build failed.
set -uo pipefail
cd "$(dirname "$0")/.."
image=$1
shift
venv=${VENV:-.venv}
MPTFX_IMAGE_BUILD=$(mktemp -d "${TMPDIR:-/tmp}/mptfx-image-build.XXXXXX")
# The trained workspaces the tests share (tests/workspaces.py): the image's replay reuses the
# local run the e2e tests made instead of training it again.
MPTFX_TEST_WORKSPACES=$(mktemp -d "${TMPDIR:-/tmp}/mptfx-test-workspaces.XXXXXX")
export MPTFX_IMAGE=$image MPTFX_IMAGE_BUILD MPTFX_TEST_WORKSPACES

# shellcheck disable=SC2016 # expanded by the inner shell
setsid bash -c 'bash scripts/build_image.sh "$1" >"$2/log" 2>&1
  echo $? >"$2/exit.part" && mv "$2/exit.part" "$2/exit"' build "$image" "$MPTFX_IMAGE_BUILD" &
build=$!
trap 'kill -- -"$build" 2>/dev/null; wait "$build" 2>/dev/null
  rm -rf "$MPTFX_IMAGE_BUILD" "$MPTFX_TEST_WORKSPACES"' EXIT
trap 'exit 130' INT TERM

# shellcheck disable=SC2086 # PARALLEL is several words
"$venv/bin/pytest" ${PARALLEL:-} "$@"
tests=$?

wait "$build"
built=$(cat "$MPTFX_IMAGE_BUILD/exit" 2>/dev/null || echo 1)
if [ "$built" = 0 ]; then
  tail -n 1 "$MPTFX_IMAGE_BUILD/log"
elif [ "${CI:-}" = true ] || type -P buildah >/dev/null; then
  echo "make test: the image build failed (exit $built); its last lines:" >&2
  tail -n 20 "$MPTFX_IMAGE_BUILD/log" >&2
  [ "$tests" = 0 ] && tests=2
else
  echo "make test: no image ($(tail -n 1 "$MPTFX_IMAGE_BUILD/log")); tests/image skipped" >&2
fi
exit "$tests"
