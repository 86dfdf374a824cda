#!/usr/bin/env bash
# COPY with and without a foreign key (issue 50): psql's \copy of a 1M-row, 10-field
# CSV (TSBS cpu-like: time, hostname, eight integer fields) into a hypertable whose
# hostname references a relational table of 100 hosts, and into the same hypertable
# without the foreign key; RUNS alternating runs of each on one release server.
# Usage: benches/copy_fk.sh [rows]   (needs a release build)
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS="${1:-1000000}"
RUNS="${RUNS:-3}"
WORK="$(mktemp -d)"
trap 'kill $SUNDIAL_PID 2>/dev/null || true; rm -rf "$WORK"' EXIT
CSV="$WORK/data.csv"
python3 benches/cpu_csv.py "$ROWS" "$CSV"
TARGET="${CARGO_TARGET_DIR:-target}"
"$TARGET/release/sundial" serve --data-dir "$WORK/sd" --pg-addr 127.0.0.1:0 --http-addr off >"$WORK/sd.out" 2>"$WORK/sd.err" &
SUNDIAL_PID=$!
for _ in $(seq 100); do grep -q "SUNDIAL READY" "$WORK/sd.out" && break; sleep 0.1; done
SPORT=$(sed -n 's/.*pg=127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/sd.out")
sql() { psql -X -q -A -t -h 127.0.0.1 -p "$SPORT" -U bench -d sundial -c "$1"; }
sql "CREATE TABLE host (name text PRIMARY KEY, region text)"
sql "INSERT INTO host SELECT 'host_' || g, 'r' || (g % 4) FROM generate_series(0, 99) AS g"
COLS="time timestamptz NOT NULL, hostname text, usage_user bigint, usage_system bigint, usage_idle bigint, usage_nice bigint, usage_iowait bigint, usage_irq bigint, usage_softirq bigint, usage_steal bigint"
for run in $(seq "$RUNS"); do
  for kind in plain fk; do
    t="cpu_${kind}_$run"
    if [ "$kind" = fk ]; then
      sql "CREATE TABLE $t ($COLS, FOREIGN KEY (hostname) REFERENCES host (name)) WITH (tsdb.hypertable, tsdb.chunk_interval='1 day')"
    else
      sql "CREATE TABLE $t ($COLS) WITH (tsdb.hypertable, tsdb.chunk_interval='1 day')"
    fi
    S0=$(date +%s.%N)
    sql "\\copy $t from '$CSV' with (format csv, header)"
    S1=$(date +%s.%N)
    N=$(sql "SELECT count(*) FROM $t")
    python3 -c "import sys; s=float(sys.argv[2])-float(sys.argv[1]); print('%-6s run %s: %d rows in %.2f s = %d rows/s' % (sys.argv[3], sys.argv[4], int(sys.argv[5]), s, int(sys.argv[5])/s))" "$S0" "$S1" "$kind" "$run" "$N"
  done
done
