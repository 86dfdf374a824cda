#!/usr/bin/env python3
"""Runs a TimescaleDB tutorial-style application against two servers (Sundial and
TimescaleDB) statement by statement and compares what each statement answers: the
rows (floats to 9 significant digits, chunk names and job ids masked) or the error's
SQLSTATE. The application is an energy-metering app as TimescaleDB's docs write it: a
hypertable of readings beside a relational table of meters, hourly and daily continuous
aggregates with policies, dashboard queries, compression and retention managed with
the management functions in ordinary SQL. The data is random (seeded), so the check is
not tuned to one data set.

Usage: tsdb_app.py SUNDIAL_DSN TIMESCALEDB_DSN [--seed N] [--meters N] [--days N]
Prints each statement that differs, then one JSON line with the tally.
"""

import argparse
import datetime as dt
import decimal
import json
import random
import re
import sys

import psycopg
from psycopg.types.json import Jsonb

START = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)


def app(days: int) -> list[str]:
    """The application's statements, in order (data loading happens in between)."""
    end = (START + dt.timedelta(days=days)).isoformat()
    mid = (START + dt.timedelta(days=days // 2)).isoformat()
    early = (START + dt.timedelta(days=2)).isoformat()
    return [
        # Schema.
        "CREATE TABLE meters (id int PRIMARY KEY, site text NOT NULL, kind text, meta jsonb)",
        "CREATE TABLE readings (time timestamptz NOT NULL, meter_id int NOT NULL, "
        "kwh double precision, voltage real, status text) WITH (tsdb.hypertable, "
        "tsdb.partition_column = 'time', tsdb.chunk_interval = '1 day', "
        "tsdb.segmentby = 'meter_id', tsdb.orderby = 'time DESC')",
        "@load",
        "SELECT hypertable_name, num_dimensions, num_chunks > 0, compression_enabled "
        "FROM timescaledb_information.hypertables WHERE hypertable_name = 'readings'",
        "SELECT column_name, dimension_type, time_interval FROM "
        "timescaledb_information.dimensions WHERE hypertable_name = 'readings'",
        "SELECT proc_name, schedule_interval FROM timescaledb_information.jobs "
        "WHERE hypertable_name = 'readings' ORDER BY 1",
        # Dashboard panels.
        "SELECT count(*), count(kwh), round(sum(kwh)::numeric, 3) FROM readings",
        "SELECT time_bucket('1 day', time) AS day, round(avg(kwh)::numeric, 6), "
        "max(voltage) FROM readings GROUP BY day ORDER BY day",
        "SELECT m.site, count(*), round(sum(r.kwh)::numeric, 4) FROM readings r JOIN "
        "meters m ON m.id = r.meter_id GROUP BY m.site ORDER BY m.site",
        "SELECT meter_id, last(kwh, time), first(kwh, time) FROM readings "
        "GROUP BY meter_id ORDER BY meter_id",
        f"SELECT time_bucket('6 hours', time) AS b, meter_id, count(*) FROM readings "
        f"WHERE time >= '{early}' AND time < '{mid}' AND meter_id < 3 GROUP BY 1, 2 "
        f"ORDER BY 1, 2",
        "SELECT DISTINCT ON (meter_id) meter_id, time, kwh FROM readings "
        "ORDER BY meter_id, time DESC",
        "SELECT status, count(*) FROM readings GROUP BY status ORDER BY status NULLS FIRST",
        f"SELECT time_bucket_gapfill('1 day', time) AS day, meter_id, "
        f"locf(round(avg(kwh)::numeric, 4)) FROM readings WHERE meter_id = 1 AND "
        f"time >= '{START.isoformat()}' AND time < '{end}' GROUP BY 1, 2 ORDER BY 1",
        # Continuous aggregates and their policies.
        "CREATE MATERIALIZED VIEW readings_hourly WITH (timescaledb.continuous) AS "
        "SELECT time_bucket('1 hour', time) AS bucket, meter_id, avg(kwh) AS avg_kwh, "
        "max(voltage) AS max_v, count(*) AS n FROM readings GROUP BY 1, 2 WITH NO DATA",
        "CREATE MATERIALIZED VIEW readings_daily WITH (timescaledb.continuous) AS "
        "SELECT time_bucket('1 day', time) AS bucket, meter_id, sum(kwh) AS kwh, "
        "count(*) AS n FROM readings GROUP BY 1, 2 WITH NO DATA",
        f"CALL refresh_continuous_aggregate('readings_hourly', '{START.isoformat()}', '{end}')",
        f"CALL refresh_continuous_aggregate('readings_daily', '{START.isoformat()}', '{end}')",
        "SELECT add_continuous_aggregate_policy('readings_hourly', start_offset => "
        "INTERVAL '3 days', end_offset => INTERVAL '1 hour', schedule_interval => "
        "INTERVAL '1 hour') > 0 AS ok",
        "SELECT add_continuous_aggregate_policy('readings_hourly', start_offset => "
        "INTERVAL '3 days', end_offset => INTERVAL '1 hour', schedule_interval => "
        "INTERVAL '1 hour', if_not_exists => true) AS job_id",
        "SELECT view_name, materialized_only FROM "
        "timescaledb_information.continuous_aggregates ORDER BY view_name",
        "SELECT bucket, meter_id, round(avg_kwh::numeric, 6), n FROM readings_hourly "
        "WHERE meter_id = 2 ORDER BY bucket LIMIT 24",
        "SELECT sum(n), round(sum(kwh)::numeric, 3) FROM readings_daily",
        "SELECT d.bucket, m.site, round(sum(d.kwh)::numeric, 4) FROM readings_daily d "
        "JOIN meters m ON m.id = d.meter_id GROUP BY 1, 2 ORDER BY 1, 2",
        # Chunk management as ordinary SQL.
        "SELECT count(*) FROM show_chunks('readings')",
        f"SELECT count(*) FROM show_chunks('readings', older_than => TIMESTAMPTZ '{mid}')",
        "SELECT count(*) FROM show_chunks('readings') c JOIN "
        "timescaledb_information.chunks ch ON ch.chunk_schema || '.' || ch.chunk_name = c::text",
        "SELECT approximate_row_count('readings') >= 0, hypertable_size('readings') > 0",
        # Compression.
        f"SELECT count(compress_chunk(c)) FROM show_chunks('readings', older_than => "
        f"TIMESTAMPTZ '{mid}') c",
        "SELECT count(*) FILTER (WHERE is_compressed), count(*) FROM "
        "timescaledb_information.chunks WHERE hypertable_name = 'readings'",
        "SELECT total_chunks, number_compressed_chunks FROM "
        "hypertable_compression_stats('readings')",
        "SELECT count(*) FILTER (WHERE compression_status = 'Compressed') FROM "
        "chunk_compression_stats('readings')",
        "SELECT segmentby, orderby FROM "
        "timescaledb_information.hypertable_compression_settings WHERE hypertable::text = 'readings'",
        "SELECT count(*), round(sum(kwh)::numeric, 3) FROM readings",
        f"INSERT INTO readings VALUES ('{early}', 1, 1.5, 230, 'late')",
        "SELECT count(*) FILTER (WHERE is_compressed) FROM "
        "timescaledb_information.chunks WHERE hypertable_name = 'readings'",
        "UPDATE readings SET status = 'fixed' WHERE status = 'late'",
        "SELECT status, count(*) FROM readings GROUP BY status ORDER BY status NULLS FIRST",
        "DELETE FROM readings WHERE status = 'fixed'",
        f"SELECT compress_chunk(c, if_not_compressed => false) FROM show_chunks('readings', "
        f"older_than => TIMESTAMPTZ '{early}') c",
        "SELECT count(decompress_chunk(c)) FROM show_chunks('readings') c",
        "SELECT count(*) FILTER (WHERE is_compressed) FROM "
        "timescaledb_information.chunks WHERE hypertable_name = 'readings'",
        # Retention (a window the data is inside: the job may run at once on either
        # server, and must drop nothing while the script runs).
        "SELECT add_retention_policy('readings', INTERVAL '10 years', if_not_exists => true) "
        "IS NOT NULL",
        "SELECT add_retention_policy('readings', INTERVAL '10 years', if_not_exists => true)",
        "SELECT proc_name FROM timescaledb_information.jobs WHERE hypertable_name = "
        "'readings' ORDER BY 1",
        "SELECT config ->> 'drop_after', config ? 'hypertable_id', pg_typeof(config)::text "
        "FROM timescaledb_information.jobs WHERE proc_name = 'policy_retention'",
        "SELECT remove_retention_policy('readings')",
        # Device metadata in jsonb.
        "SELECT id, meta, meta::text FROM meters ORDER BY id",
        "SELECT meta ->> 'vendor' AS vendor, count(*) FROM meters GROUP BY 1 ORDER BY 1",
        "SELECT m.meta ->> 'vendor', round(sum(r.kwh)::numeric, 3) FROM readings r JOIN "
        "meters m ON m.id = r.meter_id WHERE m.meta @> '{\"tags\": [\"roof\"]}' "
        "GROUP BY 1 ORDER BY 1",
        "SELECT count(*) FROM readings r JOIN meters m ON m.id = r.meter_id "
        "WHERE r.kwh > (m.meta -> 'limits' ->> 'kwh')::float8",
        "SELECT id, meta #>> '{limits,kwh}', meta ? 'limits', jsonb_typeof(meta -> 'tags') "
        "FROM meters ORDER BY id",
        "UPDATE meters SET meta = jsonb_set(meta, '{limits,kwh}', '4.0') WHERE meta ? 'limits'",
        "UPDATE meters SET meta = (meta || '{\"fw\": \"2.1\"}') - 'tags' WHERE id % 2 = 0",
        "SELECT id, meta FROM meters ORDER BY meta, id",
        "SELECT id, jsonb_object_keys(meta) AS k FROM meters ORDER BY 1, 2",
        "SELECT meta -> 'vendor', jsonb_object_agg(id, meta -> 'limits') FROM meters "
        "GROUP BY 1 ORDER BY 1",
        "SELECT jsonb_build_object('meter', id, 'site', site, 'kind', kind) FROM meters "
        "WHERE meta = '{\"vendor\": \"acme\", \"fw\": \"2.1\"}' ORDER BY id",
        "SELECT count(*) FROM show_chunks('readings')",
        f"WITH d AS (SELECT * FROM drop_chunks('readings', older_than => TIMESTAMPTZ "
        f"'{early}')) SELECT count(*) AS removed FROM d",
        "SELECT count(*) FROM show_chunks('readings')",
        f"SELECT count(*) FROM readings WHERE time < '{early}'",
        "SELECT count(*), round(sum(kwh)::numeric, 3) FROM readings",
        "SELECT sum(n) > 0 FROM readings_hourly",
        # Errors an application meets.
        "SELECT add_retention_policy('meters', INTERVAL '1 day')",
        "SELECT show_chunks('meters')",
        "SELECT remove_retention_policy('readings')",
        "CALL run_job(999999)",
        "SELECT compress_chunk('_timescaledb_internal._hyper_999_999_chunk')",
        "INSERT INTO readings VALUES (NULL, 1, 1, 1, 'x')",
        "INSERT INTO meters VALUES (1, 'dup', NULL)",
        # Teardown.
        "DROP MATERIALIZED VIEW readings_daily",
        "DROP MATERIALIZED VIEW readings_hourly",
        "DROP TABLE readings",
        "DROP TABLE meters",
    ]


def data(seed: int, meters: int, days: int):
    rng = random.Random(seed)
    sites = [f"site-{i}" for i in range(max(2, meters // 3))]
    def meta():
        m = {"vendor": rng.choice(["acme", "volt", "zap"])}
        if rng.random() < 0.7:
            m["limits"] = {"kwh": rng.choice([2.5, 3, 4.25]), "volt": 240}
        if rng.random() < 0.6:
            m["tags"] = rng.sample(["roof", "basement", "outdoor", "new"], rng.randint(1, 3))
        return None if rng.random() < 0.1 else Jsonb(m)

    ms = [
        (i, rng.choice(sites), rng.choice(["solar", "grid", None]), meta())
        for i in range(meters)
    ]
    rows = []
    for i in range(meters):
        t = START + dt.timedelta(minutes=rng.randrange(0, 60))
        while t < START + dt.timedelta(days=days):
            kwh = None if rng.random() < 0.02 else round(rng.uniform(0, 5), 3)
            volt = round(rng.gauss(230, 3), 1)
            status = rng.choice(["ok", "ok", "ok", "warn", None])
            rows.append((t, i, kwh, volt, status))
            t += dt.timedelta(minutes=rng.choice([15, 30, 45, 60]))
    return ms, rows


MASKS = [
    (re.compile(r"_hyper_\d+_\d+_chunk"), "_hyper_N_N_chunk"),
    (re.compile(r"^\d{4,}$"), "<job id>"),
]


def norm(v):
    if isinstance(v, float):
        return float(f"{v:.9g}")
    if isinstance(v, decimal.Decimal):
        return str(v.normalize()) if v == v.to_integral() else str(v)
    if isinstance(v, dt.timedelta):
        return str(v)
    if isinstance(v, str):
        for rx, rep in MASKS:
            v = rx.sub(rep, v)
        return v
    return v


def run(conn, sql):
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            if cur.description is None:
                return ("ok", None)
            return ("rows", [tuple(norm(v) for v in r) for r in cur.fetchall()])
    except psycopg.Error as e:
        return ("error", e.sqlstate)


def load(conn, ms, rows):
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO meters VALUES (%s, %s, %s, %s)", ms)
        for i in range(0, len(rows), 1000):
            cur.executemany(
                "INSERT INTO readings VALUES (%s, %s, %s, %s, %s)", rows[i : i + 1000]
            )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sundial")
    ap.add_argument("timescaledb")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--meters", type=int, default=12)
    ap.add_argument("--days", type=int, default=10)
    a = ap.parse_args()
    ms, rows = data(a.seed, a.meters, a.days)
    conns = [psycopg.connect(d, autocommit=True) for d in (a.sundial, a.timescaledb)]
    for c in conns:
        c.execute("SET TimeZone = 'UTC'")
        for obj in ("MATERIALIZED VIEW readings_daily", "MATERIALIZED VIEW readings_hourly"):
            run(c, f"DROP {obj}")
        run(c, "DROP TABLE IF EXISTS readings")
        run(c, "DROP TABLE IF EXISTS meters")
    same = 0
    differ = []
    stmts = app(a.days)
    for sql in stmts:
        if sql == "@load":
            for c in conns:
                load(c, ms, rows)
            continue
        got, want = (run(c, sql) for c in conns)
        if got == want:
            same += 1
        else:
            differ.append(sql)
            print(f"DIFFERS: {sql}\n  sundial:     {got}\n  timescaledb: {want}")
    print(
        json.dumps(
            {
                "statements": len(stmts) - 1,
                "same": same,
                "differ": len(differ),
                "rows": len(rows),
                "seed": a.seed,
            }
        )
    )
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
