#!/usr/bin/env bash
# Gap filling cost: a table of 20 devices with a reading every 37 s over two days
# (93k rows); time_bucket_gapfill with locf and interpolate per device at 1-minute
# (57,600 output rows) and 1-second (3,456,000 output rows) buckets. Reports the
# median of 5 runs of each query, counted on the server (SELECT count(*) over the
# gapfill query) and sent to psql in full.
# Usage: BIN=path/to/release/sundial benches/gapfill.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${BIN:-${CARGO_TARGET_DIR:-target}/release/sundial}"
WORK="$(mktemp -d)"
trap 'kill $SUNDIAL_PID 2>/dev/null || true; wait $SUNDIAL_PID 2>/dev/null || true; rm -rf "$WORK"' EXIT
"$BIN" serve --data-dir "$WORK/sd" --pg-addr 127.0.0.1:0 --http-addr off >"$WORK/sd.out" 2>"$WORK/sd.err" &
SUNDIAL_PID=$!
for _ in $(seq 100); do grep -q "SUNDIAL READY" "$WORK/sd.out" && break; sleep 0.1; done
PORT=$(sed -n 's/.*pg=127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/sd.out")
q() { psql -X -q -A -t -h 127.0.0.1 -p "$PORT" -U bench -d sundial "$@"; }
q -c "CREATE TABLE r (time timestamptz NOT NULL, device text, v double precision) WITH (tsdb.hypertable, tsdb.chunk_interval='1 day')"
q -c "INSERT INTO r SELECT t, 'dev_' || d, d + extract(epoch FROM t)::bigint % 1000 FROM generate_series('2024-01-01'::timestamptz, '2024-01-03'::timestamptz, '37 seconds'::interval) t, generate_series(1, 20) d" >/dev/null
q -c "SELECT sundial_flush()" >/dev/null
python3 - "$PORT" <<'PY'
import subprocess, sys, time
port = sys.argv[1]
def run(sql, out):
    t = time.perf_counter()
    r = subprocess.run(["psql", "-X", "-q", "-A", "-t", "-h", "127.0.0.1", "-p", port, "-U", "bench",
                        "-d", "sundial", "-v", "ON_ERROR_STOP=1", "-c", sql],
                       stdout=out, stderr=subprocess.PIPE)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.decode().strip())
    return time.perf_counter() - t
for width in ["1 minute", "1 second"]:
    g = (f"SELECT time_bucket_gapfill('{width}', time) b, device, locf(avg(v)) l, interpolate(max(v)) i "
         "FROM r WHERE time >= '2024-01-01' AND time < '2024-01-03' GROUP BY 1, 2")
    for label, sql in [("counted", f"SELECT count(*), count(l), count(i) FROM ({g}) s"),
                       ("sent", g + " ORDER BY 2, 1")]:
        with open("/dev/null", "w") as null:
            try:
                run(sql, null)
            except RuntimeError as e:
                print(f"{width:>9} buckets, {label:>7}: fails: {e}")
                continue
            times = sorted(run(sql, null) for _ in range(5))
        print(f"{width:>9} buckets, {label:>7}: median {times[2] * 1000:.0f} ms")
PY
