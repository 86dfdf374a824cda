#!/usr/bin/env python3
"""Authentication with psycopg 3 (libpq) and asyncpg: SCRAM-SHA-256 over TLS with
the certificate verified (sslmode=verify-full / an SSLContext with the test CA),
SCRAM over plain TCP, and a wrong password refused with 28P01.
Usage: SUNDIAL_HOST=.. SUNDIAL_PORT=.. SUNDIAL_PASSWORD=.. SUNDIAL_CA=ca.pem
python3 auth_test.py"""
import asyncio
import os
import ssl

import asyncpg
import psycopg

from drvcommon import DB, HOST, PORT, USER, Checker

PASSWORD = os.environ["SUNDIAL_PASSWORD"]
CA = os.environ["SUNDIAL_CA"]

c = Checker("auth (psycopg, asyncpg)")

with c.step("psycopg: SCRAM over TLS, verify-full"):
    with psycopg.connect(host=HOST, port=PORT, dbname=DB, user=USER, password=PASSWORD,
                         sslmode="verify-full", sslrootcert=CA, connect_timeout=10) as conn:
        c.eq("psycopg ssl in use", conn.pgconn.ssl_in_use, True)
        c.eq("psycopg current_user", conn.execute("SELECT current_user").fetchone()[0], USER)

with c.step("psycopg: SCRAM without TLS"):
    with psycopg.connect(host=HOST, port=PORT, dbname=DB, user=USER, password=PASSWORD,
                         sslmode="disable", connect_timeout=10) as conn:
        c.eq("psycopg plain ssl in use", conn.pgconn.ssl_in_use, False)
        c.eq("psycopg plain select", conn.execute("SELECT 1").fetchone()[0], 1)

with c.step("psycopg: wrong password"):
    try:
        psycopg.connect(host=HOST, port=PORT, dbname=DB, user=USER, password="wrong",
                        sslmode="require", connect_timeout=10).close()
        c.check("psycopg wrong password refused", False, "connected")
    except psycopg.OperationalError as e:
        c.check("psycopg wrong password refused",
                'password authentication failed for user "sundial"' in str(e), str(e))


async def with_asyncpg():
    ctx = ssl.create_default_context(cafile=CA)
    with c.step("asyncpg: SCRAM over TLS with the CA"):
        conn = await asyncpg.connect(host=HOST, port=PORT, database=DB, user=USER,
                                     password=PASSWORD, ssl=ctx, timeout=10)
        c.eq("asyncpg current_user", await conn.fetchval("SELECT current_user"), USER)
        await conn.close()
    with c.step("asyncpg: SCRAM without TLS"):
        conn = await asyncpg.connect(host=HOST, port=PORT, database=DB, user=USER,
                                     password=PASSWORD, ssl=False, timeout=10)
        c.eq("asyncpg plain select", await conn.fetchval("SELECT 2"), 2)
        await conn.close()
    with c.step("asyncpg: wrong password"):
        try:
            conn = await asyncpg.connect(host=HOST, port=PORT, database=DB, user=USER,
                                         password="wrong", ssl=ctx, timeout=10)
            await conn.close()
            c.check("asyncpg wrong password refused", False, "connected")
        except asyncpg.InvalidPasswordError as e:
            c.eq("asyncpg sqlstate", e.sqlstate, "28P01")


asyncio.run(with_asyncpg())
c.finish()
