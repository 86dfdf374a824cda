#!/usr/bin/env python3
"""Logging TCP proxy for the PostgreSQL wire protocol (debug aid).

Shows exactly which SQL a driver sends (Query / Parse), how it binds
(parameter and result format codes), the row descriptions the server
answers with (type OIDs, formats) and every ErrorResponse.

  python3 pgwire_tap.py --listen 127.0.0.1:6543 --upstream 127.0.0.1:$SUNDIAL_PORT
  SUNDIAL_PORT=6543 python3 asyncpg_test.py      # log goes to stderr / --log

Plain TCP only (answer to SSLRequest is passed through; the tests use
sslmode=disable so the server's 'N' is the only reply).
"""
import argparse
import asyncio
import itertools
import struct
import sys

conn_ids = itertools.count(1)
LOG = sys.stderr


def log(cid, direction, text):
    print(f"[c{cid}] {direction} {text}", file=LOG, flush=True)


def cstr(buf, pos):
    end = buf.index(b"\0", pos)
    return buf[pos:end].decode("utf-8", "replace"), end + 1


def describe_frontend(cid, typ, body):
    t = chr(typ)
    if t == "Q":
        log(cid, ">>", f"Query: {cstr(body, 0)[0]}")
    elif t == "P":
        name, p = cstr(body, 0)
        sql, p = cstr(body, p)
        (n,) = struct.unpack_from("!h", body, p)
        oids = struct.unpack_from(f"!{n}I", body, p + 2) if n else ()
        log(cid, ">>", f"Parse stmt={name!r} param_oids={list(oids)}: {sql}")
    elif t == "B":
        portal, p = cstr(body, 0)
        stmt, p = cstr(body, p)
        (nf,) = struct.unpack_from("!h", body, p)
        pf = struct.unpack_from(f"!{nf}h", body, p + 2)
        p += 2 + 2 * nf
        (np_,) = struct.unpack_from("!h", body, p)
        p += 2
        vals = []
        for _ in range(np_):
            (ln,) = struct.unpack_from("!i", body, p)
            p += 4
            if ln < 0:
                vals.append(None)
            else:
                v = body[p:p + ln]
                p += ln
                vals.append(v)
        (nr,) = struct.unpack_from("!h", body, p)
        rf = struct.unpack_from(f"!{nr}h", body, p + 2)
        shown = []
        for i, v in enumerate(vals):
            fmt = pf[i] if len(pf) > 1 else (pf[0] if pf else 0)
            if v is None:
                shown.append("NULL")
            elif fmt == 0:
                shown.append(repr(v.decode("utf-8", "replace")))
            else:
                shown.append("0x" + v.hex())
        log(cid, ">>", f"Bind stmt={stmt!r} param_formats={list(pf)} params=[{', '.join(shown)}] result_formats={list(rf)}")
    elif t == "D":
        kind = chr(body[0])
        log(cid, ">>", f"Describe {kind} {cstr(body, 1)[0]!r}")
    elif t == "E":
        log(cid, ">>", "Execute")
    elif t == "S":
        log(cid, ">>", "Sync")
    elif t == "C":
        log(cid, ">>", f"Close {chr(body[0])} {cstr(body, 1)[0]!r}")
    elif t == "X":
        log(cid, ">>", "Terminate")
    elif t == "H":
        log(cid, ">>", "Flush")
    else:
        log(cid, ">>", f"msg {t!r} len={len(body)}")


def describe_backend(cid, typ, body, verbose):
    t = chr(typ)
    if t == "E" or t == "N":
        fields = {}
        p = 0
        while body[p] != 0:
            code = chr(body[p])
            val, p = cstr(body, p + 1)
            fields[code] = val
        kind = "ErrorResponse" if t == "E" else "Notice"
        log(cid, "<<", f"{kind} {fields.get('S', '')} {fields.get('C', '')}: {fields.get('M', '')}"
            + (f" DETAIL: {fields['D']}" if "D" in fields else "")
            + (f" HINT: {fields['H']}" if "H" in fields else ""))
    elif t == "T":
        (n,) = struct.unpack_from("!h", body, 0)
        p = 2
        cols = []
        for _ in range(n):
            name, p = cstr(body, p)
            _tbl, _att, oid, _sz, _mod, fmt = struct.unpack_from("!IhIhih", body, p)
            p += 18
            cols.append(f"{name}:{oid}{'/bin' if fmt == 1 else ''}")
        log(cid, "<<", f"RowDescription [{', '.join(cols)}]")
    elif t == "t":
        (n,) = struct.unpack_from("!h", body, 0)
        log(cid, "<<", f"ParameterDescription {list(struct.unpack_from(f'!{n}I', body, 2))}")
    elif t == "C":
        log(cid, "<<", f"CommandComplete {cstr(body, 0)[0]}")
    elif t == "S":
        k, p = cstr(body, 0)
        v, _ = cstr(body, p)
        log(cid, "<<", f"ParameterStatus {k}={v}")
    elif t == "R":
        (code,) = struct.unpack_from("!i", body, 0)
        log(cid, "<<", f"Authentication code={code}")
    elif t == "D":
        if verbose:
            log(cid, "<<", f"DataRow {body.hex()}")
    elif verbose:
        log(cid, "<<", f"msg {t!r} len={len(body)}")


