#!/usr/bin/env python3
"""psycopg 3 driver test: %s parameters bound server-side (extended protocol;
psycopg sends datetime/float/int/bool parameters in binary), text results, a
prepare=True statement, and a binary-results cursor.
Usage: SUNDIAL_HOST=.. SUNDIAL_PORT=.. python3 psycopg_test.py"""
import psycopg

from drvcommon import (DB, HOST, PORT, USER, ROWS, PLAIN_PG, BUCKET, RANGE_START, RANGE_END,
                       Checker, create_table_sql, bucket_sql, raw_sql,
                       check_rows_python, check_buckets_python)

TABLE = "drv_psycopg"

c = Checker("psycopg")

with c.step("connect"):
    conn = psycopg.connect(host=HOST, port=PORT, dbname=DB, user=USER,
                           sslmode="disable", autocommit=True, connect_timeout=10)

with c.step("drop table", f"DROP TABLE IF EXISTS {TABLE}"):
    conn.execute(f"DROP TABLE IF EXISTS {TABLE}")

ddl = create_table_sql(TABLE)
with c.step("create hypertable", ddl):
    conn.execute(ddl)

ins = f"INSERT INTO {TABLE} (time, device, temp, reading, ok, n) VALUES (%s, %s, %s, %s, %s, %s)"
with c.step("insert rows with parameters", ins):
    with conn.cursor() as cur:
        for row in ROWS[:3]:
            cur.execute(ins, row)
            c.eq(f"rowcount after insert {row[0]}", cur.rowcount, 1)
        cur.executemany(ins, ROWS[3:])

q = bucket_sql(TABLE, ("%s", "%s", "%s"))
with c.step("time_bucket query with parameters", q):
    with conn.cursor() as cur:
        cur.execute(q, (BUCKET, RANGE_START, RANGE_END))
        names = [d.name for d in cur.description]
        c.eq("time_bucket column names", names, ["bucket", "device", "avg", "count"])
        check_buckets_python(c, cur.fetchall())

q2 = bucket_sql(TABLE, ("%s", "%s", "%s"))
with c.step("time_bucket query, prepared server-side (prepare=True)", q2):
    with conn.cursor() as cur:
        for _ in range(3):
            cur.execute(q2, ("1 hour", RANGE_START, RANGE_END), prepare=True)
            check_buckets_python(c, cur.fetchall(), "prepared time_bucket")

rq = raw_sql(TABLE)
with c.step("select raw rows", rq):
    with conn.cursor() as cur:
        cur.execute(rq)
        check_rows_python(c, cur.fetchall())

with c.step("select raw rows, binary result format", rq):
    with conn.cursor(binary=True) as cur:
        cur.execute(rq)
        check_rows_python(c, cur.fetchall())

with c.step("ParameterStatus follows SET TimeZone", "SET TimeZone = 'Europe/Berlin'"):
    conn.execute("SET TimeZone = 'Europe/Berlin'")
    c.eq("TimeZone parameter status after SET", conn.info.parameter_status("TimeZone"),
         "Europe/Berlin")
    conn.execute("SET application_name = 'drv'")
    c.eq("application_name parameter status", conn.info.parameter_status("application_name"),
         "drv")
    conn.execute("RESET TimeZone")
    c.eq("TimeZone parameter status after RESET", conn.info.parameter_status("TimeZone"), "UTC")

q = ("SELECT 1 AS one, 3000000000 AS big, count(*) AS c, sum(v) AS s, avg(v) AS a "
     "FROM (SELECT unnest(ARRAY[1, 2, 2]) AS v) t")
with c.step("result column types (int4 literal, int8 count and sum, numeric avg)", q):
    from decimal import Decimal
    with conn.cursor() as cur:
        cur.execute(q)
        c.eq("result type OIDs", [d.type_code for d in cur.description], [23, 20, 20, 20, 1700])
        c.eq("result values", cur.fetchone(), (1, 3000000000, 3, 5, Decimal("1.6666666666666667")))

