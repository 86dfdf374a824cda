"""Shared fixtures and a tiny check helper for the Python driver tests.

Every driver test inserts the same ROWS, runs the same time_bucket query
and compares against EXPECTED_BUCKETS / the raw rows.  Keep these in sync
with node_pg_test.js, JdbcTest.java and psql_basic.sql.
"""
import os
import sys
import traceback
from datetime import datetime, timedelta, timezone
from decimal import Decimal

HOST = os.environ.get("SUNDIAL_HOST", "127.0.0.1")
PORT = int(os.environ.get("SUNDIAL_PORT", "5432"))
DB = "sundial"
USER = "sundial"
# Set SUNDIAL_PLAIN_PG=1 to run against a stock PostgreSQL (no tsdb.* options).
PLAIN_PG = os.environ.get("SUNDIAL_PLAIN_PG") == "1"

UTC = timezone.utc
PLUS2 = timezone(timedelta(hours=2))
MINUS5 = timezone(timedelta(hours=-5))


def create_table_sql(table):
    cols = ("(time timestamptz NOT NULL, device text, temp double precision, "
            "reading numeric, ok boolean, n bigint)")
    sql = f"CREATE TABLE {table} {cols}"
    if not PLAIN_PG:
        sql += (" WITH (tsdb.hypertable, tsdb.partition_column='time', "
                "tsdb.chunk_interval='1 day')")
    return sql


# (time, device, temp, reading, ok, n) -- in insertion order, deliberately
# not sorted, with non-UTC offsets, NULLs, a numeric with a trailing zero and
# an int8 above 2**53.
ROWS = [
    (datetime(2024, 1, 1, 0, 0, 0, tzinfo=UTC), "a", 20.0, Decimal("12.50"), True, 1),
    (datetime(2024, 1, 1, 0, 30, 0, tzinfo=UTC), "a", 22.0, Decimal("0.001"), False, 9007199254740993),
    (datetime(2024, 1, 1, 3, 15, 0, tzinfo=PLUS2), "b", 30.0, None, None, -5),
    (datetime(2024, 1, 1, 1, 20, 0, tzinfo=UTC), "b", 31.5, Decimal("-3.25"), False, 42),
    (datetime(2024, 1, 1, 1, 45, 0, tzinfo=UTC), "a", None, Decimal("100"), True, 0),
    (datetime(2024, 1, 2, 0, 0, 0, tzinfo=UTC), "a", 99.0, Decimal("1"), True, 7),
    (datetime(2023, 12, 31, 18, 59, 59, tzinfo=MINUS5), "b", 50.0, Decimal("2"), True, 8),
]

# Raw rows as returned by ORDER BY time.
SORTED_ROWS = sorted(ROWS, key=lambda r: r[0])

BUCKET = timedelta(hours=1)
RANGE_START = datetime(2024, 1, 1, 0, 0, 0, tzinfo=UTC)
RANGE_END = datetime(2024, 1, 1, 2, 0, 0, tzinfo=UTC)

# (bucket, device, avg(temp), count(*))
EXPECTED_BUCKETS = [
    (datetime(2024, 1, 1, 0, 0, tzinfo=UTC), "a", 21.0, 2),
    (datetime(2024, 1, 1, 1, 0, tzinfo=UTC), "a", None, 1),
    (datetime(2024, 1, 1, 1, 0, tzinfo=UTC), "b", 30.75, 2),
]


def bucket_sql(table, ph, cast=False):
    """ph: three placeholders, e.g. ('%s','%s','%s') or ('$1','$2','$3').
    cast=True writes CAST(x AS interval) instead of x::interval (SQLAlchemy's
    text() would read ':bucket::interval' as literal text, not a bind)."""
    width = f"CAST({ph[0]} AS interval)" if cast else f"{ph[0]}::interval"
    return (f"SELECT time_bucket({width}, time) AS bucket, device, "
            f"avg(temp), count(*) FROM {table} "
            f"WHERE time >= {ph[1]} AND time < {ph[2]} "
            f"GROUP BY 1, 2 ORDER BY 1, 2")


def raw_sql(table):
    return f"SELECT time, device, temp, reading, ok, n FROM {table} ORDER BY time"


