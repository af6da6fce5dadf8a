#!/usr/bin/env bash
# Build a stand-in for the official python:3.10-slim-bookworm image on a machine that cannot
# pull one (no registry reachable): a Debian bookworm minbase root, the runtime libraries
# CPython needs, and this machine's CPython 3.10 in /usr/local -- the official image's layout.
#
#   scripts/build_base_image.sh [TAG]     (default localhost/python:3.10-slim-bookworm)
#
# Needs root, buildah and debootstrap (`make image` installs them with apt-get when missing).
# Idempotent: does nothing when TAG already exists (FORCE=1 rebuilds). Storage: buildah's
# configured driver (overlay as root on Debian); STORAGE_DRIVER=vfs where overlay is unavailable.
# Exit codes: 0 built or present, 2 bad environment (no mirror, no CPython 3.10, not root).
set -euo pipefail

TAG=${1:-localhost/python:3.10-slim-bookworm}
# buildah 1.28 reads no STORAGE_DRIVER variable itself: pass it as the global flag.
# (Not a function named `buildah`: that would hide a missing program from every lookup.)
run_buildah() { buildah ${STORAGE_DRIVER:+--storage-driver "$STORAGE_DRIVER"} "$@"; }
# The official image's runtime packages (its Dockerfile's apt-get install line), no compilers.
RUNTIME_PACKAGES=ca-certificates,netbase,tzdata,libssl3,libsqlite3-0,libffi8,liblzma5,libbz2-1.0,zlib1g,libreadline8,libncursesw6,libuuid1,libgdbm6,libexpat1

die() { echo "build_base_image: $*" >&2; exit 2; }

# The Debian mirror this machine's apt already uses for bookworm's main suite (deb822 .sources
# stanzas or one-line .list entries); never a host name written here.
debian_mirror() {
  local files=()
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && files+=("$f")
  done
  [ ${#files[@]} -gt 0 ] || return 0
  awk '
    function flush() { if (uris != "" && suites ~ /(^| )bookworm( |$)/ && !found) { split(uris, u, " "); print u[1]; found = 1 } uris = ""; suites = "" }
    FNR == 1 { flush() }
    /^[[:space:]]*#/ { next }
    /^deb[[:space:]]/ && !found {
      line = $0; sub(/\[[^]]*\][[:space:]]*/, "", line); n = split(line, w, /[[:space:]]+/)
      if (w[3] == "bookworm") { print w[2]; found = 1 }
      next }
    /^URIs:/ { uris = $0; sub(/^URIs:[[:space:]]*/, "", uris) }
    /^Suites:/ { suites = $0; sub(/^Suites:[[:space:]]*/, "", suites) }
    /^[[:space:]]*$/ { flush() }
    END { flush() }
  ' "${files[@]}" | head -1
}

# CPython 3.10 as this machine provides it (pyenv's build, or any python3.10 on PATH).
python_prefix() {
  local py
  if type -P pyenv >/dev/null && py=$(pyenv prefix 3.10 2>/dev/null); then
    echo "${py%%:*}"; return
  fi
  type -P python3.10 >/dev/null && python3.10 -c 'import sys; print(sys.base_prefix)'
}

[ "$(id -u)" = 0 ] || die "needs root (debootstrap and buildah's vfs storage); run it with sudo"
cd "$(dirname "$0")/.."
# shellcheck source=lib/packages.sh
. scripts/lib/packages.sh
ensure_programs build_base_image buildah:buildah debootstrap:debootstrap

if [ "${FORCE:-0}" != 1 ] && run_buildah inspect --type image "$TAG" >/dev/null 2>&1; then
  echo "build_base_image: $TAG already present"
  exit 0
fi

MIRROR=$(debian_mirror)
[ -n "$MIRROR" ] || die "no bookworm suite in /etc/apt/sources.list or /etc/apt/sources.list.d/; add a Debian mirror there"
PREFIX=$(python_prefix || true)
[ -n "$PREFIX" ] && [ -x "$PREFIX/bin/python3.10" ] || die "no CPython 3.10 found (pyenv install 3.10, or python3.10 on PATH)"
VERSION=$("$PREFIX/bin/python3.10" -c 'import platform; print(platform.python_version())')

start=$(date +%s)
ctr=$(run_buildah from scratch)
cleanup() { run_buildah umount "$ctr" >/dev/null 2>&1 || true; run_buildah rm "$ctr" >/dev/null 2>&1 || true; }
trap cleanup EXIT
ROOT=$(run_buildah mount "$ctr")

echo "build_base_image: debootstrap bookworm from $MIRROR"
debootstrap --variant=minbase --include="$RUNTIME_PACKAGES" bookworm "$ROOT" "$MIRROR" >/dev/null

echo "build_base_image: CPython $VERSION from $PREFIX into /usr/local"
tar -C "$PREFIX" -cf - bin include lib share | tar -C "$ROOT/usr/local" -xf -
# Only what the official image ships in site-packages (pip, setuptools); nothing else this
# machine's interpreter may have picked up.
find "$ROOT/usr/local/lib/python3.10/site-packages" -mindepth 1 -maxdepth 1 \
  ! -name 'pip' ! -name 'pip-*' ! -name 'setuptools' ! -name 'setuptools-*' \
  ! -name 'pkg_resources' ! -name '_distutils_hack' ! -name 'distutils-precedence.pth' \
  ! -name 'README.txt' -exec rm -rf {} +
# As the official Dockerfile does: no test suites, no bytecode, no static libpython.
find "$ROOT/usr/local" -depth \( \( -type d -a \( -name test -o -name tests -o -name idle_test \) \) \
  -o \( -type f -a \( -name '*.pyc' -o -name '*.pyo' -o -name 'libpython*.a' \) \) \) -exec rm -rf {} +
# The build prefix is baked into shebangs, sysconfig data and pkg-config files: point them at /usr/local.
grep -rlI --null -F "$PREFIX" "$ROOT/usr/local" | xargs -0 -r sed -i "s#$PREFIX#/usr/local#g"
ln -sf python3 "$ROOT/usr/local/bin/python"
echo /usr/local/lib > "$ROOT/etc/ld.so.conf.d/usr-local.conf"
chroot "$ROOT" /sbin/ldconfig
chroot "$ROOT" /usr/local/bin/python3 -c 'import ssl, sqlite3, ctypes, lzma, bz2, zlib, readline, curses, uuid, ssl; ssl.create_default_context()' \
  || die "CPython does not import its stdlib extensions inside the new root"

# Like the slim images: no package lists, caches or device nodes in the layer.
rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/*.bin "$ROOT"/var/cache/apt/archives/*.deb \
  "$ROOT"/var/log/* "$ROOT"/dev/* "$ROOT"/tmp/* "$ROOT"/usr/share/doc/* "$ROOT"/usr/share/man/*
run_buildah umount "$ctr" >/dev/null
run_buildah config --env PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env LANG=C.UTF-8 --env PYTHON_VERSION="$VERSION" --cmd python3 \
  --label org.opencontainers.image.description="stand-in for python:3.10-slim-bookworm (debootstrap + CPython $VERSION)" \
  "$ctr"
run_buildah commit --quiet --rm "$ctr" "$TAG" >/dev/null
trap - EXIT
echo "build_base_image: $TAG built in $(( $(date +%s) - start )) s"
