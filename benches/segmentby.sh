#!/usr/bin/env bash
# What compress_segmentby buys: a TSBS cpu-like hypertable (ROWS rows, 100 hosts,
# 10 s apart, 1-day chunks) loaded and compacted with files in time order, then
# ALTER TABLE … SET (timescaledb.compress_segmentby = 'hostname') and compress_chunk
# on every chunk. Reports bytes on disk and a one-host aggregate's latency (median
# of 7) before and after.
# Usage: BIN=path/to/release/sundial benches/segmentby.sh [rows]
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS="${1:-2000000}"
BIN="${BIN:-${CARGO_TARGET_DIR:-target}/release/sundial}"
WORK="$(mktemp -d)"
trap 'kill $SUNDIAL_PID 2>/dev/null || true; wait $SUNDIAL_PID 2>/dev/null || true; rm -rf "$WORK"' EXIT
python3 - "$ROWS" "$WORK/data.csv" <<'PY'
import random, sys, datetime
rows, path = int(sys.argv[1]), sys.argv[2]
random.seed(1)
start = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
with open(path, "w") as f:
    f.write("time,hostname,usage_user,usage_system,usage_idle,usage_nice,usage_iowait,usage_irq,usage_softirq,usage_steal\n")
    for i in range(rows):
        t = start + datetime.timedelta(seconds=i // 100 * 10)
        vals = ",".join(str(random.randint(0, 100)) for _ in range(8))
        f.write("%s,host_%d,%s\n" % (t.strftime("%Y-%m-%d %H:%M:%S+00"), i % 100, vals))
PY
"$BIN" serve --data-dir "$WORK/sd" --pg-addr 127.0.0.1:0 --http-addr off >"$WORK/sd.out" 2>"$WORK/sd.err" &
SUNDIAL_PID=$!
for _ in $(seq 100); do grep -q "SUNDIAL READY" "$WORK/sd.out" && break; sleep 0.1; done
PORT=$(sed -n 's/.*pg=127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/sd.out")
q() { psql -X -q -A -t -h 127.0.0.1 -p "$PORT" -U bench -d sundial "$@"; }
q -c "CREATE TABLE cpu (time timestamptz NOT NULL, hostname text, usage_user bigint, usage_system bigint, usage_idle bigint, usage_nice bigint, usage_iowait bigint, usage_irq bigint, usage_softirq bigint, usage_steal bigint) WITH (tsdb.hypertable, tsdb.chunk_interval='1 day')"
# Ten COPYs: ten files a chunk before compaction, as a steady load leaves them.
tail -n +2 "$WORK/data.csv" > "$WORK/body.csv"
split -n l/10 -d "$WORK/body.csv" "$WORK/part."
for p in "$WORK"/part.*; do
  q -c "\\copy cpu from '$p' with (format csv)"
  q -c "SELECT sundial_flush()" >/dev/null
done
measure() {
  local label="$1"
  local bytes
  bytes=$(q -c "SELECT hypertable_size('cpu')")
  python3 - "$label" "$bytes" "$PORT" <<'PY'
import subprocess, sys, time
label, size, port = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sql = "SELECT avg(usage_user), max(usage_system) FROM cpu WHERE hostname = 'host_7'"
def run():
    t = time.perf_counter()
    subprocess.run(["psql", "-X", "-q", "-A", "-t", "-h", "127.0.0.1", "-p", port, "-U", "bench",
                    "-d", "sundial", "-c", sql], check=True, capture_output=True)
    return time.perf_counter() - t
run()
times = sorted(run() for _ in range(7))
print(f"{label}: {size:,} bytes on disk; one-host aggregate median {times[3] * 1000:.1f} ms (psql round trip)")
PY
}
q -c "SELECT sundial_compact()" >/dev/null
measure "time order (compacted)"
q -c "ALTER TABLE cpu SET (timescaledb.compress, timescaledb.compress_segmentby = 'hostname')"
q -c "SELECT compress_chunk(c) FROM show_chunks('cpu') c" >/dev/null
measure "segmentby hostname (compress_chunk)"
q -c "SELECT 'rows', count(*), sum(usage_user) FROM cpu"