ctable = TABLE + "_copy"
COPY_TYPES = ["timestamptz", "text", "float8", "numeric", "bool", "int8"]
with c.step("binary COPY both ways (copy.set_types)", ctable):
    conn.execute(f"DROP TABLE IF EXISTS {ctable}")
    conn.execute(create_table_sql(ctable))
    with conn.cursor() as cur:
        with cur.copy(f"COPY {ctable} (time, device, temp, reading, ok, n) "
                      "FROM STDIN (FORMAT BINARY)") as cp:
            cp.set_types(COPY_TYPES)
            for row in ROWS:
                cp.write_row(row)
        c.eq("rows after binary COPY in", cur.rowcount, len(ROWS))
        cur.execute(raw_sql(ctable))
        check_rows_python(c, cur.fetchall())
        with cur.copy(f"COPY ({raw_sql(ctable)}) TO STDOUT (FORMAT BINARY)") as cp:
            cp.set_types(COPY_TYPES)
            out = list(cp.rows())
        check_rows_python(c, out)
        with cur.copy(f"COPY (SELECT n FROM {ctable} WHERE n < -100) TO STDOUT (FORMAT BINARY)") as cp:
            cp.set_types(["int8"])
            c.eq("binary COPY out of no rows", list(cp.rows()), [])

# Parameters the client sends untyped (None, str) or typed (int2 for a small int,
# numeric for Decimal) get PostgreSQL's types: the result OIDs below are
# PostgreSQL 15's.
with c.step("parameter types as PostgreSQL infers them", "SELECT %s"):
    from decimal import Decimal
    cases = [
        ("SELECT %s", (None,), (None,), [25]),
        ("SELECT %s", ("abc",), ("abc",), [25]),
        ("SELECT %s, %s", (None, 2.5), (None, 2.5), [25, 701]),
        ("SELECT %s + 1", (2,), (3,), [23]),
        ("SELECT %s", (Decimal("1.25"),), (Decimal("1.25"),), [1700]),
        ("SELECT coalesce(%s, 5)", (None,), (5,), [23]),
        # The client's types win over those the query suggests (float8 > int).
        ("SELECT %s + 1, %s || 'x', %s > %s", (41, "y", 2.5, 1), (42, "yx", True), [23, 25, 16]),
        ("SELECT %s > 1", (2.5,), (True,), [16]),
    ]
    for q, params, want, oids in cases:
        cur = conn.execute(q, params)
        c.eq(f"{q} {params!r} value", cur.fetchone(), want)
        c.eq(f"{q} {params!r} type OIDs", [d.type_code for d in cur.description], oids)

with c.step("numeric round trip of 76 significant digits", "SELECT %s::numeric"):
    from decimal import Decimal, getcontext
    getcontext().prec = 100
    # numeric without typmod holds 38 integer and 38 fraction digits (README,
    # "numeric"); text and binary parameters are decoded exactly.
    cases = [
        Decimal("12345.678901234567890"),
        Decimal("19999999999999999999999999.01"),
        Decimal("-1234567890123456789012345678.0123456789"),
        Decimal("-" + "9" * 38 + "." + "1234567890" * 3 + "12345678"),
        Decimal("0." + "0" * 37 + "1"),
    ]
    for big in cases:
        c.eq(f"{big} comes back whole (text)",
             conn.execute("SELECT %s::numeric", (big,)).fetchone()[0], big)
        with conn.cursor(binary=True) as cur:
            c.eq(f"{big} comes back whole (binary)",
                 cur.execute("SELECT %s::numeric", (big,)).fetchone()[0], big)
    # Arithmetic keeps the digits: PostgreSQL 15's answers.
    x = Decimal("12345.678901234567890")
    c.eq("numeric product",
         conn.execute("SELECT %s::numeric * %s::numeric", (x, x)).fetchone()[0],
         x * x)
    c.eq("numeric sum and avg of a column",
         conn.execute("SELECT sum(v), avg(v) FROM (VALUES (%s::numeric), (%s::numeric)) t(v)",
                      (x, Decimal("0.000000000000000000001"))).fetchone(),
         (Decimal("12345.678901234567890000001"), Decimal("6172.839450617283945000001")))
    # A value that does not fit is an error, never other digits.
    if not PLAIN_PG:
        try:
            conn.execute("SELECT %s::numeric", (Decimal("1" * 39 + ".5"),))
            c.eq("39 integer digits rejected", "no error", "22003")
        except psycopg.errors.NumericValueOutOfRange:
            pass

