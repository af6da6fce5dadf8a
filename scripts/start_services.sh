#!/usr/bin/env bash
# Start the servers the tests need, and install the programs they run (on a fresh machine).
# Idempotent, and quick when everything is already there; `make test` runs it before pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/packages.sh
. scripts/lib/packages.sh
# Where Debian's PostgreSQL server packages put each major version's binaries.
PG_LIB=${PG_LIB:-/usr/lib/postgresql}

# PostgreSQL: the shared ML Metadata server of the Kubernetes replay
# (tests/image/test_container_replay.py), reached as mptfx/mptfx on 127.0.0.1.
start_postgres() {
  # The cluster tools (postgresql-common) and the client are on PATH; the server is not.
  ensure_programs services pg_lsclusters:postgresql pg_createcluster:postgresql \
    pg_ctlcluster:postgresql pg_isready:postgresql psql:postgresql runuser:util-linux
  compgen -G "$PG_LIB/*/bin/postgres" >/dev/null || install_packages services "a PostgreSQL server" postgresql
  local version port status
  version=$(ls "$PG_LIB" | sort -V | tail -1)
  if ! pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" {found=1} END {exit !found}'; then
    pg_createcluster "$version" main >/dev/null
  fi
  port=$(pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" {print $3}')
  status=$(pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" {print $4}')
  if [ "$status" != online ]; then
    pg_ctlcluster "$version" main start
  fi
  pg_isready -q -h 127.0.0.1 -p "$port" -t 30
  runuser -u postgres -- psql -q -p "$port" -v ON_ERROR_STOP=1 -c "DO \$\$ BEGIN
      IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'mptfx') THEN
        CREATE ROLE mptfx LOGIN CREATEDB PASSWORD 'mptfx';
      END IF; END \$\$;"
  export MPTFX_TEST_PG_HOST=127.0.0.1 MPTFX_TEST_PG_PORT="$port"
  export MPTFX_TEST_PG_USER=mptfx MPTFX_TEST_PG_PASSWORD=mptfx
  echo "services: PostgreSQL $version on 127.0.0.1:$port (role mptfx)"
}

# Prometheus and promtool (Debian's `prometheus`, 2.42): the canary analysis tests start their
# own server on 127.0.0.1 with a temporary config (tests/prometheus_server.py), and promtool
# checks and unit-tests the alerting and recording rules. Nothing stays running: the package's
# own daemons are stopped and disabled right after a fresh install.
start_prometheus() {
  local fresh=false
  { type -P prometheus && type -P promtool; } >/dev/null || fresh=true
  ensure_programs services prometheus:prometheus promtool:prometheus
  if $fresh; then
    stop_package_daemons prometheus prometheus-node-exporter
  fi
  echo "services: $(prometheus --version 2>&1 | head -1) (tests start their own server)"
}

# Chromium (Debian's `chromium`): the report test renders runs/<id>/report.html headless and
# checks that every image loads with no console error (tests/chromium.py). No daemon.
ensure_chromium() {
  ensure_programs services chromium:chromium
  echo "services: $(chromium --version 2>/dev/null | head -1) (headless, for the run report test)"
}

start_postgres
start_prometheus
ensure_chromium
