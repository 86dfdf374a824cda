#!/usr/bin/env python3
"""Peak memory of queries built to take memory (issue 39, item 1: RSS stays within
memory_limit plus a fixed overhead under any query).

Each statement runs alone on a fresh connection (statement_timeout 120 s) against a
running Sundial; the script prints its outcome (rows or SQLSTATE), its seconds and
the server's peak RSS meanwhile, then the RSS the server settles back to. Start the
server with a small budget to make the bound visible, e.g.
`sundial serve --memory-limit 512MiB ...`.

usage: benches/memory_attack.py PG_PORT SERVER_PID [NAME_FILTER]   (psycopg required)
"""
import sys
import time

import psycopg

from procstat import PeakRss, rss_mib

port, pid = int(sys.argv[1]), int(sys.argv[2])
only = sys.argv[3] if len(sys.argv) > 3 else ""

N = 50_000_000
CASES = [
    ("time series, a year of seconds", "SELECT count(*) FROM generate_series('2024-01-01'::timestamp, '2024-12-31'::timestamp, interval '1 second')"),
    ("EXPLAIN of that series", "EXPLAIN SELECT count(*) FROM generate_series('2024-01-01'::timestamp, '2024-12-31'::timestamp, interval '1 second')"),
    ("EXPLAIN VERBOSE, select-list 1e6", "EXPLAIN VERBOSE SELECT count(*) FROM (SELECT generate_series(1, 1000000) AS g) s"),
    ("select-list series 1e8", "SELECT count(*) FROM (SELECT generate_series(1, 100000000) AS g) s"),
    ("sort 5e7 rows", f"SELECT g FROM generate_series(1, {N}) g ORDER BY g % 1000, g DESC LIMIT 1 OFFSET 40000000"),
    ("group by 5e7 keys", f"SELECT count(*) FROM (SELECT g, count(*) FROM generate_series(1, {N}) g GROUP BY g) s"),
    ("count distinct 5e7", f"SELECT count(DISTINCT g) FROM generate_series(1, {N}) g"),
    ("hash join 2e7 x 2e7", "SELECT count(*) FROM generate_series(1, 20000000) a JOIN generate_series(1, 20000000) b ON a = b"),
    ("window over 3e7", "SELECT max(r) FROM (SELECT row_number() OVER (ORDER BY g DESC) AS r FROM generate_series(1, 30000000) g) s"),
    ("array_agg 5e7", f"SELECT cardinality(array_agg(g)) FROM generate_series(1, {N}) g"),
    ("string_agg 1e7 x 100 B", "SELECT length(string_agg(repeat('x', 100), ',')) FROM generate_series(1, 10000000) g"),
    ("recursive CTE 5e6", "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 5000000) SELECT count(*) FROM r"),
    ("wide rows 2e6 x 1 KB returned", "SELECT repeat('y', 1000) FROM generate_series(1, 2000000)"),
]


def run(name, sql):
    c = psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=postgres", autocommit=True)
    c.execute("SET statement_timeout = '120s'")
    with PeakRss(pid) as peak:
        t = time.time()
        try:
            cur = c.execute(sql)
            n = 0
            while cur.fetchmany(10_000):
                n += 1
            outcome = "answered"
        except psycopg.Error as e:
            outcome = e.sqlstate or "error"
        secs = time.time() - t
    c.close()
    time.sleep(1)
    print(f"{name:34} {outcome:9} {secs:7.2f} s  peak {peak.mib:7.0f} MiB  after {rss_mib(pid):6.0f} MiB", flush=True)


print(f"server RSS at start {rss_mib(pid):.0f} MiB")
for name, sql in CASES:
    if only in name:
        try:
            run(name, sql)
        except psycopg.OperationalError as e:
            print(f"{name:34} connection lost: {e}".splitlines()[0], flush=True)
            break
