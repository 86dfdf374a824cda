#!/usr/bin/env python3
"""What a statement goes on computing after it ended (issue 39, items 1 and 2).

For each hostile statement, run with statement_timeout 1s against a running Sundial:
the time until the client gets its error, then the server's CPU seconds
(/proc/PID/stat) over the 3 s after that (0 when the work stopped with the
statement) and its peak RSS meanwhile.

usage: benches/canceled_work.py PG_PORT SERVER_PID   (psycopg required)
"""
import sys
import time

import psycopg

from procstat import PeakRss, cpu_seconds

port, pid = int(sys.argv[1]), int(sys.argv[2])


CASES = [
    ("bound-parameter series 1e8", "SELECT count(*) FROM generate_series(1, %s::bigint)", (100_000_000,)),
    ("491-term expression", "SELECT " + "+".join(["7"] * 491), None),
    ("cross join 1e12 rows", "SELECT count(*) FROM generate_series(1, 1000000) a, generate_series(1, 1000000) b", None),
]

for name, sql, params in CASES:
    c = psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=postgres", autocommit=True)
    c.execute("SET statement_timeout = '1s'")
    with PeakRss(pid) as peak:
        t = time.time()
        try:
            c.execute(sql, params)
            outcome = "answered"
        except psycopg.Error as e:
            outcome = e.sqlstate or "error"
        ended = time.time() - t
        c0 = cpu_seconds(pid)
        time.sleep(3)
        after = cpu_seconds(pid) - c0
    print(f"{name}: {outcome} after {ended:.2f} s; CPU in the 3 s after: {after:.2f} s; peak RSS {peak.mib:.0f} MiB")
    c.close()
    time.sleep(1)
