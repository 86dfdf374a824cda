#!/usr/bin/env python3
"""asyncpg driver test: named prepared statements, binary parameters and
binary results throughout.  Usage: SUNDIAL_HOST=.. SUNDIAL_PORT=.. python3 asyncpg_test.py"""
import asyncio
import os

import asyncpg

from drvcommon import (DB, HOST, PORT, USER, ROWS, BUCKET, RANGE_START, RANGE_END,
                       Checker, create_table_sql, bucket_sql, raw_sql,
                       check_rows_python, check_buckets_python)

TABLE = "drv_asyncpg"
c = Checker("asyncpg")


async def main():
    with c.step("connect"):
        conn = await asyncpg.connect(host=HOST, port=PORT, database=DB, user=USER,
                                     ssl=False, timeout=10)
    if os.environ.get("DRV_DEBUG"):
        conn.add_query_logger(lambda r: print(f"  asyncpg query: {r.query} args={r.args}"
                                              f" exc={r.exception!r}"))

    with c.step("drop table", f"DROP TABLE IF EXISTS {TABLE}"):
        await conn.execute(f"DROP TABLE IF EXISTS {TABLE}")

    ddl = create_table_sql(TABLE)
    with c.step("create hypertable", ddl):
        await conn.execute(ddl)

    ins = f"INSERT INTO {TABLE} (time, device, temp, reading, ok, n) VALUES ($1, $2, $3, $4, $5, $6)"
    with c.step("insert rows with parameters (conn.execute)", ins):
        for row in ROWS[:2]:
            status = await conn.execute(ins, *row)
            c.eq("insert status", status, "INSERT 0 1")
    with c.step("insert rows with parameters (executemany)", ins):
        await conn.executemany(ins, ROWS[2:])

    q = bucket_sql(TABLE, ("$1", "$2", "$3"))
    with c.step("prepare time_bucket query", q):
        stmt = await conn.prepare(q)
        c.eq("prepared param types", [t.name for t in stmt.get_parameters()],
             ["interval", "timestamptz", "timestamptz"])
        c.eq("prepared column names", [a.name for a in stmt.get_attributes()],
             ["bucket", "device", "avg", "count"])
        c.eq("prepared column types", [a.type.name for a in stmt.get_attributes()],
             ["timestamptz", "text", "float8", "int8"])
    with c.step("execute prepared time_bucket query 3 times", q):
        for i in range(3):
            check_buckets_python(c, await stmt.fetch(BUCKET, RANGE_START, RANGE_END),
                                 f"time_bucket exec {i}")

    with c.step("conn.fetch time_bucket query (implicit prepare)", q):
        check_buckets_python(c, await conn.fetch(q, BUCKET, RANGE_START, RANGE_END))

    rq = raw_sql(TABLE)
    with c.step("select raw rows", rq):
        rows = await conn.fetch(rq)
        check_rows_python(c, rows)
        if rows:
            c.eq("record keys", list(rows[0].keys()),
                 ["time", "device", "temp", "reading", "ok", "n"])

    fq = f"SELECT reading FROM {TABLE} WHERE device = $1 AND n = $2"
    with c.step("fetchval with text + int8 parameters", fq):
        v = await conn.fetchval(fq, "a", 9007199254740993)
        c.eq("fetchval reading", v, ROWS[1][3])

    ctable = TABLE + "_copy"
    with c.step("binary COPY in (copy_records_to_table)", ctable):
        await conn.execute(f"DROP TABLE IF EXISTS {ctable}")
        await conn.execute(create_table_sql(ctable))
        status = await conn.copy_records_to_table(
            ctable, records=ROWS, columns=["time", "device", "temp", "reading", "ok", "n"])
        c.eq("copy status", status, f"COPY {len(ROWS)}")
        check_rows_python(c, await conn.fetch(raw_sql(ctable)))

    nq = "SELECT $1::numeric, $1::numeric * 2"
    with c.step("numeric round trip (binary parameters and results)", nq):
        from decimal import Decimal, getcontext
        getcontext().prec = 100
        # asyncpg sends and reads numeric in binary; every digit must come back.
        for v in [Decimal("19999999999999999999999999.01"),
                  Decimal("12345.678901234567890"),
                  Decimal("-" + "9" * 37 + "." + "1" * 38)]:
            got = await conn.fetchrow(nq, v)
            c.eq(f"{v} comes back whole", got[0], v)
            c.eq(f"{v} doubled", got[1], v * 2)

    jq = "SELECT $1::jsonb, $1::jsonb -> 'a', $2::jsonb @> $1::jsonb"
    with c.step("jsonb in binary (parameters and results)", jq):
        got = await conn.fetchrow(jq, '{"b": [1, 2], "a": {"x": 1.50}}', '{"a": {"x": 1.5, "y": 2}, "b": [2, 1, 3]}')
        c.eq("jsonb normalized", got[0], '{"a": {"x": 1.50}, "b": [1, 2]}')
        c.eq("jsonb member", got[1], '{"x": 1.50}')
        c.eq("containment", got[2], True)

    await conn.close()


asyncio.run(main())
c.finish()
