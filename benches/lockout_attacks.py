#!/usr/bin/env python3
"""Lockout attacks against a running Sundial (issue 39, item 4), bounded to about 60 s.

1. 150 sockets that never send a Postgres startup packet, then a real login; after
   6 s, how many of the silent sockets the server has closed.
2. 1,000 HTTP connections that send request headers a byte per second (slowloris),
   then how long until a line-protocol write is accepted (tried once a second, 20 s).
3. 1,000 HTTP connections that send nothing, then how long until a write is accepted.
4. 8 line-protocol requests that declare 32 MiB bodies (together the whole default
   256 MiB body budget) and send 1 KB a second, then how long until a write is
   accepted.

usage: benches/lockout_attacks.py PG_PORT HTTP_PORT   (psycopg required)
"""
import socket
import sys
import threading
import time
import urllib.request

import psycopg

pg_port, http_port = int(sys.argv[1]), int(sys.argv[2])

silent = [socket.create_connection(("127.0.0.1", pg_port)) for _ in range(150)]
time.sleep(0.5)
t = time.time()
try:
    c = psycopg.connect(f"host=127.0.0.1 port={pg_port} user=postgres dbname=postgres", connect_timeout=10)
    c.execute("SELECT 1").fetchone()
    print(f"postgres: login beside 150 silent sockets in {time.time() - t:.3f} s")
    c.close()
except Exception as e:  # noqa: BLE001 - the failure is the measurement
    print("postgres: login failed:", str(e).strip()[:100])
time.sleep(6)
closed = 0
for s in silent:
    s.settimeout(0.01)
    try:
        if s.recv(1) == b"":
            closed += 1
    except OSError:
        pass
print(f"postgres: silent sockets closed by the server after 6 s: {closed} of {len(silent)}")
for s in silent:
    s.close()



def first_accepted_write(db, every, each=lambda: None):
    """Seconds until a line-protocol write to `db` gets 204, tried every `every`
    seconds for 20 s (`each` runs before every try); None when none was accepted."""
    t0 = time.time()
    while time.time() - t0 < 20:
        each()
        try:
            req = urllib.request.Request(f"http://127.0.0.1:{http_port}/write?db={db}",
                                         data=b"m v=1 1", method="POST")
            if urllib.request.urlopen(req, timeout=2).status == 204:
                return time.time() - t0
        except Exception:  # noqa: BLE001 - 503 while the slots are held
            pass
        time.sleep(every)
    return None


def when(seconds):
    return f"{seconds:.1f} s" if seconds is not None else "never (20 s)"


def connections(n, first=b""):
    """Up to `n` HTTP connections, each having sent `first`."""
    out = []
    for _ in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", http_port), timeout=2)
            s.sendall(first)
            out.append(s)
        except OSError:
            pass
    return out


def send_each(socks, data):
    for s in socks:
        try:
            s.send(data)
        except OSError:
            pass


def close_all(socks):
    for s in socks:
        s.close()
    time.sleep(1)


slow = connections(1000, b"POST /write?db=slowloris HTTP/1.1\r\nHost: x\r\n")


def trickle():
    send_each(slow, b"a")


print(f"http: {len(slow)} slowloris connections; first accepted write after "
      f"{when(first_accepted_write('slowloris', 1, trickle))}")
close_all(slow)

# 3. 1,000 HTTP connections that never send anything (they would stay for
#    lp_idle_timeout, 300 s), then how long until a write is accepted.
quiet = connections(1000)
time.sleep(0.5)
print(f"http: {len(quiet)} silent connections; first accepted write after "
      f"{when(first_accepted_write('quiet', 0.25))}")
close_all(quiet)

# 4. 8 requests declaring 32 MiB bodies, each sent at 1 KB a second: above the
#    500 bytes a second minimum, far below the pace that brings 32 MiB in within
#    the 60 s body deadline.
big = connections(8, b"POST /write?db=bodies HTTP/1.1\r\nHost: x\r\nContent-Length: 33554432\r\n\r\n")
stop = threading.Event()


def feed():
    """1 KB a second to each body, whatever the writer below is doing."""
    while not stop.wait(0.5):
        send_each(big, b"m v=1 1\n" * 64)


feeder = threading.Thread(target=feed)
feeder.start()
time.sleep(0.5)
print(f"http: 8 slow 32 MiB bodies; first accepted write after "
      f"{when(first_accepted_write('bodies', 0.5))}")
stop.set()
feeder.join()
close_all(big)
