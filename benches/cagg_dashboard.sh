#!/usr/bin/env bash
# Continuous-aggregate benchmark: TSBS cpu-only data (100 hosts, 30 days) loaded into
# Sundial (line protocol) and, when TS_DSN is given, copied into TimescaleDB (a
# hypertable with 1-day chunks); then on each, benches/cagg_dashboard.py times the
# per-hour avg/max-per-host dashboard query on the raw table and on continuous
# aggregates (materialized-only and real-time), and a refresh after late writes to 1%
# of the time range. Answers are checked equal between the raw query and the views.
# Usage: bash benches/cagg_dashboard.sh BIN   (BIN: a release `sundial` binary)
# Environment: SCALE (100), START / END (2016-01-01T00:00:00Z / 2016-01-31T00:00:00Z),
#   LOG_INTERVAL (10s), RUNS (5), WORK (/tmp/cagg-bench), SD_PG_PORT (25432),
#   SD_HTTP_PORT (28086), TS_DSN (unset: Sundial only; the peers' TimescaleDB is
#   "host=127.0.0.1 port=55433 user=postgres dbname=benchmark").
set -euo pipefail
BIN="$(realpath "${1:?usage: bash benches/cagg_dashboard.sh BIN}")"
HERE="$(cd "$(dirname "$0")" && pwd)"
SCALE="${SCALE:-100}"
START="${START:-2016-01-01T00:00:00Z}"
END="${END:-2016-01-31T00:00:00Z}"
LOG_INTERVAL="${LOG_INTERVAL:-10s}"
RUNS="${RUNS:-5}"
WORK="${WORK:-/tmp/cagg-bench}"
SD_PG_PORT="${SD_PG_PORT:-25432}"
SD_HTTP_PORT="${SD_HTTP_PORT:-28086}"
TS_DSN="${TS_DSN:-}"

rm -rf "$WORK"
mkdir -p "$WORK"
SUNDIAL_PID=
cleanup() { if [ -n "$SUNDIAL_PID" ]; then kill "$SUNDIAL_PID" 2>/dev/null || true; fi; }
trap cleanup EXIT

SD="host=127.0.0.1 port=$SD_PG_PORT user=postgres dbname=benchmark"
echo "== Sundial: serve, load cpu-only (scale $SCALE, $START .. $END every $LOG_INTERVAL), compact"
"$BIN" serve --data-dir "$WORK/data" --pg-addr "127.0.0.1:$SD_PG_PORT" \
    --http-addr "127.0.0.1:$SD_HTTP_PORT" >"$WORK/sundial.out" 2>"$WORK/sundial.err" &
SUNDIAL_PID=$!
for _ in $(seq 300); do grep -q "SUNDIAL READY" "$WORK/sundial.out" && break; sleep 0.1; done
grep -q "SUNDIAL READY" "$WORK/sundial.out" || { cat "$WORK/sundial.err"; exit 1; }
"$BIN" bench load --url "http://127.0.0.1:$SD_HTTP_PORT" --use-case cpu-only --scale "$SCALE" \
    --timestamp-start "$START" --timestamp-end "$END" --log-interval "$LOG_INTERVAL" \
    --reporting-period 0s
psql -X -q -A -t "$SD" -c 'SELECT sundial_compact()' >/dev/null
echo "sundial cpu rows: $(psql -X -A -t "$SD" -c "SELECT count(*) FROM cpu")"

if [ -n "$TS_DSN" ]; then
    echo "== TimescaleDB: hypertable cpu (1-day chunks), COPY the rows from Sundial"
    COLS=$(psql -X -A -t -F ' ' "$SD" -c "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'cpu' ORDER BY ordinal_position" |
        awk 'NF { name = $1; $1 = ""; sub(/^ /, ""); printf "%s%s %s", sep, name, $0; sep = ", " }')
    psql -X -q "$TS_DSN" -c "DROP TABLE IF EXISTS cpu CASCADE" \
        -c "CREATE TABLE cpu ($COLS)" \
        -c "SELECT create_hypertable('cpu', 'time', chunk_time_interval => INTERVAL '1 day')" >/dev/null
    psql -X -q "$SD" -c "COPY cpu TO STDOUT" | psql -X -q "$TS_DSN" -c "COPY cpu FROM STDIN"
    psql -X -q "$TS_DSN" -c "CREATE INDEX ON cpu (hostname, time DESC)" -c "ANALYZE cpu"
    echo "timescaledb cpu rows: $(psql -X -A -t "$TS_DSN" -c "SELECT count(*) FROM cpu")"
fi

echo "== Sundial"
python3 "$HERE/cagg_dashboard.py" "$SD" "$START" "$END" --runs "$RUNS" --answers "$WORK/sundial.json" | tee "$WORK/sundial.result"
if [ -n "$TS_DSN" ]; then
    echo "== TimescaleDB"
    python3 "$HERE/cagg_dashboard.py" "$TS_DSN" "$START" "$END" --runs "$RUNS" --answers "$WORK/tsdb.json" | tee "$WORK/tsdb.result"
    python3 - "$WORK/sundial.json" "$WORK/tsdb.json" <<'EOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
def eq(u, v):
    if u == v: return True
    try: return abs(float(u) - float(v)) <= 1e-9 * max(abs(float(u)), abs(float(v)), 1.0)
    except ValueError: return False
ok = all(len(a[k]) == len(b[k]) and all(eq(x, y) for r, s in zip(a[k], b[k]) for x, y in zip(r, s)) for k in a)
print("dashboard answers equal on Sundial and TimescaleDB:", ok)
EOF
fi
