# Sourced by the setup scripts: install the Debian packages of programs missing from PATH.
#
#   . scripts/lib/packages.sh
#   ensure_programs build_image buildah:buildah debootstrap:debootstrap
#   install_packages start_services "a PostgreSQL server" postgresql
#   stop_package_daemons prometheus          # after a fresh install: nothing left running
#
# ensure_programs takes PROGRAM:PACKAGE pairs and looks each program up on PATH with
# `type -P`, never `command -v`, which also finds a shell function or alias of that name and
# would hide that the program itself is missing. What is missing is installed with apt-get as
# root; when that is impossible (not root, no apt-get, apt-get failing) one line names the
# packages and the command to run, and the script exits 2.

install_packages() {
  local who=$1 what=$2
  shift 2
  local fix="apt-get update && apt-get install -y $*"
  if [ "$(id -u)" != 0 ]; then
    echo "$who: $what not installed; as root run: $fix" >&2
    exit 2
  fi
  if ! type -P apt-get >/dev/null; then
    echo "$who: $what not installed and there is no apt-get; install the Debian packages $*" >&2
    exit 2
  fi
  echo "$who: installing $* (Debian packages, for $what)"
  # A failed update (one unreachable mirror) need not fail the install: the lists may do.
  apt-get update -qq >/dev/null || echo "$who: apt-get update failed; trying the install anyway" >&2
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null; then
    echo "$who: apt-get could not install $*; as root run: $fix" >&2
    exit 2
  fi
}

ensure_programs() {
  local who=$1 spec program package missing=() packages=()
  shift
  for spec in "$@"; do
    program=${spec%%:*} package=${spec#*:}
    if ! type -P "$program" >/dev/null; then
      missing+=("$program")
      case " ${packages[*]} " in *" $package "*) ;; *) packages+=("$package") ;; esac
    fi
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  install_packages "$who" "${missing[*]}" "${packages[@]}"
  for program in "${missing[@]}"; do
    type -P "$program" >/dev/null || { echo "$who: $program is still missing after apt-get install ${packages[*]}" >&2; exit 2; }
  done
}

# stop_package_daemons SERVICE...: a package's postinst may start its daemon (on a machine with
# systemd, or through invoke-rc.d and its init script in a container without it). Stop and
# disable each one, so that installing a program the tests run themselves leaves nothing
# running and nothing that starts at the next boot.
stop_package_daemons() {
  local service
  for service in "$@"; do
    if [ -d /run/systemd/system ] && type -P systemctl >/dev/null; then
      systemctl disable --now "$service" >/dev/null 2>&1 || true
    fi
    if [ -x "/etc/init.d/$service" ]; then
      "/etc/init.d/$service" stop >/dev/null 2>&1 || true
      if type -P update-rc.d >/dev/null; then
        update-rc.d "$service" disable >/dev/null 2>&1 || true
      fi
    fi
  done
}
