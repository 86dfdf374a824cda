"""Server CPU and latency per query for TSBS-shaped queries sent with new literals
each time (issue 13's fixed cost and narrow scans), over one psycopg connection.

usage: python3 benches/query_cpu.py PID PORT KIND N [SQL to run first ...]
  PID   the server's process id (its CPU time is read from /proc/PID/stat)
  KIND  one  -- SELECT 1 (round trip, nothing planned)
        empty -- max(usage_user) over a window that matches no chunk
        sg    -- TSBS single-groupby-1-1-1 (one host, one hour, 1-minute buckets)
        wide  -- TSBS high-cpu-all's shape over 2 hours (all columns of the rows with
                 usage_user > 90: about 2,600 rows x 12 columns to encode)
  SIMPLE=1 in the environment sends the simple protocol (as TSBS does)."""
import os
import random
import sys
import time

import psycopg

pid, port, kind, n = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
first = sys.argv[5:]


def cpu_ms():
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000.0 / os.sysconf("SC_CLK_TCK")


QUERIES = {
    "one": lambda r: "SELECT 1",
    "empty": lambda r: (
        "SELECT max(usage_user) FROM cpu WHERE "
        f"time >= '2017-01-01 {r.randint(10, 20)}:00:00+00' "
        f"AND time < '2017-01-01 {r.randint(21, 23)}:30:00+00'"
    ),
    "sg": lambda r: (
        "SELECT time_bucket('1 minute', time) AS minute, max(usage_user) AS max_usage_user "
        f"FROM cpu WHERE hostname = 'host_{r.randint(0, 99)}' "
        f"AND time >= '2016-01-01 {r.randint(10, 20)}:00:00+00' "
        f"AND time < '2016-01-01 {r.randint(10, 20)}:59:00+00' "
        "GROUP BY minute ORDER BY minute"
    ),
    "wide": lambda r: (
        "SELECT * FROM cpu WHERE usage_user > 90.0 "
        f"AND time >= '2016-01-01 {r.randint(10, 20)}:00:00+00' "
        f"AND time < '2016-01-01 {r.randint(10, 20)}:00:00+00'::timestamptz + interval '2 hours'"
    ),
}
query = QUERIES[kind]
# QUERY_USER (and PGPASSWORD, read by libpq) pick the role; postgres under trust.
user = os.environ.get("QUERY_USER", "postgres")
conn = psycopg.connect(f"host=127.0.0.1 port={port} user={user} dbname=benchmark", autocommit=True)
cur = psycopg.ClientCursor(conn) if os.environ.get("SIMPLE") else conn.cursor()
for sql in first:
    cur.execute(sql)
rng = random.Random(1)
for _ in range(50):
    cur.execute(query(rng))
    cur.fetchall()
c0, t0 = cpu_ms(), time.perf_counter()
for _ in range(n):
    cur.execute(query(rng))
    cur.fetchall()
c1, t1 = cpu_ms(), time.perf_counter()
print(f"{kind}: server CPU {(c1 - c0) / n:.3f} ms/query, latency {(t1 - t0) * 1000 / n:.3f} ms/query")