# jsonb: psycopg sends Jsonb parameters with OID 3802 and loads jsonb results
# into Python values, in text and in binary format.
with c.step("jsonb parameters and results (text and binary)"):
    from psycopg.types.json import Jsonb
    jt = TABLE + "_json"
    conn.execute(f"DROP TABLE IF EXISTS {jt}")
    conn.execute(f"CREATE TABLE {jt} (id int, meta jsonb, raw json)")
    doc = {"site": "north", "tags": ["x", "y"], "n": 1.5, "ok": True, "none": None}
    conn.execute(f"INSERT INTO {jt} VALUES (%s, %s, %s)", (1, Jsonb(doc), '{"b" : 1}'))
    for binary in (False, True):
        cur = conn.cursor(binary=binary)
        row = cur.execute(f"SELECT meta, meta -> 'tags', meta ->> 'site', raw FROM {jt} WHERE meta @> %s",
                          (Jsonb({"site": "north"}),)).fetchone()
        c.eq(f"jsonb document (binary={binary})", row[0], doc)
        c.eq(f"jsonb member (binary={binary})", row[1], ["x", "y"])
        c.eq(f"->> text (binary={binary})", row[2], "north")
        c.eq(f"json value (binary={binary})", row[3], {"b": 1})
    conn.execute(f"DROP TABLE {jt}")

conn.close()

# psycopg's default: autocommit off, every statement inside a transaction that
# commit() / rollback() end; conn.transaction() nests as savepoints.
with c.step("rollback, commit and savepoints with autocommit off"):
    tx = psycopg.connect(host=HOST, port=PORT, dbname=DB, user=USER,
                         sslmode="disable", connect_timeout=10)
    from datetime import datetime, timezone
    from decimal import Decimal
    far = [(datetime(2030, 1, 1, i, 0, 0, tzinfo=timezone.utc), "tx", 1.0, Decimal("1"), True, i)
           for i in range(3)]
    count_sql = f"SELECT count(*) FROM {TABLE}"
    before = tx.execute(count_sql).fetchone()[0]
    tx.commit()
    tx.execute(ins, far[0])
    c.eq("rows seen inside the transaction", tx.execute(count_sql).fetchone()[0], before + 1)
    tx.rollback()
    c.eq("rows after rollback", tx.execute(count_sql).fetchone()[0], before)
    tx.execute(ins, far[0])
    try:
        with tx.transaction():
            tx.execute(ins, far[1])
            tx.execute("SELECT 1/0")
    except psycopg.errors.DivisionByZero:
        pass
    c.eq("status after the failed savepoint", tx.info.transaction_status.name, "INTRANS")
    tx.commit()
    c.eq("rows after commit (savepoint rolled back)",
         tx.execute(count_sql).fetchone()[0], before + 1)
    tx.execute(f"DELETE FROM {TABLE} WHERE device = %s", ("tx",))
    tx.rollback()
    c.eq("rows after a rolled-back DELETE", tx.execute(count_sql).fetchone()[0], before + 1)
    tx.execute(f"DELETE FROM {TABLE} WHERE device = %s", ("tx",))
    tx.commit()
    c.eq("rows after a committed DELETE", tx.execute(count_sql).fetchone()[0], before)
    tx.close()

# Server-side cursors: DECLARE ... CURSOR, then FETCH FORWARD n per fetchmany().
with c.step("server-side cursor (DECLARE / FETCH)", rq):
    sc = psycopg.connect(host=HOST, port=PORT, dbname=DB, user=USER,
                         sslmode="disable", connect_timeout=10)
    with sc.cursor(name="drv_cur") as cur:
        cur.itersize = 2
        cur.execute(rq)
        first = cur.fetchmany(2)
        c.eq("first page size", len(first), 2)
        rest = cur.fetchall()
        check_rows_python(c, first + rest)
    sc.rollback()
    sc.close()

c.finish()
