#!/usr/bin/env bash
# Start the servers the tests need (installing them on a fresh machine). Idempotent, and
# quick when everything is already there; `make test` runs it before pytest.
set -euo pipefail

# PostgreSQL: the shared ML Metadata server of the Kubernetes replay test
# (tests/e2e/test_k8s_replay.py), reached as mptfx/mptfx on 127.0.0.1.
start_postgres() {
  if ! compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null; then
    if [ "$(id -u)" != 0 ]; then
      echo "ci: PostgreSQL is not installed; as root: apt-get install -y postgresql" >&2
      exit 2
    fi
    echo "ci: installing PostgreSQL (Debian package)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fi
  local version port status
  version=$(ls /usr/lib/postgresql | sort -V | tail -1)
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
  echo "ci: PostgreSQL $version on 127.0.0.1:$port (role mptfx)"
}

start_postgres
