#!/usr/bin/env python3
"""SQLAlchemy 2 (postgresql+psycopg dialect) + pandas.read_sql driver test.
Usage: SUNDIAL_HOST=.. SUNDIAL_PORT=.. python3 sqlalchemy_pandas_test.py"""
import os
from decimal import Decimal

import pandas as pd
from pandas.api.types import DatetimeTZDtype
from sqlalchemy import create_engine, text

from drvcommon import (DB, HOST, PORT, USER, ROWS, BUCKET, PLAIN_PG, RANGE_START, RANGE_END,
                       EXPECTED_BUCKETS, SORTED_ROWS, Checker, create_table_sql,
                       bucket_sql, raw_sql, check_rows_python, check_buckets_python)

TABLE = "drv_sqlalchemy"
c = Checker("sqlalchemy+pandas")

url = f"postgresql+psycopg://{USER}@{HOST}:{PORT}/{DB}?sslmode=disable"
with c.step("create engine and connect (dialect initialisation)"):
    engine = create_engine(url, echo=bool(os.environ.get("DRV_DEBUG")))
    conn = engine.connect()

with c.step("drop + create hypertable", create_table_sql(TABLE)):
    with conn.begin():
        conn.execute(text(f"DROP TABLE IF EXISTS {TABLE}"))
        conn.execute(text(create_table_sql(TABLE)))

ins = text(f"INSERT INTO {TABLE} (time, device, temp, reading, ok, n) "
           "VALUES (:time, :device, :temp, :reading, :ok, :n)")
keys = ("time", "device", "temp", "reading", "ok", "n")
with c.step("insert rows with :name parameters", str(ins)):
    with conn.begin():
        r = conn.execute(ins, dict(zip(keys, ROWS[0])))
        c.eq("single insert rowcount", r.rowcount, 1)
        conn.execute(ins, [dict(zip(keys, row)) for row in ROWS[1:]])  # executemany

q = text(bucket_sql(TABLE, (":bucket", ":start", ":end"), cast=True))
params = {"bucket": BUCKET, "start": RANGE_START, "end": RANGE_END}
with c.step("time_bucket query via Connection.execute", str(q)):
    res = conn.execute(q, params)
    c.eq("result keys", list(res.keys()), ["bucket", "device", "avg", "count"])
    check_buckets_python(c, res.fetchall())

with c.step("raw rows via Connection.execute", raw_sql(TABLE)):
    check_rows_python(c, conn.execute(text(raw_sql(TABLE))).fetchall())
conn.close()

# ---- pandas ---------------------------------------------------------------
with c.step("pandas.read_sql time_bucket query", str(q)):
    df = pd.read_sql(q, engine, params=params)
    c.eq("df columns", list(df.columns), ["bucket", "device", "avg", "count"])
    c.eq("df length", len(df), len(EXPECTED_BUCKETS))
    c.check("bucket dtype is tz-aware datetime64", isinstance(df["bucket"].dtype, DatetimeTZDtype),
            f"got {df['bucket'].dtype}")
    c.check("avg dtype is float64", df["avg"].dtype == "float64", f"got {df['avg'].dtype}")
    c.check("count dtype is int64", df["count"].dtype == "int64", f"got {df['count'].dtype}")
    for i, (wb, wdev, wavg, wcount) in enumerate(EXPECTED_BUCKETS):
        if i >= len(df):
            break
        row = df.iloc[i]
        c.eq(f"df row {i} bucket", row["bucket"], pd.Timestamp(wb))
        c.eq(f"df row {i} device", row["device"], wdev)
        if wavg is None:
            c.check(f"df row {i} avg is NaN", pd.isna(row["avg"]), f"got {row['avg']!r}")
        else:
            c.eq(f"df row {i} avg", float(row["avg"]), wavg)
        c.eq(f"df row {i} count", int(row["count"]), wcount)

