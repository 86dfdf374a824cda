#!/usr/bin/env python3
"""Four Postgres connections that each declare a 1 GiB Query message and send up to
256 MiB of it (issue 39, item 1), against a running Sundial: how much each got to
send before the server refused or stalled it, and the server's peak RSS meanwhile.
Bounded to about 30 s.

usage: benches/message_attack.py PG_PORT SERVER_PID
"""
import socket
import struct
import sys
import threading

from procstat import PeakRss

port, pid = int(sys.argv[1]), int(sys.argv[2])


def login():
    s = socket.create_connection(("127.0.0.1", port))
    body = struct.pack("!I", 196608) + b"user\0postgres\0database\0postgres\0\0"
    s.sendall(struct.pack("!I", len(body) + 4) + body)
    buf = b""
    while b"Z\0\0\0\x05" not in buf:
        more = s.recv(65536)
        if not more:
            raise RuntimeError("login failed")
        buf += more
    return s


sent = [0] * 4
outcome = ["sent all"] * 4


def attack(i):
    s = login()
    s.settimeout(20)
    s.sendall(b"Q" + struct.pack("!I", (1 << 30) - 16))  # just under pgwire's own limit
    chunk = b" " * (1 << 20)
    try:
        for _ in range(256):
            s.sendall(chunk)
            sent[i] += 1
    except OSError as e:
        outcome[i] = f"stopped ({type(e).__name__})"
    s.close()


threads = [threading.Thread(target=attack, args=(i,)) for i in range(4)]
with PeakRss(pid) as peak:
    for t in threads:
        t.start()
    for t in threads:
        t.join()
for i in range(4):
    print(f"connection {i}: {sent[i]} MiB sent, {outcome[i]}")
print(f"server peak RSS: {peak.mib:.0f} MiB")
