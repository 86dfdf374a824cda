#!/usr/bin/env bash
# Installs what the test suite needs beyond the Rust toolchain, once: PostgreSQL 15
# (the answer-comparison tests start a server of their own), psql, and the driver
# matrix clients (psycopg 3, asyncpg, SQLAlchemy + pandas from PyPI, node-postgres
# from npm, pgjdbc and a JDK from Debian). Every step is skipped when its tool is
# already there, so running it again costs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_install() {
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq "$@" >/dev/null
}

need_apt=()
[ -x /usr/lib/postgresql/15/bin/postgres ] || need_apt+=(postgresql-15)
command -v psql >/dev/null || need_apt+=(postgresql-client-15)
command -v java >/dev/null || need_apt+=(default-jdk-headless)
command -v node >/dev/null || need_apt+=(nodejs)
command -v npm >/dev/null || need_apt+=(npm)
[ -f /usr/share/java/postgresql.jar ] || need_apt+=(libpostgresql-jdbc-java)
command -v python3 >/dev/null || need_apt+=(python3 python3-pip)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "test-deps: installing ${need_apt[*]}" >&2
  apt_install "${need_apt[@]}"
fi
if ! python3 -c "import psycopg, asyncpg, sqlalchemy, pandas" 2>/dev/null; then
  echo "test-deps: installing the Python drivers" >&2
  python3 -m pip install -q -r tests/drivers/requirements.txt ||
    python3 -m pip install -q --break-system-packages -r tests/drivers/requirements.txt
fi
if [ ! -d tests/drivers/node_modules/pg ]; then
  echo "test-deps: installing node-postgres" >&2
  (cd tests/drivers && npm ci --silent --no-audit --no-fund)
fi
