#!/usr/bin/env bash
# Keys and UPDATE benchmark (release build):
#  1. psql's \copy of a 1M-row TSBS cpu-like CSV into an unkeyed hypertable and into
#     one with PRIMARY KEY (hostname, time): what the key check costs a plain append;
#  2. UPDATE of 1 row and of 1% of the rows (one host of 100) in a table of
#     UPDATE_ROWS rows (default 10M, loaded as ten 1M-row COPYs, then flushed and
#     compacted as a loaded table would be).
# Usage: CARGO_TARGET_DIR=... benches/keys_update.sh [copy_rows]
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS="${1:-1000000}"
UPDATE_ROWS="${UPDATE_ROWS:-10000000}"
WORK="$(mktemp -d)"
trap 'kill $SUNDIAL_PID 2>/dev/null || true; wait $SUNDIAL_PID 2>/dev/null || true; rm -rf "$WORK"' EXIT
gen() { # gen ROWS OFFSET PATH: rows of 100 hosts, 10 s apart, starting OFFSET rows in
  python3 - "$1" "$2" "$3" <<'PY'
import random, sys, datetime
rows, off, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
random.seed(off)
start = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
with open(path, "w") as f:
    f.write("time,hostname,usage_user,usage_system,usage_idle,usage_nice,usage_iowait,usage_irq,usage_softirq,usage_steal\n")
    for i in range(off, off + rows):
        t = start + datetime.timedelta(seconds=i // 100 * 10)
        vals = ",".join(str(random.randint(0, 100)) for _ in range(8))
        f.write("%s,host_%d,%s\n" % (t.strftime("%Y-%m-%d %H:%M:%S+00"), i % 100, vals))
PY
}
COLS="time timestamptz NOT NULL, hostname text NOT NULL, usage_user bigint, usage_system bigint, usage_idle bigint, usage_nice bigint, usage_iowait bigint, usage_irq bigint, usage_softirq bigint, usage_steal bigint"
TARGET="${CARGO_TARGET_DIR:-target}"
"$TARGET/release/sundial" serve --data-dir "$WORK/sd" --pg-addr 127.0.0.1:0 --http-addr off >"$WORK/sd.out" 2>"$WORK/sd.err" &
SUNDIAL_PID=$!
for _ in $(seq 100); do grep -q "SUNDIAL READY" "$WORK/sd.out" && break; sleep 0.1; done
PORT=$(sed -n 's/.*pg=127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/sd.out")
q() { psql -X -q -A -t -h 127.0.0.1 -p "$PORT" -U bench -d sundial "$@"; }
timed() { # timed LABEL psql-args...: prints LABEL and seconds
  local label="$1"; shift
  local t0 t1
  t0=$(date +%s.%N); q "$@" >/dev/null; t1=$(date +%s.%N)
  python3 -c "print(f'$label: {float($t1) - float($t0):.3f} s')"
}

gen "$ROWS" 0 "$WORK/copy.csv"
q -c "CREATE TABLE plain_cpu ($COLS) WITH (tsdb.hypertable, tsdb.chunk_interval='1 day')"
q -c "CREATE TABLE keyed_cpu ($COLS, PRIMARY KEY (hostname, time)) WITH (tsdb.hypertable, tsdb.chunk_interval='1 day')"
for run in 1 2 3; do
  q -c "TRUNCATE plain_cpu" -c "TRUNCATE keyed_cpu"
  timed "copy $ROWS rows, no key (run $run)" -c "\\copy plain_cpu from '$WORK/copy.csv' with (format csv, header)"
  timed "copy $ROWS rows, PRIMARY KEY (hostname, time) (run $run)" -c "\\copy keyed_cpu from '$WORK/copy.csv' with (format csv, header)"
done
q -c "SELECT 'rows', (SELECT count(*) FROM plain_cpu), (SELECT count(*) FROM keyed_cpu)"

q -c "CREATE TABLE cpu ($COLS) WITH (tsdb.hypertable, tsdb.chunk_interval='1 day')"
PARTS=$(( (UPDATE_ROWS + 999999) / 1000000 ))
for p in $(seq 0 $((PARTS - 1))); do
  gen 1000000 $((p * 1000000)) "$WORK/part.csv"
  q -c "\\copy cpu from '$WORK/part.csv' with (format csv, header)"
done
q -c "SELECT sundial_flush()" -c "SELECT sundial_compact()" >/dev/null
q -c "SELECT 'loaded', count(*), count(DISTINCT hostname) FROM cpu"
for run in 1 2 3; do
  timed "UPDATE 1 row of $UPDATE_ROWS (run $run)" -c "UPDATE cpu SET usage_user = usage_user + 1 WHERE hostname = 'host_7' AND time = '2024-01-02 00:00:00+00'"
done
for run in 1 2 3; do
  timed "UPDATE 1% (one host) of $UPDATE_ROWS (run $run)" -c "UPDATE cpu SET usage_user = usage_user + 1 WHERE hostname = 'host_$run'"
done
q -c "SELECT 'after', count(*), sum(usage_user) FROM cpu"
