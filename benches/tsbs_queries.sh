#!/usr/bin/env bash
# TSBS query benchmark, Sundial against PostgreSQL 15: starts Sundial on a fresh data
# directory, loads TSBS data with `bench load`, compacts, copies the rows into a scratch
# PostgreSQL 15 (plain tables, indexes (tag, time DESC) and (time DESC)), then runs
# `bench query --compare-dsn` (times both, checks every answer) and prints its table.
# Usage: bash benches/tsbs_queries.sh BIN   (BIN: a release `sundial` binary)
# Environment: SCALE (100), USE_CASE (cpu-only | iot), QUERIES (20), RUNS (3), SEED (1),
#   TYPES (all), LOG_INTERVAL (10s, TSBS's --log-interval), DIALECT (sundial | timescaledb: iot queries as TSBS writes them for
#   TimescaleDB, over a tags table; PostgreSQL gets a date_bin time_bucket), START / END (2016-01-01T00:00:00Z / 2016-01-02T00:00:00Z), WORK (/tmp/bq),
#   SD_PG_PORT (25432), SD_HTTP_PORT (28086), PG_PORT (54331), TOOL (BIN: the binary whose
#   `bench load` / `bench query` run, so an older server can be measured with today's tool),
#   TSDB_DSN (unset: when given, a running TimescaleDB, e.g. ../shared/peers/start_timescaledb.sh's
#   "host=127.0.0.1 port=55433 user=postgres dbname=benchmark", gets the rows too, in 1-day
#   chunks compressed as TSBS does (segmentby the series tag, orderby time DESC), and is
#   compared as a second server: the table then shows the ratio to the fastest).
set -euo pipefail
BIN="$(realpath "${1:?usage: bash benches/tsbs_queries.sh BIN}")"
TOOL="$(realpath "${TOOL:-$BIN}")"
SCALE="${SCALE:-100}"
USE_CASE="${USE_CASE:-cpu-only}"
QUERIES="${QUERIES:-20}"
RUNS="${RUNS:-3}"
SEED="${SEED:-1}"
TYPES="${TYPES:-all}"
DIALECT="${DIALECT:-sundial}"
LOG_INTERVAL="${LOG_INTERVAL:-10s}"
START="${START:-2016-01-01T00:00:00Z}"
END="${END:-2016-01-02T00:00:00Z}"
WORK="${WORK:-/tmp/bq}"
SD_PG_PORT="${SD_PG_PORT:-25432}"
SD_HTTP_PORT="${SD_HTTP_PORT:-28086}"
PG_PORT="${PG_PORT:-54331}"

PG_BIN=/usr/lib/postgresql/15/bin
if [ ! -x "$PG_BIN/pg_ctl" ]; then
    PG_BIN="$(dirname "$(command -v pg_ctl)")"
fi
as_postgres() {
    if [ "$(id -un)" = postgres ]; then "$@"; else runuser -u postgres -- "$@"; fi
}

rm -rf "$WORK"
mkdir -p "$WORK/pg"
chown postgres "$WORK/pg" 2>/dev/null || true
SUNDIAL_PID=
cleanup() {
    if [ -n "$SUNDIAL_PID" ]; then kill "$SUNDIAL_PID" 2>/dev/null || true; fi
    as_postgres "$PG_BIN/pg_ctl" -D "$WORK/pg/data" -m immediate stop >/dev/null 2>&1 || true
}
trap cleanup EXIT

SD="host=127.0.0.1 port=$SD_PG_PORT user=postgres dbname=benchmark"
PG="host=127.0.0.1 port=$PG_PORT user=postgres dbname=postgres"
if [ "$USE_CASE" = iot ]; then TABLES="readings diagnostics"; TAG=name; else TABLES=cpu; TAG=hostname; fi

echo "== Sundial: serve, load ($USE_CASE, scale $SCALE, $START .. $END), compact"
"$BIN" serve --data-dir "$WORK/data" --pg-addr "127.0.0.1:$SD_PG_PORT" \
    --http-addr "127.0.0.1:$SD_HTTP_PORT" >"$WORK/sundial.out" 2>"$WORK/sundial.err" &
SUNDIAL_PID=$!
for _ in $(seq 300); do grep -q "SUNDIAL READY" "$WORK/sundial.out" && break; sleep 0.1; done
grep -q "SUNDIAL READY" "$WORK/sundial.out" || { cat "$WORK/sundial.err"; exit 1; }
"$TOOL" bench load --url "http://127.0.0.1:$SD_HTTP_PORT" --use-case "$USE_CASE" --scale "$SCALE" \
    --timestamp-start "$START" --timestamp-end "$END" --log-interval "$LOG_INTERVAL" --reporting-period 0s
