#!/usr/bin/env python3
"""Fills a sqllogictest draft's expected results from PostgreSQL 15.

Usage: scripts/slt-from-pg.py DRAFT.slt > sql-tests/NAME.slt
       (PG_URL, default postgresql://postgres@127.0.0.1:55432/benchmark, from
       ../shared/peers/start_postgres.sh)

Every record runs on PostgreSQL in a fresh schema with `WITH (tsdb.…)` and
`create_hypertable(…)` calls removed; `query` records without results get
PostgreSQL's rows, `statement count` records without a number get its row count,
`statement error` records get its SQLSTATE. A record marked `# sundial-only` on the
line before it is copied unchanged and not run. Fails when PostgreSQL refuses a
`statement ok`.
"""
import os
import re
import sys

import psycopg

URL = os.environ.get("PG_URL", "postgresql://postgres@127.0.0.1:55432/benchmark")
TSDB_WITH = re.compile(r"\s*WITH\s*\((\s*tsdb\.[^)]*)\)", re.IGNORECASE)


def pg_sql(sql):
    return TSDB_WITH.sub("", sql)


def cell(v):
    if v is None:
        return "NULL"
    if v == "":
        return "(empty)"
    return v


class Text(psycopg.adapt.Loader):
    """Every value as the server's text."""

    def load(self, data):
        return bytes(data).decode()


def main():
    text = open(sys.argv[1]).read()
    records = re.split(r"\n\s*\n", text.strip("\n"))
    out = []
    conn = psycopg.connect(URL, autocommit=True)
    for t in conn.adapters.types:
        conn.adapters.register_loader(t.oid, Text)
    conn.execute("DROP SCHEMA IF EXISTS slt_from_pg CASCADE")
    conn.execute("CREATE SCHEMA slt_from_pg")
    conn.execute("SET search_path = slt_from_pg")
    conn.execute("SET TimeZone = 'UTC'")
    for rec in records:
        lines = rec.split("\n")
        comments = [l for l in lines if l.startswith("#")]
        body = [l for l in lines if not l.startswith("#")]
        if not body or any("sundial-only" in c for c in comments):
            out.append(rec)
            continue
        head = body[0]
        if "----" in body:
            sql = "\n".join(body[1 : body.index("----")])
        else:
            sql = "\n".join(body[1:])
        cur = conn.cursor()
        if head.startswith("statement error"):
            try:
                cur.execute(pg_sql(sql), prepare=False)
            except psycopg.Error as e:
                head = f"statement error ({e.sqlstate})"
            else:
                sys.exit(f"PostgreSQL accepted: {sql}")
            out.append("\n".join(comments + [head, sql]))
            continue
        try:
            cur.execute(pg_sql(sql), prepare=False)
        except psycopg.Error as e:
            sys.exit(f"PostgreSQL refused ({e.sqlstate}: {e}): {sql}")
        if head.startswith("statement count"):
            head = f"statement count {cur.rowcount}"
            out.append("\n".join(comments + [head, sql]))
        elif head.startswith("query"):
            rows = cur.fetchall() if cur.description else []
            res = [" ".join(cell(v) for v in r) for r in rows]
            if "rowsort" in head:
                res.sort()
            out.append("\n".join(comments + [head, sql, "----"] + res))
        else:
            out.append("\n".join(comments + [head, sql]))
    print("\n\n".join(out))


if __name__ == "__main__":
    main()
