#!/usr/bin/env python3
"""Line-protocol acknowledgement latency, with and without runaway queries.

Posts batches of line protocol one after another to a running server for a fixed
time and reports the p50 / p99 / max time to the 204. With --runaway N, N psql
clients run a CPU-bound query (a 10^12-row cross join count) during the run, so the
figure shows whether queries hold up write acknowledgements.

    python3 benches/lp_ack_latency.py --http 127.0.0.1:8086 --pg-port 5432 \
        --seconds 20 --batch 1000 [--runaway 2]
"""

import argparse
import statistics
import subprocess
import time
import urllib.request


def batch_body(start_ns, n, host):
    lines = []
    for i in range(n):
        lines.append(
            f"cpu,host=h{host},region=eu usage_user={i % 100}.5,usage_idle={(i * 7) % 100}.25 "
            f"{start_ns + i * 1_000_000_000}"
        )
    return ("\n".join(lines) + "\n").encode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--http", default="127.0.0.1:8086")
    ap.add_argument("--pg-host", default="127.0.0.1")
    ap.add_argument("--pg-port", default="5432")
    ap.add_argument("--db", default="latency")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--runaway", type=int, default=0)
    args = ap.parse_args()

    runaway = []
    query = (
        "SET statement_timeout = 0; SELECT count(*) FROM generate_series(1, 1000000) a, "
        "generate_series(1, 1000000) b"
    )
    for _ in range(args.runaway):
        runaway.append(
            subprocess.Popen(
                ["psql", "-h", args.pg_host, "-p", str(args.pg_port), "-d", "sundial",
                 "-U", "bench", "-c", query],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    if runaway:
        time.sleep(1.0)  # let the queries get going

    url = f"http://{args.http}/write?db={args.db}&precision=ns"
    lat = []
    t_end = time.time() + args.seconds
    ts = 1_700_000_000_000_000_000
    k = 0
    while time.time() < t_end:
        body = batch_body(ts, args.batch, k % 50)
        ts += args.batch * 1_000_000_000
        k += 1
        req = urllib.request.Request(url, data=body, method="POST")
        t0 = time.perf_counter()
        with urllib.request.urlopen(req) as r:
            if r.status != 204:
                raise SystemExit(f"unexpected status {r.status}")
        lat.append((time.perf_counter() - t0) * 1000)
    for p in runaway:
        p.kill()
        p.wait()
    lat.sort()
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    print(
        f"runaway={args.runaway} batches={len(lat)} rows/batch={args.batch} "
        f"p50={statistics.median(lat):.2f}ms p99={p99:.2f}ms max={lat[-1]:.2f}ms"
    )


if __name__ == "__main__":
    main()