psql -X -q -A -t "$SD" -c 'SELECT sundial_compact()' >/dev/null
for t in $TABLES; do
    echo "sundial $t rows: $(psql -X -A -t "$SD" -c "SELECT count(*) FROM $t")"
done

echo "== PostgreSQL 15: initdb, start on port $PG_PORT, copy the rows, index"
as_postgres "$PG_BIN/initdb" -D "$WORK/pg/data" -A trust -U postgres >/dev/null
as_postgres "$PG_BIN/pg_ctl" -D "$WORK/pg/data" -l "$WORK/pg/log" -w \
    -o "-p $PG_PORT -k $WORK/pg -c listen_addresses=127.0.0.1 -c TimeZone=UTC -c shared_buffers=512MB -c work_mem=64MB" \
    start >/dev/null
for t in $TABLES; do
    # The same columns in the same order as Sundial's table, so `SELECT *` matches.
    COLS=$(psql -X -A -t -F ' ' "$SD" -c "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = '$t' ORDER BY ordinal_position" |
        awk 'NF { name = $1; $1 = ""; sub(/^ /, ""); printf "%s%s %s", sep, name, $0; sep = ", " }')
    psql -X -q "$PG" -c "CREATE TABLE $t ($COLS)"
    psql -X -q "$SD" -c "COPY $t TO STDOUT" | psql -X -q "$PG" -c "COPY $t FROM STDIN"
    psql -X -q "$PG" -c "CREATE INDEX ON $t ($TAG, time DESC)" -c "CREATE INDEX ON $t (time DESC)" -c "ANALYZE $t"
    echo "postgres $t rows: $(psql -X -A -t "$PG" -c "SELECT count(*) FROM $t")"
done

COMPARE=(--compare-dsn "$PG" --compare-name postgres)
if [ -n "${TSDB_DSN:-}" ]; then
    echo "== TimescaleDB: hypertables of 1-day chunks, copy the rows, compress"
    psql -X -q "$TSDB_DSN" -c "CREATE EXTENSION IF NOT EXISTS timescaledb" >/dev/null
    for t in $TABLES tags; do psql -X -q "$TSDB_DSN" -c "DROP TABLE IF EXISTS $t CASCADE" 2>/dev/null; done
    for t in $TABLES; do
        COLS=$(psql -X -A -t -F ' ' "$SD" -c "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = '$t' ORDER BY ordinal_position" |
            awk 'NF { name = $1; $1 = ""; sub(/^ /, ""); printf "%s%s %s", sep, name, $0; sep = ", " }')
        psql -X -q "$TSDB_DSN" -c "CREATE TABLE $t ($COLS)" \
            -c "SELECT create_hypertable('$t', 'time', chunk_time_interval => INTERVAL '1 day')" >/dev/null
        psql -X -q "$SD" -c "COPY $t TO STDOUT" | psql -X -q "$TSDB_DSN" -c "COPY $t FROM STDIN"
        psql -X -q "$TSDB_DSN" -c "CREATE INDEX ON $t ($TAG, time DESC)" \
            -c "ALTER TABLE $t SET (timescaledb.compress, timescaledb.compress_segmentby = '$TAG', timescaledb.compress_orderby = 'time DESC')" \
            -c "SELECT count(compress_chunk(c)) FROM show_chunks('$t') c" -c "ANALYZE $t" >/dev/null
        echo "timescaledb $t rows: $(psql -X -A -t "$TSDB_DSN" -c "SELECT count(*) FROM $t")"
    done
    COMPARE+=(--compare-dsn "$TSDB_DSN" --compare-name timescaledb)
fi

if [ "$DIALECT" = timescaledb ]; then
    # TSBS's TimescaleDB text calls time_bucket: PostgreSQL's equivalent for the
    # widths it uses (minutes, hours, 24 hours; TimescaleDB's origin 2000-01-03).
    psql -X -q "$PG" -c "CREATE FUNCTION time_bucket(interval, timestamptz) RETURNS timestamptz LANGUAGE sql IMMUTABLE AS \$\$ SELECT date_bin(\$1, \$2, TIMESTAMPTZ '2000-01-03 00:00:00+00') \$\$"
fi

echo "== bench query: --dsn Sundial, --compare-dsn PostgreSQL${TSDB_DSN:+ and TimescaleDB}"
"$TOOL" bench query --dsn "$SD" "${COMPARE[@]}" --use-case "$USE_CASE" --types "$TYPES" \
    --queries "$QUERIES" --runs "$RUNS" --seed "$SEED" --scale "$SCALE" --dialect "$DIALECT" \
    --timestamp-start "$START" --timestamp-end "$END"
