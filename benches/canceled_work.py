#!/usr/bin/env python3
"""What a statement goes on computing after it ended (issue 39, items 1 and 2).

For each hostile statement, run with statement_timeout 1s against a running Sundial:
the time until the client gets its error, then the server's CPU seconds
(/proc/PID/stat) over the 3 s after that (0 when the work stopped with the
statement) and its peak RSS meanwhile.

usage: benches/canceled_work.py PG_PORT SERVER_PID   (psycopg required)
"""
import os
import sys
import threading
import time

import psycopg

port, pid = int(sys.argv[1]), int(sys.argv[2])
tick = os.sysconf("SC_CLK_TCK")


def cpu():
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / tick


def rss_mib():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


CASES = [
    ("bound-parameter series 1e8", "SELECT count(*) FROM generate_series(1, %s::bigint)", (100_000_000,)),
    ("491-term expression", "SELECT " + "+".join(["7"] * 491), None),
    ("cross join 1e12 rows", "SELECT count(*) FROM generate_series(1, 1000000) a, generate_series(1, 1000000) b", None),
]

for name, sql, params in CASES:
    c = psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=postgres", autocommit=True)
    c.execute("SET statement_timeout = '1s'")
    peak = [rss_mib()]
    done = threading.Event()

    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], rss_mib())
            time.sleep(0.05)

    w = threading.Thread(target=watch)
    w.start()
    t = time.time()
    try:
        c.execute(sql, params)
        outcome = "answered"
    except psycopg.Error as e:
        outcome = e.sqlstate or "error"
    ended = time.time() - t
    c0 = cpu()
    time.sleep(3)
    after = cpu() - c0
    done.set()
    w.join()
    print(f"{name}: {outcome} after {ended:.2f} s; CPU in the 3 s after: {after:.2f} s; peak RSS {peak[0]:.0f} MiB")
    c.close()
    time.sleep(1)