with c.step("pandas.read_sql raw rows", raw_sql(TABLE)):
    df = pd.read_sql(text(raw_sql(TABLE)), engine)
    c.eq("df columns", list(df.columns), ["time", "device", "temp", "reading", "ok", "n"])
    tdt = df["time"].dtype
    c.check("time dtype is tz-aware datetime64", isinstance(tdt, DatetimeTZDtype), f"got {tdt}")
    if isinstance(tdt, DatetimeTZDtype):
        c.check("time dtype tz is UTC", str(tdt.tz) in ("UTC", "utc"), f"got {tdt}")
    c.check("temp dtype is float64", df["temp"].dtype == "float64", f"got {df['temp'].dtype}")
    c.check("n dtype is int64", df["n"].dtype == "int64", f"got {df['n'].dtype}")
    # read_sql's default coerce_float=True turns Decimal into float64.
    c.check("reading dtype is float64 (coerce_float=True)", df["reading"].dtype == "float64",
            f"got {df['reading'].dtype}")
    c.check("ok dtype is object (bool with NULL)", df["ok"].dtype == object, f"got {df['ok'].dtype}")
    c.eq("df length", len(df), len(SORTED_ROWS))
    for i, (wt, wdev, wtemp, wreading, wok, wn) in enumerate(SORTED_ROWS[:len(df)]):
        row = df.iloc[i]
        c.eq(f"df row {i} time", row["time"], pd.Timestamp(wt))
        if wtemp is None:
            c.check(f"df row {i} temp NaN", pd.isna(row["temp"]), f"got {row['temp']!r}")
        else:
            c.eq(f"df row {i} temp", float(row["temp"]), wtemp)
        if wreading is None:
            c.check(f"df row {i} reading NaN", pd.isna(row["reading"]), f"got {row['reading']!r}")
        else:
            c.eq(f"df row {i} reading", float(row["reading"]), float(wreading))
        if wok is None:
            c.check(f"df row {i} ok is None", row["ok"] is None, f"got {row['ok']!r}")
        else:
            c.isinstance(f"df row {i} ok is bool", row["ok"], bool)
            c.eq(f"df row {i} ok", row["ok"], wok)
        c.eq(f"df row {i} n", int(row["n"]), wn)

with c.step("pandas.read_sql raw rows, coerce_float=False", raw_sql(TABLE)):
    df = pd.read_sql(text(raw_sql(TABLE)), engine, coerce_float=False)
    c.check("reading dtype is object", df["reading"].dtype == object, f"got {df['reading'].dtype}")
    got = list(df["reading"])
    c.eq("reading values (Decimal, None for NULL)", got, [r[3] for r in SORTED_ROWS])
    for i, v in enumerate(got):
        if v is not None:
            c.isinstance(f"coerce_float=False row {i} reading is Decimal", v, Decimal)

# A plain table made a hypertable in a transaction (SQLAlchemy runs every statement
# in one), as a migration tool does after metadata.create_all().
if not PLAIN_PG:
    with c.step("create_hypertable inside a transaction", "SELECT create_hypertable(...)"):
        with engine.connect() as conn2:
            with conn2.begin():
                conn2.execute(text("DROP TABLE IF EXISTS drv_sa_plain"))
                conn2.execute(text("CREATE TABLE drv_sa_plain (time timestamptz NOT NULL, v float8)"))
            with conn2.begin():
                conn2.execute(text("SELECT create_hypertable('drv_sa_plain', by_range('time'))"))
                conn2.execute(text("INSERT INTO drv_sa_plain VALUES ('2024-01-01 00:00:00+00', 1.5)"))
            with conn2.begin():
                n = conn2.execute(text("SELECT count(*) FROM timescaledb_information.hypertables "
                                       "WHERE hypertable_name = 'drv_sa_plain'")).scalar()
                c.eq("drv_sa_plain is a hypertable", n, 1)
                v = conn2.execute(text("SELECT v FROM drv_sa_plain")).scalar()
                c.eq("its row", v, 1.5)

engine.dispose()
c.finish()