async def pump_frontend(cid, reader, writer):
    startup = True
    while True:
        if startup:
            hdr = await reader.readexactly(4)
            (ln,) = struct.unpack("!i", hdr)
            body = await reader.readexactly(ln - 4)
            writer.write(hdr + body)
            (code,) = struct.unpack_from("!i", body, 0)
            if code == 80877103:
                log(cid, ">>", "SSLRequest")
            elif code == 80877104:
                log(cid, ">>", "GSSENCRequest")
            else:
                parts = body[4:].split(b"\0")
                kv = dict(zip(parts[0::2], parts[1::2]))
                log(cid, ">>", "StartupMessage " + " ".join(
                    f"{k.decode()}={v.decode()}" for k, v in kv.items() if k))
                startup = False
        else:
            hdr = await reader.readexactly(5)
            typ = hdr[0]
            (ln,) = struct.unpack_from("!i", hdr, 1)
            body = await reader.readexactly(ln - 4)
            writer.write(hdr + body)
            try:
                describe_frontend(cid, typ, body)
            except Exception as e:  # never break the proxy on a decode bug
                log(cid, ">>", f"(decode error {e}) type {chr(typ)!r}")
        await writer.drain()


async def pump_backend(cid, reader, writer, pending_ssl, verbose):
    while True:
        if pending_ssl[0]:
            b = await reader.readexactly(1)
            writer.write(b)
            await writer.drain()
            log(cid, "<<", f"SSL reply {b!r}")
            pending_ssl[0] -= 1
            continue
        hdr = await reader.readexactly(5)
        (ln,) = struct.unpack_from("!i", hdr, 1)
        body = await reader.readexactly(ln - 4)
        writer.write(hdr + body)
        await writer.drain()
        try:
            describe_backend(cid, hdr[0], body, verbose)
        except Exception as e:
            log(cid, "<<", f"(decode error {e})")


async def handle(client_r, client_w, upstream, verbose):
    cid = next(conn_ids)
    host, port = upstream
    try:
        server_r, server_w = await asyncio.open_connection(host, port)
    except OSError as e:
        log(cid, "!!", f"upstream connect failed: {e}")
        client_w.close()
        return
    # Peek: if the client opens with SSLRequest the server replies with 1 byte.
    first = await client_r.readexactly(8)
    pending_ssl = [0]
    (code,) = struct.unpack_from("!i", first, 4)
    if code in (80877103, 80877104):
        pending_ssl[0] = 1
    fe_reader = asyncio.StreamReader()
    fe_reader.feed_data(first)

    async def feed():
        try:
            while True:
                data = await client_r.read(65536)
                if not data:
                    fe_reader.feed_eof()
                    return
                fe_reader.feed_data(data)
        except Exception:
            fe_reader.feed_eof()

    tasks = [asyncio.ensure_future(feed()),
             asyncio.ensure_future(pump_frontend(cid, fe_reader, server_w)),
             asyncio.ensure_future(pump_backend(cid, server_r, client_w, pending_ssl, verbose))]
    await asyncio.wait(tasks[1:], return_when=asyncio.FIRST_COMPLETED)
    for t in tasks:
        t.cancel()
    for w in (server_w, client_w):
        try:
            w.close()
        except Exception:
            pass
    log(cid, "--", "connection closed")


async def main():
    global LOG
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", default="127.0.0.1:6543")
    ap.add_argument("--upstream", required=True, help="host:port of the real server")
    ap.add_argument("--log", help="append the log here instead of stderr")
    ap.add_argument("--verbose", action="store_true", help="also log DataRow bytes")
    a = ap.parse_args()
    if a.log:
        LOG = open(a.log, "a", buffering=1)
    lh, lp = a.listen.rsplit(":", 1)
    uh, up = a.upstream.rsplit(":", 1)
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, (uh, int(up)), a.verbose), lh, int(lp))
    print(f"TAP READY listen={lh}:{server.sockets[0].getsockname()[1]} upstream={a.upstream}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