class Checker:
    """Collects check failures; an exception inside step() is fatal."""

    def __init__(self, name):
        self.name = name
        self.passed = 0
        self.failures = []
        self.current = None

    def check(self, what, cond, detail=""):
        if cond:
            self.passed += 1
        else:
            msg = f"{what}" + (f": {detail}" if detail else "")
            self.failures.append(msg)
            print(f"  CHECK FAILED: {msg}", file=sys.stderr)

    def eq(self, what, got, want):
        self.check(what, got == want, f"got {got!r}, want {want!r}")

    def isinstance(self, what, value, typ):
        self.check(what, isinstance(value, typ),
                   f"got {type(value).__name__} ({value!r}), want {getattr(typ, '__name__', typ)}")

    def step(self, what, sql=None):
        self.current = (what, sql)
        print(f"[{self.name}] {what}", file=sys.stderr)
        return self

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        if ev is None:
            return False
        what, sql = self.current
        sqlstate = (getattr(ev, "sqlstate", None)
                    or getattr(getattr(ev, "diag", None), "sqlstate", None))
        print(f"\nFAIL [{self.name}] step '{what}' raised {et.__module__}.{et.__name__}"
              + (f" (SQLSTATE {sqlstate})" if sqlstate else ""), file=sys.stderr)
        print(f"  error: {ev}", file=sys.stderr)
        if sql:
            print(f"  statement: {sql}", file=sys.stderr)
        traceback.print_exception(et, ev, tb, limit=4, file=sys.stderr)
        self.failures.append(f"step '{what}' raised: {ev}")
        self.finish()  # exits

    def finish(self):
        if self.failures:
            print(f"\nFAIL [{self.name}] {len(self.failures)} failure(s):", file=sys.stderr)
            for f in self.failures:
                print(f"  - {f}", file=sys.stderr)
        else:
            print(f"PASS [{self.name}]")
        print(f"{self.name}: {self.passed} passed, {len(self.failures)} failed")
        sys.exit(1 if self.failures else 0)


def check_aware(c, what, v, want):
    c.isinstance(f"{what} is datetime", v, datetime)
    if isinstance(v, datetime):
        c.check(f"{what} is timezone-aware", v.tzinfo is not None and v.utcoffset() is not None,
                f"got naive {v!r}")
        if v.tzinfo is not None:
            c.eq(f"{what} instant", v, want)


def check_float(c, what, v, want):
    if want is None:
        c.eq(f"{what} is NULL", v, None)
        return
    c.isinstance(f"{what} is float", v, float)
    if isinstance(v, float):
        c.check(f"{what} value", abs(v - want) < 1e-9, f"got {v!r}, want {want!r}")


def check_rows_python(c, rows, time_ok=check_aware):
    """Check raw rows from a DB-API style driver (psycopg, asyncpg, SQLAlchemy)."""
    c.eq("raw row count", len(rows), len(SORTED_ROWS))
    for i, (got, want) in enumerate(zip(rows, SORTED_ROWS)):
        p = f"row {i}"
        t, device, temp, reading, ok, n = tuple(got)
        wt, wdev, wtemp, wreading, wok, wn = want
        time_ok(c, f"{p} time", t, wt)
        c.isinstance(f"{p} device is str", device, str)
        c.eq(f"{p} device", device, wdev)
        check_float(c, f"{p} temp", temp, wtemp)
        if wreading is None:
            c.eq(f"{p} reading is NULL", reading, None)
        else:
            c.isinstance(f"{p} reading is Decimal", reading, Decimal)
            c.eq(f"{p} reading value", reading, wreading)
            # PostgreSQL keeps the scale of a numeric value: 12.50 stays 12.50. Sundial
            # keeps one scale per column (known gap, see README): checked on PostgreSQL.
            if PLAIN_PG:
                c.eq(f"{p} reading text (scale preserved)", str(reading), str(wreading))
        if wok is None:
            c.eq(f"{p} ok is NULL", ok, None)
        else:
            c.isinstance(f"{p} ok is bool", ok, bool)
            c.eq(f"{p} ok", ok, wok)
        c.check(f"{p} n is int", type(n) is int, f"got {type(n).__name__} ({n!r})")
        c.eq(f"{p} n", n, wn)


def check_buckets_python(c, rows, label="time_bucket"):
    c.eq(f"{label} row count", len(rows), len(EXPECTED_BUCKETS))
    for i, (got, want) in enumerate(zip(rows, EXPECTED_BUCKETS)):
        b, device, avg, count = tuple(got)
        wb, wdev, wavg, wcount = want
        check_aware(c, f"{label} row {i} bucket", b, wb)
        c.eq(f"{label} row {i} device", device, wdev)
        check_float(c, f"{label} row {i} avg", avg, wavg)
        c.check(f"{label} row {i} count is int", type(count) is int,
                f"got {type(count).__name__} ({count!r})")
        c.eq(f"{label} row {i} count", count, wcount)
