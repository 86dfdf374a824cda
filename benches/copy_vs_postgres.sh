#!/usr/bin/env bash
# COPY benchmark: psql's \copy of a 1M-row, 10-field CSV (TSBS cpu-like: time, hostname,
# eight integer fields) into Sundial (release build, hypertable) and into PostgreSQL 15
# (plain table with an index on (hostname, time), as TimescaleDB users index it).
# Usage: benches/copy_vs_postgres.sh [rows]   (needs a release build and postgresql-15)
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS="${1:-1000000}"
WORK="$(mktemp -d)"
trap 'kill $SUNDIAL_PID 2>/dev/null || true; runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl -D "$WORK/pg" -m immediate stop >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
CSV="$WORK/data.csv"
python3 benches/cpu_csv.py "$ROWS" "$CSV"
COLS="time timestamptz NOT NULL, hostname text, usage_user bigint, usage_system bigint, usage_idle bigint, usage_nice bigint, usage_iowait bigint, usage_irq bigint, usage_softirq bigint, usage_steal bigint"
TARGET="${CARGO_TARGET_DIR:-target}"

# Sundial
"$TARGET/release/sundial" serve --data-dir "$WORK/sd" --pg-addr 127.0.0.1:0 --http-addr off >"$WORK/sd.out" 2>"$WORK/sd.err" &
SUNDIAL_PID=$!
for _ in $(seq 100); do grep -q "SUNDIAL READY" "$WORK/sd.out" && break; sleep 0.1; done
SPORT=$(sed -n 's/.*pg=127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/sd.out")
psql -X -q -h 127.0.0.1 -p "$SPORT" -U bench -d sundial -c "CREATE TABLE cpu ($COLS) WITH (tsdb.hypertable, tsdb.chunk_interval='1 day')"
S0=$(date +%s.%N)
psql -X -q -h 127.0.0.1 -p "$SPORT" -U bench -d sundial -c "\\copy cpu from '$CSV' with (format csv, header)"
S1=$(date +%s.%N)
psql -X -A -t -h 127.0.0.1 -p "$SPORT" -U bench -d sundial -c "SELECT count(*) FROM cpu"

# PostgreSQL 15
mkdir -p "$WORK/pg" && chown postgres "$WORK" "$WORK/pg"
runuser -u postgres -- /usr/lib/postgresql/15/bin/initdb -D "$WORK/pg" -A trust -U postgres >/dev/null
PPORT=$((20000 + RANDOM % 20000))
runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl -D "$WORK/pg" -o "-p $PPORT -k $WORK" -l "$WORK/pg.log" start >/dev/null
sleep 1
psql -X -q -h 127.0.0.1 -p "$PPORT" -U postgres -c "CREATE TABLE cpu ($COLS)" -c "CREATE INDEX ON cpu (hostname, time DESC)" -c "CREATE INDEX ON cpu (time DESC)"
chmod a+r "$CSV"
P0=$(date +%s.%N)
psql -X -q -h 127.0.0.1 -p "$PPORT" -U postgres -c "\\copy cpu from '$CSV' with (format csv, header)"
P1=$(date +%s.%N)
psql -X -A -t -h 127.0.0.1 -p "$PPORT" -U postgres -c "SELECT count(*) FROM cpu"

python3 - "$ROWS" "$S0" "$S1" "$P0" "$P1" <<'PY'
import sys
rows = int(sys.argv[1]); s = float(sys.argv[3]) - float(sys.argv[2]); p = float(sys.argv[5]) - float(sys.argv[4])
print(f"sundial  \\copy {rows} rows: {s:.2f} s = {rows / s:,.0f} rows/s")
print(f"postgres \\copy {rows} rows: {p:.2f} s = {rows / p:,.0f} rows/s (2 indexes)")
PY
